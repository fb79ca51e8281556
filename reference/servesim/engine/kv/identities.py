"""R47: the names of a request's blocks, made from its prefix hashes.

Two identified blocks have the same content exactly when their identities are equal (R47), so
an identity is all the registry (``registry``) needs to find a block another request filled.
Identities are integers, compared in constant time: a list of hashes is interned once per
replay (``HashPrefixes``), and an identity is made from its prefix's number on demand
(``BlockIdentities``), since a long prompt has thousands of blocks and reads only a few.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

from servesim.contract.continuing_turns import ChainHashes
from servesim.contract.model import Request

Identity = int
"""R47: a block's identity, R47's pair ``(j, the first floor(j / k) + 1 hashes)`` as one integer:
``prefix * k + j mod k``, where ``prefix`` is the interned number of those hashes
(``HashPrefixes``), which is also the key of the block's group in the registry. The prefix's
length gives ``floor(j / k)``, so two identities are equal exactly when the pairs are."""

Group = int
"""A hashed block's key in the registry: the interned number of its prefix of hashes."""

HASH_LIMIT = 1 << 53
"""R47: prefix hashes are below 2^53."""


class BlockIdentities(Sequence[Identity]):
    """R47: the identities of a request's identified blocks 0, 1, ..., made on demand.

    Block j is the (j mod k)-th engine block of hashed block ``j // k``, so its identity is
    ``numbers[j // k] * k + j mod k``: the sequence keeps one prefix number per hashed block
    (``numbers``), which is also all the cache reads.
    """

    __slots__ = ("numbers", "per_hash", "size")

    def __init__(self, numbers: list[Group], per_hash: int, size: int) -> None:
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

    def span(self, start: int, stop: int) -> list[Identity]:
        """The identities of blocks ``start`` to ``stop - 1`` (within the sequence), at once."""
        stop = min(stop, self.size)
        per_hash, numbers = self.per_hash, self.numbers
        if per_hash == 1:
            return numbers[start:stop]
        if start >= stop:
            return []
        first, last = start // per_hash, (stop - 1) // per_hash
        named: list[Identity] = []
        for index in range(first, last + 1):  # a hashed block's engine blocks at once
            base = numbers[index] * per_hash - index * per_hash  # block j is base + j
            low = start if index == first else index * per_hash
            high = stop if index == last else (index + 1) * per_hash
            named.extend(range(base + low, base + high))
        return named

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
"""A request with no identified block: prefix caching off, or no hashes (R47)."""


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

    def numbers(self, hashes: Sequence[int]) -> list[Group]:
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


def chain_identities(
    request: Request,
    chain: ChainHashes,
    block_tokens: int,
    hash_block_tokens: int,
    prefixes: HashPrefixes,
) -> BlockIdentities:
    """R126, R127: the identities of a chain's turn (prefix caching on): R47's blocks named by
    its canonical list, and, when it has a successor, its blocks j with ``(j + 1) * B <=
    min(P_k + max_output_tokens_k, P_(k+1))`` and ``j < k * n'`` named by the successor's
    canonical list (``chain.hashes``, which agrees with its own on every hash they share).
    Both sets are runs from block 0, so their union is one: blocks 0 to ``count - 1``."""
    per_hash = hash_block_tokens // block_tokens  # k
    own = min(request.prompt_tokens // block_tokens, per_hash * chain.own_hashes)  # R47
    generated = min(chain.generated_tokens // block_tokens, per_hash * chain.successor_hashes)
    count = max(own, generated)
    if count == 0:
        return BlockIdentities([], per_hash, 0)
    hashes = chain.hashes[: (count - 1) // per_hash + 1]
    return BlockIdentities(prefixes.numbers(hashes), per_hash, count)
