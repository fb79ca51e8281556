"""The property tier: generated inputs, run through the harness, checked by the invariants.

``PropertyRunner`` runs one generated input triple against an implementation and returns the
report, raising ``PropertyFailure`` when the run itself misbehaves. Differential mode compares
with the reference's bytes; ``write_case`` turns a (shrunk) divergence into a golden case folder.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import servesim
from servesim.contract.canonical import canonical_bytes
from servesim.contract.migrations import CHAIN
from servesim.contract.schemas import SUPPORTED_VERSIONS
from servesim_conformance.corpus import EXPECTED_REPORT, INPUT_FILES
from servesim_conformance.implementation import Description, Implementation, Run
from servesim_conformance.runner import REPORT_NAME, replay_arguments

Documents = tuple[dict[str, Any], dict[str, Any], dict[str, Any]]


class PropertyFailure(AssertionError):
    """The implementation did not produce a report for valid generated input."""


def encode(document: dict[str, Any]) -> bytes:
    """The bytes a generated document is written as (indented, final newline)."""
    return (json.dumps(document, indent=2) + "\n").encode()


def input_bytes(documents: Documents) -> dict[str, bytes]:
    """Role -> the bytes written for each generated document."""
    return {role: encode(doc) for role, doc in zip(INPUT_FILES, documents, strict=True)}


def at_current_version(data: bytes) -> bytes:
    """A report's bytes at the current report version: an older canonical report migrated (R37).

    A report 1.0 writer is compared with the reference on what 1.0 holds (R38). Bytes that are
    not a canonical older report are returned as they are, so a comparison still sees them.
    """
    value = json.loads(data)
    current = CHAIN.current["report"]
    if value.get("schema_version") == current or canonical_bytes(value) + b"\n" != data:
        return data
    return canonical_bytes(CHAIN.migrate(value).document) + b"\n"


def reads_kv_cache(description: Description) -> bool:
    """Whether the implementation and the reference both read scenario 1.1 and workload 1.1,
    the versions with ``kv_cache`` and prefix hashes (R53), so generated cases may use them."""
    kinds = ("scenario", "workload")
    return all(
        description.declares(kind, "1.1") and "1.1" in SUPPORTED_VERSIONS[kind] for kind in kinds
    )


def reads_state_aware_routing(description: Description) -> bool:
    """Whether the implementation and the reference both read scenario 1.2, the version with
    ``least_loaded`` and ``cache_aware`` (R57), and workload 1.1 (its prefix hashes)."""
    versions = (("scenario", "1.2"), ("workload", "1.1"))
    return all(
        description.declares(kind, version) and version in SUPPORTED_VERSIONS[kind]
        for kind, version in versions
    )


def reads_timing(description: Description, timing: dict[str, Any]) -> bool:
    """Whether the implementation runs the timing profile ``timing``: a ``synthetic_linear``
    one always (the baseline), a measured one (R41, R42) only when it declares timing profile
    1.1 and the model's feature (``timing.grid``, ``timing.regression``). Generated runs with
    a cache, a state-aware router or sessions draw measured profiles too, so that the features
    are exercised together; an implementation without measured timing runs the others."""
    kind = timing["model"]["kind"]
    if kind == "synthetic_linear":
        return True
    return f"timing.{kind}" in description.features and description.declares(
        "timing_profile", "1.1"
    )


def reads_sessions(description: Description) -> bool:
    """Whether the implementation and the reference both read scenario 1.3 and workload 1.2,
    the versions with sessions, the closed loop, the stop time and the objectives (R64), and
    scenario 1.2 and workload 1.1 (the cache and routing members generated cases combine them
    with)."""
    versions = (("scenario", "1.3"), ("workload", "1.2"))
    return reads_state_aware_routing(description) and all(
        description.declares(kind, version) and version in SUPPORTED_VERSIONS[kind]
        for kind, version in versions
    )


def reads_pools(description: Description) -> bool:
    """Whether the implementation and the reference both read scenario 1.4, the version with
    pools, ranks and weighted round robin (R86), and scenario 1.2 and workload 1.1 (the cache
    and routing members generated pool scenarios combine them with)."""
    return reads_state_aware_routing(description) and (
        description.declares("scenario", "1.4") and "1.4" in SUPPORTED_VERSIONS["scenario"]
    )


def reads_styles(description: Description) -> bool:
    """Whether the implementation and the reference both read scenario 1.5, the version with
    the scheduler styles (R96), and scenario 1.4's pools they are drawn with."""
    return reads_pools(description) and (
        description.declares("scenario", "1.5") and "1.5" in SUPPORTED_VERSIONS["scenario"]
    )


def reads_disaggregation(description: Description) -> bool:
    """Whether the implementation and the reference both read scenario 1.6, the version with
    disaggregated prefill and decode (R108), and scenario 1.5's styles its pools are drawn
    with."""
    return reads_styles(description) and (
        description.declares("scenario", "1.6") and "1.6" in SUPPORTED_VERSIONS["scenario"]
    )


def reads_fleet_changes(description: Description) -> bool:
    """Whether the implementation and the reference both read scenario 1.7, the version with
    scaling, failures and recovery (R124), and scenario 1.6's disaggregated pools its fleets are
    drawn with."""
    return reads_disaggregation(description) and (
        description.declares("scenario", "1.7") and "1.7" in SUPPORTED_VERSIONS["scenario"]
    )


def reads_continuing_sessions(description: Description) -> bool:
    """Whether the implementation and the reference both read workload 1.3, the version with
    ``session_prompts_extend`` (R141), and scenario 1.3 and workload 1.2 (the sessions,
    caches and routing its generated cases combine it with)."""
    return reads_sessions(description) and (
        description.declares("workload", "1.3") and "1.3" in SUPPORTED_VERSIONS["workload"]
    )


def reads_host_tier(description: Description) -> bool:
    """Whether the implementation and the reference both read scenario 1.8, the version with
    ``kv_cache.host`` (R141), and workload 1.3 and scenario 1.7's earlier members (pools,
    styles, disaggregation) its generated cases are drawn with."""
    return (
        reads_continuing_sessions(description)
        and reads_fleet_changes(description)
        and description.declares("scenario", "1.8")
        and "1.8" in SUPPORTED_VERSIONS["scenario"]
    )


def reference_report(documents: Documents, *, trace: bool = True) -> bytes:
    """The reference's report bytes for generated documents, in-process."""
    loaded = [
        servesim.load_document(data, INPUT_FILES[role], role)
        for role, data in input_bytes(documents).items()
    ]
    return servesim.replay_documents(*loaded, trace=trace)


@dataclass(frozen=True)
class PropertyRunner:
    """Runs generated documents through an implementation, one temporary folder per run."""

    implementation: Implementation

    def _replay(self, documents: Documents, folder: Path, *, trace: bool) -> Run:
        """Write the inputs into ``folder`` and replay them there; a timeout raises
        ``PropertyFailure``."""
        for role, data in input_bytes(documents).items():
            (folder / INPUT_FILES[role]).write_bytes(data)
        run = self.implementation.run(replay_arguments(folder, trace=trace))
        if run.timed_out:
            raise PropertyFailure(f"timed out after {self.implementation.timeout_s:g} s")
        return run

    def report_bytes(self, documents: Documents, *, trace: bool = True) -> bytes:
        with tempfile.TemporaryDirectory(prefix="servesim-property-") as temporary:
            folder = Path(temporary)
            run = self._replay(documents, folder, trace=trace)
            report = folder / REPORT_NAME
            if run.returncode != 0 or not report.is_file():
                raise PropertyFailure(
                    f"exit code {run.returncode} on valid input"
                    f"{'' if report.is_file() else ' and no report'}; stderr: "
                    f"{run.stderr.strip()[-500:]}"
                )
            return report.read_bytes()

    def rejects(self, documents: Documents) -> tuple[int | None, bool]:
        """The exit code on ``documents`` and whether a report file was left (R5 wants 2 and
        none); a timeout raises ``PropertyFailure``."""
        with tempfile.TemporaryDirectory(prefix="servesim-property-") as temporary:
            folder = Path(temporary)
            run = self._replay(documents, folder, trace=True)
            return run.returncode, (folder / REPORT_NAME).exists()

    def report(self, documents: Documents, *, trace: bool = True) -> dict[str, Any]:
        """The report's value at the current report version (an older one migrated, R38)."""
        data = at_current_version(self.report_bytes(documents, trace=trace))
        try:
            value: dict[str, Any] = servesim.load_document(data, REPORT_NAME, "report").value
        except servesim.InvalidInput as error:
            raise PropertyFailure(f"invalid report: {error}") from None
        return value


def write_case(folder: Path, documents: Documents, *, note: str) -> Path:
    """Write ``documents`` and the reference's report as a ready-to-add golden case folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for role, data in input_bytes(documents).items():
        (folder / INPUT_FILES[role]).write_bytes(data)
    (folder / EXPECTED_REPORT).write_bytes(reference_report(documents))
    (folder / "DIVERGENCE.md").write_text(
        f"# Divergence found by the property tier\n\n{note}\n\nTo keep it: move this folder to "
        "golden/valid/<name>/, add a manifest entry, and derive the expected values by hand in "
        "DERIVATION.md before trusting expected-report.json.\n",
        encoding="utf-8",
    )
    return folder
