"""R44's options and their bounds, checked once where they are made.

At least 2 knots and 2 grid points per axis are asked for: 1 knot could not hold both ends of
the prefill range, which R44 asks for as knots and on every axis.
"""

from __future__ import annotations

from dataclasses import dataclass

#: R44 asks for both ends of the prefill range as knots and on every axis.
MIN_KNOTS = 2
MIN_GRID_POINTS = 2


@dataclass(frozen=True, slots=True)
class CalibrateOptions:
    """R44's options, with its defaults."""

    holdout_percent: int = 20
    seed: int = 0
    knots: int = 4
    grid_points: int = 8

    def __post_init__(self) -> None:
        for name, low, high in (
            ("holdout_percent", 0, 99),
            ("seed", 0, 2**64 - 1),
            ("knots", MIN_KNOTS, None),
            ("grid_points", MIN_GRID_POINTS, None),
        ):
            value = getattr(self, name)
            if value < low or (high is not None and value > high):
                raise ValueError(f"{name} must be in {low}..{high or ''}, not {value}")
