"""Which lines and which values R44 uses: step 1's seeded split into fitting and held-out
lines, and the evenly spaced values of steps 2 and 3 (the prefill knots, the grid's axes).

Of n sorted distinct values, k evenly spaced ones are those at rank
``round(i * (n - 1) / (k - 1))`` (halves up) for i in 0..k-1, which are distinct when k <= n.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from servesim.engine.routing import SplitMix64
from servesim.tools.calibrate.measurements import Measurement


def split(
    measurements: Sequence[Measurement], holdout_percent: int, seed: int
) -> tuple[tuple[Measurement, ...], tuple[Measurement, ...]]:
    """R44 step 1: ``(fitting, held_out)``; one SplitMix64 draw per line (R14), in file order,
    held out when the draw mod 100 is below ``holdout_percent``."""
    generator = SplitMix64(seed)
    fitting: list[Measurement] = []
    held_out: list[Measurement] = []
    for measurement in measurements:
        chosen = held_out if generator.next() % 100 < holdout_percent else fitting
        chosen.append(measurement)
    return tuple(fitting), tuple(held_out)


def spaced_ranks(count: int, wanted: int) -> list[int]:
    """Ranks of ``wanted`` evenly spaced items among ``count`` (all when ``wanted >= count``):
    ``round(i * (count - 1) / (wanted - 1))``, halves up, in integers; first and last included."""
    if wanted >= count:
        return list(range(count))
    span = wanted - 1
    return [(2 * index * (count - 1) + span) // (2 * span) for index in range(wanted)]


def spaced_values(values: Iterable[int], wanted: int) -> tuple[int, ...]:
    """R44 steps 2 and 3: up to ``wanted`` of the distinct values, evenly spaced by rank."""
    distinct = sorted(set(values))
    return tuple(distinct[rank] for rank in spaced_ranks(len(distinct), wanted))
