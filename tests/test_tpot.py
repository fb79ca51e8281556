"""R63's ``summary.tpot_us`` (``servesim.contract.tpot``, which the report 4.0 -> 5.0
migration uses): R27 over exact rationals, each reported value rounded once (R24)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servesim.contract.tpot import _ascending, tpot_sample, tpot_statistics
from servesim.report.writer import tpot_statistics as report_tpot_statistics


def test_r63_samples_are_chosen_by_exact_value_and_the_mean_is_rounded_once() -> None:
    # 1/3, 2/3 and 1/3 again: sorted 1/3, 1/3, 2/3; p50 is rank 2 (1/3), p90 rank 3 (2/3);
    # the mean is (1/3 + 1/3 + 2/3) / 3 = 4/9, one rounding of the exact value
    result = tpot_statistics([(1, 3), (2, 3), (2, 6)])
    assert result == {
        "count": 3,
        "min": 1 / 3,
        "max": 2 / 3,
        "mean": 4 / 9,
        "p50": 1 / 3,
        "p90": 2 / 3,
        "p95": 2 / 3,
        "p99": 2 / 3,
    }


def test_r63_the_mean_is_not_a_sum_of_rounded_samples() -> None:
    """0.1 + 0.2 + 0.3 in binary64 is not 0.6: summing floats would change the last bit of
    the mean, which R63 forbids (the exact sum 6/10 over 3 is 1/5)."""
    samples = [(1, 10), (2, 10), (3, 10)]
    assert (0.1 + 0.2 + 0.3) / 3 != 0.2
    assert tpot_statistics(samples)["mean"] == 0.2


def test_r27_no_samples_are_null() -> None:
    assert tpot_statistics([]) == {
        "count": 0,
        **dict.fromkeys(("min", "max", "mean", "p50", "p90", "p95", "p99")),
    }


def test_r63_a_sample_is_gap_over_output_tokens_minus_one_and_needs_two_tokens() -> None:
    assert tpot_sample(first_token_us=1030, completion_us=4640, output_tokens=4) == (3610, 3)
    assert tpot_sample(first_token_us=0, completion_us=10, output_tokens=5) == (5, 2)
    with pytest.raises(ValueError, match="fewer than two output tokens"):
        tpot_sample(first_token_us=5, completion_us=5, output_tokens=1)


samples = st.lists(
    st.tuples(st.integers(0, 2**53 - 1), st.integers(1, 2**32 - 1)), min_size=0, max_size=40
)


@given(samples)
def test_r63_matches_a_literal_reading_and_the_report_writer(pairs: list[tuple[int, int]]) -> None:
    """A literal reading of R63 with ``Fraction``s agrees on every member; the report writer
    computes the member with this same function (the migration's result must be what a 5.0
    writer writes, R64)."""
    exact = sorted(Fraction(gap, steps) for gap, steps in pairs)
    expected: dict[str, object] = {"count": len(exact)}
    if exact:
        expected.update(
            min=float(exact[0]), max=float(exact[-1]), mean=float(sum(exact) / len(exact))
        )
        for percent in (50, 90, 95, 99):
            rank = max(1, -(-percent * len(exact) // 100))
            expected[f"p{percent}"] = float(exact[rank - 1])
    else:
        expected.update(dict.fromkeys(("min", "max", "mean", "p50", "p90", "p95", "p99")))
    assert tpot_statistics(pairs) == expected
    assert report_tpot_statistics is tpot_statistics


def test_samples_that_round_alike_are_still_ordered_exactly() -> None:
    """``_ascending`` sorts by the rounded quotients first: three samples that all round to
    1.0 (one just under, one at, one just over) come out in exact order, around a sample
    that rounds apart."""
    under, one, over, half = (2**54 - 1, 2**54), (1, 1), (2**53 + 1, 2**53), (1, 2)
    assert {pair[0] / pair[1] for pair in (under, one, over)} == {1.0}
    assert _ascending([over, half, one, under]) == [half, under, one, over]
    assert _ascending([]) == []
