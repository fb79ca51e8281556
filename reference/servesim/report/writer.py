"""The report: every field's derivation (SPEC.md section 7, R24 to R31; R52, R57, R62 to R64).

The report is a pure function of the input bytes: no wall clock, no host name, no version of
the program that wrote it, so that two conforming implementations write the same bytes.
"""

from __future__ import annotations

import hashlib
import heapq
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from servesim.contract.canonical import canonical_bytes, encoded_array
from servesim.contract.errors import UnrepresentableSum
from servesim.contract.model import DEFAULT_POOL, KvTransfer, Pool, SchedulerLimits, Slo
from servesim.contract.nearest_rank import ranked_statistics
from servesim.contract.tpot import tpot_statistics
from servesim.engine.admission import REJECT_REASONS
from servesim.engine.fleet_changes import FAIL_REASONS, FleetRecord, RequestFate
from servesim.engine.formation.sglang import RATIO_DENOMINATOR
from servesim.engine.handoff import Handoff
from servesim.engine.kv.counters import KvCacheCounters
from servesim.engine.loop import SimulationResult
from servesim.engine.passes import RankGroup
from servesim.engine.requests import RequestState
from servesim.engine.step import Step
from servesim.engine.step_ends import StepEndItems, slicing_pays
from servesim.engine.worker import Worker
from servesim.report.host import (
    host_transfers,
    pool_host,
    request_host_reused_prompt_tokens,
    request_load_wait_us,
    scheduler_host,
    summary_kv_cache_host_members,
    worker_host,
)


def ratio(numerator: int, denominator: int) -> float | None:
    """R24: the binary64 value nearest to numerator/denominator (ties to even); None for /0.

    Python's int / int is correctly rounded for integers of any size, which is what R24 asks.
    """
    if denominator == 0:
        return None
    return numerator / denominator


def statistics(values: Iterable[int]) -> dict[str, Any]:
    """R27: count, min, max, mean and percentiles of integer samples; null where there are none."""
    return statistics_of_counts(Counter(values))


def statistics_of_counts(counts: Counter[int]) -> dict[str, Any]:
    """R27 for samples given as value -> how often it occurs (ITL has millions of samples but
    few distinct values)."""
    values = sorted(counts)
    mean = ratio(sum(value * counts[value] for value in values), sum(counts.values()))
    return ranked_statistics(counts, values, mean, _as_written)


def _as_written(value: int) -> int:
    return value


def digest(data: bytes) -> str:
    """R25: the lowercase hexadecimal SHA-256 of a file's exact bytes."""
    return hashlib.sha256(data).hexdigest()


def _latencies(state: RequestState) -> tuple[int, int, int]:
    """R26: queue time, TTFT and E2E of a completed request, in microseconds."""
    arrival = state.arrival_us
    first_scheduled = state.first_scheduled_us
    if arrival is None or first_scheduled is None or not state.token_times_us:
        raise ValueError(f"request {state.request.id!r} did not complete")
    return (
        first_scheduled - arrival,
        state.token_times_us.first - arrival,
        state.token_times_us.last - arrival,
    )


#: R26's request entry with its members in RFC 8785 order (sorted keys); see ``_request_entry``.
#: The slot before ``terminal_us`` holds R63's ``slo_met`` member, or nothing without ``slo``.
#: R123's members of a request that no failure touched, in their places: after ``e2e_us``,
#: after ``id``, after ``rank``.
_NO_FATE = (b'"fail_reason":null,', b'"lost_tokens":0,', b'"migrations":[],', 0)
_REQUEST_ENTRY = (
    b'{"arrival_us":%b,"cached_blocks_at_routing":%b,"completion_us":%b,"e2e_us":%b,'
    b'%b"first_scheduled_us":%b,"first_token_us":%b,"handoff":%b,"host_reused_prompt_tokens":%d,'
    b'"id":%b,"load_wait_us":%b,%b"mean_itl_us":%b,'
    b'%b"outcome":%b,'
    b'"output_tokens":%d,"pool":%b,"preemptions":%d,"prompt_tokens":%d,"queue_us":%b,'
    b'"rank":%b,"recomputed_tokens":%d,"reject_reason":%b,"retractions":%d,'
    b'"reused_prompt_tokens":%d,"session":%b,%b"terminal_us":%d,"token_times_us":[%b],'
    b'"ttft_us":%b,"worker":%b}'
)

_SLO_MET = {None: b"", True: b'"slo_met":true,', False: b'"slo_met":false,'}


def _json(value: int | float | str | None) -> bytes:
    """The canonical bytes (R23) of one scalar member of a request entry."""
    if value is None:
        return b"null"
    if type(value) is int:
        return b"%d" % value
    return canonical_bytes(value)


def _completed(state: RequestState) -> bool:
    """R9: whether the request completed (not rejected, R10, cut off, R62, nor failed, R118)."""
    return state.reject_reason is None and not state.cut_off and state.fail_reason is None


def _fate_members(fate: RequestFate | None) -> tuple[bytes, bytes, bytes, int]:
    """R123: a request's ``fail_reason``, ``lost_tokens`` and ``migrations`` members (each
    with its comma) and its ``recomputed_tokens``."""
    if fate is None:
        return _NO_FATE
    migrations = [
        {
            "at_us": each.at_us,
            "worker": each.worker,
            "pool": each.pool,
            "rank": each.rank,
            "output_tokens": each.output_tokens,
            "lost_tokens": each.lost_tokens,
        }
        for each in fate.migrations
    ]
    return (
        b'"fail_reason":%b,' % _json(fate.fail_reason),
        b'"lost_tokens":%d,' % fate.lost_tokens,
        b'"migrations":%b,' % canonical_bytes(migrations),
        fate.recomputed_tokens,
    )


def meets_objectives(state: RequestState, slo: Slo) -> bool:
    """R63: completed, and every bound ``slo`` gives holds, inclusively; the mean ITL bound is
    R26's mean compared exactly, in integers, so a request with one token meets it."""
    if not _completed(state):
        return False
    _, ttft_us, e2e_us = _latencies(state)
    tokens = state.token_times_us
    return (
        (slo.ttft_us is None or ttft_us <= slo.ttft_us)
        and (slo.e2e_us is None or e2e_us <= slo.e2e_us)
        and (
            slo.mean_itl_us is None
            or tokens.last - tokens.first <= slo.mean_itl_us * (len(tokens) - 1)
        )
    )


def _request_entry(
    state: RequestState,
    session: bytes,
    slo: Slo | None,
    times: bytes | None = None,
    pool: bytes = b"null",
    handoff: bytes = b"null",
    fate: RequestFate | None = None,
) -> bytes:
    """R26: one request's line in the report, as canonical bytes; ``session`` is its R64
    member's bytes; ``times`` its token times' JSON items when the caller has them
    (``servesim.engine.step_ends``); ``pool`` its R85 member's bytes (its worker's pool).

    Filled into a byte template, like a trace entry, instead of serialised from a dictionary:
    the request lines hold every token time, most of a report's bytes.
    """
    request = state.request
    tokens = state.token_times_us
    arrival = state.arrival_us
    first_token = tokens.first if tokens else None
    queue_us = ttft_us = e2e_us = mean_itl_us = completion_us = None
    if state.reject_reason is not None:
        outcome = b'"rejected"'
    else:
        if arrival is not None:  # R62: a request cut off before it arrived has no latency
            if state.first_scheduled_us is not None:
                queue_us = state.first_scheduled_us - arrival
            if first_token is not None:
                ttft_us = first_token - arrival
        if state.cut_off:  # R62: the latencies whose times exist, none that needs a completion
            outcome = b'"cut_off"'
        elif state.fail_reason is not None:  # R118: likewise
            outcome = b'"failed"'
        else:
            assert arrival is not None, "R9: a completed request arrived"
            assert first_token is not None, "R20: a completed request produced a token"
            outcome = b'"completed"'
            completion_us = tokens.last
            e2e_us = completion_us - arrival
            mean_itl_us = ratio(completion_us - first_token, len(tokens) - 1)
    assert state.terminal_us is not None, "R9: every request ends before the report is built"
    fail_reason, lost_tokens, migrations, recomputed_tokens = _fate_members(fate)
    return _REQUEST_ENTRY % (
        _json(arrival),
        _json(state.cached_blocks_at_routing),  # R57
        _json(completion_us),
        _json(e2e_us),
        fail_reason,  # R123
        _json(state.first_scheduled_us),
        _json(first_token),
        handoff,  # R107
        request_host_reused_prompt_tokens(state),  # R140
        _json(request.id),
        _json(request_load_wait_us(state)),  # R140
        lost_tokens,  # R123
        _json(mean_itl_us),
        migrations,  # R123
        outcome,
        len(tokens),  # output_tokens
        pool,  # R85
        state.preemptions,
        request.prompt_tokens,
        _json(queue_us),
        _json(state.rank),  # R85
        recomputed_tokens,  # R123
        _json(state.reject_reason),
        state.retractions,  # R95
        state.reused_prompt_tokens,
        session,
        _SLO_MET[None if slo is None else meets_objectives(state, slo)],
        state.terminal_us,
        tokens.json_items() if times is None else times,
        _json(ttft_us),
        _json(state.worker),
    )


def _first_arrival_us(states: list[RequestState]) -> int:
    """R64: the earliest arrival of a request that arrived (one always does: R62's stop time
    comes after the smallest ``arrival_us``, when that request or a closed loop's first unit
    arrives)."""
    return min(state.arrival_us for state in states if state.arrival_us is not None)


def _makespan_us(states: list[RequestState]) -> int:
    """R28, R64: from the first arrival to the last terminal state (cut-off ones included)."""
    terminals = [state.terminal_us for state in states if state.terminal_us is not None]
    if len(terminals) != len(states):
        raise ValueError("every request reaches a terminal state (R9) before the report is built")
    return max(terminals) - _first_arrival_us(states)


def _summary(
    states: list[RequestState],
    workers: list[Worker],
    makespan_us: int,
    slo: Slo | None,
    passes: int,
    transfer: KvTransfer | None = None,
    worker_us: int = 0,
    fleet: FleetRecord | None = None,
) -> dict[str, Any]:
    """R28, R63, R64, R107, R123: fleet-wide counts, throughput and latency statistics;
    ``workers`` are the schedulers (every rank), ``passes`` R85's ``steps``, ``worker_us``
    the pools' sum (R122)."""
    completed = [state for state in states if _completed(state)]
    by_reason = dict.fromkeys((*REJECT_REASONS, "no_routable_worker"), 0)
    failed_by_reason = dict.fromkeys(FAIL_REASONS, 0)
    cut_off = 0
    for state in states:
        if state.reject_reason is not None:
            by_reason[state.reject_reason] += 1
        elif state.cut_off:
            cut_off += 1
        elif state.fail_reason is not None:
            failed_by_reason[state.fail_reason] += 1
    failed = sum(failed_by_reason.values())
    fates = {} if fleet is None else fleet.fates
    counts = None if fleet is None else fleet.counts
    output_tokens = sum(len(state.token_times_us) for state in completed)
    latencies = [_latencies(state) for state in completed]
    gaps = itl_gaps(states, workers) if fleet is None else _itl_gaps_of(completed)
    prompt_tokens = sum(state.request.prompt_tokens for state in completed)
    summary: dict[str, Any] = {
        "requests": len(states),
        "completed": len(completed),
        "rejected": len(states) - len(completed) - cut_off - failed,
        "rejected_by_reason": by_reason,
        "cut_off": cut_off,
        "failed": failed,  # R123
        "failed_by_reason": failed_by_reason,
        "migrations": sum(len(fate.migrations) for fate in fates.values()),
        "lost_tokens": sum(fate.lost_tokens for fate in fates.values()),
        "recomputed_tokens": sum(fate.recomputed_tokens for fate in fates.values()),
        "worker_us": worker_us,  # R122
        "worker_hours": ratio(worker_us, US_PER_HOUR),
        "fleet": {
            "scale_ups": 0 if counts is None else counts.scale_ups,
            "scale_downs": 0 if counts is None else counts.scale_downs,
            "cancelled": 0 if counts is None else counts.cancelled,
            "drained": 0 if counts is None else counts.drained,
            "failures": 0 if counts is None else counts.failures,
            "ignored_failures": 0 if counts is None else counts.ignored_failures,
            "recoveries": 0 if counts is None else counts.recoveries,
        },
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "steps": passes,
        "first_arrival_us": _first_arrival_us(states),
        "makespan_us": makespan_us,
        "request_throughput_per_s": ratio(len(completed) * 1_000_000, makespan_us),
        "output_token_throughput_per_s": ratio(output_tokens * 1_000_000, makespan_us),
        "queue_us": statistics([queue for queue, _, _ in latencies]),
        "ttft_us": statistics([ttft for _, ttft, _ in latencies]),
        "itl_us": statistics_of_counts(gaps),
        # R63, shared with the report 4.0 -> 5.0 migration: (completion - first token) / gaps,
        # which is e2e - ttft over output_tokens - 1
        "tpot_us": tpot_statistics(
            (e2e - ttft, len(state.token_times_us) - 1)
            for state, (_, ttft, e2e) in zip(completed, latencies, strict=True)
            if len(state.token_times_us) > 1
        ),
        "e2e_us": statistics([e2e for _, _, e2e in latencies]),
        "kv_cache": _summary_kv_cache(completed, workers, prompt_tokens),
        "transfers": None if transfer is None else _transfers(states, transfer, fates),
    }
    if slo is not None:  # R63: absent without objectives, not null
        good = [state for state in completed if meets_objectives(state, slo)]
        good_tokens = sum(len(state.token_times_us) for state in good)
        summary["goodput"] = {
            "requests": len(good),
            "output_tokens": good_tokens,
            "request_throughput_per_s": ratio(len(good) * 1_000_000, makespan_us),
            "output_token_throughput_per_s": ratio(good_tokens * 1_000_000, makespan_us),
        }
    return summary


def last_handoff(state: RequestState, fates: Mapping[int, RequestFate]) -> Handoff | None:
    """R107, R121: the request's last handoff: its own, or, when a migration took it back to
    the prefill side and its new prefill has not ended, the one before."""
    if state.handoff is not None or not fates:
        return state.handoff
    fate = fates.get(state.position)
    return None if fate is None else fate.handoff


def _transfers(
    states: list[RequestState], transfer: KvTransfer, fates: Mapping[int, RequestFate]
) -> dict[str, Any]:
    """R107: the transfers that ended (their count, tokens, gigabytes and durations), and how
    long each reserved request waited for its reservation, over each request's last handoff."""
    handoffs = [handoff for state in states if (handoff := last_handoff(state, fates)) is not None]
    ended = [each for each in handoffs if each.transfer_end_us is not None]
    tokens = sum(each.transferred_tokens or 0 for each in ended)
    return {
        "count": len(ended),
        "tokens": tokens,
        "gigabytes": ratio(tokens * transfer.bytes_per_token, 1_000_000_000),
        "transfer_us": statistics([each.transfer_us or 0 for each in ended]),
        "reservation_wait_us": statistics(
            [
                each.reserved_us - each.prefill_end_us
                for each in handoffs
                if each.reserved_us is not None
            ]
        ),
    }


def _handoff_entry(handoff: Handoff | None, pools: tuple[Pool, ...], pool_of: list[int]) -> bytes:
    """R107: a request's ``handoff`` member, as canonical bytes."""
    if handoff is None:
        return b"null"
    decode = handoff.decode
    value = {
        "prefill_end_us": handoff.prefill_end_us,
        "decode_worker": None if decode is None else decode.index,
        "decode_pool": None if decode is None else pools[pool_of[decode.index]].name,
        "decode_rank": None if decode is None else decode.rank,
        "reserved_us": handoff.reserved_us,
        "transfer_start_us": handoff.reserved_us,
        "transfer_end_us": handoff.transfer_end_us,
        "activation_us": handoff.activation_us,
        "transferred_tokens": handoff.transferred_tokens,
        "transfer_us": handoff.transfer_us,
        "decode_reused_tokens": handoff.decode_reused_tokens,
    }
    return canonical_bytes(value)


def itl_gaps(states: list[RequestState], workers: list[Worker]) -> Counter[int]:
    """R27's ITL samples: the gaps between consecutive tokens of every completed request.

    The workers counted the gaps of every token as they produced it (``Worker.itl_gaps``, per
    step rather than per token); a request that did not complete (cut off by the stop time,
    R62) had its own taken back. Equal to ``count_gaps`` over the completed requests, which
    ``tests/test_report.py`` checks.
    """
    gaps: Counter[int] = Counter()
    for worker in workers:
        gaps.update(worker.itl_gaps)
    unfinished: Counter[int] = Counter()
    for state in states:
        if state.token_times_us and not _completed(state):
            state.token_times_us.count_gaps(unfinished)
    gaps.subtract(unfinished)
    assert min(gaps.values(), default=0) >= 0, "a gap taken back that no worker counted"
    return +gaps  # without the gaps that no completed request has


def _itl_gaps_of(completed: list[RequestState]) -> Counter[int]:
    """R27's ITL samples, from the completed requests' own token times: in a fleet that changed,
    a migrated request's tokens come from several workers, whose per-step counts
    (``Worker.itl_gaps``) do not see the gap across its migration."""
    gaps: Counter[int] = Counter()
    for state in completed:
        state.token_times_us.count_gaps(gaps)
    return +gaps


def _summary_kv_cache(
    completed: list[RequestState], workers: list[Worker], prompt_tokens: int
) -> dict[str, Any] | None:
    """R52: the fleet's cache figures; ``None`` without a cache (no worker has counters, R45)."""
    counters = [worker.kv_counters for worker in workers if worker.kv_counters is not None]
    if not counters:
        return None
    reused = sum(state.reused_prompt_tokens for state in completed)
    return {
        "reused_prompt_tokens": reused,
        "prefix_reuse_ratio": ratio(reused, prompt_tokens),
        "preemptions": sum(each.preemptions for each in counters),
        "evictions": sum(each.evictions for each in counters),
        "retractions": sum(each.retractions for each in counters),  # R95
    }


def _worker_kv_cache(counters: KvCacheCounters | None) -> dict[str, int | None] | None:
    """R52, R95: one worker's cache counters; ``None`` without a cache."""
    if counters is None:
        return None
    return {
        "peak_blocks_in_use": counters.peak_blocks_in_use,
        "reused_tokens": counters.reused_tokens,
        "preemptions": counters.preemptions,
        "evictions": counters.evictions,
        "retractions": counters.retractions,
        "peak_reserved_blocks": counters.peak_reserved_blocks,
    }


#: R85, R95: the cache counters a worker's (or pool's) entry sums over its ranks (workers).
_SUMMED_CACHE = ("reused_tokens", "preemptions", "evictions", "retractions")


def _rank_entry(rank: Worker, worker_us: int) -> dict[str, Any]:
    """R29, R52, R85: one scheduler's counters (a rank's, or a one-rank worker's own);
    ``worker_us`` its worker's (R122)."""
    return {
        "routed": rank.routed,
        "completed": rank.completed,
        "steps": rank.steps,
        "busy_us": rank.busy_us,
        "utilization": ratio(rank.busy_us, worker_us),
        "peak_running": rank.peak_running,
        "peak_waiting": rank.peak_waiting,
        "prefill_tokens": rank.prefill_tokens,
        "decode_tokens": rank.decode_tokens,
        "output_tokens": rank.output_tokens,
        "kv_cache": _worker_kv_cache(rank.kv_counters),
        "handed_off": rank.handed_off,  # R107
        "activated": rank.activated,
        "host": scheduler_host(rank),  # R140
    }


_SUMMED = (
    "routed",
    "completed",
    "prefill_tokens",
    "decode_tokens",
    "output_tokens",
    "handed_off",
    "activated",
)


def _worker_entry(
    unit: Worker | RankGroup, pool: str, pool_worker: int, life: dict[str, Any]
) -> dict[str, Any]:
    """R29, R85, R123: one worker's counters, its pool, its life, and its ranks'."""
    worker_us = life["worker_us"]
    if isinstance(unit, Worker):  # one rank: the worker's members are its rank's
        rank = _rank_entry(unit, worker_us)
        entry = dict(rank)
        ranks = [{"rank": 0, **rank}]
    else:
        ranks = [{"rank": r.rank, **_rank_entry(r, worker_us)} for r in unit.ranks]
        entry = {name: sum(each[name] for each in ranks) for name in _SUMMED}
        entry["steps"] = unit.passes
        entry["busy_us"] = unit.busy_us
        entry["utilization"] = ratio(unit.busy_us, worker_us)
        entry["peak_running"] = unit.peak_running
        entry["peak_waiting"] = unit.peak_waiting
        caches = [each["kv_cache"] for each in ranks]
        entry["kv_cache"] = (
            None
            if caches[0] is None
            else {
                "peak_blocks_in_use": unit.peak_blocks_in_use,
                "peak_reserved_blocks": (
                    None if caches[0]["peak_reserved_blocks"] is None else unit.peak_reserved_blocks
                ),
                **{name: sum(cache[name] for cache in caches) for name in _SUMMED_CACHE},
            }
        )
        entry["host"] = worker_host(unit, ranks)  # R140
    entry["worker"] = unit.index
    entry["style"] = unit.style if isinstance(unit, Worker) else unit.ranks[0].style  # R95
    entry["pool"] = pool
    entry["pool_worker"] = pool_worker
    entry["ranks"] = ranks
    entry.update(life)
    return entry


def _pool_entry(
    pool: Pool,
    workers: list[dict[str, Any]],
    completed: list[RequestState],
    makespan_us: int,
    peak_workers: int,
) -> dict[str, Any]:
    """R85, R122, R123: one pool's sums over its workers and its workers' completed
    requests."""
    busy_us = sum(worker["busy_us"] for worker in workers)
    worker_us = sum(worker["worker_us"] for worker in workers)
    done = sum(worker["completed"] for worker in workers)
    output_tokens = sum(len(state.token_times_us) for state in completed)
    kv_cache = None
    if pool.kv_cache is not None:
        caches = [worker["kv_cache"] for worker in workers]
        reserved = [cache["peak_reserved_blocks"] for cache in caches]
        kv_cache = {
            "peak_blocks_in_use": max(cache["peak_blocks_in_use"] for cache in caches),
            "peak_reserved_blocks": None if None in reserved else max(reserved),
            **{name: sum(cache[name] for cache in caches) for name in _SUMMED_CACHE},
        }
    return {
        "name": pool.name,
        "style": pool.scheduler.style,  # R95
        "role": pool.role,  # R107
        "handed_off": sum(worker["handed_off"] for worker in workers),
        "activated": sum(worker["activated"] for worker in workers),
        "workers": pool.workers,
        "dp_size": pool.dp_size,
        "routed": sum(worker["routed"] for worker in workers),
        "completed": done,
        "prompt_tokens": sum(state.request.prompt_tokens for state in completed),
        "output_tokens": output_tokens,
        "steps": sum(worker["steps"] for worker in workers),
        "busy_us": busy_us,
        "utilization": ratio(busy_us, worker_us),
        "request_throughput_per_s": ratio(done * 1_000_000, makespan_us),
        "output_token_throughput_per_s": ratio(output_tokens * 1_000_000, makespan_us),
        "kv_cache": kv_cache,
        "host": pool_host(pool, workers),  # R140
        "workers_created": len(workers),  # R123
        "peak_workers": peak_workers,
        "worker_us": worker_us,
        "worker_hours": ratio(worker_us, US_PER_HOUR),
        "failures": sum(worker["failures"] for worker in workers),
        "migrations": sum(worker["migrated_out"] for worker in workers),
        "failed": sum(worker["failed_requests"] for worker in workers),
    }


#: R30's trace entry with its members in RFC 8785 order; the strings inside are canonical already.
_TRACE_ENTRY = (
    b'{"batched_tokens":%d,"cut_us":%b,"decode_requests":%b,"duration_us":%d,"end_us":%d,"kind":%b,'
    b'"kv_blocks_in_use":%b,"new_token_ratio":%b,"preempted":%b,"prefill":%b,'
    b'"prefill_tokens":%d,"rank":%d,"retracted":%b,'
    b'"shape":{"context_tokens":%d,"decode_requests":%d,"prefill_tokens":%d},'
    b'"start_us":%d,"worker":%d}'
)


#: R95: a step's kind from its shape, by (decode requests > 0, prefill tokens > 0).
_STEP_KIND = {
    (True, False): b'"decode"',
    (False, True): b'"prefill"',
    (True, True): b'"mixed"',
}


def _trace_entries(step: Step, latest_us: int) -> Iterator[tuple[int, int, int, bytes]]:
    """R30, R85: the trace entries of a step, one per step of a run of identical steps, as
    ``(start_us, worker, rank, canonical bytes)``; a rank's step ends at its pass end, with
    its own duration. R123: ``cut_us`` is the failure that cut it, or, for a step ending after
    the latest terminal time ``latest_us``, that time (a stop time's cut, R124), else null.

    A long replay has millions of steps, so an entry is filled into a byte template instead of
    going through a dictionary: only its integers change within a run, and its two lists are
    serialised by ``canonical_bytes`` once per step.
    """
    prefill_tokens = step.prefill_tokens
    decode_requests = canonical_bytes([state.request.id for state in step.decode])
    prefill = canonical_bytes(
        [{"id": state.request.id, "tokens": tokens} for state, tokens in step.prefill]
    )
    kv_blocks_in_use = _json(step.kv_blocks_in_use)
    preempted = canonical_bytes(step.preempted)
    retracted = canonical_bytes(step.retracted)  # R95
    ratio_used = step.new_token_ratio
    new_token_ratio = b"null" if ratio_used is None else _json(ratio(ratio_used, RATIO_DENOMINATOR))
    decoding = len(step.decode)
    kind = _STEP_KIND[bool(decoding), bool(prefill_tokens)]
    batched = decoding + prefill_tokens
    context = step.context_tokens
    bounds = step.step_bounds()
    if step.pass_end_us is not None:  # R83: one step, ending with its pass
        bounds = iter([(step.start_us, step.pass_end_us)])
    rank = step.rank
    for start, end in bounds:
        if step.cut_us is not None:
            cut = b"%d" % step.cut_us
        else:
            cut = b"%d" % latest_us if end > latest_us else b"null"
        entry = _TRACE_ENTRY % (
            batched,
            cut,
            decode_requests,
            step.duration_us if step.barrier else end - start,
            end,
            kind,
            kv_blocks_in_use,
            new_token_ratio,
            preempted,
            prefill,
            prefill_tokens,
            rank,
            retracted,
            context,
            decoding,
            prefill_tokens,
            start,
            step.worker,
        )
        yield start, step.worker, rank, entry
        context += decoding  # R22: each decode step adds one token to every decoding context


def _trace(steps: list[Step], latest_us: int) -> Iterator[bytes]:
    """R30, R85: every step of every rank, in order of (start_us, worker, rank), as canonical
    bytes.

    Each rank's steps are formed in time order (a run of passes stands for steps of every
    rank of its worker at once, so a worker's own are not), so merging the ranks' streams
    orders the whole trace without holding it in memory at once.
    """
    by_rank: dict[tuple[int, int], list[Step]] = {}
    for step in steps:
        by_rank.setdefault((step.worker, step.rank), []).append(step)
    streams = [
        (entry for step in rank_steps for entry in _trace_entries(step, latest_us))
        for rank_steps in by_rank.values()
    ]
    return (entry for _, _, _, entry in heapq.merge(*streams))


def _step_end_items(workers: list[Worker]) -> dict[int, StepEndItems]:
    """The workers whose requests' token times are sliced from their step ends: those that
    kept them and gave enough tokens a step (``servesim.engine.step_ends.slicing_pays``)."""
    return {
        worker.scheduler: StepEndItems(worker.step_ends)
        for worker in workers
        if worker.step_ends is not None and slicing_pays(worker.output_tokens, worker.steps)
    }


def _sliced_times(
    state: RequestState, step_ends: dict[int, StepEndItems], first_scheduler: list[int]
) -> bytes | None:
    """The request's token times' JSON items sliced from its rank's step ends, or ``None``
    where they are not (``_request_entry`` then writes them itself)."""
    if state.worker is None or state.rank is None:
        return None
    decode = None if state.handoff is None else state.handoff.decode
    if decode is not None:  # R105: its tokens come from its decode scheduler's steps
        sliced = step_ends.get(decode.scheduler)
        return None if sliced is None else sliced.items(state.token_times_us)
    sliced = step_ends.get(first_scheduler[state.worker] + state.rank)
    return None if sliced is None else sliced.items(state.token_times_us)


def report_chunks(
    result: SimulationResult,
    inputs: dict[str, bytes],
    calibration: Mapping[str, Any] | None = None,
    pool_profiles: Mapping[str, tuple[bytes, Mapping[str, Any] | None]] | None = None,
) -> Iterator[bytes]:
    """R31: the report's canonical bytes (R23), in pieces, so that a long replay's requests and
    trace are serialised one batch at a time. ``inputs`` maps scenario, workload and (for the
    single profile) timing_profile to the exact bytes read; ``calibration`` is that profile's
    (R25). ``pool_profiles``, when profiles are given per pool (R84), maps each pool's name to
    its profile's bytes and calibration.

    The members are written in RFC 8785 order (sorted keys), which the assertion checks.
    """
    makespan_us = _makespan_us(result.requests)
    members = [
        "document",
        "host_transfers",
        "inputs",
        "pools",
        "requests",
        "schema_version",
        "summary",
        "trace",
        "workers",
    ]
    assert members == sorted(members)
    units: list[Worker | RankGroup] = list(result.workers) if result.units is None else result.units
    pools = result.pools or (Pool(DEFAULT_POOL, len(units), _NO_LIMITS),)
    digests: dict[str, Any] = {name: {"sha256": digest(data)} for name, data in inputs.items()}
    if pool_profiles is None:
        digests["timing_profile"]["calibration"] = calibration
        profiles = [(pool.name, digests["timing_profile"]) for pool in pools]
    else:
        digests["timing_profile"] = None
        profiles = [
            (
                pool.name,
                {
                    "sha256": digest(pool_profiles[pool.name][0]),
                    "calibration": pool_profiles[pool.name][1],
                },
            )
            for pool in pools
        ]
    digests["timing_profiles"] = [{"pool": name, **profile} for name, profile in profiles]
    # R78, R111: each worker's pool and index within it; each worker's first scheduler
    pool_of: list[int] = []
    pool_worker: list[int] = []
    fleet = result.fleet
    if fleet is None:
        for index, pool in enumerate(pools):
            pool_of.extend([index] * pool.workers)
            pool_worker.extend(range(pool.workers))
    else:
        pool_of = [life.pool for life in fleet.lives]
        pool_worker = [life.pool_worker for life in fleet.lives]
    first_arrival_us = _first_arrival_us(result.requests)
    lives = _lives(fleet, len(units), first_arrival_us, first_arrival_us + makespan_us)
    first_scheduler: list[int] = []
    schedulers = 0
    for unit in units:
        first_scheduler.append(schedulers)
        schedulers += 1 if isinstance(unit, Worker) else len(unit.ranks)
    workers = [
        _worker_entry(unit, pools[pool_of[w]].name, pool_worker[w], lives[w])
        for w, unit in enumerate(units)
    ]
    completed_by_pool: list[list[RequestState]] = [[] for _ in pools]
    for state in result.requests:  # R107: where it completed, its decode side's when it has one
        if state.worker is not None and _completed(state):
            handoff = state.handoff
            worker = (
                state.worker if handoff is None or handoff.decode is None else handoff.decode.index
            )
            completed_by_pool[pool_of[worker]].append(state)
    pool_entries = [
        _pool_entry(
            pool,
            [workers[w] for w in range(len(units)) if pool_of[w] == index],
            completed_by_pool[index],
            makespan_us,
            pool.workers if fleet is None else fleet.peak_workers[index],
        )
        for index, pool in enumerate(pools)
    ]
    worker_us = sum(entry["worker_us"] for entry in pool_entries)
    for pointer, total in [("/summary/worker_us", worker_us)] + [
        (f"/pools/{index}/worker_us", entry["worker_us"])
        for index, entry in enumerate(pool_entries)
    ]:
        if total > MAX_REPORT_INTEGER:  # R122: a sum obeys R6's bound
            raise UnrepresentableSum(pointer=pointer, value=total)
    summary = _summary(
        result.requests,
        result.workers,
        makespan_us,
        result.slo,
        sum(worker["steps"] for worker in workers),
        result.transfer,
        worker_us,
        fleet,
    )
    if summary["kv_cache"] is not None:  # R140
        summary["kv_cache"].update(
            summary_kv_cache_host_members(
                [state for state in result.requests if _completed(state)],
                summary["kv_cache"]["reused_prompt_tokens"],
                summary["prompt_tokens"],
                pool_entries,
            )
        )
    fates = {} if fleet is None else fleet.fates
    # everything above ran now (a sum past R6's bound is found before any byte is written);
    # the bytes below are made as they are read
    return _report_bytes(
        result,
        digests,
        pool_entries,
        summary,
        workers,
        pools,
        pool_of,
        first_scheduler,
        fates,
        first_arrival_us + makespan_us,
    )


def _report_bytes(
    result: SimulationResult,
    digests: dict[str, Any],
    pool_entries: list[dict[str, Any]],
    summary: dict[str, Any],
    workers: list[dict[str, Any]],
    pools: tuple[Pool, ...],
    pool_of: list[int],
    first_scheduler: list[int],
    fates: Mapping[int, RequestFate],
    latest_us: int,
) -> Iterator[bytes]:
    """R31: the report's bytes, in pieces (``report_chunks``)."""
    sessions = [canonical_bytes(session) for session in result.sessions]
    step_ends = _step_end_items(result.workers)
    pool_names = [canonical_bytes(pool.name) for pool in pools]
    yield (
        b'{"document":"report","host_transfers":'
        + canonical_bytes(host_transfers(result))  # R140
        + b',"inputs":'
        + canonical_bytes(digests)
        + b',"pools":'
        + canonical_bytes(pool_entries)
        + b',"requests":'
    )
    yield from encoded_array(
        _request_entry(
            state,
            b"null" if state.request.session is None else sessions[state.request.session],
            result.slo,
            _sliced_times(state, step_ends, first_scheduler),
            b"null" if state.worker is None else pool_names[pool_of[state.worker]],
            _handoff_entry(last_handoff(state, fates), pools, pool_of),
            fates.get(state.position),
        )
        for state in result.requests
    )
    yield b',"schema_version":"10.0","summary":' + canonical_bytes(summary) + b',"trace":'
    if result.steps is None:
        yield b"null"
    else:
        yield from encoded_array(_trace(result.steps, latest_us))
    yield b',"workers":' + canonical_bytes(workers) + b"}\n"


#: R122: microseconds in an hour, ``worker_hours``' denominator.
US_PER_HOUR = 3_600_000_000

#: R6: the largest integer a report holds.
MAX_REPORT_INTEGER = (1 << 53) - 1


def _lives(
    fleet: FleetRecord | None, workers: int, start_us: int, end_us: int
) -> list[dict[str, Any]]:
    """R122, R123: each worker's lifecycle, creation and time in each state within the
    accounting window ``[start_us, end_us]``, and what its failures did."""
    if fleet is None:  # R124: every worker active from 0 for the whole window
        window = end_us - start_us
        static = {
            "lifecycle": [{"state": "active", "at_us": 0}],
            "created_us": 0,
            "worker_us": window,
            "starting_us": 0,
            "active_us": window,
            "draining_us": 0,
            "failed_us": 0,
            "failures": 0,
            "migrated_out": 0,
            "failed_requests": 0,
            "lost_tokens": 0,
        }
        return [static] * workers
    entries = []
    for life in fleet.lives:
        spent = dict.fromkeys(("starting", "active", "draining", "failed", "removed"), 0)
        changes = life.lifecycle
        for position, (state, at_us) in enumerate(changes):
            until = changes[position + 1][1] if position + 1 < len(changes) else end_us
            spent[state] += max(0, min(until, end_us) - max(at_us, start_us))
        entries.append(
            {
                "lifecycle": [{"state": state, "at_us": at_us} for state, at_us in changes],
                "created_us": life.created_us,
                "worker_us": spent["starting"] + spent["active"] + spent["draining"],
                "starting_us": spent["starting"],
                "active_us": spent["active"],
                "draining_us": spent["draining"],
                "failed_us": spent["failed"],
                "failures": life.failures,
                "migrated_out": life.migrated_out,
                "failed_requests": life.failed_requests,
                "lost_tokens": life.lost_tokens,
            }
        )
    return entries


#: A placeholder for the limits of the one pool of a result made without pools; the report
#: reads only a pool's name, size, dp_size and cache.
_NO_LIMITS = SchedulerLimits(1, 1, 1, "whole")
