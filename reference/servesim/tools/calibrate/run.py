"""R44's steps in order: the measurement file's bytes and a checked identity to both profiles
and the figures of their errors; every profile is read back before its errors are taken.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from servesim.contract.model import GridTiming, RegressionTiming
from servesim.tools.calibrate.evaluation import evaluate
from servesim.tools.calibrate.grid import fit_grid
from servesim.tools.calibrate.identity import limit_problems
from servesim.tools.calibrate.measurements import (
    InvalidMeasurements,
    Measurement,
    parse_measurements,
)
from servesim.tools.calibrate.options import CalibrateOptions
from servesim.tools.calibrate.profiles import (
    calibration_value,
    checked_profile,
    grid_value,
    profile_value,
    regression_value,
)
from servesim.tools.calibrate.regression import fit_regression
from servesim.tools.calibrate.sampling import split
from servesim.tools.calibrate.summary import Calibration


def calibrate(
    data: bytes,
    file: str,
    identity: Mapping[str, Any],
    identity_file: str,
    options: CalibrateOptions,
) -> Calibration:
    """R44: the measurement file's bytes and a checked identity (``parse_identity``) to both
    profiles and their figures; ``InvalidMeasurements`` or ``InvalidInput`` when R44 says exit 2.
    """
    measurements = parse_measurements(data, file)
    fitting, held_out = split(measurements, options.holdout_percent, options.seed)
    if not fitting:
        raise InvalidMeasurements(
            [
                f"{file}: no fitting lines: all {len(measurements)} were held out "
                f"(--seed {options.seed}, --holdout-percent {options.holdout_percent})"
            ]
        )
    problems = limit_problems(fitting, identity, file, identity_file)
    if problems:
        raise InvalidMeasurements(problems)
    regression, grid, measured = _fit(fitting, options)
    source_sha256 = hashlib.sha256(data).hexdigest()
    calibration = calibration_value(identity, source_sha256)
    regression_bytes, regression_model = checked_profile(
        profile_value(calibration, regression_value(regression)),
        "the calibrated regression profile",
    )
    grid_bytes, grid_model = checked_profile(
        profile_value(calibration, grid_value(grid)), "the calibrated grid profile"
    )
    points = len(grid.decode_axis) * len(grid.context_axis) * len(grid.prefill_axis)
    grid_summary = evaluate("grid", grid_model, len(fitting), held_out)
    return Calibration(
        options=options,
        source_sha256=source_sha256,
        lines=len(measurements),
        regression=regression_bytes,
        grid=grid_bytes,
        knots=tuple(knot.tokens for knot in regression.prefill_knots),
        grid_shape=(len(grid.decode_axis), len(grid.context_axis), len(grid.prefill_axis)),
        models=(
            evaluate("regression", regression_model, len(fitting), held_out),
            replace(grid_summary, grid_points=(measured, points - measured)),
        ),
    )


def _fit(
    fitting: Sequence[Measurement], options: CalibrateOptions
) -> tuple[RegressionTiming, GridTiming, int]:
    regression = fit_regression(fitting, options.knots)
    grid, measured = fit_grid(fitting, regression, options.grid_points)
    return regression, grid, measured
