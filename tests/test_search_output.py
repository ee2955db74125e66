"""`dpalign search` end to end: BLAST tabular rows, Karlin-Altschul statistics, strands,
and the run options (report, hybrid, Dask)."""

import json
import math

import numpy as np
import pytest
from cli_helpers import run_cli as _run

from dpalign import reference
from dpalign.alphabet import reverse_complement
from dpalign.errors import InputError, OptionError
from dpalign.scoring import Scoring
from dpalign.search import alignment_counts, search
from dpalign.stats import (
    format_bit_score,
    format_evalue,
    length_adjustment,
    parameters,
)

PROTEIN = "ARNDCQEGHILKMFPSTWYV"


def _fasta(names, seqs):
    return "".join(f">{n}\n{s}\n" for n, s in zip(names, seqs, strict=True))


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


def _hand_evalue(lam, K, alpha, beta, m, n, N, S):
    """The E-value written out: plain fixed-point iteration for the length adjustment."""
    ell = 0.0
    for _ in range(200):
        ell = beta + alpha / lam * math.log(K * (m - ell) * (n - N * ell))
    ell = math.floor(ell)
    return K * (m - ell) * (n - N * ell) * math.exp(-lam * S)


@pytest.mark.parametrize(
    ("matrix", "gaps", "row", "m", "n", "N", "S"),
    [
        # blast_stat.c blosum62_values, 11/1: lambda .267, K .041, alpha 1.9, beta -30
        ("BLOSUM62", (11, 1), (0.267, 0.041, 1.9, -30), 375, 100_000_000, 300_000, 100),
        ("BLOSUM62", (11, 1), (0.267, 0.041, 1.9, -30), 1000, 5_000_000, 20_000, 40),
        # blosum45_values 14/2, pam30_values 9/1
        ("BLOSUM45", (14, 2), (0.195, 0.032, 1.9, -36), 250, 2_000_000, 8_000, 55),
        ("PAM30", (9, 1), (0.294, 0.11, 0.48, -6), 60, 30_000_000, 90_000, 70),
    ],
)
def test_evalues_match_blasts_formula_by_hand(matrix, gaps, row, m, n, N, S):
    ka = parameters(Scoring(matrix, gaps))
    lam, K, alpha, beta = row
    want = _hand_evalue(lam, K, alpha, beta, m, n, N, S)
    got = float(ka.evalue(S, m, n, N))
    assert got == pytest.approx(want, rel=0.01)
    assert ka.bit_score(S) == pytest.approx((lam * S - math.log(K)) / math.log(2), rel=1e-12)


def test_nucleotide_parameters_and_scaled_scores():
    plain = parameters(Scoring((1, -2), (2, 2)))  # blastn_values_1_2: 2/2 -> 1.33, 0.62
    assert (plain.lam, plain.K) == (1.33, 0.62)
    linear = parameters(Scoring((1, -1), 2))  # linear gaps are BLAST's 0/2
    assert (linear.lam, linear.K) == (0.80, 0.064)
    doubled = parameters(Scoring((2, -4), (4, 4)))  # every score times 2: lambda / 2
    assert doubled.lam == pytest.approx(plain.lam / 2) and doubled.K == plain.K
    assert doubled.evalue(60, 500, 10**6, 100) == pytest.approx(plain.evalue(30, 500, 10**6, 100))
    even = parameters(Scoring((2, -3), (4, 4)))  # odd scores round down to even
    assert even.round_down and even.evalue(41, 100, 10**5, 10) == even.evalue(40, 100, 10**5, 10)
    assert parameters(Scoring("NUC.4.4", (10, 6))).lam == 0.163


def test_scorings_without_parameters_say_what_is_supported():
    with pytest.raises(OptionError, match=r"BLOSUM62 with gap costs 10/3.*11/1"):
        parameters(Scoring("BLOSUM62", (10, 3)))
    with pytest.raises(OptionError, match="mismatch -7.*1/-2"):
        parameters(Scoring((1, -7), 2))
    with pytest.raises(OptionError, match="gap costs 5/5.*0/2"):
        parameters(Scoring((1, -1), (5, 5)))


def test_length_adjustment_is_zero_for_tiny_searches():
    assert length_adjustment(0.041, 1.9 / 0.267, -30, 5, 10, 1) == 0


def test_blast_number_formats():
    # align_format_util.cpp GetScoreString and tabular.cpp SetScores
    assert format_evalue(0.0) == "0.0" and format_evalue(1e-181) == "0.0"
    assert format_evalue(1.61e-102) == "1.61e-102"
    assert format_evalue(3e-5) == "3.00e-05"
    assert format_evalue(0.0042) == "0.004"
    assert format_evalue(0.25) == "0.25" and format_evalue(2.345) == "2.3"
    assert format_evalue(123.4) == "123"
    assert format_bit_score(8.46) == " 8.5" and format_bit_score(99.9) == "99.9"
    assert format_bit_score(123.9) == "123"  # truncated, as BLAST's (long) cast
    assert format_bit_score(123456.0) == "1.235e+05"


def test_alignment_counts_follow_blast():
    assert alignment_counts("==X=DDI==") == (9, 5, 1, 2)
    assert alignment_counts("") == (0, 0, 0, 0)


# --------------------------------------------------------------------------------------------
# --outfmt 6 rows against the reference
# --------------------------------------------------------------------------------------------


def test_outfmt6_rows_agree_with_the_reference(files, capsys):
    rng = np.random.default_rng(21)
    targets = ["".join(rng.choice(list(PROTEIN), rng.integers(5, 80))) for _ in range(60)]
    queries = [targets[4][3:50], "".join(rng.choice(list(PROTEIN), 40))]
    q = files("q.fa", _fasta(["qa", "qb"], queries))
    db = files("db.fa", _fasta([f"s{k}" for k in range(60)], targets))
    opts = ["--matrix", "BLOSUM62", "--gap-open", "11", "--gap-extend", "1", "--top", "7"]
    code, out, _ = _run(["search", "--query", q, "--db", db, *opts, "--outfmt", "6"], capsys)
    assert code == 0
    rows = [line.split("\t") for line in out.splitlines()]
    assert len(rows) == 14 and all(len(r) == 12 for r in rows)
    scoring = Scoring("BLOSUM62", (11, 1))
    ka = parameters(scoring)
    residues = sum(len(t) for t in targets)
    for qname, query in zip(["qa", "qb"], queries, strict=True):
        mine = [r for r in rows if r[0] == qname]
        a = scoring.encode(query)
        refs = {}
        for k, t in enumerate(targets):
            refs[k] = reference.pairwise_align(a, scoring.encode(t), scoring.matrix, 11, 1, "local")
        ranked = sorted(refs, key=lambda k: (-refs[k].score, k))[:7]
        assert [r[1] for r in mine] == [f"s{k}" for k in ranked]
        for row, k in zip(mine, ranked, strict=True):
            ref = refs[k]
            length, ident, mismatch, opens = alignment_counts(ref.ops)
            assert row[2] == f"{100 * ident / length:.3f}"
            assert row[3:6] == [str(length), str(mismatch), str(opens)]
            assert row[6:10] == [str(ref.a_start + 1), str(ref.a_end)] + [
                str(ref.b_start + 1),
                str(ref.b_end),
            ]
            assert row[10] == format_evalue(float(ka.evalue(ref.score, len(query), residues, 60)))
            assert row[11] == format_bit_score(float(ka.bit_score(ref.score)))
    assert rows[0][2] == "100.000" and rows[0][1] == "s4"
    code, out, _ = _run(
        ["search", "--query", q, "--db", db, *opts, "--outfmt", "6", "--evalue", "1e-5"], capsys
    )
    assert [line.split("\t")[:2] for line in out.splitlines()] == [["qa", "s4"]]
    code, _, err = _run(["search", "--query", q, "--db", db, "--evalue", "1"], capsys)
    assert code == 1 and "--outfmt 6" in err


def test_outfmt6_refuses_modes_and_scorings_without_statistics(files, capsys):
    q = files("q.fa", ">q\nACGT\n")
    code, _, err = _run(
        ["search", "--query", q, "--db", q, "--outfmt", "6", "--mode", "global"], capsys
    )
    assert code == 1 and "--mode local" in err
    code, _, err = _run(
        ["search", "--query", q, "--db", q, "--outfmt", "6", "--match", "1", "--mismatch", "-7"],
        capsys,
    )
    assert code == 1 and "no E-values" in err


# --------------------------------------------------------------------------------------------
# Strands
# --------------------------------------------------------------------------------------------


def test_reverse_complement():
    assert reverse_complement("ACGTn-R") == "Y-nACGT"
    assert reverse_complement(b"AACU") == b"AGTT"
    with pytest.raises(InputError) as info:
        reverse_complement("ACE")
    assert info.value.column == 3


def test_both_strands_find_reverse_complemented_targets(files, capsys):
    rng = np.random.default_rng(5)
    targets = ["".join(rng.choice(list("ACGT"), rng.integers(20, 90))) for _ in range(40)]
    query = targets[9][5:45]
    targets[30] = "GG" + reverse_complement(query) + "TT"
    plus = search(query, targets, top=3, gap_cost=(2, 1))
    both = search(query, targets, top=3, gap_cost=(2, 1), strand="both")
    assert {h.index for h in plus} != {h.index for h in both}
    minus = next(h for h in both if h.index == 30)
    assert minus.strand == "-" and minus.score == len(query)
    assert (minus.query_start, minus.query_end, minus.target_start) == (0, len(query), 2)
    assert next(h for h in both if h.index == 9).strand == "+"
    q = files("q.fa", f">q\n{query}\n")
    db = files("db.fa", _fasta([f"t{k}" for k in range(40)], targets))
    code, out, _ = _run(
        [
            "search",
            "--query",
            q,
            "--db",
            db,
            "--strand",
            "both",
            "--outfmt",
            "6",
            "--top",
            "2",
            "--match",
            "1",
            "--mismatch",
            "-2",
            "--gap-open",
            "2",
            "--gap-extend",
            "2",
        ],
        capsys,
    )
    row = next(r.split("\t") for r in out.splitlines() if r.split("\t")[1] == "t30")
    # blastn style: query on its plus strand, target coordinates reversed
    assert row[6:10] == ["1", str(len(query)), str(2 + len(query)), "3"]
    code, out, _ = _run(
        ["search", "--query", q, "--db", db, "--strand", "both", "--top", "2"], capsys
    )
    assert {line.split("\t")[-1] for line in out.splitlines()} == {"+", "-"}
    with pytest.raises(OptionError, match="nucleotide scoring"):
        search("ACGT", ["ACGT"], sub_score="BLOSUM62", gap_cost=(11, 1), strand="both")
    with pytest.raises(OptionError, match="nucleotide sequences"):
        search("ACGE", ["ACGT"], strand="both")


# --------------------------------------------------------------------------------------------
# Run options
# --------------------------------------------------------------------------------------------


def _small_search_files(files):
    rng = np.random.default_rng(8)
    targets = ["".join(rng.choice(list("ACGT"), rng.integers(10, 70))) for _ in range(50)]
    q = files("q.fa", _fasta(["q0", "q1"], [targets[2][:30], targets[40]]))
    db = files("db.fa", _fasta([f"t{k}" for k in range(50)], targets))
    return q, db


def test_report_has_the_phases(files, capsys, tmp_path):
    q, db = _small_search_files(files)
    report = tmp_path / "r.json"
    code, out, err = _run(["search", "--query", q, "--db", db, "--report", str(report)], capsys)
    assert code == 0
    data = json.loads(report.read_text())
    assert data["command"] == "search" and data["settings"]["targets"] == 50
    assert {"read", "pack", "search", "traceback"} <= set(data["phases"])
    assert data["phases"]["search"]["cells"] == data["settings"]["cells"] > 0


def _rows(argv, capsys):
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    return out


def test_dask_hybrid_and_opencl_give_the_numba_hits(files, capsys, monkeypatch):
    q, db = _small_search_files(files)
    base = ["search", "--query", q, "--db", db, "--top", "5"]
    want = _rows([*base, "--backend", "numba"], capsys)
    assert _rows([*base, "--dask-workers", "1"], capsys) == want
    pytest.importorskip("pyopencl")
    from dpalign.devices import opencl_devices

    devices, _ = opencl_devices()
    if not devices:
        pytest.skip("no OpenCL device")
    device = devices[0]["id"]
    assert _rows([*base, "--backend", "hybrid", "--device", device], capsys) == want
    assert _rows([*base, "--backend", "opencl", "--device", device], capsys) == want
    both = [*base, "--strand", "both", "--outfmt", "6", "--match", "1", "--mismatch", "-2"]
    both += ["--gap-open", "2", "--gap-extend", "2"]
    assert _rows([*both, "--backend", "opencl", "--device", device], capsys) == _rows(
        [*both, "--backend", "numba"], capsys
    )


def test_opencl_chunks_are_traced_back_in_workers_while_the_next_are_scored(
    files, capsys, monkeypatch, tmp_path
):
    """A device search in several chunks (one device pipeline) with the traceback in worker
    processes: each ranked chunk's printed hits go to the workers during the search (the
    compile child is done), and every row (E-value filter, zero-score local hits left out)
    is numba's."""
    import multiprocessing
    import subprocess
    import sys
    from concurrent.futures import ProcessPoolExecutor

    import dpalign.cli as cli
    from dpalign.kernels_cl import backend as backend_module

    pytest.importorskip("pyopencl")
    from dpalign.devices import opencl_devices

    devices, _ = opencl_devices()
    if not devices:
        pytest.skip("no OpenCL device")
    rng = np.random.default_rng(12)
    targets = ["".join(rng.choice(list(PROTEIN), rng.integers(5, 60))) for _ in range(40)]
    queries = [targets[k][3:40] for k in (1, 5, 9, 20)]
    queries += ["".join(rng.choice(list(PROTEIN), n)) for n in (1, 8, 33)]
    q = files("q.fa", _fasta([f"q{k}" for k in range(len(queries))], queries))
    db = files("db.fa", _fasta([f"t{k}" for k in range(40)], targets))
    base = ["search", "--query", q, "--db", db, "--top", "6", "--matrix", "BLOSUM62"]
    base += ["--gap-open", "11", "--gap-extend", "1", "--outfmt", "6", "--evalue", "5"]
    want = _rows([*base, "--backend", "numba"], capsys)
    assert 0 < len(want.splitlines()) < 6 * len(queries)  # the filter left some out

    def done_child(*_):
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        child.wait()
        return child

    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    monkeypatch.setattr(cli, "_start_traceback_compile", done_child)
    monkeypatch.setattr(cli, "_start_trace_workers", lambda *_: pool)
    monkeypatch.setattr(backend_module, "QUERY_CHUNK_MAX", 2)  # four chunks
    report = tmp_path / "r.json"
    device = ["--backend", "opencl", "--device", devices[0]["id"], "--report", str(report)]
    try:
        assert _rows([*base, *device], capsys) == want
    finally:
        pool.shutdown()
    traced = json.loads(report.read_text())["settings"]["traceback"]
    assert traced["hits"] == len(want.splitlines()) and traced["jobs"] >= 3
    assert 0 < traced["during_search"] <= traced["hits"]


def test_scheduler_option_reaches_a_running_cluster(files, capsys):
    distributed = pytest.importorskip("distributed")
    q, db = _small_search_files(files)
    base = ["search", "--query", q, "--db", db, "--top", "5"]
    want = _rows([*base, "--backend", "numba"], capsys)
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        assert _rows([*base, "--scheduler", cluster.scheduler_address], capsys) == want


# --------------------------------------------------------------------------------------------
# Start-up: named matrices without scikit-bio
# --------------------------------------------------------------------------------------------


def test_a_named_matrix_equals_the_given_scikit_bio_matrix():
    from skbio import SubstitutionMatrix

    named = Scoring("blosum62", (11, 1))
    given = Scoring(SubstitutionMatrix.by_name("BLOSUM62"), (11, 1))
    assert np.array_equal(named.matrix, given.matrix)


def test_naming_a_matrix_does_not_import_scikit_bio():
    import subprocess
    import sys

    code = (
        "import sys; from dpalign.scoring import Scoring; Scoring('BLOSUM62', (11, 1)); "
        "print('skbio' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_database_from_one_buffer_equals_one_from_sequences():
    from dpalign.search import Database

    rng = np.random.default_rng(4)
    seqs = ["".join(rng.choice(list(PROTEIN), rng.integers(0, 90))) for _ in range(300)]
    scoring = Scoring("BLOSUM62", (11, 1))
    residues = scoring.encode("".join(seqs))
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in seqs])])
    names = [f"p{k}" for k in range(300)]
    fast = Database.from_codes(residues, offsets, names, sub_score=scoring)
    slow = Database(seqs, names=names, sub_score=scoring)
    for a, b in zip(fast.blocks(), slow.blocks(), strict=True):
        assert np.array_equal(a.codes, b.codes) and np.array_equal(a.ids, b.ids)
    hits = search(seqs[7][5:60], fast, 5, sub_score="BLOSUM62", gap_cost=(11, 1))
    assert [(h.target, h.score) for h in hits] == [
        (h.target, h.score)
        for h in search(seqs[7][5:60], slow, 5, sub_score="BLOSUM62", gap_cost=(11, 1))
    ]
    with pytest.raises(OptionError, match="names"):
        Database.from_codes(residues, offsets, names[:-1], sub_score=scoring)
    with pytest.raises(OptionError, match="offsets"):
        Database.from_codes(residues, offsets[::-1].copy(), names, sub_score=scoring)


def test_a_bad_database_character_names_its_line(files, capsys):
    q = files("q.fa", ">q\nACGT\n")
    db = files("db.fa", ">a\nACGT\n>b\nAC\nG!T\n")
    code, _, err = _run(["search", "--query", q, "--db", db], capsys)
    assert code == 1 and "db.fa:5, record 'b', position 4" in err and "'!'" in err


def test_search_kernels_load_without_scipy_linalg_and_numba_blas_still_works():
    """Numba's BLAS probe (``import scipy.linalg``, 0.13-0.28 s) is refused while dpalign
    loads Numba's CPU target; BLAS in Numba code still works later."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from dpalign.search import Database, search\n"
        "db = Database(['ACGTAC', 'TTGA'], sub_score=(2, -3))\n"
        "hits = search('ACG', db, 2, sub_score=(2, -3), gap_cost=(5, 2), backend='numba')\n"
        "print(hits[0].score, hits[0].cigar, 'scipy.linalg' in sys.modules)\n"
        "import numba, numpy as np\n"
        "print(numba.njit(lambda a: np.dot(a, a))(np.ones(3)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["6 3= False", "3.0"]


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_hits_trace_back_on_the_searchs_backend(backend):
    from dpalign.search import traceback_backend

    hits = search("ACGTAC", ["TTACGTACTT", "ACG"], 2, sub_score=(2, -3), backend=backend)
    assert [h.alignment.backend for h in hits] == [backend, backend]
    assert [(h.score, h.cigar) for h in hits] == [(12, "6="), (6, "3=")]

    class Device:
        kind, threads = "device", 1

    assert traceback_backend(Device()).name == "numba"


def test_the_database_reader_gives_the_records_codes(files):
    from dpalign.cli import _read_database

    scoring = Scoring("BLOSUM62", (11, 1))
    path = files("db.fa", ">a x\nAR\nND\n\n>b\n>c\r\nW Y\n")
    names, residues, offsets = _read_database(path, scoring)
    assert names == ["a", "b", "c"] and offsets.tolist() == [0, 4, 4, 6]
    assert np.array_equal(residues, scoring.encode("ARNDWY"))
