"""Sessions (R59) and the closed loop (R61) through Dynamo's own multi-turn replay.

Dynamo's documented ``run_trace_replay`` reads Mooncake rows with ``session_id`` and ``delay``:
a session's next turn arrives ``delay`` ms after the previous turn's completion, as R59's
``T + think_time_us``; with ``replay_concurrency`` N it keeps at most N sessions active, as
R61's ``max_in_flight`` keeps N units. It records each turn's arrival and worker but no token
times, so the adapter runs it first, for *when* each request arrives and *where* it goes, and
then replays each worker with those arrivals through the per-token runtime, as it does without
sessions; the two replays must agree on every request's end, or the adapter stops (exit 1).

A request without a session is a session of one turn (a unit of its own, R61). What Dynamo
cannot say is refused by name or found after the fact: a later turn whose recorded
``arrival_us`` is after ``T + think_time_us`` (R59 takes the later of the two; Dynamo has only
the delay) is exit 2 naming ``session.recorded_arrival``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servesim_dynamo import dynamo_runtime
from servesim_dynamo.mapping import (
    BLOCK_SIZE,
    FixedTiming,
    Unsupported,
    engine_args,
    fleet_shape,
    to_ms,
)
from servesim_dynamo.timeline import DynamoResult, microseconds

#: The session id Dynamo is given for a request without one (ids are 1 to 128 characters from
#: ``!`` to ``~``, R59, so no servesim session id contains a space).
LONE = "lone request {}"


@dataclass(frozen=True)
class Released:
    """Where and when Dynamo's multi-turn replay put every request, in workload order."""

    arrival_us: list[int]
    worker: list[int]
    terminal_us: list[int]


def needs_release(scenario: dict[str, Any], workload: dict[str, Any]) -> bool:
    """Whether arrivals depend on the run: sessions (workload 1.2) or a closed loop."""
    return "sessions" in workload or "closed_loop" in scenario


def _rows(requests: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
    """Mooncake rows in workload order, and each request's (session id, turn index)."""
    first = min(request["arrival_us"] for request in requests)
    turns: dict[str, int] = {}
    rows, keys = [], []
    next_hash = 0
    for position, request in enumerate(requests):
        session = request.get("session")
        name = LONE.format(position) if session is None else session
        turn = turns.get(name, 0)
        turns[name] = turn + 1
        blocks = max(1, -(-request["prompt_tokens"] // BLOCK_SIZE))
        row: dict[str, Any] = {
            "timestamp": to_ms(request["arrival_us"] - first),
            "input_length": request["prompt_tokens"],
            "output_length": request["max_output_tokens"],
            "hash_ids": list(range(next_hash, next_hash + blocks)),
            "session_id": name,
        }
        next_hash += blocks
        if turn > 0:
            row["delay"] = to_ms(request.get("think_time_us", 0))
        rows.append(row)
        keys.append((name, turn))
    return rows, keys


def run_records(
    scenario: dict[str, Any], requests: list[dict[str, Any]], timing: FixedTiming
) -> list[dict[str, Any]]:
    """Dynamo's per-request records of the documented replay of ``requests``, in no order."""
    rows, _keys = _rows(requests)
    loop = scenario.get("closed_loop")
    fleet = fleet_shape(scenario)
    return dynamo_runtime.run_trace(
        rows,
        engine_args(scenario, timing),
        fleet.workers,
        concurrency=None if loop is None else loop["max_in_flight"],
        block_size=BLOCK_SIZE,
        dp_size=fleet.dp_size,
    )


def replay_records(
    scenario: dict[str, Any], requests: list[dict[str, Any]], timing: FixedTiming
) -> list[dict[str, Any]]:
    """Dynamo's per-request records of the documented multi-worker replay, in workload order:
    round robin over the fleet's workers with their ``dp_size`` ranks (``extra_engine_args``'s
    ``dp_size``), each request a session of its own unless the workload gives it one, and
    with a closed loop its ``replay_concurrency``."""
    _, keys = _rows(requests)
    loop = scenario.get("closed_loop")
    records = run_records(scenario, requests, timing)
    by_key = {
        (str(r["session_id"]), int(r["turn_index"])): r
        for r in records
        if r["turn_index"] is not None
    }
    missing = [key for key in keys if key not in by_key]
    if missing:
        raise DynamoResult(f"Dynamo's session replay recorded no turn {missing[:3]}")
    first = min(request["arrival_us"] for request in requests)
    ordered = []
    for request, key in zip(requests, keys, strict=True):
        record = by_key[key]
        what = f"{request['id']} (session {key[0]!r}, turn {key[1]})"
        at = first + microseconds(record["arrival_time_ms"], f"arrival of {what}")
        if key[1] > 0 and loop is None and request["arrival_us"] > at:
            raise Unsupported(
                "session.recorded_arrival",
                f"turn {what} is recorded at {request['arrival_us']} us, after its release at "
                f"{at} us; R59 takes the later of the two, Dynamo's sessions only the delay",
            )
        ordered.append(record)
    return ordered


def release(
    scenario: dict[str, Any], requests: list[dict[str, Any]], timing: FixedTiming
) -> Released:
    """Each request's arrival, worker and end in Dynamo's multi-turn (and closed-loop) replay."""
    records = replay_records(scenario, requests, timing)
    first = min(request["arrival_us"] for request in requests)
    arrival, worker, terminal = [], [], []
    for request, record in zip(requests, records, strict=True):
        what = request["id"]
        arrival.append(first + microseconds(record["arrival_time_ms"], f"arrival of {what}"))
        worker.append(int(record["decode_worker_idx"]))
        terminal.append(first + microseconds(record["terminal_time_ms"], f"end of {what}"))
    return Released(arrival_us=arrival, worker=worker, terminal_us=terminal)
