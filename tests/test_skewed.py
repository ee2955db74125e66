"""Skewed row bands across devices (:mod:`dpalign.kernels_cl.skewed`): one region filled by
several devices (here queues of the PoCL device, in one context or with the host waiting)
must leave exactly one device's checkpoints, last row and local best cell; whole alignments
through ``Bands(skewed=True)`` must equal the oracle.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pairwise_cases import random_pair

from dpalign import reference
from dpalign.bands import Bands
from dpalign.errors import OptionError
from dpalign.longpair import Tiling, _Aligner, align_long, plan_lanes
from dpalign.scoring import Scoring, free_ends_tuple

SCORINGS = [((2, -3), (5, 2)), ((1, -1), 2), ((5, -4), (0, 3)), ("BLOSUM62", (11, 1))]
TILES = [(4, 2, 2), (3, 1, 1), (5, 2, 2, True), (2, 1, 2, True), (7, 1, 1)]


def _contexts(cl_device, n):
    from dpalign.kernels_cl.context import shared_contexts

    return shared_contexts([cl_device] * n)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_skewed_bands_leave_one_devices_fill(cl_device, data):
    """Any band height, lag, batch, window and device count (2-3), devices waiting on the
    device or the host waiting: the same last row, checkpoints and local best."""
    from dpalign.kernels_cl.antidiagonal import PairOnDevice, TileShape
    from dpalign.kernels_cl.skewed import SkewedFill

    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    sub, gap = data.draw(st.sampled_from(SCORINGS), label="scoring")
    scoring = Scoring(sub, gap)
    mode = data.draw(st.sampled_from(["local", "global"]), label="mode")
    tile = data.draw(st.sampled_from(TILES), label="tile")
    m = data.draw(st.integers(1, 70), label="m")
    n = data.draw(st.integers(1, 60), label="n")
    ndev = data.draw(st.integers(2, 3), label="devices")
    options = dict(
        band_tiles=data.draw(st.integers(1, 6), label="band_tiles"),
        lag=data.draw(st.integers(0, 4), label="lag"),
        batch=data.draw(st.integers(1, 5), label="batch"),
        window=data.draw(st.integers(1, 40), label="window"),
        device_waits=data.draw(st.booleans(), label="device_waits"),
        copy_queues=data.draw(st.booleans(), label="copy_queues"),
        balance=data.draw(st.booleans(), label="balance"),
        tall=data.draw(st.integers(1, 3), label="tall"),
    )
    if data.draw(st.booleans(), label="plan's own bands"):
        del options["band_tiles"]
    rng = np.random.default_rng(seed)
    a, b = random_pair(rng, m, n, 20 if sub == "BLOSUM62" else 4, True)
    shape = TileShape(*tile)
    lanes = plan_lanes(scoring, m, n, mode, Tiling(lane_bits=32))
    job = _Aligner(a, b, scoring, mode, free_ends_tuple(mode), Tiling(), 1, lanes)
    whole = job.global_region()
    th = tile[0]
    n_tr, n_tc = -(-m // th), -(-n // shape.cols)
    every = data.draw(st.integers(1, 4), label="checkpoint rows every")
    row_slot = np.where(np.arange(n_tr) % every == every - 1, np.arange(n_tr) // every, -1)
    row_slot[-1] = -1
    col_slot = np.full(n_tc, -1)
    col_slot[-1] = 0
    if n_tc > 2:
        col_slot[1] = 1
    pairs = [
        PairOnDevice(
            c, a, b, scoring.matrix, scoring.gap_open, scoring.gap_extend, mode == "local", shape
        )  # fmt: skip
        for c in _contexts(cl_device, ndev)
    ]
    want = pairs[0].fill_region(0, 0, whole.top, whole.left, row_slot, col_slot, th,
                                lanes.neg_store)  # fmt: skip
    skewed = SkewedFill(pairs, **options)
    got = skewed.fill_region(0, 0, whole.top, whole.left, row_slot, col_slot, th,
                             lanes.neg_store)  # fmt: skip
    np.testing.assert_array_equal(got.last_row, want.last_row)
    np.testing.assert_array_equal(got.row_store, want.row_store)
    np.testing.assert_array_equal(got.col_store, want.col_store)
    assert got.best == want.best
    assert skewed.stats["tile_rows"] in (th, th * options["tall"], th * 2)
    tall_rows = -(-m // skewed.stats["tile_rows"])
    assert skewed.stats["bands"] == -(-tall_rows // skewed.stats["band_tiles"])
    launches = skewed.stats["launches"]
    assert sum(1 for x in launches if x) == min(ndev, skewed.stats["bands"])


def test_skewed_region_inside_the_matrix(cl_device):
    """A region at an offset (the kernels read `a` and the profile from r0, c0)."""
    from dpalign.kernels_cl.antidiagonal import PairOnDevice, TileShape
    from dpalign.kernels_cl.skewed import SkewedFill

    rng = np.random.default_rng(3)
    scoring = Scoring((2, -3), (5, 2))
    a, b = random_pair(rng, 120, 100, 4, True)
    for tile, mode in (((4, 2, 2), "local"), ((5, 2, 2, True), "global")):
        shape = TileShape(*tile)
        lanes = plan_lanes(scoring, 120, 100, mode, Tiling(lane_bits=32))
        pairs = [
            PairOnDevice(c, a, b, scoring.matrix, 5, 2, mode == "local", shape)
            for c in _contexts(cl_device, 2)
        ]
        # the boundaries of rows 30.., columns 20.. from one device's fill of the matrix
        job = _Aligner(a, b, scoring, mode, free_ends_tuple(mode), Tiling(), 1, lanes)
        whole = job.global_region()
        th = tile[0]
        n_tr, n_tc = -(-120 // th), -(-100 // shape.cols)
        rows, cols = np.full(n_tr, -1), np.full(n_tc, -1)
        rows[30 // th - 1] = 0
        cols[20 // shape.cols - 1] = 0
        cut = pairs[0].fill_region(0, 0, whole.top, whole.left, rows, cols, th, lanes.neg_store)
        r0, c0 = 30 // th * th, 20 // shape.cols * shape.cols
        top, left = cut.row_store[0, :, c0:].copy(), cut.col_store[0, :, r0:].copy()
        h, w = 120 - r0, 100 - c0
        row_slot = np.full(-(-h // th), -1)
        row_slot[0] = 0
        col_slot = np.full(-(-w // shape.cols), -1)
        col_slot[-1] = 0
        want = pairs[0].fill_region(r0, c0, top, left, row_slot, col_slot, th, lanes.neg_store)
        got = SkewedFill(pairs, band_tiles=2, lag=1, batch=2).fill_region(
            r0, c0, top, left, row_slot, col_slot, th, lanes.neg_store
        )
        np.testing.assert_array_equal(got.last_row, want.last_row)
        np.testing.assert_array_equal(got.row_store, want.row_store)
        np.testing.assert_array_equal(got.col_store, want.col_store)
        assert got.best == want.best


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    mode=st.sampled_from(["local", "global", "semiglobal"]),
    traceback=st.booleans(),
    band_tiles=st.integers(1, 4),
    device_waits=st.booleans(),
    copy_queues=st.booleans(),
    tall=st.integers(1, 2),
    balance=st.booleans(),
)
def test_skewed_bands_align_as_the_oracle(cl_device, seed, mode, traceback, band_tiles,
                                          device_waits, copy_queues, tall, balance):  # fmt: skip
    """Whole alignments: the forward pass in skewed bands on two queues of one context
    (``OpenCLBackend(share=...)``), the traceback's recomputations too."""
    from dpalign.kernels_cl.backend import OpenCLBackend

    rng = np.random.default_rng(seed)
    scoring = Scoring((2, -3), (5, 2))
    a, b = random_pair(rng, int(rng.integers(1, 80)), int(rng.integers(1, 80)), 4, True)
    share = f"{cl_device},{cl_device}"
    devices = [OpenCLBackend(device=cl_device, share=share, stream=k) for k in range(2)]
    tiling = Tiling(tile_rows=6, tile_cols=5, blocks=3, leaf_rows=4, leaf_cols=4,
                    device_cells=1, device_tile=(3, 2, 2))  # fmt: skip
    options = dict(band_tiles=band_tiles, lag=1, batch=1, device_waits=device_waits,
                   copy_queues=copy_queues, tall=tall, balance=balance)  # fmt: skip
    got = align_long(
        a, b, scoring, mode, traceback=traceback, tiling=tiling,
        bands=Bands(devices=devices, min_cells=1, skewed=True, skew_options=options),
    )  # fmt: skip
    ends = free_ends_tuple(mode, None)
    want = reference.pairwise_align(a, b, scoring.matrix, 5, 2, mode, ends)
    if traceback:
        assert got == want
    else:
        assert (got.score, got.a_end, got.b_end) == (want.score, want.a_end, want.b_end)


def test_skewed_bands_use_every_device(cl_device):
    from dpalign.bands import Plan
    from dpalign.gcups import RunStats
    from dpalign.kernels_cl.backend import OpenCLBackend, SkewedRegions

    scoring = Scoring((2, -3), (5, 2))
    a, b = random_pair(np.random.default_rng(4), 90, 80, 4, True)
    share = f"{cl_device},{cl_device}"
    devices = [OpenCLBackend(device=cl_device, share=share, stream=k) for k in range(2)]
    fillers = [d.region_filler(a, b, scoring, True, -(2**30), (3, 2, 2)) for d in devices]
    plan = Plan(Bands(devices=devices, min_cells=1, skewed=True), None, fillers)
    assert isinstance(plan(fillers[0], True, 90 * 80), SkewedRegions)
    assert plan(fillers[0], True, 90 * 80).label.endswith("x 2 (skewed bands)")
    stats = RunStats()
    got = align_long(
        a, b, scoring, "local", stats=stats,
        tiling=Tiling(tile_rows=6, tile_cols=5, device_cells=1, device_tile=(3, 2, 2)),
        bands=Bands(devices=devices, min_cells=1, skewed=True,
                    skew_options={"band_tiles": 2, "lag": 2}),
    )  # fmt: skip
    assert got == reference.pairwise_align(a, b, scoring.matrix, 5, 2, "local",
                                           free_ends_tuple("local"))  # fmt: skip
    accounts = list(stats.workers.values())
    assert len(accounts) == 2 and all(w.cells > 0 for w in accounts)


def test_skewed_bands_refuse_bad_options(cl_device):
    from dpalign.kernels_cl.antidiagonal import PairOnDevice, TileShape
    from dpalign.kernels_cl.context import device_context
    from dpalign.kernels_cl.skewed import SkewedFill, band_plan

    with pytest.raises(OptionError):
        band_plan(10, 10, 2, band_tiles=0)
    with pytest.raises(OptionError):
        band_plan(10, 10, 2, lag=-1)
    scoring = Scoring((2, -3), (5, 2))
    a, b = random_pair(np.random.default_rng(1), 20, 20, 4, True)
    ctx = device_context(cl_device)
    p1 = PairOnDevice(ctx, a, b, scoring.matrix, 5, 2, False, TileShape(3, 2, 2))
    p2 = PairOnDevice(ctx, a, b, scoring.matrix, 5, 2, False, TileShape(4, 2, 2))
    with pytest.raises(OptionError):
        SkewedFill([p1, p2])  # different tiles


def test_band_plan_balances_the_devices():
    from dpalign.kernels_cl.skewed import band_plan

    plan = band_plan(11134, 5860, 2)
    assert 5860 % (2 * plan.period) == 0 and 300 < plan.band_tiles < 800
    assert band_plan(5, 3, 2).band_tiles == 3  # short regions: a band per device at most


@pytest.mark.parametrize("devices", [2, 3, 4])
@pytest.mark.parametrize("n_tr, n_tc", [(11133, 5859), (11134, 5860), (5566, 5859), (3000, 9000),
                                        (20000, 3000), (700, 5000)])  # fmt: skip
def test_band_plan_balances_the_devices_totals(devices, n_tr, n_tc):
    """Balanced: every device as many bands, their tile rows within a band count of each
    other, the same lag; never more unequal than the plain plan."""
    from dpalign.kernels_cl.skewed import band_plan

    plain = band_plan(n_tr, n_tc, devices, balance=False)
    plan = band_plan(n_tr, n_tc, devices, balance=True)
    assert plan.lag == plain.lag
    H = plan.band_tiles
    bands = -(-n_tr // H)
    heights = [min(H, n_tr - k * H) for k in range(bands)]
    totals = [sum(heights[d::devices]) for d in range(devices)]
    assert max(totals) - min(totals) <= max(bands, H - min(heights)), (plan, totals)
    if n_tr > devices * plain.band_tiles:
        assert bands % devices == 0 and max(totals) - min(totals) < bands
        plain_h = [min(plain.band_tiles, n_tr - k * plain.band_tiles)
                   for k in range(-(-n_tr // plain.band_tiles))]  # fmt: skip
        plain_t = [sum(plain_h[d::devices]) for d in range(devices)]
        assert max(totals) - min(totals) <= max(plain_t) - min(plain_t)


def test_coarser_rows_keep_the_callers_checkpoints():
    from dpalign.kernels_cl.skewed import _coarser

    slots = np.array([-1, 0, -1, 1, -1, -1, -1, 2, 3])
    np.testing.assert_array_equal(_coarser(slots, 9, 2), [0, 1, -1, 2, 3])
    assert _coarser(slots, 9, 3) is None  # row 1 is no bottom of a 3-row tile
    np.testing.assert_array_equal(_coarser(np.full(5, -1), 5, 4), [-1, -1])
    assert _coarser(slots, 9, 1) is None


# --------------------------------------------------------------------------------------------
# Global scores from two halves (the bottom one reversed), joined on the middle row
# --------------------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    scoring=st.sampled_from(SCORINGS),
    m=st.integers(1, 70),
    n=st.integers(1, 70),
    a_lead=st.booleans(),
)
def test_halves_give_the_global_score(seed, scoring, m, n, a_lead):
    """Two CPU fillers (any tiles), plain global or free leading gaps of a: the oracle's
    score and end cell."""
    sub, gap = scoring
    s = Scoring(sub, gap)
    a, b = random_pair(np.random.default_rng(seed), m, n, 20 if sub == "BLOSUM62" else 4, True)
    free = (a_lead, False, False, False)
    tiling = Tiling(tile_rows=4, tile_cols=3, parallel_cells=1)
    got = align_long(a, b, s, "global", free, traceback=False, tiling=tiling,
                     bands=Bands(cpu=2, halves=True))  # fmt: skip
    want = reference.pairwise_score(a, b, s.matrix, s.gap_open, s.gap_extend, "global", free)
    assert (got.score, got.a_end, got.b_end) == (want.score, want.a_end, want.b_end)


def test_halves_take_their_path_only_where_they_apply(monkeypatch):
    import dpalign.bands as bands_module

    calls = []
    real = bands_module.halves_score
    monkeypatch.setattr(
        bands_module, "halves_score", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    s = Scoring((2, -3), (5, 2))
    a, b = random_pair(np.random.default_rng(2), 50, 40, 4, True)
    for mode, free, traceback, used in (
        ("global", None, False, True),
        ("global", (True, False, False, False), False, True),
        ("global", (False, True, False, False), False, False),  # ends anywhere on row m
        ("global", (False, False, True, False), False, False),  # free left column
        ("semiglobal", None, False, False),
        ("local", None, False, False),
        ("global", None, True, False),  # traceback: the bands
    ):
        calls.clear()
        got = align_long(a, b, s, mode, free, traceback=traceback,
                         bands=Bands(cpu=2, halves=True))  # fmt: skip
        ends = free_ends_tuple(mode, free)
        want = reference.pairwise_align(a, b, s.matrix, 5, 2, mode, ends)
        assert (got.score, got.a_end, got.b_end) == (want.score, want.a_end, want.b_end)
        assert bool(calls) == used, (mode, free, traceback)


@pytest.mark.parametrize("seed", range(6))
def test_halves_on_two_device_queues(cl_device, seed, monkeypatch):
    import dpalign.bands as bands_module
    from dpalign.gcups import RunStats
    from dpalign.kernels_cl.backend import OpenCLBackend

    monkeypatch.setattr(bands_module, "HALVES_TALL", 1 + seed // 2)  # taller tiles too
    monkeypatch.setattr(bands_module, "HALVES_TALL_MIN_TILES", 1)  # in small pairs too

    rng = np.random.default_rng(seed)
    s = Scoring(*SCORINGS[seed % len(SCORINGS)])
    a, b = random_pair(rng, int(rng.integers(2, 90)), int(rng.integers(1, 90)), 4, True)
    devices = [OpenCLBackend(device=cl_device, stream=k) for k in range(2)]
    tiling = Tiling(device_cells=1, device_tile=(3, 2, 2, True) if seed % 2 else (4, 2, 2))
    stats = RunStats()
    got = align_long(a, b, s, "global", traceback=False, tiling=tiling, stats=stats,
                     bands=Bands(devices=devices, halves=True))  # fmt: skip
    want = reference.pairwise_score(a, b, s.matrix, s.gap_open, s.gap_extend, "global",
                                    free_ends_tuple("global"))  # fmt: skip
    assert (got.score, got.a_end, got.b_end) == (want.score, want.a_end, want.b_end)
    assert sum(1 for w in stats.workers.values() if w.cells) >= 2  # both halves on devices


@pytest.mark.parametrize("least", [1, 10**6])
def test_taller_tiles_by_default_for_packed_pairs_only(cl_device, monkeypatch, least):
    """Skewed fills and device halves take 512-row tiles where the pair's are 256-row packed
    ones (fewer launches; the results the same) in regions large enough, and keep 32-bit
    tiles as they are."""
    import dpalign.bands as bands_module
    import dpalign.kernels_cl.skewed as skewed_module
    from dpalign.kernels_cl.antidiagonal import PairOnDevice, TileShape
    from dpalign.kernels_cl.backend import OpenCLBackend
    from dpalign.kernels_cl.skewed import SkewedFill

    monkeypatch.setattr(skewed_module, "TALL_MIN_TILES", least)
    monkeypatch.setattr(bands_module, "HALVES_TALL_MIN_TILES", least)
    TALL = skewed_module.TALL if least == 1 else 1

    scoring = Scoring((2, -3), (5, 2))
    m, n = 90, 70
    a, b = random_pair(np.random.default_rng(7), m, n, 4, True)
    lanes = plan_lanes(scoring, m, n, "global", Tiling(lane_bits=32))
    job = _Aligner(a, b, scoring, "global", free_ends_tuple("global"), Tiling(), 1, lanes)
    whole = job.global_region()
    for tile, rows in (((3, 2, 2, True), 3 * TALL), ((3, 2, 2), 3)):
        shape = TileShape(*tile)
        pairs = [
            PairOnDevice(c, a, b, scoring.matrix, 5, 2, False, shape)
            for c in _contexts(cl_device, 2)
        ]
        n_tr, n_tc = -(-m // 3), -(-n // shape.cols)
        slots = (np.full(n_tr, -1), np.full(n_tc, -1))
        want = pairs[0].fill_region(0, 0, whole.top, whole.left, *slots, 3, lanes.neg_store)
        skewed = SkewedFill(pairs, band_tiles=2, lag=1)
        got = skewed.fill_region(0, 0, whole.top, whole.left, *slots, 3, lanes.neg_store)
        assert skewed.stats["tile_rows"] == rows
        np.testing.assert_array_equal(got.last_row, want.last_row)
    devices = [OpenCLBackend(device=cl_device, stream=k) for k in range(2)]
    got = align_long(a, b, scoring, "global", traceback=False,
                     tiling=Tiling(device_cells=1, device_tile=(3, 2, 2, True)),
                     bands=Bands(devices=devices, halves=True))  # fmt: skip
    halves_tall = bands_module.HALVES_TALL if least == 1 else 1
    assert bands_module.last_halves["tile_rows_0"] == 3 * halves_tall
    want = reference.pairwise_score(a, b, scoring.matrix, 5, 2, "global",
                                    free_ends_tuple("global"))  # fmt: skip
    assert (got.score, got.a_end, got.b_end) == (want.score, want.a_end, want.b_end)
