"""One worker: its queues, its step in flight and its counters (SPEC.md R16, R20, R29, R49,
R51, R54, R62).

A worker is data. The event loop (``servesim.engine.loop``) calls ``form_step`` at its
scheduling event and ``complete_step`` when its step ends. How a step is formed is its
formation policy's (``servesim.engine.formation``); its KV blocks are its memory's
(``servesim.engine.memory``): the worker applies what a step did (R20) and keeps the counts.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import TYPE_CHECKING

from servesim.engine.kv.counters import KvCacheCounters
from servesim.engine.memory import Memory
from servesim.engine.requests import RequestState
from servesim.engine.step import Step
from servesim.engine.step_ends import slicing_pays
from servesim.engine.token_times import TokenTimes

if TYPE_CHECKING:
    from servesim.contract.model import TimingProfile
    from servesim.engine.formation import Formation
    from servesim.engine.passes import RankGroup

#: The steps a worker keeps its step ends for before it decides whether slicing them pays
#: (``Worker._keep_step_ends``): enough for a busy worker's batch to fill.
STEP_ENDS_TRIAL = 1024


class Worker:
    """A worker's queues and counters (R16); never a thread, a task or a server."""

    __slots__ = (
        "activated",
        "busy_us",
        "completed",
        "completion_sequence",
        "decode_tokens",
        "formation",
        "group",
        "handed",
        "handed_off",
        "in_flight",
        "incoming",
        "index",
        "itl_gaps",
        "kv_counters",
        "load_blocks",
        "loaded",
        "loading",
        "memory",
        "output_tokens",
        "outstanding",
        "peak_running",
        "peak_waiting",
        "pending",
        "preempted",
        "prefill_tokens",
        "rank",
        "ratio",
        "refused_blocks",
        "retracted",
        "role",
        "routed",
        "running",
        "schedule_pending",
        "scheduler",
        "side_index",
        "step_ends",
        "steps",
        "timing",
        "waiting",
    )

    def __init__(
        self,
        index: int,
        memory: Memory,
        formation: Formation,
        timing: TimingProfile | None = None,
        *,
        rank: int = 0,
        scheduler: int | None = None,
        group: RankGroup | None = None,
        role: str | None = None,
    ) -> None:
        self.index = index
        """Its worker's global index (R78)."""
        self.rank = rank
        """R78: which rank of its worker it is; a worker of one rank is its rank 0."""
        self.scheduler = index if scheduler is None else scheduler
        """R82: its place among every (worker, rank), in order of worker then rank."""
        self.group = group
        """R83: the worker of several ranks it is a rank of; ``None`` for a one-rank worker."""
        self.timing = timing
        """R84: its pool's timing profile."""
        self.memory = memory
        """Its KV memory: unlimited without a cache (R45), else its blocks."""
        self.formation = formation
        """How it forms its steps (R17 to R19, R50)."""
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
        as slices of these (``servesim.engine.step_ends``); ``None`` once it is clear that too
        few of its requests decode together for that to pay (``_keep_step_ends``)."""
        self.itl_gaps: Counter[int] = Counter()
        """R27's ITL samples of the tokens this worker produced, gap -> how many, counted as
        they are produced (``complete_step``): the report counts only completed requests'
        (``report.itl_gaps``)."""
        self.kv_counters: KvCacheCounters | None = memory.counters
        """R52: the cache's counters; ``None`` without a cache."""
        if self.kv_counters is not None and formation.style == "trtllm":
            self.kv_counters.peak_reserved_blocks = 0  # R95: a figure of this style only
        self.preempted: list[RequestState] = []
        """R49: the victims of the step formed last, in the order they were preempted."""
        self.retracted: list[RequestState] = []
        """R91: the sglang style's victims of the step formed last, in the order retracted."""
        self.ratio: int | None = formation.initial_ratio()
        """R89: the sglang style's new-token ratio numerator; ``None`` with the other styles."""
        self.refused_blocks = 0
        """The blocks the head of the queue needed when the step formed last refused it for
        want of blocks (R50 step 3); 0 when admission stopped for another reason. Read by
        ``decode_runs.block_run_limit``."""
        self.outstanding = 0
        """R54: the requests routed here that have not completed (a preempted one stays)."""
        self.load_blocks = 0
        """R54: those requests' prompts in blocks (``prompt_blocks``); 0 without a cache."""
        self.role = role
        """R97: ``"prefill"`` or ``"decode"`` in a disaggregated fleet, else ``None``."""
        self.side_index = self.scheduler
        """R99: its place among the schedulers of its side (its router's index for it, when
        the router chooses schedulers); in an aggregated fleet, ``scheduler``."""
        self.handed: list[RequestState] = []
        """R100: the requests its step ended last made Held, in running order."""
        self.pending: deque[RequestState] = deque()
        """R102: a decode scheduler's reservation queue."""
        self.incoming: list[RequestState] = []
        """R102: a decode scheduler's Transferring and Ready requests, which hold seats."""
        self.handed_off = 0
        """R107: the requests whose prefill ended here."""
        self.activated = 0
        """R107: the requests activated here."""
        self.loading: list[RequestState] = []
        """R134: its requests whose load from its host pool is in flight, in the order their
        loads started (the loading list, less its loaded requests)."""
        self.loaded: list[RequestState] = []
        """R134, R135: its requests whose load completed, in the order of the completions;
        they join the running list when its next step is formed."""

    def enqueue(self, state: RequestState) -> None:
        """R12: an accepted request joins the tail of the waiting queue."""
        state.worker = self.index
        state.rank = self.rank
        self.waiting.append(state)
        self.routed += 1
        self.outstanding += 1  # R54: counted from its routing until it completes
        self.load_blocks += self.memory.prompt_blocks(state)
        self.peak_waiting = max(self.peak_waiting, len(self.waiting))
        if self.group is not None:  # R85: the worker's peak is over its ranks' queues together
            self.group.joined()
        if self.memory.host is not None and state.load_wait_us is None:  # R140
            state.load_wait_us = 0

    @property
    def has_work(self) -> bool:
        """R16, R135: a request running or waiting, or a loaded one (a loading one is not)."""
        return bool(self.running or self.waiting or self.loaded)

    @property
    def style(self) -> str:
        """R88: the style of its pool's limits, which forms its steps."""
        return self.formation.style

    def form_step(self, now_us: int) -> Step | None:
        """R16: the step starting now, as its formation policy forms it (R17 to R19, R50;
        R90, R93 for the other styles), with what its memory says of it (R52); untimed
        (``duration_us`` 0) and of one step. ``None`` when it has no token (R101: only in a
        disaggregated fleet), which is not started."""
        if self.preempted:
            self.preempted = []
        if self.retracted:
            self.retracted = []
        self.refused_blocks = 0
        ratio = self.ratio  # R89: the value admission uses, before the step changes it
        decode, prefill = self.formation.form(self, now_us)
        if not (decode or prefill):  # R101: held blocks or reservations left no token
            # R138: with a host pool, blocks held by loading requests
            assert self.role is not None or self.memory.host is not None, (
                "R16: a worker with work always forms a non-empty step"
            )
            return None
        self.peak_running = max(self.peak_running, len(self.running))
        step = Step(self.index, now_us, 0, decode, prefill, rank=self.rank, new_token_ratio=ratio)
        if self.retracted:
            step.retracted = [state.request.id for state in self.retracted]
        if not self.memory.unlimited:  # R45: without a cache there is nothing to record
            self.memory.formed(step, self.preempted)
            if self.memory.ordered:  # R51, R127: registrations in running order
                step.order = list(self.running)
        return step

    def retract(self, victim: RequestState) -> None:
        """R91's actions for a victim the sglang style chose: R49's, except that it joins the
        waiting queue at its tail and counts as a retraction."""
        self.running.remove(victim)
        self.memory.release(victim)
        victim.prefilled = 0  # its produced tokens, their times, first_scheduled stay
        victim.decoding = False
        self.waiting.append(victim)  # behind every request already waiting
        self.peak_waiting = max(self.peak_waiting, len(self.waiting))
        if self.group is not None:
            self.group.joined()
        victim.retractions += 1
        assert self.kv_counters is not None, "R90: without a cache nothing is retracted"
        self.kv_counters.retractions += 1
        self.retracted.append(victim)

    def preempt(self, victim: RequestState) -> None:
        """R49's four actions, in order, for a victim its formation policy chose."""
        self.running.remove(victim)  # 1.
        self.memory.release(victim)
        victim.prefilled = 0  # 2. its produced tokens, their times, first_scheduled stay
        victim.decoding = False
        # 3. At the head of the queue, in front of the victim before it (as vLLM prepends each):
        # one step's victims wait in the reverse of the order they were preempted.
        self.waiting.appendleft(victim)
        self.peak_waiting = max(self.peak_waiting, len(self.waiting))
        if self.group is not None:
            self.group.joined()
        victim.preemptions += 1  # 4.
        victim.recomputing = True
        assert self.kv_counters is not None
        self.kv_counters.preemptions += 1
        self.preempted.append(victim)

    def complete_step(self, step: Step) -> list[RequestState]:
        """R20, once per step of the run, then with a cache R51 (its memory's): apply it; the
        requests it completed, in running order."""
        memory = self.memory
        blocks = not memory.unlimited  # R45: without a cache no block is taken or released
        if blocks and step.repeat > 1 and not step.blocks_taken:  # the later steps of a run
            # take their blocks now (unless a reservation settled them, R102)
            memory.take_run_blocks(step)
        end = step.end_us
        first_tokens = self._produce_tokens(step, end)
        finished = [
            state
            for state in self.running
            if state.token_times_us.count == state.request.max_output_tokens
        ]
        if self.role == "prefill":  # R100: a prefill that ended is Held, not completed
            self._hold_prefilled(step)
        if finished:
            for state in finished:
                state.terminal_us = end
                self.load_blocks -= memory.prompt_blocks(state)
            self.running = [state for state in self.running if state.terminal_us is None]
            self.outstanding -= len(finished)
        if blocks:
            memory.step_ended(step, finished)
        self.steps += step.repeat
        # R85: a rank is busy for its own step's duration, though its tokens wait for the pass
        self.busy_us += step.repeat * step.duration_us if step.barrier else end - step.start_us
        self.prefill_tokens += step.prefill_tokens
        self.decode_tokens += step.repeat * len(step.decode)
        self.output_tokens += step.repeat * len(step.decode) + first_tokens
        self.completed += len(finished)
        if self.step_ends is not None:
            self._keep_step_ends(step)
        self.formation.step_ended(self, step)  # R89: the ratio's later decays and its reset
        return finished

    def _hold_prefilled(self, step: Step) -> None:
        """R100: the requests whose prefill this step completed leave the running list and
        keep their blocks, their hidden token produced and nowhere counted; in running order
        (``step.prefill``'s: R18's, then R19's)."""
        handed = [state for state, _ in step.prefill if state.decoding]
        if not handed:
            return
        leaving = set(handed)
        self.running = [state for state in self.running if state not in leaving]
        self.handed.extend(handed)
        self.handed_off += len(handed)
        self.outstanding -= len(handed)  # R99: counted until its prefill ends
        for state in handed:
            self.load_blocks -= self.memory.prompt_blocks(state)

    def _produce_tokens(self, step: Step, end: int) -> int:
        """R20's tokens at the end of each step of the run (the last at ``end``): one per step
        for each decoding request, and a first token (or, R51, the next) for each whose
        prefill the step completed; how many of those.

        A decoding request got its last token when the worker's previous step ended, which is
        when this one started (R16: a worker with running requests schedules at once), so each
        of its tokens here follows the one before by the duration of its step: R27's ITL
        samples are counted per step, not per token (``itl_gaps``).
        """
        decoding = len(step.decode)
        per_step = self.formation.decodes_every_step
        # R105: an activated request's first client token follows no token of its own: it
        # gives no ITL gap (only on a disaggregated fleet's decode side)
        fresh = 0
        if self.role == "decode" and per_step:
            fresh = sum([1 for state in step.decode if not state.token_times_us])
        if decoding and not per_step:  # before the new tokens: each request's last one
            self._count_gaps_per_request(step)
        if step.repeat == 1:
            for state in step.decode:
                state.token_times_us.append(end)
            if decoding and per_step:  # most steps of a long prompt's chunks decode nobody
                # R83: a rank's previous tokens came at the pass start, its new ones at the end
                self.itl_gaps[end - step.start_us] += decoding - fresh
        elif step.segments is not None:
            for state in step.decode:
                state.token_times_us.extend_progressions(step.segments)
            for _, duration, count in step.segments if per_step else ():
                self.itl_gaps[duration] += count * decoding
            if fresh:
                self.itl_gaps[step.segments[0][1]] -= fresh
        else:
            first = step.start_us + step.duration_us
            for state in step.decode:
                state.token_times_us.extend_progression(first, step.duration_us, step.repeat)
            if per_step:
                self.itl_gaps[step.duration_us] += step.repeat * decoding - fresh
        first_tokens = 0
        holds = self.role == "prefill"
        for state, tokens in step.prefill:
            state.prefill(tokens)
            # the step that finishes the prefill emits the first token (R100: on a prefill
            # side, the hidden one, which is no client's and is counted nowhere)
            if state.decoding and not holds:
                if state.token_times_us:  # R49: readmitted, its next token follows its last
                    self.itl_gaps[end - state.token_times_us.last] += 1
                state.token_times_us.append(end)
                first_tokens += 1
        return first_tokens

    def _count_gaps_per_request(self, step: Step) -> None:
        """R27's ITL samples of a step (or run) whose decoding requests may have sat out the
        steps before it (R90): the first step's gap from each request's own last token, each
        later step of a run one period (a run is of decode steps back to back)."""
        gaps = self.itl_gaps
        if step.segments is None:
            first_end = step.start_us + step.duration_us if step.repeat > 1 else step.end_us
            later = [(step.duration_us, step.repeat - 1)]
        else:
            first_end, first_duration, first_count = step.segments[0]
            later = [(first_duration, first_count - 1)]
            later += [(duration, count) for _, duration, count in step.segments[1:]]
        for state in step.decode:
            gaps[first_end - state.token_times_us.last] += 1
        for duration, count in later:
            if count:
                gaps[duration] += count * len(step.decode)

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
        self.busy_us += min(step.duration_us, stop_us - step.start_us)  # R85: d_r, up to D
