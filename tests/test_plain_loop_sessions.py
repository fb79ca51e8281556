"""The plain loop's section 13 (sessions, closed loop, stop time, goodput) against hand numbers.

Every case is small enough to derive with pencil from SPEC.md alone (R59 to R64); the
derivation is in each test's docstring, written before the loop ran. Unless a test says
otherwise a step lasts ``1 + P + 2 * D`` us (overhead 1000 ns, 1000 ns per prefill token, 2000
ns per decoding request), one worker, whole prefill, budget 64 tokens, 8 sequences.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.helpers import REPO, load_module

INDEPENDENT = REPO / "conformance" / "examples" / "independent"
PLAIN = load_module("servesim_independent_sessions", INDEPENDENT / "servesim_independent.py")
REPORT_5_0 = jsonschema.Draft202012Validator(
    json.loads((REPO / "schemas" / "released" / "5.0" / "report.schema.json").read_text())
)


def timing(decode_ns: int = 2000) -> dict[str, Any]:
    return {
        "document": "timing_profile",
        "schema_version": "1.0",
        "model": {
            "kind": "synthetic_linear",
            "step_overhead_ns": 1000,
            "prefill_token_ns": 1000,
            "decode_token_ns": decode_ns,
        },
    }


def scenario(**extra: Any) -> dict[str, Any]:
    return {
        "document": "scenario",
        "schema_version": "1.3",
        "fleet": {"workers": 1},
        "routing": {"policy": "round_robin"},
        "scheduler": {
            "max_num_seqs": 8,
            "max_batched_tokens": 64,
            "max_model_len": 1000,
            "prefill": {"mode": "whole"},
        },
        **extra,
    }


def request(name: str, arrival: int, prompt: int, out: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": name,
        "arrival_us": arrival,
        "prompt_tokens": prompt,
        "max_output_tokens": out,
        **extra,
    }


def workload(*requests: dict[str, Any], sessions: list[str] | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {
        "document": "workload",
        "schema_version": "1.2",
        "requests": list(requests),
    }
    if sessions is not None:
        document["sessions"] = [{"id": s} for s in sessions]
    return document


def run(
    folder: Path,
    scn: dict[str, Any],
    wl: dict[str, Any],
    tp: dict[str, Any] | None = None,
    version: str = "5.0",
    trace: bool = False,
) -> tuple[int, str, dict[str, Any] | None]:
    """Exit code, standard error and report of the plain loop."""
    paths = {}
    for name, document in (("s", scn), ("w", wl), ("t", tp or timing())):
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(document))
    output = folder / "r.json"
    arguments = [
        "replay",
        "--scenario",
        str(paths["s"]),
        "--workload",
        str(paths["w"]),
        "--timing-profile",
        str(paths["t"]),
        "--output",
        str(output),
        "--report-version",
        version,
    ]
    if trace:
        arguments.append("--trace")
    error = io.StringIO()
    with contextlib.redirect_stderr(error):
        code = PLAIN.main(arguments)
    report = json.loads(output.read_text()) if output.exists() else None
    return code, error.getvalue(), report


def ok(folder: Path, *args: Any, **kwargs: Any) -> dict[str, Any]:
    code, error, report = run(folder, *args, **kwargs)
    assert code == 0, error
    assert report is not None
    assert report["schema_version"] == "5.0"
    assert [e.message for e in REPORT_5_0.iter_errors(report)] == []
    return report


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in report["requests"]}


THREE_TURNS = workload(
    request("a", 10, 4, 3, session="s"),
    request("b", 10, 2, 2, session="s", think_time_us=5),
    request("c", 100, 3, 1, session="s"),
    request("x", 12, 1, 1),
    sessions=["s"],
)


def test_r59_three_turns_with_a_think_time(tmp_path: Path) -> None:
    """Decode 0 ns here, so a step lasts 1 + P us.

    t=10 a arrives, step P=4 ends 15 (a's first token). x arrives at 12 and waits. t=15 decode
    a, admit x (P=1): ends 17; a's 2nd token, x's only token, x completes. t=17 decode a ends
    18: a completes at 18, releasing b at max(10, 18 + 5) = 23. t=23 b, P=2, ends 26 (first
    token); decode 26 to 27, b completes at 27, releasing c at max(100, 27 + 0) = 100. t=100
    c, P=3, ends 104: c completes. Six steps, busy 5+2+1+3+1+4 = 16, makespan 104-10 = 94.
    tpot samples: a (18-15)/2 = 3/2, b (27-26)/1 = 1: min 1, max 1.5, mean 1.25, p50 1 (rank
    1 of 2), p90 to p99 1.5.
    """
    report = ok(tmp_path, scenario(), THREE_TURNS, timing(decode_ns=0))
    r = by_id(report)
    assert r["a"]["token_times_us"] == [15, 17, 18]
    assert (r["a"]["arrival_us"], r["a"]["ttft_us"], r["a"]["e2e_us"]) == (10, 5, 8)
    assert r["a"]["mean_itl_us"] == 1.5
    assert (r["x"]["arrival_us"], r["x"]["queue_us"], r["x"]["token_times_us"]) == (12, 3, [17])
    assert (r["b"]["arrival_us"], r["b"]["first_scheduled_us"]) == (23, 23)
    assert r["b"]["token_times_us"] == [26, 27]
    assert (r["c"]["arrival_us"], r["c"]["token_times_us"]) == (100, [104])
    assert [r[k]["session"] for k in "abcx"] == ["s", "s", "s", None]
    assert all("slo_met" not in e for e in report["requests"])
    s = report["summary"]
    assert (s["steps"], s["first_arrival_us"], s["makespan_us"], s["cut_off"]) == (6, 10, 94, 0)
    assert "goodput" not in s
    assert report["workers"][0]["busy_us"] == 16
    assert s["tpot_us"] == {
        "count": 2,
        "min": 1,
        "max": 1.5,
        "mean": 1.25,
        "p50": 1,
        "p90": 1.5,
        "p95": 1.5,
        "p99": 1.5,
    }


def test_r61_closed_loop_of_one(tmp_path: Path) -> None:
    """N=1, T0 = 0 (q's arrival_us), units p, q, r, s in workload order.

    Decode 0 ns here, so a step lasts 1 + P us. t=0 p released, P=2 ends 3 (token); decode 3
    to 4, p completes at 4 and releases q at 4. q: P=1, 4 to 6, completes at 6, releases r at 6,
    rejected there (empty prompt), which releases s at 6, before any step of 6: s P=1, 6 to
    8 (token), decode 8 to 9, completes at 9. Steps 5, busy 3+1+2+2+1 = 9, makespan 9.
    """
    wl = workload(
        request("p", 50, 2, 2),
        request("q", 0, 1, 1),
        request("r", 1000, 0, 1),
        request("s", 5, 1, 2),
    )
    report = ok(tmp_path, scenario(closed_loop={"max_in_flight": 1}), wl, timing(decode_ns=0))
    r = by_id(report)
    assert (r["p"]["arrival_us"], r["p"]["token_times_us"]) == (0, [3, 4])
    assert (r["q"]["arrival_us"], r["q"]["token_times_us"], r["q"]["ttft_us"]) == (4, [6], 2)
    assert (r["r"]["arrival_us"], r["r"]["outcome"], r["r"]["terminal_us"]) == (6, "rejected", 6)
    assert (r["s"]["arrival_us"], r["s"]["token_times_us"], r["s"]["e2e_us"]) == (6, [8, 9], 3)
    s = report["summary"]
    assert (s["steps"], s["first_arrival_us"], s["makespan_us"]) == (5, 0, 9)
    assert report["workers"][0]["busy_us"] == 9
    assert s["completed"] + s["rejected"] + s["cut_off"] == 4


def test_r62_a_deadline_in_the_middle_of_a_decode(tmp_path: Path) -> None:
    """Steps 1 + P + 2D us, stop at 5.

    t=0 a (prompt 2, 4 tokens): P=2, 0 to 3, a's first token at 3. b arrives at 1 and waits.
    t=3 decode a (D=1), admit b (P=1): 1 + 1 + 2 = 4 us, 3 to 7: in flight at 5, so cut. c2
    (arrival 5, at the stop time) and c (7) never arrive. Everything is cut off at 5: a with
    one token [3] (ttft 3, queue 0); b first scheduled at 3 (queue 2), no token; c, c2 with
    null arrival and worker. The worker: 2 steps, busy 3 + (5 - 3) = 5, prefill tokens 2 (the
    cut step's 1 not counted), decode tokens 0, output tokens 1, peak running 2, peak waiting
    1. Summary: 0 completed, 4 cut off, first arrival 0, makespan 5. The trace shows the cut
    step 3 to 7.
    """
    wl = workload(
        request("a", 0, 2, 4),
        request("b", 1, 1, 1),
        request("c", 7, 1, 1),
        request("c2", 5, 1, 1),
    )
    report = ok(tmp_path, scenario(stop_at_us=5), wl, trace=True)
    r = by_id(report)
    a, b = r["a"], r["b"]
    assert (a["outcome"], a["terminal_us"], a["output_tokens"], a["token_times_us"]) == (
        "cut_off",
        5,
        1,
        [3],
    )
    assert (a["first_token_us"], a["ttft_us"], a["queue_us"], a["worker"]) == (3, 3, 0, 0)
    assert (a["completion_us"], a["e2e_us"], a["mean_itl_us"]) == (None, None, None)
    assert (b["first_scheduled_us"], b["queue_us"], b["first_token_us"], b["ttft_us"]) == (
        3,
        2,
        None,
        None,
    )
    for name in ("c", "c2"):
        e = r[name]
        assert (e["outcome"], e["arrival_us"], e["worker"], e["terminal_us"]) == (
            "cut_off",
            None,
            None,
            5,
        )
        assert (e["first_scheduled_us"], e["queue_us"], e["ttft_us"]) == (None, None, None)
    w = report["workers"][0]
    assert (w["steps"], w["busy_us"], w["prefill_tokens"], w["decode_tokens"]) == (2, 5, 2, 0)
    assert (w["output_tokens"], w["peak_running"], w["peak_waiting"], w["completed"]) == (
        1,
        2,
        1,
        0,
    )
    assert w["utilization"] == 1
    s = report["summary"]
    assert (s["completed"], s["cut_off"], s["first_arrival_us"], s["makespan_us"]) == (0, 4, 0, 5)
    assert (s["steps"], s["output_tokens"], s["request_throughput_per_s"]) == (2, 0, 0)
    assert s["tpot_us"]["count"] == 0
    assert s["tpot_us"]["mean"] is None
    assert [(t["start_us"], t["end_us"]) for t in report["trace"]] == [(0, 3), (3, 7)]


def test_r62_a_completion_at_the_stop_time_counts_and_releases_nothing(tmp_path: Path) -> None:
    """Decode 0 ns: a (prompt 1, 1 token) 0 to 2 completes at 2 = stop time; its session's
    turn b (think 0) would arrive at 2, the stop time, so it never arrives: cut off, arrival
    null. makespan 2 - 0 = 2; a completed, 1 step."""
    wl = workload(
        request("a", 0, 1, 1, session="s"),
        request("b", 0, 1, 1, session="s"),
        sessions=["s"],
    )
    report = ok(tmp_path, scenario(stop_at_us=2), wl, timing(decode_ns=0))
    r = by_id(report)
    assert (r["a"]["outcome"], r["a"]["terminal_us"]) == ("completed", 2)
    assert (r["b"]["outcome"], r["b"]["arrival_us"], r["b"]["terminal_us"]) == ("cut_off", None, 2)
    assert (report["summary"]["makespan_us"], report["summary"]["steps"]) == (2, 1)


@pytest.mark.parametrize(
    ("slo", "met"),
    [
        # a: ttft 5, e2e 8, gaps 3 over 2; x: 5, 5, one token; b: 3, 4, 1 over 1; c: 4, 4
        (
            {"ttft_us": 5, "e2e_us": 5, "mean_itl_us": 1},
            {"a": False, "x": True, "b": True, "c": True},
        ),
        ({"ttft_us": 4}, {"a": False, "x": False, "b": True, "c": True}),
        ({"mean_itl_us": 1}, {"a": False, "x": True, "b": True, "c": True}),
        ({"mean_itl_us": 2, "e2e_us": 8}, {"a": True, "x": True, "b": True, "c": True}),
        ({"ttft_us": 0}, {"a": False, "x": False, "b": False, "c": False}),
    ],
)
def test_r63_bounds_met_exactly_count(
    tmp_path: Path, slo: dict[str, int], met: dict[str, bool]
) -> None:
    """The three-turn case above; each bound is inclusive (x's e2e 5 <= 5, b's gap 1 <= 1 * 1,
    c's ttft 4 <= 4, a's e2e 8 <= 8 and gaps 3 <= 2 * 2). Goodput over makespan 94."""
    report = ok(tmp_path, scenario(slo=slo), THREE_TURNS, timing(decode_ns=0))
    assert {e["id"]: e["slo_met"] for e in report["requests"]} == met
    tokens = {"a": 3, "x": 1, "b": 2, "c": 1}
    good = [k for k, v in met.items() if v]
    g = report["summary"]["goodput"]
    assert (g["requests"], g["output_tokens"]) == (len(good), sum(tokens[k] for k in good))
    assert g["request_throughput_per_s"] == len(good) * 1000000 / 94
    assert g["output_token_throughput_per_s"] == sum(tokens[k] for k in good) * 1000000 / 94


def test_r63_tpot_mean_is_the_exact_mean_rounded_once(tmp_path: Path) -> None:
    """Steps 1 + P + 2D us. t=0 a (4 tokens) and b (2) admitted, P=2, 0 to 3: first tokens
    at 3. t=3 D=2, 3 to 8: b completes (gap 5), a's 2nd token. 8 to 11 and 11 to 14: a's
    3rd and 4th. Samples: a (14-3)/3 = 11/3, b 5/1 = 5. min R24(11/3), max 5, mean
    R24((11/3 + 5) / 2) = R24(13/3), p50 (rank 1) 11/3, p90 to p99 5."""
    wl = workload(request("a", 0, 1, 4), request("b", 0, 1, 2))
    report = ok(tmp_path, scenario(), wl)
    assert by_id(report)["a"]["token_times_us"] == [3, 8, 11, 14]
    assert report["summary"]["tpot_us"] == {
        "count": 2,
        "min": 11 / 3,
        "max": 5,
        "mean": 13 / 3,
        "p50": 11 / 3,
        "p90": 5,
        "p95": 5,
        "p99": 5,
    }
    assert report["summary"]["itl_us"]["mean"] == 16 / 4  # pooled: gaps 5, 5, 3, 3


@pytest.mark.parametrize(
    ("scn_extra", "wl", "pointer"),
    [
        ({"stop_at_us": 10}, workload(request("a", 10, 1, 1)), "s.json: /stop_at_us"),
        (
            {"closed_loop": {"max_in_flight": 0}},
            workload(request("a", 0, 1, 1)),
            "/closed_loop/max_in_flight",
        ),
        ({"slo": {}}, workload(request("a", 0, 1, 1)), "s.json: /slo"),
        ({}, workload(request("a", 0, 1, 1, session="z"), sessions=["s"]), "/requests/0/session"),
        ({}, workload(request("a", 0, 1, 1), sessions=["s"]), "/sessions/0"),
        ({}, workload(request("a", 0, 1, 1, think_time_us=1)), "/requests/0/think_time_us"),
        (
            {},
            workload(request("a", 0, 1, 1, session="s", think_time_us=1), sessions=["s"]),
            "/requests/0/think_time_us",
        ),
        (
            {},
            workload(
                request("a", 5, 1, 1, session="s"),
                request("b", 4, 1, 1, session="s"),
                sessions=["s"],
            ),
            "/requests/1/arrival_us",
        ),
        (
            {},
            workload(request("a", 5, 1, 1, session="s"), sessions=["s", "s"]),
            "/sessions/1/id",
        ),
    ],
)
def test_r4_r59_r62_bad_inputs_exit_2_naming_file_and_pointer(
    tmp_path: Path, scn_extra: dict[str, Any], wl: dict[str, Any], pointer: str
) -> None:
    code, error, report = run(tmp_path, scenario(**scn_extra), wl)
    assert (code, report) == (2, None)
    assert pointer + ": expected" in error


def test_r38_section_13_inputs_need_report_5_0(tmp_path: Path) -> None:
    """A scenario 1.3 or a workload 1.2 asked for with report 4.0 is refused, naming 5.0."""
    wl = workload(request("a", 0, 1, 1))
    code, error, report = run(tmp_path, scenario(), wl, version="4.0")
    assert (code, report) == (2, None)
    assert "--report-version 5.0" in error


def test_r64_without_section_13_members_report_5_0_is_4_0_plus_the_migration(
    tmp_path: Path,
) -> None:
    """Same 1.0 inputs: 5.0 adds session null, cut_off 0 and tpot_us, and nothing else."""
    scn = scenario()
    scn["schema_version"] = "1.0"
    wl = workload(request("a", 0, 3, 3), request("b", 1, 2, 2))
    wl["schema_version"] = "1.0"
    new = ok(tmp_path, scn, wl, trace=True)
    code, _, old = run(tmp_path, scn, wl, version="4.0", trace=True)
    assert code == 0
    assert old is not None
    for e in new["requests"]:
        assert e.pop("session") is None
    assert new["summary"].pop("cut_off") == 0
    assert new["summary"].pop("tpot_us")["count"] == 2
    new["schema_version"] = old["schema_version"]
    assert new == old
