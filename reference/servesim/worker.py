"""One worker's continuous-batching scheduler: how a step is formed and what it does.

SPEC.md section 5. A worker is data: the event loop in ``servesim.simulation`` calls
``plan_step`` when the worker schedules and ``complete_step`` when its step ends.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from servesim.model import Request, SchedulerLimits, StepShape
from servesim.token_times import TokenTimes


@dataclass(slots=True, eq=False)
class RequestState:
    """Everything the simulation learns about one request, accepted or rejected."""

    request: Request
    position: int
    """The request's index in the workload document."""
    worker: int | None = None
    reject_reason: str | None = None
    prefilled: int = 0
    """Prompt tokens prefilled so far (R20)."""
    first_scheduled_us: int | None = None
    token_times_us: TokenTimes = field(default_factory=TokenTimes)
    """When each output token was produced; its length is the number generated so far."""
    terminal_us: int | None = None

    @property
    def decoding(self) -> bool:
        """Whether the request is in the Decode phase: its whole prompt is prefilled (R9)."""
        return self.prefilled == self.request.prompt_tokens


@dataclass(slots=True, eq=False)
class Step:
    """One step of one worker, or a run of identical decode-only steps (R16 to R20).

    ``repeat`` is how many identical steps of ``duration_us`` the object stands for, back to
    back from ``start_us`` (see ``decode_run_length``). It is 1 for every step with prefill.
    """

    worker: int
    start_us: int
    duration_us: int
    decode: list[RequestState]
    prefill: list[tuple[RequestState, int]]
    repeat: int = 1
    context_tokens: int = 0
    """R22's C at the first step's start, fixed when the step is formed (``context_tokens``)."""

    @property
    def end_us(self) -> int:
        """When the last of the ``repeat`` steps ends."""
        return self.start_us + self.repeat * self.duration_us

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
        completed_by_now = -(-(now_us - self.start_us) // self.duration_us)
        if completed_by_now >= self.repeat:
            return False
        self.repeat = completed_by_now
        return True


def context_tokens(decode: list[RequestState]) -> int:
    """R22's C: the decoding requests' prompt plus generated tokens, now."""
    return sum(state.request.prompt_tokens + len(state.token_times_us) for state in decode)


def decode_run_length(step: Step, max_end_us: int) -> int:
    """How many identical copies of a decode-only step the worker runs back to back.

    Not a rule of the spec but a shortcut that keeps its results: while no request completes
    and none joins the worker, R17 to R19 form the same decode-only step again and again (no
    prefill means admission is blocked, by max_num_seqs or a whole prompt that does not fit,
    and stays blocked until a request leaves). So the run lasts until the first decoding
    request's last token; a request joining the worker cuts it short (``Step.truncate_at``).
    """
    if step.prefill or not step.decode:
        return 1
    first_finish = min(
        state.request.max_output_tokens - len(state.token_times_us) for state in step.decode
    )
    representable = (max_end_us - step.start_us) // step.duration_us  # R6: stop at the limit
    return max(1, min(first_finish, representable))


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
        "output_tokens",
        "peak_running",
        "peak_waiting",
        "prefill_tokens",
        "routed",
        "running",
        "schedule_pending",
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

    def enqueue(self, state: RequestState) -> None:
        """R12: an accepted request joins the tail of the waiting queue."""
        state.worker = self.index
        self.waiting.append(state)
        self.routed += 1
        self.peak_waiting = max(self.peak_waiting, len(self.waiting))

    def has_work(self) -> bool:
        """Whether a step formed now would hold any request (R16)."""
        return bool(self.running or self.waiting)

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
        # R18: running requests still prefilling continue, in running order.
        for state in self.running:
            if state.decoding:
                continue
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
        """R20, once per step of the run: apply it; the requests it completed, in running order."""
        end = step.end_us
        if step.repeat == 1:
            for state in step.decode:
                state.token_times_us.append(end)
        else:
            first = step.start_us + step.duration_us
            for state in step.decode:
                state.token_times_us.extend_progression(first, step.duration_us, step.repeat)
        first_tokens = 0
        for state, tokens in step.prefill:
            state.prefilled += tokens
            if state.decoding:  # the step that finishes the prefill emits the first token
                state.token_times_us.append(end)
                first_tokens += 1
        finished = [
            state
            for state in self.running
            if len(state.token_times_us) == state.request.max_output_tokens
        ]
        if finished:
            self.running = [
                state
                for state in self.running
                if len(state.token_times_us) < state.request.max_output_tokens
            ]
            for state in finished:
                state.terminal_us = end
        self.steps += step.repeat
        self.busy_us += step.repeat * step.duration_us
        self.prefill_tokens += step.prefill_tokens
        self.decode_tokens += step.repeat * len(step.decode)
        self.output_tokens += step.repeat * len(step.decode) + first_tokens
        self.completed += len(finished)
        return finished
