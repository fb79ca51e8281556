"""Reading the measurements (R44): a JSON Lines file of measured steps, or a traced report
(R30) read as the steps its trace holds.

Every bad line is reported, not just the first, each as ``file:line: what was expected``; the
ranges come from the timing-profile schema, so a measurement is accepted exactly when the grid
could hold it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from servesim.contract.documents import load_document
from servesim.contract.errors import MAX_LISTED_PROBLEMS, ServesimError
from servesim.contract.model import SHAPE_DIMENSIONS, StepShape
from servesim.contract.schemas import load_schema
from servesim.tools.calibrate.profiles import PROFILE_VERSION


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured step (R44): the line it came from, its shape and its duration."""

    line: int
    shape: StepShape
    duration_us: int


class InvalidMeasurements(ServesimError):
    """Measurements R44 cannot use; each problem reads ``file:line: what was expected``."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


@cache
def measurement_ranges() -> dict[str, tuple[int, int]]:
    """Each member of a measurement line and its inclusive range: the grid's axis items and
    durations in the timing-profile schema (R40), so the two can never disagree."""
    grid = load_schema("timing_profile", PROFILE_VERSION)["$defs"]["grid"]["properties"]
    ranges = {}
    for name in SHAPE_DIMENSIONS:
        items = grid["axes"]["properties"][name]["items"]
        ranges[name] = (items["minimum"], items["maximum"])
    duration = grid["duration_us"]["items"]["items"]["items"]
    ranges["duration_us"] = (duration["minimum"], duration["maximum"])
    return ranges


class _Literal:
    """A number that cannot be a measurement (a fraction, an exponent, an integer of more digits
    than any bound), kept as written so the message shows what the user wrote."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return (
            self.text if len(self.text) <= 40 else f"{self.text[:24]}... ({len(self.text)} chars)"
        )


def _parse_int(text: str) -> int | _Literal:
    # Converting a many-thousand-digit literal is slow and Python refuses beyond 4300 digits.
    return int(text) if len(text) <= 40 else _Literal(text)


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate member {key!r}")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def shown(value: Any) -> str:
    """A JSON value as the user wrote it, shortened, for messages."""
    if isinstance(value, _Literal):
        return str(value)
    if isinstance(value, dict | list):
        return "an object" if isinstance(value, dict) else "an array"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _decode_line(raw: bytes) -> Any:
    """R1 for one line: UTF-8, not blank, strict JSON; raises ``ValueError`` saying why not."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"not UTF-8 text (bad byte at column {error.start + 1})") from None
    if not text.strip():
        raise ValueError("a blank line; blank lines are not allowed")
    try:
        return json.loads(
            text,
            object_pairs_hook=_unique_members,
            parse_constant=_reject_constant,
            parse_int=_parse_int,
            parse_float=_Literal,
        )
    except json.JSONDecodeError as error:
        raise ValueError(f"not valid JSON at column {error.colno}: {error.msg}") from None
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def _member_problems(value: dict[str, Any]) -> list[str]:
    """R44: exactly the four members, each an integer in its range, and C = 0 when D = 0."""
    ranges = measurement_ranges()
    problems = [
        f"missing member {name!r}; expected an integer in {low}..{high}"
        for name, (low, high) in ranges.items()
        if name not in value
    ]
    problems += [
        f"unexpected member {name!r}; a measurement has only {', '.join(ranges)}"
        for name in value
        if name not in ranges
    ]
    for name, (low, high) in ranges.items():
        if name in value and not (type(value[name]) is int and low <= value[name] <= high):
            problems.append(
                f"{name}: expected an integer in {low}..{high}, found {shown(value[name])}"
            )
    if not problems and value["decode_requests"] == 0 and value["context_tokens"] != 0:
        problems.append(
            f"context_tokens: expected 0 when decode_requests is 0 (R22), "
            f"found {value['context_tokens']}"
        )
    return problems


def _read_line(raw: bytes, line: int) -> Measurement | list[str]:
    """One line as a measurement, or what is wrong with it."""
    expected = "expected a JSON object with " + ", ".join(measurement_ranges())
    try:
        value = _decode_line(raw)
    except ValueError as error:
        return [f"{error}; {expected}"]
    if not isinstance(value, dict):
        return [f"{expected}, found {shown(value)}"]
    problems = _member_problems(value)
    if problems:
        return problems
    shape = StepShape(value["decode_requests"], value["context_tokens"], value["prefill_tokens"])
    return Measurement(line, shape, value["duration_us"])


def parse_measurements(data: bytes, file: str) -> tuple[Measurement, ...]:
    """R44: the measurement lines of a JSON Lines file, or ``InvalidMeasurements`` listing every
    bad line (the first ``MAX_LISTED_PROBLEMS`` of them, then how many more).

    A report with a trace (R30) is read as the measurements its trace entries are: a report
    written by ``servesim replay --trace`` can be calibrated from directly.
    """
    if _looks_like_a_report(data):
        return report_measurements(data, file)
    lines = data.split(b"\n")
    if lines[-1] == b"":  # the final newline ends the last line; it does not start another
        lines.pop()
    if not lines:
        raise InvalidMeasurements(
            [f"{file}:1: the file is empty; expected one measurement object per line (JSON Lines)"]
        )
    measurements: list[Measurement] = []
    problems: list[str] = []
    for number, raw in enumerate(lines, start=1):
        result = _read_line(raw, number)
        if isinstance(result, Measurement):
            measurements.append(result)
        else:
            problems.extend(f"{file}:{number}: {problem}" for problem in result)
    if problems:
        raise InvalidMeasurements(_capped(problems))
    return tuple(measurements)


def _looks_like_a_report(data: bytes) -> bool:
    """Whether the file opens as a report document (its first member is ``document``, as
    RFC 8785 and any pretty-printed report have it) rather than as a measurement line."""
    head = data[:64].lstrip()
    return head.startswith(b"{") and re.match(rb'\{\s*"document"\s*:\s*"report"', head) is not None


def report_measurements(data: bytes, file: str) -> tuple[Measurement, ...]:
    """R44: each trace entry of a checked report as a measurement line (its ``shape`` and
    ``end_us - start_us``), numbered from 1 in trace order; a report without a trace has none."""
    report = load_document(data, file, "report").value
    if report["trace"] is None:
        raise InvalidMeasurements(
            [
                f"{file}: a report without a trace has no steps to calibrate from; "
                "replay with --trace"
            ]
        )
    measurements: list[Measurement] = []
    problems: list[str] = []
    for number, entry in enumerate(report["trace"], start=1):
        value = {**entry["shape"], "duration_us": entry["end_us"] - entry["start_us"]}
        found = _member_problems(value)
        if found:
            problems.extend(f"{file}: at /trace/{number - 1}: {problem}" for problem in found)
            continue
        shape = StepShape(
            value["decode_requests"], value["context_tokens"], value["prefill_tokens"]
        )
        measurements.append(Measurement(number, shape, value["duration_us"]))
    if problems:
        raise InvalidMeasurements(_capped(problems))
    if not measurements:
        raise InvalidMeasurements([f"{file}: the report's trace has no steps"])
    return tuple(measurements)


def _capped(problems: list[str]) -> list[str]:
    """At most ``MAX_LISTED_PROBLEMS`` problems, then a count of the rest (as ``raise_if_any``)."""
    if len(problems) <= MAX_LISTED_PROBLEMS:
        return problems
    more = len(problems) - MAX_LISTED_PROBLEMS
    return [*problems[:MAX_LISTED_PROBLEMS], f"... and {more} more problems"]
