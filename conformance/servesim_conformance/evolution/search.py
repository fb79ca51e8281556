"""Looking for a counterexample: a document one schema accepts and the other rejects.

The search is Hypothesis's ``find``: it draws candidate documents (``strategies.documents``) and
keeps the first that satisfies the condition; ``reduce`` then cuts it down (Hypothesis's own
shrinker is slow on documents the size of a report), so the counterexample shown in a review is
small. The search is derandomized and uses no example database, so the same two schemas always
give the same counterexample, on any machine.

This module imports Hypothesis; import it only when a search is needed, so that commands that
never search (``servesim replay``) do not pay for it.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.errors import NoSuchExample, Unsatisfiable

from servesim_conformance.evolution.model import Direction, Witness
from servesim_conformance.evolution.oracle import Oracle, explains
from servesim_conformance.evolution.reduce import in_schema_order, reduce_document
from servesim_conformance.evolution.strategies import documents


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        database=None,
        derandomize=True,
        deadline=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )


def find_witness(
    direction: Direction,
    accepting: Oracle,
    rejecting: Oracle,
    *,
    examples: int,
    names: tuple[str, ...] = (),
    constants: tuple[Any, ...] = (),
    focus: str | None = None,
    keys: tuple[str, ...] | None = None,
) -> Witness | None:
    """A document ``accepting`` accepts and ``rejecting`` rejects, or None after ``examples``.

    With ``keys`` the rejection must be one those blame keys explain (so the witness shows the
    change they belong to, not another); with ``focus`` candidates always reach that pointer.
    ``names`` and ``constants`` come from both schemas (see ``strategies.documents``).
    """
    if examples <= 0:
        return None
    strategy = documents(
        accepting.schema,
        focus=focus,
        names=names,
        constants=constants,
        other=rejecting.schema,
    )

    def shows_a_break(document: Any) -> bool:
        if not accepting.accepts(document):
            return False
        rejections = rejecting.rejections(document)
        if keys is None:
            return bool(rejections)
        return any(explains(keys, rejection) for rejection in rejections)

    try:
        found = find(strategy, shows_a_break, settings=_settings(examples))
    except (NoSuchExample, Unsatisfiable):
        return None
    document = in_schema_order(reduce_document(found, shows_a_break), accepting.schema)
    return Witness(
        direction=direction, document=document, rejections=rejecting.rejections(document)
    )
