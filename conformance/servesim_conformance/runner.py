"""Running golden and invalid cases against an implementation, and judging what it did."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from servesim.documents import load_document
from servesim.errors import InvalidInput
from servesim_conformance.compare import first_difference
from servesim_conformance.corpus import INPUT_FILES, Case
from servesim_conformance.implementation import Description, Implementation, Run
from servesim_conformance.outcomes import CaseResult, Difference, Outcome

REPORT_NAME = "report.json"

#: Smoke cases that all fail without one usable report mean the adapter, not the simulator,
#: is broken (a wrong report still shows the command runs and writes reports).
ADAPTER_BROKEN = (
    "adapter broken: every smoke case failed, so the command or its wrapper is probably wrong "
    "(check the --describe output and that `COMMAND --scenario ... --output ...` writes a report)"
)


def replay_arguments(folder: Path, *, trace: bool) -> list[str]:
    """The arguments of ``servesim replay`` for the inputs copied into ``folder``."""
    arguments = [
        "--scenario",
        str(folder / "scenario.json"),
        "--workload",
        str(folder / "workload.json"),
        "--timing-profile",
        str(folder / "timing-profile.json"),
        "--output",
        str(folder / REPORT_NAME),
    ]
    return [*arguments, "--trace"] if trace else arguments


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


def judge_report(data: bytes, expected: bytes) -> tuple[Outcome, str, Difference | None]:
    """A written report against the expected bytes: pass, fail or invalid-report."""
    try:
        load_document(data, REPORT_NAME, "report")
    except InvalidInput as error:
        return Outcome.INVALID_REPORT, str(error).splitlines()[0], None
    if data == expected:
        return Outcome.PASS, "", None
    difference = first_difference(json.loads(expected), json.loads(data))
    if difference is None:
        return Outcome.FAIL, "same JSON value but not the canonical bytes (R23)", None
    return Outcome.FAIL, str(difference), difference


def run_valid(case: Case, implementation: Implementation, workdir: Path) -> CaseResult:
    """A valid case must exit 0 and write exactly the expected report."""
    run = implementation.run(replay_arguments(workdir, trace=case.trace))
    details = _details(implementation, run)
    problem = _process_problem(run, implementation)
    if problem is not None:
        return CaseResult(case.id, "golden", *problem, run.duration_s, details=details)
    report = workdir / REPORT_NAME
    if run.returncode != 0:
        message = f"exit code {run.returncode} on valid input (expected 0)"
        if run.returncode == 2:
            message = "rejected valid input (exit 2)"
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
        report.read_bytes(), case.expected_report.read_bytes()
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


def run_invalid(case: Case, implementation: Implementation, workdir: Path) -> CaseResult:
    """An invalid case must exit 2 and leave no report."""
    run = implementation.run(replay_arguments(workdir, trace=False))
    details = _details(implementation, run)
    problem = _process_problem(run, implementation)
    if problem is not None:
        return CaseResult(case.id, "invalid", *problem, run.duration_s, details=details)
    left_report = (workdir / REPORT_NAME).exists()
    if run.returncode == 2 and not left_report:
        return CaseResult(case.id, "invalid", Outcome.PASS, "", run.duration_s, details=details)
    if run.returncode == 2:
        message = "rejected the input but left a report file behind"
        return CaseResult(
            case.id, "invalid", Outcome.FAIL, message, run.duration_s, details=details
        )
    if run.returncode == 0:
        message = f"accepted invalid input (fault: {case.fault})"
        return CaseResult(
            case.id, "invalid", Outcome.FAIL, message, run.duration_s, details=details
        )
    message = f"exit code {run.returncode} on invalid input (expected 2)"
    return CaseResult(case.id, "invalid", Outcome.ERROR, message, run.duration_s, details=details)


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
    missing = sorted(case.features - description.features)
    if missing:
        return CaseResult(
            case.id, tier, Outcome.SKIP, f"needs undeclared features: {', '.join(missing)}"
        )
    unread = sorted(
        kind
        for kind in INPUT_FILES
        if case.schema_version not in description.schema_versions.get(kind, [])
    )
    if unread:  # R38: an implementation gets inputs only in versions it declared
        message = f"inputs at version {case.schema_version}, undeclared for: {', '.join(unread)}"
        return CaseResult(case.id, tier, Outcome.SKIP, message)
    with tempfile.TemporaryDirectory(prefix="servesim-case-") as temporary:
        workdir = Path(temporary)
        for path in case.input_paths().values():
            shutil.copyfile(path, workdir / path.name)
        result = (run_valid if case.valid else run_invalid)(case, implementation, workdir)
    result = CaseResult(
        result.case_id,
        tier,
        result.outcome,
        result.message,
        result.duration_s,
        result.difference,
        result.details,
    )
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
        )
    if result.outcome is Outcome.SKIP:
        return result
    return CaseResult(
        case.id,
        tier,
        Outcome.XFAIL,
        f"expected failure: {reason}",
        result.duration_s,
        result.difference,
        result.details,
    )


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
