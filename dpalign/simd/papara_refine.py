"""The accurate mode's second pass for the ``numba`` backend: each read re-aligned against a
probabilistic profile of its chosen edge, by posterior decoding.

The model (see :func:`dpalign.reference.papara_refine_posteriors`, the oracle this kernel
matches) weighs every alignment of the read within a band of cells by the product of

* ``odds[c, i]``: how much likelier read code ``c`` is in column ``i`` than in the background
  (the edge's residue frequencies over the reference's), per aligned pair;
* per column from the read's first aligned one to its last, how the read passes from the
  column before into it: ``keep`` (aligned, aligned), ``leave`` (aligned, skipped), ``enter``
  (skipped, aligned), ``stay`` (skipped, skipped), and ``occupied`` for the first aligned
  column (leading and trailing columns are free: reads are fragments);
* ``open_ins``, then ``extend_ins`` per further character, for characters between columns;
* ``overhang`` per character before the window's first column or after its last, where the
  window starts or ends at the reference's (a read hanging over the reference's end).

Forward and backward sums give every (character, column) pair's posterior probability; the
alignment written is the one that maximises the sum of ``posterior - theta`` over its aligned
pairs (characters whose every column scores below ``theta`` stay insertions). Rows are scaled
as they go, so long reads neither overflow nor underflow.

The row-mixture model (what the accurate mode runs) goes through :func:`refine_many_rows`:
one compiled call per chunk of reads (:func:`_refine_rows_reads`) takes each read's rows' and
edge chain's posteriors over its band only (:func:`_band_posteriors`, the forward sums of
aligned cells kept, everything else in two rolling rows), blends them, raises each
character's threshold by its posterior of being in no column, and decodes over the band
(:func:`_decode_band`, the same alignment as :func:`decode` over the whole matrix).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from . import load_numba_target
from .threads import map_threads

# Numba's CPU target without SciPy's BLAS probe, before this module's kernels load
load_numba_target()

_OP_TABLE = bytes.maketrans(b"\x00\x01\x02", b"MRI")
_CHUNK = 16  # reads a thread takes at a time


@njit(nogil=True, cache=True)
def posteriors(
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
):  # pragma: no cover - compiled
    """Posterior of each (read character j, window column i) pair: ``P[j + 1, i + 1]``.

    Row j (character j - 1) may only take the cells ``first[j] <= i <= last[j]`` (window
    columns consumed, 0..hi-lo); every other cell has weight 0 and is not visited. Column c is
    entered with weight ``occupied[c]`` at the read's start, and after column c - 1 with
    ``keep[c]`` (aligned there; also after an insertion), ``leave[c]`` (aligned there, c
    skipped), ``enter[c]`` (c - 1 skipped, c aligned) or ``stay[c]`` (both skipped).
    """
    m = read.shape[0]
    n = hi - lo
    fm = np.zeros((m + 1, n + 1))
    fd = np.zeros((m + 1, n + 1))
    fi = np.zeros((m + 1, n + 1))
    scale_f = np.zeros(m + 1)
    log_over = math.log(overhang)
    cum = 0.0
    for j in range(1, m + 1):
        start = 1.0 if j == 1 else 0.0  # the start: before any column (row 0) or column 0
        if open_lo:
            start = math.exp(log_over * (j - 1) - (cum if j > 1 else 0.0))
        code = read[j - 1]
        for i in range(first[j], last[j] + 1):
            if i > 0:
                c = lo + i - 1
                into = (fm[j - 1, i - 1] + fi[j - 1, i - 1]) * keep[c] + fd[j - 1, i - 1] * enter[c]
                if j == 1:
                    into += occupied[c]  # free leading columns
                elif i == 1:
                    into += start * occupied[c]
                fm[j, i] = into * odds[code, c]
                fd[j, i] = fm[j, i - 1] * leave[c] + fd[j, i - 1] * stay[c]
            fi[j, i] = (fm[j - 1, i] + fd[j - 1, i]) * open_ins + fi[j - 1, i] * extend_ins
        top = 0.0
        for i in range(first[j], last[j] + 1):
            v = fm[j, i] + fd[j, i] + fi[j, i]
            if v > top:
                top = v
        if open_lo:
            v = math.exp(log_over * j - cum)
            if v > top:
                top = v
        if top <= 0.0:
            top = 1.0
        for i in range(first[j], last[j] + 1):
            fm[j, i] /= top
            fd[j, i] /= top
            fi[j, i] /= top
        cum += math.log(top)
        scale_f[j] = cum
    bm = np.zeros((m + 1, n + 2))  # backward from M, D and I
    bd = np.zeros((m + 1, n + 2))
    bi = np.zeros((m + 2, n + 2))
    scale_b = np.zeros(m + 1)
    for i in range(last[m], first[m] - 1, -1):
        end = 1.0 if i >= 1 else 0.0
        bm[m, i] = end + (bd[m, i + 1] * leave[lo + i] if i < n else 0.0)
        bd[m, i] = end + (bd[m, i + 1] * stay[lo + i] if i < n else 0.0)
        bi[m, i] = end
    cum = 0.0
    for j in range(m - 1, 0, -1):
        code = read[j]
        for i in range(last[j], first[j] - 1, -1):
            end = 0.0
            if i == n and open_hi:
                end = math.exp(log_over * (m - j) - cum)
            insert = bi[j + 1, i] * open_ins
            if i < n:
                c = lo + i
                diag = bm[j + 1, i + 1] * odds[code, c]
                bm[j, i] = diag * keep[c] + bd[j, i + 1] * leave[c] + insert + end
                bd[j, i] = diag * enter[c] + bd[j, i + 1] * stay[c] + insert + end
                bi[j, i] = diag * keep[c] + bi[j + 1, i] * extend_ins + end
            else:
                bm[j, i] = insert + end
                bd[j, i] = insert + end
                bi[j, i] = bi[j + 1, i] * extend_ins + end
        top = 0.0
        for i in range(first[j], last[j] + 1):
            v = bm[j, i] + bd[j, i] + bi[j, i]
            if v > top:
                top = v
        if top <= 0.0:
            top = 1.0
        for i in range(first[j], last[j] + 1):
            bm[j, i] /= top
            bd[j, i] /= top
            bi[j, i] /= top
        cum += math.log(top)
        scale_b[j] = cum
    total = 0.0
    for i in range(max(first[m], 1), last[m] + 1):
        total += fm[m, i] + fd[m, i] + fi[m, i]
    log_z = math.log(total) + scale_f[m] if total > 0.0 else -math.inf
    if open_hi:
        for j in range(1, m):
            if last[j] == n:
                part = fm[j, n] + fd[j, n] + fi[j, n]
                if part > 0.0:
                    log_part = math.log(part) + scale_f[j] + log_over * (m - j)
                    top_, low_ = max(log_z, log_part), min(log_z, log_part)
                    log_z = top_ + math.log1p(math.exp(low_ - top_))
    post = np.zeros((m + 1, n + 1))
    for j in range(1, m + 1):
        shift = scale_f[j] + (scale_b[j] if j < m else 0.0) - log_z
        if shift < 700.0:
            row = math.exp(shift)
            for i in range(max(first[j], 1), last[j] + 1):
                post[j, i] = fm[j, i] * bm[j, i] * row
        else:  # a row whose characters are almost surely inserted: its products are tiny
            for i in range(max(first[j], 1), last[j] + 1):
                if fm[j, i] > 0.0 and bm[j, i] > 0.0:
                    post[j, i] = math.exp(math.log(fm[j, i]) + math.log(bm[j, i]) + shift)
    return post


def posteriors_rows(
    odds, occupied, keep, leave, enter, stay, weights, jump, read, lo, hi, first, last,
    open_ins, extend_ins, overhang, open_lo, open_hi,
) -> np.ndarray:  # fmt: skip
    """:func:`posteriors` for the row-mixture model: the read follows one of R components
    (a reference row's gap pattern, or the profile's chain) and may switch between them on
    entering a column.

    ``odds`` is (R, codes, hi - lo) and ``occupied``, ``keep``, ``leave``, ``enter`` and
    ``stay`` are (R, hi - lo): component r's emissions and chain over the window's columns
    (index i - 1 for window column i, i.e. ``lo + i - 1``);
    ``weights[r]`` (summing to 1) is the chance of following r at the start and of switching
    to it; ``jump`` the chance of a switch on entering a column (aligned or skipped; an
    insertion keeps the component). With one component this is :func:`posteriors` on
    ``[lo, hi)``. Oracle: :func:`dpalign.reference.papara_refine_rows_posteriors`. The work is
    :func:`_band_posteriors` (what the accurate mode runs); this spreads its band over the
    full ``(len(read) + 1, hi - lo + 1)`` matrix.
    """
    emit = np.ascontiguousarray(np.transpose(np.asarray(odds, dtype=np.float64), (1, 2, 0)))
    chain = np.ascontiguousarray(
        np.stack([occupied, keep, leave, enter, stay]).astype(np.float64).transpose(0, 2, 1)
    )
    m, n = len(read), hi - lo
    first = np.asarray(first, dtype=np.int64)
    last = np.asarray(last, dtype=np.int64)
    width = int((last - first).max()) + 3
    work = _workspace(m, width, len(weights))
    band = np.zeros((m + 1, width))
    consts = np.array([open_ins, extend_ins, overhang], dtype=np.float64)
    _band_posteriors(
        emit, chain, np.asarray(weights, dtype=np.float64), float(jump),
        np.asarray(read, dtype=np.int64), 0, n, first, last, consts, bool(open_lo),
        bool(open_hi), work, band,
    )  # fmt: skip
    post = np.zeros((m + 1, n + 1))
    for j in range(1, m + 1):
        lo_j = max(int(first[j]), 1)
        post[j, lo_j : last[j] + 1] = band[j, lo_j - first[j] + 1 : last[j] - first[j] + 2]
    return post


@njit(nogil=True, cache=True)
def decode(post, theta, out):  # pragma: no cover - compiled
    """The alignment maximising the sum of ``posterior - theta`` over aligned pairs, as op
    codes (0 M, 1 R, 2 I) written backwards into ``out``; returns their count."""
    rows, cols = post.shape
    m, n = rows - 1, cols - 1
    value = np.zeros((m + 1, n + 1))
    move = np.zeros((m + 1, n + 1), dtype=np.uint8)
    for j in range(m + 1):
        for i in range(n + 1):
            if j == 0 and i == 0:
                continue
            best = -math.inf
            k = 0
            if j > 0 and i > 0 and post[j, i] > theta:
                best = value[j - 1, i - 1] + post[j, i] - theta
            if j > 0 and value[j - 1, i] > best:
                best = value[j - 1, i]
                k = 2
            if i > 0 and value[j, i - 1] > best:
                best = value[j, i - 1]
                k = 1
            value[j, i] = best
            move[j, i] = k
    count = 0
    j, i = m, n
    while j > 0 or i > 0:
        k = move[j, i] if (j > 0 and i > 0) else (2 if j > 0 else 1)
        out[count] = k
        count += 1
        if k == 0:
            j -= 1
            i -= 1
        elif k == 2:
            j -= 1
        else:
            i -= 1
    return count


def refine_many(
    tables: list[tuple[np.ndarray, ...]],
    table_of: np.ndarray,
    reads: list[np.ndarray],
    bands: list[tuple[int, int, np.ndarray, np.ndarray]],
    open_ins: float,
    extend_ins: float,
    overhang: float,
    thetas: np.ndarray,
    threads: int | None = None,
) -> list[str]:
    """Re-align reads (code indices into their table's ``odds`` rows) against edge profiles.

    ``tables[t] = (odds, occupied, keep, leave, enter, stay)`` of one edge (see
    :func:`posteriors`); read k uses ``tables[table_of[k]]``
    and the cells of ``bands[k] = (lo, hi, first, last)``: reference columns ``lo..hi-1``,
    and row j (its character j - 1) from ``first[j]`` to ``last[j]`` columns consumed in that
    window; ``thetas[k]`` its decoding threshold. Returns one op string per read over all the
    reference's columns (``R`` outside the window).
    """
    out: list[str] = [""] * len(reads)

    def one(k: int) -> None:
        table = tables[int(table_of[k])]
        n_total = len(table[1])
        lo, hi, first, last = bands[k]
        read = reads[k]
        post = posteriors(
            *table, read, lo, hi, first, last, open_ins, extend_ins, overhang, lo == 0,
            hi == n_total,
        )  # fmt: skip
        buf = np.empty(len(read) + hi - lo, dtype=np.uint8)
        count = decode(post, float(thetas[k]), buf)
        core = buf[:count][::-1].tobytes().translate(_OP_TABLE).decode()
        out[k] = "R" * lo + core + "R" * (n_total - hi)

    # Longest reads first, so that no thread is left with a long one at the end.
    order = sorted(range(len(reads)), key=lambda k: -len(reads[k]))
    map_threads(one, order, threads, chunksize=16)
    return out


# --------------------------------------------------------------------------------------------
# The row-mixture pass, fused: both models' posteriors, the blend and the decoding of each read
# in one compiled call, over the band only, many reads per call.
# --------------------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _band_posteriors(
    emit, chain, weights, jump, read, lo, n, first, last, consts, open_lo, open_hi, work, post,
    only_z=False,
):  # fmt: skip  # pragma: no cover - compiled
    """:func:`posteriors_rows` over the band only, on preallocated ``work``.

    ``emit`` (codes, columns, R) and ``chain`` (5, columns, R: occupied, keep, leave, enter,
    stay) are the components over all the edge's columns (window column i is ``lo + i - 1``);
    ``consts = (open_ins, extend_ins, overhang)``. Writes the posterior of (row j, window
    column i) to ``post[j, i - first[j] + 1]`` for ``first[j] <= i <= last[j]`` (0 at i = 0),
    with the same arithmetic as the oracle's, cell by cell.

    Only the forward sums of aligned cells (``fm``) are kept for every row; the other forward
    sums and the backward sums live in two rolling rows (``work = (fm (m + 1, W, R), fd, fi,
    bm, bd, bi (2, W, R))``, W > the widest row + 1), and each row's posteriors are taken as
    soon as its backward sums are done (the normaliser comes from the forward pass alone):
    the work stays in the core's cache. Row j's cells sit at ``1..last[j] - first[j] + 1``,
    with zero pads either side; component innermost.

    Returns the log of the sum over the band's paths (the model's likelihood of the read,
    relative to the background); with ``only_z`` after the forward pass alone (``post``
    untouched).
    """
    open_ins, extend_ins, overhang = consts[0], consts[1], consts[2]
    m = read.shape[0]
    rows = weights.shape[0]
    fm, fd, fi, bm, bd, bi = work
    scale_f = np.zeros(m + 1)
    edge_part = np.zeros(m + 1)  # forward sums at the window's last column (open_hi)
    log_over = math.log(overhang)
    same = 1.0 - jump
    switching = jump > 0.0 and rows > 1
    if not switching:
        same = 1.0
    for k in range(last[0] - first[0] + 3):
        for r in range(rows):
            fm[0, k, r] = 0.0
            fd[0, k, r] = 0.0
            fi[0, k, r] = 0.0
    cum = 0.0
    for j in range(1, m + 1):
        start = 1.0 if j == 1 else 0.0
        if open_lo:
            start = math.exp(log_over * (j - 1) - (cum if j > 1 else 0.0))
        code = read[j - 1]
        f0, p0, p1 = first[j], first[j - 1], last[j - 1]
        now, was = j & 1, (j - 1) & 1
        end_k = last[j] - f0 + 2
        for r in range(rows):
            fm[j, 0, r] = 0.0
            fd[now, 0, r] = 0.0
            fm[j, end_k, r] = 0.0
            fd[now, end_k, r] = 0.0
        top = 0.0
        for i in range(f0, last[j] + 1):
            k = i - f0 + 1
            up_ok = p0 <= i <= p1
            ku = i - p0 + 1
            if i > 0:
                c = lo + i - 1
                diag_ok = p0 <= i - 1 <= p1
                kd = i - p0
                all_mi = 0.0
                all_d = 0.0
                all_m = 0.0
                all_dd = 0.0
                for r in range(rows if switching else 0):
                    if diag_ok:
                        all_mi += fm[j - 1, kd, r] + fi[was, kd, r]
                        all_d += fd[was, kd, r]
                    all_m += fm[j, k - 1, r]
                    all_dd += fd[now, k - 1, r]
                begin = 0.0
                if j == 1:
                    begin = 1.0
                elif i == 1:
                    begin = start
                for r in range(rows):
                    w = weights[r]
                    own_mi = 0.0
                    own_d = 0.0
                    if diag_ok:
                        own_mi = fm[j - 1, kd, r] + fi[was, kd, r]
                        own_d = fd[was, kd, r]
                    mi = same * own_mi + jump * w * all_mi
                    d = same * own_d + jump * w * all_d
                    start_here = begin * w * chain[0, c, r]
                    into = mi * chain[1, c, r] + d * chain[3, c, r] + start_here
                    fm[j, k, r] = into * emit[code, c, r]
                    from_m = same * fm[j, k - 1, r] + jump * w * all_m
                    from_d = same * fd[now, k - 1, r] + jump * w * all_dd
                    fd[now, k, r] = from_m * chain[2, c, r] + from_d * chain[4, c, r]
            else:
                for r in range(rows):
                    fm[j, k, r] = 0.0
                    fd[now, k, r] = 0.0
            if up_ok:
                for r in range(rows):
                    opened = (fm[j - 1, ku, r] + fd[was, ku, r]) * open_ins
                    fi[now, k, r] = opened + fi[was, ku, r] * extend_ins
            else:
                for r in range(rows):
                    fi[now, k, r] = 0.0
            for r in range(rows):
                v = fm[j, k, r] + fd[now, k, r] + fi[now, k, r]
                if v > top:
                    top = v
        if open_lo:
            v = math.exp(log_over * j - cum)
            if v > top:
                top = v
        if top <= 0.0:
            top = 1.0
        for k in range(1, end_k):
            for r in range(rows):
                fm[j, k, r] /= top
                fd[now, k, r] /= top
                fi[now, k, r] /= top
        cum += math.log(top)
        scale_f[j] = cum
        if open_hi and j < m and last[j] == n:
            k = n - f0 + 1
            part = 0.0
            for r in range(rows):
                part += fm[j, k, r] + fd[now, k, r] + fi[now, k, r]
            edge_part[j] = part
    total = 0.0
    last_row = m & 1
    for i in range(max(first[m], 1), last[m] + 1):
        k = i - first[m] + 1
        for r in range(rows):
            total += fm[m, k, r] + fd[last_row, k, r] + fi[last_row, k, r]
    log_z = math.log(total) + scale_f[m] if total > 0.0 else -math.inf
    if open_hi:
        for j in range(1, m):
            if last[j] == n:
                part = edge_part[j]
                if part > 0.0:
                    log_part = math.log(part) + scale_f[j] + log_over * (m - j)
                    top_, low_ = max(log_z, log_part), min(log_z, log_part)
                    log_z = top_ + math.log1p(math.exp(low_ - top_))
    if only_z:
        return log_z
    diag = np.zeros(rows)  # per target component: on into its next column, aligned
    skip = np.zeros(rows)
    below = np.zeros(rows)  # bi of (j + 1, i)
    cum = 0.0
    for j in range(m, 0, -1):
        code = read[j] if j < m else 0
        f0 = first[j]
        q0 = first[j + 1] if j < m else 0
        q1 = last[j + 1] if j < m else -1
        now, nxt = j & 1, (j + 1) & 1
        end_k = last[j] - f0 + 2
        for r in range(rows):
            bm[now, end_k, r] = 0.0
            bd[now, end_k, r] = 0.0
            bi[now, end_k, r] = 0.0
        top = 0.0
        for i in range(last[j], f0 - 1, -1):
            k = i - f0 + 1
            end = 0.0
            if j == m:
                end = 1.0 if i >= 1 else 0.0
            elif i == n and open_hi:
                end = math.exp(log_over * (m - j) - cum)
            down_ok = q0 <= i <= q1
            kb = i - q0 + 1
            if i < n:
                c = lo + i
                diag_ok = q0 <= i + 1 <= q1
                kd = i + 2 - q0
                mix_keep = 0.0
                mix_leave = 0.0
                mix_enter = 0.0
                mix_stay = 0.0
                for r in range(rows):
                    diag[r] = emit[code, c, r] * bm[nxt, kd, r] if diag_ok else 0.0
                    skip[r] = bd[now, k + 1, r]
                    below[r] = bi[nxt, kb, r] if down_ok else 0.0
                    if not switching:
                        continue
                    w = weights[r]
                    mix_keep += w * chain[1, c, r] * diag[r]
                    mix_leave += w * chain[2, c, r] * skip[r]
                    mix_enter += w * chain[3, c, r] * diag[r]
                    mix_stay += w * chain[4, c, r] * skip[r]
                for r in range(rows):
                    on_keep = same * chain[1, c, r] * diag[r] + jump * mix_keep
                    on_leave = same * chain[2, c, r] * skip[r] + jump * mix_leave
                    on_enter = same * chain[3, c, r] * diag[r] + jump * mix_enter
                    on_stay = same * chain[4, c, r] * skip[r] + jump * mix_stay
                    insert = below[r] * open_ins
                    bm[now, k, r] = on_keep + on_leave + insert + end
                    bd[now, k, r] = on_enter + on_stay + insert + end
                    bi[now, k, r] = on_keep + below[r] * extend_ins + end
            else:
                for r in range(rows):
                    under = bi[nxt, kb, r] if down_ok else 0.0
                    insert = under * open_ins
                    bm[now, k, r] = insert + end
                    bd[now, k, r] = insert + end
                    bi[now, k, r] = under * extend_ins + end
            for r in range(rows):
                v = bm[now, k, r] + bd[now, k, r] + bi[now, k, r]
                if v > top:
                    top = v
        shift = scale_f[j] - log_z
        if j < m:
            if top <= 0.0:
                top = 1.0
            for k in range(1, end_k):
                for r in range(rows):
                    bm[now, k, r] /= top
                    bd[now, k, r] /= top
                    bi[now, k, r] /= top
            cum += math.log(top)
            shift = scale_f[j] + cum - log_z
        factor = math.exp(shift)
        post[j, 0] = 0.0
        post[j, 1] = 0.0
        for i in range(max(f0, 1), last[j] + 1):
            k = i - f0 + 1
            v = 0.0
            for r in range(rows):
                v += fm[j, k, r] * bm[now, k, r]
            if shift < 700.0:
                post[j, k] = v * factor
            elif v > 0.0:
                post[j, k] = math.exp(math.log(v) + shift)
            else:
                post[j, k] = 0.0
    return log_z


@njit(nogil=True, cache=True)
def _value_at(value, first, last, j, i):  # pragma: no cover - compiled
    """The decoding's best sum at (j, i) from the band's values: left of row j's band it is
    the row above's (the read's characters there all skip), right of it the band's last."""
    while j > 0 and i < first[j]:
        j -= 1
    if j == 0:
        return 0.0
    if i > last[j]:
        i = last[j]
    return value[j, i - first[j] + 1]


@njit(nogil=True, cache=True)
def _decode_band(post, first, last, n, cut, value, move, out):  # pragma: no cover - compiled
    """:func:`decode` of posteriors that are 0 outside the band (``post[j, i - first[j] + 1]``),
    over the band only, the same alignment (ties too), with a threshold per row (``cut[j]``
    for character j - 1; one value for all is :func:`decode`'s ``theta``): ``first`` and
    ``last`` never fall from one row to the next and every ``cut`` is >= 0, so outside the
    band the best sum is the nearest band cell's (see :func:`_value_at`) and the move the
    one :func:`decode` would take."""
    m = first.shape[0] - 1
    for j in range(1, m + 1):
        f0, p0, p1 = first[j], first[j - 1], last[j - 1]
        # the row above from column f0 - 1 on: in its band (p0 <= f0), else past its end
        above_end = value[j - 1, p1 - p0 + 1] if j > 1 else 0.0
        before = _value_at(value, first, last, j - 1, f0 - 1) if f0 > 0 else 0.0
        for i in range(f0, last[j] + 1):
            k = i - f0 + 1
            if j == 1:
                up = 0.0
            elif i <= p1:
                up = value[j - 1, i - p0 + 1]
            else:
                up = above_end
            best = -math.inf
            step = 0
            if i > 0 and post[j, k] > cut[j]:
                best = before + post[j, k] - cut[j]
            if up > best:
                best = up
                step = 2
            if i > 0:
                left = value[j, k - 1] if i > f0 else before
                if left > best:
                    best = left
                    step = 1
            value[j, k] = best
            move[j, k] = step
            before = up  # (j - 1, i) is the next cell's diagonal
    count = 0
    j, i = m, n
    while j > 0 or i > 0:
        if j > 0 and i > 0:
            if i < first[j]:
                step = 2
            elif i > last[j]:
                up = _value_at(value, first, last, j - 1, i)
                step = 1 if value[j, last[j] - first[j] + 1] > up else 2
            else:
                step = move[j, i - first[j] + 1]
        else:
            step = 2 if j > 0 else 1
        out[count] = step
        count += 1
        if step == 0:
            j -= 1
            i -= 1
        elif step == 2:
            j -= 1
        else:
            i -= 1
    return count


@njit(nogil=True, cache=True)
def _largest_band(read_at, first_all, last_all, start, stop):  # pragma: no cover - compiled
    """The longest read of reads ``start..stop-1`` and the widest row of their bands
    (at least 1): the sizes of the workspace they share."""
    big_m = 0
    big_w = 1
    for k in range(start, stop):
        m = read_at[k + 1] - read_at[k]
        big_m = max(big_m, m)
        at = read_at[k] + k
        for j in range(m + 1):
            big_w = max(big_w, last_all[at + j] - first_all[at + j] + 1)
    return big_m, big_w


@njit(nogil=True, cache=True)
def _workspace(m, width, rows):  # pragma: no cover - compiled
    """:func:`_band_posteriors`' work arrays for reads of up to ``m`` characters."""
    return (
        np.empty((m + 1, width, rows)), np.empty((2, width, rows)), np.empty((2, width, rows)),
        np.empty((2, width, rows)), np.empty((2, width, rows)), np.empty((2, width, rows)),
    )  # fmt: skip


@njit(nogil=True, cache=True)
def _refine_rows_reads(
    emit, chain, weights, edge_emit, edge_chain, offset, table_of, reads, read_at, lohi,
    first_all, last_all, thetas, consts, n_total, out, out_at, counts, start, stop,
):  # fmt: skip  # pragma: no cover - compiled
    """Reads ``start..stop-1`` through the row mixture: :func:`_band_posteriors` of the rows
    (``emit[t]``, ``chain[t]``, ``weights[t]`` of their edge t, column c of the reference at
    ``c - offset[t]``) and, where the blend is on, of the edge's chain alone (``edge_emit[t]``,
    ``edge_chain[t]``), blended, decoded over the band; op codes backwards into
    ``out[out_at[k]:]``, their count into ``counts[k]``.
    ``consts = (open_ins, extend_ins, overhang, jump, blend, insert)``: character j's
    threshold is ``thetas[k] + insert * (its posterior of being in no column)``."""
    jump, blend, insert = consts[3], consts[4], consts[5]
    rows = weights.shape[1]
    big_m, big_w = _largest_band(read_at, first_all, last_all, start, stop)
    work = _workspace(big_m, big_w + 2, rows)
    work1 = _workspace(big_m, big_w + 2, 1)
    post = np.empty((big_m + 1, big_w + 2))
    alone = np.empty((big_m + 1, big_w + 2))
    value = np.empty((big_m + 1, big_w + 2))
    move = np.empty((big_m + 1, big_w + 2), dtype=np.uint8)
    cut = np.empty(big_m + 1)
    one = np.ones(1)
    for k in range(start, stop):
        t = table_of[k]
        read = reads[read_at[k] : read_at[k + 1]]
        m = read.shape[0]
        at = read_at[k] + k
        first = first_all[at : at + m + 1]
        last = last_all[at : at + m + 1]
        lo, hi = lohi[k, 0], lohi[k, 1]
        n = hi - lo
        open_lo, open_hi = lo == 0, hi == n_total
        at_t = lo - offset[t]  # the window's first column in the edge's arrays
        _band_posteriors(
            emit[t], chain[t], weights[t], jump, read, at_t, n, first, last, consts, open_lo,
            open_hi, work, post,
        )  # fmt: skip
        if blend > 0.0:
            _band_posteriors(
                edge_emit[t], edge_chain[t], one, 0.0, read, at_t, n, first, last, consts,
                open_lo, open_hi, work1, alone,
            )  # fmt: skip
            for j in range(1, m + 1):
                for i in range(max(first[j], 1), last[j] + 1):
                    kk = i - first[j] + 1
                    post[j, kk] = (1.0 - blend) * post[j, kk] + blend * alone[j, kk]
        cut[0] = thetas[k]
        for j in range(1, m + 1):
            placed = 0.0
            for i in range(max(first[j], 1), last[j] + 1):
                placed += post[j, i - first[j] + 1]
            cut[j] = thetas[k] + insert * max(0.0, 1.0 - placed)
        counts[k] = _decode_band(post, first, last, n, cut, value, move, out[out_at[k] :])


@njit(nogil=True, cache=True)
def _log_z_rows_reads(
    emit, chain, weights, offset, table_of, reads, read_at, lohi, first_all, last_all, consts,
    n_total, out, start, stop,
):  # fmt: skip  # pragma: no cover - compiled
    """Reads ``start..stop-1``: the row mixture's log likelihood of each over its band
    (:func:`_band_posteriors`' forward pass alone) into ``out[k]``."""
    jump = consts[3]
    rows = weights.shape[1]
    big_m, big_w = _largest_band(read_at, first_all, last_all, start, stop)
    work = _workspace(big_m, big_w + 2, rows)
    post = np.empty((1, 1))
    for k in range(start, stop):
        t = table_of[k]
        read = reads[read_at[k] : read_at[k + 1]]
        m = read.shape[0]
        at = read_at[k] + k
        lo, hi = lohi[k, 0], lohi[k, 1]
        out[k] = _band_posteriors(
            emit[t], chain[t], weights[t], jump, read, lo - offset[t], hi - lo,
            first_all[at : at + m + 1], last_all[at : at + m + 1], consts, lo == 0,
            hi == n_total, work, post, True,
        )  # fmt: skip


def _layout(tables, table_of, reads, bands, mix: float, profile_weight: float, chains=True):
    """What the compiled row-mixture loops take: the edges' components over the columns their
    reads' windows cover (:func:`_edge_components`, ``chains`` passed on), and the reads
    ordered by edge, then longest first (``order``), flattened with their bands."""
    n_total = len(tables[0][1])
    spans = np.zeros((len(tables), 2), dtype=np.int64)  # columns the edge's reads need
    spans[:, 0] = n_total
    for t, band in zip(np.asarray(table_of, dtype=np.int64), bands, strict=True):
        spans[t, 0] = min(spans[t, 0], band[0])
        spans[t, 1] = max(spans[t, 1], band[1])
    spans[:, 1] = np.maximum(spans[:, 1], spans[:, 0])
    components = _edge_components(tables, mix, profile_weight, spans, chains)
    offset = np.ascontiguousarray(spans[:, 0])
    order = sorted(range(len(reads)), key=lambda k: (int(table_of[k]), -len(reads[k])))
    lengths = np.array([len(reads[k]) for k in order], dtype=np.int64)
    read_at = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat = np.concatenate([np.asarray(reads[k], dtype=np.int64) for k in order])
    lohi = np.array([bands[k][:2] for k in order], dtype=np.int64).reshape(len(order), 2)
    first_all = np.concatenate([np.asarray(bands[k][2], dtype=np.int64) for k in order])
    last_all = np.concatenate([np.asarray(bands[k][3], dtype=np.int64) for k in order])
    which = np.asarray(table_of, dtype=np.int64)[order]
    return (
        n_total,
        components,
        offset,
        order,
        lengths,
        read_at,
        flat,
        lohi,
        first_all,
        last_all,
        which,
    )


def log_z_many_rows(
    tables, table_of, reads, bands, open_ins, extend_ins, overhang, mix, jump, profile_weight,
    threads=None,
) -> np.ndarray:  # fmt: skip
    """Each read's log likelihood under the row-mixture model of its table over its band
    (``tables`` as :func:`refine_many_rows` takes them): the sum over every path of the band,
    relative to the background; the oracle is
    :func:`dpalign.reference.papara_refine_rows_log_z`."""
    if not len(reads):
        return np.zeros(0)
    n_total, parts, offset, order, _, read_at, flat, lohi, first_all, last_all, which = _layout(
        tables, table_of, reads, bands, mix, profile_weight, chains=False
    )
    emit, chain, weights = parts[:3]
    consts = np.array([open_ins, extend_ins, overhang, jump], dtype=np.float64)
    out = np.empty(len(order))

    def run(start: int) -> None:
        _log_z_rows_reads(
            emit, chain, weights, offset, which, flat, read_at, lohi, first_all, last_all,
            consts, n_total, out, start, min(start + _CHUNK, len(order)),
        )  # fmt: skip

    map_threads(run, range(0, len(order), _CHUNK), threads)
    result = np.empty(len(reads))
    result[np.asarray(order, dtype=np.int64)] = out
    return result


def refine_many_rows(
    tables, table_of, reads, bands, open_ins, extend_ins, overhang, thetas, mix, jump,
    profile_weight, blend=0.0, insert=0.0, threads=None,
) -> list[str]:  # fmt: skip
    """:func:`refine_many` for the row-mixture model: ``tables[t] = (odds, occupied, keep,
    leave, enter, stay, rows, row_odds, weights)`` (see :func:`posteriors_rows` and
    :func:`dpalign.reference.papara_refine_row_window`); with ``blend`` > 0 the posteriors
    decoded are ``(1 - blend) * rows' + blend * the edge chain's`` (:func:`posteriors`); with
    ``insert`` > 0 a character goes into a column only where its posterior there beats its
    threshold plus ``insert`` times its posterior of being in none
    (:func:`dpalign.reference.papara_refine_rows`).

    The components are built once per edge over the columns its reads' windows cover (a
    window's are a slice of them: the mixing is per column), and the reads go through
    :func:`_refine_rows_reads` a chunk at a time on every core."""
    if not len(reads):
        return []
    n_total, parts, offset, order, lengths, read_at, flat, lohi, first_all, last_all, which = (
        _layout(tables, table_of, reads, bands, mix, profile_weight)
    )
    emit, chain, weights, edge_emit, edge_chain = parts
    sizes = lengths + lohi[:, 1] - lohi[:, 0]
    out_at = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    out = np.empty(int(out_at[-1]), dtype=np.uint8)
    counts = np.zeros(len(order), dtype=np.int64)
    consts = np.array([open_ins, extend_ins, overhang, jump, blend, insert], dtype=np.float64)
    theta = np.asarray(thetas, dtype=np.float64)[order]

    def run(start: int) -> None:
        _refine_rows_reads(
            emit, chain, weights, edge_emit, edge_chain, offset, which, flat, read_at, lohi,
            first_all, last_all, theta, consts, n_total, out, out_at, counts, start,
            min(start + _CHUNK, len(order)),
        )  # fmt: skip

    map_threads(run, range(0, len(order), _CHUNK), threads)
    result: list[str] = [""] * len(reads)
    for p, k in enumerate(order):
        lo, hi = int(lohi[p, 0]), int(lohi[p, 1])
        ops = out[out_at[p] : out_at[p] + counts[p]][::-1].tobytes().translate(_OP_TABLE)
        result[k] = "R" * lo + ops.decode() + "R" * (n_total - hi)
    return result


def _edge_components(tables, mix: float, profile_weight: float, spans: np.ndarray, chains=True):
    """``(emit (T, codes, W, R), chain (T, 5, W, R), weights (T, R), edge_emit (T, codes, W,
    1), edge_chain (T, 5, W, 1))``: every edge's row-mixture components over its columns
    ``spans[t, 0]..spans[t, 1] - 1`` (at 0.., W the widest span;
    :func:`dpalign.reference.papara_refine_row_window` over that span, without merging rows
    of equal gaps: the same model) and its chain alone (without ``chains``: empty, of width
    0). Edges with fewer rows get components of weight 0, which change no sum."""
    parts = []
    for (odds, *profile, rows, row_odds, w), (lo, hi) in zip(tables, spans, strict=True):
        odds = np.asarray(odds)[:, lo:hi]
        profile = [np.asarray(p)[lo:hi] for p in profile]
        res = np.asarray(rows)[:, lo:hi].astype(np.float64)
        emit = (
            np.asarray(row_odds)[:, :, lo:hi]
            if row_odds is not None
            else np.broadcast_to(odds[None], (len(res), *np.shape(odds)))
        )
        occupied, keep, leave, enter, stay = (p[None, :] for p in profile)
        chain = [
            (1.0 - mix) * res + mix * occupied,
            (1.0 - mix) * res + mix * keep,
            (1.0 - mix) * (1.0 - res) + mix * leave,
            (1.0 - mix) * res + mix * enter,
            (1.0 - mix) * (1.0 - res) + mix * stay,
        ]
        w = np.asarray(w, dtype=np.float64)
        if profile_weight > 0.0:
            emit = np.concatenate([emit, odds[None]])
            base = (occupied, keep, leave, enter, stay)
            chain = [np.concatenate([c, b]) for c, b in zip(chain, base, strict=True)]
            w = np.concatenate([w * (1.0 - profile_weight), [profile_weight]])
        parts.append((emit, np.stack(chain), w, odds, np.stack(profile)))
    big = max(len(p[2]) for p in parts)
    t, codes = len(parts), np.shape(tables[0][0])[0]
    width = max(1, int((spans[:, 1] - spans[:, 0]).max()))
    emit = np.zeros((t, codes, width, big))
    chain = np.zeros((t, 5, width, big))
    chain[:, 0] = 1.0  # unused rows: any finite chain (their weight keeps them at 0)
    weights = np.zeros((t, big))
    size = width if chains else 0  # the edge's chain alone: for the blend only
    edge_emit = np.zeros((t, codes, size, 1))
    edge_chain = np.zeros((t, 5, size, 1))
    for e, (em, ch, w, odds, profile) in enumerate(parts):
        r, n = len(w), odds.shape[1]
        emit[e, :, :n, :r] = np.transpose(em, (1, 2, 0))
        chain[e, :, :n, :r] = np.transpose(ch, (0, 2, 1))
        weights[e, :r] = w
        if chains:
            edge_emit[e, :, :n, 0] = odds
            edge_chain[e, :, :n, 0] = profile
    return emit, chain, weights, edge_emit, edge_chain
