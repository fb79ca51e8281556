"""The hand-derivable experiments behind KVCACHE.md: Dynamo's KV cache against SPEC.md R45-R51.

    python conformance/adapters/dynamo/kv_experiments.py              # needs ai-dynamo 1.6.1
    python conformance/adapters/dynamo/kv_experiments.py --record FILE  # also writes the fixture

Each experiment replays a few requests on one worker through AISimulate's runtime (the one the
adapter uses), fed as a Mooncake trace so that the requests carry block hashes: the runtime's
``{"spec": ReplaySpec, "traffic": {"source_type": "trace", ...}}`` form. Engine blocks are 4
tokens, timing is Dynamo's fixed model (0.3 ms per pass that prefills, 0.2 ms per pass that
decodes), chunked prefill is off. Each line printed is one request: its trace line, its
admissions as (time ms, prompt tokens reused) and its token times. ``--record`` writes the
preemption experiment's per-request records for tests/test_dynamo_adapter.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servesim_dynamo import dynamo_runtime

ENGINE = {
    "backend": "vllm",
    "timing_model": {"type": "fixed", "prefill_ms": 0.3, "decode_ms": 0.2},
    "max_num_seqs": 8,
    "max_num_batched_tokens": 1024,
    "max_model_len": 1024,
    "enable_chunked_prefill": False,
    "enable_prefix_caching": True,
    "block_size": 4,
    "num_gpu_blocks": 64,
}


def row(at_ms: float, prompt: int, output: int, hashes: list[int]) -> dict[str, Any]:
    return {"timestamp": at_ms, "input_length": prompt, "output_length": output, "hash_ids": hashes}


#: name -> (what it shows, trace block tokens, engine overrides, rows)
EXPERIMENTS: dict[str, tuple[str, int, dict[str, Any], list[dict[str, Any]]]] = {
    "reuse": (
        "R47/R48: full-prompt hit recomputes its last block; a block is shared in the pass "
        "that fills it (line 5 reuses line 4's blocks, both admitted at 15 ms)",
        8,
        {},
        [
            row(5, 16, 2, [1, 2]),
            row(10, 16, 2, [1, 2]),
            row(10, 12, 2, [1, 3]),
            row(20, 16, 2, [7, 8]),
            row(20, 16, 2, [7, 8]),
        ],
    ),
    "reuse-off": ("R47: prefix caching off, same rows: nothing reused", 8, {}, []),
    "identity": (
        "R47: identity is the hash list, all 64 bits (7 and 7 + 2^32 differ); a partial trace "
        "block's full engine blocks are reused; a partial engine block is not",
        8,
        {},
        [
            row(0, 16, 1, [7, 8]),
            row(10, 16, 1, [7 + 2**32, 8]),
            row(20, 16, 1, [2**53 - 1, 5]),
            row(30, 16, 1, [2**53 - 1, 5]),
            row(40, 16, 1, [7, 9]),
            row(50, 13, 1, [7, 9]),
            row(60, 10, 1, [11, 9]),
            row(70, 16, 1, [11, 9]),
        ],
    ),
    "eviction": (
        "R49: free blocks go before cached ones (line 4 reuses both of line 1's blocks); then "
        "the least recently released cached block, a request's last block first",
        4,
        {"num_gpu_blocks": 4, "emit_kv_events": True},
        [
            row(0, 8, 1, [1, 2]),
            row(10, 3, 1, [9]),
            row(20, 8, 1, [5, 6]),
            row(30, 9, 1, [1, 2, 7]),
        ],
    ),
    "preemption": (
        "R49/R51: two decodes outgrow 6 blocks; the most recently admitted is preempted, keeps "
        "its 9 tokens, and its recompute reuses its own output-token block (8 tokens); the "
        "recompute pass costs 0.2 ms (decode), not 0.3 ms (prefill); a waiting request does "
        "not pass the preempted one",
        4,
        {"num_gpu_blocks": 6},
        [row(0, 4, 12, [1]), row(0, 4, 12, [2]), row(1.8, 2, 1, [3])],
    ),
    "recompute-timing": (
        "R22/R51: the preemption experiment without line 3: the recompute pass alone lasts "
        "0.2 ms (timed as a decode), where R22 gives a prefill step",
        4,
        {"num_gpu_blocks": 6},
        [row(0, 4, 12, [1]), row(0, 4, 12, [2])],
    ),
}


def run(rows: list[dict[str, Any]], block_tokens: int, engine: dict[str, Any]) -> dict[str, Any]:
    """One worker's replay of ``rows`` (a Mooncake trace) through the runtime."""
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.jsonl"
        trace.write_text("".join(json.dumps(each) + "\n" for each in rows))
        payload = {
            "spec": {
                "version": 1,
                "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
                "engine": {"rank": dict(ENGINE, **engine)},
                "requests": [],
            },
            "traffic": {
                "source_type": "trace",
                "trace_path": str(trace),
                "trace_format": "mooncake",
                "trace_block_size": block_tokens,
            },
        }
        output: dict[str, Any] = json.loads(
            dynamo_runtime.runtime().run_replay_with_artifacts_json(json.dumps(payload))
        )
        return output


def describe(output: dict[str, Any]) -> list[str]:
    """One line per request, in trace order (Dynamo names them request_<line>)."""
    times: dict[str, list[float]] = {}
    for event in output["artifacts"]["outputs"]:
        times.setdefault(event["request_id"], []).append(round(event["observed_at_ms"], 6))
    lines = []
    records = output["report"]["per_request"]
    for record in sorted(records, key=lambda each: int(each["session_id"].split("_")[1])):
        admissions = [
            (round(each["at_ms"], 6), each["reused_input_tokens"])
            for each in record["admission_history"]
        ]
        lines.append(
            f"  {record['session_id']}: admissions {admissions}, "
            f"readmissions {record['readmission_count']}, tokens at {times[record['uuid']]}"
        )
    for event in output["artifacts"].get("kv_events", []):
        kind, data = next(iter(event["event"]["data"].items()))
        count = len(data.get("blocks") or data.get("block_hashes") or [])
        lines.append(f"  kv event at {round(event['observed_at_ms'], 6)} ms: {kind} {count}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, help="write the preemption experiment's records")
    arguments = parser.parse_args()
    for name, (shows, block_tokens, engine, rows) in EXPERIMENTS.items():
        if name == "reuse-off":
            rows = EXPERIMENTS["reuse"][3]
            engine = {"enable_prefix_caching": False}
        output = run(rows, block_tokens, engine)
        print(f"{name}: {shows}")
        print("\n".join(describe(output)))
        if name == "preemption" and arguments.record:
            records = output["report"]["per_request"]
            arguments.record.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
