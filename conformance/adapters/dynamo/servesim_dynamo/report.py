"""The servesim report (R24 to R31) of Dynamo's timelines; nothing is simulated here.

Request fields come straight from Dynamo's records (``timeline``). Statistics and counters are
derived from those timelines with the reference's own R24/R27 helpers. Worker counters that
Dynamo does not record are read off its timeline of passes: with chunking off every pass emits
at least one token, so the pass ends of a worker are its distinct token times; a pass prefills
when some request's first token is at its end and decodes when some later token is, and lasts
accordingly under Dynamo's fixed model. A timeline that does not fit that reading (two passes
overlapping) is an error, not a guess.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from typing import Any

from servesim.contract.migrations import CHAIN
from servesim.engine.admission import REJECT_REASONS
from servesim.report.writer import (
    digest,
    ratio,
    statistics,
    statistics_of_counts,
)
from servesim_dynamo.mapping import FixedTiming
from servesim_dynamo.timeline import DynamoResult, Timeline

#: Dynamo's vLLM-style scheduler rejects a request at a worker only when it exceeds an
#: admission limit: its prompt is at or above max_model_len, or its prompt needs more KV blocks
#: than the cache holds, which the adapter's cache size rules out. R10's name for it:
DYNAMO_REJECT_REASON = "context_exceeds_max_model_len"


def _passes(timelines: list[Timeline], timing: FixedTiming) -> list[tuple[int, int]]:
    """(start, end) of every pass of one worker, read off its token times."""
    firsts = {t.token_times_us[0] for t in timelines if t.token_times_us}
    laters = {time for t in timelines for time in t.token_times_us[1:]}
    passes = []
    previous_end = None
    for end in sorted(firsts | laters):
        duration = timing.prefill_us * (end in firsts) + timing.decode_us * (end in laters)
        start = end - duration
        if previous_end is not None and start < previous_end:
            raise DynamoResult(
                f"the pass ending at {end} us would start at {start} us, before the previous "
                f"pass ended ({previous_end} us): Dynamo's timeline does not fit its fixed model"
            )
        passes.append((start, end))
        previous_end = end
    return passes


def _passes_with_chunks(timelines: list[Timeline], timing: FixedTiming) -> list[tuple[int, int]]:
    """(start, end) of every pass of one sglang worker, with the passes that emit no token.

    Under the sglang style (R90) a pass that only prefills a chunk which does not end a prompt
    emits no token, so not every pass end is a token time. Every pass is prefill-only or
    decode-only, and a worker with work starts its next pass when the last one ends (R16);
    without work, at the next arrival, which is admitted at once (R90: the first candidate of
    an idle worker always gets an allotment). So from each pass start the next token time e
    is either this pass's end (e - start is the prefill part when a first token is at e, the
    decode part otherwise) or later, and then this pass is a prefill of a chunk alone,
    lasting the prefill part. Anything else is an error, not a guess.
    """
    served = [t for t in timelines if t.status == "completed" and t.token_times_us]
    arrivals = sorted(t.arrival_us for t in served)
    lasts = sorted(t.token_times_us[-1] for t in served)
    firsts = {t.token_times_us[0] for t in served}
    decodes = {time for t in served for time in t.token_times_us[1:]}
    ends = sorted(firsts | decodes)

    def working(now: int) -> bool:
        # a served request that arrived by now and has tokens still to come
        return bisect.bisect_right(arrivals, now) > bisect.bisect_right(lasts, now)

    def next_arrival(now: int) -> int:
        return arrivals[bisect.bisect_right(arrivals, now)]

    passes: list[tuple[int, int]] = []
    index = 0
    start = arrivals[0] if arrivals else 0
    while index < len(ends):
        end = ends[index]
        if end in firsts and end in decodes:
            raise DynamoResult(
                f"the pass ending at {end} us both prefilled and decoded: never under the "
                "sglang style (R90)"
            )
        duration = timing.prefill_us if end in firsts else timing.decode_us
        if end - start == duration:
            passes.append((start, end))
            index += 1
            start = end if working(end) else next_arrival(end) if index < len(ends) else end
        elif end - start > duration and start + timing.prefill_us <= end - duration:
            passes.append((start, start + timing.prefill_us))  # a chunk, no token
            start += timing.prefill_us
        else:
            raise DynamoResult(
                f"the pass starting at {start} us cannot end at the next token time, {end} us: "
                "Dynamo's timeline does not fit its fixed model under the sglang style"
            )
    return passes


def peak_running(timelines: list[Timeline], passes: list[tuple[int, int]]) -> int:
    """R29: the most requests admitted by a pass's start and not completed before its end.

    A request that completed before a pass's end did so at an earlier pass's end, so it was
    admitted before this pass started: the running count is a difference of two counts.
    """
    served = [t for t in timelines if t.token_times_us and t.first_admit_us is not None]
    admitted = sorted(t.first_admit_us for t in served if t.first_admit_us is not None)
    completed = sorted(t.token_times_us[-1] for t in served)
    peak = 0
    for start, end in passes:
        running = bisect.bisect_right(admitted, start) - bisect.bisect_left(completed, end)
        peak = max(peak, running)
    return peak


def peak_waiting(timelines: list[Timeline]) -> int:
    """R29: after each arrival, the requests that arrived up to it and are admitted later.

    Arrivals at one instant count cumulatively; a request admitted at the instant it arrives
    was waiting when it joined (steps are formed after arrivals, R7). A request admitted
    before an arrival's instant arrived before it, so the waiting count after the k-th arrival
    is k minus those admitted earlier.
    """
    arrivals = sorted(t.arrival_us for t in timelines if t.first_admit_us is not None)
    admitted = sorted(t.first_admit_us for t in timelines if t.first_admit_us is not None)
    peak = 0
    for index, now in enumerate(arrivals):
        peak = max(peak, index + 1 - bisect.bisect_left(admitted, now))
    return peak


def _request_entry(request: dict[str, Any], timeline: Timeline) -> dict[str, Any]:
    completed = timeline.status == "completed"
    return request_entry(
        request,
        completed=completed,
        worker=timeline.worker,
        reject_reason=None if completed else DYNAMO_REJECT_REASON,
        terminal_us=timeline.terminal_us,
        first_scheduled_us=timeline.first_admit_us,
        tokens=list(timeline.token_times_us),
        reused_prompt_tokens=timeline.cache.reused_prompt_tokens,
        preemptions=timeline.cache.preemptions,
    )


def request_entry(
    request: dict[str, Any],
    *,
    completed: bool,
    worker: int,
    reject_reason: str | None,
    terminal_us: int | None,
    first_scheduled_us: int | None,
    tokens: list[int],
    reused_prompt_tokens: int,
    preemptions: int,
) -> dict[str, Any]:
    """A request's entry of a report 4.0 from what Dynamo recorded of it: a rejected one gets
    its ``reject_reason`` (``None`` for a completed one) and no schedule or reuse; a completed
    one its latencies (R25, R26)."""
    entry: dict[str, Any] = {
        "id": request["id"],
        "worker": worker,
        "outcome": "completed" if completed else "rejected",
        "reject_reason": reject_reason,
        "prompt_tokens": request["prompt_tokens"],
        "output_tokens": len(tokens),
        "arrival_us": request["arrival_us"],
        "terminal_us": terminal_us,
        "first_scheduled_us": first_scheduled_us if completed else None,
        "first_token_us": tokens[0] if tokens else None,
        "completion_us": tokens[-1] if completed else None,
        "queue_us": None,
        "ttft_us": None,
        "mean_itl_us": None,
        "e2e_us": None,
        "token_times_us": tokens,
        "reused_prompt_tokens": reused_prompt_tokens if completed else 0,
        "preemptions": preemptions,
        # R57: null, for the adapter routes only by round robin (mapping.check_scenario)
        "cached_blocks_at_routing": None,
    }
    if completed:
        arrival = request["arrival_us"]
        assert first_scheduled_us is not None
        entry["queue_us"] = first_scheduled_us - arrival
        entry["ttft_us"] = tokens[0] - arrival
        entry["e2e_us"] = tokens[-1] - arrival
        entry["mean_itl_us"] = ratio(tokens[-1] - tokens[0], len(tokens) - 1)
    return entry


def _worker_entry(
    index: int,
    timelines: list[Timeline],
    timing: FixedTiming,
    makespan_us: int,
    passes: list[tuple[int, int]] | None = None,
    style: str = "vllm",
) -> dict[str, Any]:
    if passes is None:
        read = _passes_with_chunks if style == "sglang" else _passes
        passes = read(timelines, timing)
    busy = sum(end - start for start, end in passes)
    completed = [t for t in timelines if t.status == "completed"]
    outputs = sum(len(t.token_times_us) for t in completed)
    prefills = [t for t in completed if t.token_times_us]
    return {
        "worker": index,
        "routed": len(timelines),
        "completed": len(completed),
        "steps": len(passes),
        "busy_us": busy,
        "utilization": ratio(busy, makespan_us),
        "peak_running": peak_running(timelines, passes),
        "peak_waiting": peak_waiting(timelines),
        "prefill_tokens": 0,  # filled in by build_report, which knows the prompts
        "decode_tokens": outputs - len(prefills),
        "output_tokens": outputs,
        "kv_cache": None,  # R52: the adapter refuses scenarios with a cache (kv.py)
    }


def report_4_summary(
    entries: list[dict[str, Any]],
    workers: list[dict[str, Any]],
    first_arrival: int,
    makespan: int,
) -> dict[str, Any]:
    """R28's summary of a report 4.0 (the form the adapter builds, then migrates) from its
    request entries: rejections by reason, the counts, throughputs and statistics of the
    completed requests (their ITL gaps counted), the workers' steps summed; no cache counters
    (Dynamo records none)."""
    completed = [entry for entry in entries if entry["outcome"] == "completed"]
    by_reason = dict.fromkeys(REJECT_REASONS, 0)
    for entry in entries:
        if entry["reject_reason"] is not None:
            by_reason[entry["reject_reason"]] += 1
    gaps: Counter[int] = Counter()
    for entry in completed:
        times = entry["token_times_us"]
        gaps.update(later - earlier for earlier, later in itertools.pairwise(times))
    output_tokens = sum(entry["output_tokens"] for entry in completed)
    return {
        "requests": len(entries),
        "completed": len(completed),
        "rejected": len(entries) - len(completed),
        "rejected_by_reason": by_reason,
        "prompt_tokens": sum(entry["prompt_tokens"] for entry in completed),
        "output_tokens": output_tokens,
        "steps": sum(worker["steps"] for worker in workers),
        "first_arrival_us": first_arrival,
        "makespan_us": makespan,
        "request_throughput_per_s": ratio(len(completed) * 1_000_000, makespan),
        "output_token_throughput_per_s": ratio(output_tokens * 1_000_000, makespan),
        "queue_us": statistics(entry["queue_us"] for entry in completed),
        "ttft_us": statistics(entry["ttft_us"] for entry in completed),
        "itl_us": statistics_of_counts(gaps),
        "e2e_us": statistics(entry["e2e_us"] for entry in completed),
        "kv_cache": None,
    }


def build_report(
    inputs: dict[str, bytes],
    calibration: dict[str, Any] | None,
    requests: list[dict[str, Any]],
    by_worker: list[list[Timeline]],
    timing: FixedTiming,
    passes: list[list[tuple[int, int]]] | None = None,
    style: str = "vllm",
) -> dict[str, Any]:
    """The report value of a replay: ``requests`` are the workload's, in workload order;
    ``passes`` each worker's (start, end) passes when they are not read off its token times
    (a worker of several ranks, ranks.py); ``style`` every worker's (R88), which says how
    passes are read off token times."""
    timelines = {t.id: t for worker in by_worker for t in worker}
    missing = [request["id"] for request in requests if request["id"] not in timelines]
    if missing:
        raise DynamoResult(f"Dynamo recorded no outcome for request(s) {missing[:5]}")
    for request in requests:
        if request["prompt_tokens"] == 0 and timelines[request["id"]].status == "completed":
            raise DynamoResult(
                f"request {request['id']!r}: Dynamo served an empty prompt (servesim rejects it at "
                "arrival, R10); the pass that admits it emits no token, so the worker's passes "
                "cannot be read off its token times"
            )
    for timeline in timelines.values():
        if timeline.cache.reused_tokens:
            raise DynamoResult(
                f"request {timeline.id!r}: Dynamo reused {timeline.cache.reused_tokens} cached "
                "prompt tokens with prefix caching off; without kv_cache nothing is reused (R48)"
            )
    entries = [_request_entry(request, timelines[request["id"]]) for request in requests]
    first_arrival = min(request["arrival_us"] for request in requests)
    makespan = max(entry["terminal_us"] for entry in entries) - first_arrival
    prompts = {request["id"]: request["prompt_tokens"] for request in requests}
    workers = []
    for index, worker_timelines in enumerate(by_worker):
        worker = _worker_entry(
            index,
            worker_timelines,
            timing,
            makespan,
            None if passes is None else passes[index],
            style,
        )
        worker["prefill_tokens"] = sum(
            prompts[t.id] for t in worker_timelines if t.status == "completed"
        )
        workers.append(worker)
    summary = report_4_summary(entries, workers, first_arrival, makespan)
    digests: dict[str, dict[str, Any]] = {
        name: {"sha256": digest(data)} for name, data in inputs.items()
    }
    digests["timing_profile"]["calibration"] = calibration
    return {
        "document": "report",
        "schema_version": "4.0",
        "inputs": digests,
        "summary": summary,
        "workers": workers,
        "requests": entries,
        "trace": None,
    }


def _meets(entry: dict[str, Any], slo: dict[str, int]) -> bool:
    """R63, from the report's own figures: completed, and every given bound holds inclusively;
    the mean ITL bound compared exactly in integers (one token: no gap, met)."""
    if entry["outcome"] != "completed":
        return False
    tokens = entry["token_times_us"]
    return (
        ("ttft_us" not in slo or entry["ttft_us"] <= slo["ttft_us"])
        and ("e2e_us" not in slo or entry["e2e_us"] <= slo["e2e_us"])
        and (
            "mean_itl_us" not in slo
            or tokens[-1] - tokens[0] <= slo["mean_itl_us"] * (len(tokens) - 1)
        )
    )


def as_report_5(
    value: dict[str, Any], requests: list[dict[str, Any]], scenario: dict[str, Any]
) -> dict[str, Any]:
    """The report 5.0 of a 4.0 report value (R64): R37's exact migration (``session`` null,
    ``cut_off`` 0, ``tpot_us`` from each completed request's times), then each request's
    session from the workload, and with ``slo`` each request's ``slo_met`` and the summary's
    ``goodput`` (R63), computed from the report's figures as SPEC.md defines them (nothing in
    Dynamo is asked: objectives are a reading of the times it recorded)."""
    migrated = dict(CHAIN.migrate(value, "report", "5.0").document)
    entries = migrated["requests"]
    for entry, request in zip(entries, requests, strict=True):
        entry["session"] = request.get("session")
    slo = scenario.get("slo")
    if slo is not None:
        met = [_meets(entry, slo) for entry in entries]
        for entry, flag in zip(entries, met, strict=True):
            entry["slo_met"] = flag
        makespan = migrated["summary"]["makespan_us"]
        requests_met = sum(met)
        tokens_met = sum(e["output_tokens"] for e, flag in zip(entries, met, strict=True) if flag)
        migrated["summary"]["goodput"] = {
            "requests": requests_met,
            "output_tokens": tokens_met,
            "request_throughput_per_s": ratio(requests_met * 1_000_000, makespan),
            "output_token_throughput_per_s": ratio(tokens_met * 1_000_000, makespan),
        }
    return migrated
