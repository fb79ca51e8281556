"""Properties every conforming report has, checked from the inputs and the report alone.

These are the spec's invariants (SPEC.md R9 to R11, R16 to R21, R25 to R30; the KV cache's, R45
to R53, are in ``kv_invariants``, state-aware routing's, R54 to R57, in ``routing_invariants``,
sessions', the closed loop's, the stop time's and goodput's, R59 to R64, in
``session_invariants``, all exported here) restated as checks on observable output, so
that they run against any implementation. Each check raises ``InvariantViolation`` naming the
rule and the offending request or step.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Mapping

from servesim_conformance.kv_invariants import (
    cache_of,
    check_hashes_change_nothing,
    check_kv_absent,
    check_kv_blocks,
    check_kv_capacity,
    check_kv_preemptions,
    check_kv_reuse,
    check_kv_summary,
    without_prefix_hashes,
)
from servesim_conformance.routing_invariants import (
    check_cache_aware,
    check_cached_blocks_at_routing,
    check_cached_blocks_reported,
    check_least_loaded,
    check_routing,
)
from servesim_conformance.session_invariants import (
    check_closed_loop_releases,
    check_cut_off_entries,
    check_goodput,
    check_in_flight,
    check_objectives,
    check_open_loop_arrivals,
    check_outcome_counts,
    check_session_members,
    check_sessions,
    check_stop_time,
    check_tpot,
    check_turns,
    stop_time,
    stop_time_of,
)
from servesim_conformance.violations import Document, InvariantViolation, require

__all__ = [
    "Document",
    "InvariantViolation",
    "check_cache_aware",
    "check_cached_blocks_at_routing",
    "check_cached_blocks_reported",
    "check_closed_loop_releases",
    "check_cut_off_entries",
    "check_goodput",
    "check_hashes_change_nothing",
    "check_in_flight",
    "check_kv_absent",
    "check_kv_blocks",
    "check_kv_capacity",
    "check_kv_preemptions",
    "check_kv_reuse",
    "check_kv_summary",
    "check_least_loaded",
    "check_objectives",
    "check_open_loop_arrivals",
    "check_outcome_counts",
    "check_routing",
    "check_session_members",
    "check_sessions",
    "check_stop_time",
    "check_tpot",
    "check_turns",
    "without_prefix_hashes",
]

_require = require


def expected_reject_reason(
    request: Document, scheduler: Document, kv_cache: Document | None = None
) -> str | None:
    """R10, restated: the reason ``request`` is rejected, or None."""
    if request["prompt_tokens"] == 0:
        return "empty_prompt"
    if request["max_output_tokens"] == 0:
        return "zero_max_output_tokens"
    if request["prompt_tokens"] + request["max_output_tokens"] > scheduler["max_model_len"]:
        return "context_exceeds_max_model_len"
    whole = scheduler["prefill"]["mode"] == "whole"
    if whole and request["prompt_tokens"] > scheduler["max_batched_tokens"]:
        return "prefill_exceeds_step_budget"
    if kv_cache is not None:
        capacity = kv_cache["blocks"] * kv_cache["block_tokens"]
        if request["prompt_tokens"] + request["max_output_tokens"] > capacity:
            return "exceeds_kv_cache"
    return None


def check_terminal_states(scenario: Document, workload: Document, report: Document) -> None:
    """R9 to R11, R26: one entry per request, in order, each in exactly one terminal state."""
    entries = report["requests"]
    ids = [entry["id"] for entry in entries]
    _require(
        ids == [r["id"] for r in workload["requests"]], "R26", "requests not in workload order"
    )
    stop = stop_time(scenario)
    for request, entry in zip(workload["requests"], entries, strict=True):
        rid = request["id"]
        if entry["arrival_us"] is None:
            # R62: never arrived (released at the stop time or later), so never judged by R10
            _require(stop is not None, "R26", f"{rid}: no arrival without a stop time")
            _require(entry["outcome"] == "cut_off", "R62", f"{rid}: never arrived, not cut off")
            _require(entry["reject_reason"] is None, "R62", f"{rid}: never arrived, rejected")
            continue
        reason = expected_reject_reason(request, scenario["scheduler"], cache_of(scenario))
        _require(entry["reject_reason"] == reason, "R10", f"{rid}: reason {entry['reject_reason']}")
        if reason is None and entry["outcome"] == "cut_off" and stop is not None:
            # R62: accepted, then cut off at the stop time before it completed
            _require(0 <= entry["worker"] < scenario["fleet"]["workers"], "R12", f"{rid}: worker")
        elif reason is None:
            _require(entry["outcome"] == "completed", "R9", f"{rid} did not complete")
            count = request["max_output_tokens"]
            _require(entry["output_tokens"] == count, "R11", f"{rid}: wrong output_tokens")
            _require(len(entry["token_times_us"]) == count, "R11", f"{rid}: wrong token count")
            last = entry["token_times_us"][-1]
            _require(entry["completion_us"] == entry["terminal_us"] == last, "R26", f"{rid}: end")
            _require(0 <= entry["worker"] < scenario["fleet"]["workers"], "R12", f"{rid}: worker")
        else:
            _require(entry["outcome"] == "rejected", "R9", f"{rid} should be rejected")
            _require(entry["worker"] is None, "R10", f"{rid}: a rejected request was routed")
            _require(entry["terminal_us"] == entry["arrival_us"], "R10", f"{rid}: rejection time")
            _require(entry["token_times_us"] == [], "R10", f"{rid}: rejected with tokens")
    summary = report["summary"]
    # R64: a report older than 5.0 has no ``cut_off`` member and no cut-off request (R37's
    # migration to 5.0 adds 0)
    cut_off = summary.get("cut_off", 0)
    _require(
        summary["completed"] + summary["rejected"] + cut_off == summary["requests"] == len(entries),
        "R28",
        "counts do not add up",
    )
    _require(sum(summary["rejected_by_reason"].values()) == summary["rejected"], "R28", "by reason")


def check_step_budgets(scenario: Document, report: Document) -> None:
    """R17 to R19, R21: no step over max_num_seqs or max_batched_tokens or the chunk cap;
    no request over max_model_len."""
    limits = scenario["scheduler"]
    for index, step in enumerate(report["trace"] or []):
        where = f"trace step {index}"
        ids = step["decode_requests"] + [item["id"] for item in step["prefill"]]
        _require(len(ids) == len(set(ids)), "R17", f"{where}: a request appears twice")
        _require(len(ids) <= limits["max_num_seqs"], "R19", f"{where}: over max_num_seqs")
        batched = len(step["decode_requests"]) + step["prefill_tokens"]
        _require(step["batched_tokens"] == batched, "R30", f"{where}: batched_tokens")
        _require(1 <= batched <= limits["max_batched_tokens"], "R21", f"{where}: over the budget")
        if limits["prefill"]["mode"] == "chunked":
            cap = limits["prefill"]["max_chunk_tokens"]
            _require(all(i["tokens"] <= cap for i in step["prefill"]), "R19", f"{where}: chunk")
    for entry in report["requests"]:
        if entry["outcome"] == "completed":
            context = entry["prompt_tokens"] + entry["output_tokens"]
            _require(context <= limits["max_model_len"], "R21", f"{entry['id']}: context")


def check_token_times(report: Document) -> None:
    """R20, R21, R26: token times strictly increase, follow arrival, and give the latencies."""
    for entry in report["requests"]:
        times, rid = entry["token_times_us"], entry["id"]
        _require(times == sorted(set(times)), "R21", f"{rid}: token times do not increase")
        if not times:
            continue
        _require(
            entry["arrival_us"] <= entry["first_scheduled_us"] < times[0], "R21", f"{rid}: order"
        )
        _require(entry["queue_us"] == entry["first_scheduled_us"] - entry["arrival_us"], "R26", rid)
        _require(entry["ttft_us"] == times[0] - entry["arrival_us"], "R26", f"{rid}: ttft")
        if entry["completion_us"] is not None:
            _require(entry["e2e_us"] == times[-1] - entry["arrival_us"], "R26", f"{rid}: e2e")


def check_trace_consistency(report: Document) -> None:
    """R16, R20, R30: steps of a worker never overlap, start only when there is work, and
    account for every prompt token and every decode token."""
    trace = report["trace"]
    _require(
        trace == sorted(trace, key=lambda s: (s["start_us"], s["worker"])), "R30", "trace order"
    )
    by_worker: dict[int, list[Document]] = defaultdict(list)
    for step in trace:
        by_worker[step["worker"]].append(step)
    entries = {entry["id"]: entry for entry in report["requests"]}
    stop = stop_time_of(report)
    prefilled: dict[str, int] = defaultdict(int)
    decoded: dict[str, int] = defaultdict(int)
    for worker, steps in by_worker.items():
        arrivals = {e["arrival_us"] for e in report["requests"] if e["worker"] == worker}
        previous_end = None
        for step in steps:
            where = f"worker {worker} step at {step['start_us']}"
            _require(step["end_us"] > step["start_us"], "R22", f"{where}: empty duration")
            if previous_end is not None:
                _require(step["start_us"] >= previous_end, "R16", f"{where}: overlaps")
            _require(
                step["start_us"] == previous_end or step["start_us"] in arrivals,
                "R16",
                f"{where}: the worker sat idle with work",
            )
            previous_end = step["end_us"]
            if stop is not None and step["end_us"] > stop:
                # R62: a cut step was formed, but its end never happened: it produced nothing
                cut = step["decode_requests"] + [item["id"] for item in step["prefill"]]
                for rid in cut:
                    outcome = entries[rid]["outcome"]
                    _require(outcome == "cut_off", "R62", f"{where} is cut, {rid} {outcome}")
                continue
            for item in step["prefill"]:
                prefilled[item["id"]] += item["tokens"]
                _require(entries[item["id"]]["worker"] == worker, "R12", f"{where}: wrong worker")
            for request_id in step["decode_requests"]:
                decoded[request_id] += 1
    for rid, entry in entries.items():
        if entry["outcome"] == "completed":
            check_accounted(entry, prefilled[rid], decoded[rid])
        elif entry["outcome"] == "cut_off":
            check_accounted_cut_off(entry, prefilled[rid], decoded[rid])
        else:
            _require(rid not in prefilled and rid not in decoded, "R10", f"{rid}: was run")


def check_accounted_cut_off(entry: Document, prefilled: int, decoded: int) -> None:
    """R20, R62: what a cut-off request's ended steps gave it is what it produced. Never
    preempted, it prefilled its whole prompt (less its reuse) exactly when it produced a first
    token, and decoded every token after the first; preempted, it decoded at most that."""
    rid, output = entry["id"], entry["output_tokens"]
    if entry["preemptions"] > 0:
        _require(decoded <= max(0, output - 1), "R62", f"{rid}: decoded {decoded} times")
        return
    if entry["first_scheduled_us"] is None:
        _require(prefilled == decoded == 0, "R62", f"{rid}: never admitted, yet run")
        return
    to_compute = entry["prompt_tokens"] - entry["reused_prompt_tokens"]
    if output == 0:
        _require(prefilled < to_compute, "R20", f"{rid}: prefilled its prompt, made no token")
        _require(decoded == 0, "R20", f"{rid}: decoded {decoded} times without a first token")
        return
    _require(prefilled == to_compute, "R20", f"{rid}: prefilled {prefilled}, not {to_compute}")
    _require(decoded == output - 1, "R20", f"{rid}: decoded {decoded} times")


def check_accounted(entry: Document, prefilled: int, decoded: int) -> None:
    """R20, R48, R49, R51: a completed request's allotments are its prompt less what it reused
    (0 without a cache), and it decoded every output token but the first, which the step that
    completes its prefill produces.

    Exactly so when it was never preempted. A preempted request recomputes when readmitted
    (R49), and the step that completes a recompute produces its next token (R51), so it decoded
    between ``output_tokens - 1 - preemptions`` and ``output_tokens - 1`` times, and computed at
    least one token at its last admission (R48).
    """
    rid, preemptions = entry["id"], entry["preemptions"]
    output = entry["output_tokens"]
    if preemptions == 0:
        expected = entry["prompt_tokens"] - entry["reused_prompt_tokens"]
        _require(prefilled == expected, "R20", f"{rid}: prefilled {prefilled}, not {expected}")
        _require(decoded == output - 1, "R20", f"{rid}: decoded {decoded} times")
        return
    _require(prefilled >= 1, "R48", f"{rid}: never computed a token")
    _require(
        output - 1 - preemptions <= decoded <= output - 1,
        "R51",
        f"{rid}: decoded {decoded} times with {preemptions} preemptions",
    )


def check_counts(report: Document) -> None:
    """R28, R29: the summary and the workers add up to the requests (and the trace)."""
    summary, workers, entries = report["summary"], report["workers"], report["requests"]
    completed = [e for e in entries if e["outcome"] == "completed"]
    output = sum(e["output_tokens"] for e in completed)
    _require(summary["output_tokens"] == output, "R28", "output_tokens")
    # R29, R62: a worker counts the tokens of its cut-off requests too; the summary does not
    produced = sum(e["output_tokens"] for e in entries)
    _require(produced == sum(w["output_tokens"] for w in workers), "R29", "output_tokens")
    cut_off = any(e["outcome"] == "cut_off" for e in entries)
    caches = [w["kv_cache"] for w in workers if w["kv_cache"] is not None]
    reused = sum(cache["reused_tokens"] for cache in caches)
    preempted = sum(cache["preemptions"] for cache in caches)
    computed = sum(w["prefill_tokens"] for w in workers) + reused
    # R29, R48, R49: every prompt token is prefilled or reused; a recompute does it again.
    if preempted == 0 and not cut_off:
        _require(summary["prompt_tokens"] == computed, "R29", "prefill and reuse")
    else:
        _require(summary["prompt_tokens"] <= computed, "R29", "prefill and reuse")
    _require(summary["steps"] == sum(w["steps"] for w in workers), "R29", "steps")
    if report["trace"] is not None:
        _require(summary["steps"] == len(report["trace"]), "R30", "trace length")
    _require(summary["completed"] == sum(w["completed"] for w in workers), "R29", "completed")
    routed = sum(e["worker"] is not None for e in entries)
    _require(sum(w["routed"] for w in workers) == routed, "R29", "routed")
    first_tokens: dict[int, int] = defaultdict(int)
    for entry in entries:
        if entry["output_tokens"] >= 1:
            first_tokens[entry["worker"]] += 1
    for worker in workers:
        # R29: decode tokens plus one per prefill completed: one per request that produced a
        # token (every completed one, R62: a cut-off one too), plus (R51) one per recompute
        # completed, at most one per preemption.
        tokens = worker["decode_tokens"] + first_tokens[worker["worker"]]
        recomputes = 0 if worker["kv_cache"] is None else worker["kv_cache"]["preemptions"]
        _require(
            tokens <= worker["output_tokens"] <= tokens + recomputes,
            "R29",
            f"worker {worker['worker']}: output_tokens",
        )
        _require(worker["busy_us"] <= summary["makespan_us"], "R29", "busy over makespan")
    gaps = sum(max(0, e["output_tokens"] - 1) for e in completed)
    _require(summary["itl_us"]["count"] == gaps, "R28", "itl count")


def check_digests(inputs: Mapping[str, bytes], report: Document) -> None:
    """R25: the digests are the SHA-256 of the bytes given."""
    for role, data in inputs.items():
        expected = hashlib.sha256(data).hexdigest()
        _require(report["inputs"][role]["sha256"] == expected, "R25", f"{role} digest")


def check_step_shapes(timing: Document, report: Document) -> None:
    """R22, R25, R30: each traced step's shape is what its requests say, it lasts what the
    timing profile gives that shape, and the report echoes the profile's calibration.

    The duration is computed by the reference's models (``servesim.contract.timing_profile``):
    the harness ships with the reference, and this check then holds any implementation to R22,
    R41, R42.
    """
    from servesim.contract.migrations import trace_entry_shape
    from servesim.contract.model import StepShape
    from servesim.contract.timing_profile import build_timing_profile

    _require(
        report["inputs"]["timing_profile"]["calibration"] == timing.get("calibration"),
        "R25",
        "inputs.timing_profile.calibration is not the profile's calibration",
    )
    model = build_timing_profile(timing).model
    requests = {request["id"]: request for request in report["requests"]}
    for step in report["trace"] or []:
        where = f"step of worker {step['worker']} at {step['start_us']}"
        expected = trace_entry_shape(step, requests)
        _require(
            step["shape"] == expected, "R22", f"{where}: shape {step['shape']}, expected {expected}"
        )
        duration = model.step_duration_us(StepShape(**expected))
        _require(
            step["end_us"] - step["start_us"] == duration,
            "R22",
            f"{where}: lasts {step['end_us'] - step['start_us']} us, the profile gives {duration}",
        )


def check_arrival_shift(before: Document, after: Document, shift: int) -> None:
    """R6, R7 (metamorphic): shifting every arrival by ``shift`` shifts every time by it and
    changes nothing else."""
    times = ("arrival_us", "terminal_us", "first_scheduled_us", "first_token_us", "completion_us")
    same = ("queue_us", "ttft_us", "e2e_us", "mean_itl_us", "worker", "outcome")
    for old, new in zip(before["requests"], after["requests"], strict=True):
        for field in times:
            moved = None if old[field] is None else old[field] + shift
            _require(new[field] == moved, "R6", f"{old['id']}: {field} did not shift")
        shifted = [t + shift for t in old["token_times_us"]]
        _require(new["token_times_us"] == shifted, "R6", f"{old['id']}: token times")
        for field in same:
            _require(new[field] == old[field], "R6", f"{old['id']}: {field} changed")
    for old_step, new_step in zip(before["trace"] or [], after["trace"] or [], strict=True):
        _require(new_step["start_us"] == old_step["start_us"] + shift, "R6", "step start")
    for field in ("makespan_us", "queue_us", "ttft_us", "itl_us", "e2e_us", "steps"):
        _require(after["summary"][field] == before["summary"][field], "R6", f"summary {field}")
    _require(after["workers"] == before["workers"], "R6", "workers changed")


def check_report(scenario: Document, workload: Document, report: Document) -> None:
    """Every single-run invariant; the report must have been written with ``--trace``."""
    _require(report["trace"] is not None, "R30", "--trace was given but trace is null")
    checks: list[Callable[[], None]] = [
        lambda: check_terminal_states(scenario, workload, report),
        lambda: check_step_budgets(scenario, report),
        lambda: check_token_times(report),
        lambda: check_trace_consistency(report),
        lambda: check_counts(report),
        lambda: check_kv_absent(scenario, report),
        lambda: check_kv_capacity(scenario, report),
        lambda: check_kv_reuse(scenario, workload, report),
        lambda: check_kv_preemptions(scenario, report),
        lambda: check_kv_summary(scenario, report),
        lambda: check_kv_blocks(scenario, workload, report),
        lambda: check_routing(scenario, workload, report),
        lambda: check_sessions(scenario, workload, report),
    ]
    for check in checks:
        check()
