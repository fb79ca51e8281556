"""The reference against the plain per-step loop: byte-identical reports on generated inputs.

``conformance/examples/independent/servesim_independent.py`` was written from SPEC.md alone and
steps every worker one step at a time, the obvious way. It is the differential oracle for the
reference's optimisations (R21: same inputs, same bytes).
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.contract.errors import OutOfCoverage, ServesimError
from servesim.engine import decode_runs
from servesim_conformance.properties import (
    Documents,
    at_current_version,
    input_bytes,
    reference_report,
)
from servesim_conformance.strategies import (
    calibration_doc,
    input_triples,
    kv_input_triples,
    measured_input_triples,
    measured_timing_profiles,
    narrow_measured_input_triples,
    routed_input_triples,
    scenarios,
    timing_profiles,
    workloads,
)
from tests.helpers import REPO, load_module

PLAIN_LOOP = REPO / "conformance" / "examples" / "independent" / "servesim_independent.py"


PLAIN = load_module("servesim_independent", PLAIN_LOOP)

# The plain loop writes report 3.0 (R31) or, behind a flag, 2.0 (R2); it is asked for the
# newest report version released here, so that the harness can migrate or read what it writes.
# (Since report 6.0, which the plain loop does not write, the newest it writes: R86's migration
# from it is exact for the fleets it reads, one pool of one-rank workers.)
PLAIN_REPORT_VERSION = max(
    (
        path.parent.name
        for path in (REPO / "schemas" / "released").glob("*/report.schema.json")
        if path.parent.name in PLAIN.READS
    ),
    key=lambda version: tuple(int(part) for part in version.split(".")),
)


def plain_outcome(documents: Documents, *, trace: bool = True) -> tuple[int, bytes | None]:
    """The plain loop's exit code and report (None when it wrote none)."""
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        names = {"scenario": "s.json", "workload": "w.json", "timing_profile": "t.json"}
        for role, data in input_bytes(documents).items():
            (folder / names[role]).write_bytes(data)
        arguments = [
            "replay",
            "--scenario",
            str(folder / "s.json"),
            "--workload",
            str(folder / "w.json"),
            "--timing-profile",
            str(folder / "t.json"),
            "--output",
            str(folder / "r.json"),
            "--report-version",
            PLAIN_REPORT_VERSION,
        ]
        with contextlib.redirect_stderr(io.StringIO()):
            code = PLAIN.main([*arguments, "--trace"] if trace else arguments)
        report = folder / "r.json"
        # an older report is compared at the current version (R38)
        return code, at_current_version(report.read_bytes()) if report.exists() else None


def plain_report(documents: Documents, *, trace: bool = True) -> bytes:
    code, report = plain_outcome(documents, trace=trace)
    assert code == 0
    assert report is not None
    return report


def reference_outcome(documents: Documents) -> tuple[int, bytes | None]:
    """The reference's exit code (R32) and report, in-process."""
    try:
        return 0, reference_report(documents)
    except OutOfCoverage:
        return 3, None
    except ServesimError:
        return 2, None


@settings(max_examples=300)
@given(input_triples())
def test_reference_equals_plain_loop(documents: Documents) -> None:
    assert reference_report(documents) == plain_report(documents)


@settings(max_examples=100)
@given(scenarios(max_workers=2), workloads(max_size=40), timing_profiles())
def test_reference_equals_plain_loop_on_longer_workloads(
    scenario: dict[str, object], workload: dict[str, object], timing: dict[str, object]
) -> None:
    documents = (scenario, workload, timing)
    assert reference_report(documents, trace=False) == plain_report(documents, trace=False)


@settings(max_examples=300)
@given(kv_input_triples())
def test_reference_equals_plain_loop_with_a_kv_cache(documents: Documents) -> None:
    """Section 11 under memory pressure (evictions, preemptions, prefix hits): the plain loop's
    cache was written from SPEC.md alone."""
    assert reference_report(documents) == plain_report(documents)


@settings(max_examples=100)
@given(kv_input_triples(max_workers=2, max_requests=30))
def test_reference_equals_plain_loop_with_a_kv_cache_on_longer_workloads(
    documents: Documents,
) -> None:
    assert reference_report(documents, trace=False) == plain_report(documents, trace=False)


#: Examples of the state-aware differential test (a third of it on longer workloads);
#: SERVESIM_ROUTING_EXAMPLES=3000 runs a large batch.
ROUTING_EXAMPLES = int(os.environ.get("SERVESIM_ROUTING_EXAMPLES", "150"))


@settings(max_examples=ROUTING_EXAMPLES)
@given(routed_input_triples())
def test_reference_equals_plain_loop_with_state_aware_routing(documents: Documents) -> None:
    """Section 12 on 1 to 5 workers with shared prefixes, tight caches now and then: the plain
    loop's routers were written from SPEC.md alone."""
    assert reference_report(documents) == plain_report(documents)


@settings(max_examples=max(ROUTING_EXAMPLES // 3, 1))
@given(routed_input_triples(max_workers=3, max_requests=30))
def test_reference_equals_plain_loop_with_state_aware_routing_on_longer_workloads(
    documents: Documents,
) -> None:
    assert reference_report(documents, trace=False) == plain_report(documents, trace=False)


@settings(max_examples=300)
@given(measured_input_triples())
def test_reference_equals_plain_loop_with_measured_profiles(documents: Documents) -> None:
    """R22, R41, R42: the plain loop's grid and regression were written from SPEC.md alone."""
    assert reference_report(documents) == plain_report(documents)


@settings(max_examples=300)
@given(narrow_measured_input_triples())
def test_reference_and_plain_loop_stop_at_the_same_uncovered_step(documents: Documents) -> None:
    """R43, R7: with coverage narrower than the steps formed, both stop with the same code."""
    assert reference_outcome(documents) == plain_outcome(documents)


@st.composite
def long_measured_runs(draw: st.DrawFn) -> Documents:
    """Long decodes (runs of many stretches of equal durations, beyond
    ``MEASURED_RUN_STRETCHES``) cut by arrivals, on a measured model whose durations change as
    the context grows: every few steps (a small cost per context token) or every step."""
    scenario = {
        "document": "scenario",
        "schema_version": "1.0",
        "fleet": {"workers": draw(st.integers(1, 2))},
        "routing": {"policy": "round_robin"},
        "scheduler": {
            "max_num_seqs": 3,
            "max_batched_tokens": 16,
            "max_model_len": 1000,
            "prefill": {"mode": "whole"},
        },
    }
    requests = [
        {
            "id": f"r{index}",
            "arrival_us": draw(st.integers(0, 400_000)),
            "prompt_tokens": draw(st.integers(1, 16)),
            "max_output_tokens": draw(st.integers(250, 900)),
        }
        for index in range(draw(st.integers(1, 5)))
    ]
    workload = {"document": "workload", "schema_version": "1.0", "requests": requests}
    profile = draw(measured_timing_profiles())
    limits = {"max_num_seqs": 3, "max_batched_tokens": 16, "max_model_len": 1000}
    profile["calibration"] = calibration_doc(limits)
    model = profile["model"]
    tops = {"decode_requests": 3, "context_tokens": 3000, "prefill_tokens": 16}
    if model["kind"] == "grid":
        for name, top in tops.items():
            model["axes"][name] = [0, max(1, top // 3), top]
        sizes = [3, 3, 3]
        model["duration_us"] = [
            [[draw(st.integers(50, 400)) for _ in range(sizes[2])] for _ in range(sizes[1])]
            for _ in range(sizes[0])
        ]
    else:
        model["prefill_knots"] = [{"tokens": 0, "ns": 0}, {"tokens": 16, "ns": 90_000}]
        model["context_token_ps"] = draw(
            st.sampled_from([5_000, 60_000, model["context_token_ps"]])
        )
    model["coverage"] = {name: {"min": 0, "max": top} for name, top in tops.items()}
    return scenario, workload, profile


@settings(max_examples=40)
@given(long_measured_runs())
def test_long_measured_runs_equal_plain_loop(documents: Documents) -> None:
    assert reference_report(documents) == plain_report(documents)


@settings(max_examples=40)
@given(long_measured_runs(), st.integers(1, 3))
def test_measured_runs_of_few_stretches_each_equal_plain_loop(
    documents: Documents, stretches: int
) -> None:
    """A run capped at one to three stretches goes on in the next run, seamlessly."""
    with mock.patch.object(decode_runs, "MEASURED_RUN_STRETCHES", stretches):
        assert reference_report(documents) == plain_report(documents)


@st.composite
def long_measured_runs_with_a_cache(draw: st.DrawFn) -> Documents:
    """``long_measured_runs`` with a KV cache (SPEC.md section 11): decode runs of many
    stretches whose requests take a block every B tokens, from a cache sized between just
    enough for the largest request and twice that, so that later steps of a run take free
    blocks, evict cached ones (prefix caching on, requests sharing a hashed prefix) or stop at
    a preemption; a stop time now and then (R62) cuts a run. Traced or not, the reference forms
    such runs differently (a traced run takes no block, R30)."""
    scenario, workload, profile = draw(long_measured_runs())
    block_tokens = draw(st.integers(1, 16))
    needed = max(
        -(-(r["prompt_tokens"] + r["max_output_tokens"]) // block_tokens)
        for r in workload["requests"]
    )
    for index, request in enumerate(workload["requests"]):
        blocks = -(-request["prompt_tokens"] // block_tokens)
        shared = draw(st.integers(0, blocks))
        request["prefix_hashes"] = [
            *range(shared),
            *(1000 * (index + 1) + i for i in range(shared, blocks)),
        ]
    workload = {**workload, "schema_version": "1.1", "prefix_hash_block_tokens": block_tokens}
    scenario = {
        **scenario,
        "schema_version": "1.1",
        "kv_cache": {
            "blocks": needed + draw(st.integers(0, needed)),
            "block_tokens": block_tokens,
            "prefix_caching": draw(st.booleans()),
        },
    }
    if draw(st.integers(0, 3)) == 3:
        scenario["schema_version"] = "1.3"
        first = min(request["arrival_us"] for request in workload["requests"])
        scenario["stop_at_us"] = first + draw(st.integers(1, 600_000))  # after it (R4)
    return scenario, workload, profile


@settings(max_examples=40)
@given(long_measured_runs_with_a_cache(), st.booleans())
def test_long_measured_runs_with_a_cache_equal_plain_loop(
    documents: Documents, trace: bool
) -> None:
    assert reference_report(documents, trace=trace) == plain_report(documents, trace=trace)
