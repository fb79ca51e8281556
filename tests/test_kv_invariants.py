"""The KV-cache invariants (SPEC.md R45 to R53) on reports derived by hand, and each can fail.

Three small runs, derived from SPEC.md section 11 step by step (every step lasts 1 us: the
profile's overhead is 1000 ns and tokens cost nothing):

- ``overlap``: r0 and r1 share a prompt and are admitted together; neither hits (a block is
  registered only when its step ends, R47); r1's duplicate blocks stay unregistered.
- ``hit``: r1 arrives while r0 decodes, hits r0's first block (R48) but waits for a free block
  until r0 completes (R50: the head waits), then reuses 2 tokens from the cached block.
- ``preempt``: caching off; in their first decode step r1 cannot get its block and, r0 having
  been given a token, is its own victim (R49); it is readmitted and recomputes 3 tokens.

A correct report passes every check; each mutation breaks one rule and must be caught.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from servesim_conformance import invariants
from servesim_conformance.invariants import InvariantViolation

Document = dict[str, Any]
REASONS = (
    "empty_prompt",
    "zero_max_output_tokens",
    "context_exceeds_max_model_len",
    "prefill_exceeds_step_budget",
    "exceeds_kv_cache",
)


def scenario(blocks: int, block_tokens: int, *, caching: bool) -> Document:
    return {
        "document": "scenario",
        "schema_version": "1.1",
        "fleet": {"workers": 1},
        "routing": {"policy": "round_robin"},
        "scheduler": {
            "max_num_seqs": 2,
            "max_batched_tokens": 8,
            "max_model_len": 64,
            "prefill": {"mode": "whole"},
        },
        "kv_cache": {"blocks": blocks, "block_tokens": block_tokens, "prefix_caching": caching},
    }


def request(rid: str, arrival: int, prompt: int, output: int, hashes: list[int]) -> Document:
    document: Document = {
        "id": rid,
        "arrival_us": arrival,
        "prompt_tokens": prompt,
        "max_output_tokens": output,
    }
    if hashes:
        document["prefix_hashes"] = hashes
    return document


def workload(*requests: Document) -> Document:
    return {
        "document": "workload",
        "schema_version": "1.1",
        "prefix_hash_block_tokens": 2,
        "requests": list(requests),
    }


def entry(
    rid: str, arrival: int, prompt: int, times: list[int], scheduled: int, **cache: int
) -> Document:
    """A completed request's report entry (R26, R52)."""
    return {
        "id": rid,
        "prompt_tokens": prompt,
        "arrival_us": arrival,
        "worker": 0,
        "outcome": "completed",
        "reject_reason": None,
        "output_tokens": len(times),
        "terminal_us": times[-1],
        "first_scheduled_us": scheduled,
        "first_token_us": times[0],
        "completion_us": times[-1],
        "queue_us": scheduled - arrival,
        "ttft_us": times[0] - arrival,
        "e2e_us": times[-1] - arrival,
        "token_times_us": times,
        "reused_prompt_tokens": cache.get("reused", 0),
        "preemptions": cache.get("preemptions", 0),
    }


def step(
    start: int,
    blocks: int,
    *,
    decode: tuple[str, ...] = (),
    prefill: tuple[tuple[str, int], ...] = (),
    preempted: tuple[str, ...] = (),
) -> Document:
    """A traced step of worker 0 lasting 1 us (R30, R52)."""
    tokens = sum(count for _, count in prefill)
    return {
        "worker": 0,
        "start_us": start,
        "end_us": start + 1,
        "decode_requests": list(decode),
        "prefill": [{"id": rid, "tokens": count} for rid, count in prefill],
        "prefill_tokens": tokens,
        "batched_tokens": len(decode) + tokens,
        "kv_blocks_in_use": blocks,
        "preempted": list(preempted),
    }


def report(entries: list[Document], trace: list[Document], **cache: int) -> Document:
    """The report of one worker's run; the worker and summary members follow from the rest."""
    prefill = sum(s["prefill_tokens"] for s in trace)
    decode = sum(len(s["decode_requests"]) for s in trace)
    output = sum(e["output_tokens"] for e in entries)
    prompt = sum(e["prompt_tokens"] for e in entries)
    reused = sum(e["reused_prompt_tokens"] for e in entries)
    preemptions = sum(e["preemptions"] for e in entries)
    end = max(e["terminal_us"] for e in entries)
    counters = {
        "peak_blocks_in_use": max(s["kv_blocks_in_use"] for s in trace),
        "reused_tokens": cache.get("reused_tokens", reused),
        "preemptions": preemptions,
        "evictions": cache.get("evictions", 0),
    }
    return {
        "document": "report",
        "schema_version": "3.0",
        "inputs": {"workload": {"sha256": "a" * 64}, "scenario": {"sha256": "b" * 64}},
        "summary": {
            "requests": len(entries),
            "completed": len(entries),
            "rejected": 0,
            "rejected_by_reason": dict.fromkeys(REASONS, 0),
            "prompt_tokens": prompt,
            "output_tokens": output,
            "steps": len(trace),
            "first_arrival_us": 0,
            "makespan_us": end,
            "itl_us": {"count": output - len(entries)},
            "kv_cache": {
                "reused_prompt_tokens": reused,
                "prefix_reuse_ratio": reused / prompt,
                "preemptions": preemptions,
                "evictions": counters["evictions"],
            },
        },
        "workers": [
            {
                "worker": 0,
                "routed": len(entries),
                "completed": len(entries),
                "steps": len(trace),
                "busy_us": len(trace),
                "prefill_tokens": prefill,
                "decode_tokens": decode,
                "output_tokens": output,
                "kv_cache": counters,
            }
        ],
        "requests": entries,
        "trace": trace,
    }


Run = tuple[Document, Document, Document]


def overlap() -> Run:
    inputs = workload(request("r0", 0, 4, 2, [1, 2]), request("r1", 0, 4, 1, [1, 2]))
    entries = [entry("r0", 0, 4, [1, 2], 0), entry("r1", 0, 4, [1], 0)]
    trace = [step(0, 4, prefill=(("r0", 4), ("r1", 4))), step(1, 3, decode=("r0",))]
    return scenario(4, 2, caching=True), inputs, report(entries, trace)


def hit() -> Run:
    inputs = workload(request("r0", 0, 4, 2, [1, 2]), request("r1", 1, 4, 1, [1, 2]))
    entries = [entry("r0", 0, 4, [1, 2], 0), entry("r1", 1, 4, [3], 2, reused=2)]
    trace = [
        step(0, 2, prefill=(("r0", 4),)),
        step(1, 3, decode=("r0",)),
        step(2, 2, prefill=(("r1", 2),)),
    ]
    return scenario(3, 2, caching=True), inputs, report(entries, trace)


def preempt() -> Run:
    inputs = workload(request("r0", 0, 2, 3, [7]), request("r1", 0, 2, 3, [7]))
    entries = [entry("r0", 0, 2, [1, 2, 3], 0), entry("r1", 0, 2, [1, 4, 5], 0, preemptions=1)]
    trace = [
        step(0, 2, prefill=(("r0", 2), ("r1", 2))),
        step(1, 2, decode=("r0",), preempted=("r1",)),
        step(2, 2, decode=("r0",)),
        step(3, 2, prefill=(("r1", 3),)),
        step(4, 2, decode=("r1",)),
    ]
    return scenario(3, 2, caching=False), inputs, report(entries, trace)


RUNS = {"overlap": overlap, "hit": hit, "preempt": preempt}


def check_all(run: Run) -> None:
    """Every single-run check that reads what these hand-made reports hold."""
    scenario_, workload_, report_ = run
    invariants.check_terminal_states(scenario_, workload_, report_)
    invariants.check_step_budgets(scenario_, report_)
    invariants.check_token_times(report_)
    invariants.check_trace_consistency(report_)
    invariants.check_counts(report_)
    invariants.check_kv_absent(scenario_, report_)
    invariants.check_kv_capacity(scenario_, report_)
    invariants.check_kv_reuse(scenario_, workload_, report_)
    invariants.check_kv_preemptions(scenario_, report_)
    invariants.check_kv_summary(scenario_, report_)
    invariants.check_kv_blocks(scenario_, workload_, report_)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_hand_derived_reports_keep_every_invariant(name: str) -> None:
    check_all(RUNS[name]())


Mutation = Callable[[Document, Document, Document], None]


def _set_blocks(index: int, blocks: int) -> Mutation:
    def mutate(scenario_: Document, workload_: Document, report_: Document) -> None:
        report_["trace"][index]["kv_blocks_in_use"] = blocks

    return mutate


def _over_capacity(scenario_: Document, workload_: Document, report_: Document) -> None:
    report_["trace"][0]["kv_blocks_in_use"] = 5


def _wrong_peak(scenario_: Document, workload_: Document, report_: Document) -> None:
    report_["workers"][0]["kv_cache"]["peak_blocks_in_use"] = 3


def _reuse(tokens: int) -> Mutation:
    def mutate(scenario_: Document, workload_: Document, report_: Document) -> None:
        report_["requests"][1]["reused_prompt_tokens"] = tokens

    return mutate


def _caching_off(scenario_: Document, workload_: Document, report_: Document) -> None:
    scenario_["kv_cache"]["prefix_caching"] = False


def _worker_reuse(tokens: int) -> Mutation:
    def mutate(scenario_: Document, workload_: Document, report_: Document) -> None:
        report_["workers"][0]["kv_cache"]["reused_tokens"] = tokens

    return mutate


def _evicted_with_nothing_cached(
    scenario_: Document, workload_: Document, report_: Document
) -> None:
    report_["workers"][0]["kv_cache"]["evictions"] = 1
    report_["summary"]["kv_cache"]["evictions"] = 1


def _uncounted_preemption(scenario_: Document, workload_: Document, report_: Document) -> None:
    report_["trace"][1]["preempted"] = []


def _preempted_and_decoded(scenario_: Document, workload_: Document, report_: Document) -> None:
    report_["trace"][1]["preempted"] = ["r0"]
    report_["requests"][0]["preemptions"] = 1
    report_["requests"][1]["preemptions"] = 0


def _preempted_then_rejected(scenario_: Document, workload_: Document, report_: Document) -> None:
    victim = report_["requests"][1]
    victim.update(outcome="rejected", reject_reason="exceeds_kv_cache", token_times_us=[])


def _worker_preemptions(scenario_: Document, workload_: Document, report_: Document) -> None:
    report_["workers"][0]["kv_cache"]["preemptions"] = 2
    report_["summary"]["kv_cache"]["preemptions"] = 2


def _ratio(scenario_: Document, workload_: Document, report_: Document) -> None:
    report_["summary"]["kv_cache"]["prefix_reuse_ratio"] = 0.5


def _summary_reuse(scenario_: Document, workload_: Document, report_: Document) -> None:
    report_["summary"]["kv_cache"]["reused_prompt_tokens"] = 4


def _summary_evictions(scenario_: Document, workload_: Document, report_: Document) -> None:
    report_["summary"]["kv_cache"]["evictions"] = 3


def _not_running_victim(scenario_: Document, workload_: Document, report_: Document) -> None:
    report_["trace"][4]["preempted"] = ["r0"]  # completed at 3
    report_["requests"][0]["preemptions"] = 1


def _recompute_skipped(scenario_: Document, workload_: Document, report_: Document) -> None:
    report_["trace"][3]["prefill"] = [{"id": "r1", "tokens": 2}]
    report_["trace"][3]["prefill_tokens"] = report_["trace"][3]["batched_tokens"] = 2
    report_["trace"][3]["kv_blocks_in_use"] = 1
    report_["workers"][0]["prefill_tokens"] -= 1


def _decoded_without_compute(scenario_: Document, workload_: Document, report_: Document) -> None:
    report_["trace"][3]["decode_requests"] = ["r1"]
    report_["trace"][3]["prefill"] = []
    report_["trace"][3]["prefill_tokens"] = 0
    report_["trace"][3]["batched_tokens"] = 1
    report_["workers"][0]["prefill_tokens"] -= 3
    report_["workers"][0]["decode_tokens"] += 1


def _reuse_beyond_allotments(scenario_: Document, workload_: Document, report_: Document) -> None:
    report_["requests"][1]["reused_prompt_tokens"] = 0
    report_["trace"][2]["kv_blocks_in_use"] = 1


def _compute_done_without_token(
    scenario_: Document, workload_: Document, report_: Document
) -> None:
    report_["requests"][1]["token_times_us"] = [1, 5, 6]


def _output_tokens(scenario_: Document, workload_: Document, report_: Document) -> None:
    report_["workers"][0]["output_tokens"] += 2


def _not_rejected(scenario_: Document, workload_: Document, report_: Document) -> None:
    scenario_["kv_cache"]["blocks"] = 1


#: The check that must catch each kind of mutation, given a run.
CHECKS: dict[str, Callable[[Run], None]] = {
    "capacity": lambda run: invariants.check_kv_capacity(run[0], run[2]),
    "reuse": lambda run: invariants.check_kv_reuse(*run),
    "preemptions": lambda run: invariants.check_kv_preemptions(run[0], run[2]),
    "summary": lambda run: invariants.check_kv_summary(run[0], run[2]),
    "blocks": lambda run: invariants.check_kv_blocks(*run),
    "counts": lambda run: invariants.check_counts(run[2]),
    "terminal": lambda run: invariants.check_terminal_states(*run),
}

MUTATIONS: dict[str, tuple[str, Mutation, str, str]] = {
    "over capacity": ("overlap", _over_capacity, "capacity", "R50"),
    "peak is not the largest step": ("overlap", _wrong_peak, "capacity", "R52"),
    "fewer blocks than cached tokens": ("preempt", _set_blocks(4, 1), "blocks", "R46"),
    "more blocks than cached tokens": ("overlap", _set_blocks(1, 4), "blocks", "R46"),
    "fewer blocks than the decoding request holds": ("hit", _set_blocks(1, 2), "blocks", "R46"),
    "reuse not a whole number of blocks": ("hit", _reuse(1), "reuse", "R48"),
    "the whole prompt reused": ("hit", _reuse(4), "reuse", "R48"),
    "reuse with caching off": ("hit", _caching_off, "reuse", "R47"),
    "worker reuse below its requests'": ("hit", _worker_reuse(0), "reuse", "R52"),
    "worker reuse beyond, no readmission": ("hit", _worker_reuse(4), "reuse", "R52"),
    "eviction with nothing cached": ("preempt", _evicted_with_nothing_cached, "reuse", "R46"),
    "preemption missing from the trace": ("preempt", _uncounted_preemption, "preemptions", "R52"),
    "victim given a token": ("preempt", _preempted_and_decoded, "preemptions", "R49"),
    "preempted, then rejected": ("preempt", _preempted_then_rejected, "preemptions", "R9"),
    "worker preemptions": ("preempt", _worker_preemptions, "preemptions", "R52"),
    "reuse ratio": ("hit", _ratio, "summary", "R52"),
    "summary reuse": ("hit", _summary_reuse, "summary", "R52"),
    "summary evictions": ("hit", _summary_evictions, "summary", "R52"),
    "victim not running": ("preempt", _not_running_victim, "blocks", "R49"),
    "recompute short of its produced tokens": ("preempt", _recompute_skipped, "blocks", "R48"),
    "compute done without its token": ("preempt", _compute_done_without_token, "blocks", "R51"),
    "decode before the recompute": ("preempt", _decoded_without_compute, "blocks", "R50"),
    "reuse beyond what the allotments left": ("hit", _reuse_beyond_allotments, "blocks", "R48"),
    "worker output beyond its recomputes": ("preempt", _output_tokens, "counts", "R29"),
    "too large for the cache yet completed": ("overlap", _not_rejected, "terminal", "R10"),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_kv_invariant_catches_its_violation(name: str) -> None:
    """The named check catches the mutation, and so does the whole set."""
    run_name, mutate, check, rule = MUTATIONS[name]
    scenario_, workload_, report_ = copy.deepcopy(RUNS[run_name]())
    mutate(scenario_, workload_, report_)
    with pytest.raises(InvariantViolation, match=rule):
        CHECKS[check]((scenario_, workload_, report_))
    with pytest.raises(InvariantViolation):
        check_all((scenario_, workload_, report_))


def without_cache(run: Run) -> Run:
    """The run's scenario without a cache and its report as R53 says it is then."""
    scenario_, workload_, report_ = copy.deepcopy(run)
    del scenario_["kv_cache"]
    for entry_ in report_["requests"]:
        entry_.update(reused_prompt_tokens=0, preemptions=0)
    for worker in report_["workers"]:
        worker["kv_cache"] = None
    report_["summary"]["kv_cache"] = None
    for step_ in report_["trace"]:
        step_.update(kv_blocks_in_use=None, preempted=[])
    return scenario_, workload_, report_


def test_r53_a_report_without_a_cache_holds_the_no_cache_values() -> None:
    scenario_, _, report_ = without_cache(overlap())
    invariants.check_kv_absent(scenario_, report_)
    report_["trace"][0]["kv_blocks_in_use"] = 4
    with pytest.raises(InvariantViolation, match="R52"):
        invariants.check_kv_absent(scenario_, report_)
    scenario_, _, report_ = without_cache(overlap())
    report_["workers"][0]["kv_cache"] = {"peak_blocks_in_use": 0}
    with pytest.raises(InvariantViolation, match="R52"):
        invariants.check_kv_absent(scenario_, report_)


def test_r10_exceeds_kv_cache_is_the_last_reason() -> None:
    limits = scenario(2, 2, caching=True)["scheduler"]
    cache = {"blocks": 2, "block_tokens": 2, "prefix_caching": True}
    fits, over = request("a", 0, 3, 1, []), request("b", 0, 3, 2, [])
    assert invariants.expected_reject_reason(fits, limits, cache) is None
    assert invariants.expected_reject_reason(over, limits, cache) == "exceeds_kv_cache"
    assert invariants.expected_reject_reason(over, limits) is None
    empty = request("c", 0, 0, 9, [])
    assert invariants.expected_reject_reason(empty, limits, cache) == "empty_prompt"


def test_r47_removing_hashes_may_change_only_the_workload_digest() -> None:
    _, workload_, with_hashes = overlap()
    stripped = invariants.without_prefix_hashes(workload_)
    assert "prefix_hash_block_tokens" not in stripped
    assert all("prefix_hashes" not in r for r in stripped["requests"])
    assert "prefix_hashes" in workload_["requests"][0]  # the original is left alone
    without = copy.deepcopy(with_hashes)
    without["inputs"]["workload"]["sha256"] = "c" * 64
    invariants.check_hashes_change_nothing(with_hashes, without)
    without["requests"][1]["reused_prompt_tokens"] = 2
    with pytest.raises(InvariantViolation, match="R47"):
        invariants.check_hashes_change_nothing(with_hashes, without)
    without = copy.deepcopy(with_hashes)
    without["inputs"]["scenario"]["sha256"] = "c" * 64
    with pytest.raises(InvariantViolation, match="R47"):
        invariants.check_hashes_change_nothing(with_hashes, without)
