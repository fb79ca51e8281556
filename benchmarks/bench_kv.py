"""Benchmark of the KV cache (issue 10, SPEC.md section 11): prefix caching on a real trace.

Called from bench.py. The Mooncake conversation trace, imported with its prefix hashes (512
tokens each), is replayed on 16 workers, round robin, with engine blocks of 64 tokens (8 engine
blocks to a trace block, R47): (a) with a cache so large that nothing is ever evicted, (b) with
one small enough that blocks run out, so cached blocks are evicted and running requests are
preempted; and, in the same run, the same replay without a cache. What is compared is the time
a replay takes (the target: prefix caching on costs at most 2x the replay without a cache) and
what the report says of the cache.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

#: The engine's block size, vLLM's usual one; each 512-token Mooncake block is 8 of them.
ENGINE_BLOCK_TOKENS = 64

#: (b)'s cache, blocks per worker: the smallest power of two that holds the trace's longest
#: request alone (126,195 + 332 tokens, 1,977 blocks), so that none is rejected (R10), while
#: the fleet's busiest moments need more (3,071 blocks with no limit): cached blocks are evicted
#: all the time and a few requests are preempted. Tried on the full trace (README, "KV cache and
#: prefix caching"): 4,096 evicts but never preempts; 1,024 rejects 257 requests.
SMALL_CACHE_BLOCKS = 2048

WORKERS = 16

#: ``replay(tag, scenario)``: the figures of one replay of the section's workload (bench.run).
Replay = Callable[[str, dict[str, Any]], dict[str, Any]]


def with_cache(scenario: dict[str, Any], blocks: int) -> dict[str, Any]:
    """``scenario`` (1.0) with a KV cache of ``blocks`` blocks and prefix caching on: 1.1."""
    cache = {"blocks": blocks, "block_tokens": ENGINE_BLOCK_TOKENS, "prefix_caching": True}
    return {**scenario, "schema_version": "1.1", "kv_cache": cache}


def no_eviction_blocks(requests: list[dict[str, Any]], workers: int) -> int:
    """A cache no worker can fill: blocks for every token of the ``ceil(n / workers)`` largest
    requests, the most round robin (R13) can route to one worker. Blocks are taken only for
    tokens a request caches (R46), at most its prompt plus its output, and without a shortage
    nothing is preempted and recomputed, so a worker never takes more blocks than that in the
    whole run and never evicts one (R49)."""
    sizes = sorted(
        (
            math.ceil((r["prompt_tokens"] + r["max_output_tokens"]) / ENGINE_BLOCK_TOKENS)
            for r in requests
        ),
        reverse=True,
    )
    return sum(sizes[: math.ceil(len(sizes) / workers)])


def cache_line(figures: dict[str, Any], blocks: int) -> str:
    """What the report says of the cache, and of the latency the reuse saves."""
    kv = figures["kv_cache"]
    ratio = kv["prefix_reuse_ratio"]
    shown = "n/a" if ratio is None else f"{ratio:.3f}"
    return (
        f"  prefix reuse {shown} ({kv['reused_prompt_tokens']:,} prompt tokens), "
        f"preemptions {kv['preemptions']:,}, evictions {kv['evictions']:,}, "
        f"peak blocks {figures['peak_blocks_in_use']:,} of {blocks:,}, "
        f"rejected {figures['rejected']:,}, {simulated(figures)}"
    )


def simulated(figures: dict[str, Any]) -> str:
    """The simulated latency, to see what the cache changes (seconds of simulated time)."""
    return (
        f"TTFT p50 {figures['ttft_p50_us'] / 1e6:.2f} s, "
        f"makespan {figures['makespan_us'] / 1e6:,.0f} s"
    )


def kv_cache_section(
    workload: dict[str, Any], scenario: dict[str, Any], replay: Replay, line: Callable[..., str]
) -> None:
    """The three replays of the section, printed; ``scenario`` is bench.py's, without a cache."""
    count = len(workload["requests"])
    print(
        f"mooncake {count:,} req with prefix hashes (512 tokens), {WORKERS} workers, round "
        f"robin, engine blocks of {ENGINE_BLOCK_TOKENS} tokens"
    )
    base = replay("no-cache", scenario)
    print(line("no cache", base))
    print(f"  {simulated(base)}", flush=True)
    large_blocks = no_eviction_blocks(workload["requests"], WORKERS)
    runs = {
        "(a) no eviction": (large_blocks, replay("kv-large", with_cache(scenario, large_blocks))),
    }
    print(line(f"(a) {large_blocks:,} blocks, prefix caching", runs["(a) no eviction"][1]))
    print(cache_line(runs["(a) no eviction"][1], large_blocks), flush=True)
    small = replay("kv-small", with_cache(scenario, SMALL_CACHE_BLOCKS))
    runs["(b) pressure"] = (SMALL_CACHE_BLOCKS, small)
    print(line(f"(b) {SMALL_CACHE_BLOCKS:,} blocks, prefix caching", small))
    print(cache_line(small, SMALL_CACHE_BLOCKS), flush=True)
    for name, (_, figures) in runs.items():
        print(
            f"{name} / no cache: wall time {figures['wall_s'] / base['wall_s']:.2f}x, CPU time "
            f"{figures['cpu_s'] / base['cpu_s']:.2f}x (target <= 2x)"
        )
