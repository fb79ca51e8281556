"""``servesim plot``: the series it derives, the figures it draws and the files it writes.

The series are checked against hand-derived values and against what the report says
elsewhere (the trace's step intervals, the workers' ``busy_us``, the summary's token count);
the figures are checked by their data, by the SVG's elements and by the PNG's pixels.
matplotlib is the optional ``plot`` extra: its tests skip when it is not installed, unless
``SERVESIM_REQUIRE_PLOT`` is set (``tox -e extras``), where a missing matplotlib fails.
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from servesim.replay import replay
from servesim_cli import series
from servesim_cli.main import main
from tests.helpers import EXAMPLES, scenario_doc, timing_doc, workload_doc, write_inputs

BASIC = EXAMPLES / "basic"


def _need_matplotlib() -> None:
    """Skip without matplotlib, unless this environment promised it."""
    if os.environ.get("SERVESIM_REQUIRE_PLOT"):
        import matplotlib  # noqa: F401  (fails the test here, as it should)
    else:
        pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The bundled example replayed on 2 workers (with the trace) and on 1 worker."""
    folder = tmp_path_factory.mktemp("reports")
    two = folder / "two-workers.json"
    two.write_bytes(
        replay(
            BASIC / "scenario.json",
            BASIC / "workload.json",
            BASIC / "timing-profile.json",
            trace=True,
        )
    )
    scenario = json.loads((BASIC / "scenario.json").read_text())
    scenario["fleet"]["workers"] = 1
    (folder / "one.json").write_text(json.dumps(scenario))
    one = folder / "one-worker.json"
    one.write_bytes(
        replay(folder / "one.json", BASIC / "workload.json", BASIC / "timing-profile.json")
    )
    return {"two": two, "one": one}


# --- series, by hand ---------------------------------------------------------------------


def test_occupancy_integrates_intervals_over_bins_by_hand() -> None:
    bins = series.Bins(start_us=0, end_us=30, width_us=10)
    # [5, 25): 5 us in bin 0, 10 in bin 1, 5 in bin 2; [10, 20): all of bin 1; [28, 30): bin 2
    assert series.occupancy_us([(5, 25), (10, 20), (28, 30)], bins) == [5, 20, 7]
    # an interval across several whole bins, and one beyond the bins' end, clipped
    assert series.occupancy_us([(0, 30)], bins) == [10, 10, 10]
    assert series.occupancy_us([(25, 99)], bins) == [0, 0, 5]
    assert series.occupancy_us([(3, 3)], bins) == [0, 0, 0]


def test_bins_cover_the_span_and_cut_the_last_one() -> None:
    bins = series.Bins(start_us=100, end_us=125, width_us=10)
    assert bins.count == 3
    assert [bins.length_us(index) for index in range(3)] == [10, 10, 5]
    assert bins.index(100) == 0
    assert bins.index(125) == 2  # the end itself falls in the last bin
    assert series.event_counts([100, 109, 110, 125], bins) == [2, 1, 1]


def test_cdf_points_are_on_the_empirical_cdf() -> None:
    assert series.cdf_points([1, 1, 2, 5]) == ([1, 2, 5], [0.5, 0.75, 1.0])
    values = list(range(10_000))
    xs, ys = series.cdf_points(values, max_points=101)
    assert len(xs) == 101
    assert (xs[0], ys[0], xs[-1], ys[-1]) == (0, 1 / 10_000, 9_999, 1.0)
    assert all(y == (x + 1) / 10_000 for x, y in zip(xs, ys, strict=True))


def test_merged_joins_overlapping_and_touching_intervals() -> None:
    assert series.merged([(5, 7), (0, 2), (2, 3), (6, 9), (11, 12)]) == [(0, 3), (5, 9), (11, 12)]


def test_waiting_and_running_of_a_hand_derived_replay(tmp_path: Path) -> None:
    # One worker, whole prefill, max_num_seqs 1; 1 ms per step, prefill and decode free:
    # "a" (arrives 0) runs steps [0, 1000) and [1000, 2000): first token 1000, done at 2000.
    # "b" (arrives 500) waits until 2000, runs [2000, 3000): one token, done at 3000.
    paths = write_inputs(
        tmp_path,
        scenario_doc(workers=1, max_num_seqs=1, max_batched_tokens=64),
        workload_doc(("a", 0, 4, 2), ("b", 500, 4, 1)),
        timing_doc(step_overhead_ns=1_000_000, prefill_token_ns=0, decode_token_ns=0),
    )
    report = tmp_path / "report.json"
    report.write_bytes(replay(paths["scenario"], paths["workload"], paths["timing_profile"]))
    view = series.read_report(report)
    bins = series.bins_for([view], 1000)
    assert (bins.start_us, bins.end_us, bins.count) == (0, 3000, 3)
    data = series.time_series(view, bins)
    assert data.waiting_us == [500, 1000, 0]
    assert data.running_us == [1000, 1000, 1000]
    assert data.output_tokens == [0, 1, 2]  # tokens at 1000 (a), 2000 (a), 3000 (b, last bin)
    assert data.completions == [0, 0, 2]
    assert data.busy_us == [[1000, 1000, 1000]]
    assert series.mean_level(data.waiting_us, bins) == [0.5, 1.0, 0.0]


# --- series, against the rest of the report -----------------------------------------------


def test_busy_from_timelines_equals_the_trace_and_the_counters(reports: dict[str, Path]) -> None:
    view = series.read_report(reports["two"])
    bins = series.bins_for([view], 997)  # a width that does not divide any step
    data = series.time_series(view, bins)
    document = json.loads(reports["two"].read_text())
    steps: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for step in document["trace"]:
        steps[step["worker"]].append((step["start_us"], step["end_us"]))
    assert data.busy_us == [series.occupancy_us(steps[worker], bins) for worker in range(2)]
    assert data.busy_totals_us == [worker["busy_us"] for worker in document["workers"]]
    assert series.counter_mismatches(view, data) == []
    assert sum(data.output_tokens) == document["summary"]["output_tokens"]
    assert sum(data.completions) == document["summary"]["completed"]


@pytest.mark.parametrize("stop_at_us", [150_000, 300_000, 450_000])
def test_busy_of_a_replay_cut_by_a_stop_time_equals_the_counters(
    tmp_path: Path, stop_at_us: int
) -> None:
    """R62, R16: a cut-off request that arrived kept its worker busy until the stop time (a
    cut step counts up to it), so the derived busy time is still each worker's counter."""
    sessions = EXAMPLES / "sessions"
    scenario = json.loads((sessions / "scenario-deadline.json").read_bytes())
    scenario["stop_at_us"] = stop_at_us
    (tmp_path / "scenario.json").write_text(json.dumps(scenario))
    report = tmp_path / "report.json"
    timing = BASIC / "timing-profile.json"
    report.write_bytes(replay(tmp_path / "scenario.json", sessions / "workload.json", timing))
    value = json.loads(report.read_bytes())
    assert value["summary"]["cut_off"] > 0
    assert any(r["outcome"] == "cut_off" and r["worker"] is not None for r in value["requests"])
    view = series.read_report(report)
    data = series.time_series(view, series.bins_for([view], 997))
    assert series.counter_mismatches(view, data) == []
    assert data.busy_totals_us == [worker["busy_us"] for worker in value["workers"]]


def test_a_counter_that_disagrees_is_reported(reports: dict[str, Path], tmp_path: Path) -> None:
    document = json.loads(reports["one"].read_text())
    document["workers"][0]["busy_us"] += 1
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(document))
    view = series.read_report(changed)
    (mismatch,) = series.counter_mismatches(view, series.time_series(view, series.bins_for([view])))
    assert mismatch.startswith("worker 0: busy ")


# --- the command --------------------------------------------------------------------------


def _plot(*arguments: str | Path) -> int:
    return main(["plot", *map(str, arguments)])


def test_missing_matplotlib_is_a_clear_message_and_writes_nothing(
    reports: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert _plot(reports["one"], "-o", tmp_path / "out") == 2
    error = capsys.readouterr().err
    assert "matplotlib" in error
    assert "pip install 'servesim[plot]'" in error
    assert "Traceback" not in error
    assert not (tmp_path / "out").exists()


def test_a_bad_report_names_the_file_and_pointer(
    reports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _need_matplotlib()
    document = json.loads(reports["one"].read_text())
    del document["requests"][1]["first_token_us"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    assert _plot(reports["one"], bad, "-o", tmp_path / "out") == 2
    error = capsys.readouterr().err
    assert f"{bad}: at /requests/1: missing required property: 'first_token_us'" in error
    assert not (tmp_path / "out").exists()


def _svg(path: Path) -> ET.Element:
    return ET.parse(path).getroot()


def _ids(root: ET.Element) -> set[str]:
    return {element.get("id", "") for element in root.iter()}


def _texts(root: ET.Element) -> list[str]:
    return [
        "".join(element.itertext()) for element in root.iter("{http://www.w3.org/2000/svg}text")
    ]


def test_svg_has_one_curve_per_report_and_metric_and_the_axis_titles(
    reports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _need_matplotlib()
    out = tmp_path / "out"
    assert _plot(reports["two"], reports["one"], "-o", out, "--format", "svg") == 0
    assert sorted(path.name for path in out.iterdir()) == ["latency-cdf.svg", "timeline.svg"]
    assert capsys.readouterr().out.split() == [
        str(out / "latency-cdf.svg"),
        str(out / "timeline.svg"),
    ]
    cdf = _svg(out / "latency-cdf.svg")
    curves = {identifier for identifier in _ids(cdf) if identifier.startswith("cdf-")}
    assert curves == {f"cdf-{m}-{i}" for m in ("ttft_us", "itl_us", "e2e_us") for i in (0, 1)}
    texts = _texts(cdf)
    for title in ("TTFT (ms, log scale)", "inter-token latency (ms, log scale)"):
        assert title in texts
    assert sum(text.startswith("two-workers (p99 ") for text in texts) == 3  # one legend each
    timeline = _svg(out / "timeline.svg")
    names = {
        identifier
        for identifier in _ids(timeline)
        if identifier.split("-")[0] in {"throughput", "waiting", "running", "busy"}
    }
    assert names == {
        f"{n}-{i}" for n in ("throughput", "waiting", "running", "busy") for i in (0, 1)
    }
    texts = _texts(timeline)
    assert "requests waiting (mean)" in texts
    assert any(
        text.startswith("simulated time since first arrival (s); bins of ") for text in texts
    )


def test_svg_is_the_same_bytes_every_time(reports: dict[str, Path], tmp_path: Path) -> None:
    _need_matplotlib()
    for run in ("a", "b"):
        assert _plot(reports["one"], "-o", tmp_path / run, "--format", "svg") == 0
    for name in ("latency-cdf.svg", "timeline.svg"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def _lines_by_gid(figure: Any) -> dict[str, Any]:
    return {
        line.get_gid(): line for axis in figure.axes for line in axis.get_lines() if line.get_gid()
    }


def test_cdf_curves_hold_the_reports_latencies(reports: dict[str, Path]) -> None:
    _need_matplotlib()
    from servesim_cli.plot import latency_figure

    views = [series.read_report(reports["two"]), series.read_report(reports["one"])]
    lines = _lines_by_gid(latency_figure(views, ["two", "one"]))
    for index, path in enumerate((reports["two"], reports["one"])):
        completed = [
            r for r in json.loads(path.read_text())["requests"] if r["outcome"] == "completed"
        ]
        ttft = sorted(request["ttft_us"] for request in completed)
        xs, ys = lines[f"cdf-ttft_us-{index}"].get_data()
        # every distinct TTFT once, in ms, at the fraction of requests at or below it
        assert list(xs) == [value / 1000 for value in sorted(set(ttft))]
        assert list(ys) == [
            sum(t <= value for t in ttft) / len(ttft) for value in sorted(set(ttft))
        ]
        e2e_xs, e2e_ys = lines[f"cdf-e2e_us-{index}"].get_data()
        assert e2e_xs[-1] == max(request["e2e_us"] for request in completed) / 1000
        assert e2e_ys[-1] == 1.0


def test_timeline_curves_add_up_to_the_report(reports: dict[str, Path]) -> None:
    _need_matplotlib()
    from servesim_cli.plot import timeline_figure

    view = series.read_report(reports["two"])
    bins = series.bins_for([view], 5000)
    figure = timeline_figure([series.time_series(view, bins)], ["two"])
    lines = _lines_by_gid(figure)
    document = json.loads(reports["two"].read_text())
    lengths = [bins.length_us(index) for index in range(bins.count)]
    tokens = sum(
        rate * length / 1e6
        for rate, length in zip(lines["throughput-0"].get_ydata(), lengths, strict=True)
    )
    assert tokens == pytest.approx(document["summary"]["output_tokens"])
    completed = [r for r in document["requests"] if r["outcome"] == "completed"]
    running = sum(
        level * length
        for level, length in zip(lines["running-0"].get_ydata(), lengths, strict=True)
    )
    assert running == pytest.approx(
        sum(r["completion_us"] - r["first_scheduled_us"] for r in completed)
    )
    waiting = sum(
        level * length
        for level, length in zip(lines["waiting-0"].get_ydata(), lengths, strict=True)
    )
    assert waiting == pytest.approx(sum(r["queue_us"] for r in completed))
    (image,) = [
        image for axis in figure.axes for image in axis.get_images() if image.get_gid() == "busy-0"
    ]
    busy = image.get_array()
    assert busy.shape == (2, bins.count)
    for worker, row in enumerate(busy):
        total = sum(level * length for level, length in zip(row, lengths, strict=True))
        assert total == pytest.approx(document["workers"][worker]["busy_us"])


def _has_colour(pixels: Any, rgb: tuple[int, int, int]) -> bool:
    import numpy

    target = numpy.array(rgb) / 255
    return bool((abs(pixels[..., :3] - target) < 0.02).all(axis=-1).any())


def test_png_draws_each_reports_curve_in_each_panel(
    reports: dict[str, Path], tmp_path: Path
) -> None:
    _need_matplotlib()
    from matplotlib.image import imread

    out = tmp_path / "out"
    assert _plot(reports["two"], reports["one"], "-o", out, "--format", "png") == 0
    pixels = imread(out / "latency-cdf.png")
    assert pixels.shape[:2] == (400, 1300)  # 13 x 4 inches at 100 dpi
    blue, orange = (0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E)  # matplotlib's first two colours
    width = pixels.shape[1]
    for third in range(3):
        panel = pixels[:, third * width // 3 : (third + 1) * width // 3]
        assert _has_colour(panel, blue)
        assert _has_colour(panel, orange)
    # a single report draws no second colour
    assert _plot(reports["one"], "-o", tmp_path / "single", "--format", "png") == 0
    single = imread(tmp_path / "single" / "latency-cdf.png")
    assert _has_colour(single, blue)
    assert not _has_colour(single, orange)
