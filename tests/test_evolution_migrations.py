"""``servesim migrate``: a chain of small pure steps, and a migrated document replays the same.

The reference's chain relabels timing profile, scenario and workload 1.0 -> 1.1, scenario
1.1 -> 1.2 -> 1.3 and workload 1.1 -> 1.2, and upgrades report 1.0 -> 2.0 (the calibration echo
and the trace's step shapes), 2.0 -> 3.0 (the KV cache's members, R53), 3.0 -> 4.0
(cached_blocks_at_routing, R57), 4.0 -> 5.0 (session, cut_off and tpot_us, R64) and 5.0 -> 6.0
(the one pool "default" of one-rank workers, R85, R86). The chain of
the deliberate evolution in ``tests/evolution_fixtures`` (scenario 1.0 -> 1.1 -> 1.2 -> 1.3 ->
1.4 -> 2.0) exercises the machinery further, and its 2.0 reader
(``load_scenario_2_0``) stands for an implementation that reads 2.0.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from servesim.contract.canonical import canonical_bytes
from servesim.contract.documents import load_document
from servesim.contract.errors import InvalidInput
from servesim.contract.migrations import CHAIN, Migration, MigrationChain
from servesim.replay import replay_documents
from servesim_conformance.evolution.cli import (
    add_migrate_arguments,
    migrate_file,
    reference_check,
    run_migrate,
)
from servesim_conformance.evolution.strategies import documents
from servesim_conformance.strategies import requests, scenarios
from tests.evolution_fixtures import CHAIN as FIXTURE_CHAIN
from tests.evolution_fixtures import SCENARIO_1_4, SCENARIO_2_0, load, load_scenario_2_0
from tests.helpers import (
    REPO,
    as_report_1_0,
    as_report_2_0,
    as_report_3_0,
    as_report_4_0,
    as_report_5_0,
    as_report_6_0,
    as_report_8_0,
    as_report_9_0,
    released_scenario_schema,
    scenario_doc,
    timing_doc,
    workload_doc,
)


def _bytes(document: dict[str, Any]) -> bytes:
    return (json.dumps(document, indent=2) + "\n").encode()


def test_reference_chain_leaves_current_documents_alone() -> None:
    document = {**scenario_doc(), "schema_version": "1.8"}
    migrated = CHAIN.migrate(document)
    assert not migrated.changed
    assert migrated.document == document
    assert CHAIN.sources("scenario") == (
        "1.0",
        "1.1",
        "1.2",
        "1.3",
        "1.4",
        "1.5",
        "1.6",
        "1.7",
        "1.8",
    )
    assert CHAIN.sources("workload") == ("1.0", "1.1", "1.2", "1.3")
    assert CHAIN.sources("timing_profile") == ("1.0", "1.1")
    assert CHAIN.sources("report") == (
        "1.0",
        "2.0",
        "3.0",
        "4.0",
        "5.0",
        "6.0",
        "7.0",
        "8.0",
        "9.0",
        "10.0",
    )


@pytest.mark.parametrize(
    "document",
    [scenario_doc(max_chunk_tokens=8), workload_doc(("a", 0, 30, 5), ("b", 10, 7, 3))],
    ids=["scenario", "workload"],
)
def test_scenario_and_workload_1_0_are_relabelled_and_replay_the_same(
    document: dict[str, Any],
) -> None:
    """R53, R57, R64: a 1.0 scenario or workload is a 1.1 one with the same meaning (and a
    scenario a 1.2 and a 1.3 one, a workload a 1.2 one)."""
    migrated = CHAIN.migrate(document).document
    current = {"scenario": "1.8", "workload": "1.3"}[document["document"]]
    assert migrated == {**document, "schema_version": current}
    kind = document["document"]
    reports = []
    for version in (document, migrated):
        inputs = {
            "scenario": scenario_doc(max_chunk_tokens=8),
            "workload": workload_doc(("a", 0, 30, 5), ("b", 10, 7, 3)),
            "timing_profile": timing_doc(),
            kind: version,
        }
        loaded = [
            load_document(_bytes(value), f"{name}.json", name) for name, value in inputs.items()
        ]
        report = json.loads(replay_documents(*loaded, trace=True))
        del report["inputs"][kind]["sha256"]  # R37: digests are of the bytes read
        reports.append(report)
    assert reports[0] == reports[1]


def test_timing_profile_1_0_is_relabelled_and_replays_the_same() -> None:
    original = timing_doc()
    migrated = CHAIN.migrate(original).document
    assert migrated == {**original, "schema_version": "1.1"}
    reports = [
        replay_documents(
            load_document(_bytes(scenario_doc()), "s.json", "scenario"),
            load_document(
                _bytes(workload_doc(("a", 0, 30, 5), ("b", 10, 7, 3))), "w.json", "workload"
            ),
            load_document(_bytes(profile), "t.json", "timing_profile"),
            trace=True,
        )
        for profile in (original, migrated)
    ]
    strip = [json.loads(report) for report in reports]
    for report in strip:
        del report["inputs"]["timing_profile"]["sha256"]  # R37: digests are of the bytes read
        del report["inputs"]["timing_profiles"][0]["sha256"]  # R85: the same digest, per pool
    assert strip[0] == strip[1]


def _changes(scenario: dict[str, Any]) -> bool:
    """Whether a scenario's fleet may change (section 18: scaling or failures), which no report
    older than 9.0 can hold (R124)."""
    fleet = scenario["fleet"]
    holders = fleet.get("pools", [fleet])
    return "failures" in scenario or any("scaling" in holder for holder in holders)


def _has_a_4_0_form(path: Path) -> bool:
    """Whether a golden report comes from inputs without section 13's members, as every report
    older than 5.0 does (R64): no sessions, closed loop, stop time or objectives."""
    scenario = json.loads((path.parent / "scenario.json").read_bytes())
    workload = json.loads((path.parent / "workload.json").read_bytes())
    section_13 = {"closed_loop", "stop_at_us", "slo"} & set(scenario) or "sessions" in workload
    return not section_13 and _has_a_5_0_form(scenario)


def _has_a_5_0_form(scenario: dict[str, Any]) -> bool:
    """Whether a scenario uses none of section 15's members, as every report older than 6.0
    comes from (R86): no pools, no ranks, no weighted round robin; and, as every report older
    than 7.0 (R96), no style but vLLM's."""
    fleet = scenario["fleet"]
    return not (
        _changes(scenario)
        or "pools" in fleet
        or "dp_size" in fleet
        or scenario["routing"]["policy"] == "weighted_round_robin"
        or scenario["scheduler"].get("style", "vllm") != "vllm"  # R96: nor a style but vLLM's
    )


#: Every golden report of inputs without section 13's members: each has a 4.0 form (R64).
GOLDEN_REPORTS_4_0 = [
    path
    for path in sorted((REPO / "golden" / "valid").glob("*/expected-report.json"))
    if _has_a_4_0_form(path)
]

#: The golden reports of synthetic profiles without a cache: a measured profile's report has no
#: 1.0 form (R38), nor has a report of a scenario with a KV cache (R53).
GOLDEN_REPORTS = [
    path
    for path in GOLDEN_REPORTS_4_0
    if json.loads(path.read_bytes())["inputs"]["timing_profile"]["calibration"] is None
    and json.loads(path.read_bytes())["summary"]["kv_cache"] is None
]


@pytest.mark.parametrize("path", GOLDEN_REPORTS, ids=lambda path: path.parent.name)
def test_report_1_0_migrates_to_exactly_the_2_0_report(path: Path) -> None:
    current = json.loads(path.read_bytes())
    old = as_report_1_0(current)
    load_document(canonical_bytes(old) + b"\n", "old.json", "report")  # a valid 1.0 report
    expected = canonical_bytes(as_report_2_0(current))
    assert canonical_bytes(CHAIN.migrate(old, target="2.0").document) == expected
    assert canonical_bytes(CHAIN.migrate(old).document) + b"\n" == path.read_bytes()


#: Every golden report of a scenario without a cache: each has a 2.0 form (R53).
GOLDEN_REPORTS_WITHOUT_CACHE = [
    path
    for path in GOLDEN_REPORTS_4_0
    if json.loads(path.read_bytes())["summary"]["kv_cache"] is None
]


@pytest.mark.parametrize("path", GOLDEN_REPORTS_WITHOUT_CACHE, ids=lambda path: path.parent.name)
def test_report_2_0_migrates_to_exactly_the_3_0_report(path: Path) -> None:
    """R53: the reference's 2.0-equivalent report (its 3.0 form without R52's members) migrates
    to the very bytes of the 3.0 form of the report the reference writes, and on to the 5.0
    report itself (the golden report, which tests/test_golden_reports.py checks against the
    reference)."""
    current = json.loads(path.read_bytes())
    old = as_report_2_0(current)
    load_document(canonical_bytes(old) + b"\n", "old.json", "report")  # a valid 2.0 report
    migrated = CHAIN.migrate(old, target="3.0")
    assert [(step.source, step.target) for step in migrated.steps] == [("2.0", "3.0")]
    load_document(canonical_bytes(migrated.document) + b"\n", "new.json", "report")
    assert canonical_bytes(migrated.document) == canonical_bytes(as_report_3_0(current))
    assert canonical_bytes(CHAIN.migrate(old).document) + b"\n" == path.read_bytes()


#: Every golden report of a scenario routed by round robin or random: each has a 3.0 form (R57).
GOLDEN_REPORTS_WITHOUT_STATE_ROUTING = [
    path
    for path in GOLDEN_REPORTS_4_0
    if json.loads((path.parent / "scenario.json").read_bytes())["routing"]["policy"]
    in {"round_robin", "random"}
]


@pytest.mark.parametrize(
    "path", GOLDEN_REPORTS_WITHOUT_STATE_ROUTING, ids=lambda path: path.parent.name
)
def test_report_3_0_migrates_to_exactly_the_4_0_report(path: Path) -> None:
    """R57: the reference's 3.0-equivalent report (its 4.0 form without
    cached_blocks_at_routing) is a valid 3.0 report, and it migrates to the very bytes of the
    4.0 form of the report the reference writes, and on to the 5.0 report itself (the golden
    report, which tests/test_golden_reports.py checks against the reference)."""
    current = json.loads(path.read_bytes())
    old = as_report_3_0(current)
    load_document(canonical_bytes(old) + b"\n", "old.json", "report")  # a valid 3.0 report
    migrated = CHAIN.migrate(old, target="4.0")
    assert [(step.source, step.target) for step in migrated.steps] == [("3.0", "4.0")]
    load_document(canonical_bytes(migrated.document) + b"\n", "new.json", "report")
    assert canonical_bytes(migrated.document) == canonical_bytes(as_report_4_0(current))
    assert canonical_bytes(CHAIN.migrate(old).document) + b"\n" == path.read_bytes()


def test_report_3_0_to_4_0_puts_the_member_where_the_canonical_writer_does() -> None:
    """``servesim migrate`` keeps the member order (R37): the new member lands after
    ``arrival_us``, as in the canonical order (R23), so a canonical 3.0 request stays in
    canonical order; every request gets it, rejected ones too."""
    path = REPO / "golden" / "valid" / "reject-reasons-precedence-round-robin"
    current = json.loads((path / "expected-report.json").read_bytes())
    old = as_report_3_0(current)
    migrated = CHAIN.migrate(old, target="4.0").document
    assert len(migrated["requests"]) == len(old["requests"]) > 1
    for request, original in zip(
        migrated["requests"], as_report_4_0(current)["requests"], strict=True
    ):
        assert list(request) == sorted(request) == list(original)
        assert request["cached_blocks_at_routing"] is None
    assert {request["outcome"] for request in migrated["requests"]} == {"completed", "rejected"}


def test_report_4_0_migrates_to_exactly_the_5_0_report() -> None:
    """R64, checked by hand on golden/valid/running-order-after-completion: the migration adds
    ``session: null`` to every request and ``cut_off: 0`` and ``tpot_us`` to the summary, and
    nothing else; the result is the 5.0 form of the golden report, byte for byte.

    From the 4.0 report's requests (first_token_us, completion_us, output_tokens):
    A (1030, 3540, 3): 2510/2 = 1255; B (1030, 2330, 2): 1300/1 = 1300;
    C (1030, 4640, 4): 3610/3 = 1203.33...; D has one token, so no sample (R63).
    Sorted by exact value: 3610/3, 1255, 1300. Nearest ranks (R27): p50 ceil(1.5) = 2 -> 1255;
    p90, p95, p99 rank 3 -> 1300. Mean: (3610/3 + 1255 + 1300) / 3 = 11275/9, rounded once.
    """
    path = REPO / "golden" / "valid" / "running-order-after-completion" / "expected-report.json"
    old = as_report_4_0(json.loads(path.read_bytes()))
    load_document(canonical_bytes(old) + b"\n", "old.json", "report")  # a valid 4.0 report
    migrated = CHAIN.migrate(old, target="5.0")
    assert [(step.source, step.target) for step in migrated.steps] == [("4.0", "5.0")]
    new = migrated.document
    assert new["summary"]["tpot_us"] == {
        "count": 3,
        "min": 3610 / 3,
        "max": 1300,
        "mean": 11275 / 9,
        "p50": 1255,
        "p90": 1300,
        "p95": 1300,
        "p99": 1300,
    }
    assert new["summary"]["cut_off"] == 0
    assert [request["session"] for request in new["requests"]] == [None] * 4
    stripped = copy.deepcopy(new)
    for request in stripped["requests"]:
        del request["session"]
    del stripped["summary"]["cut_off"], stripped["summary"]["tpot_us"]
    assert stripped == {**old, "schema_version": "5.0"}  # nothing else changed
    load_document(canonical_bytes(new) + b"\n", "new.json", "report")  # a valid 5.0 report
    assert canonical_bytes(new) == canonical_bytes(as_report_5_0(json.loads(path.read_bytes())))


@pytest.mark.parametrize("path", GOLDEN_REPORTS_4_0, ids=lambda path: path.parent.name)
def test_every_golden_report_s_4_0_form_migrates_to_its_5_0_bytes(path: Path) -> None:
    """R64: the reference's 4.0-equivalent report (5.0 without R64's members) is a valid 4.0
    report, and migrates to the very bytes of the golden 5.0 report, member order included
    (``servesim migrate`` keeps the order it read, R37)."""
    current = json.loads(path.read_bytes())
    old = as_report_4_0(current)
    load_document(canonical_bytes(old) + b"\n", "old.json", "report")  # a valid 4.0 report
    migrated = CHAIN.migrate(old).document
    assert canonical_bytes(migrated) + b"\n" == path.read_bytes()
    for request, original in zip(migrated["requests"], current["requests"], strict=True):
        assert list(request) == list(original)
    assert list(migrated["summary"]) == list(current["summary"])


def _has_a_5_0_form(path: Path) -> bool:
    """Whether a golden report comes from a fleet of one pool of one-rank workers routed by a
    policy of report 5.0, as every report older than 6.0 does (R86): no ``fleet.pools``, no
    ``fleet.dp_size`` above 1, no weighted round robin and no per-pool profiles."""
    scenario = json.loads((path.parent / "scenario.json").read_bytes())
    fleet = scenario["fleet"]
    return (
        not _changes(scenario)
        and "pools" not in fleet
        and fleet.get("dp_size", 1) == 1
        and scenario["routing"]["policy"] != "weighted_round_robin"
        and not (path.parent / "timing-profiles").exists()
        and scenario["scheduler"].get("style", "vllm") == "vllm"  # R96: the vLLM style's
    )


#: Every golden report of one pool of one-rank workers: each has a 5.0 form (R86).
GOLDEN_REPORTS_5_0 = [
    path
    for path in sorted((REPO / "golden" / "valid").glob("*/expected-report.json"))
    if _has_a_5_0_form(path)
]


def test_report_5_0_migrates_to_exactly_the_6_0_report() -> None:
    """R86, checked by hand on golden/valid/kv-peak-blocks-per-worker (three workers with a
    cache, request C rejected, a trace): the migration adds the one pool "default" of one-rank
    workers and nothing else; the result is the golden 6.0 report, byte for byte.

    From the 5.0 report: workers' (routed, completed, steps, busy_us, peak_blocks_in_use) are
    w0 (1, 1, 2, 2150, 2), w1 (1, 1, 3, 3230, 2), w2 (0, 0, 0, 0, 0); completed A (P 5, O 2)
    and B (P 3, O 3); makespan 3230. The pool: routed 2, completed 2, steps 5, busy_us 5380,
    prompt_tokens 8, output_tokens 5, utilization 5380 / (3 * 3230) = 538/969, throughputs
    2 * 10^6 / 3230 and 5 * 10^6 / 3230 (R24), kv_cache peak max(2, 2, 0) = 2, sums 0. The
    trace's steps last end_us - start_us: 1050, 1030, 1100, 1100, 1100.
    """
    path = REPO / "golden" / "valid" / "kv-peak-blocks-per-worker" / "expected-report.json"
    old = as_report_5_0(json.loads(path.read_bytes()))
    load_document(canonical_bytes(old) + b"\n", "old.json", "report")  # a valid 5.0 report
    migrated = CHAIN.migrate(old, target="6.0")
    assert [(step.source, step.target) for step in migrated.steps] == [("5.0", "6.0")]
    new = migrated.document
    assert new["pools"] == [
        {
            "busy_us": 5380,
            "completed": 2,
            "dp_size": 1,
            "kv_cache": {
                "evictions": 0,
                "peak_blocks_in_use": 2,
                "preemptions": 0,
                "reused_tokens": 0,
            },
            "name": "default",
            "output_token_throughput_per_s": 5_000_000 / 3230,
            "output_tokens": 5,
            "prompt_tokens": 8,
            "request_throughput_per_s": 2_000_000 / 3230,
            "routed": 2,
            "steps": 5,
            "utilization": 538 / 969,
            "workers": 3,
        }
    ]
    assert new["inputs"]["timing_profiles"] == [
        {"pool": "default", **old["inputs"]["timing_profile"]}
    ]
    assert [(r["id"], r["pool"], r["rank"]) for r in new["requests"]] == [
        ("A", "default", 0),
        ("C", None, None),
        ("B", "default", 0),
    ]
    assert [(w["pool"], w["pool_worker"], len(w["ranks"])) for w in new["workers"]] == [
        ("default", 0, 1),
        ("default", 1, 1),
        ("default", 2, 1),
    ]
    first_rank = dict(new["workers"][0]["ranks"][0])
    assert first_rank.pop("rank") == 0
    assert first_rank == {
        "busy_us": 2150,
        "completed": 1,
        "decode_tokens": 1,
        "kv_cache": {"evictions": 0, "peak_blocks_in_use": 2, "preemptions": 0, "reused_tokens": 0},
        "output_tokens": 2,
        "peak_running": 1,
        "peak_waiting": 1,
        "prefill_tokens": 5,
        "routed": 1,
        "steps": 2,
        "utilization": 2150 / 3230,
    }
    assert [(entry["rank"], entry["duration_us"]) for entry in new["trace"]] == [
        (0, 1050),
        (0, 1030),
        (0, 1100),
        (0, 1100),
        (0, 1100),
    ]
    load_document(canonical_bytes(new) + b"\n", "new.json", "report")  # a valid 6.0 report
    assert canonical_bytes(new) == canonical_bytes(as_report_6_0(json.loads(path.read_bytes())))
    assert canonical_bytes(CHAIN.migrate(old).document) + b"\n" == path.read_bytes()  # and 7.0


@pytest.mark.parametrize("path", GOLDEN_REPORTS_5_0, ids=lambda path: path.parent.name)
def test_every_golden_report_s_5_0_form_migrates_to_its_6_0_bytes(path: Path) -> None:
    """R86: the 5.0 form of a one-pool golden report (6.0 without R85's members, each checked
    to be the default pool's) is a valid 5.0 report and migrates to the very bytes of the golden
    6.0 report, member order included (``servesim migrate`` keeps the order it read, R37)."""
    current = json.loads(path.read_bytes())
    old = as_report_5_0(current)
    load_document(canonical_bytes(old) + b"\n", "old.json", "report")  # a valid 5.0 report
    migrated = CHAIN.migrate(old).document
    assert canonical_bytes(migrated) + b"\n" == path.read_bytes()
    assert _member_order(migrated) == _member_order(current)


def _member_order(value: Any) -> Any:
    """Every object's member names in order, throughout ``value`` (its values left out)."""
    if isinstance(value, dict):
        return [(name, _member_order(member)) for name, member in value.items()]
    if isinstance(value, list):
        return [_member_order(item) for item in value]
    return None


def test_report_5_0_to_6_0_of_a_cut_off_request_and_an_empty_makespan() -> None:
    """R86 where R85's quotients have no value: a report whose makespan is 0 (every request
    rejected at one instant) gets null utilization and throughputs for its pool, as R24 says
    for a division by 0, and a rejected request null pool and rank."""
    path = REPO / "golden" / "valid" / "all-rejected-spread-arrivals" / "expected-report.json"
    current = json.loads(path.read_bytes())
    old = as_report_5_0(current)
    old["summary"]["makespan_us"] = 0  # as if the rejections were at one instant
    (pool,) = CHAIN.migrate(old).document["pools"]
    assert pool["utilization"] is None
    assert pool["request_throughput_per_s"] is None
    assert pool["output_token_throughput_per_s"] is None
    assert (pool["routed"], pool["completed"], pool["steps"]) == (0, 0, 0)
    migrated = CHAIN.migrate(as_report_5_0(current)).document
    assert {(r["pool"], r["rank"]) for r in migrated["requests"]} == {(None, None)}


def test_servesim_migrate_writes_a_5_0_report_as_6_0(tmp_path: Path) -> None:
    """R37 through the command: a 5.0 report file becomes the golden 6.0 bytes, checked
    against report 6.0 (R1 to R4) before it is written."""
    path = REPO / "golden" / "valid" / "smoke-two-workers" / "expected-report.json"
    source = tmp_path / "old.json"
    source.write_bytes(canonical_bytes(as_report_5_0(json.loads(path.read_bytes()))) + b"\n")
    output = tmp_path / "new.json"
    parser = argparse.ArgumentParser()
    add_migrate_arguments(parser)
    arguments = parser.parse_args([str(source), "--output", str(output)])
    assert run_migrate(arguments) == 0
    assert json.loads(output.read_bytes()) == json.loads(path.read_bytes())


def test_fixture_chain_goes_one_version_at_a_time() -> None:
    steps = FIXTURE_CHAIN.path("scenario", "1.0")
    assert [(step.source, step.target) for step in steps] == [
        ("1.0", "1.1"),
        ("1.1", "1.2"),
        ("1.2", "1.3"),
        ("1.3", "1.4"),
        ("1.4", "2.0"),
    ]
    assert FIXTURE_CHAIN.sources("scenario") == ("1.0", "1.1", "1.2", "1.3", "1.4", "2.0")
    assert FIXTURE_CHAIN.path("scenario", "1.1", "1.1") == ()


def test_chunked_scenario_migrates_to_2_0_with_the_renamed_member() -> None:
    migrated = FIXTURE_CHAIN.migrate(scenario_doc(max_chunk_tokens=8), "s.json")
    assert migrated.changed
    assert migrated.target == "2.0"
    assert migrated.document["schema_version"] == "2.0"
    assert migrated.document["scheduler"]["prefill"] == {"mode": "chunked", "chunk_tokens": 8}


@pytest.mark.parametrize(
    ("document", "target", "message"),
    [
        ({**scenario_doc(), "schema_version": "0.9"}, None, "from '0.9' to '2.0'"),
        ({**scenario_doc(), "schema_version": "2.0"}, "1.1", "from '2.0' to '1.1'"),
        ({**scenario_doc(), "document": "sceanrio"}, None, "not a document kind"),
        ({"document": "scenario"}, None, "missing"),
        ({**scenario_doc(), "schema_version": "one"}, None, 'is not a "MAJOR.MINOR"'),
        (scenario_doc(), "latest", 'is not a "MAJOR.MINOR"'),
    ],
    ids=["unknown version", "downgrade", "unknown kind", "no version", "bad version", "bad target"],
)
def test_impossible_migration_is_invalid_input_with_a_pointer(
    document: dict[str, Any], target: str | None, message: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        FIXTURE_CHAIN.migrate(document, "in.json", target)
    (problem,) = raised.value.problems
    assert problem.file == "in.json"
    assert problem.pointer in {"/schema_version", "/document"}
    assert message in problem.message


def test_a_step_must_go_up() -> None:
    with pytest.raises(ValueError, match="a migration goes up"):
        Migration("scenario", "1.1", "1.0", "down", lambda document: dict(document))


def test_a_step_that_edits_its_argument_in_place_still_leaves_the_caller_s_document_alone() -> None:
    def careless(document: Any) -> dict[str, Any]:
        document["fleet"]["workers"] += 1  # an in-place edit, as a hurried author might write
        result: dict[str, Any] = document
        return result

    chain = MigrationChain(
        migrations=(Migration("scenario", "1.0", "1.1", "adds a worker", careless),),
        current={"scenario": "1.1"},
    )
    original = scenario_doc(workers=2)
    kept = copy.deepcopy(original)
    migrated = chain.migrate(original)
    assert original == kept
    assert migrated.document["fleet"]["workers"] == 3


@settings(max_examples=100)
@given(document=scenarios())
def test_every_step_is_pure_and_lands_on_a_valid_document_of_its_version(
    document: dict[str, Any],
) -> None:
    schemas = {
        "1.1": json.loads(
            (REPO / "schemas" / "released" / "1.1" / "scenario.schema.json").read_text("utf-8")
        ),
        "1.2": json.loads(
            (REPO / "schemas" / "released" / "1.2" / "scenario.schema.json").read_text("utf-8")
        ),
        "1.3": json.loads(
            (REPO / "schemas" / "released" / "1.3" / "scenario.schema.json").read_text("utf-8")
        ),
        "1.4": load(SCENARIO_1_4),
        "2.0": load(SCENARIO_2_0),
    }
    kept = copy.deepcopy(document)
    current: dict[str, Any] = document
    for step in FIXTURE_CHAIN.path("scenario", "1.0"):
        upgraded = step.apply(current)
        assert step.apply(current) == upgraded, "the same input gives the same output"
        jsonschema.Draft202012Validator(schemas[step.target]).validate(upgraded)
        current = upgraded
    assert document == kept, "no step touched its input"


@settings(max_examples=60, deadline=None)
@given(scenario=scenarios(), items=requests(max_size=8), data=st.data())
def test_replaying_a_migrated_scenario_gives_the_original_s_report(
    scenario: dict[str, Any], items: list[dict[str, Any]], data: st.DataObject
) -> None:
    """A 1.0 scenario replayed by the reference (which reads 1.0) and its 2.0 migration replayed
    by a 2.0 reader give the same report; only the scenario's digest differs, as its bytes do."""
    workload_bytes = _bytes({"document": "workload", "schema_version": "1.0", "requests": items})
    timing_bytes = _bytes(timing_doc())
    workload = load_document(workload_bytes, "w.json", "workload")
    timing = load_document(timing_bytes, "t.json", "timing_profile")
    original_bytes = _bytes(scenario)
    migrated_bytes = _bytes(FIXTURE_CHAIN.migrate(scenario).document)
    original = json.loads(
        replay_documents(load_document(original_bytes, "s.json", "scenario"), workload, timing)
    )
    migrated = json.loads(
        replay_documents(load_scenario_2_0(migrated_bytes, "s2.json"), workload, timing)
    )
    assert original["inputs"]["scenario"]["sha256"] == hashlib.sha256(original_bytes).hexdigest()
    assert migrated["inputs"]["scenario"]["sha256"] == hashlib.sha256(migrated_bytes).hexdigest()
    del original["inputs"]["scenario"], migrated["inputs"]["scenario"]
    assert migrated == original


def test_2_0_reader_rejects_the_old_member_name() -> None:
    """The comparison above is not vacuous: the 2.0 reader does read what it is given."""
    unmigrated = {**scenario_doc(max_chunk_tokens=4), "schema_version": "2.0"}
    with pytest.raises(InvalidInput):
        load_scenario_2_0(_bytes(unmigrated), "s.json")


# --- the command ----------------------------------------------------------------------------


def _fixture_check(data: bytes, file: str, kind: str, parsed: object = None) -> None:
    load_scenario_2_0(data, file)


def test_migrate_file_writes_the_upgraded_document(tmp_path: Path) -> None:
    source = tmp_path / "scenario.json"
    source.write_bytes(_bytes(scenario_doc(max_chunk_tokens=16)))
    output = tmp_path / "scenario-2.0.json"
    status = migrate_file(str(source), chain=FIXTURE_CHAIN, check=_fixture_check, output=output)
    assert status == 0
    written = json.loads(output.read_bytes())
    assert written["schema_version"] == "2.0"
    assert written["scheduler"]["prefill"]["chunk_tokens"] == 16


def test_migrate_file_writes_nothing_when_the_result_is_invalid(tmp_path: Path) -> None:
    source = tmp_path / "scenario.json"
    source.write_bytes(_bytes(scenario_doc(max_num_seqs=8, max_batched_tokens=4)))  # breaks R4
    output = tmp_path / "out.json"
    status = migrate_file(str(source), chain=FIXTURE_CHAIN, check=_fixture_check, output=output)
    assert status == 2
    assert not output.exists()


def test_migrate_file_reads_a_current_document_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 16: a large report already at the current version was parsed twice (once to find
    its version, once to check it); now the check reuses the first parse, and the bytes are
    written as read."""
    import servesim.contract.json_reading

    parses: list[str] = []
    read_json = servesim.contract.json_reading.read_json

    def counting(data: bytes, file: str) -> Any:
        parses.append(file)
        return read_json(data, file)

    monkeypatch.setattr(servesim.contract.json_reading, "read_json", counting)
    source = tmp_path / "scenario.json"
    source.write_bytes(_bytes({**scenario_doc(), "schema_version": "1.8"}))
    output = tmp_path / "out.json"
    status = migrate_file(str(source), chain=CHAIN, check=reference_check, output=output)
    assert status == 0
    assert parses == [str(source)]
    assert output.read_bytes() == source.read_bytes()


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="servesim migrate")
    add_migrate_arguments(parser)
    return run_migrate(parser.parse_args(argv))


def test_servesim_migrate_leaves_a_current_document_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "workload.json"
    data = (
        b'{"document":"workload","schema_version":"1.3","requests":'
        b'[{"id":"a","arrival_us":0,"prompt_tokens":1,"max_output_tokens":1}]}'
    )
    source.write_bytes(data)
    output = tmp_path / "out.json"
    assert _run(str(source), "--output", str(output)) == 0
    assert output.read_bytes() == data
    assert "already workload 1.3; unchanged" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            b'{"document":"workload","schema_version":"0.1","requests":[]}',
            "this servesim migrates from: '1.0'",
        ),
        (b'{"document": "workload", "document": "x"}', "duplicate object key"),
        (json.dumps(workload_doc()).encode(), "/requests"),
    ],
    ids=["unknown version", "not strict JSON", "invalid after migration"],
)
def test_servesim_migrate_reports_invalid_input_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, expected: str
) -> None:
    source = tmp_path / "in.json"
    source.write_bytes(content)
    assert _run(str(source)) == 2
    assert expected in capsys.readouterr().err


def test_servesim_migrate_of_a_missing_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(str(tmp_path / "nothing.json")) == 2
    assert "cannot read the file" in capsys.readouterr().err


def test_an_impossible_migration_names_the_document_s_own_version() -> None:
    """The message names where the document starts, not where the chain of steps stopped."""
    with pytest.raises(InvalidInput) as raised:
        FIXTURE_CHAIN.migrate(scenario_doc(), "in.json", "3.0")
    (problem,) = raised.value.problems
    assert "from '1.0' to '3.0' (the steps stop at '2.0')" in problem.message


# --- R124: scenario 1.7 is a relabel, report 9.0 is a fleet that never changes -------------


#: 2^53-1, the largest integer a report holds (R6).
MAX_INTEGER = 2**53 - 1


def _golden_report(name: str) -> tuple[Path, dict[str, Any]]:
    """A golden case's expected report (9.0) and its 8.0 form, checked to be a valid 8.0
    report."""
    path = REPO / "golden" / "valid" / name / "expected-report.json"
    old = as_report_8_0(json.loads(path.read_bytes()))
    assert old["schema_version"] == "8.0"
    load_document(canonical_bytes(old) + b"\n", "old.json", "report")  # a valid 8.0 report
    return path, old


def test_r124_report_8_0_migrates_exactly_to_9_0() -> None:
    """R124, checked by hand on golden/valid/smoke-two-workers: one pool "default" of two
    workers, no stop time; a completes at 2200, b at 2300, the first arrival is 0, so M =
    makespan_us = 2300. Each worker is active from 0 for M: lifecycle [active at 0],
    worker_us = active_us = 2300, every other time and count 0. The pool: workers_created =
    peak_workers = 2, worker_us = 2 * 2300 = 4600, worker_hours = 4600 / 3.6e9 (R24), failures,
    migrations and failed 0; the summary's worker_us is the pools' sum, 4600. The trace's
    steps end at 1100, 1200, 2200 and 2300, none after the latest terminal time 2300, so every
    cut_us is null. Nothing else changes (utilization and the ranks included), and the result
    is the golden 9.0 report, byte for byte."""
    path, old = _golden_report("smoke-two-workers")
    migrated = CHAIN.migrate(old, "old.json", "9.0")
    assert [(step.source, step.target) for step in migrated.steps] == [("8.0", "9.0")]
    new = migrated.document
    for before, worker in zip(old["workers"], new["workers"], strict=True):
        added = {name: worker[name] for name in worker if name not in before}
        assert added == {
            "lifecycle": [{"at_us": 0, "state": "active"}],
            "created_us": 0,
            "worker_us": 2300,
            "active_us": 2300,
            "starting_us": 0,
            "draining_us": 0,
            "failed_us": 0,
            "failures": 0,
            "migrated_out": 0,
            "failed_requests": 0,
            "lost_tokens": 0,
        }
        assert {name: worker[name] for name in before} == before  # ranks, utilization kept
    (pool,) = new["pools"]
    added = {name: pool[name] for name in pool if name not in old["pools"][0]}
    assert added == {
        "workers_created": 2,
        "peak_workers": 2,
        "worker_us": 4600,
        "worker_hours": 4600 / 3_600_000_000,
        "failures": 0,
        "migrations": 0,
        "failed": 0,
    }
    for request in new["requests"]:
        assert (request["migrations"], request["fail_reason"]) == ([], None)
        assert (request["lost_tokens"], request["recomputed_tokens"]) == (0, 0)
    summary = new["summary"]
    added = {name: summary[name] for name in summary if name not in old["summary"]}
    assert added == {
        "failed": 0,
        "failed_by_reason": {"migration_limit": 0, "no_routable_worker": 0, "worker_failure": 0},
        "fleet": {
            "cancelled": 0,
            "drained": 0,
            "failures": 0,
            "ignored_failures": 0,
            "recoveries": 0,
            "scale_downs": 0,
            "scale_ups": 0,
        },
        "lost_tokens": 0,
        "migrations": 0,
        "recomputed_tokens": 0,
        "worker_hours": 4600 / 3_600_000_000,
        "worker_us": 4600,
    }
    assert summary["rejected_by_reason"]["no_routable_worker"] == 0
    assert [entry["cut_us"] for entry in new["trace"]] == [None, None, None, None]
    load_document(canonical_bytes(new) + b"\n", "new.json", "report")  # a valid 9.0 report
    golden_9_0 = as_report_9_0(json.loads(path.read_bytes()))  # R141: the golden is 10.0
    assert canonical_bytes(new) == canonical_bytes(golden_9_0)
    assert _member_order(new) == _member_order(golden_9_0)
    assert canonical_bytes(CHAIN.migrate(old).document) + b"\n" == path.read_bytes()


@pytest.mark.parametrize(
    ("name", "stop_at_us", "cuts"),
    [
        # A completes at 1100; B, in its prefill step 1500 -> 3000, is cut off at 2500.
        ("stop-mid-prefill", 2500, [None, 2500]),
        # A completes at the stop time, 2200, in a step ending then (not after: null); B's step
        # 1 -> 2201 passes it.
        ("stop-completion-at-deadline-counts", 2200, [None, 2200, None]),
        # Disaggregated: a is cut off Transferring at 150, b in its prefill step 120 -> 225.
        ("disagg-stop-during-transfer", 150, [None, 150]),
    ],
)
def test_r124_a_step_past_the_latest_terminal_time_was_cut_by_the_stop_time(
    name: str, stop_at_us: int, cuts: list[int | None]
) -> None:
    """R124's trace rule, read from the report alone: a trace entry's cut_us is the latest
    terminal_us when its end_us is greater, else null. In each of these cases the latest
    terminal time is the scenario's stop time (a request is cut off there), as R124 argues,
    so the rule gives the stop time D for exactly the steps that ran past D (R123)."""
    path, old = _golden_report(name)
    scenario = json.loads((path.parent / "scenario.json").read_bytes())
    assert scenario["stop_at_us"] == stop_at_us
    assert max(request["terminal_us"] for request in old["requests"]) == stop_at_us
    new = CHAIN.migrate(old).document
    assert [entry["cut_us"] for entry in new["trace"]] == cuts
    assert [entry["end_us"] > stop_at_us for entry in new["trace"]] == [
        cut is not None for cut in cuts
    ]
    assert canonical_bytes(new) + b"\n" == path.read_bytes()


def test_r124_a_disaggregated_report_gets_each_pool_s_worker_time() -> None:
    """R124 on golden/valid/disagg-decode-ranks: a prefill pool p of one worker and a decode
    pool d of one worker of two ranks; M = 355. Each pool: workers_created = peak_workers = 1,
    worker_us 355; the summary's worker_us is 355 + 355 = 710. Roles, handoffs and the ranks
    (which R123 leaves alone) are unchanged; no step runs past the latest terminal time 355."""
    path, old = _golden_report("disagg-decode-ranks")
    new = CHAIN.migrate(old, "old.json", "9.0").document
    assert [
        (pool["name"], pool["role"], pool["workers_created"], pool["peak_workers"])
        for pool in new["pools"]
    ] == [("p", "prefill", 1, 1), ("d", "decode", 1, 1)]
    assert [pool["worker_us"] for pool in new["pools"]] == [355, 355]
    assert [pool["worker_hours"] for pool in new["pools"]] == [355 / 3_600_000_000] * 2
    assert (new["summary"]["worker_us"], new["summary"]["worker_hours"]) == (
        710,
        710 / 3_600_000_000,
    )
    assert [(worker["worker_us"], worker["active_us"]) for worker in new["workers"]] == [
        (355, 355),
        (355, 355),
    ]
    assert [worker["ranks"] for worker in new["workers"]] == [
        worker["ranks"] for worker in old["workers"]
    ]
    assert [len(worker["ranks"]) for worker in new["workers"]] == [1, 2]
    assert [request["handoff"] for request in new["requests"]] == [
        request["handoff"] for request in old["requests"]
    ]
    assert {entry["cut_us"] for entry in new["trace"]} == {None}
    assert canonical_bytes(new) == canonical_bytes(as_report_9_0(json.loads(path.read_bytes())))
    assert canonical_bytes(CHAIN.migrate(old).document) + b"\n" == path.read_bytes()


@pytest.mark.parametrize(
    ("name", "makespan_us", "pointer"),
    [
        # One pool of 2 workers: 2 * 2^52 = 2^53 is its worker_us.
        ("smoke-two-workers", 2**52, "/pools/0/workers"),
        # Two pools of 1 worker: each 2^52, within R6, their sum 2^53 is not.
        ("disagg-decode-ranks", 2**52, "/summary/makespan_us"),
    ],
)
def test_r124_a_worker_time_sum_past_2_53_minus_1_is_invalid(
    name: str, makespan_us: int, pointer: str
) -> None:
    """R124, R6: the step fails (exit 2, nothing written) when a sum it computes would pass
    2^53-1: a pool's worker_us (its workers times M) or the summary's (the pools' sum). One
    microsecond less of makespan and each sum is 2^53 - 2, which the step writes."""
    _, old = _golden_report(name)
    old["summary"]["makespan_us"] = makespan_us
    with pytest.raises(InvalidInput) as raised:
        CHAIN.migrate(old, "old.json")
    (problem,) = raised.value.problems
    assert (problem.file, problem.pointer) == ("old.json", pointer)
    assert "9007199254740991" in problem.message
    assert "R6" in problem.message
    old["summary"]["makespan_us"] = makespan_us - 1
    new = CHAIN.migrate(old).document
    assert new["summary"]["worker_us"] == MAX_INTEGER - 1


def test_r124_servesim_migrate_of_a_worker_time_past_2_53_minus_1_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """R124, R6 through the command: exit 2, the message names the pointer, nothing written."""
    _, old = _golden_report("smoke-two-workers")
    old["summary"]["makespan_us"] = MAX_INTEGER  # a valid 8.0 makespan
    source = tmp_path / "old.json"
    source.write_bytes(canonical_bytes(old) + b"\n")
    output = tmp_path / "new.json"
    assert _run(str(source), "--output", str(output)) == 2
    assert "/pools/0/workers" in capsys.readouterr().err
    assert not output.exists()


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(data=st.data())
def test_r124_every_scenario_1_6_is_a_scenario_1_7(data: st.DataObject) -> None:
    """The reviewer's decision for scenario 1.7 (schemas/reviews/issue-27-fleet-changes.md):
    backward compatible, so a minor version is right and R37's step 1.6 -> 1.7 only
    relabels. ``servesim schema review`` leaves the fleet.oneOf branch that gains
    ``{"required": ["scaling"]}`` undecided; a 1.6 ``fleet`` is closed and cannot hold
    ``scaling``. Any 1.6 scenario drawn from the 1.6 schema, migrated, is the same document
    labelled 1.7, valid under 1.7."""
    old, new = released_scenario_schema("1.6"), released_scenario_schema("1.7")
    scenario = data.draw(documents(old))
    assume(jsonschema.Draft202012Validator(old).is_valid(scenario))
    migrated = CHAIN.migrate(scenario, "s.json", "1.7").document
    assert migrated == {**scenario, "schema_version": "1.7"}
    jsonschema.validate(migrated, new)


def test_r124_every_golden_scenario_read_as_1_6_is_valid_as_1_7() -> None:
    """The same decision on the corpus's scenarios: each valid case's scenario of 1.0 to 1.6
    (section 18's cases are 1.7), labelled 1.6, is valid under 1.6 and, migrated, under 1.7."""
    old = jsonschema.Draft202012Validator(released_scenario_schema("1.6"))
    new = jsonschema.Draft202012Validator(released_scenario_schema("1.7"))
    paths = [
        path
        for path in sorted((REPO / "golden" / "valid").glob("*/scenario.json"))
        if json.loads(path.read_bytes())["schema_version"] not in ("1.7", "1.8")
    ]
    assert len(paths) > 300
    for path in paths:
        scenario = {**json.loads(path.read_bytes()), "schema_version": "1.6"}
        assert old.is_valid(scenario), path
        migrated = CHAIN.migrate(scenario, "s.json", "1.7").document
        assert migrated == {**scenario, "schema_version": "1.7"}
        assert new.is_valid(migrated), path


@pytest.mark.parametrize(
    "name", ["disagg-decode-ranks", "stop-mid-prefill", "ranks-rotation-per-worker"]
)
def test_r124_a_scenario_1_6_relabelled_1_7_replays_the_same(name: str) -> None:
    """R124: a 1.6 scenario means what it meant when read as 1.7 (no scaling, no failures: a
    fleet that never changes); the two replays differ in the scenario's digest alone."""
    case = REPO / "golden" / "valid" / name
    scenario = json.loads((case / "scenario.json").read_bytes())
    reports = []
    for version in ("1.6", "1.7"):
        documents_read = [
            load_document(_bytes({**scenario, "schema_version": version}), "s.json", "scenario"),
            load_document((case / "workload.json").read_bytes(), "w.json", "workload"),
            load_document((case / "timing-profile.json").read_bytes(), "t.json", "timing_profile"),
        ]
        report = json.loads(replay_documents(*documents_read, trace=True))
        del report["inputs"]["scenario"]["sha256"]  # R37: digests are of the bytes read
        reports.append(report)
    assert reports[0] == reports[1]


# --- R141: scenario 1.8 and workload 1.3 are relabels, report 10.0 has no host tier ----------


GOLDEN_REPORTS_10_0 = sorted((REPO / "golden" / "valid").glob("*/expected-report.json"))


def _golden_report_9_0(name: str) -> tuple[Path, dict[str, Any]]:
    """A golden case's expected report (10.0) and its 9.0 form, checked to be a valid 9.0
    report."""
    path = REPO / "golden" / "valid" / name / "expected-report.json"
    old = as_report_9_0(json.loads(path.read_bytes()))
    assert old["schema_version"] == "9.0"
    load_document(canonical_bytes(old) + b"\n", "old.json", "report")  # a valid 9.0 report
    return path, old


@pytest.mark.parametrize("path", GOLDEN_REPORTS_10_0, ids=lambda path: path.parent.name)
def test_report_9_0_migrates_to_exactly_the_10_0_report(path: Path) -> None:
    """R141: every golden report comes from inputs without a host pool, so its 9.0 form (the
    10.0 report without R140's members, each checked by ``as_report_9_0`` to be the value
    without a host tier) migrates to the golden 10.0 bytes, member order included."""
    old = as_report_9_0(json.loads(path.read_bytes()))
    assert old["schema_version"] == "9.0"
    migrated = CHAIN.migrate(old, "old.json")
    assert [(step.source, step.target) for step in migrated.steps] == [("9.0", "10.0")]
    assert canonical_bytes(migrated.document) + b"\n" == path.read_bytes()
    assert _member_order(migrated.document) == _member_order(json.loads(path.read_bytes()))


def test_r141_report_9_0_migrates_exactly_to_10_0() -> None:
    """R141, checked by hand on golden/valid/kv-caches-are-per-worker (two workers of one
    rank, a cache with prefix caching, the trace asked for): summary.prompt_tokens 20 and
    reused_prompt_tokens 8, so prefix_reuse_ratio 0.4. Each request gains
    host_reused_prompt_tokens 0 and load_wait_us null; each worker, its rank and the pool
    host null; summary.kv_cache gains host_reused_prompt_tokens 0, host_reuse_ratio 0 (20 > 0),
    gpu_reuse_ratio 0.4 (its prefix_reuse_ratio) and host null; the report host_transfers []
    (the trace is not null). Nothing else changes, and the result is the golden 10.0 report,
    byte for byte."""
    path, old = _golden_report_9_0("kv-caches-are-per-worker")
    assert old["trace"] is not None
    new = CHAIN.migrate(old, "old.json").document
    assert [name for name in new if name not in old] == ["host_transfers"]
    assert new["host_transfers"] == []
    for before, request in zip(old["requests"], new["requests"], strict=True):
        added = {name: request[name] for name in request if name not in before}
        assert added == {"host_reused_prompt_tokens": 0, "load_wait_us": None}
        assert {name: request[name] for name in before} == before
    for before, worker in zip(old["workers"], new["workers"], strict=True):
        assert {name: worker[name] for name in worker if name not in before} == {"host": None}
        assert [rank["host"] for rank in worker["ranks"]] == [None]
        assert [{k: v for k, v in rank.items() if k != "host"} for rank in worker["ranks"]] == (
            before["ranks"]
        )
    (pool,) = new["pools"]
    assert {name: pool[name] for name in pool if name not in old["pools"][0]} == {"host": None}
    kv_cache = new["summary"]["kv_cache"]
    before = old["summary"]["kv_cache"]
    assert (before["reused_prompt_tokens"], old["summary"]["prompt_tokens"]) == (8, 20)
    assert {name: kv_cache[name] for name in kv_cache if name not in before} == {
        "host_reused_prompt_tokens": 0,
        "host_reuse_ratio": 0,
        "gpu_reuse_ratio": 0.4,
        "host": None,
    }
    assert {name: value for name, value in new["summary"].items() if name != "kv_cache"} == {
        name: value for name, value in old["summary"].items() if name != "kv_cache"
    }
    assert new["trace"] == old["trace"]
    load_document(canonical_bytes(new) + b"\n", "new.json", "report")  # a valid 10.0 report
    assert canonical_bytes(new) + b"\n" == path.read_bytes()


@pytest.mark.parametrize(
    ("name", "kv_cache", "host_transfers"),
    [
        # No completed request (both cut off by the stop time): prompt_tokens 0, so both
        # ratios are null, as prefix_reuse_ratio is; the trace is asked for.
        (
            "disagg-stop-during-transfer",
            {
                "host_reused_prompt_tokens": 0,
                "host_reuse_ratio": None,
                "gpu_reuse_ratio": None,
                "host": None,
            },
            [],
        ),
        # A disaggregated fleet, a decode worker of two ranks: each rank's host is null too.
        (
            "disagg-decode-ranks",
            {
                "host_reused_prompt_tokens": 0,
                "host_reuse_ratio": 0,
                "gpu_reuse_ratio": 0,
                "host": None,
            },
            [],
        ),
        # Without a cache summary.kv_cache stays null; with the trace host_transfers is [].
        ("sglang-one-chunked-request-at-a-time", None, []),
        # Without the trace host_transfers is null.
        ("chunked-running-prefill-takes-last-budget-token", None, None),
        ("all-rejected-spread-arrivals", None, None),
    ],
)
def test_r141_summary_kv_cache_and_host_transfers(
    name: str, kv_cache: dict[str, Any] | None, host_transfers: list[Any] | None
) -> None:
    """R141's conditional members: host_reuse_ratio is 0 when summary.prompt_tokens is
    positive and null when it is 0 (gpu_reuse_ratio is prefix_reuse_ratio, null then too); a
    null summary.kv_cache stays null; host_transfers is [] with the trace, null without."""
    path, old = _golden_report_9_0(name)
    new = CHAIN.migrate(old).document
    if kv_cache is None:
        assert new["summary"]["kv_cache"] is None
    else:
        assert {k: new["summary"]["kv_cache"][k] for k in kv_cache} == kv_cache
    assert new["host_transfers"] == host_transfers
    assert (old["trace"] is None) == (host_transfers is None)
    holders = [*new["workers"], *new["pools"]]
    holders += [rank for worker in new["workers"] for rank in worker["ranks"]]
    assert {holder["host"] for holder in holders} == {None}
    assert canonical_bytes(new) + b"\n" == path.read_bytes()


def test_r141_servesim_migrate_writes_a_9_0_report_as_10_0(tmp_path: Path) -> None:
    """R141 through the command: a 9.0 report file becomes the golden 10.0 report (the same
    JSON value, members in canonical order), checked against report 10.0 before it is
    written."""
    path, old = _golden_report_9_0("kv-caches-are-per-worker")
    source = tmp_path / "old.json"
    source.write_bytes(canonical_bytes(old) + b"\n")
    output = tmp_path / "new.json"
    assert _run(str(source), "--output", str(output)) == 0
    written = json.loads(output.read_bytes())
    assert written == json.loads(path.read_bytes())
    assert _member_order(written) == _member_order(json.loads(path.read_bytes()))


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(data=st.data())
def test_r141_every_scenario_1_7_is_a_scenario_1_8(data: st.DataObject) -> None:
    """The reviewer's decision for scenario 1.8 (schemas/reviews/issue-28-host-tier.md): the
    one change adds an optional member (``host``) to the closed ``kv_cache`` objects, so any
    1.7 scenario drawn from the 1.7 schema, migrated, is the same document labelled 1.8,
    valid under 1.8 (R37's step only relabels)."""
    old, new = released_scenario_schema("1.7"), released_scenario_schema("1.8")
    scenario = data.draw(documents(old))
    assume(jsonschema.Draft202012Validator(old).is_valid(scenario))
    migrated = CHAIN.migrate(scenario, "s.json", "1.8").document
    assert migrated == {**scenario, "schema_version": "1.8"}
    jsonschema.validate(migrated, new)


def _released_workload_schema(version: str) -> Any:
    return json.loads(
        (REPO / "schemas" / "released" / version / "workload.schema.json").read_bytes()
    )


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(data=st.data())
def test_r141_every_workload_1_2_is_a_workload_1_3(data: st.DataObject) -> None:
    """The reviewer's decision for workload 1.3: ``session_prompts_extend`` is an optional
    member whose absence means false (R125), so any 1.2 workload drawn from the 1.2 schema,
    migrated, is the same document labelled 1.3, valid under 1.3."""
    old, new = _released_workload_schema("1.2"), _released_workload_schema("1.3")
    workload = data.draw(documents(old))
    assume(jsonschema.Draft202012Validator(old).is_valid(workload))
    migrated = CHAIN.migrate(workload, "w.json", "1.3").document
    assert migrated == {**workload, "schema_version": "1.3"}
    jsonschema.validate(migrated, new)


def test_r141_every_golden_scenario_and_workload_is_valid_relabelled() -> None:
    """The same decisions on the corpus: each valid case's scenario of 1.0 to 1.7, labelled
    1.7, is valid under 1.7 and, migrated, under 1.8; each workload of 1.0 to 1.2, labelled
    1.2, is valid under 1.2 and, migrated, under 1.3."""
    for kind, old_version, new_version, schema in [
        ("scenario", "1.7", "1.8", released_scenario_schema),
        ("workload", "1.2", "1.3", _released_workload_schema),
    ]:
        old = jsonschema.Draft202012Validator(schema(old_version))
        new = jsonschema.Draft202012Validator(schema(new_version))
        paths = [
            path
            for path in sorted((REPO / "golden" / "valid").glob(f"*/{kind}.json"))
            if json.loads(path.read_bytes())["schema_version"] != new_version
        ]
        assert len(paths) > 300
        for path in paths:
            document = {**json.loads(path.read_bytes()), "schema_version": old_version}
            assert old.is_valid(document), path
            migrated = CHAIN.migrate(document, "d.json", new_version).document
            assert migrated == {**document, "schema_version": new_version}
            assert new.is_valid(migrated), path


@pytest.mark.parametrize(
    "name",
    ["disagg-decode-ranks", "stop-mid-prefill", "closed-loop-sessions-hold-their-slot"],
)
def test_r141_scenario_1_7_and_workload_1_2_relabelled_replay_the_same(name: str) -> None:
    """R141: a 1.7 scenario read as 1.8 (no host tier) and a 1.2 workload read as 1.3
    (session_prompts_extend absent: false, R128) mean what they meant; the replays differ in
    the inputs' digests alone."""
    case = REPO / "golden" / "valid" / name
    scenario = json.loads((case / "scenario.json").read_bytes())
    workload = json.loads((case / "workload.json").read_bytes())
    reports = []
    for scenario_version, workload_version in (("1.7", "1.2"), ("1.8", "1.3")):
        documents_read = [
            load_document(
                _bytes({**scenario, "schema_version": scenario_version}), "s.json", "scenario"
            ),
            load_document(
                _bytes({**workload, "schema_version": workload_version}), "w.json", "workload"
            ),
            load_document((case / "timing-profile.json").read_bytes(), "t.json", "timing_profile"),
        ]
        report = json.loads(replay_documents(*documents_read, trace=True))
        del report["inputs"]["scenario"]["sha256"]  # R37: digests are of the bytes read
        del report["inputs"]["workload"]["sha256"]
        reports.append(report)
    assert reports[0] == reports[1]
