"""The oracle itself: hand-computed matrices, scikit-bio agreement, PaPaRa by hand."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from skbio.alignment import pair_align

from dpalign import reference as R
from dpalign.scoring import PaparaScoring, Scoring, free_ends_tuple


def _align(a, b, scoring, mode, free_ends=None):
    ends = free_ends_tuple(mode, free_ends)
    return R.pairwise_align(
        scoring.encode(a),
        scoring.encode(b),
        scoring.matrix,
        scoring.gap_open,
        scoring.gap_extend,
        mode,
        ends,
    )


def test_fill_linear_matrix_by_hand():
    s = Scoring((1, -1), 2)
    H, *_ = R._fill_pairwise(
        list(s.encode("AC")), list(s.encode("A")), s.matrix, (0, 2), (0, 2), "global", (False,) * 4
    )
    assert H == [[0, -2], [-2, 1], [-4, -1]]


def test_fill_affine_matrix_by_hand():
    # gap of length k costs 3 + k; "AAT" vs "T": T-T match after a gap of 2 (cost 5)
    s = Scoring((2, -1), (3, 1))
    H, D, *_ = R._fill_pairwise(
        list(s.encode("AAT")), list(s.encode("T")), s.matrix, (3, 1), (3, 1), "global", (False,) * 4
    )
    assert [row[0] for row in H] == [0, -4, -5, -6]
    assert H[3][1] == -5 + 2  # gap AA (3 + 2) then T=T (+2)
    assert H[2][1] == -5 and D[2][1] == -5  # A/T mismatch then a gap of 1 (3 + 1)
    assert D[3][1] == D[2][1] - 1  # extending that gap beats opening a new one


def test_global_by_hand():
    r = _align("ACGT", "AGT", Scoring((1, -1), 2), "global")
    assert (r.score, r.cigar) == (1, "1=1D2=")
    assert (r.a_start, r.a_end, r.b_start, r.b_end) == (0, 4, 0, 3)


def test_local_by_hand():
    r = _align("TTACGTT", "GGACGGG", Scoring((2, -1), 3), "local")
    assert (r.score, r.cigar) == (6, "3=")
    assert (r.a_start, r.a_end, r.b_start, r.b_end) == (2, 5, 2, 5)


def test_semiglobal_by_hand():
    r = _align("ACG", "TTACGTT", Scoring((1, -1), 2), "semiglobal")
    assert (r.score, r.cigar) == (3, "3=")
    assert (r.b_start, r.b_end) == (2, 5)


def test_empty_sequences_have_defined_results():
    s = Scoring((1, -1), (3, 1))
    assert _align("", "ACG", s, "global").score == -(3 + 3)
    assert _align("", "ACG", s, "global", (True, False)).score == 0
    assert _align("", "ACG", s, "local").score == 0
    assert _align("", "", s, "global").score == 0


def test_local_zero_score_is_an_empty_alignment():
    r = _align("AAAA", "TTTT", Scoring((1, -1), 2), "local")
    assert (r.score, r.ops, r.a_start, r.a_end) == (0, "", 0, 0)


DNA_SEQ = st.text("ACGT", min_size=1, max_size=14)
PROT_SEQ = st.text("ARNDCQEGHILKMFPSTWYV", min_size=1, max_size=14)
GAPS = st.sampled_from([1, 2, 3, (2, 1), (3, 1), (5, 2), (11, 1), (0, 2)])
MODES = st.sampled_from(["global", "local", "semiglobal"])
FREE_ENDS = st.one_of(
    st.none(),
    st.booleans(),
    st.tuples(st.booleans(), st.booleans()),
    st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
)


@given(
    a=DNA_SEQ,
    b=DNA_SEQ,
    gap=GAPS,
    mode=MODES,
    free_ends=FREE_ENDS,
    sub=st.sampled_from([(1, -1), (2, -3), (5, -4), "NUC.4.4"]),
)
def test_dna_scores_equal_scikit_bio(a, b, gap, mode, free_ends, sub):
    s = Scoring(sub, gap)
    fe = free_ends if mode == "global" else None
    r = _align(a, b, s, mode, fe)
    if mode == "local":
        want = pair_align(a, b, mode="local", sub_score=sub, gap_cost=gap).score
    else:
        ends = free_ends_tuple(mode, fe)
        want = pair_align(a, b, mode="global", sub_score=sub, gap_cost=gap, free_ends=ends).score
    assert r.score == want
    enc_a, enc_b = s.encode(a), s.encode(b)
    assert (
        R.rescore(r.ops, enc_a, enc_b, s.matrix, s.gap_open, s.gap_extend, r.a_start, r.b_start)
        == r.score
    )
    assert r.ops.count("=") + r.ops.count("X") + r.ops.count("D") == r.a_end - r.a_start
    assert r.ops.count("=") + r.ops.count("X") + r.ops.count("I") == r.b_end - r.b_start


@given(
    a=PROT_SEQ,
    b=PROT_SEQ,
    gap=GAPS,
    mode=MODES,
    matrix=st.sampled_from(["BLOSUM62", "PAM250", "BLOSUM45"]),
)
def test_protein_scores_equal_scikit_bio(a, b, gap, mode, matrix):
    s = Scoring(matrix, gap)
    r = _align(a, b, s, mode)
    skmode, ends = ("local", True) if mode == "local" else ("global", free_ends_tuple(mode))
    assert (
        r.score
        == pair_align(a, b, mode=skmode, sub_score=matrix, gap_cost=gap, free_ends=ends).score
    )


@given(a=DNA_SEQ, b=DNA_SEQ, gap=GAPS, mode=MODES)
def test_score_only_agrees_with_traceback(a, b, gap, mode):
    s = Scoring((2, -1), gap)
    full = _align(a, b, s, mode)
    only = R.pairwise_score(s.encode(a), s.encode(b), s.matrix, s.gap_open, s.gap_extend, mode)
    assert (only.score, only.a_end, only.b_end) == (full.score, full.a_end, full.b_end)


def test_local_scores_are_symmetric_for_symmetric_matrices():
    s = Scoring("BLOSUM62", (11, 1))
    a, b = "HEAGAWGHEE", "PAWHEAE"
    assert _align(a, b, s, "local").score == _align(b, a, s, "local").score


# ---------------------------------------------------------------------------------------------
# PaPaRa


def _states(text):
    return np.array(["_ACMGRSVTWYHKDB-".index(c) for c in text], dtype=np.uint8)


def test_papara_by_hand():
    ref, flags, read = _states("ACGT"), np.zeros(4, np.uint8), _states("CG")
    score, ops = R.papara_align(ref, flags, read, PaparaScoring())
    assert score == 4 and ops == "RMMR"


def test_papara_flag_makes_gaps_free_and_matches_costly():
    ref, read = _states("ACGT"), _states("AT")
    plain = R.papara_align(ref, np.zeros(4, np.uint8), read, PaparaScoring())
    flagged = R.papara_align(ref, np.array([0, 1, 1, 0], np.uint8), read, PaparaScoring())
    # Unflagged, a gap over C G costs 3 + 1 + 1, more than a match gains: the best score is
    # 2, first reached (row-major) with A on A and T on C.
    assert plain == (2, "MMRR")
    # Flagged columns make the gap free: both A and T match.
    assert flagged == (4, "MRRM")


def test_papara_insertions_and_ends():
    ref, read = _states("AAAA"), _states("CCAAAACC")
    score, ops = R.papara_align(ref, np.zeros(4, np.uint8), read, PaparaScoring())
    assert score == 8
    assert ops.count("M") + ops.count("R") == 4 and ops.count("M") + ops.count("I") == 8


@given(
    st.randoms(), st.integers(1, 12), st.integers(1, 10), st.sampled_from(["papara2", "bmc2012"])
)
def test_papara_traceback_is_consistent(rnd, n, m, kind):
    ref = np.array([rnd.randrange(1, 16) for _ in range(n)], np.uint8)
    flags = np.array([rnd.random() < 0.3 for _ in range(n)], np.uint8)
    read = np.array([1 << rnd.randrange(4) for _ in range(m)], np.uint8)
    scoring = PaparaScoring(kind)
    score, ops = R.papara_align(ref, flags, read, scoring)
    assert ops.count("M") + ops.count("R") == n and ops.count("M") + ops.count("I") == m
    lanes = R.papara_fill(np.stack([ref, ref], 1), np.stack([flags, flags], 1), read, scoring)
    assert list(lanes.scores) == [score, score]


def test_papara_lanes_are_independent():
    rng = np.random.default_rng(3)
    ref = rng.integers(1, 16, (20, 5)).astype(np.uint8)
    flags = (rng.random((20, 5)) < 0.2).astype(np.uint8)
    read = (1 << rng.integers(0, 4, 9)).astype(np.uint8)
    together = R.papara_fill(ref, flags, read, PaparaScoring()).scores
    alone = [
        R.papara_fill(ref[:, k], flags[:, k], read, PaparaScoring()).scores[0] for k in range(5)
    ]
    assert list(together) == alone


@pytest.mark.parametrize("kind", ["papara2", "bmc2012"])
def test_papara_score_fits_its_bounds(kind):
    s = PaparaScoring(kind)
    rng = np.random.default_rng(1)
    ref = rng.integers(1, 16, 30).astype(np.uint8)
    read = (1 << rng.integers(0, 4, 25)).astype(np.uint8)
    score = R.papara_fill(ref, np.zeros(30, np.uint8), read, s).scores[0]
    lo, hi = s.bounds(25)
    assert lo <= score <= hi
