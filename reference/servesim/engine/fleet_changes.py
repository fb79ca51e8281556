"""A fleet that changes (SPEC.md section 18, R109 to R122): scaling, draining, failures,
migration and recovery, as one event loop the simulation uses only when a scenario has
``scaling`` or ``failures``.

``FleetEventLoop`` is ``loop.EventLoop`` with R113's three kinds of fleet event (failures,
worker transitions, scaling decisions) and R114's routing over the routable workers. A worker
(``Worker`` or ``RankGroup``) is unchanged: what section 18 adds about it (its state, its
lifecycle, its pool, its failures) is its ``WorkerLife`` here, which the loop consults before it
routes to a worker or lets it form a step. In an aggregated fleet a step may stand for a run of
identical decode steps, as in a fleet that never changes, but no run passes an instant at which
a fleet event may read or cut its worker (a failure's, a schedule entry's or a tick's): the run
keeps the steps ending at or before that instant (``_bound_run``, as R62's stop time does), so
at each such instant every worker is as step-by-step formation leaves it. A disaggregated fleet,
and the carried passes of several ranks, form every step one at a time.

A fleet that never changes never reaches this module: ``loop.simulate`` takes the old loop.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field

from servesim.contract.errors import UnrepresentableFleet
from servesim.contract.model import Pool, Scenario, TimingProfile, Workload
from servesim.engine.block_memory import BlockMemory
from servesim.engine.handoff import Handoff
from servesim.engine.kv.held import HeldBlocks
from servesim.engine.loop import (
    ARRIVAL,
    DECISION,
    FAILURE,
    MAX_TIME_US,
    TRANSITION,
    EventLoop,
    ProgressCallback,
)
from servesim.engine.passes import CarriedSteps, RankGroup
from servesim.engine.requests import RequestState
from servesim.engine.routing import SplitMix64
from servesim.engine.step import Step
from servesim.engine.worker import Worker

#: R109's states.
STARTING = "starting"
ACTIVE = "active"
DRAINING = "draining"
FAILED = "failed"
REMOVED = "removed"

#: R110: the most workers, and ranks, one run may create.
MAX_CREATED = 1 << 20

#: R123: the reasons a request fails.
FAIL_REASONS = ("migration_limit", "no_routable_worker", "worker_failure")

Unit = Worker | RankGroup


@dataclass(slots=True, eq=False)
class WorkerLife:
    """R109, R123: one worker's state and what the report says of its life."""

    pool: int
    """Its pool's index in pool order (R77)."""
    pool_worker: int
    """R85, R111: its index in its pool."""
    created_us: int
    state: str
    lifecycle: list[tuple[str, int]]
    """R123: its state changes ``(state, at_us)``, in time order, from its creation."""
    transition: str | None = None
    """The worker transition it waits for: ``"startup"`` (R111), ``"recovery"`` (R119)."""
    transition_us: int = 0
    failures: int = 0
    migrated_out: int = 0
    failed_requests: int = 0
    lost_tokens: int = 0

    def enter(self, state: str, now_us: int) -> None:
        self.state = state
        self.lifecycle.append((state, now_us))


@dataclass(slots=True, eq=False)
class Migration:
    """R123: one migration of a request: ``{at_us, worker, pool, rank, output_tokens,
    lost_tokens}``."""

    at_us: int
    worker: int
    pool: str
    rank: int
    output_tokens: int
    lost_tokens: int


@dataclass(slots=True, eq=False)
class RequestFate:
    """R118, R123: what failures did to one request."""

    migrations: list[Migration] = field(default_factory=list)
    fail_reason: str | None = None
    lost_tokens: int = 0
    recomputed_tokens: int = 0
    limit: int = 0
    """R118: the lost tokens of its last migration, below which an allotment recomputes."""
    counted: list[tuple[int, int]] = field(default_factory=list)
    """The positions below ``limit`` counted since its last migration, as disjoint ranges."""
    handoff: Handoff | None = None
    """R121, R107: its last handoff before a migration took it back to the prefill side; the
    report's ``handoff`` until its next prefill ends (then ``RequestState.handoff``)."""

    def computed(self, start: int, end: int) -> None:
        """R118: positions ``start`` to ``end - 1`` were computed by an allotment that ended."""
        end = min(end, self.limit)
        if start >= end:
            return
        ranges = self.counted
        new = end - start
        for low, high in ranges:
            new -= max(0, min(high, end) - max(low, start))
        self.recomputed_tokens += new
        ranges.append((start, end))
        ranges.sort()
        merged: list[tuple[int, int]] = []
        for low, high in ranges:
            if merged and low <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], high))
            else:
                merged.append((low, high))
        self.counted = merged


@dataclass(slots=True)
class FleetCounts:
    """R123's ``summary.fleet``."""

    scale_ups: int = 0
    scale_downs: int = 0
    cancelled: int = 0
    drained: int = 0
    failures: int = 0
    ignored_failures: int = 0
    recoveries: int = 0


@dataclass(slots=True, eq=False)
class FleetRecord:
    """What a fleet that changed tells the report (R123)."""

    lives: list[WorkerLife]
    """By global index, every worker created."""
    fates: dict[int, RequestFate]
    """By workload position, the requests a failure touched."""
    counts: FleetCounts
    peak_workers: list[int]
    """By pool: the most workers starting, active or draining after any event."""


class CandidateRouter:
    """R114: one side's routing over its candidates (its routable workers, in global index
    order; or, for a state-aware policy, their schedulers in (worker, rank) order)."""

    __slots__ = ("_current", "_generator", "_last", "_load_weight", "_policy", "_prefill_weight")

    def __init__(self, policy: str, seed: int | None, prefill_weight: int, load_weight: int):
        self._policy = policy
        self._generator = None if seed is None else SplitMix64(seed)
        self._last = -1  # round robin: the global index of the worker joined last
        self._current: dict[int, int] = {}  # weighted round robin: current weights
        self._prefill_weight = prefill_weight
        self._load_weight = load_weight

    def forget(self, index: int) -> None:
        """R114: a worker that stops being a candidate loses its current weight."""
        self._current.pop(index, None)

    def choose_unit(self, candidates: list[Unit], weights: list[int]) -> Unit:
        """Round robin, random, weighted round robin: a worker (R13, R15, R81 over the
        candidates, amended by R114)."""
        policy = self._policy
        if policy == "round_robin":
            chosen = next((unit for unit in candidates if unit.index > self._last), candidates[0])
            self._last = chosen.index
            return chosen
        if policy == "random":
            assert self._generator is not None
            return candidates[self._generator.next() % len(candidates)]
        current = self._current
        total = sum(weights)
        best = 0
        best_weight = 0
        for position, (unit, weight) in enumerate(zip(candidates, weights, strict=True)):
            value = current.get(unit.index, 0) + weight
            current[unit.index] = value
            if position == 0 or value > best_weight:
                best, best_weight = position, value
        chosen = candidates[best]
        current[chosen.index] -= total
        return chosen

    def choose_scheduler(self, candidates: list[Worker], state: RequestState) -> Worker:
        """Least loaded, cache aware (R55, R56, R58 over the candidate schedulers)."""
        if self._policy == "least_loaded":
            keys = [worker.outstanding for worker in candidates]
        else:
            prompt_blocks = candidates[0].memory.prompt_blocks(state)
            keys = [
                self._prefill_weight * (prompt_blocks - worker.memory.cached_blocks(state))
                + self._load_weight * worker.load_blocks
                for worker in candidates
            ]
        lowest = min(keys)
        if self._generator is None:
            return candidates[keys.index(lowest)]
        tied = [worker for worker, key in zip(candidates, keys, strict=True) if key == lowest]
        return tied[self._generator.next() % len(tied)]


class _NoRouter:
    """The base loop's router hooks, unused here: ``CandidateRouter`` routes."""

    def counters_changed(self, fleet: object, worker: int) -> None:
        pass


class FleetEventLoop(EventLoop):
    """``EventLoop`` with section 18's fleet events and candidates."""

    __slots__ = (
        "alive",
        "changes_counts",
        "failures",
        "fates",
        "fleet_instants",
        "last_cooldown",
        "lives",
        "peaks",
        "pool_units",
        "pools",
        "routers",
        "side_units",
        "terminal_cursor",
        "tick_intervals",
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
        super().__init__(scenario, workload, timing, record_trace=record_trace, progress=progress)
        # runs of identical steps, bounded by the fleet events' instants (``_bound_run``); in a
        # disaggregated fleet every step one at a time (handoffs and re-handings change workers)
        self.runs = not self.disaggregated
        instants: set[int] = set()
        intervals: set[int] = set()
        for pool in scenario.pools:
            if pool.scaling is not None:
                instants.update(entry.at_us for entry in pool.scaling.schedule)
                if pool.scaling.autoscale is not None:
                    intervals.add(pool.scaling.autoscale.interval_us)
        if scenario.failures is not None:
            instants.update(event.at_us for event in scenario.failures.events)
        self.fleet_instants = sorted(instants)
        self.tick_intervals = sorted(intervals)
        self.pools = scenario.pools
        self.failures = scenario.failures
        self.lives: list[WorkerLife] = []
        self.pool_units: list[list[Unit]] = [[] for _ in scenario.pools]
        for pool_index, pool in enumerate(scenario.pools):
            for _ in range(pool.workers):
                unit = self.units[len(self.lives)]
                self.pool_units[pool_index].append(unit)
                self.lives.append(
                    WorkerLife(
                        pool_index, len(self.pool_units[pool_index]) - 1, 0, ACTIVE, [(ACTIVE, 0)]
                    )
                )
        for worker in self.workers:
            worker.step_ends = None  # a migrated request's times span workers
        # R99: the sides a router chooses on (one, ``None``, when aggregated)
        self.side_units: dict[str | None, list[Unit]] = {}
        for unit in self.units:
            self.side_units.setdefault(_role(unit), []).append(unit)
        routing = scenario.routing
        self.routers: dict[str | None, CandidateRouter] = {
            "prefill" if self.disaggregated else None: CandidateRouter(
                routing.policy, routing.seed, routing.prefill_weight, routing.load_weight
            )
        }
        if routing.decode is not None:
            self.routers["decode"] = CandidateRouter(
                routing.decode.policy, routing.decode.seed, 1, 1
            )
        self.router = _NoRouter()  # type: ignore[assignment]
        if self.decode_router is not None:
            self.decode_router = _NoRouter()  # type: ignore[assignment]
        self.records_cached = None  # R57: recorded in ``_route`` here
        self.fates: dict[int, RequestFate] = {}
        self.changes_counts = FleetCounts()
        self.peaks = [pool.workers for pool in scenario.pools]
        self.last_cooldown: list[int | None] = [None] * len(scenario.pools)
        self.terminal_cursor = 0
        self.alive = True

    # --- the events of R113

    def run(self) -> None:
        queue = self.queue
        for pool_index, pool in enumerate(self.pools):
            scaling = pool.scaling
            if scaling is None:
                continue
            for entry_index, entry in enumerate(scaling.schedule):
                queue.append((entry.at_us, DECISION, pool_index, entry_index))
            if scaling.autoscale is not None and scaling.autoscale.interval_us <= MAX_TIME_US:
                queue.append((scaling.autoscale.interval_us, DECISION, pool_index, -1))
        if self.failures is not None:
            for position, event in enumerate(self.failures.events):
                queue.append((event.at_us, FAILURE, position, position))
        heapq.heapify(queue)
        super().run()

    def _bound_run(self, step: Step, now_us: int) -> None:
        """A run formed at ``now_us`` keeps the steps ending at or before the first instant at
        or after ``now_us`` of a failure, a schedule entry or a tick (``Step.stop_at``), so that
        the fleet event finds its worker as step-by-step formation would (its step at the
        instant, if any, is one step: a failure cuts it, R117; a tick reads the state, R115).
        A step completion at an instant comes before the fleet events at it (R113)."""
        bound: int | None = None
        instants = self.fleet_instants
        index = bisect_left(instants, now_us)
        if index < len(instants):
            bound = instants[index]
        for interval in self.tick_intervals:  # ticks at k * interval, k >= 1
            tick = max(interval, -(-now_us // interval) * interval)
            if bound is None or tick < bound:
                bound = tick
        if bound is not None:
            step.stop_at(bound)

    def _rank_run(self, rank: Worker, step: Step) -> int:
        """No carried passes (``passes.CarriedSteps``) here: every pass of several ranks is
        formed anew."""
        return 1

    def _processed(self, now_us: int) -> bool:
        """R113: a fleet event is processed only before the stop time and while a request of
        the workload has not reached its terminal state."""
        if self.stop_us is not None and now_us >= self.stop_us:
            return False
        states = self.states
        cursor = self.terminal_cursor
        while cursor < len(states) and states[cursor].terminal_us is not None:
            cursor += 1
        self.terminal_cursor = cursor
        return cursor < len(states)

    def failure(self, now_us: int, order: int, subject: int) -> None:
        """R117: a worker fails, unless it does not exist or is removed or failed (ignored)."""
        if not self._processed(now_us):
            return
        assert self.failures is not None
        event = self.failures.events[subject]
        pool_index = next(i for i, pool in enumerate(self.pools) if pool.name == event.pool)
        members = self.pool_units[pool_index]
        counts = self.changes_counts
        if event.pool_worker >= len(members):
            counts.ignored_failures += 1
            return
        unit = members[event.pool_worker]
        life = self.lives[unit.index]
        if life.state in (REMOVED, FAILED):
            counts.ignored_failures += 1
            return
        counts.failures += 1
        life.failures += 1
        was = life.state
        ranks = unit.ranks if isinstance(unit, RankGroup) else [unit]
        in_flight = self._cut(unit, now_us)  # 1. the pass in flight is cut
        # 2. the requests on the worker, and their lost tokens (R46, with the cut pass's);
        # R121: in a disaggregated fleet also those whose KV it holds or was to receive
        affected: list[tuple[RequestState, Worker, int, bool]] = []  # (.., re-handed)
        for rank in ranks:
            allotted = {
                id(state): tokens
                for step in in_flight
                if step.rank == rank.rank
                for state, tokens in step.prefill
            }
            decoding = {
                id(state) for step in in_flight if step.rank == rank.rank for state in step.decode
            }
            for state in rank.running:
                lost = _cached_tokens(state, rank, allotted, decoding)
                affected.append((state, rank, lost, False))
            for state in rank.waiting:
                affected.append((state, rank, 0, False))
        changed: set[Worker] = set()  # R121: decode schedulers whose queue or blocks changed
        if self.disaggregated:
            affected.extend(self._disaggregated_affected(ranks, changed, now_us))
        affected.sort(key=lambda item: item[0].position)
        for rank in ranks:  # 3. the cache is lost; the worker keeps no request
            self._empty(rank)
            changed.discard(rank)
        if isinstance(unit, RankGroup):
            unit.in_flight = None
            unit.carry = CarriedSteps(len(unit.ranks))
        self.ready.pop(unit.index, None)
        life.enter(FAILED, now_us)  # 4. the state
        self.routers[_side(self, unit)].forget(unit.index)
        recover = event.recover_after_us
        if was != DRAINING and recover is not None and now_us + recover <= MAX_TIME_US:
            life.transition = "recovery"
            life.transition_us = now_us + recover
            heapq.heappush(self.queue, (now_us + recover, TRANSITION, unit.index, unit.index))
        else:
            life.transition = None
        assert self.failures is not None
        policy = self.failures.policy
        limit = self.failures.max_migrations
        pool_name = self.pools[pool_index].name
        sources: list[Worker] = []  # prefill schedulers that released blocks (R121)
        for state, rank, lost, rehanded in affected:
            fate = self.fates.setdefault(state.position, RequestFate())
            fate.lost_tokens += lost
            life.lost_tokens += lost
            if policy == "fail" or (limit is not None and len(fate.migrations) >= limit):
                life.failed_requests += 1
                reason = "worker_failure" if policy == "fail" else "migration_limit"
                if rehanded:  # R121: its prefill scheduler releases its blocks
                    sources.append(self._release_source(state))
                self._fail(state, fate, reason, now_us)
                continue
            life.migrated_out += 1
            produced = state.token_times_us.count
            fate.migrations.append(
                Migration(now_us, unit.index, pool_name, rank.rank, produced, lost)
            )
            if rehanded:  # R121: Held again on its prefill scheduler, routed on the decode side
                last = state.handoff
                assert last is not None
                _held_again(state)
                decode = self._choose(state, "decode")
                if decode is None:  # R114: it fails Held, its prefill scheduler releases
                    sources.append(self._release_source(state))
                    # R121: its handoff stays its last one, to d (d its decode_worker)
                    last.source_blocks = HeldBlocks()
                    state.handoff = last
                    self._fail(state, fate, "no_routable_worker", now_us)
                    continue
                _rehand(state, decode)
                changed.add(decode)
                continue
            fate.limit = lost
            fate.counted = []
            state.recomputing = produced > 0
            if state.handoff is not None:  # R121: still its last handoff, until its next one
                fate.handoff = state.handoff
            _reset_for_prefill(state)
            heapq.heappush(self.queue, (now_us, ARRIVAL, state.position, -1 - state.position))
        # R121: the decode schedulers the failure changed are tried, in (worker, rank) order;
        # the workers that lost or released something may now be drained
        for decode in sorted(changed, key=lambda each: each.scheduler):
            self._try_reservations(decode, now_us)
            self._request_unit_scheduling(self.units[decode.index], now_us)
        for source in sources:
            self._request_unit_scheduling(self.units[source.index], now_us)
        for other in {*changed, *sources}:
            if self.lives[other.index].state == DRAINING:
                self._removed_if_drained(self.units[other.index], now_us)

    def _disaggregated_affected(
        self, ranks: list[Worker], changed: set[Worker], now_us: int
    ) -> list[tuple[RequestState, Worker, int, bool]]:
        """R121: the requests a failure of ``ranks`` affects beyond its queues: on a prefill
        worker, those whose KV it holds (Pending, Transferring; a Ready one keeps its
        activation, its source release then doing nothing); on a decode worker, those Pending
        in its reservation queues, Transferring or Ready to it (re-handed)."""
        affected: list[tuple[RequestState, Worker, int, bool]] = []
        mine = set(ranks)
        if ranks[0].role == "prefill":
            for state in self.states:
                handoff = state.handoff
                if (
                    handoff is None
                    or handoff.source not in mine
                    or handoff.activation_us is not None
                    or state.terminal_us is not None
                ):
                    continue
                if handoff.transfer_end_us is not None:  # Ready: its KV is on its decode side
                    handoff.source_blocks = HeldBlocks()
                    continue
                decode = handoff.decode
                assert decode is not None
                if state in decode.pending:
                    decode.pending.remove(state)
                else:  # Transferring: the blocks reserved for it are released (R46)
                    decode.incoming.remove(state)
                    decode.memory.release(state)
                decode.outstanding -= 1
                decode.load_blocks -= decode.memory.prompt_blocks(state)
                changed.add(decode)
                handoff.source_blocks = HeldBlocks()
                affected.append((state, handoff.source, state.prefill_target, False))
            return affected
        for rank in ranks:
            for state in [*rank.pending, *rank.incoming]:  # Pending, Transferring or Ready
                affected.append((state, rank, 0, True))
            rank.pending.clear()
            rank.incoming.clear()
        return affected

    def _release_source(self, state: RequestState) -> Worker:
        """R121: a request failed while its KV is still on its prefill scheduler: that
        scheduler releases its blocks (R46) now."""
        handoff = state.handoff
        assert handoff is not None
        source = handoff.source
        memory = source.memory
        assert isinstance(memory, BlockMemory)
        memory.cache.release(handoff.source_blocks)
        handoff.source_blocks = HeldBlocks()
        return source

    def transfer_end(self, now_us: int, order: int, position: int) -> None:
        """R104, unless a failure discarded the transfer (R121)."""
        handoff = self.states[position].handoff
        if (
            handoff is None
            or handoff.decode is None
            or handoff.transfer_end_us is not None
            or handoff.reserved_us is None
            or handoff.transfer_us is None
            or handoff.reserved_us + handoff.transfer_us != now_us
            or self.states[position] not in handoff.decode.incoming
        ):
            return
        super().transfer_end(now_us, order, position)

    def _activate(self, state: RequestState, now_us: int) -> None:
        """R104, then R112: a draining prefill worker whose last request left is removed."""
        super()._activate(state, now_us)
        handoff = state.handoff
        assert handoff is not None
        source = self.units[handoff.source.index]
        if self.lives[source.index].state == DRAINING:
            self._removed_if_drained(source, now_us)

    def transition(self, now_us: int, order: int, subject: int) -> None:
        """R111: a startup end; R119: a recovery start."""
        if not self._processed(now_us):
            return
        life = self.lives[subject]
        if life.transition_us != now_us or life.transition is None:
            return
        unit = self.units[subject]
        pool = self.pools[life.pool]
        if life.transition == "recovery":
            if life.state != FAILED:
                return
            self.changes_counts.recoveries += 1
            self._renew(unit)
            self._start(unit, life, pool, now_us)
            self._peak(life.pool)
            return
        if life.state == STARTING:
            life.transition = None
            life.enter(ACTIVE, now_us)

    def decision(self, now_us: int, order: int, subject: int) -> None:
        """R110: a schedule entry; R115: a tick of the reactive policy."""
        if not self._processed(now_us):
            return
        pool = self.pools[order]
        scaling = pool.scaling
        assert scaling is not None
        if subject >= 0:
            self._apply(order, scaling.schedule[subject].target, now_us)
            return
        autoscale = scaling.autoscale
        assert autoscale is not None
        effective = self._effective(order)
        target = None
        last = self.last_cooldown[order]
        cooling = None  # when a cooldown that stopped this tick ends
        if effective < autoscale.min:
            target = autoscale.min
        elif effective > autoscale.max:
            target = autoscale.max
        elif last is not None and now_us < last + autoscale.cooldown_us:
            cooling = last + autoscale.cooldown_us
        else:
            num, den = self._metric(order, autoscale.metric)
            if den and num * 1000 > autoscale.up_permille * den and effective < autoscale.max:
                target = min(effective + autoscale.step, autoscale.max)
            elif den and num * 1000 < autoscale.down_permille * den and effective > autoscale.min:
                target = max(effective - autoscale.step, autoscale.min)
        if target is not None:
            self._apply(order, target, now_us)
            if target != effective:
                self.last_cooldown[order] = now_us
        self._next_tick(order, autoscale.interval_us, now_us, target is None, cooling)

    def _next_tick(
        self, order: int, interval_us: int, now_us: int, idle: bool, cooling: int | None
    ) -> None:
        """R115: the pool's next tick, at ``now + interval``. A tick that changed nothing
        (``idle``) reads the same state at every later tick until some other event happens or
        its cooldown ends (what a tick reads changes only at events, every step being formed one
        at a time here), so the ticks before the first of those would change nothing either and
        are skipped; the results are those of processing each."""
        following = now_us + interval_us
        if idle:
            queue = self.queue
            if not queue and cooling is None:
                return  # nothing else will ever happen: every later tick changes nothing
            wake = min([queue[0][0]] if queue else [], default=cooling)
            if cooling is not None and wake is not None:
                wake = min(wake, cooling)
            assert wake is not None
            following = max(following, -(-wake // interval_us) * interval_us)
        if following <= MAX_TIME_US:
            heapq.heappush(self.queue, (following, DECISION, order, -1))

    def arrival(self, now_us: int, order: int, position: int) -> None:
        """R10, R12; R118: a migration arrival (``position`` is then ``-1 - position``)."""
        if position >= 0:
            super().arrival(now_us, order, position)
            return
        state = self.states[-1 - position]
        chosen = self._choose(state, None if not self.disaggregated else "prefill")
        if chosen is None:  # R114: no candidate
            fate = self.fates[state.position]
            self._fail(state, fate, "no_routable_worker", now_us)
            return
        self._join(state, chosen, now_us)

    def scheduling(self, now_us: int, order: int, index: int) -> None:
        """R109: a starting, failed or removed worker forms no step."""
        unit = self.units[index]
        if self.lives[index].state not in (ACTIVE, DRAINING) or not _has_requests(unit):
            unit.schedule_pending = False
            return
        super().scheduling(now_us, order, index)

    def step_completion(self, now_us: int, order: int, index: int) -> None:
        """R20, R51, then R118's recomputed positions, then R112: a draining worker with
        nothing left is removed."""
        unit = self.units[index]
        if order != unit.completion_sequence:
            return
        if self.fates:
            steps = unit.in_flight if isinstance(unit, RankGroup) else [unit.in_flight]
            for step in steps or ():
                if step is None:
                    continue
                for state, tokens in step.prefill:
                    fate = self.fates.get(state.position)
                    if fate is not None and fate.limit:
                        fate.computed(state.prefilled, state.prefilled + tokens)
        super().step_completion(now_us, order, index)
        if self.lives[index].state == DRAINING:
            self._removed_if_drained(unit, now_us)

    # --- routing over the candidates (R114)

    def _route(self, state: RequestState, now_us: int) -> None:
        """R12, R114: an accepted request joins a candidate; with none it is rejected."""
        chosen = self._choose(state, "prefill" if self.disaggregated else None)
        if chosen is None:
            state.reject_reason = "no_routable_worker"
            state.terminal_us = now_us
            if self.releases:
                self._release(self.arrivals.released_by(state.position, now_us))
            return
        self._join(state, chosen, now_us)

    def _hand_off(self, state: RequestState, source: Worker, now_us: int) -> None:
        """R99, R114: a Held request is routed among the routable decode schedulers."""
        decode = self._choose(state, "decode")
        if decode is None:  # R114: it fails, its prefill scheduler releases its blocks
            fate = self.fates.setdefault(state.position, RequestFate())
            source.memory.release(state)
            # R107: its prefill ended (``prefill_end_us``); it was routed on no decode side
            state.handoff = Handoff(prefill_end_us=now_us, source=source)
            self._fail(state, fate, "no_routable_worker", now_us)
            unit = self.units[source.index]
            self._request_unit_scheduling(unit, now_us)
            if self.lives[unit.index].state == DRAINING:
                self._removed_if_drained(unit, now_us)
            return
        self._join_decode(state, source, decode, now_us)

    def _choose(self, state: RequestState, side: str | None) -> Worker | None:
        """R114: the scheduler the request joins, or ``None`` without a candidate."""
        lives = self.lives
        candidates = [
            unit for unit in self.side_units.get(side, []) if lives[unit.index].state == ACTIVE
        ]
        if not candidates:
            return None
        router = self.routers[side]
        state_aware = self.decode_state_aware if side == "decode" else self.state_aware
        if state_aware:  # R82: among the candidates' schedulers
            schedulers = [
                rank
                for unit in candidates
                for rank in (unit.ranks if isinstance(unit, RankGroup) else [unit])
            ]
            worker = router.choose_scheduler(schedulers, state)
            pool = self.pools[lives[worker.index].pool]
            if side != "decode" and pool.kv_cache is not None and pool.kv_cache.prefix_caching:
                state.cached_blocks_at_routing = worker.memory.cached_blocks(state)
            return worker
        weights = [self.pools[lives[unit.index].pool].weight for unit in candidates]
        unit = router.choose_unit(candidates, weights)
        return unit.next_rank() if isinstance(unit, RankGroup) else unit

    # --- what the events share

    def _fail(self, state: RequestState, fate: RequestFate, reason: str, now_us: int) -> None:
        """R118: the request reaches Failed at ``now_us``; R120: as a terminal state it
        releases what a rejected one would."""
        fate.fail_reason = reason
        state.fail_reason = reason
        state.terminal_us = now_us
        if self.releases:
            self._release(self.arrivals.released_by(state.position, now_us))

    def _cut(self, unit: Unit, now_us: int) -> list[Step]:
        """R117 step 1: the pass in flight is cut at the failure, as R62 cuts one at D."""
        steps: list[Step] = []
        if isinstance(unit, RankGroup):
            steps = unit.in_flight or []
            for step in steps:
                unit.ranks[step.rank].cut_step(step, now_us)
                step.cut_us = now_us
            if steps:
                unit.ended(steps[0].start_us, now_us)
        elif unit.in_flight is not None:
            steps = [unit.in_flight]
            unit.cut_step(steps[0], now_us)
            steps[0].cut_us = now_us
            unit.in_flight = None
        unit.completion_sequence = -1  # its completion never happens
        return steps

    def _empty(self, rank: Worker) -> None:
        """R117 steps 2 and 3: the rank keeps no request, and its cache is lost."""
        for state in [*rank.running, *rank.waiting]:
            state.prefilled = 0
            state.decoding = False
            state.cached_tokens = 0
            state.blocks = HeldBlocks()
        rank.running = []
        rank.waiting.clear()
        rank.preempted = []
        rank.retracted = []
        rank.outstanding = 0
        rank.load_blocks = 0
        memory = rank.memory
        if isinstance(memory, BlockMemory):
            fresh = self.factory.memory(self.lives[rank.index].pool, rank.side_index)
            assert isinstance(fresh, BlockMemory)
            fresh.cache.counters = memory.counters
            memory.cache = fresh.cache
            memory._offer = None

    def _renew(self, unit: Unit) -> None:
        """R119: a recovered worker is in every other way a new worker (R111)."""
        ranks = unit.ranks if isinstance(unit, RankGroup) else [unit]
        for rank in ranks:
            rank.ratio = rank.formation.initial_ratio()
            rank.schedule_pending = False
        if isinstance(unit, RankGroup):
            unit.rotation = 0
            unit.schedule_pending = False

    def _start(self, unit: Unit, life: WorkerLife, pool: Pool, now_us: int) -> None:
        """R111, R119: the worker is starting until its pool's startup ends (active at once
        with startup 0)."""
        startup = 0 if pool.scaling is None else pool.scaling.startup_us
        if startup == 0:
            life.transition = None
            life.enter(ACTIVE, now_us)
            return
        life.enter(STARTING, now_us)
        life.transition = "startup"
        life.transition_us = now_us + startup
        if now_us + startup <= MAX_TIME_US:
            heapq.heappush(self.queue, (now_us + startup, TRANSITION, unit.index, unit.index))

    def _effective(self, pool_index: int) -> int:
        """R109: the pool's active and starting workers."""
        lives = self.lives
        return sum(
            1
            for unit in self.pool_units[pool_index]
            if lives[unit.index].state in (ACTIVE, STARTING)
        )

    def _peak(self, pool_index: int) -> None:
        lives = self.lives
        count = sum(
            1
            for unit in self.pool_units[pool_index]
            if lives[unit.index].state in (ACTIVE, STARTING, DRAINING)
        )
        self.peaks[pool_index] = max(self.peaks[pool_index], count)

    def _apply(self, pool_index: int, target: int, now_us: int) -> None:
        """R110 to R112: bring the pool's effective count to ``target``."""
        effective = self._effective(pool_index)
        pool = self.pools[pool_index]
        counts = self.changes_counts
        lives = self.lives
        if target > effective:
            workers = len(self.units) + target - effective
            ranks = len(self.workers) + (target - effective) * pool.dp_size
            if workers > MAX_CREATED or ranks > MAX_CREATED:
                raise UnrepresentableFleet(
                    pool=pool.name, at_us=now_us, workers=workers, ranks=ranks
                )
            for _ in range(target - effective):
                unit = self.factory.add(pool_index)
                members = self.pool_units[pool_index]
                life = WorkerLife(pool_index, len(members), now_us, STARTING, [])
                members.append(unit)
                self.lives.append(life)
                for rank in unit.ranks if isinstance(unit, RankGroup) else [unit]:
                    rank.step_ends = None
                self.side_units.setdefault(_role(unit), []).append(unit)
                self._start(unit, life, pool, now_us)
            counts.scale_ups += target - effective
            self._peak(pool_index)
            return
        if target == effective:
            return
        left = effective - target
        counts.scale_downs += left
        members = self.pool_units[pool_index]
        for unit in reversed(members):  # R112: cancel the highest starting workers first
            if left and lives[unit.index].state == STARTING:
                lives[unit.index].enter(REMOVED, now_us)
                lives[unit.index].transition = None
                counts.cancelled += 1
                left -= 1
        for unit in reversed(members):  # then drain the highest active ones
            if left and lives[unit.index].state == ACTIVE:
                lives[unit.index].enter(DRAINING, now_us)
                self.routers[_side(self, unit)].forget(unit.index)
                left -= 1
                self._removed_if_drained(unit, now_us)

    def _removed_if_drained(self, unit: Unit, now_us: int) -> None:
        """R112: a draining worker with no pass in flight and no request is removed."""
        if unit.in_flight is not None or _has_work(unit):
            return
        if self.disaggregated and _role(unit) == "prefill":  # R112: it holds their blocks
            ranks = set(unit.ranks if isinstance(unit, RankGroup) else [unit])
            for state in self.states:
                handoff = state.handoff
                if (
                    handoff is not None
                    and handoff.source in ranks
                    and handoff.activation_us is None
                    and state.terminal_us is None
                ):
                    return
        self.lives[unit.index].enter(REMOVED, now_us)
        self.changes_counts.drained += 1

    def _metric(self, pool_index: int, metric: str) -> tuple[int, int]:
        """R115: the metric over the pool's active workers, as ``(num, d)``."""
        lives = self.lives
        active = [unit for unit in self.pool_units[pool_index] if lives[unit.index].state == ACTIVE]
        ranks = [
            rank
            for unit in active
            for rank in (unit.ranks if isinstance(unit, RankGroup) else [unit])
        ]
        if metric == "waiting_per_worker":
            return sum(len(rank.waiting) + len(rank.pending) for rank in ranks), len(active)
        if metric == "outstanding_per_worker":
            return sum(rank.outstanding for rank in ranks), len(active)
        held = 0
        blocks = 0
        for rank in ranks:
            memory = rank.memory
            assert isinstance(memory, BlockMemory)
            held += memory.cache.held
            blocks += memory.cache.blocks
        return held, blocks

    def record(self) -> FleetRecord:
        return FleetRecord(self.lives, self.fates, self.changes_counts, self.peaks)


def _cached_tokens(
    state: RequestState, rank: Worker, allotted: dict[int, int], decoding: set[int]
) -> int:
    """R46: a running request's cached tokens on ``rank`` now, the pass in flight's included
    (its blocks were taken when it was formed)."""
    if not rank.memory.unlimited:
        return state.cached_tokens
    if state.decoding:
        context = state.request.prompt_tokens + state.token_times_us.count + state.hidden - 1
        return context + (1 if id(state) in decoding else 0)
    return state.prefilled + allotted.get(id(state), 0)


def _reset_for_prefill(state: RequestState) -> None:
    """R118, R121: a migrated request arrives (on the prefill side) with no handoff; its
    hidden token is hidden again, its identities those of the cache it meets next."""
    state.handoff = None
    state.hidden = 0
    state.identities = None
    state.output_limit = state.request.max_output_tokens
    state.prefilled = 0
    state.decoding = False
    state.cached_tokens = 0
    state.blocks = HeldBlocks()


def _held_again(state: RequestState) -> None:
    """R121: a re-handed request is Held again on its prefill scheduler: its handoff keeps its
    prefill end and its KV there, and has no decode-side stage yet (R107: ``null`` until it is
    routed on the decode side)."""
    old = state.handoff
    assert old is not None
    state.handoff = Handoff(
        prefill_end_us=old.prefill_end_us, source=old.source, source_blocks=old.source_blocks
    )
    state.blocks = HeldBlocks()
    state.cached_tokens = 0


def _rehand(state: RequestState, decode: Worker) -> None:
    """R121: a request Held again joins ``decode``'s reservation queue (R99, R102)."""
    handoff = state.handoff
    assert handoff is not None
    handoff.decode = decode
    decode.routed += 1
    decode.outstanding += 1
    decode.load_blocks += decode.memory.prompt_blocks(state)
    decode.pending.append(state)


def _has_requests(unit: Unit) -> bool:
    """R16, R83: a rank has a request running or waiting."""
    ranks = unit.ranks if isinstance(unit, RankGroup) else [unit]
    return any(rank.running or rank.waiting for rank in ranks)


def _has_work(unit: Unit) -> bool:
    ranks = unit.ranks if isinstance(unit, RankGroup) else [unit]
    return any(rank.running or rank.waiting or rank.pending or rank.incoming for rank in ranks)


def _role(unit: Unit) -> str | None:
    return unit.ranks[0].role if isinstance(unit, RankGroup) else unit.role


def _side(loop: FleetEventLoop, unit: Unit) -> str | None:
    role = _role(unit)
    if role is None:
        return None
    return role
