"""The sweep file of ``servesim sweep``: reading, checking and expanding it into points.

The file's schema is ``servesim_cli/schemas/sweep.schema.json`` (JSON Schema Draft 2020-12), a
tool document of the command line, not part of the contract in ``schemas/``. Problems are
reported like every input of servesim: the file, the JSON pointer and what was expected.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from servesim.contract.documents import Document
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
    "pools",
)

#: The axes that set the scenario's top-level ``scheduler`` (with ``fleet.pools``, the limits of
#: every pool without a ``scheduler`` of its own, R77).
SCHEDULER_AXES: frozenset[str] = frozenset({"prefill", "max_num_seqs", "max_batched_tokens"})

#: More points than this is almost surely a mistake in a range.
MAX_POINTS = 100_000


@dataclass(frozen=True, order=True)
class PoolSizes:
    """A point of the ``pools`` axis: the worker count of some of the scenario's pools, in the
    order the sweep file names them; the other pools keep the base scenario's counts."""

    sizes: tuple[tuple[str, int], ...]

    def __str__(self) -> str:
        return "+".join(f"{name}:{workers}" for name, workers in self.sizes)

    def names(self) -> tuple[str, ...]:
        """The pools it sizes, in order."""
        return tuple(name for name, _ in self.sizes)


#: A setting's value: a count, "whole" or a chunk size, a routing, an exact speed-up or pool
#: sizes. A routing is its policy's name, ``("random", seed)`` or ``("cache_aware",
#: prefill_weight, load_weight)``.
Setting = int | str | Fraction | tuple[str, int] | tuple[str, int, int] | PoolSizes


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
    #: (JSON pointer, pool name) of every pool name the ``pools`` axis uses, to check against
    #: the base scenario (``scenario_problems``).
    pool_references: tuple[tuple[str, str], ...] = ()

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

    def pool_names(self) -> tuple[str, ...]:
        """The pools the ``pools`` axis sizes, in order (none when it is not swept)."""
        values = dict(self.axes).get("pools", ())
        first = values[0] if values else None
        return first.names() if isinstance(first, PoolSizes) else ()


def show(value: Setting) -> str:
    """A setting as the table shows it: ``4``, ``whole``, ``3/2``, ``random/7``,
    ``cache_aware/2:1`` (prefill weight : load weight), ``prefill:2+decode:6`` (pool sizes)."""
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
        fitting = _fitting_form(error)
        if fitting:  # {"split": [...]} without total: about total, not every form
            return [problem for branch in fitting for problem in _describe(branch, file)]
    return [InputProblem(file, pointer(error.absolute_path), _message(error))]


def _fitting_form(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    """The errors of the one form of an ``anyOf`` whose type the value has, when only one has
    it (an object against a list-or-object axis); none otherwise."""
    forms: dict[Any, list[jsonschema.ValidationError]] = {}
    for branch in error.context or ():
        forms.setdefault(branch.schema_path[0], []).append(branch)
    fitting = [
        branches
        for branches in forms.values()
        if not any(
            branch.validator == "type" and branch.absolute_path == error.absolute_path
            for branch in branches
        )
    ]
    return fitting[0] if len(fitting) == 1 else []


def _schema_problems(value: Any, file: str) -> list[InputProblem]:
    return sorted(
        {problem for error in _validator().iter_errors(value) for problem in _describe(error, file)}
    )


def _speedup(value: Any) -> Fraction:
    # A JSON number arrives as int or float; str(float) is its shortest decimal, the literal the
    # user meant ("1.5", "0.1"), so Fraction(str(...)) is that literal exactly.
    return Fraction(str(value)) if not isinstance(value, int) else Fraction(value)


def _splits(total: int, parts: int, least: int) -> Iterator[tuple[int, ...]]:
    """Every way to write ``total`` as ``parts`` integers of at least ``least``, in ascending
    lexicographic order (the first part varies slowest)."""
    if parts == 1:
        if total >= least:
            yield (total,)
        return
    for first in range(least, total - least * (parts - 1) + 1):
        for rest in _splits(total - first, parts - 1, least):
            yield (first, *rest)


def _split_count(raw: dict[str, Any]) -> int:
    """How many points a ``{"split", "total", "min"}`` form gives, without listing them."""
    parts = len(raw["split"])
    spare = raw["total"] - parts * raw.get("min", 1)
    return math.comb(spare + parts - 1, parts - 1) if spare >= 0 else 0


def _pool_values(raw: Any) -> tuple[Setting, ...]:
    if isinstance(raw, dict):
        names = raw["split"]
        return tuple(
            PoolSizes(tuple(zip(names, counts, strict=True)))
            for counts in _splits(raw["total"], len(names), raw.get("min", 1))
        )
    order = list(raw[0])  # every point names the same pools (_semantic_problems)
    return tuple(PoolSizes(tuple((name, point[name]) for name in order)) for point in raw)


def _axis_size(axis: str, raw: Any) -> int:
    if axis == "pools" and isinstance(raw, dict):
        return _split_count(raw)
    if isinstance(raw, dict):
        return int(raw["max"]) - int(raw["min"]) + 1
    return len(raw)


def _axis_values(axis: str, raw: Any) -> tuple[Setting, ...]:
    if axis == "pools":
        return _pool_values(raw)
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
        if axis == "pools":
            problems.extend(_pools_problems(raw, file))
            if "workers" in axes:
                message = (
                    "the axes workers (fleet.workers) and pools (fleet.pools' sizes) cannot "
                    "both be swept: a scenario has one or the other"
                )
                problems.append(InputProblem(file, "/axes/pools", message))
            if problems or isinstance(raw, dict):  # a split lists each point once
                continue
        elif isinstance(raw, dict) and raw["min"] > raw["max"]:
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
            count *= _axis_size(axis, raw)
        if count > MAX_POINTS:
            message = f"{count:,} points; at most {MAX_POINTS:,} are allowed"
            problems.append(InputProblem(file, "/axes", message))
    return problems


def _pools_problems(raw: Any, file: str) -> list[InputProblem]:
    """A split that gives no point, or a list whose points name different pools."""
    if isinstance(raw, dict):
        parts, least = len(raw["split"]), raw.get("min", 1)
        if raw["total"] < parts * least:
            message = (
                f"total {raw['total']} cannot be split into {parts} pools of at least "
                f"{least} workers each (at least {parts * least} are needed)"
            )
            return [InputProblem(file, "/axes/pools/total", message)]
        return []
    first = sorted(raw[0])
    return [
        InputProblem(
            file,
            pointer(["axes", "pools", index]),
            f"names the pools {', '.join(sorted(point)) or '(none)'}; every point must name "
            f"the same pools as the first ({', '.join(first)})",
        )
        for index, point in enumerate(raw)
        if sorted(point) != first
    ]


def _pool_references(raw: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(raw, dict):
        return tuple(
            (pointer(["axes", "pools", "split", index]), name)
            for index, name in enumerate(raw["split"])
        )
    return tuple(
        (pointer(["axes", "pools", index, name]), name)
        for index, point in enumerate(raw)
        for name in point
    )


def scenario_problems(plan: SweepPlan, scenario: Document) -> list[InputProblem]:
    """What the sweep's axes cannot do to this base scenario: ``workers`` on a fleet of pools,
    ``pools`` on a fleet of ``fleet.workers`` or with a name the scenario has no pool of, and a
    scheduler axis that no pool would feel."""
    swept = dict(plan.axes)
    fleet = scenario.value["fleet"]
    problems: list[InputProblem] = []
    if "pools" not in fleet:
        if "pools" in swept:
            message = (
                f"the pools axis sizes fleet.pools, and the scenario {scenario.file} has "
                "fleet.workers: sweep the workers axis instead"
            )
            problems.append(InputProblem(plan.file, "/axes/pools", message))
        return problems
    pools = fleet["pools"]
    if "workers" in swept:  # R77: a fleet of pools has no fleet.workers to set
        message = (
            f"the workers axis sets fleet.workers, and the scenario {scenario.file} has "
            "fleet.pools: sweep the pools axis (each pool's workers) instead"
        )
        problems.append(InputProblem(plan.file, "/axes/workers", message))
    names = [pool["name"] for pool in pools]
    for at, name in plan.pool_references:
        if name not in names:
            message = (
                f"expected the name of a pool of the scenario {scenario.file} "
                f"({', '.join(names)}); found {as_json(name)}"
            )
            problems.append(InputProblem(plan.file, at, message))
    if all("scheduler" in pool for pool in pools):
        problems.extend(
            InputProblem(
                plan.file,
                pointer(["axes", axis]),
                f"the {axis} axis sets the scenario's scheduler, which no pool of "
                f"{scenario.file} uses (each has its own scheduler, R77)",
            )
            for axis, _ in plan.axes
            if axis in SCHEDULER_AXES
        )
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
        pool_references=_pool_references(axes["pools"]) if "pools" in axes else (),
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
