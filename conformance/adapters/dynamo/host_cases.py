"""Dynamo's ``native_host_offload`` against SPEC.md section 19, case by case; writes HOST.md.

    python conformance/adapters/dynamo/host_cases.py [--servesim CMD] [--case GLOB]...

The golden cases of section 19 (valid cases whose scenario is 1.8 or workload 1.3: the host
tier, R129-R140, and continuing turns, R125-R128) are timed by synthetic_linear profiles and
have a KV cache: the suite skips them for Dynamo (no synthetic model; no blocks in use per
pass, R52). This script compares what can be compared: each case's *twin*, the same scenario
and workload timed by a grid equal to Dynamo's fixed model (``PREFILL_US`` per pass that
prefills, ``DECODE_US`` per pass that decodes), through a servesim implementation of section 19
(``--servesim``, a ``servesim replay``-style command writing report 10.0) and through Dynamo's
per-token runtime (the adapter's) with the case's cache as the engine's cache and its host tier
as ``native_host_offload`` (``mapping.host_offload_args``), the workload as a Mooncake trace
(``hash_ids`` from ``prefix_hashes``; sessions as ``session_id`` and ``delay``).

Compared per request: outcome, first admission, token times, readmissions, the prompt tokens
reused at the first admission in all and from the host (R137), and ``load_wait_us`` (R140);
per worker: host stores, stored blocks, loads, loaded blocks, host evictions, the host part of
every admission's reuse and skipped blocks (R140). Dynamo's side is read from its per-request
records (``admission_history``: ``g1_reused_input_tokens``, ``host_reused_input_tokens``) and
its ``artifacts.host_offload_events`` (``store_submitted``, ``load_queued`` with
``completes_at_ms``, ``evicted``, ``capacity_retry``). Twins are judged against each other, not
against the golden derivations (those are under another timing).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import multiprocessing
import shlex
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servesim_dynamo import dynamo_runtime
from servesim_dynamo.fixed_form import fixed_form_grid
from servesim_dynamo.mapping import FixedTiming, Unsupported, engine_args, style
from servesim_dynamo.timeline import DynamoResult, microseconds

HERE = Path(__file__).resolve().parent
GOLDEN = HERE.parents[2] / "golden" / "valid"
#: A pass that prefills lasts PREFILL_US, one that decodes DECODE_US (both: the sum). Chosen
#: near the golden cases' synthetic steps (5 + P + 10 D us for prompts of 16 to 128 tokens),
#: so that their 8 and 16 us-a-block transfers still overlap passes as they were meant to.
PREFILL_US = 50
DECODE_US = 15
DYNAMO_TIMEOUT_S = 30

#: The per-request members compared, in this order.
REQUEST_FIELDS = (
    "arrival_us",
    "outcome",
    "first_scheduled_us",
    "token_times_us",
    "readmissions",
    "reused_prompt_tokens",
    "host_reused_prompt_tokens",
    "load_wait_us",
)
#: The per-worker host members compared (R140), plus Dynamo's retries (not a servesim member).
HOST_FIELDS = (
    "stores",
    "stored_blocks",
    "loads",
    "loaded_blocks",
    "evictions",
    "reused_tokens",
    "skipped_blocks",
)


@dataclass
class Outcomes:
    """One side's figures of a twin: per request id, and the worker's host counters."""

    requests: dict[str, dict[str, Any]]
    host: dict[str, Any] | None
    transfers: list[tuple[str, str, int, int, int]] = field(default_factory=list)
    """Every host transfer: (kind, request, blocks, submitted_us, end_us), in that order."""
    notes: list[str] = field(default_factory=list)


def section_19(case: Path) -> bool:
    """Whether a valid golden case uses section 19: scenario 1.8 or workload 1.3."""
    scenario = json.loads((case / "scenario.json").read_text())
    workload = json.loads((case / "workload.json").read_text())
    return bool(scenario["schema_version"] == "1.8" or workload["schema_version"] == "1.3")


#: The first hash given to a block the workload leaves without one (``hashed``).
OWN_HASHES = 1 << 40


def hashed(workload: dict[str, Any]) -> dict[str, Any]:
    """The workload with a hash for every hashed block of every prompt: a request's missing
    hashes (all of them, or those after its list) get values of its own, which nothing shares.

    A Mooncake row's ``hash_ids`` must cover its prompt, and Dynamo's engine hashes, registers
    and stores every full block (``unhashed-blocks-stored``), where a servesim block without a
    hash has no identity (R47) and is never registered, reused or stored (R131). So both sides
    of a twin get the same hashes: what differs is then the host tier, not the input.
    """
    block = workload.get("prefix_hash_block_tokens")
    if block is None:
        return workload
    changed = dict(workload, requests=[dict(r) for r in workload["requests"]])
    for number, request in enumerate(changed["requests"]):
        hashes = list(request.get("prefix_hashes", []))
        count = -(-request["prompt_tokens"] // block)
        own = OWN_HASHES + number * 4096
        request["prefix_hashes"] = hashes + [own + i for i in range(len(hashes), count)]
    return changed


def twin(case: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The case's scenario and workload (``hashed``), and the fixed-form grid covering its
    limits."""
    scenario = json.loads((case / "scenario.json").read_text())
    workload = hashed(json.loads((case / "workload.json").read_text()))
    scheduler = scenario["scheduler"]
    grid = fixed_form_grid(
        PREFILL_US,
        DECODE_US,
        scheduler["max_num_seqs"],
        scheduler["max_batched_tokens"],
        scheduler["max_model_len"],
    )
    return scenario, workload, grid


def why_not(scenario: dict[str, Any]) -> str | None:
    """Why a twin cannot be stated to Dynamo's one-worker per-token runtime, or None."""
    fleet = scenario["fleet"]
    if "pools" in fleet:
        return "pools: one engine per replay (pools-one-engine), disaggregated host refused"
    if fleet.get("dp_size", 1) > 1:
        return "ranks: host transfers are recorded by the one-rank runtime only (host-not-stated)"
    if fleet["workers"] != 1:
        return "more than one worker"
    if "stop_at_us" in scenario:
        return "stop time: the per-token runtime has none (stop-time)"
    if "closed_loop" in scenario:
        return "closed loop: not stated to the per-token runtime by this script"
    if "kv_cache" not in scenario:
        return "no KV cache"
    if style(scenario["scheduler"]) != "vllm":
        return "style other than vllm (native_host_offload is vllm only)"
    if scenario["scheduler"]["prefill"]["mode"] == "chunked":
        return "chunked prefill: Dynamo has no per-request chunk cap (chunk-cap)"
    return None


def engine(scenario: dict[str, Any]) -> dict[str, Any]:
    """Dynamo's engine for the twin: the adapter's, with the case's cache and host tier."""
    return engine_args(scenario, FixedTiming(PREFILL_US, DECODE_US))


def trace_rows(workload: dict[str, Any]) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
    """The workload as Mooncake rows (every request a session, its own or a lone one) and each
    request's (session id, turn) key, in workload order."""
    requests = workload["requests"]
    first = min(request["arrival_us"] for request in requests)
    block = workload.get("prefix_hash_block_tokens", 1 << 20)
    turns: Counter[str] = Counter()
    rows, keys = [], []
    for number, request in enumerate(requests):
        # a Mooncake row's hash_ids must cover its prompt (twin gives every block a hash)
        hashes = list(request.get("prefix_hashes", []))
        count = max(1, -(-request["prompt_tokens"] // block))
        hashes += [OWN_HASHES + number * 4096 + index for index in range(len(hashes), count)]
        name = request.get("session", f"lone-{number}")
        turn = turns[name]
        turns[name] += 1
        row: dict[str, Any] = {
            "session_id": name,
            "input_length": request["prompt_tokens"],
            "output_length": request["max_output_tokens"],
            "hash_ids": hashes,
        }
        if turn == 0:
            row["timestamp"] = (request["arrival_us"] - first) / 1000
        else:
            row["delay"] = request.get("think_time_us", 0) / 1000
        rows.append(row)
        keys.append((name, turn))
    return rows, keys


def run_dynamo(scenario: dict[str, Any], workload: dict[str, Any]) -> Outcomes:
    """The twin through Dynamo's per-token runtime, as a Mooncake trace."""
    requests = workload["requests"]
    first = min(request["arrival_us"] for request in requests)
    rows, keys = trace_rows(workload)
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
                "trace_block_size": workload.get("prefix_hash_block_tokens", 1 << 20),
            },
        }
        try:
            text = dynamo_runtime.runtime().run_replay_with_artifacts_json(json.dumps(payload))
        except RuntimeError as error:
            raise DynamoResult(f"Dynamo's replay failed: {error}") from None
    output = json.loads(text)
    notes: list[str] = []
    tokens: dict[str, list[int]] = {}
    for event in output["artifacts"]["outputs"]:
        if event["token_id"] is not None and not event["rejected"]:
            at = microseconds(event["observed_at_ms"], "token") + first
            tokens.setdefault(event["request_id"], []).append(at)
    events = output["artifacts"].get("host_offload_events") or []
    queued: dict[int, tuple[str, int]] = {}  # transfer id -> (request, end minus submission)
    completed: set[int] = set()
    kinds: Counter[str] = Counter()
    blocks: Counter[str] = Counter()
    submissions: list[tuple[str, str, int, int, int]] = []  # request by Dynamo's uuid
    for entry in events:
        event = entry["event"]
        kinds[event["event"]] += 1
        blocks[event["event"]] += len(event.get("block_hashes", []))
        if event["event"] in ("store_submitted", "load_queued"):
            submitted = microseconds(entry["observed_at_ms"], "transfer submission") + first
            end = microseconds(event["completes_at_ms"], "transfer end") + first
            kind = "store" if event["event"] == "store_submitted" else "load"
            n = len(event["block_hashes"])
            submissions.append((kind, entry["request_id"], n, submitted, end))
            if kind == "load":
                queued[event["transfer_id"]] = (entry["request_id"], end - submitted)
        elif event["event"] == "load_completed":
            completed.add(event["transfer_id"])
    load_wait: Counter[str] = Counter()  # R140: over the loads that completed
    for transfer, (request_id, wait) in queued.items():
        if transfer in completed:
            load_wait[request_id] += wait
    by_key = {
        (str(r["session_id"]), int(r["turn_index"])): r for r in output["report"]["per_request"]
    }
    has_host = "host" in scenario["kv_cache"]
    outcomes: dict[str, dict[str, Any]] = {}
    host_reused = 0
    for request, key in zip(requests, keys, strict=True):
        record = by_key[key]
        released = microseconds(record["arrival_time_ms"], "arrival") + first
        if key[1] > 0 and request["arrival_us"] > released:
            # R59 takes the later of the recorded time and the release; Dynamo's delay only
            notes.append(f"{request['id']} recorded after its release (Dynamo: delay only)")
        history = sorted(record["admission_history"], key=lambda a: a["admission_ordinal"])
        host_reused += sum(a.get("host_reused_input_tokens", 0) for a in history)
        admitted = record["first_admit_ms"]
        uuid = record["uuid"]
        outcomes[request["id"]] = {
            "arrival_us": released,
            "outcome": "completed" if record["terminal_status"] == "completed" else "rejected",
            "first_scheduled_us": None
            if admitted is None
            else microseconds(admitted, "admission") + first,
            "token_times_us": tokens.get(uuid, []),
            "readmissions": record["readmission_count"],
            "reused_prompt_tokens": history[0]["reused_input_tokens"] if history else 0,
            "host_reused_prompt_tokens": history[0].get("host_reused_input_tokens", 0)
            if history
            else 0,
            "load_wait_us": load_wait[uuid] if has_host else None,
        }
    host = None
    if has_host:
        host = {
            "stores": kinds["store_submitted"],
            "stored_blocks": blocks["store_submitted"],
            "loads": kinds["load_queued"],
            "loaded_blocks": blocks["load_queued"],
            "evictions": kinds["evicted"],
            "reused_tokens": host_reused,
            "skipped_blocks": None,  # Dynamo retries a store it cannot take (capacity_retry)
        }
        for extra in ("capacity_retry", "load_cancelled", "structurally_unfittable"):
            if kinds[extra]:
                notes.append(f"Dynamo {extra} x{kinds[extra]}")
    ids = {
        record["uuid"]: request["id"]
        for request, record in zip(requests, (by_key[k] for k in keys), strict=True)
    }
    transfers = sorted((k, ids.get(r, r), n, t, e) for k, r, n, t, e in submissions)
    return Outcomes(outcomes, host, sorted(transfers, key=lambda t: (t[3], t[0], t[1])), notes)


def _child(scenario: dict[str, Any], workload: dict[str, Any], queue: Any) -> None:
    try:
        queue.put(run_dynamo(scenario, workload))
    except (DynamoResult, Unsupported, KeyError) as error:
        queue.put(f"{type(error).__name__}: {error}")


def run_dynamo_bounded(scenario: dict[str, Any], workload: dict[str, Any]) -> Outcomes | str:
    """``run_dynamo`` in a child process stopped after ``DYNAMO_TIMEOUT_S``."""
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


def run_servesim(command: list[str], folder: Path) -> Outcomes | str:
    """The twin through a servesim implementation of section 19 (report 10.0)."""
    output = folder / "servesim.json"
    done = subprocess.run(
        [
            *command,
            *(f"--{name}={folder / name}.json" for name in ("scenario", "workload")),
            f"--timing-profile={folder / 'timing-profile.json'}",
            f"--output={output}",
            "--trace",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    report = json.loads(output.read_bytes())
    requests = {
        entry["id"]: {
            "arrival_us": entry["arrival_us"],
            "outcome": entry["outcome"],
            "first_scheduled_us": entry["first_scheduled_us"],
            "token_times_us": entry["token_times_us"],
            "readmissions": entry["preemptions"] + entry["retractions"],
            "reused_prompt_tokens": entry["reused_prompt_tokens"],
            "host_reused_prompt_tokens": entry.get("host_reused_prompt_tokens"),
            "load_wait_us": entry.get("load_wait_us"),
        }
        for entry in report["requests"]
    }
    host = report["workers"][0].get("host")
    if host is not None:
        host = {name: host[name] for name in HOST_FIELDS}
    transfers = [
        (t["kind"], t["request"], len(t["blocks"]), t["submitted_us"], t["end_us"])
        for t in report.get("host_transfers") or []
    ]
    return Outcomes(requests, host, sorted(transfers, key=lambda t: (t[3], t[0], t[1])))


def differences(ours: Outcomes, theirs: Outcomes) -> list[str]:
    """Every differing member: per request (workload order), then the host counters."""
    found = []
    for request, mine in ours.requests.items():
        other = theirs.requests.get(request)
        if other is None:
            found.append(f"{request}: missing in Dynamo")
            continue
        for name in REQUEST_FIELDS:
            if mine[name] != other[name]:
                found.append(f"{request}.{name} {mine[name]} / {other[name]}")
    if ours.transfers != theirs.transfers:
        only_ours = [t for t in ours.transfers if t not in theirs.transfers]
        only_theirs = [t for t in theirs.transfers if t not in ours.transfers]
        found.append(f"transfers {_listed(only_ours)} / {_listed(only_theirs)}")
    if ours.host != theirs.host:
        for name in HOST_FIELDS:
            counted = None if ours.host is None else ours.host[name]
            recorded = None if theirs.host is None else theirs.host[name]
            unrecorded = name == "skipped_blocks" and recorded is None and counted == 0
            if counted != recorded and not unrecorded:
                found.append(f"host.{name} {counted} / {recorded}")
    return found


def _listed(transfers: list[tuple[str, str, int, int, int]]) -> str:
    """Transfers as ``kind request xN [submitted, end]``, or ``none``."""
    if not transfers:
        return "none"
    return ", ".join(f"{k} {r} x{n} [{t}, {e}]" for k, r, n, t, e in transfers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--servesim",
        default=f"{shlex.quote(sys.executable)} -m servesim_cli replay --quiet",
        help="the servesim command (default: the reference's servesim replay)",
    )
    parser.add_argument("--case", action="append", default=[], help="glob over case names")
    parser.add_argument("--page", type=Path, default=HERE / "HOST.md")
    parser.add_argument("--golden", type=Path, default=GOLDEN, help="the valid cases' folder")
    arguments = parser.parse_args(argv)
    command = shlex.split(arguments.servesim)
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="servesim-dynamo-host-") as temporary:
        for case in sorted(arguments.golden.iterdir()):
            if not (case / "scenario.json").exists() or not section_19(case):
                continue
            if arguments.case and not any(fnmatch.fnmatch(case.name, g) for g in arguments.case):
                continue
            scenario, workload, grid = twin(case)
            reason = why_not(scenario)
            if reason is None:
                try:
                    engine(scenario)
                except Unsupported as error:
                    reason = f"{error.feature}: {error.detail}"
            if reason is not None:
                rows.append((case.name, f"not run: {reason}"))
                print(case.name, "| not run:", reason, flush=True)
                continue
            folder = Path(temporary) / case.name
            folder.mkdir()
            for name, value in (
                ("scenario", scenario),
                ("workload", workload),
                ("timing-profile", grid),
            ):
                (folder / f"{name}.json").write_text(json.dumps(value, indent=1))
            ours = run_servesim(command, folder)
            theirs = run_dynamo_bounded(scenario, workload)
            if isinstance(ours, str) or isinstance(theirs, str):
                text = f"servesim: {ours}" if isinstance(ours, str) else f"Dynamo: {theirs}"
            else:
                found = differences(ours, theirs)
                text = "**same**" if not found else "differ: " + "; ".join(found)
                if theirs.notes:
                    text += " (" + "; ".join(theirs.notes) + ")"
            rows.append((case.name, text))
            print(case.name, "|", text, flush=True)
    arguments.page.write_text(page(rows, arguments.servesim))
    return 0


def page(rows: list[tuple[str, str]], command: str) -> str:
    same = sum(1 for _n, text in rows if text.startswith("**same**"))
    ran = sum(1 for _n, text in rows if not text.startswith("not run"))
    lines = [
        "# Dynamo's native_host_offload against SPEC.md section 19",
        "",
        "Generated by `python conformance/adapters/dynamo/host_cases.py` (ai-dynamo "
        f"{dynamo_runtime.version()}); do not edit by hand. What a twin is and what is "
        f"compared: the script's docstring. Timing: a grid equal to Dynamo's fixed model, "
        f"{PREFILL_US} us per pass that prefills, {DECODE_US} us per pass that decodes. "
        f"servesim side: `{command.split(' -m ')[-1] if ' -m ' in command else command}`. "
        "Each differing member is `servesim / Dynamo`; the explanations, with minimal cases: "
        "`differences.json`.",
        "",
        f"**{same} of {ran} twins run agree**; {len(rows) - ran} cannot be stated to "
        "Dynamo's per-token runtime.",
        "",
        "| golden case (twin) | servesim against Dynamo |",
        "|---|---|",
    ]
    lines += [f"| `{name}` | {text} |" for name, text in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
