"""Shared test setup: markers, hypothesis profiles, golden PaPaRa cases, OpenCL devices."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis: modest example counts by default (CI has 2 cores and a 15-minute budget);
# HYPOTHESIS_PROFILE=thorough for a long local run.
settings.register_profile(
    "default", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

HERE = Path(__file__).parent
SHARED_GOLDEN = HERE.parent.parent / "shared" / "golden" / "papara"
BUNDLED_GOLDEN = HERE / "data" / "golden"


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: give --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def golden_root() -> Path:
    """The full golden set beside the checkout when present, else the copy in tests/."""
    return SHARED_GOLDEN if SHARED_GOLDEN.is_dir() else BUNDLED_GOLDEN


def golden_cases() -> list[Path]:
    return sorted(p for p in golden_root().iterdir() if (p / "tree.nwk").exists())
