"""R44: ``servesim calibrate`` fits profiles that replay, and says how far to trust them.

Measurements are made by a known "engine", the example regression profile, on a lattice of
shapes (``examples/basic/make_measured_steps.py``), so the fitted models can be held against the
truth; bad measurement lines must exit 2 naming the file and line, writing nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servesim.contract.documents import load_document, read_document
from servesim.contract.model import RegressionTiming, StepShape, TimingModel
from servesim.contract.timing_profile import build_timing_profile
from servesim.replay import replay
from servesim.tools.calibrate import (
    CalibrateOptions,
    Calibration,
    InvalidMeasurements,
    Measurement,
    calibrate,
    parse_identity,
)
from servesim.tools.calibrate.sampling import spaced_ranks, split
from servesim_cli.main import main
from tests.helpers import EXAMPLES, load_module, run_servesim

BASIC = EXAMPLES / "basic"
SHAPE_ORDER = ("decode_requests", "context_tokens", "prefill_tokens")
IDENTITY = BASIC / "calibration-identity.json"
MEASURED = BASIC / "measured-steps.jsonl"

#: R14's test vectors for seed 0.
SEED_0_DRAWS = (0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F)


steps = load_module("make_measured_steps", BASIC / "make_measured_steps.py")


def truth() -> RegressionTiming:
    model = build_timing_profile(read_document(BASIC / "regression-profile.json").value).model
    assert isinstance(model, RegressionTiming)
    return model


def identity() -> dict[str, Any]:
    return parse_identity(IDENTITY.read_bytes(), str(IDENTITY))


def run(data: bytes, **options: int) -> Calibration:
    return calibrate(data, "measured.jsonl", identity(), str(IDENTITY), CalibrateOptions(**options))


def model_of(profile: bytes) -> TimingModel:
    return build_timing_profile(load_document(profile, "profile", "timing_profile").value).model


def line(d: int, c: int, p: int, t: int) -> str:
    return json.dumps(
        {"decode_requests": d, "context_tokens": c, "prefill_tokens": p, "duration_us": t}
    )


# --- The fit -------------------------------------------------------------------------------


@pytest.mark.parametrize("noise_seed", range(5))
def test_r44_fitted_regression_is_within_its_reported_error_of_the_truth(noise_seed: int) -> None:
    engine = truth()
    data = steps.jsonl(steps.measurements(engine, repetitions=4, seed=noise_seed))
    result = run(data, seed=noise_seed)
    fitted = model_of(result.regression)
    assert isinstance(fitted, RegressionTiming)
    summary = result.models[0]
    assert summary.kind == "regression"
    assert summary.covered_lines == summary.held_out_lines > 0
    assert summary.absolute_error_us is not None
    p95 = summary.absolute_error_us[95]
    for shape in steps.lattice():
        assert abs(fitted.step_duration_us(shape) - engine.step_duration_us(shape)) <= p95 + 1
    # The knots land on the truth's (0, 16, 32, 64 of the lattice's 0, 8, 16, 32, 48, 64), whose
    # curve is linear between 32 and 64, so each coefficient is an estimate of the truth's.
    assert [knot.tokens for knot in fitted.prefill_knots] == [0, 16, 32, 64]
    expected_knots = [0, 720_000, 1_440_000, 3_520_000]
    for knot, expected in zip(fitted.prefill_knots[1:], expected_knots[1:], strict=True):
        assert knot.ns == pytest.approx(expected, rel=0.05)
    assert fitted.intercept_ns == pytest.approx(engine.intercept_ns, rel=0.02)
    assert fitted.decode_request_ns == pytest.approx(engine.decode_request_ns, rel=0.05)
    assert fitted.context_token_ps == pytest.approx(engine.context_token_ps, rel=0.10)


def test_r44_noise_free_lattice_gives_a_grid_that_reproduces_it() -> None:
    engine = truth()
    result = run(steps.jsonl(steps.measurements(engine, noise_permille=0)), holdout_percent=0)
    grid = model_of(result.grid)
    regression = model_of(result.regression)
    for shape in steps.lattice():
        assert grid.step_duration_us(shape) == engine.step_duration_us(shape)
        assert abs(regression.step_duration_us(shape) - engine.step_duration_us(shape)) <= 1
    assert result.models[1].grid_points == (102, 5 * 6 * 6 - 102)  # lattice points measured
    for model in result.models:  # nothing held out: no errors to report
        assert (model.held_out_lines, model.absolute_error_us, model.relative_error) == (
            0,
            None,
            None,
        )
    assert "n/a" in result.summary_text("measured.jsonl")


def test_r44_trace_round_trip_is_predicted_within_the_reported_error() -> None:
    """A replay's trace is a set of measurements (R30); calibrating on it recovers the profile
    that timed it. With a knot at every distinct prefill value the truth's curve (kinked at 32)
    is in the model family, so only R42's rounding is left."""
    report = json.loads(
        replay(
            BASIC / "scenario.json",
            BASIC / "workload.json",
            BASIC / "regression-profile.json",
            trace=True,
        )
    )
    entries = report["trace"]
    data = "".join(
        line(
            entry["shape"]["decode_requests"],
            entry["shape"]["context_tokens"],
            entry["shape"]["prefill_tokens"],
            entry["end_us"] - entry["start_us"],
        )
        + "\n"
        for entry in entries
    )
    result = run(data.encode(), knots=16)
    fitted = model_of(result.regression)
    summary = result.models[0]
    assert summary.absolute_error_us is not None
    worst = summary.absolute_error_us[99]
    covered = 0
    for entry in entries:
        shape = StepShape(**entry["shape"])
        if fitted.covers(shape):
            covered += 1
            error = abs(fitted.step_duration_us(shape) - (entry["end_us"] - entry["start_us"]))
            assert error <= worst + 1
            assert error <= 1
    assert covered >= len(entries) - 2  # held-out extremes may lie outside the fitted range


def test_r44_degenerate_columns_get_coefficient_zero() -> None:
    """No decoding at all: D and C are constant 0, so only the intercept and the prefill curve
    can be fitted; the fit must neither fail nor invent a decode cost."""
    data = "".join(line(0, 0, p, 1000 + 10 * p) + "\n" for p in range(0, 65, 4) for _ in range(3))
    fitted = model_of(run(data.encode(), holdout_percent=0).regression)
    assert isinstance(fitted, RegressionTiming)
    assert (fitted.decode_request_ns, fitted.context_token_ps) == (0, 0)
    assert fitted.intercept_ns == pytest.approx(999_500, abs=2)  # 1000 us, less R42's ceil
    for p in range(65):
        assert fitted.step_duration_us(StepShape(0, 0, p)) == 1000 + 10 * p


# --- The split and the ranks ---------------------------------------------------------------


def test_r44_split_draws_splitmix64_once_per_line() -> None:
    measurements = [Measurement(n, StepShape(0, 0, 0), 1) for n in (1, 2, 3)]
    assert [draw % 100 for draw in SEED_0_DRAWS] == [35, 0, 79]
    for percent in (0, 1, 35, 36, 79, 80, 99):
        fitting, held_out = split(measurements, percent, 0)
        expected = [
            n for n, draw in zip((1, 2, 3), SEED_0_DRAWS, strict=True) if draw % 100 < percent
        ]
        assert [m.line for m in held_out] == expected
        assert len(fitting) + len(held_out) == 3
    data = "".join(line(1, 10 * n, 8, 100 + n) + "\n" for n in (1, 2, 3)).encode()
    summary = json.loads(run(data, holdout_percent=36).summary_json())
    assert (summary["fitting_lines"], summary["held_out_lines"]) == (1, 2)


@given(count=st.integers(1, 300), wanted=st.integers(2, 40))
def test_r44_spaced_ranks_are_distinct_and_keep_both_ends(count: int, wanted: int) -> None:
    ranks = spaced_ranks(count, wanted)
    assert len(ranks) == min(count, wanted)
    assert ranks[0] == 0
    assert ranks[-1] == count - 1
    assert all(a < b for a, b in itertools.pairwise(ranks))


# --- The command line ----------------------------------------------------------------------


def calibrate_cli(tmp_path: Path, measurements: Path, *extra: str) -> tuple[int, list[Path]]:
    outputs = [tmp_path / "regression.json", tmp_path / "grid.json", tmp_path / "summary.json"]
    code = main(
        [
            "calibrate",
            str(measurements),
            "--identity",
            str(IDENTITY),
            "--regression-output",
            str(outputs[0]),
            "--grid-output",
            str(outputs[1]),
            "--summary-json",
            str(outputs[2]),
            *extra,
        ]
    )
    return code, outputs


GOOD = line(1, 100, 8, 2500)

BAD_LINES = {
    "huge integer": (line(1, 100, 8, 2500).replace("2500", "9" * 60), "duration_us: expected"),
    "float": (line(1, 100, 8, 2500).replace("2500", "2500.0"), "found 2500.0"),
    "bool": (line(1, 100, 8, 2500).replace(": 1,", ": true,"), "found true"),
    "extra member": (line(1, 100, 8, 2500)[:-1] + ', "worker": 0}', "unexpected member 'worker'"),
    "missing member": (
        '{"decode_requests": 1, "context_tokens": 5, "prefill_tokens": 0}',
        "missing member 'duration_us'",
    ),
    "D=0 with C>0": (line(0, 7, 8, 2500), "context_tokens: expected 0 when decode_requests is 0"),
    "out of range": (line(2**20 + 1, 100, 8, 2500), "decode_requests: expected an integer in"),
    "zero duration": (line(1, 100, 8, 0), "duration_us: expected an integer in 1.."),
    "string": (line(1, 100, 8, 2500).replace("2500", '"2500"'), 'found "2500"'),
    "not an object": ("[1, 2, 3, 4]", "expected a JSON object"),
    "blank line": ("", "blank line"),
    "bad JSON": ("{decode_requests: 1}", "not valid JSON"),
    "duplicate member": (line(1, 100, 8, 2500)[:-1] + ', "duration_us": 3}', "duplicate member"),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_r44_bad_measurement_line_exits_2_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    text, expected = BAD_LINES[case]
    measurements = tmp_path / "measured.jsonl"
    measurements.write_text(f"{GOOD}\n{text}\n{GOOD}\n", encoding="utf-8")
    code, outputs = calibrate_cli(tmp_path, measurements)
    captured = capsys.readouterr()
    assert code == 2
    assert f"{measurements}:2: " in captured.err
    assert expected in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""
    assert not any(output.exists() for output in outputs)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", ":1: the file is empty"),
        (f"{GOOD}\n{GOOD[:30]}".encode(), ":2: not valid JSON"),  # truncated last line
        (f"{GOOD}\n".encode() + b'{"decode_requests": "\xff"}\n', ":2: not UTF-8 text"),
    ],
    ids=["empty", "truncated", "not UTF-8"],
)
def test_r44_unreadable_measurement_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, expected: str
) -> None:
    measurements = tmp_path / "measured.jsonl"
    measurements.write_bytes(content)
    code, outputs = calibrate_cli(tmp_path, measurements)
    assert code == 2
    assert expected in capsys.readouterr().err
    assert not any(output.exists() for output in outputs)


def test_r44_every_bad_line_is_listed_up_to_a_cap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    measurements = tmp_path / "measured.jsonl"
    measurements.write_text("".join(f"{line(0, n, 0, 5)}\n" for n in range(1, 31)), "utf-8")
    code, _ = calibrate_cli(tmp_path, measurements)
    err = capsys.readouterr().err
    assert code == 2
    assert f"{measurements}:20: " in err
    assert f"{measurements}:21: " not in err
    assert "... and 10 more problems" in err


@pytest.mark.parametrize(
    ("edit", "pointer"),
    [
        (lambda value: value["limits"].pop("max_model_len"), "at /limits: missing"),
        (lambda value: value.update(server_config_sha256="ABC"), "at /server_config_sha256"),
        (lambda value: value.update(source_sha256="0" * 64), "at /source_sha256"),
        (lambda value: value.update(gpu=""), "at /gpu"),
        (lambda value: value.update(extra=1), "at /extra: unexpected property 'extra'"),
    ],
    ids=["missing limit", "bad sha", "source given", "empty gpu", "extra member"],
)
def test_r44_invalid_identity_exits_2_with_its_pointer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any, pointer: str
) -> None:
    value = json.loads(IDENTITY.read_bytes())
    edit(value)
    bad = tmp_path / "identity.json"
    bad.write_text(json.dumps(value), encoding="utf-8")
    output = tmp_path / "regression.json"
    code = main(
        ["calibrate", str(MEASURED), "--identity", str(bad), "--regression-output", str(output)]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert f"{bad}: {pointer}" in err
    if "extra" in pointer:  # the identity may not hold source_sha256, so it is not offered
        assert "server_config_sha256" in err
        assert "source_sha256" not in err
    assert not output.exists()


def test_r44_measurements_beyond_the_identity_limits_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    value = json.loads(IDENTITY.read_bytes())
    value["limits"]["max_num_seqs"] = 2
    small = tmp_path / "identity.json"
    small.write_text(json.dumps(value), encoding="utf-8")
    code = main(["calibrate", str(MEASURED), "--identity", str(small)])
    err = capsys.readouterr().err
    assert code == 2
    assert "decode_requests 4 is beyond what the engine could run" in err
    assert "limits.max_num_seqs is 2" in err
    assert "limits.max_num_seqs * limits.max_model_len is 1024" in err  # C reaches 2048


def test_r44_no_fitting_line_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    measurements = tmp_path / "measured.jsonl"
    measurements.write_text(GOOD + "\n", encoding="utf-8")  # seed 0's first draw mod 100 is 35
    code, outputs = calibrate_cli(tmp_path, measurements, "--holdout-percent", "36")
    assert code == 2
    assert "no fitting lines" in capsys.readouterr().err
    assert not any(output.exists() for output in outputs)


def test_r44_reruns_give_identical_bytes_in_any_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    code, outputs = calibrate_cli(first, MEASURED)
    stdout = capsys.readouterr().out
    assert code == 0
    result = run_servesim(
        "calibrate", MEASURED, "--identity", IDENTITY,
        "--regression-output", second / "regression.json",
        "--grid-output", second / "grid.json",
        "--summary-json", second / "summary.json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == stdout
    for output in outputs:
        assert output.read_bytes() == (second / output.name).read_bytes()
    summary = json.loads(outputs[2].read_bytes())
    assert summary["lines"] == 306
    assert set(summary["models"]) == {"regression", "grid"}


def test_r44_written_profiles_replay_the_example(tmp_path: Path) -> None:
    code, outputs = calibrate_cli(tmp_path, MEASURED)
    assert code == 0
    inputs = (BASIC / "scenario.json", BASIC / "workload.json")
    measured = json.loads(replay(*inputs, BASIC / "regression-profile.json"))["summary"]
    for profile in outputs[:2]:
        report = json.loads(replay(*inputs, profile))
        assert report["summary"]["completed"] == measured["completed"] > 0
        # timed within a few percent of the engine that was measured
        assert report["summary"]["makespan_us"] == pytest.approx(measured["makespan_us"], rel=0.05)
        assert report["inputs"]["timing_profile"]["calibration"]["source_sha256"] == (
            hashlib.sha256(MEASURED.read_bytes()).hexdigest()
        )


def test_r44_summary_is_an_aligned_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", str(MEASURED), "--identity", str(IDENTITY)]) == 0
    out = capsys.readouterr().out
    table = [row for row in out.splitlines() if row.startswith(("model ", "regression ", "grid "))]
    assert len(table) == 3
    header = table[0]
    for column in ("fitting", "held-out covered", "abs p95", "rel p99"):
        end = header.index(column) + len(column)
        assert all(len(row) >= end and row[end - 1] != " " for row in table)  # right-aligned


def test_example_measurements_are_what_the_script_makes() -> None:
    assert MEASURED.read_bytes() == steps.jsonl(steps.measurements(truth()))


def test_r44_one_output_that_cannot_be_written_leaves_none_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    regression = tmp_path / "regression.json"
    code = main(
        [
            "calibrate",
            str(BASIC / "measured-steps.jsonl"),
            "--identity",
            str(IDENTITY),
            "--regression-output",
            str(regression),
            "--grid-output",
            str(tmp_path / "missing" / "grid.json"),
        ]
    )
    assert code == 4  # R32: valid inputs, an output that cannot be written
    assert "cannot write" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # not the regression, not a temporary file


def _traced_report() -> bytes:
    return replay(
        BASIC / "scenario.json",
        BASIC / "workload.json",
        BASIC / "regression-profile.json",
        trace=True,
    )


def test_r44_a_traced_report_calibrates_as_its_trace_lines_do() -> None:
    """The README's promise: a ``--trace`` report is read directly, each entry one line."""
    report = _traced_report()
    lines = "".join(
        line(*(entry["shape"][name] for name in SHAPE_ORDER), entry["end_us"] - entry["start_us"])
        + "\n"
        for entry in json.loads(report)["trace"]
    )
    from_report, from_lines = run(report), run(lines.encode())
    assert from_report.lines == from_lines.lines == len(json.loads(report)["trace"])
    assert model_of(from_report.regression) == model_of(from_lines.regression)
    assert model_of(from_report.grid) == model_of(from_lines.grid)
    assert from_report.source_sha256 == hashlib.sha256(report).hexdigest()


def test_r44_a_report_without_a_trace_is_refused_with_the_way_out() -> None:
    report = replay(BASIC / "scenario.json", BASIC / "workload.json", BASIC / "timing-profile.json")
    with pytest.raises(InvalidMeasurements, match="replay with --trace"):
        run(report)


def test_r44_few_lines_are_warned_about_not_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    three = tmp_path / "three.jsonl"
    three.write_bytes(b"".join(MEASURED.read_bytes().splitlines(keepends=True)[:3]))
    code, _ = calibrate_cli(tmp_path, three)
    assert code == 0
    err = capsys.readouterr().err
    assert "warning: only 1 held-out line: error percentiles need at least 20" in err
    assert "warning: only 2 fitting lines for 4 regression coefficients" in err
    assert run(MEASURED.read_bytes()).warnings() == [], "the bundled 306 lines are enough"
