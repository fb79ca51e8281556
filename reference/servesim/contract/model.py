"""The validated input documents, as plain immutable data.

These classes are built only by ``build_scenario``, ``build_workload`` and
``build_timing_profile`` (in ``servesim.contract.scenario``, ``.workload`` and
``.timing_profile``) after a document has passed its schema and the semantic checks of SPEC.md
R4, so the simulator never re-checks them.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

RoutingPolicyName = Literal[
    "round_robin", "random", "least_loaded", "cache_aware", "weighted_round_robin"
]

#: The routing policies that look at the fleet (SPEC.md section 12); they need scenario 1.2.
STATE_AWARE_POLICIES: frozenset[str] = frozenset({"least_loaded", "cache_aware"})
PrefillMode = Literal["whole", "chunked"]

#: R88: how a worker forms its steps; ``"vllm"`` is sections 5 and 11, the default.
SchedulerStyle = Literal["vllm", "sglang", "trtllm"]

#: R97: a pool's part in a disaggregated fleet.
PoolRole = Literal["prefill", "decode"]

#: R115: what a reactive scaling policy reads at its ticks.
AutoscaleMetric = Literal["waiting_per_worker", "outstanding_per_worker", "kv_use"]

#: R118: what happens to the requests of a failed worker.
FailurePolicy = Literal["migrate", "fail"]


@dataclass(frozen=True, slots=True)
class Request:
    """One workload request (SPEC.md section 3)."""

    id: str
    arrival_us: int
    prompt_tokens: int
    max_output_tokens: int
    prefix_hashes: tuple[int, ...] = ()
    """R47: the hashes of the prompt's consecutive blocks of ``prefix_hash_block_tokens``
    tokens (workload 1.1); empty when the workload gives none."""
    session: int | None = None
    """R59: the index in ``Workload.sessions`` of the session it is a turn of (workload 1.2);
    ``None`` for a request without a session."""
    think_time_us: int = 0
    """R59: how long after its predecessor's terminal time a turn k > 0 arrives at the
    earliest (0 when the document leaves it out)."""


@dataclass(frozen=True, slots=True)
class Workload:
    """The requests in document order; ``position`` in the report means the index here."""

    requests: tuple[Request, ...]
    prefix_hash_block_tokens: int | None = None
    """R47: H, the tokens each prefix hash covers; set when the workload gives it."""
    sessions: tuple[str, ...] = ()
    """R59: the sessions' ids, in document order (``Request.session`` indexes them); empty
    for a workload without sessions."""
    session_prompts_extend: bool = False
    """R125 (section 19): each turn of a session begins with the previous turn's prompt and
    output (``false`` when the workload leaves the member out)."""


@dataclass(frozen=True, slots=True)
class Routing:
    """The routing policy; ``seed`` is set when ``policy`` is ``"random"`` (R15), and may be set
    for the state-aware policies, whose ties it breaks (R58).

    The weights are R56's; they are read only by ``"cache_aware"`` (1 when the scenario leaves
    them out, as R56 says).
    """

    policy: RoutingPolicyName
    seed: int | None = None
    prefill_weight: int = 1
    load_weight: int = 1
    decode: Routing | None = None
    """R99: how a disaggregated fleet routes on its decode pools (``round_robin`` when the
    scenario gives none); ``None`` in an aggregated fleet."""

    @property
    def state_aware(self) -> bool:
        """Whether the policy looks at the fleet (section 12) rather than only counting."""
        return self.policy in STATE_AWARE_POLICIES


@dataclass(frozen=True, slots=True)
class SglangOptions:
    """R88: ``scheduler.sglang``, the knobs of SGLang's admission estimate (R89, R90)."""

    clip_max_new_tokens: int = 4096
    conservativeness_permille: int = 1000


@dataclass(frozen=True, slots=True)
class SchedulerLimits:
    """Per-worker continuous-batching limits (SPEC.md section 5) and the style that forms its
    steps (R88).

    ``max_chunk_tokens`` is set exactly when ``prefill_mode`` is ``"chunked"``; ``sglang`` is
    set exactly when ``style`` is ``"sglang"`` (its defaults when the scenario gives none).
    """

    max_num_seqs: int
    max_batched_tokens: int
    max_model_len: int
    prefill_mode: PrefillMode
    max_chunk_tokens: int | None = None
    style: SchedulerStyle = "vllm"
    sglang: SglangOptions | None = None


@dataclass(frozen=True, slots=True)
class HostTier:
    """R129 (section 19): a cache's host pool of ``blocks`` entries, ``bytes_per_token`` bytes
    of KV cache per token, and its two lanes' bytes per second (store: GPU to host; load: host
    to GPU)."""

    blocks: int
    bytes_per_token: int
    store_bytes_per_s: int
    load_bytes_per_s: int


@dataclass(frozen=True, slots=True)
class KvCache:
    """R45: each worker's KV cache of ``blocks`` blocks of ``block_tokens`` tokens; ``host``
    its host tier (R129), ``None`` without one."""

    blocks: int
    block_tokens: int
    prefix_caching: bool
    host: HostTier | None = None


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """R61: at most ``max_in_flight`` units (sessions and requests without one) released and
    not ended at any instant."""

    max_in_flight: int


@dataclass(frozen=True, slots=True)
class Slo:
    """R63: inclusive latency bounds, in microseconds; ``None`` where the scenario sets none
    (at least one is set)."""

    ttft_us: int | None = None
    mean_itl_us: int | None = None
    e2e_us: int | None = None


#: R77: the name of the one pool of a scenario written with ``fleet.workers``.
DEFAULT_POOL = "default"


@dataclass(frozen=True, slots=True)
class Pool:
    """R77: a named group of identical workers, each with ``dp_size`` ranks (R78); its
    ``scheduler`` and ``kv_cache`` are the limits and cache it uses (its own, or the
    scenario's), resolved when the scenario is built."""

    name: str
    workers: int
    scheduler: SchedulerLimits
    kv_cache: KvCache | None = None
    dp_size: int = 1
    weight: int = 1
    """R81: each of its workers' weight under ``"weighted_round_robin"``."""
    role: PoolRole | None = None
    """R97: ``"prefill"`` or ``"decode"`` in a disaggregated fleet, ``None`` otherwise."""
    scaling: Scaling | None = None
    """R110: how its worker count changes during the run (scenario 1.7); ``None``: never by a
    decision, and its recoveries take no startup time."""


@dataclass(frozen=True, slots=True)
class ScheduleEntry:
    """R110: one scaling decision of a schedule: at ``at_us``, bring the pool to ``target``."""

    at_us: int
    target: int


@dataclass(frozen=True, slots=True)
class Autoscale:
    """R115: the reactive policy, evaluated at ticks ``k * interval_us``, k >= 1."""

    interval_us: int
    metric: AutoscaleMetric
    up_permille: int
    down_permille: int
    min: int
    max: int
    step: int = 1
    cooldown_us: int = 0


@dataclass(frozen=True, slots=True)
class Scaling:
    """R110: a pool's startup time and at most one of a schedule and a reactive policy."""

    startup_us: int = 0
    schedule: tuple[ScheduleEntry, ...] = ()
    autoscale: Autoscale | None = None


@dataclass(frozen=True, slots=True)
class FailureEvent:
    """R116: worker ``pool_worker`` of ``pool`` fails at ``at_us``; it starts its recovery
    ``recover_after_us`` later, or never when that is ``None``."""

    pool: str
    pool_worker: int
    at_us: int
    recover_after_us: int | None = None


@dataclass(frozen=True, slots=True)
class Failures:
    """R116, R118: the failures, in list order, and what happens to their requests."""

    events: tuple[FailureEvent, ...]
    policy: FailurePolicy
    max_migrations: int | None = None


@dataclass(frozen=True, slots=True)
class KvTransfer:
    """R97, R103: how a prefill worker's KV cache reaches a decode worker."""

    bytes_per_token: int
    bandwidth_bytes_per_s: int
    base_latency_us: int
    full_prompt: bool = False
    """R103: whether the whole prompt is sent (``"full_prompt"``) rather than what the decode
    scheduler lacks (``"destination_missing"``)."""

    def transfer_us(self, tokens: int) -> int:
        """R103: ``L + ceil(t * b * 10^6 / W)``, exactly (Python's integers do not overflow)."""
        sent = tokens * self.bytes_per_token * 1_000_000
        return self.base_latency_us + -(-sent // self.bandwidth_bytes_per_s)


@dataclass(frozen=True, slots=True)
class Scenario:
    """The fleet, its routing policy, its scheduler limits, (scenario 1.1) its KV cache,
    (scenario 1.3) how load is offered, when the run stops and what counts as good, and
    (scenario 1.4) its pools.

    ``workers`` is N, the workers of every pool together; ``pools`` is never empty once built:
    a scenario given without pools is the one pool ``"default"`` of ``workers`` one-rank
    workers with the scenario's limits and cache (R77, R78).
    """

    workers: int
    routing: Routing
    scheduler: SchedulerLimits
    kv_cache: KvCache | None = None
    """R45: ``None`` means unlimited memory, as in every 1.0 scenario."""
    closed_loop: ClosedLoop | None = None
    """R61: ``None`` is the open loop of sections 2 to 12: recorded times decide arrivals."""
    stop_at_us: int | None = None
    """R62: D, the stop time; ``None`` runs until every request reaches a terminal state."""
    slo: Slo | None = None
    """R63: the objectives; ``None`` leaves ``slo_met`` and ``goodput`` out of the report."""
    pools: tuple[Pool, ...] = ()
    """R77: the pools in order; filled with the one ``"default"`` pool when left empty."""
    kv_transfer: KvTransfer | None = None
    """R97: set exactly when the fleet is disaggregated (its pools have roles)."""
    failures: Failures | None = None
    """R116: the workers' failures (scenario 1.7); ``None``: no worker ever fails."""

    def __post_init__(self) -> None:
        if not self.pools:
            default = Pool(DEFAULT_POOL, self.workers, self.scheduler, self.kv_cache)
            object.__setattr__(self, "pools", (default,))

    @property
    def disaggregated(self) -> bool:
        """Whether the pools have roles (R97): prefill on some, decode on others."""
        return self.kv_transfer is not None

    @property
    def fleet_changes(self) -> bool:
        """Whether the fleet may change during the run (section 18: scaling or failures);
        without either it is simulated exactly as sections 2 to 17 say."""
        return self.failures is not None or any(pool.scaling is not None for pool in self.pools)

    @property
    def has_cache(self) -> bool:
        """Whether any pool has a KV cache (R45, R77)."""
        return any(pool.kv_cache is not None for pool in self.pools)


@dataclass(frozen=True, slots=True)
class StepShape:
    """R22: what a step's duration depends on."""

    decode_requests: int
    """D: requests decoding one token in the step (R17)."""
    context_tokens: int
    """C: the sum of those requests' prompt plus generated tokens at the step's start."""
    prefill_tokens: int
    """P: the sum of the step's prefill allotments (R18, R19)."""

    def as_dict(self) -> dict[str, int]:
        """The shape as the report's trace and the measurement lines write it (R30, R44)."""
        return {
            "decode_requests": self.decode_requests,
            "context_tokens": self.context_tokens,
            "prefill_tokens": self.prefill_tokens,
        }


#: The shape's dimensions, in the order R41 lays out a grid (decode, context, prefill).
SHAPE_DIMENSIONS: tuple[str, ...] = ("decode_requests", "context_tokens", "prefill_tokens")


@dataclass(frozen=True, slots=True)
class Interval:
    """An inclusive range of one shape dimension (R40)."""

    min: int
    max: int

    def __contains__(self, value: int) -> bool:
        return self.min <= value <= self.max


@dataclass(frozen=True, slots=True)
class Coverage:
    """R40: the shapes a measured model may time; R43: anything else stops the replay."""

    decode_requests: Interval
    context_tokens: Interval
    prefill_tokens: Interval

    def outside(self, shape: StepShape) -> list[str]:
        """The dimensions on which ``shape`` is not covered, in ``SHAPE_DIMENSIONS`` order."""
        return [
            name for name in SHAPE_DIMENSIONS if getattr(shape, name) not in getattr(self, name)
        ]

    def covers(self, shape: StepShape) -> bool:
        """Whether ``shape`` is inside on every dimension (the hot path of ``outside``)."""
        return (
            self.decode_requests.min <= shape.decode_requests <= self.decode_requests.max
            and self.context_tokens.min <= shape.context_tokens <= self.context_tokens.max
            and self.prefill_tokens.min <= shape.prefill_tokens <= self.prefill_tokens.max
        )


def round_half_away(distance: int, numerator: int, denominator: int) -> int:
    """R41 step 2: ``distance * numerator / denominator`` rounded to the nearest integer, halves
    up, for non-negative ``distance`` and ``0 < numerator < denominator``."""
    return (distance * numerator + denominator // 2) // denominator


def interpolate(low: int, high: int, numerator: int, denominator: int) -> int:
    """R41 step 2: the value ``numerator / denominator`` of the way from ``low`` to ``high``.

    The distance from ``low`` is rounded, not the result, so that the rule is symmetric: it
    never depends on which of the two values is larger.
    """
    if numerator == 0:
        return low
    if high >= low:
        return low + round_half_away(high - low, numerator, denominator)
    return low - round_half_away(low - high, numerator, denominator)


def rounding_extent(distance: int, numerator: int, denominator: int) -> int:
    """The largest ``n`` from ``numerator`` up to ``denominator - 1`` for which
    ``round_half_away(distance, n, denominator)`` still equals its value at ``numerator``.

    A decode run's context grows through one grid cell (R41): this says how far it may grow
    before the interpolated distance, and so the duration, can change.
    """
    if distance == 0:
        return denominator - 1
    half = denominator // 2
    rounded = (distance * numerator + half) // denominator
    # the next value is reached when distance * n + half >= (rounded + 1) * denominator
    return min(denominator - 1, ((rounded + 1) * denominator - half - 1) // distance)


def bracket(axis: tuple[int, ...], value: int) -> tuple[int, int, int, int]:
    """R41 step 1: ``(lower, upper, num, den)`` for ``value`` inside ``axis``; num is 0 on a hit."""
    upper = bisect.bisect_left(axis, value)
    if axis[upper] == value:
        return upper, upper, 0, 1
    return upper - 1, upper, value - axis[upper - 1], axis[upper] - axis[upper - 1]


@dataclass(frozen=True, slots=True)
class SyntheticLinearTiming:
    """The v1 timing model: a linear cost in nanoseconds, rounded up to microseconds (R22)."""

    step_overhead_ns: int
    prefill_token_ns: int
    decode_token_ns: int

    #: Its duration ignores C, so identical decode-only steps last the same (worker runs).
    uses_context = False

    def covers(self, shape: StepShape) -> bool:
        """R43: a synthetic model times every shape."""
        return True

    def step_duration_us(self, shape: StepShape) -> int:
        """R22: ``ceil((overhead + P * per_prefill + D * per_decode) / 1000)``."""
        total_ns = (
            self.step_overhead_ns
            + shape.prefill_tokens * self.prefill_token_ns
            + shape.decode_requests * self.decode_token_ns
        )
        return -(-total_ns // 1000)


@dataclass(frozen=True, slots=True)
class GridTiming:
    """R41: measured durations on three axes, interpolated in integers.

    ``durations[d][c][p]`` is the duration at ``(decode_axis[d], context_axis[c],
    prefill_axis[p])``.
    """

    decode_axis: tuple[int, ...]
    context_axis: tuple[int, ...]
    prefill_axis: tuple[int, ...]
    durations: tuple[tuple[tuple[int, ...], ...], ...]
    coverage: Coverage

    uses_context = True

    def covers(self, shape: StepShape) -> bool:
        """R43: inside the coverage on every dimension."""
        return self.coverage.covers(shape)

    def step_duration_us(self, shape: StepShape) -> int:
        """R41: along prefill, then context, then decode; each result an integer."""
        d_low, d_high, d_num, d_den = bracket(self.decode_axis, shape.decode_requests)
        c_low, c_high, c_num, c_den = bracket(self.context_axis, shape.context_tokens)
        p_low, p_high, p_num, p_den = bracket(self.prefill_axis, shape.prefill_tokens)

        # a coordinate on a grid point takes the value there (step 2), so the other corner of
        # its bracket is not even looked up
        def along_prefill(d: int, c: int) -> int:
            row = self.durations[d][c]
            return row[p_low] if p_num == 0 else interpolate(row[p_low], row[p_high], p_num, p_den)

        def along_context(d: int) -> int:
            low = along_prefill(d, c_low)
            return low if c_num == 0 else interpolate(low, along_prefill(d, c_high), c_num, c_den)

        low = along_context(d_low)
        return low if d_num == 0 else interpolate(low, along_context(d_high), d_num, d_den)

    def context_extent(self, shape: StepShape) -> int:
        """The largest context up to which ``shape``'s D and P last as long as ``shape`` does.

        Every context from ``shape.context_tokens`` to the result (inclusive) gives the same
        duration, so a decode run (``engine.decode_runs.measured_decode_run``) times a whole
        stretch of its steps at once. Within one cell of the context axis the duration changes
        only when one of R41's rounded distances along context does (``rounding_extent``); a
        context on a grid point is a stretch of its own. Sometimes short: a stretch may have the
        same duration as the next.
        """
        context = shape.context_tokens
        c_low, c_high, c_num, c_den = bracket(self.context_axis, context)
        if c_num == 0:
            return context
        d_low, d_high, d_num, _ = bracket(self.decode_axis, shape.decode_requests)
        p_low, p_high, p_num, p_den = bracket(self.prefill_axis, shape.prefill_tokens)

        def same_rounding_until(d: int) -> int:
            # the last offset in the cell (before its upper point) with d's rounding along C
            low_row, high_row = self.durations[d][c_low], self.durations[d][c_high]
            at_low = interpolate(low_row[p_low], low_row[p_high], p_num, p_den)
            at_high = interpolate(high_row[p_low], high_row[p_high], p_num, p_den)
            return rounding_extent(abs(at_high - at_low), c_num, c_den)

        rows = (d_low, d_high) if d_num else (d_low,)
        return self.context_axis[c_low] + min(same_rounding_until(d) for d in rows)


@dataclass(frozen=True, slots=True)
class PrefillKnot:
    """R42: the cost, in nanoseconds, of prefilling exactly ``tokens`` tokens in a step."""

    tokens: int
    ns: int


@dataclass(frozen=True, slots=True)
class RegressionTiming:
    """R42: intercept + piecewise-linear prefill cost + decode cost linear in D and C."""

    intercept_ns: int
    prefill_knots: tuple[PrefillKnot, ...]
    decode_request_ns: int
    context_token_ps: int
    coverage: Coverage
    _knot_axis: tuple[int, ...] = field(init=False, repr=False, compare=False)

    uses_context = True

    def covers(self, shape: StepShape) -> bool:
        """R43: inside the coverage on every dimension."""
        return self.coverage.covers(shape)

    def __post_init__(self) -> None:
        # the knots' tokens as an axis, once, for R41's bracket in every step's prefill_ns
        object.__setattr__(self, "_knot_axis", tuple(knot.tokens for knot in self.prefill_knots))

    def prefill_ns(self, tokens: int) -> int:
        """R42: the knots' curve at ``tokens`` (a covered value)."""
        low, high, num, den = bracket(self._knot_axis, tokens)
        return interpolate(self.prefill_knots[low].ns, self.prefill_knots[high].ns, num, den)

    def step_duration_us(self, shape: StepShape) -> int:
        """R42: picoseconds in integers, rounded up to whole microseconds."""
        total_ps = (
            1000
            * (
                self.intercept_ns
                + self.prefill_ns(shape.prefill_tokens)
                + shape.decode_requests * self.decode_request_ns
            )
            + shape.context_tokens * self.context_token_ps
        )
        return -(-total_ps // 1_000_000)

    def context_extent(self, shape: StepShape) -> int:
        """The largest context up to which ``shape``'s D and P last as long as ``shape`` does.

        Exact: ``total_ps`` grows with C, and the duration stays ``ceil(total_ps / 10^6)`` while
        ``total_ps`` is at most that many microseconds (so one more context token lengthens it).
        """
        if self.context_token_ps == 0:  # C does not count: the same up to the coverage's end
            return max(shape.context_tokens, self.coverage.context_tokens.max)
        other_ps = 1000 * (
            self.intercept_ns
            + self.prefill_ns(shape.prefill_tokens)
            + shape.decode_requests * self.decode_request_ns
        )
        total_ps = other_ps + shape.context_tokens * self.context_token_ps
        duration_ps = -(-total_ps // 1_000_000) * 1_000_000  # as step_duration_us rounds it
        return (duration_ps - other_ps) // self.context_token_ps


MeasuredTiming = GridTiming | RegressionTiming
"""The models whose durations depend on C (R22): a decode run's steps may differ."""

TimingModel = SyntheticLinearTiming | GridTiming | RegressionTiming


@dataclass(frozen=True, slots=True)
class TimingProfile:
    """A timing profile document: its model and, for measured models, the calibration (R40).

    ``calibration`` is kept as the document's JSON object: the report echoes it unchanged (R25).
    """

    model: TimingModel
    calibration: Mapping[str, Any] | None = None
