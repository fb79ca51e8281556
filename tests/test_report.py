"""R8, R12, R24, R26, R27: arrival order, routing at arrival, and the report's arithmetic."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import servesim
from servesim.contract.nearest_rank import nearest_rank
from servesim.report.writer import ratio, statistics
from tests.helpers import scenario_doc, timing_doc, workload_doc, write_inputs


@given(st.integers(0, 2**80), st.integers(1, 2**80))
def test_r24_ratio_is_the_correctly_rounded_quotient(numerator: int, denominator: int) -> None:
    value = ratio(numerator, denominator)
    assert value is not None
    exact = Fraction(numerator, denominator)
    # No other binary64 value is closer to the exact quotient.
    error = abs(Fraction(value) - exact)
    for neighbour in (math.nextafter(value, -math.inf), math.nextafter(value, math.inf)):
        assert error <= abs(Fraction(neighbour) - exact)


def test_r24_division_by_zero_is_null() -> None:
    assert ratio(5, 0) is None


@pytest.mark.parametrize(
    ("count", "percent", "rank"),
    [
        (1, 50, 1),
        (1, 99, 1),
        (2, 50, 1),
        (3, 50, 2),
        (10, 90, 9),
        (10, 95, 10),
        (100, 99, 99),
        (101, 99, 100),
        (200, 50, 100),
    ],
)
def test_r27_nearest_rank(count: int, percent: int, rank: int) -> None:
    assert nearest_rank(list(range(1, count + 1)), percent) == rank


def test_r27_statistics_of_no_samples_are_null() -> None:
    assert statistics([]) == {
        "count": 0,
        "min": None,
        "max": None,
        "mean": None,
        "p50": None,
        "p90": None,
        "p95": None,
        "p99": None,
    }


def test_r27_statistics_sort_their_samples() -> None:
    assert statistics([30, 10, 20, 40]) == {
        "count": 4,
        "min": 10,
        "max": 40,
        "mean": 25.0,
        "p50": 20,
        "p90": 40,
        "p95": 40,
        "p99": 40,
    }


def _report(tmp_path: Path, workers: int, *requests: tuple[str, int, int, int]) -> Any:
    paths = write_inputs(
        tmp_path,
        scenario_doc(workers=workers, max_num_seqs=1, max_batched_tokens=64),
        workload_doc(*requests),
        timing_doc(),
    )
    return json.loads(servesim.replay(*paths.values(), trace=True))


def test_r8_r12_equal_arrivals_are_routed_in_document_order(tmp_path: Path) -> None:
    """Listed out of arrival order: arrival order sorts by time, then keeps the list order."""
    report = _report(tmp_path, 2, ("late", 100, 4, 1), ("b", 0, 4, 1), ("a", 0, 4, 1))
    workers = {entry["id"]: entry["worker"] for entry in report["requests"]}
    assert workers == {"b": 0, "a": 1, "late": 0}
    assert [entry["id"] for entry in report["requests"]] == ["late", "b", "a"], "workload order"


def test_r8_r19_equal_arrivals_queue_in_document_order(tmp_path: Path) -> None:
    """One worker running one request at a time serves equal arrivals in list order."""
    report = _report(tmp_path, 1, ("x", 0, 4, 1), ("y", 0, 4, 1), ("z", 0, 4, 1))
    firsts = [entry["first_scheduled_us"] for entry in report["requests"]]
    assert firsts == sorted(firsts)
    assert len(set(firsts)) == 3
    assert report["workers"][0]["peak_waiting"] == 3
    assert report["workers"][0]["peak_running"] == 1


def _simulated(trace: bool) -> Any:
    """A small replay's simulation result (no cache), for the R52 writer tests to annotate."""
    from servesim.contract.scenario import build_scenario
    from servesim.contract.timing_profile import build_timing_profile
    from servesim.contract.workload import build_workload
    from servesim.engine.loop import simulate

    return simulate(
        build_scenario(scenario_doc(workers=2)),
        build_workload(workload_doc(("a", 0, 40, 3), ("b", 5, 20, 2), ("c", 9, 0, 1))),
        build_timing_profile(timing_doc()),
        record_trace=trace,
    )


def _written(result: Any) -> tuple[bytes, dict[str, Any]]:
    from servesim.contract.documents import load_document
    from servesim.report.writer import report_chunks

    inputs = {"scenario": b"s", "workload": b"w", "timing_profile": b"t"}
    data = b"".join(report_chunks(result, inputs))
    value = load_document(data, "report.json", "report").value  # R3: valid under report 5.0
    return data, value


def test_r52_without_a_cache_the_report_says_null_and_zero() -> None:
    _, report = _written(_simulated(trace=True))
    assert report["schema_version"] == "10.0"
    assert report["summary"]["kv_cache"] is None
    assert report["summary"]["rejected_by_reason"]["exceeds_kv_cache"] == 0
    assert [worker["kv_cache"] for worker in report["workers"]] == [None, None]
    assert {(r["reused_prompt_tokens"], r["preemptions"]) for r in report["requests"]} == {(0, 0)}
    assert {(e["kv_blocks_in_use"], tuple(e["preempted"])) for e in report["trace"]} == {(None, ())}


def test_r52_the_cache_members_are_written_from_the_counters_in_canonical_order() -> None:
    """The byte templates put R52's members where RFC 8785 orders them, with the values the
    simulation's counters hold; the summary adds them up as R52 says."""
    from servesim.contract.canonical import canonical_bytes
    from servesim.engine.kv.counters import KvCacheCounters

    result = _simulated(trace=True)
    result.workers[0].kv_counters = KvCacheCounters(7, 32, 1, 4)
    result.workers[1].kv_counters = KvCacheCounters(3, 0, 2, 5, 6, 8)
    states = {state.request.id: state for state in result.requests}
    states["a"].reused_prompt_tokens, states["a"].preemptions = 32, 1
    states["b"].preemptions, states["b"].retractions = 2, 6
    for step in result.steps:
        step.kv_blocks_in_use = 3 + step.worker
        step.preempted = ["b"] if step.worker == 1 else []
        step.retracted = ["b", "b"] if step.worker == 1 else []  # R95's members likewise
    data, report = _written(result)
    assert data == canonical_bytes(report) + b"\n"
    assert report["summary"]["kv_cache"] == {
        "reused_prompt_tokens": 32,
        "prefix_reuse_ratio": 32 / 60,  # over the completed requests' 40 + 20 prompt tokens
        "preemptions": 3,
        "evictions": 9,
        "retractions": 6,
        "host_reused_prompt_tokens": 0,  # R140: no host tier
        "host_reuse_ratio": 0,
        "gpu_reuse_ratio": 32 / 60,
        "host": None,
    }
    assert [worker["kv_cache"] for worker in report["workers"]] == [
        {
            "peak_blocks_in_use": 7,
            "reused_tokens": 32,
            "preemptions": 1,
            "evictions": 4,
            "retractions": 0,
            "peak_reserved_blocks": None,
        },
        {
            "peak_blocks_in_use": 3,
            "reused_tokens": 0,
            "preemptions": 2,
            "evictions": 5,
            "retractions": 6,
            "peak_reserved_blocks": 8,
        },
    ]
    by_id = {entry["id"]: entry for entry in report["requests"]}
    assert (by_id["a"]["reused_prompt_tokens"], by_id["a"]["preemptions"]) == (32, 1)
    assert (by_id["b"]["reused_prompt_tokens"], by_id["b"]["preemptions"]) == (0, 2)
    assert (by_id["a"]["retractions"], by_id["b"]["retractions"]) == (0, 6)
    assert by_id["c"]["reject_reason"] == "empty_prompt"
    assert {
        (e["worker"], e["kv_blocks_in_use"], tuple(e["preempted"]), tuple(e["retracted"]))
        for e in report["trace"]
    } == {
        (0, 3, (), ()),
        (1, 4, ("b",), ("b", "b")),
    }


GOLDEN_CASES = sorted(
    path.parent for path in (Path(__file__).parents[1] / "golden" / "valid").glob("*/scenario.json")
)


@pytest.mark.parametrize("stop", [None, 2, 3], ids=["no-stop", "stop-at-half", "stop-at-third"])
def test_r27_itl_counted_per_step_equals_the_gaps_of_completed_requests(stop: int | None) -> None:
    """``report.itl_gaps`` (the workers count gaps per step, R16; the unfinished requests'
    are taken back) gives the gaps between consecutive tokens of every completed request, on
    every golden case of a fleet that never changes (the writer's case for it), and with a stop
    time (R62) that cuts some requests off."""
    from collections import Counter

    from servesim.contract.errors import ServesimError
    from servesim.contract.scenario import build_scenario
    from servesim.contract.timing_profile import build_timing_profile
    from servesim.contract.workload import build_workload
    from servesim.engine.loop import simulate
    from servesim.report.writer import _completed, itl_gaps

    checked = 0
    for case in GOLDEN_CASES:
        value = {
            name: json.loads((case / f"{name}.json").read_text())
            for name in ("scenario", "workload")
        }
        scenario, workload = build_scenario(value["scenario"]), build_workload(value["workload"])
        per_pool = sorted((case / "timing-profiles").glob("*.json"))  # R87: a profile per pool
        timing = (
            {path.stem: build_timing_profile(json.loads(path.read_text())) for path in per_pool}
            if per_pool
            else build_timing_profile(json.loads((case / "timing-profile.json").read_text()))
        )
        try:
            result = simulate(scenario, workload, timing)
            if stop is not None:
                first = min(state.request.arrival_us for state in result.requests)
                last = max(state.terminal_us or first for state in result.requests)
                stop_at = first + 1 + (last - first) // stop
                scenario = build_scenario({**value["scenario"], "stop_at_us": stop_at})
                result = simulate(scenario, workload, timing)
        except ServesimError:  # out of coverage (R43): no report to count for
            continue
        if result.fleet is not None:  # section 18: the writer counts the completed requests'
            continue  # own gaps (a migration's gap spans two workers)
        expected: Counter[int] = Counter()
        for state in result.requests:
            if _completed(state):
                state.token_times_us.count_gaps(expected)
        assert itl_gaps(result.requests, result.workers) == expected, case.name
        checked += 1
    assert checked > 100
