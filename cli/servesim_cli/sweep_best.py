"""The best point of a ``pools`` sweep: which split of the workers to deploy.

``--target`` bisects the workers axis because more workers seldom make a latency worse. A split
of a fixed number of workers between pools has no such order: moving a worker from the decode
pools to the prefill pools shortens the prefill queue (TTFT) and lengthens the decode batches
(ITL), so a percentile may fall and then rise along the splits, and neither end is safe to
assume. The ``pools`` axis is therefore never bisected: every point is replayed and, for each
combination of the other axes, the best point is marked by a stated order:

1. it replayed to the end and, with ``--target`` on ``pools``, meets every condition;
2. the most goodput requests (R63: the requests that met the scenario's ``slo``; without
   ``slo``, the completed requests);
3. then the lowest p99 TTFT, then the lowest p99 ITL (a missing value counts as the largest);
4. then the first in the grid's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servesim_cli.sweep_file import Setting, SweepPlan, Target
from servesim_cli.sweep_run import PointResult
from servesim_cli.sweep_search import meets

#: The order, said once for the table's legend and the answers.
ORDER = (
    "the most goodput requests (those that met the scenario's slo, R63, or without slo the "
    "completed ones), then the lowest p99 TTFT, then the lowest p99 ITL, then the first in "
    "the grid"
)


def goodput(result: PointResult) -> int:
    """The requests that count for the order: goodput's, or the completed ones without slo."""
    value = result.columns["goodput_requests"]
    if value is None:
        value = result.columns["completed"]
    return int(value or 0)


def _key(result: PointResult) -> tuple[Any, ...]:
    """Smaller is better."""

    def latency(name: str) -> tuple[int, int]:
        value = result.columns[name]
        return (1, 0) if value is None else (0, int(value))

    return (-goodput(result), latency("ttft_us_p99"), latency("itl_us_p99"), result.point.index)


@dataclass(frozen=True)
class Group:
    """The points that differ only in their pools, and the best of the eligible ones."""

    others: tuple[tuple[str, Setting], ...]
    results: tuple[PointResult, ...]
    eligible: tuple[PointResult, ...]

    @property
    def best(self) -> PointResult | None:
        """The best eligible point, or None when none is eligible."""
        return min(self.eligible, key=_key, default=None)


def eligible(result: PointResult, target: Target | None) -> bool:
    """Whether a point can be the best: it replayed to the end and, with a target on pools,
    meets every condition."""
    if target is not None and target.axis == "pools":
        return meets(result, target.conditions)
    return result.ok


def groups(plan: SweepPlan, results: Sequence[PointResult], target: Target | None) -> list[Group]:
    """The results grouped by every axis but ``pools``, in the grid's order; none when the
    pools axis is not swept."""
    if "pools" not in dict(plan.axes):
        return []
    members: dict[tuple[tuple[str, Setting], ...], list[PointResult]] = {}
    for result in sorted(results, key=lambda result: result.point.index):
        others = tuple((axis, value) for axis, value in result.point.settings if axis != "pools")
        members.setdefault(others, []).append(result)
    return [
        Group(
            others,
            tuple(group),
            tuple(result for result in group if eligible(result, target)),
        )
        for others, group in members.items()
    ]


def best_indices(
    plan: SweepPlan, results: Sequence[PointResult], target: Target | None
) -> frozenset[int]:
    """The point index of each group's best point."""
    return frozenset(
        best.point.index for group in groups(plan, results, target) if (best := group.best)
    )
