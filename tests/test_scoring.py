import doctest

import numpy as np
import pytest

import dpalign.scoring
from dpalign.errors import OptionError
from dpalign.scoring import (
    PaparaScoring,
    Scoring,
    free_ends_tuple,
    narrowest_width,
    papara_scoring,
)


def test_gap_formula_doctest():
    assert doctest.testmod(dpalign.scoring).failed == 0


def test_scoring_from_pair_matrix_and_name():
    s = Scoring((2, -3), (5, 2))
    assert s.matrix[0, 0] == 2 and s.matrix[0, 1] == -3
    assert s.gap_penalty(1) == 7 and s.gap_penalty(4) == 13
    b = Scoring("blosum62", (11, 1))
    assert b.alphabet.letters.startswith("ARND")
    w = b.matrix[b.alphabet.letters.index("W"), b.alphabet.letters.index("W")]
    assert w == 11


def test_unknown_matrix_lists_close_matches():
    with pytest.raises(OptionError, match="BLOSUM62"):
        Scoring("BLOSUM26")


@pytest.mark.parametrize("gap", [-1, (3, -1), (-3, 2), "2", (1, 2, 3), float("inf"), 1e-9])
def test_bad_gap_costs_are_rejected(gap):
    with pytest.raises(OptionError):
        Scoring((1, -1), gap)


def test_scoring_is_immutable_and_prints_settings():
    s = Scoring((1, -1), (3, 1))
    with pytest.raises(AttributeError):
        s.gap_open = 4
    assert repr(s) == "Scoring(sub_score=match 1, mismatch -1, gap_cost=(3, 1))"


def test_widths():
    assert narrowest_width(-100, 100) == 8
    assert narrowest_width(-100, 200) == 16
    assert narrowest_width(-(2**20), 5) == 32
    s = Scoring((2, -1), (3, 1))
    assert s.width_for(10, 10, "local") == 8
    assert s.width_for(100, 100, "local") == 16
    assert s.width_for(20000, 20000, "local") == 32


def test_free_ends():
    assert free_ends_tuple("global") == (False,) * 4
    assert free_ends_tuple("global", True) == (True,) * 4
    assert free_ends_tuple("global", (True, False)) == (True, True, False, False)
    assert free_ends_tuple("semiglobal") == (True, True, False, False)
    with pytest.raises(OptionError, match="did you mean 'local'"):
        free_ends_tuple("locl")


def test_papara_presets_and_custom():
    assert papara_scoring("papara2") == PaparaScoring()
    assert papara_scoring("-3:-1:2:-3") == PaparaScoring()
    assert papara_scoring("bmc2012").minimize
    custom = papara_scoring("-4:-2:3:-1")
    assert (custom.gap_open, custom.gap_extend, custom.match, custom.match_cgap) == (-4, -2, 3, -1)
    for bad in ("1:2:3", "a:b:c:d", "3:-1:2:-3", "nope"):
        with pytest.raises(OptionError):
            papara_scoring(bad)


def test_papara_width_switches_to_32_bits_for_long_reads():
    s = PaparaScoring()
    assert s.width_for(100) == 16
    assert s.width_for(20000) == 32  # 2 * 20000 > 32767
    assert np.iinfo(np.int16).max >= s.bounds(16000)[1]


def test_papara_max_form_of_the_presets():
    custom = papara_scoring("-4:-2:3:-1").max_form()
    assert (custom.match, custom.mismatch, custom.cgap) == (3, 0, -1)
    assert (custom.e_open, custom.e_ext, custom.f_open, custom.f_ext) == (-4, -2, -4, -2)
    assert (custom.border0, custom.border_step, custom.row_shift) == (0, 0, -2)
    assert custom.last_column and not custom.negate
    bmc = papara_scoring("bmc2012").max_form()
    assert bmc.negate and not bmc.last_column
    assert (bmc.border0, bmc.border_step, bmc.mismatch, bmc.cgap) == (-3, -3, -3, -3)
    assert papara_scoring("bmc2012").minimize and not papara_scoring("papara2").minimize


@pytest.mark.parametrize("spec", ["papara2", "bmc2012", "-4:-2:3:-1", "-2:-2:1:0"])
def test_papara_max_form_bounds_the_reference_scores(spec):
    """The form's bounds hold on the reference's scores (negated for lower-is-better presets)."""
    from dpalign.reference import papara_fill

    scoring = papara_scoring(spec)
    form = scoring.max_form()
    rng = np.random.default_rng(7)
    for m, n in [(1, 1), (5, 40), (30, 12)]:
        states = rng.choice([1, 2, 4, 8, 15], size=n).astype(np.uint8)
        flags = rng.random(n) < 0.3
        read = rng.choice([1, 2, 4, 8], size=m).astype(np.uint8)
        score = int(papara_fill(states, flags, read, scoring).scores[0])
        h = -score if form.negate else score
        assert form.lo + form.lo_per_row * m <= h <= form.hi + form.hi_per_row * m


def test_opencl_kernel_constants_come_from_the_max_form():
    from dpalign.kernels_cl.papara import KernelScoring

    for spec in ["papara2", "bmc2012", "-4:-2:3:-1"]:
        form = papara_scoring(spec).max_form()
        ks = KernelScoring.of(papara_scoring(spec))
        assert (ks.go, ks.ge, ks.goe, ks.gee) == (form.f_open, form.f_ext, form.e_open, form.e_ext)
        assert (ks.mm, ks.ma + ks.mm, ks.mc) == (form.mismatch, form.match, form.cgap)
        assert ks.lb == form.border0 == form.border_step
        assert (ks.last_column, ks.negate) == (form.last_column, form.negate)
