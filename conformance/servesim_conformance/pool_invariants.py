"""What every report of a fleet of pools and ranks must show (SPEC.md section 15, R77 to R85).

Each check reads only the scenario, the workload and the report (its trace where it says so), so
it holds any implementation to the rules, not to the reference's code:

- the pass barrier (R83): the steps of one worker that start together end together, at the end
  of the longest of them, and a worker's passes never overlap;
- a rank's step stays within its own pool's limits and cache (R77, R78);
- a request runs on one rank only: every trace entry that names it is on its worker and rank,
  and its pool is its worker's (R78, R85);
- weighted round robin keeps every worker within one request of its weight's share at every
  prefix of the routed arrivals (R81's bound, which nginx's smooth algorithm guarantees).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from servesim_conformance.violations import Document, require

#: R77: a scenario with ``fleet.workers`` is one pool of this name.
DEFAULT_POOL = "default"


@dataclass(frozen=True)
class Pool:
    """One pool as R77 resolves it: its limits and cache are the scenario's unless its own."""

    name: str
    workers: int
    dp_size: int
    limits: Document
    cache: Document | None
    weight: int


def pools_of(scenario: Document) -> list[Pool]:
    """R77: the scenario's pools in pool order; ``fleet.workers`` (with ``fleet.dp_size``, 1
    when absent) is the one pool ``"default"``."""
    fleet = scenario["fleet"]
    if "pools" not in fleet:
        cache = scenario.get("kv_cache")
        limits = scenario["scheduler"]
        return [Pool(DEFAULT_POOL, fleet["workers"], fleet.get("dp_size", 1), limits, cache, 1)]
    return [
        Pool(
            pool["name"],
            pool["workers"],
            pool.get("dp_size", 1),
            pool.get("scheduler", scenario["scheduler"]),
            pool.get("kv_cache", scenario.get("kv_cache")),
            pool.get("weight", 1),
        )
        for pool in fleet["pools"]
    ]


def worker_pools(scenario: Document) -> list[Pool]:
    """R78: the pool of each worker, by global index (pool 0's workers first)."""
    return [pool for pool in pools_of(scenario) for _ in range(pool.workers)]


def _trace(report: Document) -> list[Document]:
    trace: list[Document] = report["trace"] or []
    return trace


def check_pass_barrier(scenario: Document, report: Document) -> None:
    """R83, R85: a worker's trace entries that start at one instant are the steps of one pass,
    at most one per rank, each ending at the pass end, which is its start plus the longest
    step's own ``duration_us`` (a shorter step waits at the barrier); and a worker starts a
    pass only when it is idle, so the next pass starts at or after the previous one's end."""
    pools = worker_pools(scenario)
    passes: dict[int, dict[int, list[Document]]] = defaultdict(lambda: defaultdict(list))
    for index, step in enumerate(_trace(report)):
        worker = step["worker"]
        where = f"trace step {index} (worker {worker}, rank {step['rank']})"
        require(0 <= worker < len(pools), "R78", f"{where}: no such worker")
        require(0 <= step["rank"] < pools[worker].dp_size, "R78", f"{where}: no such rank")
        require(
            1 <= step["duration_us"] <= step["end_us"] - step["start_us"],
            "R83",
            f"{where}: its own duration does not fit in its pass",
        )
        passes[worker][step["start_us"]].append(step)
    for worker, by_start in sorted(passes.items()):
        previous_end = None
        for start, steps in sorted(by_start.items()):
            where = f"worker {worker}'s pass at {start}"
            ranks = [step["rank"] for step in steps]
            require(len(ranks) == len(set(ranks)), "R83", f"{where}: a rank has two steps")
            ends = {step["end_us"] for step in steps}
            require(len(ends) == 1, "R83", f"{where}: its ranks' steps end apart: {sorted(ends)}")
            longest = max(step["duration_us"] for step in steps)
            require(
                ends == {start + longest},
                "R83",
                f"{where}: ends at {sorted(ends)}, not at its start plus its longest step",
            )
            require(
                previous_end is None or start >= previous_end,
                "R83",
                f"{where}: starts before the previous pass ends at {previous_end}",
            )
            previous_end = start + longest


def check_rank_limits(scenario: Document, report: Document) -> None:
    """R77, R78: a rank's step is formed under its own pool's limits (``max_num_seqs`` and
    ``max_batched_tokens`` per rank, the chunk cap) and within its own cache of the pool's
    ``blocks`` (``kv_blocks_in_use`` null exactly when the pool has no cache)."""
    pools = worker_pools(scenario)
    for index, step in enumerate(_trace(report)):
        pool = pools[step["worker"]]
        limits = pool.limits
        where = f"trace step {index} (worker {step['worker']}, rank {step['rank']}, {pool.name})"
        ids = step["decode_requests"] + [item["id"] for item in step["prefill"]]
        require(len(ids) <= limits["max_num_seqs"], "R78", f"{where}: over its max_num_seqs")
        batched = len(step["decode_requests"]) + step["prefill_tokens"]
        require(batched <= limits["max_batched_tokens"], "R78", f"{where}: over max_batched_tokens")
        if limits["prefill"]["mode"] == "chunked":
            cap = limits["prefill"]["max_chunk_tokens"]
            chunks = all(item["tokens"] <= cap for item in step["prefill"])
            require(chunks, "R78", f"{where}: a chunk over its pool's cap")
        blocks = step["kv_blocks_in_use"]
        if pool.cache is None:
            require(blocks is None, "R78", f"{where}: blocks in use without a cache")
        else:
            held = blocks is not None and blocks <= pool.cache["blocks"]
            require(held, "R78", f"{where}: {blocks} blocks, its cache has {pool.cache['blocks']}")


def check_one_rank_per_request(scenario: Document, report: Document) -> None:
    """R78, R85: a request runs on the rank it joined until its end, so every trace entry
    naming it (decoding, prefilling or preempted) is of its ``worker`` and ``rank``; its
    ``pool`` is its worker's, and ``pool`` and ``rank`` are null exactly when ``worker`` is."""
    pools = worker_pools(scenario)
    requests = {entry["id"]: entry for entry in report["requests"]}
    for entry in report["requests"]:
        worker, rid = entry["worker"], entry["id"]
        if worker is None:
            require(entry["pool"] is None and entry["rank"] is None, "R85", f"{rid}: unrouted")
            continue
        require(entry["pool"] == pools[worker].name, "R85", f"{rid}: not its worker's pool")
        rank = entry["rank"]
        require(rank is not None and 0 <= rank < pools[worker].dp_size, "R78", f"{rid}: rank")
    for index, step in enumerate(_trace(report)):
        named = step["decode_requests"] + [item["id"] for item in step["prefill"]]
        for rid in named + step["preempted"]:
            entry = requests[rid]
            require(
                (entry["worker"], entry["rank"]) == (step["worker"], step["rank"]),
                "R78",
                f"trace step {index} runs {rid} on worker {step['worker']} rank "
                f"{step['rank']}; it joined worker {entry['worker']} rank {entry['rank']}",
            )


def check_weighted_shares(scenario: Document, report: Document) -> None:
    """R81: with ``"weighted_round_robin"``, after n routed requests (in arrival order, R8:
    by the time they arrived, then list order) each worker w has been chosen c_w times with
    ``|c_w * W - n * weight_w| <= W``, W being the sum of every worker's weight."""
    if scenario["routing"]["policy"] != "weighted_round_robin":
        return
    weights = [pool.weight for pool in worker_pools(scenario)]
    total = sum(weights)
    routed = sorted(
        (entry["arrival_us"], index, entry["worker"])
        for index, entry in enumerate(report["requests"])
        if entry["worker"] is not None
    )
    chosen = [0] * len(weights)
    for count, (_, index, worker) in enumerate(routed, start=1):
        chosen[worker] += 1
        for w, weight in enumerate(weights):
            require(
                abs(chosen[w] * total - count * weight) <= total,
                "R81",
                f"after {count} routed requests (the last "
                f"{report['requests'][index]['id']}), worker {w} of weight {weight} has "
                f"{chosen[w]} of them, more than one request off its share of {total}",
            )


def check_pool_report(scenario: Document, report: Document) -> None:
    """Every pool invariant above; the report must have been written with ``--trace``."""
    require(report["trace"] is not None, "R30", "--trace was given but trace is null")
    check_pass_barrier(scenario, report)
    check_rank_limits(scenario, report)
    check_one_rank_per_request(scenario, report)
    check_weighted_shares(scenario, report)
