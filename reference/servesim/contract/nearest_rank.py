"""R27's statistics: count, min, max, mean and nearest-rank percentiles of counted samples.

One place for the rule, whatever the samples are: the integer latencies of the report
(``servesim.report.writer.statistics_of_counts``) and R63's exact rational TPOT samples
(``servesim.contract.tpot``), which are ordered by exact value and rounded only when shown.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

#: R27: the percentiles every latency statistic reports.
PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)

Sample = TypeVar("Sample")


def rank(count: int, percent: int) -> int:
    """R27: the 1-based rank of the ``percent``-th percentile among ``count`` samples."""
    return max(1, -(-percent * count // 100))


def nearest_rank(sorted_values: Sequence[int], percent: int) -> int:
    """R27: the nearest-rank percentile, ``sorted_values[ceil(percent * n / 100) - 1]``."""
    return sorted_values[rank(len(sorted_values), percent) - 1]


def ranked_statistics(
    counts: Mapping[Sample, int],
    ordered: Sequence[Sample],
    mean: float | None,
    shown: Callable[[Sample], Any],
) -> dict[str, Any]:
    """R27 over samples given as sample -> how often it occurs, ``ordered`` their distinct
    values ascending, ``mean`` already computed (R24) and ``shown`` what the report writes of a
    chosen sample; every field but ``count`` is null when there are none."""
    total = sum(counts.values())
    result: dict[str, Any] = {"count": total}
    if not total:
        result.update(min=None, max=None, mean=None)
        result.update({f"p{percent}": None for percent in PERCENTILES})
        return result
    result.update(min=shown(ordered[0]), max=shown(ordered[-1]), mean=mean)
    cumulative = list(itertools.accumulate(counts[sample] for sample in ordered))
    for percent in PERCENTILES:
        position = bisect.bisect_left(cumulative, rank(total, percent))
        result[f"p{percent}"] = shown(ordered[position])
    return result
