"""Structural comparison of reports: the first differing JSON pointer, not only a byte diff."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jsonpointer import JsonPointer

from servesim_conformance.outcomes import Difference

_MISSING = object()


def _pointer(parts: list[str | int]) -> str:
    return str(JsonPointer.from_parts([str(part) for part in parts]).path)


def _differences(
    expected: Any, actual: Any, path: list[str | int]
) -> Iterator[tuple[list[str | int], Any, Any]]:
    """Every differing leaf, in document order (objects by sorted key, arrays by index)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual)):
            yield from _differences(
                expected.get(key, _MISSING), actual.get(key, _MISSING), [*path, key]
            )
    elif isinstance(expected, list) and isinstance(actual, list):
        for index in range(max(len(expected), len(actual))):
            left = expected[index] if index < len(expected) else _MISSING
            right = actual[index] if index < len(actual) else _MISSING
            yield from _differences(left, right, [*path, index])
    elif type(expected) is not type(actual) or expected != actual:
        yield path, expected, actual


def first_difference(expected: Any, actual: Any) -> Difference | None:
    """The first differing value and how many differ, or None when the values are equal."""
    found = list(_differences(expected, actual, []))
    if not found:
        return None
    path, left, right = found[0]
    return Difference(
        pointer=_pointer(path),
        expected="(missing)" if left is _MISSING else left,
        actual="(missing)" if right is _MISSING else right,
        count=len(found),
    )
