"""What a state-aware router sees of the fleet at an arrival (SPEC.md R54).

``FleetView`` is ``routing.Fleet`` over the workers: their counters and, for the request being
routed, ``cached(w, r)``. ``FirstBlocks`` is the fleet-wide index that lets a cache-aware router
skip the workers where a request can have nothing cached.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from servesim.engine.kv.identities import Identity

if TYPE_CHECKING:
    from servesim.engine.requests import RequestState
    from servesim.engine.worker import Worker


class FleetView:
    """R54: what a state-aware router sees at one arrival (``routing.Fleet``).

    It reads the workers at the moment it is asked, in the arrival event, so it sees the fleet
    after every event with a smaller key (R7). A worker may be in the middle of a run of decode
    steps then (``Step.repeat``), which the loop applies only when the run ends; that is exact
    because nothing a router reads changes inside a run (``decode_runs.keeps_router_view``).
    """

    __slots__ = ("_first_blocks", "_workers", "request")

    def __init__(self, workers: list[Worker], first_blocks: FirstBlocks) -> None:
        self._workers = workers
        self._first_blocks = first_blocks
        self.request: RequestState | None = None
        """The request being routed; ``None`` between arrivals, when a router reads only the
        counters (R54)."""

    @property
    def size(self) -> int:
        return len(self._workers)

    def outstanding(self, worker: int) -> int:
        return self._workers[worker].outstanding

    def load_blocks(self, worker: int) -> int:
        return self._workers[worker].load_blocks

    def prompt_blocks(self) -> int:
        assert self.request is not None, "no request is being routed"
        return self._workers[0].memory.prompt_blocks(self.request)

    def cached(self, worker: int) -> int:
        assert self.request is not None, "no request is being routed"
        return self._workers[worker].memory.cached_blocks(self.request)

    def may_have_cached(self) -> Collection[int]:
        assert self.request is not None, "no request is being routed"
        identities = self._workers[0].memory.identities(self.request)
        return self._first_blocks.workers(identities[0]) if identities else ()


class FirstBlocks:
    """For each identity of a block 0 (R47), the workers where such a block was registered at
    some time: a superset of those where it is registered now (an eviction does not remove a
    worker), shared by the fleet. A request's ``cached(w, r)`` (R54) is 0 at every other
    worker, so a cache-aware router need not walk the registry there
    (``routing.CacheAwareRouter``)."""

    __slots__ = ("_workers",)

    def __init__(self) -> None:
        self._workers: dict[Identity, set[int]] = {}

    def filled(self, identity: Identity, worker: int) -> None:
        """``worker`` filled a block 0 with ``identity`` (it registered it, or already had)."""
        self._workers.setdefault(identity, set()).add(worker)

    def workers(self, identity: Identity) -> frozenset[int] | set[int]:
        """The workers where a block 0 with ``identity`` may be registered now."""
        return self._workers.get(identity, _NO_WORKERS)


_NO_WORKERS: frozenset[int] = frozenset()
