"""``servesim schema diff``: exit codes, text and JSON output, inputs; and what it imports.

The functions are called through a parser built the way ``servesim_cli.main`` builds its own
(``add_schema_arguments`` on the ``schema`` subcommand), so the wiring is what is tested.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servesim_conformance.evolution.cli import add_schema_arguments, run_schema
from tests.evolution_fixtures import SCENARIO_1_4, SCENARIO_2_0
from tests.helpers import REPO

SCENARIO_1_3 = REPO / "schemas" / "released" / "1.3" / "scenario.schema.json"
REPORT_1_0 = REPO / "schemas" / "v1" / "report.schema.json"


def schema(*argv: str | Path) -> int:
    parser = argparse.ArgumentParser(prog="servesim")
    commands = parser.add_subparsers(dest="command", required=True)
    add_schema_arguments(commands.add_parser("schema"))
    return run_schema(parser.parse_args(["schema", *map(str, argv)]))


@pytest.mark.parametrize(
    ("old", "new", "options", "expected"),
    [
        (SCENARIO_1_3, SCENARIO_1_4, (), 0),
        (SCENARIO_1_3, SCENARIO_1_4, ("--direction", "forward"), 1),
        (SCENARIO_1_3, SCENARIO_1_4, ("--direction", "both"), 1),
        (SCENARIO_1_4, SCENARIO_2_0, (), 1),
        (SCENARIO_1_4, SCENARIO_2_0, ("--examples", "0"), 2),
        (SCENARIO_1_3, SCENARIO_1_3, ("--direction", "both"), 0),
    ],
    ids=[
        "minor, backward matters",
        "minor, forward asked",
        "minor, both asked",
        "major",
        "major without search is undecided",
        "unchanged",
    ],
)
def test_diff_exit_code_is_the_verdict(
    old: Path, new: Path, options: tuple[str, ...], expected: int
) -> None:
    assert schema("diff", old, new, *options) == expected


def test_diff_text_names_pointers_kinds_and_a_counterexample(
    capsys: pytest.CaptureFixture[str],
) -> None:
    schema("diff", SCENARIO_1_4, SCENARIO_2_0)
    out = capsys.readouterr().out
    assert out.startswith("scenario 1.4 -> 2.0: written by users and the conformance harness")
    assert (
        "/properties/scheduler/properties/prefill/properties/max_chunk_tokens  property_renamed"
    ) in out
    assert "backward (matters): breaking - do new readers accept every old document?" in out
    assert "counterexample, valid under 1.4 and rejected by 2.0:" in out
    assert "verdict (backward): breaking" in out


def test_diff_json_is_data(capsys: pytest.CaptureFixture[str]) -> None:
    assert schema("diff", "--json", SCENARIO_1_3, SCENARIO_1_4) == 0
    result = json.loads(capsys.readouterr().out)
    (comparison,) = result["comparisons"]
    assert comparison["verdict"] == "compatible"
    assert comparison["matters"] == ["backward"]
    added = next(change for change in comparison["changes"] if change["kind"] == "property_added")
    assert added == {
        "pointer": "/properties/fleet/properties/label",
        "kind": "property_added",
        "detail": "label, in a closed object",
        "backward": "safe",
        "forward": "breaks",
        "shown": ["forward"],
    }
    counterexample = comparison["forward"]["counterexample"]
    assert counterexample["valid_under"] == "new"
    assert counterexample["rejections"][0]["pointer"] == "/fleet"


def test_diff_of_report_judges_forward(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    report = json.loads(REPORT_1_0.read_text("utf-8"))
    report["properties"]["summary"]["properties"]["dropped"] = {"type": "integer"}
    new = tmp_path / "report.schema.json"
    new.write_text(json.dumps(report))
    assert schema("diff", REPORT_1_0, new) == 1
    assert "forward (matters): breaking" in capsys.readouterr().out


def test_diff_of_folders_pairs_files_and_counts_a_removed_one_as_breaking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    shutil.copytree(REPO / "schemas" / "v1", old)
    shutil.copytree(REPO / "schemas" / "v1", new)
    assert schema("diff", old, new) == 0
    (new / "workload.schema.json").unlink()
    capsys.readouterr()
    assert schema("diff", old, new) == 1
    out = capsys.readouterr().out
    assert "workload.schema.json: only in OLD" in out
    assert "overall: breaking" in out


def test_diff_reads_git_revisions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def git(*arguments: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *arguments],
            cwd=tmp_path,
            check=True,
            capture_output=True,
        )

    target = tmp_path / "scenario.schema.json"
    shutil.copy(SCENARIO_1_3, target)
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "1.3")
    shutil.copy(SCENARIO_2_0, target)
    git("commit", "-q", "-am", "2.0")
    monkeypatch.chdir(tmp_path)  # REV:PATH is read from the repository of the current folder
    assert schema("diff", "HEAD~1:scenario.schema.json", "HEAD:scenario.schema.json") == 1
    assert "scenario 1.3 -> 2.0" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file or folder"),
        (b"{not json", "not a JSON schema"),
        (b'{"type": 5}', "the new schema is not valid Draft 2020-12: at $.type"),
    ],
    ids=["missing", "not JSON", "not a schema"],
)
def test_diff_of_unreadable_input_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, message: str
) -> None:
    bad = tmp_path / "bad.schema.json"
    if content is not None:
        bad.write_bytes(content)
    assert schema("diff", SCENARIO_1_3, bad) == 2
    assert message in capsys.readouterr().err


def test_negative_examples_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exited:
        schema("diff", "--examples", "-1", SCENARIO_1_3, SCENARIO_1_3)
    assert exited.value.code == 2


def test_building_the_parser_imports_neither_the_engine_nor_hypothesis() -> None:
    """servesim builds every subcommand's parser for every command, ``replay`` included."""
    probe = (
        "import argparse, sys\n"
        "import servesim_cli.main\n"
        "from servesim_conformance.evolution.cli import add_schema_arguments, "
        "add_migrate_arguments\n"
        "parser = argparse.ArgumentParser()\n"
        "commands = parser.add_subparsers()\n"
        "add_schema_arguments(commands.add_parser('schema'))\n"
        "add_migrate_arguments(commands.add_parser('migrate'))\n"
        "loaded = [name for name in sys.modules if name.startswith('hypothesis') or name in "
        "('servesim_conformance.evolution.diff', 'servesim_conformance.evolution.compare')]\n"
        "print(loaded)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert completed.stdout.strip() == "[]"


def test_diff_refuses_an_instance_document_naming_its_own_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A scenario passed for the scenario schema would otherwise be 'compatible' with itself."""
    instance = REPO / "examples" / "basic" / "scenario.json"
    assert schema("diff", instance, SCENARIO_1_3) == 2
    err = capsys.readouterr().err
    assert f"{instance}: not a JSON schema: it uses none of the Draft 2020-12 keywords" in err
    assert "(it looks like a scenario document)" in err
    assert schema("diff", SCENARIO_1_3, instance) == 2
    assert f"{instance}: not a JSON schema" in capsys.readouterr().err


def test_diff_still_takes_the_empty_schema(tmp_path: Path) -> None:
    empty = tmp_path / "empty.schema.json"
    empty.write_text("{}")
    assert schema("diff", empty, empty) == 0
