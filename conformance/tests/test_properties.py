"""The property tier: generated inputs through the harness, checked against the invariants.

``SERVESIM_PROPERTY_EXAMPLES`` sets how many inputs each property tries (default 25). With
``--differential`` (or ``SERVESIM_DIFFERENTIAL=1``) every report must also equal the reference's
bytes; a divergence is shrunk by hypothesis and the minimal case is written, ready to add to the
golden corpus, under ``--divergence-dir`` (default ``.servesim-divergence``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim_conformance import invariants
from servesim_conformance.implementation import Description, Implementation
from servesim_conformance.properties import (
    Documents,
    PropertyRunner,
    at_current_version,
    input_bytes,
    reference_report,
    write_case,
)
from servesim_conformance.strategies import input_triples, measured_input_triples

EXAMPLES = int(os.environ.get("SERVESIM_PROPERTY_EXAMPLES", "25"))
tier = settings(max_examples=EXAMPLES)


@pytest.fixture(scope="module")
def runner(implementation: Implementation) -> PropertyRunner:
    return PropertyRunner(implementation)


@tier
@given(documents=input_triples())
def test_single_run_invariants(runner: PropertyRunner, documents: Documents) -> None:
    """R9 to R11, R16 to R21, R25, R28 to R30 on one traced run."""
    scenario, workload, _ = documents
    report = runner.report(documents)
    invariants.check_report(scenario, workload, report)
    invariants.check_digests(input_bytes(documents), report)


@tier
@given(documents=input_triples())
def test_step_shapes_and_durations(runner: PropertyRunner, documents: Documents) -> None:
    """R22, R25, R30: every traced step's shape, its duration under the profile, the echo."""
    invariants.check_step_shapes(documents[2], runner.report(documents))


#: What an implementation must declare to be given measured timing profiles (R38).
MEASURED = {"timing.grid", "timing.regression"}


@tier
@given(documents=measured_input_triples())
def test_measured_profiles_single_run_invariants(
    runner: PropertyRunner, description: Description, documents: Documents
) -> None:
    """R22, R41, R42 and the single-run invariants with grid and regression profiles."""
    if not description.features >= MEASURED or "1.1" not in description.schema_versions.get(
        "timing_profile", []
    ):
        pytest.skip(
            "the implementation does not declare timing profile 1.1 with grid and regression"
        )
    scenario, workload, timing = documents
    report = runner.report(documents)
    invariants.check_report(scenario, workload, report)
    invariants.check_step_shapes(timing, report)


@tier
@given(documents=input_triples())
def test_rerun_gives_identical_bytes(runner: PropertyRunner, documents: Documents) -> None:
    """R21: the same inputs give the same bytes."""
    assert runner.report_bytes(documents) == runner.report_bytes(documents)


@tier
@given(documents=input_triples(), shift=st.integers(1, 10**9))
def test_shifting_arrivals_shifts_times(
    runner: PropertyRunner, documents: Documents, shift: int
) -> None:
    """R6, R7 (metamorphic): shifting every arrival by D shifts every time by D."""
    scenario, workload, timing = documents
    shifted: dict[str, Any] = json.loads(json.dumps(workload))
    for request in shifted["requests"]:
        request["arrival_us"] += shift
    before = runner.report(documents)
    after = runner.report((scenario, shifted, timing))
    invariants.check_arrival_shift(before, after, shift)


@tier
@given(documents=input_triples())
def test_differential_against_reference(
    runner: PropertyRunner, documents: Documents, pytestconfig: pytest.Config
) -> None:
    """Byte-for-byte agreement with the reference (only with --differential)."""
    enabled = pytestconfig.getoption("--differential") or os.environ.get("SERVESIM_DIFFERENTIAL")
    if not enabled:
        pytest.skip("differential mode is off (--differential or SERVESIM_DIFFERENTIAL=1)")
    actual = at_current_version(runner.report_bytes(documents))
    expected = reference_report(documents)
    if actual != expected:
        target = Path(pytestconfig.getoption("--divergence-dir") or ".servesim-divergence")
        # Hypothesis calls this again with ever smaller inputs and last with the minimal one,
        # so the folder ends up holding the shrunk case.
        write_case(target / "diverged", documents, note="The implementation's report differs.")
        pytest.fail(f"report differs from the reference; case written to {target / 'diverged'}")
