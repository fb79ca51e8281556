"""A worker's KV memory, as a formation policy and the worker see it (SPEC.md R45, R46, R48).

Formation (``servesim.engine.formation``) decides who runs and with how many tokens; the memory
says whether the blocks for those tokens can be had, takes and releases them, and finds reuse.
Two memories: ``UnlimitedMemory`` (no ``kv_cache``, R45: memory is unlimited and sections 2 to
7 apply unchanged; it grants everything and keeps nothing) and ``BlockMemory``
(``servesim.engine.block_memory``: R45 to R52 on a ``BlockCache``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from servesim.engine.kv.counters import KvCacheCounters
from servesim.engine.kv.identities import NO_IDENTITIES, BlockIdentities

if TYPE_CHECKING:
    from servesim.engine.kv.host_tier import HostPool
    from servesim.engine.requests import RequestState
    from servesim.engine.step import Step


class Memory(Protocol):
    """What a formation policy may ask of a worker's memory, and what the worker tells it."""

    @property
    def unlimited(self) -> bool:
        """R45: every request of this worker can always have every block it asks for, so
        ``grow``, ``release``, ``admit`` and the rest change nothing and a policy may skip
        them (the hot path without a cache)."""

    @property
    def ordered(self) -> bool:
        """R51, R127: whether its step ends need the running list as each step was formed
        (``Step.order``): with continuing turns (R125) or a host tier (R131)."""

    @property
    def host(self) -> HostPool | None:
        """R129: its scheduler's host pool; ``None`` without one (always without a cache)."""

    @property
    def counters(self) -> KvCacheCounters | None:
        """R52: the worker's cache counters; ``None`` without a cache."""

    def identities(self, state: RequestState) -> BlockIdentities:
        """R47: the request's identified blocks (none without prefix caching)."""

    def prompt_blocks(self, state: RequestState) -> int:
        """R54: what the request adds to the worker's ``load_blocks``."""

    def cached_blocks(self, state: RequestState) -> int:
        """R54: ``cached(w, r)`` at this worker, now."""

    def grow(self, state: RequestState, tokens: int) -> bool:
        """R46, R49: give a running request ``tokens`` more cached tokens and the blocks they
        need, if those can be had now (evicting cached blocks if need be); else take nothing
        and say so (the policy then preempts, or does not run the request)."""

    def release(self, state: RequestState) -> None:
        """R46, R49: a preempted request releases every block and has no cached tokens."""

    def reusable(self, state: RequestState, target: int) -> int:
        """R48: the tokens a waiting request offered admission now would reuse of the
        ``target`` (L) it must compute; ``refusal`` and ``admit`` are about this offer."""

    def refusal(self, state: RequestState, cached: int) -> int:
        """R50 step 3: 0 if the offered request can have the blocks for ``cached`` cached
        tokens (its reuse and its allotment), else how many new blocks it needs."""

    def admit(self, state: RequestState, cached: int) -> None:
        """R48, R50 step 3: the offered request holds its hit blocks, then takes its new
        blocks, and has ``cached`` cached tokens."""

    def host_run(self, state: RequestState) -> int:
        """R133: the offered request's host run m (0 without a host pool)."""

    def start_load(self, state: RequestState, run: int, now_us: int) -> bool:
        """R134: the offered request starts its load of ``run`` blocks, if it can have them."""

    def join(self, state: RequestState, now_us: int) -> None:
        """R135: a loaded request joins the running list now."""

    def formed(self, step: Step, preempted: list[RequestState]) -> None:
        """R52: what the step just formed says of the cache (its blocks, its victims)."""

    def take_run_blocks(self, step: Step) -> None:
        """R46: at the end of a run, the blocks its later decode steps took, one token each."""

    def step_ended(self, step: Step, finished: list[RequestState]) -> None:
        """R51: after R20, the step's registrations (R47), then the completed requests'
        releases (R46)."""


class UnlimitedMemory:
    """R45: no ``kv_cache``; every block is always there, nothing is cached or counted."""

    __slots__ = ()

    unlimited = True
    ordered = False
    host = None
    counters = None

    def identities(self, state: RequestState) -> BlockIdentities:
        return NO_IDENTITIES

    def prompt_blocks(self, state: RequestState) -> int:
        return 0  # R54: no blocks without a cache

    def cached_blocks(self, state: RequestState) -> int:
        return 0  # R54: no cache, nothing cached

    def grow(self, state: RequestState, tokens: int) -> bool:
        return True

    def release(self, state: RequestState) -> None:
        pass

    def reusable(self, state: RequestState, target: int) -> int:
        return 0

    def refusal(self, state: RequestState, cached: int) -> int:
        return 0

    def admit(self, state: RequestState, cached: int) -> None:
        pass

    def host_run(self, state: RequestState) -> int:
        return 0

    def start_load(self, state: RequestState, run: int, now_us: int) -> bool:
        raise AssertionError("R129: no host pool without a cache")

    def join(self, state: RequestState, now_us: int) -> None:
        raise AssertionError("R129: no host pool without a cache")

    def formed(self, step: Step, preempted: list[RequestState]) -> None:
        pass

    def take_run_blocks(self, step: Step) -> None:
        pass

    def step_ended(self, step: Step, finished: list[RequestState]) -> None:
        pass
