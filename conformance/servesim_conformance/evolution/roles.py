"""Who reads and who writes each document, and so which compatibility direction matters.

An implementation *reads* the three inputs: a new implementation must read the inputs people
already have, so for inputs BACKWARD compatibility matters. An implementation *writes* the
report, which the conformance harness, the golden comparator and whatever dashboards exist
read, possibly older than the writer: for the report FORWARD compatibility matters. The
harness's own documents follow the same logic by who writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servesim_conformance.evolution.model import Direction


@dataclass(frozen=True)
class Role:
    """Who writes and who reads one kind of document, and the direction that protects readers."""

    writers: str
    readers: str
    matters: tuple[Direction, ...]

    @property
    def summary(self) -> str:
        """One sentence for the diff and the review."""
        directions = " and ".join(direction.value for direction in self.matters)
        return (
            f"written by {self.writers}, read by {self.readers}: {directions} compatibility matters"
        )


_INPUT = Role(
    writers="users and the conformance harness",
    readers="implementations",
    matters=(Direction.BACKWARD,),
)

ROLES: dict[str, Role] = {
    "scenario": _INPUT,
    "workload": _INPUT,
    "timing_profile": _INPUT,
    "report": Role(
        writers="implementations",
        readers="the conformance harness, the golden comparator and report consumers",
        matters=(Direction.FORWARD,),
    ),
    "harness/describe": Role(
        writers="implementations (--describe)",
        readers="the conformance harness",
        matters=(Direction.FORWARD,),
    ),
    "harness/implementation": Role(
        writers="implementers", readers="the conformance harness", matters=(Direction.BACKWARD,)
    ),
    "harness/expected-failures": Role(
        writers="implementers", readers="the conformance harness", matters=(Direction.BACKWARD,)
    ),
    "harness/golden-manifest": Role(
        writers="corpus maintainers",
        readers="the conformance harness",
        matters=(Direction.BACKWARD,),
    ),
    "harness/run-report": Role(
        writers="the conformance harness", readers="CI tools", matters=(Direction.FORWARD,)
    ),
}

#: For a schema of no known kind, both directions are checked.
UNKNOWN_ROLE = Role(
    writers="unknown writers",
    readers="unknown readers",
    matters=(Direction.BACKWARD, Direction.FORWARD),
)


def kind_of(schema: Any) -> str | None:
    """The document kind a schema describes: its ``document`` const, or its harness ``$id``."""
    if not isinstance(schema, dict):
        return None
    member = schema.get("properties", {}).get("document")
    if isinstance(member, dict) and isinstance(member.get("const"), str):
        return str(member["const"])
    identifier = schema.get("$id")
    if isinstance(identifier, str) and identifier.startswith("urn:servesim:harness:"):
        return "harness/" + identifier.rsplit(":", 1)[-1]
    return None


def role_of(kind: str | None) -> Role:
    """The role of ``kind``; both directions when the kind is unknown."""
    return ROLES.get(kind or "", UNKNOWN_ROLE)
