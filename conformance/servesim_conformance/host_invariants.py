"""What every report 10.0 must show about the host KV tier (SPEC.md section 19, R125 to R142).

Each check reads only the scenario and the report, so it holds any implementation to the rules,
not to the reference's code. A violation names its rule and the JSON pointer of the offending
member (``R140: /workers/0/ranks/1/host/stores: ...``).

Checks that need only the report's figures (they hold with and without ``--trace``):

- ``check_host_nulls``: a worker's, rank's and pool's ``host`` is ``null`` exactly when its
  cache has no ``host`` member; without any host pool every request has
  ``host_reused_prompt_tokens`` 0 and ``load_wait_us`` ``null``, ``summary.kv_cache`` has
  ``host_reused_prompt_tokens`` 0, ``host_reuse_ratio`` 0 (or ``null``), ``gpu_reuse_ratio``
  equal to ``prefix_reuse_ratio`` and ``host`` ``null``; ``host_transfers`` is ``null`` exactly
  when ``trace`` is (R140, R141);
- ``check_host_pool_bound``: a rank's host pool never holds more than ``blocks`` entries. Entries
  leave a pool only by host eviction, which replaces one entry by another and only in a full
  pool, so the count never decreases and its last value is ``stored_blocks - evictions``: it is
  at most ``blocks``, and exactly ``blocks`` once an eviction or a skip happened (R129, R131);
- ``check_host_sums``: a worker's ``host`` counters are its ranks' sums, a pool's its workers',
  ``summary.kv_cache.host`` the workers'; every ``*_gigabytes`` is R24 of its blocks times
  ``block_bytes`` over 10^9, never a sum of rounded values (R140);
- ``check_reuse_tiers``: per request ``0 <= host_reused_prompt_tokens <= reused_prompt_tokens``,
  a multiple of B, 0 when not admitted; per rank ``host.reused_tokens`` is a multiple of B, at
  most ``kv_cache.reused_tokens`` and at most ``loaded_blocks * B``, and equal to it without a
  stop time (every completed load joins the running list, R135); the summary's
  ``host_reused_prompt_tokens`` is the completed requests' sum and ``host_reuse_ratio`` and
  ``gpu_reuse_ratio`` are R24 of the host part and the GPU part (R137, R140);
- ``check_loads_need_gpu_evictions``: a host run starts after the GPU hit (R133), and an
  identity registered on a GPU leaves its registry only by an eviction (R47, R49), so a rank
  without GPU evictions never loads;
- ``check_load_wait`` (without the trace, its null-ness and 0 on a rank that never loaded):
  ``load_wait_us`` is ``null`` exactly when the request was never routed or none of its
  schedulers has a host pool (R140).

Checks that need ``--trace`` (``host_transfers``, and the trace's steps); each passes when
``host_transfers`` is ``null``:

- ``check_lanes``: ``host_transfers`` is in submission order; each (worker, rank, kind) lane is
  FIFO and never overlaps: ``start_us = max(submitted_us, previous end_us)`` and ``end_us -
  start_us = ceil(n * block_bytes * 10^6 / W)``; blocks in block order, a load's consecutive and
  within R133's cap; every transfer on a scheduler with a host pool, for a request routed there
  (R130, R131, R133, R140);
- ``check_transfer_counts``: each rank's ``stores``, ``stored_blocks``, ``loads`` and
  ``loaded_blocks`` are its transfers' (R140);
- ``check_pending_and_pinned``: a pending or pinned entry is never evicted, so a store of n
  blocks submitted while stores of P blocks are in flight and loads are reading (each of their
  entries pinned) finds room: ``n + P + (the largest load in flight) <= blocks``; a load reads
  n resident entries: ``n + P <= blocks`` and n at most the blocks of the stores completed by
  its submission (R129, R131, R132, R134);
- ``check_loads_before_use``: a request joins the running list only after its load completed
  (R134, R135): no step of its scheduler holding it (to compute or as a victim) starts while a
  load of it is in flight, its first-scheduled time is not before the end of a load submitted
  before it, a completed request completes after each of its loads, and a load ending at or
  after the stop time leaves its request cut off (R139);
- ``check_load_wait`` (with the trace): ``load_wait_us`` is the sum of its loads' ``end_us -
  submitted_us`` over those that completed (at or before the stop time, R139), and
  ``check_reuse_tiers`` (with the trace): ``host_reused_prompt_tokens`` is the host run of its
  first admission (its first load's blocks times B when that load came before its first-scheduled
  time, else 0).

A property no check here can hold, since a pinned entry, an identity or a recency number is not
in the report: that the host LRU picks the entry R132 says. And R127's "no block outside a
continuing pair" is a differential property (``tests/test_host_invariants.py``): a workload whose
sessions continue nowhere gives the same report with ``session_prompts_extend`` as without it.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence

from servesim_conformance.violations import Document, require

#: R140: the counters of a ``host`` object, and those summed as integers.
COUNTERS = (
    "stores",
    "stored_blocks",
    "loads",
    "loaded_blocks",
    "reused_tokens",
    "evictions",
    "skipped_blocks",
)
#: R140: each kind of transfer's count and blocks in a ``host`` object.
MEMBERS = {"store": ("stores", "stored_blocks"), "load": ("loads", "loaded_blocks")}
#: R140: gigabytes are bytes over 10^9 (R24 quotients).
GIGA = 10**9
#: R6: the largest time a report holds.
MAX_TIME = 2**53 - 1

Scheduler = tuple[int, int]


# --- Reading the scenario -----------------------------------------------------------------------


def pool_caches(scenario: Document) -> dict[str, Document | None]:
    """R77: each pool's cache (its own ``kv_cache``, else the scenario's; None without one); a
    fleet of ``fleet.workers`` is the pool ``"default"``."""
    top: Document | None = scenario.get("kv_cache")
    fleet = scenario["fleet"]
    if "pools" not in fleet:
        return {"default": top}
    return {pool["name"]: pool.get("kv_cache", top) for pool in fleet["pools"]}


def host_pools(scenario: Document) -> dict[str, Document | None]:
    """R129: each pool's cache's ``host`` (None when it has none)."""
    return {
        name: None if cache is None else cache.get("host")
        for name, cache in pool_caches(scenario).items()
    }


def block_tokens(scenario: Document) -> dict[str, int]:
    """R45: each pool's B (1 without a cache, where nothing here reads it)."""
    return {
        name: 1 if cache is None else int(cache["block_tokens"])
        for name, cache in pool_caches(scenario).items()
    }


def block_bytes(scenario: Document) -> dict[str, int]:
    """R129: each host pool's ``block_bytes = B * bytes_per_token`` (0 without a host pool)."""
    tokens = block_tokens(scenario)
    return {
        name: 0 if host is None else tokens[name] * int(host["bytes_per_token"])
        for name, host in host_pools(scenario).items()
    }


def has_host(scenario: Document) -> bool:
    """Whether any pool's cache has a host pool."""
    return any(host is not None for host in host_pools(scenario).values())


def stop_of(scenario: Document) -> int | None:
    """R62: the stop time D, None without one."""
    stop: int | None = scenario.get("stop_at_us")
    return stop


def lane_time(blocks: int, size: int, rate: int) -> int:
    """R130: ``ceil(n * block_bytes * 10^6 / W)`` in exact integers."""
    return -(-(blocks * size * 1_000_000) // rate)


# --- Reading the report -------------------------------------------------------------------------


def ranks(report: Document) -> Iterator[tuple[str, Document, Document]]:
    """Every rank: its pointer, its worker and the rank entry."""
    for position, worker in enumerate(report["workers"]):
        for index, rank in enumerate(worker["ranks"]):
            yield f"/workers/{position}/ranks/{index}", worker, rank


def schedulers_of(request: Document) -> list[Scheduler]:
    """R140: the schedulers a request was routed to: its worker's rank and, in a disaggregated
    fleet, its decode scheduler (``handoff``); [] when never routed."""
    if request["worker"] is None:
        return []
    result = [(int(request["worker"]), int(request["rank"]))]
    handoff = request.get("handoff")
    if handoff is not None and handoff.get("decode_worker") is not None:
        result.append((int(handoff["decode_worker"]), int(handoff["decode_rank"])))
    return result


def pool_of_worker(report: Document) -> dict[int, str]:
    """Each worker's pool (R77)."""
    return {position: worker["pool"] for position, worker in enumerate(report["workers"])}


def transfers(report: Document) -> list[Document] | None:
    """R140: ``host_transfers`` (None without the trace)."""
    listed: list[Document] | None = report.get("host_transfers")
    return listed


def transfers_by_request(report: Document) -> dict[str, list[Document]]:
    """Each request's host transfers, in submission order."""
    result: dict[str, list[Document]] = defaultdict(list)
    for transfer in transfers(report) or []:
        result[transfer["request"]].append(transfer)
    return result


def _quotient(value: object, numerator: int, denominator: int, where: str, rule: str) -> None:
    """R24: ``numerator / denominator`` correctly rounded (Python's int division is), or None
    for a zero denominator."""
    expected = None if denominator == 0 else numerator / denominator
    require(
        value == expected and (value is None) == (expected is None),
        rule,
        f"{where}: {value}, expected {expected}",
    )


# --- Nulls without a host pool (R140, R141) -----------------------------------------------------


def check_host_nulls(scenario: Document, report: Document) -> None:
    """R140, R141: ``host`` is null exactly where the cache has none; without any host pool
    every host member is null or 0 as R141's migration writes it; ``host_transfers`` is null
    exactly when the trace is."""
    hosts = host_pools(scenario)
    for position, worker in enumerate(report["workers"]):
        expect_host = hosts[worker["pool"]] is not None
        where = f"/workers/{position}"
        for pointer, entry in [(where, worker)] + [
            (f"{where}/ranks/{index}", rank) for index, rank in enumerate(worker["ranks"])
        ]:
            require(
                (entry["host"] is not None) == expect_host,
                "R140",
                f"{pointer}/host: {entry['host']!r}, but the pool's cache "
                f"{'has' if expect_host else 'has no'} host pool",
            )
    for position, pool in enumerate(report["pools"]):
        expect_host = hosts[pool["name"]] is not None
        require(
            (pool["host"] is not None) == expect_host,
            "R140",
            f"/pools/{position}/host: {pool['host']!r}, but its cache "
            f"{'has' if expect_host else 'has no'} host pool",
        )
    listed, trace = transfers(report), report.get("trace")
    require(
        (listed is None) == (trace is None),
        "R140",
        f"/host_transfers: {'null' if listed is None else 'a list'} while the trace is "
        f"{'null' if trace is None else 'asked for'}",
    )
    kv = report["summary"]["kv_cache"]
    if kv is not None:
        require(
            (kv["host"] is not None) == has_host(scenario),
            "R140",
            f"/summary/kv_cache/host: {kv['host']!r}",
        )
    if has_host(scenario):
        return
    for position, request in enumerate(report["requests"]):
        where = f"/requests/{position}"
        require(
            request["host_reused_prompt_tokens"] == 0,
            "R141",
            f"{where}/host_reused_prompt_tokens: {request['host_reused_prompt_tokens']} "
            "without a host pool",
        )
        require(
            request["load_wait_us"] is None,
            "R141",
            f"{where}/load_wait_us: {request['load_wait_us']} without a host pool",
        )
    require(listed is None or listed == [], "R141", "/host_transfers: not [] without a host pool")
    if kv is not None:
        prompt = report["summary"]["prompt_tokens"]
        require(
            kv["host_reused_prompt_tokens"] == 0,
            "R141",
            f"/summary/kv_cache/host_reused_prompt_tokens: {kv['host_reused_prompt_tokens']}",
        )
        _quotient(kv["host_reuse_ratio"], 0, prompt, "/summary/kv_cache/host_reuse_ratio", "R141")
        require(
            kv["gpu_reuse_ratio"] == kv["prefix_reuse_ratio"],
            "R141",
            f"/summary/kv_cache/gpu_reuse_ratio: {kv['gpu_reuse_ratio']}, prefix_reuse_ratio "
            f"{kv['prefix_reuse_ratio']}",
        )


# --- The pool's size (R129, R131) ---------------------------------------------------------------


def check_host_pool_bound(scenario: Document, report: Document) -> None:
    """R129, R131: entries (pending and resident) never exceed ``blocks``. Each store's block
    takes a free entry or evicts one (one for one, only when the pool is full), and nothing
    else removes an entry, so the count only grows and ends at ``stored_blocks - evictions``:
    at most ``blocks``, and exactly ``blocks`` after an eviction or a skipped block."""
    hosts = host_pools(scenario)
    for where, worker, rank in ranks(report):
        host, config = rank["host"], hosts[worker["pool"]]
        if host is None or config is None:
            continue
        size = int(config["blocks"])
        entries = host["stored_blocks"] - host["evictions"]
        require(
            0 <= entries <= size,
            "R129",
            f"{where}/host: {host['stored_blocks']} blocks stored and {host['evictions']} "
            f"evictions leave {entries} entries in a pool of {size}",
        )
        if host["evictions"] or host["skipped_blocks"]:
            require(
                entries == size,
                "R131",
                f"{where}/host: {host['evictions']} evictions and {host['skipped_blocks']} "
                f"skipped blocks, but the pool of {size} was never full ({entries} entries)",
            )


# --- Sums and gigabytes (R140) ------------------------------------------------------------------


def _require_host_object(
    host: Document, parts: Sequence[Document], size: int, where: str, what: str
) -> None:
    """``host``'s counters are the sums of ``parts``' (when given) and its gigabytes R24 of its
    blocks times ``size`` over 10^9."""
    if parts:
        for member in COUNTERS:
            total = sum(part[member] for part in parts)
            require(
                host[member] == total,
                "R140",
                f"{where}/{member}: {host[member]}, {what} give {total}",
            )
    for blocks, member in (
        ("stored_blocks", "stored_gigabytes"),
        ("loaded_blocks", "loaded_gigabytes"),
    ):
        _quotient(host[member], host[blocks] * size, GIGA, f"{where}/{member}", "R140")


def check_host_sums(scenario: Document, report: Document) -> None:
    """R140: a worker's counters are its ranks' sums, a pool's its workers', the summary's its
    workers' (those with a host pool); every gigabytes member is R24 of its blocks times
    ``block_bytes`` (per pool) over 10^9."""
    sizes = block_bytes(scenario)
    for where, worker, rank in ranks(report):
        if rank["host"] is not None:
            _require_host_object(rank["host"], [], sizes[worker["pool"]], f"{where}/host", "")
    for position, worker in enumerate(report["workers"]):
        if worker["host"] is None:
            continue
        parts = [rank["host"] for rank in worker["ranks"] if rank["host"] is not None]
        where = f"/workers/{position}/host"
        _require_host_object(worker["host"], parts, sizes[worker["pool"]], where, "its ranks")
    for position, pool in enumerate(report["pools"]):
        if pool["host"] is None:
            continue
        own = [
            w["host"]
            for w in report["workers"]
            if w["pool"] == pool["name"] and w["host"] is not None
        ]
        where = f"/pools/{position}/host"
        _require_host_object(pool["host"], own, sizes[pool["name"]], where, "its workers")
    kv = report["summary"]["kv_cache"]
    if kv is None or kv["host"] is None:
        return
    hosted = [w for w in report["workers"] if w["host"] is not None]
    summary = kv["host"]
    for member in COUNTERS:
        total = sum(w["host"][member] for w in hosted)
        require(
            summary[member] == total,
            "R140",
            f"/summary/kv_cache/host/{member}: {summary[member]}, the workers give {total}",
        )
    for blocks, member in (
        ("stored_blocks", "stored_gigabytes"),
        ("loaded_blocks", "loaded_gigabytes"),
    ):
        total_bytes = sum(w["host"][blocks] * sizes[w["pool"]] for w in hosted)
        _quotient(summary[member], total_bytes, GIGA, f"/summary/kv_cache/host/{member}", "R140")


# --- Reuse per tier (R137, R140) ----------------------------------------------------------------


def check_reuse_tiers(scenario: Document, report: Document) -> None:
    """R137, R140: the host part of each reuse is whole blocks and within the total; per rank
    the host part of every admission is at most, and without a stop time exactly, the blocks
    loaded; the summary sums the completed requests' host parts and gives both tiers' ratios.
    With the trace a request's host part is its first admission's load (if it had one)."""
    tokens = block_tokens(scenario)
    pools = pool_of_worker(report)
    stop = stop_of(scenario)
    loads = transfers_by_request(report)
    listed = transfers(report) is not None
    for position, request in enumerate(report["requests"]):
        where = f"/requests/{position}"
        host, total = request["host_reused_prompt_tokens"], request["reused_prompt_tokens"]
        require(
            0 <= host <= total,
            "R137",
            f"{where}/host_reused_prompt_tokens: {host}, reused_prompt_tokens {total}",
        )
        if request["worker"] is None or request["first_scheduled_us"] is None:
            require(host == 0, "R140", f"{where}/host_reused_prompt_tokens: {host}, not admitted")
            continue
        size = tokens[pools[int(request["worker"])]]
        require(host % size == 0, "R137", f"{where}/host_reused_prompt_tokens: {host}, B {size}")
        if listed:
            own = [t for t in loads.get(request["id"], []) if t["kind"] == "load"]
            first = own[0] if own else None
            expected = 0
            if first is not None and first["submitted_us"] < request["first_scheduled_us"]:
                expected = len(first["blocks"]) * size
            require(
                host == expected,
                "R137",
                f"{where}/host_reused_prompt_tokens: {host}, its first admission's load gives "
                f"{expected}",
            )
    for where, worker, rank in ranks(report):
        host = rank["host"]
        if host is None:
            continue
        size = tokens[worker["pool"]]
        reused, loaded = host["reused_tokens"], host["loaded_blocks"] * size
        require(
            reused % size == 0 and reused <= rank["kv_cache"]["reused_tokens"],
            "R137",
            f"{where}/host/reused_tokens: {reused}, kv_cache.reused_tokens "
            f"{rank['kv_cache']['reused_tokens']}, B {size}",
        )
        require(
            reused <= loaded and (stop is not None or reused == loaded),
            "R137",
            f"{where}/host/reused_tokens: {reused}, but its loads carried {loaded} tokens"
            + ("" if stop is not None else " and every load joins the running list (R135)"),
        )
    kv = report["summary"]["kv_cache"]
    if kv is None:
        return
    completed = [r for r in report["requests"] if r["outcome"] == "completed"]
    host_sum = sum(r["host_reused_prompt_tokens"] for r in completed)
    require(
        kv["host_reused_prompt_tokens"] == host_sum,
        "R140",
        f"/summary/kv_cache/host_reused_prompt_tokens: {kv['host_reused_prompt_tokens']}, the "
        f"completed requests give {host_sum}",
    )
    prompt = report["summary"]["prompt_tokens"]
    _quotient(
        kv["host_reuse_ratio"], host_sum, prompt, "/summary/kv_cache/host_reuse_ratio", "R140"
    )
    gpu = kv["reused_prompt_tokens"] - host_sum
    _quotient(kv["gpu_reuse_ratio"], gpu, prompt, "/summary/kv_cache/gpu_reuse_ratio", "R140")


def check_loads_need_gpu_evictions(scenario: Document, report: Document) -> None:
    """R133 with R47 and R49: a host run begins at the first block that is no GPU hit, whose
    identity has a resident entry and so was registered on this rank's GPU once; without a GPU
    eviction it would still be registered there, and a hit. So a rank that never evicted never
    loads."""
    del scenario
    for where, _, rank in ranks(report):
        host = rank["host"]
        if host is None or rank["kv_cache"] is None:
            continue
        require(
            host["loads"] == 0 or rank["kv_cache"]["evictions"] > 0,
            "R133",
            f"{where}/host/loads: {host['loads']} on a rank whose GPU cache evicted nothing",
        )


# --- Lanes (R130) and the transfer list (R140) --------------------------------------------------


def check_lanes(scenario: Document, report: Document) -> None:
    """R130, R131, R133, R140: submission order; each lane FIFO and never overlapping, each
    transfer lasting R130's formula; blocks in block order (a load's consecutive, ending within
    the cap ``floor((L - 1) / B)``); each on a scheduler with a host pool, for a request routed
    to it."""
    listed = transfers(report)
    if listed is None:
        return
    hosts, sizes, tokens = host_pools(scenario), block_bytes(scenario), block_tokens(scenario)
    requests = {request["id"]: request for request in report["requests"]}
    workers = report["workers"]
    lane_end: dict[tuple[int, int, str], int] = {}
    previous = 0
    for position, transfer in enumerate(listed):
        where = f"/host_transfers/{position}"
        worker, rank, kind = int(transfer["worker"]), int(transfer["rank"]), transfer["kind"]
        submitted, start, end = transfer["submitted_us"], transfer["start_us"], transfer["end_us"]
        require(
            submitted >= previous,
            "R140",
            f"{where}/submitted_us: {submitted}, before the transfer listed before it ({previous})",
        )
        previous = submitted
        require(0 <= worker < len(workers), "R140", f"{where}/worker: {worker}")
        pool = workers[worker]["pool"]
        host = hosts[pool]
        require(host is not None, "R129", f"{where}: a transfer of pool {pool!r} without host")
        assert host is not None
        require(
            kind in ("store", "load") and 0 <= rank < len(workers[worker]["ranks"]),
            "R140",
            f"{where}: kind {kind!r}, rank {rank}",
        )
        request = requests.get(transfer["request"])
        require(
            request is not None and (worker, rank) in schedulers_of(request),
            "R140",
            f"{where}/request: {transfer['request']!r} was not routed to worker {worker} "
            f"rank {rank}",
        )
        assert request is not None
        blocks = transfer["blocks"]
        require(
            len(blocks) >= 1
            and blocks[0] >= 0
            and all(a < b for a, b in itertools.pairwise(blocks)),
            "R131",
            f"{where}/blocks: {blocks} are not in block order",
        )
        if kind == "load":
            size = tokens[pool]
            produced = request["output_tokens"]
            longest = request["prompt_tokens"] + produced
            if request["first_scheduled_us"] is None or submitted < request["first_scheduled_us"]:
                longest = request["prompt_tokens"]  # a first admission: L is the prompt
            require(
                blocks == list(range(blocks[0], blocks[0] + len(blocks)))
                and (blocks[-1] + 1) * size <= longest - 1,
                "R133",
                f"{where}/blocks: {blocks} are not a run of blocks within the cap "
                f"floor((L - 1) / {size}) for L at most {longest}",
            )
        rate = int(host["store_bytes_per_s" if kind == "store" else "load_bytes_per_s"])
        lane = (worker, rank, kind)
        expected_start = max(submitted, lane_end.get(lane, 0))
        require(
            start == expected_start,
            "R130",
            f"{where}/start_us: {start}, the {kind} lane of worker {worker} rank {rank} gives "
            f"max({submitted}, {lane_end.get(lane, 0)}) = {expected_start}",
        )
        duration = lane_time(len(blocks), sizes[pool], rate)
        require(
            end - start == duration and end <= MAX_TIME,
            "R130",
            f"{where}/end_us: {end}, {len(blocks)} blocks of {sizes[pool]} bytes at {rate} B/s "
            f"take {duration} us from {start}",
        )
        lane_end[lane] = end


def check_transfer_counts(scenario: Document, report: Document) -> None:
    """R140: each rank's ``stores``, ``stored_blocks``, ``loads`` and ``loaded_blocks`` are
    those of its transfers in ``host_transfers``."""
    del scenario
    listed = transfers(report)
    if listed is None:
        return
    counts: Counter[tuple[int, int, str]] = Counter()
    for transfer in listed:
        key = (int(transfer["worker"]), int(transfer["rank"]))
        count, blocks = MEMBERS.get(transfer["kind"], ("?", "?"))
        counts[(*key, count)] += 1
        counts[(*key, blocks)] += len(transfer["blocks"])
    for position, worker in enumerate(report["workers"]):
        for index, rank in enumerate(worker["ranks"]):
            where = f"/workers/{position}/ranks/{index}/host"
            host = rank["host"]
            for member in ("stores", "stored_blocks", "loads", "loaded_blocks"):
                listed_count = counts[(position, int(rank["rank"]), member)]
                value = 0 if host is None else host[member]
                require(
                    value == listed_count,
                    "R140",
                    f"{where}/{member}: {value}, host_transfers give {listed_count}",
                )


# --- Pending and pinned entries (R131, R132) ----------------------------------------------------


def check_pending_and_pinned(scenario: Document, report: Document) -> None:
    """R129, R131, R132, R134: at a transfer's submission the transfers listed before it on its
    scheduler that end later are in flight (a completion at that instant comes first, R136):
    their stores' entries are pending and their loads' entries pinned, and neither is evicted.
    A store's blocks take free entries or evict resident unpinned ones, so ``n + pending +
    pinned <= blocks``, with pinned at least the largest load in flight; a load reads n resident
    entries, so ``n + pending <= blocks``, and they were stored by stores completed by then."""
    listed = transfers(report)
    if listed is None:
        return
    hosts = host_pools(scenario)
    pools = pool_of_worker(report)
    for position, transfer in enumerate(listed):
        key = (transfer["worker"], transfer["rank"])
        host = hosts[pools[int(transfer["worker"])]]
        if host is None:
            continue  # check_lanes reports it
        size, at, n = int(host["blocks"]), transfer["submitted_us"], len(transfer["blocks"])
        before = [t for t in listed[:position] if (t["worker"], t["rank"]) == key]
        pending = sum(len(t["blocks"]) for t in before if t["kind"] == "store" and t["end_us"] > at)
        reading = [len(t["blocks"]) for t in before if t["kind"] == "load" and t["end_us"] > at]
        pinned = max(reading, default=0)
        where = f"/host_transfers/{position}"
        if transfer["kind"] == "store":
            require(
                n + pending + pinned <= size,
                "R131",
                f"{where}: a store of {n} blocks at {at} in a pool of {size} with {pending} "
                f"entries pending and at least {pinned} pinned would evict one of them",
            )
        else:
            stored = sum(
                len(t["blocks"]) for t in before if t["kind"] == "store" and t["end_us"] <= at
            )
            require(
                n + pending <= size and n <= stored,
                "R132",
                f"{where}: a load of {n} blocks at {at} in a pool of {size} with {pending} "
                f"entries pending and {stored} blocks stored by then",
            )


# --- Loads complete before their blocks are used (R134, R135, R139) -----------------------------


def _holds(step: Document, request: str) -> bool:
    """Whether a traced step computes for ``request`` or preempted it."""
    return (
        request in step["decode_requests"]
        or any(entry["id"] == request for entry in step["prefill"])
        or request in step["preempted"]
    )


def check_loads_before_use(scenario: Document, report: Document) -> None:
    """R134, R135, R139: a loading request is neither running nor a victim: no traced step of
    its scheduler holding it starts in ``[submitted_us, end_us)`` of one of its loads; it joins
    the running list at a step formed at or after the load's end, so its first-scheduled time
    is not before the end of a load submitted before it, and a completed request completes after
    each of its loads; a load ending at or after the stop time leaves its request cut off (no
    step starts at D)."""
    listed = transfers(report)
    if listed is None:
        return
    stop = stop_of(scenario)
    requests = {request["id"]: (i, request) for i, request in enumerate(report["requests"])}
    steps: dict[Scheduler, list[Document]] = defaultdict(list)
    for step in report["trace"] or []:
        steps[(int(step["worker"]), int(step["rank"]))].append(step)
    for position, transfer in enumerate(listed):
        if transfer["kind"] != "load" or transfer["request"] not in requests:
            continue
        index, request = requests[transfer["request"]]
        rid, where = request["id"], f"/host_transfers/{position}"
        submitted, end = transfer["submitted_us"], transfer["end_us"]
        for step in steps[(int(transfer["worker"]), int(transfer["rank"]))]:
            require(
                not (submitted <= step["start_us"] < end and _holds(step, rid)),
                "R134",
                f"{where}: the step at {step['start_us']} of worker {step['worker']} holds "
                f"{rid!r} while its load runs until {end}",
            )
        first = request["first_scheduled_us"]
        if first is not None and submitted < first:
            require(
                first >= end,
                "R135",
                f"/requests/{index}/first_scheduled_us: {first}, before its load ends at {end}",
            )
        if request["outcome"] == "completed":
            require(
                request["completion_us"] > end,
                "R135",
                f"/requests/{index}/completion_us: {request['completion_us']}, not after its "
                f"load's end {end}",
            )
        if stop is not None and end >= stop:
            require(
                request["outcome"] == "cut_off",
                "R139",
                f"/requests/{index}/outcome: {request['outcome']!r}, but its load ends at {end}, "
                f"at or after the stop time {stop}",
            )


# --- load_wait_us (R140) ------------------------------------------------------------------------


def check_load_wait(scenario: Document, report: Document) -> None:
    """R140, R139: ``load_wait_us`` is null exactly when the request was never routed or no
    scheduler it was routed to has a host pool; otherwise (with the trace) the sum of
    ``end_us - submitted_us`` over its loads that completed (at or before the stop time), and
    (without it) 0 when none of its schedulers loaded anything."""
    hosts = host_pools(scenario)
    pools = pool_of_worker(report)
    stop = stop_of(scenario)
    by_request = transfers_by_request(report)
    listed = transfers(report) is not None
    loaded: dict[Scheduler, int] = {}
    for position, worker in enumerate(report["workers"]):
        for rank in worker["ranks"]:
            host = rank["host"]
            loaded[(position, int(rank["rank"]))] = 0 if host is None else int(host["loads"])
    for position, request in enumerate(report["requests"]):
        where = f"/requests/{position}/load_wait_us"
        wait = request["load_wait_us"]
        own = schedulers_of(request)
        hosted = [s for s in own if hosts[pools[s[0]]] is not None]
        if not hosted:
            require(
                wait is None,
                "R140",
                f"{where}: {wait}, but no scheduler it was routed to has a host pool",
            )
            continue
        require(
            isinstance(wait, int) and wait >= 0,
            "R140",
            f"{where}: {wait!r}, but it was routed to a scheduler with a host pool",
        )
        if listed:
            expected = sum(
                t["end_us"] - t["submitted_us"]
                for t in by_request.get(request["id"], [])
                if t["kind"] == "load" and (stop is None or t["end_us"] <= stop)
            )
            require(
                wait == expected, "R140", f"{where}: {wait}, its completed loads give {expected}"
            )
        elif all(loaded.get(s, 0) == 0 for s in hosted):
            require(wait == 0, "R140", f"{where}: {wait}, but its schedulers never loaded")


# --- Everything ---------------------------------------------------------------------------------


def check_host_report(scenario: Document, report: Document) -> None:
    """Every invariant above, for a report 10.0 (of a scenario with or without a host pool)."""
    check_host_nulls(scenario, report)
    check_host_pool_bound(scenario, report)
    check_host_sums(scenario, report)
    check_reuse_tiers(scenario, report)
    check_loads_need_gpu_evictions(scenario, report)
    check_lanes(scenario, report)
    check_transfer_counts(scenario, report)
    check_pending_and_pinned(scenario, report)
    check_loads_before_use(scenario, report)
    check_load_wait(scenario, report)
