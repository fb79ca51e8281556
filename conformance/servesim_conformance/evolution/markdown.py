"""The review as Markdown, ready to paste into a pull request.

A summary table first (one row per document kind, the verdicts and the policy's word), then a
section per changed document: its changes with their pointers, each direction's verdict with
the generated counterexample folded away in ``<details>``, and the migration.
"""

from __future__ import annotations

import json

from servesim_conformance.evolution.model import Comparison, Direction, Verdict, Witness
from servesim_conformance.evolution.policy import Level
from servesim_conformance.evolution.render import describe_change, effect_label
from servesim_conformance.evolution.review import DocumentReview, Review

_LEVEL_WORDS = {
    Level.OK: "ok",
    Level.UNDECIDED: "**needs a decision**",
    Level.VIOLATION: "**violation**",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _verdict(document: DocumentReview, direction: Direction) -> str:
    if document.comparison is None:
        return "-"
    verdict = document.comparison.result(direction).verdict
    word = verdict.value if verdict is Verdict.COMPATIBLE else f"**{verdict.value}**"
    return word + (" (matters)" if direction in document.comparison.matters else "")


def _versions(document: DocumentReview) -> str:
    before = document.base.version if document.base else "(none)"
    after = document.head.version if document.head else "(removed)"
    return before if before == after else f"{before} -> {after}"


def _summary(review: Review) -> list[str]:
    level = review.level
    headline = {
        Level.OK: "Nothing against the versioning policy.",
        Level.UNDECIDED: "Some changes need a reviewer's decision.",
        Level.VIOLATION: "**Some changes break the versioning policy.**",
    }[level]
    lines = [
        f"## Schema review: {review.base_label} -> {review.head_label}",
        "",
        headline,
        "",
        "| document | version | backward | forward | policy |",
        "|---|---|---|---|---|",
    ]
    for document in review.documents:
        policy = "; ".join(
            f"{_LEVEL_WORDS[finding.level]}: {finding.message}"
            if finding.level is not Level.OK
            else finding.message
            for finding in document.findings
        )
        if not document.changed:
            policy = "unchanged"
        lines.append(
            f"| {document.kind} | {_versions(document)} | "
            f"{_verdict(document, Direction.BACKWARD)} | {_verdict(document, Direction.FORWARD)} | "
            f"{_cell(policy)} |"
        )
    lines.append("")
    if review.releases:
        lines += ["### Released schemas", ""]
        lines += [
            f"- {_LEVEL_WORDS[finding.level]}: {finding.message}" for finding in review.releases
        ]
        lines.append("")
    else:
        lines += ["Every released schema matches `schemas/released/SHA256SUMS`.", ""]
    return lines


def _document(document: DocumentReview) -> list[str]:
    comparison = document.comparison
    lines = [f"### {document.kind} {_versions(document)}", ""]
    if comparison is None:
        return [*lines, *(f"- {finding.message}" for finding in document.findings), ""]
    lines += [f"{comparison.role[0].upper()}{comparison.role[1:]}.", ""]
    lines += ["| change | where | backward | forward |", "|---|---|---|---|"]
    for index, change in enumerate(comparison.changes):
        shown = comparison.witnesses.get(index, {})
        cells = [effect_label(change, direction, direction in shown) for direction in Direction]
        lines.append(
            f"| {_cell(describe_change(change))} | `{change.pointer or '/'}` | "
            f"{cells[0]} | {cells[1]} |"
        )
    lines.append("")
    for direction in Direction:
        lines += _direction(comparison, direction)
    lines += ["**Policy:**", ""]
    lines += [
        f"- {_LEVEL_WORDS[finding.level]}: {finding.message}" for finding in document.findings
    ]
    lines.append("")
    return lines


def _witness(
    comparison: Comparison, direction: Direction, witness: Witness, what: str
) -> list[str]:
    old, new = comparison.old_version, comparison.new_version
    accepted, rejected = (old, new) if direction is Direction.BACKWARD else (new, old)
    return [
        f"<details><summary>{what}: a document valid under {accepted} that {rejected} "
        "rejects (generated)</summary>",
        "",
        "```json",
        json.dumps(witness.document, indent=2),
        "```",
        "",
        f"{rejected} rejects it (its `schema_version` read as one {rejected} reads):",
        "",
        *(
            f"- at `{rejection.instance_pointer or '/'}`: {_cell(rejection.message)}"
            for rejection in witness.rejections
        ),
        "",
        "</details>",
        "",
    ]


def _direction(comparison: Comparison, direction: Direction) -> list[str]:
    """One direction: its verdict, why, and a counterexample for every change shown to break."""
    result = comparison.result(direction)
    question = direction.question[0].upper() + direction.question[1:]
    lines = [f"**{direction.value.capitalize()}: {result.verdict.value}.** {question}", ""]
    lines += [f"- {reason}" for reason in result.reasons]
    if result.reasons:
        lines.append("")
    shown = False
    for index, change in enumerate(comparison.changes):
        witness = comparison.witnesses.get(index, {}).get(direction)
        if witness is not None:
            what = f"{change.kind} at `{change.pointer}`"
            lines += _witness(comparison, direction, witness, what)
            shown = True
    if not shown and result.witness is not None:
        lines += _witness(comparison, direction, result.witness, "The changes together")
    return lines


def review_markdown(review: Review) -> str:
    """The review as one Markdown document."""
    lines = _summary(review)
    for document in review.documents:
        if document.changed:
            lines += _document(document)
    return "\n".join(lines).rstrip() + "\n"
