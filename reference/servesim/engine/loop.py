"""The event loop: one logical clock drives the whole fleet (SPEC.md section 2).

Events are ordered by one key, ``(time_us, priority, order)`` (R7): step completions before
arrivals before scheduling at the same microsecond; then completions in the order they were
created, arrivals by workload position (R60) and scheduling events by worker index. Section 13
adds arrivals made during the run (a session's later turns, R59; a closed loop's units, R61) and
a stop time after which nothing happens (R62).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Literal

from servesim.contract.errors import OutOfCoverage, UnrepresentableArrival, UnrepresentableTime
from servesim.contract.model import Scenario, Slo, SyntheticLinearTiming, TimingProfile, Workload
from servesim.engine.admission import rejection_reason
from servesim.engine.arrivals import Arrivals, Release
from servesim.engine.kv.identities import HashPrefixes
from servesim.engine.routing import make_router
from servesim.engine.worker import (
    CachingWorker,
    FirstBlocks,
    RequestState,
    Step,
    Worker,
    context_tokens,
    decode_run_length,
    measured_decode_run,
)

#: R6: the largest time, in microseconds, that a report can hold exactly (2**53 - 1).
MAX_TIME_US = (1 << 53) - 1

#: R7: event priorities at equal times, lowest first.
STEP_COMPLETION: Literal[0] = 0
ARRIVAL: Literal[1] = 1
SCHEDULING: Literal[2] = 2

#: R62: the subject (and order) of the stop time's event, an arrival of no request.
STOP = -1


@dataclass(frozen=True)
class SimulationResult:
    """What one replay produced, before it is turned into a report."""

    requests: list[RequestState]
    """One state per workload request, in workload order."""
    workers: list[Worker]
    steps: list[Step] | None
    """Every step (runs of identical steps as one), in the order formed, when traced."""
    sessions: tuple[str, ...] = ()
    """R64: the workload's session ids, which ``RequestState.request.session`` indexes."""
    slo: Slo | None = None
    """R63: the scenario's objectives, which decide ``slo_met`` and ``goodput``."""


def step_duration(step: Step, timing: TimingProfile) -> int:
    """R22 and R43: the duration of a step, or ``OutOfCoverage`` if the model cannot time it."""
    shape = step.shape
    model = timing.model
    if not model.covers(shape):
        assert not isinstance(model, SyntheticLinearTiming)
        raise OutOfCoverage(
            shape=shape,
            coverage=model.coverage,
            worker=step.worker,
            start_us=step.start_us,
            calibration=timing.calibration,
        )
    return model.step_duration_us(shape)


class FleetView:
    """R54: what a state-aware router sees at one arrival (``routing.Fleet``): the workers'
    counters and, for the request being routed, ``cached(w, r)``.

    It reads the workers at the moment it is asked, in the arrival event, so it sees the fleet
    after every event with a smaller key (R7). A worker may be in the middle of a run of decode
    steps then (``Step.repeat``), which the loop applies only when the run ends; that is exact
    because nothing a router reads changes inside a run (``CachingWorker.run_keeps_router_view``).
    """

    __slots__ = ("_first_blocks", "_workers", "request")

    def __init__(self, workers: list[Worker], first_blocks: FirstBlocks) -> None:
        self._workers = workers
        self._first_blocks = first_blocks
        self.request: RequestState | None = None
        """The request being routed; ``None`` between arrivals, when a router reads only the
        counters (R54)."""

    @property
    def size(self) -> int:
        return len(self._workers)

    def outstanding(self, worker: int) -> int:
        return self._workers[worker].outstanding

    def load_blocks(self, worker: int) -> int:
        return self._workers[worker].load_blocks

    def prompt_blocks(self) -> int:
        assert self.request is not None, "no request is being routed"
        return self._workers[0].prompt_blocks(self.request)

    def cached(self, worker: int) -> int:
        assert self.request is not None, "no request is being routed"
        return self._workers[worker].cached_blocks(self.request)

    def may_have_cached(self) -> Collection[int]:
        assert self.request is not None, "no request is being routed"
        worker = self._workers[0]
        if not isinstance(worker, CachingWorker):
            return ()
        identities = worker.identities(self.request)
        return self._first_blocks.workers(identities[0]) if identities else ()


#: How many arrivals pass between two calls of a progress callback.
PROGRESS_EVERY = 2048

ProgressCallback = Callable[[int, int, int], None]
"""Called with (arrivals so far, all requests, simulated time in microseconds)."""


def simulate(
    scenario: Scenario,
    workload: Workload,
    timing: TimingProfile,
    *,
    record_trace: bool = False,
    progress: ProgressCallback | None = None,
) -> SimulationResult:
    """Replay ``workload`` on ``scenario``'s fleet with ``timing``'s step durations.

    ``progress``, when given, hears how far the replay is every ``PROGRESS_EVERY`` arrivals; it
    observes and never changes the simulation.
    """
    limits = scenario.scheduler
    router = make_router(scenario.routing, scenario.workers)
    kv_cache = scenario.kv_cache
    state_aware = scenario.routing.state_aware
    #: R57: whether each routed request records cached(w, r) at the worker it joins
    records_cached = state_aware and kv_cache is not None and kv_cache.prefix_caching
    workers: list[Worker]
    first_blocks = FirstBlocks()  # R54: where each first block was registered, fleet-wide
    if kv_cache is None:
        workers = [Worker(index) for index in range(scenario.workers)]
    else:  # section 11: each worker has its own cache; hash prefixes are one naming
        prefixes = HashPrefixes()
        hash_block_tokens = workload.prefix_hash_block_tokens
        workers = [
            CachingWorker(
                index,
                kv_cache,
                hash_block_tokens,
                prefixes,
                first_blocks,
                registry_watched=state_aware,  # a router may read it mid-run: no run evicts
            )
            for index in range(scenario.workers)
        ]
    states = [RequestState(request, position) for position, request in enumerate(workload.requests)]
    requests = workload.requests
    steps: list[Step] | None = [] if record_trace else None
    stop_us = scenario.stop_at_us
    #: R62: arrivals are released only before it; without a stop time no time passes it (R6)
    horizon = MAX_TIME_US + 1 if stop_us is None else stop_us
    arrivals = Arrivals(workload, scenario.closed_loop)  # R59 to R61
    releases = arrivals.any_released

    queue: list[tuple[int, int, int, int]] = []  # (time_us, priority, order, subject)
    sequence = itertools.count()

    def push(time_us: int, priority: int, subject: int) -> int:
        # R7: completions in the order they were created; arrivals by workload position (R60);
        # scheduling events by worker index, so that a run of steps (one completion event for
        # many steps) orders a worker's next step exactly as step-by-step formation would
        number = next(sequence) if priority == STEP_COMPLETION else subject
        heapq.heappush(queue, (time_us, priority, number, subject))
        return number

    # Arrivals known at the start (R60) enter the queue one at a time, in R8's order: the queue
    # holds at most one of them, the earliest left, besides every released arrival, so that
    # their order is R60's (time, then workload position) without a heap entry per request.
    known = iter(arrivals.known())
    known_pending = -1  # the position of the known arrival in the queue, if any

    def push_next_known() -> None:
        nonlocal known_pending
        known_pending = next(known, -1)
        if known_pending >= 0:
            push(requests[known_pending].arrival_us, ARRIVAL, known_pending)

    def release(released: Release | None) -> None:
        # R59, R61: an arrival made during the run; at or after the stop time it never happens
        # (R62), and without one it must be a time a report can hold (R6), which is found when
        # it is released, as a step's end is found when the step is formed
        if released is None:
            return
        position, time_us = released
        if time_us >= horizon:
            if stop_us is None:
                raise UnrepresentableArrival(request=requests[position].id, arrival_us=time_us)
            return
        push(time_us, ARRIVAL, position)

    def request_scheduling(worker: Worker, now_us: int) -> None:
        # R16: an idle worker with work schedules at the current instant, once.
        if worker.in_flight is None and not worker.schedule_pending and worker.has_work():
            worker.schedule_pending = True
            push(now_us, SCHEDULING, worker.index)

    #: R22's C is read by a measured model and by the trace; a synthetic model ignores it.
    uses_context = timing.model.uses_context or record_trace
    #: what a router sees (R54); its request is set at each arrival
    fleet_view = FleetView(workers, first_blocks)
    arrived = 0
    for opened in arrivals.opening():  # R61: a closed loop's first units
        release(opened)
    push_next_known()
    if stop_us is not None:
        # R62: the stop time is an event of its own, after the completions at it and before
        # anything else at it (no arrival has a negative position), so that the loop stops
        # there without comparing every event's time with it
        heapq.heappush(queue, (stop_us, ARRIVAL, STOP, STOP))
    while queue:
        now_us, priority, number, subject = heapq.heappop(queue)
        if priority == STEP_COMPLETION:
            worker = workers[subject]
            if number != worker.completion_sequence:
                continue  # the end of a run that an arrival cut short
            step = worker.in_flight
            assert step is not None
            worker.in_flight = None
            finished = worker.complete_step(step)
            if finished:
                router.counters_changed(fleet_view, worker.index)  # R54: what a router sees
                if releases:
                    for state in finished:
                        release(arrivals.released_by(state.position, now_us))
            request_scheduling(worker, now_us)
        elif priority == ARRIVAL:
            if subject == STOP:
                break  # R62: nothing at or after the stop time happens but completions at it
            state = states[subject]
            state.arrival_us = now_us
            reason = rejection_reason(state.request, limits, kv_cache)
            if reason is not None:  # R10: rejected at arrival, never routed
                state.reject_reason = reason
                state.terminal_us = now_us
                if releases:
                    release(arrivals.released_by(subject, now_us))
            else:
                fleet_view.request = state
                worker = workers[router.route(fleet_view)]
                if records_cached:
                    state.cached_blocks_at_routing = fleet_view.cached(worker.index)
                worker.enqueue(state)
                router.counters_changed(fleet_view, worker.index)
                run = worker.in_flight
                if run is not None and run.truncate_at(now_us):
                    worker.completion_sequence = push(run.end_us, STEP_COMPLETION, worker.index)
                request_scheduling(worker, now_us)
            if subject == known_pending:
                push_next_known()
            arrived += 1
            if progress is not None and arrived % PROGRESS_EVERY == 0:
                progress(arrived, len(states), now_us)
        else:
            worker = workers[subject]
            worker.schedule_pending = False
            decode, prefill = worker.plan_step(limits, now_us)
            assert decode or prefill, "R16: a worker with work always forms a non-empty step"
            step = Step(worker.index, now_us, 0, decode, prefill)
            if uses_context:  # C costs a sum over the decoding requests: only when it is read
                step.context_tokens = context_tokens(decode)
            step.duration_us = step_duration(step, timing)
            if now_us + step.duration_us > MAX_TIME_US:
                raise UnrepresentableTime(
                    worker=worker.index, start_us=now_us, duration_us=step.duration_us
                )
            max_steps = None
            if isinstance(worker, CachingWorker):
                worker.record_cache(step)
                max_steps = worker.run_limit(step, record_trace)
            if isinstance(timing.model, SyntheticLinearTiming):
                step.repeat = decode_run_length(step, MAX_TIME_US, max_steps)
            else:
                measured_decode_run(step, timing.model, MAX_TIME_US, max_steps)
            if stop_us is not None:  # R62: no step of a run may pass the stop time uncut
                step.stop_at(stop_us)
            # R54: a state-aware router may read this worker before the run ends
            assert not state_aware or worker.run_keeps_router_view(step), (
                "run_keeps_router_view: a run would change what a state-aware router reads"
            )
            worker.in_flight = step
            if steps is not None:
                steps.append(step)
            worker.completion_sequence = push(step.end_us, STEP_COMPLETION, worker.index)

    if stop_us is not None:  # R62: what has not ended by the stop time is cut off there
        for worker in workers:
            if worker.in_flight is not None:
                worker.cut_step(worker.in_flight, stop_us)
        for state in states:
            if state.terminal_us is None:
                state.terminal_us = stop_us
                state.cut_off = True

    return SimulationResult(
        requests=states, workers=workers, steps=steps, sessions=workload.sessions, slo=scenario.slo
    )
