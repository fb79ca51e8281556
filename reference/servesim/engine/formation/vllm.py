"""vLLM's step formation (SPEC.md R17 to R19; with a KV cache R48 to R50).

Decode first, then the running prefills, then admission from the head of the queue, no
skipping; with a cache each request takes the blocks its step needs (R46), and when they are
not there the latest-admitted request not yet served is preempted (R49); a step that preempted
admits nobody (as vLLM v1). Without a cache (``memory.unlimited``) R50's additions change
nothing, and they are skipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.contract.model import SchedulerLimits
from servesim.engine.formation.batch import Batch
from servesim.engine.requests import RequestState

if TYPE_CHECKING:
    from servesim.engine.step import Step
    from servesim.engine.worker import Worker


def allotment(remaining: int, budget: int, limits: SchedulerLimits, recomputing: bool) -> int:
    """R19, R50: the tokens one request may prefill (or recompute) in this step (0: none).

    Whole prefill is all or nothing, except that with a cache a request recomputing after a
    preemption is allotted ``min(remaining, budget)`` (its prompt plus produced tokens may
    exceed the budget that R10 checked its prompt against); a chunk is the smallest of what is
    left, the chunk cap and the step's remaining token budget.
    """
    chunk = limits.max_chunk_tokens
    if chunk is None:  # whole prefill
        if recomputing:
            return min(remaining, budget)
        return remaining if remaining <= budget else 0
    return min(remaining, chunk, budget)


class VllmFormation:
    """R17 to R19, with R50's additions: ``formation.Formation`` for vLLM."""

    __slots__ = ("limits",)

    style = "vllm"
    decodes_every_step = True

    def __init__(self, limits: SchedulerLimits) -> None:
        self.limits = limits

    def initial_ratio(self) -> int | None:
        """No new-token ratio (R89 is sglang's)."""
        return None

    def run_limit(self, worker: Worker, step: Step, traced: bool) -> int | None:
        """No limit of the style's own on a decode run (``decode_runs``' conditions hold)."""
        return None

    def step_ended(self, worker: Worker, step: Step) -> None:
        """Nothing of the style's own changes at a step end."""

    def form(self, worker: Worker, now_us: int) -> Batch:
        """R50's three parts in order: decode, running prefills, admission; before them, with a
        host pool, the loaded requests join the running list (R135)."""
        served: set[RequestState] = set()  # R49: given a decode token or an allotment
        if worker.loaded:
            _join_loaded(worker, now_us)
        running = worker.running
        if worker.memory.unlimited:  # R17: every Decode request, in running order
            decode = [state for state in running if state.decoding]
        else:  # R50 1.: each needs the blocks for one more cached token
            running = list(running)  # the running order before anyone is preempted
            grow = worker.memory.grow
            decode = []
            for state in running:  # one preempted by a request before it no longer decodes
                if state.decoding and (grow(state, 1) or self._make_room(worker, state, 1, served)):
                    served.add(state)
                    decode.append(state)
        budget = self.limits.max_batched_tokens - len(decode)
        prefill: list[tuple[RequestState, int]] = []
        # R18: with whole prefill, or when every running request decodes, there are none
        if len(decode) < len(running):
            budget = self._running_prefills(worker, running, budget, prefill, served)
        if worker.waiting and not worker.preempted:  # R50 3.: only if nobody was preempted
            self._admit(worker, now_us, budget, prefill)
        return decode, prefill

    def _running_prefills(
        self,
        worker: Worker,
        running: list[RequestState],
        budget: int,
        prefill: list[tuple[RequestState, int]],
        served: set[RequestState],
    ) -> int:
        """R18, R50 2.: each running Prefill request, in running order (``running``, as the
        step began), while the budget lasts, unless it was preempted; the budget left."""
        limits = self.limits
        unlimited = worker.memory.unlimited
        grow = worker.memory.grow
        preempted = worker.preempted
        # Those in Decode now were all served in part 1 (one not served was preempted, and
        # lost its progress), so none of them can be a victim here: which requests prefill
        # is known before the first allotment.
        for state in [state for state in running if not state.decoding]:
            if budget == 0:
                break
            if state in preempted:  # by a request before it in part 1, or here
                continue
            tokens = allotment(
                state.prefill_target - state.prefilled, budget, limits, state.recomputing
            )
            if unlimited or grow(state, tokens) or self._make_room(worker, state, tokens, served):
                served.add(state)
                prefill.append((state, tokens))
                budget -= tokens
        return budget

    def _admit(
        self, worker: Worker, now_us: int, budget: int, prefill: list[tuple[RequestState, int]]
    ) -> None:
        """R19, R50 3.: the head of the queue, while it can have its allotment and the blocks
        for it (beyond its reuse, R48); no skipping, no preemption for a waiting request."""
        limits = self.limits
        memory = worker.memory
        waiting, running = worker.waiting, worker.running
        # R102: a decode scheduler's Transferring and Ready requests hold seats; a request at
        # the head of its reservation queue stops every admission
        if worker.pending:
            return
        seats = limits.max_num_seqs - len(worker.incoming)
        loading = worker.loading  # R134: loading requests hold seats too
        host = memory.host
        while waiting and budget > 0 and len(running) + len(loading) < seats:
            head = waiting[0]
            # R48's L (R105: a decode side's hidden token is a produced one)
            target = head.request.prompt_tokens + head.token_times_us.count + head.hidden
            reused = memory.reusable(head, target)
            if host is not None:  # R133: a host run m > 0 starts a load instead (R134)
                run = memory.host_run(head)
                if run:
                    if not memory.start_load(head, run, now_us):
                        break  # R134: the head waits; no skipping, no preemption
                    waiting.popleft()
                    head.prefill_target = target
                    loading.append(head)
                    continue
            tokens = allotment(target - reused, budget, limits, head.recomputing)
            if tokens == 0:
                break
            if not self._fits(worker, head, reused + tokens):
                break
            waiting.popleft()
            memory.admit(head, reused + tokens)
            head.prefill_target = target
            head.prefilled = reused
            if head.first_scheduled_us is None:  # R49: a readmission keeps the first one
                head.first_scheduled_us = now_us
                head.reused_prompt_tokens = reused
            running.append(head)
            prefill.append((head, tokens))
            budget -= tokens

    def _fits(self, worker: Worker, head: RequestState, cached: int) -> bool:
        """R50 step 3: the offered head can have the blocks for ``cached`` cached tokens (its
        reuse and its allotment); if not, what it needed is kept for ``decode_runs``."""
        refused = worker.memory.refusal(head, cached)
        if refused:
            worker.refused_blocks = refused
        return not refused

    def _make_room(
        self, worker: Worker, state: RequestState, tokens: int, served: set[RequestState]
    ) -> bool:
        """R49: the blocks for ``tokens`` more cached tokens of ``state`` are not there:
        preempt until it can have them (then it takes them), or until it is itself the
        victim (False)."""
        memory = worker.memory
        while True:
            victim = _victim(worker.running, state, served)
            worker.preempt(victim)
            if victim is state:
                return False
            if memory.grow(state, tokens):
                return True


def _join_loaded(worker: Worker, now_us: int) -> None:
    """R135: before R50 step 1, each loaded request, in the order of its load's completion,
    leaves the loading list and joins the tail of the running list in Prefill."""
    memory = worker.memory
    for state in worker.loaded:
        memory.join(state, now_us)
        worker.running.append(state)
    worker.loaded = []


def _victim(
    running: list[RequestState], requester: RequestState, served: set[RequestState]
) -> RequestState:
    """R49: the running request latest in the running list not yet given anything in this
    step, other than the requester; the requester itself when none remains."""
    for state in reversed(running):
        if state is not requester and state not in served:
            return state
    return requester
