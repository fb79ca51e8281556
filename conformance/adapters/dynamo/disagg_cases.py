"""Dynamo's disaggregated replay against SPEC.md section 17, case by case; writes DISAGG-CASES.md.

    python conformance/adapters/dynamo/disagg_cases.py [--dynamo-python PY] [--keep DIR]

The golden disaggregated cases (``golden/valid/disagg-*``, corpus 1.15.0) are timed by
synthetic_linear profiles, which Dynamo's fixed model cannot express, so the suite skips them
for the adapter. This script checks each one's *twin*: the same scenario and workload timed by a
grid equal to Dynamo's fixed model (``PREFILL_US`` per pass that prefills, ``DECODE_US`` per
pass that decodes), through the reference (``servesim replay``) and through the adapter (a
child process, stopped after ``TIMEOUT_S``), which runs Dynamo's disaggregated replay. A twin
the adapter refuses is listed with the feature it names (exit 2). A twin it runs is compared
with the reference report member by member; every ``kv_cache`` member is left out (Dynamo
records no blocks in use, so the adapter writes ``null`` there: DISAGG.md), and the first
difference with the number of differing members is shown, together with the per-request
members that differ (token times, handoff stamps).

Twins are judged against each other, not against a hand derivation (the golden originals have
theirs, under another timing); the explanations are in DISAGG.md and ``differences.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
GOLDEN = ROOT / "golden" / "valid"
PREFILL_US = 300
DECODE_US = 200
TIMEOUT_S = 60

sys.path[:0] = [str(HERE), str(ROOT / "reference"), str(ROOT / "conformance")]

from servesim_dynamo.fixed_form import fixed_form_grid  # noqa: E402

from servesim_conformance.compare import _differences  # noqa: E402
from servesim_conformance.properties import at_current_version  # noqa: E402


def twin(case: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The case's scenario, workload and a fixed-form grid covering every pool's limits."""
    scenario = json.loads((case / "scenario.json").read_text())
    workload = json.loads((case / "workload.json").read_text())
    limits = [scenario["scheduler"]] + [
        pool["scheduler"] for pool in scenario["fleet"].get("pools", []) if "scheduler" in pool
    ]
    grid = fixed_form_grid(
        PREFILL_US,
        DECODE_US,
        max(s["max_num_seqs"] for s in limits),
        max(s["max_batched_tokens"] for s in limits),
        max(s["max_model_len"] for s in limits),
    )
    return scenario, workload, grid


def environment() -> dict[str, str]:
    paths = [ROOT / "reference", ROOT / "cli", ROOT / "conformance", ROOT, HERE]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in paths)}


def run(command: list[str], folder: Path, output: Path) -> tuple[int, str]:
    arguments = [
        f"--scenario={folder / 'scenario.json'}",
        f"--workload={folder / 'workload.json'}",
        f"--timing-profile={folder / 'timing-profile.json'}",
        f"--output={output}",
    ]
    try:
        done = subprocess.run(
            [*command, *arguments],
            capture_output=True,
            text=True,
            check=False,
            env=environment(),
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return -1, f"no result within {TIMEOUT_S} s (killed)"
    lines = done.stderr.strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


def compare(reference: dict[str, Any], dynamo: dict[str, Any]) -> tuple[int, str]:
    """Differing members (``kv_cache`` left out) and a short account of the first few."""
    found = [
        (path, left, right)
        for path, left, right in _differences(reference, dynamo, [])
        if "kv_cache" not in path
    ]
    if not found:
        return 0, "**same** (apart from kv_cache)"
    shown = []
    for path, left, right in found[:3]:
        pointer = "/" + "/".join(str(part) for part in path)
        shown.append(f"`{pointer}` {json.dumps(left)} (reference) / {json.dumps(right)} (Dynamo)")
    return len(found), f"{len(found)} members differ: " + "; ".join(shown)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dynamo-python", default=sys.executable)
    parser.add_argument("--keep", metavar="DIR", help="keep the twins and reports in DIR")
    arguments = parser.parse_args()
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="servesim-dynamo-disagg-") as temporary:
        base = Path(arguments.keep or temporary)
        base.mkdir(parents=True, exist_ok=True)
        for case in sorted(GOLDEN.iterdir()):
            if not case.name.startswith("disagg-"):
                continue
            scenario, workload, grid = twin(case)
            folder = base / case.name
            folder.mkdir(exist_ok=True)
            for name, value in (
                ("scenario", scenario),
                ("workload", workload),
                ("timing-profile", grid),
            ):
                (folder / f"{name}.json").write_text(json.dumps(value, indent=1))
            code, message = run(
                [arguments.dynamo_python, str(HERE / "adapter.py")], folder, folder / "dynamo.json"
            )
            if code == 2:
                text = "refused: " + message.split(": ", 1)[-1].split(":")[0]
            elif code != 0:
                text = f"adapter exit {code}: {message}"
            else:
                ref_code, ref_message = run(
                    [sys.executable, "-m", "servesim_cli", "replay", "--quiet"],
                    folder,
                    folder / "reference.json",
                )
                if ref_code != 0:
                    text = f"reference exit {ref_code}: {ref_message}"
                else:
                    _count, text = compare(
                        json.loads((folder / "reference.json").read_text()),
                        # Dynamo's report 8.0, migrated as the harness does (R37)
                        json.loads(at_current_version((folder / "dynamo.json").read_bytes())),
                    )
            rows.append((case.name, text))
            print(case.name, "|", text, flush=True)
    (HERE / "DISAGG-CASES.md").write_text(page(rows))
    return 0


def page(rows: list[tuple[str, str]]) -> str:
    same = sum(1 for _n, text in rows if text.startswith("**same**"))
    refused = sum(1 for _n, text in rows if text.startswith("refused"))
    ran = len(rows) - refused
    lines = [
        "# Dynamo's disaggregated replay against SPEC.md section 17: the golden cases' twins",
        "",
        "Generated by `python conformance/adapters/dynamo/disagg_cases.py` (ai-dynamo 1.6.1); "
        "do not edit by hand. What a twin is and what is compared: the script's docstring. "
        f"Timing: a grid equal to Dynamo's fixed model, {PREFILL_US} us per pass that "
        f"prefills, {DECODE_US} us per pass that decodes. Every difference is explained in "
        "DISAGG.md, with a minimal case (`differences.json`).",
        "",
        f"**{same} of {ran} twins run agree** with the reference member by member (every "
        f"`kv_cache` member left out); {refused} are refused by the adapter, naming the feature.",
        "",
        "| golden case (twin) | reference against Dynamo |",
        "|---|---|",
    ]
    lines += [f"| `{name}` | {text} |" for name, text in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
