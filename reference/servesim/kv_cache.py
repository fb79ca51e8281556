"""A worker's KV cache: held, cached and free blocks, the prefix registry, eviction (SPEC.md §11).

The cache counts blocks rather than naming each one. A block that is not registered (R47) has
no identity and at most one holder, so it needs no object: a request's list of blocks holds
``None`` for it, and the cache only counts how many are free. A registered block is a ``Block``
object (its identity and its number of holders), found through the registry; when nobody holds
it, it waits in ``cached`` in order of release number, which is the order eviction takes (R49).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from servesim.model import Request

Identity = tuple[int, int]
"""R47: a block's identity ``(j, prefix)``: its index in the request and the interned number of
the first ``floor(j / k) + 1`` hashes (``HashPrefixes``). Two identities are equal exactly when
R47's pairs ``(j, hashes)`` are."""

HeldBlocks = list["Block | None"]
"""A running request's blocks 0, 1, ...: ``Block`` for a registered one, ``None`` for one that
only this request holds and that nobody else could reuse (R46, R47)."""


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
    return [(j, numbers[j // per_hash]) for j in range(count)]


class Block:
    """A registered block (R47): its identity and how many running requests hold it (R45)."""

    __slots__ = ("holders", "identity")

    def __init__(self, identity: Identity, holders: int) -> None:
        self.identity = identity
        self.holders = holders


class BlockCache:
    """One worker's cache of ``blocks`` blocks of ``block_tokens`` tokens (R45 to R49).

    ``free`` counts free blocks; ``cached`` maps each registered block nobody holds to its
    release number, oldest first; every other block is held. So held + cached + free = blocks
    at every instant (R45) by construction.
    """

    __slots__ = ("block_tokens", "blocks", "cached", "counters", "free", "next_release", "registry")

    def __init__(self, blocks: int, block_tokens: int, counters: KvCacheCounters) -> None:
        self.blocks = blocks
        self.block_tokens = block_tokens
        self.free = blocks  # R45: initially every block is free
        self.cached: OrderedDict[Block, int] = OrderedDict()
        self.registry: dict[Identity, Block] = {}
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
        for _ in range(count):
            if self.free:
                self.free -= 1
            else:
                self.evict()
            held.append(None)

    def evict(self) -> None:
        """R49: the least recently released cached block leaves the registry and is taken."""
        block, _ = self.cached.popitem(last=False)
        del self.registry[block.identity]
        self.counters.evictions += 1

    def hits(self, identities: Sequence[Identity], most: int) -> list[Block]:
        """R48: the registered blocks matching the request's blocks 0, 1, ..., as far as they
        all match, and at most ``most`` of them."""
        hits: list[Block] = []
        for identity in identities[:most]:
            block = self.registry.get(identity)
            if block is None:
                break
            hits.append(block)
        return hits

    def hold(self, held: HeldBlocks, hits: list[Block]) -> None:
        """R48: a request admitted with a hit becomes a holder of its hit blocks; a cached one
        becomes held and loses its release number."""
        for block in hits:
            if block.holders == 0:
                del self.cached[block]
            block.holders += 1
            held.append(block)

    def register(
        self, held: HeldBlocks, identities: Sequence[Identity], before: int, after: int
    ) -> None:
        """R47: at the end of a step, register the identified blocks the request filled in it
        (its cached tokens went from ``before`` to ``after``), unless their identity already
        has a block: such a duplicate stays unregistered."""
        first = before // self.block_tokens
        last = min(after // self.block_tokens, len(identities))
        for j in range(first, last):
            identity = identities[j]
            if identity not in self.registry:
                block = Block(identity, holders=1)
                self.registry[identity] = block
                held[j] = block

    def release(self, held: HeldBlocks) -> None:
        """R46: a request releases all its blocks, from its last to its first. A block left
        without holders becomes cached, with the next release number, if it is registered, and
        free otherwise."""
        for block in reversed(held):
            if block is None:
                self.free += 1
                continue
            block.holders -= 1
            if block.holders == 0:
                self.cached[block] = self.next_release
                self.next_release += 1
        held.clear()
