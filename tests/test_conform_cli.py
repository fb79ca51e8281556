"""``servesim conform``: exit codes, the run report and its schema, expected-failure files,
and the property tier's runner against broken implementations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servesim_conformance.corpus import load_corpus
from servesim_conformance.implementation import Implementation
from servesim_conformance.properties import PropertyFailure, PropertyRunner, write_case
from servesim_conformance.schemas import validate_harness_document
from tests.helpers import REPO, run_servesim, scenario_doc, timing_doc, workload_doc

FAKE = REPO / "tests" / "fakes" / "fake_sim.py"
SMOKE = ["--case", "valid/smoke-*", "--case", "invalid/zero-workers"]


def conform(*arguments: str | Path) -> subprocess.CompletedProcess[str]:
    return run_servesim("conform", *arguments)


def fake_command(mode: str) -> str:
    return f"{sys.executable} {FAKE} {mode}"


def test_reference_passes_and_writes_valid_run_report(tmp_path: Path) -> None:
    report, markdown = tmp_path / "run.json", tmp_path / "summary.md"
    result = conform(*SMOKE, "--report-json", report, "--markdown", markdown)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 pass" in result.stdout
    value = json.loads(report.read_text())
    assert validate_harness_document("run-report", value) == []
    assert value["summary"]["pass"] == 4
    # smoke-chunked needs prefill.chunked, so it is no longer a smoke case (issue 12)
    assert [case["tier"] for case in value["cases"]] == ["smoke", "smoke", "golden", "invalid"]
    assert all(case["compared_without"] == [] for case in value["cases"])
    assert "No failures." in markdown.read_text()


def test_protocol_1_report_1_0_writer_passes(tmp_path: Path) -> None:
    """R38: an older implementation (protocol 1, report 1.0) is still accepted; its reports are
    migrated to 2.0 before the byte comparison."""
    report = tmp_path / "run.json"
    result = conform("--impl", fake_command("writes-report-1.0"), *SMOKE, "--report-json", report)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 pass" in result.stdout
    value = json.loads(report.read_text())
    assert validate_harness_document("run-report", value) == []
    assert value["implementation"]["description"]["protocol_version"] == 1


def test_failures_exit_1_and_are_listed(tmp_path: Path) -> None:
    markdown = tmp_path / "summary.md"
    result = conform("--impl", fake_command("wrong-numbers"), *SMOKE, "--markdown", markdown)
    assert result.returncode == 1
    assert "FAIL  valid/smoke-one-request  first difference at /requests/0/" in result.stdout
    assert "| `valid/smoke-one-request` | fail |" in markdown.read_text()


def test_written_expected_failures_make_the_next_run_green(tmp_path: Path) -> None:
    listed = tmp_path / "expected-failures.json"
    command = fake_command("ignore-trace")
    first = conform("--impl", command, *SMOKE, "--write-expected-failures", listed)
    assert first.returncode == 1
    document = json.loads(listed.read_text())
    assert validate_harness_document("expected-failures", document) == []
    assert len(document["expected_failures"]) == 3
    second = conform("--impl", command, *SMOKE, "--expected-failures", listed)
    assert second.returncode == 0, second.stdout
    assert "1 pass, 3 xfail" in second.stdout
    strict = conform(*SMOKE, "--expected-failures", listed)  # the honest reference
    assert strict.returncode == 1
    assert "XPASS" in strict.stdout


def test_adapter_broken_stops_the_run() -> None:
    result = conform("--impl", fake_command("no-report"))
    assert result.returncode == 1
    assert "adapter broken" in result.stderr
    assert result.stdout.count("ERROR") == 3


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("", "empty"),
        ("/nonexistent/simulator", "cannot start"),
        (fake_command("bad-protocol"), "protocol 99"),
    ],
)
def test_unusable_implementation_exits_2(command: str, message: str) -> None:
    result = conform("--impl", command)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_r73_a_run_in_which_no_case_ran_exits_1() -> None:
    """Skips never count as passes: a run whose every case was skipped checked nothing."""
    result = conform("--impl", fake_command("no-chunking"), "--case", "valid/smoke-chunked")
    assert result.returncode == 1
    assert "1 skip" in result.stdout
    assert "no case ran, so nothing was checked" in result.stderr


def test_feature_filter_selects_tagged_cases() -> None:
    result = conform("--feature", "routing.random", "-v")
    assert result.returncode == 0
    listed = [line.split()[1] for line in result.stdout.splitlines() if "PASS" in line]
    assert listed
    features = {case.id: case.features for case in load_corpus(REPO / "golden").cases}
    assert all("routing.random" in features[case] for case in listed)


DOCUMENTS = (
    scenario_doc(workers=2, max_num_seqs=2, max_batched_tokens=16),
    workload_doc(("a", 0, 5, 3), ("b", 0, 7, 2), ("c", 100, 3, 4)),
    timing_doc(),
)


def test_property_runner_sees_nondeterminism() -> None:
    runner = PropertyRunner(Implementation.from_command_line(fake_command("nondeterministic")))
    assert runner.report_bytes(DOCUMENTS) != runner.report_bytes(DOCUMENTS)


@pytest.mark.parametrize(
    ("mode", "message"),
    [("crash", "exit code 1"), ("no-report", "no report"), ("schema-invalid", "invalid report")],
)
def test_property_runner_refuses_broken_runs(mode: str, message: str) -> None:
    runner = PropertyRunner(Implementation.from_command_line(fake_command(mode)))
    with pytest.raises(PropertyFailure, match=message):
        runner.report(DOCUMENTS)


def test_divergence_is_written_as_a_golden_case(tmp_path: Path) -> None:
    folder = write_case(tmp_path / "diverged", DOCUMENTS, note="test")
    names = sorted(path.name for path in folder.iterdir())
    assert names == [
        "DIVERGENCE.md",
        "expected-report.json",
        "scenario.json",
        "timing-profile.json",
        "workload.json",
    ]
    report = json.loads((folder / "expected-report.json").read_text())
    assert [entry["id"] for entry in report["requests"]] == ["a", "b", "c"]


def test_differential_mode_shrinks_a_divergence_into_a_golden_case(tmp_path: Path) -> None:
    """A plausible bug (R22 rounded down) is found, shrunk and written as a case folder."""
    environment = {**os.environ, "HYPOTHESIS_PROFILE": "ci", "SERVESIM_PROPERTY_EXAMPLES": "20"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(REPO / "conformance" / "tests" / "test_properties.py"),
            "-q",
            "-p",
            "no:cacheprovider",
            "--differential",
            "-k",
            # The first differential test alone: the others (caches, routing, sessions, pools)
            # fail on the same fake too, and each would shrink its own example for seconds.
            "test_differential_against_reference",
            "--impl",
            fake_command("floor-rounding"),
            "--divergence-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        cwd=REPO,
    )
    assert result.returncode == 1, result.stdout[-2000:]
    case = tmp_path / "diverged"
    assert "report differs from the reference" in result.stdout
    workload = json.loads((case / "workload.json").read_text())
    # How far hypothesis shrinks depends on timing (it keeps generating for up to 10 s after the
    # first failure, so a slower machine starts shrinking from other examples): small, not 1.
    assert len(workload["requests"]) <= 2, "hypothesis shrank the workload"
    assert (case / "expected-report.json").is_file()
    assert (case / "DIVERGENCE.md").is_file()


def test_written_expected_failures_keep_the_manifest_s_listed_failures(tmp_path: Path) -> None:
    """Issue 16: with --manifest naming an expected-failure list, the failing cases are xfail;
    --write-expected-failures must still list them (keeping their reason and link), not write
    an empty list, and must drop a listed case that now passes."""
    known = tmp_path / "known.json"
    known.write_text(
        json.dumps(
            {
                "implementation": "fake",
                "expected_failures": [
                    {"id": "valid/smoke-one-request", "reason": "off by one", "link": "#7"},
                    {"id": "invalid/zero-workers", "reason": "now fixed", "link": ""},
                ],
            }
        )
    )
    manifest = tmp_path / "implementation.json"
    manifest.write_text(
        json.dumps(
            {
                "name": "fake",
                "command": [sys.executable, str(FAKE), "wrong-numbers"],
                "expected_failures": known.name,
            }
        )
    )
    written = tmp_path / "written.json"
    cases = ["--case", "valid/smoke-one-request", "--case", "valid/smoke-two-workers"]
    result = conform(
        "--manifest", manifest, *cases, "--case", "invalid/zero-workers",
        "--write-expected-failures", written,
    )  # fmt: skip
    assert result.returncode == 1  # the xpass and the new failure
    document = json.loads(written.read_text())
    assert validate_harness_document("expected-failures", document) == []
    listed = {entry["id"]: entry for entry in document["expected_failures"]}
    assert sorted(listed) == ["valid/smoke-one-request", "valid/smoke-two-workers"]
    assert listed["valid/smoke-one-request"] == {
        "id": "valid/smoke-one-request",
        "reason": "off by one",
        "link": "#7",
    }
    assert listed["valid/smoke-two-workers"]["reason"].startswith("fail: first difference")
    assert document["implementation"] == "fake"  # the manifest's name for it


def test_an_implementation_without_trace_is_compared_on_the_traced_cases(tmp_path: Path) -> None:
    """Issue 12: the three traced smoke-* cases run without --trace and pass, and say so."""
    report, markdown = tmp_path / "run.json", tmp_path / "summary.md"
    result = conform(
        "--impl", fake_command("no-trace"), *SMOKE, "-v",
        "--report-json", report, "--markdown", markdown,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 pass" in result.stdout
    assert "PASS  valid/smoke-one-request  compared without trace (not declared)" in result.stdout
    value = json.loads(report.read_text())
    assert validate_harness_document("run-report", value) == []
    assert [case["compared_without"] for case in value["cases"]] == [["trace"]] * 3 + [[]]
    assert "3 cases were compared without features" in markdown.read_text()


def test_protocol_4_without_synthetic_linear_skips_its_cases(tmp_path: Path) -> None:
    """A simulator without servesim's synthetic timing (R38, protocol 4) is not called broken:
    the synthetic cases are skipped, the grid case passes, and the run exits 0."""
    report = tmp_path / "run.json"
    result = conform(
        "--impl",
        fake_command("protocol-4-no-synthetic"),
        *SMOKE,
        "--case",
        "valid/dynamo-fixed-smoke",
        "--report-json",
        report,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    value = json.loads(report.read_text())
    assert validate_harness_document("run-report", value) == []
    outcomes = {case["id"]: case["outcome"] for case in value["cases"]}
    assert outcomes == {
        "valid/smoke-one-request": "skip",
        "valid/smoke-two-workers": "skip",
        "valid/smoke-chunked": "skip",
        "invalid/zero-workers": "pass",
        "valid/dynamo-fixed-smoke": "pass",
    }
