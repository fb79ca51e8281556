"""A deliberately broken implementation, for testing that the harness judges it right.

Usage: ``python fake_sim.py MODE [replay arguments...]``. Every mode wraps the reference and
breaks one thing; "honest" does nothing wrong, and neither do "protocol-1" (an implementation of
conformance protocol 1, without exit code 3) and "writes-report-1.0" (an older implementation
that reads 1.0 inputs and writes report 1.0, which the harness migrates before comparing).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from servesim import __version__, replay
from servesim.contract.canonical import canonical_json
from servesim.contract.model import StepShape
from servesim.describe import description
from servesim_cli.main import main as reference_main

#: Modes that run the reference unchanged (they differ in their --describe answer only).
HONEST_RUNS = {
    "honest",
    "bad-protocol",
    "no-chunking",
    "reads-only-2.0",
    "protocol-1",
    "protocol-3",
    "protocol-3-no-synthetic-tag",
    "protocol-4",
    "protocol-4-no-synthetic",
    "unknown-feature",
}

#: Modes that do not declare ``trace`` and refuse ``--trace`` as an unknown argument, as an
#: implementation without the feature would.
WITHOUT_TRACE = {"no-trace", "no-trace-no-report", "no-trace-wrong-numbers", "late-by-microseconds"}

#: Modes that declare report 1.0 as the only version they write.
REPORT_1_0_WRITERS = {"writes-report-1.0", "non-canonical-1.0", "undeclared-report-version"}


def _option(arguments: list[str], name: str) -> str:
    return arguments[arguments.index(name) + 1]


def _reference_report(arguments: list[str], *, trace: bool) -> bytes:
    return replay(
        _option(arguments, "--scenario"),
        _option(arguments, "--workload"),
        _option(arguments, "--timing-profile"),
        trace=trace,
    )


#: R123's members of a worker and of the summary (report 9.0).
_R123_WORKER_MEMBERS = (
    "lifecycle",
    "created_us",
    "worker_us",
    "starting_us",
    "active_us",
    "draining_us",
    "failed_us",
    "failures",
    "migrated_out",
    "failed_requests",
    "lost_tokens",
)
_R123_SUMMARY_MEMBERS = (
    "failed",
    "failed_by_reason",
    "migrations",
    "lost_tokens",
    "recomputed_tokens",
    "worker_us",
    "worker_hours",
    "fleet",
)


def as_report_1_0(report: bytes) -> dict[str, Any]:
    """The reference's report written back as 1.0: without what 10.0 (R140, when the reference
    writes it), 9.0 (R123), 8.0 (R107), 7.0 (R95), 6.0 (R85), 5.0 (R64), 4.0 (R57), 3.0 (R52)
    and 2.0 (R25, R30) added; the fakes run one pool of one-rank workers that never changes, no
    cache, no section 13 inputs and route by round robin or random, so the later members hold
    their values without them (R53, R57, R64, R86, R124, R141)."""
    value: dict[str, Any] = json.loads(report)
    value.pop("host_transfers", None)  # 10.0 (R140): no host pool
    for request in value["requests"]:
        request.pop("host_reused_prompt_tokens", None), request.pop("load_wait_us", None)
    for holder in [*value["workers"], *value.get("pools", [])]:
        holder.pop("host", None)
    for worker in value["workers"]:
        for rank in worker.get("ranks", []):
            rank.pop("host", None)
    for request in value["requests"]:  # 9.0 (R123): a fleet that never changes
        for name in ("migrations", "fail_reason", "lost_tokens", "recomputed_tokens"):
            request.pop(name, None)
    for worker in value["workers"]:
        for name in _R123_WORKER_MEMBERS:
            worker.pop(name, None)
    for name in _R123_SUMMARY_MEMBERS:
        value["summary"].pop(name, None)
    value["summary"]["rejected_by_reason"].pop("no_routable_worker", None)
    for entry in value["trace"] or []:
        entry.pop("cut_us", None)
    for request in value["requests"]:  # 8.0 (R107): an aggregated fleet's values
        request.pop("handoff", None)
    for worker in value["workers"]:
        worker.pop("handed_off", None), worker.pop("activated", None)
    value["summary"].pop("transfers", None)
    for request in value["requests"]:  # 7.0 (R95): the vLLM style's values
        request.pop("retractions", None)
    for worker in value["workers"]:
        worker.pop("style", None)
    for entry in value["trace"] or []:
        entry.pop("kind", None), entry.pop("retracted", None), entry.pop("new_token_ratio", None)
    value.pop("pools", None)
    value["inputs"].pop("timing_profiles", None)
    for request in value["requests"]:
        request.pop("pool", None), request.pop("rank", None)
    for worker in value["workers"]:
        worker.pop("pool", None), worker.pop("pool_worker", None), worker.pop("ranks", None)
    for entry in value["trace"] or []:
        entry.pop("rank", None), entry.pop("duration_us", None)
    for request in value["requests"]:
        del request["reused_prompt_tokens"], request["preemptions"]
        del request["cached_blocks_at_routing"], request["session"]
    del value["summary"]["cut_off"], value["summary"]["tpot_us"]
    del value["summary"]["rejected_by_reason"]["exceeds_kv_cache"], value["summary"]["kv_cache"]
    for worker in value["workers"]:
        del worker["kv_cache"]
    for entry in value["trace"] or []:
        del entry["kv_blocks_in_use"], entry["preempted"]
    del value["inputs"]["timing_profile"]["calibration"]
    for entry in value["trace"] or []:
        del entry["shape"]
    value["schema_version"] = "1.0"
    return value


def describe(mode: str) -> dict[str, Any]:
    """The reference's --describe answer, changed as ``mode`` says."""
    described = description(__version__)
    if mode == "bad-protocol":
        described["protocol_version"] = 99
    if mode == "no-chunking":
        described["features"].remove("prefill.chunked")
    if mode == "reads-only-2.0":
        described["schema_versions"]["workload"] = ["2.0"]
    if mode == "protocol-1" or mode in REPORT_1_0_WRITERS:
        described["protocol_version"] = 1
    if mode == "protocol-1" or mode in REPORT_1_0_WRITERS:  # no exit 3: no measured profiles
        described["schema_versions"]["timing_profile"] = ["1.0"]
        measured = {"timing.grid", "timing.regression"}
        described["features"] = [f for f in described["features"] if f not in measured]
    if mode in REPORT_1_0_WRITERS:  # a 1.0 report cannot say what a cache did (R52)
        described["schema_versions"]["report"] = ["1.0"]
        described["schema_versions"]["scenario"] = ["1.0"]
        described["schema_versions"]["workload"] = ["1.0"]
    if mode == "protocol-1-measured":  # the combination R38 forbids
        described["protocol_version"] = 1
    if mode == "scenario-1.2-report-3.0":  # another combination R38 forbids (R57)
        described["schema_versions"]["report"] = ["3.0"]
    if mode == "scenario-1.3-report-4.0":  # R38 forbids it too (R64); workload 1.2 not read
        described["schema_versions"]["report"] = ["4.0"]
        described["schema_versions"]["workload"] = ["1.0", "1.1"]
    if mode == "workload-1.2-report-4.0":  # likewise; scenario 1.3 not read
        described["schema_versions"]["report"] = ["4.0"]
        described["schema_versions"]["scenario"] = ["1.0", "1.1", "1.2"]
    if mode in ("protocol-3", "protocol-3-no-synthetic-tag"):
        described["protocol_version"] = 3
    if mode in ("protocol-4", "protocol-4-no-synthetic"):
        described["protocol_version"] = 4
    if mode in ("protocol-3-no-synthetic-tag", "protocol-4-no-synthetic"):
        # protocol 3: a baseline tag left out changes nothing; protocol 4: no synthetic model
        described["features"].remove("timing.synthetic_linear")
    if mode == "unknown-feature":  # a misspelt tag
        described["features"].append("routing.randm")
    if mode in WITHOUT_TRACE:
        described["features"].remove("trace")
    if described["protocol_version"] < 5:  # R87: the tag is new in protocol 5
        described["features"] = [f for f in described["features"] if f != "timing.per_pool"]
    return described


def late_by_microseconds(report: bytes) -> bytes:
    """A simulator with slightly other conventions: every token of every completed request
    comes ``2 * (i + 1)`` µs late for the i-th request of the workload (in report order), so
    first token, completion and every token time shift; the summary is left as the reference's
    except ``ttft_us.p99``, one µs more."""
    value = json.loads(report)
    for index, entry in enumerate(value["requests"]):
        if not entry["token_times_us"]:
            continue
        late = 2 * (index + 1)
        entry["token_times_us"] = [time + late for time in entry["token_times_us"]]
        entry["first_token_us"] += late
        entry["completion_us"] += late
    if value["summary"]["ttft_us"]["p99"] is not None:
        value["summary"]["ttft_us"]["p99"] += 1
    return canonical_json(value)


def floor_rounding(arguments: list[str]) -> int:
    """A plausible bug: R22 rounded down instead of up."""
    from servesim.contract.model import SyntheticLinearTiming

    def floor_duration(self: SyntheticLinearTiming, shape: StepShape) -> int:
        total = (
            self.step_overhead_ns
            + shape.prefill_tokens * self.prefill_token_ns
            + shape.decode_requests * self.decode_token_ns
        )
        return max(1, total // 1000)

    SyntheticLinearTiming.step_duration_us = floor_duration  # type: ignore[method-assign]
    return reference_main(["replay", *arguments])


def main() -> int:
    mode, arguments = sys.argv[1], sys.argv[2:]
    if "--describe" in arguments:
        print(json.dumps(describe(mode)))
        return 0
    output = Path(_option(arguments, "--output"))
    trace = "--trace" in arguments
    if mode in WITHOUT_TRACE and trace:
        print("error: unrecognized arguments: --trace", file=sys.stderr)
        return 1
    if mode == "no-trace-no-report":
        return 0
    if mode == "no-trace":
        return reference_main(["replay", *arguments])
    if mode == "floor-rounding":
        return floor_rounding(arguments)
    if mode in HONEST_RUNS:
        return reference_main(["replay", *arguments])
    if mode == "exit-4":  # the reference's code for an output it cannot write (R32)
        return 4
    if mode == "show-arguments":  # the reference, after printing its arguments to stderr
        print(json.dumps(arguments), file=sys.stderr)
        return reference_main(["replay", *arguments])
    if mode == "crash":
        raise RuntimeError("simulated crash")
    if mode == "hang":
        time.sleep(3600)
    if mode == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "no-report":
        return 0
    if mode == "exit-1-on-invalid":
        status = reference_main(["replay", *arguments])
        return 1 if status == 2 else status
    if mode == "accept-invalid":
        output.write_text('{"document": "report"}\n')
        return 0
    if mode == "report-then-reject":
        output.write_text("{}")
        return 2
    if mode == "reject-everything":
        return 2
    if mode == "report-then-out-of-coverage":
        output.write_text("{}")
        return 3
    try:
        report = _reference_report(arguments, trace=trace and mode != "ignore-trace")
    except Exception:
        return 2
    if mode == "garbage":
        output.write_bytes(b"this is not JSON\n")
    elif mode == "schema-invalid":
        output.write_bytes(b'{"document": "report", "schema_version": "1.0"}\n')
    elif mode == "late-by-microseconds":
        output.write_bytes(late_by_microseconds(report))
    elif mode in {"wrong-numbers", "no-trace-wrong-numbers"}:
        value = json.loads(report)
        completed = [entry for entry in value["requests"] if entry["token_times_us"]]
        if completed:
            completed[0]["token_times_us"][-1] += 1
        else:
            value["summary"]["steps"] += 1
        output.write_bytes(canonical_json(value))
    elif mode == "pretty-printed":
        output.write_text(json.dumps(json.loads(report), indent=2, sort_keys=True) + "\n")
    elif mode == "nondeterministic":
        value = json.loads(report)
        value["summary"]["makespan_us"] += random.SystemRandom().randint(1, 10**6)
        output.write_bytes(canonical_json(value))
    elif mode == "ignore-trace":
        output.write_bytes(report)
    elif mode == "writes-report-1.0":
        output.write_bytes(canonical_json(as_report_1_0(report)))
    elif mode == "non-canonical-1.0":
        output.write_text(json.dumps(as_report_1_0(report), indent=2) + "\n")
    elif mode == "undeclared-report-version":  # declares 1.0, writes the reference's 5.0
        output.write_bytes(report)
    else:
        print(f"unknown mode {mode}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
