"""Sequence, alignment and tree files in and out, with errors that say where.

FASTA and Newick are read by scikit-bio. PHYLIP is read here because PaPaRa's PHYLIP is the
relaxed dialect (names up to the first whitespace, sequential or interleaved), which
scikit-bio's strict reader does not accept. Every problem becomes an
:class:`~dpalign.errors.InputError` naming the file, line, record and column.
"""

from __future__ import annotations

import io as _io
import os
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError


@dataclass(frozen=True)
class Record:
    """One named sequence and the 1-based line where its record starts."""

    name: str
    seq: str
    line: int


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


def _read_text(path) -> str:
    if str(path) == "-":
        import sys

        return sys.stdin.read()
    try:
        with open(path, encoding="ascii", errors="strict") as handle:
            return handle.read()
    except FileNotFoundError:
        raise InputError("no such file", path=str(path)) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a file", path=str(path)) from None
    except PermissionError:
        raise InputError("cannot read the file (permission denied)", path=str(path)) from None
    except UnicodeDecodeError as exc:
        with open(path, "rb") as handle:
            head = handle.read(exc.start)
        line = head.count(b"\n") + 1
        column = exc.start - (head.rfind(b"\n") + 1) + 1
        raise InputError(
            f"non-ASCII byte 0x{exc.object[exc.start]:02x} at column {column}",
            path=str(path),
            line=line,
        ) from None


def read_fasta(path, text: str | None = None) -> list[Record]:
    """Read every record of a FASTA file (name = first word of the header).

    Parameters
    ----------
    path : str or Path
        The file (``"-"`` for standard input); used in messages when ``text`` is given.
    text : str, optional
        The file's content, if already read.
    """
    from skbio.io import FASTAFormatError
    from skbio.io import read as skbio_read

    text = _read_text(path) if text is None else text
    if not text.strip():
        raise InputError("the file is empty (expected FASTA records)", path=str(path))
    starts = _record_lines(text)
    first = text.lstrip().splitlines()[0]
    if not first.startswith(">"):
        line = next(k for k, ln in enumerate(text.splitlines(), 1) if ln.strip())
        raise InputError(
            "not FASTA: the first non-blank line is not a '>' header", path=str(path), line=line
        )
    records: list[Record] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k, seq in enumerate(skbio_read(_io.StringIO(text), format="fasta")):
                records.append(Record(seq.metadata["id"], str(seq), starts[k]))
    except FASTAFormatError as exc:
        k = len(records)
        line = starts[k] if k < len(starts) else None
        raise InputError(
            f"malformed FASTA in record {k + 1}: {str(exc).splitlines()[0]}",
            path=str(path),
            line=line,
        ) from None
    for rec in records:
        if not rec.name:
            raise InputError("record without a name", path=str(path), line=rec.line)
    return records


def read_fasta_allow_empty(path) -> list[Record]:
    """Like :func:`read_fasta`, but a header without sequence lines is an empty record.

    Pairwise alignment defines a result for empty sequences; scikit-bio's reader rejects
    them, so their header lines are blanked (line numbers stay right) and the records put
    back in file order.
    """
    text = _read_text(path)
    lines = text.splitlines()
    empty: dict[int, Record] = {}
    for k, line in enumerate(lines):
        if not line.startswith(">"):
            continue
        following = next((ln for ln in lines[k + 1 :] if ln.strip()), None)
        if following is None or following.startswith(">"):
            name = line[1:].split()[0] if line[1:].split() else ""
            if not name:
                raise InputError("record without a name", path=str(path), line=k + 1)
            empty[k + 1] = Record(name, "", k + 1)
    if not empty:
        return read_fasta(path, text)
    kept = [("" if k + 1 in empty else line) for k, line in enumerate(lines)]
    rest = read_fasta(path, "\n".join(kept) + "\n") if any(ln.strip() for ln in kept) else []
    return sorted(rest + list(empty.values()), key=lambda r: r.line)


def _record_lines(text: str) -> list[int]:
    return [k for k, line in enumerate(text.splitlines(), 1) if line.startswith(">")]


def locate_in_fasta(path, record: Record, position: int) -> int:
    """Return the 1-based line of the 1-based sequence ``position`` inside ``record``."""
    lines = _read_text(path).splitlines()
    seen = 0
    for offset, line in enumerate(lines[record.line :], start=record.line + 1):
        if line.startswith(">"):
            break
        seen += len("".join(line.split()))
        if seen >= position:
            return offset
    return record.line


def read_phylip(path, text: str | None = None) -> list[Record]:
    """Read a relaxed PHYLIP alignment, sequential (possibly wrapped) or interleaved.

    The header is ``rows columns``; a name runs up to the first whitespace; spaces inside
    sequence data are ignored.
    """
    text = _read_text(path) if text is None else text
    lines = [(k, ln.strip()) for k, ln in enumerate(text.splitlines(), 1)]
    content = [(k, ln) for k, ln in lines if ln]
    if not content:
        raise InputError("the file is empty (expected a PHYLIP header)", path=str(path))
    head_line, head = content[0]
    parts = head.split()
    try:
        n_rows, n_cols = int(parts[0]), int(parts[1])
        if n_rows < 1 or n_cols < 1 or len(parts) > 2 and not parts[2].isalpha():
            raise ValueError
    except (ValueError, IndexError):
        raise InputError(
            f"PHYLIP header must be 'rows columns', found {head!r}", path=str(path), line=head_line
        ) from None
    body = content[1:]
    # Interleaved files come in blocks of n_rows lines whose first block is shorter than the
    # alignment; a wrapped sequential file can look alike, so fall back to it.
    first_len = len("".join(body[0][1].split()[1:])) if body else 0
    if first_len < n_cols and len(body) > n_rows and len(body) % n_rows == 0:
        try:
            return _phylip_interleaved(path, body, n_rows, n_cols)
        except InputError:
            pass
    return _phylip_sequential(path, body, n_rows, n_cols)


def _phylip_sequential(path, body, n_rows, n_cols) -> list[Record]:
    records, k = [], 0
    for _ in range(n_rows):
        if k >= len(body):
            raise InputError(
                f"the header promises {n_rows} sequences, found {len(records)}", path=str(path)
            )
        line_no, line = body[k]
        name = line.split()[0]
        rest = line[len(name) :]
        seq = "".join(rest.split())
        k += 1
        while len(seq) < n_cols and k < len(body):
            seq += "".join(body[k][1].split())
            k += 1
        if len(seq) != n_cols:
            raise InputError(
                f"sequence has {len(seq)} characters, the header says {n_cols}",
                path=str(path),
                line=line_no,
                record=name,
            )
        records.append(Record(name, seq, line_no))
    if k != len(body):
        raise InputError(
            f"unexpected data after the {n_rows} sequences", path=str(path), line=body[k][0]
        )
    return records


def _phylip_interleaved(path, body, n_rows, n_cols) -> list[Record]:
    names, seqs, lines = [], [], []
    for line_no, line in body[:n_rows]:
        name = line.split()[0]
        names.append(name)
        seqs.append("".join(line[len(name) :].split()))
        lines.append(line_no)
    for k, (_, line) in enumerate(body[n_rows:]):
        seqs[k % n_rows] += "".join(line.split())
    for name, seq, line_no in zip(names, seqs, lines, strict=True):
        if len(seq) != n_cols:
            raise InputError(
                f"sequence has {len(seq)} characters, the header says {n_cols}",
                path=str(path),
                line=line_no,
                record=name,
            )
    return [Record(n, s, k) for n, s, k in zip(names, seqs, lines, strict=True)]


def read_alignment(path) -> list[Record]:
    """Read an MSA from FASTA or PHYLIP (chosen by content) and check it is rectangular."""
    text = _read_text(path)
    stripped = text.lstrip()
    if not stripped:
        raise InputError("the alignment file is empty", path=str(path))
    records = read_fasta(path, text) if stripped.startswith(">") else read_phylip(path, text)
    check_unique([r.name for r in records], path, [r.line for r in records])
    width = len(records[0].seq)
    for rec in records:
        if len(rec.seq) != width:
            raise InputError(
                f"ragged alignment: this row has {len(rec.seq)} columns, "
                f"{records[0].name!r} has {width}",
                path=str(path),
                line=rec.line,
                record=rec.name,
            )
    return records


def check_unique(names: list[str], path=None, lines: list[int] | None = None) -> None:
    """Raise if a name repeats."""
    seen: dict[str, int | None] = {}
    for name, line in zip(names, lines or [None] * len(names), strict=True):
        if name in seen:
            first = f" (first at line {seen[name]})" if seen[name] else ""
            raise InputError(
                f"duplicate name {name!r}{first}", path=str(path) if path else None, line=line
            )
        seen[name] = line


def read_newick(path, text: str | None = None):
    """Read a Newick tree with scikit-bio (names kept verbatim: no underscore conversion)."""
    from skbio import TreeNode

    text = _read_text(path) if text is None else text
    check_newick_syntax(text, path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return TreeNode.read(_io.StringIO(text), format="newick", convert_underscores=False)
    except Exception as exc:  # scikit-bio's NewickFormatError and friends
        raise InputError(f"malformed Newick tree: {exc}", path=str(path)) from None


def check_newick_syntax(text: str, path=None) -> None:
    """Find Newick syntax errors scikit-bio would report without a position.

    Checks balanced parentheses, the closing ``;``, branch lengths that are numbers, and
    nothing after the ``;``. Positions are reported as line and column.
    """

    def fail(message: str, offset: int):
        line = text.count("\n", 0, offset) + 1
        column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        raise InputError(
            f"Newick syntax error at column {column}: {message}", path=str(path), line=line
        )

    body = text.strip()
    if not body:
        raise InputError("the tree file is empty", path=str(path))
    start = text.index(body[0])
    depth, k, end = 0, start, None
    quote = False
    while k < len(text):
        ch = text[k]
        if quote:
            quote = ch != "'"
        elif ch == "'":
            quote = True
        elif ch == "[":
            close = text.find("]", k)
            if close < 0:
                fail("comment '[' is never closed", k)
            k = close
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                fail("')' without a matching '('", k)
        elif ch == ":":
            j = k + 1
            while j < len(text) and text[j] not in ",);[" and not text[j].isspace():
                j += 1
            token = text[k + 1 : j]
            try:
                float(token)
            except ValueError:
                fail(f"branch length {token!r} is not a number", k + 1)
        elif ch == ";":
            if depth:
                fail(f"';' reached with {depth} '(' still open", k)
            end = k
            break
        k += 1
    if quote:
        fail("quoted name is never closed", len(text) - 1)
    if end is None:
        fail(
            "missing ';' at the end of the tree"
            if depth == 0
            else f"{depth} '(' never closed and no ';'",
            len(text.rstrip()),
        )
    if text[end + 1 :].strip():
        fail(
            "text after the closing ';'",
            end + 1 + (len(text[end + 1 :]) - len(text[end + 1 :].lstrip())),
        )


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def format_phylip(rows: list[tuple[str, str]]) -> str:
    """PaPaRa's PHYLIP: ``rows cols`` then each name padded to (longest name + 1), the row."""
    width = max(len(name) for name, _ in rows) + 1
    cols = len(rows[0][1]) if rows else 0
    out = [f"{len(rows)} {cols}\n"]
    out.extend(f"{name.ljust(width)}{seq}\n" for name, seq in rows)
    return "".join(out)


def format_fasta(rows: list[tuple[str, str]]) -> str:
    """``>name`` and the row on one line each."""
    return "".join(f">{name}\n{seq}\n" for name, seq in rows)


class RowWriter:
    """Streams an alignment, block by block, in :func:`format_phylip`'s or
    :func:`format_fasta`'s layout (the same bytes).

    Parameters
    ----------
    handle : binary file
    fmt : {"phylip", "fasta"}
    names : list of str
        Every row's name, in output order (PHYLIP pads names to the longest, and its header
        counts the rows).
    n_cols : int
        Columns of every row.
    """

    def __init__(self, handle, fmt: str, names: list[str], n_cols: int) -> None:
        import numpy as np

        self._np = np
        self.handle = handle
        self.fmt = fmt
        self.n_cols = n_cols
        if fmt == "phylip":
            self.name_width = max(map(len, names)) + 1
            handle.write(f"{len(names)} {n_cols}\n".encode("ascii"))
        elif fmt != "fasta":
            raise ValueError(f"unknown alignment format {fmt!r}")

    def write(self, names: list[str], rows) -> None:
        """Write rows given as a (len(names), n_cols) uint8 matrix of ASCII codes."""
        np = self._np
        if not names:
            return
        rows = np.asarray(rows, dtype=np.uint8).reshape(len(names), self.n_cols)
        if self.fmt == "fasta":
            self.handle.write(
                b"".join(
                    b">%s\n%s\n" % (name.encode("ascii"), row.tobytes())
                    for name, row in zip(names, rows, strict=True)
                )
            )
            return
        w = self.name_width
        lines = np.empty((len(names), w + self.n_cols + 1), dtype=np.uint8)
        padded = "".join(name.ljust(w) for name in names).encode("ascii")
        lines[:, :w] = np.frombuffer(padded, dtype=np.uint8).reshape(len(names), w)
        lines[:, w:-1] = rows
        lines[:, -1] = ord("\n")
        self.handle.write(lines.tobytes())


def _read_umask() -> int:
    # Setting and restoring the umask is the portable way to read it; done once at import,
    # before any worker thread could create a file in between.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


@contextmanager
def atomic_output(path, binary: bool = False) -> Iterator[_io.IOBase]:
    """Write a file so that it appears whole or not at all.

    Writes to a temporary file beside ``path`` and renames it into place only when the block
    finishes without an exception; on any error (including Ctrl-C) the temporary file is
    removed and an existing ``path`` is left untouched. ``binary``: a bytes handle.
    """
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise InputError("the output folder does not exist", path=str(directory))
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=directory)
    try:
        # mkstemp makes the file private (0600); the result gets the permissions any new
        # file would (0666 less the umask), as PaPaRa's own outputs do.
        os.chmod(fd, 0o666 & ~_UMASK)
        if binary:
            with os.fdopen(fd, "wb") as handle:
                yield handle
        else:
            with os.fdopen(fd, "w", encoding="ascii", newline="\n") as handle:
                yield handle
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
