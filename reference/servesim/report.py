"""The report: every field's derivation (SPEC.md section 7, R24 to R31).

The report is a pure function of the input bytes: no wall clock, no host name, no version of
the program that wrote it, so that two conforming implementations write the same bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from servesim.admission import REJECT_REASONS
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
    rank = max(1, -(-percent * len(sorted_values) // 100))
    return sorted_values[rank - 1]


def statistics(values: list[int]) -> dict[str, Any]:
    """R27: count, min, max, mean and percentiles of integer samples; null where there are none."""
    ordered = sorted(values)
    result: dict[str, Any] = {"count": len(ordered)}
    if not ordered:
        result.update(min=None, max=None, mean=None)
        result.update({f"p{percent}": None for percent in PERCENTILES})
        return result
    result.update(min=ordered[0], max=ordered[-1], mean=ratio(sum(ordered), len(ordered)))
    result.update({f"p{percent}": nearest_rank(ordered, percent) for percent in PERCENTILES})
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
        state.token_times_us[0] - arrival,
        state.token_times_us[-1] - arrival,
    )


def _request_entry(state: RequestState) -> dict[str, Any]:
    """R26: one request's line in the report."""
    request = state.request
    tokens = state.token_times_us
    completed = state.reject_reason is None
    entry: dict[str, Any] = {
        "id": request.id,
        "worker": state.worker,
        "outcome": "completed" if completed else "rejected",
        "reject_reason": state.reject_reason,
        "prompt_tokens": request.prompt_tokens,
        "output_tokens": len(tokens),
        "arrival_us": request.arrival_us,
        "terminal_us": state.terminal_us,
        "first_scheduled_us": state.first_scheduled_us,
        "first_token_us": tokens[0] if tokens else None,
        "completion_us": state.terminal_us if completed else None,
        "queue_us": None,
        "ttft_us": None,
        "mean_itl_us": None,
        "e2e_us": None,
        "token_times_us": tokens,
    }
    if completed:
        entry["queue_us"], entry["ttft_us"], entry["e2e_us"] = _latencies(state)
        entry["mean_itl_us"] = ratio(tokens[-1] - tokens[0], len(tokens) - 1)
    return entry


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
    gaps = [
        later - earlier
        for state in completed
        for earlier, later in zip(state.token_times_us, state.token_times_us[1:], strict=False)
    ]
    return {
        "requests": len(states),
        "completed": len(completed),
        "rejected": len(states) - len(completed),
        "rejected_by_reason": by_reason,
        "prompt_tokens": sum(state.request.prompt_tokens for state in completed),
        "output_tokens": output_tokens,
        "steps": sum(worker.steps for worker in workers),
        "first_arrival_us": min(state.request.arrival_us for state in states),
        "makespan_us": makespan_us,
        "request_throughput_per_s": ratio(len(completed) * 1_000_000, makespan_us),
        "output_token_throughput_per_s": ratio(output_tokens * 1_000_000, makespan_us),
        "queue_us": statistics([queue for queue, _, _ in latencies]),
        "ttft_us": statistics([ttft for _, ttft, _ in latencies]),
        "itl_us": statistics(gaps),
        "e2e_us": statistics([e2e for _, _, e2e in latencies]),
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
    }


def _trace_entries(step: Step) -> list[dict[str, Any]]:
    """R30: the trace entries of a step, one per step of a run of identical steps."""
    prefill_tokens = step.prefill_tokens
    decode_requests = [state.request.id for state in step.decode]
    prefill = [{"id": state.request.id, "tokens": tokens} for state, tokens in step.prefill]
    return [
        {
            "worker": step.worker,
            "start_us": start,
            "end_us": start + step.duration_us,
            "decode_requests": decode_requests,
            "prefill": prefill,
            "prefill_tokens": prefill_tokens,
            "batched_tokens": len(step.decode) + prefill_tokens,
        }
        for start in range(step.start_us, step.end_us, step.duration_us)
    ]


def _trace(steps: list[Step]) -> list[dict[str, Any]]:
    """R30: every step of every worker, in order of (start_us, worker)."""
    entries = [entry for step in steps for entry in _trace_entries(step)]
    entries.sort(key=lambda entry: (entry["start_us"], entry["worker"]))
    return entries


def build_report(result: SimulationResult, inputs: dict[str, bytes]) -> dict[str, Any]:
    """The report document for ``result``; ``inputs`` maps scenario, workload and
    timing_profile to the exact bytes read."""
    makespan_us = _makespan_us(result.requests)
    return {
        "document": "report",
        "schema_version": "1.0",
        "inputs": {name: {"sha256": digest(data)} for name, data in sorted(inputs.items())},
        "summary": _summary(result.requests, result.workers, makespan_us),
        "workers": [_worker_entry(worker, makespan_us) for worker in result.workers],
        "requests": [_request_entry(state) for state in result.requests],
        "trace": None if result.steps is None else _trace(result.steps),
    }
