"""Benchmark of the scheduler styles (issue 24, SPEC.md section 16) on a real trace.

Called from bench.py (``--only styles``). The Mooncake conversation trace, with its prefix
hashes, is replayed on 16 workers, round robin, engine blocks of 64 tokens, under each style
(``scheduler.style``, R88: vllm, sglang, trtllm) twice: (a) with bench_kv.py's cache that no
worker can fill, (b) on half the workers (``PRESSURE_WORKERS``), each with bench_kv.py's small
cache (``SMALL_CACHE_BLOCKS``), where vllm preempts (R49), sglang retracts (R91) and trtllm
holds requests back by its reservations (R93).

For each: the simulated latency a planner reads (TTFT and TPOT percentiles), the preemptions
and retractions the report counts (R52, R95), and the replay's cost against the vllm style's
on the same cache (CPU seconds; the issue's target: each style at most ``TIME_TARGET`` times
vllm's), with the steps the event loop formed one by one against the steps the report counts
(engine/decode_runs.py collapses runs of identical decode steps where the style allows it).
Figures are printed, nothing is asserted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench_kv import SMALL_CACHE_BLOCKS, WORKERS, no_eviction_blocks, with_cache

#: The styles of R88, vllm first: it is what the others are measured against.
STYLES = ("vllm", "sglang", "trtllm")

TIME_TARGET = 1.5

#: (b)'s fleet: on 16 workers the small cache hardly binds (7 preemptions on the full trace);
#: on 8, each twice as busy, all three styles meet memory pressure.
PRESSURE_WORKERS = 8

#: ``replay(tag, scenario)``: the figures of one replay of the section's workload (bench.run).
Replay = Callable[[str, dict[str, Any]], dict[str, Any]]


def styled(scenario: dict[str, Any], style: str) -> dict[str, Any]:
    """``scenario`` (bench_kv's 1.1 with a cache) under ``style``: a scenario 1.5 (R96). The
    limits already suit sglang (R88: chunked prefill, 2,048-token chunks, a multiple of the
    64-token block and at most the 8,192-token step budget)."""
    scheduler = {**scenario["scheduler"], "style": style}
    return {**scenario, "schema_version": "1.5", "scheduler": scheduler}


def milliseconds(value: int | float | None) -> str:
    """A latency of the report (microseconds) in milliseconds; n/a when the report has none."""
    return "n/a" if value is None else f"{value / 1e3:,.1f} ms"


def latency_line(figures: dict[str, Any]) -> str:
    """What a planner reads: TTFT and TPOT percentiles, and what memory pressure did."""
    kv = figures.get("kv_cache") or {}
    return (
        f"  TTFT p50 {milliseconds(figures['ttft_p50_us'])} p99 "
        f"{milliseconds(figures['ttft_p99_us'])}, TPOT p50 {milliseconds(figures['tpot_p50_us'])}"
        f" p99 {milliseconds(figures['tpot_p99_us'])}, preemptions {kv.get('preemptions', 0):,}, "
        f"retractions {kv.get('retractions', 0):,}, rejected {figures['rejected']:,}"
        + (
            f", peak held + reserved blocks {figures['peak_reserved_blocks']:,}"
            if "peak_reserved_blocks" in figures
            else ""
        )
    )


def formed_line(figures: dict[str, Any]) -> str:
    """Steps in the report against steps the loop formed one by one (decode-run collapse)."""
    formed = figures.get("formed_steps")
    if formed is None:
        return "  formed steps: not exposed"
    return (
        f"  steps {figures['steps']:,}, formed one by one {formed:,} "
        f"({figures['steps'] / formed if formed else 0.0:.2f} steps per formed step)"
    )


def styles_section(
    workload: dict[str, Any], scenario: dict[str, Any], replay: Replay, line: Callable[..., str]
) -> None:
    """The six replays of the section, printed; ``scenario`` is bench.py's, without a cache."""
    count = len(workload["requests"])
    large = no_eviction_blocks(workload["requests"], WORKERS)
    caches = (
        ("(a) no pressure", "large", large, WORKERS),
        ("(b) pressure", "small", SMALL_CACHE_BLOCKS, PRESSURE_WORKERS),
    )
    print(
        f"mooncake {count:,} req with prefix hashes, round robin: (a) {WORKERS} workers of "
        f"{large:,} blocks, (b) {PRESSURE_WORKERS} of {SMALL_CACHE_BLOCKS:,}; times against the "
        f"vllm style on the same fleet; target <= {TIME_TARGET}x"
    )
    for title, tag, blocks, workers in caches:
        cached = with_cache({**scenario, "fleet": {"workers": workers}}, blocks)
        rows: dict[str, dict[str, Any]] = {}
        for style in STYLES:
            figures = replay(f"style-{style}-{tag}", styled(cached, style))
            rows[style] = figures
            print(line(f"{title}, {style}", figures))
            print(latency_line(figures))
            print(formed_line(figures), flush=True)
        base = rows["vllm"]
        for style in STYLES[1:]:
            cpu = rows[style]["cpu_s"] / base["cpu_s"]
            wall = rows[style]["wall_s"] / base["wall_s"]
            verdict = "MET" if cpu <= TIME_TARGET else "MISSED"
            print(
                f"{title}: {style} / vllm: wall {wall:.2f}x, CPU {cpu:.2f}x  CPU target: {verdict}"
            )
