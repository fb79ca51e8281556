"""The three scheduler styles on the shared Mooncake trace, Dynamo against the reference;
writes MOONCAKE-STYLES.md.

    python conformance/adapters/dynamo/mooncake_styles.py TRACE.jsonl [--blocks N ...]
        [--dynamo-python PY]

Each style (R88) replays the trace on 16 workers, round robin, with mooncake.py's limits and
fixed-form timing (30 ms per pass that prefills, 20 ms per pass that decodes), engine blocks of
64 tokens, prefix caching off, and for each ``--blocks`` value that many blocks per worker
(default: 262,144, which nothing fills, and 2,048 and 1,024, where the cache binds).
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
statistics of each. A Dynamo replay that has not ended after ``--timeout`` seconds is killed
and its row says so, as does the row of one that fails (its log, which grows by gigabytes a
minute when its sglang scheduler spins, goes to a temporary file, never into memory).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mooncake
from mooncake_kv import ENGINE_BLOCK_TOKENS, TRACE_BLOCK_TOKENS, match_records, trace_lines
from servesim_dynamo.mapping import FixedTiming, engine_args

HERE = Path(__file__).resolve().parent
STYLES = ("vllm", "sglang", "trtllm")
DEFAULT_BLOCKS = (262_144, 2_048, 1_024)
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
    timing = FixedTiming(mooncake.PREFILL_US, mooncake.DECODE_US)
    return engine_args(style_scenario(style, blocks), timing)


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

    figures = (sum(ordered) / len(ordered), rank(50), rank(99))
    return " / ".join(f"{figure / 1000:,.0f}" for figure in figures)


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
        stats(ref_ttft),
        stats(dyn_ttft),
        stats(ref_e2e),
        stats(dyn_e2e),
    ]


def unfinished(reference: dict[str, Any], missing: str) -> list[str]:
    """The cells of a row whose Dynamo replay gave no records: the reference's side only."""
    summary = reference["summary"]
    kv = summary["kv_cache"]
    ttft = [entry["ttft_us"] for entry in reference["requests"] if entry["outcome"] == "completed"]
    e2e = [entry["e2e_us"] for entry in reference["requests"] if entry["outcome"] == "completed"]
    return [
        f"{summary['completed']:,} / {missing}",
        f"{kv['preemptions'] + kv['retractions']:,} / -",
        "-",
        "-",
        stats(ttft),
        "-",
        stats(e2e),
        "-",
    ]


class Failed(Exception):
    """A replay that exited with an error; the message is the last line of its log."""


def timed(command: list[str], log: TextIO, timeout: float | None = None) -> float | None:
    """Seconds the command took, or None if it was killed after ``timeout`` seconds.

    Its output goes to ``log`` (a file): a spinning replay can log gigabytes.
    """
    started = time.perf_counter()
    env = {**os.environ, "DYN_LOG": os.environ.get("DYN_LOG", "error")}
    log.seek(0)
    log.truncate()
    try:
        done = subprocess.run(command, stdout=log, stderr=log, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode:
        log.seek(0, os.SEEK_END)
        log.seek(max(0, log.tell() - 2000))
        lines = [line for line in log.read().splitlines() if line.strip()]
        raise Failed(lines[-1] if lines else f"exit code {done.returncode}")
    return time.perf_counter() - started


HEADER = (
    "| style | blocks per worker | completed (reference / Dynamo) "
    "| readmissions (reference / Dynamo) | same first-token time | same last-token time "
    "| TTFT ms, reference | TTFT ms, Dynamo | E2E ms, reference | E2E ms, Dynamo "
    "| wall s (reference / Dynamo) |"
)


def arguments_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="the Mooncake JSONL trace")
    parser.add_argument("--blocks", type=int, nargs="+", default=list(DEFAULT_BLOCKS))
    parser.add_argument("--styles", nargs="+", default=list(STYLES), choices=STYLES)
    parser.add_argument("--dynamo-python", default=sys.executable, help="a Python with ai-dynamo")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds before a Dynamo replay is killed"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--dynamo-only", nargs=3, metavar=("STYLE", "BLOCKS", "OUT"), help=argparse.SUPPRESS
    )
    return parser


def replay_reference(work: Path, log: TextIO) -> float | None:
    """servesim replay of the scenario in ``work`` (the reference side)."""
    files = ("scenario", "workload", "timing-profile")
    options = [part for name in files for part in (f"--{name}", str(work / f"{name}.json"))]
    command = [sys.executable, "-m", "servesim_cli", "replay", "--quiet", *options]
    return timed([*command, "--output", str(work / "reference.json")], log)


def row(
    arguments: argparse.Namespace,
    lines: list[dict[str, Any]],
    work: Path,
    log: TextIO,
    style: str,
    blocks: int,
) -> str:
    """One style and cache: both replays, compared."""
    (work / "scenario.json").write_text(json.dumps(style_scenario(style, blocks)))
    reference_s = replay_reference(work, log)
    dynamo_only = ["--dynamo-only", style, str(blocks), str(work / "dynamo.json")]
    command = [arguments.dynamo_python, __file__, str(arguments.trace), *dynamo_only]
    reference = json.loads((work / "reference.json").read_bytes())
    try:
        dynamo_s = timed(command, log, arguments.timeout)
    except Failed as error:
        dynamo_s, missing = None, f"failed: {str(error).replace('|', '/')}"
    else:
        missing = f"not ended after {arguments.timeout:.0f} s"
    if dynamo_s is None:
        cells = unfinished(reference, missing)
    else:
        dynamo = json.loads((work / "dynamo.json").read_bytes())
        cells = compare(lines, dynamo, reference)
    walls = f"{reference_s:.0f} / " + ("-" if dynamo_s is None else f"{dynamo_s:.0f}")
    return f"| {style} | {blocks:,} | " + " | ".join(cells) + f" | {walls} |"


def over_the_cache(blocks_per_worker: list[int], lines: list[dict[str, Any]]) -> list[str]:
    """Per cache, how many requests need more tokens than a worker's whole cache.

    The reference rejects them at arrival (R10); Dynamo's replay stops on them
    (KVCACHE.md, R10), so where there are any Dynamo's vllm and sglang rows can fail.
    """
    lines = []
    for blocks in blocks_per_worker:
        tokens = blocks * ENGINE_BLOCK_TOKENS
        over = sum(line["input_length"] + line["output_length"] > tokens for line in lines)
        lines.append(
            f"- {blocks:,} blocks per worker ({tokens:,} tokens): {over:,} requests need "
            "more (prompt + output): the reference rejects them at arrival (R10; sglang's "
            "R90 also those within a page of the cache), Dynamo's replay does not (KVCACHE.md, "
            "R10)."
        )
    return ["", *lines]


def page(arguments: argparse.Namespace, lines: list[dict[str, Any]], table: list[str]) -> str:
    count = len(lines)
    return "\n".join(
        [
            "# The scheduler styles on the Mooncake conversation trace: Dynamo and the reference",
            "",
            "Generated by `python conformance/adapters/dynamo/mooncake_styles.py "
            f"{arguments.trace.name}`; do not edit by hand. What is run and compared: the "
            "script's docstring; why the styles differ where they do: differences.json "
            "(RESULTS.md) and STYLES.md.",
            "",
            f"{count:,} requests, {mooncake.WORKERS} workers, round robin, max_num_seqs "
            f"{mooncake.MAX_NUM_SEQS}, limits {mooncake.LIMIT}, fixed timing "
            f"{mooncake.PREFILL_US} us per pass that prefills plus {mooncake.DECODE_US} us per "
            f"pass that decodes; engine blocks of {ENGINE_BLOCK_TOKENS} tokens, prefix caching "
            f"off; vllm and trtllm whole prefill, sglang chunks of {SGLANG_CHUNK:,} tokens. "
            "Latencies as mean / p50 / p99. Wall times on this shared 2-core machine.",
            *over_the_cache(arguments.blocks, lines),
            "",
            HEADER,
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *table,
            "",
        ]
    )


def main() -> int:
    arguments = arguments_parser().parse_args()
    arguments.trace = arguments.trace.resolve()
    if arguments.dynamo_only:
        style, blocks, out = arguments.dynamo_only
        run_dynamo(arguments.trace, style, int(blocks), Path(out))
        return 0
    lines = trace_lines(arguments.trace)  # read once: every row is matched against it
    table = []
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryFile("w+") as log:
        work = Path(folder)
        servesim = [sys.executable, "-m", "servesim_cli", "import", "mooncake"]
        timed([*servesim, str(arguments.trace), "-o", str(work / "workload.json")], log)
        (work / "timing-profile.json").write_text(json.dumps(mooncake.fixed_form_grid()))
        for blocks in arguments.blocks:
            for style in arguments.styles:
                table.append(row(arguments, lines, work, log, style, blocks))
                print(table[-1], flush=True)
    arguments.output.write_text(page(arguments, lines, table))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failed as error:
        sys.exit(f"mooncake_styles.py: the reference failed: {error}")
