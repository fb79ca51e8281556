"""Committed generated pages name the repository's corpus and protocols, never older ones.

A generated page (a Markdown page marked "do not edit by hand", the example conformance matrix in
``docs/matrix/``) is rewritten by a command, not by hand, so nothing else notices when the corpus,
the harness or an implementation moves on and the page does not (issue 30: RESULTS.md named
corpus 1.4.0 and docs/matrix/ 1.1.0 while the corpus was 1.6.0). Here:

- every corpus version a generated page names is golden/manifest.json's;
- every run report behind a page is a document of the harness's newest protocol (it validates
  against the working run-report schema) and holds only cases of the current corpus;
- every implementation a page names, with its protocol (and features, schema versions), is
  described as that implementation's ``--describe`` answers today, and speaks a protocol the
  harness supports (``SUPPORTED_PROTOCOLS``).

Regenerate a failing page with the command it names (docs/matrix/README.md; ``tox -e dynamo``
for conformance/adapters/dynamo/RESULTS.md; ``python -m servesim_conformance.coverage SPEC.md``
for golden/COVERAGE.md).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from servesim_conformance.implementation import SUPPORTED_PROTOCOLS
from servesim_conformance.schemas import validate_harness_document
from tests.helpers import REPO

MANIFEST = json.loads((REPO / "golden" / "manifest.json").read_text(encoding="utf-8"))
CORPUS = MANIFEST["corpus_version"]
CASE_IDS = {case["id"] for case in MANIFEST["cases"]}
#: The harness documents' protocol: run reports are validated against its schemas.
PROTOCOL = max(SUPPORTED_PROTOCOLS)

MATRIX = REPO / "docs" / "matrix"
MATRIX_REPORTS = sorted(MATRIX.glob("*.json"))
RESULTS = REPO / "conformance" / "adapters" / "dynamo" / "RESULTS.md"
DYNAMO_ADAPTER = REPO / "conformance" / "adapters" / "dynamo" / "adapter.py"

#: Where generated pages live. schemas/reviews/ is left out on purpose: each review is the
#: record of one past change (R39), and names the protocol of that change.
ROOTS = ("golden", "conformance", "docs", "benchmarks", "examples")
MARKER = "do not edit by hand"
#: Every page marked as generated, and the matrix page (linked from README.md); a new generated
#: page is added here, so that it cannot be missed below.
GENERATED = {
    "golden/COVERAGE.md",
    "conformance/adapters/dynamo/RESULTS.md",
    "conformance/adapters/dynamo/MOONCAKE.md",
    "conformance/adapters/dynamo/MOONCAKE-KV.md",
    "conformance/adapters/dynamo/MOONCAKE-KV-4096.md",
    "conformance/adapters/dynamo/SESSIONS.md",
    "conformance/adapters/dynamo/MOONCAKE-DP2.md",
    "conformance/adapters/dynamo/MOONCAKE-DP4.md",
    "conformance/adapters/dynamo/RANKS.md",
    "conformance/adapters/dynamo/STYLES.md",
    "conformance/adapters/dynamo/MOONCAKE-STYLES.md",
    "conformance/adapters/dynamo/DISAGG-CASES.md",
    "conformance/adapters/dynamo/MOONCAKE-DISAGG.md",
    "conformance/adapters/dynamo/MOONCAKE-DISAGG-4P4D.md",
    "conformance/adapters/dynamo/MOONCAKE-DISAGG-8P4Dx2.md",
    "conformance/adapters/dynamo/HOST.md",
    "docs/matrix/index.html",
    *(f"docs/matrix/{path.name}" for path in MATRIX_REPORTS),
}
#: The generated pages whose content depends on the corpus: each must name its version.
NAMES_THE_CORPUS = {
    "golden/COVERAGE.md",
    "conformance/adapters/dynamo/RESULTS.md",
    "docs/matrix/index.html",
    *(f"docs/matrix/{path.name}" for path in MATRIX_REPORTS),
}

CORPUS_MENTION = re.compile(r"corpus[\"_ :(`]*(?:version[\"]*: *\")?(\d+\.\d+\.\d+)", re.I)


def _text(page: str) -> str:
    return (REPO / page).read_text(encoding="utf-8")


def _marked_pages() -> set[str]:
    """Every Markdown or HTML file under ``ROOTS`` that says it is generated."""
    found = set()
    for root in ROOTS:
        for path in (REPO / root).rglob("*"):
            if path.suffix in (".md", ".html") and MARKER in path.read_text(encoding="utf-8"):
                found.add(path.relative_to(REPO).as_posix())
    return found


@cache
def _describe(*argv: str) -> dict[str, Any]:
    """What an implementation of this repository answers to ``--describe`` today."""
    command = [sys.executable if argv[0] == "python" else argv[0], *argv[1:], "--describe"]
    result = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    description: dict[str, Any] = json.loads(result.stdout)
    return description


def test_every_page_marked_generated_is_checked_here() -> None:
    marked = _marked_pages()
    assert marked <= GENERATED, f"add {sorted(marked - GENERATED)} to GENERATED"
    assert {page for page in GENERATED if page.endswith(".md")} == marked
    assert [path.name for path in MATRIX_REPORTS] == [
        "floor-rounding-fake.json",
        "independent.json",
        "reference.json",
    ]


@pytest.mark.parametrize("page", sorted(GENERATED))
def test_a_generated_page_names_no_other_corpus(page: str) -> None:
    named = set(CORPUS_MENTION.findall(_text(page)))
    if page in NAMES_THE_CORPUS:
        assert named, f"{page} names no corpus version"
    assert named <= {CORPUS}, f"{page} names corpus {sorted(named)}, the corpus is {CORPUS}"


def test_the_corpus_pattern_finds_each_page_s_way_of_naming_it() -> None:
    """The pattern above is not vacuous: it reads the forms the pages use."""
    forms = {
        "Generated from `manifest.json` (corpus 1.2.3) by": "1.2.3",
        "declared features: timing.grid. Corpus 1.2.4, 281 cases.": "1.2.4",
        '"corpus_version": "1.2.5",': "1.2.5",
        "3 run reports; corpus 1.2.6; harness 0.1.0.": "1.2.6",
    }
    for text, version in forms.items():
        assert CORPUS_MENTION.findall(text) == [version], text


@pytest.mark.parametrize("report", MATRIX_REPORTS, ids=lambda path: path.name)
def test_the_matrix_reports_are_current_run_reports(report: Path) -> None:
    """docs/matrix/: run reports of the newest harness protocol, on cases of this corpus, of
    implementations described as they describe themselves today (protocol, versions, features)."""
    value = json.loads(report.read_text(encoding="utf-8"))
    assert validate_harness_document("run-report", value) == [], (
        f"not a protocol {PROTOCOL} run report"
    )
    assert value["corpus_version"] == CORPUS
    assert {case["id"] for case in value["cases"]} <= CASE_IDS
    described = value["implementation"]["description"]
    assert described["protocol_version"] in SUPPORTED_PROTOCOLS
    assert described == _describe(*value["implementation"]["argv"])


def test_results_md_names_this_corpus_and_the_adapter_as_it_describes_itself() -> None:
    """conformance/adapters/dynamo/RESULTS.md (``tox -e dynamo``): the corpus and its size, and
    the adapter's protocol and features as its ``--describe`` gives them (Dynamo need not be
    installed for that answer)."""
    text = _text("conformance/adapters/dynamo/RESULTS.md")
    header = re.search(
        r"protocol (\d+), declared features: (.*?)\. Corpus (\d+\.\d+\.\d+), (\d+) cases\.", text
    )
    assert header is not None
    protocol, features, corpus, cases = header.groups()
    assert (corpus, int(cases)) == (CORPUS, len(CASE_IDS))
    described = _describe("python", str(DYNAMO_ADAPTER))
    assert int(protocol) == described["protocol_version"]
    assert int(protocol) in SUPPORTED_PROTOCOLS
    assert features.split(", ") == (described["features"] or ["none"])
