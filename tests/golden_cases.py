"""The golden corpus as the plain-loop tests read it: the manifest's entries, a case's
hand-derived values (its DERIVATION.md) and the plain loop's replay of a case's inputs.

The tests of each section's plain loop (``test_plain_loop_pools.py``, ``_styles.py``,
``_disagg.py``) hold the clean-room loop to the values derived by hand, so they share one
reading of a derivation and one way of replaying a case (R71: ``--trace`` exactly when the
manifest says so).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.helpers import REPO

GOLDEN = REPO / "golden"
#: Each case's manifest entry, by id (``valid/NAME`` or ``invalid/NAME``).
MANIFEST = {
    case["id"]: case
    for case in json.loads((GOLDEN / "manifest.json").read_text(encoding="utf-8"))["cases"]
}
HEADING = "## Expected values, by JSON pointer into the report"


def derived_cases(*prefixes: str) -> list[str]:
    """The valid cases whose name starts with one of ``prefixes`` and that have a derivation."""
    return sorted(
        path.parent.name
        for prefix in prefixes
        for path in (GOLDEN / "valid").glob(f"{prefix}*/DERIVATION.md")
    )


def at_pointer(document: Any, pointer: str) -> Any:
    """The value at ``pointer`` (RFC 6901); KeyError or IndexError when there is none."""
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        document = document[int(part)] if isinstance(document, list) else document[part]
    return document


def derived_values(case: Path) -> dict[str, Any]:
    """A derivation's values by JSON pointer: every JSON object block after its heading (the
    whole file in older derivations without one), keys that are pointers, and ``!absent``
    (pointers the report must not have)."""
    text = (case / "DERIVATION.md").read_text(encoding="utf-8")
    text = text[max(text.find(HEADING), 0) :]
    values: dict[str, Any] = {}
    for block in re.findall(r"```json\s*\n(.*?)```", text, re.S):
        value = json.loads(block)
        if isinstance(value, dict):
            values.update((k, v) for k, v in value.items() if k[:1] == "/" or k == "!absent")
    return values


def replay_case(plain: ModuleType, case: Path, output: Path, *options: str) -> tuple[int, str]:
    """The plain loop (``plain``, the loaded module) on a golden case's inputs, writing
    ``output``: its exit code and standard error."""
    arguments = ["replay", "--scenario", str(case / "scenario.json")]
    arguments += ["--workload", str(case / "workload.json"), "--output", str(output)]
    if (case / "timing-profiles").is_dir():
        for profile in sorted((case / "timing-profiles").glob("*.json")):
            arguments += ["--timing-profile", f"{profile.stem}={profile}"]
    else:
        arguments += ["--timing-profile", str(case / "timing-profile.json")]
    if MANIFEST.get(f"{case.parent.name}/{case.name}", {}).get("trace", False):
        arguments.append("--trace")  # R71: --trace exactly when the case has trace true
    error = io.StringIO()
    with contextlib.redirect_stderr(error):
        code = plain.main([*arguments, *options])
    return code, error.getvalue()


def wrong_values(report: Any, values: dict[str, Any]) -> list[str]:
    """Where ``report`` differs from a derivation's ``values``: one line a pointer."""
    values = dict(values)
    wrong = []
    for pointer in values.pop("!absent", []):
        with contextlib.suppress(KeyError, IndexError):
            at_pointer(report, pointer)
            wrong.append(f"{pointer}: present")
    for pointer, value in values.items():
        got = at_pointer(report, pointer)
        if got != value or not (
            type(got) is type(value) or {type(got), type(value)} <= {int, float}
        ):
            wrong.append(f"{pointer}: derived {value!r}, got {got!r}")
    return wrong
