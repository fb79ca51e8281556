"""The bundled examples replay, and give what README.md says of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import EXAMPLES, run_servesim

KV_CACHE = EXAMPLES / "kv-cache"


def test_the_kv_cache_example_reuses_the_system_prompt_and_preempts(tmp_path: Path) -> None:
    """README's "KV cache and prefix caching": every chat after the first on each worker reuses
    the 64-token system prompt (R48), the last three are preempted once each (R49), and the
    figures of the `kv cache` line."""
    output = tmp_path / "kv-report.json"
    result = run_servesim(
        "replay",
        "--scenario",
        KV_CACHE / "scenario.json",
        "--workload",
        KV_CACHE / "workload.json",
        "--timing-profile",
        EXAMPLES / "basic" / "timing-profile.json",
        "--output",
        output,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "kv cache     prefix reuse 44.33% (512 prompt tokens); 3 preemptions, 16 evictions; "
        "peak 12 blocks in use (largest worker)"
    ) in result.stdout
    report = json.loads(output.read_bytes())
    requests = report["requests"]
    assert [request["reused_prompt_tokens"] for request in requests] == [0, 0] + [64] * 8
    assert [request["preemptions"] for request in requests] == [0] * 7 + [1] * 3
    assert [worker["kv_cache"]["reused_tokens"] for worker in report["workers"]] == [352, 448]


ROUTING = EXAMPLES / "routing"


def _replay_example(folder: Path, scenario: str, output: Path) -> str:
    """Replay ``folder``'s workload on its ``scenario`` with the basic example's timing
    profile; the summary ``servesim replay`` prints."""
    result = run_servesim(
        "replay",
        "--scenario",
        folder / scenario,
        "--workload",
        folder / "workload.json",
        "--timing-profile",
        EXAMPLES / "basic" / "timing-profile.json",
        "--output",
        output,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_routing_example_keeps_conversations_where_their_prefix_is(tmp_path: Path) -> None:
    """README's "State-aware routing": five conversations of six turns on four workers. Round
    robin rotates each conversation over the workers; cache-aware routing (R56, seeded ties,
    R58) sends each turn where its earlier turns' blocks are, so it reuses more than three times
    as many prompt tokens."""
    round_robin = _replay_example(ROUTING, "scenario-round-robin.json", tmp_path / "rr.json")
    assert "prefix reuse 15.94% (880 prompt tokens)" in round_robin
    cache_aware = _replay_example(ROUTING, "scenario.json", tmp_path / "ca.json")
    assert "prefix reuse 53.62% (2,960 prompt tokens)" in cache_aware
    report = json.loads((tmp_path / "ca.json").read_bytes())
    requests = report["requests"]
    # R54, R57: a first turn sees nothing cached; of the 25 later turns, 20 join a worker
    # holding blocks of their conversation (the others go where the load is lower)
    first_turns = [r for r in requests if r["id"].endswith("turn0")]
    assert [r["cached_blocks_at_routing"] for r in first_turns] == [0] * 5
    later = [r for r in requests if not r["id"].endswith("turn0")]
    assert sum(r["cached_blocks_at_routing"] > 0 for r in later) == 20
    rr_report = json.loads((tmp_path / "rr.json").read_bytes())
    assert {r["cached_blocks_at_routing"] for r in rr_report["requests"]} == {None}


SESSIONS = EXAMPLES / "sessions"


def _sessions_in_flight(requests: list[dict[str, Any]]) -> int:
    """The most sessions started and not ended at one instant (R61's units; each session's
    span runs from its first turn's arrival to its last turn's terminal time)."""
    spans: dict[str, list[int]] = {}
    for request in requests:
        span = spans.setdefault(request["session"], [request["arrival_us"], 0])
        span[1] = request["terminal_us"]
    events = sorted([(end, -1) for _, end in spans.values()] + [(s, 1) for s, _ in spans.values()])
    most = current = 0
    for _, change in events:  # at one instant an end (-1) sorts before a start (+1)
        current += change
        most = max(most, current)
    return most


def test_the_sessions_example_trades_throughput_for_goodput(tmp_path: Path) -> None:
    """README's "Sessions, closed loop and goodput": eight conversations of five turns, each
    turn sent its think time after the previous answer (R59). In open loop all eight run at
    once and 15 of 40 requests meet the objectives; a closed loop of 4 sessions (R61) takes
    longer but 32 meet them, more goodput per second; a deadline at 300 ms (R62) cuts off 24."""
    open_loop = _replay_example(SESSIONS, "scenario.json", tmp_path / "open.json")
    assert "requests     40: 40 completed, 0 rejected, 0 cut off" in open_loop
    assert (
        "goodput      15 requests met the objectives (37.50% of completed): 25.48 requests/s, "
        "611.41 output tokens/s"
    ) in open_loop
    closed = _replay_example(SESSIONS, "scenario-closed-loop.json", tmp_path / "closed.json")
    assert (
        "goodput      32 requests met the objectives (80.00% of completed): 34.01 requests/s, "
        "816.33 output tokens/s"
    ) in closed
    requests = json.loads((tmp_path / "closed.json").read_bytes())["requests"]
    assert _sessions_in_flight(requests) == 4
    assert _sessions_in_flight(json.loads((tmp_path / "open.json").read_bytes())["requests"]) == 8
    # every later turn arrives its think time after its predecessor's answer (R59)
    by_id = {request["id"]: request for request in requests}
    workload = json.loads((SESSIONS / "workload.json").read_bytes())["requests"]
    for turn in (item for item in workload if "think_time_us" in item):
        chat, number = turn["id"].rsplit("-turn", 1)
        previous = by_id[f"{chat}-turn{int(number) - 1}"]
        assert by_id[turn["id"]]["arrival_us"] == previous["terminal_us"] + turn["think_time_us"]
    deadline = _replay_example(SESSIONS, "scenario-deadline.json", tmp_path / "deadline.json")
    assert "requests     40: 16 completed, 0 rejected, 24 cut off" in deadline
    report = json.loads((tmp_path / "deadline.json").read_bytes())
    cut = [request for request in report["requests"] if request["outcome"] == "cut_off"]
    assert {request["terminal_us"] for request in cut} == {300_000}
    assert all(request["arrival_us"] is None or request["arrival_us"] < 300_000 for request in cut)
