"""BlockCache on its own (SPEC.md R46 to R49): the bulk paths and the block-at-a-time paths that
real traces rarely take (a reused release number skipped by eviction, an evicted identity
registered again, duplicates mixed into a run) give what the rules say, block by block."""

from __future__ import annotations

from servesim.contract.model import Request
from servesim.engine.kv.cache import BlockCache
from servesim.engine.kv.counters import KvCacheCounters
from servesim.engine.kv.held import PRIVATE, HeldBlocks
from servesim.engine.kv.identities import BlockIdentities, HashPrefixes, block_identities


def cache(blocks: int) -> BlockCache:
    return BlockCache(blocks, 4, KvCacheCounters())


def holding(identities: list[int]) -> HeldBlocks:
    """A request whose identified blocks have these identities, one hashed block each (k = 1)."""
    return HeldBlocks(identities=BlockIdentities(identities, 1, len(identities)))


def test_release_caches_registered_blocks_last_first_and_frees_the_rest() -> None:
    c = cache(6)
    a = holding([10, 11, 12])
    c.take(a, 4)  # 4 blocks, 16 tokens; 3 identified
    c.register(a, 0, 16)
    assert list(a) == [10, 11, 12, PRIVATE]
    c.release(a)
    assert (c.free, c.held, c.cached) == (3, 0, {12: 0, 11: 1, 10: 2})  # R46: last first
    assert c.registry == {10: 0, 11: 0, 12: 0}


def test_eviction_skips_the_release_number_of_a_reused_block() -> None:
    c = cache(3)
    a = holding([10, 11, 12])
    c.take(a, 3)
    c.register(a, 0, 12)
    c.release(a)  # cached: 12 (0), 11 (1), 10 (2)
    b = holding([10, 11])
    c.hold(b, len(c.hits(b.identities, 1)))  # reuses 10: release number 2 is no longer in use
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
    c.register(a, 0, 8)
    c.release(a)  # cached: 11 (0), 10 (1)
    e = holding([])
    c.take(e, 3)  # 2 free, evicts 11
    c.release(e)
    assert c.registry == {10: 0}
    b = holding([11, 10, 12])  # 11 evicted (to register again), 10 registered (duplicate)
    c.take(b, 3)  # the 3 free blocks: nothing evicted
    c.register(b, 0, 12)
    assert list(b) == [11, PRIVATE, 12]
    assert c.registry == {10: 0, 11: 1, 12: 1}
    c.release(b)
    assert c.cached == {10: 1, 12: 2, 11: 3}


def test_a_shared_block_stays_held_until_its_last_holder_releases_it() -> None:
    c = cache(4)
    a = holding([10, 11])
    c.take(a, 2)
    c.register(a, 0, 8)
    b = holding([10, 11])
    c.hold(b, len(c.hits(b.identities, 2)))
    assert c.registry == {10: 2, 11: 2}
    assert c.cached == {}  # both held, by a and b
    c.release(a)
    assert (c.registry, c.cached, c.held) == ({10: 1, 11: 1}, {}, 2)
    c.release(b)
    assert c.cached == {11: 0, 10: 1}


# --- hashed blocks of k = 4 engine blocks: whole groups, partly evicted, split -------------------


def grouped(blocks: int) -> BlockCache:
    return BlockCache(blocks, 4, KvCacheCounters(), per_hash=4)


def hashed(numbers: list[int], size: int) -> HeldBlocks:
    """A request whose identified blocks lie in the hashed blocks ``numbers`` (k = 4): block j
    has identity ``numbers[j // 4] * 4 + j % 4``."""
    return HeldBlocks(identities=BlockIdentities(numbers, 4, size))


def test_a_cached_group_loses_exactly_its_least_recently_released_blocks() -> None:
    c = grouped(8)
    a = hashed([5, 6], 6)  # identities 20, 21, 22, 23 (group 5), 24, 25 (group 6)
    c.take(a, 6)
    c.register(a, 0, 24)
    assert list(a) == [20, 21, 22, 23, 24, 25]
    c.release(a)  # R46: last first
    assert c.cached == {25: 0, 24: 1, 23: 2, 22: 3, 21: 4, 20: 5}
    d = HeldBlocks()
    c.take(d, 5)  # 2 free, then evicts release numbers 0, 1, 2: 25, 24, 23
    assert c.cached == {22: 3, 21: 4, 20: 5}
    assert c.registry == {20: 0, 21: 0, 22: 0}
    assert c.hits(a.identities, 6) == [20, 21, 22]
    assert c.hit(a.identities, 6) == (3, 3)
    assert c.counters.evictions == 3


def test_a_hit_on_part_of_a_held_group_shares_only_those_blocks() -> None:
    c = grouped(8)
    a = hashed([5], 4)
    c.take(a, 4)
    c.register(a, 0, 16)
    b = hashed([5], 2)  # a shorter prompt in the same hashed block: blocks 20, 21
    assert c.hit(b.identities, 2) == (2, 0)
    c.hold(b, 2)
    assert c.registry == {20: 2, 21: 2, 22: 1, 23: 1}
    c.release(a)  # 23, 22 cached; 21, 20 still held by b
    assert c.cached == {23: 0, 22: 1}
    assert c.held == 2
    c.release(b)
    assert c.cached == {23: 0, 22: 1, 21: 2, 20: 3}
    assert (c.free, c.held) == (4, 0)


def test_a_hit_on_part_of_a_cached_group_leaves_the_rest_cached() -> None:
    c = grouped(6)
    a = hashed([5], 4)
    c.take(a, 4)
    c.register(a, 0, 16)
    c.release(a)  # 23: 0, 22: 1, 21: 2, 20: 3
    b = hashed([5], 4)
    c.hold(b, 2)  # R48: at most 2 hit blocks (say its L is 9): 20 and 21 held again
    assert c.cached == {23: 0, 22: 1}
    c.take(b, 3)  # 2 free, then evicts 23 (0)
    assert c.cached == {22: 1}
    e = HeldBlocks()
    c.take(e, 1)  # evicts 22 (1), skipping nothing; 2 and 3 were reused
    assert (c.cached, c.registry) == ({}, {20: 1, 21: 1})
    c.release(b)
    assert c.cached == {21: 4, 20: 5}


def test_a_request_grows_its_own_group_over_steps_and_duplicates_stay_private() -> None:
    c = grouped(12)
    a = hashed([5], 4)
    c.take(a, 2)
    c.register(a, 0, 8)  # a chunk of 8 tokens: blocks 20, 21
    c.take(a, 2)
    c.register(a, 8, 16)  # the next chunk: 22, 23, in the same group
    assert list(a) == [20, 21, 22, 23]
    assert a.registered == [(5, 4)]  # one whole group
    p = hashed([7], 2)  # a prompt ending after 2 blocks of group 7 registers 28, 29
    c.take(p, 2)
    c.register(p, 0, 8)
    q = hashed([7], 4)  # filled in the same step as p, registered after it: 28, 29 duplicates
    c.take(q, 4)
    c.register(q, 0, 16)
    assert list(q) == [PRIVATE, PRIVATE, 30, 31]
    c.release(p)
    c.release(q)  # its duplicates are free
    assert c.cached == {29: 0, 28: 1, 31: 2, 30: 3}
    assert c.free == 12 - 4 - 4
    assert c.hit(q.identities, 4) == (4, 4)
    d = HeldBlocks()
    c.take(d, 6)  # 4 free, then evicts 29 and 28: group 7 now misses from its block 0
    assert c.hit(q.identities, 4) == (0, 0)
    assert c.registry == {20: 1, 21: 1, 22: 1, 23: 1, 30: 0, 31: 0}


def test_block_identities_are_r47_pairs_numbered() -> None:
    # R47 with B = 4, H = 8 (k = 2): a prompt of 22 tokens has 5 full blocks; 2 hashes identify
    # blocks 0 to 3. Equal pairs get equal identities: another request with the same first
    # hash shares blocks 0 and 1 only.
    prefixes = HashPrefixes()
    first = block_identities(Request("a", 0, 22, 1, (7, 9)), 4, 8, prefixes)
    second = block_identities(Request("b", 0, 30, 1, (7, 8, 5)), 4, 8, prefixes)
    assert len(first) == 4
    assert list(first) == [0, 1, 2, 3]  # prefixes [7] -> 0, [7, 9] -> 1; identity = 2 * n + r
    # 7 full blocks, 6 identified: [7] -> 0 (shared), [7, 8] -> 2, [7, 8, 5] -> 3
    assert list(second) == [0, 1, 4, 5, 6, 7]
    assert first[1:3] == [1, 2]
    assert first[-1] == 3
    assert first == [0, 1, 2, 3]
