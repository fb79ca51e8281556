"""R5, R32, R33: the command line's exit codes, messages and atomic output.

Every bad-input class gets exit 2, a message naming the file, the JSON pointer and what was
expected, no report file, and never a traceback.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    EXAMPLES,
    replay_args,
    run_servesim,
    scenario_doc,
    timing_doc,
    workload_doc,
    write_inputs,
)

Mutation = Callable[[dict[str, Any]], Any]


def valid_documents() -> dict[str, dict[str, Any]]:
    return {
        "scenario": scenario_doc(workers=2),
        "workload": workload_doc(("a", 0, 4, 2), ("b", 10, 3, 1)),
        "timing_profile": timing_doc(),
    }


def test_r32_replay_writes_report_and_exits_0(tmp_path: Path) -> None:
    paths = write_inputs(tmp_path, *valid_documents().values())
    output = tmp_path / "report.json"
    result = run_servesim(*replay_args(paths, output), "--trace")
    assert result.returncode == 0, result.stderr
    report = json.loads(output.read_bytes())
    assert report["document"] == "report"
    assert [entry["id"] for entry in report["requests"]] == ["a", "b"]
    assert report["trace"]
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "report.json",
        "scenario.json",
        "timing-profile.json",
        "workload.json",
    ], "no temporary file is left behind"


def test_r30_without_trace_flag_trace_is_null(tmp_path: Path) -> None:
    paths = write_inputs(tmp_path, *valid_documents().values())
    output = tmp_path / "report.json"
    assert run_servesim(*replay_args(paths, output)).returncode == 0
    assert json.loads(output.read_bytes())["trace"] is None


def _set(path: list[str | int], value: Any) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        target: Any = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _delete(path: list[str | int]) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        target: Any = document
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return mutate


#: (case id, role, mutation of the parsed document, JSON pointer expected in the message,
#:  a fragment of the expected message)
DOCUMENT_CASES: list[tuple[str, str, Mutation, str, str]] = [
    ("unknown-property", "scenario", _set(["fleet", "gpus"], 8), "/fleet/gpus", "unexpected"),
    (
        "missing-required",
        "scenario",
        _delete(["scheduler", "max_model_len"]),
        "/scheduler",
        "max_model_len",
    ),
    (
        "string-for-integer",
        "workload",
        _set(["requests", 0, "prompt_tokens"], "4"),
        "/requests/0/prompt_tokens",
        "integer",
    ),
    (
        "float-for-integer",
        "workload",
        _set(["requests", 1, "arrival_us"], 10.0),
        "/requests/1/arrival_us",
        "integer",
    ),
    (
        "boolean-for-integer",
        "scenario",
        _set(["fleet", "workers"], True),
        "/fleet/workers",
        "integer",
    ),
    (
        "negative",
        "workload",
        _set(["requests", 0, "arrival_us"], -1),
        "/requests/0/arrival_us",
        "minimum",
    ),
    ("zero-workers", "scenario", _set(["fleet", "workers"], 0), "/fleet/workers", "minimum"),
    (
        "output-over-u64",
        "workload",
        _set(["requests", 0, "max_output_tokens"], 2**64),
        "/requests/0/max_output_tokens",
        "maximum",
    ),
    (
        "arrival-over-2-53",
        "workload",
        _set(["requests", 0, "arrival_us"], 2**53),
        "/requests/0/arrival_us",
        "maximum",
    ),
    ("empty-requests", "workload", _set(["requests"], []), "/requests", "non-empty"),
    (
        "duplicate-id",
        "workload",
        _set(["requests", 1, "id"], "a"),
        "/requests/1/id",
        "duplicate request id",
    ),
    ("empty-id", "workload", _set(["requests", 0, "id"], ""), "/requests/0/id", "match"),
    ("id-with-space", "workload", _set(["requests", 0, "id"], "a b"), "/requests/0/id", "match"),
    (
        "seed-with-round-robin",
        "scenario",
        _set(["routing", "seed"], 1),
        "/routing/policy",
        "'seed' is present",
    ),
    ("random-without-seed", "scenario", _set(["routing", "policy"], "random"), "/routing", "seed"),
    (
        "unknown-policy",
        "scenario",
        _set(["routing", "policy"], "least_busy"),
        "/routing/policy",
        "least_busy",
    ),
    (
        "chunk-cap-with-whole",
        "scenario",
        _set(["scheduler", "prefill", "max_chunk_tokens"], 4),
        "/scheduler/prefill/mode",
        "'max_chunk_tokens' is present",
    ),
    (
        "chunked-without-cap",
        "scenario",
        _set(["scheduler", "prefill", "mode"], "chunked"),
        "/scheduler/prefill",
        "max_chunk_tokens",
    ),
    (
        "budget-below-max-num-seqs",
        "scenario",
        _set(["scheduler", "max_batched_tokens"], 3),
        "/scheduler/max_batched_tokens",
        "max_num_seqs",
    ),
    (
        "zero-step-overhead",
        "timing_profile",
        _set(["model", "step_overhead_ns"], 0),
        "/model/step_overhead_ns",
        "minimum",
    ),
    (
        "unknown-timing-kind",
        "timing_profile",
        _set(["model", "kind"], "grid"),
        "/model/kind",
        "synthetic_linear",
    ),
    ("unknown-version", "workload", _set(["schema_version"], "2.0"), "/schema_version", "1.0"),
    ("missing-version", "scenario", _delete(["schema_version"]), "/schema_version", "missing"),
    (
        "wrong-kind",
        "scenario",
        _set(["document"], "workload"),
        "/document",
        "expected a scenario document",
    ),
    (
        "unknown-kind",
        "timing_profile",
        _set(["document"], "profile"),
        "/document",
        "not a known kind",
    ),
]


def _assert_rejected(
    result: subprocess.CompletedProcess[str], output: Path, *fragments: str
) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert not output.exists(), "no report may be written for invalid input"
    assert not list(output.parent.glob(".report.json.*")), "no partial file is left"
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)


@pytest.mark.parametrize(
    ("role", "mutate", "pointer", "fragment"),
    [pytest.param(role, m, p, f, id=case) for case, role, m, p, f in DOCUMENT_CASES],
)
def test_r5_invalid_document_exits_2_with_pointer(
    tmp_path: Path, role: str, mutate: Mutation, pointer: str, fragment: str
) -> None:
    documents = valid_documents()
    mutate(documents[role])
    paths = write_inputs(tmp_path, *documents.values())
    output = tmp_path / "report.json"
    result = run_servesim(*replay_args(paths, output))
    _assert_rejected(result, output, str(paths[role]), f"at {pointer}:", fragment)


#: (case id, raw bytes of the workload file, a fragment of the expected message)
RAW_CASES: list[tuple[str, bytes, str]] = [
    (
        "truncated",
        b'{"document": "workload", "schema_version": "1.0", "requests": [',
        "not valid JSON",
    ),
    ("empty-file", b"", "empty"),
    ("not-utf8", b'{"document": "\xff"}', "not UTF-8"),
    ("duplicate-key", b'{"document": "workload", "document": "workload"}', "duplicate object key"),
    ("nan", b'{"document": "workload", "schema_version": "1.0", "requests": NaN}', "NaN"),
    ("top-level-array", b"[]", "expected a JSON object"),
    (
        "huge-integer",
        b'{"document": "workload", "schema_version": "1.0", "requests": [{"id": "a",'
        b' "arrival_us": 0, "prompt_tokens": 1, "max_output_tokens": ' + b"9" * 5000 + b"}]}",
        "a 5000-digit integer is greater than the maximum",
    ),
    ("deep-nesting", b"[" * 5000 + b"]" * 5000, "nested too deeply"),
    ("kind-not-a-string", b'{"document": ["workload"]}', '["workload"] is not a known kind'),
    (
        "huge-float",
        b'{"document": "workload", "schema_version": "1.0", "requests": [{"id": "a",'
        b' "arrival_us": 1e400, "prompt_tokens": 1, "max_output_tokens": 1}]}',
        "integer",
    ),
]


@pytest.mark.parametrize(
    ("raw", "fragment"), [pytest.param(raw, f, id=case) for case, raw, f in RAW_CASES]
)
def test_r1_malformed_json_exits_2(tmp_path: Path, raw: bytes, fragment: str) -> None:
    paths = write_inputs(tmp_path, *valid_documents().values())
    paths["workload"].write_bytes(raw)
    output = tmp_path / "report.json"
    result = run_servesim(*replay_args(paths, output))
    _assert_rejected(result, output, str(paths["workload"]), fragment)


def test_r5_missing_input_file_exits_2(tmp_path: Path) -> None:
    paths = write_inputs(tmp_path, *valid_documents().values())
    paths["timing_profile"].unlink()
    output = tmp_path / "report.json"
    result = run_servesim(*replay_args(paths, output))
    _assert_rejected(result, output, str(paths["timing_profile"]), "cannot read")


def test_r5_lists_every_problem_of_a_document(tmp_path: Path) -> None:
    documents = valid_documents()
    documents["workload"]["requests"][0]["prompt_tokens"] = -1
    documents["workload"]["requests"][1]["arrival_us"] = "soon"
    paths = write_inputs(tmp_path, *documents.values())
    output = tmp_path / "report.json"
    result = run_servesim(*replay_args(paths, output))
    _assert_rejected(result, output, "/requests/0/prompt_tokens", "/requests/1/arrival_us")


def test_r6_time_beyond_2_53_exits_2(tmp_path: Path) -> None:
    documents = valid_documents()
    documents["workload"]["requests"][1]["arrival_us"] = 2**53 - 2
    paths = write_inputs(tmp_path, *documents.values())
    output = tmp_path / "report.json"
    result = run_servesim(*replay_args(paths, output))
    _assert_rejected(result, output, "9007199254740991")


def test_r32_unwritable_output_exits_4_without_traceback(tmp_path: Path) -> None:
    # Valid inputs and a path that cannot be written: the environment's fault, not the input's,
    # so not exit 2 (which tells a script to fix its input).
    paths = write_inputs(tmp_path, *valid_documents().values())
    output = tmp_path / "missing-folder" / "report.json"
    result = run_servesim(*replay_args(paths, output))
    assert result.returncode == 4
    assert "cannot write the report" in result.stderr
    assert "Traceback" not in result.stderr
    assert not output.parent.exists()


def test_r32_output_that_is_an_input_is_refused(tmp_path: Path) -> None:
    paths = write_inputs(tmp_path, *valid_documents().values())
    before = paths["scenario"].read_bytes()
    result = run_servesim(*replay_args(paths, paths["scenario"]))
    assert result.returncode == 2
    assert "is one of the inputs" in result.stderr
    assert paths["scenario"].read_bytes() == before


def test_r32_writes_through_links_and_keeps_the_umask_mode(tmp_path: Path) -> None:
    paths = write_inputs(tmp_path, *valid_documents().values())
    real, link = tmp_path / "real.json", tmp_path / "link.json"
    real.write_text("old")
    link.symlink_to(real.name)
    assert run_servesim(*replay_args(paths, link)).returncode == 0
    assert link.is_symlink()
    assert json.loads(real.read_bytes())["document"] == "report"
    fresh = tmp_path / "fresh.json"
    assert run_servesim(*replay_args(paths, fresh)).returncode == 0
    umask = os.umask(0)
    os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask


def test_r32_writes_into_a_pipe_instead_of_replacing_it(tmp_path: Path) -> None:
    paths = write_inputs(tmp_path, *valid_documents().values())
    result = subprocess.run(
        [sys.executable, "-m", "servesim_cli", *map(str, replay_args(paths, Path("/dev/stdout")))],
        capture_output=True,
        check=False,
    )
    assert result.returncode == 0
    assert json.loads(result.stdout)["document"] == "report"


def test_r5_reports_every_invalid_input_at_once(tmp_path: Path) -> None:
    paths = write_inputs(tmp_path, {}, {}, timing_doc())
    output = tmp_path / "report.json"
    result = run_servesim(*replay_args(paths, output))
    _assert_rejected(result, output, str(paths["scenario"]), str(paths["workload"]))


def test_r3_patterns_have_ecma_meaning(tmp_path: Path) -> None:
    """ "$" ends the string in ECMA-262; Python's would also accept a final newline."""
    documents = valid_documents()
    documents["workload"]["requests"][0]["id"] = "a\n"
    paths = write_inputs(tmp_path, *documents.values())
    output = tmp_path / "report.json"
    _assert_rejected(run_servesim(*replay_args(paths, output)), output, "at /requests/0/id:")


def test_r32_usage_error_exits_2() -> None:
    result = run_servesim("replay", "--scenario", "x.json")
    assert result.returncode == 2
    assert "--workload" in result.stderr


def test_r33_validate_reports_each_file(tmp_path: Path, example_inputs: dict[str, Path]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(scenario_doc(max_num_seqs=0)), encoding="utf-8")
    result = run_servesim("validate", *example_inputs.values(), bad)
    assert result.returncode == 2
    assert result.stdout.count(": valid ") == 3
    assert f"{bad}: at /scheduler/max_num_seqs:" in result.stderr


def test_r33_validate_accepts_a_report(tmp_path: Path, example_inputs: dict[str, Path]) -> None:
    output = tmp_path / "report.json"
    assert run_servesim(*replay_args(example_inputs, output), "--trace").returncode == 0
    result = run_servesim("validate", output)
    assert result.returncode == 0, result.stderr
    assert "valid report 10.0" in result.stdout


def test_help_and_version() -> None:
    assert "replay" in run_servesim("--help").stdout
    assert run_servesim("--version").stdout.startswith("servesim ")


def _run_on_terminal(arguments: list[str]) -> str:
    """Run the CLI with its stderr on a pseudo-terminal; what it printed there."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "servesim_cli", *arguments],
        stderr=follower,
        stdout=subprocess.DEVNULL,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait()
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


def test_progress_only_on_a_terminal(tmp_path: Path) -> None:
    requests = [(f"r{index}", index * 1000, 4, 2) for index in range(5000)]
    paths = write_inputs(tmp_path, scenario_doc(workers=4), workload_doc(*requests), timing_doc())
    output = tmp_path / "report.json"
    shown = _run_on_terminal([str(a) for a in replay_args(paths, output)])
    assert "4,096/5,000 requests arrived" in shown
    assert "report written" in shown
    quiet = run_servesim(*replay_args(paths, tmp_path / "again.json"))
    assert quiet.returncode == 0
    assert quiet.stderr == ""


@pytest.mark.parametrize(
    ("text", "pointer"),
    [
        ('"engine": "\\ud800"', "/calibration/engine"),
        ('"model": "x\\udc00y"', "/calibration/model"),
    ],
)
def test_r1_unpaired_surrogate_escape_is_invalid_where_it_is(
    tmp_path: Path, text: str, pointer: str
) -> None:
    # A calibration string is echoed into the report (R25), which RFC 8785 cannot write with half
    # a surrogate pair: R1 rejects it on input, with its pointer, instead of failing at the end.
    profile = (EXAMPLES / "basic" / "grid-profile.json").read_text(encoding="utf-8")
    key = text.split(":")[0]
    start = profile.index(key)
    end = profile.index(",", start)
    path = tmp_path / "profile.json"
    path.write_text(profile[:start] + text + profile[end:], encoding="utf-8")
    result = run_servesim("validate", path)
    assert result.returncode == 2
    assert f"at {pointer}: a string with an unpaired surrogate escape" in result.stderr
    paired = tmp_path / "paired.json"
    paired.write_text(
        profile[:start] + key + ': "\\ud83d\\ude00"' + profile[end:], encoding="utf-8"
    )
    assert run_servesim("validate", paired).returncode == 0


def test_r32_output_dash_writes_the_report_to_standard_output(tmp_path: Path) -> None:
    paths = write_inputs(tmp_path, *valid_documents().values())
    output = tmp_path / "report.json"
    assert run_servesim(*replay_args(paths, output), "--trace").returncode == 0
    completed = subprocess.run(
        [sys.executable, "-m", "servesim_cli", *map(str, replay_args(paths, Path("-"))), "--trace"],
        capture_output=True,
        check=False,
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == output.read_bytes()
    assert not (tmp_path / "-").exists(), "'-' is standard output, not a file named '-'"


def test_replay_without_arguments_shows_replay_s_usage() -> None:
    result = run_servesim("replay")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: servesim replay ")
    assert "--timing-profile" in result.stderr


def test_r32_sigterm_leaves_no_partial_file(tmp_path: Path) -> None:
    """SIGTERM (``timeout``, a cancelled CI job) cleans up as SIGINT does: exit 143, no
    temporary file and no report. The signal is sent while the report is being written (a
    report large enough that its writing outlasts the poll on a loaded machine)."""
    requests = [(f"r{index}", index * 100, 8, 16) for index in range(30000)]
    paths = write_inputs(tmp_path, scenario_doc(workers=4), workload_doc(*requests), timing_doc())
    output = tmp_path / "report.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "servesim_cli", *map(str, replay_args(paths, output)), "--trace"],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".report.json.*.partial")):
        assert process.poll() is None, "the replay ended before its report was being written"
        assert time.monotonic() < deadline, "no temporary file appeared"
        time.sleep(0.002)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    assert "servesim: terminated" in stderr
    assert "Traceback" not in stderr
    assert not list(tmp_path.glob(".report.json.*")), "the temporary file is removed"
    assert not output.exists()


def test_measured_profile_limits_beyond_coverage_are_warned_about_first(tmp_path: Path) -> None:
    scenario = json.loads((EXAMPLES / "basic" / "scenario.json").read_text(encoding="utf-8"))
    scenario["fleet"]["workers"] = 1
    scenario["scheduler"]["max_num_seqs"] = 8
    paths = {
        "scenario": tmp_path / "scenario.json",
        "workload": EXAMPLES / "basic" / "workload.json",
        "timing_profile": EXAMPLES / "basic" / "grid-profile.json",
    }
    paths["scenario"].write_text(json.dumps(scenario), encoding="utf-8")
    result = run_servesim(*replay_args(paths, tmp_path / "report.json"))
    assert result.returncode == 3
    warning, _, stop = result.stderr.partition("servesim: a step is outside")
    assert "warning: the scenario lets steps reach beyond the timing profile's coverage" in warning
    assert "decode_requests may reach 8 (max_num_seqs); covered 0..4" in warning
    assert "prefill_tokens" not in warning, "max_batched_tokens 64 is covered"
    assert stop, "the replay still stops at the first uncovered step"


def test_a_covered_measured_replay_gives_no_warning(example_inputs: dict[str, Path]) -> None:
    paths = {**example_inputs, "timing_profile": EXAMPLES / "basic" / "grid-profile.json"}
    result = run_servesim(*replay_args(paths, Path("-")))
    assert result.returncode == 0
    assert result.stderr == ""


def test_replay_restores_the_cyclic_collector(tmp_path: Path) -> None:
    """``servesim replay`` pauses the collector (servesim_cli.collector) only while it runs."""
    import gc

    from servesim_cli.main import main

    paths = write_inputs(tmp_path, scenario_doc(), workload_doc(("a", 0, 10, 4)), timing_doc())
    arguments = [str(each) for each in replay_args(paths, tmp_path / "report.json", "--quiet")]
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            assert main(arguments) == 0
            assert gc.isenabled() is enabled
        finally:
            gc.enable()


def test_an_output_that_is_an_input_or_another_output_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """calibrate and profile aic write several files: none may overwrite an input, and no two
    results may go to one file (the check both commands share)."""
    from servesim_cli.messages import outputs_clash

    given = tmp_path / "measurements.jsonl"
    given.write_text("")
    grid, regression = str(tmp_path / "grid.json"), str(tmp_path / "regression.json")
    assert not outputs_clash([grid, regression], [str(given)])
    assert capsys.readouterr().err == ""
    assert outputs_clash([grid, str(given)], [str(given)])
    assert outputs_clash([grid, str(tmp_path / "." / "grid.json")], [str(given)])
    assert capsys.readouterr().err.count("needs a file of its own") == 2
