"""The plain loop's section 17 (R97 to R108) against numbers derived by hand.

``conformance/examples/independent/servesim_independent.py`` was extended from SPEC.md section
17 alone (and the schemas; ``QUESTIONS-disagg.md`` beside it lists the readings it took). These
tests hold it to the hand-derived golden disaggregation cases (``golden/valid/disagg-*``): the
expected values of each ``DERIVATION.md`` (JSON blocks of pointer -> value) and the bytes of each
expected report; to the rejection of the invalid ones (``golden/invalid/disagg-*``); to R97's and
R99's input checks beyond the corpus's; and to R108's versions (report 8.0 by default, scenario
1.6 only with it, the members of report 8.0 in an aggregated run).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.golden_cases import (
    GOLDEN,
    MANIFEST,
    derived_values,
    replay_case,
    wrong_values,
)
from tests.test_differential import PLAIN

CASES = {name: case for name, case in MANIFEST.items() if name.split("/")[1].startswith("disagg-")}
VALID = sorted(name for name in CASES if name.startswith("valid/"))
INVALID = sorted(name for name in CASES if name.startswith("invalid/"))


def test_the_corpus_has_the_disaggregation_cases() -> None:
    """Corpus 1.15.0 added 42 valid and 10 invalid cases of section 17 (28 and 9 derived with
    the section, 14 and 1 more for the mutants of its code and R103's bound)."""
    assert (len(VALID), len(INVALID)) == (42, 10)


def replay(case: Path, folder: Path, *options: str) -> tuple[int, str, Path]:
    """The plain loop on a golden case's inputs: its exit code, standard error and output."""
    output = folder / "r.json"
    code, error = replay_case(PLAIN, case, output, *options)
    return code, error, output


@pytest.mark.parametrize("name", VALID)
def test_plain_loop_gives_each_derivations_expected_values(name: str, tmp_path: Path) -> None:
    case = GOLDEN / name
    expected = derived_values(case)
    assert expected
    code, error, output = replay(case, tmp_path)
    assert code == 0, error
    assert not wrong_values(json.loads(output.read_text()), expected)


@pytest.mark.parametrize("name", VALID)
def test_plain_loop_writes_each_expected_report(name: str, tmp_path: Path) -> None:
    """Byte for byte (R32: the canonical form), the report the corpus expects."""
    case = GOLDEN / name
    code, error, output = replay(case, tmp_path)
    assert code == 0, error
    assert output.read_bytes() == (case / "expected-report.json").read_bytes()


@pytest.mark.parametrize("name", INVALID)
def test_plain_loop_rejects_each_invalid_case(name: str, tmp_path: Path) -> None:
    """Exit 2 with a message naming the scenario and the fault's pointer (or, for a time past
    2^53-1, found while simulating, R6, the rule), and no report."""
    case = GOLDEN / name
    code, error, output = replay(case, tmp_path)
    assert code == 2
    assert not output.exists()
    if "R6" in CASES[name]["rules"]:
        assert "R103" in error
        return
    pointer = CASES[name]["fault"].split(", ", 1)[1].split(":", 1)[0]
    assert f"scenario.json: {pointer}: expected " in error


#: Two pools (prefill p, decode d), one worker each, 64 blocks of 16 on both sides.
SCENARIO: dict[str, Any] = json.loads(
    (GOLDEN / "valid" / "disagg-one-request-every-stamp" / "scenario.json").read_text()
)
CASE = GOLDEN / "valid" / "disagg-one-request-every-stamp"


def run_scenario(folder: Path, scenario: Any, *options: str) -> tuple[int, str, Any]:
    (folder / "case").mkdir(exist_ok=True)
    for name in ("workload.json", "timing-profile.json"):
        (folder / "case" / name).write_bytes((CASE / name).read_bytes())
    (folder / "case" / "scenario.json").write_text(json.dumps(scenario))
    code, error, output = replay(folder / "case", folder, *options)
    return code, error, json.loads(output.read_text()) if output.exists() else None


def edited(change: Any) -> dict[str, Any]:
    scenario = copy.deepcopy(SCENARIO)
    change(scenario)
    return scenario


def pools(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = scenario["fleet"]["pools"]
    return result


CHECKS = {
    "a role in scenario 1.5": (
        lambda s: s.update(schema_version="1.5", kv_transfer=None) or s.pop("kv_transfer"),
        "/fleet/pools/0/role",
    ),
    "an unknown role": (lambda s: pools(s)[1].update(role="both"), "/fleet/pools/1/role"),
    "no kv_transfer": (lambda s: s.pop("kv_transfer"), ""),
    "kv_transfer without bytes_per_token": (
        lambda s: s["kv_transfer"].pop("bytes_per_token"),
        "/kv_transfer",
    ),
    "bytes_per_token 0": (
        lambda s: s["kv_transfer"].update(bytes_per_token=0),
        "/kv_transfer/bytes_per_token",
    ),
    "an unknown transfer mode": (
        lambda s: s["kv_transfer"].update(mode="eager"),
        "/kv_transfer/mode",
    ),
    "an unknown kv_transfer member": (
        lambda s: s["kv_transfer"].update(layers=32),
        "/kv_transfer/layers",
    ),
    "routing.decode random without a seed": (
        lambda s: s["routing"].update(decode={"policy": "random"}),
        "/routing/decode",
    ),
    "routing.decode round_robin with a seed": (
        lambda s: s["routing"].update(decode={"policy": "round_robin", "seed": 1}),
        "/routing/decode/seed",
    ),
    "routing.decode with weights": (
        lambda s: s["routing"].update(decode={"policy": "least_loaded", "load_weight": 1}),
        "/routing/decode/load_weight",
    ),
    "routing.decode in an aggregated scenario": (
        lambda s: (
            [p.pop("role") for p in pools(s)],
            s.pop("kv_transfer"),
            s["routing"].update(decode={"policy": "round_robin"}),
        ),
        "/routing/decode",
    ),
    "the scenario's sglang limits used by a pool": (
        lambda s: s["scheduler"].update(
            style="sglang", prefill={"mode": "chunked", "max_chunk_tokens": 64}
        ),
        "/scheduler/style",
    ),
}


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_r97_r99_section_17_members_are_checked(name: str, tmp_path: Path) -> None:
    change, pointer = CHECKS[name]
    code, error, report = run_scenario(tmp_path, edited(change))
    assert (code, report) == (2, None)
    assert f"scenario.json: {pointer}: expected " in error


def test_r97_cache_aware_needs_prefix_caching_on_the_prefill_pools_only(tmp_path: Path) -> None:
    def cache_aware(scenario: dict[str, Any]) -> None:
        scenario["routing"] = {"policy": "cache_aware"}
        pools(scenario)[0]["kv_cache"]["prefix_caching"] = True

    code, _, report = run_scenario(tmp_path, edited(cache_aware))
    assert code == 0
    assert report["requests"][0]["cached_blocks_at_routing"] == 0

    def without_caching(scenario: dict[str, Any]) -> None:
        cache_aware(scenario)
        pools(scenario)[0]["kv_cache"]["prefix_caching"] = False

    code, error, _ = run_scenario(tmp_path, edited(without_caching))
    assert code == 2
    assert "scenario.json: /fleet/pools/0/kv_cache: expected " in error


def test_r108_scenario_1_6_needs_report_8(tmp_path: Path) -> None:
    code, error, report = run_scenario(tmp_path, SCENARIO, "--report-version", "7.0")
    assert (code, report) == (2, None)
    assert "--report-version 8.0" in error


def test_r108_an_aggregated_report_8_has_the_new_members_empty(tmp_path: Path) -> None:
    """R108's step 7.0 -> 8.0: handoff null, handed_off and activated 0, role null, transfers
    null; and the 7.0 report of the same aggregated run is the 8.0 one without them."""
    aggregated = edited(
        lambda s: (
            [p.pop("role") for p in pools(s)],
            s.pop("kv_transfer"),
            s.update(schema_version="1.5"),  # R108: every 1.5 document is a 1.6 document
        )
    )
    code, _, report = run_scenario(tmp_path, aggregated, "--report-version", "8.0")
    assert code == 0
    assert report["schema_version"] == "8.0"
    assert [r["handoff"] for r in report["requests"]] == [None]
    assert report["summary"]["transfers"] is None
    for worker in report["workers"]:
        assert (worker["handed_off"], worker["activated"]) == (0, 0)
        assert all((r["handed_off"], r["activated"]) == (0, 0) for r in worker["ranks"])
    assert [(p["role"], p["handed_off"], p["activated"]) for p in report["pools"]] == [
        (None, 0, 0),
        (None, 0, 0),
    ]
    code, _, old = run_scenario(tmp_path, aggregated, "--report-version", "7.0")
    assert code == 0
    del report["summary"]["transfers"]
    for request in report["requests"]:
        del request["handoff"]
    for entry in [*report["workers"], *report["pools"]]:
        del entry["handed_off"], entry["activated"]
    for worker in report["workers"]:
        for rank in worker["ranks"]:
            del rank["handed_off"], rank["activated"]
    for pool in report["pools"]:
        del pool["role"]
    report["schema_version"] = "7.0"
    assert report == old
