"""The section 13 invariants (SPEC.md R59 to R64) on reports derived by hand; each can fail; and
the reference through them on generated inputs.

One worker, round robin, whole prefill, budget 64; a step lasts ``1 + P`` us (overhead 1000 ns,
1000 ns per prefill token, decoding free). Derived from SPEC.md section 13 before running:

**Open loop, stop time 10, objectives ``ttft_us`` 4 and ``mean_itl_us`` 1.** Session s0 has turns
a (arrival 0, prompt 2, output 2), b (arrival 0, think 3, prompt 3, output 2), d (arrival 20,
prompt 1, output 1); c (arrival 1, prompt 1, output 3) and e (arrival 2, empty prompt) have none.

- 0: a arrives; step [0, 3) prefills it (P 2). c arrives at 1 and waits; e is rejected at 2.
- 3: a's first token; step [3, 5) decodes a and prefills c (P 1). At 5 a completes (tokens 3, 5)
  and c has its first token; b is released: ``max(0, 5 + 3) = 8`` (R59).
- Steps [5, 6), [6, 7) decode c: it completes at 7 (tokens 5, 6, 7).
- 8: b arrives; step [8, 12) prefills it (P 3): it would end after 10, so it is cut (R62).
- Nothing else happens before 10: b is cut off at 10 (arrived, scheduled at 8, no token), d is
  never released (b never ended before 10): cut off, never arrived.

busy_us 3 + 2 + 1 + 1 + (10 - 8) = 9; makespan 10 - 0. tpot samples a: 2/1, c: 2/2: min 1,
max 2, mean 3/2, p50 1 (rank 1 of 2), p90..p99 2. a misses ``mean_itl_us`` (2 > 1 * 1); c meets
both bounds exactly (ttft 4 <= 4, 2 <= 1 * 2): goodput 1 request, 3 tokens, 10^6 / 10 and
3 * 10^6 / 10 per second against throughput 2 * 10^6 / 10 and 5 * 10^6 / 10.

**Closed loop N = 1, no stop.** Units in position order: session s1 (x: arrival 100, prompt 1,
output 1; z: arrival 100, think 2, prompt 1, output 2), y (arrival 0, prompt 2, output 1), w
(arrival 5, empty prompt), v (arrival 7, prompt 1, output 1). T0 = 0.

- 0: s1 released, x arrives at 0 (its 100 not read); [0, 2) gives its token: done at 2.
- z arrives at 2 + 2 = 4 (R61: ``T + think``); [4, 6), [6, 7): done at 7; s1 ends at 7.
- y released at 7; [7, 10): done at 10. w released at 10, rejected at once, so v is released at
  10 too (R61), and [10, 12) completes it at 12.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

import servesim
from servesim_conformance import invariants, session_invariants
from servesim_conformance.invariants import InvariantViolation
from servesim_conformance.properties import reference_report
from servesim_conformance.strategies import (
    input_triples,
    kv_input_triples,
    routed_input_triples,
    session_input_triples,
)

Document = dict[str, Any]
Documents = tuple[Document, Document, Document]

TIMING: Document = {
    "document": "timing_profile",
    "schema_version": "1.0",
    "model": {
        "kind": "synthetic_linear",
        "step_overhead_ns": 1000,
        "prefill_token_ns": 1000,
        "decode_token_ns": 0,
    },
}


def scenario(**extra: Any) -> Document:
    return {
        "document": "scenario",
        "schema_version": "1.3",
        "fleet": {"workers": 1},
        "routing": {"policy": "round_robin"},
        "scheduler": {
            "max_num_seqs": 4,
            "max_batched_tokens": 64,
            "max_model_len": 64,
            "prefill": {"mode": "whole"},
        },
        **extra,
    }


def request(rid: str, arrival: int, prompt: int, output: int, **extra: Any) -> Document:
    return {
        "id": rid,
        "arrival_us": arrival,
        "prompt_tokens": prompt,
        "max_output_tokens": output,
        **extra,
    }


STOPPED = scenario(stop_at_us=10, slo={"ttft_us": 4, "mean_itl_us": 1})
OPEN_WORKLOAD: Document = {
    "document": "workload",
    "schema_version": "1.2",
    "sessions": [{"id": "s0"}],
    "requests": [
        request("a", 0, 2, 2, session="s0"),
        request("b", 0, 3, 2, session="s0", think_time_us=3),
        request("c", 1, 1, 3),
        request("d", 20, 1, 1, session="s0"),
        request("e", 2, 0, 1),
    ],
}

CLOSED = scenario(closed_loop={"max_in_flight": 1})
CLOSED_WORKLOAD: Document = {
    "document": "workload",
    "schema_version": "1.2",
    "sessions": [{"id": "s1"}],
    "requests": [
        request("x", 100, 1, 1, session="s1"),
        request("y", 0, 2, 1),
        request("z", 100, 1, 2, session="s1", think_time_us=2),
        request("w", 5, 0, 1),
        request("v", 7, 1, 1),
    ],
}


def completed(
    rid: str, arrival: int, scheduled: int, times: list[int], session: str | None = None
) -> Document:
    """A completed request's entry (R26, R64), without ``slo_met``."""
    count = len(times)
    mean = None if count == 1 else (times[-1] - times[0]) / (count - 1)
    return {
        "id": rid,
        "session": session,
        "arrival_us": arrival,
        "worker": 0,
        "outcome": "completed",
        "reject_reason": None,
        "output_tokens": count,
        "terminal_us": times[-1],
        "first_scheduled_us": scheduled,
        "first_token_us": times[0],
        "completion_us": times[-1],
        "queue_us": scheduled - arrival,
        "ttft_us": times[0] - arrival,
        "e2e_us": times[-1] - arrival,
        "mean_itl_us": mean,
        "token_times_us": times,
    }


def rejected(rid: str, arrival: int) -> Document:
    return {
        "id": rid,
        "session": None,
        "arrival_us": arrival,
        "worker": None,
        "outcome": "rejected",
        "reject_reason": "empty_prompt",
        "output_tokens": 0,
        "terminal_us": arrival,
        "token_times_us": [],
        **dict.fromkeys(
            ("first_scheduled_us", "first_token_us", "completion_us", "queue_us", "ttft_us"),
        ),
        "e2e_us": None,
        "mean_itl_us": None,
    }


def cut_off(rid: str, stop: int, arrival: int | None, scheduled: int | None) -> Document:
    """A request cut off at ``stop`` with no token (R62)."""
    return {
        "id": rid,
        "session": "s0",
        "arrival_us": arrival,
        "worker": None if arrival is None else 0,
        "outcome": "cut_off",
        "reject_reason": None,
        "output_tokens": 0,
        "terminal_us": stop,
        "first_scheduled_us": scheduled,
        "first_token_us": None,
        "completion_us": None,
        "queue_us": None if scheduled is None or arrival is None else scheduled - arrival,
        "ttft_us": None,
        "e2e_us": None,
        "mean_itl_us": None,
        "token_times_us": [],
    }


def step(start: int, end: int) -> Document:
    return {"worker": 0, "start_us": start, "end_us": end}


def stopped_report() -> Document:
    """The open-loop run with stop time 10 and objectives, derived above."""
    entries = [
        completed("a", 0, 0, [3, 5], "s0") | {"slo_met": False},
        cut_off("b", 10, 8, 8) | {"slo_met": False},
        completed("c", 1, 3, [5, 6, 7]) | {"slo_met": True},
        cut_off("d", 10, None, None) | {"slo_met": False},
        rejected("e", 2) | {"slo_met": False},
    ]
    return {
        "requests": entries,
        "summary": {
            "requests": 5,
            "completed": 2,
            "rejected": 1,
            "cut_off": 2,
            "first_arrival_us": 0,
            "makespan_us": 10,
            "output_tokens": 5,
            "request_throughput_per_s": 200_000,
            "output_token_throughput_per_s": 500_000,
            "goodput": {
                "requests": 1,
                "output_tokens": 3,
                "request_throughput_per_s": 100_000,
                "output_token_throughput_per_s": 300_000,
            },
            "tpot_us": {
                "count": 2,
                "min": 1,
                "max": 2,
                "mean": 1.5,
                "p50": 1,
                "p90": 2,
                "p95": 2,
                "p99": 2,
            },
        },
        "workers": [{"worker": 0, "busy_us": 9}],
        "trace": [step(0, 3), step(3, 5), step(5, 6), step(6, 7), step(8, 12)],
    }


def closed_report() -> Document:
    """The closed-loop run with N = 1, derived above."""
    return {
        "requests": [
            completed("x", 0, 0, [2], "s1"),
            completed("y", 7, 7, [10]),
            completed("z", 4, 4, [6, 7], "s1"),
            rejected("w", 10),
            completed("v", 10, 10, [12]),
        ],
        "summary": {
            "requests": 5,
            "completed": 4,
            "rejected": 1,
            "cut_off": 0,
            "first_arrival_us": 0,
            "makespan_us": 12,
            "output_tokens": 5,
            "request_throughput_per_s": 4 * 1_000_000 / 12,
            "output_token_throughput_per_s": 5 * 1_000_000 / 12,
            "tpot_us": {"count": 1, **dict.fromkeys(("min", "max", "mean", "p50"), 1)}
            | {"p90": 1, "p95": 1, "p99": 1},
        },
        "workers": [{"worker": 0, "busy_us": 2 + 2 + 1 + 3 + 2}],
        "trace": [step(0, 2), step(4, 6), step(6, 7), step(7, 10), step(10, 12)],
    }


CASES: dict[str, tuple[Document, Document, Callable[[], Document]]] = {
    "stopped": (STOPPED, OPEN_WORKLOAD, stopped_report),
    "closed": (CLOSED, CLOSED_WORKLOAD, closed_report),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_derived_reports_pass(case: str) -> None:
    scenario_doc, workload, derived = CASES[case]
    session_invariants.check_sessions(scenario_doc, workload, derived())


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_reference_agrees_with_the_derivation(case: str) -> None:
    """Every member derived above is the reference's, and its whole report passes every
    invariant of sections 3 to 13."""
    scenario_doc, workload, derived = CASES[case]
    report = json.loads(reference_report((scenario_doc, workload, TIMING)))
    expected = derived()
    for actual, entry in zip(report["requests"], expected["requests"], strict=True):
        assert {key: actual[key] for key in entry} == entry
    for key, value in expected["summary"].items():
        assert report["summary"][key] == value, key
    assert [w["busy_us"] for w in report["workers"]] == [w["busy_us"] for w in expected["workers"]]
    assert [(s["start_us"], s["end_us"]) for s in report["trace"]] == [
        (s["start_us"], s["end_us"]) for s in expected["trace"]
    ]
    invariants.check_report(scenario_doc, workload, report)


Mutation = Callable[[Document], None]


def _set(rid: str, member: str, value: Any) -> Mutation:
    def mutate(report: Document) -> None:
        next(e for e in report["requests"] if e["id"] == rid)[member] = value

    return mutate


def _summary(member: str, value: Any, inner: str | None = None) -> Mutation:
    def mutate(report: Document) -> None:
        target = report["summary"] if inner is None else report["summary"][inner]
        target[member] = value

    return mutate


def _both(*mutations: Mutation) -> Mutation:
    def mutate(report: Document) -> None:
        for mutation in mutations:
            mutation(report)

    return mutate


def _step_at_the_stop(report: Document) -> None:
    report["trace"].append(step(10, 11))


def _busy(value: int) -> Mutation:
    def mutate(report: Document) -> None:
        report["workers"][0]["busy_us"] = value

    return mutate


def _without(member: str) -> Callable[[Document], Document]:
    def scenario_without(document: Document) -> Document:
        return {key: value for key, value in document.items() if key != member}

    return scenario_without


S = session_invariants

#: name -> (case, mutation, check, rule, optional change to the scenario). Each breaks one thing
#: the derivation fixes; the check passes on the derived report first.
MUTATIONS: dict[
    str, tuple[str, Mutation, Callable[..., None], str, Callable[[Document], Document] | None]
] = {
    "turn overlaps its predecessor": (
        "stopped",
        _set("b", "arrival_us", 4),
        S.check_turns,
        "R59",
        None,
    ),
    "turn released off its think time": (
        "stopped",
        _set("b", "arrival_us", 7),
        S.check_turns,
        "R59",
        None,
    ),
    "turn arrives although released after the stop": (
        "stopped",
        _set("d", "arrival_us", 9),
        S.check_turns,
        "R59",
        None,
    ),
    "closed-loop turn reads its arrival_us": (
        "closed",
        _set("z", "arrival_us", 100),
        S.check_turns,
        "R59",
        None,
    ),
    "open-loop request off its recorded time": (
        "stopped",
        _set("c", "arrival_us", 2),
        S.check_open_loop_arrivals,
        "R26",
        None,
    ),
    "unit released before one ended": (
        "closed",
        _set("y", "arrival_us", 2),
        S.check_closed_loop_releases,
        "R61",
        None,
    ),
    "unit released after the end that frees it": (
        "closed",
        _set("v", "arrival_us", 11),
        S.check_closed_loop_releases,
        "R61",
        None,
    ),
    "units out of position order": (
        "closed",
        _both(_set("y", "arrival_us", 10), _set("v", "arrival_us", 7)),
        S.check_closed_loop_releases,
        "R61",
        None,
    ),
    "two units in flight with N = 1": (
        "closed",
        _set("y", "arrival_us", 2),
        S.check_in_flight,
        "R61",
        None,
    ),
    "a step starts at the stop time": (
        "stopped",
        _step_at_the_stop,
        S.check_stop_time,
        "R62",
        None,
    ),
    "a token after the stop time": (
        "stopped",
        _set("b", "token_times_us", [12]),
        S.check_stop_time,
        "R62",
        None,
    ),
    "cut off at another time": (
        "stopped",
        _set("d", "terminal_us", 11),
        S.check_stop_time,
        "R62",
        None,
    ),
    "a cut step counted whole": ("stopped", _busy(11), S.check_stop_time, "R29", None),
    "cut off without a stop time": (
        "stopped",
        lambda report: None,
        S.check_stop_time,
        "R62",
        _without("stop_at_us"),
    ),
    "cut off with a completion": (
        "stopped",
        _set("b", "completion_us", 12),
        S.check_cut_off_entries,
        "R62",
        None,
    ),
    "never arrived yet routed": (
        "stopped",
        _set("d", "worker", 0),
        S.check_cut_off_entries,
        "R62",
        None,
    ),
    "cut off with a wrong queue time": (
        "stopped",
        _set("b", "queue_us", 1),
        S.check_cut_off_entries,
        "R62",
        None,
    ),
    "outcomes do not add up": (
        "stopped",
        _summary("cut_off", 1),
        S.check_outcome_counts,
        "R64",
        None,
    ),
    "makespan ignores the cut-off requests": (
        "stopped",
        _summary("makespan_us", 7),
        S.check_outcome_counts,
        "R64",
        None,
    ),
    "slo bound not inclusive": (
        "stopped",
        _set("c", "slo_met", False),
        S.check_objectives,
        "R63",
        None,
    ),
    "a cut-off request met the objectives": (
        "stopped",
        _set("b", "slo_met", True),
        S.check_objectives,
        "R63",
        None,
    ),
    "slo_met without slo": (
        "stopped",
        lambda report: None,
        S.check_objectives,
        "R63",
        _without("slo"),
    ),
    "goodput counts a request that missed": (
        "stopped",
        _summary("requests", 2, "goodput"),
        S.check_goodput,
        "R63",
        None,
    ),
    "goodput rate not R24": (
        "stopped",
        _summary("request_throughput_per_s", 100_001, "goodput"),
        S.check_goodput,
        "R63",
        None,
    ),
    "goodput over throughput": (
        "stopped",
        _both(
            _summary("request_throughput_per_s", 50_000),
            _summary("completed", 0),
        ),
        S.check_goodput,
        "R63",
        None,
    ),
    "goodput without slo": (
        "stopped",
        lambda report: None,
        S.check_goodput,
        "R63",
        _without("slo"),
    ),
    "tpot counts a one-token request": (
        "closed",
        _summary("count", 2, "tpot_us"),
        S.check_tpot,
        "R63",
        None,
    ),
    "tpot mean rounded twice": (
        "stopped",
        _summary("mean", 1, "tpot_us"),
        S.check_tpot,
        "R63",
        None,
    ),
    "session member missing": (
        "stopped",
        _set("a", "session", None),
        S.check_session_members,
        "R64",
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_invariant_can_fail(name: str) -> None:
    case, mutate, check_one, rule, change = MUTATIONS[name]
    scenario_doc, workload, derived = CASES[case]
    report = copy.deepcopy(derived())
    arguments = {
        S.check_stop_time: lambda s: (s, report),
        S.check_cut_off_entries: lambda s: (workload, report),
        S.check_outcome_counts: lambda s: (report,),
        S.check_objectives: lambda s: (s, report),
        S.check_goodput: lambda s: (s, report),
        S.check_tpot: lambda s: (report,),
        S.check_session_members: lambda s: (workload, report),
    }.get(check_one, lambda s: (s, workload, report))
    check_one(*arguments(scenario_doc))  # the derived report passes the same check
    mutate(report)
    with pytest.raises(InvariantViolation, match=f"^{rule}:"):
        check_one(*arguments(change(scenario_doc) if change else scenario_doc))


def test_slo_met_follows_the_integer_comparison_at_the_boundary() -> None:
    """R63: c's mean inter-token latency is exactly 1 (2 over 2 gaps): a bound of 1 is met, and
    the same report read with a bound of 0 is not; a ttft of exactly 4 meets 4, not 3."""
    report = stopped_report()
    c = report["requests"][2]
    assert S.meets_objectives(c, {"mean_itl_us": 1})
    assert not S.meets_objectives(c, {"mean_itl_us": 0})
    assert S.meets_objectives(c, {"ttft_us": 4, "e2e_us": 6})
    assert not S.meets_objectives(c, {"ttft_us": 3})
    assert not S.meets_objectives(c, {"e2e_us": 5})
    assert S.meets_objectives(completed("q", 0, 0, [2]), {"mean_itl_us": 0})  # no gap


def test_sections_3_to_12_checks_accept_a_cut_step_and_reject_a_cut_off_without_a_stop() -> None:
    """The checks of sections 3 to 12 read a cut-off request (R62): the reference's stopped
    report passes them, and the same with the stop time removed from its cut-off request's
    meaning (its outcome claimed by a run that never stops) does not."""
    report = json.loads(reference_report((STOPPED, OPEN_WORKLOAD, TIMING)))
    invariants.check_terminal_states(STOPPED, OPEN_WORKLOAD, report)
    invariants.check_trace_consistency(report)
    invariants.check_counts(report)
    with pytest.raises(InvariantViolation, match=r"^R9: b did not complete"):
        invariants.check_terminal_states(_without("stop_at_us")(STOPPED), OPEN_WORKLOAD, report)
    broken = copy.deepcopy(report)
    broken["workers"][0]["output_tokens"] += 1
    with pytest.raises(InvariantViolation, match=r"^R29:"):
        invariants.check_counts(broken)


def test_the_documents_are_valid() -> None:
    for role, document in (
        ("scenario", STOPPED),
        ("scenario", CLOSED),
        ("workload", OPEN_WORKLOAD),
        ("workload", CLOSED_WORKLOAD),
    ):
        loaded = servesim.load_document(json.dumps(document).encode(), f"{role}.json", role)
        assert loaded.version == document["schema_version"]


# --- The reference through the invariants on generated inputs ----------------------------------

#: Sessions, closed loop, stop time and objectives on every earlier kind of input.
any_session_triples = st.one_of(
    session_input_triples(),
    session_input_triples(kv_input_triples()),
    session_input_triples(routed_input_triples()),
)


def run(documents: Documents) -> Document:
    report: Document = json.loads(reference_report(documents))
    return report


@given(any_session_triples)
def test_r59_r64_every_invariant_holds_with_sessions(documents: Documents) -> None:
    scenario_doc, workload, timing = documents
    report = run(documents)
    invariants.check_report(scenario_doc, workload, report)
    invariants.check_step_shapes(timing, report)


def _without_stop(scenario_doc: Document) -> Document:
    return _without("stop_at_us")(scenario_doc)


@given(any_session_triples)
def test_r62_a_stopped_run_is_the_full_run_up_to_the_stop(documents: Documents) -> None:
    """Metamorphic (R62): events before D are the same with or without D, and completions at D
    are processed, so every request that completed or was rejected in the stopped run is the
    same in the full run, and every step started before D is the same step."""
    scenario_doc, workload, timing = documents
    stop = scenario_doc.get("stop_at_us")
    if stop is None:
        return
    stopped = run(documents)
    full = run((_without_stop(scenario_doc), workload, timing))
    for short, long in zip(stopped["requests"], full["requests"], strict=True):
        if short["outcome"] != "cut_off":
            assert short == long
        else:
            assert long["terminal_us"] >= stop
        if long["terminal_us"] <= stop and long["arrival_us"] < stop:
            assert short == long
    # R123: a step cut by the stop time has cut_us D (it never ended), every other null
    for step in stopped["trace"]:
        assert step["cut_us"] == (stop if step["end_us"] > stop else None)
    assert [_uncut(step) for step in stopped["trace"]] == [
        _uncut(step) for step in full["trace"] if step["start_us"] < stop
    ]


def _uncut(step: dict[str, Any]) -> dict[str, Any]:
    """A trace entry without R123's ``cut_us``."""
    return {name: value for name, value in step.items() if name != "cut_us"}


@given(any_session_triples)
def test_r62_a_stop_after_every_terminal_time_changes_nothing(documents: Documents) -> None:
    """R62: a deadline after the last terminal time changes nothing but the scenario's
    digest."""
    scenario_doc, workload, timing = documents
    free = _without_stop(scenario_doc)
    full = run((free, workload, timing))
    last = max(entry["terminal_us"] for entry in full["requests"])
    late = run(({**free, "stop_at_us": last + 1}, workload, timing))
    late["inputs"]["scenario"] = full["inputs"]["scenario"]
    assert late == full


@given(any_session_triples)
def test_r63_objectives_change_only_their_own_members(documents: Documents) -> None:
    """R63: without ``slo`` neither ``slo_met`` nor ``goodput`` is in the report, and nothing
    else changes."""
    scenario_doc, workload, timing = documents
    with_slo = run(({**scenario_doc, "slo": {"ttft_us": 1000}}, workload, timing))
    without = run((_without("slo")(scenario_doc), workload, timing))
    for entry in with_slo["requests"]:
        del entry["slo_met"]
    del with_slo["summary"]["goodput"]
    with_slo["inputs"]["scenario"] = without["inputs"]["scenario"]
    assert with_slo == without


@given(any_session_triples)
def test_r61_a_loop_wider_than_the_units_is_the_open_loop_from_t0(documents: Documents) -> None:
    """Metamorphic (R59, R61): with N at least the number of units every unit is released at
    T0 and every later turn at ``T + think``; the open loop gives the same when every request is
    recorded at T0 (``max(T0, T + think)`` is ``T + think``, as T >= T0)."""
    scenario_doc, workload, timing = documents
    units = len(session_invariants.units_of(workload))
    start = min(request["arrival_us"] for request in workload["requests"])
    closed = {**scenario_doc, "closed_loop": {"max_in_flight": units}}
    open_loop = _without("closed_loop")(scenario_doc)
    at_start = {
        **workload,
        "requests": [{**request, "arrival_us": start} for request in workload["requests"]],
    }
    one = run((closed, workload, timing))
    other = run((open_loop, at_start, timing))
    for report in (one, other):
        report["inputs"] = None
    assert one == other


@pytest.mark.parametrize(
    "wanted",
    [
        pytest.param(lambda s, w: "closed_loop" in s and "sessions" in w, id="closed sessions"),
        pytest.param(lambda s, w: s.get("closed_loop", {}).get("max_in_flight") == 1, id="N=1"),
        pytest.param(lambda s, w: "stop_at_us" in s and "slo" in s, id="stop and slo"),
        pytest.param(
            lambda s, w: any(r.get("think_time_us", 0) > 0 for r in w["requests"]), id="think"
        ),
        pytest.param(lambda s, w: len(w.get("sessions", [])) == 3, id="three sessions"),
    ],
)
def test_the_session_strategy_reaches_every_kind_of_input(wanted: Any) -> None:
    """The strategy draws what section 13 needs tested (hypothesis.find fails if it cannot),
    and what it draws is valid scenario 1.3 and workload 1.2."""
    scenario_doc, workload, _ = find(
        session_input_triples(input_triples()),
        lambda documents: wanted(documents[0], documents[1]),
        settings=settings(max_examples=2000, phases=[Phase.generate], database=None),
    )
    for role, document in (("scenario", scenario_doc), ("workload", workload)):
        loaded = servesim.load_document(json.dumps(document).encode(), f"{role}.json", role)
        assert loaded.version == document["schema_version"]


def test_the_reference_finds_a_cut_off_in_generated_runs() -> None:
    """The stop times drawn do cut runs: some generated run has a cut-off request that arrived
    (so R62's members are exercised, not only never-released requests)."""
    find(
        session_input_triples(stop=True),
        lambda documents: any(
            entry["outcome"] == "cut_off" and entry["arrival_us"] is not None
            for entry in run(documents)["requests"]
        ),
        settings=settings(max_examples=500, phases=[Phase.generate], database=None),
    )
