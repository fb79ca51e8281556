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

from servesim_dynamo import dynamo_runtime
from servesim_dynamo.mapping import check_scenario, fixed_timing, placement, replay_spec

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


def main(case: str, destination: str) -> None:
    folder = Path(case)
    scenario = json.loads((folder / "scenario.json").read_text())
    workload = json.loads((folder / "workload.json").read_text())
    profile = json.loads((folder / "timing-profile.json").read_text())
    check_scenario(scenario)
    timing = fixed_timing(profile, scenario["scheduler"])
    requests = workload["requests"]
    recorded = {}
    for index, positions in enumerate(placement(requests, scenario["fleet"]["workers"])):
        spec = replay_spec(scenario, requests, positions, timing)
        recorded[f"worker {index}"] = trimmed(dynamo_runtime.run(spec))
    Path(destination).write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
