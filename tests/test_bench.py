"""benchmarks/bench.py finds the real traces where it is told, and says so when it cannot.

No figure is checked here (speed is measured by the benchmark, never asserted in a test); only
that a run which measured nothing says so plainly in its last line.
"""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from servesim import load_document, replay_documents
from tests.helpers import REPO, load_module, timing_doc

BENCH = REPO / "benchmarks" / "bench.py"


def _bench(*arguments: str, **environment: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    return subprocess.run(
        [sys.executable, str(BENCH), "--short", "--no-dynamo", *arguments],
        capture_output=True,
        text=True,
        check=False,
        env={**env, **environment},
    )


def _last_line(output: str) -> str:
    lines = output.strip().splitlines()
    return lines[-1] if lines else ""


def test_without_traces_the_last_line_says_nothing_was_measured(tmp_path: Path) -> None:
    result = _bench(SERVESIM_TRACES=str(tmp_path))
    assert result.returncode == 0, result.stderr
    last = _last_line(result.stdout)
    assert last.startswith("NOTHING MEASURED")
    assert str(tmp_path) in last  # the folder it looked in, from SERVESIM_TRACES
    assert "SERVESIM_TRACES" in last
    assert str(tmp_path) in result.stderr
    assert "mooncake" in result.stderr


def test_the_traces_option_overrides_the_environment(tmp_path: Path) -> None:
    given = tmp_path / "given"
    given.mkdir()
    result = _bench("--traces", str(given), SERVESIM_TRACES=str(tmp_path / "elsewhere"))
    assert result.returncode == 0, result.stderr
    assert f"no real traces in {given} " in _last_line(result.stdout)


def test_under_ci_missing_traces_fail_and_still_say_so(tmp_path: Path) -> None:
    result = _bench(SERVESIM_TRACES=str(tmp_path), CI="true")
    assert result.returncode == 2
    assert _last_line(result.stdout).startswith("NOTHING MEASURED")


@pytest.mark.parametrize("variable", ["CI", "SERVESIM_TRACES"])
def test_tox_bench_passes_the_variable_through(variable: str) -> None:
    tox = configparser.ConfigParser()
    tox.read(REPO / "tox.ini")
    assert variable in tox["testenv:bench"]["passenv"].split()


bench_kv = load_module("bench_kv", REPO / "benchmarks" / "bench_kv.py")
bench_scenario = load_module("bench", BENCH).scenario


def _request(prompt: int, output: int) -> dict[str, Any]:
    return {"id": "r", "arrival_us": 0, "prompt_tokens": prompt, "max_output_tokens": output}


def test_no_eviction_cache_holds_the_largest_share_round_robin_can_route() -> None:
    # blocks of 64 tokens: 2, 1, 3, 1 and 1 blocks; 2 workers get at most 3 requests each
    requests = [_request(64, 1), _request(1, 1), _request(128, 64), _request(63, 1), _request(1, 0)]
    assert bench_kv.no_eviction_blocks(requests, 2) == 3 + 2 + 1
    assert bench_kv.no_eviction_blocks(requests, 5) == 3


def test_the_cached_scenario_is_a_valid_scenario_1_1() -> None:
    scenario = bench_kv.with_cache(bench_scenario(16), 4096)
    document = load_document(json.dumps(scenario).encode(), "s.json", "scenario")
    assert document.version == "1.1"
    assert scenario["kv_cache"] == {"blocks": 4096, "block_tokens": 64, "prefix_caching": True}


def test_the_section_compares_each_cache_with_the_replay_without_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seen: list[dict[str, Any]] = []

    def replay(tag: str, scenario: dict[str, Any]) -> dict[str, Any]:
        seen.append(scenario)
        wall = {"no-cache": 2.0, "kv-large": 3.0, "kv-small": 5.0}[tag]
        cpu = {"no-cache": 1.0, "kv-large": 1.25, "kv-small": 4.0}[tag]
        kv = {"prefix_reuse_ratio": 0.25, "reused_prompt_tokens": 9, "preemptions": 7}
        return {
            "wall_s": wall,
            "cpu_s": cpu,
            "kv_cache": {**kv, "evictions": 0 if tag == "kv-large" else 11},
            "peak_blocks_in_use": 5,
            "rejected": 0,
            "ttft_p50_us": 1_500_000,
            "makespan_us": 60_000_000,
        }

    workload = {"requests": [_request(600, 10)] * 3}
    bench_kv.kv_cache_section(workload, bench_scenario(16), replay, lambda label, _: label)
    printed = capsys.readouterr().out
    assert [scenario.get("kv_cache", {}).get("blocks") for scenario in seen] == [
        None,
        bench_kv.no_eviction_blocks(workload["requests"], 16),
        bench_kv.SMALL_CACHE_BLOCKS,
    ]
    assert "(a) no eviction / no cache: wall time 1.50x, CPU time 1.25x" in printed
    assert "(b) pressure / no cache: wall time 2.50x, CPU time 4.00x" in printed
    assert "preemptions 7, evictions 11" in printed


def _cache_counters(workload: dict[str, Any], blocks: int) -> dict[str, Any]:
    """The summary's ``kv_cache`` of the reference's replay on bench.py's 16 workers."""
    scenario = bench_kv.with_cache(bench_scenario(16), blocks)
    documents = [
        load_document(json.dumps(value).encode(), f"{kind}.json", kind)
        for kind, value in (
            ("scenario", scenario),
            ("workload", workload),
            ("timing_profile", timing_doc()),
        )
    ]
    counters: dict[str, Any] = json.loads(replay_documents(*documents))["summary"]["kv_cache"]
    return counters


def test_the_no_eviction_cache_evicts_nothing_where_a_smaller_one_does() -> None:
    # 96 requests at once (6 a worker), each with a private prefix of 3 trace blocks of 512
    # tokens and a shared first block, so that every worker keeps registering blocks
    requests = [
        {
            **_request(1500 + 37 * index, 20 + index),
            "id": f"r{index}",
            "arrival_us": 1000 * index,
            "prefix_hashes": [0, 3 * index + 1, 3 * index + 2],
        }
        for index in range(96)
    ]
    workload = {
        "document": "workload",
        "schema_version": "1.1",
        "prefix_hash_block_tokens": 512,
        "requests": requests,
    }
    blocks = bench_kv.no_eviction_blocks(requests, 16)
    counters = _cache_counters(workload, blocks)
    assert (counters["evictions"], counters["preemptions"]) == (0, 0)
    assert counters["reused_prompt_tokens"] > 0
    assert _cache_counters(workload, blocks // 4)["evictions"] > 0
