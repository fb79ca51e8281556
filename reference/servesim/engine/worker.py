"""One worker's continuous-batching scheduler: how a step is formed and what it does.

SPEC.md section 5. A worker is data: the event loop in ``servesim.engine.loop`` calls
``plan_step`` when the worker schedules and ``complete_step`` when its step ends. A worker with
a KV cache is a ``CachingWorker`` (section 11, R50 and R51), whose cache is in
``servesim.engine.kv_cache``.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from servesim.contract.model import KvCache, MeasuredTiming, Request, SchedulerLimits, StepShape
from servesim.engine.kv.cache import BlockCache
from servesim.engine.kv.counters import KvCacheCounters
from servesim.engine.kv.held import HeldBlocks
from servesim.engine.kv.identities import (
    NO_IDENTITIES,
    BlockIdentities,
    HashPrefixes,
    Identity,
    block_identities,
)
from servesim.engine.step_ends import slicing_pays
from servesim.engine.token_times import Segment, TokenTimes


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
    reused_prompt_tokens: int = 0
    """R48, R52: the tokens reused at its first admission (0 without a cache)."""
    preemptions: int = 0
    """R49, R52: how many times it was preempted."""
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

    def __post_init__(self) -> None:
        self.prefill_target = self.request.prompt_tokens

    def prefill(self, tokens: int) -> None:
        """R20, R51: ``tokens`` more tokens were prefilled (or recomputed)."""
        self.prefilled += tokens
        self.decoding = self.prefilled == self.prefill_target


@dataclass(slots=True, eq=False)
class Step:
    """One step of one worker, or a run of decode-only steps of the same requests (R16 to R20).

    ``repeat`` is how many steps the object stands for, back to back from ``start_us`` (see
    ``decode_run_length`` and ``measured_decode_run``); it is 1 for every step with prefill. With
    a synthetic model they all last ``duration_us``; with a measured model each may differ (its
    context grows, R22), and ``segments`` holds them grouped by duration.
    """

    worker: int
    start_us: int
    duration_us: int
    decode: list[RequestState]
    prefill: list[tuple[RequestState, int]]
    repeat: int = 1
    context_tokens: int = 0
    """R22's C at the first step's start, fixed when the step is formed (``context_tokens``);
    left 0 when nothing reads it (a synthetic model, no trace)."""
    segments: list[Segment] | None = None
    """A run whose steps differ: ``(first_end_us, duration_us, count)`` for each stretch of
    ``count`` steps of equal duration, back to back, the first ending at ``first_end_us``. Their
    counts add up to ``repeat``, and they are the run's step end times, as ``TokenTimes``
    stores them."""
    kv_blocks_in_use: int | None = None
    """R50, R52: the held blocks once the step is formed; ``None`` without a cache. A run's
    later steps take no block when traced (``CachingWorker.run_limit``), so then it is every
    step's; untraced, only its first's (the worker's peak counts the run's last)."""
    preempted: list[str] = field(default_factory=list)
    """R49, R52: the ids of the requests preempted while the step was formed, in order."""

    @property
    def end_us(self) -> int:
        """When the last of the ``repeat`` steps ends."""
        if self.segments is not None:
            first_end, duration, count = self.segments[-1]
            return first_end + (count - 1) * duration
        return self.start_us + self.repeat * self.duration_us

    def step_bounds(self) -> Iterator[tuple[int, int]]:
        """``(start_us, end_us)`` of each step of the run, in order."""
        segments = self.segments or [
            (self.start_us + self.duration_us, self.duration_us, self.repeat)
        ]
        for first_end, duration, count in segments:
            for end in range(first_end, first_end + count * duration, duration):
                yield end - duration, end

    @property
    def prefill_tokens(self) -> int:
        """The prompt tokens one step prefills, over all requests."""
        return sum(tokens for _, tokens in self.prefill)

    @property
    def shape(self) -> StepShape:
        """R22: the first step's shape (each later step of a run has C larger by D)."""
        return StepShape(len(self.decode), self.context_tokens, self.prefill_tokens)

    def truncate_at(self, now_us: int) -> bool:
        """Shorten a run to end at the first step boundary at or after ``now_us``.

        Called when a request joins the worker during the run: from that boundary on the steps
        may differ (the request may be admitted), so they are formed one by one again. Returns
        whether the run was shortened.
        """
        segments = self.segments or [
            (self.start_us + self.duration_us, self.duration_us, self.repeat)
        ]
        kept = 0  # the steps of the segments before the one holding the boundary
        for index, (first_end, duration, count) in enumerate(segments):
            if first_end + (count - 1) * duration < now_us:
                kept += count
                continue
            # the segment's steps that end before now, and the one ending at or after it
            taken = max(0, -(-(now_us - first_end) // duration)) + 1
            if kept + taken >= self.repeat:
                return False
            self.repeat = kept + taken
            if self.segments is not None:
                self.segments = [*segments[:index], (first_end, duration, taken)]
            return True
        return False

    def stop_at(self, stop_us: int) -> None:
        """R62: keep only the steps of a run that a stop time leaves whole, and the first.

        The steps ending at or before ``stop_us`` complete; one ending after it is cut (it never
        ends). A run keeps the steps ending at or before the stop time, so that its completion is
        processed, and then the worker forms the next step at its own time, one at a time as
        step-by-step formation would; if even its first step ends after the stop time, that step
        alone is left, to be cut (``Worker.cut_step``).
        """
        if self.end_us <= stop_us:
            return
        self.truncate_at(stop_us)  # its last step is now the one ending at or after stop_us
        if self.end_us > stop_us and self.repeat > 1:  # the step at the boundary is cut: drop it
            self.repeat -= 1
            if self.segments is not None:
                first_end, duration, count = self.segments[-1]
                if count == 1:
                    self.segments.pop()
                else:
                    self.segments[-1] = (first_end, duration, count - 1)
                if self.repeat == 1:  # one step is no run: its end is start + duration
                    self.segments = None


def context_tokens(decode: list[RequestState]) -> int:
    """R22's C: the decoding requests' prompt plus generated tokens, now."""
    return sum(state.request.prompt_tokens + state.token_times_us.count for state in decode)


def _steps_to_first_completion(step: Step) -> int:
    """How many decode steps pass before the first of ``step``'s decoding requests completes."""
    return min(
        [state.request.max_output_tokens - state.token_times_us.count for state in step.decode]
    )


def decode_run_length(step: Step, max_end_us: int, max_steps: int | None = None) -> int:
    """How many identical copies of a decode-only step the worker runs back to back.

    Not a rule of the spec but a shortcut that keeps its results: while no request completes
    and none joins the worker, R17 to R19 form the same decode-only step again and again (no
    prefill means admission is blocked, by max_num_seqs or a whole prompt that does not fit,
    and stays blocked until a request leaves). So the run lasts until the first decoding
    request's last token; a request joining the worker cuts it short (``Step.truncate_at``).
    With a KV cache, ``max_steps`` is how long the run stays exact
    (``CachingWorker.run_limit``).
    """
    if step.prefill or not step.decode:
        return 1
    first_finish = _steps_to_first_completion(step)
    if max_steps is not None:
        first_finish = min(first_finish, max_steps)
    representable = (max_end_us - step.start_us) // step.duration_us  # R6: stop at the limit
    return max(1, min(first_finish, representable))


#: The steps a worker keeps its step ends for before it decides whether slicing them pays
#: (``Worker._keep_step_ends``): enough for a busy worker's batch to fill.
STEP_ENDS_TRIAL = 1024


#: The most stretches of equal durations one measured run forms ahead: an arrival may cut it
#: short (then the rest was formed for nothing), and the next run picks up where it ended.
#: Forming a run costs one model evaluation per stretch, however many steps each holds.
MEASURED_RUN_STRETCHES = 64


def measured_decode_run(
    step: Step, model: MeasuredTiming, max_end_us: int, max_steps: int | None = None
) -> None:
    """``decode_run_length`` for a measured model: the run's steps differ in duration.

    Each decode-only step of the run has the same requests, and C larger by D than the step
    before (each decoding request gained one token, R22). The model says how far C may grow
    with the same duration (``context_extent``), so each stretch of equal durations is timed
    once, not step by step. The run stops before a step the model does not cover (R43: only C
    changes, and it grows) or one ending after ``max_end_us`` (R6): that step is formed again
    at its own time, in event order, and stops the replay then. ``max_steps`` is
    ``decode_run_length``'s.
    """
    if step.prefill or not step.decode:
        return
    decoding = len(step.decode)
    remaining = _steps_to_first_completion(step)
    if max_steps is not None:
        remaining = min(remaining, max_steps)
    covered_context = model.coverage.context_tokens.max
    context = step.context_tokens
    end = step.start_us
    segments: list[Segment] = []
    for _ in range(MEASURED_RUN_STRETCHES):
        if remaining == 0 or context > covered_context:
            break
        shape = StepShape(decoding, context, 0)
        # the first step's duration is known: the event loop timed it
        duration = (
            step.duration_us if context == step.context_tokens else model.step_duration_us(shape)
        )
        extent = min(model.context_extent(shape), covered_context)
        count = min((extent - context) // decoding + 1, remaining, (max_end_us - end) // duration)
        if count == 0:
            break
        if segments and segments[-1][1] == duration:  # a stretch may last as long as the last
            first_end, _, previous = segments.pop()
            segments.append((first_end, duration, previous + count))
        else:
            segments.append((end + duration, duration, count))
        end += count * duration
        context += count * decoding
        remaining -= count
    step.repeat = sum(count for _, _, count in segments)
    if step.repeat > 1:
        step.segments = segments


def prefill_allotment(remaining: int, budget: int, limits: SchedulerLimits) -> int:
    """R19: the prompt tokens one request may prefill in this step (0: none).

    Whole prefill is all or nothing; a chunk is the smallest of what is left of the prompt, the
    chunk cap and the step's remaining token budget.
    """
    if limits.max_chunk_tokens is None:  # whole prefill
        return remaining if remaining <= budget else 0
    return min(remaining, limits.max_chunk_tokens, budget)


class Worker:
    """A worker's queues and counters (R16); never a thread, a task or a server."""

    __slots__ = (
        "busy_us",
        "completed",
        "completion_sequence",
        "decode_tokens",
        "in_flight",
        "index",
        "itl_gaps",
        "kv_counters",
        "load_blocks",
        "output_tokens",
        "outstanding",
        "peak_running",
        "peak_waiting",
        "prefill_tokens",
        "routed",
        "running",
        "schedule_pending",
        "step_ends",
        "steps",
        "waiting",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.waiting: deque[RequestState] = deque()
        self.running: list[RequestState] = []
        self.in_flight: Step | None = None
        self.completion_sequence = -1
        """The event sequence number of the in-flight step's completion; others are stale."""
        self.schedule_pending = False
        self.routed = 0
        self.completed = 0
        self.steps = 0
        self.busy_us = 0
        self.peak_running = 0
        self.peak_waiting = 0
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self.output_tokens = 0
        self.step_ends: TokenTimes | None = TokenTimes()
        """When each of its steps ended, in order: the report writes its requests' token times
        as slices of these (``servesim.engine.step_ends``); ``None`` once it is clear that too few
        of
        its requests decode together for that to pay (``_keep_step_ends``)."""
        self.itl_gaps: Counter[int] = Counter()
        """R27's ITL samples of the tokens this worker produced, gap -> how many, counted as
        they are produced (``complete_step``): the report counts only completed requests'
        (``report.itl_gaps``)."""
        self.kv_counters: KvCacheCounters | None = None
        """R52: the cache's counters; ``None`` without a cache."""
        self.outstanding = 0
        """R54: the requests routed here that have not completed (a preempted one stays)."""
        self.load_blocks = 0
        """R54: those requests' prompts in blocks (``prompt_blocks``); 0 without a cache."""

    def prompt_blocks(self, state: RequestState) -> int:
        """R54: what a request adds to ``load_blocks``: its prompt in blocks; no blocks
        without a cache."""
        return 0

    def cached_blocks(self, state: RequestState) -> int:
        """R54: ``cached(w, r)`` for this worker w; no cache, nothing cached."""
        return 0

    def enqueue(self, state: RequestState) -> None:
        """R12: an accepted request joins the tail of the waiting queue."""
        state.worker = self.index
        self.waiting.append(state)
        self.routed += 1
        self.outstanding += 1  # R54: counted from its routing until it completes
        self.load_blocks += self.prompt_blocks(state)
        self.peak_waiting = max(self.peak_waiting, len(self.waiting))

    def has_work(self) -> bool:
        """Whether a step formed now would hold any request (R16)."""
        return bool(self.running or self.waiting)

    def run_keeps_router_view(self, step: Step) -> bool:
        """Whether nothing a state-aware router reads of this worker (R54) changes inside the
        run ``step`` just formed: the invariant that lets the event loop keep runs with such a
        router. The loop applies a run's later steps only when it ends, and another worker's
        arrival does not cut it short (``Step.truncate_at`` is for arrivals joining this
        worker), so a router may read this worker mid-run; it reads what step-by-step
        formation would show exactly when this holds.

        ``outstanding`` and ``load_blocks`` change only when a request is routed here (which
        cuts the run) and when one completes, and a run ends at its first completion. (With a
        cache the registry must not change either: ``CachingWorker`` adds that.)
        """
        return step.repeat == 1 or (
            not step.prefill and step.repeat <= _steps_to_first_completion(step)
        )

    def plan_step(
        self, limits: SchedulerLimits, now_us: int
    ) -> tuple[list[RequestState], list[tuple[RequestState, int]]]:
        """R17 to R19: the decode set and the prefill allotments of the step starting now.

        Admitted requests move from the waiting queue to the tail of the running list.
        """
        # R17: decode first, one token for every running request in the Decode phase.
        decode = [state for state in self.running if state.decoding]
        budget = limits.max_batched_tokens - len(decode)
        prefill: list[tuple[RequestState, int]] = []
        # R18: running requests still prefilling continue, in running order (with whole
        # prefill, or when every running request decodes, there are none to look for).
        prefilling = []
        if len(decode) < len(self.running):
            prefilling = [state for state in self.running if not state.decoding]
        for state in prefilling:
            tokens = prefill_allotment(
                state.request.prompt_tokens - state.prefilled, budget, limits
            )
            if tokens == 0:
                break
            prefill.append((state, tokens))
            budget -= tokens
        # R19: admission from the head of the waiting queue, in order, no skipping. (A running
        # prefill left without tokens above means the budget is spent, so none is admitted.)
        while self.waiting and budget > 0 and len(self.running) < limits.max_num_seqs:
            head = self.waiting[0]
            tokens = prefill_allotment(head.request.prompt_tokens, budget, limits)
            if tokens == 0:
                break
            self.waiting.popleft()
            self.running.append(head)
            head.first_scheduled_us = now_us
            prefill.append((head, tokens))
            budget -= tokens
        self.peak_running = max(self.peak_running, len(self.running))
        return decode, prefill

    def complete_step(self, step: Step) -> list[RequestState]:
        """R20, once per step of the run: apply it; the requests it completed, in running order.

        A decoding request got its last token when the worker's previous step ended, which is
        when this one started (R16: a worker with running requests schedules at once), so each
        of its tokens here follows the one before by the duration of its step: R27's ITL
        samples are counted per step, not per token (``itl_gaps``).
        """
        end = step.end_us
        decoding = len(step.decode)
        if step.repeat == 1:
            for state in step.decode:
                state.token_times_us.append(end)
            if decoding:  # most steps of a long prompt's chunked prefill decode nobody
                self.itl_gaps[step.duration_us] += decoding
        elif step.segments is not None:
            for state in step.decode:
                state.token_times_us.extend_progressions(step.segments)
            for _, duration, count in step.segments:
                self.itl_gaps[duration] += count * decoding
        else:
            first = step.start_us + step.duration_us
            for state in step.decode:
                state.token_times_us.extend_progression(first, step.duration_us, step.repeat)
            self.itl_gaps[step.duration_us] += step.repeat * decoding
        first_tokens = 0
        for state, tokens in step.prefill:
            state.prefill(tokens)
            if state.decoding:  # the step that finishes the prefill emits the first token
                if state.token_times_us:  # R49: readmitted, its next token follows its last
                    self.itl_gaps[end - state.token_times_us.last] += 1
                state.token_times_us.append(end)
                first_tokens += 1
        finished = [
            state
            for state in self.running
            if state.token_times_us.count == state.request.max_output_tokens
        ]
        if finished:
            for state in finished:
                state.terminal_us = end
                self.load_blocks -= self.prompt_blocks(state)
            self.running = [state for state in self.running if state.terminal_us is None]
            self.outstanding -= len(finished)
        self.steps += step.repeat
        self.busy_us += step.end_us - step.start_us
        self.prefill_tokens += step.prefill_tokens
        self.decode_tokens += step.repeat * len(step.decode)
        self.output_tokens += step.repeat * len(step.decode) + first_tokens
        self.completed += len(finished)
        if self.step_ends is not None:
            self._keep_step_ends(step)
        return finished

    def _keep_step_ends(self, step: Step) -> None:
        """Add the step's ends to ``step_ends``, every step's, for one may give first tokens
        only; or drop them for good after ``STEP_ENDS_TRIAL`` steps that gave too few tokens
        a step to be sliced (then the report writes each request's times itself)."""
        ends = self.step_ends
        assert ends is not None
        if self.steps >= STEP_ENDS_TRIAL and not slicing_pays(self.output_tokens, self.steps):
            self.step_ends = None
        elif step.repeat == 1:
            ends.append(step.end_us)
        elif step.segments is not None:
            ends.extend_progressions(step.segments)
        else:
            ends.extend_progression(step.start_us + step.duration_us, step.duration_us, step.repeat)

    def cut_step(self, step: Step, stop_us: int) -> None:
        """R62: ``step`` (a single step, ``Step.stop_at``) was in flight at the stop time. It was
        formed, so it counts as a step and every effect of forming it stands; it never ends, so
        it produces no token, completes and registers nothing, and its allotments and decodes
        are not counted. It kept the worker busy until the stop time."""
        assert step.repeat == 1, "Step.stop_at: only a run's first step can be cut"
        self.steps += 1
        self.busy_us += stop_us - step.start_us


class FirstBlocks:
    """For each identity of a block 0 (R47), the workers where such a block was registered at
    some time: a superset of those where it is registered now (an eviction does not remove a
    worker), shared by the fleet. A request's ``cached(w, r)`` (R54) is 0 at every other
    worker, so a cache-aware router need not walk the registry there
    (``routing.CacheAwareRouter``)."""

    __slots__ = ("_workers",)

    def __init__(self) -> None:
        self._workers: dict[Identity, set[int]] = {}

    def filled(self, identity: Identity, worker: int) -> None:
        """``worker`` filled a block 0 with ``identity`` (it registered it, or already had)."""
        self._workers.setdefault(identity, set()).add(worker)

    def workers(self, identity: Identity) -> frozenset[int] | set[int]:
        """The workers where a block 0 with ``identity`` may be registered now."""
        return self._workers.get(identity, _NO_WORKERS)


_NO_WORKERS: frozenset[int] = frozenset()


def allotment_with_cache(
    remaining: int, budget: int, limits: SchedulerLimits, recomputing: bool
) -> int:
    """R50: R19's allotment, except that in ``"whole"`` mode a request recomputing after a
    preemption is allotted ``min(remaining, budget)`` (its prompt plus produced tokens may
    exceed the budget that R10 checked its prompt against)."""
    if recomputing and limits.max_chunk_tokens is None:
        return min(remaining, budget)
    return prefill_allotment(remaining, budget, limits)


class CachingWorker(Worker):
    """A worker with a KV cache (SPEC.md section 11): R50 forms its steps, R51 ends them.

    A subclass, so that a worker without a cache runs exactly the code of sections 2 to 7.
    """

    __slots__ = (
        "cache",
        "first_blocks",
        "hash_block_tokens",
        "preempted",
        "prefixes",
        "refused_blocks",
        "registry_watched",
    )

    def __init__(
        self,
        index: int,
        kv_cache: KvCache,
        hash_block_tokens: int | None,
        prefixes: HashPrefixes,
        first_blocks: FirstBlocks | None = None,
        *,
        registry_watched: bool = False,
    ) -> None:
        super().__init__(index)
        self.first_blocks = FirstBlocks() if first_blocks is None else first_blocks
        """R54: the fleet's index of where each first block was registered (shared)."""
        self.kv_counters = KvCacheCounters()
        # R47: with prefix caching off (or no hashes at all) no block is identified
        self.hash_block_tokens = hash_block_tokens if kv_cache.prefix_caching else None
        per_hash = (hash_block_tokens or kv_cache.block_tokens) // kv_cache.block_tokens
        self.cache = BlockCache(kv_cache.blocks, kv_cache.block_tokens, self.kv_counters, per_hash)
        self.prefixes = prefixes
        self.preempted: list[RequestState] = []
        """R49: the victims of the step formed last, in the order they were preempted."""
        self.refused_blocks = 0
        """The blocks the head of the queue needed when the step formed last refused it for
        want of blocks (R50 step 3); 0 when admission stopped for another reason. Read by
        ``run_limit``."""
        self.registry_watched = registry_watched
        """Whether a state-aware router reads this worker's registry (R54, prefix caching on):
        then a decode run must not evict, for the router may read it mid-run
        (``run_keeps_router_view``)."""

    def identities(self, state: RequestState) -> BlockIdentities:
        """R47: the request's identified blocks, found once."""
        if state.identities is None:
            state.identities = NO_IDENTITIES
            if self.hash_block_tokens is not None and state.request.prefix_hashes:
                state.identities = block_identities(
                    state.request, self.cache.block_tokens, self.hash_block_tokens, self.prefixes
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

    def plan_step(
        self, limits: SchedulerLimits, now_us: int
    ) -> tuple[list[RequestState], list[tuple[RequestState, int]]]:
        """R50: R17 to R19, each request taking the blocks its step needs (R46), preempting
        when they are not there (R49); a step that preempted admits nobody."""
        self.preempted = []
        self.refused_blocks = 0
        served: set[RequestState] = set()  # R49: given a decode token or an allotment
        running = list(self.running)  # the running order before anyone is preempted
        # 1. R17: each Decode request needs the blocks for one more cached token. A request
        # preempted by an earlier one has lost its progress, so it is no longer decoding.
        decode = [state for state in running if state.decoding and self._grow(state, 1, served)]
        budget = limits.max_batched_tokens - len(decode)
        prefill: list[tuple[RequestState, int]] = []
        # 2. R18: each running Prefill request, in running order, while the budget lasts.
        for state in running:
            if budget == 0:
                break
            if state.decoding or state in self.preempted:
                continue
            tokens = allotment_with_cache(
                state.prefill_target - state.prefilled, budget, limits, state.preemptions > 0
            )
            if self._grow(state, tokens, served):
                prefill.append((state, tokens))
                budget -= tokens
        # 3. R19: admission, only in a step that preempted nobody (as vLLM v1).
        if not self.preempted:
            self._admit(limits, now_us, budget, prefill)
        self.peak_running = max(self.peak_running, len(self.running))
        return decode, prefill

    def _grow(self, state: RequestState, tokens: int, served: set[RequestState]) -> bool:
        """R46, R49: the request's cached tokens grow by ``tokens`` and it takes the blocks
        they need, preempting until it can (or until it is itself the victim: False)."""
        cache = self.cache
        needed = cache.blocks_for(state.cached_tokens + tokens) - state.blocks.count
        if needed:  # most decode steps stay inside the request's last block
            while needed > cache.obtainable():
                victim = self._victim(state, served)
                self._preempt(victim)
                if victim is state:
                    return False
            cache.take(state.blocks, needed)
        state.cached_tokens += tokens
        served.add(state)
        return True

    def _victim(self, requester: RequestState, served: set[RequestState]) -> RequestState:
        """R49: the running request latest in the running list not yet given anything in this
        step, other than the requester; the requester itself when none remains."""
        for state in reversed(self.running):
            if state is not requester and state not in served:
                return state
        return requester

    def _preempt(self, victim: RequestState) -> None:
        """R49's four actions, in order."""
        self.running.remove(victim)  # 1.
        self.cache.release(victim.blocks)
        victim.cached_tokens = 0  # 2. its produced tokens, their times, first_scheduled stay
        victim.prefilled = 0
        victim.decoding = False
        # 3. At the head of the queue, in front of the victim before it (as vLLM prepends each):
        # one step's victims wait in the reverse of the order they were preempted.
        self.waiting.appendleft(victim)
        self.peak_waiting = max(self.peak_waiting, len(self.waiting))
        victim.preemptions += 1  # 4.
        assert self.kv_counters is not None
        self.kv_counters.preemptions += 1
        self.preempted.append(victim)

    def _admit(
        self,
        limits: SchedulerLimits,
        now_us: int,
        budget: int,
        prefill: list[tuple[RequestState, int]],
    ) -> None:
        """R50 step 3 (R19 with R48): the head of the queue, while it can have its allotment
        and the blocks for it; no skipping, no preemption for a waiting request."""
        cache = self.cache
        block_tokens = cache.block_tokens
        assert self.kv_counters is not None
        while self.waiting and budget > 0 and len(self.running) < limits.max_num_seqs:
            head = self.waiting[0]
            target = head.request.prompt_tokens + len(head.token_times_us)  # R48's L
            identities = self.identities(head)
            hit, cached_hits = cache.hit(identities, (target - 1) // block_tokens)
            reused = hit * block_tokens
            tokens = allotment_with_cache(target - reused, budget, limits, head.preemptions > 0)
            needed = cache.blocks_for(reused + tokens) - hit
            evictable = cache.cached_count - cached_hits
            if tokens == 0 or needed > cache.free + evictable:
                self.refused_blocks = needed if tokens else 0
                break
            self.waiting.popleft()
            head.blocks.identities = identities
            cache.hold(head.blocks, hit)  # first, so that no eviction takes a hit block
            cache.take(head.blocks, needed)
            head.prefill_target = target
            head.prefilled = reused
            head.cached_tokens = reused + tokens
            if head.first_scheduled_us is None:  # R49: a readmission keeps the first one
                head.first_scheduled_us = now_us
                head.reused_prompt_tokens = reused
            self.kv_counters.reused_tokens += reused
            self.running.append(head)
            prefill.append((head, tokens))
            budget -= tokens

    def record_cache(self, step: Step) -> None:
        """R52: the step's blocks in use once formed, and its victims."""
        assert self.kv_counters is not None
        step.kv_blocks_in_use = self.cache.held
        if self.preempted:
            step.preempted = [state.request.id for state in self.preempted]
        self.kv_counters.peak_blocks_in_use = max(
            self.kv_counters.peak_blocks_in_use, step.kv_blocks_in_use
        )

    def run_keeps_router_view(self, step: Step) -> bool:
        """``Worker.run_keeps_router_view``, and the registry, which ``cached(w, r)`` reads
        (R54), is the same at every step boundary of the run. It changes only by registration
        and eviction. A run registers nothing: registration happens at the end of a step with
        prefill (R47, R51), and a run has none (output tokens are never identified). A run
        evicts nothing as long as the blocks its later steps take are free ones, which
        ``run_limit`` ensures; if runs ever evict, a state-aware router would see a stale
        registry, and this check fails.
        """
        if not super().run_keeps_router_view(step):
            return False
        cache = self.cache
        taken = sum(  # the blocks the run's later steps take, as complete_step takes them
            cache.blocks_for(state.cached_tokens + step.repeat - 1) - state.blocks.count
            for state in step.decode
        )
        return taken <= cache.free

    def run_limit(self, step: Step, traced: bool) -> int:
        """How many decode-only steps from ``step`` on form exactly as one at a time would.

        The first step took its blocks when formed. Each later step of the run gives every
        decoding request one more cached token, so a request crossing into a new block takes
        one, a free one or else by evicting a cached one (R49). While the blocks the later
        steps take are at most ``free + cached`` at the start, nobody is preempted (nothing is
        released in the run, so what a request can get only shrinks by what is taken), the
        registry only loses evicted blocks (output tokens are never identified, R47), and the
        evictions are the same taken one step at a time as all at once (the least recently
        released first). Admission, blocked in the first step, stays blocked
        (``_eviction_keeps_admission_blocked``); where that is not certain the run takes only
        free blocks, which evict nothing. A traced run writes one ``kv_blocks_in_use`` for all
        its steps (R30), so there it takes none.
        """
        if step.prefill or self.preempted or not step.decode:
            return 1
        cache = self.cache
        spare = 0
        if not traced:
            spare = cache.free
            if not self.registry_watched and self._eviction_keeps_admission_blocked():
                spare += cache.cached_count
        cached = [state.cached_tokens for state in step.decode]
        blocks_for = cache.blocks_for
        block_tokens = cache.block_tokens
        # the steps before any request's cached tokens outgrow its blocks: none is taken
        headroom = min(-tokens % block_tokens for tokens in cached) + 1
        high = _steps_to_first_completion(step)
        if spare == 0 or headroom >= high:
            return min(headroom, high)

        def taken(steps: int) -> int:  # the blocks steps 2 to ``steps`` take
            return sum(blocks_for(c + steps - 1) - blocks_for(c) for c in cached)

        if taken(high) <= spare:  # the common case: the blocks last until a request completes
            return high
        low = headroom  # taken(low) == 0 <= spare
        while low < high:
            middle = (low + high + 1) // 2
            if taken(middle) <= spare:
                low = middle
            else:
                high = middle - 1
        return low

    def _eviction_keeps_admission_blocked(self) -> bool:
        """Whether no eviction in a decode-only run can let the head of the queue in.

        Admission stopped in the run's first step (R50 step 3). If it stopped for no queue,
        no budget, ``max_num_seqs`` or an allotment of 0, eviction changes none of these (an
        evicted hit block only leaves the head more to compute). If it stopped for want of
        blocks, the head needed n > free + cached blocks less its own cached hit blocks. An
        eviction can shorten its hit, and then those of its hit blocks past the new end count
        as evictable for it; but a shorter hit never needs fewer new blocks (its allotment only
        grows), and free + cached only shrinks in the run. So it stays out for certain when
        n > free + cached already.
        """
        refused = self.refused_blocks
        return refused == 0 or refused > self.cache.free + self.cache.cached_count

    def complete_step(self, step: Step) -> list[RequestState]:
        """R51: R20, then the step's registrations (R47), then the completed requests'
        releases (R46), each in running order."""
        cache = self.cache
        assert self.kv_counters is not None
        if step.repeat > 1:  # the later steps of a run take their blocks (run_limit)
            for state in step.decode:
                cached = state.cached_tokens + step.repeat - 1
                needed = cache.blocks_for(cached) - state.blocks.count
                assert needed <= cache.obtainable(), "run_limit: a run preempts nobody"
                cache.take(state.blocks, needed)
                state.cached_tokens = cached
            self.kv_counters.peak_blocks_in_use = max(
                self.kv_counters.peak_blocks_in_use, cache.held
            )
        finished = super().complete_step(step)
        for state, tokens in step.prefill:  # in running order: R18's, then R19's
            if state.identities:
                cached = state.cached_tokens
                cache.register(state.blocks, cached - tokens, cached)
                if cached - tokens < cache.block_tokens <= cached:  # it filled its block 0
                    self.first_blocks.filled(state.identities[0], self.index)
        for state in finished:
            cache.release(state.blocks)
        return finished
