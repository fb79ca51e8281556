"""The minimal cases of the host tier's differences (differences.json), Dynamo against servesim.

    python conformance/adapters/dynamo/host_probes.py [--servesim CMD]   # needs ai-dynamo 1.6.1

Each probe is a small scenario 1.8 and workload 1.1 (one worker, vllm, blocks of 16 tokens,
``max_num_seqs`` 8, whole prefill; host blocks of 16,000 bytes: 16 us a block on a 1 GB/s store
lane, 8 us on a 2 GB/s load lane), timed by a grid equal to Dynamo's fixed model (50 us per pass
that prefills, 15 per pass that decodes). It runs through a servesim implementation of section
19 and through Dynamo's per-token runtime exactly as host_cases.py runs a twin, and prints every
member that differs (``servesim / Dynamo``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import host_cases
from servesim_dynamo.fixed_form import fixed_form_grid

#: One request: (id, arrival_us, prompt_tokens, prefix_hashes), one output token; or with its
#: max_output_tokens after them.
Request = tuple[str, int, int, list[int]] | tuple[str, int, int, list[int], int]


def documents(
    requests: list[Request], gpu: int = 8, host: int = 16, store: int = 1_000_000_000
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A probe's scenario and workload."""
    scenario = {
        "document": "scenario",
        "schema_version": "1.8",
        "fleet": {"workers": 1},
        "routing": {"policy": "round_robin"},
        "scheduler": {
            "max_num_seqs": 8,
            "max_batched_tokens": 512,
            "max_model_len": 4096,
            "prefill": {"mode": "whole"},
        },
        "kv_cache": {
            "blocks": gpu,
            "block_tokens": 16,
            "prefix_caching": True,
            "host": {
                "blocks": host,
                "bytes_per_token": 1000,
                "store_bytes_per_s": store,
                "load_bytes_per_s": 2_000_000_000,
            },
        },
    }
    workload = {
        "document": "workload",
        "schema_version": "1.1",
        "prefix_hash_block_tokens": 16,
        "requests": [
            {
                "id": request[0],
                "arrival_us": request[1],
                "prompt_tokens": request[2],
                "max_output_tokens": request[4] if len(request) > 4 else 1,
                "prefix_hashes": request[3],
            }
            for request in requests
        ],
    }
    return scenario, workload


SEVEN = list(range(11, 18))
OTHER_SEVEN = list(range(21, 28))


def continuing() -> tuple[dict[str, Any], dict[str, Any]]:
    """Turn t1 continues t0 (R125: workload 1.3, ``session_prompts_extend``); X, between the
    turns, takes t0's GPU blocks, so t1's prefix comes from the host pool."""
    scenario, workload = documents(
        [
            ("t0", 0, 32, [1, 2], 33),
            ("X", 100, 112, SEVEN),
            ("t1", 0, 80, [1, 2, 3, 4, 5]),
        ],
        gpu=8,
    )
    workload["schema_version"] = "1.3"
    workload["session_prompts_extend"] = True
    workload["sessions"] = [{"id": "s"}]
    workload["requests"][0]["session"] = "s"
    workload["requests"][2]["session"] = "s"
    return scenario, workload


#: name -> (what it shows, scenario, workload)
PROBES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "fence": (
        "X takes 3 of A's cached GPU blocks while A's store is in flight (50 to 114): Dynamo "
        "holds X's pass until 114 and never stores X's blocks; R130 fences nothing",
        *documents([("A", 0, 64, [1, 2, 3, 4]), ("X", 60, 112, SEVEN)]),
    ),
    "fence-then-no-host-hit": (
        "the fence probe, then Z evicts X's GPU blocks but block 0 and Y (X's prompt) arrives: "
        "servesim loads X's blocks 1 to 5 (R133's cap), Dynamo stored none of them",
        *documents(
            [
                ("A", 0, 64, [1, 2, 3, 4]),
                ("X", 60, 112, SEVEN),
                ("Z", 300, 112, OTHER_SEVEN),
                ("Y", 600, 112, SEVEN),
            ],
            host=32,
        ),
    ),
    "capped-run-loaded": (
        "C's GPU hit is A's block 0 and A's blocks 1 to 3 are resident in the host pool: R133 "
        "caps the run at floor(63 / 16) - 1 = 2 blocks, Dynamo loads all 3 and recomputes the "
        "last",
        *documents(
            [("A", 0, 64, [1, 2, 3, 4]), ("X", 200, 112, SEVEN), ("C", 400, 64, [1, 2, 3, 4])]
        ),
    ),
    "lru-ties": (
        "B's store needs 2 of the 6 host entries: R132 evicts A's deepest blocks (3, 2), Dynamo "
        "A's blocks 2 and 0 (one store's entries share a recency; ties by block hash); B2 "
        "evicts A's block 0 from the GPU, so C loads A's blocks 0 and 1 in servesim and "
        "computes them in Dynamo",
        *documents(
            [
                ("A", 0, 64, [1, 2, 3, 4]),
                ("B", 140, 64, [5, 6, 7, 8]),
                ("B2", 300, 64, [5, 6, 7, 8]),
                ("C", 500, 48, [1, 2, 3]),
            ],
            gpu=5,
            host=6,
        ),
    ),
    "cohort-too-big": (
        "A's 4 blocks offered to a host pool of 2: R131 stores 2 and skips 2, Dynamo stores none "
        "(structurally unfittable)",
        *documents([("A", 0, 64, [1, 2, 3, 4])], host=2),
    ),
    "full-pool-not-retried": (
        "B's 2 blocks meet a pool of 4 with A's 3 entries pending (a 100 MB/s lane, 160 us a "
        "block): R131 stores B's block 0 and skips block 1 (D's both); Dynamo stores neither "
        "(capacity_retry) and, B and D having completed, never retries",
        *documents(
            [
                ("A", 0, 48, [1, 2, 3]),
                ("B", 60, 32, [5, 6]),
                ("D", 200, 32, [7, 8]),
                ("E", 600, 32, [9, 10]),
            ],
            host=4,
            store=100_000_000,
        ),
    ),
    "full-pool-retried": (
        "as full-pool-not-retried, B decoding 40 tokens (to 695): Dynamo retries B's store at "
        "its passes and stores both blocks once A's store completes (530); R131 skipped B's "
        "block 1 for good",
        *documents(
            [
                ("A", 0, 48, [1, 2, 3]),
                ("B", 60, 32, [5, 6], 40),
                ("E", 900, 32, [9, 10]),
            ],
            host=4,
            store=100_000_000,
        ),
    ),
    "touch-while-waiting": (
        "C waits at 265 with a host run of A's 2 entries and no GPU block for them (R and E "
        "hold all 10); E's store at its step end needs 2 of the 11 full entries: servesim "
        "evicts A's (C's offer touched nothing, R133), Dynamo touches C's prompt at every "
        "lookup",
        *documents(
            [
                ("A", 0, 32, [1, 2]),
                ("W", 100, 32, [5, 6]),
                ("R", 200, 112, list(range(20, 27)), 40),
                ("E", 255, 32, [30, 31]),
                ("C", 260, 48, [1, 2, 3]),
            ],
            gpu=10,
            host=11,
        ),
    ),
    "answer-blocks-stored": (
        "t1 continues t0 (R125-R127): servesim stores t0's two answer blocks as well as its "
        "prompt blocks (R131) and t1 loads all four; Dynamo stores prompt blocks only, and its "
        "trace replay's answer tokens are random, so t1 loads t0's 2 prompt blocks",
        *continuing(),
    ),
    "two-loads-same-entries": (
        "C and C2 both need A's 4 resident entries at 600: R134 gives each a load of the same "
        "entries (the second queued behind the first on the lane)",
        *documents(
            [
                ("A", 0, 64, [1, 2, 3, 4]),
                ("X", 200, 112, SEVEN),
                ("C", 600, 80, [1, 2, 3, 4, 9]),
                ("C2", 600, 80, [1, 2, 3, 4, 10]),
            ],
            gpu=16,
        ),
    ),
}


def run(name: str, command: list[str], folder: Path) -> str:
    """One probe, both sides: the differing members, or ``**same**``."""
    _what, scenario, workload = PROBES[name]
    grid = fixed_form_grid(host_cases.PREFILL_US, host_cases.DECODE_US, 8, 512, 4096)
    for kind, value in (("scenario", scenario), ("workload", workload), ("timing-profile", grid)):
        (folder / f"{kind}.json").write_text(json.dumps(value, indent=1))
    ours = host_cases.run_servesim(command, folder)
    theirs = host_cases.run_dynamo_bounded(scenario, workload)
    if isinstance(ours, str) or isinstance(theirs, str):
        return f"servesim: {ours}" if isinstance(ours, str) else f"Dynamo: {theirs}"
    found = host_cases.differences(ours, theirs)
    text = "**same**" if not found else "; ".join(found)
    return text + (" (" + "; ".join(theirs.notes) + ")" if theirs.notes else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--servesim",
        default=f"{shlex.quote(sys.executable)} -m servesim_cli replay --quiet",
        help="the servesim command (default: the reference's servesim replay)",
    )
    parser.add_argument("probe", nargs="*", help="probes to run (default: all)")
    arguments = parser.parse_args(argv)
    command = shlex.split(arguments.servesim)
    with tempfile.TemporaryDirectory(prefix="servesim-dynamo-host-probes-") as temporary:
        for name in arguments.probe or PROBES:
            folder = Path(temporary) / name
            folder.mkdir()
            print(f"{name}: {PROBES[name][0]}\n    {run(name, command, folder)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
