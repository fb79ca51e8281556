"""BlockCache on its own (SPEC.md R46 to R49): the bulk paths and the block-at-a-time paths that
real traces rarely take (a reused release number skipped by eviction, an evicted identity
registered again, duplicates mixed into a run) give what the rules say, block by block."""

from __future__ import annotations

from servesim.kv_cache import PRIVATE, BlockCache, HeldBlocks, KvCacheCounters


def cache(blocks: int) -> BlockCache:
    return BlockCache(blocks, 4, KvCacheCounters())


def holding(identities: list[int]) -> HeldBlocks:
    return HeldBlocks(identities=identities)


def test_release_caches_registered_blocks_last_first_and_frees_the_rest() -> None:
    c = cache(6)
    a = holding([10, 11, 12])
    c.take(a, 4)  # 4 blocks, 16 tokens; 3 identified
    c.register(a, a.identities, 0, 16)
    assert list(a) == [10, 11, 12, PRIVATE]
    c.release(a)
    assert (c.free, c.held, c.cached) == (3, 0, {12: 0, 11: 1, 10: 2})  # R46: last first
    assert c.registry == {10: 0, 11: 0, 12: 0}


def test_eviction_skips_the_release_number_of_a_reused_block() -> None:
    c = cache(3)
    a = holding([10, 11, 12])
    c.take(a, 3)
    c.register(a, a.identities, 0, 12)
    c.release(a)  # cached: 12 (0), 11 (1), 10 (2)
    b = holding([10, 11])
    c.hold(b, c.hits(b.identities, 1))  # reuses 10: release number 2 is no longer in use
    assert c.cached == {12: 0, 11: 1}
    c.take(b, 1)  # no free block: evicts 12, the least recently released
    assert c.cached == {11: 1}
    assert c.counters.evictions == 1
    c.release(b)  # b's block 1 is private (free), 10 cached again as 3
    assert c.cached == {11: 1, 10: 3}
    d = holding([])
    c.take(d, 3)  # 1 free, then evicts 11 (1) and 10 (3), skipping the stale 2
    assert (c.cached, c.registry, c.free, c.held) == ({}, {}, 0, 3)
    assert c.counters.evictions == 3


def test_registration_mixes_new_evicted_and_duplicate_identities_in_block_order() -> None:
    c = cache(4)
    a = holding([10, 11])
    c.take(a, 2)
    c.register(a, a.identities, 0, 8)
    c.release(a)  # cached: 11 (0), 10 (1)
    e = holding([])
    c.take(e, 3)  # 2 free, evicts 11
    c.release(e)
    assert c.registry == {10: 0}
    b = holding([11, 10, 12])  # 11 evicted (to register again), 10 registered (duplicate)
    c.take(b, 3)  # the 3 free blocks: nothing evicted
    c.register(b, b.identities, 0, 12)
    assert list(b) == [11, PRIVATE, 12]
    assert c.registry == {10: 0, 11: 1, 12: 1}
    c.release(b)
    assert c.cached == {10: 1, 12: 2, 11: 3}


def test_a_shared_block_stays_held_until_its_last_holder_releases_it() -> None:
    c = cache(4)
    a = holding([10, 11])
    c.take(a, 2)
    c.register(a, a.identities, 0, 8)
    b = holding([10, 11])
    c.hold(b, c.hits(b.identities, 2))
    assert c.registry == {10: 2, 11: 2}
    assert c.cached_among([10, 11]) == 0
    c.release(a)
    assert (c.registry, c.cached, c.held) == ({10: 1, 11: 1}, {}, 2)
    c.release(b)
    assert c.cached == {11: 0, 10: 1}
