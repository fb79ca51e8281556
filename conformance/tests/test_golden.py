"""The smoke, golden and invalid tiers: every corpus case, one test each, smoke cases first."""

from __future__ import annotations

import pytest

from servesim_conformance.corpus import Case, load_corpus
from servesim_conformance.implementation import Description, Implementation
from servesim_conformance.outcomes import Outcome
from servesim_conformance.runner import run_case

CASES = sorted(load_corpus().cases, key=lambda case: not case.smoke)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
@pytest.mark.usefixtures("adapter_checked")
def test_case(
    case: Case,
    implementation: Implementation,
    description: Description,
    expected_failures: dict[str, str],
) -> None:
    result = run_case(case, implementation, description, expected_failures=expected_failures)
    if result.outcome is Outcome.SKIP:
        pytest.skip(result.message)
    if result.outcome is Outcome.XFAIL:
        pytest.xfail(result.message)
    if result.outcome is not Outcome.PASS:
        stderr = result.details.get("stderr_tail", "")
        pytest.fail(f"{result.outcome.value}: {result.message}\nstderr: {stderr}", pytrace=False)
