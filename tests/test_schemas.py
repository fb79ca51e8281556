"""R2, R3: the schemas themselves are well-formed contracts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings

from servesim.contract.schemas import SUPPORTED_VERSIONS, schema_path
from servesim_conformance.strategies import timing_profiles
from tests.helpers import REPO, as_report_5_0

#: The working schema of every major (R34): v1 holds every kind, v2 the report.
SCHEMA_FILES = sorted((REPO / "schemas").glob("v*/*.schema.json"))


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


def test_one_working_schema_per_document_kind_and_major() -> None:
    working = {(path.parent.name, path.name) for path in SCHEMA_FILES}
    assert working == {
        (f"v{version.split('.')[0]}", schema_path(kind, version).name)
        for kind, versions in SUPPORTED_VERSIONS.items()
        for version in versions
    }


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda path: path.name)
def test_r3_schema_is_valid_draft_2020_12_with_id_title_description(path: Path) -> None:
    schema = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].startswith(f"urn:servesim:schema:{path.parent.name}:")
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
    kind = properties["document"]["const"]
    version = properties["schema_version"]
    read = version["enum"] if "enum" in version else [version["const"]]
    major = path.parent.name.removeprefix("v")
    # R34: the working schema of a major reads every minor of that major the reference reads
    assert read == [each for each in SUPPORTED_VERSIONS[kind] if each.split(".")[0] == major]


@settings(max_examples=100)
@given(timing_profiles())
def test_r35_every_timing_profile_1_0_is_a_timing_profile_1_1(profile: dict[str, Any]) -> None:
    """The reviewer's decision for timing profile 1.1 (schemas/reviews/): backward compatible.

    ``servesim schema review`` leaves the verdict undecided (the kinds are chosen by if/then),
    so the decision rests on this: any 1.0 profile, relabelled, is valid under 1.1.
    """
    released = json.loads(
        (REPO / "schemas" / "released" / "1.0" / "timing-profile.schema.json").read_text()
    )
    jsonschema.validate(profile, released)
    schema = json.loads(schema_path("timing_profile", "1.1").read_text(encoding="utf-8"))
    jsonschema.validate({**profile, "schema_version": "1.1"}, schema)


def test_r63_r64_report_5_0_takes_rational_tpot_but_integer_itl_and_optional_goodput() -> None:
    """R63: tpot_us's min, max and percentiles are R24 of exact rationals, so non-integers,
    while R27's statistics (itl_us) stay integers; slo_met and goodput are there only with slo,
    and a cut-off request's arrival_us may be null (R62)."""
    path = REPO / "golden" / "valid" / "running-order-after-completion" / "expected-report.json"
    report = as_report_5_0(json.loads(path.read_bytes()))
    validator = jsonschema.Draft202012Validator(
        json.loads(schema_path("report", "5.0").read_text())
    )
    validator.validate(report)
    assert report["summary"]["tpot_us"]["min"] == 3610 / 3
    assert "goodput" not in report["summary"]
    assert all("slo_met" not in request for request in report["requests"])
    fractional_itl = json.loads(json.dumps(report))
    fractional_itl["summary"]["itl_us"]["min"] = 3610 / 3
    assert not validator.is_valid(fractional_itl)
    with_slo = json.loads(json.dumps(report))
    with_slo["summary"]["goodput"] = {
        "requests": 1,
        "output_tokens": 3,
        "request_throughput_per_s": 0.5,
        "output_token_throughput_per_s": None,
    }
    for request in with_slo["requests"]:
        request["slo_met"] = False
    cut = with_slo["requests"][3]
    cut.update(outcome="cut_off", arrival_us=None, worker=None, session="chat")
    validator.validate(with_slo)
    with_slo["requests"][0]["outcome"] = "timed_out"
    assert not validator.is_valid(with_slo)
