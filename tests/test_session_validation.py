"""R2 to R5 for section 13's inputs (scenario 1.3, workload 1.2): every fault of the
``golden/invalid/session-*``, ``closed-loop-*``, ``stop-*`` and ``slo-*`` cases is reported once,
with file, JSON pointer and what was expected, with exit code 2 and nothing written; R59's
session rules and R62's stop time are R4 checks a schema cannot state.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from servesim.contract.documents import Document, load_document
from servesim.contract.errors import InvalidInput
from servesim.contract.pair import pair_problems
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
PREFIXES = ("session-", "closed-loop-", "stop-", "slo-")

#: ``golden/invalid/<case>`` -> the one problem the reference reports: file, pointer, message.
EXPECTED: dict[str, tuple[str, str, str]] = {
    "session-unknown": (
        "workload.json",
        "/requests/1/session",
        'unknown session "chta" (not in /sessions); expected the id of one of the workload\'s '
        "sessions",
    ),
    "session-duplicate-id": (
        "workload.json",
        "/sessions/1/id",
        'duplicate session id "chat"; first used at /sessions/0/id',
    ),
    "session-without-turns": (
        "workload.json",
        "/sessions/1",
        'session "idle" has no turn: no request names it; expected at least one request with '
        "this session",
    ),
    "session-think-time-without-session": (
        "workload.json",
        "/requests/1/think_time_us",
        "think_time_us without session: only a session's later turns wait for a think time "
        "(R59); expected no think_time_us, or a session",
    ),
    "session-think-time-on-first-turn": (
        "workload.json",
        "/requests/0/think_time_us",
        'think_time_us on turn 0 of session "chat": the first turn arrives at its arrival_us '
        "(R59); expected no think_time_us here",
    ),
    "session-turn-arrival-before-previous": (
        "workload.json",
        "/requests/1/arrival_us",
        '50 is smaller than the arrival_us of the previous turn of session "chat" (100, at '
        "/requests/0/arrival_us); expected at least 100",
    ),
    "session-think-time-over-2-53": (
        "workload.json",
        "/requests/1/think_time_us",
        "9007199254740992 is greater than the maximum of 9007199254740991",
    ),
    "session-in-workload-1-1": (
        "workload.json",
        "/schema_version",
        'the document uses what version 1.2 added; expected "1.2", found "1.1"',
    ),
    "closed-loop-zero": (
        "scenario.json",
        "/closed_loop/max_in_flight",
        "0 is less than the minimum of 1",
    ),
    "closed-loop-in-scenario-1-2": (
        "scenario.json",
        "/schema_version",
        'the document uses what version 1.3 added; expected "1.3", found "1.2"',
    ),
    "stop-at-before-first-arrival": (
        "scenario.json",
        "/stop_at_us",
        "50 is not after the workload's first arrival (100, at /requests/0/arrival_us in "
        "workload.json); expected more than 100",
    ),
    "stop-at-equal-first-arrival": (
        "scenario.json",
        "/stop_at_us",
        "100 is not after the workload's first arrival (100, at /requests/1/arrival_us in "
        "workload.json); expected more than 100",
    ),
    "stop-at-zero": ("scenario.json", "/stop_at_us", "0 is less than the minimum of 1"),
    "slo-empty": (
        "scenario.json",
        "/slo",
        "no objective; expected at least one of ttft_us, mean_itl_us and e2e_us (R63)",
    ),
    "slo-negative": ("scenario.json", "/slo/ttft_us", "-1 is less than the minimum of 0"),
    "slo-unknown-objective": (
        "scenario.json",
        "/slo/tpot_us",
        "unexpected property 'tpot_us'; allowed here: e2e_us, mean_itl_us, ttft_us",
    ),
}

Problem = tuple[str, str, str]


def _case_problems(folder: Path) -> list[Problem]:
    """Every problem the reference finds in a case, as ``replay`` looks: each document alone
    (R1 to R4), then the scenario and the workload together."""
    problems: list[Problem] = []
    loaded: dict[str, Document] = {}
    for kind, name in (
        ("scenario", "scenario.json"),
        ("workload", "workload.json"),
        ("timing_profile", "timing-profile.json"),
    ):
        try:
            loaded[kind] = load_document((folder / name).read_bytes(), name, kind)
        except InvalidInput as error:
            problems.extend((p.file, p.pointer, p.message) for p in error.problems)
    if not problems:
        pair = pair_problems(loaded["scenario"], loaded["workload"])
        problems.extend((p.file, p.pointer, p.message) for p in pair)
    return problems


def _problems(value: dict[str, Any], kind: str) -> list[Problem]:
    with pytest.raises(InvalidInput) as caught:
        load_document(json.dumps(value).encode(), f"{kind}.json", kind)
    return [(p.file, p.pointer, p.message) for p in caught.value.problems]


def _load(value: dict[str, Any], kind: str) -> Document:
    return load_document(json.dumps(value).encode(), f"{kind}.json", kind)


def _turn(
    request_id: str, arrival_us: int, session: str | None = None, think_time_us: int | None = None
) -> dict[str, Any]:
    request: dict[str, Any] = {
        "id": request_id,
        "arrival_us": arrival_us,
        "prompt_tokens": 8,
        "max_output_tokens": 2,
    }
    if session is not None:
        request["session"] = session
    if think_time_us is not None:
        request["think_time_us"] = think_time_us
    return request


def _sessions(*requests: dict[str, Any], sessions: tuple[str, ...] = ("chat",)) -> dict[str, Any]:
    """A workload 1.2 of ``requests`` with the sessions ``sessions``."""
    return {
        "document": "workload",
        "schema_version": "1.2",
        "sessions": [{"id": session} for session in sessions],
        "requests": list(requests),
    }


def _scenario_1_3(**members: Any) -> dict[str, Any]:
    return {**scenario_doc(), "schema_version": "1.3", **members}


def test_every_section_13_invalid_case_is_listed_here_and_in_the_manifest() -> None:
    folders = {
        path.name
        for path in INVALID.iterdir()
        if path.name.startswith(PREFIXES)
        and not path.name.startswith("session-prompts-extend")  # section 19's (R125, R141)
    }
    assert folders == set(EXPECTED)
    manifest = json.loads((REPO / "golden" / "manifest.json").read_bytes())
    faults = {
        case["id"].removeprefix("invalid/"): case["fault"]
        for case in manifest["cases"]
        if case["id"].removeprefix("invalid/") in folders
    }
    assert set(faults) == folders
    for case, fault in faults.items():
        file, pointer, _ = EXPECTED[case]
        assert fault.startswith(f"{file}, {pointer}: "), (case, fault)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_r4_r59_session_faults_are_one_problem_at_their_pointer(case: str) -> None:
    """One fault per case, reported once, in its file, at its pointer, saying what was expected;
    the case's other documents are valid (each alone, and the pair when the fault is in one)."""
    assert _case_problems(INVALID / case) == [EXPECTED[case]]


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_r5_section_13_faults_exit_2_with_file_and_pointer_and_nothing_written(
    tmp_path: Path, case: str
) -> None:
    """``servesim replay`` on the case as it lies in the corpus: exit 2, the file, the pointer and
    the message on standard error, no report and no partial file."""
    folder = INVALID / case
    paths = {
        "scenario": folder / "scenario.json",
        "workload": folder / "workload.json",
        "timing_profile": folder / "timing-profile.json",
    }
    output = tmp_path / "report.json"
    result = run_servesim(*replay_args(paths, output))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert not output.exists()
    assert not list(tmp_path.glob(".report.json.*"))
    file, pointer, message = EXPECTED[case]
    assert f"{folder / file}: at {pointer}: {message.split(' (', 1)[0]}" in result.stderr


def test_r33_validate_applies_the_stop_time_rule_to_a_scenario_and_a_workload_together() -> None:
    folder = INVALID / "stop-at-equal-first-arrival"
    alone = run_servesim("validate", folder / "scenario.json")
    assert alone.returncode == 0, alone.stderr  # R62's rule needs the workload (R4)
    together = run_servesim("validate", folder / "scenario.json", folder / "workload.json")
    assert together.returncode == 2
    assert f"{folder / 'scenario.json'}: at /stop_at_us: 100 is not after" in together.stderr


def test_r59_well_formed_sessions_are_valid() -> None:
    """Equal arrivals of consecutive turns, a think time of 0, requests without a session among
    turns, interleaved sessions and a turn whose arrival_us is turn 0's (R65's import) are all
    valid."""
    workload = _sessions(
        _turn("a0", 100, "a"),
        _turn("solo", 0),
        _turn("b0", 50, "b"),
        _turn("a1", 100, "a", think_time_us=0),
        _turn("b1", 50, "b", think_time_us=9_007_199_254_740_991),
        _turn("a2", 400, "a"),
        sessions=("a", "b"),
    )
    document = _load(workload, "workload")
    assert document.version == "1.2"
    assert not pair_problems(_load(_scenario_1_3(stop_at_us=1), "scenario"), document)


def test_r4_every_session_fault_of_one_workload_is_reported_at_once() -> None:
    """R5: each fault is one problem, at its own pointer; a request naming an unknown session is
    not a turn, so its think time and arrival are not judged as a turn's."""
    workload = _sessions(
        _turn("a0", 100, "chat", think_time_us=5),  # think time on turn 0
        _turn("a1", 90, "chat"),  # before its predecessor
        _turn("x", 0, "nope", think_time_us=5),  # unknown session, nothing else
        _turn("y", 0, think_time_us=5),  # think time without session
        sessions=("chat", "idle", "chat"),  # idle has no turn; chat twice
    )
    pointers = [pointer for _, pointer, _ in _problems(workload, "workload")]
    assert sorted(pointers) == sorted(
        [
            "/sessions/2/id",
            "/requests/0/think_time_us",
            "/requests/1/arrival_us",
            "/requests/2/session",
            "/requests/3/think_time_us",
            "/sessions/1",
        ]
    )


def test_r4_a_session_in_a_workload_without_sessions_is_unknown() -> None:
    workload = {**workload_doc(("a", 0, 8, 2)), "schema_version": "1.2"}
    workload["requests"][0]["session"] = "chat"
    assert _problems(workload, "workload") == [
        (
            "workload.json",
            "/requests/0/session",
            'unknown session "chat" (the workload has no sessions); expected the id of one of '
            "the workload's sessions",
        )
    ]


def test_r3_sessions_are_at_least_one_with_a_request_s_id_form() -> None:
    assert [p for _, p, _ in _problems(_sessions(_turn("a", 0), sessions=()), "workload")] == [
        "/sessions"
    ]
    spaced = _sessions(_turn("a", 0, "my chat"), sessions=("my chat",))
    assert {p for _, p, _ in _problems(spaced, "workload")} == {
        "/sessions/0/id",
        "/requests/0/session",
    }


@pytest.mark.parametrize(
    ("stop_at_us", "valid"),
    [(99, False), (100, False), (101, True), (9_007_199_254_740_991, True)],
)
def test_r62_the_stop_time_must_be_after_the_first_arrival(stop_at_us: int, valid: bool) -> None:
    scenario = _load(_scenario_1_3(stop_at_us=stop_at_us), "scenario")
    workload = _load(workload_doc(("late", 300, 8, 2), ("first", 100, 8, 2)), "workload")
    problems = pair_problems(scenario, workload)
    assert not problems if valid else [p.pointer for p in problems] == ["/stop_at_us"]


@pytest.mark.parametrize(
    "members",
    [
        {"closed_loop": {"max_in_flight": 1}},
        {"closed_loop": {"max_in_flight": 4_294_967_295}},
        {"slo": {"ttft_us": 0}},
        {"slo": {"mean_itl_us": 9_007_199_254_740_991}},
        {"slo": {"e2e_us": 5, "ttft_us": 1, "mean_itl_us": 2}},
        {"stop_at_us": 1},
    ],
    ids=["loop-1", "loop-max", "slo-ttft-0", "slo-itl-max", "slo-all", "stop-1"],
)
def test_r3_scenario_1_3_members_at_their_bounds_are_valid(members: dict[str, Any]) -> None:
    assert _load(_scenario_1_3(**members), "scenario").version == "1.3"


@pytest.mark.parametrize(
    ("members", "pointer"),
    [
        ({"closed_loop": {"max_in_flight": 4_294_967_296}}, "/closed_loop/max_in_flight"),
        ({"closed_loop": {}}, "/closed_loop"),
        ({"closed_loop": {"max_in_flight": 2, "sessions": 1}}, "/closed_loop/sessions"),
        ({"stop_at_us": 9_007_199_254_740_992}, "/stop_at_us"),
        ({"slo": {"e2e_us": 9_007_199_254_740_992}}, "/slo/e2e_us"),
        ({"slo": {"ttft_us": 1.5}}, "/slo/ttft_us"),
    ],
    ids=["loop-2-32", "loop-empty", "loop-unknown", "stop-2-53", "slo-2-53", "slo-fraction"],
)
def test_r3_scenario_1_3_members_out_of_bounds_are_one_problem(
    members: dict[str, Any], pointer: str
) -> None:
    assert [p for _, p, _ in _problems(_scenario_1_3(**members), "scenario")] == [pointer]


@pytest.mark.parametrize(
    ("version", "member", "value"),
    [
        ("1.0", "stop_at_us", 5),
        ("1.1", "slo", {"ttft_us": 5}),
        ("1.2", "closed_loop", {"max_in_flight": 2}),
    ],
)
def test_r2_r64_section_13_scenario_members_need_1_3(version: str, member: str, value: Any) -> None:
    scenario = {**scenario_doc(), "schema_version": version, member: value}
    assert _problems(scenario, "scenario") == [
        (
            "scenario.json",
            "/schema_version",
            f'the document uses what version 1.3 added; expected "1.3", found "{version}"',
        )
    ]


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_r2_r64_think_time_needs_workload_1_2(version: str) -> None:
    workload = {**workload_doc(("a", 0, 8, 2)), "schema_version": version}
    workload["requests"][0]["think_time_us"] = 3
    assert _problems(workload, "workload") == [
        (
            "workload.json",
            "/schema_version",
            f'the document uses what version 1.2 added; expected "1.2", found "{version}"',
        )
    ]


def _released(version: str, kind: str) -> Any:
    return json.loads((REPO / "schemas" / "released" / version / f"{kind}.schema.json").read_text())


@settings(max_examples=150, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data())
def test_r35_every_scenario_1_2_and_workload_1_1_is_one_of_the_next_minor(
    data: st.DataObject,
) -> None:
    """R35, R64: the new minors only add optional members, so an older document relabelled is
    valid under the new minor (drawn from the old schema, or as the suite draws KV inputs)."""
    kind, old_version, new_version = data.draw(
        st.sampled_from([("scenario", "1.2", "1.3"), ("workload", "1.1", "1.2")])
    )
    old, new = _released(old_version, kind), _released(new_version, kind)
    if data.draw(st.booleans()):
        document = data.draw(documents(old))
        assume(jsonschema.Draft202012Validator(old).is_valid(document))
    else:
        scenario, workload, _ = data.draw(kv_input_triples())
        document = {"scenario": scenario, "workload": workload}[kind]
        document = {**document, "schema_version": old_version}
        jsonschema.validate(document, old)
    jsonschema.validate({**document, "schema_version": new_version}, new)


def test_section_13_documents_run_with_a_timing_profile(tmp_path: Path) -> None:
    """Valid 1.3 and 1.2 inputs pass every R1 to R4 check of ``servesim validate`` together."""
    paths = write_inputs(
        tmp_path,
        _scenario_1_3(closed_loop={"max_in_flight": 1}, stop_at_us=10**6, slo={"ttft_us": 1}),
        _sessions(_turn("a", 0, "chat"), _turn("b", 0, "chat", think_time_us=10)),
        timing_doc(),
    )
    result = run_servesim("validate", *paths.values())
    assert result.returncode == 0, result.stderr
