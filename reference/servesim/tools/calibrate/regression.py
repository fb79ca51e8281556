"""R44 step 2: the regression, fitted by least squares over the fitting lines in µs and
written in whole ns and ps (R42).

The fit targets ``T - 0.5`` rather than T: a model lasts ``ceil`` of its linear part (R42),
which adds half a microsecond on average, so fitting T itself would overestimate every step.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from servesim.contract.model import (
    SHAPE_DIMENSIONS,
    Coverage,
    Interval,
    PrefillKnot,
    RegressionTiming,
    StepShape,
)
from servesim.tools.calibrate.least_squares import least_squares
from servesim.tools.calibrate.measurements import Measurement
from servesim.tools.calibrate.sampling import spaced_values

#: R42's ceil adds this much to a step on average; the fit aims below T by as much.
_CEIL_OFFSET_US = 0.5

#: The largest coefficient a regression profile holds (2^53-1, its schema's bound).
_MOST = (1 << 53) - 1


def fit_regression(fitting: Sequence[Measurement], knots: int) -> RegressionTiming:
    """R44 step 2: least squares over the fitting lines, in µs, written in ns and ps."""
    tokens = spaced_values((measurement.shape.prefill_tokens for measurement in fitting), knots)
    rows = [_design_row(measurement.shape, tokens) for measurement in fitting]
    targets = [measurement.duration_us - _CEIL_OFFSET_US for measurement in fitting]
    intercept, *knot_us, decode_us, context_us = least_squares(rows, targets)
    return RegressionTiming(
        intercept_ns=_whole(intercept * 1_000, least=1),
        prefill_knots=(
            PrefillKnot(tokens[0], 0),
            *(
                PrefillKnot(t, _whole(us * 1_000))
                for t, us in zip(tokens[1:], knot_us, strict=True)
            ),
        ),
        decode_request_ns=_whole(decode_us * 1_000),
        context_token_ps=_whole(context_us * 1_000_000),
        coverage=_coverage(fitting),
    )


def _hats(tokens: int, knots: Sequence[int]) -> list[float]:
    """The weight of each knot but the first at ``tokens``: R42's piecewise-linear curve is
    ``sum(ns[j] * weight[j])`` once the first knot costs 0 (the intercept stands for it)."""
    weights = [0.0] * (len(knots) - 1)
    upper = bisect.bisect_left(knots, tokens)
    if knots[upper] == tokens:
        if upper:
            weights[upper - 1] = 1.0
        return weights
    fraction = (tokens - knots[upper - 1]) / (knots[upper] - knots[upper - 1])
    weights[upper - 1] = fraction
    if upper > 1:
        weights[upper - 2] = 1.0 - fraction
    return weights


def _design_row(shape: StepShape, knots: Sequence[int]) -> list[float]:
    """One line's columns: intercept, the knots' weights, D, C."""
    return [
        1.0,
        *_hats(shape.prefill_tokens, knots),
        float(shape.decode_requests),
        float(shape.context_tokens),
    ]


def _whole(value: float, *, least: int = 0) -> int:
    """A fitted coefficient as R44 writes it: rounded (halves up), kept within ``least`` and the
    schema's bound."""
    if not math.isfinite(value):
        return least if value < 0 else _MOST
    return min(_MOST, max(least, math.floor(value + 0.5)))


def _coverage(fitting: Sequence[Measurement]) -> Coverage:
    """R44 step 2: the fitting lines' range on each dimension."""
    ranges = {}
    for name in SHAPE_DIMENSIONS:
        values = [getattr(measurement.shape, name) for measurement in fitting]
        ranges[name] = Interval(min(values), max(values))
    return Coverage(**ranges)
