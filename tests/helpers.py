"""Builders for input documents, shared by the tests."""

from __future__ import annotations

import contextlib
import copy
import csv
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from servesim_conformance.documents import timing_doc

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"

__all__ = [
    "EXAMPLES",
    "REPO",
    "as_report_1_0",
    "as_report_2_0",
    "as_report_3_0",
    "as_report_4_0",
    "as_report_5_0",
    "load_module",
    "replay_args",
    "run_servesim",
    "scenario_doc",
    "timing_doc",
    "workload_doc",
    "write_inputs",
]


def scenario_doc(
    *,
    workers: int = 1,
    policy: str = "round_robin",
    seed: int | None = None,
    max_num_seqs: int = 4,
    max_batched_tokens: int = 64,
    max_model_len: int = 1024,
    max_chunk_tokens: int | None = None,
) -> dict[str, Any]:
    """A scenario document; chunked prefill when ``max_chunk_tokens`` is given."""
    routing: dict[str, Any] = {"policy": policy}
    if seed is not None:
        routing["seed"] = seed
    prefill: dict[str, Any] = {"mode": "whole"}
    if max_chunk_tokens is not None:
        prefill = {"mode": "chunked", "max_chunk_tokens": max_chunk_tokens}
    return {
        "document": "scenario",
        "schema_version": "1.0",
        "fleet": {"workers": workers},
        "routing": routing,
        "scheduler": {
            "max_num_seqs": max_num_seqs,
            "max_batched_tokens": max_batched_tokens,
            "max_model_len": max_model_len,
            "prefill": prefill,
        },
    }


def workload_doc(*requests: tuple[str, int, int, int]) -> dict[str, Any]:
    """A workload document from ``(id, arrival_us, prompt_tokens, max_output_tokens)`` tuples."""
    return {
        "document": "workload",
        "schema_version": "1.0",
        "requests": [
            {"id": i, "arrival_us": a, "prompt_tokens": p, "max_output_tokens": o}
            for i, a, p, o in requests
        ],
    }


def write_inputs(
    folder: Path, scenario: dict[str, Any], workload: dict[str, Any], timing: dict[str, Any]
) -> dict[str, Path]:
    """Write the three documents into ``folder``; their paths by role."""
    paths = {
        "scenario": folder / "scenario.json",
        "workload": folder / "workload.json",
        "timing_profile": folder / "timing-profile.json",
    }
    for role, document in zip(paths, (scenario, workload, timing), strict=True):
        paths[role].write_text(json.dumps(document), encoding="utf-8")
    return paths


def sweep_file(folder: Path, axes: dict[str, Any], target: dict[str, Any] | None = None) -> Path:
    """A sweep file ``folder/sweep.json`` over the documents of ``write_inputs``."""
    document: dict[str, Any] = {
        "document": "sweep",
        "schema_version": "1.0",
        "scenario": "scenario.json",
        "workload": "workload.json",
        "timing_profile": "timing-profile.json",
        "axes": axes,
    }
    if target is not None:
        document["target"] = target
    path = folder / "sweep.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def run_sweep(*arguments: str | Path) -> int:
    """``servesim sweep`` in this process; its exit status."""
    from servesim_cli.main import main

    return main(["sweep", *map(str, arguments)])


def sweep_bytes(path: Path, folder: Path, name: str, *options: str) -> tuple[bytes, bytes]:
    """``servesim sweep`` writing ``folder/name.csv`` and ``.json`` (exit 0); their bytes."""
    out = folder / f"{name}.csv", folder / f"{name}.json"
    assert run_sweep(path, *options, "--csv", out[0], "--json", out[1]) == 0
    return out[0].read_bytes(), out[1].read_bytes()


def progress_lines(err: str) -> list[str]:
    """The progress lines ``servesim sweep`` wrote on stderr, a point each."""
    return [line for line in err.splitlines() if line.startswith("servesim sweep: [")]


def csv_rows(path: Path) -> list[dict[str, str]]:
    """A CSV file's rows by column name."""
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


def load_module(name: str, path: Path) -> ModuleType:
    """A Python file that is not in a package (an example, the plain loop), as a module."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def replay_args(paths: dict[str, Path], output: Path, *options: str) -> list[str | Path]:
    """``servesim replay``'s arguments for inputs written by ``write_inputs``."""
    return [
        "replay",
        "--scenario",
        paths["scenario"],
        "--workload",
        paths["workload"],
        "--timing-profile",
        paths["timing_profile"],
        "--output",
        output,
        *options,
    ]


def run_servesim(*arguments: str | Path) -> subprocess.CompletedProcess[str]:
    """Run the ``servesim`` command in a fresh process, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "servesim_cli", *map(str, arguments)],
        capture_output=True,
        text=True,
        check=False,
    )


#: R123's members of a worker, with their values for a fleet that never changes (R124) where
#: they do not depend on the makespan.
_STATIC_WORKER = {
    "lifecycle": [{"at_us": 0, "state": "active"}],
    "created_us": 0,
    "starting_us": 0,
    "draining_us": 0,
    "failed_us": 0,
    "failures": 0,
    "migrated_out": 0,
    "failed_requests": 0,
    "lost_tokens": 0,
}


def as_report_9_0(report: dict[str, Any]) -> dict[str, Any]:
    """What a report 9.0 writer writes for the same replay (inputs without a host pool): the
    10.0 ``report`` without R140's members (SPEC.md R141), each checked to be the value without
    a host tier; a 9.0 (or older) ``report`` is returned as it is."""
    old = copy.deepcopy(report)
    if old["schema_version"] != "10.0":
        return old
    old["schema_version"] = "9.0"
    assert old.pop("host_transfers") == (None if old["trace"] is None else [])
    for request in old["requests"]:
        dropped = [request.pop("host_reused_prompt_tokens"), request.pop("load_wait_us")]
        assert dropped == [0, None], "a 9.0 report comes from inputs without a host pool"
    holders = [*old["workers"], *old["pools"]]
    holders += [rank for worker in old["workers"] for rank in worker["ranks"]]
    for holder in holders:
        assert holder.pop("host") is None, "no cache of a 9.0 report's inputs has host"
    summary = old["summary"]
    kv_cache = summary["kv_cache"]
    if kv_cache is not None:
        assert kv_cache.pop("host_reused_prompt_tokens") == 0
        positive = summary["prompt_tokens"] > 0
        assert kv_cache.pop("host_reuse_ratio") == (0 if positive else None)
        assert kv_cache.pop("gpu_reuse_ratio") == kv_cache["prefix_reuse_ratio"]
        assert kv_cache.pop("host") is None
    return old


def as_report_8_0(report: dict[str, Any]) -> dict[str, Any]:
    """What a report 8.0 writer writes for the same replay (a fleet that never changes): the
    9.0 form of ``report`` without R123's members (SPEC.md R124), each checked to be such a
    fleet's (every worker active from 0 for the makespan M, nothing failed, migrated or scaled,
    a trace entry cut only by a stop time, which is the latest terminal time); an 8.0 (or
    older) ``report`` is returned as it is."""
    old = as_report_9_0(report)
    if old["schema_version"] != "9.0":
        return old
    old["schema_version"] = "8.0"
    makespan = old["summary"]["makespan_us"]
    for request in old["requests"]:
        dropped = [request.pop(name) for name in ("migrations", "fail_reason")]
        dropped += [request.pop(name) for name in ("lost_tokens", "recomputed_tokens")]
        assert dropped == [[], None, 0, 0], "an 8.0 report comes from a fleet that never changes"
        assert request["outcome"] != "failed"
    for worker in old["workers"]:
        for name, value in _STATIC_WORKER.items():
            assert worker.pop(name) == value, f"worker {worker['worker']}: {name}"
        assert (worker.pop("worker_us"), worker.pop("active_us")) == (makespan, makespan)
    for pool in old["pools"]:
        workers = pool["workers"]
        assert (pool.pop("workers_created"), pool.pop("peak_workers")) == (workers, workers)
        assert pool.pop("worker_us") == workers * makespan
        assert pool.pop("worker_hours") == workers * makespan / 3_600_000_000
        assert (pool.pop("failures"), pool.pop("migrations"), pool.pop("failed")) == (0, 0, 0)
    summary = old["summary"]
    assert summary["rejected_by_reason"].pop("no_routable_worker") == 0
    assert summary.pop("failed_by_reason") == {
        "migration_limit": 0,
        "no_routable_worker": 0,
        "worker_failure": 0,
    }
    assert set(summary.pop("fleet").values()) == {0}
    for name in ("failed", "migrations", "lost_tokens", "recomputed_tokens"):
        assert summary.pop(name) == 0, name
    worker_us = sum(pool["workers"] for pool in old["pools"]) * makespan
    assert summary.pop("worker_us") == worker_us
    assert summary.pop("worker_hours") == worker_us / 3_600_000_000
    if old["trace"] is not None:
        latest = max(request["terminal_us"] for request in old["requests"])
        for entry in old["trace"]:
            assert entry.pop("cut_us") == (latest if entry["end_us"] > latest else None)
    return old


def as_report_7_0(report: dict[str, Any]) -> dict[str, Any]:
    """What a report 7.0 writer writes for the same replay (an aggregated fleet): the 8.0
    form of ``report`` without R107's members (SPEC.md R108), each checked to be an aggregated
    fleet's; a 7.0 (or older) ``report`` is returned as it is."""
    old = as_report_8_0(report)
    if old["schema_version"] != "8.0":
        return old
    old["schema_version"] = "7.0"
    for request in old["requests"]:
        assert request.pop("handoff") is None, "a 7.0 report comes from an aggregated fleet"
    holders = [*old["workers"], *old["pools"]]
    holders += [rank for worker in old["workers"] for rank in worker["ranks"]]
    for holder in holders:
        assert (holder.pop("handed_off"), holder.pop("activated")) == (0, 0)
    for pool in old["pools"]:
        assert pool.pop("role") is None, "a 7.0 report comes from pools without roles"
    assert old["summary"].pop("transfers") is None, "nor transfers anything"
    return old


def as_report_6_0(report: dict[str, Any]) -> dict[str, Any]:
    """What a report 6.0 writer writes for the same replay (the vLLM style): the 7.0 form of
    ``report`` without R95's members (SPEC.md R96), each checked to be the vLLM style's; a 6.0
    ``report`` is returned as it is."""
    old = as_report_7_0(report)
    if old["schema_version"] == "6.0":
        return old
    old["schema_version"] = "6.0"
    for request in old["requests"]:
        assert request.pop("retractions") == 0, "a 6.0 report comes from the vLLM style"
    caches = [old["summary"]["kv_cache"]]
    for holder in [*old["workers"], *old["pools"]]:
        assert holder.pop("style") == "vllm", "a 6.0 report comes from the vLLM style"
    for worker in old["workers"]:
        caches += [worker["kv_cache"], *(rank["kv_cache"] for rank in worker["ranks"])]
    caches += [pool["kv_cache"] for pool in old["pools"]]
    for cache in caches:
        if cache is not None:
            assert cache.pop("retractions") == 0, "the vLLM style retracts nobody"
            assert cache.pop("peak_reserved_blocks", None) is None, "nor reserves blocks"
    for entry in old["trace"] or []:
        assert (entry.pop("retracted"), entry.pop("new_token_ratio")) == ([], None)
        shape = entry["shape"]
        decode, prefill = shape["decode_requests"] > 0, shape["prefill_tokens"] > 0
        assert entry.pop("kind") == (
            "mixed" if decode and prefill else "decode" if decode else "prefill"
        )
    return old


def as_report_5_0(report: dict[str, Any]) -> dict[str, Any]:
    """What a report 5.0 writer writes for the same replay (one pool "default" of one-rank
    workers): the 6.0 form of ``report`` without R85's members (SPEC.md R86), each checked to
    be what such a fleet gives."""
    old = as_report_6_0(report)
    old["schema_version"] = "5.0"
    inputs = old["inputs"]
    (profile,) = inputs.pop("timing_profiles")
    assert profile == {"pool": "default", **inputs["timing_profile"]}, "one default pool"
    (pool,) = old.pop("pools")
    assert (pool["name"], pool["dp_size"]) == ("default", 1), "a 5.0 report has one-rank workers"
    for request in old["requests"]:
        pool_name, rank = request.pop("pool"), request.pop("rank")
        routed = request["worker"] is not None
        assert (pool_name, rank) == (("default", 0) if routed else (None, None))
    for worker in old["workers"]:
        assert (worker.pop("pool"), worker.pop("pool_worker")) == ("default", worker["worker"])
        (rank_entry,) = worker.pop("ranks")
        assert rank_entry.pop("rank") == 0
        assert rank_entry == {name: worker[name] for name in rank_entry}, "the rank is the worker"
    for entry in old["trace"] or []:
        assert entry.pop("rank") == 0
        assert entry.pop("duration_us") == entry["end_us"] - entry["start_us"]
    return old


def as_report_4_0(report: dict[str, Any]) -> dict[str, Any]:
    """What a report 4.0 writer writes for the same replay (no sessions, closed loop, stop time
    or objectives): the 5.0 form of ``report`` without R64's members (SPEC.md R64)."""
    old = as_report_5_0(report)
    old["schema_version"] = "4.0"
    for request in old["requests"]:
        session = request.pop("session")
        assert session is None, "a 4.0 report comes from a workload without sessions"
        assert "slo_met" not in request, "a 4.0 report comes from a scenario without slo"
    summary = old["summary"]
    assert summary.pop("cut_off") == 0, "a 4.0 report comes from a scenario without a stop time"
    assert "goodput" not in summary, "a 4.0 report comes from a scenario without slo"
    del summary["tpot_us"]
    return old


def as_report_3_0(report: dict[str, Any]) -> dict[str, Any]:
    """What a report 3.0 writer writes for the same replay (round robin or random routing): the
    4.0 form of ``report`` without R57's member (SPEC.md R57)."""
    old = as_report_4_0(report)
    old["schema_version"] = "3.0"
    for request in old["requests"]:
        cached = request.pop("cached_blocks_at_routing")
        assert cached is None, "a 3.0 report comes from a scenario without state-aware routing"
    return old


def as_report_2_0(report: dict[str, Any]) -> dict[str, Any]:
    """What a report 2.0 writer writes for the same replay (no cache): the 3.0 form of
    ``report`` without R52's members (SPEC.md R53)."""
    old = as_report_3_0(report)
    assert old["summary"]["kv_cache"] is None, "a 2.0 report comes from a scenario without a cache"
    old["schema_version"] = "2.0"
    for request in old["requests"]:
        del request["reused_prompt_tokens"], request["preemptions"]
    del old["summary"]["rejected_by_reason"]["exceeds_kv_cache"], old["summary"]["kv_cache"]
    for worker in old["workers"]:
        del worker["kv_cache"]
    for entry in old["trace"] or []:
        del entry["kv_blocks_in_use"], entry["preempted"]
    return old


def as_report_1_0(report: dict[str, Any]) -> dict[str, Any]:
    """What a report 1.0 writer writes for the same replay (a synthetic profile, no cache): 2.0
    without its calibration echo and the trace's shapes."""
    old = as_report_2_0(report)
    old["schema_version"] = "1.0"
    del old["inputs"]["timing_profile"]["calibration"]
    for entry in old["trace"] or []:
        del entry["shape"]
    return old


def run_plain_loop(
    plain: ModuleType,
    folder: Path,
    documents: tuple[Any, Any, Any],
    version: str,
    *options: str,
) -> tuple[int, str, dict[str, Any] | None]:
    """Exit code, standard error and report of the plain loop (``plain``, the loaded
    ``servesim_independent`` module) replaying (scenario, workload, timing profile) in
    ``folder``, writing report ``version``; ``options`` such as ``--trace`` follow."""
    paths = {}
    for name, document in zip(("s", "w", "t"), documents, strict=True):
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(document))
    output = folder / "r.json"
    arguments = ["replay", "--scenario", str(paths["s"]), "--workload", str(paths["w"])]
    arguments += ["--timing-profile", str(paths["t"]), "--output", str(output)]
    arguments += ["--report-version", version, *options]
    error = io.StringIO()
    with contextlib.redirect_stderr(error):
        code = plain.main(arguments)
    report = json.loads(output.read_text()) if output.exists() else None
    return code, error.getvalue(), report


def released_scenario_schema(version: str) -> Any:
    """The frozen scenario schema of a released version (R34), parsed."""
    path = REPO / "schemas" / "released" / version / "scenario.schema.json"
    return json.loads(path.read_text(encoding="utf-8"))
