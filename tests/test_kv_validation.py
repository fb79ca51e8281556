"""R2 to R5 for the KV cache's inputs (SPEC.md section 11): scenario and workload 1.1 are read
into the model, and the new R4 constraints are reported with file, JSON pointer and what was
expected, with exit code 2 and nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servesim.contract.documents import load_document
from servesim.contract.errors import InvalidInput
from servesim.contract.model import KvCache
from servesim.contract.scenario import build_scenario
from servesim.contract.workload import build_workload
from servesim.replay import replay
from tests.helpers import (
    REPO,
    replay_args,
    run_servesim,
    scenario_doc,
    timing_doc,
    workload_doc,
    write_inputs,
)


def kv_scenario(block_tokens: int = 16, blocks: int = 64) -> dict[str, Any]:
    """A 1.1 scenario with a cache of ``blocks`` blocks of ``block_tokens`` tokens."""
    scenario = scenario_doc()
    scenario["schema_version"] = "1.1"
    scenario["kv_cache"] = {"blocks": blocks, "block_tokens": block_tokens, "prefix_caching": True}
    return scenario


def hashed_workload(
    hash_tokens: int | None = 32, hashes: list[int] | None = None, prompt_tokens: int = 40
) -> dict[str, Any]:
    """A 1.1 workload of one request of ``prompt_tokens`` with ``hashes`` (default [7, 8])."""
    workload = workload_doc(("a", 0, 4, 2), ("b", 10, prompt_tokens, 1))
    workload["schema_version"] = "1.1"
    if hash_tokens is not None:
        workload["prefix_hash_block_tokens"] = hash_tokens
    workload["requests"][1]["prefix_hashes"] = [7, 8] if hashes is None else hashes
    return workload


def _load(value: dict[str, Any], kind: str) -> Any:
    return load_document(json.dumps(value).encode(), f"{kind}.json", kind)


def _problems(value: dict[str, Any], kind: str) -> list[tuple[str, str, str]]:
    with pytest.raises(InvalidInput) as caught:
        _load(value, kind)
    return [(p.file, p.pointer, p.message) for p in caught.value.problems]


def _replay_rejected(tmp_path: Path, scenario: dict[str, Any], workload: dict[str, Any]) -> str:
    """Run ``servesim replay``; check exit 2, no report, no traceback; return standard error."""
    paths = write_inputs(tmp_path, scenario, workload, timing_doc())
    output = tmp_path / "report.json"
    result = run_servesim(*replay_args(paths, output))
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert not output.exists(), "no report may be written for invalid input"
    assert not list(tmp_path.glob(".report.json.*")), "no partial file is left"
    assert "Traceback" not in result.stderr
    return result.stderr


def test_r4_version_1_1_documents_are_read_into_the_model() -> None:
    scenario = build_scenario(_load(kv_scenario(block_tokens=16, blocks=64), "scenario").value)
    assert scenario.kv_cache == KvCache(blocks=64, block_tokens=16, prefix_caching=True)
    workload = build_workload(_load(hashed_workload(hash_tokens=32), "workload").value)
    assert workload.prefix_hash_block_tokens == 32
    assert workload.requests[1].prefix_hashes == (7, 8)
    assert workload.requests[0].prefix_hashes == ()
    assert build_scenario(_load(scenario_doc(), "scenario").value).kv_cache is None
    assert build_workload(_load(workload_doc(("a", 0, 1, 1)), "workload").value) == (
        build_workload(
            _load({**workload_doc(("a", 0, 1, 1)), "schema_version": "1.1"}, "workload").value
        )
    )


def test_r4_kv_cache_needs_scenario_1_1() -> None:
    scenario = kv_scenario()
    scenario["schema_version"] = "1.0"
    problems = _problems(scenario, "scenario")
    assert problems == [
        (
            "scenario.json",
            "/schema_version",
            'the document uses what version 1.1 added; expected "1.1", found "1.0"',
        )
    ]


def test_r4_prefix_hashes_need_workload_1_1() -> None:
    workload = hashed_workload()
    workload["schema_version"] = "1.0"
    [(_, where, message)] = _problems(workload, "workload")
    assert where == "/schema_version"
    assert 'expected "1.1"' in message


def test_r4_prefix_hashes_without_prefix_hash_block_tokens() -> None:
    [(file, where, message)] = _problems(hashed_workload(hash_tokens=None), "workload")
    assert (file, where) == ("workload.json", "/requests/1/prefix_hashes")
    assert "prefix_hash_block_tokens" in message
    assert "missing" in message


@pytest.mark.parametrize(
    ("prompt_tokens", "hashes", "most"),
    [(40, [1, 2, 3], 2), (32, [1, 2], 1), (1, [1, 2], 1)],
)
def test_r4_more_prefix_hashes_than_prompt_blocks(
    prompt_tokens: int, hashes: list[int], most: int
) -> None:
    workload = hashed_workload(hash_tokens=32, hashes=hashes, prompt_tokens=prompt_tokens)
    [(file, where, message)] = _problems(workload, "workload")
    assert (file, where) == ("workload.json", "/requests/1/prefix_hashes")
    assert f"expected at most {most}" in message


@pytest.mark.parametrize(
    ("prompt_tokens", "hashes"), [(40, [1, 2]), (32, [1]), (33, [1, 2]), (5, [])]
)
def test_r4_as_many_prefix_hashes_as_prompt_blocks_is_valid(
    prompt_tokens: int, hashes: list[int]
) -> None:
    _load(hashed_workload(hash_tokens=32, hashes=hashes, prompt_tokens=prompt_tokens), "workload")


@pytest.mark.parametrize(
    ("member", "value"),
    [("blocks", 0), ("block_tokens", 0), ("block_tokens", 2**20 + 1), ("prefix_caching", 1)],
)
def test_r4_kv_cache_schema_bounds(member: str, value: Any) -> None:
    scenario = kv_scenario()
    scenario["kv_cache"][member] = value
    assert [where for _, where, _ in _problems(scenario, "scenario")] == [f"/kv_cache/{member}"]


def test_r4_kv_cache_is_closed_and_complete() -> None:
    scenario = kv_scenario()
    del scenario["kv_cache"]["prefix_caching"]
    scenario["kv_cache"]["swap"] = True
    wheres = sorted(where for _, where, _ in _problems(scenario, "scenario"))
    assert wheres == ["/kv_cache", "/kv_cache/swap"]


def test_r4_prefix_hash_out_of_range() -> None:
    workload = hashed_workload(hashes=[2**53])
    assert [w for _, w, _ in _problems(workload, "workload")] == ["/requests/1/prefix_hashes/0"]


def test_r4_hash_block_tokens_not_a_multiple_of_block_tokens(tmp_path: Path) -> None:
    stderr = _replay_rejected(
        tmp_path, kv_scenario(block_tokens=16), hashed_workload(hash_tokens=24)
    )
    assert str(tmp_path / "workload.json") in stderr
    assert "at /prefix_hash_block_tokens:" in stderr
    assert "not a multiple of the scenario's kv_cache.block_tokens (16" in stderr


def test_r4_hash_block_tokens_checked_by_the_api_too(tmp_path: Path) -> None:
    paths = write_inputs(
        tmp_path, kv_scenario(block_tokens=16), hashed_workload(hash_tokens=24), timing_doc()
    )
    with pytest.raises(InvalidInput) as caught:
        replay(paths["scenario"], paths["workload"], paths["timing_profile"])
    [problem] = caught.value.problems
    assert (problem.file, problem.pointer) == (str(paths["workload"]), "/prefix_hash_block_tokens")


def test_r4_hash_block_tokens_without_kv_cache_need_no_multiple(tmp_path: Path) -> None:
    """Without kv_cache there is no block size to divide: the pair is valid (R47 applies only
    with a cache), and the replay runs."""
    paths = write_inputs(tmp_path, scenario_doc(), hashed_workload(hash_tokens=24), timing_doc())
    output = tmp_path / "report.json"
    result = run_servesim(*replay_args(paths, output))
    assert result.returncode == 0, result.stderr
    assert json.loads(output.read_text())["schema_version"] == "10.0"


def test_r4_validate_checks_a_scenario_and_a_workload_given_together() -> None:
    """R33: given exactly one scenario and one workload, ``servesim validate`` applies R4's
    rule across them (R47) as ``replay`` does, and names the workload's member."""
    case = REPO / "golden" / "invalid" / "prefix-hash-block-tokens-not-multiple-of-block-tokens"
    together = run_servesim("validate", case / "scenario.json", case / "workload.json")
    assert together.returncode == 2
    assert "workload.json: at /prefix_hash_block_tokens: 6 is not a multiple" in together.stderr
    assert "valid scenario 1.1" in together.stdout
    assert "valid workload" not in together.stdout
    alone = run_servesim("validate", case / "workload.json")
    assert alone.returncode == 0, alone.stderr
