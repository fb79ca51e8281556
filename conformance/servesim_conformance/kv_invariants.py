"""What every report of a run with a KV cache must show (SPEC.md section 11, R45 to R53).

Each check reads only the inputs and the report (its trace where it says so), so that it holds
any implementation to the rules, not to the reference's code. A check asserts only what follows
strictly from the rules; each docstring says from which and why. Without a cache the report must
say so in every R52 member (``check_kv_absent``), and the other checks have nothing to do.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction

from servesim_conformance.session_invariants import stop_time_of
from servesim_conformance.violations import Document, require


def cache_of(scenario: Document) -> Document | None:
    """The scenario's ``kv_cache`` (R45), None without one."""
    cache: Document | None = scenario.get("kv_cache")
    return cache


def identified_blocks(request: Document, scenario: Document, workload: Document) -> int:
    """R47: how many leading blocks of ``request`` are identified, that is can ever be shared
    or reused: block j is when prefix caching is on, ``(j+1) * B <= prompt_tokens`` and
    ``j < k * n``; no other block is (0 without a cache, with caching off or without hashes)."""
    cache = cache_of(scenario)
    hashes = request.get("prefix_hashes") or []
    if cache is None or not cache["prefix_caching"] or not hashes:
        return 0
    block_tokens: int = cache["block_tokens"]
    per_hash: int = workload["prefix_hash_block_tokens"] // block_tokens
    prompt: int = request["prompt_tokens"]
    return min(prompt // block_tokens, per_hash * len(hashes))


def _steps_by_worker(report: Document) -> dict[int, list[Document]]:
    by_worker: dict[int, list[Document]] = defaultdict(list)
    for step in report["trace"] or []:
        by_worker[step["worker"]].append(step)
    return by_worker


def check_kv_absent(scenario: Document, report: Document) -> None:
    """R45, R52, R53: without a cache every cache member holds its "no cache" value (the values
    R53's migration of a report 2.0 gives), so a run without ``kv_cache`` is the run of
    sections 2 to 7 unchanged."""
    if cache_of(scenario) is not None:
        return
    for entry in report["requests"]:
        rid = entry["id"]
        require(entry["reused_prompt_tokens"] == 0, "R52", f"{rid}: reuse without a cache")
        require(entry["preemptions"] == 0, "R52", f"{rid}: preempted without a cache")
    for worker in report["workers"]:
        require(worker["kv_cache"] is None, "R52", f"worker {worker['worker']}: kv_cache")
    summary = report["summary"]
    require(summary["kv_cache"] is None, "R52", "summary.kv_cache without a cache")
    rejected = summary["rejected_by_reason"]["exceeds_kv_cache"]
    require(rejected == 0, "R10", "exceeds_kv_cache without a cache")
    for step in report["trace"] or []:
        where = f"worker {step['worker']} step at {step['start_us']}"
        require(step["kv_blocks_in_use"] is None, "R52", f"{where}: kv_blocks_in_use")
        require(step["preempted"] == [], "R52", f"{where}: preempted without a cache")


def check_kv_capacity(scenario: Document, report: Document) -> None:
    """R45, R50, R52: no step holds more than ``blocks`` blocks, and a worker's
    ``peak_blocks_in_use`` is the largest ``kv_blocks_in_use`` of its steps (0 if it ran none).

    R45 keeps ``held + cached + free = blocks`` at every instant, so the held blocks, which
    ``kv_blocks_in_use`` counts once the step is formed (R50), can never exceed ``blocks``.
    """
    cache = cache_of(scenario)
    if cache is None:
        return
    for worker in report["workers"]:
        counters = worker["kv_cache"]
        require(counters is not None, "R52", f"worker {worker['worker']}: kv_cache is null")
        peak = counters["peak_blocks_in_use"]
        require(peak <= cache["blocks"], "R45", f"worker {worker['worker']}: peak over blocks")
    if report["trace"] is None:
        return
    by_worker = _steps_by_worker(report)
    for worker in report["workers"]:
        in_use = []
        for step in by_worker.get(worker["worker"], []):
            blocks = step["kv_blocks_in_use"]
            where = f"worker {step['worker']} step at {step['start_us']}"
            require(isinstance(blocks, int), "R52", f"{where}: kv_blocks_in_use is {blocks}")
            require(0 <= blocks <= cache["blocks"], "R50", f"{where}: {blocks} blocks in use")
            in_use.append(blocks)
        peak = worker["kv_cache"]["peak_blocks_in_use"]
        expected = max(in_use, default=0)
        require(
            peak == expected, "R52", f"worker {worker['worker']}: peak {peak}, steps say {expected}"
        )


def check_kv_reuse(scenario: Document, workload: Document, report: Document) -> None:
    """R47, R48, R52: what a request reuses.

    At its first admission a request reuses ``h * B`` tokens with ``h <= floor((L-1)/B)`` and
    its blocks 0 to h-1 identified (R48; L is its prompt then), so ``reused_prompt_tokens`` is a
    multiple of B, at most ``prompt_tokens - 1`` and at most B times its identified blocks
    (R47); a rejected request is never admitted (0). A worker's ``reused_tokens`` adds up every
    admission to it, so it is at least its requests' first-admission reuse, and exactly that
    when nobody was preempted there (no readmission). Nothing is ever registered without an
    identified block (R47), so with none anywhere nothing is cached, reused or evicted (R46).
    """
    cache = cache_of(scenario)
    if cache is None:
        return
    block_tokens = cache["block_tokens"]
    by_id = {request["id"]: request for request in workload["requests"]}
    first_reuse: dict[int, int] = defaultdict(int)
    for entry in report["requests"]:
        rid, reused = entry["id"], entry["reused_prompt_tokens"]
        if entry["first_scheduled_us"] is None:
            # rejected, or cut off before its admission (R62): never admitted
            require(reused == 0, "R52", f"{rid}: a request never admitted reused {reused}")
            require(entry["preemptions"] == 0, "R52", f"{rid}: never admitted, yet preempted")
            continue
        require(reused % block_tokens == 0, "R48", f"{rid}: reused {reused}, not whole blocks")
        require(reused <= entry["prompt_tokens"] - 1, "R48", f"{rid}: reused {reused} tokens")
        identified = identified_blocks(by_id[rid], scenario, workload)
        require(
            reused <= identified * block_tokens,
            "R47",
            f"{rid}: reused {reused} tokens, but only {identified} blocks are identified",
        )
        first_reuse[entry["worker"]] += reused
    nothing_identified = all(
        identified_blocks(request, scenario, workload) == 0 for request in workload["requests"]
    )
    for worker in report["workers"]:
        index, counters = worker["worker"], worker["kv_cache"]
        reused = counters["reused_tokens"]
        require(reused >= first_reuse[index], "R52", f"worker {index}: reused_tokens {reused}")
        if counters["preemptions"] == 0:
            require(reused == first_reuse[index], "R52", f"worker {index}: reused_tokens {reused}")
        if nothing_identified:
            require(reused == 0, "R47", f"worker {index}: reuse with no identified block")
            require(counters["evictions"] == 0, "R46", f"worker {index}: evicted, none cached")


def check_kv_preemptions(scenario: Document, report: Document) -> None:
    """R9, R49, R52: every preemption is counted once where it happened, and every preempted
    request still reaches exactly one terminal state: it completes.

    A victim goes back to the waiting queue (R49), so it is never rejected, which happens only
    at arrival (R10), and every accepted request completes (R9, R11). Its ``preemptions`` is the
    number of traced steps that list it in ``preempted``; a victim is a running request given
    nothing in that step (R49), so it is neither in the step's decode nor prefill lists, and a
    step preempts a request at most once. A worker's ``preemptions`` is the sum over its
    requests, and over its steps' ``preempted`` lists.
    """
    if cache_of(scenario) is None:
        return
    entries = {entry["id"]: entry for entry in report["requests"]}
    by_worker: dict[int, int] = defaultdict(int)
    for rid, entry in entries.items():
        if entry["preemptions"] > 0:
            # R62: a stop time may cut it off before it completes
            outcome = entry["outcome"]
            require(outcome != "rejected", "R9", f"{rid}: preempted, then {outcome}")
            require(
                len(entry["token_times_us"]) == entry["output_tokens"],
                "R49",
                f"{rid}: preempted, and its tokens are not all there",
            )
            by_worker[entry["worker"]] += entry["preemptions"]
    for worker in report["workers"]:
        index, preemptions = worker["worker"], worker["kv_cache"]["preemptions"]
        require(
            preemptions == by_worker[index],
            "R52",
            f"worker {index}: preemptions {preemptions}, its requests say {by_worker[index]}",
        )
    if report["trace"] is None:
        return
    counted: dict[str, int] = defaultdict(int)
    per_worker: dict[int, int] = defaultdict(int)
    for step in report["trace"]:
        where = f"worker {step['worker']} step at {step['start_us']}"
        given = set(step["decode_requests"]) | {item["id"] for item in step["prefill"]}
        victims = step["preempted"]
        require(len(victims) == len(set(victims)), "R49", f"{where}: preempted twice")
        for rid in victims:
            require(rid not in given, "R49", f"{where}: {rid} preempted and given tokens")
            require(entries[rid]["worker"] == step["worker"], "R49", f"{where}: {rid} elsewhere")
            counted[rid] += 1
        per_worker[step["worker"]] += len(victims)
    for rid, entry in entries.items():
        require(
            entry["preemptions"] == counted[rid],
            "R52",
            f"{rid}: preemptions {entry['preemptions']}, the trace lists {counted[rid]}",
        )
    for worker in report["workers"]:
        index = worker["worker"]
        total = worker["kv_cache"]["preemptions"]
        require(total == per_worker[index], "R52", f"worker {index}: trace lists other victims")


def check_kv_summary(scenario: Document, report: Document) -> None:
    """R52: ``summary.kv_cache`` adds up the requests and the workers: reused prompt tokens of
    completed requests, their ratio to ``summary.prompt_tokens`` (R24, null when that is 0),
    and the workers' preemptions and evictions; ``exceeds_kv_cache`` counts its rejections."""
    if cache_of(scenario) is None:
        return
    summary, workers = report["summary"], report["workers"]
    totals = summary["kv_cache"]
    require(totals is not None, "R52", "summary.kv_cache is null with a cache")
    completed = [e for e in report["requests"] if e["outcome"] == "completed"]
    reused = sum(entry["reused_prompt_tokens"] for entry in completed)
    require(totals["reused_prompt_tokens"] == reused, "R52", "summary reused_prompt_tokens")
    prompt = summary["prompt_tokens"]
    ratio = None if prompt == 0 else float(Fraction(reused, prompt))
    require(totals["prefix_reuse_ratio"] == ratio, "R52", f"prefix_reuse_ratio is not {ratio}")
    for field in ("preemptions", "evictions"):
        total = sum(worker["kv_cache"][field] for worker in workers)
        require(totals[field] == total, "R52", f"summary {field} {totals[field]}, workers {total}")
    rejected = sum(e["reject_reason"] == "exceeds_kv_cache" for e in report["requests"])
    count = summary["rejected_by_reason"]["exceeds_kv_cache"]
    require(count == rejected, "R28", f"exceeds_kv_cache {count}, requests say {rejected}")


@dataclass
class _Admission:
    """One admission of a request (R19, R50), as far as the trace shows it.

    ``to_compute`` is L of R48; the reuse is known exactly at a first admission (the report's
    ``reused_prompt_tokens``) and once the compute completes (L less the allotments); until
    then a readmission's reuse lies in ``[reuse_low, reuse_high]``.
    """

    to_compute: int
    reuse_low: int
    reuse_high: int
    identified: int
    allotted: int = 0
    decoded: int = 0
    computed: bool = False

    def blocks(self, block_tokens: int, reuse: int) -> int:
        """R46: ``ceil(cached / B)``, cached being the reuse, the allotments and the decodes."""
        return -(-(reuse + self.allotted + self.decoded) // block_tokens)


def held_bounds(running: list[_Admission], block_tokens: int) -> tuple[int, int]:
    """The fewest and most distinct blocks ``running`` can hold (R46, R47).

    Each request holds ``ceil(cached / B)`` blocks. Only a block at an identified position can
    have several holders (a request becomes a holder of another's block only by a hit, R48, on
    identified registered blocks), so the held blocks are at least every request's blocks at
    non-identified positions plus the largest count of identified ones, and at most the sum.
    """
    low_counts = [(a.blocks(block_tokens, a.reuse_low), a.identified) for a in running]
    exclusive = sum(count - min(count, identified) for count, identified in low_counts)
    shared = max((min(count, identified) for count, identified in low_counts), default=0)
    high = sum(a.blocks(block_tokens, a.reuse_high) for a in running)
    return exclusive + shared, high


def check_kv_blocks(scenario: Document, workload: Document, report: Document) -> None:
    """R46, R48, R50, R51: replaying each worker's trace, the blocks in use are those of the
    running requests' cached tokens.

    After a step is formed a running request's cached tokens are its reuse at admission plus
    its allotments and decode tokens since (R46), and it holds ``ceil(cached / B)`` blocks; the
    running requests are those admitted (first in a step's ``prefill``) and neither preempted
    (``preempted``) nor completed since, including chunked prefills given nothing in a step.
    A token at the end of a step in which the request had an allotment means its compute
    completed (R20, R51): then its reuse was L less its allotments, a whole number of blocks
    (R48). Without any identified block (caching off, no hashes) no block is shared and every
    reuse is 0, so ``kv_blocks_in_use`` is exactly the sum; with sharing it lies between
    ``held_bounds``.
    """
    cache = cache_of(scenario)
    if cache is None or report["trace"] is None:
        return
    block_tokens = cache["block_tokens"]
    entries = {entry["id"]: entry for entry in report["requests"]}
    identified = {
        request["id"]: identified_blocks(request, scenario, workload)
        for request in workload["requests"]
    }
    for worker in report["workers"]:
        steps = _steps_by_worker(report).get(worker["worker"], [])
        admissions = _replay_worker(steps, entries, identified, block_tokens)
        low = sum(admission.reuse_low for admission in admissions)
        high = sum(admission.reuse_high for admission in admissions)
        reused = worker["kv_cache"]["reused_tokens"]
        require(
            low <= reused <= high,
            "R52",
            f"worker {worker['worker']}: reused_tokens {reused}, admissions reuse {low}..{high}",
        )


def _admit(
    entry: Document, start: int, first: bool, identified: int, block_tokens: int
) -> _Admission:
    """R48, R50: a request offered admission at ``start`` must compute its prompt plus the
    tokens it produced before (those produced at or before ``start``)."""
    produced = sum(1 for time in entry["token_times_us"] if time <= start)
    to_compute = entry["prompt_tokens"] + produced
    if first:
        rid = entry["id"]
        require(entry["first_scheduled_us"] == start, "R19", f"{rid}: first admitted at {start}")
        reuse = entry["reused_prompt_tokens"]
        return _Admission(to_compute, reuse, reuse, identified)
    most = min((to_compute - 1) // block_tokens, identified) * block_tokens
    return _Admission(to_compute, 0, most, identified)


def _replay_worker(
    steps: list[Document],
    entries: dict[str, Document],
    identified: dict[str, int],
    block_tokens: int,
) -> list[_Admission]:
    """Replay one worker's steps (R49 to R51), checking each; its admissions, in order."""
    stop = stop_time_of({"requests": list(entries.values())})
    running: dict[str, _Admission] = {}
    admissions: list[_Admission] = []
    admitted: set[str] = set()
    for step in steps:
        start, end = step["start_us"], step["end_us"]
        where = f"worker {step['worker']} step at {start}"
        for rid in step["preempted"]:
            require(rid in running, "R49", f"{where}: {rid} preempted but not running")
            del running[rid]
        for rid in step["decode_requests"]:
            admission = running.get(rid)
            require(
                admission is not None and admission.computed,
                "R50",
                f"{where}: {rid} decodes before its compute completed",
            )
            assert admission is not None
            admission.decoded += 1
        for item in step["prefill"]:
            rid = item["id"]
            if rid not in running:
                first = rid not in admitted
                admission = _admit(entries[rid], start, first, identified[rid], block_tokens)
                running[rid], admitted = admission, admitted | {rid}
                admissions.append(admission)
            admission = running[rid]
            require(not admission.computed, "R50", f"{where}: {rid} prefills while decoding")
            admission.allotted += item["tokens"]
            require(
                admission.allotted + admission.reuse_low <= admission.to_compute,
                "R48",
                f"{where}: {rid} computes more than its {admission.to_compute} tokens",
            )
        low, high = held_bounds(list(running.values()), block_tokens)
        in_use = step["kv_blocks_in_use"]
        require(
            low <= in_use <= high,
            "R46",
            f"{where}: {in_use} blocks in use, its running requests hold {low}..{high}",
        )
        if stop is not None and end > stop:
            break  # R62: a cut step ends nothing; it is its worker's last
        _end_step(step, running, entries, block_tokens, where)
        for rid in [rid for rid in running if entries[rid]["completion_us"] == end]:
            del running[rid]
    left = sorted(rid for rid in running if entries[rid]["outcome"] != "cut_off")
    require(not left, "R9", f"requests {left} still running after the last step")
    return admissions


def _end_step(
    step: Document,
    running: dict[str, _Admission],
    entries: dict[str, Document],
    block_tokens: int,
    where: str,
) -> None:
    """R20, R51: a prefill that produced a token at the step's end completed its compute, so
    its reuse is L less its allotments; one that did not has computed less than L."""
    end = step["end_us"]
    for item in step["prefill"]:
        rid = item["id"]
        admission = running[rid]
        remaining = admission.to_compute - admission.allotted
        if end in entries[rid]["token_times_us"]:
            require(
                admission.reuse_low <= remaining <= admission.reuse_high
                and remaining % block_tokens == 0,
                "R48",
                f"{where}: {rid} completed its compute having reused {remaining} tokens",
            )
            admission.reuse_low = admission.reuse_high = remaining
            admission.computed = True
        else:
            require(
                admission.reuse_low < remaining,
                "R51",
                f"{where}: {rid} computed all {admission.to_compute} tokens and made no token",
            )
            most = (remaining - 1) // block_tokens * block_tokens
            admission.reuse_high = min(admission.reuse_high, most)


def without_prefix_hashes(workload: Document) -> Document:
    """The workload with every ``prefix_hashes`` and ``prefix_hash_block_tokens`` removed."""
    stripped = {k: v for k, v in workload.items() if k != "prefix_hash_block_tokens"}
    stripped["requests"] = [
        {k: v for k, v in request.items() if k != "prefix_hashes"}
        for request in workload["requests"]
    ]
    return stripped


def check_hashes_change_nothing(with_hashes: Document, without: Document) -> None:
    """R45, R47 (metamorphic): with prefix caching off, or without a cache, no block is
    identified, so nothing is registered, reused or evicted, and removing the hashes changes
    no byte of the report but the workload's digest (R25)."""
    same_digest = dict(without, inputs=dict(without["inputs"]))
    same_digest["inputs"]["workload"] = with_hashes["inputs"]["workload"]
    require(same_digest == with_hashes, "R47", "the prefix hashes changed the report")
