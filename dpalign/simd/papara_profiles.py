"""PaPaRa's edge profiles (spec §4) on the CPU cores: every directed subtree, column by column.

The driver (:mod:`dpalign.papara.profiles`) turns the tree into a schedule of combines in
bottom-up order; this kernel runs the schedule over a range of columns, so that threads split
the columns and each thread's working set (every subtree's values for a few dozen columns)
stays in cache. The arithmetic is the driver's NumPy form, operation for operation (no fast
math), so the likelihoods and therefore the gap flags are bit-identical.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..config import cpu_threads
from . import load_numba_target
from .threads import map_threads

# Numba's CPU target without SciPy's BLAS probe, before this module's kernels load
load_numba_target()

_TINY = 2.0**-256
_SCALE = 2.0**256
#: Columns a thread runs the whole schedule over at a time.
CHUNK = 64


@njit(nogil=True, cache=True)
def _run_schedule(tips, gap_state, ops, trans, n_slots, lo, hi, cgap, out_states, out_flags):
    """Run the combines ``ops`` over columns ``lo:hi``.

    ``tips`` (T, n) tip states; slots 0..T-1 are the tips, T.. the combined subtrees.
    ``ops[c]`` = (dst, a, b, a_is_tip_or_b_is_tip): dst >= 0 a slot, dst < 0 edge ``-1 - dst``
    of the outputs. ``trans[c]`` = the four transition probabilities of a's branch, then b's.
    """
    n_tips = tips.shape[0]
    width = hi - lo
    state = np.empty((n_slots, width), dtype=tips.dtype)
    lik0 = np.empty((n_slots, width), dtype=np.float64)
    lik1 = np.empty((n_slots, width), dtype=np.float64)
    aux = np.empty((n_slots, width), dtype=np.uint8)
    for t in range(n_tips):
        for x in range(width):
            s = tips[t, lo + x]
            gap = s == gap_state
            state[t, x] = s
            lik0[t, x] = 0.0 if gap else 1.0
            lik1[t, x] = 1.0 if gap else 0.0
            aux[t, x] = 1 if gap else 0
    for c in range(ops.shape[0]):
        dst, a, b, tip = ops[c, 0], ops[c, 1], ops[c, 2], ops[c, 3]
        pa0, pa1, pa2, pa3 = trans[c, 0], trans[c, 1], trans[c, 2], trans[c, 3]
        pb0, pb1, pb2, pb3 = trans[c, 4], trans[c, 5], trans[c, 6], trans[c, 7]
        for x in range(width):
            sa, sb = state[a, x], state[b, x]
            s = sa & sb
            if s == 0:
                s = sa | sb
            a0, a1, b0, b1 = lik0[a, x], lik1[a, x], lik0[b, x], lik1[b, x]
            l0 = (pa0 * a0 + pa1 * a1) * (pb0 * b0 + pb1 * b1)
            l1 = (pa2 * a0 + pa3 * a1) * (pb2 * b0 + pb3 * b1)
            if l0 < _TINY and l1 < _TINY:
                l0 = l0 * _SCALE
                l1 = l1 * _SCALE
            if tip:
                xa, xb = (aux[a, x] & 1) != 0, (aux[b, x] & 1) != 0
            else:
                xa, xb = aux[a, x] == 1, aux[b, x] == 1
            v = 1 if (xa and xb) else (3 if xa != xb else 0)
            if dst >= 0:
                state[dst, x] = s
                lik0[dst, x] = l0
                lik1[dst, x] = l1
                aux[dst, x] = v
            else:
                e = -1 - dst
                out_states[e, lo + x] = s
                out_flags[e, lo + x] = (1 if v == 1 else 0) if cgap else (1 if l0 < l1 else 0)


@njit(nogil=True, cache=True)
def _run_columns(tips, gap_state, ops, trans, n_slots, lo, hi, cgap, out_states, out_flags):
    """:func:`_run_schedule` over columns ``lo:hi``, :data:`CHUNK` columns at a time (one
    call per thread: each call from Python takes the interpreter lock twice, and beside a
    thread that holds it, as pyopencl's import does, each take waits a switch interval)."""
    for start in range(lo, hi, CHUNK):
        stop = min(start + CHUNK, hi)
        _run_schedule(
            tips, gap_state, ops, trans, n_slots, start, stop, cgap, out_states, out_flags
        )


def run_profile_schedule(
    tips: np.ndarray,
    gap_state: int,
    ops: np.ndarray,
    trans: np.ndarray,
    n_edges: int,
    cgap: bool,
    threads: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The (E, n) states and uint8 gap flags of a combine schedule (see :func:`_run_schedule`),
    the columns split over ``threads`` threads (default: one per core)."""
    tips = np.ascontiguousarray(tips)
    n_cols = tips.shape[1]
    n_slots = tips.shape[0] + int((ops[:, 0] >= 0).sum())
    states = np.zeros((n_edges, n_cols), dtype=tips.dtype)
    flags = np.zeros((n_edges, n_cols), dtype=np.uint8)
    ops = np.ascontiguousarray(ops, dtype=np.int64)
    trans = np.ascontiguousarray(trans, dtype=np.float64)
    gap = tips.dtype.type(gap_state)

    # the columns' chunks in one contiguous range per thread (every column costs the same)
    n_chunks = -(-n_cols // CHUNK)
    workers = max(1, min(cpu_threads(threads), n_chunks))
    cuts = [min(n_cols, CHUNK * (n_chunks * k // workers)) for k in range(workers + 1)]

    def run(k: int) -> None:
        _run_columns(tips, gap, ops, trans, n_slots, cuts[k], cuts[k + 1], cgap, states, flags)

    map_threads(run, range(workers), workers)
    return states, flags
