"""R3: the fast validator (jsonschema-rs) decides as jsonschema does wherever it is asked.

``servesim.contract.validity`` only says whether a document is valid; ``jsonschema`` explains
an invalid one. A fast "valid" for a document jsonschema rejects would let a bad input through
without a message, so the agreement is checked on every golden document, on documents drawn from the
schemas, and on golden documents with one member changed to a value where the two validators'
rules differ or are easy to get wrong (integral floats, booleans, 64-bit bounds, ECMA-262 "$").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.contract import validity
from servesim.contract.documents import load_document
from servesim.contract.errors import InvalidInput
from servesim.contract.header import check_header
from servesim.contract.json_reading import has_long_digit_run, plain_numbers, read_json
from servesim.contract.schema_check import schema_problems
from servesim.contract.schemas import SUPPORTED_VERSIONS, load_schema
from servesim_conformance.evolution.strategies import documents
from tests.helpers import REPO

GOLDEN_FILES = sorted((REPO / "golden").glob("*/*/*.json"))
KINDS = [(kind, version) for kind, versions in SUPPORTED_VERSIONS.items() for version in versions]


def _decisions(data: bytes, kind: str, version: str) -> tuple[bool | None, bool]:
    """(the fast decision, None where it is not asked; jsonschema's) for a document's bytes."""
    parsed = read_json(data, "doc.json")
    explained_valid = not schema_problems(parsed.value, kind, version, "doc.json")
    if not parsed.plain_numbers:
        return None, explained_valid
    return validity.is_valid(parsed.value, kind, version), explained_valid


def _header(data: bytes) -> tuple[str, str] | None:
    """The kind and version of a document that passes R1 and R2; None for one rejected there."""
    try:
        return check_header(read_json(data, "doc.json").value, "doc.json", None)
    except InvalidInput:
        return None


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda path: "/".join(path.parts[-3:]))
def test_fast_decision_agrees_with_jsonschema_on_every_golden_document(path: Path) -> None:
    data = path.read_bytes()
    header = _header(data)
    if header is None:  # R1 or R2 rejects it before any schema is asked
        return
    fast, explained = _decisions(data, *header)
    assert fast in (None, explained)


@pytest.mark.parametrize(("kind", "version"), KINDS)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fast_decision_agrees_with_jsonschema_on_drawn_documents(
    kind: str, version: str, data: st.DataObject
) -> None:
    document = data.draw(documents(load_schema(kind, version), max_size=3))
    text = json.dumps(document).encode()
    fast, explained = _decisions(text, kind, version)
    assert fast in (None, explained)


#: Values where JSON Schema, R1 and Python differ, or bounds are easy to get wrong.
AWKWARD = [
    1.0,
    0.0,
    -0.0,
    1e3,
    1.5,
    1e300,
    True,
    False,
    None,
    -1,
    0,
    2**53 - 1,
    2**53,
    2**64 - 1,
    2**64,
    -(2**63),
    "",
    "x",
    "x" * 128,
    "x" * 129,
    "abc\n",
    "\nabc",
    "a b",
    "é",
    "0" * 64,
    "0" * 64 + "\n",
    "F" * 64,
    [],
    {},
    ["a"],
    {"id": "a"},
]


def _pointers(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_pointers(item, (*path, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):
            found.extend(_pointers(item, (*path, index)))
    return found


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replaced(value[path[0]], path[1:], new)
    return copy


VALID_INPUTS = sorted(
    path for path in (REPO / "golden" / "valid").glob("*/*.json") if _header(path.read_bytes())
)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fast_decision_agrees_with_jsonschema_on_golden_documents_with_one_member_changed(
    data: st.DataObject,
) -> None:
    path = data.draw(st.sampled_from(VALID_INPUTS))
    original = json.loads(path.read_bytes())
    where = data.draw(st.sampled_from(_pointers(original)[1:]))
    change = data.draw(st.sampled_from(["replace", "remove", "add"]))
    if change == "replace":
        document = _replaced(original, where, data.draw(st.sampled_from(AWKWARD)))
    else:
        parent_path, key = where[:-1], where[-1]
        parent = original
        for part in parent_path:
            parent = parent[part]
        if not isinstance(parent, dict):
            return
        members = dict(parent)
        if change == "remove":
            del members[key]
        else:
            members[data.draw(st.sampled_from(["extra", "seed", "max_chunk_tokens", "shape"]))] = (
                data.draw(st.sampled_from(AWKWARD))
            )
        document = _replaced(original, parent_path, members)
    header = _header(json.dumps(document).encode())
    if header is None:
        return
    fast, explained = _decisions(json.dumps(document).encode(), *header)
    assert fast in (None, explained)


def test_an_integral_float_for_an_integer_is_not_put_to_the_fast_validator() -> None:
    """JSON Schema calls 1.0 an integer, R1 does not: jsonschema decides, with its message."""
    text = b'{"document": "workload", "schema_version": "1.0", "requests": [{"id": "a", '
    text += b'"arrival_us": 0, "prompt_tokens": 1.0, "max_output_tokens": 1}]}'
    parsed = read_json(text, "w.json")
    assert not parsed.plain_numbers
    assert validity.is_valid(parsed.value, "workload", "1.0")  # what the fast one would say
    with pytest.raises(InvalidInput) as error:
        load_document(text, "w.json")
    assert [str(problem) for problem in error.value.problems] == [
        "w.json: at /requests/0/prompt_tokens: expected integer, found 1.0"
    ]


def test_a_long_integer_literal_keeps_its_message() -> None:
    text = b'{"document": "workload", "schema_version": "1.0", "requests": [{"id": "a", '
    text += b'"arrival_us": ' + b"9" * 41 + b', "prompt_tokens": 1, "max_output_tokens": 1}]}'
    assert not read_json(text, "w.json").plain_numbers
    with pytest.raises(InvalidInput) as error:
        load_document(text, "w.json")
    assert "a 41-digit integer" in str(error.value.problems[0])


def test_long_digit_runs_are_found_from_41_digits() -> None:
    assert not has_long_digit_run(b"[" + b"1" * 40 + b", 2]")
    assert has_long_digit_run(b"[" + b"1" * 41 + b"]")
    assert has_long_digit_run(b'["' + b"9876543210" * 5 + b'"]')  # in a string: harmless


def test_a_valid_document_is_read_without_importing_jsonschema() -> None:
    """The explainer is loaded only for an invalid document (a tenth of a second per run)."""
    path = REPO / "golden" / "valid" / "smoke-one-request" / "workload.json"
    code = (
        "import sys; from servesim.contract.documents import read_document; "
        f"read_document({str(path)!r}); print('jsonschema' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


def test_a_long_digit_run_in_a_string_leaves_the_numbers_plain() -> None:
    """A calibration's digest of zeros is 64 digits in a row: only an integer stand-in, not the
    run, sends a document to jsonschema (which a valid one never needs)."""
    path = REPO / "golden" / "valid" / "smoke-one-request" / "workload.json"
    value = json.loads(path.read_bytes())
    value["requests"][0]["id"] = "0" * 64
    parsed = read_json(json.dumps(value).encode(), "w.json")
    assert parsed.plain_numbers
    assert parsed.value == value


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        ({"a": [1, 2.5, {"b": -3e-7}], "c": None, "d": True}, True),
        ({"a": [1, {"b": 2.0}]}, False),
        ({"a": [float("inf")]}, False),
        ([[[[1e300]]]], False),
    ],
)
def test_plain_numbers_of_a_value_are_those_read_json_notes(value: Any, plain: bool) -> None:
    assert plain_numbers(value) is plain
    text = json.dumps(value).replace("Infinity", "1e400")  # what reads as infinity in R1's JSON
    assert read_json(text.encode(), "x.json").plain_numbers is plain
