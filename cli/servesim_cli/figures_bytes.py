"""A report's bytes to a parsed value, fast: what the figures read, and nothing else.

Nothing the figures need is in a request's ``token_times_us`` or the ``trace``, which are nearly
all of a large report's bytes (the Mooncake trace replayed on 16 workers: 4.1 million token times
in a 48 MB report; with ``--trace``, 4.1 million steps in 927 MB). A report is canonical JSON
(R23), so ``Reducer`` drops both while the file is read in blocks (or while ``replay`` writes
it) and only the rest is parsed; a report in any other layout (pretty-printed, members
reordered) is parsed whole, with the same result.
"""

from __future__ import annotations

import json
from typing import Any, BinaryIO

import orjson

#: Digits in a row beyond which an integer literal might not fit in 64 bits (2**63 has 19),
#: where orjson would read it as a float and the standard parser as an integer.
_ORJSON_DIGITS = 18
#: What may come right before the first digit of an integer literal (or of an exponent): the
#: start of a value, after ``:``, ``[``, ``,`` or whitespace, or a sign, or ``e``.
_BEFORE_DIGITS = frozenset(b"-+:[,eE \t\r\n")
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")


def _may_hold_a_long_integer(data: bytes) -> bool:
    """Whether ``data`` may hold an integer literal of more than ``_ORJSON_DIGITS`` digits: a
    run of that many digits, unless the byte before the run shows that it is no number's start
    (a quote or a letter: a string, such as a calibration's digest of zeros; a ``.``: a
    fraction, which orjson reads as exactly as ``json`` does)."""
    digits = data.translate(_DIGITS_AS_ZERO)
    run = b"0" * (_ORJSON_DIGITS + 1)
    start = digits.find(run)
    while start >= 0:  # each later start inside the same run follows a digit: not a number's
        if start == 0 or data[start - 1] in _BEFORE_DIGITS:
            return True
        start = digits.find(run, start + 1)
    return False


def parsed(data: bytes) -> Any:
    """JSON text as a value, ``None`` if it is not JSON (NaN and Infinity included).

    Not ``parse_json``: its duplicate-key check takes longer than the rest of a summary, and a
    report is written by a program, not a person. Read by orjson, about 3x faster than the
    standard parser, when no run of digits is long enough for an integer beyond 64 bits: then
    both give the same value (floats correctly rounded, the last of duplicate keys). Whatever
    orjson refuses (NaN, a lone surrogate, a number beyond binary64, a byte-order mark) is left
    to the standard parser, so the value, or ``None``, is always the one it gives.
    """
    if not _may_hold_a_long_integer(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(data, parse_constant=_not_a_number)
    except (ValueError, RecursionError):
        return None


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


#: In canonical JSON (R23) a raw ``,"`` never occurs inside a string (a quote there is ``\\"``),
#: so these byte strings are always an object member's start: a request's token times, and the
#: report's trace, which is followed by ``workers``, the last member in sorted order.
_TOKEN_TIMES = b',"token_times_us":['
_TRACE = b',"trace":['
_TRACE_END = b'],"workers":['
_BLOCK_BYTES = 1 << 20


class Reducer:
    """Keeps a report's bytes but for every ``token_times_us`` and the trace, which it empties
    (``[]``), as the bytes are fed to it in pieces of any size."""

    def __init__(self) -> None:
        self._kept: list[bytes] = []
        self._buffer = b""
        self._skipping: bytes | None = None  # _TOKEN_TIMES or _TRACE while inside that array
        self.canonical = True  # False once the layout is not the one this relies on

    def feed(self, block: bytes) -> None:
        """Take the next piece of the report."""
        if not self.canonical:
            return
        buffer = self._buffer + block
        position = 0
        while True:
            if self._skipping is _TRACE:
                end = buffer.find(_TRACE_END, position)
                if end < 0:  # keep what could be the start of the end marker
                    self._buffer = buffer[max(position, len(buffer) - len(_TRACE_END) + 1) :]
                    return
                position, self._skipping = end, None
            elif self._skipping is _TOKEN_TIMES:
                end = buffer.find(b"]", position)
                stop = len(buffer) if end < 0 else end
                if buffer[position:stop].translate(None, b"0123456789,"):
                    self.canonical = False  # not only integers: the file must be parsed whole
                    return
                if end < 0:
                    self._buffer = b""
                    return
                position, self._skipping = end, None
            else:
                found, self._skipping = _next_marker(buffer, position)
                if self._skipping is None:  # keep what could be the start of a marker
                    keep = max(position, len(buffer) - len(_TOKEN_TIMES) + 1)
                    self._kept.append(buffer[position:keep])
                    self._buffer = buffer[keep:]
                    return
                self._kept.append(buffer[position:found])
                position = found

    def reduced(self) -> bytes | None:
        """The kept bytes, once the whole report was fed; ``None`` if it was not canonical."""
        if not self.canonical or self._skipping is not None:
            return None
        return b"".join([*self._kept, self._buffer])


def reduced_report(stream: BinaryIO) -> bytes | None:
    """The report's bytes with every ``token_times_us`` and the trace emptied (``[]``), or
    ``None`` when its layout is not the canonical one this relies on."""
    reducer = Reducer()
    while reducer.canonical and (block := stream.read(_BLOCK_BYTES)):
        reducer.feed(block)
    return reducer.reduced()


def _next_marker(buffer: bytes, position: int) -> tuple[int, bytes | None]:
    """Where the next skipped array starts (just after its ``[``), and which it is."""
    tokens = buffer.find(_TOKEN_TIMES, position)
    trace = buffer.find(_TRACE, position, len(buffer) if tokens < 0 else tokens)
    if trace >= 0:
        return trace + len(_TRACE), _TRACE
    if tokens >= 0:
        return tokens + len(_TOKEN_TIMES), _TOKEN_TIMES
    return -1, None
