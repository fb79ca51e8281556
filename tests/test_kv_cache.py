"""Hand-derived tests of the KV cache, prefix caching and preemption (SPEC.md section 11).

Every expected value is worked out from SPEC.md in the comment above it, before the reference
ran. The timing profile is ``test_hand_derived``'s round-number one, so by R22

    duration_us = 1000 + 10 * P + 100 * D

One worker, round robin, ``max_model_len`` 1000 unless a test says otherwise. B is the engine's
``block_tokens``, H the workload's ``prefix_hash_block_tokens``, k = H / B. "Step s [a, b]"
starts at a and ends at b (µs); "in use" is the step's ``kv_blocks_in_use`` (R50, R52).
An identity ``(j, [h...])`` is R47's pair. The simulation is driven through its entry point
with model objects, as the documents would build them.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

import servesim
from servesim.contract.migrations import CHAIN
from servesim.contract.model import (
    KvCache,
    Request,
    Routing,
    Scenario,
    SchedulerLimits,
    SyntheticLinearTiming,
    TimingProfile,
    Workload,
)
from servesim.engine import decode_runs
from servesim.engine.block_memory import BlockMemory
from servesim.engine.kv.cache import BlockCache
from servesim.engine.kv.held import PRIVATE
from servesim.engine.loop import SimulationResult, simulate
from servesim.engine.memory import UnlimitedMemory
from servesim.engine.requests import RequestState
from servesim.engine.step import Step
from servesim.engine.worker import Worker
from tests.helpers import as_report_2_0, scenario_doc, timing_doc, workload_doc, write_inputs

PROFILE = TimingProfile(SyntheticLinearTiming(1_000_000, 10_000, 100_000))

RequestTuple = tuple[Any, ...]  # (id, arrival_us, prompt_tokens, max_output_tokens[, hashes])


def scenario(
    blocks: int | None,
    *,
    block_tokens: int = 4,
    prefix_caching: bool = True,
    chunk: int | None = None,
    max_num_seqs: int = 4,
    max_batched_tokens: int = 64,
    workers: int = 1,
) -> Scenario:
    """A scenario with a cache of ``blocks`` blocks (none when ``blocks`` is None)."""
    limits = SchedulerLimits(
        max_num_seqs, max_batched_tokens, 1000, "chunked" if chunk else "whole", chunk
    )
    cache = None if blocks is None else KvCache(blocks, block_tokens, prefix_caching)
    return Scenario(workers, Routing("round_robin"), limits, cache)


def workload(*requests: RequestTuple, hash_block_tokens: int | None = 4) -> Workload:
    """Requests ``(id, arrival_us, prompt_tokens, max_output_tokens[, prefix_hashes])``."""
    built = tuple(
        Request(r[0], r[1], r[2], r[3], tuple(r[4]) if len(r) > 4 else ()) for r in requests
    )
    return Workload(built, hash_block_tokens)


def run(sc: Scenario, wl: Workload, *, trace: bool = True) -> SimulationResult:
    return simulate(sc, wl, PROFILE, record_trace=trace)


def by_id(result: SimulationResult) -> dict[str, RequestState]:
    return {state.request.id: state for state in result.requests}


def times(result: SimulationResult) -> dict[str, list[int]]:
    return {state.request.id: state.token_times_us.to_list() for state in result.requests}


def cache_worker(result: SimulationResult, index: int = 0) -> Worker:
    worker = result.workers[index]
    assert isinstance(worker.memory, BlockMemory)
    return worker


def cache_of(worker: Worker) -> BlockCache:
    """The worker's ``BlockCache`` (it has a cache)."""
    assert isinstance(worker.memory, BlockMemory)
    return worker.memory.cache


def expanded_trace(steps: list[Step]) -> list[tuple[Any, ...]]:
    """Every single step (runs written out) in R30's order of (start, worker): bounds,
    requests, allotments, cache columns."""
    rows = []
    for step in steps:
        for start, end in step.step_bounds():
            rows.append(
                (
                    step.worker,
                    start,
                    end,
                    [state.request.id for state in step.decode],
                    [(state.request.id, tokens) for state, tokens in step.prefill],
                    step.kv_blocks_in_use,
                    step.preempted,
                )
            )
    return sorted(rows, key=lambda row: (row[1], row[0]))


def in_use(result: SimulationResult) -> list[int | None]:
    return [row[5] for row in expanded_trace(result.steps or [])]


# --- R45 ----------------------------------------------------------------------------------------


def test_r45_held_cached_and_free_blocks_add_up_to_the_cache() -> None:
    # B = 4, blocks 6, prefix caching on, H = 4 (k = 1), whole prefill.
    # A (t 0, prompt 8, 2 out, hashes [1, 2]); B (t 0, prompt 9, 1 out, hashes [1, 2, 3]);
    # C (t 5000, prompt 8, 1 out, hashes [1, 2]).
    # Step 1 [0, 1170]: A admitted, no hit (empty registry), 8 tokens, 2 blocks; B admitted,
    #   no hit (A's blocks register only at the step's end), 9 tokens, 3 blocks. In use 5,
    #   free 1. P = 17. At its end A's blocks 0, 1 register as (0,[1]), (1,[1,2]); B's equal
    #   identities are duplicates, unregistered. B completes and releases 3 free blocks.
    #   After: held 2 (A), cached 0, free 4.
    # Step 2 [1170, 2270]: A decodes, 8 -> 9 cached tokens, a third block. In use 3.
    #   A completes; releases block 2 (free), block 1 (cached, release 0), block 0 (cached,
    #   release 1). After: held 0, cached 2, free 4.
    # Step 3 [5000, 6040]: C, L = 8, hit at most floor(7/4) = 1 block: (0,[1]) is registered,
    #   so it reuses 4 tokens and is allotted 4 (P = 4); it holds block 0 (no longer cached)
    #   and takes 1 free block. In use 2: held 2, cached 1, free 3. Its filled block 1 has the
    #   registered identity (1,[1,2]): a duplicate. It completes and releases block 1 (free),
    #   block 0 (cached, release 2). After: held 0, cached 2, free 4.
    wl = workload(("A", 0, 8, 2, [1, 2]), ("B", 0, 9, 1, [1, 2, 3]), ("C", 5000, 8, 1, [1, 2]))
    observed: list[tuple[int, int, int, int]] = []
    original = Worker.complete_step

    def complete_and_count(self: Worker, step: Step) -> list[RequestState]:
        finished = original(self, step)
        # held counted from the holders' side, independently of the cache's counts
        held = len({block for state in self.running for block in state.blocks if block >= 0})
        held += sum(block == PRIVATE for state in self.running for block in state.blocks)
        observed.append(
            (held, len(cache_of(self).cached), cache_of(self).free, cache_of(self).held)
        )
        return finished

    with mock.patch.object(Worker, "complete_step", complete_and_count):
        result = run(scenario(6), wl)
    assert observed == [(2, 0, 4, 2), (0, 2, 4, 0), (0, 2, 4, 0)]
    assert all(held + cached + free == 6 for held, cached, free, _ in observed)
    assert in_use(result) == [5, 3, 2]
    assert times(result) == {"A": [1170, 2270], "B": [1170], "C": [6040]}
    assert [by_id(result)[i].reused_prompt_tokens for i in "ABC"] == [0, 0, 4]
    assert list(cache_of(cache_worker(result)).cached.values()) == [0, 2]


def test_r45_without_a_cache_the_report_is_the_migrated_2_0_report(tmp_path: Path) -> None:
    # Without kv_cache a worker is the plain one of sections 2 to 7, and the report differs
    # from what a 2.0 writer writes for the same replay only by R52's members, holding the
    # values R53's migration gives them (reused 0, preemptions 0, exceeds_kv_cache 0,
    # kv_cache null, kv_blocks_in_use null and preempted [] in the trace), and R57's
    # cached_blocks_at_routing, null with round robin. Chunked, with
    # decodes, admissions at different times and a rejection (prompt 0).
    scenario_document = scenario_doc(max_batched_tokens=5, max_chunk_tokens=3)
    requests = [("A", 0, 8, 3), ("B", 0, 6, 2), ("C", 50, 9, 4), ("Z", 60, 0, 2)]
    paths = write_inputs(tmp_path, scenario_document, workload_doc(*requests), timing_doc())
    report = json.loads(servesim.replay(*paths.values(), trace=True))
    assert report["schema_version"] == "10.0"
    assert CHAIN.migrate(as_report_2_0(report)).document == report
    # and its replay is the one a cache too large to matter, with prefix caching off, gives
    # (R46 to R50 then only count blocks)
    wl = workload(*(r for r in requests if r[2] > 0), hash_block_tokens=None)
    plain = run(scenario(None, chunk=3, max_batched_tokens=5), wl)
    roomy = run(scenario(100, chunk=3, max_batched_tokens=5, prefix_caching=False), wl)
    assert [type(worker.memory) for worker in plain.workers] == [UnlimitedMemory]
    assert times(plain) == times(roomy)
    assert [row[:5] for row in expanded_trace(plain.steps or [])] == [
        row[:5] for row in expanded_trace(roomy.steps or [])
    ]


# --- R46 ----------------------------------------------------------------------------------------


def test_r46_blocks_are_taken_per_allotment_and_per_decoded_token() -> None:
    # B = 4, chunked with max_chunk_tokens 3, no hashes. A (t 0, prompt 7, 3 out).
    # Step 1 [0, 1030]: allotment 3, cached 3 -> 1 block.       P 3
    # Step 2 [1030, 2060]: allotment 3, cached 6 -> 2 blocks.   P 3
    # Step 3 [2060, 3070]: allotment 1, cached 7 -> 2 blocks.   P 1; first token at 3070
    # Step 4 [3070, 4170]: decode, cached 8 -> 2 blocks.         D 1
    # Step 5 [4170, 5270]: decode, cached 9 -> 3 blocks (a decoded token crossed into
    #   block 2). The traced run cannot span steps 4 and 5: their blocks in use differ.
    result = run(scenario(10, chunk=3), workload(("A", 0, 7, 3)))
    assert in_use(result) == [1, 2, 2, 2, 3]
    assert [row[1:3] for row in expanded_trace(result.steps or [])] == [
        (0, 1030),
        (1030, 2060),
        (2060, 3070),
        (3070, 4170),
        (4170, 5270),
    ]
    assert times(result) == {"A": [3070, 4170, 5270]}
    counters = cache_worker(result).kv_counters
    assert counters is not None
    assert counters.peak_blocks_in_use == 3
    # untraced, the run may take free blocks; the results and the peak are the same
    untraced = run(scenario(10, chunk=3), workload(("A", 0, 7, 3)), trace=False)
    assert times(untraced) == times(result)
    assert cache_worker(untraced).kv_counters == counters


# --- R47 ----------------------------------------------------------------------------------------


def test_r47_a_block_is_reusable_from_the_end_of_the_step_that_filled_it() -> None:
    # B = H = 4, chunked with max_chunk_tokens 4, max_batched_tokens 12, blocks 20.
    # A, B (t 0) and C (t 1080): prompt 12, 1 out, hashes [1, 2, 3].
    # Step 1 [0, 1080]: A admitted, allotment 4 (budget 8 left); B admitted, no hit: A's
    #   block 0 is filled in this very step and registers only at its end. Allotment 4.
    #   P 8. In use 2. At the end A registers (0,[1]); B's block 0 is a duplicate.
    # Step 2 [1080, 2200]: A 4, B 4 (budget 4 left); C arrived at 1080 (after the step
    #   completion, R7) and is admitted: L 12, hit at most floor(11/4) = 2; (0,[1]) is
    #   registered, (1,[1,2]) not yet (A fills it in this step), so h = 1: C reuses 4 tokens
    #   while A, the block's first holder, still runs (2 holders). Allotment min(8, 4, 4) = 4,
    #   1 new block. P 12. In use: A 2 + B 2 + C's new 1 = 5.
    # Step 3 [2200, 3320]: A 4, B 4, C 4; each completes its prompt and its 1 output.
    #   In use: A 3 + B 3 + C 2 (its own blocks 1, 2; block 0 is A's) = 8.
    wl = workload(
        ("A", 0, 12, 1, [1, 2, 3]), ("B", 0, 12, 1, [1, 2, 3]), ("C", 1080, 12, 1, [1, 2, 3])
    )
    result = run(scenario(20, chunk=4, max_batched_tokens=12), wl)
    assert [by_id(result)[i].reused_prompt_tokens for i in "ABC"] == [0, 0, 4]
    assert in_use(result) == [2, 5, 8]
    assert [row[4] for row in expanded_trace(result.steps or [])] == [
        [("A", 4), ("B", 4)],
        [("A", 4), ("B", 4), ("C", 4)],
        [("A", 4), ("B", 4), ("C", 4)],
    ]
    assert times(result) == {"A": [3320], "B": [3320], "C": [3320]}
    counters = cache_worker(result).kv_counters
    assert counters is not None
    assert counters.reused_tokens == 4


def test_r47_trace_blocks_map_onto_engine_blocks() -> None:
    # H = 8 onto B = 4: k = 2 engine blocks per hash. Whole prefill, 1 output each, blocks 40
    # (nothing evicted). Each request arrives after the one before completed.
    # A (t 0, prompt 16, [10, 20]): identities (0,[10]) (1,[10]) (2,[10,20]) (3,[10,20]);
    #   nothing to hit; all four register at its end.
    # B (t 10000, prompt 16, [10, 30]): hit at most floor(15/4) = 3: blocks 0 and 1 match,
    #   block 2 is (2,[10,30]): h = 2, reuses 8.
    # C (t 20000, prompt 14, [10, 20]): identified blocks min(14 div 4, 2*2) = 3; hit at most
    #   floor(13/4) = 3; blocks 0, 1, 2 match (A's): reuses 12, prefills 2.
    # D (t 30000, prompt 13, [10, 20]): its second hash covers tokens 8 to 12, a partial
    #   trace block, but engine block 2 (tokens 8-11) is full: identified, (2,[10,20]).
    #   Hit at most floor(12/4) = 3: reuses 12, prefills 1.
    wl = workload(
        ("A", 0, 16, 1, [10, 20]),
        ("B", 10000, 16, 1, [10, 30]),
        ("C", 20000, 14, 1, [10, 20]),
        ("D", 30000, 13, 1, [10, 20]),
        hash_block_tokens=8,
    )
    result = run(scenario(40), wl)
    assert [by_id(result)[i].reused_prompt_tokens for i in "ABCD"] == [0, 8, 12, 12]
    assert [row[4] for row in expanded_trace(result.steps or [])] == [
        [("A", 16)],
        [("B", 8)],
        [("C", 2)],
        [("D", 1)],
    ]
    # durations 1160, 1080, 1020, 1010 from each arrival
    assert times(result) == {"A": [1160], "B": [11080], "C": [21020], "D": [31010]}


# --- R48 ----------------------------------------------------------------------------------------


def test_r48_a_full_prompt_hit_recomputes_the_last_block() -> None:
    # B = H = 4, whole prefill, 1 output, each after the one before.
    # A (t 0, prompt 8, [1, 2]): no hit, P 8; blocks 0 and 1 register.
    # B (t 10000, prompt 8, [1, 2]): every block is registered, but h <= floor(7/4) = 1:
    #   reuses 4 and recomputes the last block, P 4 (not 0): it ends at 11040.
    # C (t 20000, prompt 9, [1, 2, 5]): identified blocks min(9 div 4, 3) = 2, h <=
    #   floor(8/4) = 2: reuses 8, P 1 (its partial block), ends at 21010.
    wl = workload(("A", 0, 8, 1, [1, 2]), ("B", 10000, 8, 1, [1, 2]), ("C", 20000, 9, 1, [1, 2, 5]))
    result = run(scenario(10), wl)
    assert [by_id(result)[i].reused_prompt_tokens for i in "ABC"] == [0, 4, 8]
    assert [row[4] for row in expanded_trace(result.steps or [])] == [
        [("A", 8)],
        [("B", 4)],
        [("C", 1)],
    ]
    assert times(result) == {"A": [1080], "B": [11040], "C": [21010]}


# --- R49 ----------------------------------------------------------------------------------------


def test_r49_eviction_takes_the_least_recently_released_block() -> None:
    # B = H = 4, blocks 4, whole prefill, 1 output each, each after the one before.
    # A (prompt 8, [1, 2]) completes: releases block 1 (release 0), block 0 (release 1).
    # B (prompt 8, [7, 8]): no hit; 2 free blocks. Releases (1,[7,8]) as 2, (0,[7]) as 3.
    #   Now free 0, cached: A1 0, A0 1, B1 2, B0 3.
    # C (prompt 4, [9]): h <= floor(3/4) = 0; needs 1 block: evicts release 0, A's LAST
    #   block (1,[1,2]); A's first block stays. C registers (0,[9]), releases it as 4.
    # D (prompt 8, [1, 2]): h <= 1, (0,[1]) still registered: reuses 4. Needs 1 more block;
    #   the cached blocks other than its hit are B1 2, B0 3, C0 4: evicts B1. Its block 1,
    #   (1,[1,2]) again, registers anew (A's was evicted). Releases D1 as 5, A0 as 6.
    # Two evictions; the cache holds B0 3, C0 4, D1 5, A0 6.
    wl = workload(
        ("A", 0, 8, 1, [1, 2]),
        ("B", 10000, 8, 1, [7, 8]),
        ("C", 20000, 4, 1, [9]),
        ("D", 30000, 8, 1, [1, 2]),
    )
    result = run(scenario(4), wl)
    worker = cache_worker(result)
    assert worker.kv_counters is not None
    assert worker.kv_counters.evictions == 2
    assert [by_id(result)[i].reused_prompt_tokens for i in "ABCD"] == [0, 0, 0, 4]
    assert list(cache_of(worker).cached.values()) == [3, 4, 5, 6]
    assert times(result) == {"A": [1080], "B": [11080], "C": [21040], "D": [31040]}
    assert cache_of(worker).free == 0
    assert cache_of(worker).held == 0


def test_r49_the_most_recently_admitted_request_is_preempted() -> None:
    # B = 4, blocks 6, prefix caching off, whole prefill. A, B, C (t 0, prompt 4, 6 out),
    # admitted in that order.
    # Step 1 [0, 1120]: each 4 tokens, 1 block each; in use 3. First tokens at 1120.
    # Step 2 [1120, 2420]: each decodes, cached 4 -> 5: one block each; in use 6.
    # Steps 3-5: cached 6, 7, 8: no new block. Tokens at 3720, 5020, 6320.
    # Step 6 [6320, 7520]: A needs a block (8 -> 9), none free or cached: the victim is the
    #   latest in the running list not yet served, C. C releases its 2 blocks, A takes one,
    #   B the other. D 2. A and B complete at 7520 (6 tokens). In use 6. preempted [C].
    # Step 7 [7520, 8610]: C readmitted, L = 4 + 5 = 9, no hit; whole mode, recomputing:
    #   allotment min(9, 64) = 9, 3 blocks. Its recompute produces its 6th token at 8610.
    result = run(scenario(6, prefix_caching=False), workload(*[(i, 0, 4, 6) for i in "ABC"]))
    c = by_id(result)["C"]
    assert times(result) == {
        "A": [1120, 2420, 3720, 5020, 6320, 7520],
        "B": [1120, 2420, 3720, 5020, 6320, 7520],
        "C": [1120, 2420, 3720, 5020, 6320, 8610],
    }
    assert (c.preemptions, c.first_scheduled_us, c.terminal_us) == (1, 0, 8610)
    rows = expanded_trace(result.steps or [])
    assert [row[6] for row in rows] == [[], [], [], [], [], ["C"], []]
    assert [row[5] for row in rows] == [3, 6, 6, 6, 6, 6, 3]
    assert rows[5][3] == ["A", "B"]
    assert rows[6][4] == [("C", 9)]
    worker = cache_worker(result)
    assert (worker.output_tokens, worker.decode_tokens, worker.prefill_tokens) == (18, 14, 21)
    counters = worker.kv_counters
    assert counters is not None
    assert (counters.preemptions, counters.peak_blocks_in_use, counters.evictions) == (1, 6, 0)


# --- R50 ----------------------------------------------------------------------------------------


def test_r50_a_step_that_preempts_admits_nobody() -> None:
    # B = H = 4, blocks 4, chunked (max_chunk_tokens 4, max_batched_tokens 8).
    # R (t 0, prompt 4, 3 out, no hashes); V (t 0, prompt 12, 1 out, hashes [1]: only its
    # block 0 is identified).
    # Step 1 [0, 1080]: R 4 (1 block), V 4 (1 block). In use 2. R's first token; V
    #   registers (0,[1]).
    # Step 2 [1080, 2220]: R decodes 4 -> 5 (1 block); V 4 more (block 1, unidentified).
    #   In use 4, free 0. D 1, P 4.
    # Step 3 [2220, 3320]: R decodes (5 -> 6, no block). V's allotment 4 needs block 2:
    #   nothing free or cached, and R is served: V is its own victim. It releases block 1
    #   (free) and block 0 (cached). It could be readmitted at once (hit (0,[1]), 4 tokens,
    #   1 block <= 1 free), but a step that preempted admits nobody. In use 2 (R).
    #   R completes at 3320 and frees its 2 blocks.
    # Step 4 [3320, 4360]: V readmitted: reuses 4 (its own block), allotment 4, 1 new block.
    # Step 5 [4360, 5400]: V's last 4 tokens, its token at 5400.
    wl = workload(("R", 0, 4, 3), ("V", 0, 12, 1, [1]))
    result = run(scenario(4, chunk=4, max_batched_tokens=8), wl)
    rows = expanded_trace(result.steps or [])
    assert [row[1:] for row in rows] == [
        (0, 1080, [], [("R", 4), ("V", 4)], 2, []),
        (1080, 2220, ["R"], [("V", 4)], 4, []),
        (2220, 3320, ["R"], [], 2, ["V"]),
        (3320, 4360, [], [("V", 4)], 2, []),
        (4360, 5400, [], [("V", 4)], 3, []),
    ]
    v = by_id(result)["V"]
    assert (v.preemptions, v.reused_prompt_tokens, v.first_scheduled_us) == (1, 0, 0)
    assert times(result) == {"R": [1080, 2220, 3320], "V": [5400]}
    counters = cache_worker(result).kv_counters
    assert counters is not None
    assert counters.reused_tokens == 4


def test_r50_in_whole_mode_a_recompute_longer_than_the_budget_is_split() -> None:
    # R50's "request recomputing after a preemption" is one with preemptions > 0: in "whole"
    # mode it is allotted min(remaining, budget), not R19's all or nothing. B = 4, blocks 3,
    # prefix caching off, whole, max_batched_tokens 9, max_num_seqs 2.
    # A (t 0, prompt 1, 3 out), B (t 0, prompt 8, 3 out).
    # Step 1 [0, 1090]: A 1 (1 block), B 8 (2 blocks): P 9. First tokens at 1090. Free 0.
    # Step 2 [1090, 2190]: A decodes 1 -> 2 (no block). B decodes 8 -> 9, needs a 3rd block:
    #   none, and A is served: B is its own victim (1 token produced). Free 2. No admission.
    # Step 3 [2190, 3370]: A decodes (2 -> 3); budget 8. B readmitted: L = 8 + 1 = 9 > 8, so
    #   R19 would allot it 0 and it would wait; recomputing, it gets min(9, 8) = 8, 2 blocks.
    #   D 1, P 8: 1180. A's 3rd token completes it at 3370; its block is freed.
    # Step 4 [3370, 4380]: B, still in Prefill, gets min(1, 9) = 1 (its 3rd block, A's). Its
    #   recompute is complete: its 2nd token at 4380 (R51).
    # Step 5 [4380, 5480]: B decodes 9 -> 10: its 3rd token completes it.
    # (All or nothing, B would wait until A completes and then prefill 9 in [3370, 4460].)
    wl = workload(("A", 0, 1, 3), ("B", 0, 8, 3))
    result = run(scenario(3, prefix_caching=False, max_batched_tokens=9, max_num_seqs=2), wl)
    rows = expanded_trace(result.steps or [])
    assert [row[1:] for row in rows] == [
        (0, 1090, [], [("A", 1), ("B", 8)], 3, []),
        (1090, 2190, ["A"], [], 1, ["B"]),
        (2190, 3370, ["A"], [("B", 8)], 3, []),
        (3370, 4380, [], [("B", 1)], 3, []),
        (4380, 5480, ["B"], [], 3, []),
    ]
    assert times(result) == {"A": [1090, 2190, 3370], "B": [1090, 4380, 5480]}
    assert by_id(result)["B"].preemptions == 1


# --- R51 ----------------------------------------------------------------------------------------


def test_r51_a_recompute_produces_the_next_token() -> None:
    # B = H = 4, blocks 5, chunked (max_chunk_tokens 4, max_batched_tokens 8).
    # A (t 0, prompt 8, 4 out, [1, 2]); B (t 0, prompt 8, 4 out, [5, 6]).
    # Step 1 [0, 1080]: A 4, B 4 (1 block each). Register (0,[1]), (0,[5]).
    # Step 2 [1080, 2160]: A 4, B 4 (2 blocks each, in use 4). Both first tokens at 2160;
    #   register (1,[1,2]), (1,[5,6]).
    # Step 3 [2160, 3260]: A decodes 8 -> 9: takes the last free block. B needs one too:
    #   none free or cached, A served: B is its own victim, releasing (1,[5,6]) then (0,[5])
    #   to the cached set. In use 3. A's 2nd token at 3260.
    # Steps 4-5 [3260, 5460]: A decodes (cached 10, 11: no block). B at the head: L = 8 + 1
    #   = 9, h <= 2, both its blocks are cached: reuses 8, allotment 1, needs 1 more block:
    #   free 0, cached other than its hits 0: it waits. A completes at 5460, releasing 3.
    # Step 6 [5460, 6470]: B readmitted onto its own blocks, reuses 8, recomputes 1 token
    #   (P 1): the recompute produces its 2nd token (not a first again) at 6470.
    # Steps 7-8: B decodes (cached 10, 11): tokens at 7570, 8670.
    wl = workload(("A", 0, 8, 4, [1, 2]), ("B", 0, 8, 4, [5, 6]))
    result = run(scenario(5, chunk=4, max_batched_tokens=8), wl)
    assert times(result) == {
        "A": [2160, 3260, 4360, 5460],
        "B": [2160, 6470, 7570, 8670],
    }
    b = by_id(result)["B"]
    assert (b.preemptions, b.reused_prompt_tokens, b.first_scheduled_us) == (1, 0, 0)
    rows = expanded_trace(result.steps or [])
    assert rows[5][1:5] == (5460, 6470, [], [("B", 1)])
    worker = cache_worker(result)
    # 5 decode tokens (steps 3, 4, 5, 7, 8) and 3 from prefills (A, B, B's recompute)
    assert (worker.decode_tokens, worker.output_tokens, worker.prefill_tokens) == (5, 8, 17)
    assert worker.kv_counters is not None
    assert (worker.kv_counters.reused_tokens, worker.kv_counters.preemptions) == (8, 1)
    assert [row[5] for row in rows] == [2, 4, 3, 3, 3, 3, 3, 3]


# --- R52 ----------------------------------------------------------------------------------------


def test_r52_cache_counters_add_up() -> None:
    # Two workers, round robin; the R51 pair on worker 0 (A, B) and worker 1 (A2, B2), plus a
    # late request on each that reuses a prefix. Per worker: preemptions are the victims'
    # count, reused tokens the sum over admissions (so at least the first admissions'),
    # peak the largest kv_blocks_in_use of its traced steps. Worker 0 by hand: B preempted
    # once; reused 8 (B's readmission) + 4 (E: prompt 8 [1, 2], arriving at 20000 when (0,[1])
    # and (1,[1,2]) are cached, h <= 1) = 12; peak 4 (step 2).
    wl = workload(
        ("A", 0, 8, 4, [1, 2]),
        ("A2", 0, 8, 4, [1, 2]),
        ("B", 0, 8, 4, [5, 6]),
        ("B2", 0, 8, 4, [5, 6]),
        ("E", 20000, 8, 1, [1, 2]),
        ("E2", 20000, 8, 1, [5, 6]),
    )
    result = run(scenario(5, chunk=4, max_batched_tokens=8, workers=2), wl)
    steps = result.steps or []
    for worker in result.workers:
        assert isinstance(worker.memory, BlockMemory)
        assert worker.kv_counters is not None
        routed = [s for s in result.requests if s.worker == worker.index]
        counters = worker.kv_counters
        assert counters.preemptions == sum(s.preemptions for s in routed)
        assert counters.reused_tokens >= sum(s.reused_prompt_tokens for s in routed)
        assert counters.peak_blocks_in_use == max(
            s.kv_blocks_in_use or 0 for s in steps if s.worker == worker.index
        )
        preempted = [i for s in steps if s.worker == worker.index for i in s.preempted]
        assert len(preempted) == counters.preemptions
    zero = cache_worker(result, 0).kv_counters
    assert zero is not None
    assert (zero.preemptions, zero.reused_tokens, zero.peak_blocks_in_use) == (1, 12, 4)
    assert by_id(result)["E"].reused_prompt_tokens == 4


# --- R53 ----------------------------------------------------------------------------------------


def test_r53_hashes_change_nothing_with_prefix_caching_off() -> None:
    # The R47 workload: with prefix caching off the hashes identify no block, so the replay
    # is the one of the same requests without hashes (and without H). With it on, C reuses
    # 4 tokens, so the comparison can tell.
    requests = [("A", 0, 12, 3), ("B", 0, 12, 2), ("C", 1080, 12, 4)]
    hashed = workload(*[(*r, [1, 2, 3]) for r in requests])
    bare = workload(*requests, hash_block_tokens=None)
    sc_off = scenario(20, chunk=4, max_batched_tokens=12, prefix_caching=False)
    off = run(sc_off, hashed)
    assert times(off) == times(run(sc_off, bare))
    assert expanded_trace(off.steps or []) == expanded_trace(run(sc_off, bare).steps or [])
    assert [s.reused_prompt_tokens for s in off.requests] == [0, 0, 0]
    on = run(scenario(20, chunk=4, max_batched_tokens=12), hashed)
    assert [s.reused_prompt_tokens for s in on.requests] == [0, 0, 4]


# --- decode runs: exactly the steps formed one at a time ----------------------------------------


def _one_step_at_a_time(sc: Scenario, wl: Workload, trace: bool) -> SimulationResult:
    with mock.patch.object(decode_runs, "decode_run_length", return_value=1):
        return run(sc, wl, trace=trace)


def _outcome(result: SimulationResult) -> tuple[Any, ...]:
    """Everything the report reads from a replay, runs written out."""
    requests = [
        (
            s.request.id,
            s.worker,
            s.reject_reason,
            s.first_scheduled_us,
            s.terminal_us,
            s.token_times_us.to_list(),
            s.reused_prompt_tokens,
            s.preemptions,
        )
        for s in result.requests
    ]
    workers = [
        (
            w.steps,
            w.busy_us,
            w.completed,
            w.peak_running,
            w.peak_waiting,
            w.prefill_tokens,
            w.decode_tokens,
            w.output_tokens,
            w.kv_counters,
        )
        for w in result.workers
    ]
    return requests, workers


def test_decode_runs_with_a_cache_are_the_steps_one_at_a_time() -> None:
    # Long decodes in a cache that fills: runs must stop where a block would be evicted or a
    # request preempted, and (traced) wherever a block is taken.
    wl = workload(
        ("A", 0, 5, 40, [1, 2]),
        ("B", 0, 7, 30, [1, 3]),
        ("C", 10, 4, 25),
        ("D", 3000, 8, 20, [1, 2]),
    )
    for blocks in (12, 20, 60):
        sc = scenario(blocks, chunk=4, max_batched_tokens=8)
        walked = _one_step_at_a_time(sc, wl, trace=True)
        for trace in (True, False):
            assert _outcome(run(sc, wl, trace=trace)) == _outcome(walked)
        assert expanded_trace(run(sc, wl).steps or []) == expanded_trace(walked.steps or [])
    # and the runs are still runs where nothing interrupts them
    roomy = run(scenario(60, chunk=4, max_batched_tokens=8), wl, trace=False)
    steps = sum(w.steps for w in roomy.workers)
    walked_steps = _one_step_at_a_time(scenario(60, chunk=4, max_batched_tokens=8), wl, False)
    assert steps == sum(w.steps for w in walked_steps.workers)


# --- invariants on random small replays with tight caches ---------------------------------------


@st.composite
def tight_replays(draw: st.DrawFn) -> tuple[Scenario, Workload]:
    block_tokens = draw(st.integers(1, 4))
    hash_block_tokens = block_tokens * draw(st.integers(1, 3))
    max_num_seqs = draw(st.integers(1, 4))
    chunk = draw(st.one_of(st.none(), st.integers(1, 8)))
    sc = scenario(
        draw(st.integers(1, 12)),
        block_tokens=block_tokens,
        prefix_caching=draw(st.booleans()),
        chunk=chunk,
        max_num_seqs=max_num_seqs,
        max_batched_tokens=draw(st.integers(max_num_seqs, 16)),
        workers=draw(st.integers(1, 2)),
    )
    requests = []
    for index in range(draw(st.integers(1, 8))):
        prompt = draw(st.integers(1, 14))
        most_hashes = -(-prompt // hash_block_tokens)
        hashes = draw(st.lists(st.integers(0, 2), max_size=most_hashes))
        requests.append(
            (f"r{index}", draw(st.integers(0, 3000)), prompt, draw(st.integers(1, 6)), hashes)
        )
    return sc, workload(*requests, hash_block_tokens=hash_block_tokens)


def _check_cache(worker: Worker) -> None:
    """R45, R46, R47: the cache agrees with its holders at every instant observed."""
    cache = cache_of(worker)
    assert cache.free >= 0
    assert 0 <= cache.held <= cache.blocks
    holders: dict[int, int] = {}
    private = 0
    for state in worker.running:
        assert len(state.blocks) == cache.blocks_for(state.cached_tokens)  # R46
        assert state.cached_tokens <= state.prefill_target + len(state.token_times_us)
        for block in state.blocks:
            if block == PRIVATE:
                private += 1
            else:
                holders[block] = holders.get(block, 0) + 1
    assert private + len(holders) == cache.held
    for identity, count in cache.registry.items():
        assert count == holders.get(identity, 0)
        assert (count == 0) == (identity in cache.cached)
    assert all(identity in cache.registry for identity in cache.cached)
    assert all(not state.blocks for state in worker.waiting)


def _checked_replay(sc: Scenario, wl: Workload) -> SimulationResult:
    form, complete = Worker.form_step, Worker.complete_step
    formed = itertools.count(1)
    bound = 200 * sum(r.prompt_tokens + r.max_output_tokens for r in wl.requests)

    def checked_plan(self: Worker, *args: Any) -> Any:
        formed_ = form(self, *args)
        _check_cache(self)
        assert next(formed) <= bound, "liveness: the replay keeps forming steps"
        return formed_

    def checked_complete(self: Worker, step: Step) -> list[RequestState]:
        finished = complete(self, step)
        _check_cache(self)
        return finished

    with (
        mock.patch.object(Worker, "form_step", checked_plan),
        mock.patch.object(Worker, "complete_step", checked_complete),
    ):
        return run(sc, wl)


def _terminal_states(result: SimulationResult) -> Iterator[RequestState]:
    for state in result.requests:
        assert state.terminal_us is not None  # R9: reached a terminal state
        if state.reject_reason is None:
            assert len(state.token_times_us) == state.request.max_output_tokens
            assert state.terminal_us == state.token_times_us.last
        else:
            assert len(state.token_times_us) == 0
            assert state.preemptions == 0
        yield state


@settings(max_examples=300, deadline=None)
@given(tight_replays())
def test_tight_caches_keep_every_invariant(case: tuple[Scenario, Workload]) -> None:
    sc, wl = case
    assert sc.kv_cache is not None
    blocks = sc.kv_cache.blocks
    result = _checked_replay(sc, wl)
    for state in _terminal_states(result):
        tokens = state.token_times_us.to_list()
        assert all(a < b for a, b in itertools.pairwise(tokens))  # R21
        assert all(t > state.request.arrival_us for t in tokens)
        assert 0 <= state.reused_prompt_tokens <= max(0, state.request.prompt_tokens - 1)
    for worker in result.workers:
        assert isinstance(worker.memory, BlockMemory)
        assert worker.kv_counters is not None
        assert worker.kv_counters.peak_blocks_in_use <= blocks
        assert not worker.running
        assert not worker.waiting
    for step in result.steps or []:
        assert step.kv_blocks_in_use is not None
        assert step.kv_blocks_in_use <= blocks
        assert step.decode or step.prefill  # R16, R50: no step without work
    # runs are exactly the steps formed one at a time, traced or not
    walked = _one_step_at_a_time(sc, wl, trace=True)
    assert _outcome(result) == _outcome(walked)
    assert _outcome(run(sc, wl, trace=False)) == _outcome(walked)
    assert expanded_trace(result.steps or []) == expanded_trace(walked.steps or [])


def test_an_untraced_decode_run_evicts_cached_blocks_instead_of_stopping() -> None:
    # B = H = 4, 4 blocks, whole prefill. A (t 0, prompt 8, 1 out, [1, 2]) fills and registers
    # 2 blocks and completes in its first step: cached 2, free 2. B (t 5000, prompt 4, 12 out)
    # takes 1 block for its prefill (free 1); its decode steps reach cached 5 (a second block,
    # the free one), 9 (a third: evicts A's block 1) and 13 (a fourth: evicts A's block 0).
    # Waiting is empty, so no eviction can admit anyone: B's 11 decode steps are one run
    # (form_step is called 3 times), with the same results as one step at a time.
    sc = scenario(4)
    wl = workload(("A", 0, 8, 1, [1, 2]), ("B", 5000, 4, 12))
    plans = itertools.count()
    form = Worker.form_step

    def counted_plan(self: Worker, *args: Any) -> Any:
        next(plans)
        return form(self, *args)

    with mock.patch.object(Worker, "form_step", counted_plan):
        result = run(sc, wl, trace=False)
    assert next(plans) == 3
    assert _outcome(result) == _outcome(_one_step_at_a_time(sc, wl, trace=False))
    counters = cache_worker(result).kv_counters
    assert counters is not None
    assert (counters.evictions, counters.peak_blocks_in_use) == (2, 4)


def test_a_decode_run_stops_before_an_eviction_that_could_admit_the_head() -> None:
    # B = H = 4, 6 blocks, chunks of 4, budget 16. At t 0: P1 (prompt 4, 1 out, [1]), P2
    # (prompt 8, 2 out, [1, 2]), R (prompt 4, 16 out).
    # Step 1 [0, 1120] (P 12): P1 registers (0,[1]); P2's block 0 is a duplicate (R47). P1
    #   completes: (0,[1]) cached as release 0. R has its first token. Held 2, free 3.
    # Step 2 [1120, 2260] (D 1, P 4): R 5 tokens, 2 blocks; P2 fills and registers (1,[1,2]).
    # Step 3 [2260, 3460] (D 2): P2 takes its 3rd block, the last free one, and completes:
    #   (1,[1,2]) cached as 1, its blocks 2 and 0 free. R holds 2; cached 2, free 2.
    # Steps 4.. [3460 + 1100 (s - 4)]: R alone, cached s + 3 in step s. Nobody waits, so its
    #   run may take blocks. Hd (t 10500, prompt 12, 1 out, [1, 2]) cuts it at the end of
    #   step 10, 11160: R has taken the 2 free blocks (steps 6, 10), 4 blocks; free 0.
    # Step 11 [11160, 12260]: Hd hits both cached blocks (h = 2 <= 11 // 4), needs 1 more, and
    #   none is free or evictable but its own: refused. It needs 1 <= free + cached = 2, so an
    #   eviction could let it in: R's run takes no block (steps 11 to 13, cached 14 to 16).
    # Step 14 [14460, 15600]: R's 17th cached token needs a 5th block: it evicts release 0,
    #   (0,[1]). Hd's hit is now 0 blocks, and (1,[1,2]) is evictable for it: admitted with 4
    #   tokens (P 4, D 1), evicting (1,[1,2]); it reuses nothing.
    sc = scenario(6, chunk=4, max_batched_tokens=16)
    wl = workload(
        ("P1", 0, 4, 1, [1]), ("P2", 0, 8, 2, [1, 2]), ("R", 0, 4, 16), ("Hd", 10500, 12, 1, [1, 2])
    )
    for trace in (True, False):
        result = run(sc, wl, trace=trace)
        assert by_id(result)["Hd"].first_scheduled_us == 14460
        assert by_id(result)["Hd"].reused_prompt_tokens == 0
        assert cache_of(cache_worker(result)).counters.evictions == 2
        assert _outcome(result) == _outcome(_one_step_at_a_time(sc, wl, trace=trace))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_untraced_runs_with_tight_caches_are_the_steps_one_at_a_time(data: st.DataObject) -> None:
    # untraced, a run takes blocks (free ones, or by evicting cached ones): never a preemption,
    # an admission or an eviction that one step at a time would not make, in the same order
    sc, wl = data.draw(tight_replays())
    assert _outcome(run(sc, wl, trace=False)) == _outcome(_one_step_at_a_time(sc, wl, False))
