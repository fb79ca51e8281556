"""``servesim summary`` and the figures behind it (servesim_cli.figures).

The hand-derived case: one worker, whole prefill, duration ``1000 + 10*P + 100*D`` µs (R22):

- step 1 [0, 1300]: prefills a (10) and b (20), P = 30: first tokens of a and b at 1300; b
  (1 output) completes.
- step 2 [1300, 2400]: a decodes (D = 1); c arrives at 2000 and waits.
- step 3 [2400, 3530]: a decodes, c prefills (P = 3): a's third token and c's first at 3530.
- step 4 [3530, 4730]: a and c decode (D = 2): a completes with 4 tokens, c with 2.

TPOT: a = (4730 - 1300) / 3 = 3430/3, c = (4730 - 3530) / 1 = 1200; b has one token, no TPOT.
Mean (3430/3 + 1200) / 2 = 3515/3; nearest rank (R27) of 2 samples: p50 = rank 1 = 3430/3,
p90 = p95 = p99 = rank 2 = 1200. Makespan 4730, all busy: utilisation 1. Throughput
3 * 10^6 / 4730 = 300000/473 requests/s, 7 * 10^6 / 4730 = 700000/473 output tokens/s.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from servesim.replay import replay
from servesim_cli import figures_bytes
from servesim_cli.figures import FiguresTap, figures_of, flat_figures, read_figures
from servesim_cli.figures_tpot import tpot_statistics
from servesim_cli.main import main
from tests.helpers import (
    REPO,
    as_report_4_0,
    replay_args,
    scenario_doc,
    timing_doc,
    workload_doc,
    write_inputs,
)

GOLDEN_REPORTS = sorted((REPO / "golden" / "valid").glob("*/expected-report.json"))


@pytest.fixture
def hand_report(tmp_path: Path) -> Path:
    """The report of the module docstring's case."""
    paths = write_inputs(
        tmp_path,
        scenario_doc(),
        workload_doc(("a", 0, 10, 4), ("b", 0, 20, 1), ("c", 2000, 3, 2)),
        timing_doc(),
    )
    output = tmp_path / "report.json"
    output.write_bytes(replay(paths["scenario"], paths["workload"], paths["timing_profile"]))
    return output


def test_the_hand_derived_timeline_holds(hand_report: Path) -> None:
    requests = {entry["id"]: entry for entry in json.loads(hand_report.read_bytes())["requests"]}
    assert requests["a"]["token_times_us"] == [1300, 2400, 3530, 4730]
    assert requests["b"]["token_times_us"] == [1300]
    assert requests["c"]["token_times_us"] == [3530, 4730]


def test_tpot_throughput_and_utilisation_are_derived_exactly(hand_report: Path) -> None:
    figures = read_figures(hand_report)
    tpot = figures.tpot_us
    assert (tpot.count, tpot.min, tpot.max) == (2, Fraction(3430, 3), 1200)
    assert tpot.mean == Fraction(3515, 3)
    assert tpot.percentiles == (
        (50, Fraction(3430, 3)),
        (90, Fraction(1200)),
        (95, Fraction(1200)),
        (99, Fraction(1200)),
    )
    assert figures.request_throughput_per_s == Fraction(300000, 473)
    assert figures.output_token_throughput_per_s == Fraction(700000, 473)
    assert figures.makespan_us == 4730
    spread = figures.workers
    assert (spread.utilization_min, spread.utilization_mean, spread.utilization_max) == (1, 1, 1)
    # a and b wait together at 0; at most two run at once (a, b in step 1; a, c in steps 3, 4)
    assert (spread.routed_min, spread.routed_max) == (3, 3)
    assert (spread.peak_running, spread.peak_waiting) == (2, 2)


def test_the_table_shows_the_figures_rounded_to_the_microsecond(
    hand_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["summary", str(hand_report)]) == 0
    table = capsys.readouterr().out
    assert f"report       {hand_report} (report 10.0)" in table
    assert "requests     3: 3 completed, 0 rejected" in table
    assert "throughput   634.25 requests/s, 1,479.92 output tokens/s" in table
    assert "makespan     0.004730 s" in table
    # TPOT: count 2, mean 1171.667 us, min 1143.333 us, p50 min, p90..max 1200 us
    tpot = next(line for line in table.splitlines() if line.startswith("TPOT "))
    assert tpot.split() == ["TPOT", "2", "1.172", "1.143", "1.143", *["1.200"] * 4]
    assert "utilisation min 100.00% (worker 0)" in table


def test_the_json_summary_names_every_figure(
    hand_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["summary", "--json", str(hand_report)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary) == {"report", "schema_version", "traced", "inputs", "figures", "pools"}
    assert [pool["name"] for pool in summary["pools"]] == ["default"]  # R85, one pool
    assert set(summary["inputs"]) == {
        "scenario_sha256",
        "workload_sha256",
        "timing_profile_sha256",
        "calibration",
    }
    numbers = summary["figures"]
    assert list(numbers) == [figure.key for figure in flat_figures(read_figures(hand_report))]
    assert numbers["tpot_us.mean"] == 3515 / 3  # the nearest binary64, as R24 rounds
    assert numbers["tpot_us.p99"] == 1200
    assert isinstance(numbers["tpot_us.p99"], int)
    assert numbers["requests"] == 3
    assert numbers["rejected_by_reason.empty_prompt"] == 0
    assert numbers["workers.utilization_max"] == 1


def test_no_samples_are_shown_as_a_dash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = write_inputs(tmp_path, scenario_doc(), workload_doc(("a", 0, 0, 3)), timing_doc())
    output = tmp_path / "report.json"
    output.write_bytes(replay(paths["scenario"], paths["workload"], paths["timing_profile"]))
    assert main(["summary", str(output)]) == 0
    table = capsys.readouterr().out
    assert "rejected     empty_prompt 1, zero_max_output_tokens 0" in table
    ttft = next(line for line in table.splitlines() if line.startswith("TTFT "))
    assert ttft.split() == ["TTFT", "0", *["-"] * 7]


# --- the large-report path: the same figures, however the report is read ---------------------


def _whole(path: Path) -> Any:
    """The figures from the whole parsed report, token times and trace included."""
    return figures_of(json.loads(path.read_bytes()), str(path))


@pytest.mark.parametrize("report", GOLDEN_REPORTS, ids=lambda path: path.parent.name)
def test_reading_without_token_times_gives_the_figures_of_the_whole_report(report: Path) -> None:
    figures = read_figures(report)
    assert figures == _whole(report)
    # what is derived exactly rounds to what the report holds (R24), and TPOT to each request's
    # mean_itl_us, which is the same quotient
    value = json.loads(report.read_bytes())
    summary = value["summary"]
    assert _nearest(figures.request_throughput_per_s) == summary["request_throughput_per_s"]
    assert (
        _nearest(figures.output_token_throughput_per_s)
        == (summary["output_token_throughput_per_s"])
    )
    utilizations = [worker["utilization"] for worker in value["workers"]]
    known = [utilization for utilization in utilizations if utilization is not None]
    assert _nearest(figures.workers.utilization_max) == max(known, default=None)
    itls = sorted(
        request["mean_itl_us"]
        for request in value["requests"]
        if request["mean_itl_us"] is not None
    )
    assert figures.tpot_us.count == len(itls)
    if itls:
        assert (_nearest(figures.tpot_us.min), _nearest(figures.tpot_us.max)) == (
            itls[0],
            itls[-1],
        )


def _nearest(value: Fraction | None) -> float | None:
    return None if value is None else value.numerator / value.denominator


def test_the_skipped_parts_are_emptied_across_any_block_boundary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traced = [path for path in GOLDEN_REPORTS if json.loads(path.read_bytes())["trace"]]
    assert traced
    for report in traced[:5]:
        data = report.read_bytes()
        for block in (1, 2, 7, 13, 64):
            monkeypatch.setattr(figures_bytes, "_BLOCK_BYTES", block)
            reduced = figures_bytes.reduced_report(io.BytesIO(data))
            assert reduced is not None
            value = json.loads(reduced)
            assert value["trace"] == []
            assert all(request["token_times_us"] == [] for request in value["requests"])
            whole = json.loads(data)
            for request in whole["requests"]:
                request["token_times_us"] = []
            whole["trace"] = []
            assert value == whole


def test_a_report_in_another_layout_is_read_whole(tmp_path: Path) -> None:
    report = next(path for path in GOLDEN_REPORTS if json.loads(path.read_bytes())["trace"])
    value = json.loads(report.read_bytes())
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(value, indent=1))
    unsorted = tmp_path / "unsorted.json"  # the trace after the workers: no end marker
    value["trace"] = value.pop("trace")
    unsorted.write_text(json.dumps(value, separators=(",", ":")))
    with unsorted.open("rb") as stream:
        assert figures_bytes.reduced_report(stream) is None
    expected = replace(read_figures(report), file="")
    assert replace(read_figures(pretty), file="") == expected
    assert replace(read_figures(unsorted), file="") == expected


def test_figures_taken_while_writing_are_those_read_back(hand_report: Path) -> None:
    data = hand_report.read_bytes()
    tap = FiguresTap(str(hand_report))

    def pieces() -> Iterator[bytes]:
        for start in range(0, len(data), 5):
            yield data[start : start + 5]

    assert b"".join(tap.passing(pieces())) == data
    assert tap.figures() == read_figures(hand_report)


@pytest.mark.parametrize(
    "text",
    [
        b'{"a": [1, -2, 3.25, 1e-7, 17074.015748031496], "b": "\\u00e9", "a": null}',
        b'{"big": 123456789012345678901234, "neg": -9999999999999999999}',
        b'{"s": "0000000000000000000000000", "f": 0.0000000000000000000012, "n": 1}',
        b'{"s": "a:1234567890123456789012", "n": [1,2,3]}',
        b"[1234567890123456789012]",
        b"1234567890123456789012",
        b"[1e0000000000000000000001, 1E-0000000000000000000001]",
        b'{"nan": NaN}',
        b'{"inf": 1e400}',
        b'{"s": "\\ud800"}',
        b"\xef\xbb\xbf{}",
        b"[" * 2000 + b"]" * 2000,
        b"{",
    ],
)
def test_a_report_is_parsed_as_the_standard_parser_parses_it(text: bytes) -> None:
    """orjson reads reports where it agrees with ``json``; ``json`` decides everything else."""
    try:
        expected = json.loads(text, parse_constant=figures_bytes._not_a_number)
    except (ValueError, RecursionError):
        expected = None
    parsed = figures_bytes.parsed(text)
    assert parsed == expected
    assert json.dumps(parsed) == json.dumps(expected)  # the same types (int stays int)


@pytest.mark.parametrize(
    ("text", "long"),
    [
        (b'{"sha256": "' + b"0" * 64 + b'", "n": 12345678901234567}', False),
        (b'{"f": 0.1234567890123456789012}', False),
        (b'{"n": 1234567890123456789}', True),
        (b'{"n": [-1234567890123456789]}', True),
        (b"1234567890123456789", True),
        (b"[1e0000000000000000001]", True),
        (b'{"s": "a:1234567890123456789"}', True),  # inside a string, but it cannot tell
    ],
)
def test_long_integers_are_told_from_long_digit_runs_in_strings(text: bytes, long: bool) -> None:
    assert figures_bytes._may_hold_a_long_integer(text) is long


def test_replay_summary_does_not_import_jsonschema(tmp_path: Path) -> None:
    """A valid report's sample is checked by servesim.contract.validity: the explainer (a tenth of a
    second) and importlib.metadata are loaded only when needed."""
    paths = write_inputs(tmp_path, scenario_doc(), workload_doc(("a", 0, 10, 4)), timing_doc())
    arguments = [str(each) for each in replay_args(paths, tmp_path / "report.json")]
    code = (
        "import sys; from servesim_cli.main import main; "
        f"main({arguments!r}); "
        "print('jsonschema' in sys.modules, 'importlib.metadata' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.splitlines()[-1] == "False False", result.stderr


# --- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "pointer", "message"),
    [
        ("{", "(document root)", "not valid JSON"),
        ('{"document": "scenario", "schema_version": "1.0"}', "/document", "expected a report"),
        ('{"document": "report", "schema_version": "11.0"}', "/schema_version", "not supported"),
        ('{"document": "report", "schema_version": "2.0"}', "(document root)", "missing required"),
    ],
)
def test_what_is_not_a_readable_report_is_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str,
    pointer: str,
    message: str,
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert main(["summary", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{bad}: at {pointer}: " in captured.err
    assert message in captured.err


def test_a_completed_request_without_its_times_is_refused(
    hand_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    value = json.loads(hand_report.read_bytes())
    value["requests"][2]["first_token_us"] = None
    hand_report.write_text(json.dumps(value))
    assert main(["summary", str(hand_report)]) == 2
    error = capsys.readouterr().err
    assert f"{hand_report}: at /requests/2/first_token_us: expected an integer >= 0" in error


def test_a_missing_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(tmp_path / "nothing.json")]) == 2
    assert "cannot read the file" in capsys.readouterr().err


# --- replay prints the summary -----------------------------------------------------------------


def test_replay_prints_the_summary_unless_quiet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = write_inputs(
        tmp_path,
        scenario_doc(),
        workload_doc(("a", 0, 10, 4), ("b", 0, 20, 1), ("c", 2000, 3, 2)),
        timing_doc(),
    )
    output = tmp_path / "report.json"
    assert main([str(argument) for argument in replay_args(paths, output)]) == 0
    shown = capsys.readouterr().out
    assert main(["summary", str(output)]) == 0
    assert shown == capsys.readouterr().out
    assert main([str(argument) for argument in replay_args(paths, output, "--quiet")]) == 0
    assert capsys.readouterr().out == ""


def test_tpot_order_is_exact_where_floats_tie() -> None:
    # (3k + 2)/3 and (3k + 1)/3 are different numbers with one nearest binary64.
    k = (2**53 - 3) // 3
    assert (3 * k + 1) / 3 == (3 * k + 2) / 3
    requests = [
        {"outcome": "completed", "output_tokens": 4, "first_token_us": 0, "completion_us": span}
        for span in (3 * k + 2, 3 * k + 1)
    ]
    tpot = tpot_statistics(requests, "r.json")
    assert tpot.min == tpot.percentile(50) == Fraction(3 * k + 1, 3)
    assert tpot.max == tpot.percentile(90) == Fraction(3 * k + 2, 3)
    assert tpot.mean == Fraction(6 * k + 3, 6)


def test_replay_to_standard_output_prints_the_report_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = write_inputs(tmp_path, scenario_doc(), workload_doc(("a", 0, 10, 4)), timing_doc())
    assert main([str(argument) for argument in replay_args(paths, Path("-"))]) == 0
    assert json.loads(capsys.readouterr().out)["document"] == "report"


CACHE_CASE = REPO / "golden" / "valid" / "kv-partial-reuse-shared-leading-blocks"


def test_a_report_with_a_kv_cache_shows_its_cache_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """R52: the summary's cache line and figures, exact (the ratio is reused over prompt
    tokens of completed requests); a report without a cache has the same keys, all null."""
    report = CACHE_CASE / "expected-report.json"
    written = json.loads(report.read_bytes())["summary"]
    cache = read_figures(report).kv_cache
    assert cache is not None
    assert cache.reused_prompt_tokens == written["kv_cache"]["reused_prompt_tokens"] > 0
    assert cache.prefix_reuse_ratio == Fraction(
        written["kv_cache"]["reused_prompt_tokens"], written["prompt_tokens"]
    )
    assert main(["summary", str(report)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("kv"))
    assert f"({cache.reused_prompt_tokens:,} prompt tokens)" in line
    without = read_figures(GOLDEN_REPORTS[0])
    assert without.kv_cache is None
    keys = [figure.key for figure in flat_figures(without)]
    assert keys == [figure.key for figure in flat_figures(read_figures(report))]
    assert all(
        figure.value is None for figure in flat_figures(without) if figure.key.startswith("kv_")
    )


# --- report 5.0: cut-off requests, sessions, goodput (R62 to R64) ----------------------------


def _section_13_report(tmp_path: Path, **scenario: Any) -> Path:
    """The module docstring's case with b and c as the two turns of session ``s`` (c's think
    time is absent and b ends at 1300, so c still arrives at its own 2000: same timeline) and a
    scenario 1.3 with ``scenario``'s members (``slo``, ``stop_at_us``)."""
    workload = workload_doc(("a", 0, 10, 4), ("b", 0, 20, 1), ("c", 2000, 3, 2))
    workload["schema_version"] = "1.2"
    workload["sessions"] = [{"id": "s"}]
    for request in workload["requests"][1:]:
        request["session"] = "s"
    paths = write_inputs(
        tmp_path, {**scenario_doc(), "schema_version": "1.3", **scenario}, workload, timing_doc()
    )
    output = tmp_path / "report.json"
    output.write_bytes(replay(paths["scenario"], paths["workload"], paths["timing_profile"]))
    return output


def test_goodput_counts_the_requests_within_the_objectives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TTFT of a and b is 1300 us, of c 3530 - 2000 = 1530 us: with ``slo.ttft_us`` 1500, a and
    b meet the objectives (R63), 2 of 3 completed, 4 + 1 = 5 output tokens; over the makespan
    of 4730 us, 2 * 10^6 / 4730 = 422.83 requests/s and 5 * 10^6 / 4730 = 1,057.08 tokens/s."""
    report = _section_13_report(tmp_path, slo={"ttft_us": 1500})
    figures = read_figures(report)
    assert figures.goodput is not None
    assert (figures.goodput.requests, figures.goodput.output_tokens) == (2, 5)
    assert figures.goodput.share_of_completed == Fraction(2, 3)
    assert figures.goodput.request_throughput_per_s == Fraction(2_000_000, 4730)
    assert figures.goodput.output_token_throughput_per_s == Fraction(5_000_000, 4730)
    assert (figures.cut_off, figures.sessions) == (0, 1)
    assert main(["summary", str(report)]) == 0
    table = capsys.readouterr().out
    assert f"report       {report} (report 10.0)" in table
    assert "requests     3: 3 completed, 0 rejected, 0 cut off" in table
    assert "sessions     1" in table
    assert (
        "goodput      2 requests met the objectives (66.67% of completed): 422.83 requests/s, "
        "1,057.08 output tokens/s"
    ) in table
    assert main(["summary", "--json", str(report)]) == 0
    numbers = json.loads(capsys.readouterr().out)["figures"]
    assert numbers["goodput.requests"] == 2
    assert numbers["goodput.share_of_completed"] == 2 / 3
    assert numbers["cut_off"] == 0


def test_a_stop_time_s_cut_off_requests_are_counted_and_have_no_tpot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Stopped at 4000 us, step 4 [3530, 4730] is cut (R62): a and c are cut off with 3 and 1
    tokens, b completed with its one token (no TPOT sample); the makespan ends at 4000."""
    report = _section_13_report(tmp_path, stop_at_us=4000)
    figures = read_figures(report)
    assert (figures.completed, figures.cut_off, figures.makespan_us) == (1, 2, 4000)
    assert figures.tpot_us.count == 0
    assert figures.goodput is None
    assert main(["summary", str(report)]) == 0
    table = capsys.readouterr().out
    assert "requests     3: 1 completed, 0 rejected, 2 cut off" in table
    assert "goodput" not in table
    tpot = next(line for line in table.splitlines() if line.startswith("TPOT "))
    assert tpot.split() == ["TPOT", "0", *["-"] * 7]


def test_figures_of_a_report_6_0_are_those_of_its_4_0_original(hand_report: Path) -> None:
    """A report before 5.0 reads as R64's migration makes it: nothing cut off, no session, no
    goodput; and the TPOT derived from the requests rounds to R63's ``summary.tpot_us``."""
    value = json.loads(hand_report.read_bytes())
    assert value["schema_version"] == "10.0"
    written = value["summary"]["tpot_us"]
    figures = read_figures(hand_report)
    assert _nearest(figures.tpot_us.mean) == written["mean"]
    assert [_nearest(v) for _, v in figures.tpot_us.percentiles] == [
        written[f"p{percent}"] for percent, _ in figures.tpot_us.percentiles
    ]
    older = hand_report.parent / "report-4.0.json"
    older.write_text(json.dumps(as_report_4_0(value)))
    assert replace(read_figures(older), file="", schema_version="") == replace(
        figures, file="", schema_version=""
    )


def test_pools_get_a_line_each_and_a_pool_without_a_cache_is_read(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """R85: a pool without a cache has workers whose ``kv_cache`` is null beside a pool with
    one; the summary reads both and shows a line per pool (two pools here)."""
    case = Path(__file__).parents[1] / "golden" / "valid" / "pools-reject-by-one-pools-cache"
    report = case / "expected-report.json"
    figures = read_figures(report)
    assert [pool.name for pool in figures.pools] == [
        pool["name"] for pool in json.loads(report.read_bytes())["pools"]
    ]
    assert figures.kv_cache is not None
    assert figures.shows_pools()
    assert main(["summary", str(report)]) == 0
    table = capsys.readouterr().out
    for pool in figures.pools:
        assert f"  {pool.name}: {pool.workers} workers x {pool.dp_size} ranks" in table


def test_one_pool_of_one_rank_workers_shows_no_pool_lines(hand_report: Path) -> None:
    """A fleet written as ``fleet.workers`` is R77's one pool: its summary is what it was."""
    figures = read_figures(hand_report)
    assert [pool.name for pool in figures.pools] == ["default"]
    assert not figures.shows_pools()


# --- report 9.0: a fleet that changes (R117 to R123) -------------------------------------------


def _failure_report(tmp_path: Path, policy: str) -> Path:
    """Two workers, round robin, the module docstring's a, b, c; worker 0 fails at 2000 us and
    recovers at 2100 us (startup 0, R119), with ``policy`` (migrate: at most one migration)."""
    failures: dict[str, Any] = {
        "events": [{"pool": "default", "pool_worker": 0, "at_us": 2000, "recover_after_us": 100}],
        "policy": policy,
    }
    if policy == "migrate":
        failures["max_migrations"] = 1
    scenario = {**scenario_doc(workers=2), "schema_version": "1.7", "failures": failures}
    tmp_path.mkdir(exist_ok=True)
    workload = workload_doc(("a", 0, 10, 4), ("b", 0, 20, 1), ("c", 2000, 3, 2))
    paths = write_inputs(tmp_path, scenario, workload, timing_doc())
    output = tmp_path / "report.json"
    output.write_bytes(replay(paths["scenario"], paths["workload"], paths["timing_profile"]))
    return output


def test_a_failure_s_migration_and_worker_time_are_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """By hand (duration ``1000 + 10*P + 100*D``): a -> worker 0, b -> worker 1 (R13). Worker
    0: a's prefill [0, 1100] (token 1), its decode [1100, 2200] cut at 2000 (R117): a's lost
    tokens are its 10 prompt + 1 decode position = 11. a migrates (R118) and c arrives, both
    at 2000, both to worker 1 (the only candidate, R114); worker 0 is active again at 2100
    (no startup). Worker 1: b [0, 1200]; a recomputes L = 11 with c's prompt 3, [2000, 3140]
    (a's token 2, c's token 1); [3140, 4340] (c completes); [4340, 5440] (a completes). So 11
    positions recomputed, makespan 5440; worker time 5440 - 100 (failed) + 5440 = 10,780 us;
    utilisation (R122) worker 0 (1100 + 900) / 5340 = 37.45%, worker 1 4640 / 5440 = 85.29%,
    mean 6640 / 10780 = 61.60%."""
    report = _failure_report(tmp_path, "migrate")
    figures = read_figures(report)
    assert figures.makespan_us == 5440
    assert figures.fleet is not None
    assert (figures.fleet.worker_us, figures.fleet.worker_hours) == (
        10_780,
        Fraction(10_780, 3_600_000_000),
    )
    spread = figures.workers
    assert (spread.utilization_min, spread.utilization_max) == (
        Fraction(2000, 5340),
        Fraction(4640, 5440),
    )
    assert spread.utilization_mean == Fraction(6640, 10_780)
    assert main(["summary", str(report)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert "requests     3: 3 completed, 0 rejected, 0 cut off, 0 failed" in table
    assert not any(line.startswith("failed") for line in table)
    assert (
        "workers      2: utilisation min 37.45% (worker 0), mean 61.60%, max 85.29% (worker 1)"
        in table
    )
    assert "fleet        worker-hours 0.0000 (0.010780 worker-seconds)" in table
    assert (
        "             0 added, 0 taken away (0 cancelled, 0 drained); 1 failure (0 ignored), "
        "1 recovery; 1 migration, 11 tokens lost, 11 recomputed"
    ) in table
    assert main(["summary", "--json", str(report)]) == 0
    numbers = json.loads(capsys.readouterr().out)["figures"]
    assert numbers["failed"] == 0
    assert numbers["fleet.worker_us"] == 10_780
    assert numbers["fleet.worker_hours"] == 10_780 / 3_600_000_000
    assert (numbers["fleet.failures"], numbers["fleet.recoveries"]) == (1, 1)
    assert (numbers["fleet.migrations"], numbers["fleet.lost_tokens"]) == (1, 11)
    assert numbers["fleet.recomputed_tokens"] == 11


def test_failed_requests_are_counted_by_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With policy ``fail`` a fails at 2000 (R118, ``worker_failure``); c alone on worker 1:
    [2000, 3030] and [3030, 4130]. Worker time 4130 - 100 + 4130 = 8,160 us."""
    report = _failure_report(tmp_path, "fail")
    assert read_figures(report).failed == 1
    assert main(["summary", str(report)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert "requests     3: 2 completed, 0 rejected, 0 cut off, 1 failed" in table
    assert "failed       migration_limit 0, no_routable_worker 0, worker_failure 1" in table
    assert "fleet        worker-hours 0.0000 (0.008160 worker-seconds)" in table
    assert (
        "             0 added, 0 taken away (0 cancelled, 0 drained); 1 failure (0 ignored), "
        "1 recovery; 0 migrations, 11 tokens lost, 0 recomputed"
    ) in table
    assert main(["summary", "--json", str(report)]) == 0
    numbers = json.loads(capsys.readouterr().out)["figures"]
    assert (numbers["failed"], numbers["failed_by_reason.worker_failure"]) == (1, 1)


def test_a_fleet_that_never_changed_shows_only_its_worker_time(
    hand_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A report 9.0 of a fixed fleet: 0 failed, the worker time (one worker for the makespan
    of 4730 us), no line of changes; its 4.0 original shows none of it but has the same
    figures (R124's migration)."""
    assert main(["summary", str(hand_report)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert "requests     3: 3 completed, 0 rejected, 0 cut off, 0 failed" in table
    index = table.index("fleet        worker-hours 0.0000 (0.004730 worker-seconds)")
    assert table[index + 1 :] == []  # the last line: no cache, no pools, no changes
    older = hand_report.parent / "report-4.0.json"
    older.write_text(json.dumps(as_report_4_0(json.loads(hand_report.read_bytes()))))
    assert main(["summary", str(older)]) == 0
    table = capsys.readouterr().out
    assert "requests     3: 3 completed, 0 rejected, 0 cut off\n" in table
    assert "\nfleet " not in table
    assert "\nfailed " not in table
    figures = read_figures(older)
    assert figures.fleet is not None
    assert (figures.fleet.worker_us, figures.failed, figures.fleet.changed()) == (4730, 0, False)


def test_compare_pairs_the_fleet_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``servesim compare`` lists the flat figures, the fleet's among them: the two failure
    cases above differ by one failed request and one migration."""
    failing = _failure_report(tmp_path / "fail", "fail")
    migrating = _failure_report(tmp_path / "migrate", "migrate")
    main(["compare", str(failing), str(migrating)])
    rows = {line[:42].rstrip(): line[42:].split() for line in capsys.readouterr().out.splitlines()}
    assert rows["failed"][:3] == ["1", "0", "-1"]
    assert rows["migrations"][:3] == ["0", "1", "1"]
    assert rows["worker time (s)"][:3] == ["0.008160", "0.010780", "0.002620"]
    assert rows["worker-hours (h)"][:2] == ["0.0000", "0.0000"]


def test_r140_the_summary_shows_the_host_tier_of_the_bundled_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The host-tier example (README): its six turn 3s load 54 blocks in 6 loads, 864 prompt
    tokens of 4,032 (21.43 %); the pool stores the 86 identities in 60 stores and never fills.
    Without a host pool there is no such line."""
    example = REPO / "examples" / "host-tier"
    timing = REPO / "examples" / "basic" / "timing-profile.json"
    lines = {}
    for name in ("scenario.json", "scenario-gpu-only.json"):
        output = tmp_path / f"{name}.report.json"
        output.write_bytes(replay(example / name, example / "workload.json", timing))
        assert main(["summary", str(output)]) == 0
        lines[name] = [
            line for line in capsys.readouterr().out.splitlines() if line.startswith("host tier")
        ]
    assert lines["scenario.json"] == [
        "host tier    reuse 21.43% (864 prompt tokens loaded); 60 stores (86 blocks), 6 loads "
        "(54 blocks); 0 host evictions, 0 blocks skipped"
    ]
    assert lines["scenario-gpu-only.json"] == []


def test_r140_the_json_summary_has_the_host_tier_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The host-tier example's figures (README: 864 of 4,032 prompt tokens from the host in 6
    loads of 54 blocks; 86 blocks stored, no host eviction); without a host pool the same keys
    are null, so that ``servesim compare`` pairs any two reports."""
    example = REPO / "examples" / "host-tier"
    timing = REPO / "examples" / "basic" / "timing-profile.json"
    figures = {}
    for name in ("scenario.json", "scenario-gpu-only.json"):
        output = tmp_path / f"{name}.report.json"
        output.write_bytes(replay(example / name, example / "workload.json", timing))
        assert main(["summary", str(output), "--json"]) == 0
        value = json.loads(capsys.readouterr().out)["figures"]
        figures[name] = {key: v for key, v in value.items() if "host" in key}
    assert figures["scenario.json"] == {
        "kv_cache.host_reused_prompt_tokens": 864,
        "kv_cache.host_reuse_ratio": 864 / 4032,
        "kv_cache.host.loads": 6,
        "kv_cache.host.loaded_blocks": 54,
        "kv_cache.host.stored_blocks": 86,
        "kv_cache.host.evictions": 0,
    }
    assert figures["scenario-gpu-only.json"] == dict.fromkeys(figures["scenario.json"])
