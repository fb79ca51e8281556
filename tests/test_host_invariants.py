"""The host-tier invariants (``servesim_conformance.host_invariants``, SPEC.md R125 to R142):
each can fail, each passes on hand-derived reports, and the reference keeps them.

The hand-derived reports are the issue-28 draft's derivations D2 and D3 (SPEC.md R129 to R140;
one worker of one rank, vLLM style, whole prefill, a GPU cache of 8 blocks of B = 16 tokens with
prefix caching, a host pool of 16 entries, ``bytes_per_token`` 1000: ``block_bytes`` 16,000;
``synthetic_linear`` 5000 / 1000 / 10000 ns, so a step lasts ``5 + P + 10 D`` us):

- D2 (store lane 10^9 B/s: 16 us a block; load lane 2 * 10^9: 8 us a block). A (0 us, P 64
  ``[1,2,3,4]``) runs 0 -> 69 and stores its 4 blocks 69 -> 133. X (140 us, P 120, 7 hashed
  blocks of its own) evicts A's 4 GPU blocks, runs 140 -> 265, stores 7 blocks 265 -> 377. C
  (300 us, P 80 ``[1,2,3,4,5]``): GPU hit 0, host run 4 (A's resident entries): it takes 4 GPU
  blocks (evicting 3 of X's), loads 300 -> 332 (the step formed at 300 has no token and is not
  started, R138), joins at 332, computes 16 tokens 332 -> 353 (evicting one more of X's) and
  stores its block 4 353 -> 393 behind X's store. ``load_wait_us`` 32, reuse 64 all from the
  host.
- D3 (store lane 10^8 B/s: 160 us a block). A runs 0 -> 69 and stores 69 -> 709; B (1 us, P 64
  ``[5,6,7,8]``) runs 69 -> 138, its store waits for the lane: 709 -> 1349; X (200 us, P 112)
  evicts 7 GPU blocks, runs 200 -> 317, stores 7 blocks 1349 -> 2469 (15 entries). C1 (800 us,
  ``[1,2,3,4,9]``) loads A's 4 resident entries 800 -> 832, runs 832 -> 853 and stores its block
  4 (the 16th entry): 2469 -> 2629. C2 (900 us, ``[5,6,7,8,10]``) meets B's entries pending
  (B's store ends at 1349): no host run, it computes all 80 tokens 900 -> 985 and stores only
  its block 4, which takes the place of the least recent resident entry (A's block 3): one host
  eviction, 17 blocks stored, 16 entries. 17 GPU evictions.
- D2 with a stop time at 320: C is still loading at 320, so it is cut off with no
  first-scheduled time, ``load_wait_us`` 0 and no reuse; its load (and X's store, in flight)
  count as submitted.
- D2 without the host pool: C computes its 80 tokens 300 -> 385; every host member is null or 0.

The hand reports hold the members the host invariants read (a full report 10.0 also has the
statistics and counts of sections 7 to 18, which these checks do not read).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim_conformance import host_invariants
from servesim_conformance.properties import reference_report
from servesim_conformance.strategies import (
    continuing_session_input_triples,
    disaggregated_host_input_triples,
    host_input_triples,
    kv_input_triples,
    session_input_triples,
)
from servesim_conformance.violations import InvariantViolation

Document = dict[str, Any]

HOST = {
    "blocks": 16,
    "bytes_per_token": 1000,
    "store_bytes_per_s": 1_000_000_000,
    "load_bytes_per_s": 2_000_000_000,
}


def scenario(*, store: int = 1_000_000_000, host: bool = True, stop: int | None = None) -> Document:
    cache: Document = {"blocks": 8, "block_tokens": 16, "prefix_caching": True}
    if host:
        cache["host"] = {**HOST, "store_bytes_per_s": store}
    result: Document = {
        "document": "scenario",
        "schema_version": "1.8",
        "fleet": {"workers": 1},
        "routing": {"policy": "round_robin"},
        "scheduler": {
            "max_num_seqs": 8,
            "max_batched_tokens": 512,
            "max_model_len": 4096,
            "prefill": {"mode": "whole"},
        },
        "kv_cache": cache,
    }
    if stop is not None:
        result["stop_at_us"] = stop
    return result


def request(
    rid: str,
    arrival: int,
    prompt: int,
    first: int | None,
    completion: int | None,
    *,
    reused: int = 0,
    host_reused: int = 0,
    wait: int | None = 0,
) -> Document:
    completed = completion is not None
    return {
        "id": rid,
        "worker": 0,
        "pool": "default",
        "rank": 0,
        "outcome": "completed" if completed else "cut_off",
        "reject_reason": None,
        "prompt_tokens": prompt,
        "output_tokens": 1 if completed else 0,
        "arrival_us": arrival,
        "first_scheduled_us": first,
        "completion_us": completion,
        "terminal_us": completion,
        "token_times_us": [completion] if completed else [],
        "reused_prompt_tokens": reused,
        "preemptions": 0,
        "handoff": None,
        "host_reused_prompt_tokens": host_reused,
        "load_wait_us": wait,
    }


def host_object(
    stores: int,
    stored: int,
    loads: int,
    loaded: int,
    reused: int,
    evictions: int = 0,
    skipped: int = 0,
) -> Document:
    return {
        "stores": stores,
        "stored_blocks": stored,
        "stored_gigabytes": stored * 16_000 / 10**9,
        "loads": loads,
        "loaded_blocks": loaded,
        "loaded_gigabytes": loaded * 16_000 / 10**9,
        "reused_tokens": reused,
        "evictions": evictions,
        "skipped_blocks": skipped,
    }


def step(start: int, end: int, rid: str, tokens: int) -> Document:
    return {
        "worker": 0,
        "rank": 0,
        "start_us": start,
        "end_us": end,
        "decode_requests": [],
        "prefill": [{"id": rid, "tokens": tokens}],
        "preempted": [],
    }


def transfer(kind: str, rid: str, blocks: range, submitted: int, start: int, end: int) -> Document:
    return {
        "kind": kind,
        "worker": 0,
        "rank": 0,
        "request": rid,
        "blocks": list(blocks),
        "submitted_us": submitted,
        "start_us": start,
        "end_us": end,
    }


def assemble(
    requests: list[Document],
    kv: Document,
    host: Document | None,
    trace: list[Document] | None,
    transfers: list[Document] | None,
) -> Document:
    """A report 10.0 of one worker of one rank in pool ``"default"``."""
    prompt = sum(r["prompt_tokens"] for r in requests if r["outcome"] == "completed")
    completed = [r for r in requests if r["outcome"] == "completed"]
    reused = sum(r["reused_prompt_tokens"] for r in completed)
    host_reused = sum(r["host_reused_prompt_tokens"] for r in completed)
    return {
        "schema_version": "10.0",
        "requests": requests,
        "workers": [
            {
                "worker": 0,
                "pool": "default",
                "kv_cache": kv,
                "host": copy.deepcopy(host),
                "ranks": [{"rank": 0, "kv_cache": copy.deepcopy(kv), "host": copy.deepcopy(host)}],
            }
        ],
        "pools": [{"name": "default", "kv_cache": copy.deepcopy(kv), "host": copy.deepcopy(host)}],
        "summary": {
            "prompt_tokens": prompt,
            "kv_cache": {
                "reused_prompt_tokens": reused,
                "prefix_reuse_ratio": reused / prompt,
                "preemptions": 0,
                "evictions": kv["evictions"],
                "retractions": 0,
                "host_reused_prompt_tokens": host_reused,
                "host_reuse_ratio": host_reused / prompt,
                "gpu_reuse_ratio": (reused - host_reused) / prompt,
                "host": copy.deepcopy(host),
            },
        },
        "trace": trace,
        "host_transfers": transfers,
    }


def kv_cache(peak: int, reused: int, evictions: int) -> Document:
    return {
        "peak_blocks_in_use": peak,
        "reused_tokens": reused,
        "preemptions": 0,
        "evictions": evictions,
        "retractions": 0,
        "peak_reserved_blocks": None,
    }


def report_d2() -> Document:
    return assemble(
        [
            request("A", 0, 64, 0, 69),
            request("X", 140, 120, 140, 265),
            request("C", 300, 80, 332, 353, reused=64, host_reused=64, wait=32),
        ],
        kv_cache(8, 64, 8),
        host_object(3, 12, 1, 4, 64),
        [step(0, 69, "A", 64), step(140, 265, "X", 120), step(332, 353, "C", 16)],
        [
            transfer("store", "A", range(4), 69, 69, 133),
            transfer("store", "X", range(7), 265, 265, 377),
            transfer("load", "C", range(4), 300, 300, 332),
            transfer("store", "C", range(4, 5), 353, 377, 393),
        ],
    )


def report_d3() -> Document:
    return assemble(
        [
            request("A", 0, 64, 0, 69),
            request("B", 1, 64, 69, 138),
            request("X", 200, 112, 200, 317),
            request("C1", 800, 80, 832, 853, reused=64, host_reused=64, wait=32),
            request("C2", 900, 80, 900, 985),
        ],
        kv_cache(7, 64, 17),
        host_object(5, 17, 1, 4, 64, evictions=1),
        [
            step(0, 69, "A", 64),
            step(69, 138, "B", 64),
            step(200, 317, "X", 112),
            step(832, 853, "C1", 16),
            step(900, 985, "C2", 80),
        ],
        [
            transfer("store", "A", range(4), 69, 69, 709),
            transfer("store", "B", range(4), 138, 709, 1349),
            transfer("store", "X", range(7), 317, 1349, 2469),
            transfer("load", "C1", range(4), 800, 800, 832),
            transfer("store", "C1", range(4, 5), 853, 2469, 2629),
            transfer("store", "C2", range(4, 5), 985, 2629, 2789),
        ],
    )


def report_d2_stopped() -> Document:
    """D2 with ``stop_at_us`` 320 (R139): C loading at the stop is cut off."""
    return assemble(
        [
            request("A", 0, 64, 0, 69),
            request("X", 140, 120, 140, 265),
            request("C", 300, 80, None, None),
        ],
        kv_cache(8, 0, 7),
        host_object(2, 11, 1, 4, 0),
        [step(0, 69, "A", 64), step(140, 265, "X", 120)],
        [
            transfer("store", "A", range(4), 69, 69, 133),
            transfer("store", "X", range(7), 265, 265, 377),
            transfer("load", "C", range(4), 300, 300, 332),
        ],
    )


def report_without_host() -> Document:
    """D2's inputs without the host pool: C computes its prompt 300 -> 385."""
    return assemble(
        [
            request("A", 0, 64, 0, 69, wait=None),
            request("X", 140, 120, 140, 265, wait=None),
            request("C", 300, 80, 300, 385, wait=None),
        ],
        kv_cache(8, 0, 8),
        None,
        [step(0, 69, "A", 64), step(140, 265, "X", 120), step(300, 385, "C", 80)],
        [],
    )


#: name -> (scenario, its hand-derived report)
CASES: dict[str, tuple[Callable[[], Document], Callable[[], Document]]] = {
    "d2": (scenario, report_d2),
    "d3": (lambda: scenario(store=100_000_000), report_d3),
    "d2-stopped": (lambda: scenario(stop=320), report_d2_stopped),
    "without-host": (lambda: scenario(host=False), report_without_host),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_hand_derived_reports_keep_every_invariant(case: str) -> None:
    make_scenario, make_report = CASES[case]
    host_invariants.check_host_report(make_scenario(), make_report())


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_hand_derived_reports_keep_them_without_the_trace(case: str) -> None:
    """Without ``--trace`` (``trace`` and ``host_transfers`` null) the figures alone hold."""
    make_scenario, make_report = CASES[case]
    value = make_report()
    value["trace"] = value["host_transfers"] = None
    host_invariants.check_host_report(make_scenario(), value)


def test_the_hand_derived_figures() -> None:
    """The docstring's figures, so that a wrong hand derivation shows here first: lane times
    by R130's formula and the gigabytes of R140."""
    assert host_invariants.lane_time(4, 16_000, 1_000_000_000) == 64
    assert host_invariants.lane_time(4, 16_000, 2_000_000_000) == 32
    assert host_invariants.lane_time(7, 16_000, 100_000_000) == 1120
    assert host_invariants.lane_time(4, 16_000, 3_000_000_000) == 22  # rounds up
    assert report_d3()["workers"][0]["host"]["stored_gigabytes"] == 0.000272
    assert report_d2()["summary"]["kv_cache"]["host_reuse_ratio"] == 64 / 264


# --- Each invariant can fail --------------------------------------------------------------------


def _set(pointer: str, value: Any) -> Callable[[Document], None]:
    def mutate(document: Document) -> None:
        *path, last = pointer.split("/")[1:]
        target: Any = document
        for token in path:
            target = target[int(token)] if isinstance(target, list) else target[token]
        target[int(last) if isinstance(target, list) else last] = value

    return mutate


def _both(*mutations: Callable[[Document], None]) -> Callable[[Document], None]:
    def mutate(document: Document) -> None:
        for each in mutations:
            each(document)

    return mutate


def _append(pointer: str, value: Any) -> Callable[[Document], None]:
    def mutate(document: Document) -> None:
        target: Any = document
        for token in pointer.split("/")[1:]:
            target = target[int(token)] if isinstance(target, list) else target[token]
        target.append(value)

    return mutate


def _nothing(document: Document) -> None:
    del document


Check = Callable[[Document, Document], None]
H = host_invariants
NULLS: Check = H.check_host_nulls
BOUND: Check = H.check_host_pool_bound
SUMS: Check = H.check_host_sums
REUSE: Check = H.check_reuse_tiers
EVICTIONS: Check = H.check_loads_need_gpu_evictions
LANES: Check = H.check_lanes
COUNTS: Check = H.check_transfer_counts
PINNED: Check = H.check_pending_and_pinned
BEFORE_USE: Check = H.check_loads_before_use
WAIT: Check = H.check_load_wait

RANK = "/workers/0/ranks/0"

#: name -> (case, report mutation, scenario mutation, check, rule)
MUTATIONS: dict[
    str, tuple[str, Callable[[Document], None], Callable[[Document], None], Check, str]
] = {
    # R129, R131: the pool's size
    "more entries than the pool holds": (
        "d3",
        _set(f"{RANK}/host/evictions", 0),
        _nothing,
        BOUND,
        "R129",
    ),
    "a smaller pool than the entries stored": (
        "d2",
        _nothing,
        _set("/kv_cache/host/blocks", 11),
        BOUND,
        "R129",
    ),
    "an eviction in a pool never full": (
        "d3",
        _nothing,
        _set("/kv_cache/host/blocks", 17),
        BOUND,
        "R131",
    ),
    "a skipped block in a pool never full": (
        "d2",
        _set(f"{RANK}/host/skipped_blocks", 1),
        _nothing,
        BOUND,
        "R131",
    ),
    # R131, R132: pending and pinned entries are never evicted
    "a store evicting a pending entry": (
        "d3",
        _nothing,
        _set("/kv_cache/host/blocks", 12),
        PINNED,
        "R131",
    ),
    "a store evicting a pinned entry": (
        "d3",
        _set("/host_transfers/4/submitted_us", 810),
        _set("/kv_cache/host/blocks", 15),
        PINNED,
        "R131",
    ),
    "a load of entries not yet stored": (
        "d3",
        _set("/host_transfers/3/submitted_us", 700),
        _nothing,
        PINNED,
        "R132",
    ),
    # R130: lanes
    "two stores overlapping on the store lane": (
        "d3",
        _set("/host_transfers/1/start_us", 138),
        _nothing,
        LANES,
        "R130",
    ),
    "a transfer not lasting R130's time": (
        "d2",
        _set("/host_transfers/2/end_us", 333),
        _nothing,
        LANES,
        "R130",
    ),
    "a load lane that is not FIFO": (
        "d2",
        _set("/host_transfers/3/start_us", 353),
        _nothing,
        LANES,
        "R130",
    ),
    "transfers out of submission order": (
        "d3",
        _set("/host_transfers/2/submitted_us", 100),
        _nothing,
        LANES,
        "R140",
    ),
    "a load reaching past the cap": (
        "d2",
        _both(
            _set("/host_transfers/2/blocks", [0, 1, 2, 3, 4]),
            _set("/host_transfers/2/end_us", 340),
        ),
        _nothing,
        LANES,
        "R133",
    ),
    "blocks out of block order": (
        "d2",
        _set("/host_transfers/0/blocks", [0, 2, 1, 3]),
        _nothing,
        LANES,
        "R131",
    ),
    "a transfer for a request routed elsewhere": (
        "d2",
        _set("/host_transfers/0/request", "nobody"),
        _nothing,
        LANES,
        "R140",
    ),
    "a transfer on a scheduler without a host pool": (
        "without-host",
        _set("/host_transfers", [transfer("store", "A", range(4), 69, 69, 133)]),
        _nothing,
        LANES,
        "R129",
    ),
    # R140: the transfer list and the counters
    "a rank's stores not its transfers'": (
        "d3",
        _set(f"{RANK}/host/stores", 4),
        _nothing,
        COUNTS,
        "R140",
    ),
    "a rank's loaded blocks not its transfers'": (
        "d2",
        _set(f"{RANK}/host/loaded_blocks", 5),
        _nothing,
        COUNTS,
        "R140",
    ),
    "a worker's counter not its ranks' sum": (
        "d3",
        _set("/workers/0/host/evictions", 2),
        _nothing,
        SUMS,
        "R140",
    ),
    "a pool's counter not its workers' sum": (
        "d2",
        _set("/pools/0/host/stores", 2),
        _nothing,
        SUMS,
        "R140",
    ),
    "gigabytes not R24 of the blocks": (
        "d3",
        _set(f"{RANK}/host/stored_gigabytes", 0.000273),
        _nothing,
        SUMS,
        "R140",
    ),
    "the summary's host not the workers'": (
        "d2",
        _set("/summary/kv_cache/host/loaded_blocks", 8),
        _nothing,
        SUMS,
        "R140",
    ),
    # R137, R140: reuse per tier
    "a host part larger than the reuse": (
        "d3",
        _set("/requests/3/host_reused_prompt_tokens", 80),
        _nothing,
        REUSE,
        "R137",
    ),
    "a host part not its first admission's load": (
        "d2",
        _both(
            _set("/requests/2/host_reused_prompt_tokens", 48),
            _set("/summary/kv_cache/host_reused_prompt_tokens", 48),
            _set("/summary/kv_cache/host_reuse_ratio", 48 / 264),
            _set("/summary/kv_cache/gpu_reuse_ratio", 16 / 264),
        ),
        _nothing,
        REUSE,
        "R137",
    ),
    "a host part for a request never admitted": (
        "d2-stopped",
        _set("/requests/2/host_reused_prompt_tokens", 64),
        _nothing,
        REUSE,
        "R137",
    ),
    "a rank's host reuse short of its loads without a stop": (
        "d3",
        _set(f"{RANK}/host/reused_tokens", 48),
        _nothing,
        REUSE,
        "R137",
    ),
    "a rank's host reuse beyond its reuse": (
        "d2-stopped",
        _set(f"{RANK}/host/reused_tokens", 16),
        _nothing,
        REUSE,
        "R137",
    ),
    "the summary's host part not the requests'": (
        "d3",
        _set("/summary/kv_cache/host_reused_prompt_tokens", 0),
        _nothing,
        REUSE,
        "R140",
    ),
    "a gpu reuse ratio that is not the gpu part's": (
        "d2",
        _set("/summary/kv_cache/gpu_reuse_ratio", 64 / 264),
        _nothing,
        REUSE,
        "R140",
    ),
    "a load on a rank that never evicted": (
        "d2",
        _set(f"{RANK}/kv_cache/evictions", 0),
        _nothing,
        EVICTIONS,
        "R133",
    ),
    # R134, R135, R139: loads complete before their blocks are used
    "a step computing for a loading request": (
        "d3",
        _set("/trace/3/start_us", 820),
        _nothing,
        BEFORE_USE,
        "R134",
    ),
    "a loading request preempted": (
        "d2",
        _append("/trace", {**step(310, 320, "X", 1), "prefill": [], "preempted": ["C"]}),
        _nothing,
        BEFORE_USE,
        "R134",
    ),
    "first scheduled before the load's end": (
        "d2",
        _set("/requests/2/first_scheduled_us", 320),
        _nothing,
        BEFORE_USE,
        "R135",
    ),
    "completed before its load's end": (
        "d3",
        _set("/requests/3/completion_us", 830),
        _nothing,
        BEFORE_USE,
        "R135",
    ),
    "completed although loading at the stop": (
        "d2",
        _nothing,
        _set("/stop_at_us", 320),
        BEFORE_USE,
        "R139",
    ),
    # R140: load_wait_us
    "a load wait without its load": (
        "d3",
        _set("/requests/3/load_wait_us", 0),
        _nothing,
        WAIT,
        "R140",
    ),
    "a load wait counting a load cut by the stop": (
        "d2-stopped",
        _set("/requests/2/load_wait_us", 32),
        _nothing,
        WAIT,
        "R140",
    ),
    "a null load wait beside a host pool": (
        "d2",
        _set("/requests/0/load_wait_us", None),
        _nothing,
        WAIT,
        "R140",
    ),
    "a load wait without a host pool": (
        "without-host",
        _set("/requests/1/load_wait_us", 0),
        _nothing,
        WAIT,
        "R140",
    ),
    # R140, R141: nulls
    "a host object without a host pool": (
        "without-host",
        _set(f"{RANK}/host", host_object(0, 0, 0, 0, 0)),
        _nothing,
        NULLS,
        "R140",
    ),
    "a null host object beside a host pool": (
        "d2",
        _set("/pools/0/host", None),
        _nothing,
        NULLS,
        "R140",
    ),
    "host transfers without the trace": (
        "d2",
        _set("/trace", None),
        _nothing,
        NULLS,
        "R140",
    ),
    "a host part without a host pool": (
        "without-host",
        _set("/requests/2/host_reused_prompt_tokens", 16),
        _nothing,
        NULLS,
        "R141",
    ),
    "a gpu ratio unlike the prefix ratio without a host pool": (
        "without-host",
        _set("/summary/kv_cache/gpu_reuse_ratio", 0.5),
        _nothing,
        NULLS,
        "R141",
    ),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_invariant_can_fail(name: str) -> None:
    case, mutate_report, mutate_scenario, check, rule = MUTATIONS[name]
    make_scenario, make_report = CASES[case]
    value, derived = make_scenario(), make_report()
    check(value, derived)  # the hand-derived report passes the same check
    broken_scenario, broken = copy.deepcopy(value), copy.deepcopy(derived)
    mutate_report(broken)
    mutate_scenario(broken_scenario)
    with pytest.raises(InvariantViolation, match=f"^{rule}:"):
        check(broken_scenario, broken)


# --- The reference on generated inputs ----------------------------------------------------------

GENERATED = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _reference_keeps(documents: tuple[Document, ...], *, trace: bool = True) -> None:
    value = json.loads(reference_report(documents, trace=trace))  # type: ignore[arg-type]
    host_invariants.check_host_report(documents[0], value)


@GENERATED
@given(documents=host_input_triples())
def test_the_reference_keeps_every_host_invariant(documents: tuple[Document, ...]) -> None:
    """Generated fleets with host pools: small GPU caches and host pools, every bandwidth,
    shared prefixes, continuing sessions, stop times, pools, ranks, styles beside them."""
    _reference_keeps(documents)


@GENERATED
@given(documents=disaggregated_host_input_triples())
def test_the_reference_keeps_every_host_invariant_disaggregated(
    documents: tuple[Document, ...],
) -> None:
    """The same on disaggregated fleets (R139): host pools on prefill and decode pools."""
    _reference_keeps(documents)


@GENERATED
@given(documents=host_input_triples())
def test_the_reference_keeps_them_without_the_trace(documents: tuple[Document, ...]) -> None:
    """The checks that need only the report's figures, on reports without ``--trace``."""
    _reference_keeps(documents, trace=False)


# The traceability rows' tests (SPEC.md section 20): each shows its invariant failing on a
# corrupted report, passing on the hand-derived ones, and kept by the reference.


def _fails_and_holds(*names: str) -> None:
    for name in names:
        test_each_invariant_can_fail(name)
    for case in CASES:
        test_the_hand_derived_reports_keep_every_invariant(case)


def test_entries_never_exceed_the_host_pool() -> None:
    """R129: entries never exceed ``blocks`` (from the report's figures alone)."""
    _fails_and_holds(
        "more entries than the pool holds",
        "a smaller pool than the entries stored",
        "an eviction in a pool never full",
        "a skipped block in a pool never full",
    )


def test_each_lane_is_fifo_and_never_overlaps() -> None:
    """R130: FIFO lanes, R130's durations, submission order (with ``--trace``)."""
    _fails_and_holds(
        "two stores overlapping on the store lane",
        "a transfer not lasting R130's time",
        "a load lane that is not FIFO",
        "transfers out of submission order",
    )


def test_pinned_and_pending_entries_are_never_evicted() -> None:
    """R131, R132: a store finds room without evicting a pending or pinned entry; a load reads
    entries stored before it (with ``--trace``)."""
    _fails_and_holds(
        "a store evicting a pending entry",
        "a store evicting a pinned entry",
        "a load of entries not yet stored",
    )


def test_no_block_is_used_before_its_load_completes() -> None:
    """R134, R135, R139 (with ``--trace``)."""
    _fails_and_holds(
        "a step computing for a loading request",
        "a loading request preempted",
        "first scheduled before the load's end",
        "completed before its load's end",
        "completed although loading at the stop",
    )


def test_reuse_per_tier_sums() -> None:
    """R137, R140: host + GPU = reuse, per request, per rank and in the summary."""
    _fails_and_holds(
        "a host part larger than the reuse",
        "a host part not its first admission's load",
        "a host part for a request never admitted",
        "a rank's host reuse short of its loads without a stop",
        "a rank's host reuse beyond its reuse",
        "the summary's host part not the requests'",
        "a gpu reuse ratio that is not the gpu part's",
    )


# --- R127, R128: generated tokens' blocks only inside continuing pairs (differential) ----------


def without_the_flag(workload: Document) -> Document:
    """``workload`` without ``session_prompts_extend`` (R125: absent means ``false``)."""
    result = copy.deepcopy(workload)
    result.pop("session_prompts_extend", None)
    return result


def continuing_pairs(workload: Document, *, permissive: bool = False) -> list[tuple[str, str]]:
    """R125: the pairs (turn k, turn k+1) of ``workload`` that continue. R125 compares turn
    k+1's list with "the first ``floor(P_k / H)`` hashes of turn k's", which a turn k with fewer
    hashes than that does not have: strictly read, such a pair does not continue; with
    ``permissive`` it does when turn k+1's list begins with all of turn k's hashes (the other
    reading, which the properties below must not depend on)."""
    if not workload.get("session_prompts_extend"):
        return []
    size = workload["prefix_hash_block_tokens"]
    last: dict[str, Document] = {}
    pairs = []
    for request in workload["requests"]:
        name = request.get("session")
        if name is None:
            continue
        previous = last.get(name)
        last[name] = request
        if previous is None:
            continue
        mine, theirs = request.get("prefix_hashes"), previous.get("prefix_hashes")
        full = previous["prompt_tokens"] // size
        if mine is None or theirs is None or full < 1:
            continue
        if request["prompt_tokens"] <= previous["prompt_tokens"]:
            continue
        head = full if not permissive else min(full, len(theirs))
        if len(theirs) >= head and mine[:head] == theirs[:head]:
            pairs.append((previous["id"], request["id"]))
    return pairs


@st.composite
def broken_continuations(draw: st.DrawFn) -> tuple[Document, ...]:
    """A triple whose workload has ``session_prompts_extend`` and sessions whose turns were
    drawn to extend (``continuing_session_input_triples``, with or without host pools), each
    later turn that continues under either reading of R125 (``continuing_pairs``) then made not
    to: its first hash replaced by one no other list has, or (when that is not enough, or one
    time in three) its prompt cut to the previous turn's (its hashes cut to R4's bound)."""
    scenario, workload, timing = draw(
        st.one_of(
            continuing_session_input_triples(),
            host_input_triples(continuing_session_input_triples()),
        )
    )
    workload = copy.deepcopy(workload)
    workload["session_prompts_extend"] = True
    size = workload["prefix_hash_block_tokens"]
    by_id = {request["id"]: request for request in workload["requests"]}
    fresh = 7_000_000
    while pairs := continuing_pairs(workload, permissive=True):
        before, later = (by_id[rid] for rid in pairs[0])
        hashes = later["prefix_hashes"]
        if (
            hashes
            and before["prefix_hashes"]
            and hashes[0] != fresh - 1
            and draw(st.integers(0, 2))
        ):
            later["prefix_hashes"] = [fresh, *hashes[1:]]
            fresh += 1
        else:
            later["prompt_tokens"] = before["prompt_tokens"]
            later["prefix_hashes"] = hashes[: -(-later["prompt_tokens"] // size)]
    return scenario, workload, timing


def same_but_the_workload_digest(
    documents: tuple[Document, ...], others: tuple[Document, ...]
) -> bool:
    """Whether the reference's two reports are equal but for the workload's digest (R30: the
    workloads' bytes differ by the flag and the version)."""
    first = json.loads(reference_report(documents))  # type: ignore[arg-type]
    second = json.loads(reference_report(others))  # type: ignore[arg-type]
    first["inputs"]["workload"] = second["inputs"]["workload"]
    return bool(first == second)


@GENERATED
@given(documents=broken_continuations())
def test_r127_identifies_no_block_outside_a_continuing_pair(
    documents: tuple[Document, ...],
) -> None:
    """R127, R128: where no pair continues, ``session_prompts_extend`` changes nothing: the
    report with it is the report without it but for the workload's digest (R30): no answer
    block is identified and no canonical hash differs from a turn's own. (Where pairs
    continue, a request outside sessions may reuse more with the flag: R127's blocks are
    registered like any other, so an outsider whose hashes match a continuing turn's may hit a
    previous turn's answer; see ``test_r127_an_outsider_may_hit_an_answer_block``.)"""
    scenario, workload, timing = documents
    assert same_but_the_workload_digest(documents, (scenario, without_the_flag(workload), timing))


def test_r127_an_outsider_may_hit_an_answer_block() -> None:
    """Why the property above needs every pair broken: D1's session (t0 P 32 ``[1,2]`` with 33
    output tokens; t1 P 80 ``[1,2,3,4,5]``, released 1000 us after t0's answer) and a request Y
    outside sessions (600 us, P 64 ``[1,2,3,4]``). With the flag t0's answer blocks 2 and 3 are
    registered as ``(2,[1,2,3])`` and ``(3,[1,2,3,4])`` (R127) when t0 fills them, and Y, which
    arrives after t0 completed at 517 and before t1, hits 3 blocks (its cap, 48 tokens); without
    the flag only t0's prompt blocks are identified and Y hits 2 (32). (t1 reuses 64 either way:
    Y registered its own blocks 0 to 3 before t1 arrives.)"""
    cache = {"blocks": 32, "block_tokens": 16, "prefix_caching": True}
    base = scenario(host=False)
    base["kv_cache"] = cache
    workload: Document = {
        "document": "workload",
        "schema_version": "1.3",
        "prefix_hash_block_tokens": 16,
        "session_prompts_extend": True,
        "sessions": [{"id": "s"}],
        "requests": [
            {
                "id": "t0",
                "arrival_us": 0,
                "prompt_tokens": 32,
                "max_output_tokens": 33,
                "prefix_hashes": [1, 2],
                "session": "s",
            },
            {
                "id": "Y",
                "arrival_us": 600,
                "prompt_tokens": 64,
                "max_output_tokens": 1,
                "prefix_hashes": [1, 2, 3, 4],
            },
            {
                "id": "t1",
                "arrival_us": 600,
                "prompt_tokens": 80,
                "max_output_tokens": 1,
                "prefix_hashes": [1, 2, 3, 4, 5],
                "session": "s",
                "think_time_us": 1000,
            },
        ],
    }
    timing = {
        "document": "timing_profile",
        "schema_version": "1.0",
        "model": {
            "kind": "synthetic_linear",
            "step_overhead_ns": 5000,
            "prefill_token_ns": 1000,
            "decode_token_ns": 10000,
        },
    }
    reused = {}
    for flag, documents in (
        ("on", (base, workload, timing)),
        ("off", (base, without_the_flag(workload), timing)),
    ):
        value = json.loads(reference_report(documents))
        reused[flag] = {r["id"]: r["reused_prompt_tokens"] for r in value["requests"]}
        host_invariants.check_host_report(base, value)
    assert reused["on"]["Y"] == 48
    assert reused["off"]["Y"] == 32
    assert reused["on"]["t1"] == reused["off"]["t1"] == 64  # Y registered blocks 0 to 3


@GENERATED
@given(documents=session_input_triples(kv_input_triples()))
def test_the_flag_without_continuing_sessions_changes_nothing(
    documents: tuple[Document, ...],
) -> None:
    """R125, R128: sessions drawn without extending turns (most pairs then do not continue);
    where none does, the flag changes nothing."""
    scenario, workload, timing = documents
    flagged = {**copy.deepcopy(workload), "schema_version": "1.3", "session_prompts_extend": True}
    if continuing_pairs(flagged, permissive=True):
        return
    assert same_but_the_workload_digest((scenario, flagged, timing), (scenario, workload, timing))


def test_extending_sessions_continue() -> None:
    """The strategy's point: generated sessions' pairs continue (R125) in a good share of the
    examples (about 40 %: single-request workloads, single-turn sessions and the flag drawn
    ``false`` make the rest)."""
    seen: list[int] = []

    @settings(
        max_examples=100,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    @given(documents=continuing_session_input_triples(kv_input_triples()))
    def count(documents: tuple[Document, ...]) -> None:
        seen.append(len(continuing_pairs(documents[1])))

    count()
    assert sum(1 for pairs in seen if pairs) >= len(seen) // 4
