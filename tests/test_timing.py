"""SPEC.md R22 and section 10: the step shape, the measured models, their coverage.

The interpolation arithmetic is checked two ways: small hand-worked examples, and a property
against a second, deliberately naive reading of R41 in exact rational arithmetic.
"""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servesim.contract.documents import load_document
from servesim.contract.errors import InvalidInput
from servesim.contract.model import Coverage, GridTiming, Interval, StepShape, interpolate
from servesim.contract.timing_profile import build_timing_profile
from servesim_conformance.corpus import INPUT_FILES
from tests.helpers import (
    EXAMPLES,
    REPO,
    replay_args,
    run_servesim,
    scenario_doc,
    workload_doc,
    write_inputs,
)

GRID_PROFILE = json.loads((EXAMPLES / "basic" / "grid-profile.json").read_text())
REGRESSION_PROFILE = json.loads((EXAMPLES / "basic" / "regression-profile.json").read_text())


def _profile(document: dict[str, Any]) -> Any:
    data = (json.dumps(document) + "\n").encode()
    return build_timing_profile(load_document(data, "t.json", "timing_profile").value)


def _grid(axes: dict[str, list[int]], durations: list[Any]) -> dict[str, Any]:
    document = copy.deepcopy(GRID_PROFILE)
    document["model"]["axes"] = axes
    document["model"]["duration_us"] = durations
    document["model"]["coverage"] = {
        name: {"min": points[0], "max": points[-1]} for name, points in axes.items()
    }
    return document


# --- R22: the step shape --------------------------------------------------------------------


def test_r22_context_is_prompt_plus_tokens_produced_before_the_step(tmp_path: Path) -> None:
    # One worker, whole prefill, overhead 1000 ns. A (prompt 3, 3 tokens) and B (prompt 5,
    # 2 tokens) arrive at 0. Step 1 prefills both (P 8): both produce token 1. Step 2 decodes
    # both: contexts 3+1 and 5+1, C = 10; B completes. Step 3 decodes A alone: 3+2 = 5.
    paths = write_inputs(
        tmp_path,
        scenario_doc(),
        workload_doc(("A", 0, 3, 3), ("B", 0, 5, 2)),
        {**REGRESSION_PROFILE, "document": "timing_profile"},
    )
    result = run_servesim(*replay_args(paths, tmp_path / "report.json", "--trace"))
    assert result.returncode == 0, result.stderr
    trace = json.loads((tmp_path / "report.json").read_text())["trace"]
    shapes = [
        (shape["decode_requests"], shape["context_tokens"], shape["prefill_tokens"])
        for shape in (entry["shape"] for entry in trace)
    ]
    assert shapes == [(0, 0, 8), (2, 10, 0), (1, 5, 0)]
    assert all(entry["shape"]["prefill_tokens"] == entry["prefill_tokens"] for entry in trace)


# --- R41: the grid --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("low", "high", "num", "den", "expected"),
    [
        (100, 105, 1, 2, 103),  # 102.5: the half goes away from the lower-index value, up
        (200, 195, 1, 2, 197),  # 197.5: away from 200, so down; floor of -2.5 would give 198
        (10, 20, 1, 3, 13),  # 13.33 -> 13
        (10, 20, 2, 3, 17),  # 16.67 -> 17
        (7, 7, 1, 2, 7),
        (5, 9, 0, 1, 5),  # an exact hit takes the lower value
    ],
)
def test_r41_interpolation_rounds_the_distance_half_away_from_the_lower_value(
    low: int, high: int, num: int, den: int, expected: int
) -> None:
    assert interpolate(low, high, num, den) == expected


def test_r41_grid_interpolates_prefill_then_context_then_decode() -> None:
    # A 2x2x2 grid; the shape (1, 1, 1) sits in the middle of every bracket (fractions 1/2).
    # Along prefill: (d0,c0) 10,13 -> 12 (11.5 up); (d0,c1) 20,21 -> 21 (20.5 up);
    #                (d1,c0) 30,30 -> 30; (d1,c1) 50,41 -> 45 (50 - 4.5 rounded away = 45).
    # Along context: d0: 12,21 -> 17 (16.5 up); d1: 30,45 -> 38 (37.5 up).
    # Along decode: 17,38 -> 28 (27.5 up).
    grid = _profile(
        _grid(
            {"decode_requests": [0, 2], "context_tokens": [0, 2], "prefill_tokens": [0, 2]},
            [[[10, 13], [20, 21]], [[30, 30], [50, 41]]],
        )
    ).model
    assert grid.step_duration_us(StepShape(1, 1, 1)) == 28
    assert grid.step_duration_us(StepShape(2, 2, 2)) == 41
    assert grid.step_duration_us(StepShape(0, 0, 0)) == 10


def _naive_grid(grid: GridTiming, shape: StepShape) -> int:
    """R41 read literally, in exact fractions: a second implementation to compare with."""

    def bracket(axis: tuple[int, ...], value: int) -> tuple[int, int, Fraction]:
        for index, point in enumerate(axis):
            if point == value:
                return index, index, Fraction(0)
            if index and axis[index - 1] < value < point:
                return index - 1, index, Fraction(value - axis[index - 1], point - axis[index - 1])
        raise AssertionError("not covered")

    def between(x: int, y: int, fraction: Fraction) -> int:
        distance = abs(y - x) * fraction
        rounded = int(distance) + (1 if distance - int(distance) >= Fraction(1, 2) else 0)
        return x + rounded if y >= x else x - rounded

    d = bracket(grid.decode_axis, shape.decode_requests)
    c = bracket(grid.context_axis, shape.context_tokens)
    p = bracket(grid.prefill_axis, shape.prefill_tokens)
    values = {
        (i, j): between(grid.durations[i][j][p[0]], grid.durations[i][j][p[1]], p[2])
        for i in d[:2]
        for j in c[:2]
    }
    by_decode = {i: between(values[i, c[0]], values[i, c[1]], c[2]) for i in d[:2]}
    return between(by_decode[d[0]], by_decode[d[1]], d[2])


@st.composite
def grids_and_shapes(draw: st.DrawFn) -> tuple[GridTiming, StepShape]:
    def axis() -> st.SearchStrategy[list[int]]:
        return st.lists(st.integers(0, 60), min_size=1, max_size=4, unique=True).map(sorted)

    axes = [draw(axis()) for _ in range(3)]
    value = st.integers(1, 1000)
    durations = draw(
        st.lists(
            st.lists(
                st.lists(value, min_size=len(axes[2]), max_size=len(axes[2])),
                min_size=len(axes[1]),
                max_size=len(axes[1]),
            ),
            min_size=len(axes[0]),
            max_size=len(axes[0]),
        )
    )
    coverage = Coverage(*(Interval(points[0], points[-1]) for points in axes))
    grid = GridTiming(
        tuple(axes[0]),
        tuple(axes[1]),
        tuple(axes[2]),
        tuple(tuple(tuple(row) for row in plane) for plane in durations),
        coverage,
    )
    shape = StepShape(*(draw(st.integers(points[0], points[-1])) for points in axes))
    return grid, shape


@given(grids_and_shapes())
def test_r41_grid_matches_a_literal_reading_and_stays_within_its_values(
    case: tuple[GridTiming, StepShape],
) -> None:
    grid, shape = case
    duration = grid.step_duration_us(shape)
    assert duration == _naive_grid(grid, shape)
    values = [value for plane in grid.durations for row in plane for value in row]
    assert min(values) <= duration <= max(values)


# --- R42: the regression --------------------------------------------------------------------


def test_r42_regression_sums_in_picoseconds_and_rounds_up_once() -> None:
    model = _profile(REGRESSION_PROFILE).model
    # The example: intercept 2,000,000 ns; knots (0, 0), (32, 1,440,000), (64, 3,520,000);
    # 400,000 ns per decoding request; 500,000 ps per context token.
    # P 16 is halfway to the second knot: 720,000 ns. D 2, C 101:
    # 1000 * (2,000,000 + 720,000 + 800,000) + 101 * 500,000 = 3,570,500,000 ps -> 3571 us.
    assert model.step_duration_us(StepShape(2, 101, 16)) == 3571
    # P 48: 1,440,000 + 2,080,000 * 16/32 = 2,480,000 ns; D 0: exactly 4,480 us.
    assert model.step_duration_us(StepShape(0, 0, 48)) == 4480
    assert model.prefill_ns(64) == 3_520_000


# --- R40: agreements ------------------------------------------------------------------------


def _broken(document: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    broken = copy.deepcopy(document)
    target = broken
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return broken


@pytest.mark.parametrize(
    ("document", "expected_pointer"),
    [
        (
            _broken(GRID_PROFILE, ["model", "axes", "prefill_tokens"], [0, 32, 16, 64]),
            "/model/axes/prefill_tokens/2",
        ),
        (
            _broken(GRID_PROFILE, ["model", "duration_us", 1, 2], [1, 2, 3]),
            "/model/duration_us/1/2",
        ),
        (
            _broken(GRID_PROFILE, ["model", "coverage", "context_tokens", "max"], 1000),
            "/model/coverage/context_tokens",
        ),
        (
            _broken(GRID_PROFILE, ["calibration", "limits", "max_num_seqs"], 2),
            "/model/coverage/decode_requests/max",
        ),
        (
            _broken(REGRESSION_PROFILE, ["model", "prefill_knots", 1, "tokens"], 64),
            "/model/prefill_knots/2/tokens",
        ),
        (
            _broken(REGRESSION_PROFILE, ["model", "coverage", "decode_requests", "min"], 5),
            "/model/coverage/decode_requests",
        ),
    ],
    ids=[
        "axis-not-increasing",
        "row-size",
        "coverage-not-axis-range",
        "coverage-beyond-limits",
        "knots-not-increasing",
        "min-above-max",
    ],
)
def test_r40_a_measured_profile_that_disagrees_with_itself_is_invalid(
    document: dict[str, Any], expected_pointer: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        _profile(document)
    assert expected_pointer in [problem.pointer for problem in raised.value.problems]


# --- R43: out of coverage -------------------------------------------------------------------


def test_r43_uncovered_step_exits_3_without_a_report_and_names_the_shape(
    tmp_path: Path,
) -> None:
    # Five requests on one worker with max_num_seqs 8: the grid covers 0..4 decoding requests.
    requests = [(f"r{index}", 0, 4, 3) for index in range(5)]
    paths = write_inputs(
        tmp_path, scenario_doc(max_num_seqs=8), workload_doc(*requests), GRID_PROFILE
    )
    output = tmp_path / "report.json"
    result = run_servesim(*replay_args(paths, output))
    assert result.returncode == 3
    assert not output.exists()
    assert "decode_requests 5 is not in 0..4" in result.stderr
    assert "covered: decode_requests 0..4, context_tokens 0..2048" in result.stderr
    assert str(paths["timing_profile"]) in result.stderr
    assert "vllm 0.6.3" in result.stderr
    assert "Traceback" not in result.stderr


def test_r43_synthetic_profiles_cover_every_shape() -> None:
    model = _profile(
        {
            "document": "timing_profile",
            "schema_version": "1.0",
            "model": {
                "kind": "synthetic_linear",
                "step_overhead_ns": 1,
                "prefill_token_ns": 0,
                "decode_token_ns": 0,
            },
        }
    ).model
    assert model.covers(StepShape(2**20, 2**52, 2**32 - 1))


def test_r25_report_echoes_the_calibration_and_null_without_one(tmp_path: Path) -> None:
    workload = workload_doc(("A", 0, 3, 3))
    synthetic = {
        "document": "timing_profile",
        "schema_version": "1.0",
        "model": {
            "kind": "synthetic_linear",
            "step_overhead_ns": 1000,
            "prefill_token_ns": 0,
            "decode_token_ns": 0,
        },
    }
    echoed = []
    for name, profile in (("grid", GRID_PROFILE), ("synthetic", synthetic)):
        folder = tmp_path / name
        folder.mkdir()
        paths = write_inputs(folder, scenario_doc(), workload, profile)
        result = run_servesim(*replay_args(paths, folder / "report.json"))
        assert result.returncode == 0, result.stderr
        report = json.loads((folder / "report.json").read_text())
        echoed.append(report["inputs"]["timing_profile"]["calibration"])
    assert echoed == [GRID_PROFILE["calibration"], None]


@pytest.mark.parametrize(
    ("case", "code", "message"),
    [
        ("valid/out-of-coverage-lower-worker-index-first", 3, "worker 0, step starting at"),
        (
            "invalid/time-limit-after-decode-run-lower-worker-first",
            2,
            "a step of worker 0 starting at 9007199254740986 us",
        ),
    ],
)
def test_r7_r43_steps_of_one_instant_are_formed_in_worker_order(
    tmp_path: Path, case: str, code: int, message: str
) -> None:
    # The two cases' DERIVATION.md: at one instant two workers cannot form their steps; the
    # lower index goes first and decides the exit code, however the instant was reached (in
    # the second case worker 1 gets there through a run of decode steps begun earlier).
    folder = REPO / "golden" / case
    paths = {role: folder / name for role, name in INPUT_FILES.items()}
    output = tmp_path / "report.json"
    result = run_servesim(*replay_args(paths, output))
    assert result.returncode == code
    assert message in result.stderr
    assert not output.exists()
