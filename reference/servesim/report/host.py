"""The report's host-tier members (SPEC.md R140; report 10.0, R141).

Each function builds one group of R140's members. Without a host pool each gives exactly what
R141's step 9.0 -> 10.0 adds to a report of inputs without one; with one, the counts of the
scheduler's ``HostPool`` (``servesim.engine.kv.host_tier``), summed over ranks, workers and
pools, each level's gigabytes one R24 quotient of its summed blocks' bytes (never a sum of
rounded values).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servesim.contract.model import Pool
from servesim.contract.r24 import ratio
from servesim.engine.kv.host_tier import HostCounters
from servesim.engine.loop import SimulationResult
from servesim.engine.passes import RankGroup
from servesim.engine.requests import RequestState
from servesim.engine.worker import Worker

#: R140: a ``host`` member's counts, in the order they are summed (gigabytes come from blocks).
_COUNTS = (
    "stores",
    "stored_blocks",
    "loads",
    "loaded_blocks",
    "reused_tokens",
    "evictions",
    "skipped_blocks",
)

#: R140: bytes per gigabyte (10^9), the gigabytes' denominator.
_GIGABYTE = 1_000_000_000


def request_host_reused_prompt_tokens(state: RequestState) -> int:
    """R137, R140: the host part of a request's reuse at its first admission (0 without a load
    at that admission, and without a host pool)."""
    return state.host_reused_prompt_tokens


def request_load_wait_us(state: RequestState) -> int | None:
    """R140: the sum of a request's completed loads' waits; ``None`` when no scheduler it was
    routed to has a host pool (or it was never routed)."""
    return state.load_wait_us


def _host_member(counts: dict[str, int], stored_bytes: int, loaded_bytes: int) -> dict[str, Any]:
    """R140: a ``host`` member from its counts and its blocks' bytes (R24 over 10^9)."""
    return {
        **counts,
        "stored_gigabytes": ratio(stored_bytes, _GIGABYTE),
        "loaded_gigabytes": ratio(loaded_bytes, _GIGABYTE),
    }


def _counts(counters: HostCounters) -> dict[str, int]:
    return {name: getattr(counters, name) for name in _COUNTS}


def scheduler_host(scheduler: Worker) -> dict[str, Any] | None:
    """R140: one scheduler's (a rank's, or a one-rank worker's) ``host``; ``None`` when its
    cache has no ``host`` member."""
    host = scheduler.memory.host
    if host is None:
        return None
    counts = _counts(host.counters)
    return _host_member(
        counts,
        counts["stored_blocks"] * host.block_bytes,
        counts["loaded_blocks"] * host.block_bytes,
    )


def _summed(members: list[dict[str, Any]], block_bytes: int) -> dict[str, Any]:
    """R140: the sum of ``host`` members of one cache (``block_bytes`` each block)."""
    counts = {name: sum(member[name] for member in members) for name in _COUNTS}
    return _host_member(
        counts, counts["stored_blocks"] * block_bytes, counts["loaded_blocks"] * block_bytes
    )


def worker_host(unit: Worker | RankGroup, ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """R140: a worker's ``host``, its ranks' summed (``ranks`` their report entries); ``None``
    when its cache has no ``host`` member."""
    if all(rank["host"] is None for rank in ranks):
        return None
    scheduler = unit if isinstance(unit, Worker) else unit.ranks[0]
    host = scheduler.memory.host
    assert host is not None, "R129: every rank of a worker has its pool's cache"
    return _summed([rank["host"] for rank in ranks], host.block_bytes)


def _block_bytes(pool: Pool) -> int:
    """R129: ``B * bytes_per_token`` of the pool's cache's host tier."""
    assert pool.kv_cache is not None
    assert pool.kv_cache.host is not None
    return pool.kv_cache.block_tokens * pool.kv_cache.host.bytes_per_token


def pool_host(pool: Pool, workers: list[dict[str, Any]]) -> dict[str, Any] | None:
    """R140: a pool's ``host``, its workers' summed (``workers`` their report entries); ``None``
    when its cache has no ``host`` member."""
    if pool.kv_cache is None or pool.kv_cache.host is None:
        return None
    return _summed([worker["host"] for worker in workers], _block_bytes(pool))


def summary_kv_cache_host_members(
    completed: list[RequestState],
    reused_prompt_tokens: int,
    prompt_tokens: int,
    pools: list[dict[str, Any]],
    pool_models: Sequence[Pool] = (),
) -> dict[str, Any]:
    """R140: the members a non-null ``summary.kv_cache`` gains: the completed requests' host
    reuse, the reuse ratio per tier and ``host`` (``None`` when no pool's cache has one;
    ``pools`` are the pools' report entries, ``pool_models`` the scenario's pools in the same
    order, whose caches give each pool's ``block_bytes``)."""
    host_reused = sum(request_host_reused_prompt_tokens(state) for state in completed)
    host: dict[str, Any] | None = None
    members = [(entry["host"], model) for entry, model in zip(pools, pool_models, strict=False)]
    members = [(member, model) for member, model in members if member is not None]
    if members:
        counts = {name: sum(member[name] for member, _ in members) for name in _COUNTS}
        host = _host_member(
            counts,
            sum(member["stored_blocks"] * _block_bytes(model) for member, model in members),
            sum(member["loaded_blocks"] * _block_bytes(model) for member, model in members),
        )
    else:
        assert all(pool["host"] is None for pool in pools), "R140: pass the scenario's pools"
    return {
        "host_reused_prompt_tokens": host_reused,
        "host_reuse_ratio": ratio(host_reused, prompt_tokens),
        "gpu_reuse_ratio": ratio(reused_prompt_tokens - host_reused, prompt_tokens),
        "host": host,
    }


def host_transfers(result: SimulationResult) -> list[dict[str, Any]] | None:
    """R140: every host transfer submitted, ordered by submission time, worker and rank, one
    scheduler's transfers of one instant in submission order (R136; a stable sort of the
    submission order, since the order in which different workers' passes end at one instant is
    not otherwise observable); ``None`` when the trace is not asked for (R30), ``[]`` with it and
    no host pool. ``end_us`` is the end R130 computed, also for a transfer a stop time cut
    (R139)."""
    if result.steps is None:
        return None
    transfers = sorted(
        result.host_transfers or (),
        key=lambda transfer: (transfer.submitted_us, transfer.pool.worker, transfer.pool.rank),
    )
    return [
        {
            "kind": transfer.kind,
            "worker": transfer.pool.worker,
            "rank": transfer.pool.rank,
            "request": transfer.state.request.id,
            "blocks": transfer.blocks,
            "submitted_us": transfer.submitted_us,
            "start_us": transfer.start_us,
            "end_us": transfer.end_us,
        }
        for transfer in transfers
    ]
