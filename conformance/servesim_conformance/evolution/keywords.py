"""What each Draft 2020-12 keyword means for compatibility: the rule tables of the diff.

The tables are data so that a reviewer can check them against the checklist (conformance anchors
5.4, after Confluent's JSON Schema rules and jsoncompat) without reading the walk.
"""

from __future__ import annotations

from typing import Any

#: Keywords that never affect validation (annotations, and ``$defs`` which only holds
#: subschemas for ``$ref``; definitions are compared where they are referenced).
ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "$comment",
        "examples",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
    }
)

#: Lower bounds: the value must be at least this (a larger bound accepts less).
LOWER_BOUNDS = frozenset(
    {"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains"}
)

#: Upper bounds: the value must be at most this (a smaller bound accepts less).
UPPER_BOUNDS = frozenset(
    {"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains"}
)

#: Keywords taken as the same constraint when a counterexample is matched to a change: a
#: change from ``maximum`` to ``exclusiveMaximum`` is one bound that moved, and ``const`` is an
#: ``enum`` of one.
ALIASES = {
    "exclusiveMinimum": "minimum",
    "exclusiveMaximum": "maximum",
    "const": "enum",
}

#: Keywords that constrain only instances of some JSON types; on other types they accept all.
APPLIES_TO: dict[str, frozenset[str]] = {
    **dict.fromkeys(
        ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
        frozenset({"integer", "fraction"}),
    ),
    **dict.fromkeys(("minLength", "maxLength", "pattern", "format"), frozenset({"string"})),
    **dict.fromkeys(
        (
            "items",
            "prefixItems",
            "contains",
            "minItems",
            "maxItems",
            "uniqueItems",
            "minContains",
            "maxContains",
        ),
        frozenset({"array"}),
    ),
    **dict.fromkeys(
        (
            "properties",
            "required",
            "additionalProperties",
            "propertyNames",
            "minProperties",
            "maxProperties",
            "dependentRequired",
            "dependentSchemas",
        ),
        frozenset({"object"}),
    ),
}

#: Every JSON type as a set of disjoint atoms: "number" is an integer or a fraction.
ALL_TYPES = frozenset({"null", "boolean", "object", "array", "string", "integer", "fraction"})


def type_atoms(schema: Any) -> frozenset[str]:
    """The JSON types ``schema``'s ``type`` keyword admits, as atoms (every type if absent)."""
    if not isinstance(schema, dict) or "type" not in schema:
        return ALL_TYPES
    declared = schema["type"]
    names = [declared] if isinstance(declared, str) else list(declared)
    atoms: set[str] = set()
    for name in names:
        atoms |= {"integer", "fraction"} if name == "number" else {name}
    return frozenset(atoms)


def canonical_value(value: Any) -> Any:
    """A hashable form of a JSON value with JSON Schema's equality.

    ``1`` and ``1.0`` are equal in JSON Schema, ``true`` and ``1`` are not, and object key order
    does not matter.
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, int | float):
        number = int(value) if isinstance(value, float) and value.is_integer() else value
        return ("number", number)
    if isinstance(value, list):
        return ("array", tuple(canonical_value(item) for item in value))
    if isinstance(value, dict):
        return (
            "object",
            tuple(sorted((key, canonical_value(item)) for key, item in value.items())),
        )
    raise TypeError(f"not a JSON value: {value!r}")


def value_set(schema: Any) -> frozenset[Any] | None:
    """The values ``const`` or ``enum`` allow (canonical forms), or None when unconstrained."""
    if not isinstance(schema, dict):
        return None
    allowed: frozenset[Any] | None = None
    if "enum" in schema:
        allowed = frozenset(canonical_value(value) for value in schema["enum"])
    if "const" in schema:
        const = frozenset({canonical_value(schema["const"])})
        allowed = const if allowed is None else allowed & const
    return allowed


def property_names(*schemas: Any) -> tuple[str, ...]:
    """Every property name declared anywhere in ``schemas``, sorted."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            properties = node.get("properties")
            if isinstance(properties, dict):
                found.update(properties)
            found.update(name for name in node.get("required", []) if isinstance(name, str))
            for key, value in node.items():
                if key not in {"const", "enum", "examples", "default"}:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for schema in schemas:
        walk(schema)
    return tuple(sorted(found))


def interesting_values(*schemas: Any) -> tuple[Any, ...]:
    """Every constant and bound written in ``schemas`` (bounds with their neighbours).

    A counterexample usually sits at a value one of the two schemas names: a member of an enum
    only one side lists, a value just across a bound only one side has, a string excluded by a
    ``not``. The generator tries these values first.
    """
    found: set[Any] = set()
    values: list[Any] = []

    def add(value: Any) -> None:
        marker = canonical_value(value)
        if marker not in found:
            found.add(marker)
            values.append(value)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "const":
                    add(value)
                elif key == "enum" and isinstance(value, list):
                    for item in value:
                        add(item)
                elif key in LOWER_BOUNDS | UPPER_BOUNDS and isinstance(value, int | float):
                    if not isinstance(value, bool):
                        for neighbour in (value - 1, value, value + 1):
                            add(neighbour)
                elif key not in ANNOTATIONS:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for schema in schemas:
        walk(schema)
    return tuple(values)
