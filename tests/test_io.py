"""The FASTA/PHYLIP reader: compressed files, BOMs, whitespace, and errors that say where."""

from __future__ import annotations

import bz2
import gzip
import lzma
import subprocess
import sys
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpalign.cli import main
from dpalign.errors import InputError
from dpalign.io import read_alignment, read_fasta, read_fasta_allow_empty, read_newick

FASTA = b">r1 first read\nACGTAC\nGTA\n>r2\nTTTT\n"
WANT = [("r1", "ACGTACGTA"), ("r2", "TTTT")]

TREE = "((t1:0.1,t2:0.2):0.05,t3:0.3,t4:0.1);"
ROWS = [
    ("t1", "ACGTACGTAC-GT"),
    ("t2", "ACGTACCTAC-GT"),
    ("t3", "ACGAACGTACTGT"),
    ("t4", "ACGTTCGTAC-GA"),
]


def _pairs(records):
    return [(r.name, r.seq) for r in records]


@pytest.mark.parametrize(
    "pack", [gzip.compress, bz2.compress, lzma.compress], ids=["gzip", "bz2", "xz"]
)
@pytest.mark.parametrize("suffix", [".fa", ".fa.gz", ".txt"])
def test_compressed_files_are_read_by_content_not_name(tmp_path, pack, suffix):
    path = tmp_path / f"reads{suffix}"
    path.write_bytes(pack(FASTA))
    records = read_fasta(path)
    assert _pairs(records) == WANT and [r.line for r in records] == [1, 4]


def test_compressed_alignment_and_tree(tmp_path):
    msa = tmp_path / "m.phy"
    msa.write_bytes(gzip.compress(b"2 4\na ACGT\nb AC-T\n"))
    assert _pairs(read_alignment(msa)) == [("a", "ACGT"), ("b", "AC-T")]
    tree = tmp_path / "t.nwk"
    tree.write_bytes(bz2.compress(b"(a,b,c);"))
    assert sorted(t.name for t in read_newick(tree).tips()) == ["a", "b", "c"]


def test_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.fa"
    path.write_bytes(b"\xef\xbb\xbf" + FASTA)
    assert _pairs(read_fasta(path)) == WANT
    path.write_bytes(gzip.compress(b"\xef\xbb\xbf" + FASTA))
    assert _pairs(read_fasta(path)) == WANT


def test_spaces_and_tabs_inside_sequences_are_alike(tmp_path):
    path = tmp_path / "ws.fa"
    path.write_bytes(b">r1\tdescription\nAC GT\tAC\r\nG\tT A \n>r2\n\tTT TT\n")
    assert _pairs(read_fasta(path)) == WANT


def test_non_ascii_byte_in_a_sequence_names_line_and_column(tmp_path):
    path = tmp_path / "u.fa"
    path.write_bytes(b">r1\nACGT\nAC\xc3\xa9GT\n")
    with pytest.raises(InputError) as info:
        read_fasta(path)
    assert info.value.line == 3 and "column 3" in str(info.value) and "0xc3" in str(info.value)
    assert info.value.record == "r1"


def test_non_ascii_description_is_fine_but_not_in_a_name(tmp_path):
    path = tmp_path / "d.fa"
    path.write_bytes(">r1 Müller's read\nACGT\n".encode())
    assert _pairs(read_fasta(path)) == [("r1", "ACGT")]
    path.write_bytes(">rü\nACGT\n".encode())
    with pytest.raises(InputError, match="name"):
        read_fasta(path)


def test_duplicate_names_name_the_file_and_both_lines(tmp_path):
    path = tmp_path / "dup.fa"
    path.write_text(">a\nAC\n>b\nGT\n>a\nTT\n")
    with pytest.raises(InputError) as info:
        read_fasta(path)
    message = str(info.value)
    assert "dup.fa:5" in message and "'a'" in message and "line 1" in message


@pytest.mark.parametrize(
    "text", [">r1\nACGT\n>\nACGT\n", ">r1\nACGT\n>\n", ">r1\nACGT\n>\n>r2\nA\n"]
)
def test_name_only_record_gets_one_message_everywhere(tmp_path, capsys, text):
    bad = tmp_path / "bad.fa"
    bad.write_text(text)
    messages = []
    for reader in (read_fasta, read_fasta_allow_empty):
        with pytest.raises(InputError) as info:
            reader(bad)
        messages.append(str(info.value))
    (tmp_path / "t.nwk").write_text(TREE)
    (tmp_path / "m.fa").write_text("".join(f">{n}\n{s}\n" for n, s in ROWS))
    good = tmp_path / "good.fa"
    good.write_text(">g\nACGT\n")
    commands = [
        ["papara", "--ref", str(tmp_path / "t.nwk"), "--msa", str(tmp_path / "m.fa")]
        + ["--reads", str(bad), "--backend", "reference"],
        ["align", str(bad), str(good)],
        ["align", str(good), str(bad)],
        ["search", "--query", str(bad), "--db", str(good)],
    ]
    for argv in commands:
        assert main(argv) == 1
        messages.append(capsys.readouterr().err.strip().removeprefix("dpalign: error: "))
    assert len(set(messages)) == 1, messages
    assert "bad.fa:3" in messages[0] and "without a name" in messages[0]


def test_papara_names_the_line_of_a_bad_character_in_a_wrapped_read(tmp_path, capsys):
    (tmp_path / "t.nwk").write_text(TREE)
    (tmp_path / "m.fa").write_text("".join(f">{n}\n{s}\n" for n, s in ROWS))
    (tmp_path / "r.fa").write_text(">ok\nACGT\n>wrapped\nACGT\nAC\nA1GT\n")
    argv = ["papara", "--ref", str(tmp_path / "t.nwk"), "--msa", str(tmp_path / "m.fa")]
    assert main([*argv, "--reads", str(tmp_path / "r.fa"), "--backend", "reference"]) == 1
    err = capsys.readouterr().err
    assert "r.fa:6" in err and "record 'wrapped'" in err, err
    # the same for a wrapped row of the reference alignment
    rows = [(n, "ACGTACCTJC-GT" if n == "t2" else s) for n, s in ROWS]
    (tmp_path / "w.fa").write_text("".join(f">{n}\n{s[:5]}\n{s[5:]}\n" for n, s in rows))
    (tmp_path / "ok.fa").write_text(">ok\nACGT\n")
    argv[4] = str(tmp_path / "w.fa")
    assert main([*argv, "--reads", str(tmp_path / "ok.fa"), "--backend", "reference"]) == 1
    err = capsys.readouterr().err
    assert "w.fa:6" in err and "record 't2'" in err and "'J'" in err, err


def test_gzip_reads_from_standard_input(tmp_path):
    data = gzip.compress(FASTA)
    code = (
        "import sys; from dpalign.io import read_fasta; "
        "print([(r.name, r.seq) for r in read_fasta('-')])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=data, capture_output=True, check=True
    ).stdout
    assert out.decode().strip() == repr(WANT)


def test_importing_the_reader_stays_light():
    code = (
        "import sys, dpalign.io; "
        "print(sorted(m for m in ('skbio', 'scipy', 'pandas') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout
    assert out.decode().strip() == "[]"


# --------------------------------------------------------------------------------------------
# scikit-bio's reader as the oracle on random files
# --------------------------------------------------------------------------------------------

_NAME = st.text("abcXYZ019_.|-:", min_size=1, max_size=8)
_SEQ = st.text("ACGTNacgtn-*", min_size=1, max_size=40)


@st.composite
def _fasta_files(draw):
    n = draw(st.integers(1, 6))
    names = draw(st.lists(_NAME, min_size=n, max_size=n, unique=True))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    parts = ["\n" * draw(st.integers(0, 2))]
    records = []
    for name in names:
        seq = draw(_SEQ)
        desc = draw(st.sampled_from(["", " ", " some words", "\tdesc"]))
        width = draw(st.integers(1, 50))
        lines = [seq[k : k + width] for k in range(0, len(seq), width)]
        pad = draw(st.sampled_from(["", " ", "\t"]))
        parts.append(f">{name}{desc}{newline}")
        parts.append("".join(f"{pad}{ln}{pad}{newline}" for ln in lines))
        parts.append(newline * draw(st.integers(0, 2)))  # blank lines between records
        records.append((name, seq))
    text = "".join(parts)
    if not draw(st.booleans()):
        text = text.rstrip("\r\n")  # no newline at the end
    return text, records


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_fasta_files(), st.sampled_from(["plain", "bom", "gzip", "bz2"]))
def test_reader_agrees_with_scikit_bio(tmp_path_factory, drawn, packing):
    import io

    import skbio.io

    text, _ = drawn
    want = [
        (s.metadata["id"], str(s))
        for s in skbio.io.read(io.StringIO(text), format="fasta", verify=False)
    ]
    raw = text.encode()
    raw = {
        "plain": raw,
        "bom": b"\xef\xbb\xbf" + raw,
        "gzip": gzip.compress(raw),
        "bz2": bz2.compress(raw),
    }[packing]
    path = tmp_path_factory.mktemp("fa") / "x.fa"
    path.write_bytes(raw)
    records = read_fasta(path)
    assert _pairs(records) == want
    # read in pieces of a few bytes, the records and their lines are the same
    with _chunk_bytes(8):
        assert read_fasta(path) == records


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_fasta_files(), st.binary(min_size=256, max_size=256))
def test_a_table_translates_the_residues_as_they_are_read(tmp_path_factory, drawn, table):
    """read_fasta_block(table=...): the residues the plain read gives, each byte through the
    table (blank-free, CRLF or not, read whole or in pieces of a few bytes), writable."""
    from dpalign.io import read_fasta_block

    text, _ = drawn
    path = tmp_path_factory.mktemp("fa") / "x.fa"
    path.write_bytes(text.encode())
    plain = read_fasta_block(path, allow_empty=True)
    lut = np.frombuffer(table, np.uint8)
    for size in (8, 1 << 20):
        with _chunk_bytes(size):
            got = read_fasta_block(path, allow_empty=True, table=table)
        np.testing.assert_array_equal(got.residues, lut[plain.residues])
        np.testing.assert_array_equal(got.offsets, plain.offsets)
        assert got.names == plain.names and got.residues.flags.writeable


@contextmanager
def _chunk_bytes(size):
    import dpalign.io

    saved = dpalign.io._CHUNK_BYTES
    dpalign.io._CHUNK_BYTES = size
    try:
        yield
    finally:
        dpalign.io._CHUNK_BYTES = saved


def test_errors_name_the_right_line_when_read_in_pieces(tmp_path):
    path = tmp_path / "many.fa"
    path.write_text("".join(f">r{k}\nACGT\nAC\n" for k in range(50)) + ">bad\nAC\nA\x07C\n")
    for size in (8, 64, 1 << 20):
        with _chunk_bytes(size), pytest.raises(InputError) as info:
            read_fasta(path)
        assert info.value.line == 153 and "control character 0x07 at column 2" in str(info.value)
        assert info.value.record == "bad"
    path.write_text("".join(f">r{k}\nACGT\n" for k in range(50)) + ">r7\nAC\n")
    with _chunk_bytes(16), pytest.raises(InputError) as info:
        read_fasta(path)
    assert info.value.line == 101 and "(first at line 15)" in str(info.value)


def test_a_read_named_like_a_reference_row_names_both_files(tmp_path, capsys):
    (tmp_path / "t.nwk").write_text(TREE)
    (tmp_path / "m.fa").write_text("".join(f">{n}\n{s}\n" for n, s in ROWS))
    (tmp_path / "r.fa").write_text(">r1\nACGT\n>t2\nACGT\n")
    argv = ["papara", "--ref", str(tmp_path / "t.nwk"), "--msa", str(tmp_path / "m.fa")]
    assert main([*argv, "--reads", str(tmp_path / "r.fa"), "--backend", "reference"]) == 1
    err = capsys.readouterr().err
    assert "r.fa:3" in err and "'t2'" in err and "m.fa, line 3" in err, err
