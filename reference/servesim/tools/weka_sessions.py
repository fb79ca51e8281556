"""``servesim import weka``: agentic coding sessions (WEKA's kv-cache-tester traces) as sessions.

Each file is one user session (README of ``benchmarks/traces/weka_agentic_sessions/``): a list of
requests in order, each with its prompt (``in``), output (``out``), the hashes of its prompt's
full blocks of ``block_size`` tokens (``hash_ids``) and ``think_time``, the client's delay in
seconds before it. That is a workload 1.2 session as SPEC.md R59 reads it: turn 0 arrives at the
session's start, and each later turn gets turn 0's arrival and ``think_time_us`` =
``think_time`` * 10^6, so it is sent its think time after the previous turn's answer (as R65 does
for Mooncake's ``delay``). A ``subagent`` entry (its own ``requests``, with ``t`` relative to
its spawn at the parent's ``t``) runs beside its parent: it becomes a session of its own whose
turn 0 arrives at the spawn.

Several files are overlaid, the i-th starting ``i * stagger`` after the first. Their hash ids
are scoped to their file (``hash_id_scope`` ``"local"``; sub-agents share their parent's), so
file i's hash h becomes ``i * 2^32 + h``: equal only within a file, as the files mean them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from servesim.contract.errors import InputProblem, InvalidInput, pointer
from servesim.contract.json_reading import parse_json, read_input_bytes
from servesim.tools.importers import MAX_TIME_US, TraceRecord

MICROSECONDS_PER_SECOND = 1_000_000

HASH_SCOPE = 2**32
"""Hash ids of a file must be below this; file i's are moved to ``i * HASH_SCOPE + h``."""

_ID = re.compile(r"^[!-~]{1,128}$")
"""R3, R59: request and session ids are 1 to 128 printable ASCII characters without space."""


def _problem(file: str, path: Sequence[str | int], message: str) -> InvalidInput:
    return InvalidInput([InputProblem(file, pointer(path), message)])


def _count(entry: dict[str, Any], name: str, file: str, path: list[str | int]) -> int:
    value = entry.get(name)
    if type(value) is not int or value < 0:
        found = "nothing" if name not in entry else repr(value)
        raise _problem(file, [*path, name], f"expected an integer >= 0, found {found}")
    return value


def _seconds_us(entry: dict[str, Any], name: str, file: str, path: list[str | int]) -> int | None:
    """A number of seconds (the decimal as written) as whole microseconds, rounded down;
    ``None`` when absent or ``null``."""
    value = entry.get(name)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise _problem(file, [*path, name], f"expected a number of seconds >= 0, found {value!r}")
    exact = Fraction(value) if type(value) is int else Fraction(repr(value))
    microseconds = math.floor(exact * MICROSECONDS_PER_SECOND)
    if microseconds > MAX_TIME_US:
        raise _problem(file, [*path, name], f"{value!r} s is more than 2^53-1 us (R6)")
    return microseconds


def _hashes(
    entry: dict[str, Any], file: str, path: list[str | int], scope: int, keep: bool
) -> tuple[int, ...]:
    value = entry.get("hash_ids", [])
    if not isinstance(value, list):
        raise _problem(file, [*path, "hash_ids"], f"expected a list of integers, found {value!r}")
    for index, item in enumerate(value):
        if type(item) is not int or not 0 <= item < HASH_SCOPE:
            raise _problem(
                file, [*path, "hash_ids", index], f"expected an integer 0 to 2^32-1, found {item!r}"
            )
    return tuple(scope * HASH_SCOPE + item for item in value) if keep else ()


def _id(text: str, file: str, path: list[str | int]) -> str:
    if not _ID.match(text):
        raise _problem(
            file, path, f"makes the id {text!r}, not 1 to 128 printable ASCII characters"
        )
    return text


def _session(
    requests: Any,
    start_us: int,
    session: str,
    context: tuple[str, list[str | int], int, bool],
) -> list[TraceRecord]:
    """One session's turns (sub-agents' sessions after the turn that precedes them)."""
    file, path, scope, keep = context
    if not isinstance(requests, list) or not requests:
        raise _problem(file, path, "expected a non-empty list of requests")
    records: list[TraceRecord] = []
    turns: list[TraceRecord] = []
    for index, entry in enumerate(requests):
        where = [*path, index]
        if not isinstance(entry, dict):
            raise _problem(file, where, "expected an object")
        if entry.get("type") == "subagent":
            agent = entry.get("agent_id")
            if not isinstance(agent, str):
                raise _problem(file, [*where, "agent_id"], f"expected a string, found {agent!r}")
            spawn_us = _seconds_us(entry, "t", file, where) or 0
            name = _id(f"{session}-{agent}", file, [*where, "agent_id"])
            inner = (file, [*where, "requests"], scope, keep)
            records += _session(entry.get("requests"), start_us + spawn_us, name, inner)
            continue
        prompt = _count(entry, "in", file, where)
        output = _count(entry, "out", file, where)
        hashes = _hashes(entry, file, where, scope, keep)
        think_us = _seconds_us(entry, "think_time", file, where)
        if turns:  # a later turn: turn 0's arrival, its think time after the previous answer
            offset_us = turns[0].offset_us
        else:
            offset_us = start_us + (_seconds_us(entry, "t", file, where) or 0)
        turn = TraceRecord(
            line=index,
            offset_us=offset_us,
            prompt_tokens=prompt,
            output_tokens=output,
            prefix_hashes=hashes,
            session=session,
            think_time_us=think_us if turns else None,
            request_id=_id(f"{session}-R{index}", file, where),
        )
        turns.append(turn)
        records.append(turn)
    if not turns:
        raise _problem(file, path, "has no request of type 'n' or 's', only sub-agents")
    return records


def weka_records(
    paths: Sequence[Path], stagger_us: int, keep_hashes: bool
) -> tuple[list[TraceRecord], int]:
    """The turns of every session of ``paths`` (file i starting at ``i * stagger_us``) in file
    order, and the files' common ``block_size`` (R47's ``prefix_hash_block_tokens``)."""
    records: list[TraceRecord] = []
    block_size: int | None = None
    sessions: set[str] = set()
    for index, path in enumerate(paths):
        file = str(path)
        value = parse_json(read_input_bytes(path), file)
        if not isinstance(value, dict):
            raise _problem(file, [], "expected a session object")
        size = _count(value, "block_size", file, [])
        if not 1 <= size <= 2**20:
            raise _problem(file, ["block_size"], f"expected 1 to 2^20, found {size}")
        if block_size is not None and size != block_size:
            raise _problem(
                file, ["block_size"], f"expected {block_size}, the block size of {paths[0]}"
            )
        block_size = size
        session = _id(f"weka-{path.stem}", file, [])
        if session in sessions:
            raise _problem(file, [], f"makes the session id {session!r} a second time")
        sessions.add(session)
        start_us = index * stagger_us
        if start_us > MAX_TIME_US:
            raise _problem(file, [], f"would start at {start_us} us, beyond 2^53-1 us (R6)")
        records += _session(
            value.get("requests"), start_us, session, (file, ["requests"], index, keep_hashes)
        )
    assert block_size is not None  # at least one path: the command line asks for one
    return records, block_size
