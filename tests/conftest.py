"""Shared test setup: markers, hypothesis profiles, golden PaPaRa cases, OpenCL devices."""

from __future__ import annotations

import functools
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

# The hybrid backend keeps measured worker rates between processes; tests (and the commands
# they start) neither read a user's nor leave theirs behind.
os.environ["DPALIGN_HYBRID_RATES_FILE"] = ""
# A `dpalign serve` the user runs must not take the commands tests start (tests/test_serve.py
# starts servers of its own).
os.environ["DPALIGN_SERVER"] = "off"

HERE = Path(__file__).parent
SHARED_GOLDEN = HERE.parent.parent / "shared" / "golden" / "papara"
BUNDLED_GOLDEN = HERE / "data" / "golden"


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if not any(kind == "gpu" for _, kind in opencl_devices()):
        skip_gpu = pytest.mark.skip(reason="no OpenCL GPU here")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip_gpu)
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: give --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@functools.cache
def opencl_devices() -> tuple[tuple[str, str], ...]:
    """Every OpenCL device here as ``(id, kind)``, kind ``gpu``/``cpu``/``accelerator``."""
    try:
        from dpalign.kernels_cl.capabilities import capabilities
        from dpalign.kernels_cl.context import list_devices

        return tuple((ident, capabilities(dev).kind) for ident, dev in list_devices())
    except Exception:  # no pyopencl, a broken ICD: no devices, the tests say so by skipping
        return ()


def pytest_generate_tests(metafunc):
    """Run every test that asks for ``cl_device`` on each OpenCL device (GPUs marked gpu),
    like pyopencl's ``pytest_generate_tests_for_pyopencl``."""
    if "cl_device" not in metafunc.fixturenames:
        return
    params = [
        pytest.param(
            ident, id=f"cl{ident}-{kind}", marks=[pytest.mark.gpu] if kind == "gpu" else []
        )
        for ident, kind in opencl_devices()
    ]
    if not params:
        params = [
            pytest.param(None, id="no-opencl", marks=pytest.mark.skip(reason="no OpenCL device"))
        ]
    metafunc.parametrize("cl_device", params)


def golden_root() -> Path:
    """The full golden set beside the checkout when present, else the copy in tests/."""
    return SHARED_GOLDEN if SHARED_GOLDEN.is_dir() else BUNDLED_GOLDEN


def golden_cases() -> list[Path]:
    return sorted(p for p in golden_root().iterdir() if (p / "tree.nwk").exists())


@pytest.fixture
def files(tmp_path):
    """``files(name, text)`` writes a file in the test's folder and returns its path."""

    def write(name, text):
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write
