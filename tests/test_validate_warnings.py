"""``servesim validate``'s warnings (R33): a valid document that says something that changes
nothing is still valid (exit 0), with a warning on standard error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_servesim


def _workload(**members: Any) -> dict[str, Any]:
    """A workload 1.3 of two requests with prefix hashes, and the given top-level members."""
    return {
        "document": "workload",
        "schema_version": "1.3",
        "prefix_hash_block_tokens": 16,
        **members,
        "requests": [
            {"id": "a", "arrival_us": 0, "prompt_tokens": 32, "max_output_tokens": 4,
             "prefix_hashes": [1, 2]},
            {"id": "b", "arrival_us": 0, "prompt_tokens": 48, "max_output_tokens": 4,
             "prefix_hashes": [1, 2, 3]},
        ],
    }  # fmt: skip


def _in_session(document: dict[str, Any]) -> dict[str, Any]:
    document["sessions"] = [{"id": "s"}]
    for request in document["requests"]:
        request["session"] = "s"
    return document


def _validate(tmp_path: Path, document: dict[str, Any]) -> tuple[Path, Any]:
    path = tmp_path / "workload.json"
    path.write_text(json.dumps(document))
    return path, run_servesim("validate", path)


def test_r33_validate_warns_about_the_flag_without_sessions(tmp_path: Path) -> None:
    """R33, R125: session_prompts_extend: true without sessions is valid and means nothing;
    validate says so on standard error and exits 0."""
    path, result = _validate(tmp_path, _workload(session_prompts_extend=True))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{path}: valid workload 1.3\n"
    assert result.stderr == (
        f"servesim: warning: {path}: session_prompts_extend is true but the workload has no "
        "sessions, so it changes nothing: only a turn of a session continues the turn before "
        "it (R125)\n"
    )


@pytest.mark.parametrize(
    "document",
    [
        _workload(),
        _workload(session_prompts_extend=False),
        _in_session(_workload(session_prompts_extend=True)),
    ],
    ids=["absent", "false", "with-sessions"],
)
def test_r33_no_warning_when_the_flag_can_mean_something_or_is_off(
    tmp_path: Path, document: dict[str, Any]
) -> None:
    path, result = _validate(tmp_path, document)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{path}: valid workload 1.3\n"
    assert result.stderr == ""


def test_r33_the_warning_does_not_hide_another_file_s_problem(tmp_path: Path) -> None:
    """The warned workload is valid; an invalid file beside it still makes the exit 2."""
    path, _ = _validate(tmp_path, _workload(session_prompts_extend=True))
    bad = tmp_path / "bad.json"
    bad.write_text('{"document": "workload"}')
    result = run_servesim("validate", path, bad)
    assert result.returncode == 2
    assert f"{path}: valid workload 1.3\n" in result.stdout
    assert f"servesim: warning: {path}: session_prompts_extend is true" in result.stderr
