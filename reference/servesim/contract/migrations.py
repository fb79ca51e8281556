"""Upgrading documents from older schema versions to the current one (SPEC.md R2, versioning).

A migration is one small, pure function from a document at one version to the same document at
the next version: it never mutates its argument, reads nothing but its argument and gives the same
output for the same input. Upgrading across several versions is the chain of those steps, so each
step can be reviewed (and tested) on its own, and a version is never skipped.

``CHAIN`` holds the reference's steps: timing profile 1.0 to 1.1 (a relabel: 1.1 added the
measured kinds), scenario and workload 1.0 to 1.1 (relabels: 1.1 added the KV cache and prefix
hashes, SPEC.md R53), report 1.0 to 2.0 (the trace's step shapes and the calibration echo, SPEC.md
R25, R30), report 2.0 to 3.0 (the KV cache's members, R52, R53), scenario 1.1 to 1.2 (a relabel:
1.2 added the state-aware routing policies, R57), report 3.0 to 4.0 (each request's
``cached_blocks_at_routing``, R57), scenario 1.2 to 1.3 and workload 1.1 to 1.2 (relabels: they
added the closed loop, the stop time, the objectives and sessions, R64), report 4.0 to 5.0
(each request's ``session``, the summary's ``cut_off`` and ``tpot_us``, R64) and report 5.0 to
6.0 (the one pool ``"default"`` of one-rank workers, R85, R86), report 6.0 to 7.0 (the vLLM
style's values, R96), report 7.0 to 8.0 (an aggregated fleet's, R108), report 8.0 to 9.0 (a
fleet that never changes, R124), and scenario 1.3 to 1.4, 1.4 to 1.5, 1.5 to 1.6 and 1.6 to 1.7
(relabels: R86, R96, R108, R124). The test
fixtures in ``tests/evolution_fixtures/`` exercise the machinery further with made-up scenario
versions.

Problems are data (``InputProblem``, with a JSON pointer) like every other input problem, so the
command line reports them the way it reports an invalid document.
"""

from __future__ import annotations

import bisect
import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from servesim.contract.errors import InputProblem, InvalidInput
from servesim.contract.r24 import ratio
from servesim.contract.schemas import SUPPORTED_VERSIONS
from servesim.contract.tpot import tpot_sample, tpot_statistics

#: A migration step: a document at ``source`` in, a new document at ``target`` out.
Upgrade = Callable[[Mapping[str, Any]], dict[str, Any]]


#: A schema version (SPEC.md R2).
_VERSION = re.compile(r"[0-9]+\.[0-9]+")


def version_key(version: str) -> tuple[int, int]:
    """``"MAJOR.MINOR"`` as a pair that sorts numerically ("1.10" after "1.9")."""
    if _VERSION.fullmatch(version) is None:
        raise ValueError(f'{version!r} is not a "MAJOR.MINOR" version')
    major, _, minor = version.partition(".")
    return int(major), int(minor)


@dataclass(frozen=True)
class Migration:
    """One step of the chain: ``kind`` documents from ``source`` to ``target``.

    ``summary`` says what the step changes, in the words a pull-request reviewer needs ("renames
    scheduler.prefill.max_chunk_tokens to chunk_tokens"); the review quotes it.
    """

    kind: str
    source: str
    target: str
    summary: str
    upgrade: Upgrade

    def __post_init__(self) -> None:
        # A step that does not go up would let a chain loop; refuse it where it is written.
        if version_key(self.target) <= version_key(self.source):
            raise ValueError(f"a migration goes up: {self.source} -> {self.target} does not")

    def apply(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """The upgraded document; ``document`` is left untouched, whatever ``upgrade`` does.

        The deep copy is what makes every step pure even if its author wrote it with in-place
        edits: the caller's document is never shared with the result.
        """
        upgraded = self.upgrade(copy.deepcopy(dict(document)))
        upgraded["schema_version"] = self.target
        return upgraded


@dataclass(frozen=True)
class Migrated:
    """The outcome of ``MigrationChain.migrate``: the document and the steps that made it."""

    document: dict[str, Any]
    kind: str
    source: str
    target: str
    steps: tuple[Migration, ...]

    @property
    def changed(self) -> bool:
        """Whether any step ran (a document already at the target version is returned as is)."""
        return bool(self.steps)


@dataclass(frozen=True)
class MigrationChain:
    """Every migration step, and the current version of every kind (where ``migrate`` goes).

    A minor version reads the earlier minors of its major (the versioning policy), so their
    steps only relabel; a major version's step does the real work.
    """

    migrations: tuple[Migration, ...]
    current: Mapping[str, str]

    def sources(self, kind: str) -> tuple[str, ...]:
        """Every version of ``kind`` this chain can bring to the current version, oldest first."""
        target = self.current[kind]
        found = {target}
        grew = True
        while grew:
            grew = False
            for step in self.migrations:
                if step.kind == kind and step.target in found and step.source not in found:
                    found.add(step.source)
                    grew = True
        return tuple(sorted(found, key=version_key))

    def path(self, kind: str, source: str, target: str | None = None) -> tuple[Migration, ...]:
        """The steps from ``source`` to ``target`` (default: current), or ``InvalidInput``.

        Steps only go up, one version at a time, so the path, when there is one, is unique: the
        chain is a list per kind, not a graph to search.
        """
        goal = target if target is not None else self.current[kind]
        for version in (source, goal):
            if _VERSION.fullmatch(version) is None:
                raise InvalidInput(
                    [
                        InputProblem(
                            "", "/schema_version", f'{version!r} is not a "MAJOR.MINOR" version'
                        )
                    ]
                )
        steps: list[Migration] = []
        version = source
        while version != goal:
            following = [
                step for step in self.migrations if (step.kind, step.source) == (kind, version)
            ]
            if len(following) != 1 or version_key(version) > version_key(goal):
                raise InvalidInput(
                    [
                        InputProblem(
                            "",
                            "/schema_version",
                            f"no migration of {kind} documents from {source!r} to {goal!r}"
                            + (f" (the steps stop at {version!r})" if version != source else "")
                            + "; this servesim migrates from: "
                            + ", ".join(repr(each) for each in self.sources(kind)),
                        )
                    ]
                )
            steps.append(following[0])
            version = following[0].target
        return tuple(steps)

    def migrate(
        self, document: Mapping[str, Any], file: str = "", target: str | None = None
    ) -> Migrated:
        """``document`` upgraded to ``target`` (default: the current version of its kind).

        Only the header (R2) is checked here; whether the result is a valid document is for the
        caller to check with the target version's schema, because the chain does not know it.
        """
        kind = document.get("document")
        if not isinstance(kind, str) or kind not in self.current:
            raise InvalidInput(
                [
                    InputProblem(
                        file,
                        "/document",
                        f"{kind!r} is not a document kind; expected one of: "
                        + ", ".join(sorted(self.current)),
                    )
                ]
            )
        source = document.get("schema_version")
        if not isinstance(source, str):
            raise InvalidInput(
                [InputProblem(file, "/schema_version", 'missing; expected a "MAJOR.MINOR" string')]
            )
        try:
            steps = self.path(kind, source, target)
        except InvalidInput as error:
            raise InvalidInput(
                [InputProblem(file, problem.pointer, problem.message) for problem in error.problems]
            ) from None
        result = dict(document)
        try:
            for step in steps:
                result = step.apply(result)
        except InvalidInput as error:  # a step's own problem (R124's R6 bound): name the file
            raise InvalidInput(
                [InputProblem(file, problem.pointer, problem.message) for problem in error.problems]
            ) from None
        goal = target if target is not None else self.current[kind]
        return Migrated(document=result, kind=kind, source=source, target=goal, steps=steps)


def relabel(document: Mapping[str, Any]) -> dict[str, Any]:
    """The upgrade of a minor version: nothing changes but the version, which ``apply`` sets.

    A minor version only adds what old documents may leave out (the versioning policy), so an
    old document is already a valid new one once it says so.
    """
    return dict(document)


def report_1_0_to_2_0(report: Mapping[str, Any]) -> dict[str, Any]:
    """Report 1.0 to 2.0: echo ``calibration: null`` and give every trace entry its shape.

    Exact, not a guess: a 1.0 report comes from a 1.0 timing profile, which has no calibration
    (R25), and a step's context tokens (R22) are the prompt of each decoding request plus its
    tokens produced by the step's start, which the request's token times say (R26).
    """
    upgraded = dict(report)
    inputs = dict(upgraded["inputs"])
    inputs["timing_profile"] = {**inputs["timing_profile"], "calibration": None}
    upgraded["inputs"] = inputs
    if upgraded.get("trace") is not None:
        requests = {request["id"]: request for request in upgraded["requests"]}
        upgraded["trace"] = [
            {**entry, "shape": trace_entry_shape(entry, requests)} for entry in upgraded["trace"]
        ]
    return upgraded


def trace_entry_shape(entry: Mapping[str, Any], requests: Mapping[str, Any]) -> dict[str, int]:
    """R22's shape of a report's trace entry, from the report alone (``requests`` by id).

    A decoding request's context at the step's start is its prompt plus the tokens it produced
    by then: its token times up to the start (a token at the start came from an earlier step).
    """
    context = 0
    for request_id in entry["decode_requests"]:
        request = requests[request_id]
        produced = bisect.bisect_right(request["token_times_us"], entry["start_us"])
        context += request["prompt_tokens"] + produced
    return {
        "decode_requests": len(entry["decode_requests"]),
        "context_tokens": context,
        "prefill_tokens": entry["prefill_tokens"],
    }


def report_2_0_to_3_0(report: Mapping[str, Any]) -> dict[str, Any]:
    """Report 2.0 to 3.0 (R53): R52's KV-cache members, with their values without a cache.

    Exact, not a guess: a 2.0 report comes from a scenario without ``kv_cache`` (scenario 1.1
    and report 3.0 came together), where nothing is reused, preempted or evicted and no request
    is rejected for the cache.
    """
    upgraded = dict(report)
    upgraded["requests"] = [
        {**request, "reused_prompt_tokens": 0, "preemptions": 0} for request in report["requests"]
    ]
    summary = dict(report["summary"])
    summary["rejected_by_reason"] = {**summary["rejected_by_reason"], "exceeds_kv_cache": 0}
    summary["kv_cache"] = None
    upgraded["summary"] = summary
    upgraded["workers"] = [{**worker, "kv_cache": None} for worker in report["workers"]]
    if report.get("trace") is not None:
        upgraded["trace"] = [
            {**entry, "kv_blocks_in_use": None, "preempted": []} for entry in report["trace"]
        ]
    return upgraded


def report_3_0_to_4_0(report: Mapping[str, Any]) -> dict[str, Any]:
    """Report 3.0 to 4.0 (R57): every request's ``cached_blocks_at_routing``, which is null.

    Exact, not a guess: a 3.0 report comes from a scenario routed by ``"round_robin"`` or
    ``"random"`` (scenario 1.2 and report 4.0 came together), where R57 says the member is null.
    The member is put where the canonical writer puts it (R23: after ``arrival_us``), so a
    migrated report in canonical form keeps the order a 4.0 writer gives it.
    """
    upgraded = dict(report)
    upgraded["requests"] = [
        _with_cached_blocks_at_routing(request) for request in report["requests"]
    ]
    return upgraded


def _with_cached_blocks_at_routing(request: Mapping[str, Any]) -> dict[str, Any]:
    """``request`` with ``cached_blocks_at_routing: null`` right after ``arrival_us``.

    ``servesim migrate`` keeps the member order it read (R37), so the new member goes where the
    canonical order (R23) has it: after ``arrival_us`` when the request has it, else at the end.
    """
    if "arrival_us" not in request:
        return {**request, "cached_blocks_at_routing": None}
    upgraded: dict[str, Any] = {}
    for key, value in request.items():
        upgraded[key] = value
        if key == "arrival_us":
            upgraded["cached_blocks_at_routing"] = None
    return upgraded


def report_4_0_to_5_0(report: Mapping[str, Any]) -> dict[str, Any]:
    """Report 4.0 to 5.0 (R64): ``session: null`` per request, ``cut_off: 0`` and ``tpot_us``.

    Exact, not a guess: a 4.0 report comes from inputs without sessions, closed loop, stop time
    or objectives (scenario 1.3, workload 1.2 and report 5.0 came together), so no request has a
    session or is cut off, and there is no ``slo_met`` or ``goodput``. ``tpot_us`` (R63) is
    computed from what a 4.0 report holds of each completed request with at least two output
    tokens: ``first_token_us``, ``completion_us`` and ``output_tokens``. Nothing else changes:
    with every request arrived and none cut off, R64's ``first_arrival_us`` and ``makespan_us``
    are R28's. New members go where the canonical order (R23) has them, so a canonical 4.0
    report becomes a canonical 5.0 one.
    """
    upgraded = dict(report)
    upgraded["requests"] = [
        _with_member(request, "session", None) for request in report["requests"]
    ]
    samples = [
        tpot_sample(request["first_token_us"], request["completion_us"], request["output_tokens"])
        for request in report["requests"]
        if request["outcome"] == "completed" and request["output_tokens"] >= 2
    ]
    summary = _with_member(report["summary"], "cut_off", 0)
    upgraded["summary"] = _with_member(summary, "tpot_us", tpot_statistics(samples))
    return upgraded


#: The pool a report 5.0 comes from: R77's one pool of a scenario with ``fleet.workers``.
DEFAULT_POOL = "default"

#: R85's members of a worker that a rank entry repeats for the rank alone (with ``rank``).
_RANK_MEMBERS = (
    "routed",
    "completed",
    "steps",
    "busy_us",
    "utilization",
    "peak_running",
    "peak_waiting",
    "prefill_tokens",
    "decode_tokens",
    "output_tokens",
    "kv_cache",
)


def report_5_0_to_6_0(report: Mapping[str, Any]) -> dict[str, Any]:
    """Report 5.0 to 6.0 (R86): the report of one pool ``"default"`` of one-rank workers.

    Exact, not a guess: a 5.0 report comes from a scenario with ``fleet.workers`` and no
    ``dp_size`` (scenario 1.4 and report 6.0 came together), which R77 makes one pool named
    ``"default"`` whose workers have one rank each. A one-rank worker's rank is the worker
    (R78), so the rank's entry holds the worker's own members, a pass is one step whose own
    duration is the pass's (R83), every routed request joined rank 0, and the pool's entry is
    R85's sums over all workers and completed requests. New members go where the canonical
    order (R23) has them, so a canonical 5.0 report becomes a canonical 6.0 one.
    """
    upgraded = dict(report)
    inputs = dict(report["inputs"])
    profile = inputs["timing_profile"]
    inputs = _with_member(
        inputs,
        "timing_profiles",
        [
            {
                "calibration": profile["calibration"],
                "pool": DEFAULT_POOL,
                "sha256": profile["sha256"],
            }
        ],
    )
    upgraded["inputs"] = inputs
    upgraded["requests"] = [_request_6_0(request) for request in report["requests"]]
    upgraded["workers"] = [_worker_6_0(worker) for worker in report["workers"]]
    if report.get("trace") is not None:
        upgraded["trace"] = [_trace_entry_6_0(entry) for entry in report["trace"]]
    return _with_member(upgraded, "pools", [default_pool(report)])


def _request_6_0(request: Mapping[str, Any]) -> dict[str, Any]:
    """R86: ``pool`` ``"default"`` and ``rank`` 0, both null when ``worker`` is null."""
    routed = request["worker"] is not None
    with_pool = _with_member(request, "pool", DEFAULT_POOL if routed else None)
    return _with_member(with_pool, "rank", 0 if routed else None)


def _worker_6_0(worker: Mapping[str, Any]) -> dict[str, Any]:
    """R86: ``pool``, ``pool_worker`` (the worker's index: the pool holds every worker) and the
    one rank, whose members are the worker's own (R85: a worker's members are its ranks')."""
    rank = {"rank": 0, **{name: copy.deepcopy(worker[name]) for name in _RANK_MEMBERS}}
    upgraded = _with_member(worker, "pool", DEFAULT_POOL)
    upgraded = _with_member(upgraded, "pool_worker", worker["worker"])
    return _with_member(upgraded, "ranks", [dict(sorted(rank.items()))])


def _trace_entry_6_0(entry: Mapping[str, Any]) -> dict[str, Any]:
    """R86: ``rank`` 0 and ``duration_us`` = ``end_us - start_us`` (a pass of one step ends
    when its step does, and a cut step's ``end_us`` is the end it would have had, R62)."""
    upgraded = _with_member(entry, "rank", 0)
    return _with_member(upgraded, "duration_us", entry["end_us"] - entry["start_us"])


def default_pool(report: Mapping[str, Any]) -> dict[str, Any]:
    """R85's ``pools`` entry of the one pool, from a report's workers, requests and summary:
    sums over the workers, token sums over the completed requests, and R24's quotients over
    the summary's ``makespan_us``. The 5.0 -> 6.0 step writes it; a reader of an older report
    (``servesim summary``) takes the same pool from it, as the migration would give."""
    workers = report["workers"]
    completed_requests = [
        request for request in report["requests"] if request["outcome"] == "completed"
    ]
    completed = sum(worker["completed"] for worker in workers)
    output_tokens = sum(request["output_tokens"] for request in completed_requests)
    busy_us = sum(worker["busy_us"] for worker in workers)
    makespan_us = report["summary"]["makespan_us"]
    caches = [worker.get("kv_cache") for worker in workers]  # none before report 3.0 (R53)
    kv_cache = None
    if all(cache is not None for cache in caches):
        kv_cache = {
            "evictions": sum(cache["evictions"] for cache in caches),
            "peak_blocks_in_use": max(cache["peak_blocks_in_use"] for cache in caches),
            "preemptions": sum(cache["preemptions"] for cache in caches),
            "reused_tokens": sum(cache["reused_tokens"] for cache in caches),
        }
    return {
        "busy_us": busy_us,
        "completed": completed,
        "dp_size": 1,
        "kv_cache": kv_cache,
        "name": DEFAULT_POOL,
        "output_token_throughput_per_s": ratio(output_tokens * 1_000_000, makespan_us),
        "output_tokens": output_tokens,
        "prompt_tokens": sum(request["prompt_tokens"] for request in completed_requests),
        "request_throughput_per_s": ratio(completed * 1_000_000, makespan_us),
        "routed": sum(worker["routed"] for worker in workers),
        "steps": sum(worker["steps"] for worker in workers),
        "utilization": ratio(busy_us, len(workers) * makespan_us),
        "workers": len(workers),
    }


def report_6_0_to_7_0(report: Mapping[str, Any]) -> dict[str, Any]:
    """Report 6.0 to 7.0 (R96): the report of the vLLM style.

    Exact, not a guess: a 6.0 report comes from a scenario without ``scheduler.style``
    (scenario 1.5 and report 7.0 came together), whose every pool has the style ``"vllm"``
    (R88), which retracts nobody, reserves nothing and keeps no new-token ratio. A trace
    entry's kind follows from its shape alone (R95).
    """
    upgraded = dict(report)
    upgraded["requests"] = [
        _with_member(request, "retractions", 0) for request in report["requests"]
    ]
    upgraded["workers"] = [_worker_7_0(worker) for worker in report["workers"]]
    upgraded["pools"] = [
        _with_member(_with_cache_7_0(pool), "style", "vllm") for pool in report["pools"]
    ]
    summary = report["summary"]
    if summary["kv_cache"] is not None:
        cache = _with_member(summary["kv_cache"], "retractions", 0)
        upgraded["summary"] = {**summary, "kv_cache": cache}  # in its place
    if report.get("trace") is not None:
        upgraded["trace"] = [_trace_entry_7_0(entry) for entry in report["trace"]]
    return upgraded


def _with_cache_7_0(entry: Mapping[str, Any]) -> dict[str, Any]:
    """R96: a worker's, rank's or pool's ``kv_cache`` (when not null) gains ``retractions`` 0
    and ``peak_reserved_blocks`` null."""
    cache = entry["kv_cache"]
    if cache is None:
        return dict(entry)
    cache = _with_member(cache, "peak_reserved_blocks", None)
    return {**entry, "kv_cache": _with_member(cache, "retractions", 0)}  # in its place


def _worker_7_0(worker: Mapping[str, Any]) -> dict[str, Any]:
    """R96: ``style`` ``"vllm"``, and the cache members on the worker and each rank."""
    upgraded = _with_cache_7_0(worker)
    upgraded["ranks"] = [_with_cache_7_0(rank) for rank in worker["ranks"]]
    return _with_member(upgraded, "style", "vllm")


def report_7_0_to_8_0(report: Mapping[str, Any]) -> dict[str, Any]:
    """Report 7.0 to 8.0 (R108): the report of an aggregated fleet.

    Exact, not a guess: a 7.0 report comes from a scenario without pool roles (scenario 1.6
    and report 8.0 came together), where no request is handed off and nothing is transferred.
    """
    upgraded = dict(report)
    upgraded["requests"] = [
        _with_member(request, "handoff", None) for request in report["requests"]
    ]
    upgraded["workers"] = [_worker_8_0(worker) for worker in report["workers"]]
    upgraded["pools"] = [
        _with_member(_with_handoffs_8_0(pool), "role", None) for pool in report["pools"]
    ]
    upgraded["summary"] = _with_member(report["summary"], "transfers", None)
    return upgraded


def _with_handoffs_8_0(entry: Mapping[str, Any]) -> dict[str, Any]:
    """R108: a worker's, rank's or pool's ``handed_off`` and ``activated``, both 0."""
    return _with_member(_with_member(entry, "handed_off", 0), "activated", 0)


def _worker_8_0(worker: Mapping[str, Any]) -> dict[str, Any]:
    """R108: the handoff counts on the worker and on each of its ranks."""
    upgraded = _with_handoffs_8_0(worker)
    upgraded["ranks"] = [_with_handoffs_8_0(rank) for rank in worker["ranks"]]
    return upgraded


#: R6: the largest integer a report holds exactly (2**53 - 1).
MAX_REPORT_INTEGER = 2**53 - 1

#: R122: microseconds in an hour, the denominator of every ``worker_hours``.
US_PER_HOUR = 3_600_000_000


def report_8_0_to_9_0(report: Mapping[str, Any]) -> dict[str, Any]:
    """Report 8.0 to 9.0 (R124): the report of a fleet that never changes.

    Exact, not a guess: an 8.0 report comes from a scenario without ``scaling`` or ``failures``
    (scenario 1.7 and report 9.0 came together), whose every worker is active from 0 to the end
    of the accounting window (R122: its worker time is the makespan M), and where nothing fails,
    migrates, scales or is routed to no routable worker. Every member is computed from the 8.0
    report alone: a trace entry's ``cut_us`` is the latest ``terminal_us`` when its ``end_us``
    passes that time (the only step that does is one cut off by a stop time, which is that
    time, R124), else null. ``utilization`` is unchanged (R122). A sum the step computes (a
    pool's or the summary's ``worker_us``) that would pass 2^53-1 is invalid input (R6, exit 2).
    New members go where the canonical order (R23) has them.
    """
    makespan_us = report["summary"]["makespan_us"]
    upgraded = dict(report)
    upgraded["requests"] = [_request_9_0(request) for request in report["requests"]]
    upgraded["workers"] = [_worker_9_0(worker, makespan_us) for worker in report["workers"]]
    upgraded["pools"] = [
        _pool_9_0(pool, index, makespan_us) for index, pool in enumerate(report["pools"])
    ]
    worker_us = sum(pool["worker_us"] for pool in upgraded["pools"])
    if worker_us > MAX_REPORT_INTEGER:
        raise InvalidInput(
            [
                InputProblem(
                    "",
                    "/summary/makespan_us",
                    f"the summary's worker_us, {worker_us} (the pools' workers times "
                    f"makespan_us {makespan_us}), would pass 9007199254740991, the largest "
                    "integer a report can hold (SPEC.md R6, R124)",
                )
            ]
        )
    upgraded["summary"] = _summary_9_0(report["summary"], worker_us)
    if report.get("trace") is not None:
        latest = max((request["terminal_us"] for request in report["requests"]), default=None)
        upgraded["trace"] = [_trace_entry_9_0(entry, latest) for entry in report["trace"]]
    return upgraded


def _worker_hours(worker_us: int) -> float:
    """R122: R24 of ``worker_us / 3,600,000,000`` (never null: the denominator is not 0)."""
    hours = ratio(worker_us, US_PER_HOUR)
    assert hours is not None
    return hours


def _request_9_0(request: Mapping[str, Any]) -> dict[str, Any]:
    """R124: no migration, no failure, nothing lost or recomputed."""
    upgraded = _with_member(request, "migrations", [])
    upgraded = _with_member(upgraded, "fail_reason", None)
    upgraded = _with_member(upgraded, "lost_tokens", 0)
    return _with_member(upgraded, "recomputed_tokens", 0)


def _worker_9_0(worker: Mapping[str, Any], makespan_us: int) -> dict[str, Any]:
    """R124: active from 0 for the whole window M, never failed (its ranks are unchanged)."""
    upgraded = _with_member(worker, "lifecycle", [{"at_us": 0, "state": "active"}])
    members = {
        "created_us": 0,
        "worker_us": makespan_us,
        "active_us": makespan_us,
        "starting_us": 0,
        "draining_us": 0,
        "failed_us": 0,
        "failures": 0,
        "migrated_out": 0,
        "failed_requests": 0,
        "lost_tokens": 0,
    }
    for name, member in members.items():
        upgraded = _with_member(upgraded, name, member)
    return upgraded


def _pool_9_0(pool: Mapping[str, Any], index: int, makespan_us: int) -> dict[str, Any]:
    """R124: the initial workers alone, each for M; ``worker_us`` past 2^53-1 is R6's error."""
    workers = pool["workers"]
    worker_us = workers * makespan_us
    if worker_us > MAX_REPORT_INTEGER:
        raise InvalidInput(
            [
                InputProblem(
                    "",
                    f"/pools/{index}/workers",
                    f"the pool's worker_us, {workers} workers times makespan_us {makespan_us} "
                    f"= {worker_us}, would pass 9007199254740991, the largest integer a report "
                    "can hold (SPEC.md R6, R124)",
                )
            ]
        )
    members = {
        "workers_created": workers,
        "peak_workers": workers,
        "worker_us": worker_us,
        "worker_hours": _worker_hours(worker_us),
        "failures": 0,
        "migrations": 0,
        "failed": 0,
    }
    upgraded = dict(pool)
    for name, member in members.items():
        upgraded = _with_member(upgraded, name, member)
    return upgraded


def _summary_9_0(summary: Mapping[str, Any], worker_us: int) -> dict[str, Any]:
    """R124: nothing failed, migrated, lost or recomputed, the fleet never changed, and the
    worker time is the pools' sum."""
    rejected = _with_member(summary["rejected_by_reason"], "no_routable_worker", 0)
    upgraded = {**summary, "rejected_by_reason": rejected}  # in its place
    members: dict[str, Any] = {
        "failed": 0,
        "failed_by_reason": {"migration_limit": 0, "no_routable_worker": 0, "worker_failure": 0},
        "migrations": 0,
        "lost_tokens": 0,
        "recomputed_tokens": 0,
        "worker_us": worker_us,
        "worker_hours": _worker_hours(worker_us),
        "fleet": {
            "cancelled": 0,
            "drained": 0,
            "failures": 0,
            "ignored_failures": 0,
            "recoveries": 0,
            "scale_downs": 0,
            "scale_ups": 0,
        },
    }
    for name, member in members.items():
        upgraded = _with_member(upgraded, name, member)
    return upgraded


def _trace_entry_9_0(entry: Mapping[str, Any], latest_terminal_us: int | None) -> dict[str, Any]:
    """R124: ``cut_us`` the latest terminal time when the step ends after it, else null."""
    cut = latest_terminal_us is not None and entry["end_us"] > latest_terminal_us
    return _with_member(entry, "cut_us", latest_terminal_us if cut else None)


def report_9_0_to_10_0(report: Mapping[str, Any]) -> dict[str, Any]:
    """Report 9.0 to 10.0 (R141): the report of inputs without a host pool.

    Exact, not a guess: a 9.0 report comes from a scenario without ``kv_cache.host`` (scenario
    1.8 and report 10.0 came together), where nothing is stored to or loaded from a host tier.
    Each request gains ``host_reused_prompt_tokens`` 0 and ``load_wait_us`` null; every worker,
    every rank and every pool ``host`` null; a non-null ``summary.kv_cache``
    ``host_reused_prompt_tokens`` 0, ``host_reuse_ratio`` (0 when ``summary.prompt_tokens`` is
    positive, else null), ``gpu_reuse_ratio`` (its ``prefix_reuse_ratio``) and ``host`` null;
    the report ``host_transfers``, ``[]`` when ``trace`` is not null, else null. New members go
    where the canonical order (R23) has them.
    """
    upgraded = dict(report)
    upgraded["requests"] = [_request_10_0(request) for request in report["requests"]]
    upgraded["workers"] = [_worker_10_0(worker) for worker in report["workers"]]
    upgraded["pools"] = [_with_member(pool, "host", None) for pool in report["pools"]]
    summary = report["summary"]
    kv_cache = summary["kv_cache"]
    if kv_cache is not None:
        upgraded["summary"] = {**summary, "kv_cache": _summary_kv_cache_10_0(kv_cache, summary)}
    return _with_member(upgraded, "host_transfers", None if report["trace"] is None else [])


def _request_10_0(request: Mapping[str, Any]) -> dict[str, Any]:
    """R141: nothing reused from a host tier, and no scheduler with a host pool."""
    upgraded = _with_member(request, "host_reused_prompt_tokens", 0)
    return _with_member(upgraded, "load_wait_us", None)


def _worker_10_0(worker: Mapping[str, Any]) -> dict[str, Any]:
    """R141: no host pool on the worker nor on any of its ranks."""
    upgraded = _with_member(worker, "host", None)
    upgraded["ranks"] = [_with_member(rank, "host", None) for rank in worker["ranks"]]
    return upgraded


def _summary_kv_cache_10_0(
    kv_cache: Mapping[str, Any], summary: Mapping[str, Any]
) -> dict[str, Any]:
    """R141: no host reuse (its ratio 0, or null without prompt tokens), all reuse from the
    GPU (its ratio the total's), and no host pool."""
    members: dict[str, Any] = {
        "host_reused_prompt_tokens": 0,
        "host_reuse_ratio": 0 if summary["prompt_tokens"] > 0 else None,
        "gpu_reuse_ratio": kv_cache["prefix_reuse_ratio"],
        "host": None,
    }
    upgraded = dict(kv_cache)
    for name, member in members.items():
        upgraded = _with_member(upgraded, name, member)
    return upgraded


def _trace_entry_7_0(entry: Mapping[str, Any]) -> dict[str, Any]:
    """R96: ``kind`` from the shape, ``retracted`` [] and ``new_token_ratio`` null."""
    shape = entry["shape"]
    decode, prefill = shape["decode_requests"] > 0, shape["prefill_tokens"] > 0
    kind = "mixed" if decode and prefill else "decode" if decode else "prefill"
    upgraded = _with_member(entry, "kind", kind)
    upgraded = _with_member(upgraded, "new_token_ratio", None)
    return _with_member(upgraded, "retracted", [])


def _with_member(value: Mapping[str, Any], name: str, member: Any) -> dict[str, Any]:
    """``value`` with the member ``name`` put before the first member whose name sorts after it.

    ``servesim migrate`` keeps the member order it read (R37): in a canonical document (R23,
    members sorted) this is where the canonical writer puts the new member; in another it is
    somewhere reasonable. (Every member name in a report is ASCII, so code points sort as R23's
    UTF-16 code units do.)
    """
    upgraded: dict[str, Any] = {}
    for key, item in value.items():
        if name not in upgraded and key > name:
            upgraded[name] = member
        upgraded[key] = item
    upgraded.setdefault(name, member)
    return upgraded


#: The reference's chain. A new version adds its step here in the same commit as its schema
#: (tests/test_evolution_release.py checks that every released version has a path to the
#: current one, and ``servesim schema review`` that a new version comes with its step).
CHAIN = MigrationChain(
    migrations=(
        Migration(
            kind="timing_profile",
            source="1.0",
            target="1.1",
            summary="relabel: 1.1 adds the measured model kinds grid and regression and their "
            "calibration member, which 1.0 profiles do not use",
            upgrade=relabel,
        ),
        Migration(
            kind="report",
            source="1.0",
            target="2.0",
            summary="adds inputs.timing_profile.calibration (null: 1.0 reports come from "
            "synthetic_linear profiles) and each trace entry's shape, from the request's "
            "prompt and token times",
            upgrade=report_1_0_to_2_0,
        ),
        Migration(
            kind="scenario",
            source="1.0",
            target="1.1",
            summary="relabel: 1.1 adds the optional kv_cache, which 1.0 scenarios do not use "
            "(unlimited memory, R45)",
            upgrade=relabel,
        ),
        Migration(
            kind="workload",
            source="1.0",
            target="1.1",
            summary="relabel: 1.1 adds the optional prefix_hash_block_tokens and per-request "
            "prefix_hashes, which 1.0 workloads do not use",
            upgrade=relabel,
        ),
        Migration(
            kind="report",
            source="2.0",
            target="3.0",
            summary="adds the KV cache's members with their values without a cache (R53): "
            "reused_prompt_tokens 0 and preemptions 0 per request, "
            "rejected_by_reason.exceeds_kv_cache 0, kv_cache null in the summary and every "
            "worker, kv_blocks_in_use null and preempted [] per trace entry",
            upgrade=report_2_0_to_3_0,
        ),
        Migration(
            kind="scenario",
            source="1.1",
            target="1.2",
            summary="relabel: 1.2 adds the routing policies least_loaded and cache_aware and "
            "cache_aware's optional prefill_weight and load_weight, which 1.1 scenarios do not "
            "use (R57)",
            upgrade=relabel,
        ),
        Migration(
            kind="report",
            source="3.0",
            target="4.0",
            summary="adds cached_blocks_at_routing null to every request (R57: a 3.0 report "
            "comes from round_robin or random routing, where it is null)",
            upgrade=report_3_0_to_4_0,
        ),
        Migration(
            kind="scenario",
            source="1.2",
            target="1.3",
            summary="relabel: 1.3 adds the optional closed_loop, stop_at_us and slo, which 1.2 "
            "scenarios do not use (R64)",
            upgrade=relabel,
        ),
        Migration(
            kind="workload",
            source="1.1",
            target="1.2",
            summary="relabel: 1.2 adds the optional sessions and per-request session and "
            "think_time_us, which 1.1 workloads do not use (R64)",
            upgrade=relabel,
        ),
        Migration(
            kind="report",
            source="4.0",
            target="5.0",
            summary="adds session null to every request, and cut_off 0 and tpot_us (computed "
            "from each completed request's first_token_us, completion_us and output_tokens) to "
            "the summary (R64: a 4.0 report comes from inputs without sessions, closed loop, "
            "stop time or objectives)",
            upgrade=report_4_0_to_5_0,
        ),
        Migration(
            kind="report",
            source="5.0",
            target="6.0",
            summary='adds the one pool "default" of one-rank workers (R86: a 5.0 report comes '
            "from a scenario with fleet.workers): inputs.timing_profiles from "
            'inputs.timing_profile, pool "default" and rank 0 per routed request (null '
            "otherwise), pool, pool_worker and one rank holding the worker's own members per "
            "worker, rank 0 and duration_us = end_us - start_us per trace entry, and pools with "
            "the one entry computed from the workers, the requests and the summary (R85)",
            upgrade=report_5_0_to_6_0,
        ),
        Migration(
            kind="scenario",
            source="1.3",
            target="1.4",
            summary="relabel: 1.4 adds fleet.pools, fleet.dp_size and the routing policy "
            "weighted_round_robin, which 1.3 scenarios do not use (R86)",
            upgrade=relabel,
        ),
        Migration(
            kind="report",
            source="6.0",
            target="7.0",
            summary="adds the vLLM style's values (R96: a 6.0 report comes from a scenario "
            'without scheduler.style): style "vllm" per worker and pool, retractions 0 per '
            "request, kind (from the shape), retracted [] and new_token_ratio null per trace "
            "entry, retractions 0 and peak_reserved_blocks null in every kv_cache of a worker, "
            "rank and pool, and retractions 0 in summary.kv_cache (R95)",
            upgrade=report_6_0_to_7_0,
        ),
        Migration(
            kind="scenario",
            source="1.4",
            target="1.5",
            summary="relabel: 1.5 adds scheduler.style and scheduler.sglang, which 1.4 "
            "scenarios do not use (R96)",
            upgrade=relabel,
        ),
        Migration(
            kind="report",
            source="7.0",
            target="8.0",
            summary="adds the values of an aggregated fleet (R108: a 7.0 report comes from a "
            "scenario without pool roles): handoff null per request, handed_off 0 and activated "
            "0 per worker, rank and pool, role null per pool, and transfers null in the summary "
            "(R107)",
            upgrade=report_7_0_to_8_0,
        ),
        Migration(
            kind="scenario",
            source="1.5",
            target="1.6",
            summary="relabel: 1.6 adds the pools' role, kv_transfer and routing.decode, which "
            "1.5 scenarios do not use (R108)",
            upgrade=relabel,
        ),
        Migration(
            kind="report",
            source="8.0",
            target="9.0",
            summary="adds the values of a fleet that never changes (R124: an 8.0 report comes "
            "from a scenario without scaling or failures), from the 8.0 report alone with M its "
            'summary.makespan_us: lifecycle [{"state": "active", "at_us": 0}], created_us 0, '
            "worker_us and active_us M, the other times and the failure counts 0 per worker; "
            "workers_created and peak_workers its workers, worker_us workers * M, worker_hours "
            "(R24) and failures, migrations and failed 0 per pool; migrations [], fail_reason "
            "null, lost_tokens and recomputed_tokens 0 per request; failed 0, failed_by_reason "
            "and fleet all 0, rejected_by_reason.no_routable_worker 0, migrations, lost_tokens "
            "and recomputed_tokens 0, worker_us the pools' sum and worker_hours in the summary; "
            "cut_us per trace entry the latest terminal_us when end_us passes it, else null; "
            "exit 2 when a sum passes 2^53-1 (R6)",
            upgrade=report_8_0_to_9_0,
        ),
        Migration(
            kind="scenario",
            source="1.6",
            target="1.7",
            summary="relabel: 1.7 adds the optional fleet.scaling, the pools' scaling and "
            "failures, which 1.6 scenarios do not use (R124)",
            upgrade=relabel,
        ),
        Migration(
            kind="workload",
            source="1.2",
            target="1.3",
            summary="relabel: 1.3 adds the optional session_prompts_extend, which 1.2 "
            "workloads do not use (R141)",
            upgrade=relabel,
        ),
        Migration(
            kind="report",
            source="9.0",
            target="10.0",
            summary="adds the values of inputs without a host pool (R141: a 9.0 report comes "
            "from a scenario without kv_cache.host): host_reused_prompt_tokens 0 and "
            "load_wait_us null per request; host null per worker, rank and pool; "
            "host_reused_prompt_tokens 0, host_reuse_ratio (0, or null when "
            "summary.prompt_tokens is 0), gpu_reuse_ratio (the prefix_reuse_ratio) and host "
            "null in a non-null summary.kv_cache; host_transfers [] when trace is not null, "
            "else null",
            upgrade=report_9_0_to_10_0,
        ),
        Migration(
            kind="scenario",
            source="1.7",
            target="1.8",
            summary="relabel: 1.8 adds the optional kv_cache.host (top level and in a pool's "
            "kv_cache), which 1.7 scenarios do not use (R141)",
            upgrade=relabel,
        ),
    ),
    current={kind: versions[-1] for kind, versions in SUPPORTED_VERSIONS.items()},
)
