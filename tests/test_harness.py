"""The harness is tested too: fake implementations that misbehave get the right outcome, and
none is ever counted as a pass."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import pytest

from servesim.contract.canonical import canonical_json
from servesim.contract.schemas import WRITTEN_REPORT_VERSIONS
from servesim_conformance.corpus import Case, CorpusError, Expect, load_corpus
from servesim_conformance.features import ADDITIVE, FEATURES, Kind
from servesim_conformance.implementation import (
    DEFAULT_TIMEOUT_S,
    HarnessError,
    Implementation,
    version_problems,
)
from servesim_conformance.outcomes import Outcome
from servesim_conformance.runner import (
    compared_without,
    expected_bytes,
    judge_report,
    run_case,
    run_cases,
    skip_reason,
)
from servesim_conformance.schemas import harness_schema
from tests.golden_snapshots import GOLDEN
from tests.helpers import REPO, as_report_1_0, as_report_5_0

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


def out_of_coverage_case(tmp_path: Path) -> Case:
    """A valid case whose replay forms a step outside its grid profile's coverage (R43): one
    worker with max_num_seqs 8 reaches 5 decoding requests, and the grid's axis ends at 4."""
    folder = tmp_path / "valid" / "out-of-coverage"
    folder.mkdir(parents=True)
    basic = REPO / "examples" / "basic"
    scenario = json.loads((basic / "scenario.json").read_text())
    scenario["fleet"]["workers"] = 1
    scenario["scheduler"]["max_num_seqs"] = 8
    (folder / "scenario.json").write_text(json.dumps(scenario))
    (folder / "workload.json").write_bytes((basic / "workload.json").read_bytes())
    (folder / "timing-profile.json").write_bytes((basic / "grid-profile.json").read_bytes())
    return Case(
        id="valid/out-of-coverage",
        folder=folder,
        description="decode_requests 5 is outside the grid's 0..4",
        schema_version="1.1",
        features=frozenset({"timing.grid"}),
        rules=("R43",),
        expect=Expect.OUT_OF_COVERAGE,
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


def test_measured_timing_over_protocol_1_is_refused() -> None:
    # R38: it could never be asked to exit 3 (R43), so it would pass without checking coverage
    with pytest.raises(HarnessError, match="need protocol 2"):
        fake("protocol-1-measured").describe()


def test_scenario_1_2_reader_that_writes_no_report_4_0_is_refused() -> None:
    # R38, R57: a report 3.0 cannot say what state-aware routing saw, so the cases of scenario
    # 1.2 could never be compared; the harness refuses the description, as for 1.1 and 3.0
    assert "1.2" in fake("honest").describe().schema_versions["scenario"]
    with pytest.raises(HarnessError, match=r"reads scenario 1\.2 but writes no report 4\.0"):
        fake("scenario-1.2-report-3.0").describe()


@pytest.mark.parametrize(
    ("mode", "reads"),
    [("scenario-1.3-report-4.0", "scenario 1.3"), ("workload-1.2-report-4.0", "workload 1.2")],
)
def test_scenario_1_3_or_workload_1_2_reader_that_writes_no_report_5_0_is_refused(
    mode: str, reads: str
) -> None:
    # R38, R64: a report 4.0 has no cut-off outcome, session or goodput, so the cases of
    # section 13 could never be compared; either input version alone is enough to refuse
    honest = fake("honest").describe().schema_versions
    assert "1.3" in honest["scenario"]
    assert "1.2" in honest["workload"]
    assert honest["report"] == ["10.0"]
    with pytest.raises(HarnessError, match=rf"reads {reads} but writes no report 5\.0"):
        fake(mode).describe()


def test_undeclared_feature_skips_the_case() -> None:
    assert outcome("no-chunking", CHUNKED) is Outcome.SKIP


def test_each_document_s_own_version_counts_not_the_manifest_s() -> None:
    """R38: the documents are read at their own versions, so a 1.0-only reader runs them."""
    implementation = fake("writes-report-1.0")
    relabelled = dataclasses.replace(VALID, schema_version="1.1")
    assert run_case(relabelled, implementation, implementation.describe()).outcome is (Outcome.PASS)


def test_undeclared_input_version_of_one_document_skips_the_case(tmp_path: Path) -> None:
    """R38: the message names the kind and the version it does not read."""
    implementation = fake("writes-report-1.0")
    described = implementation.describe()
    grid_reader = dataclasses.replace(described, features=described.features | {"timing.grid"})
    result = run_case(out_of_coverage_case(tmp_path), implementation, grid_reader)
    assert result.outcome is Outcome.SKIP
    assert result.message == "inputs at undeclared versions: timing_profile 1.1"


def test_a_version_nobody_reads_is_the_fault_of_an_invalid_case(tmp_path: Path) -> None:
    """Not a reason to skip: every implementation must reject an unknown version (R2, R5)."""
    case = invalid_case(tmp_path)
    scenario = case.folder / "scenario.json"
    scenario.write_text(scenario.read_text().replace('"workers": 0', '"workers": 1'))
    workload = case.folder / "workload.json"
    workload.write_text(workload.read_text().replace('"1.0"', '"2.0"'))
    assert case.input_versions()["workload"] == "2.0"
    assert outcome("writes-report-1.0", case) is Outcome.PASS


def test_a_broken_document_s_version_is_the_manifest_s(tmp_path: Path) -> None:
    case = dataclasses.replace(invalid_case(tmp_path), schema_version="1.1")
    (case.folder / "workload.json").write_bytes(b'{"schema_version": "1.0",')
    (case.folder / "scenario.json").write_bytes(b'{"schema_version": 1.0}')
    assert case.input_versions() == {
        "scenario": "1.1",
        "workload": "1.1",
        "timing_profile": "1.0",
    }


def test_every_implementation_must_read_version_1_0_of_every_input() -> None:
    with pytest.raises(HarnessError, match=r"version 1\.0 is not declared for: workload"):
        fake("reads-only-2.0").describe()


def test_a_protocol_1_implementation_is_accepted_and_runs_the_1_0_cases() -> None:
    implementation = fake("protocol-1")
    description = implementation.describe()
    assert description.protocol_version == 1
    assert run_case(VALID, implementation, description).outcome is Outcome.PASS
    assert run_case(CHUNKED, implementation, description).outcome is Outcome.PASS


def test_out_of_coverage_case_is_skipped_for_protocol_1(tmp_path: Path) -> None:
    implementation = fake("protocol-1")
    result = run_case(out_of_coverage_case(tmp_path), implementation, implementation.describe())
    # protocol 1 may not declare measured timing (R38), so the case is skipped by its features
    # already; its protocol would skip it too
    assert result.outcome is Outcome.SKIP
    assert "timing.grid" in result.message


@pytest.mark.parametrize(
    ("mode", "expected", "message"),
    [
        ("honest", Outcome.PASS, ""),
        ("accept-invalid", Outcome.FAIL, "timed a step outside the profile's coverage (R43)"),
        ("reject-everything", Outcome.FAIL, "rejected valid input (exit 2); expected exit 3"),
        ("report-then-out-of-coverage", Outcome.FAIL, "left a report file behind"),
        ("crash", Outcome.ERROR, "exit code 1"),
    ],
)
def test_out_of_coverage_case_must_exit_3_without_a_report(
    tmp_path: Path, mode: str, expected: Outcome, message: str
) -> None:
    """R43: exit 3 and no report; timing the step anyway or calling valid input invalid fails."""
    implementation = fake(mode)
    result = run_case(out_of_coverage_case(tmp_path), implementation, implementation.describe())
    assert (result.outcome, result.tier) == (expected, "golden")
    assert message in result.message


def test_report_1_0_writer_passes_the_golden_cases_after_migration() -> None:
    """R38: a report 1.0 is migrated to 2.0 before it is compared, so it still passes."""
    implementation = fake("writes-report-1.0")
    description = implementation.describe()
    cases = [
        case
        for case in CORPUS.cases
        if case.expectation is Expect.REPORT and case.schema_version == "1.0"
    ]
    results = [run_case(case, implementation, description) for case in cases]
    assert {result.outcome for result in results} == {Outcome.PASS}, [
        (result.case_id, result.message) for result in results if result.outcome != Outcome.PASS
    ]


def test_report_1_0_is_held_to_its_own_canonical_bytes() -> None:
    implementation = fake("non-canonical-1.0")
    result = run_case(VALID, implementation, implementation.describe())
    assert result.outcome is Outcome.FAIL
    assert result.message == "report 1.0: not the canonical bytes (R23)"


def test_a_migrated_report_s_difference_says_it_was_migrated(tmp_path: Path) -> None:
    written = tmp_path / "report.json"
    value = as_report_1_0(json.loads(VALID.expected_report.read_bytes()))
    value["requests"][0]["token_times_us"][-1] += 1
    written.write_bytes(canonical_json(value))
    verdict, message, difference = judge_report(
        written.read_bytes(), VALID.expected_report.read_bytes(), ["1.0"]
    )
    assert verdict is Outcome.FAIL
    assert difference is not None
    assert difference.pointer == "/requests/0/token_times_us/2"
    assert message.endswith("(the report was migrated from 1.0 to 10.0 before comparison)")


def test_a_report_version_not_declared_is_an_invalid_report() -> None:
    implementation = fake("undeclared-report-version")
    result = run_case(VALID, implementation, implementation.describe())
    assert result.outcome is Outcome.INVALID_REPORT
    written = WRITTEN_REPORT_VERSIONS[-1]  # the reference's, which the fake writes
    assert f"version {written}, which --describe does not declare" in result.message


@pytest.mark.parametrize(
    ("versions", "message"),
    [
        ({"report": ["11.0"]}, "report versions that are not released: 11.0"),
        ({"timing_profile": ["1.0", "1.1"], "report": ["1.0"]}, "writes no report 2.0"),
        ({"scenario": ["1.0", "1.1"], "report": ["2.0"]}, "reads scenario 1.1 but writes no"),
        ({"workload": ["1.0", "1.1"], "report": ["1.0"]}, "reads workload 1.1 but writes no"),
        (
            {"scenario": ["1.0", "1.1", "1.2"], "report": ["3.0"]},
            "reads scenario 1.2 but writes no report 4.0",
        ),
        (
            {"scenario": ["1.0", "1.1", "1.2", "1.3"], "report": ["4.0"]},
            "reads scenario 1.3 but writes no report 5.0",
        ),
        (
            {"workload": ["1.0", "1.1", "1.2"], "report": ["4.0"]},
            "reads workload 1.2 but writes no report 5.0",
        ),
        (
            {"scenario": ["1.0", "1.3"], "workload": ["1.0", "1.2"], "report": ["4.0"]},
            "reads scenario 1.3 and workload 1.2 but writes no report 5.0",
        ),
    ],
)
def test_declared_report_versions_must_be_usable(
    versions: dict[str, list[str]], message: str
) -> None:
    declared = {"scenario": ["1.0"], "workload": ["1.0"], "timing_profile": ["1.0"], **versions}
    assert any(message in problem for problem in version_problems(declared))


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


# Partial implementations (issue 12): an additive feature (trace) is compared without it, the
# feature list is closed, and the smoke cases reach every adapter.


def test_without_trace_a_traced_case_runs_and_is_compared_with_trace_null() -> None:
    """R30: without --trace the report's trace is null and nothing else changes, so a case that
    expects a trace still checks every other byte of an implementation without `trace` (the
    fake refuses --trace, as such an implementation would)."""
    implementation = fake("no-trace")
    description = implementation.describe()
    assert "trace" not in description.features
    assert VALID.trace
    result = run_case(VALID, implementation, description)
    assert result.outcome is Outcome.PASS, result.message
    assert result.compared_without == ("trace",)
    assert result.message == "compared without trace (not declared)"


def test_without_trace_a_wrong_number_still_fails_where_it_is() -> None:
    implementation = fake("no-trace-wrong-numbers")
    result = run_case(VALID, implementation, implementation.describe())
    assert result.outcome is Outcome.FAIL
    assert result.difference is not None
    assert result.difference.pointer == "/requests/0/token_times_us/2"
    assert result.difference.count == 1
    assert result.message.endswith("; compared without trace (not declared)")


def test_a_report_with_a_trace_from_an_implementation_without_trace_fails() -> None:
    """The comparison is against trace null (and host_transfers null, R140): a trace the
    harness did not ask for is wrong."""
    verdict, message, difference = judge_report(
        VALID.expected_report.read_bytes(), expected_bytes(VALID, ["trace"])
    )
    assert verdict is Outcome.FAIL
    assert difference is not None
    assert difference.pointer == "/host_transfers"  # [] with the trace; first in member order
    assert difference.count == 2
    assert "first difference at /host_transfers" in message
    assert "2 differing values in all" in message


def test_expected_report_without_trace_is_the_canonical_report_with_trace_null() -> None:
    value = json.loads(VALID.expected_report.read_bytes())
    assert value["trace"]
    assert value["host_transfers"] == []
    value["trace"] = None
    value["host_transfers"] = None  # R140: null without the trace
    assert expected_bytes(VALID, ["trace"]) == canonical_json(value)
    assert expected_bytes(VALID, []) == VALID.expected_report.read_bytes()


def test_no_valid_case_is_skipped_for_want_of_trace_alone() -> None:
    """Issue 12: 58 of 68 report cases expect a trace; an implementation with every feature but
    trace now runs every one of them."""
    description = fake("no-trace").describe()
    report_cases = [case for case in CORPUS.cases if case.expectation is Expect.REPORT]
    traced = [case for case in report_cases if case.trace]
    assert len(traced) > len(report_cases) // 2
    assert [case.id for case in report_cases if skip_reason(case, description)] == []
    assert {compared_without(case, description) for case in traced} == {("trace",)}


def test_an_adapter_without_trace_that_writes_nothing_is_adapter_broken() -> None:
    """The smoke cases need no optional feature, so they run, and the verdict is reached."""
    implementation = fake("no-trace-no-report")
    results, broken = run_cases(CORPUS.cases, implementation, implementation.describe())
    assert broken
    assert [result.tier for result in results] == ["smoke", "smoke", "smoke"]
    assert {result.outcome for result in results} == {Outcome.ERROR}
    assert {result.message for result in results} == {"exit 0 without a report"}
    assert results[0].compared_without == ("trace",)


def test_smoke_cases_need_no_optional_feature() -> None:
    smoke = [case for case in CORPUS.cases if case.smoke]
    assert len(smoke) == 3
    assert all(case.features <= ADDITIVE for case in smoke), [case.id for case in smoke]


def test_an_unknown_feature_tag_is_refused_with_a_suggestion() -> None:
    with pytest.raises(HarnessError) as raised:
        fake("unknown-feature").describe()
    message = str(raised.value)
    assert message.startswith('--describe names unknown feature tags: "routing.randm"')
    assert "(did you mean routing.random?)" in message
    assert "conformance/README.md" in message


def test_the_feature_list_is_the_describe_schema_s_enum() -> None:
    assert harness_schema("describe")["properties"]["features"]["items"]["enum"] == list(FEATURES)
    assert {tag for tag, kind in FEATURES.items() if kind is Kind.ADDITIVE} == ADDITIVE


def test_a_corpus_case_with_an_unknown_feature_is_a_corpus_bug(tmp_path: Path) -> None:
    manifest = json.loads((GOLDEN / "manifest.json").read_text())
    manifest["cases"][0]["features"] = ["trace", "prefill.chunky"]
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        CorpusError,
        match=r'smoke-one-request names unknown feature tags: "prefill.chunky" \(did you mean '
        r"prefill.chunked\?\)",
    ):
        load_corpus(tmp_path)


def test_a_protocol_3_implementation_is_accepted() -> None:
    implementation = fake("protocol-3")
    description = implementation.describe()
    assert description.protocol_version == 3
    assert run_case(VALID, implementation, description).outcome is Outcome.PASS


# Section 14 of SPEC.md (R66 to R73): the harness's contract, as the harness keeps it.


def test_r66_a_case_runs_on_copies_named_absolutely_in_a_fresh_folder() -> None:
    implementation = fake("show-arguments")
    result = run_case(VALID, implementation, implementation.describe())
    assert result.outcome is Outcome.PASS, result.message
    arguments = json.loads(result.details["stderr_tail"].splitlines()[-1])
    paths = {name: Path(arguments[arguments.index(name) + 1]) for name in arguments[:8:2]}
    assert list(paths) == ["--scenario", "--workload", "--timing-profile", "--output"]
    assert arguments[-1] == "--trace"  # the case is traced and `trace` is declared (R71)
    assert all(path.is_absolute() for path in paths.values())
    assert {path.parent for path in paths.values()} != {VALID.folder}
    assert len({path.parent for path in paths.values()}) == 1
    assert paths["--output"].name == "report.json"
    assert not paths["--output"].parent.exists()  # the case's folder is gone afterwards


def test_r66_a_manifest_gives_the_command_its_timeout_and_its_folder(tmp_path: Path) -> None:
    assert Implementation(("sim",)).timeout_s == DEFAULT_TIMEOUT_S == 10.0
    manifest = tmp_path / "impl" / "manifest.json"
    manifest.parent.mkdir()
    manifest.write_text(
        json.dumps(
            {
                "name": "sim",
                "command": ["./sim", "--fast"],
                "timeout_s": 2.5,
                "expected_failures": "known.json",
            }
        )
    )
    implementation, listed = Implementation.from_manifest(manifest)
    assert implementation.argv == ("./sim", "--fast")
    assert implementation.timeout_s == 2.5
    assert implementation.cwd == manifest.parent.resolve()
    assert listed == manifest.parent / "known.json"


@pytest.mark.parametrize(
    ("program", "message"),
    [
        ("raise SystemExit(5)", "--describe exited 5"),
        ("print('hello')", "--describe did not print JSON"),
        ("print('[]')", "--describe printed an invalid description"),
    ],
)
def test_r67_a_describe_that_fails_or_prints_no_description_is_refused(
    program: str, message: str
) -> None:
    with pytest.raises(HarnessError, match=message):
        Implementation((sys.executable, "-c", program)).describe()


def test_r68_protocol_1_is_never_given_a_case_that_expects_exit_3(tmp_path: Path) -> None:
    """Even a (forbidden) protocol-1 description with every feature and version the case needs
    is not given it: only protocols 2 and 3 have exit code 3."""
    described = fake("protocol-1").describe()
    versions = {**described.schema_versions, "timing_profile": ["1.0", "1.1"]}
    measured = dataclasses.replace(
        described, features=described.features | {"timing.grid"}, schema_versions=versions
    )
    case = out_of_coverage_case(tmp_path)
    assert skip_reason(case, measured) == "needs protocol 2 (exit code 3)"
    assert skip_reason(case, dataclasses.replace(measured, protocol_version=2)) is None
    assert skip_reason(case, dataclasses.replace(measured, protocol_version=3)) is None


def test_r71_exit_4_is_an_error_whatever_the_case_expects(tmp_path: Path) -> None:
    """Exit 4 (the reference's code for an output it cannot write) is not asked of other
    implementations; the harness accepts 0, 2 and 3 only where a case expects them."""
    implementation = fake("exit-4")
    description = implementation.describe()
    cases = [VALID, invalid_case(tmp_path), out_of_coverage_case(tmp_path)]
    results = [run_case(case, implementation, description) for case in cases]
    assert [result.outcome for result in results] == [Outcome.ERROR] * 3
    assert [result.message for result in results] == [
        "exit code 4 on valid input (expected 0)",
        "exit code 4 on invalid input (expected 2)",
        "exit code 4 on a step outside the coverage (expected 3)",
    ]
    rejecting = fake("reject-everything")
    rejected = run_case(VALID, rejecting, rejecting.describe())
    assert (rejected.outcome, rejected.message) == (Outcome.ERROR, "rejected valid input (exit 2)")


def _as_report_4_0(report: bytes) -> bytes:
    """A report 6.0 of one default pool written as 4.0: without R85's and R64's members (R37
    migrates them back)."""
    value = as_report_5_0(json.loads(report))
    for request in value["requests"]:
        del request["session"]
        request.pop("slo_met", None)
    for member in ("cut_off", "tpot_us", "goodput"):
        value["summary"].pop(member, None)
    value["schema_version"] = "4.0"
    return canonical_json(value)


@pytest.mark.parametrize(
    ("case_id", "expected", "message"),
    [
        ("valid/closed-loop-one-in-flight", Outcome.PASS, ""),
        ("valid/session-three-turns-think-time", Outcome.FAIL, "first difference at /requests/0/"),
        ("valid/slo-mean-itl-only", Outcome.FAIL, "first difference at /"),
        ("valid/stop-mid-prefill", Outcome.INVALID_REPORT, ""),
    ],
)
def test_r72_report_5_0_is_asked_of_the_declaration_not_of_each_run(
    case_id: str, expected: Outcome, message: str
) -> None:
    """R38's "MUST write report 5.0" is checked once, on --describe (R67); each run's report
    may be at any declared version and is judged after migration (R72). A scenario 1.3 case
    without a session, a cut-off request or objectives passes at 4.0; the others cannot."""
    case = next(case for case in CORPUS.cases if case.id == case_id)
    assert case.input_versions()["scenario"] == "1.3" or "session" in case_id
    golden = case.expected_report.read_bytes()
    verdict, said, _ = judge_report(_as_report_4_0(golden), golden, ["4.0", "5.0"])
    assert verdict is expected, said
    assert message in said
    if expected is Outcome.PASS:
        assert said == ""
        undeclared = judge_report(_as_report_4_0(golden), golden, ["5.0"])
        assert undeclared[0] is Outcome.INVALID_REPORT


def test_r73_a_listed_case_that_is_skipped_stays_skipped() -> None:
    implementation = fake("no-chunking")
    listed = {CHUNKED.id: "known bug"}
    result = run_case(CHUNKED, implementation, implementation.describe(), expected_failures=listed)
    assert result.outcome is Outcome.SKIP
    assert not result.outcome.is_problem


GRID_CASE = next(case for case in CORPUS.cases if case.id == "valid/dynamo-fixed-smoke")


def test_a_valid_synthetic_case_needs_the_baseline_timing_tag(tmp_path: Path) -> None:
    """The manifest never lists the baseline kind's tag; the harness reads it off the profile,
    for valid cases only (an invalid case's inputs are rejected, which needs no timing)."""
    assert "timing.synthetic_linear" not in VALID.features
    assert "timing.synthetic_linear" in VALID.needs()
    assert GRID_CASE.needs() == GRID_CASE.features == frozenset({"timing.grid"})
    assert "timing.synthetic_linear" not in invalid_case(tmp_path).needs()


def test_protocol_4_without_synthetic_linear_skips_the_synthetic_cases(tmp_path: Path) -> None:
    """R38: at protocol 4 an implementation without servesim's synthetic model leaves the tag
    out; its synthetic cases are skipped, not errors, and everything else still runs."""
    implementation = fake("protocol-4-no-synthetic")
    description = implementation.describe()
    assert description.protocol_version == 4
    assert "timing.synthetic_linear" not in description.available
    result = run_case(VALID, implementation, description)
    assert result.outcome is Outcome.SKIP
    assert result.message == "needs undeclared features: timing.synthetic_linear"
    assert run_case(GRID_CASE, implementation, description).outcome is Outcome.PASS
    invalid = run_case(invalid_case(tmp_path), implementation, description)
    assert invalid.outcome is Outcome.PASS


@pytest.mark.parametrize("mode", ["protocol-3-no-synthetic-tag", "protocol-4", "honest"])
def test_synthetic_linear_is_had_unless_left_out_at_protocol_4(mode: str) -> None:
    """Before protocol 4 the baseline tag changes nothing, declared or not; at protocol 4 an
    implementation that declares it is given the synthetic cases."""
    implementation = fake(mode)
    description = implementation.describe()
    assert "timing.synthetic_linear" in description.available
    assert run_case(VALID, implementation, description).outcome is Outcome.PASS


def test_skipped_smoke_cases_do_not_make_an_adapter_broken() -> None:
    """Without the synthetic model every smoke case is skipped: the run goes on to the cases it
    can run rather than stopping with "adapter broken"."""
    implementation = fake("protocol-4-no-synthetic")
    description = implementation.describe()
    cases = [case for case in CORPUS.cases if case.smoke] + [GRID_CASE]
    results, broken = run_cases(cases, implementation, description)
    assert not broken
    assert [result.outcome for result in results] == [Outcome.SKIP] * 3 + [Outcome.PASS]


# --- R87: per-pool timing profiles, harness protocol 5 ------------------------------------------

#: A stand-in implementation of protocol 5: ``--describe`` declares what its first argument
#: says; a replay records its arguments, and the bytes of each profile file they name, in the
#: file its second argument names, then rejects the input (exit 2) as an invalid case expects.
_RECORDING_SIM = """
import json, sys
protocol, record, features = int(sys.argv[1]), sys.argv[2], sys.argv[3].split(",")
arguments = sys.argv[4:]
if arguments == ["--describe"]:
    versions = {"scenario": ["1.0"], "workload": ["1.0"], "timing_profile": ["1.0"],
                "report": ["6.0"]}
    print(json.dumps({"name": "recording", "version": "0", "protocol_version": protocol,
                      "schema_versions": versions, "features": features}))
    sys.exit(0)
profiles = [arguments[i + 1] for i, a in enumerate(arguments) if a == "--timing-profile"]
files = {}
for profile in profiles:
    path = profile.split("=", 1)[1] if "=" in profile else profile
    files[path] = open(path, encoding="utf-8").read()
json.dump({"arguments": arguments, "files": files}, open(record, "w"))
sys.exit(2)
"""


def _recording(tmp_path: Path, protocol: int, features: str) -> tuple[Implementation, Path]:
    script = tmp_path / "recording_sim.py"
    script.write_text(_RECORDING_SIM)
    record = tmp_path / "record.json"
    argv = (sys.executable, str(script), str(protocol), str(record), features)
    return Implementation(argv), record


def _per_pool_case(tmp_path: Path, pools: tuple[str, ...]) -> Case:
    """An invalid case (its scenario names no pools) with one profile per name in ``pools``,
    so a run that gets the arguments right exits 2 and passes."""
    folder = tmp_path / "corpus" / "invalid" / "per-pool-profiles"
    (folder / "timing-profiles").mkdir(parents=True)
    paths = VALID.input_paths()
    for role in ("scenario", "workload"):
        (folder / paths[role].name).write_bytes(paths[role].read_bytes())
    profile = json.loads(paths["timing_profile"].read_bytes())
    for indent, pool in enumerate(pools):  # each file its own bytes
        (folder / "timing-profiles" / f"{pool}.json").write_text(json.dumps(profile, indent=indent))
    return Case(
        id="invalid/per-pool-profiles",
        folder=folder,
        description="profiles for pools the scenario does not have",
        schema_version="1.0",
        features=frozenset({"timing.per_pool"}),
        rules=("R84", "R87"),
        fault="profiles named for pools the scenario does not have",
    )


def test_r87_per_pool_profiles_are_copied_and_passed_in_bytewise_pool_order(
    tmp_path: Path,
) -> None:
    """R87, R66: every profile of ``timing-profiles/`` is copied into the run's own folder and
    passed as ``--timing-profile POOL=PATH``, PATH absolute, in bytewise order of POOL (not
    alphabetical: uppercase letters and digits sort before "_", which sorts before lowercase),
    and no ``timing-profile.json`` is passed."""
    pools = ("a", "B", "_x", "a-1", "Z9")
    case = _per_pool_case(tmp_path, pools)
    implementation, record = _recording(tmp_path, 5, "timing.per_pool")
    result = run_case(case, implementation, implementation.describe())
    assert (result.outcome, result.message) == (Outcome.PASS, "")
    recorded = json.loads(record.read_text())
    arguments = recorded["arguments"]
    profiles = [arguments[i + 1] for i, a in enumerate(arguments) if a == "--timing-profile"]
    named = [profile.split("=", 1)[0] for profile in profiles]
    assert named == ["B", "Z9", "_x", "a", "a-1"]  # bytewise: uppercase, "_", then lowercase
    assert named == sorted(pools, key=lambda pool: pool.encode())
    for pool, profile in zip(named, profiles, strict=True):
        path = Path(profile.split("=", 1)[1])
        assert path.is_absolute()
        assert path.name == f"{pool}.json"
        assert path.parent.name == "timing-profiles"
        assert not path.is_relative_to(case.folder)  # a copy, in the run's own folder
        source = case.folder / "timing-profiles" / f"{pool}.json"
        assert recorded["files"][str(path)] == source.read_text()
    assert not any(a.endswith("timing-profile.json") for a in arguments)
    assert not path.exists()  # the run's folder is deleted afterwards (R66)


def test_r87_a_case_with_per_pool_profiles_needs_timing_per_pool(tmp_path: Path) -> None:
    """R70: without the behavioural tag the case is skipped, never run; its documents are read
    at their own versions, every per-pool profile among them."""
    case = _per_pool_case(tmp_path, ("a", "b"))
    assert case.input_paths().keys() == {"scenario", "workload"}
    assert [kind for kind, _ in case.input_documents()].count("timing_profile") == 2
    implementation, record = _recording(tmp_path, 5, "trace")
    result = run_case(case, implementation, implementation.describe())
    assert (result.outcome, result.message) == (
        Outcome.SKIP,
        "needs undeclared features: timing.per_pool",
    )
    assert not record.exists()


def test_r87_timing_per_pool_is_a_tag_of_protocol_5(tmp_path: Path) -> None:
    """R68, R87: protocol 5 is protocol 4 plus the tag; an implementation that declares it
    while speaking protocol 4 is refused, and one of protocol 4 is accepted without it."""
    implementation, _ = _recording(tmp_path, 4, "timing.per_pool")
    with pytest.raises(HarnessError, match=r"timing\.per_pool but speaks protocol 4"):
        implementation.describe()
    implementation, _ = _recording(tmp_path, 4, "trace")
    assert implementation.describe().protocol_version == 4
    implementation, _ = _recording(tmp_path, 5, "timing.per_pool")
    assert "timing.per_pool" in implementation.describe().features
    assert FEATURES["timing.per_pool"] is Kind.BEHAVIOURAL


def test_r87_the_reference_speaks_protocol_5_with_timing_per_pool() -> None:
    described = fake("honest").describe()
    assert described.protocol_version == 5
    assert "timing.per_pool" in described.features


def test_r86_r67_a_scenario_1_4_reader_must_write_report_6_0() -> None:
    """R38, R67: an older report has no pools or ranks, so a reader of scenario 1.4 that writes
    no report 6.0 is refused; a reader of scenario 1.3 may still write 5.0 alone."""
    versions = {
        "scenario": ["1.0", "1.1", "1.2", "1.3", "1.4"],
        "workload": ["1.0", "1.1", "1.2"],
        "timing_profile": ["1.0", "1.1"],
        "report": ["5.0"],
    }
    assert version_problems(versions) == [
        "it reads scenario 1.4 but writes no report 6.0; an older report has no pools or ranks "
        "(R85, R86)"
    ]
    assert version_problems({**versions, "report": ["5.0", "6.0"]}) == []
    assert version_problems({**versions, "scenario": versions["scenario"][:4]}) == []


def test_r96_r67_a_scenario_1_5_reader_must_write_report_7_0() -> None:
    """R38, R67: an older report has no scheduler styles, so a reader of scenario 1.5 that
    writes no report 7.0 is refused; a reader of scenario 1.4 may still write 6.0 alone."""
    versions = {
        "scenario": ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5"],
        "workload": ["1.0", "1.1", "1.2"],
        "timing_profile": ["1.0", "1.1"],
        "report": ["6.0"],
    }
    assert version_problems(versions) == [
        "it reads scenario 1.5 but writes no report 7.0; an older report has no scheduler "
        "styles (R95, R96)"
    ]
    assert version_problems({**versions, "report": ["6.0", "7.0"]}) == []
    assert version_problems({**versions, "scenario": versions["scenario"][:5]}) == []


def test_r108_r67_a_scenario_1_6_reader_must_write_report_8_0() -> None:
    """R38, R67: an older report has no handoffs, so a reader of scenario 1.6 that writes no
    report 8.0 is refused; a reader of scenario 1.5 may still write 7.0 alone."""
    versions = {
        "scenario": ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6"],
        "workload": ["1.0", "1.1", "1.2"],
        "timing_profile": ["1.0", "1.1"],
        "report": ["7.0"],
    }
    assert version_problems(versions) == [
        "it reads scenario 1.6 but writes no report 8.0; an older report has no handoffs "
        "(R107, R108)"
    ]
    assert version_problems({**versions, "report": ["7.0", "8.0"]}) == []
    assert version_problems({**versions, "scenario": versions["scenario"][:6]}) == []


def test_r124_a_scenario_1_7_reader_must_write_report_9_0() -> None:
    """R38, R67, R124: an older report has no failed outcome, migrations or worker time, so a
    reader of scenario 1.7 that writes no report 9.0 is refused; a reader of scenario 1.6 may
    write 8.0 or later (9.0 alone included)."""
    versions = {
        "scenario": ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7"],
        "workload": ["1.0", "1.1", "1.2"],
        "timing_profile": ["1.0", "1.1"],
        "report": ["8.0"],
    }
    assert version_problems(versions) == [
        "it reads scenario 1.7 but writes no report 9.0; an older report has no failed "
        "outcome, migrations or worker time (R123, R124)"
    ]
    assert version_problems({**versions, "report": ["8.0", "9.0"]}) == []
    assert version_problems({**versions, "report": ["9.0"]}) == []
    assert version_problems({**versions, "scenario": versions["scenario"][:7]}) == []
    assert (
        version_problems({**versions, "scenario": versions["scenario"][:7], "report": ["9.0"]})
        == []
    )


def test_r141_a_scenario_1_8_reader_must_write_report_10_0() -> None:
    """R38, R67, R141: an older report has no host tier, so a reader of scenario 1.8 that
    writes no report 10.0 is refused; a reader of scenario 1.7 may write 9.0 or later (10.0
    alone included); a reader of workload 1.3 alone may write 9.0 or older."""
    versions = {
        "scenario": ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7", "1.8"],
        "workload": ["1.0", "1.1", "1.2", "1.3"],
        "timing_profile": ["1.0", "1.1"],
        "report": ["9.0"],
    }
    assert version_problems(versions) == [
        "it reads scenario 1.8 but writes no report 10.0; an older report has no host tier "
        "(R140, R141)"
    ]
    assert version_problems({**versions, "report": ["9.0", "10.0"]}) == []
    assert version_problems({**versions, "report": ["10.0"]}) == []
    scenario_1_7 = versions["scenario"][:8]
    assert version_problems({**versions, "scenario": scenario_1_7}) == []
    assert version_problems({**versions, "scenario": scenario_1_7, "report": ["10.0"]}) == []
    assert version_problems({**versions, "scenario": scenario_1_7, "report": ["8.0"]}) == [
        "it reads scenario 1.7 but writes no report 9.0; an older report has no failed "
        "outcome, migrations or worker time (R123, R124)"
    ]
