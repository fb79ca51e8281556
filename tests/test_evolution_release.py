"""Released schema versions are immutable (the versioning policy, R34).

``schemas/released/`` holds a frozen copy of every released version and ``SHA256SUMS`` their
digests. The checksums alone would let an edit through together with a matching edit of
``SHA256SUMS``, so each release's list of digests is itself pinned here, in ``RELEASES``: a
released file that changes by one byte fails this module whatever else changes with it. A new
release adds its line to ``RELEASES``; no existing line ever changes.

A release is a run of consecutive ``SHA256SUMS`` lines of one folder. Every kind has its own
versions (R34), so a folder can gain files after its first release (scenario and workload 1.1
joined timing profile 1.1); such a later run of lines is a release of its own, pinned as
``<folder>#<n>`` for the folder's n-th run, and the earlier runs stay pinned unchanged.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from servesim.contract.migrations import CHAIN
from servesim.contract.schemas import SUPPORTED_VERSIONS
from servesim_conformance.evolution.catalog import (
    SUMS,
    read_work_tree,
    released_problems,
    released_schemas,
)
from servesim_conformance.evolution.policy import Level
from servesim_conformance.evolution.review import review_files
from tests.helpers import REPO

SCHEMAS = REPO / "schemas"

#: Release -> SHA-256 of its lines of SHA256SUMS (path order). Append-only.
RELEASES = {
    "1.0": "537929d2a64c862a69d90a20e4c480f26da5e8da24796f817bc03ecbca58aecb",
    "harness/1": "b44c75b3ccec1e28acb81320bb7a3b84db1283d44d63b5d1a4761f312b4344d4",
    "1.1": "8c58a197ecf3d4c03dbdee522e4067fa5a310a197c708a4d3cd51600a259e087",
    "2.0": "faa957915dba6fc6db21d00ae4c94a6d3065361d20c2e0fb5154ef05173b71c8",
    "harness/2": "a740285f7446a904b7e0a6d298185114c922951f8f71483f3e5847ed085bcafa",
    "harness/3": "5caecd484849a9bac5622085d3ee23ab8e8cb99cb0e967f0a33cc0113de8c5ea",
    "1.1#2": "47c0e6bc152a6e3dff9edeb466e83c4e0531be892048b5657d2fb5e4f501cdef",
    "3.0": "d12010afb416525e5f7de153a6e3ac5625b4fae6e23a8e26c3c23abfdfc78f4f",
    "1.2": "ada971c023a6ff6bc51ec1f0e68787173c948b36a21c5f6f05b7455452d13dbf",
    "4.0": "156691a0bebc16cf5cd4911c753bd4018208b187d9b2a5ddfb7fd44c1a41a458",
    "1.3": "5a3eeb441a73a58a9997bf2f83011c95c8c3b80a1850f9e6d7c985aa91634e36",
    "1.2#2": "68ab2af57bf6e0d7f354e2b451f6534b2753a2b8fa9d6da7b9e42b277e3e1137",
    "5.0": "fa141811ce258d4f4ec6f9d6885cd558cac583af180160b25393745d42800859",
    "harness/4": "ca45448ffab174127d03b45f9f02c1fdf0428e74259a131d6a8deeda61564d3b",
    "6.0": "346c9500c2d3b94f74017772317a5d5c842ddb24b0ff66800bc1f184ee1f2dc1",
    "harness/5": "e6a99602f8319f9219f6741a3d5deb737018da0428db7f667b81ce294c765d45",
    "1.4": "fa590d0afbca1e7858ed8b311e093e97ad7b0c62828a7511a0c08caca3000550",
    "7.0": "60fd863d7108cee249f5c27149d9aef268b50134b2deb11c5229c36b325bc94c",
    "1.5": "4c11e7e686c02ed2b570349d918401bc4cfa362cdb7a62ce83a9eb79d86b2235",
    "1.6": "b601bc8ae36b82193840eea7f261cc27129f3390eabe86d986c3edea81006e96",
    "8.0": "48e81e1c9154152e28a5f10a9aa847dab388cd4db4f3db38968f877c5bcd9056",
    "1.7": "8d80f79d0610aea506c4db323c603f5477710a1b80efbac78a8f86140297e889",
    "9.0": "6cae277c812035c8f8bd2d9311c40630ec57874b5ae989a24426dfe29ff50567",
    "1.8": "f79067cbd69001d7f6ebd78d22d83e7b5abfbade0b0b39640f9a715350f5c57c",
    "1.3#2": "d9f9bf8649aa807fe55169bb0fcf3879d1b654239c49a000bf45155a85a86d1a",
    "10.0": "66326daa01dbfee0aaf0eabf2d1e4b83f9c917c2417d064b6f48173aea21c2b9",
}


def release_digests(files: dict[str, bytes]) -> dict[str, str]:
    """Per release (a run of consecutive lines of one folder), the digest of its lines of
    ``SHA256SUMS``; a folder's first run is named by the folder, its n-th by ``<folder>#<n>``."""
    groups: dict[str, list[str]] = {}
    runs: dict[str, int] = {}
    previous = None
    for line in files[SUMS].decode("utf-8").splitlines():
        folder = line.split("  ", 1)[1].rsplit("/", 1)[0]
        if folder != previous:
            runs[folder] = runs.get(folder, 0) + 1
            previous = folder
        release = folder if runs[folder] == 1 else f"{folder}#{runs[folder]}"
        groups.setdefault(release, []).append(line)
    return {
        release: hashlib.sha256(("\n".join(lines) + "\n").encode()).hexdigest()
        for release, lines in groups.items()
    }


def immutability_problems(files: dict[str, bytes]) -> list[str]:
    """Checksum failures, and releases whose pinned digest list differs from ``RELEASES``."""
    problems = released_problems(files)
    if SUMS in files:
        for release, digest in release_digests(files).items():
            if release not in RELEASES:
                problems.append(f"release {release} is not pinned in RELEASES")
            elif RELEASES[release] != digest:
                problems.append(f"release {release} changed: its files are not the ones released")
        problems += [
            f"release {release} is gone"
            for release in RELEASES
            if release not in release_digests(files)
        ]
    return problems


def test_released_schemas_are_unchanged_since_their_release() -> None:
    assert immutability_problems(read_work_tree(SCHEMAS)) == []


@pytest.fixture
def schemas_copy(tmp_path: Path) -> Path:
    """A scratch copy of ``schemas/`` to damage."""
    copy = tmp_path / "schemas"
    shutil.copytree(SCHEMAS, copy)
    return copy


def test_one_byte_changed_in_a_released_file_is_caught(schemas_copy: Path) -> None:
    released = schemas_copy / "released" / "1.0" / "scenario.schema.json"
    data = bytearray(released.read_bytes())
    data[-2:-1] = b" "  # one byte: the final closing brace becomes a space
    released.write_bytes(bytes(data))
    problems = immutability_problems(read_work_tree(schemas_copy))
    assert problems == [
        "released/1.0/scenario.schema.json has changed since its release (its SHA-256 differs)"
    ]


def test_a_change_with_its_checksum_updated_is_still_caught(schemas_copy: Path) -> None:
    released = schemas_copy / "released" / "1.0" / "workload.schema.json"
    old_digest = hashlib.sha256(released.read_bytes()).hexdigest()
    released.write_bytes(released.read_bytes().replace(b"at least one", b"at least 1"))
    sums = schemas_copy / "released" / "SHA256SUMS"
    new_digest = hashlib.sha256(released.read_bytes()).hexdigest()
    sums.write_text(sums.read_text().replace(old_digest, new_digest))
    files = read_work_tree(schemas_copy)
    assert released_problems(files) == []
    assert immutability_problems(files) == [
        "release 1.0 changed: its files are not the ones released"
    ]


def test_an_unlisted_or_missing_released_file_is_caught(schemas_copy: Path) -> None:
    (schemas_copy / "released" / "1.0" / "extra.schema.json").write_text("{}")
    (schemas_copy / "released" / "harness" / "1" / "describe.schema.json").unlink()
    assert released_problems(read_work_tree(schemas_copy)) == [
        "released/harness/1/describe.schema.json is listed in released/SHA256SUMS but missing",
        "released/1.0/extra.schema.json is not listed in released/SHA256SUMS",
    ]


def test_released_schemas_are_valid_draft_2020_12() -> None:
    for path in sorted((SCHEMAS / "released").rglob("*.schema.json")):
        jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text("utf-8")))


def test_every_version_the_reference_reads_is_released() -> None:
    released = released_schemas(read_work_tree(SCHEMAS))
    for kind, versions in SUPPORTED_VERSIONS.items():
        assert set(versions) <= {entry.version for entry in released[kind]}, kind


def test_every_released_version_migrates_to_the_current_one() -> None:
    for kind, entries in released_schemas(read_work_tree(SCHEMAS)).items():
        if entries[0].versioned:
            for entry in entries:
                assert CHAIN.path(kind, entry.version) is not None


def test_work_tree_schemas_keep_the_policy_against_the_last_release() -> None:
    """The current schemas may differ from their release only as the policy allows."""
    review = review_files(read_work_tree(SCHEMAS), chain=CHAIN, head_label="work tree", examples=50)
    assert review.level is Level.OK, [
        (document.kind, finding.message)
        for document in review.documents
        for finding in document.findings
    ]


def test_describe_declares_every_kind_s_versions_and_each_is_released() -> None:
    """The --describe handshake is how an implementation says which versions it reads, and for
    the report which it writes (R38); every one of them must be released."""
    from servesim.contract.schemas import WRITTEN_REPORT_VERSIONS
    from servesim.describe import description
    from servesim_conformance.schemas import validate_harness_document

    described = description("0")
    assert validate_harness_document("describe", described) == []
    released = released_schemas(read_work_tree(SCHEMAS))
    expected = {**SUPPORTED_VERSIONS, "report": WRITTEN_REPORT_VERSIONS}
    for kind, versions in described["schema_versions"].items():
        assert versions == list(expected[kind])
        assert set(versions) <= {entry.version for entry in released[kind]}
