"""Sequence, alignment and tree files in and out, with errors that say where.

FASTA is read here with NumPy over the whole file (scikit-bio's conventions, at disk speed);
Newick by scikit-bio. PHYLIP is read here because PaPaRa's PHYLIP is the relaxed dialect
(names up to the first whitespace, sequential or interleaved), which scikit-bio's strict
reader does not accept. Every input may be gzip, bzip2 or xz compressed (recognised by
content) and may start with a UTF-8 byte-order mark. Every problem becomes an
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

import numpy as np

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


_GZIP, _BZ2, _XZ, _BOM = b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\xef\xbb\xbf"


def read_bytes(path) -> bytes:
    """The content of a file (``"-"``: standard input), decompressed and without a BOM.

    gzip, bzip2 and xz are recognised by their magic bytes, not by the file name; a UTF-8
    byte-order mark at the start is dropped.
    """
    if str(path) == "-":
        import sys

        data = sys.stdin.buffer.read()
    else:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            raise InputError("no such file", path=str(path)) from None
        except IsADirectoryError:
            raise InputError("is a directory, not a file", path=str(path)) from None
        except PermissionError:
            raise InputError("cannot read the file (permission denied)", path=str(path)) from None
    data = _decompress(data, path)
    return data[3:] if data.startswith(_BOM) else data


def _decompress(data: bytes, path) -> bytes:
    if data.startswith(_GZIP):
        import zlib

        try:  # ISA-L inflates about 3 times as fast as zlib here; zlib where isal is missing
            from isal import igzip as module
        except ImportError:
            import gzip as module
        kind, errors = "gzip", (OSError, EOFError, zlib.error)
    elif data.startswith(_BZ2):
        import bz2

        kind, module, errors = "bzip2", bz2, (OSError, EOFError, ValueError)
    elif data.startswith(_XZ):
        import lzma

        kind, module, errors = "xz", lzma, (lzma.LZMAError, EOFError)
    else:
        return data
    try:
        return module.decompress(data)
    except errors as exc:
        raise InputError(f"damaged {kind} file: {exc}", path=str(path)) from None


def _where(data: bytes, offset: int) -> tuple[int, int]:
    """1-based (line, column) of byte ``offset``."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    return data.count(b"\n", 0, offset) + 1, offset - line_start + 1


def _read_text(path, data: bytes | None = None) -> str:
    """The file as ASCII text (decompressed); a non-ASCII byte is an error naming its place."""
    data = read_bytes(path) if data is None else data
    try:
        return data.decode("ascii")
    except UnicodeDecodeError as exc:
        line, column = _where(data, exc.start)
        raise InputError(
            f"non-ASCII byte 0x{data[exc.start]:02x} at column {column}",
            path=str(path),
            line=line,
        ) from None


# Byte classes of the FASTA reader: sequence characters, whitespace (dropped anywhere in a
# sequence, as spaces and tabs alike), and bytes no sequence or name may hold.
_SEQ, _SPACE, _BAD = 0, 1, 2
_CLASS = np.full(256, _BAD, dtype=np.uint8)
_CLASS[0x21:0x7F] = _SEQ
_WHITESPACE = b" \t\n\r\x0b\x0c"
_CLASS[list(_WHITESPACE)] = _SPACE


@dataclass(frozen=True)
class FastaBlock:
    """A FASTA file parsed into arrays: every sequence in one buffer, sliced by offsets.

    Attributes
    ----------
    names : list of str
        The first word of each header, exactly as written.
    residues : ndarray of uint8
        All sequences concatenated (whitespace removed).
    offsets : ndarray of int64, shape (n + 1,)
        Sequence ``k`` is ``residues[offsets[k]:offsets[k + 1]]``.
    lines : ndarray of int64
        The 1-based line of each header.
    """

    names: list[str]
    residues: np.ndarray
    offsets: np.ndarray
    lines: np.ndarray

    def __len__(self) -> int:
        return len(self.names)

    def sequences(self) -> list[str]:
        """Every sequence as a string."""
        base = self.residues.base
        raw = base if isinstance(base, bytes) else self.residues.tobytes()
        text = raw.decode("ascii")
        bounds = self.offsets.tolist()
        return [text[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def records(self) -> list[Record]:
        """The sequences as :class:`Record` objects."""
        import gc

        # Hundreds of thousands of new objects set off the cyclic collector again and again
        # (it walks every live object), for nothing: no cycle is made here. Off, the
        # records come twice as fast.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return list(map(Record, self.names, self.sequences(), self.lines.tolist()))
        finally:
            if enabled:
                gc.enable()


def read_fasta_block(
    path, data: bytes | None = None, *, allow_empty: bool = False, table: bytes | None = None
) -> FastaBlock:
    """Parse a FASTA file with NumPy over its bytes (no Python loop per line).

    Follows scikit-bio's reader: a header is a line whose first non-blank character is
    ``>``, the name is its first word, blank lines and whitespace anywhere in the sequence
    lines are dropped, ``\\r\\n`` line ends are fine. Names must be unique.

    Parameters
    ----------
    path : str or Path
        The file (``"-"``: standard input; gzip, bzip2 and xz are read transparently); used
        in messages when ``data`` is given.
    data : bytes, optional
        The file's (decompressed) content, if already read.
    allow_empty : bool
        Accept headers without sequence lines (empty sequences); otherwise an error.
    table : bytes, optional
        256 bytes: every residue is translated through it as its megabyte is parsed (an
        alphabet's codes, say: one pass over cached bytes instead of two copies and a pass
        over the whole buffer afterwards). ``residues`` then holds the table's values, in a
        writable buffer.
    """
    data = read_bytes(path) if data is None else data
    where = str(path)
    names: list[str] = []
    bodies, sizes, lines = [], [], []
    line_offset = 0
    # translated residues go straight into one buffer as each megabyte is parsed (no list
    # of bodies joined afterwards: half the peak memory, and the copy from cache)
    out = np.empty(len(data), np.uint8) if table is not None else None
    filled = 0
    for chunk in _chunks(data, _CHUNK_BYTES):
        try:
            part = _parse_chunk(chunk, where, allow_empty, table)
        except InputError as exc:
            line = None if exc.line is None else exc.line + line_offset
            raise InputError(
                exc.message, path=exc.path, line=line, record=exc.record, column=exc.column
            ) from None
        names.extend(part[0])
        if out is not None:
            out[filled : filled + len(part[1])] = np.frombuffer(part[1], np.uint8)
            filled += len(part[1])
        else:
            bodies.append(part[1])
        sizes.append(part[2])
        lines.append(part[3] + line_offset)
        line_offset += part[4]
    all_lines = np.concatenate(lines)
    check_unique(names, path, all_lines)
    all_sizes = np.concatenate(sizes)
    offsets = np.zeros(len(names) + 1, dtype=np.int64)
    np.cumsum(all_sizes, out=offsets[1:])
    if out is not None:  # writable, as an encoder's output is
        return FastaBlock(names, out[:filled], offsets, all_lines)
    body = bodies[0] if len(bodies) == 1 else b"".join(bodies)
    return FastaBlock(names, np.frombuffer(body, dtype=np.uint8), offsets, all_lines)


# Parsed a megabyte at a time, every pass over the bytes stays in the cache: 1.5-2 times
# faster here than whole-file passes (measured on 80 MB, BENCHMARKS.md).
_CHUNK_BYTES = 1 << 20


def _chunks(data: bytes, size: int) -> Iterator[bytes]:
    """Pieces of about ``size`` bytes that end where a line starting with '>' begins."""
    if len(data) <= size:
        yield data
        return
    start = 0
    while start < len(data):
        cut = data.find(b"\n>", start + size)
        stop = len(data) if cut < 0 else cut + 1
        yield data[start:stop]
        start = stop


def _parse_chunk(data: bytes, where: str, allow_empty: bool, table: bytes | None = None):
    """Parse whole records: (names, sequences without blanks, sizes, header lines, newlines).

    Lines in errors and results count from the chunk's first line; ``table``: the sequences
    translated through it (in the pass that drops the blanks).
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    # every byte outside '!'..'~' (whitespace, bad bytes: few next to the residues), found by
    # one wrapping subtraction and one comparison (a boolean nonzero is several times faster
    # than a uint8 one, and a table lookup slower than both)
    scratch = np.subtract(buf, np.uint8(0x21))
    special = np.flatnonzero(np.greater(scratch, 0x7E - 0x21, out=scratch.view(np.bool_)))
    kinds = _CLASS[buf[special]]
    newlines = special[buf[special] == 0x0A]
    starts = _header_starts(data, buf, newlines)
    if starts.size == 0 or (starts[0] and (_CLASS[buf[: starts[0]]] != _SPACE).any()):
        return _not_fasta(data, where)
    # a header runs to its newline; the name to the header's first whitespace
    after = np.searchsorted(newlines, starts)
    ends = np.append(newlines, len(buf))[after]
    lines = after + 1
    blanks = special[kinds == _SPACE]
    name_end = np.append(blanks, len(buf))[np.searchsorted(blanks, starts + 1)]
    name_len = name_end - starts - 1
    if (name_len == 0).any():
        k = int(np.flatnonzero(name_len == 0)[0])
        raise InputError(
            "record without a name (a '>' line with no name)", path=where, line=int(lines[k])
        )
    if (kinds == _BAD).any():
        _bad_bytes(data, where, special[kinds == _BAD], starts, ends, name_end, lines)
    # the names, each followed by its header's next byte (a blank), decoded and split once
    group = name_len + 1
    index = np.arange(int(group.sum()), dtype=np.int64) + np.repeat(
        starts + 1 - (np.cumsum(group) - group), group
    )
    name_bytes = buf[np.minimum(index, len(buf) - 1)]
    name_bytes[np.cumsum(group) - 1] = 0x0A
    names = name_bytes.tobytes().decode("ascii").split("\n")[:-1]
    # the sequences: the text between a header's end and the next header, blanks removed
    seq_start = ends
    seq_end = np.append(starts[1:], len(buf))
    blank_count = np.searchsorted(blanks, seq_end) - np.searchsorted(blanks, seq_start)
    sizes = seq_end - seq_start - blank_count
    if not allow_empty and (sizes == 0).any():
        k = int(np.flatnonzero(sizes == 0)[0])
        raise InputError(
            "the record has no sequence", path=where, line=int(lines[k]), record=names[k]
        )
    body = b"".join([data[a:b] for a, b in zip(seq_start.tolist(), seq_end.tolist(), strict=True)])
    # no '\r', space or tab between the sequences' lines: the fast memchr path
    only_newlines = int(blank_count.sum()) == int(np.searchsorted(newlines, len(buf)) - after[0])
    if table is not None:
        body = body.translate(table, b"\n" if only_newlines else _WHITESPACE)
    else:
        body = body.replace(b"\n", b"") if only_newlines else body.translate(None, _WHITESPACE)
    return names, body, sizes, lines, newlines.size


def _header_starts(data: bytes, buf: np.ndarray, newlines: np.ndarray) -> np.ndarray:
    """Offsets of the '>' of every header line (looked for at line starts only)."""
    line_starts = np.concatenate(([0], newlines + 1))
    line_starts = line_starts[line_starts < len(buf)]
    first = buf[line_starts]
    starts = line_starts[first == 0x3E]
    # rare: a '>' after leading blanks still opens a header (scikit-bio strips lines)
    indented = line_starts[(_CLASS[first] == _SPACE) & (first != 0x0A)]
    if indented.size:
        found = []
        for start in indented.tolist():
            stop = data.find(b"\n", start)
            line = data[start : stop if stop >= 0 else len(data)]
            body = line.lstrip()
            if body.startswith(b">"):
                found.append(start + len(line) - len(body))
        if found:
            starts = np.sort(np.concatenate((starts, found)))
    return starts.astype(np.int64)


def _not_fasta(data: bytes, where: str):
    text = data.lstrip()
    if not text:
        raise InputError("the file is empty (expected FASTA records)", path=where)
    line, _ = _where(data, len(data) - len(text))
    raise InputError(
        "not FASTA: the first non-blank line is not a '>' header", path=where, line=line
    )


def _describe_byte(byte: int) -> str:
    return f"non-ASCII byte 0x{byte:02x}" if byte > 0x7E else f"control character 0x{byte:02x}"


def _bad_bytes(data: bytes, where: str, bad, starts, ends, name_end, lines):
    """Raise for the first byte no name or sequence may hold (a description may hold any)."""
    record = np.searchsorted(starts, bad, side="right") - 1
    in_description = (record >= 0) & (bad >= name_end[record]) & (bad < ends[record])
    outside = ~in_description
    for offset, k in zip(bad[outside].tolist(), record[outside].tolist(), strict=True):
        line, column = _where(data, offset)
        in_name = offset < name_end[k]
        first = data[starts[k] + 1 : name_end[k]].split(maxsplit=1)
        raise InputError(
            f"{_describe_byte(data[offset])} at column {column}"
            + (" in the record's name (names must be ASCII)" if in_name else ""),
            path=where,
            line=line,
            record=None if in_name else first[0].decode("ascii", "replace"),
        )


def read_fasta(path, text: str | bytes | None = None) -> list[Record]:
    """Read every record of a FASTA file (name = first word of the header).

    Parameters
    ----------
    path : str or Path
        The file (``"-"`` for standard input; gzip, bzip2 or xz compressed or not); used in
        messages when ``text`` is given.
    text : str or bytes, optional
        The file's content, if already read.

    Raises
    ------
    InputError
        Naming file, line and record: not FASTA, a header without a name or without a
        sequence, a byte that is not printable ASCII, a name used twice.
    """
    data = text.encode("utf-8") if isinstance(text, str) else text
    return read_fasta_block(path, data).records()


def read_fasta_allow_empty(path) -> list[Record]:
    """Like :func:`read_fasta`, but a header without sequence lines is an empty record.

    Pairwise alignment defines a result for empty sequences.
    """
    return read_fasta_block(path, allow_empty=True).records()


def locate_in_fasta(path, record: Record, position: int) -> int:
    """Return the 1-based line of the 1-based sequence ``position`` inside ``record``.

    Falls back to the record's own line when the file is not FASTA (a PHYLIP row).
    """
    lines = read_bytes(path).decode("latin-1").splitlines()
    if not lines[record.line - 1].lstrip().startswith(">"):
        return record.line
    seen = 0
    for offset, line in enumerate(lines[record.line :], start=record.line + 1):
        if line.lstrip().startswith(">"):
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
        before = len(seq)
        while len(seq) < n_cols and k < len(body):
            before = len(seq)
            seq += "".join(body[k][1].split())
            k += 1
        if len(seq) != n_cols:
            # a short row swallows the next row when read as wrapped: count only its own
            size = before if len(seq) > n_cols else len(seq)
            raise InputError(
                f"sequence has {size} characters, the header says {n_cols}",
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
    data = read_bytes(path)
    stripped = data.lstrip()
    if not stripped:
        raise InputError("the alignment file is empty", path=str(path))
    if stripped.startswith(b">"):
        records = read_fasta(path, data)
    else:
        records = read_phylip(path, _read_text(path, data))
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


def check_unique(names: list[str], path=None, lines=None, paths=None) -> None:
    """Raise if a name repeats, naming the file(s) and both lines.

    Parameters
    ----------
    names : list of str
    path : str or Path, optional
        The file all names come from.
    lines : sequence of int, optional
        The 1-based line of each name.
    paths : sequence, optional
        The file of each name, where they come from several files (overrides ``path``).
    """
    if len(set(names)) == len(names):
        return
    lines = [None] * len(names) if lines is None else list(lines)
    paths = [path] * len(names) if paths is None else list(paths)
    seen: dict[str, int] = {}
    for k, name in enumerate(names):
        if name not in seen:
            seen[name] = k
            continue
        first = seen[name]
        place = []
        if paths[first] is not None and paths[first] != paths[k]:
            place.append(str(paths[first]))
        if lines[first] is not None:
            place.append(f"line {lines[first]}")
        raise InputError(
            f"duplicate name {name!r}" + (f" (first at {', '.join(place)})" if place else ""),
            path=None if paths[k] is None else str(paths[k]),
            line=lines[k],
        )


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


def epa_split(rows: list[tuple[str, str]], reference_names) -> tuple[str, str]:
    """What ``epa-ng --split REF.fasta FULL`` writes from a whole alignment: the texts of
    ``reference.fasta`` (rows named in the reference, in ``rows`` order) and ``query.fasta``
    (the other rows).

    epa-ng (``src/util/split.hpp``) reads with genesis, whose FASTA and PHYLIP readers turn
    sites to upper case, and writes with genesis' ``FastaWriter``: ``>label``, then the
    sequence in lines of 80 characters.
    """
    names = set(reference_names)

    def fasta(subset) -> str:
        return "".join(
            f">{name}\n" + "".join(f"{seq[k : k + 80]}\n" for k in range(0, len(seq), 80))
            for name, seq in ((n, s.upper()) for n, s in subset)
        )

    return (
        fasta([row for row in rows if row[0] in names]),
        fasta([row for row in rows if row[0] not in names]),
    )


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
        self.write_encoded(self.encode(names, rows))

    def encode(self, names: list[str], rows):
        """The bytes :meth:`write` writes for these rows (a bytes-like object), without
        writing them: blocks can be encoded on several threads and written in order
        (:meth:`write_encoded`)."""
        np = self._np
        if not names:
            return b""
        rows = np.asarray(rows, dtype=np.uint8).reshape(len(names), self.n_cols)
        if self.fmt == "fasta":
            return b"".join(
                b">%s\n%s\n" % (name.encode("ascii"), row.tobytes())
                for name, row in zip(names, rows, strict=True)
            )
        w = self.name_width
        lines = np.empty((len(names), w + self.n_cols + 1), dtype=np.uint8)
        padded = "".join(name.ljust(w) for name in names).encode("ascii")
        lines[:, :w] = np.frombuffer(padded, dtype=np.uint8).reshape(len(names), w)
        lines[:, w:-1] = rows
        lines[:, -1] = ord("\n")
        return memoryview(lines.reshape(-1))  # written as it is: no copy into bytes

    def write_encoded(self, encoded) -> None:
        """Write what :meth:`encode` returned."""
        if len(encoded):
            self.handle.write(encoded)


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
