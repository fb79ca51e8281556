"""Importers: public request traces to workload documents (``servesim import``).

Arrivals become integer microseconds relative to the first record of the trace; request ids are
derived from the source record (its line number), so they are stable across imports with
different options. Formats are described in ``../shared/traces/README.md`` and in README.md.
"""

from __future__ import annotations

import calendar
import csv
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from servesim.errors import ServesimError

MICROSECONDS_PER_SECOND = 1_000_000


class MalformedTrace(ServesimError):
    """A trace record that cannot be imported: the file, its line and its field say where."""

    def __init__(self, file: str, line: int, field: str, message: str) -> None:
        self.file, self.line, self.field = file, line, field
        super().__init__(f"{file}:{line}: field {field!r}: {message}")


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


@dataclass(frozen=True)
class TraceRecord:
    """One request of a trace, before the options are applied."""

    line: int
    offset_us: int
    """Arrival, in microseconds after the trace's first record."""
    prompt_tokens: int
    output_tokens: int


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


def mooncake_records(path: Path) -> Iterator[TraceRecord]:
    """Mooncake JSON Lines: ``timestamp`` (ms), ``input_length``, ``output_length``.

    ``hash_ids`` (prefix blocks) are dropped: the v1 workload has no place for them yet.
    """
    file = str(path)
    first_ms: int | None = None
    for line, text in _lines(path):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except ValueError as error:
            raise MalformedTrace(file, line, "(line)", f"not a JSON object: {error}") from None
        if not isinstance(record, dict):
            raise MalformedTrace(file, line, "(line)", "not a JSON object")
        timestamp = _field(record, "timestamp", file, line)
        first_ms = timestamp if first_ms is None else first_ms
        if timestamp < first_ms:
            raise MalformedTrace(file, line, "timestamp", "earlier than the first record")
        yield TraceRecord(
            line=line,
            offset_us=(timestamp - first_ms) * 1000,
            prompt_tokens=_field(record, "input_length", file, line),
            output_tokens=_field(record, "output_length", file, line),
        )


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
        yield TraceRecord(record.line, offset, record.prompt_tokens, record.output_tokens)
        kept += 1


def workload_bytes(source: str, records: Iterator[TraceRecord]) -> tuple[bytes, int]:
    """A workload document, one request per line so that diffs stay readable; and its size."""
    lines = [
        json.dumps(
            {
                "id": f"{source}-L{record.line}",
                "arrival_us": record.offset_us,
                "prompt_tokens": record.prompt_tokens,
                "max_output_tokens": record.output_tokens,
            }
        )
        for record in records
    ]
    body = ",\n    ".join(lines)
    text = (
        '{\n  "document": "workload",\n  "schema_version": "1.0",\n'
        f'  "requests": [\n    {body}\n  ]\n}}\n'
    )
    return text.encode(), len(lines)


READERS = {"mooncake": mooncake_records, "azure": azure_records}
