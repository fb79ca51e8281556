"""A worker's KV cache: held, cached and free blocks, the prefix registry, eviction (SPEC.md §11).

The cache counts blocks rather than naming each one. A block that is not registered (R47) has no
identity and one holder, so it needs no name: a request's ``HeldBlocks`` counts its blocks and
lists only its registered ones, and the cache only counts how many are free.

The registry is keyed by *hashed block* (a *group*: the k = H / B engine blocks of one prefix
hash, R47) rather than by engine block, since the requests of real traces fill, reuse and release
whole groups: a 512-token Mooncake block is 8 engine blocks of 64, and per-block entries made
the cache 8 times the work. A group is *whole* while its registered blocks are its blocks
0 to c - 1 and they are alike: all held by the same requests (``group_shared`` counts the holders
beyond the first), or all cached, released together (block r then has release number
``value + c - 1 - r``: a request releases its blocks last first, R46). A group whose blocks
come to differ (a request holding only some of them, or a block registered by another request
than its neighbours) is *split*: its blocks get one entry each in ``block_values``, as every
block had before, and it stays split.

Eviction (R49) takes cached blocks in order of release number, so the evicted ones are exactly
those whose release number is below a *frontier* that eviction moves up: evicting n blocks moves
it past n release numbers still in use, skipping those of cached blocks reused since (held
again; released again, such a block gets a new number). An evicted block's entry is simply left
behind, below the frontier, and counts as absent, so eviction touches no block at all; a whole
cached group whose last blocks are below the frontier has lost exactly those blocks.
"""

from __future__ import annotations

import heapq
import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload

from servesim.contract.model import Request

Identity = int
"""R47: a block's identity, R47's pair ``(j, the first floor(j / k) + 1 hashes)`` as one integer:
``prefix * k + j mod k``, where ``prefix`` is the interned number of those hashes
(``HashPrefixes``), which is also the key of the block's group in the registry. The prefix's
length gives ``floor(j / k)``, so two identities are equal exactly when the pairs are."""

Group = int
"""A hashed block's key in the registry: the interned number of its prefix of hashes."""

GroupHolding = tuple[Group, int]
"""``(group, c)``: a request holds its group's registered blocks 0 to c - 1."""

PRIVATE = -1
"""A block that is not registered, in the view ``HeldBlocks`` gives of a request's blocks."""

HELD = 1 << 62
"""The ``group_values`` or ``block_values`` value of registered blocks that one or more running
requests hold: above every release number, so that a block is registered exactly when its value
is at least the eviction frontier (``BlockCache``)."""

ABSENT = -1
"""The value ``BlockCache.block_values`` stands for when an identity has no entry: below every
frontier."""

SPLIT = -2
"""The ``group_values`` value of a split group: its blocks are in ``block_values``."""


class BlockIdentities(Sequence[Identity]):
    """R47: the identities of a request's identified blocks 0, 1, ..., made on demand.

    Block j is the (j mod k)-th engine block of hashed block ``j // k``, so its identity is
    ``numbers[j // k] * k + j mod k``: the sequence keeps one prefix number per hashed block
    (``numbers``), which is also all the cache reads.
    """

    __slots__ = ("numbers", "per_hash", "size")

    def __init__(self, numbers: list[int], per_hash: int, size: int) -> None:
        self.numbers = numbers
        """The prefix number (group) of each hashed block the identified blocks lie in."""
        self.per_hash = per_hash  # k
        self.size = size

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> Identity: ...

    @overload
    def __getitem__(self, index: slice) -> list[Identity]: ...

    def __getitem__(self, index: int | slice) -> Identity | list[Identity]:
        if isinstance(index, slice):
            return [self[j] for j in range(*index.indices(self.size))]
        if index < 0:
            index += self.size
        if not 0 <= index < self.size:
            raise IndexError(index)
        hashed, offset = divmod(index, self.per_hash)
        return self.numbers[hashed] * self.per_hash + offset

    def __eq__(self, other: object) -> bool:
        """Equal to any list, tuple or ``BlockIdentities`` of the same identities."""
        if isinstance(other, BlockIdentities | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"BlockIdentities({list(self)!r})"


NO_IDENTITIES = BlockIdentities([], 1, 0)


@dataclass(slots=True)
class HeldBlocks:
    """A running request's blocks 0, 1, ... (R46): how many, and the registered ones among them.

    Iterating gives, for each block j in order, its identity if it is registered as this
    request's block, ``PRIVATE`` if only this request holds it and nobody could reuse it (R47);
    the cache itself reads only ``count``, ``registered`` and ``registered_blocks``.
    """

    count: int = 0
    """R46: ``ceil(cached_tokens / B)``."""
    registered: list[Identity | GroupHolding] = field(default_factory=list)
    """Its registered blocks in block order (its hits, then the blocks it registered itself,
    R47, R48): a whole group's as one ``GroupHolding``, a split group's one identity each."""
    registered_blocks: int = 0
    """How many blocks ``registered`` stands for."""
    identities: BlockIdentities = NO_IDENTITIES
    """The request's identified blocks' identities (R47)."""

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Identity]:
        per_hash = self.identities.per_hash
        registered: set[Identity] = set()
        for entry in self.registered:
            if isinstance(entry, tuple):
                group, count = entry
                registered.update(range(group * per_hash, group * per_hash + count))
            else:
                registered.add(entry)
        identities = self.identities
        for j in range(self.count):
            identity = identities[j] if j < len(identities) else PRIVATE
            yield identity if identity in registered else PRIVATE


@dataclass(slots=True)
class KvCacheCounters:
    """R52: what one worker's report entry says of its cache."""

    peak_blocks_in_use: int = 0
    reused_tokens: int = 0
    preemptions: int = 0
    evictions: int = 0


HASH_LIMIT = 1 << 53
"""R47: prefix hashes are below 2^53."""


class HashPrefixes:
    """Interns lists of prefix hashes as a trie: equal lists get equal numbers (R47).

    A request with n hashes has n prefixes; numbering each by (its parent's number, its last
    hash) compares whole prefixes in constant time, where tuples of hashes would cost time and
    memory quadratic in a long prompt's hashes. One instance serves a whole replay: the numbers
    only ever meet each other in equality tests, so the order they are made in changes nothing.
    """

    __slots__ = ("_numbers",)

    def __init__(self) -> None:
        self._numbers: dict[int, int] = {}
        """Each known prefix's number, keyed by its parent's number and its last hash as one
        integer, ``(parent + 1) * HASH_LIMIT + hash`` (cheaper than a pair)."""

    def numbers(self, hashes: Sequence[int]) -> list[int]:
        """The number of each prefix ``hashes[: i + 1]``, in order."""
        numbers: list[int] = []
        parent = -1  # the empty prefix
        known = self._numbers
        for value in hashes:
            # a new prefix gets the next number, len(known) before it is entered
            parent = known.setdefault((parent + 1) * HASH_LIMIT + value, len(known))
            numbers.append(parent)
        return numbers


def block_identities(
    request: Request, block_tokens: int, hash_block_tokens: int, prefixes: HashPrefixes
) -> BlockIdentities:
    """R47: the identities of the request's identified blocks 0, 1, ... (prefix caching on).

    Block j is identified when it is a full block inside the prompt and ``j < k * n``
    (k = H / B engine blocks per hashed block, n hashes).
    """
    per_hash = hash_block_tokens // block_tokens  # k
    hashes = request.prefix_hashes
    count = min(request.prompt_tokens // block_tokens, per_hash * len(hashes))
    if count == 0:
        return BlockIdentities([], per_hash, 0)
    return BlockIdentities(prefixes.numbers(hashes[: (count - 1) // per_hash + 1]), per_hash, count)


class BlockCache:
    """One worker's cache of ``blocks`` blocks of ``block_tokens`` tokens (R45 to R49).

    ``free`` counts free blocks and ``cached_count`` cached ones. The registry is
    ``group_values`` (with ``group_counts`` and ``group_shared``) for whole groups and
    ``block_values`` (with ``block_shared``) for the blocks of split groups, each value at
    least ``HELD`` (held) or a release number (cached); a block is registered exactly when its
    value is at least ``frontier``, the smallest release number not yet passed by eviction.
    ``reused`` holds (as a heap) the runs ``(first, count)`` of release numbers at or above
    the frontier whose blocks were reused since, which eviction skips; ``next_release`` is the
    next release number (R46). Every other block is held. So held + cached + free = blocks at
    every instant (R45) by construction.
    """

    __slots__ = (
        "block_shared",
        "block_tokens",
        "block_values",
        "blocks",
        "cached_count",
        "counters",
        "free",
        "frontier",
        "group_counts",
        "group_shared",
        "group_values",
        "next_release",
        "per_hash",
        "reused",
    )

    def __init__(
        self, blocks: int, block_tokens: int, counters: KvCacheCounters, per_hash: int = 1
    ) -> None:
        self.blocks = blocks
        self.block_tokens = block_tokens
        self.per_hash = per_hash  # k, the engine blocks of a group
        self.free = blocks  # R45: initially every block is free
        self.cached_count = 0
        self.group_values: dict[Group, int] = {}
        self.group_counts: dict[Group, int] = {}
        """A whole group's c when it is less than k (``count``): its registered blocks are 0 to
        c - 1 (less evicted ones). Most groups are full, so most have no entry here."""
        self.group_shared: dict[Group, int] = {}
        self.block_values: dict[Identity, int] = {}
        self.block_shared: dict[Identity, int] = {}
        self.frontier = 0
        self.reused: list[tuple[int, int]] = []
        self.next_release = 0
        self.counters = counters

    @property
    def held(self) -> int:
        """R45: the blocks one or more running requests hold."""
        return self.blocks - self.free - self.cached_count

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
