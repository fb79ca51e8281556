"""Section 18 (R109 to R124): the reference against the plain per-step loop, byte for byte, on
generated fleets that change.

The plain loop (``conformance/examples/independent/servesim_independent.py``) is extended from
SPEC.md section 18 alone (and the schemas), without reading the reference's fleet code, so an
agreement here is two readings of the section agreeing. Inputs are ``fleet_input_triples``:
plain, cached, session, pool, styled and disaggregated triples whose pools are given schedules,
reactive policies and startup times, with failures (with and without recovery, of initial and
added workers) under both policies; and bases chosen so that failures fall inside decode runs
(long outputs), chunked prefills (small chunks) and transfers (slow links). Exit codes are
compared too. Every report the two agree on is also held to ``fleet_invariants``. No difference
is tolerated: both follow the same SPEC text (R118's recomputed tokens, R121's re-handing).

``SERVESIM_FLEET_EXAMPLES`` sets the examples of each test (default 25, for CI time);
``SERVESIM_FLEET_EXAMPLES=1000`` runs a large batch.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import event, given, settings
from hypothesis import strategies as st

from servesim.contract.schemas import SUPPORTED_VERSIONS
from servesim_conformance import fleet_invariants
from servesim_conformance.properties import Documents, at_current_version, encode
from servesim_conformance.strategies import (
    disaggregated_input_triples,
    fleet_input_triples,
    input_triples,
    kv_input_triples,
    pool_input_triples,
    routed_input_triples,
    session_input_triples,
    styled_input_triples,
)
from tests.test_differential import PLAIN
from tests.test_differential_pools import reference_outcome
from tests.test_disaggregation import LIMITS, STEP

EXAMPLES = int(os.environ.get("SERVESIM_FLEET_EXAMPLES", "25"))

#: R124: reading scenario 1.7 needs report 9.0, which the plain loop is asked for.
FLEET_REPORT_VERSION = "9.0"


def test_both_implementations_read_section_18() -> None:
    """The tier below runs only if both read scenario 1.7 (R124); a regression fails here instead
    of skipping the tier."""
    assert "1.7" in SUPPORTED_VERSIONS["scenario"]
    assert "1.7" in PLAIN.READS[FLEET_REPORT_VERSION]["scenario"]


def plain_outcome(documents: Documents, *, trace: bool) -> tuple[int, bytes | None]:
    """The plain loop's exit code and report 9.0 (None when it wrote none)."""
    scenario, workload, timing = documents
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        for name, document in (("s", scenario), ("w", workload), ("t", timing)):
            (folder / f"{name}.json").write_bytes(encode(document))
        arguments = ["replay", "--scenario", str(folder / "s.json")]
        arguments += ["--workload", str(folder / "w.json")]
        arguments += ["--timing-profile", str(folder / "t.json")]
        arguments += ["--output", str(folder / "r.json")]
        arguments += ["--report-version", FLEET_REPORT_VERSION]
        with contextlib.redirect_stderr(io.StringIO()):
            code = PLAIN.main([*arguments, "--trace"] if trace else arguments)
        report = folder / "r.json"
        return code, at_current_version(report.read_bytes()) if report.exists() else None


def note_what_happened(report: bytes | None) -> None:
    """Hypothesis events (``--hypothesis-show-statistics``): whether the section's distinctive
    paths were reached."""
    if report is None:
        event("stopped (exit 2 or 3)")
        return
    value = json.loads(report)
    requests, fleet = value["requests"], value["summary"]["fleet"]
    migrations = [m for request in requests for m in request["migrations"]]
    if any(m["output_tokens"] > 0 for m in migrations):
        event("a request migrated with tokens")
    if any(m["output_tokens"] == 0 and m["lost_tokens"] > 0 for m in migrations):
        event("a request migrated in its prefill")
    if any(m["lost_tokens"] == 0 for m in migrations):
        event("a migration with nothing lost (a re-handing, or a waiting request)")
    if any(request["recomputed_tokens"] for request in requests):
        event("lost tokens recomputed")
    for reason in ("worker_failure", "migration_limit", "no_routable_worker"):
        if value["summary"]["failed_by_reason"][reason]:
            event(f"a request failed: {reason}")
    if value["summary"]["rejected_by_reason"]["no_routable_worker"]:
        event("an arrival found no routable worker")
    if any(step["cut_us"] is not None for step in value["trace"] or []):
        event("a step cut")
    for member in ("cancelled", "drained", "recoveries", "ignored_failures", "scale_ups"):
        if fleet[member]:
            event(f"fleet: {member}")


def assert_agree(
    documents: Documents, *, trace: bool = True, generated: bool = True
) -> dict[str, Any] | None:
    """Both give the same exit code and bytes; the report keeps the fleet invariants.
    ``generated``: within a hypothesis test (events recorded). Returns the report's value."""
    reference = reference_outcome(documents, trace=trace)
    plain = plain_outcome(documents, trace=trace)
    if generated:
        note_what_happened(reference[1])
    assert reference == plain
    if reference[1] is None:
        return None
    value: dict[str, Any] = json.loads(reference[1])
    fleet_invariants.check_fleet_report(documents[0], value)
    return value


@st.composite
def long_outputs(draw: st.DrawFn, base: st.SearchStrategy[Documents]) -> Documents:
    """A triple of ``base`` whose accepted requests' outputs are lengthened to 20 to 60 tokens
    (within ``max_model_len``), so that decode runs are long and failures cut them."""
    scenario, workload, timing = copy.deepcopy(draw(base))
    limit = scenario["scheduler"]["max_model_len"]
    for request in workload["requests"]:
        room = limit - request["prompt_tokens"]
        if 0 < request["max_output_tokens"] <= 16 and room > 20:
            request["max_output_tokens"] = draw(st.integers(20, min(60, room)))
    return scenario, workload, timing


@st.composite
def small_chunks(draw: st.DrawFn, base: st.SearchStrategy[Documents]) -> Documents:
    """A triple of ``base`` with chunked prefill of 1 to 4 tokens a step (R18), so that a
    failure falls inside a prompt's prefill."""
    scenario, workload, timing = copy.deepcopy(draw(base))
    scenario["scheduler"]["prefill"] = {
        "mode": "chunked",
        "max_chunk_tokens": draw(st.integers(1, 4)),
    }
    return scenario, workload, timing


@st.composite
def slow_links(draw: st.DrawFn) -> Documents:
    """A disaggregated triple whose transfers last 1 to 40 ms (R103), so that failures of
    prefill and decode workers fall inside them (R121)."""
    scenario, workload, timing = copy.deepcopy(draw(disaggregated_input_triples()))
    scenario["kv_transfer"] = {
        **scenario["kv_transfer"],
        "bytes_per_token": draw(st.integers(1_000, 2_000)),
        "bandwidth_bytes_per_s": 1_000_000,
    }
    return scenario, workload, timing


#: Every aggregated kind of input (``fleet_input_triples``' bases but the disaggregated one).
aggregated_triples = st.one_of(
    input_triples(),
    kv_input_triples(),
    session_input_triples(),
    session_input_triples(routed_input_triples()),
    pool_input_triples(),
    styled_input_triples(),
)


@settings(max_examples=EXAMPLES)
@given(fleet_input_triples(aggregated_triples))
def test_reference_equals_plain_loop_on_fleets_that_change(documents: Documents) -> None:
    """R109 to R120 and R122, R123 over every aggregated kind of input."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(fleet_input_triples(aggregated_triples))
def test_reference_equals_plain_loop_on_fleets_that_change_without_the_trace(
    documents: Documents,
) -> None:
    """The same without --trace (the reference may skip work it need not report)."""
    assert_agree(documents, trace=False)


@settings(max_examples=EXAMPLES)
@given(fleet_input_triples(disaggregated_input_triples()))
def test_reference_equals_plain_loop_on_disaggregated_fleets_that_change(
    documents: Documents,
) -> None:
    """R121 with the rest of section 18 on disaggregated fleets: decode pools scaled to 0,
    failures of prefill and decode workers, re-handings."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(fleet_input_triples(long_outputs(st.one_of(input_triples(), kv_input_triples()))))
def test_reference_equals_plain_loop_with_failures_in_decode_runs(documents: Documents) -> None:
    """R117: a failure cuts a decode run (the reference forms runs of steps at once; the plain
    loop forms every step): the tokens before it stand, the run's later steps never happen."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(fleet_input_triples(small_chunks(st.one_of(kv_input_triples(), session_input_triples()))))
def test_reference_equals_plain_loop_with_failures_in_chunked_prefills(
    documents: Documents,
) -> None:
    """R117, R118: a failure during a chunked prefill loses the chunks computed (the cut one
    included) and the migrated request computes its prompt again."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(fleet_input_triples(slow_links()))
def test_reference_equals_plain_loop_with_failures_in_transfers(documents: Documents) -> None:
    """R121: failures of prefill workers (their Held, Pending and Transferring requests
    migrate) and of decode workers (their Pending, Transferring and Ready requests are
    re-handed) while transfers are under way."""
    assert_agree(documents)


# --- Hand-picked cases (the figures follow from R22, R103, R117, R118 and R121) -----------------

CACHE = {"blocks": 64, "block_tokens": 16, "prefix_caching": False}


def aggregated(failures: dict[str, Any], prefill: dict[str, Any]) -> dict[str, Any]:
    return {
        "document": "scenario",
        "schema_version": "1.7",
        "fleet": {"workers": 2},
        "routing": {"policy": "round_robin"},
        "scheduler": {**LIMITS, "prefill": prefill},
        "kv_cache": CACHE,
        "failures": failures,
    }


def one_request(prompt: int, output: int) -> dict[str, Any]:
    return {
        "document": "workload",
        "schema_version": "1.0",
        "requests": [
            {"id": "A", "arrival_us": 0, "prompt_tokens": prompt, "max_output_tokens": output}
        ],
    }


def migrate(*events: dict[str, Any]) -> dict[str, Any]:
    return {"events": list(events), "policy": "migrate", "max_migrations": 1}


def test_a_failure_inside_a_decode_run() -> None:
    """A (prompt 16, 40 tokens) on worker 0: 0 -> 21 (5 + 16 us) gives token 1, then a decode
    step every 15 us: tokens at 21, 36, 51, 66, 81, 96. Worker 0 fails at 100, inside the step
    96 -> 111 (cut at 100): A migrates to worker 1 with 6 tokens (R117, R118) and completes."""
    failures = migrate({"pool": "default", "pool_worker": 0, "at_us": 100})
    value = assert_agree(
        (aggregated(failures, {"mode": "whole"}), one_request(16, 40), STEP), generated=False
    )
    assert value is not None
    a = value["requests"][0]
    assert (a["outcome"], a["worker"], len(a["token_times_us"])) == ("completed", 1, 40)
    assert [m["output_tokens"] for m in a["migrations"]] == [6]
    assert a["token_times_us"][:6] == [21, 36, 51, 66, 81, 96]
    assert [step["start_us"] for step in value["trace"] if step["cut_us"] == 100] == [96]


def test_a_failure_inside_a_chunked_prefill() -> None:
    """A (prompt 64, 2 tokens) prefilled 8 tokens a step on worker 0: 0 -> 13, 13 -> 26,
    26 -> 39. Worker 0 fails at 30: A's cached tokens are 24 (the cut chunk's included, R46,
    R117), it migrates with no token, and worker 1 computes its 64 positions, the 24 lost ones
    among them (R118: recomputed 24, no cache hit with prefix caching off)."""
    failures = migrate({"pool": "default", "pool_worker": 0, "at_us": 30})
    chunked = {"mode": "chunked", "max_chunk_tokens": 8}
    value = assert_agree((aggregated(failures, chunked), one_request(64, 2), STEP), generated=False)
    assert value is not None
    a = value["requests"][0]
    assert a["migrations"] == [
        {
            "at_us": 30,
            "worker": 0,
            "pool": "default",
            "rank": 0,
            "output_tokens": 0,
            "lost_tokens": 24,
        }
    ]
    assert (a["outcome"], a["lost_tokens"], a["recomputed_tokens"]) == ("completed", 24, 24)


def disaggregated(failures: dict[str, Any]) -> dict[str, Any]:
    """One prefill worker (global index 0) and two decode workers (1 and 2); a transfer of 100
    tokens at 1000 bytes each over 1 MB/s lasts 100 ms (R103)."""
    return {
        "document": "scenario",
        "schema_version": "1.7",
        "fleet": {
            "pools": [
                {"name": "p", "workers": 1, "role": "prefill"},
                {"name": "d", "workers": 2, "role": "decode"},
            ]
        },
        "routing": {"policy": "round_robin"},
        "scheduler": {**LIMITS, "prefill": {"mode": "whole"}},
        "kv_cache": CACHE,
        "kv_transfer": {
            "bytes_per_token": 1000,
            "bandwidth_bytes_per_s": 1_000_000,
            "base_latency_us": 0,
        },
        "failures": failures,
    }


def test_a_decode_failure_during_a_transfer_re_hands_the_request() -> None:
    """A (prompt 100, 3 tokens) is prefilled 0 -> 105 and transferred to decode worker 1 from
    105. Worker 1 fails at 1000, mid-transfer: A's KV is still on the prefill worker, so it is
    re-handed (R121): a migration with no lost token, routed on the decode side again, to
    worker 2."""
    failures = migrate({"pool": "d", "pool_worker": 0, "at_us": 1000})
    value = assert_agree((disaggregated(failures), one_request(100, 3), STEP), generated=False)
    assert value is not None
    a = value["requests"][0]
    assert a["migrations"] == [
        {"at_us": 1000, "worker": 1, "pool": "d", "rank": 0, "output_tokens": 0, "lost_tokens": 0}
    ]
    assert (a["outcome"], a["handoff"]["decode_worker"]) == ("completed", 2)


def test_a_prefill_failure_during_a_transfer_leaves_no_routable_worker() -> None:
    """The same transfer; the prefill worker fails at 1000 instead: A's KV is lost with it (its
    100 prompt tokens, R121), it migrates, and its migration arrival finds no routable prefill
    worker, so it fails (R114, R118)."""
    failures = migrate({"pool": "p", "pool_worker": 0, "at_us": 1000})
    documents = (disaggregated(failures), one_request(100, 3), STEP)
    value = assert_agree(documents, generated=False)
    assert value is not None
    a = value["requests"][0]
    assert (a["outcome"], a["fail_reason"], a["terminal_us"]) == (
        "failed",
        "no_routable_worker",
        1000,
    )
    assert [(m["worker"], m["lost_tokens"]) for m in a["migrations"]] == [(0, 100)]


#: Found by ``fleet_input_triples(disaggregated_input_triples())`` (2 in 1,000 examples): two
#: decode workers of two ranks, failures of decode workers chasing the requests (migrate, at
#: most once), a closed loop. The plain loop writes a report; the reference stopped with an
#: internal error (``AssertionError: a gap taken back that no worker counted``, its ITL
#: bookkeeping of a request migrated off a decode worker) at fleet-ref 4ce15a2.
ITL_CASE: Documents = (
    {
        "document": "scenario",
        "schema_version": "1.7",
        "fleet": {
            "pools": [
                {
                    "name": "prefill0",
                    "workers": 1,
                    "role": "prefill",
                    "scheduler": {
                        "max_num_seqs": 1,
                        "max_batched_tokens": 10,
                        "max_model_len": 55,
                        "prefill": {"mode": "chunked", "max_chunk_tokens": 12},
                        "style": "vllm",
                    },
                    "scaling": {"startup_us": 2000},
                },
                {
                    "name": "decode0",
                    "workers": 2,
                    "role": "decode",
                    "dp_size": 2,
                    "scheduler": {
                        "max_num_seqs": 1,
                        "max_batched_tokens": 7,
                        "max_model_len": 55,
                        "prefill": {"mode": "chunked", "max_chunk_tokens": 12},
                        "style": "vllm",
                    },
                },
            ]
        },
        "routing": {
            "policy": "random",
            "seed": 406,
            "decode": {"policy": "random", "seed": 15000684092648},
        },
        "scheduler": {
            "max_num_seqs": 1,
            "max_batched_tokens": 24,
            "max_model_len": 55,
            "prefill": {"mode": "chunked", "max_chunk_tokens": 12},
        },
        "kv_cache": {"blocks": 13, "block_tokens": 6, "prefix_caching": True},
        "closed_loop": {"max_in_flight": 4},
        "slo": {"ttft_us": 0, "e2e_us": 0},
        "kv_transfer": {
            "bytes_per_token": 216,
            "bandwidth_bytes_per_s": 50000000000,
            "base_latency_us": 19,
        },
        "failures": {
            "events": [
                {"pool": "decode0", "pool_worker": 0, "at_us": 3000, "recover_after_us": 1},
                {"pool": "prefill0", "pool_worker": 0, "at_us": 5000, "recover_after_us": 300},
                {"pool": "decode0", "pool_worker": 1, "at_us": 6000, "recover_after_us": 1},
                {"pool": "decode0", "pool_worker": 0, "at_us": 9000, "recover_after_us": 1},
                {"pool": "decode0", "pool_worker": 1, "at_us": 12000, "recover_after_us": 1},
            ],
            "policy": "migrate",
            "max_migrations": 1,
        },
    },
    {
        "document": "workload",
        "schema_version": "1.2",
        "prefix_hash_block_tokens": 6,
        "requests": [
            {"id": "r0", "arrival_us": 1200, "prompt_tokens": 7, "max_output_tokens": 11},
            {"id": "r1", "arrival_us": 300, "prompt_tokens": 16, "max_output_tokens": 2},
        ],
    },
    {
        "document": "timing_profile",
        "schema_version": "1.0",
        "model": {
            "kind": "synthetic_linear",
            "step_overhead_ns": 999999,
            "prefill_token_ns": 19145,
            "decode_token_ns": 1481,
        },
    },
)


def test_a_request_migrated_off_a_decode_worker_keeps_its_token_gaps() -> None:
    """R28, R118, R121: a completed request's ITL samples are all its gaps, the one across its
    migration included; both implementations give the same report."""
    assert_agree(ITL_CASE, generated=False)


def _step_by_step(documents: Documents, *, trace: bool) -> tuple[int, bytes | None]:
    """The reference with every step formed one at a time (no run of identical steps)."""
    with mock.patch("servesim.engine.loop.plan_run", return_value=None):
        return reference_outcome(documents, trace=trace)


@settings(max_examples=EXAMPLES)
@given(
    fleet_input_triples(
        long_outputs(
            st.one_of(
                input_triples(),
                kv_input_triples(),
                session_input_triples(),
                pool_input_triples(),
                styled_input_triples(),
            )
        )
    ),
    st.booleans(),
)
def test_runs_in_a_changing_fleet_equal_step_by_step_formation(
    documents: Documents, trace: bool
) -> None:
    """The reference's runs of identical decode steps in a fleet that changes, bounded by the
    instants of its failures, schedule entries and ticks, give the report of forming every step
    one at a time (long outputs: long runs, which failures, ticks and drains meet)."""
    assert reference_outcome(documents, trace=trace) == _step_by_step(documents, trace=trace)


def test_a_migrated_request_reserves_its_whole_new_attempt_on_a_trtllm_prefill_worker() -> None:
    """R93, R95, R100, R121: A (prompt 1, 3 tokens, B = 1) is prefilled 0 -> 1 on the trtllm
    prefill worker (f = ceil((1 + 1) / 1) = 2: held 1 + (2 - 1) = 2), decoded on decode
    worker 1 (tokens at 102 and 202), which fails at 250 inside the step 202 -> 302: A migrates
    with k = 2 tokens and arrives on the prefill side at 250 as a request of L = 1 + 2 = 3
    positions and one output token (R100 with R121's substitution), so f = ceil((3 + 1) / 1) =
    4. Its prefill 250 -> 251 takes its 3 blocks (its first attempt's block was released at its
    activation, R104): held 3 + (4 - 3) = 4, the prefill worker's and pool's
    ``peak_reserved_blocks``. (The reference read f with the original prompt, 2, and wrote 2,
    a running request holding more than its f; the plain loop wrote 4.)"""
    limits = {
        "max_num_seqs": 4,
        "max_batched_tokens": 16,
        "max_model_len": 40,
        "prefill": {"mode": "whole"},
    }
    scenario = {
        "document": "scenario",
        "schema_version": "1.7",
        "fleet": {
            "pools": [
                {
                    "name": "p",
                    "workers": 1,
                    "role": "prefill",
                    "scheduler": {**limits, "style": "trtllm"},
                },
                {"name": "d", "workers": 2, "role": "decode"},
            ]
        },
        "routing": {"policy": "round_robin"},
        "scheduler": limits,
        "kv_cache": {"blocks": 8, "block_tokens": 1, "prefix_caching": False},
        "kv_transfer": {
            "bytes_per_token": 1,
            "bandwidth_bytes_per_s": 1_000_000,
            "base_latency_us": 0,
        },
        "failures": migrate({"pool": "d", "pool_worker": 0, "at_us": 250}),
    }
    timing = {
        "document": "timing_profile",
        "schema_version": "1.0",
        "model": {
            "kind": "synthetic_linear",
            "step_overhead_ns": 1000,
            "prefill_token_ns": 0,
            "decode_token_ns": 99_000,
        },
    }
    value = assert_agree((scenario, one_request(1, 3), timing), generated=False)
    assert value is not None
    a = value["requests"][0]
    assert a["token_times_us"][:2] == [102, 202]
    assert [(m["at_us"], m["output_tokens"]) for m in a["migrations"]] == [(250, 2)]
    prefill_steps = [s for s in value["trace"] if s["worker"] == 0]
    assert [(s["start_us"], s["prefill"]) for s in prefill_steps] == [
        (0, [{"id": "A", "tokens": 1}]),
        (250, [{"id": "A", "tokens": 3}]),
    ]
    assert value["workers"][0]["kv_cache"]["peak_reserved_blocks"] == 4
    assert value["pools"][0]["kv_cache"]["peak_reserved_blocks"] == 4
