"""The seed paper's PaPaRa kernel shapes on every backend present, GCUPS in ``extra_info``.

Table 1: 1,250 reads of ~100 bp against 320 profiles, reference length swept 500 ... 500,000;
Table 2: reference length 5,000, reads swept 100 ... 10,000; and the 1604.PRANK shape (802
taxa x 3,060 columns, 16,040 reads; 1,601 edge profiles). Workloads come from
``dpalign.benchmarks.workloads`` (seeded). Read counts (and the PRANK shape's taxa) scale with
``--bench-scale`` (default 0.04 here: 50 reads in Table 1; ``--bench-scale 1`` on the GPU
machine); Table 1 stops at 50,000 columns below scale 1. Backends: numba, and opencl at 16 and
32 bits where an OpenCL GPU exists (PoCL is for tests, not speed).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from dpalign import backends
from dpalign.benchmarks import workloads
from dpalign.engine import Task, get_backend, query_batch
from dpalign.hybrid.backend import gpu_selectors
from dpalign.papara.placement import profile_blocks
from dpalign.scoring import PaparaScoring

SCALE = float(os.environ.get("DPALIGN_BENCH_SCALE", "0.04"))
LENGTHS = [n for n in workloads.SEED_TABLE1_LENGTHS if SCALE >= 1 or n <= 50_000]


GPU = "opencl" in backends() and bool(gpu_selectors())
ENGINES = [("numba", None)] + ([("opencl", None), ("opencl", 32)] if GPU else [])
ENGINE_IDS = [f"{name}-{'auto' if width is None else f'i{width}'}" for name, width in ENGINES]


def _engine(name: str, width: int | None):
    return get_backend(name, width=width) if name == "opencl" else get_backend(name)


def _run(benchmark, engine, states, flags, reads, params: dict) -> None:
    queries = query_batch(reads, dtype=states.dtype)
    blocks = profile_blocks(states, flags)
    task = Task("papara", PaparaScoring())
    engine.score(task, queries.subset(slice(0, 4)), blocks[:1])  # compile / build / upload
    results = benchmark.pedantic(
        lambda: engine.score(task, queries, blocks), rounds=2, iterations=1
    )
    assert len(results) == len(blocks) and results[0].scores.shape[0] == len(reads)
    cells = int(states.shape[0]) * int(states.shape[1]) * sum(len(r) for r in reads)
    benchmark.extra_info.update(
        params,
        cells=cells,
        gcups=cells / benchmark.stats.stats.min / 1e9,
        device=engine.describe(),
        scale=SCALE,
    )


@pytest.mark.parametrize(("name", "width"), ENGINES, ids=ENGINE_IDS)
@pytest.mark.parametrize("length", LENGTHS)
def test_table1(benchmark, name, width, length):
    reads = max(4, round(1_250 * SCALE))
    work = workloads.papara_kernel(320, length, reads)
    params = {"table": 1, "ref_length": length, "reads": reads, "width": width}
    _run(benchmark, _engine(name, width), work.states, work.flags, work.reads, params)


@pytest.mark.parametrize(("name", "width"), ENGINES, ids=ENGINE_IDS)
@pytest.mark.parametrize("reads", workloads.SEED_TABLE2_READS)
def test_table2(benchmark, name, width, reads):
    count = max(4, round(reads * SCALE))
    work = workloads.papara_kernel(320, 5_000, count)
    params = {"table": 2, "ref_length": 5_000, "reads": count, "width": width}
    _run(benchmark, _engine(name, width), work.states, work.flags, work.reads, params)


@pytest.mark.parametrize(("name", "width"), ENGINES, ids=ENGINE_IDS)
def test_prank_shape(benchmark, name, width):
    from dpalign.papara import dataset, profiles

    sim = workloads.prank_like(max(SCALE, 0.02))
    data = dataset.load(sim.newick, sim.msa, sim.reads)
    states, flags = profiles.dataset_profiles(data)
    reads = [np.asarray(r) for r in data.reads if len(r)]
    params = {"shape": "1604.PRANK", "edges": int(states.shape[0]), "reads": len(reads)}
    _run(benchmark, _engine(name, width), states, flags, reads, params)
