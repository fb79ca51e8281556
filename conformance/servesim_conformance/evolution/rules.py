"""The rules of the diff: how a change moves the accepted set, and what that does to readers.

``diff`` walks two schemas; this module holds what the walk decides with: the *shape* of a change
(relaxation, restriction, ...), its *polarity* (flipped under ``not``, unknown under ``if``), the
effects in each direction that follow, and the comparisons of subschemas, bounds and object
members that the rules need. Keeping them apart from the walk keeps each readable on its own.
"""

from __future__ import annotations

import enum
import math
import re
from fractions import Fraction
from typing import Any

from servesim_conformance.evolution.keywords import ANNOTATIONS, APPLIES_TO, canonical_value
from servesim_conformance.evolution.model import Effect
from servesim_conformance.evolution.pointers import resolve_local


class Shape(enum.Enum):
    """How a change moves the set of accepted instances at its location."""

    ANNOTATION = "annotation"  # no instance changes side
    RELAX = "relax"  # the new schema accepts a superset here
    RESTRICT = "restrict"  # the new schema accepts a subset here
    CHANGE = "change"  # neither: some instances move each way
    UNKNOWN = "unknown"  # no rule says


#: Polarity of a location: +1 where accepting more here accepts more overall, -1 under ``not``,
#: 0 where nobody can tell (``if``, ``oneOf``), None where no validation reaches (an unreferenced
#: definition).
Polarity = int | None

_BY_SHAPE = {
    Shape.ANNOTATION: (Effect.SAFE, Effect.SAFE),
    Shape.RELAX: (Effect.SAFE, Effect.BREAKS),
    Shape.RESTRICT: (Effect.BREAKS, Effect.SAFE),
    Shape.CHANGE: (Effect.BREAKS, Effect.BREAKS),
    Shape.UNKNOWN: (Effect.UNKNOWN, Effect.UNKNOWN),
}


def effects(
    shape: Shape,
    polarity: Polarity,
    keyword: str | None = None,
    types: tuple[frozenset[str], frozenset[str]] | None = None,
) -> tuple[Effect, Effect]:
    """The (backward, forward) effects of a change of ``shape`` at a location of ``polarity``.

    ``keyword`` and ``types`` (the old and new schemas' types at the location) let a constraint
    on a type that one side never accepts be recognised as harmless in that direction: a new
    ``maxLength`` cannot reject an old document whose value there is always an integer.
    """
    if shape is Shape.ANNOTATION or polarity is None:
        return Effect.SAFE, Effect.SAFE
    if polarity == 0:
        return Effect.UNKNOWN, Effect.UNKNOWN
    backward, forward = _BY_SHAPE[shape]
    if polarity < 0:
        return forward, backward
    if keyword in APPLIES_TO and types is not None:
        applies = APPLIES_TO[keyword]
        if backward is Effect.BREAKS and not types[0] & applies:
            backward = Effect.SAFE
        if forward is Effect.BREAKS and not types[1] & applies:
            forward = Effect.SAFE
    return backward, forward


def strip_annotations(schema: Any) -> Any:
    """``schema`` without annotation keywords anywhere, to compare what two subschemas accept."""
    if isinstance(schema, list):
        return [strip_annotations(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: (value if key in {"const", "enum"} else strip_annotations(value))
        for key, value in schema.items()
        if key not in ANNOTATIONS and key != "$id"
    }


def same_meaning(old: Any, new: Any) -> bool:
    """Whether two subschemas differ at most in annotations (so accept the same instances)."""
    return bool(normal_form(strip_annotations(old)) == normal_form(strip_annotations(new)))


def normal_form(schema: Any) -> Any:
    return canonical_value({} if schema is True else schema)


def is_permissive(schema: Any) -> bool:
    """Whether ``schema`` accepts every instance (``true``, ``{}`` or annotations only)."""
    return schema is True or (isinstance(schema, dict) and not strip_annotations(schema))


def ref_polarities(schema: Any) -> dict[str, set[int]]:
    """For every local ``$ref`` target, the polarities of the places that reference it.

    Definitions referenced only from other definitions inherit those definitions' polarities,
    so the scan follows references (once per target and polarity).
    """
    found: dict[str, set[int]] = {}
    seen: set[tuple[str, int]] = set()

    def scan(node: Any, polarity: int) -> None:
        if isinstance(node, list):
            for item in node:
                scan(item, polarity)
            return
        if not isinstance(node, dict):
            return
        reference = node.get("$ref")
        if isinstance(reference, str) and reference.startswith("#"):
            target = reference[1:]
            found.setdefault(target, set()).add(polarity)
            if (target, polarity) not in seen:
                seen.add((target, polarity))
                resolved = resolve_local(schema, reference)
                if resolved is not None:
                    scan(resolved, polarity)
        for key, value in node.items():
            if key in ANNOTATIONS or key in {"$defs", "const", "enum"}:
                continue
            if key == "not":
                scan(value, -polarity)
            elif key in {"if", "oneOf"}:
                scan(value, 0)
            elif key in {"properties", "patternProperties", "dependentSchemas"} and isinstance(
                value, dict
            ):
                for item in value.values():
                    scan(item, polarity)
            else:
                scan(value, polarity)

    scan(schema, 1)
    return found


def version_list(schema: Any) -> list[Any]:
    if isinstance(schema, dict):
        if "const" in schema:
            return [schema["const"]]
        return list(schema.get("enum", []))
    return []


def numeric_bound(
    schema: dict[str, Any], inclusive: str, exclusive: str, lower: bool, types: frozenset[str]
) -> tuple[Fraction, bool] | None:
    """The tightest numeric bound, as (value, exclusive); on integers only, made inclusive.

    On integers ``exclusiveMaximum: 11`` and ``maximum: 10`` accept the same values, so they
    compare equal rather than as a bound removed plus a bound added.
    """
    candidates: list[tuple[Fraction, bool]] = []
    for keyword, is_exclusive in ((inclusive, False), (exclusive, True)):
        value = schema.get(keyword)
        if isinstance(value, int | float) and not isinstance(value, bool):
            candidates.append((Fraction(str(value)), is_exclusive))
    if not candidates:
        return None
    if types & {"integer", "fraction"} == {"integer"}:
        candidates = [_integral(value, is_exclusive, lower) for value, is_exclusive in candidates]
    tightest = candidates[0]
    for candidate in candidates[1:]:
        if looser(tightest, candidate, lower):
            tightest = candidate
    return tightest


def _integral(value: Fraction, exclusive: bool, lower: bool) -> tuple[Fraction, bool]:
    """The inclusive integer bound equivalent to a bound on integers."""
    if lower:
        return Fraction(math.floor(value) + 1 if exclusive else math.ceil(value)), False
    return Fraction(math.ceil(value) - 1 if exclusive else math.floor(value)), False


def looser(first: tuple[Fraction, bool], second: tuple[Fraction, bool], lower: bool) -> bool:
    """Whether bound ``first`` admits strictly more than bound ``second``."""
    (a, a_exclusive), (b, b_exclusive) = first, second
    if a != b:
        return a < b if lower else a > b
    return b_exclusive and not a_exclusive


def bound_value(schema: dict[str, Any], keyword: str, family: str) -> Any:
    return schema.get(keyword, schema.get(family))


def key_schema(schema: dict[str, Any], name: str) -> Any:
    """What ``schema`` lets property ``name`` hold; None when patternProperties decide."""
    properties: dict[str, Any] = schema.get("properties", {})
    if name in properties:
        return properties[name]
    patterns: dict[str, Any] = schema.get("patternProperties", {})
    if any(re.search(pattern, name) for pattern in patterns):
        return None
    return schema.get("additionalProperties", True)


def content_model(schema: dict[str, Any]) -> str:
    additional = schema.get("additionalProperties", True)
    if schema.get("patternProperties"):
        return "partially open object"
    if additional is False:
        return "closed object"
    return "open object" if is_permissive(additional) else "partially open object"


def renames(
    old_properties: dict[str, Any],
    new_properties: dict[str, Any],
    removed: list[str],
    added: list[str],
) -> dict[str, str]:
    """Removed and added properties that accept the same values: taken as renamed, one to one."""
    pairs: dict[str, str] = {}
    for old_name in removed:
        for new_name in added:
            if new_name not in pairs.values() and same_meaning(
                old_properties[old_name], new_properties[new_name]
            ):
                pairs[old_name] = new_name
                break
    return pairs
