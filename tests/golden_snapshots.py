"""A syrupy extension that keeps each golden case's expected report in the case's own folder.

Syrupy then owns the update flow (``pytest --snapshot-update``) while the corpus stays
language-neutral: ``golden/valid/<name>/expected-report.json`` is what every implementation is
compared with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from syrupy.data import Snapshot, SnapshotCollection
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from tests.helpers import REPO

GOLDEN = REPO / "golden"
VALID = GOLDEN / "valid"
EXPECTED_REPORT = "expected-report.json"


class GoldenReportExtension(SingleFileSnapshotExtension):
    """Snapshot ``name`` lives at ``golden/valid/<name>/expected-report.json``, as raw bytes."""

    _write_mode = WriteMode.BINARY
    file_extension = "json"

    @classmethod
    def get_location(cls, *, test_location: Any, index: Any) -> str:
        return str(VALID / str(index) / EXPECTED_REPORT)

    @classmethod
    def get_snapshot_name(cls, *, test_location: Any, index: Any = 0) -> str:
        return str(index)

    def read_snapshot_collection(self, *, snapshot_location: str) -> SnapshotCollection:
        # Named after the case folder, as get_snapshot_name() names it, so that syrupy sees the
        # report as used rather than as an orphan to delete.
        collection = SnapshotCollection(location=snapshot_location)
        collection.add(Snapshot(name=Path(snapshot_location).parent.name))
        return collection

    @classmethod
    def dirname(cls, *, test_location: Any) -> str:
        return str(VALID)

    @classmethod
    def discovery_dirname(cls, *, test_location: Any) -> str:
        # Different from dirname() on purpose: syrupy then treats discovery as directory-scoped
        # and claims only the files this extension owns. With the two equal, it would count every
        # input file under golden/valid/ as an unknown snapshot and delete it on --snapshot-update.
        return str(GOLDEN)

    def is_snapshot_location(self, *, location: str) -> bool:
        return Path(location).name == EXPECTED_REPORT

    def owns_snapshot_collection(self, *, filepath: str, test_location: Any) -> bool:
        return Path(filepath).name == EXPECTED_REPORT

    @classmethod
    def matches_test_location(cls, *, test_location: Any, snapshot_location: str) -> bool:
        return Path(snapshot_location).name == EXPECTED_REPORT
