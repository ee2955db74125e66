"""PaPaRa traceback for the ``numba`` backend: the chosen (read, edge) pairs only.

:func:`papara_align` fills one pair with the bits of spec §6 (scalar Numba) and walks back
exactly as :func:`dpalign.reference.papara_traceback`; :func:`papara_align_many` does the same
for many (read, edge) pairs, 32 pairs per vector.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..scoring import PaparaMaxForm, PaparaScoring
from .papara_score import _DTYPES, LANES, kernel_width
from .threads import map_threads
from .vectors import (
    vadd,
    vand,
    veq,
    vge,
    vgt,
    vload32,
    vmax,
    vor,
    vselect,
    vsplat32,
    vstore32,
    vstore_u8,
    vsub,
)

# --------------------------------------------------------------------------------------------
# Traceback: one read against one profile
# --------------------------------------------------------------------------------------------

E_EXT, F_EXT, H_FROM_E, H_FROM_F = 1, 2, 4, 8  # spec §6, as in dpalign.reference
_OP_M, _OP_R, _OP_I = 0, 1, 2
_OP_LETTERS = "MRI"
_OP_TABLE = bytes.maketrans(bytes([_OP_M, _OP_R, _OP_I]), _OP_LETTERS.encode())


@njit(nogil=True, cache=True)
def _fill_bits(states, flags, read, consts, bits):
    """Fill one pair with the unified recurrence; return (score, end_col, end_row).

    ``consts`` = (match, mismatch, cgap, e_open, e_ext, f_open, f_ext, border0, border_step,
    last_column, negate). ``bits[j, i]`` receives the traceback bits of spec §6.
    """
    ma, mis, cg, eo, ee, fo, fe, b0, bs, last_col, negate = consts
    n = states.size
    m = read.size
    neg = -(2**40)
    h_up = np.zeros(n, dtype=np.int64)
    f_up = np.full(n, neg, dtype=np.int64)
    best, end_col, end_row = neg, 0, 0
    for j in range(m):
        b = read[j]
        h_left = b0 + j * bs
        h_diag = b0 + (j - 1) * bs
        e_left = neg
        for i in range(n):
            flagged = flags[i] != 0
            sm = h_diag + (ma if (states[i] & b) != 0 else mis) + (cg if flagged else 0)
            if flagged:
                e_ext, e_open = e_left, h_left
            else:
                e_ext, e_open = e_left + ee, h_left + eo
            e = max(e_ext, e_open)
            f_ext, f_open = f_up[i] + fe, h_up[i] + fo
            f = max(f_ext, f_open)
            take_f = f > e and f > sm
            take_e = not take_f and e >= f and e > sm
            h = f if take_f else (e if take_e else sm)
            bits[j, i] = (
                (E_EXT if e_ext > e_open else 0)
                | (F_EXT if f_ext > f_open else 0)
                | (H_FROM_E if take_e else 0)
                | (H_FROM_F if take_f else 0)
            )
            if (j == m - 1 or (last_col and i == n - 1)) and h > best:
                best, end_col, end_row = h, i, j
            h_diag = h_up[i]
            h_up[i] = h
            f_up[i] = f
            h_left = h
            e_left = e
    return (-best if negate else best), end_col, end_row


@njit(nogil=True, cache=True)
def _trace(bits, end_col, end_row):
    """Walk back from the end cell (spec §6); return op codes in forward order."""
    m, n = bits.shape
    ops = np.empty(n + m, dtype=np.uint8)
    k = _trace_lane(bits.reshape(m * n), n, 1, 0, end_col, end_row, m, ops)
    return ops[:k][::-1]


def _consts(plan: PaparaMaxForm) -> np.ndarray:
    return np.asarray(
        [
            plan.match,
            plan.mismatch,
            plan.cgap,
            plan.e_open,
            plan.e_ext,
            plan.f_open,
            plan.f_ext,
            plan.border0,
            plan.border_step,
            int(plan.last_column),
            int(plan.negate),
        ],
        dtype=np.int64,
    )


def papara_align(
    states: np.ndarray, flags: np.ndarray, read: np.ndarray, scoring: PaparaScoring
) -> tuple[int, str]:
    """Score and trace back one read against one profile (spec §5, §6, §8).

    Parameters
    ----------
    states, flags : ndarray (n,)
        The edge profile: states (uint8 DNA / uint32 protein bit sets) and gap flags.
    read : ndarray (m,)
        Read states.
    scoring : PaparaScoring

    Returns
    -------
    (int, str)
        The score and the ops (``M``, ``R``, ``I``), identical to
        :func:`dpalign.reference.papara_align`.
    """
    states = np.ascontiguousarray(states)
    read = np.ascontiguousarray(read, dtype=states.dtype)
    if len(states) == 0 or len(read) == 0:
        raise ValueError("the PaPaRa recurrence needs a non-empty read and reference")
    bits = np.empty((len(read), len(states)), dtype=np.uint8)
    score, end_col, end_row = _fill_bits(
        states, np.ascontiguousarray(flags, dtype=np.uint8), read, _consts(scoring.max_form()), bits
    )
    ops = _trace(bits, end_col, end_row)
    return int(score), ops.tobytes().translate(_OP_TABLE).decode()


# --------------------------------------------------------------------------------------------
# Traceback of many pairs at once: lane w holds (read w, its best edge)
# --------------------------------------------------------------------------------------------

#: Largest traceback-bit matrix (bytes) of one group of LANES pairs; longer pairs go alone.
GROUP_BITS_LIMIT = 1 << 27


@njit(nogil=True, cache=True)
def _trace_lane(bits, n, lanes, lane, end_col, end_row, m, ops):
    """Walk back from the end cell (spec §6) of lane ``lane`` of ``lanes`` interleaved pairs.

    ``bits[(j * n + i) * lanes + lane]`` is cell (j, i) of the lane's pair. Writes the ops in
    reverse order and returns their count.
    """
    k = 0
    i, j = n - 1, m - 1
    while i > end_col:
        ops[k] = _OP_R
        k += 1
        i -= 1
    while j > end_row:
        ops[k] = _OP_I
        k += 1
        j -= 1
    state = 0
    while i >= 0 and j >= 0:
        cell = bits[(j * n + i) * lanes + lane]
        if state == 0:
            if cell & H_FROM_F:
                state = 2
            elif cell & H_FROM_E:
                state = 1
            else:
                ops[k] = _OP_M
                k += 1
                i -= 1
                j -= 1
        elif state == 2:
            ops[k] = _OP_I
            k += 1
            j -= 1
            state = 2 if cell & F_EXT else 0
        else:
            ops[k] = _OP_R
            k += 1
            i -= 1
            state = 1 if cell & E_EXT else 0
    while i >= 0:
        ops[k] = _OP_R
        k += 1
        i -= 1
    while j >= 0:
        ops[k] = _OP_I
        k += 1
        j -= 1
    return k


@njit(nogil=True, cache=True)
def _align_group(st, cgm, cgx, goa, gea, rd, mlen, row_ends, consts, work, bits, scores, ops):
    """Fill LANES pairs with traceback bits, find each end cell, trace back.

    Flat ``[.., LANES]`` tables: ``st`` profile states, ``cgm``/``cgx`` the diagonal score of a
    match / mismatch (cgap included), ``goa``/``gea`` E's open/extend per column; ``rd[j, w]``
    the state of read w at row j (0 past its end); ``mlen`` read lengths (0: unused lane);
    ``row_ends[j]`` whether some read ends at row j; ``consts`` = (f_open, f_ext, border0,
    border_step, last_column, negate). ``work`` holds 3n + m_max vectors of scratch; ``bits``
    ``m_max * n * LANES`` bytes. Writes ``scores[w]`` and the reversed ops of lane w to
    ``ops[w]``, returning the op counts.
    """
    n = goa.size // LANES
    m_max = rd.size // LANES
    fo, fe, b0, bs, last_col, negate = consts
    hrow, frow, lastrow, lastcol = 0, n * LANES, 2 * n * LANES, 3 * n * LANES
    zero = vsplat32(work, 0)
    one, two, four, eight = (
        vsplat32(work, E_EXT),
        vsplat32(work, F_EXT),
        vsplat32(work, H_FROM_E),
        vsplat32(work, H_FROM_F),
    )
    fov = vsplat32(work, fo)
    fev = vsplat32(work, fe)
    mlast = vadd(vload32(mlen, 0), vsplat32(work, -1))
    # row -1: H = 0, F = -inf (any value whose extension loses to the opening, no wrap)
    ftop = vsplat32(work, fo - fe - 1)
    for i in range(n):
        vstore32(work, hrow + i * LANES, zero)
        vstore32(work, frow + i * LANES, ftop)
    e0base = vadd(vadd(vload32(goa, 0), vsplat32(work, -1)), vsub(zero, vload32(gea, 0)))
    for j in range(m_max):
        b = vload32(rd, j * LANES)
        hl = vsplat32(work, b0 + j * bs)
        hd = vsplat32(work, b0 + (j - 1) * bs)
        el = vadd(hl, e0base)  # E[j][-1]: its extension always loses to the opening
        base = j * n * LANES
        for i in range(n):
            x = i * LANES
            miss = veq(vand(vload32(st, x), b), zero)
            sm = vadd(hd, vselect(miss, vload32(cgx, x), vload32(cgm, x)))
            e_ext = vadd(el, vload32(gea, x))
            e_open = vadd(hl, vload32(goa, x))
            e = vmax(e_ext, e_open)
            hu = vload32(work, hrow + x)
            f_ext = vadd(vload32(work, frow + x), fev)
            f_open = vadd(hu, fov)
            f = vmax(f_ext, f_open)
            take_f = vand(vgt(f, e), vgt(f, sm))
            take_e = vselect(take_f, zero, vand(vge(e, f), vgt(e, sm)))
            h = vselect(take_f, f, vselect(take_e, e, sm))
            bit = vor(
                vor(vand(vgt(e_ext, e_open), one), vand(vgt(f_ext, f_open), two)),
                vor(vand(take_e, four), vand(take_f, eight)),
            )
            vstore_u8(bits, base + x, bit)
            hd = hu
            vstore32(work, hrow + x, h)
            vstore32(work, frow + x, f)
            hl = h
            el = e
        vstore32(work, lastcol + j * LANES, hl)
        if row_ends[j]:
            ending = veq(vsplat32(work, j), mlast)
            for i in range(n):
                x = i * LANES
                kept = vload32(work, lastrow + x)
                vstore32(work, lastrow + x, vselect(ending, vload32(work, hrow + x), kept))
    counts = np.zeros(LANES, dtype=np.int64)
    for w in range(LANES):
        m = mlen[w]
        if m == 0:
            continue
        # the first maximum in row-major order over the last column and the last row
        best, end_col, end_row = np.int64(-(2**62)), 0, 0
        if last_col:
            for j in range(m - 1):
                value = np.int64(work[lastcol + j * LANES + w])
                if value > best:
                    best, end_col, end_row = value, n - 1, j
        for i in range(n):
            value = np.int64(work[lastrow + i * LANES + w])
            if value > best:
                best, end_col, end_row = value, i, m - 1
        scores[w] = -best if negate else best
        counts[w] = _trace_lane(bits, n, LANES, w, end_col, end_row, m, ops[w])
    return counts


def _group_tables(states, flags, edges, reads, plan, bits, m_max):
    """The flat tables of :func:`_align_group` for up to LANES (edge, read) pairs."""
    dtype = _DTYPES[bits]
    n = states.shape[1]
    used = len(edges)
    st = np.zeros((n, LANES), dtype=dtype)
    fl = np.zeros((n, LANES), dtype=bool)
    st[:, :used] = states[edges].T
    fl[:, :used] = flags[edges].T != 0
    rd = np.zeros((m_max, LANES), dtype=dtype)
    mlen = np.zeros(LANES, dtype=dtype)
    for lane, read in enumerate(reads):
        rd[: len(read), lane] = read
        mlen[lane] = len(read)
    row_ends = np.zeros(m_max, dtype=np.bool_)
    row_ends[mlen[:used].astype(np.int64) - 1] = True
    cg = np.where(fl, plan.cgap, 0)
    tables = (
        st,
        plan.match + cg,
        plan.mismatch + cg,
        np.where(fl, 0, plan.e_open),
        np.where(fl, 0, plan.e_ext),
        rd,
    )
    flat = [np.ascontiguousarray(t, dtype=dtype).ravel() for t in tables]
    return (*flat, mlen, row_ends)


_LETTER_CODES = np.frombuffer(_OP_LETTERS.encode(), dtype=np.uint8).copy()


@njit(nogil=True, cache=True)
def _trim_lanes(ops, counts, used, leads, cores, core_lengths):
    """Lane w's reversed ops ``ops[w, :counts[w]]`` as the number of leading ``R`` (in
    forward order) and the forward ``M``/``R``/``I`` letters from the first op that is not
    ``R`` to the last (``cores[w, :core_lengths[w]]``): the trimmed form the writer keeps."""
    for w in range(used):
        c = counts[w]
        lo = 0
        while lo < c and ops[w, c - 1 - lo] == _OP_R:
            lo += 1
        hi = c
        while hi > lo and ops[w, c - hi] == _OP_R:
            hi -= 1
        leads[w] = lo
        for f in range(lo, hi):
            cores[w, f - lo] = _LETTER_CODES[ops[w, c - 1 - f]]
        core_lengths[w] = hi - lo


def trim_op_string(ops: str) -> tuple[int, bytes]:
    """An op string as (leading ``R`` count, the ops from the first non-``R`` to the last)."""
    core = ops.lstrip("R")
    return len(ops) - len(core), core.rstrip("R").encode("ascii")


def papara_align_many(
    states: np.ndarray,
    flags: np.ndarray,
    reads: list[np.ndarray],
    edges: np.ndarray,
    scoring: PaparaScoring,
    threads: int | None = None,
    trimmed: bool = False,
):
    """Score and trace back many reads, each against its own edge, LANES pairs at a time.

    Groups of LANES pairs run on ``threads`` threads at once (the group kernel releases the
    GIL).

    Parameters
    ----------
    states, flags : ndarray (E, n)
        Edge profiles.
    reads : list of ndarray
        Read states.
    edges : ndarray (len(reads),)
        The edge of each read; -1 (or an empty read) skips the read.
    scoring : PaparaScoring
    threads : int, optional
        Worker threads (default: ``config.cpu_threads()``, one per core).

    trimmed : bool
        Return the ops trimmed (see below) rather than as strings: the form the writer keeps,
        made here without the GIL instead of cutting ~3,000-letter strings one by one.

    Returns
    -------
    (ndarray, list) or (ndarray, ndarray, list)
        Scores (int64, 0 where skipped) and ops (None where skipped), each identical to
        :func:`dpalign.reference.papara_align` of the read against its edge. With
        ``trimmed``: scores, the leading ``R`` count of each read's ops (int64; n where
        skipped) and the ops from the first non-``R`` to the last as ASCII bytes (``b""``
        where skipped).
    """
    states = np.asarray(states)
    flags = np.asarray(flags)
    edges = np.asarray(edges, dtype=np.int64)
    n = states.shape[1] if states.ndim == 2 else 0
    scores = np.zeros(len(reads), dtype=np.int64)
    ops: list = [b"" if trimmed else None] * len(reads)
    leads = np.full(len(reads), n, dtype=np.int64)
    lengths = np.fromiter((len(r) for r in reads), dtype=np.int64, count=len(reads))
    todo = np.flatnonzero((edges >= 0) & (lengths > 0))

    def done():
        return (scores, leads, ops) if trimmed else (scores, ops)

    if n == 0 or todo.size == 0:
        return done()
    # (f_open, f_ext, border0, border_step, last_column, negate): the F column and the end
    consts = _consts(scoring.max_form())[5:]
    plan = scoring.max_form()
    wide_states = states.dtype.itemsize > 1  # protein bit sets need 32-bit lanes for the AND
    if wide_states:
        bits_of = np.full(todo.size, 32, dtype=np.int64)
    else:
        widths = {m: kernel_width(scoring, int(m)) for m in np.unique(lengths[todo])}
        bits_of = np.fromiter((widths[m] for m in lengths[todo]), np.int64, count=todo.size)
    order = np.lexsort((lengths[todo], bits_of))
    todo, bits_of = todo[order], bits_of[order]
    # groups of up to LANES pairs of one lane width (each width's run cut every LANES pairs)
    groups: list[tuple[np.ndarray, int]] = []
    for run in np.split(np.arange(todo.size), np.flatnonzero(np.diff(bits_of)) + 1):
        for k in range(0, run.size, LANES):
            groups.append((todo[run[k : k + LANES]], int(bits_of[run[0]])))

    def one(item: tuple[np.ndarray, int]) -> None:
        group, lane_bits = item
        m_max = int(lengths[group].max())
        if m_max * n * LANES > GROUP_BITS_LIMIT:
            for k in group:  # very long pairs: the plain single-pair fill, one at a time
                scores[k], ops[k] = papara_align(
                    states[edges[k]], flags[edges[k]], reads[k], scoring
                )
                if trimmed:
                    leads[k], ops[k] = trim_op_string(ops[k])
            return
        tables = _group_tables(
            states, flags, edges[group], [reads[k] for k in group], plan, lane_bits, m_max
        )
        work = np.empty((3 * n + m_max) * LANES, dtype=_DTYPES[lane_bits])
        bitmat = np.empty(m_max * n * LANES, dtype=np.uint8)
        out = np.zeros(LANES, dtype=np.int64)
        buf = np.empty((LANES, n + m_max), dtype=np.uint8)
        counts = _align_group(*tables, consts, work, bitmat, out, buf)
        scores[group] = out[: len(group)]
        if trimmed:
            lead = np.empty(LANES, dtype=np.int64)
            core = np.empty((LANES, n + m_max), dtype=np.uint8)
            core_len = np.empty(LANES, dtype=np.int64)
            _trim_lanes(buf, counts, len(group), lead, core, core_len)
            leads[group] = lead[: len(group)]
            for lane, k in enumerate(group.tolist()):
                ops[k] = core[lane, : core_len[lane]].tobytes()
            return
        for lane, k in enumerate(group):
            ops[k] = buf[lane, : counts[lane]][::-1].tobytes().translate(_OP_TABLE).decode()

    map_threads(one, groups, threads)
    return done()
