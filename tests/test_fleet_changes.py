"""Section 18, a fleet that changes (SPEC.md R109 to R124): hand-derived scenario tests.

Every expected value is worked out from SPEC.md in the comments, not copied from output.
Unless a test says otherwise: the timing profile is ``synthetic_linear`` with
step_overhead_ns 10,000, prefill_token_ns 1,000 and decode_token_ns 0, so by R22 a step lasts
``10 + P`` µs (P its prefill tokens) and a decode-only step 10 µs; one pool ``default``;
max_num_seqs 8, max_batched_tokens 100, whole prefill; round robin; no cache. "A (0, 10, 3)"
is request A arriving at 0 with a prompt of 10 tokens and 3 output tokens.
"""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

import servesim
from servesim.contract.canonical import canonical_bytes
from servesim.contract.errors import InvalidInput
from servesim.contract.migrations import CHAIN, report_8_0_to_9_0
from tests.helpers import (
    as_report_8_0,
    as_report_9_0,
    replay_args,
    run_servesim,
    timing_doc,
    write_inputs,
)

PROFILE = {"step_overhead_ns": 10_000, "prefill_token_ns": 1_000, "decode_token_ns": 0}
HOUR_US = 3_600_000_000

Request = tuple[str, int, int, int]


def scheduler(max_num_seqs: int = 8, *, chunk: int | None = None) -> dict[str, Any]:
    prefill: dict[str, Any] = {"mode": "whole"}
    if chunk is not None:
        prefill = {"mode": "chunked", "max_chunk_tokens": chunk}
    return {
        "max_num_seqs": max_num_seqs,
        "max_batched_tokens": 100,
        "max_model_len": 1000,
        "prefill": prefill,
    }


def scenario(
    workers: int = 1,
    *,
    scaling: dict[str, Any] | None = None,
    failures: dict[str, Any] | None = None,
    routing: dict[str, Any] | None = None,
    pools: list[dict[str, Any]] | None = None,
    **members: Any,
) -> dict[str, Any]:
    """A scenario 1.7: ``fleet.workers`` (with ``fleet.scaling``) or ``pools``."""
    fleet: dict[str, Any] = {"workers": workers} if pools is None else {"pools": pools}
    if scaling is not None:
        fleet["scaling"] = scaling
    document: dict[str, Any] = {
        "document": "scenario",
        "schema_version": "1.7",
        "fleet": fleet,
        "routing": routing or {"policy": "round_robin"},
        "scheduler": scheduler(),
        **members,
    }
    if failures is not None:
        document["failures"] = failures
    return document


def workload(*requests: Request, **members: Any) -> dict[str, Any]:
    return {
        "document": "workload",
        "schema_version": "1.0",
        "requests": [
            {"id": i, "arrival_us": a, "prompt_tokens": p, "max_output_tokens": o}
            for i, a, p, o in requests
        ],
        **members,
    }


def fail(*events: tuple[int, int] | tuple[int, int, int], policy: str = "migrate", limit: int = 1):
    """``failures`` of pool ``default``: (pool_worker, at_us[, recover_after_us]) each."""
    listed = []
    for event in events:
        entry = {"pool": "default", "pool_worker": event[0], "at_us": event[1]}
        if len(event) == 3:
            entry["recover_after_us"] = event[2]
        listed.append(entry)
    value: dict[str, Any] = {"events": listed, "policy": policy}
    if policy == "migrate":
        value["max_migrations"] = limit
    return value


def replay(
    tmp_path: Path,
    scen: dict[str, Any],
    work: dict[str, Any],
    *,
    trace: bool = True,
    raw: bool = False,
) -> Any:
    paths = write_inputs(tmp_path, scen, work, timing_doc(**PROFILE))
    report = servesim.replay(*paths.values(), trace=trace)
    return report if raw else json.loads(report)


def problems(tmp_path: Path, scen: dict[str, Any], work: dict[str, Any] | None = None):
    """The (pointer, message) of every problem the scenario (and workload) give."""
    with pytest.raises(InvalidInput) as caught:
        replay(tmp_path, scen, work or workload(("A", 0, 10, 1)))
    return [(problem.pointer, problem.message) for problem in caught.value.problems]


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {request["id"]: request for request in report["requests"]}


def lifecycle(report: dict[str, Any], worker: int) -> list[tuple[str, int]]:
    return [(entry["state"], entry["at_us"]) for entry in report["workers"][worker]["lifecycle"]]


def workers_of(report: dict[str, Any]) -> dict[str, int]:
    return {request["id"]: request["worker"] for request in report["requests"]}


# A long request that keeps a run alive: (0, 10, 20) on an idle worker takes 0-20 for its
# prefill (token 1 at 20) and 19 decode steps of 10 µs: tokens at 30, ..., 210; terminal 210.
KEEPER: Request = ("K", 0, 10, 20)


# --- R109 ---------------------------------------------------------------------------------


def test_r109_only_active_workers_are_routable(tmp_path: Path) -> None:
    # 2 workers; at 0 the schedule brings the pool to 3: worker 2 starting 0-100 (startup 100).
    # A (10), B (20), C (30) choose among {0, 1}: A -> 0 (no last), B -> 1, C -> 0 (nothing
    # above 1). At 100 worker 2 is active: D (150) -> 1 (next above last 0), E (160) -> 2.
    report = replay(
        tmp_path,
        scenario(2, scaling={"startup_us": 100, "schedule": [{"at_us": 0, "target": 3}]}),
        workload(
            *[(name, t, 10, 1) for name, t in zip("ABCDE", (10, 20, 30, 150, 160), strict=True)]
        ),
    )
    assert workers_of(report) == {"A": 0, "B": 1, "C": 0, "D": 1, "E": 2}
    assert lifecycle(report, 2) == [("starting", 0), ("active", 100)]


def test_r109_lifecycle_transitions_follow_the_listed_edges(tmp_path: Path) -> None:
    # 2 workers, startup 50; at 0 target 4: workers 2 and 3 starting; at 20 target 2 (e = 4):
    # cancel 3, then 2 (both starting, highest first), removed at 20. Worker 1 fails at 30
    # with recover_after_us 40: failed 30, recovery start at 70 (starting), active at 120.
    # K on worker 0 keeps the run alive to 210.
    report = replay(
        tmp_path,
        scenario(
            2,
            scaling={
                "startup_us": 50,
                "schedule": [{"at_us": 0, "target": 4}, {"at_us": 20, "target": 2}],
            },
            failures=fail((1, 30, 40)),
        ),
        workload(KEEPER),
    )
    assert lifecycle(report, 0) == [("active", 0)]
    assert lifecycle(report, 1) == [
        ("active", 0),
        ("failed", 30),
        ("starting", 70),
        ("active", 120),
    ]
    assert lifecycle(report, 2) == [("starting", 0), ("removed", 20)]
    assert lifecycle(report, 3) == [("starting", 0), ("removed", 20)]
    edges = {
        ("starting", "active"),
        ("starting", "removed"),
        ("active", "draining"),
        ("draining", "removed"),
        ("starting", "failed"),
        ("active", "failed"),
        ("draining", "failed"),
        ("failed", "starting"),
        ("failed", "active"),
    }
    for worker in range(4):
        states = [state for state, _ in lifecycle(report, worker)]
        assert all(pair in edges for pair in itertools.pairwise(states))
    assert report["summary"]["fleet"]["recoveries"] == 1


# --- R110 ---------------------------------------------------------------------------------


def test_r110_schedule_target_counts_active_and_starting(tmp_path: Path) -> None:
    # 1 worker, startup 100. At 0 target 3: e = 1, workers 1 and 2 added (starting to 100).
    # At 50 target 3: e = 1 active + 2 starting = 3, nothing. At 60 target 2: e = 3, one taken
    # away: the highest starting, worker 2, is cancelled.
    schedule = [{"at_us": 0, "target": 3}, {"at_us": 50, "target": 3}, {"at_us": 60, "target": 2}]
    report = replay(
        tmp_path, scenario(scaling={"startup_us": 100, "schedule": schedule}), workload(KEEPER)
    )
    fleet = report["summary"]["fleet"]
    assert (fleet["scale_ups"], fleet["scale_downs"], fleet["cancelled"]) == (2, 1, 1)
    assert report["pools"][0]["workers_created"] == 3
    assert report["pools"][0]["peak_workers"] == 3
    assert lifecycle(report, 1) == [("starting", 0), ("active", 100)]
    assert lifecycle(report, 2) == [("starting", 0), ("removed", 60)]


def test_r110_schedule_times_must_increase(tmp_path: Path) -> None:
    schedule = [{"at_us": 10, "target": 2}, {"at_us": 20, "target": 1}, {"at_us": 20, "target": 3}]
    found = problems(tmp_path, scenario(scaling={"schedule": schedule}))
    assert [pointer for pointer, _ in found] == ["/fleet/scaling/schedule/2/at_us"]
    pools = [{"name": "a", "workers": 1, "scaling": {"schedule": list(reversed(schedule))}}]
    found = problems(tmp_path, scenario(pools=pools))
    assert [pointer for pointer, _ in found] == ["/fleet/pools/0/scaling/schedule/1/at_us"]


def test_r110_target_zero_switches_the_pool_off(tmp_path: Path) -> None:
    # A (0, 10, 1) runs 0-20 on worker 0; at 5 target 0: worker 0 draining (it has A), removed
    # at 20 when A completes. B at 30 finds no candidate: rejected no_routable_worker (R114).
    report = replay(
        tmp_path,
        scenario(scaling={"schedule": [{"at_us": 5, "target": 0}]}),
        workload(("A", 0, 10, 1), ("B", 30, 10, 1)),
    )
    requests = by_id(report)
    assert requests["A"]["outcome"] == "completed"
    assert requests["B"]["outcome"] == "rejected"
    assert requests["B"]["reject_reason"] == "no_routable_worker"
    assert report["summary"]["rejected_by_reason"]["no_routable_worker"] == 1
    assert lifecycle(report, 0) == [("active", 0), ("draining", 5), ("removed", 20)]


def test_r110_creating_more_than_2_20_workers_exits_2(tmp_path: Path) -> None:
    # dp_size 1024: 1,024 workers are 2^20 ranks. A target of 1,025 at 1 would bring the
    # ranks created in the run to 1,025 * 1,024 > 2^20: R6's case, found at the decision.
    scen = scenario(1, scaling={"schedule": [{"at_us": 1, "target": 1025}]})
    scen["fleet"]["dp_size"] = 1024
    paths = write_inputs(tmp_path, scen, workload(KEEPER), timing_doc(**PROFILE))
    output = tmp_path / "report.json"
    result = run_servesim(*replay_args(paths, output))
    assert result.returncode == 2
    assert not output.exists()
    assert "R110" in result.stderr


# --- R111 ---------------------------------------------------------------------------------


def test_r111_new_workers_take_the_next_global_index_never_reused(tmp_path: Path) -> None:
    # Pools a (1 worker) and b (1 worker): N0 = 2. At 10 (pool order): a's new worker is 2
    # (pool_worker 1), then b's is 3 (pool_worker 1). At 20 b's target 1: worker 3 (the
    # highest active of b, idle) drained and removed. At 30 b's target 2: worker 4, pool_worker
    # 2: index 3 and pool_worker 1 are not reused.
    pools = [
        {"name": "a", "workers": 1, "scaling": {"schedule": [{"at_us": 10, "target": 2}]}},
        {
            "name": "b",
            "workers": 1,
            "scaling": {
                "schedule": [
                    {"at_us": 10, "target": 2},
                    {"at_us": 20, "target": 1},
                    {"at_us": 30, "target": 2},
                ]
            },
        },
    ]
    report = replay(tmp_path, scenario(pools=pools), workload(KEEPER))
    seen = [(w["worker"], w["pool"], w["pool_worker"], w["created_us"]) for w in report["workers"]]
    assert seen == [
        (0, "a", 0, 0),
        (1, "b", 0, 0),
        (2, "a", 1, 10),
        (3, "b", 1, 10),
        (4, "b", 2, 30),
    ]
    assert lifecycle(report, 3) == [("active", 10), ("draining", 20), ("removed", 20)]


def test_r111_startup_end_makes_the_worker_routable(tmp_path: Path) -> None:
    # docs/design/issue-27-fleet-changes.md, case 1: A (0, 10, 3) -> 0 (0-20, tokens 20, 30,
    # 40); the decision at 0 adds worker 1, starting until 100. B (50) -> 0 (50-70). C (120):
    # last 0, next above is 1 (120-140). D (130): nothing above 1 -> 0 (130-150).
    report = replay(
        tmp_path,
        scenario(scaling={"startup_us": 100, "schedule": [{"at_us": 0, "target": 2}]}),
        workload(("A", 0, 10, 3), ("B", 50, 10, 1), ("C", 120, 10, 1), ("D", 130, 10, 1)),
    )
    assert workers_of(report) == {"A": 0, "B": 0, "C": 1, "D": 0}
    requests = by_id(report)
    assert requests["C"]["token_times_us"] == [140]
    assert requests["D"]["token_times_us"] == [150]
    assert report["workers"][0]["busy_us"] == 20 + 10 + 10 + 20 + 20
    assert report["workers"][1]["busy_us"] == 20
    assert report["summary"]["fleet"]["scale_ups"] == 1


def test_r111_startup_zero_is_active_within_the_decision(tmp_path: Path) -> None:
    # 1 worker; at 40 target 2 with startup 0. B arrives at 40, before the decision (R113): it
    # joins worker 0, the only candidate. Worker 1 is active at 40 within the decision; C (41)
    # goes to it (last 0, next above is 1).
    report = replay(
        tmp_path,
        scenario(scaling={"schedule": [{"at_us": 40, "target": 2}]}),
        workload(("A", 0, 10, 10), ("B", 40, 10, 1), ("C", 41, 10, 1)),
    )
    assert workers_of(report) == {"A": 0, "B": 0, "C": 1}
    assert lifecycle(report, 1) == [("active", 40)]
    assert report["workers"][1]["created_us"] == 40


# --- R112 ---------------------------------------------------------------------------------


def test_r112_scale_down_cancels_the_highest_starting_worker_first(tmp_path: Path) -> None:
    # 2 workers, startup 1000; at 0 target 4 (workers 2, 3 starting until 1000); at 500 target
    # 3: worker 3 cancelled, removed at 500; worker 2 active at 1000. A (0, 10, 120) keeps the
    # run alive until 20 + 119 * 10 = 1210.
    schedule = [{"at_us": 0, "target": 4}, {"at_us": 500, "target": 3}]
    report = replay(
        tmp_path,
        scenario(2, scaling={"startup_us": 1000, "schedule": schedule}),
        workload(("A", 0, 10, 120)),
    )
    assert by_id(report)["A"]["terminal_us"] == 1210
    assert lifecycle(report, 2) == [("starting", 0), ("active", 1000)]
    assert lifecycle(report, 3) == [("starting", 0), ("removed", 500)]
    assert report["summary"]["fleet"]["cancelled"] == 1


def test_r112_scale_down_drains_the_highest_active_workers(tmp_path: Path) -> None:
    # 3 workers, startup 1000; at 0 target 4 (worker 3 starting); at 100 target 2: e = 4, two
    # taken away: worker 3 cancelled, then worker 2 (the highest active; idle) drained and
    # removed at 100. K is on worker 0.
    schedule = [{"at_us": 0, "target": 4}, {"at_us": 100, "target": 2}]
    report = replay(
        tmp_path,
        scenario(3, scaling={"startup_us": 1000, "schedule": schedule}),
        workload(KEEPER),
    )
    assert lifecycle(report, 1) == [("active", 0)]
    assert lifecycle(report, 2) == [("active", 0), ("draining", 100), ("removed", 100)]
    assert lifecycle(report, 3) == [("starting", 0), ("removed", 100)]
    fleet = report["summary"]["fleet"]
    assert (fleet["scale_downs"], fleet["cancelled"], fleet["drained"]) == (2, 1, 1)


def test_r112_a_draining_worker_is_removed_when_idle(tmp_path: Path) -> None:
    # 2 workers. A (0, 10, 1) -> 0 (0-20). B (1, 10, 50) -> 1: prefill 1-21, 49 decodes to
    # 21 + 490 = 511. At 20 target 1: worker 1 draining, keeps B, removed at 511. C (30) -> 0,
    # the only candidate (30-50). Window [0, 511]: worker 1 active 20, draining 491.
    report = replay(
        tmp_path,
        scenario(2, scaling={"schedule": [{"at_us": 20, "target": 1}]}),
        workload(("A", 0, 10, 1), ("B", 1, 10, 50), ("C", 30, 10, 1)),
    )
    assert workers_of(report) == {"A": 0, "B": 1, "C": 0}
    assert by_id(report)["B"]["terminal_us"] == 511
    assert lifecycle(report, 1) == [("active", 0), ("draining", 20), ("removed", 511)]
    worker = report["workers"][1]
    assert (worker["active_us"], worker["draining_us"], worker["worker_us"]) == (20, 491, 511)


def test_r112_an_idle_worker_is_drained_and_removed_at_the_decision(tmp_path: Path) -> None:
    # 2 workers; K -> 0; at 10 target 1: worker 1 (idle) draining and removed at 10.
    report = replay(
        tmp_path, scenario(2, scaling={"schedule": [{"at_us": 10, "target": 1}]}), workload(KEEPER)
    )
    assert lifecycle(report, 1) == [("active", 0), ("draining", 10), ("removed", 10)]
    assert report["workers"][1]["draining_us"] == 0
    assert report["workers"][1]["worker_us"] == 10


# --- R113 ---------------------------------------------------------------------------------


def test_r113_a_decision_is_last_at_its_instant(tmp_path: Path) -> None:
    # At 0 target 2 (startup 0): A and B arrive at 0, before the decision: both on worker 0.
    # C (1) -> 1.
    report = replay(
        tmp_path,
        scenario(scaling={"schedule": [{"at_us": 0, "target": 2}]}),
        workload(("A", 0, 10, 1), ("B", 0, 10, 1), ("C", 1, 10, 1)),
    )
    assert workers_of(report) == {"A": 0, "B": 0, "C": 1}


def test_r113_a_pass_ending_at_a_failure_instant_stands(tmp_path: Path) -> None:
    # A (0, 10, 1) on worker 0 ends at 20; worker 0 fails at 20: the completion comes first,
    # so A is completed, and the failure touches no request. B (100) -> 1.
    report = replay(
        tmp_path,
        scenario(2, failures=fail((0, 20))),
        workload(("A", 0, 10, 1), ("B", 100, 10, 1)),
    )
    requests = by_id(report)
    assert requests["A"]["outcome"] == "completed"
    assert requests["A"]["terminal_us"] == 20
    assert requests["A"]["migrations"] == []
    assert requests["B"]["worker"] == 1
    assert report["trace"][0]["cut_us"] is None
    assert lifecycle(report, 0) == [("active", 0), ("failed", 20)]
    assert report["workers"][0]["lost_tokens"] == 0


def test_r113_a_static_fleet_gives_the_migrated_8_0_report(tmp_path: Path) -> None:
    # A scenario 1.7 with a scaling that only gives a startup time (and no failures) has a fleet
    # that never changes; it takes section 18's loop, and its report is the one of the same
    # scenario without scaling, which is R124's migration of its 8.0 report, but for the
    # scenario's digest.
    requests = [("A", 0, 30, 4), ("B", 5, 20, 3), ("C", 7, 50, 2), ("D", 60, 10, 5)]
    plain = scenario(2)
    plain["scheduler"] = scheduler(chunk=16)
    changing = copy.deepcopy(plain)
    changing["fleet"]["scaling"] = {"startup_us": 7}
    static = replay(tmp_path, plain, workload(*requests))
    other = replay(tmp_path, changing, workload(*requests))
    assert other["inputs"]["scenario"] != static["inputs"]["scenario"]
    other["inputs"] = static["inputs"]
    assert other == static
    migrated = report_8_0_to_9_0(as_report_8_0(static))
    assert {**migrated, "schema_version": "9.0"} == as_report_9_0(static)  # R141: 10.0 written


def _changes(scenario: Path | str) -> bool:
    """The scenario has scaling or failures (section 18): its fleet may change."""
    value = json.loads(Path(scenario).read_text(encoding="utf-8"))
    fleet = value["fleet"]
    holders = fleet.get("pools", [fleet])
    return "failures" in value or any("scaling" in holder for holder in holders)


def test_r113_every_golden_case_through_section_18s_loop_is_unchanged(tmp_path: Path) -> None:
    """Every valid golden case, given a scaling with only ``startup_us`` 0 in every pool (so
    that its fleet takes section 18's event loop but never changes: no decision, no failure),
    gives its golden report, but for the scenario's digest (R113: without fleet events the
    order is R7's and R104's; R114: the candidates are every worker)."""
    from servesim_conformance.corpus import Expect, load_corpus
    from tests.golden_snapshots import GOLDEN

    # the section 18 cases (scaling or failures already in the scenario) are not static fleets
    cases = [
        case
        for case in load_corpus(GOLDEN).cases
        if case.expectation is Expect.REPORT and not _changes(case.input_paths()["scenario"])
    ]
    assert cases
    for case in cases:
        paths = case.input_paths()
        value = json.loads(Path(paths["scenario"]).read_text(encoding="utf-8"))
        value["schema_version"] = "1.7"
        holders = value["fleet"].get("pools", [value["fleet"]])
        for holder in holders:
            holder["scaling"] = {"startup_us": 0}
        changed = tmp_path / "scenario.json"
        changed.write_text(json.dumps(value), encoding="utf-8")
        profiles = case.pool_profiles() or paths["timing_profile"]
        report = json.loads(servesim.replay(changed, paths["workload"], profiles, trace=case.trace))
        expected = json.loads((case.folder / "expected-report.json").read_bytes())
        report["inputs"]["scenario"] = expected["inputs"]["scenario"]
        assert report == expected, case.id


def test_r113_fleet_events_after_the_last_terminal_time_are_dropped(tmp_path: Path) -> None:
    # Pool a (autoscale, interval 20) and pool b (schedule at 25); A (0, 10, 1) on worker 0
    # completes at 20, the last terminal time. The tick at 20, a failure at 20 and one at 30,
    # and the decision at 25 are not processed.
    pools = [
        {
            "name": "a",
            "workers": 1,
            "scaling": {
                "autoscale": {
                    "interval_us": 20,
                    "metric": "waiting_per_worker",
                    "up_permille": 1,
                    "down_permille": 0,
                    "min": 1,
                    "max": 2,
                }
            },
        },
        {"name": "b", "workers": 1, "scaling": {"schedule": [{"at_us": 25, "target": 3}]}},
    ]
    events = [
        {"pool": "a", "pool_worker": 0, "at_us": 20},
        {"pool": "b", "pool_worker": 0, "at_us": 30},
    ]
    report = replay(
        tmp_path,
        scenario(pools=pools, failures={"events": events, "policy": "fail"}),
        workload(("A", 0, 10, 1)),
    )
    assert report["summary"]["fleet"] == dict.fromkeys(
        (
            "cancelled",
            "drained",
            "failures",
            "ignored_failures",
            "recoveries",
            "scale_downs",
            "scale_ups",
        ),
        0,
    )
    assert [lifecycle(report, w) for w in range(len(report["workers"]))] == [[("active", 0)]] * 2


# --- R114 ---------------------------------------------------------------------------------


def test_r114_round_robin_next_candidate_after_last(tmp_path: Path) -> None:
    # 3 workers; R0..R3 (0..3) -> 0, 1, 2, 0. At 5 target 2: worker 2 draining (R2 runs 2-22).
    # R4 (6): last 0, next above among {0, 1} is 1. R5 (7): nothing above 1 -> 0. At 10 target
    # 3: e = 2 (draining does not count), worker 3 added, active at once. R6 (11): last 0 -> 1.
    # R7 (12): last 1, next above among {0, 1, 3} -> 3.
    report = replay(
        tmp_path,
        scenario(3, scaling={"schedule": [{"at_us": 5, "target": 2}, {"at_us": 10, "target": 3}]}),
        workload(*[(f"R{i}", t, 10, 1) for i, t in enumerate((0, 1, 2, 3, 6, 7, 11, 12))]),
    )
    assert [workers_of(report)[f"R{i}"] for i in range(8)] == [0, 1, 2, 0, 1, 0, 1, 3]
    assert lifecycle(report, 2) == [("active", 0), ("draining", 5), ("removed", 22)]


def test_r114_round_robin_after_a_failure_below_last(tmp_path: Path) -> None:
    # 4 workers; R0, R1, R2 (0, 1, 2) -> 0, 1, 2. Worker 1 fails at 3 for good (policy fail: R1
    # fails). R3 (4): last 2, next above among {0, 2, 3} -> 3 (Dynamo's cursor would give 0).
    # R4 (5): nothing above 3 -> 0. R5 (6): last 0 -> 2.
    report = replay(
        tmp_path,
        scenario(4, failures=fail((1, 3), policy="fail")),
        workload(*[(f"R{i}", t, 10, 1) for i, t in enumerate((0, 1, 2, 4, 5, 6))]),
    )
    assert [workers_of(report)[f"R{i}"] for i in range(6)] == [0, 1, 2, 3, 0, 2]
    assert by_id(report)["R1"]["fail_reason"] == "worker_failure"


def test_r114_random_draws_over_the_candidates(tmp_path: Path) -> None:
    # Seed 42, 4 workers; at 0 target 3: worker 3 (idle) drained and removed. R14's first three
    # draws with seed 42, mod 3, are 1, 1, 0 (docs/design/issue-27-fleet-changes.md, case 10;
    # mod 4 they would be 1, 3, 2): the requests at 1, 2, 3 join workers 1, 1, 0.
    report = replay(
        tmp_path,
        scenario(
            4,
            scaling={"schedule": [{"at_us": 0, "target": 3}]},
            routing={"policy": "random", "seed": 42},
        ),
        workload(("A", 1, 10, 1), ("B", 2, 10, 1), ("C", 3, 10, 1)),
    )
    assert workers_of(report) == {"A": 1, "B": 1, "C": 0}


def test_r114_weighted_round_robin_joining_worker_starts_at_zero(tmp_path: Path) -> None:
    # Pools a (weight 2) and b (weight 1), a worker each; b adds worker 2 at 3 (startup 0).
    # Current weights (w0, w1[, w2]), each routing adds the weights, the largest (lowest index
    # of equals) wins and gives back W:
    # r0 (W 3): (2, 1) -> w0, (-1, 1). r1: (1, 2) -> w1, (1, -1). r2: (3, 0) -> w0, (0, 0).
    # At 3 worker 2 enters at 0; W = 4. r3: (2, 1, 1) -> w0, (-2, 1, 1).
    # r4: (0, 2, 2) -> w1, (0, -2, 2). r5: (2, -1, 3) -> w2, (2, -1, -1).
    # r6: (4, 0, 0) -> w0.
    pools = [
        {"name": "a", "workers": 1, "weight": 2},
        {
            "name": "b",
            "workers": 1,
            "weight": 1,
            "scaling": {"schedule": [{"at_us": 3, "target": 2}]},
        },
    ]
    report = replay(
        tmp_path,
        scenario(pools=pools, routing={"policy": "weighted_round_robin"}),
        workload(*[(f"r{i}", t, 10, 1) for i, t in enumerate((0, 1, 2, 4, 5, 6, 7))]),
    )
    assert [workers_of(report)[f"r{i}"] for i in range(7)] == [0, 1, 0, 0, 1, 2, 0]


def test_r114_ties_among_candidates_only(tmp_path: Path) -> None:
    # Least loaded, 3 workers; at 0 target 2: worker 2 (idle) drained and removed. r0 (1):
    # tie (0, 0) -> 0. r1 (2): 1 has fewest -> 1. r2 (3): tie (1, 1) -> 0; worker 2, with 0
    # outstanding, is no candidate.
    report = replay(
        tmp_path,
        scenario(
            3,
            scaling={"schedule": [{"at_us": 0, "target": 2}]},
            routing={"policy": "least_loaded"},
        ),
        workload(("r0", 1, 10, 50), ("r1", 2, 10, 50), ("r2", 3, 10, 1)),
    )
    assert workers_of(report) == {"r0": 0, "r1": 1, "r2": 0}


def test_r114_no_routable_worker_rejects_and_fails(tmp_path: Path) -> None:
    # 1 worker, fails at 5, recovers at 105 (no scaling: startup 0). A (0, 10, 1) is in its
    # prefill (0-20, 10 tokens cached when formed): migrated at 5 (lost 10), its migration
    # arrival at 5 finds no candidate: failed no_routable_worker. B (10) is rejected
    # no_routable_worker. C (110) -> 0 (110-130).
    report = replay(
        tmp_path,
        scenario(1, failures=fail((0, 5, 100))),
        workload(("A", 0, 10, 1), ("B", 10, 10, 1), ("C", 110, 10, 1)),
    )
    requests = by_id(report)
    assert requests["A"]["outcome"] == "failed"
    assert requests["A"]["fail_reason"] == "no_routable_worker"
    assert requests["A"]["migrations"] == [
        {
            "at_us": 5,
            "worker": 0,
            "pool": "default",
            "rank": 0,
            "output_tokens": 0,
            "lost_tokens": 10,
        }
    ]
    assert requests["B"]["reject_reason"] == "no_routable_worker"
    assert requests["C"]["token_times_us"] == [130]
    summary = report["summary"]
    assert summary["failed_by_reason"] == {
        "migration_limit": 0,
        "no_routable_worker": 1,
        "worker_failure": 0,
    }
    assert summary["rejected_by_reason"]["no_routable_worker"] == 1
    assert lifecycle(report, 0) == [("active", 0), ("failed", 5), ("active", 105)]


# --- R115 ---------------------------------------------------------------------------------


def test_r115_ticks_from_interval_and_last_at_their_instant(tmp_path: Path) -> None:
    # max_num_seqs 1; interval 100, waiting_per_worker, up 1000 (more than 1 waiting a worker).
    # Z1..Z3 at 0 would make tick 0 high (2 waiting), but there is no tick at 0: they run 0-20,
    # 20-40, 40-60. At 100 A, B, C arrive, the worker admits A, and the tick, last, reads 2
    # waiting on 1 worker: 2000 > 1000, high: worker 1 added at 100 (startup 0). Were the tick
    # before the arrivals it would read 0. D (101) -> 1 (last 0).
    scen = scenario(
        scaling={
            "autoscale": {
                "interval_us": 100,
                "metric": "waiting_per_worker",
                "up_permille": 1000,
                "down_permille": 0,
                "min": 1,
                "max": 2,
            }
        }
    )
    scen["scheduler"] = scheduler(1)
    names = [("Z1", 0), ("Z2", 0), ("Z3", 0), ("A", 100), ("B", 100), ("C", 100), ("D", 101)]
    report = replay(tmp_path, scen, workload(*[(name, t, 10, 1) for name, t in names]))
    assert report["summary"]["fleet"]["scale_ups"] == 1
    assert lifecycle(report, 1) == [("active", 100)]
    assert workers_of(report)["D"] == 1


def test_r115_up_down_and_cooldown(tmp_path: Path) -> None:
    # max_num_seqs 1, prompt 90, 1 output: each request is one step of 100 µs. Interval 100,
    # waiting_per_worker, up 1000, down 500, min 1, max 3, cooldown 250.
    # R0..R5 at 50 -> worker 0: R0 50-150, R1 150-250, ... Tick 100: 5 waiting / 1: high ->
    # target 2, worker 1 (c = 100). R6..R9 at 150: last 0 -> R6 1, R7 0, R8 1, R9 0.
    # Tick 200: w0 waits R2 R3 R4 R5 R7 R9, w1 R8: 7/2 high, but 200 < 350: nothing; 300 alike.
    # Tick 400: w0 runs R3 (350-450), waits R4 R5 R7 R9; w1 idle: 4/2 = 4000 > 2000, high ->
    # target 3, worker 2 (c = 400). Ticks 500, 600 < 650: nothing. Tick 700: w0 runs R7
    # (650-750), waits R9: 1/3: 1000 < 1500, low -> target 2: worker 2 drained, removed at 700
    # (c = 700). Tick 800 < 950: nothing. R9 ends at 850, the last terminal time: tick 900
    # dropped.
    scen = scenario(
        scaling={
            "autoscale": {
                "interval_us": 100,
                "metric": "waiting_per_worker",
                "up_permille": 1000,
                "down_permille": 500,
                "min": 1,
                "max": 3,
                "cooldown_us": 250,
            }
        }
    )
    scen["scheduler"] = scheduler(1)
    requests = [(f"R{i}", 50, 90, 1) for i in range(6)] + [
        (f"R{i}", 150, 90, 1) for i in range(6, 10)
    ]
    report = replay(tmp_path, scen, workload(*requests))
    assert [workers_of(report)[f"R{i}"] for i in range(10)] == [0] * 6 + [1, 0, 1, 0]
    assert by_id(report)["R9"]["terminal_us"] == 850
    assert lifecycle(report, 1) == [("active", 100)]
    assert lifecycle(report, 2) == [("active", 400), ("draining", 700), ("removed", 700)]
    fleet = report["summary"]["fleet"]
    assert (fleet["scale_ups"], fleet["scale_downs"], fleet["drained"]) == (2, 1, 1)


def test_r115_min_clamp_ignores_cooldown(tmp_path: Path) -> None:
    # 2 workers, interval 100, outstanding_per_worker, up 500, min 2, max 3, cooldown 1000.
    # A (0, 10, 100) -> 0, B (1, 10, 100) -> 1. Tick 100: 2/2 = 2000 > 1000, high -> 3: worker 2
    # (c = 100). Worker 2 fails at 150 (idle), worker 1 at 160 (policy fail: B fails). Tick
    # 200: e = 1 < min: target 2 whatever the cooldown: worker 3 at 200 (pool_worker 3). Then
    # e = 2 and every tick to 1000 is in the cooldown (c = 200). A ends at 20 + 990 = 1010.
    pools = [
        {
            "name": "default",
            "workers": 2,
            "scaling": {
                "autoscale": {
                    "interval_us": 100,
                    "metric": "outstanding_per_worker",
                    "up_permille": 500,
                    "down_permille": 0,
                    "min": 2,
                    "max": 3,
                    "cooldown_us": 1000,
                }
            },
        }
    ]
    report = replay(
        tmp_path,
        scenario(pools=pools, failures=fail((2, 150), (1, 160), policy="fail")),
        workload(("A", 0, 10, 100), ("B", 1, 10, 100)),
    )
    assert report["summary"]["fleet"]["scale_ups"] == 2
    assert report["workers"][3]["created_us"] == 200
    assert report["workers"][3]["pool_worker"] == 3
    assert by_id(report)["B"]["fail_reason"] == "worker_failure"
    assert report["summary"]["fleet"]["failures"] == 2


def test_r115_kv_use_counts_held_blocks(tmp_path: Path) -> None:
    # A cache of 10 blocks of 10 tokens; interval 100, kv_use, up 500, down 100, min 1, max 2.
    # A (0, 60, 20): prefill 0-70, decode steps formed at 70, 80, 90, 100 (before the tick at
    # 100): 64 cached tokens, 7 blocks: 7000 > 5000, high -> worker 1 at 100.
    # A' (0, 30, 20): prefill 0-40, decodes formed at 40, ..., 100 (7): 37 tokens, 4 blocks:
    # neither high nor low (4000 > 1000). At 200: 47 tokens, 5 blocks: 5000 is not > 5000.
    # It ends at 40 + 190 = 230: no change.
    def run(prompt: int) -> dict[str, Any]:
        scen = scenario(
            scaling={
                "autoscale": {
                    "interval_us": 100,
                    "metric": "kv_use",
                    "up_permille": 500,
                    "down_permille": 100,
                    "min": 1,
                    "max": 2,
                }
            },
            kv_cache={"blocks": 10, "block_tokens": 10, "prefix_caching": False},
        )
        return replay(tmp_path, scen, workload(("A", 0, prompt, 20)))

    high = run(60)
    assert high["summary"]["fleet"]["scale_ups"] == 1
    assert high["workers"][1]["created_us"] == 100
    assert run(30)["summary"]["fleet"]["scale_ups"] == 0


def test_r115_invalid_bounds_are_reported_at_their_pointers(tmp_path: Path) -> None:
    policy = {
        "interval_us": 100,
        "metric": "kv_use",
        "up_permille": 500,
        "down_permille": 500,
        "min": 3,
        "max": 2,
    }
    found = problems(tmp_path, scenario(scaling={"autoscale": policy}))
    assert [pointer for pointer, _ in found] == [
        "/fleet/scaling/autoscale/down_permille",
        "/fleet/scaling/autoscale/min",
        "/fleet/scaling/autoscale/metric",
    ]
    policy.update(down_permille=100, min=2, max=3, metric="waiting_per_worker")
    pools = [{"name": "p", "workers": 1, "scaling": {"autoscale": policy}}]
    found = problems(tmp_path, scenario(pools=pools))
    assert [pointer for pointer, _ in found] == ["/fleet/pools/0/workers"]


# --- R116 ---------------------------------------------------------------------------------


def test_r116_failure_of_an_unknown_pool_worker_under_a_schedule_is_invalid(
    tmp_path: Path,
) -> None:
    # No scaling: worker 1 of a pool of 1 never exists.
    found = problems(tmp_path, scenario(1, failures=fail((1, 10))))
    assert [pointer for pointer, _ in found] == ["/failures/events/0/pool_worker"]
    # A decision at 10 creates worker 1 last at 10: a failure at 10 finds it not created yet,
    # one at 11 finds it.
    scaling = {"schedule": [{"at_us": 10, "target": 2}]}
    found = problems(tmp_path, scenario(1, scaling=scaling, failures=fail((1, 10))))
    assert [pointer for pointer, _ in found] == ["/failures/events/0/pool_worker"]
    report = replay(
        tmp_path, scenario(1, scaling=scaling, failures=fail((1, 11))), workload(KEEPER)
    )
    assert lifecycle(report, 1) == [("active", 10), ("failed", 11)]
    # An unknown pool.
    events = {"events": [{"pool": "x", "pool_worker": 0, "at_us": 1}], "policy": "fail"}
    found = problems(tmp_path, scenario(1, failures=events))
    assert [pointer for pointer, _ in found] == ["/failures/events/0/pool"]


def test_r116_failures_of_one_worker_must_not_overlap(tmp_path: Path) -> None:
    for events, pointer in [
        (((0, 10, 5), (0, 15)), "/failures/events/1/at_us"),  # 15 <= 10 + 5
        (((0, 10), (0, 20)), "/failures/events/1/at_us"),  # failed for good at 10
        (((0, 10, 5), (0, 10, 5)), "/failures/events/1/at_us"),  # not after
    ]:
        found = problems(tmp_path, scenario(1, failures=fail(*events)))
        assert [where for where, _ in found] == [pointer]
    # worker 1 (idle; K runs on worker 0): failed 10-15, active again, failed at 16
    report = replay(tmp_path, scenario(2, failures=fail((1, 10, 5), (1, 16))), workload(KEEPER))
    assert lifecycle(report, 1) == [("active", 0), ("failed", 10), ("active", 15), ("failed", 16)]


def test_r116_failure_of_a_worker_that_does_not_exist_under_autoscale_is_ignored(
    tmp_path: Path,
) -> None:
    policy = {
        "interval_us": 1000,
        "metric": "waiting_per_worker",
        "up_permille": 1000,
        "down_permille": 0,
        "min": 1,
        "max": 2,
    }
    report = replay(
        tmp_path,
        scenario(1, scaling={"autoscale": policy}, failures=fail((5, 10))),
        workload(KEEPER),
    )
    assert report["summary"]["fleet"]["ignored_failures"] == 1
    assert report["summary"]["fleet"]["failures"] == 0


# --- R117 ---------------------------------------------------------------------------------


def test_r117_failure_mid_decode_keeps_the_produced_tokens(tmp_path: Path) -> None:
    # docs/design/issue-27-fleet-changes.md, case 19: A (0, 10, 5) on worker 0: prefill 0-20
    # (token 20), decode 20-30 (token 30), decode formed at 30 (cached 12) ending at 40. Worker
    # 0 fails at 35: the step is cut, A keeps tokens 20 and 30, lost 12, migrates to worker 1:
    # L = 12, step 35-57, token 3 at 57, then 67, 77.
    report = replay(tmp_path, scenario(2, failures=fail((0, 35))), workload(("A", 0, 10, 5)))
    a = by_id(report)["A"]
    assert a["token_times_us"] == [20, 30, 57, 67, 77]
    assert (a["ttft_us"], a["e2e_us"], a["worker"], a["lost_tokens"]) == (20, 77, 1, 12)
    worker = report["workers"][0]
    assert (worker["busy_us"], worker["steps"], worker["output_tokens"]) == (35, 3, 2)


def test_r117_failure_mid_prefill_cuts_the_chunk(tmp_path: Path) -> None:
    # Chunks of 10: A (0, 30, 1) on worker 0: 0-20 (P 10), 20-40 (P 10) cut by the failure at
    # 30: busy 20 + 10; lost 20 (the cut chunk's tokens were cached when it was formed). A is
    # fresh again (k = 0) on worker 1: 30-50, 50-70, 70-90, token at 90; recomputed 20.
    scen = scenario(2, failures=fail((0, 30)))
    scen["scheduler"] = scheduler(chunk=10)
    report = replay(tmp_path, scen, workload(("A", 0, 30, 1)))
    a = by_id(report)["A"]
    assert (a["lost_tokens"], a["recomputed_tokens"], a["token_times_us"]) == (20, 20, [90])
    trace = [(s["worker"], s["start_us"], s["end_us"], s["cut_us"]) for s in report["trace"]]
    assert trace == [
        (0, 0, 20, None),
        (0, 20, 40, 30),
        (1, 30, 50, None),
        (1, 50, 70, None),
        (1, 70, 90, None),
    ]
    assert report["workers"][0]["busy_us"] == 30
    assert report["workers"][0]["prefill_tokens"] == 10


def test_r117_failure_while_idle_affects_no_request(tmp_path: Path) -> None:
    # Worker 1 fails at 5, idle. A (0, 10, 5) -> 0: tokens 20, 40, 50, 60, 70 (B joins the step
    # at 20: decode A + prefill B, 20-40). B (10): last 0, candidates {0} -> 0, done at 40.
    # Window [0, 70]: worker 1 worker_us 5, failed_us 65.
    report = replay(
        tmp_path, scenario(2, failures=fail((1, 5))), workload(("A", 0, 10, 5), ("B", 10, 10, 1))
    )
    assert workers_of(report) == {"A": 0, "B": 0}
    assert by_id(report)["A"]["token_times_us"] == [20, 40, 50, 60, 70]
    worker = report["workers"][1]
    assert (worker["worker_us"], worker["failed_us"], worker["lost_tokens"]) == (5, 65, 0)
    assert (worker["failures"], worker["migrated_out"], worker["failed_requests"]) == (1, 0, 0)


def prefix_workload(*requests: tuple[str, int, int, int, list[int]]) -> dict[str, Any]:
    return {
        "document": "workload",
        "schema_version": "1.1",
        "prefix_hash_block_tokens": 10,
        "requests": [
            {
                "id": i,
                "arrival_us": a,
                "prompt_tokens": p,
                "max_output_tokens": o,
                "prefix_hashes": h,
            }
            for i, a, p, o, h in requests
        ],
    }


CACHE = {"blocks": 64, "block_tokens": 10, "prefix_caching": True}


def test_r117_the_cache_and_registry_are_lost(tmp_path: Path) -> None:
    # Cache aware, 1 worker. A (0, 40, 1, hashes 1-4) runs 0-50 and registers its 4 blocks.
    # Without a failure B (100, same prefix) sees cached(w0, B) = 4 at its routing (R54, at most
    # floor(40 / 10)). With worker 0 failing at 60 and recovering at 70 its registry is empty:
    # B sees 0 and reuses nothing.
    work = prefix_workload(("A", 0, 40, 1, [1, 2, 3, 4]), ("B", 100, 40, 1, [1, 2, 3, 4]))
    routing = {"policy": "cache_aware"}
    control = by_id(replay(tmp_path, scenario(1, routing=routing, kv_cache=CACHE), work))["B"]
    assert control["cached_blocks_at_routing"] == 4
    failed = replay(
        tmp_path, scenario(1, routing=routing, kv_cache=CACHE, failures=fail((0, 60, 10))), work
    )
    b = by_id(failed)["B"]
    assert (b["cached_blocks_at_routing"], b["reused_prompt_tokens"]) == (0, 0)


# --- R118 ---------------------------------------------------------------------------------


def test_r118_migration_recomputes_prompt_plus_produced(tmp_path: Path) -> None:
    # Case 19 again: on worker 1 A is allotted L = prompt + 2 = 12 at once (whole mode,
    # recomputing), one step of 10 + 12 µs, after which it decodes its 2 tokens left.
    report = replay(tmp_path, scenario(2, failures=fail((0, 35))), workload(("A", 0, 10, 5)))
    steps = [s for s in report["trace"] if s["worker"] == 1]
    assert [(s["start_us"], s["end_us"], s["prefill_tokens"]) for s in steps] == [
        (35, 57, 12),
        (57, 67, 0),
        (67, 77, 0),
    ]
    assert by_id(report)["A"]["recomputed_tokens"] == 12


def test_r118_migration_limit_fails_the_request(tmp_path: Path) -> None:
    # max_migrations 1, 3 workers. A (0, 10, 1) -> 0; worker 0 fails at 5: lost 10, migrated
    # to 1 (last 0) at 5, step 5-25 (10 cached). Worker 1 fails at 8: lost 10 more, m = 1 =
    # the limit: failed migration_limit at 8, with one migration.
    report = replay(tmp_path, scenario(3, failures=fail((0, 5), (1, 8))), workload(("A", 0, 10, 1)))
    a = by_id(report)["A"]
    assert (a["outcome"], a["fail_reason"], a["terminal_us"]) == ("failed", "migration_limit", 8)
    assert len(a["migrations"]) == 1
    assert a["lost_tokens"] == 20
    assert (report["workers"][0]["migrated_out"], report["workers"][1]["failed_requests"]) == (1, 1)


def test_r118_policy_fail_fails_every_request_on_the_worker(tmp_path: Path) -> None:
    # A (0) -> 0, B (1) -> 1, C (2) -> 0 waits. Worker 0 fails at 5 (policy fail): A (running,
    # lost 10) and C (waiting, lost 0) fail worker_failure at 5; B completes at 21.
    report = replay(
        tmp_path,
        scenario(2, failures=fail((0, 5), policy="fail")),
        workload(("A", 0, 10, 1), ("B", 1, 10, 1), ("C", 2, 10, 1)),
    )
    requests = by_id(report)
    for name, lost in (("A", 10), ("C", 0)):
        assert requests[name]["outcome"] == "failed"
        assert requests[name]["fail_reason"] == "worker_failure"
        assert requests[name]["lost_tokens"] == lost
        assert requests[name]["completion_us"] is None
        assert requests[name]["e2e_us"] is None
    summary = report["summary"]
    assert (summary["completed"], summary["failed"], summary["rejected"]) == (1, 2, 0)
    assert summary["completed"] + summary["rejected"] + summary["cut_off"] + summary["failed"] == 3
    assert report["workers"][0]["failed_requests"] == 2


def test_r118_recomputed_tokens_at_most_lost_tokens(tmp_path: Path) -> None:
    # Prefix caching, round robin, 2 workers. D (0, 20, 1, hashes 1 2) -> 0: 0-30, registers 2
    # blocks. A (1, 30, 1, hashes 1 2 3) -> 1: one step 1-41. Worker 1 fails at 35: A lost 30,
    # migrates to 0 (the only candidate), where it reuses its 2 cached blocks (20 tokens) and
    # is allotted 10: step 35-55. Recomputed: positions 20-29 only, 10 <= 30.
    work = prefix_workload(("D", 0, 20, 1, [1, 2]), ("A", 1, 30, 1, [1, 2, 3]))
    report = replay(tmp_path, scenario(2, kv_cache=CACHE, failures=fail((1, 35))), work)
    a = by_id(report)["A"]
    assert (a["lost_tokens"], a["recomputed_tokens"], a["token_times_us"]) == (30, 10, [55])
    assert a["recomputed_tokens"] <= a["lost_tokens"]


# --- R119 ---------------------------------------------------------------------------------


def test_r119_recovery_after_downtime_and_startup_with_an_empty_cache(tmp_path: Path) -> None:
    # Startup 100, 1 worker with a prefix cache. A (0, 20, 1, hashes 1 2) runs 0-30. The worker
    # fails at 40 with recover_after_us 200: failed 40-240, starting 240-340, active from 340.
    # B (400, same prefix) reuses nothing there.
    work = prefix_workload(("A", 0, 20, 1, [1, 2]), ("B", 400, 20, 1, [1, 2]))
    report = replay(
        tmp_path,
        scenario(1, scaling={"startup_us": 100}, kv_cache=CACHE, failures=fail((0, 40, 200))),
        work,
    )
    assert lifecycle(report, 0) == [
        ("active", 0),
        ("failed", 40),
        ("starting", 240),
        ("active", 340),
    ]
    assert by_id(report)["B"]["reused_prompt_tokens"] == 0
    assert by_id(report)["B"]["token_times_us"] == [430]
    assert report["summary"]["fleet"]["recoveries"] == 1
    worker = report["workers"][0]
    # window [0, 430]: active 40 + 90, failed 200, starting 100
    assert (worker["active_us"], worker["failed_us"], worker["starting_us"]) == (130, 200, 100)


def test_r119_a_recovering_worker_may_be_cancelled(tmp_path: Path) -> None:
    # 2 workers, startup 100. Worker 1 fails at 50, recovery start at 150 (starting). At 200
    # target 1: e = 2 (0 active, 1 starting): worker 1, starting, is cancelled.
    report = replay(
        tmp_path,
        scenario(
            2,
            scaling={"startup_us": 100, "schedule": [{"at_us": 200, "target": 1}]},
            failures=fail((1, 50, 100)),
        ),
        workload(("A", 0, 10, 40)),
    )
    assert lifecycle(report, 1) == [
        ("active", 0),
        ("failed", 50),
        ("starting", 150),
        ("removed", 200),
    ]
    assert report["summary"]["fleet"]["cancelled"] == 1


def test_r119_a_draining_worker_that_fails_does_not_recover(tmp_path: Path) -> None:
    # A (0) -> 0 (0-20); B (1, 10, 10) -> 1 (prefill 1-21). At 10 target 1: worker 1 draining
    # (it has B). It fails at 20 with recover_after_us 10: failed for good, B (lost 10)
    # migrates to 0 at 20 (A's step ended at 20 first): prefill 20-40, 9 decodes to 130.
    report = replay(
        tmp_path,
        scenario(2, scaling={"schedule": [{"at_us": 10, "target": 1}]}, failures=fail((1, 20, 10))),
        workload(("A", 0, 10, 1), ("B", 1, 10, 10)),
    )
    assert lifecycle(report, 1) == [("active", 0), ("draining", 10), ("failed", 20)]
    assert report["summary"]["fleet"]["recoveries"] == 0
    assert by_id(report)["B"]["terminal_us"] == 130


# --- R120 ---------------------------------------------------------------------------------


def test_r120_a_failed_turn_releases_the_next_turn(tmp_path: Path) -> None:
    # Session s: t0 (0, 10, 5) on worker 0 fails at 25 (policy fail); t1 (think 50) is released
    # at 25 + 50 = 75 and runs 75-95 on worker 1 (last 0). Under migrate nothing is released
    # at 25: t0 (token 1 at 20; its decode 20-30 is cut) completes on worker 1 (L = 11 at
    # 25-46: token 2 at 46, then 56, 66, 76), then t1 arrives at 76 + 50 = 126.
    work = {
        "document": "workload",
        "schema_version": "1.2",
        "sessions": [{"id": "s"}],
        "requests": [
            {
                "id": "t0",
                "arrival_us": 0,
                "prompt_tokens": 10,
                "max_output_tokens": 5,
                "session": "s",
            },
            {
                "id": "t1",
                "arrival_us": 0,
                "prompt_tokens": 10,
                "max_output_tokens": 1,
                "session": "s",
                "think_time_us": 50,
            },
        ],
    }
    failed = by_id(replay(tmp_path, scenario(2, failures=fail((0, 25), policy="fail")), work))
    assert (failed["t0"]["outcome"], failed["t0"]["terminal_us"]) == ("failed", 25)
    assert (failed["t1"]["arrival_us"], failed["t1"]["token_times_us"]) == (75, [95])
    migrated = by_id(replay(tmp_path, scenario(2, failures=fail((0, 25))), work))
    assert migrated["t0"]["token_times_us"] == [20, 46, 56, 66, 76]
    assert migrated["t1"]["arrival_us"] == 126


def test_r120_a_failed_unit_releases_the_next_unit(tmp_path: Path) -> None:
    # Closed loop, one in flight: A (10, 5) on worker 0 fails at 25 (policy fail): B, the next
    # unit, is released at 25 and goes to worker 1 (last 0): 25-45.
    scen = scenario(2, failures=fail((0, 25), policy="fail"), closed_loop={"max_in_flight": 1})
    report = replay(tmp_path, scen, workload(("A", 0, 10, 5), ("B", 500, 10, 1)))
    b = by_id(report)["B"]
    assert (b["arrival_us"], b["worker"], b["token_times_us"]) == (25, 1, [45])


def test_r120_a_failure_at_the_stop_time_is_not_processed(tmp_path: Path) -> None:
    # Stop at 30; worker 0 fails at 30: not processed. A (0, 10, 5) is cut off at 30.
    report = replay(
        tmp_path,
        scenario(1, failures=fail((0, 30), policy="fail"), stop_at_us=30),
        workload(("A", 0, 10, 5)),
    )
    a = by_id(report)["A"]
    assert (a["outcome"], a["fail_reason"], a["terminal_us"]) == ("cut_off", None, 30)
    assert report["summary"]["fleet"]["failures"] == 0
    assert lifecycle(report, 0) == [("active", 0)]


def test_r120_goodput_excludes_failed_requests(tmp_path: Path) -> None:
    # TTFT objective 1000: A fails at 5 (policy fail), B completes at 21; goodput 1 request.
    report = replay(
        tmp_path,
        scenario(2, failures=fail((0, 5), policy="fail"), slo={"ttft_us": 1000}),
        workload(("A", 0, 10, 1), ("B", 1, 10, 1)),
    )
    requests = by_id(report)
    assert (requests["A"]["slo_met"], requests["B"]["slo_met"]) == (False, True)
    assert report["summary"]["goodput"]["requests"] == 1


# --- R121 ---------------------------------------------------------------------------------


def disaggregated(failures: dict[str, Any], decode_workers: int = 1) -> dict[str, Any]:
    cache = {"blocks": 64, "block_tokens": 10, "prefix_caching": False}
    return scenario(
        pools=[
            {"name": "p", "workers": 2, "role": "prefill", "kv_cache": cache},
            {"name": "d", "workers": decode_workers, "role": "decode", "kv_cache": cache},
        ],
        failures=failures,
        # 10 tokens are 10,000 bytes: 10 µs at 1,000 bytes/µs, after 0 base latency
        kv_transfer={
            "bytes_per_token": 1000,
            "bandwidth_bytes_per_s": 1_000_000_000,
            "base_latency_us": 0,
        },
    )


def test_r121_prefill_failure_during_a_transfer_migrates_from_the_prefill_side(
    tmp_path: Path,
) -> None:
    # Prefill workers 0, 1; decode worker 2. A (0, 10, 3) -> 0: prefill 0-20 (hidden token),
    # Held at 20, routed to 2, reserved at once, transferring 10 tokens 20-30. Worker 0 fails
    # at 25: the transfer is discarded, the decode blocks released; A (lost 10 held on 0)
    # migrates to the prefill side at 25: worker 1 (last 0): 25-45, transfer 45-55, activation
    # at 55; its decode steps give tokens 65, 75, 85.
    events = {
        "events": [{"pool": "p", "pool_worker": 0, "at_us": 25}],
        "policy": "migrate",
        "max_migrations": 1,
    }
    report = replay(tmp_path, disaggregated(events), workload(("A", 0, 10, 3)))
    a = by_id(report)["A"]
    assert a["lost_tokens"] == 10
    assert a["migrations"][0]["worker"] == 0
    assert a["handoff"]["prefill_end_us"] == 45
    assert a["handoff"]["activation_us"] == 55
    assert a["token_times_us"] == [65, 75, 85]


def test_r121_decode_failure_rehands_a_pending_request(tmp_path: Path) -> None:
    # Decode workers 2, 3. A (0, 10, 3) -> prefill 0: 0-20, Held, routed to decode 2, transfer
    # 20-30. Decode worker 2 fails at 25: A is Transferring to it, re-handed (a migration with
    # 0 lost tokens): Held again on 0, routed at 25 to decode 3 (last 2), transfer 25-35,
    # activation at 35, tokens 45, 55, 65. No second prefill.
    events = {
        "events": [{"pool": "d", "pool_worker": 0, "at_us": 25}],
        "policy": "migrate",
        "max_migrations": 1,
    }
    report = replay(tmp_path, disaggregated(events, decode_workers=2), workload(("A", 0, 10, 3)))
    a = by_id(report)["A"]
    assert (len(a["migrations"]), a["lost_tokens"]) == (1, 0)
    assert a["handoff"]["decode_worker"] == 3
    assert a["token_times_us"] == [45, 55, 65]
    assert report["workers"][0]["steps"] == 1


def test_r121_prefill_failure_leaves_a_ready_request_alone(tmp_path: Path) -> None:
    # X (0, 10, 10) -> prefill 0: 0-20, transfer 20-30, activated at 30 on decode 2, which
    # decodes from 30 (30-40, ...). A (1, 10, 3) -> prefill 1: 1-21, transfer 21-31: decode 2
    # is in its pass 30-40, so A is Ready. Prefill worker 1 fails at 35: A, whose KV is on its
    # decode worker already, is not affected: activated at 40, tokens 50, 60, 70.
    events = {
        "events": [{"pool": "p", "pool_worker": 1, "at_us": 35}],
        "policy": "migrate",
        "max_migrations": 1,
    }
    report = replay(tmp_path, disaggregated(events), workload(("X", 0, 10, 10), ("A", 1, 10, 3)))
    a = by_id(report)["A"]
    assert (a["migrations"], a["outcome"], a["lost_tokens"]) == ([], "completed", 0)
    assert (a["handoff"]["transfer_end_us"], a["handoff"]["activation_us"]) == (31, 40)
    assert a["token_times_us"] == [50, 60, 70]
    worker = report["workers"][1]
    assert (worker["failures"], worker["migrated_out"], worker["failed_requests"]) == (1, 0, 0)


def test_r121_a_migrated_request_keeps_its_last_handoff_until_the_next(tmp_path: Path) -> None:
    # A (0, 10, 5) -> prefill 0: 0-20, Held, decode 2 reserved at 20, transfer 20-30, activated
    # at 30; decode passes 30-40 (token 40), 40-50 cut by decode 2's failure at 45: A (k = 1)
    # migrates to the prefill side, worker 1 (last 0), L = 11: 45-66. The stop at 60 cuts it
    # off first: its last handoff is still the first one (R121: "its last handoff"), and that
    # transfer ended, so summary.transfers counts it.
    scen = disaggregated(
        {
            "events": [{"pool": "d", "pool_worker": 0, "at_us": 45}],
            "policy": "migrate",
            "max_migrations": 1,
        }
    )
    scen["stop_at_us"] = 60
    report = replay(tmp_path, scen, workload(("A", 0, 10, 5)))
    a = by_id(report)["A"]
    assert (a["outcome"], a["worker"], a["token_times_us"]) == ("cut_off", 1, [40])
    handoff = a["handoff"]
    assert (handoff["prefill_end_us"], handoff["decode_worker"], handoff["activation_us"]) == (
        20,
        2,
        30,
    )
    assert report["summary"]["transfers"]["count"] == 1


def test_r121_a_prefill_end_without_a_routable_decode_scheduler_fails(tmp_path: Path) -> None:
    # Decode worker 2, the only one, fails at 5 for good (nothing on it). A (0, 10, 3) ->
    # prefill 0: 0-20; Held at 20, no routable decode scheduler (R114): failed
    # no_routable_worker at 20, its prefill blocks released. Its handoff has its prefill end
    # and no decode stage (R107). No failure of a worker failed it (no failed_requests).
    events = {"events": [{"pool": "d", "pool_worker": 0, "at_us": 5}], "policy": "fail"}
    report = replay(tmp_path, disaggregated(events), workload(("A", 0, 10, 3)))
    a = by_id(report)["A"]
    assert (a["outcome"], a["fail_reason"], a["terminal_us"]) == (
        "failed",
        "no_routable_worker",
        20,
    )
    assert a["handoff"]["prefill_end_us"] == 20
    assert a["handoff"]["decode_worker"] is None
    assert a["handoff"]["reserved_us"] is None
    assert a["migrations"] == []
    assert report["summary"]["failed_by_reason"]["no_routable_worker"] == 1
    assert [w["failed_requests"] for w in report["workers"]] == [0, 0, 0]


def test_r121_itl_counts_the_gap_across_a_migration(tmp_path: Path) -> None:
    # Decode workers 2 and 3. A (0, 10, 5) -> prefill 0: 0-20, transfer to decode 2 20-30,
    # activated at 30: token 1 at 40; the pass 40-50 is cut by decode 2's failure at 45. A
    # (k = 1) migrates to prefill 1 (last 0): L = 11, 45-66; Held, decode 3, transfer of 11
    # tokens 66-77, activated at 77: tokens at 87, 97, 107, 117. R27's gaps: 47, 10, 10, 10.
    events = {
        "events": [{"pool": "d", "pool_worker": 0, "at_us": 45}],
        "policy": "migrate",
        "max_migrations": 1,
    }
    report = replay(tmp_path, disaggregated(events, decode_workers=2), workload(("A", 0, 10, 5)))
    assert by_id(report)["A"]["token_times_us"] == [40, 87, 97, 107, 117]
    itl = report["summary"]["itl_us"]
    assert (itl["count"], itl["min"], itl["max"], itl["mean"]) == (4, 10, 47, 77 / 4)


# --- R122 ---------------------------------------------------------------------------------


def test_r122_worker_time_by_hand(tmp_path: Path) -> None:
    # Case 1 of the design: window [0, 150]. Worker 0 active 150; worker 1 starting 0-100, active
    # 100-150: worker_us 150 each, 300 in all; worker_hours 300 / 3.6e9.
    report = replay(
        tmp_path,
        scenario(scaling={"startup_us": 100, "schedule": [{"at_us": 0, "target": 2}]}),
        workload(("A", 0, 10, 3), ("B", 50, 10, 1), ("C", 120, 10, 1), ("D", 130, 10, 1)),
    )
    w1 = report["workers"][1]
    assert (w1["starting_us"], w1["active_us"], w1["worker_us"]) == (100, 50, 150)
    assert report["workers"][0]["worker_us"] == 150
    assert report["pools"][0]["worker_us"] == report["summary"]["worker_us"] == 300
    assert report["summary"]["worker_hours"] == 300 / HOUR_US
    assert report["pools"][0]["worker_hours"] == 300 / HOUR_US


def test_r122_utilization_is_busy_over_worker_time(tmp_path: Path) -> None:
    # Case 19: worker 0 busy 35 over worker_us 35; worker 1 busy 22 + 10 + 10 = 42 over 77;
    # the pool 77 over 112.
    report = replay(tmp_path, scenario(2, failures=fail((0, 35))), workload(("A", 0, 10, 5)))
    assert report["workers"][0]["utilization"] == 35 / 35
    assert report["workers"][1]["utilization"] == 42 / 77
    assert report["workers"][1]["ranks"][0]["utilization"] == 42 / 77
    assert report["pools"][0]["utilization"] == 77 / 112


def test_r122_failed_time_is_reported_apart(tmp_path: Path) -> None:
    # Case 19: worker 0 active 0-35, failed 35-77: worker_us 35, failed_us 42.
    report = replay(tmp_path, scenario(2, failures=fail((0, 35))), workload(("A", 0, 10, 5)))
    worker = report["workers"][0]
    assert (worker["worker_us"], worker["active_us"], worker["failed_us"]) == (35, 35, 42)
    assert report["summary"]["worker_us"] == 35 + 77


# --- R123 ---------------------------------------------------------------------------------


def test_r123_lifecycle_and_worker_time_per_worker_pool_and_summary(tmp_path: Path) -> None:
    # Case 19 with a third worker added at 10 (startup 0). Worker 0 fails at 35, so at 50 e = 2
    # (workers 1, 2): target 1 drains worker 2 (the highest active, idle), removed at once. The
    # pool created 3, peak 3; worker 2's worker_us 40.
    report = replay(
        tmp_path,
        scenario(
            2,
            scaling={"schedule": [{"at_us": 10, "target": 3}, {"at_us": 50, "target": 1}]},
            failures=fail((0, 35)),
        ),
        workload(("A", 0, 10, 5)),
    )
    # A migrates at 35 to worker 1 (last 0 -> 1), as in case 19
    pool = report["pools"][0]
    assert (pool["workers"], pool["workers_created"], pool["peak_workers"]) == (2, 3, 3)
    assert (pool["failures"], pool["migrations"], pool["failed"]) == (1, 1, 0)
    assert lifecycle(report, 2) == [("active", 10), ("draining", 50), ("removed", 50)]
    assert report["workers"][2]["worker_us"] == 40
    assert pool["worker_us"] == 35 + 77 + 40 == report["summary"]["worker_us"]
    fleet = report["summary"]["fleet"]
    assert (fleet["scale_ups"], fleet["scale_downs"], fleet["drained"], fleet["failures"]) == (
        1,
        1,
        1,
        1,
    )


def test_r123_migrations_and_fail_reason_per_request(tmp_path: Path) -> None:
    report = replay(tmp_path, scenario(2, failures=fail((0, 35))), workload(("A", 0, 10, 5)))
    a = by_id(report)["A"]
    assert a["migrations"] == [
        {
            "at_us": 35,
            "worker": 0,
            "pool": "default",
            "rank": 0,
            "output_tokens": 2,
            "lost_tokens": 12,
        }
    ]
    assert a["fail_reason"] is None
    summary = report["summary"]
    assert (summary["migrations"], summary["lost_tokens"], summary["recomputed_tokens"]) == (
        1,
        12,
        12,
    )


def test_r123_cut_us_for_failure_and_stop_cuts(tmp_path: Path) -> None:
    # Case 19 with a stop time at 60: worker 1's step 57-67 is cut by the stop (cut_us 60), the
    # step 30-40 of worker 0 by the failure (cut_us 35), the others end whole (null).
    report = replay(
        tmp_path, scenario(2, failures=fail((0, 35)), stop_at_us=60), workload(("A", 0, 10, 5))
    )
    cuts = [(s["worker"], s["start_us"], s["cut_us"]) for s in report["trace"]]
    assert cuts == [(0, 0, None), (0, 20, None), (0, 30, 35), (1, 35, None), (1, 57, 60)]


# --- R124 ---------------------------------------------------------------------------------


def test_r124_every_scenario_1_6_is_a_scenario_1_7(tmp_path: Path) -> None:
    plain = scenario(2)
    plain["schema_version"] = "1.6"
    relabelled = scenario(2)
    work = workload(("A", 0, 10, 3), ("B", 1, 20, 2))
    old = replay(tmp_path, plain, work)
    new = replay(tmp_path, relabelled, work)
    new["inputs"] = old["inputs"]
    assert new == old


def test_r124_report_8_0_migrates_exactly_to_9_0(tmp_path: Path) -> None:
    # A static fleet with a stop time: one step cut at D gets cut_us D from the latest terminal
    # time; the rest of R123 are the static values.
    scen = scenario(2, stop_at_us=45)
    raw = replay(tmp_path, scen, workload(("A", 0, 10, 5), ("B", 1, 10, 1)), raw=True)
    report = json.loads(raw)
    migrated = {**report_8_0_to_9_0(as_report_8_0(report)), "schema_version": "9.0"}
    assert canonical_bytes(migrated) == canonical_bytes(as_report_9_0(report))  # R141: 10.0
    assert canonical_bytes(CHAIN.migrate(as_report_8_0(report)).document) + b"\n" == raw
    assert [s["cut_us"] for s in report["trace"]][-1] == 45


def test_r124_a_scenario_1_7_reader_must_write_report_9_0(tmp_path: Path) -> None:
    """R124 (and R141, which makes the reference write 10.0, 9.0's members included): the
    report of a scenario 1.7 with failures is valid under 10.0, and its 9.0 form under 9.0."""
    report = replay(tmp_path, scenario(2, failures=fail((0, 35))), workload(("A", 0, 10, 5)))
    assert report["schema_version"] == "10.0"
    import jsonschema

    schemas = Path(__file__).resolve().parents[1] / "schemas"
    for version, value in (("v10", report), ("v9", as_report_9_0(report))):
        schema = json.loads((schemas / version / "report.schema.json").read_text())
        jsonschema.Draft202012Validator(schema).validate(value)


# --- R6 -----------------------------------------------------------------------------------


def test_r6_a_summed_report_integer_past_2_53_exits_2(tmp_path: Path) -> None:
    # 1,024 workers (2^10) over a window of 2^43 µs: the pool's worker_us is 2^53 > 2^53-1.
    last = 1 << 43
    paths = write_inputs(
        tmp_path,
        scenario(1024),
        workload(("A", 0, 10, 1), ("B", last - 20, 10, 1)),
        timing_doc(**PROFILE),
    )
    output = tmp_path / "report.json"
    result = run_servesim(*replay_args(paths, output))
    assert result.returncode == 2
    assert not output.exists()
    assert "worker_us" in result.stderr


# --- R4, R5: section 18's semantic faults through the command line --------------------------

AUTOSCALE = {
    "interval_us": 100,
    "metric": "waiting_per_worker",
    "up_permille": 500,
    "down_permille": 100,
    "min": 1,
    "max": 2,
}


@pytest.mark.parametrize(
    ("members", "pointer"),
    [
        (
            {"scaling": {"schedule": [{"at_us": 5, "target": 2}, {"at_us": 5, "target": 1}]}},
            "/fleet/scaling/schedule/1/at_us",
        ),
        (
            {"scaling": {"autoscale": {**AUTOSCALE, "down_permille": 500}}},
            "/fleet/scaling/autoscale/down_permille",
        ),
        (
            {"scaling": {"autoscale": {**AUTOSCALE, "min": 3, "max": 2}}},
            "/fleet/scaling/autoscale/min",
        ),
        ({"scaling": {"autoscale": {**AUTOSCALE, "min": 2, "max": 3}}}, "/fleet/workers"),
        (
            {"scaling": {"autoscale": {**AUTOSCALE, "metric": "kv_use"}}},
            "/fleet/scaling/autoscale/metric",
        ),
        ({"failures": fail((1, 5))}, "/failures/events/0/pool_worker"),
        ({"failures": fail((0, 5, 10), (0, 15))}, "/failures/events/1/at_us"),
        (
            {
                "failures": {
                    "events": [{"pool": "x", "pool_worker": 0, "at_us": 1}],
                    "policy": "fail",
                }
            },
            "/failures/events/0/pool",
        ),
    ],
)
def test_r4_section_18_faults_exit_2_with_the_pointer(
    tmp_path: Path, members: dict[str, Any], pointer: str
) -> None:
    """R5: each fault is reported with the file and its pointer, exit 2, nothing written."""
    scen = scenario(1)
    if "scaling" in members:
        scen["fleet"]["scaling"] = members["scaling"]
    if "failures" in members:
        scen["failures"] = members["failures"]
    paths = write_inputs(tmp_path, scen, workload(KEEPER), timing_doc(**PROFILE))
    output = tmp_path / "report.json"
    result = run_servesim(*replay_args(paths, output))
    assert result.returncode == 2
    assert not output.exists()
    assert f"{paths['scenario']}: at {pointer}: " in result.stderr


def test_r121_a_re_handing_without_a_routable_decode_scheduler_keeps_the_handoff(
    tmp_path: Path,
) -> None:
    # Decode worker 2, the only one. A (0, 10, 3) -> prefill 0: 0-20, Held, reserved on 2 at
    # 20, transfer 20-30. Decode worker 2 fails at 25 for good: A (Transferring) is re-handed
    # (a migration with 0 lost tokens), but 2 is no candidate and there is no other decode
    # scheduler: A fails no_routable_worker at 25, its handoff as it was (R121): its last
    # handoff, to 2 (decode_worker 2, reserved at 20, 10 tokens in 10 µs, never ended).
    events = {
        "events": [{"pool": "d", "pool_worker": 0, "at_us": 25}],
        "policy": "migrate",
        "max_migrations": 1,
    }
    report = replay(tmp_path, disaggregated(events), workload(("A", 0, 10, 3)))
    a = by_id(report)["A"]
    assert (a["outcome"], a["fail_reason"], a["terminal_us"]) == (
        "failed",
        "no_routable_worker",
        25,
    )
    assert (len(a["migrations"]), a["lost_tokens"]) == (1, 0)
    handoff = a["handoff"]
    assert (handoff["prefill_end_us"], handoff["decode_worker"], handoff["decode_pool"]) == (
        20,
        2,
        "d",
    )
    assert (handoff["reserved_us"], handoff["transferred_tokens"], handoff["transfer_us"]) == (
        20,
        10,
        10,
    )
    assert (handoff["transfer_end_us"], handoff["activation_us"]) == (None, None)
