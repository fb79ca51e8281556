"""The harness's own documents (describe, manifests, run report) and their schemas."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jsonschema

from servesim.contract.errors import pointer
from servesim.contract.schemas import schema_root

#: The folder of the harness's working schemas: the newest protocol's. Its documents describe
#: every protocol the harness speaks (the describe schema accepts protocol 1 as well as 2), so
#: one set serves them all; the frozen copy of each protocol's is in ``released/harness/``.
HARNESS_SCHEMAS = "harness/v5"

_FILES = {
    "describe": "describe.schema.json",
    "golden-manifest": "golden-manifest.schema.json",
    "expected-failures": "expected-failures.schema.json",
    "implementation": "implementation.schema.json",
    "run-report": "run-report.schema.json",
}


@cache
def harness_schema(kind: str) -> dict[str, Any]:
    """The schema of a harness document kind."""
    path = schema_root() / HARNESS_SCHEMAS / _FILES[kind]
    schema: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return schema


def validate_harness_document(kind: str, value: Any) -> list[str]:
    """Problems with ``value`` as a ``kind`` document, as "at POINTER: message" strings."""
    validator = jsonschema.Draft202012Validator(harness_schema(kind))
    return sorted(
        f"at {pointer(error.absolute_path) or '/'}: {error.message}"
        for error in validator.iter_errors(value)
    )
