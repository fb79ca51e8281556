"""A worker's KV cache: held, cached and free blocks, the prefix registry, eviction (SPEC.md §11).

The cache counts blocks rather than naming each one, and handles them in runs. A block that is
not registered (R47) has no identity and one holder, so it needs no name: a request's
``HeldBlocks`` counts its blocks and lists only the identities of its registered ones, and the
cache only counts how many are free. A registered block is named by its identity; ``entries``
maps it to a value of at least ``HELD`` while requests hold it (``shared`` counts its holders
beyond the first), or to its release number once nobody holds it (it is then *cached*).

Eviction (R49) takes cached blocks in order of release number, so the evicted ones are exactly
those whose release number is below a *frontier* that eviction moves up: evicting n blocks moves
it past n release numbers still in use, skipping those of cached blocks reused since (held
again; released again, such a block gets a new number). An evicted block's entry is simply left
behind, below the frontier, and counts as absent; so eviction touches no block at all. (The
entries left behind are at most one per identity the worker ever registered.)

Every other operation works on whole lists of blocks with the interpreter's built-in bulk
operations (``dict.update``, ``dict.fromkeys``, ``dict.setdefault`` over ``map``), falling back
to a block at a time only where blocks differ (a shared block at release, a reused one at
admission): the long prompts of real traces hold hundreds of blocks each.
"""

from __future__ import annotations

import heapq
import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from servesim.model import Request

Identity = int
"""R47: a block's identity, R47's pair ``(j, the first floor(j / k) + 1 hashes)`` as one integer:
``prefix * k + j mod k``, where ``prefix`` is the interned number of those hashes
(``HashPrefixes``). The prefix's length gives ``floor(j / k)``, so two identities are equal
exactly when the pairs are; an integer keeps the registry free of millions of small objects."""

PRIVATE = -1
"""A block that is not registered, in the view ``HeldBlocks`` gives of a request's blocks."""

HELD = 1 << 62
"""The least ``entries`` value of a registered block that one or more running requests hold:
above every release number, so that a block is registered exactly when its value is at least
the eviction frontier (``BlockCache``). ``BlockCache.register`` marks the blocks it registers
with values above it, different in each call, to tell them from those already there."""

ABSENT = -1
"""The value ``BlockCache.entries`` stands for when an identity has no entry: below every
frontier."""


@dataclass(slots=True)
class HeldBlocks:
    """A running request's blocks 0, 1, ... (R46): how many, and the registered ones among them.

    Iterating gives, for each block j in order, its identity if it is registered as this
    request's block, ``PRIVATE`` if only this request holds it and nobody could reuse it (R47);
    the cache itself reads only ``count`` and ``registered``.
    """

    count: int = 0
    """R46: ``ceil(cached_tokens / B)``."""
    registered: list[Identity] = field(default_factory=list)
    """The identities of its registered blocks, in block order (its hits, then the blocks it
    registered itself, R47, R48)."""
    identities: Sequence[Identity] = ()
    """The request's identified blocks' identities (R47), to place ``registered`` (the view)."""

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Identity]:
        registered = set(self.registered)
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


class HashPrefixes:
    """Interns lists of prefix hashes as a trie: equal lists get equal numbers (R47).

    A request with n hashes has n prefixes; numbering each by (its parent's number, its last
    hash) compares whole prefixes in constant time, where tuples of hashes would cost time and
    memory quadratic in a long prompt's hashes. One instance serves a whole replay: the numbers
    only ever meet each other in equality tests, so the order they are made in changes nothing.
    """

    __slots__ = ("_numbers",)

    def __init__(self) -> None:
        self._numbers: dict[tuple[int, int], int] = {}

    def numbers(self, hashes: Sequence[int]) -> list[int]:
        """The number of each prefix ``hashes[: i + 1]``, in order."""
        numbers: list[int] = []
        parent = -1  # the empty prefix
        known = self._numbers
        for value in hashes:
            key = (parent, value)
            parent = known.get(key, -1)
            if parent < 0:
                parent = known[key] = len(known)
            numbers.append(parent)
        return numbers


def block_identities(
    request: Request, block_tokens: int, hash_block_tokens: int, prefixes: HashPrefixes
) -> list[Identity]:
    """R47: the identities of the request's identified blocks 0, 1, ... (prefix caching on).

    Block j is identified when it is a full block inside the prompt and ``j < k * n``
    (k = H / B engine blocks per hashed block, n hashes).
    """
    per_hash = hash_block_tokens // block_tokens  # k
    hashes = request.prefix_hashes
    count = min(request.prompt_tokens // block_tokens, per_hash * len(hashes))
    if count == 0:
        return []
    numbers = prefixes.numbers(hashes[: (count - 1) // per_hash + 1])
    # block j = i * k + r is the r-th engine block of hashed block i: a hashed block's k
    # identities are the consecutive integers from its prefix number times k
    starts = [number * per_hash for number in numbers]
    ends = [start + per_hash for start in starts]
    return list(itertools.chain.from_iterable(map(range, starts, ends)))[:count]


class BlockCache:
    """One worker's cache of ``blocks`` blocks of ``block_tokens`` tokens (R45 to R49).

    ``free`` counts free blocks and ``cached_count`` cached ones. ``entries`` maps identities
    to a value of at least ``HELD`` (held) or a release number; an identity is registered
    exactly when its value is at least ``frontier``, the smallest release number not yet
    passed by eviction, and cached when it is registered and below ``HELD``. ``shared``
    counts the holders beyond the first of the held blocks that have several; ``reused``
    holds (as a heap) the release numbers at or above the frontier whose blocks were reused
    since, which eviction skips; ``next_release`` is the next release number (R46). Every
    other block is held. So held + cached + free = blocks at every instant (R45) by
    construction.
    """

    __slots__ = (
        "block_tokens",
        "blocks",
        "cached_count",
        "counters",
        "entries",
        "free",
        "frontier",
        "marks",
        "next_release",
        "reused",
        "shared",
    )

    def __init__(self, blocks: int, block_tokens: int, counters: KvCacheCounters) -> None:
        self.blocks = blocks
        self.block_tokens = block_tokens
        self.free = blocks  # R45: initially every block is free
        self.cached_count = 0
        self.entries: dict[Identity, int] = {}
        self.shared: dict[Identity, int] = {}
        self.frontier = 0
        self.reused: list[int] = []
        self.next_release = 0
        self.marks = itertools.count(HELD + 1)  # register's, one per call
        self.counters = counters

    @property
    def held(self) -> int:
        """R45: the blocks one or more running requests hold."""
        return self.blocks - self.free - self.cached_count

    @property
    def registry(self) -> dict[Identity, int]:
        """R47: each registered block's identity and its number of holders (0 when cached); a
        view built on demand, for checks."""
        shared, frontier = self.shared, self.frontier
        return {
            identity: 1 + shared.get(identity, 0) if value >= HELD else 0
            for identity, value in self.entries.items()
            if value >= frontier
        }

    @property
    def cached(self) -> dict[Identity, int]:
        """R49: each cached block's identity and release number, oldest first; a view built on
        demand, for checks."""
        frontier = self.frontier
        cached = [
            (number, identity)
            for identity, number in self.entries.items()
            if frontier <= number < HELD
        ]
        return {identity: number for number, identity in sorted(cached)}

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
        frontier moves past ``count`` release numbers of cached blocks, and past the numbers
        of reused blocks it meets on the way."""
        reused = self.reused
        end = self.frontier + count
        while reused and reused[0] < end:
            heapq.heappop(reused)
            end += 1
        self.frontier = end
        self.cached_count -= count
        self.counters.evictions += count

    def hits(self, identities: Sequence[Identity], most: int) -> list[Identity]:
        """R48: the request's blocks 0, 1, ... that are registered, as far as they all are,
        and at most ``most`` of them."""
        get, frontier = self.entries.get, self.frontier
        hits: list[Identity] = []
        for identity in itertools.islice(identities, most):
            if get(identity, ABSENT) < frontier:
                break
            hits.append(identity)
        return hits

    def registered_prefix(self, identities: Sequence[Identity]) -> int:
        """R54's ``cached(w, r)``: how many of the request's blocks 0, 1, ... are registered,
        as far as they all are; ``len(hits(identities, len(identities)))`` without the list.
        A state-aware router asks it of every worker for every request, so the walk runs in
        the interpreter's built-in iterators, stopping at the first unregistered block."""
        values = map(self.entries.get, identities, itertools.repeat(ABSENT))
        return len(list(itertools.takewhile(self.frontier.__le__, values)))

    def cached_among(self, hits: list[Identity]) -> int:
        """How many of a request's hit blocks are cached (held by nobody)."""
        return sum(map(HELD.__gt__, map(self.entries.__getitem__, hits)))

    def hold(self, held: HeldBlocks, hits: list[Identity]) -> None:
        """R48: a request admitted with a hit becomes a holder of its hit blocks; a cached one
        becomes held and loses its release number (which eviction will skip)."""
        entries, shared = self.entries, self.shared
        values = list(map(entries.__getitem__, hits))
        for identity, value in zip(hits, values, strict=True):
            if value >= HELD:  # a block with holders gains one
                shared[identity] = shared.get(identity, 0) + 1
            else:
                heapq.heappush(self.reused, value)
                self.cached_count -= 1
        entries.update(dict.fromkeys(hits, HELD))
        held.registered.extend(hits)
        held.count += len(hits)

    def register(
        self, held: HeldBlocks, identities: Sequence[Identity], before: int, after: int
    ) -> None:
        """R47: at the end of a step, register the identified blocks the request filled in it
        (its cached tokens went from ``before`` to ``after``), unless their identity already
        has a block: such a duplicate stays unregistered (private).

        One pass of ``setdefault`` enters every identity that has no entry, with a mark new
        to this call; when each one was new (the entries grew by all of them) that is all.
        """
        entries, frontier = self.entries, self.frontier
        first = before // self.block_tokens
        last = min(after // self.block_tokens, len(identities))  # identified blocks only
        filled = identities[first:last]
        mark = next(self.marks)
        size = len(entries)
        values = list(map(entries.setdefault, filled, itertools.repeat(mark)))
        if len(entries) - size == len(filled):  # no identity had an entry: all registered
            held.registered.extend(filled)
            return
        # an entry below the frontier is an evicted block's: that identity has no block now
        evicted = list(map(frontier.__gt__, values))
        entries.update(dict.fromkeys(itertools.compress(filled, evicted), mark))
        mine = map(operator.or_, evicted, map(mark.__eq__, values))  # else a duplicate
        held.registered.extend(itertools.compress(filled, mine))

    def release(self, held: HeldBlocks) -> None:
        """R46: a request releases all its blocks, from its last to its first. A block left
        without holders becomes cached, with the next release number, if it is registered, and
        free otherwise."""
        registered, shared = held.registered, self.shared
        self.free += held.count - len(registered)
        if shared and not shared.keys().isdisjoint(registered):
            cached = []  # the blocks it held alone, from its last to its first
            for identity in reversed(registered):
                others = shared.get(identity)
                if others is None:
                    cached.append(identity)
                elif others == 1:
                    del shared[identity]
                else:
                    shared[identity] = others - 1
        else:  # the common case, each block held by this request alone: all cached, in order
            cached = registered[::-1]
        first = self.next_release
        self.next_release += len(cached)
        self.entries.update(zip(cached, range(first, self.next_release), strict=True))
        self.cached_count += len(cached)
        held.count = 0
        held.registered = []
