"""The run report (JSON, with a schema) and its Markdown summary for CI pages."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from typing import Any

from servesim_conformance.implementation import Description, Implementation
from servesim_conformance.outcomes import CaseResult, Outcome


def run_report(
    *,
    tool_version: str,
    corpus_version: str,
    implementation: Implementation,
    description: Description,
    results: list[CaseResult],
) -> dict[str, Any]:
    """The machine-readable record of one run (schemas/harness/v2/run-report.schema.json)."""
    counts = Counter(result.outcome for result in results)
    return {
        "tool": {"name": "servesim-conformance", "version": tool_version},
        "corpus_version": corpus_version,
        "implementation": {"argv": list(implementation.argv), "description": description.raw},
        "summary": {outcome.value: counts.get(outcome, 0) for outcome in Outcome},
        "cases": [
            {
                "id": result.case_id,
                "tier": result.tier,
                "outcome": result.outcome.value,
                "duration_s": round(result.duration_s, 6),
                "message": result.message,
                "first_difference": asdict(result.difference) if result.difference else None,
            }
            for result in results
        ],
    }


def markdown_summary(report: dict[str, Any]) -> str:
    """A short Markdown page: counts per outcome, then every case that needs attention."""
    described = report["implementation"]["description"]
    lines = [
        f"## servesim conformance: {described.get('name', '?')} {described.get('version', '')}",
        "",
        f"Corpus {report['corpus_version']}, harness {report['tool']['version']}.",
        "",
        "| outcome | cases |",
        "|---|---|",
        *(f"| {outcome} | {count} |" for outcome, count in report["summary"].items() if count),
        "",
    ]
    attention = [case for case in report["cases"] if Outcome(case["outcome"]).is_problem]
    if attention:
        lines += ["| case | outcome | message |", "|---|---|---|"]
        lines += [
            f"| `{c['id']}` | {c['outcome']} | {c['message'].replace('|', '/')} |"
            for c in attention
        ]
    else:
        lines.append("No failures.")
    return "\n".join(lines) + "\n"
