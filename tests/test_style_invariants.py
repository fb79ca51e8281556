"""The style invariants (SPEC.md R88 to R95) on hand-derived golden reports; each can fail.

The reports are two golden cases whose every value below was derived by hand before the
reference ran them (their DERIVATION.md): ``sglang-retraction-fewest-output-to-the-tail`` (one
sglang worker, a cache of 24 one-token blocks, C retracted at 6012 and B at 10012) and
``trtllm-reservation-refuses-second-request`` (one trtllm worker, 6 blocks of 4 tokens, peak
held plus reserved 4). Each mutation breaks one thing a rule fixes, and the check for that rule
must then name it; the generated styled inputs keep the reference within every invariant.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from servesim_conformance import style_invariants
from servesim_conformance.properties import reference_report
from servesim_conformance.strategies import styled_input_triples
from servesim_conformance.violations import InvariantViolation
from tests.helpers import REPO

Document = dict[str, Any]
Mutation = Callable[[Document], None]
Check = Callable[[Document, Document], None]

SGLANG = "sglang-retraction-fewest-output-to-the-tail"
TRTLLM = "trtllm-reservation-refuses-second-request"


def case(name: str) -> tuple[Document, Document]:
    """A golden case's scenario and expected report."""
    folder = REPO / "golden" / "valid" / name
    scenario = json.loads((folder / "scenario.json").read_text(encoding="utf-8"))
    report = json.loads((folder / "expected-report.json").read_text(encoding="utf-8"))
    return scenario, report


@pytest.mark.parametrize("name", [SGLANG, TRTLLM])
def test_the_derived_reports_pass_every_style_invariant(name: str) -> None:
    style_invariants.check_style_report(*case(name))


def _trace(index: int, **members: Any) -> Mutation:
    def mutate(report: Document) -> None:
        report["trace"][index].update(members)

    return mutate


def _set(path: tuple[Any, ...], value: Any) -> Mutation:
    def mutate(report: Document) -> None:
        holder = report
        for key in path[:-1]:
            holder = holder[key]
        holder[path[-1]] = value

    return mutate


#: name -> (case, mutation, check, the rule it names).
MUTATIONS: dict[str, tuple[str, Mutation, Check, str]] = {
    "a kind that is not its shape's": (
        SGLANG,
        _trace(0, kind="decode"),
        style_invariants.check_kinds_and_styles,
        "R95",
    ),
    "a worker with another style than its pool's": (
        SGLANG,
        _set(("workers", 0, "style"), "vllm"),
        style_invariants.check_kinds_and_styles,
        "R88",
    ),
    "a pool with another style": (
        TRTLLM,
        _set(("pools", 0, "style"), "sglang"),
        style_invariants.check_kinds_and_styles,
        "R88",
    ),
    "an sglang step that mixes": (
        SGLANG,
        _trace(2, kind="mixed"),
        style_invariants.check_sglang_steps,
        "R90",
    ),
    "an sglang step that preempts": (
        SGLANG,
        _trace(6, preempted=["C"]),
        style_invariants.check_sglang_steps,
        "R91",
    ),
    "an sglang ratio below its floor": (
        SGLANG,
        _trace(3, new_token_ratio=0.05),
        style_invariants.check_sglang_steps,
        "R89",
    ),
    "an sglang step without its ratio": (
        SGLANG,
        _trace(3, new_token_ratio=None),
        style_invariants.check_sglang_steps,
        "R89",
    ),
    "a trtllm step that retracts": (
        TRTLLM,
        _trace(1, retracted=["r2"]),
        style_invariants.check_sglang_steps,
        "R91",
    ),
    "a trtllm step with a ratio": (
        TRTLLM,
        _trace(1, new_token_ratio=0.7),
        style_invariants.check_sglang_steps,
        "R95",
    ),
    "a trtllm worker that preempts": (
        TRTLLM,
        _set(("workers", 0, "kv_cache", "preemptions"), 1),
        style_invariants.check_trtllm_caches,
        "R93",
    ),
    "trtllm reservations over the cache": (
        TRTLLM,
        _set(("workers", 0, "kv_cache", "peak_reserved_blocks"), 7),
        style_invariants.check_trtllm_caches,
        "R93",
    ),
    "a reserved-blocks peak without trtllm": (
        SGLANG,
        _set(("workers", 0, "kv_cache", "peak_reserved_blocks"), 3),
        style_invariants.check_trtllm_caches,
        "R95",
    ),
    "retractions the trace does not list": (
        SGLANG,
        _set(("requests", 0, "retractions"), 1),
        style_invariants.check_retractions,
        "R95",
    ),
    "the summary's retractions off the requests'": (
        SGLANG,
        _set(("summary", "kv_cache", "retractions"), 1),
        style_invariants.check_retractions,
        "R95",
    ),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_invariant_can_fail(name: str) -> None:
    which, mutate, check, rule = MUTATIONS[name]
    scenario, report = case(which)
    check(scenario, report)  # the derived report passes the same check
    broken = copy.deepcopy(report)
    mutate(broken)
    with pytest.raises(InvariantViolation, match=f"^{rule}:"):
        check(scenario, broken)


def test_a_pool_s_own_limits_without_style_are_vllm_s() -> None:
    """R88: a pool's own scheduler does not inherit the scenario's style."""
    scenario = {
        "fleet": {"pools": [{"name": "a", "workers": 1, "scheduler": {"max_num_seqs": 1}}]},
        "scheduler": {"style": "sglang"},
    }
    assert style_invariants.styles_of_workers(scenario) == ["vllm"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=styled_input_triples())
def test_the_reference_keeps_every_style_invariant(documents: tuple[Document, ...]) -> None:
    """Generated fleets of the three styles (caches under pressure, pools mixing styles)."""
    scenario = documents[0]
    report = json.loads(reference_report(documents))  # type: ignore[arg-type]
    style_invariants.check_style_report(scenario, report)
