"""The disaggregation invariants (``servesim_conformance.disagg_invariants``, SPEC.md R97 to
R107): each can fail, and the reference keeps them on generated disaggregated fleets.

The report each check is tried on is the hand-derived one of
two requests: A (prompt 100, 3 tokens) and B (prompt 50, 2 tokens) prefilled together 0 -> 155
(5 + 150 us), both reserved at once; B's transfer of 50 us ends at 205 and it decodes 205 ->
220 -> 235; A's of 100 us ends at 255, on an idle decode worker, and it decodes 255 -> 270 ->
285 -> 300. The replay is checked to hold those values first.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings

from servesim.engine import loop
from servesim_conformance import disagg_invariants
from servesim_conformance.properties import reference_report
from servesim_conformance.strategies import disaggregated_input_triples
from servesim_conformance.violations import InvariantViolation
from tests.helpers import workload_doc
from tests.test_disaggregation import replay, scenario

Document = dict[str, Any]


def _case() -> tuple[Document, Document]:
    value = scenario()
    report = replay(value, workload_doc(("A", 0, 100, 3), ("B", 0, 50, 2)))
    a, b = report["requests"]
    assert (a["token_times_us"], b["token_times_us"]) == ([270, 285, 300], [220, 235])
    return value, report


def _set(pointer: str, value: Any) -> Callable[[Document], None]:
    def mutate(report: Document) -> None:
        *path, last = pointer.split("/")[1:]
        target: Any = report
        for token in path:
            target = target[int(token)] if isinstance(target, list) else target[token]
        target[int(last) if isinstance(target, list) else last] = value

    return mutate


CHECKS = disagg_invariants
MUTATIONS: dict[str, tuple[Callable[[Document], None], Callable[..., None], str]] = {
    "token before activation": (
        _set("/requests/0/token_times_us", [250, 285, 300]),
        CHECKS.check_stamps,
        "R105",
    ),
    "stamps out of order": (
        _set("/requests/0/handoff/reserved_us", 90),
        CHECKS.check_stamps,
        "R98",
    ),
    "transfer not R103's": (
        _set("/requests/0/handoff/transfer_us", 99),
        CHECKS.check_stamps,
        "R103",
    ),
    "tokens sent not the mode's": (
        _set("/requests/0/handoff/transferred_tokens", 90),
        CHECKS.check_stamps,
        "R103",
    ),
    "a stage skipped": (
        _set("/requests/0/handoff/transfer_end_us", None),
        CHECKS.check_stamps,
        "R107",
    ),
    "prefill worker emits a token": (
        _set("/workers/0/output_tokens", 1),
        lambda s, r: CHECKS.check_workers(s, r),
        "R107",
    ),
    "handed_off miscounted": (
        _set("/workers/0/handed_off", 1),
        lambda s, r: CHECKS.check_workers(s, r),
        "R107",
    ),
    "transfers miscounted": (
        _set("/summary/transfers/count", 1),
        lambda s, r: CHECKS.check_transfers(r),
        "R107",
    ),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_invariant_can_fail(name: str) -> None:
    mutate, check, rule = MUTATIONS[name]
    value, report = _case()
    check(value, report)  # the derived report passes the same check
    broken = copy.deepcopy(report)
    mutate(broken)
    with pytest.raises(InvariantViolation, match=f"^{rule}:"):
        check(value, broken)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=disaggregated_input_triples())
def test_the_reference_keeps_every_disaggregation_invariant(
    documents: tuple[Document, ...],
) -> None:
    """Generated disaggregated fleets: tight decode caches, every decode policy, ranks, both
    styles, sessions, a closed loop and stop times."""
    report = json.loads(reference_report(documents))  # type: ignore[arg-type]
    disagg_invariants.check_disaggregated_report(documents[0], report)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=disaggregated_input_triples())
def test_decode_runs_keep_the_step_by_step_report(documents: tuple[Document, ...]) -> None:
    """The reference's decode runs on a disaggregated fleet (a reservation or a transfer end
    cuts a run, R102, R104) give the bytes of forming every step one by one."""
    with_runs = reference_report(documents)  # type: ignore[arg-type]
    with mock.patch.object(loop, "plan_run", return_value=None):
        one_by_one = reference_report(documents)  # type: ignore[arg-type]
    assert with_runs == one_by_one


def test_a_settled_run_is_not_settled_again() -> None:
    """R102: a reservation tried mid-run settles the run's blocks once; a second try in the
    same run (another handoff before the run's end) takes nothing more. Found by a sweep of
    7 prefill workers and 1 decode worker at twice the example's rate: the reference counted
    a run's later steps twice, and with 80 requests its report differed from the step-by-step
    one (with 200, block_run_limit's assertion stopped it)."""
    pools = [
        {"name": "prefill", "workers": 7, "role": "prefill"},
        {"name": "decode", "workers": 1, "role": "decode"},
    ]
    value = {
        "document": "scenario",
        "schema_version": "1.6",
        "fleet": {"pools": pools},
        "routing": {"policy": "least_loaded", "decode": {"policy": "least_loaded"}},
        "scheduler": {
            "max_num_seqs": 16,
            "max_batched_tokens": 2048,
            "max_model_len": 4096,
            "prefill": {"mode": "chunked", "max_chunk_tokens": 1024},
        },
        "kv_cache": {"blocks": 1024, "block_tokens": 16, "prefix_caching": False},
        "kv_transfer": {
            "bytes_per_token": 131072,
            "bandwidth_bytes_per_s": 25_000_000_000,
            "base_latency_us": 200,
        },
    }
    requests = [
        (f"r{i:03d}", i * 10_000, 256 + (i * 397) % 1537, 16 + (i * 53) % 113) for i in range(100)
    ]
    profile = {
        "document": "timing_profile",
        "schema_version": "1.0",
        "model": {
            "kind": "synthetic_linear",
            "step_overhead_ns": 2_000_000,
            "prefill_token_ns": 50_000,
            "decode_token_ns": 400_000,
        },
    }
    documents = (value, workload_doc(*requests), profile)
    with_runs = reference_report(documents)  # type: ignore[arg-type]
    report = json.loads(with_runs)
    assert report["summary"]["transfers"]["count"] == 100
    disagg_invariants.check_disaggregated_report(value, report)
    with mock.patch.object(loop, "plan_run", return_value=None):
        assert with_runs == reference_report(documents)  # type: ignore[arg-type]
