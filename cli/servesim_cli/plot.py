"""``servesim plot``: latency CDFs and over-time figures of one or more reports.

Two figures, each written as PNG and/or SVG: ``latency-cdf`` (TTFT, inter-token latency and
E2E, one curve per report) and ``timeline`` (output-token throughput, requests waiting, requests
running, one curve per report; then each report's per-worker busy fraction as a heat map). The
numbers come from ``servesim_cli.series``; matplotlib (the ``plot`` extra) only draws them.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servesim.contract.canonical import write_all_atomically
from servesim.contract.errors import ServesimError
from servesim_cli import series
from servesim_cli.command import EXIT_INVALID_INPUT, EXIT_OK, Command
from servesim_cli.messages import positive_int, report_invalid

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Output formats, by file suffix.
FORMATS = ("png", "svg")

#: The message when the ``plot`` extra is not installed.
MISSING_MATPLOTLIB = (
    "servesim: {command} needs matplotlib, which is not installed; it comes with the optional "
    "extra: pip install 'servesim[plot]'"
)

_METRICS = (
    ("ttft_us", "TTFT", "fraction of requests"),
    ("itl_us", "inter-token latency", "fraction of token gaps"),
    ("e2e_us", "end-to-end latency", "fraction of requests"),
)


def matplotlib_available(command: str) -> bool:
    """Whether matplotlib can be imported; if not, say how to get it (on stderr)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(MISSING_MATPLOTLIB.format(command=command), file=sys.stderr)
        return False
    return True


def new_figure(width: float, height: float) -> Figure:
    """A figure of its own (no pyplot state), drawn by the Agg and SVG backends."""
    import matplotlib

    matplotlib.rcParams["svg.hashsalt"] = "servesim"  # stable element ids in SVG
    matplotlib.rcParams["svg.fonttype"] = "none"  # text as <text>, searchable and editable
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def figure_bytes(figure: Figure, fmt: str) -> bytes:
    """The figure's file content; no creation date, so the same data gives the same SVG."""
    buffer = io.BytesIO()
    metadata: dict[str, Any] = {"Date": None} if fmt == "svg" else {"Software": None}
    figure.savefig(buffer, format=fmt, dpi=100, metadata=metadata)
    return buffer.getvalue()


def _milliseconds(values: Sequence[int]) -> list[float]:
    return [value / 1000 for value in values]


def _percentile_label(label: str, view: series.ReportView, metric: str) -> str:
    statistic = view.summary.get(metric)
    p99 = statistic.get("p99") if isinstance(statistic, dict) else None
    return f"{label} (p99 {p99 / 1000:,.1f} ms)" if isinstance(p99, int) else label


def latency_figure(views: Sequence[series.ReportView], labels: Sequence[str]) -> Figure:
    """TTFT, ITL and E2E empirical CDFs, one curve per report, on a log time axis."""
    figure = new_figure(13, 4)
    axes = figure.subplots(1, len(_METRICS))
    samples = [series.latency_samples(view) for view in views]
    for axis, (metric, title, ylabel) in zip(axes, _METRICS, strict=True):
        for index, (view, label) in enumerate(zip(views, labels, strict=True)):
            xs, ys = series.cdf_points(samples[index][metric])
            if not xs:
                continue
            (line,) = axis.step(
                _milliseconds(xs), ys, where="post", label=_percentile_label(label, view, metric)
            )
            line.set_gid(f"cdf-{metric}-{index}")
        axis.set_xscale("log")
        axis.set_ylim(0, 1.02)
        axis.set_title(title)
        axis.set_xlabel(f"{title} (ms, log scale)")
        axis.set_ylabel(ylabel)
        axis.grid(True, which="both", alpha=0.3)
        if axis.get_lines():
            axis.legend(fontsize="small", loc="best")
    figure.suptitle("Latency CDFs (completed requests)")
    return figure


def _seconds_axis(bins: series.Bins) -> list[float]:
    """Each bin's middle, in seconds since the bins' start."""
    return [
        (index * bins.width_us + bins.length_us(index) / 2) / 1_000_000
        for index in range(bins.count)
    ]


def timeline_figure(all_series: Sequence[series.TimeSeries], labels: Sequence[str]) -> Figure:
    """Throughput, waiting and running requests over simulated time, then busy heat maps."""
    from matplotlib.ticker import MaxNLocator

    bins = all_series[0].bins
    rows = 3 + len(all_series)
    figure = new_figure(11, 2.3 * rows)
    axes = figure.subplots(rows, 1, sharex=True)
    middles = _seconds_axis(bins)
    panels: tuple[tuple[str, str, Callable[[series.TimeSeries], list[float]]], ...] = (
        ("throughput", "output tokens / s", lambda s: series.per_second(s.output_tokens, bins)),
        ("waiting", "requests waiting (mean)", lambda s: series.mean_level(s.waiting_us, bins)),
        ("running", "requests running (mean)", lambda s: series.mean_level(s.running_us, bins)),
    )
    for axis, (name, ylabel, values) in zip(axes, panels, strict=False):
        for index, (data, label) in enumerate(zip(all_series, labels, strict=True)):
            (line,) = axis.plot(middles, values(data), label=label)
            line.set_gid(f"{name}-{index}")
        axis.set_ylabel(ylabel)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize="small", loc="upper right")
    end_s = bins.count * bins.width_us / 1_000_000
    for index, (axis, data, label) in enumerate(zip(axes[3:], all_series, labels, strict=True)):
        busy = [series.mean_level(worker, bins) for worker in data.busy_us]
        image = axis.imshow(
            busy,
            aspect="auto",
            interpolation="nearest",
            origin="lower",
            vmin=0,
            vmax=1,
            cmap="viridis",
            extent=(0, end_s, -0.5, len(busy) - 0.5),
        )
        image.set_gid(f"busy-{index}")
        axis.yaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_ylabel(f"worker\n({label})")
        figure.colorbar(image, ax=axis, label="busy fraction")
    axes[-1].set_xlabel(f"simulated time since first arrival (s); bins of {bins.width_us:,} us")
    figure.suptitle("Over simulated time (from the per-request timelines)")
    return figure


def _labels(files: Sequence[str], given: Sequence[str] | None) -> list[str]:
    if given:
        return list(given)
    stems = [Path(file).stem for file in files]
    return stems if len(set(stems)) == len(stems) else list(files)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT", help="report files (R31)")
    parser.add_argument(
        "--label",
        action="append",
        metavar="NAME",
        help="a legend name per report, in order (default: the file names)",
    )
    parser.add_argument(
        "-o",
        "--output-dir",
        default=".",
        metavar="DIR",
        help="where to write latency-cdf.* and timeline.* (default: the current folder)",
    )
    parser.add_argument(
        "--format",
        action="append",
        choices=FORMATS,
        help="png or svg; repeat for both (default: both)",
    )
    parser.add_argument(
        "--bin-us",
        type=positive_int,
        metavar="US",
        help=f"width of a time bin in microseconds (default: the span over {series.DEFAULT_BINS})",
    )


def _run(arguments: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    labels = _labels(arguments.reports, arguments.label)
    if len(labels) != len(arguments.reports):
        parser.error(f"{len(labels)} --label for {len(arguments.reports)} reports")
    if not matplotlib_available("plot"):
        return EXIT_INVALID_INPUT
    try:
        views = [series.read_report(file) for file in arguments.reports]
    except ServesimError as error:
        return report_invalid(error)
    bins = series.bins_for(views, arguments.bin_us)
    all_series = [series.time_series(view, bins) for view in views]
    for view, data in zip(views, all_series, strict=True):
        for mismatch in series.counter_mismatches(view, data):
            print(f"servesim: warning: {view.file}: {mismatch}", file=sys.stderr)
    figures = {
        "latency-cdf": latency_figure(views, labels),
        "timeline": timeline_figure(all_series, labels),
    }
    formats = arguments.format or list(FORMATS)
    contents = {
        f"{name}.{fmt}": figure_bytes(figure, fmt)
        for name, figure in figures.items()
        for fmt in dict.fromkeys(formats)
    }
    directory = Path(arguments.output_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_all_atomically([(directory / name, content) for name, content in contents.items()])
    except OSError as error:
        print(f"servesim: cannot write to {directory}: {error.strerror}", file=sys.stderr)
        return EXIT_INVALID_INPUT
    for name in contents:
        print(directory / name)
    return EXIT_OK


COMMAND = Command(
    name="plot",
    description="Draw latency-cdf.{png,svg} (TTFT, inter-token latency and E2E CDFs of the "
    "completed requests, one curve per report) and timeline.{png,svg} (output tokens per "
    "second, mean requests waiting and running, and each worker's busy fraction, over "
    "simulated time). Everything is derived from the reports' per-request timelines (R26): "
    "waiting is arrival to first scheduled, running is first scheduled to completion, and a "
    "worker is busy while one of its requests runs, which is exactly its steps (checked "
    "against each worker's busy_us counter); no trace is needed. Times are integer "
    "microseconds, cut into bins of --bin-us. Needs matplotlib: pip install 'servesim[plot]'. "
    "Exit 0: written. Exit 2: a report is unreadable or matplotlib is missing; nothing written.",
    add_arguments=_add_arguments,
    run=_run,
)
