"""R4 across documents: what a scenario and a workload, each valid alone, break together.

Each problem is reported in the file whose member is to change, naming the other file.
"""

from __future__ import annotations

from typing import Any

from servesim.contract.documents import Document
from servesim.contract.errors import InputProblem, pointer, raise_if_any


def pair_problems(scenario: Document, workload: Document) -> list[InputProblem]:
    """R4's checks of a scenario and a workload together, each reported at the member to change.

    R62: a stop time comes after the first arrival (a run that stops before anything arrives
    would have no first arrival to measure from), reported at the scenario's ``/stop_at_us``.
    R47: with a KV cache, a prefix hash covers whole cache blocks, so
    ``prefix_hash_block_tokens`` is a multiple of ``block_tokens``, reported at the workload's
    ``/prefix_hash_block_tokens``.
    """
    problems: list[InputProblem] = []
    stop_at_us = scenario.value.get("stop_at_us")
    if stop_at_us is not None:
        requests = workload.value["requests"]
        first = min(range(len(requests)), key=lambda index: requests[index]["arrival_us"])
        earliest = requests[first]["arrival_us"]
        if stop_at_us <= earliest:
            problems.append(
                InputProblem(
                    scenario.file,
                    "/stop_at_us",
                    f"{stop_at_us} is not after the workload's first arrival ({earliest}, at "
                    f"{pointer(['requests', first, 'arrival_us'])} in {workload.file}); "
                    f"expected more than {earliest}",
                )
            )
    hash_tokens = workload.value.get("prefix_hash_block_tokens")
    if hash_tokens is not None:
        for block_tokens in _cache_block_tokens(scenario.value):
            if hash_tokens % block_tokens:
                problems.append(
                    InputProblem(
                        workload.file,
                        "/prefix_hash_block_tokens",
                        f"{hash_tokens} is not a multiple of the scenario's kv_cache.block_tokens "
                        f"({block_tokens}, in {scenario.file}); expected a multiple of it",
                    )
                )
                break
    return problems


def check_pair(scenario: Document, workload: Document) -> None:
    """Raise ``InvalidInput`` if the scenario and the workload break R4 together."""
    raise_if_any(pair_problems(scenario, workload))


def _cache_block_tokens(scenario: dict[str, Any]) -> list[int]:
    """R47, R77: the block size of every cache a pool uses, in pool order (the scenario's
    ``kv_cache`` for the pools without their own)."""
    shared = scenario.get("kv_cache")
    pools = scenario["fleet"].get("pools")
    caches = [shared] if pools is None else [pool.get("kv_cache", shared) for pool in pools]
    return [cache["block_tokens"] for cache in caches if cache is not None]
