"""Routing: which worker an accepted request joins (SPEC.md section 4, R12 to R15; section 12,
R54 to R56).

Round robin and random routing depend only on the order of accepted arrivals. The state-aware
policies look at the fleet, but only through ``Fleet``: the few numbers R54 lets a router see,
so that this module knows nothing of how a worker keeps them. A router is a small object with
one method, called once per accepted request in arrival order.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection
from typing import Protocol

from servesim.contract.model import Routing

_MASK64 = (1 << 64) - 1


class SplitMix64:
    """R14: the SplitMix64 generator, all arithmetic modulo 2**64.

    Written out here rather than taken from a library so that a replay never depends on a
    third-party generator or its version.
    """

    __slots__ = ("state",)

    def __init__(self, seed: int) -> None:
        self.state = seed & _MASK64

    def next(self) -> int:
        """The next 64-bit output."""
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)


class Fleet(Protocol):
    """R54: exactly what a state-aware router sees at one arrival, of every worker w and of the
    request r being routed. Every number is an integer, so every decision is exact."""

    @property
    def size(self) -> int:
        """N, the number of workers (R16)."""
        ...

    def outstanding(self, worker: int) -> int:
        """The requests routed to ``worker`` that have not completed."""
        ...

    def load_blocks(self, worker: int) -> int:
        """Those requests' prompts in blocks, each ``ceil(prompt_tokens / B)`` (with a cache)."""
        ...

    def prompt_blocks(self) -> int:
        """r's prompt in blocks, ``ceil(prompt_tokens / B)`` (with a cache)."""
        ...

    def cached(self, worker: int) -> int:
        """``cached(w, r)``: r's leading identified blocks registered at ``worker`` now, at
        most ``floor(prompt_tokens / B)`` (with prefix caching on; 0 otherwise)."""
        ...

    def may_have_cached(self) -> Collection[int]:
        """The workers where ``cached(w, r)`` may be above 0: every worker not among them
        has ``cached(w, r) == 0`` (a superset is allowed, not a subset)."""
        ...


class Router(Protocol):
    """Chooses the worker of each accepted request, called once per request in arrival order."""

    def route(self, fleet: Fleet) -> int:
        """The index of the worker the request being routed joins; ``fleet`` is the fleet as
        it is at the request's arrival event (R54), which only state-aware routers read."""
        ...

    def counters_changed(self, fleet: Fleet, worker: int) -> None:
        """Hears that ``worker``'s ``outstanding`` and ``load_blocks`` changed: a request was
        routed to it or completed there. A router may keep them in order between arrivals."""
        ...


class LowestFirst:
    """The worker with the smallest key, of several the lowest index, among workers whose keys
    change one at a time: a heap of ``(key, worker)``.

    A change pushes the worker's new entry and leaves its old one behind; an entry whose key
    is no longer its worker's is dropped when it reaches the top. So a change and a query cost
    O(log n) amortised, where a scan of a large fleet would cost O(N) per request.
    """

    __slots__ = ("_heap", "_keys")

    def __init__(self, workers: int) -> None:
        self._keys = [0] * workers
        self._heap = [(0, worker) for worker in range(workers)]  # sorted, so a heap

    def update(self, worker: int, key: int) -> None:
        """``worker``'s key is now ``key``."""
        if self._keys[worker] != key:
            self._keys[worker] = key
            heapq.heappush(self._heap, (key, worker))

    def least(self) -> int:
        """The worker with the smallest key; of several, the lowest index."""
        heap, keys = self._heap, self._keys
        while heap[0][0] != keys[heap[0][1]]:  # a stale entry: its worker's key has changed
            heapq.heappop(heap)
        return heap[0][1]


class RoundRobinRouter:
    """R13: the k-th accepted request (counting from 0) joins worker k mod N."""

    __slots__ = ("_next", "_workers")

    def __init__(self, workers: int) -> None:
        self._workers = workers
        self._next = 0

    def counters_changed(self, fleet: Fleet, worker: int) -> None:
        pass  # R12: round robin ignores worker state

    def route(self, fleet: Fleet) -> int:
        worker = self._next
        self._next = (worker + 1) % self._workers
        return worker


class RandomRouter:
    """R15: one SplitMix64 draw per accepted request; the draw z picks worker z mod N."""

    __slots__ = ("_generator", "_workers")

    def __init__(self, workers: int, seed: int) -> None:
        self._workers = workers
        self._generator = SplitMix64(seed)

    def counters_changed(self, fleet: Fleet, worker: int) -> None:
        pass  # R12: random routing ignores worker state

    def route(self, fleet: Fleet) -> int:
        return self._generator.next() % self._workers


class SeededTies:
    """R58: with ``routing.seed``, each request a state-aware policy routes takes one
    SplitMix64 draw z, tie or not, and joins the tied worker at position z mod t."""

    __slots__ = ("_generator",)

    def __init__(self, seed: int) -> None:
        self._generator = SplitMix64(seed)

    def pick(self, tied: list[int]) -> int:
        """One of ``tied`` (the tied workers, in index order), by the next draw."""
        return tied[self._generator.next() % len(tied)]


class LeastLoadedRouter:
    """R55: the worker with the fewest outstanding requests; of several, the lowest index, or
    with a seed the one R58's draw picks.

    The counts are kept in order as they change (``LowestFirst``), so that a fleet of
    thousands of workers is not scanned at every arrival (with a seed every tied worker is
    needed, so the fleet is scanned then).
    """

    __slots__ = ("_by_outstanding", "_ties")

    def __init__(self, workers: int, ties: SeededTies | None = None) -> None:
        self._by_outstanding = LowestFirst(workers)  # every worker starts with none
        self._ties = ties

    def counters_changed(self, fleet: Fleet, worker: int) -> None:
        self._by_outstanding.update(worker, fleet.outstanding(worker))

    def route(self, fleet: Fleet) -> int:
        least = self._by_outstanding.least()
        if self._ties is None:
            return least
        fewest = fleet.outstanding(least)
        return self._ties.pick([w for w in range(fleet.size) if fleet.outstanding(w) == fewest])


class CacheAwareRouter:
    """R56: the worker with the lowest cost, of several the lowest index (or with a seed the
    one R58 draws), where

        cost(w) = prefill_weight * (prompt blocks - cached(w, r)) + load_weight * load_blocks(w)

    weighs the prompt blocks w would have to prefill against the prompt blocks it already has
    to serve (Dynamo's ``overlap_score_weight * prefill blocks + decode blocks``). Python's
    integers are exact at any size, so the cost never overflows (R56).

    Only a few workers can win (``candidates``), so a large fleet is not walked worker by
    worker at every arrival: the load blocks are kept in order as they change.
    """

    __slots__ = ("_by_load", "_load_weight", "_prefill_weight", "_ties")

    def __init__(
        self, workers: int, prefill_weight: int, load_weight: int, ties: SeededTies | None = None
    ) -> None:
        self._prefill_weight = prefill_weight
        self._load_weight = load_weight
        self._by_load = LowestFirst(workers)  # every worker starts with no load
        self._ties = ties

    def cost(self, prompt_blocks: int, cached: int, load_blocks: int) -> int:
        """R56's cost of a worker with ``cached`` blocks of the request's ``prompt_blocks``
        and ``load_blocks`` blocks to serve."""
        return self._prefill_weight * (prompt_blocks - cached) + self._load_weight * load_blocks

    def candidates(self, fleet: Fleet) -> set[int]:
        """The workers among which the lowest cost, lowest index, is always found.

        A worker w not in ``fleet.may_have_cached()`` has cached(w, r) = 0, so its cost is
        ``prefill_weight * prompt blocks + load_weight * load_blocks(w)``. Of those workers,
        the cheapest first is the one with the least ``load_blocks``, lowest index first, of
        the whole fleet (``LowestFirst``): no other worker has less load, and cached blocks
        only lower a cost. When ``load_weight`` is 0 they all cost the same, and the first of
        them is the lowest index not in ``may_have_cached()``.
        """
        may_have_cached = fleet.may_have_cached()
        candidates = {*may_have_cached, self._by_load.least()}
        if self._load_weight == 0:
            uncached = (w for w in range(fleet.size) if w not in may_have_cached)
            candidates.update(itertools.islice(uncached, 1))
        return candidates

    def counters_changed(self, fleet: Fleet, worker: int) -> None:
        self._by_load.update(worker, fleet.load_blocks(worker))

    def route(self, fleet: Fleet) -> int:
        prompt_blocks = fleet.prompt_blocks()
        if self._ties is not None:
            return self._ties.pick(self._tied(fleet, prompt_blocks))

        def cost(worker: int) -> int:
            return self.cost(prompt_blocks, fleet.cached(worker), fleet.load_blocks(worker))

        return min(sorted(self.candidates(fleet)), key=cost)  # min keeps the first of equals

    def _tied(self, fleet: Fleet, prompt_blocks: int) -> list[int]:
        """Every worker of the lowest cost, in index order (R58 draws among them)."""
        may_have_cached = fleet.may_have_cached()
        costs = [
            self.cost(
                prompt_blocks,
                fleet.cached(worker) if worker in may_have_cached else 0,
                fleet.load_blocks(worker),
            )
            for worker in range(fleet.size)
        ]
        lowest = min(costs)
        return [worker for worker, cost in enumerate(costs) if cost == lowest]


class WeightedRoundRobinRouter:
    """R81: nginx's smooth weighted round robin. Each routed request, every worker adds its
    weight to its current weight; the largest current weight (of several, the lowest index)
    wins and gives back W, the sum of the weights. After n requests worker w was chosen c_w
    times with ``|c_w * W - n * weight_w| <= W``."""

    __slots__ = ("_current", "_total", "_weights")

    def __init__(self, weights: list[int]) -> None:
        self._weights = weights
        self._current = [0] * len(weights)
        self._total = sum(weights)

    def counters_changed(self, fleet: Fleet, worker: int) -> None:
        pass  # R81: weighted round robin ignores worker state

    def route(self, fleet: Fleet) -> int:
        current = self._current
        best = 0
        for worker, weight in enumerate(self._weights):
            current[worker] += weight
            if current[worker] > current[best]:
                best = worker
        current[best] -= self._total
        return best


def make_router(routing: Routing, workers: int, weights: list[int] | None = None) -> Router:
    """The router that ``routing`` names, for a fleet of ``workers`` (R82: the schedulers, for
    a state-aware policy); ``weights`` are R81's, one per worker (1 each when not given)."""
    if routing.policy == "weighted_round_robin":
        return WeightedRoundRobinRouter(weights if weights is not None else [1] * workers)
    if routing.policy == "random":
        assert routing.seed is not None  # guaranteed by the schema (R3)
        return RandomRouter(workers, routing.seed)
    ties = None if routing.seed is None else SeededTies(routing.seed)
    if routing.policy == "least_loaded":
        return LeastLoadedRouter(workers, ties)
    if routing.policy == "cache_aware":
        return CacheAwareRouter(workers, routing.prefill_weight, routing.load_weight, ties)
    return RoundRobinRouter(workers)
