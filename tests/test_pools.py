"""Pools and ranks (SPEC.md section 15, R77 to R84): small hand-computed replays, one rule each.

Every timing profile here is synthetic: ``1000 + 10 * P + 100 * D`` microseconds a step (the
"slow" one ``2000 + 20 * P + 200 * D``), so each duration below is worked out by hand in the
test's docstring.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import servesim
from servesim.contract.errors import InvalidInput
from servesim.engine.routing import WeightedRoundRobinRouter
from servesim_conformance.evolution.strategies import documents
from servesim_conformance.strategies import session_input_triples
from tests.helpers import released_scenario_schema, run_servesim, timing_doc, workload_doc

FAST = timing_doc(step_overhead_ns=1_000_000, prefill_token_ns=10_000, decode_token_ns=100_000)
SLOW = timing_doc(step_overhead_ns=2_000_000, prefill_token_ns=20_000, decode_token_ns=200_000)
LIMITS = {"max_num_seqs": 4, "max_batched_tokens": 64, "max_model_len": 1024}


def scheduler(**changes: Any) -> dict[str, Any]:
    return {**LIMITS, "prefill": {"mode": "whole"}, **changes}


def scenario_1_4(fleet: dict[str, Any], policy: str = "round_robin", **members: Any) -> Any:
    return {
        "document": "scenario",
        "schema_version": "1.4",
        "fleet": fleet,
        "routing": {"policy": policy},
        "scheduler": scheduler(),
        **members,
    }


def _document(value: Any, role: str) -> servesim.contract.documents.Document:
    return servesim.load_document(json.dumps(value).encode(), f"{role}.json", role)


def replay(
    scenario: Any, workload: Any, timing: Any = FAST, *, trace: bool = True
) -> dict[str, Any]:
    """The report of an in-process replay; ``timing`` one profile or pool -> profile."""
    profiles = (
        {name: _document(value, "timing_profile") for name, value in timing.items()}
        if "document" not in timing
        else _document(timing, "timing_profile")
    )
    documents = (_document(scenario, "scenario"), _document(workload, "workload"))
    report: dict[str, Any] = json.loads(
        servesim.replay_documents(*documents, profiles, trace=trace)
    )
    return report


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {request["id"]: request for request in report["requests"]}


def problems(scenario: Any, workload: Any = None) -> list[tuple[str, str]]:
    """The (file, pointer) of every problem R4 finds in the scenario (and the pair)."""
    workload = workload or workload_doc(("a", 0, 10, 1))
    try:
        documents = (_document(scenario, "scenario"), _document(workload, "workload"))
        servesim.replay_documents(*documents, _document(FAST, "timing_profile"))
    except InvalidInput as error:
        return [(problem.file, problem.pointer) for problem in error.problems]
    raise AssertionError("the inputs were accepted")


# --- R77, R84: two pools, each timed by its own profile ------------------------------------------


def test_r77_r84_two_pools_each_timed_by_its_own_profile() -> None:
    """Pools fast (1 worker) and slow (1 worker), round robin: a (P 10, O 2) joins worker 0
    (fast), b (P 10, O 2) worker 1 (slow). a: prefill 1000 + 100 = 1100, decode 1000 + 100 =
    1100: tokens 1100, 2200. b: prefill 2000 + 200 = 2200, decode 2000 + 200 = 2200: tokens
    2200, 4400. Each pool's entry sums its own worker; the profiles are listed per pool."""
    scenario = scenario_1_4(
        {"pools": [{"name": "fast", "workers": 1}, {"name": "slow", "workers": 1}]}
    )
    report = replay(
        scenario,
        workload_doc(("a", 0, 10, 2), ("b", 0, 10, 2)),
        {
            "fast": FAST,
            "slow": SLOW,
        },
    )
    requests = by_id(report)
    assert requests["a"]["token_times_us"] == [1100, 2200]
    assert (requests["a"]["pool"], requests["a"]["rank"]) == ("fast", 0)
    assert requests["b"]["token_times_us"] == [2200, 4400]
    assert (requests["b"]["pool"], requests["b"]["rank"]) == ("slow", 0)
    assert report["inputs"]["timing_profile"] is None
    assert [entry["pool"] for entry in report["inputs"]["timing_profiles"]] == ["fast", "slow"]
    assert [(pool["name"], pool["busy_us"], pool["steps"]) for pool in report["pools"]] == [
        ("fast", 2200, 2),
        ("slow", 4400, 2),
    ]
    assert [(w["pool"], w["pool_worker"]) for w in report["workers"]] == [("fast", 0), ("slow", 0)]
    assert report["pools"][0]["utilization"] == 2200 / 4400


def test_r78_one_pool_of_one_rank_workers_is_the_workers_fleet() -> None:
    """A scenario 1.4 with one pool "default" of 2 one-rank workers replays exactly as the
    same fleet written with fleet.workers (R78): the reports differ only in the scenario's
    digest."""
    workload = workload_doc(("a", 0, 10, 3), ("b", 0, 20, 2), ("c", 500, 5, 4))
    pools = replay(scenario_1_4({"pools": [{"name": "default", "workers": 2}]}), workload)
    workers = replay(scenario_1_4({"workers": 2}), workload)
    del pools["inputs"]["scenario"], workers["inputs"]["scenario"]
    assert pools == workers


# --- R79: rejection across pools ------------------------------------------------------------------


def test_r79_a_request_one_pool_cannot_serve_is_rejected_with_the_first_reason() -> None:
    """Pool big: the scenario's limits (budget 64) and 100 blocks of 4; pool tight: budget 16
    and 4 blocks of 4 (16 tokens). x (P 20, O 1) fits big, but its whole prompt is over tight's
    budget: prefill_exceeds_step_budget. y (P 10, O 10) fits both budgets, but 20 tokens are
    more than tight's cache: exceeds_kv_cache. z (P 5, O 2) fits every pool: accepted, and
    being the first accepted it joins worker 0 (R79: rejected requests take no turn)."""
    scenario = scenario_1_4(
        {
            "pools": [
                {"name": "big", "workers": 1},
                {
                    "name": "tight",
                    "workers": 1,
                    "scheduler": scheduler(max_batched_tokens=16),
                    "kv_cache": {"blocks": 4, "block_tokens": 4, "prefix_caching": False},
                },
            ]
        },
        kv_cache={"blocks": 100, "block_tokens": 4, "prefix_caching": False},
    )
    report = replay(scenario, workload_doc(("x", 0, 20, 1), ("y", 0, 10, 10), ("z", 0, 5, 2)))
    requests = by_id(report)
    assert requests["x"]["reject_reason"] == "prefill_exceeds_step_budget"
    assert requests["y"]["reject_reason"] == "exceeds_kv_cache"
    assert (requests["z"]["outcome"], requests["z"]["worker"]) == ("completed", 0)


# --- R80, R81: rank rotation and weighted round robin ---------------------------------------------


@pytest.mark.parametrize("policy", ["round_robin", "weighted_round_robin"])
def test_r80_rank_rotation_with_two_workers_of_two_ranks(policy: str) -> None:
    """Two workers of dp_size 2: requests 0 to 3 join (0, 0), (1, 0), (0, 1), (1, 1) (R80;
    weighted round robin with equal weights is round robin, R81)."""
    scenario = scenario_1_4({"workers": 2, "dp_size": 2}, policy)
    report = replay(scenario, workload_doc(*[(f"r{i}", 0, 10, 1) for i in range(4)]))
    placed = [(request["worker"], request["rank"]) for request in report["requests"]]
    assert placed == [(0, 0), (1, 0), (0, 1), (1, 1)]


def test_r81_smooth_weighted_round_robin_sequence() -> None:
    """Weights 3 and 1 (W 4). Current weights after adding, the pick, after subtracting:
    [3, 1] -> 0 -> [-1, 1]; [2, 2] -> 0 (tie: lowest index) -> [-2, 2]; [1, 3] -> 1 ->
    [1, -1]; [4, 0] -> 0 -> [0, 0]; and again."""
    router = WeightedRoundRobinRouter([3, 1])
    picks = [router.route(None) for _ in range(8)]  # type: ignore[arg-type]
    assert picks == [0, 0, 1, 0, 0, 0, 1, 0]


@pytest.mark.parametrize("weights", [[3, 1], [1, 2, 3], [5, 1, 1, 7], [65536, 1]])
def test_r81_every_prefix_is_within_one_request_of_the_weights_share(weights: list[int]) -> None:
    """|c_w * W - n * weight_w| <= W after every routed request n (R81)."""
    router = WeightedRoundRobinRouter(weights)
    total = sum(weights)
    chosen = [0] * len(weights)
    for n in range(1, 3 * total + 1 if total < 100 else 500):
        chosen[router.route(None)] += 1  # type: ignore[arg-type]
        for worker, weight in enumerate(weights):
            assert abs(chosen[worker] * total - n * weight) <= total


def test_r81_pool_weights_route_through_the_replay() -> None:
    """Pools a (weight 3) and b (weight 1) of one worker each: 8 requests join workers
    0, 0, 1, 0, 0, 0, 1, 0 (the sequence above)."""
    scenario = scenario_1_4(
        {"pools": [{"name": "a", "workers": 1, "weight": 3}, {"name": "b", "workers": 1}]},
        "weighted_round_robin",
    )
    report = replay(scenario, workload_doc(*[(f"r{i}", i, 10, 1) for i in range(8)]))
    assert [request["worker"] for request in report["requests"]] == [0, 0, 1, 0, 0, 0, 1, 0]


# --- R82: state-aware routing over (worker, rank) -------------------------------------------------


def test_r82_least_loaded_chooses_among_every_worker_and_rank() -> None:
    """Pool wide (1 worker, dp_size 2) then pool narrow (1 worker): the schedulers are (0, 0),
    (0, 1), (1, 0). Three long requests at 0: each joins the first scheduler with the fewest
    outstanding requests, so (0, 0), (0, 1), (1, 0); a fourth ties all three at 1 and joins
    (0, 0)."""
    scenario = scenario_1_4(
        {"pools": [{"name": "wide", "workers": 1, "dp_size": 2}, {"name": "narrow", "workers": 1}]},
        "least_loaded",
    )
    report = replay(scenario, workload_doc(*[(f"r{i}", 0, 10, 50) for i in range(4)]))
    placed = [(request["worker"], request["rank"]) for request in report["requests"]]
    assert placed == [(0, 0), (0, 1), (1, 0), (0, 0)]


# --- R83: the pass barrier ------------------------------------------------------------------------


def test_r83_a_ranks_tokens_come_at_the_pass_end_and_an_arrival_waits_for_the_next_pass() -> None:
    """One worker of dp_size 2. a (P 10, O 2) -> rank 0, b (P 50, O 1) -> rank 1, at 0; c
    (P 10, O 1) at 100 -> rank 0 (the worker's third request).

    Pass 1 at 0: rank 0 prefills a, 1000 + 100 = 1100; rank 1 prefills b, 1000 + 500 = 1500;
    the pass ends at 1500, so a's first token is at 1500 although its own step took 1100. c
    arrived during the pass: it waits. Pass 2 at 1500: rank 0 decodes a and prefills c,
    1000 + 100 + 100 = 1200, ending 2700; rank 1 has no work and forms no step. c: first
    scheduled 1500, token 2700."""
    report = replay(
        scenario_1_4({"workers": 1, "dp_size": 2}),
        workload_doc(("a", 0, 10, 2), ("b", 0, 50, 1), ("c", 100, 10, 1)),
    )
    requests = by_id(report)
    assert requests["a"]["token_times_us"] == [1500, 2700]
    assert requests["b"]["token_times_us"] == [1500]
    assert (requests["c"]["rank"], requests["c"]["first_scheduled_us"]) == (0, 1500)
    assert requests["c"]["token_times_us"] == [2700]
    steps = [
        (step["start_us"], step["end_us"], step["rank"], step["duration_us"])
        for step in report["trace"]
    ]
    assert steps == [(0, 1500, 0, 1100), (0, 1500, 1, 1500), (1500, 2700, 0, 1200)]
    (worker,) = report["workers"]
    assert (worker["steps"], worker["busy_us"], report["summary"]["steps"]) == (2, 2700, 2)
    assert [(rank["steps"], rank["busy_us"]) for rank in worker["ranks"]] == [
        (2, 2300),
        (1, 1500),
    ]


def test_r78_ranks_do_not_share_prefix_caches() -> None:
    """One worker of dp_size 2 with prefix caching (blocks of 4). x, y, z have the same two
    hashed blocks (prompt 8). x (t 0) -> rank 0, y (t 10000) -> rank 1, z (t 20000) -> rank 0.
    x's blocks are cached on rank 0 when y arrives, but y is on rank 1, whose own cache has
    none of them: it reuses nothing. z, back on rank 0, reuses x's first block (the last
    prompt token is always computed, R48)."""
    scenario = scenario_1_4(
        {"workers": 1, "dp_size": 2},
        kv_cache={"blocks": 64, "block_tokens": 4, "prefix_caching": True},
    )
    workload = workload_doc(("x", 0, 8, 1), ("y", 10_000, 8, 1), ("z", 20_000, 8, 1))
    workload["schema_version"] = "1.1"
    workload["prefix_hash_block_tokens"] = 4
    for request in workload["requests"]:
        request["prefix_hashes"] = [11, 22]
    requests = by_id(replay(scenario, workload))
    assert [requests[name]["rank"] for name in "xyz"] == [0, 1, 0]
    assert requests["y"]["reused_prompt_tokens"] == 0
    assert requests["z"]["reused_prompt_tokens"] == 4


# --- R4 with pools: the pointers R77 names -------------------------------------------------------


def test_r77_r4_pool_checks_are_reported_where_r77_says() -> None:
    two = [{"name": "p", "workers": 1}, {"name": "p", "workers": 1}]
    assert problems(scenario_1_4({"pools": two})) == [("scenario.json", "/fleet/pools/1/name")]
    weighted = [{"name": "p", "workers": 1, "weight": 2}]
    assert problems(scenario_1_4({"pools": weighted})) == [
        ("scenario.json", "/fleet/pools/0/weight")
    ]
    tight = [
        {"name": "p", "workers": 1},
        {"name": "q", "workers": 1, "scheduler": scheduler(max_num_seqs=8, max_batched_tokens=4)},
    ]
    assert problems(scenario_1_4({"pools": tight})) == [
        ("scenario.json", "/fleet/pools/1/scheduler/max_batched_tokens")
    ]
    wide = {"workers": 2048, "dp_size": 1024}  # 2^21 ranks
    assert problems(scenario_1_4(wide)) == [("scenario.json", "/fleet/dp_size")]
    many = [{"name": "p", "workers": 40_000}, {"name": "q", "workers": 40_000}]
    assert problems(scenario_1_4({"pools": many})) == [("scenario.json", "/fleet/pools")]
    cache = {"blocks": 10, "block_tokens": 4, "prefix_caching": True}
    uncached = [{"name": "p", "workers": 1, "kv_cache": cache}, {"name": "q", "workers": 1}]
    assert problems(scenario_1_4({"pools": uncached}, "cache_aware")) == [
        ("scenario.json", "/fleet/pools/1")
    ]
    other = {**cache, "block_tokens": 8}
    mixed = [
        {"name": "p", "workers": 1, "kv_cache": cache},
        {"name": "q", "workers": 1, "kv_cache": other},
    ]
    assert problems(scenario_1_4({"pools": mixed}, "cache_aware")) == [
        ("scenario.json", "/fleet/pools/1/kv_cache")
    ]
    hashed = workload_doc(("a", 0, 8, 1))
    hashed["schema_version"] = "1.1"
    hashed["prefix_hash_block_tokens"] = 4
    assert problems(scenario_1_4({"pools": mixed}), hashed) == [
        ("workload.json", "/prefix_hash_block_tokens")
    ]


# --- R84: the command line's profile arguments ---------------------------------------------------


@pytest.fixture
def two_pool_inputs(tmp_path: Path) -> dict[str, Path]:
    scenario = scenario_1_4(
        {"pools": [{"name": "fast", "workers": 1}, {"name": "slow", "workers": 1}]}
    )
    paths = {
        "scenario": tmp_path / "scenario.json",
        "workload": tmp_path / "workload.json",
        "fast": tmp_path / "fast.json",
        "slow": tmp_path / "slow.json",
    }
    for role, value in (
        ("scenario", scenario),
        ("workload", workload_doc(("a", 0, 10, 2), ("b", 0, 10, 2))),
        ("fast", FAST),
        ("slow", SLOW),
    ):
        paths[role].write_text(json.dumps(value), encoding="utf-8")
    return paths


def _replay_cli(paths: dict[str, Path], output: Path, *profiles: str) -> Any:
    arguments: list[str | Path] = ["replay", "--scenario", paths["scenario"]]
    arguments += ["--workload", paths["workload"], "--output", output, "--quiet"]
    for profile in profiles:
        arguments += ["--timing-profile", profile]
    return run_servesim(*arguments)


@pytest.mark.parametrize(
    ("profiles", "said"),
    [
        (("{fast}", "fast={fast}"), "not both"),
        (("{fast}", "{slow}"), "given 2 times"),
        (("fast={fast}", "fast={slow}", "slow={slow}"), "'fast' is named twice"),
        (("fast={fast}", "slow={slow}", "ghost={slow}"), "a profile for no pool"),
        (("fast={fast}",), "the pool 'slow' has no timing profile"),
        (("fast={fast}", "slow={workload}"), "(pool slow's profile)"),
    ],
    ids=["both-forms", "single-twice", "pool-twice", "no-such-pool", "pool-missing", "bad-file"],
)
def test_r84_profile_argument_errors_exit_2_and_write_nothing(
    two_pool_inputs: dict[str, Path], tmp_path: Path, profiles: tuple[str, ...], said: str
) -> None:
    output = tmp_path / "report.json"
    given = [
        profile.format(**{k: str(v) for k, v in two_pool_inputs.items()}) for profile in profiles
    ]
    result = _replay_cli(two_pool_inputs, output, *given)
    assert result.returncode == 2, result.stderr
    assert said in result.stderr
    assert "Traceback" not in result.stderr
    assert not output.exists()


def test_r84_per_pool_profiles_in_any_order_give_the_same_report(
    two_pool_inputs: dict[str, Path], tmp_path: Path
) -> None:
    """The order of the arguments carries no meaning; a single profile times every pool."""
    outputs = [tmp_path / f"{name}.json" for name in ("one", "two", "single")]
    fast, slow = f"fast={two_pool_inputs['fast']}", f"slow={two_pool_inputs['slow']}"
    assert _replay_cli(two_pool_inputs, outputs[0], fast, slow).returncode == 0
    assert _replay_cli(two_pool_inputs, outputs[1], slow, fast).returncode == 0
    assert outputs[0].read_bytes() == outputs[1].read_bytes()
    report = json.loads(outputs[0].read_bytes())
    assert by_id(report)["b"]["token_times_us"] == [2200, 4400]
    single = _replay_cli(two_pool_inputs, outputs[2], str(two_pool_inputs["fast"]))
    assert single.returncode == 0, single.stderr
    report = json.loads(outputs[2].read_bytes())
    assert by_id(report)["b"]["token_times_us"] == [1100, 2200]
    assert (
        report["inputs"]["timing_profile"]["sha256"]
        == report["inputs"]["timing_profiles"][1]["sha256"]
    )


# --- R35, R86: scenario 1.4 is a minor version -----------------------------------------------


@settings(max_examples=150, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data())
def test_r86_every_scenario_1_3_is_a_scenario_1_4(data: st.DataObject) -> None:
    """The reviewer's decision for scenario 1.4 (schemas/reviews/issue-23-scenario-1-4.md):
    backward compatible, so a minor version is right. ``servesim schema review`` leaves the
    verdict undecided (the new ``oneOf`` of ``fleet`` and the changed top-level ``if`` are
    beyond its rules), so the decision rests on this: any 1.3 scenario, drawn from the 1.3
    schema or as the conformance suite draws section 13's scenarios, relabelled, is valid
    under 1.4."""
    old, new = released_scenario_schema("1.3"), released_scenario_schema("1.4")
    if data.draw(st.booleans()):
        scenario = data.draw(documents(old))
        assume(jsonschema.Draft202012Validator(old).is_valid(scenario))
    else:
        scenario = data.draw(session_input_triples())[0]
        jsonschema.validate(scenario, old)
    jsonschema.validate({**scenario, "schema_version": "1.4"}, new)
