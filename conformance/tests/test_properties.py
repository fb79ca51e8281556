"""The property tier: generated inputs through the harness, checked against the invariants.

``SERVESIM_PROPERTY_EXAMPLES`` sets how many inputs each property tries (default 25). With
``--differential`` (or ``SERVESIM_DIFFERENTIAL=1``) every report must also equal the reference's
bytes; a divergence is shrunk by hypothesis and the minimal case is written, ready to add to the
golden corpus, under ``--divergence-dir`` (default ``.servesim-divergence``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from servesim_conformance import (
    disagg_invariants,
    fleet_invariants,
    host_invariants,
    invariants,
    pool_invariants,
    style_invariants,
)
from servesim_conformance.implementation import Description, Implementation
from servesim_conformance.properties import (
    Documents,
    PropertyRunner,
    at_current_version,
    input_bytes,
    reads_continuing_sessions,
    reads_disaggregation,
    reads_fleet_changes,
    reads_host_tier,
    reads_kv_cache,
    reads_pools,
    reads_sessions,
    reads_state_aware_routing,
    reads_styles,
    reads_timing,
    reference_report,
    write_case,
)
from servesim_conformance.strategies import (
    broken_kv_input_triples,
    continuing_session_input_triples,
    disaggregated_host_input_triples,
    disaggregated_input_triples,
    fleet_input_triples,
    hashed_input_triples_without_cache,
    host_input_triples,
    input_triples,
    kv_input_triples,
    measured_input_triples,
    pool_input_triples,
    routed_input_triples,
    session_input_triples,
    styled_input_triples,
)

EXAMPLES = int(os.environ.get("SERVESIM_PROPERTY_EXAMPLES", "25"))
tier = settings(max_examples=EXAMPLES)


@pytest.fixture(scope="module")
def runner(implementation: Implementation) -> PropertyRunner:
    return PropertyRunner(implementation)


@tier
@given(documents=input_triples())
def test_single_run_invariants(runner: PropertyRunner, documents: Documents) -> None:
    """R9 to R11, R16 to R21, R25, R28 to R30 on one traced run."""
    scenario, workload, _ = documents
    report = runner.report(documents)
    invariants.check_report(scenario, workload, report)
    invariants.check_digests(input_bytes(documents), report)


@tier
@given(documents=input_triples())
def test_step_shapes_and_durations(runner: PropertyRunner, documents: Documents) -> None:
    """R22, R25, R30: every traced step's shape, its duration under the profile, the echo."""
    invariants.check_step_shapes(documents[2], runner.report(documents))


#: What an implementation must declare to be given measured timing profiles (R38).
MEASURED = {"timing.grid", "timing.regression"}


@tier
@given(documents=measured_input_triples())
def test_measured_profiles_single_run_invariants(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """R22, R41, R42 and the single-run invariants with grid and regression profiles."""
    if not description.features >= MEASURED or "1.1" not in description.schema_versions.get(
        "timing_profile", []
    ):
        pytest.skip(
            "the implementation does not declare timing profile 1.1 with grid and regression"
        )
    scenario, workload, timing = documents
    report = runner.report(documents)
    invariants.check_report(scenario, workload, report)
    invariants.check_step_shapes(timing, report)


@tier
@given(documents=input_triples())
def test_rerun_gives_identical_bytes(runner: PropertyRunner, documents: Documents) -> None:
    """R21: the same inputs give the same bytes."""
    assert runner.report_bytes(documents) == runner.report_bytes(documents)


def _check_shifted_arrivals(runner: PropertyRunner, documents: Documents, shift: int) -> None:
    """Shift every arrival of the workload by ``shift`` and check every time moves with it."""
    scenario, workload, timing = documents
    shifted: dict[str, Any] = json.loads(json.dumps(workload))
    for request in shifted["requests"]:
        request["arrival_us"] += shift
    before = runner.report(documents)
    after = runner.report((scenario, shifted, timing))
    invariants.check_arrival_shift(before, after, shift)


@tier
@given(documents=input_triples(), shift=st.integers(1, 10**9))
def test_shifting_arrivals_shifts_times(
    runner: PropertyRunner, documents: Documents, shift: int
) -> None:
    """R6, R7 (metamorphic): shifting every arrival by D shifts every time by D."""
    _check_shifted_arrivals(runner, documents, shift)


@tier
@given(documents=input_triples())
def test_differential_against_reference(
    runner: PropertyRunner, documents: Documents, pytestconfig: pytest.Config
) -> None:
    """Byte-for-byte agreement with the reference (only with --differential)."""
    _compare_with_reference(runner, documents, pytestconfig, folder="diverged")


def _compare_with_reference(
    runner: PropertyRunner, documents: Documents, pytestconfig: pytest.Config, *, folder: str
) -> None:
    """Fail, writing the case under ``--divergence-dir``/``folder``, unless the report has the
    reference's bytes; skip unless differential mode is on."""
    enabled = pytestconfig.getoption("--differential") or os.environ.get("SERVESIM_DIFFERENTIAL")
    if not enabled:
        pytest.skip("differential mode is off (--differential or SERVESIM_DIFFERENTIAL=1)")
    actual = at_current_version(runner.report_bytes(documents))
    expected = reference_report(documents)
    if actual != expected:
        target = Path(pytestconfig.getoption("--divergence-dir") or ".servesim-divergence")
        # Hypothesis calls this again with ever smaller inputs and last with the minimal one,
        # so the folder ends up holding the shrunk case.
        write_case(target / folder, documents, note="The implementation's report differs.")
        pytest.fail(f"report differs from the reference; case written to {target / folder}")


#: Each section's generated inputs need the implementation (and the reference) to read the
#: versions that section introduced: the ``properties.reads_*`` question and those versions.
SECTIONS: dict[str, tuple[Callable[[Description], bool], str]] = {
    "kv_cache": (reads_kv_cache, "scenario 1.1 and workload 1.1 (R53)"),
    "state_aware_routing": (reads_state_aware_routing, "scenario 1.2 and workload 1.1 (R57)"),
    "sessions": (reads_sessions, "scenario 1.3 and workload 1.2 (R64)"),
    "pools": (reads_pools, "scenario 1.4 (R86)"),
    "styles": (reads_styles, "scenario 1.5 (R96)"),
    "disaggregation": (reads_disaggregation, "scenario 1.6 (R108)"),
    "fleet_changes": (reads_fleet_changes, "scenario 1.7 (R124)"),
    "continuing_sessions": (reads_continuing_sessions, "workload 1.3 (R141)"),
    "host_tier": (reads_host_tier, "scenario 1.8 and workload 1.3 (R141)"),
}


def _needs(section: str, description: Description, documents: Documents | None = None) -> None:
    """Skip unless the implementation declares the versions of ``section`` (``SECTIONS``);
    reject a generated example whose timing it does not run (``_runs_timing``)."""
    declares, versions = SECTIONS[section]
    if not declares(description):
        pytest.skip(f"the implementation does not declare {versions}")
    _runs_timing(description, documents)


# --- KV cache, prefix caching and preemption (SPEC.md section 11) ------------------------------


def _runs_timing(description: Description, documents: Documents | None) -> None:
    """Runs with a cache, a state-aware router or sessions are drawn with measured timing as
    often as with synthetic (``strategies.kv_timing_profiles``): an implementation that does
    not declare the measured kind is given only the synthetic ones (``reads_timing``)."""
    if documents is not None:
        assume(reads_timing(description, documents[2]))


@tier
@given(documents=kv_input_triples())
def test_kv_cache_single_run_invariants(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """R45 to R52 with memory pressure: blocks in use within the cache and equal to the running
    requests' cached tokens, reuse in whole blocks below the prompt, every preempted request
    completed once, the cache counters adding up; and every invariant of sections 3 to 7."""
    _needs("kv_cache", description, documents)
    scenario, workload, timing = documents
    report = runner.report(documents)
    invariants.check_report(scenario, workload, report)
    invariants.check_step_shapes(timing, report)
    invariants.check_digests(input_bytes(documents), report)


@tier
@given(documents=kv_input_triples())
def test_kv_cache_hashes_change_nothing_with_prefix_caching_off(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """R47 (metamorphic): with prefix caching off no block is identified, so removing every
    prefix hash leaves the report as it was, but for the workload's digest."""
    _needs("kv_cache", description, documents)
    scenario, workload, timing = documents
    off = {**scenario, "kv_cache": {**scenario["kv_cache"], "prefix_caching": False}}
    with_hashes = runner.report((off, workload, timing))
    without = runner.report((off, invariants.without_prefix_hashes(workload), timing))
    invariants.check_hashes_change_nothing(with_hashes, without)


@tier
@given(documents=hashed_input_triples_without_cache())
def test_kv_cache_hashes_change_nothing_without_a_cache(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """R45, R47 (metamorphic): without ``kv_cache`` the hashes change nothing either."""
    _needs("kv_cache", description, documents)
    scenario, workload, timing = documents
    with_hashes = runner.report(documents)
    without = runner.report((scenario, invariants.without_prefix_hashes(workload), timing))
    invariants.check_hashes_change_nothing(with_hashes, without)


@tier
@given(documents=kv_input_triples(), shift=st.integers(1, 10**9))
def test_kv_cache_shifting_arrivals_shifts_times(
    runner: PropertyRunner, description: Description, documents: Documents, shift: int
) -> None:
    """R6, R7 (metamorphic) with a cache: blocks, reuse and preemptions depend on no clock."""
    _needs("kv_cache", description, documents)
    _check_shifted_arrivals(runner, documents, shift)


@tier
@given(documents=kv_input_triples())
def test_kv_cache_differential_against_reference(
    runner: PropertyRunner,
    description: Description,
    documents: Documents,
    pytestconfig: pytest.Config,
) -> None:
    """Byte-for-byte agreement with the reference on runs with a cache under memory pressure
    (only with --differential, and only when both read scenario and workload 1.1)."""
    _needs("kv_cache", description, documents)
    _compare_with_reference(runner, documents, pytestconfig, folder="diverged-kv-cache")


@tier
@given(case=broken_kv_input_triples())
def test_kv_cache_broken_inputs_are_rejected(
    runner: PropertyRunner, description: Description, case: tuple[str, Documents]
) -> None:
    """R3, R4, R5: a cache or hash member broken in one way is invalid input: exit 2 and no
    report (a block size that does not fit the hashes', too many hashes, hashes without their
    block size, a cache of no blocks, members at a version without them, a hash too big)."""
    _needs("kv_cache", description, case[1])
    fault, documents = case
    code, left_report = runner.rejects(documents)
    assert (code, left_report) == (2, False), f"{fault}: exit {code}, report left: {left_report}"


# --- State-aware routing (SPEC.md section 12) ---------------------------------------------------


@tier
@given(documents=routed_input_triples())
def test_state_aware_routing_single_run_invariants(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """R54 to R57 on 1 to 5 workers with shared prefixes and tight caches: least_loaded's
    choices rebuilt from the report, cached blocks at routing within what the worker's earlier
    requests left there, no worker certainly cheaper than cache_aware's choice; and every
    invariant of sections 3 to 7 and 11."""
    _needs("state_aware_routing", description, documents)
    scenario, workload, timing = documents
    report = runner.report(documents)
    invariants.check_report(scenario, workload, report)
    invariants.check_step_shapes(timing, report)


@tier
@given(documents=routed_input_triples(), shift=st.integers(1, 10**9))
def test_state_aware_routing_shifting_arrivals_shifts_times(
    runner: PropertyRunner, description: Description, documents: Documents, shift: int
) -> None:
    """R6, R7, R54 (metamorphic): what a router sees depends on order, not on the clock."""
    _needs("state_aware_routing", description, documents)
    _check_shifted_arrivals(runner, documents, shift)


@tier
@given(documents=routed_input_triples())
def test_state_aware_routing_differential_against_reference(
    runner: PropertyRunner,
    description: Description,
    documents: Documents,
    pytestconfig: pytest.Config,
) -> None:
    """Byte-for-byte agreement with the reference on state-aware routing (only with
    --differential, and only when both read scenario 1.2)."""
    _needs("state_aware_routing", description, documents)
    _compare_with_reference(runner, documents, pytestconfig, folder="diverged-routing")


# --- Sessions, closed loop, a stop time and goodput (SPEC.md section 13) -----------------------

#: Sessions, closed loop, stop time and objectives on every earlier kind of input.
session_triples = st.one_of(
    session_input_triples(),
    session_input_triples(kv_input_triples()),
    session_input_triples(routed_input_triples()),
)


@tier
@given(documents=session_triples)
def test_sessions_single_run_invariants(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """R59 to R64: turns never overlap and arrive at their release, at most N units in flight
    and each released when one ends, nothing at or after the stop time and everything unfinished
    cut off there, slo_met by R63's inclusive integer bounds, goodput within throughput, tpot_us
    over the completed requests with two tokens or more; and every invariant of sections 3 to
    7, 11 and 12."""
    _needs("sessions", description, documents)
    scenario, workload, timing = documents
    report = runner.report(documents)
    invariants.check_report(scenario, workload, report)
    invariants.check_step_shapes(timing, report)
    invariants.check_digests(input_bytes(documents), report)


@tier
@given(documents=session_triples)
def test_sessions_a_stop_after_every_terminal_time_changes_nothing(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """R62 (metamorphic): a stop time after the last terminal time changes nothing but the
    scenario's digest."""
    _needs("sessions", description, documents)
    scenario, workload, timing = documents
    free = {key: value for key, value in scenario.items() if key != "stop_at_us"}
    full = runner.report((free, workload, timing))
    last = max(entry["terminal_us"] for entry in full["requests"])
    late = runner.report(({**free, "stop_at_us": last + 1}, workload, timing))
    late["inputs"]["scenario"] = full["inputs"]["scenario"]
    assert late == full


@tier
@given(documents=session_triples)
def test_sessions_differential_against_reference(
    runner: PropertyRunner,
    description: Description,
    documents: Documents,
    pytestconfig: pytest.Config,
) -> None:
    """Byte-for-byte agreement with the reference on section 13 (only with --differential, and
    only when both read scenario 1.3 and workload 1.2)."""
    _needs("sessions", description, documents)
    _compare_with_reference(runner, documents, pytestconfig, folder="diverged-sessions")


# --- Pools and attention data parallelism (SPEC.md section 15) ----------------------------------


@tier
@given(documents=pool_input_triples())
def test_pools_single_run_invariants(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """R77 to R85 on 2 or 3 pools of 1 or 2 workers of 1 to 3 ranks (or one pool with
    ``fleet.dp_size``), under every policy: a worker's ranks start and end each pass together
    and its passes never overlap (R83); no rank's step exceeds its own pool's limits or cache
    (R78); a request runs on its own worker and rank only (R78, R85); weighted round robin keeps
    each worker within one request of its weight's share at every prefix (R81)."""
    _needs("pools", description, documents)
    scenario, _, _ = documents
    report = runner.report(documents)
    pool_invariants.check_pool_report(scenario, report)
    invariants.check_token_times(report)


@tier
@given(documents=pool_input_triples())
def test_pools_differential_against_reference(
    runner: PropertyRunner,
    description: Description,
    documents: Documents,
    pytestconfig: pytest.Config,
) -> None:
    """Byte-for-byte agreement with the reference on pools and ranks (only with
    --differential, and only when both read scenario 1.4)."""
    _needs("pools", description, documents)
    _compare_with_reference(runner, documents, pytestconfig, folder="diverged-pools")


# --- Scheduler styles (SPEC.md section 16) -------------------------------------------------------


@tier
@given(documents=styled_input_triples())
def test_styles_single_run_invariants(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """R88 to R95 on the three styles, with and without caches and pools: kinds follow shapes
    and styles follow pools; sglang never mixes prefill and decode nor preempts, and traces
    its ratio within R89's range; trtllm never preempts and reserves at most its cache; only
    sglang retracts, and retractions match the trace; every rank's step keeps its limits
    (R21, R78)."""
    _needs("styles", description, documents)
    scenario, _, _ = documents
    report = runner.report(documents)
    style_invariants.check_style_report(scenario, report)
    pool_invariants.check_rank_limits(scenario, report)
    invariants.check_token_times(report)


@tier
@given(documents=styled_input_triples())
def test_styles_differential_against_reference(
    runner: PropertyRunner,
    description: Description,
    documents: Documents,
    pytestconfig: pytest.Config,
) -> None:
    """Byte-for-byte agreement with the reference on the scheduler styles (only with
    --differential, and only when both read scenario 1.5)."""
    _needs("styles", description, documents)
    _compare_with_reference(runner, documents, pytestconfig, folder="diverged-styles")


# --- Disaggregated prefill and decode (SPEC.md section 17) ---------------------------------------


@tier
@given(documents=disaggregated_input_triples())
def test_disaggregation_single_run_invariants(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """R97 to R107 on generated disaggregated fleets (tight decode caches, every decode
    policy, ranks, both styles, sessions, a closed loop and stop times): stamps in phase
    order, no client token before the activation, transfers by R103's formula, no prefill
    worker emitting a token, counts that add up; every rank's step keeps its limits."""
    _needs("disaggregation", description, documents)
    scenario, _, _ = documents
    report = runner.report(documents)
    disagg_invariants.check_disaggregated_report(scenario, report)
    pool_invariants.check_rank_limits(scenario, report)
    invariants.check_token_times(report)


@tier
@given(documents=disaggregated_input_triples())
def test_disaggregation_differential_against_reference(
    runner: PropertyRunner,
    description: Description,
    documents: Documents,
    pytestconfig: pytest.Config,
) -> None:
    """Byte-for-byte agreement with the reference on disaggregated fleets (only with
    --differential, and only when both read scenario 1.6)."""
    _needs("disaggregation", description, documents)
    _compare_with_reference(runner, documents, pytestconfig, folder="diverged-disaggregation")


# --- A fleet that changes (SPEC.md section 18) ---------------------------------------------------

#: Fleets that change over every aggregated kind of input (``fleet_input_triples``' bases but
#: the disaggregated one, which has its own properties below).
aggregated_fleet_triples = fleet_input_triples(
    st.one_of(
        input_triples(),
        kv_input_triples(),
        session_input_triples(),
        session_input_triples(routed_input_triples()),
        pool_input_triples(),
        styled_input_triples(),
    )
)


def _check_fleet_run(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    _needs("fleet_changes", description, documents)
    scenario, _, _ = documents
    report = runner.report(documents)
    fleet_invariants.check_fleet_report(scenario, report)
    invariants.check_token_times(report)


@tier
@given(documents=aggregated_fleet_triples)
def test_fleet_changes_single_run_invariants(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """R109 to R123 on generated fleets that change (schedules, reactive policies, startup
    times, failures with and without recovery under both policies, over plain, cached,
    session, pool and styled inputs): lifecycles along R109's edges only, every failure an
    input event and every recovery on time, schedule targets reached and reactive bounds kept,
    no request routed to a worker that is not active, no token produced twice, one terminal
    state per request, worker time the lifecycle's within the window, the sums of pools and
    summary, steps cut at failures."""
    _check_fleet_run(runner, description, documents)


@tier
@given(documents=fleet_input_triples(disaggregated_input_triples()))
def test_fleet_changes_disaggregated_single_run_invariants(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """The same on disaggregated fleets that change (R121: prefill and decode failures,
    re-handings, decode pools scaled to 0)."""
    _check_fleet_run(runner, description, documents)


@tier
@given(documents=aggregated_fleet_triples)
def test_fleet_changes_differential_against_reference(
    runner: PropertyRunner,
    description: Description,
    documents: Documents,
    pytestconfig: pytest.Config,
) -> None:
    """Byte-for-byte agreement with the reference on fleets that change (only with
    --differential, and only when both read scenario 1.7)."""
    _needs("fleet_changes", description, documents)
    _compare_with_reference(runner, documents, pytestconfig, folder="diverged-fleet-changes")


@tier
@given(documents=fleet_input_triples(disaggregated_input_triples()))
def test_fleet_changes_disaggregated_differential_against_reference(
    runner: PropertyRunner,
    description: Description,
    documents: Documents,
    pytestconfig: pytest.Config,
) -> None:
    """The same on disaggregated fleets that change."""
    _needs("fleet_changes", description, documents)
    _compare_with_reference(
        runner, documents, pytestconfig, folder="diverged-fleet-changes-disaggregated"
    )


# --- Multi-turn reuse and the host KV tier (SPEC.md section 19) -----------------------------------

#: Host pools over every kind of input that has a cache (``host_input_triples``' bases:
#: cached, session, continuing-session, pool and styled triples) and over disaggregated fleets
#: with continuing sessions.
host_triples = st.one_of(
    host_input_triples(),
    disaggregated_host_input_triples(),
)


@tier
@given(documents=continuing_session_input_triples())
def test_continuing_sessions_single_run_invariants(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """R125 to R128 on generated sessions whose turns extend (cached, state-aware and pool
    inputs, stop times, a closed loop): the host tier's invariants (here: every host member
    null or 0, R141), token times, and every rank's step within its limits (pool triples have
    ranks, whose steps overlap, so sections 3 to 7's single-rank checks do not apply)."""
    _needs("continuing_sessions", description, documents)
    scenario, _, _ = documents
    report = runner.report(documents)
    host_invariants.check_host_report(scenario, report)
    pool_invariants.check_rank_limits(scenario, report)
    invariants.check_token_times(report)


@tier
@given(documents=host_triples)
def test_host_tier_single_run_invariants(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """R129 to R140 on generated host pools (small GPU caches and host pools, every bandwidth,
    shared prefixes, continuing sessions, stop times, pools, ranks, styles, disaggregation):
    entries within the pool, FIFO lanes lasting R130's time, counts and gigabytes that add up,
    no pending or pinned entry evicted, no block used before its load completes, reuse per tier
    summing to the reuse, load waits of the completed loads; every rank's step keeps its
    limits."""
    _needs("host_tier", description, documents)
    scenario, _, _ = documents
    report = runner.report(documents)
    host_invariants.check_host_report(scenario, report)
    pool_invariants.check_rank_limits(scenario, report)
    invariants.check_token_times(report)


@tier
@given(documents=host_triples)
def test_host_tier_rerun_gives_identical_bytes(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """R21 with host pools: the same inputs give the same bytes, with and without the trace."""
    _needs("host_tier", description, documents)
    assert runner.report_bytes(documents) == runner.report_bytes(documents)
    untraced = runner.report_bytes(documents, trace=False)
    assert untraced == runner.report_bytes(documents, trace=False)


@tier
@given(documents=continuing_session_input_triples())
def test_continuing_sessions_differential_against_reference(
    runner: PropertyRunner,
    description: Description,
    documents: Documents,
    pytestconfig: pytest.Config,
) -> None:
    """Byte-for-byte agreement with the reference on continuing sessions (only with
    --differential, and only when both read workload 1.3)."""
    _needs("continuing_sessions", description, documents)
    _compare_with_reference(runner, documents, pytestconfig, folder="diverged-continuing-sessions")


@tier
@given(documents=host_triples)
def test_host_tier_differential_against_reference(
    runner: PropertyRunner,
    description: Description,
    documents: Documents,
    pytestconfig: pytest.Config,
) -> None:
    """Byte-for-byte agreement with the reference on host pools (only with --differential, and
    only when both read scenario 1.8 and workload 1.3)."""
    _needs("host_tier", description, documents)
    _compare_with_reference(runner, documents, pytestconfig, folder="diverged-host-tier")
