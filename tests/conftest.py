"""Test configuration: the hypothesis profiles and shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from tests.helpers import EXAMPLES

# Derandomized and database-free in CI, so a run is reproducible (tox sets HYPOTHESIS_PROFILE).
settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture
def example_inputs() -> dict[str, Path]:
    """The bundled example's three input files."""
    folder = EXAMPLES / "basic"
    return {
        "scenario": folder / "scenario.json",
        "workload": folder / "workload.json",
        "timing_profile": folder / "timing-profile.json",
    }
