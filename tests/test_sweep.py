"""``servesim sweep``: the sweep file, the points' results, the target search and the executors.

Each point's row is checked against a plain ``servesim replay`` of that point's documents
written by hand; the target search against a brute-force scan of the grid and against fake
metrics with known answers. The Ray test starts and stops a local Ray instance; it skips only
when Ray is not installed and ``SERVESIM_REQUIRE_RAY`` is unset (``tox -e extras`` sets it).
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servesim.replay import replay
from servesim_cli.sweep_file import Condition, Point, read_sweep
from servesim_cli.sweep_run import PointResult, scaled_arrival, scenario_value
from servesim_cli.sweep_search import Search, search
from tests.helpers import (
    EXAMPLES,
    csv_rows,
    progress_lines,
    run_sweep,
    scenario_doc,
    sweep_bytes,
    sweep_file,
    timing_doc,
    workload_doc,
    write_inputs,
)

# 24 requests in bursts: more workers shorten the queues, so latency falls with workers.
_REQUESTS = [(f"r{n}", (n // 6) * 40_000, 30 + 7 * (n % 5), 6 + n % 4) for n in range(24)]


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    return write_inputs(
        tmp_path,
        scenario_doc(workers=1, max_num_seqs=4, max_batched_tokens=64, max_chunk_tokens=32),
        workload_doc(*_REQUESTS),
        timing_doc(step_overhead_ns=2_000_000, prefill_token_ns=50_000, decode_token_ns=400_000),
    )


# --- the sweep file -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d["axes"].update(gpus=[1]), "at /axes: Additional properties are not allowed"),
        (lambda d: d["axes"].update(workers=[2, 2]), "at /axes/workers/1: 2 is listed twice"),
        (
            lambda d: d["axes"].update(workers={"min": 4, "max": 2}),
            "at /axes/workers: min 4 is above max 2",
        ),
        (
            lambda d: d["axes"].update(workers=[1.0]),
            "at /axes/workers/0: expected integer, found 1.0",
        ),
        (
            lambda d: d["axes"].update(speedup=["0"]),
            "at /axes/speedup/0: a speed-up must be above 0",
        ),
        (
            lambda d: d["axes"].update(speedup=[-1]),
            "at /axes/speedup/0: -1 is less than or equal to the minimum of 0",
        ),
        (
            lambda d: d["axes"].update(routing=["random"]),
            'at /axes/routing/0: expected "round_robin", "least_loaded", "cache_aware"; '
            'found "random"',
        ),
        (
            lambda d: (
                d.update(
                    target={
                        "axis": "workers",
                        "conditions": [{"metric": "ttft_us", "statistic": "p99", "at_most_us": 1}],
                    }
                )
                or d.update(axes={"speedup": [1, 2]})
            ),
            "at /target/axis: the target axis 'workers' is not swept",
        ),
        (
            lambda d: d.update(
                target={
                    "axis": "workers",
                    "conditions": [{"metric": "ttft", "statistic": "p99", "at_most_us": 1}],
                }
            ),
            'at /target/conditions/0/metric: expected "queue_us", "ttft_us", "itl_us", '
            '"e2e_us"; found "ttft"',
        ),
        (lambda d: d.pop("workload"), "at (document root): 'workload' is a required property"),
        (
            lambda d: d["axes"].update(
                workers={"min": 1, "max": 1000}, max_num_seqs={"min": 1, "max": 1000}
            ),
            "at /axes: 1,000,000 points; at most 100,000 are allowed",
        ),
    ],
)
def test_a_bad_sweep_file_names_the_pointer_and_writes_nothing(
    inputs: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: Any,
    expected: str,
) -> None:
    path = sweep_file(tmp_path, {"workers": [1, 2]})
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))
    assert run_sweep(path, "--csv", tmp_path / "out.csv", "-j", "1") == 2
    error = capsys.readouterr().err
    assert f"{path}: {expected}" in error
    assert "Traceback" not in error
    assert not (tmp_path / "out.csv").exists()


def test_a_point_that_breaks_the_scenario_is_reported_before_anything_runs(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sweep_file(tmp_path, {"max_num_seqs": [4, 128], "workers": [1, 2]})
    assert run_sweep(path, "--csv", tmp_path / "out.csv", "-j", "1") == 2
    captured = capsys.readouterr()
    assert (
        f"{path}: at /axes: point max_num_seqs=128 workers=1 makes the scenario invalid: at "
        "/scheduler/max_batched_tokens: 64 is less than max_num_seqs (128)"
    ) in captured.err
    assert "[1/" not in captured.err  # no point ran
    assert not (tmp_path / "out.csv").exists()


def test_cache_aware_routing_without_a_cache_is_reported_before_anything_runs(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # R56: cache_aware needs kv_cache with prefix caching; the base scenario has no cache
    path = sweep_file(tmp_path, {"routing": ["least_loaded", "cache_aware"]})
    assert run_sweep(path, "--csv", tmp_path / "out.csv", "-j", "1") == 2
    captured = capsys.readouterr()
    assert f"{path}: at /axes: point routing=cache_aware makes the scenario invalid" in (
        captured.err
    )
    assert "kv_cache" in captured.err
    assert "[1/" not in captured.err
    assert not (tmp_path / "out.csv").exists()


def test_state_aware_routing_points_are_scenario_1_2(tmp_path: Path) -> None:
    path = sweep_file(
        tmp_path,
        {
            "routing": [
                "round_robin",
                "least_loaded",
                {"policy": "cache_aware", "prefill_weight": 2, "load_weight": 1},
            ]
        },
    )
    plan = read_sweep(path)
    points = plan.points()
    assert [point.describe() for point in points] == [
        "routing=round_robin",
        "routing=least_loaded",
        "routing=cache_aware/2:1",
    ]
    base = {"schema_version": "1.0", "routing": {"policy": "x"}, "scheduler": {}}
    values = [scenario_value(base, point) for point in points]
    assert [value["schema_version"] for value in values] == ["1.0", "1.2", "1.2"]
    assert values[2]["routing"] == {"policy": "cache_aware", "prefill_weight": 2, "load_weight": 1}


def test_a_missing_base_input_names_its_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sweep_file(tmp_path, {"workers": [1]})
    assert run_sweep(path, "-j", "1") == 2
    assert (
        f"{tmp_path / 'scenario.json'}: at (document root): cannot read the file"
        in capsys.readouterr().err
    )


def test_target_needs_a_target_member(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sweep_file(tmp_path, {"workers": [1, 2]})
    assert run_sweep(path, "--target", "-j", "1") == 2
    assert f"{path}: at /target: --target needs a target member" in capsys.readouterr().err


def test_axes_expand_in_a_fixed_order_with_exact_speedups(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    path = sweep_file(
        tmp_path,
        {
            "workers": {"min": 1, "max": 3},
            "speedup": [1, 1.5, "7/3"],
            "routing": ["round_robin", {"policy": "random", "seed": 9}],
        },
    )
    plan = read_sweep(path)
    assert [axis for axis, _ in plan.axes] == ["speedup", "routing", "workers"]
    assert plan.values("speedup") == (1, Fraction(3, 2), Fraction(7, 3))
    points = plan.points()
    assert len(points) == 18
    assert points[0].describe() == "speedup=1 routing=round_robin workers=1"
    assert points[5].describe() == "speedup=1 routing=random/9 workers=3"
    assert points[17].describe() == "speedup=7/3 routing=random/9 workers=3"


@given(
    st.integers(min_value=0, max_value=2**53 - 1),
    st.fractions(min_value=Fraction(1, 1000), max_value=1000),
)
def test_a_speedup_floors_each_arrival_exactly(arrival: int, speedup: Fraction) -> None:
    scaled = scaled_arrival(arrival, speedup)
    assert scaled <= arrival / speedup < scaled + 1  # Fraction arithmetic: exact


# --- the points' results ------------------------------------------------------------------


def _replayed_summary(
    folder: Path, inputs: dict[str, Path], workers: int, speedup: Fraction, prefill: Any
) -> dict[str, Any]:
    """The summary of a plain replay of one point's documents, written by hand."""
    scenario = json.loads(inputs["scenario"].read_text())
    scenario["fleet"]["workers"] = workers
    scenario["scheduler"]["prefill"] = (
        {"mode": "whole"}
        if prefill == "whole"
        else {"mode": "chunked", "max_chunk_tokens": prefill}
    )
    workload = json.loads(inputs["workload"].read_text())
    for request in workload["requests"]:
        request["arrival_us"] = int(Fraction(request["arrival_us"]) / speedup)
    (folder / "s.json").write_text(json.dumps(scenario))
    (folder / "w.json").write_text(json.dumps(workload))
    return json.loads(replay(folder / "s.json", folder / "w.json", inputs["timing_profile"]))[
        "summary"
    ]


def test_each_row_is_the_replay_of_its_point(inputs: dict[str, Path], tmp_path: Path) -> None:
    path = sweep_file(
        tmp_path, {"workers": [1, 3], "speedup": [1, "5/2"], "prefill": ["whole", 16]}
    )
    assert run_sweep(path, "--csv", tmp_path / "out.csv", "-j", "1", "-q") == 0
    rows = csv_rows(tmp_path / "out.csv")
    assert [row["point"] for row in rows] == [str(n) for n in range(8)]
    # README's column order, written out: a column added later goes last (goodput_requests,
    # empty without slo), so the columns before it keep their places
    statistics = ("mean", "p50", "p90", "p95", "p99", "max")
    assert list(rows[0]) == [
        "point",
        "speedup",
        "prefill",
        "workers",
        "status",
        "requests",
        "completed",
        "rejected",
        "makespan_us",
        "request_throughput_per_s",
        "output_token_throughput_per_s",
        *(f"{m}_{s}" for m in ("queue_us", "ttft_us", "itl_us", "e2e_us") for s in statistics),
        "utilization_mean",
        "utilization_min",
        "utilization_max",
        "message",
        "goodput_requests",
    ]
    assert {row["goodput_requests"] for row in rows} == {""}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for row in rows:
        prefill = row["prefill"] if row["prefill"] == "whole" else int(row["prefill"])
        summary = _replayed_summary(
            scratch, inputs, int(row["workers"]), Fraction(row["speedup"]), prefill
        )
        assert row["status"] == "ok"
        assert int(row["makespan_us"]) == summary["makespan_us"]
        for metric in ("queue_us", "ttft_us", "itl_us", "e2e_us"):
            for statistic in ("p50", "p99", "max"):
                assert int(row[f"{metric}_{statistic}"]) == summary[metric][statistic], (
                    row["point"],
                    metric,
                )
    # the settings matter: 3 workers finish sooner than 1, and a speed-up compresses arrivals
    by_point = {int(row["point"]): row for row in rows}
    assert int(by_point[1]["ttft_us_p99"]) < int(by_point[0]["ttft_us_p99"]) or int(
        by_point[3]["ttft_us_p99"]
    ) < int(by_point[2]["ttft_us_p99"])


def test_process_pool_and_in_process_write_the_same_bytes(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sweep_file(
        tmp_path,
        {"workers": [1, 2, 3], "routing": ["round_robin", {"policy": "random", "seed": 5}]},
    )
    outputs = {}
    for jobs in ("1", "2"):
        outputs[jobs] = sweep_bytes(path, tmp_path, jobs, "-j", jobs)
        progress = progress_lines(capsys.readouterr().err)
        assert len(progress) == 6  # one progress line per point, on stderr
    assert outputs["1"] == outputs["2"]
    document = json.loads(outputs["2"][1])
    assert [point["point"] for point in document["points"]] == list(range(6))
    assert document["points"][3]["settings"] == {
        "routing": {"policy": "random", "seed": 5},
        "workers": 1,
    }


def test_reports_folder_holds_each_points_report(inputs: dict[str, Path], tmp_path: Path) -> None:
    path = sweep_file(tmp_path, {"workers": [1, 2]})
    assert run_sweep(path, "--reports", tmp_path / "reports", "-j", "1", "-q") == 0
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == [
        "point-0.json",
        "point-1.json",
    ]
    report = json.loads((tmp_path / "reports" / "point-1.json").read_text())
    assert len(report["workers"]) == 2


def test_a_point_outside_a_measured_profile_is_a_row_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    basic = EXAMPLES / "basic"
    for name, source in (
        ("scenario.json", "scenario.json"),
        ("workload.json", "workload.json"),
        ("timing-profile.json", "grid-profile.json"),
    ):
        (tmp_path / name).write_bytes((basic / source).read_bytes())
    # the grid covers up to 4 decoding requests: max_num_seqs 8 on one worker goes beyond it
    path = sweep_file(tmp_path, {"max_num_seqs": [4, 8], "workers": [1]})
    assert run_sweep(path, "--csv", tmp_path / "out.csv", "-j", "1") == 0
    rows = csv_rows(tmp_path / "out.csv")
    assert [row["status"] for row in rows] == ["ok", "out_of_coverage"]
    assert "decode_requests 5 is not in 0..4" in rows[1]["message"]
    assert (
        "point 1 (max_num_seqs=8 workers=1) was not replayed to the end" in capsys.readouterr().err
    )


# --- the target search --------------------------------------------------------------------


def _fake_batch(metric: Any, calls: list[list[int]]) -> Any:
    """A run_batch whose p99 TTFT is ``metric(workers, speedup)``."""

    def run(points: Sequence[Point]) -> list[PointResult]:
        calls.append([int(point.get("workers")) for point in points])  # type: ignore[arg-type]
        return [
            PointResult(
                point,
                {"status": "ok", "ttft_us_p99": metric(point.get("workers"), point.get("speedup"))},
                0.0,
            )
            for point in points
        ]

    return run


def _plan(tmp_path: Path, axes: dict[str, Any], at_most: int) -> Any:
    condition = {"metric": "ttft_us", "statistic": "p99", "at_most_us": at_most}
    return read_sweep(sweep_file(tmp_path, axes, {"axis": "workers", "conditions": [condition]}))


@pytest.mark.parametrize("parallel", [1, 6])
def test_bisection_finds_the_smallest_meeting_value_with_its_bracket(
    tmp_path: Path, parallel: int
) -> None:
    plan = _plan(tmp_path, {"workers": {"min": 1, "max": 100}, "speedup": [1, 2, 10]}, at_most=1000)
    calls: list[list[int]] = []
    # meets from workers >= ceil(speedup * 37 / 1): 37, 74 and never (370 > 100)
    searches = search(
        plan, plan.target, _fake_batch(lambda w, s: 1000 * s * 37 // w, calls), parallel
    )
    assert [item.answer for item in searches] == [37, 74, None]
    for item, expected in zip(searches, (37, 74), strict=False):
        assert item.outcomes[item.high] is True
        assert item.values[item.low] == expected - 1
        assert item.outcomes[item.low] is False
    assert searches[2].low == 99  # the largest value was replayed and fails
    rounds = len(calls)
    # three searches share the slots: one probe each per round bisects 101 candidates in
    # ceil(log2(101)) = 7 rounds; two each split them in three, ceil(log3(101)) = 5 rounds
    assert rounds <= (7 if parallel == 1 else 5)
    assert all(len(batch) <= max(parallel, 3) for batch in calls)
    assert not any(item.contradictions() for item in searches)


def test_smallest_value_meeting_has_no_value_below(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"workers": [4, 1, 2]}, at_most=10**9)  # listed unsorted
    (item,) = search(plan, plan.target, _fake_batch(lambda w, s: 5, []), 1)
    assert item.values == (1, 2, 4)
    assert (item.answer, item.low) == (1, -1)


def test_a_non_monotone_probe_is_flagged(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"workers": {"min": 1, "max": 8}}, at_most=10)
    # meets at 4 only (and 8): 3 fails, 4 meets, 5..7 fail, 8 meets
    item = Search(others=(), values=tuple(range(1, 9)))
    conditions = [Condition("ttft_us", "p99", 10)]
    for workers in range(1, 9):
        value = 5 if workers in {4, 8} else 50
        item.record(
            workers - 1,
            PointResult(plan.points()[workers - 1], {"status": "ok", "ttft_us_p99": value}, 0.0),
            conditions,
        )
    item.settle()
    assert item.answer == 4
    assert (4, 5) in item.contradictions()


def test_target_answer_equals_a_scan_of_the_whole_grid(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    axes = {"workers": {"min": 1, "max": 8}, "speedup": [1, 3]}
    grid = sweep_file(tmp_path, axes)
    assert run_sweep(grid, "--csv", tmp_path / "grid.csv", "-j", "2", "-q") == 0
    rows = csv_rows(tmp_path / "grid.csv")
    threshold = sorted(int(row["ttft_us_p99"]) for row in rows)[len(rows) // 2]
    condition = {"metric": "ttft_us", "statistic": "p99", "at_most_us": threshold}
    sweep_file(tmp_path, axes, {"axis": "workers", "conditions": [condition]})
    capsys.readouterr()
    assert (
        run_sweep(
            grid,
            "--target",
            "--json",
            tmp_path / "target.json",
            "--csv",
            tmp_path / "target.csv",
            "-j",
            "2",
        )
        == 0
    )
    answers = json.loads((tmp_path / "target.json").read_text())["target"]["answers"]
    for answer in answers:
        speedup = answer["settings"]["speedup"]
        meeting = [
            int(r["workers"])
            for r in rows
            if r["speedup"] == speedup and int(r["ttft_us_p99"]) <= threshold
        ]
        assert answer["workers"] == (min(meeting) if meeting else None)
        if answer["below"] is not None:
            assert answer["below"]["workers"] == answer["workers"] - 1
            assert answer["below"]["ttft_us_p99"] > threshold >= answer["meets"]["ttft_us_p99"]
    target_rows = csv_rows(tmp_path / "target.csv")
    assert len(target_rows) < len(rows)  # bisection replayed fewer points
    for row in target_rows:
        assert row["meets_target"] == ("true" if int(row["ttft_us_p99"]) <= threshold else "false")
    out = capsys.readouterr().out
    assert f"target: smallest workers with p99 ttft_us <= {threshold:,} us" in out


# --- plot and executors -------------------------------------------------------------------


def test_sweep_plot_draws_a_curve_per_other_setting(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    if not os.environ.get("SERVESIM_REQUIRE_PLOT"):
        pytest.importorskip("matplotlib")
    path = sweep_file(tmp_path, {"workers": [1, 2, 4], "speedup": [1, 2]})
    assert run_sweep(path, "--plot", tmp_path / "sweep.svg", "-j", "1", "-q") == 0
    root = ET.parse(tmp_path / "sweep.svg").getroot()
    ids = {element.get("id", "") for element in root.iter()}
    assert {i for i in ids if i.startswith("sweep-")} == {
        f"sweep-{m}-{n}" for m in ("ttft_us_p99", "e2e_us_p99") for n in (0, 1)
    }


def test_sweep_plot_without_matplotlib_says_so_before_running(
    inputs: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    path = sweep_file(tmp_path, {"workers": [1]})
    assert (
        run_sweep(path, "--plot", tmp_path / "p.png", "--csv", tmp_path / "t.csv", "-j", "1") == 2
    )
    assert "pip install 'servesim[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "t.csv").exists()


def test_executor_ray_without_ray_says_so(
    inputs: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    path = sweep_file(tmp_path, {"workers": [1]})
    assert run_sweep(path, "--executor", "ray") == 2
    assert "pip install 'servesim[ray]'" in capsys.readouterr().err


def test_ray_executor_on_a_local_instance_matches_local_processes(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    if os.environ.get("SERVESIM_REQUIRE_RAY"):
        import ray
    else:
        ray = pytest.importorskip("ray")
    condition = {"metric": "ttft_us", "statistic": "p99", "at_most_us": 12_500}
    path = sweep_file(
        tmp_path,
        {"workers": {"min": 1, "max": 6}, "speedup": [1, 2]},
        {"axis": "workers", "conditions": [condition]},
    )
    runs = {"grid": (), "target": ("--target",)}
    for name, options in runs.items():
        assert (
            run_sweep(path, *options, "--json", tmp_path / f"{name}-local.json", "-j", "2", "-q")
            == 0
        )
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for name, options in runs.items():
            output = tmp_path / f"{name}-ray.json"
            assert run_sweep(path, *options, "--json", output, "--executor", "ray", "-q") == 0
            assert ray.is_initialized()  # the sweep joined this instance and left it running
    finally:
        ray.shutdown()
    for name in runs:
        ray_bytes = (tmp_path / f"{name}-ray.json").read_bytes()
        assert ray_bytes == (tmp_path / f"{name}-local.json").read_bytes()
    # a search with something to find: each answer is bracketed by a failing smaller fleet
    answers = json.loads((tmp_path / "target-ray.json").read_text())["target"]["answers"]
    assert all(answer["below"] is not None and answer["workers"] > 1 for answer in answers)
