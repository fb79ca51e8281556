"""servesim documents -> Dynamo replay specifications, or the feature Dynamo cannot express.

Dynamo runs the vLLM-style scheduler of its mocker engine with the ``fixed`` timing model: a pass
lasts ``prefill_ms`` if it prefills any token, plus ``decode_ms`` if it decodes any request. Only
a servesim ``grid`` profile whose every covered shape has exactly that duration maps onto it
(dynamo-replay reading note); any other timing, and any scheduler feature Dynamo does not have,
is refused with the feature's name (exit 2), never approximated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: Tokens per KV block in Dynamo's vLLM-style engine (its default).
BLOCK_SIZE = 64

#: The most KV blocks the adapter asks Dynamo for per worker; a fleet that could need more may
#: be preempted by Dynamo, which the timeline check turns into an error.
MAX_GPU_BLOCKS = 1 << 22


class Unsupported(Exception):
    """A valid document uses something Dynamo cannot do the way SPEC.md says (exit 2)."""

    def __init__(self, feature: str, detail: str) -> None:
        super().__init__(f"{feature}: {detail}")
        self.feature = feature
        self.detail = detail


@dataclass(frozen=True)
class FixedTiming:
    """Dynamo's ``fixed`` timing model in whole microseconds."""

    prefill_us: int
    decode_us: int

    def as_dynamo(self) -> dict[str, Any]:
        """The ``timing_model`` object of Dynamo's engine arguments (milliseconds)."""
        return {
            "type": "fixed",
            "prefill_ms": self.prefill_us / 1000,
            "decode_ms": self.decode_us / 1000,
        }


def fixed_timing(profile: dict[str, Any], scheduler: dict[str, Any]) -> FixedTiming:
    """The fixed model that times every shape the scenario can form as ``profile`` does.

    A grid qualifies when its decode and prefill axes start at 0 and 1, every duration with
    decode index i and prefill index j (both at least 1) equals the one at (1, 1), every one at
    (i >= 1, 0) equals b, every one at (0, j >= 1) equals a, a + b equals the (1, 1) value, and
    nothing depends on context. Integer shapes never fall strictly between 0 and 1, so R41's
    interpolation stays among equal values. Its coverage must hold every shape the scenario
    can form, since Dynamo has no notion of coverage (R43).
    """
    model = profile["model"]
    kind = model["kind"]
    if kind != "grid":
        raise Unsupported(
            f"timing.{kind}",
            "Dynamo's fixed timing model times a pass by whether it prefills and whether it "
            f"decodes; a {kind} profile cannot be expressed exactly (only a grid of that form)",
        )
    axes = model["axes"]
    if axes["decode_requests"][:2] != [0, 1] or axes["prefill_tokens"][:2] != [0, 1]:
        raise Unsupported(
            "timing.grid",
            "the grid's decode_requests and prefill_tokens axes must start 0, 1 to express "
            "Dynamo's fixed timing exactly",
        )
    grid = model["duration_us"]
    prefill_only = grid[0][0][1]
    decode_only = grid[1][0][0]
    for d, plane in enumerate(grid):
        for row in plane:
            for p, duration in enumerate(row):
                if d == 0 and p == 0:
                    continue  # no step has neither decode nor prefill
                wanted = (prefill_only if p else 0) + (decode_only if d else 0)
                if duration != wanted:
                    raise Unsupported(
                        "timing.grid",
                        f"duration_us[{d}][...][{p}] is {duration}, not {wanted}: the grid is "
                        "not Dynamo's fixed model (prefill part + decode part, nothing else)",
                    )
    _check_coverage(model["coverage"], scheduler)
    return FixedTiming(prefill_us=prefill_only, decode_us=decode_only)


def _check_coverage(coverage: dict[str, Any], scheduler: dict[str, Any]) -> None:
    needed = {
        "decode_requests": scheduler["max_num_seqs"],
        "prefill_tokens": scheduler["max_batched_tokens"],
        "context_tokens": scheduler["max_num_seqs"] * scheduler["max_model_len"],
    }
    for name, maximum in needed.items():
        covered = coverage[name]
        if covered["min"] != 0 or covered["max"] < maximum:
            raise Unsupported(
                "timing.coverage",
                f"the {name} coverage {covered['min']}..{covered['max']} does not hold every "
                f"shape the scheduler can form (0..{maximum}); Dynamo has no coverage check, so "
                "it could never stop outside it (R43)",
            )


#: Why each routing policy but round robin is refused, by the feature named (R13 to R15, R55,
#: R56). Dynamo's routers are round robin and ``kv_router``, which breaks ties between equally
#: good workers at random, unseeded: its placements differ from run to run, so no report of it
#: can be compared byte for byte (conformance/adapters/dynamo/KVCACHE.md).
UNSUPPORTED_POLICIES: dict[str, str] = {
    "random": "Dynamo has no seeded random router (its kv_router breaks ties at random, unseeded)",
    "least_loaded": "Dynamo has no least-outstanding-requests router (R55); its kv_router, the "
    "nearest, breaks ties at random, unseeded, where R55 takes the lowest index, so its "
    "placements cannot be compared byte for byte",
    "cache_aware": "Dynamo's kv_router weighs cached blocks against load like R56, but it breaks "
    "ties at random, unseeded, where R56 takes the lowest index, and it needs a KV cache, which "
    "the adapter refuses (kv.py); its placements cannot be compared byte for byte",
}


#: The features named when a scenario 1.7 changes its fleet (SPEC.md section 18).
SCALING_FEATURE = "fleet.scaling"
FAILURES_FEATURE = "failures"


def check_fleet_changes(scenario: dict[str, Any]) -> None:
    """Refuse a fleet that changes (scenario 1.7, R109-R124): ``scaling`` (``fleet.scaling``
    or any pool's) and ``failures``.

    The per-token runtime the adapter reads replays a fixed worker (``initial_workers`` 1, no
    planner), and the documented replay's scaling policies are Dynamo's planner (its own
    decisions at its own ticks, no worker failures given as inputs): neither can be given
    R110's schedule, R115's reactive policy or R116's failures, so a report would describe a
    static fleet. Checked before any other refusal, for disaggregated fleets too.
    """
    fleet = scenario["fleet"]
    scaled = "scaling" in fleet or any("scaling" in pool for pool in fleet.get("pools", []))
    if scaled:
        raise Unsupported(
            SCALING_FEATURE,
            "Dynamo's replays run a fixed set of workers (the per-token runtime one worker, "
            "the documented replay its planner's own scaling decisions): R110's schedule, "
            "R111's startup time and R115's reactive policy cannot be stated",
        )
    if "failures" in scenario:
        raise Unsupported(
            FAILURES_FEATURE,
            "Dynamo's replays take no worker failures as inputs (R116-R119: failure, "
            "migration or loss of the failed worker's requests, recovery)",
        )


def check_scenario(scenario: dict[str, Any]) -> None:
    """Refuse the scheduler and routing features Dynamo does not have as SPEC.md says."""
    policy = scenario["routing"]["policy"]
    fleet_shape(scenario)  # refuses the fleets of pools Dynamo cannot state (R77)
    if policy == "weighted_round_robin":
        weights = {pool.get("weight", 1) for pool in scenario["fleet"]["pools"]}
        if len(weights) > 1:
            raise Unsupported(
                "routing.weighted_round_robin",
                "Dynamo's routers are round robin and kv_router; neither takes weights, so "
                "R81's shares can be stated only when every pool's weight is the same, where "
                "R81 is R13's round robin",
            )
    elif policy != "round_robin":
        raise Unsupported(f"routing.{policy}", UNSUPPORTED_POLICIES[policy])
    if "stop_at_us" in scenario:
        raise Unsupported(
            "scenario.stop_at_us",
            "the per-token runtime the adapter reads has no stop time, and Dynamo's "
            "max_sim_time_ms (documented replay only) records no token times to cut at it "
            "(R62)",
        )
    scheduler = limits(scenario)
    if scheduler["prefill"]["mode"] == "chunked" and style(scheduler) != "sglang":
        raise Unsupported(
            "prefill.chunked",
            "Dynamo's vLLM-style chunked prefill has no per-request chunk cap "
            "(max_chunk_tokens): a chunk takes all the remaining step budget",
        )
    if style(scheduler) == "sglang" and fleet_shape(scenario).dp_size > 1:
        raise Unsupported(
            "style.sglang.ranks",
            "workers of several ranks are read off the documented replay's records, which "
            "show no prefill pass that emits no token (an sglang chunk that does not end a "
            "prompt), so their passes cannot be read (ranks.py)",
        )


@dataclass(frozen=True)
class Fleet:
    """A fleet as Dynamo's aggregated replay can run it: ``workers`` alike, ``dp_size`` ranks
    each (R77, R78), and the pools they belong to, in pool order (name, worker count)."""

    workers: int
    dp_size: int
    pools: tuple[tuple[str, int], ...]


#: R77's one pool of a scenario written with ``fleet.workers``.
DEFAULT_POOL = "default"


def fleet_shape(scenario: dict[str, Any]) -> Fleet:
    """The fleet of a scenario, or Unsupported when its pools are not alike.

    Dynamo's aggregated replay (``run_trace_replay`` / ``run_mocker_trace_replay``, and the
    per-token runtime's ``aggregated`` topology) takes one engine configuration for all
    ``num_workers`` workers: one ``extra_engine_args`` with one ``engine`` (limits, cache, timing
    model) and one ``dp_size``. Workers of different limits, caches, rank counts or timing
    exist in Dynamo only as its disaggregated prefill and decode pools, through both of which
    every request passes: not R77's pools, each of which serves requests whole. So several
    pools can be stated only when they are alike (same limits, same ``dp_size``, no cache of
    their own): then they are one Dynamo fleet of the summed workers, numbered in pool order
    as R78 numbers them, and round robin over them is R80's.
    """
    fleet = scenario["fleet"]
    if "pools" not in fleet:
        workers = fleet["workers"]
        return Fleet(workers, fleet.get("dp_size", 1), ((DEFAULT_POOL, workers),))
    pools = fleet["pools"]
    for pool in pools:
        if "kv_cache" in pool:
            raise Unsupported(
                "kv_cache",
                f"pool {pool['name']!r} has a KV cache; Dynamo records no blocks in use per "
                "pass (R52), see kv.py",
            )
    sizes = {pool.get("dp_size", 1) for pool in pools}
    limits = {_canonical(pool.get("scheduler", scenario["scheduler"])) for pool in pools}
    if len(sizes) > 1 or len(limits) > 1:
        raise Unsupported(
            "fleet.pools",
            "the pools differ in dp_size or scheduler limits; Dynamo's aggregated replay takes "
            "one engine configuration (one extra_engine_args: one engine, one dp_size) for all "
            "its workers, and its only pools of different workers are the disaggregated "
            "prefill and decode pools, which split every request between them (not R77's "
            "pools)",
        )
    return Fleet(
        sum(pool["workers"] for pool in pools),
        sizes.pop(),
        tuple((pool["name"], pool["workers"]) for pool in pools),
    )


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def limits(scenario: dict[str, Any]) -> dict[str, Any]:
    """The scheduler limits of every worker: the scenario's, or the pools' own (alike,
    ``fleet_shape``)."""
    pools = scenario["fleet"].get("pools")
    own: dict[str, Any] = (
        scenario["scheduler"] if not pools else pools[0].get("scheduler", scenario["scheduler"])
    )
    return own


def style(scheduler: dict[str, Any]) -> str:
    """R88: a scheduler's style, ``"vllm"`` when it names none."""
    named: str = scheduler.get("style", "vllm")
    return named


def engine_args(scenario: dict[str, Any], timing: FixedTiming) -> dict[str, Any]:
    """Dynamo's engine arguments for one worker (one rank) of the scenario.

    The style is Dynamo's ``backend`` (R88). Without a servesim cache memory is unlimited
    (R45), so the engine gets enough blocks that nothing memory-bound ever binds: no vllm
    preemption (an error if Dynamo preempts anyway, timeline.py), no trtllm reservation
    refused (R93: every running request's whole footprint fits at once) and no sglang
    estimate refused (R90: the estimate counts at most every running request's prompt plus
    its output); a fleet that would need more blocks than ``MAX_GPU_BLOCKS`` is refused
    under those two styles, where a binding reservation or estimate would pass unseen. A
    scenario with a cache gets the cache's blocks, block size and prefix caching instead.
    """
    scheduler = limits(scenario)
    named = style(scheduler)
    seats, longest = scheduler["max_num_seqs"], scheduler["max_model_len"]
    args: dict[str, Any] = {
        "backend": named,
        "timing_model": timing.as_dynamo(),
        "max_num_seqs": seats,
        "max_num_batched_tokens": scheduler["max_batched_tokens"],
        "max_model_len": longest,
        "enable_chunked_prefill": False,
        "enable_prefix_caching": False,
        "block_size": BLOCK_SIZE,
    }
    if named == "sglang":
        # R88, R90: B = 1 without a cache; max_chunk_tokens is SGLang's chunked_prefill_size
        # (a budget of the whole pass) and max_batched_tokens its max_prefill_tokens
        options = scheduler.get("sglang", {})
        blocks = 2 * seats * (longest + 1)
        args.update(
            block_size=1,
            enable_chunked_prefill=True,
            sglang={
                "schedule_policy": "fifo",  # R92
                "chunked_prefill_size": scheduler["prefill"]["max_chunk_tokens"],
                "max_prefill_tokens": scheduler["max_batched_tokens"],
                "clip_max_new_tokens": options.get("clip_max_new_tokens", 4096),
                "schedule_conservativeness": options.get("conservativeness_permille", 1000) / 1000,
            },
        )
    else:
        blocks = -(-seats * longest // BLOCK_SIZE) + seats
        if named == "trtllm":
            # R93: GUARANTEED_NO_EVICT, TensorRT-LLM's default capacity policy
            args["trtllm"] = {"capacity_scheduler_policy": "guaranteed_no_evict"}
    cache = scenario.get("kv_cache")
    if cache is not None:
        # only the experiment scripts pass a cache (the adapter refuses one, kv.py): the
        # engine's memory is then the cache's, and every memory rule binds as it would
        args.update(
            block_size=cache["block_tokens"],
            num_gpu_blocks=cache["blocks"],
            enable_prefix_caching=cache["prefix_caching"],
        )
        if "host" in cache:
            # R129: the host tier is Dynamo's native_host_offload (host_cases.py)
            args.update(host_offload_args(cache))
        return args
    if named != "vllm" and blocks > MAX_GPU_BLOCKS:
        raise Unsupported(
            "kv_cache.unlimited",
            f"{seats} seats of up to {longest} tokens need {blocks} Dynamo blocks to leave "
            f"the {named} style's memory rules unbound (R45), more than the adapter asks for "
            f"({MAX_GPU_BLOCKS})",
        )
    args["num_gpu_blocks"] = min(MAX_GPU_BLOCKS, blocks)
    return args


#: Bytes per second in one of Dynamo's decimal GB/s.
BYTES_PER_GB = 10**9


def host_offload_args(cache: dict[str, Any]) -> dict[str, Any]:
    """A cache's ``host`` (R129) as Dynamo's engine arguments, or Unsupported.

    ``native_host_offload.num_host_blocks`` is ``blocks`` (per rank: Dynamo's pool is per DP
    rank, ``dp_rank_local``), the engine's ``kv_cache_bytes_per_token`` is ``bytes_per_token``
    (Dynamo's host block is ``block_size * kv_cache_bytes_per_token`` bytes, R129's
    ``block_bytes``), and the two lanes' ``d2h_bandwidth_gbps`` and ``h2d_bandwidth_gbps``
    are ``store_bytes_per_s`` and ``load_bytes_per_s`` over 10^9 (decimal GB/s). Dynamo
    times a transfer of n blocks as ``n * block_bytes / (gbps * 10^6)`` float milliseconds,
    R130 as ``ceil(n * block_bytes * 10^6 / W)`` microseconds: the two agree for every n
    exactly when ``block_bytes * 10^6`` is a multiple of W, and otherwise a transfer ends at
    a fraction of a microsecond in Dynamo, which no servesim time can hold: refused by name.
    """
    host = cache["host"]
    block_bytes = cache["block_tokens"] * host["bytes_per_token"]
    for lane, member in (("store", "store_bytes_per_s"), ("load", "load_bytes_per_s")):
        if block_bytes * 1_000_000 % host[member] != 0:
            raise Unsupported(
                "kv_cache.host.fractional_us",
                f"a block of {block_bytes} bytes at {host[member]} bytes/s takes "
                f"{block_bytes * 1_000_000}/{host[member]} us on the {lane} lane: Dynamo's "
                "lane ends it at a fraction of a microsecond where R130 rounds up",
            )
    return {
        "kv_cache_bytes_per_token": host["bytes_per_token"],
        "native_host_offload": {
            "num_host_blocks": host["blocks"],
            "d2h_bandwidth_gbps": host["store_bytes_per_s"] / BYTES_PER_GB,
            "h2d_bandwidth_gbps": host["load_bytes_per_s"] / BYTES_PER_GB,
        },
    }


def arrival_order(requests: list[dict[str, Any]]) -> list[int]:
    """Workload positions in arrival order, ties in list order (Dynamo's trace order)."""
    return sorted(range(len(requests)), key=lambda position: requests[position]["arrival_us"])


def placement(requests: list[dict[str, Any]], workers: int) -> list[list[int]]:
    """Dynamo's round-robin placement: the k-th arrival joins worker k mod N.

    Every request takes a turn, including those Dynamo later rejects at the worker (it
    rejects after placement), so this is Dynamo's rule, not servesim's R13. Dynamo's
    per-token runtime replays one worker at a time, which is exact because workers never
    interact under round robin.
    """
    by_worker: list[list[int]] = [[] for _ in range(workers)]
    for turn, position in enumerate(arrival_order(requests)):
        by_worker[turn % workers].append(position)
    return by_worker


def to_ms(microseconds: int) -> float:
    """A time in Dynamo's float milliseconds; refuses one that would not come back exact."""
    milliseconds = microseconds / 1000
    if round(milliseconds * 1000) != microseconds:
        raise Unsupported(
            "time.float_ms",
            f"{microseconds} us cannot be written exactly in Dynamo's float milliseconds",
        )
    return milliseconds


def replay_spec(
    scenario: dict[str, Any],
    requests: list[dict[str, Any]],
    positions: list[int],
    timing: FixedTiming,
) -> dict[str, Any]:
    """The ReplaySpec (AISimulate runtime, version 1) of one worker's requests."""
    return {
        "version": 1,
        "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
        "engine": {"rank": engine_args(scenario, timing)},
        "requests": [
            {
                "id": requests[p]["id"],
                "arrival_time_ms": to_ms(requests[p]["arrival_us"]),
                "input_tokens": requests[p]["prompt_tokens"],
                "output_tokens": requests[p]["max_output_tokens"],
            }
            for p in positions
        ],
    }
