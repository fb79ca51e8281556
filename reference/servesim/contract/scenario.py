"""The scenario's own check (R4: the scheduler's limits agree) and its ``Scenario``.

The scenario's other rules across members (a state-aware policy needs a KV cache, R56; an SLO
names an objective, R63) are in its schema; what the schema cannot compare is here.
"""

from __future__ import annotations

from typing import Any

from servesim.contract.errors import InputProblem
from servesim.contract.fleet_checks import fleet_change_problems
from servesim.contract.model import (
    DEFAULT_POOL,
    Autoscale,
    ClosedLoop,
    FailureEvent,
    Failures,
    HostTier,
    KvCache,
    KvTransfer,
    Pool,
    Routing,
    Scaling,
    Scenario,
    ScheduleEntry,
    SchedulerLimits,
    SglangOptions,
    Slo,
)

#: R77: the most workers of all pools together, and the most ranks (workers times dp_size).
MAX_FLEET_WORKERS = 65_536
MAX_FLEET_RANKS = 1 << 20


def scenario_problems(value: dict[str, Any], file: str) -> list[InputProblem]:
    """R4: what a schema-valid scenario's schema cannot compare: each pool's limits can decode
    every running request in one step, and R77's checks of the pools."""
    problems = [InputProblem(file, where, reason) for where, reason in _limits_problems(value)]
    pools = value["fleet"].get("pools")
    problems.extend(InputProblem(file, where, reason) for where, reason in _role_problems(value))
    if pools is not None:
        problems.extend(
            InputProblem(file, where, reason) for where, reason in _pool_problems(value)
        )
    elif value["fleet"]["workers"] * value["fleet"].get("dp_size", 1) > MAX_FLEET_RANKS:
        problems.append(
            InputProblem(
                file,
                "/fleet/dp_size",
                f"workers * dp_size is {value['fleet']['workers'] * value['fleet']['dp_size']}; "
                f"expected at most {MAX_FLEET_RANKS} ranks in the fleet (R77)",
            )
        )
    problems.extend(
        InputProblem(file, where, reason) for where, reason in fleet_change_problems(value)
    )
    return problems


def _batched_problem(scheduler: dict[str, Any], where: str) -> list[tuple[str, str]]:
    if scheduler["max_batched_tokens"] >= scheduler["max_num_seqs"]:
        return []
    return [
        (
            where + "/scheduler/max_batched_tokens",
            f"{scheduler['max_batched_tokens']} is less than max_num_seqs "
            f"({scheduler['max_num_seqs']}); every running request must be able to "
            "decode in the same step",
        )
    ]


def _sglang_problems(
    scheduler: dict[str, Any], cache: dict[str, Any] | None, where: str
) -> list[tuple[str, str]]:
    """R88: under style ``"sglang"`` the chunk is a budget of the whole step, at most the step
    budget, and with a cache a whole number of pages (the schema already requires chunked
    prefill with that style)."""
    if scheduler.get("style") != "sglang":
        return []
    chunk = scheduler["prefill"]["max_chunk_tokens"]
    pointer = where + "/scheduler/prefill/max_chunk_tokens"
    if chunk > scheduler["max_batched_tokens"]:
        return [
            (
                pointer,
                f"{chunk} is more than max_batched_tokens ({scheduler['max_batched_tokens']}); "
                'style "sglang" needs max_chunk_tokens <= max_batched_tokens (R88)',
            )
        ]
    if cache is not None and chunk % cache["block_tokens"]:
        return [
            (
                pointer,
                f"{chunk} is not a multiple of the cache's block_tokens ({cache['block_tokens']});"
                ' style "sglang" prefills whole pages (R88)',
            )
        ]
    return []


def _limits_problems(value: dict[str, Any]) -> list[tuple[str, str]]:
    """R4, R77, R88: the scenario's limits, and each pool's own, decode every running request in
    one step (the scenario's reported once, however many pools use them); an sglang style's
    chunk fits the step and its cache's pages, judged for each pair of limits and cache a worker
    uses, at the limits' pointer."""
    scheduler = value["scheduler"]
    cache = value.get("kv_cache")
    problems = _batched_problem(scheduler, "")
    pools = value["fleet"].get("pools")
    if pools is None:
        return problems + _sglang_problems(scheduler, cache, "")
    reported: set[str] = set()
    for index, pool in enumerate(pools):
        own = "scheduler" in pool
        where = f"/fleet/pools/{index}" if own else ""
        if own:
            problems.extend(_batched_problem(pool["scheduler"], where))
        for pointer, reason in _sglang_problems(
            pool.get("scheduler", scheduler), pool.get("kv_cache", cache), where
        ):
            if pointer not in reported:  # the scenario's limits, reported once
                reported.add(pointer)
                problems.append((pointer, reason))
    return problems


def _role_problems(value: dict[str, Any]) -> list[tuple[str, str]]:
    """R97: a disaggregated fleet (pools with roles) has every role, a transfer, a cache and no
    sglang style on every pool, and no weight on a decode pool; an aggregated one has neither a
    transfer nor a decode router."""
    pools: list[dict[str, Any]] = value["fleet"].get("pools", [])
    roles = [pool.get("role") for pool in pools]
    if not any(roles):
        return [
            (pointer, f"{member} is only for a fleet whose pools have roles (R97)")
            for pointer, member, present in (
                ("/kv_transfer", "kv_transfer", "kv_transfer" in value),
                ("/routing/decode", "routing.decode", "decode" in value["routing"]),
            )
            if present
        ]
    problems: list[tuple[str, str]] = []
    if None in roles:
        index = roles.index(None)
        problems.append(
            (
                f"/fleet/pools/{index}",
                "this pool has no role beside pools with one; expected every pool to have "
                'role "prefill" or "decode" (R97)',
            )
        )
    for role in ("prefill", "decode"):
        if role not in roles:
            problems.append(
                (
                    "/fleet/pools",
                    f'no pool has role "{role}"; a disaggregated fleet needs both (R97)',
                )
            )
    if "kv_transfer" not in value:
        problems.append(("", "a fleet whose pools have roles needs kv_transfer (R97)"))
    for index, pool in enumerate(pools):
        where = f"/fleet/pools/{index}"
        if pool.get("kv_cache", value.get("kv_cache")) is None:
            problems.append(
                (
                    where,
                    "a pool of a disaggregated fleet needs a kv_cache, its own or the "
                    "scenario's (R97)",
                )
            )
        own = "scheduler" in pool
        if pool.get("scheduler", value["scheduler"]).get("style") == "sglang":
            problems.append(
                (
                    (where if own else "") + "/scheduler/style",
                    'style "sglang" is not allowed in a disaggregated fleet: its handoff is '
                    'destination-first; expected "vllm" or "trtllm" (R97)',
                )
            )
        if pool.get("role") == "decode" and "weight" in pool:
            problems.append(
                (
                    where + "/weight",
                    "a decode pool has no weight: weighted round robin routes "
                    "the prefill side only (R97, R99)",
                )
            )
    return list(dict.fromkeys(problems))  # the scenario's own sglang limits, reported once


def _pool_problems(value: dict[str, Any]) -> list[tuple[str, str]]:
    """R77's checks across pools, each at the pointer R77 names."""
    pools: list[dict[str, Any]] = value["fleet"]["pools"]
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    weighted = value["routing"]["policy"] == "weighted_round_robin"
    for index, pool in enumerate(pools):
        if pool["name"] in seen:
            problems.append(
                (
                    f"/fleet/pools/{index}/name",
                    f"the pool name {pool['name']!r} is given twice; expected distinct names",
                )
            )
        seen.add(pool["name"])
        if "weight" in pool and not weighted:
            problems.append(
                (
                    f"/fleet/pools/{index}/weight",
                    "a pool's weight is allowed only with routing.policy "
                    '"weighted_round_robin" (R81)',
                )
            )
    workers = sum(pool["workers"] for pool in pools)
    ranks = sum(pool["workers"] * pool.get("dp_size", 1) for pool in pools)
    if workers > MAX_FLEET_WORKERS:
        problems.append(
            ("/fleet/pools", f"the pools have {workers} workers; expected at most 65536")
        )
    if ranks > MAX_FLEET_RANKS:
        problems.append(
            (
                "/fleet/pools",
                f"the pools have {ranks} ranks (workers * dp_size); expected at most "
                f"{MAX_FLEET_RANKS}",
            )
        )
    if value["routing"]["policy"] == "cache_aware":
        problems.extend(_cache_aware_problems(value, pools))
    return problems


def _cache_aware_problems(
    value: dict[str, Any], pools: list[dict[str, Any]]
) -> list[tuple[str, str]]:
    """R77: under ``"cache_aware"`` every pool has a prefix cache, all of one block size (R56
    compares blocks across workers); the first pool that breaks it is reported."""
    block_tokens = None
    for index, pool in enumerate(pools):
        if pool.get("role") == "decode":  # R97: the decode side is not routed by it
            continue
        own = "kv_cache" in pool
        cache = pool.get("kv_cache", value.get("kv_cache"))
        where = f"/fleet/pools/{index}" + ("/kv_cache" if own else "")
        if cache is None or not cache["prefix_caching"]:
            return [
                (
                    where,
                    'routing.policy "cache_aware" needs every pool to have a kv_cache with '
                    "prefix_caching true (R56, R77)",
                )
            ]
        if block_tokens is None:
            block_tokens = cache["block_tokens"]
        elif cache["block_tokens"] != block_tokens:
            return [
                (
                    where,
                    f"block_tokens {cache['block_tokens']} differs from the first pool's "
                    f'({block_tokens}); "cache_aware" needs one block size in every pool (R77)',
                )
            ]
    return []


def build_scenario(value: dict[str, Any]) -> Scenario:
    """The ``Scenario`` of a checked scenario document."""
    routing = value["routing"]
    scheduler = value["scheduler"]
    kv_cache = value.get("kv_cache")
    closed_loop = value.get("closed_loop")
    slo = value.get("slo")
    limits = _limits(scheduler)
    cache = _kv_cache(kv_cache)
    pools = _pools(value["fleet"], limits, cache)
    transfer = value.get("kv_transfer")
    decode = routing.get("decode", {"policy": "round_robin"}) if transfer is not None else None
    return Scenario(
        workers=sum(pool.workers for pool in pools),
        routing=Routing(
            policy=routing["policy"],
            seed=routing.get("seed"),
            prefill_weight=routing.get("prefill_weight", 1),
            load_weight=routing.get("load_weight", 1),
            decode=None if decode is None else Routing(decode["policy"], decode.get("seed")),
        ),
        scheduler=limits,
        kv_cache=cache,
        closed_loop=None if closed_loop is None else ClosedLoop(closed_loop["max_in_flight"]),
        stop_at_us=value.get("stop_at_us"),
        slo=None
        if slo is None
        else Slo(
            ttft_us=slo.get("ttft_us"),
            mean_itl_us=slo.get("mean_itl_us"),
            e2e_us=slo.get("e2e_us"),
        ),
        pools=pools,
        kv_transfer=None
        if transfer is None
        else KvTransfer(
            bytes_per_token=transfer["bytes_per_token"],
            bandwidth_bytes_per_s=transfer["bandwidth_bytes_per_s"],
            base_latency_us=transfer["base_latency_us"],
            full_prompt=transfer.get("mode") == "full_prompt",
        ),
        failures=_failures(value.get("failures")),
    )


def _scaling(scaling: dict[str, Any] | None) -> Scaling | None:
    """R110, R115: a pool's scaling, or ``None`` without one."""
    if scaling is None:
        return None
    autoscale = scaling.get("autoscale")
    return Scaling(
        startup_us=scaling.get("startup_us", 0),
        schedule=tuple(
            ScheduleEntry(entry["at_us"], entry["target"]) for entry in scaling.get("schedule", ())
        ),
        autoscale=None
        if autoscale is None
        else Autoscale(
            interval_us=autoscale["interval_us"],
            metric=autoscale["metric"],
            up_permille=autoscale["up_permille"],
            down_permille=autoscale["down_permille"],
            min=autoscale["min"],
            max=autoscale["max"],
            step=autoscale.get("step", 1),
            cooldown_us=autoscale.get("cooldown_us", 0),
        ),
    )


def _failures(failures: dict[str, Any] | None) -> Failures | None:
    """R116, R118: the scenario's failures, or ``None`` without any."""
    if failures is None:
        return None
    return Failures(
        events=tuple(
            FailureEvent(
                event["pool"], event["pool_worker"], event["at_us"], event.get("recover_after_us")
            )
            for event in failures["events"]
        ),
        policy=failures["policy"],
        max_migrations=failures.get("max_migrations"),
    )


def _limits(scheduler: dict[str, Any]) -> SchedulerLimits:
    prefill = scheduler["prefill"]
    style = scheduler.get("style", "vllm")
    options = scheduler.get("sglang", {})
    return SchedulerLimits(
        max_num_seqs=scheduler["max_num_seqs"],
        max_batched_tokens=scheduler["max_batched_tokens"],
        max_model_len=scheduler["max_model_len"],
        prefill_mode=prefill["mode"],
        max_chunk_tokens=prefill.get("max_chunk_tokens"),
        style=style,
        sglang=SglangOptions(**options) if style == "sglang" else None,
    )


def _kv_cache(kv_cache: dict[str, Any] | None) -> KvCache | None:
    if kv_cache is None:
        return None
    return KvCache(
        blocks=kv_cache["blocks"],
        block_tokens=kv_cache["block_tokens"],
        prefix_caching=kv_cache["prefix_caching"],
        host=_host_tier(kv_cache.get("host")),
    )


def _host_tier(host: dict[str, Any] | None) -> HostTier | None:
    """R129: a cache's ``host`` member (scenario 1.8), ``None`` when absent."""
    if host is None:
        return None
    return HostTier(
        blocks=host["blocks"],
        bytes_per_token=host["bytes_per_token"],
        store_bytes_per_s=host["store_bytes_per_s"],
        load_bytes_per_s=host["load_bytes_per_s"],
    )


def _pools(
    fleet: dict[str, Any], limits: SchedulerLimits, cache: KvCache | None
) -> tuple[Pool, ...]:
    """R77: the fleet's pools, each with the limits and cache it uses; ``fleet.workers`` is
    the one pool ``"default"``."""
    if "pools" not in fleet:
        return (
            Pool(
                DEFAULT_POOL,
                fleet["workers"],
                limits,
                cache,
                fleet.get("dp_size", 1),
                scaling=_scaling(fleet.get("scaling")),
            ),
        )
    return tuple(
        Pool(
            name=pool["name"],
            workers=pool["workers"],
            scheduler=_limits(pool["scheduler"]) if "scheduler" in pool else limits,
            kv_cache=_kv_cache(pool["kv_cache"]) if "kv_cache" in pool else cache,
            dp_size=pool.get("dp_size", 1),
            weight=pool.get("weight", 1),
            role=pool.get("role"),
            scaling=_scaling(pool.get("scaling")),
        )
        for pool in fleet["pools"]
    )
