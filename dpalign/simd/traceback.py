"""Traceback for single pairs: a full direction matrix, the reference's tie rules, a CIGAR.

The fill is the scalar recurrence of :mod:`dpalign.reference` in int64 with two rolling rows;
each cell keeps one byte saying how it was reached, so the path is read back without the
score matrices. The bytes encode exactly the reference's decisions (its docstring is the
specification), so alignments are identical, not merely equally good:

* bits 0-1, how H was reached, in the reference's order of preference: 1 diagonal (H equals
  the diagonal candidate), 2 a gap in b (H equals D), 3 a gap in a (otherwise); 0 when local
  alignment stops here (H is 0);
* bit 2: D was opened here (``D == H[i-1][j] - o - e``), so the path leaves D;
* bit 3: I was opened here (``I == H[i][j-1] - o - e``).

The direction matrix takes one byte per cell, so pairs are limited to
:data:`MAX_TRACEBACK_CELLS` cells ``(m + 1) * (n + 1)``; longer pairs need a linear-memory
traceback (not implemented yet).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import OptionError
from . import load_numba_target
from .pairwise import NEG64, row0

# Numba's CPU target without SciPy's BLAS probe, before this module's kernels load
load_numba_target()

#: Largest ``(m + 1) * (n + 1)`` a traceback accepts (one byte per cell: 256 MiB).
MAX_TRACEBACK_CELLS = 2**28

_DIAG, _FROM_D, _FROM_I = 1, 2, 3
_D_OPEN, _I_OPEN = 4, 8
OP_MATCH, OP_MISMATCH, OP_DEL, OP_INS = ord("="), ord("X"), ord("D"), ord("I")


@njit(nogil=True, cache=True)
def _fill(a, b, matrix, o, e, local, ends, bits):
    """Fill the direction matrix; return the end cell ``(score, i, j)`` (reference rules)."""
    m, n = a.shape[0], b.shape[0]
    a_lead, a_trail, b_lead, b_trail = ends[0], ends[1], ends[2], ends[3]
    neg = NEG64
    H, D = row0(n, o, e, local or a_lead)
    best, bi, bj = neg, m, n
    # Row 0 candidates (row-major order: row 0 comes first).
    if local:
        best, bi, bj = 0, 0, 0
    elif m == 0:
        if a_trail:
            for j in range(n + 1):
                if H[j] > best:
                    best, bi, bj = H[j], 0, j
        elif H[n] > best:
            best, bi, bj = H[n], 0, n
    elif b_trail:
        best, bi, bj = H[n], 0, n
    for i in range(1, m + 1):
        diag = H[0]
        H[0] = 0 if (local or b_lead) else -(o + e * i)
        ih = neg
        ai = a[i - 1]
        for j in range(1, n + 1):
            d_open = H[j] - o - e
            d_ext = D[j] - e
            d = max(d_ext, d_open)
            i_open = H[j - 1] - o - e
            i_ext = ih - e
            ih = max(i_ext, i_open)
            dg = diag + matrix[ai, b[j - 1]]
            h = max(dg, d, ih)
            if local and h <= 0:
                h = 0
                code = 0
            elif h == dg:
                code = _DIAG
            elif h == d:
                code = _FROM_D
            else:
                code = _FROM_I
            if d == d_open:
                code |= _D_OPEN
            if ih == i_open:
                code |= _I_OPEN
            bits[i, j] = code
            diag = H[j]
            H[j] = h
            D[j] = d
            if local and h > best:
                best, bi, bj = h, i, j
        if not local:
            if i == m and a_trail:
                for j in range(n + 1):
                    if H[j] > best:
                        best, bi, bj = H[j], i, j
            elif (i == m or b_trail) and H[n] > best:
                best, bi, bj = H[n], i, n
    return best, bi, bj


@njit(nogil=True, cache=True)
def _trace(a, b, bits, local, ends, i, j, ops):
    """Walk back from the end cell; return (i_start, j_start, number of ops written).

    ``ops`` receives the operations in reverse order.
    """
    a_lead, b_lead = ends[0], ends[2]
    k = 0
    state = 0  # 0: H, 1: D (gap in b), 2: I (gap in a)
    while True:
        if state == 0:
            if i == 0 and j == 0:
                break
            if i == 0 or j == 0:
                # on a border: the rest is one gap, free when that sequence's lead is
                if not (local or (a_lead if i == 0 else b_lead)):
                    op = OP_INS if i == 0 else OP_DEL
                    for _ in range(i + j):
                        ops[k] = op
                        k += 1
                    i, j = 0, 0
                break
            code = bits[i, j] & 3
            if code == 0:
                break
            if code == _DIAG:
                ops[k] = OP_MATCH if a[i - 1] == b[j - 1] else OP_MISMATCH
                k += 1
                i -= 1
                j -= 1
            elif code == _FROM_D:
                state = 1
            else:
                state = 2
        else:
            in_d = state == 1
            ops[k] = OP_DEL if in_d else OP_INS
            k += 1
            opened = bits[i, j] & (_D_OPEN if in_d else _I_OPEN)
            if in_d:
                i -= 1
            else:
                j -= 1
            if opened:
                state = 0
    return i, j, k


@njit(nogil=True, cache=True)
def align_pair_kernel(a, b, matrix, o, e, local, ends):
    """Score and trace back one pair.

    Returns ``(score, a_start, a_end, b_start, b_end, ops)`` with ``ops`` a uint8 array of
    ``=``, ``X``, ``D``, ``I`` codes in forward order.
    """
    m, n = a.shape[0], b.shape[0]
    bits = np.zeros((m + 1, n + 1), dtype=np.uint8)
    score, a_end, b_end = _fill(a, b, matrix, o, e, local, ends, bits)
    if local and score == 0:
        return 0, 0, 0, 0, 0, np.zeros(0, dtype=np.uint8)
    ops = np.empty(m + n, dtype=np.uint8)
    a_start, b_start, k = _trace(a, b, bits, local, ends, a_end, b_end, ops)
    return score, a_start, a_end, b_start, b_end, ops[:k][::-1].copy()


def align_pair(a: np.ndarray, b: np.ndarray, scoring, local: bool, ends) -> tuple:
    """Align two encoded sequences; return ``(score, a_start, a_end, b_start, b_end, ops)``.

    ``ops`` is a str of ``=``/``X``/``D``/``I``. Raises :class:`~dpalign.errors.OptionError`
    when the direction matrix would exceed :data:`MAX_TRACEBACK_CELLS`.
    """
    cells = (len(a) + 1) * (len(b) + 1)
    if cells > MAX_TRACEBACK_CELLS:
        raise OptionError(
            f"a {len(a)} x {len(b)} alignment needs {cells:,} traceback cells, more than the "
            f"limit of {MAX_TRACEBACK_CELLS:,} (one byte each); score it with "
            "dpalign.score(), or align shorter pieces (linear-memory traceback for long pairs "
            "is not implemented yet)"
        )
    score, a0, a1, b0, b1, ops = align_pair_kernel(
        np.ascontiguousarray(a, dtype=np.uint8),
        np.ascontiguousarray(b, dtype=np.uint8),
        scoring.matrix.astype(np.int64),
        scoring.gap_open,
        scoring.gap_extend,
        local,
        np.array(ends, dtype=np.bool_),
    )
    return int(score), int(a0), int(a1), int(b0), int(b1), ops.tobytes().decode("ascii")
