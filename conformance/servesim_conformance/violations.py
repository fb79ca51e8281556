"""What an invariant check raises, shared by the invariant modules."""

from __future__ import annotations

from typing import Any

Document = dict[str, Any]


class InvariantViolation(AssertionError):
    """A report breaks a rule of the specification."""


def require(condition: bool, rule: str, message: str) -> None:
    """Raise ``InvariantViolation`` naming ``rule`` unless ``condition`` holds."""
    if not condition:
        raise InvariantViolation(f"{rule}: {message}")
