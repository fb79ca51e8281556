"""Hypothesis strategies for valid input documents, small enough to shrink well.

Each strategy builds one document as a plain dict. They are composed from small pieces
(``scheduler_limits``, ``requests``) so that shrinking simplifies one field at a time: fewer
workers, fewer requests, shorter prompts, earlier arrivals.
"""

from __future__ import annotations

import copy
import heapq
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

from servesim_conformance.documents import timing_doc


def _limits(
    draw: st.DrawFn, max_num_seqs: int, max_batched_tokens: int, max_model_len: int
) -> dict[str, Any]:
    """The scheduler object with these limits and a drawn prefill mode (whole first, for
    shrinking)."""
    prefill: dict[str, Any] = {"mode": "whole"}
    if draw(st.booleans()):
        prefill = {"mode": "chunked", "max_chunk_tokens": draw(st.integers(1, 12))}
    return {
        "max_num_seqs": max_num_seqs,
        "max_batched_tokens": max_batched_tokens,
        "max_model_len": max_model_len,
        "prefill": prefill,
    }


@st.composite
def scheduler_limits(draw: st.DrawFn) -> dict[str, Any]:
    """Scheduler limits with ``max_batched_tokens >= max_num_seqs`` (R4).

    Shrinks towards one sequence, a budget equal to it, and whole prefill.
    """
    max_num_seqs = draw(st.integers(min_value=1, max_value=4))
    max_batched_tokens = draw(st.integers(min_value=max_num_seqs, max_value=24))
    # Mostly roomy, so that most requests are accepted; one time in five a tight limit (R10).
    tight = draw(st.integers(0, 4)) == 4
    max_model_len = draw(st.integers(1, 30)) if tight else draw(st.integers(30, 64))
    return _limits(draw, max_num_seqs, max_batched_tokens, max_model_len)


@st.composite
def scenarios(draw: st.DrawFn, *, max_workers: int = 4) -> dict[str, Any]:
    """A scenario document; shrinks towards one worker and round-robin routing."""
    routing: dict[str, Any] = {"policy": "round_robin"}
    if draw(st.booleans()):
        routing = {"policy": "random", "seed": draw(st.integers(0, 2**64 - 1))}
    return {
        "document": "scenario",
        "schema_version": "1.0",
        "fleet": {"workers": draw(st.integers(1, max_workers))},
        "routing": routing,
        "scheduler": draw(scheduler_limits()),
    }


#: Output lengths the spec must reject or survive (R10): zero and enormous values.
EXTREME_OUTPUTS = (0, 2**32 - 1, 2**63 - 1, 2**64 - 1)


@st.composite
def output_lengths(draw: st.DrawFn) -> int:
    """Mostly 1 to 10 tokens; one time in ten an extreme value. Shrinks towards 1."""
    if draw(st.integers(0, 9)) == 9:
        return draw(st.sampled_from(EXTREME_OUTPUTS))
    return draw(st.integers(1, 10))


def requests(*, max_size: int = 16) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Request lists with unique ids; arrivals collide often so that R8's ties are exercised.

    Shrinks towards fewer requests, arrival 0, short prompts and one output token. Now and then
    a request is one the spec rejects (empty prompt, zero or enormous output).
    """
    request = st.fixed_dictionaries(
        {
            "arrival_us": st.integers(0, 30).map(lambda value: value * 100),
            "prompt_tokens": st.integers(0, 20),
            "max_output_tokens": output_lengths(),
        }
    )
    return st.lists(request, min_size=1, max_size=max_size).map(
        lambda items: [{"id": f"r{index}", **item} for index, item in enumerate(items)]
    )


@st.composite
def workloads(draw: st.DrawFn, *, max_size: int = 16) -> dict[str, Any]:
    """A workload document."""
    return {
        "document": "workload",
        "schema_version": "1.0",
        "requests": draw(requests(max_size=max_size)),
    }


@st.composite
def timing_profiles(draw: st.DrawFn) -> dict[str, Any]:
    """A synthetic_linear profile whose costs are not multiples of 1000 ns, so R22 rounds."""
    return timing_doc(
        step_overhead_ns=draw(st.integers(1, 2_000_000)),
        prefill_token_ns=draw(st.integers(0, 200_000)),
        decode_token_ns=draw(st.integers(0, 500_000)),
    )


#: (scenario, workload, timing profile).
Documents = tuple[dict[str, Any], dict[str, Any], dict[str, Any]]


def input_triples() -> st.SearchStrategy[Documents]:
    """(scenario, workload, timing profile), drawn together."""
    return st.tuples(scenarios(), workloads(), timing_profiles())


# --- KV cache, prefix caching and preemption (SPEC.md section 11) -------------------------------


def blocks_needed(request: dict[str, Any], block_tokens: int) -> int:
    """The blocks a request needs alone at its longest: ``ceil((prompt + output) / B)`` (R10)."""
    tokens: int = request["prompt_tokens"] + request["max_output_tokens"]
    return -(-tokens // block_tokens)


def accepted_before_the_cache(request: dict[str, Any], scheduler: dict[str, Any]) -> bool:
    """Whether R10's reasons 1 to 4 (those that do not look at the cache) accept ``request``."""
    prompt, output = request["prompt_tokens"], request["max_output_tokens"]
    if prompt == 0 or output == 0 or prompt + output > scheduler["max_model_len"]:
        return False
    whole = scheduler["prefill"]["mode"] == "whole"
    return not (whole and prompt > scheduler["max_batched_tokens"])


@st.composite
def hash_chains(draw: st.DrawFn) -> list[int]:
    """Where each chain of a shared prefix pool leaves chain 0 (R47).

    Chain 0 is ``0, 1, 2, ...``; chain c agrees with it on its first ``d_c`` hashes and then
    goes its own way, so two requests on different chains still share their first blocks.
    Shrinks towards one chain (everyone shares everything).
    """
    return draw(st.lists(st.integers(0, 3), min_size=0, max_size=2))


def chain_hash(divergence: list[int], chain: int, position: int) -> int:
    """The ``position``-th hash of ``chain`` in the pool ``divergence`` describes."""
    if chain == 0 or position < divergence[chain - 1]:
        return position
    return chain * 100 + position


@st.composite
def prefix_hash_list(
    draw: st.DrawFn, *, prompt_tokens: int, hash_block_tokens: int, divergence: list[int], own: int
) -> list[int] | None:
    """A request's ``prefix_hashes`` (R47), or None for none: a shared chain's leading hashes,
    then hashes of its own (``own`` makes them unique), never more than
    ``ceil(prompt_tokens / H)`` in all (R4). Shrinks towards every block hashed, all shared, on
    chain 0."""
    most = -(-prompt_tokens // hash_block_tokens)
    if draw(st.integers(0, 5)) == 5:
        return None
    count = most - draw(st.integers(0, most))
    chain = draw(st.integers(0, len(divergence)))
    shared = count if draw(st.integers(0, 2)) < 2 else draw(st.integers(0, count))
    own_hashes = [10_000 * (own + 1) + position for position in range(shared, count)]
    return [chain_hash(divergence, chain, i) for i in range(shared)] + own_hashes


@st.composite
def kv_scheduler_limits(draw: st.DrawFn) -> dict[str, Any]:
    """Scheduler limits for a run with a cache: several sequences at once (one alone never
    contends for blocks), a budget and a model length that accept most prompts (R4, R10), and
    one time in ten a tight model length. Shrinks towards two sequences and whole prefill."""
    max_num_seqs = draw(st.integers(2, 4)) if draw(st.integers(0, 5)) < 5 else 1
    max_batched_tokens = draw(st.integers(max(max_num_seqs, 16), 32))
    tight = draw(st.integers(0, 9)) == 9
    max_model_len = draw(st.integers(1, 30)) if tight else draw(st.integers(40, 64))
    return _limits(draw, max_num_seqs, max_batched_tokens, max_model_len)


@st.composite
def kv_output_lengths(draw: st.DrawFn) -> int:
    """Mostly 1 to 16 tokens, long enough to cross block boundaries while decoding (R46); one
    time in twenty an extreme value (R10). Shrinks towards 1."""
    if draw(st.integers(0, 19)) == 19:
        return draw(st.sampled_from(EXTREME_OUTPUTS))
    return draw(st.integers(1, 16))


@st.composite
def kv_workloads(
    draw: st.DrawFn, *, hash_block_tokens: int, max_size: int = 10, max_prompt: int = 24
) -> dict[str, Any]:
    """A workload 1.1 whose requests carry hashes from a small shared pool of prefixes (R47).

    Arrivals bunch together (so requests overlap and contend for blocks), prompts are long
    enough to span several blocks, and most requests share leading blocks, so prefix hits are
    real. Now and then a request is one R10 rejects.
    """
    divergence = draw(hash_chains())
    drawn = draw(
        st.lists(
            st.tuples(
                st.integers(0, 12).map(lambda value: value * 100),
                # one time in 25 an empty prompt (R10); shrinks towards 1
                st.integers(1, max_prompt + 1).map(lambda v: 0 if v > max_prompt else v),
                kv_output_lengths(),
            ),
            min_size=1,
            max_size=max_size,
        )
    )
    requests = []
    for index, (arrival, prompt, output) in enumerate(drawn):
        request: dict[str, Any] = {
            "id": f"r{index}",
            "arrival_us": arrival,
            "prompt_tokens": prompt,
            "max_output_tokens": output,
        }
        hashes = draw(
            prefix_hash_list(
                prompt_tokens=prompt,
                hash_block_tokens=hash_block_tokens,
                divergence=divergence,
                own=index,
            )
        )
        if hashes is not None:
            request["prefix_hashes"] = hashes
        requests.append(request)
    return {
        "document": "workload",
        "schema_version": "1.1",
        "prefix_hash_block_tokens": hash_block_tokens,
        "requests": requests,
    }


@st.composite
def cache_blocks(draw: st.DrawFn, *, needed: int) -> int:
    """A cache size for requests of which the largest needs ``needed`` blocks alone (R10).

    Mostly under pressure: from just enough for the largest request to a few blocks more, so
    running requests contend, evict (R49) and preempt; sometimes roomy (no pressure at all);
    sometimes smaller than the largest request, which R10 then rejects (``exceeds_kv_cache``).
    Shrinks towards just enough.
    """
    pressure = draw(st.integers(0, 4))
    if pressure <= 2:
        return needed + draw(st.integers(0, 2))
    if pressure == 3 and needed > 1:
        return max(1, needed - draw(st.integers(1, 3)))
    return needed * draw(st.integers(2, 6)) + draw(st.integers(0, 4))


@st.composite
def kv_input_triples(draw: st.DrawFn, *, max_workers: int = 2, max_requests: int = 10) -> Documents:
    """(scenario 1.1 with ``kv_cache``, workload 1.1 with prefix hashes, a synthetic or
    measured profile, ``kv_timing_profiles``).

    Tiny blocks (1 to 8 tokens) so that prompts of a few tokens span several; the hash block
    size is a multiple of the engine block (R4, R47); the cache is sized from the workload
    (``cache_blocks``), so memory pressure, eviction and preemption are common.
    """
    block_tokens = draw(st.integers(1, 8))
    hash_block_tokens = block_tokens * draw(st.integers(1, 3))
    workload = draw(kv_workloads(hash_block_tokens=hash_block_tokens, max_size=max_requests))
    scheduler = draw(kv_scheduler_limits())
    accepted = [r for r in workload["requests"] if accepted_before_the_cache(r, scheduler)]
    needed = max((blocks_needed(r, block_tokens) for r in accepted), default=1)
    kv_cache = {
        "blocks": draw(cache_blocks(needed=needed)),
        "block_tokens": block_tokens,
        "prefix_caching": draw(st.integers(0, 3)) != 3,
    }
    routing: dict[str, Any] = {"policy": "round_robin"}
    if draw(st.integers(0, 3)) == 3:
        routing = {"policy": "random", "seed": draw(st.integers(0, 2**64 - 1))}
    scenario = {
        "document": "scenario",
        "schema_version": "1.1",
        "fleet": {"workers": draw(st.integers(1, max_workers))},
        "routing": routing,
        "scheduler": scheduler,
        "kv_cache": kv_cache,
    }
    return scenario, workload, draw(kv_timing_profiles())


def kv_timing_profiles() -> st.SearchStrategy[dict[str, Any]]:
    """The timing of a run with a cache: synthetic (R22) or, as often, measured (a grid, R41,
    or a regression, R42, covering every step ``kv_scheduler_limits`` allows), so that decode
    runs whose durations change as contexts grow take, evict and preempt blocks (R46, R49,
    R50). Shrinks towards synthetic."""
    return st.one_of(timing_profiles(), measured_timing_profiles(limits=KV_LIMITS))


@st.composite
def hashed_input_triples_without_cache(draw: st.DrawFn) -> Documents:
    """(scenario 1.0, workload 1.1 with prefix hashes, profile): without a cache the hashes
    must change nothing (R45); H need not be a multiple of anything (R4)."""
    scenario, _, timing = draw(input_triples())
    return scenario, draw(kv_workloads(hash_block_tokens=draw(st.integers(1, 8)))), timing


def _request_with_most_hashes(workload: dict[str, Any]) -> dict[str, Any]:
    """The first request with the longest prompt: the one given too many hashes."""
    return max(workload["requests"], key=lambda request: request["prompt_tokens"])


#: How ``broken_kv_input_triples`` breaks one rule of R3 or R4 on cache and hash members.
KV_INPUT_FAULTS = (
    "hash block size not a multiple of the engine block",  # R4, R47
    "more hashes than the prompt's blocks",  # R4
    "hashes without a hash block size",  # R4
    "a cache of no blocks",  # R3, R45
    "a block of no tokens",  # R3, R45
    "kv_cache in a scenario 1.0",  # R3, R53
    "prefix_hashes in a workload 1.0",  # R3, R53
    "a hash beyond 2^53-1",  # R3, R47
)


@st.composite
def broken_kv_input_triples(draw: st.DrawFn) -> tuple[str, Documents]:
    """A KV triple broken in exactly one way of ``KV_INPUT_FAULTS``, which every
    implementation that reads scenario and workload 1.1 must reject (R5: exit 2, no report)."""
    scenario, workload, timing = copy.deepcopy(draw(kv_input_triples()))
    fault = draw(st.sampled_from(KV_INPUT_FAULTS))
    cache, requests = scenario["kv_cache"], workload["requests"]
    if fault == KV_INPUT_FAULTS[0]:
        cache["block_tokens"] = draw(st.integers(2, 8))
        offset = draw(st.integers(1, cache["block_tokens"] - 1))
        workload["prefix_hash_block_tokens"] = (
            cache["block_tokens"] * draw(st.integers(0, 2)) + offset
        )
    elif fault == KV_INPUT_FAULTS[1]:
        request = _request_with_most_hashes(workload)
        most = -(-request["prompt_tokens"] // workload["prefix_hash_block_tokens"])
        request["prefix_hashes"] = list(range(most + draw(st.integers(1, 2))))
    elif fault == KV_INPUT_FAULTS[2]:
        del workload["prefix_hash_block_tokens"]
        request = _request_with_most_hashes(workload)
        request["prefix_hashes"] = request.get("prefix_hashes") or [0]
    elif fault == KV_INPUT_FAULTS[3]:
        cache["blocks"] = 0
    elif fault == KV_INPUT_FAULTS[4]:
        cache["block_tokens"] = 0
    elif fault == KV_INPUT_FAULTS[5]:
        scenario["schema_version"] = "1.0"
    elif fault == KV_INPUT_FAULTS[6]:
        workload["schema_version"] = "1.0"
        if not any("prefix_hashes" in request for request in requests):
            requests[0]["prefix_hashes"] = []
    else:
        request = _request_with_most_hashes(workload)
        if request["prompt_tokens"] == 0:
            request["prompt_tokens"] = 1
        request["prefix_hashes"] = [2**53 + draw(st.integers(0, 5))]
    return fault, (scenario, workload, timing)


# --- State-aware routing (SPEC.md section 12) ----------------------------------------------------

#: The routing policies of scenario 1.2 (R12, R55, R56), state-aware ones first (for shrinking).
ROUTING_POLICIES = ("least_loaded", "cache_aware", "round_robin", "random")


@st.composite
def routing_weights(draw: st.DrawFn) -> dict[str, int]:
    """R56's weights: each absent (1) or 0 to 4, one of them 0 now and then, never both 0.
    Shrinks towards both absent."""
    drawn: dict[str, int] = {}
    for name in ("prefill_weight", "load_weight"):
        if draw(st.booleans()):
            drawn[name] = draw(st.integers(0, 4))
    if drawn.get("prefill_weight", 1) == 0 and drawn.get("load_weight", 1) == 0:
        drawn[draw(st.sampled_from(("prefill_weight", "load_weight")))] = draw(st.integers(1, 4))
    return drawn


@st.composite
def routings(draw: st.DrawFn) -> dict[str, Any]:
    """A scenario 1.2 ``routing`` member of any policy, a state-aware one seeded half the time
    (R58); shrinks towards ``least_loaded`` without a seed."""
    policy = draw(st.sampled_from(ROUTING_POLICIES))
    if policy == "random":
        return {"policy": policy, "seed": draw(st.integers(0, 2**64 - 1))}
    routing: dict[str, Any] = {"policy": policy}
    if policy == "cache_aware":
        routing |= draw(routing_weights())
    if policy in ("least_loaded", "cache_aware") and draw(st.booleans()):
        routing["seed"] = draw(st.integers(0, 2**64 - 1))  # R58: seeded ties
    return routing


@st.composite
def routed_input_triples(
    draw: st.DrawFn, *, max_workers: int = 5, max_requests: int = 12
) -> Documents:
    """(scenario 1.2 with any routing policy, workload 1.1 with shared prefixes, profile).

    ``kv_input_triples``' caches and workloads (tiny blocks, hashes from a shared pool of
    prefixes, caches from just enough to roomy, so evictions and preemptions happen), on 1 to 5
    workers, so that a cache-aware router has cached prefixes on some workers and not others to
    weigh against their load (R56). Arrivals are sometimes spread 10 or 100 times wider, so that
    blocks are registered between them. Prefix caching is on whenever the policy is
    ``cache_aware`` (R56); otherwise one time in four it is off, and one time in six there is no
    cache at all (``least_loaded`` needs none, R55): then ``cached_blocks_at_routing`` is null
    (R57).
    """
    scenario, workload, timing = draw(
        kv_input_triples(max_workers=max_workers, max_requests=max_requests)
    )
    spread = draw(st.sampled_from((1, 10, 100)))
    workload = {
        **workload,
        "requests": [
            {**request, "arrival_us": request["arrival_us"] * spread}
            for request in workload["requests"]
        ],
    }
    routing = draw(routings())
    scenario = {**scenario, "schema_version": "1.2", "routing": routing}
    if routing["policy"] == "cache_aware":
        scenario["kv_cache"] = {**scenario["kv_cache"], "prefix_caching": True}
    elif draw(st.integers(0, 5)) == 5:
        scenario.pop("kv_cache")
    return scenario, workload, timing


#: The largest limits ``scheduler_limits()`` draws, which a generated measured profile claims as
#: its engine's (R40).
GENERATED_LIMITS = {"max_num_seqs": 4, "max_batched_tokens": 24, "max_model_len": 64}

#: The step shapes ``scenarios()`` can produce (R22), the most R40 lets a coverage claim under
#: those limits. Measured profiles cover all of it, so generated replays never stop outside the
#: coverage (R43).
REACHABLE = {
    "decode_requests": GENERATED_LIMITS["max_num_seqs"],
    "context_tokens": GENERATED_LIMITS["max_num_seqs"] * GENERATED_LIMITS["max_model_len"],
    "prefill_tokens": GENERATED_LIMITS["max_batched_tokens"],
}


#: The largest limits ``kv_scheduler_limits()`` draws (and so ``routed_input_triples()``), which
#: a measured profile drawn for a run with a cache claims as its engine's (R40).
KV_LIMITS = {"max_num_seqs": 4, "max_batched_tokens": 32, "max_model_len": 64}


def reachable(limits: dict[str, int]) -> dict[str, int]:
    """The largest step shape (R22) that scheduler ``limits`` allow, the most R40 lets a
    coverage claim under them: D up to ``max_num_seqs``, C up to that many whole contexts
    (R11), P up to ``max_batched_tokens`` (R17; also a recompute's allotment, R50)."""
    return {
        "decode_requests": limits["max_num_seqs"],
        "context_tokens": limits["max_num_seqs"] * limits["max_model_len"],
        "prefill_tokens": limits["max_batched_tokens"],
    }


def calibration_doc(limits: dict[str, int] | None = None) -> dict[str, Any]:
    """A calibration identity (R40) for generated profiles."""
    return {
        "engine": "generated",
        "engine_version": "0",
        "model": "hypothesis",
        "model_revision": "0",
        "gpu": "none",
        "server_config_sha256": "0" * 64,
        "source_sha256": "1" * 64,
        "limits": dict(limits or GENERATED_LIMITS),
    }


@st.composite
def axis_points(draw: st.DrawFn, top: int) -> list[int]:
    """Strictly increasing points from 0 to ``top``; shrinks towards just the two ends."""
    inner = draw(st.lists(st.integers(1, top - 1), max_size=3, unique=True))
    return [0, *sorted(inner), top]


@st.composite
def grid_models(draw: st.DrawFn, *, limits: dict[str, int] | None = None) -> dict[str, Any]:
    """A ``grid`` model (R41) over the shapes reachable under ``limits`` (``scenarios()``' by
    default), with durations that rise and fall."""
    tops = REACHABLE if limits is None else reachable(limits)
    axes = {name: draw(axis_points(top)) for name, top in tops.items()}
    return draw(grid_on(axes))


def grid_on(axes: dict[str, list[int]]) -> st.SearchStrategy[dict[str, Any]]:
    """A ``grid`` model on ``axes`` with any durations; its coverage is the axes' range (R40)."""
    sizes = [len(points) for points in axes.values()]
    duration = st.integers(1, 5_000)
    plane = st.lists(
        st.lists(duration, min_size=sizes[2], max_size=sizes[2]),
        min_size=sizes[1],
        max_size=sizes[1],
    )
    return st.lists(plane, min_size=sizes[0], max_size=sizes[0]).map(
        lambda durations: {
            "kind": "grid",
            "axes": axes,
            "duration_us": durations,
            "coverage": {
                name: {"min": points[0], "max": points[-1]} for name, points in axes.items()
            },
        }
    )


@st.composite
def regression_models(draw: st.DrawFn, *, limits: dict[str, int] | None = None) -> dict[str, Any]:
    """A ``regression`` model (R42) whose costs are not whole microseconds, so it rounds,
    covering the shapes reachable under ``limits`` (``scenarios()``' by default)."""
    tops = REACHABLE if limits is None else reachable(limits)
    tokens = draw(axis_points(tops["prefill_tokens"]))
    return {
        "kind": "regression",
        "intercept_ns": draw(st.integers(1, 2_000_000)),
        "prefill_knots": [
            {"tokens": count, "ns": draw(st.integers(0, 4_000_000))} for count in tokens
        ],
        "decode_request_ns": draw(st.integers(0, 500_000)),
        "context_token_ps": draw(st.integers(0, 5_000_000)),
        "coverage": {name: {"min": 0, "max": top} for name, top in tops.items()},
    }


@st.composite
def measured_timing_profiles(
    draw: st.DrawFn, *, limits: dict[str, int] | None = None
) -> dict[str, Any]:
    """A timing profile 1.1 with a ``grid`` or ``regression`` model covering every step that
    scheduler ``limits`` allow (by default ``GENERATED_LIMITS``, every step ``scenarios()`` can
    form), with ``limits`` as its calibration's."""
    return {
        "document": "timing_profile",
        "schema_version": "1.1",
        "calibration": calibration_doc(limits),
        "model": draw(st.one_of(grid_models(limits=limits), regression_models(limits=limits))),
    }


def measured_input_triples() -> st.SearchStrategy[
    tuple[dict[str, Any], dict[str, Any], dict[str, Any]]
]:
    """(scenario, workload, measured timing profile), drawn together."""
    return st.tuples(scenarios(), workloads(), measured_timing_profiles())


def load_profile(name: str) -> None:
    """Register servesim's hypothesis profiles and load ``name``: ``ci`` is derandomized and
    database-free, so a CI run is reproducible; ``dev`` only lifts the deadline."""
    settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True)
    settings.register_profile("dev", deadline=None)
    settings.load_profile(name)


@st.composite
def narrow_grid_models(draw: st.DrawFn) -> dict[str, Any]:
    """A ``grid`` model whose coverage may miss some reachable shapes, at either end (R43)."""
    axes: dict[str, list[int]] = {}
    for name, top in REACHABLE.items():
        low = draw(st.integers(0, 2))
        high = draw(st.integers(low, top))
        inner = draw(st.lists(st.integers(low, high), max_size=2, unique=True))
        axes[name] = sorted({low, high, *inner})
    return draw(grid_on(axes))


def narrow_measured_input_triples() -> st.SearchStrategy[
    tuple[dict[str, Any], dict[str, Any], dict[str, Any]]
]:
    """(scenario, workload, grid profile) where the replay may stop outside the coverage."""
    profile = narrow_grid_models().map(
        lambda model: {
            "document": "timing_profile",
            "schema_version": "1.1",
            "calibration": calibration_doc(),
            "model": model,
        }
    )
    return st.tuples(scenarios(), workloads(), profile)


# --- Sessions, closed loop, a stop time and goodput (SPEC.md section 13) ------------------------


@st.composite
def think_times(draw: st.DrawFn) -> int | None:
    """A later turn's ``think_time_us`` (R59): absent, 0, or up to a few steps' worth. Shrinks
    towards absent."""
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return None
    if choice == 1:
        return 0
    return draw(st.integers(1, 5_000))


@st.composite
def with_sessions(draw: st.DrawFn, workload: dict[str, Any]) -> dict[str, Any]:
    """``workload`` (any version) as a workload 1.2 whose requests are grouped into one to three
    sessions, some left without one (R59).

    Each later turn is one of R59's three kinds: a think time after the previous answer with an
    ``arrival_us`` at the previous turn's (as the Mooncake importer writes, R65), its own recorded
    time (never before the previous turn's, R4) without a think time, or both. Shrinks towards
    every request in session ``s0`` with think times after the previous answer.
    """
    sessions = draw(st.integers(1, 3))
    requests = copy.deepcopy(workload["requests"])
    last: dict[str, dict[str, Any]] = {}
    for request in requests:
        choice = draw(st.integers(0, sessions))  # ``sessions`` itself: no session
        if choice == sessions:
            continue
        name = f"s{choice}"
        request["session"] = name
        previous = last.get(name)
        last[name] = request
        if previous is None:
            continue
        kind = draw(st.sampled_from(("think", "recorded", "both")))
        if kind == "think":
            request["arrival_us"] = previous["arrival_us"]
        else:
            request["arrival_us"] = max(request["arrival_us"], previous["arrival_us"])
        think = draw(think_times()) if kind != "recorded" else None
        if think is not None:
            request["think_time_us"] = think
    result = {**workload, "schema_version": "1.2", "requests": requests}
    if last:
        result["sessions"] = [{"id": name} for name in sorted(last)]
    return result


@st.composite
def objectives(draw: st.DrawFn) -> dict[str, int]:
    """An ``slo`` (R63): one to three bounds, now and then 0 (only a perfect request meets it),
    mostly within the latencies generated runs have. Shrinks towards ``ttft_us`` alone, 0."""
    bound = st.one_of(st.just(0), st.integers(0, 20_000), st.integers(0, 500_000))
    names = draw(
        st.lists(st.sampled_from(("ttft_us", "mean_itl_us", "e2e_us")), min_size=1, unique=True)
    )
    return {name: draw(bound) for name in names}


@st.composite
def stop_times(draw: st.DrawFn, workload: dict[str, Any]) -> int:
    """A ``stop_at_us`` after the workload's first arrival (R4, R62): mostly within a run of a
    few steps, sometimes far beyond every terminal time. Shrinks towards one microsecond after
    the first arrival."""
    first = min(request["arrival_us"] for request in workload["requests"])
    scale = draw(st.sampled_from((2_000, 20_000, 200_000, 5_000_000)))
    return int(first + draw(st.integers(1, scale)))


@st.composite
def load_controls(
    draw: st.DrawFn,
    scenario: dict[str, Any],
    workload: dict[str, Any],
    *,
    closed_loop: bool | None = None,
    stop: bool | None = None,
    slo: bool | None = None,
) -> dict[str, Any]:
    """``scenario`` as a scenario 1.3 with, each drawn unless forced (True or False): a closed
    loop of 1 to 4 in flight (R61), a stop time (R62) and objectives (R63). Shrinks towards none
    of them."""
    result = {**copy.deepcopy(scenario), "schema_version": "1.3"}
    if closed_loop if closed_loop is not None else draw(st.booleans()):
        result["closed_loop"] = {"max_in_flight": draw(st.integers(1, 4))}
    if stop if stop is not None else draw(st.booleans()):
        result["stop_at_us"] = draw(stop_times(workload))
    if slo if slo is not None else draw(st.booleans()):
        result["slo"] = draw(objectives())
    return result


@st.composite
def session_input_triples(
    draw: st.DrawFn,
    base: st.SearchStrategy[Documents] | None = None,
    *,
    closed_loop: bool | None = None,
    stop: bool | None = None,
    slo: bool | None = None,
) -> Documents:
    """(scenario 1.3, workload 1.2, profile): a triple of ``base`` (``input_triples()`` by
    default; ``kv_input_triples()`` or ``routed_input_triples()`` combine sections 11 and 12)
    with its requests grouped into sessions four times in five (R59), and ``load_controls``."""
    scenario, workload, timing = draw(base if base is not None else input_triples())
    if draw(st.integers(0, 4)) < 4:
        workload = draw(with_sessions(workload))
    else:
        workload = {**workload, "schema_version": "1.2"}
    scenario = draw(load_controls(scenario, workload, closed_loop=closed_loop, stop=stop, slo=slo))
    return scenario, workload, timing


# --- Pools and attention data parallelism (SPEC.md section 15) ----------------------------------

#: Pool names (R77) to draw from: letters of both cases, digits, "_" and "-", so that bytewise
#: order (R87) and alphabetical order differ.
POOL_NAMES = ("a", "b", "H200", "h100", "_x-1")


@st.composite
def pool_limits(draw: st.DrawFn, scheduler: dict[str, Any]) -> dict[str, Any]:
    """A pool's own ``scheduler`` (R77): limits no larger than the scenario's, so that every
    step stays within a measured profile's coverage (R40), and the scenario's prefill mode."""
    max_num_seqs = draw(st.integers(1, scheduler["max_num_seqs"]))
    max_batched_tokens = draw(st.integers(max_num_seqs, scheduler["max_batched_tokens"]))
    return {**scheduler, "max_num_seqs": max_num_seqs, "max_batched_tokens": max_batched_tokens}


@st.composite
def pools(
    draw: st.DrawFn, name: str, scenario: dict[str, Any], *, weighted: bool
) -> dict[str, Any]:
    """One pool of R77: 1 or 2 workers of 1 to 3 ranks, now and then its own limits and, when
    the scenario has a cache, its own cache of the same block size (prefix caching kept on
    under ``cache_aware``, R77), and a weight under ``weighted_round_robin`` (R81). Shrinks
    towards one worker of one rank with the scenario's limits and cache."""
    pool: dict[str, Any] = {"name": name, "workers": draw(st.integers(1, 2))}
    dp_size = draw(st.integers(1, 3))
    if dp_size > 1 or draw(st.booleans()):
        pool["dp_size"] = dp_size
    if draw(st.booleans()):
        pool["scheduler"] = draw(pool_limits(scenario["scheduler"]))
    cache = scenario.get("kv_cache")
    if cache is not None and draw(st.booleans()):
        caching = cache["prefix_caching"] or draw(st.booleans())
        if scenario["routing"]["policy"] == "cache_aware":
            caching = True
        blocks = max(1, cache["blocks"] + draw(st.integers(-2, 6)))
        pool["kv_cache"] = {**cache, "blocks": blocks, "prefix_caching": caching}
    if weighted and draw(st.booleans()):
        pool["weight"] = draw(st.integers(1, 4))
    return pool


@st.composite
def pool_input_triples(
    draw: st.DrawFn, base: st.SearchStrategy[Documents] | None = None
) -> Documents:
    """(scenario 1.4 with a fleet of pools, workload, profile): a triple of ``base`` (any of
    ``input_triples()``, ``kv_input_triples()`` and ``routed_input_triples()`` by default) whose
    fleet becomes 2 or 3 pools (``pools``), or three times in ten one pool of ``fleet.workers``
    with ``fleet.dp_size`` (R77), and whose round robin or random routing becomes weighted round
    robin half the time (R81). The one timing profile times every pool (R84)."""
    triples = st.one_of(input_triples(), kv_input_triples(), routed_input_triples())
    scenario, workload, timing = draw(base if base is not None else triples)
    scenario = copy.deepcopy(scenario)
    if scenario["routing"]["policy"] in ("round_robin", "random") and draw(st.booleans()):
        scenario["routing"] = {"policy": "weighted_round_robin"}
    weighted = scenario["routing"]["policy"] == "weighted_round_robin"
    if draw(st.integers(0, 9)) < 3:
        scenario["fleet"] = {**scenario["fleet"], "dp_size": draw(st.integers(1, 3))}
    else:
        names = draw(st.lists(st.sampled_from(POOL_NAMES), min_size=2, max_size=3, unique=True))
        scenario["fleet"] = {
            "pools": [draw(pools(name, scenario, weighted=weighted)) for name in names]
        }
    scenario["schema_version"] = "1.4"
    return scenario, workload, timing


#: R88: the scheduler styles.
STYLES = ("vllm", "sglang", "trtllm")


@st.composite
def styled_limits(draw: st.DrawFn, limits: dict[str, Any], page: int) -> dict[str, Any]:
    """``limits`` (a scheduler of R16 to R19) with a drawn ``style`` (R88). For ``"sglang"``
    the limits are made what R88 asks: chunked prefill, ``max_chunk_tokens`` at most the step
    budget and a whole number of ``page`` tokens (the cache's ``block_tokens``, 1 without a
    cache), lowered, never raised, so that a measured profile still covers every step; now and
    then ``scheduler.sglang`` with a small clip, so that the estimate binds. A budget under one
    page cannot be sglang's, and draws another style."""
    budget = limits["max_batched_tokens"]
    # sglang twice: its rules are the most numerous
    style = draw(st.sampled_from((*STYLES, "sglang") if budget >= page else ("vllm", "trtllm")))
    styled = {**limits, "style": style}
    if style == "sglang":
        cap = limits["prefill"].get("max_chunk_tokens", budget)
        styled["prefill"] = {"mode": "chunked", "max_chunk_tokens": min(cap, budget) // page * page}
        if styled["prefill"]["max_chunk_tokens"] == 0:
            styled["prefill"]["max_chunk_tokens"] = page
        if draw(st.booleans()):
            styled["sglang"] = {
                "clip_max_new_tokens": draw(st.integers(1, 50)),
                "conservativeness_permille": draw(st.integers(100, 3000)),
            }
    return styled


@st.composite
def styled_input_triples(draw: st.DrawFn) -> Documents:
    """(scenario 1.5, workload, profile): a triple of ``input_triples()``,
    ``kv_input_triples()`` or ``pool_input_triples()`` whose scheduler, and each pool's own,
    gets a drawn style (``styled_limits``, R88): all three styles, with and without caches
    (small ones, where vllm preempts, sglang retracts and trtllm holds requests back), chunked
    and whole prefill, pools mixing styles."""
    triples = st.one_of(input_triples(), kv_input_triples(), pool_input_triples())
    scenario, workload, timing = draw(triples)
    scenario = copy.deepcopy(scenario)
    cache = scenario.get("kv_cache")
    page = 1 if cache is None else cache["block_tokens"]  # pools' caches share it (R77 draws)
    if cache is not None and draw(st.booleans()):  # memory pressure: the least cache that
        # holds the largest request alone with a page to spare (R10, R90), or half the drawn one
        largest = max(
            (r["prompt_tokens"] + r["max_output_tokens"] for r in workload["requests"]), default=0
        )
        least = -(-largest // page) + 1
        blocks = min(cache["blocks"], max(least, cache["blocks"] // 2))  # never larger
        scenario["kv_cache"] = {**cache, "blocks": blocks}
    scenario["scheduler"] = draw(styled_limits(scenario["scheduler"], page))
    for pool in scenario["fleet"].get("pools", []):
        if "scheduler" in pool:
            pool["scheduler"] = draw(styled_limits(pool["scheduler"], page))
    scenario["schema_version"] = "1.5"
    return scenario, workload, timing


# --- Disaggregated prefill and decode (SPEC.md section 17) --------------------------------------

#: R103: bandwidths from a slow link to a fast one, in bytes per second, so that transfers last
#: from far longer than a step to far shorter.
BANDWIDTHS = (1_000_000, 100_000_000, 1_000_000_000, 3_000_000_000, 50_000_000_000)


@st.composite
def kv_transfers(draw: st.DrawFn) -> dict[str, Any]:
    """R97's ``kv_transfer``: small byte counts and latencies, every bandwidth of
    ``BANDWIDTHS``, now and then ``"full_prompt"``."""
    transfer: dict[str, Any] = {
        "bytes_per_token": draw(st.integers(1, 2000)),
        "bandwidth_bytes_per_s": draw(st.sampled_from(BANDWIDTHS)),
        "base_latency_us": draw(st.integers(0, 50)),
    }
    if draw(st.booleans()):
        transfer["mode"] = draw(st.sampled_from(("destination_missing", "full_prompt")))
    return transfer


@st.composite
def disaggregated_input_triples(draw: st.DrawFn) -> Documents:
    """(scenario 1.6, workload, profile): a triple of ``kv_input_triples()`` or
    ``routed_input_triples()`` (a cache, prefix hashes, every arrival routing policy) whose
    fleet becomes one or two prefill pools and one or two decode pools (R97) of 1 or 2
    workers, ranks now and then, each pool of style ``"vllm"`` or ``"trtllm"`` with its own
    cache now and then (tight decode caches, where reservations wait and decodes preempt),
    routed on the decode side by a drawn policy (R99), with a drawn ``kv_transfer`` (R103);
    sessions, a closed loop, a stop time and objectives now and then (R106)."""
    base = st.one_of(kv_input_triples(), routed_input_triples())
    scenario, workload, timing = draw(session_input_triples(base))
    scenario = copy.deepcopy(scenario)
    cache = scenario.get("kv_cache")
    if cache is None:  # R97: every pool has one; a roomy one, pools may draw tighter
        cache = {
            "blocks": 4096,
            "block_tokens": draw(st.sampled_from((1, 4, 16))),
            "prefix_caching": False,
        }
        if "prefix_hash_block_tokens" in workload:
            cache["block_tokens"] = 1
        scenario["kv_cache"] = cache
    block_tokens = cache["block_tokens"]
    largest = max(
        (r["prompt_tokens"] + r["max_output_tokens"] for r in workload["requests"]), default=1
    )
    pools_drawn: list[dict[str, Any]] = []
    for role, count in (("prefill", draw(st.integers(1, 2))), ("decode", draw(st.integers(1, 2)))):
        for index in range(count):
            pool: dict[str, Any] = {
                "name": f"{role}{index}",
                "workers": draw(st.integers(1, 2)),
                "role": role,
            }
            if draw(st.integers(0, 3)) == 0:
                pool["dp_size"] = 2
            limits = draw(pool_limits(scenario["scheduler"]))
            pool["scheduler"] = {**limits, "style": draw(st.sampled_from(("vllm", "trtllm")))}
            if draw(st.booleans()):
                least = -(-largest // block_tokens)  # the largest request alone, just
                top = 2**32 - 1  # R3
                low = min(max(1, least - 1), top)
                blocks = draw(st.integers(low, min(max(least, cache["blocks"]), top)))
                caching = cache["prefix_caching"] or draw(st.booleans())
                if role == "prefill" and scenario["routing"]["policy"] == "cache_aware":
                    caching = True
                pool["kv_cache"] = {**cache, "blocks": blocks, "prefix_caching": caching}
            pools_drawn.append(pool)
    scenario["fleet"] = {"pools": pools_drawn}
    decode = draw(st.sampled_from(("absent", "round_robin", "random", "least_loaded")))
    if decode != "absent":
        scenario["routing"] = {**scenario["routing"], "decode": {"policy": decode}}
        if decode == "random" or (decode == "least_loaded" and draw(st.booleans())):
            scenario["routing"]["decode"]["seed"] = draw(st.integers(0, 2**64 - 1))
    if scenario["routing"]["policy"] == "weighted_round_robin":
        scenario["routing"] = {
            "policy": "round_robin",
            **{key: value for key, value in scenario["routing"].items() if key == "decode"},
        }
    scenario["kv_transfer"] = draw(kv_transfers())
    scenario["schema_version"] = "1.6"
    return scenario, workload, timing


# --- A fleet that changes (SPEC.md section 18) ---------------------------------------------------

#: R111, R119: startup times, from none (active at once) to far longer than a step.
STARTUP_TIMES = (0, 1, 250, 2_000, 20_000)
#: R116, R119: recovery delays.
RECOVERY_DELAYS = (1, 300, 3_000)


def fleet_times(horizon: int | None = None) -> st.SearchStrategy[int]:
    """When a fleet event happens: within the first 300 us (a quarter of generated runs end
    by 200 us), within the first 10 ms (half end by 2 ms; steps last a few us to 2 ms), or up
    to 50 ms, so that events fall before, during (decode runs, chunked prefills, transfers)
    and after the work; with a ``horizon`` (the workload's last arrival and a little more), as
    often anywhere before it, so that workers change while requests still arrive. Shrinks
    towards 0."""
    return st.one_of(
        st.integers(0, 300),
        *([st.integers(0, horizon)] if horizon is not None else []),
        st.integers(0, 40).map(lambda value: value * 250),
        st.integers(0, 20).map(lambda value: value * 2_500),
    )


#: Gaps between fleet events drawn close together: shorter than a step, than a startup, than
#: a run, so that a scale-down finds workers still starting (R112) and a request migrated by
#: one failure meets the next (R118's limit).
CLOSE_GAPS = (1, 50, 500, 3_000)


@st.composite
def schedules(draw: st.DrawFn, horizon: int | None = None) -> list[dict[str, int]]:
    """R110: 1 to 3 entries at strictly increasing times (the first drawn by ``fleet_times``,
    each later one a ``CLOSE_GAPS`` gap or a ``fleet_times`` span after the previous), targets 0
    to 4 (0 switches the pool off: arrivals are then rejected, R114). Shrinks towards one entry
    at 0 of target 0."""
    times = [draw(fleet_times(horizon))]
    for _ in range(draw(st.integers(0, 2))):
        later = fleet_times(horizon).map(lambda value: value + 1)
        gap = draw(st.one_of(st.sampled_from(CLOSE_GAPS), later))
        times.append(times[-1] + gap)
    return [{"at_us": at, "target": draw(st.integers(0, 4))} for at in times]


@st.composite
def autoscales(draw: st.DrawFn, *, workers: int, cache: bool) -> dict[str, Any]:
    """R115: a reactive policy whose bounds hold the pool's initial ``workers`` (R4), with
    ``down_permille < up_permille`` (R4), ``kv_use`` only with a cache, ticks from every 100 us
    to every 4 ms, a step of 1 or 2 and now and then a cooldown. Shrinks towards
    ``waiting_per_worker`` with ``min = max = workers``."""
    metrics = ["waiting_per_worker", "outstanding_per_worker"] + (["kv_use"] if cache else [])
    up = draw(st.sampled_from((1, 500, 1000, 2000, 3000)))
    policy: dict[str, Any] = {
        "interval_us": draw(st.sampled_from((100, 1_000, 4_000))) + draw(st.integers(0, 50)),
        "metric": draw(st.sampled_from(metrics)),
        "up_permille": up,
        "down_permille": draw(st.integers(0, up - 1)),
        "min": draw(st.integers(1, workers)),
        "max": workers + draw(st.integers(0, 2)),
    }
    if draw(st.booleans()):
        policy["step"] = draw(st.integers(1, 2))
    if draw(st.booleans()):
        policy["cooldown_us"] = draw(st.sampled_from((0, 500, 5_000)))
    return policy


@st.composite
def scalings(
    draw: st.DrawFn, *, workers: int, cache: bool, horizon: int | None = None
) -> dict[str, Any] | None:
    """R110: a pool's ``scaling``: none, a startup time alone (it times recoveries, R119), a
    schedule or a reactive policy (at most one, R110), each with a drawn ``startup_us`` now and
    then absent (0). Shrinks towards none."""
    kind = draw(st.sampled_from(("none", "startup", "schedule", "autoscale")))
    if kind == "none":
        return None
    scaling: dict[str, Any] = {}
    startup = draw(st.sampled_from(STARTUP_TIMES))
    if startup or draw(st.booleans()):
        scaling["startup_us"] = startup
    if kind == "schedule":
        scaling["schedule"] = draw(schedules(horizon))
    elif kind == "autoscale":
        scaling["autoscale"] = draw(autoscales(workers=workers, cache=cache))
    return scaling


def pools_of(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    """R77, R110: the scenario's pools in pool order, each ``{name, workers, scaling}``
    (``fleet.workers`` is the pool ``"default"`` with ``fleet.scaling``)."""
    fleet = scenario["fleet"]
    if "pools" in fleet:
        return [
            {"name": pool["name"], "workers": pool["workers"], "scaling": pool.get("scaling")}
            for pool in fleet["pools"]
        ]
    return [{"name": "default", "workers": fleet["workers"], "scaling": fleet.get("scaling")}]


def created_when_failing(
    workers: int, scaling: dict[str, Any] | None, events: list[tuple[int, dict[str, Any]]]
) -> list[int]:
    """R116's static existence, for one pool without ``autoscale``: replay its decisions,
    startup ends, failures and recovery starts in R113's order without requests, and return the
    positions (the ints of ``events``, its failures with their list positions) of the failures
    that name a worker the pool has created by then. A failure of a worker that does not exist
    is left out of the replay (it is dropped from the generated list)."""
    scaling = scaling or {}
    startup = int(scaling.get("startup_us", 0))
    states = ["active"] * workers
    generation = [0] * workers  # a failure or a cancellation voids a pending startup end
    queue: list[tuple[int, int, int, str, int, int]] = []
    for entry in scaling.get("schedule", []):
        heapq.heappush(queue, (entry["at_us"], 6, 0, "decision", entry["target"], 0))
    for position, event in events:
        recover = event.get("recover_after_us", 0)
        heapq.heappush(
            queue, (event["at_us"], 1, position, "failure", event["pool_worker"], recover)
        )
    kept = []
    while queue:
        time, _, order, kind, value, extra = heapq.heappop(queue)
        if kind == "failure":
            if value >= len(states):
                continue
            kept.append(order)
            if states[value] in ("removed", "failed"):
                continue
            draining = states[value] == "draining"
            states[value] = "failed"
            generation[value] += 1
            if extra and not draining:
                heapq.heappush(queue, (time + extra, 2, value, "recover", value, 0))
        elif kind == "recover":
            states[value] = "starting" if startup else "active"
            if startup:
                heapq.heappush(queue, (time + startup, 2, value, "ready", value, generation[value]))
        elif kind == "ready":
            if states[value] == "starting" and generation[value] == extra:
                states[value] = "active"
        else:
            effective = sum(state in ("starting", "active") for state in states)
            if value > effective:
                for _ in range(value - effective):
                    states.append("starting" if startup else "active")
                    generation.append(0)
                    index = len(states) - 1
                    if startup:
                        heapq.heappush(queue, (time + startup, 2, index, "ready", index, 0))
            else:
                excess = effective - value
                for wanted in ("starting", "active"):
                    for index in reversed(range(len(states))):
                        if excess and states[index] == wanted:
                            states[index] = "removed" if wanted == "starting" else "draining"
                            generation[index] += 1
                            excess -= 1
    return kept


@st.composite
def failure_lists(
    draw: st.DrawFn, scenario: dict[str, Any], horizon: int | None = None
) -> list[dict[str, Any]]:
    """R116: 1 to 5 failures of the scenario's pools' workers (initial ones mostly, now and then
    one a scaling may add), half of them in clusters (``CLOSE_GAPS`` apart), so that a migrated
    request meets another failure, with a recovery now and then, and, under a schedule, now and
    then one of the worker a scale-down drains first just after a decision (R112, R117), and
    one time in three a chain of failures of workers 0 and 1 in turn (R118's limit); made
    valid by R4: a worker's events
    at strictly increasing times, each after the previous one's recovery, only the last one
    without ``recover_after_us``; under a schedule (or no scaling) only workers the pool has
    created by then (``created_when_failing``); under ``autoscale`` any index (a failure of a
    worker not created is ignored). May return [] (all drawn events invalid)."""
    pools = pools_of(scenario)
    drawn = []
    at = draw(fleet_times(horizon))
    for index in range(draw(st.integers(1, 5))):
        pool = draw(st.sampled_from(pools))
        if index and draw(st.booleans()):
            at += draw(st.sampled_from(CLOSE_GAPS))  # a cluster: the same requests, again
        elif index:
            at = draw(fleet_times(horizon))
        event: dict[str, Any] = {
            "pool": pool["name"],
            "pool_worker": draw(st.integers(0, pool["workers"] + 1)),
            "at_us": at,
        }
        if draw(st.integers(0, 2)) > 0:
            event["recover_after_us"] = draw(st.sampled_from(RECOVERY_DELAYS))
        drawn.append(event)
    pairs = [pool for pool in pools if pool["workers"] >= 2]
    if pairs and draw(st.integers(0, 2)) == 0:  # R118: a chain of failures chasing the requests
        pool = draw(st.sampled_from(pairs))  # they migrate to (workers 0 and 1, in turn)
        start, gap = draw(fleet_times(horizon)), draw(st.sampled_from(CLOSE_GAPS[1:]))
        for link in range(draw(st.integers(2, 4))):
            drawn.append(
                {
                    "pool": pool["name"],
                    "pool_worker": link % 2,
                    "at_us": start + link * gap,
                    "recover_after_us": 1,
                }
            )
    for pool in pools:  # R112, R117: the worker a scale-down drains first fails while draining
        schedule = (pool["scaling"] or {}).get("schedule", [])
        if schedule and draw(st.booleans()):
            entry = draw(st.sampled_from(schedule))
            event = {
                "pool": pool["name"],
                "pool_worker": pool["workers"] - 1,
                "at_us": entry["at_us"] + draw(st.sampled_from(CLOSE_GAPS)),
                "recover_after_us": draw(st.sampled_from(RECOVERY_DELAYS)),
            }
            drawn.append(event)
    drawn.sort(key=lambda event: event["at_us"])
    valid: list[dict[str, Any]] = []
    last: dict[tuple[str, int], dict[str, Any]] = {}
    for event in drawn:
        key = (event["pool"], event["pool_worker"])
        previous = last.get(key)
        if previous is not None:
            recover = previous.get("recover_after_us")
            if recover is None or event["at_us"] <= previous["at_us"] + recover:
                continue
        last[key] = event
        valid.append(event)
    kept = set(range(len(valid)))
    for pool in pools:
        if pool["scaling"] is not None and "autoscale" in pool["scaling"]:
            continue
        own = [(index, event) for index, event in enumerate(valid) if event["pool"] == pool["name"]]
        created = set(created_when_failing(pool["workers"], pool["scaling"], own))
        kept -= {index for index, _ in own} - created
    return [event for index, event in enumerate(valid) if index in kept]


@st.composite
def fleet_changes(
    draw: st.DrawFn, scenario: dict[str, Any], horizon: int | None = None
) -> dict[str, Any]:
    """``scenario`` as a scenario 1.7 whose fleet changes (R109 to R121): each pool drawn a
    ``scaling`` (``scalings``), and three times in four ``failures`` (``failure_lists``) under
    policy ``"migrate"`` (1 to 3 migrations) or ``"fail"``; when neither was drawn, failures
    are (at least one, of an initial worker). Event times by ``fleet_times(horizon)``. Shrinks
    towards one failure of worker 0 at 0, migrated once."""
    result = copy.deepcopy(scenario)
    fleet = result["fleet"]
    cache = "kv_cache" in result
    for pool in fleet.get("pools", [fleet]):
        has_cache = cache or "kv_cache" in pool
        scaling = draw(scalings(workers=pool["workers"], cache=has_cache, horizon=horizon))
        if scaling is not None:
            pool["scaling"] = scaling
    changes = any("scaling" in pool for pool in fleet.get("pools", [fleet]))
    if not changes or draw(st.integers(0, 3)) > 0:
        events = draw(failure_lists(result, horizon))
        if not events and not changes:  # an initial worker always exists (R116)
            first = pools_of(result)[0]
            at = draw(fleet_times(horizon))
            events = [{"pool": first["name"], "pool_worker": 0, "at_us": at}]
        if events:
            policy = draw(st.sampled_from(("migrate", "migrate", "fail")))  # migrate 2 in 3
            failures: dict[str, Any] = {"events": events, "policy": policy}
            if policy == "migrate":
                failures["max_migrations"] = draw(st.sampled_from((1, 1, 2, 3)))
            result["failures"] = failures
    result["schema_version"] = "1.7"
    return result


@st.composite
def fleet_input_triples(
    draw: st.DrawFn, base: st.SearchStrategy[Documents] | None = None
) -> Documents:
    """(scenario 1.7, workload, profile): a triple of ``base`` (by default any of plain,
    cached, state-aware, session, pool, styled and disaggregated triples: chunked prefill,
    sessions, stop times, ranks, styles and transfers) whose fleet changes (``fleet_changes``):
    schedules, reactive policies, startup times, failures with and without recovery, under both
    policies."""
    triples = st.one_of(
        input_triples(),
        kv_input_triples(),
        session_input_triples(),
        session_input_triples(routed_input_triples()),
        pool_input_triples(),
        styled_input_triples(),
        disaggregated_input_triples(),
    )
    scenario, workload, timing = draw(base if base is not None else triples)
    horizon = max(request["arrival_us"] for request in workload["requests"]) + 1_000
    return draw(fleet_changes(scenario, horizon)), workload, timing


# --- Multi-turn reuse and the host KV tier (SPEC.md section 19) ----------------------------------

#: R129: bytes of KV cache per token of the host pools drawn. With blocks of 1 to 8 tokens and
#: ``BANDWIDTHS`` on both lanes a block's copy takes from 1 us (R130's least) to 32 ms, from far
#: shorter than a step to far longer.
HOST_BYTES_PER_TOKEN = (1, 100, 1_000, 4_000)
#: Outputs up to this many tokens are answered in a continuing turn's prompt (R125); a longer
#: one (``EXTREME_OUTPUTS``) leaves the pair not continuing.
ANSWERED_OUTPUT = 64
#: The longest prompt a continuing turn is given (sessions grow by a turn's prompt and answer).
LONGEST_CONTINUING_PROMPT = 240


@st.composite
def host_members(draw: st.DrawFn, *, gpu_blocks: int = 8) -> dict[str, int]:
    """R129's ``kv_cache.host`` for a GPU cache of ``gpu_blocks``: mostly a pool of half to
    four times the GPU's blocks (a host pool no larger than the GPU cache rarely holds what the
    GPU evicted, R133), one time in four a tiny one (1 to 3 entries: host evictions and skipped
    blocks, R131), and a drawn size and bandwidth for each lane. Shrinks towards as many
    entries as GPU blocks, 1 byte per token and a slow link."""
    if draw(st.integers(0, 3)) == 3:
        blocks = draw(st.integers(1, 3))
    else:
        blocks = max(
            1, gpu_blocks * draw(st.sampled_from((1, 2, 4))) // draw(st.sampled_from((1, 2)))
        )
    return {
        "blocks": min(blocks, 2**32 - 1),
        "bytes_per_token": draw(st.sampled_from(HOST_BYTES_PER_TOKEN)),
        "store_bytes_per_s": draw(st.sampled_from(BANDWIDTHS)),
        "load_bytes_per_s": draw(st.sampled_from(BANDWIDTHS)),
    }


def _style(limits: dict[str, Any]) -> str:
    """R88: a scheduler's style (``"vllm"`` when absent)."""
    style: str = limits.get("style", "vllm")
    return style


def cache_users(scenario: dict[str, Any]) -> list[tuple[dict[str, Any], list[str]]]:
    """R77, R129: each cache of ``scenario`` (the top-level one first, then the pools' own)
    with the styles of the pools that use it (a pool without its own ``scheduler`` has the
    scenario's limits; one with its own, its own style)."""
    result: list[tuple[dict[str, Any], list[str]]] = []
    pools = scenario["fleet"].get("pools")
    top = scenario.get("kv_cache")
    if top is not None:
        if pools is None:
            result.append((top, [_style(scenario["scheduler"])]))
        else:
            users = [
                _style(pool.get("scheduler", scenario["scheduler"]))
                for pool in pools
                if "kv_cache" not in pool
            ]
            result.append((top, users))
    for pool in pools or []:
        if "kv_cache" in pool:
            result.append(
                (pool["kv_cache"], [_style(pool.get("scheduler", scenario["scheduler"]))])
            )
    return result


def _at_least(version: str, least: str) -> str:
    """The later of two minor versions of one major (``"1.4"``, ``"1.3"`` -> ``"1.4"``)."""
    return max(version, least, key=lambda value: tuple(int(part) for part in value.split(".")))


@st.composite
def with_host_pools(draw: st.DrawFn, scenario: dict[str, Any]) -> dict[str, Any]:
    """``scenario`` as a scenario 1.8 whose caches get R129's ``host`` four times in five where
    R129 allows it (every pool using the cache of style ``"vllm"``), prefix caching turned on
    for it when off (half the time; otherwise that cache keeps no host pool), so that fleets mix
    schedulers with and without a host pool; at least one cache gets one when any may. A
    scenario without a cache stays without. Shrinks towards every allowed cache with a host
    pool of one entry."""
    result = copy.deepcopy(scenario)
    allowed = [cache for cache, users in cache_users(result) if all(u == "vllm" for u in users)]
    hosted = 0
    for cache in allowed:
        if draw(st.integers(0, 4)) == 4:
            continue
        if not cache["prefix_caching"]:
            if draw(st.booleans()):
                continue
            cache["prefix_caching"] = True
        cache["host"] = draw(host_members(gpu_blocks=cache["blocks"]))
        hosted += 1
    if allowed and not hosted:
        allowed[0]["prefix_caching"] = True
        allowed[0]["host"] = draw(host_members(gpu_blocks=allowed[0]["blocks"]))
    result["schema_version"] = "1.8"
    return result


def _unsessioned(workload: dict[str, Any]) -> dict[str, Any]:
    """``workload`` without sessions (R59): each request keeps its ``arrival_us``."""
    result = copy.deepcopy(workload)
    result.pop("sessions", None)
    for request in result["requests"]:
        request.pop("session", None)
        request.pop("think_time_us", None)
    return result


@st.composite
def continuable(draw: st.DrawFn, turn: dict[str, Any], *, hash_block_tokens: int, own: int) -> None:
    """Make ``turn`` one a next turn can continue (R125), keeping whether it continues the turn
    before it: a prompt of at least one hashed block (raised to H to 2 H tokens when shorter;
    a prompt grows, so a continuing turn still grows), and hashes for at least its full hashed
    blocks (its own list, lengthened with hashes of its own, ``own``, up to ``floor(P / H)`` or
    ``ceil(P / H)``; a turn without hashes gets only its own, so it continues nothing)."""
    size = hash_block_tokens
    if turn["prompt_tokens"] < size:
        turn["prompt_tokens"] = size + draw(st.integers(0, size))
    prompt = turn["prompt_tokens"]
    hashes = list(turn.get("prefix_hashes") or [])
    target = prompt // size + draw(st.integers(0, 1 if prompt % size else 0))
    if len(hashes) < prompt // size:
        hashes += [2_000_000 * (own + 1) + position for position in range(len(hashes), target)]
    turn["prefix_hashes"] = hashes


@st.composite
def extending_turn(
    draw: st.DrawFn,
    previous: dict[str, Any],
    turn: dict[str, Any],
    *,
    hash_block_tokens: int,
    own: int,
) -> None:
    """Make ``turn`` continue ``previous`` (R125), five times in six first making ``previous``
    ``continuable``: a prompt longer than the previous prompt and
    answer by 1 to 2 H tokens, hashes beginning with the previous turn's full hashed blocks'
    (``floor(P / H)``) and then, for the rest of its blocks (mostly all of them, so that R127
    identifies the answer's blocks), the previous turn's hash of its partial block now and then
    (R126's canonical hash then changes nothing) and otherwise hashes of the session's own
    (``own``) or of a template every session shares (so that identities, and the blocks of
    answers, are shared across sessions and with requests outside them). A previous turn
    without hashes, without a full hashed block, with an empty or enormous answer, or too long,
    is left alone: that pair does not continue."""
    size = hash_block_tokens
    if draw(st.integers(0, 5)) < 5:
        draw(continuable(previous, hash_block_tokens=size, own=own))
    prompt, answer = previous["prompt_tokens"], previous["max_output_tokens"]
    hashes = previous.get("prefix_hashes")
    if hashes is None or prompt < size or not 0 < answer <= ANSWERED_OUTPUT:
        return
    new_prompt = prompt + answer + draw(st.integers(1, 2 * size))
    if new_prompt > LONGEST_CONTINUING_PROMPT:
        return
    full = prompt // size
    most = -(-new_prompt // size)
    count = max(full, most - draw(st.sampled_from((0, 0, 0, 1, most - full))))
    shared = draw(st.booleans())
    tail = [
        (900_000 if shared else 1_000_000 * (own + 1)) + position for position in range(full, count)
    ]
    if tail and len(hashes) > full and draw(st.booleans()):
        tail[0] = hashes[full]  # the previous turn's partial block's own hash
    turn["prompt_tokens"] = new_prompt
    turn["prefix_hashes"] = hashes[:full] + tail


@st.composite
def extending_sessions(draw: st.DrawFn, workload: dict[str, Any]) -> dict[str, Any]:
    """``workload`` (with ``prefix_hash_block_tokens``) as a workload 1.3 with
    ``session_prompts_extend`` (R125): its requests regrouped into sessions (``with_sessions``:
    think times, recorded arrivals) whose later turns mostly extend the turn before
    (``extending_turn``); one pair in six is left as drawn (most then do not continue). One time
    in eight the member is ``false`` (the same pairs, none continuing). Shrinks towards every
    request in one session, each turn continuing."""
    size = workload["prefix_hash_block_tokens"]
    result = draw(with_sessions(_unsessioned(workload)))
    last: dict[str, dict[str, Any]] = {}
    for index, request in enumerate(result["requests"]):
        name = request.get("session")
        if name is None:
            continue
        previous = last.get(name)
        last[name] = request
        if previous is not None and draw(st.integers(0, 5)) < 5:
            draw(extending_turn(previous, request, hash_block_tokens=size, own=index))
    result["schema_version"] = "1.3"
    result["session_prompts_extend"] = draw(st.integers(0, 7)) < 7
    return result


def _raise_limits(limits: dict[str, Any], longest: int, prompt: int) -> bool:
    """Raise ``limits`` in place so that a request of ``longest`` tokens fits ``max_model_len``
    and, in whole prefill, a prompt of ``prompt`` tokens fits the budget (R10); whether
    anything changed."""
    changed = False
    if limits["max_model_len"] < longest:
        limits["max_model_len"] = longest
        changed = True
    if limits["prefill"]["mode"] == "whole" and limits["max_batched_tokens"] < prompt:
        limits["max_batched_tokens"] = prompt
        changed = True
    return changed


@st.composite
def fitted_to(draw: st.DrawFn, documents: Documents, *, before: dict[str, Any]) -> Documents:
    """``documents`` whose workload's prompts grew from ``before``'s: every limit raised so that
    the grown requests are accepted as the drawn ones were (R10), each cache at least the
    largest request alone plus 0 to 2 blocks (a small cache still, R49), and a measured timing
    profile (which covers only the drawn limits, R40) replaced by a synthetic one when a limit
    was raised."""
    scenario, workload, timing = copy.deepcopy(documents)
    drawn = {request["id"]: request for request in before["requests"]}
    grown = [
        r
        for r in workload["requests"]
        if r["prompt_tokens"] > drawn[r["id"]]["prompt_tokens"]
        and r["max_output_tokens"] <= ANSWERED_OUTPUT
    ]
    if not grown:
        return scenario, workload, timing
    longest = max(r["prompt_tokens"] + r["max_output_tokens"] for r in grown)
    prompt = max(r["prompt_tokens"] for r in grown)
    changed = _raise_limits(scenario["scheduler"], longest, prompt)
    for pool in scenario["fleet"].get("pools", []):
        if "scheduler" in pool:
            changed = _raise_limits(pool["scheduler"], longest, prompt) or changed
    for cache, _ in cache_users(scenario):
        least = -(-longest // cache["block_tokens"]) + draw(st.integers(0, 2))
        cache["blocks"] = max(cache["blocks"], least)
    if changed and timing["model"]["kind"] != "synthetic_linear":
        timing = draw(timing_profiles())
    return scenario, workload, timing


@st.composite
def continuing_session_input_triples(
    draw: st.DrawFn, base: st.SearchStrategy[Documents] | None = None
) -> Documents:
    """(scenario, workload 1.3 with ``session_prompts_extend``, profile): a triple of ``base``
    (by default cached, state-aware and pool triples, all with prefix hashes) whose workload's
    requests form sessions whose turns extend (``extending_sessions``), with the limits and
    caches fitted to the longer prompts (``fitted_to``) and ``load_controls`` (a closed loop, a
    stop time, objectives) now and then (a base's stop time is drawn again: the sessions move
    arrivals, and a stop time must come after the first, R4). A base without prefix hashes is
    left as it is."""
    triples = st.one_of(
        kv_input_triples(), routed_input_triples(), pool_input_triples(kv_input_triples())
    )
    scenario, workload, timing = draw(base if base is not None else triples)
    if "prefix_hash_block_tokens" not in workload:
        return scenario, workload, timing
    extended = draw(extending_sessions(workload))
    scenario, extended, timing = draw(fitted_to((scenario, extended, timing), before=workload))
    version = scenario["schema_version"]
    scenario = {key: value for key, value in scenario.items() if key != "stop_at_us"}  # R4
    scenario = draw(load_controls(scenario, extended))
    scenario["schema_version"] = _at_least(version, "1.3")
    return scenario, extended, timing


@st.composite
def recurring_prefix_triples(draw: st.DrawFn) -> Documents:
    """(scenario 1.1, workload 1.1, profile): a ``kv_input_triples()`` triple whose requests
    read 2 or 3 documents (``few_documents``) and come back to them (``revisits``), on caches
    that hold the largest request alone (``tightened``): prefixes evicted from the GPU while
    other documents are read, the host pool's headline case (R133, R134)."""
    scenario, workload, timing = draw(kv_input_triples())
    workload = draw(revisits(draw(few_documents(workload, least=2))))
    return tightened(scenario, workload), workload, timing


@st.composite
def host_input_triples(
    draw: st.DrawFn, base: st.SearchStrategy[Documents] | None = None
) -> Documents:
    """(scenario 1.8 with host pools, workload, profile): a triple of ``base`` (by default
    cached, recurring-prefix, session, continuing-session, pool and styled triples: small GPU
    caches that evict, shared prefixes, stop times, ranks, styles without a host pool beside
    vllm pools with one) whose arrivals are spread out (``spread_out``), whose prefixes recur
    now and then (``few_documents``, ``revisits``), whose caches are now and then ``tightened``
    and get host pools (``with_host_pools``)."""
    triples = st.one_of(
        kv_input_triples(),
        recurring_prefix_triples(),
        session_input_triples(recurring_prefix_triples()),
        continuing_session_input_triples(),
        pool_input_triples(recurring_prefix_triples()),
        styled_input_triples(),
    )
    scenario, workload, timing = draw(base if base is not None else triples)
    scenario, workload = draw(spread_out(scenario, workload))
    if "prefix_hash_block_tokens" in workload and draw(st.integers(0, 2)) == 0:
        workload = draw(few_documents(workload))
    if draw(st.integers(0, 2)) < 2:
        workload = draw(revisits(workload))
    if draw(st.booleans()):
        scenario = tightened(scenario, workload)
    return draw(with_host_pools(scenario)), workload, timing


def tightened(scenario: dict[str, Any], workload: dict[str, Any]) -> dict[str, Any]:
    """``scenario`` whose caches are the least that holds the largest request of ``workload``
    alone (R10; never larger than drawn), so that GPU evictions, and with them host loads, are
    the rule (R49, R133)."""
    result = copy.deepcopy(scenario)
    largest = max(
        (
            r["prompt_tokens"] + r["max_output_tokens"]
            for r in workload["requests"]
            if r["max_output_tokens"] <= ANSWERED_OUTPUT
        ),
        default=1,
    )
    for cache, _ in cache_users(result):
        least = max(1, -(-largest // cache["block_tokens"]))
        cache["blocks"] = min(cache["blocks"], least)
    return result


@st.composite
def few_documents(draw: st.DrawFn, workload: dict[str, Any], *, least: int = 1) -> dict[str, Any]:
    """``workload`` whose requests outside sessions read one of 1 to 3 documents: each one's
    hashes become the document's, one for every hashed block of its prompt (R47), so that
    prefixes recur across the run, more of them than a small GPU cache holds, and come back
    from the host pool (R133). Turns of sessions that extend keep their hashes (R125).
    Shrinks towards
    ``least`` documents."""
    result = copy.deepcopy(workload)
    size = result["prefix_hash_block_tokens"]
    documents = draw(st.integers(least, 3))
    extend = result.get("session_prompts_extend", False)
    for request in result["requests"]:
        if (extend and "session" in request) or request["prompt_tokens"] == 0:
            continue
        document = draw(st.integers(0, documents - 1))
        count = -(-request["prompt_tokens"] // size)
        request["prefix_hashes"] = [5_000_000 + 1_000 * document + i for i in range(count)]
    return result


#: How long after a request a revisit of its prefix arrives, in microseconds: within a step or
#: two, or long after (its blocks evicted from a small GPU cache, perhaps kept on the host).
REVISIT_GAPS = (0, 100, 2_000, 20_000, 200_000)


@st.composite
def revisits(draw: st.DrawFn, workload: dict[str, Any]) -> dict[str, Any]:
    """``workload`` with 1 to 3 requests outside sessions that come back to an earlier hashed
    request's prefix some time later (its ``prefix_hashes``, a prompt as long or up to one
    hashed block longer, 1 to 4 output tokens), so that a prefix stored to a host pool and
    evicted from the GPU by the requests in between is looked up again (R133). Shrinks towards
    one revisit of the first hashed request at once."""
    result = copy.deepcopy(workload)
    hashed = [r for r in result["requests"] if r.get("prefix_hashes") and r["prompt_tokens"]]
    if not hashed:
        return result
    size = result["prefix_hash_block_tokens"]
    for _ in range(draw(st.integers(1, 3))):
        earlier = draw(st.sampled_from(hashed))
        prompt = earlier["prompt_tokens"] + draw(st.integers(0, size))
        result["requests"].append(
            {
                "id": f"again{len(result['requests'])}",  # unique (R4)
                "arrival_us": earlier["arrival_us"] + draw(st.sampled_from(REVISIT_GAPS)),
                "prompt_tokens": prompt,
                "max_output_tokens": draw(st.integers(1, 4)),
                "prefix_hashes": list(earlier["prefix_hashes"]),
            }
        )
    return result


@st.composite
def spread_out(
    draw: st.DrawFn, scenario: dict[str, Any], workload: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``workload`` with its recorded arrivals spread 1, 10 or 100 times wider (order and
    sessions kept, R4), and ``scenario``'s stop time with them (R4, R62), so that steps, stores
    and GPU evictions happen between arrivals and a later request finds an earlier prefix in
    the host pool only (R133). Shrinks towards as drawn."""
    spread = draw(st.sampled_from((1, 10, 100)))
    scenario, workload = copy.deepcopy(scenario), copy.deepcopy(workload)
    for request in workload["requests"]:
        request["arrival_us"] *= spread
    if "stop_at_us" in scenario:
        scenario["stop_at_us"] *= spread
    return scenario, workload


def disaggregated_host_input_triples() -> st.SearchStrategy[Documents]:
    """(scenario 1.8, workload, profile): disaggregated fleets (``disaggregated_input_triples``)
    with host pools on prefill and decode pools (R139), their sessions continuing half the
    time (``continuing_session_input_triples``)."""
    return st.one_of(
        host_input_triples(disaggregated_input_triples()),
        host_input_triples(continuing_session_input_triples(disaggregated_input_triples())),
    )
