"""Reading input documents: strict JSON (R1), the header (R2), the schema (R3), the semantics (R4).

This module is the pipeline; each step has its own module, named for its rule:
``json_reading`` (R1), ``header`` (R2), ``schema_check`` (R3), and each kind's own checks with
its builder (``scenario``, ``workload``, ``timing_profile``; ``pair`` for a scenario and a
workload together). Every check returns problems as data (``InputProblem``) so that one run
reports everything wrong with a file at once, in a stable order, instead of the first thing a
parser tripped on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servesim.contract import validity
from servesim.contract.errors import InputProblem, raise_if_any
from servesim.contract.header import check_header, needs_newer_minor
from servesim.contract.json_reading import ParsedJson, read_input_bytes, read_json
from servesim.contract.scenario import scenario_problems
from servesim.contract.schema_check import schema_problems
from servesim.contract.timing_profile import timing_profile_problems
from servesim.contract.workload import workload_problems


@dataclass(frozen=True)
class Document:
    """A document that passed R1 to R4: its kind, version, exact bytes and parsed value."""

    file: str
    kind: str
    version: str
    data: bytes
    value: dict[str, Any]


#: Document kind -> its R4 checks on a schema-valid document (a report has none).
_SEMANTIC_CHECKS: dict[str, Callable[[dict[str, Any], str], list[InputProblem]]] = {
    "scenario": scenario_problems,
    "workload": workload_problems,
    "timing_profile": timing_profile_problems,
}


def semantic_problems(value: dict[str, Any], kind: str, file: str) -> list[InputProblem]:
    """R4: constraints a JSON Schema cannot state, on a schema-valid document."""
    check = _SEMANTIC_CHECKS.get(kind)
    return [] if check is None else check(value, file)


def load_document(data: bytes, file: str, expected_kind: str | None = None) -> Document:
    """Parse and check one input document's bytes (R1 to R4), or raise ``InvalidInput``.

    ``file`` names the document in messages; ``expected_kind``, when given, is the only kind
    accepted (R2).
    """
    return check_document(read_json(data, file), data, file, expected_kind)


def check_document(
    parsed: ParsedJson, data: bytes, file: str, expected_kind: str | None = None
) -> Document:
    """R2 to R4 for the document ``read_json`` made of ``data``: ``load_document`` for a
    caller that has parsed the bytes already (``servesim migrate``), so they are read once.

    A valid document is recognised by ``servesim.contract.validity`` (fast); only one it does
    not accept is explained by ``schema_problems`` (``jsonschema``), so the messages are the
    same either way.
    """
    value = parsed.value
    kind, version = check_header(value, file, expected_kind)
    if not (parsed.plain_numbers and validity.is_valid(value, kind, version)):
        raise_if_any(needs_newer_minor(value, kind, version, file) or [])
        raise_if_any(schema_problems(value, kind, version, file))
    raise_if_any(semantic_problems(value, kind, file))
    return Document(file=file, kind=kind, version=version, data=data, value=value)


def read_document(path: str | Path, expected_kind: str | None = None) -> Document:
    """Read one input file and check it with ``load_document``."""
    return load_document(read_input_bytes(path), str(path), expected_kind)
