"""The bundled examples replay, and give what README.md says of them."""

from __future__ import annotations

import json
from pathlib import Path

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


def _replay_routing_example(scenario: str, output: Path) -> str:
    result = run_servesim(
        "replay",
        "--scenario",
        ROUTING / scenario,
        "--workload",
        ROUTING / "workload.json",
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
    round_robin = _replay_routing_example("scenario-round-robin.json", tmp_path / "rr.json")
    assert "prefix reuse 15.94% (880 prompt tokens)" in round_robin
    cache_aware = _replay_routing_example("scenario.json", tmp_path / "ca.json")
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
