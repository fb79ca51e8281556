"""The reference's reports for every valid golden case, pinned with syrupy.

A golden report only freezes what the reference did; it changes only with a reviewed behaviour
change (see golden/README.md for the update flow), never to make a test pass.
"""

from __future__ import annotations

import pytest
from syrupy.assertion import SnapshotAssertion

import servesim
from servesim_conformance.corpus import Expect, load_corpus
from tests.golden_snapshots import GOLDEN, GoldenReportExtension

VALID_CASES = [case for case in load_corpus(GOLDEN).cases if case.expectation is Expect.REPORT]


@pytest.fixture
def golden_report(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    return snapshot.use_extension(GoldenReportExtension)


@pytest.mark.parametrize("case", VALID_CASES, ids=[case.id for case in VALID_CASES])
def test_reference_report_matches_golden(case, golden_report: SnapshotAssertion) -> None:  # type: ignore[no-untyped-def]
    paths = case.input_paths()
    profiles = case.pool_profiles() or paths["timing_profile"]  # R87: per pool, or one for all
    report = servesim.replay(paths["scenario"], paths["workload"], profiles, trace=case.trace)
    assert report == golden_report(name=case.folder.name)
