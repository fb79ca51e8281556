"""The one timing profile Dynamo runs exactly: a grid equal to its fixed model.

Dynamo's fixed timing model costs a pass ``prefill_us`` when it prefills and ``decode_us`` when
it decodes (both when it does both). As a servesim grid (SPEC.md R41) that is three values per
axis, with a calibration identity that names the form rather than a measurement (R40). The
adapter's pages (``mooncake.py``, ``ranks_cases.py``) replay the same inputs through Dynamo and
the reference on this grid.
"""

from __future__ import annotations

from typing import Any


def fixed_form_grid(
    prefill_us: int, decode_us: int, seqs: int, budget: int, model_len: int
) -> dict[str, Any]:
    """A timing profile 1.1 equal to Dynamo's fixed model, covering the scheduler limits
    (``seqs`` requests, ``budget`` tokens per step, ``model_len`` tokens per request)."""
    p, d = prefill_us, decode_us
    axes = {  # each axis at least [0, 1, 2] wide, so that its three values are distinct
        "decode_requests": [0, 1, max(seqs, 2)],
        "context_tokens": [0, max(seqs * model_len, 1)],
        "prefill_tokens": [0, 1, max(budget, 2)],
    }
    return {
        "document": "timing_profile",
        "schema_version": "1.1",
        "calibration": {
            "engine": "dynamo-mocker-fixed",
            "engine_version": "1.6.1",
            "model": "none/fixed-timing",
            "model_revision": "r1",
            "gpu": "none",
            "server_config_sha256": "0" * 63 + "3",
            "source_sha256": "0" * 63 + "4",
            "limits": {
                "max_num_seqs": max(seqs, 2),
                "max_batched_tokens": budget,
                "max_model_len": model_len,
            },
        },
        "model": {
            "kind": "grid",
            "axes": axes,
            # duration_us[D][C][P]: no decode -> a prefill pass (p, also for the shape that
            # never runs); any decode -> d, plus p when it also prefills.
            "duration_us": [[[p, p, p]] * 2, [[d, p + d, p + d]] * 2, [[d, p + d, p + d]] * 2],
            "coverage": {name: {"min": 0, "max": values[-1]} for name, values in axes.items()},
        },
    }
