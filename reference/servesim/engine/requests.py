"""What the simulation learns about one request as it goes (SPEC.md R9, R20, R46 to R49, R62).

A ``RequestState`` is data: the formation policy moves it between a worker's queues, the worker
applies its steps (R20), the worker's memory gives it blocks (R46), and the report reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from servesim.contract.model import Request
from servesim.engine.kv.held import HeldBlocks
from servesim.engine.kv.identities import BlockIdentities
from servesim.engine.token_times import TokenTimes

if TYPE_CHECKING:
    from servesim.engine.handoff import Handoff
    from servesim.engine.kv.host_tier import HostTransfer


@dataclass(slots=True, eq=False)
class RequestState:
    """Everything the simulation learns about one request, accepted or rejected."""

    request: Request
    position: int
    """The request's index in the workload document."""
    arrival_us: int | None = None
    """When it arrived (R26, R60): its ``arrival_us``, or later for a released turn or unit
    (R59, R61); ``None`` until it arrives, and for good if a stop time comes first (R62)."""
    worker: int | None = None
    rank: int | None = None
    """R78, R85: the rank of ``worker`` it joined (0 on a one-rank worker)."""
    reject_reason: str | None = None
    prefilled: int = 0
    """Tokens of ``prefill_target`` computed so far (R20), or reused (R48); only ``prefill``
    and admission with a cache set it."""
    prefill_target: int = field(init=False)
    """The tokens to compute before the request decodes: its ``prompt_tokens``, or with a cache
    after a preemption also the tokens it produced before (R48's L)."""
    decoding: bool = False
    """Whether the request is in the Decode phase: its whole prompt is prefilled (R9). Kept by
    ``prefill`` rather than computed, since every step asks it of every running request."""
    first_scheduled_us: int | None = None
    token_times_us: TokenTimes = field(default_factory=TokenTimes)
    """When each output token was produced; its length is the number generated so far."""
    terminal_us: int | None = None
    cut_off: bool = False
    """R62: whether the stop time ended it (its ``terminal_us`` is then the stop time)."""
    fail_reason: str | None = None
    """R118, R123: why it failed (its terminal state Failed, section 18); ``None`` otherwise."""
    reused_prompt_tokens: int = 0
    """R48, R52: the tokens reused at its first admission (0 without a cache)."""
    preemptions: int = 0
    """R49, R52: how many times it was preempted."""
    recomputing: bool = False
    """R50: whether it is a request recomputing after a preemption (R49), or (R118) one
    migrated after it produced tokens; whole mode then allots it ``min(remaining, budget)``."""
    retractions: int = 0
    """R91, R95: how many times the sglang style retracted it."""
    cached_tokens: int = 0
    """R46: the tokens whose keys and values it has in the cache (with a cache only)."""
    blocks: HeldBlocks = field(default_factory=HeldBlocks)
    """R46: the blocks it holds while running, ``ceil(cached_tokens / B)`` of them."""
    identities: BlockIdentities | None = None
    """R47: its identified blocks' identities, found when first needed with a cache (at its
    routing by a state-aware policy, R54, or else at its first admission)."""
    cached_blocks_at_routing: int | None = None
    """R54, R57: cached(w, r) at the worker it joined, when a state-aware policy routed it
    with prefix caching on."""
    hidden: int = 0
    """R105: tokens it produced that are no client's, which count in its context and its
    recompute (R22, R48) but not in ``token_times_us``: 1 once a disaggregated fleet has
    activated it on its decode side (its prefill's hidden token, R100), else 0."""
    output_limit: int = field(init=False)
    """The output tokens it may produce where it is: its ``max_output_tokens``, or 1 on a
    disaggregated fleet's prefill side (R100), which R93's footprint reads."""
    handoff: Handoff | None = None
    """R100 to R104: its way from its prefill worker to its decode worker, once its prefill
    has ended in a disaggregated fleet."""
    load: HostTransfer | None = None
    """R134, R135: its load from a host pool while it is loading or loaded; ``None`` otherwise."""
    host_reused_prompt_tokens: int = 0
    """R137, R140: the host part of its reuse at its first admission."""
    load_wait_us: int | None = None
    """R140: the sum of its completed loads' waits (end minus submission); ``None`` until it
    joins a scheduler with a host pool (and for good if it never does)."""

    def __post_init__(self) -> None:
        self.prefill_target = self.request.prompt_tokens
        self.output_limit = self.request.max_output_tokens

    def prefill(self, tokens: int) -> None:
        """R20, R51: ``tokens`` more tokens were prefilled (or recomputed)."""
        self.prefilled += tokens
        self.decoding = self.prefilled == self.prefill_target
