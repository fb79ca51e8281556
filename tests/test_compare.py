"""``servesim compare``: figures side by side, flags above the threshold, refusals."""

from __future__ import annotations

import json
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from servesim.replay import replay
from servesim_cli.compare import differences
from servesim_cli.figures import read_figures
from servesim_cli.main import main
from tests.helpers import (
    EXAMPLES,
    as_report_1_0,
    as_report_2_0,
    as_report_3_0,
    as_report_4_0,
    as_report_5_0,
    scenario_doc,
    timing_doc,
    workload_doc,
    write_inputs,
)

REQUESTS = (("a", 0, 10, 4), ("b", 0, 20, 1), ("c", 2000, 3, 2))


def _report(folder: Path, scenario: dict[str, Any], *requests: tuple[str, int, int, int]) -> Path:
    folder.mkdir()
    paths = write_inputs(folder, scenario, workload_doc(*requests), timing_doc())
    output = folder / "report.json"
    output.write_bytes(replay(paths["scenario"], paths["workload"], paths["timing_profile"]))
    return output


@pytest.fixture
def one_worker(tmp_path: Path) -> Path:
    return _report(tmp_path / "one", scenario_doc(workers=1), *REQUESTS)


@pytest.fixture
def two_workers(tmp_path: Path) -> Path:
    return _report(tmp_path / "two", scenario_doc(workers=2), *REQUESTS)


def _compare(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, Any]:
    code = main(["compare", "--json", *arguments])
    return code, json.loads(capsys.readouterr().out)


def test_a_report_against_itself_differs_in_nothing(
    one_worker: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, comparison = _compare(capsys, str(one_worker), str(one_worker), "--threshold", "0")
    assert code == 0
    assert comparison["flagged"] == []
    assert all(comparison["same_inputs"].values())
    assert all(item["difference"] in (0, None) for item in comparison["figures"])


def test_differences_are_exact_and_flagged_above_the_threshold(
    one_worker: Path, two_workers: Path
) -> None:
    # One worker: makespan 4730 (test_summary's derivation). Two workers, round robin: a and c
    # on worker 0, b on worker 1. Worker 0: [0, 1100] prefills a (P 10); [1100, 2200] a decodes;
    # c arrives at 2000; [2200, 3330] a decodes and c prefills (P 3); [3330, 4530] both decode:
    # a's fourth token at 4530. Makespan 4530.
    items = {
        item.key: item
        for item in differences(*map(read_figures, (one_worker, two_workers)), Fraction(5))
    }
    makespan = items["makespan_us"]
    assert (makespan.a, makespan.b, makespan.difference) == (4730, 4530, -200)
    assert makespan.relative == Fraction(-200, 4730)  # -4.23%: under 5%
    assert not makespan.flagged
    routed = items["workers.routed_max"]
    assert (routed.a, routed.b, routed.relative, routed.flagged) == (3, 2, Fraction(-1, 3), True)
    assert not items["requests"].flagged
    looser = {
        item.key: item
        for item in differences(*map(read_figures, (one_worker, two_workers)), Fraction(40))
    }
    assert not looser["workers.routed_max"].flagged


def test_the_exit_code_says_whether_anything_was_flagged(
    one_worker: Path, two_workers: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, comparison = _compare(capsys, str(one_worker), str(two_workers))
    assert code == 1
    assert "workers.routed_max" in comparison["flagged"]
    assert "makespan_us" not in comparison["flagged"]
    code, comparison = _compare(capsys, str(one_worker), str(two_workers), "--threshold", "1000")
    assert (code, comparison["flagged"]) == (0, [])


def test_a_figure_that_was_zero_is_flagged_when_it_is_not(
    tmp_path: Path, one_worker: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rejecting = _report(tmp_path / "reject", scenario_doc(), *REQUESTS, ("d", 0, 0, 1))
    code, comparison = _compare(capsys, str(one_worker), str(rejecting), "--threshold", "1000")
    assert code == 1
    rejected = next(item for item in comparison["figures"] if item["key"] == "rejected")
    assert (rejected["a"], rejected["b"], rejected["relative"]) == (0, 1, None)
    assert comparison["flagged"] == ["rejected", "rejected_by_reason.empty_prompt"]


def test_the_table_names_the_inputs_that_differ(
    one_worker: Path, two_workers: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", str(one_worker), str(two_workers)]) == 1
    table = capsys.readouterr().out
    assert "inputs: scenario DIFFERS (" in table
    assert "workload same, timing-profile same, calibration same" in table
    makespan = next(line for line in table.splitlines() if line.startswith("makespan"))
    assert makespan.split() == ["makespan", "(s)", "0.004730", "0.004530", "-0.000200", "-4.23%"]
    routed = next(line for line in table.splitlines() if line.startswith("routed max"))
    assert routed.split() == ["routed", "max", "3", "2", "-1", "-33.33%", "*"]


def test_require_same_refuses_reports_of_different_inputs(
    one_worker: Path, two_workers: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", "--require-same", "workload", str(one_worker), str(two_workers)]) == 1
    capsys.readouterr()
    code = main(["compare", "--require-same", "scenario", str(one_worker), str(two_workers)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert "cannot compare: the reports were made from different scenario" in captured.err


@pytest.mark.parametrize(
    "older",
    [as_report_1_0, as_report_2_0, as_report_3_0, as_report_4_0, as_report_5_0],
    ids=["1.0", "2.0", "3.0", "4.0", "5.0"],
)
def test_an_older_report_compares_with_its_current_twin(
    tmp_path: Path,
    one_worker: Path,
    capsys: pytest.CaptureFixture[str],
    older: Callable[[dict[str, Any]], dict[str, Any]],
) -> None:
    old = tmp_path / "old.json"
    old.write_text(json.dumps(older(json.loads(one_worker.read_bytes()))))
    code, comparison = _compare(capsys, str(old), str(one_worker), "--threshold", "0")
    assert (code, comparison["flagged"]) == (0, [])


def test_both_unreadable_reports_are_named(
    tmp_path: Path, one_worker: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps(scenario_doc()))
    future = tmp_path / "future.json"
    future.write_text(json.dumps({**json.loads(one_worker.read_bytes()), "schema_version": "99.0"}))
    assert main(["compare", str(scenario), str(future)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{scenario}: at /document: expected a report document" in captured.err
    assert f"{future}: at /schema_version: " in captured.err
    assert "not supported" in captured.err


def test_a_bad_threshold_is_a_usage_error(
    one_worker: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--threshold", "-1", str(one_worker), str(one_worker)])
    assert exit_info.value.code == 2
    assert "argument --threshold: expected a number of at least 0" in capsys.readouterr().err


def test_flagged_only_shows_the_flagged_rows(
    one_worker: Path, two_workers: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", "--flagged-only", str(one_worker), str(two_workers)]) == 1
    table = capsys.readouterr().out
    rows = table.split("\n\n")[1].splitlines()[1:]  # after the header lines and column titles
    assert rows
    assert all(row.endswith("  *") for row in rows)
    assert any(row.startswith("routed max") for row in rows)
    assert not any(row.startswith("makespan") for row in rows)


def test_a_different_calibration_is_named_and_can_be_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    basic = EXAMPLES / "basic"
    reports = []
    for profile in ("timing-profile.json", "regression-profile.json"):
        report = tmp_path / f"report-{profile}"
        report.write_bytes(
            replay(basic / "scenario.json", basic / "workload.json", basic / profile)
        )
        reports.append(str(report))
    assert main(["compare", "--threshold", "1000", *reports]) == 0
    inputs = capsys.readouterr().out.splitlines()[2]
    assert "scenario same, workload same, timing-profile DIFFERS (" in inputs
    assert inputs.endswith(
        "calibration DIFFERS (none -> vllm 0.6.3, example/tiny-chat-1b @ r1, example-gpu-24gb)"
    )
    assert main(["compare", "--require-same", "calibration", *reports]) == 2
    assert "different calibration (none vs vllm 0.6.3" in capsys.readouterr().err
