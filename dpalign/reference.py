"""Plain dynamic programming for every recurrence in dpalign: slow, obviously right, the oracle.

Every fast kernel (Numba, OpenCL) is tested to give exactly these scores, end positions and
alignments. This module depends on NumPy alone and favours clarity over speed: the pairwise
recurrences are scalar Python over full matrices; the PaPaRa recurrence runs one read against
W profiles at once with NumPy arrays over the W lanes (the code reads like the scalar version).

Pairwise conventions (scikit-bio 0.7 ``pair_align``)
----------------------------------------------------
``a`` has length m (matrix rows i = 0..m), ``b`` length n (columns j = 0..n). A gap of length k
costs ``o + e*k`` (linear gaps: ``o = 0``; gaps in a and in b may have their own ``(o, e)``;
``o`` may be negative, opening cheaper than extending, while ``o + e >= 0``). Three matrices
(Gotoh):

* ``D[i][j]``: alignments of ``a[:i]``, ``b[:j]`` ending with ``a[i-1]`` against a gap in b,
* ``I[i][j]``: ... ending with ``b[j-1]`` against a gap in a,
* ``H[i][j]``: the best of all (local: and 0).

``free_ends = (a_lead, a_trail, b_lead, b_trail)`` says which end gaps cost nothing (a gap *in*
a at its start, at its end; a gap in b at its start, at its end).

Tie rules (documented; every backend follows them)
-------------------------------------------------
* **End cell**: the maximum over the candidate cells (local: every cell; global: (m, n), plus
  row m if ``a_trail``, plus column n if ``b_trail``); ties go to the first in row-major order
  (smallest i, then smallest j).
* **Traceback** from H: diagonal first, then D (gap in b), then I (gap in a). From D or I: go
  back to H ("open") when that explains the value, else extend.
* Free end gaps are not part of the reported alignment (like scikit-bio's ``trim_ends=True``):
  the coordinates say where the aligned part starts and ends. Penalised end gaps are included.
* Local alignment stops at the first cell whose H is 0. A local score of 0 gives an empty
  alignment at (0, 0).
* An empty sequence aligns to gaps only: global scores ``-(o + e*k)`` for the k characters of
  the other (0 where that end is free), local scores 0.

CIGAR operations follow scikit-bio's ``PairAlignPath``: ``=``/``X`` (or ``M``) aligned pair,
``I`` a gap in a (a character of b only), ``D`` a gap in b (a character of a only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

NEG_INF = -math.inf


@dataclass(frozen=True)
class PairwiseResult:
    """Score and, when traced back, the alignment of one pair.

    Coordinates are 0-based, half-open: ``a[a_start:a_end]`` is aligned to
    ``b[b_start:b_end]``. ``ops`` holds one character per alignment column (``=``, ``X``,
    ``I``, ``D``) or is ``None`` for score-only results.
    """

    score: int
    a_start: int
    a_end: int
    b_start: int
    b_end: int
    ops: str | None = None

    @property
    def cigar(self) -> str:
        """Run-length encoded ``ops``."""
        return run_length(self.ops or "")


def run_length(ops: str) -> str:
    """Compress ``"==XI"`` to ``"2=1X1I"`` (vectorised: a 20 Mb alignment takes ~0.3 s)."""
    codes = np.frombuffer(ops.encode("ascii"), dtype=np.uint8)
    if not codes.size:
        return ""
    starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))
    counts = np.diff(np.append(starts, codes.size))
    letters = codes[starts].tobytes().decode("ascii")
    return "".join([f"{c}{op}" for c, op in zip(counts.tolist(), letters, strict=True)])


def _fill_pairwise(a, b, matrix, a_gap, b_gap, mode, free_ends):
    """H, D, I and the two "open from" matrices: H without D (HnD) and H without I (HnI).

    A gap opens from the best state that is not the same gap already: with ``o >= 0`` that
    is H itself (splitting a gap never gains), with ``o < 0`` it is not, and a gap must not
    re-open from itself (Biopython's recurrence: Ix opens from M and Iy, never from Ix).
    """
    m, n = len(a), len(b)
    (oa, ea), (ob, eb) = a_gap, b_gap
    a_lead, _, b_lead, _ = free_ends
    local = mode == "local"
    floor = 0 if local else NEG_INF

    def grid():
        return [[NEG_INF] * (n + 1) for _ in range(m + 1)]

    H, D, I, HnD, HnI = grid(), grid(), grid(), grid(), grid()  # noqa: E741
    H[0][0] = HnD[0][0] = HnI[0][0] = 0
    for j in range(1, n + 1):
        H[0][j] = I[0][j] = HnD[0][j] = 0 if (local or a_lead) else -(oa + ea * j)
    for i in range(1, m + 1):
        H[i][0] = D[i][0] = HnI[i][0] = 0 if (local or b_lead) else -(ob + eb * i)
    if local:
        for j in range(1, n + 1):
            I[0][j] = NEG_INF
        for i in range(1, m + 1):
            D[i][0] = NEG_INF
    for i in range(1, m + 1):
        for j in range(1, n + 1):
            D[i][j] = max(D[i - 1][j] - eb, HnD[i - 1][j] - ob - eb)
            I[i][j] = max(I[i][j - 1] - ea, HnI[i][j - 1] - oa - ea)
            diag = H[i - 1][j - 1] + int(matrix[a[i - 1], b[j - 1]])
            HnD[i][j] = max(diag, I[i][j], floor)
            HnI[i][j] = max(diag, D[i][j], floor)
            H[i][j] = max(HnD[i][j], D[i][j])
    return H, D, I, HnD, HnI


def _end_cell(H, mode, free_ends):
    m, n = len(H) - 1, len(H[0]) - 1
    _, a_trail, _, b_trail = free_ends
    best, end = NEG_INF, (m, n)
    for i in range(m + 1):
        for j in range(n + 1):
            if mode == "local":
                candidate = True
            else:
                candidate = (i == m and j == n) or (a_trail and i == m) or (b_trail and j == n)
            if candidate and H[i][j] > best:
                best, end = H[i][j], (i, j)
    return best, end


def _default_ends(mode: str) -> tuple[bool, bool, bool, bool]:
    return (True, True, False, False) if mode == "semiglobal" else (False,) * 4


def _gap_pairs(gap_open, gap_extend, a_gap, b_gap):
    o_e = (gap_open, gap_extend)
    a_gap = tuple(int(x) for x in (a_gap if a_gap is not None else o_e))
    b_gap = tuple(int(x) for x in (b_gap if b_gap is not None else o_e))
    return a_gap, b_gap


def pairwise_score(
    a, b, matrix, gap_open, gap_extend, mode="global", free_ends=None, *, a_gap=None, b_gap=None
):
    """Score one pair; return a :class:`PairwiseResult` without ops (start = end cell).

    Parameters
    ----------
    a, b : sequence of int
        Residue codes.
    matrix : ndarray (K, K)
        Substitution scores.
    gap_open, gap_extend : int
        ``o`` and ``e`` (a gap of length k costs ``o + e*k``). ``o`` may be negative
        (opening cheaper than extending) while ``o + e >= 0``.
    mode : {"global", "local", "semiglobal"}
    free_ends : 4-tuple of bool, optional
        ``(a_lead, a_trail, b_lead, b_trail)`` (see :func:`dpalign.scoring.free_ends_tuple`);
        by default all False for global, ``(True, True, False, False)`` for semiglobal.
    a_gap, b_gap : (int, int), optional
        Separate ``(o, e)`` for gaps in a (``I``) and in b (``D``); default
        ``(gap_open, gap_extend)``.
    """
    result = pairwise_align(
        a, b, matrix, gap_open, gap_extend, mode, free_ends, a_gap=a_gap, b_gap=b_gap
    )
    return PairwiseResult(result.score, result.a_end, result.a_end, result.b_end, result.b_end)


def pairwise_align(
    a, b, matrix, gap_open, gap_extend, mode="global", free_ends=None, *, a_gap=None, b_gap=None
):
    """Align one pair with traceback; return a :class:`PairwiseResult`.

    See the module docstring for the recurrence and the tie rules, and
    :func:`pairwise_score` for the parameters.
    """
    ends = _default_ends(mode) if free_ends is None else tuple(bool(x) for x in free_ends)
    a, b = [int(x) for x in a], [int(x) for x in b]
    a_gap, b_gap = _gap_pairs(gap_open, gap_extend, a_gap, b_gap)
    (oa, ea), (ob, eb) = a_gap, b_gap
    H, D, I, HnD, HnI = _fill_pairwise(a, b, matrix, a_gap, b_gap, mode, ends)  # noqa: E741
    score, (i, j) = _end_cell(H, mode, ends)
    a_end, b_end = i, j
    a_lead, _, b_lead, _ = ends
    local = mode == "local"
    ops: list[str] = []
    state = "H"
    # After a gap opened with o < 0, the cell it opened from must not be that same gap.
    exclude = None
    while True:
        if state == "H":
            value = H[i][j] if exclude is None else (HnD if exclude == "D" else HnI)[i][j]
            if (local and value == 0) or (i == 0 and j == 0):
                break
            if i == 0:
                if a_lead:
                    break
                state = "I"
                continue
            if j == 0:
                if b_lead:
                    break
                state = "D"
                continue
            s = int(matrix[a[i - 1], b[j - 1]])
            if value == H[i - 1][j - 1] + s:
                ops.append("=" if a[i - 1] == b[j - 1] else "X")
                i, j = i - 1, j - 1
            elif exclude != "D" and value == D[i][j]:
                state = "D"
            else:
                state = "I" if exclude != "I" else "D"
            exclude = None
        elif state == "D":
            ops.append("D")
            if ob >= 0:
                opened, exclude = D[i][j] == H[i - 1][j] - ob - eb, None
            else:
                opened, exclude = D[i][j] == HnD[i - 1][j] - ob - eb, "D"
            i -= 1
            state = "H" if opened else "D"
            exclude = exclude if opened else None
        else:
            ops.append("I")
            if oa >= 0:
                opened, exclude = I[i][j] == H[i][j - 1] - oa - ea, None
            else:
                opened, exclude = I[i][j] == HnI[i][j - 1] - oa - ea, "I"
            j -= 1
            state = "H" if opened else "I"
            exclude = exclude if opened else None
    if local and score == 0:
        return PairwiseResult(0, 0, 0, 0, 0, "")
    return PairwiseResult(int(score), i, a_end, j, b_end, "".join(reversed(ops)))


def rescore(
    ops: str, a, b, matrix, gap_open, gap_extend, a_start=0, b_start=0, *, a_gap=None, b_gap=None
) -> int:
    """Score an alignment given by its ops (independently of any DP): the CIGAR check."""
    (oa, ea), (ob, eb) = _gap_pairs(gap_open, gap_extend, a_gap, b_gap)
    score, i, j, prev = 0, a_start, b_start, None
    for op in ops:
        if op in "=XM":
            score += int(matrix[int(a[i]), int(b[j])])
            i, j = i + 1, j + 1
        elif op == "D":
            score -= eb + (ob if prev != "D" else 0)
            i += 1
        elif op == "I":
            score -= ea + (oa if prev != "I" else 0)
            j += 1
        else:
            raise ValueError(f"unknown op {op!r}")
        prev = op
    return score


# --------------------------------------------------------------------------------------------
# PaPaRa
# --------------------------------------------------------------------------------------------

#: Traceback bits kept per cell (spec §6).
E_EXT, F_EXT, H_FROM_E, H_FROM_F = 1, 2, 4, 8
PAPARA_NEG = -(10**9)  # "minus infinity" (far below any reachable value, no overflow in int64)


@dataclass(frozen=True)
class PaparaResult:
    """Scores of one read against W profiles, and where each alignment ends.

    ``end_col`` is the reference column (0..n-1), ``end_row`` the read position (0..m-1) of the
    end cell. ``bits`` (shape (m, n, W)) is kept only when asked for, for traceback.
    """

    scores: np.ndarray
    end_col: np.ndarray
    end_row: np.ndarray
    bits: np.ndarray | None = None


def papara_fill(states, flags, read, scoring, keep_bits=False) -> PaparaResult:
    """Run the PaPaRa recurrence of one read against W profiles.

    Parameters
    ----------
    states : ndarray (n, W) or (n,)
        Profile states (bit sets) per reference column and lane.
    flags : ndarray (n, W) or (n,)
        Gap flags (1 = the column is a gap at this edge).
    read : ndarray (m,)
        Read states.
    scoring : PaparaScoring
        ``kind="papara2"`` (spec §5) or ``"bmc2012"`` (spec §8).
    keep_bits : bool
        Keep the per-cell traceback bits.
    """
    states = np.asarray(states)
    flags = np.asarray(flags)
    if states.ndim == 1:
        states, flags = states[:, None], flags[:, None]
    n, width = states.shape
    m = len(read)
    if n == 0 or m == 0:
        raise ValueError("the PaPaRa recurrence needs a non-empty read and reference")
    flagged = flags.astype(bool)
    bits = np.zeros((m, n, width), dtype=np.uint8) if keep_bits else None
    if scoring.kind == "bmc2012":
        return _fill_bmc2012(states, flagged, read, bits)
    GO, GE, MA, MC = scoring.gap_open, scoring.gap_extend, scoring.match, scoring.match_cgap
    MM = scoring.mismatch
    zeros = np.zeros(width, dtype=np.int64)
    neg = np.full(width, PAPARA_NEG, dtype=np.int64)
    go = np.where(flagged, 0, GO)  # E costs nothing on flagged columns
    ge = np.where(flagged, 0, GE)
    mc = np.where(flagged, MC, 0)
    h_up = np.zeros((n, width), dtype=np.int64)  # H[j-1][i]; row -1 is 0
    f_up = np.full((n, width), PAPARA_NEG, dtype=np.int64)  # F[j-1][i]; row -1 is -inf
    best, end_col, end_row = neg.copy(), np.zeros(width, np.int64), np.zeros(width, np.int64)
    for j in range(m):
        b = int(read[j])
        h_left, e_left, h_diag = zeros, neg, zeros  # H[j][-1] = 0, E[j][-1] = -inf, H[j-1][-1] = 0
        for i in range(n):
            sm = h_diag + np.where((states[i] & b) != 0, MA, MM) + mc[i]
            e_ext, e_open = e_left + ge[i], h_left + go[i]
            e = np.maximum(e_ext, e_open)
            f_ext, f_open = f_up[i] + GE, h_up[i] + GO
            f = np.maximum(f_ext, f_open)
            take_f = (f > e) & (f > sm)
            take_e = ~take_f & (e >= f) & (e > sm)
            h = np.where(take_f, f, np.where(take_e, e, sm))
            if bits is not None:
                bits[j, i] = (
                    (e_ext > e_open) * E_EXT
                    + (f_ext > f_open) * F_EXT
                    + take_e * H_FROM_E
                    + take_f * H_FROM_F
                )
            if i == n - 1 or j == m - 1:
                better = h > best
                best = np.where(better, h, best)
                end_col = np.where(better, i, end_col)
                end_row = np.where(better, j, end_row)
            h_diag = h_up[i].copy()  # a view would see the store below
            h_up[i], f_up[i] = h, f
            h_left, e_left = h, e
    return PaparaResult(best, end_col, end_row, bits)


def _fill_bmc2012(states, flagged, read, bits) -> PaparaResult:
    """Equation 1 of the seed paper (lower is better); see spec §8 and :func:`papara_fill`."""
    n, width = states.shape
    m = len(read)
    inf = -PAPARA_NEG
    cg = np.where(flagged, 3, 0)
    gpoe = np.where(flagged, 0, 4)
    gpe = np.where(flagged, 0, 1)
    s_up = np.zeros((n, width), dtype=np.int64)  # S[i][j-1]; row -1 is 0 (free reference start)
    for j in range(m):
        b = int(read[j])
        s_left = np.full(width, 3 * (j + 1), dtype=np.int64)  # S[-1][j]
        s_diag = np.full(width, 3 * j, dtype=np.int64)  # S[-1][j-1]
        d_left = np.full(width, inf, dtype=np.int64)  # D[-1][j]
        for i in range(n):
            sm = s_diag + np.where((states[i] & b) != 0, 0, 3) + cg[i]
            ins = s_up[i] + 3
            d_ext, d_open = d_left + gpe[i], s_left + gpoe[i]
            d = np.minimum(d_ext, d_open)
            take_i = (ins < d) & (ins < sm)
            take_d = ~take_i & (d <= ins) & (d < sm)
            s = np.where(take_i, ins, np.where(take_d, d, sm))
            if bits is not None:
                bits[j, i] = (d_ext < d_open) * E_EXT + take_d * H_FROM_E + take_i * H_FROM_F
            s_diag = s_up[i].copy()
            s_up[i] = s
            s_left, d_left = s, d
    last = s_up  # S[i][m-1]
    end_col = np.argmin(last, axis=0)  # first minimum: ties to the lower column
    scores = last[end_col, np.arange(width)]
    return PaparaResult(scores, end_col, np.full(width, m - 1), bits)


def papara_traceback(bits: np.ndarray, end_col: int, end_row: int) -> str:
    """Trace one alignment back from its end cell (spec §6).

    Parameters
    ----------
    bits : ndarray (m, n)
        Traceback bits of one lane (``PaparaResult.bits[:, :, lane]``).
    end_col, end_row : int
        The end cell.

    Returns
    -------
    str
        The alignment in forward order: ``M`` (read state on a site), ``R`` (reference site
        against a gap), ``I`` (read character inserted between sites). It holds n ``M``+``R``
        and m ``M``+``I``.
    """
    m, n = bits.shape
    ops: list[str] = []
    i, j = n - 1, m - 1
    while i > end_col:
        ops.append("R")
        i -= 1
    while j > end_row:
        ops.append("I")
        j -= 1
    state = "diag"
    while i >= 0 and j >= 0:
        cell = int(bits[j, i])
        if state == "diag":
            if cell & H_FROM_F:
                state = "F"
            elif cell & H_FROM_E:
                state = "E"
            else:
                ops.append("M")
                i, j = i - 1, j - 1
        elif state == "F":
            ops.append("I")
            j -= 1
            state = "F" if cell & F_EXT else "diag"
        else:
            ops.append("R")
            i -= 1
            state = "E" if cell & E_EXT else "diag"
    ops.extend("R" * (i + 1))
    ops.extend("I" * (j + 1))
    return "".join(reversed(ops))


def papara_align(states, flags, read, scoring) -> tuple[int, str]:
    """Score and trace back one read against one profile; return ``(score, ops)``."""
    result = papara_fill(states, flags, read, scoring, keep_bits=True)
    ops = papara_traceback(result.bits[:, :, 0], int(result.end_col[0]), int(result.end_row[0]))
    return int(result.scores[0]), ops


# --------------------------------------------------------------------------------------------
# The accurate mode's second pass: posterior decoding against a probabilistic edge profile
# --------------------------------------------------------------------------------------------


def _lse(*values: float) -> float:
    top = max(values)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


def papara_refine_posteriors(
    odds,
    occupied,
    keep,
    leave,
    enter,
    stay,
    read,
    lo,
    hi,
    first,
    last,
    open_ins,
    extend_ins,
    overhang,
    open_lo,
    open_hi,
) -> np.ndarray:
    """Posterior probability of every (read character, window column) pair: ``P[j+1, i+1]``.

    The alignments of ``read`` (row indices into ``odds``) within columns ``lo..hi-1`` are
    weighted by the product of: ``odds[read[j], c]`` per aligned pair; for each column c from
    the first aligned one to the last, how the read passes from column c - 1 to c: ``keep[c]``
    (aligned in both, or c - 1 aligned then characters inserted, then c aligned), ``leave[c]``
    (c - 1 aligned, c skipped), ``enter[c]`` (c - 1 skipped, c aligned), ``stay[c]`` (both
    skipped), and ``occupied[c]`` for the first aligned column (the columns before it and after
    the last are free: reads are fragments); ``open_ins`` then ``extend_ins`` per character
    inserted between columns (after an aligned or a skipped column; an insertion is never
    followed by a skip); ``overhang`` per character before the first column when ``open_lo``
    (the window starts at the reference's start) or after the last when ``open_hi``. Only the
    cells ``first[j] <= i <= last[j]`` of row j (character j - 1, i columns of the window
    consumed) may be on a path (a band around the first pass's alignment). Plain log space,
    cell by cell: the oracle of :mod:`dpalign.simd.papara_refine`.
    """
    m, n = len(read), hi - lo
    ninf = -math.inf
    lm = np.full((m + 1, n + 1), ninf)  # log forward: M, D, I
    ld = np.full((m + 1, n + 1), ninf)
    li = np.full((m + 1, n + 1), ninf)

    def start(j: int) -> float:  # log weight of beginning with j characters consumed, column 0
        if j == 0:
            return 0.0
        return j * _log(overhang) if open_lo else ninf

    for j in range(1, m + 1):
        for i in range(n + 1):
            if not first[j] <= i <= last[j]:
                continue
            if i > 0:
                c = lo + i - 1
                begin = 0.0 if j == 1 else (start(j - 1) if i == 1 else ninf)
                lm[j, i] = _lse(
                    _lse(lm[j - 1, i - 1], li[j - 1, i - 1]) + _log(keep[c]),
                    ld[j - 1, i - 1] + _log(enter[c]),
                    begin + _log(occupied[c]),
                ) + _log(odds[read[j - 1], c])
                ld[j, i] = _lse(lm[j, i - 1] + _log(leave[c]), ld[j, i - 1] + _log(stay[c]))
            li[j, i] = _lse(
                _lse(lm[j - 1, i], ld[j - 1, i]) + _log(open_ins),
                li[j - 1, i] + _log(extend_ins),
            )
    ends = [_lse(lm[m, i], ld[m, i], li[m, i]) for i in range(1, n + 1)]
    if open_hi:
        ends += [_lse(lm[j, n], ld[j, n], li[j, n]) + (m - j) * _log(overhang) for j in range(1, m)]
    log_z = _lse(*ends) if ends else ninf
    bm = np.full((m + 2, n + 2), ninf)  # log backward from M, D and I
    bd = np.full((m + 2, n + 2), ninf)
    bi = np.full((m + 2, n + 2), ninf)
    for j in range(m, 0, -1):
        for i in range(n, -1, -1):
            if not first[j] <= i <= last[j]:
                continue
            end = ninf
            if j == m and i >= 1:
                end = 0.0
            elif open_hi and i == n and j < m:
                end = (m - j) * _log(overhang)
            diag = skip_m = skip_d = ninf
            if j < m and i < n:
                diag = bm[j + 1, i + 1] + _log(odds[read[j], lo + i])
            if i < n:
                skip_m = bd[j, i + 1] + _log(leave[lo + i])
                skip_d = bd[j, i + 1] + _log(stay[lo + i])
            into_i = bi[j + 1, i] if j < m else ninf
            keep_c = _log(keep[lo + i]) if i < n else ninf
            enter_c = _log(enter[lo + i]) if i < n else ninf
            bm[j, i] = _lse(diag + keep_c, skip_m, into_i + _log(open_ins), end)
            bd[j, i] = _lse(diag + enter_c, skip_d, into_i + _log(open_ins), end)
            bi[j, i] = _lse(diag + keep_c, into_i + _log(extend_ins), end)
    post = np.zeros((m + 1, n + 1))
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            if lm[j, i] > ninf and bm[j, i] > ninf:
                post[j, i] = math.exp(lm[j, i] + bm[j, i] - log_z)
    return post


def papara_refine_rows_posteriors(
    odds,
    occupied,
    keep,
    leave,
    enter,
    stay,
    weights,
    jump,
    read,
    lo,
    hi,
    first,
    last,
    open_ins,
    extend_ins,
    overhang,
    open_lo,
    open_hi,
    with_log_z=False,
):
    """Posteriors ``P[j+1, i+1]`` of the row-mixture model: :func:`papara_refine_posteriors`
    with R components, each its own chain, and switches between them (with ``with_log_z``:
    ``(P, log Z)``, log Z the log of the sum over every path, the model's likelihood of the
    read relative to the background).

    ``odds`` (R, codes, hi - lo) and ``occupied``, ``keep``, ``leave``, ``enter`` and ``stay``
    (R, hi - lo) are component r's weights of :func:`papara_refine_posteriors` for window
    column i (``lo + i``). A path
    follows one component at a time: component r at the start with ``weights[r]``; on each
    step into a column (aligned or skipped) it stays with its component with ``1 - jump`` or
    draws one anew (itself included) with ``jump * weights[r2]``, and that component's chain
    weighs the step. Insertions keep the component. Plain log space over the states
    (component, M/D/I), cell by cell: the oracle of
    :func:`dpalign.simd.papara_refine.posteriors_rows`.
    """
    m, n, rows = len(read), hi - lo, len(weights)
    ninf = -math.inf
    lw = [_log(w) for w in weights]
    l_same, l_jump = _log(1.0 - jump), _log(jump)

    def moves(r: int) -> list[tuple[int, float]]:  # (r2, log weight) of entering a column
        return [(r2, _lse(l_jump + lw[r2], l_same if r2 == r else ninf)) for r2 in range(rows)]

    lm = np.full((rows, m + 1, n + 1), ninf)
    ld = np.full((rows, m + 1, n + 1), ninf)
    li = np.full((rows, m + 1, n + 1), ninf)

    def start(j: int) -> float:
        if j == 0:
            return 0.0
        return j * _log(overhang) if open_lo else ninf

    for j in range(1, m + 1):
        for i in range(n + 1):
            if not first[j] <= i <= last[j]:
                continue
            if i > 0:
                c = i - 1
                begin = 0.0 if j == 1 else (start(j - 1) if i == 1 else ninf)
                into_m = [[begin + lw[r2] + _log(occupied[r2][c])] for r2 in range(rows)]
                into_d = [[] for _ in range(rows)]
                for r in range(rows):
                    for r2, lt in moves(r):
                        into_m[r2].append(
                            _lse(lm[r, j - 1, i - 1], li[r, j - 1, i - 1]) + lt + _log(keep[r2][c])
                        )
                        into_m[r2].append(ld[r, j - 1, i - 1] + lt + _log(enter[r2][c]))
                        into_d[r2].append(lm[r, j, i - 1] + lt + _log(leave[r2][c]))
                        into_d[r2].append(ld[r, j, i - 1] + lt + _log(stay[r2][c]))
                for r2 in range(rows):
                    lm[r2, j, i] = _lse(*into_m[r2]) + _log(odds[r2][read[j - 1], c])
                    ld[r2, j, i] = _lse(*into_d[r2])
            for r in range(rows):
                li[r, j, i] = _lse(
                    _lse(lm[r, j - 1, i], ld[r, j - 1, i]) + _log(open_ins),
                    li[r, j - 1, i] + _log(extend_ins),
                )
    ends = [
        _lse(lm[r, m, i], ld[r, m, i], li[r, m, i]) for r in range(rows) for i in range(1, n + 1)
    ]
    if open_hi:
        ends += [
            _lse(lm[r, j, n], ld[r, j, n], li[r, j, n]) + (m - j) * _log(overhang)
            for r in range(rows)
            for j in range(1, m)
        ]
    log_z = _lse(*ends) if ends else ninf
    bm = np.full((rows, m + 2, n + 2), ninf)
    bd = np.full((rows, m + 2, n + 2), ninf)
    bi = np.full((rows, m + 2, n + 2), ninf)
    for j in range(m, 0, -1):
        for i in range(n, -1, -1):
            if not first[j] <= i <= last[j]:
                continue
            end = ninf
            if j == m and i >= 1:
                end = 0.0
            elif open_hi and i == n and j < m:
                end = (m - j) * _log(overhang)
            for r in range(rows):
                from_m, from_d, from_i = [end], [end], [end]
                if j < m:
                    into_i = bi[r, j + 1, i] + _log(open_ins)
                    from_m.append(into_i)
                    from_d.append(into_i)
                    from_i.append(bi[r, j + 1, i] + _log(extend_ins))
                if i < n:
                    for r2, lt in moves(r):
                        diag = bm[r2, j + 1, i + 1] + _log(odds[r2][read[j], i]) if j < m else ninf
                        skip = bd[r2, j, i + 1]
                        from_m += [lt + _log(keep[r2][i]) + diag, lt + _log(leave[r2][i]) + skip]
                        from_d += [lt + _log(enter[r2][i]) + diag, lt + _log(stay[r2][i]) + skip]
                        from_i.append(lt + _log(keep[r2][i]) + diag)
                bm[r, j, i] = _lse(*from_m)
                bd[r, j, i] = _lse(*from_d)
                bi[r, j, i] = _lse(*from_i)
    post = np.zeros((m + 1, n + 1))
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            v = _lse(*(lm[r, j, i] + bm[r, j, i] for r in range(rows)))
            if v > ninf:
                post[j, i] = math.exp(v - log_z)
    return (post, log_z) if with_log_z else post


def papara_refine_row_window(odds, profile, rows, row_odds, weights, lo, hi, mix, profile_weight):
    """The components of one read's window ``[lo, hi)`` for
    :func:`papara_refine_rows_posteriors`:
    ``(odds, occupied, keep, leave, enter, stay, weights)``.

    ``odds`` (codes, n) and ``profile = (occupied, keep, leave, enter, stay)`` are the edge's
    emissions and chain over all columns, ``rows`` (R, n) True where a reference row has a
    residue, ``row_odds`` (R, codes, n) or None the rows' own emissions (None: the edge's),
    ``weights`` the rows' shares. A row's chain goes where the row goes (into a column where
    it has a residue, past one where it has a gap), mixed with the profile's as
    ``(1 - mix) * row + mix * profile``. Without ``row_odds``, rows with the same gaps in
    the window are one component (their weights summed: the same model, fewer components).
    With ``profile_weight`` > 0 the edge's own chain is one more component, of that weight
    (the others scaled to the rest).
    """
    window = rows[:, lo:hi]
    if row_odds is None:
        unique, inverse = np.unique(window, axis=0, return_inverse=True)
        merged = np.zeros(len(unique))
        np.add.at(merged, inverse.ravel(), weights)
        emit = np.broadcast_to(odds[None, :, lo:hi], (len(unique), odds.shape[0], hi - lo))
    else:
        unique, merged, emit = window, np.asarray(weights, dtype=np.float64), row_odds[:, :, lo:hi]
    res = unique.astype(np.float64)
    occupied, keep, leave, enter, stay = (np.asarray(p)[lo:hi][None, :] for p in profile)
    parts = [
        emit,
        (1.0 - mix) * res + mix * occupied,
        (1.0 - mix) * res + mix * keep,
        (1.0 - mix) * (1.0 - res) + mix * leave,
        (1.0 - mix) * res + mix * enter,
        (1.0 - mix) * (1.0 - res) + mix * stay,
    ]
    if profile_weight > 0.0:
        base = (odds[None, :, lo:hi], occupied, keep, leave, enter, stay)
        parts = [np.concatenate([part, b]) for part, b in zip(parts, base, strict=True)]
        merged = np.concatenate([merged * (1.0 - profile_weight), [profile_weight]])
    return (*(np.ascontiguousarray(p) for p in parts), merged)


def papara_refine_rows(
    table,
    read,
    band,
    open_ins,
    extend_ins,
    overhang,
    theta,
    mix,
    jump,
    profile_weight,
    blend=0.0,
    insert=0.0,
) -> str:
    """One read's second-pass alignment under the row-mixture model (``R`` outside the
    window): ``table = (odds, occupied, keep, leave, enter, stay, rows, row_odds, weights)``
    of its edge, :func:`papara_refine_row_window`, :func:`papara_refine_rows_posteriors`
    (with ``blend`` > 0 mixed with :func:`papara_refine_posteriors`' of the edge's chain as
    ``(1 - blend) * rows' + blend * chain's``), then :func:`papara_refine_decode` with
    character j's threshold ``theta + insert * (1 - its posteriors' sum)``: its posterior of
    being in no column (with ``insert`` = 1 the alignment with the most characters expected
    right, inserted ones included, where ``theta`` = 0)."""
    odds, profile, rows, row_odds, weights = table[0], table[1:6], *table[6:]
    n_total = len(profile[0])
    lo, hi, first, last = band
    window = papara_refine_row_window(
        odds, profile, rows, row_odds, weights, lo, hi, mix, profile_weight
    )
    post = papara_refine_rows_posteriors(
        *window, jump, read, lo, hi, first, last, open_ins, extend_ins, overhang, lo == 0,
        hi == n_total,
    )  # fmt: skip
    if blend > 0.0:
        chain = papara_refine_posteriors(
            odds, *profile, read, lo, hi, first, last, open_ins, extend_ins, overhang, lo == 0,
            hi == n_total,
        )  # fmt: skip
        post = (1.0 - blend) * post + blend * chain
    cut = theta + insert * np.maximum(0.0, 1.0 - post.sum(axis=1))
    cut[0] = theta
    return "R" * lo + papara_refine_decode(post, cut) + "R" * (n_total - hi)


def papara_refine_rows_log_z(
    table, read, band, open_ins, extend_ins, overhang, mix, jump, profile_weight
) -> float:
    """One read's log likelihood under the row-mixture model of ``table`` (as
    :func:`papara_refine_rows` takes it) over its band ``(lo, hi, first, last)``: log Z of
    :func:`papara_refine_rows_posteriors`."""
    odds, profile, rows, row_odds, weights = table[0], table[1:6], *table[6:]
    n_total = len(profile[0])
    lo, hi, first, last = band
    window = papara_refine_row_window(
        odds, profile, rows, row_odds, weights, lo, hi, mix, profile_weight
    )
    _, log_z = papara_refine_rows_posteriors(
        *window, jump, read, lo, hi, first, last, open_ins, extend_ins, overhang, lo == 0,
        hi == n_total, with_log_z=True,
    )  # fmt: skip
    return log_z


def papara_refine_tree_frequencies(
    tree, tips, edge, rates, prior, background, pendant, transition_share=None
) -> np.ndarray:
    """``(n, K)``: the residue frequencies of a read placed at the middle of ``edge`` under the
    tree model of :class:`dpalign.papara.refine.TreeFrequencies`, by summing over every
    assignment of states to the inner nodes and to the placement point (tiny trees only).

    ``tips`` maps each tip node to its ``(n, K)`` state sets (1 where the row may hold that
    residue; all ones for a gap), ``rates`` and ``prior`` are the rate categories and their
    shares, ``background`` the prior of the state at the point (and, for protein, what a
    substitution draws), ``pendant`` the read's branch. DNA (K = 4, residues A C G T) when
    ``transition_share`` is given: a substitution is a transition with that chance, else one
    of the two transversions; protein otherwise. Transition matrices by :func:`_expm`.
    A column of zero likelihood (rows no path of the model explains) gives the background.
    """
    import itertools

    expm = _expm
    k = len(background)
    if transition_share is not None:
        q = np.full((k, k), (1.0 - transition_share) / 2)
        for a, b in ((0, 2), (2, 0), (1, 3), (3, 1)):
            q[a, b] = transition_share
        np.fill_diagonal(q, -1.0)
    else:
        q = np.tile(np.asarray(background, dtype=np.float64), (k, 1)) - np.eye(k)
    e = tree.edges[edge]
    point = len(tree.names)  # a node of its own in the middle of the edge
    links = {node: [(nb, z) for nb, z in tree.neighbors[node]] for node in range(point)}
    links[e.u] = [(nb, z) if nb != e.v else (point, e.length / 2) for nb, z in links[e.u]]
    links[e.v] = [(nb, z) if nb != e.u else (point, e.length / 2) for nb, z in links[e.v]]
    links[point] = [(e.u, e.length / 2), (e.v, e.length / 2)]
    branches, order, seen = [], [point], {point}  # (parent, child, length), top down
    for node in order:
        for nb, z in links[node]:
            if nb not in seen:
                seen.add(nb)
                order.append(nb)
                branches.append((node, nb, z))
    inner = [node for node in order if node == point or not tree.is_tip(node)]
    n = next(iter(tips.values())).shape[0]
    joint = np.zeros((len(rates), n, k))  # P(data, read residue x) per rate
    for c, rate in enumerate(rates):
        pend = expm(q * rate * pendant)
        probs = {(a, b): expm(q * rate * z) for a, b, z in branches}
        for states in itertools.product(range(k), repeat=len(inner)):
            at = dict(zip(inner, states, strict=True))
            weight = np.full(n, float(background[at[point]]))
            for a, b, _ in branches:
                p = probs[(a, b)]
                if b in at:
                    weight = weight * p[at[a], at[b]]
                else:
                    weight = weight * (tips[b] @ p[at[a]])
            joint[c] += weight[:, None] * pend[at[point]][None, :]
    total = np.einsum("c,cnk->nk", np.asarray(prior, dtype=np.float64), joint)
    norm = total.sum(axis=1, keepdims=True)
    return np.where(norm > 0, total / np.where(norm > 0, norm, 1.0), np.asarray(background))


def _expm(a: np.ndarray) -> np.ndarray:
    """The matrix exponential by scaling and squaring of a Taylor series: ``a`` halved until
    its norm is at most 1/2, 30 terms (each below 2^-30 / 30! of the first), squared back."""
    a = np.asarray(a, dtype=np.float64)
    norm = float(np.abs(a).sum(axis=1).max()) if a.size else 0.0
    halvings = max(0, int(np.ceil(np.log2(norm / 0.5)))) if norm > 0.5 else 0
    a = a / 2.0**halvings
    total, term = np.eye(len(a)), np.eye(len(a))
    for k in range(1, 31):
        term = term @ a / k
        total = total + term
    for _ in range(halvings):
        total = total @ total
    return total


def papara_refine_decode(post: np.ndarray, theta) -> str:
    """The alignment (``M``/``R``/``I`` over the window) that maximises the sum of
    ``posterior - theta`` over its aligned pairs (``theta`` one value, or one per row of
    ``post``); ties go to M, then I, then R."""
    m, n = post.shape[0] - 1, post.shape[1] - 1
    cut = np.broadcast_to(np.asarray(theta, dtype=np.float64), (m + 1,))
    value = np.zeros((m + 1, n + 1))
    move = np.zeros((m + 1, n + 1), dtype=np.uint8)
    for j in range(m + 1):
        for i in range(n + 1):
            if j == 0 and i == 0:
                continue
            options = []
            if j > 0 and i > 0 and post[j, i] > cut[j]:
                options.append((value[j - 1, i - 1] + post[j, i] - cut[j], 0))
            if j > 0:
                options.append((value[j - 1, i], 2))
            if i > 0:
                options.append((value[j, i - 1], 1))
            best = max(v for v, _ in options)
            value[j, i], move[j, i] = next((v, k) for v, k in options if v == best)
    ops = []
    j, i = m, n
    while j > 0 or i > 0:
        k = int(move[j, i]) if (j > 0 and i > 0) else (2 if j > 0 else 1)
        ops.append("MRI"[k])
        j, i = (j - 1, i - 1) if k == 0 else ((j - 1, i) if k == 2 else (j, i - 1))
    return "".join(reversed(ops))


def papara_refine(
    odds, occupied, keep, leave, enter, stay, read, band, open_ins, extend_ins, overhang, theta
) -> str:
    """One read's second-pass alignment over all reference columns (``R`` outside the window
    ``lo..hi-1`` of ``band = (lo, hi, first, last)``): :func:`papara_refine_posteriors`, then
    :func:`papara_refine_decode`."""
    n_total = len(occupied)
    lo, hi, first, last = band
    post = papara_refine_posteriors(
        odds, occupied, keep, leave, enter, stay, read, lo, hi, first, last, open_ins,
        extend_ins, overhang, lo == 0, hi == n_total,
    )  # fmt: skip
    return "R" * lo + papara_refine_decode(post, theta) + "R" * (n_total - hi)
