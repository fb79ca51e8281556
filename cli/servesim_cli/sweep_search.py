"""``servesim sweep --target``: the smallest value of an axis that meets every condition.

For each combination of the other axes, the target axis's values (sorted ascending) are
bisected: ``low`` is the largest index known to fail, ``high`` the smallest known to meet, and
each round probes points evenly spaced between them (as many as there are parallel slots, so
``--jobs 4`` narrows the gap five-fold per round instead of two-fold). This assumes the metrics
do not get worse as the axis grows: with more workers each one is routed fewer requests, which
holds for latency in practice but is not a law (random routing can be unlucky). The search
therefore reports the bracketing points (the answer, which meets, and the value just below it,
which fails) and flags any probe that contradicts monotonicity.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from servesim_cli.sweep_file import (
    Condition,
    Point,
    Setting,
    SweepPlan,
    Target,
    other_axes,
    point_for,
)
from servesim_cli.sweep_run import PointResult

RunBatch = Callable[[Sequence[Point]], list[PointResult]]


def meets(result: PointResult, conditions: Sequence[Condition]) -> bool:
    """Whether a replayed point meets every condition (a point that could not be replayed
    does not)."""
    if not result.ok:
        return False
    for condition in conditions:
        value = result.columns[f"{condition.metric}_{condition.statistic}"]
        if value is None or value > condition.at_most_us:
            return False
    return True


@dataclass
class Search:
    """The bisection for one combination of the other axes."""

    others: tuple[tuple[str, Setting], ...]
    values: tuple[int, ...]
    low: int = -1
    high: int = -1  # set to len(values) by __post_init__
    results: dict[int, PointResult] = field(default_factory=dict)
    outcomes: dict[int, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.high = len(self.values)

    @property
    def done(self) -> bool:
        """Whether the bracket is closed."""
        return self.high - self.low <= 1

    def probes(self, count: int) -> list[int]:
        """Up to ``count`` indices evenly spaced strictly between ``low`` and ``high``."""
        span = self.high - self.low
        slots = min(count, span - 1)
        return sorted({self.low + (step + 1) * span // (slots + 1) for step in range(slots)})

    def record(self, index: int, result: PointResult, conditions: Sequence[Condition]) -> None:
        """One probe's result; the bracket is narrowed by ``settle``."""
        self.results[index] = result
        self.outcomes[index] = meets(result, conditions)

    def settle(self) -> None:
        """Narrow the bracket to the smallest meeting index and the largest failing one below."""
        meeting = [index for index, ok in self.outcomes.items() if ok]
        self.high = min(meeting, default=len(self.values))
        failing = [index for index, ok in self.outcomes.items() if not ok and index < self.high]
        self.low = max(failing, default=-1)

    @property
    def answer(self) -> int | None:
        """The smallest value that meets, or None when even the largest does not."""
        return self.values[self.high] if self.high < len(self.values) else None

    def contradictions(self) -> list[tuple[int, int]]:
        """Pairs (meeting value, larger failing value) among the probes: non-monotone."""
        return [
            (self.values[low], self.values[high])
            for low, low_ok in self.outcomes.items()
            for high, high_ok in self.outcomes.items()
            if low < high and low_ok and not high_ok
        ]


def search(plan: SweepPlan, target: Target, run_batch: RunBatch, parallel: int) -> list[Search]:
    """Bisect every combination of the other axes at once, ``parallel`` probes per round."""
    values = tuple(sorted(value for value in plan.values(target.axis) if isinstance(value, int)))
    searches = [Search(others, values) for others in other_axes(plan, target.axis)]
    while active := [item for item in searches if not item.done]:
        share = max(1, parallel // len(active))
        batch = [(item, index) for item in active for index in item.probes(share)]
        points = [
            point_for(plan, (*item.others, (target.axis, item.values[index])))
            for item, index in batch
        ]
        for (item, index), result in zip(batch, run_batch(points), strict=True):
            item.record(index, result, target.conditions)
        for item in active:
            item.settle()
    return searches
