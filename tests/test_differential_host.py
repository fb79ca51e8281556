"""Section 19 (R125 to R142): the reference against the plain per-step loop, byte for byte, on
generated continuing sessions and host pools.

The plain loop (``conformance/examples/independent/servesim_independent.py``) is extended from
SPEC.md section 19 alone (and the schemas), without reading the reference's code, so an
agreement here is two readings of the section agreeing. Inputs are
``continuing_session_input_triples`` (sessions whose turns extend: R125 to R128) and
``host_input_triples`` (host pools on small GPU caches: R129 to R140), aggregated and
disaggregated, with and without the trace, and bases chosen so that transfers outlast steps
(slow lanes) and host pools fill (one or two entries). Exit codes are compared too. Every report
the two agree on is also held to ``host_invariants``. No difference is tolerated.

``SERVESIM_HOST_EXAMPLES`` sets the examples of each test (default 25, for CI time);
``SERVESIM_HOST_EXAMPLES=1000`` runs a large batch.
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

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from servesim.contract.schemas import SUPPORTED_VERSIONS
from servesim_conformance import host_invariants
from servesim_conformance.properties import Documents, at_current_version, encode
from servesim_conformance.strategies import (
    cache_users,
    continuing_session_input_triples,
    disaggregated_host_input_triples,
    host_input_triples,
    kv_input_triples,
    session_input_triples,
)
from tests.test_differential import PLAIN
from tests.test_differential_pools import reference_outcome
from tests.test_host_invariants import (
    CASES,
    continuing_pairs,
)

EXAMPLES = int(os.environ.get("SERVESIM_HOST_EXAMPLES", "25"))

#: R141: reading scenario 1.8 needs report 10.0, which the plain loop is asked for.
HOST_REPORT_VERSION = "10.0"


def test_both_implementations_read_section_19() -> None:
    """The tier below runs only if both read scenario 1.8 and workload 1.3 (R141); a regression
    fails here instead of skipping the tier."""
    assert {"1.8"} <= set(SUPPORTED_VERSIONS["scenario"])
    assert {"1.3"} <= set(SUPPORTED_VERSIONS["workload"])
    plain = PLAIN.READS[HOST_REPORT_VERSION]
    assert "1.8" in plain["scenario"]
    assert "1.3" in plain["workload"]


def plain_outcome(documents: Documents, *, trace: bool) -> tuple[int, bytes | None]:
    """The plain loop's exit code and report 10.0 (None when it wrote none)."""
    scenario, workload, timing = documents
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        for name, document in (("s", scenario), ("w", workload), ("t", timing)):
            (folder / f"{name}.json").write_bytes(encode(document))
        arguments = ["replay", "--scenario", str(folder / "s.json")]
        arguments += ["--workload", str(folder / "w.json")]
        arguments += ["--timing-profile", str(folder / "t.json")]
        arguments += ["--output", str(folder / "r.json")]
        arguments += ["--report-version", HOST_REPORT_VERSION]
        with contextlib.redirect_stderr(io.StringIO()):
            code = PLAIN.main([*arguments, "--trace"] if trace else arguments)
        report = folder / "r.json"
        return code, at_current_version(report.read_bytes()) if report.exists() else None


def note_what_happened(documents: Documents, report: bytes | None) -> None:
    """Hypothesis events (``--hypothesis-show-statistics``): whether the section's distinctive
    paths were reached."""
    if report is None:
        event("stopped (exit 2 or 3)")
        return
    if continuing_pairs(documents[1]):
        event("a pair continues (R125)")
    value = json.loads(report)
    hosts = [
        rank["host"] for worker in value["workers"] for rank in worker["ranks"] if rank["host"]
    ]
    for member in ("loads", "evictions", "skipped_blocks", "reused_tokens"):
        if any(host[member] for host in hosts):
            event(f"host: {member}")
    transfers = value["host_transfers"] or []
    loaded = {t["request"] for t in transfers if t["kind"] == "load"}
    if any(r["outcome"] == "cut_off" and r["id"] in loaded for r in value["requests"]):
        event("a request that loaded cut off (R139)")
    if any(r["host_reused_prompt_tokens"] for r in value["requests"]):
        event("a first admission loaded from the host")
    if any(t["start_us"] > t["submitted_us"] for t in transfers):
        event("a transfer waited for its lane")
    if any(r["preemptions"] for r in value["requests"]) and hosts:
        event("a preemption beside a host pool")


def assert_agree(
    documents: Documents, *, trace: bool = True, generated: bool = True
) -> dict[str, Any] | None:
    """Both give the same exit code and bytes; the report keeps the host invariants.
    ``generated``: within a hypothesis test (events recorded). Returns the report's value."""
    reference = reference_outcome(documents, trace=trace)
    plain = plain_outcome(documents, trace=trace)
    if generated:
        note_what_happened(documents, reference[1])
    assert reference == plain
    if reference[1] is None:
        return None
    value: dict[str, Any] = json.loads(reference[1])
    host_invariants.check_host_report(documents[0], value)
    return value


@st.composite
def slow_lanes(draw: st.DrawFn, base: st.SearchStrategy[Documents]) -> Documents:
    """A triple of ``base`` whose host pools copy slowly (1,000 to 4,000 bytes a token over
    10^6 to 10^8 bytes a second: milliseconds a block), so that loads and stores outlast
    steps, lanes queue, entries stay pending when looked up and stop times fall inside
    transfers."""
    scenario, workload, timing = copy.deepcopy(draw(base))
    for cache, _ in cache_users(scenario):
        if "host" in cache:
            cache["host"]["bytes_per_token"] = draw(st.sampled_from((1_000, 4_000)))
            for lane in ("store_bytes_per_s", "load_bytes_per_s"):
                cache["host"][lane] = draw(st.sampled_from((1_000_000, 100_000_000)))
    return scenario, workload, timing


@st.composite
def tiny_host_pools(draw: st.DrawFn, base: st.SearchStrategy[Documents]) -> Documents:
    """A triple of ``base`` whose host pools hold 1 to 3 entries, so that host evictions and
    skipped blocks are common."""
    scenario, workload, timing = copy.deepcopy(draw(base))
    for cache, _ in cache_users(scenario):
        if "host" in cache:
            cache["host"]["blocks"] = draw(st.integers(1, 3))
    return scenario, workload, timing


@st.composite
def stopped_after_a_revisit(draw: st.DrawFn, base: st.SearchStrategy[Documents]) -> Documents:
    """A triple of ``base`` stopped (R62) 1 to 3,000 us after a request that comes back to an
    earlier prefix (``strategies.revisits``) arrives, so that the stop falls inside its load
    (R139: cut off while loading or loaded, its load counted as submitted). Triples without a
    revisit are left as they are."""
    scenario, workload, timing = copy.deepcopy(draw(base))
    again = [r for r in workload["requests"] if r["id"].startswith("again")]
    if not again:
        return scenario, workload, timing
    arrival = draw(st.sampled_from(again))["arrival_us"]
    first = min(r["arrival_us"] for r in workload["requests"])
    scenario["stop_at_us"] = max(first + 1, arrival + draw(st.integers(1, 3_000)))
    return scenario, workload, timing


# --- Continuing sessions (R125 to R128) ---------------------------------------------------------


@settings(max_examples=EXAMPLES)
@given(continuing_session_input_triples())
def test_reference_equals_plain_loop_with_continuing_sessions(documents: Documents) -> None:
    """R125 to R128: canonical hashes and the answer's blocks of continuing turns, on cached,
    state-aware and pool inputs, with stop times and a closed loop now and then."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(continuing_session_input_triples())
def test_reference_equals_plain_loop_with_continuing_sessions_without_the_trace(
    documents: Documents,
) -> None:
    """The same without --trace (the reference may skip work it need not report)."""
    assert_agree(documents, trace=False)


# --- Host pools (R129 to R140) ------------------------------------------------------------------


@settings(max_examples=EXAMPLES)
@given(host_input_triples())
def test_reference_equals_plain_loop_with_host_pools(documents: Documents) -> None:
    """R129 to R140 over aggregated inputs: small GPU caches and host pools, every bandwidth,
    shared prefixes, sessions (continuing or not), stop times, pools, ranks, styles."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(host_input_triples())
def test_reference_equals_plain_loop_with_host_pools_without_the_trace(
    documents: Documents,
) -> None:
    """The same without --trace."""
    assert_agree(documents, trace=False)


@settings(max_examples=EXAMPLES)
@given(slow_lanes(host_input_triples()))
def test_reference_equals_plain_loop_with_slow_host_lanes(documents: Documents) -> None:
    """R130, R133, R136, R139: transfers that outlast steps: queued lanes, pending entries at a
    lookup, loads and stores in flight at a stop time."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(stopped_after_a_revisit(slow_lanes(host_input_triples())))
def test_reference_equals_plain_loop_with_a_stop_during_a_load(documents: Documents) -> None:
    """R139: a stop time inside a load or a queued transfer: the request cut off, its load
    counted as submitted, its load wait only if the load completed at or before the stop."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(tiny_host_pools(host_input_triples(session_input_triples(kv_input_triples()))))
def test_reference_equals_plain_loop_with_tiny_host_pools(documents: Documents) -> None:
    """R131, R132: host evictions by recency, blocks skipped when every entry is pending or
    pinned."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(disaggregated_host_input_triples())
def test_reference_equals_plain_loop_with_host_pools_and_disaggregation(
    documents: Documents,
) -> None:
    """R139: host pools on prefill and decode pools (stores at prefill step ends, at
    activations and at decode step ends; loads for decode-side readmissions), with continuing
    sessions and every section 17 path."""
    assert_agree(documents)


# --- The draft's derivations, through both --------------------------------------------------------


def _timing() -> dict[str, Any]:
    return {
        "document": "timing_profile",
        "schema_version": "1.0",
        "model": {
            "kind": "synthetic_linear",
            "step_overhead_ns": 5000,
            "prefill_token_ns": 1000,
            "decode_token_ns": 10000,
        },
    }


def _workload(case: str) -> dict[str, Any]:
    def one(rid: str, arrival: int, prompt: int, hashes: list[int]) -> dict[str, Any]:
        return {
            "id": rid,
            "arrival_us": arrival,
            "prompt_tokens": prompt,
            "max_output_tokens": 1,
            "prefix_hashes": hashes,
        }

    if case == "d3":
        requests = [
            one("A", 0, 64, [1, 2, 3, 4]),
            one("B", 1, 64, [5, 6, 7, 8]),
            one("X", 200, 112, [11, 12, 13, 14, 15, 16, 17]),
            one("C1", 800, 80, [1, 2, 3, 4, 9]),
            one("C2", 900, 80, [5, 6, 7, 8, 10]),
        ]
    else:
        requests = [
            one("A", 0, 64, [1, 2, 3, 4]),
            one("X", 140, 120, [11, 12, 13, 14, 15, 16, 17]),
            one("C", 300, 80, [1, 2, 3, 4, 5]),
        ]
    return {
        "document": "workload",
        "schema_version": "1.1",
        "prefix_hash_block_tokens": 16,
        "requests": requests,
    }


def _within(expected: Any, actual: Any, where: str = "") -> None:
    """Every member of ``expected`` (recursively; lists of the same length) is in ``actual``."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), where
        for key, value in expected.items():
            assert key in actual, f"{where}/{key} missing"
            _within(value, actual[key], f"{where}/{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), where
        assert len(expected) == len(actual), f"{where}: {len(actual)} entries, not {len(expected)}"
        for index, (mine, theirs) in enumerate(zip(expected, actual, strict=True)):
            _within(mine, theirs, f"{where}/{index}")
    else:
        assert expected == actual, f"{where}: {actual!r}, derived {expected!r}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_derivations_through_both(case: str) -> None:
    """The draft's D2 and D3 (and D2 stopped at 320, and without a host pool), derived by hand
    (``tests/test_host_invariants.py``): both implementations agree and give every derived
    member."""
    make_scenario, make_report = CASES[case]
    documents = (make_scenario(), _workload(case), _timing())
    value = assert_agree(documents, generated=False)
    assert value is not None
    expected = make_report()
    expected.pop("schema_version")
    for entry in expected["requests"]:
        if entry["outcome"] != "completed":
            entry.pop("terminal_us")  # a cut-off request's terminal time is the stop time
    _within(expected, value)


def d1(flag: bool) -> Documents:
    """The draft's D1: a session whose turn 1 (P 80 ``[1,2,3,4,5]``) continues turn 0 (P 32
    ``[1,2]``, 33 output tokens) on a cache of 32 blocks of 16 tokens without a host pool."""
    scenario = {
        "document": "scenario",
        "schema_version": "1.1",
        "fleet": {"workers": 1},
        "routing": {"policy": "round_robin"},
        "scheduler": {
            "max_num_seqs": 8,
            "max_batched_tokens": 512,
            "max_model_len": 4096,
            "prefill": {"mode": "whole"},
        },
        "kv_cache": {"blocks": 32, "block_tokens": 16, "prefix_caching": True},
    }
    turns = [
        ("t0", 32, 33, [1, 2]),
        ("t1", 80, 1, [1, 2, 3, 4, 5]),
    ]
    workload: dict[str, Any] = {
        "document": "workload",
        "schema_version": "1.3",
        "prefix_hash_block_tokens": 16,
        "sessions": [{"id": "s"}],
        "requests": [
            {
                "id": rid,
                "arrival_us": 0,
                "prompt_tokens": prompt,
                "max_output_tokens": output,
                "prefix_hashes": hashes,
                "session": "s",
            }
            for rid, prompt, output, hashes in turns
        ],
    }
    if flag:
        workload["session_prompts_extend"] = True
    return scenario, workload, _timing()


@pytest.mark.parametrize("flag", [True, False])
def test_the_derivation_d1_through_both(flag: bool) -> None:
    """D1 (R125 to R127): with the flag t0's answer blocks 2 and 3 are registered when filled
    (at 277 and 517) and t1, released at 517, reuses 64 tokens and runs 517 -> 538 (TTFT 21);
    without it t1 reuses 32 and runs 517 -> 570 (TTFT 53). The rest is the same."""
    value = assert_agree(d1(flag), generated=False)
    assert value is not None
    t0, t1 = value["requests"]
    assert (t0["first_token_us"], t0["completion_us"], t0["reused_prompt_tokens"]) == (37, 517, 0)
    assert t1["arrival_us"] == 517
    expected = (64, 538, 21, 5) if flag else (32, 570, 53, 5)
    peak = value["workers"][0]["kv_cache"]["peak_blocks_in_use"]
    assert (t1["reused_prompt_tokens"], t1["completion_us"], t1["ttft_us"], peak) == expected
    assert (t1["host_reused_prompt_tokens"], t1["load_wait_us"]) == (0, None)
    assert value["summary"]["kv_cache"]["gpu_reuse_ratio"] == expected[0] / 112
    assert value["host_transfers"] == []


REGRESSIONS = Path(__file__).parent / "differential_regressions"


def _regression(name: str) -> Documents:
    scenario, workload, timing = json.loads((REGRESSIONS / name).read_text(encoding="utf-8"))
    return scenario, workload, timing


def test_r54_r127_an_answer_block_counts_at_routing() -> None:
    """Found by this tier (the plain loop capped cached(w, r) at floor(prompt / B)): t0's block 1
    straddles its prompt (P 5, B 3) and R127 names it by t1's hashes [0, 7], which Y registered;
    R54 counts it, so t0 sees 2 cached blocks at routing."""
    value = assert_agree(_regression("host-answer-block-counts-at-routing.json"), generated=False)
    assert value is not None
    routed = {r["id"]: r["cached_blocks_at_routing"] for r in value["requests"]}
    assert routed == {"Y": 0, "t0": 2, "t1": 2}


def test_r140_transfers_of_one_instant_are_listed_by_worker() -> None:
    """Found by this tier (the reference listed them in the order its decode runs created the
    two passes' ends): two workers store at 1054; R140 lists worker 0's store first."""
    value = assert_agree(_regression("host-transfers-of-one-instant.json"), generated=False)
    assert value is not None
    keys = [(t["submitted_us"], t["worker"], t["rank"]) for t in value["host_transfers"]]
    assert keys == sorted(keys)
    assert (1054, 0, 0) in keys
    assert (1054, 1, 0) in keys
