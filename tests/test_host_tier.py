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
from servesim.contract.errors import UnrepresentableHostTransfer
from servesim.contract.migrations import report_9_0_to_10_0
from servesim.contract.model import HostTier, Request, Workload
from servesim.engine.kv.host_tier import PENDING, HostPool, HostTransfer
from servesim.engine.requests import RequestState
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


def test_r125_a_pair_continues_only_when_the_next_list_begins_with_the_full_hashes() -> None:
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


def test_r125_the_flag_without_sessions_changes_nothing(tmp_path: Path) -> None:
    # two requests with the lists of D1's turns but no session: R47 alone names their blocks
    requests = (request("a", 0, 32, 33, [1, 2]), request("b", 600, 80, 1, [1, 2, 3, 4, 5]))
    plain = run(tmp_path, scenario(), workload(*requests))
    flagged_doc = workload(*requests, extend=True)
    assert "sessions" not in flagged_doc
    flagged = run(tmp_path, scenario(), flagged_doc)
    assert simulated(flagged) == simulated(plain)
    assert by_id(flagged)["b"]["reused_prompt_tokens"] == 32  # a's blocks 0 and 1 only


def test_r125_validate_warns_about_the_flag_without_sessions(tmp_path: Path) -> None:
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


def test_r126_a_partial_hashed_block_takes_its_successor_s_hash(tmp_path: Path) -> None:
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


def test_r126_canonical_list_of_the_last_turn_is_its_own() -> None:
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
    # (reading, ref-questions Q13) t1 continues t0 (it begins with t0's 2 full hashes) and
    # holds block 2 in full (48 <= 80) but has no hash 2: it does not qualify, and t0's block 2
    # keeps the hash of the last turn with one, its own 3
    assert continues(turn(40, [1, 2, 3]), turn(80, [1, 2]), 16)
    lists = canonical_lists([turn(40, [1, 2, 3]), turn(80, [1, 2])], 16)
    assert lists == [(1, 2, 3), (1, 2)]


# --- R127 (H3): generated tokens' blocks


def test_r127_next_turn_reuses_the_answer_s_full_blocks(tmp_path: Path) -> None:
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


def test_r127_the_last_output_token_s_block_is_never_filled(tmp_path: Path) -> None:
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


def test_r127_a_preempted_turn_reuses_its_own_answer(tmp_path: Path) -> None:
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


def test_r128_without_the_flag_the_report_is_the_migrated_9_0_report(tmp_path: Path) -> None:
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


def test_r128_a_turn_outside_every_chain_is_named_by_r47(tmp_path: Path) -> None:
    # D1 with t1's list not beginning with [1, 2] (draft case 5): no pair, t1 reuses 16
    documents = d1()
    documents["requests"][1]["prefix_hashes"] = [1, 9, 3, 4, 5]
    requests = by_id(run(tmp_path, scenario(), documents))
    assert requests["t1"]["reused_prompt_tokens"] == 16


# --- R129 (H5): the host pool


# D2's inputs (draft): A (P 64, [1,2,3,4]) at 0, X (P 120, 7 hashes) at 140, C (P 80,
# [1,2,3,4,5]) at 300; GPU 8 blocks, host 16 entries
def d2(*extra: dict[str, Any], x_prompt: int = 120, c_arrival: int = 300) -> dict[str, Any]:
    x_hashes = [11, 12, 13, 14, 15, 16, 17][: -(-x_prompt // 16)]
    return workload(
        request("A", 0, 64, 1, [1, 2, 3, 4]),
        request("X", 140, x_prompt, 1, x_hashes),
        request("C", c_arrival, 80, 1, [1, 2, 3, 4, 5]),
        *extra,
    )


def problems(tmp_path: Path, document: dict[str, Any]) -> list[str]:
    """``servesim validate``'s lines for one scenario (empty when valid)."""
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(document))
    done = subprocess.run(
        [sys.executable, "-m", "servesim_cli", "validate", str(path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    if done.returncode == 0:
        return []
    assert done.returncode == 2
    return [line.strip() for line in done.stderr.splitlines()[1:]]


def test_r129_host_needs_prefix_caching_and_the_vllm_style(tmp_path: Path) -> None:
    assert problems(tmp_path, scenario(8, HOST)) == []
    document = scenario(8, HOST)
    document["kv_cache"]["prefix_caching"] = False
    (line,) = problems(tmp_path, document)
    assert line.startswith(f"{tmp_path / 'scenario.json'}: at /kv_cache/host: ")
    assert "prefix_caching false" in line
    # a pool of style sglang using the scenario's cache: reported at that cache's host member
    document = scenario(8, HOST)
    document["fleet"] = {
        "pools": [
            {"name": "a", "workers": 1},
            {
                "name": "b",
                "workers": 1,
                "scheduler": {
                    **document["scheduler"],
                    "style": "sglang",
                    "prefill": {"mode": "chunked", "max_chunk_tokens": 256},
                },
            },
        ]
    }
    (line,) = problems(tmp_path, document)
    assert "at /kv_cache/host: " in line
    assert '"sglang"' in line
    # the same pool with a cache of its own and no host: valid; the host on the pool's own
    # cache: reported there
    document["fleet"]["pools"][1]["kv_cache"] = {
        "blocks": 8,
        "block_tokens": 16,
        "prefix_caching": True,
    }
    assert problems(tmp_path, document) == []
    document["fleet"]["pools"][1]["kv_cache"]["host"] = HOST
    (line,) = problems(tmp_path, document)
    assert "at /fleet/pools/1/kv_cache/host: " in line
    # (mapping item 3) a host tier with scaling or failures: reported at the first host member
    document = scenario(8, HOST)
    document["fleet"]["scaling"] = {"schedule": [{"at_us": 100, "target": 2}]}
    (line,) = problems(tmp_path, document)
    assert "at /kv_cache/host: " in line
    assert "fleet that changes" in line
    document = scenario(8, HOST)
    document["failures"] = {
        "policy": "fail",
        "events": [{"pool": "default", "pool_worker": 0, "at_us": 50}],
    }
    (line,) = problems(tmp_path, document)
    assert "at /kv_cache/host: " in line
    del document["kv_cache"]["host"]
    assert problems(tmp_path, document) == []


def test_r129_bounds_are_the_schema_s(tmp_path: Path) -> None:
    largest = {
        "blocks": 2**32 - 1,
        "bytes_per_token": 2**32 - 1,
        "store_bytes_per_s": 2**53 - 1,
        "load_bytes_per_s": 2**53 - 1,
    }
    assert problems(tmp_path, scenario(8, largest)) == []
    for name, value in (
        ("blocks", 0),
        ("blocks", 2**32),
        ("bytes_per_token", 0),
        ("bytes_per_token", 2**32),
        ("store_bytes_per_s", 0),
        ("load_bytes_per_s", 2**53),
    ):
        (line,) = problems(tmp_path, scenario(8, {**HOST, name: value}))
        assert f"at /kv_cache/host/{name}: " in line
    assert problems(tmp_path, scenario(8, {**HOST, "peak": 1}))
    missing = dict(HOST)
    del missing["load_bytes_per_s"]
    assert problems(tmp_path, scenario(8, missing))
    older = scenario(8, HOST)
    older["schema_version"] = "1.7"  # R141: host needs scenario 1.8
    assert problems(tmp_path, older)


# --- R130 (H6): transfers and their time


def pool(host: dict[str, int] | None = None) -> HostPool:
    return HostPool(HostTier(**(host or HOST)), 16, 0, 0)


def transfer(kind: str, host_pool: HostPool, blocks: int, submitted: int) -> HostTransfer:
    return HostTransfer(
        "store" if kind == "store" else "load",
        host_pool,
        RequestState(Request("r", 0, 1, 1), 0),
        list(range(blocks)),
        list(range(blocks)),
        submitted,
    )


def test_r130_transfer_time_rounds_up_in_exact_integers() -> None:
    # 4 blocks of 16,000 bytes at 3 * 10^9 B/s: ceil(64,000,000,000 / 3,000,000,000) = 22 µs
    host_pool = pool({**HOST, "load_bytes_per_s": 3_000_000_000})
    load = transfer("load", host_pool, 4, 100)
    host_pool.schedule(load)
    assert (load.start_us, load.end_us) == (100, 122)
    # a fast lane still takes at least 1 µs: 1 block at 2^53 - 1 B/s
    host_pool = pool({**HOST, "store_bytes_per_s": 2**53 - 1})
    store = transfer("store", host_pool, 1, 7)
    host_pool.schedule(store)
    assert store.end_us == 8
    # n * block_bytes * 10^6 past 2^64: 2^20 blocks of 16 * (2^32 - 1) bytes at 2^53 - 1 B/s
    big = HostPool(HostTier(2**32 - 1, 2**32 - 1, 2**53 - 1, 2**53 - 1), 16, 0, 0)
    load = transfer("load", big, 2**20, 0)
    numerator = 2**20 * 16 * (2**32 - 1) * 10**6
    assert numerator > 2**64
    big.schedule(load)
    # (2^56 - 2^24) * 10^6 / (2^53 - 1) = 8 * 10^6 * (1 - (2^21 - 1) / (2^53 - 1)), just
    # below 8,000,000 (by 0.0019): rounded up, 8,000,000
    assert load.end_us == -(-numerator // (2**53 - 1))
    assert load.end_us == 8_000_000
    assert numerator % (2**53 - 1) != 0


def test_r130_a_store_waits_for_the_lane(tmp_path: Path) -> None:
    # D3: A's store of 4 blocks [69, 709] (160 µs a block); B's, submitted at 138, starts at
    # 709, ends 1349; X's, submitted at 317, starts 1349, ends 2469; the load lane is apart:
    # C1's load [800, 832]
    report = run(tmp_path, scenario(8, {**HOST, "store_bytes_per_s": 100_000_000}), d3())
    transfers = [
        (entry["kind"], entry["request"], entry["submitted_us"], entry["start_us"], entry["end_us"])
        for entry in report["host_transfers"]
    ]
    assert transfers[:4] == [
        ("store", "A", 69, 69, 709),
        ("store", "B", 138, 709, 1349),
        ("store", "X", 317, 1349, 2469),
        ("load", "C1", 800, 800, 832),
    ]


def d3() -> dict[str, Any]:
    return workload(
        request("A", 0, 64, 1, [1, 2, 3, 4]),
        request("B", 1, 64, 1, [5, 6, 7, 8]),
        request("X", 200, 112, 1, [11, 12, 13, 14, 15, 16, 17]),
        request("C1", 800, 80, 1, [1, 2, 3, 4, 9]),
        request("C2", 900, 80, 1, [5, 6, 7, 8, 10]),
    )


def test_r130_a_transfer_ending_after_2_53_is_found_at_submission(tmp_path: Path) -> None:
    # 1 B/s: A's store of 4 blocks of 16 * (2^32 - 1) bytes lasts 2.7 * 10^17 µs > 2^53 - 1:
    # R6's error when A's step ends at 69 (exit 2, nothing written), also under a stop time
    host = {**HOST, "bytes_per_token": 2**32 - 1, "store_bytes_per_s": 1}
    for stop in (None, 100):
        document = scenario(8, host)
        if stop is not None:
            document["stop_at_us"] = stop
        with pytest.raises(UnrepresentableHostTransfer) as raised:
            run(tmp_path, document, workload(request("A", 0, 64, 1, [1, 2, 3, 4])))
        assert raised.value.submitted_us == 69
        assert "R130" in str(raised.value)


# --- R131 (H7): storing


def test_r131_a_step_writes_through_what_it_registered(tmp_path: Path) -> None:
    # draft case 10: A (P 64, 2 tokens): step [0, 69] registers 4 blocks, stored [69, 133]
    # (16 µs a block); its decode step [69, 84] registers nothing: one store
    report = run(tmp_path, scenario(8, HOST), workload(request("A", 0, 64, 2, [1, 2, 3, 4])))
    assert report["host_transfers"] == [
        {
            "kind": "store",
            "worker": 0,
            "rank": 0,
            "request": "A",
            "blocks": [0, 1, 2, 3],
            "submitted_us": 69,
            "start_us": 69,
            "end_us": 133,
        }
    ]
    host = report["workers"][0]["host"]
    assert (host["stores"], host["stored_blocks"], host["stored_gigabytes"]) == (1, 4, 0.000064)
    assert (host["loads"], host["evictions"], host["skipped_blocks"]) == (0, 0, 0)
    assert by_id(report)["A"]["load_wait_us"] == 0


def test_r131_blocks_with_an_entry_are_left_out(tmp_path: Path) -> None:
    # D3's C2 at 985 offers its blocks 0 to 4: blocks 0 to 3 have B's (pending) entries and are
    # left out; block 4 takes A's block 3's entry (host eviction 1): a store of [4]
    report = run(tmp_path, scenario(8, {**HOST, "store_bytes_per_s": 100_000_000}), d3())
    last = report["host_transfers"][-1]
    assert (last["request"], last["blocks"], last["submitted_us"]) == ("C2", [4], 985)
    assert report["workers"][0]["host"]["evictions"] == 1
    # draft case 19: C (P 64) has all 4 blocks resident and none on the GPU: its run is capped
    # at floor(63 / 16) = 3; it computes block 3, registers it, offers it: A's entry exists, so
    # it is left out and C submits no store. A [0, 69] stored [69, 133]; X (P 120) [140, 265]
    # evicts A's blocks; C at 300 loads 3 blocks [300, 324], joins at 324, step [324, 345].
    report = run(
        tmp_path,
        scenario(8, HOST),
        workload(
            request("A", 0, 64, 1, [1, 2, 3, 4]),
            request("X", 140, 120, 1, [11, 12, 13, 14, 15, 16, 17]),
            request("C", 300, 64, 1, [1, 2, 3, 4]),
        ),
    )
    assert [(entry["kind"], entry["request"]) for entry in report["host_transfers"]] == [
        ("store", "A"),
        ("store", "X"),
        ("load", "C"),
    ]
    assert report["host_transfers"][2]["blocks"] == [0, 1, 2]
    assert report["host_transfers"][2]["end_us"] == 324
    c = by_id(report)["C"]
    assert (c["reused_prompt_tokens"], c["host_reused_prompt_tokens"]) == (48, 48)
    assert (c["first_scheduled_us"], c["token_times_us"], c["load_wait_us"]) == (324, [345], 24)


def test_r131_an_entry_is_looked_for_at_each_block_s_turn() -> None:
    # (reading, ref-questions Q12) host 2 entries, resident 5 (number 0) and 6 (number 1): an
    # offer of [7, 5] stores 7 by evicting 5 (the least recent), then finds 5 without an entry
    # at its turn and stores it too, by evicting 6
    host_pool = pool({**HOST, "blocks": 2})
    host_pool.offer([0, 1], [5, 6])
    host_pool.stored([6, 5])  # numbers from the last block: 5 gets 0, 6 gets 1
    assert host_pool.entries == {5: 0, 6: 1}
    assert host_pool.offer([3, 4], [7, 5]) == ([3, 4], [7, 5])
    assert host_pool.entries == {7: PENDING, 5: PENDING}
    assert host_pool.counters.evictions == 2


def test_r131_a_full_pool_of_pending_entries_skips_blocks(tmp_path: Path) -> None:
    # draft case 18: host 2 entries, 16,000 µs a block: A's step end offers 4 blocks; 0 and 1
    # take entries, 2 and 3 are skipped (every entry pending); one store of 2 blocks
    report = run(
        tmp_path,
        scenario(8, {**HOST, "blocks": 2, "store_bytes_per_s": 1_000_000}),
        workload(request("A", 0, 64, 1, [1, 2, 3, 4])),
    )
    (store,) = report["host_transfers"]
    assert (store["blocks"], store["start_us"], store["end_us"]) == ([0, 1], 69, 69 + 32_000)
    host = report["workers"][0]["host"]
    assert (host["stored_blocks"], host["skipped_blocks"], host["evictions"]) == (2, 2, 0)
    # skipped, not later: the report's makespan is A's 69, and nothing else was stored
    assert report["summary"]["makespan_us"] == 69


def disaggregated(host_on: str, decode_blocks: int = 64) -> dict[str, Any]:
    """A prefill pool and a decode pool (one worker each, prefix caching on), a host pool on
    the pool ``host_on`` names; R97's transfer of 16 µs a block."""

    def cache(blocks: int, name: str) -> dict[str, Any]:
        kv_cache: dict[str, Any] = {"blocks": blocks, "block_tokens": 16, "prefix_caching": True}
        if name in host_on:
            kv_cache["host"] = HOST
        return kv_cache

    document = scenario()
    del document["kv_cache"]
    document["schema_version"] = "1.8"
    document["fleet"] = {
        "pools": [
            {"name": "p", "workers": 1, "role": "prefill", "kv_cache": cache(64, "p")},
            {"name": "d", "workers": 1, "role": "decode", "kv_cache": cache(decode_blocks, "d")},
        ]
    }
    document["kv_transfer"] = {
        "bytes_per_token": 1000,
        "bandwidth_bytes_per_s": 1_000_000_000,
        "base_latency_us": 0,
    }
    return document


def test_r131_activation_stores_the_blocks_it_registers(tmp_path: Path) -> None:
    # A (P 64, [1,2,3,4], 3 tokens) on a prefill pool then a decode pool with a host pool. The
    # prefill step [0, 69] ends; A is held, reserved on the decode side at 69 (hit 0), its
    # transfer of 64 tokens (64,000 bytes at 10^9 B/s) lasts 64 µs: activated at 133, where it
    # registers its blocks 0 to 3 and offers them: one store of 4 blocks, submitted at 133,
    # [133, 197], on the decode side (worker 1); the prefill side has no host pool.
    report = run(tmp_path, disaggregated("d"), workload(request("A", 0, 64, 3, [1, 2, 3, 4])))
    (store,) = report["host_transfers"]
    assert store["worker"] == 1
    assert (store["request"], store["blocks"]) == ("A", [0, 1, 2, 3])
    assert (store["submitted_us"], store["start_us"], store["end_us"]) == (133, 133, 197)
    assert report["workers"][0]["host"] is None
    assert report["workers"][1]["host"]["stored_blocks"] == 4
    assert [pool_entry["host"] is None for pool_entry in report["pools"]] == [True, False]
    assert by_id(report)["A"]["load_wait_us"] == 0  # its decode scheduler has a host pool
    # with the host pool on the prefill side instead: stored at the prefill step's end (69)
    report = run(tmp_path, disaggregated("p"), workload(request("A", 0, 64, 3, [1, 2, 3, 4])))
    (store,) = report["host_transfers"]
    assert (store["worker"], store["submitted_us"], store["end_us"]) == (0, 69, 133)


# --- R132 (H8): residency and host recency


def test_r132_host_lru_evicts_the_deepest_block_first() -> None:
    # draft case 16 at the pool: A's 4 blocks (identities 10 to 13) stored and resident get
    # numbers 0 to 3 from block 3 to block 0; B's 4 new blocks evict A's 3, 2, 1, 0 in order
    host_pool = pool({**HOST, "blocks": 4})
    a = [10, 11, 12, 13]
    assert host_pool.offer([0, 1, 2, 3], a) == ([0, 1, 2, 3], a)
    assert host_pool.entries == dict.fromkeys(a, PENDING)
    host_pool.stored(a)
    assert host_pool.entries == {13: 0, 12: 1, 11: 2, 10: 3}
    for count, evicted in enumerate([13, 12, 11, 10], start=1):
        assert host_pool.offer([count - 1], [20 + count]) == ([count - 1], [20 + count])
        assert evicted not in host_pool.entries
        assert host_pool.counters.evictions == count
    # two at once: the two least recent (B's first two, numbers not given yet: pending) cannot
    # go; with all four pending, a fifth block is skipped
    assert host_pool.offer([9], [99]) == ([], [])
    assert host_pool.counters.skipped_blocks == 1


def test_r132_a_touch_changes_the_victim() -> None:
    # draft case 17 at the pool: a request whose GPU hit is A's blocks 0 and 1 (no run)
    # touches A's entries 1 and 0 (numbers 4 and 5, last block first): a later store of 2
    # blocks evicts A's entries 3 and 2
    host_pool = pool({**HOST, "blocks": 4})
    a = [10, 11, 12, 13]
    host_pool.offer([0, 1, 2, 3], a)
    host_pool.stored(a)
    host_pool.touch(a[:2], 2, 2, 0)
    assert (host_pool.entries[11], host_pool.entries[10]) == (4, 5)
    host_pool.offer([0, 1], [30, 31])
    assert sorted(host_pool.entries) == [10, 11, 30, 31]
    # a pinned entry is never evicted, nor a pending one: a full pool of them skips
    host_pool.pin([10, 11])
    assert host_pool.offer([0], [40]) == ([], [])
    assert host_pool.counters.skipped_blocks == 1
    host_pool.loaded([10, 11])  # unpinned: numbers from block 1 to block 0
    assert (host_pool.entries[11], host_pool.entries[10]) == (6, 7)
    assert host_pool.offer([0], [40]) == ([0], [40])
    assert 10 in host_pool.entries
    assert 11 not in host_pool.entries
    # a touch skips the run's blocks, pending and pinned entries: blocks 0 to 3 = [10, 40,
    # 30, 31], hit 1, run 1 (block 1): 40 is pending; after 30 and 31 are stored (31: 8,
    # 30: 9) and 30 pinned, 31 and 10 are touched, 31 first
    host_pool.touch([10, 40, 30, 31], 4, 1, 0)
    assert (host_pool.entries[40], host_pool.entries[10]) == (PENDING, 8)
    host_pool.stored([30, 31])
    host_pool.stored([40])
    assert (host_pool.entries[31], host_pool.entries[30], host_pool.entries[40]) == (9, 10, 11)
    host_pool.pin([30])
    host_pool.touch([10, 40, 30, 31], 4, 1, 1)
    assert (host_pool.entries[31], host_pool.entries[10]) == (12, 13)
    assert (host_pool.entries[30], host_pool.entries[40]) == (10, 11)


# --- R133 (H9): lookup at admission


def test_r133_a_pending_entry_ends_the_host_run(tmp_path: Path) -> None:
    # D3: C2 at 900 finds B's entries pending (B's store ends at 1349): m = 0, it computes its
    # 80 tokens: [900, 985], TTFT 85, no load wait; C1 at 800 found A's resident: m = 4
    report = run(tmp_path, scenario(8, {**HOST, "store_bytes_per_s": 100_000_000}), d3())
    requests = by_id(report)
    assert (requests["C2"]["ttft_us"], requests["C2"]["reused_prompt_tokens"]) == (85, 0)
    assert requests["C2"]["load_wait_us"] == 0
    assert (requests["C1"]["ttft_us"], requests["C1"]["host_reused_prompt_tokens"]) == (53, 64)
    assert report["workers"][0]["host"]["loads"] == 1


def test_r133_a_full_gpu_hit_needs_no_load(tmp_path: Path) -> None:
    # draft case 12: D2 without X: C's GPU hit is 4 blocks (the cap), m 0, step [300, 321];
    # no load; C's block 4 is stored [321, 337]
    report = run(
        tmp_path,
        scenario(8, HOST),
        workload(request("A", 0, 64, 1, [1, 2, 3, 4]), request("C", 300, 80, 1, [1, 2, 3, 4, 5])),
    )
    c = by_id(report)["C"]
    assert (c["reused_prompt_tokens"], c["host_reused_prompt_tokens"]) == (64, 0)
    assert (c["token_times_us"], c["load_wait_us"]) == ([321], 0)
    assert [(t["kind"], t["blocks"], t["end_us"]) for t in report["host_transfers"]] == [
        ("store", [0, 1, 2, 3], 133),
        ("store", [4], 337),
    ]


def test_r133_the_run_is_capped_so_one_token_is_computed(tmp_path: Path) -> None:
    # D2: C (L 80) may reuse at most floor(79 / 16) = 4 blocks: g 0, m 4, 16 tokens computed;
    # with C of P 64 (the same 4 hashes) the cap is 3 (test_r131_blocks_with_an_entry_are_left_out)
    report = run(tmp_path, scenario(8, HOST), d2())
    (load,) = [t for t in report["host_transfers"] if t["kind"] == "load"]
    assert load["blocks"] == [0, 1, 2, 3]
    assert report["trace"][2]["prefill"] == [{"id": "C", "tokens": 16}]


# --- R134 (H10): loading


def test_r134_a_loading_request_holds_a_seat_and_its_blocks(tmp_path: Path) -> None:
    # draft case 22: D2 with max_num_seqs 1 and E (P 16, no hashes) arriving at 300 after C:
    # at 300 C starts its load (0 running + 0 loading < 1); E is not offered (C's seat).
    # 332: C joins, [332, 353]; E is refused (C runs); 353: E admitted, [353, 374]
    report = run(tmp_path, scenario(8, HOST, max_num_seqs=1), d2(request("E", 300, 16, 1, [])))
    e = by_id(report)["E"]
    assert (e["first_scheduled_us"], e["token_times_us"]) == (353, [374])
    # C's four destination blocks are held while it loads: F (P 80, no hashes, 5 blocks) at 310
    # finds free 0 and 4 cached (X's blocks 3 to 0): refused; at 332 C joins (1 block: X's
    # block 3 evicted) and F is refused again (3 cached); at 353 C releases 5: F admitted
    report = run(tmp_path, scenario(8, HOST), d2(request("F", 310, 80, 1, [])))
    f = by_id(report)["F"]
    assert (f["first_scheduled_us"], f["token_times_us"]) == (353, [353 + 85])
    assert report["trace"][2]["kv_blocks_in_use"] == 5  # C's step at 332: 4 loaded + 1


def test_r134_two_requests_load_the_same_entries(tmp_path: Path) -> None:
    # draft case 21, GPU 16: A stored [69, 133]; X (P 250, no hashes, 16 blocks) [140, 395]
    # evicts A's 4 blocks; C and C2 (C's prompt) arrive at 400: both miss the GPU and load A's
    # entries (pins 2): C [400, 432], C2 queued [432, 464]. 432: C joins, [432, 453]; 464: C2's
    # destination blocks duplicate C's registered (cached) ones and stay unregistered; C2
    # joins, [464, 485]. GPU evictions: A's 4 only.
    report = run(
        tmp_path,
        scenario(16, HOST),
        workload(
            request("A", 0, 64, 1, [1, 2, 3, 4]),
            request("X", 140, 250, 1, []),
            request("C", 400, 80, 1, [1, 2, 3, 4, 5]),
            request("C2", 400, 80, 1, [1, 2, 3, 4, 5]),
        ),
    )
    requests = by_id(report)
    assert (requests["C"]["load_wait_us"], requests["C"]["token_times_us"]) == (32, [453])
    assert (requests["C2"]["load_wait_us"], requests["C2"]["token_times_us"]) == (64, [485])
    loads = [(t["request"], t["start_us"], t["end_us"]) for t in report["host_transfers"]]
    assert ("C", 400, 432) in loads
    assert ("C2", 432, 464) in loads
    assert report["workers"][0]["kv_cache"]["evictions"] == 4
    host = report["workers"][0]["host"]
    assert (host["loads"], host["loaded_blocks"], host["reused_tokens"]) == (2, 8, 128)
    # C's block 4 is stored at 453; C2's duplicate block 4 is not offered
    stores = [t for t in report["host_transfers"] if t["kind"] == "store"]
    assert [(t["request"], t["blocks"]) for t in stores] == [("A", [0, 1, 2, 3]), ("C", [4])]


# --- R135 (H11): joining the running list


def test_r135_a_loaded_request_joins_at_the_next_step_formed(tmp_path: Path) -> None:
    # D2 with Z (P 16, no hashes, 30 tokens) at 280: Z [280, 301]; at 301 Z decodes (evicting
    # X's block 6) and C (arrived at 300) starts its load [301, 333] (evicting X's 5 to 2); Z's
    # decode steps of 15 µs run on (a run: 316, 331, 346, ...); C's load completes at 333,
    # inside the step [331, 346]: C joins the step formed at 346, [346, 377] (Z's decode too)
    report = run(tmp_path, scenario(8, HOST), d2(request("Z", 280, 16, 30, [])), trace=False)
    c = by_id(report)["C"]
    assert (c["first_scheduled_us"], c["token_times_us"], c["load_wait_us"]) == (346, [377], 32)
    assert by_id(report)["Z"]["token_times_us"][:5] == [301, 316, 331, 346, 377]
    traced = run(tmp_path, scenario(8, HOST), d2(request("Z", 280, 16, 30, [])))
    assert traced["requests"] == report["requests"]
    (step,) = [entry for entry in traced["trace"] if entry["start_us"] == 346]
    assert (step["decode_requests"], step["prefill"]) == (["Z"], [{"id": "C", "tokens": 16}])


def test_r135_first_scheduled_is_the_joining_step(tmp_path: Path) -> None:
    # D2: C arrives at 300, starts its load then, joins at 332: first scheduled 332, queue 32
    c = by_id(run(tmp_path, scenario(8, HOST), d2()))["C"]
    assert (c["first_scheduled_us"], c["queue_us"], c["ttft_us"]) == (332, 32, 53)


# --- R136 (H12): events


def test_r136_a_load_ending_at_a_pass_end_joins_that_instant_s_step(tmp_path: Path) -> None:
    # draft case 23: D2 with W (P 27, no hashes, 3 tokens) at 300 after C: C starts its load
    # [300, 332] (X's blocks 6, 5, 4 evicted), W is admitted (2 blocks: X's 3, 2 evicted) and
    # runs [300, 332]; at 332 the load completes first (W's step is in flight), then W's step; the
    # step formed at 332 has W's decode and C's 16 tokens: 5 + 16 + 10 = 31 µs, [332, 363]
    report = run(tmp_path, scenario(8, HOST), d2(request("W", 300, 27, 3, [])))
    c = by_id(report)["C"]
    assert (c["first_scheduled_us"], c["token_times_us"]) == (332, [363])
    (step,) = [entry for entry in report["trace"] if entry["start_us"] == 332]
    assert (step["decode_requests"], step["prefill"]) == (["W"], [{"id": "C", "tokens": 16}])


def test_r136_a_store_completing_at_a_step_end_is_evictable_by_its_stores(
    tmp_path: Path,
) -> None:
    # host 4 entries: A [0, 69], stored [69, 133]; B (P 59, [5,6,7,8]) at 60: [69, 133]. At
    # 133 A's store completes first (its entries resident, numbers 0 to 3), then B's step ends
    # and offers its 3 full blocks: they evict A's entries of blocks 3, 2, 1: evictions 3,
    # nothing skipped; B's store of 3 blocks [133, 181]
    report = run(
        tmp_path,
        scenario(8, {**HOST, "blocks": 4}),
        workload(request("A", 0, 64, 1, [1, 2, 3, 4]), request("B", 60, 59, 1, [5, 6, 7, 8])),
    )
    host = report["workers"][0]["host"]
    assert (host["evictions"], host["skipped_blocks"], host["stored_blocks"]) == (3, 0, 7)
    assert report["host_transfers"][1]["end_us"] == 181


# --- R137 (H13): reuse


def test_r137_reuse_per_tier_sums_to_the_request_s_reuse(tmp_path: Path) -> None:
    # draft case 13: D2 with X of P 96 (6 blocks: 4 free, A's blocks 3 and 2 evicted),
    # [140, 241]. C at 300: g 2 (A's blocks 0, 1), m 2: a load of 2 blocks [300, 316]; C joins
    # at 316 (64 cached), [316, 337]: reused 64, of which 32 from the host
    report = run(tmp_path, scenario(8, HOST), d2(x_prompt=96))
    c = by_id(report)["C"]
    assert (c["reused_prompt_tokens"], c["host_reused_prompt_tokens"]) == (64, 32)
    assert (c["load_wait_us"], c["token_times_us"]) == (16, [337])
    kv_cache = report["summary"]["kv_cache"]
    assert kv_cache["host_reused_prompt_tokens"] == 32
    assert kv_cache["host_reuse_ratio"] == 32 / 240
    assert kv_cache["gpu_reuse_ratio"] == 32 / 240
    assert kv_cache["prefix_reuse_ratio"] == 64 / 240
    assert report["workers"][0]["host"]["reused_tokens"] == 32
    assert report["workers"][0]["kv_cache"]["reused_tokens"] == 64


def test_r137_preemption_with_a_host_tier_loads_at_readmission(tmp_path: Path) -> None:
    # GPU 6: R (P 16, no hashes, 50 tokens) then V (P 32, [1, 2], 40 tokens), both at 0:
    # [0, 53]; V's blocks 0, 1 stored [53, 85]. Decode steps of 25 µs to 453; forming step 17
    # R takes the last free block and V is its own victim (blocks 0, 1 cached, block 2 free).
    # R alone (15 µs a step); forming its step 49 (ends 948) R evicts V's block 1. At 948 R
    # completes; V (L 49, cap 3): g 1, m 1: a load of 1 block [948, 956], the step not
    # started; V joins at 956, recomputes 17 tokens: [956, 978]
    report = run(
        tmp_path,
        scenario(6, HOST),
        workload(request("R", 0, 16, 50, []), request("V", 0, 32, 40, [1, 2])),
    )
    v = by_id(report)["V"]
    assert v["preemptions"] == 1
    assert (v["reused_prompt_tokens"], v["host_reused_prompt_tokens"]) == (0, 0)
    assert v["load_wait_us"] == 8
    assert v["token_times_us"][16:18] == [453, 978]
    host = report["workers"][0]["host"]
    assert (host["loads"], host["loaded_blocks"], host["reused_tokens"]) == (1, 1, 16)
    assert report["workers"][0]["kv_cache"]["reused_tokens"] == 32


# --- R138 (H14): a step without a token


def test_r138_a_step_without_a_token_is_not_started(tmp_path: Path) -> None:
    # D2: the step formed at 300 starts C's load and has no token: not started, counted or
    # traced: 3 steps, busy 69 + 125 + 21 = 215
    report = run(tmp_path, scenario(8, HOST), d2())
    worker = report["workers"][0]
    assert (worker["steps"], worker["busy_us"]) == (3, 215)
    assert [entry["start_us"] for entry in report["trace"]] == [0, 140, 332]


def test_r138_a_self_preemption_behind_loading_requests_is_live(tmp_path: Path) -> None:
    # draft case 24 (times of its own). GPU 8: A [0, 69] stored [69, 133]; B (P 64, [5,6,7,8])
    # at 1: [69, 138], stored [138, 202]; Y (P 120, no hashes) at 210 evicts all 8: [210, 335].
    # C ([1,2,3,4,5]) and D ([5,6,7,8,9]), P 80, at 400: C loads [400, 432], D [432, 464]; no
    # step. 432: C joins and needs a 5th block: D's 4 held, nothing cached: C is its own
    # victim; no token, not started. 464: D joins (evicts C's block 3), [464, 485]; C (g 3,
    # m 1) is refused (nothing but its hit cached). 485: D completes; C loads 1 block
    # [485, 493]; joins at 493, [493, 514].
    report = run(
        tmp_path,
        scenario(8, HOST),
        workload(
            request("A", 0, 64, 1, [1, 2, 3, 4]),
            request("B", 1, 64, 1, [5, 6, 7, 8]),
            request("Y", 210, 120, 1, []),
            request("C", 400, 80, 1, [1, 2, 3, 4, 5]),
            request("D", 400, 80, 1, [5, 6, 7, 8, 9]),
        ),
    )
    requests = by_id(report)
    c, d = requests["C"], requests["D"]
    assert (d["token_times_us"], d["load_wait_us"]) == ([485], 64)
    assert (c["preemptions"], c["token_times_us"], c["load_wait_us"]) == (1, [514], 40)
    # (reading, ref-questions Q9) C's first admission is its join at 432, in the step not
    # started: first scheduled 432, 64 reused from the host
    assert (c["first_scheduled_us"], c["host_reused_prompt_tokens"]) == (432, 64)
    loads = [(t["request"], t["blocks"]) for t in report["host_transfers"] if t["kind"] == "load"]
    assert loads == [("C", [0, 1, 2, 3]), ("D", [0, 1, 2, 3]), ("C", [3])]
    assert [entry["start_us"] for entry in report["trace"]][-2:] == [464, 493]


# --- R139 (H15): stop time and disaggregation


def test_r139_a_stop_during_a_load_cuts_the_request_off(tmp_path: Path) -> None:
    # D2 stopped at 320: C's load [300, 332] is in flight: C is cut off, its load counts as
    # submitted, and its load_wait_us is 0; the trace lists it with the end it would have had
    document = scenario(8, HOST)
    document["stop_at_us"] = 320
    report = run(tmp_path, document, d2())
    c = by_id(report)["C"]
    assert (c["outcome"], c["first_scheduled_us"], c["load_wait_us"]) == ("cut_off", None, 0)
    assert report["workers"][0]["host"]["loads"] == 1
    assert [t["end_us"] for t in report["host_transfers"]] == [133, 377, 332]
    # stopped at 332: the load completes (at or before D) and counts, but no step starts at D
    document["stop_at_us"] = 332
    c = by_id(run(tmp_path, document, d2()))["C"]
    assert (c["outcome"], c["first_scheduled_us"], c["load_wait_us"]) == ("cut_off", None, 32)


def test_r139_decode_recompute_loads_on_the_decode_side(tmp_path: Path) -> None:
    # decode pool of 6 blocks with a host pool (the prefill pool has none). R (P 16, no
    # hashes, 60 tokens) and V (P 32, [1, 2], 40 tokens) at 0: prefilled together [0, 53];
    # transfers of 16 and 32 µs: R activated at 69 (decode steps [69, 84], [84, 99]), V Ready
    # at 85 and activated at the pass end 99, where it registers its blocks 0, 1 and stores
    # them [99, 131]. From 99 both decode (25 µs): step k ends 99 + 25 (k + 1); forming k = 16
    # (at 499) V needs a 4th block, R holds 3: V is its own victim (blocks 0, 1 cached). R
    # alone (15 µs) evicts V's block 1 forming k = 46 and completes at k = 57, ending at
    # 499 + 15 * 42 = 1129. V (L = 32 + 16 + 1 hidden = 49): g 1, m 1: a load of block 1
    # [1129, 1137] on the decode side, the step not started; V joins at 1137 and recomputes
    # 17 tokens: [1137, 1159].
    report = run(
        tmp_path,
        disaggregated("d", decode_blocks=6),
        workload(request("R", 0, 16, 60, []), request("V", 0, 32, 40, [1, 2])),
    )
    v = by_id(report)["V"]
    assert v["preemptions"] == 1
    assert (v["load_wait_us"], v["host_reused_prompt_tokens"]) == (8, 0)
    assert v["token_times_us"][15:17] == [499, 1159]
    assert by_id(report)["R"]["load_wait_us"] == 0
    assert [
        (t["kind"], t["worker"], t["request"], t["blocks"], t["start_us"], t["end_us"])
        for t in report["host_transfers"]
    ] == [("store", 1, "V", [0, 1], 99, 131), ("load", 1, "V", [1], 1129, 1137)]
    assert report["workers"][0]["host"] is None
    assert report["workers"][1]["host"]["reused_tokens"] == 16


# --- R140 (H16): the report


def test_r140_host_counters_add_up_over_ranks_workers_and_pools(tmp_path: Path) -> None:
    # two pools: "a" 2 workers of 2 ranks with a host pool, "b" 1 worker without; requests
    # spread by round robin; every level's counts are its parts' sums and its gigabytes one
    # R24 quotient of its summed blocks' bytes
    document = scenario(8, HOST)
    document["fleet"] = {
        "pools": [{"name": "a", "workers": 2, "dp_size": 2}, {"name": "b", "workers": 1}]
    }
    document["fleet"]["pools"][1]["kv_cache"] = {
        "blocks": 8,
        "block_tokens": 16,
        "prefix_caching": True,
    }
    requests = [
        request(f"r{i}", 50 * i, 64 + 16 * (i % 3), 2, [1 + i % 4, 2, 3, 4, 5][: 4 + i % 3 // 2])
        for i in range(12)
    ]
    report = run(tmp_path, document, workload(*requests))
    names = (
        "stores",
        "stored_blocks",
        "loads",
        "loaded_blocks",
        "reused_tokens",
        "evictions",
        "skipped_blocks",
    )
    workers = report["workers"]
    for worker in workers[:2]:
        for name in names:
            assert worker["host"][name] == sum(rank["host"][name] for rank in worker["ranks"])
        stored = worker["host"]["stored_blocks"] * 16_000
        assert worker["host"]["stored_gigabytes"] == stored / 10**9
    assert workers[2]["host"] is None
    a, b = report["pools"]
    assert b["host"] is None
    for name in names:
        assert a["host"][name] == sum(worker["host"][name] for worker in workers[:2])
        assert report["summary"]["kv_cache"]["host"][name] == a["host"][name]
    assert a["host"]["stores"] > 0
    assert a["host"]["loaded_gigabytes"] == a["host"]["loaded_blocks"] * 16_000 / 10**9


def test_r140_load_wait_includes_lane_queueing(tmp_path: Path) -> None:
    # test_r138's D: its load was submitted at 400 and queued behind C's (start 432, end 464):
    # load_wait_us 64, of which 32 in the lane's queue; its queue_us counts from its arrival
    # to its first step, 464
    report = run(
        tmp_path,
        scenario(8, HOST),
        workload(
            request("A", 0, 64, 1, [1, 2, 3, 4]),
            request("B", 1, 64, 1, [5, 6, 7, 8]),
            request("Y", 210, 120, 1, []),
            request("C", 400, 80, 1, [1, 2, 3, 4, 5]),
            request("D", 400, 80, 1, [5, 6, 7, 8, 9]),
        ),
    )
    d = by_id(report)["D"]
    assert (d["load_wait_us"], d["queue_us"]) == (64, 64)
    (load,) = [t for t in report["host_transfers"] if t["request"] == "D" and t["kind"] == "load"]
    assert (load["submitted_us"], load["start_us"], load["end_us"]) == (400, 432, 464)


def test_r140_host_transfers_are_listed_only_with_the_trace(tmp_path: Path) -> None:
    assert run(tmp_path, scenario(8, HOST), d2(), trace=False)["host_transfers"] is None
    assert len(run(tmp_path, scenario(8, HOST), d2())["host_transfers"]) == 4
    assert run(tmp_path, scenario(8), d2())["host_transfers"] == []
    assert run(tmp_path, scenario(8), d2(), trace=False)["host_transfers"] is None
    # without a host pool: load_wait_us null, host null
    report = run(tmp_path, scenario(8), d2())
    assert {entry["load_wait_us"] for entry in report["requests"]} == {None}
    assert report["workers"][0]["host"] is None
