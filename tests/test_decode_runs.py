"""Measured decode runs in closed form, against the step-by-step walk they stand for.

``measured_decode_run`` times a run's steps a stretch of equal durations at a time, trusting the
models' ``context_extent``; ``Step.truncate_at`` cuts such a run. Each is compared here with the
obvious per-step computation, at the boundaries where an off-by-one would hide: the last
context of a stretch, the coverage's end, R6's time limit, the stretch cap and the step ending
exactly at a cut. (The whole replay is compared with the plain loop in test_differential.py.)
"""

from __future__ import annotations

from itertools import pairwise
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from servesim.contract.model import (
    GridTiming,
    MeasuredTiming,
    RegressionTiming,
    Request,
    StepShape,
    round_half_away,
    rounding_extent,
)
from servesim.contract.timing_profile import build_timing_profile
from servesim.engine.decode_runs import measured_decode_run
from servesim.engine.requests import RequestState
from servesim.engine.step import Step
from servesim_conformance.strategies import REACHABLE, measured_timing_profiles

# --- the models: how far the context may grow with the same duration ------------------------


#: ``(numerator, denominator)`` of a context strictly inside a grid cell (R41 step 1).
inside_a_cell = st.integers(2, 500).flatmap(
    lambda denominator: st.tuples(st.integers(1, denominator - 1), st.just(denominator))
)


@given(st.integers(0, 3000), inside_a_cell)
def test_rounding_extent_is_the_last_numerator_with_the_same_rounding(
    distance: int, fraction: tuple[int, int]
) -> None:
    numerator, denominator = fraction
    extent = rounding_extent(distance, numerator, denominator)
    value = round_half_away(distance, numerator, denominator)
    assert numerator <= extent < denominator
    assert all(
        round_half_away(distance, n, denominator) == value for n in range(numerator, extent + 1)
    )
    if extent + 1 < denominator:  # exact: the next numerator rounds differently
        assert round_half_away(distance, extent + 1, denominator) != value


def _model(profile: dict[str, object]) -> MeasuredTiming:
    model = build_timing_profile(profile).model
    assert isinstance(model, GridTiming | RegressionTiming)
    return model


@st.composite
def models_and_shapes(draw: st.DrawFn) -> tuple[MeasuredTiming, StepShape]:
    model = _model(draw(measured_timing_profiles()))
    shape = StepShape(
        draw(st.integers(0, REACHABLE["decode_requests"])),
        draw(st.integers(0, REACHABLE["context_tokens"])),
        draw(st.integers(0, REACHABLE["prefill_tokens"])),
    )
    return model, shape


@given(models_and_shapes())
def test_context_extent_is_a_stretch_of_equal_durations(
    case: tuple[MeasuredTiming, StepShape],
) -> None:
    model, shape = case
    extent = model.context_extent(shape)
    top = model.coverage.context_tokens.max
    assert extent >= shape.context_tokens
    duration = model.step_duration_us(shape)
    for context in range(shape.context_tokens, min(extent, top) + 1):
        same = StepShape(shape.decode_requests, context, shape.prefill_tokens)
        assert model.step_duration_us(same) == duration
    after = extent + 1
    if after > top:
        return
    later = model.step_duration_us(StepShape(shape.decode_requests, after, shape.prefill_tokens))
    if isinstance(model, RegressionTiming):
        assert later > duration  # exact: one more context token lengthens the step
    elif (
        shape.decode_requests in model.decode_axis
        and shape.context_tokens not in model.context_axis
        and after not in model.context_axis
    ):
        assert later != duration  # exact inside a cell when D is on a point


# --- the run: its steps' end times ----------------------------------------------------------


def _decode_step(model: MeasuredTiming, decoding: int, context: int, outputs: list[int]) -> Step:
    """A decode-only step of ``decoding`` requests at context ``context``, formed at 0 as the
    event loop forms one (its first duration checked by the loop, R43 and R6)."""
    states = [
        RequestState(Request(f"r{index}", 0, 1, output), index)
        for index, output in enumerate(outputs[:decoding])
    ]
    step = Step(0, 0, 0, states, [], context_tokens=context)
    step.duration_us = model.step_duration_us(step.shape)
    return step


def _walked_ends(step: Step, model: MeasuredTiming, max_end_us: int) -> list[int]:
    """The run's end times, one step at a time: what the stretches must reproduce."""
    decoding = len(step.decode)
    first_finish = min(state.request.max_output_tokens for state in step.decode)
    context, end, ends = step.context_tokens, step.start_us, []
    for _ in range(first_finish):
        shape = StepShape(decoding, context, 0)
        if not model.covers(shape):
            break
        end += model.step_duration_us(shape)
        if end > max_end_us:
            break
        ends.append(end)
        context += decoding
    return ends


@st.composite
def decode_runs(draw: st.DrawFn) -> tuple[MeasuredTiming, Step, int]:
    model = _model(draw(measured_timing_profiles()))
    decoding = draw(st.integers(1, REACHABLE["decode_requests"]))
    context = draw(st.integers(0, REACHABLE["context_tokens"]))
    outputs = draw(st.lists(st.integers(1, 400), min_size=decoding, max_size=decoding))
    step = _decode_step(model, decoding, context, outputs)
    # R6's limit: anywhere from the first step's end to beyond the run
    max_end_us = step.duration_us + draw(st.integers(0, 400 * 5_000))
    return model, step, max_end_us


def _ends(step: Step) -> list[int]:
    return [end for _, end in step.step_bounds()]


@given(decode_runs())
def test_a_run_formed_by_stretches_ends_where_the_walk_ends(
    case: tuple[MeasuredTiming, Step, int],
) -> None:
    model, step, max_end_us = case
    with mock.patch("servesim.engine.decode_runs.MEASURED_RUN_STRETCHES", 10**6):
        measured_decode_run(step, model, max_end_us)
    walked = _walked_ends(step, model, max_end_us)
    assert _ends(step) == walked
    assert step.repeat == len(walked)
    assert step.end_us == walked[-1]
    assert (step.segments is None) == (step.repeat == 1)
    if step.segments is not None:  # consecutive stretches differ: none could have been merged
        durations = [duration for _, duration, _ in step.segments]
        assert all(a != b for a, b in pairwise(durations))


@given(decode_runs(), st.integers(1, 3))
def test_a_run_stops_at_the_stretch_cap(case: tuple[MeasuredTiming, Step, int], cap: int) -> None:
    model, step, max_end_us = case
    walked = _walked_ends(step, model, max_end_us)
    with mock.patch("servesim.engine.decode_runs.MEASURED_RUN_STRETCHES", cap):
        measured_decode_run(step, model, max_end_us)
    ends = _ends(step)
    assert ends == walked[: len(ends)]
    assert len(step.segments or [None]) <= cap  # (stretches of a grid's cells may merge)
    if len(ends) < len(walked):  # cut short by the cap alone: it was reached
        assert isinstance(model, GridTiming) or len(step.segments or [None]) == cap


@given(decode_runs(), st.integers(0, 400 * 5_000))
def test_a_cut_run_ends_at_the_first_step_ending_at_or_after_the_arrival(
    case: tuple[MeasuredTiming, Step, int], arrival_us: int
) -> None:
    model, step, max_end_us = case
    measured_decode_run(step, model, max_end_us)
    ends = _ends(step)
    arrival_us = min(arrival_us, ends[-1] + 1)
    kept = next((index + 1 for index, end in enumerate(ends) if end >= arrival_us), len(ends))
    assert step.truncate_at(arrival_us) == (kept < len(ends))
    assert _ends(step) == ends[:kept]
    assert step.repeat == kept
    assert step.end_us == ends[kept - 1]


def test_a_cut_at_a_step_boundary_keeps_the_step_ending_there() -> None:
    # a run of 3 + 2 steps: ends 10, 20, 30, then 41, 52
    step = Step(0, 0, 10, [], [], repeat=5, segments=[(10, 10, 3), (41, 11, 2)])
    assert step.truncate_at(41)
    assert step.segments == [(10, 10, 3), (41, 11, 1)]
    assert not step.truncate_at(41)
    assert step.truncate_at(30)
    assert (step.segments, step.repeat, step.end_us) == ([(10, 10, 3)], 3, 30)
    assert step.truncate_at(11)
    assert (step.segments, step.repeat, step.end_us) == ([(10, 10, 2)], 2, 20)
