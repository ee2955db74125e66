"""The PaPaRa Numba kernels give exactly the oracle's scores and alignments."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpalign import engine, reference
from dpalign.engine import Task, get_backend, query_batch, reference_blocks
from dpalign.scoring import ACCURATE, PaparaScoring
from dpalign.simd import papara_score as P
from dpalign.simd import papara_trace as T

PROTEIN_GAP = (1 << 20) - 1

SCORINGS = st.one_of(
    st.just(PaparaScoring()),
    st.just(PaparaScoring("bmc2012")),
    st.just(ACCURATE),
    st.builds(
        PaparaScoring,
        st.just("papara2"),
        st.integers(-6, 0),
        st.integers(-4, 0),
        st.integers(-4, 5),
        st.integers(-5, 4),
        st.integers(-4, 0),  # mismatch (the accurate mode's; 0 in PaPaRa)
    ),
)


@st.composite
def papara_case(draw, max_n=24, max_m=24, max_lanes=40, max_reads=4):
    """Profiles (E, n) with IUPAC/gap states and random flags, and reads (some may be empty)."""
    protein = draw(st.booleans())
    n = draw(st.integers(1, max_n))
    lanes = draw(st.integers(1, max_lanes))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if protein:
        states = rng.integers(1, 1 << 20, (lanes, n)).astype(np.uint32)
        single = (1 << rng.integers(0, 20, (lanes, n))).astype(np.uint32)
        states = np.where(rng.random((lanes, n)) < 0.6, single, states)
        states[rng.random((lanes, n)) < 0.1] = PROTEIN_GAP
    else:
        states = rng.integers(1, 16, (lanes, n)).astype(np.uint8)  # IUPAC and 15 = gap
    flags = (rng.random((lanes, n)) < draw(st.sampled_from([0.0, 0.3, 0.8]))).astype(np.uint8)
    reads = []
    for _ in range(draw(st.integers(1, max_reads))):
        m = draw(st.integers(0, max_m))
        if protein:
            read = (1 << rng.integers(0, 20, m)).astype(np.uint32)
            read[rng.random(m) < 0.1] = PROTEIN_GAP  # X, kept by the accurate mode
        else:
            read = rng.integers(1, 16, m).astype(np.uint8)
        reads.append(read)
    return states, flags, reads


def _reference_scores(states, flags, reads, scoring):
    """[reads, lanes] scores from reference.papara_fill (0 for empty reads)."""
    out = np.zeros((len(reads), len(states)), dtype=np.int64)
    for q, read in enumerate(reads):
        if len(read):
            out[q] = reference.papara_fill(states.T, flags.T, read, scoring).scores
    return out


def _numba_scores(states, flags, reads, scoring, threads=1):
    blocks = reference_blocks(list(states), flags=list(flags), dtype=states.dtype)
    batch = query_batch(reads, dtype=states.dtype)
    backend = get_backend("numba", threads=threads)
    results = backend.score(Task("papara", scoring), batch, blocks)
    scores = np.zeros((len(reads), len(states)), dtype=np.int64)
    widths = np.zeros((len(reads), len(states)), dtype=np.int64)
    for block, result in zip(blocks, results, strict=True):
        lanes = np.flatnonzero(block.ids >= 0)
        scores[:, block.ids[lanes]] = result.scores[:, lanes]
        widths[:, block.ids[lanes]] = result.width[:, lanes]
    return scores, widths


# --------------------------------------------------------------------------------------------
# Scoring kernel
# --------------------------------------------------------------------------------------------


@given(case=papara_case(), scoring=SCORINGS)
def test_scores_equal_the_reference(case, scoring):
    states, flags, reads = case
    scores, widths = _numba_scores(states, flags, reads, scoring)
    want = _reference_scores(states, flags, reads, scoring)
    nonempty = np.array([len(r) > 0 for r in reads])
    np.testing.assert_array_equal(scores[nonempty], want[nonempty])
    for q, read in enumerate(reads):
        expected = P.kernel_width(scoring, len(read)) if len(read) else 0
        assert set(widths[q]) == {expected}


@pytest.mark.parametrize(
    ("scoring", "by_hand"),
    [
        # A against A, C (flagged), gap state (matches anything), A|C (flagged): papara2 scores
        # a match 2 and a flagged column's free gap 0; bmc2012 a match 0, a flagged column 3
        (PaparaScoring(), [2, 0, 2, 0]),
        (PaparaScoring("bmc2012"), [0, 3, 0, 3]),
        (PaparaScoring("papara2", 0, 0, -2, 3), None),
    ],
    ids=str,
)
def test_length_one_reads_and_references(scoring, by_hand):
    states = np.array([[1], [2], [15], [3]], dtype=np.uint8)
    flags = np.array([[0], [1], [0], [1]], dtype=np.uint8)
    reads = [np.array([1], np.uint8), np.array([2, 1, 4], np.uint8)]
    scores, _ = _numba_scores(states, flags, reads, scoring)
    np.testing.assert_array_equal(scores, _reference_scores(states, flags, reads, scoring))
    if by_hand is not None:
        assert scores[0].tolist() == by_hand


def test_papara2_scores_by_hand():
    states = np.array([[1, 2, 4, 8]], dtype=np.uint8)  # ACGT
    flags = np.zeros((1, 4), dtype=np.uint8)
    reads = [np.array([2, 4], np.uint8), np.array([1, 2, 4, 8], np.uint8)]
    scores, widths = _numba_scores(states, flags, reads, PaparaScoring())
    assert scores[:, 0].tolist() == [4, 8]  # CG inside ACGT (free reference ends); all four
    assert widths[:, 0].tolist() == [16, 16]


def test_padding_lanes_and_several_lane_groups():
    rng = np.random.default_rng(7)
    for lanes in (1, 5, 31, 33, 70):
        states = rng.integers(1, 16, (lanes, 13)).astype(np.uint8)
        flags = (rng.random((lanes, 13)) < 0.3).astype(np.uint8)
        reads = [rng.integers(1, 15, 9).astype(np.uint8)]
        scoring = PaparaScoring()
        want = _reference_scores(states, flags, reads, scoring)
        block = reference_blocks(list(states), width=lanes + 3, flags=list(flags))[0]
        got = P.score_block(Task("papara", scoring), query_batch(reads), block)
        np.testing.assert_array_equal(got.scores[:, :lanes], want)
        assert not got.scores[:, lanes:].any() and not got.width[:, lanes:].any()


def test_empty_batches_and_blocks():
    scoring = PaparaScoring()
    block = reference_blocks([np.array([1, 2, 4], np.uint8)], flags=[np.zeros(3, np.uint8)])[0]
    empty = query_batch([], dtype=np.uint8)
    result = P.score_block(Task("papara", scoring), empty, block)
    assert result.scores.shape == (0, block.width)
    only_empty = query_batch([np.zeros(0, np.uint8)])
    result = P.score_block(Task("papara", scoring), only_empty, block)
    assert not result.scores.any()
    no_lanes = reference_blocks([], flags=[])
    assert get_backend("numba").score(Task("papara", scoring), only_empty, no_lanes) == []


def test_unequal_lane_lengths_are_refused():
    block = reference_blocks(
        [np.array([1, 2], np.uint8), np.array([1], np.uint8)],
        flags=[np.zeros(2, np.uint8), np.zeros(1, np.uint8)],
    )[0]
    with pytest.raises(ValueError, match="equal length"):
        P.score_block(Task("papara", PaparaScoring()), query_batch([np.ones(2, np.uint8)]), block)


@pytest.mark.parametrize("scoring", [PaparaScoring(), PaparaScoring("bmc2012")], ids=str)
def test_long_reads_need_and_get_32_bits(scoring):
    # 17,000 matching characters against a short reference: H reaches 2 * 17,000 > 2^15 - 1
    # in the papara2 bounds, and bmc2012's border 3 (m + 1) passes 2^15 as well.
    m = 17_000
    states = np.array([[1, 1, 1], [1, 2, 1], [8, 8, 8]], dtype=np.uint8)
    flags = np.array([[0, 0, 0], [0, 1, 0], [1, 0, 0]], dtype=np.uint8)
    reads = [np.ones(m, np.uint8), np.array([1, 1], np.uint8)]
    assert scoring.width_for(m) == 32 and P.kernel_width(scoring, m) == 32
    scores, widths = _numba_scores(states, flags, reads, scoring)
    np.testing.assert_array_equal(scores, _reference_scores(states, flags, reads, scoring))
    assert widths[0].tolist() == [32] * 3 and widths[1].tolist() == [16] * 3


def test_reads_at_the_16_bit_limit():
    # the longest read papara2 scores in 16 bits: a run of matches through a short profile,
    # then of F steps below it: both ends of the int16 range are approached without wrapping
    scoring = PaparaScoring()
    m = max(k for k in range(16_000, 16_400) if P.kernel_width(scoring, k) == 16)
    assert scoring.width_for(m) == 16
    states = np.array([[1] * 4, [2] * 4], dtype=np.uint8)
    flags = np.zeros((2, 4), dtype=np.uint8)
    reads = [np.ones(m, np.uint8), np.r_[np.full(m - 4, 2), np.ones(4)].astype(np.uint8)]
    scores, widths = _numba_scores(states, flags, reads, scoring)
    np.testing.assert_array_equal(scores, _reference_scores(states, flags, reads, scoring))
    assert set(widths.ravel()) == {16}


def test_kernel_width_never_narrower_than_width_for():
    odd = PaparaScoring("papara2", -9, -7, 9, 9)
    for scoring in (PaparaScoring(), PaparaScoring("bmc2012"), odd):
        for m in (1, 100, 5_000, 10_000, 16_000, 16_383, 16_384, 40_000):
            assert P.kernel_width(scoring, m) >= scoring.width_for(m)
    assert P.kernel_width(PaparaScoring(), 100) == 16


@given(case=papara_case(max_lanes=70, max_reads=6), scoring=SCORINGS)
def test_results_do_not_depend_on_threads(case, scoring):
    states, flags, reads = case
    one, _ = _numba_scores(states, flags, reads, scoring, threads=1)
    two, _ = _numba_scores(states, flags, reads, scoring, threads=2)
    np.testing.assert_array_equal(one, two)


# --------------------------------------------------------------------------------------------
# Traceback
# --------------------------------------------------------------------------------------------


@given(case=papara_case(max_lanes=1, max_reads=1), scoring=SCORINGS)
def test_single_pair_alignment_equals_the_reference(case, scoring):
    states, flags, reads = case
    read = reads[0]
    if len(read) == 0:
        with pytest.raises(ValueError):
            T.papara_align(states[0], flags[0], read, scoring)
        return
    got = T.papara_align(states[0], flags[0], read, scoring)
    assert got == reference.papara_align(states[0], flags[0], read, scoring)


@given(case=papara_case(max_lanes=6, max_reads=40), scoring=SCORINGS, seed=st.integers(0, 99))
def test_many_pairs_equal_the_reference(case, scoring, seed):
    states, flags, reads = case
    edges = np.random.default_rng(seed).integers(-1, len(states), len(reads))
    scores, ops = T.papara_align_many(states, flags, reads, edges, scoring)
    for k, read in enumerate(reads):
        if edges[k] < 0 or len(read) == 0:
            assert ops[k] is None
            continue
        want = reference.papara_align(states[edges[k]], flags[edges[k]], read, scoring)
        assert (int(scores[k]), ops[k]) == want


@pytest.mark.parametrize("scoring", [PaparaScoring(), PaparaScoring("bmc2012")], ids=str)
def test_many_groups_on_threads_equal_the_reference(scoring):
    rng = np.random.default_rng(5)
    states = rng.integers(1, 16, (7, 12)).astype(np.uint8)
    flags = (rng.random((7, 12)) < 0.2).astype(np.uint8)
    reads = [rng.integers(1, 16, m).astype(np.uint8) for m in rng.integers(0, 30, 200)]
    edges = rng.integers(-1, 7, len(reads))
    scores, ops = T.papara_align_many(states, flags, reads, edges, scoring, threads=4)
    one_scores, one_ops = T.papara_align_many(states, flags, reads, edges, scoring, threads=1)
    assert np.array_equal(scores, one_scores) and ops == one_ops
    for k, read in enumerate(reads):
        if edges[k] < 0 or len(read) == 0:
            assert ops[k] is None
            continue
        want = reference.papara_align(states[edges[k]], flags[edges[k]], read, scoring)
        assert (int(scores[k]), ops[k]) == want


def _trimmed(ops: str | None, n: int) -> tuple[int, bytes]:
    if ops is None:
        return n, b""
    core = ops.lstrip("R")
    return len(ops) - len(core), core.rstrip("R").encode()


@given(case=papara_case(max_lanes=6, max_reads=40), scoring=SCORINGS, seed=st.integers(0, 99))
def test_trimmed_ops_are_the_trimmed_reference(case, scoring, seed):
    states, flags, reads = case
    n = states.shape[1]
    edges = np.random.default_rng(seed).integers(-1, len(states), len(reads))
    scores, ops = T.papara_align_many(states, flags, reads, edges, scoring)
    t_scores, leads, cores = T.papara_align_many(states, flags, reads, edges, scoring, trimmed=True)
    assert np.array_equal(scores, t_scores)
    assert [(int(a), b) for a, b in zip(leads, cores, strict=True)] == [_trimmed(o, n) for o in ops]
    ref = engine.align_papara_trimmed(
        engine.get_backend("reference"), states, flags, reads, edges, scoring
    )
    assert np.array_equal(ref[0], t_scores) and np.array_equal(ref[1], leads)
    assert ref[2] == cores


def test_trimmed_very_long_pairs_alone(monkeypatch):
    rng = np.random.default_rng(12)
    states = rng.integers(1, 16, (3, 20)).astype(np.uint8)
    flags = (rng.random((3, 20)) < 0.3).astype(np.uint8)
    reads = [rng.integers(1, 15, m).astype(np.uint8) for m in (3, 30, 7, 1, 25)]
    edges = np.array([0, 1, 2, 1, -1])
    monkeypatch.setattr(T, "GROUP_BITS_LIMIT", 20 * 10 * P.LANES)
    _, ops = T.papara_align_many(states, flags, reads, edges, PaparaScoring())
    _, leads, cores = T.papara_align_many(
        states, flags, reads, edges, PaparaScoring(), trimmed=True
    )
    assert [(int(a), b) for a, b in zip(leads, cores, strict=True)] == [
        _trimmed(o, 20) for o in ops
    ]


def test_many_pairs_with_very_long_pairs_alone(monkeypatch):
    rng = np.random.default_rng(11)
    states = rng.integers(1, 16, (3, 20)).astype(np.uint8)
    flags = (rng.random((3, 20)) < 0.3).astype(np.uint8)
    reads = [rng.integers(1, 15, m).astype(np.uint8) for m in (3, 30, 7, 1)]
    edges = np.array([0, 1, 2, 1])
    monkeypatch.setattr(T, "GROUP_BITS_LIMIT", 20 * 10 * P.LANES)  # pairs longer than 10 alone
    scores, ops = T.papara_align_many(states, flags, reads, edges, PaparaScoring())
    for k, read in enumerate(reads):
        want = reference.papara_align(states[edges[k]], flags[edges[k]], read, PaparaScoring())
        assert (int(scores[k]), ops[k]) == want


@pytest.mark.parametrize("scoring", [PaparaScoring(), PaparaScoring("bmc2012")], ids=str)
def test_long_read_traceback_in_32_bits(scoring):
    m = 17_000
    states = np.array([[1, 2, 1, 1]], dtype=np.uint8)
    flags = np.array([[0, 1, 0, 0]], dtype=np.uint8)
    read = np.ones(m, np.uint8)
    want = reference.papara_align(states[0], flags[0], read, scoring)
    assert T.papara_align(states[0], flags[0], read, scoring) == want
    scores, ops = T.papara_align_many(states, flags, [read], np.array([0]), scoring)
    assert (int(scores[0]), ops[0]) == want


def test_alignment_by_hand():
    states = np.array([1, 2, 4, 8, 1, 2], dtype=np.uint8)  # ACGTAC
    flags = np.zeros(6, dtype=np.uint8)
    read = np.array([2, 4, 8], dtype=np.uint8)  # CGT
    assert T.papara_align(states, flags, read, PaparaScoring()) == (6, "RMMMRR")


# --------------------------------------------------------------------------------------------
# Work split of the numba backend
# --------------------------------------------------------------------------------------------


def test_query_slices_balance_blocks_over_threads():
    from dpalign.simd.backend import query_slices

    lengths = np.full(2000, 100)
    slices = query_slices(lengths, 7, 2)  # 7 blocks on 2 threads: 2 slices, 14 equal units
    assert [(s.start, s.stop) for s in slices] == [(0, 1000), (1000, 2000)]
    assert query_slices(lengths, 8, 2) == [slice(0, 2000)]
    assert query_slices(lengths, 7, 1) == [slice(0, 2000)]
    covered = np.concatenate([np.arange(2000)[s] for s in query_slices(lengths, 3, 4)])
    assert covered.tolist() == list(range(2000))
    assert query_slices(np.array([5]), 7, 2) == [slice(0, 1)]


def test_reads_beyond_32_bits_are_a_clear_error():
    from dpalign.errors import InputError

    with pytest.raises(InputError, match="too long"):
        P.kernel_width(PaparaScoring(), 2**31)


@pytest.mark.parametrize("lanes", [1, 3, 5, 8, 9, 16, 17])
@pytest.mark.parametrize("protein", [False, True])
def test_narrow_blocks_pack_several_reads_per_vector(lanes, protein, monkeypatch):
    # blocks with <= 16 (8, 4...) live lanes run 2 (4, 8...) reads of equal length at once:
    # DNA in the packed strips (the diagonal from state bits), 20-bit protein sets (too wide
    # for 16-bit lanes) from tables per combination of the reads' states
    packed = []
    read_tuples = P._read_tuples
    monkeypatch.setattr(P, "_read_tuples", lambda *a: packed.append(read_tuples(*a)) or packed[-1])
    rng = np.random.default_rng(lanes)
    n = 21
    if protein:
        states = rng.integers(1, 1 << 20, (lanes, n)).astype(np.uint32)
        reads = [(1 << rng.integers(0, 20, m)).astype(np.uint32) for m in [7] * 5 + [3, 9, 9]]
    else:
        states = rng.integers(1, 16, (lanes, n)).astype(np.uint8)
        reads = [rng.integers(1, 5, m).astype(np.uint8) for m in [7] * 5 + [3, 9, 9, 1]]
    reads.append(np.zeros(0, dtype=states.dtype))
    flags = (rng.random((lanes, n)) < 0.3).astype(np.uint8)
    for scoring in (PaparaScoring(), PaparaScoring("bmc2012")):
        scores, widths = _numba_scores(states, flags, reads, scoring)
        np.testing.assert_array_equal(scores, _reference_scores(states, flags, reads, scoring))
        assert widths[:-1].min() == 16 and not widths[-1].any()
    assert any(p is not None for p in packed) == (lanes <= 16)
    assert P._pack_factor(lanes) == {1: 32, 3: 8, 5: 4, 8: 4, 9: 2, 16: 2, 17: 1}[lanes]


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32])
def test_read_state_index_is_unique_with_inverse(dtype):
    rng = np.random.default_rng(7)
    codes = (1 << rng.integers(0, 8 if dtype == np.uint8 else 24, (40, 13))).astype(dtype)
    codes[3, 5:] = 0  # padding
    states, index = P._state_index(codes)
    want_states, want_index = np.unique(codes, return_inverse=True)
    np.testing.assert_array_equal(states, want_states)
    np.testing.assert_array_equal(index, want_index.reshape(codes.shape))
    assert states.dtype == codes.dtype and index.dtype == np.int64
    assert P._state_index(codes)[1] is index  # once per batch, not per block


def test_tables_and_row_buffers_are_placed_for_the_vector_loads():
    table = P._flat(np.arange(3 * 7 * 32).reshape(3, 7, 32), 16)
    assert table.ctypes.data % 64 == 0 and table.tolist() == list(range(3 * 7 * 32))
    for bits in (16, 32):
        step = 32 * bits // 8
        base = P._aligned_empty(4096, np.uint8).ctypes.data
        # table rows at every 4 KiB offset but one window: the buffers must go there
        bases = [base + k * step for k in range(0, 4096 // step - 3 * P.ALIAS_COLUMNS)]
        hrow, frow = P._row_buffers(bases, 64 * 32, P._DTYPES[bits])
        for buffer in (hrow, frow):
            assert buffer.ctypes.data % 64 == 0 and buffer.size == 64 * 32
            for b in bases:
                assert not 0 < (buffer.ctypes.data - b) % 4096 <= P.ALIAS_COLUMNS * step
