"""R1: a document's bytes as strict JSON: UTF-8, no duplicate keys, no NaN or Infinity, no lone
surrogates, and integers too long to convert kept as a cheap stand-in.

Python's ``json`` module accepts all of these; the specification does not, and a user should
hear which one a file breaks, where, rather than a simulation of something they did not write.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servesim.contract.errors import InputProblem, InvalidInput, pointer, raise_if_any


def read_input_bytes(path: str | Path) -> bytes:
    """A file's bytes, or ``InvalidInput`` naming it when it cannot be read (R5)."""
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise InvalidInput(
            [InputProblem(str(path), "", f"cannot read the file: {error.strerror}")]
        ) from None


def as_json(value: Any, limit: int = 80) -> str:
    """``value`` written as JSON, shortened for messages (users wrote JSON, not Python).

    It lives with the reader because only the reader knows its stand-in for an oversized
    integer, which describes itself instead of printing forty digits."""
    text = repr(value) if isinstance(value, _OversizedInteger) else json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate object key {key!r}")


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


#: Integers with more digits than this are far beyond every bound in the schemas (2**64 has 20).
_MAX_INTEGER_DIGITS = 40


class _OversizedInteger(int):
    """Stands in for an integer literal too long to convert cheaply; it exceeds every maximum.

    Converting a many-thousand-digit literal costs time quadratic in its length (and Python
    refuses beyond 4300 digits), so the literal is kept only as its digit count.
    """

    digits: int

    def __new__(cls, literal: str) -> _OversizedInteger:
        negative = literal.startswith("-")
        value = super().__new__(
            cls, -(10**_MAX_INTEGER_DIGITS) if negative else 10**_MAX_INTEGER_DIGITS
        )
        value.digits = len(literal.lstrip("-"))
        return value

    def __repr__(self) -> str:
        sign = "negative " if self < 0 else ""
        return f"a {sign}{self.digits}-digit integer"


def _parse_int(literal: str) -> int:
    if len(literal.lstrip("-")) > _MAX_INTEGER_DIGITS:
        return _OversizedInteger(literal)
    return int(literal)


def parse_json(data: bytes, file: str) -> Any:
    """R1: UTF-8 JSON text without duplicate keys, NaN or Infinity."""
    return read_json(data, file).value


@dataclass(frozen=True)
class ParsedJson:
    """A document's parsed value (R1), and whether ``servesim.contract.validity`` may judge it."""

    value: Any
    plain_numbers: bool
    """No integer stand-in (``_OversizedInteger``) and no float literal whose value is integral
    or infinite: ``servesim.contract.validity`` may decide this value's validity."""


#: Every ASCII digit as "0", so that a run of digits is found with one ``bytes.find``.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")


def has_long_digit_run(data: bytes, longer_than: int = _MAX_INTEGER_DIGITS) -> bool:
    """Whether ``data`` holds more than ``longer_than`` ASCII digits in a row (anywhere, strings
    included: a run inside a string only costs the slower path).

    Without such a run every integer literal converts cheaply and exactly, so the parser may
    convert integers itself instead of calling ``_parse_int`` for each of a report's millions.
    """
    return b"0" * (longer_than + 1) in data.translate(_DIGITS_AS_ZERO)


def read_json(data: bytes, file: str) -> ParsedJson:
    """``parse_json``, noting what ``servesim.contract.validity`` needs to know of the numbers."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidInput(
            [InputProblem(file, "", f"not UTF-8 text (bad byte at offset {error.start})")]
        ) from None
    long_integers = has_long_digit_run(data)
    unusual_floats: list[float] = []
    oversized: list[_OversizedInteger] = []

    def parse_float(literal: str) -> float:
        value = float(literal)
        if value.is_integer() or not math.isfinite(value):
            unusual_floats.append(value)
        return value

    def parse_long_int(literal: str) -> int:
        # The run may be in a string (a digest of zeros): only a stand-in makes numbers unusual.
        value = _parse_int(literal)
        if isinstance(value, _OversizedInteger):
            oversized.append(value)
        return value

    try:
        value = json.loads(
            text,
            object_pairs_hook=_reject_duplicate_keys,
            parse_constant=_reject_constant,
            parse_float=parse_float,
            parse_int=parse_long_int if long_integers else int,
        )
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        message = f"not valid JSON at {where}: {error.msg}"
        if not text.strip():
            message = "the file is empty; expected a JSON object"
        raise InvalidInput([InputProblem(file, "", message)]) from None
    except RecursionError:
        message = "nested too deeply to read (arrays and objects inside each other)"
        raise InvalidInput([InputProblem(file, "", message)]) from None
    except ValueError as error:  # duplicate keys, NaN, Infinity
        raise InvalidInput([InputProblem(file, "", f"not valid JSON: {error}")]) from None
    if _SURROGATE_ESCAPE.search(text):  # rare: look for the string that holds it
        raise_if_any(list(_lone_surrogates(value, [], file)))
    return ParsedJson(value, plain_numbers=not oversized and not unusual_floats)


def plain_numbers(value: Any) -> bool:
    """``ParsedJson.plain_numbers`` for a value parsed some other way: no float that is integral
    or infinite (which only ``jsonschema`` with servesim's type checker judges as R1 asks) and
    no integer stand-in, so ``servesim.contract.validity`` may decide it. Walks the whole value: for
    small ones (a report without its requests)."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is float:
            if item.is_integer() or not math.isfinite(item):
                return False
        elif kind is dict:
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
        elif kind is _OversizedInteger:
            return False
    return True


#: A \uD800 to \uDFFF escape: half of a UTF-16 surrogate pair, alone unless its partner follows.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


_UNPAIRED = "with an unpaired surrogate escape (\\ud800 to \\udfff): not a Unicode string"


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _lone_surrogates(value: Any, path: list[str | int], file: str) -> Iterator[InputProblem]:
    """R1: strings holding half a surrogate pair, which no UTF-8 text (nor a report) can hold."""
    if isinstance(value, str) and not _is_unicode(value):
        yield InputProblem(file, pointer(path), f"a string {_UNPAIRED}")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not _is_unicode(key):
                yield InputProblem(file, pointer(path), f"a member name {_UNPAIRED}")
            yield from _lone_surrogates(item, [*path, key], file)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _lone_surrogates(item, [*path, index], file)
