"""R21, R23, R31: the same inputs give the same bytes, in any process, at any scale."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import servesim
from tests.helpers import scenario_doc, timing_doc, workload_doc, write_inputs


def _replay_in_subprocess(paths: dict[str, Path], output: Path, hash_seed: str) -> bytes:
    environment = {**os.environ, "PYTHONHASHSEED": hash_seed}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "servesim_cli",
            "replay",
            "--scenario",
            str(paths["scenario"]),
            "--workload",
            str(paths["workload"]),
            "--timing-profile",
            str(paths["timing_profile"]),
            "--output",
            str(output),
            "--trace",
        ],
        check=True,
        env=environment,
    )
    return output.read_bytes()


def test_r21_identical_bytes_across_processes_and_hash_seeds(
    tmp_path: Path, example_inputs: dict[str, Path]
) -> None:
    reports = {
        _replay_in_subprocess(example_inputs, tmp_path / f"report-{seed}.json", seed)
        for seed in ("0", "1", "12345", "random")
    }
    assert len(reports) == 1
    assert reports == {servesim.replay(*example_inputs.values(), trace=True)}


def test_r31_report_holds_no_run_specific_data(
    tmp_path: Path, example_inputs: dict[str, Path]
) -> None:
    text = servesim.replay(*example_inputs.values(), trace=True).decode()
    assert servesim.__version__ not in text
    assert str(tmp_path) not in text
    assert "basic" not in text


def test_replays_1024_workers_in_one_event_loop(tmp_path: Path) -> None:
    """The design's scale check: 1,024 workers are data in one loop, not threads."""
    requests = [(f"r{index}", index * 10, 16 + index % 50, 1 + index % 7) for index in range(3000)]
    paths = write_inputs(
        tmp_path,
        scenario_doc(workers=1024, policy="random", seed=7, max_batched_tokens=256),
        workload_doc(*requests),
        timing_doc(),
    )
    report = json.loads(servesim.replay(*paths.values()))
    assert report["summary"]["completed"] == 3000
    assert len(report["workers"]) == 1024
    assert sum(worker["routed"] for worker in report["workers"]) == 3000
    busy = [worker for worker in report["workers"] if worker["routed"]]
    assert len(busy) > 900, "random routing spreads 3,000 requests over most of 1,024 workers"
