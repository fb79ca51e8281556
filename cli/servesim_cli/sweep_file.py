"""The sweep file of ``servesim sweep``: reading, checking and expanding it into points.

The file's schema is ``servesim_cli/schemas/sweep.schema.json`` (JSON Schema Draft 2020-12), a
tool document of the command line, not part of the contract in ``schemas/``. Problems are
reported like every input of servesim: the file, the JSON pointer and what was expected.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from servesim.contract.errors import InputProblem, InvalidInput, pointer
from servesim.contract.json_reading import as_json, parse_json, read_input_bytes

SCHEMA_FILE = Path(__file__).parent / "schemas" / "sweep.schema.json"

#: The axes, in the order a point's settings are listed; the last one varies fastest.
AXES: tuple[str, ...] = (
    "speedup",
    "routing",
    "prefill",
    "max_num_seqs",
    "max_batched_tokens",
    "workers",
)

#: More points than this is almost surely a mistake in a range.
MAX_POINTS = 100_000

#: A setting's value: a count, "whole" or a chunk size, a routing, or an exact speed-up. A
#: routing is its policy's name, ``("random", seed)`` or ``("cache_aware", prefill_weight,
#: load_weight)``.
Setting = int | str | Fraction | tuple[str, int] | tuple[str, int, int]


@dataclass(frozen=True)
class Condition:
    """One target condition: the summary's ``metric`` ``statistic`` is at most ``at_most_us``."""

    metric: str
    statistic: str
    at_most_us: int

    def __str__(self) -> str:
        return f"{self.statistic} {self.metric} <= {self.at_most_us:,} us"


@dataclass(frozen=True)
class Target:
    """What ``--target`` searches: the smallest ``axis`` value meeting every condition."""

    axis: str
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class Point:
    """One combination of axis values; ``index`` is its place in the grid's order."""

    index: int
    settings: tuple[tuple[str, Setting], ...]

    def get(self, axis: str) -> Setting | None:
        """The point's value on ``axis``, or None when the axis is not swept."""
        return dict(self.settings).get(axis)

    def describe(self) -> str:
        """``workers=4 speedup=3/2``: for messages."""
        return " ".join(f"{axis}={show(value)}" for axis, value in self.settings)


@dataclass(frozen=True)
class SweepPlan:
    """A checked sweep file: the base inputs' paths and the axes' values, in ``AXES`` order."""

    file: str
    scenario: Path
    workload: Path
    timing_profile: Path
    axes: tuple[tuple[str, tuple[Setting, ...]], ...]
    target: Target | None

    def points(self) -> list[Point]:
        """Every combination, in the grid's order."""
        names = [axis for axis, _ in self.axes]
        combinations = itertools.product(*(values for _, values in self.axes))
        return [
            Point(index, tuple(zip(names, combination, strict=True)))
            for index, combination in enumerate(combinations)
        ]

    def values(self, axis: str) -> tuple[Setting, ...]:
        """The values of one swept axis."""
        return dict(self.axes)[axis]


def show(value: Setting) -> str:
    """A setting as the table shows it: ``4``, ``whole``, ``3/2``, ``random/7``,
    ``cache_aware/2:1`` (prefill weight : load weight)."""
    if isinstance(value, tuple):
        return f"{value[0]}/" + ":".join(str(number) for number in value[1:])
    return str(value)


def routing_member(setting: str | tuple[str, int] | tuple[str, int, int]) -> dict[str, Any]:
    """A routing setting as the scenario's ``routing`` member (SPEC.md R13 to R15, R55, R56)."""
    if isinstance(setting, str):
        return {"policy": setting}
    if len(setting) == 2:
        return {"policy": setting[0], "seed": setting[1]}
    return {"policy": setting[0], "prefill_weight": setting[1], "load_weight": setting[2]}


def _is_json_integer(_checker: Any, instance: Any) -> bool:
    # as servesim's documents (R1): 4.0 is not an integer, nor is true
    return isinstance(instance, int) and not isinstance(instance, bool)


_Validator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_json_integer),
)


@cache
def _validator() -> Any:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return _Validator(schema)


def _message(error: jsonschema.ValidationError) -> str:
    """What was expected, in JSON terms."""
    found = as_json(error.instance)
    expected: Any = error.validator_value
    schema: Any = error.schema
    if error.validator == "type":
        return f"expected {error.validator_value}, found {found}"
    if error.validator in {"const", "enum"}:
        choices = [expected] if error.validator == "const" else list(expected)
        return f"expected {', '.join(as_json(choice) for choice in choices)}; found {found}"
    if error.validator == "anyOf":
        described = schema.get("description") if isinstance(schema, dict) else None
        return f"{found} is not an allowed value here" + (f": {described}" if described else "")
    if error.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}) if isinstance(schema, dict) else {})
        return f"{error.message}; allowed here: {', '.join(allowed)}"
    return error.message


def _describe(error: jsonschema.ValidationError, file: str) -> list[InputProblem]:
    """An error as problems; for a value that fits no form of an ``anyOf``, the problems of
    the form that got deepest into it (a list of integers holding 1.0 is about that item)."""
    if error.validator == "anyOf" and error.context:
        deepest = max(len(branch.absolute_path) for branch in error.context)
        if deepest > len(error.absolute_path):
            return [
                problem
                for branch in error.context
                if len(branch.absolute_path) == deepest
                for problem in _describe(branch, file)
            ]
    return [InputProblem(file, pointer(error.absolute_path), _message(error))]


def _schema_problems(value: Any, file: str) -> list[InputProblem]:
    return sorted(
        {problem for error in _validator().iter_errors(value) for problem in _describe(error, file)}
    )


def _speedup(value: Any) -> Fraction:
    # A JSON number arrives as int or float; str(float) is its shortest decimal, the literal the
    # user meant ("1.5", "0.1"), so Fraction(str(...)) is that literal exactly.
    return Fraction(str(value)) if not isinstance(value, int) else Fraction(value)


def _axis_values(axis: str, raw: Any) -> tuple[Setting, ...]:
    if isinstance(raw, dict):  # {"min": a, "max": b}
        return tuple(range(raw["min"], raw["max"] + 1))
    if axis == "speedup":
        return tuple(_speedup(value) for value in raw)
    if axis == "routing":
        return tuple(_routing_setting(value) for value in raw)
    return tuple(raw)


def _routing_setting(value: str | dict[str, Any]) -> Setting:
    if isinstance(value, str):
        return value
    if value["policy"] == "random":
        return (value["policy"], value["seed"])
    return (value["policy"], value["prefill_weight"], value["load_weight"])


def _semantic_problems(value: dict[str, Any], file: str) -> list[InputProblem]:
    problems: list[InputProblem] = []
    axes = value["axes"]
    for axis, raw in axes.items():
        if isinstance(raw, dict) and raw["min"] > raw["max"]:
            message = f"min {raw['min']} is above max {raw['max']}"
            problems.append(InputProblem(file, pointer(["axes", axis]), message))
            continue
        if axis == "speedup":
            for index, item in enumerate(raw):
                if isinstance(item, str) and _speedup_text_problem(item):
                    problems.append(
                        InputProblem(
                            file, pointer(["axes", axis, index]), _speedup_text_problem(item)
                        )
                    )
        if problems:
            continue
        seen: dict[Setting, int] = {}
        for index, setting in enumerate(_axis_values(axis, raw)):
            if setting in seen:
                message = f"{show(setting)} is listed twice (first at {seen[setting]})"
                problems.append(InputProblem(file, pointer(["axes", axis, index]), message))
            seen.setdefault(setting, index)
    target = value.get("target")
    if target is not None and target["axis"] not in axes:
        message = f"the target axis {target['axis']!r} is not swept; add it to /axes"
        problems.append(InputProblem(file, "/target/axis", message))
    if not problems:
        count = 1
        for axis, raw in axes.items():
            count *= len(_axis_values(axis, raw))
        if count > MAX_POINTS:
            message = f"{count:,} points; at most {MAX_POINTS:,} are allowed"
            problems.append(InputProblem(file, "/axes", message))
    return problems


def _speedup_text_problem(text: str) -> str:
    try:
        factor = Fraction(text)
    except (ValueError, ZeroDivisionError):
        return f"{as_json(text)} is not a number"
    return "a speed-up must be above 0" if factor <= 0 else ""


def read_sweep(path: str | Path) -> SweepPlan:
    """Read and check a sweep file, or raise ``InvalidInput`` listing every problem."""
    file = str(path)
    data = read_input_bytes(path)
    value = parse_json(data, file)
    problems = _schema_problems(value, file)
    if not problems:
        problems = _semantic_problems(value, file)
    if problems:
        raise InvalidInput(problems)
    folder = Path(path).parent
    axes = value["axes"]
    target = value.get("target")
    return SweepPlan(
        file=file,
        scenario=folder / value["scenario"],
        workload=folder / value["workload"],
        timing_profile=folder / value["timing_profile"],
        axes=tuple((axis, _axis_values(axis, axes[axis])) for axis in AXES if axis in axes),
        target=None
        if target is None
        else Target(
            axis=target["axis"],
            conditions=tuple(Condition(**condition) for condition in target["conditions"]),
        ),
    )


def other_axes(plan: SweepPlan, axis: str) -> Iterator[tuple[tuple[str, Setting], ...]]:
    """Every combination of the axes other than ``axis``, in the grid's order."""
    others = [(name, values) for name, values in plan.axes if name != axis]
    for combination in itertools.product(*(values for _, values in others)):
        yield tuple(zip((name for name, _ in others), combination, strict=True))


def point_for(plan: SweepPlan, settings: Sequence[tuple[str, Setting]]) -> Point:
    """The grid's point with these settings (one value per swept axis)."""
    given = dict(settings)
    index = 0
    for axis, values in plan.axes:
        index = index * len(values) + values.index(given[axis])
    return Point(index, tuple((axis, given[axis]) for axis, _ in plan.axes))
