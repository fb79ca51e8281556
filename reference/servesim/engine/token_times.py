"""A request's token times, stored as arithmetic progressions instead of one integer each.

A run of identical decode steps (``servesim.engine.decode_runs``) gives each decoding
request tokens at ``start + d, start + 2d, ...``; keeping that as one segment makes memory grow
with the number of runs, not the number of tokens, so million-request replays fit in memory.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator

import orjson

Segment = tuple[int, int, int]
"""``(first, step, count)``: ``count`` times ``first``, ``first + step``, ... (``step`` > 0)."""


class TokenTimes:
    """Strictly increasing token times (R20, R21), as segments ``(first, step, count)``."""

    __slots__ = ("_segments", "count")

    def __init__(self) -> None:
        self._segments: list[Segment] = []
        self.count = 0
        """How many token times (``len``), to read only: the per-step loop reads it of every
        running request, and ``len()`` of a Python class costs a method call each time."""

    def __len__(self) -> int:
        return self.count

    def append(self, time_us: int) -> None:
        """One more token at ``time_us`` (``extend_progression`` by one token, written out: a
        step with prefill gives one to every decoding request)."""
        self.count += 1
        segments = self._segments
        if segments:
            first, step, count = segments[-1]
            gap = time_us - (first + (count - 1) * step)
            if count == 1 or step == gap:
                segments[-1] = (first, gap, count + 1)
                return
        segments.append((time_us, 1, 1))

    def extend_progression(self, first_us: int, step_us: int, count: int) -> None:
        """``count`` more tokens at ``first_us``, ``first_us + step_us``, ... (all later than
        the last token so far). Merged into the last segment when they continue it."""
        self.count += count
        if self._segments:
            last_first, last_step, last_count = self._segments[-1]
            gap = first_us - (last_first + (last_count - 1) * last_step)
            continues_old = last_count == 1 or last_step == gap
            continues_new = count == 1 or step_us == gap
            if continues_old and continues_new:
                self._segments[-1] = (last_first, gap, last_count + count)
                return
        self._segments.append((first_us, step_us, count))

    def extend_progressions(self, segments: list[Segment]) -> None:
        """Tokens at the times of ``segments``, consecutive progressions all later than the last
        token so far: the first segment may continue the last one, the rest are appended.

        A measured run's steps (``servesim.engine.decode_runs.measured_decode_run``) come as
        such segments, one per stretch of equal durations, shared by all its decoding requests.
        """
        first, step, count = segments[0]
        self.extend_progression(first, step, count)
        if len(segments) > 1:
            self._segments.extend(segments[1:])
            self.count += sum(each[2] for each in segments[1:])

    @property
    def first(self) -> int:
        """The first token's time (there must be one)."""
        return self._segments[0][0]

    @property
    def last(self) -> int:
        """The last token's time (there must be one)."""
        first, step, count = self._segments[-1]
        return first + (count - 1) * step

    def __iter__(self) -> Iterator[int]:
        for first, step, count in self._segments:
            yield from range(first, first + count * step, step)

    def to_list(self) -> list[int]:
        """Every token time, in order."""
        times: list[int] = []
        for first, step, count in self._segments:
            times.extend(range(first, first + count * step, step))
        return times

    def json_items(self) -> bytes:
        """Every token time as the items of a JSON array, comma-separated, without brackets.

        RFC 8785 writes an integer below 2**53 (every time, R6) as its decimal digits, as
        ``orjson`` does; it writes a report's millions of them faster than ``str`` would.
        """
        times = itertools.chain.from_iterable(
            range(first, first + count * step, step) for first, step, count in self._segments
        )
        return orjson.dumps(list(times))[1:-1]

    def gap_counts(self) -> Counter[int]:
        """How often each gap between consecutive tokens occurs, without listing the tokens."""
        counts: Counter[int] = Counter()
        self.count_gaps(counts)
        return counts

    def count_gaps(self, counts: Counter[int]) -> None:
        """Add to ``counts`` how often each gap between consecutive tokens occurs (for one
        tally over every request, R27's ITL samples)."""
        previous_last: int | None = None
        for first, step, count in self._segments:
            if previous_last is not None:
                counts[first - previous_last] += 1
            if count > 1:
                counts[step] += count - 1
            previous_last = first + (count - 1) * step
