"""What running one case can come to, as data (SPEC.md R71, R73).

Only ``PASS`` and ``XFAIL``-listed cases that still fail leave a run green; everything else is
reported, and skips never count as passes (SPEC.md R73).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum


class Outcome(StrEnum):
    """The verdict on one case."""

    PASS = "pass"
    FAIL = "fail"
    """A schema-valid report with different bytes, or an invalid input that was accepted."""
    INVALID_REPORT = "invalid-report"
    """Exit 0 with a report that is not valid under the report schema."""
    ERROR = "error"
    """A crash, a signal, an unexpected exit code, or exit 0 without a report."""
    TIMEOUT = "timeout"
    SKIP = "skip"
    """The implementation does not declare a feature the case needs."""
    XFAIL = "xfail"
    """Failed, and listed in the expected-failure manifest."""
    XPASS = "xpass"
    """Passed, but listed in the expected-failure manifest: the run fails so the list is fixed."""

    @property
    def is_problem(self) -> bool:
        """Whether this outcome makes a run fail."""
        return self in {
            Outcome.FAIL,
            Outcome.INVALID_REPORT,
            Outcome.ERROR,
            Outcome.TIMEOUT,
            Outcome.XPASS,
        }


@dataclass(frozen=True)
class Difference:
    """Where an actual report first departs from the expected one."""

    pointer: str
    expected: object
    actual: object
    count: int
    """How many leaf values differ in all."""

    def __str__(self) -> str:
        where = self.pointer or "(root)"
        return (
            f"first difference at {where}: expected {_short(self.expected)}, "
            f"got {_short(self.actual)} ({self.count} differing value"
            f"{'' if self.count == 1 else 's'} in all)"
        )


def _short(value: object, limit: int = 100) -> str:
    """``value`` as compact JSON, cut to ``limit`` characters; arrays and objects by size."""
    if isinstance(value, list) and value:
        return f"an array of {len(value)} items"
    if isinstance(value, dict) and value:
        return f"an object with {len(value)} members"
    text = json.dumps(value) if value != "(missing)" else "(missing)"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one case, with what a person needs to act on it."""

    case_id: str
    tier: str
    outcome: Outcome
    message: str = ""
    duration_s: float = 0.0
    difference: Difference | None = None
    details: dict[str, str] = field(default_factory=dict)
    """Extra context: exit code, the tail of stderr, the argv that was run."""
    compared_without: tuple[str, ...] = ()
    """The additive features the case needs but the implementation does not declare: the case
    ran without them and was compared without the report members they add."""
