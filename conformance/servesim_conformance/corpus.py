"""The golden corpus: a manifest of cases, each a folder of input files (and an expected report).

Layout, after toml-test: ``golden/valid/<name>/`` holds the three inputs, ``expected-report.json``
and, for small cases, ``DERIVATION.md``; ``golden/invalid/<name>/`` holds three inputs, one of
them faulty, and no report. ``golden/manifest.json`` lists every case with a stable id.
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from servesim_conformance.schemas import validate_harness_document

#: The input files of every case, by the role ``servesim replay`` gives them.
INPUT_FILES = {
    "scenario": "scenario.json",
    "workload": "workload.json",
    "timing_profile": "timing-profile.json",
}
EXPECTED_REPORT = "expected-report.json"


class CorpusError(Exception):
    """The corpus itself is broken: a bug in the test case, not in the implementation."""


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

    @property
    def valid(self) -> bool:
        """Whether the case's inputs are valid (an expected report exists)."""
        return self.id.startswith("valid/")

    @property
    def expected_report(self) -> Path:
        return self.folder / EXPECTED_REPORT

    def input_paths(self) -> dict[str, Path]:
        return {role: self.folder / name for role, name in INPUT_FILES.items()}


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
    cases = tuple(
        Case(
            id=entry["id"],
            folder=root / entry["id"],
            description=entry["description"],
            schema_version=entry["schema_version"],
            features=frozenset(entry["features"]),
            rules=tuple(entry["rules"]),
            trace=entry.get("trace", False),
            smoke=entry.get("smoke", False),
            fault=entry.get("fault", ""),
        )
        for entry in manifest["cases"]
    )
    return Corpus(root=root, version=manifest["corpus_version"], cases=cases)
