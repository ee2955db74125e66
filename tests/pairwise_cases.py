"""Hypothesis strategies and oracles shared by the pairwise, search and CLI tests."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from dpalign import reference
from dpalign.scoring import Scoring, free_ends_tuple

DNA = "ACGT"
IUPAC = "ACGTNRYSWKMBDHV"
PROTEIN = "ARNDCQEGHILKMFPSTWYV"
SUBS = {
    "dna": [(1, -1), (2, -3), (5, -4), (1, 0), (0, 0), "NUC.4.4"],
    "iupac": [(1, -1), (2, -3), "NUC.4.4"],
    "protein": ["BLOSUM62", "PAM250", "BLOSUM45", (2, -1)],
}
GAPS = [1, 2, 3, 0, (2, 1), (3, 1), (5, 2), (11, 1), (0, 2), (1, 0)]
MODES = ["global", "local", "semiglobal"]
FREE_ENDS = st.one_of(
    st.none(),
    st.booleans(),
    st.tuples(st.booleans(), st.booleans()),
    st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
)


@dataclass(frozen=True)
class Case:
    """One scoring set-up: alphabet letters, scoring, mode, free ends (given and normalised)."""

    letters: str
    sub: object
    gap: object
    scoring: Scoring
    mode: str
    free_ends: object
    ends: tuple

    def ref(self, a, b) -> int:
        """The oracle's score of two texts (or code arrays)."""
        s = self.scoring
        return reference.pairwise_score(
            s.encode(a), s.encode(b), s.matrix, s.gap_open, s.gap_extend, self.mode, self.ends
        ).score

    def ref_align(self, a, b):
        s = self.scoring
        return reference.pairwise_align(
            s.encode(a), s.encode(b), s.matrix, s.gap_open, s.gap_extend, self.mode, self.ends
        )


@st.composite
def cases(draw, kinds=("dna", "iupac", "protein"), modes=MODES, gaps=GAPS):
    kind = draw(st.sampled_from(kinds))
    sub = draw(st.sampled_from(SUBS[kind]))
    gap = draw(st.sampled_from(gaps))
    mode = draw(st.sampled_from(modes))
    free_ends = draw(FREE_ENDS) if mode == "global" else None
    letters = {"dna": DNA, "iupac": IUPAC, "protein": PROTEIN}[kind]
    scoring = Scoring(sub, gap)
    return Case(letters, sub, gap, scoring, mode, free_ends, free_ends_tuple(mode, free_ends))


def texts(letters: str, min_size: int = 0, max_size: int = 25):
    return st.text(letters, min_size=min_size, max_size=max_size)


def skbio_score(case: Case, a: str, b: str) -> float:
    """scikit-bio's ``pair_align`` score for the same problem."""
    from skbio.alignment import pair_align

    if case.mode == "local":
        return pair_align(a, b, mode="local", sub_score=case.sub, gap_cost=case.gap).score
    return pair_align(
        a, b, mode="global", sub_score=case.sub, gap_cost=case.gap, free_ends=case.ends
    ).score


def draw_long_pair(data, scorings, max_len: int):
    """``(scoring, a, b)`` drawn for a long-pair test: a seed, one of ``scorings`` ((sub,
    gap) pairs), lengths 1..``max_len`` and :func:`random_pair`'s unrelated or similar pair."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    sub, gap = data.draw(st.sampled_from(scorings), label="scoring")
    m = data.draw(st.integers(1, max_len), label="m")
    n = data.draw(st.integers(1, max_len), label="n")
    letters = 20 if sub == "BLOSUM62" else 4
    a, b = random_pair(rng, m, n, letters, data.draw(st.booleans(), label="similar"))
    return Scoring(sub, gap), a, b


def random_pair(rng, m, n, letters, similar):
    """Codes of a long-pair test: ``a`` random over ``letters`` codes, ``b`` unrelated or
    ``a`` repeated to length ``n`` with 20% of it mutated (long diagonals, where tiles and
    bands meet the alignment)."""
    a = rng.integers(0, letters, m).astype(np.uint8)
    if similar:
        b = np.resize(a, n).copy()
        mutate = rng.random(n) < 0.2
        b[mutate] = rng.integers(0, letters, int(mutate.sum()))
    else:
        b = rng.integers(0, letters, n).astype(np.uint8)
    return a, b
