"""Making a counterexample small enough to read in a pull request.

Hypothesis finds counterexamples quickly but shrinks a document as big as a report slowly (its
shrinker works on the choices that drew the document, many hundreds of them). This reducer works
on the JSON instead, greedily and deterministically: drop a member, drop an array item, empty a
string, bring a number towards zero by bisection, and keep each step only if the document still
shows the break. A moved bound thus shows its first value across the line (65537, not 1048575).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from servesim_conformance.evolution.pointers import resolve_local

#: A path into a document: keys and indices from the root.
Path = tuple[str | int, ...]

#: Passes over the whole document; each pass that changes nothing ends the reduction.
_MAX_PASSES = 6


def _get(document: Any, path: Path) -> Any:
    node = document
    for part in path:
        node = node[part]
    return node


def _replace(document: Any, path: Path, value: Any) -> Any:
    """A copy of ``document`` with the value at ``path`` replaced (or deleted when ``_DELETE``)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(document, dict):
        copied: dict[str, Any] = dict(document)
        if not rest and value is _DELETE:
            del copied[str(head)]
        else:
            copied[str(head)] = _replace(document[str(head)], rest, value)
        return copied
    items = list(document)
    index = int(head)
    if not rest and value is _DELETE:
        del items[index]
    else:
        items[index] = _replace(items[index], rest, value)
    return items


_DELETE = object()


def _paths(document: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every path in ``document``, parents before children (big cuts are tried first)."""
    yield prefix
    if isinstance(document, dict):
        for key, value in document.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from _paths(value, (*prefix, index))


def _bisect(low: int, high: int, holds: Callable[[int], bool]) -> int:
    """The smallest value in ``(low, high]`` found to hold, given that ``high`` holds."""
    while high - low > 1:
        middle = (low + high) // 2
        if holds(middle):
            high = middle
        else:
            low = middle
    return high


def reduce_document(document: Any, holds: Callable[[Any], bool]) -> Any:
    """A smaller document for which ``holds`` is still true (``holds(document)`` must be)."""
    current = document
    for _ in range(_MAX_PASSES):
        before = current
        for path in list(_paths(current)):
            try:
                value = _get(current, path)
            except (KeyError, IndexError, TypeError):
                continue  # an earlier step of this pass removed it
            current = _reduce_at(current, path, value, holds)
        if current == before:
            break
    return current


def _reduce_at(current: Any, path: Path, value: Any, holds: Callable[[Any], bool]) -> Any:
    if path:
        deleted = _replace(current, path, _DELETE)
        if holds(deleted):
            return deleted
    for candidate in _simpler(value):
        replaced = _replace(current, path, candidate)
        if holds(replaced):
            return replaced
    if isinstance(value, int) and not isinstance(value, bool) and value not in (0, 1, -1):
        sign = 1 if value > 0 else -1
        best = _bisect(0, abs(value), lambda size: holds(_replace(current, path, sign * size)))
        return _replace(current, path, sign * best) if best != abs(value) else current
    if isinstance(value, str) and len(value) > 1:
        best = _bisect(0, len(value), lambda size: holds(_replace(current, path, value[:size])))
        return _replace(current, path, value[:best]) if best != len(value) else current
    return current


def _simpler(value: Any) -> list[Any]:
    """Simpler values of the same type to try in place of ``value``, simplest first."""
    if isinstance(value, bool):
        return [False] if value else []
    if isinstance(value, int):
        return [candidate for candidate in (0, 1) if candidate != value and abs(value) > candidate]
    if isinstance(value, float):
        whole = [int(value)] if value.is_integer() else []
        return [0, *whole, 0.0]
    if isinstance(value, str):
        return [""] if value else []
    if isinstance(value, list):
        return [[]] if value else []
    return []


def in_schema_order(document: Any, schema: Any, root: Any | None = None, depth: int = 0) -> Any:
    """``document`` with every object's members in the order its schema declares them.

    Generated and reduced documents come out in whatever order the search left them; a reader
    compares a counterexample with the schema, so it is shown in the schema's order.
    """
    root = schema if root is None else root
    if isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and depth < 12:
        target = resolve_local(root, schema["$ref"])
        if target is not None:
            return in_schema_order(document, target, root, depth + 1)
    if not isinstance(schema, dict):
        return document
    if isinstance(document, dict):
        declared: dict[str, Any] = schema.get("properties", {})
        additional = schema.get("additionalProperties", True)
        ordered = {
            name: in_schema_order(document[name], declared[name], root, depth)
            for name in declared
            if name in document
        }
        for name, value in document.items():
            if name not in ordered:
                ordered[name] = in_schema_order(value, additional, root, depth)
        return ordered
    if isinstance(document, list):
        items = schema.get("items", True)
        return [in_schema_order(value, items, root, depth) for value in document]
    return document
