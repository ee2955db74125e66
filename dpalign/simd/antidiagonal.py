"""One long pair on every CPU core: blocked tiles run as a wavefront (kernel shape 2).

The DP matrix of a pair (``a`` down the rows, ``b`` across the columns) is cut into tiles of
``tile_rows x tile_cols`` cells. A tile needs only its top boundary row (H and D, plus the
corner H) and its left boundary column (H and I); it produces its bottom row and its right
column. So all tiles of one tile anti-diagonal are independent, and they run concurrently.

CPU schedule (:func:`fill_region`)
----------------------------------
Every worker thread runs :func:`fill_worker`, a Numba ``nogil`` kernel, once per region: there
is no Python in the loop over tiles. A worker takes the uppermost tile row whose next tile is
ready (the tile above it is done: acquire loads of per-row counters published with release
stores) and that no other worker holds (compare-and-swap), and keeps computing that row's
tiles while the next one is ready; then it lets the row go and looks again, spinning with
``pause`` and ``sched_yield`` while nothing is ready. This is the tile-diagonal wavefront
without a barrier per diagonal: workers run one tile apart on neighbouring rows, all busy
except for ``P - 1`` tiles at the start and the end. A row's striped state lives in per-row
arrays (padded so that no two workers write one cache line), so when a worker is held up by
the operating system (a loaded machine) another one carries its row on. Bottom rows pass
between tile rows through a ring of two rows: the writer of a column of slot ``ti % 2`` can
only reach it after every reader of row ``ti - 2`` is done with it, once each tile carries its
top-left corner value over from the tile before it.

Inside a tile the cells of one column are computed with Farrar's striped layout: a query
profile of the tile row's ``a`` segment removes substitution lookups from the inner loop, the
vertical gap (D) is carried down each lane, then across lanes by a max-plus prefix scan over
the lanes and one correction pass down the segments, which stops as soon as the carried D can
no longer raise H (Farrar's "lazy F" loop, bounded to one pass). The striped state of the last
column is exactly the left boundary of the next tile in the row, so it stays in the row's
state arrays between tiles. Lanes are int16 (32 per AVX-512 register) holding values
relative to the H of each tile's top-left corner, which is exact whenever a tile's values lie
within 2^15 of that corner (``longpair.plan_lanes`` checks it from the scoring and tile
shape); otherwise absolute int32 (16 lanes) or int64 (8 lanes). Boundaries and checkpoints are
absolute int32/int64 values. A cell-anti-diagonal layout (one minor diagonal per vector) was
not used on the CPU: it needs a gather for the substitution scores on every step.

Checkpoints for traceback
-------------------------
:func:`fill_region` can keep the bottom rows of chosen tile rows and the right columns of chosen
tile columns (``row_slot`` / ``col_slot``). These cut the region into blocks whose boundaries
are known, so any block can be recomputed alone; ``dpalign.longpair`` recomputes only the blocks
on the traceback path, recursively, down to blocks small enough for :func:`trace_leaf`
(one direction byte per cell, decided on exact values by the reference's rules). Memory stays
near-linear in the sequence lengths.

On a GPU (planned, same tiling)
-------------------------------
One work-group per tile, the tile's boundary row and column in local memory, the work-items
computing the cells of one minor (cell) anti-diagonal of the tile in parallel, a barrier per
minor diagonal; the host (or a persistent kernel) launches the tiles of one tile-diagonal
together. The boundary rows/columns, checkpoint slots and the traceback recursion are the same
as here, so the GPU kernel only replaces :func:`fill_worker`.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from ..contract import RegionFill
from .antidiagonal_rows import B_D, B_D_OPEN, B_DIAG, B_I_OPEN, B_ZERO, rows1, rows4
from .vectors import (
    compare_swap,
    load_acquire,
    relax,
    store_release,
    vadd,
    vadds,
    vany,
    vgt,
    vhmax,
    vlane,
    vload,
    vmax,
    vselect,
    vshift,
    vshift_in,
    vsplat,
    vstore,
    vsub,
    vsubs,
)

STATE_H, STATE_D, STATE_I = 0, 1, 2
OP_MATCH, OP_MISMATCH, OP_DEL, OP_INS = ord("="), ord("X"), ord("D"), ord("I")

# layout of the int64 ``params`` array of fill_worker
(
    P_OPEN,
    P_EXTEND,
    P_LOCAL,
    P_TILE_ROWS,
    P_TILE_COLS,
    P_NEG,
    P_LANES,
    P_LANE_MAX,
    P_NEG_STORE,
    P_RELATIVE,
) = range(10)
N_PARAMS = 10
# rows of a tile row's striped state: H, E (I of the next column)
S_H, S_E = range(2)
# rows of a worker's tile scratch: I of the tile's last column (for the column checkpoint),
# per-row maximum H in the tile and its first column (local mode)
T_ISAVE, T_MAXH, T_MAXJ = range(3)
# per tile row scalars: H of the next tile's top-left corner, the lanes' base, the threshold
# below which a column cannot hold the local end cell
V_CORNER, V_BASE, V_THR = range(3)


@njit(inline="always")
def _clamp(x, lo, hi):
    return min(max(x, lo), hi)


@njit(inline="always")
def _striped_step(pv_h, pv_e, prof, pbase, off, vh, vf, vc, v_col):
    """One segment of a striped column: H, next column's E, D carried down; the next diagonal.

    ``vh`` holds H of the previous column one segment up (the diagonal), ``vf`` the D entering
    this segment, ``v_col`` the column's running maximum of H (kept in local mode only).
    Returns the next segment's diagonal, the D leaving, and the running maximum.
    """
    v_e, v_oe, v_zero, local = vc
    ve = vload(pv_e, off)
    vh = vmax(vmax(vadd(vh, vload(prof, pbase + off)), ve), vf)
    if local:
        vh = vmax(vh, v_zero)
        v_col = vmax(v_col, vh)
    v_next = vload(pv_h, off)
    vstore(pv_h, off, vh)
    vh_open = vsub(vh, v_oe)
    vstore(pv_e, off, vmax(vsub(ve, v_e), vh_open))
    return v_next, vmax(vsub(vf, v_e), vh_open), v_col


@njit(inline="always")
def _start_row(ti, a, matrix, params, left, prof, state, row_vars, row_best, thr):
    """Profile and striped left boundary of tile row ``ti`` (row r of the tile is lane
    ``r // seg`` of segment ``r % seg``)."""
    o, e = params[P_OPEN], params[P_EXTEND]
    th, neg, lanes = params[P_TILE_ROWS], params[P_NEG], params[P_LANES]
    lane_max = params[P_LANE_MAX]
    r0 = ti * th
    ht = min(th, a.size - r0)
    seg = (ht + lanes - 1) // lanes
    base = left[0, r0] if params[P_RELATIVE] != 0 else 0
    for c in range(matrix.shape[0]):
        for t in range(seg):
            for k in range(lanes):
                r = k * seg + t
                prof[(c * seg + t) * lanes + k] = matrix[a[r0 + r], c] if r < ht else 0
    pv_h, pv_e = state[S_H], state[S_E]
    for t in range(seg):
        for k in range(lanes):
            r = k * seg + t
            x = t * lanes + k
            if r < ht:
                hv, iv = left[0, r0 + 1 + r], left[1, r0 + 1 + r]
                pv_h[x] = _clamp(hv - base, neg, lane_max)
                pv_e[x] = _clamp(max(iv - e, hv - o - e) - base, neg, lane_max)
            else:
                pv_h[x] = neg
                pv_e[x] = neg
    if params[P_LOCAL] != 0:
        for r in range(ht):
            row_best[0, r] = -1
            row_best[1, r] = 0
    row_vars[V_CORNER] = left[0, r0]
    row_vars[V_BASE] = base
    row_vars[V_THR] = thr


@njit(nogil=True, cache=True)
def fill_worker(tid, seqs, matrix, params, edges, ring, stores, sync, best, scratch):
    """Fill tiles of a region until none is left (one worker thread; any number may run).

    A worker takes the uppermost tile row whose next tile is ready (the tile above it done)
    and that no other worker holds, and computes its tiles while the next one is ready; then
    it lets the row go and chooses again. A tile row's striped state lives in ``scratch``, not
    in the worker, so a row moves to whichever worker is free when another one is held up
    (by the operating system, on a loaded machine), and rows stay put otherwise.

    Parameters
    ----------
    tid : int
        This worker (its row in ``best`` and in the tile scratch).
    seqs : (ndarray, ndarray)
        ``a`` (region rows, uint8 codes, length h) and ``b`` (region columns, length w).
    matrix : ndarray (K, K)
        Substitution scores in the lane dtype (int16, int32 or int64): it chooses the vector
        type (32, 16 or 8 lanes).
    params : ndarray int64
        See the ``P_*`` indices. With ``P_RELATIVE`` set, lanes hold values relative to the
        H of each tile's top-left corner (16-bit lanes; the caller checked that a tile's
        values fit), otherwise absolute values.
    edges : (ndarray (2, w+1), ndarray (2, h+1))
        Top boundary (H, D of row 0) and left boundary (H, I of column 0) in the store dtype
        (int32 or int64); ``[0, 0]`` of both is the corner H.
    ring : ndarray (2, 2, w+1)
        Bottom rows (H, D) of tile rows, slot ``ti % 2`` (the writer of a column of slot
        ``ti % 2`` comes after every reader of the previous row in it); on return slot
        ``(nR - 1) % 2`` holds the region's last row.
    stores : (ndarray (R, 2, w+1), int64 (nR,), ndarray (C, 2, h+1), int64 (nC,))
        Checkpoints: bottom rows of tile rows with ``row_slot[ti] >= 0`` and right columns
        (H, I) of tile columns with ``col_slot[tj] >= 0``. Row 0 of each stored column must be
        preset by the caller (it lies on the top boundary).
    sync : (int64 (nR,), int64 (nR,))
        Zeros on entry: tiles finished per tile row, and whether a worker holds the row.
    best : ndarray int64 (P, 3)
        Local mode: the first maximum in row-major order (H, i, j) of the rows this worker
        finished; preset.
    scratch : (ndarray (nR, K * seg * lanes), ndarray (nR, 2, seg * lanes), ndarray
               (P, 3, seg * lanes), int64 (nR, 2, th) or (1, 2, 1), int64 (nR, 3))
        Per tile row: profile, striped state (``S_*``), per-row maxima (local mode) and
        scalars (``V_*``); per worker: tile scratch (``T_*``); seg = ceil(tile_rows / lanes).
    """
    a, b = seqs
    done, held = sync
    prof_all, state_all, tile_all, row_best_all, row_vars_all = scratch
    local = params[P_LOCAL] != 0
    th, tw = params[P_TILE_ROWS], params[P_TILE_COLS]
    n_rows, n_cols = (a.size + th - 1) // th, (b.size + tw - 1) // tw
    lowest, spins, ti, tj = 0, 0, -1, 0
    while True:
        if ti < 0:
            # the uppermost ready row (rows finish in order: no row below an unstarted one is
            # ready)
            while lowest < n_rows and load_acquire(done, lowest) >= n_cols:
                lowest += 1
            if lowest == n_rows:
                return
            for row in range(lowest, n_rows):
                tj = load_acquire(done, row)
                ready = row == 0 or load_acquire(done, row - 1) > tj
                if tj < n_cols and ready and compare_swap(held, row, 0, 1):
                    tj = load_acquire(done, row)
                    if tj < n_cols and (row == 0 or load_acquire(done, row - 1) > tj):
                        ti = row
                        break
                    store_release(held, row, 0)
                if tj == 0 and not ready:
                    break
            if ti < 0:
                spins += 1
                relax(spins)
                continue
            spins = 0
        row_best = row_best_all[ti] if local else row_best_all[0]
        if tj == 0:
            _start_row(
                ti,
                a,
                matrix,
                params,
                edges[1],
                prof_all[ti],
                state_all[ti],
                row_vars_all[ti],
                row_best,
                best[tid, 0],
            )
        _fill_tile(
            ti,
            tj,
            seqs,
            matrix,
            params,
            edges,
            ring,
            stores,
            (prof_all[ti], state_all[ti], tile_all[tid], row_best, row_vars_all[ti]),
        )
        if local and tj == n_cols - 1:
            r0 = ti * th
            for r in range(min(th, a.size - r0)):
                v, i, j = row_best[0, r], r0 + 1 + r, row_best[1, r]
                if v > best[tid, 0] or (v == best[tid, 0] and v > 0 and i < best[tid, 1]):
                    best[tid, 0], best[tid, 1], best[tid, 2] = v, i, j
        tj += 1
        store_release(done, ti, tj)
        # keep the row while its next tile is ready: its state stays in this core's caches
        if tj == n_cols or (ti > 0 and load_acquire(done, ti - 1) <= tj):
            store_release(held, ti, 0)
            ti = -1


@njit(inline="always")
def _fill_tile(ti, tj, seqs, matrix, params, edges, ring, stores, scratch):
    """Compute tile (ti, tj) from its tile row's state (see :func:`fill_worker`)."""
    a, b = seqs
    top, left = edges
    row_store, row_slot, col_store, col_slot = stores
    prof, state, tile, row_best, row_vars = scratch
    o, e = params[P_OPEN], params[P_EXTEND]
    local = params[P_LOCAL] != 0
    th, tw, neg, lanes = params[P_TILE_ROWS], params[P_TILE_COLS], params[P_NEG], params[P_LANES]
    lane_max, neg_store = params[P_LANE_MAX], params[P_NEG_STORE]
    relative = params[P_RELATIVE] != 0
    oe = o + e
    pv_h, pv_e = state[S_H], state[S_E]
    i_save, max_h, max_j = tile[T_ISAVE], tile[T_MAXH], tile[T_MAXJ]
    v_neg = vsplat(matrix, neg)
    v_o, v_e, v_oe = vsplat(matrix, o), vsplat(matrix, e), vsplat(matrix, oe)
    r0 = ti * th
    ht = min(th, a.size - r0)
    seg = (ht + lanes - 1) // lanes
    t_last, k_last = (ht - 1) % seg, (ht - 1) // seg
    v_seg_e = vsplat(matrix, min(e * seg, -neg))
    v_seg_e2 = vsplat(matrix, min(2 * e * seg, -neg))
    v_seg_e4 = vsplat(matrix, min(4 * e * seg, -neg))
    v_seg_e8 = vsplat(matrix, min(8 * e * seg, -neg))
    v_seg_e16 = vsplat(matrix, min(16 * e * seg, -neg))
    corner, base, thr = row_vars[V_CORNER], row_vars[V_BASE], row_vars[V_THR]
    src = top if ti == 0 else ring[(ti + 1) % 2]
    dst = ring[ti % 2]
    rs = row_slot[ti]
    if tj == 0:
        dst[0, 0] = left[0, r0 + ht]
        dst[1, 0] = neg_store
        if rs >= 0:
            row_store[rs, 0, 0] = left[0, r0 + ht]
            row_store[rs, 1, 0] = neg_store
    c0 = tj * tw
    c1 = min(c0 + tw, b.size)
    if relative and corner != base:
        # lanes follow this tile's corner: every value of the tile lies near it
        v_delta = vsplat(matrix, _clamp(base - corner, -lane_max, lane_max))
        for t in range(seg):
            off = t * lanes
            vstore(pv_h, off, vmax(vadds(vload(pv_h, off), v_delta), v_neg))
            vstore(pv_e, off, vmax(vadds(vload(pv_e, off), v_delta), v_neg))
        base = corner
    vc = (v_e, v_oe, vsplat(matrix, _clamp(-base, neg, 0)), local)
    tile_hit = False
    if local:
        for t in range(seg):
            vstore(max_h, t * lanes, v_neg)
    cs = col_slot[tj]
    for j in range(c0 + 1, c1 + 1):
        diag = _clamp((corner if j == c0 + 1 else src[0, j - 1]) - base, neg, lane_max)
        pbase = np.int64(b[j - 1]) * seg * lanes
        d_top = max(src[1, j] - e, src[0, j] - oe) - base
        vf = vshift_in(v_neg, _clamp(d_top, neg, lane_max))
        vh = vshift_in(vload(pv_h, (seg - 1) * lanes), diag)
        if cs >= 0 and j == c1:
            for t in range(seg):
                vstore(i_save, t * lanes, vload(pv_e, t * lanes))
        v_col = v_neg
        for t in range(t_last):
            vh, vf, v_col = _striped_step(pv_h, pv_e, prof, pbase, t * lanes, vh, vf, vc, v_col)
        vd_last = vf
        for t in range(t_last, seg):
            vh, vf, v_col = _striped_step(pv_h, pv_e, prof, pbase, t * lanes, vh, vf, vc, v_col)
        # D carried across lanes: lane k enters with the best of the D leaving lanes q < k,
        # extended through the seg rows of each lane between (a max-plus prefix scan over the
        # lanes); then one pass down the segments while it can still raise H (after that it
        # is below every D of the column already computed)
        vf = vshift_in(vf, neg)
        vf = vmax(vf, vsubs(vshift(vf, v_neg, 1), v_seg_e))
        vf = vmax(vf, vsubs(vshift(vf, v_neg, 2), v_seg_e2))
        vf = vmax(vf, vsubs(vshift(vf, v_neg, 4), v_seg_e4))
        vf = vmax(vf, vsubs(vshift(vf, v_neg, 8), v_seg_e8))
        vf = vmax(vmax(vf, vsubs(vshift(vf, v_neg, 16), v_seg_e16)), v_neg)
        for t in range(seg):
            off = t * lanes
            vh = vload(pv_h, off)
            if t == t_last:
                vd_last = vmax(vd_last, vf)
            if not vany(vgt(vf, vsub(vh, v_o))):
                break
            vh = vmax(vh, vf)
            if local:
                v_col = vmax(v_col, vh)
            vstore(pv_h, off, vh)
            vstore(pv_e, off, vmax(vload(pv_e, off), vsub(vh, v_oe)))
            vf = vmax(vsub(vf, v_e), v_neg)
        # local: only columns reaching the best H seen so far can hold the end cell
        v_thr = vsplat(matrix, _clamp(thr - 1 - base, neg, lane_max))
        if local and vany(vgt(v_col, v_thr)):
            tile_hit = True
            vj = vsplat(matrix, j - c0)
            for t in range(seg):
                off = t * lanes
                vh, mh = vload(pv_h, off), vload(max_h, off)
                vstore(max_j, off, vselect(vgt(vh, mh), vj, vload(max_j, off)))
                vstore(max_h, off, vmax(vh, mh))
            thr = max(thr, vhmax(v_col) + base)
        hb = vlane(vload(pv_h, t_last * lanes), k_last) + base
        db = vlane(vd_last, k_last)
        db = neg_store if db <= neg else db + base
        dst[0, j] = hb
        dst[1, j] = db
        if rs >= 0:
            row_store[rs, 0, j] = hb
            row_store[rs, 1, j] = db
    if cs >= 0:
        for r in range(ht):
            x = (r % seg) * lanes + r // seg
            col_store[cs, 0, r0 + 1 + r] = pv_h[x] + base
            col_store[cs, 1, r0 + 1 + r] = i_save[x] + base
    if local and tile_hit:
        for r in range(ht):
            x = (r % seg) * lanes + r // seg
            if max_h[x] > neg and max_h[x] + base > row_best[0, r]:
                row_best[0, r] = max_h[x] + base
                row_best[1, r] = c0 + max_j[x]
    row_vars[V_CORNER] = src[0, c1]
    row_vars[V_BASE] = base
    row_vars[V_THR] = thr


_POOL: tuple[ThreadPoolExecutor, int] | None = None
_POOL_LOCK = threading.Lock()


def _pool(size: int) -> ThreadPoolExecutor:
    """Helper threads kept between calls (starting threads costs more than a small region).

    Callers never wait on a helper to make progress: a helper that starts late finds the
    region's tiles done and returns, so concurrent callers sharing the pool are safe.
    """
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[1] < size:
            if _POOL is not None:
                _POOL[0].shutdown(wait=False)
            _POOL = ThreadPoolExecutor(size, thread_name_prefix="dpalign-tiles"), size
        return _POOL[0]


def fill_region(
    a: np.ndarray,
    b: np.ndarray,
    matrix: np.ndarray,
    params: np.ndarray,
    top: np.ndarray,
    left: np.ndarray,
    row_slot: np.ndarray,
    col_slot: np.ndarray,
    threads: int,
) -> RegionFill:
    """Fill a region of the DP matrix on ``threads`` worker threads (see the module docstring).

    Parameters
    ----------
    a, b : ndarray uint8
        Codes of the region's rows and columns (C-contiguous).
    matrix : ndarray (K, K)
        Substitution scores in the lane dtype (int16, int32 or int64).
    params : ndarray int64
        See ``P_*``.
    top, left : ndarray (2, w+1), (2, h+1), store dtype (int32 or int64)
        Boundary row (H, D) and column (H, I).
    row_slot, col_slot : ndarray int64
        Per tile row / tile column: the checkpoint slot to keep its boundary in, or -1.
    threads : int
        Worker threads (at most one per tile row is used).
    """
    h, w = a.size, b.size
    th, tw, lanes = int(params[P_TILE_ROWS]), int(params[P_TILE_COLS]), int(params[P_LANES])
    n_rows = -(-h // th)
    lane_dtype, store_dtype = matrix.dtype, top.dtype
    ring = np.empty((2, 2, w + 1), store_dtype)
    row_store = np.empty((max(int(row_slot.max(initial=-1)) + 1, 0), 2, w + 1), store_dtype)
    col_store = np.empty((max(int(col_slot.max(initial=-1)) + 1, 0), 2, h + 1), store_dtype)
    for tj in np.flatnonzero(col_slot >= 0):
        col_store[col_slot[tj], 0, 0] = top[0, min((tj + 1) * tw, w)]
        col_store[col_slot[tj], 1, 0] = params[P_NEG_STORE]
    threads = max(1, min(threads, n_rows))
    seg = -(-min(th, h) // lanes)
    local = params[P_LOCAL] != 0
    # what different workers write must not share a cache line (or its prefetch pair): each
    # row's or worker's slice is padded by 128 bytes
    pad = 128 // lane_dtype.itemsize
    scratch = (
        np.empty((n_rows, matrix.shape[0] * seg * lanes + pad), lane_dtype),
        np.empty((n_rows, 2, seg * lanes + pad), lane_dtype),
        np.empty((threads, 3, seg * lanes + pad), lane_dtype),
        np.empty((n_rows, 2, min(th, h) + 16) if local else (1, 2, 1), np.int64),
        np.empty((n_rows, 16), np.int64),
    )
    sync = (np.zeros(n_rows, np.int64), np.zeros(n_rows, np.int64))
    best = np.zeros((threads, 3), np.int64)
    args = (
        (a, b),
        matrix,
        params,
        (top, left),
        ring,
        (row_store, row_slot, col_store, col_slot),
        sync,
        best,
        scratch,
    )
    helpers = [_pool(threads - 1).submit(fill_worker, t, *args) for t in range(1, threads)]
    fill_worker(0, *args)
    for helper in helpers:
        helper.result()
    top_best = (0, 0, 0)
    for value, i, j in best.tolist():
        if value > top_best[0] or (value == top_best[0] and value > 0 and (i, j) < top_best[1:]):
            top_best = (value, i, j)
    return RegionFill(ring[(n_rows - 1) % 2], row_store, col_store, top_best)


@njit(nogil=True, cache=True)
def fill_bits(a, b, matrix, o, e, local, top, left, bits, last_col):
    """Fill a region from its boundaries, keeping per cell the bits the traceback decides on.

    ``bits`` has shape (i+1, j+1): only rows 0..i and columns 0..j are computed. ``top``
    (2, >= j+1) holds H and D of row 0, ``left`` (2, >= i+1) H and I of column 0. Cell bits:
    ``B_DIAG`` H equals the diagonal candidate, ``B_D`` H equals D, ``B_D_OPEN`` D equals H
    above minus o + e, ``B_I_OPEN`` I equals H to the left minus o + e, ``B_ZERO`` H is 0.

    Returns H of the last row, and fills ``last_col`` (length i+1) with H of the last column;
    with the first maximum of H over the inner cells in row-major order ``(H, r, c)`` (local
    mode; ``(0, 0, 0)`` when no cell is positive).

    Rows go four at a time, skewed by one column each (cell (r + k, c - k) at step c), so
    that four independent dependency chains keep the core busy (the generated
    :mod:`~dpalign.simd.antidiagonal_rows`).
    """
    n_r, n_c = bits.shape
    best, best_r, best_c = 0, 0, 0
    h_row = np.empty(n_c, np.int64)
    d_row = np.empty(n_c, np.int64)
    for c in range(n_c):
        h_row[c] = top[0, c]
        d_row[c] = top[1, c]
    last_col[0] = top[0, n_c - 1]
    ctx = (matrix, e, o + e, local, h_row, d_row, bits)
    r = np.int64(1)  # not a literal: one specialisation of the row groups
    while r < n_r:
        if r + 4 <= n_r and n_c > 1:
            h, h_r, h_c = rows4(r, a, b, ctx, left, last_col)
            r += 4
        else:
            h, h_r, h_c = rows1(r, a, b, ctx, left, last_col)
            r += 1
        if h > best:
            best, best_r, best_c = h, h_r, h_c
    h_row[0] = left[0, n_r - 1]
    return h_row, best, best_r, best_c


@njit(nogil=True, cache=True)
def trace_bits(a, b, bits, local, i, j, state, ops, pos):
    """Trace back from cell (i, j) in ``state`` with the reference's rules, on direction bits.

    Stops on reaching row 0 or column 0 of ``bits``, or (local) at a cell whose H is 0 in
    state H. Ops are written backwards into ``ops`` from ``pos``.

    Returns
    -------
    (i, j, state, stopped, pos)
    """
    stopped = False
    while i > 0 and j > 0:
        flags = bits[i, j]
        if state == STATE_H:
            if local and flags & B_ZERO:
                stopped = True
                break
            if flags & B_DIAG:
                ops[pos] = OP_MATCH if a[i - 1] == b[j - 1] else OP_MISMATCH
                i -= 1
                j -= 1
            elif flags & B_D:
                state = STATE_D
                continue
            else:
                state = STATE_I
                continue
        elif state == STATE_D:
            ops[pos] = OP_DEL
            if flags & B_D_OPEN:
                state = STATE_H
            i -= 1
        else:
            ops[pos] = OP_INS
            if flags & B_I_OPEN:
                state = STATE_H
            j -= 1
        pos += 1
    return i, j, state, stopped, pos


@njit(nogil=True, cache=True)
def trace_leaf(a, b, matrix, o, e, local, top, left, i, j, state, ops, pos):
    """Recompute a small region up to cell (i, j) and trace back from it.

    See :func:`fill_bits` for the boundaries and :func:`trace_bits` for the result.
    """
    bits = np.empty((i + 1, j + 1), np.uint8)
    fill_bits(a, b, matrix, o, e, local, top, left, bits, np.empty(i + 1, np.int64))
    return trace_bits(a, b, bits, local, i, j, state, ops, pos)


@njit(nogil=True, cache=True)
def _trace_block_leaf(
    a, b, matrix, o, e, local, r0, c0, rc, cc, top, left, rows, cols, i, j, state, ops, pos
):  # fmt: skip
    """One step of :func:`trace_blocks`' walk: the block holding cell ``(i, j)`` traced as a
    leaf from there, with its kept boundaries (the region's ``top`` / ``left`` on its first
    block row / column). Returns ``(i, j, state, stopped, pos)`` where the path leaves it."""
    bi = np.searchsorted(rc, i) - 1
    bj = np.searchsorted(cc, j) - 1
    br0, br1, bc0, bc1 = rc[bi], rc[bi + 1], cc[bj], cc[bj + 1]
    if bi == 0:
        btop = top[:, bc0 : bc1 + 1]
    else:
        btop = rows[bi - 1, :, bc0 : bc1 + 1]
    if bj == 0:
        bleft = left[:, br0 : br1 + 1]
    else:
        bleft = cols[bj - 1, :, br0 : br1 + 1]
    li, lj = i - br0, j - bc0
    ra, cb = r0 + br0, c0 + bc0
    li, lj, state, stopped, pos = trace_leaf(
        a[ra : ra + li], b[cb : cb + lj], matrix, o, e, local, btop, bleft, li, lj, state, ops,
        pos,
    )  # fmt: skip
    return li + br0, lj + bc0, state, stopped, pos


@njit(nogil=True, cache=True)
def trace_blocks(
    a, b, matrix, o, e, local, r0, c0, rc, cc, top, left, rows, cols, i, j, state, ops, pos
):
    """Trace back through a region whose fill kept every block boundary, leaf by leaf.

    The region starts at row ``r0`` of ``a`` and column ``c0`` of ``b`` (the whole sequences
    are passed); ``rc`` / ``cc`` are its block cuts (``0 .. h`` and ``0 .. w``), ``top`` /
    ``left`` its boundaries and ``rows`` / ``cols`` the kept boundaries after each inner cut.
    Each block on the path is recomputed with :func:`trace_leaf`, cropped to the cell the
    path enters it at: the loop that ``dpalign.longpair`` runs over blocks, without a return
    to Python per leaf.

    Returns
    -------
    (i, j, state, stopped, pos)
    """
    stopped = False
    while i > 0 and j > 0:
        i, j, state, stopped, pos = _trace_block_leaf(
            a, b, matrix, o, e, local, r0, c0, rc, cc, top, left, rows, cols, i, j, state, ops,
            pos,
        )  # fmt: skip
        if stopped:
            break
    return i, j, state, stopped, pos


@njit(nogil=True, cache=True)
def trace_blocks_merge(
    a,
    b,
    matrix,
    o,
    e,
    local,
    r0,
    c0,
    rc,
    cc,
    top,
    left,
    rows,
    cols,
    i,
    j,
    state,
    ops,
    pos,
    record,
    other,
    n_other,
    i_stop,
    j_stop,
):
    """:func:`trace_blocks`, recording where the path enters each leaf and stopping where
    it meets another trace of the same region, or once it enters a leaf at a row at most
    ``i_stop`` or a column at most ``j_stop`` (0, 0: the region's edge).

    ``record`` (k, 4) receives ``(i, j, state, pos)`` at each leaf the path enters (at
    most k; the path goes on unrecorded after that). ``other[:n_other]`` is such a record of
    another trace (from another start, e.g. a block's corner, traced ahead): the path is
    deterministic from a cell and state on, so where it enters a leaf at a recorded
    ``(i, j, state)`` it goes on exactly as that trace did, and this one stops there.

    Returns
    -------
    (i, j, state, stopped, pos, n_record, met)
        ``met``: the index into ``other`` where the paths met, or -1 (then the trace ran to
        the region's edge or a local stop as :func:`trace_blocks` does).
    """
    stopped = False
    n_record = 0
    p = 0
    met = -1
    while i > i_stop and j > j_stop:
        while p < n_other and (other[p, 0] > i or other[p, 1] > j):
            p += 1  # the other path is past here: the rest of this one cannot meet it there
        if p < n_other and other[p, 0] == i and other[p, 1] == j and other[p, 2] == state:
            met = p
            break
        if n_record < record.shape[0]:
            record[n_record, 0] = i
            record[n_record, 1] = j
            record[n_record, 2] = state
            record[n_record, 3] = pos
            n_record += 1
        i, j, state, stopped, pos = _trace_block_leaf(
            a, b, matrix, o, e, local, r0, c0, rc, cc, top, left, rows, cols, i, j, state, ops,
            pos,
        )  # fmt: skip
        if stopped:
            break
    return i, j, state, stopped, pos, n_record, met
