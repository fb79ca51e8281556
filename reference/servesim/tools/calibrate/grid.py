"""R44 step 3: the grid (R41) over evenly spaced values of the fitting lines on each axis; a
point that was measured is the lower median of its durations, any other the regression's
duration there.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from servesim.contract.model import (
    SHAPE_DIMENSIONS,
    Coverage,
    GridTiming,
    Interval,
    RegressionTiming,
    StepShape,
)
from servesim.tools.calibrate.measurements import Measurement
from servesim.tools.calibrate.sampling import spaced_values


def fit_grid(
    fitting: Sequence[Measurement], regression: RegressionTiming, points: int
) -> tuple[GridTiming, int]:
    """R44 step 3: the grid and how many of its points were measured (the others are the
    regression's duration there)."""
    decode, context, prefill = (
        spaced_values((getattr(measurement.shape, name) for measurement in fitting), points)
        for name in SHAPE_DIMENSIONS
    )
    samples: dict[StepShape, list[int]] = defaultdict(list)
    for measurement in fitting:
        samples[measurement.shape].append(measurement.duration_us)
    measured = 0

    def duration(shape: StepShape) -> int:
        nonlocal measured
        if shape in samples:
            measured += 1
            return _lower_median(samples[shape])
        return regression.step_duration_us(shape)

    durations = tuple(
        tuple(tuple(duration(StepShape(d, c, p)) for p in prefill) for c in context) for d in decode
    )
    coverage = Coverage(*(Interval(axis[0], axis[-1]) for axis in (decode, context, prefill)))
    return GridTiming(decode, context, prefill, durations, coverage), measured


def _lower_median(values: list[int]) -> int:
    return sorted(values)[(len(values) - 1) // 2]
