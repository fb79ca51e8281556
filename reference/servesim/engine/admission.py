"""Which requests are rejected at arrival, and why (SPEC.md R10).

A rejection depends only on the request, the scenario's limits and its KV cache (every worker is
identical), so it is decided before routing: a rejected request joins no worker and takes no
routing turn or random draw.
"""

from __future__ import annotations

from servesim.contract.model import KvCache, PoolRole, Request, SchedulerLimits

#: Every reject reason, in the order R10 tests them; the first that applies is reported.
REJECT_REASONS: tuple[str, ...] = (
    "empty_prompt",
    "zero_max_output_tokens",
    "context_exceeds_max_model_len",
    "prefill_exceeds_step_budget",
    "exceeds_kv_cache",
)


def rejection_reason(
    request: Request,
    limits: SchedulerLimits,
    kv_cache: KvCache | None = None,
    role: PoolRole | None = None,
) -> str | None:
    """R10: the reason ``request`` is rejected at arrival, or ``None`` if it is accepted; in a
    disaggregated fleet (R100) judged for the request as it would be on a pool of ``role``:
    with one output token on the prefill side, and with no prefill of its own to fit the step
    budget on the decode side."""
    if request.prompt_tokens == 0:
        return "empty_prompt"
    if request.max_output_tokens == 0:
        return "zero_max_output_tokens"
    outputs = 1 if role == "prefill" else request.max_output_tokens
    # Written as a subtraction so that an implementation with 64-bit integers cannot overflow on
    # max_output_tokens up to 2**64 - 1; prompt_tokens > max_model_len is caught first.
    if (
        request.prompt_tokens > limits.max_model_len
        or outputs > limits.max_model_len - request.prompt_tokens
    ):
        return "context_exceeds_max_model_len"
    if (
        role != "decode"
        and limits.prefill_mode == "whole"
        and request.prompt_tokens > limits.max_batched_tokens
    ):
        return "prefill_exceeds_step_budget"
    if kv_cache is not None:
        # R90: under sglang a page of slack, so that a request always fits an empty worker's
        # page-rounded charge with its reserve; R10 (and R93) otherwise
        slack = kv_cache.block_tokens if limits.style == "sglang" else 0
        if request.prompt_tokens + outputs + slack > kv_cache.blocks * kv_cache.block_tokens:
            return "exceeds_kv_cache"  # it could never fit the worker's cache on its own
    return None


def rejection_reason_in_pools(
    request: Request, pools: list[tuple[SchedulerLimits, KvCache | None, PoolRole | None]]
) -> str | None:
    """R79: the first reason in R10's order that holds for at least one pool's limits, cache
    and role (``pools`` lists each distinct triple once), or ``None`` if every pool can serve
    it."""
    found = [rejection_reason(request, *pool) for pool in pools]
    reasons = [reason for reason in found if reason is not None]
    return min(reasons, key=REJECT_REASONS.index) if reasons else None
