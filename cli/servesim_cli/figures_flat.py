"""Every figure of a report by a stable dotted name, a label and a unit, in table order: the
rows ``servesim summary`` prints and ``servesim compare`` pairs, the same for any two reports.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

from servesim_cli.figures_model import (
    FleetFigures,
    GoodputFigures,
    KvCacheFigures,
    ReportFigures,
    Statistics,
    Value,
)


@dataclass(frozen=True)
class Figure:
    """One figure by a stable name, for tables, comparisons and machine-readable output."""

    #: A stable dotted name, e.g. ``ttft_us.p99`` or ``rejected_by_reason.empty_prompt``.
    key: str
    #: What a table calls it, e.g. ``TTFT p99``.
    label: str
    #: How to show it: ``count``; ``ms`` and ``s`` (the value is in microseconds);
    #: ``per_s``; ``percent`` (the value is a ratio); ``h`` (hours).
    unit: str
    value: Value


def flat_figures(figures: ReportFigures) -> tuple[Figure, ...]:
    """Every figure of a report in table order: counts, throughput, latencies, workers."""
    counts = [
        Figure("requests", "requests", "count", Fraction(figures.requests)),
        Figure("completed", "completed", "count", Fraction(figures.completed)),
        Figure("rejected", "rejected", "count", Fraction(figures.rejected)),
        *(
            Figure(f"rejected_by_reason.{reason}", f"rejected: {reason}", "count", Fraction(n))
            for reason, n in figures.rejected_by_reason
        ),
        Figure("cut_off", "cut off", "count", Fraction(figures.cut_off)),
        *_failed_flat(figures.fleet),
        Figure("sessions", "sessions", "count", Fraction(figures.sessions)),
        Figure("prompt_tokens", "prompt tokens", "count", Fraction(figures.prompt_tokens)),
        Figure("output_tokens", "output tokens", "count", Fraction(figures.output_tokens)),
        Figure("steps", "steps", "count", Fraction(figures.steps)),
        Figure("makespan_us", "makespan", "s", Fraction(figures.makespan_us)),
        Figure(
            "request_throughput_per_s",
            "request throughput",
            "per_s",
            figures.request_throughput_per_s,
        ),
        Figure(
            "output_token_throughput_per_s",
            "output token throughput",
            "per_s",
            figures.output_token_throughput_per_s,
        ),
    ]
    latencies = [
        Figure(f"{name}_us.{part}", f"{name.upper()} {part}", unit, value)
        for name, statistics in figures.latencies()
        for part, unit, value in _parts(statistics)
    ]
    spread = figures.workers
    workers = [
        Figure("workers", "workers", "count", Fraction(spread.workers)),
        Figure("workers.utilization_min", "utilisation min", "percent", spread.utilization_min),
        Figure("workers.utilization_mean", "utilisation mean", "percent", spread.utilization_mean),
        Figure("workers.utilization_max", "utilisation max", "percent", spread.utilization_max),
        Figure("workers.routed_min", "routed min", "count", Fraction(spread.routed_min)),
        Figure("workers.routed_max", "routed max", "count", Fraction(spread.routed_max)),
        Figure("workers.peak_running", "peak running", "count", Fraction(spread.peak_running)),
        Figure("workers.peak_waiting", "peak waiting", "count", Fraction(spread.peak_waiting)),
    ]
    return (
        *counts,
        *_goodput_flat(figures.goodput),
        *latencies,
        *workers,
        *_kv_cache_flat(figures.kv_cache),
        *_fleet_flat(figures.fleet),
    )


def _failed_flat(fleet: FleetFigures | None) -> tuple[Figure, ...]:
    """R123's failed requests, in all and by reason (0 before report 9.0, R124)."""
    if fleet is None:
        return ()
    return (
        Figure("failed", "failed", "count", Fraction(fleet.failed)),
        *(
            Figure(f"failed_by_reason.{reason}", f"failed: {reason}", "count", Fraction(n))
            for reason, n in fleet.failed_by_reason
        ),
    )


def _fleet_flat(fleet: FleetFigures | None) -> tuple[Figure, ...]:
    """R122's worker time and R123's fleet changes (R124's values before report 9.0: the
    initial workers for the whole makespan, every change 0)."""
    if fleet is None:
        return ()
    counts = (
        ("scale_ups", "workers added"),
        ("scale_downs", "workers taken away"),
        ("cancelled", "workers cancelled"),
        ("drained", "workers drained"),
        ("failures", "worker failures"),
        ("ignored_failures", "ignored failures"),
        ("recoveries", "recoveries"),
        ("migrations", "migrations"),
        ("lost_tokens", "lost tokens"),
        ("recomputed_tokens", "recomputed tokens"),
    )
    return (
        Figure("fleet.worker_us", "worker time", "s", Fraction(fleet.worker_us)),
        Figure("fleet.worker_hours", "worker-hours", "h", fleet.worker_hours),
        *(
            Figure(f"fleet.{name}", label, "count", Fraction(getattr(fleet, name)))
            for name, label in counts
        ),
    )


#: Goodput's figures: key, label and unit (R63).
_GOODPUT_FIGURES = (
    ("goodput.requests", "goodput requests", "count"),
    ("goodput.share_of_completed", "goodput share of completed", "percent"),
    ("goodput.output_tokens", "goodput output tokens", "count"),
    ("goodput.request_throughput_per_s", "goodput request throughput", "per_s"),
    ("goodput.output_token_throughput_per_s", "goodput output token throughput", "per_s"),
)


def _goodput_flat(goodput: GoodputFigures | None) -> tuple[Figure, ...]:
    """Goodput's figures; without objectives each is ``None`` (as the cache's, so that any two
    reports have the same figures in the same order)."""
    values: tuple[Value, ...] = (None,) * len(_GOODPUT_FIGURES)
    if goodput is not None:
        values = (
            Fraction(goodput.requests),
            goodput.share_of_completed,
            Fraction(goodput.output_tokens),
            goodput.request_throughput_per_s,
            goodput.output_token_throughput_per_s,
        )
    return tuple(
        Figure(key, label, unit, value)
        for (key, label, unit), value in zip(_GOODPUT_FIGURES, values, strict=True)
    )


#: The cache's figures: key, label and unit (R52).
_KV_CACHE_FIGURES = (
    ("kv_cache.reused_prompt_tokens", "reused prompt tokens", "count"),
    ("kv_cache.prefix_reuse_ratio", "prefix reuse", "percent"),
    ("kv_cache.preemptions", "preemptions", "count"),
    ("kv_cache.evictions", "evictions", "count"),
    ("kv_cache.peak_blocks_in_use", "peak blocks in use", "count"),
    ("kv_cache.host_reused_prompt_tokens", "host-reused prompt tokens", "count"),
    ("kv_cache.host_reuse_ratio", "host reuse", "percent"),
    ("kv_cache.host.loads", "host loads", "count"),
    ("kv_cache.host.loaded_blocks", "host loaded blocks", "count"),
    ("kv_cache.host.stored_blocks", "host stored blocks", "count"),
    ("kv_cache.host.evictions", "host evictions", "count"),
)


def _kv_cache_flat(cache: KvCacheFigures | None) -> tuple[Figure, ...]:
    """The cache's figures; without a cache each is ``None``, so that any two reports have the
    same figures in the same order (``servesim compare`` pairs them)."""
    values: tuple[Value, ...] = (None,) * len(_KV_CACHE_FIGURES)
    if cache is not None:
        host: tuple[Value, ...] = (None,) * 6  # R140: only with a host pool
        if cache.host is not None:
            host = (
                Fraction(cache.host.reused_prompt_tokens),
                cache.host.host_reuse_ratio,
                Fraction(cache.host.loads),
                Fraction(cache.host.loaded_blocks),
                Fraction(cache.host.stored_blocks),
                Fraction(cache.host.evictions),
            )
        values = (
            Fraction(cache.reused_prompt_tokens),
            cache.prefix_reuse_ratio,
            Fraction(cache.preemptions),
            Fraction(cache.evictions),
            Fraction(cache.peak_blocks_in_use),
            *host,
        )
    return tuple(
        Figure(key, label, unit, value)
        for (key, label, unit), value in zip(_KV_CACHE_FIGURES, values, strict=True)
    )


def _parts(statistics: Statistics) -> Iterator[tuple[str, str, Value]]:
    """A latency's figures in table order: count, mean, min, the percentiles, max."""
    yield "count", "count", Fraction(statistics.count)
    yield "mean", "ms", statistics.mean
    yield "min", "ms", statistics.min
    for percent, value in statistics.percentiles:
        yield f"p{percent}", "ms", value
    yield "max", "ms", statistics.max
