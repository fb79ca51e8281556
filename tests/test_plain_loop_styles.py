"""The plain loop's section 16 (R88 to R96) against numbers derived by hand.

``conformance/examples/independent/servesim_independent.py`` was extended from SPEC.md section
16 alone (``QUESTIONS-styles.md`` beside it lists the readings it took). These tests hold it to
a pass worked out below (a worker's ``peak_running`` when one rank retracts while another
admits, QUESTIONS-styles.md Q1), to R88's input checks beyond the corpus's, and to the expected
values of the hand-derived golden style cases (``golden/valid/sglang-*``, ``trtllm-*`` and
``styles-*``, each with a ``DERIVATION.md`` whose JSON block gives expected values by JSON
pointer) when the corpus has them.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.golden_cases import (
    GOLDEN,
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
        "step_overhead_ns": 1000,
        "prefill_token_ns": 0,
        "decode_token_ns": 0,
    },
}

#: One worker of two ranks, sglang with an estimate that counts almost nothing (c = 1: n_init
#: 210,000, n_decay 301), B = 1 with prefix caching, routed by cost (R56, R82).
SCENARIO: dict[str, Any] = {
    "document": "scenario",
    "schema_version": "1.5",
    "fleet": {"workers": 1, "dp_size": 2},
    "routing": {"policy": "cache_aware", "prefill_weight": 2, "load_weight": 1},
    "scheduler": {
        "max_num_seqs": 4,
        "max_batched_tokens": 16,
        "max_model_len": 1000,
        "style": "sglang",
        "prefill": {"mode": "chunked", "max_chunk_tokens": 16},
        "sglang": {"clip_max_new_tokens": 1, "conservativeness_permille": 1},
    },
    "kv_cache": {"blocks": 11, "block_tokens": 1, "prefix_caching": True},
}
WORKLOAD = {
    "document": "workload",
    "schema_version": "1.1",
    "prefix_hash_block_tokens": 1,
    "requests": [
        {
            "id": "A",
            "arrival_us": 0,
            "prompt_tokens": 4,
            "max_output_tokens": 5,
            "prefix_hashes": [1, 2, 3, 4],
        },
        {
            "id": "C",
            "arrival_us": 1,
            "prompt_tokens": 4,
            "max_output_tokens": 5,
            "prefix_hashes": [1, 2, 3, 4],
        },
        {"id": "R2", "arrival_us": 5, "prompt_tokens": 2, "max_output_tokens": 1},
    ],
}


def run(
    folder: Path, scenario: Any, *options: str, workload: Any = WORKLOAD
) -> tuple[int, str, dict[str, Any] | None]:
    """The plain loop's exit code, standard error and report (with the trace)."""
    for name, document in (("s", scenario), ("w", workload), ("t", PROFILE)):
        (folder / f"{name}.json").write_text(json.dumps(document))
    arguments = ["replay", "--scenario", str(folder / "s.json")]
    arguments += ["--workload", str(folder / "w.json"), "--output", str(folder / "r.json")]
    arguments += ["--timing-profile", str(folder / "t.json"), "--trace", *options]
    error = io.StringIO()
    with contextlib.redirect_stderr(error):
        code = PLAIN.main(arguments)
    output = folder / "r.json"
    return code, error.getvalue(), json.loads(output.read_text()) if output.exists() else None


def test_r85_r90_a_worker_peak_running_is_counted_once_the_pass_is_formed(
    tmp_path: Path,
) -> None:
    """Every step lasts 1 us. t=0: rank 0 prefills A (4 blocks, registered at 1). t=1: C
    (A's prefix) costs 2*0 + 1*4 = 4 on rank 0 and 2*4 = 8 on rank 1, joins rank 0, is
    admitted with a hit of 3 (the L-1 cap) and one new block, prefill-only; A waits. t=2, 3, 4:
    decode-only steps of A and C, one block each (held 5 -> 7 -> 9 -> 11 of 11). t=5: R2 costs
    2*2 + 1*8 = 12 on rank 0, 4 on rank 1 and joins rank 1; rank 1 prefills it while rank 0
    needs 2 blocks with none free and retracts C (4 produced each, prompts equal: the latest),
    whose 4 unshared blocks free A's next. The pass ends at 6 with A and R2 complete; rank 0
    running 1, rank 1 running 1: the worker's total once formed is 2 (before rank 0's
    retraction it would be 3). t=6: C recomputes L = 8 with a hit of 4 (A's released blocks),
    a chunk of 4, and completes at 7.

    The ratio: 210,000 at t=0, 1 (no change in a prefill-only step); decays by 301 at the
    decode steps of t=2, 3, 4 (209,097 used at t=5); the retraction re-estimates over A alone,
    ceil(Q * (4 + 20) / (5 + 1)) capped at Q, so the step at t=6 uses 1; rank 1 uses 210,000.
    """
    code, _, report = run(tmp_path, SCENARIO)
    assert code == 0
    assert report is not None
    worker = report["workers"][0]
    assert worker["peak_running"] == 2
    assert [rank["peak_running"] for rank in worker["ranks"]] == [2, 1]
    requests = {r["id"]: r for r in report["requests"]}
    assert requests["A"]["token_times_us"] == [1, 3, 4, 5, 6]
    assert requests["C"]["token_times_us"] == [2, 3, 4, 5, 7]
    assert requests["R2"]["token_times_us"] == [6]
    assert [requests[x]["rank"] for x in ("A", "C", "R2")] == [0, 0, 1]
    assert [requests[x]["retractions"] for x in ("A", "C", "R2")] == [0, 1, 0]
    assert requests["C"]["reused_prompt_tokens"] == 3  # its first admission (R48)
    assert worker["kv_cache"]["reused_tokens"] == 3 + 4  # readmissions included (R52)
    assert worker["kv_cache"]["retractions"] == 1
    assert worker["kv_cache"]["peak_reserved_blocks"] is None
    assert worker["style"] == "sglang"
    trace = report["trace"]
    assert [(e["start_us"], e["rank"], e["kind"]) for e in trace] == [
        (0, 0, "prefill"),
        (1, 0, "prefill"),
        (2, 0, "decode"),
        (3, 0, "decode"),
        (4, 0, "decode"),
        (5, 0, "decode"),
        (5, 1, "prefill"),
        (6, 0, "prefill"),
    ]
    assert trace[5]["retracted"] == ["C"]
    assert trace[5]["decode_requests"] == ["A"]
    assert trace[7]["prefill"] == [{"id": "C", "tokens": 4}]
    ratios = [e["new_token_ratio"] for e in trace]
    q = 300_000_000
    assert ratios == [
        210_000 / q,
        210_000 / q,
        210_000 / q,
        209_699 / q,
        209_398 / q,
        209_097 / q,
        210_000 / q,
        1,
    ]
    assert report["summary"]["steps"] == 7
    assert report["summary"]["makespan_us"] == 7


def edited(change: Any) -> dict[str, Any]:
    scenario = copy.deepcopy(SCENARIO)
    change(scenario)
    return scenario


def unused_sglang_limits(scenario: dict[str, Any]) -> None:
    """R88's agreements are checked for the limits a pool uses: the scenario's own sglang
    scheduler, used by no pool, may break them (QUESTIONS-styles.md Q13)."""
    own = {**scenario["scheduler"], "style": "vllm"}
    del own["sglang"]
    scenario["fleet"] = {"pools": [{"name": "a", "workers": 1, "scheduler": own}]}
    scenario["routing"] = {"policy": "round_robin"}
    scenario["scheduler"]["prefill"]["max_chunk_tokens"] = 32  # above max_batched_tokens 16


INVALID = {
    "a pool's own style in scenario 1.4": (
        lambda s: s.update(
            schema_version="1.4",
            fleet={"pools": [{"name": "a", "workers": 1, "scheduler": {"style": "vllm"}}]},
        ),
        "/fleet/pools/0/scheduler/style",
    ),
    "sglang options not an object": (
        lambda s: s["scheduler"].update(sglang=1),
        "/scheduler/sglang",
    ),
    "an unknown sglang option": (
        lambda s: s["scheduler"]["sglang"].update(schedule_policy="lpm"),
        "/scheduler/sglang/schedule_policy",
    ),
    "a pool's own sglang options under its vllm style": (
        lambda s: s.update(
            fleet={
                "pools": [
                    {
                        "name": "a",
                        "workers": 1,
                        "scheduler": {**s["scheduler"], "style": "vllm"},
                    }
                ]
            }
        ),
        "/fleet/pools/0/scheduler/style",
    ),
}


@pytest.mark.parametrize("name", sorted(INVALID))
def test_r88_section_16_members_are_checked(name: str, tmp_path: Path) -> None:
    change, pointer = INVALID[name]
    code, error, report = run(tmp_path, edited(change))
    assert (code, report) == (2, None)
    assert f": {pointer}: expected " in error


def test_r88_unused_scenario_limits_are_not_checked(tmp_path: Path) -> None:
    code, _, report = run(tmp_path, edited(unused_sglang_limits))
    assert code == 0
    assert report is not None
    assert [w["style"] for w in report["workers"]] == ["vllm"]


def test_r38_scenario_1_5_needs_report_7(tmp_path: Path) -> None:
    code, error, report = run(tmp_path, SCENARIO, "--report-version", "6.0")
    assert (code, report) == (2, None)
    assert "--report-version 7.0" in error


DERIVED = derived_cases("sglang-", "trtllm-", "styles-")


@pytest.mark.parametrize("name", DERIVED)
def test_plain_loop_gives_each_derivations_expected_values(name: str, tmp_path: Path) -> None:
    """A golden style case's DERIVATION.md expected values (a JSON block of pointer -> value)."""
    case = GOLDEN / "valid" / name
    expected = derived_values(case)
    assert expected
    code, error = replay_case(PLAIN, case, tmp_path / "r.json")
    assert code == 0, error
    assert not wrong_values(json.loads((tmp_path / "r.json").read_text()), expected)
