"""The adapter's command line: the arguments of ``servesim replay`` (conformance/README.md).

Exit 0: the report is written. Exit 2: the input is invalid (R5, read with the reference's
document reader) or uses a feature Dynamo cannot run the way SPEC.md says (the message names
the feature). Exit 1: Dynamo's replay failed or recorded something a servesim report cannot
hold (the message says what). Exit 4: the report cannot be written (as the reference's tool).
Nothing is written unless the exit code is 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servesim.contract.canonical import canonical_bytes, write_atomically
from servesim.contract.documents import read_document
from servesim.contract.errors import InvalidInput
from servesim_dynamo import NAME, dynamo_runtime
from servesim_dynamo.kv import check_kv_cache
from servesim_dynamo.mapping import (
    Unsupported,
    check_scenario,
    fixed_timing,
    placement,
    replay_spec,
)
from servesim_dynamo.report import as_report_5, build_report
from servesim_dynamo.sessions import needs_release, release
from servesim_dynamo.timeline import DynamoResult, Timeline, read_worker

EXIT_OK = 0
EXIT_DYNAMO = 1
EXIT_INVALID = 2
#: As the reference's servesim tool (R32): valid inputs, but the report cannot be written.
EXIT_UNWRITABLE = 4


def description() -> dict[str, Any]:
    """The ``--describe`` answer: only what Dynamo does as SPEC.md says.

    Protocol 4 (R38): it leaves out ``timing.synthetic_linear``, a model Dynamo does not have,
    so the synthetic cases are skipped rather than refused one by one; it reads timing profile
    1.1 for ``timing.grid`` (exit 3 is protocol 2's; it never exits 3 itself, for it refuses
    any grid whose coverage is narrower than the scheduler's limits). Not declared:
    ``prefill.chunked`` (no per-request chunk cap), ``routing.random`` (no seeded random
    router), ``timing.regression`` (not expressible), ``trace`` (Dynamo records no per-pass
    membership). Scenario 1.1 is not declared: its one addition, ``kv_cache``, asks for figures
    Dynamo does not record (R52's blocks in use; kv.py), so cases with a cache are skipped, and
    refused by name if given anyway. Nor is scenario 1.2: its additions, the state-aware
    policies ``least_loaded`` and ``cache_aware``, are refused by name
    (``mapping.check_scenario``). Scenario 1.3 is: its closed loop runs through Dynamo's
    concurrency mode and its objectives are read off the report (sessions.py, report.py); its
    stop time is refused by name. Workload 1.1 is (without a cache its ``prefix_hashes``
    change nothing, R47, R53), and so is 1.2, whose sessions run through Dynamo's multi-turn
    replay. The report is 5.0 (R38, R64), its cache members those of a replay without a cache
    and ``cached_blocks_at_routing`` null (round robin).
    """
    return {
        "name": NAME,
        "version": f"ai-dynamo {dynamo_runtime.version()}",
        "protocol_version": 4,
        "schema_versions": {
            "scenario": ["1.0", "1.3"],
            "workload": ["1.0", "1.1", "1.2"],
            "timing_profile": ["1.0", "1.1"],
            "report": ["5.0"],
        },
        "features": ["timing.grid"],
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="servesim-dynamo",
        description="Run NVIDIA Dynamo's offline replay (ai-dynamo 1.6.1) on servesim documents "
        "and write a servesim report from what Dynamo recorded.",
    )
    parser.add_argument("--scenario", metavar="FILE")
    parser.add_argument("--workload", metavar="FILE")
    parser.add_argument("--timing-profile", metavar="FILE")
    parser.add_argument("--output", metavar="FILE")
    parser.add_argument(
        "--trace", action="store_true", help="accepted; Dynamo has no step trace (trace is null)"
    )
    parser.add_argument("--describe", action="store_true", help="print the description and exit")
    return parser


def replay(scenario_path: str, workload_path: str, profile_path: str) -> bytes:
    """The report bytes for three input files; raises InvalidInput, Unsupported, DynamoResult."""
    scenario = read_document(scenario_path, "scenario")
    workload = read_document(workload_path, "workload")
    profile = read_document(profile_path, "timing_profile")
    check_scenario(scenario.value)
    check_kv_cache(scenario.value)
    timing = fixed_timing(profile.value, scenario.value["scheduler"])
    requests = workload.value["requests"]
    workers = scenario.value["fleet"]["workers"]
    released = None
    if needs_release(scenario.value, workload.value):
        # R59, R61: when each request arrives, and where, from Dynamo's multi-turn replay
        released = release(scenario.value, requests, timing)
        requests = [
            {**request, "arrival_us": at}
            for request, at in zip(requests, released.arrival_us, strict=True)
        ]
        placed: list[list[int]] = [[] for _ in range(workers)]
        for position in sorted(range(len(requests)), key=lambda p: requests[p]["arrival_us"]):
            placed[released.worker[position]].append(position)
    else:
        placed = placement(requests, workers)
    by_worker: list[list[Timeline]] = []
    for index, positions in enumerate(placed):
        if not positions:
            by_worker.append([])
            continue
        output = dynamo_runtime.run(replay_spec(scenario.value, requests, positions, timing))
        by_worker.append(read_worker(output, index))
    if released is not None:
        _check_agreement(requests, by_worker, released.terminal_us)
    value = build_report(
        {"scenario": scenario.data, "workload": workload.data, "timing_profile": profile.data},
        profile.value.get("calibration"),
        requests,
        by_worker,
        timing,
    )
    data: bytes = canonical_bytes(as_report_5(value, requests, scenario.value))
    return data + b"\n"


def _check_agreement(
    requests: list[dict[str, Any]], by_worker: list[list[Timeline]], terminal_us: list[int]
) -> None:
    """The per-token replay of each worker must end every request when the multi-turn replay
    did, or the arrivals it was given would not be Dynamo's."""
    ends = {t.id: t.terminal_us for worker in by_worker for t in worker}
    for request, expected in zip(requests, terminal_us, strict=True):
        if ends.get(request["id"]) != expected:
            raise DynamoResult(
                f"request {request['id']!r}: the multi-turn replay ended it at {expected} us, the "
                f"per-token replay at {ends.get(request['id'])} us"
            )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the adapter; returns the exit code."""
    parser = _parser()
    arguments = parser.parse_args(argv)
    if arguments.describe:
        print(json.dumps(description(), indent=2))
        return EXIT_OK
    paths = (arguments.scenario, arguments.workload, arguments.timing_profile, arguments.output)
    if any(path is None for path in paths):
        parser.error("--scenario, --workload, --timing-profile and --output are required")
    try:
        data = replay(arguments.scenario, arguments.workload, arguments.timing_profile)
    except InvalidInput as error:
        print(f"{NAME}: invalid input:\n{error}", file=sys.stderr)
        return EXIT_INVALID
    except Unsupported as error:
        print(
            f"{NAME}: unsupported feature {error.feature}: {error.detail}",
            file=sys.stderr,
        )
        return EXIT_INVALID
    except DynamoResult as error:
        print(f"{NAME}: {error}", file=sys.stderr)
        return EXIT_DYNAMO
    try:
        write_atomically(Path(arguments.output), data)
    except OSError as error:
        print(f"{NAME}: cannot write {arguments.output}: {error.strerror}", file=sys.stderr)
        return EXIT_UNWRITABLE
    return EXIT_OK
