"""What Dynamo recorded, read back as integer-microsecond timelines.

Every figure comes from the output of AISimulate's ``run_replay_with_artifacts_json`` (the
runtime inside ai-dynamo's ``_core``): the per-request records of ``report.per_request``
(arrival, first admission, terminal time and status, output length, readmissions) and the
``artifacts.outputs`` list, which holds every output token with its time. Dynamo keeps times as
float milliseconds; each is read as the nearest whole microsecond when it lies within a few
ulps of one, and is an error otherwise (``microseconds``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from servesim_dynamo.errors import DynamoResult
from servesim_dynamo.kv import CacheRecord, cache_record

__all__ = ["DynamoResult", "Timeline", "microseconds", "read_worker"]


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
    cache: CacheRecord
    """Prompt tokens reused at each admission (SPEC.md R48, R52)."""
    rank: int = 0
    """The attention-DP rank of its worker it joined (R80); 0 on a worker of one rank."""


#: How many units in the last place a time Dynamo reports may lie from a whole microsecond.
#: Dynamo keeps its clock in float milliseconds (its events carry ``at_ms: f64``) and adds pass
#: durations to it, so a time that is a whole microsecond in exact arithmetic comes back a few
#: ulps off (8589934.893000001 ms for 8589934893 us).
ULPS = 4

#: The least tolerance, in microseconds (1 ns), for times small enough to have tiny ulps.
LEAST_TOLERANCE_US = Fraction(1, 1000)


def microseconds(milliseconds: float, what: str) -> int:
    """Dynamo's float milliseconds as the nearest whole microsecond.

    Accepted when it lies within ``ULPS`` ulps (at least 1 ns) of a whole microsecond, and that
    tolerance is below half a microsecond, so that the microsecond is not in doubt; an error
    otherwise, never rounded away.
    """
    exact = Fraction(milliseconds) * 1000
    tolerance = max(LEAST_TOLERANCE_US, Fraction(math.ulp(milliseconds)) * 1000 * ULPS)
    if tolerance >= Fraction(1, 2):
        raise DynamoResult(
            f"{what}: at {milliseconds!r} ms Dynamo's float milliseconds no longer resolve a "
            "microsecond"
        )
    whole = round(exact)
    if abs(exact - whole) > tolerance:
        raise DynamoResult(f"{what}: {milliseconds!r} ms is not a whole microsecond")
    return whole


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
                "time(s) (KV cache); without kv_cache a servesim worker's memory is unlimited "
                "(R45), so nothing is preempted"
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
                cache=cache_record(record),
            )
        )
    return timelines
