"""Local scores with their end cells in one inter-sequence pass (pyopal's ``mode="end"``).

The same recurrence and layout as :func:`dpalign.simd.pairwise.sweep` (targets in lanes, the
query streamed row by row through strips of :data:`~dpalign.simd.pairwise.STRIP` target
columns), local mode only, plus what it takes to say *where* each lane's best cell is:

* every row of a strip stores its eight H vectors and their maximum (stores, no extra
  arithmetic: the maximum replaces the eight running-best updates of the score-only kernel;
  the strip is :func:`~dpalign.simd.pairwise_strips.strip_ends`, generated with the others);
* after a strip, lanes whose strip maximum reached their best so far (ties included) look up
  the first row holding that maximum (one vector compare per row, stopping when every such
  lane is found), then the first of the eight columns in that row.

A new maximum replaces the recorded end; an equal one only from a smaller row. That is the
first maximal cell in row-major order, :mod:`dpalign.reference`'s rule, so a hit's end
coordinates equal its traceback's without a traceback. A score of 0 ends at (0, 0).

Padding past a lane's end never ties its best cell when ``o + e > 0`` (a padding cell is a
real cell's value minus gap costs); callers use this kernel only then.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

from ..contract import BlockScores, QueryBatch, ReferenceBlock, Task
from .pairwise import (
    _RANGE,
    DTYPES,
    _local_widths,
    _prepare_query,
    lane_groups,
    live_sides,
    local_columns,
    local_limit,
    local_passes,
    padded_matrix,
    query_scratch,
    strip_profile,
)
from .pairwise_strips import STRIP, _local_cell, strip_ends
from .vectors import vand, vbits, veq, vlanes, vload, vlookup, vmax, vne, vsplat, vstore, vsub


@njit(nogil=True, cache=True)
def sweep_ends(codes, group_n, qcodes, qlens, qsel, matrix, o, e, pad, out, end_i, end_j):
    """Local scores and end cells of queries against G lane groups.

    Arguments as :func:`dpalign.simd.pairwise.sweep` (local mode); ``end_i`` and ``end_j``
    (S, G, V) int64 receive the DP cell (query row, target column; 1-based, so the 0-based
    half-open ends) of each lane's first best cell in row-major order, (0, 0) for score 0.
    """
    V = codes.shape[2]
    entries = 64 if V == 64 else 32
    rows = qcodes.shape[1] + 1
    Hc, Yc, tab, prof, qidx, symbol_slot = query_scratch(codes, qcodes, matrix)
    runmax = np.empty(rows * V, dtype=codes.dtype)
    hbuf = np.empty(rows * STRIP * V, dtype=codes.dtype)
    lane_buf = np.empty(3 * V, dtype=codes.dtype)
    for g in range(codes.shape[0]):
        grp = codes[g, : local_columns(group_n[g], codes.shape[1] - 1) + 1]
        for s_idx in range(qsel.shape[0]):
            q = qsel[s_idx]
            m = qlens[q]
            n_used = _prepare_query(qcodes, q, m, matrix, pad, tab, qidx, symbol_slot, entries)
            _one_query(
                grp, m, n_used, tab, qidx, entries, o, e, Hc, Yc, prof, runmax, hbuf,
                lane_buf, out[s_idx, g], end_i[s_idx, g], end_j[s_idx, g],
            )  # fmt: skip


@njit(nogil=True, cache=True)
def _one_query(
    codes, m, n_used, tab, qidx, entries, o, e, Hc, Yc, prof, runmax, hbuf, lane_buf,
    out, end_i, end_j,
):  # fmt: skip
    n = codes.shape[0] - 1
    V = codes.shape[1]
    probe = codes[0]
    vo = vsplat(probe, o)
    ve = vsplat(probe, e)
    zero = vsplat(probe, 0)
    KV = STRIP * V
    for i in range(1, m + 1):
        vstore(Hc, i * V, zero)
        vstore(Yc, i * V, vsub(zero, vo))
    for lane in range(V):
        end_i[lane] = 0
        end_j[lane] = 0
    best = zero
    n_strips = n // STRIP
    for strip in range(n_strips):
        j0 = strip * STRIP
        strip_profile(codes, j0, n_used, tab, entries, prof)
        sb = strip_ends(prof, Hc, Yc, qidx, m, best, runmax, hbuf, vo, ve, zero)
        best = _locate(sb, best, runmax, hbuf, lane_buf, m, j0, STRIP, end_i, end_j, zero)
    for j in range(n_strips * STRIP, n):  # the last columns, one at a time
        cv = vload(codes, j * V)
        h = zero
        x = vsub(zero, vo)
        hprev = zero
        sb = zero
        for i in range(1, m + 1):
            y = vload(Yc, i * V)
            s = vlookup(tab, qidx[i - 1] * entries, cv)
            # the cell's running best goes unused (sb and hbuf locate the maxima): compiled out
            h, x, y, _ = _local_cell(hprev, s, x, y, zero, vo, ve, zero)
            hprev = vload(Hc, i * V)
            sb = vmax(sb, h)
            vstore(runmax, i * V, sb)
            vstore(hbuf, i * KV, h)
            vstore(Hc, i * V, h)
            vstore(Yc, i * V, y)
        best = _locate(sb, best, runmax, hbuf, lane_buf, m, j, 1, end_i, end_j, zero)
    vstore(lane_buf, 0, best)
    for lane in range(V):
        out[lane] = lane_buf[lane]


@njit(nogil=True, cache=True)
def _locate(sb, best, runmax, hbuf, lane_buf, m, j0, width, end_i, end_j, zero):
    """Fold a strip's maxima ``sb`` into the lanes' best and end cells; return the new best.

    ``runmax[i]`` holds the strip's running maximum after row i (non-decreasing in i), so
    the first row holding a lane's strip maximum is a binary search away.
    """
    V = vlanes(lane_buf)
    KV = STRIP * V
    pending = vbits(vand(veq(vmax(sb, best), sb), vne(sb, zero)))  # sb >= best and sb > 0
    if pending != 0:
        vstore(lane_buf, 0, sb)
        vstore(lane_buf, V, best)
        while pending != 0:  # the pending lanes only (their bits)
            lane = trailing_zeros(pending)
            pending &= pending - 1
            value = lane_buf[lane]
            hi = m
            if value == lane_buf[V + lane]:
                # A tie with the lane's best wins only from an earlier row: one look at the
                # row above the recorded end settles the common case (most ties lose).
                first = end_i[lane]
                if first <= 1 or runmax[(first - 1) * V + lane] < value:
                    continue
                hi = first - 1
            lo = 1  # the first row whose running maximum reaches value
            while lo < hi:
                mid = (lo + hi) // 2
                if runmax[mid * V + lane] >= value:
                    hi = mid
                else:
                    lo = mid + 1
            k = 0
            while k < width - 1 and hbuf[lo * KV + k * V + lane] != value:
                k += 1
            end_i[lane] = lo
            end_j[lane] = j0 + k + 1
    return vmax(best, sb)


def run_pass_ends(width, codes, lengths, queries, qsel, scoring):
    """Local scores and end cells of queries ``qsel`` against every lane at one width.

    Returns ``(scores [S, L] int64, a_end [S, L], b_end [S, L], saturated [S, L])``.
    """
    matrix = padded_matrix(scoring, width)
    lo = _RANGE[width][0]
    groups, group_n, _ = lane_groups(codes, lengths, width, matrix.shape[0] - 1)
    shape = (len(qsel), groups.shape[0], groups.shape[2])
    out = np.empty(shape, dtype=DTYPES[width])
    end_i = np.empty(shape, dtype=np.int64)
    end_j = np.empty(shape, dtype=np.int64)
    sweep_ends(
        groups, group_n, queries.codes, queries.lengths, qsel, matrix,
        scoring.gap_open, scoring.gap_extend, lo, out, end_i, end_j,
    )  # fmt: skip
    L = len(lengths)
    scores = out.reshape(len(qsel), -1)[:, :L].astype(np.int64)
    return (
        scores,
        end_i.reshape(len(qsel), -1)[:, :L],
        end_j.reshape(len(qsel), -1)[:, :L],
        scores >= local_limit(scoring, width),
    )


@njit(nogil=True, cache=True)
def pair_ends_int64(a, b, matrix, o, e):
    """Local score and first row-major best cell of one pair in int64 scalars."""
    m, n = a.shape[0], b.shape[0]
    neg = -(2**62)
    H = np.zeros(n + 1, dtype=np.int64)
    D = np.full(n + 1, neg, dtype=np.int64)
    best, bi, bj = 0, 0, 0
    for i in range(1, m + 1):
        diag = H[0]
        ih = neg
        ai = a[i - 1]
        for j in range(1, n + 1):
            D[j] = max(D[j] - e, H[j] - o - e)
            ih = max(ih - e, H[j - 1] - o - e)
            h = max(diag + matrix[ai, b[j - 1]], D[j], ih, 0)
            if h > best:
                best, bi, bj = h, i, j
            diag = H[j]
            H[j] = h
    return best, bi, bj


def score_block_ends(task: Task, queries: QueryBatch, block: ReferenceBlock, every=False):
    """Local scores and end cells of a batch against a block.

    Returns ``(BlockScores, a_end [Q, W], b_end [Q, W])``: narrow passes first, then only
    the saturated pairs wider, as :func:`dpalign.simd.pairwise.score_block`; pairs beyond
    int32 in scalar int64. Pairs that the striped kernel rescored (a few saturated lanes of
    a block) have ends -1: not known without a traceback. ``every``: saturated pairs go to
    the wider lanes passes however few they are, so every pair's end is known (for a pass
    over a few high-scoring hits, where a traceback per saturated pair would cost more).
    """
    scoring = task.scoring
    W, Q = block.width, len(queries)
    scores = np.zeros((Q, W), dtype=np.int64)
    width = np.zeros((Q, W), dtype=np.uint8)
    a_end = np.zeros((Q, W), dtype=np.int64)
    b_end = np.zeros((Q, W), dtype=np.int64)
    lengths, qlens, live_lanes, live_queries = live_sides(queries, block)
    width[:] = 8  # empty sides: local score 0 at (0, 0)
    if not live_lanes.size or not live_queries.size:
        return BlockScores(scores, width), a_end, b_end
    # Empty targets keep their lanes: an all-padding lane scores 0 at (0, 0), as an empty
    # target does, and the block's own arrays need no copy (and stay the lane-group cache's).
    live_lanes = np.arange(W)
    codes, sub_lens = block.codes, lengths

    def one_pass(w, sub, sub_lengths, qsel):
        got, ei, ej, sat = run_pass_ends(w, sub, sub_lengths, queries, qsel, scoring)
        return (got, ei, ej), sat

    def unknown_ends(groups):  # rescored by the striped kernel: ends left to the traceback
        for qsel, lanes in groups:
            a_end[np.ix_(qsel, live_lanes[lanes])] = -1
            b_end[np.ix_(qsel, live_lanes[lanes])] = -1

    outs = (scores, a_end, b_end)
    todo = local_passes(
        scoring, queries, codes, sub_lens, live_lanes, live_queries, outs, width, one_pass,
        unknown_ends, few_striped=not every,
    )  # fmt: skip
    matrix = scoring.matrix.astype(np.int64)
    for qsel, lanes in todo:
        for q in qsel:
            a = queries.codes[q, : qlens[q]]
            for lane in live_lanes[lanes]:
                b = np.ascontiguousarray(block.codes[: lengths[lane], lane])
                best, i, j = pair_ends_int64(a, b, matrix, scoring.gap_open, scoring.gap_extend)
                scores[q, lane], a_end[q, lane], b_end[q, lane] = best, i, j
                width[q, lane] = 64
    return BlockScores(scores, width), a_end, b_end


def ends_supported(task: Task) -> bool:
    """Whether :func:`score_block_ends` applies: local pairwise with ``o + e > 0``."""
    sc = task.scoring
    return (
        task.kernel == "pairwise"
        and task.mode == "local"
        and sc.gap_open + sc.gap_extend > 0
        and bool(_local_widths(sc, True))
    )
