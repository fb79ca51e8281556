"""R9, R10, R16 to R21, R25, R26, R28, R29: invariants over generated inputs (hypothesis).

Each property is checked against the report alone, as a conformance suite would, so that the
same checks can later run against any implementation.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import servesim
from tests.strategies import input_triples, scenarios, timing_profiles, workloads

Documents = tuple[dict[str, Any], dict[str, Any], dict[str, Any]]


def encode(document: dict[str, Any]) -> bytes:
    return json.dumps(document).encode()


def run(documents: Documents, *, trace: bool = True) -> bytes:
    scenario, workload, timing = documents
    return servesim.replay_documents(
        servesim.load_document(encode(scenario), "scenario.json", "scenario"),
        servesim.load_document(encode(workload), "workload.json", "workload"),
        servesim.load_document(encode(timing), "timing-profile.json", "timing_profile"),
        trace=trace,
    )


def expected_reason(request: dict[str, Any], scheduler: dict[str, Any]) -> str | None:
    """R10 restated independently of the reference's code."""
    if request["prompt_tokens"] == 0:
        return "empty_prompt"
    if request["max_output_tokens"] == 0:
        return "zero_max_output_tokens"
    if request["prompt_tokens"] + request["max_output_tokens"] > scheduler["max_model_len"]:
        return "context_exceeds_max_model_len"
    whole = scheduler["prefill"]["mode"] == "whole"
    if whole and request["prompt_tokens"] > scheduler["max_batched_tokens"]:
        return "prefill_exceeds_step_budget"
    return None


@given(input_triples())
def test_r9_r10_r11_every_request_reaches_exactly_one_terminal_state(documents: Documents) -> None:
    scenario, workload, _ = documents
    report = json.loads(run(documents))
    entries = report["requests"]
    assert [entry["id"] for entry in entries] == [r["id"] for r in workload["requests"]]
    for request, entry in zip(workload["requests"], entries, strict=True):
        reason = expected_reason(request, scenario["scheduler"])
        assert entry["reject_reason"] == reason
        if reason is None:
            assert entry["outcome"] == "completed"
            assert entry["output_tokens"] == request["max_output_tokens"]
            assert len(entry["token_times_us"]) == request["max_output_tokens"]
            assert entry["completion_us"] == entry["terminal_us"] == entry["token_times_us"][-1]
            assert 0 <= entry["worker"] < scenario["fleet"]["workers"]
        else:
            assert entry["outcome"] == "rejected"
            assert entry["worker"] is None
            assert entry["terminal_us"] == entry["arrival_us"]
            assert entry["token_times_us"] == []
    summary = report["summary"]
    assert summary["completed"] + summary["rejected"] == summary["requests"] == len(entries)
    assert sum(summary["rejected_by_reason"].values()) == summary["rejected"]


@given(input_triples())
def test_r17_r19_r21_no_step_exceeds_its_budgets(documents: Documents) -> None:
    scenario, _, _ = documents
    limits = scenario["scheduler"]
    report = json.loads(run(documents))
    for step in report["trace"]:
        ids = step["decode_requests"] + [item["id"] for item in step["prefill"]]
        assert len(ids) == len(set(ids)), "a request appears once per step"
        assert len(ids) <= limits["max_num_seqs"]
        assert step["batched_tokens"] == len(step["decode_requests"]) + step["prefill_tokens"]
        assert 1 <= step["batched_tokens"] <= limits["max_batched_tokens"]
        if limits["prefill"]["mode"] == "chunked":
            assert all(
                i["tokens"] <= limits["prefill"]["max_chunk_tokens"] for i in step["prefill"]
            )
    for entry in report["requests"]:
        if entry["outcome"] == "completed":
            assert entry["prompt_tokens"] + entry["output_tokens"] <= limits["max_model_len"]


@given(input_triples())
def test_r20_r21_token_times_increase_and_follow_arrival(documents: Documents) -> None:
    report = json.loads(run(documents))
    for entry in report["requests"]:
        times = entry["token_times_us"]
        assert times == sorted(set(times)), "strictly increasing"
        if times:
            assert entry["arrival_us"] <= entry["first_scheduled_us"] < times[0]
            assert entry["queue_us"] == entry["first_scheduled_us"] - entry["arrival_us"]
            assert entry["ttft_us"] == times[0] - entry["arrival_us"]
            assert entry["e2e_us"] == times[-1] - entry["arrival_us"]


@given(input_triples())
def test_r16_r20_trace_is_consistent_with_requests(documents: Documents) -> None:
    """Steps of one worker never overlap, start only when there is work, and account for
    every token of every request."""
    report = json.loads(run(documents))
    by_worker: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for step in report["trace"]:
        by_worker[step["worker"]].append(step)
    assert report["trace"] == sorted(report["trace"], key=lambda s: (s["start_us"], s["worker"]))
    entries = {entry["id"]: entry for entry in report["requests"]}
    prefilled: dict[str, int] = defaultdict(int)
    decoded: dict[str, int] = defaultdict(int)
    for worker, steps in by_worker.items():
        arrivals = {e["arrival_us"] for e in report["requests"] if e["worker"] == worker}
        previous_end = None
        for step in steps:
            assert step["end_us"] > step["start_us"]
            if previous_end is not None:
                assert step["start_us"] >= previous_end
            # R16: a worker never sits idle with work, so a step starts when the previous one
            # ended or when a request arrived.
            assert step["start_us"] == previous_end or step["start_us"] in arrivals
            previous_end = step["end_us"]
            for item in step["prefill"]:
                prefilled[item["id"]] += item["tokens"]
                assert entries[item["id"]]["worker"] == worker
            for request_id in step["decode_requests"]:
                decoded[request_id] += 1
    for entry in entries.values():
        if entry["outcome"] == "completed":
            assert prefilled[entry["id"]] == entry["prompt_tokens"]
            assert decoded[entry["id"]] == entry["output_tokens"] - 1
        else:
            assert entry["id"] not in prefilled
            assert entry["id"] not in decoded


@given(input_triples())
def test_r28_r29_counts_add_up(documents: Documents) -> None:
    report = json.loads(run(documents))
    summary, workers, entries = report["summary"], report["workers"], report["requests"]
    completed = [e for e in entries if e["outcome"] == "completed"]
    assert summary["output_tokens"] == sum(e["output_tokens"] for e in completed)
    assert summary["output_tokens"] == sum(w["output_tokens"] for w in workers)
    assert summary["prompt_tokens"] == sum(w["prefill_tokens"] for w in workers)
    assert summary["steps"] == sum(w["steps"] for w in workers) == len(report["trace"])
    assert summary["completed"] == sum(w["completed"] for w in workers)
    assert sum(w["routed"] for w in workers) == summary["completed"]
    for worker in workers:
        assert worker["output_tokens"] == worker["decode_tokens"] + worker["completed"]
        steps = [s for s in report["trace"] if s["worker"] == worker["worker"]]
        assert worker["busy_us"] == sum(s["end_us"] - s["start_us"] for s in steps)
        assert worker["busy_us"] <= summary["makespan_us"]
    assert summary["itl_us"]["count"] == sum(max(0, e["output_tokens"] - 1) for e in completed)


@given(input_triples())
def test_r25_digests_are_sha256_of_input_bytes(documents: Documents) -> None:
    report = json.loads(run(documents, trace=False))
    for role, document in zip(("scenario", "workload", "timing_profile"), documents, strict=True):
        assert report["inputs"][role]["sha256"] == hashlib.sha256(encode(document)).hexdigest()


@given(input_triples())
def test_r21_rerun_gives_identical_bytes(documents: Documents) -> None:
    assert run(documents) == run(documents)


@given(scenarios(), workloads(), timing_profiles(), st.integers(1, 10**9))
def test_shifting_every_arrival_shifts_every_time(
    scenario: dict[str, Any], workload: dict[str, Any], timing: dict[str, Any], shift: int
) -> None:
    """Metamorphic (R6, R7): the simulation has no absolute clock, only differences."""
    shifted = json.loads(json.dumps(workload))
    for request in shifted["requests"]:
        request["arrival_us"] += shift
    before = json.loads(run((scenario, workload, timing)))
    after = json.loads(run((scenario, shifted, timing)))
    time_fields = (
        "arrival_us",
        "terminal_us",
        "first_scheduled_us",
        "first_token_us",
        "completion_us",
    )
    for old, new in zip(before["requests"], after["requests"], strict=True):
        for field in time_fields:
            assert new[field] == (None if old[field] is None else old[field] + shift)
        assert new["token_times_us"] == [t + shift for t in old["token_times_us"]]
        for field in ("queue_us", "ttft_us", "e2e_us", "mean_itl_us", "worker"):
            assert new[field] == old[field]
    for old_step, new_step in zip(before["trace"], after["trace"], strict=True):
        assert new_step["start_us"] == old_step["start_us"] + shift
    unchanged = ("makespan_us", "queue_us", "ttft_us", "itl_us", "e2e_us", "steps")
    for field in unchanged:
        assert after["summary"][field] == before["summary"][field]
    assert after["workers"] == before["workers"]


@given(input_triples())
def test_r23_report_is_canonical_and_schema_valid(documents: Documents) -> None:
    data = run(documents)
    assert data.endswith(b"}\n")
    assert data.count(b"\n") == 1
    value = json.loads(data)
    assert servesim.load_document(data, "report.json", "report").value == value
