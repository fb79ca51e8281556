"""The generated fleets that change (``strategies.fleet_input_triples``, SPEC.md section 18) are
valid inputs: every scenario is valid under the draft scenario schema (1.7,
``schemas/v1/scenario.schema.json``) and keeps the semantic checks R4 adds for section 18 (R110,
R115, R116) that can be restated without a replay; the workloads and profiles keep their own
schemas. The static-existence check of R116 (a failure of a worker a schedule has not created
yet) needs R113's replay, which the strategy itself performs; an implementation that reads
scenario 1.7 rejects a generated scenario that breaks it (exit 2), which the property tier
reports as a failure on valid input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
from hypothesis import HealthCheck, given, settings

from servesim.contract.schemas import load_schema
from servesim_conformance.strategies import (
    created_when_failing,
    fleet_input_triples,
    pools_of,
)

ROOT = Path(__file__).resolve().parents[1]
SCENARIO_SCHEMA = json.loads((ROOT / "schemas/v1/scenario.schema.json").read_text())
Document = dict[str, Any]


def check_scaling(pool: Document, scenario: Document) -> None:
    """R110, R115's R4 checks on one pool's ``scaling``."""
    scaling = pool["scaling"]
    if scaling is None:
        return
    assert not ("schedule" in scaling and "autoscale" in scaling)  # R110
    times = [entry["at_us"] for entry in scaling.get("schedule", [])]
    assert times == sorted(set(times))  # R4, R110: strictly increasing
    policy = scaling.get("autoscale")
    if policy is not None:  # R4, R115
        assert policy["down_permille"] < policy["up_permille"]
        assert policy["min"] <= pool["workers"] <= policy["max"]
        if policy["metric"] == "kv_use":
            pools = scenario["fleet"].get("pools", [])
            own = next((p for p in pools if p["name"] == pool["name"]), {})
            assert "kv_cache" in scenario or "kv_cache" in own


def check_failures(scenario: Document) -> None:
    """R116's R4 checks that need no replay: existing pools; a worker's events at strictly
    increasing times, each after the previous one's recovery, which it has."""
    failures = scenario.get("failures")
    if failures is None:
        return
    assert failures["events"]
    assert ("max_migrations" in failures) == (failures["policy"] == "migrate")  # R118
    names = {pool["name"] for pool in pools_of(scenario)}
    last: dict[tuple[str, int], Document] = {}
    for event in failures["events"]:
        assert event["pool"] in names
        key = (event["pool"], event["pool_worker"])
        previous = last.get(key)
        if previous is not None:
            assert "recover_after_us" in previous
            assert event["at_us"] > previous["at_us"] + previous["recover_after_us"]
        last[key] = event


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=fleet_input_triples())
def test_generated_fleets_are_valid_inputs(documents: tuple[Document, Document, Document]) -> None:
    scenario, workload, timing = documents
    assert scenario["schema_version"] == "1.7"
    jsonschema.Draft202012Validator(SCENARIO_SCHEMA).validate(scenario)
    jsonschema.Draft202012Validator(load_schema("workload", workload["schema_version"])).validate(
        workload
    )
    profile_schema = load_schema("timing_profile", timing["schema_version"])
    jsonschema.Draft202012Validator(profile_schema).validate(timing)
    assert "scaling" in json.dumps(scenario["fleet"]) or "failures" in scenario
    for pool in pools_of(scenario):
        check_scaling(pool, scenario)
    check_failures(scenario)


def test_static_existence_replay() -> None:
    """R116, R113: under a schedule, a failure may name a worker once a decision has created
    it, not at the decision's own instant (decisions are last), and a failure lowers the
    effective count so that a later entry creates one more."""
    scaling = {
        "startup_us": 100,
        "schedule": [{"at_us": 10, "target": 2}, {"at_us": 30, "target": 2}],
    }
    events = [
        (0, {"pool_worker": 1, "at_us": 10}),  # created at 10, after the failure: dropped
        (1, {"pool_worker": 1, "at_us": 11}),  # starting since 10: exists
        (2, {"pool_worker": 2, "at_us": 31}),  # e = 1 at 30 (worker 1 failed): 2 is created
        (3, {"pool_worker": 3, "at_us": 40}),  # never created
    ]
    assert created_when_failing(1, scaling, events) == [1, 2]
