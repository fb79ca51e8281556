"""The plain loop's section 11 (KV cache) against numbers derived by hand, not by the reference.

``conformance/examples/independent/kv-examples/`` holds five small cases (a prefix hit, LRU
eviction, three preemptions); their README derives every number with pencil and each
``expected.json`` maps report pointers to those numbers. The other tests hold the plain loop to
R4's and R10's new checks and to R53 (without a cache, report 3.0 is report 2.0 plus the
migration's constants). The plain loop writes the current report (5.0) unless asked for another.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest

from servesim.contract.schemas import WRITTEN_REPORT_VERSIONS
from servesim_conformance.runner import REPORT_NAME, replay_arguments
from tests.helpers import REPO, load_module

INDEPENDENT = REPO / "conformance" / "examples" / "independent"
EXAMPLES = INDEPENDENT / "kv-examples"
PLAIN = load_module("servesim_independent_kv", INDEPENDENT / "servesim_independent.py")
CASES = sorted(p.name for p in EXAMPLES.iterdir() if (p / "expected.json").is_file())


def run_plain(folder: Path, *options: str) -> tuple[int, str, dict[str, Any] | None]:
    """Exit code, standard error and report of the plain loop on a case folder."""
    output = folder / REPORT_NAME
    arguments = ["replay", *replay_arguments(folder, trace=False), *options]
    error = io.StringIO()
    with contextlib.redirect_stderr(error):
        code = PLAIN.main(arguments)
    report = json.loads(output.read_text()) if output.exists() else None
    return code, error.getvalue(), report


def at_pointer(document: Any, pointer: str) -> Any:
    for part in pointer.split("/")[1:]:
        document = document[int(part)] if isinstance(document, list) else document[part]
    return document


def copy_case(name: str, folder: Path) -> dict[str, Any]:
    documents = {}
    for file in ("scenario.json", "workload.json", "timing-profile.json"):
        documents[file] = json.loads((EXAMPLES / name / file).read_text())
        (folder / file).write_text(json.dumps(documents[file]))
    return documents


def write(folder: Path, documents: dict[str, Any]) -> None:
    for file, document in documents.items():
        (folder / file).write_text(json.dumps(document))


@pytest.mark.parametrize("version", ["10.0", "3.0"])
@pytest.mark.parametrize("name", CASES)
def test_plain_loop_gives_the_hand_derived_numbers(name: str, version: str, tmp_path: Path) -> None:
    """In the current report (the default) and in 3.0, the first with section 11's members."""
    copy_case(name, tmp_path)
    options = () if version == "10.0" else ("--report-version", version)
    code, error, report = run_plain(tmp_path, "--trace", *options)
    assert (code, error) == (0, "")
    assert report is not None
    assert report["schema_version"] == version
    expected = json.loads((EXAMPLES / name / "expected.json").read_text())
    for pointer, value in expected.items():
        if version == "10.0":
            value = with_style_members(value)
        assert at_pointer(report, pointer) == value, pointer


def with_style_members(value: Any) -> Any:
    """R96: a cache object of the examples (written for report 3.0) as report 7.0 and later write
    it for the vLLM style; R141: the summary's cache as report 10.0 (the default) writes it."""
    if isinstance(value, dict) and "evictions" in value:
        extra: dict[str, Any] = {"retractions": 0}
        if "peak_blocks_in_use" in value:  # a worker's, not the summary's
            extra["peak_reserved_blocks"] = None
        else:  # the summary's, with R140's members for a fleet without a host pool (R141)
            extra["host_reused_prompt_tokens"] = 0
            extra["host_reuse_ratio"] = None if value["prefix_reuse_ratio"] is None else 0
            extra["gpu_reuse_ratio"] = value["prefix_reuse_ratio"]
            extra["host"] = None
        return {**value, **extra}
    return value


def test_the_cases_cover_reuse_eviction_and_preemption() -> None:
    assert CASES == [
        "lru-eviction",
        "preempt-admits-nobody",
        "preempt-latest-victim",
        "preempt-recompute",
        "reuse-hit",
    ]


def test_a_request_over_the_whole_cache_is_rejected_with_the_fifth_reason(tmp_path: Path) -> None:
    """R10 rule 5: prompt 10 + output 7 > 16 blocks * 1 token; 16 tokens exactly still fit."""
    documents = copy_case("reuse-hit", tmp_path)
    documents["scenario.json"]["kv_cache"].update(blocks=4, block_tokens=4)
    requests = documents["workload.json"]["requests"]
    requests[0]["max_output_tokens"] = 7
    requests[1]["max_output_tokens"] = 6
    write(tmp_path, documents)
    code, _, report = run_plain(tmp_path)
    assert code == 0
    assert report is not None
    first, second = report["requests"][:2]
    assert (first["outcome"], first["reject_reason"]) == ("rejected", "exceeds_kv_cache")
    assert second["outcome"] == "completed"
    assert report["summary"]["rejected_by_reason"]["exceeds_kv_cache"] == 1
    assert first["reused_prompt_tokens"] == first["preemptions"] == 0


@pytest.mark.parametrize(
    ("edit", "file", "pointer"),
    [
        (
            lambda d: d["workload.json"].pop("prefix_hash_block_tokens"),
            "workload.json",
            "/requests/0/prefix_hashes",
        ),
        (
            lambda d: d["workload.json"]["requests"][2]["prefix_hashes"].append(9),
            "workload.json",
            "/requests/2/prefix_hashes",
        ),
        (
            lambda d: d["workload.json"].update(prefix_hash_block_tokens=6),
            "workload.json",
            "/prefix_hash_block_tokens",
        ),
        (lambda d: d["scenario.json"].update(schema_version="1.0"), "scenario.json", "/kv_cache"),
        (
            lambda d: d["scenario.json"]["kv_cache"].update(blocks=0),
            "scenario.json",
            "/kv_cache/blocks",
        ),
        (
            lambda d: d["scenario.json"]["kv_cache"].pop("prefix_caching"),
            "scenario.json",
            "/kv_cache",
        ),
    ],
    ids=[
        "hashes-without-H",
        "too-many-hashes",
        "H-not-multiple-of-B",
        "cache-in-1.0",
        "zero-blocks",
        "missing-prefix-caching",
    ],
)
def test_bad_cache_members_exit_2_naming_file_and_pointer(
    edit: Any, file: str, pointer: str, tmp_path: Path
) -> None:
    """R4, R5, R53: exit 2, nothing written, the file and the JSON pointer on standard error."""
    documents = copy_case("reuse-hit", tmp_path)
    edit(documents)
    write(tmp_path, documents)
    code, error, report = run_plain(tmp_path)
    assert code == 2
    assert report is None
    assert f"{tmp_path / file}: {pointer}: expected" in error


def test_report_2_0_mode_reads_no_1_1_input(tmp_path: Path) -> None:
    copy_case("reuse-hit", tmp_path)
    code, error, report = run_plain(tmp_path, "--report-version", "2.0")
    assert (code, report) == (2, None)
    assert "/schema_version: expected one of the versions this implementation reads, 1.0" in error


def test_without_a_cache_report_3_0_is_report_2_0_with_r53_s_constants(tmp_path: Path) -> None:
    """R53 by the plain loop itself: the same run written at 2.0 and 3.0, with caching
    fields stripped (scenario and workload 1.0), differ by exactly the migration's members."""
    documents = copy_case("preempt-recompute", tmp_path)
    documents["scenario.json"]["schema_version"] = "1.0"
    del documents["scenario.json"]["kv_cache"]
    documents["workload.json"]["schema_version"] = "1.0"
    del documents["workload.json"]["prefix_hash_block_tokens"]
    for request in documents["workload.json"]["requests"]:
        del request["prefix_hashes"]
    write(tmp_path, documents)
    code, _, old = run_plain(tmp_path, "--trace", "--report-version", "2.0")
    assert code == 0
    assert old is not None
    code, _, new = run_plain(tmp_path, "--trace", "--report-version", "3.0")
    assert code == 0
    migrated = copy.deepcopy(old)
    migrated["schema_version"] = "3.0"
    for request in migrated["requests"]:
        request.update(reused_prompt_tokens=0, preemptions=0)
    migrated["summary"]["rejected_by_reason"]["exceeds_kv_cache"] = 0
    migrated["summary"]["kv_cache"] = None
    for worker in migrated["workers"]:
        worker["kv_cache"] = None
    for entry in migrated["trace"]:
        entry.update(kv_blocks_in_use=None, preempted=[])
    assert new == migrated
    assert old["schema_version"] == "2.0"


def test_prefix_caching_off_makes_hashes_change_nothing(tmp_path: Path) -> None:
    """R47: with prefix caching off no block is identified, so the hashes are inert."""
    documents = copy_case("reuse-hit", tmp_path)
    documents["scenario.json"]["kv_cache"]["prefix_caching"] = False
    write(tmp_path, documents)
    code, _, with_hashes = run_plain(tmp_path, "--trace")
    for request in documents["workload.json"]["requests"]:
        request["prefix_hashes"] = [7] * len(request["prefix_hashes"])
    write(tmp_path, documents)
    code_2, _, other_hashes = run_plain(tmp_path, "--trace")
    assert code == code_2 == 0
    assert with_hashes is not None
    assert other_hashes is not None
    assert with_hashes["summary"]["kv_cache"]["reused_prompt_tokens"] == 0
    del with_hashes["inputs"], other_hashes["inputs"]
    assert with_hashes == other_hashes


def test_by_default_the_plain_loop_writes_the_repository_s_current_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 30: without --report-version the plain loop writes, and its --describe declares,
    the report the reference writes (the newest of WRITTEN_REPORT_VERSIONS), with the inputs
    that report allows it to read (R38)."""
    current = WRITTEN_REPORT_VERSIONS[-1]
    assert PLAIN.main(["replay", "--describe"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert PLAIN.main(["replay", "--describe", "--report-version", current]) == 0
    assert default == json.loads(capsys.readouterr().out)
    assert default["schema_versions"]["report"] == [current]
    copy_case("reuse-hit", tmp_path)
    code, error, report = run_plain(tmp_path)
    assert (code, error) == (0, "")
    assert report is not None
    assert report["schema_version"] == current
