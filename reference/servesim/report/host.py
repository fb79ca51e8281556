"""The report's host-tier members (SPEC.md R140; report 10.0, R141).

Each function builds one group of R140's members. Today every one gives the value without a host
pool, which is exactly what R141's step 9.0 -> 10.0 adds to a report of inputs without one: the
host tier's semantics (R129 to R139) fill in the real values here, where a cache has ``host``.
"""

from __future__ import annotations

from typing import Any

from servesim.contract.model import Pool
from servesim.contract.r24 import ratio
from servesim.engine.loop import SimulationResult
from servesim.engine.passes import RankGroup
from servesim.engine.requests import RequestState
from servesim.engine.worker import Worker


def request_host_reused_prompt_tokens(state: RequestState) -> int:
    """R137, R140: the host part of a request's reuse at its first admission (0 without a load
    at that admission, and without a host pool)."""
    del state
    return 0


def request_load_wait_us(state: RequestState) -> int | None:
    """R140: the sum of a request's completed loads' waits; ``None`` when no scheduler it was
    routed to has a host pool (or it was never routed)."""
    del state
    return None


def scheduler_host(scheduler: Worker) -> dict[str, Any] | None:
    """R140: one scheduler's (a rank's, or a one-rank worker's) ``host``; ``None`` when its
    cache has no ``host`` member."""
    del scheduler
    return None


def worker_host(unit: Worker | RankGroup, ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """R140: a worker's ``host``, its ranks' summed (``ranks`` their report entries); ``None``
    when its cache has no ``host`` member."""
    del unit
    if all(rank["host"] is None for rank in ranks):
        return None
    raise NotImplementedError("R140: a worker's host members (section 19's semantics)")


def pool_host(pool: Pool, workers: list[dict[str, Any]]) -> dict[str, Any] | None:
    """R140: a pool's ``host``, its workers' summed (``workers`` their report entries); ``None``
    when its cache has no ``host`` member."""
    if pool.kv_cache is None or pool.kv_cache.host is None:
        return None
    del workers
    raise NotImplementedError("R140: a pool's host members (section 19's semantics)")


def summary_kv_cache_host_members(
    completed: list[RequestState],
    reused_prompt_tokens: int,
    prompt_tokens: int,
    pools: list[dict[str, Any]],
) -> dict[str, Any]:
    """R140: the members a non-null ``summary.kv_cache`` gains: the completed requests' host
    reuse, the reuse ratio per tier and ``host`` (``None`` when no pool's cache has one;
    ``pools`` are the pools' report entries)."""
    host_reused = sum(request_host_reused_prompt_tokens(state) for state in completed)
    if any(pool["host"] is not None for pool in pools):
        raise NotImplementedError("R140: the summary's host members (section 19's semantics)")
    return {
        "host_reused_prompt_tokens": host_reused,
        "host_reuse_ratio": ratio(host_reused, prompt_tokens),
        "gpu_reuse_ratio": ratio(reused_prompt_tokens - host_reused, prompt_tokens),
        "host": None,
    }


def host_transfers(result: SimulationResult) -> list[dict[str, Any]] | None:
    """R140: every host transfer submitted, in submission order; ``None`` when the trace is
    not asked for (R30), ``[]`` with it and no host pool."""
    if result.steps is None:
        return None
    return []
