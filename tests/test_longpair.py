"""Long-pair alignment (tiled wavefront, checkpointed traceback) against the reference oracle.

Tiles, checkpoint blocks and leaves are forced tiny so that inputs of a few dozen residues cross
many tiles, several traceback levels and both worker threads; every result must be identical to
``reference.pairwise_align`` (score, coordinates and ops, tie rules included).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpalign import reference as R
from dpalign.errors import InputError, OptionError
from dpalign.longpair import Tiling, align_full, align_long, plan_lanes
from dpalign.scoring import Scoring, free_ends_tuple

DNA = "ACGT"
IUPAC = "ACGTRYSWKMBDHVN"
PROTEIN = "ARNDCQEGHILKMFPSTWYV"

SCORINGS = {
    "dna-linear": (Scoring((2, -3), 4), DNA),
    "dna-affine": (Scoring((1, -1), (3, 1)), IUPAC),
    "free-opens": (Scoring((1, -1), (0, 1)), DNA),
    "nuc44": (Scoring("NUC.4.4", (10, 1)), IUPAC),
    "blosum62": (Scoring("BLOSUM62", (11, 1)), PROTEIN),
    "blosum62-linear": (Scoring("BLOSUM62", 4), PROTEIN),
}


def _oracle(a, b, scoring, mode, free_ends):
    ends = free_ends_tuple(mode, free_ends)
    args = (a, b, scoring.matrix, scoring.gap_open, scoring.gap_extend, mode, ends)
    return R.pairwise_align(*args), R.pairwise_score(*args)


@st.composite
def pairs(draw, max_len=40):
    """A pair over one scoring's alphabet: unrelated, or b mutated from a (long diagonals and
    gaps, where ties and the cross-lane D correction happen)."""
    name = draw(st.sampled_from(sorted(SCORINGS)))
    scoring, letters = SCORINGS[name]
    text = st.text(alphabet=letters, max_size=max_len)
    a = draw(text)
    if draw(st.booleans()):
        b = draw(text)
    else:
        b = list(a)
        for _ in range(draw(st.integers(0, 6))):
            k = draw(st.integers(0, len(b)))
            kind = draw(st.sampled_from(["sub", "ins", "del"]))
            piece = draw(st.text(alphabet=letters, min_size=1, max_size=8))
            if kind == "ins":
                b[k:k] = piece
            elif kind == "del":
                del b[k : k + len(piece)]
            elif k < len(b):
                b[k] = piece[0]
        b = "".join(b)
    if draw(st.booleans()):
        a, b = b, a
    return scoring, scoring.encode(a), scoring.encode(b)


@st.composite
def modes(draw):
    mode = draw(st.sampled_from(["global", "local", "semiglobal"]))
    free_ends = None
    if mode == "global" and draw(st.booleans()):
        free_ends = tuple(draw(st.lists(st.booleans(), min_size=4, max_size=4)))
    return mode, free_ends


tilings = st.builds(
    Tiling,
    tile_rows=st.integers(1, 16),
    tile_cols=st.integers(1, 16),
    blocks=st.integers(2, 4),
    leaf_rows=st.integers(1, 8),
    leaf_cols=st.integers(1, 8),
    parallel_cells=st.sampled_from([1, 10**9]),
    lane_bits=st.sampled_from([None, 16, 32, 64]),
    # 0: recursion through every level; None: leaf boundaries kept where they fit (and their
    # leaves traced in one loop); 10**9: kept from the first fill on
    leaf_bytes=st.sampled_from([0, None, 10**9]),
)


@given(pairs(), modes(), tilings)
def test_identical_to_reference(pair, mode_ends, tiling):
    scoring, a, b = pair
    mode, free_ends = mode_ends
    expected, expected_score = _oracle(a, b, scoring, mode, free_ends)
    for threads in (1, 2):
        got = align_long(a, b, scoring, mode, free_ends, threads=threads, tiling=tiling)
        assert got == expected
        score_only = align_long(
            a, b, scoring, mode, free_ends, traceback=False, threads=threads, tiling=tiling
        )
        assert score_only == expected_score
    o, e = scoring.gap_open, scoring.gap_extend
    assert R.rescore(got.ops, a, b, scoring.matrix, o, e, got.a_start, got.b_start) == got.score
    assert got.ops.count("=") + got.ops.count("X") + got.ops.count("D") == got.a_end - got.a_start
    assert got.ops.count("=") + got.ops.count("X") + got.ops.count("I") == got.b_end - got.b_start


@given(pairs(max_len=120), modes())
def test_default_tiling_and_sixteen_lane_tiles(pair, mode_ends):
    """Tiles taller than one vector (several segments per lane), leaves of the default size."""
    scoring, a, b = pair
    mode, free_ends = mode_ends
    expected, _ = _oracle(a, b, scoring, mode, free_ends)
    tiling = Tiling(tile_rows=48, tile_cols=24, blocks=3, leaf_rows=16, leaf_cols=16)
    assert align_long(a, b, scoring, mode, free_ends, threads=2, tiling=tiling) == expected
    assert align_long(a, b, scoring, mode, free_ends, threads=1) == expected


@given(pairs(), modes())
def test_full_matrix_baseline_identical_to_reference(pair, mode_ends):
    scoring, a, b = pair
    mode, free_ends = mode_ends
    assert align_full(a, b, scoring, mode, free_ends) == _oracle(a, b, scoring, mode, free_ends)[0]


def test_long_gap_crosses_every_lane():
    """A gap in b longer than a tile: D must be carried across all lanes of every column."""
    rng = np.random.default_rng(7)
    scoring = Scoring((1, -1), (5, 1))
    a = rng.integers(0, 4, 300).astype(np.uint8)
    b = np.concatenate([a[:40], a[250:]])
    for mode in ("global", "local", "semiglobal"):
        expected, _ = _oracle(a, b, scoring, mode, None)
        got = align_long(a, b, scoring, mode, tiling=Tiling(tile_rows=160, tile_cols=32))
        assert got == expected
        assert "210D" in got.cigar or mode == "local"
        swapped, _ = _oracle(b, a, scoring, mode, None)
        assert align_long(b, a, scoring, mode, tiling=Tiling(tile_rows=160)) == swapped


@pytest.mark.parametrize("mode", ["global", "local", "semiglobal"])
def test_sixty_four_bit_lanes(mode):
    """Scores beyond int32 run in int64 lanes (8 per vector) and stay exact."""
    scoring = Scoring((10**8, -(10**8)), (3 * 10**8, 10**8))
    rng = np.random.default_rng(3)
    a = rng.integers(0, 4, 60).astype(np.uint8)
    b = np.concatenate([a[:20], rng.integers(0, 4, 5).astype(np.uint8), a[30:]])
    assert plan_lanes(scoring, len(a), len(b), mode).lane is np.int64
    expected, expected_score = _oracle(a, b, scoring, mode, None)
    tiling = Tiling(tile_rows=12, tile_cols=7, blocks=2, leaf_rows=5, leaf_cols=6)
    assert align_long(a, b, scoring, mode, threads=2, tiling=tiling) == expected
    assert align_long(a, b, scoring, mode, traceback=False, tiling=tiling) == expected_score
    assert expected.score > 2**31 or mode != "local"


def test_lane_choice():
    """16-bit lanes (relative to each tile's corner) for ordinary scores and tiles, however
    long the pair; 32 when a tile's spread would not fit; 64 when absolute scores need it."""
    blosum = Scoring("BLOSUM62", (11, 1))
    lanes = plan_lanes(blosum, 10**6, 10**6, "global")
    assert (lanes.lane, lanes.store) == (np.int16, np.int32)
    big_tiles = Tiling(tile_rows=4096, tile_cols=4096)
    assert plan_lanes(blosum, 10**6, 10**6, "global", big_tiles).lane is np.int32
    with pytest.raises(OptionError, match="16-bit"):
        plan_lanes(blosum, 10**6, 10**6, "local", Tiling(tile_rows=4096, lane_bits=16))
    huge = Scoring((10**5, -(10**5)), 10**5)
    assert plan_lanes(huge, 10**5, 10**5, "global").store is np.int64


@pytest.mark.parametrize("mode", ["global", "local", "semiglobal"])
@pytest.mark.parametrize("lane_bits", [16, 32])
def test_relative_lanes_far_from_zero(mode, lane_bits):
    """Scores far outside int16 (a 3,000 x 910 pair, match 50): 16-bit lanes hold them
    relative to each tile's corner and must agree with 32-bit lanes and the reference."""
    scoring = Scoring((50, -20), (40, 7))
    rng = np.random.default_rng(1)
    a = rng.integers(0, 4, 3000).astype(np.uint8)
    b = np.concatenate([a[1000:1400], rng.integers(0, 4, 60).astype(np.uint8), a[1450:1900]])
    tiling = Tiling(tile_rows=96, tile_cols=40, blocks=4, leaf_rows=24, leaf_cols=24)
    tiling = Tiling(**{**tiling.__dict__, "lane_bits": lane_bits})
    assert plan_lanes(scoring, a.size, b.size, mode, tiling).bits == lane_bits
    expected = align_full(a, b, scoring, mode)  # itself checked against the reference above
    assert align_full(a, b, scoring, "local").score > 2**15  # H passes 2**15 in every mode
    assert align_long(a, b, scoring, mode, threads=2, tiling=tiling) == expected
    score_only = align_long(a, b, scoring, mode, traceback=False, tiling=tiling)
    assert (score_only.score, score_only.a_end, score_only.b_end) == (
        expected.score,
        expected.a_end,
        expected.b_end,
    )


@pytest.mark.parametrize("mode", ["global", "local", "semiglobal"])
@pytest.mark.parametrize(
    "a, b", [("", ""), ("", "ACG"), ("ACG", ""), ("A", "A"), ("A", "C"), ("A", "CAG")]
)
def test_empty_and_length_one(a, b, mode):
    scoring = Scoring((2, -1), (2, 1))
    ea, eb = scoring.encode(a), scoring.encode(b)
    for free_ends in [None] if mode != "global" else [None, (True, False, False, True)]:
        expected, expected_score = _oracle(ea, eb, scoring, mode, free_ends)
        assert align_long(a, b, scoring, mode, free_ends) == expected
        assert align_long(a, b, scoring, mode, free_ends, traceback=False) == expected_score


def test_strings_and_code_arrays_agree():
    scoring = Scoring("BLOSUM62", (11, 1))
    text_a, text_b = "HEAGAWGHEE", "PAWHEAE"
    by_text = align_long(text_a, text_b, scoring, "local")
    by_codes = align_long(scoring.encode(text_a), scoring.encode(text_b), scoring, "local")
    assert by_text == by_codes
    assert (by_text.score, by_text.cigar) == (
        _oracle(scoring.encode(text_a), scoring.encode(text_b), scoring, "local", None)[0].score,
        by_codes.cigar,
    )


def test_twenty_kb_pair_with_traceback_in_near_linear_memory():
    """20 kb x 20 kb DNA with indels: traced back, rescored, threads agree, memory stays small."""
    rng = np.random.default_rng(11)
    scoring = Scoring("NUC.4.4", (10, 1))
    a = rng.integers(0, 4, 20_000).astype(np.uint8)
    b = a.copy()
    changed = rng.random(b.size) < 0.08
    b[changed] = rng.integers(0, 4, int(changed.sum()))
    insert = rng.integers(0, 4, 120).astype(np.uint8)
    b = np.concatenate([b[:7000], insert, b[7000:15000], b[15060:]])
    tracemalloc.start()
    got = align_long(a, b, scoring, threads=2)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 40e6  # the full matrix would take 400 MB even as one byte per cell
    assert (got.a_start, got.a_end, got.b_start, got.b_end) == (0, a.size, 0, b.size)
    o, e = scoring.gap_open, scoring.gap_extend
    assert R.rescore(got.ops, a, b, scoring.matrix, o, e) == got.score
    assert align_long(a, b, scoring, threads=1, traceback=False).score == got.score
    assert align_long(a, b, scoring, threads=1) == got
    parasail = pytest.importorskip("parasail")
    letters = "".join(scoring.alphabet.letters)
    text = lambda codes: "".join(letters[c] for c in codes)  # noqa: E731
    assert parasail.nw_scan_32(text(a), text(b), o + e, e, parasail.nuc44).score == got.score


@pytest.mark.slow
def test_hundred_kb_pair_with_traceback():
    rng = np.random.default_rng(5)
    scoring = Scoring((1, -1), (2, 1))
    a = rng.integers(0, 4, 100_000).astype(np.uint8)
    b = a.copy()
    changed = rng.random(b.size) < 0.1
    b[changed] = rng.integers(0, 4, int(changed.sum()))
    got = align_long(a, b, scoring, "local")
    o, e = scoring.gap_open, scoring.gap_extend
    assert R.rescore(got.ops, a, b, scoring.matrix, o, e, got.a_start, got.b_start) == got.score
    assert align_long(a, b, scoring, "local", traceback=False).score == got.score


def test_bad_input_is_a_clear_error():
    scoring = Scoring()
    with pytest.raises(OptionError, match="Scoring"):
        align_long("ACG", "ACG", (1, -1))
    with pytest.raises(OptionError, match="unknown mode"):
        align_long("ACG", "ACG", scoring, "globl")
    with pytest.raises(OptionError, match="semiglobal"):
        align_long("ACG", "ACG", scoring, "semiglobal", (True, True, True, True))
    with pytest.raises(OptionError, match="threads"):
        align_long("ACG", "ACG", scoring, threads=0)
    with pytest.raises(InputError):
        align_long(np.array([0, 99], np.uint8), "ACG", scoring)
    with pytest.raises(OptionError, match="blocks"):
        Tiling(blocks=1)


def test_a_leaf_sized_trace_compiles_nothing_more():
    """A traceback that starts inside one leaf (a local alignment ending in the first leaf
    of a 300 x 3,000 pair) runs the compiled block loop on that one block, not
    trace_leaf from Python: no Numba specialisation beyond what a 202 x 202 pair compiles
    (a first run's traceback warm-up; its workers then compile nothing), and the oracle's
    alignment."""
    from dpalign.simd import antidiagonal as K

    scoring = Scoring("BLOSUM62", (11, 1))
    rng = np.random.default_rng(3)
    warm = rng.integers(0, 20, 202).astype(np.uint8)
    align_long(warm, warm, scoring, "local", threads=1)
    kernels = ("fill_worker", "fill_bits", "trace_bits", "trace_leaf", "trace_blocks")
    before = {name: list(getattr(K, name).signatures) for name in kernels}
    a = rng.integers(0, 20, 300).astype(np.uint8)
    b = rng.integers(0, 20, 3000).astype(np.uint8)
    b[:60] = a[:60]  # the best local alignment ends near (60, 60)
    got = align_long(a, b, scoring, "local", threads=1)
    assert got.a_end <= Tiling().leaf_rows and got.b_end <= Tiling().leaf_cols
    assert {name: list(getattr(K, name).signatures) for name in kernels} == before
    assert got == _oracle(a, b, scoring, "local", None)[0]


@pytest.mark.parametrize("mode", ["local", "global"])
def test_warm_up_halves_load_what_a_long_alignment_takes(mode):
    """longpair.warm_up's halves (a command's compile children run one each): the tile fill
    and the traceback's block loop with a traceback's argument types, so a long alignment
    afterwards needs no other specialisation; the alignment is the oracle's."""
    from dpalign.longpair import warm_up
    from dpalign.simd import antidiagonal as K

    scoring = Scoring("BLOSUM62", (11, 1))
    for part in ("fill", "trace"):
        warm_up(scoring, mode, part, 202)
    kernels = ("fill_worker", "trace_blocks")
    before = {name: list(getattr(K, name).signatures) for name in kernels}
    assert all(before.values())
    rng = np.random.default_rng(11)
    a = rng.integers(0, 20, 230).astype(np.uint8)
    b = np.concatenate([a[20:200], rng.integers(0, 20, 150).astype(np.uint8)])
    got = align_long(a, b, scoring, mode, threads=1)
    assert {name: list(getattr(K, name).signatures) for name in kernels} == before
    assert got == _oracle(a, b, scoring, mode, None)[0]
    with pytest.raises(OptionError):
        warm_up(scoring, mode, "both", 202)

@settings(max_examples=40, deadline=None)
@given(pairs(max_len=150), modes(), st.data())
def test_a_trace_that_meets_another_follows_it(pair, mode_ends, data):
    """trace_blocks_merge: traced from a leaf-level region's last cell first (recording the
    leaves it enters), then from any cell, following the first trace from where they meet:
    the same ops, end and state as trace_blocks from that cell alone."""
    from dpalign.longpair import _NO_RECORD, STATE_H, _Aligner

    scoring, a, b = pair
    mode, free = mode_ends
    ends = free_ends_tuple(mode, free)
    a = a if len(a) else np.zeros(1, np.uint8)  # a trace needs cells (no assume: the
    b = b if len(b) else np.zeros(1, np.uint8)  # health check fails when it filters much)
    m, n = len(a), len(b)
    tiling = Tiling(tile_rows=5, tile_cols=7, blocks=3, leaf_rows=5, leaf_cols=7)
    lanes = plan_lanes(scoring, m, n, mode, tiling)
    job = _Aligner(a, b, scoring, mode, ends, tiling, 1, lanes)
    region = job.global_region()
    points = job.fill(region, keep=True)
    assert points.leaves
    rc, cc = points.row_cuts, points.col_cuts
    args = (0, 0, rc, cc, region.top, region.left, points.fill.row_store, points.fill.col_store)
    record = np.empty((len(rc) + len(cc), 4), np.int64)
    first = np.empty(m + n + 1, np.uint8)
    *end, k, _ = job.cpu.trace_blocks_merge(*args, m, n, STATE_H, first, 0, record, _NO_RECORD, 0)
    i = data.draw(st.integers(1, m), label="i")
    j = data.draw(st.integers(1, n), label="j")
    state = data.draw(st.sampled_from([0, 1, 2]), label="state")
    want_ops = np.empty(m + n + 1, np.uint8)
    want = job.cpu.trace_blocks(*args, i, j, state, want_ops, 0)
    ops = np.empty(m + n + 1, np.uint8)
    got = job.cpu.trace_blocks_merge(*args, i, j, state, ops, 0, _NO_RECORD, record, k)
    pos, met = got[4], got[6]
    if met >= 0:
        start = int(record[met, 3])
        ops[pos : pos + end[4] - start] = first[start : end[4]]
        pos += end[4] - start
        got = (*end[:4], pos)
    assert tuple(got[:5]) == tuple(want)
    assert bytes(ops[:pos]) == bytes(want_ops[: want[4]])
    if (i, j, state) == (m, n, STATE_H):
        assert met == 0


@settings(max_examples=40, deadline=None)
@given(pairs(max_len=150), modes(), st.data())
def test_a_trace_stops_past_its_bounds(pair, mode_ends, data):
    """trace_blocks_merge with bounds (a segment traced ahead): it stops at the first leaf
    it enters at a row <= i_stop or a column <= j_stop, its ops a prefix of trace_blocks's,
    and going on from there gives trace_blocks's path."""
    from dpalign.longpair import _NO_RECORD, STATE_H, _Aligner

    scoring, a, b = pair
    mode, free = mode_ends
    a = a if len(a) else np.zeros(1, np.uint8)
    b = b if len(b) else np.zeros(1, np.uint8)
    m, n = len(a), len(b)
    tiling = Tiling(tile_rows=5, tile_cols=7, blocks=3, leaf_rows=5, leaf_cols=7)
    lanes = plan_lanes(scoring, m, n, mode, tiling)
    job = _Aligner(a, b, scoring, mode, free_ends_tuple(mode, free), tiling, 1, lanes)
    region = job.global_region()
    points = job.fill(region, keep=True)
    rc, cc = points.row_cuts, points.col_cuts
    args = (0, 0, rc, cc, region.top, region.left, points.fill.row_store, points.fill.col_store)
    want_ops = np.empty(m + n + 1, np.uint8)
    want = job.cpu.trace_blocks(*args, m, n, STATE_H, want_ops, 0)
    i_stop = data.draw(st.integers(0, m - 1), label="i_stop")
    j_stop = data.draw(st.integers(0, n - 1), label="j_stop")
    ops = np.empty(m + n + 1, np.uint8)
    record = np.empty((len(rc) + len(cc), 4), np.int64)
    i, j, state, stopped, pos, k, met = job.cpu.trace_blocks_merge(
        *args, m, n, STATE_H, ops, 0, record, _NO_RECORD, 0, i_stop, j_stop
    )
    assert met == -1 and bytes(ops[:pos]) == bytes(want_ops[:pos])
    assert stopped or i <= i_stop or j <= j_stop or i == 0 or j == 0
    if k:  # every leaf it entered was within bounds
        assert (record[:k, 0] > i_stop).all() and (record[:k, 1] > j_stop).all()
    if not stopped:
        rest = job.cpu.trace_blocks(*args, i, j, state, ops, pos)
        assert tuple(rest) == tuple(want) and bytes(ops[: rest[4]]) == bytes(want_ops[: want[4]])
