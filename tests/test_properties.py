"""R9 to R11, R16 to R21, R25, R26, R28 to R30, R45 to R52: invariants over generated inputs.

The checks live in ``servesim_conformance.invariants`` and look at the report alone, so the
conformance suite runs the very same checks against other implementations.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

import servesim
from servesim_conformance import invariants
from servesim_conformance.strategies import (
    broken_kv_input_triples,
    hashed_input_triples_without_cache,
    input_triples,
    kv_input_triples,
    measured_input_triples,
    routed_input_triples,
    scenarios,
    session_input_triples,
    timing_profiles,
    workloads,
)

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


#: Every kind of timing profile: synthetic (R22) and measured (R41, R42), runs with a KV cache
#: under memory pressure (section 11), and state-aware routing (section 12).
any_input_triples = st.one_of(
    input_triples(), measured_input_triples(), kv_input_triples(), routed_input_triples()
)


@given(any_input_triples)
def test_r22_r30_traced_shapes_and_durations_follow_the_profile(documents: Documents) -> None:
    invariants.check_step_shapes(documents[2], json.loads(run(documents)))


@given(any_input_triples)
def test_r9_r10_r11_every_request_reaches_exactly_one_terminal_state(documents: Documents) -> None:
    scenario, workload, _ = documents
    invariants.check_terminal_states(scenario, workload, json.loads(run(documents)))


@given(any_input_triples)
def test_r17_r19_r21_no_step_exceeds_its_budgets(documents: Documents) -> None:
    invariants.check_step_budgets(documents[0], json.loads(run(documents)))


@given(any_input_triples)
def test_r20_r21_token_times_increase_and_follow_arrival(documents: Documents) -> None:
    invariants.check_token_times(json.loads(run(documents)))


@given(any_input_triples)
def test_r16_r20_trace_is_consistent_with_requests(documents: Documents) -> None:
    invariants.check_trace_consistency(json.loads(run(documents)))


@given(input_triples())
def test_r28_r29_counts_add_up(documents: Documents) -> None:
    invariants.check_counts(json.loads(run(documents)))


@given(input_triples())
def test_r25_digests_are_sha256_of_input_bytes(documents: Documents) -> None:
    roles = ("scenario", "workload", "timing_profile")
    inputs = {role: encode(document) for role, document in zip(roles, documents, strict=True)}
    invariants.check_digests(inputs, json.loads(run(documents, trace=False)))


@given(any_input_triples)
def test_r21_rerun_gives_identical_bytes(documents: Documents) -> None:
    assert run(documents) == run(documents)


def check_shifted_arrivals(
    scenario: dict[str, Any], workload: dict[str, Any], timing: dict[str, Any], shift: int
) -> None:
    """Replay the workload and the same with every arrival later by ``shift``; every time of
    the report must move by exactly ``shift``."""
    shifted = json.loads(json.dumps(workload))
    for request in shifted["requests"]:
        request["arrival_us"] += shift
    before = json.loads(run((scenario, workload, timing)))
    after = json.loads(run((scenario, shifted, timing)))
    invariants.check_arrival_shift(before, after, shift)


@given(scenarios(), workloads(), timing_profiles(), st.integers(1, 10**9))
def test_shifting_every_arrival_shifts_every_time(
    scenario: dict[str, Any], workload: dict[str, Any], timing: dict[str, Any], shift: int
) -> None:
    """Metamorphic (R6, R7): the simulation has no absolute clock, only differences."""
    check_shifted_arrivals(scenario, workload, timing, shift)


@given(any_input_triples)
def test_r23_report_is_canonical_and_schema_valid(documents: Documents) -> None:
    data = run(documents)
    assert data.endswith(b"}\n")
    assert data.count(b"\n") == 1
    value = json.loads(data)
    assert servesim.load_document(data, "report.json", "report").value == value


# --- KV cache, prefix caching and preemption (SPEC.md section 11) ------------------------------


@given(kv_input_triples())
def test_r50_blocks_in_use_never_exceed_the_cache(documents: Documents) -> None:
    """R45, R46, R50, R52: every step's blocks in use are within the cache, are the blocks of
    its running requests' cached tokens, and the peak is the largest of them."""
    scenario, workload, _ = documents
    report = json.loads(run(documents))
    invariants.check_kv_capacity(scenario, report)
    invariants.check_kv_blocks(scenario, workload, report)


@given(kv_input_triples())
def test_r45_r52_every_invariant_holds_under_memory_pressure(documents: Documents) -> None:
    """Sections 3 to 7 and 11 together: reuse in whole blocks below the prompt (R48), every
    preempted request completed once (R9, R49), the cache counters adding up (R52)."""
    scenario, workload, _ = documents
    invariants.check_report(scenario, workload, json.loads(run(documents)))


@given(kv_input_triples())
def test_r9_r49_every_preempted_request_reaches_one_terminal_state(documents: Documents) -> None:
    scenario, workload, _ = documents
    report = json.loads(run(documents))
    invariants.check_terminal_states(scenario, workload, report)
    invariants.check_kv_preemptions(scenario, report)


@given(kv_input_triples())
def test_r47_hashes_change_nothing_with_prefix_caching_off(documents: Documents) -> None:
    """Metamorphic (R47): with caching off no block is identified, so no hash matters."""
    scenario, workload, timing = documents
    off = {**scenario, "kv_cache": {**scenario["kv_cache"], "prefix_caching": False}}
    with_hashes = json.loads(run((off, workload, timing)))
    without = json.loads(run((off, invariants.without_prefix_hashes(workload), timing)))
    invariants.check_hashes_change_nothing(with_hashes, without)


@given(hashed_input_triples_without_cache())
def test_r45_hashes_change_nothing_without_a_cache(documents: Documents) -> None:
    scenario, workload, timing = documents
    with_hashes = json.loads(run(documents))
    without = json.loads(run((scenario, invariants.without_prefix_hashes(workload), timing)))
    invariants.check_hashes_change_nothing(with_hashes, without)


@given(kv_input_triples(), st.integers(1, 10**9))
def test_shifting_every_arrival_shifts_every_time_with_a_cache(
    documents: Documents, shift: int
) -> None:
    """Metamorphic (R6, R7): blocks, reuse, eviction and preemption depend on no clock."""
    check_shifted_arrivals(*documents, shift)


@given(broken_kv_input_triples())
def test_r4_r5_broken_cache_and_hash_members_are_invalid(case: tuple[str, Documents]) -> None:
    """R3, R4, R5: a cache or hash member broken in one of ``KV_INPUT_FAULTS`` (hypothesis
    names the fault of a failing example) is invalid input."""
    _fault, documents = case
    with pytest.raises(servesim.InvalidInput):
        run(documents)


# --- State-aware routing (SPEC.md section 12) ---------------------------------------------------


@given(routed_input_triples())
def test_r54_r57_every_invariant_holds_with_state_aware_routing(documents: Documents) -> None:
    """Sections 3 to 7, 11 and 12 together on 1 to 5 workers with shared prefixes: least_loaded
    rebuilt from the report, cached blocks at routing within what the worker's earlier requests
    left, no worker certainly cheaper than cache_aware's choice (R54 to R57)."""
    scenario, workload, _ = documents
    invariants.check_report(scenario, workload, json.loads(run(documents)))


@given(routed_input_triples(), st.integers(1, 10**9))
def test_shifting_every_arrival_shifts_every_time_with_state_aware_routing(
    documents: Documents, shift: int
) -> None:
    """Metamorphic (R6, R7, R54): what a router sees depends on no clock, only on order."""
    check_shifted_arrivals(*documents, shift)


@given(routed_input_triples())
def test_r54_a_one_worker_fleet_routes_everything_to_it(documents: Documents) -> None:
    """R55, R56: with one worker every policy is round robin's choice, so the report is round
    robin's but for the scenario's digest and ``cached_blocks_at_routing`` (R57)."""
    scenario, workload, timing = documents
    one = {**scenario, "fleet": {"workers": 1}}
    routed = json.loads(run((one, workload, timing)))
    plain = json.loads(run(({**one, "routing": {"policy": "round_robin"}}, workload, timing)))
    for report in (routed, plain):
        report["inputs"]["scenario"] = None
        for entry in report["requests"]:
            entry["cached_blocks_at_routing"] = None
    assert routed == plain


@pytest.mark.parametrize(
    "wanted",
    [
        pytest.param(lambda s: s["routing"].get("prefill_weight") == 0, id="prefill weight 0"),
        pytest.param(lambda s: s["routing"].get("load_weight") == 0, id="load weight 0"),
        pytest.param(lambda s: s["fleet"]["workers"] == 5, id="5 workers"),
        pytest.param(
            lambda s: s["routing"]["policy"] == "least_loaded" and "kv_cache" not in s,
            id="least loaded without a cache",
        ),
        pytest.param(lambda s: s["routing"]["policy"] == "random", id="random"),
    ],
)
def test_the_routed_strategy_reaches_every_kind_of_fleet(wanted: Any) -> None:
    """The strategy draws what section 12 needs tested (hypothesis.find fails if it cannot)."""
    scenario, _, _ = find(
        routed_input_triples(),
        lambda documents: wanted(documents[0]),
        settings=settings(max_examples=2000, phases=[Phase.generate], database=None),
    )
    data = json.dumps(scenario).encode()
    assert servesim.load_document(data, "scenario.json", "scenario").version == "1.2"


def _measured(documents: Documents) -> bool:
    return bool(documents[2]["model"]["kind"] != "synthetic_linear")


@pytest.mark.parametrize(
    ("strategy", "wanted"),
    [
        pytest.param(kv_input_triples(), _measured, id="measured timing x KV cache"),
        pytest.param(
            routed_input_triples(),
            lambda d: _measured(d) and d[0]["routing"]["policy"] == "cache_aware",
            id="measured timing x cache_aware",
        ),
        pytest.param(
            routed_input_triples(),
            lambda d: _measured(d) and d[0]["routing"]["policy"] == "least_loaded",
            id="measured timing x least_loaded",
        ),
        pytest.param(
            session_input_triples(kv_input_triples()),
            lambda d: _measured(d) and "stop_at_us" in d[0],
            id="measured timing x KV cache x stop time",
        ),
        pytest.param(
            session_input_triples(kv_input_triples()),
            lambda d: "closed_loop" in d[0] and "sessions" in d[1],
            id="KV cache x sessions x closed loop",
        ),
    ],
)
def test_the_strategies_draw_features_together(strategy: Any, wanted: Any) -> None:
    """Sections 10 to 13 are drawn together, not each alone (hypothesis.find fails if the
    strategy cannot draw the pair); golden/COVERAGE.md lists which strategy covers which."""
    find(
        strategy,
        wanted,
        settings=settings(max_examples=2000, phases=[Phase.generate], database=None),
    )
