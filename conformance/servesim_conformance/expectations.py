"""Expected-failure manifests: known failures of one implementation, checked strictly (R73)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from servesim_conformance.implementation import HarnessError
from servesim_conformance.outcomes import CaseResult, Outcome
from servesim_conformance.schemas import validate_harness_document


def load_expected_failures(path: Path) -> dict[str, str]:
    """Case id -> reason, from an expected-failure manifest."""
    return {case_id: entry["reason"] for case_id, entry in load_entries(path).items()}


def load_entries(path: Path) -> dict[str, dict[str, str]]:
    """Case id -> the manifest's whole entry (reason and link), from an expected-failure
    manifest."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise HarnessError(f"{path}: cannot read the expected-failure manifest: {error}") from None
    problems = validate_harness_document("expected-failures", manifest)
    if problems:
        raise HarnessError(f"{path}: " + "; ".join(problems))
    return {entry["id"]: entry for entry in manifest["expected_failures"]}


#: Outcomes of a case that did not pass: the problems, and the expected failures, which still
#: fail (XPASS is a problem too, but its case passed, so it is left off a new list).
_STILL_FAILING = {Outcome.FAIL, Outcome.INVALID_REPORT, Outcome.ERROR, Outcome.TIMEOUT}


def expected_failures_document(
    name: str,
    results: Iterable[CaseResult],
    known: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, object]:
    """A manifest listing every corpus case that did not pass, for the user to edit.

    A case already listed in ``known`` (the expected-failure manifest the run used) failed as
    an xfail: it keeps its entry, reason and link, so rewriting the list after a run with one
    (``--manifest`` names one) refreshes it instead of emptying it. A listed case that passed
    (xpass) is dropped, and a new failure gets its outcome and message as its reason.
    """
    known = known or {}
    entries: list[dict[str, str]] = []
    for result in results:
        if not result.case_id.startswith(("valid/", "invalid/")):
            continue
        if result.outcome is Outcome.XFAIL and result.case_id in known:
            entries.append(dict(known[result.case_id]))
        elif result.outcome in _STILL_FAILING:
            reason = f"{result.outcome.value}: {result.message}"[:160]
            entries.append({"id": result.case_id, "reason": reason, "link": ""})
    return {"implementation": name, "expected_failures": entries}
