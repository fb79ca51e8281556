"""A parsed report's figures (SPEC.md R25 to R29, R52, R63), for any report version 1.0 to 5.0.

Where the figures come from:

- the report as written: counts, makespan, the R27 statistics of queue time, TTFT, ITL and E2E,
  the per-worker counters, the input digests;
- derived exactly (``Fraction``) from the report's integers: throughputs
  (``completed * 10**6 / makespan_us``, and goodput's likewise), each worker's utilisation
  (``busy_us / makespan_us``), and per-request TPOT (``figures_tpot``);
- absent from older reports, and read as R64's migration to 5.0 gives them: ``cut_off`` is 0
  before 5.0, there is no goodput without ``slo`` (R63), and no request has a session; and as
  R124's migration to 9.0 gives them: nothing failed or migrated, the fleet never changed, each
  worker's ``worker_us`` is the makespan and a pool's its ``workers`` times the makespan.

Utilisation is R122's: ``busy_us`` over ``worker_us`` (a worker's, a pool's, or the summed
workers' for the mean), which is ``busy_us`` over the makespan for a fleet that never changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from servesim.contract import validity
from servesim.contract.canonical import canonical_json
from servesim.contract.errors import InvalidInput
from servesim.contract.header import check_header
from servesim.contract.json_reading import plain_numbers
from servesim.contract.migrations import default_pool
from servesim.contract.nearest_rank import PERCENTILES
from servesim.contract.schema_check import schema_problems
from servesim.engine.admission import REJECT_REASONS
from servesim_cli.figures_model import (
    FleetFigures,
    GoodputFigures,
    HostTierFigures,
    Inputs,
    KvCacheFigures,
    PoolFigures,
    ReportFigures,
    Statistics,
    Value,
    WorkerSpread,
)
from servesim_cli.figures_tpot import tpot_statistics


def figures_of(value: Any, file: str) -> ReportFigures:
    """The figures of a parsed report (``token_times_us`` and ``trace`` may be emptied)."""
    _, version = check_header(value, file, "report")
    _check(value, version, file)
    summary = value["summary"]
    makespan = summary["makespan_us"]
    inputs = value["inputs"]
    profile = inputs["timing_profile"]
    if profile is None:  # R85: profiles named per pool; one identity for the whole list
        listed = canonical_json(inputs["timing_profiles"])
        profile = {"sha256": hashlib.sha256(listed).hexdigest(), "calibration": None}
    calibration = profile.get("calibration")
    return ReportFigures(
        file=file,
        schema_version=version,
        inputs=Inputs(
            scenario_sha256=inputs["scenario"]["sha256"],
            workload_sha256=inputs["workload"]["sha256"],
            timing_profile_sha256=profile["sha256"],
            per_pool_profiles=inputs["timing_profile"] is None,
            calibration=None if calibration is None else canonical_json(calibration).decode(),
        ),
        traced=value["trace"] is not None,
        requests=summary["requests"],
        completed=summary["completed"],
        rejected=summary["rejected"],
        rejected_by_reason=tuple(
            # A report before 3.0 has no exceeds_kv_cache: it comes from a scenario without a
            # cache, where the count is 0 (R53), so reports of every version show the same rows.
            (reason, summary["rejected_by_reason"].get(reason, 0))
            # R114's no_routable_worker (report 9.0) likewise: 0 in every older report.
            for reason in (*REJECT_REASONS, "no_routable_worker")
        ),
        prompt_tokens=summary["prompt_tokens"],
        output_tokens=summary["output_tokens"],
        steps=summary["steps"],
        first_arrival_us=summary["first_arrival_us"],
        makespan_us=makespan,
        request_throughput_per_s=_quotient(summary["completed"] * 1_000_000, makespan),
        output_token_throughput_per_s=_quotient(summary["output_tokens"] * 1_000_000, makespan),
        queue_us=_as_written(summary["queue_us"]),
        ttft_us=_as_written(summary["ttft_us"]),
        itl_us=_as_written(summary["itl_us"]),
        tpot_us=tpot_statistics(value["requests"], file),
        e2e_us=_as_written(summary["e2e_us"]),
        workers=_worker_spread(value["workers"], makespan),
        fleet=_fleet_figures(summary, value),
        kv_cache=_kv_cache_figures(summary, value["workers"]),
        cut_off=summary.get("cut_off", 0),
        sessions=len({r.get("session") for r in value["requests"]} - {None}),
        goodput=_goodput_figures(summary, makespan),
        pools=tuple(_pool_figures(pool, makespan) for pool in _pools(value)),
    )


def _pools(value: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """R85's pools; before report 6.0, the one pool ``"default"`` R86's migration gives."""
    return list(value["pools"]) if "pools" in value else [default_pool(value)]


def _pool_figures(pool: Mapping[str, Any], makespan_us: int) -> PoolFigures:
    """R85's entry of one pool, its quotients recomputed exactly from its integers."""
    cache = pool["kv_cache"]
    return PoolFigures(
        name=pool["name"],
        workers=pool["workers"],
        dp_size=pool["dp_size"],
        routed=pool["routed"],
        completed=pool["completed"],
        output_tokens=pool["output_tokens"],
        busy_us=pool["busy_us"],
        utilization=_quotient(
            pool["busy_us"],
            pool.get("worker_us", pool["workers"] * makespan_us),  # R122, R124
        ),
        request_throughput_per_s=_quotient(pool["completed"] * 1_000_000, makespan_us),
        output_token_throughput_per_s=_quotient(pool["output_tokens"] * 1_000_000, makespan_us),
        kv_cache=None
        if cache is None
        else (cache["peak_blocks_in_use"], cache["preemptions"], cache["evictions"]),
        style=pool.get("style", "vllm"),  # R95, report 7.0
        role=pool.get("role"),  # R107, report 8.0
        retractions=0 if cache is None else cache.get("retractions", 0),
    )


#: R123's ``fail_reason`` values, in the report's (sorted) order of ``failed_by_reason``.
FAIL_REASONS = ("migration_limit", "no_routable_worker", "worker_failure")

#: R123's ``summary.fleet`` members, in the order ``FleetFigures`` has them.
_FLEET_COUNTS = (
    "scale_ups",
    "scale_downs",
    "cancelled",
    "drained",
    "failures",
    "ignored_failures",
    "recoveries",
)


def _fleet_figures(summary: Mapping[str, Any], value: Mapping[str, Any]) -> FleetFigures:
    """R122, R123's figures; before report 9.0 those R124's migration gives."""
    if "worker_us" in summary:
        worker_us = summary["worker_us"]
        fleet = summary["fleet"]
        by_reason = summary["failed_by_reason"]
    else:  # R124: every pool's initial workers for the whole makespan, nothing changed
        worker_us = summary["makespan_us"] * len(value["workers"])
        fleet = dict.fromkeys(_FLEET_COUNTS, 0)
        by_reason = {}
    return FleetFigures(
        failed_by_reason=tuple((reason, by_reason.get(reason, 0)) for reason in FAIL_REASONS),
        migrations=summary.get("migrations", 0),
        lost_tokens=summary.get("lost_tokens", 0),
        recomputed_tokens=summary.get("recomputed_tokens", 0),
        worker_us=worker_us,
        worker_hours=Fraction(worker_us, 3_600_000_000),
        **{name: fleet[name] for name in _FLEET_COUNTS},
    )


def _goodput_figures(summary: Mapping[str, Any], makespan_us: int) -> GoodputFigures | None:
    """R63's goodput, ``None`` when the report has none (no ``slo``, or a report before 5.0)."""
    goodput = summary.get("goodput")
    if goodput is None:
        return None
    return GoodputFigures(
        requests=goodput["requests"],
        output_tokens=goodput["output_tokens"],
        share_of_completed=_quotient(goodput["requests"], summary["completed"]),
        request_throughput_per_s=_quotient(goodput["requests"] * 1_000_000, makespan_us),
        output_token_throughput_per_s=_quotient(goodput["output_tokens"] * 1_000_000, makespan_us),
    )


def _kv_cache_figures(
    summary: Mapping[str, Any], workers: Sequence[Mapping[str, Any]]
) -> KvCacheFigures | None:
    """R52's cache figures, ``None`` when the report has none (``kv_cache`` null or absent)."""
    cache = summary.get("kv_cache")
    if cache is None:
        return None
    return KvCacheFigures(
        reused_prompt_tokens=cache["reused_prompt_tokens"],
        prefix_reuse_ratio=_quotient(cache["reused_prompt_tokens"], summary["prompt_tokens"]),
        preemptions=cache["preemptions"],
        evictions=cache["evictions"],
        # R85: with pools, a worker of a pool without a cache has kv_cache null.
        peak_blocks_in_use=max(
            worker["kv_cache"]["peak_blocks_in_use"]
            for worker in workers
            if worker["kv_cache"] is not None
        ),
        retractions=cache.get("retractions", 0),  # R95, report 7.0
        host=_host_tier(cache, summary["prompt_tokens"]),
    )


def _host_tier(cache: dict[str, Any], prompt_tokens: int) -> HostTierFigures | None:
    """R140: the fleet's host tier, from report 10.0's ``summary.kv_cache``."""
    host = cache.get("host")
    if host is None:
        return None
    reused = cache["host_reused_prompt_tokens"]
    return HostTierFigures(
        reused_prompt_tokens=reused,
        host_reuse_ratio=_quotient(reused, prompt_tokens),
        stores=host["stores"],
        stored_blocks=host["stored_blocks"],
        loads=host["loads"],
        loaded_blocks=host["loaded_blocks"],
        evictions=host["evictions"],
        skipped_blocks=host["skipped_blocks"],
    )


def _quotient(numerator: int, denominator: int) -> Value:
    return None if denominator == 0 else Fraction(numerator, denominator)


def _exact(number: int | float | None) -> Value:
    """A report number as an exact value (a float is exactly the binary64 the report holds)."""
    return None if number is None else Fraction(number)


def _as_written(statistics: Mapping[str, Any]) -> Statistics:
    return Statistics(
        count=statistics["count"],
        min=_exact(statistics["min"]),
        max=_exact(statistics["max"]),
        mean=_exact(statistics["mean"]),
        percentiles=tuple((percent, _exact(statistics[f"p{percent}"])) for percent in PERCENTILES),
    )


def _check(value: dict[str, Any], version: str, file: str) -> None:
    """R3 for what the figures read: the whole schema, but for the requests after the first
    (checking 12,000 requests member by member with jsonschema takes seconds, longer than all
    the rest); ``tpot_statistics`` checks what it reads of those."""
    requests = value.get("requests")
    sample = {**value, "requests": requests[:1]} if isinstance(requests, list) else value
    # A valid sample is recognised fast (servesim.contract.validity); only an invalid one is
    # explained.
    if plain_numbers(sample) and validity.is_valid(sample, "report", version):
        return
    problems = schema_problems(sample, "report", version, file)
    if problems:
        raise InvalidInput(problems)


def _worker_spread(workers: Sequence[Mapping[str, Any]], makespan_us: int) -> WorkerSpread:
    """R29's spread; a worker's utilisation is R122's ``busy_us / worker_us`` (``worker_us``
    the makespan before report 9.0, R124), a worker with no worker time has none."""
    worker_us = [worker.get("worker_us", makespan_us) for worker in workers]
    busy = [worker["busy_us"] for worker in workers]
    shares = [_quotient(b, w) for b, w in zip(busy, worker_us, strict=True)]
    measured = [index for index, share in enumerate(shares) if share is not None] or [0]
    least = min(measured, key=lambda index: shares[index] or 0)
    most = max(measured, key=lambda index: (shares[index] or 0, -index))
    routed = [worker["routed"] for worker in workers]
    return WorkerSpread(
        workers=len(workers),
        utilization_min=shares[least],
        utilization_mean=_quotient(sum(busy), sum(worker_us)),
        utilization_max=shares[most],
        least_busy_worker=workers[least]["worker"],
        most_busy_worker=workers[most]["worker"],
        routed_min=min(routed),
        routed_max=max(routed),
        peak_running=max(worker["peak_running"] for worker in workers),
        peak_waiting=max(worker["peak_waiting"] for worker in workers),
    )
