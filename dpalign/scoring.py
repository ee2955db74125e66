"""Scoring schemes: pairwise substitution scores and gap costs, PaPaRa presets, integer widths.

The gap formula, stated once
----------------------------
dpalign follows scikit-bio 0.7 (`skbio.alignment.pair_align`): higher scores are better, gap
costs are positive numbers subtracted from the score, and

* ``gap_cost=g`` (linear): a gap of length k costs ``g * k``;
* ``gap_cost=(o, e)`` (affine): a gap of length k costs ``o + e * k``.

Other tools count the first gap position inside their "open" value:

===============================  =========================  ================================
dpalign / scikit-bio ``(o, e)``  parasail ``open, extend``  Biopython PairwiseAligner
===============================  =========================  ================================
gap of length k costs o + e*k    ``open = o + e``,          ``open_gap_score = -(o+e)``,
                                 ``extend = e``             ``extend_gap_score = -e``
o < 0 <= o + e (opening          ``open`` below ``extend``  ``open_gap_score`` above
cheaper than extending)                                     ``extend_gap_score``
``a_gap_cost``, ``b_gap_cost``   one cost for both          insertion scores (gaps in a, the
(gaps in a, in b)                                           target), deletion scores (in b)
===============================  =========================  ================================

So BLAST's "11/1" (a gap of length k costs 11 + k) is ``gap_cost=(11, 1)`` here and ``open=12,
extend=1`` in parasail. The last two rows run on the reference backend only (see
:meth:`Scoring.kernel_problem`). Scores and costs may be decimals, kept exact (EMBOSS's 10/0.5):

>>> Scoring(gap_cost=(11, 1)).gap_penalty(3)
14
>>> Scoring(gap_cost=2).gap_penalty(3)
6
>>> Scoring(gap_cost=(10, 0.5)).gap_penalty(3)
11.5
>>> Scoring((1, -1), gap_cost=(-1, 2)).gap_penalty(3)
5
"""

from __future__ import annotations

import difflib
import math
import numbers
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import cache, lru_cache
from pathlib import Path

import numpy as np

from .alphabet import LETTERS, Alphabet, sequence_text
from .errors import InputError, OptionError

MODES = ("global", "local", "semiglobal")

#: (lowest, highest) values each integer width can hold.
WIDTH_RANGE = {8: (-(2**7), 2**7 - 1), 16: (-(2**15), 2**15 - 1), 32: (-(2**31), 2**31 - 1)}


def narrowest_width(lo: int, hi: int, headroom: int = 0) -> int:
    """Return the narrowest signed integer width (8, 16 or 32) holding ``[lo - headroom, hi]``.

    ``headroom`` leaves space below the lowest value for a kernel's "minus infinity".
    Returns 64 when even 32 bits do not suffice.
    """
    for width, (wlo, whi) in WIDTH_RANGE.items():
        if lo - headroom >= wlo and hi <= whi:
            return width
    return 64


#: The largest factor by which decimal scores are scaled to integers (see :class:`Scoring`).
MAX_SCALE = 10**6


def _as_fraction(value, what: str) -> Fraction:
    """A score or cost as an exact fraction: 0.5 is 1/2, 9.5 is 19/2 (the decimal written)."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, Decimal)):
        raise OptionError(f"{what} must be a number, not {value!r}")
    if isinstance(value, (numbers.Integral, Fraction)):
        return Fraction(value)
    if not math.isfinite(value):
        raise OptionError(f"{what} must be finite, not {value!r}")
    # str() of a float is the shortest decimal that reads back as it: the number written.
    return Fraction(str(value) if isinstance(value, Decimal) else str(float(value)))


def _scale_for(values, what: str) -> int:
    """The least common denominator of ``values``; refuse one above :data:`MAX_SCALE`."""
    scale = 1
    for v in values:
        scale = math.lcm(scale, v.denominator)
        if scale > MAX_SCALE:
            raise OptionError(
                f"{what}: {float(v)!r} needs a scale above {MAX_SCALE:,} to become a whole "
                "number (dpalign computes in integers); round the scores to fewer decimals"
            )
    return scale


@dataclass(frozen=True)
class NamedMatrix:
    """A named substitution matrix read from dpalign's copy of scikit-bio's matrices.

    It has the two attributes dpalign reads from a ``skbio.SubstitutionMatrix``
    (``alphabet``, ``scores``), so commands never import scikit-bio (which imports scipy.stats,
    pandas and, where installed, torch and jax). :meth:`to_skbio` gives the real object.
    """

    name: str
    alphabet: tuple[str, ...]
    scores: np.ndarray

    def to_skbio(self):
        """The same matrix as a ``skbio.SubstitutionMatrix``."""
        from skbio import SubstitutionMatrix

        return SubstitutionMatrix.by_name(self.name)


@cache
def _named_matrices() -> dict[str, NamedMatrix]:
    text = (Path(__file__).parent / "substitution_matrices.txt").read_text()
    matrices = {}
    for chunk in text.split("\n> ")[1:]:
        name, header, *rows = chunk.strip("\n").split("\n")
        alphabet = tuple(header.split())
        scores = np.array([row.split()[1:] for row in rows], dtype=np.float64)
        matrices[name] = NamedMatrix(name, alphabet, scores)
    return matrices


@cache
def substitution_matrix(name: str) -> NamedMatrix:
    """A named substitution matrix (scikit-bio's names); unknown names list the close matches."""
    matrices = _named_matrices()
    names = list(matrices)
    by_upper = {n.upper(): n for n in names}
    if name.upper() not in by_upper:
        close = difflib.get_close_matches(name.upper(), list(by_upper), n=3, cutoff=0.4)
        hint = f"; did you mean {', '.join(by_upper[c] for c in close)}?" if close else ""
        raise OptionError(f"unknown substitution matrix {name!r}{hint} (known: {', '.join(names)})")
    return matrices[by_upper[name.upper()]]


def _plain(value: Fraction):
    """A fraction as the user wrote it: int when whole, else float."""
    return int(value) if value.denominator == 1 else float(value)


def _symbol_ok(ch) -> bool:
    return isinstance(ch, str) and len(ch) == 1 and ch.isprintable() and not ch.isspace()


class Scoring:
    """Substitution scores and gap costs for pairwise alignment (scikit-bio convention).

    Parameters
    ----------
    sub_score : (match, mismatch), skbio.SubstitutionMatrix, Biopython Array or str
        Match/mismatch scores over the identity alphabet :data:`~dpalign.alphabet.LETTERS`,
        a matrix (scikit-bio's ``SubstitutionMatrix`` or Biopython's
        ``substitution_matrices.Array``; symbols are single characters, Unicode ones such as
        ``α`` included), or a matrix name known to ``SubstitutionMatrix.by_name``.
    gap_cost : number or (o, e), default 2
        Linear cost ``g`` per gap position, or affine: a gap of length k costs ``o + e*k``.
        ``o`` may be negative (opening cheaper than extending) as long as ``o + e >= 0``.
    a_gap_cost, b_gap_cost : number or (o, e), optional
        Separate costs for gaps *in* a (``I`` operations: characters of b against gaps) and
        in b (``D``), like Biopython's ``query_*`` and ``target_*`` gap scores; each
        defaults to ``gap_cost``.
    wildcard : str, optional
        A letter that scores 0 against anything (Biopython's ``wildcard``); added to the
        alphabet when the matrix lacks it. Default: none.
    unknown : str or number, optional
        What letters outside the alphabet score as (parasail's unknown residue): a symbol of
        the matrix (``"X"``: ``U`` with BLOSUM62 scores as ``X``), or a number (an extra row
        scoring that against everything). Default ``None``: such letters are an error.
        scikit-bio ``DNA``/``Protein`` objects map theirs to the matrix's wildcard (``N``,
        ``X``) when it has one, as ``skbio.alignment.pair_align`` does, unless this is set.
    case_sensitive : bool, optional
        ``None`` (default): lowercase reads as uppercase unless the matrix has both cases of
        a letter (then each case is its own symbol). ``True``: every character is only
        itself (lowercase input with an uppercase matrix is outside it). ``False``: fold
        cases always (a matrix holding both cases of a letter is refused).

    Notes
    -----
    **Decimal scores** (EMBOSS's 10/0.5, scikit-bio's 9.5/0.5) are exact: every score and cost
    is read as the decimal written (``0.1`` is 1/10) and all are multiplied by their least
    common denominator, :attr:`scale`, so the kernels add whole numbers. A scale above
    :data:`MAX_SCALE` is refused. Results are divided back: scores come back as ``float``
    when ``scale > 1`` and as ``int`` otherwise.

    Attributes
    ----------
    matrix : ndarray, shape (K, K), int32
        Scores indexed by residue codes, multiplied by ``scale``.
    alphabet : Alphabet
        The codes' alphabet.
    scale : int
        The factor from the user's units to the integers the kernels add (1 for whole scores).
    gap_open, gap_extend : int or None
        ``o`` and ``e`` times ``scale`` (``o == 0`` for linear gaps); ``None`` when a and b
        have separate gap costs (see ``a_gap`` and ``b_gap``).
    a_gap, b_gap : (int, int)
        ``(o, e)`` times ``scale`` for gaps in a and in b.
    """

    __slots__ = (
        "alphabet",
        "matrix",
        "gap_open",
        "gap_extend",
        "affine",
        "sub_label",
        "scale",
        "a_gap",
        "b_gap",
        "wildcard",
        "unknown",
        "_user_gaps",
    )

    def __init__(
        self,
        sub_score=(1, -1),
        gap_cost=2,
        *,
        a_gap_cost=None,
        b_gap_cost=None,
        wildcard: str | None = None,
        unknown=None,
        case_sensitive: bool | None = None,
    ) -> None:
        name, letters, values, label = self._substitution(sub_score)
        base = self._gaps(gap_cost, "gap_cost")
        a_gap = base if a_gap_cost is None else self._gaps(a_gap_cost, "a_gap_cost")
        b_gap = base if b_gap_cost is None else self._gaps(b_gap_cost, "b_gap_cost")
        letters, values, unknown_code = self._extras(
            letters, values, wildcard, unknown, case_sensitive
        )
        distinct = set(values.flat)
        scale = _scale_for([*distinct, *a_gap[:2], *b_gap[:2]], "scores and gap costs")
        as_int = {v: int(v * scale) for v in distinct}
        scaled = np.array([as_int[v] for v in values.flat], dtype=np.int64).reshape(values.shape)
        lo, hi = WIDTH_RANGE[32]
        if scaled.size and (scaled.min() < lo or scaled.max() > hi):
            raise OptionError(f"substitution scores times {scale} do not fit in 32 bits")
        try:
            alphabet = Alphabet(name, letters, case_sensitive, unknown_code)
        except ValueError as exc:
            raise OptionError(str(exc)) from None
        self.alphabet = alphabet
        self.matrix = scaled.astype(np.int32)
        self.sub_label = label
        self.scale = scale
        self.a_gap = (int(a_gap[0] * scale), int(a_gap[1] * scale))
        self.b_gap = (int(b_gap[0] * scale), int(b_gap[1] * scale))
        symmetric = self.a_gap == self.b_gap
        self.gap_open = self.a_gap[0] if symmetric else None
        self.gap_extend = self.a_gap[1] if symmetric else None
        self.wildcard = wildcard
        self.unknown = unknown
        self._user_gaps = (a_gap, b_gap)
        self.affine = a_gap[2] or b_gap[2]

    def __setattr__(self, name, value):
        if hasattr(self, "affine") and name in Scoring.__slots__:
            raise AttributeError("Scoring is immutable; build a new one")
        object.__setattr__(self, name, value)

    def __getstate__(self):
        return {name: getattr(self, name) for name in Scoring.__slots__}

    def __setstate__(self, state) -> None:
        # Pickling (to worker processes) restores the fields past the immutability guard.
        for name, value in state.items():
            object.__setattr__(self, name, value)

    @staticmethod
    def _substitution(sub_score):
        """``(alphabet name, letters, (K, K) Fractions, label)`` of a sub_score."""
        label = None
        if isinstance(sub_score, str):
            label = sub_score.upper()
            sub_score = substitution_matrix(sub_score)
        if hasattr(sub_score, "alphabet") and (
            hasattr(sub_score, "scores") or isinstance(sub_score, np.ndarray)
        ):
            symbols = list(sub_score.alphabet)
            if not all(_symbol_ok(ch) for ch in symbols):
                bad = next(ch for ch in symbols if not _symbol_ok(ch))
                raise OptionError(
                    f"substitution matrix symbol {bad!r}: symbols must be single printable "
                    "characters, not spaces (any alphabet: ACGT, acgtACGT, ABCαβγ...)"
                )
            scores = np.asarray(getattr(sub_score, "scores", sub_score), dtype=np.float64)
            if scores.shape != (len(symbols), len(symbols)):
                raise OptionError(
                    f"a substitution matrix over {len(symbols)} symbols needs "
                    f"{len(symbols)} x {len(symbols)} scores, not {scores.shape}"
                )
            uniq, inverse = np.unique(scores, return_inverse=True)
            exact = np.array([_as_fraction(v, "a substitution score") for v in uniq], object)
            values = exact[inverse.reshape(scores.shape)]
            label = label or "matrix"
            return label, "".join(symbols), values, label
        try:
            match, mismatch = sub_score
        except (TypeError, ValueError):
            raise OptionError(
                f"sub_score must be (match, mismatch), a SubstitutionMatrix or a matrix name, "
                f"not {sub_score!r}"
            ) from None
        match, mismatch = _as_fraction(match, "match score"), _as_fraction(mismatch, "mismatch")
        k = len(LETTERS)
        values = np.full((k, k), mismatch, dtype=object)
        for i in range(k):
            values[i, i] = match
        label = f"match {_plain(match)}, mismatch {_plain(mismatch)}"
        return "letters", LETTERS, values, label

    @staticmethod
    def _gaps(gap_cost, what: str) -> tuple[Fraction, Fraction, bool]:
        if isinstance(gap_cost, (tuple, list)):
            if len(gap_cost) != 2:
                raise OptionError(f"{what} must be g or (o, e), not {gap_cost!r}")
            o = _as_fraction(gap_cost[0], "gap open cost")
            e = _as_fraction(gap_cost[1], "gap extend cost")
            affine = True
        else:
            o, e, affine = Fraction(0), _as_fraction(gap_cost, "gap cost"), False
        if e < 0 or o + e < 0:
            raise OptionError(
                f"{what}: gap costs are positive numbers subtracted from the score (got "
                f"o={_plain(o)}, e={_plain(e)}); o may be below 0 (opening cheaper than "
                "extending) as long as o + e >= 0"
            )
        return o, e, affine

    @staticmethod
    def _extras(letters, values, wildcard, unknown, case_sensitive):
        """Add the wildcard and unknown rows; return ``(letters, values, unknown code)``."""

        def find(ch):
            if ch in letters:
                return letters.index(ch)
            if case_sensitive is not True:
                for other in (ch.upper(), ch.lower()):
                    if other in letters and other.swapcase() not in letters:
                        return letters.index(other)
            return None

        def grow(symbol, score):
            k = len(letters)
            out = np.full((k + 1, k + 1), score, dtype=object)
            out[:k, :k] = values
            return letters + symbol, out

        unknown_code = None
        if unknown is not None:
            if isinstance(unknown, str):
                unknown_code = find(unknown) if _symbol_ok(unknown) else None
                if unknown_code is None:
                    raise OptionError(
                        f"unknown={unknown!r} must be a symbol of the matrix ({letters}) or "
                        "a number"
                    )
            else:
                score = _as_fraction(unknown, "unknown residue score")
                symbol = next((c for c in "X*?#" if find(c) is None), None)
                if symbol is None:  # pragma: no cover - a matrix holding X, *, ? and #
                    raise OptionError("no free symbol for the unknown-residue row")
                letters, values = grow(symbol, score)
                unknown_code = len(letters) - 1
        if wildcard is not None:
            if not _symbol_ok(wildcard):
                raise OptionError(f"wildcard must be one character, not {wildcard!r}")
            code = find(wildcard)
            if code is None:
                letters, values = grow(wildcard, Fraction(0))
            else:
                values = values.copy()
                values[code, :] = Fraction(0)
                values[:, code] = Fraction(0)
        return letters, values, unknown_code

    # ---------------------------------------------------------------------------------------

    def gap_penalty(self, k: int, in_a: bool = True):
        """Cost of one gap of length ``k`` (``o + e*k``) in the user's units (gaps in a, or
        in b with ``in_a=False``)."""
        o, e, _ = self._user_gaps[0 if in_a else 1]
        return _plain(o + e * k) if k > 0 else 0

    @property
    def gap_cost(self):
        """The gap cost as given: ``g`` or ``(o, e)`` (for gaps in a when they differ)."""
        o, e, affine = self._user_gaps[0]
        return (_plain(o), _plain(e)) if affine else _plain(e)

    @property
    def symmetric_gaps(self) -> bool:
        """Whether gaps in a and in b cost the same."""
        return self.a_gap == self.b_gap

    def kernel_problem(self) -> str | None:
        """Why the compiled kernels (numba, OpenCL) cannot run this scheme, or ``None``.

        The kernels take one ``(o, e)`` and derive their saturation bounds and lazy-F/striped
        steps from ``o >= 0`` (a gap never gains from being split in two); the reference
        backend computes every scheme.
        """
        if not self.symmetric_gaps:
            return "separate gap costs for a and b"
        if self.gap_open < 0:
            return "gap opening cheaper than extension (o < 0)"
        return None

    def user(self, value):
        """Kernel scores (int or int array) in the user's units: divided by :attr:`scale`."""
        if self.scale == 1:
            return value
        if isinstance(value, np.ndarray):
            return value / self.scale
        return int(value) / self.scale

    def transposed(self) -> Scoring:
        """The scheme with a and b swapped: matrix transposed, gap costs exchanged."""
        if np.array_equal(self.matrix, self.matrix.T) and self.symmetric_gaps:
            return self
        other = object.__new__(Scoring)
        for name in Scoring.__slots__:
            if name != "affine":
                object.__setattr__(other, name, getattr(self, name))
        object.__setattr__(other, "matrix", np.ascontiguousarray(self.matrix.T))
        object.__setattr__(other, "a_gap", self.b_gap)
        object.__setattr__(other, "b_gap", self.a_gap)
        object.__setattr__(other, "_user_gaps", self._user_gaps[::-1])
        object.__setattr__(other, "affine", self.affine)
        return other

    def encode(self, seq, record: str | None = None) -> np.ndarray:
        """Encode a sequence (str, bytes, skbio sequence, or a code array) into codes."""
        if isinstance(seq, np.ndarray):
            codes = seq
            if codes.ndim != 1 or codes.dtype.kind not in "iu":
                raise InputError("an encoded sequence must be a 1-D integer array", record=record)
            if codes.size and (codes.min() < 0 or codes.max() >= self.alphabet.size):
                raise InputError(
                    f"encoded sequence has codes outside 0..{self.alphabet.size - 1}",
                    record=record,
                )
            return codes.astype(np.uint8)
        if isinstance(seq, str):
            return self.alphabet.encode(seq, record)
        name, raw = sequence_text(seq)
        alphabet = self.alphabet
        wild = getattr(type(seq), "wildcard_char", None)
        if self.unknown is None and wild and not self._is_identity():
            # scikit-bio's rule for its grammared sequences: characters outside the matrix
            # (degenerate codes) are read as the wildcard, N or X, when the matrix has it.
            code = alphabet.index.get(wild)
            if code is not None:
                alphabet = _with_unknown(alphabet, code)
        return alphabet.encode(raw, record if record is not None else name)

    def _is_identity(self) -> bool:
        return self.alphabet.name == "letters"

    def bounds(self, m: int, n: int, mode: str = "global") -> tuple[int, int]:
        """Bounds ``(lo, hi)`` on every DP cell value for lengths ``m`` and ``n``.

        Any H, gap-matrix or diagonal-candidate value met while aligning sequences of these
        lengths lies in ``[lo, hi]``; kernels choose their integer width from it.
        """
        smax, smin = int(self.matrix.max()), int(self.matrix.min())
        (oa, ea), (ob, eb) = self.a_gap, self.b_gap
        hi = max(smax, 0) * min(m, n)
        # Every gap costs at least 0, so the all-gap path bounds H below (a negative o only
        # ever makes a path's cost smaller).
        lo_h = 0 if mode == "local" else -(max(oa, 0) + max(ob, 0) + ea * n + eb * m)
        lo = lo_h + min(smin, -(oa + ea), -(ob + eb), 0)
        return lo, hi

    def width_for(self, m: int, n: int, mode: str = "global", headroom: int = 0) -> int:
        """Narrowest integer width (8, 16, 32) that cannot overflow for these lengths."""
        lo, hi = self.bounds(m, n, mode)
        return narrowest_width(lo, hi, headroom)

    def __repr__(self) -> str:
        extra = ""
        if not self.symmetric_gaps:
            a, b = (((_plain(o), _plain(e)) if f else _plain(e)) for o, e, f in self._user_gaps)
            extra += f", a_gap_cost={a!r}, b_gap_cost={b!r}"
        if self.wildcard is not None:
            extra += f", wildcard={self.wildcard!r}"
        if self.unknown is not None:
            extra += f", unknown={self.unknown!r}"
        if self.alphabet.case_sensitive is not None:
            extra += f", case_sensitive={self.alphabet.case_sensitive}"
        return f"Scoring(sub_score={self.sub_label}, gap_cost={self.gap_cost!r}{extra})"

    def _key(self):
        return (
            self.alphabet,
            self.matrix.tobytes(),
            self.scale,
            self.a_gap,
            self.b_gap,
            self.affine,
        )

    def __eq__(self, other) -> bool:
        return isinstance(other, Scoring) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@lru_cache(maxsize=64)
def _with_unknown(alphabet: Alphabet, code: int) -> Alphabet:
    return Alphabet(alphabet.name, alphabet.letters, alphabet.case_sensitive, code)


def as_scoring(sub_score=(1, -1), gap_cost=2, scoring: Scoring | None = None) -> Scoring:
    """Return ``scoring`` if given, else build one from ``sub_score`` and ``gap_cost``.

    Schemes from plain values (tuples, numbers, matrix names) are cached: a pipeline calling
    ``align`` in a loop builds its scheme once (Scoring is immutable, so sharing is safe).
    """
    if scoring is not None:
        return scoring
    try:
        return _cached_scoring(_freeze(sub_score), _freeze(gap_cost))
    except TypeError:  # unhashable (a SubstitutionMatrix object): build it each time
        return Scoring(sub_score, gap_cost)


def _freeze(value):
    return tuple(value) if isinstance(value, list) else value


@lru_cache(maxsize=64)
def _cached_scoring(sub_score, gap_cost) -> Scoring:
    return Scoring(sub_score, gap_cost)


def free_ends_tuple(mode: str, free_ends=None) -> tuple[bool, bool, bool, bool]:
    """Normalise ``free_ends`` to scikit-bio's 4-tuple for a mode.

    The tuple says whether (leading gap of a, trailing gap of a, leading gap of b, trailing gap
    of b) is free. ``global`` defaults to all False (true Needleman-Wunsch, unlike
    scikit-bio's default of "overlap"); ``semiglobal`` means a is aligned end to end inside b
    (gaps in a at its ends are free: ``(True, True, False, False)``); ``local`` ignores it.
    """
    if mode not in MODES:
        close = difflib.get_close_matches(mode, MODES, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise OptionError(f"unknown mode {mode!r}{hint} (modes: {', '.join(MODES)})")
    if mode == "local":
        return (True, True, True, True)
    if mode == "semiglobal":
        if free_ends is not None:
            raise OptionError("mode='semiglobal' fixes free_ends; use mode='global' to set them")
        return (True, True, False, False)
    if free_ends is None or free_ends is False:
        return (False, False, False, False)
    if free_ends is True:
        return (True, True, True, True)
    ends = tuple(bool(x) for x in free_ends)
    if len(ends) == 2:
        return (ends[0], ends[0], ends[1], ends[1])
    if len(ends) == 4:
        return ends
    raise OptionError(f"free_ends must be a bool, a 2-tuple or a 4-tuple, not {free_ends!r}")


# --------------------------------------------------------------------------------------------
# PaPaRa
# --------------------------------------------------------------------------------------------

PAPARA_PRESETS = ("papara2", "bmc2012")


@dataclass(frozen=True)
class PaparaMaxForm:
    """A PaPaRa scoring as one max-structure recurrence, higher is better (the kernels' form).

    ``H = max(Hdiag + P, E, F)``; ``E = max(E_left + e_ext, H_left + e_open)``, both 0 on
    flagged columns; ``F = max(F_up + f_ext, H_up + f_open)``; ``P`` = ``match`` where the read
    state meets the profile's, else ``mismatch``, plus ``cgap`` on flagged columns. Left border
    ``H[j][-1] = border0 + j * border_step``, top border ``H[-1][i] = 0``; E and F start at
    minus infinity. The score is the best H of the last row (and of the last column when
    ``last_column``), negated when ``negate`` (lower-is-better presets run as ``-S``). Every H
    of a read of length m lies in ``[lo + lo_per_row * m, hi + hi_per_row * m]``.

    Built by :meth:`PaparaScoring.max_form`.
    """

    match: int
    mismatch: int
    cgap: int
    e_open: int
    e_ext: int
    f_open: int
    f_ext: int
    border0: int
    border_step: int
    last_column: bool
    negate: bool
    lo: int
    lo_per_row: int
    hi: int
    hi_per_row: int

    @property
    def row_shift(self) -> int:
        """s: a frame that stores row j ``-j * s`` above its true values makes F's step free.

        With ``s = max(f_ext, f_open)`` F needs no extension cost, ``f_open - s <= 0``, and
        ``F = max(F_up, T_up + f_open - s)`` with ``T = max(SM, E)`` (because H >= F), so the
        chain down a column is one max per row.
        """
        return max(self.f_ext, self.f_open)


@dataclass(frozen=True)
class PaparaScoring:
    """Parameters of the PaPaRa recurrence.

    ``kind="papara2"`` is PaPaRa 2.5's default kernel (higher is better; the values are added:
    ``gap_open=-3, gap_extend=-1, match=2, match_cgap=-3``). ``kind="bmc2012"`` is Equation 1
    of the 2012 seed paper (lower is better, fixed costs; the four numbers are ignored).
    ``mismatch`` (added where read and profile states share no base; PaPaRa's 0 by default)
    is the accurate mode's (:data:`ACCURATE`): with 0, any base aligned anywhere only gains,
    so a read's unrelated end (an overhang) is pulled into reference columns.
    """

    kind: str = "papara2"
    gap_open: int = -3
    gap_extend: int = -1
    match: int = 2
    match_cgap: int = -3
    mismatch: int = 0

    def __post_init__(self) -> None:
        if self.kind not in PAPARA_PRESETS:
            raise OptionError(f"unknown PaPaRa scoring {self.kind!r} (known: papara2, bmc2012)")
        if self.gap_open > 0 or self.gap_extend > 0:
            raise OptionError(
                "PaPaRa gap scores are added to the score and must be <= 0 "
                f"(got gap_open={self.gap_open}, gap_extend={self.gap_extend})"
            )
        if self.mismatch > 0:
            raise OptionError(f"the PaPaRa mismatch score must be <= 0 (got {self.mismatch})")

    @property
    def minimize(self) -> bool:
        """True when lower scores are better (bmc2012)."""
        return self.max_form().negate

    def max_form(self) -> PaparaMaxForm:
        """This scoring as the one max-structure recurrence every PaPaRa kernel runs.

        The one place that says what a preset means to the kernels: the Numba kernels
        (``simd/papara_score``, ``simd/papara_trace``) and the OpenCL ones
        (``kernels_cl/papara.KernelScoring``) both derive their constants from it.
        """
        if self.kind == "bmc2012":
            # -S follows the papara2 recurrence: F = I opens and extends at -3, E = D opens at
            # -4 and extends at -1 (free on flagged columns), the diagonal costs mismatch + CG,
            # the left border is -3 (j + 1), the score is the last row's best, negated.
            # S <= 3(m+1) (the border), D <= S + 4: -S in [-(3m + 7), 0].
            return PaparaMaxForm(0, -3, -3, -4, -1, -3, -3, -3, -3, False, True, -7, -3, 0, 0)
        o, e, ma, mc = self.gap_open, self.gap_extend, self.match, self.match_cgap
        gain = max(ma, 0) + max(mc, 0)
        # H >= a column of F from row -1 (o + e*j) and 0; H <= gain per read character.
        # The lower bound holds for any mismatch score (accurate mode): F from row -1.
        mm = self.mismatch
        return PaparaMaxForm(
            ma, mm, mc, o, e, o, e, 0, 0, True, False, min(0, o - e), min(0, e), 0, gain
        )

    def bounds(self, m: int) -> tuple[int, int]:
        """Bounds ``(lo, hi)`` on every DP value for a read of length ``m`` (any reference).

        papara2: H starts at 0 on both borders and a column of F steps bounds it below by
        ``gap_open + gap_extend * (m-1)``; it grows by at most ``match + max(match_cgap, 0)``
        per read character. bmc2012: ``0 <= S <= 3 (m + 1)`` and ``D <= S + 4``.
        """
        if self.kind == "bmc2012":
            return 0, 3 * (m + 1) + 4 + 6
        gain = max(self.match, 0) + max(self.match_cgap, 0)
        lo_h = min(0, self.gap_open + self.gap_extend * max(m - 1, 0))
        lo = lo_h + min(self.gap_open, self.match_cgap, 0) + min(self.gap_extend, 0)
        lo += self.mismatch
        return lo, gain * m

    def width_for(self, m: int, headroom: int = 0) -> int:
        """Narrowest integer width (16 or 32; PaPaRa never uses 8) for a read of length m."""
        lo, hi = self.bounds(m)
        return max(16, narrowest_width(lo, hi, headroom))

    def __str__(self) -> str:
        if self.kind == "bmc2012":
            return "bmc2012"
        text = f"{self.gap_open}:{self.gap_extend}:{self.match}:{self.match_cgap}"
        return text + f":{self.mismatch}" if self.mismatch else text


#: The accurate mode's scores (``dpalign papara --accurate``): gap open -5, extend -3, match 2,
#: flagged column -3, mismatch -2. Chosen by a grid over open, extend, cgap and mismatch (match
#: 2; 123 settings) on simulations with other seeds than the benchmark's (issue 15,
#: ``bench/placement_accuracy.py --seed-offset 1000``), by summed recall, precision and perfect.
ACCURATE = PaparaScoring("papara2", -5, -3, 2, -3, -2)


def papara_scoring(spec: str | PaparaScoring | None = None) -> PaparaScoring:
    """Parse ``papara2``, ``bmc2012`` or ``o:e:m:mc[:mm]`` (e.g. ``-3:-1:2:-3``, PaPaRa's ``-p``;
    the optional fifth number is the mismatch score, 0 in PaPaRa)."""
    if spec is None or isinstance(spec, PaparaScoring):
        return spec or PaparaScoring()
    text = spec.strip()
    if text in PAPARA_PRESETS:
        return PaparaScoring(kind=text)
    parts = text.split(":")
    if len(parts) not in (4, 5):
        raise OptionError(
            f"scoring {spec!r}: expected papara2, bmc2012 or o:e:m:mc[:mm] such as -3:-1:2:-3",
            parameter="scoring",
        )
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise OptionError(
            f"scoring {spec!r}: o:e:m:mc[:mm] must be integers", parameter="scoring"
        ) from None
    return PaparaScoring("papara2", *values)
