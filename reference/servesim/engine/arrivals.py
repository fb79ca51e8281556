"""When each request arrives: at its recorded time, or when something ends (SPEC.md R59 to R61).

Without sessions or a closed loop every arrival is known at the start (R8). A session's turn
k > 0 is released when turn k - 1 ends (R59), and under a closed loop a unit (a session, or a
request without one) is released when an earlier unit ends (R61). This module says which
arrivals are known, and what each terminal state releases; the event loop
(``servesim.engine.loop``) puts them in its queue, keyed by workload position (R60).
"""

from __future__ import annotations

from collections.abc import Iterable

from servesim.contract.model import ClosedLoop, Workload

Release = tuple[int, int]
"""``(position, arrival_us)``: the request at that workload position arrives at that time."""


def arrival_order(workload: Workload, positions: Iterable[int] | None = None) -> list[int]:
    """R8: workload positions (all, or ``positions``) sorted by arrival time, equal times in
    document order."""
    requests = workload.requests
    chosen = range(len(requests)) if positions is None else positions
    return sorted(chosen, key=lambda position: requests[position].arrival_us)


def next_turns(workload: Workload) -> list[int]:
    """R59: for each workload position, the position of the next turn of its session; -1 for
    a session's last turn and for a request without a session."""
    following = [-1] * len(workload.requests)
    last_turn: dict[int, int] = {}
    for position, request in enumerate(workload.requests):
        if request.session is not None:
            previous = last_turn.get(request.session)
            if previous is not None:
                following[previous] = position
            last_turn[request.session] = position
    return following


def unit_starts(workload: Workload) -> list[int]:
    """R61: the workload positions of the units' first requests (each session's turn 0 and
    every request without a session), in position order, the order units are released in."""
    seen: set[int] = set()
    starts = []
    for position, request in enumerate(workload.requests):
        if request.session is None:
            starts.append(position)
        elif request.session not in seen:
            seen.add(request.session)
            starts.append(position)
    return starts


class Arrivals:
    """R59 to R61 for one replay: the arrivals known at the start, the units a closed loop
    releases at its start, and what each request's end releases."""

    __slots__ = ("_closed_loop", "_following", "_released_units", "_units", "_workload")

    def __init__(self, workload: Workload, closed_loop: ClosedLoop | None) -> None:
        self._workload = workload
        self._closed_loop = closed_loop
        self._following = next_turns(workload) if workload.sessions else []
        """R59: each request's next turn (-1 for none); empty without sessions."""
        self._units = unit_starts(workload) if closed_loop is not None else []
        """R61: the units' first requests, released in this order; empty in an open loop."""
        self._released_units = 0

    @property
    def any_released(self) -> bool:
        """Whether a request's end may release an arrival (sessions or a closed loop): without,
        the event loop need not ask ``released_by``."""
        return bool(self._following or self._units)

    def known(self) -> list[int]:
        """R60: the positions whose arrival time is known at the start, in R8's order: none
        under a closed loop, every request but a session's later turns otherwise."""
        if self._closed_loop is not None:
            return []
        if not self._following:
            return arrival_order(self._workload)
        later_turns = {position for position in self._following if position >= 0}
        return arrival_order(
            self._workload,
            (position for position in range(len(self._following)) if position not in later_turns),
        )

    def opening(self) -> list[Release]:
        """R61: the first N units, released at T0, the smallest ``arrival_us``; nothing in an
        open loop."""
        if self._closed_loop is None:
            return []
        first_us = min(request.arrival_us for request in self._workload.requests)
        count = min(self._closed_loop.max_in_flight, len(self._units))
        self._released_units = count
        return [(position, first_us) for position in self._units[:count]]

    def released_by(self, position: int, now_us: int) -> Release | None:
        """What the request at ``position`` reaching its terminal state at ``now_us`` releases.

        R59: the session's next turn, at ``max(arrival_us, now + think_time_us)``, or under a
        closed loop at ``now + think_time_us`` (R61: a released unit's turns do not read their
        recorded times). R61: when it was its unit's last request, the next unit, at ``now``.
        """
        turn = self._following[position] if self._following else -1
        if turn >= 0:
            request = self._workload.requests[turn]
            think_us = now_us + request.think_time_us
            if self._closed_loop is None:
                return turn, max(request.arrival_us, think_us)
            return turn, think_us
        if self._released_units < len(self._units):
            self._released_units += 1
            return self._units[self._released_units - 1], now_us
        return None
