"""WEKA agentic sessions with and without a host tier, servesim against Dynamo's host offload.

    python conformance/adapters/dynamo/host_sessions.py WEKA_FILE... [--servesim CMD]

The session files are imported with ``servesim import weka`` (R65: sessions with think times,
64-token prefix hashes, each session ``--stagger`` seconds after the one before) and replayed on
one worker with a small GPU cache, once without a host tier and once per ``--host`` size, through
a servesim implementation of section 19 and through Dynamo's per-token runtime, as
host_cases.py runs a twin (sessions as Mooncake ``session_id`` and ``delay``). Timing: a grid
equal to Dynamo's fixed model. Printed per run, for each side: prompt tokens reused from the GPU
and from the host, host transfers, TTFT percentiles (R27's nearest rank), and how many requests
differ between the two sides in first token, in reuse, in host reuse, in any member.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import host_cases
from servesim_dynamo.fixed_form import fixed_form_grid

#: Scheduler limits above every WEKA request (the largest prompt plus output is under 2^16).
LIMIT = 1 << 16
PREFILL_US = 20_000
DECODE_US = 10_000
BLOCK_TOKENS = 64
BYTES_PER_TOKEN = 2000  # a block is 128,000 bytes
STORE_BYTES_PER_S = 4_000_000_000  # 32 us a block
LOAD_BYTES_PER_S = 8_000_000_000  # 16 us a block


def scenario(gpu_blocks: int, host_blocks: int | None) -> dict[str, Any]:
    """One worker, vllm, whole prefill, a GPU cache of ``gpu_blocks`` and maybe a host tier."""
    cache: dict[str, Any] = {
        "blocks": gpu_blocks,
        "block_tokens": BLOCK_TOKENS,
        "prefix_caching": True,
    }
    if host_blocks is not None:
        cache["host"] = {
            "blocks": host_blocks,
            "bytes_per_token": BYTES_PER_TOKEN,
            "store_bytes_per_s": STORE_BYTES_PER_S,
            "load_bytes_per_s": LOAD_BYTES_PER_S,
        }
    return {
        "document": "scenario",
        "schema_version": "1.8" if host_blocks is not None else "1.1",
        "fleet": {"workers": 1},
        "routing": {"policy": "round_robin"},
        "scheduler": {
            "max_num_seqs": 8,
            "max_batched_tokens": LIMIT,
            "max_model_len": LIMIT,
            "prefill": {"mode": "whole"},
        },
        "kv_cache": cache,
    }


def nearest_rank(values: list[int], percent: int) -> int | None:
    """R27's nearest-rank percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(percent * len(ordered) / 100)) - 1]


def figures(side: host_cases.Outcomes) -> str:
    """Reuse per tier, transfers and TTFT percentiles of one side."""
    requests = side.requests.values()
    reused = sum(r["reused_prompt_tokens"] for r in requests)
    host = sum(r["host_reused_prompt_tokens"] or 0 for r in requests)
    ttft = [r["token_times_us"][0] - r["arrival_us"] for r in requests if r["token_times_us"]]
    stores = [t for t in side.transfers if t[0] == "store"]
    loads = [t for t in side.transfers if t[0] == "load"]
    percentiles = ", ".join(f"p{p} {nearest_rank(ttft, p)}" for p in (50, 90, 99))
    return (
        f"reused GPU {reused - host:,} host {host:,} tokens; stores {len(stores)} "
        f"({sum(t[2] for t in stores):,} blocks), loads {len(loads)} "
        f"({sum(t[2] for t in loads):,} blocks); TTFT us {percentiles}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("weka", nargs="+", type=Path, help="WEKA session files")
    parser.add_argument("--servesim", required=True, help="a servesim replay command (10.0)")
    parser.add_argument("--stagger", default="5", help="seconds between session starts")
    parser.add_argument("--gpu", type=int, default=1024, help="GPU blocks of 64 tokens")
    parser.add_argument("--host", type=int, action="append", help="host blocks (repeatable)")
    parser.add_argument("--verbose", action="store_true", help="print each differing request")
    arguments = parser.parse_args(argv)
    command = shlex.split(arguments.servesim)
    host_cases.PREFILL_US, host_cases.DECODE_US = PREFILL_US, DECODE_US
    with tempfile.TemporaryDirectory(prefix="servesim-dynamo-host-sessions-") as temporary:
        work = Path(temporary)
        imported = work / "workload.json"
        subprocess.run(
            [sys.executable, "-m", "servesim_cli", "import", "weka", "--stagger",
             arguments.stagger, *map(str, arguments.weka), "-o", str(imported)],
            check=True,
        )  # fmt: skip
        workload = json.loads(imported.read_text())
        print(
            f"{len(workload['requests'])} requests in {len(workload.get('sessions', []))} "
            f"sessions, {sum(r['prompt_tokens'] for r in workload['requests']):,} prompt tokens; "
            f"GPU {arguments.gpu} blocks of {BLOCK_TOKENS}",
            flush=True,
        )
        for host in [None, *(arguments.host or [4096])]:
            folder = work / f"host-{host}"
            folder.mkdir()
            document = scenario(arguments.gpu, host)
            grid = fixed_form_grid(PREFILL_US, DECODE_US, 8, LIMIT, LIMIT)
            for kind, value in (
                ("scenario", document),
                ("workload", workload),
                ("timing-profile", grid),
            ):
                (folder / f"{kind}.json").write_text(json.dumps(value))
            started = time.monotonic()
            ours = host_cases.run_servesim(command, folder)
            middle = time.monotonic()
            theirs = host_cases.run_dynamo(document, workload)
            ended = time.monotonic()
            label = "no host tier" if host is None else f"host {host} blocks"
            if isinstance(ours, str):
                print(f"{label}: servesim {ours}", flush=True)
                continue
            members: dict[str, int] = {}
            differing = 0
            for request, mine in ours.requests.items():
                other = theirs.requests[request]
                names = [n for n in host_cases.REQUEST_FIELDS if mine[n] != other[n]]
                differing += bool(names)
                if arguments.verbose and names:
                    print(
                        "   ",
                        request,
                        {n: (mine[n], other[n]) for n in names if n != "token_times_us"},
                    )
                for name in names:
                    members[name] = members.get(name, 0) + 1
            print(
                f"{label}:\n  servesim ({middle - started:.1f} s): {figures(ours)}\n"
                f"  Dynamo ({ended - middle:.1f} s): {figures(theirs)}\n"
                f"  requests differing: {differing} of {len(ours.requests)} ({members or 'none'})"
                + (f"; Dynamo: {'; '.join(theirs.notes)}" if theirs.notes else ""),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
