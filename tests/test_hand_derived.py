"""Hand-derived scenario tests: every expected value is worked out from SPEC.md, not the code.

Unless a test says otherwise the timing profile is the round-number one in ``PROFILE``:
step_overhead_ns 1,000,000, prefill_token_ns 10,000, decode_token_ns 100,000, so by R22

    duration_us = ceil((1,000,000 + 10,000 * P + 100,000 * D) / 1000) = 1000 + 10 * P + 100 * D

(no rounding happens with this profile; ``test_r22_duration_rounds_up_to_whole_microsecond``
uses another profile where it does). P = prefill tokens in the step, D = decoding requests.
Notation below: "step k [s, e]" is the k-th step of the worker, starting at s and ending at e
(both in µs); "budget" is R17's token budget as the step is formed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import servesim
from tests.helpers import scenario_doc, timing_doc, workload_doc, write_inputs

PROFILE = {"step_overhead_ns": 1_000_000, "prefill_token_ns": 10_000, "decode_token_ns": 100_000}

Request = tuple[str, int, int, int]  # (id, arrival_us, prompt_tokens, max_output_tokens)


def scheduler(
    max_num_seqs: int,
    max_batched_tokens: int,
    *,
    chunk: int | None = None,
    max_model_len: int = 1000,
) -> dict[str, Any]:
    """A scheduler object: whole-prompt mode, or chunked mode when ``chunk`` is given."""
    prefill: dict[str, Any] = {"mode": "whole"}
    if chunk is not None:
        prefill = {"mode": "chunked", "max_chunk_tokens": chunk}
    return {
        "max_num_seqs": max_num_seqs,
        "max_batched_tokens": max_batched_tokens,
        "max_model_len": max_model_len,
        "prefill": prefill,
    }


def run(
    tmp_path: Path,
    sched: dict[str, Any],
    requests: list[Request],
    *,
    workers: int = 1,
    routing: dict[str, Any] | None = None,
    model: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Write the three documents, replay them with the trace on, and return the parsed report."""
    scenario = scenario_doc(workers=workers)
    scenario["scheduler"] = sched
    scenario["routing"] = routing or {"policy": "round_robin"}
    paths = write_inputs(
        tmp_path, scenario, workload_doc(*requests), timing_doc(**(model or PROFILE))
    )
    report: dict[str, Any] = json.loads(servesim.replay(*paths.values(), trace=True))
    return report


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in report["requests"]}


def step_shapes(report: dict[str, Any]) -> list[tuple[int, int, int]]:
    """(worker, start_us, end_us) of every trace step, in trace order."""
    return [(s["worker"], s["start_us"], s["end_us"]) for s in report["trace"]]


# --- 1. max_chunk_tokens experiment -------------------------------------------------------------

# One worker, max_num_seqs 4, max_batched_tokens 8, chunked. A, B: prompt 2, 2 output tokens,
# arrive at 0. C: prompt 100, 2 output tokens, arrives at 500. D: prompt 1, 2 output tokens,
# arrives at 600. C and D arrive while step 1 is in flight (the worker is not idle, R16, so they
# only join the queue).
#
# Common step 1 [0, 1040]: arrivals A, B at 0 (priority 1) create one scheduling event at 0.
#   budget 8; admit A min(2, cap, 8) = 2 -> 6; admit B 2 -> 4; queue empty. P=4, D=0:
#   1000 + 40 = 1040. At 1040 A and B finish their prompt: first token of each at 1040 (R20).
#
# cap 6:
#   step 2 [1040, 2300]: decode A, B (budget 8-2 = 6); admit C min(100, 6, 6) = 6 -> budget 0,
#     admission stops (budget not positive), D waits. P=6, D=2: 1000+60+200 = 1260.
#     At 2300 A, B produce token 2 and complete. C has 6/100.
#   step 3 [2300, 3370]: no decoders; R18: C min(94, 6, 8) = 6 -> budget 2; R19: admit D
#     min(1, 6, 2) = 1 -> D first_scheduled 2300. P=7, D=0: 1070. At 3370 D's prompt is done:
#     D token 1 at 3370. C has 12/100.
#   step 4 [3370, 4530]: decode D (budget 7); C min(88, 6, 7) = 6. P=6, D=1: 1160.
#     At 4530 D token 2, D completes. C has 18/100, 82 left.
#   steps 5..17: C alone, 6 tokens each (13 * 6 = 78, leaving 4), 1060 each:
#     4530 + 13 * 1060 = 18310.
#   step 18 [18310, 19350]: C's last 4 tokens, 1040; C token 1 at 19350.
#   step 19 [19350, 20450]: decode C, 1100; C token 2 at 20450, completes. 19 steps.
#   D: queue 2300-600 = 1700, ttft 3370-600 = 2770.
#
# cap 2:
#   step 2 [1040, 2270]: decode A, B (budget 6); admit C min(100, 2, 6) = 2 -> budget 4;
#     admit D min(1, 2, 4) = 1 -> budget 3, running 4 = max_num_seqs. D first_scheduled 1040.
#     P=3, D=2: 1000+30+200 = 1230. At 2270 A, B token 2, complete; D token 1; C has 2/100.
#   step 3 [2270, 3390]: running [C, D]; decode D (budget 7); C min(98, 2, 7) = 2.
#     P=2, D=1: 1120. At 3390 D token 2, completes. C has 4/100, 96 left.
#   steps 4..51: C alone, 2 tokens each (48 steps), 1020 each: 3390 + 48 * 1020 = 52350;
#     C token 1 at 52350.
#   step 52 [52350, 53450]: decode C, 1100; C completes at 53450. 52 steps.
#   D: queue 1040-600 = 440, ttft 2270-600 = 1670.
CHUNK_CASES = {
    6: {
        "d_admit_step": 2,  # 0-based trace index: step 3
        "d_admit_entry": {
            "worker": 0,
            "start_us": 2300,
            "end_us": 3370,
            "decode_requests": [],
            "prefill": [{"id": "C", "tokens": 6}, {"id": "D", "tokens": 1}],
            "prefill_tokens": 7,
            "batched_tokens": 7,
            # R22: no decoders, so C is 0
            "shape": {"decode_requests": 0, "context_tokens": 0, "prefill_tokens": 7},
            "kv_blocks_in_use": None,  # R52, R53: no cache
            "preempted": [],
            "rank": 0,  # R85: one-rank worker
            "duration_us": 1070,  # R85: the step's own duration, its pass's
            "kind": "prefill",  # R95: prefill tokens, no decode request
            "retracted": [],  # R95: the vLLM style
            "new_token_ratio": None,
            "cut_us": None,  # R123: no failure cut it, no stop time
        },
        "step2_prefill": [{"id": "C", "tokens": 6}],
        "ab_tokens": [1040, 2300],
        "d": {
            "first_scheduled_us": 2300,
            "queue_us": 1700,
            "ttft_us": 2770,
            "token_times_us": [3370, 4530],
            "completion_us": 4530,
        },
        "c_first_token_us": 19350,
        "c_completion_us": 20450,
        "steps": 19,
    },
    2: {
        "d_admit_step": 1,  # 0-based trace index: step 2
        "d_admit_entry": {
            "worker": 0,
            "start_us": 1040,
            "end_us": 2270,
            "decode_requests": ["A", "B"],
            "prefill": [{"id": "C", "tokens": 2}, {"id": "D", "tokens": 1}],
            "prefill_tokens": 3,
            "batched_tokens": 5,
            # R22: A and B each have prompt 2 + 1 token produced at 1040: C = 3 + 3
            "shape": {"decode_requests": 2, "context_tokens": 6, "prefill_tokens": 3},
            "kv_blocks_in_use": None,  # R52, R53: no cache
            "preempted": [],
            "rank": 0,  # R85: one-rank worker
            "duration_us": 1230,  # R85: the step's own duration, its pass's
            "kind": "mixed",  # R95: decode requests and prefill tokens
            "retracted": [],  # R95: the vLLM style
            "new_token_ratio": None,
            "cut_us": None,  # R123: no failure cut it, no stop time
        },
        "step2_prefill": [{"id": "C", "tokens": 2}, {"id": "D", "tokens": 1}],
        "ab_tokens": [1040, 2270],
        "d": {
            "first_scheduled_us": 1040,
            "queue_us": 440,
            "ttft_us": 1670,
            "token_times_us": [2270, 3390],
            "completion_us": 3390,
        },
        "c_first_token_us": 52350,
        "c_completion_us": 53450,
        "steps": 52,
    },
}


@pytest.mark.parametrize("cap", [6, 2])
def test_r18_r19_max_chunk_tokens_decides_whether_short_request_shares_the_step(
    tmp_path: Path, cap: int
) -> None:
    """Cap 6: C's chunk uses the whole remaining budget and D waits a step; cap 2: D joins.

    Derivation: see the comment block above ``CHUNK_CASES``.
    """
    expected = CHUNK_CASES[cap]
    report = run(
        tmp_path,
        scheduler(4, 8, chunk=cap),
        [("A", 0, 2, 2), ("B", 0, 2, 2), ("C", 500, 100, 2), ("D", 600, 1, 2)],
    )
    reqs = by_id(report)
    trace = report["trace"]

    # R17/R21: decode tokens count against max_batched_tokens, so no step exceeds 8 tokens.
    assert max(s["batched_tokens"] for s in trace) <= 8
    assert trace[0]["prefill"] == [{"id": "A", "tokens": 2}, {"id": "B", "tokens": 2}]
    assert (trace[0]["start_us"], trace[0]["end_us"]) == (0, 1040)
    assert trace[1]["decode_requests"] == ["A", "B"]
    assert trace[1]["prefill"] == expected["step2_prefill"]
    admitted_d = [i for i, s in enumerate(trace) if any(p["id"] == "D" for p in s["prefill"])]
    assert admitted_d == [expected["d_admit_step"]]
    assert trace[expected["d_admit_step"]] == expected["d_admit_entry"]

    for rid in ("A", "B"):
        assert reqs[rid]["token_times_us"] == expected["ab_tokens"]
    for field, value in expected["d"].items():
        assert reqs["D"][field] == value, field
    assert reqs["C"]["first_scheduled_us"] == 1040
    assert reqs["C"]["queue_us"] == 540
    assert reqs["C"]["first_token_us"] == expected["c_first_token_us"]
    assert reqs["C"]["completion_us"] == expected["c_completion_us"]
    assert report["summary"]["steps"] == expected["steps"]
    assert len(trace) == expected["steps"]
    assert report["summary"]["completed"] == 4


# --- 2. same-instant ordering -------------------------------------------------------------------


def test_r7_arrival_at_step_end_joins_the_next_step(tmp_path: Path) -> None:
    """One worker, whole mode, max_num_seqs 4, max_batched_tokens 16.

    A: arrival 0, prompt 4, 2 outputs. B: arrival 1040, prompt 3, 1 output.
    step 1 [0, 1040]: admit A (4). P=4: 1040. A token 1 at 1040.
    At 1040 (R7): step completion first (A stays running, worker idle with work -> a
      scheduling event at 1040); then B's arrival (joins the queue; a scheduling event is
      already pending); then the scheduling event forms step 2 with B in the queue.
    step 2 [1040, 2170]: decode A (budget 15); admit B (3 <= 15). P=3, D=1: 1000+30+100 = 1130.
      At 2170 A token 2 (completes), B token 1 (completes).
    B: first_scheduled 1040, queue 0, ttft 1130. 2 steps.
    """
    report = run(tmp_path, scheduler(4, 16), [("A", 0, 4, 2), ("B", 1040, 3, 1)])
    reqs = by_id(report)
    assert step_shapes(report) == [(0, 0, 1040), (0, 1040, 2170)]
    assert report["trace"][1]["decode_requests"] == ["A"]
    assert report["trace"][1]["prefill"] == [{"id": "B", "tokens": 3}]
    assert reqs["B"]["first_scheduled_us"] == 1040
    assert reqs["B"]["queue_us"] == 0
    assert reqs["B"]["ttft_us"] == 1130
    assert reqs["B"]["token_times_us"] == [2170]
    assert reqs["A"]["token_times_us"] == [1040, 2170]
    assert report["summary"]["steps"] == 2


# --- 3. idle gap ---------------------------------------------------------------------------------


def test_r16_request_after_idle_gap_starts_step_at_its_arrival(tmp_path: Path) -> None:
    """One worker, whole mode, max_num_seqs 4, max_batched_tokens 16.

    A: arrival 0, prompt 4, 1 output. step 1 [0, 1040]; A completes at 1040; the worker is idle
      with no work, so no event is created.
    B: arrival 50000, prompt 5, 2 outputs. Its join makes the idle worker have work: scheduling
      at 50000. step 2 [50000, 51050] (P=5: 1050), B token 1 at 51050.
      step 3 [51050, 52150] (D=1: 1100), B token 2 at 52150.
    B: first_scheduled 50000, queue 0, ttft 1050, e2e 2150. busy = 1040 + 1050 + 1100 = 3190,
    makespan = 52150 - 0.
    """
    report = run(tmp_path, scheduler(4, 16), [("A", 0, 4, 1), ("B", 50_000, 5, 2)])
    b = by_id(report)["B"]
    assert step_shapes(report) == [(0, 0, 1040), (0, 50_000, 51_050), (0, 51_050, 52_150)]
    assert b["first_scheduled_us"] == 50_000
    assert b["queue_us"] == 0
    assert b["ttft_us"] == 1050
    assert b["token_times_us"] == [51_050, 52_150]
    assert b["e2e_us"] == 2150
    assert report["workers"][0]["busy_us"] == 3190
    assert report["summary"]["makespan_us"] == 52_150


# --- 4. whole-prefill head-of-line blocking ------------------------------------------------------


def test_r19_whole_prefill_head_of_line_blocks_smaller_request(tmp_path: Path) -> None:
    """One worker, whole mode, max_num_seqs 4, max_batched_tokens 8. All arrive at 0, in order
    A (prompt 6, 3 outputs), B (prompt 8, 1 output), C (prompt 1, 1 output).

    step 1 [0, 1060]: budget 8; admit A (6) -> 2; head B: 8 > 2, allotment 0, admission stops;
      C (1 <= 2 would fit) is not considered. P=6: 1060. A token 1 at 1060.
    step 2 [1060, 2160]: decode A -> budget 7; B: 8 > 7, stop. D=1: 1100. A token 2.
    step 3 [2160, 3260]: same shape. A token 3, completes (3 outputs).
    step 4 [3260, 4340]: budget 8; admit B (8) -> 0; loop stops (budget not positive).
      P=8: 1080. B token 1, completes.
    step 5 [4340, 5350]: admit C (1). P=1: 1010. C completes.
    C: first_scheduled 4340 = queue 4340, ttft 5350. B: first_scheduled 3260. 5 steps.
    """
    report = run(tmp_path, scheduler(4, 8), [("A", 0, 6, 3), ("B", 0, 8, 1), ("C", 0, 1, 1)])
    reqs = by_id(report)
    trace = report["trace"]
    # R17/R21: the decode token of A counts against the budget, so no step exceeds 8 tokens.
    assert max(s["batched_tokens"] for s in trace) <= 8
    assert step_shapes(report) == [
        (0, 0, 1060),
        (0, 1060, 2160),
        (0, 2160, 3260),
        (0, 3260, 4340),
        (0, 4340, 5350),
    ]
    assert trace[0]["prefill"] == [{"id": "A", "tokens": 6}]
    for step in trace[1:3]:
        assert step["decode_requests"] == ["A"]
        assert step["prefill"] == []
        assert step["batched_tokens"] == 1
    assert trace[3]["prefill"] == [{"id": "B", "tokens": 8}]
    assert trace[4]["prefill"] == [{"id": "C", "tokens": 1}]
    assert reqs["B"]["first_scheduled_us"] == 3260
    assert reqs["C"]["first_scheduled_us"] == 4340
    assert reqs["C"]["queue_us"] == 4340
    assert reqs["C"]["ttft_us"] == 5350
    assert reqs["A"]["token_times_us"] == [1060, 2160, 3260]
    assert report["summary"]["steps"] == 5


# --- 5. max_output_tokens == 1 -------------------------------------------------------------------


def test_r20_single_output_completes_in_last_prefill_step_with_null_itl(tmp_path: Path) -> None:
    """One worker, chunked (cap 4), max_num_seqs 2, max_batched_tokens 8.
    A: arrival 0, prompt 10, 1 output.

    step 1 [0, 1040]: A min(10, 4, 8) = 4. P=4: 1040.
    step 2 [1040, 2080]: A min(6, 4, 8) = 4. 1040.
    step 3 [2080, 3100]: A min(2, 4, 8) = 2. P=2: 1020. Prompt complete: token 1 at 3100, and
      with 1 output A is Completed at 3100 (Prefill -> Completed, no decode step).
    mean_itl_us: output_tokens - 1 = 0 -> null. itl_us statistics: no gaps, count 0, rest null.
    """
    report = run(tmp_path, scheduler(2, 8, chunk=4), [("A", 0, 10, 1)])
    a = by_id(report)["A"]
    assert step_shapes(report) == [(0, 0, 1040), (0, 1040, 2080), (0, 2080, 3100)]
    assert a["token_times_us"] == [3100]
    assert a["first_token_us"] == 3100
    assert a["completion_us"] == 3100
    assert a["terminal_us"] == 3100
    assert a["output_tokens"] == 1
    assert a["mean_itl_us"] is None
    assert report["summary"]["steps"] == 3
    assert report["workers"][0]["decode_tokens"] == 0
    assert report["summary"]["itl_us"] == {
        "count": 0,
        "min": None,
        "max": None,
        "mean": None,
        "p50": None,
        "p90": None,
        "p95": None,
        "p99": None,
    }


# --- 6. rejection --------------------------------------------------------------------------------


def test_r10_rejection_reasons_precedence_and_no_round_robin_turn(tmp_path: Path) -> None:
    """Three workers, round robin, whole mode, max_num_seqs 4, max_batched_tokens 8,
    max_model_len 100.

    r0 (0, prompt 8, out 1): 8 <= 8 and 9 <= 100: accepted, k=0 -> worker 0.
    e1 (10, 0, 0): rules 1 and 2 hold -> empty_prompt.
    e2 (20, 0, 200): rules 1 and 3 hold -> empty_prompt.
    z1 (30, 5, 0): zero_max_output_tokens.
    z2 (40, 200, 0): rules 2 and 3 (200 > 100) hold -> zero_max_output_tokens.
    c1 (50, 50, 2^64-1): 50 + 2^64-1 > 100 -> context_exceeds_max_model_len.
    c2 (60, 1, 2^32-1): 1 + 4294967295 > 100 -> context_exceeds_max_model_len.
    p1 (70, 9, 1): 10 <= 100, 9 > 8 -> prefill_exceeds_step_budget.
    p2 (80, 20, 90): rules 3 (110 > 100) and 4 (20 > 8) hold -> context_exceeds_max_model_len.
    r1 (100, 3, 97): 3 + 97 = 100, not > 100: accepted. Rejected requests take no turn, so r1
      is routed request k=1 -> worker 1 (had the 8 rejections counted, index 9 -> worker 0).
    Timing: worker 0 step [0, 1080] (P=8), r0 completes at 1080. Worker 1: step [100, 1130]
      (P=3: 1030), token 1 at 1130; then 96 decode steps of 1100 each: tokens at
      1130 + 1100 i, i = 0..96; completion 1130 + 96 * 1100 = 106730. Steps 1 + 97 = 98.
    Rejected: terminal_us = arrival, worker and times null, no tokens.
    makespan = 106730 - 0.
    """
    reqs_in = [
        ("r0", 0, 8, 1),
        ("e1", 10, 0, 0),
        ("e2", 20, 0, 200),
        ("z1", 30, 5, 0),
        ("z2", 40, 200, 0),
        ("c1", 50, 50, 18446744073709551615),
        ("c2", 60, 1, 4294967295),
        ("p1", 70, 9, 1),
        ("p2", 80, 20, 90),
        ("r1", 100, 3, 97),
    ]
    report = run(tmp_path, scheduler(4, 8, max_model_len=100), reqs_in, workers=3)
    reqs = by_id(report)
    reasons = {
        "e1": "empty_prompt",
        "e2": "empty_prompt",
        "z1": "zero_max_output_tokens",
        "z2": "zero_max_output_tokens",
        "c1": "context_exceeds_max_model_len",
        "c2": "context_exceeds_max_model_len",
        "p1": "prefill_exceeds_step_budget",
        "p2": "context_exceeds_max_model_len",
    }
    arrivals = {rid: arrival for rid, arrival, _, _ in reqs_in}
    for rid, reason in reasons.items():
        r = reqs[rid]
        assert r["outcome"] == "rejected", rid
        assert r["reject_reason"] == reason, rid
        assert r["worker"] is None
        assert r["terminal_us"] == arrivals[rid]
        assert r["first_scheduled_us"] is None
        assert r["ttft_us"] is None
        assert r["token_times_us"] == []
        assert r["output_tokens"] == 0
    assert reqs["r0"]["worker"] == 0
    assert reqs["r0"]["completion_us"] == 1080
    assert reqs["r1"]["worker"] == 1
    assert reqs["r1"]["outcome"] == "completed"
    assert reqs["r1"]["token_times_us"] == [1130 + 1100 * i for i in range(97)]
    assert reqs["r1"]["completion_us"] == 106_730
    summary = report["summary"]
    assert summary["rejected_by_reason"] == {
        "empty_prompt": 2,
        "zero_max_output_tokens": 2,
        "context_exceeds_max_model_len": 3,
        "prefill_exceeds_step_budget": 1,
        "exceeds_kv_cache": 0,  # R10 reason 5: no cache
        "no_routable_worker": 0,  # R114: a fleet that never changes always has a candidate
    }
    assert (summary["requests"], summary["completed"], summary["rejected"]) == (10, 2, 8)
    assert summary["steps"] == 98
    assert summary["makespan_us"] == 106_730
    assert [w["routed"] for w in report["workers"]] == [1, 1, 0]


# --- 7. routing ----------------------------------------------------------------------------------

ROUTING_REQUESTS: list[Request] = [
    ("q0", 0, 2, 1),
    ("x", 0, 0, 1),
    ("q1", 0, 2, 1),
    ("q2", 0, 2, 1),
]


@pytest.mark.parametrize(
    ("routing", "placement", "trace_order"),
    [
        # R13: routed requests k = 0, 1, 2 -> workers 0, 1, 2 (x is rejected, no turn).
        ({"policy": "round_robin"}, {"q0": 0, "q1": 1, "q2": 2}, ["q0", "q1", "q2"]),
        # R15: seed 42 draws 0x...6E95, 0x...F103, 0x...9F52; mod 4 = 5%4, 3%4, 0x52%4 = 1, 3, 2
        # (x takes no draw). Trace order is (start_us, worker): workers 1, 2, 3 = q0, q2, q1.
        ({"policy": "random", "seed": 42}, {"q0": 1, "q1": 3, "q2": 2}, ["q0", "q2", "q1"]),
    ],
    ids=["round_robin", "random_seed_42"],
)
def test_r13_r15_round_robin_and_random_place_requests_differently(
    tmp_path: Path,
    routing: dict[str, Any],
    placement: dict[str, int],
    trace_order: list[str],
) -> None:
    """Four workers, whole mode, max_num_seqs 4, max_batched_tokens 8. q0, x (empty prompt,
    rejected), q1, q2 all arrive at 0 (R8: list order). Each accepted request is alone on its
    worker: one step [0, 1020] (P=2), completing at 1020.
    """
    report = run(tmp_path, scheduler(4, 8), ROUTING_REQUESTS, workers=4, routing=routing)
    reqs = by_id(report)
    assert {rid: reqs[rid]["worker"] for rid in placement} == placement
    assert reqs["x"]["worker"] is None
    assert [s["prefill"][0]["id"] for s in report["trace"]] == trace_order
    assert [(s["start_us"], s["end_us"]) for s in report["trace"]] == [(0, 1020)] * 3
    routed = [0, 0, 0, 0]
    for worker in placement.values():
        routed[worker] += 1
    assert [w["routed"] for w in report["workers"]] == routed


# --- 8. chunked prefill over several steps -------------------------------------------------------


def test_r19_r20_chunked_prefill_first_scheduled_at_first_chunk_token_at_last(
    tmp_path: Path,
) -> None:
    """One worker, chunked (cap 8), max_num_seqs 2, max_batched_tokens 16.
    A: arrival 0, prompt 2, 1 output. B: arrival 300, prompt 20, 3 outputs (20 > cap and > 8,
    still accepted: rule 4 of R10 applies only in whole mode).

    step 1 [0, 1020]: A 2 tokens, completes at 1020. B arrives at 300, waits.
    step 2 [1020, 2100]: admit B min(20, 8, 16) = 8, first_scheduled 1020. P=8: 1080.
    step 3 [2100, 3180]: B (running, Prefill) min(12, 8, 16) = 8. 1080.
    step 4 [3180, 4220]: B min(4, 8, 16) = 4. P=4: 1040. Prompt done: token 1 at 4220.
    step 5 [4220, 5320], step 6 [5320, 6420]: decode B (1100 each): tokens at 5320, 6420.
    B: queue 1020-300 = 720, ttft 4220-300 = 3920, e2e 6420-300 = 6120,
       mean_itl (6420-4220)/2 = 1100.
    """
    report = run(tmp_path, scheduler(2, 16, chunk=8), [("A", 0, 2, 1), ("B", 300, 20, 3)])
    b = by_id(report)["B"]
    assert step_shapes(report) == [
        (0, 0, 1020),
        (0, 1020, 2100),
        (0, 2100, 3180),
        (0, 3180, 4220),
        (0, 4220, 5320),
        (0, 5320, 6420),
    ]
    assert [s["prefill"] for s in report["trace"][1:4]] == [
        [{"id": "B", "tokens": 8}],
        [{"id": "B", "tokens": 8}],
        [{"id": "B", "tokens": 4}],
    ]
    assert b["first_scheduled_us"] == 1020
    assert b["queue_us"] == 720
    assert b["first_token_us"] == 4220
    assert b["ttft_us"] == 3920
    assert b["token_times_us"] == [4220, 5320, 6420]
    assert b["e2e_us"] == 6120
    assert b["mean_itl_us"] == 1100


# --- 9. statistics -------------------------------------------------------------------------------


def test_r27_r28_statistics_nearest_rank_percentiles(tmp_path: Path) -> None:
    """One worker, whole mode, max_num_seqs 2, max_batched_tokens 64.
    a: arrival 0, prompt 10, 11 outputs. b: 500, prompt 20, 2 outputs. c: 600, prompt 5, 1.

    step 1 [0, 1100]: admit a (10). P=10: 1100. a token 1 at 1100.
    step 2 [1100, 2400]: decode a (budget 63); admit b (20), running 2 = max_num_seqs, c waits.
      P=20, D=1: 1000+200+100 = 1300. a token 2, b token 1 at 2400.
    step 3 [2400, 3600]: decode a, b. D=2: 1200. a token 3; b token 2, b completes.
    step 4 [3600, 4750]: decode a; admit c (5). P=5, D=1: 1150. a token 4; c token 1, completes.
    steps 5..11: decode a alone, 1100 each: a tokens 5..11 at 5850, 6950, 8050, 9150, 10250,
      11350, 12450; a completes at 12450. 11 steps.
    Per request (queue / ttft / e2e): a 0 / 1100 / 12450; b 600 / 1900 / 3100;
      c 3000 / 4150 / 4150.
    n = 3: rank p50 = ceil(1.5) = 2, p90 = ceil(2.7) = 3, p95, p99 = 3.
      queue [0, 600, 3000]: mean 3600/3 = 1200, p50 600, p90.. 3000.
      ttft [1100, 1900, 4150]: mean 7150/3, p50 1900, p90.. 4150.
      e2e [3100, 4150, 12450]: mean 19700/3, p50 4150, p90.. 12450.
    itl: a gaps 1300, 1200, 1150, 1100 x7; b gap 1200 -> n = 11, sorted
      [1100 x7, 1150, 1200, 1200, 1300]; sum 12550, mean 12550/11.
      ranks: p50 ceil(5.5) = 6 -> 1100; p90 ceil(9.9) = 10 -> 1200;
      p95 ceil(10.45) = 11 -> 1300; p99 ceil(10.89) = 11 -> 1300.
    a mean_itl = (12450-1100)/10 = 1135. makespan 12450; outputs 14;
    throughput 3e6/12450 and 14e6/12450. Worker: busy 12450 (no gap), utilization 1,
    peak_running 2, peak_waiting 2 (b then c join while step 1 runs), prefill 35,
    decode 1+2+1+7 = 11, output 11 + 3 = 14.
    """
    workload = [("a", 0, 10, 11), ("b", 500, 20, 2), ("c", 600, 5, 1)]
    report = run(tmp_path, scheduler(2, 64), workload)
    reqs = by_id(report)
    summary = report["summary"]

    def stats(n: int, lo: int, hi: int, total: int, p50: int, p90: int, p95: int) -> dict[str, Any]:
        return {
            "count": n,
            "min": lo,
            "max": hi,
            "mean": total / n,
            "p50": p50,
            "p90": p90,
            "p95": p95,
            "p99": p95,
        }

    assert reqs["a"]["token_times_us"] == [
        1100,
        2400,
        3600,
        4750,
        5850,
        6950,
        8050,
        9150,
        10250,
        11350,
        12450,
    ]
    assert reqs["a"]["mean_itl_us"] == 1135
    assert summary["steps"] == 11
    assert summary["queue_us"] == stats(3, 0, 3000, 3600, 600, 3000, 3000)
    assert summary["ttft_us"] == stats(3, 1100, 4150, 7150, 1900, 4150, 4150)
    assert summary["e2e_us"] == stats(3, 3100, 12450, 19700, 4150, 12450, 12450)
    assert summary["itl_us"] == stats(11, 1100, 1300, 12550, 1100, 1200, 1300)
    assert summary["makespan_us"] == 12450
    assert summary["output_tokens"] == 14
    assert summary["prompt_tokens"] == 35
    assert summary["request_throughput_per_s"] == 3_000_000 / 12450
    assert summary["output_token_throughput_per_s"] == 14_000_000 / 12450
    counters = {
        "routed": 3,
        "completed": 3,
        "steps": 11,
        "busy_us": 12450,
        "utilization": 1,
        "peak_running": 2,
        "peak_waiting": 2,
        "prefill_tokens": 35,
        "decode_tokens": 11,
        "output_tokens": 14,
        "kv_cache": None,  # R52, R53: no cache
        "handed_off": 0,  # R107: an aggregated fleet hands nothing off
        "activated": 0,
        "host": None,  # R140: no cache, so no host tier
    }
    assert report["workers"][0] == {
        "worker": 0,
        **counters,
        # R85: the one pool "default"; the one rank's members are the worker's own
        "pool": "default",
        "pool_worker": 0,
        "ranks": [{"rank": 0, **counters}],
        "style": "vllm",  # R95: no scheduler.style
        # R122, R123: a fleet that never changes: active from 0 through the window [0, 12450]
        "lifecycle": [{"state": "active", "at_us": 0}],
        "created_us": 0,
        "worker_us": 12450,
        "active_us": 12450,
        "starting_us": 0,
        "draining_us": 0,
        "failed_us": 0,
        "failures": 0,
        "migrated_out": 0,
        "failed_requests": 0,
        "lost_tokens": 0,
    }


# --- R22 rounding --------------------------------------------------------------------------------


def test_r22_duration_rounds_up_to_whole_microsecond(tmp_path: Path) -> None:
    """Profile: step_overhead_ns 1,000,001, prefill_token_ns 333, decode_token_ns 100,001.
    One worker, whole mode, max_num_seqs 1, max_batched_tokens 8. A: arrival 0, prompt 3, 2 out.

    step 1: 1,000,001 + 3 * 333 = 1,001,000 ns -> exactly 1001 µs (no rounding up): [0, 1001].
    step 2: 1,000,001 + 100,001 = 1,100,002 ns -> ceil(1100.002) = 1101 µs: [1001, 2102].
    """
    model = {"step_overhead_ns": 1_000_001, "prefill_token_ns": 333, "decode_token_ns": 100_001}
    report = run(tmp_path, scheduler(1, 8), [("A", 0, 3, 2)], model=model)
    assert step_shapes(report) == [(0, 0, 1001), (0, 1001, 2102)]
    assert by_id(report)["A"]["token_times_us"] == [1001, 2102]
    assert report["workers"][0]["busy_us"] == 2102
