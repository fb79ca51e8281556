"""Section 17: disaggregated prefill and decode (SPEC.md R97 to R108).

Each expected value here is derived by hand from the rule it names, with the timing
``5 + P + 10 D`` microseconds a step (``STEP``) and transfers of one microsecond a token
(``TRANSFER``), so that a reader can check the arithmetic without the reference.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

import servesim
from servesim.contract.canonical import canonical_bytes
from servesim.contract.errors import InvalidInput, UnrepresentableTransfer
from servesim.contract.migrations import CHAIN
from servesim.contract.model import KvTransfer
from tests.helpers import as_report_8_0, timing_doc, workload_doc

STEP = timing_doc(step_overhead_ns=5_000, prefill_token_ns=1_000, decode_token_ns=10_000)
TRANSFER = {"bytes_per_token": 1000, "bandwidth_bytes_per_s": 1_000_000_000, "base_latency_us": 0}
LIMITS = {"max_num_seqs": 8, "max_batched_tokens": 512, "max_model_len": 4096}
CACHE = {"blocks": 64, "block_tokens": 16, "prefix_caching": False}


def scenario(
    prefill: int = 1, decode: int = 1, transfer: dict[str, Any] | None = None, **members: Any
) -> dict[str, Any]:
    """A scenario 1.6 of a prefill pool ``p`` and a decode pool ``d``."""
    return {
        "document": "scenario",
        "schema_version": "1.6",
        "fleet": {
            "pools": [
                {"name": "p", "workers": prefill, "role": "prefill"},
                {"name": "d", "workers": decode, "role": "decode"},
            ]
        },
        "routing": {"policy": "round_robin"},
        "scheduler": {**LIMITS, "prefill": {"mode": "whole"}},
        "kv_cache": CACHE,
        "kv_transfer": TRANSFER if transfer is None else transfer,
        **members,
    }


def _document(value: Any, role: str) -> servesim.contract.documents.Document:
    return servesim.load_document(json.dumps(value).encode(), f"{role}.json", role)


def replay(scenario_value: Any, workload: Any, *, trace: bool = False) -> dict[str, Any]:
    documents = (_document(scenario_value, "scenario"), _document(workload, "workload"))
    report: dict[str, Any] = json.loads(
        servesim.replay_documents(*documents, _document(STEP, "timing_profile"), trace=trace)
    )
    return report


def problems(scenario_value: Any) -> list[tuple[str, str]]:
    """The (file, pointer) of every problem R4 finds in the scenario."""
    try:
        replay(scenario_value, workload_doc(("a", 0, 10, 1)))
    except InvalidInput as error:
        return [(problem.file, problem.pointer) for problem in error.problems]
    raise AssertionError("the inputs were accepted")


# --- R97: roles and kv_transfer -----------------------------------------------------------------


def test_r97_role_checks_are_reported_at_their_pointers() -> None:
    only_prefill = scenario()
    only_prefill["fleet"]["pools"][1]["role"] = "prefill"
    assert problems(only_prefill) == [("scenario.json", "/fleet/pools")]
    without_role = scenario()
    del without_role["fleet"]["pools"][1]["role"]
    assert ("scenario.json", "/fleet/pools/1") in problems(without_role)
    no_transfer = scenario()
    del no_transfer["kv_transfer"]
    assert problems(no_transfer) == [("scenario.json", "")]
    aggregated = scenario()
    for pool in aggregated["fleet"]["pools"]:
        del pool["role"]
    assert problems(aggregated) == [("scenario.json", "/kv_transfer")]
    uncached = scenario()
    del uncached["kv_cache"]
    assert problems(uncached) == [
        ("scenario.json", "/fleet/pools/0"),
        ("scenario.json", "/fleet/pools/1"),
    ]
    sglang = scenario()
    sglang["fleet"]["pools"][1]["scheduler"] = {
        **LIMITS,
        "prefill": {"mode": "chunked", "max_chunk_tokens": 64},
        "style": "sglang",
    }
    assert problems(sglang) == [("scenario.json", "/fleet/pools/1/scheduler/style")]
    weighted = scenario(routing={"policy": "weighted_round_robin"})
    weighted["fleet"]["pools"][1]["weight"] = 2
    assert problems(weighted) == [("scenario.json", "/fleet/pools/1/weight")]


@pytest.mark.parametrize(
    ("member", "value"),
    [("bandwidth_bytes_per_s", 0), ("base_latency_us", -1), ("bytes_per_token", 0)],
)
def test_r97_transfer_bounds_are_the_schema_s(member: str, value: int) -> None:
    assert problems(scenario(transfer={**TRANSFER, member: value})) == [
        ("scenario.json", f"/kv_transfer/{member}")
    ]


def test_r99_decode_cache_aware_is_not_a_decode_policy() -> None:
    value = scenario(routing={"policy": "round_robin", "decode": {"policy": "cache_aware"}})
    assert problems(value) == [("scenario.json", "/routing/decode/policy")]


# --- R103: the transfer time ---------------------------------------------------------------------


def test_r103_transfer_time_rounds_up_in_exact_integers() -> None:
    # 100 tokens * 1000 bytes at 3 GB/s: 33.33... us, rounded up to 34; plus the base latency
    assert KvTransfer(1000, 3_000_000_000, 0).transfer_us(100) == 34
    assert KvTransfer(1000, 2_000_000_000, 7).transfer_us(100) == 57
    assert KvTransfer(1000, 1, 0).transfer_us(0) == 0
    # 2^32 - 1 bytes a token at 1 byte/s: the product passes 2^64 and stays exact
    huge = (2**32 - 1) * 100 * 1_000_000
    assert KvTransfer(2**32 - 1, 1, 0).transfer_us(100) == huge


def test_r103_a_transfer_that_would_end_after_2_53_is_found_when_it_starts() -> None:
    slow = {"bytes_per_token": 2**32 - 1, "bandwidth_bytes_per_s": 1, "base_latency_us": 0}
    with pytest.raises(UnrepresentableTransfer):
        replay(scenario(transfer=slow), workload_doc(("A", 0, 100, 3)))


# --- R100, R104, R105: one request end to end ------------------------------------------------


def test_r100_r104_r105_one_request_every_stamp() -> None:
    """Prefill 0 -> 105 (5 + 100); Held at 105, reserved at once on the idle decode worker;
    the transfer takes 100 us (100 tokens at 1 us each) and ends at 205; the decode worker is
    idle, so the request is activated at 205 and decodes 205 -> 220 -> 235 -> 250 (5 + 10)."""
    report = replay(scenario(), workload_doc(("A", 0, 100, 3)), trace=True)
    request = report["requests"][0]
    assert request["token_times_us"] == [220, 235, 250]
    assert (request["worker"], request["pool"], request["ttft_us"]) == (0, "p", 220)
    assert request["handoff"] == {
        "prefill_end_us": 105,
        "decode_worker": 1,
        "decode_pool": "d",
        "decode_rank": 0,
        "reserved_us": 105,
        "transfer_start_us": 105,
        "transfer_end_us": 205,
        "activation_us": 205,
        "transferred_tokens": 100,
        "transfer_us": 100,
        "decode_reused_tokens": 0,
    }
    prefill, decode = report["workers"]
    assert (prefill["handed_off"], prefill["completed"], prefill["output_tokens"]) == (1, 0, 0)
    assert (decode["activated"], decode["completed"], decode["decode_tokens"]) == (1, 1, 3)
    assert [pool["role"] for pool in report["pools"]] == ["prefill", "decode"]
    assert report["pools"][1]["output_tokens"] == 3  # R107: where it completed
    # R105: the first decode step's context is the prompt plus the hidden token
    assert [entry["shape"]["context_tokens"] for entry in report["trace"]] == [0, 101, 102, 103]
    assert report["summary"]["transfers"]["count"] == 1
    assert report["summary"]["itl_us"]["count"] == 2  # R105: the first token has no gap


def test_r104_a_transfer_ending_at_a_pass_end_activates_at_once() -> None:
    """A (100 + 30) decodes on d from 205 in passes of 15 us: 205 -> 220 -> 235 ... B (prompt
    50) arrives at 130 on the idle prefill worker: prefill 130 -> 185 (5 + 50), Held and
    reserved at 185, transfer of 50 us to 235, the instant A's pass ends: the completion comes
    first (R104), so B is activated at once and is in the pass formed at 235, of two decodes
    (5 + 20 = 25 us): B's first token at 260."""
    report = replay(scenario(), workload_doc(("A", 0, 100, 30), ("B", 130, 50, 3)))
    a, b = report["requests"]
    assert a["token_times_us"][:3] == [220, 235, 260]
    assert (b["handoff"]["prefill_end_us"], b["handoff"]["transfer_end_us"]) == (185, 235)
    assert b["handoff"]["activation_us"] == 235
    assert b["token_times_us"][0] == 260


def test_r104_a_transfer_ending_mid_pass_waits_for_the_pass_end() -> None:
    """As above with B arriving at 106: Held at 161, transfer to 211, in A's pass 205 -> 220:
    B is Ready until 220, activated then, and its first token comes at 245."""
    report = replay(scenario(), workload_doc(("A", 0, 100, 30), ("B", 106, 50, 3)))
    b = report["requests"][1]
    assert b["handoff"]["prefill_end_us"] == 161
    assert (b["handoff"]["transfer_end_us"], b["handoff"]["activation_us"]) == (211, 220)
    assert b["token_times_us"][0] == 245


def test_r100_rejection_is_judged_per_role() -> None:
    """The decode pool's cache of 7 blocks (112 tokens) cannot hold 100 + 20 tokens; the
    prefill side, with one output token, could."""
    value = scenario()
    value["fleet"]["pools"][1]["kv_cache"] = {**CACHE, "blocks": 7}
    report = replay(value, workload_doc(("A", 0, 100, 20), ("B", 0, 100, 12)))
    a, b = report["requests"]
    assert (a["reject_reason"], a["handoff"]) == ("exceeds_kv_cache", None)
    assert b["outcome"] == "completed"
    budget = scenario()
    budget["fleet"]["pools"][1]["scheduler"] = {
        **LIMITS,
        "max_batched_tokens": 64,
        "prefill": {"mode": "whole"},
    }
    assert replay(budget, workload_doc(("A", 0, 100, 3)))["requests"][0]["outcome"] == (
        "completed"
    )  # R100: reason 4 concerns a prefill; the decode pool prefills nothing


def test_r102_a_reservation_waits_for_decode_memory() -> None:
    """d has 8 blocks of 16. A (100 + 20) reserves 7 at 105 and decodes from 205 to 505
    (20 passes of 15 us), taking its 8th block at its 13th pass. B (100 + 3) is Held at 210
    and cannot have 7 blocks until A completes at 505: reserved then, transferred to 605,
    first token 620."""
    value = scenario()
    value["fleet"]["pools"][1]["kv_cache"] = {**CACHE, "blocks": 8}
    report = replay(value, workload_doc(("A", 0, 100, 20), ("B", 1, 100, 3)))
    a, b = report["requests"]
    assert a["completion_us"] == 505
    assert (b["handoff"]["prefill_end_us"], b["handoff"]["reserved_us"]) == (210, 505)
    assert b["token_times_us"] == [620, 635, 650]
    assert report["summary"]["transfers"]["reservation_wait_us"]["max"] == 295


# --- R108: versions ------------------------------------------------------------------------------


def test_r108_an_aggregated_report_is_the_migrated_7_0_report() -> None:
    """A scenario without roles: every new member is R108's migration value."""
    aggregated = scenario()
    for pool in aggregated["fleet"]["pools"]:
        del pool["role"]
    del aggregated["kv_transfer"]
    # R124: the 8.0 form of the report (a fleet that never changes), whatever the reference writes
    report = as_report_8_0(replay(aggregated, workload_doc(("A", 0, 100, 3), ("B", 0, 50, 2))))
    old = copy.deepcopy(report)
    old["schema_version"] = "7.0"
    for request in old["requests"]:
        del request["handoff"]
    for entry in [*old["workers"], *old["pools"]]:
        del entry["handed_off"], entry["activated"]
    for worker in old["workers"]:
        for rank in worker["ranks"]:
            del rank["handed_off"], rank["activated"]
    for pool in old["pools"]:
        del pool["role"]
    del old["summary"]["transfers"]
    migrated = CHAIN.migrate(old, "report", "8.0").document
    assert canonical_bytes(migrated) == canonical_bytes(report)


def test_r108_every_scenario_1_5_is_a_scenario_1_6() -> None:
    """The relabel step: a 1.5 scenario, read as 1.6, gives the same report (but its digest)."""
    value = scenario()
    for pool in value["fleet"]["pools"]:
        del pool["role"]
    del value["kv_transfer"]
    value["schema_version"] = "1.5"
    old = replay(value, workload_doc(("A", 0, 100, 3)))
    value["schema_version"] = "1.6"
    new = replay(value, workload_doc(("A", 0, 100, 3)))
    del old["inputs"], new["inputs"]
    assert old == new


def test_r101_held_blocks_leave_the_prefill_worker_without_a_step() -> None:
    """p has 8 blocks of 16. A and B (100 + 3 each) arrive at 0; A is admitted (7 blocks), B
    is refused (1 block free) and A's step runs 0 -> 105. A is then Held with its 7 blocks,
    so at 105 p forms no step (R101). A's transfer ends at 205; its activation releases its
    blocks on p, which schedules at 205: B is prefilled 205 -> 310, transferred 310 -> 410,
    and decodes 410 -> 425 -> 440 -> 455 (A has completed at 250)."""
    value = scenario()
    value["fleet"]["pools"][0]["kv_cache"] = {**CACHE, "blocks": 8}
    report = replay(value, workload_doc(("A", 0, 100, 3), ("B", 0, 100, 3)), trace=True)
    a, b = report["requests"]
    assert a["token_times_us"] == [220, 235, 250]
    assert (b["first_scheduled_us"], b["queue_us"]) == (205, 205)
    assert b["handoff"]["prefill_end_us"] == 310
    assert b["token_times_us"] == [425, 440, 455]
    assert report["workers"][0]["steps"] == 2  # no step without a token was started


def test_r106_a_stop_during_the_transfer_cuts_it_off() -> None:
    """Stop at 150: A is Transferring (105 -> 205). It is cut off at 150; the stamps reached
    stand, the transfer's end and the activation are null; no transfer ended."""
    report = replay(scenario(stop_at_us=150), workload_doc(("A", 0, 100, 3)))
    request = report["requests"][0]
    assert (request["outcome"], request["output_tokens"], request["ttft_us"]) == (
        "cut_off",
        0,
        None,
    )
    handoff = request["handoff"]
    assert (handoff["prefill_end_us"], handoff["reserved_us"]) == (105, 105)
    assert (handoff["transfer_end_us"], handoff["activation_us"]) == (None, None)
    transfers = report["summary"]["transfers"]
    assert (transfers["count"], transfers["reservation_wait_us"]["count"]) == (0, 1)
