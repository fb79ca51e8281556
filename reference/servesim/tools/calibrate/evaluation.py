"""R44 step 4: a written model's errors on the held-out lines it covers (R43), as the
nearest-rank percentiles (R27) of the absolute and the relative error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servesim.contract.model import TimingModel
from servesim.contract.nearest_rank import nearest_rank
from servesim.tools.calibrate.measurements import Measurement

#: The percentiles of the error the summary reports (R44 step 4).
ERROR_PERCENTILES: tuple[int, ...] = (50, 95, 99)


@dataclass(frozen=True, slots=True)
class ModelSummary:
    """R44 step 4 for one model; the error fields are ``None`` when no held-out line is covered.

    ``absolute_error_us`` and ``relative_error`` map each of ``ERROR_PERCENTILES`` to the
    nearest-rank value (R27) of ``|predicted - T|`` and ``|predicted - T| / T``.
    """

    kind: str
    fitting_lines: int
    held_out_lines: int
    covered_lines: int
    absolute_error_us: dict[int, int] | None
    relative_error: dict[int, float] | None
    grid_points: tuple[int, int] | None = None
    """For the grid: (measured, filled from the regression)."""

    def as_json(self) -> dict[str, Any]:
        """The figures for ``--summary-json``."""
        share = self.covered_lines / self.held_out_lines if self.held_out_lines else None
        value: dict[str, Any] = {
            "fitting_lines": self.fitting_lines,
            "held_out_covered": self.covered_lines,
            "held_out_covered_share": share,
            "absolute_error_us": _by_percentile(self.absolute_error_us),
            "relative_error": _by_percentile(self.relative_error),
        }
        if self.grid_points is not None:
            value["grid_points"] = {
                "measured": self.grid_points[0],
                "from_regression": self.grid_points[1],
            }
        return value


def _by_percentile(values: Mapping[int, float] | None) -> dict[str, float] | None:
    return None if values is None else {f"p{p}": value for p, value in values.items()}


def evaluate(
    kind: str, model: TimingModel, fitting_lines: int, held_out: Sequence[Measurement]
) -> ModelSummary:
    """R44 step 4: the model's errors on the held-out lines it covers (R43)."""
    covered = [measurement for measurement in held_out if model.covers(measurement.shape)]
    errors = [
        (
            abs(model.step_duration_us(measurement.shape) - measurement.duration_us),
            measurement.duration_us,
        )
        for measurement in covered
    ]
    absolute: list[int] = sorted(error for error, _ in errors)
    # int / int is correctly rounded and rounding is monotone, so sorting the floats orders the
    # exact ratios and the nearest-rank float is the exact one's rounding.
    relative = sorted(error / duration for error, duration in errors)
    return ModelSummary(
        kind=kind,
        fitting_lines=fitting_lines,
        held_out_lines=len(held_out),
        covered_lines=len(covered),
        absolute_error_us=_int_percentiles(absolute),
        relative_error=_percentiles(relative),
    )


def _percentiles(values: Sequence[float]) -> dict[int, float] | None:
    """R27's nearest rank of each of ``ERROR_PERCENTILES`` among sorted ``values``."""
    if not values:
        return None
    # nearest_rank over the positions 0..n-1 is the position of the percentile: R27 in one place.
    positions = range(len(values))
    return {percent: values[nearest_rank(positions, percent)] for percent in ERROR_PERCENTILES}


def _int_percentiles(values: Sequence[int]) -> dict[int, int] | None:
    """``_percentiles`` of integers, which stay integers."""
    if not values:
        return None
    return {percent: nearest_rank(values, percent) for percent in ERROR_PERCENTILES}
