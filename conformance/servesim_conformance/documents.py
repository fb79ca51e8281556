"""Builders for the three input documents, shared by the strategies and the tests."""

from __future__ import annotations

from typing import Any


def timing_doc(
    *,
    step_overhead_ns: int = 1_000_000,
    prefill_token_ns: int = 10_000,
    decode_token_ns: int = 100_000,
) -> dict[str, Any]:
    """A synthetic_linear timing-profile document."""
    return {
        "document": "timing_profile",
        "schema_version": "1.0",
        "model": {
            "kind": "synthetic_linear",
            "step_overhead_ns": step_overhead_ns,
            "prefill_token_ns": prefill_token_ns,
            "decode_token_ns": decode_token_ns,
        },
    }
