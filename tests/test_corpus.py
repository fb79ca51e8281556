"""Corpus lint: the golden corpus is itself checked (run alone with ``tox -e corpus``).

Every input and expected report validates, ids are unique and stable in form, the manifest and
the folders agree, every rule of the spec is covered, and small cases carry a derivation.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import servesim
from servesim.contract.errors import OutOfCoverage, ServesimError
from servesim_conformance.corpus import (
    EXPECTED_REPORT,
    INPUT_FILES,
    POOL_PROFILES,
    Expect,
    load_corpus,
)
from servesim_conformance.coverage import coverage_table, spec_rules
from servesim_conformance.features import FEATURES, Kind
from tests.golden_snapshots import GOLDEN
from tests.helpers import REPO

CORPUS = load_corpus(GOLDEN)
VALID = [case for case in CORPUS.cases if case.expectation is Expect.REPORT]
UNCOVERED = [case for case in CORPUS.cases if case.expectation is Expect.OUT_OF_COVERAGE]
INVALID = [case for case in CORPUS.cases if not case.valid]
#: Rules about servesim's own tools and schema releases, not about what a replay must do; the
#: evolution tests check them (SPEC.md section 9), and the tools' own tests the others (R44
#: calibration, R65 and R142 the Mooncake importer's sessions, R74 to R76 servesim profile aic).
TOOL_RULES = {"R33", "R34", "R35", "R36", "R37", "R39", "R44", "R65", "R74", "R75", "R76", "R142"}
#: SPEC.md section 14: the harness's own contract, which the harness tests check (a golden case
#: is run by the harness, it does not exercise it).
HARNESS_RULES = {f"R{number}" for number in range(66, 74)} | {"R87"}
#: A valid case at most this big must carry a hand derivation.
SMALL_CASE_REQUESTS = 6


def _profiles(case):  # type: ignore[no-untyped-def]
    """The case's timing profiles as ``servesim.replay`` takes them: each pool's (R87), or the
    one file."""
    return case.pool_profiles() or case.input_paths()["timing_profile"]


def _spec_rules() -> set[str]:
    return set(spec_rules((REPO / "SPEC.md").read_text(encoding="utf-8")))


def test_case_ids_are_unique() -> None:
    ids = [case.id for case in CORPUS.cases]
    assert len(ids) == len(set(ids))


def test_manifest_and_folders_agree() -> None:
    folders = {
        f"{kind}/{path.name}"
        for kind in ("valid", "invalid")
        for path in (GOLDEN / kind).iterdir()
        if path.is_dir()
    }
    assert folders == {case.id for case in CORPUS.cases}


def test_corpus_is_large_enough() -> None:
    assert len(VALID) >= 40
    assert len(INVALID) >= 30
    assert sum(case.smoke for case in CORPUS.cases) == 3


def test_every_rule_is_covered_by_a_case() -> None:
    covered = {rule for case in CORPUS.cases for rule in case.rules}
    assert covered <= _spec_rules(), "cases name rules the spec does not have"
    assert _spec_rules() - TOOL_RULES - HARNESS_RULES - covered == set()


@pytest.mark.parametrize("case", VALID, ids=[case.id for case in VALID])
def test_valid_case_inputs_and_report_validate(case) -> None:  # type: ignore[no-untyped-def]
    for role, path in case.input_documents():
        servesim.read_document(path, role)
    servesim.read_document(case.expected_report, "report")
    report = json.loads(case.expected_report.read_bytes())
    assert (report["trace"] is not None) == case.trace
    if case.trace:
        assert "trace" in case.features
    scenario = json.loads((case.folder / "scenario.json").read_bytes())
    # R77: a pool's own scheduler may chunk where the scenario's does not; R69: sglang's
    # chunked mode is R90's pass budget, not R18's chunking, and needs no tag
    schedulers = [scenario["scheduler"]] + [
        pool["scheduler"] for pool in scenario["fleet"].get("pools", []) if "scheduler" in pool
    ]
    assert ("prefill.chunked" in case.features) == any(
        scheduler["prefill"]["mode"] == "chunked" and scheduler.get("style") != "sglang"
        for scheduler in schedulers
    )
    policies = {scenario["routing"]["policy"], scenario["routing"].get("decode", {}).get("policy")}
    assert ("routing.random" in case.features) == ("random" in policies)  # R69, R99
    # R69: the timing tags follow the profiles' models (R87: any pool's); no case names a
    # baseline tag
    models = {
        json.loads(path.read_bytes())["model"]["kind"]
        for role, path in case.input_documents()
        if role == "timing_profile"
    }
    for kind in ("grid", "regression"):
        assert (f"timing.{kind}" in case.features) == (kind in models)
    assert not case.features & {tag for tag, k in FEATURES.items() if k is Kind.BASELINE}


@pytest.mark.parametrize("case", UNCOVERED, ids=[case.id for case in UNCOVERED])
def test_out_of_coverage_case_stops_with_r43_and_has_no_report(case) -> None:  # type: ignore[no-untyped-def]
    assert case.valid  # its inputs are valid (R43), so it lives under valid/
    assert not (case.folder / EXPECTED_REPORT).exists()
    assert "R43" in case.rules
    assert (case.folder / "DERIVATION.md").is_file()  # which step is the first uncovered one
    paths = case.input_paths()
    for role, path in paths.items():
        servesim.read_document(path, role)
    with pytest.raises(OutOfCoverage):
        servesim.replay(paths["scenario"], paths["workload"], _profiles(case))


@pytest.mark.parametrize("case", VALID, ids=[case.id for case in VALID])
def test_small_valid_case_has_a_derivation(case) -> None:  # type: ignore[no-untyped-def]
    workload = json.loads((case.folder / "workload.json").read_bytes())
    if len(workload["requests"]) <= SMALL_CASE_REQUESTS:
        assert (case.folder / "DERIVATION.md").is_file()


@pytest.mark.parametrize("case", INVALID, ids=[case.id for case in INVALID])
def test_invalid_case_is_rejected_and_has_no_report(case) -> None:  # type: ignore[no-untyped-def]
    assert not (case.folder / EXPECTED_REPORT).exists()
    assert case.fault
    assert "R5" in case.rules
    paths = case.input_paths()
    with pytest.raises(ServesimError) as raised:
        servesim.replay(paths["scenario"], paths["workload"], _profiles(case))
    assert not isinstance(raised.value, OutOfCoverage)  # exit 3 is not invalid input


def test_coverage_table_is_current() -> None:
    spec = (REPO / "SPEC.md").read_text(encoding="utf-8")
    expected = coverage_table(CORPUS, spec_rules(spec))
    assert (GOLDEN / "COVERAGE.md").read_text(encoding="utf-8") == expected, (
        "regenerate: python -m servesim_conformance.coverage SPEC.md > golden/COVERAGE.md"
    )


def test_every_case_folder_has_exactly_its_files() -> None:
    """The three inputs, or (R87) the scenario, the workload and ``timing-profiles/`` of
    ``POOL.json`` files instead of ``timing-profile.json``; the report and the derivation."""
    allowed = {*INPUT_FILES.values(), EXPECTED_REPORT, "DERIVATION.md"}
    for case in CORPUS.cases:
        names = {path.name for path in Path(case.folder).iterdir()}
        if POOL_PROFILES in names:
            inputs = {INPUT_FILES["scenario"], INPUT_FILES["workload"], POOL_PROFILES}
            assert INPUT_FILES["timing_profile"] not in names, case.id
            profiles = list((case.folder / POOL_PROFILES).iterdir())
            assert profiles, case.id
            assert all(path.is_file() and path.suffix == ".json" for path in profiles), case.id
        else:
            inputs = set(INPUT_FILES.values())
        assert inputs <= names, case.id
        assert names <= allowed | inputs, case.id


@pytest.mark.parametrize("case", CORPUS.cases, ids=[case.id for case in CORPUS.cases])
def test_r87_timing_per_pool_is_listed_exactly_by_the_cases_with_per_pool_profiles(case) -> None:  # type: ignore[no-untyped-def]
    """R87: a case lists the behavioural tag ``timing.per_pool`` exactly when its folder has
    ``timing-profiles/`` (so an implementation without ``--timing-profile POOL=FILE`` is never
    given one, R70), valid or invalid."""
    assert ("timing.per_pool" in case.features) == (case.folder / POOL_PROFILES).is_dir()


#: A derivation's machine-checked block: the first ```json block of its DERIVATION.md (under the
#: heading "## Expected values, by JSON pointer into the report" in the newer ones), a JSON object
#: whose keys are JSON pointers (RFC 6901) into the expected report, each with the whole value
#: there, and whose ``!absent`` key lists pointers that must not exist.
EXPECTED_VALUES_BLOCK = "```json"
DERIVED = [
    case
    for case in VALID
    if (case.folder / "DERIVATION.md").is_file()
    and EXPECTED_VALUES_BLOCK in (case.folder / "DERIVATION.md").read_text(encoding="utf-8")
]


def _at_pointer(document: object, pointer: str) -> object:
    """The value at ``pointer`` (RFC 6901); KeyError or IndexError when there is none."""
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(document, list):
            document = document[int(token)]
        else:
            assert isinstance(document, dict)
            document = document[token]
    return document


def _same(expected: object, actual: object) -> bool:
    """Equal JSON values, a number equal to a number whatever its Python type, never a
    boolean equal to a number."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(
            _same(value, actual[key]) for key, value in expected.items()
        )
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(map(_same, expected, actual))
    numbers = isinstance(expected, int | float) and isinstance(actual, int | float)
    return (numbers or type(expected) is type(actual)) and expected == actual


@pytest.mark.parametrize("case", DERIVED, ids=[case.id for case in DERIVED])
def test_derived_values_are_the_expected_reports(case) -> None:  # type: ignore[no-untyped-def]
    """Each value a derivation's block gives by hand is the one at its pointer in the report."""
    text = (case.folder / "DERIVATION.md").read_text(encoding="utf-8")
    derived = json.loads(text.split(EXPECTED_VALUES_BLOCK, 1)[1].split("```", 1)[0])
    report = json.loads(case.expected_report.read_bytes())
    wrong = []
    for pointer in derived.pop("!absent", []):
        try:
            _at_pointer(report, pointer)
        except (KeyError, IndexError):
            continue
        wrong.append(f"{pointer}: present")
    for pointer, value in derived.items():
        actual = _at_pointer(report, pointer)
        if not _same(value, actual):
            wrong.append(f"{pointer}: derived {value!r}, report {actual!r}")
    assert derived, "an empty block checks nothing"
    assert not wrong, "\n".join(wrong)
