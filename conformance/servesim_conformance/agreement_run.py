"""An agreement run: the implementation and the in-process reference on the same cases, and how
far apart their reports are (``servesim conform --agreement``).

The cases are the selected golden report cases, cases generated from the property tier's
strategies (seeded), and folders of inputs given on the command line (a big imported trace, say).
Every case runs without ``--trace``: agreement is about times, which the trace does not add to.
A case the implementation cannot be given (an undeclared feature or input version) is listed as
skipped, one it rejects or cannot run as such: none of them counts towards agreement.
"""

from __future__ import annotations

import enum
import json
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import servesim
from servesim.contract.documents import load_document
from servesim.contract.errors import InvalidInput, ServesimError
from servesim.contract.migrations import CHAIN
from servesim_conformance.agreement import Comparison, compare, figures, pooled
from servesim_conformance.corpus import INPUT_FILES, Case, Expect
from servesim_conformance.implementation import Description, HarnessError, Implementation
from servesim_conformance.properties import Documents, input_bytes
from servesim_conformance.runner import (
    EXIT_INVALID_INPUT,
    EXIT_OUT_OF_COVERAGE,
    REPORT_NAME,
    case_arguments,
    skip_reason,
    stage_inputs,
)

#: Generated cases by default, and the default seed of their generation.
DEFAULT_GENERATED = 10
DEFAULT_SEED = 0


class Status(enum.StrEnum):
    """What became of one case in an agreement run."""

    COMPARED = "compared"
    SKIPPED = "skipped"
    """An undeclared feature or input version: the implementation is not given the case."""
    REJECTED = "rejected"
    """The implementation called the inputs invalid (exit 2)."""
    OUT_OF_COVERAGE = "out-of-coverage"
    """The implementation stopped outside its timing profile's coverage (exit 3)."""
    ERROR = "error"
    """A crash, a timeout, an unexpected exit code, no report or an invalid report."""
    REFERENCE_REFUSED = "reference-refused"
    """The reference gives no report (invalid inputs, or a step out of coverage)."""


@dataclass(frozen=True)
class AgreementCase:
    """A case to compare: where it comes from and its input folder, as a corpus ``Case``."""

    source: str
    """``golden``, ``generated`` or ``inputs``."""
    case: Case


@dataclass(frozen=True)
class CaseAgreement:
    """One case's result."""

    id: str
    source: str
    status: Status
    message: str = ""
    duration_s: float = 0.0
    comparison: Comparison | None = None


def golden_cases(cases: Iterable[Case]) -> list[AgreementCase]:
    """The selected corpus cases that expect a report (the others have none to compare)."""
    return [AgreementCase("golden", case) for case in cases if case.expectation is Expect.REPORT]


def document_features(scenario: Any, timing_profile: Any) -> frozenset[str]:
    """The behavioural features a case's documents need (conformance/README.md, Features)."""
    features: set[str] = set()
    try:
        if scenario["routing"]["policy"] == "random":
            features.add("routing.random")
        # R69: every scheduler (R77's pools' own too) that chunks by R18; sglang's chunked
        # mode is R90's pass budget, had by every reader of scenario 1.5 (R96)
        pools = scenario["fleet"].get("pools", [])
        schedulers = [scenario["scheduler"]] + [p["scheduler"] for p in pools if "scheduler" in p]
        if any(
            s["prefill"]["mode"] == "chunked" and s.get("style") != "sglang" for s in schedulers
        ):
            features.add("prefill.chunked")
        if timing_profile["model"]["kind"] in ("grid", "regression"):
            features.add(f"timing.{timing_profile['model']['kind']}")
    except (KeyError, TypeError, AttributeError):  # an invalid document: the reference refuses it
        pass
    return frozenset(features)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None


def folder_case(source: str, case_id: str, folder: Path) -> AgreementCase:
    """A folder holding the three inputs under their corpus names, as a case."""
    features = document_features(
        _read_json(folder / INPUT_FILES["scenario"]),
        _read_json(folder / INPUT_FILES["timing_profile"]),
    )
    case = Case(
        id=case_id,
        folder=folder,
        description=f"{source} inputs in {folder}",
        schema_version="1.0",
        features=features,
        rules=(),
        expect=Expect.REPORT,
    )
    return AgreementCase(source, case)


def input_cases(folders: Sequence[Path]) -> list[AgreementCase]:
    """``--inputs DIR`` folders; a folder without the three input files is refused."""
    cases = []
    for folder in folders:
        missing = [name for name in INPUT_FILES.values() if not (folder / name).is_file()]
        if missing:
            raise HarnessError(
                f"--inputs {folder}: missing {', '.join(missing)}; the folder holds a case's "
                f"three inputs, named {', '.join(INPUT_FILES.values())}"
            )
        cases.append(folder_case("inputs", f"inputs:{folder}", folder))
    return cases


def generated_documents(count: int, seed: int, *, kv_cache: bool = False) -> list[Documents]:
    """``count`` input triples drawn from the property tier's strategies, reproducibly; with
    ``kv_cache``, about half of them have a KV cache under memory pressure and prefix hashes
    (section 11)."""
    if count == 0:  # needs no Hypothesis
        return []
    try:
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis import seed as seeded
        from hypothesis import strategies as st

        from servesim_conformance.strategies import input_triples, kv_input_triples
    except ImportError:
        raise HarnessError(
            "generated cases need Hypothesis: pip install 'servesim[conformance]', or pass "
            "--generated 0"
        ) from None
    drawn: list[Documents] = []

    @settings(
        max_examples=count,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @seeded(seed)
    @given(st.one_of(input_triples(), kv_input_triples()) if kv_cache else input_triples())
    def collect(documents: Documents) -> None:
        drawn.append(documents)

    collect()
    return drawn[:count]


def generated_cases(
    count: int, seed: int, root: Path, *, kv_cache: bool = False
) -> list[AgreementCase]:
    """Generated triples written under ``root``, one folder per case (``generated_documents``)."""
    cases = []
    for index, documents in enumerate(generated_documents(count, seed, kv_cache=kv_cache)):
        folder = root / f"generated-{index}"
        folder.mkdir(parents=True)
        for role, data in input_bytes(documents).items():
            (folder / INPUT_FILES[role]).write_bytes(data)
        cases.append(folder_case("generated", f"generated/seed-{seed}-{index}", folder))
    return cases


def _reference(case: Case) -> dict[str, Any] | str:
    """The reference's report value, or why it gives none."""
    paths = case.input_paths()
    try:
        profiles = case.pool_profiles() or paths["timing_profile"]  # R87: per pool, or one
        data = servesim.replay(paths["scenario"], paths["workload"], profiles, trace=False)
    except ServesimError as error:
        return str(error).splitlines()[0]
    value: dict[str, Any] = json.loads(data)
    return value


def _implementation_report(
    implementation: Implementation, description: Description, case: Case
) -> tuple[Status, str, dict[str, Any] | None, float]:
    """Run the implementation on the case's inputs; its report value at the current version."""
    with tempfile.TemporaryDirectory(prefix="servesim-agreement-") as temporary:
        workdir = Path(temporary)
        stage_inputs(case, workdir)
        run = implementation.run(case_arguments(case, workdir, trace=False))
        report = workdir / REPORT_NAME
        data = report.read_bytes() if run.returncode == 0 and report.is_file() else None
    if run.timed_out:
        return Status.ERROR, f"timed out after {implementation.timeout_s:g} s", None, run.duration_s
    if run.returncode == EXIT_INVALID_INPUT:
        return Status.REJECTED, "rejected the inputs (exit 2)", None, run.duration_s
    if run.returncode == EXIT_OUT_OF_COVERAGE:
        return Status.OUT_OF_COVERAGE, "out of coverage (exit 3)", None, run.duration_s
    if run.returncode != 0 or data is None:
        message = f"exit code {run.returncode}" if run.returncode else "exit 0 without a report"
        return Status.ERROR, message, None, run.duration_s
    checked = checked_report(data)
    if isinstance(checked, str):
        return Status.ERROR, checked, None, run.duration_s
    value, version = checked
    if version not in description.schema_versions.get("report", []):
        message = f"wrote a report at version {version}, which --describe does not declare"
        return Status.ERROR, message, None, run.duration_s
    if version != CHAIN.current["report"]:
        value = CHAIN.migrate(value, REPORT_NAME).document
    return Status.COMPARED, "", value, run.duration_s


#: The largest integer a report may hold (R6, R23).
_LARGEST = 2**53 - 1


def checked_report(data: bytes) -> tuple[dict[str, Any], str] | str:
    """The report value and its version when it is valid under its schema, else why not.

    A big case's report holds millions of token times, which a JSON Schema validator checks
    slowly (minutes for 12,000 requests). So the schema checks the report with each request's
    token times cut to their first two, and the full lists are checked here for what the schema
    asks of them (integers from 0 to 2^53-1, R6) and for what the comparison needs.
    """
    try:
        value = json.loads(data)
        skeleton = {
            **value,
            "requests": [
                {**entry, "token_times_us": entry["token_times_us"][:2]}
                for entry in value["requests"]
            ],
        }
    except (ValueError, RecursionError, TypeError, KeyError):
        skeleton = None
    if skeleton is None:  # not JSON, or not shaped like a report: the full check says why
        try:
            load_document(data, REPORT_NAME, "report")
        except InvalidInput as error:
            return str(error).splitlines()[0]
        return "not a report"
    try:
        document = load_document(json.dumps(skeleton).encode(), REPORT_NAME, "report")
    except InvalidInput as error:
        return str(error).splitlines()[0]
    for index, entry in enumerate(value["requests"]):
        times = entry["token_times_us"]
        if not all(type(at) is int and 0 <= at <= _LARGEST for at in times):
            return (
                f"{REPORT_NAME}: at /requests/{index}/token_times_us: not a list of integers "
                f"from 0 to {_LARGEST}"
            )
    return value, document.version


def run_case(
    agreement_case: AgreementCase, implementation: Implementation, description: Description
) -> CaseAgreement:
    """One case: skipped, refused, or compared."""
    case, source = agreement_case.case, agreement_case.source
    skipped = skip_reason(case, description)
    if skipped is not None:
        return CaseAgreement(case.id, source, Status.SKIPPED, skipped)
    reference = _reference(case)
    if isinstance(reference, str):
        return CaseAgreement(case.id, source, Status.REFERENCE_REFUSED, reference)
    status, message, actual, duration = _implementation_report(implementation, description, case)
    if actual is None:
        return CaseAgreement(case.id, source, status, message, duration)
    started = time.perf_counter()  # the comparison of a big case is part of its cost
    comparison = compare(actual, reference)
    duration += time.perf_counter() - started
    return CaseAgreement(case.id, source, Status.COMPARED, "", duration, comparison)


def run_agreement(
    cases: Iterable[AgreementCase],
    implementation: Implementation,
    description: Description,
    *,
    on_result: Callable[[CaseAgreement], None] = lambda result: None,
) -> list[CaseAgreement]:
    """Every case in turn."""
    results = []
    for case in cases:
        result = run_case(case, implementation, description)
        results.append(result)
        on_result(result)
    return results


def agreement_section(results: Sequence[CaseAgreement]) -> dict[str, Any]:
    """The run report's ``agreement`` member: per case, then overall (pooled over the compared
    cases)."""
    compared = [result.comparison for result in results if result.comparison is not None]
    overall = pooled(compared)
    return {
        "cases": [
            {
                "id": result.id,
                "source": result.source,
                "status": result.status.value,
                "message": result.message,
                "duration_s": round(result.duration_s, 6),
                "requests": result.comparison.requests if result.comparison else None,
                "metrics": (
                    {metric: figures(errors) for metric, errors in result.comparison.errors.items()}
                    if result.comparison
                    else None
                ),
            }
            for result in results
        ],
        "overall": {
            "cases": len(compared),
            "statuses": {
                status.value: sum(1 for result in results if result.status is status)
                for status in Status
            },
            "metrics": {metric: figures(errors) for metric, errors in overall.items()},
        },
    }
