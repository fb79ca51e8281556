"""Section 16 (R88 to R96): the reference against the plain per-step loop, byte for byte, on
generated inputs with scheduler styles.

The plain loop (``conformance/examples/independent/servesim_independent.py``) was extended from
SPEC.md section 16 alone (and the schemas), without reading the reference's formation modules,
so an agreement here is two readings of the section agreeing. Inputs are
``styled_input_triples``: plain, cached and pool triples whose scheduler and each pool's own
get a drawn style (``"vllm"``, ``"sglang"`` twice as often, ``"trtllm"``), so that pools mix
styles; with and without caches, small caches half the time (vLLM preempts, SGLang retracts,
TensorRT-LLM holds requests back), chunked and whole prefill (whole only for vllm and trtllm,
R88), now and then ``scheduler.sglang`` with a small clip so that the estimate binds. They are
timed by one profile or, half the time, by one per pool (R84), and, in one test, grouped into
sessions under a closed loop, a stop time and objectives (section 13). Exit codes are compared
too: an uncovered step (R43) or an R6 overflow must stop both the same way.

``SERVESIM_STYLE_EXAMPLES`` sets the examples of each test (default 25, for CI time);
``SERVESIM_STYLE_EXAMPLES=1000`` runs a large batch.
"""

from __future__ import annotations

import json
import os

from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from servesim_conformance.properties import Documents
from servesim_conformance.strategies import load_controls, styled_input_triples, with_sessions
from tests.test_differential_pools import (
    PoolDocuments,
    per_pool_profiles,
    plain_outcome,
    reference_outcome,
)

EXAMPLES = int(os.environ.get("SERVESIM_STYLE_EXAMPLES", "25"))


def note_what_happened(report: bytes | None) -> None:
    """Hypothesis events (``--hypothesis-show-statistics``): which styles ran and whether the
    section's distinctive paths (retraction, a trtllm reservation, preemption) were reached."""
    if report is None:
        event("stopped (exit 2 or 3)")
        return
    value = json.loads(report)
    for style in sorted({worker["style"] for worker in value["workers"]}):
        event(f"style {style}")
    if any(request["retractions"] for request in value["requests"]):
        event("sglang retracted")
    if any(request["preemptions"] for request in value["requests"]):
        event("vllm preempted")
    caches = [worker["kv_cache"] for worker in value["workers"] if worker["kv_cache"]]
    if any(cache["peak_reserved_blocks"] for cache in caches):
        event("trtllm reserved")


def assert_agree(documents: PoolDocuments, *, trace: bool = True) -> None:
    reference = reference_outcome(documents, trace=trace)
    note_what_happened(reference[1])
    assert reference == plain_outcome(documents, trace=trace)


@st.composite
def styled_session_triples(draw: st.DrawFn) -> Documents:
    """(scenario 1.5, workload 1.2, profile): a styled triple whose requests are grouped into
    sessions four times in five (R59), with ``load_controls`` (a closed loop, a stop time and
    objectives, each drawn, R61 to R63); the scenario stays 1.5 (R96: 1.3's members are 1.5's)."""
    scenario, workload, timing = draw(styled_input_triples())
    if draw(st.integers(0, 4)) < 4:
        workload = draw(with_sessions(workload))
    else:
        workload = {**workload, "schema_version": "1.2"}
    controlled = draw(load_controls(scenario, workload))
    return {**controlled, "schema_version": "1.5"}, workload, timing


@st.composite
def overcommitted_triples(draw: st.DrawFn) -> Documents:
    """A styled triple whose every ``"sglang"`` scheduler (the scenario's and each pool's own)
    counts almost nothing of its running requests' output (``clip_max_new_tokens`` 1 to 4,
    ``conservativeness_permille`` 1 to 100, R89, R90), so that the estimate admits more than
    the cache can decode and R91 retracts (decoding requests, and the chunked one); its caches
    are mostly made as small as R90's rejection allows (never larger). Only triples with a
    cache and an sglang scheduler are kept."""
    scenario, workload, timing = draw(styled_input_triples())
    schedulers = [scenario["scheduler"]]
    schedulers += [
        pool["scheduler"] for pool in scenario["fleet"].get("pools", []) if "scheduler" in pool
    ]
    sglang = [scheduler for scheduler in schedulers if scheduler.get("style") == "sglang"]
    assume(sglang and "kv_cache" in scenario)  # nothing to retract otherwise (section 16.1)
    # the least cache that holds the largest request alone with a page to spare (R90), as
    # ``styled_input_triples``'s pressure does half the time, here for every cache
    page = scenario["kv_cache"]["block_tokens"]
    footprints = [r["prompt_tokens"] + r["max_output_tokens"] for r in workload["requests"]]
    least = -(-max(footprints) // page) + 1
    for holder in [scenario, *scenario["fleet"].get("pools", [])]:
        if "kv_cache" in holder and draw(st.integers(0, 3)) > 0:
            blocks = min(holder["kv_cache"]["blocks"], least + draw(st.integers(0, 2)))
            holder["kv_cache"] = {**holder["kv_cache"], "blocks": blocks}  # never larger
    for scheduler in sglang:
        scheduler["sglang"] = {
            "clip_max_new_tokens": draw(st.integers(1, 4)),
            "conservativeness_permille": draw(st.integers(1, 100)),
        }
    return scenario, workload, timing


@settings(max_examples=EXAMPLES)
@given(per_pool_profiles(styled_input_triples()))
def test_reference_equals_plain_loop_with_styles(documents: PoolDocuments) -> None:
    """All three styles, alone or mixed over pools, with and without caches (R88 to R95)."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(per_pool_profiles(styled_session_triples()))
def test_reference_equals_plain_loop_with_styles_sessions_and_a_stop_time(
    documents: PoolDocuments,
) -> None:
    """Section 13 with styles: turns released at completions after prefill-only steps and
    retractions, steps cut by the stop time (R62, R88)."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(per_pool_profiles(overcommitted_triples()))
def test_reference_equals_plain_loop_with_sglang_retracting(documents: PoolDocuments) -> None:
    """SGLang's estimate set to count almost nothing, so that retraction is common (R91): the
    victim's order, its place at the queue's tail, its recompute, the re-estimated ratio."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(per_pool_profiles(styled_input_triples()))
def test_reference_equals_plain_loop_with_styles_without_the_trace(
    documents: PoolDocuments,
) -> None:
    """The same without --trace (the reference may skip work it need not report)."""
    assert_agree(documents, trace=False)
