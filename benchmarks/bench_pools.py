"""Benchmark of pools and attention data parallelism (issue 23, SPEC.md section 15).

Called from bench.py (``--only pools``). The Mooncake conversation trace is replayed on the
same 16 scheduler ranks laid out four ways, against the one-pool replay of bench.py's scenario
(``fleet.workers`` 16, scenario 1.0), all in one run:

- ``fleet.dp_size`` 1, 2 and 4 (scenario 1.4, R77): 16 workers of one rank, 8 of two and 4 of
  four (R78: each rank a complete scheduler with the scenario's limits; R83: one pass barrier
  per worker);
- two pools of 8 workers (R77), ``fast`` timed by bench.py's profile and ``slow`` by one that
  costs half as much again (R84, one ``--timing-profile POOL=FILE`` each), routed by weighted
  round robin 3 : 2 (R81), so the faster pool takes the larger share.

For each: wall and CPU seconds, peak RSS (each replay in its own process, bench.py's child),
passes (``summary.steps``, R85: a worker's passes), the ranks' steps (the workers' ``steps``,
one per rank per pass), and how many steps the event loop formed one by one (``form_step``
calls), against the ranks' steps: the decode-run shortcut (reference/servesim/engine/
decode_runs.py) forms one step for a whole run of identical decode steps, and a rank carries a
decode step across passes while its siblings prefill (engine/passes.py), so the fewer formed
per rank step, the more they collapsed; the issue asks that runs keep working for ranks whose
siblings are idle. The issue's target: every layout at most ``TIME_TARGET`` times the one-pool
time. Figures are printed, nothing is asserted.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

#: Scheduler ranks in every layout (workers * dp_size).
RANKS = 16

#: The rank layouts: ranks per worker.
DP_SIZES = (1, 2, 4)

#: The two pools: name, workers, weight (R81).
TWO_POOLS = (("fast", 8, 3), ("slow", 8, 2))

#: The slow pool's profile costs this many halves of the fast one's (3: half as much again).
SLOW_HALVES = 3

TIME_TARGET = 1.3

#: ``replay(tag, scenario, profiles)``: the figures of one replay of the section's workload;
#: ``profiles`` maps pool names to timing profiles (R84's per-pool form), or is None for
#: bench.py's one profile.
Replay = Callable[[str, dict[str, Any], dict[str, dict[str, Any]] | None], dict[str, Any]]


def dp_scenario(scenario: dict[str, Any], dp_size: int) -> dict[str, Any]:
    """``scenario`` (bench.py's 1.0) as ``RANKS / dp_size`` workers of ``dp_size`` ranks: a
    scenario 1.4 with ``fleet.dp_size`` (R77), the scenario's limits per rank (R78)."""
    fleet = {"workers": RANKS // dp_size, "dp_size": dp_size}
    return {**scenario, "schema_version": "1.4", "fleet": fleet}


def two_pool_scenario(scenario: dict[str, Any]) -> dict[str, Any]:
    """``scenario`` as ``TWO_POOLS``, weighted round robin (R81), the scenario's limits."""
    pools = [{"name": name, "workers": workers, "weight": w} for name, workers, w in TWO_POOLS]
    return {
        **scenario,
        "schema_version": "1.4",
        "fleet": {"pools": pools},
        "routing": {"policy": "weighted_round_robin"},
    }


def slower(profile: dict[str, Any]) -> dict[str, Any]:
    """A synthetic_linear profile whose every cost is ``SLOW_HALVES / 2`` of ``profile``'s."""
    model = dict(profile["model"])
    assert model["kind"] == "synthetic_linear"
    for name in ("step_overhead_ns", "prefill_token_ns", "decode_token_ns"):
        model[name] = model[name] * SLOW_HALVES // 2
    return {**profile, "model": model}


def formed_line(figures: dict[str, Any]) -> str:
    """Passes and the ranks' steps in the report, steps the loop formed one by one, and how
    many of the ranks' steps each formed step stood for."""
    formed = figures.get("formed_steps")
    passes, steps = figures["steps"], figures["rank_steps"]
    if formed is None:
        return f"passes {passes:,}, rank steps {steps:,}, formed steps: not exposed"
    per = steps / formed if formed else 0.0
    return (
        f"passes {passes:,}, rank steps {steps:,}, formed {formed:,} "
        f"({per:.2f} rank steps per formed step)"
    )


def pools_section(
    workload: dict[str, Any],
    scenario: dict[str, Any],
    timing: dict[str, Any],
    replay: Replay,
    line: Callable[[str, dict[str, Any]], str],
) -> None:
    """The section's replays, printed; ``scenario`` is bench.py's (``fleet.workers``)."""
    count = len(workload["requests"])
    print(
        f"mooncake {count:,} req, {RANKS} scheduler ranks in every layout; times against the "
        f"one-pool replay (fleet.workers {RANKS}) of this run; target <= {TIME_TARGET}x"
    )
    base = replay("pools-base", {**scenario, "fleet": {"workers": RANKS}}, None)
    print(line(f"one pool, {RANKS} workers (1.0)", base) + "  " + formed_line(base), flush=True)
    rows: list[tuple[str, dict[str, Any]]] = []
    for dp_size in DP_SIZES:
        label = f"{RANKS // dp_size} workers x dp {dp_size}"
        figures = replay(f"pools-dp{dp_size}", dp_scenario(scenario, dp_size), None)
        rows.append((label, figures))
        print(line(label, figures) + "  " + formed_line(figures), flush=True)
    profiles = {"fast": timing, "slow": slower(timing)}
    label = " + ".join(f"{n} {w}" for n, w, _ in TWO_POOLS) + " (wrr 3:2)"
    try:
        figures = replay("pools-two", two_pool_scenario(scenario), profiles)
    except subprocess.CalledProcessError as error:  # said, not hidden: the rest is measured
        why = (error.stderr or "").strip().splitlines()[-1:] or ["no message"]
        print(f"{label:<38} NOT MEASURED: the replay exited {error.returncode}: {why[0]}")
    else:
        rows.append((label, figures))
        print(line(label, figures) + "  " + formed_line(figures), flush=True)
    print(f"{'layout':<38} {'wall/one-pool':>13} {'CPU/one-pool':>12} {'RSS/one-pool':>12}")
    for label, figures in rows:
        wall = figures["wall_s"] / base["wall_s"]
        cpu = figures["cpu_s"] / base["cpu_s"]
        rss = figures["peak_rss_mib"] / base["peak_rss_mib"]
        verdict = "MET" if cpu <= TIME_TARGET else "MISSED"
        print(f"{label:<38} {wall:12.2f}x {cpu:11.2f}x {rss:11.2f}x  CPU target: {verdict}")
