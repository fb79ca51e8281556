"""Where the JSON Schemas are, and which document kinds and versions this package reads.

The schemas are the contract (SPEC.md R3). A wheel carries a copy inside the package; a source
checkout (an editable install, or the tests run from the tree) reads the top-level ``schemas/``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

#: Document kind -> schema versions this package reads (SPEC.md R2), oldest first.
SUPPORTED_VERSIONS: dict[str, tuple[str, ...]] = {
    "scenario": ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7", "1.8"),
    "workload": ("1.0", "1.1", "1.2", "1.3"),
    "timing_profile": ("1.0", "1.1"),
    "report": ("1.0", "2.0", "3.0", "4.0", "5.0", "6.0", "7.0", "8.0", "9.0", "10.0"),
}

#: The report versions the reference writes (SPEC.md R31, R38): only the current one.
WRITTEN_REPORT_VERSIONS: tuple[str, ...] = ("10.0",)

#: Document kind -> the schema file's name inside a version folder.
_SCHEMA_FILES = {
    "scenario": "scenario.schema.json",
    "workload": "workload.schema.json",
    "timing_profile": "timing-profile.schema.json",
    "report": "report.schema.json",
}


def schema_root() -> Path:
    """The folder holding ``v1/`` and the other version folders."""
    packaged = Path(__file__).parents[1] / "schemas"
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[3] / "schemas"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"servesim's schemas are neither in {packaged} nor in {checkout}")


def schema_path(document: str, version: str) -> Path:
    """The file of the schema for ``document`` at ``version`` (a supported pair).

    R3: a version is read with its frozen copy (so a 1.0 document may not use what 1.1 added);
    the working schema of the major serves a version not released yet.
    """
    released = schema_root() / "released" / version / _SCHEMA_FILES[document]
    if released.is_file():
        return released
    major = version.split(".", 1)[0]
    return schema_root() / f"v{major}" / _SCHEMA_FILES[document]


@cache
def load_schema(document: str, version: str) -> dict[str, Any]:
    """The parsed schema for ``document`` at ``version``."""
    with schema_path(document, version).open(encoding="utf-8") as handle:
        schema: dict[str, Any] = json.load(handle)
    return schema
