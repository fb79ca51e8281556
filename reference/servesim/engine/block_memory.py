"""A worker's memory of blocks: its ``BlockCache`` and the bookkeeping around it (SPEC.md
R45 to R52, R54).

Formation (``servesim.engine.formation``) asks it for blocks (``grow``, ``admit``), which it
takes by R49's rule, evicting cached blocks; the worker tells it of preemptions (``release``)
and step ends (``step_ended``: R51's registrations, then releases). It finds a request's
identities (R47) and hit (R48), and answers a state-aware router's questions (R54). Which
request runs, and who is preempted, is not its business.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.contract.model import KvCache
from servesim.engine.kv.cache import BlockCache
from servesim.engine.kv.counters import KvCacheCounters
from servesim.engine.kv.held import HeldBlocks
from servesim.engine.kv.host_tier import HostPool, HostTransfer, HostTransfers
from servesim.engine.kv.identities import (
    NO_IDENTITIES,
    BlockIdentities,
    HashPrefixes,
    Identity,
    block_identities,
    chain_identities,
)
from servesim.engine.kv.registry import ABSENT

if TYPE_CHECKING:
    from servesim.contract.continuing_turns import ChainHashes
    from servesim.engine.fleet_view import FirstBlocks
    from servesim.engine.requests import RequestState
    from servesim.engine.step import Step


Offer = tuple["RequestState", tuple[list[int], list[Identity]]]
"""R131: a request and the blocks it registered at a step end (indices, identities)."""


class BlockMemory:
    """One worker's KV cache (``memory.Memory`` on ``kv.cache.BlockCache``)."""

    __slots__ = (
        "_most",
        "_offer",
        "cache",
        "chains",
        "counters",
        "first_blocks",
        "hash_block_tokens",
        "host",
        "ordered",
        "prefixes",
        "registry_watched",
        "transfers",
        "worker",
    )

    unlimited = False

    def __init__(
        self,
        worker: int,
        kv_cache: KvCache,
        hash_block_tokens: int | None,
        prefixes: HashPrefixes,
        first_blocks: FirstBlocks,
        *,
        registry_watched: bool = False,
        chains: dict[int, ChainHashes] | None = None,
        host: HostPool | None = None,
        transfers: HostTransfers | None = None,
    ) -> None:
        self.worker = worker
        self.first_blocks = first_blocks
        """R54: the fleet's index of where each first block was registered (shared)."""
        self.counters = KvCacheCounters()
        # R47: with prefix caching off (or no hashes at all) no block is identified
        self.hash_block_tokens = hash_block_tokens if kv_cache.prefix_caching else None
        per_hash = (hash_block_tokens or kv_cache.block_tokens) // kv_cache.block_tokens
        self.cache = BlockCache(kv_cache.blocks, kv_cache.block_tokens, self.counters, per_hash)
        self.prefixes = prefixes
        self.registry_watched = registry_watched
        """Whether a state-aware router reads this worker's registry (R54, prefix caching on):
        then a decode run must not evict, for the router may read it mid-run
        (``decode_runs.keeps_router_view``)."""
        self.chains = chains or None
        """R125 to R127: each chain's turn (by position) and what names its blocks; ``None``
        when no request is a chain's turn (R128: R47 alone)."""
        self.host = host
        """R129: its scheduler's host pool; ``None`` when its cache has no ``host``."""
        self.transfers = transfers
        """R136: the fleet's host transfers, which its stores and loads join."""
        self.ordered = self.chains is not None
        """Whether a step's registrations need the running list as it was formed
        (``Step.order``): a decode step may fill an identified block (R127). Without that only
        the step's prefills register, and its prefill list is in running order (R18's, then
        R19's), which is also the order of R131's offers."""
        self._most = 0
        """R48's cap ``floor((L - 1) / B)`` of the request offered admission last."""
        self._offer: tuple[RequestState, BlockIdentities, int, int] | None = None
        """The request offered admission last (``reusable``): its identities, hit blocks and
        how many of those are cached (held by nobody)."""

    def identities(self, state: RequestState) -> BlockIdentities:
        """R47: the request's identified blocks, found once."""
        if state.identities is None:
            state.identities = NO_IDENTITIES
            if self.hash_block_tokens is not None and state.request.prefix_hashes:
                block_tokens = self.cache.block_tokens
                chain = None if self.chains is None else self.chains.get(state.position)
                if chain is None:
                    state.identities = block_identities(
                        state.request, block_tokens, self.hash_block_tokens, self.prefixes
                    )
                else:  # R126, R127: a chain's turn
                    state.identities = chain_identities(
                        state.request, chain, block_tokens, self.hash_block_tokens, self.prefixes
                    )
        return state.identities

    def prompt_blocks(self, state: RequestState) -> int:
        """R54: ``ceil(prompt_tokens / B)``."""
        return self.cache.blocks_for(state.request.prompt_tokens)

    def cached_blocks(self, state: RequestState) -> int:
        """R54: ``cached(w, r)``, read from the registry as it is now: r's blocks 0, 1, ...
        identified and registered here, as far as they all are. Its identities are its full
        prompt blocks only, so that is at most ``floor(prompt_tokens / B)`` (not R48's cap)."""
        identities = self.identities(state)
        return self.cache.hit(identities, len(identities))[0]

    def grow(self, state: RequestState, tokens: int) -> bool:
        """R46, R49: ``tokens`` more cached tokens, with the blocks they need if obtainable."""
        cache = self.cache
        needed = cache.blocks_for(state.cached_tokens + tokens) - state.blocks.count
        if needed:  # most decode steps stay inside the request's last block
            if needed > cache.obtainable():
                return False
            cache.take(state.blocks, needed)
        state.cached_tokens += tokens
        return True

    def release(self, state: RequestState) -> None:
        """R49 action 1 and 2: its blocks released (R46), its cached tokens lost."""
        self.cache.release(state.blocks)
        state.cached_tokens = 0

    def reusable(self, state: RequestState, target: int) -> int:
        """R48: ``h * B``, h its registered identified blocks 0 to h - 1, at most
        ``floor((L - 1) / B)``: at least one token is computed."""
        cache = self.cache
        identities = self.identities(state)
        self._most = most = (target - 1) // cache.block_tokens
        hit, cached_hits = cache.hit(identities, most)
        self._offer = (state, identities, hit, cached_hits)
        return hit * cache.block_tokens

    def refusal(self, state: RequestState, cached: int) -> int:
        """R50 step 3: it needs ``ceil(cached / B) - h`` new blocks, and can have them when
        that is at most ``free`` plus the cached blocks other than its own hit blocks."""
        _, hit, cached_hits = self._offered(state)
        cache = self.cache
        needed = cache.blocks_for(cached) - hit
        return needed if needed > cache.free + cache.cached_count - cached_hits else 0

    def admit(self, state: RequestState, cached: int) -> None:
        """R48, R50 step 3: its hit blocks first, so that no eviction takes one of them."""
        identities, hit, _ = self._offered(state)
        self._offer = None
        cache = self.cache
        state.blocks.identities = identities
        cache.hold(state.blocks, hit)
        cache.take(state.blocks, cache.blocks_for(cached) - hit)
        state.cached_tokens = cached
        self.counters.reused_tokens += hit * cache.block_tokens
        if self.host is not None:  # R133: admitted with m = 0
            self.host.touch(identities, self._most, hit, 0)

    # --- R133 to R135: the host tier at admission

    def host_run(self, state: RequestState) -> int:
        """R133: the offered request's host run m after its GPU hit (0 without a host pool)."""
        host = self.host
        if host is None:
            return 0
        identities, hit, _ = self._offered(state)
        return host.run(identities, hit, self._most)

    def start_load(self, state: RequestState, run: int, now_us: int) -> bool:
        """R134: the offered request, whose host run is ``run`` (m > 0) blocks, starts its load
        if it can have m blocks beyond its hit (``free`` plus the cached blocks other than its
        hit blocks, as R50 counts): it holds its hit blocks, takes its destination blocks (R49),
        pins its run's entries, makes its touch (R133) and submits the load. False (nothing
        done) when it cannot."""
        identities, hit, cached_hits = self._offered(state)
        cache = self.cache
        if run > cache.free + cache.cached_count - cached_hits:
            return False
        host, transfers = self.host, self.transfers
        assert host is not None
        assert transfers is not None
        self._offer = None
        state.blocks.identities = identities
        cache.hold(state.blocks, hit)
        cache.take(state.blocks, run)
        state.cached_tokens = (hit + run) * cache.block_tokens
        loaded = identities.span(hit, hit + run)
        host.pin(loaded)
        host.touch(identities, self._most, hit, run)
        load = HostTransfer("load", host, state, list(range(hit, hit + run)), loaded, now_us, hit)
        transfers.submit(load)
        state.load = load
        return True

    def load_completed(self, load: HostTransfer) -> None:
        """R132, R134: a load ends: its entries lose their pins, and its destination blocks are
        registered in block order (each unless the registry has its identity already); they
        are not offered to the host pool (R131). The request's ``load_wait_us`` gains the
        load's end minus its submission (R140)."""
        assert self.host is not None
        self.host.loaded(load.identities)
        state = load.state
        cache = self.cache
        block_tokens = cache.block_tokens
        cache.register(state.blocks, load.hit * block_tokens, state.cached_tokens)
        if load.hit == 0:  # R54: it registered a block 0 here
            self.first_blocks.filled(load.identities[0], self.worker)
        assert state.load_wait_us is not None
        state.load_wait_us += load.end_us - load.submitted_us

    def join(self, state: RequestState, now_us: int) -> None:
        """R135, R137: a loaded request joins the running list in Prefill with ``(g + m) * B``
        cached tokens; its admission's reuse is counted now (R137), its first-scheduled time
        set if it has none; whole mode allots it as a recompute (R50)."""
        load = state.load
        assert load is not None
        state.load = None
        cached = state.cached_tokens
        state.prefilled = cached
        state.decoding = False
        state.recomputing = True  # R135: min(remaining, budget) in whole mode
        self.counters.reused_tokens += cached
        host_tokens = len(load.blocks) * self.cache.block_tokens
        assert self.host is not None
        self.host.counters.reused_tokens += host_tokens
        if state.first_scheduled_us is None:
            state.first_scheduled_us = now_us
            state.reused_prompt_tokens = cached
            state.host_reused_prompt_tokens = host_tokens

    def reserve(self, state: RequestState, *, reuse: bool) -> int | None:
        """R102: the blocks of the request's whole prompt on this decode scheduler: its decode
        hit (``reuse``: blocks 0 to h-1 identified and registered here, a whole prompt allowed,
        for nothing is computed at activation) and ``ceil(prompt_tokens / B) - h`` more, if
        that many are free or cached beyond its hit blocks. Its hit blocks, or ``None`` when
        they are not (nothing is then taken). Its blocks on the prefill side are no longer
        ``state.blocks`` (``handoff.Handoff.source_blocks``)."""
        cache = self.cache
        state.identities = None  # R47: identities are of this cache's block size
        identities = self.identities(state)
        # what its prefill computed: its prompt (R121: L, for a migrated request's new attempt)
        prompt = state.prefill_target
        hit, cached_hits = cache.hit(identities, prompt // cache.block_tokens) if reuse else (0, 0)
        needed = cache.blocks_for(prompt) - hit
        if needed > cache.free + cache.cached_count - cached_hits:
            return None
        state.blocks = HeldBlocks(identities=identities)
        cache.hold(state.blocks, hit)
        cache.take(state.blocks, needed)
        state.cached_tokens = prompt
        self.counters.reused_tokens += hit * cache.block_tokens
        return hit

    def activated(self, state: RequestState, hit: int, now_us: int) -> None:
        """R104: the blocks the transfer filled (all but the hit ones) are registered now, in
        block order, under R47's rule; with a host pool they are offered to it (R131)."""
        cache = self.cache
        before = hit * cache.block_tokens
        fresh = None
        if self.host is not None:
            fresh = self._fresh(state, before, state.prefill_target)
        cache.register(state.blocks, before, state.prefill_target)  # R121: L
        if fresh:
            self._store([(state, fresh)], now_us)

    def held_hit_blocks(self, state: RequestState) -> int:
        """R93's a: of the offered request's hit blocks, those running requests hold."""
        _, hit, cached_hits = self._offered(state)
        return hit - cached_hits

    def _offered(self, state: RequestState) -> tuple[BlockIdentities, int, int]:
        offer = self._offer
        assert offer is not None, "reusable: no request was offered admission"
        assert offer[0] is state, "reusable: another request was offered admission"
        return offer[1:]

    def formed(self, step: Step, preempted: list[RequestState]) -> None:
        """R52: the step's blocks in use once formed, and its victims."""
        step.kv_blocks_in_use = self.cache.held
        if preempted:
            step.preempted = [state.request.id for state in preempted]
        counters = self.counters
        counters.peak_blocks_in_use = max(counters.peak_blocks_in_use, step.kv_blocks_in_use)

    def take_run_blocks(self, step: Step) -> None:
        """R46: each of the run's later steps gave every decoding request one more cached
        token; the blocks they needed are taken now, all at once (as ``block_run_limit``
        allowed: free ones, or cached ones evicted in release order, never a preemption)."""
        cache = self.cache
        for state in step.decode:
            cached = state.cached_tokens + step.repeat - 1
            needed = cache.blocks_for(cached) - state.blocks.count
            assert needed <= cache.obtainable(), "block_run_limit: a run preempts nobody"
            cache.take(state.blocks, needed)
            state.cached_tokens = cached
        counters = self.counters
        counters.peak_blocks_in_use = max(counters.peak_blocks_in_use, cache.held)

    def step_ended(self, step: Step, finished: list[RequestState]) -> None:
        """R51: the step's registrations, then the completed requests' releases, each in
        running order (the prefill list is R18's, then R19's)."""
        cache = self.cache
        if step.order is not None:
            offers = self._register_in_running_order(step)
            for state in finished:
                cache.release(state.blocks)
            if offers:  # R131: after the registrations and releases, in running order
                self._store(offers, step.end_us)
            return
        if self.host is not None:  # R131: what each registered is offered, in running order
            offers = self._register_prefills(step)
            for state in finished:
                cache.release(state.blocks)
            if offers:
                self._store(offers, step.end_us)
            return
        for state, tokens in step.prefill:
            if state.identities:
                cached = state.cached_tokens
                cache.register(state.blocks, cached - tokens, cached)
                if cached - tokens < cache.block_tokens <= cached:  # it filled its block 0
                    self.first_blocks.filled(state.identities[0], self.worker)
        for state in finished:
            cache.release(state.blocks)

    def _register_prefills(self, step: Step) -> list[Offer]:
        """R47, R51, R131: each request of the step's prefill list, in order, registers the
        identified blocks it filled; what each registered (its offer)."""
        cache = self.cache
        offers: list[Offer] = []
        for state, tokens in step.prefill:
            if state.identities:
                cached = state.cached_tokens
                fresh = self._fresh(state, cached - tokens, cached)
                cache.register(state.blocks, cached - tokens, cached)
                if cached - tokens < cache.block_tokens <= cached:  # it filled its block 0
                    self.first_blocks.filled(state.identities[0], self.worker)
                if fresh:
                    offers.append((state, fresh))
        return offers

    def _register_in_running_order(self, step: Step) -> list[Offer]:
        """R47, R51, R127: each request of the step (a run: of its steps, whose later ones fill
        no identified block, ``decode_runs.fill_run_limit``), in running order as the step was
        formed (``Step.order``), registers the identified blocks it filled, a decode step's
        generated tokens' blocks included. With a host pool, what each registered, as
        their indices and identities in block order (R131's offers)."""
        cache = self.cache
        offers: list[Offer] = []
        host = self.host
        block_tokens = cache.block_tokens
        allotted = dict(step.prefill)
        decoding = set(step.decode)
        assert step.order is not None
        for state in step.order:
            tokens = allotted.get(state)
            if tokens is None:
                if state not in decoding:
                    continue
                tokens = step.repeat  # one cached token a step
            cached = state.cached_tokens
            identities = state.blocks.identities
            if identities.size * block_tokens <= cached - tokens:  # nothing left to fill
                continue
            fresh = None if host is None else self._fresh(state, cached - tokens, cached)
            cache.register(state.blocks, cached - tokens, cached)
            if cached - tokens < block_tokens <= cached:  # it filled its block 0
                self.first_blocks.filled(identities[0], self.worker)
            if fresh:
                offers.append((state, fresh))
        return offers

    def _fresh(
        self, state: RequestState, before: int, after: int
    ) -> tuple[list[int], list[Identity]] | None:
        """The identified blocks ``register(state.blocks, before, after)`` is about to register:
        those it fills whose identity the registry does not have (R47), as their indices and
        identities in block order; ``None`` when there are none."""
        cache = self.cache
        identities = state.blocks.identities
        block_tokens = cache.block_tokens
        first = before // block_tokens
        last = min(after // block_tokens, identities.size)
        if first >= last:
            return None
        named = identities.span(first, last)
        per_hash = identities.per_hash
        groups = identities.numbers[first // per_hash : (last - 1) // per_hash + 1]
        if cache.group_values.keys().isdisjoint(groups):  # none registered: all of them
            return list(range(first, last)), named
        value = cache.value
        kept = [index for index, identity in enumerate(named) if value(identity) == ABSENT]
        if not kept:
            return None
        return [first + index for index in kept], [named[index] for index in kept]

    def _store(self, offers: list[Offer], now_us: int) -> None:
        """R131: each request, in order, offers what it registered; the blocks that take
        entries form one store, submitted now."""
        host, transfers = self.host, self.transfers
        assert host is not None
        assert transfers is not None
        for state, (blocks, identities) in offers:
            taken_blocks, taken = host.offer(blocks, identities)
            if taken:
                transfers.submit(HostTransfer("store", host, state, taken_blocks, taken, now_us))
