"""The API pitfalls of issue 14 (bug 10): calls a new user writes first, and what they get."""

from __future__ import annotations

import logging
import warnings

import pytest

import dpalign
from dpalign.errors import OptionError

TREE = "((t1:0.1,t2:0.2):0.05,t3:0.3,t4:0.1);"
ROWS = [
    ("t1", "ACGTACGTAC-GT"),
    ("t2", "ACGTACCTAC-GT"),
    ("t3", "ACGAACGTACTGT"),
    ("t4", "ACGTTCGTAC-GA"),
]
READS = [("r1", "ACGTACG"), ("r2", "CGTAC")]


def test_a_string_database_is_one_target_not_one_per_letter():
    hits = dpalign.search("ACGT", "ACGTACGT", backend="reference")
    assert len(hits) == 1
    assert hits[0].score == 4 and hits[0].target_end - hits[0].target_start == 4


def test_a_bytes_or_skbio_database_is_one_target_too():
    import skbio

    assert len(dpalign.search("ACGT", b"ACGTACGT", backend="reference")) == 1
    assert len(dpalign.search("ACGT", skbio.DNA("ACGTACGT"), backend="reference")) == 1


def test_papara_takes_msa_by_its_plain_name():
    result = dpalign.papara(tree=TREE, msa=ROWS, reads=READS, backend="reference")
    assert [name for name, _ in result.rows][-2:] == ["r1", "r2"]


def test_papara_msa_underscore_still_works_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="msa_"):
        old = dpalign.papara(tree=TREE, msa_=ROWS, reads=READS, backend="reference")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = dpalign.papara(TREE, ROWS, READS, backend="reference")
    assert old.rows == new.rows


def test_papara_refuses_msa_given_twice():
    with pytest.raises(TypeError, match="msa"):
        dpalign.papara(TREE, ROWS, READS, msa_=ROWS, backend="reference")


def test_papara_result_indexes_like_the_tuple_it_unpacks_to():
    result = dpalign.papara(TREE, ROWS, READS, backend="reference")
    alignment, placements = result
    assert len(result) == 2
    assert result[1] is placements and result[-1] is placements
    assert list(result[0].index) == list(alignment.index)
    assert result[0:2][1] is placements
    with pytest.raises(IndexError):
        result[2]


@pytest.mark.parametrize("threads", [0, -1])
def test_align_refuses_zero_threads_like_papara_and_search(threads):
    for call in (
        lambda: dpalign.align("ACGT", "ACGT", threads=threads),
        lambda: dpalign.search("ACGT", ["ACGT"], threads=threads),
        lambda: dpalign.score(["ACGT"], ["ACGT"], threads=threads),
    ):
        with pytest.raises(OptionError, match="threads") as info:
            call()
        assert "--" not in str(info.value)  # the library names its parameter, not a CLI flag


def test_library_option_errors_never_name_cli_flags():
    for call in (
        lambda: dpalign.papara(TREE, ROWS, scoring="1:2"),
        lambda: dpalign.papara(TREE, ROWS, scoring="a:b:c:d"),
    ):
        with pytest.raises(OptionError) as info:
            call()
        assert "--" not in str(info.value)


def test_the_cli_still_names_its_own_flag(tmp_path, capsys):
    from dpalign.cli import main

    fasta = tmp_path / "q.fa"
    fasta.write_text(">q\nACGT\n")
    assert main(["search", "--query", str(fasta), "--db", str(fasta), "--threads", "0"]) != 0
    err = capsys.readouterr().err
    assert "--threads must be at least 1" in err


def test_the_library_log_does_not_name_cli_flags(caplog):
    reads = [(f"r{k}", "ACGNNACG") for k in range(12)]
    with caplog.at_level(logging.WARNING, logger="dpalign"):
        dpalign.papara(TREE, ROWS, reads, backend="reference")
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "more such reads" in text and "-v" not in text


def test_the_cli_log_translates_to_its_own_flag(tmp_path, capsys):
    from dpalign.cli import main

    (tmp_path / "t.nwk").write_text(TREE)
    (tmp_path / "m.fa").write_text("".join(f">{n}\n{s}\n" for n, s in ROWS))
    (tmp_path / "r.fa").write_text("".join(f">r{k}\nACGNNACG\n" for k in range(12)))
    argv = ["papara", "--ref", str(tmp_path / "t.nwk"), "--msa", str(tmp_path / "m.fa")]
    argv += ["--reads", str(tmp_path / "r.fa"), "--backend", "reference"]
    argv += ["--out", str(tmp_path / "o.phy")]
    assert main(argv) == 0
    assert "more such reads (-v lists them)" in capsys.readouterr().err
