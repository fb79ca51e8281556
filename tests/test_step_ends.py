"""``StepEndItems``: a contiguous run of a worker's step ends, sliced, is exactly what the
request's own ``TokenTimes.json_items`` writes; anything else is refused (``None``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from servesim.engine.step_ends import StepEndItems
from servesim.engine.token_times import TokenTimes


def _times(values: list[int]) -> TokenTimes:
    times = TokenTimes()
    for value in values:
        times.append(value)
    return times


#: Strictly increasing ends whose lengths in digits change (0, 7, 98, 1003, ...).
ends_strategy = st.lists(st.integers(1, 10**6), min_size=1, max_size=60).map(
    lambda gaps: [sum(gaps[: index + 1]) - gaps[0] for index in range(len(gaps))]
)


@given(ends_strategy, st.data())
def test_a_contiguous_run_is_sliced_as_written(ends: list[int], data: st.DataObject) -> None:
    sliced = StepEndItems(_times(ends))
    start = data.draw(st.integers(0, len(ends) - 1))
    stop = data.draw(st.integers(start + 1, len(ends)))
    run = _times(ends[start:stop])
    assert sliced.items(run) == run.json_items() == ",".join(map(str, ends[start:stop])).encode()


@given(ends_strategy, st.data())
def test_a_run_with_a_gap_is_refused(ends: list[int], data: st.DataObject) -> None:
    if len(ends) < 3:
        return
    skipped = data.draw(st.integers(1, len(ends) - 2))
    assert StepEndItems(_times(ends)).items(_times(ends[:skipped] + ends[skipped + 1 :])) is None


def test_no_tokens_are_no_items() -> None:
    assert StepEndItems(_times([5, 9])).items(TokenTimes()) == b""
