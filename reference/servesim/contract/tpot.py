"""R63's ``summary.tpot_us``: statistics of exact rational samples, each rounded once (R24).

A request's time per output token is ``(completion_us - first_token_us) / (output_tokens - 1)``,
a rational that is seldom an integer. R63 applies R27 to these exact values: the samples are
sorted by exact value, the nearest-rank sample is chosen, and only then rounded to binary64
(R24); the mean is the exact sum over n, rounded once. Rounding each sample first, or summing
floats, could change the last bit, and two implementations would write different bytes.

This module is pure and needs nothing of the simulation, so that both the report writer and the
report 4.0 -> 5.0 migration (R64, which has only a 4.0 report's request members) compute the
member the same way.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from servesim.contract.nearest_rank import ranked_statistics


def tpot_sample(first_token_us: int, completion_us: int, output_tokens: int) -> tuple[int, int]:
    """R63: one completed request's sample as (numerator, denominator), in lowest terms.

    Only for a request with at least two output tokens (one token has no gap and no sample).
    """
    if output_tokens < 2:
        raise ValueError("a request with fewer than two output tokens has no tpot sample")
    numerator, denominator = completion_us - first_token_us, output_tokens - 1
    divisor = math.gcd(numerator, denominator)
    return numerator // divisor, denominator // divisor


def tpot_statistics(samples: Iterable[tuple[int, int]]) -> dict[str, Any]:
    """R63: count, min, max, mean and percentiles of exact samples ``numerator / denominator``.

    Each sample is a pair of integers (denominator > 0), as ``tpot_sample`` makes them. Equal
    samples are counted once and sorted once, and the sum is taken per distinct denominator,
    which keeps the integers small on a workload of many requests.
    """
    counts = Counter(_lowest_terms(numerator, denominator) for numerator, denominator in samples)
    total = sum(counts.values())
    ordered = _ascending(counts)
    mean = float(_exact_sum(counts) / total) if total else None  # R24: the exact mean, once
    return ranked_statistics(counts, ordered, mean, _rounded)


def _ascending(pairs: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Distinct samples in exact ascending order: sorted by their quotients rounded to binary64
    (fast), then each stretch of equal roundings by exact value (seldom more than one sample).

    The rounding is monotone (Python's int / int is correctly rounded), so a sample smaller
    than another never rounds to a larger float: only samples that round alike may be out of
    exact order after the first sort, and they lie next to each other.
    """
    ordered = sorted(pairs, key=_rounded_quotient)
    quotients = [_rounded_quotient(pair) for pair in ordered]
    start = 0
    for end in range(1, len(ordered) + 1):
        if end == len(ordered) or quotients[end] != quotients[start]:
            if end - start > 1:
                ordered[start:end] = sorted(ordered[start:end], key=lambda pair: Fraction(*pair))
            start = end
    return ordered


def _rounded_quotient(pair: tuple[int, int]) -> float:
    return pair[0] / pair[1]


def _lowest_terms(numerator: int, denominator: int) -> tuple[int, int]:
    if denominator <= 0:
        raise ValueError(f"a sample's denominator must be positive, not {denominator}")
    divisor = math.gcd(numerator, denominator)
    return numerator // divisor, denominator // divisor


def _exact_sum(counts: Mapping[tuple[int, int], int]) -> Fraction:
    """The exact sum of every sample (with its multiplicity), summed per denominator first."""
    by_denominator: dict[int, int] = defaultdict(int)
    for (numerator, denominator), count in counts.items():
        by_denominator[denominator] += numerator * count
    return sum(
        (Fraction(numerator, denominator) for denominator, numerator in by_denominator.items()),
        Fraction(0),
    )


def _rounded(pair: tuple[int, int]) -> float | int:
    """R24: the sample rounded once to binary64 (Python's int / int is correctly rounded).

    A whole number is returned as an int, which canonical JSON prints the same way (R23); the
    int keeps that obvious to a reader of the value.
    """
    numerator, denominator = pair
    if denominator == 1:
        return numerator
    return numerator / denominator
