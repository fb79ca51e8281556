"""R13 to R15: round robin, SplitMix64 and random routing, against the spec's test vectors; R55
and R56's routers against a fleet given by hand (whole replays: test_state_routing.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servesim.contract.model import Routing
from servesim.engine.routing import (
    CacheAwareRouter,
    LeastLoadedRouter,
    LowestFirst,
    RandomRouter,
    RoundRobinRouter,
    SplitMix64,
    make_router,
)


@dataclass
class StubFleet:
    """A ``routing.Fleet`` given by hand: one entry per worker, the request's prompt blocks."""

    outstanding_requests: list[int]
    load: list[int] = field(default_factory=list)
    cached_blocks: list[int] = field(default_factory=list)
    prompt: int = 0
    extra_holders: set[int] = field(default_factory=set)
    """Workers ``may_have_cached`` names beyond those with cached blocks (evicted since)."""

    @property
    def size(self) -> int:
        return len(self.outstanding_requests)

    def outstanding(self, worker: int) -> int:
        return self.outstanding_requests[worker]

    def load_blocks(self, worker: int) -> int:
        return self.load[worker]

    def prompt_blocks(self) -> int:
        return self.prompt

    def cached(self, worker: int) -> int:
        return self.cached_blocks[worker]

    def may_have_cached(self) -> set[int]:
        holders = {w for w, cached in enumerate(self.cached_blocks) if cached > 0}
        return holders | self.extra_holders


#: Round robin and random never read the fleet (R12): any view will do.
IGNORED = StubFleet([])

#: R14's test vectors (SPEC.md), the standard SplitMix64 outputs.
SPLITMIX64_VECTORS = {
    0: [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F],
    42: [0xBDD732262FEB6E95, 0x28EFE333B266F103, 0x47526757130F9F52],
}


@pytest.mark.parametrize("seed", sorted(SPLITMIX64_VECTORS))
def test_r14_splitmix64_matches_test_vectors(seed: int) -> None:
    generator = SplitMix64(seed)
    assert [generator.next() for _ in range(3)] == SPLITMIX64_VECTORS[seed]


def test_r14_splitmix64_wraps_at_2_64() -> None:
    generator = SplitMix64(2**64 - 1)
    outputs = [generator.next() for _ in range(1000)]
    assert all(0 <= value < 2**64 for value in outputs)
    assert generator.state == (2**64 - 1 + 1000 * 0x9E3779B97F4A7C15) % 2**64


def test_r15_random_routing_is_draw_mod_workers() -> None:
    router = RandomRouter(4, 42)
    assert [router.route(IGNORED) for _ in range(3)] == [1, 3, 2]  # the R15 test vector
    expected = [value % 7 for value in SPLITMIX64_VECTORS[0]]
    router = RandomRouter(7, 0)
    assert [router.route(IGNORED) for _ in range(3)] == expected


def test_r13_round_robin_cycles_through_workers() -> None:
    router = RoundRobinRouter(3)
    assert [router.route(IGNORED) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_make_router_follows_policy() -> None:
    assert isinstance(make_router(Routing("round_robin"), 2), RoundRobinRouter)
    assert isinstance(make_router(Routing("random", seed=1), 2), RandomRouter)
    assert isinstance(make_router(Routing("least_loaded"), 2), LeastLoadedRouter)
    assert isinstance(make_router(Routing("cache_aware"), 2), CacheAwareRouter)


def least_loaded(outstanding: list[int]) -> int:
    """LeastLoadedRouter's choice once it has heard of every worker's count."""
    router = LeastLoadedRouter(len(outstanding))
    fleet = StubFleet(outstanding)
    for worker in range(fleet.size):
        router.counters_changed(fleet, worker)
    return router.route(fleet)


def test_r55_least_loaded_takes_the_fewest_outstanding_then_the_lowest_index() -> None:
    assert least_loaded([3, 1, 2]) == 1
    assert least_loaded([2, 0, 5, 0]) == 1  # a tie: the lower index
    assert least_loaded([0, 0, 0]) == 0
    assert least_loaded([4, 4, 4, 3]) == 3


@given(
    st.integers(1, 6).flatmap(
        lambda n: st.tuples(
            st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 4)))
        )
    )
)
def test_lowest_first_is_the_first_of_the_smallest_keys(
    case: tuple[int, list[tuple[int, int]]],
) -> None:
    # after every change, the heap with stale entries agrees with a scan of the keys
    workers, changes = case
    order, keys = LowestFirst(workers), [0] * workers
    assert order.least() == 0
    for worker, key in changes:
        order.update(worker, key)
        keys[worker] = key
        assert order.least() == keys.index(min(keys))


def cache_aware(fleet: StubFleet, prefill_weight: int, load_weight: int) -> int:
    """CacheAwareRouter's choice once it has heard of every worker's load."""
    router = CacheAwareRouter(fleet.size, prefill_weight, load_weight)
    for worker in range(fleet.size):
        router.counters_changed(fleet, worker)
    return router.route(fleet)


def by_scan(fleet: StubFleet, prefill_weight: int, load_weight: int) -> int:
    """R56 read literally: every worker's cost, the first of the lowest."""
    costs = [
        prefill_weight * (fleet.prompt - fleet.cached(w)) + load_weight * fleet.load_blocks(w)
        for w in range(fleet.size)
    ]
    return costs.index(min(costs))


def test_r56_cache_aware_cost_is_r56_formula() -> None:
    # prompt 10 blocks; cached 0, 6, 10; load 0, 3, 9. With weights (1, 1):
    # cost = (10-0)+0 = 10, (10-6)+3 = 7, (10-10)+9 = 9: worker 1.
    fleet = StubFleet([0, 0, 0], load=[0, 3, 9], cached_blocks=[0, 6, 10], prompt=10)
    router = CacheAwareRouter(3, 1, 1)
    costs = [router.cost(10, fleet.cached(w), fleet.load_blocks(w)) for w in range(3)]
    assert costs == [10, 7, 9]
    assert cache_aware(fleet, 1, 1) == 1
    # (3, 1): 30, 12+3 = 15, 0+9 = 9: worker 2. (1, 2): 10, 4+6 = 10, 18: 0 and 1 tie, 0.
    assert cache_aware(fleet, 3, 1) == 2
    assert cache_aware(fleet, 1, 2) == 0
    # (0, 1): the load alone, worker 0; (1, 0): the cache alone, worker 2.
    assert cache_aware(fleet, 0, 1) == 0
    assert cache_aware(fleet, 1, 0) == 2


def test_r56_cache_aware_is_exact_beyond_64_bits() -> None:
    # R56: costs above 2**64 stay exact; a float would tie these two workers
    big = 2**70
    fleet = StubFleet([0, 0], load=[big + 1, big], cached_blocks=[0, 0], prompt=1)
    assert cache_aware(fleet, 65536, 65536) == 1


@st.composite
def fleets(draw: st.DrawFn) -> StubFleet:
    workers = draw(st.integers(1, 8))
    prompt = draw(st.integers(1, 6))
    per_worker = st.lists(st.integers(0, prompt), min_size=workers, max_size=workers)
    cached = draw(per_worker)
    load = draw(st.lists(st.integers(0, 12), min_size=workers, max_size=workers))
    extra = draw(st.sets(st.integers(0, workers - 1)))
    return StubFleet([0] * workers, load, cached, prompt, extra)


@given(fleets(), st.integers(0, 3), st.integers(0, 3))
def test_r56_cache_aware_candidates_hold_the_winner_of_every_worker(
    fleet: StubFleet, prefill_weight: int, load_weight: int
) -> None:
    # the router weighs only its candidates: it must choose what a scan of every worker does
    assert cache_aware(fleet, prefill_weight, load_weight) == by_scan(
        fleet, prefill_weight, load_weight
    )
