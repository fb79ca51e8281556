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
from hypothesis import given
from hypothesis import strategies as st

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


def test_by_default_the_traces_shipped_with_the_repository_are_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SERVESIM_TRACES", raising=False)
    bench = load_module("bench_default", BENCH)
    assert bench.TRACES == bench.SHIPPED_TRACES == REPO / "benchmarks" / "traces"
    assert sorted(bench.SOURCES) == ["azure", "mooncake"]
    assert all(path.is_file() for path in bench.SOURCES.values())


def test_missing_shipped_traces_fail_even_outside_ci(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default folder is part of every checkout: without it the benchmark fails loudly."""
    monkeypatch.delenv("SERVESIM_TRACES", raising=False)
    monkeypatch.delenv("CI", raising=False)
    bench = load_module("bench_broken", BENCH)
    monkeypatch.setattr(bench, "SHIPPED_TRACES", tmp_path)
    monkeypatch.setattr(bench, "TRACES", tmp_path)
    monkeypatch.setattr(sys, "argv", ["bench.py", "--short", "--no-dynamo"])
    assert bench.main() == 2
    last = _last_line(capsys.readouterr().out)
    assert last.startswith(f"NOTHING MEASURED: no real traces in {tmp_path} ")
    assert "broken checkout" in last


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


# --- state-aware routing (benchmarks/bench_routing.py, issue 11) --------------------------------

bench_routing = load_module("bench_routing", REPO / "benchmarks" / "bench_routing.py")


def _hashed(rid: str, arrival: int, prompt: int, hashes: list[int]) -> dict[str, Any]:
    return {**_request(prompt, 3), "id": rid, "arrival_us": arrival, "prefix_hashes": hashes}


def _brute_force_hits(requests: list[dict[str, Any]], block: int, hash_block: int) -> list[int]:
    """R47, R48 the slow way: a set of every identity ``(j, first j // k + 1 hashes)`` seen."""
    per_hash, seen, hits = hash_block // block, set(), []
    for request in sorted(requests, key=lambda r: r["arrival_us"]):
        hashes = request.get("prefix_hashes", [])
        count = min(request["prompt_tokens"] // block, per_hash * len(hashes))
        mine = [(j, tuple(hashes[: j // per_hash + 1])) for j in range(count)]
        hit = 0
        while hit < min(count, (request["prompt_tokens"] - 1) // block) and mine[hit] in seen:
            hit += 1
        hits.append(hit)
        seen.update(mine)
    return hits


def test_the_ceiling_hits_follow_r47_and_r48_by_hand() -> None:
    # blocks of 2 tokens, hashed blocks of 4 (k = 2)
    requests = [
        _hashed("a", 0, 8, [1, 2]),  # first: nothing before it
        _hashed("b", 5, 8, [1, 2]),  # all 4 blocks seen, R48 caps at (8 - 1) // 2 = 3
        _hashed("c", 5, 9, [1, 7, 8]),  # shares hash 1 only: blocks 0 and 1
        _hashed("d", 9, 3, [1]),  # 1 identified block (3 // 2), cap (3 - 1) // 2 = 1
        _hashed("e", 9, 4, []),  # no hashes, nothing identified
        _hashed("f", 9, 11, [1, 7, 8]),  # c's 4 blocks (9 // 2), then block 4 is new
    ]
    assert bench_routing.ceiling_hits(requests, block_tokens=2, hash_block_tokens=4) == [
        0, 3, 2, 1, 0, 4,
    ]  # fmt: skip


def test_a_partly_identified_hashed_block_caps_the_later_hit() -> None:
    # k = 4: the first request identifies 2 blocks of hash 5, the second would use 4
    requests = [_hashed("a", 0, 5, [5]), _hashed("b", 1, 9, [5, 6])]
    assert bench_routing.ceiling_hits(requests, block_tokens=2, hash_block_tokens=8) == [0, 2]
    # and then the cache knows all 4: a third request with the same prompt reuses them
    requests.append(_hashed("c", 2, 9, [5, 6]))
    assert bench_routing.ceiling_hits(requests, block_tokens=2, hash_block_tokens=8)[2] == 4


@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),
            st.integers(1, 24),
            st.lists(st.integers(0, 2), max_size=6),
        ),
        max_size=12,
    ),
    st.integers(1, 4),
    st.integers(1, 3),
)
def test_the_ceiling_hits_equal_the_brute_force_identity_set(
    drawn: list[tuple[int, int, list[int]]], block: int, per_hash: int
) -> None:
    requests = [
        _hashed(f"r{index}", arrival, prompt, hashes[: -(-prompt // (block * per_hash))])
        for index, (arrival, prompt, hashes) in enumerate(drawn)
    ]
    ordered = bench_routing.arrival_order(requests)
    hits = bench_routing.ceiling_hits(
        ordered, block_tokens=block, hash_block_tokens=block * per_hash
    )
    assert hits == _brute_force_hits(requests, block, block * per_hash)


def test_one_worker_serving_one_request_at_a_time_reaches_the_ceiling() -> None:
    # each request arrives after the one before completed, on one worker whose cache never
    # evicts: its hit at admission is everything computed before it, the ceiling exactly
    requests = [
        _hashed(f"r{index}", 1_000_000 * index, 64 * size + extra, hashes)
        for index, (size, extra, hashes) in enumerate(
            [(8, 5, [1]), (16, 0, [1, 2]), (16, 9, [1, 2, 3]), (8, 0, [4]), (20, 1, [1, 2, 3])]
        )
    ]
    workload = {
        "document": "workload",
        "schema_version": "1.1",
        "prefix_hash_block_tokens": 512,
        "requests": requests,
    }
    blocks = bench_routing.never_evicting_blocks(requests)
    scenario = bench_routing.routed_scenario(bench_scenario(1), blocks, {"policy": "round_robin"})
    scenario["schema_version"] = "1.1"  # round robin is 1.1 too; the reference reads both
    top = bench_routing.ceiling(
        workload, block_tokens=64, accepted=bench_routing.accepted_by(scenario)
    )
    documents = [
        load_document(json.dumps(value).encode(), f"{kind}.json", kind)
        for kind, value in (
            ("scenario", scenario),
            ("workload", workload),
            ("timing_profile", timing_doc()),
        )
    ]
    summary = json.loads(replay_documents(*documents))["summary"]
    assert summary["kv_cache"]["reused_prompt_tokens"] == top.reused_tokens > 0
    assert summary["prompt_tokens"] == top.prompt_tokens


def test_the_never_evicting_cache_holds_every_request_of_the_trace() -> None:
    requests = [_request(64, 1), _request(1, 1), _request(128, 64)]  # 2, 1 and 3 blocks of 64
    assert bench_routing.never_evicting_blocks(requests) == 6


def test_the_routed_scenarios_are_valid_scenarios_1_2() -> None:
    for routing in (
        {"policy": "round_robin"},
        {"policy": "least_loaded"},
        bench_routing.cache_aware_routing(None),
        *(bench_routing.cache_aware_routing(pair) for pair in bench_routing.WEIGHT_PAIRS),
    ):
        scenario = bench_routing.routed_scenario(bench_scenario(16), 4096, routing)
        document = load_document(json.dumps(scenario).encode(), "s.json", "scenario")
        assert document.version == "1.2"


def _router_run(reuse: float, spread: list[int], cpu: float) -> dict[str, Any]:
    return {
        "wall_s": 2 * cpu,
        "cpu_s": cpu,
        "kv_cache": {"prefix_reuse_ratio": reuse},
        "ttft_p50_us": 150_000,
        "ttft_p99_us": 2_500_000,
        "busy_us": spread,
    }


def test_the_section_prints_each_router_the_ceiling_and_the_targets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seen: list[dict[str, Any]] = []
    by_policy = {
        "round_robin": _router_run(0.10, [10, 10], 1.0),
        "least_loaded": _router_run(0.11, [10, 11], 1.1),
        "cache_aware": _router_run(0.20, [10, 30], 1.2),  # (1, 1): busy 1.5x the mean
    }

    def replay(tag: str, scenario: dict[str, Any]) -> dict[str, Any]:
        seen.append(scenario)
        routing = scenario["routing"]
        if routing.get("prefill_weight") == 4:  # meets reuse and balance
            return _router_run(0.30, [10, 12], 2.0)
        return by_policy[routing["policy"]]

    requests = [_hashed("a", 0, 640, [1, 2]), _hashed("b", 1, 640, [1, 2])]
    workload = {"prefix_hash_block_tokens": 512, "requests": requests}
    bench_routing.routing_section(workload, bench_scenario(16), replay)
    printed = capsys.readouterr().out
    # b reuses a's 8 blocks of hash 1 and 1 of hash 2 (10 blocks, R48 caps at 9) of 1,280 tokens
    assert "CEILING (one shared infinite cache, from the trace alone): reuse 0.4500" in printed
    assert all(s["kv_cache"]["blocks"] == 2 * 11 for s in seen)
    # 3 runs each of the main three, 1 of each other pair and seeded one, 2 more of the best
    assert len(seen) == 3 * 3 + len(bench_routing.WEIGHT_PAIRS) + 2 + 2
    assert "best cache-aware weights: cache_aware (4, 1)" in printed
    assert "of the ceiling (0.4050): 0.3000, 66.7% of it: MISSED" in printed
    assert "mean busy: 1.091x: MET" in printed
    assert "round robin: CPU 2.00x, wall 2.00x: MISSED" in printed


# --- closed loop and stop time (benchmarks/bench_sessions.py, issue 13) -----------------------

bench_sessions = load_module("bench_sessions", REPO / "benchmarks" / "bench_sessions.py")


def test_the_session_scenarios_are_valid_scenarios_1_3() -> None:
    requests = [{**_request(10, 2), "arrival_us": arrival} for arrival in (5, 9, 12)]
    assert bench_sessions.half_span(requests) == 5 + 3
    assert bench_sessions.half_span(requests[:1]) == 6  # still after the first arrival (R4)
    for scenario in (
        bench_sessions.closed_loop(bench_scenario(16), 64),
        bench_sessions.with_stop(bench_scenario(16), bench_sessions.half_span(requests)),
    ):
        document = load_document(json.dumps(scenario).encode(), "s.json", "scenario")
        assert document.version == "1.3"


def _mode_run(wall: float, memory: float, steps: int) -> dict[str, Any]:
    return {
        "wall_s": wall,
        "cpu_s": wall / 2,
        "peak_rss_mib": memory,
        "steps": steps,
        "makespan_us": 10 * steps,
        "output_tokens": 40,
        "ttft_p50_us": 1_000,
        "ttft_p99_us": 2_000,
        "busy_us": [steps],
        "completed": 3,
        "cut_off": 0,
    }


def test_the_section_compares_each_mode_with_the_open_loop_and_its_twin(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seen: list[tuple[str, bool]] = []
    at: list[list[int]] = []

    def replay(tag: str, scenario: dict[str, Any], keep_arrivals: bool) -> dict[str, Any]:
        seen.append((tag, keep_arrivals))
        wall = {"open": 2.0, "closed-64": 2.5, "closed-256": 4.0, "stop": 1.0}[tag]
        figures = _mode_run(wall, 100.0 if tag != "closed-256" else 160.0, len(tag))
        if "closed_loop" in scenario:
            assert scenario["closed_loop"]["max_in_flight"] == int(tag.split("-")[1])
            if keep_arrivals:
                figures["arrivals"] = [len(tag)] * 3
        if tag == "stop":
            assert scenario["stop_at_us"] == 0 + 50
        return figures

    def replay_at(tag: str, arrivals: list[int]) -> dict[str, Any]:
        at.append(arrivals)
        steps = len(tag.removesuffix("-arrivals"))
        return _mode_run(2.0, 100.0, steps if tag != "closed-256-arrivals" else steps + 1)

    workload = {"requests": [{**_request(10, 2), "arrival_us": a} for a in (0, 100)]}
    bench_sessions.sessions_section(
        workload, bench_scenario(16), replay, replay_at, lambda label, _: label
    )
    printed = capsys.readouterr().out
    repeats = bench_sessions.REPEATS
    assert [tag for tag, _ in seen] == [
        tag for tag in ("open", "closed-64", "closed-256", "stop") for _ in range(repeats)
    ]
    # the arrivals are read from one run of each closed loop only
    assert [tag for tag, keep in seen if keep] == ["closed-64", "closed-256"]
    assert at == [[9] * 3] * repeats + [[10] * 3] * repeats
    assert "closed loop, 64 in flight / open loop: wall time 1.25x" in printed
    assert "peak memory 1.00x (target <= 1.5x): MET" in printed
    assert "closed loop, 256 in flight / open loop: wall time 2.00x" in printed
    assert "peak memory 1.60x (target <= 1.5x): MISSED" in printed
    assert "open loop, stop at 0 s / open loop: wall time 0.50x" in printed
    assert "64 in flight / open loop at its arrivals: wall time 1.25x" in printed
    assert "same simulation: True" in printed
    assert "256 in flight / open loop at its arrivals: wall time 2.00x" in printed
    assert "same simulation: False" in printed


def test_a_closed_loop_replays_as_the_open_loop_at_its_arrivals() -> None:
    """The section's premise (R8, R60, R61): a closed loop's report, with each request's
    arrival as the workload's, replays in open loop to the same requests and workers."""
    requests = [
        {**_request(prompt, output), "id": f"r{index}", "arrival_us": 7 * index}
        for index, (prompt, output) in enumerate([(30, 5), (5, 9), (0, 3), (12, 1), (40, 4)] * 3)
    ]
    workload = {"document": "workload", "schema_version": "1.0", "requests": requests}
    scenario = bench_sessions.closed_loop(bench_scenario(2), 3)

    def replayed(scenario: dict[str, Any], workload: dict[str, Any]) -> dict[str, Any]:
        documents = [
            load_document(json.dumps(value).encode(), f"{kind}.json", kind)
            for kind, value in (
                ("scenario", scenario),
                ("workload", workload),
                ("timing_profile", timing_doc()),
            )
        ]
        report: dict[str, Any] = json.loads(replay_documents(*documents))
        return report

    closed = replayed(scenario, workload)
    arrivals = [request["arrival_us"] for request in closed["requests"]]
    assert arrivals != [request["arrival_us"] for request in requests]
    moved = [{**r, "arrival_us": a} for r, a in zip(requests, arrivals, strict=True)]
    twin = replayed(bench_scenario(2), {**workload, "requests": moved})
    assert twin["requests"] == closed["requests"]
    assert twin["workers"] == closed["workers"]
    assert twin["summary"] == closed["summary"]


# --- multi-turn reuse and the host tier (benchmarks/bench_host.py, issue 28) ------------------

bench_host = load_module("bench_host", REPO / "benchmarks" / "bench_host.py")


def _answered(rid: str, session: str | None, ttft: int | None, wait: int | None = None) -> Any:
    return {"id": rid, "session": session, "ttft_us": ttft, "load_wait_us": wait}


def test_the_later_turns_are_a_session_s_turns_after_its_first() -> None:
    """Turns are counted in report (workload) order per session (R59); a request without a
    session is no later turn; a request without a TTFT (rejected) still takes its turn."""
    report = {
        "requests": [
            _answered("a0", "a", 100),
            _answered("b0", "b", 7),
            _answered("x", None, 5),
            _answered("a1", "a", 40, 12),
            _answered("b1", "b", None),
            _answered("b2", "b", 30, 0),
            _answered("a2", "a", 20, 8),
        ],
        "summary": {"kv_cache": {"prefix_reuse_ratio": 0.5}},
    }
    figures = bench_host.report_figures(report)
    assert figures["later_turns"] == 3  # a1, b2, a2 (b1 has no TTFT)
    assert figures["sessions"] == 2
    assert (figures["later_ttft_p50_us"], figures["later_ttft_p99_us"]) == (30, 40)
    assert (figures["all_ttft_p50_us"], figures["all_ttft_p90_us"]) == (20, 100)
    assert (figures["loading_requests"], figures["load_wait_p50_us"]) == (2, 8)
    assert figures["kv_cache"] == {"prefix_reuse_ratio": 0.5}


def test_r27_s_nearest_rank_is_the_bench_s_percentile() -> None:
    samples = [5, 1, 4, 2, 3]
    assert [bench_host.percentile(samples, p) for p in (50, 90, 99)] == [3, 5, 5]
    assert bench_host.percentile([], 50) is None


def test_the_flag_is_set_and_removed_with_the_workload_version() -> None:
    workload = {"document": "workload", "schema_version": "1.2", "sessions": [], "requests": []}
    on = bench_host.extending(workload, True)
    assert (on["schema_version"], on["session_prompts_extend"]) == ("1.3", True)
    off = bench_host.extending(on, False)
    assert off == workload


def test_the_host_scenarios_are_valid_scenarios_1_8() -> None:
    for fleet in (bench_host.WEKA, bench_host.MOONCAKE):
        gpu = bench_host.fleet_scenario(bench_scenario(16), fleet)
        assert load_document(json.dumps(gpu).encode(), "s.json", "scenario").version == "1.2"
        for multiple in bench_host.HOST_MULTIPLES:
            blocks = multiple * fleet.gpu_blocks
            scenario = bench_host.fleet_scenario(bench_scenario(16), fleet, blocks)
            document = load_document(json.dumps(scenario).encode(), "s.json", "scenario")
            assert document.version == "1.8"
            assert scenario["kv_cache"]["host"]["blocks"] == blocks
            assert scenario["fleet"] == {"workers": fleet.workers}


def test_the_host_section_compares_each_pool_with_gpu_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seen: list[tuple[str, str, bool, int | None]] = []

    def replay(
        tag: str, name: str, workload: dict[str, Any], scenario: dict[str, Any]
    ) -> dict[str, Any]:
        host = scenario["kv_cache"].get("host")
        flag = workload.get("session_prompts_extend", False)
        seen.append((tag, name, flag, host and host["blocks"]))
        kv = {"prefix_reuse_ratio": 0.5 if flag else 0.25, "gpu_reuse_ratio": 0.5}
        if host:
            kv |= {"host_reuse_ratio": 0.125, "host": {"loads": 3, "evictions": 2}}
        report = {
            "kv_cache": kv,
            "later_turns": 4,
            **{f"{k}_ttft_p{p}_us": 1000 * p for k in ("all", "later") for p in (50, 90, 99)},
        }
        cpu = 2.0 if host is None else 1.0 + host["blocks"] / 4096
        return {"cpu_s": cpu, "wall_s": cpu, "report": report}

    workload = {"document": "workload", "schema_version": "1.2", "sessions": [{"id": "s"}]}
    workload["requests"] = [{**_request(10, 2), "session": "s"}]
    bench_host.host_section(
        [(bench_host.MOONCAKE, "m", workload)], bench_scenario(16), replay, repeats=2
    )
    printed = capsys.readouterr().out
    gpu = bench_host.MOONCAKE.gpu_blocks
    assert seen == [
        ("mooncake-gpu", "mooncake-plain", False, None),
        ("mooncake-gpu", "mooncake-plain", False, None),
        ("mooncake-gpu", "mooncake-extend", True, None),
        ("mooncake-gpu", "mooncake-extend", True, None),
        *(
            (f"mooncake-host-{m}", "mooncake-extend", True, m * gpu)
            for m in bench_host.HOST_MULTIPLES
            for _ in range(2)
        ),
    ]
    assert "| m | no | 25.00 % | 4 | 50.0 ms | 90.0 ms | 99.0 ms | 50.0 ms | 2.00 s |" in printed
    assert "| m | yes | 50.00 % | 4 |" in printed
    assert "| m | none | 50.00 % | n/a | 50.00 % |" in printed
    # 2,048 blocks: 1 + 0.5 = 1.5x the GPU-only CPU time; 32,768: 9x
    assert "| m | 2,048 (1x) | 50.00 % | 12.50 % | 50.00 % |" in printed
    assert "| 3 | 2 | 0 | 0.75x |" in printed
    assert "largest replay CPU with a host pool against GPU only: 4.50x" in printed
    assert "MISSED" in printed
