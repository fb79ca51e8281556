"""Expected-failure manifests: known failures of one implementation, checked strictly."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from servesim_conformance.implementation import HarnessError
from servesim_conformance.outcomes import CaseResult
from servesim_conformance.schemas import validate_harness_document


def load_expected_failures(path: Path) -> dict[str, str]:
    """Case id -> reason, from an expected-failure manifest."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise HarnessError(f"{path}: cannot read the expected-failure manifest: {error}") from None
    problems = validate_harness_document("expected-failures", manifest)
    if problems:
        raise HarnessError(f"{path}: " + "; ".join(problems))
    return {entry["id"]: entry["reason"] for entry in manifest["expected_failures"]}


def expected_failures_document(name: str, results: Iterable[CaseResult]) -> dict[str, object]:
    """A first manifest listing every case that did not pass, for the user to edit."""
    return {
        "implementation": name,
        "expected_failures": [
            {"id": r.case_id, "reason": f"{r.outcome.value}: {r.message}"[:160], "link": ""}
            for r in results
            if r.outcome.is_problem and r.case_id.startswith(("valid/", "invalid/"))
        ],
    }
