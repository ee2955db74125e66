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
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..reference import papara_refine_row_window
from .threads import map_threads

_OP_TABLE = bytes.maketrans(b"\x00\x01\x02", b"MRI")
_ONE = np.ones(1)


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


@njit(nogil=True, cache=True)
def posteriors_rows(
    odds,
    occupied,
    keep,
    leave,
    enter,
    stay,
    weights,
    jump,
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
    """:func:`posteriors` for the row-mixture model: the read follows one of R components
    (a reference row's gap pattern, or the profile's chain) and may switch between them on
    entering a column.

    ``odds`` is (R, codes, hi - lo) and ``occupied``, ``keep``, ``leave``, ``enter`` and
    ``stay`` are (R, hi - lo): component r's emissions and chain over the window's columns
    (index i - 1 for window column i, i.e. ``lo + i - 1``);
    ``weights[r]`` (summing to 1) is the chance of following r at the start and of switching
    to it; ``jump`` the chance of a switch on entering a column (aligned or skipped; an
    insertion keeps the component). With one component this is :func:`posteriors` on
    ``[lo, hi)``. Oracle: :func:`dpalign.reference.papara_refine_rows_posteriors`.
    """
    m = read.shape[0]
    n = hi - lo
    rows = occupied.shape[0]
    # Component innermost (a cell's R values sit together) and only the band stored: row j
    # keeps columns first[j]..last[j] at 1.. (0 and the end are zero padding).
    occupied_t = np.ascontiguousarray(occupied.T)
    keep_t = np.ascontiguousarray(keep.T)
    leave_t = np.ascontiguousarray(leave.T)
    enter_t = np.ascontiguousarray(enter.T)
    stay_t = np.ascontiguousarray(stay.T)
    odds_t = np.empty((odds.shape[1], odds.shape[2], rows))
    for r in range(rows):
        odds_t[:, :, r] = odds[r]
    width = 1
    for j in range(m + 1):
        width = max(width, last[j] - first[j] + 1)
    fm = np.zeros((m + 1, width + 2, rows))
    fd = np.zeros((m + 1, width + 2, rows))
    fi = np.zeros((m + 1, width + 2, rows))
    scale_f = np.zeros(m + 1)
    log_over = math.log(overhang)
    same = 1.0 - jump
    switching = jump > 0.0 and rows > 1  # else the sums over components are not needed
    if not switching:
        same = 1.0
    cum = 0.0
    for j in range(1, m + 1):
        start = 1.0 if j == 1 else 0.0
        if open_lo:
            start = math.exp(log_over * (j - 1) - (cum if j > 1 else 0.0))
        code = read[j - 1]
        f0, p0, p1 = first[j], first[j - 1], last[j - 1]
        top = 0.0  # the row's largest cell, for its scale
        for i in range(first[j], last[j] + 1):
            k = i - f0 + 1
            up_ok = p0 <= i <= p1
            ku = i - p0 + 1
            if i > 0:
                diag_ok = p0 <= i - 1 <= p1
                kd = i - p0  # (j - 1, i - 1)
                all_mi = 0.0  # every component's sums, for switches
                all_d = 0.0
                all_m = 0.0
                all_dd = 0.0
                for r in range(rows if switching else 0):
                    if diag_ok:
                        all_mi += fm[j - 1, kd, r] + fi[j - 1, kd, r]
                        all_d += fd[j - 1, kd, r]
                    all_m += fm[j, k - 1, r]
                    all_dd += fd[j, k - 1, r]
                begin = 0.0
                if j == 1:
                    begin = 1.0  # free leading columns
                elif i == 1:
                    begin = start
                for r in range(rows):
                    w = weights[r]
                    own_mi = 0.0
                    own_d = 0.0
                    if diag_ok:
                        own_mi = fm[j - 1, kd, r] + fi[j - 1, kd, r]
                        own_d = fd[j - 1, kd, r]
                    mi = same * own_mi + jump * w * all_mi
                    d = same * own_d + jump * w * all_d
                    start_here = begin * w * occupied_t[i - 1, r]
                    into = mi * keep_t[i - 1, r] + d * enter_t[i - 1, r] + start_here
                    fm[j, k, r] = into * odds_t[code, i - 1, r]
                    from_m = same * fm[j, k - 1, r] + jump * w * all_m
                    from_d = same * fd[j, k - 1, r] + jump * w * all_dd
                    fd[j, k, r] = from_m * leave_t[i - 1, r] + from_d * stay_t[i - 1, r]
            if up_ok:
                for r in range(rows):
                    opened = (fm[j - 1, ku, r] + fd[j - 1, ku, r]) * open_ins
                    fi[j, k, r] = opened + fi[j - 1, ku, r] * extend_ins
            for r in range(rows):
                v = fm[j, k, r] + fd[j, k, r] + fi[j, k, r]
                if v > top:
                    top = v
        if open_lo:
            v = math.exp(log_over * j - cum)
            if v > top:
                top = v
        if top <= 0.0:
            top = 1.0
        for k in range(1, last[j] - f0 + 2):
            for r in range(rows):
                fm[j, k, r] /= top
                fd[j, k, r] /= top
                fi[j, k, r] /= top
        cum += math.log(top)
        scale_f[j] = cum
    bm = np.zeros((m + 1, width + 2, rows))  # backward from M, D and I
    bd = np.zeros((m + 1, width + 2, rows))
    bi = np.zeros((m + 1, width + 2, rows))
    scale_b = np.zeros(m + 1)
    diag = np.zeros(rows)  # per target component: on into its next column, aligned
    skip = np.zeros(rows)
    below = np.zeros(rows)  # bi of (j + 1, i)
    cum = 0.0
    for j in range(m, 0, -1):
        code = read[j] if j < m else 0
        f0 = first[j]
        q0 = first[j + 1] if j < m else 0
        q1 = last[j + 1] if j < m else -1
        top = 0.0  # the row's largest cell, for its scale
        for i in range(last[j], first[j] - 1, -1):
            k = i - f0 + 1
            end = 0.0
            if j == m:
                end = 1.0 if i >= 1 else 0.0
            elif i == n and open_hi:
                end = math.exp(log_over * (m - j) - cum)
            down_ok = q0 <= i <= q1
            kb = i - q0 + 1
            for r in range(rows):
                below[r] = bi[j + 1, kb, r] if down_ok else 0.0
            if i < n:
                diag_ok = q0 <= i + 1 <= q1
                kd = i + 2 - q0  # (j + 1, i + 1)
                # after a switch to r2: from M (or I) keep / leave, from D enter / stay
                mix_keep = 0.0
                mix_leave = 0.0
                mix_enter = 0.0
                mix_stay = 0.0
                for r in range(rows):
                    diag[r] = odds_t[code, i, r] * bm[j + 1, kd, r] if diag_ok else 0.0
                    skip[r] = bd[j, k + 1, r]
                    if not switching:
                        continue
                    w = weights[r]
                    mix_keep += w * keep_t[i, r] * diag[r]
                    mix_leave += w * leave_t[i, r] * skip[r]
                    mix_enter += w * enter_t[i, r] * diag[r]
                    mix_stay += w * stay_t[i, r] * skip[r]
                for r in range(rows):
                    on_keep = same * keep_t[i, r] * diag[r] + jump * mix_keep
                    on_leave = same * leave_t[i, r] * skip[r] + jump * mix_leave
                    on_enter = same * enter_t[i, r] * diag[r] + jump * mix_enter
                    on_stay = same * stay_t[i, r] * skip[r] + jump * mix_stay
                    insert = below[r] * open_ins
                    bm[j, k, r] = on_keep + on_leave + insert + end
                    bd[j, k, r] = on_enter + on_stay + insert + end
                    bi[j, k, r] = on_keep + below[r] * extend_ins + end
            else:
                for r in range(rows):
                    insert = below[r] * open_ins
                    bm[j, k, r] = insert + end
                    bd[j, k, r] = insert + end
                    bi[j, k, r] = below[r] * extend_ins + end
            for r in range(rows):
                v = bm[j, k, r] + bd[j, k, r] + bi[j, k, r]
                if v > top:
                    top = v
        if j < m:
            if top <= 0.0:
                top = 1.0
            for k in range(1, last[j] - f0 + 2):
                for r in range(rows):
                    bm[j, k, r] /= top
                    bd[j, k, r] /= top
                    bi[j, k, r] /= top
            cum += math.log(top)
            scale_b[j] = cum
    total = 0.0
    for i in range(max(first[m], 1), last[m] + 1):
        k = i - first[m] + 1
        for r in range(rows):
            total += fm[m, k, r] + fd[m, k, r] + fi[m, k, r]
    log_z = math.log(total) + scale_f[m] if total > 0.0 else -math.inf
    if open_hi:
        for j in range(1, m):
            if last[j] == n:
                k = n - first[j] + 1
                part = 0.0
                for r in range(rows):
                    part += fm[j, k, r] + fd[j, k, r] + fi[j, k, r]
                if part > 0.0:
                    log_part = math.log(part) + scale_f[j] + log_over * (m - j)
                    top_, low_ = max(log_z, log_part), min(log_z, log_part)
                    log_z = top_ + math.log1p(math.exp(low_ - top_))
    post = np.zeros((m + 1, n + 1))
    for j in range(1, m + 1):
        shift = scale_f[j] + (scale_b[j] if j < m else 0.0) - log_z
        for i in range(max(first[j], 1), last[j] + 1):
            k = i - first[j] + 1
            v = 0.0
            for r in range(rows):
                v += fm[j, k, r] * bm[j, k, r]
            if shift < 700.0:
                post[j, i] = v * math.exp(shift)
            elif v > 0.0:
                post[j, i] = math.exp(math.log(v) + shift)
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


def refine_many_rows(
    tables, table_of, reads, bands, open_ins, extend_ins, overhang, thetas, mix, jump,
    profile_weight, blend=0.0, threads=None,
) -> list[str]:  # fmt: skip
    """:func:`refine_many` for the row-mixture model: ``tables[t] = (odds, occupied, keep,
    leave, enter, stay, rows, row_odds, weights)`` (see :func:`posteriors_rows` and
    :func:`dpalign.reference.papara_refine_row_window`); with ``blend`` > 0 the posteriors
    decoded are ``(1 - blend) * rows' + blend * the edge chain's`` (:func:`posteriors`)."""
    out: list[str] = [""] * len(reads)

    def one(k: int) -> None:
        table = tables[int(table_of[k])]
        odds, profile, rows, row_odds, weights = table[0], table[1:6], *table[6:]
        n_total = len(profile[0])
        lo, hi, first, last = bands[k]
        read = reads[k]
        window = papara_refine_row_window(
            odds, profile, rows, row_odds, weights, lo, hi, mix, profile_weight
        )
        post = posteriors_rows(
            *window, jump, read, lo, hi, first, last, open_ins, extend_ins, overhang,
            lo == 0, hi == n_total,
        )  # fmt: skip
        if blend > 0.0:  # the edge's chain alone: one component (the banded kernel)
            alone = [np.ascontiguousarray(odds[None, :, lo:hi])]
            alone += [np.ascontiguousarray(p[None, lo:hi]) for p in profile]
            chain = posteriors_rows(
                *alone, _ONE, 0.0, read, lo, hi, first, last, open_ins, extend_ins, overhang,
                lo == 0, hi == n_total,
            )  # fmt: skip
            post = (1.0 - blend) * post + blend * chain
        buf = np.empty(len(read) + hi - lo, dtype=np.uint8)
        count = decode(post, float(thetas[k]), buf)
        core = buf[:count][::-1].tobytes().translate(_OP_TABLE).decode()
        out[k] = "R" * lo + core + "R" * (n_total - hi)

    order = sorted(range(len(reads)), key=lambda k: -len(reads[k]))
    map_threads(one, order, threads, chunksize=16)
    return out
