"""Routing: which worker an accepted request joins (SPEC.md section 4, R12 to R15).

Routing in v1 depends only on the order of accepted arrivals, never on worker state, which is
why a router is a tiny object with one method.
"""

from __future__ import annotations

from typing import Protocol

from servesim.model import Routing

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


class Router(Protocol):
    """Chooses the worker of each accepted request, called once per request in arrival order."""

    def route(self) -> int:
        """The index of the worker the next accepted request joins."""
        ...


class RoundRobinRouter:
    """R13: the k-th accepted request (counting from 0) joins worker k mod N."""

    __slots__ = ("_next", "_workers")

    def __init__(self, workers: int) -> None:
        self._workers = workers
        self._next = 0

    def route(self) -> int:
        worker = self._next
        self._next = (worker + 1) % self._workers
        return worker


class RandomRouter:
    """R15: one SplitMix64 draw per accepted request; the draw z picks worker z mod N."""

    __slots__ = ("_generator", "_workers")

    def __init__(self, workers: int, seed: int) -> None:
        self._workers = workers
        self._generator = SplitMix64(seed)

    def route(self) -> int:
        return self._generator.next() % self._workers


def make_router(routing: Routing, workers: int) -> Router:
    """The router that ``routing`` names, for a fleet of ``workers``."""
    if routing.policy == "random":
        assert routing.seed is not None  # guaranteed by the schema (R3)
        return RandomRouter(workers, routing.seed)
    return RoundRobinRouter(workers)
