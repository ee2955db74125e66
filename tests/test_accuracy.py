"""The accuracy scorer on hand-made cases (issue 15)."""

import numpy as np
import pytest

from dpalign.benchmarks.accuracy import (
    columns_from_alignment,
    columns_from_mafft_map,
    columns_from_stockholm,
    score,
)
from dpalign.benchmarks.simulate import INSERTED as X


def test_score_counts_recall_precision_and_perfect_reads():
    truth = [np.array([0, 1, 2, X]), np.array([X, 3, 4])]
    pred = [np.array([0, 1, 2, X]), np.array([2, 3, X])]
    acc = score(pred, truth)
    # read 2: char 0 inserted but put in column 2 (costs precision), char 2 missed (recall)
    assert (acc.correct, acc.true_in_columns, acc.put_in_columns) == (4, 5, 5)
    assert acc.recall == pytest.approx(4 / 5)
    assert acc.precision == pytest.approx(4 / 5)
    assert acc.perfect == pytest.approx(1 / 2)


def test_score_perfect_needs_inserted_where_inserted():
    acc = score([np.array([X, X])], [np.array([X, X])])
    assert (acc.recall, acc.precision, acc.perfect) == (1.0, 1.0, 1.0)
    acc = score([np.array([X, 5])], [np.array([4, 5])])
    assert (acc.recall, acc.precision, acc.perfect) == (0.5, 1.0, 0.0)


def test_score_rejects_mismatched_lengths():
    with pytest.raises(ValueError):
        score([np.array([1, 2])], [np.array([1])])


def test_columns_from_papara_style_alignment():
    # reference columns 0..3; output has an insertion column between columns 1 and 2
    rows = [
        ("r1", "AC-GT"),
        ("r2", "A--GT"),
        ("q1", "ACTG-"),  # C in column 1, T inserted, G in column 2
        ("q2", "-cA-T"),  # lowercase printed; read had an N that was dropped
    ]
    reads = {"q1": "ACTG", "q2": "CNAT"}
    got = columns_from_alignment(rows, ["r1", "r2"], reads)
    assert got["q1"].tolist() == [0, 1, X, 2]
    assert got["q2"].tolist() == [1, X, X, 3]


def test_columns_from_stockholm_match_and_insert_columns():
    text = """# STOCKHOLM 1.0

q1   AC.G-
r1   AC.GT
#=GC RF xx.xx

q1   -g
#=GC RF .x
//
"""
    got = columns_from_stockholm(text, {"q1": "ACGG"})
    # match columns: 0 1 _ 2 3 | _ 4; q1 = A(0) C(1) G(2) g(4)
    assert got["q1"].tolist() == [0, 1, 2, 4]
    protein = "# STOCKHOLM 1.0\n\nq2   Me-W\n#=GC RF x.xx\n//\n"
    assert columns_from_stockholm(protein, {"q2": "MEW"})["q2"].tolist() == [0, X, 2]


def test_columns_from_mafft_map():
    text = """>q1
# letter, position in the original sequence, position in the reference alignment
a, 1, 3
c, 2, -
g, 3, 4
>q2
# letter, position in the original sequence, position in the reference alignment
t, 1, 1
"""
    got = columns_from_mafft_map(text, {"q1": "ACG", "q2": "T"})
    assert got["q1"].tolist() == [2, X, 3]
    assert got["q2"].tolist() == [0]
