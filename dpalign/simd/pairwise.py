"""Inter-sequence score kernels: one query against the W targets of a block, one target per lane.

Layout and recurrence
---------------------
Targets sit in SIMD lanes (``codes[j, lane]`` is residue j of the lane's target, the
inter-sequence layout of :class:`~dpalign.engine.ReferenceBlock`); the query is the same in
every lane. The DP runs over target columns in strips of :data:`STRIP` columns; inside a strip
the query rows are the inner loop and the strip's eight columns are unrolled, so the per-column
state (the cell above and the vertical-gap state) stays in registers and only one H and one
horizontal-gap vector per row go through memory per strip. Before a strip, a per-strip score
profile is built: for every residue the query uses and every strip column, the vector of
substitution scores against the lanes' target residues (one ``vpermb``/``vpermw``/``vpermi2d``
each, :func:`~dpalign.simd.vectors.vlookup`), so a substitution score is one vector load.

With a the query (rows i) and b a target (columns j), gap of length k costing ``o + e*k``::

    D[i][j] = X[i-1][j] - e        X = max(D, H - o)   (vertical gap, carried down a column)
    I[i][j] = Y[i][j-1] - e        Y = max(I, H - o)   (horizontal gap, carried along a row)
    H[i][j] = max(H[i-1][j-1] + s(a[i-1], b[j-1]), D[i][j], I[i][j] [, 0 when local])

which is :mod:`dpalign.reference`'s recurrence with ``H - o - e`` computed once per cell.

Widths and saturation
---------------------
One kernel source compiles for int8 (64 lanes), int16 (32) and int32 (16) lanes
(:mod:`dpalign.simd.vectors`). Local alignment starts in int8 when the block has more than 32
lanes: scores only grow from 0, and a lane whose best cell comes within the largest
substitution score of the type's maximum (:func:`local_limit`, before any diagonal add could
wrap) is flagged and recomputed at int16, then int32 (only those pairs; a query
with fewer than :data:`STRIPED_MAX_LANES` saturated lanes has them recomputed one pair at a
time by the striped kernel of :mod:`dpalign.simd.striped`, which fills all 32 lanes). Low
values cannot corrupt a local score (gap states stay above ``-(o + e)``, see
:func:`local_width_ok`). Global and semi-global values fall as well as rise, so their width
comes from the a-priori bound :meth:`~dpalign.scoring.Scoring.width_for`, which no value can
leave. Pairs whose bound exceeds int32 are scored by a scalar int64 kernel.

Target positions past a lane's end hold a padding symbol whose substitution score is the
type's minimum (the global add saturates; a local H of at least 0 plus the minimum cannot
wrap), so they never raise a local maximum; global end cells are picked per lane with masks.
"""

from __future__ import annotations

import weakref
from functools import lru_cache

import numpy as np
from numba import njit

from ..contract import BlockScores, QueryBatch, ReferenceBlock, Task
from .pairwise_strips import STRIP, strip_global, strip_local
from .vectors import (
    LANES,
    LOOKUP_ENTRIES,
    vadds,
    vand,
    veq,
    vload,
    vlookup,
    vmax,
    vne,
    vselect,
    vsplat,
    vstore,
    vsub,
)

#: Lane dtype of each integer width.
DTYPES = {8: np.int8, 16: np.int16, 32: np.int32}


_RANGE = {w: (int(np.iinfo(t).min), int(np.iinfo(t).max)) for w, t in DTYPES.items()}


def lanes_for(width: int) -> int:
    """Lanes per 512-bit vector at an integer width (64, 32 or 16)."""
    return LANES[np.dtype(DTYPES[width])]


# --------------------------------------------------------------------------------------------
# The kernel
# --------------------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _border(k, o, e, free):
    """H on row 0 (k = column) or column 0 (k = row): 0 where that leading gap is free."""
    if free or k == 0:
        return 0
    return -(o + e * k)


#: Minus infinity of the int64 kernels (far from overflow when costs are added).
NEG64 = -(2**62)


@njit(nogil=True, cache=True, inline="always")
def row0(n, o, e, free):
    """H and D of DP row 0 over columns 0..n in int64 (D at minus infinity)."""
    H = np.empty(n + 1, dtype=np.int64)
    D = np.full(n + 1, NEG64, dtype=np.int64)
    for j in range(n + 1):
        H[j] = _border(j, o, e, free)
    return H, D


@njit(nogil=True, cache=True)
def _prepare_query(qcodes, q, m, matrix, pad, tab, qidx, symbol_slot, entries):
    """Fill the query's lookup tables (one row of ``entries`` per residue it uses)."""
    n_sym = matrix.shape[0]
    for c in range(n_sym):
        symbol_slot[c] = -1
    used = 0
    for i in range(m):
        c = qcodes[q, i]
        if symbol_slot[c] < 0:
            symbol_slot[c] = used
            for t in range(entries):
                tab[used * entries + t] = matrix[c, t] if t < n_sym else pad
            used += 1
        qidx[i] = symbol_slot[c]
    return used


@njit(nogil=True, cache=True, inline="always")
def query_scratch(codes, qcodes, matrix):
    """The per-query buffers of a sweep over lane groups ``codes`` (G, n + 1, V).

    Returns ``(Hc, Yc, tab, prof, qidx, symbol_slot)``: H and Y of a strip's right edge per
    query row, the query symbols' lookup rows, the strip profile, the query's lookup row per
    position and each symbol's row (see :func:`_prepare_query`, :func:`strip_profile`).
    """
    V = codes.shape[2]
    n_sym = matrix.shape[0]
    m_max = qcodes.shape[1]
    Hc = np.empty((m_max + 1) * V, dtype=codes.dtype)
    Yc = np.empty((m_max + 1) * V, dtype=codes.dtype)
    tab = np.empty(n_sym * (64 if V == 64 else 32), dtype=codes.dtype)
    prof = np.empty(n_sym * STRIP * V, dtype=codes.dtype)
    qidx = np.empty(m_max, dtype=np.int64)
    symbol_slot = np.empty(n_sym, dtype=np.int64)
    return Hc, Yc, tab, prof, qidx, symbol_slot


#: A local sweep runs a group's last columns as one strip through the padding when at least
#: this many remain: a column of the one-column path costs ~3.4 strip columns (measured
#: here: 6.2 against 1.8 us for 1,000 rows x 64 lanes), and padding cannot change a local
#: score or end cell (its substitution score is the type's minimum).
LOCAL_PAD_MIN = 3


@njit(nogil=True, cache=True, inline="always")
def local_columns(n, n_alloc):
    """Columns a local sweep runs for a group whose longest lane has ``n`` (``n_alloc``
    allocated): whole strips through the padding when :data:`LOCAL_PAD_MIN` or more remain."""
    r = n % STRIP
    if r >= LOCAL_PAD_MIN and n - r + STRIP <= n_alloc:
        return n - r + STRIP
    return n


@njit(nogil=True, cache=True, inline="always")
def strip_profile(codes, j0, n_used, tab, entries, prof):
    """Substitution scores of columns j0 .. j0+STRIP-1 against each used query symbol."""
    V = codes.shape[1]
    for u in range(n_used):
        for k in range(STRIP):
            cv = vload(codes, (j0 + k) * V)
            vstore(prof, (u * STRIP + k) * V, vlookup(tab, u * entries, cv))


@njit(nogil=True, cache=True)
def sweep(codes, group_n, lane_len, qcodes, qlens, qsel, matrix, o, e, local, ends, pad, out):
    """Score queries against G lane groups (one call per block keeps Python out of the loop).

    Parameters
    ----------
    codes : ndarray (G, n + 1, V), lane dtype
        Target residues in the inter-sequence layout, one group of V lanes per row of the
        first axis; positions at or past a lane's length hold the padding symbol
        ``matrix.shape[0] - 1``, and so does row ``group_n[g]`` of every group.
    group_n : ndarray (G,), int64
        Longest target of each group.
    lane_len : ndarray (G, V), int64
        Target lengths.
    qcodes, qlens : ndarray (Q, m_max) uint8, (Q,) int64
        Queries.
    qsel : ndarray (S,), int64
        The queries to score (rows of ``qcodes``); each must be non-empty.
    matrix : ndarray (A + 1, A + 1), lane dtype
        Substitution scores; the last row and column are the padding symbol's (``pad``).
    o, e : int
        Gap costs (a gap of length k costs ``o + e*k``).
    local : bool
        Smith-Waterman (else global with free ends ``ends``).
    ends : ndarray (4,), bool
        ``(a_lead, a_trail, b_lead, b_trail)``: free end gaps of the query (a), target (b).
    pad : int
        The padding symbol's score: the lane type's minimum.
    out : ndarray (S, G, V), lane dtype
        Best score per query and lane (local: lanes at or above :func:`local_limit` are
        not exact and are recomputed wider).
    """
    Hc, Yc, tab, prof, qidx, symbol_slot = query_scratch(codes, qcodes, matrix)
    last = np.empty(STRIP * codes.shape[2], dtype=codes.dtype)
    scratch = (Hc, Yc, tab, prof, last, qidx, symbol_slot)
    for g in range(codes.shape[0]):
        stop = local_columns(group_n[g], codes.shape[1] - 1) if local else group_n[g]
        group = codes[g, : stop + 1]
        _sweep_group(
            group,
            lane_len[g],
            qcodes,
            qlens,
            qsel,
            matrix,
            o,
            e,
            local,
            ends,
            pad,
            out[:, g],
            scratch,
        )


@njit(nogil=True, cache=True)
def _sweep_group(
    codes, lane_len, qcodes, qlens, qsel, matrix, o, e, local, ends, pad, out, scratch
):
    """:func:`sweep` for one lane group (``codes`` (n + 1, V), ``out`` (S, V)).

    ``scratch`` = (Hc, Yc, tab, prof, last, qidx, symbol_slot), the buffers of :func:`sweep`.
    """
    Hc, Yc, tab, prof, last, qidx, symbol_slot = scratch
    n = codes.shape[0] - 1
    V = codes.shape[1]
    n_sym = matrix.shape[0]
    padc = n_sym - 1
    entries = 64 if V == 64 else 32
    a_lead, a_trail, b_lead, b_trail = ends[0], ends[1], ends[2], ends[3]
    dtype_probe = codes[0]  # a row of the lane dtype, for vsplat

    # Strips where some lane ends need its whole last column (free trailing target gaps).
    n_strips = n // STRIP
    strip_has_end = np.zeros(n_strips, dtype=np.bool_)
    for lane in range(V):
        L = lane_len[lane]
        if L > 0 and L <= n_strips * STRIP:
            strip_has_end[(L - 1) // STRIP] = True

    vo = vsplat(dtype_probe, o)
    ve = vsplat(dtype_probe, e)
    zero = vsplat(dtype_probe, 0)
    vneg = vsplat(dtype_probe, pad)
    vpad = vsplat(dtype_probe, padc)
    row_free = local or a_lead
    col_free = local or b_lead
    flags = (local, a_trail, b_trail, row_free)
    vecs = (vo, ve, zero, vneg, vpad)
    borders = np.empty(STRIP + 1, dtype=np.int64)

    for s_idx in range(qsel.shape[0]):
        q = qsel[s_idx]
        m = qlens[q]
        n_used = _prepare_query(qcodes, q, m, matrix, pad, tab, qidx, symbol_slot, entries)
        for i in range(1, m + 1):
            h = _border(i, o, e, col_free)
            vstore(Hc, i * V, vsplat(dtype_probe, h))
            vstore(Yc, i * V, vsplat(dtype_probe, h - o))
        if local:
            best = zero
        else:
            best = vneg
            if a_trail:
                best = vsplat(dtype_probe, _border(m, o, e, col_free))

        j0 = np.int64(0)  # not a literal: one specialisation of the callees
        while j0 < n:
            strip = j0 // STRIP
            if strip >= n_strips or (not local and b_trail and strip_has_end[strip]):
                # one column at a time: the remainder, and strips in which a lane ends
                best = _column(codes, j0, Hc, Yc, tab, qidx, m, entries, o, e, flags, best, vecs)
                j0 += 1
                continue
            strip_profile(codes, j0, n_used, tab, entries, prof)
            for k in range(STRIP + 1):
                borders[k] = _border(j0 + k, o, e, row_free)
            if local:
                best = strip_local(prof, Hc, Yc, qidx, m, borders, best, vo, ve, zero)
            else:
                # end cells on row m: (m, n) of lanes ending here, every column with a_trail
                strip_global(prof, Hc, Yc, qidx, m, borders, vo, ve, last)
                for k in range(STRIP):
                    hm = vload(last, k * V)
                    best = _row_m_candidates(codes, j0 + k, hm, best, a_trail, vneg, vpad)
            j0 += STRIP
        vstore(last, 0, best)
        for lane in range(V):
            out[s_idx, lane] = last[lane]


@njit(nogil=True, cache=True, inline="always")
def _row_m_candidates(codes, j, hm, best, a_trail, vneg, vpad):
    """Fold H[m][j+1] into the best end score: lanes that end at j, or all with a_trail."""
    V = codes.shape[1]
    valid = vne(vload(codes, j * V), vpad)
    if a_trail:
        return vmax(best, vselect(valid, hm, vneg))
    ends_here = vand(valid, veq(vload(codes, (j + 1) * V), vpad))
    return vmax(best, vselect(ends_here, hm, vneg))


@njit(nogil=True, cache=True)
def _column(codes, j, Hc, Yc, tab, qidx, m, entries, o, e, flags, best, vecs):
    """One target column (0-based position j, DP column j + 1), one vector per row.

    The slow path: strip remainders, and strips in which a lane ends when trailing target
    gaps are free (then every cell of the lane's last column is an end candidate).
    """
    local, a_trail, b_trail, row_free = flags
    vo, ve, zero, vneg, vpad = vecs
    V = codes.shape[1]
    probe = codes[0]
    cv = vload(codes, j * V)
    ends_here = vand(vne(cv, vpad), veq(vload(codes, (j + 1) * V), vpad))
    h = vsplat(probe, _border(j + 1, o, e, row_free))
    x = vsub(h, vo)
    hprev = vsplat(probe, _border(j, o, e, row_free))
    track = (not local) and b_trail
    colbest = vselect(ends_here, h, vneg)
    for i in range(1, m + 1):
        y = vload(Yc, i * V)
        s = vlookup(tab, qidx[i - 1] * entries, cv)
        d = vsub(x, ve)
        ih = vsub(y, ve)
        h = vmax(vmax(vadds(hprev, s), d), ih)
        if local:
            h = vmax(h, zero)
            best = vmax(best, h)
        hprev = vload(Hc, i * V)
        u = vsub(h, vo)
        x = vmax(d, u)
        y = vmax(ih, u)
        if track:
            colbest = vmax(colbest, vselect(ends_here, h, vneg))
        vstore(Hc, i * V, h)
        vstore(Yc, i * V, y)
    if local:
        return best
    if track:
        best = vmax(best, colbest)
    return _row_m_candidates(codes, j, h, best, a_trail, vneg, vpad)


# --------------------------------------------------------------------------------------------
# A scalar int64 kernel: pairs no vector width can hold, and single pairs
# --------------------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def score_pair_int64(a, b, matrix, o, e, local, ends):
    """Score one pair in int64 scalars with linear memory (the reference's recurrence).

    For pairs whose a-priori bound exceeds int32 or whose alphabet is too large for the
    vector lookups, and for one-off pairs.
    """
    m, n = a.shape[0], b.shape[0]
    a_lead, a_trail, b_lead, b_trail = ends[0], ends[1], ends[2], ends[3]
    neg = NEG64
    H, D = row0(n, o, e, local or a_lead)
    best = 0 if local else neg
    if not local:
        if b_trail or m == 0:
            best = max(best, H[n])
        if a_trail and m == 0:
            for j in range(n + 1):
                best = max(best, H[j])
    for i in range(1, m + 1):
        diag = H[0]
        H[0] = _border(i, o, e, local or b_lead)
        ih = neg
        ai = a[i - 1]
        for j in range(1, n + 1):
            D[j] = max(D[j] - e, H[j] - o - e)
            ih = max(ih - e, H[j - 1] - o - e)
            h = max(diag + matrix[ai, b[j - 1]], D[j], ih)
            if local:
                h = max(h, 0)
                best = max(best, h)
            diag = H[j]
            H[j] = h
        if not local:
            if b_trail or i == m:
                best = max(best, H[n])
            if a_trail and i == m:
                for j in range(n + 1):
                    best = max(best, H[j])
    return best


# --------------------------------------------------------------------------------------------
# Driver: passes at increasing widths over a block
# --------------------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def padded_matrix(scoring, width: int) -> np.ndarray:
    """The substitution matrix plus a padding symbol (last row/column) at a lane width."""
    dtype = DTYPES[width]
    k = scoring.matrix.shape[0]
    out = np.full((k + 1, k + 1), np.iinfo(dtype).min, dtype=dtype)
    out[:k, :k] = scoring.matrix
    out.flags.writeable = False
    return out


@lru_cache(maxsize=64)
def local_limit(scoring, width: int) -> int:
    """The local best score from which a lane is recomputed wider: the type's maximum less
    the largest substitution score. Below it no diagonal add can pass the maximum (the local
    cell adds without saturating, see :func:`~dpalign.simd.pairwise_strips._local_cell`)."""
    return _RANGE[width][1] - max(int(scoring.matrix.max()), 0)


def local_width_ok(scoring, width: int) -> bool:
    """Whether a local pass at ``width`` is exact or flags saturation.

    Local H values lie in ``[0, max]``; gap states stay at or above ``-(o + e)`` because they
    are the maximum of a chain and of ``H - o``. So the substitution scores and ``o + e`` must
    fit the type, and only the top can overflow: a pair whose best reaches
    :func:`local_limit` is recomputed wider.
    """
    lo, hi = np.iinfo(DTYPES[width]).min, np.iinfo(DTYPES[width]).max
    m = scoring.matrix
    return (
        scoring.gap_open + scoring.gap_extend < hi
        and int(m.max()) < hi
        and int(m.min()) > lo
        and LOOKUP_ENTRIES[width] > m.shape[0]
    )


def global_width(scoring, m: int, n: int, mode: str, lanes: int) -> int:
    """The a-priori width for a global/semi-global pair (8 only in 64-lane blocks)."""
    if LOOKUP_ENTRIES[32] <= scoring.matrix.shape[0]:
        return 64
    width = scoring.width_for(m, n, mode)
    if width == 8 and (lanes <= 32 or LOOKUP_ENTRIES[8] <= scoring.matrix.shape[0]):
        width = 16
    return width


def _empty_scores(lengths, scoring, local, free) -> np.ndarray:
    """Scores of sequences of ``lengths`` against an empty sequence.

    The other sequence is one gap, ``-(o + e*k)``, or 0 when that end gap is ``free``, the
    alignment is local, or both are empty (see :mod:`dpalign.reference`).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if local or free:
        return np.zeros(len(lengths), dtype=np.int64)
    cost = scoring.gap_open + scoring.gap_extend * lengths
    return np.where(lengths > 0, -cost, 0)


@njit(nogil=True, cache=True)
def _pack_groups(codes, lengths, pad, out, group_n, lane_len):
    """Copy lanes into lane groups, the padding symbol past each lane's end."""
    G, _, V = out.shape
    for g in range(G):
        n = 0
        for lane in range(V):
            k = g * V + lane
            L = lengths[k] if k < lengths.shape[0] else 0
            lane_len[g, lane] = L
            n = max(n, L)
        group_n[g] = n
        for j in range(n):
            for lane in range(V):
                k = g * V + lane
                if k < lengths.shape[0] and j < lengths[k]:
                    out[g, j, lane] = codes[j, k]


#: Lane groups of the blocks seen lately (:func:`lane_groups`), by the block's codes.
_GROUPS: dict[tuple, tuple] = {}


def lane_groups(codes: np.ndarray, lengths: np.ndarray, width: int, pad: int):
    """Lanes in groups of V as ``(codes [G, n + 1, V], group_n [G], lane_len [G, V])``, n the
    longest lane rounded up to whole strips, padding symbols past each lane's end.

    Kept while ``codes`` lives (a database's blocks are searched with query after query: the
    copy took ~2% of one 1 kb query against 1,000 reads); callers never change the arrays
    they pass.
    """
    key = (id(codes), lengths.tobytes(), width, pad)
    hit = _GROUPS.get(key)
    if hit is not None and hit[0]() is codes:
        return hit[1]
    made = _lane_groups(codes, lengths, width, pad)
    try:
        ref = weakref.ref(codes, lambda _, key=key: _GROUPS.pop(key, None))
    except TypeError:  # pragma: no cover - an array type without weak references
        return made
    _GROUPS[key] = (ref, made)
    return made


def _lane_groups(codes: np.ndarray, lengths: np.ndarray, width: int, pad: int):
    V = lanes_for(width)
    G = -(-len(lengths) // V)
    n = int(lengths.max()) if len(lengths) else 0
    n = -(-n // STRIP) * STRIP  # whole strips of padding for local sweeps (local_columns)
    out = np.full((G, n + 1, V), pad, dtype=DTYPES[width])
    group_n = np.zeros(G, dtype=np.int64)
    lane_len = np.zeros((G, V), dtype=np.int64)
    _pack_groups(codes, np.asarray(lengths, dtype=np.int64), pad, out, group_n, lane_len)
    return out, group_n, lane_len


def run_pass(
    width: int,
    codes: np.ndarray,
    lengths: np.ndarray,
    queries: QueryBatch,
    qsel: np.ndarray,
    scoring,
    local: bool,
    ends: tuple,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Score the queries ``qsel`` against every lane of ``codes`` at one width.

    Returns ``(scores [S, L] int64, saturated [S, L] bool or None for global modes)``.
    """
    matrix = padded_matrix(scoring, width)
    pad_code = matrix.shape[0] - 1
    lo = _RANGE[width][0]
    groups, group_n, lane_len = lane_groups(codes, lengths, width, pad_code)
    out = np.empty((len(qsel), groups.shape[0], groups.shape[2]), dtype=DTYPES[width])
    sweep(
        groups,
        group_n,
        lane_len,
        queries.codes,
        queries.lengths,
        qsel,
        matrix,
        scoring.gap_open,
        scoring.gap_extend,
        local,
        np.array(ends, dtype=np.bool_),
        lo,
        out,
    )
    scores = out.reshape(len(qsel), -1)[:, : len(lengths)].astype(np.int64)
    saturated = (scores >= local_limit(scoring, width)) if local else None
    return scores, saturated


def _scalar_pairs(pairs, codes, lengths, queries, scoring, local, ends, scores, width):
    ends_arr = np.array(ends, dtype=np.bool_)
    matrix = scoring.matrix.astype(np.int64)
    for q, lane in pairs:
        a = queries.codes[q, : queries.lengths[q]]
        b = np.ascontiguousarray(codes[: lengths[lane], lane])
        scores[q, lane] = score_pair_int64(
            a, b, matrix, scoring.gap_open, scoring.gap_extend, local, ends_arr
        )
        width[q, lane] = 64


def live_sides(queries: QueryBatch, block: ReferenceBlock):
    """``(lengths, qlens, live_lanes, live_queries)``: the lengths of lanes and queries (int64)
    and the indices of the non-empty ones."""
    lengths = np.asarray(block.lengths, dtype=np.int64)
    qlens = np.asarray(queries.lengths, dtype=np.int64)
    return lengths, qlens, np.flatnonzero(lengths > 0), np.flatnonzero(qlens > 0)


def score_block(task: Task, queries: QueryBatch, block: ReferenceBlock) -> BlockScores:
    """Score every query of a batch against every lane of a block (the engine's contract).

    Local: int8 first (blocks wider than 32 lanes), then only the saturated pairs at int16,
    int32, int64. Global and semi-global: the a-priori width per query.
    """
    scoring = task.scoring
    local = task.mode == "local"
    ends = tuple(bool(x) for x in task.free_ends)
    W = block.width
    Q = len(queries)
    scores = np.zeros((Q, W), dtype=np.int64)
    width = np.zeros((Q, W), dtype=np.uint8)
    lengths, qlens, live_lanes, live_queries = live_sides(queries, block)
    if len(live_lanes) < W:  # empty targets (or padding lanes)
        dead = lengths == 0
        scores[:, dead] = _empty_scores(qlens, scoring, local, ends[2] or ends[3])[:, None]
        width[:, dead] = 8
    if len(live_queries) < Q:  # empty queries
        dead = qlens == 0
        scores[dead, :] = _empty_scores(lengths, scoring, local, ends[0] or ends[1])[None, :]
        width[dead, :] = 8
    if not live_lanes.size or not live_queries.size:
        return BlockScores(scores, width)
    if local:

        def one_pass(w, sub, sub_lengths, qsel):
            got, sat = run_pass(w, sub, sub_lengths, queries, qsel, scoring, True, ends)
            return (got,), sat

        # Empty targets keep their lanes: an all-padding lane scores 0, as an empty target
        # does locally, and the block's own arrays need no copy (the lane-group cache's).
        live_lanes = np.arange(W)
        todo = local_passes(
            scoring, queries, block.codes, lengths, live_lanes, live_queries, (scores,), width,
            one_pass,
        )  # fmt: skip
        leftover = [(q, live_lanes[lane]) for qsel, lanes in todo for q in qsel for lane in lanes]
        if leftover:
            _scalar_pairs(
                leftover, block.codes, lengths, queries, scoring, local, ends, scores, width
            )
        return BlockScores(scores, width)

    all_live = len(live_lanes) == W
    codes = block.codes if all_live else block.codes[:, live_lanes]
    sub_lens = lengths[live_lanes]
    rows = np.arange(Q) if len(live_queries) == Q else live_queries
    n_max = int(sub_lens.max())
    by_width: dict[int, list[int]] = {}
    for q in rows:
        w = global_width(scoring, int(qlens[q]), n_max, task.mode, len(live_lanes))
        by_width.setdefault(w, []).append(q)
    for w, qs in sorted(by_width.items()):
        qsel = np.asarray(qs, dtype=np.int64)
        if w == 64:
            pairs = [(q, lane) for q in qsel for lane in live_lanes]
            _scalar_pairs(pairs, block.codes, lengths, queries, scoring, local, ends, scores, width)
            continue
        got, _ = run_pass(w, codes, sub_lens, queries, qsel, scoring, False, ends)
        if all_live:
            scores[qsel] = got
            width[qsel] = w
        else:
            scores[np.ix_(qsel, live_lanes)] = got
            width[np.ix_(qsel, live_lanes)] = w
    return BlockScores(scores, width)


#: Saturated groups with fewer lanes than this are recomputed pair by pair in the striped
#: int16 kernel (one useful lane in a 32-lane inter-sequence pass costs about 8x more).
STRIPED_MAX_LANES = 8


def local_passes(
    scoring, queries, codes, sub_lens, live_lanes, live_queries, outs, width, one_pass,
    striped=None, few_striped=True,
):  # fmt: skip
    """The local passes over a block's live lanes, narrowest width first.

    ``one_pass(w, codes, lengths, qsel)`` scores queries ``qsel`` against lanes at width w
    and returns ``(values, saturated)``: ``values`` [S, L] arrays written, where not
    saturated, into the matching ``outs`` (the first the scores) at the live lanes; ``width``
    records w. Saturated groups with few lanes go one pair at a time to the striped kernel
    (``striped(groups)`` hears which), unless ``few_striped`` is false. Returns the groups
    ``(qsel, lanes)`` still saturated after the widest pass.
    """
    scores = outs[0]
    todo = [(live_queries, np.arange(len(live_lanes)))]
    for step, w in enumerate(_local_widths(scoring, len(live_lanes) > 32)):
        next_todo = []
        if w == 16 and step > 0 and few_striped:  # few saturated lanes: one pair a pass
            todo, few = _split_few(todo)
            next_todo.extend(
                _striped_pairs(few, codes, sub_lens, live_lanes, queries, scoring, scores, width)
            )
            if striped is not None:
                striped(few)
        for qsel, lanes in todo:
            whole = lanes.size == len(live_lanes)
            sub = codes if whole else np.ascontiguousarray(codes[:, lanes])
            got, sat = one_pass(w, sub, sub_lens[lanes], qsel)
            cols = live_lanes[lanes]
            if len(qsel) == scores.shape[0] and len(cols) == scores.shape[1]:
                # every query and lane (a block's first pass): plain copies, saturated pairs
                # included (the wider passes rewrite them)
                for out, values in zip(outs, got, strict=True):
                    out[...] = values
                width[...] = w
                if sat.any():
                    next_todo.extend(_group_saturated(qsel, lanes, sat))
                continue
            if not sat.any():
                where = np.ix_(qsel, cols)
                for out, values in zip(outs, got, strict=True):
                    out[where] = values
                width[where] = w
                continue
            for row, q in enumerate(qsel):
                ok = ~sat[row]
                for out, values in zip(outs, got, strict=True):
                    out[q, cols[ok]] = values[row, ok]
                width[q, cols[ok]] = w
            next_todo.extend(_group_saturated(qsel, lanes, sat))
        todo = next_todo
        if not todo:
            break
    return todo


def _split_few(todo):
    """Split saturated groups into (inter-sequence groups, groups for the striped kernel)."""
    many = [(qsel, lanes) for qsel, lanes in todo if len(lanes) >= STRIPED_MAX_LANES]
    few = [(qsel, lanes) for qsel, lanes in todo if len(lanes) < STRIPED_MAX_LANES]
    return many, few


def _striped_pairs(groups, codes, sub_lens, live_lanes, queries, scoring, scores, width):
    """Striped int16 local scores of single pairs; return the still-saturated groups."""
    from .striped import local_score

    matrix = scoring.matrix.astype(np.int64)
    o, e = scoring.gap_open, scoring.gap_extend
    again = []
    for qsel, lanes in groups:
        for q in qsel:
            a = queries.codes[q, : queries.lengths[q]]
            still = []
            for lane in lanes:
                b = np.ascontiguousarray(codes[: sub_lens[lane], lane])
                value, saturated = local_score(a, b, matrix, o, e)
                if saturated:
                    still.append(lane)
                else:
                    scores[q, live_lanes[lane]] = value
                    width[q, live_lanes[lane]] = 16
            if still:
                again.append((np.array([q], dtype=np.int64), np.asarray(still, dtype=np.int64)))
    return again


@lru_cache(maxsize=64)
def _local_widths(scoring, wide: bool) -> tuple[int, ...]:
    """The widths a local pass runs at, narrowest first (int8 only for more than 32 lanes)."""
    widths = [w for w in (8, 16, 32) if local_width_ok(scoring, w)]
    if widths and widths[0] == 8 and not wide:
        widths = widths[1:]
    return tuple(widths)


def _group_saturated(qsel, lanes, sat):
    """Regroup saturated pairs: queries that saturated on the same lanes run together."""
    groups: dict[bytes, list[int]] = {}
    for row, q in enumerate(qsel):
        if sat[row].any():
            groups.setdefault(sat[row].tobytes(), []).append(q)
    out = []
    for key, qs in groups.items():
        mask = np.frombuffer(key, dtype=bool)
        out.append((np.asarray(qs, dtype=np.int64), lanes[mask]))
    return out
