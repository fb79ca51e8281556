"""Agreement mode (issue 12 item 4): how far an implementation's times are from the reference's.

Every figure asserted here is computed by hand from the reports in the test (or from the golden
expected reports and what the fake changes), not by the code under test.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from servesim_conformance.agreement import METRICS, Errors, compare, figures, nearest_rank
from servesim_conformance.agreement_run import checked_report, generated_documents
from servesim_conformance.implementation import Description
from servesim_conformance.properties import reads_kv_cache
from servesim_conformance.schemas import validate_harness_document
from tests.helpers import REPO, run_servesim

FAKE = REPO / "tests" / "fakes" / "fake_sim.py"
GOLDEN = REPO / "golden"
TWO_SMOKE = ["--case", "valid/smoke-one-request", "--case", "valid/smoke-two-workers"]


def fake_command(mode: str) -> str:
    return f"{sys.executable} {FAKE} {mode}"


def conform(*arguments: str | Path) -> subprocess.CompletedProcess[str]:
    return run_servesim("conform", *arguments)


def request(
    request_id: str, arrival: int, tokens: list[int], *, completed: bool = True
) -> dict[str, Any]:
    return {
        "id": request_id,
        "outcome": "completed" if completed else "rejected",
        "arrival_us": arrival,
        "first_token_us": tokens[0] if completed else None,
        "completion_us": tokens[-1] if completed else None,
        "token_times_us": tokens if completed else [],
    }


def statistics(p50: int | None, p90: int | None, p95: int | None, p99: int | None) -> Any:
    return {"p50": p50, "p90": p90, "p95": p95, "p99": p99}


def report(requests: list[dict[str, Any]], ttft_p99: int | None = 100) -> dict[str, Any]:
    flat = statistics(10, 10, 10, 10)
    return {
        "requests": requests,
        "summary": {
            "queue_us": flat,
            "ttft_us": statistics(100, 100, 100, ttft_p99),
            "e2e_us": flat,
            "itl_us": statistics(None, None, None, None),
        },
    }


def test_nearest_rank_is_r27_s() -> None:
    """rank = ceil(p n / 100), at least 1; the r-th smallest."""
    assert nearest_rank([], 99) is None
    assert nearest_rank([7], 99) == 7
    assert nearest_rank([5, 1, 3], 99) == 5  # ceil(2.97) = 3
    values = list(range(1, 201))  # ceil(99 * 200 / 100) = 198
    assert nearest_rank(list(reversed(values)), 99) == 198
    assert nearest_rank(list(range(1, 101)), 99) == 99  # exactly 99: no rounding up


def test_matched_requests_give_absolute_and_relative_errors() -> None:
    reference = report(
        [
            request("a", 1000, [1100, 1300, 1600]),
            request("b", 2000, [2500, 3000]),
            request("c", 0, [], completed=False),
            request("d", 50, [60]),
            request("gone", 0, [5]),
        ]
    )
    actual = report(
        [
            request("b", 2000, [2500, 3010, 3020]),  # one token more: a count mismatch
            request("a", 1001, [1100, 1304, 1600]),  # listed in another order: matched by id
            request("c", 0, [7]),  # completed here, rejected there
            request("d", 50, [60]),
            request("new", 0, [9]),
        ],
        ttft_p99=110,
    )
    comparison = compare(actual, reference)
    assert comparison.requests == {
        "reference": 5,
        "matched": 4,
        "missing": 1,
        "extra": 1,
        "outcome_mismatches": 1,
        "token_count_mismatches": 1,
    }
    arrival = figures(comparison.errors["arrival_us"])
    # a: |1001 - 1000| / 1000; b, c, d exact (c's base is max(0, 1) = 1)
    assert arrival == {
        "samples": 4,
        "exact": 3,
        "exact_share": 0.75,
        "max_abs_us": 1,
        "p99_abs_us": 1,
        "max_rel": 1 / 1000,
        "p99_rel": 1 / 1000,
        "null_mismatches": 0,
    }
    first = figures(comparison.errors["first_token_us"])
    assert (first["samples"], first["exact"], first["max_abs_us"], first["null_mismatches"]) == (
        3,
        3,
        0,
        1,  # c: null in the reference only
    )
    completion = figures(comparison.errors["completion_us"])
    # a: 0; b: |3020 - 3000| / (3000 - 2000); d: 0
    assert completion["max_abs_us"] == 20
    assert completion["max_rel"] == 20 / 1000
    assert completion["exact"] == 2
    tokens = figures(comparison.errors["token_times_us"])
    # a: 0, 4 (base 1300 - 1000), 0; b: 0, 10 (base 3000 - 2000) and its third token unpaired;
    # d: 0 (base 60 - 50); c: no token in the reference
    assert tokens == {
        "samples": 6,
        "exact": 4,
        "exact_share": 4 / 6,
        "max_abs_us": 10,
        "p99_abs_us": 10,  # rank ceil(5.94) = 6 of [0, 0, 0, 0, 4, 10]
        "max_rel": 4 / 300,
        "p99_rel": 4 / 300,  # rank 6 of [0, 0, 0, 0, 10/1000, 4/300]
        "null_mismatches": 0,
    }
    ttft = figures(comparison.errors["summary.ttft_us.p99"])
    assert (ttft["max_abs_us"], ttft["max_rel"]) == (10, 10 / 100)
    assert figures(comparison.errors["summary.itl_us.p50"])["samples"] == 0  # null on both sides
    assert list(comparison.errors) == list(METRICS)


def test_a_metric_with_no_sample_has_null_figures() -> None:
    assert figures(Errors(null_mismatches=2)) == {
        "samples": 0,
        "exact": 0,
        "exact_share": None,
        "max_abs_us": None,
        "p99_abs_us": None,
        "max_rel": None,
        "p99_rel": None,
        "null_mismatches": 2,
    }


def test_identical_reports_agree_exactly() -> None:
    value = json.loads(
        (GOLDEN / "valid" / "smoke-two-workers" / "expected-report.json").read_text()
    )
    comparison = compare(copy.deepcopy(value), value)
    token = figures(comparison.errors["token_times_us"])
    assert (token["samples"], token["exact_share"], token["max_abs_us"]) == (4, 1.0, 0)


def test_a_request_that_never_arrived_is_compared_without_a_crash() -> None:
    """R62: a turn never released before the stop time has ``arrival_us`` null; the agreement
    figures count what both reports hold and divide by what is known."""
    value = json.loads(
        (GOLDEN / "valid" / "stop-session-turn-not-released" / "expected-report.json").read_text()
    )
    assert any(request["arrival_us"] is None for request in value["requests"])
    comparison = compare(copy.deepcopy(value), value)
    assert figures(comparison.errors["arrival_us"])["null_mismatches"] == 0
    assert figures(comparison.errors["token_times_us"])["exact_share"] == 1.0


def test_generated_cases_are_reproducible_from_their_seed() -> None:
    first, again, other = (
        generated_documents(3, 7),
        generated_documents(3, 7),
        generated_documents(3, 8),
    )
    assert len(first) == 3
    assert first == again
    assert first != other


def _description(scenario: list[str], workload: list[str]) -> Description:
    versions = {"scenario": scenario, "workload": workload, "timing_profile": ["1.0"]}
    return Description("x", "0", 3, {**versions, "report": ["3.0"]}, frozenset())


def test_generated_cases_have_a_kv_cache_only_for_an_implementation_that_reads_it() -> None:
    """Section 11: with scenario and workload 1.1 declared, generated cases include caches
    under memory pressure; an implementation reading 1.0 only is given none (R38, R53)."""
    assert reads_kv_cache(_description(["1.0", "1.1"], ["1.0", "1.1"]))
    assert not reads_kv_cache(_description(["1.0", "1.1"], ["1.0"]))
    assert not reads_kv_cache(_description(["1.0"], ["1.0", "1.1"]))
    with_cache = generated_documents(20, 0, kv_cache=True)
    assert with_cache == generated_documents(20, 0, kv_cache=True)
    caches = [scenario for scenario, _, _ in with_cache if "kv_cache" in scenario]
    assert 0 < len(caches) < 20
    assert not any("kv_cache" in scenario for scenario, _, _ in generated_documents(20, 0))


def test_agreement_run_of_an_implementation_a_few_microseconds_late(tmp_path: Path) -> None:
    """The fake makes the i-th request's tokens 2(i+1) µs late and ttft p99 1 µs more.

    smoke-one-request: a (arrival 0) tokens 1100, 2200, 3300, all 2 late. smoke-two-workers:
    a (0) 1100, 2200, 2 late; b (0) 1200, 2300, 4 late. ttft p99: 1100 and 1200, each 1 more.
    """
    run_json, markdown = tmp_path / "run.json", tmp_path / "summary.md"
    result = conform(
        "--agreement", "--impl", fake_command("late-by-microseconds"), *TWO_SMOKE,
        "--generated", "0", "--report-json", run_json, "--markdown", markdown,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    value = json.loads(run_json.read_text())
    assert validate_harness_document("run-report", value) == []
    assert value["cases"] == []
    agreement = value["agreement"]
    one, two = agreement["cases"]
    assert (one["id"], one["status"], two["id"], two["status"]) == (
        "valid/smoke-one-request",
        "compared",
        "valid/smoke-two-workers",
        "compared",
    )
    assert one["metrics"]["token_times_us"] == {
        "samples": 3,
        "exact": 0,
        "exact_share": 0.0,
        "max_abs_us": 2,
        "p99_abs_us": 2,
        "max_rel": 2 / 1100,
        "p99_rel": 2 / 1100,  # rank 3 of [2/3300, 2/2200, 2/1100]
        "null_mismatches": 0,
    }
    assert one["metrics"]["completion_us"]["max_rel"] == 2 / 3300
    assert two["metrics"]["token_times_us"]["max_rel"] == 4 / 1200
    assert two["requests"]["matched"] == 2
    overall = agreement["overall"]
    assert overall["cases"] == 2
    assert overall["statuses"]["compared"] == 2
    assert overall["metrics"]["token_times_us"] == {
        "samples": 7,
        "exact": 0,
        "exact_share": 0.0,
        "max_abs_us": 4,
        "p99_abs_us": 4,  # rank ceil(6.93) = 7 of [2, 2, 2, 2, 2, 4, 4]
        "max_rel": 4 / 1200,
        "p99_rel": 4 / 1200,
        "null_mismatches": 0,
    }
    assert overall["metrics"]["first_token_us"]["max_rel"] == 4 / 1200
    assert overall["metrics"]["arrival_us"]["exact_share"] == 1.0
    assert overall["metrics"]["summary.ttft_us.p99"] == {
        "samples": 2,
        "exact": 0,
        "exact_share": 0.0,
        "max_abs_us": 1,
        "p99_abs_us": 1,
        "max_rel": 1 / 1100,
        "p99_rel": 1 / 1100,  # rank 2 of [1/1200, 1/1100]
        "null_mismatches": 0,
    }
    assert overall["metrics"]["summary.e2e_us.p50"]["exact_share"] == 1.0
    page = markdown.read_text()
    assert "### Agreement with the reference" in page
    assert "| token_times_us | 7 | 0.0% | 4 | 4 | 0.00333 | 0.00333 | 0 |" in page
    assert "| `valid/smoke-two-workers` | compared | 2/2 | 0.0% | 4 | 0.00333 |  |" in page
    assert "| outcome | cases |" not in page
    assert "| token_times_us | 7 | 0.0% | 4 | 4 | 0.00333 | 0.00333 | 0 |" in result.stdout


def test_skipped_and_rejected_cases_are_listed_not_counted(tmp_path: Path) -> None:
    run_json = tmp_path / "run.json"
    result = conform(
        "--agreement", "--impl", fake_command("no-chunking"),
        "--case", "valid/smoke-chunked", "--case", "valid/smoke-one-request",
        "--generated", "0", "--report-json", run_json,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    cases = json.loads(run_json.read_text())["agreement"]["cases"]
    statuses = {case["id"]: (case["status"], case["message"]) for case in cases}
    assert statuses["valid/smoke-chunked"] == (
        "skipped",
        "needs undeclared features: prefill.chunked",
    )
    assert statuses["valid/smoke-one-request"] == ("compared", "")
    assert "SKIPPED  valid/smoke-chunked  needs undeclared features" in result.stdout

    rejected = conform(
        "--agreement", "--impl", fake_command("reject-everything"), *TWO_SMOKE,
        "--generated", "0", "--report-json", run_json,
    )  # fmt: skip
    assert rejected.returncode == 1  # nothing compared
    overall = json.loads(run_json.read_text())["agreement"]["overall"]
    assert overall["cases"] == 0
    assert overall["statuses"]["rejected"] == 2
    assert overall["metrics"]["token_times_us"]["samples"] == 0
    assert "no case was compared" in rejected.stderr


def test_a_crashing_implementation_fails_the_agreement_run(tmp_path: Path) -> None:
    result = conform(
        "--agreement", "--impl", fake_command("crash"), "--case", "valid/smoke-one-request",
        "--generated", "0",
    )  # fmt: skip
    assert result.returncode == 1
    assert "ERROR  valid/smoke-one-request  exit code 1" in result.stdout


def test_generated_and_given_inputs_are_compared(tmp_path: Path) -> None:
    folder = tmp_path / "big-trace"
    shutil.copytree(GOLDEN / "valid" / "smoke-two-workers", folder)
    (folder / "expected-report.json").unlink()
    run_json = tmp_path / "run.json"
    result = conform(
        "--agreement",
        "--case",
        "none",
        "--generated",
        "3",
        "--seed",
        "5",
        "--inputs",
        folder,
        "--report-json",
        run_json,
    )  # fmt: skip  (the reference itself: every figure exact)
    assert result.returncode == 0, result.stdout + result.stderr
    agreement = json.loads(run_json.read_text())["agreement"]
    assert [(case["id"], case["source"]) for case in agreement["cases"]] == [
        ("generated/seed-5-0", "generated"),
        ("generated/seed-5-1", "generated"),
        ("generated/seed-5-2", "generated"),
        (f"inputs:{folder}", "inputs"),
    ]
    assert agreement["cases"][3]["requests"]["matched"] == 2
    assert {metric["max_abs_us"] for metric in agreement["overall"]["metrics"].values()} <= {
        0,
        None,
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--generated", "2"], "--generated: only with --agreement"),
        (["--agreement", "--inputs", "/nonexistent"], "--inputs /nonexistent: missing"),
        (["--agreement", "--write-expected-failures", "x.json"], "judges no case"),
        (["--feature", "routing.randm"], 'unknown feature tags: "routing.randm"'),
    ],
)
def test_bad_agreement_options_exit_2(arguments: list[str], message: str) -> None:
    result = conform(*arguments)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_report_s_token_times_are_checked_in_full() -> None:
    """The schema sees each request's first two token times; the rest are checked apart."""
    data = (GOLDEN / "valid" / "smoke-one-request" / "expected-report.json").read_bytes()
    checked = checked_report(data)
    assert not isinstance(checked, str)
    assert checked[1] == "10.0"
    for bad in (-1, 2**53, 3300.5, "3300"):
        value = json.loads(data)
        value["requests"][0]["token_times_us"][2] = bad
        assert checked_report(json.dumps(value).encode()) == (
            "report.json: at /requests/0/token_times_us: not a list of integers from 0 to "
            "9007199254740991"
        )
    value = json.loads(data)
    value["requests"][0]["token_times_us"][0] = -1  # within the first two: the schema's message
    problem = checked_report(json.dumps(value).encode())
    assert isinstance(problem, str)
    assert "/requests/0/token_times_us/0" in problem
    assert isinstance(checked_report(b"not JSON"), str)
    assert isinstance(checked_report(b'{"requests": 3}'), str)
