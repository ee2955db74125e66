"""Striped (Farrar) local alignment score for single pairs, int16 lanes.

The inter-sequence kernels recompute the pairs whose int8 pass saturated. When only a few
pairs of a block saturated (a read against the one target it came from), an inter-sequence
pass would fill 32 lanes for one useful pair; this kernel puts one pair's cells in the lanes
instead: the longer sequence is striped over 32 int16 lanes (position ``s + l * seg`` in lane
l of segment s), the other is the outer loop, and vertical gaps that cross a segment boundary
are fixed up by the "lazy F" loop (Farrar 2007, as in parasail's ``sw_striped``).

The lazy-F loop leaves the horizontal gap state alone: a vertical gap followed directly by a
horizontal one costs the same as the reverse order, which the main loop already scores, so
the optimum is unchanged. It stops once the incoming vertical gap, extended by one row, cannot
beat the H the main loop already sent down (``H_old - o - e``) in any lane; comparing with the
corrected H instead stops too early for linear gaps (o = 0). The scores are exactly the
reference's (tests compare them).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .vectors import vadds, vany, vgt, vhmax, vload, vmax, vshift, vsplat, vstore, vsubs

LANES16 = 32
NEG16 = -(2**15)
TOP16 = 2**15 - 1


@njit(nogil=True, cache=True)
def local_score_striped16(a, b, matrix, o, e):
    """Smith-Waterman score of ``a`` (striped) against ``b`` in int16 lanes.

    Returns ``(score, saturated)``; a saturated score (the int16 maximum was reached) must be
    recomputed wider. ``matrix`` is the int64 substitution matrix; ``o + e`` must fit int16.
    """
    V = LANES16
    m, n = a.shape[0], b.shape[0]
    seg = (m + V - 1) // V
    n_sym = matrix.shape[0]
    slot = np.full(n_sym, -1, dtype=np.int64)
    used = 0
    for j in range(n):
        if slot[b[j]] < 0:
            slot[b[j]] = used
            used += 1
    prof = np.empty(max(used, 1) * seg * V, dtype=np.int16)
    for c in range(n_sym):
        u = slot[c]
        if u < 0:
            continue
        for s in range(seg):
            for lane in range(V):
                i = s + lane * seg
                prof[(u * seg + s) * V + lane] = matrix[a[i], c] if i < m else NEG16
    h_store = np.zeros(seg * V, dtype=np.int16)
    h_load = np.zeros(seg * V, dtype=np.int16)
    e_arr = np.full(seg * V, NEG16, dtype=np.int16)
    zero = vsplat(h_store, 0)
    vneg = vsplat(h_store, NEG16)
    voe = vsplat(h_store, o + e)
    ve = vsplat(h_store, e)
    best = zero
    for j in range(n):
        base = slot[b[j]] * seg * V
        vf = vneg
        vh = vshift(vload(h_store, (seg - 1) * V), zero, 1)
        h_store, h_load = h_load, h_store
        for s in range(seg):
            vh = vadds(vh, vload(prof, base + s * V))
            ve_s = vload(e_arr, s * V)
            vh = vmax(vmax(vmax(vh, ve_s), vf), zero)
            best = vmax(best, vh)
            vstore(h_store, s * V, vh)
            vho = vsubs(vh, voe)
            vstore(e_arr, s * V, vmax(vsubs(ve_s, ve), vho))
            vf = vmax(vsubs(vf, ve), vho)
            vh = vload(h_load, s * V)
        # Lazy F: vertical gaps entering a lane from the lane below its segment boundary.
        done = False
        for _ in range(V):
            vf = vshift(vf, vneg, 1)
            for s in range(seg):
                vh_old = vload(h_store, s * V)
                vh = vmax(vh_old, vf)
                vstore(h_store, s * V, vh)
                best = vmax(best, vh)
                vf = vsubs(vf, ve)
                # The main loop already sent H_old - (o + e) down; when the incoming gap,
                # extended once, cannot beat that in any lane, nothing below changes.
                # (Comparing with the corrected H instead is wrong for linear gaps.)
                if not vany(vgt(vf, vsubs(vh_old, voe))):
                    done = True
                    break
            if done:
                break
    score = vhmax(best)
    return score, score >= TOP16


def local_score(a: np.ndarray, b: np.ndarray, matrix: np.ndarray, o: int, e: int):
    """Striped int16 local score of one pair, the longer sequence striped.

    ``matrix`` is int64; scores are symmetric under swapping a and b with the matrix
    transposed. Returns ``(score, saturated)``.
    """
    if len(a) == 0 or len(b) == 0:
        return 0, False
    if len(b) > len(a):
        a, b, matrix = b, a, np.ascontiguousarray(matrix.T)
    score, saturated = local_score_striped16(a, b, matrix, o, e)
    return int(score), bool(saturated)
