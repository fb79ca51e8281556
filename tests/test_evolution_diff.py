"""``servesim schema diff``: verdicts over a table of known changes, and what backs them.

Each row of ``KNOWN_CHANGES`` is one edit of a small closed schema, with the verdict expected in
each direction, from the checklist in the conformance anchors (5.4): BACKWARD asks whether new
readers accept every old document, FORWARD whether old readers accept every new one. A BREAKING
verdict must come with a counterexample, which is checked here with a plain Draft 2020-12
validator, not with the engine's own; a COMPATIBLE verdict is put to the test by generating
documents (``test_compatible_verdict_is_never_contradicted``).
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from servesim_conformance.evolution.compare import compare
from servesim_conformance.evolution.diff import diff_schemas
from servesim_conformance.evolution.model import Comparison, Direction, Effect, Verdict
from servesim_conformance.evolution.strategies import documents
from tests.evolution_fixtures import SCENARIO_1_4, SCENARIO_2_0, load
from tests.helpers import REPO

C, B, U = Verdict.COMPATIBLE, Verdict.BREAKING, Verdict.UNDECIDED

#: The schema every row edits: closed at the top, with one open object (``extra``), a
#: nullable string, an array, a condition and a definition.
BASE: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "thing, version 1.0",
    "type": "object",
    "required": ["document", "schema_version", "name", "size", "mode"],
    "additionalProperties": False,
    "properties": {
        "document": {"const": "thing"},
        "schema_version": {"const": "1.0"},
        "name": {"description": "A name.", "type": "string", "pattern": "^[a-z]{1,8}$"},
        "size": {"type": "integer", "minimum": 1, "maximum": 100},
        "mode": {"enum": ["fast", "slow"]},
        "note": {"type": ["string", "null"], "maxLength": 20},
        "tags": {
            "type": "array",
            "items": {"type": "string", "maxLength": 5, "not": {"const": "x"}},
            "maxItems": 3,
        },
        "extra": {"type": "object", "properties": {"k": {"type": "integer"}}},
        "limits": {"$ref": "#/$defs/limits"},
        "code": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
    },
    "if": {"properties": {"mode": {"const": "fast"}}, "required": ["mode"]},
    "then": {"properties": {"size": {"maximum": 50}}},
    "$defs": {
        "limits": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"low": {"type": "integer", "minimum": 0}},
        },
        "unused": {"type": "integer", "maximum": 5},
    },
}

Edit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Known:
    """One known change: the edit, the verdicts expected and the change kinds expected."""

    name: str
    edit: Edit
    backward: Verdict
    forward: Verdict
    kinds: frozenset[str]


def _props(schema: dict[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = schema["properties"]
    return properties


def _rename_name(schema: dict[str, Any]) -> None:
    _props(schema)["label"] = _props(schema).pop("name")
    schema["required"] = [("label" if item == "name" else item) for item in schema["required"]]


def _set(path: str, value: Any) -> Edit:
    """An edit that sets the member at ``path`` (keys separated by '.')."""

    def edit(schema: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = schema
        for key in parents:
            node = node[key]
        node[last] = value

    return edit


def _delete(path: str) -> Edit:
    def edit(schema: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = schema
        for key in parents:
            node = node[key]
        del node[last]

    return edit


def _both(*edits: Edit) -> Edit:
    def edit(schema: dict[str, Any]) -> None:
        for each in edits:
            each(schema)

    return edit


KNOWN_CHANGES = [
    Known(
        "description only",
        _set("properties.name.description", "The thing's name."),
        C,
        C,
        frozenset({"annotation_changed"}),
    ),
    Known(
        "version bump only",
        _both(_set("properties.schema_version.const", "1.1"), _set("title", "thing, 1.1")),
        C,
        C,
        frozenset({"version_changed", "annotation_changed"}),
    ),
    Known(
        "optional property added to a closed model",
        _set("properties.colour", {"type": "string"}),
        C,
        B,
        frozenset({"property_added"}),
    ),
    Known(
        "optional property added to an open model",
        _set("properties.extra.properties.v", {"type": "integer"}),
        B,
        C,
        frozenset({"property_added"}),
    ),
    Known(
        "required property added to a closed model",
        _both(
            _set("properties.colour", {"type": "string"}),
            _set("required", [*BASE["required"], "colour"]),
        ),
        B,
        B,
        frozenset({"property_added", "required_added"}),
    ),
    Known(
        "required added to a declared property of an open model",
        _set("properties.extra.required", ["k"]),
        B,
        C,
        frozenset({"required_added"}),
    ),
    Known(
        "required made optional",
        _set("required", ["document", "schema_version", "name", "mode"]),
        C,
        B,
        frozenset({"required_removed"}),
    ),
    Known(
        "optional property removed from a closed model",
        _delete("properties.note"),
        B,
        C,
        frozenset({"property_removed"}),
    ),
    Known(
        "property removed from an open model",
        _delete("properties.extra.properties.k"),
        C,
        B,
        frozenset({"property_removed"}),
    ),
    Known(
        "property renamed",
        _rename_name,
        B,
        B,
        frozenset({"property_renamed"}),
    ),
    Known(
        "enum narrowed", _set("properties.mode.enum", ["fast"]), B, C, frozenset({"enum_narrowed"})
    ),
    Known(
        "enum extended",
        _set("properties.mode.enum", ["fast", "slow", "idle"]),
        C,
        B,
        frozenset({"enum_extended"}),
    ),
    Known(
        "type widened", _set("properties.size.type", "number"), C, B, frozenset({"type_widened"})
    ),
    Known(
        "type narrowed (null no longer allowed)",
        _set("properties.note.type", "string"),
        B,
        C,
        frozenset({"type_narrowed"}),
    ),
    Known(
        "bound loosened",
        _set("properties.size.maximum", 1000),
        C,
        B,
        frozenset({"bound_loosened"}),
    ),
    Known(
        "bound tightened",
        _set("properties.size.minimum", 10),
        B,
        C,
        frozenset({"bound_tightened"}),
    ),
    Known("bound removed", _delete("properties.size.maximum"), C, B, frozenset({"bound_removed"})),
    Known(
        "bound added (multipleOf)",
        _set("properties.size.multipleOf", 2),
        B,
        C,
        frozenset({"bound_added"}),
    ),
    Known(
        "inclusive bound rewritten as the same exclusive bound on integers",
        _both(_delete("properties.size.maximum"), _set("properties.size.exclusiveMaximum", 101)),
        C,
        C,
        frozenset(),
    ),
    Known(
        "bound on a type the value never has",
        _set("properties.size.maxLength", 3),
        C,
        C,
        frozenset({"bound_added"}),
    ),
    Known(
        "array items tightened",
        _set("properties.tags.items.maxLength", 3),
        B,
        C,
        frozenset({"bound_tightened"}),
    ),
    Known(
        "uniqueItems added",
        _set("properties.tags.uniqueItems", True),
        B,
        C,
        frozenset({"unique_items_added"}),
    ),
    Known(
        "content model closed",
        _set("properties.extra.additionalProperties", False),
        B,
        C,
        frozenset({"content_model_closed"}),
    ),
    Known(
        "content model opened",
        _set("additionalProperties", True),
        C,
        B,
        frozenset({"content_model_opened"}),
    ),
    Known(
        "pattern removed", _delete("properties.name.pattern"), C, B, frozenset({"pattern_removed"})
    ),
    Known(
        # No rule compares two regular expressions: the old language is inside the new one, so
        # no document can show a backward break, and the honest verdict there is "undecided".
        "pattern widened",
        _set("properties.name.pattern", "^[a-z0-9]{1,8}$"),
        U,
        B,
        frozenset({"pattern_changed"}),
    ),
    Known(
        "branch of a condition tightened",
        _set("then.properties.size.maximum", 20),
        B,
        C,
        frozenset({"bound_tightened"}),
    ),
    Known(
        "condition changed",
        _set("if.properties.mode.const", "slow"),
        B,
        B,
        frozenset({"condition_changed"}),
    ),
    Known(
        "referenced definition tightened",
        _set("$defs.limits.properties.low.minimum", 5),
        B,
        C,
        frozenset({"bound_tightened"}),
    ),
    Known(
        "unreferenced definition changed",
        _set("$defs.unused.maximum", 1),
        C,
        C,
        frozenset({"bound_tightened"}),
    ),
    Known(
        "negated subschema widened (under not, widening restricts)",
        _set("properties.tags.items.not", {"enum": ["x", "y"]}),
        B,
        C,
        frozenset({"enum_extended"}),
    ),
    Known(
        "negation added",
        _set("properties.mode.not", {"const": "slow"}),
        B,
        C,
        frozenset({"not_added"}),
    ),
    Known(
        "anyOf branch added",
        _set(
            "properties.code.anyOf",
            [{"type": "string", "maxLength": 3}, {"type": "null"}, {"type": "integer"}],
        ),
        C,
        B,
        frozenset({"branch_added"}),
    ),
    Known(
        "anyOf added where there was none",
        _set("properties.note.anyOf", [{"type": "null"}, {"minLength": 2}]),
        B,
        C,
        frozenset({"combinator_added"}),
    ),
]


def edited(known: Known) -> dict[str, Any]:
    """The base schema with the row's edit applied (the base is never touched)."""
    schema = copy.deepcopy(BASE)
    known.edit(schema)
    return schema


def _relabelled(document: Any, schema: dict[str, Any]) -> Any:
    """``document`` with the version ``schema`` reads, as the engine compares documents."""
    member = schema["properties"].get("schema_version", {})
    versions = [member["const"]] if "const" in member else member.get("enum", [])
    if isinstance(document, dict) and versions and document.get("schema_version") not in versions:
        return {**document, "schema_version": versions[-1]}
    return document


def _plain_valid(schema: dict[str, Any], document: Any) -> bool:
    """An independent judge: the stock Draft 2020-12 validator (R1's integers never matter
    here: generated integers are Python ints)."""
    return bool(jsonschema.Draft202012Validator(schema).is_valid(document))


def _check_counterexamples(old: dict[str, Any], new: dict[str, Any], result: Comparison) -> None:
    """Every BREAKING verdict carries a document valid on one side and invalid on the other."""
    for direction in Direction:
        verdict = result.result(direction)
        accepting, rejecting = (old, new) if direction is Direction.BACKWARD else (new, old)
        if verdict.verdict is Verdict.BREAKING:
            witness = verdict.witness
            assert witness is not None, f"{direction.value}: breaking without a counterexample"
            assert _plain_valid(accepting, witness.document)
            assert not _plain_valid(rejecting, _relabelled(witness.document, rejecting))
            assert witness.rejections


@pytest.mark.parametrize("known", KNOWN_CHANGES, ids=lambda known: known.name)
def test_known_change_gets_its_verdict_in_each_direction(known: Known) -> None:
    new = edited(known)
    result = compare(BASE, new, examples=200)
    assert (result.backward.verdict, result.forward.verdict) == (known.backward, known.forward), (
        [
            (change.kind, change.pointer, change.backward, change.forward)
            for change in result.changes
        ],
        result.backward.reasons,
        result.forward.reasons,
    )
    assert known.kinds <= {change.kind for change in result.changes}
    _check_counterexamples(BASE, new, result)


@pytest.mark.parametrize("known", KNOWN_CHANGES, ids=lambda known: known.name)
def test_reverse_edit_swaps_the_directions(known: Known) -> None:
    """Undoing a change swaps what it does: BACKWARD of the edit is FORWARD of its undo."""
    new = edited(known)
    undo = compare(new, BASE, examples=200)
    assert (undo.backward.verdict, undo.forward.verdict) == (known.forward, known.backward)
    _check_counterexamples(new, BASE, undo)


COMPATIBLE_CASES = [
    (known.name, direction)
    for known in KNOWN_CHANGES
    for direction in Direction
    if (known.backward if direction is Direction.BACKWARD else known.forward) is C
]


@pytest.mark.parametrize(("name", "direction"), COMPATIBLE_CASES, ids=str)
@settings(
    max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(data=st.data())
def test_compatible_verdict_is_never_contradicted(
    name: str, direction: Direction, data: st.DataObject
) -> None:
    """Documents drawn from the accepting schema are all read by the other (after relabelling)."""
    known = next(known for known in KNOWN_CHANGES if known.name == name)
    old, new = BASE, edited(known)
    accepting, rejecting = (old, new) if direction is Direction.BACKWARD else (new, old)
    document = data.draw(documents(accepting, names=("k", "v", "colour", "label", "note")))
    assume(_plain_valid(accepting, document))
    assert _plain_valid(rejecting, _relabelled(document, rejecting))


# --- the deliberate evolution of the scenario (tests/evolution_fixtures) ----------------------

SCENARIO_1_3 = json.loads(
    (REPO / "schemas" / "released" / "1.3" / "scenario.schema.json").read_text("utf-8")
)


def test_minor_version_1_4_is_backward_compatible_and_shows_the_forward_break() -> None:
    result = compare(SCENARIO_1_3, load(SCENARIO_1_4))
    assert result.matters == (Direction.BACKWARD,)
    assert result.verdict() is Verdict.COMPATIBLE
    assert result.forward.verdict is Verdict.BREAKING
    witness = result.forward.witness
    assert witness is not None
    assert "label" in witness.document["fleet"]
    assert {change.kind for change in result.changes} == {
        "annotation_changed",
        "version_changed",
        "property_added",
    }
    _check_counterexamples(SCENARIO_1_3, load(SCENARIO_1_4), result)


def test_major_version_2_0_is_classified_change_by_change() -> None:
    old, new = load(SCENARIO_1_4), load(SCENARIO_2_0)
    result = compare(old, new)
    by_pointer = {(change.pointer, change.kind): change for change in result.changes}
    prefill = "/properties/scheduler/properties/prefill"
    renamed = by_pointer[(f"{prefill}/properties/max_chunk_tokens", "property_renamed")]
    assert (renamed.backward, renamed.forward) == (Effect.BREAKS, Effect.BREAKS)
    loosened = by_pointer[
        ("/properties/scheduler/properties/max_num_seqs/maximum", "bound_loosened")
    ]
    assert (loosened.backward, loosened.forward) == (Effect.SAFE, Effect.BREAKS)
    assert ("/$id", "id_changed") in by_pointer
    assert result.verdict() is Verdict.BREAKING
    assert result.forward.verdict is Verdict.BREAKING
    witness = result.backward.witness
    assert witness is not None
    assert witness.document["scheduler"]["prefill"]["mode"] == "chunked"
    _check_counterexamples(old, new, result)


@settings(max_examples=100)
@given(data=st.data())
def test_scenario_1_4_reads_every_scenario_the_conformance_suite_generates(
    data: st.DataObject,
) -> None:
    """The compatible verdict of 1.3 -> 1.4 against an independent generator of scenarios."""
    from servesim_conformance.strategies import scenarios

    document = data.draw(scenarios())
    assert _plain_valid(SCENARIO_1_3, document)
    assert _plain_valid(load(SCENARIO_1_4), document)


def test_real_schemas_compared_with_themselves_are_compatible_without_changes() -> None:
    for path in sorted((REPO / "schemas" / "v1").glob("*.schema.json")):
        schema = json.loads(path.read_text("utf-8"))
        result = compare(schema, copy.deepcopy(schema))
        assert result.changes == ()
        assert result.verdict((Direction.BACKWARD, Direction.FORWARD)) is Verdict.COMPATIBLE


def test_report_change_is_judged_forward_because_implementations_write_reports() -> None:
    old = json.loads((REPO / "schemas" / "v1" / "report.schema.json").read_text("utf-8"))
    new = copy.deepcopy(old)
    new["$defs"]["statistics"]["properties"]["count"]["maximum"] = 10
    result = compare(old, new)
    assert result.matters == (Direction.FORWARD,)
    assert result.verdict() is Verdict.COMPATIBLE  # fewer reports are valid: old readers cope
    assert result.backward.verdict is Verdict.BREAKING
    witness = result.backward.witness
    assert witness is not None
    counts = [
        witness.document["summary"][name]["count"]
        for name in ("queue_us", "ttft_us", "itl_us", "e2e_us")
    ]
    assert max(counts) == 11, "the reduced counterexample sits just across the new bound"


def test_search_budget_zero_never_claims_a_break() -> None:
    result = compare(BASE, edited(KNOWN_CHANGES[2]), examples=0)
    assert result.forward.verdict is Verdict.UNDECIDED
    assert result.backward.verdict is Verdict.COMPATIBLE


def test_diff_locates_changes_by_json_pointer_with_escaping() -> None:
    old = {"type": "object", "properties": {"a/b~c": {"type": "integer"}}}
    new = {"type": "object", "properties": {"a/b~c": {"type": "integer", "maximum": 3}}}
    (change,) = diff_schemas(old, new)
    assert change.pointer == "/properties/a~1b~0c/maximum"
    assert change.kind == "bound_added"


@pytest.mark.parametrize("side", ["old", "new"])
def test_a_recursive_ref_on_one_side_only_ends_as_an_undecided_change(side: str) -> None:
    """Following ``#`` from one side only used to recurse without end (RecursionError)."""
    plain = {"type": "object", "properties": {"p": {}}}
    looped = {"type": "object", "properties": {"p": {"$ref": "#"}}}
    old, new = (looped, plain) if side == "old" else (plain, looped)
    changes = diff_schemas(old, new)
    assert changes, "a $ref appearing or going is a change"
    assert all(change.pointer.startswith("/properties/p") for change in changes)


# --- a second opinion: jsoncompat ----------------------------------------------------------

#: The base without what jsoncompat 0.3 cannot judge or judges unsoundly: it calls a schema
#: with ``if``/``then`` or ``not`` incompatible with anything, and it ignores ``pattern`` (it
#: calls an added pattern compatible). Its ``$id``-free, 64-bit-bounded input suits this table,
#: not servesim's schemas (it rejects their URN ``$id`` and their 2^64-1 bounds).
PLAIN = copy.deepcopy(BASE)
del PLAIN["if"], PLAIN["then"]
del PLAIN["properties"]["name"]["pattern"], PLAIN["properties"]["tags"]["items"]["not"]


def _plain_rows() -> list[Known]:
    rows = []
    for known in KNOWN_CHANGES:
        try:
            known.edit(copy.deepcopy(PLAIN))
        except KeyError:
            continue
        if "pattern" not in known.name and "version" not in known.name:
            rows.append(known)
    return rows


@pytest.mark.parametrize("known", _plain_rows(), ids=lambda known: known.name)
def test_jsoncompat_agrees_where_either_side_has_a_proof(known: Known) -> None:
    """A shown break refutes jsoncompat's "compatible", and its "compatible" (a proof by its
    own rules) is never our "breaking" nor our "undecided" on this table."""
    jsoncompat = pytest.importorskip("jsoncompat")
    new = copy.deepcopy(PLAIN)
    known.edit(new)
    ours = compare(PLAIN, new, examples=200)
    for direction, role in (
        (Direction.BACKWARD, "deserializer"),
        (Direction.FORWARD, "serializer"),
    ):
        theirs = jsoncompat.check_compat(json.dumps(PLAIN), json.dumps(new), role)
        verdict = ours.result(direction).verdict
        if verdict is Verdict.BREAKING:
            assert theirs is False, direction
        if theirs:
            assert verdict is Verdict.COMPATIBLE, direction


def test_without_hypothesis_the_rules_still_answer_but_nothing_is_shown_breaking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "servesim_conformance.evolution.search", None)
    result = compare(BASE, edited(KNOWN_CHANGES[2]))
    assert result.backward.verdict is Verdict.COMPATIBLE
    assert result.forward.verdict is Verdict.UNDECIDED
    assert result.forward.reasons[0].startswith("Hypothesis is not installed")


def test_same_schemas_give_the_same_counterexamples_every_time() -> None:
    """A review pasted into a pull request must not change when it is run again."""
    from servesim_conformance.evolution.render import comparison_json

    old, new = load(SCENARIO_1_4), load(SCENARIO_2_0)
    assert comparison_json(compare(old, new)) == comparison_json(compare(old, new))
