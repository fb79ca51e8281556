"""Write ``workload.json`` for the fleet-changes example: steady traffic with a burst.

A request every 100 ms from 0 to 2.9 s (30 requests) and, from 1.0 s, a burst of 48
requests 10 ms apart (to 1.47 s), merged in arrival order (on a tie the steady request
first). Prompt and output lengths vary by a fixed formula, so the file is the same on every
run and needs no random numbers.
Run from anywhere: ``python examples/fleet-changes/make_workload.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

STEADY = [(k * 100_000, "steady") for k in range(30)]
BURST = [(1_000_000 + k * 10_000, "burst") for k in range(48)]


def requests() -> list[dict[str, object]]:
    """The workload's requests, in arrival order, ids ``r00``, ``r01``, ..."""
    timed = sorted(STEADY + BURST, key=lambda item: (item[0], item[1] == "burst"))
    return [
        {
            "id": f"r{index:02d}",
            "arrival_us": arrival_us,
            "prompt_tokens": 24 + (index * 37) % 41,
            "max_output_tokens": 8 + (index * 13) % 17,
        }
        for index, (arrival_us, _) in enumerate(timed)
    ]


def main() -> None:
    document = {"document": "workload", "schema_version": "1.0", "requests": requests()}
    lines = ",\n".join("    " + json.dumps(request) for request in document["requests"])
    text = (
        '{\n  "document": "workload",\n  "schema_version": "1.0",\n  "requests": [\n'
        + lines
        + "\n  ]\n}\n"
    )
    assert json.loads(text) == document
    (HERE / "workload.json").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
