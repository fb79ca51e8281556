"""A worker's step end times written once, so that request entries slice their token times.

R17: a running request in the Decode phase decodes in every step of its worker, and the step
that finishes its prefill gives its first token (R20). So the token times of a request that
was never preempted are a contiguous run of its worker's step end times, and their JSON items
(R26's ``token_times_us``) are a slice of the worker's step ends written out once. On a
workload where many requests decode together (Vidur's example: 43 at a time) that writes each
time once instead of once per request. Whatever is not such a run (a preempted request, R49)
is written from its own times, which the caller does when ``items`` says ``None``.
"""

from __future__ import annotations

import bisect

import orjson

from servesim.engine.token_times import TokenTimes

#: Tokens per step at or above which a worker's step ends are written once and sliced. Below,
#: the ends' text would be about as large as the requests' own times, and most would be written
#: twice (the Mooncake trace on 16 workers gives about 1 token a step).
SLICED_TOKENS_PER_STEP = 4


def slicing_pays(output_tokens: int, steps: int) -> bool:
    """Whether a worker's requests' times are sliced from its step ends (enough of them
    decode together): at least ``SLICED_TOKENS_PER_STEP`` tokens a step."""
    return output_tokens >= SLICED_TOKENS_PER_STEP * max(1, steps)


class StepEndItems:
    """A worker's step ends (strictly increasing, as ``TokenTimes``) as JSON items."""

    __slots__ = ("_blocks", "_ends", "_text")

    def __init__(self, ends: TokenTimes) -> None:
        self._ends = ends.to_list()
        self._text = orjson.dumps(self._ends)  # b"[e0,e1,...]": RFC 8785's integers (R23)
        # The ends only grow, so their lengths in digits never shrink: for each length, the
        # first end that long and where its item starts; every item after it up to the next
        # length takes digits + 1 bytes (its comma).
        self._blocks: list[tuple[int, int, int]] = []  # (first index, its offset, digits)
        offset = 1  # after "["
        index = 0
        while index < len(self._ends):
            digits = len(str(self._ends[index]))
            following = bisect.bisect_left(self._ends, 10**digits, index)
            self._blocks.append((index, offset, digits))
            offset += (following - index) * (digits + 1)
            index = following

    def _offset(self, index: int) -> int:
        """Where the item of end ``index`` starts in the text (``len(ends)``: the end)."""
        position = bisect.bisect_right(self._blocks, (index, float("inf"), 0)) - 1
        first, offset, digits = self._blocks[position]
        return offset + (index - first) * (digits + 1)

    def items(self, tokens: TokenTimes) -> bytes | None:
        """``tokens.json_items()`` if ``tokens`` (a request's times on this worker) are a
        contiguous run of its step ends; ``None`` if not.

        Every token time is a step end, so when the first and the last are ends ``count - 1``
        apart, the ends between are exactly the tokens.
        """
        if not tokens:
            return b""
        start = bisect.bisect_left(self._ends, tokens.first)
        stop = start + len(tokens)  # one past the last
        if stop > len(self._ends) or self._ends[stop - 1] != tokens.last:
            return None
        if self._ends[start] != tokens.first:
            return None
        end = len(self._text) if stop == len(self._ends) else self._offset(stop)
        return self._text[self._offset(start) : end - 1]
