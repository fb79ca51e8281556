"""The reference against the plain per-step loop: byte-identical reports on generated inputs.

``conformance/examples/independent/servesim_independent.py`` was written from SPEC.md alone and
steps every worker one step at a time, the obvious way. It is the differential oracle for the
reference's optimisations (R21: same inputs, same bytes).
"""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path
from types import ModuleType

from hypothesis import given, settings

from servesim_conformance.properties import (
    Documents,
    at_current_version,
    input_bytes,
    reference_report,
)
from servesim_conformance.strategies import input_triples, scenarios, timing_profiles, workloads
from tests.helpers import REPO

PLAIN_LOOP = REPO / "conformance" / "examples" / "independent" / "servesim_independent.py"


def _load_plain_loop() -> ModuleType:
    spec = importlib.util.spec_from_file_location("servesim_independent", PLAIN_LOOP)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PLAIN = _load_plain_loop()


def plain_report(documents: Documents, *, trace: bool = True) -> bytes:
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        names = {"scenario": "s.json", "workload": "w.json", "timing_profile": "t.json"}
        for role, data in input_bytes(documents).items():
            (folder / names[role]).write_bytes(data)
        arguments = [
            "replay",
            "--scenario",
            str(folder / "s.json"),
            "--workload",
            str(folder / "w.json"),
            "--timing-profile",
            str(folder / "t.json"),
            "--output",
            str(folder / "r.json"),
        ]
        assert PLAIN.main([*arguments, "--trace"] if trace else arguments) == 0
        # the plain loop writes report 1.0; R38 compares it at the current version
        return at_current_version((folder / "r.json").read_bytes())


@settings(max_examples=300)
@given(input_triples())
def test_reference_equals_plain_loop(documents: Documents) -> None:
    assert reference_report(documents) == plain_report(documents)


@settings(max_examples=100)
@given(scenarios(max_workers=2), workloads(max_size=40), timing_profiles())
def test_reference_equals_plain_loop_on_longer_workloads(
    scenario: dict[str, object], workload: dict[str, object], timing: dict[str, object]
) -> None:
    documents = (scenario, workload, timing)
    assert reference_report(documents, trace=False) == plain_report(documents, trace=False)
