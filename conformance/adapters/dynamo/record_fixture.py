"""Record what Dynamo returns for one golden case, as a test fixture (needs ai-dynamo).

    python conformance/adapters/dynamo/record_fixture.py golden/valid/dynamo-fixed-smoke OUT.json

Writes one JSON object: ``{"worker 0": output, ...}``, each ``output`` the runtime's
``{"report", "artifacts"}`` with only the members the adapter reads, so that the mapping and
the report can be tested without Dynamo installed (tests/test_dynamo_adapter.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servesim_dynamo import cli, dynamo_runtime

INPUTS = ("scenario.json", "workload.json", "timing-profile.json")

RECORD_MEMBERS = (
    "request_id",
    "uuid",
    "arrival_time_ms",
    "first_admit_ms",
    "first_token_ms",
    "last_token_ms",
    "terminal_time_ms",
    "output_length",
    "requested_output_length",
    "readmission_count",
    "terminal_status",
    "decode_worker_idx",
    "reused_input_tokens",
    "admission_history",
)


def trimmed(output: dict[str, Any]) -> dict[str, Any]:
    """The members of one runtime output the adapter reads."""
    return {
        "report": {
            "per_request": [
                {name: record[name] for name in RECORD_MEMBERS}
                for record in output["report"].get("per_request", [])
            ]
        },
        "artifacts": {"outputs": output["artifacts"]["outputs"]},
    }


#: The members of the multi-turn replay's records the adapter reads (sessions.py).
TRACE_MEMBERS = (
    "session_id",
    "turn_index",
    "arrival_time_ms",
    "terminal_time_ms",
    "decode_worker_idx",
)


def main(case: str, destination: str) -> None:
    """Run the adapter on the case with Dynamo, keeping what each Dynamo call returned: the
    per-token runtime's output per worker, and for sessions or a closed loop the multi-turn
    replay's records (key ``multi-turn replay``)."""
    folder = Path(case)
    recorded: dict[str, Any] = {}
    run, run_trace = dynamo_runtime.run, dynamo_runtime.run_trace

    def recording_run(spec: dict[str, Any]) -> dict[str, Any]:
        output = run(spec)
        recorded[f"worker {len([k for k in recorded if k.startswith('worker')])}"] = trimmed(output)
        return output

    def recording_trace(*arguments: Any, **options: Any) -> list[dict[str, Any]]:
        records = run_trace(*arguments, **options)
        recorded["multi-turn replay"] = [
            {name: record[name] for name in TRACE_MEMBERS} for record in records
        ]
        return records

    dynamo_runtime.run = recording_run  # type: ignore[assignment]
    dynamo_runtime.run_trace = recording_trace  # type: ignore[assignment]
    cli.replay(*(str(folder / name) for name in INPUTS))
    Path(destination).write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
