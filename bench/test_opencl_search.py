"""pytest-benchmark cases for the OpenCL search and long-pair kernels (``pytest bench/``).

Kernel GCUPS (OpenCL profiling events) go to ``extra_info``. Shapes are the goals' (a
375-residue query against 200,000 proteins; one 100 kb pair) on a GPU and scaled down on
CPU devices such as PoCL. ``python bench/opencl_search.py all`` runs the full set with checks.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpalign.benchmarks import workloads
from dpalign.gcups import RunStats
from dpalign.kernels_cl.context import device_context, list_devices
from dpalign.kernels_cl.search import SearchRunner
from dpalign.longpair import Tiling, align_long
from dpalign.scoring import Scoring, free_ends_tuple

pytestmark = pytest.mark.skipif(not list_devices(), reason="no OpenCL device")


def _gpu() -> bool:
    return not device_context().caps.is_cpu


@pytest.fixture(scope="module")
def protein_runner():
    scoring = Scoring("BLOSUM62", (11, 1))
    db = workloads.protein_database(200_000 if _gpu() else 2_000)
    lut = scoring.alphabet.lut
    targets = [lut[np.frombuffer(s.encode(), np.uint8)] for _, s in db]
    query = lut[np.frombuffer(workloads.protein_query(375).encode(), np.uint8)]
    return SearchRunner(device_context(), targets), query, scoring


@pytest.mark.parametrize("width", [None, 32], ids=["i16", "i32"])
@pytest.mark.parametrize("mode", ["local", "semiglobal"])
def test_protein_search(benchmark, protein_runner, mode, width):
    runner, query, scoring = protein_runner
    ends = free_ends_tuple(mode)
    runner.score(query, scoring, mode, ends, width=width)  # build outside the timing
    result = benchmark.pedantic(
        runner.score, args=(query, scoring, mode, ends), kwargs={"width": width}, rounds=3
    )
    benchmark.extra_info.update(
        device=device_context().caps.name,
        cells=result.cells,
        kernel_seconds=result.kernel_seconds,
        gcups=result.cells / result.kernel_seconds / 1e9,
        widths=sorted(set(result.width.tolist())),
    )


@pytest.mark.parametrize("traceback", [False, True], ids=["score", "traceback"])
def test_long_pair(benchmark, traceback):
    scoring = Scoring("NUC.4.4", (10, 1))
    a, b = workloads.long_pair(100_000 if _gpu() else 3_000)
    stats = RunStats()

    def run():
        tiling = Tiling(device_cells=1 << 20)
        return align_long(
            a, b, scoring, traceback=traceback, tiling=tiling, backend="opencl", stats=stats
        )

    run()
    result = benchmark.pedantic(run, rounds=2)
    (worker,) = stats.workers.values()
    benchmark.extra_info.update(
        device=device_context().caps.name,
        score=result.score,
        device_cells=worker.cells,
        kernel_seconds=worker.seconds,
        gcups=worker.cells / worker.seconds / 1e9 if worker.seconds else 0.0,
    )
