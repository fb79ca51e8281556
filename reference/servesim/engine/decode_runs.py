"""Runs of decode steps: one event for many identical steps, with the results of one at a time.

Not a rule of the spec but a shortcut that keeps its results (R21: the same report bytes). A
decode-only step formed by vLLM formation (``servesim.engine.formation.vllm``) that preempted
nobody is formed again, the same, at its end, for as long as all of these hold; a run is exact,
step for step, exactly while they do:

1. No request joins the worker. Its step had no prefill, so admission was blocked (an empty
   queue, ``max_num_seqs``, or a head whose allotment or blocks do not fit) and stays blocked
   until something changes; a request routed to the worker cuts the run at the next step
   boundary (``Step.truncate_at``), from where the steps are formed one by one again.
2. No request completes: the run ends with the first decoding request's last token
   (``steps_to_first_completion``); then the running list changes.
3. Every step is representable (R6) and covered by the timing model (R43); a run stops before
   the first that is not, which is then formed at its own time, in event order.
4. With a KV cache, the blocks the run's later steps take (a decoding request crossing into a
   new block, R46) can be had without preempting anybody, and taking them does not change
   formation: ``block_run_limit`` (taking free blocks, or evicting cached ones only where
   eviction cannot let the head of the queue in, and none when traced: R30 writes one
   ``kv_blocks_in_use`` for the run).
5. No stop time falls inside it (R62): ``Step.stop_at`` cuts it there.
6. The style's formation (R88) forms the later steps alike: ``Formation.run_limit``. vLLM's
   and TensorRT-LLM's do (a trtllm head refused by its reservation stays refused while nothing
   completes); SGLang's decays its ratio every decode step, so only while no candidate for
   admission exists, untraced.
7. No decode step but the last fills an identified block (R127, a continuing turn's generated
   tokens' blocks): ``fill_run_limit``; the run's registrations (and, R131, its stores) are
   then those of its last step, made when it ends.
8. With a host pool (R129): no load or store completes inside it (the event loop cuts it at
   its next step end: a loaded request joins the next step, R135, and a completed store may
   let the head of the queue load, R133, when the queue is not empty), and it evicts no GPU
   block while the queue is not empty (an eviction may shorten the head's GPU hit and so
   lengthen its host run).

A state-aware router may read the worker in the middle of a run (another worker's arrival does
not cut it); ``keeps_router_view`` checks that nothing it reads (R54) changes inside the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.contract.model import MeasuredTiming, StepShape, SyntheticLinearTiming, TimingModel
from servesim.engine.block_memory import BlockMemory
from servesim.engine.step import Step
from servesim.engine.token_times import Segment

if TYPE_CHECKING:
    from servesim.engine.memory import Memory
    from servesim.engine.worker import Worker

#: The most stretches of equal durations one measured run forms ahead: an arrival may cut it
#: short (then the rest was formed for nothing), and the next run picks up where it ended.
#: Forming a run costs one model evaluation per stretch, however many steps each holds.
MEASURED_RUN_STRETCHES = 64


def plan_run(step: Step, worker: Worker, model: TimingModel, max_end_us: int, traced: bool) -> None:
    """Make ``step``, just formed and timed at ``worker``, the run of the decode-only steps that
    would follow it with ``model``: at most to ``max_end_us`` (R6), with a KV cache at most
    ``block_run_limit`` steps; a step with prefill, or with nobody decoding, stays one step."""
    if step.prefill or not step.decode:
        return
    max_steps = worker.formation.run_limit(worker, step, traced)  # R88: the style's own
    if max_steps == 1:
        return
    memory = worker.memory
    if isinstance(memory, BlockMemory):
        preempted = bool(worker.preempted)
        refused = worker.refused_blocks
        if memory.host is not None and worker.waiting:
            # R133: an eviction may shorten the head's GPU hit and lengthen its host run, which
            # can start a load where its blocks did not fit: no eviction in the run
            refused = -1
        limit = block_run_limit(memory, step, preempted, refused, traced)
        if memory.ordered:  # R127: a decode step may fill an identified block
            limit = min(limit, fill_run_limit(memory, step))
        max_steps = limit if max_steps is None else min(max_steps, limit)
    if isinstance(model, SyntheticLinearTiming):
        step.repeat = decode_run_length(step, max_end_us, max_steps)
    else:
        measured_decode_run(step, model, max_end_us, max_steps)


def steps_to_first_completion(step: Step) -> int:
    """How many decode steps pass before the first of ``step``'s decoding requests completes."""
    return min(
        [state.request.max_output_tokens - state.token_times_us.count for state in step.decode]
    )


def decode_run_length(step: Step, max_end_us: int, max_steps: int | None = None) -> int:
    """How many identical copies of a decode-only step the worker runs back to back, with a
    synthetic model (every copy lasts ``duration_us``): conditions 2, 3 and 4."""
    if step.prefill or not step.decode:
        return 1
    first_finish = steps_to_first_completion(step)
    if max_steps is not None:
        first_finish = min(first_finish, max_steps)
    representable = (max_end_us - step.start_us) // step.duration_us  # R6: stop at the limit
    return max(1, min(first_finish, representable))


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
    remaining = steps_to_first_completion(step)
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


def block_run_limit(
    memory: BlockMemory, step: Step, preempted: bool, refused_blocks: int, traced: bool
) -> int:
    """Condition 4: how many decode-only steps from ``step`` on form exactly as one at a time
    would, with a KV cache.

    The first step took its blocks when formed. Each later step of the run gives every
    decoding request one more cached token, so a request crossing into a new block takes
    one, a free one or else by evicting a cached one (R49). While the blocks the later
    steps take are at most ``free + cached`` at the start, nobody is preempted (nothing is
    released in the run, so what a request can get only shrinks by what is taken), the
    registry only loses evicted blocks (output tokens are never identified, R47), and the
    evictions are the same taken one step at a time as all at once (the least recently
    released first). Admission, blocked in the first step, stays blocked
    (``eviction_keeps_admission_blocked``); where that is not certain the run takes only
    free blocks, which evict nothing. A traced run writes one ``kv_blocks_in_use`` for all
    its steps (R30), so there it takes none. ``preempted``: whether forming ``step``
    preempted anybody; ``refused_blocks``: what the head of the queue needed when admission
    refused it for want of blocks (0 when it stopped for another reason).
    """
    if step.prefill or preempted or not step.decode:
        return 1
    cache = memory.cache
    spare = 0
    if not traced:
        spare = cache.free
        if not memory.registry_watched and eviction_keeps_admission_blocked(memory, refused_blocks):
            spare += cache.cached_count
    cached = [state.cached_tokens for state in step.decode]
    blocks_for = cache.blocks_for
    block_tokens = cache.block_tokens
    # the steps before any request's cached tokens outgrow its blocks: none is taken
    headroom = min(-tokens % block_tokens for tokens in cached) + 1
    high = steps_to_first_completion(step)
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


def fill_run_limit(memory: BlockMemory, step: Step) -> int:
    """R127: a run ends with the first of its steps in which a decoding request fills an
    identified block (a generated tokens' block), so that its registration, made when the run
    ends (``BlockMemory.step_ended``), is made at the end of the step that filled it, in
    running order with the step's other requests' (R51); later steps may read it.

    After ``step`` is formed a decoding request has c cached tokens; the run's s-th step gives
    it ``c + s - 1``, and fills its block ``(c + s - 1) / B - 1`` when that is a whole number.
    """
    block_tokens = memory.cache.block_tokens
    limit = steps_to_first_completion(step)
    for state in step.decode:
        cached = state.cached_tokens
        to_boundary = -cached % block_tokens  # steps after the first until a block is filled
        if cached + to_boundary <= state.blocks.identities.size * block_tokens:
            limit = min(limit, to_boundary + 1)
    return limit


def eviction_keeps_admission_blocked(memory: BlockMemory, refused_blocks: int) -> bool:
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
    if refused_blocks < 0:  # R133: a host tier's head, which eviction may let load
        return False
    cache = memory.cache
    return refused_blocks == 0 or refused_blocks > cache.free + cache.cached_count


def keeps_router_view(step: Step, memory: Memory) -> bool:
    """Whether nothing a state-aware router reads of the worker (R54) changes inside the run
    ``step`` just formed: the invariant that lets the event loop keep runs with such a
    router. The loop applies a run's later steps only when it ends, and another worker's
    arrival does not cut it short (``Step.truncate_at`` is for arrivals joining this
    worker), so a router may read this worker mid-run; it reads what step-by-step
    formation would show exactly when this holds.

    ``outstanding`` and ``load_blocks`` change only when a request is routed here (which
    cuts the run) and when one completes, and a run ends at its first completion. With a
    cache (a ``BlockMemory``) the registry, which ``cached(w, r)`` reads, must not change either.
    It changes only by registration and eviction. A run registers nothing before it ends:
    registration happens at the end of a step with prefill (R47, R51), which a run has not,
    or (R127) at the end of a decode step filling a generated tokens' block, which ends its
    run (``fill_run_limit``). A run evicts nothing as long as the blocks its later steps take
    are free ones, which ``block_run_limit`` ensures when the registry is watched; if runs
    ever evict, a state-aware router would see a stale registry, and this check fails.
    """
    if step.repeat == 1:
        return True
    if step.prefill or step.repeat > steps_to_first_completion(step):
        return False
    if not isinstance(memory, BlockMemory):
        return True
    cache = memory.cache
    taken = sum(  # the blocks the run's later steps take, as the worker takes them at its end
        cache.blocks_for(state.cached_tokens + step.repeat - 1) - state.blocks.count
        for state in step.decode
    )
    return taken <= cache.free
