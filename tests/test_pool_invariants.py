"""The pool invariants (SPEC.md R78, R81, R83, R85) on a report derived by hand; each can fail.

Two pools under weighted round robin: "big", one worker of two ranks, weight 2, its own limits
(max_num_seqs 2, max_batched_tokens 8); "small", one worker of one rank, weight 1, the
scenario's limits (4 and 16). Whole prefill, no cache; every step lasts 1 us plus 1 us per
prefilled token (overhead 1000 ns, prefill 1000 ns a token, decode free). Derived from SPEC.md
section 15:

- Routing (R81, W = 3) of r0, r1, r2 (arrival 0, in list order), r3 (arrival 0, empty prompt:
  rejected, R10, it moves nothing) and r4 (arrival 10). Current weights (w0, w1): r0 sees (2, 1)
  and goes to w0, which drops to -1; r1 sees (1, 2): w1, to -1; r2 sees (3, 0): w0, to 0; r4
  sees (2, 1): w0. Rank rotation of w0 (R80): r0 rank 0, r2 rank 1, r4 rank 0; r1 rank 0.
- Passes (R83): w0 at 0, rank 0 prefills r0 (4 tokens, 5 us) and rank 1 r2 (2 tokens, 3 us):
  the pass ends at 5, both first tokens at 5. w1 at 0 prefills r1 (3 tokens, 4 us), done at 4.
  w0 at 5: both ranks decode (1 us each), pass [5, 6): r0 and r2 complete. r4 arrives at 10:
  w0's pass [10, 12) prefills it (1 token, 2 us).

The report below holds the members the pool checks read; ``test_the_reference_agrees`` holds
the reference to it when it reads scenario 1.4.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings

import servesim
from servesim.contract.schemas import SUPPORTED_VERSIONS
from servesim_conformance import pool_invariants
from servesim_conformance.documents import timing_doc
from servesim_conformance.invariants import InvariantViolation
from servesim_conformance.strategies import pool_input_triples

Document = dict[str, Any]

SCHEDULER: Document = {
    "max_num_seqs": 4,
    "max_batched_tokens": 16,
    "max_model_len": 64,
    "prefill": {"mode": "whole"},
}

SCENARIO: Document = {
    "document": "scenario",
    "schema_version": "1.4",
    "fleet": {
        "pools": [
            {
                "name": "big",
                "workers": 1,
                "dp_size": 2,
                "scheduler": {**SCHEDULER, "max_num_seqs": 2, "max_batched_tokens": 8},
                "weight": 2,
            },
            {"name": "small", "workers": 1, "weight": 1},
        ]
    },
    "routing": {"policy": "weighted_round_robin"},
    "scheduler": SCHEDULER,
}

WORKLOAD: Document = {
    "document": "workload",
    "schema_version": "1.0",
    "requests": [
        {"id": "r0", "arrival_us": 0, "prompt_tokens": 4, "max_output_tokens": 2},
        {"id": "r1", "arrival_us": 0, "prompt_tokens": 3, "max_output_tokens": 1},
        {"id": "r2", "arrival_us": 0, "prompt_tokens": 2, "max_output_tokens": 2},
        {"id": "r3", "arrival_us": 0, "prompt_tokens": 0, "max_output_tokens": 1},
        {"id": "r4", "arrival_us": 10, "prompt_tokens": 1, "max_output_tokens": 1},
    ],
}


def _request(rid: str, worker: int | None, rank: int | None, arrival: int) -> Document:
    pool = None if worker is None else ("big", "small")[worker]
    return {"id": rid, "worker": worker, "pool": pool, "rank": rank, "arrival_us": arrival}


def _step(
    worker: int,
    rank: int,
    start: int,
    end: int,
    duration: int,
    *,
    decode: tuple[str, ...] = (),
    prefill: tuple[tuple[str, int], ...] = (),
) -> Document:
    tokens = sum(count for _, count in prefill)
    return {
        "worker": worker,
        "rank": rank,
        "start_us": start,
        "end_us": end,
        "duration_us": duration,
        "decode_requests": list(decode),
        "prefill": [{"id": rid, "tokens": count} for rid, count in prefill],
        "prefill_tokens": tokens,
        "batched_tokens": len(decode) + tokens,
        "kv_blocks_in_use": None,
        "preempted": [],
    }


def derived_report() -> Document:
    """The members of the report derived in the module's docstring that the checks read."""
    return {
        "requests": [
            _request("r0", 0, 0, 0),
            _request("r1", 1, 0, 0),
            _request("r2", 0, 1, 0),
            _request("r3", None, None, 0),
            _request("r4", 0, 0, 10),
        ],
        "trace": [
            _step(0, 0, 0, 5, 5, prefill=(("r0", 4),)),
            _step(0, 1, 0, 5, 3, prefill=(("r2", 2),)),
            _step(1, 0, 0, 4, 4, prefill=(("r1", 3),)),
            _step(0, 0, 5, 6, 1, decode=("r0",)),
            _step(0, 1, 5, 6, 1, decode=("r2",)),
            _step(0, 0, 10, 12, 2, prefill=(("r4", 1),)),
        ],
    }


def test_the_derived_report_passes_every_pool_invariant() -> None:
    pool_invariants.check_pool_report(SCENARIO, derived_report())


Mutation = Callable[[Document], None]


def _trace(index: int, **members: Any) -> Mutation:
    def mutate(report: Document) -> None:
        report["trace"][index].update(members)

    return mutate


def _request_member(rid: str, **members: Any) -> Mutation:
    def mutate(report: Document) -> None:
        next(entry for entry in report["requests"] if entry["id"] == rid).update(members)

    return mutate


def _both(*mutations: Mutation) -> Mutation:
    def mutate(report: Document) -> None:
        for mutation in mutations:
            mutation(report)

    return mutate


#: (mutation, the check, the rule it names). Each breaks one thing the derivation fixes.
MUTATIONS: dict[str, tuple[Mutation, Callable[[Document, Document], None], str]] = {
    "a rank's step ends before its pass": (
        _trace(1, end_us=3),
        pool_invariants.check_pass_barrier,
        "R83",
    ),
    "a pass ends after its longest step": (
        _both(_trace(0, end_us=6), _trace(1, end_us=6)),
        pool_invariants.check_pass_barrier,
        "R83",
    ),
    "a step longer than its pass": (
        _trace(1, duration_us=6),
        pool_invariants.check_pass_barrier,
        "R83",
    ),
    "a pass starts before the previous one ends": (
        _both(_trace(3, start_us=4, end_us=5), _trace(4, start_us=4, end_us=5)),
        pool_invariants.check_pass_barrier,
        "R83",
    ),
    "a rank with two steps in one pass": (
        _trace(1, rank=0),
        pool_invariants.check_pass_barrier,
        "R83",
    ),
    "a rank the worker does not have": (
        _trace(5, rank=2),
        pool_invariants.check_pass_barrier,
        "R78",
    ),
    "over the pool's own max_num_seqs": (
        _trace(3, decode_requests=["r0", "r2", "r4"]),
        pool_invariants.check_rank_limits,
        "R78",
    ),
    "over the pool's own max_batched_tokens": (
        _trace(0, prefill=[{"id": "r0", "tokens": 9}], prefill_tokens=9, batched_tokens=9),
        pool_invariants.check_rank_limits,
        "R78",
    ),
    "blocks in use in a pool without a cache": (
        _trace(2, kv_blocks_in_use=3),
        pool_invariants.check_rank_limits,
        "R78",
    ),
    "a request on a rank it did not join": (
        _trace(4, decode_requests=["r0"]),
        pool_invariants.check_one_rank_per_request,
        "R78",
    ),
    "a request on another worker": (
        _trace(2, prefill=[{"id": "r4", "tokens": 3}]),
        pool_invariants.check_one_rank_per_request,
        "R78",
    ),
    "a request's pool that is not its worker's": (
        _request_member("r1", pool="big"),
        pool_invariants.check_one_rank_per_request,
        "R85",
    ),
    "a rejected request with a rank": (
        _request_member("r3", rank=0),
        pool_invariants.check_one_rank_per_request,
        "R85",
    ),
    "weighted shares off by more than one request": (
        _request_member("r1", worker=0, pool="big", rank=1),
        pool_invariants.check_weighted_shares,
        "R81",
    ),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_invariant_can_fail(name: str) -> None:
    mutate, check_one, rule = MUTATIONS[name]
    report = copy.deepcopy(derived_report())
    check_one(SCENARIO, report)  # the derived report passes the same check
    mutate(report)
    with pytest.raises(InvariantViolation, match=f"^{rule}:"):
        check_one(SCENARIO, report)


def test_the_scenario_s_limits_do_not_excuse_a_pool_s_own() -> None:
    """R77: "big" has its own limits, so a step the scenario's limits allow (3 of 4 sequences,
    9 of 16 tokens) still breaks them; on "small", which has the scenario's, it would not."""
    report = derived_report()
    _trace(2, decode_requests=["r1", "r0", "r2"])(report)
    pool_invariants.check_rank_limits(SCENARIO, report)
    _trace(3, decode_requests=["r0", "r2", "r4"])(report)
    with pytest.raises(InvariantViolation, match=r"^R78:.*max_num_seqs"):
        pool_invariants.check_rank_limits(SCENARIO, report)


def test_weighted_shares_hold_at_every_prefix_not_only_at_the_end() -> None:
    """R81: six routed requests, four to w0 (weight 2) and two to w1 (weight 1), are exactly
    the weights' shares at the end; but sent w0, w0, w0, w0, w1, w1, the fourth prefix has w0 at
    4 * 3 - 4 * 2 = 4 > W = 3, more than one request ahead."""
    report = derived_report()
    report["requests"] += [_request("r5", 1, 0, 20), _request("r6", 1, 0, 30)]
    pool_invariants.check_weighted_shares(SCENARIO, report)  # w0, w1, w0, w0, w1, w1: fine
    _request_member("r1", worker=0, pool="big", rank=1)(report)
    with pytest.raises(InvariantViolation, match=r"^R81: after 4 routed requests"):
        pool_invariants.check_weighted_shares(SCENARIO, report)


def test_the_pools_of_a_scenario_without_fleet_pools_are_one_default_pool() -> None:
    """R77: ``fleet.workers`` with ``fleet.dp_size`` is one pool "default" of that many
    workers, with the scenario's limits and cache and weight 1."""
    scenario = {**SCENARIO, "fleet": {"workers": 3, "dp_size": 2}}
    (pool,) = pool_invariants.pools_of(scenario)
    assert pool == pool_invariants.Pool("default", 3, 2, SCHEDULER, None, 1)
    assert len(pool_invariants.worker_pools(scenario)) == 3


@pytest.mark.skipif(
    "1.4" not in SUPPORTED_VERSIONS["scenario"], reason="the reference reads no scenario 1.4 yet"
)
def test_the_reference_agrees_with_the_derivation() -> None:
    """The reference's report has every member derived above and passes every pool
    invariant."""
    documents = [
        servesim.load_document(json.dumps(value).encode(), f"{role}.json", role)
        for role, value in (
            ("scenario", SCENARIO),
            ("workload", WORKLOAD),
            (
                "timing_profile",
                timing_doc(step_overhead_ns=1000, prefill_token_ns=1000, decode_token_ns=0),
            ),
        )
    ]
    report = json.loads(servesim.replay_documents(*documents, trace=True))
    derived = derived_report()
    for entry, expected in zip(report["requests"], derived["requests"], strict=True):
        assert {name: entry[name] for name in expected} == expected
    assert [{name: step[name] for name in derived["trace"][0]} for step in report["trace"]] == (
        derived["trace"]
    )
    pool_invariants.check_pool_report(SCENARIO, report)


@settings(max_examples=60, deadline=None)
@given(documents=pool_input_triples())
def test_generated_pool_scenarios_keep_r77_s_rules(documents: tuple[Document, ...]) -> None:
    """The property tier's pool scenarios are valid ones (R77): distinct names, each pool's
    limits with max_batched_tokens >= max_num_seqs and no larger than the scenario's (so a
    measured profile covers them, R40), every cache of the scenario's block size, prefix
    caching everywhere under cache_aware, weights only under weighted round robin; and, once
    the reference reads scenario 1.4, R1 to R4 hold by its reader."""
    scenario = documents[0]
    assert scenario["schema_version"] == "1.4"
    pools = pool_invariants.pools_of(scenario)
    names = [pool.name for pool in pools]
    assert len(names) == len(set(names))
    weighted = scenario["routing"]["policy"] == "weighted_round_robin"
    for pool, entry in zip(pools, scenario["fleet"].get("pools", [{}]), strict=True):
        limits = pool.limits
        assert limits["max_num_seqs"] <= limits["max_batched_tokens"]
        for limit in ("max_num_seqs", "max_batched_tokens", "max_model_len"):
            assert limits[limit] <= scenario["scheduler"][limit]
        if pool.cache is not None:
            assert pool.cache["block_tokens"] == scenario["kv_cache"]["block_tokens"]
            if scenario["routing"]["policy"] == "cache_aware":
                assert pool.cache["prefix_caching"]
        assert weighted or "weight" not in entry
    if "1.4" in SUPPORTED_VERSIONS["scenario"]:
        for role, value in zip(("scenario", "workload", "timing_profile"), documents, strict=True):
            servesim.load_document(json.dumps(value).encode(), f"{role}.json", role)
