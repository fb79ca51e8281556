"""``servesim schema diff``'s output: plain text for people, JSON for programs.

Both are renderings of the same ``Comparison``; neither computes anything.
"""

from __future__ import annotations

import json
from typing import Any

from servesim_conformance.evolution.model import Change, Comparison, Direction, Effect, Witness


def describe_change(change: Change) -> str:
    """One change in words: its kind and, when it has one, its detail."""
    detail = change.detail
    if (
        not detail
        and change.kind not in {"version_changed"}
        and (change.old, change.new)
        != (
            None,
            None,
        )
    ):
        detail = f"{json.dumps(change.old)} -> {json.dumps(change.new)}"
    if change.kind == "version_changed":
        detail = f"{', '.join(change.old or [])} -> {', '.join(change.new or [])}"
    if change.kind == "annotation_changed":
        detail = ""
    return f"{change.kind} ({detail})" if detail else change.kind


def effect_label(change: Change, direction: Direction, shown: bool) -> str:
    """The effect of a change in words, saying whether a generated document showed it.

    A rule that expects a break is a suspicion until a document shows it; a break hidden by
    another change (a dependency on a property the new schema forbids anyway) stays one.
    """
    effect = change.effect(direction)
    if shown:
        return "breaks" if effect is Effect.BREAKS else f"{effect.value}, shown to break"
    return "may break (not shown)" if effect is Effect.BREAKS else effect.value


def witness_json(witness: Witness) -> dict[str, Any]:
    """A counterexample as data: the document and the rejecting schema's complaints."""
    return {
        "valid_under": witness.direction.accepting,
        "rejected_by": witness.direction.rejecting,
        "document": witness.document,
        "rejections": [
            {
                "pointer": rejection.instance_pointer,
                "schema_pointer": rejection.schema_pointer,
                "message": rejection.message,
            }
            for rejection in witness.rejections
        ],
    }


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    """The whole comparison as JSON-ready data (``servesim schema diff --json``)."""
    changes = []
    for index, change in enumerate(comparison.changes):
        shown = comparison.witnesses.get(index, {})
        changes.append(
            {
                "pointer": change.pointer,
                "kind": change.kind,
                "detail": change.detail,
                "backward": change.backward.value,
                "forward": change.forward.value,
                "shown": sorted(direction.value for direction in shown),
            }
        )
    directions = {}
    for direction in Direction:
        result = comparison.result(direction)
        directions[direction.value] = {
            "verdict": result.verdict.value,
            "reasons": list(result.reasons),
            "counterexample": witness_json(result.witness) if result.witness else None,
        }
    return {
        "document": comparison.name,
        "old_version": comparison.old_version,
        "new_version": comparison.new_version,
        "role": comparison.role,
        "matters": [direction.value for direction in comparison.matters],
        "verdict": comparison.verdict().value,
        "changes": changes,
        **directions,
    }


def _indented(text: str, prefix: str) -> list[str]:
    return [prefix + line for line in text.splitlines()]


def comparison_text(comparison: Comparison, directions: tuple[Direction, ...]) -> str:
    """The comparison for a terminal: changes, then each direction with its counterexample."""
    lines = [
        f"{comparison.name} {comparison.old_version} -> {comparison.new_version}: "
        f"{comparison.role}",
    ]
    if not comparison.changes:
        lines.append("  no changes")
    for index, change in enumerate(comparison.changes):
        shown = comparison.witnesses.get(index, {})
        marks = [
            f"{direction.value}: {effect_label(change, direction, direction in shown)}"
            for direction in Direction
        ]
        lines.append(f"  {change.pointer or '/'}  {describe_change(change)}  [{', '.join(marks)}]")
    for direction in Direction:
        result = comparison.result(direction)
        matters = " (matters)" if direction in comparison.matters else ""
        lines.append(f"{direction.value}{matters}: {result.verdict.value} - {direction.question}")
        lines.extend(f"  {reason}" for reason in result.reasons)
        if result.witness is not None:
            old, new = comparison.old_version, comparison.new_version
            accepted, rejected = (old, new) if direction is Direction.BACKWARD else (new, old)
            lines.append(f"  counterexample, valid under {accepted} and rejected by {rejected}:")
            lines.extend(_indented(json.dumps(result.witness.document, indent=2), "    "))
            for rejection in result.witness.rejections:
                lines.append(
                    f"  rejected at {rejection.instance_pointer or '/'}: {rejection.message}"
                )
    verdict = comparison.verdict(directions)
    chosen = ", ".join(direction.value for direction in directions)
    lines.append(f"verdict ({chosen}): {verdict.value}")
    return "\n".join(lines)
