"""PaPaRa's inputs, validated and encoded: the tree, the reference rows, the reads.

Reads come from the reads FASTA first, then from MSA rows that are not tips of the tree (in
MSA order), as in PaPaRa 2.5. Columns that are a gap state in every reference row are
dropped (spec §3).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ..alphabet import DNA, PROTEIN, StateAlphabet
from ..errors import InputError
from ..io import (
    Record,
    _read_text,
    check_newick_syntax,
    check_unique,
    locate_in_fasta,
    read_alignment,
    read_fasta,
)
from .newick import parse_newick
from .tree import PaparaTree, build_tree

log = logging.getLogger("dpalign.papara")
_WARN_EACH = 5  # reads warned about one by one; the rest are counted (and listed with -v)


@dataclass
class PaparaData:
    """Everything the PaPaRa pipeline needs, encoded.

    Attributes
    ----------
    tree : PaparaTree
    alphabet : StateAlphabet
    ref_names : list of str
        Reference (tree) rows in MSA order.
    ref_rows : list of str
        Their raw text, all-gap columns removed.
    ref_states : ndarray (T, n)
        Their states.
    tip_rows : dict
        Tree tip node -> row index into ``ref_names``.
    gap_fraction : float
        Literal ``-`` characters / (T * n): the likelihood model's g.
    read_names, reads : list
        Read names and states (FASTA reads, then non-tree MSA rows).
    n_fasta_reads : int
        How many of the reads came from the FASTA file.
    """

    tree: PaparaTree
    alphabet: StateAlphabet
    ref_names: list[str]
    ref_rows: list[str]
    ref_states: np.ndarray
    tip_rows: dict[int, int]
    gap_fraction: float
    read_names: list[str]
    reads: list[np.ndarray]
    n_fasta_reads: int
    warnings: list[str] = field(default_factory=list)

    @property
    def n_columns(self) -> int:
        return self.ref_states.shape[1]


def load(
    tree,
    msa,
    reads=None,
    protein: bool = False,
    tree_path=None,
    msa_path=None,
    reads_path=None,
    keep_ambiguous: bool = False,
) -> PaparaData:
    """Validate and encode PaPaRa's inputs.

    Parameters
    ----------
    tree : path, Newick text, or skbio.TreeNode
    msa : path, list of Record, list of (name, row), or skbio.TabularMSA
    reads : path, list of Record, list of (name, seq), iterable of skbio sequences, optional
    protein : bool
        Protein data (default: DNA).
    keep_ambiguous : bool
        Keep ``N`` (``X``...) in reads as state sets instead of dropping them (accurate mode).
    """
    with no_collection():
        reference = load_reference(tree, msa, protein, tree_path, msa_path)
        read_records, reads_path = reads_records(reads, reads_path)
        return add_reads(reference, read_records, reads_path, keep_ambiguous)


@contextmanager
def no_collection():
    """The garbage collector off (as it was before, after): millions of small objects
    (records, names, read arrays) and no cycles among them; the collector's passes over them
    took seconds of a million-read load."""
    import gc

    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


@dataclass
class Reference:
    """The tree and the reference alignment, loaded and checked, before the reads: enough
    for the edge profiles (``data`` is a :class:`PaparaData` without reads yet), while the
    reads file is read beside it (:func:`reads_records`, then :func:`add_reads`)."""

    data: PaparaData
    msa_records: list
    msa_path: object
    ref_records: list
    extra_records: list


def load_reference(tree, msa, protein: bool = False, tree_path=None, msa_path=None) -> Reference:
    """The first half of :func:`load`: the tree and the reference rows, checked and encoded."""
    alphabet = PROTEIN if protein else DNA
    root, tree_path = _tree(tree, tree_path)
    papara_tree = build_tree(root, tree_path)
    msa_records, msa_path = _msa(msa, msa_path)

    rows_by_name = {rec.name: k for k, rec in enumerate(msa_records)}
    for name in papara_tree.tip_names:
        if name not in rows_by_name:
            raise InputError(
                f"tree tip {name!r} is not in the reference alignment",
                path=str(msa_path) if msa_path else None,
            )
    tip_names = set(papara_tree.tip_names)
    ref_records = [rec for rec in msa_records if rec.name in tip_names]
    extra_records = [rec for rec in msa_records if rec.name not in tip_names]
    check_unique(
        [r.name for r in msa_records],
        lines=[r.line for r in msa_records],
        paths=[msa_path] * len(msa_records),
    )
    if alphabet is DNA:  # (protein settings look at the reference and the reads together)
        _check_alphabet(alphabet, ref_records, [])
    states, text = _encode_rows(alphabet, ref_records, msa_path)
    kept = np.flatnonzero((states != alphabet.gap).any(axis=0))
    if kept.size == 0:
        raise InputError(
            "every column of the reference alignment is a gap",
            path=str(msa_path) if msa_path else None,
        )
    if kept.size < states.shape[1]:
        states = np.ascontiguousarray(states[:, kept])
        text = np.ascontiguousarray(text[:, kept])
        width = kept.size
        joined = text.tobytes().decode("ascii")
        ref_rows = [joined[k : k + width] for k in range(0, len(joined), width)]
    else:
        ref_rows = [rec.seq for rec in ref_records]
    n_dash = int(np.count_nonzero(text == ord("-")))
    gap_fraction = n_dash / (len(ref_rows) * kept.size)
    name_to_row = {name: k for k, name in enumerate(r.name for r in ref_records)}
    tip_rows = {node: name_to_row[papara_tree.names[node]] for node in papara_tree.tips}
    data = PaparaData(
        papara_tree,
        alphabet,
        [r.name for r in ref_records],
        ref_rows,
        states,
        tip_rows,
        gap_fraction,
        [],
        [],
        0,
    )
    return Reference(data, msa_records, msa_path, ref_records, extra_records)


def add_reads(
    reference: Reference, read_records: list, reads_path=None, keep_ambiguous: bool = False
) -> PaparaData:
    """The second half of :func:`load`: the reads (the FASTA's records, then the reference
    alignment's rows that are not tips), checked and encoded, added to ``reference``'s data
    (which is returned)."""
    ref = reference
    alphabet = ref.data.alphabet
    msa_records, msa_path, extra_records = ref.msa_records, ref.msa_path, ref.extra_records
    check_unique(
        [r.name for r in msa_records] + [r.name for r in read_records],
        lines=[r.line for r in msa_records] + [r.line for r in read_records],
        paths=[msa_path] * len(msa_records) + [reads_path] * len(read_records),
    )
    _check_alphabet(
        alphabet, [] if alphabet is DNA else ref.ref_records, read_records + extra_records
    )

    data_warnings: list[str] = []
    records = [(r, reads_path) for r in read_records] + [(r, msa_path) for r in extra_records]
    read_names = [rec.name for rec, _ in records]
    read_states, n_lost = alphabet.encode_reads([rec.seq for rec, _ in records], keep_ambiguous)
    sizes = np.fromiter(
        (-1 if s is None else s.size for s in read_states), dtype=np.int64, count=len(records)
    )
    for k in np.flatnonzero((n_lost > 0) | (sizes <= 0)).tolist():
        rec, source = records[k]
        encoded, lost = read_states[k], int(n_lost[k])
        if encoded is None:  # a character that cannot be in a sequence: the one-read encoder
            try:  # names it
                encoded, lost = alphabet.encode_read(rec.seq, rec.name, keep_ambiguous)
            except InputError as exc:
                raise _located(exc, rec, source) from None
        if lost:
            data_warnings.append(
                f"read {rec.name!r}: {lost} character(s) that are not {alphabet.name} states "
                "(N, X, ...) were dropped, as PaPaRa does"
            )
        if encoded.size == 0:
            data_warnings.append(f"read {rec.name!r} is empty; it is written as a row of gaps")
        read_states[k] = encoded
    for message in data_warnings[:_WARN_EACH]:
        log.warning(message)
    if len(data_warnings) > _WARN_EACH:
        more = len(data_warnings) - _WARN_EACH
        log.warning(
            "... and %d more such reads (logged at level INFO)",
            more,
            extra={"cli_message": f"... and {more} more such reads (-v lists them)"},
        )
        for message in data_warnings[_WARN_EACH:]:
            log.info(message)
    data = ref.data
    data.read_names, data.reads, data.n_fasta_reads = read_names, read_states, len(read_records)
    data.warnings = data_warnings
    return data


_LETTER = np.zeros(256, dtype=bool)
_LETTER[[*range(ord("A"), ord("Z") + 1), *range(ord("a"), ord("z") + 1)]] = True
_ACGTUN = np.zeros(256, dtype=bool)
_ACGTUN[list(b"ACGTUNacgtun")] = True
# Nucleotide data are nearly all A, C, G, T, U, N (MAFFT calls a set nucleotide from 85% on);
# proteins hold about 25% of these letters (and ~60% of all IUPAC nucleotide letters, so
# those say little). Below half, the data are protein; from 90% on, nucleotides.
_PROTEIN_BELOW = 0.5
_DNA_FROM = 0.9


def _check_alphabet(alphabet: StateAlphabet, ref_records, read_records) -> None:
    """Stop when the data are of the other kind than the one asked for: protein reads or a
    protein reference with DNA settings, DNA data with protein settings."""

    def share(records) -> float | None:
        raw = np.frombuffer("".join(r.seq for r in records).encode("ascii", "replace"), np.uint8)
        letters = np.count_nonzero(_LETTER[raw])  # counted, not gathered into new arrays
        return np.count_nonzero(_ACGTUN[raw]) / letters if letters else None

    if alphabet is DNA:
        for what, records in (("reference alignment", ref_records), ("reads", read_records)):
            found = share(records)
            if found is not None and found < _PROTEIN_BELOW:
                raise InputError(
                    f"the {what} look like protein: only {found:.0%} of the letters are "
                    "A, C, G, T, U or N; align protein data with --protein (protein=True)"
                )
    else:
        found = share(list(ref_records) + list(read_records))
        if found is not None and found >= _DNA_FROM:
            raise InputError(
                f"the data look like DNA: {found:.0%} of the letters of the reference and the "
                "reads are A, C, G, T, U or N; run without --protein (protein=False) for "
                "nucleotide data"
            )


def _encode_rows(alphabet: StateAlphabet, records, path) -> tuple[np.ndarray, np.ndarray]:
    """The reference rows' states (T, n) and their text as a (T, n) byte matrix, encoded in
    one pass over all the rows: a few NumPy calls per row, each of which may give up the
    interpreter lock and then wait a switch interval to get it back beside a busy thread
    (the backend's warm-up), cost more than the encoding itself. Rows that do not encode
    (a bad character, non-ASCII text, rows of unequal length) go row by row for the
    error that names them."""
    seqs = [rec.seq for rec in records]
    width = len(seqs[0]) if seqs else 0
    try:
        raw = np.frombuffer("".join(seqs).encode("ascii"), np.uint8)
    except UnicodeEncodeError:
        raw = None
    if raw is not None and seqs and raw.size == width * len(seqs):
        states = alphabet.reference_lut[raw]
        if states.all():
            shape = (len(seqs), width)
            return states.astype(alphabet.dtype).reshape(shape), raw.reshape(shape)
    states = np.stack([_encode_row(alphabet, rec, path) for rec in records])
    text = np.stack([np.frombuffer(rec.seq.encode("ascii"), np.uint8) for rec in records])
    return states, text


def _encode_row(alphabet: StateAlphabet, rec: Record, path) -> np.ndarray:
    try:
        return alphabet.encode_reference(rec.seq, rec.name)
    except InputError as exc:
        raise _located(exc, rec, path) from None


def _located(exc: InputError, rec: Record, path) -> InputError:
    """The error placed on the line its character is on (a wrapped FASTA record spans
    several lines), else on the record's line."""
    line = rec.line
    if path is not None and exc.column:
        line = locate_in_fasta(path, rec, exc.column)
    return exc.located(path=str(path) if path else None, line=line)


def _tree(tree, path):
    if hasattr(tree, "children") and hasattr(tree, "tips"):
        return tree, path
    text = str(tree)
    if not text.lstrip().startswith("("):
        path, text = tree, _read_text(tree)
    check_newick_syntax(text, path or "<newick>")
    return parse_newick(text, path or "<newick>"), path


def _records(items) -> list[Record]:
    out = []
    for k, item in enumerate(items):
        if isinstance(item, Record):
            out.append(item)
        elif isinstance(item, tuple):
            out.append(Record(str(item[0]), str(item[1]), k + 1))
        else:  # an skbio sequence
            name = item.metadata.get("id") if hasattr(item, "metadata") else None
            if not name:
                raise InputError(f"sequence {k + 1} has no metadata['id'] to name it")
            out.append(Record(name, str(item), k + 1))
    return out


def _msa(msa, path):
    if hasattr(msa, "index") and hasattr(msa, "iter_positions"):  # skbio TabularMSA
        return _records(zip(map(str, msa.index), map(str, msa), strict=True)), path
    if isinstance(msa, (list, tuple)):
        records = _records(msa)
        width = len(records[0].seq) if records else 0
        for rec in records:
            if len(rec.seq) != width:
                raise InputError("ragged alignment", record=rec.name)
        return records, path
    return read_alignment(msa), msa


def reads_records(reads, path=None) -> tuple[list[Record], object]:
    """The reads as records, and the file they came from (None when given as records):
    the part of :func:`load` that reads the reads file (safe on a thread of its own)."""
    if reads is None:
        return [], path
    if isinstance(reads, (list, tuple)) or hasattr(reads, "__next__"):
        return _records(reads), path
    return read_fasta(reads), reads
