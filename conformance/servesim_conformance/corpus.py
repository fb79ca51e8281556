"""The golden corpus: a manifest of cases, each a folder of input files (and an expected report).

Layout, after toml-test: ``golden/valid/<name>/`` holds the three inputs, ``expected-report.json``
and, for small cases, ``DERIVATION.md`` (a case with one timing profile per pool has, instead of
``timing-profile.json``, a folder ``timing-profiles/`` of ``POOL.json`` files, R87);
``golden/invalid/<name>/`` holds three inputs, one of them faulty, and no report.
``golden/manifest.json`` lists every case with a stable id.

A case's ``expect`` says what it asks of an implementation: a report (valid cases, the default),
a rejection (invalid cases, the default), or exit 3 for a step outside the timing profile's
coverage (R43). Out-of-coverage cases live under ``valid/`` because their inputs are valid.
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from servesim_conformance.features import timing_kind_feature, unknown_features_message
from servesim_conformance.schemas import validate_harness_document

#: The input files of every case, by the role ``servesim replay`` gives them.
INPUT_FILES = {
    "scenario": "scenario.json",
    "workload": "workload.json",
    "timing_profile": "timing-profile.json",
}
EXPECTED_REPORT = "expected-report.json"

#: R87: the folder of a case's per-pool timing profiles, ``POOL.json`` each, which the case has
#: instead of ``timing-profile.json``.
POOL_PROFILES = "timing-profiles"


class CorpusError(Exception):
    """The corpus itself is broken: a bug in the test case, not in the implementation."""


class Expect(StrEnum):
    """What a case expects of an implementation (the manifest's ``expect``)."""

    REPORT = "report"
    """Exit 0 and exactly the expected report."""
    INVALID_INPUT = "invalid_input"
    """Exit 2 and no report (R5)."""
    OUT_OF_COVERAGE = "out_of_coverage"
    """Exit 3 and no report (R43); only protocol-2 implementations can be asked (R38)."""


#: Where each expectation's cases live: out-of-coverage inputs are valid, so under valid/.
_FOLDERS = {
    Expect.REPORT: "valid/",
    Expect.INVALID_INPUT: "invalid/",
    Expect.OUT_OF_COVERAGE: "valid/",
}


@dataclass(frozen=True)
class Case:
    """One golden case."""

    id: str
    folder: Path
    description: str
    schema_version: str
    features: frozenset[str]
    rules: tuple[str, ...]
    trace: bool = False
    smoke: bool = False
    fault: str = ""
    expect: Expect | None = None
    """None: the default of the case's folder (``expectation``)."""

    @property
    def valid(self) -> bool:
        """Whether the case's inputs are valid (an expected report exists, unless the case
        expects exit 3)."""
        return self.id.startswith("valid/")

    @property
    def expectation(self) -> Expect:
        """What the case expects: its ``expect``, else a report for valid inputs and a
        rejection for invalid ones."""
        if self.expect is not None:
            return self.expect
        return Expect.REPORT if self.valid else Expect.INVALID_INPUT

    @property
    def expected_report(self) -> Path:
        return self.folder / EXPECTED_REPORT

    def input_paths(self) -> dict[str, Path]:
        """The case's input files by role; a case with per-pool profiles (``pool_profiles``)
        has no ``timing_profile`` here."""
        paths = {role: self.folder / name for role, name in INPUT_FILES.items()}
        if self.pool_profiles():
            del paths["timing_profile"]
        return paths

    def pool_profiles(self) -> dict[str, Path]:
        """R87: each ``timing-profiles/POOL.json`` by POOL, in bytewise order of POOL (the order
        the harness passes them in); empty for a case with one ``timing-profile.json``."""
        folder = self.folder / POOL_PROFILES
        if not folder.is_dir():
            return {}
        profiles = {
            path.name.removesuffix(".json"): path
            for path in folder.iterdir()
            if path.name.endswith(".json") and path.is_file()
        }
        return dict(sorted(profiles.items(), key=lambda item: item[0].encode("utf-8")))

    def input_documents(self) -> list[tuple[str, Path]]:
        """Every input file with its kind: the scenario, the workload and the timing profile,
        or each per-pool profile (R87)."""
        documents = list(self.input_paths().items())
        return documents + [("timing_profile", path) for path in self.pool_profiles().values()]

    def input_document_versions(self) -> list[tuple[str, str]]:
        """Each input file's own ``schema_version`` with its kind (R38: a case's documents need
        not share one); the manifest's ``schema_version`` for a file that cannot say (an
        invalid case's broken file)."""
        return [
            (kind, _declared_version(path) or self.schema_version)
            for kind, path in self.input_documents()
        ]

    def input_versions(self) -> dict[str, str]:
        """Each input's own ``schema_version`` by kind, as ``input_document_versions``; of
        several per-pool profiles, the newest version."""
        versions: dict[str, str] = {}
        for kind, version in self.input_document_versions():
            if kind not in versions or _version_order(version) > _version_order(versions[kind]):
                versions[kind] = version
        return versions

    def needs(self) -> frozenset[str]:
        """The features the case needs: the manifest's and, for a case with valid inputs, the
        baseline tag of its timing profile's model kind (``timing.synthetic_linear``), which
        manifests do not list; an implementation at protocol 4 or later has it only if it
        declares it (R38). An invalid case needs no timing model: its inputs are rejected."""
        if not self.valid:
            return self.features
        tags = {
            timing_kind_feature(_model_kind(path))
            for kind, path in self.input_documents()
            if kind == "timing_profile"
        }
        return self.features | {tag for tag in tags if tag is not None}


def _version_order(version: str) -> tuple[int, ...]:
    """A ``"MAJOR.MINOR"`` version as numbers to order by (anything else orders first)."""
    major, _, minor = version.partition(".")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else (-1,)


def _model_kind(path: Path) -> object:
    """The ``model.kind`` of a timing profile, or None when there is none to read."""
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    model = value.get("model") if isinstance(value, dict) else None
    return model.get("kind") if isinstance(model, dict) else None


def _declared_version(path: Path) -> str | None:
    """The ``schema_version`` string of a JSON document, or None when there is none to read."""
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):  # a deliberately broken file: unreadable, not
        return None  # UTF-8, not JSON, or nested deeper than the parser goes
    version = value.get("schema_version") if isinstance(value, dict) else None
    return version if isinstance(version, str) else None


@dataclass(frozen=True)
class Corpus:
    """The manifest's cases, in manifest order."""

    root: Path
    version: str
    cases: tuple[Case, ...]

    def select(self, *, patterns: Iterable[str] = (), features: Iterable[str] = ()) -> list[Case]:
        """Cases whose id matches any glob in ``patterns`` and that carry every tag in
        ``features`` (no patterns: all cases)."""
        patterns, features = list(patterns), set(features)
        return [
            case
            for case in self.cases
            if (not patterns or any(fnmatch.fnmatchcase(case.id, p) for p in patterns))
            and features <= case.features
        ]


def default_corpus_root() -> Path:
    """``$SERVESIM_GOLDEN``, else the ``golden/`` folder of this source checkout, else the copy
    installed with the package."""
    configured = os.environ.get("SERVESIM_GOLDEN")
    if configured:
        return Path(configured)
    checkout = Path(__file__).resolve().parents[2] / "golden"
    if (checkout / "manifest.json").is_file():
        return checkout
    return Path(__file__).resolve().parent / "golden"


def load_corpus(root: Path | None = None) -> Corpus:
    """Read and check ``root/manifest.json``."""
    root = root if root is not None else default_corpus_root()
    manifest_path = root / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CorpusError(
            f"cannot read the golden manifest {manifest_path} ({error}); set SERVESIM_GOLDEN "
            "to the corpus folder"
        ) from None
    problems = validate_harness_document("golden-manifest", manifest)
    if problems:
        raise CorpusError(f"BUG IN TEST CORPUS: {manifest_path}: " + "; ".join(problems))
    cases = tuple(_case(root, entry) for entry in manifest["cases"])
    for case in cases:
        unknown = unknown_features_message(sorted(case.features), where=case.id)
        if unknown is not None:
            raise CorpusError(f"BUG IN TEST CORPUS: {manifest_path}: {unknown}")
    misplaced = [
        f"{case.id} expects {case.expectation} but is not under {_FOLDERS[case.expectation]}"
        for case in cases
        if not case.id.startswith(_FOLDERS[case.expectation])
    ]
    if misplaced:
        raise CorpusError(f"BUG IN TEST CORPUS: {manifest_path}: " + "; ".join(misplaced))
    return Corpus(root=root, version=manifest["corpus_version"], cases=cases)


def _case(root: Path, entry: dict[str, Any]) -> Case:
    """One manifest entry (already checked against its schema) as a ``Case``."""
    expect = entry.get("expect")
    return Case(
        id=entry["id"],
        folder=root / entry["id"],
        description=entry["description"],
        schema_version=entry["schema_version"],
        features=frozenset(entry["features"]),
        rules=tuple(entry["rules"]),
        trace=entry.get("trace", False),
        smoke=entry.get("smoke", False),
        fault=entry.get("fault", ""),
        expect=Expect(expect) if expect is not None else None,
    )
