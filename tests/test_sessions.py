"""Hand-derived tests of sessions, the closed loop, the stop time and goodput (SPEC.md section 13,
R59 to R64).

Every expected value is worked out from SPEC.md in the docstring or comment above it. The timing
profile is ``timing_doc()``'s round numbers (1 ms per step, 10 us per prefill token, 100 us per
decoding request), so by R22

    duration_us = 1000 + 10 * P + 100 * D

The scheduler is ``scenario_doc``'s: ``max_num_seqs`` 4, ``max_batched_tokens`` 64, whole
prefill, ``max_model_len`` 1024 (unless a test says otherwise). A request ``(P, O)`` alone on an
idle worker from time t: prefill step [t, t + 1000 + 10P], first token at its end, then one
decode step of 1100 us per further token. Each replay goes through ``servesim.replay``, so the
documents are checked (R1 to R4) as a user's would be.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import servesim
from servesim.contract.canonical import canonical_bytes
from servesim.contract.errors import UnrepresentableTime
from servesim.contract.migrations import CHAIN
from tests.helpers import as_report_5_0, scenario_doc, timing_doc, write_inputs

MAX_TIME_US = 2**53 - 1


def scenario_1_3(workers: int = 1, **members: Any) -> dict[str, Any]:
    """``scenario_doc(workers=...)`` as a scenario 1.3 with section 13's ``members``."""
    document = scenario_doc(workers=workers)
    document["schema_version"] = "1.3"
    document.update(members)
    return document


def request(
    id: str,
    arrival_us: int,
    prompt_tokens: int,
    max_output_tokens: int,
    session: str | None = None,
    think_time_us: int | None = None,
) -> dict[str, Any]:
    """One workload request; ``session`` and ``think_time_us`` only when given (R59)."""
    item: dict[str, Any] = {
        "id": id,
        "arrival_us": arrival_us,
        "prompt_tokens": prompt_tokens,
        "max_output_tokens": max_output_tokens,
    }
    if session is not None:
        item["session"] = session
    if think_time_us is not None:
        item["think_time_us"] = think_time_us
    return item


def workload_1_2(*requests: dict[str, Any]) -> dict[str, Any]:
    """A workload 1.2 whose ``sessions`` are those its requests name, in order of first use."""
    sessions = list(dict.fromkeys(item["session"] for item in requests if "session" in item))
    document: dict[str, Any] = {
        "document": "workload",
        "schema_version": "1.2",
        "requests": list(requests),
    }
    if sessions:
        document["sessions"] = [{"id": session} for session in sessions]
    return document


def replay(
    folder: Path, scenario: dict[str, Any], workload: dict[str, Any], *, trace: bool = False
) -> dict[str, Any]:
    """The report of replaying the two documents with the round-number profile."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = write_inputs(folder, scenario, workload, timing_doc())
    return json.loads(servesim.replay(*paths.values(), trace=trace))


def by_id(report: dict[str, Any], member: str) -> dict[str, Any]:
    """``{request id: its member}`` over the report's requests."""
    return {entry["id"]: entry[member] for entry in report["requests"]}


# --- R59 ----------------------------------------------------------------------------------------


def test_r59_a_turn_arrives_after_its_predecessor_plus_think_time(tmp_path: Path) -> None:
    """One worker, one session s of six turns, in workload order:

    - a (t 0, P 10, O 2): turn 0 arrives at its arrival_us 0. Prefill [0, 1100] (1000 + 10 * 10),
      first token 1100; decode (1000 + 100 * 1) [1100, 2200]; a completes at 2200.
    - b (arrival_us 0, think 500, P 10, O 2): released at 2200, arrives at
      max(0, 2200 + 500) = 2700 (a think time after the previous answer). [2700, 3800] first
      token 3800, [3800, 4900] completes 4900.
    - c (arrival_us 4000, no think time, P 10, O 1): released at 4900, arrives at
      max(4000, 4900 + 0) = 4900 (its recorded time, but never before the previous answer).
      [4900, 6000] completes 6000.
    - d (arrival_us 9000, think 100, P 10, O 1): max(9000, 6000 + 100) = 9000 (the later of
      the two is its recorded time). [9000, 10100].
    - e (arrival_us 9000, think 50, P 0): max(9000, 10100 + 50) = 10150; rejected at arrival
      (empty_prompt, R10), terminal 10150.
    - f (arrival_us 9000, think 20, P 10, O 1): released by the rejection at 10150, arrives at
      max(9000, 10150 + 20) = 10170. [10170, 11270].

    Report: each request's session is "s"; arrival_us is when it arrived, not its recorded time.
    """
    workload = workload_1_2(
        request("a", 0, 10, 2, "s"),
        request("b", 0, 10, 2, "s", 500),
        request("c", 4000, 10, 1, "s"),
        request("d", 9000, 10, 1, "s", 100),
        request("e", 9000, 0, 1, "s", 50),
        request("f", 9000, 10, 1, "s", 20),
    )
    report = replay(tmp_path, scenario_1_3(), workload)
    arrivals = {"a": 0, "b": 2700, "c": 4900, "d": 9000, "e": 10150, "f": 10170}
    assert by_id(report, "arrival_us") == arrivals
    assert by_id(report, "terminal_us") == {
        "a": 2200,
        "b": 4900,
        "c": 6000,
        "d": 10100,
        "e": 10150,
        "f": 11270,
    }
    assert by_id(report, "session") == dict.fromkeys("abcdef", "s")
    assert by_id(report, "reject_reason")["e"] == "empty_prompt"
    assert by_id(report, "ttft_us")["b"] == 1100, "latency counts from the actual arrival"
    assert report["summary"]["makespan_us"] == 11270

    # R6: a turn that would arrive after 2**53 - 1 us cannot be simulated (exit 2)...
    far = workload_1_2(request("a", 0, 10, 2, "s"), request("b", 0, 10, 1, "s", MAX_TIME_US))
    with pytest.raises(UnrepresentableTime):
        replay(tmp_path / "far", scenario_1_3(), far)
    # ...unless a stop time comes first (R62): then b never arrives and is cut off at D 5000.
    stopped = replay(tmp_path / "stopped", scenario_1_3(stop_at_us=5000), far)
    assert by_id(stopped, "arrival_us") == {"a": 0, "b": None}
    assert by_id(stopped, "outcome") == {"a": "completed", "b": "cut_off"}


# --- R60 ----------------------------------------------------------------------------------------


def test_r60_arrivals_of_one_instant_go_in_workload_order(tmp_path: Path) -> None:
    """Two workers, round robin (R13: the k-th routed request joins worker k mod 2). Workload:

    0. a (session s, t 0, P 10, O 1): routed k 0 -> w0; [0, 1100], completes at 1100.
    1. b (session s turn 1, think 0): released at 1100 by a's completion, arrives at 1100.
    2. y (t 1100, P 10, O 1), known from the start.
    3. z (t 1100, P 10, O 1), known from the start.

    At 1100 the completion comes first (R7), then the arrivals in workload position order,
    whenever each was created: b (k 1 -> w1), y (k 2 -> w0), z (k 3 -> w1). Creation order
    (y known before b was released, then b, then z) would give y w1, b w0, z w1; known arrivals
    before released ones, y w1, z w0, b w1. Then the scheduling events of 1100: w0 forms
    [1100, 2200] with y (P 10); w1 admits b and z together, P 20: [1100, 2300].
    """
    workload = workload_1_2(
        request("a", 0, 10, 1, "s"),
        request("b", 0, 10, 1, "s", 0),
        request("y", 1100, 10, 1),
        request("z", 1100, 10, 1),
    )
    report = replay(tmp_path, scenario_1_3(workers=2), workload)
    assert by_id(report, "worker") == {"a": 0, "b": 1, "y": 0, "z": 1}
    assert by_id(report, "arrival_us") == {"a": 0, "b": 1100, "y": 1100, "z": 1100}
    assert by_id(report, "first_scheduled_us") == {"a": 0, "b": 1100, "y": 1100, "z": 1100}
    assert by_id(report, "terminal_us") == {"a": 1100, "b": 2300, "y": 2200, "z": 2300}


# --- R61 ----------------------------------------------------------------------------------------


def test_r61_closed_loop_keeps_at_most_n_units_in_flight(tmp_path: Path) -> None:
    """One worker, closed loop N = 2. Units in position order: U0 session s (a, then b),
    U1 x, U2 z, U3 y; recorded times are not read except for T0 = the smallest arrival_us, 50.

    - 50: U0 and U1 released: a and x arrive (positions 0, 1); one step admits both, P 20:
      [50, 1250]; both complete at 1250 (O 1).
    - 1250: a's end releases b at 1250 + think 300 = 1550 (its arrival_us 100 is not read).
      x's end ends U1: z is released at 1250, arrives and is rejected (empty_prompt), which
      ends U2 at once: y is released at 1250 too, before any step of 1250 is formed.
      y: [1250, 2350] (P 10).
    - 1550: b arrives; the worker is busy. 2350: y completes (U3 ends, no unit left); b is
      admitted [2350, 3450], completes at 3450 (U0 ends).

    Units released and not ended: [50, 1250) U0, U1; at 1250 U0, U3; from 2350 U0 alone: never
    more than 2. first_arrival_us 50, makespan 3450 - 50 = 3400.
    """
    workload = workload_1_2(
        request("a", 100, 10, 1, "s"),
        request("x", 50, 10, 1),
        request("b", 100, 10, 1, "s", 300),
        request("z", 999_999, 0, 1),
        request("y", 60, 10, 1),
    )
    report = replay(tmp_path, scenario_1_3(closed_loop={"max_in_flight": 2}), workload)
    arrivals = {"a": 50, "x": 50, "b": 1550, "z": 1250, "y": 1250}
    terminals = {"a": 1250, "x": 1250, "b": 3450, "z": 1250, "y": 2350}
    assert by_id(report, "arrival_us") == arrivals
    assert by_id(report, "terminal_us") == terminals
    assert by_id(report, "queue_us")["b"] == 800, "b waited from 1550 to 2350"
    assert by_id(report, "outcome")["z"] == "rejected"
    assert report["summary"]["first_arrival_us"] == 50
    assert report["summary"]["makespan_us"] == 3400
    # the invariant itself, from the report: a unit is released at its first request's
    # arrival and ends at its last request's terminal time
    units = [("a", "b"), ("x",), ("z",), ("y",)]
    spans = [(arrivals[unit[0]], terminals[unit[-1]]) for unit in units]
    instants = sorted({time for span in spans for time in span})
    assert max(sum(start <= t < end for start, end in spans) for t in instants) == 2

    # N = 1: one unit at a time. a [50, 1150] (P 10); b at 1150 + 300 = 1450, [1450, 2550];
    # x released at 2550 [2550, 3650]; z at 3650 rejected; y at 3650, [3650, 4750].
    one = replay(tmp_path / "one", scenario_1_3(closed_loop={"max_in_flight": 1}), workload)
    assert by_id(one, "arrival_us") == {"a": 50, "x": 2550, "b": 1450, "z": 3650, "y": 3650}
    assert by_id(one, "terminal_us")["y"] == 4750


# --- R62 ----------------------------------------------------------------------------------------


def test_r62_a_stop_time_cuts_off_what_has_not_ended(tmp_path: Path) -> None:
    """One worker with max_num_seqs 1. Workload:

    - a (t 0, P 10, O 5): prefill [0, 1100] (token 1100), then decode steps of 1100 us:
      [1100, 2200] (token 2200), [2200, 3300] (token 3300), [3300, 4400], [4400, 5500].
    - b (t 500, P 10, O 2): waits behind a (max_num_seqs 1).
    - e (session s, t 100, P 0): rejected at 100; it releases f at 100 + 5000 = 5100.
    - f (session s turn 1, think 5000): would arrive at 5100.
    - c (t 3000, P 10, O 1).

    D = 3000: completions at or before 3000 happen (1100, 2200); the step [2200, 3300] is in
    flight at D and is cut; c arrives at D, so not at all; f's 5100 is after D. So: a is cut off
    with its 2 tokens (first_scheduled 0, queue 0, ttft 1100, no completion, e2e or mean ITL);
    b is cut off while waiting (worker 0, queue and ttft null); c and f never arrived (arrival,
    worker, queue, ttft null); e is rejected. Each terminal_us of a cut-off request is 3000.
    Worker 0: 3 steps (the cut one counts), busy 1100 + 1100 + (3000 - 2200) = 3000,
    prefill_tokens 10 and decode_tokens 1 (the cut decode is not counted), output_tokens 2.
    The trace shows the cut step with the end it would have had, 3300.
    Summary: completed 0, rejected 1, cut_off 4, makespan 3000 - 0, throughput 0.

    D = 3300: the completion at 3300 happens (a's third token), nothing starts at 3300: a is
    cut off with 3 tokens; worker: 3 steps, busy 3300, decode_tokens 2, output_tokens 3.
    """
    scenario = scenario_1_3()
    scenario["scheduler"]["max_num_seqs"] = 1
    workload = workload_1_2(
        request("a", 0, 10, 5),
        request("b", 500, 10, 2),
        request("e", 100, 0, 1, "s"),
        request("f", 100, 10, 1, "s", 5000),
        request("c", 3000, 10, 1),
    )
    report = replay(tmp_path, {**scenario, "stop_at_us": 3000}, workload, trace=True)
    entries = {entry["id"]: entry for entry in report["requests"]}
    assert by_id(report, "outcome") == {
        "a": "cut_off",
        "b": "cut_off",
        "e": "rejected",
        "f": "cut_off",
        "c": "cut_off",
    }
    assert by_id(report, "terminal_us") == {"a": 3000, "b": 3000, "e": 100, "f": 3000, "c": 3000}
    a = entries["a"]
    assert (a["token_times_us"], a["output_tokens"]) == ([1100, 2200], 2)
    assert (a["first_scheduled_us"], a["queue_us"], a["ttft_us"], a["worker"]) == (0, 0, 1100, 0)
    assert (a["completion_us"], a["e2e_us"], a["mean_itl_us"]) == (None, None, None)
    b = entries["b"]
    assert (b["arrival_us"], b["worker"], b["first_scheduled_us"], b["queue_us"]) == (
        500,
        0,
        None,
        None,
    )
    for never in ("c", "f"):
        entry = entries[never]
        assert [entry[name] for name in ("arrival_us", "worker", "queue_us", "ttft_us")] == [
            None
        ] * 4
    worker = report["workers"][0]
    assert [worker[name] for name in ("steps", "busy_us", "routed", "completed")] == [3, 3000, 2, 0]
    assert [worker[name] for name in ("prefill_tokens", "decode_tokens", "output_tokens")] == [
        10,
        1,
        2,
    ]
    assert [(step["start_us"], step["end_us"]) for step in report["trace"]] == [
        (0, 1100),
        (1100, 2200),
        (2200, 3300),
    ]
    summary = report["summary"]
    assert [summary[name] for name in ("completed", "rejected", "cut_off", "steps")] == [0, 1, 4, 3]
    assert (summary["first_arrival_us"], summary["makespan_us"]) == (0, 3000)
    assert summary["request_throughput_per_s"] == 0
    # without the trace the decode run [1100, 5500] is cut at D the same way
    untraced = replay(tmp_path / "untraced", {**scenario, "stop_at_us": 3000}, workload)
    assert untraced["requests"] == report["requests"]
    assert untraced["workers"] == report["workers"]

    at_end = replay(tmp_path / "at-end", {**scenario, "stop_at_us": 3300}, workload)
    a = next(entry for entry in at_end["requests"] if entry["id"] == "a")
    assert (a["token_times_us"], a["outcome"], a["terminal_us"]) == (
        [1100, 2200, 3300],
        "cut_off",
        3300,
    )
    worker = at_end["workers"][0]
    assert [worker[name] for name in ("steps", "busy_us", "decode_tokens", "output_tokens")] == [
        3,
        3300,
        2,
        3,
    ]

    # A deadline after the last terminal time changes nothing but the scenario's digest.
    # Without one: a completes at 5500; b [5500, 6600], [6600, 7700]; c at 3000 waits, [7700,
    # 8800]; f arrives at 5100, [8800, 9900]. Last terminal 9900.
    free = replay(tmp_path / "free", scenario, workload)
    late = replay(tmp_path / "late", {**scenario, "stop_at_us": 9901}, workload)
    assert free["summary"]["makespan_us"] == 9900
    del free["inputs"]["scenario"], late["inputs"]["scenario"]
    assert late == free


# --- R63 ----------------------------------------------------------------------------------------


def test_r63_slo_bounds_are_inclusive(tmp_path: Path) -> None:
    """One worker. Requests, each alone unless said:

    - a (t 0, P 10, O 3): [0, 1100], [1100, 2200], [2200, 3300]: ttft 1100, e2e 3300,
      completion - first token = 2200 over 2 gaps.
    - b (t 10000, P 20, O 1): [10000, 11200]: ttft 1200, e2e 1200, one token (no gap).
    - c (t 20000, P 10, O 2): [20000, 21100], [21100, 22200]: ttft 1100, e2e 2200, 1100 / 1.
    - d (t 30000, P 0): rejected.
    - e (t 40000, P 10, O 3): [40000, 41100], [41100, 42200]; f (t 41500, P 10, O 1) joins the
      next step: decode e + prefill f, 1000 + 100 + 100 = 1200: [42200, 43400]. e: ttft 1100,
      e2e 3400, 2300 over 2 gaps (mean 1150); f: ttft 43400 - 41500 = 1900.

    slo {ttft 1100, e2e 3300}: a meets both exactly (inclusive), c meets, b (ttft 1200),
    e (e2e 3400) and f (ttft 1900) do not, d never does. Goodput: 2 requests (a, c), 5 tokens,
    over makespan 43400: 2e6 / 43400 and 5e6 / 43400 per second.
    slo {mean_itl 1150}: e's 2300 <= 1150 * 2 holds exactly; b and f (one token) meet it;
    a (2200 <= 2300), c (1100 <= 1150): 5 requests, 3 + 1 + 2 + 3 + 1 = 10 tokens.
    slo {mean_itl 1149}: e's 2300 > 2298: 4 requests, 7 tokens.
    Without slo neither slo_met nor goodput is in the report.
    """
    workload = workload_1_2(
        request("a", 0, 10, 3),
        request("b", 10000, 20, 1),
        request("c", 20000, 10, 2),
        request("d", 30000, 0, 1),
        request("e", 40000, 10, 3),
        request("f", 41500, 10, 1),
    )
    report = replay(tmp_path, scenario_1_3(slo={"ttft_us": 1100, "e2e_us": 3300}), workload)
    assert by_id(report, "ttft_us") == {
        "a": 1100,
        "b": 1200,
        "c": 1100,
        "d": None,
        "e": 1100,
        "f": 1900,
    }
    assert by_id(report, "e2e_us")["e"] == 3400
    met = {"a": True, "b": False, "c": True, "d": False, "e": False, "f": False}
    assert by_id(report, "slo_met") == met
    assert report["summary"]["goodput"] == {
        "requests": 2,
        "output_tokens": 5,
        "request_throughput_per_s": 2_000_000 / 43400,
        "output_token_throughput_per_s": 5_000_000 / 43400,
    }

    exact = replay(tmp_path / "1150", scenario_1_3(slo={"mean_itl_us": 1150}), workload)
    assert by_id(exact, "mean_itl_us")["e"] == 1150
    assert by_id(exact, "slo_met") == {**dict.fromkeys("abcef", True), "d": False}
    assert exact["summary"]["goodput"]["requests"] == 5
    assert exact["summary"]["goodput"]["output_tokens"] == 10

    below = replay(tmp_path / "1149", scenario_1_3(slo={"mean_itl_us": 1149}), workload)
    assert by_id(below, "slo_met") == {**dict.fromkeys("abcf", True), "d": False, "e": False}
    assert below["summary"]["goodput"]["requests"] == 4
    assert below["summary"]["goodput"]["output_tokens"] == 7

    none = replay(tmp_path / "none", scenario_1_3(), workload)
    assert not any("slo_met" in entry for entry in none["requests"])
    assert "goodput" not in none["summary"]


def test_r63_tpot_mean_is_the_exact_mean_rounded_once(tmp_path: Path) -> None:
    """Three workers, round robin. At t 0: r1 (P 10, O 3) -> w0, r2 (P 10, O 4) -> w1,
    r3 (P 10, O 3) -> w2. At t 1500, during each worker's first decode step [1100, 2200]:
    h1 (P 1, O 1) -> w0, h2 (P 1, O 1) -> w1, h3 (P 3, O 1) -> w2, each admitted at 2200 with
    that worker's next decode step.

    - w0: r1 tokens 1100, 2200, then decode + P 1: 1000 + 10 + 100 = 1110 -> 3310.
      Sample (3310 - 1100) / 2 = 1105.
    - w1: r2 tokens 1100, 2200, 3310 (the same shared step), then 4410. Sample 3310 / 3.
    - w2: r3 tokens 1100, 2200, then decode + P 3: 1130 -> 3330. Sample 2230 / 2 = 1115.
    - the helpers have one token each: no sample.

    Sorted exactly: 3310/3 (1103.33...), 1105, 1115: min R24(3310/3), p50 (rank 2) 1105, p90 to
    max (rank 3) 1115. Mean: (3315 + 3310 + 3345) / 3 / 3 = 9970 / 9 rounded once. Summing
    the rounded samples instead gives a different binary64 value (checked below, so the test
    tells the two apart).
    """
    workload = workload_1_2(
        request("r1", 0, 10, 3),
        request("r2", 0, 10, 4),
        request("r3", 0, 10, 3),
        request("h1", 1500, 1, 1),
        request("h2", 1500, 1, 1),
        request("h3", 1500, 3, 1),
    )
    report = replay(tmp_path, scenario_1_3(workers=3), workload)
    assert by_id(report, "token_times_us") == {
        "r1": [1100, 2200, 3310],
        "r2": [1100, 2200, 3310, 4410],
        "r3": [1100, 2200, 3330],
        "h1": [3310],
        "h2": [3310],
        "h3": [3330],
    }
    assert report["summary"]["tpot_us"] == {
        "count": 3,
        "min": 3310 / 3,
        "max": 1115,
        "mean": 9970 / 9,
        "p50": 1105,
        "p90": 1115,
        "p95": 1115,
        "p99": 1115,
    }
    samples = [Fraction(2210, 2), Fraction(3310, 3), Fraction(2230, 2)]
    assert sum(samples) / 3 == Fraction(9970, 9)
    assert sum(float(sample) for sample in samples) / 3 != 9970 / 9, "rounding twice differs"


# --- R64 ----------------------------------------------------------------------------------------


def as_report_4_0(report: dict[str, Any]) -> dict[str, Any]:
    """What a report 4.0 writer writes for a replay without section 13's members: ``report``
    without R64's members (none of which may then say anything), from its 5.0 form (R86)."""
    old = as_report_5_0(json.loads(json.dumps(report)))
    old["schema_version"] = "4.0"
    for entry in old["requests"]:
        assert entry.pop("session") is None
        assert "slo_met" not in entry
        assert entry["outcome"] != "cut_off"
    assert old["summary"].pop("cut_off") == 0
    assert "goodput" not in old["summary"]
    del old["summary"]["tpot_us"]
    return old


@pytest.mark.parametrize(
    ("scenario_version", "workload_version"), [("1.0", "1.0"), ("1.2", "1.1"), ("1.3", "1.2")]
)
def test_r64_without_new_members_the_report_is_the_migrated_4_0_report(
    tmp_path: Path, scenario_version: str, workload_version: str
) -> None:
    """A replay of inputs without sessions, closed loop, stop time or objectives, at any input
    version, writes what a report 4.0 writer writes plus R64's members exactly as R37's 4.0 ->
    5.0 migration adds them: session null, cut_off 0 and tpot_us. Two workers, round robin:

    - A (t 0, P 10, O 3) -> w0: [0, 1100]; C (t 500, P 10, O 2) -> w0 joins the next step,
      decode A + prefill C: 1000 + 100 + 100 = 1200, [1100, 2300]; then decode A and C,
      1000 + 200 = 1200, [2300, 3500]. A: tokens 1100, 2300, 3500; C: 2300, 3500.
    - B (t 0, P 10, O 2) -> w1: [0, 1100]; D (t 700, P 5, O 1) -> w1 joins: 1000 + 50 + 100 =
      1150, [1100, 2250]. B: 1100, 2250; D: 2250.
    - Z (t 600, P 0): rejected, routed nowhere (so C takes k 2, D k 3).

    tpot_us samples: A 2400 / 2 = 1200, B 1150 / 1 = 1150, C 1200 / 1 = 1200 (D has one
    token): count 3, min 1150, p50 (rank 2) and up 1200, mean 3550 / 3.
    """
    workload = workload_1_2(
        request("A", 0, 10, 3),
        request("B", 0, 10, 2),
        request("C", 500, 10, 2),
        request("Z", 600, 0, 2),
        request("D", 700, 5, 1),
    )
    workload["schema_version"] = workload_version
    scenario = scenario_doc(workers=2)
    scenario["schema_version"] = scenario_version
    report = replay(tmp_path, scenario, workload, trace=True)
    assert report["schema_version"] == "10.0"
    assert by_id(report, "token_times_us") == {
        "A": [1100, 2300, 3500],
        "B": [1100, 2250],
        "C": [2300, 3500],
        "Z": [],
        "D": [2250],
    }
    assert report["summary"]["tpot_us"] == {
        "count": 3,
        "min": 1150,
        "max": 1200,
        "mean": 3550 / 3,
        "p50": 1200,
        "p90": 1200,
        "p95": 1200,
        "p99": 1200,
    }
    migrated = CHAIN.migrate(as_report_4_0(report)).document
    assert canonical_bytes(migrated) == canonical_bytes(report)
