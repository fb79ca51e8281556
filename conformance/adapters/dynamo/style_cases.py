"""Dynamo's sglang and trtllm backends against SPEC.md section 16, case by case; writes STYLES.md.

    python conformance/adapters/dynamo/style_cases.py      # in the tox dynamo env

The golden style cases (``golden/valid/sglang-*``, ``trtllm-*``, ``styles-side-by-side-*``) are
timed by synthetic_linear profiles and most have a KV cache: the suite skips them for Dynamo
(its fixed model expresses no synthetic profile, and the adapter refuses caches because Dynamo
records no blocks in use, R52). The fixed-form corpus cases (``dynamo-fixed-styles-*``,
``dynamo-fixed-sglang-*``) check the styles without a cache through the adapter, byte for byte.
This script checks what a cache adds: each golden style case's *twin*, the same scenario and
workload timed by a grid equal to Dynamo's fixed model (``PREFILL_US`` per pass that prefills,
``DECODE_US`` per pass that decodes), runs through the reference (``servesim replay``) and
through Dynamo's per-token runtime (the one the adapter uses) with the case's cache as Dynamo's
engine cache (``num_gpu_blocks``, ``block_size``, ``enable_prefix_caching``; hashes as a
Mooncake trace's ``hash_ids``) and the case's style as its ``backend``. Every request's
outcome, first admission, token times and readmissions (R49's preemptions plus R91's
retractions) are compared. A vllm or trtllm twin that chunks gets ``max_chunk_tokens`` =
``max_batched_tokens``, for Dynamo has no per-request chunk cap (RESULTS.md, chunk-cap): what
is compared is the style, not R18.

Twins are judged against each other, not against a hand derivation (the golden originals have
theirs, under another timing); where they differ, STYLES.md names the first differing request
and the rule, and ``differences.json`` holds the explanation with the minimal case.
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from servesim_dynamo import dynamo_runtime
from servesim_dynamo.fixed_form import fixed_form_grid
from servesim_dynamo.mapping import FixedTiming, Unsupported, engine_args, style
from servesim_dynamo.timeline import DynamoResult, microseconds

HERE = Path(__file__).resolve().parent
GOLDEN = HERE.parents[2] / "golden" / "valid"
PREFIXES = ("sglang-", "trtllm-", "styles-side-by-side-")
PREFILL_US = 300
DECODE_US = 200

#: Seconds a twin may take in Dynamo (each takes well under one); a replay that never ends is
#: itself a finding (sglang-last-decode-retracts-chunked: SPEC.md R91 rule 2's case).
DYNAMO_TIMEOUT_S = 20

#: Per request id: (outcome, first scheduled, token times, readmissions).
Outcomes = dict[str, tuple[str, int | None, list[int], int]]


def twin(case: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The case's scenario (chunk cap lifted under vllm and trtllm), workload and fixed grid."""
    scenario = json.loads((case / "scenario.json").read_text())
    workload = json.loads((case / "workload.json").read_text())
    scheduler = scenario["scheduler"]
    if style(scheduler) != "sglang" and scheduler["prefill"]["mode"] == "chunked":
        scheduler["prefill"]["max_chunk_tokens"] = scheduler["max_batched_tokens"]
    grid = fixed_form_grid(
        PREFILL_US,
        DECODE_US,
        scheduler["max_num_seqs"],
        scheduler["max_batched_tokens"],
        scheduler["max_model_len"],
    )
    return scenario, workload, grid


def why_not(scenario: dict[str, Any]) -> str | None:
    """Why a twin cannot be stated to Dynamo's one-engine, one-rank runtime, or None."""
    fleet = scenario["fleet"]
    if "pools" in fleet:
        return "pools of different styles or limits: one engine per replay (pools-one-engine)"
    if fleet.get("dp_size", 1) > 1:
        return "ranks: the per-token runtime runs one DP1 worker; ranks.py reads no chunk pass"
    if fleet["workers"] != 1:
        return "more than one worker"
    return None


def engine(scenario: dict[str, Any]) -> dict[str, Any]:
    """Dynamo's engine for the twin: the adapter's, with the case's cache as the engine's."""
    args = engine_args(scenario, FixedTiming(PREFILL_US, DECODE_US))
    if scenario["scheduler"]["prefill"]["mode"] == "chunked":
        args["enable_chunked_prefill"] = True
    return args


def run_dynamo(scenario: dict[str, Any], workload: dict[str, Any]) -> Outcomes:
    """The twin through Dynamo's per-token runtime, as a Mooncake trace (hashes kept)."""
    requests = workload["requests"]
    first = min(request["arrival_us"] for request in requests)
    block = workload.get("prefix_hash_block_tokens", 1 << 20)
    rows = []
    for number, request in enumerate(requests):
        # a Mooncake row's hash_ids must cover its prompt; blocks the workload leaves without
        # a hash (a partial last block, or no hashes at all) get hashes of their own, which
        # nothing shares (R47: an unhashed block is never reused)
        hashes = list(request.get("prefix_hashes", []))
        count = max(1, -(-request["prompt_tokens"] // block))
        hashes += [(1 << 40) + number * 4096 + index for index in range(len(hashes), count)]
        rows.append(
            {
                "timestamp": (request["arrival_us"] - first) / 1000,
                "input_length": request["prompt_tokens"],
                "output_length": request["max_output_tokens"],
                "hash_ids": hashes,
            }
        )
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.jsonl"
        trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
        payload = {
            "spec": {
                "version": 1,
                "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
                "engine": {"rank": engine(scenario)},
                "requests": [],
            },
            "traffic": {
                "source_type": "trace",
                "trace_path": str(trace),
                "trace_format": "mooncake",
                "trace_block_size": block,
            },
        }
        try:
            text = dynamo_runtime.runtime().run_replay_with_artifacts_json(json.dumps(payload))
        except RuntimeError as error:
            raise DynamoResult(f"Dynamo's replay failed: {error}") from None
    output = json.loads(text)
    tokens: dict[str, list[int]] = {}
    for event in output["artifacts"]["outputs"]:
        if event["token_id"] is not None and not event["rejected"]:
            at = microseconds(event["observed_at_ms"], "token") + first
            tokens.setdefault(event["request_id"], []).append(at)
    outcomes: Outcomes = {}
    for record in output["report"]["per_request"]:
        line = int(str(record["session_id"]).rsplit("_", 1)[1]) - 1  # request_1 is line 1
        admitted = record["first_admit_ms"]
        outcomes[requests[line]["id"]] = (
            "completed" if record["terminal_status"] == "completed" else "rejected",
            None if admitted is None else microseconds(admitted, "admission") + first,
            tokens.get(record["uuid"], []),
            record["readmission_count"],
        )
    return outcomes


def _child(scenario: dict[str, Any], workload: dict[str, Any], queue: Any) -> None:
    try:
        queue.put(run_dynamo(scenario, workload))
    except (DynamoResult, Unsupported) as error:
        queue.put(str(error))


def run_dynamo_bounded(scenario: dict[str, Any], workload: dict[str, Any]) -> Outcomes | str:
    """``run_dynamo`` in a child process stopped after ``DYNAMO_TIMEOUT_S``: the outcomes,
    or what went wrong (a native replay that spins cannot be interrupted in-process)."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child, args=(scenario, workload, queue))
    child.start()
    child.join(DYNAMO_TIMEOUT_S)
    if child.is_alive():
        child.kill()
        child.join()
        return f"the replay did not end within {DYNAMO_TIMEOUT_S} s (killed)"
    if queue.empty():
        return f"the replay process exited with code {child.exitcode} and no result"
    result: Outcomes | str = queue.get()
    return result


def run_reference(folder: Path) -> tuple[Outcomes | None, str]:
    """The twin through ``servesim replay``: per request outcomes, or None and why."""
    output = folder / "reference.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "servesim_cli",
            "replay",
            "--quiet",
            *(f"--{name}={folder / name}.json" for name in ("scenario", "workload")),
            f"--timing-profile={folder / 'timing-profile.json'}",
            f"--output={output}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return None, f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    report = json.loads(output.read_bytes())
    return {
        entry["id"]: (
            entry["outcome"],
            entry["first_scheduled_us"],
            entry["token_times_us"],
            entry["preemptions"] + entry["retractions"],
        )
        for entry in report["requests"]
    }, ""


def verdict(reference: Outcomes, dynamo: Outcomes) -> str:
    """``same`` or the first request (in workload order) whose outcomes differ."""
    for request, ours in reference.items():
        theirs = dynamo.get(request)
        if theirs != ours:
            fields = ("outcome", "first scheduled", "token times", "readmissions")
            diff = [
                f"{name} {mine} (reference) / {other} (Dynamo)"
                for name, mine, other in zip(fields, ours, theirs or (None,) * 4, strict=True)
                if mine != other
            ]
            return f"differ at {request}: " + "; ".join(diff)
    return "**same**"


def main() -> int:
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="servesim-dynamo-styles-") as temporary:
        for case in sorted(GOLDEN.iterdir()):
            if not case.name.startswith(PREFIXES):
                continue
            scenario, workload, grid = twin(case)
            named = style(scenario["scheduler"])
            reason = why_not(scenario)
            if reason is not None:
                rows.append((case.name, named, f"not run: {reason}"))
                continue
            folder = Path(temporary) / case.name
            folder.mkdir()
            for name, value in (
                ("scenario", scenario),
                ("workload", workload),
                ("timing-profile", grid),
            ):
                (folder / f"{name}.json").write_text(json.dumps(value, indent=1))
            reference, why = run_reference(folder)
            dynamo = run_dynamo_bounded(scenario, workload)
            if isinstance(dynamo, str):
                rows.append((case.name, named, f"Dynamo: {dynamo}"))
                print(case.name, "|", named, "|", dynamo, flush=True)
                continue
            text = f"reference {why}" if reference is None else verdict(reference, dynamo)
            rows.append((case.name, named, text))
            print(case.name, "|", named, "|", text, flush=True)
    (HERE / "STYLES.md").write_text(page(rows))
    return 0


def page(rows: list[tuple[str, str, str]]) -> str:
    same = sum(1 for _n, _s, text in rows if text == "**same**")
    ran = sum(1 for _n, _s, text in rows if not text.startswith("not run"))
    lines = [
        "# Dynamo's scheduler styles against SPEC.md section 16",
        "",
        "Generated by `python conformance/adapters/dynamo/style_cases.py` (in the tox dynamo "
        "environment, ai-dynamo 1.6.1); do not edit by hand. What a twin is and what is "
        "compared: the script's docstring. Timing: a grid equal to Dynamo's fixed model, "
        f"{PREFILL_US} us per pass that prefills, {DECODE_US} us per pass that decodes. The "
        "explanations of the differences, with minimal cases: `differences.json` (RESULTS.md).",
        "",
        f"**{same} of {ran} twins run agree** (every request's outcome, first admission, token "
        f"times and readmissions); {len(rows) - ran} cannot be stated to Dynamo's runtime.",
        "",
        "| golden case (twin) | style | reference against Dynamo |",
        "|---|---|---|",
    ]
    lines += [f"| `{name}` | {named} | {text} |" for name, named, text in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
