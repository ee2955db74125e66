"""The OpenCL anti-diagonal tile kernel for long pairs, on every OpenCL device (PoCL in CI).

``longpair.align_long(..., backend="opencl")`` must give exactly the oracle's alignment (tie
rules included) with tiny tiles, and the device's region fill must leave the same checkpoints
as the CPU's (:func:`dpalign.simd.antidiagonal.fill_region`).
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pairwise_cases import draw_long_pair, random_pair

from dpalign import reference
from dpalign.errors import OptionError
from dpalign.gcups import RunStats
from dpalign.kernels_cl.antidiagonal import PairOnDevice, TileShape
from dpalign.kernels_cl.context import device_context
from dpalign.longpair import Tiling, _Aligner, align_long, plan_lanes
from dpalign.scoring import Scoring, free_ends_tuple
from dpalign.simd import antidiagonal as K

SCORINGS = [
    ((1, -1), 2),
    ((2, -3), (5, 2)),
    ((5, -4), (0, 3)),
    ("NUC.4.4", (10, 1)),
    ("BLOSUM62", (11, 1)),
    ((1, 0), (1, 0)),
]


def _tiny(rng_tile, device_cells=1, leaf_bytes=None, retile=None):
    return Tiling(
        device_retile=retile,
        tile_rows=6,
        tile_cols=5,
        blocks=3,
        leaf_rows=4,
        leaf_cols=4,
        device_cells=device_cells,
        device_tile=rng_tile,
        leaf_bytes=leaf_bytes,
    )


@given(data=st.data())
def test_alignments_equal_the_oracle(cl_device, data):
    scoring, a, b = draw_long_pair(data, SCORINGS, 70)
    m, n = len(a), len(b)
    mode = data.draw(st.sampled_from(["local", "global", "semiglobal"]), label="mode")
    free = (
        data.draw(st.tuples(*[st.booleans()] * 4), label="free_ends") if mode == "global" else None
    )
    # a few compile-time shapes (each is a PoCL build), any run-time row count
    items, per_item = data.draw(st.sampled_from([(1, 1), (2, 2), (4, 1), (3, 4)]), label="cols")
    packed = data.draw(st.booleans(), label="packed 16-bit tiles")
    tile = (data.draw(st.integers(1, 9), label="tile rows"), items, per_item, packed)
    traceback = data.draw(st.booleans(), label="traceback")
    leaf_bytes = data.draw(st.sampled_from([0, None, 10**9]), label="leaf_bytes")
    # the traceback's recomputations in narrower tiles (one column per work-item)
    retile = data.draw(st.sampled_from([None, (tile[0] + 1, items, 1)]), label="retile")
    if packed and retile:  # 32-bit tiles as wide as the packed ones, or narrower packed ones
        retile = data.draw(
            st.sampled_from([(tile[0] + 1, 2 * items, 1), (tile[0] + 1, items, 1, True)]),
            label="packed retile",
        )
    ends = free_ends_tuple(mode, free)
    stats = RunStats()
    got = align_long(
        a,
        b,
        scoring,
        mode,
        free,
        traceback=traceback,
        tiling=_tiny(tile, leaf_bytes=leaf_bytes, retile=retile),
        backend="opencl",
        device=cl_device,
        stats=stats,
    )
    want = reference.pairwise_align(
        a, b, scoring.matrix, scoring.gap_open, scoring.gap_extend, mode, ends
    )
    if traceback:
        assert got == want
    else:
        assert (got.score, got.a_end, got.b_end) == (want.score, want.a_end, want.b_end)
    forward_cols = max(4, -(-n // 3)) if traceback else n  # Tiling.blocks = 3, leaves 4
    if forward_cols >= items * per_item * (1 + packed):  # the forward pass ran on the device
        (worker,) = stats.workers.values()
        assert worker.cells >= m * n


def _cpu_fill(a, b, scoring, local, lanes, top, left, th, tw, row_slot, col_slot):
    params = np.zeros(K.N_PARAMS, np.int64)
    params[[K.P_OPEN, K.P_EXTEND, K.P_LOCAL, K.P_TILE_ROWS, K.P_TILE_COLS]] = (
        scoring.gap_open,
        scoring.gap_extend,
        local,
        th,
        tw,
    )
    params[[K.P_NEG, K.P_LANES, K.P_LANE_MAX, K.P_NEG_STORE, K.P_RELATIVE]] = (
        lanes.neg,
        16,
        np.iinfo(np.int32).max,
        lanes.neg_store,
        0,
    )
    return K.fill_region(
        a,
        b,
        scoring.matrix.astype(np.int32),
        params,
        np.ascontiguousarray(top),
        np.ascontiguousarray(left),
        np.asarray(row_slot),
        np.asarray(col_slot),
        1,
    )


@pytest.mark.parametrize("prefetch", [True, False], ids=["prefetch", "plain"])
@pytest.mark.parametrize("mode", ["local", "global"])
@pytest.mark.parametrize(
    "tile", [(5, 3, 2), (1, 1, 1), (16, 8, 4), (5, 3, 2, True), (40, 2, 4, True), (7, 1, 1, True)]
)
def test_device_fill_leaves_the_cpu_checkpoints(cl_device, mode, tile, prefetch):
    """A region inside the matrix (boundaries from a CPU fill): same rows, columns, best."""
    rng = np.random.default_rng(sum(tile))
    scoring = Scoring((2, -3), (5, 2))
    a, b = random_pair(rng, 90, 77, 4, True)
    shape = TileShape(*tile)
    local = mode == "local"
    lanes = plan_lanes(scoring, len(a), len(b), mode, Tiling(lane_bits=32))
    job = _Aligner(a, b, scoring, mode, free_ends_tuple(mode), Tiling(), 1, lanes)
    whole = job.global_region()
    # the boundaries of the region rows 20.., columns 9.. from a CPU fill of the whole matrix
    rows = np.full(-(-90 // 20), -1)
    cols = np.full(-(-77 // 9), -1)
    rows[0] = cols[0] = 0
    cut = _cpu_fill(a, b, scoring, local, lanes, whole.top, whole.left, 20, 9, rows, cols)
    top, left = cut.row_store[0, :, 9:], cut.col_store[0, :, 20:]
    h, w, th = 70, 68, 7
    n_tr, n_tc = -(-h // th), -(-w // shape.cols)
    row_slot = np.where(np.arange(n_tr) % 2 == 1, np.arange(n_tr) // 2, -1)
    col_slot = np.full(n_tc, -1)
    col_slot[-1] = 0
    if n_tc > 1:
        col_slot[0] = 1
    want = _cpu_fill(
        a[20:], b[9:], scoring, local, lanes, top, left, th, shape.cols, row_slot, col_slot
    )
    pair = PairOnDevice(
        device_context(cl_device),
        a,
        b,
        scoring.matrix,
        scoring.gap_open,
        scoring.gap_extend,
        local,
        shape,
        prefetch=prefetch,
    )
    got = pair.fill_region(20, 9, top, left, row_slot, col_slot, th, lanes.neg_store)
    np.testing.assert_array_equal(got.last_row, want.last_row)
    np.testing.assert_array_equal(got.row_store, want.row_store)
    np.testing.assert_array_equal(got.col_store, want.col_store)
    assert got.best == tuple(int(x) for x in want.best)
    assert got.launches == n_tr + n_tc - 1 and pair.cells == h * w
    assert (pair.packed is not None) == shape.packed and not got.widened
    if local:
        assert got.best[0] > 0


@pytest.mark.parametrize("packed", [False, True], ids=["i32", "s16"])
@pytest.mark.parametrize("rows", [16, 8, 3])
def test_local_ties_keep_the_first_maximum_in_row_major_order(cl_device, rows, packed):
    """Equal maxima in several tiles and tile rows (the device folds them per tile row, the
    host across rows): the end cell is the oracle's, the first in row-major order. Motif m1
    ends on row 8 far right, m2 on row 16 near the left: in one tile row of 16 rows the
    later tile holds the winner (smaller i); with 8 or 3 rows per tile the earlier row."""
    rng = np.random.default_rng(5)
    # motifs of letters 0-1; filler G in a, T in b: nothing matches outside the motifs
    m1, m2 = rng.integers(0, 2, 8).astype(np.uint8), rng.integers(0, 2, 8).astype(np.uint8)
    a = np.concatenate([m1, m2, np.full(5, 2, np.uint8)])
    b = np.concatenate([np.full(3, 3), m2, np.full(30, 3), m1, np.full(9, 3)]).astype(np.uint8)
    scoring = Scoring((1, -3), (5, 2))
    want = reference.pairwise_align(a, b, scoring.matrix, 5, 2, "local", free_ends_tuple("local"))
    assert (want.score, want.a_end, want.b_end) == (8, 8, 49)  # the case this test is about
    cpu = align_long(a, b, scoring, "local", traceback=False, tiling=_tiny((rows, 2, 4)))
    assert (cpu.score, cpu.a_end, cpu.b_end) == (8, 8, 49)
    # packed: tiles of 2 x 2 x 2 columns, as wide as the 32-bit ones
    tile = (rows, 2, 2, True) if packed else (rows, 2, 4)
    for traceback in (False, True):
        got = align_long(
            a,
            b,
            scoring,
            "local",
            traceback=traceback,
            tiling=_tiny(tile),
            backend="opencl",
            device=cl_device,
        )
        assert (got.score, got.a_end, got.b_end) == (want.score, want.a_end, want.b_end)
        if traceback:
            assert got == want


@given(data=st.data())
def test_block_pruning_keeps_the_local_alignment(cl_device, data):
    """Local mode with block pruning: the oracle's alignment, ties included."""
    scoring, a, b = draw_long_pair(data, SCORINGS, 90)
    tile = (data.draw(st.integers(1, 6), label="tile rows"), 2, 2)
    traceback = data.draw(st.booleans(), label="traceback")
    got = align_long(
        a,
        b,
        scoring,
        "local",
        traceback=traceback,
        tiling=_tiny(tile),
        backend="opencl",
        device=cl_device,
        prune=True,
    )
    want = reference.pairwise_align(
        a, b, scoring.matrix, scoring.gap_open, scoring.gap_extend, "local", (False,) * 4
    )
    if traceback:
        assert got == want
    else:
        assert (got.score, got.a_end, got.b_end) == (want.score, want.a_end, want.b_end)


@pytest.mark.parametrize("prefetch", [True, False], ids=["prefetch", "plain"])
def test_block_pruning_skips_tiles_far_from_the_alignment(cl_device, prefetch):
    """A similar pair: pruning skips tiles (most of the corners) and changes nothing the
    traceback sees: same end cell as without, the oracle's alignment through its checkpoints."""
    rng = np.random.default_rng(3)
    scoring = Scoring((2, -3), (5, 2))
    a, b = random_pair(rng, 400, 380, 4, True)
    lanes = plan_lanes(scoring, len(a), len(b), "local", Tiling(lane_bits=32))
    job = _Aligner(a, b, scoring, "local", free_ends_tuple("local"), Tiling(), 1, lanes)
    whole = job.global_region()
    shape = TileShape(8, 2, 4)
    pair = PairOnDevice(
        device_context(cl_device),
        a,
        b,
        scoring.matrix,
        scoring.gap_open,
        scoring.gap_extend,
        True,
        shape,
        prefetch=prefetch,
    )
    n_tr, n_tc = -(-len(a) // 8), -(-len(b) // shape.cols)
    none_r, none_c = np.full(n_tr, -1), np.full(n_tc, -1)
    plain = pair.fill_region(0, 0, whole.top, whole.left, none_r, none_c, 8, lanes.neg_store)
    pruned = pair.fill_region(
        0, 0, whole.top, whole.left, none_r, none_c, 8, lanes.neg_store, prune=True
    )
    assert plain.pruned_tiles == 0 and pruned.pruned_tiles > n_tr * n_tc // 4
    assert pruned.best == plain.best
    want = reference.pairwise_align(a, b, scoring.matrix, 5, 2, "local", (False,) * 4)
    assert pruned.best == (want.score, want.a_end, want.b_end)
    tiling = Tiling(
        tile_rows=8, blocks=4, leaf_rows=16, leaf_cols=16, device_cells=1, device_tile=(8, 2, 4)
    )
    stats = RunStats()
    got = align_long(
        a,
        b,
        scoring,
        "local",
        tiling=tiling,
        backend="opencl",
        device=cl_device,
        prune=True,
        stats=stats,
    )
    assert got == want and any("pruning skipped" in note for note in stats.notes)
    with pytest.raises(OptionError, match="local"):
        align_long(a, b, scoring, "global", backend="opencl", device=cl_device, prune=True)


@pytest.mark.parametrize("mode", ["global", "local"])
def test_traceback_recomputes_in_narrower_tiles(cl_device, mode):
    """Tiling.device_retile: the traceback's device regions in tiles half as wide (their own
    program, the pair's buffers shared); same alignment, and those tiles did fill cells."""
    from dpalign import engine
    from dpalign.kernels_cl.backend import DeviceRegions

    rng = np.random.default_rng(12)
    scoring = Scoring((2, -3), (5, 2))
    a, b = random_pair(rng, 700, 650, 4, True)
    reshaped = []
    real = DeviceRegions.reshaped
    tiling = Tiling(
        tile_rows=16,
        blocks=4,
        leaf_rows=16,
        leaf_cols=16,
        device_cells=1 << 12,
        device_tile=(8, 4, 2),
        device_retile=(8, 4, 1),
        leaf_bytes=50_000,  # leaf-level boundaries in the recomputed blocks, not the whole
    )
    try:
        DeviceRegions.reshaped = lambda self, tile: (
            reshaped.append(real(self, tile)) or reshaped[-1]
        )
        got = align_long(a, b, scoring, mode, tiling=tiling, backend="opencl", device=cl_device)
    finally:
        DeviceRegions.reshaped = real
    want = reference.pairwise_align(a, b, scoring.matrix, 5, 2, mode, free_ends_tuple(mode))
    assert got == want
    (narrow,) = reshaped
    assert narrow.tile_cols == 4 and narrow.cells > 0 and engine is not None
    with pytest.raises(OptionError, match="wider"):
        narrow.reshaped((8, 4, 4))


def test_page_locked_stores_pass_from_pair_torandom_pair(cl_device):
    """The leaf-level fills' staging buffers (the block traced and the block filled ahead)
    go back to their context's pool when a pair is done, and the next pair takes the same
    ones (pinning is slow); results stay exact."""
    from dpalign.kernels_cl import antidiagonal as AD

    rng = np.random.default_rng(21)
    scoring = Scoring((2, -3), (5, 2))
    tiling = Tiling(
        tile_rows=16,
        blocks=4,
        leaf_rows=16,
        leaf_cols=16,
        device_cells=1 << 10,
        device_tile=(8, 4, 2),
        leaf_bytes=30_000,  # leaf-level boundaries in the recomputed blocks only
        staging_band=0,  # every checkpoint, into page-locked memory
    )
    kept = []
    gc.collect()  # pairs of earlier tests held in cycles: their buffers go to the pool now
    for _ in range(2):
        a, b = random_pair(rng, 500, 480, 4, True)
        got = align_long(a, b, scoring, "local", tiling=tiling, backend="opencl", device=cl_device)
        gc.collect()
        want = reference.pairwise_align(a, b, scoring.matrix, 5, 2, "local", (False,) * 4)
        assert got == want
        ptr = device_context(cl_device).context.int_ptr
        kept.append([AD._STAGING[ptr, slot][0] for slot in (0, 1)])
    assert kept[0][0] is kept[1][0] and kept[0][1] is kept[1][1]


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_blocks_filled_ahead_of_the_traceback_change_nothing(cl_device, data):
    """Tiling.fill_ahead: the device fills the next blocks along the diagonal, in full, into
    other staging slots (more than one: on queues of their own), while the CPU traces; the
    alignment equals the oracle's and the one without filling ahead, whether the path
    enters those blocks or not (similar pairs: near the diagonal; unrelated ones: anywhere)."""
    scoring, a, b = draw_long_pair(data, SCORINGS, 400)
    mode = data.draw(st.sampled_from(["local", "global", "semiglobal"]), label="mode")
    packed = data.draw(st.booleans(), label="packed 16-bit tiles")
    tile = (data.draw(st.integers(3, 9), label="tile rows"), 2, 2, packed)
    blocks = data.draw(st.integers(2, 5), label="blocks")
    leaf = data.draw(st.sampled_from([4, 8, 16]), label="leaf")
    depth = data.draw(st.integers(1, 3), label="blocks filled ahead")
    traced = data.draw(st.integers(0, 3), label="segments traced ahead")
    band = data.draw(st.sampled_from([0.0, 1e-9, 1 / 16]), label="staging band")
    runs = []
    for ahead in (depth, 0):
        tiling = Tiling(
            tile_rows=16,
            blocks=blocks,
            leaf_rows=leaf,
            leaf_cols=leaf,
            device_cells=1 << 6,
            device_tile=tile,
            # leaf-level boundaries in the recomputed blocks, not in the whole matrix
            leaf_bytes=8 * (len(a) + len(b)) * max(len(a), len(b)) // (leaf * blocks),
            fill_ahead=ahead,
            trace_ahead=traced,
            staging_band=band if ahead else 0,
        )
        stats = RunStats()
        args = dict(tiling=tiling, backend="opencl", device=cl_device, stats=stats)
        runs.append((align_long(a, b, scoring, mode, **args), stats.notes))
    want = reference.pairwise_align(
        a, b, scoring.matrix, scoring.gap_open, scoring.gap_extend, mode, free_ends_tuple(mode)
    )
    assert runs[0][0] == runs[1][0] == want
    assert all("traceback: 0 blocks filled ahead" in note for note in runs[1][1])


def _similar_pair_in_tiny_tiles(**tiling):
    """The traceback tests' set-up: a similar 600 x 620 pair, scores (2, -3), gaps (5, 2),
    and tiny device tiles (six blocks, leaves of 16 x 16, leaf_bytes 60,000) with
    ``tiling``'s further settings."""
    rng = np.random.default_rng(5)
    a, b = random_pair(rng, 600, 620, 4, True)
    tiles = Tiling(
        tile_rows=16,
        blocks=6,
        leaf_rows=16,
        leaf_cols=16,
        device_cells=1 << 10,
        device_tile=(8, 4, 2),
        leaf_bytes=60_000,
        **tiling,
    )
    return a, b, Scoring((2, -3), (5, 2)), tiles


@pytest.mark.parametrize("ahead", [1, 2])
@pytest.mark.parametrize("mode", ["global", "local"])
def test_the_traceback_uses_blocks_filled_ahead(cl_device, mode, ahead):
    """A similar pair's path runs near the diagonal: the blocks filled ahead are traced."""
    a, b, scoring, tiling = _similar_pair_in_tiny_tiles(fill_ahead=ahead)
    stats = RunStats()
    got = align_long(
        a, b, scoring, mode, tiling=tiling, backend="opencl", device=cl_device, stats=stats
    )
    assert got == reference.pairwise_align(a, b, scoring.matrix, 5, 2, mode, free_ends_tuple(mode))
    (note,) = [note for note in stats.notes if "ahead" in note]
    counts = note.split(";")[0].split()
    filled, used, met, misses = (int(word.strip(",")) for word in counts if word[0].isdigit())
    assert filled >= 4 and used == filled and met >= used - 1, note
    assert misses <= 1, note  # the bands copied hold the path of a similar pair


@pytest.mark.parametrize("similar", [False, True])
def test_paths_that_leave_the_copied_band_are_traced_again_in_full(cl_device, similar):
    """Tiling.staging_band: a leaf-level fill copies only a band of leaves around the path's
    likely course (through small page-locked staging into pageable memory). With the narrowest band
    (two leaves), paths leave it (unrelated pairs: most blocks; similar ones: some); each
    such block's checkpoints are fetched in full and traced again: the oracle's alignment,
    in every mode."""
    rng = np.random.default_rng(7)
    scoring = Scoring((2, -3), (5, 2))
    a, b = random_pair(rng, 700, 900, 4, similar)
    misses = 0
    for mode in ("global", "local", "semiglobal"):
        tiling = Tiling(
            tile_rows=16,
            blocks=3,
            leaf_rows=8,
            leaf_cols=8,
            device_cells=1 << 10,
            device_tile=(8, 4, 2),
            leaf_bytes=(len(a) + len(b)) * max(len(a), len(b)) // 3,
            staging_band=1e-9,
        )
        stats = RunStats()
        got = align_long(
            a, b, scoring, mode, tiling=tiling, backend="opencl", device=cl_device, stats=stats
        )
        want = reference.pairwise_align(
            a, b, scoring.matrix, 5, 2, mode, free_ends_tuple(mode)
        )  # fmt: skip
        assert got == want
        (note,) = [note for note in stats.notes if "band misses" in note]
        misses += int(note.split(" band misses")[0].split()[-1])
    assert misses > 0  # the fall-back ran


def test_staging_is_pinned_while_the_forward_pass_runs(cl_device, monkeypatch):
    """The forward pass loads the walk's compiled traces and reserves page-locked memory (on
    the copy queue, after its launches) for every slot of the traceback's leaf-level fills,
    each large enough: none of those fills pins memory."""
    from dpalign.kernels_cl import antidiagonal as AD

    ptr = device_context(cl_device).context.int_ptr
    ahead = Tiling().fill_ahead  # the walk's slots 0 .. ahead
    for slot in range(ahead + 1):  # an empty pool: what a new process starts with
        monkeypatch.delitem(AD._STAGING, (ptr, slot), raising=False)
    calls, real = [], AD.PairOnDevice._host_staging

    def spy(self, nbytes, slot=0, queue=None):
        pinned = {k: v[1].nbytes for k, v in self._staging.items()}
        calls.append((nbytes, slot, queue is not None, pinned.get(slot, 0)))
        return real(self, nbytes, slot, queue)

    monkeypatch.setattr(AD.PairOnDevice, "_host_staging", spy)
    from dpalign import longpair

    events, warm, walk = [], longpair._Aligner._warm_traces, longpair._Aligner.walk

    def warm_spy(self):
        events.append("warm traces")
        return warm(self)

    def walk_spy(self, *args, **kwargs):
        if "walk" not in events:
            events.append("walk")
        return walk(self, *args, **kwargs)

    monkeypatch.setattr(longpair._Aligner, "_warm_traces", warm_spy)
    monkeypatch.setattr(longpair._Aligner, "walk", walk_spy)
    # staging_band=0: every checkpoint, into page-locked memory
    a, b, scoring, tiling = _similar_pair_in_tiny_tiles(staging_band=0)
    got = align_long(a, b, scoring, "global", tiling=tiling, backend="opencl", device=cl_device)
    assert got == reference.pairwise_align(a, b, scoring.matrix, 5, 2, "global", (False,) * 4)
    reserved = [c for c in calls if c[2]]
    assert [c[1] for c in reserved] == list(range(ahead + 1))
    assert events == ["warm traces", "walk"]  # loaded while the forward pass ran
    later = [c for c in calls if not c[2]]
    assert later and all(nbytes <= pinned for nbytes, _, _, pinned in later)


@pytest.mark.parametrize("mode", ["global", "local"])
def test_packed_tiles_that_cannot_fit_16_bits_are_filled_again_wider(cl_device, mode):
    """Matches of 700 over tiles of 40 rows: 28,000 above the boundary's largest H, and the
    boundary of a tile on the alignment spans about as much: more than a 16-bit lane holds,
    which only the data tell. The device says so (never a wrapped value) and the region is
    filled again in 32-bit lanes: the oracle's alignment; smaller scores stay packed."""
    rng = np.random.default_rng(4)
    a, b = random_pair(rng, 300, 280, 4, True)
    shape = TileShape(40, 2, 4, True)
    for sub, widened in (((700, -700), True), ((2, -3), False)):
        scoring = Scoring(sub, (10, 5))
        lanes = plan_lanes(scoring, len(a), len(b), mode, Tiling(lane_bits=32))
        job = _Aligner(a, b, scoring, mode, free_ends_tuple(mode), Tiling(), 1, lanes)
        whole = job.global_region()
        pair = PairOnDevice(
            device_context(cl_device), a, b, scoring.matrix, 10, 5, mode == "local", shape
        )
        n_tr, n_tc = -(-len(a) // 40), -(-len(b) // shape.cols)
        none_r, none_c = np.full(n_tr, -1), np.full(n_tc, -1)
        got = pair.fill_region(0, 0, whole.top, whole.left, none_r, none_c, 40, lanes.neg_store)
        assert pair.packed is not None and got.widened == widened
        want = reference.pairwise_align(a, b, scoring.matrix, 10, 5, mode, free_ends_tuple(mode))
        if mode == "local":
            assert got.best == (want.score, want.a_end, want.b_end)
        else:
            assert got.last_row[0, -1] == want.score
        tiling = Tiling(device_cells=1, device_tile=(40, 2, 4, True), blocks=4)
        full = align_long(a, b, scoring, mode, tiling=tiling, backend="opencl", device=cl_device)
        assert full == want
    # taller tiles than the packed kernel's local memory holds: the same tiles in 32 bits
    tall = pair.packed_defines["MAXTR"] + 1
    none_r = np.full(-(-len(a) // tall), -1)
    got = pair.fill_region(0, 0, whole.top, whole.left, none_r, none_c, tall, lanes.neg_store)
    if mode == "local":
        assert got.best == (want.score, want.a_end, want.b_end) and not got.widened
    else:
        assert got.last_row[0, -1] == want.score and not got.widened


def test_length_one_and_narrow_pairs(cl_device):
    scoring = Scoring((1, -1), (2, 1))
    rng = np.random.default_rng(2)
    for m, n in ((1, 1), (1, 40), (40, 1), (2, 33)):
        a, b = random_pair(rng, m, n, 4, False)
        for mode in ("local", "global", "semiglobal"):
            ends = free_ends_tuple(mode)
            got = align_long(
                a, b, scoring, mode, tiling=_tiny((3, 4, 2)), backend="opencl", device=cl_device
            )
            want = reference.pairwise_align(a, b, scoring.matrix, 2, 1, mode, ends)
            assert got == want


def test_pairs_beyond_32_bits_stay_on_the_cpu(cl_device):
    scoring = Scoring((10**9, -1), 1)
    a = np.zeros(5, np.uint8)
    stats = RunStats()
    got = align_long(
        a,
        a,
        scoring,
        "local",
        tiling=_tiny((2, 2, 2)),
        backend="opencl",
        device=cl_device,
        stats=stats,
    )
    assert got.score == 5 * 10**9 and not stats.workers


def test_scores_too_large_for_any_tile_do_not_pack(cl_device):
    """A score of 1000 per match over 40 rows cannot fit any tile's 16-bit lanes: the pair
    is not packed at all (32-bit tiles of the same width), rather than filled twice."""
    rng = np.random.default_rng(6)
    a, b = random_pair(rng, 50, 40, 4, True)
    scoring = Scoring((1000, -1000), (10, 5))
    shape = TileShape(40, 2, 4, True)
    pair = PairOnDevice(device_context(cl_device), a, b, scoring.matrix, 10, 5, True, shape)
    assert pair.packed is None and pair.shape == shape.wide


def test_default_tiles_are_packed_where_the_device_has_packed_ptx():
    """Hopper GPUs take packed 16-bit tiles (their traceback recomputes in 32-bit ones, see
    ``OpenCLBackend.region_filler``); other GPUs 32-bit tiles; CPU devices small ones."""
    from types import SimpleNamespace

    from dpalign.kernels_cl import antidiagonal as AD

    def caps(cpu, ptx):
        return SimpleNamespace(is_cpu=cpu, ptx_s16x2=ptx)

    assert AD.default_tile(caps(False, True)) == AD.GPU_TILE_PACKED
    assert AD.GPU_TILE_PACKED.packed and AD.GPU_TILE_PACKED.cols == 2 * AD.GPU_TILE.cols
    assert AD.default_tile(caps(False, False)) == AD.GPU_TILE
    assert AD.default_tile(caps(True, False)) == AD.CPU_TILE


def test_backend_option_is_checked():
    with pytest.raises(OptionError, match="'cpu' or a backend"):
        align_long("ACGT", "ACGT", Scoring(), backend="gpu")
    with pytest.raises(OptionError, match="positive"):
        TileShape(0, 1, 1)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["local", "global", "semiglobal"])
def test_longer_pair_with_default_device_tiles(cl_device, mode):
    rng = np.random.default_rng(7)
    scoring = Scoring("NUC.4.4", (10, 1))
    a, b = random_pair(rng, 3000, 2800, 4, True)
    tiling = Tiling(device_cells=1 << 16)
    want = align_long(a, b, scoring, mode, tiling=tiling)
    stats = RunStats()
    got = align_long(
        a, b, scoring, mode, tiling=tiling, backend="opencl", device=cl_device, stats=stats
    )
    assert got == want and stats.workers


@pytest.mark.gpu
def test_gpu_shuffle_tiles_equal_the_cpu(cl_device):
    rng = np.random.default_rng(8)
    scoring = Scoring("NUC.4.4", (10, 1))
    a, b = random_pair(rng, 5000, 4700, 4, True)
    tiling = Tiling(device_cells=1 << 16)
    for mode in ("local", "global"):
        want = align_long(a, b, scoring, mode, tiling=tiling)
        got = align_long(a, b, scoring, mode, tiling=tiling, backend="opencl", device=cl_device)
        assert got == want


@pytest.mark.parametrize("mode", ["global", "local", "semiglobal"])
def test_align_and_the_cli_take_the_device_path(cl_device, mode, monkeypatch, tmp_path, capsys):
    """``dpalign.align(backend="opencl")`` and ``dpalign align --backend opencl`` run the
    pair on the device (tiles forced tiny so it does) and give the oracle's alignment."""
    import functools

    from dpalign import align, engine, longpair
    from dpalign.cli import main

    rng = np.random.default_rng(31)
    a = "".join(rng.choice(list("ACGT"), 57))
    b = a[5:30] + "".join(rng.choice(list("ACGT"), 9)) + a[33:]
    monkeypatch.setattr(longpair, "Tiling", functools.partial(_tiny, (3, 4, 2)))
    used = []
    real = engine.device_regions
    monkeypatch.setattr(engine, "device_regions", lambda *args: used.append(1) or real(*args))
    got = align(a, b, mode, (2, -3), (5, 2), backend="opencl", device=cl_device)
    want = align(a, b, mode, (2, -3), (5, 2), backend="reference")
    assert used and got.backend == "opencl (long pair)"
    assert (got.score, got.cigar, got.a_start, got.b_start) == (
        want.score,
        want.cigar,
        want.a_start,
        want.b_start,
    )
    fa, fb = tmp_path / "a.fa", tmp_path / "b.fa"
    fa.write_text(f">a\n{a}\n")
    fb.write_text(f">b\n{b}\n")
    argv = ["align", str(fa), str(fb), "--mode", mode, "--match", "2", "--mismatch", "-3"]
    argv += ["--gap-open", "5", "--gap-extend", "2", "--format", "cigar"]
    assert main([*argv, "--backend", "opencl", "--device", cl_device or "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.split("\t")[2] == str(want.score) and out.split("\t")[-1].strip() == want.cigar
    assert main([*argv, "--device", "cpu"]) == 1
    assert "--device applies to --backend opencl" in capsys.readouterr().err


@pytest.mark.parametrize("scoring", [Scoring("NUC.4.4", (10, 1)), Scoring("BLOSUM62", (11, 1))])
def test_profiles_built_on_the_device_equal_numpy(cl_device, scoring):
    """The 32-bit and packed profiles that antidiagonal_profile.cl builds from b's codes:
    every word as the numpy construction gives it (negative scores wrap into 16 bits)."""
    import pyopencl as cl

    rng = np.random.default_rng(8)
    letters = 20 if scoring.matrix.shape[0] > 16 else 4
    a, b = random_pair(rng, 90, 77, letters, False)
    a[:letters] = np.arange(letters)  # every residue: the packed rows are dense
    shape = TileShape(8, 2, 4, True)
    pair = PairOnDevice(device_context(cl_device), a, b, scoring.matrix, 11, 1, False, shape)
    scores = np.asarray(scoring.matrix, np.int64)[:letters] + 12
    queue = pair.dctx.queue

    def read(buf, rows, stride, dtype):
        out = np.empty((rows, stride), dtype)
        cl.enqueue_copy(queue, out, buf)
        return out

    wide = read(pair._wide_buffers()[1], letters, pair.stride, np.int32)
    want = np.zeros_like(wide)
    want[:, : len(b)] = scores[:, b]
    assert (wide == want).all()
    _, prof, count, stride = pair.packed
    assert count == letters
    half = shape.items * shape.per_item
    one = np.zeros((letters, stride + half), np.uint32)
    one[:, : len(b)] = scores[:, b].astype(np.int16).view(np.uint16)
    want = (one[:, None, :stride] | (one[None, :, half : half + stride] << 16)).reshape(-1, stride)
    assert (read(prof, letters * letters, stride, np.uint32) == want).all()


def test_the_walk_shortens_the_switch_interval_and_restores_it(cl_device, monkeypatch):
    """Tiling.switch_interval: set while a walk fills ahead, the one before restored after
    (also when the walk fails); None leaves it alone."""
    import sys

    from dpalign import longpair

    seen, real = [], longpair._Aligner.walk

    def spy(self, *args, **kwargs):
        seen.append(sys.getswitchinterval())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(longpair._Aligner, "walk", spy)
    rng = np.random.default_rng(5)
    scoring = Scoring((2, -3), (5, 2))
    a, b = random_pair(rng, 300, 310, 4, True)
    before = sys.getswitchinterval()
    for interval, want in ((1e-4, 1e-4), (None, before)):
        tiling = Tiling(
            tile_rows=16,
            blocks=4,
            leaf_rows=16,
            leaf_cols=16,
            device_cells=1 << 10,
            device_tile=(8, 4, 2),
            leaf_bytes=20_000,
            switch_interval=interval,
        )
        seen.clear()
        align_long(a, b, scoring, "global", tiling=tiling, backend="opencl", device=cl_device)
        assert seen and seen[0] == pytest.approx(want)
        assert sys.getswitchinterval() == pytest.approx(before)
    monkeypatch.setattr(longpair._Aligner, "walk", lambda *args: 1 / 0)
    failing = Tiling(device_cells=1 << 10, device_tile=(8, 4, 2), blocks=4, leaf_bytes=20_000)
    with pytest.raises(ZeroDivisionError):
        align_long(a, b, scoring, "global", tiling=failing, backend="opencl", device=cl_device)
    assert sys.getswitchinterval() == pytest.approx(before)
