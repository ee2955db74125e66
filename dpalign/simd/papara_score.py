"""PaPaRa block scoring for the ``numba`` backend.

Scoring (:func:`score_block`) runs one read at a time against the 32 profiles of a block (the
inter-reference layout: lane w of every vector is profile w), with LLVM ``<32 x i16>`` vectors
(``<32 x i32>`` for reads too long for 16 bits; :func:`kernel_width`). It costs seven vector
operations per cell (32 cells), thanks to:

* **Per-read profiles.** For every distinct read state s the block gets one table
  ``P[s, i, w] = match * (a[i, w] & s != 0) + match_cgap * f[i, w]`` (shifted, see below), so
  the diagonal is one add with a memory operand.
* **Narrow blocks.** A lane group of <= 16 live lanes holds several reads per vector; its
  packed strips pick each cell's diagonal score (hit or miss) by testing the profile's state
  bits against a per-row vector of the reads' states (two more operations per cell, no table
  per combination of the reads' states).
* **Memory layout.** Tables and buffers start on 64-byte boundaries (NumPy's do not, and a
  misaligned zmm load splits two cache lines), and the H/F row buffers sit where the tables'
  loads do not alias their stores modulo 4 KiB.
* **Strips and chunks.** A sweep computes 8 read rows at once (then 4, then 1 for the rest):
  their H and E stay in registers, the H/F row between strips is loaded and stored once per
  strip. The reference is cut into chunks of :data:`CHUNK` columns that every strip of a read
  sweeps before the next chunk, so a chunk's profile and row stay in L1.
* **A shifted frame.** A value X of read row j, column i is stored as ``X - j*s - cs[i] + c0``:
  s = ``max(GE, GO)`` makes F's extension free, and since H >= F, ``F = max(F_up, T_up + GO -
  s)`` with ``T = max(SM, E)``; cs (E's extensions summed since the chunk's first column) makes
  E's extension free, ``E = max(E_left, H_left + go - ge)``. Both shifts move values without
  changing any comparison; c0 centres the range so that it fits the lane width; the scores are
  shifted back exactly.

``bmc2012`` (lower is better) runs on the same code by negation: ``-S`` follows the papara2
recurrence with F = I (open = extend = -3), E = D (open -4, extend -1; 0 on flagged columns), a
diagonal of ``-(mismatch + CG)``, left border ``-3(j+1)`` and the score taken over the last row
only (see :meth:`~dpalign.scoring.PaparaScoring.max_form`).

The traceback of the chosen pairs is in :mod:`dpalign.simd.papara_trace`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
from numba import njit

from ..contract import BlockScores, QueryBatch, ReferenceBlock, Task
from ..errors import InputError
from ..scoring import WIDTH_RANGE, PaparaMaxForm, PaparaScoring
from .papara_strips import _pstrip1, _pstrip4, _pstrip8, _strip1, _strip4, _strip8
from .vectors import (
    vadd,
    vlane,
    vload32,
    vmax,
    vsplat32,
    vstore32,
    vsub,
)

LANES = 32
#: Columns per chunk: a chunk's profile and H/F row stay in L1 while every strip of a read
#: sweeps it; E's column shift restarts at every chunk, so its range stays small.
CHUNK = 64
_DTYPES = {16: np.int16, 32: np.int32}

# --------------------------------------------------------------------------------------------
# The frame of the max form (scoring.PaparaMaxForm) and the lane width it needs
# --------------------------------------------------------------------------------------------


def _frame(plan: PaparaMaxForm, m: int, bits: int) -> int | None:
    """Offset c0 so that every value of the shifted frame fits ``bits``, or None.

    Stored values are ``X - j * s - cs[i] + c0`` (s the row shift, cs the column shift of E's
    extensions inside a chunk, both <= 0). The slack covers every candidate (a value plus one
    or two scoring constants) before the max.
    """
    lo = plan.lo + plan.lo_per_row * m
    hi = plan.hi + plan.hi_per_row * m - plan.row_shift * max(m - 1, 0) - plan.e_ext * CHUNK
    consts = (plan.match, plan.mismatch, plan.cgap, plan.e_open, plan.e_ext, plan.f_open)
    slack = 2 * sum(abs(c) for c in consts) + 2 * abs(plan.f_ext) + 8
    lo, hi = lo - slack, hi + slack
    wlo, whi = WIDTH_RANGE[bits]
    if hi - lo > whi - wlo:
        return None
    return (wlo + whi) // 2 - (lo + hi) // 2


def kernel_width(scoring: PaparaScoring, m: int) -> int:
    """The lane width (16 or 32) the scoring kernel uses for a read of length ``m``.

    ``scoring.width_for(m)``, widened where the shifted frame needs more room (only near the
    16-bit limit, or with unusual scores such as a negative match).
    """
    plan = scoring.max_form()
    for bits in (16, 32):
        if bits >= scoring.width_for(m) and _frame(plan, m, bits) is not None:
            return bits
    raise InputError(f"a read of length {m:,} is too long for 32-bit PaPaRa scores")


# --------------------------------------------------------------------------------------------
# The scoring kernel
# --------------------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _sweep_packed(prof, dea, hrow, frow, c, stop, rvec, r, gof, bh, be, m, tvec, d):
    """Every strip of one packed read tuple over columns c..stop-1 (see :func:`_score_reads`)."""
    j0 = np.int64(0)
    while j0 < m:
        rows = m - j0
        if rows >= 8:
            d = _pstrip8(prof, dea, hrow, frow, c, stop, rvec, r, gof, bh, be, j0, tvec, d)
            j0 += 8
        elif rows >= 4:
            d = _pstrip4(prof, dea, hrow, frow, c, stop, rvec, r, gof, bh, be, j0, tvec, d)
            j0 += 4
        else:
            d = _pstrip1(prof, dea, hrow, frow, c, stop, rvec, r, gof, bh, be, j0, tvec, d)
            j0 += 1


@njit(nogil=True, cache=True)
def _score_reads(prof, dea, cs, reads, rvec, lengths, select, params, hrow, frow, bh, be, out):
    """Score the reads ``select`` against one lane group; write ``out[q, :LANES]``.

    Flat ``[.., LANES]`` tables: ``prof[(s * n + i) * LANES + w]`` the frame's diagonal score
    of read state index s at column i (``reads[q, j]`` the state index of read q's row j);
    ``dea`` E's open-minus-extend per column; ``cs`` the column shift (sum of E's extension
    since the chunk's first column). ``params`` = (f_open - s, s, border0, border_step, c0,
    last_column, negate, chunk, packed, mrow) with s the row shift. Packed (lanes that hold
    several reads, see :func:`_packed_tables`): ``prof`` holds the miss and hit scores and
    the profile's state bits, ``rvec[((q * mrow) + j) * LANES + w]`` the read state of row j
    of "read" q in lane w, and ``reads`` is not read.
    ``hrow``/``frow`` hold one chunk of the H/F row between strips, ``bh``/``be`` the H/E
    column between chunks for rows -1..m-1.
    """
    n = dea.size // LANES
    gofs, shift, border0, bstep, c0, last_col, negate, chunk, packed, mrow = params
    gof = vsplat32(hrow, gofs)
    top = shift + c0  # H'[-1][i] (also H'[-1][-1])
    step = bstep - shift  # the left border H'[j][-1] = border0 + c0 + j * step
    de0 = vload32(dea, 0)
    for q in select:
        m = lengths[q]
        vstore32(bh, 0, vsplat32(hrow, top))
        for j in range(m):
            hb = vsplat32(hrow, border0 + c0 + j * step)
            vstore32(bh, (j + 1) * LANES, hb)
            vstore32(be, (j + 1) * LANES, vadd(vadd(hb, de0), vsplat32(hrow, -1)))
        lastmax = vsplat32(hrow, 0)
        for c in range(0, n, chunk):
            stop = min(c + chunk, n)
            for i in range(c, stop):
                x = i * LANES
                vstore32(hrow, (i - c) * LANES, vsub(vsplat32(hrow, top), vload32(cs, x)))
                vstore32(
                    frow, (i - c) * LANES, vsub(vsplat32(hrow, top + gofs - 1), vload32(cs, x))
                )
            tvec = vload32(cs, (stop - 1) * LANES)
            d = vload32(bh, 0)  # the diagonal entering the next strip
            j0 = np.int64(0)  # not a literal: one specialisation of the strips
            if packed:
                r = q * mrow
                _sweep_packed(prof, dea, hrow, frow, c, stop, rvec, r, gof, bh, be, m, tvec, d)
            while not packed and j0 < m:
                rows = m - j0
                if rows >= 8:
                    d = _strip8(prof, dea, hrow, frow, c, stop, reads, q, gof, bh, be, j0, tvec, d)
                    j0 += 8
                elif rows >= 4:
                    d = _strip4(prof, dea, hrow, frow, c, stop, reads, q, gof, bh, be, j0, tvec, d)
                    j0 += 4
                else:
                    d = _strip1(prof, dea, hrow, frow, c, stop, reads, q, gof, bh, be, j0, tvec, d)
                    j0 += 1
            # the last row, back from the chunk's column frame
            for i in range(c, stop):
                real = vadd(vload32(hrow, (i - c) * LANES), vload32(cs, i * LANES))
                lastmax = real if i == 0 else vmax(lastmax, real)
        best = vadd(lastmax, vsplat32(hrow, (m - 1) * shift - c0))
        if last_col:
            # H[j][n-1] = H'[j][n-1] + j * s - c0 (exact in wrapping arithmetic)
            for j in range(m):
                real = vadd(vload32(bh, (j + 1) * LANES), vsplat32(hrow, j * shift - c0))
                best = vmax(best, real)
        for w in range(LANES):
            value = vlane(best, w)
            out[q, w] = -value if negate else value


# --------------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------------


def _lane_groups(block: ReferenceBlock):
    """Column range (n) and lane groups of ``LANES`` lanes covering the block's live lanes."""
    live = np.flatnonzero(block.lengths > 0)
    if live.size == 0:
        return 0, []
    n = int(block.lengths[live].max())
    if np.any(block.lengths[live] != n):
        raise ValueError("PaPaRa blocks need lanes of equal length (one profile per edge)")
    starts = sorted({int(w) // LANES * LANES for w in live})
    return n, starts


def _frame_tables(block, start, n, plan, chunk, width):
    """The profile states ``[n, width]`` from lane ``start``, the frame's diagonal score of a
    miss at each column (``[n, width]``, a hit scores ``match - mismatch`` more), E's open -
    extend and the column shift."""
    stop = min(start + width, block.width)
    states = np.zeros((n, width), dtype=block.codes.dtype)
    flags = np.zeros((n, width), dtype=bool)
    states[:, : stop - start] = block.codes[:n, start:stop]
    if block.flags is not None:
        flags[:, : stop - start] = block.flags[:n, start:stop] != 0
    go = np.where(flags, 0, plan.e_open)
    ge = np.where(flags, 0, plan.e_ext)
    # column shift: E's extensions summed from the start of each chunk (restarts per chunk)
    cs = np.cumsum(ge, axis=0)
    starts = np.arange(0, n, chunk)
    before = np.zeros((len(starts), width), dtype=np.int64)
    before[1:] = cs[starts[1:] - 1]
    cs = cs - np.repeat(before, np.diff(np.append(starts, n)), axis=0)
    # the frame: row j+1 sits -s above row j; column i sits -ge[i] above column i-1
    miss = plan.mismatch + np.where(flags, plan.cgap, 0) - plan.row_shift - ge
    return states, miss, go - ge, cs


def _lane_tables(block, start, n, plan, read_states, chunk, width):
    """Tables of ``width`` lanes from lane ``start``: the diagonal profile per read state
    ``[S, n, width]``, E's open - extend ``[n, width]`` and the column shift ``[n, width]``."""
    states, miss, dea, cs = _frame_tables(block, start, n, plan, chunk, width)
    hit = (states[None, :, :] & read_states[:, None, None]) != 0
    prof = miss[None] + np.where(hit, plan.match - plan.mismatch, 0)
    return prof, dea, cs


def _packed_tables(block, start, n, plan, bits, k, sub):
    """Flat tables for k reads per vector (lanes ``t * sub + w``: read t against profile
    ``start + w``): the miss and hit scores and the profile's state bits (``[3, n, LANES]``),
    E's open - extend and the column shift, each of the ``sub`` lanes repeated k times (the
    lanes past ``k * sub`` score nothing: no state bits, zero costs)."""
    states, miss, dea, cs = _frame_tables(block, start, n, plan, CHUNK, sub)
    scores = np.stack([miss, miss + (plan.match - plan.mismatch), states.astype(np.int64)])
    out = []
    for table in (scores, dea, cs):
        lanes = np.zeros(table.shape[:-1] + (LANES,), dtype=np.int64)
        lanes[..., : k * sub] = np.tile(table, (1,) * (table.ndim - 1) + (k,))
        out.append(_flat(lanes, bits))
    return tuple(out)


#: How many columns ahead of a store the core may load (the loads of later iterations run
#: while the stores of earlier ones wait in the store buffer).
ALIAS_COLUMNS = 10


def _row_buffers(bases, size, dtype):
    """Two row buffers (``hrow``, ``frow``) of ``size`` lanes whose addresses do not alias the
    table rows ``bases`` (byte addresses of tables read column by column) modulo 4 KiB.

    The strip loops read column i of every table while the stores of columns i - 1, i - 2...
    to ``hrow``/``frow`` may still wait in the store buffer; a load whose address matches such
    a store's in the low 12 bits waits for it (4K aliasing). Every table and both buffers
    advance one column (LANES lanes) per iteration, so whether they collide is fixed by where
    they start: place each buffer so that no table starts 1..ALIAS_COLUMNS columns behind it.
    """
    item = np.dtype(dtype).itemsize
    step = LANES * item
    raw = np.empty(2 * (size * item + 4096) + 4096, dtype=np.uint8)
    origin = raw.ctypes.data
    loads = [int(b) for b in bases]
    chosen = []
    cursor = (-origin) % 4096  # the first 4 KiB boundary in raw
    for _ in range(2):
        best, best_cost = 0, None
        for slot in range(0, 4096, step):
            cost = 0
            for base in loads:
                gap = (slot - base) % 4096  # how far the load trails the store, in bytes
                if 0 < gap <= ALIAS_COLUMNS * step:
                    cost += ALIAS_COLUMNS * step + step - gap
            for prev in chosen:
                gap = (prev - slot) % 4096  # the buffer chosen first is also stored to
                if 0 < gap <= ALIAS_COLUMNS * step:
                    cost += ALIAS_COLUMNS * step + step - gap
            if best_cost is None or cost < best_cost:
                best, best_cost = slot, cost
        start = cursor + best
        cursor += ((best + size * item) // 4096 + 1) * 4096
        chosen.append(origin + start)
        loads.append(origin + start)
    out = []
    for address in chosen:
        start = address - origin
        out.append(raw[start : start + size * item].view(dtype))
    return out


def _aligned_empty(size: int, dtype) -> np.ndarray:
    """An empty 1-D array whose data starts on a 64-byte boundary.

    NumPy's buffers start 16 or 48 bytes past one, and then every 64-byte vector load of a
    table straddles two cache lines (two loads' worth of work each).
    """
    item = np.dtype(dtype).itemsize
    raw = np.empty(size * item + 64, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start : start + size * item].view(dtype)


def _flat(table, bits):
    """``table`` as a flat, 64-byte aligned array of the lane dtype."""
    out = _aligned_empty(np.size(table), _DTYPES[bits])
    out[:] = np.ravel(table)
    return out


#: Lane tables kept across calls (bytes): a worker scoring many read chunks against the same
#: block (the hybrid queue's units) builds each block's tables once. Building them costs
#: ~10 ms per block of 3,000 columns, mostly NumPy calls that hold the GIL, which many worker
#: threads then queue on.
TABLE_CACHE_BYTES = 256 << 20
_table_cache: OrderedDict = OrderedDict()
_table_lock = threading.Lock()
_table_bytes = [0]
_table_builds: dict = {}  # key -> Event of a build under way


def _cached_tables(block, start, n, plan, read_states, bits, sub):
    """``(prof, dea, cs)`` and their flat ``bits``-wide copies for a lane group, cached."""
    key = (id(block), start, n, plan, read_states.tobytes(), bits, sub)
    while True:
        with _table_lock:
            entry = _table_cache.get(key)
            if entry is not None:
                _table_cache.move_to_end(key)
                return entry[1]
            building = _table_builds.get(key)
            if building is None:
                building = _table_builds[key] = threading.Event()
                break
        # the worker threads start on the same block (its query slices): one builds, the
        # others wait for its tables instead of building them again under the GIL
        building.wait()
    try:
        raw = _lane_tables(block, start, n, plan, read_states, CHUNK, sub)
        flat = tuple(_flat(t, bits) for t in raw)
        value = (raw, flat)
        size = sum(t.nbytes for t in raw) + sum(t.nbytes for t in flat)
        with _table_lock:
            _table_cache[key] = (block, value)  # holding the block keeps its id unique
            _table_bytes[0] += size
            while _table_bytes[0] > TABLE_CACHE_BYTES and len(_table_cache) > 1:
                _, (_, (old_raw, old_flat)) = _table_cache.popitem(last=False)
                _table_bytes[0] -= sum(t.nbytes for t in old_raw)
                _table_bytes[0] -= sum(t.nbytes for t in old_flat)
    finally:
        with _table_lock:
            del _table_builds[key]
        building.set()
    return value


#: Read state indices kept across calls (bytes): every block of a run scores the same
#: batch (or the same per-thread slices of it), whose states are found once, not per block.
INDEX_CACHE_BYTES = 64 << 20
_index_cache: OrderedDict = OrderedDict()


def _state_index(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct read states (sorted) and each position's index among them, ``[Q, M]``
    int64: ``np.unique(codes, return_inverse=True)``, by table lookup for 8-bit codes (a
    sort of every character took ~15-30 ms per block for bench_papara's 2,000 reads)."""
    key = id(codes)
    with _table_lock:
        entry = _index_cache.get(key)
        if entry is not None and entry[0] is codes:
            return entry[1]
    if codes.dtype.itemsize == 1:
        present = np.zeros(256, dtype=bool)
        present[codes.ravel()] = True
        states = np.flatnonzero(present).astype(codes.dtype)
        lookup = np.zeros(256, dtype=np.int64)
        lookup[states] = np.arange(len(states))
        value = (states, lookup[codes])
    else:
        states, index = np.unique(codes, return_inverse=True)
        value = (states, index.reshape(codes.shape).astype(np.int64))
    with _table_lock:
        _index_cache[key] = (codes, value)  # holding codes keeps its id from being reused
        while len(_index_cache) > 1 and (
            sum(c.nbytes + v[1].nbytes for c, v in _index_cache.values()) > INDEX_CACHE_BYTES
        ):
            _index_cache.popitem(last=False)
    return value


#: Packing several reads into one vector (see :func:`_pack_reads`) builds one profile per
#: combination of their states; above this many combinations it packs fewer reads.
MAX_COMBOS = 64


def _read_tuples(select, lengths, k):
    """Tuples ``[V, k]`` of k reads of equal length; short tuples repeat their first read."""
    tuples = []
    for m in np.unique(lengths[select]):
        same = select[lengths[select] == m]
        for first in range(0, len(same), k):
            chunk = list(same[first : first + k])
            tuples.append(chunk + [chunk[0]] * (k - len(chunk)))
    return np.asarray(tuples, dtype=np.int64)


def _bits_fit(block, start, codes, bits) -> bool:
    """Whether the state bits of a lane group's profiles and of the reads fit lanes of
    ``bits`` (the packed strips test them there; 20-letter protein sets need 32)."""
    top = max(int(block.codes[:, start : start + LANES].max(initial=0)), int(codes.max(initial=0)))
    return top < 1 << (bits - 1)


def _table_rows(tables, n_rows):
    """Byte addresses of the rows the strips read column by column: ``n_rows`` rows of the
    first table (one per read state, or the packed strips' three), then ``dea``."""
    stride = tables[1].nbytes
    return [tables[0].ctypes.data + r * stride for r in range(n_rows)] + [tables[1].ctypes.data]


def _pack_reads(select, lengths, index, n_states, k):
    """Tuples of k reads of equal length, and their rows as combined state indices.

    A block with at most LANES / k live lanes runs k reads at once: lanes ``t * LANES/k + w``
    hold read t of the tuple against profile w. Short tuples repeat their first read.
    Returns ``(tuples [V, k], combo rows [V, m_max], combos [C, k])`` or None when the reads
    use more than :data:`MAX_COMBOS` combinations.
    """
    tuples = _read_tuples(select, lengths, k)
    # past a read's end every member repeats its first state: no extra combinations
    past = np.arange(index.shape[1])[None, :] >= lengths[tuples[:, 0]][:, None]

    def member(t):
        rows = index[tuples[:, t]]
        return np.where(past, rows[:, :1], rows)

    digits, ids = np.unique(member(0), return_inverse=True)
    digits, ids = digits[:, None], ids.reshape(past.shape)
    for t in range(1, k):
        combos, ids = np.unique(ids * n_states + member(t), return_inverse=True)
        ids = ids.reshape(past.shape)
        if len(combos) > MAX_COMBOS:
            return None
        digits = np.concatenate([digits[combos // n_states], (combos % n_states)[:, None]], axis=1)
    return tuples, ids.astype(np.int64), digits


def _pack_factor(live_lanes: int) -> int:
    k = 1
    while live_lanes <= LANES // (2 * k):
        k *= 2
    return k


def score_block(task: Task, queries: QueryBatch, block: ReferenceBlock) -> BlockScores:
    """Score every read of ``queries`` against every lane of a PaPaRa ``block``.

    Parameters
    ----------
    task : Task
        ``Task(kernel="papara", scoring=PaparaScoring)``.
    queries : QueryBatch
        Read states (uint8 DNA or uint32 protein bit sets).
    block : ReferenceBlock
        Profile states and gap flags, ``[n, W]``; padding lanes have length 0.

    Returns
    -------
    BlockScores
        ``scores[q, w]`` equal to :func:`dpalign.reference.papara_fill` (0 for empty reads and
        padding lanes) and ``width[q, w]`` the lane width (16 or 32) that produced it (0 for
        empty reads and padding lanes).

    Notes
    -----
    A lane group whose live lanes span at most 16 runs ``32 // span`` reads of equal length
    per vector instead of leaving lanes idle (the last block of a tree rarely fills 32 lanes):
    in the packed strips, which build the diagonal score from state bits, where the states
    fit the lane width; else (20-bit protein sets in 16 bits) 2, 4, ... reads from tables per
    combination of their states.
    """
    scoring = task.scoring
    n_reads = len(queries)
    scores = np.zeros((n_reads, block.width), dtype=np.int64)
    width = np.zeros((n_reads, block.width), dtype=np.uint8)
    n, groups = _lane_groups(block)
    live = np.flatnonzero(block.lengths > 0)
    lengths = np.asarray(queries.lengths, dtype=np.int64)
    if n == 0 or n_reads == 0 or not np.any(lengths > 0):
        return BlockScores(scores, width)
    plan = scoring.max_form()
    read_states, index = _state_index(queries.codes)
    params_base = [plan.f_open - plan.row_shift, plan.row_shift, plan.border0, plan.border_step]
    tail = [int(plan.last_column), int(plan.negate)]
    read_bits = np.zeros(n_reads, dtype=np.int64)
    for m in np.unique(lengths[lengths > 0]):
        read_bits[lengths == m] = kernel_width(scoring, int(m))
    for bits in (16, 32):
        select = np.flatnonzero(read_bits == bits)
        if select.size == 0:
            continue
        m_max = int(lengths[select].max())
        c0 = _frame(plan, m_max, bits)
        params = np.asarray([*params_base, c0, *tail, CHUNK, 0, 0], dtype=np.int64)
        dtype = _DTYPES[bits]
        no_rvec = np.zeros(LANES, dtype=dtype)
        # H and E of a read's rows between chunks (hrow/frow are placed per lane group)
        work = tuple(_aligned_empty((m_max + 1) * LANES, dtype) for _ in range(2))
        for start in groups:
            lanes = live[(live >= start) & (live < start + LANES)]
            span = int(lanes.max()) - start + 1
            if span <= LANES // 2 and _bits_fit(block, start, queries.codes[select], bits):
                # several reads per vector, the diagonal score from state bits (no combinations);
                # as many as fit (6 for 5 live lanes), not a power of two
                sub, k = span, LANES // span
                tuples = _read_tuples(select, lengths, k)
                tables = _packed_tables(block, start, n, plan, bits, k, sub)
                rvec = _aligned_empty(len(tuples) * m_max * LANES, dtype)
                grid = rvec.reshape(len(tuples), m_max, LANES)
                grid[:, :, k * sub :] = 0
                for t in range(k):
                    grid[:, :, t * sub : (t + 1) * sub] = queries.codes[tuples[:, t], :m_max, None]
                out = np.zeros((len(tuples), LANES), dtype=np.int64)
                virtual = np.arange(len(tuples), dtype=np.int64)
                params[-2:] = 1, m_max
                rows = _row_buffers(_table_rows(tables, 3), CHUNK * LANES, dtype)
                args = (lengths[tuples[:, 0]], virtual, params, *rows, *work, out)
                _score_reads(*tables, index, rvec, *args)
                for t in range(k):
                    cols = t * sub + lanes - start
                    scores[np.ix_(tuples[:, t], lanes)] = out[:, cols]
                width[np.ix_(select, lanes)] = bits
                continue
            k = _pack_factor(span)
            packed = None
            while k > 1 and packed is None:
                packed = _pack_reads(select, lengths, index, len(read_states), k)
                k = k if packed is not None else k // 2
            sub = LANES // k
            (prof, dea, cs), flat = _cached_tables(block, start, n, plan, read_states, bits, sub)
            params[-2:] = 0, 0
            if packed is None:
                out = np.zeros((n_reads, LANES), dtype=np.int64)
                rows = _row_buffers(_table_rows(flat, len(read_states)), CHUNK * LANES, dtype)
                args = (lengths, select, params, *rows, *work, out)
                _score_reads(*flat, index, no_rvec, *args)
                scores[np.ix_(select, lanes)] = out[np.ix_(select, lanes - start)]
            else:
                tuples, combo_rows, digits = packed
                combo_prof = np.concatenate([prof[digits[:, t]] for t in range(k)], axis=2)
                tables = (
                    _flat(combo_prof, bits),
                    _flat(np.tile(dea, (1, k)), bits),
                    _flat(np.tile(cs, (1, k)), bits),
                )
                out = np.zeros((len(tuples), LANES), dtype=np.int64)
                virtual = np.arange(len(tuples), dtype=np.int64)
                rows = _row_buffers(_table_rows(tables, len(digits)), CHUNK * LANES, dtype)
                args = (lengths[tuples[:, 0]], virtual, params, *rows, *work, out)
                _score_reads(*tables, combo_rows, no_rvec, *args)
                for t in range(k):
                    cols = t * sub + lanes - start
                    scores[np.ix_(tuples[:, t], lanes)] = out[:, cols]
            width[np.ix_(select, lanes)] = bits
    return BlockScores(scores, width)
