"""What every report of a run with state-aware routing must show (SPEC.md section 12, R54-R57).

Each check reads only the inputs and the report, so it holds any implementation to the rules. A
router's view (R54) is rebuilt from the report: a request routed to w before r (in arrival
order, R8) is outstanding at r's routing exactly when its ``terminal_us`` is after r's arrival
(step completions at one instant come before its arrivals, R7, and every step lasts at least
1 us, R22, so nothing routed at r's instant has completed). That gives ``outstanding(w)`` and
``load_blocks(w)`` exactly. ``cached(w, r)`` is reported only for the chosen worker; for the
others ``cached_bounds`` gives a range that follows from R47 alone, so ``"cache_aware"`` is
checked wherever that range decides the choice.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from servesim.engine.routing import SplitMix64
from servesim_conformance.kv_invariants import cache_of, identified_blocks
from servesim_conformance.violations import Document, require

STATE_AWARE = ("least_loaded", "cache_aware")


def policy_of(scenario: Document) -> str:
    policy: str = scenario["routing"]["policy"]
    return policy


def reports_cached_blocks(scenario: Document) -> bool:
    """R57: ``cached_blocks_at_routing`` is a number exactly for a state-aware policy with a
    cache whose prefix caching is on (and then for every accepted request)."""
    cache = cache_of(scenario)
    return policy_of(scenario) in STATE_AWARE and cache is not None and cache["prefix_caching"]


def seeded_draws(scenario: Document) -> Iterator[int] | None:
    """R58: with ``routing.seed`` a state-aware policy takes one SplitMix64 draw (R14) per
    routed request, in arrival order; None without a seed (ties go to the lowest index). The
    generator is the reference's, which tests/test_routing.py pins to R14's test vectors."""
    seed = scenario["routing"].get("seed")
    if seed is None:
        return None
    return iter(SplitMix64(seed).next, None)


def weights(scenario: Document) -> tuple[int, int]:
    """R56: ``(prefill_weight, load_weight)``, each 1 when absent."""
    routing = scenario["routing"]
    return routing.get("prefill_weight", 1), routing.get("load_weight", 1)


@dataclass
class Routed:
    """An accepted request as the report shows it, with what R54 lets a check derive."""

    request: Document
    entry: Document
    identified: int
    prompt_blocks: int = 0
    """``ceil(prompt_tokens / B)`` with a cache (R54's ``load_blocks`` adds these up)."""


def routed_in_arrival_order(
    scenario: Document, workload: Document, report: Document
) -> list[Routed]:
    """The accepted requests (those with a worker) in R8's order: by arrival, then list order;
    the report lists them in workload order (R26). The arrival is the report's, the time the
    request actually arrived (a session's later turn or a closed loop's release, R59 to R61),
    and at one instant arrivals go in workload order (R60)."""
    cache = cache_of(scenario)
    block_tokens = cache["block_tokens"] if cache else 0
    pairs = zip(workload["requests"], report["requests"], strict=True)
    routed = [
        Routed(
            request,
            entry,
            identified_blocks(request, scenario, workload),
            -(-request["prompt_tokens"] // block_tokens) if block_tokens else 0,
        )
        for request, entry in pairs
        if entry["worker"] is not None
    ]
    return sorted(routed, key=lambda item: item.entry["arrival_us"])


def shared_blocks(first: Routed, second: Routed, per_hash: int) -> int:
    """R47: how many leading blocks of the two requests are identified in both with equal
    identities. Block j's identity is j and the first ``floor(j / k) + 1`` hashes, so equal
    identities need the first ``m`` hashes to agree for ``j < k * m``."""
    hashes_a = first.request.get("prefix_hashes") or []
    hashes_b = second.request.get("prefix_hashes") or []
    agree = 0
    for a, b in zip(hashes_a, hashes_b, strict=False):
        if a != b:
            break
        agree += 1
    return min(first.identified, second.identified, per_hash * agree)


@dataclass
class Fleet:
    """The fleet as R54's router sees it, rebuilt from the report in arrival order."""

    workers: int
    per_hash: int
    evicting: frozenset[int]
    """Workers that evicted at some time (R52): their registry can shrink, so a block once
    registered there may be gone."""
    routed: list[list[Routed]] = field(init=False)
    """Per worker, the requests routed to it so far, in arrival order."""

    def __post_init__(self) -> None:
        self.routed = [[] for _ in range(self.workers)]

    def cached_bounds(self, worker: int, request: Routed) -> tuple[int, int]:
        """The least and most ``cached(worker, request)`` can be at its routing (R54).

        Most: a block is registered at a worker only by a request there that filled it (R47),
        routed there before and admitted before this arrival (a step that ended by now started
        before it, R22); so each of the request's cached blocks is shared with such a request.
        Least: once a request's first token is out its every identified prompt block has been
        filled or hit, so is registered (R47, R48, R51); on a worker that never evicts, nothing
        leaves its registry (R49), so those blocks are all still there.
        """
        arrival = request.entry["arrival_us"]
        most = least = 0
        for earlier in self.routed[worker]:
            scheduled, first_token = (
                earlier.entry["first_scheduled_us"],
                earlier.entry["first_token_us"],
            )
            if scheduled is None or scheduled >= arrival:
                continue
            shared = shared_blocks(earlier, request, self.per_hash)
            most = max(most, shared)
            if worker not in self.evicting and first_token is not None and first_token <= arrival:
                least = max(least, shared)
        return least, most


def _fleet(scenario: Document, workload: Document, report: Document) -> Fleet:
    cache = cache_of(scenario)
    per_hash = 1
    if cache is not None and workload.get("prefix_hash_block_tokens"):
        per_hash = workload["prefix_hash_block_tokens"] // cache["block_tokens"]
    evicting = frozenset(
        worker["worker"]
        for worker in report["workers"]
        if worker["kv_cache"] is not None and worker["kv_cache"]["evictions"] > 0
    )
    return Fleet(scenario["fleet"]["workers"], per_hash, evicting)


def check_cached_blocks_reported(scenario: Document, workload: Document, report: Document) -> None:
    """R57: ``cached_blocks_at_routing`` is null for a rejected request, another policy or no
    prefix caching; otherwise an integer from 0 to the request's identified blocks (R54's
    ``cached(w, r)`` counts identified blocks only, R47: at most ``floor(prompt_tokens / B)``
    and at most k times its number of hashes)."""
    numbered = reports_cached_blocks(scenario)
    for request, entry in zip(workload["requests"], report["requests"], strict=True):
        rid = entry["id"]
        require("cached_blocks_at_routing" in entry, "R57", f"{rid}: no cached_blocks_at_routing")
        cached = entry["cached_blocks_at_routing"]
        if not numbered or entry["worker"] is None:
            require(cached is None, "R57", f"{rid}: cached_blocks_at_routing {cached}, not null")
            continue
        require(
            isinstance(cached, int) and not isinstance(cached, bool),
            "R57",
            f"{rid}: cached_blocks_at_routing is {cached!r}, not a number",
        )
        identified = identified_blocks(request, scenario, workload)
        require(
            0 <= cached <= identified,
            "R54",
            f"{rid}: {cached} blocks cached at routing, {identified} identified (R47)",
        )


class Ends:
    """The routed requests that have not completed, as the arrivals go by in arrival order
    (R54): a request routed before r is outstanding at r's routing exactly when its
    ``terminal_us`` is after r's arrival, and arrivals only move forward, so a request that has
    stopped being outstanding never is again. A heap of terminal times lets each check drop
    every request once, instead of scanning every worker's requests at every arrival."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int]] = []

    def push(self, item: Routed, worker: int) -> None:
        """``item`` was routed to ``worker``; it is outstanding until its ``terminal_us``."""
        heapq.heappush(self._heap, (item.entry["terminal_us"], worker, item.prompt_blocks))

    def until(self, now: int) -> Iterator[tuple[int, int]]:
        """``(worker, prompt_blocks)`` of each request that is no longer outstanding at
        ``now`` (its ``terminal_us`` is ``now`` or before), each once."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, worker, blocks = heapq.heappop(heap)
            yield worker, blocks


class FewestOutstanding:
    """``outstanding(w)`` for every worker, with the fewest and the workers that have them.

    A segment tree over the workers: each node holds the least count below it and how many
    workers have it, so that a change, the least count, the number t of tied workers and the
    i-th of them in index order (R58's ``w_(z mod t)``) each take O(log workers) steps.
    """

    def __init__(self, workers: int) -> None:
        size = 1
        while size < workers:
            size *= 2
        self.workers = workers
        self._size = size
        padding = 1 << 62  # beyond any count: a padding leaf never holds the least count
        self._least = [0] * size + [0] * workers + [padding] * (size - workers)
        self._ties = [0] * size + [1] * size
        for node in range(size - 1, 0, -1):
            self._combine(node)

    def _combine(self, node: int) -> None:
        least, ties = self._least, self._ties
        left, right = 2 * node, 2 * node + 1
        if least[left] < least[right]:
            least[node], ties[node] = least[left], ties[left]
        elif least[right] < least[left]:
            least[node], ties[node] = least[right], ties[right]
        else:
            least[node], ties[node] = least[left], ties[left] + ties[right]

    def add(self, worker: int, delta: int) -> None:
        """``outstanding(worker)`` changes by ``delta``."""
        node = self._size + worker
        self._least[node] += delta
        node //= 2
        while node:
            self._combine(node)
            node //= 2

    def tied(self) -> int:
        """How many workers have the fewest outstanding requests."""
        return self._ties[1]

    def tied_worker(self, rank: int) -> int:
        """The ``rank``-th (from 0) worker, in index order, of those with the fewest."""
        least, ties = self._least, self._ties
        fewest, node = least[1], 1
        while node < self._size:
            left = 2 * node
            if least[left] == fewest and rank < ties[left]:
                node = left
                continue
            if least[left] == fewest:
                rank -= ties[left]
            node = left + 1
        return node - self._size

    def counts(self) -> list[int]:
        """Every worker's ``outstanding(w)``, in index order."""
        return self._least[self._size : self._size + self.workers]


def check_least_loaded(scenario: Document, workload: Document, report: Document) -> None:
    """R54, R55, R58: each accepted request joins a worker of fewest outstanding requests at its
    arrival: the lowest-index one, or with a seed the tied worker its draw picks.

    The counts are kept as the arrivals go by (``Ends``, ``FewestOutstanding``), so the check
    takes O((requests + workers) log workers) steps, not O(requests * workers)."""
    if policy_of(scenario) != "least_loaded":
        return
    fewest = FewestOutstanding(scenario["fleet"]["workers"])
    ends = Ends()
    draws = seeded_draws(scenario)
    for item in routed_in_arrival_order(scenario, workload, report):
        now, chosen = item.entry["arrival_us"], item.entry["worker"]
        for worker, _ in ends.until(now):
            fewest.add(worker, -1)
        rank = 0 if draws is None else next(draws) % fewest.tied()
        expected = fewest.tied_worker(rank)
        if chosen != expected:  # every count is listed only when the check fails
            require(
                False,
                "R55",
                f"{item.entry['id']} at {now}: joined worker {chosen}, outstanding "
                f"{fewest.counts()} (worker {expected})",
            )
        fewest.add(chosen, 1)
        ends.push(item, chosen)


def check_cached_blocks_at_routing(
    scenario: Document, workload: Document, report: Document
) -> None:
    """R54, R57 (and R48): the reported ``cached(w, r)`` lies within ``Fleet.cached_bounds``
    for its worker (so the first request routed to a worker, on an empty fleet in particular,
    has 0); and on a worker that never evicts, the blocks cached at routing are all still
    registered at the first admission, so the request reuses at least
    ``min(cached, floor((prompt - 1) / B))`` blocks (R48)."""
    if not reports_cached_blocks(scenario):
        return
    block_tokens = scenario["kv_cache"]["block_tokens"]
    fleet = _fleet(scenario, workload, report)
    for item in routed_in_arrival_order(scenario, workload, report):
        rid, chosen = item.entry["id"], item.entry["worker"]
        cached = item.entry["cached_blocks_at_routing"]
        least, most = fleet.cached_bounds(chosen, item)
        require(
            least <= cached <= most,
            "R54",
            f"{rid}: {cached} blocks cached at routing on worker {chosen}; the requests routed "
            f"there before say {least} to {most}",
        )
        if chosen not in fleet.evicting and item.entry["outcome"] == "completed":
            floor = min(cached, (item.request["prompt_tokens"] - 1) // block_tokens)
            reused = item.entry["reused_prompt_tokens"]
            require(
                reused >= floor * block_tokens,
                "R48",
                f"{rid}: {cached} blocks cached at routing, then reused only {reused} tokens "
                "on a worker that never evicts",
            )
        fleet.routed[chosen].append(item)


def check_cache_aware(scenario: Document, workload: Document, report: Document) -> None:
    """R54, R56, R58: no worker certainly cheaper than the chosen one, nor (without a seed, when
    ties go to the lowest index) certainly as cheap with a lower index. The chosen worker's cost
    is exact (its cached blocks are reported, its load is rebuilt); another's lies between the
    costs ``Fleet.cached_bounds`` give. (With a seed the tied set is not known exactly, so the
    draw is not checked.)

    A worker no request was routed to before has no load and nothing cached (R54), so all such
    workers cost the same: they are judged together, and only the workers requests were routed
    to are judged one by one. Loads are kept as the arrivals go by (``Ends``). So the check
    takes O(workers + requests * requests routed before) steps, not O(requests * workers)."""
    if policy_of(scenario) != "cache_aware":
        return
    seeded = scenario["routing"].get("seed") is not None
    prefill_weight, load_weight = weights(scenario)
    fleet = _fleet(scenario, workload, report)
    loads: dict[int, int] = {}
    ends = Ends()
    untouched = _Untouched(fleet.workers)
    for item in routed_in_arrival_order(scenario, workload, report):
        now, chosen, rid = item.entry["arrival_us"], item.entry["worker"], item.entry["id"]
        for worker, blocks in ends.until(now):
            loads[worker] -= blocks
        prefill = item.prompt_blocks
        paid = prefill_weight * (prefill - item.entry["cached_blocks_at_routing"])
        paid += load_weight * loads.get(chosen, 0)

        suspects: list[tuple[int, int]] = []
        for worker in sorted(loads):  # the workers requests were routed to
            if worker == chosen:
                continue
            least, _ = fleet.cached_bounds(worker, item)
            most_cost = prefill_weight * (prefill - least) + load_weight * loads[worker]
            if _undercuts(worker, most_cost, chosen, paid, seeded=seeded):
                suspects.append((worker, most_cost))
                break
        fresh = prefill_weight * prefill  # any other worker: no load, nothing cached
        other = untouched.first(chosen)
        if other is not None and _undercuts(other, fresh, chosen, paid, seeded=seeded):
            suspects.append((other, fresh))
        if suspects:
            worker, most_cost = min(suspects)
            require(
                False,
                "R56",
                f"{rid} at {now}: joined worker {chosen} at cost {paid}, but worker {worker} "
                f"costs at most {most_cost}",
            )
        loads[chosen] = loads.get(chosen, 0) + item.prompt_blocks
        untouched.touch(chosen)
        fleet.routed[chosen].append(item)
        ends.push(item, chosen)


def _undercuts(worker: int, cost: int, chosen: int, paid: int, *, seeded: bool) -> bool:
    """R56, R58: whether ``worker``, costing at most ``cost``, shows wrong the choice of
    ``chosen`` at ``paid``: it is cheaper, or as cheap with a lower index when ties go to the
    lowest index (no seed)."""
    return not (cost > paid or (cost == paid and (seeded or worker > chosen)))


class _Untouched:
    """The workers no request has been routed to yet, lowest index first."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.touched: set[int] = set()
        self.lowest = 0
        """No worker below it is untouched."""

    def touch(self, worker: int) -> None:
        self.touched.add(worker)
        while self.lowest in self.touched:
            self.lowest += 1

    def first(self, besides: int) -> int | None:
        """The lowest-index untouched worker other than ``besides``, if any."""
        worker = self.lowest
        while worker < self.workers and (worker == besides or worker in self.touched):
            worker += 1
        return worker if worker < self.workers else None


def check_routing(scenario: Document, workload: Document, report: Document) -> None:
    """Every check of this module."""
    check_cached_blocks_reported(scenario, workload, report)
    check_least_loaded(scenario, workload, report)
    check_cached_blocks_at_routing(scenario, workload, report)
    check_cache_aware(scenario, workload, report)


__all__: Sequence[str] = (
    "check_cache_aware",
    "check_cached_blocks_at_routing",
    "check_cached_blocks_reported",
    "check_least_loaded",
    "check_routing",
)
