"""Per-request TPOT, exact: for every completed request with at least two output tokens,
``(completion_us - first_token_us) / (output_tokens - 1)``, the mean gap between its tokens.

Its statistics follow R27 (nearest rank) over those exact values, as R63's ``summary.tpot_us``
of a report 5.0 does before it rounds them (an older report has no such member, R64's migration
computes it the same way). The request members this reads are checked here: the schema check
(``figures_derivation``) looks at the first request alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from functools import cmp_to_key
from typing import Any, TypeGuard

from servesim.contract.errors import InputProblem, InvalidInput, pointer
from servesim.contract.nearest_rank import PERCENTILES
from servesim_cli.figures_model import Statistics


def tpot_statistics(requests: Sequence[Any], file: str) -> Statistics:
    """R27 over each completed request's mean gap between its output tokens (two or more)."""
    spans: dict[int, int] = {}  # tokens - 1 -> the sum of (completion - first token) of those
    samples: list[tuple[int, int]] = []  # (completion - first token, tokens - 1)
    for index, request in enumerate(requests):
        if not isinstance(request, dict) or request.get("outcome") != "completed":
            if not isinstance(request, dict) or request.get("outcome") not in _NOT_COMPLETED:
                raise InvalidInput([_request_problem(request, index, file)])
            continue
        tokens, first, last = (request.get(name) for name in _TPOT_MEMBERS)
        if not (_is_count(tokens) and _is_count(first) and _is_count(last) and first <= last):
            raise InvalidInput([_request_problem(request, index, file)])
        if tokens >= 2:
            spans[tokens - 1] = spans.get(tokens - 1, 0) + last - first
            samples.append((last - first, tokens - 1))
    if not samples:
        return Statistics(0, None, None, None, tuple((percent, None) for percent in PERCENTILES))
    # Sorted by the correctly rounded quotient, the samples are in order but within runs of
    # equal floats; the exact comparison then fixes those few in about one pass.
    samples.sort(key=lambda sample: sample[0] / sample[1])
    samples.sort(key=cmp_to_key(_compare_quotients))
    count = len(samples)
    # Summed by denominator: adding 12,000 Fractions one by one takes seconds.
    total = sum((Fraction(span, gaps) for gaps, span in spans.items()), Fraction(0))
    return Statistics(
        count=count,
        min=Fraction(*samples[0]),
        max=Fraction(*samples[-1]),
        mean=total / count,
        percentiles=tuple(
            (percent, Fraction(*samples[max(1, -(-percent * count // 100)) - 1]))
            for percent in PERCENTILES
        ),
    )


#: What a completed request's TPOT is derived from (R26).
_TPOT_MEMBERS = ("output_tokens", "first_token_us", "completion_us")

#: The other outcomes (R26; ``cut_off`` from report 5.0, R62): no TPOT sample.
_NOT_COMPLETED = frozenset({"rejected", "cut_off", "failed"})  # R118: failed (report 9.0)


def _compare_quotients(first: tuple[int, int], second: tuple[int, int]) -> int:
    """-1, 0 or 1 as a/b is below, equal to or above c/d (b and d positive)."""
    left, right = first[0] * second[1], second[0] * first[1]
    return (left > right) - (left < right)


def _request_problem(request: Any, index: int, file: str) -> InputProblem:
    """Why one request cannot give its TPOT (R26)."""
    if not isinstance(request, dict):
        return InputProblem(file, pointer(["requests", index]), "expected an object")
    outcome = request.get("outcome")
    if outcome != "completed" and outcome not in _NOT_COMPLETED:
        return InputProblem(
            file,
            pointer(["requests", index, "outcome"]),
            f'expected "completed", "rejected", "cut_off" or "failed", found {outcome!r}',
        )
    for name in _TPOT_MEMBERS:
        if not _is_count(number := request.get(name)):
            return InputProblem(
                file,
                pointer(["requests", index, name]),
                f"expected an integer >= 0 in a completed request, found {number!r}",
            )
    return InputProblem(
        file,
        pointer(["requests", index, "completion_us"]),
        "a request cannot complete before its first token",
    )


def _is_count(number: object) -> TypeGuard[int]:
    return isinstance(number, int) and not isinstance(number, bool) and number >= 0
