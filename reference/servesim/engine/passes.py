"""A worker of several ranks and its passes (SPEC.md R78, R80, R83, R85).

A worker with ``dp_size`` d > 1 is d schedulers (``Worker`` objects, one per rank: its own
queues, limits and cache) behind one barrier. ``RankGroup`` holds what belongs to the worker
rather than to a rank: the pass in flight and its bookkeeping, R80's rank rotation, R85's
whole-worker figures and the decode steps its ranks carry across passes (``CarriedSteps``).
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
        "carry",
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

    def __init__(self, index: int, dp_size: int) -> None:
        self.index = index
        """Its global worker index (R78)."""
        self.ranks: list[Worker] = []
        """Its ranks, in rank order (filled as they are made)."""
        self.in_flight: list[Step] | None = None
        """R83: the steps of the pass in flight, in rank order; ``None`` when idle."""
        self.carry = CarriedSteps(dp_size)
        self.completion_sequence = -1
        self.schedule_pending = False
        """R83: its scheduling event is in the queue (``EventLoop._request_group_scheduling``)."""
        self.rotation = 0
        """R80: how many requests a counting policy placed on it so far."""
        self.passes = 0
        """R85: its passes, each pass of a run of passes counted."""
        self.busy_us = 0
        """R85: how long a pass of it was in flight."""
        self.peak_running = 0
        """R85: the most requests running on its ranks together, once a pass is formed."""
        self.peak_waiting = 0
        self.peak_blocks_in_use = 0
        self.peak_reserved_blocks = 0
        """R95: with the trtllm style, the largest total of the ranks' held and reserved
        blocks once a pass is formed."""

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
        self.peak_running = max(self.peak_running, sum([len(rank.running) for rank in self.ranks]))
        if self.ranks[0].memory.unlimited:  # R45: no cache in the pool, so no blocks are held
            return
        held = held_blocks(self.ranks)
        if held:
            self.peak_blocks_in_use = max(self.peak_blocks_in_use, sum(held))
            if self.ranks[0].style == "trtllm":  # R93: reservations are this style's only
                reserved = sum(held) + sum(reserved_blocks(rank) for rank in self.ranks)
                self.peak_reserved_blocks = max(self.peak_reserved_blocks, reserved)

    def ended(self, start_us: int, end_us: int, passes: int = 1) -> None:
        """R85: the pass from ``start_us`` (or a run of ``passes`` passes: of one period, or of
        one rank alone, ``decode_runs``) kept the worker busy until ``end_us``."""
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


def held_blocks(ranks: list[Worker]) -> list[int]:
    """R45: the blocks each rank holds, of ranks with a cache."""
    return [rank.memory.cache.held for rank in ranks if isinstance(rank.memory, BlockMemory)]


class CarriedSteps:
    """The decode steps a worker's ranks carry from one pass to the next, and the pass in flight.

    Not a rule of the spec but a shortcut that keeps its results (R21: the same report bytes),
    as the decode runs of ``decode_runs`` are. A rank's step depends only on the rank's own
    queues, running list, cache and style state (R83: each rank forms its step by sections 5
    and 11, with its own queues and cache), never on its siblings' steps or on the time. So a
    decode-only step of a rank without a cache, under a synthetic model (a decode-only step
    lasts the same whatever its context, R22) and a style that forms its later decode steps
    alike (``Formation.run_limit``), is formed the same again at each later pass, as
    ``decode_runs`` forms a one-rank worker's next steps the same (its conditions 1 to 3 and 6;
    4 needs a cache, and with a stop time, 5, no step is carried): until a request joins the
    rank (admission, blocked, may then let it in) or the first of its decoding requests to
    finish produces its last token (then the running list changes). Its siblings may meanwhile
    prefill, take requests and form new steps every pass. So the step stays open for those passes
    (``remaining``) and is applied once, when it ends (``Worker.complete_step``, with a segment
    per stretch of passes of one length, ``add_passes``): its tokens come at each pass end and
    its rank is busy d_r per pass (R85), as pass by pass. What is read of the rank in the
    meantime is what pass by pass shows: its running list and queue do not change, and a
    state-aware router reads only ``outstanding`` without a cache (R54), which changes only at
    a join (which ends the step) and a completion (at its last pass).
    """

    __slots__ = ("period_us", "remaining", "start_us", "steps")

    def __init__(self, dp_size: int) -> None:
        self.steps: list[Step | None] = [None] * dp_size
        """By rank: the decode step it carries into its next pass; ``None`` for a rank whose
        next pass forms a new step, if it has work."""
        self.remaining = [0] * dp_size
        """By rank: how many more passes its step in flight or carried may stand for, after
        those it stands for already; at 0 it ends at its pass end."""
        self.start_us = 0
        """When the pass in flight (or its run of passes of one period) started."""
        self.period_us = 0
        """The length of each pass in flight: the longest of its steps' durations."""

    def close(self, rank: int) -> None:
        """A request joined ``rank``: its open step ends at the end of the pass in flight (or
        now, between passes), and its next pass forms a new one, which may admit it."""
        self.remaining[rank] = 0


def add_passes(step: Step, start_us: int, period_us: int, count: int) -> None:
    """R83: ``step``, a rank's step in a pass of several ranks, stands for ``count`` more passes
    of ``period_us`` each, back to back from ``start_us``: its tokens come at each pass end.

    A step of one pass ends at ``pass_end_us``; one of several passes keeps them as the
    ``segments`` of its run (one per stretch of equal pass lengths), as a run's steps of
    different durations do (``decode_runs.measured_decode_run``). Its ``duration_us`` stays
    its own d_r, what its rank is busy each pass (R85). A carried step's passes follow its
    last pass end at once (its rank has work, so the worker starts its next pass then, R83).
    """
    if step.pass_end_us is None and step.segments is None:  # just formed: its first passes
        if count == 1:
            step.pass_end_us = start_us + period_us
        else:
            step.repeat = count
            step.segments = [(start_us + period_us, period_us, count)]
        return
    segments = step.segments
    if segments is None:  # it stood for one pass
        assert step.pass_end_us is not None
        segments = [(step.pass_end_us, step.pass_end_us - step.start_us, 1)]
        step.pass_end_us = None
    first_end, period, stretch = segments[-1]
    if period == period_us:  # these passes last as long as the stretch before them
        segments[-1] = (first_end, period, stretch + count)
    else:
        segments.append((start_us + period_us, period_us, count))
    step.segments = segments
    step.repeat += count
