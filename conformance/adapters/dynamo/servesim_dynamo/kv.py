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
from servesim_dynamo.mapping import Unsupported, host_offload_args

#: The feature named when a scenario has a KV cache (R45).
KV_CACHE_FEATURE = "kv_cache"


def host_caches(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    """The caches of a scenario that have a host tier (R129): the top-level one, then the
    pools' own, in document order."""
    caches = [scenario.get("kv_cache")]
    caches += [pool.get("kv_cache") for pool in scenario["fleet"].get("pools", [])]
    return [cache for cache in caches if cache is not None and "host" in cache]


def check_host(scenario: dict[str, Any], disaggregated: bool) -> None:
    """Refuse by name a host tier (R129-R140) that Dynamo's ``native_host_offload`` cannot
    run as SPEC.md says, before anything else about the cache is judged.

    Dynamo records host transfers (``host_offload_events``) only in the per-token runtime,
    which replays one aggregated worker of one rank ("detailed replay artifacts require fixed
    aggregated topology with one logical DP1 worker"): a disaggregated fleet or workers of
    several ranks with a host tier run through the documented replay, which records per-tier
    reuse per request but no transfer, so R140's host counters and ``load_wait_us`` could not
    be stated. A host tier whose transfers would end at a fraction of a microsecond in
    Dynamo is refused by ``mapping.host_offload_args``.
    """
    caches = host_caches(scenario)
    if not caches:
        return
    if disaggregated:
        raise Unsupported(
            "kv_cache.host.disaggregated",
            "Dynamo's disaggregated replay records no host transfers (only the one-worker "
            "per-token runtime does), so R140's host members and load_wait_us cannot be stated",
        )
    fleet = scenario["fleet"]
    ranks = [fleet.get("dp_size", 1)] + [p.get("dp_size", 1) for p in fleet.get("pools", [])]
    if max(ranks) > 1:
        raise Unsupported(
            "kv_cache.host.ranks",
            "Dynamo records host transfers only for a worker of one rank (its per-token "
            "runtime); with attention-DP ranks R140's host members and load_wait_us cannot be "
            "stated",
        )
    for cache in caches:
        host_offload_args(cache)


def check_continuing_turns(scenario: dict[str, Any], workload: dict[str, Any]) -> None:
    """Refuse continuing turns (workload 1.3 ``session_prompts_extend``, R125-R128) where they
    change the simulation: sessions and a cache with prefix caching (R127 identifies answer
    blocks only then). Dynamo's engine hashes answer blocks by content, but its trace replay
    draws every output token at random, so no later turn can match them (differences.json,
    host-answer-blocks). Without a prefix cache the member changes nothing and is read."""
    if not workload.get("session_prompts_extend") or "sessions" not in workload:
        return
    caches = [scenario.get("kv_cache")]
    caches += [pool.get("kv_cache") for pool in scenario["fleet"].get("pools", [])]
    if any(cache is not None and cache["prefix_caching"] for cache in caches):
        raise Unsupported(
            "workload.session_prompts_extend",
            "R127 reuses a turn's answer blocks in the next turn; Dynamo's trace replay draws "
            "output tokens at random, so its next turn never matches them (and its agentic "
            "replay, which plans output tokens, takes no servesim workload)",
        )


def check_kv_cache(scenario: dict[str, Any]) -> None:
    """Refuse a scenario with ``kv_cache`` (R45): its report cannot be stated exactly."""
    if "kv_cache" in scenario:
        host = (
            "; its host tier maps onto Dynamo's native_host_offload and is compared outside the "
            "harness (host_cases.py, HOST.md)"
            if host_caches(scenario)
            else ""
        )
        raise Unsupported(
            KV_CACHE_FEATURE,
            "Dynamo records no blocks in use per pass, so R52's peak_blocks_in_use and the "
            "trace's kv_blocks_in_use cannot be stated; it also registers a block when the "
            "pass that fills it is scheduled, not when it ends (R47), and caches output-token "
            "blocks for a preempted request's recompute (R47, R48) "
            f"(conformance/adapters/dynamo/KVCACHE.md){host}",
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
