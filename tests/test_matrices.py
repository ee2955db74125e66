"""dpalign's copy of the named substitution matrices equals scikit-bio's, and loads without it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from dpalign.errors import OptionError
from dpalign.scoring import Scoring, substitution_matrix


def test_every_named_matrix_equals_scikit_bio():
    skbio = pytest.importorskip("skbio")
    names = skbio.SubstitutionMatrix.get_names()
    for name in names:
        ours, theirs = substitution_matrix(name), skbio.SubstitutionMatrix.by_name(name)
        assert ours.alphabet == tuple(theirs.alphabet)
        np.testing.assert_array_equal(ours.scores, theirs.scores)
        np.testing.assert_array_equal(ours.to_skbio().scores, theirs.scores)
    assert len(names) == 9


def test_names_are_case_insensitive_and_unknown_names_suggest_close_ones():
    assert substitution_matrix("blosum62") is substitution_matrix("BLOSUM62")
    with pytest.raises(OptionError, match="did you mean BLOSUM62"):
        substitution_matrix("BLOSUM26")


def test_a_named_matrix_does_not_import_scikit_bio():
    code = (
        "import sys; from dpalign.scoring import Scoring; "
        "s = Scoring('BLOSUM62', (11, 1)); print(int(s.matrix[0, 0]), 'skbio' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["4", "False"]
    assert Scoring("BLOSUM62").matrix[0, 0] == 4
