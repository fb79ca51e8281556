"""R13 to R15: round robin, SplitMix64 and random routing, against the spec's test vectors."""

from __future__ import annotations

import pytest

from servesim.model import Routing
from servesim.routing import RandomRouter, RoundRobinRouter, SplitMix64, make_router

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
    assert [router.route() for _ in range(3)] == [1, 3, 2]  # the R15 test vector
    expected = [value % 7 for value in SPLITMIX64_VECTORS[0]]
    router = RandomRouter(7, 0)
    assert [router.route() for _ in range(3)] == expected


def test_r13_round_robin_cycles_through_workers() -> None:
    router = RoundRobinRouter(3)
    assert [router.route() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_make_router_follows_policy() -> None:
    assert isinstance(make_router(Routing("round_robin"), 2), RoundRobinRouter)
    assert isinstance(make_router(Routing("random", seed=1), 2), RandomRouter)
