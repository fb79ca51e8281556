"""The figures of one report as small frozen values (SPEC.md R25 to R29, R52, R63): what
``servesim summary``, ``servesim compare``, ``servesim replay`` and any other reader (plots,
sweeps) show, every duration in microseconds and every derived figure exact (``Fraction``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction

#: A figure's value: exact, or ``None`` where the report has no samples (R27) or no makespan.
Value = Fraction | None


@dataclass(frozen=True)
class Statistics:
    """R27 statistics of one latency, in microseconds."""

    count: int
    min: Value
    max: Value
    mean: Value
    #: percent -> the nearest-rank percentile, for each of ``PERCENTILES``.
    percentiles: tuple[tuple[int, Value], ...]

    def percentile(self, percent: int) -> Value:
        """The ``percent``-th nearest-rank percentile (one of ``PERCENTILES``)."""
        return dict(self.percentiles)[percent]


@dataclass(frozen=True)
class WorkerSpread:
    """How evenly the fleet was used (R29): the spread of the per-worker counters."""

    workers: int
    utilization_min: Value
    utilization_mean: Value
    utilization_max: Value
    #: The worker with the lowest and the highest utilisation (the first one on a tie).
    least_busy_worker: int
    most_busy_worker: int
    routed_min: int
    routed_max: int
    peak_running: int
    peak_waiting: int


@dataclass(frozen=True)
class KvCacheFigures:
    """What the report says of the workers' KV caches (R52); only a report 3.0 or later of a
    scenario with ``kv_cache`` has them."""

    reused_prompt_tokens: int
    #: Reused over all prompt tokens of completed requests, exact (R52 writes it rounded).
    prefix_reuse_ratio: Value
    preemptions: int
    evictions: int
    #: The largest ``peak_blocks_in_use`` of any worker.
    peak_blocks_in_use: int
    #: R91, R95: the sglang style's retractions (0 before report 7.0, which has none).
    retractions: int = 0
    #: R140: the fleet's host tier, when a cache had a host pool (report 10.0).
    host: HostTierFigures | None = None


@dataclass(frozen=True)
class HostTierFigures:
    """What the report says of the host KV tier over the fleet (R140's ``summary.kv_cache``)."""

    #: Prompt tokens completed requests loaded from the host at their first admission.
    reused_prompt_tokens: int
    #: Those over all prompt tokens of completed requests, exact (R140 writes it rounded).
    host_reuse_ratio: Value
    stores: int
    stored_blocks: int
    loads: int
    loaded_blocks: int
    evictions: int
    skipped_blocks: int


@dataclass(frozen=True)
class PoolFigures:
    """One pool of the fleet (R85): what it served and how busy its workers were. Only a
    report 6.0 has pools; a fleet written as ``fleet.workers`` is the one pool ``"default"``."""

    name: str
    workers: int
    dp_size: int
    routed: int
    completed: int
    output_tokens: int
    busy_us: int
    #: ``busy_us`` over ``workers * makespan_us``, exact (R85 writes it rounded).
    utilization: Value
    request_throughput_per_s: Value
    output_token_throughput_per_s: Value
    #: ``(peak_blocks_in_use, preemptions, evictions)`` of its caches; ``None`` without one.
    kv_cache: tuple[int, int, int] | None
    #: R88, R95: the style of its workers' steps ("vllm" before report 7.0).
    style: str = "vllm"
    #: R97, R107: its role in a disaggregated fleet (None before report 8.0 and when aggregated).
    role: str | None = None
    #: R91, R95: the retractions on its workers (0 before report 7.0).
    retractions: int = 0


@dataclass(frozen=True)
class GoodputFigures:
    """The requests that met the scenario's objectives (R63); only a report 5.0 of a scenario
    with ``slo`` has them."""

    requests: int
    output_tokens: int
    #: Requests that met the objectives over the completed ones, exact; ``None`` if none completed.
    share_of_completed: Value
    request_throughput_per_s: Value
    output_token_throughput_per_s: Value


@dataclass(frozen=True)
class FleetFigures:
    """What a report 9.0 says of a fleet that changes (R122, R123). A report before 9.0 comes
    from a fleet that never changes and reads as R124's migration makes it: nothing failed,
    migrated or changed, and each initial worker counted for the whole makespan."""

    #: Every R123 ``fail_reason`` with its count, in the report's order.
    failed_by_reason: tuple[tuple[str, int], ...]
    migrations: int
    lost_tokens: int
    recomputed_tokens: int
    #: R122: the summary's worker time, and worker-hours exact (R122 writes them rounded).
    worker_us: int
    worker_hours: Fraction
    #: R123's ``summary.fleet``: workers added and taken away by decisions, cancelled while
    #: starting, removed after draining, failures processed and ignored, recoveries started.
    scale_ups: int = 0
    scale_downs: int = 0
    cancelled: int = 0
    drained: int = 0
    failures: int = 0
    ignored_failures: int = 0
    recoveries: int = 0

    @property
    def failed(self) -> int:
        """The failed requests (R123: ``completed + rejected + cut_off + failed = requests``)."""
        return sum(count for _, count in self.failed_by_reason)

    def changed(self) -> bool:
        """Whether the fleet changed at all: a decision, a failure (also an ignored one), a
        recovery or a migration."""
        return any(
            (
                self.scale_ups,
                self.scale_downs,
                self.failures,
                self.ignored_failures,
                self.recoveries,
                self.migrations,
            )
        )


@dataclass(frozen=True)
class Inputs:
    """What the report was made from (R25)."""

    scenario_sha256: str
    workload_sha256: str
    timing_profile_sha256: str
    #: The timing profile's calibration member as canonical JSON text; ``None`` when it has none
    #: (a synthetic profile, or a 1.0 report, which cannot say).
    calibration: str | None
    #: R84, R85: whether each pool had its own profile; ``timing_profile_sha256`` is then the
    #: digest of the report's canonical ``inputs.timing_profiles``, one identity for the list.
    per_pool_profiles: bool = False

    def calibration_label(self) -> str:
        """The calibration in a few words: engine and version, model and revision, GPU."""
        if self.per_pool_profiles:
            return "per pool (see inputs.timing_profiles)"
        if self.calibration is None:
            return "none"
        identity = json.loads(self.calibration)
        return (
            f"{identity['engine']} {identity['engine_version']}, {identity['model']} "
            f"@ {identity['model_revision']}, {identity['gpu']}"
        )


@dataclass(frozen=True)
class ReportFigures:
    """The figures of one report; every duration in microseconds."""

    file: str
    schema_version: str
    inputs: Inputs
    #: Whether the report holds a step trace (R30).
    traced: bool
    requests: int
    completed: int
    rejected: int
    #: Every R10 reason with its count, in R10 order.
    rejected_by_reason: tuple[tuple[str, int], ...]
    prompt_tokens: int
    output_tokens: int
    steps: int
    first_arrival_us: int
    makespan_us: int
    request_throughput_per_s: Value
    output_token_throughput_per_s: Value
    queue_us: Statistics
    ttft_us: Statistics
    itl_us: Statistics
    #: Per-request time per output token, exact (``servesim_cli.figures_tpot``).
    tpot_us: Statistics
    e2e_us: Statistics
    workers: WorkerSpread
    #: ``None`` without a cache (every report before 3.0, R53).
    kv_cache: KvCacheFigures | None = None
    #: Requests cut off by the stop time (R62); 0 before report 5.0.
    cut_off: int = 0
    #: How many sessions the requests belong to (R59, R64); 0 before report 5.0.
    sessions: int = 0
    #: ``None`` without ``slo`` (every report before 5.0).
    goodput: GoodputFigures | None = None
    #: R85's pools, in pool order; empty before report 6.0.
    pools: tuple[PoolFigures, ...] = ()
    #: R122, R123; ``None`` only where a caller builds figures by hand.
    fleet: FleetFigures | None = None

    @property
    def failed(self) -> int:
        """The failed requests (R118); 0 before report 9.0."""
        return 0 if self.fleet is None else self.fleet.failed

    def shows_fleet(self) -> bool:
        """Whether the report has R123's members (9.0 and later), so that its summary shows
        the failed requests and the worker time; an older report shows what it showed."""
        return int(self.schema_version.split(".")[0]) >= 9

    def shows_pools(self) -> bool:
        """Whether the fleet is more than R77's one pool of one-rank workers, so that a reader
        learns something from a line per pool (with R88, also its style when not vLLM's)."""
        return len(self.pools) > 1 or any(
            pool.dp_size > 1 or pool.style != "vllm" for pool in self.pools
        )

    def latencies(self) -> tuple[tuple[str, Statistics], ...]:
        """Each latency by its short name, in the order a table shows them."""
        return (
            ("queue", self.queue_us),
            ("ttft", self.ttft_us),
            ("itl", self.itl_us),
            ("tpot", self.tpot_us),
            ("e2e", self.e2e_us),
        )
