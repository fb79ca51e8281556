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
from servesim.report import nearest_rank, ratio, statistics
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
