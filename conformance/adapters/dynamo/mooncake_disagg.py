"""The shared Mooncake trace on a disaggregated fleet, Dynamo against the reference; writes
MOONCAKE-DISAGG.md.

    python conformance/adapters/dynamo/mooncake_disagg.py TRACE.jsonl [--prefill N --decode M]
        [--dynamo-python PY] [--keep DIR]

The trace is imported with ``servesim import mooncake`` (prefix hashes of 512-token blocks).
Scenario 1.6: N prefill workers and M decode workers (default 8 + 8, the 16 workers of
MOONCAKE.md), round robin on both sides, mooncake.py's limits (max_num_seqs 64,
max_batched_tokens and max_model_len 131,072, whole prefill) and fixed-form timing (30 ms per
pass that prefills, 20 ms per pass that decodes), each pool a cache of ``BLOCKS`` blocks of 64
tokens that no worker fills, prefix caching on the prefill side and off on the decode side;
``kv_transfer`` 327,680 bytes per token (a 70B-class model's KV in 16 bits) at 32.768 GB/s,
10 us per token, base latency 0, mode destination_missing (with no decode-side cache hit, the
whole prompt: Dynamo's full_prompt). The reference (``servesim replay``) and the adapter (which
runs Dynamo's disaggregated ``run_trace_replay``) replay the same three documents; the reports
are compared by the harness's agreement metrics (``servesim_conformance.agreement``) and stamp
by stamp (every request's handoff), and the page says how many requests agree exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path[:0] = [str(HERE), str(ROOT / "conformance"), str(ROOT / "reference")]

import mooncake  # noqa: E402

from servesim_conformance.agreement import compare, figures  # noqa: E402

BLOCK_TOKENS = 64
BLOCKS = 262_144
BYTES_PER_TOKEN = 327_680
BANDWIDTH = 32_768_000_000
DEFAULT_OUTPUT = HERE / "MOONCAKE-DISAGG.md"
STAMPS = ("prefill_end_us", "reserved_us", "transfer_end_us", "activation_us", "decode_worker")


def scenario(prefill: int, decode: int, decode_dp: int = 1) -> dict[str, Any]:
    base = mooncake.scenario()

    def cache(prefix: bool) -> dict[str, Any]:
        return {"blocks": BLOCKS, "block_tokens": BLOCK_TOKENS, "prefix_caching": prefix}

    return {
        "document": "scenario",
        "schema_version": "1.6",
        "fleet": {
            "pools": [
                {"name": "prefill", "workers": prefill, "role": "prefill", "kv_cache": cache(True)},
                {
                    "name": "decode",
                    "workers": decode,
                    "role": "decode",
                    "kv_cache": cache(False),
                    **({"dp_size": decode_dp} if decode_dp > 1 else {}),
                },
            ]
        },
        "routing": {"policy": "round_robin"},
        "scheduler": base["scheduler"],
        "kv_transfer": {
            "bytes_per_token": BYTES_PER_TOKEN,
            "bandwidth_bytes_per_s": BANDWIDTH,
            "base_latency_us": 0,
        },
    }


def environment() -> dict[str, str]:
    paths = [ROOT / "reference", ROOT / "cli", ROOT / "conformance", ROOT, HERE]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in paths)}


def timed(command: list[str]) -> tuple[int, float, str]:
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=environment())
    return done.returncode, time.monotonic() - start, done.stderr.strip()[-2000:]


def stamp_table(reference: dict[str, Any], dynamo: dict[str, Any]) -> list[str]:
    """How many requests agree exactly, stamp by stamp."""
    theirs = {entry["id"]: entry for entry in dynamo["requests"]}
    agree: Counter[str] = Counter()
    first_off: dict[str, str] = {}
    total = 0
    for ours in reference["requests"]:
        other = theirs[ours["id"]]
        total += 1
        pairs = [
            ("outcome", ours["outcome"], other["outcome"]),
            ("first_scheduled_us", ours["first_scheduled_us"], other["first_scheduled_us"]),
            ("first_token_us", ours["first_token_us"], other["first_token_us"]),
            ("completion_us", ours["completion_us"], other["completion_us"]),
            ("reused_prompt_tokens", ours["reused_prompt_tokens"], other["reused_prompt_tokens"]),
            ("preemptions", ours["preemptions"], other["preemptions"]),
        ]
        for stamp in STAMPS:
            pairs.append(
                (
                    f"handoff.{stamp}",
                    (ours["handoff"] or {}).get(stamp),
                    (other["handoff"] or {}).get(stamp),
                )
            )
        tokens, other_tokens = ours["token_times_us"], other["token_times_us"]
        if tokens == other_tokens:
            agree["token_times_us"] += 1
        elif "token_times_us" not in first_off:
            index = next(
                (i for i, (a, b) in enumerate(zip(tokens, other_tokens, strict=False)) if a != b),
                min(len(tokens), len(other_tokens)),
            )
            first_off["token_times_us"] = (
                f"`{ours['id']}` from token {index}: {tokens[index : index + 2]}... (reference) / "
                f"{other_tokens[index : index + 2]}... (Dynamo)"
            )
        for name, mine, other_value in pairs:
            if mine == other_value:
                agree[name] += 1
            elif name not in first_off:
                first_off[name] = f"`{ours['id']}`: {mine} (reference) / {other_value} (Dynamo)"
    lines = ["| member | requests equal | first that differs |", "|---|---|---|"]
    for name in list(agree) + [n for n in first_off if n not in agree]:
        lines.append(f"| `{name}` | {agree[name]} of {total} | {first_off.get(name, '')} |")
    return lines


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def agreement_table(reference: dict[str, Any], dynamo: dict[str, Any]) -> list[str]:
    comparison = compare(dynamo, reference)
    lines = [
        "| metric | samples | exact | exact share | max abs (us) | p99 abs (us) | max rel | "
        "p99 rel | null mismatches |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for metric, errors in comparison.errors.items():
        v = figures(errors)
        lines.append(
            f"| `{metric}` | {v['samples']} | {v['exact']} | {_fmt(v['exact_share'])} | "
            f"{v['max_abs_us']} | {v['p99_abs_us']} | {_fmt(v['max_rel'])} | "
            f"{_fmt(v['p99_rel'])} | {v['null_mismatches']} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--prefill", type=int, default=8)
    parser.add_argument("--decode", type=int, default=8)
    parser.add_argument("--decode-dp", type=int, default=1, help="ranks per decode worker")
    parser.add_argument("--dynamo-python", default=sys.executable)
    parser.add_argument("--keep", type=Path, help="keep the documents and reports here")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = arguments.keep or Path(folder)
        work.mkdir(parents=True, exist_ok=True)
        files = {
            "scenario": work / "scenario.json",
            "workload": work / "workload.json",
            "timing-profile": work / "timing-profile.json",
        }
        files["scenario"].write_text(
            json.dumps(scenario(arguments.prefill, arguments.decode, arguments.decode_dp), indent=2)
            + "\n"
        )
        files["timing-profile"].write_text(json.dumps(mooncake.fixed_form_grid(), indent=2) + "\n")
        servesim = [sys.executable, "-m", "servesim_cli"]
        code, _, error = timed(
            [*servesim, "import", "mooncake", str(arguments.trace), "-o", str(files["workload"])]
        )
        if code:
            raise SystemExit(f"servesim import mooncake failed: {error}")
        inputs: list[str] = []
        for name, path in files.items():
            inputs += [f"--{name}", str(path)]
        reference_path, dynamo_path = work / "reference.json", work / "dynamo.json"
        ref_code, ref_s, ref_error = timed(
            [*servesim, "replay", "--quiet", *inputs, "--output", str(reference_path)]
        )
        if ref_code:
            raise SystemExit(f"reference exit {ref_code}: {ref_error}")
        print(f"reference: {ref_s:.0f} s", flush=True)
        dyn_code, dyn_s, dyn_error = timed(
            [
                arguments.dynamo_python,
                str(HERE / "adapter.py"),
                *inputs,
                "--output",
                str(dynamo_path),
            ]
        )
        if dyn_code:
            raise SystemExit(f"adapter exit {dyn_code}: {dyn_error}")
        print(f"adapter: {dyn_s:.0f} s", flush=True)
        reference = json.loads(reference_path.read_text())
        dynamo = json.loads(dynamo_path.read_text())
    summary_ref, summary_dyn = reference["summary"], dynamo["summary"]
    lines = [
        "# Dynamo's disaggregated replay and the reference on the Mooncake trace",
        "",
        "Generated by `python conformance/adapters/dynamo/mooncake_disagg.py "
        f"TRACE --prefill {arguments.prefill} --decode {arguments.decode}"
        + ("" if arguments.decode_dp == 1 else f" --decode-dp {arguments.decode_dp}")
        + ("" if arguments.output == DEFAULT_OUTPUT else f" --output {arguments.output.name}")
        + "` (ai-dynamo 1.6.1); "
        "do not edit by hand. What is run: the script's docstring. Why the two differ: "
        "DISAGG.md.",
        "",
        f"{len(reference['requests'])} requests; {arguments.prefill} prefill + "
        f"{arguments.decode} decode workers"
        + ("" if arguments.decode_dp == 1 else f" of {arguments.decode_dp} ranks")
        + f". Reference {ref_s:.0f} s, adapter (Dynamo) {dyn_s:.0f} s on this shared 2-core "
        "machine.",
        "",
        "| | reference | Dynamo |",
        "|---|---|---|",
    ]
    for name in ("completed", "rejected", "makespan_us"):
        lines.append(f"| {name} | {summary_ref[name]} | {summary_dyn[name]} |")
    for stat in ("ttft_us", "itl_us", "e2e_us", "tpot_us"):
        for p in ("p50", "p90", "p99"):
            lines.append(f"| {stat} {p} | {summary_ref[stat][p]} | {summary_dyn[stat][p]} |")
    for name in ("count", "tokens"):
        lines.append(
            f"| transfers.{name} | {summary_ref['transfers'][name]} | "
            f"{summary_dyn['transfers'][name]} |"
        )
    for p in ("p50", "p99", "max"):
        for stat in ("transfer_us", "reservation_wait_us"):
            lines.append(
                f"| transfers.{stat} {p} | {summary_ref['transfers'][stat][p]} | "
                f"{summary_dyn['transfers'][stat][p]} |"
            )
    lines += ["", "## Agreement metrics (the harness's, conformance/README.md)", ""]
    lines += agreement_table(reference, dynamo)
    lines += ["", "## Request by request", ""]
    lines += stamp_table(reference, dynamo)
    arguments.output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
