"""Benchmarks of the reference simulator: figures printed, never asserted (README: Speed).

    python benchmarks/bench.py            # the full set (several minutes)
    python benchmarks/bench.py --short    # what CI runs: small slices, same code paths
    python benchmarks/bench.py --only kv  # the KV cache section alone (benchmarks/bench_kv.py)
    python benchmarks/bench.py --only routing  # state-aware routing (benchmarks/bench_routing.py)
    python benchmarks/bench.py --only sessions  # closed loop, stop time (bench_sessions.py)
    python benchmarks/bench.py --only pools  # pools and attention-DP ranks (bench_pools.py)
    python benchmarks/bench.py --only styles  # scheduler styles (bench_styles.py)
    python benchmarks/bench.py --only disagg  # disaggregated prefill and decode (bench_disagg.py)
    python benchmarks/bench.py --only fleet  # scaling and failures (bench_fleet.py)
    python benchmarks/bench.py --only host  # multi-turn reuse, host KV tier (bench_host.py)

The real traces are read from SERVESIM_TRACES (or --traces), by default the copies shipped in
benchmarks/traces/ (their sources and licences: benchmarks/traces/README.md); the shipped ones
missing is a broken checkout, and the run fails. Dynamo's replay, the outside baseline, is
installed on first use in its own virtual environment under SERVESIM_BENCH_CACHE (default
~/.cache/servesim-bench); without it the benchmark says so and measures the rest.

Every configuration runs in its own process, so that peak RSS is that configuration's alone.
The baseline is the plain per-step loop in conformance/examples/independent/ (written from
SPEC.md, one heap event per step, the obvious implementation), timed on the same inputs in the
same run; its report must be byte-identical to the reference's, or the ratio means nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from servesim.contract.canonical import canonical_bytes
from servesim.contract.migrations import CHAIN
from servesim.contract.model import StepShape
from servesim.contract.schemas import WRITTEN_REPORT_VERSIONS
from servesim.contract.timing_profile import build_timing_profile

REPO = Path(__file__).resolve().parents[1]
PLAIN_LOOP = REPO / "conformance" / "examples" / "independent" / "servesim_independent.py"
#: The plain loop writes the report version it is asked for; it writes no report 6.0 (pools,
#: SPEC.md section 15), so it is asked for 5.0 and its report is migrated to the version the
#: reference writes (R86's migration is exact for a scenario without pools:
#: ``migrated_to_current``), so that the two reports compare byte for byte.
PLAIN_LOOP_REPORT = ("--report-version", "5.0")


def migrated_to_current(path: Path) -> None:
    """Rewrite the plain loop's report at ``path`` as the report version the reference writes
    (R37's exact steps), canonical (R23), as the harness migrates an older report."""
    value = json.loads(path.read_bytes())
    if value["schema_version"] != WRITTEN_REPORT_VERSIONS[-1]:
        path.write_bytes(canonical_bytes(CHAIN.migrate(value).document) + b"\n")


def trace_sources(traces: Path) -> dict[str, Path]:
    """Where each real trace is, in a traces folder laid out as ``benchmarks/traces/``."""
    return {
        "mooncake": traces / "mooncake" / "conversation_trace.jsonl",
        "azure": traces / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv",
    }


#: The traces shipped with the repository (benchmarks/traces/README.md), the default folder.
SHIPPED_TRACES = REPO / "benchmarks" / "traces"
TRACES = Path(os.environ.get("SERVESIM_TRACES") or SHIPPED_TRACES)
SOURCES = trace_sources(TRACES)  # --traces replaces them

#: A plausible engine: 3 ms per step, 20 us per prefill token, 100 us per decoding request.
TIMING = {
    "document": "timing_profile",
    "schema_version": "1.0",
    "model": {
        "kind": "synthetic_linear",
        "step_overhead_ns": 3_000_000,
        "prefill_token_ns": 20_000,
        "decode_token_ns": 100_000,
    },
}


#: The engine the measured profiles below claim; the scenario's limits, so every step is covered.
_LIMITS = {"max_num_seqs": 64, "max_batched_tokens": 8192, "max_model_len": 131072}
_CALIBRATION = {
    "engine": "bench",
    "engine_version": "0",
    "model": "synthetic",
    "model_revision": "0",
    "gpu": "none",
    "server_config_sha256": "0" * 64,
    "source_sha256": "0" * 64,
    "limits": _LIMITS,
}
_COVERAGE = {
    "decode_requests": {"min": 0, "max": 64},
    "context_tokens": {"min": 0, "max": 64 * 131072},
    "prefill_tokens": {"min": 0, "max": 8192},
}

#: A measured-style regression (R42): the engine above, plus 20 ps per context token.
REGRESSION = {
    "document": "timing_profile",
    "schema_version": "1.1",
    "calibration": _CALIBRATION,
    "model": {
        "kind": "regression",
        "intercept_ns": 3_000_000,
        "prefill_knots": [
            {"tokens": 0, "ns": 0},
            {"tokens": 2048, "ns": 40_000_000},
            {"tokens": 8192, "ns": 180_000_000},
        ],
        "decode_request_ns": 100_000,
        "context_token_ps": 20_000,
        "coverage": _COVERAGE,
    },
}


def _grid_profile() -> dict[str, Any]:
    """A grid (R41) sampled from ``REGRESSION`` on a few points per axis."""
    axes = {
        "decode_requests": [0, 1, 8, 32, 64],
        "context_tokens": [0, 4096, 65536, 1048576, 64 * 131072],
        "prefill_tokens": [0, 512, 2048, 8192],
    }

    regression = build_timing_profile(REGRESSION).model
    durations = [
        [
            [regression.step_duration_us(StepShape(d, c, p)) for p in axes["prefill_tokens"]]
            for c in axes["context_tokens"]
        ]
        for d in axes["decode_requests"]
    ]
    coverage = {name: {"min": points[0], "max": points[-1]} for name, points in axes.items()}
    model = {"kind": "grid", "axes": axes, "duration_us": durations, "coverage": coverage}
    return {**REGRESSION, "model": model}


GRID = _grid_profile()


def scenario(workers: int) -> dict[str, Any]:
    return {
        "document": "scenario",
        "schema_version": "1.0",
        "fleet": {"workers": workers},
        "routing": {"policy": "round_robin"},
        "scheduler": {
            "max_num_seqs": 64,
            "max_batched_tokens": 8192,
            "max_model_len": 131072,
            "prefill": {"mode": "chunked", "max_chunk_tokens": 2048},
        },
    }


def import_trace(
    source: str, folder: Path, path: Path | None = None, *, prefix_hashes: bool = False
) -> dict[str, Any]:
    """The whole trace (or the one at ``path``) as a workload (through ``servesim import``);
    Mooncake's prefix hashes only when asked (a workload 1.1), so that the sections before the
    KV cache replay the same 1.0 workload as before."""
    output = folder / f"{source}{'-hashed' if prefix_hashes else ''}.json"
    hashes = [] if prefix_hashes or source != "mooncake" else ["--no-prefix-hashes"]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "servesim_cli",
            "import",
            source,
            str(path or SOURCES[source]),
            "-o",
            str(output),
            *hashes,
        ],
        check=True,
        capture_output=True,
    )
    workload: dict[str, Any] = json.loads(output.read_text())
    return workload


def tiled(workload: dict[str, Any], count: int) -> dict[str, Any]:
    """The first ``count`` requests of the trace repeated end to end, each copy shifted by the
    trace's span so the arrival rate stays the trace's."""
    requests = workload["requests"]
    span = requests[-1]["arrival_us"] + 1
    out = []
    for index in range(count):
        copy, position = divmod(index, len(requests))
        request = requests[position]
        out.append(
            {
                **request,
                "id": f"{request['id']}-c{copy}",
                "arrival_us": request["arrival_us"] + copy * span,
            }
        )
    return {**workload, "requests": out}


def measure(command: list[str]) -> dict[str, Any]:
    """Run one configuration in a child process; its figures as JSON."""
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    figures: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def count_formed_steps() -> list[int] | None:
    """Count the steps the reference's event loop forms one by one: one ``Worker.form_step``
    call per step a one-rank worker or a rank forms (reference/servesim/engine/worker.py), a
    run of identical decode steps (engine/decode_runs.py) and a rank's decode step carried
    across passes (engine/passes.py) counting once; None when the engine has no such hook."""
    try:
        from servesim.engine.worker import Worker
    except ImportError:
        return None
    original = getattr(Worker, "form_step", None)
    if original is None:
        return None
    counter = [0]

    def counting(worker: Any, *arguments: Any, **options: Any) -> Any:
        counter[0] += 1
        return original(worker, *arguments, **options)

    Worker.form_step = counting  # type: ignore[method-assign]
    return counter


def child(arguments: argparse.Namespace) -> None:
    """In the child: replay once and print wall and CPU seconds, counts and peak RSS."""
    counter = count_formed_steps() if arguments.implementation == "reference" else None
    started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    # R84: one --timing-profile FILE, or one POOL=FILE per pool
    profiles = [part for timing in arguments.timing for part in ("--timing-profile", timing)]
    argv = [
        "replay",
        "--scenario",
        arguments.scenario,
        "--workload",
        arguments.workload,
        *profiles,
        "--output",
        arguments.output,
    ]
    argv = [*argv, "--trace"] if arguments.trace else argv
    if arguments.implementation == "reference":
        from servesim_cli.main import main as servesim_main  # as `servesim replay` runs

        code = servesim_main([*argv, "--quiet"])  # the replay alone, not its summary table
        if code:  # its message is on standard error; no figures without a report
            raise SystemExit(code)
    else:
        namespace: dict[str, Any] = {"__name__": "plain_loop"}
        exec(compile(PLAIN_LOOP.read_text(), str(PLAIN_LOOP), "exec"), namespace)
        namespace["main"]([*argv, *PLAIN_LOOP_REPORT])
    wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)  # before reading the report
    if arguments.implementation != "reference":
        migrated_to_current(Path(arguments.output))  # after the timing: not the loop's work
    peak_kib = usage.ru_maxrss
    report = json.loads(Path(arguments.output).read_bytes())
    summary = report["summary"]
    figures = {
        "wall_s": wall,
        "steps": summary["steps"],
        "output_tokens": summary["output_tokens"],
        "requests": summary["requests"],
        "peak_rss_mib": peak_kib / 1024,
        # the steadier figure when other work shares the machine
        "cpu_s": usage.ru_utime - before.ru_utime + usage.ru_stime - before.ru_stime,
    }
    if summary.get("kv_cache") is not None:  # R52: what the report says of the cache
        figures["kv_cache"] = summary["kv_cache"]
        figures["peak_blocks_in_use"] = max(
            worker["kv_cache"]["peak_blocks_in_use"] for worker in report["workers"]
        )
        reserved = [  # R95 (report 7.0): the trtllm style's held and reserved blocks
            worker["kv_cache"].get("peak_reserved_blocks") for worker in report["workers"]
        ]
        if None not in reserved:
            figures["peak_reserved_blocks"] = max(reserved)
    figures["rejected"] = summary["rejected"]
    figures["completed"] = summary["completed"]
    figures["cut_off"] = summary.get("cut_off", 0)  # R62, report 5.0
    figures["ttft_p50_us"] = summary["ttft_us"]["p50"]
    figures["ttft_p99_us"] = summary["ttft_us"]["p99"]
    tpot = summary["tpot_us"] or {}  # null when no request produced two tokens (R27)
    figures["tpot_p50_us"] = tpot.get("p50")
    figures["tpot_p99_us"] = tpot.get("p99")
    figures["busy_us"] = [worker["busy_us"] for worker in report["workers"]]
    # R85: every rank's steps (a worker without ``ranks`` is one rank: its steps are its passes)
    figures["rank_steps"] = sum(
        rank["steps"] for worker in report["workers"] for rank in worker.get("ranks") or [worker]
    )
    figures["makespan_us"] = summary["makespan_us"]
    figures["goodput"] = summary.get("goodput")  # R63, with objectives
    figures["transfers"] = summary.get("transfers")  # R107, report 8.0
    figures["worker_hours"] = summary.get("worker_hours")  # R122, report 9.0
    figures["failed"] = summary.get("failed", 0)  # R118
    figures["migrations"] = summary.get("migrations", 0)
    figures["peak_workers"] = sum(pool.get("peak_workers", 0) for pool in report["pools"])
    if counter is not None:
        figures["formed_steps"] = counter[0]
    print(json.dumps(figures))


def run(
    folder: Path,
    name: str,
    workload: dict[str, Any],
    workers: int,
    *,
    trace: bool,
    implementation: str = "reference",
    timing: dict[str, Any] = TIMING,
    setup: tuple[str, dict[str, Any]] | None = None,
    pool_timings: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One replay in a child process; ``setup``, a tag and a scenario, replaces
    ``scenario(workers)``; ``pool_timings`` names a profile per pool (R84) instead of
    ``timing``."""
    kind = timing["model"]["kind"]
    tag, scenario_document = setup or (f"s{workers}", scenario(workers))
    paths = {
        "scenario": folder / f"{tag}.json",
        "timing": folder / f"t-{kind}.json",
        "workload": folder / f"{name}.json",
        "output": folder / f"r-{name}-{tag}-{implementation}-{kind}.json",
    }
    paths["scenario"].write_text(json.dumps(scenario_document))
    paths["timing"].write_text(json.dumps(timing))
    if not paths["workload"].exists():
        paths["workload"].write_text(json.dumps(workload))
    command = [
        sys.executable,
        __file__,
        "--child",
        implementation,
        *(f"--{key}={value}" for key, value in paths.items()),
    ]
    if pool_timings is not None:  # R84: one POOL=FILE per pool instead of the one FILE
        command = [part for part in command if not part.startswith("--timing=")]
        for pool, profile in pool_timings.items():
            path = folder / f"t-{tag}-{pool}.json"
            path.write_text(json.dumps(profile))
            command.append(f"--timing={pool}={path}")
    figures = measure([*command, "--trace"] if trace else command)
    figures["report"] = paths["output"]
    return figures


def line(label: str, figures: dict[str, Any]) -> str:
    wall = figures["wall_s"]
    return (
        f"{label:<38} {wall:8.2f} s {figures['steps'] / wall:12,.0f} steps/s "
        f"{figures['output_tokens'] / wall:12,.0f} tok/s {figures['peak_rss_mib']:8.0f} MiB"
    )


#: The outside baseline (/work/shared/reading/dynamo-replay.md): its offline replay, installed
#: from PyPI without the dependency (aisimulate) that cannot be installed here and that the
#: replay does not use.
DYNAMO_VERSION = "1.6.1"
DYNAMO_DRIVER = Path(__file__).resolve().parent / "dynamo_replay.py"

#: Dynamo's ``fixed`` timing model: a pass lasts this long if it prefills (about a 2,048-token
#: chunk at 20 us a token), plus this long if it decodes.
FIXED_PREFILL_US = 40_000
FIXED_DECODE_US = 3_000


def fixed_grid_profile() -> dict[str, Any]:
    """Dynamo's ``fixed`` timing as a servesim grid (R41), exactly: ``FIXED_DECODE_US`` if the
    step decodes plus ``FIXED_PREFILL_US`` if it prefills. Integer shapes never fall strictly
    between 0 and 1, so interpolation never mixes the two; the all-zero corner is never used."""
    axes = {
        "decode_requests": [0, 1, _LIMITS["max_num_seqs"]],
        "context_tokens": [0, _COVERAGE["context_tokens"]["max"]],
        "prefill_tokens": [0, 1, _LIMITS["max_batched_tokens"]],
    }

    def duration(decode: int, prefill: int) -> int:
        return max(1, FIXED_DECODE_US * (decode > 0) + FIXED_PREFILL_US * (prefill > 0))

    durations = [
        [[duration(d, p) for p in axes["prefill_tokens"]] for _ in axes["context_tokens"]]
        for d in axes["decode_requests"]
    ]
    coverage = {name: {"min": points[0], "max": points[-1]} for name, points in axes.items()}
    model = {"kind": "grid", "axes": axes, "duration_us": durations, "coverage": coverage}
    return {**REGRESSION, "model": model}


def dynamo_python() -> tuple[Path | None, str]:
    """The Python of a virtual environment holding Dynamo's replay, made once and kept under
    SERVESIM_BENCH_CACHE (default ~/.cache/servesim-bench); ``(None, why)`` when it cannot be
    installed (no network, no wheel for this platform)."""
    cache = Path(
        os.environ.get("SERVESIM_BENCH_CACHE") or Path.home() / ".cache" / "servesim-bench"
    )
    venv = cache / f"dynamo-{DYNAMO_VERSION}-venv"
    python = venv / "bin" / "python"
    works = [str(python), "-c", "import dynamo.replay"]
    if python.exists() and subprocess.run(works, capture_output=True).returncode == 0:
        return python, f"reused {venv}"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    wheels = [f"ai-dynamo=={DYNAMO_VERSION}", f"ai-dynamo-runtime=={DYNAMO_VERSION}"]
    for command in (
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [*pip, "--no-deps", *wheels],
        [*pip, "typing-extensions"],
        works,
    ):
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            errors = [text for text in result.stderr.splitlines() if "ERROR" in text]
            why = (errors or result.stderr.strip().splitlines() or ["no message"])[-1]
            return None, f"`{' '.join(command[1:])}` failed: {why}"
    return python, f"installed in {venv}"


#: Runs a command (``argv[2:]``) as its own child and writes that child's figures to
#: ``argv[1]``. Linux carries a process's peak RSS across fork and exec into the new program's
#: figure, so the command is started from this small process, not from the benchmark's, whose
#: peak grows as it reads reports.
_LAUNCHER = """
import json, os, sys, time
started = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
figures = {
    "wall_s": time.perf_counter() - started,
    "cpu_s": usage.ru_utime + usage.ru_stime,
    "peak_rss_mib": usage.ru_maxrss / 1024,
}
with open(sys.argv[1], "w") as output:
    json.dump(figures, output)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def whole_process(command: list[str], folder: Path) -> dict[str, Any]:
    """Run ``command`` to its end; its wall seconds, CPU seconds (all its threads: Dynamo's
    runtime may use several) and peak RSS measured from outside, so that start-up, imports,
    reading and writing all count, whatever the language inside. (CPU time is the steadier
    figure on a shared machine, wall time the one users see.)"""
    figures = folder / "figures.json"
    result = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, str(figures), *command],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{command[:4]} exited {result.returncode}: {result.stderr[-500:]}")
    measured: dict[str, Any] = json.loads(figures.read_text())
    return measured


def dynamo_baseline(folder: Path, limit: int | None) -> None:
    """Dynamo's replay against ``servesim replay`` on the same Mooncake requests and fleet,
    each as a whole process writing its per-request output (servesim: its full report, with
    every token time; Dynamo: its per-request records)."""
    trace = SOURCES["mooncake"]
    if limit:  # the first requests, for both (the trace's first arrival stays at 0)
        lines = trace.read_text().splitlines(keepends=True)[:limit]
        trace = folder / "mooncake-head.jsonl"
        trace.write_text("".join(lines))
    workload = import_trace("mooncake", folder, trace)
    count = len(workload["requests"])
    print(
        f"\n== Dynamo's replay {DYNAMO_VERSION} as a baseline, mooncake {count} req, 16 workers =="
    )
    python, how = dynamo_python()
    if python is None:
        print(f"Dynamo not measured: could not install ai-dynamo {DYNAMO_VERSION} ({how})")
        return
    prefill_ms, decode_ms = FIXED_PREFILL_US // 1000, FIXED_DECODE_US // 1000
    print(
        f"Dynamo {how}. Both: round robin, vllm style, 64 seqs, 8,192 tokens a step, chunked.\n"
        f"Timing: Dynamo's fixed model, {prefill_ms} ms a pass with prefill + {decode_ms} ms "
        "with decode;\nservesim: the same as a grid, and the synthetic profile above. The "
        "results differ (Dynamo\nmodels a KV cache, servesim's scenario does not): what is "
        "compared is the cost of a replay."
    )
    paths = {"scenario": folder / "s16.json", "workload": folder / "mooncake-baseline.json"}
    paths["scenario"].write_text(json.dumps(scenario(16)))
    paths["workload"].write_text(json.dumps(workload))
    records = folder / "dynamo-records.jsonl"
    dynamo = whole_process(
        [
            str(python),
            str(DYNAMO_DRIVER),
            str(trace),
            "--workers=16",
            f"--prefill-ms={FIXED_PREFILL_US / 1000}",
            f"--decode-ms={FIXED_DECODE_US / 1000}",
            f"--output={records}",
        ],
        folder,
    )
    written = sum(1 for _ in records.open())
    print(baseline_line(f"dynamo, {written} per-request records", dynamo))
    records.unlink()
    for name, timing in (("grid as fixed", fixed_grid_profile()), ("synthetic_linear", TIMING)):
        profile, report = folder / "t-baseline.json", folder / "r-baseline.json"
        profile.write_text(json.dumps(timing))
        ours = whole_process(
            [
                sys.executable,
                "-m",
                "servesim_cli",
                "replay",
                f"--scenario={paths['scenario']}",
                f"--workload={paths['workload']}",
                f"--timing-profile={profile}",
                f"--output={report}",
            ],
            folder,
        )
        tokens = token_time_count(report)
        print(baseline_line(f"servesim replay, {name}, full report", ours))
        print(
            f"dynamo / servesim ({name}): wall time {dynamo['wall_s'] / ours['wall_s']:.1f}x "
            f"(target >= 5x), CPU time {dynamo['cpu_s'] / ours['cpu_s']:.1f}x; "
            f"report: {count} requests, {tokens:,} token times"
        )
        report.unlink()


def token_time_count(report: Path) -> int:
    """How many token times a report holds, read in a child process: parsing hundreds of MB
    here would raise this process's peak RSS, which Linux passes on (across exec) to the next
    child measured from outside."""
    count = "import json, sys; print(json.load(open(sys.argv[1]))['summary']['output_tokens'])"
    result = subprocess.run(
        [sys.executable, "-c", count, str(report)], check=True, capture_output=True, text=True
    )
    return int(result.stdout)


def baseline_line(label: str, figures: dict[str, Any]) -> str:
    return (
        f"{label:<46} {figures['wall_s']:8.2f} s wall {figures['cpu_s']:8.2f} s CPU "
        f"{figures['peak_rss_mib']:8.0f} MiB"
    )


def kv_section(folder: Path, limit: int | None) -> None:
    """The KV cache section (benchmarks/bench_kv.py) on the Mooncake trace with its hashes."""
    from bench_kv import WORKERS, kv_cache_section

    print("\n== KV cache and prefix caching (issue 10) ==")
    hashed, replay = hashed_mooncake(folder, limit, WORKERS)
    kv_cache_section(hashed, scenario(WORKERS), replay, line)


def hashed_mooncake(
    folder: Path, limit: int | None, workers: int
) -> tuple[dict[str, Any], Callable[[str, dict[str, Any]], dict[str, Any]]]:
    """The Mooncake trace with its prefix hashes (tiled to ``limit`` requests), and
    ``replay(tag, scenario)``: the figures of one replay of it on ``workers`` workers, in a
    child process, its report deleted at once (a full report is hundreds of MB)."""
    hashed = import_trace("mooncake", folder, prefix_hashes=True)
    hashed = tiled(hashed, limit) if limit else hashed
    name = f"mooncake-hashed-{len(hashed['requests'])}"

    def replay(tag: str, setup: dict[str, Any]) -> dict[str, Any]:
        figures = run(folder, name, hashed, workers, trace=False, setup=(tag, setup))
        figures.pop("report").unlink()
        return figures

    return hashed, replay


def routing_section(folder: Path, limit: int | None) -> None:
    """The state-aware routing section (benchmarks/bench_routing.py) on the hashed Mooncake
    trace: round robin, least loaded and cache aware, against the trace's reuse ceiling."""
    from bench_routing import WORKERS
    from bench_routing import routing_section as section

    print("\n== state-aware routing (issue 11) ==")
    hashed, replay = hashed_mooncake(folder, limit, WORKERS)
    section(hashed, scenario(WORKERS), replay)


def pools_section(folder: Path, limit: int | None) -> None:
    """The pools and ranks section (benchmarks/bench_pools.py) on the Mooncake trace: 16 ranks
    as 16, 8 and 4 workers, and two pools of different speed, against the one-pool replay."""
    from bench_pools import pools_section as section

    print("\n== pools and attention-DP ranks (issue 23) ==")
    workload = import_trace("mooncake", folder)
    workload = tiled(workload, limit) if limit else workload
    name = f"mooncake-{len(workload['requests'])}"

    def replay(
        tag: str, setup: dict[str, Any], profiles: dict[str, dict[str, Any]] | None
    ) -> dict[str, Any]:
        workers = sum(pool["workers"] for pool in setup["fleet"].get("pools", [setup["fleet"]]))
        figures = run(
            folder, name, workload, workers, trace=False, setup=(tag, setup), pool_timings=profiles
        )
        figures.pop("report").unlink()
        return figures

    section(workload, scenario(16), TIMING, replay, line)


def styles_section(folder: Path, limit: int | None) -> None:
    """The scheduler styles section (benchmarks/bench_styles.py) on the hashed Mooncake trace:
    vllm, sglang and trtllm with and without cache pressure."""
    from bench_styles import WORKERS
    from bench_styles import styles_section as section

    print("\n== scheduler styles (issue 24) ==")
    hashed, replay = hashed_mooncake(folder, limit, WORKERS)
    section(hashed, scenario(WORKERS), replay, line)


def disagg_section(folder: Path, limit: int | None) -> None:
    """The disaggregation section (benchmarks/bench_disagg.py) on the hashed Mooncake trace:
    16 GPUs aggregated, and split into prefill and decode pools at two bandwidths."""
    from bench_disagg import disagg_section as section

    print("\n== disaggregated prefill and decode (issue 26) ==")
    hashed, replay = hashed_mooncake(folder, limit, 16)
    section(hashed, scenario(16), replay)


def fleet_section(folder: Path, limit: int | None) -> None:
    """The fleet-changes section (benchmarks/bench_fleet.py) on the Mooncake trace without its
    hashes: fixed fleets against a reactive policy, with and without hourly failures."""
    from bench_fleet import fleet_section as section

    print("\n== a fleet that changes: scaling and failures (issue 27) ==")
    workload = import_trace("mooncake", folder)
    workload = tiled(workload, limit) if limit else workload
    name = f"mooncake-{len(workload['requests'])}"

    def replay(tag: str, setup: dict[str, Any]) -> dict[str, Any]:
        figures = run(folder, name, workload, 0, trace=False, setup=(tag, setup))
        figures.pop("report").unlink()
        return figures

    section(workload, scenario(16), replay)


def imported(folder: Path, name: str, arguments: Sequence[str]) -> dict[str, Any]:
    """``servesim import ARGUMENTS`` into ``folder/name.json``, read back."""
    output = folder / f"{name}.json"
    command = [sys.executable, "-m", "servesim_cli", "import", *arguments, "-o", str(output)]
    subprocess.run(command, check=True, capture_output=True)
    workload: dict[str, Any] = json.loads(output.read_text())
    return workload


def host_section(folder: Path, limit: int | None) -> None:
    """The multi-turn reuse and host tier section (benchmarks/bench_host.py): the WEKA sessions
    and the Mooncake trace with inferred sessions, without and with session_prompts_extend,
    and with host pools of several sizes. ``limit`` (the short run) takes a few WEKA files and
    the first Mooncake lines."""
    import bench_host

    print("\n== multi-turn reuse and a host KV tier (issue 28) ==")
    sessions = SOURCES["mooncake"].parents[1] / "weka_agentic_sessions"
    names = bench_host.WEKA_SHORT if limit else sorted(p.name for p in sessions.glob("trace_*"))
    files = [str(sessions / name) for name in names]
    stagger = ["--stagger", str(bench_host.WEKA_STAGGER_S)]
    weka = imported(folder, "weka-sessions", ["weka", *files, *stagger])
    head = ["--limit", str(bench_host.MOONCAKE_SHORT)] if limit else []
    mooncake = imported(
        folder,
        "mooncake-inferred",
        ["mooncake", str(SOURCES["mooncake"]), "--infer-sessions", *head],
    )
    workloads = [
        (bench_host.WEKA, f"weka ({len(names)} files)", weka),
        (bench_host.MOONCAKE, "mooncake, inferred sessions", mooncake),
    ]

    def replay(
        tag: str, name: str, workload: dict[str, Any], setup: dict[str, Any]
    ) -> dict[str, Any]:
        figures = run(folder, name, workload, 0, trace=False, setup=(tag, setup))
        report = figures.pop("report")
        output = report.with_suffix(".figures.json")
        script = [sys.executable, str(Path(bench_host.__file__)), str(report), str(output)]
        subprocess.run(script, check=True)
        figures["report"] = json.loads(output.read_text())
        output.unlink()
        report.unlink()
        return figures

    bench_host.host_section(workloads, scenario(16), replay, 1 if limit else 3)


def arrivals_of(report: Path) -> list[int]:
    """Each request's ``arrival_us`` in a report, read in a child process: parsing a 48 MB
    report here would raise this process's peak RSS, which every child started after it
    inherits (Linux keeps ``ru_maxrss`` across fork and exec), and inflate their figures."""
    output = report.with_suffix(".arrivals.json")
    script = (
        "import json, sys; requests = json.load(open(sys.argv[1]))['requests']; "
        "json.dump([r['arrival_us'] for r in requests], open(sys.argv[2], 'w'))"
    )
    subprocess.run([sys.executable, "-c", script, str(report), str(output)], check=True)
    arrivals: list[int] = json.loads(output.read_text())
    output.unlink()
    return arrivals


def sessions_section(folder: Path, limit: int | None) -> None:
    """The closed loop and stop time section (benchmarks/bench_sessions.py) on the Mooncake
    trace without its hashes: open loop against closed loops and a stop time."""
    from bench_sessions import WORKERS
    from bench_sessions import sessions_section as section

    print("\n== closed loop and stop time (issue 13) ==")
    workload = import_trace("mooncake", folder)
    workload = tiled(workload, limit) if limit else workload
    name = f"mooncake-{len(workload['requests'])}"

    def replay(tag: str, setup: dict[str, Any], keep_arrivals: bool) -> dict[str, Any]:
        figures = run(folder, name, workload, WORKERS, trace=False, setup=(tag, setup))
        report = figures.pop("report")
        if keep_arrivals:
            figures["arrivals"] = arrivals_of(report)
        report.unlink()
        return figures

    def replay_at(tag: str, arrivals: Sequence[int]) -> dict[str, Any]:
        moved = {
            **workload,
            "requests": [
                {**request, "arrival_us": arrival}
                for request, arrival in zip(workload["requests"], arrivals, strict=True)
            ],
        }
        figures = run(folder, f"{name}-{tag}", moved, WORKERS, trace=False)
        figures.pop("report").unlink()
        return figures

    section(workload, scenario(WORKERS), replay, replay_at, line)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--short", action="store_true", help="small slices, for CI")
    parser.add_argument("--child", choices=["reference", "plain"], dest="implementation")
    for option in ("scenario", "workload", "output"):
        parser.add_argument(f"--{option}")
    parser.add_argument("--timing", action="append", default=[])
    parser.add_argument("--trace", action="store_true")
    parser.add_argument(
        "--traces",
        type=Path,
        metavar="DIR",
        help="a traces folder laid out as benchmarks/traces/ (default: $SERVESIM_TRACES, else "
        "benchmarks/traces, the traces shipped with the repository)",
    )
    parser.add_argument(
        "--no-dynamo", action="store_true", help="skip the Dynamo baseline (and its install)"
    )
    parser.add_argument(
        "--only",
        choices=["kv", "routing", "sessions", "pools", "styles", "disagg", "fleet", "host"],
        help="measure only this section (kv: the KV cache, issue 10; routing: state-aware "
        "routing, issue 11; sessions: closed loop and stop time, issue 13; pools: pools and "
        "attention-DP ranks, issue 23; styles: scheduler styles, issue 24; disagg: disaggregated "
        "prefill and decode, issue 26; fleet: scaling and failures, issue 27; host: multi-turn "
        "reuse and a host KV tier, issue 28)",
    )
    arguments = parser.parse_args()
    if arguments.implementation:
        child(arguments)
        return 0
    traces = arguments.traces or TRACES
    SOURCES.update(trace_sources(traces))
    missing = [name for name, path in SOURCES.items() if not path.is_file()]
    if missing:
        print(f"the traces are not at {traces} (missing: {', '.join(missing)})", file=sys.stderr)
        sys.stderr.flush()
        shipped = traces.resolve() == SHIPPED_TRACES.resolve()
        print(
            f"NOTHING MEASURED: no real traces in {traces} "
            + (
                "(the traces shipped with the repository are missing: a broken checkout)"
                if shipped
                else "(point SERVESIM_TRACES or --traces at a folder laid out as "
                "benchmarks/traces, or unset both for the shipped traces)"
            ),
            flush=True,
        )
        # The shipped traces are part of every checkout, and CI runs on one: a fault there
        return 2 if shipped or os.environ.get("CI") else 0
    limit = 1500 if arguments.short else None
    with tempfile.TemporaryDirectory(prefix="servesim-bench-") as temporary:
        folder = Path(temporary)
        mode = "short" if arguments.short else "full"
        python = sys.version.split()[0]
        print(f"servesim benchmarks ({mode}), python {python}, {os.cpu_count()} cores")
        if arguments.only == "kv":
            kv_section(folder, limit)
            return 0
        if arguments.only == "routing":
            routing_section(folder, limit)
            return 0
        if arguments.only == "sessions":
            sessions_section(folder, limit)
            return 0
        if arguments.only == "pools":
            pools_section(folder, limit)
            return 0
        if arguments.only == "styles":
            styles_section(folder, limit)
            return 0
        if arguments.only == "disagg":
            disagg_section(folder, limit)
            return 0
        if arguments.only == "fleet":
            fleet_section(folder, limit)
            return 0
        if arguments.only == "host":
            host_section(folder, limit)
            return 0
        print("\n== real traces ==")
        for source in SOURCES:
            workload = import_trace(source, folder)
            if limit:
                workload = tiled(workload, limit)
            count = len(workload["requests"])
            for workers in (16, 1024):
                for trace in (False, True):
                    label = f"{source} {count} req, {workers} workers{', trace' if trace else ''}"
                    figures = run(folder, f"{source}-{count}", workload, workers, trace=trace)
                    print(line(label, figures), flush=True)
                    # a full trace is hundreds of MB in the temporary folder (often memory):
                    # gone before the next run, so that it does not slow the ones after it
                    figures["report"].unlink()
        print("\n== against the plain per-step loop (same semantics, same run) ==")
        workload = import_trace("mooncake", folder)
        if limit:
            workload = tiled(workload, limit)
        name = f"mooncake-{len(workload['requests'])}"
        ours = run(folder, name, workload, 16, trace=False)
        plain = run(folder, name, workload, 16, trace=False, implementation="plain")
        identical = ours["report"].read_bytes() == plain["report"].read_bytes()
        print(line("reference, mooncake, 16 workers", ours))
        print(line("plain loop, mooncake, 16 workers", plain))
        speedup = plain["wall_s"] / ours["wall_s"]
        print(f"speed-up: {speedup:.1f}x (target >= 5x); reports byte-identical: {identical}")
        print("\n== measured timing profiles (R41, R42), mooncake, 16 workers ==")
        measured = {}
        for timing in (REGRESSION, GRID):
            kind = timing["model"]["kind"]
            measured[kind] = run(folder, name, workload, 16, trace=False, timing=timing)
            print(line(f"reference, {kind}", measured[kind]), flush=True)
            print(
                f"{kind} / synthetic_linear time: {measured[kind]['wall_s'] / ours['wall_s']:.1f}x"
            )
        plain_measured = run(
            folder, name, workload, 16, trace=False, implementation="plain", timing=REGRESSION
        )
        print(line("plain loop, regression", plain_measured))
        same = (
            measured["regression"]["report"].read_bytes() == plain_measured["report"].read_bytes()
        )
        speedup = plain_measured["wall_s"] / measured["regression"]["wall_s"]
        print(f"regression speed-up: {speedup:.1f}x; reports byte-identical: {same}")
        from bench_io import report_tools_section, vidur_section

        kv_section(folder, limit)
        routing_section(folder, limit)
        sessions_section(folder, limit)
        pools_section(folder, limit)
        styles_section(folder, limit)
        disagg_section(folder, limit)
        fleet_section(folder, limit)
        host_section(folder, limit)
        print("\n== Vidur-like workload, end to end (issue 15) ==")
        vidur_section(
            folder, short=arguments.short, plain_loop=[str(PLAIN_LOOP), *PLAIN_LOOP_REPORT]
        )
        print("\n== validate and migrate a mooncake report, 16 workers (issue 16) ==")
        report_tools_section(folder, workload, scenario(16), TIMING, short=arguments.short)
        print("\n== workers: 1,024 versus 16 (same trace) ==")
        wide = run(folder, name, workload, 1024, trace=False)
        print(f"1024 / 16 workers time: {wide['wall_s'] / ours['wall_s']:.2f}x (target < 2x)")
        print("\n== scaling (mooncake tiled) ==")
        sizes = (1_000, 10_000) if arguments.short else (10_000, 100_000, 1_000_000)
        base = import_trace("mooncake", folder)
        series = []
        for size in sizes:
            figures = run(folder, f"tiled-{size}", tiled(base, size), 16, trace=False)
            series.append((size, figures))
            print(
                line(f"{size:,} requests", figures)
                + f"   {figures['wall_s'] / size * 1e6:7.1f} us/req "
                f"{figures['peak_rss_mib'] * 1024 / size:7.2f} KiB/req",
                flush=True,
            )
        (small, a), (large, b) = series[-2], series[-1]
        print(
            f"{large:,} / {small:,} requests: time {b['wall_s'] / a['wall_s']:.1f}x, peak memory "
            f"{b['peak_rss_mib'] / a['peak_rss_mib']:.1f}x (target <= 11x for 10x requests)"
        )
        if arguments.no_dynamo:
            print("\n(Dynamo baseline skipped: --no-dynamo)")
        else:
            dynamo_baseline(folder, limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
