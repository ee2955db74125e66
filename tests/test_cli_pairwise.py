"""`dpalign align` and `dpalign search`: outputs, coordinates, and every kind of bad input."""

import json

import pytest
from cli_helpers import run_cli as _run

from dpalign.cli import main
from dpalign.pairwise import align
from dpalign.search import search


def test_align_formats(files, capsys):
    a = files("a.fa", ">q1 first\nHEAGAWGHEE\n>q2\nPAWHEAE\n")
    b = files("b.fa", ">t1\nPAWHEAE\n")
    opts = ["--matrix", "BLOSUM62", "--gap-open", "11", "--gap-extend", "1", "--mode", "local"]
    code, out, _ = _run(["align", a, b, *opts, "--format", "cigar"], capsys)
    want = align("HEAGAWGHEE", "PAWHEAE", "local", "BLOSUM62", (11, 1))
    assert code == 0
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows[0] == [
        "q1",
        "t1",
        str(want.score),
        str(want.a_start + 1),
        str(want.a_end),
        str(want.b_start + 1),
        str(want.b_end),
        want.cigar,
    ]
    assert rows[1][:3] == ["q2", "t1", "44"] and rows[1][-1] == "7="
    code, out, _ = _run(["align", a, b, *opts, "--format", "json"], capsys)
    data = json.loads(out)
    assert data[0]["a"] == "q1" and data[0]["a_start"] == want.a_start  # 0-based in JSON
    assert data[0]["cigar"] == want.cigar
    code, out, _ = _run(["align", a, b, *opts, "--format", "fasta"], capsys)
    top, bottom = want.gapped()
    assert out.splitlines()[:4] == [f">q1 score={want.score}", top, ">t1", bottom]
    code, out, _ = _run(["align", a, b, *opts], capsys)
    assert "# q1 vs t1: score 17" in out and "HEA" in out


def test_align_defaults_are_the_library_defaults(files, capsys):
    a = files("a.fa", ">a\nACGTTT\n")
    b = files("b.fa", ">b\nAGTT\n")
    code, out, _ = _run(["align", a, b, "--format", "cigar", "--cigar", "M"], capsys)
    want = align("ACGTTT", "AGTT", cigar="M")
    assert out.split("\t")[2] == str(want.score) and out.split("\t")[-1].strip() == want.cigar


def test_linear_gaps_with_gap_open_zero(files, capsys):
    a = files("a.fa", ">a\nACGTACGTAC\n")
    b = files("b.fa", ">b\nACGACGTTAC\n")
    _, out, _ = _run(
        ["align", a, b, "--gap-open", "0", "--gap-extend", "3", "--format", "cigar"], capsys
    )
    assert int(out.split("\t")[2]) == align("ACGTACGTAC", "ACGACGTTAC", gap_cost=3).score


def test_search_rows_are_blast_style(files, capsys):
    db_text = "".join(f">s{k}\n{seq}\n" for k, seq in enumerate(["TTACGTAGG", "ACG", "GGGG"]))
    q = files("q.fa", ">read\nACGTA\n")
    db = files("db.fa", db_text)
    code, out, err = _run(["search", "--query", q, "--db", db, "--top", "2"], capsys)
    assert code == 0
    hits = search("ACGTA", ["TTACGTAGG", "ACG", "GGGG"], top=2)
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows == [
        [
            "read",
            f"s{h.index}",
            str(h.score),
            str(h.query_start + 1),
            str(h.query_end),
            str(h.target_start + 1),
            str(h.target_end),
        ]
        for h in hits
    ]
    assert rows[0][:7] == ["read", "s0", "5", "1", "5", "3", "7"]
    assert "GCUPS" in err and "1 queries x 3 targets" in err


def test_search_help_says_coordinates_are_one_based(capsys):
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    assert "1-based and inclusive" in capsys.readouterr().out.replace("\n", " ").replace("  ", " ")


def test_empty_sequences_give_the_defined_result(files, capsys):
    a = files("a.fa", ">a\nACGT\n>nothing\n\n")
    b = files("b.fa", ">b\nACG\n")
    code, out, _ = _run(
        ["align", a, b, "--format", "cigar", "--gap-open", "3", "--gap-extend", "1"], capsys
    )
    assert code == 0
    assert out.splitlines()[1].split("\t") == ["nothing", "b", "-6", "0", "0", "1", "3", "3I"]
    code, out, _ = _run(["search", "--query", b, "--db", a], capsys)
    assert code == 0 and [row.split("\t")[1] for row in out.splitlines()] == ["a"]
    # a global search does report the empty target
    code, out, _ = _run(["search", "--query", b, "--db", a, "--mode", "global"], capsys)
    assert out.splitlines()[-1].split("\t")[:3] == ["b", "nothing", "-6"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--matrix", "BLOSUM63"], "did you mean BLOSUM62"),
        (["--matrix", "BLOSUM62", "--mismatch", "-2"], "--mismatch goes with --match"),
        (["--gap-open", "-3"], "o + e >= 0"),
    ],
)
def test_bad_options_exit_with_a_message(files, capsys, args, message):
    q = files("q.fa", ">q\nACGT\n")
    code, _, err = _run(["search", "--query", q, "--db", q, *args], capsys)
    assert code == 1 and message in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gap-extend", "-3"], "gap costs are positive numbers"),
        (["--gap-extend", "x"], "expected a number"),
        (["--match", "inf"], "expected a number"),
        (["--top", "0"], "at least 1"),
        (["--mode", "glocal"], "invalid choice"),
    ],
)
def test_bad_numbers_are_usage_errors(files, capsys, args, message):
    q = files("q.fa", ">q\nACGT\n")
    with pytest.raises(SystemExit) as exc:
        main(["search", "--query", q, "--db", q, *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_input_files(files, capsys, tmp_path):
    good = files("good.fa", ">g\nACGT\n")
    bad_char = files("bad.fa", ">x\nACGT\n>y\nACGT\nAC1GT\n")
    code, _, err = _run(["search", "--query", bad_char, "--db", good], capsys)
    assert code == 1
    assert "bad.fa:5" in err and "record 'y'" in err and "position 7" in err and "'1'" in err
    code, _, err = _run(["align", good, str(tmp_path / "missing.fa")], capsys)
    assert code == 1 and "no such file" in err
    not_fasta = files("nf.fa", "ACGT\n>x\nAC\n")
    code, _, err = _run(["align", not_fasta, good], capsys)
    assert code == 1 and "not FASTA" in err
    empty = files("empty.fa", "")
    code, _, err = _run(["search", "--query", good, "--db", empty], capsys)
    assert code == 1 and "empty" in err
    protein = files("p.fa", ">p\nHEAGAWGHEE\n")
    code, _, err = _run(["align", protein, good, "--matrix", "NUC.4.4"], capsys)
    assert code == 1 and "p.fa:2" in err and "'E' is not in the NUC.4.4 alphabet" in err


def test_search_progress_bar_on_request(files, capsys):
    q = files("q.fa", ">q\nACGTACGT\n")
    db = files("db.fa", "".join(f">t{k}\nACGTTGCA\n" for k in range(100)))
    code, out, err = _run(["search", "--query", q, "--db", db, "--progress", "--top", "1"], capsys)
    assert code == 0 and "searching" in err and "cell" in err
    code, out, err = _run(["search", "--query", q, "--db", db, "--top", "1"], capsys)
    assert "searching" not in err  # not a terminal, few cells: no bar


@pytest.mark.slow
def test_search_compiles_traceback_kernels_in_a_child(tmp_path, monkeypatch):
    """On a device backend the traceback kernels compile in child processes while the
    device searches, the short-pair kernels, the long pairs' tile fill and their traceback
    side by side: the children fill Numba's disk cache, which the parent then loads."""
    from dpalign.cli import _finish_traceback_compile, _start_traceback_compile
    from dpalign.scoring import Scoring

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("dpalign.config.cpu_threads", lambda threads=None: 4)
    child = _start_traceback_compile(Scoring("BLOSUM62", (11, 1)), "local", 1)
    assert child is not None
    _finish_traceback_compile(child)
    assert child.returncode == 0 and len(child.children) == 3
    names = {p.name.split("-")[0] for p in tmp_path.rglob("*.nbi")}  # Numba's cache indexes
    want = {"traceback.align_pair_kernel", "antidiagonal.fill_worker", "antidiagonal.trace_blocks"}
    assert want <= names


def test_held_back_hits_go_to_the_workers_once_the_kernels_are_compiled():
    """Hits ranked while the traceback kernels still compile wait; when the compile ends
    they go to the workers at once (not at the next chunk), and finish() collects them."""
    import multiprocessing
    import threading
    from concurrent.futures import ProcessPoolExecutor

    from dpalign.cli import _HitTracer
    from dpalign.scoring import Scoring
    from dpalign.search import search_many

    scoring = Scoring("BLOSUM62", (11, 1))
    texts = ["ARNDCQEGHILKMFPSTWYV" * 3, "WWARNDCQ", "KMFPSTWYVARND"]
    hits = [h for q in search_many(["ARNDCQ", "MFPST"], texts, 2, scoring=scoring) for h in q]
    compiled = threading.Event()
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    try:
        tracer = _HitTracer(pool, 1, compiled.is_set, compiled.wait)
        tracer.add(hits)
        assert not tracer.jobs and tracer.early == 0  # held back
        compiled.set()
        for _ in range(200):
            if tracer.jobs:
                break
            threading.Event().wait(0.01)
        assert tracer.early == len(hits)  # handed out by the waiting thread
        report = tracer.finish(hits)
    finally:
        pool.shutdown()
    assert report["hits"] == len(hits) and report["during_search"] == len(hits)
    assert all(h._alignment is not None for h in hits)


def test_hits_traced_back_in_worker_processes_are_the_same():
    """The process-pool traceback (device searches with many hits) gives every hit the
    alignment it would trace itself, and a broken pool leaves the work to threads."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import numpy as np

    from dpalign.cli import _trace_back
    from dpalign.scoring import Scoring
    from dpalign.search import search_many

    rng = np.random.default_rng(3)
    letters = np.array(list("ARNDCQEGHILKMFPSTWYV"))
    texts = ["".join(rng.choice(letters, n)) for n in rng.integers(20, 300, 60)]
    queries = [texts[k][5:90] for k in (1, 7)] + ["".join(rng.choice(letters, 120))]
    scoring = Scoring("BLOSUM62", (11, 1))

    def hits():
        found = search_many(queries, texts, top=7, scoring=scoring, backend="reference")
        return [h for per_query in found for h in per_query]

    want = [h.alignment for h in hits()]
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    got = hits()
    try:
        _trace_back(got, 1, pool)
        assert all(h._alignment is not None for h in got)  # traced in the workers
    finally:
        pool.shutdown()
    assert [(a.score, a.cigar, a.a_start, a.b_start) for a in (h.alignment for h in got)] == [
        (a.score, a.cigar, a.a_start, a.b_start) for a in want
    ]
    broken = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    broken.shutdown()
    again = hits()
    _trace_back(again, 2, broken)  # submit fails on a shut pool: threads take over
    assert [h.alignment.cigar for h in again] == [a.cigar for a in want]
