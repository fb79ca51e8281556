"""The plain loop's section 15 (R77 to R87) against numbers derived by hand.

``conformance/examples/independent/servesim_independent.py`` was extended from SPEC.md section
15 alone. These tests hold it to a pass barrier worked out below and to R84's argument errors;
the hand-derived golden cases of the corpus (``golden/valid/pools-*`` and ``ranks-*``, each with
a ``DERIVATION.md`` whose JSON block gives expected values by JSON pointer) are checked too when
the corpus has them.
"""

from __future__ import annotations

import contextlib
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


def scenario(fleet: dict[str, Any]) -> dict[str, Any]:
    return {
        "document": "scenario",
        "schema_version": "1.4",
        "fleet": fleet,
        "routing": {"policy": "round_robin"},
        "scheduler": SCHEDULER,
    }


WORKLOAD = {
    "document": "workload",
    "schema_version": "1.0",
    "requests": [
        {"id": "long", "arrival_us": 0, "prompt_tokens": 10, "max_output_tokens": 2},
        {"id": "short", "arrival_us": 0, "prompt_tokens": 2, "max_output_tokens": 2},
    ],
}


def run(
    folder: Path, scenario_doc: dict[str, Any], *profiles: str, workload: Any = WORKLOAD
) -> tuple[int, str, dict[str, Any] | None]:
    """The plain loop's exit code, standard error and report; ``profiles`` are the
    --timing-profile arguments, with ``{}`` standing for the folder."""
    (folder / "s.json").write_text(json.dumps(scenario_doc))
    (folder / "w.json").write_text(json.dumps(workload))
    (folder / "t.json").write_text(json.dumps(PROFILE))
    arguments = ["replay", "--scenario", str(folder / "s.json")]
    arguments += ["--workload", str(folder / "w.json"), "--output", str(folder / "r.json")]
    for profile in profiles:
        arguments += ["--timing-profile", profile.format(folder)]
    error = io.StringIO()
    with contextlib.redirect_stderr(error):
        code = PLAIN.main([*arguments, "--trace"])
    output = folder / "r.json"
    return code, error.getvalue(), json.loads(output.read_text()) if output.exists() else None


def test_r83_the_short_rank_waits_at_the_barrier(tmp_path: Path) -> None:
    """One worker of two ranks (fleet.dp_size 2), round robin: long (prompt 10) joins rank 0 and
    short (prompt 2) rank 1 (R80). Pass 1 at 0: rank 0's step 1000 + 10 = 1010 us, rank 1's
    1000 + 2 = 1002 us; the pass ends at 1010, and both first tokens come then (R83). Pass 2 at
    1010: one decode each, 1000 us, ends 2010; both complete. The worker: 2 passes, busy 2010;
    rank 0 busy 2010, rank 1 busy 2002 (its own durations, R85)."""
    code, error, report = run(tmp_path, scenario({"workers": 1, "dp_size": 2}), "{}/t.json")
    assert (code, error) == (0, "")
    assert report is not None
    assert report["schema_version"] == "10.0"  # R141: the default
    assert [r["token_times_us"] for r in report["requests"]] == [[1010, 2010], [1010, 2010]]
    assert [(r["pool"], r["rank"]) for r in report["requests"]] == [("default", 0), ("default", 1)]
    worker = report["workers"][0]
    assert (worker["steps"], worker["busy_us"], worker["peak_running"]) == (2, 2010, 2)
    assert [(q["steps"], q["busy_us"]) for q in worker["ranks"]] == [(2, 2010), (2, 2002)]
    assert [(s["rank"], s["start_us"], s["end_us"], s["duration_us"]) for s in report["trace"]] == [
        (0, 0, 1010, 1010),
        (1, 0, 1010, 1002),
        (0, 1010, 2010, 1000),
        (1, 1010, 2010, 1000),
    ]
    assert report["summary"]["steps"] == 2
    assert report["pools"][0]["utilization"] == 1.0


TWO_POOLS = scenario({"pools": [{"name": "a", "workers": 1}, {"name": "b", "workers": 1}]})


@pytest.mark.parametrize(
    ("profiles", "problem"),
    [
        (("{}/t.json", "a={}/t.json"), "both as FILE and as POOL=FILE"),
        (("{}/t.json", "{}/t.json"), "FILE is given more than once"),
        (("a={}/t.json", "a={}/t.json", "b={}/t.json"), "pool a is named twice"),
        (("a={}/t.json", "b={}/t.json", "c={}/t.json"), "a profile for no pool"),
        (("b={}/t.json",), "pool a has no --timing-profile"),
    ],
)
def test_r84_argument_errors_exit_2_and_write_nothing(
    tmp_path: Path, profiles: tuple[str, ...], problem: str
) -> None:
    code, error, report = run(tmp_path, TWO_POOLS, *profiles)
    assert (code, report) == (2, None)
    assert problem in error


def test_r84_per_pool_profiles_in_any_order_name_each_pool(tmp_path: Path) -> None:
    """R85: inputs.timing_profile is null in the per-pool form; timing_profiles in pool order."""
    code, _, report = run(tmp_path, TWO_POOLS, "b={}/t.json", "a={}/t.json")
    assert code == 0
    assert report is not None
    assert report["inputs"]["timing_profile"] is None
    assert [p["pool"] for p in report["inputs"]["timing_profiles"]] == ["a", "b"]
    assert [r["pool"] for r in report["requests"]] == ["a", "b"]


DERIVED = derived_cases("pools-", "ranks-")


@pytest.mark.parametrize("name", DERIVED)
def test_plain_loop_gives_each_derivations_expected_values(name: str, tmp_path: Path) -> None:
    """A golden case's DERIVATION.md expected values (a JSON block of pointer -> value); a case
    whose derivation says exit 3 must exit 3 and write nothing."""
    case = GOLDEN / "valid" / name
    expected = derived_values(case)
    code, error = replay_case(PLAIN, case, tmp_path / "r.json")
    if not expected:
        assert "exit 3" in (case / "DERIVATION.md").read_text()
        assert (code, (tmp_path / "r.json").exists()) == (3, False)
        return
    assert code == 0, error
    assert not wrong_values(json.loads((tmp_path / "r.json").read_text()), expected)
