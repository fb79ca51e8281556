"""The KV cache (SPEC.md section 11) as Dynamo records it, and what the adapter refuses.

Dynamo's mocker keeps a vLLM-style block cache and records, per request, every admission with
the prompt tokens it reused (``admission_history[i].reused_input_tokens``) and how many times it
was readmitted after a preemption (``readmission_count``). Those two map exactly onto R52's
``reused_prompt_tokens`` (the first admission's) and ``preemptions`` (one readmission per
preemption, for a request that completes). What it does not record is the blocks in use after
each pass, so R52's ``peak_blocks_in_use`` and the trace's ``kv_blocks_in_use`` cannot be
stated: a scenario with ``kv_cache`` is refused by name (KVCACHE.md here says why, rule by
rule). A workload's ``prefix_hashes`` change nothing without a cache (R47, R53), so they are
read and left out of Dynamo's input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servesim_dynamo.errors import DynamoResult
from servesim_dynamo.mapping import Unsupported

#: The feature named when a scenario has a KV cache (R45).
KV_CACHE_FEATURE = "kv_cache"


def check_kv_cache(scenario: dict[str, Any]) -> None:
    """Refuse a scenario with ``kv_cache`` (R45): its report cannot be stated exactly."""
    if "kv_cache" in scenario:
        raise Unsupported(
            KV_CACHE_FEATURE,
            "Dynamo records no blocks in use per pass, so R52's peak_blocks_in_use and the "
            "trace's kv_blocks_in_use cannot be stated; it also registers a block when the "
            "pass that fills it is scheduled, not when it ends (R47), and caches output-token "
            "blocks for a preempted request's recompute (R47, R48) "
            "(conformance/adapters/dynamo/KVCACHE.md)",
        )


@dataclass(frozen=True)
class CacheRecord:
    """One request's cache figures as Dynamo recorded them."""

    reused_by_admission: tuple[int, ...]
    """Prompt tokens reused at each admission, the first one first (readmissions after)."""

    @property
    def reused_prompt_tokens(self) -> int:
        """R48/R52: the tokens reused at the first admission (0 if never admitted)."""
        return self.reused_by_admission[0] if self.reused_by_admission else 0

    @property
    def reused_tokens(self) -> int:
        """R52's worker ``reused_tokens`` share: every admission, readmissions included."""
        return sum(self.reused_by_admission)

    @property
    def preemptions(self) -> int:
        """R49/R52: one readmission per preemption (the request completes)."""
        return max(0, len(self.reused_by_admission) - 1)


def cache_record(record: dict[str, Any]) -> CacheRecord:
    """The cache figures of one ``per_request`` record; an error if they disagree."""
    request = record.get("request_id") or record.get("uuid")
    history = record.get("admission_history")
    if history is None:
        raise DynamoResult(f"request {request!r}: Dynamo recorded no admission_history")
    ordered = sorted(history, key=lambda admission: admission["admission_ordinal"])
    if [admission["is_readmission"] for admission in ordered] != [
        index > 0 for index in range(len(ordered))
    ]:
        raise DynamoResult(f"request {request!r}: admissions out of order in admission_history")
    if max(0, len(ordered) - 1) != record["readmission_count"]:
        raise DynamoResult(
            f"request {request!r}: {len(ordered)} admissions for readmission_count "
            f"{record['readmission_count']}"
        )
    return CacheRecord(tuple(admission["reused_input_tokens"] for admission in ordered))
