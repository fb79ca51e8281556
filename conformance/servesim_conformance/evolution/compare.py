"""Comparing two schemas: the diff, then a verdict per direction that documents back up.

The rules (``diff``) say which changes may break which readers; a verdict of BREAKING is only
given with a generated counterexample (``search``), and COMPATIBLE only when every change is
safe by rule. Between the two is UNDECIDED. As a guard against a rule that is wrong, a search
is also run in a direction the rules call compatible; a counterexample found there overrides the
rules (and is a bug in the rule table worth reporting).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jsonschema

from servesim_conformance.evolution.diff import diff_schemas
from servesim_conformance.evolution.keywords import interesting_values, property_names
from servesim_conformance.evolution.model import (
    DEFAULT_EXAMPLES,
    Change,
    Comparison,
    Direction,
    DirectionResult,
    Effect,
    InvalidSchema,
    Verdict,
    Witness,
)
from servesim_conformance.evolution.oracle import Oracle, latest_version, version_values
from servesim_conformance.evolution.roles import Role, kind_of, role_of


def _version(schema: Any) -> str:
    """The latest version a schema reads: the one its documents are written against."""
    return latest_version(version_values(schema))


def _judge(
    direction: Direction,
    changes: list[Change],
    oracles: dict[str, Oracle],
    hints: dict[str, Any],
    examples: int,
    witnesses: dict[int, dict[Direction, Witness]],
) -> DirectionResult:
    """The verdict in one direction, searching once per suspect change, then once overall.

    ``hints`` are the property names and constants of both schemas, for the generator.
    """
    accepting, rejecting = oracles[direction.accepting], oracles[direction.rejecting]
    suspects = [
        (index, change)
        for index, change in enumerate(changes)
        if change.effect(direction) is not Effect.SAFE
    ]
    search_missing = ""
    if examples > 0:
        try:
            from servesim_conformance.evolution.search import find_witness
        except ImportError:  # Hypothesis is an optional dependency of servesim
            search_missing = (
                "Hypothesis is not installed, so no counterexample was searched for "
                "(pip install 'servesim[evolution]')"
            )
            examples = 0
    if examples > 0:
        search = partial(find_witness, direction, accepting, rejecting, **hints)
        for index, change in suspects:
            witness = search(examples=examples, focus=change.pointer, keys=change.blame_keys)
            if witness is not None:
                witnesses.setdefault(index, {})[direction] = witness
        shown = [
            witnesses[index][direction]
            for index, _ in suspects
            if direction in witnesses.get(index, {})
        ]
        if shown:
            return DirectionResult(direction, Verdict.BREAKING, witness=shown[0])
        # The guard search: cheaper where the rules suspect nothing, and skipped when only
        # annotations changed (the two schemas then validate alike, keyword by keyword).
        budget = examples if suspects else examples // 4
        if any(not change.is_annotation for change in changes):
            witness = search(examples=budget)
            if witness is not None:
                reason = (
                    "a generated document breaks although no change was expected to: a rule of "
                    "the diff is wrong, please report it"
                    if not suspects
                    else "a generated document breaks; no single change explains it alone"
                )
                return DirectionResult(
                    direction, Verdict.BREAKING, witness=witness, reasons=(reason,)
                )
    if not suspects:
        return DirectionResult(direction, Verdict.COMPATIBLE)
    reasons = ((search_missing,) if search_missing else ()) + tuple(
        f"{change.kind} at {change.pointer}: "
        + (
            "no rule decides it"
            if change.effect(direction) is Effect.UNKNOWN
            else "the rule expects a break, but no generated document showed one"
        )
        for _, change in suspects
    )
    return DirectionResult(direction, Verdict.UNDECIDED, reasons=reasons)


def compare(
    old: Any,
    new: Any,
    *,
    name: str | None = None,
    role: Role | None = None,
    examples: int = DEFAULT_EXAMPLES,
) -> Comparison:
    """Compare schema ``old`` with schema ``new``: changes, verdicts and counterexamples.

    ``name`` defaults to the document kind the schemas describe, and ``role`` to that kind's
    (``roles.ROLES``); ``examples`` bounds each search (0: no search, so no verdict can be
    BREAKING and every suspect change leaves its direction UNDECIDED). Raises
    ``InvalidSchema`` when either is not a valid Draft 2020-12 schema.
    """
    for label, schema in (("old", old), ("new", new)):
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as error:
            raise InvalidSchema(
                f"the {label} schema is not valid Draft 2020-12: at {error.json_path}: "
                f"{error.message}"
            ) from None
    kind = kind_of(new) or kind_of(old)
    chosen = role or role_of(kind)
    changes = diff_schemas(old, new)
    oracles = {"old": Oracle(old), "new": Oracle(new)}
    hints = {"names": property_names(old, new), "constants": interesting_values(old, new)}
    witnesses: dict[int, dict[Direction, Witness]] = {}
    results = {
        direction: _judge(direction, changes, oracles, hints, examples, witnesses)
        for direction in Direction
    }
    return Comparison(
        name=name or kind or "schema",
        old_version=_version(old),
        new_version=_version(new),
        changes=tuple(changes),
        backward=results[Direction.BACKWARD],
        forward=results[Direction.FORWARD],
        matters=chosen.matters,
        role=chosen.summary,
        witnesses=witnesses,
    )
