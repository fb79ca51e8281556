"""The report: every field's derivation (SPEC.md section 7, R24 to R31).

The report is a pure function of the input bytes: no wall clock, no host name, no version of
the program that wrote it, so that two conforming implementations write the same bytes.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import itertools
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from servesim.admission import REJECT_REASONS
from servesim.canonical import canonical_bytes, encoded_array
from servesim.kv_cache import KvCacheCounters
from servesim.simulation import SimulationResult
from servesim.worker import RequestState, Step, Worker

#: R27: the percentiles every latency statistic reports.
PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)


def ratio(numerator: int, denominator: int) -> float | None:
    """R24: the binary64 value nearest to numerator/denominator (ties to even); None for /0.

    Python's int / int is correctly rounded for integers of any size, which is what R24 asks.
    """
    if denominator == 0:
        return None
    return numerator / denominator


def nearest_rank(sorted_values: Sequence[int], percent: int) -> int:
    """R27: the nearest-rank percentile, ``sorted_values[ceil(percent * n / 100) - 1]``."""
    return sorted_values[_rank(len(sorted_values), percent) - 1]


def _rank(count: int, percent: int) -> int:
    """R27: the 1-based rank of the ``percent``-th percentile among ``count`` samples."""
    return max(1, -(-percent * count // 100))


def statistics(values: Iterable[int]) -> dict[str, Any]:
    """R27: count, min, max, mean and percentiles of integer samples; null where there are none."""
    return statistics_of_counts(Counter(values))


def statistics_of_counts(counts: Counter[int]) -> dict[str, Any]:
    """R27 for samples given as value -> how often it occurs (ITL has millions of samples but
    few distinct values)."""
    total = sum(counts.values())
    result: dict[str, Any] = {"count": total}
    if not total:
        result.update(min=None, max=None, mean=None)
        result.update({f"p{percent}": None for percent in PERCENTILES})
        return result
    values = sorted(counts)
    mean = ratio(sum(value * counts[value] for value in values), total)
    result.update(min=values[0], max=values[-1], mean=mean)
    cumulative = list(itertools.accumulate(counts[value] for value in values))
    for percent in PERCENTILES:
        position = bisect.bisect_left(cumulative, _rank(total, percent))
        result[f"p{percent}"] = values[position]
    return result


def digest(data: bytes) -> str:
    """R25: the lowercase hexadecimal SHA-256 of a file's exact bytes."""
    return hashlib.sha256(data).hexdigest()


def _latencies(state: RequestState) -> tuple[int, int, int]:
    """R26: queue time, TTFT and E2E of a completed request, in microseconds."""
    arrival = state.request.arrival_us
    first_scheduled = state.first_scheduled_us
    if first_scheduled is None or not state.token_times_us:
        raise ValueError(f"request {state.request.id!r} did not complete")
    return (
        first_scheduled - arrival,
        state.token_times_us.first - arrival,
        state.token_times_us.last - arrival,
    )


#: R26's request entry with its members in RFC 8785 order (sorted keys); see ``_request_entry``.
_REQUEST_ENTRY = (
    b'{"arrival_us":%d,"cached_blocks_at_routing":%b,"completion_us":%b,"e2e_us":%b,"first_scheduled_us":%b,'
    b'"first_token_us":%b,"id":%b,"mean_itl_us":%b,"outcome":%b,"output_tokens":%d,'
    b'"preemptions":%d,"prompt_tokens":%d,"queue_us":%b,"reject_reason":%b,'
    b'"reused_prompt_tokens":%d,"terminal_us":%d,"token_times_us":[%b],"ttft_us":%b,"worker":%b}'
)


def _json(value: int | float | str | None) -> bytes:
    """The canonical bytes (R23) of one scalar member of a request entry."""
    if value is None:
        return b"null"
    if type(value) is int:
        return b"%d" % value
    return canonical_bytes(value)


def _request_entry(state: RequestState) -> bytes:
    """R26: one request's line in the report, as canonical bytes.

    Filled into a byte template, like a trace entry, instead of serialised from a dictionary:
    the request lines hold every token time, most of a report's bytes.
    """
    request = state.request
    tokens = state.token_times_us
    completed = state.reject_reason is None
    queue_us = ttft_us = e2e_us = mean_itl_us = None
    if completed:
        queue_us, ttft_us, e2e_us = _latencies(state)
        mean_itl_us = ratio(tokens.last - tokens.first, len(tokens) - 1)
    assert state.terminal_us is not None, "R9: every request ends before the report is built"
    return _REQUEST_ENTRY % (
        request.arrival_us,
        _json(state.cached_blocks_at_routing),  # R57
        _json(state.terminal_us if completed else None),  # completion_us
        _json(e2e_us),
        _json(state.first_scheduled_us),
        _json(tokens.first if tokens else None),  # first_token_us
        _json(request.id),
        _json(mean_itl_us),
        b'"completed"' if completed else b'"rejected"',
        len(tokens),  # output_tokens
        state.preemptions,
        request.prompt_tokens,
        _json(queue_us),
        _json(state.reject_reason),
        state.reused_prompt_tokens,
        state.terminal_us,
        tokens.json_items(),
        _json(ttft_us),
        _json(state.worker),
    )


def _makespan_us(states: list[RequestState]) -> int:
    """R28: from the first arrival to the last terminal state."""
    first_arrival = min(state.request.arrival_us for state in states)
    terminals = [state.terminal_us for state in states if state.terminal_us is not None]
    if len(terminals) != len(states):
        raise ValueError("every request reaches a terminal state (R9) before the report is built")
    return max(terminals) - first_arrival


def _summary(states: list[RequestState], workers: list[Worker], makespan_us: int) -> dict[str, Any]:
    """R28: fleet-wide counts, throughput and latency statistics."""
    completed = [state for state in states if state.reject_reason is None]
    by_reason = dict.fromkeys(REJECT_REASONS, 0)
    for state in states:
        if state.reject_reason is not None:
            by_reason[state.reject_reason] += 1
    output_tokens = sum(len(state.token_times_us) for state in completed)
    latencies = [_latencies(state) for state in completed]
    gaps: Counter[int] = Counter()
    for state in completed:
        state.token_times_us.count_gaps(gaps)
    prompt_tokens = sum(state.request.prompt_tokens for state in completed)
    return {
        "requests": len(states),
        "completed": len(completed),
        "rejected": len(states) - len(completed),
        "rejected_by_reason": by_reason,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "steps": sum(worker.steps for worker in workers),
        "first_arrival_us": min(state.request.arrival_us for state in states),
        "makespan_us": makespan_us,
        "request_throughput_per_s": ratio(len(completed) * 1_000_000, makespan_us),
        "output_token_throughput_per_s": ratio(output_tokens * 1_000_000, makespan_us),
        "queue_us": statistics([queue for queue, _, _ in latencies]),
        "ttft_us": statistics([ttft for _, ttft, _ in latencies]),
        "itl_us": statistics_of_counts(gaps),
        "e2e_us": statistics([e2e for _, _, e2e in latencies]),
        "kv_cache": _summary_kv_cache(completed, workers, prompt_tokens),
    }


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
    }


def _worker_kv_cache(counters: KvCacheCounters | None) -> dict[str, int] | None:
    """R52: one worker's cache counters; ``None`` without a cache."""
    if counters is None:
        return None
    return {
        "peak_blocks_in_use": counters.peak_blocks_in_use,
        "reused_tokens": counters.reused_tokens,
        "preemptions": counters.preemptions,
        "evictions": counters.evictions,
    }


def _worker_entry(worker: Worker, makespan_us: int) -> dict[str, Any]:
    """R29: one worker's counters."""
    return {
        "worker": worker.index,
        "routed": worker.routed,
        "completed": worker.completed,
        "steps": worker.steps,
        "busy_us": worker.busy_us,
        "utilization": ratio(worker.busy_us, makespan_us),
        "peak_running": worker.peak_running,
        "peak_waiting": worker.peak_waiting,
        "prefill_tokens": worker.prefill_tokens,
        "decode_tokens": worker.decode_tokens,
        "output_tokens": worker.output_tokens,
        "kv_cache": _worker_kv_cache(worker.kv_counters),
    }


#: R30's trace entry with its members in RFC 8785 order; the strings inside are canonical already.
_TRACE_ENTRY = (
    b'{"batched_tokens":%d,"decode_requests":%b,"end_us":%d,"kv_blocks_in_use":%b,'
    b'"preempted":%b,"prefill":%b,"prefill_tokens":%d,'
    b'"shape":{"context_tokens":%d,"decode_requests":%d,"prefill_tokens":%d},'
    b'"start_us":%d,"worker":%d}'
)


def _trace_entries(step: Step) -> Iterator[tuple[int, int, bytes]]:
    """R30: the trace entries of a step, one per step of a run of identical steps, as
    ``(start_us, worker, canonical bytes)``.

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
    decoding = len(step.decode)
    batched = decoding + prefill_tokens
    context = step.context_tokens
    for start, end in step.step_bounds():
        entry = _TRACE_ENTRY % (
            batched,
            decode_requests,
            end,
            kv_blocks_in_use,
            preempted,
            prefill,
            prefill_tokens,
            context,
            decoding,
            prefill_tokens,
            start,
            step.worker,
        )
        yield start, step.worker, entry
        context += decoding  # R22: each decode step adds one token to every decoding context


def _trace(steps: list[Step]) -> Iterator[bytes]:
    """R30: every step of every worker, in order of (start_us, worker), as canonical bytes.

    Each worker's steps are formed in time order, so merging the workers' streams orders the
    whole trace without holding it in memory at once.
    """
    by_worker: dict[int, list[Step]] = {}
    for step in steps:
        by_worker.setdefault(step.worker, []).append(step)
    streams = [
        (entry for step in worker_steps for entry in _trace_entries(step))
        for worker_steps in by_worker.values()
    ]
    return (entry for _, _, entry in heapq.merge(*streams))


def report_chunks(
    result: SimulationResult,
    inputs: dict[str, bytes],
    calibration: Mapping[str, Any] | None = None,
) -> Iterator[bytes]:
    """R31: the report's canonical bytes (R23), in pieces, so that a long replay's requests and
    trace are serialised one batch at a time. ``inputs`` maps scenario, workload and
    timing_profile to the exact bytes read; ``calibration`` is the profile's (R25).

    The members are written in RFC 8785 order (sorted keys), which the assertion checks.
    """
    makespan_us = _makespan_us(result.requests)
    members = ["document", "inputs", "requests", "schema_version", "summary", "trace", "workers"]
    assert members == sorted(members)
    digests: dict[str, dict[str, Any]] = {
        name: {"sha256": digest(data)} for name, data in inputs.items()
    }
    digests["timing_profile"]["calibration"] = calibration
    summary = _summary(result.requests, result.workers, makespan_us)
    yield b'{"document":"report","inputs":' + canonical_bytes(digests) + b',"requests":'
    yield from encoded_array(_request_entry(state) for state in result.requests)
    yield b',"schema_version":"4.0","summary":' + canonical_bytes(summary) + b',"trace":'
    if result.steps is None:
        yield b"null"
    else:
        yield from encoded_array(_trace(result.steps))
    workers = [_worker_entry(worker, makespan_us) for worker in result.workers]
    yield b',"workers":' + canonical_bytes(workers) + b"}\n"
