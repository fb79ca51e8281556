"""A worker's KV cache: held, cached and free blocks, the prefix registry, eviction (SPEC.md §11).

The cache counts blocks rather than naming each one. A block that is not registered (R47) has
no identity and one holder, so it needs no name: a request's list of blocks holds ``PRIVATE``
for it, and the cache only counts how many are free. A registered block is named by its
identity, which the registry maps to its number of holders; when nobody holds it, it waits in
``cached`` in order of release number, which is the order eviction takes (R49).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from servesim.model import Request

Identity = int
"""R47: a block's identity, R47's pair ``(j, the first floor(j / k) + 1 hashes)`` as one integer:
``prefix * k + j mod k``, where ``prefix`` is the interned number of those hashes
(``HashPrefixes``). The prefix's length gives ``floor(j / k)``, so two identities are equal
exactly when the pairs are; an integer keeps the registry free of millions of small objects."""

PRIVATE = -1
"""The entry of a block that is not registered in a request's ``HeldBlocks``."""

HeldBlocks = list[int]
"""A running request's blocks 0, 1, ...: the identity of a registered one, ``PRIVATE`` for one
that only this request holds and nobody else could reuse (R46, R47)."""


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
        for value in hashes:
            key = (parent, value)
            number = self._numbers.get(key)
            if number is None:
                number = self._numbers[key] = len(self._numbers)
            numbers.append(number)
            parent = number
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
    # block j = i * k + r is the r-th engine block of hashed block i
    offsets = range(per_hash)
    return [number * per_hash + r for number in numbers for r in offsets][:count]


class BlockCache:
    """One worker's cache of ``blocks`` blocks of ``block_tokens`` tokens (R45 to R49).

    ``free`` counts free blocks; ``registry`` maps each registered block's identity to its
    number of holders; ``cached`` maps the identity of each registered block nobody holds to
    its release number, oldest first. Every other block is held. So held + cached + free =
    blocks at every instant (R45) by construction.
    """

    __slots__ = ("block_tokens", "blocks", "cached", "counters", "free", "next_release", "registry")

    def __init__(self, blocks: int, block_tokens: int, counters: KvCacheCounters) -> None:
        self.blocks = blocks
        self.block_tokens = block_tokens
        self.free = blocks  # R45: initially every block is free
        self.cached: OrderedDict[Identity, int] = OrderedDict()
        self.registry: dict[Identity, int] = {}
        self.next_release = 0
        self.counters = counters

    @property
    def held(self) -> int:
        """R45: the blocks one or more running requests hold."""
        return self.blocks - self.free - len(self.cached)

    def obtainable(self) -> int:
        """R49: how many blocks a running request could take now (free, then by eviction)."""
        return self.free + len(self.cached)

    def blocks_for(self, tokens: int) -> int:
        """R46: the blocks that hold ``tokens`` cached tokens, ``ceil(tokens / B)``."""
        return -(-tokens // self.block_tokens)

    def take(self, held: HeldBlocks, count: int) -> None:
        """R49: ``count`` more blocks for a request, each a free one if there is one, else the
        cached block with the smallest release number, evicted. The caller checked
        ``obtainable``."""
        from_free = min(count, self.free)
        self.free -= from_free
        for _ in range(count - from_free):
            self.evict()
        held.extend([PRIVATE] * count)

    def evict(self) -> None:
        """R49: the least recently released cached block leaves the registry and is taken."""
        identity, _ = self.cached.popitem(last=False)
        del self.registry[identity]
        self.counters.evictions += 1

    def hits(self, identities: Sequence[Identity], most: int) -> list[Identity]:
        """R48: the request's blocks 0, 1, ... that are registered, as far as they all are,
        and at most ``most`` of them."""
        return list(itertools.takewhile(self.registry.__contains__, identities[:most]))

    def cached_among(self, hits: list[Identity]) -> int:
        """How many of a request's hit blocks are cached (held by nobody)."""
        return list(map(self.registry.__getitem__, hits)).count(0)

    def hold(self, held: HeldBlocks, hits: list[Identity]) -> None:
        """R48: a request admitted with a hit becomes a holder of its hit blocks; a cached one
        becomes held and loses its release number."""
        registry = self.registry
        for identity in hits:
            holders = registry[identity]
            if holders == 0:
                del self.cached[identity]
            registry[identity] = holders + 1
        held.extend(hits)

    def register(
        self, held: HeldBlocks, identities: Sequence[Identity], before: int, after: int
    ) -> None:
        """R47: at the end of a step, register the identified blocks the request filled in it
        (its cached tokens went from ``before`` to ``after``), unless their identity already
        has a block: such a duplicate stays unregistered (``PRIVATE``)."""
        registry = self.registry
        first = before // self.block_tokens
        last = min(after // self.block_tokens, len(identities))  # identified blocks only
        filled = identities[first:last]
        if not any(map(registry.__contains__, filled)):  # no duplicate: all at once
            registry.update(dict.fromkeys(filled, 1))  # each held by its filler
            held[first:last] = filled
            return
        for j, identity in enumerate(filled, first):
            if identity not in registry:
                registry[identity] = 1
                held[j] = identity

    def release(self, held: HeldBlocks) -> None:
        """R46: a request releases all its blocks, from its last to its first. A block left
        without holders becomes cached, with the next release number, if it is registered, and
        free otherwise."""
        registry, cached = self.registry, self.cached
        registered = [identity for identity in reversed(held) if identity != PRIVATE]
        self.free += len(held) - len(registered)
        if all(map((1).__eq__, map(registry.__getitem__, registered))):
            # the common case, each block held by this request alone: all cached, in order
            first = self.next_release
            self.next_release += len(registered)
            registry.update(dict.fromkeys(registered, 0))
            cached.update(zip(registered, range(first, self.next_release), strict=True))
        else:
            for identity in registered:
                holders = registry[identity] - 1
                registry[identity] = holders
                if holders == 0:
                    cached[identity] = self.next_release
                    self.next_release += 1
        held.clear()
