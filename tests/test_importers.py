"""``servesim import``: Mooncake and Azure traces to workloads; malformed rows exit 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import servesim
from tests.helpers import run_servesim

MOONCAKE = (
    '{"timestamp": 1000, "input_length": 10, "output_length": 5, "hash_ids": [0]}\n'
    '{"timestamp": 1000, "input_length": 20, "output_length": 6, "hash_ids": [0, 1]}\n'
    '{"timestamp": 4500, "input_length": 30, "output_length": 7, "hash_ids": [2]}\n'
)
AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:46.6805919,10,1\n"
    "2023-11-16 18:15:50.9951690,396,109\n"
)


def run_import(*arguments: str | Path) -> subprocess.CompletedProcess[str]:
    return run_servesim("import", *arguments)


def imported(tmp_path: Path, source: str, text: str, *options: str) -> list[dict[str, object]]:
    trace = tmp_path / "trace"
    trace.write_text(text)
    output = tmp_path / "workload.json"
    result = run_import(source, trace, "-o", output, *options)
    assert result.returncode == 0, result.stderr
    servesim.read_document(output, "workload")
    requests: list[dict[str, object]] = json.loads(output.read_text())["requests"]
    return requests


def test_mooncake_milliseconds_become_microseconds_from_the_first_record(tmp_path: Path) -> None:
    requests = imported(tmp_path, "mooncake", MOONCAKE)
    assert requests == [
        {"id": "mooncake-L1", "arrival_us": 0, "prompt_tokens": 10, "max_output_tokens": 5},
        {"id": "mooncake-L2", "arrival_us": 0, "prompt_tokens": 20, "max_output_tokens": 6},
        {"id": "mooncake-L3", "arrival_us": 3_500_000, "prompt_tokens": 30, "max_output_tokens": 7},
    ]


def test_mooncake_says_it_drops_prefix_hashes(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(MOONCAKE)
    result = run_import("mooncake", trace, "-o", tmp_path / "w.json")
    assert "hash_ids were dropped" in result.stderr


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
    trace = Path(__file__).resolve().parents[2] / "shared" / "traces" / path
    if not trace.is_file():
        pytest.skip(f"the shared traces are not beside this checkout ({trace})")
    output = tmp_path / "workload.json"
    result = run_import(source, trace, "-o", output)
    assert result.returncode == 0, result.stderr
    assert len(servesim.read_document(output, "workload").value["requests"]) == count


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
