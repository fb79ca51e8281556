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
from servesim_dynamo.report import build_report
from servesim_dynamo.timeline import DynamoResult, Timeline, read_worker

EXIT_OK = 0
EXIT_DYNAMO = 1
EXIT_INVALID = 2
#: As the reference's servesim tool (R32): valid inputs, but the report cannot be written.
EXIT_UNWRITABLE = 4


def description() -> dict[str, Any]:
    """The ``--describe`` answer: only what Dynamo does as SPEC.md says.

    Protocol 2 (exit 3) because it reads timing profile 1.1 for ``timing.grid``; it never exits
    3 itself, for it refuses any grid whose coverage is narrower than the scheduler's limits.
    Not declared: ``prefill.chunked`` (no per-request chunk cap), ``routing.random`` (no seeded
    random router), ``timing.regression`` (not expressible), ``trace`` (Dynamo records no
    per-pass membership). ``synthetic_linear``, a baseline kind, is refused case by case.
    Scenario 1.1 is not declared: its one addition, ``kv_cache``, asks for figures Dynamo does
    not record (R52's blocks in use; kv.py), so cases with a cache are skipped, and refused by
    name if given anyway. Nor is scenario 1.2: its additions, the state-aware policies
    ``least_loaded`` and ``cache_aware``, are refused by name (``mapping.check_scenario``), so
    its cases are skipped. Workload 1.1 is: without a cache its ``prefix_hashes`` change nothing
    (R47, R53). The report is 4.0 (R57), its cache members those of a replay without a cache
    and ``cached_blocks_at_routing`` null (round robin).
    """
    return {
        "name": NAME,
        "version": f"ai-dynamo {dynamo_runtime.version()}",
        "protocol_version": 2,
        "schema_versions": {
            "scenario": ["1.0"],
            "workload": ["1.0", "1.1"],
            "timing_profile": ["1.0", "1.1"],
            "report": ["4.0"],
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
    by_worker: list[list[Timeline]] = []
    for index, positions in enumerate(placement(requests, scenario.value["fleet"]["workers"])):
        if not positions:
            by_worker.append([])
            continue
        output = dynamo_runtime.run(replay_spec(scenario.value, requests, positions, timing))
        by_worker.append(read_worker(output, index))
    value = build_report(
        {"scenario": scenario.data, "workload": workload.data, "timing_profile": profile.data},
        profile.value.get("calibration"),
        requests,
        by_worker,
        timing,
    )
    data: bytes = canonical_bytes(value)
    return data + b"\n"


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
