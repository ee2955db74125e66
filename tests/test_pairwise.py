"""dpalign.align / dpalign.score: scikit-bio's scores, inputs, results, empty sequences, errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pairwise_cases import cases, skbio_score, texts
from skbio import DNA, Protein, Sequence, SubstitutionMatrix
from skbio.alignment import PairAlignPath

import dpalign
from dpalign import reference
from dpalign.errors import InputError, OptionError
from dpalign.pairwise import ZIP_GROUP_MIN, align, score


@given(case=cases(), data=st.data())
def test_align_equals_scikit_bio_and_the_reference(case, data):
    a = data.draw(texts(case.letters, 1, 16))
    b = data.draw(texts(case.letters, 1, 16))
    r = align(a, b, case.mode, case.sub, case.gap, case.free_ends, backend="numba")
    assert r.score == skbio_score(case, a, b)
    want = case.ref_align(a, b)
    assert (r.score, r.a_start, r.a_end, r.b_start, r.b_end, r.ops) == (
        want.score,
        want.a_start,
        want.a_end,
        want.b_start,
        want.b_end,
        want.ops,
    )
    assert r.cigar == want.cigar and r.backend == "numba" and r.width == 64


@settings(max_examples=15)
@given(case=cases(), data=st.data())
def test_score_batches_equal_scikit_bio(case, data):
    queries = data.draw(st.lists(texts(case.letters, 1, 14), min_size=1, max_size=3))
    targets = data.draw(st.lists(texts(case.letters, 1, 14), min_size=1, max_size=5))
    got = score(queries, targets, case.mode, case.sub, case.gap, case.free_ends)
    assert got.shape == (len(queries), len(targets))
    want = [[skbio_score(case, a, b) for b in targets] for a in queries]
    assert got.tolist() == want


@given(case=cases(), data=st.data())
def test_zip_equals_the_reference(case, data):
    n = data.draw(st.integers(0, 6))
    queries = [data.draw(texts(case.letters, 0, 12)) for _ in range(n)]
    targets = [data.draw(texts(case.letters, 0, 12)) for _ in range(n)]
    # A query shared by enough pairs goes through the SIMD kernels.
    shared = data.draw(texts(case.letters, 1, 12))
    many = [data.draw(texts(case.letters, 0, 12)) for _ in range(ZIP_GROUP_MIN)]
    got = score(
        queries + [shared] * len(many),
        targets + many,
        case.mode,
        case.sub,
        case.gap,
        case.free_ends,
        pairs="zip",
    )
    want = [
        case.ref(a, b) for a, b in zip(queries + [shared] * len(many), targets + many, strict=True)
    ]
    assert got.tolist() == want


def test_orientation_swap_keeps_scores_with_an_asymmetric_matrix():
    letters = "ACGT"
    rng = np.random.default_rng(9)
    scores = rng.integers(-4, 5, (4, 4))
    matrix = SubstitutionMatrix(list(letters), scores.astype(float))
    queries = ["".join(rng.choice(list(letters), rng.integers(1, 15))) for _ in range(9)]
    targets = ["".join(rng.choice(list(letters), rng.integers(1, 15))) for _ in range(3)]
    s = dpalign.Scoring(matrix, (2, 1))
    for mode, fe in [("global", (True, False, False, True)), ("semiglobal", None), ("local", None)]:
        got = score(queries, targets, mode, matrix, (2, 1), fe)  # 9 > 3: targets go to lanes
        ends = dpalign.scoring.free_ends_tuple(mode, fe)
        for q, a in enumerate(queries):
            for t, b in enumerate(targets):
                want = reference.pairwise_score(
                    s.encode(a), s.encode(b), s.matrix, 2, 1, mode, ends
                ).score
                assert got[q, t] == want


def test_every_input_type_gives_the_same_alignment():
    s = dpalign.Scoring("BLOSUM62", (11, 1))
    a, b = "HEAGAWGHEE", "PAWHEAE"
    forms = [
        (a, b),
        (a.encode(), b.encode()),
        (a.lower(), b.lower()),
        (Protein(a), Protein(b)),
        (Sequence(a), Sequence(b)),
        (s.encode(a), s.encode(b)),
    ]
    results = [align(x, y, "local", "BLOSUM62", (11, 1)) for x, y in forms]
    assert all(r == results[0] for r in results)
    scores = [score(x, [y, y], "local", "BLOSUM62", (11, 1)).tolist() for x, y in forms]
    assert all(r == scores[0] for r in scores)


def test_results_carry_cigar_path_and_gapped_text():
    r = align("ACGTTT", "AGTT", "global", (1, -1), 2)
    assert r.cigar == "1=1D2=1D1=" or r.cigar.count("D") == 2
    assert r.gapped()[0].replace("-", "") == "ACGTTT"[r.a_start : r.a_end]
    path = r.path
    assert isinstance(path, PairAlignPath)
    assert list(path.starts) == [r.a_start, r.b_start]
    assert path.to_cigar() == align("ACGTTT", "AGTT", cigar="M").cigar
    assert set(align("ACGTTT", "AGTT", cigar="M").cigar) <= set("0123456789MID")
    empty = align("AAAA", "TTTT", "local")
    assert (empty.score, empty.cigar, empty.path.shape) == (0, "", (2, 0))


def test_skbio_path_round_trips_through_scikit_bio():
    from skbio import TabularMSA

    a, b = DNA("ACGTACGTTT"), DNA("ACGTCGTT")
    r = align(a, b, "global", (1, -1), (3, 1))
    msa = TabularMSA.from_path_seqs(path=r.path, seqs=[a, b])
    top, bottom = (str(s) for s in msa)
    assert (top, bottom) == r.gapped()


@pytest.mark.parametrize(
    ("a", "b", "mode", "free_ends", "want"),
    [
        ("", "ACG", "global", None, (-(3 + 3), "3I")),
        ("ACG", "", "global", None, (-(3 + 3), "3D")),
        ("", "ACG", "global", (True, False), (0, "")),
        ("ACG", "", "global", (False, True), (0, "")),
        ("", "ACG", "semiglobal", None, (0, "")),
        ("", "ACG", "local", None, (0, "")),
        ("", "", "global", None, (0, "")),
    ],
)
def test_empty_sequences_have_the_documented_result(a, b, mode, free_ends, want):
    r = align(a, b, mode, (1, -1), (3, 1), free_ends)
    assert (r.score, r.cigar) == want
    assert score(a, b, mode, (1, -1), (3, 1), free_ends) == want[0]


def test_reference_backend_agrees():
    rng = np.random.default_rng(10)
    queries = ["".join(rng.choice(list("ACGT"), rng.integers(0, 20))) for _ in range(4)]
    targets = ["".join(rng.choice(list("ACGT"), rng.integers(0, 20))) for _ in range(40)]
    for mode in ("global", "local", "semiglobal"):
        fast = score(queries, targets, mode, (2, -3), (5, 2))
        slow = score(queries, targets, mode, (2, -3), (5, 2), backend="reference")
        assert np.array_equal(fast, slow)
    assert align("ACGT", "AGT", backend="reference") == align("ACGT", "AGT").__class__(
        **{**align("ACGT", "AGT").__dict__, "backend": "reference"}
    )


def test_single_sequences_drop_their_axis_and_widths_come_back():
    assert score("ACGT", "ACGT").shape == ()
    assert score("ACGT", ["A", "C"]).shape == (2,)
    assert score(["A", "C", "G"], "ACGT").shape == (3,)
    scores, widths = score(["ACGT"] * 2, ["ACGT"] * 40, "local", (2, -1), 2, with_width=True)
    assert scores.shape == widths.shape == (2, 40) and (widths == 8).all()
    assert score([], ["ACGT"]).shape == (0, 1)


@given(a=texts("ACGT", 1, 15), b=texts("ACGT", 1, 15), gap=st.sampled_from([2, (3, 1)]))
def test_properties(a, b, gap):
    local = score(a, b, "local", (2, -1), gap)
    glob = score(a, b, "global", (2, -1), gap)
    semi = score(a, b, "semiglobal", (2, -1), gap)
    assert local >= 0 and semi >= glob and local >= semi
    assert local == score(b, a, "local", (2, -1), gap)  # symmetric matrix, symmetric score


def test_bad_input_and_options_are_clear():
    with pytest.raises(InputError, match="position 3.*'1'"):
        align("AC1T", "ACGT")
    with pytest.raises(InputError, match=r"queries\[1\].*position 2"):
        score(["ACGT", "A-GT"], ["ACGT"])
    with pytest.raises(InputError, match="'E' is not in the NUC.4.4 alphabet"):
        align("ACE", "ACGT", sub_score="NUC.4.4")
    with pytest.raises(OptionError, match="did you mean 'local'"):
        align("A", "A", mode="locl")
    with pytest.raises(OptionError, match="BLOSUM62"):
        align("A", "A", sub_score="BLOSUM63")
    with pytest.raises(OptionError, match="positive"):
        align("A", "A", gap_cost=(-2, 1))
    with pytest.raises(OptionError, match="pairs must be"):
        score("A", "A", pairs="some")
    with pytest.raises(OptionError, match="as many queries as targets"):
        score(["A"], ["A", "C"], pairs="zip")
    with pytest.raises(OptionError, match="cigar"):
        align("A", "A", cigar="MX")
    with pytest.raises(OptionError, match="unknown backend 'gpu'"):
        align("A", "A", backend="gpu")


def test_documented_examples_hold():
    import doctest
    import importlib

    for name in ("dpalign.pairwise", "dpalign.search"):
        module = importlib.import_module(name)
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


@pytest.mark.parametrize("mode", ["global", "local", "semiglobal"])
def test_align_takes_the_long_pair_path_above_the_threshold(monkeypatch, mode):
    from dpalign import config
    from dpalign import reference as R
    from dpalign.scoring import Scoring, free_ends_tuple

    rng = np.random.default_rng(11)
    a = "".join(rng.choice(list("ACGT"), 90))
    b = a[10:70] + "".join(rng.choice(list("ACGT"), 25))
    monkeypatch.setattr(config, "LONG_PAIR_CELLS", 100)
    got = align(a, b, mode, (2, -3), (5, 2), backend="numba")
    assert got.backend == "numba (long pair)"
    s = Scoring((2, -3), (5, 2))
    want = R.pairwise_align(s.encode(a), s.encode(b), s.matrix, 5, 2, mode, free_ends_tuple(mode))
    assert (got.score, got.a_start, got.a_end, got.b_start, got.b_end, got.ops) == (
        want.score,
        want.a_start,
        want.a_end,
        want.b_start,
        want.b_end,
        want.ops,
    )


def test_auto_aligns_small_pairs_in_the_oracle_until_its_budget_is_spent(monkeypatch):
    import sys

    from dpalign import config, pairwise

    monkeypatch.delitem(sys.modules, "dpalign.simd.traceback", raising=False)
    monkeypatch.setattr(pairwise, "_oracle_cells", 0)
    monkeypatch.setattr(config, "ALIGN_ORACLE_CELLS", 250)
    small = align("ACGTACGTAC", "ACGAACGTTC")  # 100 cells
    assert small.backend == "reference"
    assert align("ACGTACGTAC", "ACGAACGTTC").backend == "reference"  # 200 cells so far
    third = align("ACGTACGTAC", "ACGAACGTTC")  # would pass 250: Numba from here on
    assert third.backend == "numba"
    assert (third.score, third.ops) == (small.score, small.ops)
    assert align("ACGT", "ACGA").backend == "numba"
