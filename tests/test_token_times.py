"""``TokenTimes`` behaves exactly like the list of token times it stands for."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from servesim.engine.token_times import TokenTimes

#: (gap before the first new token, step, count): a sequence of appends and progressions.
operations = st.lists(
    st.tuples(st.integers(1, 5), st.integers(1, 5), st.integers(1, 6)), max_size=20
)


@given(operations)
def test_matches_a_plain_list(steps: list[tuple[int, int, int]]) -> None:
    times, expected, last = TokenTimes(), [], 0
    for gap, step, count in steps:
        first = last + gap
        if count == 1:
            times.append(first)
        else:
            times.extend_progression(first, step, count)
        expected.extend(range(first, first + count * step, step))
        last = expected[-1]
    assert times.to_list() == expected
    assert list(times) == expected
    assert len(times) == len(expected)
    if expected:
        assert (times.first, times.last) == (expected[0], expected[-1])
    assert times.gap_counts() == Counter(b - a for a, b in pairwise(expected))


def test_a_run_is_one_segment() -> None:
    times = TokenTimes()
    times.append(100)
    times.extend_progression(110, 10, 1000)
    times.append(10_110)
    assert len(times._segments) == 1
    assert len(times) == 1002


def test_segments_of_a_measured_run_extend_like_appends() -> None:
    # a run's stretches of equal durations (10, 10, 10, 11, 11, 11, 7, 10), as
    # ``measured_decode_run`` forms them: the first continues the request's last segment
    segments = [(10, 10, 3), (41, 11, 3), (70, 7, 1), (80, 10, 1)]
    ends = [10, 20, 30, 41, 52, 63, 70, 80]
    by_segments, by_appends = TokenTimes(), TokenTimes()
    for times in (by_segments, by_appends):
        times.append(0)
    by_segments.extend_progressions(segments)
    for end in ends:
        by_appends.append(end)
    assert by_segments.to_list() == by_appends.to_list() == [0, *ends]
    assert list(by_segments) == [0, *ends]
    assert len(by_segments) == len(by_appends) == 9
    assert (by_segments.first, by_segments.last) == (0, 80)
    assert by_segments.gap_counts() == by_appends.gap_counts()
    assert by_segments._segments[0] == (0, 10, 4)
