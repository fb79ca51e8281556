"""The plain loop's section 12 (state-aware routing) against numbers derived by hand.

Every case below is small enough to derive with pencil from SPEC.md alone (R54 to R57); the
derivation is in each test's docstring. The timing profile makes every step last 1 us (overhead
1000 ns, nothing per token), so a request admitted at t produces its first token at t + 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, load_module, run_plain_loop

INDEPENDENT = REPO / "conformance" / "examples" / "independent"
PLAIN = load_module("servesim_independent_routing", INDEPENDENT / "servesim_independent.py")

ONE_US_STEPS = {
    "document": "timing_profile",
    "schema_version": "1.0",
    "model": {
        "kind": "synthetic_linear",
        "step_overhead_ns": 1000,
        "prefill_token_ns": 0,
        "decode_token_ns": 0,
    },
}


def scenario(routing: dict[str, Any], workers: int = 2, kv: dict[str, Any] | None = None) -> Any:
    document: dict[str, Any] = {
        "document": "scenario",
        "schema_version": "1.2",
        "fleet": {"workers": workers},
        "routing": routing,
        "scheduler": {
            "max_num_seqs": 8,
            "max_batched_tokens": 64,
            "max_model_len": 1000,
            "prefill": {"mode": "whole"},
        },
    }
    if kv is not None:
        document["kv_cache"] = kv
    return document


def request(name: str, arrival: int, prompt: int, out: int, hashes: list[int] | None = None) -> Any:
    entry: dict[str, Any] = {
        "id": name,
        "arrival_us": arrival,
        "prompt_tokens": prompt,
        "max_output_tokens": out,
    }
    if hashes is not None:
        entry["prefix_hashes"] = hashes
    return entry


def workload(*requests: Any, hash_block_tokens: int | None = None) -> Any:
    document: dict[str, Any] = {
        "document": "workload",
        "schema_version": "1.0" if hash_block_tokens is None else "1.1",
        "requests": list(requests),
    }
    if hash_block_tokens is not None:
        document["prefix_hash_block_tokens"] = hash_block_tokens
    return document


def run(
    folder: Path, scn: Any, wl: Any, version: str = "4.0"
) -> tuple[int, str, dict[str, Any] | None]:
    """Exit code, standard error and report of the plain loop writing report `version`."""
    return run_plain_loop(PLAIN, folder, (scn, wl, ONE_US_STEPS), version)


def placed(report: dict[str, Any] | None) -> dict[str, tuple[Any, Any]]:
    """Each request's worker and cached_blocks_at_routing."""
    assert report is not None
    assert report["schema_version"] == "4.0"
    return {r["id"]: (r["worker"], r["cached_blocks_at_routing"]) for r in report["requests"]}


KV = {"blocks": 16, "block_tokens": 2, "prefix_caching": True}


def test_r55_least_loaded_ties_go_to_the_lowest_index(tmp_path: Path) -> None:
    """Four requests at 0 on three workers; nothing completes before 1, so outstanding counts
    are [0,0,0], [1,0,0], [1,1,0], [1,1,1]: workers 0, 1, 2, 0. No cache: null (R57)."""
    requests = [request(name, 0, 4, 5) for name in "pqrs"]
    code, error, report = run(
        tmp_path, scenario({"policy": "least_loaded"}, 3), workload(*requests)
    )
    assert (code, error) == (0, "")
    assert placed(report) == {"p": (0, None), "q": (1, None), "r": (2, None), "s": (0, None)}
    assert report is not None
    assert [w["routed"] for w in report["workers"]] == [2, 1, 1]


def test_r54_least_loaded_sees_the_completion_of_its_instant(tmp_path: Path) -> None:
    """a (3 outputs) goes to worker 0 and b (1 output) to worker 1; both steps run 0-1 and b
    completes at 1. d arrives at 1, after that completion (R7): outstanding [1, 0], so worker 1.
    A router that did not see the completion would tie [1, 1] and pick worker 0."""
    wl = workload(request("a", 0, 4, 3), request("b", 0, 4, 1), request("d", 1, 4, 1))
    code, _, report = run(tmp_path, scenario({"policy": "least_loaded"}), wl)
    assert code == 0
    assert placed(report) == {"a": (0, None), "b": (1, None), "d": (1, None)}
    assert report is not None
    assert report["requests"][1]["completion_us"] == 1
    assert report["requests"][2]["first_scheduled_us"] == 1


# R14's test vectors for seed 42: its first three draws.
SEED_42_DRAWS = [0xBDD732262FEB6E95, 0x28EFE333B266F103, 0x47526757130F9F52]


def test_r58_a_seed_picks_among_the_tied_workers(tmp_path: Path) -> None:
    """Four idle workers, least_loaded with seed 42, three requests at 0. The first ties on all
    four: draw 1 mod 4 = 1. The second ties on [0, 2, 3]: draw 2 mod 3 = 1, worker 2. The third
    ties on [0, 3]: draw 3 mod 2 = 0, worker 0. Without the seed: 0, 1, 2."""
    assert [SEED_42_DRAWS[0] % 4, SEED_42_DRAWS[1] % 3, SEED_42_DRAWS[2] % 2] == [1, 1, 0]
    wl = workload(*(request(name, 0, 4, 5) for name in "abc"))
    code, _, report = run(tmp_path, scenario({"policy": "least_loaded", "seed": 42}, 4), wl)
    assert code == 0
    assert placed(report) == {"a": (1, None), "b": (2, None), "c": (0, None)}
    code, _, report = run(tmp_path, scenario({"policy": "least_loaded"}, 4), wl)
    assert placed(report) == {"a": (0, None), "b": (1, None), "c": (2, None)}


def test_r58_every_routed_request_draws_and_a_rejected_one_does_not(tmp_path: Path) -> None:
    """Two workers, seed 42. a ties on [0, 1]: draw 1 is odd, worker 1. z (empty prompt) is
    rejected and draws nothing. b has a single least loaded worker, 0, and still takes draw 2.
    c ties on [0, 1] with draw 3, even: worker 0 (with draw 2, odd, it would be worker 1)."""
    assert [SEED_42_DRAWS[0] % 2, SEED_42_DRAWS[1] % 2, SEED_42_DRAWS[2] % 2] == [1, 1, 0]
    wl = workload(
        request("a", 0, 4, 5), request("z", 0, 0, 5), request("b", 0, 4, 5), request("c", 0, 4, 5)
    )
    code, _, report = run(tmp_path, scenario({"policy": "least_loaded", "seed": 42}), wl)
    assert code == 0
    assert placed(report) == {"a": (1, None), "z": (None, None), "b": (0, None), "c": (0, None)}


@pytest.mark.parametrize(
    ("weights", "y_worker", "y_cached", "y_reused"),
    [
        ({}, 0, 2, 2),  # w0: 1*0 + 1*2 = 2, w1: 1*2 + 1*0 = 2, tie: lowest index
        ({"prefill_weight": 1, "load_weight": 2}, 1, 0, 0),  # w0: 4, w1: 2
        ({"prefill_weight": 2, "load_weight": 1}, 0, 2, 2),  # w0: 2, w1: 4
        ({"prefill_weight": 0, "load_weight": 1}, 1, 0, 0),  # w0: 2, w1: 0
        ({"prefill_weight": 1, "load_weight": 0}, 0, 2, 2),  # w0: 0, w1: 2
    ],
)
def test_r56_a_cached_prefix_on_a_busy_worker_against_an_idle_one(
    weights: dict[str, int], y_worker: int, y_cached: int, y_reused: int, tmp_path: Path
) -> None:
    """x (prompt 4 = 2 blocks of 2, hashes [1, 2], 20 outputs) ties at cost 2 and goes to
    worker 0; its step 0-1 fills and registers both blocks, and it keeps running. y (the same
    prompt) arrives at 5: worker 0 has cached 2, load_blocks 2; worker 1 cached 0, load 0.
    cost = prefill_weight * (2 - cached) + load_weight * load_blocks. On worker 0 y's hit is
    capped at floor((4 - 1) / 2) = 1 block (R48), so it reuses 2 tokens there."""
    wl = workload(
        request("x", 0, 4, 20, [1, 2]), request("y", 5, 4, 1, [1, 2]), hash_block_tokens=2
    )
    code, error, report = run(tmp_path, scenario({"policy": "cache_aware", **weights}, kv=KV), wl)
    assert (code, error) == (0, "")
    assert placed(report) == {"x": (0, 0), "y": (y_worker, y_cached)}
    assert report is not None
    assert report["requests"][1]["reused_prompt_tokens"] == y_reused


def test_r54_an_evicted_block_is_no_longer_seen(tmp_path: Path) -> None:
    """Caches of 4 blocks of 2. a (prompt 4, hashes [1, 2]) runs 0-1 on worker 0 (tie), registers
    both blocks and releases them at 1: block 1 gets release number 0, block 0 number 1. e
    (prompt 6, hashes [7, 8, 9]) ties at cost 3 and goes to worker 0; its 3 blocks are the 2
    free ones and a's block 1, evicted (release number 0). f (a's prompt) arrives at 5: worker 0
    has only a's block 0, cached 1, cost 2 - 1 + 0 = 1 against worker 1's 2; worker 0,
    cached_blocks_at_routing 1 (it would be 2 without the eviction)."""
    kv = {"blocks": 4, "block_tokens": 2, "prefix_caching": True}
    wl = workload(
        request("a", 0, 4, 1, [1, 2]),
        request("e", 2, 6, 1, [7, 8, 9]),
        request("f", 5, 4, 1, [1, 2]),
        hash_block_tokens=2,
    )
    code, _, report = run(tmp_path, scenario({"policy": "cache_aware"}, kv=kv), wl)
    assert code == 0
    assert placed(report) == {"a": (0, 0), "e": (0, 0), "f": (0, 1)}
    assert report is not None
    assert report["workers"][0]["kv_cache"]["evictions"] == 2
    assert report["requests"][2]["reused_prompt_tokens"] == 2


def test_r54_an_arrival_sees_no_step_formed_at_its_instant(tmp_path: Path) -> None:
    """Caches of 4 blocks of 2, prefill_weight 2. a (prompt 4, hashes [1, 2]) runs 0-1 on
    worker 0 and leaves both blocks cached (block 1 release number 0, block 0 number 1). At 5,
    e (prompt 6, hashes [7, 8, 9]) costs 2*3 + 0 on both workers and goes to worker 0 (load 3).
    f (a's prompt) arrives at 5 after e and is routed before worker 0 forms the step that
    evicts a's block 1 for e: it sees cached 2, cost 2*0 + 3 = 3 against 2*2 + 0 = 4, so worker
    0. (Seeing the eviction it would cost 2*1 + 3 = 5 and go to worker 1.) In that step e takes
    the 4 blocks' 2 free ones and a's block 1; f (hit 1 block) cannot get its 1 more block and
    waits; at 6 it holds a's block 0, evicts e's last block and reuses 2 tokens."""
    kv = {"blocks": 4, "block_tokens": 2, "prefix_caching": True}
    wl = workload(
        request("a", 0, 4, 1, [1, 2]),
        request("e", 5, 6, 1, [7, 8, 9]),
        request("f", 5, 4, 1, [1, 2]),
        hash_block_tokens=2,
    )
    routing = {"policy": "cache_aware", "prefill_weight": 2}
    code, _, report = run(tmp_path, scenario(routing, kv=kv), wl)
    assert code == 0
    assert placed(report) == {"a": (0, 0), "e": (0, 0), "f": (0, 2)}
    assert report is not None
    f = report["requests"][2]
    assert (f["first_scheduled_us"], f["reused_prompt_tokens"], f["completion_us"]) == (6, 2, 7)
    assert report["workers"][0]["kv_cache"]["evictions"] == 2


@pytest.mark.parametrize(
    ("routing", "kv", "b_seen"),
    [
        ({"policy": "least_loaded"}, KV, (0, 2)),  # both idle at 5: tie, worker 0 sees 2
        ({"policy": "least_loaded"}, {**KV, "prefix_caching": False}, (0, None)),
        ({"policy": "least_loaded"}, None, (0, None)),
        ({"policy": "round_robin"}, KV, (1, None)),  # another policy: null
    ],
)
def test_r57_cached_blocks_at_routing_only_for_state_aware_policies_with_prefix_caching(
    routing: dict[str, Any], kv: dict[str, Any] | None, b_seen: tuple[Any, Any], tmp_path: Path
) -> None:
    """a (prompt 4, hashes [1, 2], 1 output) completes at 1 on worker 0, leaving both blocks
    registered; b (the same prompt) arrives at 5. A rejected request (empty prompt) is null."""
    wl = workload(
        request("a", 0, 4, 1, [1, 2]),
        request("z", 3, 0, 1),
        request("b", 5, 4, 1, [1, 2]),
        hash_block_tokens=2,
    )
    code, _, report = run(tmp_path, scenario(routing, kv=kv), wl)
    assert code == 0
    assert placed(report) == {
        "a": (0, None if b_seen[1] is None else 0),
        "z": (None, None),
        "b": b_seen,
    }


def test_report_3_0_has_no_routing_member_and_reads_no_scenario_1_2(tmp_path: Path) -> None:
    """R57: the member is report 4.0's; R38: scenario 1.2 needs report 4.0."""
    wl = workload(request("a", 0, 4, 1))
    code, error, report = run(tmp_path, scenario({"policy": "least_loaded"}), wl, "3.0")
    assert (code, report) == (2, None)
    assert (
        "/schema_version: expected one of the versions this implementation reads, 1.0, 1.1" in error
    )
    old = scenario({"policy": "round_robin"})
    old["schema_version"] = "1.1"
    code, _, report = run(tmp_path, old, wl, "3.0")
    assert code == 0
    assert report is not None
    assert "cached_blocks_at_routing" not in report["requests"][0]


@pytest.mark.parametrize(
    ("routing", "kv", "version", "pointer"),
    [
        ({"policy": "least_outstanding"}, None, "1.2", "/routing/policy"),
        ({"policy": "least_loaded"}, None, "1.1", "/routing/policy"),
        ({"policy": "cache_aware"}, KV, "1.1", "/routing/policy"),
        ({"policy": "least_loaded", "seed": 2**64}, None, "1.2", "/routing/seed"),
        ({"policy": "cache_aware", "seed": -1}, KV, "1.2", "/routing/seed"),
        ({"policy": "least_loaded", "load_weight": 1}, None, "1.2", "/routing/load_weight"),
        ({"policy": "round_robin", "prefill_weight": 1}, None, "1.2", "/routing/prefill_weight"),
        ({"policy": "cache_aware", "load_weight": 65537}, KV, "1.2", "/routing/load_weight"),
        ({"policy": "cache_aware", "prefill_weight": -1}, KV, "1.2", "/routing/prefill_weight"),
        ({"policy": "cache_aware", "prefill_weight": 1.0}, KV, "1.2", "/routing/prefill_weight"),
        ({"policy": "cache_aware", "prefill_weight": 0, "load_weight": 0}, KV, "1.2", "/routing"),
        ({"policy": "cache_aware"}, None, "1.2", "/routing/policy"),
        (
            {"policy": "cache_aware"},
            {**KV, "prefix_caching": False},
            "1.2",
            "/kv_cache/prefix_caching",
        ),
    ],
)
def test_bad_routing_members_exit_2_naming_file_and_pointer(
    routing: dict[str, Any], kv: Any, version: str, pointer: str, tmp_path: Path
) -> None:
    """R3, R5, R55 to R57: exit 2, no report, the scenario file and the pointer on stderr."""
    scn = scenario(routing, kv=kv)
    scn["schema_version"] = version
    code, error, report = run(tmp_path, scn, workload(request("a", 0, 4, 1)))
    assert (code, report) == (2, None)
    assert f"{tmp_path / 's.json'}: {pointer}: expected" in error


def test_describe_declares_scenario_1_2_and_report_4_0(capsys: pytest.CaptureFixture[str]) -> None:
    """R38: a reader of scenario 1.2 writes report 4.0."""
    assert PLAIN.main(["replay", "--describe", "--report-version", "4.0"]) == 0
    versions = json.loads(capsys.readouterr().out)["schema_versions"]
    assert versions["scenario"] == ["1.0", "1.1", "1.2"]
    assert versions["workload"] == ["1.0", "1.1"]
    assert versions["report"] == ["4.0"]
