"""A Vidur-like workload and deployment, for comparing servesim's replay time with Vidur's.

Vidur's published example: Poisson arrivals at 10 requests per second, 10,000 requests of 512
prompt and 128 output tokens, one replica running up to 128 sequences and 4,096 tokens per step
with whole prefill. Here the step time is a ``synthetic_linear`` profile of 16 ms per step plus
100 us per decoding request. The arrivals are drawn from a seeded generator, so every run (and
every machine) replays the same documents.

    python benchmarks/vidur_workload.py FOLDER   # writes scenario.json, workload.json, timing.json
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

#: Vidur's example deployment and load.
REQUESTS = 10_000
RATE_PER_S = 10.0
PROMPT_TOKENS = 512
OUTPUT_TOKENS = 128
SEED = 2024

SCENARIO: dict[str, Any] = {
    "document": "scenario",
    "schema_version": "1.0",
    "fleet": {"workers": 1},
    "routing": {"policy": "round_robin"},
    "scheduler": {
        "max_num_seqs": 128,
        "max_batched_tokens": 4096,
        "max_model_len": PROMPT_TOKENS + OUTPUT_TOKENS,
        "prefill": {"mode": "whole"},
    },
}

TIMING: dict[str, Any] = {
    "document": "timing_profile",
    "schema_version": "1.0",
    "model": {
        "kind": "synthetic_linear",
        "step_overhead_ns": 16_000_000,
        "prefill_token_ns": 0,
        "decode_token_ns": 100_000,
    },
}


def workload(
    requests: int = REQUESTS, rate_per_s: float = RATE_PER_S, seed: int = SEED
) -> dict[str, Any]:
    """``requests`` requests with exponential gaps of mean ``1 / rate_per_s`` seconds (a
    Poisson process), in integer microseconds, drawn from ``random.Random(seed)``."""
    draw = random.Random(seed)
    arrival_s = 0.0
    items = []
    for index in range(requests):
        if index:
            arrival_s += draw.expovariate(rate_per_s)
        items.append(
            {
                "id": f"vidur-{index}",
                "arrival_us": round(arrival_s * 1_000_000),
                "prompt_tokens": PROMPT_TOKENS,
                "max_output_tokens": OUTPUT_TOKENS,
            }
        )
    return {"document": "workload", "schema_version": "1.0", "requests": items}


def write(folder: Path, requests: int = REQUESTS) -> dict[str, Path]:
    """The three documents written into ``folder``; their paths by role."""
    paths = {
        "scenario": folder / "vidur-scenario.json",
        "workload": folder / f"vidur-workload-{requests}.json",
        "timing": folder / "vidur-timing.json",
    }
    paths["scenario"].write_text(json.dumps(SCENARIO, indent=2) + "\n")
    paths["workload"].write_text(json.dumps(workload(requests), indent=2) + "\n")
    paths["timing"].write_text(json.dumps(TIMING, indent=2) + "\n")
    return paths


if __name__ == "__main__":
    for role, path in write(Path(sys.argv[1])).items():
        print(f"{role}: {path}")
