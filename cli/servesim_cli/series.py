"""What ``servesim plot`` draws, as numbers: latency samples and over-time series of a report.

Everything here is derived from the report's per-request timelines (SPEC.md R26): a request
waits from ``arrival_us`` to ``first_scheduled_us`` and runs from ``first_scheduled_us`` to
``completion_us``; its output tokens are ``token_times_us``. A worker is busy exactly while one
of its requests runs (R16: a worker with work always has a step in flight, and steps follow each
other without a gap), so its busy intervals are the union of its requests' running intervals;
their total is checked against the worker's ``busy_us`` counter (R29), and equals the trace's
step intervals when there is a trace (R30). Times stay integer microseconds; a series is cut
into bins of a stated width, and a bin's value is exact (an integral of a step function, or a
count) until it is divided for display.

This module needs no matplotlib; the report reading is deliberately small (a strict parse,
the header, and the members used here) so a shared report reader can replace it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servesim.contract.errors import InputProblem, InvalidInput, pointer
from servesim.contract.header import check_header
from servesim.contract.json_reading import parse_json, read_input_bytes

#: The number of bins a series gets when no width is asked for.
DEFAULT_BINS = 200


@dataclass(frozen=True)
class RequestTimeline:
    """One completed request's times (R26), in microseconds."""

    worker: int
    arrival_us: int
    first_scheduled_us: int
    first_token_us: int
    completion_us: int
    token_times_us: tuple[int, ...]


@dataclass(frozen=True)
class ReportView:
    """The parts of a report that the figures use."""

    file: str
    first_arrival_us: int
    makespan_us: int
    #: Each worker's ``busy_us`` counter (R29), in worker order.
    busy_us: tuple[int, ...]
    #: Completed requests only: a rejected request never waits, runs or produces a token.
    requests: tuple[RequestTimeline, ...]
    #: The report's own summary (R28), for percentiles in legends.
    summary: dict[str, Any]
    #: Requests cut off by a stop time after they arrived (R62, report 5.0): (worker, arrival
    #: or first scheduled time, the stop time). Their worker had work, so a step in flight,
    #: from then to the stop time (R16); they count in no latency and no token series.
    cut_off_busy: tuple[tuple[int, int, int], ...] = ()

    @property
    def end_us(self) -> int:
        """The last terminal time of the replay (R28)."""
        return self.first_arrival_us + self.makespan_us


def _require(value: Any, path: list[str | int], kind: type, file: str) -> Any:
    """``value`` if it is a ``kind`` (an integer is never a bool), else an input problem."""
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    expected = {int: "an integer", dict: "an object", list: "an array"}[kind]
    raise InvalidInput([InputProblem(file, pointer(path), f"expected {expected} (SPEC.md R31)")])


def _member(container: dict[str, Any], name: str, path: list[str | int], file: str) -> Any:
    if name not in container:
        message = f"missing required property: {name!r} (SPEC.md R31)"
        raise InvalidInput([InputProblem(file, pointer(path), message)])
    return container[name]


def _request(entry: Any, index: int, file: str) -> RequestTimeline | None:
    path: list[str | int] = ["requests", index]
    entry = _require(entry, path, dict, file)
    if _member(entry, "outcome", path, file) != "completed":
        return None
    times = {
        name: _require(_member(entry, name, path, file), [*path, name], int, file)
        for name in (
            "worker",
            "arrival_us",
            "first_scheduled_us",
            "first_token_us",
            "completion_us",
        )
    }
    tokens = _require(
        _member(entry, "token_times_us", path, file), [*path, "token_times_us"], list, file
    )
    return RequestTimeline(token_times_us=tuple(tokens), **times)


def read_report(path: str | Path) -> ReportView:
    """Read a report (5.0, or 4.0 to 1.0: the members used here are the same) for the figures.

    Raises ``InvalidInput`` naming the file and the JSON pointer of a missing or ill-typed
    member. The report is not checked against its whole schema (that takes long on a big
    report; ``servesim validate`` does it).
    """
    file = str(path)
    data = read_input_bytes(path)
    value = parse_json(data, file)
    check_header(value, file, "report")
    summary = _require(_member(value, "summary", [], file), ["summary"], dict, file)
    workers = _require(_member(value, "workers", [], file), ["workers"], list, file)
    requests = _require(_member(value, "requests", [], file), ["requests"], list, file)
    busy = tuple(
        _require(
            _member(
                _require(worker, ["workers", index], dict, file),
                "busy_us",
                ["workers", index],
                file,
            ),
            ["workers", index, "busy_us"],
            int,
            file,
        )
        for index, worker in enumerate(workers)
    )
    timelines = [_request(entry, index, file) for index, entry in enumerate(requests)]
    cut_off = [_cut_off_busy(entry, index, file) for index, entry in enumerate(requests)]
    for index, timeline in enumerate(timelines):
        if timeline is not None and not 0 <= timeline.worker < len(busy):
            message = f"worker {timeline.worker} is not in workers (0..{len(busy) - 1})"
            raise InvalidInput(
                [InputProblem(file, pointer(["requests", index, "worker"]), message)]
            )
    return ReportView(
        file=file,
        first_arrival_us=_require(
            _member(summary, "first_arrival_us", ["summary"], file),
            ["summary", "first_arrival_us"],
            int,
            file,
        ),
        makespan_us=_require(
            _member(summary, "makespan_us", ["summary"], file),
            ["summary", "makespan_us"],
            int,
            file,
        ),
        busy_us=busy,
        requests=tuple(timeline for timeline in timelines if timeline is not None),
        summary=summary,
        cut_off_busy=tuple(busy for busy in cut_off if busy is not None),
    )


def _cut_off_busy(entry: dict[str, Any], index: int, file: str) -> tuple[int, int, int] | None:
    """A cut-off request's worker and the interval its worker was busy for it (R62, R16);
    ``None`` for another outcome, or one cut off before it arrived (it has no worker)."""
    path: list[str | int] = ["requests", index]
    if entry.get("outcome") != "cut_off" or entry.get("worker") is None:
        return None
    worker, arrival, stop = (
        _require(_member(entry, name, path, file), [*path, name], int, file)
        for name in ("worker", "arrival_us", "terminal_us")
    )
    scheduled = entry.get("first_scheduled_us")
    start = scheduled if isinstance(scheduled, int) and scheduled < stop else arrival
    return worker, start, stop


# --- latency samples ---------------------------------------------------------------------


def latency_samples(view: ReportView) -> dict[str, list[int]]:
    """TTFT and E2E of every completed request, and every inter-token gap (R26, R28), sorted."""
    ttft = sorted(request.first_token_us - request.arrival_us for request in view.requests)
    e2e = sorted(request.completion_us - request.arrival_us for request in view.requests)
    itl: list[int] = []
    for request in view.requests:
        tokens = request.token_times_us
        itl.extend(later - earlier for earlier, later in itertools.pairwise(tokens))
    itl.sort()
    return {"ttft_us": ttft, "itl_us": itl, "e2e_us": e2e}


def cdf_points(
    sorted_values: Sequence[int], max_points: int = 1000
) -> tuple[list[int], list[float]]:
    """The empirical CDF at each distinct value: (value, fraction of samples <= value).

    Past ``max_points`` distinct values, the points kept are evenly spaced in rank; every point
    kept still lies exactly on the CDF, and the first and last are always kept.
    """
    count = len(sorted_values)
    xs: list[int] = []
    ranks: list[int] = []
    for rank, value in enumerate(sorted_values, start=1):
        if xs and xs[-1] == value:
            ranks[-1] = rank
        else:
            xs.append(value)
            ranks.append(rank)
    if len(xs) > max_points:
        step = (len(xs) - 1) / (max_points - 1)
        keep = sorted({round(index * step) for index in range(max_points)})
        xs = [xs[index] for index in keep]
        ranks = [ranks[index] for index in keep]
    return xs, [rank / count for rank in ranks]


# --- over-time series --------------------------------------------------------------------


@dataclass(frozen=True)
class Bins:
    """Consecutive bins ``[start_us + k * width_us, start_us + (k + 1) * width_us)``, the last
    one cut at ``end_us``."""

    start_us: int
    end_us: int
    width_us: int

    @property
    def count(self) -> int:
        """How many bins cover ``[start_us, end_us]`` (at least one)."""
        return max(1, -(-(self.end_us - self.start_us) // self.width_us))

    def length_us(self, index: int) -> int:
        """The bin's length: ``width_us``, or less for the last one (at least 1)."""
        begin = self.start_us + index * self.width_us
        return max(1, min(self.width_us, self.end_us - begin))

    def index(self, time_us: int) -> int:
        """The bin holding ``time_us`` (the end itself falls in the last bin)."""
        return min(self.count - 1, max(0, (time_us - self.start_us) // self.width_us))


def bins_for(views: Sequence[ReportView], width_us: int | None = None) -> Bins:
    """Bins from the earliest first arrival to the latest end over ``views``; by default
    ``DEFAULT_BINS`` of them, of a whole number of microseconds."""
    start = min(view.first_arrival_us for view in views)
    end = max(view.end_us for view in views)
    if width_us is None:
        width_us = max(1, -(-(end - start) // DEFAULT_BINS))
    return Bins(start_us=start, end_us=end, width_us=width_us)


def occupancy_us(intervals: Iterable[tuple[int, int]], bins: Bins) -> list[int]:
    """For each bin, the sum over ``intervals`` ``[begin, end)`` of the microseconds they
    overlap it: the integral of "how many intervals hold" over the bin."""
    count = bins.count
    totals = [0] * count
    full = [0] * (count + 1)  # difference array: how many intervals cover whole bins
    for begin, end in intervals:
        begin, end = max(begin, bins.start_us), min(end, bins.start_us + count * bins.width_us)
        if end <= begin:
            continue
        first, last = (
            (begin - bins.start_us) // bins.width_us,
            (end - bins.start_us) // bins.width_us,
        )
        if first == last:
            totals[first] += end - begin
            continue
        totals[first] += bins.start_us + (first + 1) * bins.width_us - begin
        if last < count:
            totals[last] += end - (bins.start_us + last * bins.width_us)
        full[first + 1] += 1
        full[last] -= 1
    covering = 0
    for index in range(count):
        covering += full[index]
        totals[index] += covering * bins.width_us
    return totals


def event_counts(times_us: Iterable[int], bins: Bins) -> list[int]:
    """How many of ``times_us`` fall in each bin."""
    counts = [0] * bins.count
    for time_us in times_us:
        counts[bins.index(time_us)] += 1
    return counts


def merged(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of half-open intervals as disjoint sorted intervals (touching ones joined)."""
    result: list[tuple[int, int]] = []
    for begin, end in sorted(intervals):
        if result and begin <= result[-1][1]:
            result[-1] = (result[-1][0], max(result[-1][1], end))
        else:
            result.append((begin, end))
    return result


def busy_intervals(view: ReportView) -> list[list[tuple[int, int]]]:
    """Each worker's busy intervals: the union of its requests' running intervals, and of
    its cut-off requests' time with work until the stop time (R62)."""
    running: list[list[tuple[int, int]]] = [[] for _ in view.busy_us]
    for request in view.requests:
        running[request.worker].append((request.first_scheduled_us, request.completion_us))
    for worker, start, stop in view.cut_off_busy:
        if 0 <= worker < len(running):
            running[worker].append((start, stop))
    return [merged(intervals) for intervals in running]


@dataclass(frozen=True)
class TimeSeries:
    """A report's over-time series on one set of bins; integer per bin."""

    bins: Bins
    #: Output tokens produced in each bin (R20: a token is produced at a step's end).
    output_tokens: list[int]
    #: Requests completed in each bin.
    completions: list[int]
    #: Request-microseconds spent waiting (arrival to first scheduled) in each bin.
    waiting_us: list[int]
    #: Request-microseconds spent running (first scheduled to completion) in each bin.
    running_us: list[int]
    #: Per worker, microseconds busy in each bin.
    busy_us: list[list[int]]
    #: Per worker, the busy total derived here, to compare with the ``busy_us`` counter.
    busy_totals_us: list[int]


def time_series(view: ReportView, bins: Bins) -> TimeSeries:
    """The series of one report on ``bins``."""
    requests = view.requests
    busy = busy_intervals(view)
    return TimeSeries(
        bins=bins,
        output_tokens=event_counts(
            (time for request in requests for time in request.token_times_us), bins
        ),
        completions=event_counts((request.completion_us for request in requests), bins),
        waiting_us=occupancy_us(
            ((request.arrival_us, request.first_scheduled_us) for request in requests), bins
        ),
        running_us=occupancy_us(
            ((request.first_scheduled_us, request.completion_us) for request in requests), bins
        ),
        busy_us=[occupancy_us(intervals, bins) for intervals in busy],
        busy_totals_us=[sum(end - begin for begin, end in intervals) for intervals in busy],
    )


def per_second(counts: Sequence[int], bins: Bins) -> list[float]:
    """Counts per bin as rates per second of simulated time."""
    return [count * 1_000_000 / bins.length_us(index) for index, count in enumerate(counts)]


def mean_level(occupancy: Sequence[int], bins: Bins) -> list[float]:
    """Occupancy per bin as the mean number held over the bin (a busy fraction for one
    worker)."""
    return [total / bins.length_us(index) for index, total in enumerate(occupancy)]


def counter_mismatches(view: ReportView, series: TimeSeries) -> list[str]:
    """Workers whose derived busy total differs from their ``busy_us`` counter (R29)."""
    return [
        f"worker {worker}: busy {derived} us from the timelines, {counter} us in the report"
        for worker, (derived, counter) in enumerate(
            zip(series.busy_totals_us, view.busy_us, strict=True)
        )
        if derived != counter
    ]
