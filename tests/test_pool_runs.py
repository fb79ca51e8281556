"""Decode runs on workers of several ranks, against the pass-by-pass replay they stand for.

A run is not a rule but a shortcut that must keep R83's results (R21: the same report bytes).
With ranks there are two: a pass of one rank whose siblings are idle is that rank's step, made
a run as on a one-rank worker; a pass of several decode-only ranks without a cache under a
synthetic model is a run of passes of the pass's period. Each generated pool case (conformance
``pool_input_triples``: pools, ``dp_size``, caches, every router, sessions, stop times, measured
profiles) is replayed twice, once as the engine runs it and once with every run disabled (each
step and each pass formed at its own event), and the two reports must be the same bytes,
trace included. The documents are built without the schema check (scenario 1.4's schema is
frozen in another commit); R4's semantic checks still filter them.
"""

from __future__ import annotations

import copy
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.contract.documents import Document
from servesim.contract.errors import ServesimError
from servesim.contract.model import SyntheticLinearTiming
from servesim.contract.pair import pair_problems
from servesim.contract.scenario import build_scenario, scenario_problems
from servesim.contract.timing_profile import build_timing_profile
from servesim.contract.workload import build_workload
from servesim.engine import loop
from servesim.engine.loop import simulate
from servesim.engine.step import Step
from servesim.report.writer import report_chunks
from servesim_conformance.strategies import pool_input_triples

Documents = tuple[dict[str, Any], dict[str, Any], dict[str, Any]]


def _report(triple: Documents, *, runs: bool, trace: bool) -> bytes | str:
    """The report's bytes (or the error a replay raised, by name), with or without runs."""
    scenario, workload, timing = triple
    patches = (
        []
        if runs
        else [
            mock.patch.object(loop, "plan_run", return_value=None),
            mock.patch.object(loop, "steps_to_first_completion", return_value=1),
        ]
    )
    for patch in patches:
        patch.start()
    try:
        result = simulate(
            build_scenario(scenario),
            build_workload(workload),
            build_timing_profile(timing),
            record_trace=trace,
        )
        return b"".join(
            report_chunks(result, {"scenario": b"s", "workload": b"w", "timing_profile": b"t"})
        )
    except ServesimError as error:
        return type(error).__name__
    finally:
        for patch in patches:
            patch.stop()


#: The hand-derived tests' timing: 1 ms a step, 10 us a prefill token, 100 us a decoding request.
SYNTHETIC_TIMING: dict[str, Any] = {
    "document": "timing_profile",
    "schema_version": "1.0",
    "model": {
        "kind": "synthetic_linear",
        "step_overhead_ns": 1_000_000,
        "prefill_token_ns": 10_000,
        "decode_token_ns": 100_000,
    },
}


def _traced(
    scenario: dict[str, Any], workload: dict[str, Any]
) -> tuple[Documents, loop.SimulationResult, list[Step]]:
    """The scenario and workload with ``SYNTHETIC_TIMING``, their simulation, and the steps it
    recorded (runs and carried steps as they are)."""
    timing = copy.deepcopy(SYNTHETIC_TIMING)
    result = simulate(
        build_scenario(scenario),
        build_workload(workload),
        build_timing_profile(timing),
        record_trace=True,
    )
    assert result.steps is not None
    return (scenario, workload, timing), result, result.steps


def _valid(triple: Documents) -> bool:
    scenario, workload, _ = triple
    if scenario_problems(scenario, "scenario.json"):
        return False
    documents = [
        Document(name, name, "", b"", value)
        for name, value in (("scenario", scenario), ("workload", workload))
    ]
    return not pair_problems(documents[0], documents[1])


def _assert_same_reports(triple: Documents) -> None:
    """The triple's report, traced or not, is the same with runs and pass by pass."""
    for trace in (False, True):
        assert _report(triple, runs=True, trace=trace) == _report(triple, runs=False, trace=trace)


def _assert_runs_keep_the_report(triple: Documents) -> None:
    """``_assert_same_reports`` for a generated triple, when it is valid input."""
    if _valid(triple):
        _assert_same_reports(triple)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pool_input_triples())
def test_runs_on_ranks_give_the_pass_by_pass_report(triple: Documents) -> None:
    _assert_runs_keep_the_report(triple)


def test_a_run_of_passes_of_two_decoding_ranks_is_one_event_per_run() -> None:
    """The shortcut is taken: two ranks decoding together (no cache, a synthetic model) form
    one pass event for many passes, and the result is still the pass-by-pass one."""
    scenario = {
        "document": "scenario",
        "schema_version": "1.4",
        "fleet": {"workers": 1, "dp_size": 2},
        "routing": {"policy": "round_robin"},
        "scheduler": {
            "max_num_seqs": 4,
            "max_batched_tokens": 4096,
            "max_model_len": 4096,
            "prefill": {"mode": "whole"},
        },
    }
    workload = {
        "document": "workload",
        "schema_version": "1.0",
        "requests": [
            {"id": "a", "arrival_us": 0, "prompt_tokens": 100, "max_output_tokens": 50},
            {"id": "b", "arrival_us": 0, "prompt_tokens": 10, "max_output_tokens": 40},
        ],
    }
    triple, result, steps = _traced(scenario, workload)
    assert isinstance(build_timing_profile(triple[2]).model, SyntheticLinearTiming)
    # pass 1 prefills both (2000 us, the longer); then both decode for 39 passes of 1100 us as
    # one run of each rank's step; then a alone (b finished) decodes its last 10: its step,
    # carried on (nobody joined rank 0), stands for those passes too
    assert [(step.rank, step.start_us, step.repeat) for step in steps] == [
        (0, 0, 1),
        (1, 0, 1),
        (0, 2000, 49),
        (1, 2000, 39),
    ]
    assert steps[2].segments == [(2000 + 1100, 1100, 49)]
    token_times = {state.request.id: list(state.token_times_us) for state in result.requests}
    assert token_times["b"] == [2000 + k * 1100 for k in range(40)]  # b at the pass ends
    assert token_times["a"][:40] == token_times["b"]
    assert [rank.busy_us for rank in result.workers] == [1000 + 1000 + 49 * 1100, 1100 + 39 * 1100]
    _assert_same_reports(triple)


@st.composite
def carried_rank_triples(draw: st.DrawFn) -> Documents:
    """(scenario, workload, profile) in which ranks carry decode steps across passes
    (``servesim.engine.passes``): one or two workers of 2 to 4 ranks without a cache, chunked
    prefill of a few tokens (a rank prefills for several passes while its siblings decode),
    every style, and a synthetic profile whose every duration is a whole number of
    milliseconds, with arrivals on whole milliseconds, so that many join a rank exactly at a
    pass end (between two passes) or inside a run of passes; now and then a state-aware
    router, a closed loop (whose releases come at pass ends) and a stop time."""
    scheduler = {
        "max_num_seqs": draw(st.integers(1, 4)),
        "max_batched_tokens": 16,
        "max_model_len": 64,
        "prefill": {"mode": "chunked", "max_chunk_tokens": draw(st.integers(1, 8))},
        "style": draw(st.sampled_from(("vllm", "sglang", "trtllm"))),
    }
    scenario: dict[str, Any] = {
        "document": "scenario",
        "schema_version": "1.5",
        "fleet": {"workers": draw(st.integers(1, 2)), "dp_size": draw(st.integers(2, 4))},
        "routing": {"policy": draw(st.sampled_from(("round_robin", "least_loaded")))},
        "scheduler": scheduler,
    }
    if draw(st.booleans()):
        scenario["closed_loop"] = {"max_in_flight": draw(st.integers(1, 6))}
    if draw(st.booleans()):
        scenario["stop_at_us"] = 1000 * draw(st.integers(1, 80))
    arrivals = sorted(draw(st.lists(st.integers(0, 40), min_size=1, max_size=12)))
    requests = [
        {
            "id": f"r{index}",
            "arrival_us": 1000 * arrival,
            "prompt_tokens": draw(st.integers(1, 24)),
            "max_output_tokens": draw(st.integers(1, 30)),
        }
        for index, arrival in enumerate(arrivals)
    ]
    workload = {"document": "workload", "schema_version": "1.0", "requests": requests}
    milliseconds = st.integers(0, 2).map(lambda count: count * 1_000_000)
    timing = {
        "document": "timing_profile",
        "schema_version": "1.0",
        "model": {
            "kind": "synthetic_linear",
            "step_overhead_ns": 1_000_000,
            "prefill_token_ns": draw(milliseconds),
            "decode_token_ns": draw(milliseconds),
        },
    }
    return scenario, workload, timing


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(carried_rank_triples())
def test_carried_rank_steps_give_the_pass_by_pass_report(triple: Documents) -> None:
    _assert_runs_keep_the_report(triple)


def test_a_join_at_a_pass_end_ends_the_step_its_rank_carries() -> None:
    """Rank 0 decodes a while rank 1 prefills b chunk by chunk, so rank 0's decode step is
    carried from pass to pass; c joins rank 0 (R80: the third request) exactly at the end of
    pass 2, between two passes: the carried step ends there, and pass 3 forms rank 0's step
    anew, which admits c. Hand-derived (1000 us a step, 10 us a prompt token, 100 us a
    decoding request):

    - pass 1 [0, 11000): rank 0 prefills a (2000 us), rank 1 b's first 1000 tokens (11000);
    - pass 2 [11000, 22000): rank 0 decodes a (1100, carried), rank 1 b's second chunk;
    - pass 3 [22000, 33000): rank 0 decodes a and prefills c (2100), rank 1 b's last chunk;
    - passes 4, 5 (1200 each): a and c decode on rank 0, b on rank 1; c's third token ends it;
    - passes 6, 7 (1100 each): a on rank 0, b carried on rank 1 to its fifth token;
    - then a alone, its step carried on, for its last 43 tokens.
    """
    scheduler = {
        "max_num_seqs": 4,
        "max_batched_tokens": 4096,
        "max_model_len": 8192,
        "prefill": {"mode": "chunked", "max_chunk_tokens": 1000},
    }
    scenario = {
        "document": "scenario",
        "schema_version": "1.4",
        "fleet": {"workers": 1, "dp_size": 2},
        "routing": {"policy": "round_robin"},
        "scheduler": scheduler,
    }
    requests = [
        {"id": "a", "arrival_us": 0, "prompt_tokens": 100, "max_output_tokens": 50},
        {"id": "b", "arrival_us": 0, "prompt_tokens": 3000, "max_output_tokens": 5},
        {"id": "c", "arrival_us": 22000, "prompt_tokens": 100, "max_output_tokens": 3},
    ]
    workload = {"document": "workload", "schema_version": "1.0", "requests": requests}
    triple, result, steps = _traced(scenario, workload)
    assert [(step.rank, step.start_us, step.repeat) for step in steps] == [
        (0, 0, 1),
        (1, 0, 1),
        (0, 11000, 1),  # carried into pass 3, then ended at its start by c's join
        (1, 11000, 1),
        (0, 22000, 1),
        (1, 22000, 1),
        (0, 33000, 2),
        (1, 33000, 4),  # passes 4 to 7, two of 1200 us and two of 1100
        (0, 35400, 45),
    ]
    assert steps[7].segments == [(34200, 1200, 2), (36500, 1100, 2)]
    token_times = {state.request.id: list(state.token_times_us) for state in result.requests}
    assert token_times["b"] == [33000, 34200, 35400, 36500, 37600]
    assert token_times["c"] == [33000, 34200, 35400]
    assert token_times["a"][:7] == [11000, 22000, 33000, 34200, 35400, 36500, 37600]
    assert token_times["a"][-1] == 37600 + 43 * 1100
    busy = [2000 + 1100 + 2100 + 2 * 1200 + 45 * 1100, 3 * 11000 + 4 * 1100]
    assert [rank.busy_us for rank in result.workers] == busy
    _assert_same_reports(triple)
