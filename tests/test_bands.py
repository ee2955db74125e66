"""Column bands in a wavefront pipeline (:mod:`dpalign.bands`): one long pair split across
several fillers (CPU fillers, two queues of the PoCL device, a local Dask cluster) must give
exactly one filler's result: the same checkpoints, local best cell and alignment.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pairwise_cases import random_pair

from dpalign import engine, reference
from dpalign.bands import Bands, CountingFiller, PieceFiller, _relabel
from dpalign.errors import OptionError
from dpalign.longpair import Tiling, _Aligner, align_long, expected_cells, plan_lanes
from dpalign.scoring import Scoring, free_ends_tuple

SCORINGS = [
    ((1, -1), 2),
    ((2, -3), (5, 2)),
    ((5, -4), (0, 3)),
    ("NUC.4.4", (10, 1)),
    ("BLOSUM62", (11, 1)),
]
TINY = Tiling(tile_rows=4, tile_cols=3, blocks=3, leaf_rows=4, leaf_cols=4, parallel_cells=1)


@st.composite
def problems(draw, max_len=80):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    sub, gap = draw(st.sampled_from(SCORINGS), label="scoring")
    scoring = Scoring(sub, gap)
    m = draw(st.integers(1, max_len), label="m")
    n = draw(st.integers(1, max_len), label="n")
    a, b = random_pair(rng, m, n, 20 if sub == "BLOSUM62" else 4, draw(st.booleans()))
    mode = draw(st.sampled_from(["local", "global", "semiglobal"]), label="mode")
    free = draw(st.tuples(*[st.booleans()] * 4), label="free") if mode == "global" else None
    return scoring, a, b, mode, free


def _oracle(a, b, scoring, mode, free):
    ends = free_ends_tuple(mode, free)
    return reference.pairwise_align(
        a, b, scoring.matrix, scoring.gap_open, scoring.gap_extend, mode, ends
    )


@settings(max_examples=60, deadline=None)
@given(
    problem=problems(),
    k=st.integers(1, 5),
    chunk=st.integers(1, 30),
    traceback=st.booleans(),
)
def test_cpu_bands_equal_the_oracle(problem, k, chunk, traceback):
    scoring, a, b, mode, free = problem
    cells = []
    got = align_long(
        a,
        b,
        scoring,
        mode,
        free,
        traceback=traceback,
        tiling=TINY,
        bands=Bands(cpu=k, chunk_rows=chunk, min_cells=1),
        progress=cells.append,
    )
    want = _oracle(a, b, scoring, mode, free)
    if traceback:
        assert got == want
    else:
        assert (got.score, got.a_end, got.b_end) == (want.score, want.a_end, want.b_end)
        assert sum(cells) == len(a) * len(b)  # every cell reported once
    assert all(c > 0 for c in cells)


@settings(max_examples=40, deadline=None)
@given(
    problem=problems(),
    k=st.integers(1, 4),
    chunk=st.integers(1, 20),
    data=st.data(),
)
def test_piece_fill_leaves_the_same_checkpoints(problem, k, chunk, data):
    """The banded fill of a region equals the plain fill: last row, every checkpoint row and
    column (the corner values included), the local best cell."""
    scoring, a, b, mode, free = problem
    tiling = Tiling(tile_rows=data.draw(st.integers(1, 7)), tile_cols=data.draw(st.integers(1, 7)))
    lanes = plan_lanes(scoring, len(a), len(b), mode, tiling)
    ends = free_ends_tuple(mode, free)
    job = _Aligner(a, b, scoring, mode, ends, tiling, 1, lanes)
    region = job.global_region()
    th, tw = tiling.tile_rows, tiling.tile_cols
    n_rows, n_cols = -(-len(a) // th), -(-len(b) // tw)
    rows = data.draw(st.lists(st.booleans(), min_size=n_rows, max_size=n_rows))
    cols = data.draw(st.lists(st.booleans(), min_size=n_cols, max_size=n_cols))
    row_slot = np.where(rows, np.cumsum(rows) - 1, -1).astype(np.int64)
    col_slot = np.where(cols, np.cumsum(cols) - 1, -1).astype(np.int64)
    args = (region.top, region.left, row_slot, col_slot, th, tw)
    plain = job.cpu.fill_region(0, 0, *args, 1)
    pieces = data.draw(st.one_of(st.none(), st.integers(1, 12)), label="pieces")
    if pieces is None:
        filler = PieceFiller([job.cpu.fill_region] * k, chunk_rows=chunk, threads=1)
    else:  # one filler, the grid chosen for about `pieces` pieces
        least = data.draw(st.integers(1, 3), label="min_chunk_tiles")
        filler = PieceFiller([job.cpu.fill_region], pieces=pieces, min_chunk_tiles=least)
    banded = filler.fill_region(0, 0, *args, data.draw(st.integers(1, 2), label="threads"))
    np.testing.assert_array_equal(banded.last_row, plain.last_row)
    np.testing.assert_array_equal(banded.row_store, plain.row_store)
    np.testing.assert_array_equal(banded.col_store, plain.col_store)
    assert tuple(banded.best) == tuple(int(x) for x in plain.best)


def test_relabel_keeps_the_border_last():
    local, globals_ = _relabel(np.array([-1, 4, -1, -1]), keep_last=True)
    assert local.tolist() == [-1, 0, -1, 1] and globals_ == [4]
    local, globals_ = _relabel(np.array([2, -1, 3]), keep_last=True)
    assert local.tolist() == [0, -1, 1] and globals_ == [2, 3]
    local, globals_ = _relabel(np.array([-1, -1]), keep_last=False)
    assert local.tolist() == [-1, -1] and globals_ == []


def test_a_failing_band_raises_and_does_not_hang():
    scoring = Scoring((1, -1), 2)
    rng = np.random.default_rng(3)
    a, b = random_pair(rng, 60, 60, 4, True)
    lanes = plan_lanes(scoring, 60, 60, "global", TINY)
    job = _Aligner(a, b, scoring, "global", (False,) * 4, TINY, 1, lanes)
    region = job.global_region()
    calls = []

    def broken(*args):
        calls.append(1)
        if len(calls) > 3:
            raise RuntimeError("device lost")
        return job.cpu.fill_region(*args)

    filler = PieceFiller([job.cpu.fill_region, broken, job.cpu.fill_region], chunk_rows=4)
    slots = np.full(15, -1, np.int64)
    with pytest.raises(RuntimeError, match="device lost"):
        filler.fill_region(0, 0, region.top, region.left, slots, np.full(20, -1), 4, 3, 1)


def test_progress_counts_forward_and_traceback_cells():
    scoring = Scoring((1, -1), 2)
    a, b = random_pair(np.random.default_rng(5), 300, 280, 4, True)
    cells = []
    got = align_long(a, b, scoring, "local", tiling=TINY, progress=cells.append)
    assert got == _oracle(a, b, scoring, "local", None)
    forward = 300 * 280
    assert sum(cells) > forward
    # the estimate is of the right size (it only drives a progress bar)
    assert 0.5 < expected_cells(300, 280, True, TINY) / sum(cells) < 2


def test_one_filler_cuts_wide_regions_into_column_pieces():
    scoring = Scoring((1, -1), 2)
    a, b = random_pair(np.random.default_rng(7), 12, 400, 4, True)
    lanes = plan_lanes(scoring, 12, 400, "local", TINY)
    job = _Aligner(a, b, scoring, "local", (False,) * 4, TINY, 1, lanes)
    region = job.global_region()
    cells = []
    filler = PieceFiller([job.cpu.fill_region], pieces=10, min_chunk_tiles=8, progress=cells.append)
    args = (region.top, region.left, np.full(3, -1), np.full(134, -1), 4, 3, 1)
    got = filler.fill_region(0, 0, *args)
    want = job.cpu.fill_region(0, 0, *args)
    assert len(cells) == 10 and sum(cells) == 12 * 400  # 3 tile rows: column pieces only
    np.testing.assert_array_equal(got.last_row, want.last_row)
    assert tuple(got.best) == tuple(int(x) for x in want.best)


def test_counting_filler_reports_each_region():
    scoring = Scoring((1, -1), 2)
    a, b = random_pair(np.random.default_rng(6), 20, 30, 4, False)
    lanes = plan_lanes(scoring, 20, 30, "global", TINY)
    job = _Aligner(a, b, scoring, "global", (False,) * 4, TINY, 1, lanes)
    region = job.global_region()
    cells = []
    counting = CountingFiller(job.cpu, cells.append)
    counting.fill_region(0, 0, region.top, region.left, np.full(5, -1), np.full(10, -1), 4, 3, 1)
    assert cells == [600]


def test_a_failing_band_process_is_reported(cl_device):
    from dpalign.bands import ProcessFiller
    from dpalign.kernels_cl.backend import OpenCLBackend

    scoring = Scoring((1, -1), 2)
    a = scoring.encode("ACGT" * 10)
    filler = ProcessFiller(OpenCLBackend(device="no such device"), (a, a, scoring, True, -9, None))
    try:
        with pytest.raises(OptionError, match="band's device process failed"):
            filler.ready()
    finally:
        filler.close()


def test_bands_refuse_bad_plans():
    with pytest.raises(OptionError, match="cluster_device"):
        Bands(cluster_device=("opencl", {}))
    with pytest.raises(OptionError, match="cpu"):
        Bands(cpu=-1)
    with pytest.raises(OptionError, match="chunk_rows"):
        Bands(chunk_rows=0)
    with pytest.raises(OptionError, match="one of them"):
        Bands(cpu=2, devices=["opencl", "opencl"])
    assert not Bands(cpu=1).active and Bands(cpu=2).active


# --------------------------------------------------------------------------------------------
# Two queues of one OpenCL device (PoCL in CI), and a local Dask cluster
# --------------------------------------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(problem=problems(max_len=60), chunk=st.integers(1, 20), traceback=st.booleans())
def test_two_device_queues_equal_the_oracle(cl_device, problem, chunk, traceback):
    from dpalign.kernels_cl.backend import OpenCLBackend

    scoring, a, b, mode, free = problem
    devices = [OpenCLBackend(device=cl_device), OpenCLBackend(device=cl_device, stream=1)]
    tiling = Tiling(
        tile_rows=6, tile_cols=5, blocks=3, leaf_rows=4, leaf_cols=4, device_cells=1,
        device_tile=(3, 2, 2),
    )  # fmt: skip
    got = align_long(
        a,
        b,
        scoring,
        mode,
        free,
        traceback=traceback,
        tiling=tiling,
        bands=Bands(devices=devices, chunk_rows=chunk, min_cells=1, processes=False),
    )
    want = _oracle(a, b, scoring, mode, free)
    if traceback:
        assert got == want
    else:
        assert (got.score, got.a_end, got.b_end) == (want.score, want.a_end, want.b_end)


@pytest.fixture(scope="module")
def dask_backend():
    pytest.importorskip("distributed")
    backend = engine.get_backend("dask", workers=2)
    yield backend
    backend.close()


@pytest.mark.parametrize("mode", ["local", "global", "semiglobal"])
def test_dask_bands_equal_the_oracle(dask_backend, mode):
    rng = np.random.default_rng(11)
    for sub, gap in SCORINGS[:3]:
        scoring = Scoring(sub, gap)
        a, b = random_pair(rng, 150, 170, 4, True)
        got = align_long(
            a,
            b,
            scoring,
            mode,
            tiling=TINY,
            bands=Bands(cluster=dask_backend, chunk_rows=20, min_cells=1),
        )
        assert got == _oracle(a, b, scoring, mode, None)


@pytest.mark.parametrize("processes", [True, False])
def test_both_device_queues_do_work(cl_device, processes):
    """Threads, or the second band in a process of its own (a spawned one, on PoCL here)."""
    from dpalign.gcups import RunStats
    from dpalign.kernels_cl.backend import OpenCLBackend

    scoring = Scoring((2, -3), (5, 2))
    a, b = random_pair(np.random.default_rng(9), 70, 80, 4, True)
    devices = [OpenCLBackend(device=cl_device), OpenCLBackend(device=cl_device, stream=1)]
    tiling = Tiling(tile_rows=6, tile_cols=5, device_cells=1, device_tile=(3, 2, 2))
    stats = RunStats()
    got = align_long(
        a, b, scoring, "local", tiling=tiling, stats=stats,
        bands=Bands(devices=devices, chunk_rows=9, min_cells=1, processes=processes),
    )  # fmt: skip
    assert got == _oracle(a, b, scoring, "local", None)
    accounts = list(stats.workers.values())
    assert len(accounts) == 2 and all(w.cells > 0 for w in accounts)
    assert sum(w.cells for w in accounts) >= 70 * 80


def test_dask_workers_hold_the_pair_on_their_devices(dask_backend, cl_device):
    from dpalign.gcups import RunStats

    scoring = Scoring((2, -3), (5, 2))
    a, b = random_pair(np.random.default_rng(12), 90, 100, 4, True)
    tiling = Tiling(tile_rows=6, tile_cols=5, blocks=3, leaf_rows=4, leaf_cols=4, device_cells=1,
                    device_tile=(3, 2, 2))  # fmt: skip
    bands = Bands(
        cluster=dask_backend,
        cluster_device=("opencl", {"device": cl_device}),
        chunk_rows=12,
        min_cells=1,
    )
    for mode in ("local", "global"):
        stats = RunStats()
        got = align_long(a, b, scoring, mode, tiling=tiling, bands=bands, stats=stats)
        assert got == _oracle(a, b, scoring, mode, None)
        assert len(stats.workers) == 2  # both workers' devices filled


@pytest.mark.parametrize("mode", ["global", "local", "semiglobal"])
def test_score_pair_takes_the_forward_pass_only_with_bands_and_halves(mode):
    """``pairwise.score_pair`` (``dpalign align --score-only``): a long pair's score and end
    cell from the forward pass alone, here in two CPU bands (a global pair as two halves
    joined in the middle), equal to the traced alignment's."""
    from dpalign.bands import Bands
    from dpalign.pairwise import align, score_pair

    rng = np.random.default_rng(11)
    b = "".join(rng.choice(list("ACGT"), 900))
    a = b[50:800] + "".join(rng.choice(list("ACGT"), 40))
    got = score_pair(a, b, mode, bands=Bands(cpu=2, halves=True), backend="numba")
    want = align(a, b, mode, backend="numba")
    assert (got.score, got.a_end, got.b_end) == (want.score, want.a_end, want.b_end)
    assert got.strand is None and "long pair" in got.backend
