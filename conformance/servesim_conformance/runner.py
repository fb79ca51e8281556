"""Running golden and invalid cases against an implementation, and judging what it did
(SPEC.md section 14: R70 which cases run, R71 exit codes and outcomes, R72 judging a report,
R73 expected failures and smoke cases).

A case expects a report (exit 0), a rejection (exit 2, R5) or, from implementations that speak
protocol 2, exit 3 for a step outside the timing profile's coverage (R43). A report written at an
older version than the golden one is migrated (R37) before the byte comparison (R38), so a
report 1.0 writer is still held to every byte of what 1.0 holds.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from servesim.contract.canonical import canonical_bytes
from servesim.contract.documents import load_document
from servesim.contract.errors import InvalidInput
from servesim.contract.migrations import CHAIN
from servesim.contract.schemas import SUPPORTED_VERSIONS
from servesim_conformance.compare import first_difference
from servesim_conformance.corpus import POOL_PROFILES, Case, Expect
from servesim_conformance.features import ADDITIVE, expected_without
from servesim_conformance.implementation import Description, Implementation, Run
from servesim_conformance.outcomes import CaseResult, Difference, Outcome

REPORT_NAME = "report.json"

#: R32: the exit codes of a rejected input and of a step outside the profile's coverage.
EXIT_INVALID_INPUT = 2
EXIT_OUT_OF_COVERAGE = 3

#: A verdict on one run: the outcome, its message and, for a wrong report, where it departs.
Verdict = tuple[Outcome, str, Difference | None]

#: Smoke cases that all fail without one usable report mean the adapter, not the simulator,
#: is broken (a wrong report still shows the command runs and writes reports).
ADAPTER_BROKEN = (
    "adapter broken: every smoke case failed, so the command or its wrapper is probably wrong "
    "(check the --describe output and that `COMMAND --scenario ... --output ...` writes a report)"
)


def replay_arguments(folder: Path, *, trace: bool, pools: Iterable[str] = ()) -> list[str]:
    """The arguments of ``servesim replay`` for the inputs copied into ``folder``: with
    ``pools`` (R87), one ``--timing-profile POOL=PATH`` per pool, in the order given (bytewise,
    as ``Case.pool_profiles`` has them), instead of the one ``timing-profile.json``."""
    pools = list(pools)
    profiles = [str(folder / "timing-profile.json")]
    if pools:
        profiles = [f"{pool}={folder / POOL_PROFILES / f'{pool}.json'}" for pool in pools]
    arguments = ["--scenario", str(folder / "scenario.json")]
    arguments += ["--workload", str(folder / "workload.json")]
    for profile in profiles:
        arguments += ["--timing-profile", profile]
    arguments += ["--output", str(folder / REPORT_NAME)]
    return [*arguments, "--trace"] if trace else arguments


def stage_inputs(case: Case, workdir: Path) -> list[str]:
    """Copy every input file of ``case`` into ``workdir`` (R66), the per-pool profiles into
    ``workdir/timing-profiles/`` (R87); the pools named, in the order to pass them."""
    for path in case.input_paths().values():
        shutil.copyfile(path, workdir / path.name)
    pools = case.pool_profiles()
    if pools:
        (workdir / POOL_PROFILES).mkdir()
        for path in pools.values():
            shutil.copyfile(path, workdir / POOL_PROFILES / path.name)
    return list(pools)


def case_arguments(case: Case, workdir: Path, *, trace: bool) -> list[str]:
    """``replay_arguments`` for ``case`` staged in ``workdir`` by ``stage_inputs``."""
    return replay_arguments(workdir, trace=trace, pools=case.pool_profiles())


def _details(implementation: Implementation, run: Run) -> dict[str, str]:
    return {
        "argv": " ".join(implementation.argv),
        "exit_code": str(run.returncode),
        "stderr_tail": run.stderr.strip()[-1000:],
    }


def _process_problem(run: Run, implementation: Implementation) -> tuple[Outcome, str] | None:
    if run.timed_out:
        return Outcome.TIMEOUT, (
            f"timed out after {implementation.timeout_s:g} s; increase the timeout if this is not "
            "an infinite loop or pathological behaviour"
        )
    if run.returncode is not None and run.returncode < 0:
        return Outcome.ERROR, f"killed by signal {-run.returncode}"
    return None


def judge_report(data: bytes, expected: bytes, written: Iterable[str] | None = None) -> Verdict:
    """A written report against the expected bytes: pass, fail or invalid-report.

    ``written`` is the report versions the implementation declared (None: any the harness
    reads); a report at another version is invalid, since consumers go by the declaration.
    """
    try:
        document = load_document(data, REPORT_NAME, "report")
    except InvalidInput as error:
        return Outcome.INVALID_REPORT, str(error).splitlines()[0], None
    declared = None if written is None else list(written)
    if declared is not None and document.version not in declared:
        message = (
            f"wrote a report at version {document.version}, which --describe does not declare "
            f"(declared report versions: {', '.join(declared)})"
        )
        return Outcome.INVALID_REPORT, message, None
    if document.version == CHAIN.current["report"]:
        return _compare(data, expected, note="")
    return _judge_older_report(data, expected, document.version)


def _judge_older_report(data: bytes, expected: bytes, version: str) -> Verdict:
    """An older report (R38): its own bytes must be canonical (R23), for the migration below
    would hide any departure from it; then it is migrated (R37) and compared byte for byte."""
    value = json.loads(data)
    if canonical_bytes(value) + b"\n" != data:
        return Outcome.FAIL, f"report {version}: not the canonical bytes (R23)", None
    current = CHAIN.current["report"]
    try:
        migrated = CHAIN.migrate(value, REPORT_NAME).document
    except (InvalidInput, LookupError, TypeError, ValueError) as error:
        # Schema-valid but inconsistent (a trace naming an unknown request): a wrong report.
        return Outcome.FAIL, f"report {version} cannot be migrated to {current}: {error!r}", None
    note = f" (the report was migrated from {version} to {current} before comparison)"
    return _compare(canonical_bytes(migrated) + b"\n", expected, note=note)


def _compare(data: bytes, expected: bytes, *, note: str) -> Verdict:
    """Byte equality, else the first differing JSON pointer; ``note`` ends a failure message."""
    if data == expected:
        return Outcome.PASS, "", None
    difference = first_difference(json.loads(expected), json.loads(data))
    if difference is None:
        return Outcome.FAIL, "same JSON value but not the canonical bytes (R23)" + note, None
    return Outcome.FAIL, str(difference) + note, difference


def compared_without(case: Case, description: Description) -> tuple[str, ...]:
    """The additive features the case needs and the implementation does not declare: the case
    runs without them and is compared without what they add (conformance/README.md)."""
    return tuple(sorted((case.features & ADDITIVE) - description.features))


def expected_bytes(case: Case, without: Iterable[str]) -> bytes:
    """The case's expected report, without what the additive features ``without`` add (R30:
    without ``--trace`` the trace is null), re-canonicalised (R23)."""
    expected = case.expected_report.read_bytes()
    without = list(without)
    return expected_without(expected, without) if without else expected


def _traced(case: Case, description: Description) -> bool:
    """Whether to ask for the trace: the case is traced and the implementation declares it."""
    return case.trace and "trace" in description.features


def run_valid(
    case: Case, implementation: Implementation, description: Description, workdir: Path
) -> CaseResult:
    """A valid case must exit 0 and write exactly the expected report (after migration); for
    an implementation without an additive feature the case needs, exactly the expected report
    without what the feature adds."""
    without = compared_without(case, description)
    run = implementation.run(case_arguments(case, workdir, trace=_traced(case, description)))
    result = _judge_valid_run(case, implementation, description, workdir, run, without)
    if not without:
        return result
    if result.outcome not in _JUDGED:  # no report was compared: the message says why
        return dataclasses.replace(result, compared_without=without)
    note = f"compared without {', '.join(without)} (not declared)"
    message = f"{result.message}; {note}" if result.message else note
    return dataclasses.replace(result, message=message, compared_without=without)


#: The outcomes of a report that was compared with the expected one.
_JUDGED = {Outcome.PASS, Outcome.FAIL, Outcome.INVALID_REPORT}


def _judge_valid_run(
    case: Case,
    implementation: Implementation,
    description: Description,
    workdir: Path,
    run: Run,
    without: tuple[str, ...],
) -> CaseResult:
    details = _details(implementation, run)
    problem = _process_problem(run, implementation)
    if problem is not None:
        return CaseResult(case.id, "golden", *problem, run.duration_s, details=details)
    report = workdir / REPORT_NAME
    if run.returncode != 0:
        message = f"exit code {run.returncode} on valid input (expected 0)"
        if run.returncode == EXIT_INVALID_INPUT:
            message = "rejected valid input (exit 2)"
        if run.returncode == EXIT_OUT_OF_COVERAGE:
            message = "exit 3 (out of coverage, R43) on a case its profile covers (expected 0)"
        return CaseResult(
            case.id, "golden", Outcome.ERROR, message, run.duration_s, details=details
        )
    if not report.is_file():
        return CaseResult(
            case.id,
            "golden",
            Outcome.ERROR,
            "exit 0 without a report",
            run.duration_s,
            details=details,
        )
    outcome, message, difference = judge_report(
        report.read_bytes(),
        expected_bytes(case, without),
        description.schema_versions.get("report", []),
    )
    return CaseResult(
        case.id,
        "golden",
        outcome,
        message,
        run.duration_s,
        difference=difference,
        details=details,
    )


def _invalid_verdict(case: Case, returncode: int, left_report: bool) -> tuple[Outcome, str]:
    """An invalid case: exit 2 and no report (R5, R32)."""
    if returncode == EXIT_INVALID_INPUT and not left_report:
        return Outcome.PASS, ""
    if returncode == EXIT_INVALID_INPUT:
        return Outcome.FAIL, "rejected the input but left a report file behind"
    if returncode == 0:
        return Outcome.FAIL, f"accepted invalid input (fault: {case.fault})"
    return Outcome.ERROR, f"exit code {returncode} on invalid input (expected 2)"


def _out_of_coverage_verdict(case: Case, returncode: int, left_report: bool) -> tuple[Outcome, str]:
    """An out-of-coverage case: exit 3 and no report (R43); its inputs are valid, so exit 2
    is as wrong as timing the step anyway."""
    if returncode == EXIT_OUT_OF_COVERAGE and not left_report:
        return Outcome.PASS, ""
    if returncode == EXIT_OUT_OF_COVERAGE:
        return Outcome.FAIL, "stopped out of coverage (exit 3) but left a report file behind"
    if returncode == 0:
        return Outcome.FAIL, "timed a step outside the profile's coverage (R43)"
    if returncode == EXIT_INVALID_INPUT:
        return Outcome.FAIL, "rejected valid input (exit 2); expected exit 3 (R43)"
    return Outcome.ERROR, f"exit code {returncode} on a step outside the coverage (expected 3)"


def _run_expecting_no_report(
    case: Case,
    implementation: Implementation,
    description: Description,
    workdir: Path,
    *,
    tier: str,
    verdict: Callable[[Case, int, bool], tuple[Outcome, str]],
) -> CaseResult:
    """Run a case that must end without a report, judged by ``verdict`` on the exit code and
    whether a report file was left behind."""
    run = implementation.run(
        case_arguments(case, workdir, trace=case.valid and _traced(case, description))
    )
    details = _details(implementation, run)
    problem = _process_problem(run, implementation)
    if problem is not None:
        return CaseResult(case.id, tier, *problem, run.duration_s, details=details)
    assert run.returncode is not None  # not timed out
    outcome, message = verdict(case, run.returncode, (workdir / REPORT_NAME).exists())
    return CaseResult(case.id, tier, outcome, message, run.duration_s, details=details)


def run_invalid(
    case: Case, implementation: Implementation, description: Description, workdir: Path
) -> CaseResult:
    """An invalid case must exit 2 and leave no report."""
    return _run_expecting_no_report(
        case, implementation, description, workdir, tier="invalid", verdict=_invalid_verdict
    )


def run_out_of_coverage(
    case: Case, implementation: Implementation, description: Description, workdir: Path
) -> CaseResult:
    """A case whose replay forms a step outside the profile's coverage must exit 3 and leave no
    report (R43)."""
    return _run_expecting_no_report(
        case,
        implementation,
        description,
        workdir,
        tier="golden",
        verdict=_out_of_coverage_verdict,
    )


def skip_reason(case: Case, description: Description) -> str | None:
    """Why the implementation cannot be given the case (R38), or None when it can.

    A document at a version the harness knows but the implementation does not declare is not
    given to it. A version nobody reads (not released for its kind) is the fault of an invalid
    case, which every implementation must reject (R2, R5), so it is no reason to skip.
    """
    missing = sorted(case.needs() - description.available - ADDITIVE)
    if missing:
        return f"needs undeclared features: {', '.join(missing)}"
    unread = [
        f"{kind} {version}"
        for kind, version in dict.fromkeys(case.input_document_versions())
        if version in SUPPORTED_VERSIONS[kind] and not description.declares(kind, version)
    ]
    if unread:
        return f"inputs at undeclared versions: {', '.join(unread)}"
    if case.expectation is Expect.OUT_OF_COVERAGE and not description.exits_out_of_coverage:
        return "needs protocol 2 (exit code 3)"
    return None


def _run_in(
    case: Case, implementation: Implementation, description: Description, workdir: Path
) -> CaseResult:
    """The runner of the case's expectation."""
    if case.expectation is Expect.OUT_OF_COVERAGE:
        return run_out_of_coverage(case, implementation, description, workdir)
    if case.expectation is Expect.INVALID_INPUT:
        return run_invalid(case, implementation, description, workdir)
    return run_valid(case, implementation, description, workdir)


def run_case(
    case: Case,
    implementation: Implementation,
    description: Description,
    *,
    expected_failures: dict[str, str] | None = None,
    tier: str | None = None,
) -> CaseResult:
    """Run one case in its own temporary folder, honouring features and expected failures."""
    tier = tier or ("golden" if case.valid else "invalid")
    skipped = skip_reason(case, description)
    if skipped is not None:
        return CaseResult(case.id, tier, Outcome.SKIP, skipped)
    with tempfile.TemporaryDirectory(prefix="servesim-case-") as temporary:
        workdir = Path(temporary)
        stage_inputs(case, workdir)
        result = _run_in(case, implementation, description, workdir)
    result = dataclasses.replace(result, tier=tier)
    reason = (expected_failures or {}).get(case.id)
    if reason is None:
        return result
    if result.outcome is Outcome.PASS:
        return CaseResult(
            case.id,
            tier,
            Outcome.XPASS,
            f"listed as an expected failure ({reason}) but passed: remove it from the list",
            result.duration_s,
            compared_without=result.compared_without,
        )
    if result.outcome is Outcome.SKIP:
        return result
    return dataclasses.replace(result, outcome=Outcome.XFAIL, message=f"expected failure: {reason}")


def adapter_broken(smoke_results: list[CaseResult]) -> bool:
    """Whether every smoke case that ran failed without producing a schema-valid report."""
    ran = [result for result in smoke_results if result.outcome is not Outcome.SKIP]
    unusable = {Outcome.ERROR, Outcome.TIMEOUT, Outcome.INVALID_REPORT}
    return bool(ran) and all(result.outcome in unusable for result in ran)


def run_cases(
    cases: Iterable[Case],
    implementation: Implementation,
    description: Description,
    *,
    expected_failures: dict[str, str] | None = None,
    on_result: Callable[[CaseResult], None] = lambda result: None,
) -> tuple[list[CaseResult], bool]:
    """Run the smoke cases first, then the rest; stop early when the adapter is broken.

    Returns the results and whether the adapter looked broken.
    """
    cases = list(cases)
    smoke = [case for case in cases if case.smoke]
    rest = [case for case in cases if not case.smoke]
    results: list[CaseResult] = []
    for case in smoke:
        result = run_case(
            case, implementation, description, expected_failures=expected_failures, tier="smoke"
        )
        results.append(result)
        on_result(result)
    if adapter_broken(results):
        return results, True
    for case in rest:
        result = run_case(case, implementation, description, expected_failures=expected_failures)
        results.append(result)
        on_result(result)
    return results, False
