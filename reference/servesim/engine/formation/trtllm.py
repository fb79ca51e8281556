"""TensorRT-LLM's step formation under ``GUARANTEED_NO_EVICT`` (SPEC.md R93).

vLLM's step (``formation.vllm``) with one more admission condition: a request is admitted only
when the blocks it needs to run to completion fit what is left after every running request's
reservation of its own remaining blocks. So held plus reserved blocks never exceed the cache,
every block a running request asks for is there, and nobody is ever preempted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.block_memory import BlockMemory
from servesim.engine.formation.batch import Batch
from servesim.engine.formation.vllm import VllmFormation
from servesim.engine.requests import RequestState

if TYPE_CHECKING:
    from servesim.engine.worker import Worker


def to_completion_blocks(memory: BlockMemory, state: RequestState) -> int:
    """R93's f: ``ceil((prompt_tokens + max_output_tokens) / B)``, with ``max_output_tokens``
    1 on a disaggregated fleet's prefill side (R100); for a migrated request's new attempt
    with k client tokens, ``L = prompt_tokens + k`` in place of ``prompt_tokens`` and
    ``max_output_tokens - k`` in place of ``max_output_tokens`` (R121), so that on the prefill
    side f is ``ceil((L + 1) / B)`` and elsewhere it is unchanged."""
    produced = state.token_times_us.count
    remaining = min(state.output_limit, state.request.max_output_tokens - produced)
    return memory.cache.blocks_for(state.request.prompt_tokens + produced + remaining)


def reserved_blocks(worker: Worker) -> int:
    """R93: the blocks the running requests reserve beyond those they hold, ``sum(f - h)``;
    on a decode scheduler its Transferring and Ready requests too (R102)."""
    memory = worker.memory
    assert isinstance(memory, BlockMemory)
    running = worker.running
    states = running + worker.incoming if worker.incoming else running
    return sum(to_completion_blocks(memory, state) - state.blocks.count for state in states)


class TrtllmFormation(VllmFormation):
    """R93: ``formation.Formation`` for TensorRT-LLM."""

    __slots__ = ()

    style = "trtllm"

    def form(self, worker: Worker, now_us: int) -> Batch:
        """R93: vLLM's step; with a cache, the worker's held and reserved blocks once it is
        formed feed ``peak_reserved_blocks`` (R95)."""
        batch = super().form(worker, now_us)
        memory = worker.memory
        if isinstance(memory, BlockMemory):
            counters = memory.counters
            reserved = memory.cache.held + reserved_blocks(worker)
            assert reserved <= memory.cache.blocks, "R93: reservations never exceed the cache"
            if counters.peak_reserved_blocks is None or reserved > counters.peak_reserved_blocks:
                counters.peak_reserved_blocks = reserved
        return batch

    def _fits(self, worker: Worker, head: RequestState, cached: int) -> bool:
        """R93: the head needs ``f - a`` blocks (a: its hit blocks running requests hold), at
        most the blocks left after every reservation; its allotment's blocks are among them.
        A head refused so stays refused while no request completes (taking a block moves it
        from free or cached to held and shrinks a reservation alike, and eviction touches no
        held block), so ``refused_blocks`` stays 0: a decode run may evict."""
        memory = worker.memory
        if isinstance(memory, BlockMemory):
            cache = memory.cache
            needs = to_completion_blocks(memory, head) - memory.held_hit_blocks(head)
            if needs > cache.free + cache.cached_count - reserved_blocks(worker):
                return False
        return super()._fits(worker, head, cached)

    def _make_room(
        self, worker: Worker, state: RequestState, tokens: int, served: set[RequestState]
    ) -> bool:
        """R93: never reached; every block a running request asks for is reserved for it."""
        raise AssertionError("R93: the trtllm style never preempts")
