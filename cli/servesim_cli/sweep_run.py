"""One sweep point: the base documents changed by the point's settings, replayed in-process.

This is what runs in a worker process or a Ray task, so it takes and returns plain picklable
data: the base documents (checked once by the driver) and a ``Point``; a ``PointResult`` with
the table's columns, taken from the report's summary and workers (R28, R29).
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from servesim.contract.canonical import canonical_json
from servesim.contract.documents import Document, load_document
from servesim.contract.errors import OutOfCoverage, ServesimError, UnrepresentableTime
from servesim.contract.model import STATE_AWARE_POLICIES
from servesim.replay import replay_documents
from servesim_cli.sweep_file import Point, PoolSizes, routing_member

#: The latency metrics of the summary (R28) and the statistics of each that the table keeps.
METRICS: tuple[str, ...] = ("queue_us", "ttft_us", "itl_us", "e2e_us")
STATISTICS: tuple[str, ...] = ("mean", "p50", "p90", "p95", "p99", "max")

#: The result columns, after the point's settings, in table order (README, "Plots and sweeps").
#: A new column goes last, so that the columns a CSV reader knew keep their places.
RESULT_COLUMNS: tuple[str, ...] = (
    "status",
    "requests",
    "completed",
    "rejected",
    "makespan_us",
    "request_throughput_per_s",
    "output_token_throughput_per_s",
    *(f"{metric}_{statistic}" for metric in METRICS for statistic in STATISTICS),
    "utilization_mean",
    "utilization_min",
    "utilization_max",
    "message",
    "goodput_requests",  # R63: only with the scenario's slo; added after the columns above
)


@dataclass(frozen=True)
class BaseInputs:
    """The sweep's three base documents, checked (R1 to R4) by the driver."""

    scenario: Document
    workload: Document
    timing_profile: Document


@dataclass(frozen=True)
class PointResult:
    """One point's row: its result columns (``None`` where a value does not exist), the
    wall-clock seconds it took (progress only, never in the outputs) and, when asked, the
    report's bytes."""

    point: Point
    columns: dict[str, Any]
    seconds: float
    report: bytes | None = None

    @property
    def ok(self) -> bool:
        """Whether the point replayed to the end."""
        return bool(self.columns["status"] == "ok")


def scenario_value(base: dict[str, Any], point: Point) -> dict[str, Any]:
    """The base scenario with the point's settings in place."""
    value = copy.deepcopy(base)
    scheduler = value["scheduler"]
    for axis, setting in point.settings:
        if axis == "workers":
            value["fleet"]["workers"] = setting
        elif axis == "pools":
            assert isinstance(setting, PoolSizes)
            sizes = dict(setting.sizes)
            for pool in value["fleet"]["pools"]:
                pool["workers"] = sizes.get(pool["name"], pool["workers"])
        elif axis in {"max_num_seqs", "max_batched_tokens"}:
            scheduler[axis] = setting
        elif axis == "prefill":
            scheduler["prefill"] = (
                {"mode": "whole"}
                if setting == "whole"
                else {"mode": "chunked", "max_chunk_tokens": setting}
            )
        elif axis == "routing":
            assert isinstance(setting, str | tuple)
            decode = value["routing"].get("decode")
            value["routing"] = routing_member(setting)
            if decode is not None:  # R99: the axis routes the prefill side, decode stays
                value["routing"]["decode"] = decode
            if value["routing"]["policy"] in STATE_AWARE_POLICIES and _version(value) < (1, 2):
                # R57: the state-aware policies are scenario 1.2; every older scenario reads as
                # 1.2 with the same meaning (R35), so the point's scenario is relabelled (a
                # later one already has them)
                value["schema_version"] = "1.2"
    return value


def _version(value: dict[str, Any]) -> tuple[int, ...]:
    return tuple(int(part) for part in str(value["schema_version"]).split("."))


def scaled_arrival(arrival_us: int, speedup: Fraction) -> int:
    """An arrival under a speed-up: ``floor(arrival_us / speedup)``, exactly."""
    return arrival_us * speedup.denominator // speedup.numerator


def point_documents(base: BaseInputs, point: Point) -> tuple[Document, Document]:
    """The point's scenario and workload, as documents of their canonical bytes (their digests
    in the report are of these bytes). Raises ``InvalidInput`` if the settings break R4."""
    scenario = load_document(
        canonical_json(scenario_value(base.scenario.value, point)),
        f"{base.scenario.file} with {point.describe()}",
        "scenario",
    )
    speedup = point.get("speedup")
    if speedup is None or speedup == 1:
        return scenario, base.workload
    assert isinstance(speedup, Fraction)
    value = copy.deepcopy(base.workload.value)
    for request in value["requests"]:
        request["arrival_us"] = scaled_arrival(request["arrival_us"], speedup)
    data = canonical_json(value)
    workload = Document(
        file=f"{base.workload.file} sped up {speedup}",
        kind="workload",
        version=base.workload.version,
        data=data,
        value=value,
    )
    return scenario, workload


def _columns(report: dict[str, Any]) -> dict[str, Any]:
    summary = report["summary"]
    busy = [worker["busy_us"] for worker in report["workers"]]
    makespan = summary["makespan_us"]
    columns: dict[str, Any] = {
        "status": "ok",
        **{
            name: summary[name]
            for name in (
                "requests",
                "completed",
                "rejected",
                "makespan_us",
                "request_throughput_per_s",
                "output_token_throughput_per_s",
            )
        },
    }
    # R63: only a scenario with slo has goodput
    columns["goodput_requests"] = summary["goodput"]["requests"] if "goodput" in summary else None
    for metric in METRICS:
        for statistic in STATISTICS:
            columns[f"{metric}_{statistic}"] = summary[metric][statistic]
    # R24-style quotients of integers: the fleet's busy share, and its least and most busy worker
    columns["utilization_mean"] = sum(busy) / (len(busy) * makespan) if makespan else None
    columns["utilization_min"] = min(busy) / makespan if makespan else None
    columns["utilization_max"] = max(busy) / makespan if makespan else None
    columns["message"] = None
    return columns


def _failed(status: str, message: str) -> dict[str, Any]:
    columns: dict[str, Any] = dict.fromkeys(RESULT_COLUMNS)
    columns.update(status=status, message=message)
    return columns


def run_point(base: BaseInputs, point: Point, *, keep_report: bool = False) -> PointResult:
    """Replay one point; a replay that cannot go on is a row with its status and message."""
    started = time.perf_counter()
    report: bytes | None = None
    try:
        scenario, workload = point_documents(base, point)
        report = replay_documents(scenario, workload, base.timing_profile)
        columns = _columns(json.loads(report))
    except OutOfCoverage as error:
        lines = error.lines(base.timing_profile.file)
        columns = _failed("out_of_coverage", "; ".join(lines[:3]))
    except UnrepresentableTime as error:
        columns = _failed("unrepresentable_time", str(error))
    except ServesimError as error:
        columns = _failed("invalid", str(error))
    return PointResult(
        point=point,
        columns=columns,
        seconds=time.perf_counter() - started,
        report=report if keep_report else None,
    )
