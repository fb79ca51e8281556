"""The report 6.0 members of pools and ranks (SPEC.md R85), from what Dynamo recorded.

The report is first written as the one-pool report of one-rank workers and migrated to 6.0
by the reference's own R86 step (exact for one pool named ``"default"`` of one-rank workers);
this module then states what differs from that: the pools' names and counts (a fleet of alike
pools is one Dynamo fleet, ``mapping.fleet_shape``), and on workers of several ranks each
request's rank and each worker's per-rank figures, read off the passes of ranks.py.
"""

from __future__ import annotations

from typing import Any

from servesim.report.writer import ratio
from servesim_dynamo.mapping import Fleet
from servesim_dynamo.ranks import Pass
from servesim_dynamo.report import peak_running, peak_waiting
from servesim_dynamo.timeline import Timeline


def pool_of_workers(fleet: Fleet) -> list[tuple[str, int]]:
    """Each worker's pool name and index within the pool, in global order (R78)."""
    owners: list[tuple[str, int]] = []
    for name, count in fleet.pools:
        owners.extend((name, index) for index in range(count))
    return owners


def with_pools(
    report: dict[str, Any],
    fleet: Fleet,
    by_worker: list[list[Timeline]],
    passes: list[list[Pass]] | None,
) -> dict[str, Any]:
    """The migrated 6.0 ``report`` with the fleet's pools and, given ``passes``, its ranks."""
    owners = pool_of_workers(fleet)
    makespan = report["summary"]["makespan_us"]
    rank_of = {t.id: t.rank for worker in by_worker for t in worker}
    prompts = {entry["id"]: entry["prompt_tokens"] for entry in report["requests"]}
    for entry in report["requests"]:
        if entry["worker"] is not None:
            entry["pool"] = owners[entry["worker"]][0]
            entry["rank"] = rank_of[entry["id"]]
    for worker in report["workers"]:
        index = worker["worker"]
        worker["pool"], worker["pool_worker"] = owners[index]
        if passes is not None:
            worker["ranks"] = [
                _rank_entry(rank, by_worker[index], passes[index], prompts, makespan)
                for rank in range(fleet.dp_size)
            ]
    profile = report["inputs"]["timing_profiles"][0]
    report["inputs"]["timing_profiles"] = [
        {**profile, "pool": name} for name, _count in fleet.pools
    ]
    report["pools"] = _pool_entries(report, fleet, owners)
    return report


def _rank_entry(
    rank: int,
    timelines: list[Timeline],
    passes: list[Pass],
    prompts: dict[str, int],
    makespan_us: int,
) -> dict[str, Any]:
    """R85's entry of one rank: R29's members over its own requests and its own steps."""
    mine = [t for t in timelines if t.rank == rank]
    own = [
        (p.start_us, p.end_us, step.duration_us)
        for p in passes
        for step in p.steps
        if step.rank == rank
    ]
    busy = sum(duration for _start, _end, duration in own)
    completed = [t for t in mine if t.status == "completed"]
    outputs = sum(len(t.token_times_us) for t in completed)
    return {
        "rank": rank,
        "routed": len(mine),
        "completed": len(completed),
        "steps": len(own),
        "busy_us": busy,
        "utilization": ratio(busy, makespan_us),
        "peak_running": peak_running(mine, [(start, end) for start, end, _d in own]),
        "peak_waiting": peak_waiting(mine),
        "prefill_tokens": sum(prompts[t.id] for t in completed),
        "decode_tokens": outputs - sum(1 for t in completed if t.token_times_us),
        "output_tokens": outputs,
        "kv_cache": None,  # the adapter refuses caches (kv.py)
    }


def _pool_entries(
    report: dict[str, Any], fleet: Fleet, owners: list[tuple[str, int]]
) -> list[dict[str, Any]]:
    """R85's ``pools``: sums over each pool's workers and its workers' completed requests."""
    makespan = report["summary"]["makespan_us"]
    entries = []
    for name, count in fleet.pools:
        workers = [w for w in report["workers"] if owners[w["worker"]][0] == name]
        done = [
            r
            for r in report["requests"]
            if r["outcome"] == "completed" and owners[r["worker"]][0] == name
        ]
        completed = sum(w["completed"] for w in workers)
        output_tokens = sum(r["output_tokens"] for r in done)
        busy = sum(w["busy_us"] for w in workers)
        entries.append(
            {
                "name": name,
                "workers": count,
                "dp_size": fleet.dp_size,
                "routed": sum(w["routed"] for w in workers),
                "completed": completed,
                "prompt_tokens": sum(r["prompt_tokens"] for r in done),
                "output_tokens": output_tokens,
                "steps": sum(w["steps"] for w in workers),
                "busy_us": busy,
                "utilization": ratio(busy, count * makespan),
                "request_throughput_per_s": ratio(completed * 1_000_000, makespan),
                "output_token_throughput_per_s": ratio(output_tokens * 1_000_000, makespan),
                "kv_cache": None,
            }
        )
    return entries


def with_style(report: dict[str, Any], style: str) -> dict[str, Any]:
    """The migrated 7.0 ``report`` with every worker's and every pool's style (R95).

    R96's 6.0 -> 7.0 step writes the vllm style's values; without a cache (the adapter
    refuses caches, kv.py) the other styles differ from them only by name: no request is
    retracted (R90: nothing memory-bound binds), nothing is reserved in a cache that does
    not exist, and the trace is null (Dynamo records no pass membership).
    """
    for entry in report["workers"] + report["pools"]:
        entry["style"] = style
    return report
