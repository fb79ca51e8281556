"""Scheduler styles (SPEC.md section 16, R88 to R96): small hand-computed replays, one rule each.

Every timing profile here is synthetic: ``1000 + P`` microseconds a step (1 us per prefill
token, decode free), so a decode-only step lasts 1000 us and each time below is worked out by
hand in the test's docstring.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import servesim
from servesim.contract.errors import InvalidInput
from servesim.contract.migrations import CHAIN
from servesim.contract.model import SglangOptions
from servesim.engine.formation.sglang import RATIO_DENOMINATOR, ratio_constants
from servesim_conformance.evolution.strategies import documents
from tests.helpers import as_report_7_0, released_scenario_schema, timing_doc, workload_doc

TIMING = timing_doc(step_overhead_ns=1_000_000, prefill_token_ns=1_000, decode_token_ns=0)
Q = RATIO_DENOMINATOR


def scenario(
    style: str, *, chunk: int = 64, budget: int = 64, seqs: int = 4, **members: Any
) -> Any:
    sglang = members.pop("sglang", None)
    scheduler = {
        "max_num_seqs": seqs,
        "max_batched_tokens": budget,
        "max_model_len": 100_000,
        "prefill": {"mode": "chunked", "max_chunk_tokens": chunk},
        "style": style,
    }
    if sglang is not None:
        scheduler["sglang"] = sglang
    return {
        "document": "scenario",
        "schema_version": "1.5",
        "fleet": {"workers": 1},
        "routing": {"policy": "round_robin"},
        "scheduler": scheduler,
        **members,
    }


def cache(blocks: int, block_tokens: int) -> dict[str, Any]:
    return {"blocks": blocks, "block_tokens": block_tokens, "prefix_caching": False}


def _document(value: Any, role: str) -> servesim.contract.documents.Document:
    return servesim.load_document(json.dumps(value).encode(), f"{role}.json", role)


def replay(scenario_value: Any, workload: Any) -> dict[str, Any]:
    documents = (
        _document(scenario_value, "scenario"),
        _document(workload, "workload"),
        _document(TIMING, "timing_profile"),
    )
    report: dict[str, Any] = json.loads(servesim.replay_documents(*documents, trace=True))
    return report


def times(report: dict[str, Any]) -> dict[str, list[int]]:
    return {request["id"]: request["token_times_us"] for request in report["requests"]}


def steps(report: dict[str, Any]) -> list[tuple[int, str]]:
    return [(entry["start_us"], entry["kind"]) for entry in report["trace"]]


def test_r88_style_defaults_to_vllm_and_is_reported() -> None:
    """R88, R95: without ``style`` a 1.5 scenario is vLLM's; the worker and pool say so."""
    value = scenario("vllm")
    del value["scheduler"]["style"]
    report = replay(value, workload_doc(("a", 0, 10, 2)))
    assert report["schema_version"] == "10.0"
    assert [worker["style"] for worker in report["workers"]] == ["vllm"]
    assert [pool["style"] for pool in report["pools"]] == ["vllm"]
    assert report["trace"][0]["new_token_ratio"] is None


@pytest.mark.parametrize(
    ("changes", "pointer"),
    [
        ({"chunk": 128, "budget": 64}, "/scheduler/prefill/max_chunk_tokens"),
        ({"chunk": 40, "kv_cache": cache(16, 16)}, "/scheduler/prefill/max_chunk_tokens"),
    ],
)
def test_r88_sglang_chunk_fits_the_budget_and_the_pages(
    changes: dict[str, Any], pointer: str
) -> None:
    """R88 (R4): under sglang ``max_chunk_tokens`` is at most the step budget and, with a
    cache, a whole number of pages."""
    with pytest.raises(InvalidInput) as error:
        replay(scenario("sglang", **changes), workload_doc(("a", 0, 10, 1)))
    assert [problem.pointer for problem in error.value.problems] == [pointer]


def test_r88_sglang_options_only_with_the_sglang_style() -> None:
    """R88: ``scheduler.sglang`` under another style is invalid (the schema's rule)."""
    with pytest.raises(InvalidInput) as error:
        replay(scenario("trtllm", sglang={}), workload_doc(("a", 0, 10, 1)))
    assert any("/scheduler" in problem.pointer for problem in error.value.problems)


def test_r89_constants_are_exact_for_every_conservativeness() -> None:
    """R89: init 0.7 c, min 14 % of it, 600 decays between, all on the grid of Q."""
    for permille in (1, 7, 300, 1000, 1428, 1429, 10_000):
        initial, least, decay = ratio_constants(SglangOptions(4096, permille))
        assert initial == min(210_000 * permille, Q)
        assert least * 100 == initial * 14
        assert initial - 600 * decay == least


def test_r90_prefill_first_running_decode_waits() -> None:
    """R90: A (10 + 3) at 0, B (20 + 2) at 1500, no cache. [0, 1010) prefills A (token 1);
    [1010, 2010) decodes A (token 2); at 2010 B can be admitted, so the step is prefill-only
    and A waits: [2010, 3030) gives B its first token; [3030, 4030) decodes both."""
    report = replay(scenario("sglang"), workload_doc(("A", 0, 10, 3), ("B", 1500, 20, 2)))
    assert times(report) == {"A": [1010, 2010, 4030], "B": [3030, 4030]}
    assert steps(report) == [(0, "prefill"), (1010, "decode"), (2010, "prefill"), (3030, "decode")]
    ratios = [entry["new_token_ratio"] for entry in report["trace"]]
    assert ratios == [0.7, 0.7, 209_699_000 / Q, 209_699_000 / Q]  # one decode step decayed it


def test_r90_estimate_refuses_until_ten_decays() -> None:
    """R89, R90: cache 18 x 64, clip 100. A (64 + 120) holds 2 blocks while it decodes, so
    T = 16 * 64 = 1024 and M = 100; Y (896 + 59) needs 955 + 100 n / Q < 1024, n < 0.69 Q:
    refused while n = 0.7 Q - k * 301,000 for k = 0 to 9, admitted after ten decays (at
    1064 + 10 * 1000 = 11064), a prefill-only step of 896 tokens."""
    value = scenario(
        "sglang",
        chunk=1024,
        budget=1024,
        kv_cache=cache(18, 64),
        sglang={"clip_max_new_tokens": 100},
    )
    report = replay(value, workload_doc(("A", 0, 64, 120), ("Y", 1500, 896, 59)))
    admitted = [
        entry for entry in report["trace"] if entry["prefill"] and entry["prefill"][0]["id"] == "Y"
    ]
    assert [(entry["start_us"], entry["end_us"]) for entry in admitted] == [(11064, 12960)]
    assert admitted[0]["new_token_ratio"] == (210_000_000 - 10 * 301_000) / Q


def test_r91_retraction_fewest_output_to_the_tail_and_reestimate() -> None:
    """R91, R89 rule 2: cache 24 x 1, clip 2. A, B (4 + 10) at 0, C (4 + 10) at 1200.
    At the step formed at 6012 A, B, C hold 8 blocks each, need 3 > 0 free: C (4 tokens
    against 5) is retracted; the survivors have produced 10 of 20: n = min(Q, ceil(Q * 50 /
    21)) = Q. At 10012 A and B tie (9 tokens, prompt 4): B, the later, is retracted and queues
    behind C, which is readmitted first (at 11012, L = 8)."""
    value = scenario("sglang", seqs=8, kv_cache=cache(24, 1), sglang={"clip_max_new_tokens": 2})
    report = replay(value, workload_doc(("A", 0, 4, 10), ("B", 0, 4, 10), ("C", 1200, 4, 10)))
    retracted = [
        (entry["start_us"], entry["retracted"]) for entry in report["trace"] if entry["retracted"]
    ]
    assert retracted == [(6012, ["C"]), (10012, ["B"])]
    after = {entry["start_us"]: entry["new_token_ratio"] for entry in report["trace"]}
    assert after[7012] == 1
    assert {r["id"]: r["retractions"] for r in report["requests"]} == {"A": 0, "B": 1, "C": 1}
    assert times(report)["C"][4] == 12020  # its fifth token ends its recompute of 8 tokens
    assert report["workers"][0]["kv_cache"]["retractions"] == 2
    assert report["summary"]["kv_cache"]["retractions"] == 2
    assert all(entry["kind"] != "mixed" for entry in report["trace"])


def test_r93_reservation_refuses_and_never_preempts() -> None:
    """R93: B 4, 6 blocks. r1, r2 (8 + 8) at 0: f = 4 each; r1 is admitted (4 <= 6); r2
    needs 4 > 6 - 2 held - 2 reserved = 2, and waits until r1 completes (at 8008); vLLM runs
    both at once and preempts r2."""
    workload = workload_doc(("r1", 0, 8, 8), ("r2", 0, 8, 8))
    trtllm = replay(scenario("trtllm", chunk=16, budget=16, kv_cache=cache(6, 4)), workload)
    assert times(trtllm)["r1"][-1] == 8008
    assert times(trtllm)["r2"][0] == 9016
    assert [r["preemptions"] for r in trtllm["requests"]] == [0, 0]
    assert trtllm["workers"][0]["kv_cache"]["peak_reserved_blocks"] == 4
    vllm = replay(scenario("vllm", chunk=16, budget=16, kv_cache=cache(6, 4)), workload)
    assert sum(r["preemptions"] for r in vllm["requests"]) == 1
    assert vllm["workers"][0]["kv_cache"]["peak_reserved_blocks"] is None


def test_r90_sglang_rejects_without_a_page_of_slack() -> None:
    """R90: cache 4 x 16 (64 tokens): 30 + 30 + 16 > 64 is ``exceeds_kv_cache`` under sglang,
    accepted under vllm and trtllm (60 <= 64)."""
    workload = workload_doc(("a", 0, 30, 30))
    for style, reason in (("sglang", "exceeds_kv_cache"), ("vllm", None), ("trtllm", None)):
        value = scenario(style, chunk=64, budget=64, kv_cache=cache(4, 16))
        assert replay(value, workload)["requests"][0]["reject_reason"] == reason


def test_r96_migration_adds_the_vllm_values() -> None:
    """R96: a 6.0 report migrates to the 7.0 report of the same replay, byte for byte."""
    value = scenario("vllm", kv_cache=cache(8, 4))
    value["schema_version"] = "1.4"
    del value["scheduler"]["style"]
    report = replay(value, workload_doc(("a", 0, 10, 3), ("b", 5, 20, 2)))
    six = as_report_7_0(report)  # R108: the aggregated fleet's 7.0 form
    six["schema_version"] = "6.0"
    for request in six["requests"]:
        del request["retractions"]
    for entry in six["trace"]:
        del entry["kind"], entry["retracted"], entry["new_token_ratio"]
    for holder in [
        *six["workers"],
        *six["pools"],
        *[r for w in six["workers"] for r in w["ranks"]],
    ]:
        holder.pop("style", None)
        del holder["kv_cache"]["retractions"], holder["kv_cache"]["peak_reserved_blocks"]
    del six["summary"]["kv_cache"]["retractions"]
    assert CHAIN.migrate(six, "", "7.0").document == as_report_7_0(report)


# --- R35, R96: scenario 1.5 is a minor version -----------------------------------------------


@settings(max_examples=150, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data())
def test_r96_every_scenario_1_4_is_a_scenario_1_5(data: st.DataObject) -> None:
    """The reviewer's decision for scenario 1.5 (schemas/reviews/issue-24-styles.md):
    backward compatible, so a minor version is right. ``servesim schema review`` leaves the
    new ``if``/``then`` and ``dependentSchemas`` of ``scheduler`` undecided; both apply only
    to a scheduler holding ``style`` or ``sglang``, which no 1.4 document has. Any 1.4
    scenario drawn from the 1.4 schema, relabelled, is valid under 1.5."""
    old, new = released_scenario_schema("1.4"), released_scenario_schema("1.5")
    scenario = data.draw(documents(old))
    assume(jsonschema.Draft202012Validator(old).is_valid(scenario))
    jsonschema.validate({**scenario, "schema_version": "1.5"}, new)


def test_r94_each_rank_keeps_its_own_ratio() -> None:
    """R94: one worker of two sglang ranks, no cache. A (10 + 3) joins rank 0 and B (10 + 2)
    rank 1 (R80). Pass [0, 1010): both prefill. Pass [1010, 2010): both decode with their own
    n_init. Pass [2010, 3010): rank 0 alone decodes A, with the ratio its one decode decayed
    (B completed at 2010 and its rank, left without work, is reset)."""
    value = scenario("sglang")
    value["fleet"] = {"workers": 1, "dp_size": 2}
    report = replay(value, workload_doc(("A", 0, 10, 3), ("B", 0, 10, 2)))
    seen = [(e["start_us"], e["rank"], e["kind"], e["new_token_ratio"]) for e in report["trace"]]
    assert seen == [
        (0, 0, "prefill", 0.7),
        (0, 1, "prefill", 0.7),
        (1010, 0, "decode", 0.7),
        (1010, 1, "decode", 0.7),
        (2010, 0, "decode", 209_699_000 / Q),
    ]
