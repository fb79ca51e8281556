"""benchmarks/bench.py finds the real traces where it is told, and says so when it cannot.

No figure is checked here (speed is measured by the benchmark, never asserted in a test); only
that a run which measured nothing says so plainly in its last line.
"""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

BENCH = REPO / "benchmarks" / "bench.py"


def _bench(*arguments: str, **environment: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    return subprocess.run(
        [sys.executable, str(BENCH), "--short", "--no-dynamo", *arguments],
        capture_output=True,
        text=True,
        check=False,
        env={**env, **environment},
    )


def _last_line(output: str) -> str:
    lines = output.strip().splitlines()
    return lines[-1] if lines else ""


def test_without_traces_the_last_line_says_nothing_was_measured(tmp_path: Path) -> None:
    result = _bench(SERVESIM_TRACES=str(tmp_path))
    assert result.returncode == 0, result.stderr
    last = _last_line(result.stdout)
    assert last.startswith("NOTHING MEASURED")
    assert str(tmp_path) in last  # the folder it looked in, from SERVESIM_TRACES
    assert "SERVESIM_TRACES" in last
    assert str(tmp_path) in result.stderr
    assert "mooncake" in result.stderr


def test_the_traces_option_overrides_the_environment(tmp_path: Path) -> None:
    given = tmp_path / "given"
    given.mkdir()
    result = _bench("--traces", str(given), SERVESIM_TRACES=str(tmp_path / "elsewhere"))
    assert result.returncode == 0, result.stderr
    assert f"no real traces in {given} " in _last_line(result.stdout)


def test_under_ci_missing_traces_fail_and_still_say_so(tmp_path: Path) -> None:
    result = _bench(SERVESIM_TRACES=str(tmp_path), CI="true")
    assert result.returncode == 2
    assert _last_line(result.stdout).startswith("NOTHING MEASURED")


@pytest.mark.parametrize("variable", ["CI", "SERVESIM_TRACES"])
def test_tox_bench_passes_the_variable_through(variable: str) -> None:
    tox = configparser.ConfigParser()
    tox.read(REPO / "tox.ini")
    assert variable in tox["testenv:bench"]["passenv"].split()
