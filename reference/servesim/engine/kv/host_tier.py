"""A scheduler's host pool and its two lanes (SPEC.md R129 to R136, section 19).

A host pool is a second tier beside a scheduler's GPU cache (``cache``): ``blocks`` *entries*,
each holding one identity (R47, R126, R127) and *pending* (its store in flight), *resident*, or
resident and *pinned* by loads in flight (R129). Blocks reach it by write-through stores of what
a step registered (``HostPool.offer``, R131) and come back by loads before admission (R133,
R134). Each pool has a store lane and a load lane, each FIFO (``HostPool.submit``, R130);
transfers of the whole fleet are numbered in submission order, which orders their completion
events (``HostTransfers``, R136). What moves GPU blocks is the block memory's
(``servesim.engine.block_memory``); who loads, and when, is the formation's (R133 to R135).

Integers only: a transfer's time is ``ceil(n * block_bytes * 10^6 / W)`` µs in Python's
unbounded integers (R130).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Literal

from servesim.contract.errors import UnrepresentableHostTransfer
from servesim.contract.model import HostTier
from servesim.engine.kv.identities import BlockIdentities, Identity

if TYPE_CHECKING:
    from servesim.engine.requests import RequestState

#: R6: the largest time a report can hold; a transfer must end by then (R130).
MAX_TIME_US = (1 << 53) - 1

PENDING = -1
"""``HostPool.entries``' value for an entry whose store is in flight (R129); a resident entry's
value is its host recency number (R132), at least 0."""

TransferKind = Literal["store", "load"]


@dataclass(slots=True)
class HostCounters:
    """R140: what a scheduler's ``host`` report member counts."""

    stores: int = 0
    stored_blocks: int = 0
    loads: int = 0
    loaded_blocks: int = 0
    reused_tokens: int = 0
    """R137: the host part of every admission (``m * B``)."""
    evictions: int = 0
    skipped_blocks: int = 0


@dataclass(slots=True, eq=False)
class HostTransfer:
    """R130: one transfer of ``len(blocks)`` blocks on one lane of one scheduler's host pool.

    ``blocks`` are the block indices of ``state`` it carries, in block order, and
    ``identities`` their identities; a load also keeps its request's GPU hit ``hit`` (g, R133).
    """

    kind: TransferKind
    pool: HostPool
    state: RequestState
    blocks: list[int]
    identities: list[Identity]
    submitted_us: int
    hit: int = 0
    start_us: int = 0
    end_us: int = 0
    order: int = 0
    """R136: its submission number, over the whole fleet."""


class HostPool:
    """One scheduler's host pool: its entries, its host recency numbers, its lanes (R129 to
    R132).

    An entry is in exactly one of three places: ``pending`` (its store in flight), ``lru``
    (resident and unpinned, with its number) or ``pins`` (resident and pinned, with its pin
    count; ``pinned_numbers`` keeps the number it had). Numbers only grow, so ``lru``, an
    ordered mapping kept in number order (an entry renumbered moves to its end; a pinned one
    leaves it until its last pin goes, when it gets a new number, R132), is the host LRU: host
    eviction (R131) takes its first entries. The operations work on lists of identities at
    once, which is most of a Mooncake replay's host work.
    """

    __slots__ = (
        "block_bytes",
        "capacity",
        "counters",
        "load_end_us",
        "load_rate",
        "lru",
        "next_number",
        "pending",
        "pinned_numbers",
        "pins",
        "rank",
        "store_end_us",
        "store_rate",
        "worker",
    )

    def __init__(self, host: HostTier, block_tokens: int, worker: int, rank: int) -> None:
        self.capacity = host.blocks
        self.block_bytes = block_tokens * host.bytes_per_token  # R129
        self.store_rate = host.store_bytes_per_s
        self.load_rate = host.load_bytes_per_s
        self.store_end_us = 0  # R130: the end of the last transfer submitted on the lane
        self.load_end_us = 0
        self.pending: set[Identity] = set()
        self.lru: OrderedDict[Identity, int] = OrderedDict()
        self.pins: dict[Identity, int] = {}
        self.pinned_numbers: dict[Identity, int] = {}
        self.next_number = 0  # R132: the pool's counter, from 0
        self.counters = HostCounters()
        self.worker = worker
        """Its scheduler's worker (global index) and rank, which the trace's transfers name."""
        self.rank = rank

    @property
    def entries(self) -> dict[Identity, int]:
        """Every entry: ``PENDING``, or its host recency number (a view, for checks)."""
        view = dict.fromkeys(self.pending, PENDING)
        view.update(self.lru)
        view.update(self.pinned_numbers)
        return view

    def __len__(self) -> int:
        """R129: how many entries the pool holds, pending ones included."""
        return len(self.pending) + len(self.lru) + len(self.pins)

    def _has_entry(self, identity: Identity) -> bool:
        return identity in self.lru or identity in self.pending or identity in self.pins

    # --- R130: the lanes

    def schedule(self, transfer: HostTransfer) -> None:
        """R130: the transfer, submitted at ``transfer.submitted_us``, starts when its lane's
        last transfer ends (or at once) and lasts ``ceil(n * block_bytes * 10^6 / W)`` µs; an
        end after 2^53 - 1 µs is R6's error, found now."""
        store = transfer.kind == "store"
        lane_end = self.store_end_us if store else self.load_end_us
        rate = self.store_rate if store else self.load_rate
        start = max(transfer.submitted_us, lane_end)
        end = start + -(-len(transfer.blocks) * self.block_bytes * 1_000_000 // rate)
        if end > MAX_TIME_US:
            raise UnrepresentableHostTransfer(
                kind=transfer.kind,
                request=transfer.state.request.id,
                submitted_us=transfer.submitted_us,
                end_us=end,
            )
        transfer.start_us, transfer.end_us = start, end
        if store:
            self.store_end_us = end
        else:
            self.load_end_us = end

    # --- R132: host recency numbers

    def _number(self, identities: list[Identity]) -> None:
        """The entries, none of them in ``lru`` now, become resident and unpinned with the
        pool's next host recency numbers, in the order given."""
        first = self.next_number
        self.next_number = first + len(identities)
        self.lru.update(zip(identities, range(first, self.next_number), strict=False))

    # --- R131: stores

    def offer(
        self, blocks: list[int], identities: list[Identity]
    ) -> tuple[list[int], list[Identity]]:
        """R131: a request offers the blocks it registered (``blocks`` in block order, their
        ``identities``); those that take a new pending entry, in block order (the store's).

        In block order: a block whose identity has an entry is left out; another takes a free
        entry, or one host eviction (the resident, unpinned entry with the smallest number)
        makes room; when every entry is pending or pinned, it and the later offered blocks
        without an entry are skipped (ref-questions Q4). Whether a block has an entry is judged
        at its turn (Q12: an earlier block's eviction may have taken it)."""
        lru, pending, pins = self.lru, self.pending, self.pins
        if (
            lru.keys().isdisjoint(identities)
            and pending.isdisjoint(identities)
            and (not pins or pins.keys().isdisjoint(identities))
        ):  # the common case: every block is new, and no eviction can take an offered one
            room = self.capacity - len(self)
            fresh_blocks, fresh = blocks, identities
            if len(fresh) > room:
                evicted = min(len(fresh) - room, len(lru))
                # R131: the least recent first, popped in C (a deque of length 0 drains it)
                deque(map(lru.popitem, repeat(False, evicted)), maxlen=0)
                counters = self.counters
                counters.evictions += evicted
                taken = room + evicted
                counters.skipped_blocks += len(fresh) - taken
                fresh_blocks, fresh = fresh_blocks[:taken], fresh[:taken]
            pending.update(fresh)
            return fresh_blocks, fresh
        taken_blocks: list[int] = []
        taken_identities: list[Identity] = []
        has_entry = self._has_entry
        for index, identity in enumerate(identities):
            if has_entry(identity):
                continue
            if len(self) >= self.capacity:
                if not lru:  # every entry pending or pinned: skipped, with the later ones
                    self.counters.skipped_blocks += sum(
                        [1 for other in identities[index:] if not has_entry(other)]
                    )
                    break
                lru.popitem(last=False)
                self.counters.evictions += 1
            pending.add(identity)
            taken_blocks.append(blocks[index])
            taken_identities.append(identity)
        return taken_blocks, taken_identities

    def stored(self, identities: list[Identity]) -> None:
        """R132: a store completes: its entries become resident, numbered from its last block
        to its first."""
        self.pending.difference_update(identities)
        self._number(identities[::-1])

    # --- R133, R134: lookup, touch, pins and loads

    def run(self, identities: Sequence[Identity], hit: int, most: int) -> int:
        """R133: the host run m after a GPU hit of ``hit`` blocks: blocks ``hit`` to ``hit + m
        - 1`` identified with a resident entry (pinned or not), ``hit + m <= most``; a pending
        entry, or none, ends it."""
        lru, pins = self.lru, self.pins
        if not lru and not pins:
            return 0
        run = 0
        for block in range(hit, min(most, len(identities))):
            identity = identities[block]
            if identity not in lru and identity not in pins:
                break
            run += 1
        return run

    def touch(self, identities: Sequence[Identity], most: int, hit: int, run: int) -> None:
        """R133: at an admission with m = 0 or a load's start, the identified blocks 0 to
        ``most - 1`` outside the host run (``hit`` to ``hit + run - 1``) with a resident,
        unpinned entry get new numbers, from the last block to the first (R132)."""
        lru = self.lru
        if not lru:
            return
        if isinstance(identities, BlockIdentities):
            named = identities.span(0, most)
        else:
            named = list(identities[:most])
        touched = [identity for identity in named[hit + run :][::-1] if identity in lru]
        touched += [identity for identity in named[:hit][::-1] if identity in lru]
        if touched:
            for identity in touched:
                del lru[identity]
            self._number(touched)

    def pin(self, identities: list[Identity]) -> None:
        """R134: each entry of a load's run (resident) gets one more pin; a pinned entry is
        not evictable: it leaves ``lru``."""
        pins, lru = self.pins, self.lru
        for identity in identities:
            if identity in pins:
                pins[identity] += 1
            else:
                self.pinned_numbers[identity] = lru.pop(identity)
                pins[identity] = 1

    def loaded(self, identities: list[Identity]) -> None:
        """R132, R134: a load completes: its entries lose a pin each, and those left with none
        get new numbers, from its last block to its first."""
        pins = self.pins
        freed: list[Identity] = []
        for identity in reversed(identities):
            left = pins[identity] - 1
            if left:
                pins[identity] = left
            else:
                del pins[identity]
                del self.pinned_numbers[identity]
                freed.append(identity)
        if freed:
            self._number(freed)

    def resident_count(self) -> int:
        """How many entries are resident (for checks)."""
        return len(self.lru) + len(self.pins)


@dataclass(slots=True)
class HostTransfers:
    """R136: the fleet's host transfers: each submitted one gets the next submission number and
    a host transfer completion event at its end (``queue``, the event loop's, with ``kind``
    its priority); ``recorded`` lists every one when the trace is asked for (R140)."""

    kind: int
    queue: list[tuple[int, int, int, int]] = field(default_factory=list)
    in_flight: dict[int, HostTransfer] = field(default_factory=dict)
    next_order: int = 0
    recorded: list[HostTransfer] | None = None

    def submit(self, transfer: HostTransfer) -> None:
        """R130, R136: time the transfer on its lane and create its completion event."""
        transfer.pool.schedule(transfer)
        order = self.next_order
        self.next_order = order + 1
        transfer.order = order
        self.in_flight[order] = transfer
        heapq.heappush(self.queue, (transfer.end_us, self.kind, order, order))
        if self.recorded is not None:
            self.recorded.append(transfer)
        counters = transfer.pool.counters
        if transfer.kind == "store":
            counters.stores += 1
            counters.stored_blocks += len(transfer.blocks)
        else:
            counters.loads += 1
            counters.loaded_blocks += len(transfer.blocks)

    def complete(self, order: int) -> HostTransfer:
        """R136: the transfer numbered ``order`` ends now."""
        return self.in_flight.pop(order)
