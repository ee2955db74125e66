"""The peers' conventions (issue 14): decimal scores, wildcards and unknown residues, both
strands, gap opening cheaper than extension, separate gap costs for a and b, case sensitivity.

Each is checked against the peer whose convention it is (scikit-bio's ``pair_align``,
Biopython's ``PairwiseAligner``) on random inputs, and on every CPU backend.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpalign
from dpalign import alphabet, reference
from dpalign.errors import InputError, OptionError
from dpalign.scoring import Scoring, free_ends_tuple

DNA = "ACGT"
MODES = ["global", "local", "semiglobal"]


def _biopython(mode, match=None, mismatch=None, a_gap=(0, 1), b_gap=(0, 1), **extra):
    """A Biopython PairwiseAligner with dpalign's ``(o, e)`` gaps in a and in b.

    ``aligner.score(a, b)``: a is Biopython's target; a gap in the target is an
    "insertion" (a character of the query alone), a gap in the query a "deletion".
    """
    from Bio.Align import PairwiseAligner

    aligner = PairwiseAligner(mode="local" if mode == "local" else "global", **extra)
    if match is not None:
        aligner.match_score, aligner.mismatch_score = match, mismatch
    aligner.open_insertion_score = -(a_gap[0] + a_gap[1])
    aligner.extend_insertion_score = -a_gap[1]
    aligner.open_deletion_score = -(b_gap[0] + b_gap[1])
    aligner.extend_deletion_score = -b_gap[1]
    if mode == "semiglobal":  # a end to end, b's ends free: gaps in a at its ends cost nothing
        aligner.end_insertion_score = 0.0
    return aligner


# --------------------------------------------------------------------------------------------
# 1. decimal scores
# --------------------------------------------------------------------------------------------

DECIMAL_SUBS = [(1, -1), (1.5, -1), (9.5, -0.5), (2.5, -3.5), (0.25, -0.75)]
DECIMAL_GAPS = [(10, 0.5), (9.5, 0.5), 2.5, (0.5, 1.5), 1, (2, 0.25)]


def test_decimal_scores_are_scaled_exactly_and_reported_in_the_users_units():
    s = Scoring((9.5, -0.5), (10, 0.5))
    assert s.scale == 2 and s.matrix[0, 0] == 19 and s.matrix[0, 1] == -1
    assert (s.gap_open, s.gap_extend) == (20, 1)
    assert s.gap_cost == (10, 0.5) and s.gap_penalty(2) == 11
    assert repr(s) == "Scoring(sub_score=match 9.5, mismatch -0.5, gap_cost=(10, 0.5))"
    got = dpalign.align("ACGT", "AGT", sub_score=(9.5, -0.5), gap_cost=(10, 0.5))
    assert got.score == 3 * 9.5 - 10.5 and isinstance(got.score, float)
    assert Scoring((1, -1), 0.1).scale == 10 and Scoring((0.125, -1)).scale == 8
    # whole scores keep their integer results
    plain = dpalign.align("ACGT", "AGT")
    assert isinstance(plain.score, int)
    assert dpalign.score(["AC"], ["AC", "A"]).dtype == np.int64


def test_a_scale_beyond_the_limit_is_refused_clearly():
    with pytest.raises(OptionError, match="scale above"):
        Scoring((1 / 3, -1))
    with pytest.raises(OptionError, match="finite"):
        Scoring((1, float("-inf")))


def test_decimal_matrices_are_scaled_too():
    from skbio import SubstitutionMatrix

    m = SubstitutionMatrix("ACGT", np.where(np.eye(4, dtype=bool), 2.5, -1.25))
    s = Scoring(m, (3, 0.5))
    assert s.scale == 4 and s.matrix[0, 0] == 10 and s.matrix[0, 1] == -5
    assert dpalign.align("ACGT", "ACGA", sub_score=m, gap_cost=(3, 0.5)).score == 7.5 - 1.25


def test_width_checks_see_the_scaled_values():
    coarse, fine = Scoring((1, -1), 1), Scoring((1.001, -1), 1)
    assert fine.scale == 1000
    assert coarse.width_for(100, 100, "local") == 8
    assert fine.width_for(100, 100, "local") == 32  # 100 * 1001 does not fit 16 bits
    a = "ACGT" * 25
    scores, width = dpalign.score([a], [a, a[:50]], "local", (1.001, -1), 1, with_width=True)
    assert scores.tolist() == [[100.1, 50.05]] and width.min() >= 32


@settings(max_examples=30)
@given(
    a=st.text(DNA, max_size=14),
    b=st.text(DNA, max_size=14),
    sub=st.sampled_from(DECIMAL_SUBS),
    gap=st.sampled_from(DECIMAL_GAPS),
    mode=st.sampled_from(MODES),
)
def test_decimal_scores_equal_scikit_bio_and_biopython(a, b, sub, gap, mode):
    from skbio.alignment import pair_align

    ends = free_ends_tuple(mode)
    want_skbio = None
    if a and b:  # scikit-bio refuses empty sequences
        if mode == "local":
            want_skbio = pair_align(a, b, mode="local", sub_score=sub, gap_cost=gap).score
        else:
            want_skbio = pair_align(
                a, b, mode="global", sub_score=sub, gap_cost=gap, free_ends=ends
            ).score
    o, e = gap if isinstance(gap, tuple) else (0, gap)
    for backend in ("reference", "numba"):
        got = dpalign.align(a, b, mode, sub, gap, backend=backend).score
        assert dpalign.score(a, b, mode, sub, gap, backend=backend) == got
        if want_skbio is not None:
            assert got == pytest.approx(want_skbio, abs=1e-4)  # scikit-bio adds in float32
        if a and b:
            bio = _biopython(mode, *sub, a_gap=(o, e), b_gap=(o, e)).score(a, b)
            assert got == pytest.approx(bio, abs=1e-9)


def test_cli_takes_decimal_scores(tmp_path, capsys):
    from dpalign.cli import main

    (tmp_path / "a.fa").write_text(">a\nACGT\n")
    (tmp_path / "b.fa").write_text(">b\nAGT\n")
    argv = ["align", str(tmp_path / "a.fa"), str(tmp_path / "b.fa"), "--format", "cigar"]
    argv += ["--match", "9.5", "--mismatch", "-0.5", "--gap-open", "10", "--gap-extend", "0.5"]
    assert main(argv) == 0
    assert capsys.readouterr().out.split("\t")[2] == "18.0"
    with pytest.raises(SystemExit):  # not a decimal number: argparse's usage error
        main([*argv[:-2], "--gap-extend", "1/3"])
    assert "--gap-extend" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# 2. wildcards, degenerate codes, unknown residues
# --------------------------------------------------------------------------------------------


@settings(max_examples=30)
@given(
    a=st.text("ACGTN", min_size=1, max_size=14),
    b=st.text("ACGTN", min_size=1, max_size=14),
    mode=st.sampled_from(["global", "local"]),
    gap=st.sampled_from([(2, 1), (0, 2), (3, 0.5)]),
)
def test_wildcard_scores_zero_against_anything_as_in_biopython(a, b, mode, gap):
    scoring = Scoring((2, -1), gap, wildcard="N")
    bio = _biopython(mode, 2, -1, a_gap=gap, b_gap=gap, wildcard="N").score(a, b)
    for backend in ("reference", "numba"):
        assert dpalign.align(a, b, mode, scoring=scoring, backend=backend).score == bio
        assert dpalign.score(a, b, mode, scoring=scoring, backend=backend) == bio


def test_wildcard_is_added_to_a_matrix_that_lacks_it():
    s = Scoring("BLOSUM62", (10, 1), wildcard="?")
    assert s.alphabet.letters.endswith("?")
    q = s.alphabet.index["?"]
    assert not s.matrix[q].any() and not s.matrix[:, q].any()
    assert dpalign.align("W?W", "WAW", scoring=s).score == 22
    assert Scoring((1, -1)) == Scoring((1, -1))  # without a wildcard: today's scheme


def test_skbio_degenerate_codes_map_to_the_matrix_wildcard_like_pair_align():
    import skbio
    from skbio import SubstitutionMatrix
    from skbio.alignment import pair_align

    m = SubstitutionMatrix("ACGTN", np.where(np.eye(5, dtype=bool), 3, -2))
    a, b = skbio.DNA("ACRGTYA"), skbio.DNA("ACNGTCA")
    want = pair_align(a, b, mode="global", sub_score=m, gap_cost=2, free_ends=False).score
    assert dpalign.align(a, b, sub_score=m, gap_cost=2).score == want
    with pytest.raises(InputError, match="'R' is not in"):  # plain text has no such rule
        dpalign.align(str(a), str(b), sub_score=m, gap_cost=2)


def test_unknown_residues_take_the_named_row_or_a_fixed_score():
    with pytest.raises(InputError, match="'U' is not in the BLOSUM62 alphabet"):
        dpalign.align("MKUV", "MKCV", sub_score="BLOSUM62")  # the default: an error
    as_x = Scoring("BLOSUM62", (10, 1), unknown="X")
    assert (
        dpalign.align("MKUV", "MKCV", scoring=as_x).score
        == dpalign.align("MKXV", "MKCV", sub_score="BLOSUM62", gap_cost=(10, 1)).score
    )
    fixed = Scoring("BLOSUM62", (10, 1), unknown=-7)
    got = dpalign.align("MKUV", "MKCV", scoring=fixed, backend="numba").score
    assert got == 5 + 5 - 7 + 4  # M/M 5, K/K 5, U/C -7, V/V 4
    with pytest.raises(InputError, match="'1'"):  # only letters (and *) are residues
        dpalign.align("MK1V", "MKCV", scoring=as_x)
    with pytest.raises(OptionError, match="unknown='J'"):
        Scoring("BLOSUM62", unknown="J")


# --------------------------------------------------------------------------------------------
# 3. both strands (align and score; search has its own tests)
# --------------------------------------------------------------------------------------------


def test_reverse_complement_helpers():
    assert alphabet.reverse_complement("ACGTRYN-acgu") == "acgt-NRYACGT"
    assert alphabet.reverse_complement(b"AACG") == b"CGTT"
    s = Scoring((1, -1))
    codes = alphabet.reverse_complement_codes(s.encode("AACGN"), s.alphabet)
    assert s.alphabet.decode(codes) == "NCGTT"
    with pytest.raises(InputError, match="position 3.*no complement"):
        alphabet.reverse_complement("ACEG")
    with pytest.raises(InputError, match="no complement"):
        blosum = Scoring("BLOSUM62")
        alphabet.reverse_complement_codes(blosum.encode("AEW"), blosum.alphabet)


@settings(max_examples=25)
@given(
    a=st.text(DNA, min_size=1, max_size=15),
    b=st.text(DNA, min_size=1, max_size=15),
    mode=st.sampled_from(MODES),
)
def test_both_strands_keep_the_better_and_say_which(a, b, mode):
    rc = alphabet.reverse_complement(b)
    plus = dpalign.align(a, b, mode, (2, -3), (5, 2))
    minus = dpalign.align(a, rc, mode, (2, -3), (5, 2))
    both = dpalign.align(a, b, mode, (2, -3), (5, 2), strand="both")
    assert both.score == max(plus.score, minus.score)
    assert both.strand == ("-" if minus.score > plus.score else "+")
    chosen = minus if both.strand == "-" else plus
    assert (both.ops, both.b_start, both.b_end) == (chosen.ops, chosen.b_start, chosen.b_end)
    assert both.b_text == (rc if both.strand == "-" else b)
    only_minus = dpalign.align(a, b, mode, (2, -3), (5, 2), strand="minus")
    assert only_minus.strand == "-" and only_minus.score == minus.score
    got = dpalign.score([a, b], [b, a], mode, (2, -3), (5, 2), strand="both")
    want = np.maximum(
        dpalign.score([a, b], [b, a], mode, (2, -3), (5, 2)),
        dpalign.score([a, b], [rc, alphabet.reverse_complement(a)], mode, (2, -3), (5, 2)),
    )
    assert got.tolist() == want.tolist()
    zipped = dpalign.score([a, b], [b, a], mode, (2, -3), (5, 2), pairs="zip", strand="both")
    assert zipped.tolist() == [want[0, 0], want[1, 1]]


def test_strand_is_checked_and_protein_has_none():
    with pytest.raises(OptionError, match="strand must be"):
        dpalign.align("ACGT", "ACGT", strand="reverse")
    with pytest.raises(InputError, match="no complement"):
        dpalign.align("MEW", "MEW", sub_score="BLOSUM62", strand="both")
    plain = dpalign.align("ACGT", "ACGT")
    assert plain.strand is None and "strand" not in plain.as_dict()
    assert dpalign.align("ACGT", "ACGT", strand="both").as_dict()["strand"] == "+"


def test_cli_align_both_strands(tmp_path, capsys):
    from dpalign.cli import main

    (tmp_path / "a.fa").write_text(">a\nAAACCCGGT\n")
    (tmp_path / "b.fa").write_text(">b\nACCGGGTTT\n")
    argv = ["align", str(tmp_path / "a.fa"), str(tmp_path / "b.fa"), "--format", "json"]
    assert main([*argv, "--strand", "both", "--mode", "local"]) == 0
    import json

    got = json.loads(capsys.readouterr().out)[0]
    assert got["strand"] == "-" and got["score"] == 9


# --------------------------------------------------------------------------------------------
# 4. gap opening cheaper than extension; separate gap costs for a and b
# --------------------------------------------------------------------------------------------

GAP_PAIRS = [(0, 1), (2, 1), (-1, 2), (-2, 3), (3, 0), (1, 2), (-1, 1)]


@settings(max_examples=50)
@given(
    a=st.text(DNA, max_size=12),
    b=st.text(DNA, max_size=12),
    a_gap=st.sampled_from(GAP_PAIRS),
    b_gap=st.sampled_from(GAP_PAIRS),
    mode=st.sampled_from(MODES),
    sub=st.sampled_from([(2, -1), (1, -2), (3, -3)]),
)
def test_reference_gap_schemes_equal_biopython(a, b, a_gap, b_gap, mode, sub):
    s = Scoring(sub, a_gap_cost=a_gap, b_gap_cost=b_gap)
    r = reference.pairwise_align(
        s.encode(a),
        s.encode(b),
        s.matrix,
        None,
        None,
        mode,
        free_ends_tuple(mode),
        a_gap=s.a_gap,
        b_gap=s.b_gap,
    )
    if a and b:  # Biopython refuses empty sequences
        assert r.score == _biopython(mode, *sub, a_gap=a_gap, b_gap=b_gap).score(a, b)
    # the path re-scores to the score, and no gap is split into two adjacent openings
    assert (
        reference.rescore(
            r.ops,
            s.encode(a),
            s.encode(b),
            s.matrix,
            None,
            None,
            r.a_start,
            r.b_start,
            a_gap=s.a_gap,
            b_gap=s.b_gap,
        )
        == r.score
    )
    got = dpalign.align(a, b, mode, scoring=s)  # auto: the reference computes these
    assert got.score == r.score and got.ops == r.ops
    assert got.backend == ("reference" if s.kernel_problem() else "numba")
    assert dpalign.score([a], [b, a], mode, scoring=s).tolist() == [
        [r.score, dpalign.align(a, a, mode, scoring=s).score]
    ]
    if mode != "semiglobal":  # (semiglobal is not symmetric in a and b)
        assert dpalign.align(b, a, mode, scoring=s.transposed()).score == r.score


def test_cheap_opening_does_not_split_gaps():
    # o = -2, e = 3: one gap of 2 costs 4, two gaps of 1 would cost 2; they must be one gap.
    s = Scoring((1, -5), (-2, 3))
    r = dpalign.align("AACCTT", "AATT", scoring=s)
    assert r.cigar == "2=2D2=" and r.score == 4 - 4


def test_equal_gap_costs_for_a_and_b_are_the_plain_scheme():
    assert Scoring((1, -1), 2, a_gap_cost=2, b_gap_cost=2) == Scoring((1, -1), 2)
    assert Scoring((1, -1), (3, 1)).kernel_problem() is None


@pytest.mark.parametrize(
    "gaps, problem",
    [
        ({"gap_cost": (-1, 2)}, "gap opening cheaper than extension"),
        ({"gap_cost": 2, "a_gap_cost": (3, 1)}, "separate gap costs for a and b"),
    ],
)
def test_kernel_backends_refuse_what_they_cannot_compute(gaps, problem):
    scoring = Scoring((1, -1), **gaps)
    for backend in ("numba", "opencl"):
        with pytest.raises(OptionError, match=f"{problem}.*not by '{backend}'"):
            dpalign.align("ACGT", "AGT", scoring=scoring, backend=backend)
    with pytest.raises(OptionError, match=problem):
        dpalign.score(["ACGT"], ["AGT"], scoring=scoring, backend="numba")
    with pytest.raises(OptionError, match=problem):
        dpalign.search("ACGT", ["AGT", "ACG"], scoring=scoring, backend="numba")
    from dpalign.longpair import align_long

    with pytest.raises(OptionError, match=problem):
        align_long(scoring.encode("ACGT"), scoring.encode("AGT"), scoring, "global")
    hits = dpalign.search("ACGT", ["AGT", "ACG"], scoring=scoring)  # auto: the reference
    assert [h.alignment.backend for h in hits] == ["reference", "reference"]


def test_cli_takes_a_negative_gap_open_when_open_plus_extend_is_positive(tmp_path, capsys):
    from dpalign.cli import main

    (tmp_path / "a.fa").write_text(">a\nAACCTT\n")
    (tmp_path / "b.fa").write_text(">b\nAATT\n")
    argv = ["align", str(tmp_path / "a.fa"), str(tmp_path / "b.fa"), "--format", "cigar"]
    assert main([*argv, "--gap-open=-2", "--gap-extend", "3", "--mismatch", "-5"]) == 0
    assert capsys.readouterr().out.split("\t")[7].strip() == "2=2D2="
    assert main([*argv, "--gap-open=-4", "--gap-extend", "3"]) != 0
    assert "o + e >= 0" in capsys.readouterr().err
    search = ["search", "--query", str(tmp_path / "a.fa"), "--db", str(tmp_path / "b.fa")]
    assert main([*search, "--gap-open=-2", "--gap-extend", "3", "--mode", "global"]) == 0
    assert capsys.readouterr().out.split("\t")[2] == "0"  # 4 matches, one gap of 2 costs 4
    assert main([*search, "--gap-open=-2", "--gap-extend", "3", "--backend", "numba"]) == 1
    assert "reference backend only" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# 5. case sensitivity; bug 6 (symbol order) and bug 7 (non-ASCII symbols)
# --------------------------------------------------------------------------------------------


def _case_matrix(letters):
    """+2 for the same symbol, 0 for the same letter in the other case, -1 otherwise."""
    from skbio import SubstitutionMatrix

    k = len(letters)
    scores = np.full((k, k), -1.0)
    for i, x in enumerate(letters):
        for j, y in enumerate(letters):
            scores[i, j] = 2 if x == y else 0 if x.upper() == y.upper() else -1
    return SubstitutionMatrix(letters, scores)


@pytest.mark.parametrize("letters", ["acgtACGT", "ACGTacgt", "AaCcGgTt", "tgcaTGCA"])
def test_matrices_with_both_cases_keep_them_apart_whatever_the_symbol_order(letters):
    m = _case_matrix(letters)
    for backend in ("reference", "numba"):
        assert dpalign.align("ACGT", "AcgT", sub_score=m, backend=backend).score == 4
        assert dpalign.align("acgt", "acgt", sub_score=m, backend=backend).score == 8
    s = Scoring(m)
    assert s.alphabet.decode(s.encode("AcgT")) == "AcgT"


def test_case_sensitive_switch():
    m = _case_matrix("ACGT")
    folded = Scoring(m)  # the default, as today: lowercase reads as uppercase
    assert dpalign.align("acgt", "ACGT", scoring=folded).score == 8
    strict = Scoring(m, case_sensitive=True)
    with pytest.raises(InputError, match="'a' is not in"):
        dpalign.align("acgt", "ACGT", scoring=strict)
    with_unknown = Scoring(m, case_sensitive=True, unknown=-3)
    assert dpalign.align("aCGT", "ACGT", scoring=with_unknown).score == 6 - 3
    with pytest.raises(OptionError, match="both 'a' and 'A'"):
        Scoring(_case_matrix("acgtACGT"), case_sensitive=False)
    lower_only = Scoring(_case_matrix("acgt"))
    assert dpalign.align("ACGT", "acgt", scoring=lower_only).score == 8


@settings(max_examples=20)
@given(a=st.text("ABCαβγ", max_size=10), b=st.text("ABCαβγ", max_size=10))
def test_non_ascii_symbols_work_like_biopython(a, b):
    from Bio.Align import PairwiseAligner, substitution_matrices

    letters = "ABCαβγ"
    bio_matrix = substitution_matrices.Array(letters, dims=2)
    for i, x in enumerate(letters):
        for j, y in enumerate(letters):
            bio_matrix[x, y] = 3 if i == j else (1 if (i < 3) == (j < 3) else -2)
    s = Scoring(bio_matrix, (2, 1))
    for backend in ("reference", "numba"):
        got = dpalign.align(a, b, scoring=s, backend=backend)
        assert got.a_text == a and got.b_text == b
        if a and b:
            aligner = PairwiseAligner(substitution_matrix=bio_matrix)
            aligner.open_gap_score, aligner.extend_gap_score = -3, -1
            assert got.score == aligner.score(a, b)


def test_symbols_in_latin1_and_code_arrays_decode():
    from skbio import SubstitutionMatrix

    m = SubstitutionMatrix("ACé", np.eye(3) * 3 - 1)
    s = Scoring(m)
    codes = np.array([0, 2, 1], dtype=np.uint8)
    got = dpalign.align(codes, codes, scoring=s)
    assert got.a_text == "AéC" and got.score == 6
    hits = dpalign.search("AéC", ["CéA", "AéC"], scoring=s)
    assert hits[0].target == "1" and hits[0].score == 6


def test_what_matrix_symbols_may_be_is_said():
    from types import SimpleNamespace

    bad = SimpleNamespace(alphabet=["A", "CG"], scores=np.zeros((2, 2)))
    with pytest.raises(OptionError, match="single printable characters"):
        Scoring(bad)
    ascii_only = Scoring((1, -1))
    with pytest.raises(InputError, match="'α' is not in the letters alphabet"):
        dpalign.align("Aα", "A", scoring=ascii_only)


def test_schemes_pickle_for_worker_processes():
    import pickle

    s = Scoring((9.5, -0.5), (10, 0.5), wildcard="N", unknown="N", case_sensitive=True)
    t = pickle.loads(pickle.dumps(s))
    assert t == s and repr(t) == repr(s) and t.scale == 2
    assert dpalign.align("ACGa", "ACGT", scoring=t).score == 3 * 9.5  # a: unknown, as N


def test_cli_wildcard_unknown_and_case_options(tmp_path, capsys):
    from dpalign.cli import main

    (tmp_path / "a.fa").write_text(">a\nMKUV\n")
    (tmp_path / "b.fa").write_text(">b\nMKCV\n")
    (tmp_path / "n.fa").write_text(">n\nACNT\n")
    (tmp_path / "l.fa").write_text(">l\nacgt\n")

    def cigar_score(*argv):
        assert main(["align", *map(str, argv[:2]), "--format", "cigar", *argv[2:]]) == 0
        return capsys.readouterr().out.split("\t")[2]

    a, b, n, low = (tmp_path / f for f in ("a.fa", "b.fa", "n.fa", "l.fa"))
    blosum = ["--matrix", "BLOSUM62", "--gap-open", "10", "--gap-extend", "1"]
    assert cigar_score(a, b, *blosum, "--unknown", "X") == str(5 + 5 - 2 + 4)
    assert cigar_score(a, b, *blosum, "--unknown", "-7") == str(5 + 5 - 7 + 4)
    assert cigar_score(n, low, "--match", "2", "--wildcard", "N") == "6"
    assert main(["align", str(n), str(low), "--case-sensitive"]) == 1
    assert "'a' is not in" in capsys.readouterr().err


@settings(max_examples=10)
@given(data=st.data())
def test_scaled_and_extended_schemes_run_unchanged_on_opencl(cl_device, data):
    """The OpenCL kernels see only whole numbers and a bigger alphabet: same scores."""
    from dpalign.engine import get_backend

    scoring = data.draw(
        st.sampled_from(
            [
                Scoring((2.5, -1.5), (3.5, 0.5)),
                Scoring("BLOSUM62", (10, 1), unknown=-4, wildcard="J"),
                Scoring((1, -1), 2, wildcard="N"),
            ]
        )
    )
    letters = "ACGTN" if scoring.alphabet.name == "letters" else "ARNDCWYVUJO"
    queries = data.draw(st.lists(st.text(letters, min_size=1, max_size=20), min_size=1, max_size=3))
    targets = data.draw(st.lists(st.text(letters, max_size=30), min_size=1, max_size=40))
    mode = data.draw(st.sampled_from(MODES))
    backend = get_backend("opencl", device=cl_device)
    got = dpalign.score(queries, targets, mode, scoring=scoring, backend=backend)
    want = dpalign.score(queries, targets, mode, scoring=scoring, backend="reference")
    assert got.tolist() == want.tolist()
