"""Replay: from three input files to the report's bytes, the job of ``servesim replay``."""

from __future__ import annotations

from pathlib import Path

from servesim.canonical import canonical_json
from servesim.documents import (
    build_scenario,
    build_timing_profile,
    build_workload,
    read_document,
)
from servesim.report import build_report
from servesim.simulation import simulate


def replay(
    scenario: str | Path,
    workload: str | Path,
    timing_profile: str | Path,
    *,
    trace: bool = False,
) -> bytes:
    """The canonical report bytes for replaying the three documents.

    Raises ``InvalidInput`` or ``UnrepresentableTime`` (both ``ServesimError``) for inputs the
    specification rejects.
    """
    documents = {
        "scenario": read_document(scenario, "scenario"),
        "workload": read_document(workload, "workload"),
        "timing_profile": read_document(timing_profile, "timing_profile"),
    }
    result = simulate(
        build_scenario(documents["scenario"].value),
        build_workload(documents["workload"].value),
        build_timing_profile(documents["timing_profile"].value),
        record_trace=trace,
    )
    report = build_report(result, {name: doc.data for name, doc in documents.items()})
    return canonical_json(report)
