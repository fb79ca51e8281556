"""``servesim calibrate``: measured steps to a regression and a grid timing profile (SPEC.md R44).

Everything here is a pure function of the measurement file's bytes, the identity and the options,
so the same input gives the same profiles and summary, byte for byte. The least-squares fit uses
floats (it is an estimate either way); every number written is an integer, and the errors in the
summary are computed with the written profiles' own integer arithmetic (R41, R42).

Decisions R44 leaves open, made here once:

- knot and grid-axis ranks: of n sorted distinct values, k evenly spaced ones are those at rank
  ``round(i * (n - 1) / (k - 1))`` (halves up) for i in 0..k-1, which are distinct when k <= n;
- the fit targets ``T - 0.5`` rather than T: a model lasts ``ceil`` of its linear part (R42),
  which adds half a microsecond on average, so fitting T itself would overestimate every step;
- a column that is, up to rounding, a combination of the columns before it (in the order
  intercept, knots, D, C) gets coefficient 0: all lines with the same D, or C proportional to D;
- at least 2 knots and 2 grid points per axis are asked for (1 knot could not hold both ends).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from servesim.contract.canonical import canonical_json
from servesim.contract.documents import load_document
from servesim.contract.errors import MAX_LISTED_PROBLEMS, InputProblem, InvalidInput, ServesimError
from servesim.contract.json_reading import parse_json
from servesim.contract.model import (
    SHAPE_DIMENSIONS,
    Coverage,
    GridTiming,
    Interval,
    PrefillKnot,
    RegressionTiming,
    StepShape,
    TimingModel,
)
from servesim.contract.nearest_rank import nearest_rank
from servesim.contract.schema_check import schema_problems
from servesim.contract.schemas import load_schema
from servesim.contract.timing_profile import build_timing_profile
from servesim.engine.routing import SplitMix64

#: The percentiles of the error the summary reports (R44 step 4).
ERROR_PERCENTILES: tuple[int, ...] = (50, 95, 99)

#: R42's ceil adds this much to a step on average; the fit aims below T by as much.
_CEIL_OFFSET_US = 0.5

#: A column is dropped when elimination leaves less than this share of its own weight.
_DEGENERATE = 1e-9

#: R44 asks for both ends of the prefill range as knots and on every axis.
MIN_KNOTS = 2
MIN_GRID_POINTS = 2
PROFILE_VERSION = "1.1"
#: Fewer held-out lines than this, and the error percentiles are flagged as weak.
MIN_TRUSTED_HELD_OUT = 20
#: Fewer fitting lines per regression coefficient than this, and the fit is flagged as weak.
MIN_FITTING_PER_COEFFICIENT = 10


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


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured step (R44): the line it came from, its shape and its duration."""

    line: int
    shape: StepShape
    duration_us: int


class InvalidMeasurements(ServesimError):
    """Measurements R44 cannot use; each problem reads ``file:line: what was expected``."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


# --- Reading the measurements --------------------------------------------------------------


@cache
def measurement_ranges() -> dict[str, tuple[int, int]]:
    """Each member of a measurement line and its inclusive range: the grid's axis items and
    durations in the timing-profile schema (R40), so the two can never disagree."""
    grid = load_schema("timing_profile", PROFILE_VERSION)["$defs"]["grid"]["properties"]
    ranges = {}
    for name in SHAPE_DIMENSIONS:
        items = grid["axes"]["properties"][name]["items"]
        ranges[name] = (items["minimum"], items["maximum"])
    duration = grid["duration_us"]["items"]["items"]["items"]
    ranges["duration_us"] = (duration["minimum"], duration["maximum"])
    return ranges


class _Literal:
    """A number that cannot be a measurement (a fraction, an exponent, an integer of more digits
    than any bound), kept as written so the message shows what the user wrote."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return (
            self.text if len(self.text) <= 40 else f"{self.text[:24]}... ({len(self.text)} chars)"
        )


def _parse_int(text: str) -> int | _Literal:
    # Converting a many-thousand-digit literal is slow and Python refuses beyond 4300 digits.
    return int(text) if len(text) <= 40 else _Literal(text)


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate member {key!r}")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _shown(value: Any) -> str:
    """A JSON value as the user wrote it, shortened, for messages."""
    if isinstance(value, _Literal):
        return str(value)
    if isinstance(value, dict | list):
        return "an object" if isinstance(value, dict) else "an array"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _decode_line(raw: bytes) -> Any:
    """R1 for one line: UTF-8, not blank, strict JSON; raises ``ValueError`` saying why not."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"not UTF-8 text (bad byte at column {error.start + 1})") from None
    if not text.strip():
        raise ValueError("a blank line; blank lines are not allowed")
    try:
        return json.loads(
            text,
            object_pairs_hook=_unique_members,
            parse_constant=_reject_constant,
            parse_int=_parse_int,
            parse_float=_Literal,
        )
    except json.JSONDecodeError as error:
        raise ValueError(f"not valid JSON at column {error.colno}: {error.msg}") from None
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def _member_problems(value: dict[str, Any]) -> list[str]:
    """R44: exactly the four members, each an integer in its range, and C = 0 when D = 0."""
    ranges = measurement_ranges()
    problems = [
        f"missing member {name!r}; expected an integer in {low}..{high}"
        for name, (low, high) in ranges.items()
        if name not in value
    ]
    problems += [
        f"unexpected member {name!r}; a measurement has only {', '.join(ranges)}"
        for name in value
        if name not in ranges
    ]
    for name, (low, high) in ranges.items():
        if name in value and not (type(value[name]) is int and low <= value[name] <= high):
            problems.append(
                f"{name}: expected an integer in {low}..{high}, found {_shown(value[name])}"
            )
    if not problems and value["decode_requests"] == 0 and value["context_tokens"] != 0:
        problems.append(
            f"context_tokens: expected 0 when decode_requests is 0 (R22), "
            f"found {value['context_tokens']}"
        )
    return problems


def _read_line(raw: bytes, line: int) -> Measurement | list[str]:
    """One line as a measurement, or what is wrong with it."""
    expected = "expected a JSON object with " + ", ".join(measurement_ranges())
    try:
        value = _decode_line(raw)
    except ValueError as error:
        return [f"{error}; {expected}"]
    if not isinstance(value, dict):
        return [f"{expected}, found {_shown(value)}"]
    problems = _member_problems(value)
    if problems:
        return problems
    shape = StepShape(value["decode_requests"], value["context_tokens"], value["prefill_tokens"])
    return Measurement(line, shape, value["duration_us"])


def parse_measurements(data: bytes, file: str) -> tuple[Measurement, ...]:
    """R44: the measurement lines of a JSON Lines file, or ``InvalidMeasurements`` listing every
    bad line (the first ``MAX_LISTED_PROBLEMS`` of them, then how many more).

    A report with a trace (R30) is read as the measurements its trace entries are: a report
    written by ``servesim replay --trace`` can be calibrated from directly.
    """
    if _looks_like_a_report(data):
        return report_measurements(data, file)
    lines = data.split(b"\n")
    if lines[-1] == b"":  # the final newline ends the last line; it does not start another
        lines.pop()
    if not lines:
        raise InvalidMeasurements(
            [f"{file}:1: the file is empty; expected one measurement object per line (JSON Lines)"]
        )
    measurements: list[Measurement] = []
    problems: list[str] = []
    for number, raw in enumerate(lines, start=1):
        result = _read_line(raw, number)
        if isinstance(result, Measurement):
            measurements.append(result)
        else:
            problems.extend(f"{file}:{number}: {problem}" for problem in result)
    if problems:
        raise InvalidMeasurements(_capped(problems))
    return tuple(measurements)


def _looks_like_a_report(data: bytes) -> bool:
    """Whether the file opens as a report document (its first member is ``document``, as
    RFC 8785 and any pretty-printed report have it) rather than as a measurement line."""
    head = data[:64].lstrip()
    return head.startswith(b"{") and re.match(rb'\{\s*"document"\s*:\s*"report"', head) is not None


def report_measurements(data: bytes, file: str) -> tuple[Measurement, ...]:
    """R44: each trace entry of a checked report as a measurement line (its ``shape`` and
    ``end_us - start_us``), numbered from 1 in trace order; a report without a trace has none."""
    report = load_document(data, file, "report").value
    if report["trace"] is None:
        raise InvalidMeasurements(
            [
                f"{file}: a report without a trace has no steps to calibrate from; "
                "replay with --trace"
            ]
        )
    measurements: list[Measurement] = []
    problems: list[str] = []
    for number, entry in enumerate(report["trace"], start=1):
        value = {**entry["shape"], "duration_us": entry["end_us"] - entry["start_us"]}
        found = _member_problems(value)
        if found:
            problems.extend(f"{file}: at /trace/{number - 1}: {problem}" for problem in found)
            continue
        shape = StepShape(
            value["decode_requests"], value["context_tokens"], value["prefill_tokens"]
        )
        measurements.append(Measurement(number, shape, value["duration_us"]))
    if problems:
        raise InvalidMeasurements(_capped(problems))
    if not measurements:
        raise InvalidMeasurements([f"{file}: the report's trace has no steps"])
    return tuple(measurements)


def _capped(problems: list[str]) -> list[str]:
    """At most ``MAX_LISTED_PROBLEMS`` problems, then a count of the rest (as ``raise_if_any``)."""
    if len(problems) <= MAX_LISTED_PROBLEMS:
        return problems
    more = len(problems) - MAX_LISTED_PROBLEMS
    return [*problems[:MAX_LISTED_PROBLEMS], f"... and {more} more problems"]


# --- Reading the identity ------------------------------------------------------------------

#: A placeholder for what the identity cannot hold, so that the identity is checked by the very
#: schema the written profile must pass (R40) rather than by a copy of it.
_PLACEHOLDER_SHA256 = "0" * 64
_PLACEHOLDER_MODEL: dict[str, Any] = {
    "kind": "regression",
    "intercept_ns": 1,
    "prefill_knots": [{"tokens": 0, "ns": 0}],
    "decode_request_ns": 0,
    "context_token_ps": 0,
    "coverage": {name: {"min": 0, "max": 0} for name in SHAPE_DIMENSIONS},
}


def parse_identity(data: bytes, file: str) -> dict[str, Any]:
    """R44: the ``calibration`` members but ``source_sha256``, checked against the timing-profile
    schema; ``InvalidInput`` with JSON pointers into the identity otherwise."""
    value = parse_json(data, file)
    if not isinstance(value, dict):
        raise InvalidInput(
            [
                InputProblem(
                    file,
                    "",
                    f"expected a JSON object (the calibration identity), found {_shown(value)}",
                )
            ]
        )
    problems = []
    if "source_sha256" in value:
        problems.append(
            InputProblem(
                file,
                "/source_sha256",
                "calibrate sets source_sha256 to the SHA-256 "
                "of the measurement file; leave it out of the identity",
            )
        )
    document = _profile({**value, "source_sha256": _PLACEHOLDER_SHA256}, _PLACEHOLDER_MODEL)
    for problem in schema_problems(document, "timing_profile", PROFILE_VERSION, file):
        if problem.pointer.startswith("/calibration"):
            # The identity has no source_sha256 member, so it is not one it may hold.
            message = problem.message.replace(", source_sha256", "")
            problems.append(InputProblem(file, problem.pointer[len("/calibration") :], message))
    if problems:
        raise InvalidInput(sorted(problems))
    return value


# --- Step 1: the split ---------------------------------------------------------------------


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


def _coverage(fitting: Sequence[Measurement]) -> Coverage:
    """R44 step 2: the fitting lines' range on each dimension."""
    ranges = {}
    for name in SHAPE_DIMENSIONS:
        values = [getattr(measurement.shape, name) for measurement in fitting]
        ranges[name] = Interval(min(values), max(values))
    return Coverage(**ranges)


# --- Step 2: the regression ----------------------------------------------------------------


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


def _normal_equations(
    rows: Sequence[Sequence[float]], targets: Sequence[float]
) -> tuple[list[list[float]], list[float], list[float]]:
    """``(XᵀX, Xᵀy, scales)`` of the columns scaled to a largest magnitude of 1, so that C (up to
    2^52) and the knot weights (at most 1) weigh alike; an all-zero column keeps scale 1."""
    width = len(rows[0])
    scales = [
        max((abs(row[column]) for row in rows), default=0.0) or 1.0 for column in range(width)
    ]
    matrix = [[0.0] * width for _ in range(width)]
    vector = [0.0] * width
    for row, target in zip(rows, targets, strict=True):
        scaled = [value / scale for value, scale in zip(row, scales, strict=True)]
        for i, left in enumerate(scaled):
            if left:
                vector[i] += left * target
                matrix_row = matrix[i]
                for j, right in enumerate(scaled):
                    matrix_row[j] += left * right
    return matrix, vector, scales


def _independent_columns(matrix: Sequence[Sequence[float]]) -> list[int]:
    """The columns kept, in order: symmetric elimination drops a column when what is left of its
    diagonal is below ``_DEGENERATE`` of what it started with (it adds nothing to the columns
    kept before it); the choice depends only on the column order, never on ties."""
    size = len(matrix)
    work = [list(row) for row in matrix]
    kept: list[int] = []
    for column in range(size):
        if not work[column][column] > _DEGENERATE * matrix[column][column]:
            continue  # also an all-zero column, whose diagonal is 0 from the start
        kept.append(column)
        pivot = work[column]
        for row in range(column + 1, size):
            factor = work[row][column] / pivot[column]
            for other in range(column, size):
                work[row][other] -= factor * pivot[other]
    return kept


def _gauss(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Solve a non-singular system by Gaussian elimination with partial pivoting."""
    size = len(vector)
    rows = [[*matrix[index], vector[index]] for index in range(size)]
    for column in range(size):
        best = max(range(column, size), key=lambda row: (abs(rows[row][column]), -row))
        rows[column], rows[best] = rows[best], rows[column]
        pivot = rows[column]
        for row in range(column + 1, size):
            factor = rows[row][column] / pivot[column]
            for other in range(column, size + 1):
                rows[row][other] -= factor * pivot[other]
    solution = [0.0] * size
    for row in reversed(range(size)):
        known = sum(rows[row][other] * solution[other] for other in range(row + 1, size))
        solution[row] = (rows[row][size] - known) / rows[row][row]
    return solution


def least_squares(rows: Sequence[Sequence[float]], targets: Sequence[float]) -> list[float]:
    """The coefficients minimising the squared error; 0 for a column that is degenerate."""
    matrix, vector, scales = _normal_equations(rows, targets)
    kept = _independent_columns(matrix)
    reduced = [[matrix[i][j] for j in kept] for i in kept]
    solved = _gauss(reduced, [vector[i] for i in kept]) if kept else []
    coefficients = [0.0] * len(scales)
    for column, value in zip(kept, solved, strict=True):
        coefficients[column] = value / scales[column]
    return coefficients


#: The largest coefficient a regression profile holds (2^53-1, its schema's bound).
_MOST = (1 << 53) - 1


def _whole(value: float, *, least: int = 0) -> int:
    """A fitted coefficient as R44 writes it: rounded (halves up), kept within ``least`` and the
    schema's bound."""
    if not math.isfinite(value):
        return least if value < 0 else _MOST
    return min(_MOST, max(least, math.floor(value + 0.5)))


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


def limit_problems(
    fitting: Sequence[Measurement], identity: Mapping[str, Any], file: str, identity_file: str
) -> list[str]:
    """R40 for the coverage to be written: each fitting range within the identity's limits,
    naming the line that reaches furthest."""
    limits = identity["limits"]
    bounds = {
        "decode_requests": (limits["max_num_seqs"], "limits.max_num_seqs"),
        "context_tokens": (
            limits["max_num_seqs"] * limits["max_model_len"],
            "limits.max_num_seqs * limits.max_model_len",
        ),
        "prefill_tokens": (limits["max_batched_tokens"], "limits.max_batched_tokens"),
    }
    problems = []
    for name, (bound, source) in bounds.items():
        furthest = max(fitting, key=lambda measurement: getattr(measurement.shape, name))
        value = getattr(furthest.shape, name)
        if value > bound:
            problems.append(
                f"{file}:{furthest.line}: {name} {value} is beyond what the engine could run: "
                f"{source} is {bound} in {identity_file} (R40)"
            )
    return problems


# --- Step 3: the grid ----------------------------------------------------------------------


def _lower_median(values: list[int]) -> int:
    return sorted(values)[(len(values) - 1) // 2]


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


# --- Step 4: the errors --------------------------------------------------------------------


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


# --- The profiles --------------------------------------------------------------------------

#: The order a written profile lists its calibration members in: the schema's.
_CALIBRATION_MEMBERS = (
    "engine",
    "engine_version",
    "model",
    "model_revision",
    "gpu",
    "server_config_sha256",
    "source_sha256",
    "limits",
)
_LIMITS = ("max_num_seqs", "max_batched_tokens", "max_model_len")


def _profile(calibration: Mapping[str, Any], model: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "document": "timing_profile",
        "schema_version": PROFILE_VERSION,
        "calibration": calibration,
        "model": model,
    }


def calibration_value(identity: Mapping[str, Any], source_sha256: str) -> dict[str, Any]:
    """R40's ``calibration``: the identity with ``source_sha256``, in the schema's order, so
    the bytes do not depend on how the identity file orders its members."""
    value = {**identity, "source_sha256": source_sha256}
    value["limits"] = {name: identity["limits"][name] for name in _LIMITS}
    return {name: value[name] for name in _CALIBRATION_MEMBERS}


def _coverage_value(coverage: Coverage) -> dict[str, dict[str, int]]:
    return {
        name: {"min": getattr(coverage, name).min, "max": getattr(coverage, name).max}
        for name in SHAPE_DIMENSIONS
    }


def regression_value(model: RegressionTiming) -> dict[str, Any]:
    """R42's model member for a fitted regression."""
    return {
        "kind": "regression",
        "intercept_ns": model.intercept_ns,
        "prefill_knots": [{"tokens": knot.tokens, "ns": knot.ns} for knot in model.prefill_knots],
        "decode_request_ns": model.decode_request_ns,
        "context_token_ps": model.context_token_ps,
        "coverage": _coverage_value(model.coverage),
    }


def grid_value(model: GridTiming) -> dict[str, Any]:
    """R41's model member for a grid."""
    axes = (model.decode_axis, model.context_axis, model.prefill_axis)
    return {
        "kind": "grid",
        "axes": {name: list(axis) for name, axis in zip(SHAPE_DIMENSIONS, axes, strict=True)},
        "duration_us": [[list(row) for row in plane] for plane in model.durations],
        "coverage": _coverage_value(model.coverage),
    }


def _checked(value: dict[str, Any], name: str) -> tuple[bytes, TimingModel]:
    """The profile's bytes and the model read back from them: only a profile that passes R1 to
    R4 and R40 is written, and the errors reported are the written model's own."""
    data = (json.dumps(value, indent=2) + "\n").encode("utf-8")
    document = load_document(data, name, "timing_profile")
    return data, build_timing_profile(document.value).model


# --- Putting it together -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Calibration:
    """What one run makes: both profiles' bytes, checked, and the figures of R44 step 4."""

    options: CalibrateOptions
    source_sha256: str
    lines: int
    regression: bytes
    grid: bytes
    knots: tuple[int, ...]
    grid_shape: tuple[int, int, int]
    models: tuple[ModelSummary, ...]

    def warnings(self) -> list[str]:
        """What makes the figures weak: too few held-out lines for their percentiles to mean
        much, too few fitting lines for the regression's coefficients. Not errors (a small
        calibration is still a calibration), but a person must not read 0.5 % off three lines
        as a property of the model."""
        held_out = self.models[0].held_out_lines
        fitting = self.lines - held_out
        coefficients = len(self.knots) + 2  # intercept, knots after the first, D and C
        found = []
        if held_out < MIN_TRUSTED_HELD_OUT:
            found.append(
                f"only {_count(held_out, 'held-out line')}: error percentiles need at least "
                f"{MIN_TRUSTED_HELD_OUT} to say much (measure more steps, or raise "
                "--holdout-percent)"
            )
        if fitting < MIN_FITTING_PER_COEFFICIENT * coefficients:
            found.append(
                f"only {_count(fitting, 'fitting line')} for {coefficients} regression "
                f"coefficients: at least {MIN_FITTING_PER_COEFFICIENT} per coefficient "
                "keep a fit from following the noise"
            )
        return found

    def summary_value(self) -> dict[str, Any]:
        """The figures for scripts (``--summary-json``)."""
        held_out = self.models[0].held_out_lines
        return {
            "source_sha256": self.source_sha256,
            "lines": self.lines,
            "fitting_lines": self.lines - held_out,
            "held_out_lines": held_out,
            "seed": self.options.seed,
            "holdout_percent": self.options.holdout_percent,
            "knots": list(self.knots),
            "grid_axes_sizes": list(self.grid_shape),
            "models": {model.kind: model.as_json() for model in self.models},
        }

    def summary_json(self) -> bytes:
        """``summary_value`` as RFC 8785 canonical JSON, so reruns give the same bytes."""
        return canonical_json(self.summary_value())

    def summary_text(self, file: str) -> str:
        """R44 step 4 for a person: where the figures come from, then one row per model."""
        held_out = self.models[0].held_out_lines
        grid = next(model for model in self.models if model.grid_points is not None)
        measured, filled = grid.grid_points or (0, 0)
        sizes = " x ".join(str(size) for size in self.grid_shape)
        lines = [
            f"measurements: {file}, {_count(self.lines, 'line')}, sha256 {self.source_sha256}",
            f"split: {self.lines - held_out} fitting, {held_out} held out "
            f"(--seed {self.options.seed}, --holdout-percent {self.options.holdout_percent})",
            f"regression: knots at prefill_tokens {', '.join(map(str, self.knots))}",
            f"grid: {sizes} points, {measured} measured, {filled} from the regression",
            "",
            *_table([_HEADER, *(_row(model) for model in self.models)]),
            "",
            "abs: |predicted - T| in us; rel: |predicted - T| / T; each the nearest-rank "
            "percentile (R27) over the held-out lines the model covers",
        ]
        return "\n".join(lines) + "\n"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


_HEADER = ["model", "fitting", "held-out covered"] + [
    f"{kind} p{percent}" for kind in ("abs", "rel") for percent in ERROR_PERCENTILES
]


def _row(model: ModelSummary) -> list[str]:
    if model.held_out_lines:
        share = f"{100 * model.covered_lines / model.held_out_lines:.1f}%"
        covered = f"{model.covered_lines}/{model.held_out_lines} ({share})"
    else:
        covered = "0/0 (n/a)"
    absolute = model.absolute_error_us or {}
    relative = model.relative_error or {}
    return [
        model.kind,
        str(model.fitting_lines),
        covered,
        *(f"{absolute[p]} us" if absolute else "n/a" for p in ERROR_PERCENTILES),
        *(f"{100 * relative[p]:.2f}%" if relative else "n/a" for p in ERROR_PERCENTILES),
    ]


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as aligned text: the first column to the left, the figures to the right."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(width) if column == 0 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


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
    regression_bytes, regression_model = _checked(
        _profile(calibration, regression_value(regression)), "the calibrated regression profile"
    )
    grid_bytes, grid_model = _checked(
        _profile(calibration, grid_value(grid)), "the calibrated grid profile"
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
