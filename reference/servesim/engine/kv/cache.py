"""R45, R46, R48, R49: a worker's block pool: held, cached and free blocks; taking blocks,
holding a hit, release and LRU eviction.

The pool counts blocks rather than naming each one: ``free`` free blocks, ``cached_count``
cached ones, and every other block is held, so held + cached + free = blocks at every instant
(R45) by construction. A request's blocks are its ``HeldBlocks`` (``held``); the registered ones
among them are entries of the prefix registry (``registry``), which ``BlockCache`` extends with
what changes a block's condition: a hit held (R48), blocks taken (R49), blocks released (R46).

Eviction (R49) takes cached blocks in order of release number, so the evicted ones are exactly
those whose release number is below a *frontier* that eviction moves up: evicting n blocks moves
it past n release numbers still in use, skipping those of cached blocks reused since (held
again; released again, such a block gets a new number). An evicted block's entry is simply left
behind in the registry, below the frontier, and counts as absent, so eviction touches no block
at all; a whole cached group whose last blocks are below the frontier has lost exactly those
blocks.
"""

from __future__ import annotations

import heapq
import itertools
import operator
from collections.abc import Sequence

from servesim.engine.kv.counters import KvCacheCounters
from servesim.engine.kv.held import GroupHolding, HeldBlocks
from servesim.engine.kv.identities import Identity
from servesim.engine.kv.registry import HELD, SPLIT, PrefixRegistry


class BlockCache(PrefixRegistry):
    """One worker's cache of ``blocks`` blocks of ``block_tokens`` tokens (R45 to R49).

    The registry (R47, R48) and the pool are one object, because every hot step of a replay
    (a hit, holding it, taking, registering, releasing) reads both. ``reused`` holds (as a heap)
    the runs ``(first, count)`` of release numbers at or above the frontier whose blocks were
    reused since, which eviction skips; ``next_release`` is the next release number (R46).
    """

    __slots__ = ("blocks", "cached_count", "counters", "free", "next_release", "reused")

    def __init__(
        self, blocks: int, block_tokens: int, counters: KvCacheCounters, per_hash: int = 1
    ) -> None:
        super().__init__(block_tokens, per_hash)
        self.blocks = blocks
        self.free = blocks  # R45: initially every block is free
        self.cached_count = 0
        self.reused: list[tuple[int, int]] = []
        self.next_release = 0
        self.counters = counters

    @property
    def held(self) -> int:
        """R45: the blocks one or more running requests hold."""
        return self.blocks - self.free - self.cached_count

    @property
    def cached(self) -> dict[Identity, int]:
        """R49: each cached block's identity and release number, oldest first; a view built on
        demand, for checks."""
        cached = [(self.value(identity), identity) for identity in self.identities()]
        return {identity: number for number, identity in sorted(cached) if 0 <= number < HELD}

    def obtainable(self) -> int:
        """R49: how many blocks a running request could take now (free, then by eviction)."""
        return self.free + self.cached_count

    def blocks_for(self, tokens: int) -> int:
        """R46: the blocks that hold ``tokens`` cached tokens, ``ceil(tokens / B)``."""
        return -(-tokens // self.block_tokens)

    def take(self, held: HeldBlocks, count: int) -> None:
        """R49: ``count`` more blocks for a request, each a free one if there is one, else the
        cached block with the smallest release number, evicted. The caller checked
        ``obtainable``."""
        from_free = min(count, self.free)
        self.free -= from_free
        if count > from_free:
            self.evict(count - from_free)
        held.count += count

    def evict(self, count: int) -> None:
        """R49: the ``count`` least recently released cached blocks leave the registry: the
        frontier moves past ``count`` release numbers of cached blocks, and past the runs of
        numbers of reused blocks it meets on the way (a run is skipped whole: its numbers are
        consecutive, so all of them lie below the frontier moved past it)."""
        reused = self.reused
        end = self.frontier + count
        while reused and reused[0][0] < end:
            end += heapq.heappop(reused)[1]
        self.frontier = end
        self.cached_count -= count
        self.counters.evictions += count

    def hold(self, held: HeldBlocks, hit: int) -> None:
        """R48: a request admitted with a hit of ``hit`` blocks becomes a holder of them; a
        cached one becomes held and loses its release number (which eviction will skip)."""
        per_hash = self.per_hash
        numbers = held.identities.numbers
        for index in range(-(-hit // per_hash)):
            group = numbers[index]
            wanted = min(per_hash, hit - index * per_hash)
            value = self.group_values[group]
            if value != SPLIT:
                count = self.count(group)
                if value >= HELD and wanted == count:  # a whole held group gains a holder
                    self.group_shared[group] = self.group_shared.get(group, 0) + 1
                    held.registered.append((group, count))
                    continue
                live = self._live(group)
                if value < HELD and wanted == live:  # a whole cached group becomes held
                    heapq.heappush(self.reused, (value + count - live, live))
                    self.cached_count -= live
                    self.group_values[group] = HELD
                    self.set_count(group, live)
                    held.registered.append((group, live))
                    continue
                self._split(group)  # it holds only some of them
            self._hold_blocks(held, range(group * per_hash, group * per_hash + wanted))
        held.count += hit
        held.registered_blocks += hit

    def _hold_blocks(self, held: HeldBlocks, identities: range) -> None:
        """``hold`` for blocks of a split group, one at a time."""
        values, shared = self.block_values, self.block_shared
        for identity in identities:
            value = values[identity]
            if value >= HELD:  # a block with holders gains one
                shared[identity] = shared.get(identity, 0) + 1
            else:
                heapq.heappush(self.reused, (value, 1))
                self.cached_count -= 1
                values[identity] = HELD
            held.registered.append(identity)

    def release(self, held: HeldBlocks) -> None:
        """R46: a request releases all its blocks, from its last to its first. A block left
        without holders becomes cached, with the next release number, if it is registered, and
        free otherwise.

        In the common case it holds whole groups only, and alone: they are all cached at once,
        each with the next ``c`` release numbers."""
        self.free += held.count - held.registered_blocks
        holdings = [entry for entry in reversed(held.registered) if isinstance(entry, tuple)]
        groups = list(map(operator.itemgetter(0), holdings))
        if (
            len(holdings) == len(held.registered)
            and self.group_shared.keys().isdisjoint(groups)
            and SPLIT not in map(self.group_values.__getitem__, groups)
        ):
            first = self.next_release
            # each group's first release number; accumulate also yields the next one after all
            counts = map(operator.itemgetter(1), holdings)
            numbers = itertools.accumulate(counts, initial=first)
            self.group_values.update(zip(groups, numbers, strict=False))
            self.next_release += held.registered_blocks
            self.cached_count += held.registered_blocks
        else:
            for entry in reversed(held.registered):
                self._release_entry(entry)
        held.count = 0
        held.registered = []
        held.registered_blocks = 0

    def _release_entry(self, entry: Identity | GroupHolding) -> None:
        """``release`` for one entry of ``HeldBlocks.registered``, its blocks last first."""
        if isinstance(entry, tuple):
            group, count = entry
            if self.group_values[group] != SPLIT:
                others = self.group_shared.get(group)
                if others is None:  # the last holder: cached, last block first
                    self.group_values[group] = self.next_release
                    self.next_release += count
                    self.cached_count += count
                elif others == 1:
                    del self.group_shared[group]
                else:
                    self.group_shared[group] = others - 1
                return
            first = group * self.per_hash
            identities: Sequence[Identity] = range(first + count - 1, first - 1, -1)
        else:
            identities = (entry,)
        for identity in identities:
            others = self.block_shared.get(identity)
            if others is None:
                self.block_values[identity] = self.next_release
                self.next_release += 1
                self.cached_count += 1
            elif others == 1:
                del self.block_shared[identity]
            else:
                self.block_shared[identity] = others - 1
