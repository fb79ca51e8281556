"""Benchmarks of reading and writing documents, whole processes (issues 15 and 16).

Called from bench.py: the Vidur-like workload replayed end to end against Vidur's published
time, and ``servesim validate``/``servesim migrate`` of a report against the replay that wrote
it.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import vidur_workload


def timed_command(arguments: list[str], *, repeat: int = 1) -> tuple[float, float]:
    """The best wall and CPU (user + system) seconds of ``python -m servesim_cli ARGUMENTS`` run as
    a whole process (interpreter start and imports included), out of ``repeat`` runs. CPU time
    is the steadier figure on a shared machine; the targets are wall time on an idle one."""
    best_wall = best_cpu = float("inf")
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "servesim_cli", *arguments], check=True, capture_output=True
        )
        best_wall = min(best_wall, time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        best_cpu = min(best_cpu, cpu)
    return best_wall, best_cpu


#: Vidur's published time for its example (10,000 requests at 10/s on one replica), seconds.
VIDUR_SECONDS = 35.0
#: Issue 15's target for the same workload: 50 times faster than Vidur, whole process.
VIDUR_TARGET_SECONDS = 0.7


def vidur_section(folder: Path, *, short: bool, plain_loop: list[str]) -> None:
    """``servesim replay`` of a Vidur-like workload (benchmarks/vidur_workload.py), end to end,
    against Vidur's 35 s; in the full run the plain loop's report is compared byte for byte
    (``plain_loop``: its script and the options that make it write the reference's version)."""
    paths = vidur_workload.write(folder)
    report = folder / "vidur-report.json"
    replay = [
        "replay",
        *("--scenario", str(paths["scenario"]), "--workload", str(paths["workload"])),
        *("--timing-profile", str(paths["timing"]), "--output", str(report)),
    ]
    runs = 1 if short else 5
    wall, cpu = timed_command(replay, repeat=runs)
    requests = vidur_workload.REQUESTS
    print(
        f"servesim replay, {requests:,} requests (Poisson {vidur_workload.RATE_PER_S:g}/s, seed "
        f"{vidur_workload.SEED}), 1 worker, whole process, best of {runs}: {wall:.2f} s wall, "
        f"{cpu:.2f} s CPU (target < {VIDUR_TARGET_SECONDS} s)"
    )
    print(
        f"Vidur {VIDUR_SECONDS:g} s / servesim: {VIDUR_SECONDS / wall:.0f}x wall, "
        f"{VIDUR_SECONDS / cpu:.0f}x CPU (target >= {VIDUR_SECONDS / VIDUR_TARGET_SECONDS:.0f}x)"
    )
    if not short:
        plain = folder / "vidur-report-plain.json"
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, plain_loop[0], *replay[:-1], str(plain), *plain_loop[1:]],
            check=True,
            capture_output=True,
        )
        plain_wall = time.perf_counter() - started
        from bench import migrated_to_current  # the plain loop writes 5.0; migrated, as R86 says

        migrated_to_current(plain)
        same = plain.read_bytes() == report.read_bytes()
        print(f"plain loop, whole process: {plain_wall:.2f} s; reports byte-identical: {same}")


def _wall_cpu(figures: tuple[float, float]) -> str:
    return f"{figures[0]:6.2f} s wall {figures[1]:6.2f} s CPU"


def report_tools_section(
    folder: Path,
    workload: dict[str, Any],
    scenario: dict[str, Any],
    timing: dict[str, Any],
    *,
    short: bool,
) -> None:
    """``servesim validate`` and ``servesim migrate`` (already current) of the report of a
    16-worker replay, against that replay's time, all whole processes (issue 16: <= 3x)."""
    name = f"tools-{len(workload['requests'])}"
    paths = {
        "scenario": folder / "tools-scenario.json",
        "timing": folder / "tools-timing.json",
        "workload": folder / f"{name}.json",
        "report": folder / f"{name}-report.json",
        "migrated": folder / f"{name}-migrated.json",
    }
    paths["scenario"].write_text(json.dumps(scenario))
    paths["timing"].write_text(json.dumps(timing))
    paths["workload"].write_text(json.dumps(workload))
    repeat = 1 if short else 3
    replay = timed_command(
        [
            "replay",
            *("--scenario", str(paths["scenario"]), "--workload", str(paths["workload"])),
            *("--timing-profile", str(paths["timing"]), "--output", str(paths["report"])),
        ],
        repeat=repeat,
    )
    size_mb = paths["report"].stat().st_size / 1e6
    validate = timed_command(["validate", str(paths["report"])], repeat=repeat)
    migrate = timed_command(
        ["migrate", str(paths["report"]), "--output", str(paths["migrated"])], repeat=repeat
    )
    same = paths["migrated"].read_bytes() == paths["report"].read_bytes()
    print(f"replay (writes a {size_mb:.0f} MB report, no trace): {_wall_cpu(replay)}")
    for name, figures in (("validate the report", validate), ("migrate it (current)", migrate)):
        ratios = f"{figures[0] / replay[0]:.2f}x wall, {figures[1] / replay[1]:.2f}x CPU"
        print(f"{name + ':':<22} {_wall_cpu(figures)}  {ratios} replay (target <= 3x)")
    print(f"migrate left the bytes unchanged: {same}")
    for path in paths.values():
        path.unlink(missing_ok=True)
