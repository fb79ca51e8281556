"""R4's checks of a fleet that changes (SPEC.md section 18: R110, R115, R116).

What a scenario 1.7's schema cannot compare: a schedule's times increase (R110); a reactive
policy's thresholds and bounds agree with each other, with the pool's initial workers and with its
cache (R115); a failure names an existing pool, the failures of one worker never overlap, and,
for a pool without ``autoscale``, the worker a failure names exists at its instant (R116's
static existence, found by replaying the pool's decisions, startup ends, failures and recovery
starts in R113's order without requests). Each problem is ``(JSON pointer, reason)``.
"""

from __future__ import annotations

import heapq
from typing import Any

#: R6: the largest time a report can hold; a startup end or recovery after it never happens.
_MAX_TIME_US = (1 << 53) - 1

#: R110: the most workers one run may create; a replay past it stops (the run is R6's case).
_MAX_CREATED = 1 << 20


def fleet_change_problems(value: dict[str, Any]) -> list[tuple[str, str]]:
    """R110, R115, R116: every problem of the scenario's scaling and failures."""
    fleet = value["fleet"]
    pools: list[tuple[str, str, dict[str, Any]]] = []  # (name, pointer, pool document)
    if "pools" in fleet:
        pools = [(pool["name"], f"/fleet/pools/{i}", pool) for i, pool in enumerate(fleet["pools"])]
    else:
        pools = [("default", "/fleet", fleet)]
    problems: list[tuple[str, str]] = []
    for _, where, pool in pools:
        scaling = pool.get("scaling")
        if scaling is not None:
            problems.extend(_scaling_problems(value, where, pool, scaling))
    failures = value.get("failures")
    if failures is not None:
        problems.extend(_failure_problems(failures, pools))
    return problems


def _scaling_problems(
    value: dict[str, Any], where: str, pool: dict[str, Any], scaling: dict[str, Any]
) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    schedule = scaling.get("schedule", [])
    for index in range(1, len(schedule)):
        before, at = schedule[index - 1]["at_us"], schedule[index]["at_us"]
        if at <= before:
            problems.append(
                (
                    f"{where}/scaling/schedule/{index}/at_us",
                    f"{at} is not after the previous entry's at_us ({before}); expected the "
                    "schedule's times to strictly increase (R110)",
                )
            )
            break  # R110: reported at the first entry that breaks it
    autoscale = scaling.get("autoscale")
    if autoscale is None:
        return problems
    at = f"{where}/scaling/autoscale"
    if autoscale["down_permille"] >= autoscale["up_permille"]:
        problems.append(
            (
                f"{at}/down_permille",
                f"{autoscale['down_permille']} is not less than up_permille "
                f"({autoscale['up_permille']}); expected down_permille < up_permille (R115)",
            )
        )
    if autoscale["min"] > autoscale["max"]:
        problems.append(
            (
                f"{at}/min",
                f"{autoscale['min']} is greater than max ({autoscale['max']}); expected "
                "min <= max (R115)",
            )
        )
    elif not autoscale["min"] <= pool["workers"] <= autoscale["max"]:
        problems.append(
            (
                f"{where}/workers",
                f"{pool['workers']} is outside the autoscale bounds [{autoscale['min']}, "
                f"{autoscale['max']}]; expected the initial workers within min and max (R115)",
            )
        )
    cache = pool.get("kv_cache", value.get("kv_cache"))
    if autoscale["metric"] == "kv_use" and cache is None:
        problems.append(
            (
                f"{at}/metric",
                'metric "kv_use" needs a KV cache in the pool; this pool has none (R115)',
            )
        )
    return problems


def _failure_problems(
    failures: dict[str, Any], pools: list[tuple[str, str, dict[str, Any]]]
) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    by_name = {name: pool for name, _, pool in pools}
    events: list[dict[str, Any]] = failures["events"]
    last: dict[tuple[str, int], dict[str, Any]] = {}  # each worker's previous event
    for index, event in enumerate(events):
        where = f"/failures/events/{index}"
        if event["pool"] not in by_name:
            problems.append(
                (
                    f"{where}/pool",
                    f'"{event["pool"]}" names no pool; expected one of '
                    + ", ".join(f'"{name}"' for name in by_name)
                    + " (R116)",
                )
            )
            continue
        key = (event["pool"], event["pool_worker"])
        previous = last.get(key)
        last[key] = event
        if previous is None:
            continue
        recover = previous.get("recover_after_us")
        if event["at_us"] <= previous["at_us"]:
            problems.append(
                (
                    f"{where}/at_us",
                    f"{event['at_us']} is not after the previous failure of this worker (at "
                    f"{previous['at_us']}); expected one worker's failures in increasing time "
                    "(R116)",
                )
            )
        elif recover is None:
            problems.append(
                (
                    f"{where}/at_us",
                    f"this worker failed for good at {previous['at_us']} (no recover_after_us); "
                    "expected no later failure of it (R116)",
                )
            )
        elif event["at_us"] <= previous["at_us"] + recover:
            problems.append(
                (
                    f"{where}/at_us",
                    f"{event['at_us']} is not after the previous failure's recovery start "
                    f"({previous['at_us'] + recover}); expected a worker never named again "
                    "while failed (R116)",
                )
            )
    for name, _, pool in pools:
        scaling = pool.get("scaling") or {}
        if "autoscale" in scaling:
            continue  # R116: existence then depends on the requests
        mine = [(i, event) for i, event in enumerate(events) if event["pool"] == name]
        if mine:
            problems.extend(_existence_problems(pool, scaling, mine))
    return problems


# the kinds of event of a replay without requests, in R113's priorities
_FAILURE, _TRANSITION, _DECISION = 1, 2, 6


def _existence_problems(
    pool: dict[str, Any], scaling: dict[str, Any], failures: list[tuple[int, dict[str, Any]]]
) -> list[tuple[str, str]]:
    """R116's static existence: replay the pool's decisions, startup ends, failures and
    recovery starts in R113's order, without requests; a failure of a worker not created by
    its instant is a problem at its ``/pool_worker``."""
    startup = scaling.get("startup_us", 0)
    states = ["active"] * pool["workers"]  # by pool_worker (its global order in the pool)
    epochs = [0] * pool["workers"]  # a transition scheduled in an older epoch does nothing
    queue: list[tuple[int, int, int, int, int]] = []  # (time, kind, order, subject, epoch)
    for index, event in failures:
        queue.append((event["at_us"], _FAILURE, index, index, 0))
    for index, entry in enumerate(scaling.get("schedule", [])):
        queue.append((entry["at_us"], _DECISION, 0, index, 0))
    heapq.heapify(queue)
    by_index = dict(failures)
    schedule = scaling.get("schedule", [])
    problems: list[tuple[str, str]] = []

    def start(worker: int, now: int) -> None:
        epochs[worker] += 1
        if startup == 0:
            states[worker] = "active"
            return
        states[worker] = "starting"
        if now + startup <= _MAX_TIME_US:
            heapq.heappush(queue, (now + startup, _TRANSITION, worker, worker, epochs[worker]))

    while queue:
        now, kind, _, subject, epoch = heapq.heappop(queue)
        if kind == _FAILURE:
            event = by_index[subject]
            worker = event["pool_worker"]
            if worker >= len(states):
                problems.append(
                    (
                        f"/failures/events/{subject}/pool_worker",
                        f"the pool has created {len(states)} workers by {now}; expected an "
                        "existing pool_worker (R116)",
                    )
                )
                continue
            was = states[worker]
            if was in ("removed", "failed"):
                continue  # ignored (R117)
            states[worker] = "failed"
            epochs[worker] += 1
            recover = event.get("recover_after_us")
            if was != "draining" and recover is not None and now + recover <= _MAX_TIME_US:
                heapq.heappush(queue, (now + recover, _TRANSITION, worker, -1 - worker, 0))
        elif kind == _TRANSITION:
            if subject < 0:  # a recovery start
                worker = -1 - subject
                if states[worker] == "failed":
                    start(worker, now)
            elif epoch == epochs[subject] and states[subject] == "starting":
                states[subject] = "active"
        else:
            target = schedule[subject]["target"]
            effective = sum(1 for state in states if state in ("active", "starting"))
            if target > effective:
                for _ in range(target - effective):
                    if len(states) >= _MAX_CREATED:
                        return problems  # R110: the run cannot be simulated (R6's case)
                    states.append("starting")
                    epochs.append(0)
                    start(len(states) - 1, now)
            elif target < effective:
                _take_away(states, effective - target)
    return problems


def _take_away(states: list[str], count: int) -> None:
    """R112: cancel the highest starting workers, then drain the highest active ones."""
    for wanted in ("starting", "active"):
        for worker in range(len(states) - 1, -1, -1):
            if count == 0:
                return
            if states[worker] == wanted:
                states[worker] = "removed" if wanted == "starting" else "draining"
                count -= 1
