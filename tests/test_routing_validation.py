"""R2 to R5 for the state-aware routing inputs (SPEC.md section 12, scenario 1.2): every fault of
the ``golden/invalid/route-*`` cases is reported with file, JSON pointer and what was expected,
with exit code 2 and nothing written; the two faults whose schema error would only quote the
schema back (both weights 0, a cache-aware router without prefix caching) say it in R56's words.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from servesim.contract.documents import load_document
from servesim.contract.errors import InvalidInput
from servesim_conformance.evolution.strategies import documents
from servesim_conformance.strategies import kv_input_triples
from tests.helpers import (
    REPO,
    replay_args,
    run_servesim,
    scenario_doc,
    timing_doc,
    workload_doc,
    write_inputs,
)

INVALID = REPO / "golden" / "invalid"

#: ``golden/invalid/<case>`` -> the one problem the reference reports for its scenario.
EXPECTED: dict[str, tuple[str, str]] = {
    "route-prefill-weight-above-65536": (
        "/routing/prefill_weight",
        "65537 is greater than the maximum of 65536",
    ),
    "route-load-weight-negative": ("/routing/load_weight", "-1 is less than the minimum of 0"),
    "route-weight-not-an-integer": ("/routing/prefill_weight", "expected integer, found 1.5"),
    "route-both-weights-zero": (
        "/routing",
        "prefill_weight and load_weight are both 0; expected at least one above 0 (R56)",
    ),
    "route-weight-with-least-loaded": (
        "/routing/policy",
        'expected "cache_aware"; found "least_loaded", because \'load_weight\' is present',
    ),
    "route-cache-aware-without-kv-cache": (
        "",
        'missing kv_cache: policy "cache_aware" (at /routing/policy) needs kv_cache with '
        "prefix_caching true (R56)",
    ),
    "route-cache-aware-prefix-caching-off": (
        "/kv_cache/prefix_caching",
        'expected true; found false: policy "cache_aware" (at /routing/policy) needs kv_cache '
        "with prefix_caching true (R56)",
    ),
    "route-least-loaded-in-scenario-1-1": (
        "/schema_version",
        'the document uses what version 1.2 added; expected "1.2", found "1.1"',
    ),
    "route-unknown-policy": (
        "/routing/policy",
        'expected "round_robin", "random", "least_loaded", "cache_aware"; '
        'found "least_outstanding"',
    ),
}


def _problems(data: bytes, file: str = "scenario.json") -> list[tuple[str, str, str]]:
    with pytest.raises(InvalidInput) as caught:
        load_document(data, file, "scenario")
    return [(problem.file, problem.pointer, problem.message) for problem in caught.value.problems]


def test_every_route_invalid_case_is_listed_here_and_in_the_manifest() -> None:
    folders = {path.name for path in INVALID.glob("route-*")}
    assert folders == set(EXPECTED)
    manifest = json.loads((REPO / "golden" / "manifest.json").read_bytes())
    faults = {
        case["id"].removeprefix("invalid/"): case["fault"]
        for case in manifest["cases"]
        if case["id"].startswith("invalid/route-")
    }
    assert set(faults) == folders
    assert all(fault.startswith("scenario.json, ") for fault in faults.values())


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_r3_r56_route_fault_is_one_problem_at_its_pointer(case: str) -> None:
    """One fault per case, reported once, in the file, at the pointer, saying what was expected;
    the workload and timing profile of the case are valid."""
    folder = INVALID / case
    pointer, message = EXPECTED[case]
    assert _problems((folder / "scenario.json").read_bytes()) == [
        ("scenario.json", pointer, message)
    ]
    load_document((folder / "workload.json").read_bytes(), "workload.json", "workload")
    load_document((folder / "timing-profile.json").read_bytes(), "t.json", "timing_profile")


def _cache_aware(**routing: Any) -> dict[str, Any]:
    scenario = scenario_doc(workers=2)
    scenario["schema_version"] = "1.2"
    scenario["routing"] = {"policy": "cache_aware", **routing}
    scenario["kv_cache"] = {"blocks": 64, "block_tokens": 16, "prefix_caching": True}
    return scenario


@pytest.mark.parametrize(
    "routing",
    [{}, {"prefill_weight": 0}, {"load_weight": 0}, {"prefill_weight": 65536, "load_weight": 0}],
    ids=["defaults", "prefill-0", "load-0", "bounds"],
)
def test_r56_one_weight_0_is_valid(routing: dict[str, int]) -> None:
    """The R56 message is only for both weights 0: either one alone, or the bounds, are fine."""
    load_document(json.dumps(_cache_aware(**routing)).encode(), "scenario.json", "scenario")


def test_r56_both_faults_of_one_scenario_are_reported_at_once() -> None:
    """R5: every problem of a document at once; the weights' and the cache's explanations do
    not hide each other."""
    scenario = _cache_aware(prefill_weight=0, load_weight=0)
    scenario["kv_cache"]["prefix_caching"] = False
    messages = {
        pointer: message for _, pointer, message in _problems(json.dumps(scenario).encode())
    }
    assert set(messages) == {"/routing", "/kv_cache/prefix_caching"}
    assert "both 0" in messages["/routing"]
    assert "needs kv_cache with prefix_caching true (R56)" in messages["/kv_cache/prefix_caching"]


@pytest.mark.parametrize(
    ("version", "policy", "message"),
    [
        ("1.0", "least_loaded", 'uses what version 1.2 added; expected "1.2", found "1.0"'),
        ("1.1", "cache_aware", 'uses what version 1.2 added; expected "1.2", found "1.1"'),
        ("1.0", "least_outstanding", 'expected "round_robin", "random"; found'),
    ],
    ids=["least-loaded-in-1.0", "cache-aware-in-1.1", "unknown-in-1.0"],
)
def test_r2_a_1_2_policy_in_an_older_scenario_names_the_version(
    version: str, policy: str, message: str
) -> None:
    """R2, R57: a policy scenario 1.2 added names 1.2 (the first minor that accepts the
    document); a name no version knows is an error at the policy, not a version to upgrade to."""
    scenario = _cache_aware() if policy == "cache_aware" else scenario_doc()
    scenario["schema_version"] = version
    scenario["routing"] = {"policy": policy}
    ((_, pointer, text),) = _problems(json.dumps(scenario).encode())
    assert message in text
    assert pointer == ("/routing/policy" if policy == "least_outstanding" else "/schema_version")


@pytest.mark.parametrize("command", ["replay", "validate"])
def test_r5_route_faults_exit_2_naming_file_and_pointer_with_nothing_written(
    tmp_path: Path, command: str
) -> None:
    scenario = _cache_aware(prefill_weight=0, load_weight=0)
    del scenario["kv_cache"]
    paths = write_inputs(tmp_path, scenario, workload_doc(), timing_doc())
    output = tmp_path / "report.json"
    arguments = replay_args(paths, output) if command == "replay" else [*paths.values()]
    result = (
        run_servesim(*arguments) if command == "replay" else run_servesim("validate", *arguments)
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert not output.exists()
    assert not list(tmp_path.glob(".report.json.*"))
    where = str(paths["scenario"])
    assert (
        f"{where}: at /routing: prefill_weight and load_weight are both 0; expected at least one "
        "above 0 (R56)"
    ) in result.stderr
    assert (
        f'{where}: at (document root): missing kv_cache: policy "cache_aware" (at '
        "/routing/policy) needs kv_cache with prefix_caching true (R56)"
    ) in result.stderr


def _released(version: str) -> Any:
    return json.loads(
        (REPO / "schemas" / "released" / version / "scenario.schema.json").read_text()
    )


@settings(max_examples=200, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data())
def test_r35_every_scenario_1_1_is_a_scenario_1_2(data: st.DataObject) -> None:
    """The reviewer's decision for scenario 1.2 (schemas/reviews/issue-11-state-aware-routing.md):
    backward compatible, so a minor version is right.

    ``servesim schema review`` leaves the verdict undecided (the new ``not``, ``dependentSchemas``
    and top-level ``if``/``then`` are beyond its rules), so the decision rests on this: any 1.1
    scenario, drawn from the 1.1 schema or as the conformance suite draws KV-cache scenarios,
    relabelled, is valid under 1.2.
    """
    old, new = _released("1.1"), _released("1.2")
    if data.draw(st.booleans()):
        scenario = data.draw(documents(old))
        assume(jsonschema.Draft202012Validator(old).is_valid(scenario))
    else:
        scenario = data.draw(kv_input_triples())[0]
        jsonschema.validate(scenario, old)
    jsonschema.validate({**scenario, "schema_version": "1.2"}, new)
