"""Hand-derived tests of state-aware routing (SPEC.md section 12, R54 to R58).

Every expected value is worked out from SPEC.md in the comment above it. The timing profile is
``test_hand_derived``'s round-number one, so by R22

    duration_us = 1000 + 10 * P + 100 * D

``max_num_seqs`` 4, ``max_batched_tokens`` 64, whole prefill, ``max_model_len`` 1000. B is the
engine's ``block_tokens`` (4 here), H the workload's ``prefix_hash_block_tokens`` (4, so k = 1:
request block j's identity is (j, its first j + 1 hashes)). cost(w) is R56's; "w0: 2" means
worker 0's cost (or outstanding count) is 2. The simulation is driven through its entry point
with model objects, as the documents would build them.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.contract.model import (
    KvCache,
    Request,
    Routing,
    Scenario,
    SchedulerLimits,
    SyntheticLinearTiming,
    TimingProfile,
    Workload,
)
from servesim.engine import decode_runs
from servesim.engine.block_memory import BlockMemory
from servesim.engine.fleet_view import FleetView
from servesim.engine.loop import SimulationResult, simulate
from servesim.engine.requests import RequestState

PROFILE = TimingProfile(SyntheticLinearTiming(1_000_000, 10_000, 100_000))

RequestTuple = tuple[Any, ...]  # (id, arrival_us, prompt_tokens, max_output_tokens[, hashes])


def scenario(
    policy: str,
    *,
    workers: int = 2,
    blocks: int | None = 100,
    prefix_caching: bool = True,
    weights: tuple[int, int] = (1, 1),
    seed: int | None = None,
) -> Scenario:
    """A scenario routed by ``policy``, with a cache of ``blocks`` blocks of 4 tokens (none
    when ``blocks`` is None); ``weights`` are R56's (prefill_weight, load_weight)."""
    limits = SchedulerLimits(4, 64, 1000, "whole")
    cache = None if blocks is None else KvCache(blocks, 4, prefix_caching)
    routing = Routing(policy, seed, *weights)  # type: ignore[arg-type]
    return Scenario(workers, routing, limits, cache)


def workload(*requests: RequestTuple) -> Workload:
    """Requests ``(id, arrival_us, prompt_tokens, max_output_tokens[, prefix_hashes])``."""
    built = tuple(
        Request(r[0], r[1], r[2], r[3], tuple(r[4]) if len(r) > 4 else ()) for r in requests
    )
    return Workload(built, 4)


def by_id(result: SimulationResult) -> dict[str, RequestState]:
    return {state.request.id: state for state in result.requests}


def workers_of(result: SimulationResult) -> dict[str, int | None]:
    return {state.request.id: state.worker for state in result.requests}


# --- R54: when the router decides, and what it sees ---------------------------------------


def test_r54_an_arrival_sees_the_completions_of_its_instant() -> None:
    # Least loaded, no cache. a (20 tokens) -> w0 (0, 0: the lower index); b (10) -> w1
    # (w0: 1, w1: 0). w0's step [0, 1200] (P 20) completes a; w1's [0, 1100] (P 10) completes
    # b. At 1100 b's completion (priority 0) comes before c's arrival (priority 1), so c sees
    # w0: 1, w1: 0 and joins w1; d, at the same instant after c, sees w0: 1, w1: 1 and joins
    # w0. (Had c been routed before b's completion it would have seen a tie and joined w0.)
    wl = workload(
        ("a", 0, 20, 1),
        ("b", 0, 10, 1),
        ("c", 1100, 10, 1),
        ("d", 1100, 10, 1),
    )
    result = simulate(scenario("least_loaded", blocks=None), wl, PROFILE)
    assert workers_of(result) == {"a": 0, "b": 1, "c": 1, "d": 0}


def test_r54_an_arrival_sees_the_blocks_registered_at_its_instant() -> None:
    # Cache aware, weights 1 and 1. a (8 tokens, hashes [1, 2]): P = 2, cached 0 everywhere,
    # w0: 2, w1: 2 -> w0. b (40 tokens, no hashes, 10 blocks): w0: 10 + 2 = 12, w1: 10 -> w1.
    # w0's step [0, 1080] (P 8) fills a's blocks 0 and 1; at 1080 they are registered (R51)
    # and a completes and releases them (cached). c (8 tokens, hashes [1, 2]) arrives at 1080
    # and sees them: cached(w0, c) = 2 (not capped like R48's hit), w0: 0 + 0 = 0,
    # w1: 2 + 10 = 12 -> w0, cached_blocks_at_routing 2. Its hit at admission is capped at
    # floor((8 - 1) / 4) = 1 block (R48): it reuses 4 tokens.
    wl = workload(
        ("a", 0, 8, 1, [1, 2]),
        ("b", 0, 40, 1),
        ("c", 1080, 8, 1, [1, 2]),
    )
    result = simulate(scenario("cache_aware"), wl, PROFILE)
    assert workers_of(result) == {"a": 0, "b": 1, "c": 0}
    states = by_id(result)
    assert [states[i].cached_blocks_at_routing for i in "abc"] == [0, 0, 2]
    assert states["c"].reused_prompt_tokens == 4


def test_r54_a_preempted_request_stays_outstanding() -> None:
    # Least loaded, 4 blocks of 4 tokens per worker, prefix caching off. At 0: a -> w0;
    # b -> w1 (w0: 1, w1: 0); c -> w0 (1, 1: the lower index); each 8 tokens, 8 out. w0's step
    # [0, 1160] admits a and c (2 blocks each, P 16), and both decode from 1160 on. Forming
    # the step at 1160, a needs a third block: none is free or cached, so R49 preempts c (the
    # latest in the running list not yet served), which waits at w0 again. d at 1500 sees
    # w0: 2 (a running, c waiting), w1: 1 (b decoding) and joins w1. Were a preempted request
    # no longer outstanding, d would see 1, 1 and join w0.
    wl = workload(
        ("a", 0, 8, 8),
        ("b", 0, 8, 8),
        ("c", 0, 8, 8),
        ("d", 1500, 4, 1),
    )
    result = simulate(scenario("least_loaded", blocks=4, prefix_caching=False), wl, PROFILE)
    states = by_id(result)
    assert states["c"].preemptions == 1
    assert workers_of(result) == {"a": 0, "b": 1, "c": 0, "d": 1}


def test_r54_a_router_does_not_see_evicted_blocks() -> None:
    # Cache aware, 4 blocks of 4 tokens per worker. a (8 tokens, [1, 2]) -> w0 (2, 2: lower
    # index); its step [0, 1080] registers (0, [1]) and (1, [1, 2]); a releases them from its
    # last: (1, [1, 2]) gets release number 0, (0, [1]) number 1. b (12 tokens, no hashes) at
    # 2000: w0: 3 + 0, w1: 3 -> w0. It needs 3 blocks: 2 free, then the cached block with the
    # smallest release number, (1, [1, 2]), is evicted. b's step [2000, 3120] completes it.
    # c (8 tokens, [1, 2]) at 4000: only (0, [1]) is still registered at w0, so
    # cached(w0, c) = 1: w0: 1 + 0 = 1, w1: 2 -> w0, cached_blocks_at_routing 1.
    wl = workload(
        ("a", 0, 8, 1, [1, 2]),
        ("b", 2000, 12, 1),
        ("c", 4000, 8, 1, [1, 2]),
    )
    result = simulate(scenario("cache_aware", blocks=4), wl, PROFILE)
    assert workers_of(result) == {"a": 0, "b": 0, "c": 0}
    worker = result.workers[0]
    assert worker.kv_counters is not None
    assert worker.kv_counters.evictions == 1
    assert by_id(result)["c"].cached_blocks_at_routing == 1


def test_r54_counters_return_to_zero_when_every_request_completes() -> None:
    wl = workload(*[(f"r{i}", 300 * i, 4 + 4 * (i % 5), 1 + i % 7, [i % 3, i]) for i in range(30)])
    for policy in ("least_loaded", "cache_aware", "round_robin"):
        result = simulate(scenario(policy, workers=3), wl, PROFILE)
        assert [(w.outstanding, w.load_blocks) for w in result.workers] == [(0, 0)] * 3


# --- R55: least loaded -------------------------------------------------------------------


def test_r55_least_loaded_ties_go_to_the_lowest_index() -> None:
    # Three workers, no cache. a (10 tokens, 1 out) -> w0 and b (10 tokens, 50 out) -> w1
    # (w0: 1 now); a's step [0, 1100] completes it. At 2000: c sees w0: 0, w1: 1, w2: 0 and
    # joins w0, the lower of the tied (round robin would give w2); d sees 1, 1, 0 -> w2; e sees
    # 1, 1, 1 -> w0.
    wl = workload(
        ("a", 0, 10, 1),
        ("b", 0, 10, 50),
        ("c", 2000, 10, 50),
        ("d", 2000, 10, 50),
        ("e", 2000, 10, 50),
    )
    result = simulate(scenario("least_loaded", workers=3, blocks=None), wl, PROFILE)
    assert workers_of(result) == {"a": 0, "b": 1, "c": 0, "d": 2, "e": 0}


def test_r55_least_loaded_counts_requests_not_tokens() -> None:
    # a (60 tokens) -> w0; b (4 tokens): w0: 1, w1: 0 -> w1; c (4 tokens): 1, 1 -> w0. All
    # have 100 output tokens, so none completes before d at 500: w0: 2, w1: 1 -> w1. (Counted
    # in prompt blocks, w0's 16 + 1 against w1's 1, it would also be w1: see R56's test below
    # for where the two measures part.)
    wl = workload(
        ("a", 0, 60, 100),
        ("b", 0, 4, 100),
        ("c", 0, 4, 100),
        ("d", 500, 4, 1),
    )
    result = simulate(scenario("least_loaded", blocks=None), wl, PROFILE)
    assert workers_of(result) == {"a": 0, "b": 1, "c": 0, "d": 1}


# --- R58: ties ----------------------------------------------------------------------------


def test_r58_a_seed_breaks_ties_by_a_splitmix64_draw() -> None:
    # Four idle workers, no cache, four requests at 0 with seed 42, whose first draws (R14's
    # test vector) are 0x...6E95, 0x...F103, 0x...9F52. a: all four tied, z mod 4 = 1 -> w1;
    # b: w0, w2, w3 tied, z mod 3 = 1 -> w2 (the second of them); c: w0, w3 tied, z mod 2 = 0
    # -> w0; d: w3 alone has 0 outstanding, so it joins w3 whatever its draw. Without a seed
    # the ties go to the lowest index: w0, w1, w2, then w3.
    wl = workload(("a", 0, 10, 50), ("b", 0, 10, 50), ("c", 0, 10, 50), ("d", 0, 10, 50))
    seeded = simulate(scenario("least_loaded", workers=4, blocks=None, seed=42), wl, PROFILE)
    assert workers_of(seeded) == {"a": 1, "b": 2, "c": 0, "d": 3}
    plain = simulate(scenario("least_loaded", workers=4, blocks=None), wl, PROFILE)
    assert workers_of(plain) == {"a": 0, "b": 1, "c": 2, "d": 3}
    # cache_aware, same draws: with no cache hit and no load every worker costs the same
    cached = simulate(scenario("cache_aware", workers=4, seed=42), wl, PROFILE)
    assert [cached.requests[n].worker for n in range(3)] == [1, 2, 0]


def test_r58_every_routed_request_takes_a_draw_even_without_a_tie() -> None:
    # Two workers, seed 42. a at 0: both tied, z1 mod 2 = 1 -> w1. b at 0: w0 alone has 0,
    # -> w0, but it takes z2. c at 0: both have 1, tied, z3 mod 2 = 0 -> w0. Were b to skip
    # its draw, c would take z2 (mod 2 = 1) and join w1.
    wl = workload(("a", 0, 10, 50), ("b", 0, 10, 50), ("c", 0, 10, 50))
    result = simulate(scenario("least_loaded", workers=2, blocks=None, seed=42), wl, PROFILE)
    assert workers_of(result) == {"a": 1, "b": 0, "c": 0}


# --- R56: cache aware --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "joins", "cached"),
    [
        # w0 (busy, 3 blocks cached): prefill_weight * 2 + load_weight * 4;
        # w1 (idle, nothing cached): prefill_weight * 5 + load_weight * 0.
        ((1, 1), 1, 0),  # w0: 2 + 4 = 6, w1: 5: the idle worker
        ((2, 1), 0, 3),  # w0: 4 + 4 = 8, w1: 10: the cached prefix
        ((4, 3), 0, 3),  # w0: 8 + 12 = 20, w1: 20: a tie, the lower index
        ((1, 0), 0, 3),  # w0: 2, w1: 5: the cache alone
        ((0, 1), 1, 0),  # w0: 4, w1: 0: the load alone
    ],
)
def test_r56_cache_aware_weighs_cached_blocks_against_load(
    weights: tuple[int, int], joins: int, cached: int
) -> None:
    # a (16 tokens, [1, 2, 3, 4], 200 out): P = 4, cost 4 * prefill_weight at both -> w0.
    # Its step [0, 1160] registers its 4 blocks at w0; then it decodes for a long time (a run
    # of decode steps, read mid-run by the router). b (20 tokens, [1, 2, 3, 9, 9], 1 out) at
    # 2000: P = 5; its blocks 0 to 2 have a's identities, its block 3 (3, [1, 2, 3, 9]) does
    # not, so cached(w0, b) = 3 and cached(w1, b) = 0; load_blocks(w0) = 4 (a's prompt),
    # load_blocks(w1) = 0.
    wl = workload(
        ("a", 0, 16, 200, [1, 2, 3, 4]),
        ("b", 2000, 20, 1, [1, 2, 3, 9, 9]),
    )
    result = simulate(scenario("cache_aware", weights=weights), wl, PROFILE)
    states = by_id(result)
    assert states["a"].worker == 0
    assert states["b"].worker == joins
    assert states["b"].cached_blocks_at_routing == cached


def test_r56_cache_aware_counts_the_prompt_blocks_it_sent() -> None:
    # load_blocks counts ceil(prompt_tokens / B) of each outstanding request, not requests:
    # a (40 tokens, 10 blocks, 100 out) -> w0 (10, 10: lower index); b (4 tokens, 1 block,
    # 100 out): w0: 1 + 10 = 11, w1: 1 -> w1; c (4 tokens, 100 out): w0: 11, w1: 1 + 1 = 2 ->
    # w1; d likewise w0: 11, w1: 3 -> w1. Least loaded would have sent c to w0.
    wl = workload(
        ("a", 0, 40, 100),
        ("b", 0, 4, 100),
        ("c", 0, 4, 100),
        ("d", 0, 4, 100),
    )
    result = simulate(scenario("cache_aware"), wl, PROFILE)
    assert workers_of(result) == {"a": 0, "b": 1, "c": 1, "d": 1}


def test_r56_a_cached_prefix_beats_the_least_loaded_worker() -> None:
    # Weights 2 and 1. a (16 tokens, [1, 2, 3, 4], 50 out): 8 and 8 -> w0. b (4 tokens, 50
    # out) at 0: w0: 2 * 1 + 4 = 6, w1: 2 * 1 + 0 = 2 -> w1. a's step [0, 1160] registers its 4
    # blocks at w0, and a and b decode long after 3000. c (16 tokens, [1, 2, 3, 4]) at 3000:
    # w0: 2 * (4 - 4) + 4 = 4, w1: 2 * 4 + 1 = 9 -> w0, though w1 has the least load.
    wl = workload(
        ("a", 0, 16, 50, [1, 2, 3, 4]),
        ("b", 0, 4, 50),
        ("c", 3000, 16, 1, [1, 2, 3, 4]),
    )
    result = simulate(scenario("cache_aware", weights=(2, 1)), wl, PROFILE)
    assert workers_of(result) == {"a": 0, "b": 1, "c": 0}
    assert by_id(result)["c"].cached_blocks_at_routing == 4


# --- R57: what the report says ---------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "blocks", "prefix_caching", "recorded"),
    [
        ("round_robin", 100, True, False),
        ("random", 100, True, False),
        ("least_loaded", None, True, False),
        ("least_loaded", 100, False, False),
        ("least_loaded", 100, True, True),
        ("cache_aware", 100, True, True),
    ],
)
def test_r57_cached_blocks_at_routing_is_null_for_other_policies(
    policy: str, blocks: int | None, prefix_caching: bool, recorded: bool
) -> None:
    # a (8 tokens, [1, 2]) and then b (8 tokens, [1, 2]) after a completed: with least loaded
    # both join w0 (0, 0 both times); b sees a's 2 blocks there. c has no hashes: 0 when
    # recorded. d is rejected (R10: empty prompt): never routed, always null.
    seed = 7 if policy == "random" else None
    wl = workload(
        ("a", 0, 8, 1, [1, 2]),
        ("b", 5000, 8, 1, [1, 2]),
        ("c", 5000, 8, 1),
        ("d", 5000, 0, 1),
    )
    sc = scenario(policy, blocks=blocks, prefix_caching=prefix_caching, seed=seed)
    states = by_id(simulate(sc, wl, PROFILE))
    assert states["d"].cached_blocks_at_routing is None
    values = [states[i].cached_blocks_at_routing for i in "abc"]
    if recorded:
        assert values == [0, 2, 0]
    else:
        assert values == [None, None, None]


# --- runs of decode steps: what the router reads does not change inside one ----------------


def _no_runs(*_: object, **__: object) -> int:
    return 1


shared_prefix_requests = st.lists(
    st.tuples(
        st.integers(0, 6000),  # arrival
        st.integers(1, 40),  # prompt tokens
        st.integers(1, 30),  # output tokens
        st.integers(0, 3),  # which of a few shared prefixes
        st.integers(0, 10),  # how many hashes
    ),
    min_size=1,
    max_size=25,
)


def _shared_prefix_workload(requests: list[tuple[int, int, int, int, int]]) -> Workload:
    """Drawn ``(arrival, prompt, out, prefix, hashes)`` requests: ``hashes`` hashes of the
    pool ``prefix``, so that requests of one pool share their leading blocks."""
    return workload(
        *[
            (f"r{i}", arrival, prompt, out, [100 * prefix + h for h in range(hashes)])
            for i, (arrival, prompt, out, prefix, hashes) in enumerate(requests)
        ]
    )


def _observed(result: SimulationResult) -> list[tuple[object, ...]]:
    """What routing and the cache decided for each request, and when its tokens came."""
    return [
        (
            state.worker,
            state.cached_blocks_at_routing,
            state.reused_prompt_tokens,
            state.preemptions,
            state.token_times_us.to_list(),
        )
        for state in result.requests
    ]


@settings(max_examples=60, deadline=None)
@given(
    shared_prefix_requests,
    st.sampled_from(["least_loaded", "cache_aware"]),
    st.integers(1, 3),
    st.sampled_from([12, 20, 1000]),
    st.tuples(st.integers(0, 3), st.integers(0, 3)).filter(lambda w: w != (0, 0)),
)
def test_state_aware_routing_is_the_same_with_and_without_decode_runs(
    requests: list[tuple[int, int, int, int, int]],
    policy: str,
    workers: int,
    blocks: int,
    weights: tuple[int, int],
) -> None:
    # The loop keeps a run of decode steps as one object and lets routers read the worker
    # mid-run (decode_runs.keeps_router_view). Forming every step one at a time must route and time
    # every request the same; small caches make runs stop where a step would evict.
    wl = _shared_prefix_workload(requests)
    sc = scenario(policy, workers=workers, blocks=blocks, weights=weights)
    with_runs = simulate(sc, wl, PROFILE)
    with mock.patch.object(decode_runs, "decode_run_length", _no_runs):
        one_by_one = simulate(sc, wl, PROFILE)
    assert _observed(with_runs) == _observed(one_by_one)


def _every_worker(self: FleetView) -> range:
    return range(self.size)


@settings(max_examples=60, deadline=None)
@given(
    shared_prefix_requests,
    st.integers(2, 4),
    st.sampled_from([12, 20, 1000]),
    st.tuples(st.integers(0, 3), st.integers(0, 3)).filter(lambda w: w != (0, 0)),
)
def test_cache_aware_weighing_candidates_routes_as_weighing_every_worker(
    requests: list[tuple[int, int, int, int, int]],
    workers: int,
    blocks: int,
    weights: tuple[int, int],
) -> None:
    # CacheAwareRouter weighs only the workers where the request's block 0 was ever
    # registered (fleet_view.FirstBlocks) and the least loaded; told that every worker may have
    # cached blocks, it weighs them all, as R56 reads. Small caches evict registered blocks.
    wl = _shared_prefix_workload(requests)
    sc = scenario("cache_aware", workers=workers, blocks=blocks, weights=weights)
    weighed = simulate(sc, wl, PROFILE)
    with mock.patch.object(FleetView, "may_have_cached", _every_worker):
        scanned = simulate(sc, wl, PROFILE)
    assert _observed(weighed) == _observed(scanned)


#: a decode run that would have to evict: one worker of 4 blocks. a (8 tokens, [1, 2]) leaves
#: 2 cached blocks; b (4 tokens, 12 out) at 2000 takes 1 block, and decoding it needs 3 more:
#: 1 free, then 2 evicted.
EVICTING_RUN = workload(("a", 0, 8, 1, [1, 2]), ("b", 2000, 4, 12))


def test_a_decode_run_stops_where_a_step_would_evict() -> None:
    # If decode_runs.block_run_limit ever let a run evict, the loop's keeps_router_view
    # check would stop this replay: a state-aware router could read a stale registry mid-run.
    result = simulate(scenario("least_loaded", workers=1, blocks=4), EVICTING_RUN, PROFILE)
    worker = result.workers[0]
    assert isinstance(worker.memory, BlockMemory)
    assert worker.kv_counters is not None
    assert worker.kv_counters.evictions == 2  # all while b decodes: 4 + 11 tokens, 4 blocks
    assert len(by_id(result)["b"].token_times_us) == 12


def test_keeps_router_view_rejects_a_run_that_evicts() -> None:
    # A run limit that ignores the free blocks makes b's decode run evict: the check fires.
    def unlimited(*_: object) -> int:
        return 1 << 30

    with (
        mock.patch.object(decode_runs, "block_run_limit", unlimited),
        pytest.raises(AssertionError, match="keeps_router_view"),
    ):
        simulate(scenario("least_loaded", workers=1, blocks=4), EVICTING_RUN, PROFILE)
