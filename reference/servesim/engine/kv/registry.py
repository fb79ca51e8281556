"""R47, R48: a worker's prefix registry: which block has an identity, hits, and registration.

The registry is keyed by *hashed block* (a *group*: the k = H / B engine blocks of one prefix
hash, R47) rather than by engine block, since the requests of real traces fill, reuse and release
whole groups: a 512-token Mooncake block is 8 engine blocks of 64, and per-block entries made
the cache 8 times the work. A group is *whole* while its registered blocks are its blocks
0 to c - 1 and they are alike: all held by the same requests (``group_shared`` counts the holders
beyond the first), or all cached, released together (block r then has release number
``value + c - 1 - r``: a request releases its blocks last first, R46). A group whose blocks
come to differ (a request holding only some of them, or a block registered by another request
than its neighbours) is *split*: its blocks get one entry each in ``block_values``, and it stays
split.

Each entry's value is ``HELD`` or, for a cached block, its release number: the block pool
(``cache``) writes release numbers when blocks are released and moves the eviction *frontier*;
the registry reads them only to tell a registered block from an evicted one, whose entry is left
behind below the frontier and counts as absent.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from servesim.engine.kv.held import HeldBlocks
from servesim.engine.kv.identities import BlockIdentities, Group, Identity

HELD = 1 << 62
"""The ``group_values`` or ``block_values`` value of registered blocks that one or more running
requests hold: above every release number, so that a block is registered exactly when its value
is at least the eviction frontier."""

ABSENT = -1
"""The value ``PrefixRegistry.block_values`` stands for when an identity has no entry: below
every frontier."""

SPLIT = -2
"""The ``group_values`` value of a split group: its blocks are in ``block_values``."""


class PrefixRegistry:
    """R47: one worker's registered blocks by identity, at most one block per identity.

    ``group_values`` (with ``group_counts`` and ``group_shared``) holds whole groups and
    ``block_values`` (with ``block_shared``) the blocks of split groups, each value at least
    ``HELD`` (held) or a release number (cached); a block is registered exactly when its value
    is at least ``frontier``, the smallest release number not yet passed by eviction (R49).
    The block pool, ``BlockCache``, is this class with the pool's counts added, so that the hot
    methods of both are one object's.
    """

    __slots__ = (
        "block_shared",
        "block_tokens",
        "block_values",
        "frontier",
        "group_counts",
        "group_shared",
        "group_values",
        "per_hash",
    )

    def __init__(self, block_tokens: int, per_hash: int) -> None:
        self.block_tokens = block_tokens  # B: which blocks a request's cached tokens filled
        self.per_hash = per_hash  # k, the engine blocks of a group
        self.group_values: dict[Group, int] = {}
        self.group_counts: dict[Group, int] = {}
        """A whole group's c when it is less than k (``count``): its registered blocks are 0 to
        c - 1 (less evicted ones). Most groups are full, so most have no entry here."""
        self.group_shared: dict[Group, int] = {}
        self.block_values: dict[Identity, int] = {}
        self.block_shared: dict[Identity, int] = {}
        self.frontier = 0

    def value(self, identity: Identity) -> int:
        """The block's ``HELD`` or release number if it is registered, else ``ABSENT``."""
        group, offset = divmod(identity, self.per_hash)
        value = self.group_values.get(group)
        if value is None:
            return ABSENT
        if value == SPLIT:
            value = self.block_values.get(identity, ABSENT)
        elif offset >= self.count(group):
            return ABSENT
        elif value < HELD:
            value += self.count(group) - 1 - offset  # released last block first
        return value if value >= self.frontier else ABSENT

    def holders(self, identity: Identity) -> int:
        """How many running requests hold the registered block ``identity``."""
        group = identity // self.per_hash
        if self.group_values[group] == SPLIT:
            return 1 + self.block_shared.get(identity, 0)
        return 1 + self.group_shared.get(group, 0)

    def identities(self) -> Iterator[Identity]:
        """Every identity with an entry, registered or not."""
        per_hash = self.per_hash
        for group, value in self.group_values.items():
            if value != SPLIT:
                yield from range(group * per_hash, group * per_hash + self.count(group))
        yield from self.block_values

    @property
    def registry(self) -> dict[Identity, int]:
        """R47: each registered block's identity and its number of holders (0 when cached); a
        view built on demand, for checks."""
        values = {identity: self.value(identity) for identity in self.identities()}
        return {
            identity: self.holders(identity) if value >= HELD else 0
            for identity, value in values.items()
            if value != ABSENT
        }

    def count(self, group: Group) -> int:
        """A whole group's c: its blocks 0 to c - 1 are registered, unless evicted."""
        return self.group_counts.get(group, self.per_hash)

    def set_count(self, group: Group, count: int) -> None:
        """Make a whole group's c ``count``."""
        if count == self.per_hash:
            self.group_counts.pop(group, None)
        else:
            self.group_counts[group] = count

    def _live(self, group: Group) -> int:
        """How many of a whole group's blocks 0, 1, ... are registered (not evicted)."""
        value, count = self.group_values[group], self.count(group)
        if value >= HELD:
            return count
        return max(0, min(count, value + count - self.frontier))

    def hits(self, identities: Sequence[Identity], most: int) -> list[Identity]:
        """R48: the request's blocks 0, 1, ... that are registered, as far as they all are,
        and at most ``most`` of them."""
        hits: list[Identity] = []
        for identity in itertools.islice(identities, most):
            if self.value(identity) == ABSENT:
                break
            hits.append(identity)
        return hits

    def hit(self, identities: BlockIdentities, most: int) -> tuple[int, int]:
        """R48: ``len(hits(identities, most))`` and how many of those blocks are cached (held by
        nobody), a group at a time."""
        most = min(most, identities.size)
        per_hash = self.per_hash
        found = cached = 0
        for group in identities.numbers:
            wanted = min(per_hash, most - found)
            if wanted <= 0:
                break
            value = self.group_values.get(group)
            if value is None:
                break
            if value == SPLIT:
                first = group * per_hash
                got = 0
                while got < wanted:
                    block = self.value(first + got)
                    if block == ABSENT:
                        break
                    cached += block < HELD
                    got += 1
            else:
                got = min(self._live(group), wanted)
                if value < HELD:
                    cached += got
            found += got
            if got < wanted:
                break
        return found, cached

    def _split(self, group: Group) -> None:
        """A whole group's blocks get one entry each (those not evicted), as they may now
        differ."""
        value, count = self.group_values[group], self.group_counts.pop(group, self.per_hash)
        first = group * self.per_hash
        if value >= HELD:
            others = self.group_shared.pop(group, 0)
            for identity in range(first, first + count):
                self.block_values[identity] = HELD
                if others:
                    self.block_shared[identity] = others
        else:
            for offset in range(count):
                number = value + count - 1 - offset
                if number >= self.frontier:
                    self.block_values[first + offset] = number
        self.group_values[group] = SPLIT

    def register(self, held: HeldBlocks, before: int, after: int) -> None:
        """R47: at the end of a step, register the identified blocks the request filled in it
        (its cached tokens went from ``before`` to ``after``), unless their identity already
        has a block: such a duplicate stays unregistered (private).

        A request fills its blocks in order: the rest of a group it began in an earlier step,
        then groups from their block 0. In the common case none of the latter has an entry,
        and they are all entered at once, each whole and held by this request.
        """
        per_hash = self.per_hash
        block = before // self.block_tokens
        last = min(after // self.block_tokens, held.identities.size)  # identified blocks only
        if block >= last:
            return
        index, start = divmod(block, per_hash)
        if start:
            self._register_group(held, index, start, min(per_hash, last - index * per_hash))
            index += 1
        stop = -(-last // per_hash)  # past the last group it filled blocks of
        groups = held.identities.numbers[index:stop]
        if not groups:
            return
        if self.group_values.keys().isdisjoint(groups):
            counts = [per_hash] * len(groups)
            counts[-1] = last - (stop - 1) * per_hash
            self.group_values.update(dict.fromkeys(groups, HELD))
            self.set_count(groups[-1], counts[-1])  # the others are full
            held.registered.extend(zip(groups, counts, strict=True))
            held.registered_blocks += last - index * per_hash
            return
        for group_index in range(index, stop):
            self._register_group(held, group_index, 0, min(per_hash, last - group_index * per_hash))

    def _register_group(self, held: HeldBlocks, index: int, start: int, end: int) -> None:
        """``register`` for the request's filled blocks ``start`` to ``end - 1`` of its hashed
        block ``index``: a group with no registered block that it fills from its block 0, or a
        whole group it alone holds up to ``start``, stays whole; any other group is split and
        its blocks are registered one by one."""
        group = held.identities.numbers[index]
        registered = held.registered
        value = self.group_values.get(group)
        if value is None or (value != SPLIT and self._live(group) == 0):
            if start == 0:  # a new whole group, held by this request
                self.group_values[group] = HELD
                self.set_count(group, end)
                registered.append((group, end))
                held.registered_blocks += end
                return
            self.group_counts.pop(group, None)
            self.group_values[group] = SPLIT
        elif value != SPLIT:
            if registered and registered[-1] == (group, start) and group not in self.group_shared:
                self.set_count(group, end)  # its own whole group grows
                registered[-1] = (group, end)
                held.registered_blocks += end - start
                return
            self._split(group)
        first = group * self.per_hash
        self._register_blocks(held, range(first + start, first + end))

    def _register_blocks(self, held: HeldBlocks, identities: range) -> None:
        """``register`` for blocks of a split group, one at a time."""
        values, frontier = self.block_values, self.frontier
        for identity in identities:
            if values.get(identity, ABSENT) < frontier:  # none, or evicted: registered now
                values[identity] = HELD
                held.registered.append(identity)
                held.registered_blocks += 1
