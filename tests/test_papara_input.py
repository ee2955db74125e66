"""Bad input for `dpalign papara` (spec §9): clear errors, non-zero exit, nothing half-written."""

from __future__ import annotations

import logging
import os

import pytest

from dpalign.cli import main
from dpalign.errors import InputError
from dpalign.papara import papara

TREE = "((t1:0.1,t2:0.2):0.05,t3:0.3,t4:0.1);"
ROWS = [
    ("t1", "ACGTACGTAC-GT"),
    ("t2", "ACGTACCTAC-GT"),
    ("t3", "ACGAACGTACTGT"),
    ("t4", "ACGTTCGTAC-GA"),
]


def _write(path, text):
    path.write_text(text)
    return str(path)


def _fasta(rows):
    return "".join(f">{n}\n{s}\n" for n, s in rows)


@pytest.fixture
def files(tmp_path):
    return {
        "tree": _write(tmp_path / "tree.nwk", TREE),
        "msa": _write(tmp_path / "ref.fasta", _fasta(ROWS)),
        "reads": _write(tmp_path / "reads.fasta", ">r1\nACGTACG\n>r2\nCGTAC\n"),
        "dir": tmp_path,
    }


def _run(files, *extra, **overrides):
    paths = {**files, **overrides}
    argv = [
        "papara",
        "--ref",
        paths["tree"],
        "--msa",
        paths["msa"],
        "--reads",
        paths["reads"],
        "--backend",
        "reference",
        *extra,
    ]
    return main(argv)


def test_good_input_runs(files, capsys):
    assert _run(files) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "6 13" and "r1" in out


def test_fasta_and_phylip_msa_give_the_same_output(files, tmp_path, capsys):
    assert _run(files) == 0
    from_fasta = capsys.readouterr().out
    phylip = (
        "4 13\n"
        + "".join(f"{n}  {s[:6]}\n" for n, s in ROWS)
        + "\n"
        + "".join(f"{s[6:]}\n" for _, s in ROWS)
    )  # interleaved
    assert _run(files, msa=_write(tmp_path / "ref.phy", phylip)) == 0
    assert capsys.readouterr().out == from_fasta


def _error(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_missing_tip(files, tmp_path, capsys):
    msa = _write(tmp_path / "m.fasta", _fasta(ROWS[:3]))
    assert _run(files, msa=msa) == 1
    assert "tree tip 't4' is not in the reference alignment" in _error(capsys)


def test_duplicate_names(files, tmp_path, capsys):
    assert _run(files, reads=_write(tmp_path / "r.fa", ">t1\nACGT\n")) == 1
    assert "duplicate name 't1'" in _error(capsys)
    msa = _write(tmp_path / "d.fasta", _fasta(ROWS + [ROWS[0]]))
    assert _run(files, msa=msa) == 1
    assert "duplicate name 't1'" in _error(capsys)


def test_ragged_msa(files, tmp_path, capsys):
    msa = _write(tmp_path / "rag.fasta", _fasta(ROWS[:3] + [("t4", "ACGT")]))
    assert _run(files, msa=msa) == 1
    err = _error(capsys)
    assert "ragged alignment" in err and "rag.fasta:7" in err and "'t4'" in err


def test_illegal_reference_character_names_row_and_column(files, tmp_path, capsys):
    rows = list(ROWS)
    rows[1] = ("t2", "ACGTJCCTAC-GT")
    assert _run(files, msa=_write(tmp_path / "bad.fasta", _fasta(rows))) == 1
    err = _error(capsys)
    assert "bad.fasta:4" in err and "record 't2'" in err and "position 5" in err and "'J'" in err


def test_illegal_read_character(files, tmp_path, capsys):
    assert _run(files, reads=_write(tmp_path / "r.fa", ">ok\nACGT\n>bad\nAC1GT\n")) == 1
    err = _error(capsys)
    assert "r.fa:4" in err and "record 'bad'" in err and "position 3" in err


@pytest.mark.parametrize(
    ("tree", "message"),
    [
        ("((t1,t2),t3,t4)", "missing ';'"),
        ("((t1,t2),t3,t4));", "')' without a matching '('"),
        ("((t1,t2,t3,t4);", "'(' still open"),
        ("((t1:x,t2),t3,t4);", "branch length 'x' is not a number"),
        ("((t1,t2),t3,t4); junk", "text after the closing ';'"),
    ],
)
def test_newick_syntax_errors_say_where(files, tmp_path, capsys, tree, message):
    assert _run(files, tree=_write(tmp_path / "t.nwk", tree)) == 1
    err = _error(capsys)
    assert message in err and "t.nwk:1" in err and "column" in err


@pytest.mark.parametrize("tree", ["(t1,t2,t3,t4);", "((t1,t2,t3),t4);"])
def test_non_binary_trees_are_refused(files, tmp_path, capsys, tree):
    assert _run(files, tree=_write(tmp_path / "t.nwk", tree)) == 1
    assert "children" in _error(capsys)


def test_unreadable_files(files, tmp_path, capsys):
    assert _run(files, reads=str(tmp_path / "nope.fa")) == 1
    assert "nope.fa: no such file" in _error(capsys)
    assert _run(files, msa=str(tmp_path)) == 1
    assert "is a directory" in _error(capsys)
    assert _run(files, reads=_write(tmp_path / "e.fa", "")) == 1
    assert "empty" in _error(capsys)
    assert _run(files, reads=_write(tmp_path / "x.fa", "ACGT\n>r\nAC\n")) == 1
    assert "not FASTA" in _error(capsys)


def test_empty_read_is_warned_and_written_as_gaps(files, tmp_path, capsys):
    reads = _write(tmp_path / "r.fa", ">empty\nNNNN\n>ok\nACGTACG\n")
    assert _run(files, reads=reads) == 0
    captured = capsys.readouterr()
    rows = dict(line.split() for line in captured.out.splitlines()[1:])
    assert set(rows["empty"]) == {"-"} and len(rows["empty"]) == len(rows["t1"])
    assert "'empty' is empty" in captured.err


def test_dropped_characters_are_warned_once_per_read(files, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="dpalign"):
        papara(
            files["tree"], files["msa"], [("r1", "ACNNGTN"), ("r2", "ACGT")], backend="reference"
        )
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "'r1'" in m]) == 1 and "3 character(s)" in messages[0]


def test_no_half_written_output_on_error(files, tmp_path, capsys):
    out = tmp_path / "out.phy"
    out.write_text("previous result\n")
    bad = _write(tmp_path / "r.fa", ">bad\nAC1GT\n")
    assert _run(files, "--out", str(out), "--placements", str(tmp_path / "p.tsv"), reads=bad) == 1
    assert out.read_text() == "previous result\n"
    assert not (tmp_path / "p.tsv").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_outputs_written_atomically(files, tmp_path):
    out, placements = tmp_path / "out.phy", tmp_path / "p.tsv"
    assert _run(files, "--out", str(out), "--placements", str(placements)) == 0
    assert out.read_text().startswith("6 13\n")
    lines = placements.read_text().splitlines()
    header = "read\tedge\tclade\tscore\tsecond_edge\tsecond_score\tties\tsupport\tfit"
    assert lines[0] == header and len(lines) == 3
    umask = os.umask(0o022)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's private 0600
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".part")) == []


def test_extra_msa_rows_become_reads(files, tmp_path):
    rows = ROWS + [("extra", "ACGTAC-TAC-GT")]
    result = papara(
        files["tree"], _write(tmp_path / "m.fa", _fasta(rows)), None, backend="reference"
    )
    assert [name for name, _ in result.rows] == ["t1", "t2", "t3", "t4", "extra"]
    assert result.placements[0].read == "extra"


def test_api_accepts_objects_and_unpacks(files):
    import skbio

    msa = skbio.TabularMSA([skbio.DNA(s) for _, s in ROWS], index=[n for n, _ in ROWS])
    reads = [skbio.DNA("ACGTACG", metadata={"id": "r1"})]
    alignment, placements = papara(TREE, msa, reads, backend="reference")
    assert isinstance(alignment, skbio.TabularMSA) and alignment.shape[0] == 5
    assert placements[0].read == "r1" and placements[0].edge >= 0


def test_bad_options(files, capsys):
    assert _run(files, "--scoring", "1:2") == 1
    assert "o:e:m:mc" in _error(capsys)
    with pytest.raises(InputError):
        papara(files["tree"], [("t1", "AC"), ("t2", "ACG")], None, backend="reference")


@pytest.mark.parametrize(
    "rows",
    [
        ROWS,
        # an all-gap column (dropped) and gap-state letters (N ? .) that are not '-'
        [("t1", "AC-GN?"), ("t2", "AT-G.C"), ("t3", "CC-GTA"), ("t4", "AC-NGG")],
        [("t1", "-A"), ("t2", "-C"), ("t3", "-G"), ("t4", "-T")],
    ],
)
def test_reference_rows_encode_as_row_by_row(rows):
    """The one-pass encoding of the reference rows gives the row-by-row encoder's states,
    the kept columns' text and the gap fraction (literal '-' only)."""
    import numpy as np

    from dpalign.alphabet import DNA
    from dpalign.papara import dataset

    data = dataset.load_reference(TREE, rows).data
    states = np.stack([DNA.encode_reference(seq) for _, seq in rows])
    kept = np.flatnonzero((states != DNA.gap).any(axis=0))
    assert np.array_equal(data.ref_states, states[:, kept])
    assert data.ref_states.dtype == DNA.dtype and data.ref_states.flags.c_contiguous
    texts = ["".join(seq[k] for k in kept) for _, seq in rows]
    assert data.ref_rows == texts
    assert data.gap_fraction == sum(t.count("-") for t in texts) / (len(rows) * kept.size)


def test_non_ascii_reference_row_is_named():
    """Rows given as objects skip the FASTA reader's byte check: the encoder names the
    column (the one-pass encoding falls back to row by row for it)."""
    from dpalign.papara import dataset

    rows = list(ROWS)
    rows[2] = ("t3", "ACGAACGTAC\u00e9GT")
    with pytest.raises(InputError) as info:
        dataset.load_reference(TREE, rows)
    assert info.value.column == 11 and "non-ASCII" in info.value.message
