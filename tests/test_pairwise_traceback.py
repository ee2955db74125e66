"""The Numba traceback kernel gives the reference's alignments, not merely equal scores."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pairwise_cases import cases, texts

from dpalign import reference
from dpalign.errors import OptionError
from dpalign.simd import traceback as T


def _numba(case, a, b):
    s = case.scoring
    return T.align_pair(s.encode(a), s.encode(b), s, case.mode == "local", case.ends)


def _fields(r):
    return (r.score, r.a_start, r.a_end, r.b_start, r.b_end, r.ops)


@given(case=cases(), data=st.data())
def test_alignments_are_identical_to_the_reference(case, data):
    a = data.draw(texts(case.letters, 0, 18))
    b = data.draw(texts(case.letters, 0, 18))
    assert _numba(case, a, b) == _fields(case.ref_align(a, b))


@given(case=cases(kinds=("dna",)), data=st.data())
def test_ties_everywhere_still_identical(case, data):
    # Two-letter sequences under small integer scores tie constantly.
    a = data.draw(texts("AC", 0, 14))
    b = data.draw(texts("AC", 0, 14))
    assert _numba(case, a, b) == _fields(case.ref_align(a, b))


@given(case=cases(), data=st.data())
def test_cigar_rescores_to_the_score(case, data):
    a = data.draw(texts(case.letters, 1, 18))
    b = data.draw(texts(case.letters, 1, 18))
    score, a0, a1, b0, b1, ops = _numba(case, a, b)
    s = case.scoring
    assert (
        reference.rescore(ops, s.encode(a), s.encode(b), s.matrix, s.gap_open, s.gap_extend, a0, b0)
        == score
    )
    assert ops.count("=") + ops.count("X") + ops.count("D") == a1 - a0
    assert ops.count("=") + ops.count("X") + ops.count("I") == b1 - b0


def test_a_long_pair_is_identical():
    from pairwise_cases import Case

    from dpalign.scoring import Scoring, free_ends_tuple

    rng = np.random.default_rng(8)
    a = "".join(rng.choice(list("ACGT"), 260))
    b = "".join(rng.choice(list("ACGT"), 240))
    for mode in ("global", "local", "semiglobal"):
        s = Scoring((2, -3), (5, 2))
        case = Case("ACGT", (2, -3), (5, 2), s, mode, None, free_ends_tuple(mode))
        assert _numba(case, a, b) == _fields(case.ref_align(a, b))


def test_size_limit_gives_a_clear_error(monkeypatch):
    from dpalign.pairwise import align

    monkeypatch.setattr(T, "MAX_TRACEBACK_CELLS", 100)
    with pytest.raises(OptionError, match="traceback cells.*limit of 100"):
        align("A" * 10, "A" * 10)
    assert align("A" * 8, "A" * 10).score == 8 - 2 * 2
