"""`dpalign align` on long pairs: SAM output (checked against the alignment it encodes, and
by pysam where installed), the progress bar, bands across CPU fillers and Dask workers, the
formats' behaviour on long pairs (pretty refuses them), and bounded memory."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest
from cli_helpers import run_cli as _run

from dpalign import sam
from dpalign.pairwise import align

COMPLEMENT = str.maketrans("ACGT", "TGCA")


def _related(n: int, seed: int) -> tuple[str, str]:
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 4, n)
    a = b[n // 10 : n - n // 10].copy()
    changed = rng.random(a.size) < 0.08
    a[changed] = rng.integers(0, 4, int(changed.sum()))
    a = np.delete(a, rng.integers(0, a.size, 5))
    a = np.insert(a, rng.integers(0, a.size, 5), 2)
    letters = np.array(list("ACGT"))
    return "".join(letters[a]), "".join(letters[b])


def _fasta(records) -> str:
    return "".join(f">{name}\n{seq}\n" for name, seq in records)


def _sam_rows(out: str):
    header = [line for line in out.splitlines() if line.startswith("@")]
    rows = [line.split("\t") for line in out.splitlines() if not line.startswith("@")]
    return header, rows


def _replay(row, target: str) -> tuple[int, int]:
    """Walk a SAM record's CIGAR over its SEQ and the target: check = and X against the
    letters and the query length; return (edit distance, reference end)."""
    import re

    seq, pos = row[9], int(row[3]) - 1
    i, j, edits = 0, pos, 0
    for count, op in re.findall(r"(\d+)([MIDNSHP=X])", row[5]):
        count = int(count)
        if op == "S":
            i += count
        elif op in "=XM":
            for k in range(count):
                same = seq[i + k] == target[j + k]
                assert op == "M" or same == (op == "="), (op, i + k, j + k)
                edits += not same
            i, j = i + count, j + count
        elif op == "I":
            i, edits = i + count, edits + count
        elif op == "D":
            j, edits = j + count, edits + count
    assert i == len(seq)
    return edits, j


@pytest.mark.parametrize("mode", ["local", "semiglobal", "global"])
@pytest.mark.parametrize("strand", ["plus", "minus"])
def test_sam_records_encode_the_alignment(files, capsys, mode, strand):
    a, b = _related(1500, 1)
    if strand == "minus":
        b = b.translate(COMPLEMENT)[::-1]
    fa = files("a.fa", _fasta([("read one", a)]))
    fb = files("b.fa", _fasta([("chr1", b), ("chr2", b[:700])]))
    code, out, _ = _run(
        ["align", fa, fb, "--mode", mode, "--format", "sam", "--strand", strand], capsys
    )
    assert code == 0
    header, rows = _sam_rows(out)
    assert header[0] == "@HD\tVN:1.6\tSO:unsorted"
    assert header[1:3] == ["@SQ\tSN:chr1\tLN:1500", "@SQ\tSN:chr2\tLN:700"]
    assert header[3].startswith("@PG\tID:dpalign\tPN:dpalign\tVN:")
    assert len(rows) == 2 and all(len(r) == 13 for r in rows)
    want = align(a, b, mode, strand=strand)
    first = rows[0]
    assert first[0] == "read" and first[2] == "chr1"
    assert int(first[1]) == (16 if strand == "minus" else 0)
    seq = a.translate(COMPLEMENT)[::-1] if strand == "minus" else a
    assert first[9] == seq
    edits, ref_end = _replay(first, b)
    assert first[11] == f"NM:i:{edits}" and first[12] == f"AS:i:{want.score}"
    if strand == "plus":
        assert (int(first[3]) - 1, ref_end) == (want.b_start, want.b_end)
    else:  # coordinates along the target as given
        assert (int(first[3]) - 1, ref_end) == (1500 - want.b_end, 1500 - want.b_start)
    # the second target: a secondary alignment of the same read, without its sequence
    second = rows[1]
    assert int(second[1]) & 256 and second[9] == "*"


def test_sam_unmapped_and_m_cigar(files, capsys):
    fa = files("a.fa", ">r\nAAAA\n>s\nACGTACGTAC\n")
    fb = files("b.fa", ">t\nCCCCGG\n")
    args = ["align", fa, fb, "--mode", "local", "--format", "sam", "--cigar", "M"]
    code, out, _ = _run([*args, "--match", "1", "--mismatch", "-3"], capsys)
    assert code == 0
    _, rows = _sam_rows(out)
    assert rows[0][:6] == ["r", "4", "*", "0", "0", "*"] and rows[0][9] == "AAAA"
    assert "X" not in rows[1][5] and "=" not in rows[1][5] and "M" in rows[1][5]


def test_sam_is_read_by_pysam(files, capsys, tmp_path):
    pysam = pytest.importorskip("pysam")
    a, b = _related(3000, 2)
    fa = files("a.fa", _fasta([("q", a), ("q2", a[::-1])]))
    fb = files("b.fa.gz", "")  # replaced below by a gzip file
    with gzip.open(fb, "wt") as out:
        out.write(_fasta([("t:1", b), ("t,2 second", b[:900])]))
    path = tmp_path / "out.sam"
    code, _, _ = _run(
        ["align", fa, fb, "--mode", "local", "--format", "sam", "--strand", "both", "--out",
         str(path)],
        capsys,
    )  # fmt: skip
    assert code == 0
    with pysam.AlignmentFile(str(path)) as f:
        assert [s["SN"] for s in f.header.to_dict()["SQ"]] == ["t:1", "t_2"]
        records = list(f)
    assert len(records) == 4
    primary = [r for r in records if not r.is_secondary]
    assert [r.query_name for r in primary] == ["q", "q2"]
    for r in records:
        if r.is_unmapped:
            continue
        assert r.infer_read_length() == len(a)
        assert r.get_tag("NM") >= 0 and r.get_tag("AS") > 0
    with pysam.AlignmentFile(str(path)) as f:  # samtools' own parser round-trips it
        out = tmp_path / "copy.bam"
        with pysam.AlignmentFile(str(out), "wb", template=f) as bam:
            for r in f:
                bam.write(r)
    assert out.stat().st_size > 0


def test_names_that_sam_forbids_are_cleaned():
    assert sam.reference_name("chr1") == "chr1"
    assert sam.reference_name("a b,c") == "a_b_c"
    assert sam.reference_name("*x") == "_*x"
    assert sam.query_name("read@1") == "read_1"


def test_long_pair_formats_and_progress(files, capsys):
    a, b = _related(60_000, 3)  # 2.9e9 cells: the long-pair path, over the bar's minimum
    fa = files("a.fa", _fasta([("a", a)]))
    fb = files("b.fa", _fasta([("b", b)]))
    base = ["align", fa, fb, "--mode", "local", "--bands", "2"]
    code, out, err = _run([*base, "--format", "json", "--progress"], capsys)
    assert code == 0 and "aligning" in err and "cell" in err  # tqdm's bar on stderr
    (item,) = json.loads(out)
    code, out, err = _run([*base, "--format", "cigar", "--no-progress"], capsys)
    assert code == 0 and err == ""
    row = out.rstrip("\n").split("\t")
    assert row[2] == str(item["score"]) and row[7] == item["cigar"]
    code, out, _ = _run([*base, "--format", "fasta", "--no-progress"], capsys)
    top, bottom = out.splitlines()[1], out.splitlines()[3]
    assert len(top) == len(bottom) and top.replace("-", "") in a


def test_pretty_refuses_chromosome_pairs(files, capsys, monkeypatch):
    from dpalign import cli

    monkeypatch.setattr(cli, "PRETTY_MAX_RESIDUES", 100)
    fa = files("a.fa", ">a\n" + "ACGT" * 20 + "\n")
    fb = files("b.fa", ">b\n" + "ACGT" * 10 + "\n")
    code = cli.main(["align", fa, fb])
    _, err = capsys.readouterr()
    assert code != 0 and "--format pretty" in err and "sam" in err


def test_band_options_exclude_each_other(files, capsys):
    fa = files("a.fa", ">a\nACGT\n")
    code = _run(["align", fa, fa, "--bands", "2", "--dask-workers", "2"], capsys)[0]
    assert code != 0


def test_dask_bands_give_the_same_alignment(files, capsys):
    pytest.importorskip("distributed")
    a, b = _related(2500, 4)
    fa = files("a.fa", _fasta([("a", a)]))
    fb = files("b.fa", _fasta([("b", b)]))
    base = ["align", fa, fb, "--mode", "local", "--format", "cigar"]
    plain = _run(base, capsys)[1]
    assert _run([*base, "--dask-workers", "2"], capsys)[1] == plain


def test_memory_stays_linear(tmp_path):
    """A 200 kb x 200 kb local alignment with traceback, end to end in a fresh process: peak
    RSS stays far below what any per-cell storage would need (4e10 cells)."""
    script = tmp_path / "make.py"
    script.write_text(
        "import sys\n"
        "sys.path.insert(0, 'bench')\n"
        "from make_long_pair import related, write\n"
        f"a, b = related(200_000, 0.05, 0.002, 0)\n"
        f"write({str(tmp_path / 'a.fa.gz')!r}, 'a', a)\n"
        f"write({str(tmp_path / 'b.fa')!r}, 'b', b)\n"
    )
    subprocess.run([sys.executable, str(script)], check=True)
    code = (
        "import resource, sys\n"
        "from dpalign.cli import main\n"
        f"rc = main(['align', {str(tmp_path / 'a.fa.gz')!r}, {str(tmp_path / 'b.fa')!r}, "
        f"'--mode', 'local', '--format', 'sam', '--out', {str(tmp_path / 'o.sam')!r}])\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
        "sys.exit(rc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    peak_mb = int(done.stdout.split()[-1]) / 1024
    assert peak_mb < 1000, peak_mb


def test_device_lists_give_the_same_alignment(files, capsys, cl_device):
    a, b = _related(2000, 5)
    fa = files("a.fa", _fasta([("a", a)]))
    fb = files("b.fa", _fasta([("b", b)]))
    base = ["align", fa, fb, "--mode", "local", "--format", "cigar", "--backend", "opencl"]
    plain = _run([*base, "--device", cl_device], capsys)[1]
    assert _run([*base, "--device", f"{cl_device},{cl_device}"], capsys)[1] == plain
    assert _run([*base, "--device", "all"], capsys)[1] == plain


def test_dask_workers_with_their_devices(files, capsys, cl_device):
    pytest.importorskip("distributed")
    a, b = _related(2500, 6)
    fa = files("a.fa", _fasta([("a", a)]))
    fb = files("b.fa", _fasta([("b", b)]))
    base = ["align", fa, fb, "--mode", "local", "--format", "cigar"]
    plain = _run(base, capsys)[1]
    devices = ["--backend", "opencl", "--device", cl_device, "--dask-workers", "2"]
    assert _run([*base, *devices], capsys)[1] == plain


def test_prune_gives_the_same_alignment(files, capsys, cl_device, monkeypatch):
    from dpalign import longpair

    seen = []
    real = longpair.align_long

    def spy(*args, **kwargs):
        seen.append(kwargs.get("prune"))
        return real(*args, **kwargs)

    monkeypatch.setattr(longpair, "align_long", spy)
    a, b = _related(2000, 7)
    fa = files("a.fa", _fasta([("a", a)]))
    fb = files("b.fa", _fasta([("b", b)]))
    base = ["align", fa, fb, "--format", "cigar", "--backend", "opencl", "--device", cl_device]
    plain = _run([*base, "--mode", "local"], capsys)[1]
    assert _run([*base, "--mode", "local", "--prune"], capsys)[1] == plain
    assert seen == [False, True]
    code, out, err = _run([*base, "--mode", "global", "--prune"], capsys)
    assert code != 0 and "--prune is for --mode local" in err and not out


@pytest.mark.parametrize("mode", ["local", "semiglobal", "global"])
@pytest.mark.parametrize("backend", ["numba", "opencl"])
def test_score_only_prints_the_alignments_score_and_end(files, capsys, mode, backend):
    """--score-only: one line per pair (a, b, score, a end, b end, strand) equal to the
    traced alignment's score and end, long pairs (the forward pass only: numba's tiles, or
    the OpenCL device, PoCL here) and short ones alike; --format json gives the same."""
    if backend == "opencl":
        pytest.importorskip("pyopencl")
    a, b = _related(1500, 3)
    fa = files("a.fa", _fasta([("q", a), ("tiny", "ACGTT")]))
    fb = files("b.fa", _fasta([("t1", b), ("t2", b[:700].translate(COMPLEMENT)[::-1])]))
    args = ["align", fa, fb, "--mode", mode, "--strand", "both", "--backend", backend]
    code, out, _ = _run([*args, "--score-only"], capsys)
    assert code == 0
    rows = [line.split("\t") for line in out.splitlines()]
    assert len(rows) == 4
    t2 = b[:700].translate(COMPLEMENT)[::-1]
    pairs = [(a, b), (a, t2), ("ACGTT", b), ("ACGTT", t2)]
    for row, (qa, ta) in zip(rows, pairs, strict=True):
        want = align(qa, ta, mode, strand="both")
        assert row[2:] == [str(want.score), str(want.a_end), str(want.b_end), want.strand]
    code, text, _ = _run([*args, "--score-only", "--format", "json"], capsys)
    items = json.loads(text)
    assert [[i["a"], i["b"], str(i["score"]), str(i["a_end"]), str(i["b_end"]), i["strand"]]
            for i in items] == [[r[0].split()[0], *r[1:]] for r in rows]  # fmt: skip


def test_score_only_refuses_formats_that_need_the_alignment(files, capsys):
    fa = files("a.fa", ">q\nACGT\n")
    for fmt in ("sam", "fasta"):
        code, out, err = _run(["align", fa, fa, "--score-only", "--format", fmt], capsys)
        assert code != 0 and out == ""
        assert f"--format {fmt} needs the alignment" in err
