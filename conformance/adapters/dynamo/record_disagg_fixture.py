"""Record Dynamo's disaggregated replay of a golden disagg case's fixed-form twin, as a test
fixture (needs ai-dynamo).

    python conformance/adapters/dynamo/record_disagg_fixture.py disagg-one-request-every-stamp

Writes ``fixtures/disagg-CASE.json``: ``{"records": [...]}``, Dynamo's per-request records of
the twin (disagg_cases.py: the golden scenario and workload, a grid equal to Dynamo's fixed
model) with only the members the adapter reads, in Dynamo's order, so that the translation can
be tested without Dynamo installed (tests/test_dynamo_adapter_disagg.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from disagg_cases import GOLDEN, twin
from servesim_dynamo import disagg

MEMBERS = (
    "session_id",
    "turn_index",
    "arrival_time_ms",
    "input_length",
    "requested_output_length",
    "output_length",
    "terminal_status",
    "terminal_time_ms",
    "prefill_worker_idx",
    "decode_worker_idx",
    "prefill_admit_ms",
    "source_held_ms",
    "destination_reserved_ms",
    "destination_activated_ms",
    "first_token_ms",
    "last_token_ms",
    "decode_reused_input_tokens",
    "readmission_count",
    "admission_history",
    "routing_history",
)

#: The members of each routing_history entry the adapter reads.
ROUTING_MEMBERS = ("pool", "logical_worker_id", "dp_rank")


def main() -> int:
    case = sys.argv[1]
    scenario, workload, grid = twin(GOLDEN / case)
    shape = disagg.check_disagg(scenario, grid)
    records = disagg.run(shape, workload)
    kept = [{name: record.get(name) for name in MEMBERS} for record in records]
    for record in kept:
        record["routing_history"] = [
            {name: routed[name] for name in ROUTING_MEMBERS}
            for routed in record["routing_history"] or []
        ]
    path = (
        Path(__file__).resolve().parent / "fixtures" / f"disagg-{case.removeprefix('disagg-')}.json"
    )
    path.write_text(json.dumps({"records": kept}, indent=1) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
