"""The minimal cases of DISAGG.md that no golden twin shows, run on Dynamo's disaggregated replay.

    python conformance/adapters/dynamo/disagg_probes.py      # needs ai-dynamo 1.6.1

Both pools: vllm, blocks of 16 tokens, max_num_seqs 8, max_num_batched_tokens 512, whole
prefill, fixed timing 0.3 ms per prefill pass and 0.2 ms per decode pass; one prefill and one
decode worker, round robin; the transfer 1000 bytes per token at 1 GB/s (1 us per token). Each
probe prints Dynamo's records (ms) and what SPEC.md section 17 gives for the same documents.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servesim_dynamo import dynamo_runtime


def engine(worker_type: str, blocks: int, prefix: bool, mode: str) -> dict[str, Any]:
    args: dict[str, Any] = {
        "backend": "vllm",
        "worker_type": worker_type,
        "block_size": 16,
        "num_gpu_blocks": blocks,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 512,
        "max_model_len": 4096,
        "enable_prefix_caching": prefix,
        "enable_chunked_prefill": False,
        "timing_model": {"type": "fixed", "prefill_ms": 0.3, "decode_ms": 0.2},
    }
    if worker_type == "prefill":
        args.update(
            kv_transfer_bytes_per_token=1000,
            kv_transfer_bandwidth=1.0,
            kv_transfer_timing_mode=mode,
        )
    return args


def run(
    rows: list[dict[str, Any]],
    *,
    prefix: bool = False,
    mode: str = "full_prompt",
    prefill: tuple[int, int] = (1, 1),
    decode: tuple[int, int] = (1, 1),
    prefill_blocks: int = 64,
) -> None:
    """Print Dynamo's records; ``prefill`` and ``decode`` are (workers, ranks per worker)."""
    records = dynamo_runtime.run_disagg(
        rows,
        engine("prefill", prefill_blocks, prefix, mode),
        engine("decode", 64, prefix, mode),
        prefill[0],
        decode[0],
        block_size=16,
        dp_sizes=(prefill[1], decode[1]),
    )
    names = (
        "source_held_ms",
        "destination_reserved_ms",
        "destination_activated_ms",
        "first_token_ms",
        "last_token_ms",
    )
    for record in sorted(records, key=lambda r: (r["arrival_time_ms"], r["input_length"])):
        if record["source_held_ms"] is None:
            print(
                f"  P={record['input_length']} m={record['requested_output_length']}: never "
                "prefilled, "
                f"terminal_status {record['terminal_status']}"
            )
            continue
        stamps = " ".join(f"{name[:-3]}={round(record[name], 6)}" for name in names)
        sides = {h["pool"]: h for h in record["routing_history"]}
        where = ", ".join(
            f"{pool} worker {sides[pool]['logical_worker_id']} rank {sides[pool]['dp_rank']}"
            for pool in ("prefill", "decode")
        )
        print(f"  P={record['input_length']} m={record['output_length']}: {where}: {stamps}")


def main() -> int:
    print("decode-block-rounded-transfer: one request, P=100, destination_missing, no decode hit")
    run(
        [{"timestamp": 0, "input_length": 100, "output_length": 3, "hash_ids": list(range(7))}],
        prefix=True,
        mode="destination_missing",
    )
    print("  R103: 100 tokens, 100 us: activated at 0.4 (Dynamo sends 7 blocks = 112 tokens)")
    print()
    print("prefill-hidden-token-takes-no-block: a prefill cache of 2 blocks (32 tokens), P=31..33")
    run(
        [
            {"timestamp": 0, "input_length": 31, "output_length": 1, "hash_ids": [1, 2]},
            {"timestamp": 0, "input_length": 32, "output_length": 1, "hash_ids": [11, 12]},
            {"timestamp": 0, "input_length": 33, "output_length": 1, "hash_ids": [21, 22, 23]},
        ],
        prefill_blocks=2,
    )
    print(
        "  R100 + R10: P=31 accepted (31 + 1 <= 32), P=32 and P=33 rejected exceeds_kv_cache at 0 "
        "(the prompt and the hidden token over 32); Dynamo serves P=32 after P=31's source "
        "release and rejects P=33 only (3 prompt blocks over 2)"
    )
    print()
    print("reservation-one-per-pass-end: A (64, 5) busy on the decode worker; B, C, D held at 0.6")
    run(
        [
            {"timestamp": 0, "input_length": 64, "output_length": 5, "hash_ids": [1, 2, 3, 4]},
            {"timestamp": 0.001, "input_length": 16, "output_length": 1, "hash_ids": [11]},
            {"timestamp": 0.001, "input_length": 16, "output_length": 2, "hash_ids": [21]},
            {"timestamp": 0.001, "input_length": 48, "output_length": 1, "hash_ids": [31, 32, 33]},
        ]
    )
    print(
        "  R102: B, C and D all reserved at 0.6 (join, a), transfers end 0.616, 0.616, 0.648, "
        "all activated at the pass end 0.764; Dynamo reserves B at 0.764, C and D at 0.964"
    )
    print()
    print("decode-rank-order: 4 requests held at once, 2 decode workers of 2 ranks each")
    run(
        [
            {
                "timestamp": 0,
                "input_length": 16 * (n + 1),
                "output_length": 2,
                "hash_ids": [100 * n + b for b in range(n + 1)],
            }
            for n in range(4)
        ],
        decode=(2, 2),
    )
    print(
        "  R99 + R80: the k-th routed goes to decode worker k mod 2, then that worker's next "
        "rank: (0,0) (1,0) (0,1) (1,1) in routing order (P = 16, 32, 48, 64); Dynamo goes "
        "round its schedulers worker-major: (0,0) (0,1) (1,0) (1,1)"
    )
    print()
    print("prefill-rank-order: the same 4 requests on 2 prefill workers of 2 ranks each")
    run(
        [
            {
                "timestamp": 0,
                "input_length": 16 * (n + 1),
                "output_length": 2,
                "hash_ids": [100 * n + b for b in range(n + 1)],
            }
            for n in range(4)
        ],
        prefill=(2, 2),
    )
    print(
        "  R99 + R80 on the prefill side: (0,0) (1,0) (0,1) (1,1) in arrival order; Dynamo "
        "(0,0) (0,1) (1,0) (1,1)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
