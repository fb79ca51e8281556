"""A worker of several ranks and its passes (SPEC.md R78, R80, R83, R85).

A worker with ``dp_size`` d > 1 is d schedulers (``Worker`` objects, one per rank: its own
queues, limits and cache) behind one barrier. ``RankGroup`` holds what belongs to the worker
rather than to a rank: the pass in flight, its scheduling and completion bookkeeping, R80's rank
rotation and R85's whole-worker figures (passes, their busy time, the peaks over the ranks
together). A worker of one rank needs none of this: its pass is its step, and the event loop
treats it as before.
"""

from __future__ import annotations

from servesim.engine.block_memory import BlockMemory
from servesim.engine.formation.trtllm import reserved_blocks
from servesim.engine.step import Step
from servesim.engine.worker import Worker


class RankGroup:
    """One worker of several ranks: its pass in flight and its whole-worker counters."""

    __slots__ = (
        "busy_us",
        "completion_sequence",
        "in_flight",
        "index",
        "passes",
        "peak_blocks_in_use",
        "peak_reserved_blocks",
        "peak_running",
        "peak_waiting",
        "ranks",
        "rotation",
        "schedule_pending",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        """Its global worker index (R78)."""
        self.ranks: list[Worker] = []
        """Its ranks, in rank order (filled as they are made)."""
        self.in_flight: list[Step] | None = None
        """R83: the steps of the pass in flight, in rank order; ``None`` when idle."""
        self.completion_sequence = -1
        self.schedule_pending = False
        self.rotation = 0
        """R80: how many requests a counting policy placed on it so far."""
        self.passes = 0
        self.busy_us = 0
        self.peak_running = 0
        self.peak_waiting = 0
        self.peak_blocks_in_use = 0
        self.peak_reserved_blocks = 0
        """R95: with the trtllm style, the largest total of the ranks' held and reserved
        blocks once a pass is formed."""

    def has_work(self) -> bool:
        """R83: a rank has a request running or waiting."""
        return any(rank.running or rank.waiting for rank in self.ranks)

    def next_rank(self) -> Worker:
        """R80: the j-th request placed here by rotation joins rank j mod d."""
        rank = self.ranks[self.rotation % len(self.ranks)]
        self.rotation += 1
        return rank

    def joined(self) -> None:
        """R85: a request joined a rank's waiting queue (routed, or preempted back)."""
        waiting = sum(len(rank.waiting) for rank in self.ranks)
        if waiting > self.peak_waiting:
            self.peak_waiting = waiting

    def formed(self, steps: list[Step]) -> None:
        """R85: the pass is formed: the ranks' running lists and held blocks together."""
        self.in_flight = steps
        self.passes += 1
        self.peak_running = max(self.peak_running, sum(len(rank.running) for rank in self.ranks))
        held = [
            rank.memory.cache.held for rank in self.ranks if isinstance(rank.memory, BlockMemory)
        ]
        if held:
            self.peak_blocks_in_use = max(self.peak_blocks_in_use, sum(held))
            if self.ranks[0].style == "trtllm":  # R93: reservations are this style's only
                reserved = sum(held) + sum(reserved_blocks(rank) for rank in self.ranks)
                self.peak_reserved_blocks = max(self.peak_reserved_blocks, reserved)

    def ended(self, start_us: int, end_us: int, passes: int = 1) -> None:
        """R85: the pass from ``start_us`` (or the run of ``passes`` passes of one rank alone,
        ``decode_runs``) kept the worker busy until ``end_us``."""
        self.in_flight = None
        self.passes += passes - 1  # ``formed`` counted the first
        self.busy_us += end_us - start_us

    def ran(self, rank: Worker) -> None:
        """R85: after a run of ``rank`` alone, the worker's peak of blocks in use is at least
        the rank's: each pass of the run held the rank's blocks and none of its idle siblings'
        (R45: ``held`` counts running requests' blocks only), and the rank's own peak was
        reached at one of its steps, where the worker's total was at least as large."""
        counters = rank.kv_counters
        if counters is not None and counters.peak_blocks_in_use > self.peak_blocks_in_use:
            self.peak_blocks_in_use = counters.peak_blocks_in_use
        # R95: likewise held and reserved blocks (idle trtllm ranks reserve none)
        reserved = None if counters is None else counters.peak_reserved_blocks
        if reserved is not None and reserved > self.peak_reserved_blocks:
            self.peak_reserved_blocks = reserved
