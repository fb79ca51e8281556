"""``servesim summary``: a report's headline figures as a table a person reads, or as JSON.

The figures are those of ``servesim_cli.figures``. Display rounding, always to nearest with ties
to even, from the exact value: latencies in milliseconds to the microsecond (3 decimals), the
makespan and the worker time in seconds to the microsecond, throughputs and utilisation
percentages to 2 decimals, worker-hours to 4 (0.36 s).
"""

from __future__ import annotations

import argparse
import json
import sys
from fractions import Fraction
from typing import Any

from servesim.contract.errors import ServesimError
from servesim_cli.command import EXIT_OK, Command
from servesim_cli.figures import (
    ReportFigures,
    Statistics,
    Value,
    flat_figures,
    read_figures,
)
from servesim_cli.messages import report_invalid

#: A unit -> (decimal places, the factor from the figure's value to what is shown, suffix).
_SHOWN = {
    "count": (0, Fraction(1), ""),
    "ms": (3, Fraction(1, 1000), " ms"),
    "s": (6, Fraction(1, 1_000_000), " s"),
    "per_s": (2, Fraction(1), "/s"),
    "percent": (2, Fraction(100), "%"),
    "h": (4, Fraction(1), " h"),
}


def decimal(value: Fraction, places: int) -> str:
    """``value`` rounded to ``places`` decimals (ties to even), with thousands separators."""
    scaled = round(value * 10**places)
    sign = "-" if scaled < 0 else ""
    whole, fraction = divmod(abs(scaled), 10**places)
    return f"{sign}{whole:,}" + (f".{fraction:0{places}d}" if places else "")


def shown(value: Value, unit: str, *, suffix: bool = False) -> str:
    """A figure as a table shows it; ``-`` where there is none (no samples, no makespan)."""
    if value is None:
        return "-"
    places, factor, text = _SHOWN[unit]
    return decimal(value * factor, places) + (text if suffix else "")


def json_number(value: Value) -> int | float | None:
    """A figure for JSON: an integer when whole, else the nearest binary64 (as R24 rounds)."""
    if value is None:
        return None
    if value.denominator == 1:
        return value.numerator
    return float(value)  # Fraction -> float is correctly rounded


def render(figures: ReportFigures) -> str:
    """The summary table of one report."""
    by_key = {figure.key: figure for figure in flat_figures(figures)}

    def show(key: str) -> str:
        return shown(by_key[key].value, by_key[key].unit, suffix=True)

    def plain(key: str) -> str:
        return shown(by_key[key].value, by_key[key].unit)

    rejected = ", ".join(f"{reason} {count:,}" for reason, count in figures.rejected_by_reason)
    lines = [
        f"report       {figures.file} (report {figures.schema_version}"
        + (", with trace)" if figures.traced else ")"),
        *_input_lines(figures),
        "",
        f"requests     {figures.requests:,}: {figures.completed:,} completed, "
        f"{figures.rejected:,} rejected, {figures.cut_off:,} cut off"
        + (f", {figures.failed:,} failed" if figures.shows_fleet() else ""),
    ]
    if figures.rejected:
        lines.append(f"rejected     {rejected}")
    if figures.failed and figures.fleet is not None:  # R118, R123
        failed = ", ".join(f"{reason} {n:,}" for reason, n in figures.fleet.failed_by_reason)
        lines.append(f"failed       {failed}")
    if figures.sessions:
        lines.append(f"sessions     {figures.sessions:,}")
    lines += [
        f"tokens       {figures.prompt_tokens:,} prompt, {figures.output_tokens:,} output "
        "(completed requests)",
        f"steps        {figures.steps:,}",
        f"makespan     {show('makespan_us')} from the first arrival "
        f"({figures.first_arrival_us:,} us)",
        f"throughput   {plain('request_throughput_per_s')} requests/s, "
        f"{plain('output_token_throughput_per_s')} output tokens/s",
        *_goodput_lines(figures, show, plain),
        "",
        *_latency_table(figures),
        "",
        *_worker_lines(figures, show),
        *_fleet_lines(figures),
        *_kv_cache_lines(figures, show),
        *_pool_lines(figures),
    ]
    return "\n".join(lines)


def _input_lines(figures: ReportFigures) -> list[str]:
    inputs = figures.inputs
    calibration = inputs.calibration_label()
    if inputs.calibration is None and not inputs.per_pool_profiles:
        calibration += " (synthetic profile)" if figures.schema_version != "1.0" else ""
    return [
        f"inputs       scenario {inputs.scenario_sha256[:12]}, workload "
        f"{inputs.workload_sha256[:12]}, timing profile {inputs.timing_profile_sha256[:12]} "
        "(sha256)",
        f"calibration  {calibration}",
    ]


_LATENCY_COLUMNS = ("count", "mean", "min", "p50", "p90", "p95", "p99", "max")


def _latency_table(figures: ReportFigures) -> list[str]:
    header = f"{'latency (ms)':<14}" + "".join(f"{column:>12}" for column in _LATENCY_COLUMNS)
    rows = [header]
    for name, statistics in figures.latencies():
        cells = [f"{statistics.count:,}", *(shown(value, "ms") for value in _row(statistics))]
        rows.append(f"{name.upper():<14}" + "".join(f"{cell:>12}" for cell in cells))
    rows.append(
        "TPOT: per completed request with 2+ tokens, (completion - first token) / (tokens - 1)"
    )
    return rows


def _row(statistics: Statistics) -> list[Value]:
    return [
        statistics.mean,
        statistics.min,
        *(value for _, value in statistics.percentiles),
        statistics.max,
    ]


def _worker_lines(figures: ReportFigures, show: Any) -> list[str]:
    spread = figures.workers
    return [
        f"workers      {spread.workers:,}: utilisation min {show('workers.utilization_min')} "
        f"(worker {spread.least_busy_worker}), mean {show('workers.utilization_mean')}, "
        f"max {show('workers.utilization_max')} (worker {spread.most_busy_worker})",
        f"             routed {spread.routed_min:,} to {spread.routed_max:,} requests each; "
        f"peak running {spread.peak_running:,}, peak waiting {spread.peak_waiting:,}",
    ]


def _counted(count: int, one: str, many: str) -> str:
    return f"{count:,} {one if count == 1 else many}"


def _fleet_lines(figures: ReportFigures) -> list[str]:
    """R122's worker time of a report 9.0, and R123's changes when the fleet changed."""
    fleet = figures.fleet
    if fleet is None or not figures.shows_fleet():
        return []
    lines = [
        f"fleet        worker-hours {shown(fleet.worker_hours, 'h')} "
        f"({shown(Fraction(fleet.worker_us), 's')} worker-seconds)"
    ]
    if fleet.changed():
        lines.append(
            f"             {fleet.scale_ups:,} added, {fleet.scale_downs:,} taken away "
            f"({fleet.cancelled:,} cancelled, {fleet.drained:,} drained); "
            f"{_counted(fleet.failures, 'failure', 'failures')} "
            f"({fleet.ignored_failures:,} ignored), "
            f"{_counted(fleet.recoveries, 'recovery', 'recoveries')}; "
            f"{_counted(fleet.migrations, 'migration', 'migrations')}, "
            f"{fleet.lost_tokens:,} tokens lost, {fleet.recomputed_tokens:,} recomputed"
        )
    return lines


def _goodput_lines(figures: ReportFigures, show: Any, plain: Any) -> list[str]:
    """R63's goodput, when the scenario had objectives."""
    goodput = figures.goodput
    if goodput is None:
        return []
    return [
        f"goodput      {goodput.requests:,} requests met the objectives "
        f"({show('goodput.share_of_completed')} of completed): "
        f"{plain('goodput.request_throughput_per_s')} requests/s, "
        f"{plain('goodput.output_token_throughput_per_s')} output tokens/s",
    ]


def _kv_cache_lines(figures: ReportFigures, show: Any) -> list[str]:
    """R52's cache figures, when the scenario had a cache."""
    cache = figures.kv_cache
    if cache is None:
        return []
    retracted = f", {cache.retractions:,} retractions" if cache.retractions else ""  # R95
    return [
        f"kv cache     prefix reuse {show('kv_cache.prefix_reuse_ratio')} "
        f"({cache.reused_prompt_tokens:,} prompt tokens); {cache.preemptions:,} preemptions"
        f"{retracted}, {cache.evictions:,} evictions; peak {cache.peak_blocks_in_use:,} blocks "
        "in use (largest worker)",
        *_host_tier_lines(figures),
    ]


def _host_tier_lines(figures: ReportFigures) -> list[str]:
    """R140's host tier over the fleet, when a cache had a host pool."""
    host = figures.kv_cache.host if figures.kv_cache is not None else None
    if host is None:
        return []
    return [
        f"host tier    reuse {shown(host.host_reuse_ratio, 'percent', suffix=True)} "
        f"({host.reused_prompt_tokens:,} prompt tokens loaded); {host.stores:,} stores "
        f"({host.stored_blocks:,} blocks), {host.loads:,} loads ({host.loaded_blocks:,} blocks); "
        f"{host.evictions:,} host evictions, {host.skipped_blocks:,} blocks skipped",
    ]


def _pool_lines(figures: ReportFigures) -> list[str]:
    """A line per pool (R85), when the fleet has several pools or ranks."""
    if not figures.shows_pools():
        return []
    lines = ["", "pools"]
    for pool in figures.pools:
        cache = ""
        if pool.kv_cache is not None:
            peak, preemptions, evictions = pool.kv_cache
            retracted = f", {pool.retractions:,} retractions" if pool.retractions else ""
            cache = (
                f"; kv peak {peak:,} blocks, {preemptions:,} preemptions{retracted}, "
                f"{evictions:,} evictions"
            )
        style = "" if pool.style == "vllm" else f" ({pool.style} style)"  # R88
        if pool.role is not None:  # R97
            style = f" ({pool.role}{style.replace(' (', ', ').rstrip(')')})"
        lines.append(
            f"  {pool.name}{style}: {pool.workers:,} workers x {pool.dp_size} ranks; routed "
            f"{pool.routed:,}, completed {pool.completed:,}; utilisation "
            f"{shown(pool.utilization, 'percent', suffix=True)}; "
            f"{shown(pool.request_throughput_per_s, 'per_s')} requests/s, "
            f"{shown(pool.output_token_throughput_per_s, 'per_s')} output tokens/s{cache}"
        )
    return lines


def as_json(figures: ReportFigures) -> dict[str, Any]:
    """The machine-readable summary: what was read, and every figure by its stable name."""
    inputs = figures.inputs
    return {
        "report": figures.file,
        "schema_version": figures.schema_version,
        "traced": figures.traced,
        "inputs": {
            "scenario_sha256": inputs.scenario_sha256,
            "workload_sha256": inputs.workload_sha256,
            "timing_profile_sha256": inputs.timing_profile_sha256,
            "calibration": None if inputs.calibration is None else json.loads(inputs.calibration),
        },
        "figures": {figure.key: json_number(figure.value) for figure in flat_figures(figures)},
        "pools": [
            {
                "name": pool.name,
                "workers": pool.workers,
                "dp_size": pool.dp_size,
                "routed": pool.routed,
                "completed": pool.completed,
                "utilization": json_number(pool.utilization),
                "request_throughput_per_s": json_number(pool.request_throughput_per_s),
                "output_token_throughput_per_s": json_number(pool.output_token_throughput_per_s),
            }
            for pool in figures.pools
        ],
    }


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", metavar="REPORT", help="a report file (1.0 to 5.0)")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the figures as one JSON object: report, schema_version, traced, inputs "
        "(the sha256 digests and the calibration) and figures (dotted names such as "
        "ttft_us.p99 -> a number in the report's unit, microseconds or a ratio; null where "
        "there are no samples); integers stay integers, other values are the nearest binary64",
    )


def _run(arguments: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    try:
        figures = read_figures(arguments.report)
    except ServesimError as error:
        return report_invalid(error)
    if arguments.json:
        print(json.dumps(as_json(figures), indent=2))
    else:
        print(render(figures))
    return EXIT_OK


COMMAND = Command(
    name="summary",
    description="Print a report's headline figures: requests, rejections by reason and "
    "requests cut off by a stop time, sessions, throughput and (with objectives) goodput, queue "
    "time, TTFT, ITL, per-request TPOT and E2E statistics (count, mean, min, "
    "nearest-rank p50/p90/p95/p99, max), and how evenly the workers were used; for a report "
    "9.0 also the failed requests by reason, the worker-hours and, when the fleet changed, "
    "its scale-ups, scale-downs, failures, recoveries and migrations. TPOT is each "
    "completed request's (completion_us - first_token_us) / (output_tokens - 1), for requests "
    "with at least 2 output tokens, computed exactly; the other figures are the report's own "
    "(R28, R29), with throughput and utilisation recomputed exactly from its integers. "
    "Shown rounded to nearest, ties to even: milliseconds to 3 decimals, the makespan in "
    "seconds to 6, rates and percentages to 2. A large report is read without its token times "
    "or trace. Exit 0: printed. Exit 2: not a readable report.",
    add_arguments=_add_arguments,
    run=_run,
)


def print_summary(figures: ReportFigures) -> None:
    """Print the table (``servesim replay`` does after writing a report)."""
    sys.stdout.write(render(figures) + "\n")
