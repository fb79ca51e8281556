"""Dynamo's offline replay of a Mooncake trace, as ``bench.py`` times it for a baseline.

Run by ``bench.py`` in Dynamo's own virtual environment (ai-dynamo 1.6.1, see
/work/shared/reading/dynamo-replay.md), never imported by servesim:

    python dynamo_replay.py TRACE.jsonl --workers 16 --prefill-ms 40 --decode-ms 3 \
        --output records.jsonl

It replays the trace on ``--workers`` aggregated vLLM-style workers with round robin routing
and Dynamo's ``fixed`` timing model (a pass lasts ``--prefill-ms`` if it prefills, plus
``--decode-ms`` if it decodes), then writes every per-request record Dynamo captured, one JSON
object a line, and prints its count. The engine limits are bench.py's scenario (64 sequences,
8,192 tokens a step, chunked prefill); the rest is Dynamo's default (its KV cache, which
servesim's v1 scenario does not model): what is compared is the cost of a replay, not its
results.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: bench.py's scenario, in Dynamo's engine arguments (vllm style).
ENGINE = {
    "backend": "vllm",
    "max_num_seqs": 64,
    "max_num_batched_tokens": 8192,
    "max_model_len": 131072,
    "enable_chunked_prefill": True,
}

#: Tokens per hash id in the public Mooncake traces.
MOONCAKE_BLOCK_TOKENS = 512


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path, help="a Mooncake JSON Lines trace")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--prefill-ms", type=float, required=True)
    parser.add_argument("--decode-ms", type=float, required=True)
    parser.add_argument("--output", type=Path, required=True, help="per-request records")
    arguments = parser.parse_args()
    from dynamo.replay import run_trace_replay

    timing = {"type": "fixed", "prefill_ms": arguments.prefill_ms, "decode_ms": arguments.decode_ms}
    report = run_trace_replay(
        [str(arguments.trace)],
        extra_engine_args={"engine": {**ENGINE, "timing_model": timing}},
        num_workers=arguments.workers,
        router_mode="round_robin",
        trace_block_size=MOONCAKE_BLOCK_TOKENS,
        capture_per_request=True,
    )
    records = report.to_dict()["per_request"]
    with arguments.output.open("w") as output:
        for record in records:
            output.write(json.dumps(record, sort_keys=True) + "\n")
    print(json.dumps({"requests": len(records)}))  # the parent times the whole process
    return 0


if __name__ == "__main__":
    sys.exit(main())
