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
    agreement: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The machine-readable record of one run (schemas/harness/v5/run-report.schema.json);
    ``agreement`` is the section of an agreement run (``agreement_run.agreement_section``)."""
    counts = Counter(result.outcome for result in results)
    report = {
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
                "compared_without": list(result.compared_without),
            }
            for result in results
        ],
    }
    if agreement is not None:
        report["agreement"] = agreement
    return report


def markdown_summary(report: dict[str, Any]) -> str:
    """A short Markdown page: counts per outcome, then every case that needs attention."""
    described = report["implementation"]["description"]
    lines = [
        f"## servesim conformance: {described.get('name', '?')} {described.get('version', '')}",
        "",
        f"Corpus {report['corpus_version']}, harness {report['tool']['version']}.",
        "",
    ]
    if "agreement" in report:  # an agreement run judges no case
        return "\n".join(lines + agreement_markdown(report["agreement"])) + "\n"
    lines += [
        "| outcome | cases |",
        "|---|---|",
        *(f"| {outcome} | {count} |" for outcome, count in report["summary"].items() if count),
        "",
    ]
    attention = [case for case in report["cases"] if Outcome(case["outcome"]).is_problem]
    if attention:
        lines += ["| case | outcome | message |", "|---|---|---|"]
        lines += [f"| `{c['id']}` | {c['outcome']} | {_cell(c['message'])} |" for c in attention]
    else:
        lines.append("No failures.")
    without = [case["id"] for case in report["cases"] if case.get("compared_without")]
    if without:
        lines += [
            "",
            f"{len(without)} cases were compared without features the implementation does not "
            "declare (their report members are left out of the comparison).",
        ]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "/")


def _number(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}g}"


def metric_rows(metrics: dict[str, dict[str, Any]]) -> list[str]:
    """A Markdown table of each metric's figures."""
    rows = [
        "| metric | samples | exact | max abs µs | p99 abs µs | max rel | p99 rel "
        "| null mismatches |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for metric, f in metrics.items():
        share = "—" if f["exact_share"] is None else f"{f['exact_share']:.1%}"
        rows.append(
            f"| {metric} | {f['samples']} | {share} | {_number(f['max_abs_us'])} | "
            f"{_number(f['p99_abs_us'])} | {_number(f['max_rel'])} | {_number(f['p99_rel'])} | "
            f"{f['null_mismatches']} |"
        )
    return rows


def agreement_markdown(agreement: dict[str, Any]) -> list[str]:
    """The agreement section: overall figures per metric, then every case in one line."""
    overall = agreement["overall"]
    statuses = ", ".join(f"{n} {status}" for status, n in overall["statuses"].items() if n)
    lines = [
        "### Agreement with the reference",
        "",
        f"Cases: {statuses or 'none'}. Errors are pooled over the {overall['cases']} compared "
        "cases; relative error is |impl - ref| / max(base, 1), the base being the reference's "
        "latency to the time point (its value for arrivals and summary percentiles); p99 is "
        "nearest-rank (R27).",
        "",
        *metric_rows(overall["metrics"]),
        "",
        "| case | status | requests matched | token times exact | token p99 abs µs "
        "| token p99 rel | message |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in agreement["cases"]:
        if case["metrics"] is None:
            lines.append(
                f"| `{case['id']}` | {case['status']} | — | — | — | — | {_cell(case['message'])} |"
            )
            continue
        tokens = case["metrics"]["token_times_us"]
        share = "—" if tokens["exact_share"] is None else f"{tokens['exact_share']:.1%}"
        requests = case["requests"]
        lines.append(
            f"| `{case['id']}` | {case['status']} | {requests['matched']}/"
            f"{requests['reference']} | {share} | {_number(tokens['p99_abs_us'])} | "
            f"{_number(tokens['p99_rel'])} | {_cell(case['message'])} |"
        )
    return lines
