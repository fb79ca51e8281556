"""R2, R3: the schemas themselves are well-formed contracts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from servesim.schemas import SUPPORTED_VERSIONS, schema_path
from tests.helpers import REPO

SCHEMA_FILES = sorted((REPO / "schemas" / "v1").glob("*.schema.json"))


def _properties(schema: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """Every declared property and where it is (``if`` and the like declare none)."""
    if not isinstance(schema, dict):
        return
    for name, subschema in schema.get("properties", {}).items():
        yield f"{where}/properties/{name}", subschema
        yield from _properties(subschema, f"{where}/properties/{name}")
    if "items" in schema:
        yield from _properties(schema["items"], f"{where}/items")
    for name, subschema in schema.get("$defs", {}).items():
        yield from _properties(subschema, f"{where}/$defs/{name}")


def test_one_schema_per_document_kind() -> None:
    assert {path.name for path in SCHEMA_FILES} == {
        schema_path(kind, "1.0").name for kind in SUPPORTED_VERSIONS
    }


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda path: path.name)
def test_r3_schema_is_valid_draft_2020_12_with_id_title_description(path: Path) -> None:
    schema = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].startswith("urn:servesim:schema:v1:")
    assert schema["title"]
    assert schema["description"]


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda path: path.name)
def test_r3_every_property_has_a_description(path: Path) -> None:
    schema = json.loads(path.read_text(encoding="utf-8"))
    missing = [where for where, sub in _properties(schema) if "description" not in sub]
    assert not missing


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda path: path.name)
def test_r3_every_object_is_closed(path: Path) -> None:
    schema = json.loads(path.read_text(encoding="utf-8"))

    def objects(node: Any) -> Iterator[dict[str, Any]]:
        if isinstance(node, dict):
            if node.get("type") == "object":
                yield node
            for value in node.values():
                yield from objects(value)
        elif isinstance(node, list):
            for value in node:
                yield from objects(value)

    assert all(node.get("additionalProperties") is False for node in objects(schema))


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda path: path.name)
def test_r2_schema_pins_document_kind_and_version(path: Path) -> None:
    properties = json.loads(path.read_text(encoding="utf-8"))["properties"]
    assert properties["schema_version"] == {
        "description": properties["schema_version"]["description"],
        "const": "1.0",
    }
    assert properties["document"]["const"] in SUPPORTED_VERSIONS
