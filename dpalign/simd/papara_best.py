"""The best, second-best and tied edges of every read from a block of PaPaRa scores.

:func:`dpalign.papara.placement.place` folds each block's (reads x lanes) scores into running
per-read values; in NumPy that is a dozen passes over the whole matrix on one core (0.4 s of a
16,040-read PRANK run on the H100 host, ~25 s of a million reads, all of it with the GPU
idle). Here it is one pass per row, rows split over threads, with the same rules (ties go to
the lower edge; the runner-up is the next tied edge first).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .. import config
from . import load_numba_target
from .threads import map_threads

# Numba's CPU target without SciPy's BLAS probe, before this module's kernels load
load_numba_target()

_LOW = np.iinfo(np.int64).min


@njit(nogil=True, cache=True)
def _fold_rows(scores, width, lanes, ids, sign, lo, hi, best, edge, wid, second, second_edge, ties):
    low = np.int64(-9223372036854775807 - 1)
    for r in range(lo, hi):
        v1, j1, count, v2, j2 = low, -1, 0, low, -1
        for j in range(lanes.size):
            s = np.int64(sign) * np.int64(scores[r, lanes[j]])
            if s > v1:
                v2, j2 = v1, j1
                v1, j1, count = s, j, 1
            elif s == v1:
                count += 1
                if s > v2:
                    v2, j2 = s, j
            elif s > v2:
                v2, j2 = s, j
        edge1 = ids[j1]
        edge2 = ids[j2] if v2 > low else -1
        run_best, run_second = best[r], second[r]
        better = v1 > run_best
        if better:
            if run_best >= v2:
                second[r], second_edge[r] = run_best, edge[r]
            else:
                second[r], second_edge[r] = v2, edge2
            ties[r] = count
            best[r], edge[r] = v1, edge1
            wid[r] = width[r, lanes[j1]]
        else:
            if v1 > run_second:
                second[r], second_edge[r] = v1, edge1
            if v1 == run_best:
                ties[r] += count


def fold_block(
    scores, width, lanes, ids, sign, best, edge, wid, second, second_edge, ties, threads=None
) -> None:
    """Fold one block's scores (reads x lanes; ``lanes`` the valid ones, ``ids`` their edge
    ids) into the running per-read arrays, in place, rows over ``threads`` threads."""
    n = scores.shape[0]
    if n == 0 or lanes.size == 0:
        return
    lanes = np.ascontiguousarray(lanes, dtype=np.int64)
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    step = max(1024, -(-n // (4 * config.cpu_threads(threads))))
    starts = range(0, n, step)

    def run(lo: int) -> None:
        _fold_rows(
            scores,
            width,
            lanes,
            ids,
            sign,
            lo,
            min(lo + step, n),
            best,
            edge,
            wid,
            second,
            second_edge,
            ties,
        )

    map_threads(run, starts, threads)
