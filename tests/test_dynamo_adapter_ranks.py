"""The Dynamo adapter on pools and attention-DP ranks (SPEC.md R77 to R86), without Dynamo.

Dynamo's records are fixtures recorded from ai-dynamo 1.6.1's documented replay with
``dp_size`` 2 (conformance/adapters/dynamo/fixtures/ranks-*.json: the documents of a case of
ranks_cases.py and the records Dynamo returned, trimmed to the members the adapter reads). The
expected values are the hand derivations of ranks_cases.py, from SPEC.md R80 and R83.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from servesim.contract.documents import Document

ROOT = Path(__file__).resolve().parents[1]
ADAPTER = ROOT / "conformance" / "adapters" / "dynamo"
sys.path.insert(0, str(ADAPTER))

from servesim_dynamo import cli, dynamo_runtime  # noqa: E402
from servesim_dynamo.mapping import (  # noqa: E402
    FixedTiming,
    Unsupported,
    check_scenario,
    fleet_shape,
)
from servesim_dynamo.ranks import match_records  # noqa: E402
from servesim_dynamo.timeline import DynamoResult  # noqa: E402


def fixture(case: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((ADAPTER / "fixtures" / f"ranks-{case}.json").read_text())
    return value


def as_document(kind: str, value: dict[str, Any]) -> Document:
    """A document as the reference's reader returns it (R1 to R4 are not under test here)."""
    data = json.dumps(value).encode()
    return Document(kind, kind, value["schema_version"], data, value)


def replay_recorded(
    recorded: dict[str, Any], monkeypatch: pytest.MonkeyPatch, records: list[dict[str, Any]]
) -> dict[str, Any]:
    monkeypatch.setattr(dynamo_runtime, "run_trace", lambda *a, **k: copy.deepcopy(records))
    documents = recorded["documents"]
    data = cli.replay_documents(
        as_document("scenario", documents["scenario"]),
        as_document("workload", documents["workload"]),
        as_document("timing_profile", documents["timing-profile"]),
    )
    report: dict[str, Any] = json.loads(data)
    return report


def test_barrier_and_arrival_on_idle_rank_as_r83_derives(monkeypatch: pytest.MonkeyPatch) -> None:
    """R83: b joins idle rank 1 during a's prefill pass and waits for the next pass; there a's
    decode (200 us) waits at the barrier for b's prefill (300 us). R85: the worker counts its
    passes and their durations, each rank its own steps and own durations."""
    recorded = fixture("barrier-and-arrival-on-idle-rank")
    report = replay_recorded(recorded, monkeypatch, recorded["records"])
    assert report["schema_version"] == "8.0"
    by_id = {r["id"]: r for r in report["requests"]}
    assert (by_id["a"]["rank"], by_id["a"]["token_times_us"]) == (0, [300, 600, 800])
    assert (by_id["b"]["rank"], by_id["b"]["token_times_us"]) == (1, [600])
    assert by_id["b"]["first_scheduled_us"] == 300
    assert {r["pool"] for r in report["requests"]} == {"default"}
    worker = report["workers"][0]
    assert (worker["steps"], worker["busy_us"]) == (3, 800)
    ranks = [(q["rank"], q["steps"], q["busy_us"], q["routed"]) for q in worker["ranks"]]
    assert ranks == [(0, 3, 300 + 200 + 200, 1), (1, 1, 300, 1)]
    assert report["pools"][0]["dp_size"] == 2
    assert report["summary"]["steps"] == 3


def test_rejected_request_takes_a_rank_turn_in_dynamo(monkeypatch: pytest.MonkeyPatch) -> None:
    """A difference (RESULTS.md, rank-rotation-after-rejection): Dynamo places the request it
    later rejects, moving the worker's rank rotation, where R80 moves none."""
    recorded = fixture("rejected-request-moves-no-rotation")
    report = replay_recorded(recorded, monkeypatch, recorded["records"])
    by_id = {r["id"]: r for r in report["requests"]}
    assert by_id["a"]["outcome"] == "rejected"
    assert (by_id["b"]["rank"], by_id["b"]["token_times_us"]) == (1, [300])


def test_a_record_that_does_not_fit_the_passes_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A token count the worker's passes cannot give is an error, never a guess."""
    recorded = fixture("barrier-and-arrival-on-idle-rank")
    records = copy.deepcopy(recorded["records"])
    for record in records:
        if record["output_length"] == 3:
            record["output_length"] = 4
    with pytest.raises(DynamoResult, match="tokens"):
        replay_recorded(recorded, monkeypatch, records)


def test_records_are_matched_by_dynamo_round_robin_placement() -> None:
    """Without sessions Dynamo's records carry no id: each is matched by its worker, rank,
    arrival, prompt and output; one placed elsewhere than the rule says is an error."""
    recorded = fixture("barrier-and-arrival-on-idle-rank")
    requests = recorded["documents"]["workload"]["requests"]
    records = list(reversed(recorded["records"]))
    matched = match_records(records, requests, 1, 2)
    assert [m["routing_history"][-1]["dp_rank"] for m in matched] == [0, 1]
    moved = copy.deepcopy(records)
    for record in moved:
        record["routing_history"][-1]["dp_rank"] = 0
    with pytest.raises(DynamoResult, match="round robin"):
        match_records(moved, requests, 1, 2)


def scenario(fleet: dict[str, Any], policy: str = "round_robin") -> dict[str, Any]:
    limits = {
        "max_num_seqs": 4,
        "max_batched_tokens": 64,
        "max_model_len": 1024,
        "prefill": {"mode": "whole"},
    }
    return {
        "document": "scenario",
        "schema_version": "1.4",
        "fleet": fleet,
        "routing": {"policy": policy},
        "scheduler": limits,
    }


def test_alike_pools_are_one_dynamo_fleet_numbered_in_pool_order() -> None:
    """R77, R78: alike pools are the summed workers, in pool order."""
    pools = [{"name": "x", "workers": 2, "dp_size": 2}, {"name": "y", "workers": 1, "dp_size": 2}]
    shape = fleet_shape(scenario({"pools": pools}))
    assert (shape.workers, shape.dp_size, shape.pools) == (3, 2, (("x", 2), ("y", 1)))
    assert fleet_shape(scenario({"workers": 4, "dp_size": 4})).pools == (("default", 4),)


@pytest.mark.parametrize(
    "pools",
    [
        [{"name": "x", "workers": 1, "dp_size": 2}, {"name": "y", "workers": 1}],
        [
            {"name": "x", "workers": 1},
            {
                "name": "y",
                "workers": 1,
                "scheduler": {
                    "max_num_seqs": 2,
                    "max_batched_tokens": 64,
                    "max_model_len": 1024,
                    "prefill": {"mode": "whole"},
                },
            },
        ],
    ],
    ids=["dp_size", "limits"],
)
def test_pools_that_differ_are_refused_by_name(pools: list[dict[str, Any]]) -> None:
    """Dynamo's aggregated replay takes one engine configuration for all its workers."""
    with pytest.raises(Unsupported) as refused:
        check_scenario(scenario({"pools": pools}))
    assert refused.value.feature == "fleet.pools"


def test_weighted_round_robin_only_with_equal_weights() -> None:
    """R81 with every weight equal is R13's round robin, which Dynamo has; other weights not."""
    equal = [{"name": n, "workers": 1, "weight": 2} for n in ("x", "y")]
    check_scenario(scenario({"pools": equal}, "weighted_round_robin"))
    unequal = [{"name": "x", "workers": 1, "weight": 3}, {"name": "y", "workers": 1, "weight": 1}]
    with pytest.raises(Unsupported) as refused:
        check_scenario(scenario({"pools": unequal}, "weighted_round_robin"))
    assert refused.value.feature == "routing.weighted_round_robin"


def test_a_profile_per_pool_exits_2_naming_timing_per_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """R84, R87: timing.per_pool is not declared; given anyway it is refused by name."""
    report = tmp_path / "report.json"
    code = cli.main(
        [
            "--scenario",
            "s.json",
            "--workload",
            "w.json",
            "--timing-profile",
            "x=a.json",
            "--timing-profile",
            "y=b.json",
            "--output",
            str(report),
        ]
    )
    assert code == cli.EXIT_INVALID
    assert "timing.per_pool" in capsys.readouterr().err
    assert not report.exists()


def test_fixed_timing_of_the_fixtures() -> None:
    """The fixtures' grids are Dynamo's fixed model of 300 us prefill, 200 us decode."""
    from servesim_dynamo.mapping import fixed_timing, limits

    recorded = fixture("barrier-and-arrival-on-idle-rank")
    documents = recorded["documents"]
    timing = fixed_timing(documents["timing-profile"], limits(documents["scenario"]))
    assert timing == FixedTiming(prefill_us=300, decode_us=200)
