"""Benchmark of the closed loop and the stop time (issue 13, SPEC.md section 13) on a real trace.

Called from bench.py (``--only sessions``). The Mooncake conversation trace, imported without its
prefix hashes, is replayed on 16 workers, round robin, with bench.py's scenario and timing:

- in open loop, as recorded (the baseline: scenario 1.0, nothing of section 13);
- in a closed loop of 64 and of 256 requests in flight (R61): each request is a unit of its own
  (the trace has no sessions), released when an earlier one ends, so arrivals are made during
  the run (R60) instead of all being known at the start;
- in open loop with a stop time at half the trace's span (R62): the replay stops there and every
  request not ended is cut off, including the half of the trace that never arrives.

Each runs ``REPEATS`` times in its own process; the median wall and CPU time and the largest
peak RSS are compared with the open loop's. The issue's target: each at most ``TIME_TARGET``
times the open loop's wall time and peak memory.

A closed loop also changes what is simulated: the trace's hour is squeezed into minutes, with
many more requests running at once, and a step's cost grows with the requests in it (and
decode-only runs, the reference's fast path, end sooner). So each closed loop is also compared
with the open loop *at its arrivals*: the same workload with each request's ``arrival_us`` set
to the time it arrived in the closed loop, which R8 and R60 replay as the same simulation (the
same steps and makespan, checked), so that what remains is the cost of releasing arrivals
during the run.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

WORKERS = 16

#: R61's ``max_in_flight`` of the two closed loops: 4 and 16 requests per worker.
IN_FLIGHT: tuple[int, ...] = (64, 256)

#: Runs of each configuration, for the median time.
REPEATS = 3

TIME_TARGET = 1.5

#: ``replay(tag, scenario, keep_arrivals)``: the figures of one replay of the section's
#: workload (bench.run); with ``keep_arrivals``, also ``arrivals``: each request's
#: ``arrival_us`` in the report, in workload order.
Replay = Callable[[str, dict[str, Any], bool], dict[str, Any]]

#: ``replay_at(tag, arrivals)``: the figures of one open-loop replay of the section's workload
#: with these arrival times.
ReplayAt = Callable[[str, Sequence[int]], dict[str, Any]]


def closed_loop(scenario: dict[str, Any], max_in_flight: int) -> dict[str, Any]:
    """``scenario`` with R61's closed loop: a scenario 1.3."""
    return {**scenario, "schema_version": "1.3", "closed_loop": {"max_in_flight": max_in_flight}}


def with_stop(scenario: dict[str, Any], stop_at_us: int) -> dict[str, Any]:
    """``scenario`` with R62's stop time: a scenario 1.3."""
    return {**scenario, "schema_version": "1.3", "stop_at_us": stop_at_us}


def half_span(requests: Sequence[dict[str, Any]]) -> int:
    """The instant halfway between the first and the last arrival (rounded down), and always
    after the first arrival, as R4 needs of a stop time."""
    arrivals = [request["arrival_us"] for request in requests]
    first, last = min(arrivals), max(arrivals)
    return first + max(1, (last - first) // 2)


def median_figures(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Replays of one configuration: the last one's figures, with the median wall and CPU time
    and the largest peak RSS of all."""
    return {
        **runs[-1],
        "wall_s": statistics.median(run["wall_s"] for run in runs),
        "cpu_s": statistics.median(run["cpu_s"] for run in runs),
        "peak_rss_mib": max(run["peak_rss_mib"] for run in runs),
    }


def simulated(figures: dict[str, Any]) -> str:
    """What was simulated, to see what each mode changes (seconds of simulated time)."""
    ttft = figures["ttft_p50_us"]
    shown = "-" if ttft is None else f"{ttft / 1e6:.2f} s"
    return (
        f"  completed {figures['completed']:,}, cut off {figures['cut_off']:,}, "
        f"steps {figures['steps']:,}, TTFT p50 {shown}, "
        f"makespan {figures['makespan_us'] / 1e6:,.0f} s"
    )


def ratio_line(name: str, figures: dict[str, Any], base: dict[str, Any]) -> str:
    """One configuration against the open loop, with the verdict on the target."""
    wall = figures["wall_s"] / base["wall_s"]
    memory = figures["peak_rss_mib"] / base["peak_rss_mib"]
    met = "MET" if max(wall, memory) <= TIME_TARGET else "MISSED"
    return (
        f"{name} / open loop: wall time {wall:.2f}x, CPU time "
        f"{figures['cpu_s'] / base['cpu_s']:.2f}x, peak memory {memory:.2f}x "
        f"(target <= {TIME_TARGET}x): {met}"
    )


def same_simulation(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """Whether two replays simulated the same thing, as far as their figures say."""
    keys = ("steps", "makespan_us", "output_tokens", "ttft_p50_us", "ttft_p99_us", "busy_us")
    return all(first[key] == second[key] for key in keys)


def sessions_section(
    workload: dict[str, Any],
    scenario: dict[str, Any],
    replay: Replay,
    replay_at: ReplayAt,
    line: Callable[..., str],
) -> None:
    """The four configurations of the section and the closed loops' open-loop twins, printed;
    ``scenario`` is bench.py's (1.0)."""
    requests = workload["requests"]
    stop = half_span(requests)
    print(
        f"mooncake {len(requests):,} req, {WORKERS} workers, round robin; median of {REPEATS} "
        "runs each"
    )
    runs: dict[str, dict[str, Any]] = {}
    configurations = [
        ("open loop", "open", scenario),
        *(
            (f"closed loop, {n} in flight", f"closed-{n}", closed_loop(scenario, n))
            for n in IN_FLIGHT
        ),
        (f"open loop, stop at {stop / 1e6:,.0f} s", "stop", with_stop(scenario, stop)),
    ]
    twins: dict[str, dict[str, Any]] = {}
    for label, tag, setup in configurations:
        closed = "closed_loop" in setup
        runs[label] = median_figures(
            [replay(tag, setup, closed and run == REPEATS - 1) for run in range(REPEATS)]
        )
        print(line(label, runs[label]))
        print(simulated(runs[label]), flush=True)
        if closed:
            arrivals = runs[label].pop("arrivals")
            twins[label] = median_figures(
                [replay_at(f"{tag}-arrivals", arrivals) for _ in range(REPEATS)]
            )
            print(line("  open loop at its arrivals", twins[label]), flush=True)
    base = runs["open loop"]
    for label, figures in list(runs.items())[1:]:
        print(ratio_line(label, figures, base))
    for label, twin in twins.items():
        figures = runs[label]
        print(
            f"{label} / open loop at its arrivals: wall time "
            f"{figures['wall_s'] / twin['wall_s']:.2f}x, CPU time "
            f"{figures['cpu_s'] / twin['cpu_s']:.2f}x, peak memory "
            f"{figures['peak_rss_mib'] / twin['peak_rss_mib']:.2f}x; same simulation: "
            f"{same_simulation(figures, twin)}"
        )
