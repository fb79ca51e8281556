"""A deliberately broken implementation, for testing that the harness judges it right.

Usage: ``python fake_sim.py MODE [replay arguments...]``. Every mode wraps the reference and
breaks one thing; "honest" does nothing wrong.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

from servesim import __version__, replay
from servesim._cli import main as reference_main
from servesim.canonical import canonical_json
from servesim.describe import description


def _option(arguments: list[str], name: str) -> str:
    return arguments[arguments.index(name) + 1]


def _reference_report(arguments: list[str], *, trace: bool) -> bytes:
    return replay(
        _option(arguments, "--scenario"),
        _option(arguments, "--workload"),
        _option(arguments, "--timing-profile"),
        trace=trace,
    )


def main() -> int:
    mode, arguments = sys.argv[1], sys.argv[2:]
    if "--describe" in arguments:
        described = description(__version__)
        if mode == "bad-protocol":
            described["protocol_version"] = 99
        if mode == "no-chunking":
            described["features"].remove("prefill.chunked")
        if mode == "reads-only-2.0":
            described["schema_versions"]["workload"] = ["2.0"]
        print(json.dumps(described))
        return 0
    output = Path(_option(arguments, "--output"))
    trace = "--trace" in arguments
    if mode == "floor-rounding":  # a plausible bug: R22 rounded down instead of up
        from servesim.model import SyntheticLinearTiming

        def floor_duration(
            self: SyntheticLinearTiming, *, decode_requests: int, prefill_tokens: int
        ) -> int:
            total = (
                self.step_overhead_ns
                + prefill_tokens * self.prefill_token_ns
                + decode_requests * self.decode_token_ns
            )
            return max(1, total // 1000)

        SyntheticLinearTiming.step_duration_us = floor_duration  # type: ignore[method-assign]
        return reference_main(["replay", *arguments])
    if mode in {"honest", "bad-protocol", "no-chunking", "reads-only-2.0"}:
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
    try:
        report = _reference_report(arguments, trace=trace and mode != "ignore-trace")
    except Exception:
        return 2
    if mode == "garbage":
        output.write_bytes(b"this is not JSON\n")
    elif mode == "schema-invalid":
        output.write_bytes(b'{"document": "report", "schema_version": "1.0"}\n')
    elif mode == "wrong-numbers":
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
    else:
        print(f"unknown mode {mode}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
