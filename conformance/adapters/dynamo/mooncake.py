"""Dynamo against the reference on the shared Mooncake trace, byte for byte; writes MOONCAKE.md.

    python conformance/adapters/dynamo/mooncake.py TRACE.jsonl     # in the tox dynamo env

The trace is imported with ``servesim import mooncake``; the scenario (16 workers, round robin,
whole prefill, limits above every request of the trace so that nothing is rejected) and a
timing profile in the one form Dynamo expresses exactly (a grid equal to Dynamo's fixed model:
30 ms per pass that prefills, plus 20 ms per pass that decodes) are written beside it. Both
the reference (``servesim replay``) and the adapter replay them; the page says whether the
reports are the same bytes and, if not, where they first differ. It takes several minutes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from servesim_dynamo.fixed_form import fixed_form_grid as fixed_form

HERE = Path(__file__).resolve().parent
ADAPTER = HERE / "adapter.py"

WORKERS = 16
MAX_NUM_SEQS = 64
LIMIT = 131072  # max_batched_tokens and max_model_len: above the trace's largest context
PREFILL_US = 30_000
DECODE_US = 20_000


def scenario(dp_size: int = 1) -> dict[str, Any]:
    """WORKERS scheduler ranks: WORKERS workers, or with ``dp_size`` d > 1 WORKERS / d workers
    of d attention-DP ranks each (scenario 1.4, R77, R78)."""
    fleet: dict[str, Any] = {"workers": WORKERS}
    if dp_size > 1:
        fleet = {"workers": WORKERS // dp_size, "dp_size": dp_size}
    return {
        "document": "scenario",
        "schema_version": "1.0" if dp_size == 1 else "1.4",
        "fleet": fleet,
        "routing": {"policy": "round_robin"},
        "scheduler": {
            "max_num_seqs": MAX_NUM_SEQS,
            "max_batched_tokens": LIMIT,
            "max_model_len": LIMIT,
            "prefill": {"mode": "whole"},
        },
    }


def fixed_form_grid() -> dict[str, Any]:
    """A grid equal to Dynamo's fixed model: PREFILL_US * [P > 0] + DECODE_US * [D > 0]."""
    return fixed_form(PREFILL_US, DECODE_US, MAX_NUM_SEQS, LIMIT, LIMIT)


#: The prefix-caching run of the same trace (mooncake_kv.py), summarised for this page.
KV_PARAGRAPH = [
    "**With prefix caching** (engine blocks of 64 tokens, 8 per 512-token trace block, a cache "
    "no worker fills): `mooncake_kv.py` replays the trace through the reference and through "
    "Dynamo's `run_trace_replay`; both reuse 14,629,696 of 144,793,823 prompt tokens (ratio "
    "0.10104), and every request's reused tokens agree (MOONCAKE-KV.md; the rules behind it, "
    "and where Dynamo differs from SPEC.md section 11, in KVCACHE.md).",
    "",
]


def timed(command: list[str]) -> tuple[int, float, str]:
    """Exit code, wall seconds and standard error of a command."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return done.returncode, time.perf_counter() - started, done.stderr.strip()


def figures(report: dict[str, Any]) -> str:
    summary = report["summary"]
    return (
        f"{summary['completed']} completed, {summary['rejected']} rejected, "
        f"{summary['steps']} steps, makespan {summary['makespan_us']} us, "
        f"TTFT p50 {summary['ttft_us']['p50']} us / p99 {summary['ttft_us']['p99']} us, "
        f"ITL p50 {summary['itl_us']['p50']} us, E2E p99 {summary['e2e_us']['p99']} us"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="a Mooncake JSONL trace")
    parser.add_argument("--output", type=Path, help="default: MOONCAKE.md, MOONCAKE-DP<d>.md")
    parser.add_argument(
        "--dp-size",
        type=int,
        default=1,
        choices=[1, 2, 4, 8, 16],
        help="ranks per worker, the WORKERS ranks kept (section 15; default 1)",
    )
    arguments = parser.parse_args()
    dp_size = arguments.dp_size
    if arguments.output is None:
        arguments.output = HERE / ("MOONCAKE.md" if dp_size == 1 else f"MOONCAKE-DP{dp_size}.md")
    from servesim_conformance.compare import first_difference

    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        files = {
            "scenario": work / "scenario.json",
            "workload": work / "workload.json",
            "timing-profile": work / "timing-profile.json",
        }
        files["scenario"].write_text(json.dumps(scenario(dp_size), indent=2) + "\n")
        files["timing-profile"].write_text(json.dumps(fixed_form_grid(), indent=2) + "\n")
        servesim = [sys.executable, "-m", "servesim_cli"]
        code, _, error = timed(
            [*servesim, "import", "mooncake", str(arguments.trace), "-o", str(files["workload"])]
        )
        if code:
            raise SystemExit(f"servesim import mooncake failed: {error}")
        inputs: list[str] = []
        for name, path in files.items():
            inputs += [f"--{name}", str(path)]
        reference = work / "reference.json"
        dynamo = work / "dynamo.json"
        ref_code, ref_s, ref_error = timed(
            [*servesim, "replay", *inputs, "--output", str(reference)]
        )
        dyn_code, dyn_s, dyn_error = timed(
            [sys.executable, str(ADAPTER), *inputs, "--output", str(dynamo)]
        )
        requests = len(json.loads(files["workload"].read_text())["requests"])
        lines = [
            "# Dynamo and the reference on the Mooncake conversation trace",
            "",
            "Generated by `python conformance/adapters/dynamo/mooncake.py "
            f"{arguments.trace.name}{'' if dp_size == 1 else f' --dp-size {dp_size}'}` in the tox "
            "`dynamo` environment; do not edit by hand.",
            "",
            f"Workload: {requests} requests imported with `servesim import mooncake`. Scenario: "
            + (
                f"{WORKERS} workers"
                if dp_size == 1
                else f"{WORKERS // dp_size} workers of {dp_size} attention-DP ranks (R78, R83; "
                "Dynamo's dp_size)"
            )
            + f", round robin, whole prefill, max_num_seqs {MAX_NUM_SEQS} per rank, "
            f"max_batched_tokens and max_model_len {LIMIT} (above every request, so none is "
            f"rejected). Timing: a grid equal to Dynamo's fixed model, {PREFILL_US} us per pass "
            f"that prefills plus {DECODE_US} us per pass that decodes, which Dynamo runs exactly.",
            "",
            "| implementation | exit | wall time on this machine | figures |",
            "|---|---|---|---|",
        ]
        reports = {}
        for label, code, seconds, path, error in (
            ("reference (`servesim replay`)", ref_code, ref_s, reference, ref_error),
            ("Dynamo 1.6.1 (adapter)", dyn_code, dyn_s, dynamo, dyn_error),
        ):
            value = json.loads(path.read_bytes()) if code == 0 else None
            reports[label] = (path.read_bytes() if code == 0 else None, value)
            shown = figures(value) if value is not None else error[-300:]
            lines.append(f"| {label} | {code} | {seconds:.0f} s | {shown} |")
        (ref_bytes, ref_value), (dyn_bytes, dyn_value) = reports.values()
        lines.append("")
        if ref_bytes is not None and ref_bytes == dyn_bytes:
            verdict = (
                f"**The two reports are the same bytes** ({len(ref_bytes):,} bytes): every "
                "request's routing, admission time and every token time, every statistic and "
                "every worker counter agree."
            )
        elif ref_value is not None and dyn_value is not None:
            verdict = f"**The reports differ**: {first_difference(ref_value, dyn_value)}."
        else:
            verdict = "**One of the replays did not write a report** (see the exit codes)."
        lines += [verdict, "", *(KV_PARAGRAPH if dp_size == 1 else [])]
        arguments.output.write_text("\n".join(lines))
        print(f"wrote {arguments.output}: {verdict}")
        return 0 if ref_bytes is not None and ref_bytes == dyn_bytes else 1


if __name__ == "__main__":
    sys.exit(main())
