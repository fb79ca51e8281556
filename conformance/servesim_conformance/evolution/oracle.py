"""A schema as a reader: does it accept a document, and if not, where and why.

Documents are judged as servesim judges them (SPEC.md R1: an integer is a JSON integer, never
``true`` nor ``1.0``), and with their ``schema_version`` relabelled to one the reader reads: the
version member always differs between two versions, and a comparison that counted it would call
every version bump breaking and say nothing about the contents.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import jsonschema

from servesim.contract.migrations import version_key
from servesim_conformance.evolution.keywords import ALIASES
from servesim_conformance.evolution.model import Rejection
from servesim_conformance.evolution.pointers import child, index_nodes


def _is_json_integer(_checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


_StrictValidator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_json_integer),
)


def version_values(schema: Any) -> tuple[str, ...]:
    """The ``schema_version`` values ``schema`` reads (const or enum), oldest first."""
    if not isinstance(schema, dict):
        return ()
    member = schema.get("properties", {}).get("schema_version")
    if not isinstance(member, dict):
        return ()
    values = [member["const"]] if "const" in member else list(member.get("enum", []))
    return tuple(value for value in values if isinstance(value, str))


#: Keywords whose failure is reported where they are, not inside their subschemas.
_APPLICATORS = frozenset({"not", "anyOf", "oneOf", "allOf"})


def latest_version(values: tuple[str, ...]) -> str:
    """The newest of a schema's versions ("-" for none); listed order if one is not MAJOR.MINOR."""
    if not values:
        return "-"
    try:
        return max(values, key=version_key)
    except ValueError:
        return values[-1]


def normalize_key(key: str) -> str:
    """A blame key with keyword aliases folded (``exclusiveMaximum`` is ``maximum``)."""
    head, _, last = key.rpartition("/")
    return f"{head}/{ALIASES[last]}" if last in ALIASES else key


def explains(keys: tuple[str, ...], rejection: Rejection) -> bool:
    """Whether a rejection is at (or inside) one of a change's blame keys."""
    targets = [normalize_key(key) for key in keys]
    for location in rejection.keys:
        found = normalize_key(location)
        if any(found == target or found.startswith(target + "/") for target in targets):
            return True
        # ``not`` (and a failed ``anyOf``/``oneOf``) is reported at the applicator, not at the
        # keyword inside it that changed.
        if found.rsplit("/", 1)[-1] in _APPLICATORS and any(
            target.startswith(found + "/") for target in targets
        ):
            return True
    return False


class Oracle:
    """One schema, ready to judge documents."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self.versions = version_values(schema)

    @cached_property
    def _validator(self) -> Any:
        return _StrictValidator(self.schema)

    @cached_property
    def _nodes(self) -> dict[int, str]:
        return index_nodes(self.schema)

    def relabel(self, document: Any) -> Any:
        """``document`` with a ``schema_version`` this schema reads, if it had another."""
        if (
            isinstance(document, dict)
            and self.versions
            and document.get("schema_version") not in self.versions
            and "schema_version" in document
        ):
            return {**document, "schema_version": self.versions[-1]}
        return document

    def accepts(self, document: Any) -> bool:
        """Whether this schema accepts ``document`` exactly as it is."""
        return bool(self._validator.is_valid(document))

    def rejections(self, document: Any) -> tuple[Rejection, ...]:
        """Every complaint about ``document`` (relabelled), sorted, with blame keys."""
        found: list[Rejection] = []
        pending = list(self._validator.iter_errors(self.relabel(document)))
        while pending:
            error = pending.pop()
            pending.extend(error.context or [])
            found.append(self._rejection(error))
        return tuple(
            sorted(set(found), key=lambda each: (each.instance_pointer, each.schema_pointer))
        )

    def _rejection(self, error: jsonschema.ValidationError) -> Rejection:
        node = self._nodes.get(id(error.schema), "")
        keyword = str(error.validator)
        location = child(node, keyword)
        keys = [location]
        instance = error.instance
        names: list[Any] = (
            list(error.validator_value) if isinstance(error.validator_value, list) else []
        )
        if keyword == "required" and isinstance(instance, dict):
            keys += [child(node, "required", name) for name in names if name not in instance]
        elif keyword == "additionalProperties" and isinstance(instance, dict):
            declared = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
            keys += [child(node, "properties", name) for name in instance if name not in declared]
        elif keyword == "dependentRequired" and isinstance(instance, dict):
            dependencies = error.validator_value if isinstance(error.validator_value, dict) else {}
            keys += [child(node, keyword, name) for name in dependencies if name in instance]
        instance_pointer = child("", *error.absolute_path)
        return Rejection(
            instance_pointer=instance_pointer,
            schema_pointer=location,
            message=error.message,
            keys=tuple(keys),
        )
