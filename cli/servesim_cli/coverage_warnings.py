"""Which of a scenario's limits let steps reach outside a measured profile's coverage (R43).

A replay with a measured timing profile stops at the first step whose shape (R22) the profile
does not cover. When the scenario's limits allow shapes far outside the coverage, a person
should hear it before a long replay, not after. The bounds here are upper bounds from the
limits alone; a given workload may never reach them, so this is a warning, never an error.
"""

from __future__ import annotations

from typing import Any


def reachable_maxima(scenario: dict[str, Any], workload: dict[str, Any]) -> dict[str, int]:
    """Upper bounds of each shape coordinate that the scenario and workload allow.

    D: at most ``max_num_seqs`` requests decode in one step (R17). P: a step prefills at most
    ``max_batched_tokens`` tokens (R18). C: each decoding request's context is below the
    longest a request can get (its prompt plus its output, capped by ``max_model_len``).
    """
    scheduler = scenario["scheduler"]
    longest = max(
        (item["prompt_tokens"] + item["max_output_tokens"] for item in workload["requests"]),
        default=0,
    )
    per_request = max(min(longest, scheduler["max_model_len"]) - 1, 0)
    return {
        "decode_requests": scheduler["max_num_seqs"],
        "context_tokens": scheduler["max_num_seqs"] * per_request,
        "prefill_tokens": scheduler["max_batched_tokens"],
    }


#: Where each coordinate's bound comes from, for the message.
_SOURCES = {
    "decode_requests": "max_num_seqs",
    "context_tokens": "max_num_seqs x the longest request, up to max_model_len",
    "prefill_tokens": "max_batched_tokens",
}


def limits_outside_coverage(
    scenario: dict[str, Any], workload: dict[str, Any], timing_profile: dict[str, Any]
) -> list[str]:
    """One line per shape coordinate whose possible values leave the profile's coverage.

    Every coordinate can be 0 in some step (a prefill-only step has D = C = 0, a decode-only
    one P = 0), so a coverage that starts above 0 is reported too. A profile without a
    coverage (``synthetic_linear``) covers every shape: no lines.
    """
    coverage = timing_profile["model"].get("coverage")
    if coverage is None:
        return []
    lines = []
    for name, maximum in reachable_maxima(scenario, workload).items():
        low, high = coverage[name]["min"], coverage[name]["max"]
        if maximum > high:
            lines.append(f"{name} may reach {maximum} ({_SOURCES[name]}); covered {low}..{high}")
        elif low > 0:
            lines.append(f"{name} may be 0; covered {low}..{high}")
    return lines
