"""The event loop: one logical clock drives the whole fleet (SPEC.md section 2, R6 to R8).

Events are ordered by one key, ``(time_us, kind, order)`` (R7): (R136: host transfer
completions first, with a host pool, then) step completions before arrivals before scheduling
at the same microsecond; then completions in the order they were
created, arrivals by workload position (R60) and scheduling events by worker index. Section 13
adds arrivals made during the run (a session's later turns, R59; a closed loop's units, R61) and
a stop time after which nothing happens (R62), an event of its own between the completions and
the arrivals of its instant.

``EventLoop.run`` pops events and hands each to the handler of its kind, one method each; a new
kind of event is a new kind number, in its place in the order, and a new handler.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from servesim.contract.continuing_turns import continuing_turns
from servesim.contract.errors import (
    UnrepresentableArrival,
    UnrepresentableTime,
    UnrepresentableTransfer,
)
from servesim.contract.model import (
    KvTransfer,
    Pool,
    Scenario,
    Slo,
    SyntheticLinearTiming,
    TimingProfile,
    Workload,
)
from servesim.engine.admission import rejection_reason_in_pools
from servesim.engine.arrivals import Arrivals, Release
from servesim.engine.block_memory import BlockMemory
from servesim.engine.decode_runs import keeps_router_view, plan_run, steps_to_first_completion
from servesim.engine.fleet_view import FirstBlocks, FleetView
from servesim.engine.formation import make_formation
from servesim.engine.handoff import activate, hand_off, try_reservations
from servesim.engine.kv.host_tier import HostPool, HostTransfer, HostTransfers
from servesim.engine.kv.identities import HashPrefixes
from servesim.engine.memory import Memory, UnlimitedMemory
from servesim.engine.passes import RankGroup, add_passes
from servesim.engine.requests import RequestState
from servesim.engine.routing import make_router
from servesim.engine.step import Step, context_tokens, step_duration
from servesim.engine.worker import Worker

if TYPE_CHECKING:
    from servesim.engine.fleet_changes import FleetRecord

#: R6: the largest time, in microseconds, that a report can hold exactly (2**53 - 1).
MAX_TIME_US = (1 << 53) - 1

#: R7's priorities, lowest first, as the kinds of event in the queue's key; R62's stop time
#: comes after the completions at it and before anything else at it. R136's host transfer
#: completions come first of all (only with a host pool, which a fleet that changes has not).
#: R113's fleet events (failures, worker transitions, scaling decisions) exist only in a fleet
#: that changes (``servesim.engine.fleet_changes``); the others keep their relative order.
HOST_TRANSFER = 0
STEP_COMPLETION = 1
FAILURE = 2
TRANSITION = 3
TRANSFER_END = 4
STOP = 5
ARRIVAL = 6
SCHEDULING = 7
DECISION = 8

#: How many arrivals pass between two calls of a progress callback.
PROGRESS_EVERY = 2048

ProgressCallback = Callable[[int, int, int], None]
"""Called with (arrivals so far, all requests, simulated time in microseconds)."""


@dataclass(frozen=True)
class SimulationResult:
    """What one replay produced, before it is turned into a report."""

    requests: list[RequestState]
    """One state per workload request, in workload order."""
    workers: list[Worker]
    """Every scheduler (R82: each rank of each worker), in order of worker then rank; a
    one-rank worker is its one scheduler."""
    steps: list[Step] | None
    """Every step (runs of identical steps as one), in the order formed, when traced."""
    sessions: tuple[str, ...] = ()
    """R64: the workload's session ids, which ``RequestState.request.session`` indexes."""
    slo: Slo | None = None
    """R63: the scenario's objectives, which decide ``slo_met`` and ``goodput``."""
    units: list[Worker | RankGroup] | None = None
    """R78, R83: each worker, in global order: its one scheduler, or its ranks' group; ``None``
    means ``workers`` (every worker of one rank)."""
    pools: tuple[Pool, ...] = ()
    """R77: the scenario's pools, whose workers ``units`` lists in order; empty means one pool
    ``"default"`` of every worker."""
    transfer: KvTransfer | None = None
    """R97: a disaggregated fleet's KV transfer, which ``summary.transfers`` reads (R107)."""
    fleet: FleetRecord | None = None
    """R123: what a fleet that changed did (``fleet_changes``); ``None`` for a fleet that
    never changes."""
    host_transfers: list[HostTransfer] | None = None
    """R140: every host transfer submitted, in submission order, when traced."""


def simulate(
    scenario: Scenario,
    workload: Workload,
    timing: TimingProfile | Mapping[str, TimingProfile],
    *,
    record_trace: bool = False,
    progress: ProgressCallback | None = None,
) -> SimulationResult:
    """Replay ``workload`` on ``scenario``'s fleet with ``timing``'s step durations: one
    profile for every pool, or a mapping from each pool's name to its own (R84).

    ``progress``, when given, hears how far the replay is every ``PROGRESS_EVERY`` arrivals; it
    observes and never changes the simulation.
    """
    if scenario.fleet_changes:  # section 18: its own loop; a fleet that never changes, R7's
        from servesim.engine.fleet_changes import FleetEventLoop

        fleet_loop = FleetEventLoop(
            scenario, workload, timing, record_trace=record_trace, progress=progress
        )
        fleet_loop.run()
        return SimulationResult(
            requests=fleet_loop.states,
            workers=fleet_loop.workers,
            steps=fleet_loop.steps,
            sessions=workload.sessions,
            slo=scenario.slo,
            units=fleet_loop.units,
            pools=scenario.pools,
            transfer=scenario.kv_transfer,
            fleet=fleet_loop.record(),
        )
    loop = EventLoop(scenario, workload, timing, record_trace=record_trace, progress=progress)
    loop.run()
    return SimulationResult(
        requests=loop.states,
        workers=loop.workers,
        steps=loop.steps,
        sessions=workload.sessions,
        slo=scenario.slo,
        units=loop.units,
        pools=scenario.pools,
        transfer=scenario.kv_transfer,
        host_transfers=loop.factory.transfers.recorded,
    )


def pool_timings(
    scenario: Scenario, timing: TimingProfile | Mapping[str, TimingProfile]
) -> list[TimingProfile]:
    """R84: each pool's profile, in pool order."""
    if isinstance(timing, TimingProfile):
        return [timing] * len(scenario.pools)
    return [timing[pool.name] for pool in scenario.pools]


def make_workers(
    scenario: Scenario,
    workload: Workload,
    first_blocks: FirstBlocks,
    timings: list[TimingProfile] | None = None,
) -> tuple[list[Worker], list[Worker | RankGroup]]:
    """R16, R45, R77, R78: the fleet's schedulers (every rank of every worker, in order of
    worker then rank), each with its pool's memory, formation policy and timing; and each
    worker, in global order: its one scheduler, or the group of its ranks. In a disaggregated
    fleet (R97) each side's schedulers are numbered among themselves (``side_index``), and
    the decode side's caches tell no cache-aware router where they registered a block."""
    factory = WorkerFactory(scenario, workload, first_blocks, timings)
    for pool_index, pool in enumerate(scenario.pools):
        for _ in range(pool.workers):
            factory.add(pool_index)
    return factory.schedulers, factory.units


class WorkerFactory:
    """Makes the fleet's workers one at a time, each with the next global index (R78, R111),
    its schedulers numbered after every earlier one's (and on its side, R99)."""

    __slots__ = (
        "chains",
        "decode_blocks",
        "first_blocks",
        "formations",
        "on_side",
        "prefixes",
        "scenario",
        "schedulers",
        "timings",
        "transfers",
        "units",
        "unlimited",
        "workload",
    )

    def __init__(
        self,
        scenario: Scenario,
        workload: Workload,
        first_blocks: FirstBlocks,
        timings: list[TimingProfile] | None = None,
    ) -> None:
        self.scenario = scenario
        self.workload = workload
        self.first_blocks = first_blocks
        self.timings = timings
        self.schedulers: list[Worker] = []
        self.units: list[Worker | RankGroup] = []
        self.prefixes = HashPrefixes()  # section 11: each rank has its own cache; one naming
        self.unlimited = UnlimitedMemory()  # it keeps nothing: one serves all
        self.on_side = {None: 0, "prefill": 0, "decode": 0}
        self.decode_blocks = FirstBlocks()  # R99: nobody routes by the decode side's caches
        self.formations = [make_formation(pool.scheduler) for pool in scenario.pools]
        self.chains = continuing_turns(workload)  # R125 to R127: found before the run
        self.transfers = HostTransfers(HOST_TRANSFER)  # R136: numbered over the whole fleet

    def memory(self, pool_index: int, side_index: int, worker: int = 0, rank: int = 0) -> Memory:
        """A rank's memory as new: unlimited, or its pool's cache with every block free (and,
        R129, its own empty host pool when the cache has ``host``)."""
        pool = self.scenario.pools[pool_index]
        if pool.kv_cache is None:
            return self.unlimited
        host = pool.kv_cache.host
        return BlockMemory(
            side_index,
            pool.kv_cache,
            self.workload.prefix_hash_block_tokens,
            self.prefixes,
            self.decode_blocks if pool.role == "decode" else self.first_blocks,
            # read mid-run: no run evicts
            registry_watched=self.scenario.routing.state_aware,
            chains=self.chains,
            host=None if host is None else HostPool(host, pool.kv_cache.block_tokens, worker, rank),
            transfers=self.transfers,
        )

    def add(self, pool_index: int) -> Worker | RankGroup:
        """A new worker of pool ``pool_index``, with the next global index."""
        pool = self.scenario.pools[pool_index]
        formation = self.formations[pool_index]
        timing = None if self.timings is None else self.timings[pool_index]
        role = pool.role
        units, schedulers, on_side = self.units, self.schedulers, self.on_side
        index = len(units)
        group = None if pool.dp_size == 1 else RankGroup(index, pool.dp_size)
        for rank in range(pool.dp_size):
            side_index = on_side[role]
            on_side[role] += 1
            worker = Worker(
                index,
                self.memory(pool_index, side_index, index, rank),
                formation,
                timing,
                rank=rank,
                scheduler=len(schedulers),
                group=group,
                role=role,
            )
            worker.side_index = side_index
            schedulers.append(worker)
            if group is not None:
                group.ranks.append(worker)
        unit = worker if group is None else group
        units.append(unit)
        return unit


class EventLoop:
    """One replay's queue, fleet and arrivals, with one handler per kind of event (R7)."""

    __slots__ = (
        "arrivals",
        "arrived",
        "decode_router",
        "decode_state_aware",
        "decode_units",
        "decode_view",
        "decode_workers",
        "disaggregated",
        "factory",
        "fleet_view",
        "horizon",
        "known",
        "known_pending",
        "pool_limits",
        "progress",
        "queue",
        "ready",
        "records_cached",
        "releases",
        "requests",
        "route_units",
        "route_workers",
        "router",
        "runs",
        "sequence",
        "state_aware",
        "states",
        "steps",
        "stop_us",
        "transfer",
        "units",
        "uses_context",
        "workers",
    )

    def __init__(
        self,
        scenario: Scenario,
        workload: Workload,
        timing: TimingProfile | Mapping[str, TimingProfile],
        *,
        record_trace: bool = False,
        progress: ProgressCallback | None = None,
    ) -> None:
        #: R79, R100: every distinct triple of limits, cache and role of the pools, which
        #: rejection reads
        self.pool_limits = list(
            dict.fromkeys((pool.scheduler, pool.kv_cache, pool.role) for pool in scenario.pools)
        )
        timings = pool_timings(scenario, timing)
        self.state_aware = scenario.routing.state_aware
        first_blocks = FirstBlocks()  # R54: where each first block was registered, fleet-wide
        #: R111: the maker of the fleet's workers, which a fleet that changes keeps using
        self.factory = WorkerFactory(scenario, workload, first_blocks, timings)
        for pool_index, pool in enumerate(scenario.pools):
            for _ in range(pool.workers):
                self.factory.add(pool_index)
        self.workers, self.units = self.factory.schedulers, self.factory.units
        #: R57: whether a routed request records cached(w, q, r) at the rank it joins, for each
        #: rank (with a state-aware policy and a prefix cache there); ``None`` when none does
        records = [
            self.state_aware and pool.kv_cache is not None and pool.kv_cache.prefix_caching
            for pool in scenario.pools
            for _ in range(pool.workers * pool.dp_size)
        ]
        self.records_cached = records if any(records) else None
        #: R97: a disaggregated fleet's KV transfer, ``None`` in an aggregated fleet
        self.transfer = scenario.kv_transfer
        self.disaggregated = self.transfer is not None
        #: R99: an arrival is routed among the prefill side's workers (every worker, when
        #: aggregated), its prefill's end among the decode side's
        arriving = "prefill" if self.disaggregated else None
        self.route_workers = [worker for worker in self.workers if worker.role == arriving]
        self.route_units = [unit for unit in self.units if _role(unit) == arriving]
        #: R80, R82: a state-aware router chooses among the schedulers, the others a worker
        weights = [
            pool.weight
            for pool in scenario.pools
            if pool.role == arriving
            for _ in range(pool.workers)
        ]
        self.router = make_router(
            scenario.routing,
            len(self.route_workers) if self.state_aware else len(self.route_units),
            weights,
        )
        #: what a router sees (R54); its request is set at each arrival
        self.fleet_view = FleetView(self.route_workers, first_blocks)
        self.decode_workers = [worker for worker in self.workers if worker.role == "decode"]
        self.decode_units = [unit for unit in self.units if _role(unit) == "decode"]
        decode = scenario.routing.decode
        self.decode_state_aware = decode is not None and decode.state_aware
        self.decode_router = None
        if decode is not None:
            self.decode_router = make_router(
                decode,
                len(self.decode_workers) if self.decode_state_aware else len(self.decode_units),
            )
        self.decode_view = FleetView(self.decode_workers, FirstBlocks())
        #: R104: per decode worker, its requests whose transfer ended while it was in a pass
        self.ready: dict[int, list[RequestState]] = {}
        self.requests = workload.requests
        self.states = [RequestState(request, i) for i, request in enumerate(workload.requests)]
        self.steps: list[Step] | None = [] if record_trace else None
        #: R22's C is read by a measured model and by the trace; a synthetic model ignores it
        self.uses_context = any(each.model.uses_context for each in timings) or record_trace
        self.stop_us = scenario.stop_at_us
        #: R62: arrivals are released only before it; without a stop time none passes R6's limit
        self.horizon = MAX_TIME_US + 1 if self.stop_us is None else self.stop_us
        self.arrivals = Arrivals(workload, scenario.closed_loop)  # R59 to R61
        self.releases = self.arrivals.any_released
        self.progress = progress
        self.arrived = 0
        self.queue: list[tuple[int, int, int, int]] = []  # (time_us, kind, order, subject)
        transfers = self.factory.transfers  # R136: host transfer completions join the queue
        transfers.queue = self.queue
        if record_trace:
            transfers.recorded = []
        self.sequence = itertools.count()  # R7: completions in the order they were created
        # Arrivals known at the start (R60) enter the queue one at a time, in R8's order: the
        # queue holds at most one of them, the earliest left, besides every released arrival,
        # so that their order is R60's (time, then position) without a heap entry per request.
        self.known = iter(self.arrivals.known())
        self.known_pending = -1  # the position of the known arrival in the queue, if any
        #: whether a step may stand for a run of identical steps (``decode_runs``, carried
        #: steps): a shortcut with the same results, off where the fleet changes
        self.runs = True

    def run(self) -> None:
        """Process every event in key order (R7); then R62's cut-offs."""
        for opened in self.arrivals.opening():  # R61: a closed loop's first units
            self._release(opened)
        self._push_next_known()
        if self.stop_us is not None:
            heapq.heappush(self.queue, (self.stop_us, STOP, 0, 0))
        queue = self.queue
        pop = heapq.heappop
        handlers = (
            self.host_transfer_completion,
            self.step_completion,
            self.failure,
            self.transition,
            self.transfer_end,
            self.stop,
            self.arrival,
            self.scheduling,
            self.decision,
        )
        while queue:
            now_us, kind, order, subject = pop(queue)
            handlers[kind](now_us, order, subject)
        if self.stop_us is not None:
            self._cut_off(self.stop_us)

    # --- the handlers, one per kind of event, in R7's order

    def host_transfer_completion(self, now_us: int, order: int, subject: int) -> None:
        """R132, R134, R136: a host transfer ends. A store's entries become resident; a load's
        entries lose their pins, its blocks are registered, and its request is loaded: its
        worker, if idle, schedules now (R134), and a run in flight there ends at its next step
        end, for the request joins the next step formed (R135). A store completion makes
        nobody runnable, but it may let the head of the queue start a load: a run there ends at
        its next step end too, when the queue is not empty."""
        transfer = self.factory.transfers.complete(order)
        pool = transfer.pool
        worker = self.units[pool.worker]
        scheduler = worker.ranks[pool.rank] if isinstance(worker, RankGroup) else worker
        memory = scheduler.memory
        assert isinstance(memory, BlockMemory)
        if transfer.kind == "store":
            pool.stored(transfer.identities)
            if scheduler.waiting:
                self._cut_run(scheduler, now_us)
            return
        memory.load_completed(transfer)
        state = transfer.state
        scheduler.loading.remove(state)
        scheduler.loaded.append(state)
        self._cut_run(scheduler, now_us)
        self._request_unit_scheduling(worker, now_us)

    def step_completion(self, now_us: int, order: int, index: int) -> None:
        """R20, R51: worker ``index``'s step in flight ends (unless an arrival cut its run
        short and ``order`` is the run's old end); what it finished may release arrivals."""
        worker = self.units[index]
        if order != worker.completion_sequence:
            return  # the end of a run that an arrival cut short
        if isinstance(worker, RankGroup):
            self._end_pass(worker, now_us)
            return
        step = worker.in_flight
        assert step is not None
        worker.in_flight = None
        self._step_ended(worker, step, now_us)
        if self.disaggregated:
            self._pass_ended(worker, [worker], now_us)
        self._request_scheduling(worker, now_us)

    def transfer_end(self, now_us: int, order: int, position: int) -> None:
        """R104: a request's KV transfer ends: it is activated now on an idle decode worker,
        or at the end of the pass in flight there (Ready)."""
        state = self.states[position]
        handoff = state.handoff
        assert handoff is not None
        assert handoff.decode is not None
        handoff.transfer_end_us = now_us
        index = handoff.decode.index
        unit = self.units[index]
        if unit.in_flight is None:
            self._activate(state, now_us)
            return
        # events come in (time, position) order, which is R104's order of activation
        self.ready.setdefault(index, []).append(state)
        if isinstance(unit, Worker):  # a run of decode steps ends at its next step end
            run = unit.in_flight
            assert run is not None
            if run.truncate_at(now_us):
                unit.completion_sequence = self._push_completion(run.end_us, index)

    def failure(self, now_us: int, order: int, subject: int) -> None:
        """R117: a worker fails (only in a fleet that changes)."""
        raise AssertionError("R113: no failure without failures")

    def transition(self, now_us: int, order: int, subject: int) -> None:
        """R111, R119: a startup end or a recovery start (only in a fleet that changes)."""
        raise AssertionError("R113: no worker transition without scaling or failures")

    def decision(self, now_us: int, order: int, subject: int) -> None:
        """R110, R115: a scaling decision (only in a fleet that changes)."""
        raise AssertionError("R113: no scaling decision without scaling")

    def stop(self, now_us: int, order: int, subject: int) -> None:
        """R62: nothing at or after the stop time happens but the completions at it: the
        events left are dropped, and the loop ends."""
        self.queue.clear()

    def arrival(self, now_us: int, order: int, position: int) -> None:
        """R10, R12: the request at ``position`` arrives; rejected, or routed and queued."""
        state = self.states[position]
        state.arrival_us = now_us
        reason = rejection_reason_in_pools(state.request, self.pool_limits)
        if reason is not None:  # R10: rejected at arrival, never routed
            state.reject_reason = reason
            state.terminal_us = now_us
            if self.releases:
                self._release(self.arrivals.released_by(position, now_us))
        else:
            self._route(state, now_us)
        if position == self.known_pending:
            self._push_next_known()
        self.arrived += 1
        if self.progress is not None and self.arrived % PROGRESS_EVERY == 0:
            self.progress(self.arrived, len(self.states), now_us)

    def scheduling(self, now_us: int, order: int, index: int) -> None:
        """R16: idle worker ``index`` forms its step, timed (R22, R43, R6) and made a run of
        the identical steps after it (``decode_runs``), and its completion is created."""
        worker = self.units[index]
        worker.schedule_pending = False
        if isinstance(worker, RankGroup):
            self._start_pass(worker, now_us)
            return
        step = worker.form_step(now_us)
        if step is None:  # R101: no token, no step; R102 (c): its reservations are tried
            self._try_reservations(worker, now_us)
            return
        if self.uses_context:  # C costs a sum over the decoding requests: only when it is read
            step.context_tokens = context_tokens(step.decode)
        timing = worker.timing
        assert timing is not None
        step.duration_us = duration = step_duration(step, timing)
        if now_us + duration > MAX_TIME_US:
            raise UnrepresentableTime(worker=index, start_us=now_us, duration_us=duration)
        steps = self.steps
        if self.runs and not worker.pending:  # R102 (b): a reservation is tried at every pass end
            plan_run(step, worker, timing.model, MAX_TIME_US, steps is not None)
            if step.repeat > 1:
                self._bound_run(step, now_us)
        stop_us = self.stop_us
        if stop_us is not None:  # R62: no step of a run may pass the stop time uncut
            step.stop_at(stop_us)
        # R54: a state-aware router may read this worker before the run ends
        assert not self.state_aware or keeps_router_view(step, worker.memory), (
            "keeps_router_view: a run would change what a state-aware router reads"
        )
        worker.in_flight = step
        if steps is not None:
            steps.append(step)
        worker.completion_sequence = self._push_completion(step.end_us, index)

    # --- R83: a worker of several ranks, pass by pass (runs of a rank alone, carried steps)

    def _start_pass(self, group: RankGroup, now_us: int) -> None:
        """R83: every rank with work forms its step now, but for a rank carrying its decode
        step into this pass (``passes.CarriedSteps``), whose step is the same; the pass ends at
        the longest."""
        steps: list[Step] = []
        longest = 0
        carry = group.carry
        carried = carry.steps
        timing = group.ranks[0].timing  # R84: its pool's, every rank's
        assert timing is not None
        for rank in group.ranks:
            step = carried[rank.rank]
            if step is not None:
                carried[rank.rank] = None
                if not carry.remaining[rank.rank]:
                    # a request joined it at its last pass end (``CarriedSteps.close``): it
                    # ended then
                    self._step_ended(rank, step, now_us)
                    step = None
            if step is None:
                if not (rank.running or rank.waiting or rank.loaded):
                    continue
                step = rank.form_step(now_us)
                if step is None:  # R101: no token, no step; R102 (c): reservations tried
                    self._try_reservations(rank, now_us)
                    continue
                if self.uses_context:
                    step.context_tokens = context_tokens(step.decode)
                # R43: the first step out of coverage, in rank order, decides (its siblings'
                # steps, formed or not, change nothing of the outcome)
                step.duration_us = step_duration(step, timing)
            steps.append(step)
            if step.duration_us > longest:
                longest = step.duration_us
        if not steps:  # R101: no rank gave a token: the worker stays idle
            return
        end_us = now_us + longest
        if end_us > MAX_TIME_US:
            raise UnrepresentableTime(worker=group.index, start_us=now_us, duration_us=longest)
        carry.start_us = now_us
        carry.period_us = longest
        if len(steps) == 1 and not steps[0].barrier:  # its siblings idle, it formed its step:
            formed = steps  # the pass is this rank's step, or a run of them
            self._plan_alone(steps[0], group.ranks[steps[0].rank])
            end_us = steps[0].end_us
        else:
            formed = [step for step in steps if not step.barrier]  # not carried
            for step in formed:
                step.barrier = True
                carry.remaining[step.rank] = self._rank_run(group.ranks[step.rank], step)
            end_us = self._plan_barrier_run(group, steps, now_us, longest)
        group.formed(steps)
        if self.steps is not None:
            self.steps.extend(formed)
        group.completion_sequence = self._push_completion(end_us, group.index)

    def _plan_alone(self, step: Step, rank: Worker) -> None:
        """R83 with one rank at work: every pass while its siblings stay idle is that rank's step
        alone, ended at its own end, so ``decode_runs`` applies to it as to a one-rank worker
        (exact while nobody joins any rank of the worker: ``_route`` cuts the run then)."""
        timing = rank.timing
        assert timing is not None
        if self.runs and not self.disaggregated:  # no runs where handoffs change a worker
            plan_run(step, rank, timing.model, MAX_TIME_US, self.steps is not None)
            if step.repeat > 1:
                self._bound_run(step, step.start_us)
        if self.stop_us is not None:  # R62: no step of a run may pass the stop time uncut
            step.stop_at(self.stop_us)
        assert not self.state_aware or keeps_router_view(step, rank.memory), (
            "keeps_router_view: a run would change what a state-aware router reads"
        )

    def _bound_run(self, step: Step, now_us: int) -> None:
        """A run just planned at ``now_us`` may be shortened where something other than a
        join or the stop time reads or changes its worker (section 18's fleet events); none
        here."""

    def _rank_run(self, rank: Worker, step: Step) -> int:
        """How many passes from this one on ``step``, just formed in a pass of several ranks,
        may stand for (``passes.CarriedSteps``): 1 unless it is decode-only, on a rank without
        a cache, under a synthetic model and a style whose later decode steps form alike;
        else until its first decoding request's last token."""
        timing = rank.timing
        if (
            self.disaggregated  # no decode runs where handoffs change a worker mid-run
            or not self.runs
            or step.prefill
            or not step.decode
            or not rank.memory.unlimited
            or timing is None
            or not isinstance(timing.model, SyntheticLinearTiming)
            or rank.formation.run_limit(rank, step, self.steps is not None) is not None
        ):
            return 1
        return steps_to_first_completion(step)

    def _plan_barrier_run(
        self, group: RankGroup, steps: list[Step], start_us: int, longest: int
    ) -> int:
        """R83 with several ranks at work, or one carrying its step: the pass's steps, each
        ending at the pass end. When every one may stand for more passes (``remaining``, each
        a decode-only step of the same duration every pass), the passes after it are the same
        for as many passes as the one with fewest left allows, so they are one run of passes of
        period ``longest`` (a join to any rank cuts it, ``_route``). The run's end."""
        remaining = group.carry.remaining
        count = min([remaining[step.rank] for step in steps])
        if count > 1:
            count = min(count, (MAX_TIME_US - start_us) // longest)  # R6: at least 1
        stop_us = self.stop_us
        for step in steps:
            remaining[step.rank] -= count
            add_passes(step, start_us, longest, count)
            if count > 1 and stop_us is not None:  # R62: no pass may pass the stop time uncut
                step.stop_at(stop_us)  # (no step is carried with a stop time: each is new)
                if step.segments is None:  # cut to one pass, which ends at the pass end
                    step.pass_end_us = start_us + longest
        return steps[0].end_us

    def _end_pass(self, group: RankGroup, now_us: int) -> None:
        """R83: at the pass end every rank's step ends, in rank order, but a step carried into
        the next pass (one that may stand for more passes; none with a stop time, for
        ``Worker.cut_step`` cuts a step of one pass); then the worker is idle."""
        steps = group.in_flight
        assert steps is not None
        first = steps[0]
        carry = group.carry
        start_us = carry.start_us
        if not first.barrier:  # one rank alone: its step, or its run of steps
            group.ended(start_us, now_us, first.repeat)
            rank = group.ranks[first.rank]
            self._step_ended(rank, first, now_us)
            if first.repeat > 1:  # R85: a run's later passes held the blocks the rank took
                group.ran(rank)
        else:  # passes of one period each
            group.ended(start_us, now_us, (now_us - start_us) // carry.period_us)
            carrying = self.stop_us is None
            for step in steps:
                if carrying and carry.remaining[step.rank] > 0:
                    carry.steps[step.rank] = step
                else:
                    self._step_ended(group.ranks[step.rank], step, now_us)
        if self.disaggregated:
            self._pass_ended(group, group.ranks, now_us)
        self._request_group_scheduling(group, now_us)

    # --- what the handlers share

    def _step_ended(self, worker: Worker, step: Step, now_us: int) -> None:
        """R20, R51: a scheduler's step ends; what it finished may release arrivals."""
        finished = worker.complete_step(step)
        if finished:
            self._counters_changed(worker)  # R54
            if self.releases:
                released_by = self.arrivals.released_by
                for state in finished:
                    self._release(released_by(state.position, now_us))

    def _route(self, state: RequestState, now_us: int) -> None:
        """R12, R54, R80, R82: an accepted request joins the router's scheduler, or a rank of
        its worker by the worker's rotation; a run in flight there is cut at its next step
        boundary, for the request may join the next step."""
        fleet_view = self.fleet_view
        fleet_view.request = state
        chosen = self.router.route(fleet_view)
        if self.state_aware:  # R82: the router chose a (worker, rank)
            worker = self.route_workers[chosen]
        else:  # R80: the router chose a worker, its rotation chooses the rank
            unit = self.route_units[chosen]
            worker = unit.next_rank() if isinstance(unit, RankGroup) else unit
        if self.records_cached is not None and self.records_cached[worker.scheduler]:
            state.cached_blocks_at_routing = fleet_view.cached(worker.side_index)
        self._join(state, worker, now_us)

    def _join(self, state: RequestState, worker: Worker, now_us: int) -> None:
        """R12, R80: a routed request joins ``worker``'s waiting queue, which may cut a run."""
        fleet_view = self.fleet_view
        if self.disaggregated:  # R100: a request of one output token on the prefill side
            state.output_limit = 1
        worker.enqueue(state)
        self.router.counters_changed(fleet_view, worker.side_index)
        self._cut_run(worker, now_us)
        group = worker.group
        if group is not None:  # R83: it waits for the worker's next pass
            self._request_group_scheduling(group, now_us)
            return
        self._request_scheduling(worker, now_us)

    def _cut_run(self, worker: Worker, now_us: int) -> None:
        """A run of steps (or passes) in flight at ``worker``'s worker ends at its next step
        boundary at or after now: something that its next step may read changed (a request
        joined, R12; a load or store completed, R136)."""
        group = worker.group
        if group is not None:  # R83: it waits for the worker's next pass
            cut = False
            remaining = group.carry.remaining
            # R7: the arrivals at an instant come before the scheduling at it, so a pass in
            # flight started before now, and its steps' passes before it ended before now
            # (R136: a host transfer completion comes before the pass end at its instant)
            assert group.in_flight is None or group.carry.start_us < now_us
            for step in group.in_flight or ():  # a run of passes ends at the pass end at or
                passes = step.repeat  # after now, every rank's step alike
                cut = step.truncate_at(now_us)
                remaining[step.rank] += passes - step.repeat  # the passes cut off are left
            group.carry.close(worker.rank)  # its step may differ from the next pass on
            if cut:
                group.completion_sequence = self._push_completion(step.end_us, group.index)
            return
        run = worker.in_flight
        if run is not None and run.truncate_at(now_us):
            worker.completion_sequence = self._push_completion(run.end_us, worker.index)

    # --- section 17: a disaggregated fleet's handoffs (``servesim.engine.handoff``)

    def _pass_ended(self, unit: Worker | RankGroup, ranks: list[Worker], now_us: int) -> None:
        """R100, R104, R102 (b): at a pass end, after every rank's step ended: a prefill
        worker's new Held requests are routed on the decode side, in rank order then running
        order; a decode worker's Ready requests are activated, then its ranks' reservation
        queues are tried, in rank order."""
        if ranks[0].role == "prefill":
            for rank in ranks:
                if rank.handed:
                    handed, rank.handed = rank.handed, []
                    self._counters_changed(rank)  # R99: their prefill ended
                    for state in handed:
                        self._hand_off(state, rank, now_us)
            return
        for state in self.ready.pop(unit.index, ()):
            self._activate(state, now_us)
        for rank in ranks:
            self._try_reservations(rank, now_us)

    def _hand_off(self, state: RequestState, source: Worker, now_us: int) -> None:
        """R99, R100: route a Held request on the decode side; it joins that scheduler's
        reservation queue, which is tried."""
        router = self.decode_router
        assert router is not None
        view = self.decode_view
        view.request = state
        chosen = router.route(view)
        if self.decode_state_aware:
            decode = self.decode_workers[chosen]
        else:
            unit = self.decode_units[chosen]
            decode = unit.next_rank() if isinstance(unit, RankGroup) else unit
        self._join_decode(state, source, decode, now_us)

    def _join_decode(
        self, state: RequestState, source: Worker, decode: Worker, now_us: int
    ) -> None:
        """R100, R102: a Held request joins ``decode``'s reservation queue, which is tried."""
        router = self.decode_router
        assert router is not None
        view = self.decode_view
        hand_off(state, source, decode, now_us)
        router.counters_changed(view, decode.side_index)
        self._try_reservations(decode, now_us)

    def _try_reservations(self, decode: Worker, now_us: int) -> None:
        """R102, R103: the reservations its queue's head and those after it get now, each
        starting its transfer, whose end is an event (R104)."""
        if not decode.pending:
            return
        run = decode.in_flight
        if run is not None and run.repeat > 1 and not run.blocks_taken:
            # a run of decode steps: those formed by now have taken their blocks before any
            # reservation does; the rest are formed anew. Once settled, a later try in the
            # same run finds it ending at its current step and takes nothing again.
            if run.truncate_at(now_us):
                decode.completion_sequence = self._push_completion(run.end_us, decode.index)
            decode.memory.take_run_blocks(run)
            run.blocks_taken = True
        transfer = self.transfer
        assert transfer is not None
        for state in try_reservations(decode, transfer, now_us):
            handoff = state.handoff
            assert handoff is not None
            assert handoff.transfer_us is not None
            end_us = now_us + handoff.transfer_us
            if end_us > MAX_TIME_US:
                raise UnrepresentableTransfer(
                    request=state.request.id, start_us=now_us, duration_us=handoff.transfer_us
                )
            heapq.heappush(self.queue, (end_us, TRANSFER_END, state.position, state.position))

    def _activate(self, state: RequestState, now_us: int) -> None:
        """R104: the request joins its decode scheduler's running list; its prefill scheduler
        releases its blocks (R101: and may then form a step); both workers, if idle, schedule."""
        source = activate(state, now_us)
        handoff = state.handoff
        assert handoff is not None
        assert handoff.decode is not None
        self._request_unit_scheduling(self.units[source.index], now_us)
        self._request_unit_scheduling(self.units[handoff.decode.index], now_us)

    def _request_unit_scheduling(self, unit: Worker | RankGroup, now_us: int) -> None:
        if isinstance(unit, RankGroup):
            self._request_group_scheduling(unit, now_us)
        else:
            self._request_scheduling(unit, now_us)

    def _counters_changed(self, worker: Worker) -> None:
        """R54, R99: a scheduler's counts changed; the router of its side hears of it."""
        if worker.role == "decode":
            assert self.decode_router is not None
            self.decode_router.counters_changed(self.decode_view, worker.side_index)
        else:
            self.router.counters_changed(self.fleet_view, worker.side_index)

    def _push_completion(self, time_us: int, index: int) -> int:
        """R7: a step completion, ordered by creation: a run of steps (one completion for
        many) then orders a worker's next step as step-by-step formation would."""
        number = next(self.sequence)
        heapq.heappush(self.queue, (time_us, STEP_COMPLETION, number, index))
        return number

    def _request_scheduling(self, worker: Worker, now_us: int) -> None:
        """R16: an idle worker with work schedules at the current instant, once."""
        # R16's "has work": a request running or waiting (R135: or loaded), read here once
        # per event
        if (
            worker.in_flight is None
            and not worker.schedule_pending
            and (worker.running or worker.waiting or worker.loaded)
        ):
            worker.schedule_pending = True
            heapq.heappush(self.queue, (now_us, SCHEDULING, worker.index, worker.index))

    def _request_group_scheduling(self, group: RankGroup, now_us: int) -> None:
        """R83: an idle worker whose ranks have work schedules its next pass now, once."""
        if group.in_flight is not None or group.schedule_pending:
            return
        for rank in group.ranks:  # R83's "has work": a rank has a request running or waiting
            if rank.running or rank.waiting or rank.loaded:  # (R135: or loaded)
                group.schedule_pending = True
                heapq.heappush(self.queue, (now_us, SCHEDULING, group.index, group.index))
                return

    def _push_next_known(self) -> None:
        self.known_pending = next(self.known, -1)
        if self.known_pending >= 0:
            position = self.known_pending
            arrival = (self.requests[position].arrival_us, ARRIVAL, position, position)
            heapq.heappush(self.queue, arrival)

    def _release(self, released: Release | None) -> None:
        """R59, R61: an arrival made during the run; at or after the stop time it never
        happens (R62), and without one it must be a time a report can hold (R6), which is
        found when it is released, as a step's end is found when the step is formed."""
        if released is None:
            return
        position, time_us = released
        if time_us >= self.horizon:
            if self.stop_us is None:
                raise UnrepresentableArrival(request=self.requests[position].id, arrival_us=time_us)
            return
        heapq.heappush(self.queue, (time_us, ARRIVAL, position, position))

    def _cut_off(self, stop_us: int) -> None:
        """R62: what has not ended by the stop time is cut off there."""
        for unit in self.units:
            if isinstance(unit, RankGroup):
                if unit.in_flight is not None:  # R83: the pass is cut with every step in it
                    steps = unit.in_flight
                    for step in steps:
                        unit.ranks[step.rank].cut_step(step, stop_us)
                    unit.ended(steps[0].start_us, stop_us)
            elif unit.in_flight is not None:
                unit.cut_step(unit.in_flight, stop_us)
        for state in self.states:
            if state.terminal_us is None:
                state.terminal_us = stop_us
                state.cut_off = True


def _role(unit: Worker | RankGroup) -> str | None:
    """R97: the role of a worker's pool."""
    return unit.ranks[0].role if isinstance(unit, RankGroup) else unit.role
