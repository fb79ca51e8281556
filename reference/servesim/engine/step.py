"""A step, or a run of identical decode steps, and its duration (SPEC.md R16 to R22, R43, R62).

A ``Step`` is what a worker's formation policy formed at one instant (its decode set and prefill
allotments); the event loop times it (``step_duration``) and lengthens it into a run
(``servesim.engine.decode_runs``); an arrival at its worker cuts the run short (``truncate_at``)
and a stop time cuts it at the stop (``stop_at``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from servesim.contract.errors import OutOfCoverage
from servesim.contract.model import StepShape, SyntheticLinearTiming, TimingProfile
from servesim.engine.requests import RequestState
from servesim.engine.token_times import Segment


@dataclass(slots=True, eq=False)
class Step:
    """One step of one worker, or a run of decode-only steps of the same requests (R16 to R20).

    ``repeat`` is how many steps the object stands for, back to back from ``start_us`` (see
    ``decode_run_length`` and ``measured_decode_run``); it is 1 for every step with prefill. With
    a synthetic model they all last ``duration_us``; with a measured model each may differ (its
    context grows, R22), and ``segments`` holds them grouped by duration.
    """

    worker: int
    start_us: int
    duration_us: int
    decode: list[RequestState]
    prefill: list[tuple[RequestState, int]]
    repeat: int = 1
    context_tokens: int = 0
    """R22's C at the first step's start, fixed when the step is formed (``context_tokens``);
    left 0 when nothing reads it (a synthetic model, no trace)."""
    segments: list[Segment] | None = None
    """A run whose steps differ: ``(first_end_us, duration_us, count)`` for each stretch of
    ``count`` steps of equal duration, back to back, the first ending at ``first_end_us``. Their
    counts add up to ``repeat``, and they are the run's step end times, as ``TokenTimes``
    stores them."""
    kv_blocks_in_use: int | None = None
    """R50, R52: the held blocks once the step is formed; ``None`` without a cache. A run's
    later steps take no block when traced (``decode_runs.block_run_limit``), so then it is every
    step's; untraced, only its first's (the worker's peak counts the run's last)."""
    preempted: list[str] = field(default_factory=list)
    """R49, R52: the ids of the requests preempted while the step was formed, in order."""
    retracted: list[str] = field(default_factory=list)
    """R91, R95: the ids of the requests retracted while the step was formed, in order."""
    new_token_ratio: int | None = None
    """R89, R95: the numerator (over ``formation.sglang.RATIO_DENOMINATOR``) of the new-token
    ratio the step's admission used; ``None`` unless the style is sglang."""
    blocks_taken: bool = False
    """Whether a run's later steps have taken their blocks already (``BlockMemory.
    take_run_blocks``): a reservation on the worker mid-run settles them first (R102)."""
    pass_end_us: int | None = None
    """R83: on a worker of several ranks, the end of the pass the step is part of, when all
    its tokens are produced; ``duration_us`` is then the step's own d_r. ``None`` on a
    one-rank worker, whose pass is the step."""
    rank: int = 0
    """R78: the rank that formed it."""
    barrier: bool = False
    """R83: one of the steps of a pass of several ranks, each pass of which ends at the pass
    end (``pass_end_us``, or the run's ``segments`` of pass-long periods): its tokens come
    then, and its rank is busy for its own ``duration_us`` per pass (R85)."""
    cut_us: int | None = None
    """R117, R123: the failure that cut the step, which never ended; ``None`` otherwise (a
    step cut by a stop time is known by its end after it)."""
    order: list[RequestState] | None = None
    """R51, R127: the running list as the step was formed, when a decode step may fill an
    identified block (continuing turns) or its registrations are offered to a host pool;
    ``None`` otherwise (then the prefill list is in running order, and only it registers)."""
    prefill_tokens: int = field(init=False)
    """R22's P: the prompt tokens one step prefills, over all requests (its allotments are
    fixed once it is formed: summed once, for the timing model and the worker both read it)."""

    def __post_init__(self) -> None:
        self.prefill_tokens = sum([tokens for _, tokens in self.prefill])

    @property
    def end_us(self) -> int:
        """When the last of the ``repeat`` steps ends (R83: a rank's step, at its pass end)."""
        if self.pass_end_us is not None:
            return self.pass_end_us
        if self.segments is not None:
            first_end, duration, count = self.segments[-1]
            return first_end + (count - 1) * duration
        return self.start_us + self.repeat * self.duration_us

    def step_bounds(self) -> Iterator[tuple[int, int]]:
        """``(start_us, end_us)`` of each step of the run, in order."""
        segments = self.segments or [
            (self.start_us + self.duration_us, self.duration_us, self.repeat)
        ]
        for first_end, duration, count in segments:
            for end in range(first_end, first_end + count * duration, duration):
                yield end - duration, end

    @property
    def shape(self) -> StepShape:
        """R22: the first step's shape (each later step of a run has C larger by D)."""
        return StepShape(len(self.decode), self.context_tokens, self.prefill_tokens)

    def truncate_at(self, now_us: int) -> bool:
        """Shorten a run to end at the first step boundary at or after ``now_us``.

        Called when a request joins the worker during the run: from that boundary on the steps
        may differ (the request may be admitted), so they are formed one by one again. Returns
        whether the run was shortened.
        """
        segments = self.segments or [
            (self.start_us + self.duration_us, self.duration_us, self.repeat)
        ]
        kept = 0  # the steps of the segments before the one holding the boundary
        for index, (first_end, duration, count) in enumerate(segments):
            if first_end + (count - 1) * duration < now_us:
                kept += count
                continue
            # the segment's steps that end before now, and the one ending at or after it
            taken = max(0, -(-(now_us - first_end) // duration)) + 1
            if kept + taken >= self.repeat:
                return False
            self.repeat = kept + taken
            if self.segments is not None:
                self.segments = [*segments[:index], (first_end, duration, taken)]
            return True
        return False

    def stop_at(self, stop_us: int) -> None:
        """R62: keep only the steps of a run that a stop time leaves whole, and the first.

        The steps ending at or before ``stop_us`` complete; one ending after it is cut (it never
        ends). A run keeps the steps ending at or before the stop time, so that its completion is
        processed, and then the worker forms the next step at its own time, one at a time as
        step-by-step formation would; if even its first step ends after the stop time, that step
        alone is left, to be cut (``Worker.cut_step``).
        """
        if self.end_us <= stop_us:
            return
        self.truncate_at(stop_us)  # its last step is now the one ending at or after stop_us
        if self.end_us > stop_us and self.repeat > 1:  # the step at the boundary is cut: drop it
            self.repeat -= 1
            if self.segments is not None:
                first_end, duration, count = self.segments[-1]
                if count == 1:
                    self.segments.pop()
                else:
                    self.segments[-1] = (first_end, duration, count - 1)
                if self.repeat == 1:  # one step is no run: its end is start + duration
                    self.segments = None


def context_tokens(decode: list[RequestState]) -> int:
    """R22's C: the decoding requests' prompt plus generated tokens, now."""
    return sum(
        state.request.prompt_tokens + state.token_times_us.count + state.hidden for state in decode
    )


def step_duration(step: Step, timing: TimingProfile) -> int:
    """R22 and R43: the duration of a step, or ``OutOfCoverage`` if the model cannot time it."""
    shape = step.shape
    model = timing.model
    if not model.covers(shape):
        assert not isinstance(model, SyntheticLinearTiming)
        raise OutOfCoverage(
            shape=shape,
            coverage=model.coverage,
            worker=step.worker,
            start_us=step.start_us,
            calibration=timing.calibration,
        )
    return model.step_duration_us(shape)
