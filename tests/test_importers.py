"""``servesim import``: Mooncake and Azure traces to workloads; malformed rows exit 2."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import servesim
from servesim.replay import replay
from tests.helpers import REPO, run_servesim, scenario_doc, timing_doc, write_inputs

MOONCAKE = (
    '{"timestamp": 1000, "input_length": 10, "output_length": 5, "hash_ids": [0]}\n'
    '{"timestamp": 1000, "input_length": 520, "output_length": 6, "hash_ids": [0, 1]}\n'
    '{"timestamp": 4500, "input_length": 30, "output_length": 7, "hash_ids": [2]}\n'
)
#: The first two lines of the shared Mooncake conversation trace, byte for byte: two prompts
#: that share their first 512-token block (hash 0); 7,322 tokens make exactly 15 blocks.
MOONCAKE_REAL = (
    '{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": '
    "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}\n"
    '{"timestamp": 0, "input_length": 7322, "output_length": 490, "hash_ids": '
    "[0, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27]}\n"
)
#: The traces shipped with the repository (benchmarks/traces/README.md: sources, licences).
SHIPPED_TRACES = REPO / "benchmarks" / "traces"
#: The traces the import tests read, as benchmarks/bench.py finds them: SERVESIM_TRACES (another
#: folder laid out the same way), else the shipped ones.
TRACES = Path(os.environ.get("SERVESIM_TRACES") or SHIPPED_TRACES)


def real_trace(relative: str) -> Path:
    """A file of ``TRACES``; missing, the test fails (the shipped traces are in every checkout,
    and a SERVESIM_TRACES without them is a mistake to show, not a reason to skip)."""
    path = TRACES / relative
    if not path.is_file():
        where = "SERVESIM_TRACES" if os.environ.get("SERVESIM_TRACES") else "the shipped traces"
        pytest.fail(f"{relative} is not in {TRACES} ({where})")
    return path


AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:46.6805919,10,1\n"
    "2023-11-16 18:15:50.9951690,396,109\n"
)


def run_import(*arguments: str | Path) -> subprocess.CompletedProcess[str]:
    return run_servesim("import", *arguments)


def imported_document(tmp_path: Path, source: str, text: str, *options: str) -> dict[str, Any]:
    """The workload ``servesim import`` makes of ``text``, checked by the reference (R1-R4)."""
    trace = tmp_path / "trace"
    trace.write_text(text)
    output = tmp_path / "workload.json"
    result = run_import(source, trace, "-o", output, *options)
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = servesim.read_document(output, "workload").value
    return document


def imported(tmp_path: Path, source: str, text: str, *options: str) -> list[dict[str, object]]:
    requests: list[dict[str, object]] = imported_document(tmp_path, source, text, *options)[
        "requests"
    ]
    return requests


def without_hashes(requests: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{k: v for k, v in r.items() if k != "prefix_hashes"} for r in requests]


def test_mooncake_milliseconds_become_microseconds_from_the_first_record(tmp_path: Path) -> None:
    requests = imported(tmp_path, "mooncake", MOONCAKE)
    assert without_hashes(requests) == [
        {"id": "mooncake-L1", "arrival_us": 0, "prompt_tokens": 10, "max_output_tokens": 5},
        {"id": "mooncake-L2", "arrival_us": 0, "prompt_tokens": 520, "max_output_tokens": 6},
        {"id": "mooncake-L3", "arrival_us": 3_500_000, "prompt_tokens": 30, "max_output_tokens": 7},
    ]


def test_mooncake_hash_ids_become_prefix_hashes_of_a_workload_1_1(tmp_path: Path) -> None:
    document = imported_document(tmp_path, "mooncake", MOONCAKE_REAL)
    assert document["schema_version"] == "1.1"
    assert document["prefix_hash_block_tokens"] == 512
    assert document["requests"] == [
        {
            "id": "mooncake-L1",
            "arrival_us": 0,
            "prompt_tokens": 6758,
            "max_output_tokens": 500,
            "prefix_hashes": list(range(14)),
        },
        {
            "id": "mooncake-L2",
            "arrival_us": 0,
            "prompt_tokens": 7322,
            "max_output_tokens": 490,
            "prefix_hashes": [0, *range(14, 28)],
        },
    ]


def test_the_real_lines_are_the_shipped_trace_s_first_lines() -> None:
    with (SHIPPED_TRACES / "mooncake" / "conversation_trace.jsonl").open() as stream:
        assert next(stream) + next(stream) == MOONCAKE_REAL


def _sums() -> dict[str, str]:
    lines = (SHIPPED_TRACES / "SHA256SUMS").read_text(encoding="utf-8").splitlines()
    return {name: digest for digest, name in (line.split("  ", 1) for line in lines)}


def test_the_shipped_traces_are_the_published_bytes() -> None:
    """Every trace file shipped is listed in SHA256SUMS with its digest, and every listed file is
    there with those bytes (copied byte for byte, line ends and all: benchmarks/traces/README.md);
    the record counts are the README's."""
    sums = _sums()
    shipped = sorted(
        str(path.relative_to(SHIPPED_TRACES))
        for folder in ("mooncake", "azure_llm_2023", "weka_agentic_sessions")
        for path in (SHIPPED_TRACES / folder).iterdir()
        if path.name != "README.md"
    )
    assert shipped == sorted(sums)
    assert len(shipped) == 2 + 13
    for name, digest in sums.items():
        assert hashlib.sha256((SHIPPED_TRACES / name).read_bytes()).hexdigest() == digest, name
    mooncake = (SHIPPED_TRACES / "mooncake" / "conversation_trace.jsonl").read_bytes()
    azure = (SHIPPED_TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv").read_bytes()
    assert mooncake.count(b"\n") == 12031
    # CR LF line ends, none after the last line: the header, then one request a line
    assert azure.count(b"\n") == azure.count(b"\r\n") == 19366
    assert len(azure.split(b"\r\n")) == 1 + 19366


def test_the_shipped_traces_carry_their_licences() -> None:
    readme = (SHIPPED_TRACES / "README.md").read_text(encoding="utf-8")
    for needed in ("Apache-2.0", "CC-BY-4.0", "kvcache-ai/Mooncake", "Azure/AzurePublicDataset"):
        assert needed in readme
    assert "callanjfox/kv-cache-tester" in readme
    assert "Splitwise" in readme  # the citation the Azure dataset asks for
    licence = (SHIPPED_TRACES / "LICENSE-Apache-2.0").read_text(encoding="utf-8")
    assert "Apache License" in licence
    assert "END OF TERMS AND CONDITIONS" in licence


def test_hash_block_tokens_is_written_and_bounds_the_hash_count(tmp_path: Path) -> None:
    text = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [7, 8]}\n'
    document = imported_document(tmp_path, "mooncake", text, "--hash-block-tokens", "8")
    assert document["prefix_hash_block_tokens"] == 8
    assert document["requests"][0]["prefix_hashes"] == [7, 8]
    # the same line read with the default 512-token blocks has one hash too many
    trace = tmp_path / "trace"
    result = run_import("mooncake", trace, "-o", tmp_path / "w512.json")
    assert result.returncode == 2
    assert f"{trace}:1: field 'hash_ids': 2 hashes, more than the 1 blocks of 512" in result.stderr
    assert "hint: if the trace was hashed with blocks of another size" in result.stderr
    assert "--hash-block-tokens N" in result.stderr


def test_the_largest_hash_and_a_record_without_hashes_are_imported(tmp_path: Path) -> None:
    text = (
        f'{{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [{2**53 - 1}]}}\n'
        '{"timestamp": 1, "input_length": 600, "output_length": 1}\n'
        '{"timestamp": 2, "input_length": 0, "output_length": 1, "hash_ids": []}\n'
    )
    requests = imported(tmp_path, "mooncake", text)
    assert [r.get("prefix_hashes") for r in requests] == [[2**53 - 1], None, None]


def test_no_prefix_hashes_writes_a_workload_1_0_as_before(tmp_path: Path) -> None:
    bad_hashes = '{"timestamp": 9000, "input_length": 1, "output_length": 1, "hash_ids": [-1, 2]}\n'
    document = imported_document(tmp_path, "mooncake", MOONCAKE + bad_hashes, "--no-prefix-hashes")
    assert document["schema_version"] == "1.0"
    assert "prefix_hash_block_tokens" not in document
    assert all("prefix_hashes" not in request for request in document["requests"])
    assert len(document["requests"]) == 4


def test_the_window_keeps_each_request_s_hashes(tmp_path: Path) -> None:
    requests = imported(tmp_path, "mooncake", MOONCAKE, "--window", "0", "1", "--speedup", "2")
    assert [(r["id"], r["prefix_hashes"]) for r in requests] == [
        ("mooncake-L1", [0]),
        ("mooncake-L2", [0, 1]),
    ]


def test_azure_has_no_hashes_and_stays_a_workload_1_0(tmp_path: Path) -> None:
    document = imported_document(tmp_path, "azure", AZURE)
    assert document["schema_version"] == "1.0"
    assert "prefix_hash_block_tokens" not in document
    assert all("prefix_hashes" not in request for request in document["requests"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--hash-block-tokens", "0"), "--hash-block-tokens: expected 1..1048576, found 0"),
        (("--hash-block-tokens", "1048577"), "expected 1..1048576, found 1048577"),
        (("--hash-block-tokens", "64", "--no-prefix-hashes"), "not allowed with argument"),
    ],
)
def test_bad_hash_options_are_usage_errors(
    tmp_path: Path, options: tuple[str, ...], message: str
) -> None:
    trace = tmp_path / "trace"
    trace.write_text(MOONCAKE)
    output = tmp_path / "w.json"
    result = run_import("mooncake", trace, "-o", output, *options)
    assert result.returncode == 2
    assert message in result.stderr
    assert not output.exists()


def test_hash_block_tokens_for_an_azure_trace_is_a_usage_error(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    trace.write_text(AZURE)
    result = run_import("azure", trace, "-o", tmp_path / "w.json", "--hash-block-tokens", "64")
    assert result.returncode == 2
    assert "--hash-block-tokens: azure traces have no hashes" in result.stderr


def test_help_documents_the_hash_options() -> None:
    result = run_import("--help")
    assert result.returncode == 0
    assert "--no-prefix-hashes" in result.stdout
    assert "--hash-block-tokens" in result.stdout
    assert "workload 1.0" in result.stdout


def test_azure_seven_digit_fractions_floor_to_microseconds(tmp_path: Path) -> None:
    requests = imported(tmp_path, "azure", AZURE)
    # 46.6805919 - 46.6805900 = 19 ticks of 100 ns = 1.9 us, floored to 1 us.
    assert [r["arrival_us"] for r in requests] == [0, 1, 4_314_579]
    assert [r["id"] for r in requests] == ["azure-L2", "azure-L3", "azure-L4"]


def test_limit_window_and_speedup(tmp_path: Path) -> None:
    assert len(imported(tmp_path, "mooncake", MOONCAKE, "--limit", "2")) == 2
    windowed = imported(tmp_path, "mooncake", MOONCAKE, "--window", "1", "10")
    assert [(r["id"], r["arrival_us"]) for r in windowed] == [("mooncake-L3", 2_500_000)]
    faster = imported(tmp_path, "azure", AZURE, "--speedup", "3")
    assert [r["arrival_us"] for r in faster] == [0, 0, 4_314_579 // 3]


HASHED_LINE = '{"timestamp": 9000, "input_length": 600, "output_length": 1, "hash_ids": IDS}\n'


@pytest.mark.parametrize(
    ("source", "text", "where"),
    [
        (
            "mooncake",
            MOONCAKE + '{"timestamp": 9000, "input_length": -1}\n',
            ":4: field 'input_length'",
        ),
        (
            "mooncake",
            MOONCAKE + '{"timestamp": 9000, "input_length": 1}\n',
            ":4: field 'output_length'",
        ),
        ("mooncake", MOONCAKE + "not json\n", ":4: field '(line)'"),
        *(
            (
                "mooncake",
                MOONCAKE + HASHED_LINE.replace("IDS", ids),
                f":4: field 'hash_ids': {message}",
            )
            for ids, message in [
                ("[0, -1]", "entry 1: expected an integer 0 to 2^53-1, found -1"),
                (f"[{2**53}]", f"entry 0: expected an integer 0 to 2^53-1, found {2**53}"),
                ("[1.0]", "entry 0: expected an integer 0 to 2^53-1, found 1.0"),
                ("[true]", "entry 0: expected an integer 0 to 2^53-1, found true"),
                ('["3"]', 'entry 0: expected an integer 0 to 2^53-1, found "3"'),
                ("7", "expected a list of integers, found 7"),
                ("[1, 2, 3]", "3 hashes, more than the 2 blocks of 512 tokens"),
            ]
        ),
        (
            "mooncake",
            MOONCAKE + '{"timestamp": 10, "input_length": 1, "output_length": 1}\n',
            ":4: field 'timestamp'",
        ),
        ("azure", AZURE + "2023-11-16 18:15:51.1,12\n", ":5: field '(row)'"),
        ("azure", AZURE + "2023-11-16 18:15:51.1,12,x\n", ":5: field 'GeneratedTokens'"),
        ("azure", AZURE + "yesterday,12,3\n", ":5: field 'TIMESTAMP'"),
        ("azure", "time,in,out\n", ":1: field '(header)'"),
        ("azure", AZURE + "2023-11-16 18:15:51.1,12,4\u00b2\n", ":5: field 'GeneratedTokens'"),
    ],
)
def test_malformed_record_exits_2_naming_line_and_field(
    tmp_path: Path, source: str, text: str, where: str
) -> None:
    trace = tmp_path / "trace"
    trace.write_text(text)
    output = tmp_path / "workload.json"
    result = run_import(source, trace, "-o", output)
    assert result.returncode == 2
    assert f"{trace}{where}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not output.exists()


def test_bytes_that_are_not_utf8_name_their_line(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    trace.write_bytes(MOONCAKE.encode() + b'{"timestamp": 9000, "input_length": "\xff"}\n')
    result = run_import("mooncake", trace, "-o", tmp_path / "w.json")
    assert result.returncode == 2
    assert f"{trace}:4: field '(line)': not UTF-8" in result.stderr


def test_values_beyond_the_schema_are_refused(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    trace.write_text('{"timestamp": 0, "input_length": 99999999999999, "output_length": 1}\n')
    output = tmp_path / "w.json"
    result = run_import("mooncake", trace, "-o", output)
    assert result.returncode == 2
    assert "at /requests/0/prompt_tokens" in result.stderr
    assert not output.exists()


def test_nothing_selected_exits_2(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    trace.write_text(MOONCAKE)
    result = run_import("mooncake", trace, "-o", tmp_path / "w.json", "--window", "100", "200")
    assert result.returncode == 2
    assert "no request" in result.stderr


@pytest.mark.parametrize(
    ("source", "path", "count"),
    [
        ("mooncake", "mooncake/conversation_trace.jsonl", 12031),
        ("azure", "azure_llm_2023/AzureLLMInferenceTrace_conv.csv", 19366),
    ],
)
def test_real_traces_import_completely(tmp_path: Path, source: str, path: str, count: int) -> None:
    trace = real_trace(path)
    if TRACES.resolve() != SHIPPED_TRACES.resolve():  # other traces: one request a record
        count = len(trace.read_bytes().splitlines()) - (source == "azure")
    output = tmp_path / "workload.json"
    result = run_import(source, trace, "-o", output)
    assert result.returncode == 0, result.stderr
    requests = servesim.read_document(output, "workload").value["requests"]
    assert len(requests) == count
    if source == "mooncake":  # the trace's README: one hash per started block of 512 tokens
        assert all(
            len(r.get("prefix_hashes", [])) == -(-r["prompt_tokens"] // 512) for r in requests
        )


@pytest.mark.parametrize("speedup", ["0", "-1", "-0.5"])
def test_a_speedup_of_zero_or_less_gets_one_message(tmp_path: Path, speedup: str) -> None:
    trace = tmp_path / "trace"
    trace.write_text(MOONCAKE)
    result = run_import("mooncake", trace, "-o", tmp_path / "w.json", "--speedup", speedup)
    assert result.returncode == 2
    assert f"--speedup: expected a number above 0, found {speedup}" in result.stderr


@pytest.mark.parametrize("window", [("600", "0"), ("5", "5")])
def test_a_window_whose_start_is_not_below_its_end_says_so(
    tmp_path: Path, window: tuple[str, str]
) -> None:
    trace = tmp_path / "trace"
    trace.write_text(MOONCAKE)
    result = run_import("mooncake", trace, "-o", tmp_path / "w.json", "--window", *window)
    assert result.returncode == 2
    assert f"--window: START must be below END, found {window[0]} {window[1]}" in result.stderr
    assert "no request" not in result.stderr


def test_a_trace_of_the_other_format_is_shown_as_its_text(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    trace.write_text(MOONCAKE)
    result = run_import("azure", trace, "-o", tmp_path / "w.json")
    assert result.returncode == 2
    assert 'found \'{"timestamp": 1000, "input_length": 10' in result.stderr
    assert "['" not in result.stderr, "no Python list in a message"


def test_the_workload_can_go_to_standard_output(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    trace.write_text(MOONCAKE)
    result = run_import("mooncake", trace, "-o", "-")
    assert result.returncode == 0, result.stderr
    assert [item["id"] for item in json.loads(result.stdout)["requests"]] == [
        "mooncake-L1",
        "mooncake-L2",
        "mooncake-L3",
    ]
    assert "-: 3 requests" in result.stderr


def test_an_unwritable_workload_exits_4(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    trace.write_text(MOONCAKE)
    result = run_import("mooncake", trace, "-o", tmp_path / "missing" / "w.json")
    assert result.returncode == 4
    assert "cannot write the workload to" in result.stderr


# --- R65: sessions ---------------------------------------------------------------------------

#: Two conversations as NVIDIA Dynamo's replay reads them, interleaved with a lone request: the
#: later turns carry a delay (ms) and no timestamp (chat-a's third turn has one, which R65 does
#: not read), and session 17 is named by an integer.
MOONCAKE_SESSIONS = (
    '{"timestamp": 1000, "input_length": 10, "output_length": 5, "hash_ids": [0], '
    '"session_id": "chat-a"}\n'
    '{"timestamp": 1000, "input_length": 30, "output_length": 6, "hash_ids": [7]}\n'
    '{"input_length": 520, "output_length": 6, "hash_ids": [0, 1], "session_id": "chat-a", '
    '"delay": 2500}\n'
    '{"timestamp": 2000, "input_length": 40, "output_length": 3, "session_id": 17}\n'
    '{"timestamp": 9000, "input_length": 600, "output_length": 4, "hash_ids": [0, 1], '
    '"session_id": "chat-a", "delay": 0.5005}\n'
    '{"input_length": 50, "output_length": 2, "session_id": 17, "delay": 0}\n'
)


def test_r65_mooncake_session_lines_become_sessions(tmp_path: Path) -> None:
    """R65: one session per session_id, its turns in file order; turn 0 keeps its timestamp,
    a later turn gets turn 0's arrival and think_time_us = delay * 1000 (0.5005 ms is 500.5 us,
    rounded down to 500); a line without session_id is a request of its own, as before."""
    document = imported_document(tmp_path, "mooncake", MOONCAKE_SESSIONS)
    assert document["schema_version"] == "1.2"
    assert document["prefix_hash_block_tokens"] == 512
    assert document["sessions"] == [{"id": "chat-a"}, {"id": "17"}]
    shown = [
        (r["id"], r["arrival_us"], r.get("session"), r.get("think_time_us"))
        for r in document["requests"]
    ]
    assert shown == [
        ("mooncake-L1", 0, "chat-a", None),
        ("mooncake-L2", 0, None, None),
        ("mooncake-L3", 0, "chat-a", 2_500_000),
        ("mooncake-L4", 1_000_000, "17", None),
        ("mooncake-L5", 0, "chat-a", 500),
        ("mooncake-L6", 1_000_000, "17", 0),
    ]
    assert document["requests"][2]["prefix_hashes"] == [0, 1]


def test_r65_a_session_trace_replays_turn_after_answer(tmp_path: Path) -> None:
    """The imported session replays as R59 says: chat-a's turn 1 arrives 2.5 s after turn 0
    completes, its turn 2 500 us after turn 1 completes."""
    document = imported_document(tmp_path, "mooncake", MOONCAKE_SESSIONS, "--no-prefix-hashes")
    assert document["schema_version"] == "1.2"
    assert all("prefix_hashes" not in request for request in document["requests"])
    scenario = scenario_doc(workers=2, max_batched_tokens=1024, max_model_len=2048)
    paths = write_inputs(tmp_path, scenario, document, timing_doc())
    report = json.loads(replay(paths["scenario"], paths["workload"], paths["timing_profile"]))
    requests = {request["id"]: request for request in report["requests"]}
    turns = [requests[f"mooncake-L{line}"] for line in (1, 3, 5)]
    assert turns[1]["arrival_us"] == turns[0]["terminal_us"] + 2_500_000
    assert turns[2]["arrival_us"] == turns[1]["terminal_us"] + 500
    assert [turn["session"] for turn in turns] == ["chat-a"] * 3
    assert requests["mooncake-L2"]["session"] is None


def test_r65_the_window_and_limit_keep_whole_session_starts(tmp_path: Path) -> None:
    # chat-a starts at 0 s, session 17 at 1 s: a window from 1 s keeps session 17 only, both
    # of its turns (the later one has turn 0's arrival), re-based to the window
    requests = imported(tmp_path, "mooncake", MOONCAKE_SESSIONS, "--window", "1", "10")
    assert [(r["id"], r["arrival_us"]) for r in requests] == [
        ("mooncake-L4", 0),
        ("mooncake-L6", 0),
    ]
    document = imported_document(tmp_path, "mooncake", MOONCAKE_SESSIONS, "--limit", "3")
    assert document["sessions"] == [{"id": "chat-a"}]
    faster = imported(tmp_path, "mooncake", MOONCAKE_SESSIONS, "--speedup", "2")
    assert [r.get("think_time_us") for r in faster] == [None, None, 1_250_000, None, 250, 0]


def test_a_trace_without_session_id_imports_byte_for_byte_as_before(tmp_path: Path) -> None:
    """A delay without a session_id is ignored, as any unknown field always was."""
    trace = tmp_path / "plain"
    trace.write_text(MOONCAKE)
    with_delay = tmp_path / "delayed"
    with_delay.write_text(MOONCAKE.replace('"hash_ids"', '"delay": "soon", "hash_ids"'))
    outputs = []
    for source in (trace, with_delay):
        output = tmp_path / f"{source.name}.json"
        assert run_import("mooncake", source, "-o", output).returncode == 0
        outputs.append(output.read_text())
    assert outputs[0] == outputs[1]
    assert outputs[0] == (
        '{\n  "document": "workload",\n  "schema_version": "1.1",\n'
        '  "prefix_hash_block_tokens": 512,\n  "requests": [\n'
        '    {"id": "mooncake-L1", "arrival_us": 0, "prompt_tokens": 10, '
        '"max_output_tokens": 5, "prefix_hashes": [0]},\n'
        '    {"id": "mooncake-L2", "arrival_us": 0, "prompt_tokens": 520, '
        '"max_output_tokens": 6, "prefix_hashes": [0, 1]},\n'
        '    {"id": "mooncake-L3", "arrival_us": 3500000, "prompt_tokens": 30, '
        '"max_output_tokens": 7, "prefix_hashes": [2]}\n  ]\n}\n'
    )


SESSION_TURN = '{"input_length": 5, "output_length": 1, "session_id": SID, "delay": DELAY}\n'
SESSION_START = '{"timestamp": 5000, "input_length": 5, "output_length": 1, "session_id": "s"}\n'


@pytest.mark.parametrize(
    ("session", "delay", "field", "message"),
    [
        ('"s"', '"250"', "delay", 'expected a number of milliseconds of at least 0, found "250"'),
        ('"s"', "true", "delay", "expected a number of milliseconds of at least 0, found true"),
        ('"s"', "-1", "delay", "expected a number of milliseconds of at least 0, found -1"),
        ('"s"', "[5]", "delay", "found [5]"),
        ('"s"', "NaN", "delay", "found NaN"),
        ('"s"', "9007199254741", "delay", "9007199254741 ms is more than 2^53-1 us (R6)"),
        ('"s"', "1e300", "delay", "1e+300 ms is more than 2^53-1 us (R6)"),
        ("1.5", "0", "session_id", "or a non-negative integer, found 1.5"),
        ("true", "0", "session_id", "found true"),
        ('["s"]', "0", "session_id", 'found ["s"]'),
        ('"a b"', "0", "session_id", 'found "a b"'),
        ('""', "0", "session_id", 'found ""'),
        ('"' + "x" * 129 + '"', "0", "session_id", "1 to 128 printable ASCII characters"),
        ("-3", "0", "session_id", "found -3"),
    ],
)
def test_r65_bad_session_fields_exit_2_naming_file_and_line(
    tmp_path: Path, session: str, delay: str, field: str, message: str
) -> None:
    trace = tmp_path / "trace"
    trace.write_text(
        MOONCAKE + SESSION_START + SESSION_TURN.replace("SID", session).replace("DELAY", delay)
    )
    output = tmp_path / "workload.json"
    result = run_import("mooncake", trace, "-o", output)
    assert result.returncode == 2
    assert f"{trace}:5: field {field!r}: " in result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not output.exists()


@pytest.mark.parametrize(
    ("delay", "think_time_us"),
    [
        ("9007199254740", 9_007_199_254_740_000),  # the largest whole number of ms that fits
        ("4503.003", 4_503_003),  # the decimal written, not the binary64 just below it
        ("0.0015", 1),  # rounded down to a whole microsecond
        ("null", None),  # as if absent: the turn follows its predecessor's answer at once
    ],
)
def test_r65_delays_become_whole_microseconds(
    tmp_path: Path, delay: str, think_time_us: int | None
) -> None:
    assert Fraction(4503.003) * 1000 < 4_503_003
    text = SESSION_START + SESSION_TURN.replace("SID", '"s"').replace("DELAY", delay)
    requests = imported(tmp_path, "mooncake", text)
    assert requests[1].get("think_time_us") == think_time_us


# --- weka agentic session files ------------------------------------------------------------


def _weka(requests: list[dict[str, Any]], block_size: int = 64) -> str:
    return json.dumps({"id": "x", "block_size": block_size, "requests": requests})


def _turn(t: float, prompt: int, output: int, hashes: list[int], think: float) -> dict[str, Any]:
    return {
        "t": t,
        "type": "n",
        "in": prompt,
        "out": output,
        "hash_ids": hashes,
        "think_time": think,
    }


WEKA_A = _weka(
    [
        _turn(0.0, 130, 5, [1, 2], 0.0),
        {
            "t": 3.5,
            "type": "subagent",
            "agent_id": "agent_001",
            "requests": [_turn(0.0, 70, 2, [9], 0.0), _turn(1.0, 80, 2, [9], 0.25)],
        },
        _turn(4.0, 200, 7, [1, 2, 3], 2.0005),
    ]
)
WEKA_B = _weka([{**_turn(0.0, 64, 1, [1], 0.0), "type": "s"}, _turn(9.0, 64, 1, [1], 1)])


def test_weka_files_become_sessions_with_think_times(tmp_path: Path) -> None:
    """Each file is a session starting --stagger after the one before (b at 10 s); a later turn
    gets turn 0's arrival and think_time_us = think_time * 10^6 (2.0005 s is 2,000,500 us);
    the sub-agent is a session of its own, its turn 0 at its spawn (3.5 s); file i's hashes
    are moved to i * 2^32 + h, so a's hash 1 and b's hash 1 stay different blocks."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(WEKA_A)
    b.write_text(WEKA_B)
    output = tmp_path / "workload.json"
    result = run_import("weka", a, b, "-o", output, "--stagger", "10")
    assert result.returncode == 0, result.stderr
    assert f"{output}: 6 requests, 3 sessions" in result.stdout
    document = servesim.read_document(output, "workload").value
    assert (document["schema_version"], document["prefix_hash_block_tokens"]) == ("1.2", 64)
    assert [s["id"] for s in document["sessions"]] == [
        "weka-a",
        "weka-a-agent_001",
        "weka-b",
    ]
    shown = [
        (r["id"], r["arrival_us"], r["session"], r.get("think_time_us"), r["prefix_hashes"])
        for r in document["requests"]
    ]
    assert shown == [
        ("weka-a-R0", 0, "weka-a", None, [1, 2]),
        ("weka-a-agent_001-R0", 3_500_000, "weka-a-agent_001", None, [9]),
        ("weka-a-agent_001-R1", 3_500_000, "weka-a-agent_001", 250_000, [9]),
        ("weka-a-R2", 0, "weka-a", 2_000_500, [1, 2, 3]),
        ("weka-b-R0", 10_000_000, "weka-b", None, [2**32 + 1]),
        ("weka-b-R1", 10_000_000, "weka-b", 1_000_000, [2**32 + 1]),
    ]
    plain = imported_document(tmp_path, "weka", WEKA_A, "--no-prefix-hashes")
    assert "prefix_hash_block_tokens" not in plain
    assert all("prefix_hashes" not in request for request in plain["requests"])


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (WEKA_A.replace('"think_time": 2.0005', '"think_time": "2"'), "/requests/2/think_time"),
        (WEKA_A.replace('"in": 200', '"in": -1'), "/requests/2/in"),
        (WEKA_A.replace("[1, 2, 3]", f"[1, {2**32}]"), "/requests/2/hash_ids/1"),
        (WEKA_A.replace('"agent_id": "agent_001"', '"agent_id": 7'), "/requests/1/agent_id"),
        (WEKA_A.replace('"think_time": 0.25', '"think_time": 1e300'), "/requests/1/requests/1"),
        (_weka([]), "/requests"),
        ("[]", "(document root)"),
    ],
)
def test_a_malformed_weka_file_exits_2_naming_its_pointer(
    tmp_path: Path, text: str, where: str
) -> None:
    trace = tmp_path / "a.json"
    trace.write_text(text)
    output = tmp_path / "workload.json"
    result = run_import("weka", trace, "-o", output)
    assert result.returncode == 2
    assert f"{trace}: at {where}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not output.exists()


def test_weka_files_must_agree_and_be_named_once(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(WEKA_A)
    b.write_text(_weka([_turn(0.0, 64, 1, [1], 0.0)], block_size=16))
    result = run_import("weka", a, b, "-o", tmp_path / "w.json")
    assert result.returncode == 2
    assert f"{b}: at /block_size: expected 64, the block size of {a}" in result.stderr
    result = run_import("weka", a, a, "-o", tmp_path / "w.json")
    assert result.returncode == 2
    assert "makes the session id 'weka-a' a second time" in result.stderr
    assert not (tmp_path / "w.json").exists()


@pytest.mark.parametrize(
    ("source", "arguments", "message"),
    [
        ("weka", ("--hash-block-tokens", "64"), "weka files give their block_size"),
        ("mooncake", ("--stagger", "1"), "--stagger: only weka files are separate sessions"),
        ("mooncake", ("EXTRA",), "mooncake reads one trace file"),
    ],
)
def test_weka_options_are_usage_errors_elsewhere(
    tmp_path: Path, source: str, arguments: tuple[str, ...], message: str
) -> None:
    trace = tmp_path / "trace"
    trace.write_text(WEKA_A if source == "weka" else MOONCAKE)
    files = [trace, trace] if arguments == ("EXTRA",) else [trace]
    options = [] if arguments == ("EXTRA",) else list(arguments)
    result = run_import(source, *files, "-o", tmp_path / "w.json", *options)
    assert result.returncode == 2
    assert message in result.stderr


def test_the_real_weka_sessions_import_and_validate(tmp_path: Path) -> None:
    files = sorted((TRACES / "weka_agentic_sessions").glob("trace_*.json"))
    if not files:
        pytest.fail(f"no weka_agentic_sessions/trace_*.json in {TRACES}")
    output = tmp_path / "workload.json"
    result = run_import("weka", *files, "-o", output, "--stagger", "60")
    assert result.returncode == 0, result.stderr
    document = servesim.read_document(output, "workload").value
    # one session a file and one a sub-agent (the shipped ones: 13 files, trace_0010's 4)
    subagents = sum(
        entry.get("type") == "subagent"
        for path in files
        for entry in json.loads(path.read_bytes())["requests"]
    )
    assert len(document["sessions"]) == len(files) + subagents
    assert len({request["session"] for request in document["requests"]}) == len(files) + subagents


def _mooncake_lines(*lines: tuple[int, int, list[int]]) -> str:
    """Mooncake lines ``(input_length, output_length, hash_ids)``, a second apart."""
    return "".join(
        json.dumps(
            {"timestamp": 1000 * i, "input_length": p, "output_length": o, "hash_ids": hashes}
        )
        + "\n"
        for i, (p, o, hashes) in enumerate(lines)
    )


def _sessions(document: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(r["id"].removeprefix("mooncake-"), r.get("session")) for r in document["requests"]]


#: With H = 4 (``--hash-block-tokens 4``): L3's covering predecessors are L1 (3 shared blocks)
#: and L2 (2): the latest, L2, not the longest; L5 does not cover itself in L6 (8 < 8 + 8), so
#: L6 takes L4; L7 has one full block (never a predecessor), so L8 has none; L9's third hash
#: is a partial block's, which L10 need not share.
INFERRED = _mooncake_lines(
    (12, 2, [10, 11, 12]),
    (8, 1, [10, 11]),
    (20, 1, [10, 11, 12, 13, 14]),
    (8, 2, [20, 21]),
    (8, 8, [20, 21]),
    (15, 1, [20, 21, 22, 23]),
    (4, 1, [30]),
    (12, 1, [30, 31, 32]),
    (10, 1, [40, 41, 42]),
    (16, 1, [40, 41, 43, 44]),
)


def test_r142_infer_sessions_links_the_latest_covering_predecessor(tmp_path: Path) -> None:
    """R142: a line's predecessor is the latest earlier line whose full hashed blocks' hashes
    (at least 2) begin the line's and whose prompt and answer its prompt can hold; linked lines
    form sessions s0, s1, ... (in the order of their first line), each turn keeping its
    timestamp and having no think time; the workload is 1.3 with session_prompts_extend."""
    document = imported_document(
        tmp_path, "mooncake", INFERRED, "--infer-sessions", "--hash-block-tokens", "4"
    )
    assert document["schema_version"] == "1.3"
    assert document["session_prompts_extend"] is True
    assert document["sessions"] == [{"id": "s0"}, {"id": "s1"}, {"id": "s2"}]
    assert _sessions(document) == [
        ("L1", None),
        ("L2", "s0"),
        ("L3", "s0"),
        ("L4", "s1"),
        ("L5", None),
        ("L6", "s1"),
        ("L7", None),
        ("L8", None),
        ("L9", "s2"),
        ("L10", "s2"),
    ]
    assert [r["arrival_us"] for r in document["requests"]] == [i * 1_000_000 for i in range(10)]
    assert all("think_time_us" not in r for r in document["requests"])
    assert document["requests"][2]["prefix_hashes"] == [10, 11, 12, 13, 14]


def test_r142_a_predecessor_keeps_only_its_first_successor(tmp_path: Path) -> None:
    """R142: L2 and L3 both have L1 as their predecessor: only L2, the first, is linked; L3
    starts a session of its own when L4 links to it; L5 follows L2 (its latest predecessor),
    and L6, whose predecessor is L2 too, stays alone."""
    trace = _mooncake_lines(
        (8, 1, [50, 51]),
        (12, 1, [50, 51, 52]),
        (12, 1, [50, 51, 53]),
        (16, 1, [50, 51, 53, 54]),
        (20, 1, [50, 51, 52, 55, 56]),
        (20, 1, [50, 51, 52, 57, 58]),
    )
    document = imported_document(
        tmp_path, "mooncake", trace, "--infer-sessions", "--hash-block-tokens", "4"
    )
    assert _sessions(document) == [
        ("L1", "s0"),
        ("L2", "s0"),
        ("L3", "s1"),
        ("L4", "s1"),
        ("L5", "s0"),
        ("L6", None),
    ]
    assert document["sessions"] == [{"id": "s0"}, {"id": "s1"}]


@pytest.mark.parametrize("options", [(), ("--limit", "1"), ("--session-prompts-extend",)])
def test_r142_infer_sessions_is_refused_with_session_ids(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    """R142: a trace that names its sessions is refused (exit 2), even when the line with a
    session_id is past --limit; the message names the file, the line and the field, and
    nothing is written."""
    trace = tmp_path / "trace"
    trace.write_text(MOONCAKE + SESSION_START)
    output = tmp_path / "workload.json"
    result = run_import("mooncake", trace, "-o", output, "--infer-sessions", *options)
    assert result.returncode == 2
    assert f"{trace}:4: field 'session_id': the trace names its sessions" in result.stderr
    assert "--infer-sessions is for a trace without session_id" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert not output.exists()


def test_r142_session_prompts_extend_marks_a_session_trace(tmp_path: Path) -> None:
    """--session-prompts-extend on a trace with session_id: R65's import, as a workload 1.3
    with session_prompts_extend: true, and nothing else changed."""
    plain = imported_document(tmp_path, "mooncake", MOONCAKE_SESSIONS)
    extended = imported_document(
        tmp_path, "mooncake", MOONCAKE_SESSIONS, "--session-prompts-extend"
    )
    assert extended.pop("schema_version") == "1.3"
    assert extended.pop("session_prompts_extend") is True
    assert plain.pop("schema_version") == "1.2"
    assert extended == plain


def test_r142_session_prompts_extend_without_sessions_writes_nothing_and_warns(
    tmp_path: Path,
) -> None:
    """On requests without sessions the member would change nothing (R125): the import is
    R65's, byte for byte, and a warning on standard error points to --infer-sessions."""
    trace = tmp_path / "trace"
    trace.write_text(MOONCAKE)
    outputs = []
    for options in ((), ("--session-prompts-extend",)):
        output = tmp_path / f"workload{len(options)}.json"
        result = run_import("mooncake", trace, "-o", output, *options)
        assert result.returncode == 0, result.stderr
        outputs.append(output.read_bytes())
        warned = "--session-prompts-extend writes nothing (--infer-sessions" in result.stderr
        assert warned == bool(options)
    assert outputs[0] == outputs[1]
    assert b'"schema_version": "1.1"' in outputs[0]


@pytest.mark.parametrize(
    ("source", "option", "extra", "message"),
    [
        ("azure", "--infer-sessions", (), "only for mooncake traces"),
        ("azure", "--session-prompts-extend", (), "only for mooncake traces"),
        ("weka", "--session-prompts-extend", (), "only for mooncake traces"),
        ("mooncake", "--infer-sessions", ("--no-prefix-hashes",), "--no-prefix-hashes"),
        ("mooncake", "--session-prompts-extend", ("--no-prefix-hashes",), "--no-prefix-hashes"),
    ],
)
def test_r142_options_are_usage_errors_elsewhere(
    tmp_path: Path, source: str, option: str, extra: tuple[str, ...], message: str
) -> None:
    trace = tmp_path / "trace"
    trace.write_text(MOONCAKE)
    output = tmp_path / "workload.json"
    result = run_import(source, trace, "-o", output, option, *extra)
    assert result.returncode == 2
    assert f"argument {option}: " in result.stderr
    assert message in result.stderr
    assert not output.exists()


def test_r142_help_states_the_heuristic_and_its_limits() -> None:
    result = run_import("--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for words in (
        "the latest earlier line whose full hashed blocks' hashes",
        "floor(input_length / H) hash_ids, at least 2 of them",
        "input_length + output_length is at most the line's input_length",
        "a predecessor keeps only its first successor",
        "gets no think time",
        "a recorded gap includes the predecessor's service time",
        "refused on one with it",
    ):
        assert words in text


def test_r142_the_real_trace_s_inferred_turns_continue(tmp_path: Path) -> None:
    """Every inferred pair of the shared Mooncake trace is one R125 continues: the later
    turn's hashes begin with at least 2 full hashed blocks of the earlier one's, and its
    prompt holds the earlier prompt and answer; a turn has the arrival its line recorded."""
    trace = real_trace("mooncake/conversation_trace.jsonl")
    output = tmp_path / "workload.json"
    result = run_import("mooncake", trace, "-o", output, "--infer-sessions")
    assert result.returncode == 0, result.stderr
    document = servesim.read_document(output, "workload").value
    plain = [json.loads(line) for line in trace.read_text().splitlines()]
    turns: dict[str, list[dict[str, Any]]] = {}
    for request in document["requests"]:
        if "session" in request:
            turns.setdefault(request["session"], []).append(request)
    assert len(turns) == len(document["sessions"]) > 0
    assert all(len(session) >= 2 for session in turns.values())
    for session in turns.values():
        for before, after in itertools.pairwise(session):
            full = before["prompt_tokens"] // 512
            assert full >= 2
            assert after["prefix_hashes"][:full] == before["prefix_hashes"][:full]
            total = before["prompt_tokens"] + before["max_output_tokens"]
            assert after["prompt_tokens"] >= total
    first_ms = plain[0]["timestamp"]
    for request in document["requests"]:
        line = plain[int(request["id"].removeprefix("mooncake-L")) - 1]
        assert request["arrival_us"] == (line["timestamp"] - first_ms) * 1000
    sessions, linked = len(turns), sum(map(len, turns.values()))
    assert f"{len(plain)} requests, {sessions} sessions inferred ({linked} turns)" in (
        result.stdout
    )
