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
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servesim.contract.canonical import canonical_bytes, write_atomically
from servesim.contract.documents import Document, read_document
from servesim.contract.errors import InvalidInput
from servesim.contract.migrations import CHAIN
from servesim_dynamo import NAME, disagg, dynamo_runtime
from servesim_dynamo.kv import check_continuing_turns, check_host, check_kv_cache
from servesim_dynamo.mapping import (
    FixedTiming,
    Fleet,
    Unsupported,
    check_fleet_changes,
    check_scenario,
    fixed_timing,
    fleet_shape,
    limits,
    placement,
    replay_spec,
    style,
)
from servesim_dynamo.pools import with_pools, with_style
from servesim_dynamo.ranks import Pass, Placed, match_records, timelines, worker_passes
from servesim_dynamo.ranks import placed as placed_record
from servesim_dynamo.report import as_report_5, build_report
from servesim_dynamo.sessions import needs_release, release, replay_records, run_records
from servesim_dynamo.timeline import DynamoResult, Timeline, read_worker

#: R84: an argument is ``POOL=FILE`` when the text before its first ``=`` is a pool name (R77).
POOL_FORM = re.compile(r"[A-Za-z0-9_-]{1,64}=")

EXIT_OK = 0
EXIT_DYNAMO = 1
EXIT_INVALID = 2
#: As the reference's servesim tool (R32): valid inputs, but the report cannot be written.
EXIT_UNWRITABLE = 4


def description() -> dict[str, Any]:
    """The ``--describe`` answer: only what Dynamo does as SPEC.md says.

    Protocol 5 (R38, R87; protocol 4's documents plus the tag ``timing.per_pool``, which it
    leaves out): it leaves out ``timing.synthetic_linear``, a model Dynamo does not have,
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
    replay. Scenario 1.4 is (protocol 5, report 6.0, R86): ``fleet.dp_size`` and a fleet of
    alike pools run as Dynamo's attention-DP workers (ranks.py); pools that differ, weights
    that differ, and a profile per pool (``timing.per_pool``, not declared) are refused by
    name (mapping.fleet_shape). Scenario 1.5 is (R96): each style is Dynamo's ``backend`` of
    the same name (mapping.engine_args), sglang's chunked prefill its ``chunked_prefill_size``
    (R90: a budget of the whole pass; ``prefill.chunked``, R18's per-request cap, is still not
    declared, and R69 does not tag sglang cases with it); sglang on workers of several ranks
    is refused by name. Scenario 1.6 is (R108: no feature tag names disaggregation): a
    disaggregated fleet runs through Dynamo's disaggregated replay (disagg.py), vllm on both
    sides, round robin on both sides, one fixed-form grid, no base latency and whole-microsecond
    transfers; anything else is refused by name. The report is 8.0, the current one (R38: a
    reader of scenario 1.5 writes 7.0 or later; R108's migration adds an aggregated fleet's
    values), its cache members those of a replay without a cache (null for a disaggregated
    one: Dynamo records no blocks in use), ``cached_blocks_at_routing`` null (round robin).
    Scenario 1.7 is declared (R124: no feature tag names its additions): a fleet that changes,
    ``scaling`` or ``failures``, is refused by name (mapping.check_fleet_changes), and a static
    fleet's report is still written at 8.0, which R37's step to 9.0 migrates exactly (an 8.0
    report comes from a fleet that never changes); the harness migrates it.
    Scenario 1.8 and workload 1.3 are declared (R141): a host tier (kv_cache.host) maps onto
    Dynamo's native_host_offload but comes with a cache, refused as above (kv.py; some host
    tiers are refused by name first), and session_prompts_extend with sessions and a prefix
    cache is refused by name (Dynamo cannot reuse answer blocks); without a prefix cache it
    changes nothing. Report 10.0 is declared, as R38 asks of a scenario 1.8 reader (and 9.0
    or later of a 1.7 reader): the adapter writes 8.0, which R124's and R141's exact steps
    migrate (no fleet that changes, no host tier).
    """
    return {
        "name": NAME,
        "version": f"ai-dynamo {dynamo_runtime.version()}",
        "protocol_version": 5,
        "schema_versions": {
            "scenario": ["1.0", "1.3", "1.4", "1.5", "1.6", "1.7", "1.8"],
            "workload": ["1.0", "1.1", "1.2", "1.3"],
            "timing_profile": ["1.0", "1.1"],
            "report": ["8.0", "10.0"],
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
    parser.add_argument("--timing-profile", metavar="FILE", action="append")
    parser.add_argument("--output", metavar="FILE")
    parser.add_argument(
        "--trace", action="store_true", help="accepted; Dynamo has no step trace (trace is null)"
    )
    parser.add_argument("--describe", action="store_true", help="print the description and exit")
    return parser


def replay(scenario_path: str, workload_path: str, profile_path: str) -> bytes:
    """The report bytes for three input files; raises InvalidInput, Unsupported, DynamoResult."""
    return replay_documents(
        read_document(scenario_path, "scenario"),
        read_document(workload_path, "workload"),
        read_document(profile_path, "timing_profile"),
    )


def replay_documents(scenario: Document, workload: Document, profile: Document) -> bytes:
    """The report bytes for three documents read and checked (R1 to R5)."""
    # R109-R124: a fleet that changes, then R129's host tier, refused by name on both paths
    check_fleet_changes(scenario.value)
    check_host(scenario.value, disagg.is_disaggregated(scenario.value))
    check_continuing_turns(scenario.value, workload.value)
    if disagg.is_disaggregated(scenario.value):
        # R97-R108: Dynamo's disaggregated replay (disagg.py)
        shape = disagg.check_disagg(scenario.value, profile.value)
        records = disagg.run(shape, workload.value)
        value = disagg.build(
            shape,
            scenario.value,
            {"scenario": scenario.data, "workload": workload.data, "timing_profile": profile.data},
            profile.value.get("calibration"),
            workload.value["requests"],
            records,
        )
        disaggregated: bytes = canonical_bytes(value)
        return disaggregated + b"\n"
    check_scenario(scenario.value)
    check_kv_cache(scenario.value)
    fleet = fleet_shape(scenario.value)
    timing = fixed_timing(profile.value, limits(scenario.value))
    requests = workload.value["requests"]
    passes: list[list[Pass]] | None = None
    if fleet.dp_size > 1:
        # R78, R83: ranks share one pass barrier, so a worker cannot be replayed alone by
        # the per-token runtime (one DP1 worker only); ranks.py reads the documented replay
        by_worker, passes = _ranked(scenario.value, workload.value, requests, timing, fleet)
        released_at = {t.id: t.arrival_us for worker in by_worker for t in worker}
        requests = [{**request, "arrival_us": released_at[request["id"]]} for request in requests]
    else:
        requests, by_worker = _one_rank(scenario.value, workload.value, requests, timing, fleet)
    value = build_report(
        {"scenario": scenario.data, "workload": workload.data, "timing_profile": profile.data},
        profile.value.get("calibration"),
        requests,
        by_worker,
        timing,
        None if passes is None else [[(p.start_us, p.end_us) for p in w] for w in passes],
        style(limits(scenario.value)),
    )
    report_5 = as_report_5(value, requests, scenario.value)
    report_6 = dict(CHAIN.migrate(report_5, "report", "6.0").document)
    report_7 = with_style(
        dict(
            CHAIN.migrate(with_pools(report_6, fleet, by_worker, passes), "report", "7.0").document
        ),
        style(limits(scenario.value)),
    )
    # R108: an aggregated fleet's 8.0 report, the current one (Dynamo's disaggregated replay
    # is not driven by this adapter: it declares no scenario 1.6)
    report_8 = CHAIN.migrate(report_7, "report", "8.0").document
    data: bytes = canonical_bytes(report_8)
    return data + b"\n"


def _one_rank(
    scenario: dict[str, Any],
    workload: dict[str, Any],
    requests: list[dict[str, Any]],
    timing: FixedTiming,
    fleet: Fleet,
) -> tuple[list[dict[str, Any]], list[list[Timeline]]]:
    """Workers of one rank: each worker's requests through the per-token runtime (exact,
    for workers never interact under round robin), with sessions' arrivals from the
    multi-turn replay first. Returns the requests (arrivals as released) and the timelines."""
    released = None
    if needs_release(scenario, workload):
        # R59, R61: when each request arrives, and where, from Dynamo's multi-turn replay
        released = release(scenario, requests, timing)
        requests = [
            {**request, "arrival_us": at}
            for request, at in zip(requests, released.arrival_us, strict=True)
        ]
        placed: list[list[int]] = [[] for _ in range(fleet.workers)]
        for position in sorted(range(len(requests)), key=lambda p: requests[p]["arrival_us"]):
            placed[released.worker[position]].append(position)
    else:
        placed = placement(requests, fleet.workers)
    by_worker: list[list[Timeline]] = []
    for index, positions in enumerate(placed):
        if not positions:
            by_worker.append([])
            continue
        output = dynamo_runtime.run(replay_spec(scenario, requests, positions, timing))
        by_worker.append(read_worker(output, index))
    if released is not None:
        _check_agreement(requests, by_worker, released.terminal_us)
    return requests, by_worker


def _ranked(
    scenario: dict[str, Any],
    workload: dict[str, Any],
    requests: list[dict[str, Any]],
    timing: FixedTiming,
    fleet: Fleet,
) -> tuple[list[list[Timeline]], list[list[Pass]]]:
    """Workers of several ranks through the documented replay (ranks.py): each worker's
    timelines and passes."""
    if needs_release(scenario, workload):
        records = replay_records(scenario, requests, timing)
    else:
        records = match_records(
            run_records(scenario, requests, timing), requests, fleet.workers, fleet.dp_size
        )
    first = min(request["arrival_us"] for request in requests)
    grouped: list[list[Placed]] = [[] for _ in range(fleet.workers)]
    for request, record in zip(requests, records, strict=True):
        one = placed_record(record, request["id"], first, fleet.dp_size)
        if not 0 <= one.worker < fleet.workers:
            raise DynamoResult(f"request {one.id!r}: Dynamo placed it on worker {one.worker}")
        grouped[one.worker].append(one)
    passes = [worker_passes(worker, timing) for worker in grouped]
    return [timelines(w, p) for w, p in zip(grouped, passes, strict=True)], passes


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
    profiles = arguments.timing_profile or []
    if len(profiles) != 1 or POOL_FORM.match(profiles[0]):
        # R84, R87: the per-pool form gives one argument per pool; timing.per_pool is not
        # declared, for Dynamo's aggregated replay times every worker by one model
        print(
            f"{NAME}: unsupported feature timing.per_pool: Dynamo's aggregated replay takes one "
            "timing model for all its workers; give one --timing-profile FILE",
            file=sys.stderr,
        )
        return EXIT_INVALID
    try:
        data = replay(arguments.scenario, arguments.workload, profiles[0])
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
