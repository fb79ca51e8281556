"""The closed list of feature tags an implementation may declare, and what each one means to the
harness (SPEC.md R69).

A tag is one of three kinds:

- *baseline*: every implementation has it; declaring it is allowed and changes nothing, and no
  case needs it; except that from harness protocol 4 an implementation has
  ``timing.synthetic_linear`` only if it declares it (``OMISSIBLE_FROM``), so a simulator
  whose timing is not servesim's synthetic model is not given the cases timed by one
  (``case_needs``: a valid case whose profile is ``synthetic_linear`` needs the tag);
- *behavioural*: it changes what a replay does, so a case that needs an undeclared one cannot be
  run and is skipped;
- *additive*: it only adds members to the report, so a case that needs an undeclared one still
  runs, without the feature's argument, and is compared with the expected report as SPEC.md
  writes it when the feature is off (``trace``: R30, the report's ``trace`` is null).

``timing.per_pool`` (R87, harness protocol 5) is behavioural: a case with one timing profile
per pool (a ``timing-profiles/`` folder) passes ``--timing-profile POOL=FILE`` for each, which
an implementation without the feature cannot take.

The list is the describe schema's enum (``schemas/harness/v5/describe.schema.json``); a test
checks the two agree.
"""

from __future__ import annotations

import difflib
import enum
import json
from collections.abc import Callable, Iterable
from typing import Any

from servesim.contract.canonical import canonical_json


class Kind(enum.Enum):
    """How a feature weighs when an implementation does not declare it."""

    BASELINE = "baseline"
    BEHAVIOURAL = "behavioural"
    ADDITIVE = "additive"


#: Every feature tag, with its kind.
FEATURES: dict[str, Kind] = {
    "prefill.chunked": Kind.BEHAVIOURAL,
    "prefill.whole": Kind.BASELINE,
    "routing.random": Kind.BEHAVIOURAL,
    "routing.round_robin": Kind.BASELINE,
    "timing.grid": Kind.BEHAVIOURAL,
    "timing.per_pool": Kind.BEHAVIOURAL,
    "timing.regression": Kind.BEHAVIOURAL,
    "timing.synthetic_linear": Kind.BASELINE,
    "trace": Kind.ADDITIVE,
}


def _without_trace(report: dict[str, Any]) -> None:
    """R30: without ``--trace``, ``trace`` is null, and so is ``host_transfers`` (R140, report
    10.0); R31: nothing else in the report depends on whether the trace was asked for."""
    report["trace"] = None
    if "host_transfers" in report:
        report["host_transfers"] = None


#: For each additive feature, how the expected report loses what the feature adds.
_REMOVERS: dict[str, Callable[[dict[str, Any]], None]] = {"trace": _without_trace}

#: The additive features (``FEATURES``' ``ADDITIVE`` tags, each with its remover).
ADDITIVE: frozenset[str] = frozenset(_REMOVERS)

#: Baseline tags an implementation may leave out, and the harness protocol from which it may:
#: speaking that protocol or a later one, an implementation has the feature only if it declares
#: it, and a case that needs it is skipped otherwise; at an older protocol every implementation
#: has it, declared or not (SPEC.md R38).
OMISSIBLE_FROM: dict[str, int] = {"timing.synthetic_linear": 4}

#: The tag a valid case needs for its timing profile's model kind, where the manifest does not
#: list it: the baseline kind, which older manifests never name (grid and regression cases
#: list theirs, ``timing.grid`` and ``timing.regression``).
_TIMING_KIND_TAGS: dict[str, str] = {"synthetic_linear": "timing.synthetic_linear"}


def available_features(declared: Iterable[str], protocol: int) -> frozenset[str]:
    """The features an implementation has: the ones it declares, and every baseline one it may
    not leave out at its ``protocol`` (``OMISSIBLE_FROM``)."""
    baseline = {
        tag
        for tag, kind in FEATURES.items()
        if kind is Kind.BASELINE and protocol < OMISSIBLE_FROM.get(tag, protocol + 1)
    }
    return frozenset(declared) | baseline


def timing_kind_feature(kind: object) -> str | None:
    """The baseline tag a valid case needs for a timing profile of ``kind``, if any."""
    return _TIMING_KIND_TAGS.get(kind) if isinstance(kind, str) else None


def unknown_features(tags: Iterable[object]) -> list[str]:
    """The tags that are not on the list, each with a suggestion when one is close, in order."""
    messages = []
    for tag in tags:
        if isinstance(tag, str) and tag in FEATURES:
            continue
        text = json.dumps(tag)
        close = difflib.get_close_matches(str(tag), FEATURES, n=1)
        messages.append(f"{text} (did you mean {close[0]}?)" if close else text)
    return messages


def unknown_features_message(tags: Iterable[object], *, where: str) -> str | None:
    """A clear refusal of unknown tags in ``where``, or None when every tag is known."""
    unknown = unknown_features(tags)
    if not unknown:
        return None
    return (
        f"{where} names unknown feature tags: {', '.join(unknown)}; the feature tags are "
        f"{', '.join(FEATURES)} (SPEC.md R69; conformance/README.md, Features)"
    )


def expected_without(expected: bytes, features: Iterable[str]) -> bytes:
    """The canonical expected report (R23) without what the additive ``features`` add."""
    value = json.loads(expected)
    for feature in sorted(features):
        _REMOVERS[feature](value)
    return canonical_json(value)
