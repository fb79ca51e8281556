"""The fleet invariants (``servesim_conformance.fleet_invariants``, SPEC.md R109 to R124): each
can fail, each passes on hand-derived reports, and the reference keeps them.

The two hand-derived cases share a scenario: a fleet of 2 workers (round robin, whole prefill,
a roomy cache without prefix caching, ``startup_us`` 100) timed by ``synthetic_linear`` with a
10 us step overhead, 1 us per prefill token and 5 us per decode, a schedule ``[{60, 3}, {90,
0}]``, and worker 1 failing at 50 with ``recover_after_us`` 30. A (0 us, prompt 10, 3 tokens)
goes to worker 0 and B (0 us, prompt 20, 4 tokens) to worker 1; C (85 us, prompt 5, 1 token)
comes later.

- Worker 0 runs A: 0 -> 20 (P 10), 20 -> 35, 35 -> 50: tokens 20, 35, 50, completed at 50.
- Worker 1 runs B: 0 -> 30 (P 20), 30 -> 45, and 45 -> 60, cut at 50 by the failure (R117):
  tokens 30 and 45 stand; B's cached tokens on worker 1 are 20 + 1 + 1 = 22 (the cut pass's
  decode included, R46): its lost tokens. ``busy_us`` 30 + 15 + 5 = 50.
- At 60 the schedule finds e = 1 (worker 1 failed) and adds workers 2 and 3, starting until 160
  (R111). At 80 worker 1 starts its recovery (starting until 180, R119). At 90 the target 0
  finds e = 4: it cancels 3, 2 and 1 (highest first) and drains worker 0 (R112).

*migrate* (``max_migrations`` 2): B migrates at 50 (R118) to the only routable worker, 0 (round
robin: nothing above 1, so the smallest, R114), as a request with 2 tokens that recomputes L =
22 tokens: 50 -> 82 (P 22) gives token 3 at 82 (R51), 82 -> 97 token 4. C at 85 joins worker 0
(still active; draining from 90), which runs it 97 -> 112 and is removed at 112. B recomputed
its 22 lost positions (no cache hit). The window is [0, 112]; worker time: worker 0 90 active +
22 draining, busy 112; worker 1 50 active + 10 starting (30 failed); workers 2 and 3 30
starting each.

*fail*: B fails at 50 (``worker_failure``) with its 2 tokens and 22 lost tokens. C at 85 joins
worker 0 (idle): 85 -> 100, completed at 100, when worker 0, draining since 90, is removed. The
window is [0, 100].

The hand reports hold the members the fleet invariants read (a full report 9.0 also has the
statistics and counts of sections 7 to 17, which these checks do not read).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim_conformance import fleet_invariants
from servesim_conformance.properties import reference_report
from servesim_conformance.strategies import (
    disaggregated_input_triples,
    fleet_input_triples,
    input_triples,
    kv_input_triples,
    pool_input_triples,
    routed_input_triples,
    session_input_triples,
    styled_input_triples,
)
from servesim_conformance.violations import InvariantViolation

Document = dict[str, Any]

HOUR = fleet_invariants.US_PER_HOUR


def scenario(policy: str) -> Document:
    failures: Document = {
        "events": [{"pool": "default", "pool_worker": 1, "at_us": 50, "recover_after_us": 30}],
        "policy": policy,
    }
    if policy == "migrate":
        failures["max_migrations"] = 2
    return {
        "document": "scenario",
        "schema_version": "1.7",
        "fleet": {
            "workers": 2,
            "scaling": {
                "startup_us": 100,
                "schedule": [{"at_us": 60, "target": 3}, {"at_us": 90, "target": 0}],
            },
        },
        "routing": {"policy": "round_robin"},
        "scheduler": {
            "max_num_seqs": 4,
            "max_batched_tokens": 64,
            "max_model_len": 100,
            "prefill": {"mode": "whole"},
        },
        "kv_cache": {"blocks": 1000, "block_tokens": 16, "prefix_caching": False},
        "failures": failures,
    }


def request(
    rid: str,
    worker: int,
    arrival: int,
    prompt: int,
    tokens: list[int],
    *,
    outcome: str = "completed",
    terminal: int | None = None,
    migrations: list[Document] | None = None,
    lost: int = 0,
    recomputed: int = 0,
) -> Document:
    completed = outcome == "completed"
    end = tokens[-1] if completed else terminal
    return {
        "id": rid,
        "worker": worker,
        "pool": "default",
        "rank": 0,
        "outcome": outcome,
        "reject_reason": None,
        "fail_reason": None if completed else "worker_failure",
        "prompt_tokens": prompt,
        "output_tokens": len(tokens),
        "arrival_us": arrival,
        "terminal_us": end,
        "first_scheduled_us": arrival,
        "first_token_us": tokens[0],
        "completion_us": end if completed else None,
        "e2e_us": end - arrival if completed and end is not None else None,
        "mean_itl_us": (
            (tokens[-1] - tokens[0]) / (len(tokens) - 1) if completed and len(tokens) > 1 else None
        ),
        "token_times_us": tokens,
        "handoff": None,
        "migrations": migrations or [],
        "lost_tokens": lost,
        "recomputed_tokens": recomputed,
    }


def worker(
    index: int,
    lifecycle: list[tuple[str, int]],
    spent: dict[str, int],
    busy: int,
    *,
    failures: int = 0,
    migrated_out: int = 0,
    failed_requests: int = 0,
    lost: int = 0,
) -> Document:
    paid = spent.get("starting", 0) + spent.get("active", 0) + spent.get("draining", 0)
    utilization = None if paid == 0 else busy / paid
    return {
        "worker": index,
        "pool": "default",
        "pool_worker": index,
        "ranks": [{"rank": 0, "busy_us": busy, "utilization": utilization}],
        "busy_us": busy,
        "utilization": utilization,
        "lifecycle": [{"state": state, "at_us": at} for state, at in lifecycle],
        "created_us": lifecycle[0][1],
        "worker_us": paid,
        **{f"{state}_us": spent.get(state, 0) for state in ("starting", "active", "draining")},
        "failed_us": spent.get("failed", 0),
        "failures": failures,
        "migrated_out": migrated_out,
        "failed_requests": failed_requests,
        "lost_tokens": lost,
    }


def step(worker: int, start: int, end: int, cut: int | None = None) -> Document:
    return {"worker": worker, "rank": 0, "start_us": start, "end_us": end, "cut_us": cut}


def report(policy: str) -> Document:
    """The hand-derived report of the module docstring's case under ``policy``."""
    migrate = policy == "migrate"
    end = 112 if migrate else 100
    a = request("A", 0, 0, 10, [20, 35, 50])
    if migrate:
        moved = {
            "at_us": 50,
            "worker": 1,
            "pool": "default",
            "rank": 0,
            "output_tokens": 2,
            "lost_tokens": 22,
        }
        b = request("B", 0, 0, 20, [30, 45, 82, 97], migrations=[moved], lost=22, recomputed=22)
        c = request("C", 0, 85, 5, [112])
        c["first_scheduled_us"] = 97
        w0_busy, w0_draining = 112, 22
    else:
        b = request("B", 1, 0, 20, [30, 45], outcome="failed", terminal=50, lost=22)
        c = request("C", 0, 85, 5, [100])
        w0_busy, w0_draining = 65, 10
    workers = [
        worker(
            0,
            [("active", 0), ("draining", 90), ("removed", end)],
            {"active": 90, "draining": w0_draining},
            w0_busy,
        ),
        worker(
            1,
            [("active", 0), ("failed", 50), ("starting", 80), ("removed", 90)],
            {"active": 50, "failed": 30, "starting": 10},
            50,
            failures=1,
            migrated_out=1 if migrate else 0,
            failed_requests=0 if migrate else 1,
            lost=22,
        ),
        worker(2, [("starting", 60), ("removed", 90)], {"starting": 30}, 0),
        worker(3, [("starting", 60), ("removed", 90)], {"starting": 30}, 0),
    ]
    pool_worker_us = sum(each["worker_us"] for each in workers)
    pool_busy = sum(each["busy_us"] for each in workers)
    pool = {
        "name": "default",
        "workers": 2,
        "busy_us": pool_busy,
        "utilization": pool_busy / pool_worker_us,
        "workers_created": 4,
        "peak_workers": 4,
        "worker_us": pool_worker_us,
        "worker_hours": pool_worker_us / HOUR,
        "failures": 1,
        "migrations": 1 if migrate else 0,
        "failed": 0 if migrate else 1,
    }
    if migrate:
        w0_steps = [(0, 20), (20, 35), (35, 50), (50, 82), (82, 97), (97, 112)]
    else:
        w0_steps = [(0, 20), (20, 35), (35, 50), (85, 100)]
    trace = [step(0, start, stop) for start, stop in w0_steps]
    trace += [step(1, 0, 30), step(1, 30, 45), step(1, 45, 60, cut=50)]
    trace.sort(key=lambda entry: (entry["start_us"], entry["worker"]))
    return {
        "document": "report",
        "schema_version": "9.0",
        "summary": {
            "requests": 3,
            "completed": 3 if migrate else 2,
            "rejected": 0,
            "cut_off": 0,
            "failed": 0 if migrate else 1,
            "rejected_by_reason": {"no_routable_worker": 0},
            "failed_by_reason": {
                "worker_failure": 0 if migrate else 1,
                "migration_limit": 0,
                "no_routable_worker": 0,
            },
            "first_arrival_us": 0,
            "makespan_us": end,
            "migrations": 1 if migrate else 0,
            "lost_tokens": 22,
            "recomputed_tokens": 22 if migrate else 0,
            "worker_us": pool_worker_us,
            "worker_hours": pool_worker_us / HOUR,
            "fleet": {
                "scale_ups": 2,
                "scale_downs": 4,
                "cancelled": 3,
                "drained": 1,
                "failures": 1,
                "ignored_failures": 0,
                "recoveries": 1,
            },
        },
        "pools": [pool],
        "workers": workers,
        "requests": [a, b, c],
        "trace": trace,
    }


@pytest.mark.parametrize("policy", ["migrate", "fail"])
def test_the_hand_derived_reports_keep_every_invariant(policy: str) -> None:
    fleet_invariants.check_fleet_report(scenario(policy), report(policy))


def test_the_hand_derived_figures() -> None:
    """The docstring's figures, so that a wrong hand derivation shows here first."""
    value = report("migrate")
    workers = value["workers"]
    assert [w["worker_us"] for w in workers] == [112, 60, 30, 30]
    assert value["summary"]["worker_us"] == 232
    assert value["requests"][1]["token_times_us"] == [30, 45, 82, 97]
    assert report("fail")["summary"]["worker_us"] == 220


def _set(pointer: str, value: Any) -> Callable[[Document], None]:
    def mutate(document: Document) -> None:
        *path, last = pointer.split("/")[1:]
        target: Any = document
        for token in path:
            target = target[int(token)] if isinstance(target, list) else target[token]
        target[int(last) if isinstance(target, list) else last] = value

    return mutate


def _both(*mutations: Callable[[Document], None]) -> Callable[[Document], None]:
    def mutate(document: Document) -> None:
        for each in mutations:
            each(document)

    return mutate


def _append(pointer: str, value: Any) -> Callable[[Document], None]:
    def mutate(document: Document) -> None:
        target: Any = document
        for token in pointer.split("/")[1:]:
            target = target[int(token)] if isinstance(target, list) else target[token]
        target.append(value)

    return mutate


def _nothing(document: Document) -> None:
    del document


Check = Callable[[Document, Document], None]
F = fleet_invariants
LIFECYCLES: Check = F.check_lifecycles
EVENTS: Check = F.check_failure_events
SCALING: Check = F.check_scaling
ROUTED: Check = F.check_routed_states
MIGRATIONS: Check = F.check_migrations
OUTCOMES: Check = F.check_outcomes
SUMS: Check = F.check_fleet_sums
TRACE: Check = F.check_trace_cuts


def WORKER_TIME(scenario: Document, report: Document) -> None:  # noqa: N802
    F.check_worker_time(report)


AUTOSCALE_1_TO_1 = {
    "interval_us": 40,
    "metric": "waiting_per_worker",
    "up_permille": 1000,
    "down_permille": 0,
    "min": 1,
    "max": 1,
}

#: name -> (policy of the case, report mutation, scenario mutation, check, rule)
MUTATIONS: dict[
    str, tuple[str, Callable[[Document], None], Callable[[Document], None], Check, str]
] = {
    "an edge R109 does not have": (
        "migrate",
        _set("/workers/1/lifecycle/2/state", "draining"),
        _nothing,
        LIFECYCLES,
        "R109",
    ),
    "an initial worker that begins starting": (
        "migrate",
        _set("/workers/0/lifecycle/0/state", "starting"),
        _nothing,
        LIFECYCLES,
        "R109",
    ),
    "active before the startup ends": (
        "migrate",
        _set("/workers/2/lifecycle/1/state", "active"),
        _nothing,
        LIFECYCLES,
        "R111",
    ),
    "a change after the last terminal time": (
        "migrate",
        _set("/workers/0/lifecycle/2/at_us", 120),
        _nothing,
        LIFECYCLES,
        "R113",
    ),
    "back from removed": (
        "migrate",
        _append("/workers/3/lifecycle", {"state": "active", "at_us": 100}),
        _nothing,
        LIFECYCLES,
        "R109",
    ),
    "an added worker's pool index skips": (
        "migrate",
        _set("/workers/3/pool_worker", 5),
        _nothing,
        LIFECYCLES,
        "R111",
    ),
    "a failure no event gives": (
        "migrate",
        _set("/workers/1/lifecycle/1/at_us", 55),
        _nothing,
        EVENTS,
        "R117",
    ),
    "a recovery at the wrong time": (
        "migrate",
        _set("/workers/1/lifecycle/2/at_us", 81),
        _nothing,
        EVENTS,
        "R119",
    ),
    "an event that failed no live worker": (
        "migrate",
        _both(
            _set("/workers/1/lifecycle", [{"state": "active", "at_us": 0}]),
            _set("/workers/1/failures", 0),
        ),
        _nothing,
        EVENTS,
        "R117",
    ),
    "recoveries miscounted": (
        "fail",
        _set("/summary/fleet/recoveries", 0),
        _nothing,
        EVENTS,
        "R123",
    ),
    "ignored failures miscounted": (
        "fail",
        _set("/summary/fleet/ignored_failures", 1),
        _nothing,
        EVENTS,
        "R116",
    ),
    "a schedule target not reached": (
        "migrate",
        _set("/workers/3/lifecycle/1/at_us", 60),
        _nothing,
        SCALING,
        "R110",
    ),
    "a reactive tick outside [min, max]": (
        "migrate",
        _nothing,
        _set("/fleet/scaling", {"startup_us": 100, "autoscale": AUTOSCALE_1_TO_1}),
        SCALING,
        "R115",
    ),
    "routed to a starting worker": (
        "migrate",
        _set("/requests/2/worker", 1),
        _nothing,
        ROUTED,
        "R114",
    ),
    "a migration routed to the failed worker": (
        "migrate",
        _set("/requests/1/worker", 1),
        _nothing,
        ROUTED,
        "R114",
    ),
    "a token produced twice": (
        "migrate",
        _set("/requests/1/token_times_us", [30, 45, 45, 97]),
        _nothing,
        MIGRATIONS,
        "R118",
    ),
    "output_tokens not the token times'": (
        "migrate",
        _set("/requests/1/output_tokens", 5),
        _nothing,
        MIGRATIONS,
        "R118",
    ),
    "a migration's output_tokens not the tokens by then": (
        "migrate",
        _set("/requests/1/migrations/0/output_tokens", 3),
        _nothing,
        MIGRATIONS,
        "R118",
    ),
    "a migration from a worker that did not fail": (
        "migrate",
        _set("/requests/1/migrations/0/worker", 0),
        _nothing,
        MIGRATIONS,
        "R117",
    ),
    "more recomputed than lost": (
        "migrate",
        _set("/requests/1/recomputed_tokens", 23),
        _nothing,
        MIGRATIONS,
        "R118",
    ),
    "lost tokens not the migrations'": (
        "migrate",
        _set("/requests/1/lost_tokens", 21),
        _nothing,
        MIGRATIONS,
        "R123",
    ),
    "migrated under policy fail": (
        "migrate",
        _nothing,
        _set("/failures", {"events": [], "policy": "fail"}),
        MIGRATIONS,
        "R118",
    ),
    "a completed request with a fail_reason": (
        "migrate",
        _set("/requests/0/fail_reason", "worker_failure"),
        _nothing,
        OUTCOMES,
        "R123",
    ),
    "a failed request with a completion": (
        "fail",
        _set("/requests/1/completion_us", 50),
        _nothing,
        OUTCOMES,
        "R118",
    ),
    "a failure's request failed at no failure": (
        "fail",
        _set("/requests/1/terminal_us", 51),
        _nothing,
        OUTCOMES,
        "R117",
    ),
    "worker_failure under policy migrate": (
        "fail",
        _nothing,
        _both(_set("/failures/policy", "migrate"), _set("/failures/max_migrations", 2)),
        OUTCOMES,
        "R118",
    ),
    "failed miscounted": (
        "fail",
        _set("/summary/failed", 0),
        _nothing,
        OUTCOMES,
        "R123",
    ),
    "failed_by_reason miscounted": (
        "fail",
        _set("/summary/failed_by_reason/migration_limit", 1),
        _nothing,
        OUTCOMES,
        "R123",
    ),
    "a state's time not the lifecycle's": (
        "migrate",
        _set("/workers/1/starting_us", 11),
        _nothing,
        WORKER_TIME,
        "R122",
    ),
    "worker_us not the sum of the states'": (
        "fail",
        _set("/workers/0/worker_us", 101),
        _nothing,
        WORKER_TIME,
        "R122",
    ),
    "busy over worker time": (
        "migrate",
        _set("/workers/2/busy_us", 31),
        _nothing,
        WORKER_TIME,
        "R122",
    ),
    "utilization over the makespan": (
        "migrate",
        _set("/workers/1/utilization", 50 / 112),
        _nothing,
        WORKER_TIME,
        "R122",
    ),
    "a pool's utilization over its initial workers": (
        "migrate",
        _set("/pools/0/utilization", 162 / 224),
        _nothing,
        WORKER_TIME,
        "R122",
    ),
    "a pool's worker_us not its workers'": (
        "migrate",
        _set("/pools/0/worker_us", 231),
        _nothing,
        SUMS,
        "R123",
    ),
    "peak_workers above the bound": (
        "migrate",
        _set("/pools/0/peak_workers", 5),
        _nothing,
        SUMS,
        "R123",
    ),
    "peak_workers below the bound": (
        "migrate",
        _set("/pools/0/peak_workers", 3),
        _nothing,
        SUMS,
        "R123",
    ),
    "cancellations miscounted": (
        "migrate",
        _set("/summary/fleet/cancelled", 2),
        _nothing,
        SUMS,
        "R123",
    ),
    "scale_downs miscounted": (
        "fail",
        _set("/summary/fleet/scale_downs", 3),
        _nothing,
        SUMS,
        "R123",
    ),
    "the summary's worker_us not the pools'": (
        "fail",
        _set("/summary/worker_us", 221),
        _nothing,
        SUMS,
        "R123",
    ),
    "a worker's failed_requests not its failed requests": (
        "fail",
        _both(_set("/workers/1/failed_requests", 0), _set("/workers/0/failed_requests", 1)),
        _nothing,
        SUMS,
        "R123",
    ),
    "a step cut by a failure without cut_us": (
        "migrate",
        _set("/trace/5/cut_us", None),
        _nothing,
        TRACE,
        "R117",
    ),
    "a step formed on a worker not yet created": (
        "migrate",
        _set("/trace/1/worker", 2),
        _nothing,
        TRACE,
        "R109",
    ),
    "a cut_us with no cause": (
        "migrate",
        _set("/trace/0/cut_us", 10),
        _nothing,
        TRACE,
        "R123",
    ),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_invariant_can_fail(name: str) -> None:
    policy, mutate_report, mutate_scenario, check, rule = MUTATIONS[name]
    value, derived = scenario(policy), report(policy)
    check(value, derived)  # the hand-derived report passes the same check
    broken_scenario, broken = copy.deepcopy(value), copy.deepcopy(derived)
    mutate_report(broken)
    mutate_scenario(broken_scenario)
    with pytest.raises(InvariantViolation, match=f"^{rule}:"):
        check(broken_scenario, broken)


def test_the_trace_mutation_hits_the_cut_step() -> None:
    """``/trace/5`` is worker 1's step 45 -> 60 in the migrate case (the mutations name it)."""
    entry = report("migrate")["trace"][5]
    assert (entry["worker"], entry["start_us"], entry["cut_us"]) == (1, 45, 50)


# --- R124: a fleet that never changes -----------------------------------------------------------


def as_report_9(value: Document) -> Document:
    """R124's step 8.0 -> 9.0, restated from the SPEC for these tests (the reference's own
    migration is another helper's work): what a fleet that never changes reports."""
    result = copy.deepcopy(value)
    makespan = result["summary"]["makespan_us"]
    result["schema_version"] = "9.0"
    for worker in result["workers"]:
        worker.update(
            lifecycle=[{"state": "active", "at_us": 0}],
            created_us=0,
            worker_us=makespan,
            active_us=makespan,
            starting_us=0,
            draining_us=0,
            failed_us=0,
            failures=0,
            migrated_out=0,
            failed_requests=0,
            lost_tokens=0,
        )
    for pool in result["pools"]:
        pool.update(
            workers_created=pool["workers"],
            peak_workers=pool["workers"],
            worker_us=pool["workers"] * makespan,
            worker_hours=pool["workers"] * makespan / HOUR,
            failures=0,
            migrations=0,
            failed=0,
        )
    for entry in result["requests"]:
        entry.update(migrations=[], fail_reason=None, lost_tokens=0, recomputed_tokens=0)
    summary = result["summary"]
    worker_us = sum(pool["worker_us"] for pool in result["pools"])
    summary["rejected_by_reason"]["no_routable_worker"] = 0
    summary.update(
        failed=0,
        failed_by_reason={"worker_failure": 0, "migration_limit": 0, "no_routable_worker": 0},
        migrations=0,
        lost_tokens=0,
        recomputed_tokens=0,
        worker_us=worker_us,
        worker_hours=worker_us / HOUR,
        fleet=dict.fromkeys(
            (
                "scale_ups",
                "scale_downs",
                "cancelled",
                "drained",
                "failures",
                "ignored_failures",
                "recoveries",
            ),
            0,
        ),
    )
    latest = max(entry["terminal_us"] for entry in result["requests"])
    for step_entry in result["trace"] or []:
        step_entry["cut_us"] = latest if step_entry["end_us"] > latest else None
    return result


static_triples = st.one_of(
    input_triples(),
    session_input_triples(),
    pool_input_triples(),
    styled_input_triples(),
    disaggregated_input_triples(),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=static_triples)
def test_a_fleet_that_never_changes_keeps_every_invariant(documents: tuple[Document, ...]) -> None:
    """R124: the 8.0 report of a fleet that never changes, migrated to 9.0, keeps every fleet
    invariant (sessions, stop times and their cut steps, pools, ranks, styles, disaggregation).
    Until the reference writes 9.0 its 8.0 report is migrated here by R124's rule."""
    value = json.loads(reference_report(documents))  # type: ignore[arg-type]
    if value["schema_version"] == "8.0":
        value = as_report_9(value)
    fleet_invariants.check_fleet_report(documents[0], value)


# --- The reference on generated fleets that change ----------------------------------------------


aggregated_triples = st.one_of(
    input_triples(),
    kv_input_triples(),
    session_input_triples(),
    session_input_triples(routed_input_triples()),
    pool_input_triples(),
    styled_input_triples(),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=fleet_input_triples(aggregated_triples))
def test_the_reference_keeps_every_fleet_invariant(documents: tuple[Document, ...]) -> None:
    """Generated aggregated fleets that change: schedules, reactive policies, startup times,
    failures with and without recovery under both policies, with sessions, stop times, chunked
    prefill, caches, state-aware routing, pools, ranks and styles."""
    value = json.loads(reference_report(documents))  # type: ignore[arg-type]
    fleet_invariants.check_fleet_report(documents[0], value)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=fleet_input_triples(disaggregated_input_triples()))
def test_the_reference_keeps_every_fleet_invariant_disaggregated(
    documents: tuple[Document, ...],
) -> None:
    """Generated disaggregated fleets that change (R121): failures of prefill and decode
    workers, re-handings, decode pools scaled to 0."""
    value = json.loads(reference_report(documents))  # type: ignore[arg-type]
    fleet_invariants.check_fleet_report(documents[0], value)
