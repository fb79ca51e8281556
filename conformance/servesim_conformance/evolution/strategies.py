"""Hypothesis strategies for documents of a JSON Schema, biased towards where schemas differ.

hypothesis-jsonschema would be the library for this, but its release 0.23.1 drives Hypothesis
internals that Hypothesis 6.1xx no longer has (``cu.many(...).more()``: every object schema fails
with ``AttributeError: 'many' object has no attribute 'more'``), and it targets drafts 4 to 7.
This module covers the keywords servesim's schemas use, and draws:

- *boundary values* often (a bound, one inside it, zero, the 64-bit extremes), because a moved
  bound is only visible at the values between the old and the new one;
- *every declared property name* as a candidate extra key of open objects, because adding a
  property to an open object breaks only documents that already carry that name;
- the *path to a focus* (a change's pointer) always: the optional properties, array items and
  non-null branches leading to it, so a search aimed at a change reaches it.

It does not solve ``if``/``then``, ``dependentSchemas``, ``oneOf`` or ``not``: the documents it
draws are candidates, and the caller keeps those the schema accepts (``oracle.Oracle``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from hypothesis import strategies as st

from servesim_conformance.evolution.keywords import canonical_value
from servesim_conformance.evolution.pointers import child, resolve, resolve_local

#: Applicators through which a focus below a node is reached (a keyword-level focus is not).
_PATH_KEYWORDS = frozenset(
    {
        "properties",
        "items",
        "prefixItems",
        "additionalProperties",
        "$ref",
        "allOf",
        "anyOf",
        "oneOf",
        "then",
        "else",
        "dependentSchemas",
        "contains",
        "patternProperties",
    }
)

#: Integers worth trying when nothing bounds them: the edges of common integer types.
_EXTREMES = (0, 1, -1, 2**31 - 1, 2**32 - 1, 2**32, 2**53 - 1, 2**53, 2**63 - 1, 2**64 - 1, 2**64)

#: How deep a chain of ``$ref`` may go before a branch gives up (recursive schemas).
_MAX_DEPTH = 12


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.sampled_from(_EXTREMES),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=6),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
        ),
        max_leaves=6,
    )


def hot_pointers(schema: Any, focus: str) -> frozenset[str]:
    """The locations from which ``focus`` is reached: its own, and every ``$ref`` leading to it.

    A node is on the path to the focus when one of these starts with the node's pointer.
    """
    hot = {focus}
    sites: list[tuple[str, str]] = []

    def collect(node: Any, pointer: str) -> None:
        if isinstance(node, dict):
            reference = node.get("$ref")
            if isinstance(reference, str) and reference.startswith("#"):
                sites.append((pointer, reference[1:]))
            for key, value in node.items():
                collect(value, child(pointer, key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                collect(value, child(pointer, index))

    collect(schema, "")
    grew = True
    while grew:
        grew = False
        for site, target in sites:
            leads = any(point == target or point.startswith(target + "/") for point in hot)
            if leads and child(site, "$ref") not in hot:
                hot.add(child(site, "$ref"))
                grew = True
    return frozenset(hot)


@dataclass
class _Builder:
    """Builds the strategy for one schema, remembering the focus and the candidate key names."""

    root: Any
    hot: frozenset[str] = frozenset()
    names: tuple[str, ...] = ()
    constants: tuple[Any, ...] = ()
    other: Any = None
    max_size: int = 2
    cache: dict[tuple[str, int], st.SearchStrategy[Any]] = field(default_factory=dict)

    def on_path(self, pointer: str) -> bool:
        """Whether the focus is at or below ``pointer``."""
        return any(point == pointer or point.startswith(pointer + "/") for point in self.hot)

    def through(self, pointer: str) -> bool:
        """Whether the focus is below ``pointer`` through a subschema (not one of its keywords)."""
        prefix = pointer + "/"
        return any(
            point.startswith(prefix) and point[len(prefix) :].split("/", 1)[0] in _PATH_KEYWORDS
            for point in self.hot
        )

    def build(self, schema: Any, pointer: str, depth: int = 0) -> st.SearchStrategy[Any]:
        key = (pointer, depth)
        if key not in self.cache:
            self.cache[key] = self._build(schema, pointer, depth)
        return self.cache[key]

    def _build(self, schema: Any, pointer: str, depth: int) -> st.SearchStrategy[Any]:
        if schema is True or schema == {}:
            return _json_values()
        if schema is False or not isinstance(schema, dict):
            return st.nothing()
        reference = schema.get("$ref")
        if isinstance(reference, str):
            target = resolve_local(self.root, reference)
            if target is None or depth >= _MAX_DEPTH:
                return _json_values()
            return self.build(target, reference[1:], depth + 1)
        if "const" in schema:
            return st.just(schema["const"])
        if "enum" in schema:
            return st.sampled_from(list(schema["enum"]))
        branches = schema.get("anyOf") or schema.get("oneOf")
        if branches and "type" not in schema:
            keyword = "anyOf" if "anyOf" in schema else "oneOf"
            return st.one_of(
                [
                    self.build(branch, child(pointer, keyword, index), depth)
                    for index, branch in enumerate(branches)
                ]
            )
        if schema.get("allOf") and "type" not in schema:
            return self.build(schema["allOf"][0], child(pointer, "allOf", 0), depth)
        types = _types(schema)
        if len(types) > 1 and self.through(pointer):
            types = [name for name in types if name != "null"] or types
        return st.one_of([self._typed(name, schema, pointer, depth) for name in types])

    def _typed(
        self, name: str, schema: dict[str, Any], pointer: str, depth: int
    ) -> st.SearchStrategy[Any]:
        if name == "null":
            return st.none()
        if name == "boolean":
            return st.booleans()
        if name == "integer":
            return self._known(schema, int) | _integers(schema)
        if name == "number":
            return st.one_of(
                self._known(schema, int | float), _integers(schema), _fractions(schema)
            )
        if name == "string":
            return self._known(schema, str) | _strings(schema)
        if name == "array":
            return self._array(schema, pointer, depth)
        return self._object(schema, pointer, depth)

    def _extra_keys(self, pointer: str, properties: dict[str, Any]) -> st.SearchStrategy[str]:
        """Names for undeclared members: first those the other schema declares right here."""
        try:
            counterpart = resolve(self.other, pointer) if self.other is not None else None
        except LookupError:
            counterpart = None
        declared = counterpart.get("properties", {}) if isinstance(counterpart, dict) else {}
        local = [name for name in declared if name not in properties]
        anywhere = [name for name in self.names if name not in properties]
        choices = [st.sampled_from(names) for names in (local, anywhere) if names]
        return st.one_of(*choices, st.text(max_size=6))

    def _known(self, schema: dict[str, Any], kind: Any) -> st.SearchStrategy[Any]:
        """The schemas' own constants of this type that this subschema's own bounds allow."""
        fitting = [
            value
            for value in self.constants
            if isinstance(value, kind) and not isinstance(value, bool) and _fits(schema, value)
        ]
        return st.sampled_from(fitting) if fitting else st.nothing()

    def _array(self, schema: dict[str, Any], pointer: str, depth: int) -> st.SearchStrategy[Any]:
        prefix: list[Any] = schema.get("prefixItems", [])
        items = self.build(schema.get("items", True), child(pointer, "items"), depth)
        minimum = int(schema.get("minItems", 0))
        if self.through(pointer):
            minimum = max(minimum, 1)
        maximum = int(schema.get("maxItems", minimum + self.max_size))
        maximum = max(minimum, min(maximum, minimum + self.max_size))
        unique = bool(schema.get("uniqueItems", False))
        if prefix:
            heads = st.tuples(
                *(
                    self.build(item, child(pointer, "prefixItems", index), depth)
                    for index, item in enumerate(prefix)
                )
            ).map(list)
            tails = st.lists(items, max_size=max(0, maximum - len(prefix)))
            return st.builds(lambda head, tail: [*head, *tail], heads, tails)
        if unique:
            return st.lists(items, min_size=minimum, max_size=maximum, unique_by=canonical_value)
        return st.lists(items, min_size=minimum, max_size=maximum)

    def _object(self, schema: dict[str, Any], pointer: str, depth: int) -> st.SearchStrategy[Any]:
        properties: dict[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", []))
        always: dict[str, st.SearchStrategy[Any]] = {}
        optional: dict[str, st.SearchStrategy[Any]] = {}
        for name, subschema in properties.items():
            where = child(pointer, "properties", name)
            strategy = self.build(subschema, where, depth)
            if name in required or self.on_path(where):
                always[name] = strategy
            else:
                optional[name] = strategy
        additional = schema.get("additionalProperties", True)
        for name in sorted(required - set(properties)):
            always[name] = self.build(additional, child(pointer, "additionalProperties"), depth)
        declared = st.fixed_dictionaries(always, optional=optional)
        if additional is False:
            return declared
        keys = self._extra_keys(pointer, properties)
        values = self.build(additional, child(pointer, "additionalProperties"), depth)
        extras = st.dictionaries(keys, values, max_size=2)
        return st.builds(_merge, declared, extras)


def _fits(schema: dict[str, Any], value: Any) -> bool:
    """Whether ``value`` keeps within the bounds, lengths and pattern of ``schema`` itself."""
    if isinstance(value, str):
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and re.search(pattern, value) is None:
            return False
        return (
            int(schema.get("minLength", 0))
            <= len(value)
            <= int(schema.get("maxLength", len(value)))
        )
    low, high = _integer_range(schema) if isinstance(value, int) else (None, None)
    if isinstance(value, float):
        low = schema.get("minimum")
        high = schema.get("maximum")
    return (low is None or value >= low) and (high is None or value <= high)


def _merge(known: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Declared members first, then extra ones; a declared member is never overwritten."""
    return {**known, **{key: value for key, value in more.items() if key not in known}}


def _types(schema: dict[str, Any]) -> list[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [str(name) for name in declared]
    inferred = []
    if {"properties", "required", "additionalProperties"} & set(schema):
        inferred.append("object")
    if {"items", "prefixItems", "minItems", "maxItems"} & set(schema):
        inferred.append("array")
    if {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"} & set(schema):
        inferred.append("number")
    if {"pattern", "minLength", "maxLength"} & set(schema):
        inferred.append("string")
    return inferred or ["null", "boolean", "integer", "number", "string", "array", "object"]


def _integer_range(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    low: int | None = None
    high: int | None = None
    if isinstance(schema.get("minimum"), int | float):
        low = math.ceil(Fraction(str(schema["minimum"])))
    if isinstance(schema.get("exclusiveMinimum"), int | float):
        candidate = math.floor(Fraction(str(schema["exclusiveMinimum"]))) + 1
        low = candidate if low is None else max(low, candidate)
    if isinstance(schema.get("maximum"), int | float):
        high = math.floor(Fraction(str(schema["maximum"])))
    if isinstance(schema.get("exclusiveMaximum"), int | float):
        candidate = math.ceil(Fraction(str(schema["exclusiveMaximum"]))) - 1
        high = candidate if high is None else min(high, candidate)
    return low, high


def _integers(schema: dict[str, Any]) -> st.SearchStrategy[int]:
    low, high = _integer_range(schema)
    if low is not None and high is not None and low > high:
        return st.nothing()
    step = schema.get("multipleOf")
    if isinstance(step, int) and not isinstance(step, bool) and step > 0:
        first = None if low is None else -((-low) // step)
        last = None if high is None else high // step
        if first is not None and last is not None and first > last:
            return st.nothing()
        return st.integers(first, last).map(lambda factor: factor * step)
    edges = [value for value in (low, high) if value is not None]
    edges += [value + 1 for value in edges] + [value - 1 for value in edges]
    edges += [*_EXTREMES, 0] if low is None or high is None else [0]
    inside = sorted(
        {
            value
            for value in edges
            if (low is None or value >= low) and (high is None or value <= high)
        }
    )
    general = st.integers(low, high)
    return st.one_of(st.sampled_from(inside), general) if inside else general


def _fractions(schema: dict[str, Any]) -> st.SearchStrategy[float]:
    def bound(name: str) -> float | None:
        value = schema.get(name)
        return (
            float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        )

    low = bound("minimum")
    high = bound("maximum")
    exclusive_low = bound("exclusiveMinimum")
    exclusive_high = bound("exclusiveMaximum")
    return st.floats(
        min_value=exclusive_low if exclusive_low is not None else low,
        max_value=exclusive_high if exclusive_high is not None else high,
        exclude_min=exclusive_low is not None,
        exclude_max=exclusive_high is not None,
        allow_nan=False,
        allow_infinity=False,
    )


def _compiles(pattern: str) -> bool:
    """Whether Python reads the pattern (an ECMA-262-only one is left to the validity check)."""
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


def _strings(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    minimum = int(schema.get("minLength", 0))
    maximum = schema.get("maxLength")
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and _compiles(pattern):
        return st.from_regex(pattern).filter(
            lambda text: len(text) >= minimum and (maximum is None or len(text) <= maximum)
        )
    cap = minimum + 8 if maximum is None else min(int(maximum), minimum + 8)
    return st.text(min_size=minimum, max_size=max(cap, minimum))


def documents(
    schema: Any,
    *,
    focus: str | None = None,
    names: tuple[str, ...] = (),
    constants: tuple[Any, ...] = (),
    other: Any = None,
    max_size: int = 2,
) -> st.SearchStrategy[Any]:
    """Candidate documents of ``schema``; aimed at ``focus`` (a schema pointer) when given.

    ``names`` are property names to try as extra keys of open objects (``property_names``) and
    ``constants`` values to try first where they fit (``interesting_values``); ``other`` is the
    schema being compared with, whose property names at the same place are tried first.
    Lists hold at most ``max_size`` items beyond their minimum, to keep documents small.
    """
    hot = hot_pointers(schema, focus) if focus is not None else frozenset()
    builder = _Builder(
        schema, hot=hot, names=names, constants=constants, other=other, max_size=max_size
    )
    return builder.build(schema, "")
