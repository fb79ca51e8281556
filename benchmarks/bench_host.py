"""Benchmark of multi-turn reuse and the host KV tier (issue 28, SPEC.md section 19).

Called from bench.py (``--only host``). Two traces of conversations, each replayed with a small
GPU cache (engine blocks of ``ENGINE_BLOCK_TOKENS`` tokens, prefix caching on, cache-aware
routing so that a session's turns find their prefix) and bench.py's timing:

- the shared WEKA agentic sessions (``servesim import weka``, every file a session, sub-agents
  sessions of their own, each file starting ``WEKA_STAGGER_S`` after the one before);
- the Mooncake conversation trace imported with ``--infer-sessions`` (R142: sessions inferred
  from the hashes, since the trace has no ``session_id``).

(a) *Generated tokens' blocks* (R125 to R128): each workload without and with
``session_prompts_extend`` (the same sessions and arrivals; only the flag differs), GPU only.
What changes is each later turn's hit: it now reaches into the previous turn's answer. Shown:
the fleet's prefix reuse and the TTFT of later turns (turn 2 on, 1-based), the figure the
lead's Q19 asks for, since the fleet-wide ratio moves little.

(b) *The host tier* (R129 to R140): the workloads with the flag, GPU only and with a host pool
per rank of ``HOST_MULTIPLES`` times the GPU cache, ``BYTES_PER_TOKEN`` bytes a token and
``LANE_BYTES_PER_S`` each way. Shown: reuse per tier (R140's ``gpu_reuse_ratio`` and
``host_reuse_ratio``), TTFT p50, p90 and p99 (all requests and later turns), loads and host
evictions, and the replay's CPU time against the GPU-only replay's (the issue's target: at most
``TIME_TARGET`` times; median of the runs).

Figures are printed, nothing is asserted. Run as a script, this file reads one report and
prints the figures bench.py needs of it (:func:`report_figures`): a report is read in a child
process, so that its size does not raise the benchmark's peak memory (bench.run's note).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

#: The engine's block size (vLLM's usual one): 8 to a Mooncake hash block, 1 to a WEKA one.
ENGINE_BLOCK_TOKENS = 64

#: KV cache bytes per token of a Llama-3.1-8B-like model in 16 bits: 32 layers, 8 KV heads of
#: 128 dimensions, keys and values (32 * 8 * 128 * 2 * 2). A block is then 8 MiB.
BYTES_PER_TOKEN = 131_072

#: Each lane's bandwidth (PCIe 4.0 x16 in practice): a block moves in 336 us, where computing
#: its 64 tokens takes 1,280 us at bench.py's 20 us a prefill token.
LANE_BYTES_PER_S = 25_000_000_000

#: The host pools, in multiples of the GPU cache (per rank).
HOST_MULTIPLES: tuple[int, ...] = (1, 4, 16)

#: Seconds between the starts of two WEKA session files (``servesim import weka --stagger``).
WEKA_STAGGER_S = 60

#: The WEKA files of the short run (CI): four of the smaller ones.
WEKA_SHORT = ("trace_0012.json", "trace_0016.json", "trace_0019.json", "trace_0032.json")

#: The short run's Mooncake lines (``--limit``; sessions are inferred among them).
MOONCAKE_SHORT = 1500

TIME_TARGET = 1.5


class Fleet(NamedTuple):
    """One trace's fleet: workers, the GPU cache per worker and the longest context. (Not a
    dataclass: tests load this file as a module of no package, which dataclasses cannot
    resolve.)"""

    trace: str
    workers: int
    gpu_blocks: int
    max_model_len: int


#: WEKA: prompts of up to 197,889 tokens with their outputs (3,093 blocks), 17 sessions; two
#: workers whose caches hold about two sessions' contexts each.
WEKA = Fleet("weka", 2, 4096, 262_144)
#: Mooncake: bench_kv's pressure cache (2,048 blocks hold the longest request, 1,977 blocks)
#: on bench.py's 16 workers.
MOONCAKE = Fleet("mooncake", 16, 2048, 131_072)

#: ``replay(tag, name, workload, scenario)``: the figures of one replay (bench.run's, and
#: ``"report"``: :func:`report_figures` of its report).
Replay = Callable[[str, str, dict[str, Any], dict[str, Any]], dict[str, Any]]


def host_pool(blocks: int) -> dict[str, int]:
    """R129's ``host`` member of ``blocks`` entries, with the section's model and lanes."""
    return {
        "blocks": blocks,
        "bytes_per_token": BYTES_PER_TOKEN,
        "store_bytes_per_s": LANE_BYTES_PER_S,
        "load_bytes_per_s": LANE_BYTES_PER_S,
    }


def fleet_scenario(
    scenario: dict[str, Any], fleet: Fleet, host_blocks: int | None = None
) -> dict[str, Any]:
    """bench.py's ``scenario`` on ``fleet``: its workers, cache-aware routing (R56), its GPU
    cache with prefix caching (a scenario 1.2); with ``host_blocks``, a host pool per rank of
    that many entries (a scenario 1.8)."""
    cache: dict[str, Any] = {
        "blocks": fleet.gpu_blocks,
        "block_tokens": ENGINE_BLOCK_TOKENS,
        "prefix_caching": True,
    }
    if host_blocks is not None:
        cache["host"] = host_pool(host_blocks)
    return {
        **scenario,
        "schema_version": "1.2" if host_blocks is None else "1.8",
        "fleet": {"workers": fleet.workers},
        "routing": {"policy": "cache_aware"},
        "scheduler": {**scenario["scheduler"], "max_model_len": fleet.max_model_len},
        "kv_cache": cache,
    }


def extending(workload: dict[str, Any], on: bool) -> dict[str, Any]:
    """``workload`` (with sessions) with ``session_prompts_extend: true`` (a workload 1.3,
    R125), or without the member (1.2: R125 to R128 then change nothing)."""
    document = {key: value for key, value in workload.items() if key != "session_prompts_extend"}
    if on:
        document["schema_version"] = "1.3"
        document["session_prompts_extend"] = True
    else:
        document["schema_version"] = "1.2"
    return document


def percentile(samples: Sequence[int], p: int) -> int | None:
    """R27's nearest-rank percentile of integer samples; None when there are none."""
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(p * len(ordered) / 100)) - 1]


def report_figures(report: dict[str, Any]) -> dict[str, Any]:
    """What the section shows of one report: the TTFT percentiles of every request and of the
    later turns (a session's turns after its first, in workload order, R59), and the summary's
    ``kv_cache`` (reuse per tier and the host counters, report 10.0)."""
    turns: dict[str, int] = {}
    every, later = [], []
    for request in report["requests"]:
        ttft = request["ttft_us"]
        session = request["session"]
        index = 0
        if session is not None:
            index = turns.get(session, 0)
            turns[session] = index + 1
        if ttft is None:
            continue
        every.append(ttft)
        if index >= 1:
            later.append(ttft)
    figures: dict[str, Any] = {"later_turns": len(later), "sessions": len(turns)}
    for name, samples in (("all", every), ("later", later)):
        for p in (50, 90, 99):
            figures[f"{name}_ttft_p{p}_us"] = percentile(samples, p)
    figures["kv_cache"] = report["summary"]["kv_cache"]
    loads = [r["load_wait_us"] for r in report["requests"] if r.get("load_wait_us")]
    figures["loading_requests"] = len(loads)
    figures["load_wait_p50_us"] = percentile(loads, 50)
    return figures


def median_figures(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Replays of one configuration: the last one's figures, with the median CPU and wall
    time (the simulation is deterministic: only the times differ between runs)."""
    return {
        **runs[-1],
        "cpu_s": statistics.median(run["cpu_s"] for run in runs),
        "wall_s": statistics.median(run["wall_s"] for run in runs),
    }


def ms(value: float | None) -> str:
    """A latency of the report (microseconds) in milliseconds; n/a when there is none."""
    return "n/a" if value is None else f"{value / 1e3:,.1f} ms"


def ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f} %"


def generated_row(label: str, flag: bool, figures: dict[str, Any]) -> str:
    """(a): one workload without or with the flag."""
    report = figures["report"]
    kv = report["kv_cache"]
    return (
        f"| {label} | {'yes' if flag else 'no'} | {ratio(kv['prefix_reuse_ratio'])} | "
        f"{report['later_turns']:,} | {ms(report['later_ttft_p50_us'])} | "
        f"{ms(report['later_ttft_p90_us'])} | {ms(report['later_ttft_p99_us'])} | "
        f"{ms(report['all_ttft_p50_us'])} | {figures['cpu_s']:.2f} s |"
    )


def host_row(
    label: str, pool: str, figures: dict[str, Any], base: dict[str, Any]
) -> tuple[str, float]:
    """(b): one workload with a host pool (or none); and its CPU time over ``base``'s."""
    report = figures["report"]
    kv = report["kv_cache"]
    host = kv.get("host") or {}
    cost = figures["cpu_s"] / base["cpu_s"]
    gpu_ratio = kv.get("gpu_reuse_ratio", kv["prefix_reuse_ratio"])
    row = (
        f"| {label} | {pool} | {ratio(gpu_ratio)} | {ratio(kv.get('host_reuse_ratio'))} | "
        f"{ratio(kv['prefix_reuse_ratio'])} | {ms(report['all_ttft_p50_us'])} | "
        f"{ms(report['all_ttft_p90_us'])} | {ms(report['all_ttft_p99_us'])} | "
        f"{ms(report['later_ttft_p50_us'])} | {ms(report['later_ttft_p99_us'])} | "
        f"{host.get('loads', 0):,} | {host.get('evictions', 0):,} | "
        f"{host.get('skipped_blocks', 0):,} | {cost:.2f}x |"
    )
    return row, cost


def host_section(
    workloads: Sequence[tuple[Fleet, str, dict[str, Any]]],
    scenario: dict[str, Any],
    replay: Replay,
    repeats: int,
) -> None:
    """The section's replays, printed as two Markdown tables; ``workloads`` are ``(fleet,
    label, workload with sessions)``, ``scenario`` is bench.py's."""
    for fleet, label, workload in workloads:
        requests = workload["requests"]
        sessions = len(workload.get("sessions", []))
        print(
            f"{label}: {len(requests):,} req, {sessions:,} sessions; {fleet.workers} workers, "
            f"cache aware, GPU cache {fleet.gpu_blocks:,} blocks of {ENGINE_BLOCK_TOKENS} "
            "tokens per worker"
        )
    block_mib = ENGINE_BLOCK_TOKENS * BYTES_PER_TOKEN / 2**20
    print(
        f"host pools per rank: {', '.join(f'{m}x' for m in HOST_MULTIPLES)} the GPU cache, "
        f"{BYTES_PER_TOKEN:,} bytes a token ({block_mib:g} MiB a block), lanes "
        f"{LANE_BYTES_PER_S / 1e9:g} GB/s each way; replay CPU: median of {repeats} runs"
    )
    print("\n(a) generated tokens' blocks (R125-R128), GPU only")
    print(
        "| trace | session_prompts_extend | prefix reuse | later turns | later-turn TTFT p50 "
        "| p90 | p99 | all TTFT p50 | replay CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    gpu_only: dict[str, dict[str, Any]] = {}
    for fleet, label, workload in workloads:
        setup = fleet_scenario(scenario, fleet)
        for flag in (False, True):
            name = f"{fleet.trace}-{'extend' if flag else 'plain'}"
            runs = [
                replay(f"{fleet.trace}-gpu", name, extending(workload, flag), setup)
                for _ in range(repeats)
            ]
            figures = median_figures(runs)
            print(generated_row(label, flag, figures), flush=True)
            if flag:
                gpu_only[label] = figures
    print("\n(b) the host tier (R129-R140), with session_prompts_extend; CPU vs GPU only")
    print(
        "| trace | host pool | GPU reuse | host reuse | total reuse | TTFT p50 | p90 | p99 | "
        "later-turn p50 | later-turn p99 | loads | host evictions | skipped blocks | replay CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for fleet, label, workload in workloads:
        base = gpu_only[label]
        print(host_row(label, "none", base, base)[0], flush=True)
        extended = extending(workload, True)
        for multiple in HOST_MULTIPLES:
            blocks = multiple * fleet.gpu_blocks
            setup = fleet_scenario(scenario, fleet, blocks)
            runs = [
                replay(f"{fleet.trace}-host-{multiple}", f"{fleet.trace}-extend", extended, setup)
                for _ in range(repeats)
            ]
            row, cost = host_row(label, f"{blocks:,} ({multiple}x)", median_figures(runs), base)
            print(row, flush=True)
            worst = max(worst, cost)
    verdict = "MET" if worst <= TIME_TARGET else "MISSED"
    print(
        f"largest replay CPU with a host pool against GPU only: {worst:.2f}x "
        f"(target <= {TIME_TARGET}x): {verdict}"
    )


def main(arguments: Sequence[str]) -> int:
    """``bench_host.py REPORT OUTPUT``: :func:`report_figures` of REPORT, as JSON in OUTPUT."""
    report, output = map(Path, arguments)
    figures = report_figures(json.loads(report.read_bytes()))
    output.write_text(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
