"""What Dynamo recorded, read back as integer-microsecond timelines.

Every figure comes from the output of AISimulate's ``run_replay_with_artifacts_json`` (the
runtime inside ai-dynamo's ``_core``): the per-request records of ``report.per_request``
(arrival, first admission, terminal time and status, output length, readmissions) and the
``artifacts.outputs`` list, which holds every output token with its time. Dynamo keeps times as
integer nanoseconds and reports float milliseconds; a time that is not a whole microsecond is
an error, never rounded away.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class DynamoResult(Exception):
    """Dynamo's replay failed, or recorded something a servesim report cannot hold (exit 1)."""


@dataclass(frozen=True)
class Timeline:
    """One request as Dynamo ran it, in microseconds."""

    id: str
    worker: int
    arrival_us: int
    status: str
    """Dynamo's ``terminal_status``: ``completed`` or ``rejected``."""
    first_admit_us: int | None
    terminal_us: int
    token_times_us: tuple[int, ...]


def microseconds(milliseconds: float, what: str) -> int:
    """Dynamo's float milliseconds as whole microseconds, or an error naming the value."""
    nanoseconds = round(milliseconds * 1_000_000)
    if nanoseconds % 1000 or abs(milliseconds * 1_000_000 - nanoseconds) > 0.5:
        raise DynamoResult(f"{what}: {milliseconds!r} ms is not a whole microsecond")
    return nanoseconds // 1000


def read_worker(output: dict[str, Any], worker: int) -> list[Timeline]:
    """The timelines of one worker's replay output (``{"report": ..., "artifacts": ...}``)."""
    tokens: dict[str, list[int]] = {}
    for event in output["artifacts"]["outputs"]:
        if event["rejected"] or event["token_id"] is None:
            continue
        tokens.setdefault(event["request_id"], []).append(
            microseconds(event["observed_at_ms"], f"token of {event['request_id']}")
        )
    timelines = []
    for record in output["report"].get("per_request", []):
        request_id = record["request_id"]
        if record.get("readmission_count"):
            raise DynamoResult(
                f"request {request_id!r}: Dynamo preempted it {record['readmission_count']} "
                "time(s) (KV cache); servesim has no preemption"
            )
        times = tuple(tokens.get(record["uuid"], []))
        if len(times) != record["output_length"]:
            raise DynamoResult(
                f"request {request_id!r}: {len(times)} token events for output_length "
                f"{record['output_length']}"
            )
        status = record["terminal_status"]
        if status == "completed" and not times:
            raise DynamoResult(
                f"request {request_id!r}: Dynamo completed it without producing any token "
                "(servesim rejects max_output_tokens 0 at arrival, R10)"
            )
        if status not in ("completed", "rejected"):
            raise DynamoResult(f"request {request_id!r}: terminal status {status!r}")
        admitted = record["first_admit_ms"]
        timelines.append(
            Timeline(
                id=request_id,
                worker=worker,
                arrival_us=microseconds(record["arrival_time_ms"], f"arrival of {request_id}"),
                status=status,
                first_admit_us=None
                if admitted is None
                else microseconds(admitted, f"admission of {request_id}"),
                terminal_us=microseconds(record["terminal_time_ms"], f"end of {request_id}"),
                token_times_us=times,
            )
        )
    return timelines
