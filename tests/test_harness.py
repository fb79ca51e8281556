"""The harness is tested too: fake implementations that misbehave get the right outcome, and
none is ever counted as a pass."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from servesim_conformance.corpus import Case, load_corpus
from servesim_conformance.implementation import HarnessError, Implementation
from servesim_conformance.outcomes import Outcome
from servesim_conformance.runner import run_case, run_cases
from tests.golden_snapshots import GOLDEN

FAKE = Path(__file__).parent / "fakes" / "fake_sim.py"
CORPUS = load_corpus(GOLDEN)
VALID = next(case for case in CORPUS.cases if case.id == "valid/smoke-one-request")
CHUNKED = next(case for case in CORPUS.cases if case.id == "valid/smoke-chunked")


def fake(mode: str, *, timeout_s: float = 10.0) -> Implementation:
    return Implementation((sys.executable, str(FAKE), mode), timeout_s=timeout_s)


def invalid_case(tmp_path: Path) -> Case:
    """An invalid case made here, so the harness tests do not depend on the corpus's."""
    folder = tmp_path / "invalid" / "zero-workers"
    folder.mkdir(parents=True)
    for path in VALID.input_paths().values():
        (folder / path.name).write_bytes(path.read_bytes())
    scenario = folder / "scenario.json"
    scenario.write_text(scenario.read_text().replace('"workers": 1', '"workers": 0'))
    return Case(
        id="invalid/zero-workers",
        folder=folder,
        description="zero workers",
        schema_version="1.0",
        features=frozenset(),
        rules=("R3",),
        fault="/fleet/workers is 0",
    )


def outcome(mode: str, case: Case, **kwargs: float) -> Outcome:
    implementation = fake(mode, **kwargs)
    description = implementation.describe()
    return run_case(case, implementation, description).outcome


def test_honest_implementation_passes_valid_and_invalid(tmp_path: Path) -> None:
    assert outcome("honest", VALID) is Outcome.PASS
    assert outcome("honest", invalid_case(tmp_path)) is Outcome.PASS


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("crash", Outcome.ERROR),
        ("segfault", Outcome.ERROR),
        ("no-report", Outcome.ERROR),
        ("garbage", Outcome.INVALID_REPORT),
        ("schema-invalid", Outcome.INVALID_REPORT),
        ("wrong-numbers", Outcome.FAIL),
        ("pretty-printed", Outcome.FAIL),
        ("nondeterministic", Outcome.FAIL),
        ("ignore-trace", Outcome.FAIL),
    ],
)
def test_broken_implementation_gets_its_outcome(mode: str, expected: Outcome) -> None:
    assert outcome(mode, VALID) is expected


def test_hang_is_a_timeout_and_the_process_is_killed() -> None:
    assert outcome("hang", VALID, timeout_s=1.0) is Outcome.TIMEOUT


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("accept-invalid", Outcome.FAIL),
        ("report-then-reject", Outcome.FAIL),
        ("exit-1-on-invalid", Outcome.ERROR),
        ("crash", Outcome.ERROR),
    ],
)
def test_invalid_input_must_be_rejected_with_exit_2(
    tmp_path: Path, mode: str, expected: Outcome
) -> None:
    assert outcome(mode, invalid_case(tmp_path)) is expected


def test_wrong_numbers_name_the_first_differing_pointer() -> None:
    implementation = fake("wrong-numbers")
    result = run_case(VALID, implementation, implementation.describe())
    assert result.difference is not None
    assert result.difference.pointer == "/requests/0/token_times_us/2"
    assert result.difference.expected == 3300
    assert result.difference.actual == 3301
    assert "first difference at /requests/0/token_times_us/2" in result.message


def test_unknown_protocol_is_refused() -> None:
    with pytest.raises(HarnessError, match="protocol 99"):
        fake("bad-protocol").describe()


def test_undeclared_feature_skips_the_case() -> None:
    assert outcome("no-chunking", CHUNKED) is Outcome.SKIP


def test_undeclared_input_version_skips_the_case() -> None:
    """R38: a case whose inputs are at a version the implementation does not read is skipped."""
    implementation = fake("honest")
    description = implementation.describe()
    future = Case(
        id="valid/smoke-one-request",
        folder=VALID.folder,
        description="the same inputs, labelled as a later version",
        schema_version="1.1",
        features=frozenset(),
        rules=("R38",),
    )
    result = run_case(future, implementation, description)
    assert result.outcome is Outcome.SKIP
    assert "undeclared for: scenario, timing_profile, workload" in result.message


def test_protocol_1_requires_version_1_0() -> None:
    with pytest.raises(HarnessError, match=r"does not declare schema version 1\.0 for: workload"):
        fake("reads-only-2.0").describe()


def test_output_is_bounded_and_leftover_processes_are_killed(tmp_path: Path) -> None:
    marker = tmp_path / "survived"
    grandchild = f"import time; time.sleep(2); open({str(marker)!r}, 'w')"
    script = tmp_path / "chatty.py"
    script.write_text(
        "import subprocess, sys\n"
        "sys.stdout.write('x' * 3_000_000)\n"
        f"subprocess.Popen([sys.executable, '-c', {grandchild!r}])\n"
    )
    run = Implementation((sys.executable, str(script)), timeout_s=10).run([])
    assert run.returncode == 0, run.stderr
    assert len(run.stdout) == 1 << 20
    time.sleep(3)
    assert not marker.exists(), "a grandchild outlived its case"


def test_expected_failures_are_strict() -> None:
    implementation = fake("wrong-numbers")
    description = implementation.describe()
    listed = {VALID.id: "known bug"}
    assert run_case(VALID, implementation, description, expected_failures=listed).outcome is (
        Outcome.XFAIL
    )
    honest = fake("honest")
    xpass = run_case(VALID, honest, honest.describe(), expected_failures=listed)
    assert xpass.outcome is Outcome.XPASS
    assert xpass.outcome.is_problem


def test_all_smoke_cases_failing_means_adapter_broken() -> None:
    implementation = fake("no-report")
    results, broken = run_cases(CORPUS.cases, implementation, implementation.describe())
    assert broken
    assert all(result.tier == "smoke" for result in results)


def test_no_broken_mode_ever_passes(tmp_path: Path) -> None:
    broken = ["crash", "no-report", "garbage", "schema-invalid", "wrong-numbers", "ignore-trace"]
    for mode in broken:
        assert outcome(mode, VALID) is not Outcome.PASS, mode
