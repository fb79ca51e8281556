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
