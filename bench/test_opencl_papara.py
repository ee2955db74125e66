"""pytest-benchmark cases for the OpenCL PaPaRa kernels (``pytest bench/ --benchmark-only``).

Kernel GCUPS (from OpenCL profiling events) go to ``extra_info``. The shape is the seed
paper's (reads of ~100 bp against 320 profiles), scaled down on CPU devices such as PoCL.
The full Tables 1 and 2 are ``python bench/opencl_papara.py tables``.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpalign.kernels_cl.context import device_context, list_devices
from dpalign.kernels_cl.papara import PaparaRunner
from dpalign.scoring import PaparaScoring

pytestmark = pytest.mark.skipif(not list_devices(), reason="no OpenCL device")


def _shape():
    gpu = not device_context().caps.is_cpu
    return (1250, 320, 10_000) if gpu else (16, 64, 2_000)  # reads, profiles, columns


@pytest.mark.parametrize("design", ["strip", "blocked"])
@pytest.mark.parametrize("width", [None, 32], ids=["i16", "i32"])
def test_papara_kernel(benchmark, design, width):
    reads, lanes, columns = _shape()
    rng = np.random.default_rng(0)
    states = (1 << rng.integers(0, 4, (columns, lanes))).astype(np.uint8)
    flags = (rng.random((columns, lanes)) < 0.1).astype(np.uint8)
    lengths = rng.integers(90, 111, reads)
    codes = (1 << rng.integers(0, 4, (reads, int(lengths.max())))).astype(np.uint8)
    runner = PaparaRunner(device_context(), PaparaScoring(), states, flags, False, design)
    runner.score(codes, lengths, width=width)  # build and upload outside the timing
    result = benchmark.pedantic(
        runner.score, args=(codes, lengths), kwargs={"width": width}, rounds=3
    )
    benchmark.extra_info.update(
        device=device_context().caps.name,
        cells=result.cells,
        kernel_seconds=result.kernel_seconds,
        gcups=result.cells / result.kernel_seconds / 1e9,
        width=int(result.width.max()),
    )
