"""The calibration identity (R44): the ``calibration`` members a profile carries but
``source_sha256``, read from their own file, and the limits they set on what was measured (R40).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servesim.contract.errors import InputProblem, InvalidInput
from servesim.contract.json_reading import parse_json
from servesim.contract.model import SHAPE_DIMENSIONS
from servesim.contract.schema_check import schema_problems
from servesim.tools.calibrate.measurements import Measurement, shown
from servesim.tools.calibrate.profiles import PROFILE_VERSION, profile_value

#: A placeholder for what the identity cannot hold, so that the identity is checked by the very
#: schema the written profile must pass (R40) rather than by a copy of it.
_PLACEHOLDER_SHA256 = "0" * 64
_PLACEHOLDER_MODEL: dict[str, Any] = {
    "kind": "regression",
    "intercept_ns": 1,
    "prefill_knots": [{"tokens": 0, "ns": 0}],
    "decode_request_ns": 0,
    "context_token_ps": 0,
    "coverage": {name: {"min": 0, "max": 0} for name in SHAPE_DIMENSIONS},
}


def parse_identity(data: bytes, file: str) -> dict[str, Any]:
    """R44: the ``calibration`` members but ``source_sha256``, checked against the timing-profile
    schema; ``InvalidInput`` with JSON pointers into the identity otherwise."""
    value = parse_json(data, file)
    if not isinstance(value, dict):
        raise InvalidInput(
            [
                InputProblem(
                    file,
                    "",
                    f"expected a JSON object (the calibration identity), found {shown(value)}",
                )
            ]
        )
    problems = []
    if "source_sha256" in value:
        problems.append(
            InputProblem(
                file,
                "/source_sha256",
                "calibrate sets source_sha256 to the SHA-256 "
                "of the measurement file; leave it out of the identity",
            )
        )
    document = profile_value({**value, "source_sha256": _PLACEHOLDER_SHA256}, _PLACEHOLDER_MODEL)
    for problem in schema_problems(document, "timing_profile", PROFILE_VERSION, file):
        if problem.pointer.startswith("/calibration"):
            # The identity has no source_sha256 member, so it is not one it may hold.
            message = problem.message.replace(", source_sha256", "")
            problems.append(InputProblem(file, problem.pointer[len("/calibration") :], message))
    if problems:
        raise InvalidInput(sorted(problems))
    return value


def limit_problems(
    fitting: Sequence[Measurement], identity: Mapping[str, Any], file: str, identity_file: str
) -> list[str]:
    """R40 for the coverage to be written: each fitting range within the identity's limits,
    naming the line that reaches furthest."""
    limits = identity["limits"]
    bounds = {
        "decode_requests": (limits["max_num_seqs"], "limits.max_num_seqs"),
        "context_tokens": (
            limits["max_num_seqs"] * limits["max_model_len"],
            "limits.max_num_seqs * limits.max_model_len",
        ),
        "prefill_tokens": (limits["max_batched_tokens"], "limits.max_batched_tokens"),
    }
    problems = []
    for name, (bound, source) in bounds.items():
        furthest = max(fitting, key=lambda measurement: getattr(measurement.shape, name))
        value = getattr(furthest.shape, name)
        if value > bound:
            problems.append(
                f"{file}:{furthest.line}: {name} {value} is beyond what the engine could run: "
                f"{source} is {bound} in {identity_file} (R40)"
            )
    return problems
