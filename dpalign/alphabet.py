"""Sequence encodings: pairwise residue codes, PaPaRa state bit vectors, 5-bit packing.

Two families of encodings live here.

* **Residue codes** for pairwise alignment: every character becomes a small integer index into
  the rows of a substitution matrix. Match/mismatch scoring uses :data:`LETTERS`, an identity
  alphabet of all 26 letters and ``*``, ordered so that ``A C G T`` are codes 0-3 (2-bit packing
  works for plain DNA) and the IUPAC nucleotide codes are below 16 (4-bit packing).
* **State bit vectors** for PaPaRa: a DNA state is a 4-bit set (A=1, C=2, G=4, T=8), a protein
  state a 20-bit set; two states match when they share a bit.

Input is case-insensitive (a letter's other case reads as the letter), except where an alphabet
holds both cases of a letter or is built case-sensitive.

>>> reverse_complement("AACGTN")
'NACGTT'
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError

INVALID = 255  # lookup-table value for characters outside an alphabet

#: Identity alphabet for match/mismatch scoring (ACGT first, IUPAC DNA below 16).
LETTERS = "ACGTNRYSWKMBDHVUEFIJLOPQXZ*"


def _residue_like(ch: str) -> bool:
    """Whether a character may stand for a residue outside an alphabet (``unknown`` takes it)."""
    return ch.isalpha() or ch == "*"


@dataclass(frozen=True)
class Alphabet:
    """An ordered set of single-character symbols and its lookup table.

    Parameters
    ----------
    name : str
        Short name shown in messages (``"letters"``, ``"BLOSUM62"``...).
    letters : str
        The symbols; a symbol's code is its index. Any Unicode characters (``"ABCαβγ"``);
        sequences over non-ASCII symbols must be given as ``str``.
    case_sensitive : bool or None
        ``None`` (the default): a letter's other case means the same symbol unless the
        other case is a symbol of its own (``"acgtACGT"`` keeps eight distinct symbols,
        ``"ACGT"`` reads ``acgt`` too). ``True``: every character means only itself.
        ``False``: both cases of every letter fold together; an alphabet holding both cases
        of one letter is refused.
    unknown : int, optional
        The code that letters (and ``*``) outside the alphabet take (parasail's unknown
        residue); ``None``: they are an error.
    """

    name: str
    letters: str
    case_sensitive: bool | None = None
    unknown: int | None = None
    lut: np.ndarray = field(init=False, repr=False, compare=False)
    index: dict = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if len(set(self.letters)) != len(self.letters):
            raise ValueError(f"alphabet {self.name!r} repeats a symbol")
        if len(self.letters) >= INVALID:
            raise ValueError("an alphabet has at most 254 symbols")
        if self.unknown is not None and not 0 <= self.unknown < len(self.letters):
            raise ValueError(f"unknown code {self.unknown} is not a code of the alphabet")
        index = {ch: code for code, ch in enumerate(self.letters)}
        if self.case_sensitive is not True:
            # Exact symbols first, the other case only where it is not a symbol itself: the
            # order of the symbols never matters ("acgtACGT" and "ACGTacgt" alike).
            for code, ch in enumerate(self.letters):
                for other in {ch.lower(), ch.upper()} - {ch}:
                    if len(other) != 1:
                        continue
                    if other in index and index[other] != code:
                        if self.case_sensitive is False and other in self.letters:
                            raise ValueError(
                                f"alphabet {self.name!r} holds both {ch!r} and {other!r}; "
                                "it cannot be case-insensitive"
                            )
                        continue
                    index[other] = code
        lut = np.full(256, INVALID, dtype=np.uint8)
        if self.unknown is not None:
            for byte in range(128):
                if _residue_like(chr(byte)):
                    lut[byte] = self.unknown
        for ch, code in index.items():
            if ord(ch) < 128:
                lut[ord(ch)] = code
        object.__setattr__(self, "lut", lut)
        object.__setattr__(self, "index", index)

    @property
    def size(self) -> int:
        """Number of symbols."""
        return len(self.letters)

    @property
    def is_ascii(self) -> bool:
        """Whether every symbol is ASCII (sequences may then be bytes too)."""
        return self.letters.isascii()

    def encode(self, seq: str | bytes, record: str | None = None) -> np.ndarray:
        """Encode a sequence into a ``uint8`` array of codes.

        Raises
        ------
        InputError
            Naming the record and the 1-based position of the first character that is not in
            the alphabet.
        """
        if isinstance(seq, str) and not seq.isascii():
            return self._encode_text(seq, record)
        raw = as_bytes(seq)
        # bytes.translate is one C loop over the table: several times NumPy's fancy indexing
        # (a database of 7 MB: 3-4 ms against 16-40 ms), and a writable array all the same
        codes = np.frombuffer(bytearray(raw).translate(self.lut.tobytes()), dtype=np.uint8)
        if codes.size and codes.max() == INVALID:
            pos = int(np.flatnonzero(codes == INVALID)[0])
            raise self._not_in(chr(raw[pos]), record, pos)
        return codes

    def _encode_text(self, seq: str, record: str | None) -> np.ndarray:
        """Encode text holding non-ASCII characters (symbols such as ``α``)."""
        codes = np.empty(len(seq), dtype=np.uint8)
        for pos, ch in enumerate(seq):
            code = self.index.get(ch)
            if code is None:
                if self.unknown is None or not _residue_like(ch):
                    raise self._not_in(ch, record, pos)
                code = self.unknown
            codes[pos] = code
        return codes

    def _not_in(self, ch: str, record: str | None, pos: int) -> InputError:
        hint = ""
        if not ch.isascii() and self.is_ascii:
            hint = "; sequences hold ASCII characters only unless the matrix's symbols do not"
        return InputError(
            f"character {ch!r} is not in the {self.name} alphabet ({self.letters}){hint}",
            record=record,
            column=pos + 1,
        )

    def decode(self, codes: Iterable[int]) -> str:
        """Turn codes back into text."""
        codes = np.asarray(codes, dtype=np.intp)
        if self.is_ascii:
            table = np.frombuffer(self.letters.encode("ascii"), dtype=np.uint8)
            return table[codes].tobytes().decode("ascii")
        letters = self.letters
        return "".join(letters[c] for c in codes.tolist())


def as_bytes(seq: str | bytes | bytearray | memoryview) -> bytes:
    """Return the ASCII bytes of a sequence given as text or bytes."""
    if isinstance(seq, str):
        try:
            return seq.encode("ascii")
        except UnicodeEncodeError as exc:
            raise InputError(
                f"non-ASCII character {seq[exc.start]!r} in a sequence", column=exc.start + 1
            ) from None
    return bytes(seq)


def sequence_text(seq) -> tuple[str | None, bytes]:
    """Return ``(name, ascii bytes)`` for str, bytes or a scikit-bio sequence.

    scikit-bio ``Sequence`` objects give their ``metadata['id']`` as the name.
    """
    if isinstance(seq, (str, bytes, bytearray, memoryview)):
        return None, as_bytes(seq)
    values = getattr(seq, "values", None)
    if values is not None and hasattr(seq, "metadata"):
        name = seq.metadata.get("id") or None
        return name, np.asarray(values).tobytes()
    raise TypeError(f"cannot read a sequence from {type(seq).__name__}")


# --------------------------------------------------------------------------------------------
# Reverse complement (IUPAC nucleotides)
# --------------------------------------------------------------------------------------------

_NUCLEOTIDES = "ACGTURYKMSWBDHVN"
_COMPLEMENTS = "TGCAAYRMKSWVHDBN"
#: Each IUPAC nucleotide code (either case) and gaps to their complements (U pairs with A).
COMPLEMENT = dict(
    zip(
        _NUCLEOTIDES + _NUCLEOTIDES.lower() + "-.",
        _COMPLEMENTS + _COMPLEMENTS.lower() + "-.",
        strict=True,
    )
)


def reverse_complement(seq: str | bytes, record: str | None = None) -> str | bytes:
    """The reverse complement of a nucleotide sequence (IUPAC codes, case kept).

    Raises
    ------
    InputError
        For a character with no complement (a protein letter, a digit), naming its position.
    """
    text = seq.decode("ascii", "replace") if isinstance(seq, (bytes, bytearray)) else str(seq)
    out = []
    for pos in range(len(text) - 1, -1, -1):
        mate = COMPLEMENT.get(text[pos])
        if mate is None:
            raise InputError(
                f"character {text[pos]!r} has no complement (the reverse strand needs "
                "nucleotide codes)",
                record=record,
                column=pos + 1,
            )
        out.append(mate)
    joined = "".join(out)
    return joined.encode("ascii") if isinstance(seq, (bytes, bytearray)) else joined


def reverse_complement_codes(
    codes: np.ndarray, alphabet: Alphabet, record: str | None = None
) -> np.ndarray:
    """The reverse complement of a sequence encoded in ``alphabet`` (codes out, same alphabet).

    Raises
    ------
    InputError
        When a symbol's complement is not a symbol of the alphabet (protein letters).
    """
    codes = np.asarray(codes, dtype=np.uint8)
    mates = np.full(alphabet.size, INVALID, dtype=np.uint8)
    for code, ch in enumerate(alphabet.letters):
        mate = COMPLEMENT.get(ch)
        if mate is not None and mate in alphabet.index:
            mates[code] = alphabet.index[mate]
    flipped = mates[codes[::-1]]
    bad = np.flatnonzero(flipped == INVALID)
    if bad.size:
        pos = len(codes) - 1 - int(bad[0])
        raise InputError(
            f"character {alphabet.letters[codes[pos]]!r} has no complement in the "
            f"{alphabet.name} alphabet (the reverse strand needs nucleotide codes)",
            record=record,
            column=pos + 1,
        )
    return flipped


# --------------------------------------------------------------------------------------------
# PaPaRa state bit vectors
# --------------------------------------------------------------------------------------------

#: DNA states: the index of a character in this string is its 4-bit state.
DNA_STATES = "_ACMGRSVTWYHKDB-"
DNA_GAP = 15

#: Protein residues: residue k has state ``1 << k``.
PROTEIN_RESIDUES = "ARNDCQEGHILKMFPSTWYV"
PROTEIN_GAP = (1 << 20) - 1


def _bit(residue: str) -> int:
    return 1 << PROTEIN_RESIDUES.index(residue)


# Character -> state tables. 0 marks "not a state here".
def _dna_reference_lut() -> np.ndarray:
    lut = np.zeros(256, dtype=np.uint32)
    for state, ch in enumerate(DNA_STATES):
        if state:
            lut[ord(ch)] = lut[ord(ch.lower())] = state
    for ch in "Uu":
        lut[ord(ch)] = 8
    for ch in "Nn?.":
        lut[ord(ch)] = DNA_GAP
    return lut


def _dna_read_lut() -> np.ndarray:
    lut = np.zeros(256, dtype=np.uint32)
    for state, ch in enumerate(DNA_STATES[1:-1], start=1):
        lut[ord(ch)] = lut[ord(ch.lower())] = state
    return lut


def _protein_reference_lut() -> np.ndarray:
    lut = np.zeros(256, dtype=np.uint32)
    for ch in PROTEIN_RESIDUES:
        lut[ord(ch)] = lut[ord(ch.lower())] = _bit(ch)
    for ch, residues in (("B", "ND"), ("Z", "QE")):
        lut[ord(ch)] = lut[ord(ch.lower())] = sum(_bit(r) for r in residues)
    for ch in "-Xx?.":
        lut[ord(ch)] = PROTEIN_GAP
    return lut


def _protein_read_lut() -> np.ndarray:
    lut = np.zeros(256, dtype=np.uint32)
    for ch in PROTEIN_RESIDUES:
        lut[ord(ch)] = lut[ord(ch.lower())] = _bit(ch)
    return lut


@dataclass(frozen=True)
class StateAlphabet:
    """PaPaRa's state encoding for one data type (DNA or protein).

    Attributes
    ----------
    name : str
        ``"dna"`` or ``"protein"``.
    gap : int
        The gap state (all bits set).
    dtype : numpy dtype
        The narrowest unsigned type that holds a state (uint8 for DNA, uint32 for protein).
    """

    name: str
    gap: int
    dtype: type
    reference_lut: np.ndarray = field(repr=False, compare=False)
    read_lut: np.ndarray = field(repr=False, compare=False)
    # Characters a read may hold that are silently dropped (alignment gaps).
    read_gap_chars: bytes = b"-."

    def encode_reference(self, row: str | bytes, record: str | None = None) -> np.ndarray:
        """Encode one reference MSA row into states (``N ? .`` and gaps become the gap state)."""
        raw = as_bytes(row)
        states = self.reference_lut[np.frombuffer(raw, dtype=np.uint8)]
        bad = np.flatnonzero(states == 0)
        if bad.size:
            pos = int(bad[0])
            raise InputError(
                f"character {chr(raw[pos])!r} is not a {self.name} state",
                record=record,
                column=pos + 1,
            )
        return states.astype(self.dtype)

    def encode_read(
        self, read: str | bytes, record: str | None = None, keep_ambiguous: bool = False
    ) -> tuple[np.ndarray, int]:
        """Encode a read the way PaPaRa 2.5 does: keep only unambiguous-enough states.

        Returns the states and the number of non-gap characters that were dropped (``N``,
        ``X``, ``?``... which the original also drops). Characters that cannot belong to a
        sequence at all (digits, punctuation) raise :class:`InputError`. With
        ``keep_ambiguous`` (the accurate mode) ``N`` (DNA; ``U`` as ``T``) and ``X``, ``B``,
        ``Z``, ``J`` (protein) are kept as the state sets they stand for.
        """
        raw = np.frombuffer(as_bytes(read), dtype=np.uint8)
        lut = _AMBIGUOUS_READ_LUTS[self.name] if keep_ambiguous else self.read_lut
        states = lut[raw]
        keep = states != 0
        if not keep.all():
            dropped = raw[~keep]
            gaps = np.isin(dropped, np.frombuffer(self.read_gap_chars, dtype=np.uint8))
            letters = np.isin(dropped, _DROPPABLE)
            if not (gaps | letters).all():
                pos = int(np.flatnonzero(~keep & ~np.isin(raw, _DROPPABLE))[0])
                raise InputError(
                    f"character {chr(raw[pos])!r} cannot appear in a sequence",
                    record=record,
                    column=pos + 1,
                )
            n_lost = int((~gaps).sum())
        else:
            n_lost = 0
        return states[keep].astype(self.dtype), n_lost

    def encode_reads(
        self, seqs: list[str], keep_ambiguous: bool = False
    ) -> tuple[list[np.ndarray | None], np.ndarray]:
        """:meth:`encode_read` of many reads in one pass over their characters end to end.

        Returns the states of each read (views into one array) and the number of characters
        dropped from each. A read holding a character that cannot be in a sequence (or any
        non-ASCII text) is None: :meth:`encode_read` of it names the character. A million
        reads encode in about a second instead of a few NumPy calls per read.
        """
        n = len(seqs)
        lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=n)
        lost = np.zeros(n, dtype=np.int64)
        if not n:
            return [], lost
        try:
            raw = np.frombuffer("".join(seqs).encode("ascii"), dtype=np.uint8)
        except UnicodeEncodeError:
            return [None] * n, lost
        lut = _AMBIGUOUS_READ_LUTS[self.name] if keep_ambiguous else self.read_lut
        states = lut[raw].astype(self.dtype, copy=False)
        ends = np.cumsum(lengths)
        bad = np.flatnonzero(states == 0)
        if not bad.size:
            return _pieces(states, ends), lost
        chars = raw[bad]
        read_of = np.searchsorted(ends, bad, side="right")
        fatal = np.unique(read_of[~_DROPPABLE_TABLE[chars]])
        gap_chars = np.zeros(256, dtype=bool)
        gap_chars[list(self.read_gap_chars)] = True
        lost = np.bincount(read_of[~gap_chars[chars]], minlength=n).astype(np.int64)
        kept = np.delete(states, bad)
        out: list[np.ndarray | None] = _pieces(
            kept, np.cumsum(lengths - np.bincount(read_of, minlength=n))
        )
        for k in fatal.tolist():
            out[k] = None
        return out, lost

    def letter(self, state: int) -> str:
        """Print a state: DNA by its index in :data:`DNA_STATES`, protein by residue letter."""
        if self.name == "dna":
            return DNA_STATES[state]
        return _PROTEIN_PRINT.get(int(state), "-")

    def letters(self, states: np.ndarray) -> str:
        """Print many states."""
        if self.name == "dna":
            return _DNA_PRINT[np.asarray(states, dtype=np.intp)].tobytes().decode("ascii")
        return "".join(self.letter(s) for s in states)

    def read_letters(self, states: np.ndarray) -> str:
        """Print a read kept with its ambiguity codes: the all-states set as ``N`` (``X``)."""
        text = self.letters(states)
        return text.replace("-", "N" if self.name == "dna" else "X")


def _pieces(values: np.ndarray, ends: np.ndarray) -> list:
    """``values`` cut at ``ends`` (each piece's end; the last is ``len(values)``), as views:
    ``np.split`` does the same at ~5 us a piece, 5 s for a million reads."""
    bounds = [0, *ends.tolist()]
    return [values[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


# Letters and marks that PaPaRa drops from reads (with a warning): IUPAC, X, ?, *, U...
_DROPPABLE = np.frombuffer(
    bytes(range(ord("A"), ord("Z") + 1)) + bytes(range(ord("a"), ord("z") + 1)) + b"-.?*",
    dtype=np.uint8,
)
_DROPPABLE_TABLE = np.zeros(256, dtype=bool)
_DROPPABLE_TABLE[_DROPPABLE] = True
_DNA_PRINT = np.frombuffer(DNA_STATES.encode("ascii"), dtype=np.uint8)
_PROTEIN_PRINT = {1 << k: ch for k, ch in enumerate(PROTEIN_RESIDUES)} | {
    _bit("N") | _bit("D"): "B",
    _bit("Q") | _bit("E"): "Z",
    PROTEIN_GAP: "-",
}

_PROTEIN_PRINT[_bit("I") | _bit("L")] = "J"


def _ambiguous_read_luts() -> dict[str, np.ndarray]:
    dna = _dna_read_lut()
    for ch in "Nn":
        dna[ord(ch)] = DNA_GAP
    for ch in "Uu":
        dna[ord(ch)] = 8
    protein = _protein_read_lut()
    for ch, residues in (("B", "ND"), ("Z", "QE"), ("J", "IL"), ("X", PROTEIN_RESIDUES)):
        protein[ord(ch)] = protein[ord(ch.lower())] = sum(_bit(r) for r in residues)
    return {"dna": dna, "protein": protein}


_AMBIGUOUS_READ_LUTS = _ambiguous_read_luts()

DNA = StateAlphabet("dna", DNA_GAP, np.uint8, _dna_reference_lut(), _dna_read_lut())
PROTEIN = StateAlphabet(
    "protein", PROTEIN_GAP, np.uint32, _protein_reference_lut(), _protein_read_lut()
)


# --------------------------------------------------------------------------------------------
# 5-bit packing (the seed paper's compressed inter-reference vector)
# --------------------------------------------------------------------------------------------

PACK5_PER_WORD = 6


def pack5(states: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """Pack 4-bit states plus a 1-bit flag into 5-bit fields, 6 per ``uint32``.

    Parameters
    ----------
    states : ndarray, shape (n, W)
        DNA states (values below 16), inter-reference layout.
    flags : ndarray, shape (n, W)
        Gap flags (0/1).

    Returns
    -------
    ndarray, shape (ceil(n / 6), W), uint32
        Word ``k`` of lane ``w`` holds elements ``6k .. 6k+5``, element ``6k+t`` in bits
        ``5t .. 5t+4`` (state in the low 4 bits, flag in bit 4). Missing tail elements are 0.
    """
    states = np.asarray(states, dtype=np.uint32)
    if states.size and states.max() > 15:
        raise ValueError("pack5 packs 4-bit states only")
    fields = states | (np.asarray(flags, dtype=np.uint32) << 4)
    n, width = fields.shape
    words = -(-n // PACK5_PER_WORD)
    padded = np.zeros((words * PACK5_PER_WORD, width), dtype=np.uint32)
    padded[:n] = fields
    padded = padded.reshape(words, PACK5_PER_WORD, width)
    shifts = (5 * np.arange(PACK5_PER_WORD, dtype=np.uint32))[None, :, None]
    return np.bitwise_or.reduce(padded << shifts, axis=1).astype(np.uint32)


def unpack5(words: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Invert :func:`pack5`: return ``(states, flags)`` of shape ``(n, W)``."""
    words = np.asarray(words, dtype=np.uint32)
    shifts = (5 * np.arange(PACK5_PER_WORD, dtype=np.uint32))[None, :, None]
    fields = ((words[:, None, :] >> shifts) & 31).reshape(-1, words.shape[1])[:n]
    return (fields & 15).astype(np.uint8), (fields >> 4).astype(np.uint8)
