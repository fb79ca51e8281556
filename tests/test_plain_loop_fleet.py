"""The plain loop's section 18 (R109 to R124) against numbers derived by hand.

``conformance/examples/independent/servesim_independent.py`` was extended from SPEC.md section
18 alone (``QUESTIONS-fleet.md`` beside it lists the readings it took). These tests hold it to
small scenarios whose every expected value is worked out below from the spec: a scale-up with a
startup time and a drain (R110 to R112), a cancellation (R112), the reactive policy with and
without a cooldown and its kv_use metric (R115), weighted round robin over the candidates
(R114), a failure that cuts a decode pass, and one that cuts a chunked prefill, and migrates
its request (R117, R118), a migrated request that recomputes by parts, the migration limit and
the policy "fail" (R118), an allotment whose step is cut by a failure or by the stop time,
which recomputes nothing (R118 as SPEC.md db339b8 decides), a failed session turn (R120), a
recovery and no routable worker (R114, R119), a failure of a prefill worker while a transfer
runs, of a decode worker with a reservation, and a release at a failure that must schedule the
prefill worker (R101, R121), R4's checks of section 18 (exit 2 at the pointer R110, R115 and
R116 give) and R124's versions. They also hold it to the hand-derived golden cases of section 18
(``golden/valid/fleet-*`` with a ``DERIVATION.md``: every value it derives) and to the
rejection of the invalid ones (``golden/invalid/fleet-*``: exit 2 at the fault's pointer).

The timing profile is ``synthetic_linear`` with a 1000 us step overhead, 1 us per prefill token
and nothing per decode: a step lasts ``1000 + P`` us (R22).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.golden_cases import (
    GOLDEN,
    MANIFEST,
    derived_cases,
    derived_values,
    replay_case,
    wrong_values,
)
from tests.test_differential import PLAIN

PROFILE = {
    "document": "timing_profile",
    "schema_version": "1.0",
    "model": {
        "kind": "synthetic_linear",
        "step_overhead_ns": 1_000_000,
        "prefill_token_ns": 1000,
        "decode_token_ns": 0,
    },
}
SCHEDULER = {
    "max_num_seqs": 4,
    "max_batched_tokens": 64,
    "max_model_len": 64,
    "prefill": {"mode": "whole"},
}
CACHE = {"blocks": 64, "block_tokens": 16, "prefix_caching": False}


def scenario(fleet: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "document": "scenario",
        "schema_version": "1.7",
        "fleet": fleet,
        "routing": {"policy": "round_robin"},
        "scheduler": copy.deepcopy(SCHEDULER),
        "kv_cache": dict(CACHE),
        **more,
    }


def workload(*requests: tuple[str, int, int, int]) -> dict[str, Any]:
    return {
        "document": "workload",
        "schema_version": "1.0",
        "requests": [
            {"id": i, "arrival_us": t, "prompt_tokens": p, "max_output_tokens": m}
            for i, t, p, m in requests
        ],
    }


def run(
    folder: Path, scenario_doc: Any, workload_doc: Any, *options: str
) -> tuple[int, str, dict[str, Any] | None]:
    """The plain loop's exit code, standard error and report (with the trace)."""
    for name, document in (("s", scenario_doc), ("w", workload_doc), ("t", PROFILE)):
        (folder / f"{name}.json").write_text(json.dumps(document))
    arguments = ["replay", "--scenario", str(folder / "s.json")]
    arguments += ["--workload", str(folder / "w.json"), "--output", str(folder / "r.json")]
    arguments += ["--timing-profile", str(folder / "t.json"), "--trace", *options]
    error = io.StringIO()
    with contextlib.redirect_stderr(error):
        code = PLAIN.main(arguments)
    output = folder / "r.json"
    report = json.loads(output.read_text()) if output.exists() else None
    return code, error.getvalue(), report


def ok(folder: Path, scenario_doc: Any, workload_doc: Any) -> dict[str, Any]:
    code, error, report = run(folder, scenario_doc, workload_doc)
    assert (code, error) == (0, "")
    assert report is not None
    assert report["schema_version"] == "10.0"
    return report


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in report["requests"]}


def life(worker: dict[str, Any]) -> list[tuple[str, int]]:
    return [(e["state"], e["at_us"]) for e in worker["lifecycle"]]


def times(worker: dict[str, Any]) -> tuple[int, int, int, int, int]:
    return (
        worker["worker_us"],
        worker["starting_us"],
        worker["active_us"],
        worker["draining_us"],
        worker["failed_us"],
    )


def test_r110_to_r112_scale_up_with_startup_then_drain(tmp_path: Path) -> None:
    """One worker, startup 500, schedule [0 -> 2, 3000 -> 1]; A (0, prompt 10, 3 tokens),
    B (600, 10, 3), C (700, 10, 1).

    0: A arrives, joins w0 (the only candidate), w0's pass P=10 ends 1010. The decision at 0
    is the last event of 0 (R113): e = 1 < 2, w1 is created (global index 1, pool_worker 1),
    starting, active at 500 (R111). 600: B; candidates w0, w1, last = 0, so w1 (R114); w1's
    pass ends 1610. 700: C; last = 1, none above, so w0; it waits (w0 busy). 1010: A's token 1;
    pass: decode A + C's prefill 10 -> 2020. 1610: B's token 1; decode -> 2610. 2020: A's
    token 2, C's token 1 (C completes); decode A -> 3020. 2610: B's token 2; decode -> 3610.
    3000: the decision: e = 2 > 1, no starting worker, so the highest active, w1, drains; it
    has a pass and B, so it stays. 3020: A completes. 3610: B completes; w1 has no pass and no
    request: removed at 3610 (R112). Makespan 3610 (R28).

    Worker time (R122): w0 active 3610; w1 starting 500, active 2500, draining 610: 3610.
    w0 busy 1010 + 1010 + 1000 = 3020; w1 busy 1010 + 1000 + 1000 = 3010."""
    s = scenario(
        {
            "workers": 1,
            "scaling": {
                "startup_us": 500,
                "schedule": [{"at_us": 0, "target": 2}, {"at_us": 3000, "target": 1}],
            },
        }
    )
    w = workload(("A", 0, 10, 3), ("B", 600, 10, 3), ("C", 700, 10, 1))
    report = ok(tmp_path, s, w)
    reqs = by_id(report)
    assert reqs["A"]["token_times_us"] == [1010, 2020, 3020]
    assert reqs["B"]["token_times_us"] == [1610, 2610, 3610]
    assert reqs["C"]["token_times_us"] == [2020]
    assert [reqs[x]["worker"] for x in "ABC"] == [0, 1, 0]
    w0, w1 = report["workers"]
    assert life(w0) == [("active", 0)]
    assert life(w1) == [("starting", 0), ("active", 500), ("draining", 3000), ("removed", 3610)]
    assert (w1["created_us"], w1["pool_worker"]) == (0, 1)
    assert times(w0) == (3610, 0, 3610, 0, 0)
    assert times(w1) == (3610, 500, 2500, 610, 0)
    assert (w0["busy_us"], w1["busy_us"]) == (3020, 3010)
    assert w0["utilization"] == 3020 / 3610
    assert w1["utilization"] == 3010 / 3610
    (pool,) = report["pools"]
    assert (pool["workers"], pool["workers_created"], pool["peak_workers"]) == (1, 2, 2)
    assert pool["worker_us"] == 7220
    assert pool["worker_hours"] == 7220 / 3_600_000_000
    assert pool["utilization"] == 6030 / 7220
    summary = report["summary"]
    assert summary["makespan_us"] == 3610
    assert summary["worker_us"] == 7220
    assert summary["fleet"] == {
        "scale_ups": 1,
        "scale_downs": 1,
        "cancelled": 0,
        "drained": 1,
        "failures": 0,
        "ignored_failures": 0,
        "recoveries": 0,
    }


def test_r112_a_scale_down_cancels_starting_workers_highest_first(tmp_path: Path) -> None:
    """One worker, startup 500, schedule [0 -> 3, 100 -> 1]; A (0, prompt 10, 2 tokens).
    At 0 w1 and w2 start; at 100 e = 3, two are taken away: the starting ones, w2 then w1,
    are removed at 100 (their startup ends at 500 do nothing). A runs on w0: 1010, 2010."""
    s = scenario(
        {
            "workers": 1,
            "scaling": {
                "startup_us": 500,
                "schedule": [{"at_us": 0, "target": 3}, {"at_us": 100, "target": 1}],
            },
        }
    )
    report = ok(tmp_path, s, workload(("A", 0, 10, 2)))
    assert by_id(report)["A"]["token_times_us"] == [1010, 2010]
    _, w1, w2 = report["workers"]
    assert life(w1) == life(w2) == [("starting", 0), ("removed", 100)]
    assert times(w1) == times(w2) == (100, 100, 0, 0, 0)
    assert report["summary"]["fleet"]["cancelled"] == 2
    assert report["summary"]["fleet"]["scale_ups"] == 2
    assert report["summary"]["fleet"]["scale_downs"] == 2
    assert report["summary"]["fleet"]["drained"] == 0
    assert report["pools"][0]["peak_workers"] == 3
    assert report["summary"]["worker_us"] == 2010 + 200


@pytest.mark.parametrize(("cooldown", "removed_at"), [(0, 5000), (4500, 6000)])
def test_r115_the_reactive_policy(tmp_path: Path, cooldown: int, removed_at: int) -> None:
    """One worker, max_num_seqs 1; autoscale every 1000 us on waiting_per_worker, up 1000,
    down 500, min 1, max 2 (startup 0). A, B, C at 0 (prompt 10, 2 tokens); D at 1500 (10, 1).

    0: A, B, C join w0; A's prefill -> 1010; B, C wait. 1000: tick: e = 1, metric 2 waiting
    over 1 active: 2000 > 1000 high, so target 2: w1 is active at 1000 at once; c = 1000.
    1010: A's token 1, decode -> 2010. 1500: D: candidates w0, w1, last 0 -> w1; prefill ->
    2510. 2000: tick: 2 waiting over 2: 2000 > 2000 no, 2000 < 1000 no. 2010: A completes;
    B's prefill -> 3020. 2510: D completes. 3000: 1 waiting over 2: 1000 < 1000 no (strict).
    3020: B's token, decode -> 4020. 4000: as at 3000. 4020: B completes; C -> 5030. 5000:
    0 waiting: low, e = 2 > min: without a cooldown target 1, w1 drains and, idle, is removed
    at 5000; with cooldown 4500, 5000 < 1000 + 4500: nothing, and at 6000 the same decision
    is taken then. 5030: C's token 1, decode -> 6030, C completes (the tick at 7000 is
    dropped, R113)."""
    autoscale = {
        "interval_us": 1000,
        "metric": "waiting_per_worker",
        "up_permille": 1000,
        "down_permille": 500,
        "min": 1,
        "max": 2,
        "cooldown_us": cooldown,
    }
    s = scenario({"workers": 1, "scaling": {"autoscale": autoscale}})
    s["scheduler"]["max_num_seqs"] = 1
    s["scheduler"]["max_batched_tokens"] = 64
    w = workload(("A", 0, 10, 2), ("B", 0, 10, 2), ("C", 0, 10, 2), ("D", 1500, 10, 1))
    report = ok(tmp_path, s, w)
    reqs = by_id(report)
    assert reqs["A"]["token_times_us"] == [1010, 2010]
    assert reqs["B"]["token_times_us"] == [3020, 4020]
    assert reqs["C"]["token_times_us"] == [5030, 6030]
    assert (reqs["D"]["worker"], reqs["D"]["token_times_us"]) == (1, [2510])
    w0, w1 = report["workers"]
    assert life(w1) == [("active", 1000), ("draining", removed_at), ("removed", removed_at)]
    assert w1["created_us"] == 1000
    assert times(w1) == (removed_at - 1000, 0, removed_at - 1000, 0, 0)
    assert times(w0) == (6030, 0, 6030, 0, 0)
    assert report["summary"]["fleet"]["scale_ups"] == 1
    assert report["summary"]["fleet"]["scale_downs"] == 1
    assert report["summary"]["fleet"]["drained"] == 1
    assert report["pools"][0]["peak_workers"] == 2


def failures(*events: dict[str, Any], policy: str = "migrate", limit: int | None = 1) -> Any:
    out: dict[str, Any] = {"events": list(events), "policy": policy}
    if limit is not None:
        out["max_migrations"] = limit
    return out


def fail_at(worker: int, at: int, **more: Any) -> dict[str, Any]:
    return {"pool": "default", "pool_worker": worker, "at_us": at, **more}


TWO = workload(("A", 0, 10, 3), ("B", 0, 20, 2))


def test_r117_r118_a_failure_cuts_a_decode_pass_and_migrates(tmp_path: Path) -> None:
    """Two workers, round robin, a cache of 64 blocks of 16 (no prefix caching); A (prompt 10,
    3 tokens) joins w0 and B (20, 2) w1. w0: prefill -> 1010 (A's token 1), decode formed at
    1010 (A's cached tokens 11) -> 2010. w1: prefill -> 1020, decode -> 2020.

    1500: w0 fails (R117): the pass 1010-2010 is cut (it counts in steps, busy 490, its trace
    entry keeps end 2010 and has cut_us 1500, no token); A keeps its token 1 and loses its 11
    cached tokens; m = 0 < 1: migrated, a migration arrival at 1500 (R118): the candidates
    are w1 alone (last = 1, none above: w1); A waits there. 2020: B completes; A is admitted
    as a request recomputing after a preemption (k = 1): L = 11, allotted min(11, 63) = 11 ->
    3031, its token 2 at 3031 and 11 positions below its 11 lost ones recomputed; decode ->
    4031, A completes. Makespan 4031. w0: active 0-1500, failed 1500-4031."""
    s = scenario({"workers": 2}, failures=failures(fail_at(0, 1500)))
    report = ok(tmp_path, s, TWO)
    a, b = report["requests"]
    assert a["token_times_us"] == [1010, 3031, 4031]
    assert b["token_times_us"] == [1020, 2020]
    assert (a["outcome"], a["worker"], a["fail_reason"]) == ("completed", 1, None)
    assert a["migrations"] == [
        {
            "at_us": 1500,
            "worker": 0,
            "pool": "default",
            "rank": 0,
            "output_tokens": 1,
            "lost_tokens": 11,
        }
    ]
    assert (a["lost_tokens"], a["recomputed_tokens"]) == (11, 11)
    assert (a["first_scheduled_us"], a["ttft_us"], a["e2e_us"]) == (0, 1010, 4031)
    w0, w1 = report["workers"]
    assert life(w0) == [("active", 0), ("failed", 1500)]
    assert times(w0) == (1500, 0, 1500, 0, 2531)
    assert (w0["steps"], w0["busy_us"], w0["utilization"]) == (2, 1500, 1)
    assert (w0["prefill_tokens"], w0["decode_tokens"], w0["output_tokens"]) == (10, 0, 1)
    assert (w0["failures"], w0["migrated_out"], w0["failed_requests"]) == (1, 1, 0)
    assert w0["lost_tokens"] == 11
    assert (w1["routed"], w1["completed"], w1["busy_us"]) == (2, 2, 4031)
    cut = [e for e in report["trace"] if e["cut_us"] is not None]
    assert [(e["worker"], e["start_us"], e["end_us"], e["cut_us"]) for e in cut] == [
        (0, 1010, 2010, 1500)
    ]
    summary = report["summary"]
    assert (summary["completed"], summary["failed"], summary["migrations"]) == (2, 0, 1)
    assert (summary["lost_tokens"], summary["recomputed_tokens"]) == (11, 11)
    assert summary["fleet"]["failures"] == 1
    assert summary["worker_us"] == 1500 + 4031
    assert report["pools"][0]["failures"] == 1
    assert report["pools"][0]["migrations"] == 1


def test_r118_the_migration_limit(tmp_path: Path) -> None:
    """As above, and w1 fails at 3500, during A's decode pass formed at 3031 (its cached
    tokens 12): A has m = 1 = max_migrations, so it fails at 3500 with "migration_limit" and
    its token times [1010, 3031] (R118); its lost tokens are 11 + 12 = 23."""
    s = scenario({"workers": 2}, failures=failures(fail_at(0, 1500), fail_at(1, 3500)))
    report = ok(tmp_path, s, TWO)
    a, b = report["requests"]
    assert (a["outcome"], a["fail_reason"], a["terminal_us"]) == ("failed", "migration_limit", 3500)
    assert a["token_times_us"] == [1010, 3031]
    assert (a["completion_us"], a["e2e_us"], a["mean_itl_us"]) == (None, None, None)
    assert (a["lost_tokens"], a["recomputed_tokens"], len(a["migrations"])) == (23, 11, 1)
    assert b["outcome"] == "completed"
    w1 = report["workers"][1]
    assert (w1["failures"], w1["migrated_out"], w1["failed_requests"], w1["lost_tokens"]) == (
        1,
        0,
        1,
        12,
    )
    assert w1["output_tokens"] == 3  # B's two and A's token 2 (R123), not the cut decode
    summary = report["summary"]
    assert summary["makespan_us"] == 3500
    assert (summary["completed"], summary["failed"]) == (1, 1)
    assert summary["failed_by_reason"] == {
        "worker_failure": 0,
        "migration_limit": 1,
        "no_routable_worker": 0,
    }
    assert summary["output_tokens"] == 2  # B's only: statistics stay over completed requests


def test_r118_policy_fail(tmp_path: Path) -> None:
    """Policy "fail": A fails at 1500 with "worker_failure", its 11 cached tokens lost; B
    completes at 2020, the makespan."""
    s = scenario({"workers": 2}, failures=failures(fail_at(0, 1500), policy="fail", limit=None))
    report = ok(tmp_path, s, TWO)
    a = report["requests"][0]
    assert (a["outcome"], a["fail_reason"], a["terminal_us"], a["lost_tokens"]) == (
        "failed",
        "worker_failure",
        1500,
        11,
    )
    assert a["migrations"] == []
    assert report["summary"]["makespan_us"] == 2020
    assert report["workers"][0]["failed_requests"] == 1
    assert report["pools"][0]["failed"] == 1


def test_r119_recovery_and_r114_no_routable_worker(tmp_path: Path) -> None:
    """One worker, startup 200 (scaling with neither schedule nor autoscale), a failure at 1500
    recovering after 1000; A (0, prompt 10, 2 tokens), C (2000, 10, 1), B (2800, 10, 1).
    A: prefill -> 1010, decode formed at 1010 -> 2010; at 1500 w0 fails, A (11 cached tokens)
    migrates, and its migration arrival at 1500 finds no candidate: it fails with
    "no_routable_worker" (R114). C at 2000: rejected, "no_routable_worker". 2500: the recovery
    starts (starting), 2700 active (R119). B at 2800 joins w0: prefill -> 3810, completes.
    w0: active 1500 + 1110, failed 1000, starting 200; busy 1010 + 490 + 1010."""
    s = scenario(
        {"workers": 1, "scaling": {"startup_us": 200}},
        failures=failures(fail_at(0, 1500, recover_after_us=1000)),
    )
    w = workload(("A", 0, 10, 2), ("C", 2000, 10, 1), ("B", 2800, 10, 1))
    report = ok(tmp_path, s, w)
    reqs = by_id(report)
    assert (reqs["A"]["outcome"], reqs["A"]["fail_reason"]) == ("failed", "no_routable_worker")
    assert (reqs["A"]["terminal_us"], len(reqs["A"]["migrations"])) == (1500, 1)
    assert (reqs["C"]["outcome"], reqs["C"]["reject_reason"]) == ("rejected", "no_routable_worker")
    assert (reqs["B"]["worker"], reqs["B"]["token_times_us"]) == (0, [3810])
    (w0,) = report["workers"]
    assert life(w0) == [("active", 0), ("failed", 1500), ("starting", 2500), ("active", 2700)]
    assert times(w0) == (2810, 200, 2610, 0, 1000)
    assert w0["busy_us"] == 2510
    summary = report["summary"]
    assert summary["rejected_by_reason"]["no_routable_worker"] == 1
    assert summary["failed_by_reason"]["no_routable_worker"] == 1
    assert (summary["fleet"]["failures"], summary["fleet"]["recoveries"]) == (1, 1)


def test_r113_a_fleet_event_after_the_last_terminal_time_is_dropped(tmp_path: Path) -> None:
    """A (0, prompt 10, 1 token) completes at 1010 on w0; a failure of w0 at 1010 and one of
    w1 at 5000 are not processed (no request is left), so nothing is counted."""
    s = scenario({"workers": 2}, failures=failures(fail_at(0, 1010), fail_at(1, 5000)))
    report = ok(tmp_path, s, workload(("A", 0, 10, 1)))
    assert report["summary"]["fleet"]["failures"] == 0
    assert [life(w) for w in report["workers"]] == [[("active", 0)], [("active", 0)]]


def test_r116_a_failure_of_a_worker_not_created_under_autoscale_is_ignored(
    tmp_path: Path,
) -> None:
    """Under autoscale existence is not known before the run: worker 5 never exists, so its
    failure is ignored and counted (R116)."""
    autoscale = {
        "interval_us": 100000,
        "metric": "outstanding_per_worker",
        "up_permille": 5000,
        "down_permille": 0,
        "min": 1,
        "max": 4,
    }
    s = scenario(
        {"workers": 1, "scaling": {"autoscale": autoscale}}, failures=failures(fail_at(5, 500))
    )
    report = ok(tmp_path, s, workload(("A", 0, 10, 1)))
    assert report["summary"]["fleet"]["ignored_failures"] == 1
    assert report["summary"]["fleet"]["failures"] == 0


#: A disaggregated fleet: prefill pool p and decode pool d, one worker each, caches of 64
#: blocks of 16, no prefix caching; a transfer takes 100 + ceil(L * 1 * 10^6 / 10^6) us (R103).
def disagg(fail: Any) -> dict[str, Any]:
    pool = {"workers": 1, "kv_cache": dict(CACHE)}
    return {
        "document": "scenario",
        "schema_version": "1.7",
        "fleet": {
            "pools": [
                {"name": "p", "role": "prefill", **copy.deepcopy(pool)},
                {"name": "d", "role": "decode", **copy.deepcopy(pool)},
            ]
        },
        "routing": {"policy": "round_robin"},
        "scheduler": copy.deepcopy(SCHEDULER),
        "kv_transfer": {
            "bytes_per_token": 1,
            "bandwidth_bytes_per_s": 1_000_000,
            "base_latency_us": 100,
        },
        "failures": fail,
    }


def test_r121_a_prefill_failure_during_a_transfer(tmp_path: Path) -> None:
    """A (0, prompt 10, 2 tokens). Prefill on p: 0 -> 1010 (the hidden token, R100); A is
    Held, routed to d (its only worker), reserved at once (1 block) and transferring 10
    tokens: 100 + 10 = 110 us, to 1120. p fails at 1050 (no pass in flight): A's KV on p (its
    10 prefill tokens) is lost, its transfer end discarded, its reservation on d released;
    m = 0 < 1: it migrates to the prefill side, which has no routable worker (p failed): it
    fails at 1050 with "no_routable_worker"."""
    s = disagg(failures(dict(fail_at(0, 1050), pool="p")))
    report = ok(tmp_path, s, workload(("A", 0, 10, 2)))
    a = report["requests"][0]
    assert (a["outcome"], a["fail_reason"], a["terminal_us"]) == (
        "failed",
        "no_routable_worker",
        1050,
    )
    assert a["migrations"] == [
        {"at_us": 1050, "worker": 0, "pool": "p", "rank": 0, "output_tokens": 0, "lost_tokens": 10}
    ]
    assert a["lost_tokens"] == 10
    wp, wd = report["workers"]
    assert (wp["failures"], wp["migrated_out"], wp["lost_tokens"]) == (1, 1, 10)
    assert wd["kv_cache"]["peak_blocks_in_use"] == 0  # no pass ever formed on d
    assert report["summary"]["transfers"]["count"] == 0


def test_r121_a_decode_failure_re_hands_a_transferring_request(tmp_path: Path) -> None:
    """Two decode workers (d0 index 1, d1 index 2). A (0, prompt 10, 2 tokens): prefill on p
    0 -> 1010, Held, routed on the decode side to d0 (round robin), reserved, transferring to
    1120. d0 fails at 1050: A is re-handed (R121): m becomes 1 (a migration with 0 lost
    tokens, leaving worker 1), Held again on p, routed on the decode side among the routable
    schedulers, d1 alone (last = 1, index 2 above it), reserved at 1050, transferring 110 us
    to 1160, activated at 1160 (d1 idle), p releases its block. d1: decode 1160 -> 2160 (token
    1), 2160 -> 3160 (token 2)."""
    s = disagg(failures(dict(fail_at(0, 1050), pool="d")))
    s["fleet"]["pools"][1]["workers"] = 2
    report = ok(tmp_path, s, workload(("A", 0, 10, 2)))
    a = report["requests"][0]
    assert (a["outcome"], a["token_times_us"]) == ("completed", [2160, 3160])
    assert a["migrations"] == [
        {"at_us": 1050, "worker": 1, "pool": "d", "rank": 0, "output_tokens": 0, "lost_tokens": 0}
    ]
    assert a["handoff"]["decode_worker"] == 2
    assert (a["handoff"]["reserved_us"], a["handoff"]["transfer_end_us"]) == (1050, 1160)
    assert a["handoff"]["activation_us"] == 1160
    assert (a["lost_tokens"], a["recomputed_tokens"]) == (0, 0)
    d0 = report["workers"][1]
    assert (d0["failures"], d0["migrated_out"], d0["lost_tokens"]) == (1, 1, 0)


def test_r124_a_static_fleet_s_report_9_is_the_migration_of_its_report_8(tmp_path: Path) -> None:
    """R124's step 8.0 -> 9.0 on a static fleet: every added member, and nothing else changed
    (the trace entries' cut_us null: no step ends after the last terminal time)."""
    s = scenario({"workers": 2})
    code, _, new = run(tmp_path, s, TWO, "--report-version", "9.0")
    assert code == 0
    assert new is not None
    old_s = dict(s, schema_version="1.6")
    code, _, old = run(tmp_path, old_s, TWO, "--report-version", "8.0")
    assert code == 0
    assert old is not None
    makespan = old["summary"]["makespan_us"]
    for worker in new["workers"]:
        assert life(worker) == [("active", 0)]
        assert times(worker) == (makespan, 0, makespan, 0, 0)
        for member in ("failures", "migrated_out", "failed_requests", "lost_tokens"):
            assert worker.pop(member) == 0
        for member in ("lifecycle", "created_us", "worker_us", "starting_us", "active_us"):
            worker.pop(member)
        worker.pop("draining_us")
        worker.pop("failed_us")
    (pool,) = new["pools"]
    assert (pool.pop("workers_created"), pool.pop("peak_workers")) == (2, 2)
    assert pool.pop("worker_us") == 2 * makespan
    assert pool.pop("worker_hours") == 2 * makespan / 3_600_000_000
    assert (pool.pop("failures"), pool.pop("migrations"), pool.pop("failed")) == (0, 0, 0)
    for request in new["requests"]:
        assert request.pop("migrations") == []
        assert (request.pop("fail_reason"), request.pop("lost_tokens")) == (None, 0)
        assert request.pop("recomputed_tokens") == 0
    summary = new["summary"]
    assert summary["rejected_by_reason"].pop("no_routable_worker") == 0
    assert summary.pop("fleet") == dict.fromkeys(
        ("scale_ups", "scale_downs", "cancelled", "drained", "failures", "ignored_failures"), 0
    ) | {"recoveries": 0}
    assert summary.pop("worker_us") == 2 * makespan
    assert summary.pop("worker_hours") == 2 * makespan / 3_600_000_000
    for member in ("failed", "migrations", "lost_tokens", "recomputed_tokens"):
        assert summary.pop(member) == 0
    assert summary.pop("failed_by_reason") == dict.fromkeys(
        ("worker_failure", "migration_limit", "no_routable_worker"), 0
    )
    for entry in new["trace"]:
        assert entry.pop("cut_us") is None
    new["schema_version"] = "8.0"
    del new["inputs"], old["inputs"]  # the scenarios differ in their version
    assert new == old


def test_r124_scenario_1_7_needs_report_9(tmp_path: Path) -> None:
    s = scenario({"workers": 1, "scaling": {"startup_us": 5}})
    code, error, report = run(tmp_path, s, TWO, "--report-version", "8.0")
    assert (code, report) == (2, None)
    assert "--report-version 9.0" in error


def test_describe_declares_scenario_1_7_and_report_9(capsys: pytest.CaptureFixture[str]) -> None:
    assert PLAIN.main(["replay", "--describe"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["schema_versions"]["report"] == ["10.0"]  # R141: the default since section 19
    assert described["schema_versions"]["scenario"][-2:] == ["1.7", "1.8"]


def with_scaling(scaling: Any, workers: int = 1) -> dict[str, Any]:
    return scenario({"workers": workers, "scaling": scaling})


AUTOSCALE = {
    "interval_us": 1000,
    "metric": "waiting_per_worker",
    "up_permille": 1000,
    "down_permille": 500,
    "min": 1,
    "max": 2,
}

#: R4's checks of section 18 and where they are reported (R110, R115, R116).
INVALID: dict[str, tuple[Any, str]] = {
    "schedule times not increasing": (
        with_scaling({"schedule": [{"at_us": 5, "target": 1}, {"at_us": 5, "target": 2}]}),
        "/fleet/scaling/schedule/1/at_us",
    ),
    "down not below up": (
        with_scaling({"autoscale": dict(AUTOSCALE, down_permille=1000)}),
        "/fleet/scaling/autoscale/down_permille",
    ),
    "min above max": (
        with_scaling({"autoscale": dict(AUTOSCALE, min=3)}),
        "/fleet/scaling/autoscale/min",
    ),
    "initial workers above max": (
        with_scaling({"autoscale": AUTOSCALE}, workers=3),
        "/fleet/workers",
    ),
    "kv_use without a cache": (
        {
            k: v
            for k, v in with_scaling({"autoscale": dict(AUTOSCALE, metric="kv_use")}).items()
            if k != "kv_cache"
        },
        "/fleet/scaling/autoscale/metric",
    ),
    "an unknown pool": (
        scenario({"workers": 1}, failures=failures(dict(fail_at(0, 5), pool="x"))),
        "/failures/events/0/pool",
    ),
    "a failure inside the previous downtime": (
        scenario(
            {"workers": 1},
            failures=failures(fail_at(0, 5, recover_after_us=10), fail_at(0, 15)),
        ),
        "/failures/events/1/at_us",
    ),
    "a second failure of a worker failed for good": (
        scenario({"workers": 1}, failures=failures(fail_at(0, 5), fail_at(0, 50))),
        "/failures/events/1/at_us",
    ),
    "a worker not created by then (a decision at the same instant is later)": (
        scenario(
            {"workers": 1, "scaling": {"schedule": [{"at_us": 7, "target": 2}]}},
            failures=failures(fail_at(1, 7)),
        ),
        "/failures/events/0/pool_worker",
    ),
    "scaling in a scenario 1.6": (
        dict(with_scaling({"startup_us": 1}), schema_version="1.6"),
        "/fleet/scaling",
    ),
    "max_migrations with policy fail": (
        scenario({"workers": 1}, failures=failures(fail_at(0, 5), policy="fail", limit=2)),
        "/failures/max_migrations",
    ),
}


@pytest.mark.parametrize("name", sorted(INVALID))
def test_r4_section_18_checks_exit_2_at_their_pointer(name: str, tmp_path: Path) -> None:
    doc, pointer = INVALID[name]
    code, error, report = run(tmp_path, doc, TWO)
    assert (code, report) == (2, None)
    assert f"s.json: {pointer}: expected " in error


def test_r116_a_failure_of_a_worker_created_earlier_is_valid(tmp_path: Path) -> None:
    """The schedule creates worker 1 at 7 (startup 0); a failure of it at 8 is valid, and
    processed: w1 has nothing and fails for good."""
    s = scenario(
        {"workers": 1, "scaling": {"schedule": [{"at_us": 7, "target": 2}]}},
        failures=failures(fail_at(1, 8)),
    )
    report = ok(tmp_path, s, workload(("A", 0, 10, 1)))
    assert life(report["workers"][1]) == [("active", 7), ("failed", 8)]
    assert report["summary"]["fleet"]["failures"] == 1


def test_r101_r121_a_release_at_a_failure_schedules_the_prefill_worker(tmp_path: Path) -> None:
    """R101 (QUESTIONS-fleet.md, Q7). p: one worker, 4 blocks of 16; d: one worker, max_num_seqs 1;
    policy "fail". A (0, prompt 16, 10 tokens) and B (0, prompt 48, 2) are prefilled together
    on p, 0 -> 1064 (P = 64, 4 blocks). At 1064 both are Held: A is reserved on d (a seat) and
    transfers 100 + 16 us to 1180, where it is activated (p releases its block); B is Pending
    (d's one seat is A's) and keeps 3 blocks on p. C (1500, prompt 30, 2) cannot get its 2
    blocks on p (1 free): a step without a token, p stays idle (R101). A decodes on d from
    1180: tokens at 2180, 3180, 4180; the pass formed at 4180 is cut at 5000, when d fails
    (R117): A fails ("worker_failure", its 16 + 4 cached tokens lost), B, Pending on d, fails
    too and p releases its 3 blocks; that release schedules p: C's prefill 5000 -> 6030; C is
    Held and finds no routable decode scheduler (d failed for good): it fails with
    "no_routable_worker" at 6030 (R114), the makespan."""
    s = disagg(failures(dict(fail_at(0, 5000), pool="d"), policy="fail", limit=None))
    s["fleet"]["pools"][0]["kv_cache"]["blocks"] = 4
    s["fleet"]["pools"][1]["scheduler"] = dict(copy.deepcopy(SCHEDULER), max_num_seqs=1)
    w = workload(("A", 0, 16, 10), ("B", 0, 48, 2), ("C", 1500, 30, 2))
    report = ok(tmp_path, s, w)
    reqs = by_id(report)
    assert (reqs["A"]["fail_reason"], reqs["A"]["token_times_us"]) == (
        "worker_failure",
        [2180, 3180, 4180],
    )
    assert (reqs["A"]["lost_tokens"], reqs["A"]["terminal_us"]) == (20, 5000)
    assert (reqs["B"]["fail_reason"], reqs["B"]["terminal_us"], reqs["B"]["lost_tokens"]) == (
        "worker_failure",
        5000,
        0,
    )
    assert (reqs["C"]["fail_reason"], reqs["C"]["terminal_us"]) == ("no_routable_worker", 6030)
    # R107: handoff is null only for a rejected request and one cut off before its prefill ended
    handoff = reqs["C"]["handoff"]
    assert (handoff["prefill_end_us"], handoff["decode_worker"], handoff["reserved_us"]) == (
        6030,
        None,
        None,
    )
    assert reqs["C"]["first_scheduled_us"] == 5000
    assert report["summary"]["makespan_us"] == 6030
    wp, wd = report["workers"]
    assert (wd["failed_requests"], wp["failed_requests"]) == (2, 0)
    assert report["summary"]["failed_by_reason"] == {
        "worker_failure": 2,
        "migration_limit": 0,
        "no_routable_worker": 1,
    }


def test_r117_r118_a_failure_during_a_chunked_prefill(tmp_path: Path) -> None:
    """Two workers, chunked prefill (chunks of 16). A (0, prompt 40, 2 tokens) joins w0, B (0,
    prompt 8, 1) w1 (B completes at 1008). w0: chunks 0 -> 1016, 1016 -> 2032 and, formed at
    2032 (A's cached tokens 40), 2032 -> 3040, cut at 2500 by w0's failure: A has no output
    token, loses 40 cached tokens and migrates as a fresh request (k = 0, R118) to w1 (the only
    candidate): chunks 2500 -> 3516 -> 4532 -> 5540 (its token 1; the 40 positions below its
    mark are recomputed), decode -> 6540. w0: busy 1016 + 1016 + 468, prefill_tokens 32 (the
    cut chunk is not counted, R117)."""
    s = scenario({"workers": 2}, failures=failures(fail_at(0, 2500)))
    s["scheduler"]["prefill"] = {"mode": "chunked", "max_chunk_tokens": 16}
    report = ok(tmp_path, s, workload(("A", 0, 40, 2), ("B", 0, 8, 1)))
    a, b = report["requests"]
    assert b["token_times_us"] == [1008]
    assert (a["token_times_us"], a["worker"], a["first_scheduled_us"]) == ([5540, 6540], 1, 0)
    assert a["migrations"] == [
        {
            "at_us": 2500,
            "worker": 0,
            "pool": "default",
            "rank": 0,
            "output_tokens": 0,
            "lost_tokens": 40,
        }
    ]
    assert (a["lost_tokens"], a["recomputed_tokens"]) == (40, 40)
    w0 = report["workers"][0]
    assert (w0["steps"], w0["busy_us"], w0["prefill_tokens"]) == (3, 2500, 32)
    cut = [(e["start_us"], e["end_us"], e["cut_us"]) for e in report["trace"] if e["worker"] == 0]
    assert cut == [(0, 1016, None), (1016, 2032, None), (2032, 3040, 2500)]


def test_r120_a_failed_turn_releases_the_next_turn(tmp_path: Path) -> None:
    """A session of two turns: A (0, prompt 10, 2 tokens) and B (recorded 0, think 100, prompt
    10, 1); policy "fail". A runs on w0 (prefill -> 1010, decode formed at 1010); w0 fails at
    1500: A fails, a terminal state (R120), and releases B at max(0, 1500 + 100) = 1600; B is
    routed among the candidates, w1 alone (round robin: last 0, w1 above it), prefill ->
    2610."""
    s = scenario({"workers": 2}, failures=failures(fail_at(0, 1500), policy="fail", limit=None))
    w = workload(("A", 0, 10, 2), ("B", 0, 10, 1))
    w["schema_version"] = "1.2"
    w["sessions"] = [{"id": "s"}]
    for r in w["requests"]:
        r["session"] = "s"
    w["requests"][1]["think_time_us"] = 100
    report = ok(tmp_path, s, w)
    a, b = report["requests"]
    assert (a["outcome"], a["terminal_us"], a["token_times_us"]) == ("failed", 1500, [1010])
    assert (b["arrival_us"], b["worker"], b["token_times_us"]) == (1600, 1, [2610])
    assert report["summary"]["makespan_us"] == 2610


def test_r118_a_migrated_request_with_output_recomputes_by_parts(tmp_path: Path) -> None:
    """Whole-mode prefill, budget 64. A (0, prompt 60, 6 tokens) on w0: prefill -> 1060, decodes
    -> 2060, 3060, 4060, and the pass formed at 4060 (A's cached tokens 64) is cut at 4500 by
    w0's failure: k = 4, A migrates to w1 as a request recomputing after a preemption (R50 as
    R118 amends it). w1 decodes B (0, prompt 4, 20 tokens: 1004, 2004, ...); at 5004 B's decode
    leaves 63 of the budget and A's L = 64 is allotted min(64, 63) = 63 (a fresh request would
    wait), pass -> 6067; then its last token, with B's decode: -> 7068, A's token 5; then a
    decode: 8068, A completes. All 64 positions below its mark 64 are recomputed."""
    s = scenario({"workers": 2}, failures=failures(fail_at(0, 4500)))
    s["scheduler"]["max_model_len"] = 128
    report = ok(tmp_path, s, workload(("A", 0, 60, 6), ("B", 0, 4, 20)))
    a, b = report["requests"]
    assert a["token_times_us"] == [1060, 2060, 3060, 4060, 7068, 8068]
    assert b["token_times_us"][:8] == [1004, 2004, 3004, 4004, 5004, 6067, 7068, 8068]
    assert (a["lost_tokens"], a["recomputed_tokens"]) == (64, 64)
    assert a["migrations"][0]["output_tokens"] == 4


def test_r114_weighted_round_robin_over_the_candidates(tmp_path: Path) -> None:
    """Three workers of weight 1, smooth weighted round robin (R81 as R114 amends it). A and B
    at 0: currents [1, 1, 1] -> w0, [-2, 1, 1]; then [-1, 2, 2] -> w1, [-1, -1, 2]. w1 fails at
    1500 (B completed at 1010): it loses its current weight. C, D, E at 2000 over w0 and w2,
    W = 2: [0, 3] -> w2, [0, 1]; [1, 2] -> w2, [1, 0]; [2, 1] -> w0."""
    s = scenario({"workers": 3}, failures=failures(fail_at(1, 1500)))
    s["routing"] = {"policy": "weighted_round_robin"}
    w = workload(
        ("A", 0, 10, 1), ("B", 0, 10, 1), ("C", 2000, 10, 1), ("D", 2000, 10, 1), ("E", 2000, 10, 1)
    )
    report = ok(tmp_path, s, w)
    assert [r["worker"] for r in report["requests"]] == [0, 1, 2, 2, 0]
    assert report["summary"]["fleet"]["failures"] == 1


def test_r115_kv_use_counts_held_blocks(tmp_path: Path) -> None:
    """kv_use over 64 blocks, up 40 permille, ticks every 500. A (0, prompt 40, 2 tokens) holds
    3 blocks from its admission at 0: at the tick at 500, 3 * 1000 = 3000 > 40 * 64 = 2560,
    high: a second worker, active at 500 (startup 0). B (600, prompt 10, 1) joins it (round
    robin: last 0): 600 -> 1610. A: 1040, 2040. With up 50, 3000 < 3200 at 500 and 1000; B
    joins w0 and is admitted at 1040 beside A's decode (4 blocks, pass -> 2050): at 1500,
    4000 > 3200, and the second worker is active from 1500 (to the makespan 2050, idle)."""
    autoscale = {
        "interval_us": 500,
        "metric": "kv_use",
        "up_permille": 40,
        "down_permille": 0,
        "min": 1,
        "max": 2,
    }
    s = scenario({"workers": 1, "scaling": {"autoscale": autoscale}})
    report = ok(tmp_path, s, workload(("A", 0, 40, 2), ("B", 600, 10, 1)))
    a, b = report["requests"]
    assert (a["token_times_us"], b["worker"], b["token_times_us"]) == ([1040, 2040], 1, [1610])
    assert life(report["workers"][1]) == [("active", 500)]
    s["fleet"]["scaling"]["autoscale"]["up_permille"] = 50
    report = ok(tmp_path, s, workload(("A", 0, 40, 2), ("B", 600, 10, 1)))
    a, b = report["requests"]
    assert (a["token_times_us"], b["worker"], b["token_times_us"]) == ([1040, 2050], 0, [2050])
    assert life(report["workers"][1]) == [("active", 1500)]
    assert times(report["workers"][1]) == (550, 0, 550, 0, 0)


def test_r118_a_cut_step_recomputes_nothing(tmp_path: Path) -> None:
    """R118 (SPEC.md db339b8): an allotment computes its positions when its step ends, so a step
    cut by a failure computes none (QUESTIONS-fleet.md Q2). Three workers, whole prefill,
    max_migrations 2; A (0, prompt 40, 2 tokens) joins w0: prefill 0 -> 1040 (3 blocks, its
    cached tokens 40 when the step is formed). 500: w0 fails (busy 500): A loses 40, migrates
    (m = 1, k = 0, a fresh request) and its arrival at 500 goes to w1 (round robin: last 0,
    candidates w1 and w2): prefill 500 -> 1540. 1000: w1 fails and cuts that step: A loses its 40
    cached tokens there (80 in all) and migrates again (m = 2); w1's allotment never ended, so
    it recomputed nothing (w1's prefill_tokens 0). The arrival at 1000 goes to w2 (last 1):
    prefill 1000 -> 2040, token 1 at 2040, the 40 positions below the second migration's mark
    recomputed; decode -> 3040, A completes. recomputed_tokens 40 (counting the cut allotment
    would give 80); makespan 3040."""
    s = scenario({"workers": 3}, failures=failures(fail_at(0, 500), fail_at(1, 1000), limit=2))
    report = ok(tmp_path, s, workload(("A", 0, 40, 2)))
    (a,) = report["requests"]
    assert (a["outcome"], a["worker"], a["token_times_us"]) == ("completed", 2, [2040, 3040])
    assert [(m["at_us"], m["worker"], m["lost_tokens"]) for m in a["migrations"]] == [
        (500, 0, 40),
        (1000, 1, 40),
    ]
    assert (a["lost_tokens"], a["recomputed_tokens"]) == (80, 40)
    w0, w1, w2 = report["workers"]
    assert (w0["busy_us"], w0["prefill_tokens"], w0["lost_tokens"]) == (500, 0, 40)
    assert (w1["steps"], w1["busy_us"], w1["prefill_tokens"], w1["lost_tokens"]) == (1, 500, 0, 40)
    assert (w2["steps"], w2["busy_us"], w2["prefill_tokens"]) == (2, 2040, 40)
    summary = report["summary"]
    assert (summary["migrations"], summary["lost_tokens"], summary["recomputed_tokens"]) == (
        2,
        80,
        40,
    )
    assert summary["makespan_us"] == 3040


def test_r118_a_step_cut_by_the_stop_time_recomputes_nothing(tmp_path: Path) -> None:
    """As above with two workers, max_migrations 1 and stop_at_us 1200 (R62): A's recompute on
    w1, 500 -> 1540, is cut by the stop time; A is cut off at 1200 with lost_tokens 40 and
    recomputed_tokens 0 (its allotment's step never ended)."""
    s = scenario({"workers": 2}, failures=failures(fail_at(0, 500)), stop_at_us=1200)
    report = ok(tmp_path, s, workload(("A", 0, 40, 2)))
    (a,) = report["requests"]
    assert (a["outcome"], a["worker"], a["token_times_us"]) == ("cut_off", 1, [])
    assert (a["lost_tokens"], a["recomputed_tokens"], len(a["migrations"])) == (40, 0, 1)
    assert report["workers"][1]["prefill_tokens"] == 0
    assert report["summary"]["recomputed_tokens"] == 0


#: The hand-derived golden cases of section 18 (``fleet-1024-workers``, a scale case of section
#: 1 without a derivation, is not one of them) and the invalid ones.
FLEET_VALID = derived_cases("fleet-")
FLEET_INVALID = sorted(name for name in MANIFEST if name.startswith("invalid/fleet-"))


def test_the_corpus_has_the_fleet_cases() -> None:
    """Branch fleet-corpus added 36 hand-derived valid and 18 invalid cases of section 18."""
    assert (len(FLEET_VALID), len(FLEET_INVALID)) == (36, 18)


@pytest.mark.parametrize("name", FLEET_VALID)
def test_plain_loop_gives_each_fleet_derivations_expected_values(name: str, tmp_path: Path) -> None:
    """Every value of the case's DERIVATION.md (JSON blocks of pointer -> value), report 9.0."""
    case = GOLDEN / "valid" / name
    expected = derived_values(case)
    assert expected
    output = tmp_path / "r.json"
    code, error = replay_case(PLAIN, case, output)
    assert (code, error) == (0, "")
    report = json.loads(output.read_text())
    assert report["schema_version"] == "10.0"
    assert not wrong_values(report, expected)


@pytest.mark.parametrize("name", FLEET_INVALID)
def test_plain_loop_rejects_each_invalid_fleet_case(name: str, tmp_path: Path) -> None:
    """Exit 2 with a message naming the scenario and the fault's pointer, and no report. A
    member of a later version (R124) is reported, as in the plain loop's earlier sections, at
    the member the fault names rather than at ``/schema_version`` (R5 asks for "the offending
    value"; the corpus's fault text names both)."""
    output = tmp_path / "r.json"
    code, error = replay_case(PLAIN, GOLDEN / name, output)
    assert code == 2
    assert not output.exists()
    fault = MANIFEST[name]["fault"].split(", ", 1)[1]
    pointer = fault.split(":", 1)[0]
    if pointer == "/schema_version":
        pointer = fault.split("but ", 1)[1].split(" ", 1)[0]
    assert f"scenario.json: {pointer}: expected " in error
