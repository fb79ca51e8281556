"""JSON pointers (RFC 6901) into schemas and documents, and local ``$ref`` resolution."""

from __future__ import annotations

from typing import Any

import jsonpointer


def child(pointer: str, *parts: str | int) -> str:
    """``pointer`` extended by ``parts`` (each escaped per RFC 6901)."""
    return pointer + "".join("/" + jsonpointer.escape(str(part)) for part in parts)


def resolve(root: Any, pointer: str) -> Any:
    """The value at ``pointer`` in ``root``; ``LookupError`` if there is none."""
    try:
        return jsonpointer.resolve_pointer(root, pointer)
    except jsonpointer.JsonPointerException:
        raise LookupError(pointer) from None


def resolve_local(root: Any, reference: str) -> Any:
    """The target of a local ``$ref`` (``#`` or ``#/...``), or None for any other reference.

    servesim's schemas use only local references; a reference to another document is reported
    as a change no rule decides rather than fetched.
    """
    if not reference.startswith("#") or (len(reference) > 1 and reference[1] != "/"):
        return None
    try:
        return resolve(root, reference[1:])
    except LookupError:
        return None


def index_nodes(root: Any) -> dict[int, str]:
    """Every object in ``root`` by identity, with its pointer.

    The validator reports the subschema that failed as the very object of the schema it was
    given (``$ref`` targets included), so this index turns a failure into its schema pointer.
    """
    found: dict[int, str] = {}

    def walk(node: Any, pointer: str) -> None:
        if isinstance(node, dict):
            found.setdefault(id(node), pointer)
            for key, value in node.items():
                walk(value, child(pointer, key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, child(pointer, index))

    walk(root, "")
    return found
