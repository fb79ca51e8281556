"""How far an implementation's report is from the reference's, when bytes do not agree.

Byte equality is the bar for implementations of SPEC.md; a simulator with other conventions
(another scheduler, other rounding) needs to know how far apart the two are. This module
compares two report values, request by request (matched by id), and collects each metric's
errors; ``figures`` turns the errors into the numbers the run report shows.

The rules (conformance/README.md, Agreement):

- per-request metrics: ``arrival_us``, ``first_token_us``, ``completion_us`` and every
  ``token_times_us`` entry (by index), of requests both reports hold; a value that is null on
  one side only (one completed, the other rejected) is a *null mismatch*, not a sample;
- summary metrics: the R27 percentiles (``p50``, ``p90``, ``p95``, ``p99``) of ``queue_us``,
  ``ttft_us``, ``e2e_us`` and ``itl_us``;
- absolute error ``|impl - ref|`` in µs; relative error ``|impl - ref| / max(base, 1)``, where
  the base of a time point of a request (first token, completion, a token) is the reference's
  time since the request's arrival (the latency to that point), and of an arrival or a summary
  percentile the reference's value itself;
- a distribution's p99 is the nearest-rank percentile of R27: sort ascending, take rank
  ``ceil(99 n / 100)`` (at least 1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Per-request time points, in the order they are reported.
REQUEST_METRICS: tuple[str, ...] = ("arrival_us", "first_token_us", "completion_us")
TOKEN_METRIC = "token_times_us"
#: The R27 statistics of the summary whose percentiles are compared (R28).
SUMMARY_STATISTICS: tuple[str, ...] = ("queue_us", "ttft_us", "e2e_us", "itl_us")
PERCENTILES: tuple[str, ...] = ("p50", "p90", "p95", "p99")
#: Every metric, in report order.
METRICS: tuple[str, ...] = (
    *REQUEST_METRICS,
    TOKEN_METRIC,
    *(f"summary.{stat}.{p}" for stat in SUMMARY_STATISTICS for p in PERCENTILES),
)


@dataclass
class Errors:
    """One metric's errors: absolute (µs) and relative, one pair per compared sample."""

    absolute: list[int] = field(default_factory=list)
    relative: list[float] = field(default_factory=list)
    null_mismatches: int = 0

    def add(self, actual: int | None, reference: int | None, base: int) -> None:
        """One sample; ``base`` is what its relative error divides by (at least 1 is used)."""
        if actual is None and reference is None:
            return
        if actual is None or reference is None:
            self.null_mismatches += 1
            return
        error = abs(actual - reference)
        self.absolute.append(error)
        self.relative.append(error / max(base, 1))

    def extend(self, other: Errors) -> None:
        self.absolute.extend(other.absolute)
        self.relative.extend(other.relative)
        self.null_mismatches += other.null_mismatches


@dataclass
class Comparison:
    """What comparing one implementation report with the reference's found."""

    errors: dict[str, Errors]
    requests: dict[str, int]
    """Counts: ``reference`` (requests in the reference report), ``matched`` (ids in both),
    ``missing`` (only in the reference's), ``extra`` (only in the implementation's),
    ``outcome_mismatches`` (completed in one, rejected in the other) and
    ``token_count_mismatches`` (both completed, with different numbers of tokens)."""


def nearest_rank(values: list[int] | list[float], percent: int) -> int | float | None:
    """R27's nearest-rank percentile of ``values`` (sorted here), or None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-percent * len(ordered) // 100))
    return ordered[rank - 1]


def figures(errors: Errors) -> dict[str, Any]:
    """A metric's distribution of errors as the run report shows it."""
    count = len(errors.absolute)
    exact = sum(1 for error in errors.absolute if error == 0)
    return {
        "samples": count,
        "exact": exact,
        "exact_share": exact / count if count else None,
        "max_abs_us": max(errors.absolute) if count else None,
        "p99_abs_us": nearest_rank(errors.absolute, 99),
        "max_rel": max(errors.relative) if count else None,
        "p99_rel": nearest_rank(errors.relative, 99),
        "null_mismatches": errors.null_mismatches,
    }


def _by_id(report: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The report's requests by id; the first entry wins should an id repeat."""
    found: dict[str, Mapping[str, Any]] = {}
    for entry in report["requests"]:
        found.setdefault(entry["id"], entry)
    return found


def _compare_request(
    actual: Mapping[str, Any], reference: Mapping[str, Any], errors: dict[str, Errors]
) -> tuple[bool, bool]:
    """Add one matched request's samples; whether its outcome and its token count differ."""
    arrival = reference["arrival_us"]  # null for a request cut off before it arrived (R62)
    since = 0 if arrival is None else arrival
    errors["arrival_us"].add(actual["arrival_us"], arrival, since)
    for metric in REQUEST_METRICS[1:]:
        expected = reference[metric]
        base = expected - since if expected is not None else 0
        errors[metric].add(actual[metric], expected, base)
    tokens = errors[TOKEN_METRIC]
    ours, theirs = actual[TOKEN_METRIC], reference[TOKEN_METRIC]
    for mine, time in zip(ours, theirs, strict=False):
        error = abs(mine - time)
        tokens.absolute.append(error)
        tokens.relative.append(error / max(time - since, 1))
    outcome_differs = actual["outcome"] != reference["outcome"]
    return outcome_differs, not outcome_differs and len(ours) != len(theirs)


def compare(actual: Mapping[str, Any], reference: Mapping[str, Any]) -> Comparison:
    """Compare an implementation's report value with the reference's (both at the current
    report version)."""
    errors = {metric: Errors() for metric in METRICS}
    ours, theirs = _by_id(actual), _by_id(reference)
    outcome_mismatches = token_count_mismatches = 0
    for request_id, expected in theirs.items():
        mine = ours.get(request_id)
        if mine is None:
            continue
        outcome_differs, count_differs = _compare_request(mine, expected, errors)
        outcome_mismatches += outcome_differs
        token_count_mismatches += count_differs
    for statistic in SUMMARY_STATISTICS:
        mine_stats = actual["summary"][statistic]
        expected_stats = reference["summary"][statistic]
        for percentile in PERCENTILES:
            value = expected_stats[percentile]
            errors[f"summary.{statistic}.{percentile}"].add(
                mine_stats[percentile], value, abs(value) if value is not None else 0
            )
    matched = sum(1 for request_id in theirs if request_id in ours)
    requests = {
        "reference": len(theirs),
        "matched": matched,
        "missing": len(theirs) - matched,
        "extra": sum(1 for request_id in ours if request_id not in theirs),
        "outcome_mismatches": outcome_mismatches,
        "token_count_mismatches": token_count_mismatches,
    }
    return Comparison(errors=errors, requests=requests)


def pooled(comparisons: Iterable[Comparison]) -> dict[str, Errors]:
    """Every metric's errors over several cases, pooled (the overall distribution)."""
    total = {metric: Errors() for metric in METRICS}
    for comparison in comparisons:
        for metric, errors in comparison.errors.items():
            total[metric].extend(errors)
    return total
