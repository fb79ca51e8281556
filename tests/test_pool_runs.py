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

from servesim.contract.documents import Document
from servesim.contract.errors import ServesimError
from servesim.contract.model import SyntheticLinearTiming
from servesim.contract.pair import pair_problems
from servesim.contract.scenario import build_scenario, scenario_problems
from servesim.contract.timing_profile import build_timing_profile
from servesim.contract.workload import build_workload
from servesim.engine import loop
from servesim.engine.loop import simulate
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


def _valid(triple: Documents) -> bool:
    scenario, workload, _ = triple
    if scenario_problems(scenario, "scenario.json"):
        return False
    documents = [
        Document(name, name, "", b"", value)
        for name, value in (("scenario", scenario), ("workload", workload))
    ]
    return not pair_problems(documents[0], documents[1])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pool_input_triples())
def test_runs_on_ranks_give_the_pass_by_pass_report(triple: Documents) -> None:
    if not _valid(triple):
        return
    for trace in (False, True):
        assert _report(triple, runs=True, trace=trace) == _report(triple, runs=False, trace=trace)


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
    timing = {
        "document": "timing_profile",
        "schema_version": "1.0",
        "model": {
            "kind": "synthetic_linear",
            "step_overhead_ns": 1_000_000,
            "prefill_token_ns": 10_000,
            "decode_token_ns": 100_000,
        },
    }
    assert isinstance(build_timing_profile(timing).model, SyntheticLinearTiming)
    triple = (scenario, workload, timing)
    result = simulate(
        build_scenario(scenario),
        build_workload(workload),
        build_timing_profile(timing),
        record_trace=True,
    )
    assert result.steps is not None
    # pass 1 prefills both (2000 us, the longer); then both decode for 39 passes of 1100 us as
    # one run of each rank's step; then a alone (b finished) decodes its last 10 as one run
    assert [(step.rank, step.start_us, step.repeat) for step in result.steps] == [
        (0, 0, 1),
        (1, 0, 1),
        (0, 2000, 39),
        (1, 2000, 39),
        (0, 2000 + 39 * 1100, 10),
    ]
    token_times = {state.request.id: list(state.token_times_us) for state in result.requests}
    assert token_times["b"] == [2000 + k * 1100 for k in range(40)]  # b at the pass ends
    assert token_times["a"][:40] == token_times["b"]
    assert [rank.busy_us for rank in result.workers] == [1000 + 1000 + 49 * 1100, 1100 + 39 * 1100]
    for trace in (False, True):
        assert _report(copy.deepcopy(triple), runs=True, trace=trace) == _report(
            triple, runs=False, trace=trace
        )
