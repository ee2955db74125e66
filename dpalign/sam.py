"""SAM output of pairwise alignments (the SAM format specification, version 1.6).

The query (``a``, the rows of the DP matrix) is the read, the target (``b``) the reference
sequence. Conventions:

* ``POS`` is 1-based: the first target position the alignment covers;
* the CIGAR's ``I`` is a query residue against a gap (dpalign's ``D``, "a character of a
  against a gap"), its ``D`` a target residue against a gap (dpalign's ``I``); the query's
  unaligned ends (local, semiglobal with free query ends) are soft clips (``S``), so that the
  CIGAR's query length is the read's length;
* an alignment of the query with the target's reverse complement (``--strand minus`` or
  ``both``) is written as SAM does it: ``FLAG`` 16, ``SEQ`` the query's reverse complement,
  ``POS`` and ``CIGAR`` along the target as given;
* ``NM`` is the edit distance (mismatches, inserted and deleted residues), ``AS`` the score;
* an empty local alignment (score 0) is an unmapped read (``FLAG`` 4);
* with several targets, each query's best alignment is primary, the others secondary
  (``FLAG`` 256, ``SEQ`` ``*``).

>>> ops = "===XD==I"  # dpalign's: D is a residue of the query against a gap
>>> cigar_ops(ops, 2, 8, 10)
'2S3=1X1I2=1D2S'
>>> edit_distance(ops)
3
"""

from __future__ import annotations

import re

import numpy as np

#: The SAM version these records follow.
VERSION = "1.6"
_NAME = re.compile(r"[0-9A-Za-z!#$%&+./:;?@^_|~-][0-9A-Za-z!#$%&*+./:;=?@^_|~-]*")
_SWAP = bytes.maketrans(b"ID", b"DI")


def reference_name(name: str) -> str:
    """A FASTA name as a SAM reference name (``@SQ SN`` and ``RNAME``): characters SAM does
    not allow there (whitespace, commas, brackets...) become ``_``."""
    if _NAME.fullmatch(name):
        return name
    cleaned = re.sub(r"[^0-9A-Za-z!#$%&*+./:;=?@^_|~-]", "_", name) or "_"
    return cleaned if _NAME.fullmatch(cleaned) else "_" + cleaned


def query_name(name: str) -> str:
    """A FASTA name as a SAM ``QNAME`` (printable ASCII but ``@``, at most 254 characters)."""
    cleaned = re.sub(r"[^!-?A-~]", "_", name)[:254]
    return cleaned or "*"


def header(targets: list[tuple[str, int]], command_line: str, version: str) -> str:
    """``@HD``, one ``@SQ`` per target ``(name, length)``, ``@PG``."""
    lines = [f"@HD\tVN:{VERSION}\tSO:unsorted\n"]
    lines += [f"@SQ\tSN:{reference_name(name)}\tLN:{max(length, 1)}\n" for name, length in targets]
    lines.append(f"@PG\tID:dpalign\tPN:dpalign\tVN:{version}\tCL:{_tabless(command_line)}\n")
    return "".join(lines)


def _tabless(text: str) -> str:
    return text.replace("\t", " ").replace("\n", " ")


def cigar_ops(ops: str, a_start: int, a_end: int, m: int, style: str = "=X") -> str:
    """The SAM CIGAR of dpalign ``ops`` aligning ``a[a_start:a_end]`` (``m = len(a)``):
    ``I``/``D`` swapped to SAM's sense, soft clips for the unaligned ends of ``a``."""
    codes = np.frombuffer(ops.encode("ascii").translate(_SWAP), dtype=np.uint8)
    if style == "M":
        codes = np.where((codes == ord("=")) | (codes == ord("X")), ord("M"), codes)
    parts = [f"{a_start}S"] if a_start else []
    if codes.size:
        starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))
        counts = np.diff(np.append(starts, codes.size))
        letters = codes[starts].astype(np.uint8).tobytes().decode("ascii")
        parts += [f"{c}{op}" for c, op in zip(counts.tolist(), letters, strict=True)]
    if m - a_end:
        parts.append(f"{m - a_end}S")
    return "".join(parts)


def edit_distance(ops: str) -> int:
    """SAM's ``NM``: mismatches plus inserted and deleted residues."""
    codes = np.frombuffer(ops.encode("ascii"), dtype=np.uint8)
    return int(np.count_nonzero(codes != ord("=")))


def record(
    qname: str,
    rname: str,
    aln,
    m: int,
    n: int,
    seq: str,
    secondary: bool = False,
) -> str:
    """One SAM line for a :class:`dpalign.pairwise.Alignment` of a query of length ``m``
    (text ``seq``: the query as given; reversed and complemented by the caller for the minus
    strand) with a target of length ``n``."""
    score = aln.score
    tag_as = f"AS:i:{int(score)}" if float(score).is_integer() else f"AS:f:{score}"
    if not aln.ops:  # an empty (local) alignment: the read is unmapped
        flag = 4 | (256 if secondary else 0)
        fields = [query_name(qname), str(flag), "*", "0", "0", "*", "*", "0", "0"]
        fields += ["*" if secondary or not seq else seq, "*", tag_as]
        return "\t".join(fields) + "\n"
    ops, a_start, a_end = aln.ops, aln.a_start, aln.a_end
    pos = aln.b_start
    flag = 256 if secondary else 0
    if aln.strand == "-":
        # a against rc(b) is rc(a) against b: the columns reversed, coordinates mirrored
        ops = ops[::-1]
        a_start, a_end = m - aln.a_end, m - aln.a_start
        pos = n - aln.b_end
        flag |= 16
    cigar = cigar_ops(ops, a_start, a_end, m, aln.cigar_style)
    fields = [query_name(qname), str(flag), reference_name(rname), str(pos + 1), "255", cigar]
    fields += ["*", "0", "0", "*" if secondary or not seq else seq, "*"]
    fields += [f"NM:i:{edit_distance(aln.ops)}", tag_as]
    return "\t".join(fields) + "\n"
