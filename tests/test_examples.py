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


FLEET_CHANGES = EXAMPLES / "fleet-changes"


def test_the_fleet_changes_example_scales_drains_fails_and_migrates(tmp_path: Path) -> None:
    """The fleet-changes example (scenario 1.7, section 18), its lifecycles checked by hand
    against the SPEC, tick by tick (ticks every 50 ms, startup 100 ms, cooldown 200 ms,
    ``waiting_per_worker`` up at 2, down below 0.5, step 2, min 1, max 6):

    - 50 ms: nothing waits, low, e = 2 > min: target 1, worker 1 (the highest index) drains
      and, having nothing, is removed at once (R112), as R123 lists both.
    - 1.05 s: the burst queues on worker 0, high (the waiting counts at the ticks were not
      recounted by hand, only what each decision then does): target 3, workers 2 and 3
      (global indices from N0 = 2, R111) start and are active 100 ms later.
    - 1.3 s: worker 2 fails (R117, priority 1); its running r39 (13 of 22 tokens, 32 + 13 =
      45 cached tokens with the cut pass's decode) and r42 (1 token, 61 + 1 = 62) migrate
      (R118) and are routed round robin after ``last`` = 2 (r42 had joined worker 2): r39 to
      3, r42 to 0 (R114). The tick of 1.3 s (last, R113, cooldown over since 1.25 s) sees e
      = 2 (0 and 3) and adds workers 4 and 5.
    - 1.5 s: low, e = 4: target 2, workers 5 and 4 drain (highest first).
    - 1.6 s: worker 2's recovery starts (F + 300 ms), active at 1.7 s after its startup.
    - 1.7 s (cooldown from 1.5 s just over): low, e = 3: target 1, workers 3 and 2 drain.

    No cache: each migrated request recomputes all its lost tokens (R118). The worker time
    is the sum of the workers' ``worker_us`` (R122); worker 2's is 100 + 150 ms (first start)
    + 100 ms (restart) + 52.15 ms draining, its 300 ms failed apart."""
    output = tmp_path / "fleet-report.json"
    stdout = _replay_example(FLEET_CHANGES, "scenario.json", output)
    lines = stdout.splitlines()
    assert "requests     78: 78 completed, 0 rejected, 0 cut off, 0 failed" in lines
    assert "fleet        worker-hours 0.0013 (4.502850 worker-seconds)" in lines
    assert (
        "             4 added, 5 taken away (0 cancelled, 5 drained); 1 failure (0 ignored), "
        "1 recovery; 2 migrations, 107 tokens lost, 107 recomputed"
    ) in lines
    report = json.loads(output.read_bytes())
    lifecycles = {
        worker["worker"]: [(change["state"], change["at_us"]) for change in worker["lifecycle"]]
        for worker in report["workers"]
    }
    assert lifecycles[1] == [("active", 0), ("draining", 50_000), ("removed", 50_000)]
    assert lifecycles[2][:5] == [
        ("starting", 1_050_000),
        ("active", 1_150_000),
        ("failed", 1_300_000),
        ("starting", 1_600_000),
        ("active", 1_700_000),
    ]
    assert lifecycles[2][5] == ("draining", 1_700_000)
    assert lifecycles[3][:3] == [
        ("starting", 1_050_000),
        ("active", 1_150_000),
        ("draining", 1_700_000),
    ]
    for added in (4, 5):
        assert lifecycles[added][:3] == [
            ("starting", 1_300_000),
            ("active", 1_400_000),
            ("draining", 1_500_000),
        ]
    assert all(changes[-1][0] == "removed" for worker, changes in lifecycles.items() if worker)
    failed = report["workers"][2]
    assert (failed["failures"], failed["migrated_out"], failed["lost_tokens"]) == (1, 2, 107)
    assert (failed["starting_us"], failed["active_us"], failed["draining_us"]) == (
        200_000,
        150_000,
        52_150,
    )
    assert (failed["worker_us"], failed["failed_us"]) == (402_150, 300_000)
    migrated = {request["id"]: request for request in report["requests"] if request["migrations"]}
    assert sorted(migrated) == ["r39", "r42"]
    for name, tokens, lost, worker in (("r39", 13, 45, 3), ("r42", 1, 62, 0)):
        request = migrated[name]
        assert request["migrations"] == [
            {
                "at_us": 1_300_000,
                "lost_tokens": lost,
                "output_tokens": tokens,
                "pool": "default",
                "rank": 0,
                "worker": 2,
            }
        ]
        assert (request["worker"], request["outcome"]) == (worker, "completed")
        assert request["lost_tokens"] == request["recomputed_tokens"] == lost
    summary = report["summary"]
    assert summary["fleet"] == {
        "cancelled": 0,
        "drained": 5,
        "failures": 1,
        "ignored_failures": 0,
        "recoveries": 1,
        "scale_downs": 5,
        "scale_ups": 4,
    }
    assert summary["worker_us"] == sum(worker["worker_us"] for worker in report["workers"])
    assert (report["pools"][0]["workers_created"], report["pools"][0]["peak_workers"]) == (6, 4)


HOST_TIER = EXAMPLES / "host-tier"


def _host_tier_reuse(report: dict[str, Any]) -> dict[str, int]:
    return {request["id"]: request["reused_prompt_tokens"] for request in report["requests"]}


def _by_hand(later_turns: tuple[int, int, int]) -> dict[str, int]:
    """Each request's reuse when every block a turn registered is still somewhere (on the GPU
    or in the host pool): turn 0 of c0 has nothing to reuse, every other turn 0 the 32-token
    system prompt (c0's blocks 0 and 1, registered at its first step), turns 1 to 3 their
    ``later_turns``."""
    reuse = {"c0-t0": 0} | {f"c{c}-t0": 32 for c in range(1, 6)}
    for c in range(6):
        reuse |= {f"c{c}-t{t}": later_turns[t - 1] for t in (1, 2, 3)}
    return reuse


def test_the_host_tier_example_keeps_every_turn_s_context_and_answer(tmp_path: Path) -> None:
    """README's "Multi-turn reuse and a host KV tier": six conversations of four turns on one
    worker whose 72 GPU blocks cannot keep them all while they think (150 ms between turns).

    By hand (R47, R48, R125-R127, B = H = 16; prompts 72, 136, 200, 264 tokens, answers of 40):
    turn k fills the blocks below ``floor((P_k + 39) / 16)`` (its last output token is never
    cached), and with ``session_prompts_extend`` each of them has an identity turn k+1 looks up
    (the block straddling ``P_k`` takes turn k+1's hash, R126; the answer's blocks R127's): 6,
    10 and 14 blocks, so turns 1, 2 and 3 reuse 96, 160 and 224 tokens when nothing is lost.
    Without the flag only the full prompt blocks of turn k are found: 4, 8 and 12 blocks (64,
    128, 192 tokens). The host pool (256 entries) stores every block registered (R131) and never
    fills (2 system blocks + 14 per conversation = 86 identities: 4 from each of turns 0, 1
    and 2, 2 from turn 3, whose answer has no successor to name it), so with it every later
    turn gets exactly those figures, part of them loaded back (R133, R134); without it, the GPU
    cache evicts some of them and the turns recompute them."""
    with_host = tmp_path / "host.json"
    _replay_example(HOST_TIER, "scenario.json", with_host)
    report = json.loads(with_host.read_bytes())
    assert _host_tier_reuse(report) == _by_hand((96, 160, 224))
    kv = report["summary"]["kv_cache"]
    host = kv["host"]
    assert (host["stored_blocks"], host["evictions"], host["skipped_blocks"]) == (86, 0, 0)
    assert host["loads"] > 0
    assert kv["host_reused_prompt_tokens"] > 0
    assert kv["reused_prompt_tokens"] == sum(_by_hand((96, 160, 224)).values()) == 3040
    assert all(request["load_wait_us"] is not None for request in report["requests"])
    gpu_only = tmp_path / "gpu.json"
    _replay_example(HOST_TIER, "scenario-gpu-only.json", gpu_only)
    gpu = json.loads(gpu_only.read_bytes())["summary"]["kv_cache"]
    assert gpu["host"] is None
    assert gpu["evictions"] > 0
    assert gpu["reused_prompt_tokens"] < 3040
    # the same conversations without the flag: the answers' blocks are never found
    workload = json.loads((HOST_TIER / "workload.json").read_bytes())
    del workload["session_prompts_extend"]
    workload["schema_version"] = "1.2"
    plain = tmp_path / "workload-1.2.json"
    plain.write_text(json.dumps(workload))
    output = tmp_path / "plain.json"
    result = run_servesim(
        "replay",
        "--scenario",
        HOST_TIER / "scenario.json",
        "--workload",
        plain,
        "--timing-profile",
        EXAMPLES / "basic" / "timing-profile.json",
        "--output",
        output,
    )
    assert result.returncode == 0, result.stderr
    assert _host_tier_reuse(json.loads(output.read_bytes())) == _by_hand((64, 128, 192))
