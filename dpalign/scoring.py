"""Scoring schemes: pairwise substitution scores and gap costs, PaPaRa presets, integer widths.

The gap formula, stated once
----------------------------
dpalign follows scikit-bio 0.7 (`skbio.alignment.pair_align`): higher scores are better, gap
costs are positive numbers subtracted from the score, and

* ``gap_cost=g`` (linear): a gap of length k costs ``g * k``;
* ``gap_cost=(o, e)`` (affine): a gap of length k costs ``o + e * k``.

Other tools count the first gap position inside their "open" value:

===============================  =========================  ==========================
dpalign / scikit-bio ``(o, e)``  parasail ``open, extend``  Biopython PairwiseAligner
===============================  =========================  ==========================
gap of length k costs o + e*k    ``open = o + e``,          ``open_gap_score = -(o+e)``,
                                 ``extend = e``             ``extend_gap_score = -e``
===============================  =========================  ==========================

So BLAST's "11/1" (a gap of length k costs 11 + k) is ``gap_cost=(11, 1)`` here and ``open=12,
extend=1`` in parasail.

>>> Scoring(gap_cost=(11, 1)).gap_penalty(3)
14
>>> Scoring(gap_cost=2).gap_penalty(3)
6
"""

from __future__ import annotations

import difflib
import math
import numbers
from dataclasses import dataclass
from functools import cache, lru_cache

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


def _as_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise OptionError(f"{what} must be a number, not {value!r}")
    if not math.isfinite(value):
        raise OptionError(f"{what} must be finite, not {value!r}")
    if value != int(value):
        raise OptionError(
            f"{what} = {value!r}: dpalign computes in integers; scale all scores so they are whole"
        )
    return int(value)


@cache
def substitution_matrix(name: str):
    """Load a named scikit-bio ``SubstitutionMatrix``; unknown names list the close matches."""
    from skbio import SubstitutionMatrix

    names = SubstitutionMatrix.get_names()
    by_upper = {n.upper(): n for n in names}
    if name.upper() not in by_upper:
        close = difflib.get_close_matches(name.upper(), list(by_upper), n=3, cutoff=0.4)
        hint = f"; did you mean {', '.join(by_upper[c] for c in close)}?" if close else ""
        raise OptionError(f"unknown substitution matrix {name!r}{hint} (known: {', '.join(names)})")
    return SubstitutionMatrix.by_name(by_upper[name.upper()])


class Scoring:
    """Substitution scores and gap costs for pairwise alignment (scikit-bio convention).

    Parameters
    ----------
    sub_score : (match, mismatch), skbio.SubstitutionMatrix or str, default (1, -1)
        Match/mismatch scores over the identity alphabet :data:`~dpalign.alphabet.LETTERS`,
        a matrix, or a matrix name known to ``SubstitutionMatrix.by_name``.
    gap_cost : number or (o, e), default 2
        Linear cost ``g`` per gap position, or affine: a gap of length k costs ``o + e*k``.

    Attributes
    ----------
    matrix : ndarray, shape (K, K), int32
        Scores indexed by residue codes.
    alphabet : Alphabet
        The codes' alphabet.
    gap_open, gap_extend : int
        ``o`` and ``e`` (``o == 0`` for linear gaps).
    """

    __slots__ = ("alphabet", "matrix", "gap_open", "gap_extend", "affine", "sub_label")

    def __init__(self, sub_score=(1, -1), gap_cost=2) -> None:
        self.alphabet, self.matrix, self.sub_label = self._substitution(sub_score)
        self.gap_open, self.gap_extend, self.affine = self._gaps(gap_cost)

    def __setattr__(self, name, value):
        if hasattr(self, "affine") and name in Scoring.__slots__:
            raise AttributeError("Scoring is immutable; build a new one")
        object.__setattr__(self, name, value)

    @staticmethod
    def _substitution(sub_score):
        label = None
        if isinstance(sub_score, str):
            label = sub_score.upper()
            sub_score = substitution_matrix(sub_score)
        if hasattr(sub_score, "scores") and hasattr(sub_score, "alphabet"):
            letters = "".join(sub_score.alphabet)
            if any(len(ch) != 1 for ch in sub_score.alphabet):
                raise OptionError("substitution matrix symbols must be single characters")
            scores = np.asarray(sub_score.scores, dtype=np.float64)
            if not np.all(np.isfinite(scores)) or np.any(scores != np.round(scores)):
                raise OptionError(
                    "substitution matrix scores must be finite whole numbers "
                    "(dpalign computes in integers)"
                )
            return Alphabet(label or "matrix", letters), scores.astype(np.int32), label or "matrix"
        try:
            match, mismatch = sub_score
        except (TypeError, ValueError):
            raise OptionError(
                f"sub_score must be (match, mismatch), a SubstitutionMatrix or a matrix name, "
                f"not {sub_score!r}"
            ) from None
        match, mismatch = _as_int(match, "match score"), _as_int(mismatch, "mismatch score")
        k = len(LETTERS)
        matrix = np.full((k, k), mismatch, dtype=np.int32)
        np.fill_diagonal(matrix, match)
        return Alphabet("letters", LETTERS), matrix, f"match {match}, mismatch {mismatch}"

    @staticmethod
    def _gaps(gap_cost):
        if isinstance(gap_cost, (tuple, list)):
            if len(gap_cost) != 2:
                raise OptionError(f"gap_cost must be g or (o, e), not {gap_cost!r}")
            o, e = _as_int(gap_cost[0], "gap open cost"), _as_int(gap_cost[1], "gap extend cost")
            affine = True
        else:
            o, e, affine = 0, _as_int(gap_cost, "gap cost"), False
        if o < 0 or e < 0:
            raise OptionError(
                f"gap costs are positive numbers subtracted from the score (got o={o}, e={e})"
            )
        return o, e, affine

    # ---------------------------------------------------------------------------------------

    def gap_penalty(self, k: int) -> int:
        """Cost of one gap of length ``k`` (``o + e*k``)."""
        return self.gap_open + self.gap_extend * k if k > 0 else 0

    @property
    def gap_cost(self):
        """The gap cost as given: ``g`` or ``(o, e)``."""
        return (self.gap_open, self.gap_extend) if self.affine else self.gap_extend

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
        name, raw = sequence_text(seq)
        return self.alphabet.encode(raw, record if record is not None else name)

    def bounds(self, m: int, n: int, mode: str = "global") -> tuple[int, int]:
        """Bounds ``(lo, hi)`` on every DP cell value for lengths ``m`` and ``n``.

        Any H, gap-matrix or diagonal-candidate value met while aligning sequences of these
        lengths lies in ``[lo, hi]``; kernels choose their integer width from it.
        """
        smax, smin = int(self.matrix.max()), int(self.matrix.min())
        o, e = self.gap_open, self.gap_extend
        hi = max(smax, 0) * min(m, n)
        lo_h = 0 if mode == "local" else -(2 * o + e * (m + n))
        lo = lo_h + min(smin, -(o + e), 0)
        return lo, hi

    def width_for(self, m: int, n: int, mode: str = "global", headroom: int = 0) -> int:
        """Narrowest integer width (8, 16, 32) that cannot overflow for these lengths."""
        lo, hi = self.bounds(m, n, mode)
        return narrowest_width(lo, hi, headroom)

    def __repr__(self) -> str:
        return f"Scoring(sub_score={self.sub_label}, gap_cost={self.gap_cost!r})"

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, Scoring)
            and self.alphabet == other.alphabet
            and np.array_equal(self.matrix, other.matrix)
            and self.gap_cost == other.gap_cost
        )

    def __hash__(self) -> int:
        return hash((self.alphabet.letters, self.matrix.tobytes(), self.gap_cost))


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
    """

    kind: str = "papara2"
    gap_open: int = -3
    gap_extend: int = -1
    match: int = 2
    match_cgap: int = -3

    def __post_init__(self) -> None:
        if self.kind not in PAPARA_PRESETS:
            raise OptionError(f"unknown PaPaRa scoring {self.kind!r} (known: papara2, bmc2012)")
        if self.gap_open > 0 or self.gap_extend > 0:
            raise OptionError(
                "PaPaRa gap scores are added to the score and must be <= 0 "
                f"(got gap_open={self.gap_open}, gap_extend={self.gap_extend})"
            )

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
        return PaparaMaxForm(
            ma, 0, mc, o, e, o, e, 0, 0, True, False, min(0, o - e), min(0, e), 0, gain
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
        return lo, gain * m

    def width_for(self, m: int, headroom: int = 0) -> int:
        """Narrowest integer width (16 or 32; PaPaRa never uses 8) for a read of length m."""
        lo, hi = self.bounds(m)
        return max(16, narrowest_width(lo, hi, headroom))

    def __str__(self) -> str:
        if self.kind == "bmc2012":
            return "bmc2012"
        return f"{self.gap_open}:{self.gap_extend}:{self.match}:{self.match_cgap}"


def papara_scoring(spec: str | PaparaScoring | None = None) -> PaparaScoring:
    """Parse ``papara2``, ``bmc2012`` or ``o:e:m:mc`` (e.g. ``-3:-1:2:-3``, PaPaRa's ``-p``)."""
    if spec is None or isinstance(spec, PaparaScoring):
        return spec or PaparaScoring()
    text = spec.strip()
    if text in PAPARA_PRESETS:
        return PaparaScoring(kind=text)
    parts = text.split(":")
    if len(parts) != 4:
        raise OptionError(
            f"--scoring {spec!r}: expected papara2, bmc2012 or o:e:m:mc such as -3:-1:2:-3"
        )
    try:
        o, e, m, mc = (int(p) for p in parts)
    except ValueError:
        raise OptionError(f"--scoring {spec!r}: o:e:m:mc must be four integers") from None
    return PaparaScoring("papara2", o, e, m, mc)
