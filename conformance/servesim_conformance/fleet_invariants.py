"""What every report 9.0 of a fleet that changes must show (SPEC.md section 18, R109 to R124).

Each check reads only the scenario and the report, so it holds any implementation to the rules,
not to the reference's code. A violation names its rule and the JSON pointer of the offending
member (``R109: /workers/3/lifecycle/2: ...``):

- ``check_lifecycles``: every worker's lifecycle starts at its creation, moves only along R109's
  edges in time order, ends nothing after ``removed`` (nor after a draining worker's failure),
  turns ``starting`` into ``active`` exactly ``startup_us`` later (R111), and changes nothing
  after the run's last terminal time (R113); added workers take the next global and pool
  indices in creation order (R111);
- ``check_failure_events``: every failure in a lifecycle is an input event of that worker at
  that time, every recovery starts ``recover_after_us`` after it (R116, R117, R119), every
  event before the last terminal time that names a live worker fails it, and the fleet's failure
  counts are the lifecycles' (R123);
- ``check_scaling``: after a schedule entry the pool's effective count is its target (R110), and
  after a reactive tick it lies within ``[min, max]`` (R115);
- ``check_routed_states``: no request is routed (at its arrival, a migration arrival, or on the
  decode side at its prefill end) to a worker that is not ``active`` then (R109, R114);
- ``check_migrations``: a migrated request produces no token twice: its token times strictly
  increase and number its ``output_tokens``, its ``migrations`` are in time order with
  nondecreasing ``output_tokens`` equal to its tokens at each failure, each names a worker that
  failed then, their lost tokens are within the request's, and ``recomputed_tokens <=
  lost_tokens`` (R117, R118, R123);
- ``check_outcomes``: every request reaches exactly one terminal state, with ``fail_reason`` and
  ``reject_reason`` consistent with its outcome, the policy and the migration limit, and the
  summary's counts add up (R9, R114, R118, R123);
- ``check_worker_time``: each worker's ``worker_us`` and per-state times are its lifecycle's
  intervals clipped to the accounting window, ``worker_us = starting_us + active_us +
  draining_us``, ``busy_us <= worker_us``, and the utilizations are over worker time (R122);
- ``check_fleet_sums``: pools' and the summary's sums (worker time, failures, migrations,
  failed, lost and recomputed tokens, ``summary.fleet`` against the lifecycles) and
  ``peak_workers`` within the bounds the lifecycles give (R123);
- ``check_trace_cuts``: every traced step starts on an active or draining worker, a step cut by
  a failure says so in ``cut_us``, and a ``cut_us`` is a failure of its worker or the stop time
  inside the step (R117, R122, R123).

For a fleet that never changes every check reduces to R124's migration of an 8.0 report (one
``active`` entry at 0, ``worker_us`` the makespan, nothing failed or migrated), so the checks run
on every report 9.0.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Sequence

from servesim_conformance.violations import Document, require

#: R109: the states and the only transitions between them.
STATES = ("starting", "active", "draining", "failed", "removed")
EDGES = frozenset(
    {
        ("starting", "active"),
        ("starting", "removed"),
        ("active", "draining"),
        ("draining", "removed"),
        ("starting", "failed"),
        ("active", "failed"),
        ("draining", "failed"),
        ("failed", "starting"),
        ("failed", "active"),
    }
)
#: R109: the states a worker is paid for (R122) and counts in its pool's peak (R123).
LIVE = ("starting", "active", "draining")
#: R118, R123: the reasons a request fails.
FAIL_REASONS = ("worker_failure", "migration_limit", "no_routable_worker")
#: R28, R123: the terminal states.
OUTCOMES = ("completed", "rejected", "cut_off", "failed")
#: R122: worker-hours are worker time over this many microseconds.
US_PER_HOUR = 3_600_000_000


# --- Reading the scenario -----------------------------------------------------------------------


def pool_specs(scenario: Document) -> list[Document]:
    """R77, R110: the pools in pool order, each with its ``name``, initial ``workers`` and
    ``scaling`` (``{}`` without one); a fleet of ``fleet.workers`` is the pool ``"default"``."""
    fleet = scenario["fleet"]
    if "pools" in fleet:
        return [{**pool, "scaling": pool.get("scaling", {})} for pool in fleet["pools"]]
    return [{"name": "default", "workers": fleet["workers"], "scaling": fleet.get("scaling", {})}]


def startup_of(scenario: Document) -> dict[str, int]:
    """R110, R111: each pool's ``startup_us`` (0 when absent)."""
    return {
        pool["name"]: int(pool["scaling"].get("startup_us", 0)) for pool in pool_specs(scenario)
    }


def failure_events(scenario: Document) -> list[Document]:
    """R116: the failure events, in list order ([] without ``failures``)."""
    failures: Document | None = scenario.get("failures")
    return [] if failures is None else list(failures["events"])


def is_disaggregated(scenario: Document) -> bool:
    """R97: whether the pools have roles."""
    return any("role" in pool for pool in scenario["fleet"].get("pools", []))


def stop_of(scenario: Document) -> int | None:
    """R62: the stop time D, None without one."""
    stop: int | None = scenario.get("stop_at_us")
    return stop


# --- Reading the report -------------------------------------------------------------------------


def last_terminal(report: Document) -> int:
    """R113: the run's last terminal time; no worker changes state after it."""
    return max(int(entry["terminal_us"]) for entry in report["requests"])


def window(report: Document) -> tuple[int, int]:
    """R122: the accounting window ``[first_arrival_us, first_arrival_us + makespan_us]``."""
    summary = report["summary"]
    first = summary["first_arrival_us"]
    start = 0 if first is None else int(first)
    return start, start + int(summary["makespan_us"])


#: R113: the priorities of the events a state-reading event may follow at its instant.
PASS_END, FAILURE, ARRIVAL, SCHEDULING = 0, 1, 4, 5


def change_priorities(worker: Document, *, initial: bool) -> list[int]:
    """R113: the priority of the event that made each lifecycle entry: -1 for an initial
    worker's creation (before every event), 1 a failure, 2 a recovery start or a startup end,
    6 a decision (an added worker's creation, a drain, a cancellation, and a removal at the
    decision that drained the worker), 0 the removal of a worker drained earlier (at a step
    completion: the earliest event that can take its last request; later ones of its instant
    find it removed or draining alike, neither of them routable nor failing)."""
    result: list[int] = []
    entries = worker["lifecycle"]
    for index, entry in enumerate(entries):
        state = entry["state"]
        before = entries[index - 1] if index else None
        if before is None:
            result.append(-1 if initial else 6)
        elif state == "failed":
            result.append(1)
        elif state in ("starting", "active"):
            result.append(2)
        elif state == "draining":
            result.append(6)
        elif before["state"] == "draining" and before["at_us"] < entry["at_us"]:
            result.append(0)
        else:
            result.append(6)
    return result


def state_at(report: Document, worker: Document, time: int, priority: int) -> str | None:
    """R113, R114: the worker's state as an event of instant ``time`` and ``priority`` sees
    it: after every change before ``time`` and the changes of ``time`` made by events of a
    smaller priority. None before the worker exists."""
    initial = is_initial(report, worker)
    state: str | None = None
    for entry, made_by in zip(
        worker["lifecycle"], change_priorities(worker, initial=initial), strict=True
    ):
        if entry["at_us"] > time or (entry["at_us"] == time and made_by >= priority):
            break
        state = entry["state"]
    return state


def intervals(worker: Document) -> Iterator[tuple[str, int, int | None]]:
    """Each state the worker held, from when to when (None: to the end of time)."""
    entries = worker["lifecycle"]
    for index, entry in enumerate(entries):
        end = int(entries[index + 1]["at_us"]) if index + 1 < len(entries) else None
        yield entry["state"], int(entry["at_us"]), end


def clipped(start: int, end: int | None, low: int, high: int) -> int:
    """The length of ``[start, end)`` within ``[low, high]``."""
    top = high if end is None else min(end, high)
    return max(0, top - max(start, low))


def initial_count(report: Document, pool: str) -> int:
    """R77, R123: the pool's initial workers, as the report's pool entry gives them."""
    for entry in report["pools"]:
        if entry["name"] == pool:
            return int(entry["workers"])
    raise KeyError(pool)


def is_initial(report: Document, worker: Document) -> bool:
    """R111: a worker of the initial fleet (its pool index below the pool's initial count)."""
    return int(worker["pool_worker"]) < initial_count(report, worker["pool"])


# --- R109, R111, R113: lifecycles ---------------------------------------------------------------


def check_lifecycles(scenario: Document, report: Document) -> None:
    """R109, R111, R113, R123: each lifecycle begins at the worker's creation, moves along
    R109's edges only, in time order, has nothing after ``removed`` or after a draining worker's
    failure (R117 step 4), turns ``starting`` into ``active`` exactly ``startup_us`` later, and
    changes nothing after the last terminal time; the workers are in global index order, the
    initial ones first, the added ones in creation order with their pools' next indices."""
    startup = startup_of(scenario)
    end = last_terminal(report)
    names = [pool["name"] for pool in pool_specs(scenario)]
    added_so_far: Counter[str] = Counter()
    previous_creation: tuple[int, int] | None = None
    for position, worker in enumerate(report["workers"]):
        where = f"/workers/{position}"
        require(worker["worker"] == position, "R111", f"{where}/worker: {worker['worker']}")
        lifecycle = worker["lifecycle"]
        require(len(lifecycle) >= 1, "R123", f"{where}/lifecycle: empty")
        first = lifecycle[0]
        require(
            worker["created_us"] == first["at_us"],
            "R123",
            f"{where}/created_us: {worker['created_us']}, its lifecycle begins at {first['at_us']}",
        )
        pool = worker["pool"]
        if is_initial(report, worker):
            require(
                first == {"state": "active", "at_us": 0},
                "R109",
                f"{where}/lifecycle/0: an initial worker begins {first}",
            )
        else:
            require(
                first["state"] in ("starting", "active"),
                "R111",
                f"{where}/lifecycle/0: an added worker begins {first['state']}",
            )
            if first["state"] == "active":
                require(startup[pool] == 0, "R111", f"{where}/lifecycle/0: active at creation")
            else:
                require(startup[pool] > 0, "R111", f"{where}/lifecycle/0: starting, startup 0")
            expected = initial_count(report, pool) + added_so_far[pool]
            require(
                worker["pool_worker"] == expected,
                "R111",
                f"{where}/pool_worker: {worker['pool_worker']}, the pool's next is {expected}",
            )
            added_so_far[pool] += 1
            creation = (int(worker["created_us"]), names.index(pool))
            require(
                previous_creation is None or creation >= previous_creation,
                "R111",
                f"{where}/created_us: created before the worker of the index below it",
            )
            previous_creation = creation
        _check_edges(worker, where, startup[pool], end)


def _check_edges(worker: Document, where: str, startup: int, end: int) -> None:
    """R109, R111, R113, R117: the edges of one lifecycle."""
    entries = worker["lifecycle"]
    for index, entry in enumerate(entries):
        pointer = f"{where}/lifecycle/{index}"
        require(entry["state"] in STATES, "R109", f"{pointer}: state {entry['state']}")
        require(entry["at_us"] <= end, "R113", f"{pointer}: at {entry['at_us']}, after {end}")
        if index == 0:
            continue
        before = entries[index - 1]
        edge = (before["state"], entry["state"])
        require(edge in EDGES, "R109", f"{pointer}: {edge[0]} -> {edge[1]} is no transition")
        require(before["at_us"] <= entry["at_us"], "R123", f"{pointer}: out of time order")
        if edge == ("starting", "active"):
            require(
                entry["at_us"] == before["at_us"] + startup,
                "R111",
                f"{pointer}: active at {entry['at_us']}, starting at {before['at_us']} with "
                f"startup_us {startup}",
            )
        elif before["state"] == "starting":
            # a cancellation is a decision, after the startup end of its instant (R113); a
            # failure comes before it
            limit = before["at_us"] + startup
            ok = entry["at_us"] < limit if entry["state"] == "removed" else entry["at_us"] <= limit
            require(ok, "R111", f"{pointer}: {entry['state']} after the startup's end {limit}")
        if edge[0] == "failed" and index >= 2:
            require(
                entries[index - 2]["state"] != "draining",
                "R117",
                f"{pointer}: a worker that failed while draining came back",
            )
    last = entries[-1]
    if last["state"] == "starting":
        # its startup end was dropped: at or after the run's last terminal time (R113)
        require(
            last["at_us"] + startup >= end,
            "R111",
            f"{where}/lifecycle/{len(entries) - 1}: still starting, yet its startup ends at "
            f"{last['at_us'] + startup}, before the last terminal time {end}",
        )


# --- R116, R117, R119: failures and recoveries --------------------------------------------------


def _worker_named(report: Document, pool: str, pool_worker: int) -> tuple[int, Document] | None:
    for position, worker in enumerate(report["workers"]):
        if worker["pool"] == pool and worker["pool_worker"] == pool_worker:
            return position, worker
    return None


def check_failure_events(scenario: Document, report: Document) -> None:
    """R116, R117, R119, R123: every ``failed`` entry is an input event of its worker at its
    time; a recovery follows it exactly ``recover_after_us`` later and only for a worker that
    was not draining; an event before the last terminal time (and the stop time) that finds its
    worker starting, active or draining fails it; the workers' and the summary's counts of
    failures, ignored failures and recoveries are the lifecycles'."""
    events = failure_events(scenario)
    end = last_terminal(report)
    stop = stop_of(scenario)
    by_worker: dict[tuple[str, int], dict[int, Document]] = {}
    for each in events:
        by_worker.setdefault((each["pool"], each["pool_worker"]), {})[each["at_us"]] = each
    failures = recoveries = 0
    for position, worker in enumerate(report["workers"]):
        own = by_worker.get((worker["pool"], worker["pool_worker"]), {})
        entries = worker["lifecycle"]
        count = 0
        for index, entry in enumerate(entries):
            if entry["state"] != "failed":
                continue
            count += 1
            pointer = f"/workers/{position}/lifecycle/{index}"
            found = own.get(entry["at_us"])
            require(found is not None, "R117", f"{pointer}: no failure event at {entry['at_us']}")
            assert found is not None
            event: Document = found
            was_draining = entries[index - 1]["state"] == "draining"
            recover = event.get("recover_after_us")
            if index + 1 < len(entries):
                after = entries[index + 1]
                recoveries += 1
                require(
                    recover is not None and not was_draining,
                    "R119",
                    f"{pointer}: recovered without a recovery (or after draining)",
                )
                require(
                    after["at_us"] == entry["at_us"] + recover,
                    "R119",
                    f"/workers/{position}/lifecycle/{index + 1}: recovery at {after['at_us']}, "
                    f"the event says {entry['at_us']} + {recover}",
                )
            elif recover is not None and not was_draining:
                start = entry["at_us"] + recover
                require(
                    start >= end or (stop is not None and start >= stop),
                    "R119",
                    f"{pointer}: no recovery at {start}, before the last terminal time {end}",
                )
        require(
            worker["failures"] == count,
            "R123",
            f"/workers/{position}/failures: {worker['failures']}, its lifecycle fails {count}",
        )
        failures += count
    ignored_surely = ignored_maybe = 0
    for position, event in enumerate(events):
        time = event["at_us"]
        if (stop is not None and time >= stop) or time > end:
            continue
        named = _worker_named(report, event["pool"], event["pool_worker"])
        state = None if named is None else state_at(report, named[1], time, FAILURE)
        live = state in LIVE
        if live and time < end:
            assert named is not None
            failed_then = any(
                entry == {"state": "failed", "at_us": time} for entry in named[1]["lifecycle"]
            )
            require(
                failed_then,
                "R117",
                f"/failures/events/{position}: worker {named[0]} was {state} at {time} and did "
                "not fail",
            )
        if not live:
            ignored_maybe += 1
            ignored_surely += time < end
    fleet = report["summary"]["fleet"]
    require(fleet["failures"] == failures, "R123", f"/summary/fleet/failures: {fleet['failures']}")
    require(
        fleet["recoveries"] == recoveries,
        "R123",
        f"/summary/fleet/recoveries: {fleet['recoveries']}, the lifecycles recover {recoveries}",
    )
    require(
        ignored_surely <= fleet["ignored_failures"] <= ignored_maybe,
        "R116",
        f"/summary/fleet/ignored_failures: {fleet['ignored_failures']}, the events give "
        f"{ignored_surely} to {ignored_maybe}",
    )


# --- R110, R115: scaling decisions --------------------------------------------------------------


def effective_counts(report: Document, pool: str) -> list[tuple[int, int]]:
    """R109: ``(t, e)`` for every instant t at which a worker of ``pool`` changed state, e the
    pool's effective count (starting or active workers) after every change of t."""
    instants = sorted(
        {
            entry["at_us"]
            for worker in report["workers"]
            if worker["pool"] == pool
            for entry in worker["lifecycle"]
        }
    )
    result = []
    for time in instants:
        count = 0
        for worker in report["workers"]:
            if worker["pool"] != pool:
                continue
            state = None
            for entry in worker["lifecycle"]:
                if entry["at_us"] > time:
                    break
                state = entry["state"]
            count += state in ("starting", "active")
        result.append((time, count))
    return result


def _count_after(counts: Sequence[tuple[int, int]], time: int) -> int:
    value = 0
    for at, count in counts:
        if at > time:
            break
        value = count
    return value


def check_scaling(scenario: Document, report: Document) -> None:
    """R110, R113, R115: after a schedule entry processed (before the last terminal time and
    the stop time), the pool's effective count is the entry's target (decisions are the last
    events of their instant); after a reactive tick processed, it is within ``[min, max]``."""
    end = last_terminal(report)
    stop = stop_of(scenario)
    bound = end if stop is None else min(end, stop)
    for pool in pool_specs(scenario):
        name, scaling = pool["name"], pool["scaling"]
        counts = effective_counts(report, name)
        for index, entry in enumerate(scaling.get("schedule", [])):
            if entry["at_us"] >= bound:
                continue
            count = _count_after(counts, entry["at_us"])
            require(
                count == entry["target"],
                "R110",
                f"pool {name}: {count} starting or active workers after the decision of "
                f"/fleet/.../scaling/schedule/{index} (target {entry['target']})",
            )
        policy = scaling.get("autoscale")
        if policy is None:
            continue
        interval = int(policy["interval_us"])
        for index, (at, count) in enumerate(counts):
            following = counts[index + 1][0] if index + 1 < len(counts) else bound
            tick = max(interval, -(-at // interval) * interval)
            if tick < min(following, bound):
                require(
                    policy["min"] <= count <= policy["max"],
                    "R115",
                    f"pool {name}: {count} starting or active workers after the tick at {tick}, "
                    f"outside [{policy['min']}, {policy['max']}]",
                )


# --- R109, R114: routing only to active workers -------------------------------------------------


def check_routed_states(scenario: Document, report: Document) -> None:
    """R109, R114: every routing chose an ``active`` worker: a request's first routing at its
    arrival and, in an aggregated fleet, each migration's routing at the failure's instant
    (each migration leaving the worker the previous routing chose); in a disaggregated fleet,
    for a request never migrated, its prefill worker at its arrival and its decode worker at
    its prefill end (a step completion, before the fleet events of its instant)."""
    disaggregated = is_disaggregated(scenario)
    for position, entry in enumerate(report["requests"]):
        where = f"/requests/{position}"
        if entry["worker"] is None:
            require(entry["outcome"] != "completed", "R12", f"{where}: completed, never routed")
            continue
        migrations = entry["migrations"]
        if disaggregated:
            if migrations:
                continue
            _require_active(report, entry["worker"], entry["arrival_us"], ARRIVAL, where)
            handoff = entry["handoff"]
            if handoff is not None and handoff["decode_worker"] is not None:
                time = handoff["prefill_end_us"]
                _require_active(report, handoff["decode_worker"], time, PASS_END, where)
            continue
        routings = [entry["arrival_us"]] + [migration["at_us"] for migration in migrations]
        chosen = [migration["worker"] for migration in migrations] + [entry["worker"]]
        if entry["fail_reason"] == "no_routable_worker":
            # R114, R118: its last migration found no candidate; its worker is the one before
            require(
                bool(migrations) and migrations[-1]["at_us"] == entry["terminal_us"],
                "R118",
                f"{where}/fail_reason: no_routable_worker without a migration at its end",
            )
            routings.pop()
            chosen.pop()
            require(
                chosen[-1] == entry["worker"],
                "R118",
                f"{where}/worker: {entry['worker']}, its last routing chose {chosen[-1]}",
            )
        for index, (time, worker) in enumerate(zip(routings, chosen, strict=True)):
            pointer = where if index == 0 else f"{where}/migrations/{index - 1}"
            _require_active(report, worker, time, ARRIVAL, pointer)


def _require_active(report: Document, worker: int, time: int, priority: int, where: str) -> None:
    workers = report["workers"]
    require(0 <= worker < len(workers), "R114", f"{where}: worker {worker} does not exist")
    state = state_at(report, workers[worker], time, priority)
    require(
        state == "active",
        "R114",
        f"{where}: routed to worker {worker} at {time}, when it was {state or 'not yet created'}",
    )


# --- R117, R118: migrations and tokens ----------------------------------------------------------


def _failed_at(worker: Document, time: int) -> bool:
    return any(entry == {"state": "failed", "at_us": time} for entry in worker["lifecycle"])


def check_migrations(scenario: Document, report: Document) -> None:
    """R117, R118, R121, R123: no token is produced twice: the token times strictly increase
    and number ``output_tokens``; ``migrations`` are in time order within the request's life,
    each at a failure of the worker it names (of that worker's pool), with ``output_tokens``
    nondecreasing and equal to the tokens produced at or before the failure; there are at most
    ``max_migrations`` of them, none under policy ``"fail"`` or without failures; their lost
    tokens sum to at most the request's ``lost_tokens`` (equal unless a failure failed it), and
    ``recomputed_tokens <= lost_tokens``."""
    failures: Document | None = scenario.get("failures")
    policy = None if failures is None else failures["policy"]
    limit = None if failures is None else failures.get("max_migrations")
    workers = report["workers"]
    for position, entry in enumerate(report["requests"]):
        where = f"/requests/{position}"
        times = entry["token_times_us"]
        require(
            all(a < b for a, b in itertools.pairwise(times)),
            "R118",
            f"{where}/token_times_us: not strictly increasing (a token produced twice?)",
        )
        require(
            len(times) == entry["output_tokens"],
            "R118",
            f"{where}/output_tokens: {entry['output_tokens']}, {len(times)} token times",
        )
        migrations = entry["migrations"]
        if policy != "migrate":
            require(not migrations, "R118", f"{where}/migrations: migrated under {policy}")
        else:
            require(
                len(migrations) <= int(limit),  # type: ignore[arg-type]
                "R118",
                f"{where}/migrations: {len(migrations)} over max_migrations {limit}",
            )
        previous_at, previous_tokens = entry["arrival_us"], 0
        for index, migration in enumerate(migrations):
            pointer = f"{where}/migrations/{index}"
            at = migration["at_us"]
            require(
                previous_at is not None and previous_at <= at <= entry["terminal_us"],
                "R123",
                f"{pointer}/at_us: {at} out of order",
            )
            produced = sum(1 for time in times if time <= at)
            require(
                migration["output_tokens"] == produced,
                "R118",
                f"{pointer}/output_tokens: {migration['output_tokens']}, {produced} tokens by {at}",
            )
            require(
                migration["output_tokens"] >= previous_tokens,
                "R118",
                f"{pointer}/output_tokens: fewer than at the migration before",
            )
            left = migration["worker"]
            require(
                0 <= left < len(workers) and _failed_at(workers[left], at),
                "R117",
                f"{pointer}/worker: worker {left} did not fail at {at}",
            )
            require(
                workers[left]["pool"] == migration["pool"],
                "R123",
                f"{pointer}/pool: {migration['pool']}, worker {left} is of another pool",
            )
            previous_at, previous_tokens = at, migration["output_tokens"]
        lost = sum(migration["lost_tokens"] for migration in migrations)
        if entry["fail_reason"] in ("worker_failure", "migration_limit"):
            require(lost <= entry["lost_tokens"], "R123", f"{where}/lost_tokens: below its parts")
        else:
            require(
                lost == entry["lost_tokens"],
                "R123",
                f"{where}/lost_tokens: {entry['lost_tokens']}, its migrations lost {lost}",
            )
        require(
            entry["recomputed_tokens"] <= entry["lost_tokens"],
            "R118",
            f"{where}/recomputed_tokens: {entry['recomputed_tokens']} over lost_tokens "
            f"{entry['lost_tokens']}",
        )
        if not migrations:
            require(entry["recomputed_tokens"] == 0, "R118", f"{where}/recomputed_tokens")


# --- R9, R114, R118, R123: terminal states ------------------------------------------------------


def check_outcomes(scenario: Document, report: Document) -> None:
    """R9, R10, R114, R118, R123: every request is in exactly one terminal state, its
    ``fail_reason`` set exactly when it failed and its ``reject_reason`` exactly when it was
    rejected; a failed request has no completion, ends at a failure of its worker (or, with
    ``no_routable_worker``, at a routing that found no candidate) and has at most
    ``max_output_tokens`` tokens, none after its end; a completed one ends at its last token;
    ``completed + rejected + cut_off + failed = requests`` and the per-reason counts are the
    requests'."""
    failures: Document | None = scenario.get("failures")
    policy = None if failures is None else failures["policy"]
    limit = None if failures is None else failures.get("max_migrations")
    workers = report["workers"]
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    rejected_by: Counter[str] = Counter()
    for position, entry in enumerate(report["requests"]):
        where = f"/requests/{position}"
        outcome = entry["outcome"]
        require(outcome in OUTCOMES, "R9", f"{where}/outcome: {outcome}")
        counts[outcome] += 1
        fail_reason = entry["fail_reason"]
        require(
            (fail_reason is not None) == (outcome == "failed"),
            "R123",
            f"{where}/fail_reason: {fail_reason} with outcome {outcome}",
        )
        require(
            (entry["reject_reason"] is not None) == (outcome == "rejected"),
            "R10",
            f"{where}/reject_reason: {entry['reject_reason']} with outcome {outcome}",
        )
        times = entry["token_times_us"]
        require(
            all(time <= entry["terminal_us"] for time in times),
            "R9",
            f"{where}/token_times_us: a token after its terminal time",
        )
        if outcome == "rejected":
            rejected_by[entry["reject_reason"]] += 1
            if entry["reject_reason"] == "no_routable_worker":
                require(entry["worker"] is None, "R114", f"{where}/worker: rejected, yet routed")
                require(not entry["migrations"], "R114", f"{where}/migrations: rejected")
        elif outcome == "completed":
            require(
                bool(times) and entry["completion_us"] == entry["terminal_us"] == times[-1],
                "R26",
                f"{where}/completion_us: not its last token's time",
            )
        elif outcome == "failed":
            reasons[fail_reason] += 1
            require(fail_reason in FAIL_REASONS, "R123", f"{where}/fail_reason: {fail_reason}")
            for member in ("completion_us", "e2e_us", "mean_itl_us"):
                require(entry[member] is None, "R118", f"{where}/{member}: a failed request's")
            if entry.get("slo_met") is not None:
                require(entry["slo_met"] is False, "R120", f"{where}/slo_met: a failed request")
            _check_failed(entry, where, workers, policy, limit)
    summary = report["summary"]
    for outcome in OUTCOMES:
        require(
            summary[outcome] == counts[outcome],
            "R123",
            f"/summary/{outcome}: {summary[outcome]}, the requests give {counts[outcome]}",
        )
    require(
        sum(summary[outcome] for outcome in OUTCOMES) == summary["requests"],
        "R123",
        "/summary/requests: completed + rejected + cut_off + failed differs",
    )
    for reason in FAIL_REASONS:
        value = summary["failed_by_reason"][reason]
        require(
            value == reasons[reason],
            "R123",
            f"/summary/failed_by_reason/{reason}: {value}, the requests give {reasons[reason]}",
        )
    value = summary["rejected_by_reason"]["no_routable_worker"]
    expected = rejected_by["no_routable_worker"]
    require(
        value == expected,
        "R123",
        f"/summary/rejected_by_reason/no_routable_worker: {value}, the requests give {expected}",
    )


def _check_failed(
    entry: Document,
    where: str,
    workers: Sequence[Document],
    policy: str | None,
    limit: int | None,
) -> None:
    """R114, R117, R118, R121: what a failed request's reason says."""
    reason = entry["fail_reason"]
    end = entry["terminal_us"]
    migrations = entry["migrations"]
    if reason == "no_routable_worker":
        handoff = entry.get("handoff")
        at_migration = bool(migrations) and migrations[-1]["at_us"] == end
        at_handoff = handoff is not None and handoff["prefill_end_us"] == end
        require(
            at_migration or at_handoff,
            "R114",
            f"{where}/terminal_us: no_routable_worker at {end}, neither a migration nor a handoff",
        )
        return
    require(policy is not None, "R118", f"{where}/fail_reason: {reason} without failures")
    require(
        any(_failed_at(worker, end) for worker in workers),
        "R117",
        f"{where}/terminal_us: {reason} at {end}, when no worker failed",
    )
    if reason == "worker_failure":
        require(policy == "fail", "R118", f"{where}/fail_reason: worker_failure under {policy}")
    else:
        require(
            policy == "migrate" and len(migrations) == limit,
            "R118",
            f"{where}/fail_reason: migration_limit after {len(migrations)} migrations",
        )


# --- R122: worker time --------------------------------------------------------------------------


def check_worker_time(report: Document) -> None:
    """R122: each worker's ``starting_us``, ``active_us``, ``draining_us`` and ``failed_us``
    are its lifecycle's intervals in each state clipped to the accounting window; ``worker_us``
    is the sum of the first three; ``busy_us <= worker_us``; and the worker's, its ranks' and
    its pool's ``utilization`` are ``busy_us`` over worker time (R24, null when it is 0)."""
    low, high = window(report)
    for position, worker in enumerate(report["workers"]):
        where = f"/workers/{position}"
        spent: Counter[str] = Counter()
        for state, start, end in intervals(worker):
            spent[state] += clipped(start, end, low, high)
        for state in ("starting", "active", "draining", "failed"):
            member = f"{state}_us"
            require(
                worker[member] == spent[state],
                "R122",
                f"{where}/{member}: {worker[member]}, the lifecycle gives {spent[state]} within "
                f"[{low}, {high}]",
            )
        paid = worker["starting_us"] + worker["active_us"] + worker["draining_us"]
        require(worker["worker_us"] == paid, "R122", f"{where}/worker_us: {worker['worker_us']}")
        require(
            worker["busy_us"] <= worker["worker_us"],
            "R122",
            f"{where}/busy_us: {worker['busy_us']} over worker_us {worker['worker_us']}",
        )
        _require_quotient(worker["utilization"], worker["busy_us"], paid, f"{where}/utilization")
        for index, rank in enumerate(worker["ranks"]):
            pointer = f"{where}/ranks/{index}/utilization"
            _require_quotient(rank["utilization"], rank["busy_us"], paid, pointer)
    for position, pool in enumerate(report["pools"]):
        pointer = f"/pools/{position}/utilization"
        _require_quotient(pool["utilization"], pool["busy_us"], pool["worker_us"], pointer)


def _require_quotient(value: object, numerator: int, denominator: int, where: str) -> None:
    """R24: ``numerator / denominator`` correctly rounded (Python's int division is), or None
    for a zero denominator."""
    expected = None if denominator == 0 else numerator / denominator
    require(value == expected, "R122", f"{where}: {value}, expected {expected}")


# --- R123: sums ---------------------------------------------------------------------------------


def check_fleet_sums(scenario: Document, report: Document) -> None:
    """R123: each pool's ``workers_created``, ``worker_us``, ``worker_hours``, ``failures``,
    ``migrations`` and ``failed`` are its workers'; its ``peak_workers`` lies between the most
    live workers after any instant's changes and the most before an instant plus the workers
    that instant brought back or created; the summary's worker time, migrations, lost and
    recomputed tokens are the pools' and the requests'; ``summary.fleet`` counts the
    lifecycles' creations, cancellations, drains and removals; each worker's ``migrated_out``
    is the migrations that name it and, in an aggregated fleet, ``failed_requests`` and
    ``lost_tokens`` are those of the requests its failures failed or migrated."""
    workers, requests = report["workers"], report["requests"]
    summary = report["summary"]
    for position, pool in enumerate(report["pools"]):
        where = f"/pools/{position}"
        own = [worker for worker in workers if worker["pool"] == pool["name"]]
        sums = {
            "workers_created": len(own),
            "worker_us": sum(worker["worker_us"] for worker in own),
            "failures": sum(worker["failures"] for worker in own),
            "migrations": sum(worker["migrated_out"] for worker in own),
            "failed": sum(worker["failed_requests"] for worker in own),
        }
        for member, value in sums.items():
            require(
                pool[member] == value,
                "R123",
                f"{where}/{member}: {pool[member]}, its workers give {value}",
            )
        hours = pool["worker_us"] / US_PER_HOUR
        require(pool["worker_hours"] == hours, "R122", f"{where}/worker_hours")
        low, high = _peak_bounds(own)
        require(
            low <= pool["peak_workers"] <= high,
            "R123",
            f"{where}/peak_workers: {pool['peak_workers']}, the lifecycles give {low} to {high}",
        )
    worker_us = sum(pool["worker_us"] for pool in report["pools"])
    require(summary["worker_us"] == worker_us, "R123", f"/summary/worker_us: {worker_us}")
    hours = summary["worker_us"] / US_PER_HOUR
    require(summary["worker_hours"] == hours, "R122", "/summary/worker_hours")
    migrations = sum(len(entry["migrations"]) for entry in requests)
    sums = {
        "migrations": migrations,
        "lost_tokens": sum(entry["lost_tokens"] for entry in requests),
        "recomputed_tokens": sum(entry["recomputed_tokens"] for entry in requests),
    }
    for member, value in sums.items():
        require(
            summary[member] == value,
            "R123",
            f"/summary/{member}: {summary[member]}, the requests give {value}",
        )
    out = Counter(m["worker"] for entry in requests for m in entry["migrations"])
    for position, worker in enumerate(workers):
        require(
            worker["migrated_out"] == out[position],
            "R123",
            f"/workers/{position}/migrated_out: {worker['migrated_out']}, the requests' "
            f"migrations name it {out[position]} times",
        )
    failed_by = sum(
        entry["fail_reason"] in ("worker_failure", "migration_limit") for entry in requests
    )
    total_failed = sum(worker["failed_requests"] for worker in workers)
    require(
        total_failed == failed_by,
        "R123",
        f"/workers: failed_requests sum to {total_failed}, the requests failed by a failure "
        f"number {failed_by}",
    )
    total_lost = sum(worker["lost_tokens"] for worker in workers)
    require(
        total_lost == summary["lost_tokens"],
        "R123",
        f"/workers: lost_tokens sum to {total_lost}, the summary says {summary['lost_tokens']}",
    )
    if not is_disaggregated(scenario):
        _check_worker_losses(workers, requests)
    _check_fleet_counts(report)


def _check_worker_losses(workers: Sequence[Document], requests: Sequence[Document]) -> None:
    """R123 in an aggregated fleet: a request failed by a failure was on its ``worker``; a
    worker's ``lost_tokens`` are its migrations' lost tokens and the failed requests' rest."""
    failed: Counter[int] = Counter()
    lost: Counter[int] = Counter()
    for entry in requests:
        for migration in entry["migrations"]:
            lost[migration["worker"]] += migration["lost_tokens"]
        if entry["fail_reason"] in ("worker_failure", "migration_limit"):
            failed[entry["worker"]] += 1
            rest = entry["lost_tokens"] - sum(m["lost_tokens"] for m in entry["migrations"])
            lost[entry["worker"]] += rest
    for position, worker in enumerate(workers):
        where = f"/workers/{position}"
        require(
            worker["failed_requests"] == failed[position],
            "R123",
            f"{where}/failed_requests: {worker['failed_requests']}, the requests give "
            f"{failed[position]}",
        )
        require(
            worker["lost_tokens"] == lost[position],
            "R123",
            f"{where}/lost_tokens: {worker['lost_tokens']}, the requests give {lost[position]}",
        )


def _peak_bounds(workers: Sequence[Document]) -> tuple[int, int]:
    """R123: bounds on a pool's ``peak_workers`` (live workers after each event). The count
    after the changes of an instant at which an event changed something is measured (after that
    event), so it is a lower bound, as is the initial count when nothing ever changes; within
    an instant the count never exceeds the count before it plus the workers the instant made
    live (a creation, a recovery)."""

    def live(time: int, *, including: bool) -> int:
        count = 0
        for worker in workers:
            state = None
            for entry in worker["lifecycle"]:
                if entry["at_us"] > time or (not including and entry["at_us"] == time):
                    break
                state = entry["state"]
            count += state in LIVE
        return count

    changed = sorted(
        {entry["at_us"] for worker in workers for entry in worker["lifecycle"][1:]}
        | {
            worker["lifecycle"][0]["at_us"]
            for worker in workers
            if worker["created_us"] > 0 or worker["lifecycle"][0]["state"] == "starting"
        }
    )
    low = max((live(time, including=True) for time in changed), default=len(workers))
    high = 0
    instants = sorted({entry["at_us"] for worker in workers for entry in worker["lifecycle"]})
    for time in instants:
        entering = sum(
            1
            for worker in workers
            for index, entry in enumerate(worker["lifecycle"])
            if entry["at_us"] == time
            and entry["state"] in LIVE
            and (index == 0 or worker["lifecycle"][index - 1]["state"] not in LIVE)
        )
        high = max(high, live(time, including=False) + entering)
    return low, high


def _check_fleet_counts(report: Document) -> None:
    """R123: ``summary.fleet``'s scale-ups (workers created after the start), cancellations
    (starting -> removed), drains (draining -> removed) and scale-downs (cancellations plus
    active -> draining) are the lifecycles'."""
    created = sum(pool["workers_created"] - pool["workers"] for pool in report["pools"])
    edges: Counter[tuple[str, str]] = Counter()
    for worker in report["workers"]:
        for before, after in zip(worker["lifecycle"], worker["lifecycle"][1:], strict=False):
            edges[(before["state"], after["state"])] += 1
    fleet = report["summary"]["fleet"]
    expected = {
        "scale_ups": created,
        "cancelled": edges[("starting", "removed")],
        "drained": edges[("draining", "removed")],
        "scale_downs": edges[("starting", "removed")] + edges[("active", "draining")],
    }
    for member, value in expected.items():
        require(
            fleet[member] == value,
            "R123",
            f"/summary/fleet/{member}: {fleet[member]}, the lifecycles give {value}",
        )


# --- R117, R123: the trace ----------------------------------------------------------------------


def check_trace_cuts(scenario: Document, report: Document) -> None:
    """R62, R117, R122, R123: every traced step starts on a worker that is active or draining
    then; a step in flight across a failure of its worker is cut there (``cut_us`` F); any
    ``cut_us`` is a failure of its worker or the stop time, strictly inside the step."""
    if report["trace"] is None:
        return
    workers = report["workers"]
    stop = stop_of(scenario)
    for position, step in enumerate(report["trace"]):
        where = f"/trace/{position}"
        worker = workers[step["worker"]]
        start, end, cut = step["start_us"], step["end_us"], step["cut_us"]
        state = state_at(report, worker, start, SCHEDULING)
        require(
            state in ("active", "draining"),
            "R109",
            f"{where}: a step of worker {step['worker']} formed at {start} while {state}",
        )
        failure = next(
            (
                entry["at_us"]
                for entry in worker["lifecycle"]
                if entry["state"] == "failed" and start < entry["at_us"] < end
            ),
            None,
        )
        expected = failure
        if expected is None and stop is not None and start < stop < end:
            expected = stop
        require(
            cut == expected,
            "R117" if failure is not None else "R123",
            f"{where}/cut_us: {cut}, expected {expected} (a failure of its worker, else the stop "
            "time, inside the step)",
        )


# --- Everything ---------------------------------------------------------------------------------


def check_fleet_report(scenario: Document, report: Document) -> None:
    """Every invariant above, for a report 9.0 of a scenario 1.7 (or of an earlier scenario:
    a fleet that never changes keeps them all)."""
    check_lifecycles(scenario, report)
    check_failure_events(scenario, report)
    check_scaling(scenario, report)
    check_outcomes(scenario, report)
    check_migrations(scenario, report)
    check_routed_states(scenario, report)
    check_worker_time(report)
    check_fleet_sums(scenario, report)
    check_trace_cuts(scenario, report)
