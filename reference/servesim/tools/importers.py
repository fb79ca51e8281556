"""Importers: public request traces to workload documents (``servesim import``).

Arrivals become integer microseconds relative to the first record of the trace; request ids are
derived from the source record (its line number), so they are stable across imports with
different options. Formats are described in ``benchmarks/traces/README.md`` and in README.md.

Mooncake lines that name a ``session_id`` become the turns of one session (SPEC.md R65): turn 0
keeps its timestamp, each later turn gets turn 0's arrival and ``think_time_us`` = ``delay``
(milliseconds) * 1000, so that it arrives its delay after the previous turn's answer (R59), as
NVIDIA Dynamo's replay sends it. A trace without ``session_id`` imports exactly as before.

Two options of R142 (SPEC.md section 19) make continuing sessions: ``session_prompts_extend``
writes the workload 1.3 member of that name for a trace whose sessions repeat each turn's
predecessor's prompt and answer, and ``infer_sessions`` links the lines of a trace *without*
``session_id`` into such sessions from their hashes (:func:`infer_sessions`).
"""

from __future__ import annotations

import calendar
import csv
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from servesim.contract.errors import ServesimError

MICROSECONDS_PER_SECOND = 1_000_000

MOONCAKE_HASH_BLOCK_TOKENS = 512
"""The tokens each ``hash_ids`` entry covers in the public Mooncake traces (FAST'25 release)."""

MAX_HASH_BLOCK_TOKENS = 2**20
"""The largest ``prefix_hash_block_tokens`` a workload may give (SPEC.md R3)."""

MAX_PREFIX_HASH = 2**53 - 1
"""The largest prefix hash a workload may hold (R3): every JSON reader keeps it exact."""

MAX_TIME_US = 2**53 - 1
"""The largest time a workload may hold (R3, R6), ``think_time_us`` included."""

_SESSION_ID = re.compile(r"^[!-~]{1,128}$")
"""R59: a session id is 1 to 128 printable ASCII characters without space, like a request's."""


class MalformedTrace(ServesimError):
    """A trace record that cannot be imported: the file, its line and its field say where."""

    def __init__(self, file: str, line: int, field: str, message: str) -> None:
        self.file, self.line, self.field = file, line, field
        super().__init__(f"{file}:{line}: field {field!r}: {message}")


class SessionsAlreadyGiven(MalformedTrace):
    """``--infer-sessions`` on a trace that names its sessions (R142 refuses it)."""


class TooManyHashes(MalformedTrace):
    """More ``hash_ids`` than the prompt has blocks: often a trace hashed with another block
    size, which the caller may suggest giving."""


@dataclass(frozen=True)
class ImportOptions:
    """What to keep and how to scale time.

    The window is in seconds from the first record, start inclusive and end exclusive; kept
    arrivals are re-based to the window's start. ``speedup`` divides every arrival (a factor of
    2 replays the trace twice as fast); the quotient is rounded down to a whole microsecond.
    ``limit`` keeps the first requests after the window is applied.
    """

    limit: int | None = None
    window_start_s: Fraction = Fraction(0)
    window_end_s: Fraction | None = None
    speedup: Fraction = Fraction(1)
    hash_block_tokens: int | None = MOONCAKE_HASH_BLOCK_TOKENS
    """The tokens each prefix hash of the trace covers (R47's H), for a format that has them;
    ``None`` drops the hashes and writes a workload 1.0, as before prefix caching."""
    infer_sessions: bool = False
    """R142: link the kept lines of a trace without ``session_id`` into sessions whose prompts
    extend (:func:`infer_sessions`); refused on a trace with ``session_id``."""


@dataclass(frozen=True)
class TraceRecord:
    """One request of a trace, before the options are applied."""

    line: int
    offset_us: int
    """Arrival, in microseconds after the trace's first record."""
    prompt_tokens: int
    output_tokens: int
    prefix_hashes: tuple[int, ...] = ()
    """R47: the hashes of the prompt's blocks, when the trace has them and they are kept."""
    session: str | None = None
    """R59: the session this record is a turn of, if the trace says (R65)."""
    think_time_us: int | None = None
    """R59: for a later turn, the client's delay after the previous turn's answer."""
    request_id: str | None = None
    """The request's id, for a format whose records are not lines (else ``<format>-L<line>``)."""


def _field(record: dict[str, Any], name: str, file: str, line: int) -> int:
    value = record.get(name)
    if type(value) is not int or value < 0:
        found = "missing" if name not in record else f"found {json.dumps(value)}"
        raise MalformedTrace(file, line, name, f"expected a non-negative integer, {found}")
    return value


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The file's numbered lines, decoded one by one, so that bytes that are not UTF-8 are a
    malformed record on the right line, not a crash."""
    file = str(path)
    with path.open("rb") as stream:
        for line, raw in enumerate(stream, start=1):
            try:
                yield line, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                message = f"not UTF-8 text ({error.reason} at byte {error.start + 1})"
                raise MalformedTrace(file, line, "(line)", message) from None


def _hash_ids(
    record: dict[str, Any], prompt_tokens: int, block_tokens: int, file: str, line: int
) -> tuple[int, ...]:
    """A record's ``hash_ids`` as R47's ``prefix_hashes``: integers 0 to 2^53-1, at most one
    per block of ``block_tokens`` prompt tokens (the last block may be partial). A record
    without ``hash_ids`` has none."""
    value = record.get("hash_ids", [])
    if not isinstance(value, list):
        found = json.dumps(value)
        raise MalformedTrace(file, line, "hash_ids", f"expected a list of integers, found {found}")
    for index, item in enumerate(value):
        if type(item) is not int or not 0 <= item <= MAX_PREFIX_HASH:
            raise MalformedTrace(
                file,
                line,
                "hash_ids",
                f"entry {index}: expected an integer 0 to 2^53-1, found {json.dumps(item)}",
            )
    blocks = math.ceil(prompt_tokens / block_tokens)
    if len(value) > blocks:
        raise TooManyHashes(
            file,
            line,
            "hash_ids",
            f"{len(value)} hashes, more than the {blocks} blocks of {block_tokens} tokens "
            f"of input_length {prompt_tokens}",
        )
    return tuple(value)


def mooncake_records(
    path: Path, hash_block_tokens: int | None = MOONCAKE_HASH_BLOCK_TOKENS
) -> Iterator[TraceRecord]:
    """Mooncake JSON Lines: ``timestamp`` (ms), ``input_length``, ``output_length`` and
    ``hash_ids``, the hashes of the prompt's blocks of ``hash_block_tokens`` tokens.

    ``hash_ids`` are kept as the request's prefix hashes (R47) and checked, unless
    ``hash_block_tokens`` is ``None``: then they are ignored, as a workload 1.0 has no place
    for them.
    """
    file = str(path)
    first_ms: int | None = None
    session_starts: dict[str, int] = {}  # session id -> its turn 0's offset (R65)
    for line, text in _lines(path):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except ValueError as error:
            raise MalformedTrace(file, line, "(line)", f"not a JSON object: {error}") from None
        if not isinstance(record, dict):
            raise MalformedTrace(file, line, "(line)", "not a JSON object")
        session = _session_id(record, file, line)
        # a delay is checked on every turn, but a turn 0 arrives at its timestamp (R59 gives
        # it no think time), and a line without a session ignores it, as it always did
        delay_us = _delay_us(record, file, line) if session is not None else None
        session_start_us = None if session is None else session_starts.get(session)
        think_time_us = None
        if session_start_us is not None:  # a later turn: turn 0's arrival, its delay (R65)
            if "timestamp" in record:  # Dynamo writes none; one given is checked, not read
                _field(record, "timestamp", file, line)
            offset_us, think_time_us = session_start_us, delay_us
        else:
            timestamp = _field(record, "timestamp", file, line)
            first_ms = timestamp if first_ms is None else first_ms
            if timestamp < first_ms:
                raise MalformedTrace(file, line, "timestamp", "earlier than the first record")
            offset_us = (timestamp - first_ms) * 1000
            if session is not None:
                session_starts[session] = offset_us
        prompt_tokens = _field(record, "input_length", file, line)
        output_tokens = _field(record, "output_length", file, line)
        hashes = (
            ()
            if hash_block_tokens is None
            else _hash_ids(record, prompt_tokens, hash_block_tokens, file, line)
        )
        yield TraceRecord(
            line=line,
            offset_us=offset_us,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            prefix_hashes=hashes,
            session=session,
            think_time_us=think_time_us,
        )


def _session_id(record: dict[str, Any], file: str, line: int) -> str | None:
    """A record's ``session_id`` as R59's session id: a string of 1 to 128 characters from
    ``!`` to ``~``, or a non-negative integer (written in decimal); absent or ``null`` when the
    record is a request of its own."""
    value = record.get("session_id")
    if value is None:
        return None
    if type(value) is int and value >= 0:
        return str(value)
    if isinstance(value, str) and _SESSION_ID.match(value):
        return value
    raise MalformedTrace(
        file,
        line,
        "session_id",
        "expected a string of 1 to 128 printable ASCII characters without spaces, or a "
        f"non-negative integer, found {json.dumps(value)}",
    )


def _delay_us(record: dict[str, Any], file: str, line: int) -> int | None:
    """A later turn's ``delay`` (milliseconds, a number of at least 0, possibly fractional) as
    ``think_time_us``, rounded down to a whole microsecond; ``None`` when absent or ``null``."""
    value = record.get("delay")
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise MalformedTrace(
            file,
            line,
            "delay",
            f"expected a number of milliseconds of at least 0, found {json.dumps(value)}",
        )
    # A fraction is read as the shortest decimal that gives the same binary64 (repr), which is
    # the decimal the file wrote whenever it has 15 significant digits or fewer (4503.003 ms is
    # 4,503,003 us, not the 4,503,002 us of the binary64 just below it).
    exact = Fraction(value) if type(value) is int else Fraction(repr(value))
    think_time_us = math.floor(exact * 1000)
    if think_time_us > MAX_TIME_US:
        raise MalformedTrace(
            file, line, "delay", f"{json.dumps(value)} ms is more than 2^53-1 us (R6)"
        )
    return think_time_us


_AZURE_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,7}))?$")


def _azure_ticks(text: str, file: str, line: int) -> int:
    """``YYYY-MM-DD HH:MM:SS.fffffff`` as 100 ns ticks (Python's %f takes only 6 digits)."""
    match = _AZURE_TIME.match(text)
    if match is None:
        raise MalformedTrace(
            file, line, "TIMESTAMP", f"expected YYYY-MM-DD HH:MM:SS.fffffff, found {text!r}"
        )
    *parts, fraction = match.groups()
    try:
        year, month, day, hour, minute, second = map(int, parts)
        seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    except ValueError as error:
        raise MalformedTrace(file, line, "TIMESTAMP", str(error)) from None
    return seconds * 10_000_000 + int((fraction or "").ljust(7, "0"))


def _shown_header(header: list[str] | None) -> str:
    """A header line as the file has it (not a Python list), shortened: the wrong format's
    first line can be a whole JSON record."""
    if header is None:
        return "an empty file"
    text = ",".join(header)
    return repr(text if len(text) <= 80 else text[:77] + "...")


def azure_records(path: Path) -> Iterator[TraceRecord]:
    """Azure LLM inference CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens``."""
    file = str(path)
    first: int | None = None
    reader = csv.reader(text for _, text in _lines(path))
    header = next(reader, None)
    if header != ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]:
        raise MalformedTrace(
            file,
            1,
            "(header)",
            "expected TIMESTAMP,ContextTokens,GeneratedTokens, found " + _shown_header(header),
        )
    for row in reader:
        line = reader.line_num
        if len(row) != 3:
            raise MalformedTrace(file, line, "(row)", f"expected 3 fields, found {len(row)}")
        ticks = _azure_ticks(row[0], file, line)
        first = ticks if first is None else first
        if ticks < first:
            raise MalformedTrace(file, line, "TIMESTAMP", "earlier than the first record")
        counts = []
        for name, text in zip(("ContextTokens", "GeneratedTokens"), row[1:], strict=True):
            if not (text.isascii() and text.isdigit()):
                raise MalformedTrace(
                    file, line, name, f"expected a non-negative integer, found {text!r}"
                )
            counts.append(int(text))
        yield TraceRecord(line, (ticks - first) // 10, counts[0], counts[1])


def select(records: Iterator[TraceRecord], options: ImportOptions) -> Iterator[TraceRecord]:
    """The records the options keep, with arrivals re-based to the window and sped up."""
    start_us = options.window_start_s * MICROSECONDS_PER_SECOND
    end_us = (
        None if options.window_end_s is None else options.window_end_s * MICROSECONDS_PER_SECOND
    )
    kept = 0
    for record in records:
        if options.limit is not None and kept >= options.limit:
            return
        if record.offset_us < start_us or (end_us is not None and record.offset_us >= end_us):
            continue
        offset = int((record.offset_us - start_us) / options.speedup)  # floor: non-negative
        think_time_us = record.think_time_us
        if think_time_us is not None:  # a session's think times shrink with its arrivals
            think_time_us = int(think_time_us / options.speedup)
        yield replace(record, offset_us=offset, think_time_us=think_time_us)
        kept += 1


INFERRED_MIN_SHARED_BLOCKS = 2
"""R142: a predecessor's full hashed blocks that a line must begin with, at least (every line
of the shared Mooncake trace begins with hash 0, so one shared block says nothing)."""


def infer_sessions(records: list[TraceRecord], hash_block_tokens: int) -> list[TraceRecord]:
    """R142's sessions of a trace without ``session_id``, in the records' (file) order.

    A record's *predecessor* is the latest earlier record p such that the record's hashes
    begin with p's first ``floor(p.prompt_tokens / H)`` hashes (p's full hashed blocks, at
    least 2 of them, and p has them all) and the record's prompt is at least ``p.prompt_tokens
    + p.output_tokens`` tokens (it can hold p's prompt and answer). A predecessor keeps only its
    first successor: a record whose predecessor already has one is not linked to it (it may
    still start a session of its own, if a later record links to it). The linked records form
    sessions ``s0``, ``s1``, ... in the order of their first record; each turn keeps its
    arrival and gets no think time. Records linked to nothing stay without a session.
    """
    prefix_ids: dict[tuple[int, int], int] = {}  # (its prefix's id, next hash) -> prefix's id
    holders: dict[int, list[int]] = {}  # id of a record's full-block prefix -> those records
    successor: dict[int, int] = {}  # predecessor's index -> its first successor's
    for index, record in enumerate(records):
        chain: list[int] = []  # the ids of the record's hash prefixes of lengths 1, 2, ...
        for value in record.prefix_hashes:
            key = (chain[-1] if chain else -1, value)
            chain.append(prefix_ids.setdefault(key, len(prefix_ids)))
        best: int | None = None
        for prefix in chain[INFERRED_MIN_SHARED_BLOCKS - 1 :]:
            for earlier in reversed(holders.get(prefix, ())):
                if best is not None and earlier <= best:
                    break
                candidate = records[earlier]
                if record.prompt_tokens >= candidate.prompt_tokens + candidate.output_tokens:
                    best = earlier
                    break
        if best is not None:
            successor.setdefault(best, index)
        full = record.prompt_tokens // hash_block_tokens
        if full >= INFERRED_MIN_SHARED_BLOCKS and len(chain) >= full:
            holders.setdefault(chain[full - 1], []).append(index)
    session_of: dict[int, str] = {}
    sessions = 0
    for index in range(len(records)):
        if index in successor and index not in session_of:
            session_of[index] = f"s{sessions}"
            sessions += 1
        if index in successor:
            session_of[successor[index]] = session_of[index]
    return [
        replace(record, session=session_of[index], think_time_us=None)
        if index in session_of
        else record
        for index, record in enumerate(records)
    ]


def _request(source: str, record: TraceRecord) -> dict[str, Any]:
    request: dict[str, Any] = {
        "id": record.request_id or f"{source}-L{record.line}",
        "arrival_us": record.offset_us,
        "prompt_tokens": record.prompt_tokens,
        "max_output_tokens": record.output_tokens,
    }
    if record.prefix_hashes:
        request["prefix_hashes"] = list(record.prefix_hashes)
    if record.session is not None:
        request["session"] = record.session
    if record.think_time_us is not None:
        request["think_time_us"] = record.think_time_us
    return request


def workload_bytes(
    source: str,
    records: Iterator[TraceRecord],
    hash_block_tokens: int | None = None,
    session_prompts_extend: bool = False,
) -> tuple[bytes, int]:
    """A workload document, one request per line so that diffs stay readable; and its size.

    With ``hash_block_tokens`` the workload is 1.1 and gives it as ``prefix_hash_block_tokens``
    (R47), and each request with hashes has ``prefix_hashes``; without, it is 1.0. Records of
    sessions (R65) make it 1.2, with ``sessions`` (one line each, in order of their first kept
    turn) before the requests. ``session_prompts_extend`` makes it 1.3 with that member ``true``
    (R125, R142).
    """
    kept = list(records)
    sessions = list(dict.fromkeys(r.session for r in kept if r.session is not None))
    lines = [json.dumps(_request(source, record)) for record in kept]
    body = ",\n    ".join(lines)
    version = (
        "1.3"
        if session_prompts_extend
        else "1.2"
        if sessions
        else "1.0"
        if hash_block_tokens is None
        else "1.1"
    )
    header = f'{{\n  "document": "workload",\n  "schema_version": "{version}",\n'
    if hash_block_tokens is not None:
        header += f'  "prefix_hash_block_tokens": {hash_block_tokens},\n'
    if session_prompts_extend:
        header += '  "session_prompts_extend": true,\n'
    if sessions:
        listed = ",\n    ".join(json.dumps({"id": session}) for session in sessions)
        header += f'  "sessions": [\n    {listed}\n  ],\n'
    text = f'{header}  "requests": [\n    {body}\n  ]\n}}\n'
    return text.encode(), len(lines)


def read_trace(trace_format: str, path: Path, options: ImportOptions) -> Iterator[TraceRecord]:
    """The records of a trace of ``trace_format`` that the options keep; with
    ``options.infer_sessions`` (Mooncake with hashes only), in R142's inferred sessions, after
    every line of the trace was checked to have no ``session_id``."""
    if trace_format == "mooncake":
        records = mooncake_records(path, options.hash_block_tokens)
    else:
        records = READERS[trace_format](path)
    if not options.infer_sessions:
        return select(records, options)
    if trace_format != "mooncake" or options.hash_block_tokens is None:
        raise ValueError("sessions are inferred from a Mooncake trace's hashes only")
    every = list(records)
    for record in every:
        if record.session is not None:
            raise SessionsAlreadyGiven(
                str(path),
                record.line,
                "session_id",
                "the trace names its sessions: --infer-sessions is for a trace without "
                "session_id (give --session-prompts-extend to say that its turns repeat their "
                "predecessors' prompts and answers)",
            )
    return iter(infer_sessions(list(select(iter(every), options)), options.hash_block_tokens))


def hash_block_tokens(trace_format: str, options: ImportOptions) -> int | None:
    """The workload's ``prefix_hash_block_tokens``: the options' for a format with prefix
    hashes (Mooncake), none for one without (Azure)."""
    return options.hash_block_tokens if trace_format in HASHED_FORMATS else None


READERS = {"mooncake": mooncake_records, "azure": azure_records}
HASHED_FORMATS = frozenset({"mooncake"})
"""The formats whose records carry prefix hashes."""
