"""Benchmark of disaggregated prefill and decode (issue 26, SPEC.md section 17) on a real trace.

Called from bench.py (``--only disagg``). The Mooncake conversation trace, with its prefix
hashes, is replayed on 16 GPUs: aggregated (16 workers), and split into prefill and decode
pools 4P+12D, 6P+10D and 8P+8D, each at two transfer bandwidths (``BANDWIDTHS``). Every worker
has the same cache (``CACHE_BLOCKS`` blocks of 64 tokens, prefix caching on) and the
benchmarks' synthetic profile; arrivals are routed cache-aware on the prefill side (on every
worker when aggregated) and least-loaded on the decode side.

For each: what a planner reads (TTFT and TPOT percentiles, and goodput under one objective,
``SLO``), what the transfers cost (their median and the longest wait for a reservation), and
the replay's cost against the aggregated replay of the same trace (CPU seconds; the issue's
target: at most ``TIME_TARGET`` times). Figures are printed, nothing is asserted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench_kv import ENGINE_BLOCK_TOKENS

#: Every worker's cache: 1,048,576 tokens, which holds the trace's longest request (1,977
#: blocks) many times over, so that what is measured is the split, not memory pressure.
CACHE_BLOCKS = 16_384

#: (prefill workers, decode workers) of the 16 GPUs; (16, 0) is the aggregated fleet.
SPLITS = ((16, 0), (4, 12), (6, 10), (8, 8))

#: R103: the KV cache of a 70B-class model with grouped-query attention in 16-bit: 2 (keys and
#: values) x 80 layers x 8 KV heads x 128 dimensions x 2 bytes = 327,680 bytes a token.
BYTES_PER_TOKEN = 327_680

#: Bytes per second: an RDMA link of 400 Gb/s (50 GB/s), and one ten times slower.
BANDWIDTHS = (50_000_000_000, 5_000_000_000)

#: R103: a fixed cost of every transfer (connection and completion), in microseconds.
BASE_LATENCY_US = 100

#: R63: the objective goodput is measured against: the first token within a second and a mean
#: inter-token latency within 10 ms.
SLO = {"ttft_us": 1_000_000, "mean_itl_us": 10_000}

TIME_TARGET = 2.0

#: ``replay(tag, scenario)``: the figures of one replay of the section's workload (bench.run).
Replay = Callable[[str, dict[str, Any]], dict[str, Any]]


def fleet(scenario: dict[str, Any], prefill: int, decode: int, bandwidth: int) -> dict[str, Any]:
    """``scenario`` (bench.py's, 1.0, without a cache) on 16 GPUs: aggregated when ``decode``
    is 0 (scenario 1.3 with the objective), else ``prefill`` prefill and ``decode`` decode
    workers (scenario 1.6, R97) sending ``BYTES_PER_TOKEN`` at ``bandwidth``."""
    cache = {"blocks": CACHE_BLOCKS, "block_tokens": ENGINE_BLOCK_TOKENS, "prefix_caching": True}
    base = {
        **scenario,
        "schema_version": "1.3",
        "kv_cache": cache,
        "routing": {"policy": "cache_aware"},
        "slo": SLO,
    }
    if decode == 0:
        return {**base, "fleet": {"workers": prefill}}
    return {
        **base,
        "schema_version": "1.6",
        "fleet": {
            "pools": [
                {"name": "prefill", "workers": prefill, "role": "prefill"},
                {"name": "decode", "workers": decode, "role": "decode"},
            ]
        },
        "routing": {"policy": "cache_aware", "decode": {"policy": "least_loaded"}},
        "kv_transfer": {
            "bytes_per_token": BYTES_PER_TOKEN,
            "bandwidth_bytes_per_s": bandwidth,
            "base_latency_us": BASE_LATENCY_US,
        },
    }


def milliseconds(value: int | float | None) -> str:
    """A latency of the report (microseconds) in milliseconds; n/a when the report has none."""
    return "n/a" if value is None else f"{value / 1e3:,.1f} ms"


def row(label: str, figures: dict[str, Any], base: dict[str, Any]) -> str:
    """One line of the table a planner reads, with the replay's cost against ``base``'s."""
    goodput = figures.get("goodput") or {}
    transfers = figures.get("transfers") or {}
    transfer = (transfers.get("transfer_us") or {}).get("p50")
    wait = (transfers.get("reservation_wait_us") or {}).get("max")
    return (
        f"| {label} | {milliseconds(figures['ttft_p50_us'])} | "
        f"{milliseconds(figures['ttft_p99_us'])} | {milliseconds(figures['tpot_p50_us'])} | "
        f"{milliseconds(figures['tpot_p99_us'])} | {goodput.get('requests', 0):,} | "
        f"{milliseconds(transfer)} | {milliseconds(wait)} | "
        f"{figures['cpu_s'] / base['cpu_s']:.2f}x |"
    )


def disagg_section(workload: dict[str, Any], scenario: dict[str, Any], replay: Replay) -> None:
    """The seven replays of the section, printed as a Markdown table; ``scenario`` is
    bench.py's, without a cache."""
    count = len(workload["requests"])
    print(
        f"mooncake {count:,} req with prefix hashes on 16 GPUs, {CACHE_BLOCKS:,} blocks of "
        f"{ENGINE_BLOCK_TOKENS} tokens each, cache-aware routing; {BYTES_PER_TOKEN:,} bytes a "
        f"token, base latency {BASE_LATENCY_US} us; SLO TTFT <= "
        f"{SLO['ttft_us'] / 1e3:,.0f} ms, mean ITL <= {SLO['mean_itl_us'] / 1e3:,.0f} ms; "
        f"replay CPU against the aggregated replay, target <= {TIME_TARGET}x"
    )
    print(
        "| fleet | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | goodput (requests) | "
        "transfer p50 | longest reservation wait | replay CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    base = replay("disagg-aggregated", fleet(scenario, 16, 0, 0))
    print(row("aggregated 16", base, base), flush=True)
    worst = 1.0
    for bandwidth in BANDWIDTHS:
        for prefill, decode in SPLITS[1:]:
            tag = f"disagg-{prefill}p{decode}d-{bandwidth // 1_000_000_000}gbs"
            figures = replay(tag, fleet(scenario, prefill, decode, bandwidth))
            label = f"{prefill}P+{decode}D, {bandwidth / 1e9:g} GB/s"
            print(row(label, figures, base), flush=True)
            worst = max(worst, figures["cpu_s"] / base["cpu_s"])
    verdict = "MET" if worst <= TIME_TARGET else "MISSED"
    print(f"largest replay CPU against the aggregated replay: {worst:.2f}x  target: {verdict}")
