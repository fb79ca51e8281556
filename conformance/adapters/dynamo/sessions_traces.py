"""Sessions and the closed loop on real traces, Dynamo against the reference; writes SESSIONS.md.

    python conformance/adapters/dynamo/sessions_traces.py [--mooncake TRACE.jsonl] [--weka DIR]

Each trace is imported with ``servesim import`` (Mooncake lines with ``session_id`` and WEKA
session files become workload 1.2 sessions, R65), then replayed twice, open (every session
starts at its recorded time, each later turn its think time after the previous answer, R59) and
as a closed loop of ``--in-flight`` units (R61), through the reference and through the adapter
(Dynamo's multi-turn replay for the arrivals, its per-token runtime for the tokens). The
scenario is mooncake.py's (round robin, whole prefill, a grid equal to Dynamo's fixed model),
with limits above every request (2^18 tokens). The page gives, per run, whether the two
reports are the same bytes and, if not, how many requests differ in arrival, first token or
completion and the first differing member. Run in the tox ``dynamo`` environment; it takes minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mooncake
from mooncake import ADAPTER, HERE, fixed_form_grid, scenario, timed

#: max_batched_tokens and max_model_len: above every request of both traces (WEKA's largest
#: prompt plus output is 197,889 tokens), so that nothing is rejected.
LIMIT = 1 << 18

TIMES = ("arrival_us", "worker", "first_token_us", "completion_us", "outcome")


def differing_requests(reference: dict[str, Any], dynamo: dict[str, Any]) -> dict[str, int]:
    """How many requests differ in each of ``TIMES`` (matched by position: workload order)."""
    counts = dict.fromkeys(TIMES, 0)
    for ours, theirs in zip(reference["requests"], dynamo["requests"], strict=True):
        for member in TIMES:
            counts[member] += ours[member] != theirs[member]
    return counts


def run(label: str, workload: Path, loop: int | None, work: Path) -> list[str]:
    """One row of the page: both replays of ``workload``, open or as a closed loop."""
    from servesim_conformance.compare import first_difference

    document = scenario()
    if loop is not None:
        document["schema_version"] = "1.3"
        document["closed_loop"] = {"max_in_flight": loop}
    files = {"scenario": work / f"{label}-scenario.json", "workload": workload}
    files["scenario"].write_text(json.dumps(document, indent=2) + "\n")
    files["timing-profile"] = work / "timing-profile.json"
    files["timing-profile"].write_text(json.dumps(fixed_form_grid(), indent=2) + "\n")
    inputs: list[str] = []
    for name, path in files.items():
        inputs += [f"--{name}", str(path)]
    reports = {}
    cells = []
    for who, command in (
        ("reference", [sys.executable, "-m", "servesim_cli", "replay"]),
        ("dynamo", [sys.executable, str(ADAPTER)]),
    ):
        output = work / f"{label}-{who}.json"
        code, seconds, error = timed([*command, *inputs, "--output", str(output)])
        reports[who] = output.read_bytes() if code == 0 else None
        cells.append(f"exit {code}, {seconds:.0f} s" + (f" ({error[-200:]})" if code else ""))
    workload_value = json.loads(workload.read_text())
    shape = (
        f"{len(workload_value['requests'])} requests in "
        f"{len(workload_value.get('sessions', []))} sessions"
    )
    mode = "open" if loop is None else f"closed loop, max_in_flight {loop}"
    ours, theirs = reports["reference"], reports["dynamo"]
    if ours is not None and ours == theirs:
        verdict = f"**same bytes** ({len(ours):,} bytes)"
    elif ours is not None and theirs is not None:
        a, b = json.loads(ours), json.loads(theirs)
        counts = differing_requests(a, b)
        shown = ", ".join(f"{member} {count}" for member, count in counts.items())
        verdict = f"differ: requests differing by member: {shown}; first: {first_difference(a, b)}"
    else:
        verdict = "no comparison (a replay failed)"
    return [f"| {label} | {shape} | {mode} | {cells[0]} | {cells[1]} | {verdict} |"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mooncake", type=Path, help="a Mooncake JSONL trace with sessions")
    parser.add_argument("--weka", type=Path, help="a folder of WEKA agentic session files")
    parser.add_argument("--in-flight", type=int, default=8, help="the closed loop's units")
    parser.add_argument("--output", type=Path, default=HERE / "SESSIONS.md")
    arguments = parser.parse_args()
    mooncake.LIMIT = LIMIT  # the scenario and grid of mooncake.py, with room for WEKA's prompts
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        traces: list[tuple[str, list[str]]] = []
        if arguments.weka is not None:
            sessions = sorted(str(path) for path in arguments.weka.glob("*.json"))
            traces.append(("WEKA agentic sessions", ["weka", *sessions]))
        if arguments.mooncake is not None:
            traces.append(("Mooncake conversation trace", ["mooncake", str(arguments.mooncake)]))
        for label, source in traces:
            workload = work / f"{label}.json".replace(" ", "-")
            code, _, error = timed(
                [sys.executable, "-m", "servesim_cli", "import", *source, "-o", str(workload)]
            )
            if code:
                raise SystemExit(f"servesim import {source[0]} failed: {error}")
            for loop in (None, arguments.in_flight):
                rows += run(label.replace(" ", "-"), workload, loop, work)
    lines = [
        "# Sessions and the closed loop on real traces: Dynamo and the reference",
        "",
        "Generated by `python conformance/adapters/dynamo/sessions_traces.py` in the tox "
        "`dynamo` environment; do not edit by hand. Scenario as MOONCAKE.md's (round robin, "
        "whole prefill, a grid equal to Dynamo's fixed model); each trace imported with "
        "`servesim import` (R65) and replayed open (R59) and as a closed loop (R61). The "
        "adapter takes arrivals and workers from Dynamo's multi-turn replay "
        "(`run_trace_replay` with `session_id`, `delay`, `replay_concurrency`) and token times "
        "from its per-token runtime (README.md). Differences: differences.json.",
        "",
        "| trace | workload | mode | reference | Dynamo (adapter) | reports |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    arguments.output.write_text("\n".join(lines))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
