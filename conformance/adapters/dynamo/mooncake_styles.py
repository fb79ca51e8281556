"""The three scheduler styles on the shared Mooncake trace, Dynamo against the reference;
writes MOONCAKE-STYLES.md.

    python conformance/adapters/dynamo/mooncake_styles.py TRACE.jsonl [--blocks N ...]
        [--dynamo-python PY]

Each style (R88) replays the trace on 16 workers, round robin, with mooncake.py's limits and
fixed-form timing (30 ms per pass that prefills, 20 ms per pass that decodes), engine blocks of
64 tokens, prefix caching off, and for each ``--blocks`` value that many blocks per worker
(default: 262,144, which nothing fills, and 2,048, where requests are preempted or retracted).
vllm and trtllm prefill whole prompts; sglang chunks with SGLang's default
``chunked_prefill_size`` 8,192 (R88: sglang always chunks). The reference replays the workload
``servesim import mooncake`` makes with a scenario 1.5 cache; Dynamo replays the trace file
through its documented ``dynamo.replay.run_trace_replay`` with the style as its ``backend``
(mapping.engine_args' options), in the Python given by ``--dynamo-python``. Records are matched
to trace lines as mooncake_kv.py matches them.

The figures are agreement figures, not a conformance verdict: the styles' rules where Dynamo
and SPEC.md section 16 differ (differences.json: sglang-retraction-ties, sglang-reject-page-
slack, trtllm-footprint-last-token, and KVCACHE.md's for the vllm style's preemptions) show
here as requests whose times differ. Per style and cache: requests completed and rejected,
readmissions (R49's preemptions plus R91's retractions), the requests whose first token and
whose last token come at the same microsecond on both sides, and TTFT and end-to-end latency
statistics of each.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mooncake
from mooncake_kv import ENGINE_BLOCK_TOKENS, TRACE_BLOCK_TOKENS, match_records, trace_lines
from servesim_dynamo.mapping import FixedTiming, engine_args

HERE = Path(__file__).resolve().parent
STYLES = ("vllm", "sglang", "trtllm")
DEFAULT_BLOCKS = (262_144, 2_048)
SGLANG_CHUNK = 8_192
DEFAULT_OUTPUT = HERE / "MOONCAKE-STYLES.md"


def style_scenario(style: str, blocks: int) -> dict[str, Any]:
    """mooncake.py's scenario with the style and a cache of ``blocks`` (scenario 1.5)."""
    scenario = mooncake.scenario()
    scheduler = dict(scenario["scheduler"], style=style)
    if style == "sglang":
        scheduler["prefill"] = {"mode": "chunked", "max_chunk_tokens": SGLANG_CHUNK}
    cache = {"blocks": blocks, "block_tokens": ENGINE_BLOCK_TOKENS, "prefix_caching": False}
    return {**scenario, "schema_version": "1.5", "scheduler": scheduler, "kv_cache": cache}


def dynamo_engine(style: str, blocks: int) -> dict[str, Any]:
    """The adapter's engine arguments for the style, with the cache as Dynamo's."""
    args = engine_args(
        style_scenario(style, blocks), FixedTiming(mooncake.PREFILL_US, mooncake.DECODE_US)
    )
    args.update(block_size=ENGINE_BLOCK_TOKENS, num_gpu_blocks=blocks, enable_prefix_caching=False)
    return args


def run_dynamo(trace: Path, style: str, blocks: int, output: Path) -> None:
    """The Dynamo half (needs ai-dynamo): per-request records to ``output``."""
    replay = importlib.import_module("dynamo.replay")  # only in the Python with ai-dynamo
    report = replay.run_trace_replay(
        [str(trace)],
        extra_engine_args={"engine": dynamo_engine(style, blocks)},
        num_workers=mooncake.WORKERS,
        router_mode="round_robin",
        trace_block_size=TRACE_BLOCK_TOKENS,
        capture_per_request=True,
    ).to_dict()
    output.write_text(json.dumps({"per_request": report["per_request"]}))


def us(milliseconds: float | None) -> int | None:
    return None if milliseconds is None else round(milliseconds * 1000)


def stats(values: list[int]) -> str:
    """mean / p50 / p99 in milliseconds (R28's nearest-rank percentiles)."""
    if not values:
        return "n/a"
    ordered = sorted(values)

    def rank(p: int) -> int:
        return ordered[max(0, -(-p * len(ordered) // 100) - 1)]

    return f"{sum(ordered) / len(ordered) / 1000:,.0f} / {rank(50) / 1000:,.0f} / {rank(99) / 1000:,.0f}"


def compare(
    rows: list[dict[str, Any]], dynamo: dict[str, Any], reference: dict[str, Any]
) -> list[str]:
    """One table row per side and the agreement counts, as Markdown cells."""
    records = match_records(rows, dynamo["per_request"])
    first = min(row["timestamp"] for row in rows) * 1000
    ours = {entry["id"]: entry for entry in reference["requests"]}
    same_first = same_last = 0
    ref_ttft, ref_e2e, dyn_ttft, dyn_e2e = [], [], [], []
    dyn_done = dyn_readmit = 0
    for line, record in records.items():
        entry = ours[f"mooncake-L{line + 1}"]
        done = record.get("terminal_status", "completed") == "completed"
        arrival = entry["arrival_us"]
        first_token = us(record.get("first_token_ms"))
        last_token = us(record.get("last_token_ms"))
        if done:
            dyn_done += 1
            dyn_readmit += record.get("readmission_count", 0)
            if first_token is not None:
                dyn_ttft.append(first_token + round(first) - arrival)
            if last_token is not None:
                dyn_e2e.append(last_token + round(first) - arrival)
        if entry["outcome"] == "completed":
            ref_ttft.append(entry["ttft_us"])
            ref_e2e.append(entry["e2e_us"])
        if done and entry["outcome"] == "completed":
            same_first += (
                first_token is not None and first_token + round(first) == entry["first_token_us"]
            )
            same_last += (
                last_token is not None and last_token + round(first) == entry["completion_us"]
            )
    summary = reference["summary"]
    kv = summary["kv_cache"]
    return [
        f"{summary['completed']:,} / {dyn_done:,}",
        f"{kv['preemptions'] + kv['retractions']:,} / {dyn_readmit:,}",
        f"{same_first:,}",
        f"{same_last:,}",
        f"{stats(ref_ttft)} / {stats(dyn_ttft)}",
        f"{stats(ref_e2e)} / {stats(dyn_e2e)}",
    ]


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(
            f"{' '.join(command[:3])} ... failed ({done.returncode}): {done.stderr[-500:]}"
        )
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="the Mooncake JSONL trace")
    parser.add_argument("--blocks", type=int, nargs="+", default=list(DEFAULT_BLOCKS))
    parser.add_argument("--styles", nargs="+", default=list(STYLES), choices=STYLES)
    parser.add_argument("--dynamo-python", default=sys.executable, help="a Python with ai-dynamo")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--dynamo-only", nargs=3, metavar=("STYLE", "BLOCKS", "OUT"), help=argparse.SUPPRESS
    )
    arguments = parser.parse_args()
    if arguments.dynamo_only:
        style, blocks, out = arguments.dynamo_only
        run_dynamo(arguments.trace.resolve(), style, int(blocks), Path(out))
        return 0
    rows = trace_lines(arguments.trace)
    table = [
        "| style | blocks per worker | completed (reference / Dynamo) | readmissions (reference / Dynamo) "
        "| same first-token time | same last-token time | TTFT ms mean / p50 / p99 (reference / Dynamo) "
        "| E2E ms mean / p50 / p99 (reference / Dynamo) | wall s (reference / Dynamo) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
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
        (work / "timing-profile.json").write_text(json.dumps(mooncake.fixed_form_grid()))
        for blocks in arguments.blocks:
            for style in arguments.styles:
                (work / "scenario.json").write_text(json.dumps(style_scenario(style, blocks)))
                ref_s = timed(
                    [
                        *servesim,
                        "replay",
                        "--quiet",
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
                dyn_s = timed(
                    [
                        arguments.dynamo_python,
                        __file__,
                        str(arguments.trace),
                        "--dynamo-only",
                        style,
                        str(blocks),
                        str(work / "dynamo.json"),
                    ]
                )
                cells = compare(
                    rows,
                    json.loads((work / "dynamo.json").read_bytes()),
                    json.loads((work / "reference.json").read_bytes()),
                )
                line = (
                    f"| {style} | {blocks:,} | "
                    + " | ".join(cells)
                    + f" | {ref_s:.0f} / {dyn_s:.0f} |"
                )
                table.append(line)
                print(line, flush=True)
    lines = [
        "# The scheduler styles on the Mooncake conversation trace: Dynamo and the reference",
        "",
        "Generated by `python conformance/adapters/dynamo/mooncake_styles.py "
        f"{arguments.trace.name}`; do not edit by hand. What is run and compared: the script's "
        "docstring; why the styles differ where they do: differences.json (RESULTS.md) and STYLES.md.",
        "",
        f"{len(rows):,} requests, {mooncake.WORKERS} workers, round robin, max_num_seqs "
        f"{mooncake.MAX_NUM_SEQS}, limits {mooncake.LIMIT}, fixed timing {mooncake.PREFILL_US} us "
        f"per pass that prefills plus {mooncake.DECODE_US} us per pass that decodes; engine blocks of "
        f"{ENGINE_BLOCK_TOKENS} tokens, prefix caching off; vllm and trtllm whole prefill, sglang "
        f"chunks of {SGLANG_CHUNK:,} tokens. Wall times on this shared 2-core machine.",
        "",
        *table,
        "",
    ]
    arguments.output.write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
