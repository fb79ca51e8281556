"""Hand-derived tests of section 19: continuing turns (R125 to R128, the draft's H1 to H4) and
the host KV tier (R129 to R140, H5 to H16).

The test names keep the draft's H numbers (Hn is R(124 + n)). Unless a test says otherwise the
setup is the draft's common one: one worker of one rank, style ``"vllm"``, ``max_num_seqs`` 8,
``max_batched_tokens`` 512, ``max_model_len`` 4096, whole prefill, round robin; timing
``synthetic_linear`` 5000 / 1000 / 10000 ns, so a step lasts ``5 + P + 10 D`` µs (R22); a cache
of B = 16 with prefix caching on; H = 16. A host pool has ``bytes_per_token`` 1000
(``block_bytes`` 16,000), a store lane of 10^9 B/s (16 µs a block) and a load lane of
2 * 10^9 B/s (8 µs a block) unless said. Every expected value is worked out by hand in the
comment above it (D1 to D3 are the draft's derivations).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from servesim.contract.continuing_turns import canonical_lists, chains, continues
from servesim.contract.errors import InvalidInput
from servesim.contract.migrations import report_9_0_to_10_0
from servesim.contract.model import Request, Workload
from servesim.replay import replay
from tests.helpers import REPO

TIMING: dict[str, Any] = {
    "document": "timing_profile",
    "schema_version": "1.0",
    "model": {
        "kind": "synthetic_linear",
        "step_overhead_ns": 5000,
        "prefill_token_ns": 1000,
        "decode_token_ns": 10000,
    },
}

HOST: dict[str, int] = {
    "blocks": 16,
    "bytes_per_token": 1000,
    "store_bytes_per_s": 1_000_000_000,
    "load_bytes_per_s": 2_000_000_000,
}


def scenario(
    blocks: int = 32,
    host: dict[str, int] | None = None,
    *,
    max_num_seqs: int = 8,
    **extra: Any,
) -> dict[str, Any]:
    """The common scenario (version 1.8 with a host pool, else 1.1)."""
    kv_cache: dict[str, Any] = {"blocks": blocks, "block_tokens": 16, "prefix_caching": True}
    if host is not None:
        kv_cache["host"] = host
    document: dict[str, Any] = {
        "document": "scenario",
        "schema_version": "1.8" if host is not None else "1.1",
        "fleet": {"workers": 1},
        "routing": {"policy": "round_robin"},
        "scheduler": {
            "max_num_seqs": max_num_seqs,
            "max_batched_tokens": 512,
            "max_model_len": 4096,
            "prefill": {"mode": "whole"},
        },
        "kv_cache": kv_cache,
    }
    document.update(extra)
    return document


def request(
    name: str, arrival: int, prompt: int, output: int, hashes: list[int], session: str | None = None
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": name,
        "arrival_us": arrival,
        "prompt_tokens": prompt,
        "max_output_tokens": output,
        "prefix_hashes": hashes,
    }
    if session is not None:
        entry["session"] = session
    return entry


def workload(
    *requests: dict[str, Any], extend: bool | None = None, hash_block_tokens: int = 16
) -> dict[str, Any]:
    """A workload of ``requests``: 1.3 with ``session_prompts_extend`` when ``extend`` is not
    ``None``, else 1.2 with sessions, else 1.1."""
    sessions = sorted({entry["session"] for entry in requests if "session" in entry})
    document: dict[str, Any] = {
        "document": "workload",
        "schema_version": "1.1",
        "prefix_hash_block_tokens": hash_block_tokens,
        "requests": list(requests),
    }
    if sessions:
        document["schema_version"] = "1.2"
        document["sessions"] = [{"id": name} for name in sessions]
    if extend is not None:
        document["schema_version"] = "1.3"
        document["session_prompts_extend"] = extend
    return document


def run(
    tmp_path: Path,
    scenario_doc: dict[str, Any],
    workload_doc: dict[str, Any],
    *,
    trace: bool = True,
) -> dict[str, Any]:
    """The reference's report for the documents."""
    paths = []
    for name, document in (
        ("scenario", scenario_doc),
        ("workload", workload_doc),
        ("timing", TIMING),
    ):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(document))
        paths.append(path)
    report: dict[str, Any] = json.loads(replay(*paths, trace=trace))
    return report


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["id"]: entry for entry in report["requests"]}


def simulated(report: dict[str, Any]) -> dict[str, Any]:
    """What the simulation gave, without the echo of the inputs."""
    return {name: report[name] for name in ("requests", "workers", "pools", "summary", "trace")}


def turn(prompt: int, hashes: list[int], output: int = 1, session: int = 0) -> Request:
    return Request("r", 0, prompt, output, tuple(hashes), session)


# D1's session: t0 (P 32, [1, 2], 33 tokens) then t1 (P 80, [1, 2, 3, 4, 5])
def d1(t0_output: int = 33) -> dict[str, Any]:
    return workload(
        request("t0", 0, 32, t0_output, [1, 2], "s"),
        request("t1", 0, 80, 1, [1, 2, 3, 4, 5], "s"),
        extend=True,
    )


# --- R125 (H1): continuing turns


def test_h1_a_pair_continues_only_when_the_next_list_begins_with_the_full_hashes() -> None:
    # floor(32 / 16) = 2 full hashed blocks: [1, 2] must begin the next list
    assert continues(turn(32, [1, 2]), turn(80, [1, 2, 3, 4, 5]), 16)
    assert not continues(turn(32, [1, 2]), turn(80, [1, 9, 3, 4, 5]), 16)
    # the partial hashed block's hash (3, at index 2 of a 40-token prompt) is not compared
    assert continues(turn(40, [1, 2, 3]), turn(80, [1, 2, 7, 8, 9]), 16)
    # a prompt that is not larger, a turn without a full hashed block, a turn without hashes
    assert not continues(turn(32, [1, 2]), turn(32, [1, 2]), 16)
    assert not continues(turn(15, [1]), turn(80, [1, 2, 3, 4, 5]), 16)
    assert not continues(turn(32, []), turn(80, [1, 2, 3, 4, 5]), 16)
    assert not continues(turn(32, [1, 2]), turn(80, []), 16)
    # (reading taken, ref-questions Q1) fewer hashes than full hashed blocks: not continued
    assert not continues(turn(64, [1, 2]), turn(80, [1, 2, 3, 4, 5]), 16)
    # chains: t0-t1 continue, t1-t2 do not, t2-t3 do; another session's turns in between
    requests = (
        Request("t0", 0, 32, 1, (1, 2), 0),
        Request("u0", 0, 32, 1, (1, 2), 1),
        Request("t1", 0, 48, 1, (1, 2, 3), 0),
        Request("t2", 0, 64, 1, (5, 6, 7, 8), 0),
        Request("u1", 0, 48, 1, (1, 2, 4), 1),
        Request("t3", 0, 80, 1, (5, 6, 7, 8, 9), 0),
    )
    flagged = Workload(requests, 16, ("s", "u"), session_prompts_extend=True)
    assert chains(flagged) == [[0, 2], [1, 4], [3, 5]]
    unflagged = Workload(requests, 16, ("s", "u"))
    assert chains(unflagged) == []


def test_h1_the_flag_without_sessions_changes_nothing(tmp_path: Path) -> None:
    # two requests with the lists of D1's turns but no session: R47 alone names their blocks
    requests = (request("a", 0, 32, 33, [1, 2]), request("b", 600, 80, 1, [1, 2, 3, 4, 5]))
    plain = run(tmp_path, scenario(), workload(*requests))
    flagged_doc = workload(*requests, extend=True)
    assert "sessions" not in flagged_doc
    flagged = run(tmp_path, scenario(), flagged_doc)
    assert simulated(flagged) == simulated(plain)
    assert by_id(flagged)["b"]["reused_prompt_tokens"] == 32  # a's blocks 0 and 1 only


def test_h1_validate_warns_about_the_flag_without_sessions(tmp_path: Path) -> None:
    path = tmp_path / "workload.json"
    path.write_text(json.dumps(workload(request("a", 0, 32, 1, [1, 2]), extend=True)))
    done = subprocess.run(
        [sys.executable, "-m", "servesim_cli", "validate", str(path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0
    assert "valid workload 1.3" in done.stdout
    assert "session_prompts_extend" in done.stderr
    assert "no sessions" in done.stderr
    # with sessions, or with the flag false, no warning
    path.write_text(json.dumps(d1()))
    done = subprocess.run(
        [sys.executable, "-m", "servesim_cli", "validate", str(path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0
    assert done.stderr == ""


# --- R126 (H2): canonical hashes


def test_h2_a_partial_hashed_block_takes_its_successor_s_hash(tmp_path: Path) -> None:
    # H 32, B 16 (k = 2). t0 P 48 [1, 2]: its hashed block 1 (tokens 32 to 63) is partial, so
    # its canonical hash is t1's (5): t0's engine block 2 is (2, [1, 5]), which is t1's block
    # 2. t0: step [0, 53], registers blocks 0 to 2; t1 arrives at 53 (released, R59), its cap
    # floor(95 / 16) = 5, its hit 3 (48 tokens) with the flag, 2 (32 tokens) without (t0's
    # block 2 is then (2, [1, 2])). t1 prefills 48: step [53, 106], TTFT 53 (64 without).
    turns = (
        request("t0", 0, 48, 1, [1, 2], "s"),
        request("t1", 0, 96, 1, [1, 5, 6], "s"),
    )
    assert canonical_lists([turn(48, [1, 2]), turn(96, [1, 5, 6])], 32) == [(1, 5), (1, 5, 6)]
    flagged = by_id(run(tmp_path, scenario(), workload(*turns, extend=True, hash_block_tokens=32)))
    assert flagged["t1"]["reused_prompt_tokens"] == 48
    assert flagged["t1"]["token_times_us"] == [106]
    plain = by_id(run(tmp_path, scenario(), workload(*turns, hash_block_tokens=32)))
    assert plain["t1"]["reused_prompt_tokens"] == 32
    assert plain["t1"]["token_times_us"] == [53 + 5 + 64]


def test_h2_canonical_list_of_the_last_turn_is_its_own() -> None:
    # t0 P 40 [1, 2, 3] (hashed block 2 partial), t1 P 80 (every block full), t2 P 90
    # (hashed block 5 partial, no later turn): t0 takes t1's hash 7; t1 and the last turn keep
    # their own lists
    lists = canonical_lists(
        [turn(40, [1, 2, 3]), turn(80, [1, 2, 7, 8, 9]), turn(90, [1, 2, 7, 8, 9, 10])], 16
    )
    assert lists == [(1, 2, 7), (1, 2, 7, 8, 9), (1, 2, 7, 8, 9, 10)]
    # no turn ever holds hashed block 2 in full (40, 44, 46 < 48): each takes the hash of the
    # last turn that has one, t2's 5, and so does t2 itself
    lists = canonical_lists([turn(40, [1, 2, 3]), turn(44, [1, 2, 4]), turn(46, [1, 2, 5])], 16)
    assert lists == [(1, 2, 5), (1, 2, 5), (1, 2, 5)]


# --- R127 (H3): generated tokens' blocks


def test_h3_next_turn_reuses_the_answer_s_full_blocks(tmp_path: Path) -> None:
    # D1 (draft): t0's blocks 2 and 3 are (2, [1,2,3]) and (3, [1,2,3,4]), filled in its decode
    # steps 16 (ending 277) and 32 (ending 517, its last); t1 arrives at 517, hits 4 blocks
    # (64 tokens), prefills 16: [517, 538], TTFT 21; 34 steps, peak 5 blocks, no eviction
    report = run(tmp_path, scenario(), d1())
    requests = by_id(report)
    assert requests["t1"]["reused_prompt_tokens"] == 64
    assert requests["t1"]["arrival_us"] == 517
    assert requests["t1"]["ttft_us"] == 21
    assert requests["t0"]["token_times_us"] == list(range(37, 518, 15))
    worker = report["workers"][0]
    assert worker["steps"] == 34
    assert worker["kv_cache"]["peak_blocks_in_use"] == 5
    assert worker["kv_cache"]["reused_tokens"] == 64
    assert report["summary"]["kv_cache"]["gpu_reuse_ratio"] == 64 / 112
    assert [entry["kv_blocks_in_use"] for entry in report["trace"][16:18]] == [3, 4]
    # untraced, decode runs stand for the steps (cut at the block t0 fills): the same requests
    assert run(tmp_path, scenario(), d1(), trace=False)["requests"] == report["requests"]
    # the straddling block (draft case 3): t0 P 40 [1,2,3], 25 tokens; t1 P 80 [1,2,7,8,9].
    # t0's canonical list is [1,2,7]; its block 2 (8 prompt, 8 output tokens) is (2, [1,2,7]),
    # its block 3 (3, [1,2,7,8]); at completion (45 + 24 * 15 = 405) it has 64 cached tokens:
    # t1 reuses 64, prefills 16: [405, 426]
    straddling = workload(
        request("t0", 0, 40, 25, [1, 2, 3], "s"),
        request("t1", 0, 80, 1, [1, 2, 7, 8, 9], "s"),
        extend=True,
    )
    requests = by_id(run(tmp_path, scenario(), straddling))
    assert requests["t1"]["reused_prompt_tokens"] == 64
    assert requests["t1"]["token_times_us"] == [426]


def test_h3_the_last_output_token_s_block_is_never_filled(tmp_path: Path) -> None:
    # t0 with 16 tokens: its last decode step (15th) leaves it 47 cached tokens: block 2 never
    # filled; completion 37 + 15 * 15 = 262, t1 reuses 32, prefills 48: [262, 315]
    requests = by_id(run(tmp_path, scenario(), d1(16)))
    assert requests["t1"]["reused_prompt_tokens"] == 32
    assert requests["t1"]["token_times_us"] == [315]
    # with 17 tokens the completing step (16th, ending 277) fills block 2 (48 cached), which is
    # registered before it is released (R51): t1 reuses 48, prefills 32: [277, 314]
    requests = by_id(run(tmp_path, scenario(), d1(17)))
    assert requests["t1"]["reused_prompt_tokens"] == 48
    assert requests["t1"]["token_times_us"] == [314]
    # with 20 tokens (draft case 2): 51 cached at completion (322), block 3 not identified
    # (64 > min(32 + 20, 80) = 52): t1 reuses 48, prefills 32: [322, 359]
    requests = by_id(run(tmp_path, scenario(), d1(20)))
    assert requests["t1"]["reused_prompt_tokens"] == 48
    assert requests["t1"]["token_times_us"] == [359]


def test_h3_a_preempted_turn_reuses_its_own_answer(tmp_path: Path) -> None:
    # 6 GPU blocks. Z (P 16, no hashes, 19 tokens) is admitted with t0 (D1's), before it:
    # step [0, 53]; decode steps i = 1.. last 25 µs. At the end of step 16 (453) t0 has 48
    # cached tokens and registers its block 2 (R127). Forming step 17 at 453: Z takes the last
    # free block (33 cached, 3 blocks), t0 needs a 4th: nothing free or cached, it is its own
    # victim (R49): it releases blocks 2, 1, 0 (registered: cached). Step 17 [453, 468] and 18
    # [468, 483] are Z's alone (t0 refused at 468: 1 block needed, none free beyond its hit).
    # Z completes at 483; t0 (L = 32 + 17 produced = 49, cap 3) hits blocks 0 to 2: the
    # worker's reused_tokens gains 48 at the readmission (t0's reused_prompt_tokens stays its
    # first admission's 0). Without the flag block 2 is not identified: 32.
    def case(extend: bool | None) -> dict[str, Any]:
        return workload(
            request("Z", 0, 16, 19, []),
            request("t0", 0, 32, 33, [1, 2], "s"),
            request("t1", 0, 80, 1, [1, 2, 3, 4, 5], "s"),
            extend=extend,
        )

    report = run(tmp_path, scenario(6), case(True))
    requests = by_id(report)
    assert requests["t0"]["preemptions"] == 1
    assert requests["t0"]["reused_prompt_tokens"] == 0
    assert requests["Z"]["completion_us"] == 483
    assert report["trace"][19]["start_us"] == 483
    assert report["trace"][19]["prefill"] == [{"id": "t0", "tokens": 1}]
    assert requests["t0"]["token_times_us"][17] == 489  # its recompute's token, 18th
    readmission_reuse = (
        report["workers"][0]["kv_cache"]["reused_tokens"] - (requests["t1"]["reused_prompt_tokens"])
    )
    assert readmission_reuse == 48
    plain = run(tmp_path, scenario(6), case(None))
    assert plain["trace"][19]["prefill"] == [{"id": "t0", "tokens": 17}]
    plain_requests = by_id(plain)
    readmission_reuse = (
        plain["workers"][0]["kv_cache"]["reused_tokens"]
        - (plain_requests["t1"]["reused_prompt_tokens"])
    )
    assert readmission_reuse == 32


# --- R128 (H4): what does not change


def test_h4_without_the_flag_the_report_is_the_migrated_8_0_report(tmp_path: Path) -> None:
    # (report 9.0 -> 10.0 now, R141.) D1's session without the flag: t1 hits t0's prompt
    # blocks only (32 tokens), its step [517, 570], TTFT 53 (D1's note); and the report's
    # section 19 members are exactly what R141's step adds to a report without them
    for extend in (None, False):
        documents = d1()
        del documents["session_prompts_extend"]
        if extend is None:
            documents["schema_version"] = "1.2"
        else:
            documents["session_prompts_extend"] = extend
        report = run(tmp_path, scenario(), documents)
        requests = by_id(report)
        assert requests["t1"]["reused_prompt_tokens"] == 32
        assert requests["t1"]["ttft_us"] == 53
        stripped = copy.deepcopy(report)
        del stripped["host_transfers"]
        for entry in stripped["requests"]:
            del entry["host_reused_prompt_tokens"], entry["load_wait_us"]
        for pool in stripped["pools"]:
            del pool["host"]
        for worker in stripped["workers"]:
            del worker["host"]
            for rank in worker["ranks"]:
                del rank["host"]
        for name in ("host_reused_prompt_tokens", "host_reuse_ratio", "gpu_reuse_ratio", "host"):
            del stripped["summary"]["kv_cache"][name]
        assert report_9_0_to_10_0(stripped) == report


def test_h4_a_turn_outside_every_chain_is_named_by_r47(tmp_path: Path) -> None:
    # D1 with t1's list not beginning with [1, 2] (draft case 5): no pair, t1 reuses 16
    documents = d1()
    documents["requests"][1]["prefix_hashes"] = [1, 9, 3, 4, 5]
    requests = by_id(run(tmp_path, scenario(), documents))
    assert requests["t1"]["reused_prompt_tokens"] == 16


_ = (pytest, InvalidInput)
