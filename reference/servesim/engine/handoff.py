"""Disaggregated prefill and decode: a request's way from its prefill worker to its decode
worker (SPEC.md section 17, R97 to R107).

The state machine, one function per transition, as the spec writes it::

    Prefill --(its prefill step ends, R100)--> Held
    Held --(routed on the decode side, R99)--> Pending        (``hand_off``)
    Pending --(a reservation, R102)--> Transferring           (``try_reservations``)
    Transferring --(transfer end, worker idle, R104)--> Decode (``activate``)
    Transferring --(transfer end, pass in flight)--> Ready --(the pass end)--> Decode

The event loop (``servesim.engine.loop``) owns the events and calls these at their instants;
this module knows the queues, the transfer time and the blocks, nothing of events or timing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servesim.contract.model import KvTransfer
from servesim.engine.block_memory import BlockMemory
from servesim.engine.formation.trtllm import reserved_blocks, to_completion_blocks
from servesim.engine.kv.held import HeldBlocks
from servesim.engine.requests import RequestState
from servesim.engine.worker import Worker


@dataclass(slots=True, eq=False)
class Handoff:
    """R107's ``handoff`` of one request, filled as it goes; ``None`` is a stage not reached."""

    prefill_end_us: int
    source: Worker
    """The prefill scheduler whose blocks it holds until its activation (R100, R104)."""
    source_blocks: HeldBlocks = field(default_factory=HeldBlocks)
    """Its blocks on the prefill side, released at its activation (R104)."""
    decode: Worker | None = None
    """The decode scheduler it was routed to (R99)."""
    reserved_us: int | None = None
    transfer_end_us: int | None = None
    activation_us: int | None = None
    transferred_tokens: int | None = None
    transfer_us: int | None = None
    decode_reused_tokens: int | None = None
    hit: int = 0
    """R102: its decode hit, in blocks."""


def hand_off(state: RequestState, source: Worker, decode: Worker, now_us: int) -> None:
    """R100, R99: a request the pass made Held, routed to the decode scheduler ``decode``,
    joins the tail of its reservation queue; its prefill blocks stay held on ``source``."""
    handoff = Handoff(prefill_end_us=now_us, source=source, source_blocks=state.blocks)
    handoff.decode = decode
    state.handoff = handoff
    state.blocks = HeldBlocks()
    state.output_limit = state.request.max_output_tokens  # R93's footprint on the decode side
    decode.routed += 1
    decode.outstanding += 1  # R99: counted until it is terminal
    decode.load_blocks += decode.memory.prompt_blocks(state)
    decode.pending.append(state)
    if decode.memory.host is not None and state.load_wait_us is None:  # R140
        state.load_wait_us = 0


def try_reservations(decode: Worker, transfer: KvTransfer, now_us: int) -> list[RequestState]:
    """R102: offer the head of ``decode``'s reservation queue a reservation, then the next,
    until one cannot have it (no skipping); the requests reserved, in order, each with its
    transfer's tokens and duration (R103) set."""
    reserved: list[RequestState] = []
    pending = decode.pending
    while pending:
        state = pending[0]
        hit = _reservation(decode, state)
        if hit is None:
            break
        pending.popleft()
        decode.incoming.append(state)
        handoff = state.handoff
        assert handoff is not None
        block_tokens = _memory(decode).cache.block_tokens
        handoff.hit = hit
        handoff.reserved_us = now_us
        handoff.decode_reused_tokens = hit * block_tokens
        prompt = state.prefill_target  # its prompt; R121: L for a migrated request's new attempt
        tokens = prompt if transfer.full_prompt else prompt - hit * block_tokens
        handoff.transferred_tokens = tokens
        handoff.transfer_us = transfer.transfer_us(tokens)
        reserved.append(state)
    return reserved


def _memory(worker: Worker) -> BlockMemory:
    memory = worker.memory
    assert isinstance(memory, BlockMemory), "R97: every pool of a disaggregated fleet has a cache"
    return memory


def _reservation(decode: Worker, state: RequestState) -> int | None:
    """R102: whether the head gets a seat and its blocks, by the decode scheduler's style; its
    decode hit in blocks if so (the blocks then taken), ``None`` if not."""
    formation = decode.formation
    seats = len(decode.running) + len(decode.incoming)
    if seats >= formation.limits.max_num_seqs:  # type: ignore[attr-defined]
        return None
    memory = _memory(decode)
    if formation.style == "trtllm":  # R93's condition, hit 0, incoming requests reserving
        cache = memory.cache
        available = cache.free + cache.cached_count - reserved_blocks(decode)
        if to_completion_blocks(memory, state) > available:
            return None
        hit = memory.reserve(state, reuse=False)
        assert hit == 0, "R102: the footprint covers the prompt's blocks"
        return hit
    return memory.reserve(state, reuse=True)


def activate(state: RequestState, now_us: int) -> Worker:
    """R104: the request joins its decode scheduler's running list in Decode, with its prompt
    cached and its hidden token produced; the blocks the transfer filled are registered; its
    prefill scheduler releases its blocks there. That prefill scheduler, whose blocks changed."""
    handoff = state.handoff
    assert handoff is not None
    assert handoff.decode is not None
    decode = handoff.decode
    decode.incoming.remove(state)
    decode.running.append(state)
    decode.activated += 1
    state.hidden = 1
    handoff.activation_us = now_us
    _memory(decode).activated(state, handoff.hit, now_us)
    source = handoff.source
    _memory(source).cache.release(handoff.source_blocks)  # R46: last block first
    handoff.source_blocks = HeldBlocks()
    return source
