"""Test configuration: the hypothesis profiles and shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from servesim_conformance.strategies import load_profile
from tests.helpers import EXAMPLES

# Derandomized and database-free in CI, so a run is reproducible (tox sets HYPOTHESIS_PROFILE).
load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture
def example_inputs() -> dict[str, Path]:
    """The bundled example's three input files."""
    folder = EXAMPLES / "basic"
    return {
        "scenario": folder / "scenario.json",
        "workload": folder / "workload.json",
        "timing_profile": folder / "timing-profile.json",
    }
