"""``servesim schema review``: the versioning policy over a whole revision, in Markdown.

Each test copies ``schemas/`` to a scratch folder and makes the change a pull request would
make (the deliberate scenario 1.4 and 2.0 of ``tests/evolution_fixtures``, or a change against
the policy), then reviews it against the last release or against a git revision.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from servesim.contract.migrations import CHAIN
from servesim_conformance.evolution.catalog import read_revision, read_work_tree
from servesim_conformance.evolution.cli import add_schema_arguments, run_schema
from servesim_conformance.evolution.markdown import review_markdown
from servesim_conformance.evolution.policy import Level
from servesim_conformance.evolution.review import Review, review_files
from tests.evolution_fixtures import CHAIN as FIXTURE_CHAIN
from tests.evolution_fixtures import SCENARIO_1_4, SCENARIO_2_0
from tests.helpers import REPO


@pytest.fixture
def schemas(tmp_path: Path) -> Path:
    """A scratch copy of ``schemas/`` as it was before the real scenario 1.4 (pools, SPEC.md
    section 15): the fixtures' 1.4 is another history after 1.3, so the working schema is
    1.3's and the real 1.4, 1.5, 1.6, 1.7 and 1.8 releases are left out."""
    folder = tmp_path / "repo" / "schemas"
    shutil.copytree(REPO / "schemas", folder)
    later = ("1.4", "1.5", "1.6", "1.7", "1.8")  # the real scenario releases after 1.3
    for version in later:
        shutil.rmtree(folder / "released" / version)
    sums = folder / "released" / "SHA256SUMS"
    lines = sums.read_text("utf-8").splitlines(keepends=True)
    kept = [line for line in lines if not any(f"  {v}/" in line for v in later)]
    sums.write_text("".join(kept), "utf-8")
    shutil.copy(folder / "released" / "1.3" / "scenario.schema.json", folder / "v1")
    return folder


def _review(schemas: Path, chain: Any = FIXTURE_CHAIN) -> Review:
    return review_files(read_work_tree(schemas), chain=chain, head_label="the change", examples=150)


def _document(review: Review, kind: str) -> Any:
    return next(document for document in review.documents if document.kind == kind)


def _edit(path: Path, change: Any) -> None:
    schema = json.loads(path.read_text("utf-8"))
    change(schema)
    path.write_text(json.dumps(schema, indent=2) + "\n")


def test_minor_version_with_an_optional_property_keeps_the_policy(schemas: Path) -> None:
    shutil.copy(SCENARIO_1_4, schemas / "v1" / "scenario.schema.json")
    review = _review(schemas)
    assert review.exit_code == 0
    scenario = _document(review, "scenario")
    assert (scenario.base.version, scenario.head.version) == ("1.3", "1.4")
    assert scenario.level is Level.OK
    markdown = review_markdown(review)
    assert "| scenario | 1.3 -> 1.4 | compatible (matters) | **breaking** |" in markdown
    assert "`/properties/fleet/properties/label`" in markdown
    assert "migration 1.3 -> 1.4: 1.3 -> 1.4: relabelled only" in markdown
    assert "| workload | 1.3 | compatible (matters) | compatible | unchanged |" in markdown


def test_major_version_2_0_is_classified_migrated_and_reviewed(schemas: Path) -> None:
    (schemas / "v2").mkdir(exist_ok=True)
    shutil.copy(SCENARIO_2_0, schemas / "v2" / "scenario.schema.json")
    review = _review(schemas)
    assert review.exit_code == 0
    scenario = _document(review, "scenario")
    assert scenario.head.path == "v2/scenario.schema.json"
    assert scenario.comparison.verdict().value == "breaking"
    markdown = review_markdown(review)
    assert "| scenario | 1.3 -> 2.0 | **breaking** (matters) | **breaking** |" in markdown
    assert "property_renamed (max_chunk_tokens -> chunk_tokens, in a closed object)" in markdown
    assert (
        "property_renamed at `/properties/scheduler/properties/prefill/properties/"
        "max_chunk_tokens`: a document valid under 1.3 that 2.0 rejects (generated)"
    ) in markdown
    assert '"max_chunk_tokens": 1' in markdown
    assert "new major version 2.0: any change allowed" in markdown
    assert "renames scheduler.prefill.max_chunk_tokens to chunk_tokens" in markdown


def test_older_major_edited_behind_a_new_one_is_a_violation(schemas: Path) -> None:
    (schemas / "v2").mkdir(exist_ok=True)
    shutil.copy(SCENARIO_2_0, schemas / "v2" / "scenario.schema.json")
    _edit(
        schemas / "v1" / "scenario.schema.json",
        lambda schema: schema["properties"]["fleet"]["properties"]["workers"].update(maximum=8),
    )
    review = _review(schemas)
    assert review.exit_code == 1
    older = _document(review, "scenario (v1)")
    assert older.level is Level.VIOLATION
    assert "| scenario (v1) | 1.3 | **breaking** (matters) |" in review_markdown(review)


def test_major_version_without_its_migration_is_a_violation(schemas: Path) -> None:
    (schemas / "v2").mkdir(exist_ok=True)
    shutil.copy(SCENARIO_2_0, schemas / "v2" / "scenario.schema.json")
    review = _review(schemas, chain=CHAIN)
    assert review.exit_code == 1
    assert "**violation**: no migration from 1.3 to 2.0" in review_markdown(review)


def test_breaking_change_in_a_minor_version_is_a_violation(schemas: Path) -> None:
    def tighten(schema: dict[str, Any]) -> None:
        schema["properties"]["schema_version"] = {"enum": ["1.0", "1.1", "1.2", "1.3", "1.4"]}
        schema["properties"]["fleet"]["properties"]["workers"]["maximum"] = 1024

    shutil.copy(SCENARIO_1_4, schemas / "v1" / "scenario.schema.json")
    _edit(schemas / "v1" / "scenario.schema.json", tighten)
    review = _review(schemas)
    assert review.exit_code == 1
    markdown = review_markdown(review)
    assert "not backward compatible, which a minor version of a scenario requires" in markdown
    assert '"workers": 1025' in markdown


def test_change_without_a_new_version_is_a_violation(schemas: Path) -> None:
    _edit(
        schemas / "v1" / "workload.schema.json",
        lambda schema: schema["properties"]["requests"].update(maxItems=10),
    )
    review = _review(schemas)
    assert review.exit_code == 1
    assert "what is valid changed but the version is still 1.3" in review_markdown(review)


def test_description_only_change_needs_no_new_version(schemas: Path) -> None:
    _edit(
        schemas / "v1" / "workload.schema.json",
        lambda schema: schema["properties"]["requests"].update(description="The requests."),
    )
    review = _review(schemas)
    assert review.exit_code == 0
    assert "annotations only: no new version needed" in review_markdown(review)


def test_report_field_added_in_a_minor_version_breaks_old_report_readers(schemas: Path) -> None:
    """The report is written by implementations: a minor version must stay forward compatible."""

    def add_field(schema: dict[str, Any]) -> None:
        schema["properties"]["schema_version"] = {"enum": ["1.0", "1.1"]}
        schema["properties"]["summary"]["properties"]["dropped"] = {
            "type": "integer",
            "description": "New.",
        }

    _edit(schemas / "v1" / "report.schema.json", add_field)
    review = _review(schemas, chain=_relabelling_chain("report"))
    assert review.exit_code == 1
    markdown = review_markdown(review)
    assert "not forward compatible, which a minor version of a report requires" in markdown


def _relabelling_chain(kind: str) -> Any:
    from servesim.contract.migrations import Migration, MigrationChain, relabel

    return MigrationChain(
        migrations=(Migration(kind, "1.0", "1.1", "relabelled", relabel),),
        current={**CHAIN.current, kind: "1.1"},
    )


def test_edited_released_file_is_a_violation(schemas: Path) -> None:
    released = schemas / "released" / "1.0" / "timing-profile.schema.json"
    released.write_bytes(released.read_bytes() + b"\n")
    review = _review(schemas)
    assert review.exit_code == 1
    assert "has changed since its release" in review_markdown(review)


# --- against a git revision --------------------------------------------------------------


def _git(folder: Path, *arguments: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *arguments],
        cwd=folder,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def repository(schemas: Path) -> Path:
    """A git repository whose first commit holds today's schemas."""
    root = schemas.parent
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "schemas as released")
    return root


def test_review_against_a_revision_sees_the_work_tree_change(repository: Path) -> None:
    schemas = repository / "schemas"
    (schemas / "v2").mkdir(exist_ok=True)
    shutil.copy(SCENARIO_2_0, schemas / "v2" / "scenario.schema.json")
    review = review_files(
        read_work_tree(schemas),
        chain=FIXTURE_CHAIN,
        head_label="the work tree",
        base_files=read_revision(schemas, "HEAD"),
        base_label="HEAD",
        examples=150,
    )
    assert review.exit_code == 0
    assert _document(review, "scenario").head.version == "2.0"


def test_review_catches_a_released_file_edited_together_with_its_checksum(
    repository: Path,
) -> None:
    schemas = repository / "schemas"
    released = schemas / "released" / "1.0" / "scenario.schema.json"
    released.write_bytes(released.read_bytes().replace(b"identical", b"alike"))
    sums = schemas / "released" / "SHA256SUMS"
    subprocess.run(
        "sha256sum $(cut -d' ' -f3 SHA256SUMS) > SHA256SUMS.new && mv SHA256SUMS.new SHA256SUMS",
        shell=True,
        cwd=sums.parent,
        check=True,
    )
    review = review_files(
        read_work_tree(schemas),
        chain=CHAIN,
        head_label="the work tree",
        base_files=read_revision(schemas, "HEAD"),
        examples=0,
    )
    assert review.exit_code == 1
    messages = [finding.message for finding in review.releases]
    assert (
        messages[0] == "released/1.0/scenario.schema.json was edited; released files never change"
    )
    assert messages[1].startswith("released/SHA256SUMS no longer has the line '3a9a76e5")
    assert len(messages) == 2


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="servesim schema")
    add_schema_arguments(parser)
    return run_schema(parser.parse_args(argv))


def test_servesim_schema_review_writes_markdown(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schemas = repository / "schemas"
    (schemas / "v2").mkdir(exist_ok=True)
    shutil.copy(SCENARIO_2_0, schemas / "v2" / "scenario.schema.json")
    _git(repository, "add", ".")
    _git(repository, "commit", "-q", "-m", "scenario 2.0")
    output = repository / "review.md"
    status = _cli("review", "--base", "HEAD~1", "--schemas", str(schemas), "--output", str(output))
    # The reference's chain has no step to 2.0 (since the real 1.4, its 1.3 -> 1.4 is the
    # reference's own): the gate says so.
    assert status == 1
    text = output.read_text("utf-8")
    assert text.startswith("## Schema review: `HEAD~1` (")
    assert "no migration from 1.3 to 2.0" in text
    assert "wrote" in capsys.readouterr().err


def test_servesim_schema_review_of_an_unknown_revision_exits_2(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = _cli("review", "--base", "no-such-rev", "--schemas", str(repository / "schemas"))
    assert status == 2
    assert "no-such-rev" in capsys.readouterr().err


def test_servesim_schema_review_of_the_repository_passes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _cli("review", "--schemas", str(REPO / "schemas"), "--examples", "20") == 0
    assert "Nothing against the versioning policy." in capsys.readouterr().out
