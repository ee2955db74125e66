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

from .threads import map_threads

_OP_TABLE = bytes.maketrans(b"\x00\x01\x02", b"MRI")


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
