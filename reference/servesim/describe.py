"""The reference's answer to the conformance harness's ``--describe`` handshake."""

from __future__ import annotations

from typing import Any

from servesim.schemas import SUPPORTED_VERSIONS

#: The harness protocol this implementation speaks (conformance/README.md).
PROTOCOL_VERSION = 1

#: Every optional feature a golden case may need; the reference has them all.
FEATURES: tuple[str, ...] = (
    "prefill.chunked",
    "prefill.whole",
    "routing.random",
    "routing.round_robin",
    "timing.synthetic_linear",
    "trace",
)


def description(version: str) -> dict[str, Any]:
    """The ``--describe`` document (schemas/harness/v1/describe.schema.json)."""
    return {
        "name": "servesim-reference",
        "version": version,
        "protocol_version": PROTOCOL_VERSION,
        "schema_versions": {kind: list(versions) for kind, versions in SUPPORTED_VERSIONS.items()},
        "features": list(FEATURES),
    }
