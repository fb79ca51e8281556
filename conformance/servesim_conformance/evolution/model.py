"""The vocabulary of a schema comparison: changes, effects, directions, verdicts, witnesses.

Everything here is plain data so that the text, JSON and Markdown renderings (and the tests) read
the same values. A change is located by an RFC 6901 JSON pointer into the schema, as errors are
located by pointers into documents elsewhere in servesim.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

#: Candidate documents tried per counterexample search; enough for every change in the table of
#: known changes (tests/test_evolution_diff.py), and a few seconds on a report-sized schema.
DEFAULT_EXAMPLES = 300


class InvalidSchema(ValueError):
    """A schema that is not valid Draft 2020-12: no comparison means anything then."""


class Direction(enum.Enum):
    """Which readers and which documents a compatibility question is about.

    BACKWARD: readers of the new schema, documents written against the old one (L(old) within
    L(new)). FORWARD: readers of the old schema, documents written against the new one (L(new)
    within L(old)). The names are Confluent Schema Registry's.
    """

    BACKWARD = "backward"
    FORWARD = "forward"

    @property
    def question(self) -> str:
        """The question the direction asks, for people."""
        if self is Direction.BACKWARD:
            return "do new readers accept every old document?"
        return "do old readers accept every new document?"

    @property
    def accepting(self) -> str:
        """Which schema the documents of this direction are written against."""
        return "old" if self is Direction.BACKWARD else "new"

    @property
    def rejecting(self) -> str:
        """Which schema reads them."""
        return "new" if self is Direction.BACKWARD else "old"


class Effect(enum.Enum):
    """What the rules say one change does in one direction, before any document is tried.

    SAFE is a proof by rule (the change only relaxes what that direction's readers accept);
    BREAKS means the rule expects documents to be rejected (a witness is looked for); UNKNOWN
    means no rule decides (a regular expression changed, a condition changed, ...).
    """

    SAFE = "safe"
    BREAKS = "breaks"
    UNKNOWN = "unknown"

    def worst(self, other: Effect) -> Effect:
        """The combined effect of two parts of one change: a break outweighs doubt."""
        order = (Effect.SAFE, Effect.UNKNOWN, Effect.BREAKS)
        return max(self, other, key=order.index)


class Verdict(enum.Enum):
    """The answer for one direction, with the command line's exit code.

    COMPATIBLE: every change is safe by rule. BREAKING: a generated document is accepted by one
    schema and rejected by the other (the verdict is never given without one). UNDECIDED: some
    change is not safe by rule and no document showed a break.
    """

    COMPATIBLE = "compatible"
    BREAKING = "breaking"
    UNDECIDED = "undecided"

    @property
    def exit_code(self) -> int:
        """0 compatible, 1 breaking, 2 undecided (jsoncompat's convention)."""
        return {Verdict.COMPATIBLE: 0, Verdict.BREAKING: 1, Verdict.UNDECIDED: 2}[self]

    @staticmethod
    def combine(verdicts: list[Verdict]) -> Verdict:
        """The verdict of several questions: any break is a break, then any doubt is doubt."""
        if Verdict.BREAKING in verdicts:
            return Verdict.BREAKING
        if Verdict.UNDECIDED in verdicts:
            return Verdict.UNDECIDED
        return Verdict.COMPATIBLE


@dataclass(frozen=True)
class Change:
    """One difference between two schemas and its effect in each direction.

    ``pointer`` locates the change in the schemas (both have the same structure down to it; for
    an addition it is where the new schema has the keyword). ``keys`` are the locations whose
    rejections this change explains, used to tell which change a counterexample demonstrates;
    they default to ``pointer``.
    """

    pointer: str
    kind: str
    backward: Effect
    forward: Effect
    detail: str = ""
    old: Any = None
    new: Any = None
    keys: tuple[str, ...] = ()

    def effect(self, direction: Direction) -> Effect:
        """The rule's effect in ``direction``."""
        return self.backward if direction is Direction.BACKWARD else self.forward

    @property
    def blame_keys(self) -> tuple[str, ...]:
        """Where a rejection caused by this change is reported (see ``oracle.rejections``)."""
        return self.keys or (self.pointer,)

    @property
    def is_annotation(self) -> bool:
        """Whether the change cannot change what any reader accepts."""
        return self.backward is Effect.SAFE and self.forward is Effect.SAFE


@dataclass(frozen=True)
class Rejection:
    """Why a schema rejected a document: where in the document, which keyword, what message.

    ``keys`` are the schema locations the rejection can be blamed on: the failing keyword, and
    for a missing or unexpected property the property itself, so that it can be matched to the
    change that caused it (``Change.blame_keys``).
    """

    instance_pointer: str
    schema_pointer: str
    message: str
    keys: tuple[str, ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class Witness:
    """A generated document that one schema accepts and the other rejects.

    ``document`` is valid under the accepting schema of ``direction``; ``rejections`` are the
    rejecting schema's complaints about it (with its ``schema_version`` relabelled to one that
    schema reads, so that the version field itself is never the reason).
    """

    direction: Direction
    document: Any
    rejections: tuple[Rejection, ...]


@dataclass(frozen=True)
class DirectionResult:
    """The verdict in one direction, the witness that proves a break, and what was tried."""

    direction: Direction
    verdict: Verdict
    witness: Witness | None = None
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """Everything ``servesim schema diff`` says about one pair of schemas."""

    name: str
    old_version: str
    new_version: str
    changes: tuple[Change, ...]
    backward: DirectionResult
    forward: DirectionResult
    matters: tuple[Direction, ...]
    role: str
    witnesses: dict[int, dict[Direction, Witness]] = field(default_factory=dict)

    def result(self, direction: Direction) -> DirectionResult:
        """The result in ``direction``."""
        return self.backward if direction is Direction.BACKWARD else self.forward

    def verdict(self, directions: tuple[Direction, ...] | None = None) -> Verdict:
        """The verdict over ``directions`` (default: the ones that matter for this document)."""
        chosen = directions if directions is not None else self.matters
        return Verdict.combine([self.result(direction).verdict for direction in chosen])
