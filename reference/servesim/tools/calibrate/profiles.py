"""Writing the profiles (R40 to R42): the calibration identity and a fitted model as a timing
profile document, and its bytes checked by reading them back.

Every number written is an integer; the errors in the summary are computed with the written
profiles' own integer arithmetic, so ``checked_profile`` returns the model as read back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from servesim.contract.documents import load_document
from servesim.contract.model import (
    SHAPE_DIMENSIONS,
    Coverage,
    GridTiming,
    RegressionTiming,
    TimingModel,
)
from servesim.contract.timing_profile import build_timing_profile

#: The timing-profile version calibrate writes: a grid or regression model needs 1.1 (R2).
PROFILE_VERSION = "1.1"

#: The order a written profile lists its calibration members in: the schema's.
_CALIBRATION_MEMBERS = (
    "engine",
    "engine_version",
    "model",
    "model_revision",
    "gpu",
    "server_config_sha256",
    "source_sha256",
    "limits",
)
_LIMITS = ("max_num_seqs", "max_batched_tokens", "max_model_len")


def profile_value(calibration: Mapping[str, Any], model: Mapping[str, Any]) -> dict[str, Any]:
    """A timing profile document of this version with its two members."""
    return {
        "document": "timing_profile",
        "schema_version": PROFILE_VERSION,
        "calibration": calibration,
        "model": model,
    }


def calibration_value(identity: Mapping[str, Any], source_sha256: str) -> dict[str, Any]:
    """R40's ``calibration``: the identity with ``source_sha256``, in the schema's order, so
    the bytes do not depend on how the identity file orders its members."""
    value = {**identity, "source_sha256": source_sha256}
    value["limits"] = {name: identity["limits"][name] for name in _LIMITS}
    return {name: value[name] for name in _CALIBRATION_MEMBERS}


def _coverage_value(coverage: Coverage) -> dict[str, dict[str, int]]:
    return {
        name: {"min": getattr(coverage, name).min, "max": getattr(coverage, name).max}
        for name in SHAPE_DIMENSIONS
    }


def regression_value(model: RegressionTiming) -> dict[str, Any]:
    """R42's model member for a fitted regression."""
    return {
        "kind": "regression",
        "intercept_ns": model.intercept_ns,
        "prefill_knots": [{"tokens": knot.tokens, "ns": knot.ns} for knot in model.prefill_knots],
        "decode_request_ns": model.decode_request_ns,
        "context_token_ps": model.context_token_ps,
        "coverage": _coverage_value(model.coverage),
    }


def grid_value(model: GridTiming) -> dict[str, Any]:
    """R41's model member for a grid."""
    axes = (model.decode_axis, model.context_axis, model.prefill_axis)
    return {
        "kind": "grid",
        "axes": {name: list(axis) for name, axis in zip(SHAPE_DIMENSIONS, axes, strict=True)},
        "duration_us": [[list(row) for row in plane] for plane in model.durations],
        "coverage": _coverage_value(model.coverage),
    }


def checked_profile(value: dict[str, Any], name: str) -> tuple[bytes, TimingModel]:
    """The profile's bytes and the model read back from them: only a profile that passes R1 to
    R4 and R40 is written, and the errors reported are the written model's own."""
    data = (json.dumps(value, indent=2) + "\n").encode("utf-8")
    document = load_document(data, name, "timing_profile")
    return data, build_timing_profile(document.value).model
