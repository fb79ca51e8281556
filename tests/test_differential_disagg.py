"""Section 17 (R97 to R108): the reference against the plain per-step loop, byte for byte, on
generated disaggregated fleets.

The plain loop (``conformance/examples/independent/servesim_independent.py``) was extended from
SPEC.md section 17 alone (and the schemas), without reading the reference's handoff module, so an
agreement here is two readings of the section agreeing. Inputs are
``disaggregated_input_triples``: one or two prefill pools and one or two decode pools of one or
two workers, ranks now and then, each pool of style ``"vllm"`` or ``"trtllm"`` with its own cache
now and then (tight decode caches: reservations wait, decode workers preempt), every decode
policy, transfers from far slower than a step to far faster, ``"full_prompt"`` now and then,
sessions, closed loops, stop times and objectives. Exit codes are compared too.

``SERVESIM_DISAGG_EXAMPLES`` sets the examples of each test (default 25, for CI time);
``SERVESIM_DISAGG_EXAMPLES=1000`` runs a large batch.
"""

from __future__ import annotations

import json
import os

from hypothesis import event, given, settings

from servesim_conformance.properties import Documents
from servesim_conformance.strategies import disaggregated_input_triples
from tests.test_differential_pools import plain_outcome, reference_outcome
from tests.test_disaggregation import LIMITS, STEP, TRANSFER

EXAMPLES = int(os.environ.get("SERVESIM_DISAGG_EXAMPLES", "25"))


def note_what_happened(report: bytes | None) -> None:
    """Hypothesis events (``--hypothesis-show-statistics``): whether the section's distinctive
    paths were reached (a reservation that waited, an activation deferred to a pass end, a
    decode hit, a decode-side preemption, a cut-off handoff)."""
    if report is None:
        event("stopped (exit 2 or 3)")
        return
    value = json.loads(report)
    handoffs = [request["handoff"] for request in value["requests"] if request["handoff"]]
    if any((h["reserved_us"] or h["prefill_end_us"]) > h["prefill_end_us"] for h in handoffs):
        event("a reservation waited")
    if any(
        h["activation_us"] is not None and h["activation_us"] > h["transfer_end_us"]
        for h in handoffs
    ):
        event("an activation waited for a pass end")
    if any(h["decode_reused_tokens"] for h in handoffs):
        event("a decode hit")
    if any(request["preemptions"] for request in value["requests"]):
        event("a preemption")
    if any(h["activation_us"] is None for h in handoffs):
        event("a handoff cut off")


def assert_agree(documents: Documents, *, trace: bool = True) -> None:
    reference = reference_outcome(documents, trace=trace)
    note_what_happened(reference[1])
    assert reference == plain_outcome(documents, trace=trace)


@settings(max_examples=EXAMPLES)
@given(disaggregated_input_triples())
def test_reference_equals_plain_loop_on_disaggregated_fleets(documents: Documents) -> None:
    """R97 to R107 with every arrival and decode policy, both styles, ranks and section 13."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(disaggregated_input_triples())
def test_reference_equals_plain_loop_on_disaggregated_fleets_without_the_trace(
    documents: Documents,
) -> None:
    """The same without --trace (the reference may skip work it need not report)."""
    assert_agree(documents, trace=False)


def test_a_waiting_reservation_is_tried_at_every_pass_end() -> None:
    """R102 (b): while a decode worker's reservation queue waits (C, for blocks A and B hold),
    every pass end of that worker tries it, so the reference forms no decode run that would
    skip pass ends. Found by review: the reference reserved C at 90 us, inside a run, where the
    plain loop (and the rule) reserve it at the pass end of 115 us."""
    cache = {"blocks": 64, "block_tokens": 16, "prefix_caching": True}
    scenario = {
        "document": "scenario",
        "schema_version": "1.6",
        "fleet": {
            "pools": [
                {"name": "p", "workers": 2, "role": "prefill", "kv_cache": cache},
                {"name": "d", "workers": 1, "role": "decode", "kv_cache": {**cache, "blocks": 5}},
            ]
        },
        "routing": {"policy": "round_robin"},
        "scheduler": {**LIMITS, "prefill": {"mode": "whole"}},
        "kv_transfer": TRANSFER,
    }
    workload = {
        "document": "workload",
        "schema_version": "1.1",
        "prefix_hash_block_tokens": 16,
        "requests": [
            {"id": "A", "arrival_us": 0, "prompt_tokens": 20, "max_output_tokens": 60},
            {
                "id": "B",
                "arrival_us": 21,
                "prompt_tokens": 32,
                "max_output_tokens": 10,
                "prefix_hashes": [7, 8],
            },
            {
                "id": "C",
                "arrival_us": 22,
                "prompt_tokens": 32,
                "max_output_tokens": 10,
                "prefix_hashes": [7, 8],
            },
        ],
    }
    documents = (scenario, workload, STEP)
    reference = reference_outcome(documents, trace=True)
    assert reference == plain_outcome(documents, trace=True)
    assert reference[1] is not None
    c = json.loads(reference[1])["requests"][2]
    assert (c["id"], c["handoff"]["reserved_us"]) == ("C", 115)
