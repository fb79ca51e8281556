"""The plain loop's section 19 (R125 to R140, the issue-28 draft's H1 to H16) against numbers
derived by hand.

``conformance/examples/independent/servesim_independent.py`` was extended from the draft's
SPEC.md text, its amendments and ``mapping.md`` alone (``QUESTIONS-host.md`` beside it lists the
readings it took). These tests hold it to small scenarios whose every expected value is worked
out below from that text: a store and a load after a GPU hit (R129 to R134), FIFO lanes (R130),
host eviction and skipped blocks (R131, R132), a store completing at the instant a head is
offered admission (R136), a load cut by the stop time (R139), continuing turns whose answer
blocks are reused (R125 to R127), R4's new checks (exit 2 at the ``host`` member or the workload
member) and R141's versions. They also hold its report 10.0 to the 9.0 -> 10.0 migration of
every golden case (mapping.md item 2: the inputs have no host pool and no
``session_prompts_extend``, so the figures cannot change), and, once the corpus has them, to the
hand-derived ``golden/valid/session-*`` and ``golden/valid/host-*`` cases.

The timing profile is ``synthetic_linear`` with a 1000 us step overhead, 1 us per prefill token
and nothing per decode: a step lasts ``1000 + P`` us (R22).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from tests.golden_cases import (
    GOLDEN,
    MANIFEST,
    derived_cases,
    derived_values,
    replay_case,
    wrong_values,
)
from tests.test_differential import PLAIN

PROFILE = {
    "document": "timing_profile",
    "schema_version": "1.0",
    "model": {
        "kind": "synthetic_linear",
        "step_overhead_ns": 1_000_000,
        "prefill_token_ns": 1000,
        "decode_token_ns": 0,
    },
}
SCHEDULER = {
    "max_num_seqs": 4,
    "max_batched_tokens": 64,
    "max_model_len": 64,
    "prefill": {"mode": "whole"},
}
#: block_bytes = 16 * 1000 = 16,000 bytes; at 16,000,000 bytes/s a block moves in 1000 us
HOST = {
    "blocks": 8,
    "bytes_per_token": 1000,
    "store_bytes_per_s": 16_000_000,
    "load_bytes_per_s": 16_000_000,
}


def scenario(blocks: int = 4, host: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    return {
        "document": "scenario",
        "schema_version": "1.8",
        "fleet": {"workers": 1},
        "routing": {"policy": "round_robin"},
        "scheduler": copy.deepcopy(SCHEDULER),
        "kv_cache": {
            "blocks": blocks,
            "block_tokens": 16,
            "prefix_caching": True,
            "host": dict(HOST if host is None else host),
        },
        **more,
    }


def request(rid: str, t: int, prompt: int, out: int, hashes: list[int], **more: Any) -> Any:
    return {
        "id": rid,
        "arrival_us": t,
        "prompt_tokens": prompt,
        "max_output_tokens": out,
        "prefix_hashes": hashes,
        **more,
    }


def workload(*requests: Any, version: str = "1.1", **more: Any) -> dict[str, Any]:
    return {
        "document": "workload",
        "schema_version": version,
        "prefix_hash_block_tokens": 16,
        "requests": list(requests),
        **more,
    }


def run(
    folder: Path, scenario_doc: Any, workload_doc: Any, *options: str
) -> tuple[int, str, dict[str, Any] | None]:
    """The plain loop's exit code, standard error and report (report 10.0, with the trace)."""
    for name, document in (("s", scenario_doc), ("w", workload_doc), ("t", PROFILE)):
        (folder / f"{name}.json").write_text(json.dumps(document))
    output = folder / "r.json"
    output.unlink(missing_ok=True)
    arguments = ["replay", "--scenario", str(folder / "s.json")]
    arguments += ["--workload", str(folder / "w.json"), "--output", str(output)]
    arguments += ["--timing-profile", str(folder / "t.json"), "--trace"]
    if "--report-version" not in options:
        arguments += ["--report-version", "10.0"]
    error = io.StringIO()
    with contextlib.redirect_stderr(error):
        code = PLAIN.main([*arguments, *options])
    report = json.loads(output.read_text()) if output.exists() else None
    return code, error.getvalue(), report


def ok(folder: Path, scenario_doc: Any, workload_doc: Any) -> dict[str, Any]:
    code, error, report = run(folder, scenario_doc, workload_doc)
    assert (code, error) == (0, "")
    assert report is not None
    assert report["schema_version"] == "10.0"
    return report


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in report["requests"]}


def transfers(report: dict[str, Any]) -> list[tuple[str, str, list[int], int, int, int]]:
    return [
        (x["kind"], x["request"], x["blocks"], x["submitted_us"], x["start_us"], x["end_us"])
        for x in report["host_transfers"]
    ]


def host_counts(host: dict[str, Any]) -> tuple[int, ...]:
    keys = ("stores", "stored_blocks", "loads", "loaded_blocks", "reused_tokens")
    return tuple(host[k] for k in (*keys, "evictions", "skipped_blocks"))


def migrate_9_to_10(report: dict[str, Any]) -> dict[str, Any]:
    """R141's step 9.0 -> 10.0 (draft H17 with mapping.md item 2): exact for a report of inputs
    without a host pool."""
    new = copy.deepcopy(report)
    new["schema_version"] = "10.0"
    for r in new["requests"]:
        r["host_reused_prompt_tokens"] = 0
        r["load_wait_us"] = None
    for w in new["workers"]:
        w["host"] = None
        for rank in w["ranks"]:
            rank["host"] = None
    for p in new["pools"]:
        p["host"] = None
    kv = new["summary"]["kv_cache"]
    if kv is not None:
        kv["host_reused_prompt_tokens"] = 0
        kv["host_reuse_ratio"] = 0 if new["summary"]["prompt_tokens"] > 0 else None
        kv["gpu_reuse_ratio"] = kv["prefix_reuse_ratio"]
        kv["host"] = None
    new["host_transfers"] = None if new["trace"] is None else []
    return new


# ---- Old cases: report 10.0 is the migration of report 9.0 ----

#: Every valid golden case with an expected report 9.0 (the exit-3 cases have none).
OLD_VALID = sorted(
    path.parent.name
    for path in (GOLDEN / "valid").glob("*/expected-report.json")
    if json.loads(path.read_text())["schema_version"] == "9.0"
)


@pytest.mark.parametrize("name", OLD_VALID)
def test_r141_every_old_case_s_report_10_is_the_migration_of_its_report_9(
    name: str, tmp_path: Path
) -> None:
    """Report 9.0 is still the golden report, byte for byte; and (mapping item 2) report 10.0 of
    inputs without a host pool adds exactly H16's members (R140) with the values the migration
    gives: every other byte is the golden report 9.0's."""
    case = GOLDEN / "valid" / name
    output = tmp_path / "r.json"
    code, error = replay_case(PLAIN, case, output, "--report-version", "9.0")
    assert (code, error) == (0, "")
    assert output.read_bytes() == (case / "expected-report.json").read_bytes()
    code, error = replay_case(PLAIN, case, output, "--report-version", "10.0")
    assert (code, error) == (0, "")
    expected = json.loads((case / "expected-report.json").read_text())
    assert output.read_bytes() == rfc8785.dumps(migrate_9_to_10(expected)) + b"\n"


# ---- Hand-derived scenarios ----


def test_r133_r134_a_gpu_hit_then_a_host_run_is_loaded(tmp_path: Path) -> None:
    """GPU 4 blocks of 16 tokens, host 8 entries, 1000 us a block on each lane.

    A (0, prompt 33, hashes 1 2 3): step 0-1033 registers blocks 0 and 1 and stores them
    (submitted 1033, 2 blocks, end 3033, R130, R131). A releases: block 1 gets release 0,
    block 0 release 1. B (5000, prompt 48, hashes 7 8 9) takes 3 blocks: the 2 free ones and A's
    block 1 (eviction 1); step 5000-6048 stores its 3 blocks (6048-9048). C (10000, prompt 33,
    A's hashes): GPU hit g = 1 (A's block 0), host run m = 1 (block 1's entry is resident since
    3033, and g + m <= floor(32 / 16)); it takes 1 block (eviction 2) and loads it 10000-11000
    (R134). At 11000 it is loaded, its worker is scheduled (R134), it joins with 32 cached
    tokens (R135): step 11000-12001 computes 1 token and takes a third block (eviction 3). Its
    reuse is 32 tokens, 16 from the host (R137); load_wait_us 1000, queue_us 1000 (R140)."""
    w = workload(
        request("A", 0, 33, 1, [1, 2, 3]),
        request("B", 5000, 48, 1, [7, 8, 9]),
        request("C", 10000, 33, 1, [1, 2, 3]),
    )
    report = ok(tmp_path, scenario(), w)
    assert transfers(report) == [
        ("store", "A", [0, 1], 1033, 1033, 3033),
        ("store", "B", [0, 1, 2], 6048, 6048, 9048),
        ("load", "C", [1], 10000, 10000, 11000),
    ]
    reqs = by_id(report)
    c = reqs["C"]
    assert (c["first_scheduled_us"], c["queue_us"], c["token_times_us"]) == (11000, 1000, [12001])
    assert (c["reused_prompt_tokens"], c["host_reused_prompt_tokens"], c["load_wait_us"]) == (
        32,
        16,
        1000,
    )
    for rid in ("A", "B"):
        assert (reqs[rid]["host_reused_prompt_tokens"], reqs[rid]["load_wait_us"]) == (0, 0)
    worker = report["workers"][0]
    assert host_counts(worker["host"]) == (2, 5, 1, 1, 16, 0, 0)
    assert worker["host"]["stored_gigabytes"] == 5 * 16000 / 10**9
    assert worker["host"]["loaded_gigabytes"] == 16000 / 10**9
    assert worker["ranks"][0]["host"] == worker["host"] == report["pools"][0]["host"]
    kv = report["summary"]["kv_cache"]
    assert kv["host"] == worker["host"]
    assert (kv["reused_prompt_tokens"], kv["host_reused_prompt_tokens"], kv["evictions"]) == (
        32,
        16,
        3,
    )
    assert kv["host_reuse_ratio"] == 16 / 114
    assert kv["gpu_reuse_ratio"] == 16 / 114
    assert kv["prefix_reuse_ratio"] == 32 / 114
    step = report["trace"][-1]
    assert (step["start_us"], step["end_us"], step["prefill"]) == (
        11000,
        12001,
        [{"id": "C", "tokens": 1}],
    )
    assert step["kv_blocks_in_use"] == 3


def lanes_case(r_at: int, with_s: bool) -> dict[str, Any]:
    requests = [
        request("P", 0, 32, 1, [1, 2]),
        request("Q", 1100, 32, 1, [3, 4]),
        request("R", r_at, 33, 1, [1, 2, 9]),
    ]
    if with_s:
        requests.append(request("S", 6000, 33, 1, [3, 4, 9]))
    return workload(*requests)


def test_r130_a_fifo_store_lane_and_r133_a_pending_entry_ends_the_run(tmp_path: Path) -> None:
    """GPU 3 blocks, host 8 entries. P (0, 32 tokens, hashes 1 2) stores blocks 0, 1 from 1032
    to 3032. Q (1100, hashes 3 4) takes the free block and P's block 1 (eviction 1); its store,
    submitted at 2132, waits for the lane: 3032-5032 (R130). R (2500, 33 tokens, hashes 1 2 9):
    GPU hit 1 (P's block 0); block 1's entry is pending until 3032, so the run is empty (R133)
    and R is admitted with m = 0: 17 tokens, 2 blocks (Q's, evictions 2 and 3), 2500-3517. Its
    block 1 is registered again and offered, but its identity has an entry: left out (R131).
    S (6000, hashes 3 4 9): no GPU hit (Q's blocks were evicted), a host run of 2 (resident since
    5032): it takes R's free block 2 and R's block 1 (eviction 4), loads 6000-8000, joins at 8000
    with 32 cached tokens and computes 1, taking P's block 0 (eviction 5): token 9001."""
    report = ok(tmp_path, scenario(blocks=3), lanes_case(2500, True))
    assert transfers(report) == [
        ("store", "P", [0, 1], 1032, 1032, 3032),
        ("store", "Q", [0, 1], 2132, 3032, 5032),
        ("load", "S", [0, 1], 6000, 6000, 8000),
    ]
    reqs = by_id(report)
    r, s = reqs["R"], reqs["S"]
    assert (r["token_times_us"], r["reused_prompt_tokens"], r["host_reused_prompt_tokens"]) == (
        [3517],
        16,
        0,
    )
    assert (s["first_scheduled_us"], s["token_times_us"], s["load_wait_us"]) == (8000, [9001], 2000)
    assert (s["reused_prompt_tokens"], s["host_reused_prompt_tokens"]) == (32, 32)
    assert host_counts(report["workers"][0]["host"]) == (2, 4, 1, 2, 32, 0, 0)
    kv = report["summary"]["kv_cache"]
    assert (kv["evictions"], kv["reused_prompt_tokens"], kv["host_reused_prompt_tokens"]) == (
        5,
        48,
        32,
    )
    assert kv["gpu_reuse_ratio"] == 16 / 130


def test_r136_a_store_completing_at_an_arrival_is_seen_by_its_admission(tmp_path: Path) -> None:
    """As above, R arriving at 3032, the instant P's store ends: the host transfer completion
    is processed first (R136), so R's block 1 is resident when R is offered admission at 3032:
    GPU hit 1, host run 1, a load 3032-4032 on the load lane (independent of Q's store, which
    runs 3032-5032 on the store lane), then 1 token 4032-5033. Processed after the arrival, the
    entry would be pending and R would prefill 17 tokens to 4049."""
    report = ok(tmp_path, scenario(blocks=3), lanes_case(3032, False))
    assert transfers(report) == [
        ("store", "P", [0, 1], 1032, 1032, 3032),
        ("store", "Q", [0, 1], 2132, 3032, 5032),
        ("load", "R", [1], 3032, 3032, 4032),
    ]
    r = by_id(report)["R"]
    assert (r["first_scheduled_us"], r["token_times_us"], r["load_wait_us"]) == (4032, [5033], 1000)
    assert (r["reused_prompt_tokens"], r["host_reused_prompt_tokens"]) == (32, 16)


def test_r139_a_load_in_flight_at_the_stop_time_is_cut(tmp_path: Path) -> None:
    """The first lanes case stopped at 7000: S's load (6000-8000) is in flight, so S is cut off
    while loading: no first-scheduled time, no reuse, load_wait_us 0 (no load completed); the
    load is counted as submitted and listed with the end R130 computed (R139, R140)."""
    report = ok(tmp_path, scenario(blocks=3, stop_at_us=7000), lanes_case(2500, True))
    assert transfers(report)[-1] == ("load", "S", [0, 1], 6000, 6000, 8000)
    s = by_id(report)["S"]
    assert (s["outcome"], s["terminal_us"], s["first_scheduled_us"]) == ("cut_off", 7000, None)
    assert (s["reused_prompt_tokens"], s["host_reused_prompt_tokens"], s["load_wait_us"]) == (
        0,
        0,
        0,
    )
    assert host_counts(report["workers"][0]["host"]) == (2, 4, 1, 2, 0, 0, 0)
    assert report["summary"]["cut_off"] == 1


def test_r131_r132_skipped_blocks_and_host_eviction_deepest_first(tmp_path: Path) -> None:
    """GPU 4 blocks, host 2 entries. X (0, 48 tokens, hashes 1 2 3) registers 3 blocks at 1048:
    blocks 0 and 1 take the 2 entries, block 2 finds them pending: skipped (1). Store 1048-3048;
    at its completion X's block 1 gets host recency 0 and block 0 recency 1 (last first, R132).
    Y (1100, 33 tokens, hashes 5 6 7) offers 2 blocks at 2133: both entries pending, both
    skipped (3). Z (4000, 17 tokens, hashes 8 9) offers block 0 at 5017: the pool is full, the
    resident entry with the smallest number, X's block 1, is evicted (host eviction 1); store
    5017-6017 (Z's entry gets 2). V (8000, 33 tokens, hashes 1 2 3): no GPU hit (X's block 0 was
    evicted from the GPU by Z), host run 1 (X's block 0; block 1's entry is gone): load
    8000-9000; at its completion X's block 0 has no pin and gets number 3. V computes 17 tokens
    9000-10017 and offers block 1, (1, (1, 2)): it evicts Z's entry (2), not X's block 0 (3),
    and is stored 10017-11017."""
    w = workload(
        request("X", 0, 48, 1, [1, 2, 3]),
        request("Y", 1100, 33, 1, [5, 6, 7]),
        request("Z", 4000, 17, 1, [8, 9]),
        request("V", 8000, 33, 1, [1, 2, 3]),
    )
    host = dict(HOST, blocks=2)
    report = ok(tmp_path, scenario(blocks=4, host=host), w)
    assert transfers(report) == [
        ("store", "X", [0, 1], 1048, 1048, 3048),
        ("store", "Z", [0], 5017, 5017, 6017),
        ("load", "V", [0], 8000, 8000, 9000),
        ("store", "V", [1], 10017, 10017, 11017),
    ]
    v = by_id(report)["V"]
    assert (v["token_times_us"], v["reused_prompt_tokens"], v["host_reused_prompt_tokens"]) == (
        [10017],
        16,
        16,
    )
    assert host_counts(report["workers"][0]["host"]) == (3, 4, 1, 1, 16, 2, 3)


def test_r138_a_step_without_a_token_is_not_started(tmp_path: Path) -> None:
    """GPU 4 blocks, host 8 entries; the load lane moves 1,600,000 bytes/s (a block in 10,000
    us). P (0, 32 tokens, hashes 1 2) is stored 1032-3032. Q (1100, 48 tokens, hashes 3 4 5)
    evicts P's block 1 and is stored 3032-6032. D (3100, 15 tokens, no hashes, 20 tokens out)
    takes P's block 0: tokens at 4115 + (n - 1) * 1000. L (4500, 33 tokens, hashes 1 2 9) is
    offered admission at 5115: no GPU hit, a host run of 2; D took Q's block 2 for its second
    block, so L takes Q's blocks 1 and 0 and loads 5115-25115. At 21115 D (token 18) needs a
    third block for 33 cached tokens: nothing is free or cached (D's 2 blocks, L's 2 held), no
    other running request, so D preempts itself: the step has no token and is not started
    (R138), and the worker stays idle. At 25115 L's load completes and schedules the worker
    (R134): L joins with 32 cached tokens and computes 1 (25115-26116); D (L = 33, hit 0) cannot
    get 3 blocks. At 26116 L completes; D recomputes 33 tokens (26116-27149, token 19) and
    decodes token 20 at 28149."""
    s = scenario(blocks=4, host=dict(HOST, load_bytes_per_s=1_600_000))
    s["scheduler"]["max_batched_tokens"] = 128
    w = workload(
        request("P", 0, 32, 1, [1, 2]),
        request("Q", 1100, 48, 1, [3, 4, 5]),
        {"id": "D", "arrival_us": 3100, "prompt_tokens": 15, "max_output_tokens": 20},
        request("L", 4500, 33, 1, [1, 2, 9]),
    )
    report = ok(tmp_path, s, w)
    assert transfers(report) == [
        ("store", "P", [0, 1], 1032, 1032, 3032),
        ("store", "Q", [0, 1, 2], 2148, 3032, 6032),
        ("load", "L", [0, 1], 5115, 5115, 25115),
    ]
    reqs = by_id(report)
    d, lr = reqs["D"], reqs["L"]
    assert d["token_times_us"] == [4115 + n * 1000 for n in range(18)] + [27149, 28149]
    assert (d["preemptions"], d["first_scheduled_us"]) == (1, 3100)
    assert (lr["first_scheduled_us"], lr["token_times_us"], lr["load_wait_us"]) == (
        25115,
        [26116],
        20000,
    )
    assert (lr["reused_prompt_tokens"], lr["host_reused_prompt_tokens"]) == (32, 32)
    starts = [step["start_us"] for step in report["trace"]]
    assert 21115 not in starts
    assert starts[-3:] == [25115, 26116, 27149]
    assert report["summary"]["kv_cache"]["preemptions"] == 1
    assert report["summary"]["kv_cache"]["evictions"] == 6


CONTINUING = {
    "max_num_seqs": 4,
    "max_batched_tokens": 128,
    "max_model_len": 128,
    "prefill": {"mode": "whole"},
}


@pytest.mark.parametrize("extend", [True, False])
def test_r125_to_r127_the_answer_s_blocks_are_reused_by_the_next_turn(
    extend: bool, tmp_path: Path
) -> None:
    """H = 32, B = 16 (2 blocks a hash), no host. Turn T1 (0, prompt 40, 30 tokens out, hashes
    1 2: hashed block 1 is partial) and T2 (think 0, prompt 80, hashes 1 5 6) of one session.
    T2 continues T1 (R125: 80 > 40, T2's hashes begin with T1's floor(40 / 32) = 1 hash). T1's
    canonical list is [1, 5] (R126: its hashed block 1 is full first in T2, whose hash there is
    5). T1's blocks 0, 1 are identified by R47 ((0, (1,)), (1, (1,))) and blocks 2, 3 by R127
    ((j + 1) * 16 <= min(40 + 30, 80) = 70 and j < 2 * 3): (2, (1, 5)), (3, (1, 5)), filled when
    T1's cached tokens reach 48 and 64 (T1 ends with 40 + 29 = 69). T1: prefill 0-1040, token n
    at 1040 + (n - 1) * 1000, the last at 30040. T2 arrives at 30040 with L = 80: hit
    floor(79 / 16) = 4 blocks, all T1's: 64 tokens reused, 16 computed, 30040-31056. Without
    session_prompts_extend T2 reuses T1's blocks 0 and 1 only (32 tokens; T1's block 2 is not
    identified), computing 48: 31088."""
    s = scenario(blocks=16)
    s["scheduler"] = dict(CONTINUING)
    del s["kv_cache"]["host"]
    w = {
        "document": "workload",
        "schema_version": "1.3",
        "prefix_hash_block_tokens": 32,
        "sessions": [{"id": "s"}],
        "requests": [
            request("T1", 0, 40, 30, [1, 2], session="s"),
            request("T2", 0, 80, 1, [1, 5, 6], session="s", think_time_us=0),
        ],
    }
    if extend:
        w["session_prompts_extend"] = True
    report = ok(tmp_path, s, w)
    reqs = by_id(report)
    assert reqs["T1"]["token_times_us"][-1] == 30040
    t2 = reqs["T2"]
    assert t2["arrival_us"] == 30040
    if extend:
        assert (t2["reused_prompt_tokens"], t2["token_times_us"]) == (64, [31056])
    else:
        assert (t2["reused_prompt_tokens"], t2["token_times_us"]) == (32, [31088])
    assert (t2["host_reused_prompt_tokens"], t2["load_wait_us"]) == (0, None)
    assert report["host_transfers"] == []
    assert report["summary"]["kv_cache"]["host"] is None


def test_r127_r131_r133_an_answer_block_is_stored_and_loaded_by_the_next_turn(
    tmp_path: Path,
) -> None:
    """GPU 4 blocks, host 8 entries, H = B = 16. T1 (0, prompt 16, hashes 1, 20 out) is
    continued by T2 (think 5000, prompt 48, hashes 1 2 3): T1's block 1 (output tokens 1 to 16)
    is identified as (1, (1, 2)) (R127: 32 <= min(16 + 20, 48), 1 < 3). T1: prefill 0-1016
    (block 0 stored 1016-2016), token n at 1016 + (n - 1) * 1000; block 1 is filled by the step
    formed at token 16 (16016-17016) and stored 17016-18016 (R131: generated blocks are stored
    like prompt blocks). T1 ends at 20016 (3 blocks: block 2 free, block 1 release 0, block 0
    release 1). Y (20500, 48 tokens) takes the 2 free blocks and T1's block 1; stored
    21548-24548. T2 arrives at 25016: GPU hit 1 (T1's block 0), host run 1 (T1's answer block),
    a load 25016-26016 (evicting Y's block 2), then 16 tokens 26016-27032 (evicting Y's block 1);
    its block 2 is stored 27032-28032."""
    w = workload(
        request("T1", 0, 16, 20, [1], session="s"),
        request("Y", 20500, 48, 1, [7, 8, 9]),
        request("T2", 0, 48, 1, [1, 2, 3], session="s", think_time_us=5000),
        version="1.3",
        session_prompts_extend=True,
        sessions=[{"id": "s"}],
    )
    report = ok(tmp_path, scenario(blocks=4), w)
    assert transfers(report) == [
        ("store", "T1", [0], 1016, 1016, 2016),
        ("store", "T1", [1], 17016, 17016, 18016),
        ("store", "Y", [0, 1, 2], 21548, 21548, 24548),
        ("load", "T2", [1], 25016, 25016, 26016),
        ("store", "T2", [2], 27032, 27032, 28032),
    ]
    t2 = by_id(report)["T2"]
    assert (t2["arrival_us"], t2["first_scheduled_us"], t2["token_times_us"]) == (
        25016,
        26016,
        [27032],
    )
    assert (t2["reused_prompt_tokens"], t2["host_reused_prompt_tokens"], t2["load_wait_us"]) == (
        32,
        16,
        1000,
    )
    assert host_counts(report["workers"][0]["host"]) == (4, 6, 1, 1, 16, 0, 0)
    assert report["summary"]["kv_cache"]["evictions"] == 3


def test_r129_each_rank_has_its_own_host_pool_and_lanes(tmp_path: Path) -> None:
    """dp_size 2: A and B (both at 0, 32 tokens, hashes 1 2) join ranks 0 and 1 (R80). The pass
    0-1032 runs both steps; at its end each rank stores its 2 blocks on its own store lane,
    1032-3032 both (no queueing: ranks share no lane), rank 0's submitted first (rank order,
    R83). The worker's host is the sum of its ranks' (R140)."""
    s = scenario()
    s["fleet"]["dp_size"] = 2
    w = workload(request("A", 0, 32, 1, [1, 2]), request("B", 0, 32, 1, [1, 2]))
    report = ok(tmp_path, s, w)
    assert [
        (x["rank"], x["request"], x["start_us"], x["end_us"]) for x in report["host_transfers"]
    ] == [
        (0, "A", 1032, 3032),
        (1, "B", 1032, 3032),
    ]
    worker = report["workers"][0]
    assert [host_counts(r["host"]) for r in worker["ranks"]] == [(1, 2, 0, 0, 0, 0, 0)] * 2
    assert host_counts(worker["host"]) == (2, 4, 0, 0, 0, 0, 0)
    assert worker["host"]["stored_gigabytes"] == 4 * 16000 / 10**9
    assert report["pools"][0]["host"] == worker["host"] == report["summary"]["kv_cache"]["host"]


def test_r139_disaggregated_stores_at_a_prefill_step_end_and_at_an_activation(
    tmp_path: Path,
) -> None:
    """A prefill pool and a decode pool, each one worker with the cache and host of the first
    case; kv_transfer 1 byte a token at 1,000,000 bytes/s. A (0, 32 tokens, hashes 1 2, 2 out):
    its prefill step 0-1032 registers blocks 0 and 1 on worker 0, which stores them 1032-3032
    (R131); held, reserved on worker 1 at 1032 (no decode hit), transferred 32 us, activated at
    1064: its 2 blocks are registered there and offered: worker 1 stores them 1064-3064 (R131,
    R139). load_wait_us is 0: its schedulers have host pools and it loaded nothing."""
    s = scenario()
    s["fleet"] = {
        "pools": [
            {"name": "p", "workers": 1, "role": "prefill"},
            {"name": "d", "workers": 1, "role": "decode"},
        ]
    }
    s["kv_transfer"] = {
        "bytes_per_token": 1,
        "bandwidth_bytes_per_s": 1_000_000,
        "base_latency_us": 0,
    }
    report = ok(tmp_path, s, workload(request("A", 0, 32, 2, [1, 2])))
    assert [
        (x["kind"], x["worker"], x["blocks"], x["submitted_us"], x["end_us"])
        for x in report["host_transfers"]
    ] == [
        ("store", 0, [0, 1], 1032, 3032),
        ("store", 1, [0, 1], 1064, 3064),
    ]
    a = by_id(report)["A"]
    assert a["handoff"]["activation_us"] == 1064
    assert (a["load_wait_us"], a["host_reused_prompt_tokens"]) == (0, 0)
    for w in report["workers"]:
        assert host_counts(w["host"]) == (1, 2, 0, 0, 0, 0, 0)
    assert [p["host"]["stored_blocks"] for p in report["pools"]] == [2, 2]
    assert report["summary"]["kv_cache"]["host"]["stored_blocks"] == 4


# ---- R4's checks and R141's versions ----


def invalid_inputs() -> dict[str, tuple[Any, Any, str]]:
    """name -> (scenario, workload, the pointer the message names)."""
    w = workload(request("A", 0, 32, 1, [1, 2]))
    cases: dict[str, tuple[Any, Any, str]] = {}
    s = scenario()
    s["kv_cache"]["prefix_caching"] = False
    cases["prefix-caching-off"] = (s, w, "/kv_cache/host")
    s = scenario()
    s["scheduler"]["style"] = "trtllm"
    cases["trtllm"] = (s, w, "/kv_cache/host")
    s = scenario()
    s["fleet"] = {
        "pools": [
            {"name": "a", "workers": 1},
            {
                "name": "b",
                "workers": 1,
                "scheduler": {**copy.deepcopy(SCHEDULER), "style": "trtllm"},
                "kv_cache": {
                    "blocks": 4,
                    "block_tokens": 16,
                    "prefix_caching": True,
                    "host": dict(HOST),
                },
            },
        ]
    }
    cases["pool-trtllm"] = (s, w, "/fleet/pools/1/kv_cache/host")
    s = scenario()
    s["fleet"]["scaling"] = {"schedule": [{"at_us": 10, "target": 2}]}
    cases["scaling"] = (s, w, "/kv_cache/host")
    s = scenario(
        failures={"events": [{"pool": "default", "pool_worker": 0, "at_us": 10}], "policy": "fail"}
    )
    cases["failures"] = (s, w, "/kv_cache/host")
    s = scenario()
    s["schema_version"] = "1.7"
    cases["scenario-1.7"] = (s, w, "/kv_cache/host")
    s = scenario()
    del s["kv_cache"]["host"]["store_bytes_per_s"]
    cases["missing-member"] = (s, w, "/kv_cache/host")
    s = scenario()
    s["kv_cache"]["host"]["load_bytes_per_s"] = 0
    cases["zero-bandwidth"] = (s, w, "/kv_cache/host/load_bytes_per_s")
    s = scenario()
    s["kv_cache"]["host"]["blocks"] = 2**32
    cases["too-many-blocks"] = (s, w, "/kv_cache/host/blocks")
    s = scenario()
    s["kv_cache"]["host"]["gigabytes"] = 1
    cases["unknown-member"] = (s, w, "/kv_cache/host/gigabytes")
    w2 = workload(request("A", 0, 32, 1, [1, 2]), version="1.2", session_prompts_extend=True)
    cases["workload-1.2"] = (scenario(), w2, "/session_prompts_extend")
    w3 = workload(request("A", 0, 32, 1, [1, 2]), version="1.3", session_prompts_extend="yes")
    cases["not-a-boolean"] = (scenario(), w3, "/session_prompts_extend")
    return cases


INVALID = invalid_inputs()


@pytest.mark.parametrize("name", sorted(INVALID))
def test_r4_section_19_checks_exit_2_at_their_pointer(name: str, tmp_path: Path) -> None:
    s, w, pointer = INVALID[name]
    code, error, report = run(tmp_path, s, w)
    assert (code, report) == (2, None)
    assert f": {pointer}: expected " in error


def test_r4_the_first_host_member_in_document_order_is_named(tmp_path: Path) -> None:
    """Mapping item 3: with a host tier in the fleet's pool before the scenario's kv_cache (in
    document order) and a failure list, the pool's host member is the one reported."""
    s = scenario(
        failures={"events": [{"pool": "a", "pool_worker": 0, "at_us": 10}], "policy": "fail"}
    )
    kv = s.pop("kv_cache")
    s["fleet"] = {"pools": [{"name": "a", "workers": 1, "kv_cache": copy.deepcopy(kv)}]}
    s["kv_cache"] = kv
    code, error, _ = run(tmp_path, s, workload(request("A", 0, 32, 1, [1, 2])))
    assert code == 2
    assert ": /fleet/pools/0/kv_cache/host: expected no host tier in a fleet that changes" in error


def test_r141_scenario_1_8_and_workload_1_3_need_report_10(tmp_path: Path) -> None:
    w = workload(request("A", 0, 32, 1, [1, 2]))
    code, error, report = run(tmp_path, scenario(), w, "--report-version", "9.0")
    assert (code, report) == (2, None)
    assert "--report-version 10.0" in error
    s = scenario()
    s["schema_version"] = "1.7"
    del s["kv_cache"]["host"]
    w3 = workload(request("A", 0, 32, 1, [1, 2]), version="1.3")
    code, error, report = run(tmp_path, s, w3, "--report-version", "9.0")
    assert (code, report) == (2, None)
    assert "--report-version 10.0" in error


def test_r125_session_prompts_extend_without_sessions_is_valid(tmp_path: Path) -> None:
    """R33: the member without sessions changes nothing; a workload 1.3 is read."""
    w = workload(request("A", 0, 32, 1, [1, 2]), version="1.3", session_prompts_extend=True)
    report = ok(tmp_path, scenario(), w)
    assert by_id(report)["A"]["token_times_us"] == [1032]


def test_r140_without_a_host_pool_or_without_the_trace(tmp_path: Path) -> None:
    """host null everywhere, load_wait_us null, host_transfers [] with the trace and null
    without it."""
    s = scenario()
    del s["kv_cache"]["host"]
    w = workload(request("A", 0, 32, 1, [1, 2]))
    report = ok(tmp_path, s, w)
    assert report["host_transfers"] == []
    assert report["workers"][0]["host"] is None
    assert report["pools"][0]["host"] is None
    assert report["workers"][0]["ranks"][0]["host"] is None
    assert by_id(report)["A"]["load_wait_us"] is None
    assert report["summary"]["kv_cache"]["host"] is None
    for name, document in (("s", scenario()), ("w", w), ("t", PROFILE)):
        (tmp_path / f"{name}.json").write_text(json.dumps(document))
    arguments = ["replay", "--scenario", str(tmp_path / "s.json"), "--workload"]
    arguments += [str(tmp_path / "w.json"), "--output", str(tmp_path / "n.json")]
    arguments += ["--timing-profile", str(tmp_path / "t.json"), "--report-version", "10.0"]
    assert PLAIN.main(arguments) == 0
    assert json.loads((tmp_path / "n.json").read_text())["host_transfers"] is None


# ---- The hand-derived golden cases of section 19 ----


def of_section_19(name: str) -> bool:
    """A case of scenario 1.8 or workload 1.3 (section 13's older ``session-*`` cases are not)."""
    case = GOLDEN / "valid" / name
    versions: list[str] = [
        json.loads((case / f"{role}.json").read_text()).get("schema_version")
        for role in ("scenario", "workload")
    ]
    return versions[0] == "1.8" or versions[1] == "1.3"


#: The valid cases (``golden/valid/session-*`` and ``golden/valid/host-*`` with a DERIVATION.md,
#: of scenario 1.8 or workload 1.3) and the invalid ones, once the corpus has them.
HOST_VALID = [name for name in derived_cases("session-", "host-") if of_section_19(name)]
HOST_INVALID = sorted(
    name for name in MANIFEST if name.startswith(("invalid/host-", "invalid/session-"))
)


@pytest.mark.parametrize("name", HOST_VALID)
def test_plain_loop_gives_each_host_derivations_expected_values(name: str, tmp_path: Path) -> None:
    """Every value of the case's DERIVATION.md (JSON blocks of pointer -> value), report 10.0."""
    case = GOLDEN / "valid" / name
    expected = derived_values(case)
    assert expected
    output = tmp_path / "r.json"
    code, error = replay_case(PLAIN, case, output, "--report-version", "10.0")
    assert (code, error) == (0, "")
    report = json.loads(output.read_text())
    assert report["schema_version"] == "10.0"
    assert not wrong_values(report, expected)


@pytest.mark.parametrize("name", HOST_INVALID)
def test_plain_loop_rejects_each_invalid_host_case(name: str, tmp_path: Path) -> None:
    """Exit 2 and no report."""
    output = tmp_path / "r.json"
    code, _ = replay_case(PLAIN, GOLDEN / name, output, "--report-version", "10.0")
    assert code == 2
    assert not output.exists()
