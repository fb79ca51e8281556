"""Prefix reuse on the shared Mooncake trace, Dynamo against the reference; writes MOONCAKE-KV.md.

    python conformance/adapters/dynamo/mooncake_kv.py TRACE.jsonl [--blocks N] [--dynamo-python PY]

Both replay the trace on 16 workers, round robin, whole prefill, the limits and the fixed-form
timing of mooncake.py (30 ms per pass that prefills, 20 ms per pass that decodes), engine blocks
of 64 tokens, prefix caching on, and ``--blocks`` blocks per worker (default 262,144: more than
any worker ever takes, so nothing is evicted or preempted). The reference replays the workload
``servesim import mooncake`` makes (prefix hashes of 512-token trace blocks, R47) with a
scenario 1.1 cache; Dynamo replays the trace file itself through its documented
``dynamo.replay.run_trace_replay`` (``trace_block_size=512``), in the Python given by
``--dynamo-python`` (default: this one). Dynamo's per-request records carry no request id, so
each is matched to its trace line by (worker, arrival, prompt and output tokens) under the
round-robin placement; the script stops if that key is not unique.

The page compares the summary's prefix-reuse ratio, every request's reused prompt tokens (R52:
at its first admission), every worker's reused tokens and preemptions, and counts the requests
whose reuse would change if a block were reusable from the moment the pass that fills it is
scheduled (Dynamo) rather than from that pass's end (R47).
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mooncake
from servesim_dynamo.kv import CacheRecord, cache_record

HERE = Path(__file__).resolve().parent
ENGINE_BLOCK_TOKENS = 64
TRACE_BLOCK_TOKENS = 512
DEFAULT_BLOCKS = 262_144
DEFAULT_OUTPUT = HERE / "MOONCAKE-KV.md"


def dynamo_engine(blocks: int) -> dict[str, Any]:
    """mooncake.py's scheduler and timing as Dynamo engine arguments, with the cache."""
    return {
        "backend": "vllm",
        "timing_model": {
            "type": "fixed",
            "prefill_ms": mooncake.PREFILL_US / 1000,
            "decode_ms": mooncake.DECODE_US / 1000,
        },
        "max_num_seqs": mooncake.MAX_NUM_SEQS,
        "max_num_batched_tokens": mooncake.LIMIT,
        "max_model_len": mooncake.LIMIT,
        "enable_chunked_prefill": False,
        "enable_prefix_caching": True,
        "block_size": ENGINE_BLOCK_TOKENS,
        "num_gpu_blocks": blocks,
    }


def run_dynamo(trace: Path, blocks: int, output: Path) -> None:
    """The Dynamo half (needs ai-dynamo): per-request records to ``output``."""
    replay = importlib.import_module("dynamo.replay")  # only in the Python with ai-dynamo
    report = replay.run_trace_replay(
        [str(trace)],
        extra_engine_args={"engine": dynamo_engine(blocks)},
        num_workers=mooncake.WORKERS,
        router_mode="round_robin",
        trace_block_size=TRACE_BLOCK_TOKENS,
        capture_per_request=True,
    ).to_dict()
    output.write_text(
        json.dumps(
            {
                "summary": report["summary"],
                "per_request": report["per_request"],
                "workers": worker_figures(trace, blocks),
            }
        )
    )


def worker_figures(trace: Path, blocks: int) -> dict[str, list[int]]:
    """Each worker's evicted blocks (the ``removed`` KV events of the per-worker runtime) and
    reused tokens (every admission's, to check these runs against ``run_trace_replay``).

    ``run_trace_replay`` does not report evictions, so each worker's share of the trace (round
    robin: the k-th arrival to worker k mod 16) is replayed again through AISimulate's runtime,
    the one the adapter uses, which returns the KV events of its cache. Workers never interact
    under round robin, and a shift of every arrival (the runtime re-bases them) changes no hit.
    """
    from servesim_dynamo import dynamo_runtime

    rows = trace_lines(trace)
    order = sorted(range(len(rows)), key=lambda line: (rows[line]["timestamp"], line))
    counts: dict[str, list[int]] = {"evictions": [], "reused": []}
    with tempfile.TemporaryDirectory() as folder:
        for worker in range(mooncake.WORKERS):
            path = Path(folder) / f"worker-{worker}.jsonl"
            mine = order[worker :: mooncake.WORKERS]
            path.write_text("".join(json.dumps(rows[line]) + "\n" for line in mine))
            payload = {
                "spec": {
                    "version": 1,
                    "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
                    "engine": {"rank": dict(dynamo_engine(blocks), emit_kv_events=True)},
                    "requests": [],
                },
                "traffic": {
                    "source_type": "trace",
                    "trace_path": str(path),
                    "trace_format": "mooncake",
                    "trace_block_size": TRACE_BLOCK_TOKENS,
                },
            }
            output = json.loads(
                dynamo_runtime.runtime().run_replay_with_artifacts_json(json.dumps(payload))
            )
            removed = [
                event["event"]["data"]["removed"]["block_hashes"]
                for event in output["artifacts"]["kv_events"]
                if "removed" in event["event"]["data"]
            ]
            counts["evictions"].append(sum(len(hashes) for hashes in removed))
            records = output["report"]["per_request"]
            counts["reused"].append(sum(cache_record(r).reused_tokens for r in records))
    return counts


def kv_scenario(blocks: int) -> dict[str, Any]:
    cache = {"blocks": blocks, "block_tokens": ENGINE_BLOCK_TOKENS, "prefix_caching": True}
    return {**mooncake.scenario(), "schema_version": "1.1", "kv_cache": cache}


def trace_lines(trace: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]


def match_records(rows: list[dict[str, Any]], records: list[dict[str, Any]]) -> dict[int, Any]:
    """Dynamo's records by trace line (0-based), keyed as the module docstring says."""
    first = min(row["timestamp"] for row in rows)
    order = sorted(range(len(rows)), key=lambda line: (rows[line]["timestamp"], line))
    keys: dict[tuple[int, float, int, int], int] = {}
    for turn, line in enumerate(order):
        row = rows[line]
        key = (
            turn % mooncake.WORKERS,
            float(row["timestamp"] - first),
            row["input_length"],
            row["output_length"],
        )
        if key in keys:
            raise SystemExit(f"trace lines {keys[key] + 1} and {line + 1} share a match key")
        keys[key] = line
    matched = {}
    for record in records:
        key = (
            record["decode_worker_idx"],
            record["arrival_time_ms"],
            record["input_length"],
            record["requested_output_length"],
        )
        matched[keys[key]] = record
    if len(matched) != len(rows):
        raise SystemExit(f"matched {len(matched)} Dynamo records to {len(rows)} trace lines")
    return matched


def same_pass_dependent(rows: list[dict[str, Any]], records: dict[int, Any]) -> int:
    """Requests whose reuse differs between registration at scheduling and at the pass's end.

    Uses Dynamo's own workers and first admission times; whole prefill computes a prompt in its
    admission pass, so a block is filled in the pass that admits its request (R47's identity:
    block j with the first j // 8 + 1 hashes, full and inside the prompt).
    """
    per_block = TRACE_BLOCK_TOKENS // ENGINE_BLOCK_TOKENS
    by_worker: dict[int, list[tuple[float, int, int]]] = defaultdict(list)
    for line, record in records.items():
        ordinal = record["admission_history"][0]["admission_ordinal"]
        by_worker[record["decode_worker_idx"]].append((record["first_admit_ms"], ordinal, line))
    differing = 0
    for admissions in by_worker.values():
        at_end: set[tuple[tuple[int, ...], int]] = set()
        at_schedule: set[tuple[tuple[int, ...], int]] = set()
        admissions.sort()
        index = 0
        while index < len(admissions):
            now, filled = admissions[index][0], []
            while index < len(admissions) and admissions[index][0] == now:
                row = rows[admissions[index][2]]
                hashes, prompt = row["hash_ids"], row["input_length"]
                blocks = [
                    (tuple(hashes[: j // per_block + 1]), j)
                    for j in range(min(prompt // ENGINE_BLOCK_TOKENS, per_block * len(hashes)))
                ]
                cap = min((prompt - 1) // ENGINE_BLOCK_TOKENS, len(blocks))
                hit_end = hit_schedule = 0
                while hit_end < cap and blocks[hit_end] in at_end:
                    hit_end += 1
                while hit_schedule < cap and blocks[hit_schedule] in at_schedule:
                    hit_schedule += 1
                differing += hit_end != hit_schedule
                at_schedule.update(blocks)
                filled.extend(blocks)
                index += 1
            at_end.update(filled)
    return differing


def compare(
    rows: list[dict[str, Any]], dynamo: dict[str, Any], reference: dict[str, Any]
) -> list[str]:
    """The page's figures, as Markdown lines."""
    records = match_records(rows, dynamo["per_request"])
    caches: dict[int, CacheRecord] = {line: cache_record(r) for line, r in records.items()}
    requests = {entry["id"]: entry for entry in reference["requests"]}
    ours = {line: requests[f"mooncake-L{line + 1}"] for line in records}
    prompt = sum(row["input_length"] for row in rows)
    dyn_reused = sum(cache.reused_prompt_tokens for cache in caches.values())
    kv = reference["summary"]["kv_cache"]
    differing = [
        line
        for line in records
        if caches[line].reused_prompt_tokens != ours[line]["reused_prompt_tokens"]
    ]
    placed = sum(records[line]["decode_worker_idx"] != ours[line]["worker"] for line in records)
    admitted = sum(
        round(records[line]["first_admit_ms"] * 1000) != ours[line]["first_scheduled_us"]
        for line in records
    )
    worker_reuse: dict[int, int] = defaultdict(int)
    worker_preemptions: dict[int, int] = defaultdict(int)
    for line, cache in caches.items():
        worker_reuse[records[line]["decode_worker_idx"]] += cache.reused_tokens
        worker_preemptions[records[line]["decode_worker_idx"]] += cache.preemptions
    workers_differing = [
        worker["worker"]
        for worker in reference["workers"]
        if (worker_reuse[worker["worker"]], worker_preemptions[worker["worker"]])
        != (worker["kv_cache"]["reused_tokens"], worker["kv_cache"]["preemptions"])
    ]
    by_worker = [worker_reuse[worker] for worker in range(mooncake.WORKERS)]
    peak = max(worker["kv_cache"]["peak_blocks_in_use"] for worker in reference["workers"])
    return [
        "| figure | reference (`servesim replay`) | Dynamo 1.6.1 (`run_trace_replay`) |",
        "|---|---|---|",
        f"| prompt tokens | {reference['summary']['prompt_tokens']:,} | {prompt:,} |",
        f"| reused prompt tokens (first admissions) | {kv['reused_prompt_tokens']:,} | "
        f"{dyn_reused:,} |",
        f"| prefix-reuse ratio | {kv['prefix_reuse_ratio']!r} | "
        f"{dynamo['summary']['first_admission_prefix_cache_reused_ratio']!r} |",
        f"| preemptions | {kv['preemptions']} | "
        f"{sum(cache.preemptions for cache in caches.values())} |",
        f"| evictions | {kv['evictions']:,} | {sum(dynamo['workers']['evictions']):,} "
        "(per-worker runtime's KV events) |",
        f"| peak blocks in use (largest worker) | {peak:,} | not recorded |",
        "",
        f"Requests whose reused prompt tokens differ: **{len(differing)}** of {len(rows):,}"
        + (f" (first trace lines: {[line + 1 for line in differing[:5]]})" if differing else "")
        + f". Requests placed on another worker: {placed}; first admitted at another time: "
        f"{admitted}. Workers whose reused tokens or preemptions differ: {workers_differing or 0}. "
        "The per-worker runtime runs that count Dynamo's evictions reuse the same tokens on "
        "every worker as `run_trace_replay`: "
        f"{'yes' if dynamo['workers']['reused'] == by_worker else 'NO'}. "
        "Requests whose reuse would change if blocks were reusable from the end of the pass that "
        f"fills them (R47) rather than from its scheduling (Dynamo): "
        f"{same_pass_dependent(rows, records)}.",
    ]


def timed(command: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(
            f"{' '.join(command[:3])} ... failed ({done.returncode}): {done.stderr[-500:]}"
        )
    return time.perf_counter() - started, done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="the Mooncake JSONL trace")
    parser.add_argument("--blocks", type=int, default=DEFAULT_BLOCKS, help="blocks per worker")
    parser.add_argument("--dynamo-python", default=sys.executable, help="a Python with ai-dynamo")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--dynamo-only", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--keep", type=Path, help="copy both reports into this folder")
    arguments = parser.parse_args()
    if arguments.dynamo_only:
        run_dynamo(arguments.trace.resolve(), arguments.blocks, arguments.dynamo_only)
        return 0
    rows = trace_lines(arguments.trace)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        (work / "scenario.json").write_text(json.dumps(kv_scenario(arguments.blocks), indent=2))
        (work / "timing-profile.json").write_text(json.dumps(mooncake.fixed_form_grid(), indent=2))
        servesim = [sys.executable, "-m", "servesim_cli"]
        timed(
            [
                *servesim,
                "import",
                "mooncake",
                str(arguments.trace),
                "-o",
                str(work / "workload.json"),
            ]
        )
        ref_s, _ = timed(
            [
                *servesim,
                "replay",
                "--scenario",
                str(work / "scenario.json"),
                "--workload",
                str(work / "workload.json"),
                "--timing-profile",
                str(work / "timing-profile.json"),
                "--output",
                str(work / "reference.json"),
            ]
        )
        dyn_s, _ = timed(
            [
                arguments.dynamo_python,
                __file__,
                str(arguments.trace),
                "--blocks",
                str(arguments.blocks),
                "--dynamo-only",
                str(work / "dynamo.json"),
            ]
        )
        reference = json.loads((work / "reference.json").read_bytes())
        dynamo = json.loads((work / "dynamo.json").read_bytes())
        if arguments.keep:
            arguments.keep.mkdir(parents=True, exist_ok=True)
            for name in ("reference.json", "dynamo.json", "workload.json", "scenario.json"):
                shutil.copyfile(work / name, arguments.keep / name)
    lines = [
        "# Prefix reuse on the Mooncake conversation trace: Dynamo and the reference",
        "",
        "Generated by `python conformance/adapters/dynamo/mooncake_kv.py "
        f"{arguments.trace.name} --blocks {arguments.blocks}"
        + ("" if arguments.output == DEFAULT_OUTPUT else f" --output {arguments.output.name}")
        + "`; do not edit by hand. "
        "KVCACHE.md explains every rule behind these figures.",
        "",
        f"{len(rows):,} requests, {mooncake.WORKERS} workers, round robin, whole prefill, "
        f"max_num_seqs {mooncake.MAX_NUM_SEQS}, limits {mooncake.LIMIT}, fixed timing "
        f"{mooncake.PREFILL_US} us per pass that prefills plus {mooncake.DECODE_US} us per pass "
        f"that decodes; engine blocks of {ENGINE_BLOCK_TOKENS} tokens, "
        f"{arguments.blocks:,} blocks per worker, prefix caching on, trace blocks of "
        f"{TRACE_BLOCK_TOKENS} tokens. Wall time on this shared 2-core machine: reference "
        f"{ref_s:.0f} s, Dynamo {dyn_s:.0f} s.",
        "",
        *compare(rows, dynamo, reference),
        "",
    ]
    arguments.output.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
