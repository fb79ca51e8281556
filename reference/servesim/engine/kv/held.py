"""R46: what one running request holds of its worker's cache.

A block that is not registered (R47) has no identity and one holder, so it needs no name: a
request's ``HeldBlocks`` counts its blocks and lists only its registered ones, a whole group of
them (``registry``) as one entry. The cache (``cache``) reads and writes it when the request
takes, reuses, registers and releases blocks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from servesim.engine.kv.identities import NO_IDENTITIES, BlockIdentities, Group, Identity

GroupHolding = tuple[Group, int]
"""``(group, c)``: a request holds its group's registered blocks 0 to c - 1."""

PRIVATE = -1
"""A block that is not registered, in the view ``HeldBlocks`` gives of a request's blocks."""


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
