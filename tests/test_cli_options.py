"""Options the CLI checks before any work, and the messages of issue 14's bad-input tour."""

from __future__ import annotations

import os

import pytest

from dpalign.cli import main
from dpalign.errors import BackendUnavailable, InputError
from dpalign.io import read_alignment, read_phylip

TREE = "((t1:0.1,t2:0.2):0.05,t3:0.3,t4:0.1);"
ROWS = [
    ("t1", "ACGTACGTAC-GT"),
    ("t2", "ACGTACCTAC-GT"),
    ("t3", "ACGAACGTACTGT"),
    ("t4", "ACGTTCGTAC-GA"),
]


def _fasta(rows):
    return "".join(f">{n}\n{s}\n" for n, s in rows)


@pytest.fixture
def paths(tmp_path):
    def write(name, text):
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return {
        "tree": write("tree.nwk", TREE),
        "msa": write("ref.fasta", _fasta(ROWS)),
        "reads": write("reads.fasta", ">r1\nACGTACG\n>r2\nCGTAC\n"),
        "dir": tmp_path,
        "write": write,
    }


def _papara(paths, *extra, **over):
    p = {**paths, **over}
    argv = ["papara", "--ref", p["tree"], "--msa", p["msa"], "--reads", p["reads"]]
    return main([*argv, "--backend", "reference", *extra])


def _run(capsys, code_of):
    code = code_of()
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


# --------------------------------------------------------------------------------------------
# 1-3: outputs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        ["--placements", "-"],
        ["--report", "-"],
        ["--out", "OUT", "--placements", "-", "--report", "-"],
        ["--split-out", "-"],
    ],
)
def test_two_outputs_on_standard_output_are_refused(paths, capsys, extra):
    extra = [str(paths["dir"] / "o.phy") if e == "OUT" else e for e in extra]
    code, out, err = _run(capsys, lambda: _papara(paths, *extra))
    assert code == 1 and out == ""
    assert "standard output" in err


def test_an_input_named_as_output_is_refused(paths, capsys):
    before = open(paths["reads"]).read()
    for out in (paths["reads"], str(paths["dir"] / "." / "reads.fasta")):
        code, _, err = _run(capsys, lambda out=out: _papara(paths, "--out", out))
        assert code == 1 and "is also an input" in err and "--reads" in err
    os.link(paths["msa"], paths["dir"] / "hardlink.fa")
    code, _, err = _run(
        capsys, lambda: _papara(paths, "--placements", str(paths["dir"] / "hardlink.fa"))
    )
    assert code == 1 and "--msa" in err
    assert open(paths["reads"]).read() == before
    a = paths["write"]("a.fa", ">a\nACGT\n")
    code, _, err = _run(capsys, lambda: main(["align", a, a, "--out", a]))
    assert code == 1 and "is also an input" in err
    code, _, err = _run(capsys, lambda: main(["search", "--query", a, "--db", a, "--out", a]))
    assert code == 1 and "is also an input" in err
    assert open(a).read() == ">a\nACGT\n"


def test_align_and_search_check_the_output_before_the_work(paths, capsys, monkeypatch):
    import importlib

    def no_work(*args, **kwargs):
        raise AssertionError("the work ran before the output was checked")

    monkeypatch.setattr(importlib.import_module("dpalign.pairwise"), "align", no_work)
    monkeypatch.setattr(importlib.import_module("dpalign.search"), "search_many", no_work)
    a = paths["write"]("a.fa", ">a\nACGT\n")
    missing = str(paths["dir"] / "no" / "such" / "out.txt")
    for argv in (["align", a, a], ["search", "--query", a, "--db", a]):
        code, _, err = _run(capsys, lambda argv=argv: main([*argv, "--out", missing]))
        assert code == 1 and "does not exist" in err
        code, _, err = _run(capsys, lambda argv=argv: main([*argv, "--out", "/proc/o.txt"]))
        assert code == 1 and "cannot write" in err


def test_unwritable_output_place_is_a_clean_error(paths, capsys):
    code, _, err = _run(capsys, lambda: _papara(paths, "--out", "/proc/o.phy"))
    assert code == 1 and "cannot write" in err and "/proc" in err


# --------------------------------------------------------------------------------------------
# 4: --scoring with a leading minus
# --------------------------------------------------------------------------------------------


def test_documented_scoring_form_with_a_leading_minus(paths, capsys):
    code, joined, _ = _run(capsys, lambda: _papara(paths, "--scoring=-3:-1:2:-3"))
    assert code == 0
    code, spaced, err = _run(capsys, lambda: _papara(paths, "--scoring", "-3:-1:2:-3"))
    assert code == 0, err
    assert spaced == joined
    # a real option after --scoring is still an error, not a scheme
    with pytest.raises(SystemExit):
        _papara(paths, "--scoring", "--protein")


# --------------------------------------------------------------------------------------------
# 8: alphabet mismatch
# --------------------------------------------------------------------------------------------


def test_protein_reads_on_a_dna_reference_stop_with_a_hint(paths, capsys):
    reads = paths["write"]("p.fa", ">p1\nMKVLEFWQRSHDE\n>p2\nMSTPEEKLIRQW\n")
    code, _, err = _run(capsys, lambda: _papara(paths, reads=reads))
    assert code == 1 and "protein" in err and "--protein" in err


def test_protein_flag_on_dna_data_stops_with_a_hint(paths, capsys):
    code, _, err = _run(capsys, lambda: _papara(paths, "--protein"))
    assert code == 1 and "look like DNA" in err and "without --protein" in err


def test_a_few_odd_letters_in_dna_reads_still_run(paths, capsys):
    reads = paths["write"]("n.fa", ">r1\nACGTNNACGTRY\n")
    code, out, _ = _run(capsys, lambda: _papara(paths, reads=reads))
    assert code == 0 and "r1" in out


# --------------------------------------------------------------------------------------------
# 9: threads
# --------------------------------------------------------------------------------------------


def test_threads_above_the_cores_are_capped_with_a_note(paths, capsys):
    cores = len(os.sched_getaffinity(0))
    a = paths["write"]("a.fa", ">a\nACGTACGT\n")
    argv = ["search", "--query", a, "--db", a, "--backend", "numba", "--threads", "1000"]
    code, _, err = _run(capsys, lambda: main(argv))
    assert code == 0
    assert f"--threads 1000 is more than the {cores} cores" in err
    assert "1000 threads" not in err and f"({cores} threads)" in err


# --------------------------------------------------------------------------------------------
# 11: messages
# --------------------------------------------------------------------------------------------


def test_phylip_row_length_message_counts_the_row(tmp_path):
    path = tmp_path / "m.phy"
    path.write_text("2 40\nt1 " + "A" * 37 + "\nt2 " + "C" * 40 + "\n")
    with pytest.raises(InputError) as info:
        read_phylip(path)
    assert "has 37 characters, the header says 40" in str(info.value)
    assert info.value.record == "t1" and info.value.line == 2
    path.write_text("2 40\nt1 " + "A" * 40 + "\nt2 " + "C" * 30 + "\n")
    with pytest.raises(InputError, match="has 30 characters, the header says 40"):
        read_alignment(path)


def test_root_with_one_child_reads_well(paths, capsys):
    tree = paths["write"]("one.nwk", "((t1,t2,t3,t4));")
    code, _, err = _run(capsys, lambda: _papara(paths, tree=tree))
    assert code == 1 and "the tree root has 1 child;" in err


def test_unavailable_backend_says_why():
    from dpalign.engine import get_backend
    from dpalign.hybrid.backend import gpu_selectors

    if gpu_selectors():
        pytest.skip("a GPU is present: hybrid is available")
    with pytest.raises(BackendUnavailable) as info:
        get_backend("hybrid")
    assert "GPU" in str(info.value) and str(info.value).count(":") >= 1


@pytest.mark.parametrize("workers", ["0", "-1"])
def test_dask_workers_below_one_is_one_error(paths, capsys, workers):
    with pytest.raises(SystemExit) as info:
        _papara(paths, "--dask-workers", workers)
    assert info.value.code == 2
    assert "--dask-workers" in capsys.readouterr().err


def test_local_search_prints_no_zero_score_hits(paths, capsys):
    q = paths["write"]("q.fa", ">q\nAAAA\n")
    db = paths["write"]("db.fa", ">hit\nCCAAC\n>none\nGGGG\n>also\nTTTT\n")
    code, out, _ = _run(capsys, lambda: main(["search", "--query", q, "--db", db]))
    assert code == 0
    rows = [line.split("\t") for line in out.splitlines()]
    assert [r[1] for r in rows] == ["hit"] and all(int(r[2]) > 0 for r in rows)


@pytest.mark.parametrize(
    ("name", "fmt", "fasta"),
    [
        ("out.fasta", None, True),
        ("out.fa", None, True),
        ("out.phy", None, False),
        ("out.txt", None, False),
        ("out.txt", "fasta", True),
        ("out.fasta", "phylip", False),
    ],
)
def test_output_format_follows_the_extension_unless_given(paths, name, fmt, fasta):
    out = paths["dir"] / name
    extra = ["--out", str(out)] + (["--format", fmt] if fmt else [])
    assert _papara(paths, *extra) == 0
    assert out.read_text().startswith(">") == fasta


# --------------------------------------------------------------------------------------------
# Outputs for pipelines: --split-out, as `epa-ng --split ref.fasta out.phy`
# --------------------------------------------------------------------------------------------


def _epa_split(ref_names, full_phylip):
    """epa-ng --split (src/util/split.hpp with genesis' readers and FastaWriter): the rows of
    the full alignment, upper-cased, labels in the reference go to reference.fasta and the
    rest to query.fasta, in file order, each sequence wrapped at 80 columns."""
    lines = full_phylip.splitlines()[1:]
    rows = [(ln.split()[0], ln.split()[1].upper()) for ln in lines]

    def fasta(subset):
        return "".join(
            f">{n}\n" + "".join(s[k : k + 80] + "\n" for k in range(0, len(s), 80))
            for n, s in subset
        )

    return (
        fasta([r for r in rows if r[0] in ref_names]),
        fasta([r for r in rows if r[0] not in ref_names]),
    )


def test_split_out_writes_what_epa_ng_split_would(paths, capsys):
    long_rows = [(n, (s * 8).lower() if n == "t3" else s * 8) for n, s in ROWS]
    extra = ("extra", "acgtacgtac-gt" * 8)
    msa = paths["write"]("long.fasta", _fasta(long_rows + [extra]))
    reads = paths["write"]("r.fa", ">r1\nACGTACGTAAGTACGTACG\n>r2\ncgtacgtac\n")
    split = paths["dir"] / "split"
    out = paths["dir"] / "full.phy"
    code, _, err = _run(
        capsys,
        lambda: _papara(paths, "--out", str(out), "--split-out", str(split), msa=msa, reads=reads),
    )
    assert code == 0, err
    ref_names = {n for n, _ in long_rows} | {extra[0]}
    want_ref, want_query = _epa_split(ref_names, out.read_text())
    assert (split / "reference.fasta").read_text() == want_ref
    assert (split / "query.fasta").read_text() == want_query
    assert want_query.count(">") == 2 and max(map(len, want_ref.splitlines())) == 80


def test_split_out_folder_is_checked_before_the_work(paths, capsys):
    target = paths["dir"] / "missing" / "deeper"
    code, _, err = _run(capsys, lambda: _papara(paths, "--split-out", str(target)))
    assert code == 1 and "does not exist" in err


def test_search_options_all_do_something(paths, capsys):
    """--report writes the accounting (search's Dask options: tests/test_search_output.py)."""
    import json

    a = paths["write"]("a.fa", ">a\nACGTACGT\n>b\nTTTT\n")
    report = paths["dir"] / "r.json"
    argv = ["search", "--query", a, "--db", a, "--report", str(report)]
    code, out, _ = _run(capsys, lambda: main([*argv, "--backend", "reference"]))
    assert code == 0 and out
    data = json.loads(report.read_text())
    assert data["command"] == "search" and data["settings"]["targets"] == 2
