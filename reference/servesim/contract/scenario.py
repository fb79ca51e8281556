"""The scenario's own check (R4: the scheduler's limits agree) and its ``Scenario``.

The scenario's other rules across members (a state-aware policy needs a KV cache, R56; an SLO
names an objective, R63) are in its schema; what the schema cannot compare is here.
"""

from __future__ import annotations

from typing import Any

from servesim.contract.errors import InputProblem
from servesim.contract.model import (
    ClosedLoop,
    KvCache,
    Routing,
    Scenario,
    SchedulerLimits,
    Slo,
)


def scenario_problems(value: dict[str, Any], file: str) -> list[InputProblem]:
    """R4: a schema-valid scenario's scheduler can decode every running request in one step."""
    scheduler = value["scheduler"]
    if scheduler["max_batched_tokens"] >= scheduler["max_num_seqs"]:
        return []
    return [
        InputProblem(
            file,
            "/scheduler/max_batched_tokens",
            f"{scheduler['max_batched_tokens']} is less than max_num_seqs "
            f"({scheduler['max_num_seqs']}); every running request must be able to "
            "decode in the same step",
        )
    ]


def build_scenario(value: dict[str, Any]) -> Scenario:
    """The ``Scenario`` of a checked scenario document."""
    routing = value["routing"]
    scheduler = value["scheduler"]
    prefill = scheduler["prefill"]
    kv_cache = value.get("kv_cache")
    closed_loop = value.get("closed_loop")
    slo = value.get("slo")
    return Scenario(
        workers=value["fleet"]["workers"],
        routing=Routing(
            policy=routing["policy"],
            seed=routing.get("seed"),
            prefill_weight=routing.get("prefill_weight", 1),
            load_weight=routing.get("load_weight", 1),
        ),
        scheduler=SchedulerLimits(
            max_num_seqs=scheduler["max_num_seqs"],
            max_batched_tokens=scheduler["max_batched_tokens"],
            max_model_len=scheduler["max_model_len"],
            prefill_mode=prefill["mode"],
            max_chunk_tokens=prefill.get("max_chunk_tokens"),
        ),
        kv_cache=None
        if kv_cache is None
        else KvCache(
            blocks=kv_cache["blocks"],
            block_tokens=kv_cache["block_tokens"],
            prefix_caching=kv_cache["prefix_caching"],
        ),
        closed_loop=None if closed_loop is None else ClosedLoop(closed_loop["max_in_flight"]),
        stop_at_us=value.get("stop_at_us"),
        slo=None
        if slo is None
        else Slo(
            ttft_us=slo.get("ttft_us"),
            mean_itl_us=slo.get("mean_itl_us"),
            e2e_us=slo.get("e2e_us"),
        ),
    )
