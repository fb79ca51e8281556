"""The reference's answer to the conformance harness's ``--describe`` handshake."""

from __future__ import annotations

from typing import Any

from servesim.contract.schemas import SUPPORTED_VERSIONS, WRITTEN_REPORT_VERSIONS

#: The harness protocol this implementation speaks (conformance/README.md): 5, whose one
#: change from 2 that concerns the reference is the tag ``timing.per_pool`` (R87).
PROTOCOL_VERSION = 5

#: Every optional feature a golden case may need; the reference has them all.
FEATURES: tuple[str, ...] = (
    "prefill.chunked",
    "prefill.whole",
    "routing.random",
    "routing.round_robin",
    "timing.grid",
    "timing.per_pool",
    "timing.regression",
    "timing.synthetic_linear",
    "trace",
)


def description(version: str) -> dict[str, Any]:
    """The ``--describe`` document (schemas/harness/v5/describe.schema.json).

    Inputs list every version read; the report lists the versions written (R38). Reading
    scenario 1.4 the reference writes report 6.0, as R38 and R86 require of every
    implementation (an older report cannot say which pool and rank served a request, R85; none
    older than 5.0 has a cut-off outcome, session or goodput, R64; and none older than 4.0 can
    say what state-aware routing saw, R57); the harness refuses a description that breaks that.
    None of these needs a feature tag: the cases of pools, ranks and weighted round robin are
    those with a scenario 1.4 (R86), those of sessions, the closed loop, the stop time and the
    objectives those with a workload 1.2 or a scenario 1.3 (R64), as the state-aware policies'
    are those with a scenario 1.2, skipped for an implementation that does not read them. Only
    the per-pool form of ``--timing-profile`` is a feature, ``timing.per_pool`` (R87).
    """
    versions = {kind: list(read) for kind, read in SUPPORTED_VERSIONS.items()}
    versions["report"] = list(WRITTEN_REPORT_VERSIONS)
    return {
        "name": "servesim-reference",
        "version": version,
        "protocol_version": PROTOCOL_VERSION,
        "schema_versions": versions,
        "features": list(FEATURES),
    }
