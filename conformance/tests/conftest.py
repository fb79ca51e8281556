"""Pytest wiring for the conformance tiers: which implementation, which corpus, which cases.

Point the suite at an implementation with ``--impl "COMMAND ..."`` or ``SERVESIM_IMPL``; the
default is this reference. Expected failures: ``--expected-failures FILE`` or
``SERVESIM_EXPECTED_FAILURES``.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from servesim_conformance.corpus import Corpus, load_corpus
from servesim_conformance.expectations import load_expected_failures
from servesim_conformance.implementation import Description, HarnessError, Implementation
from servesim_conformance.runner import ADAPTER_BROKEN, adapter_broken, run_case
from servesim_conformance.strategies import load_profile

load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

REFERENCE = shlex.join([sys.executable, "-m", "servesim_cli", "replay"])


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("servesim conformance")
    group.addoption("--impl", help="implementation command (env SERVESIM_IMPL)")
    group.addoption(
        "--expected-failures", help="expected-failure manifest (env SERVESIM_EXPECTED_FAILURES)"
    )
    group.addoption("--timeout", type=float, help="seconds per case (env SERVESIM_TIMEOUT)")
    group.addoption(
        "--divergence-dir", help="where a shrunk divergence is written as a golden case"
    )
    group.addoption(
        "--differential", action="store_true", help="compare every report with the reference's"
    )


def _setting(config: pytest.Config, option: str, variable: str) -> str | None:
    value = config.getoption(option)
    return str(value) if value is not None else os.environ.get(variable)


@pytest.fixture(scope="session")
def implementation(pytestconfig: pytest.Config) -> Implementation:
    command = _setting(pytestconfig, "--impl", "SERVESIM_IMPL") or REFERENCE
    timeout = _setting(pytestconfig, "--timeout", "SERVESIM_TIMEOUT")
    return Implementation.from_command_line(command, timeout_s=float(timeout or 10))


@pytest.fixture(scope="session")
def description(implementation: Implementation) -> Description:
    try:
        return implementation.describe()
    except HarnessError as error:
        pytest.exit(f"servesim conformance: {error}", returncode=2)


@pytest.fixture(scope="session")
def expected_failures(pytestconfig: pytest.Config) -> dict[str, str]:
    path = _setting(pytestconfig, "--expected-failures", "SERVESIM_EXPECTED_FAILURES")
    return load_expected_failures(Path(path)) if path else {}


@pytest.fixture(scope="session")
def corpus() -> Corpus:
    return load_corpus()


@pytest.fixture(scope="session")
def adapter_checked(
    corpus: Corpus,
    implementation: Implementation,
    description: Description,
    expected_failures: dict[str, str],
) -> None:
    """Run the smoke cases once; when all fail, stop: the adapter, not the simulator, is broken."""
    results = [
        run_case(case, implementation, description, expected_failures=expected_failures)
        for case in corpus.cases
        if case.smoke
    ]
    if adapter_broken(results):
        pytest.exit(ADAPTER_BROKEN, returncode=1)
