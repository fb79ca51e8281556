"""Benchmark of a fleet that changes (issue 27, SPEC.md section 18) on a real trace.

Called from bench.py (``--only fleet``). The Mooncake conversation trace, without its prefix
hashes, is replayed round robin with bench.py's scenario and timing on:

- fixed fleets of ``FIXED`` workers (scenario 1.0: nothing of section 18), the baseline a
  planner compares against;
- a reactive policy (R115) starting at ``START`` workers, between ``MIN`` and ``MAX``, ticking
  every ``INTERVAL_US`` on the waiting requests per active worker, each new worker taking
  ``STARTUP_US`` to load (R111);
- the largest fixed fleet and the reactive policy again, each with one worker failure per hour
  of the trace (R116 to R119): a worker fails at the middle of each hour, its requests migrate
  (at most ``MAX_MIGRATIONS`` times each) and it recovers after ``RECOVER_AFTER_US``.

For each: what a planner pays (R122's worker-hours), what the users see (TTFT p50 and p99, the
completed and failed requests, the migrations), and the replay's cost against the replay of the
largest fixed fleet (CPU seconds; the issue's target: at most ``TIME_TARGET`` times). Figures
are printed, nothing is asserted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The fixed fleets; the largest is the baseline of the replay cost.
FIXED: tuple[int, ...] = (8, 12, 16)

#: R115's policy: the initial fleet, its bounds, its tick and the model's load time.
START, MIN, MAX = 8, 4, 16
INTERVAL_US = 60_000_000
STARTUP_US = 120_000_000
#: Up above two waiting requests per active worker, down below a quarter of one.
UP_PERMILLE, DOWN_PERMILLE = 2_000, 250
STEP = 2
COOLDOWN_US = 300_000_000

#: R116, R118, R119: one failure per hour, migrated, recovered after ten minutes.
HOUR_US = 3_600_000_000
RECOVER_AFTER_US = 600_000_000
MAX_MIGRATIONS = 3

TIME_TARGET = 1.3

#: ``replay(tag, scenario)``: the figures of one replay of the section's workload (bench.run).
Replay = Callable[[str, dict[str, Any]], dict[str, Any]]


def fixed(scenario: dict[str, Any], workers: int) -> dict[str, Any]:
    """``scenario`` (bench.py's, 1.0) on ``workers`` workers that never change."""
    return {**scenario, "fleet": {"workers": workers}}


def reactive(scenario: dict[str, Any]) -> dict[str, Any]:
    """``scenario`` with R115's reactive policy on its one pool: a scenario 1.7."""
    autoscale = {
        "interval_us": INTERVAL_US,
        "metric": "waiting_per_worker",
        "up_permille": UP_PERMILLE,
        "down_permille": DOWN_PERMILLE,
        "min": MIN,
        "max": MAX,
        "step": STEP,
        "cooldown_us": COOLDOWN_US,
    }
    scaling = {"startup_us": STARTUP_US, "autoscale": autoscale}
    return {
        **scenario,
        "schema_version": "1.7",
        "fleet": {"workers": START, "scaling": scaling},
    }


def hourly_failures(scenario: dict[str, Any], span_us: int) -> dict[str, Any]:
    """``scenario`` with one failure at the middle of each hour of ``span_us`` (of the span
    itself when it is shorter, as in bench.py's short mode), of the pool's worker 0, then 1,
    and so on: a scenario 1.7. Those workers exist from time 0 under any policy here (``MIN``
    is at least the number of hours, and scale-down drains the highest indices first)."""
    hours = max(1, -(-span_us // HOUR_US))
    middle = min(HOUR_US, span_us) // 2
    events = [
        {
            "pool": "default",
            "pool_worker": hour,
            "at_us": hour * HOUR_US + middle,
            "recover_after_us": RECOVER_AFTER_US,
        }
        for hour in range(hours)
    ]
    failures = {"events": events, "policy": "migrate", "max_migrations": MAX_MIGRATIONS}
    fleet = dict(scenario["fleet"])
    if "scaling" not in fleet:  # R110: startup_us alone times the recoveries
        fleet["scaling"] = {"startup_us": STARTUP_US}
    return {**scenario, "schema_version": "1.7", "fleet": fleet, "failures": failures}


def hours(value: float | None) -> str:
    """R122's worker-hours (an R24 number) to two decimals; n/a when the report has none."""
    return "n/a" if value is None else f"{value:,.2f}"


def milliseconds(value: int | float | None) -> str:
    """A latency of the report (microseconds) in milliseconds; n/a when the report has none."""
    return "n/a" if value is None else f"{value / 1e3:,.1f} ms"


def row(label: str, figures: dict[str, Any], base: dict[str, Any]) -> str:
    """One line of the table a planner reads, with the replay's cost against ``base``'s."""
    return (
        f"| {label} | {hours(figures.get('worker_hours'))} | "
        f"{figures.get('peak_workers', 'n/a')} | {milliseconds(figures['ttft_p50_us'])} | "
        f"{milliseconds(figures['ttft_p99_us'])} | {figures['completed']:,} | "
        f"{figures.get('failed', 0):,} | {figures.get('migrations', 0):,} | "
        f"{figures['cpu_s'] / base['cpu_s']:.2f}x |"
    )


def fleet_section(workload: dict[str, Any], scenario: dict[str, Any], replay: Replay) -> None:
    """The replays of the section, printed as a Markdown table; ``scenario`` is bench.py's."""
    requests = workload["requests"]
    span_us = max(request["arrival_us"] for request in requests)
    print(
        f"mooncake {len(requests):,} req over {span_us / 3.6e9:.2f} h, round robin; reactive: "
        f"{START} workers at 0, {MIN} to {MAX}, tick {INTERVAL_US // 1_000_000} s on waiting "
        f"per active worker (up > {UP_PERMILLE / 1000:g}, down < {DOWN_PERMILLE / 1000:g}), "
        f"step {STEP}, cooldown {COOLDOWN_US // 1_000_000} s, startup "
        f"{STARTUP_US // 1_000_000} s; failures: one per hour at its middle, migrate (at most "
        f"{MAX_MIGRATIONS}), recovery after {RECOVER_AFTER_US // 1_000_000} s; replay CPU "
        f"against the fixed {FIXED[-1]}-worker replay, target <= {TIME_TARGET}x"
    )
    print(
        "| fleet | worker-hours | peak workers | TTFT p50 | TTFT p99 | completed | failed | "
        "migrations | replay CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    results = {size: replay(f"fleet-fixed-{size}", fixed(scenario, size)) for size in FIXED}
    base = results[FIXED[-1]]
    for size in FIXED:
        print(row(f"fixed {size}", results[size], base), flush=True)
    worst = 1.0
    changing = (
        ("reactive", reactive(scenario)),
        (f"fixed {FIXED[-1]}, 1 failure/h", hourly_failures(fixed(scenario, FIXED[-1]), span_us)),
        ("reactive, 1 failure/h", hourly_failures(reactive(scenario), span_us)),
    )
    for label, setup in changing:
        tag = "fleet-" + label.replace(" ", "-").replace(",", "").replace("/", "per")
        figures = replay(tag, setup)
        print(row(label, figures, base), flush=True)
        worst = max(worst, figures["cpu_s"] / base["cpu_s"])
    verdict = "MET" if worst <= TIME_TARGET else "MISSED"
    print(f"largest replay CPU against the fixed fleet's: {worst:.2f}x  target: {verdict}")
