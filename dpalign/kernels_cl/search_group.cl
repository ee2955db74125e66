/* Database search with thread groups per target pair (the CUDASW++ 4.0 decomposition).
 *
 * The strip kernel (search.cl) gives each work-item whole targets and pairs two targets' query
 * profile rows per cell (two local loads and a byte permute per two cells, a boundary column
 * in global memory per strip). Here the roles turn round:
 *   - a group of G work-items (a segment of a warp) holds two targets at once, one in each
 *     16-bit half of every register, each work-item R consecutive target columns: per column
 *     the packed H and F (the vertical gap) and the byte offset of the column's target-letter
 *     pair in the pair table;
 *   - the query streams through as DP rows; work-item t computes row i = k - t at step k (a
 *     wavefront across the group) and hands its last column's H and E to work-item t + 1 by
 *     one shuffle each (inline PTX shfl.sync.up inside the G-lane segment; local memory and
 *     barriers where there is no PTX);
 *   - substitution scores come from a pair table in local memory,
 *         table[q][a * L + b] = s(q, a) | s(q, b) << 16
 *     (q a letter of the query, a, b compact target letters), so one local load gives both
 *     targets' scores: no permute;
 *   - targets longer than W = G * R run in several passes; the last work-item saves its column
 *     (H, E) per query row in global memory ("carry") for the next pass's first work-item.
 * The host (kernels_cl/search_group.py) deals targets to (G, R, passes) buckets by length.
 *
 * Recurrence (scikit-bio: a gap of k costs o + k e), local mode, in this order per cell:
 *     H = max(0, max(H_diag + s, E), F)        (E, F of this cell are ready: computed below)
 *     T = H - o - e
 *     E_right = max(E - e, T)                  F_down = max(F - e, T)
 *     best = max(best, H)                      (a three-input max every two cells)
 * Query rows before row 0 and after row m - 1 (the wavefront's fill and drain) read a virtual
 * table row of -1000 scores: fill rows reproduce the top border (H = 0, F = -o - e) and drain
 * rows stay below the best H of the real rows, so no step needs a branch. Padding columns
 * (past a target's end) hold a padding letter scoring -1000 against everything: H there is at
 * most an E or F inherited from real cells, below their H. A pass's columns right of a
 * target's end never feed a real cell.
 *
 * Global modes (GLOBAL_MODE=1, any free ends): no zero floor; targets are right-aligned, so
 * each ends on its last pass's last column, after virtual columns whose letter scores 0 when
 * the left border is free (H stays 0) and -1000 otherwise (H follows F down the column,
 * -(o + e (i + 1)): the left border again), with a top border of 0 above them; fill and drain
 * rows take a branch (the H row passes through). Results per half: the maximum over the
 * target's last column (the last work-item's column, every row), over the query's last row
 * (real columns), the corner, and the best H (for overflow detection).
 *
 * 16-bit overflow: H only grows by the largest substitution score per step, so the first cell
 * that passes 32767 - max(s) - 64 is exact and lands in the best; the host flags such pairs
 * and recomputes them in int32 (the strip kernel). NO_BEST (global modes): the host has
 * shown that no H can get there (H <= max(s) * m with gap costs >= 0), so the best is not
 * kept (half a three-input max per cell) and stays at -30720.
 *
 * Many queries per launch: dimension 1 of the range is the query of the batch (its pair table,
 * row offsets and length in qinfo); each query's results are one row of `out`, a bucket's
 * lanes from `out_base` on (the host reads a whole batch back in one copy).
 *
 * Results per lane (one target), raw 16-bit values: local mode its best; global modes four, in
 * the strip kernel's order (search.cl).
 *
 * Compile-time constants (-D): G, R (even), WG (work-items per work-group, a multiple of G),
 * USE_PTX, MULTI (multi-pass), GLOBAL_MODE, NO_BEST. Nothing of the query is: the pair table (its
 * letters and the virtual row) and the query row offsets (m + 2 G, with G - 1 virtual rows at
 * each end) are local buffers sized at launch, so every query shares one build per shape.
 */

#ifndef G
#define G 16
#endif
#ifndef R
#define R 16
#endif
#ifndef WG
#define WG 128
#endif
#ifndef USE_PTX
#define USE_PTX 0
#endif
#ifndef MULTI
#define MULTI 0
#endif
#ifndef GLOBAL_MODE
#define GLOBAL_MODE 0
#endif
#ifndef NO_BEST
#define NO_BEST 0
#endif
#if NO_BEST && !GLOBAL_MODE
#error "local mode's result is the best"
#endif
#define W (G * R)
#if (R % 2) != 0
#error "R must be even"
#endif

typedef uint cell_t;
#define SPLAT(x) (((uint)(x) & 0xFFFFu) * 0x10001u)

#include "s16x2.cl"

#if USE_PTX
/* Shuffles inside segments of G lanes of the warp. */
inline uint shfl_up1(uint v) {
    uint r;
    asm volatile("shfl.sync.up.b32 %0, %1, 1, %2, 0xffffffff;"
                 : "=r"(r) : "r"(v), "r"((32 - G) << 8));
    return r;
}
inline uint shfl_xor(uint v, int lanemask) {
    uint r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, %3, 0xffffffff;"
                 : "=r"(r) : "r"(v), "r"(lanemask), "r"(((32 - G) << 8) | 0x1f));
    return r;
}
#endif

#if GLOBAL_MODE
/* Global modes: H on the left border (column -1) at query row r, both halves. */
#define LEFT_H(r) (leftz ? 0u : SPLAT(-(o + e * ((r) + 1))))
#define NEG_PAIR 0x88008800u /* -30720 in both halves: below any real last-row value */
#define GSTATE_ARGS                                                                           \
    cell_t *lastc_, cell_t *lastr_, cell_t *corner_, const int2 pads, const int leftz,      \
        const int o, const int e
#define GSTATE &lastc, &lastr, &corner, pads, leftz, o, e
/* H on the top border (row -1) at padded column j of one half: 0 on the virtual columns
   before the target (and at the corner, j = -1), else 0 or -(o + e (j' + 1)) at target
   column j' = j - pad. */
inline uint top_half(const int j, const int pad, const int topz, const int o, const int e) {
    if (j < pad || topz) return 0u;
    return (uint)(-(o + e * (j - pad + 1))) & 0xFFFFu;
}
inline uint top_pair(const int j, const int2 pads, const int topz, const int o, const int e) {
    return top_half(j, pads.x, topz, o, e) | (top_half(j, pads.y, topz, o, e) << 16);
}
#else
#define LEFT_H(r) 0u
#define GSTATE_ARGS const int unused_
#define GSTATE 0
#endif

/* The score pair of a cell: the query row's table row at byte offset `base`, the column's
   letter pair at byte offset `off`. */
#define SCORE(base, off) (*(__local const uint *)((__local const uchar *)ltab + (base) + (off)))

/* One wavefront step of one work-item: query row i = k - t at its R columns. HI is the H row
   before the step (row i - 1), HO the row after it; F in place. On return hl / el hold the next
   step's left inputs (from work-item t - 1, or the border / carry for t = 0), hd the old hl.
   `mid` (a constant at each call): every work-item of the group is on a real row before the
   last (G - 1 <= k < m - 1), so global modes need no branch for fill, drain or the last row:
   the column loop is straight-line code that the compiler schedules across steps, as in local
   mode. */
inline __attribute__((always_inline)) void step(
    const int mid, const int k, const int t, const int m, const int pass,
    __local const uint *ltab,
    __local const int *lq, const uint *po, const cell_t *HI, cell_t *HO, cell_t *Fc,
    cell_t *hd_, cell_t *hl_, cell_t *el_, cell_t *best_, const cell_t NE, const cell_t NOE,
    __global uint2 *cbuf, __local uint *xh, __local uint *xe, const int lid, GSTATE_ARGS) {
    const int i = k - t;
    cell_t hl = *hl_, el = *el_, best = *best_;
    cell_t h = 0, ee = el;
#if GLOBAL_MODE
    if (mid || (uint)i < (uint)m) {
#endif
        const int base = lq[i + G - 1];
        cell_t d = *hd_, hprev = 0;
#pragma unroll
        for (int c = 0; c < R; c++) {
            const cell_t s = SCORE(base, po[c]);
#if GLOBAL_MODE
            h = p_max(p_addmax(d, s, ee), Fc[c]);
#else
            h = p_maxrelu(p_addmax(d, s, ee), Fc[c]);
#endif
            const cell_t tt = p_add(h, NOE);
            ee = p_addmax(ee, NE, tt);
            Fc[c] = p_addmax(Fc[c], NE, tt);
#if !NO_BEST
            if (c & 1) best = p_max3(best, hprev, h);
            else hprev = h;
#endif
            d = HI[c];
            HO[c] = h;
        }
#if GLOBAL_MODE
        *lastc_ = p_max(*lastc_, h); /* this work-item's last column, every real row */
        if (!mid && i == m - 1) {
            /* the last query row: its real columns (right of each target's padding) */
            const int j0 = pass * W + t * R;
            cell_t lr = *lastr_;
#pragma unroll
            for (int c = 0; c < R; c++) {
                const uint keep = (j0 + c >= pads.x ? 0x0000FFFFu : 0u) |
                                  (j0 + c >= pads.y ? 0xFFFF0000u : 0u);
                lr = p_max(lr, (HO[c] & keep) | (NEG_PAIR & ~keep));
            }
            *lastr_ = lr;
            *corner_ = h;
        }
    } else { /* a fill or drain row: the H row passes through (the top border, when filling) */
#pragma unroll
        for (int c = 0; c < R; c++) HO[c] = HI[c];
        h = HI[R - 1];
    }
#endif
#if MULTI
    if (t == G - 1 && (mid || (uint)i < (uint)m)) cbuf[i] = (uint2)(h, ee);
#endif
    cell_t hd = hl;
#if USE_PTX
    hl = shfl_up1(h);
    el = shfl_up1(ee);
#else
    xh[lid] = h;
    xe[lid] = ee;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t) {
        hl = xh[lid - 1];
        el = xe[lid - 1];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    if (t == 0) { /* row k + 1's left border (or the last pass's column) */
        hl = LEFT_H(k + 1);
        el = p_add(hl, NOE);
#if MULTI
        if (pass && k + 1 < m) {
            const uint2 c1 = cbuf[k + 1];
            hl = c1.x;
            el = c1.y;
        }
#endif
    }
    *hd_ = hd;
    *hl_ = hl;
    *el_ = el;
    *best_ = best;
}

#if USE_PTX
#define XCH 0, 0
#else
#define XCH xh, xe
#endif
#if MULTI
#define CBUF cbuf
#else
#define CBUF 0
#endif
#define STEP_(MID, K, HI, HO)                                                             \
    step(MID, K, t, m, pass, ltab, lq, po, HI, HO, Fc, &hd, &hl, &el, &best, NE, NOE, CBUF, XCH, \
         lid, GSTATE)
#define STEP(K, HI, HO) STEP_(0, K, HI, HO)
#define STEP_MID(K, HI, HO) STEP_(1, K, HI, HO)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void group_search(
    __global const ushort *cols, /* per pair: passes * W column letter-pair byte offsets */
    __global const uint *table,  /* every query's [query letters + 1 virtual][L * L], one after another */
    __global const int *qoff,    /* every query's [m] byte offsets of its rows' table rows */
    __global const int *qinfo,   /* per query: m, first table word, table words, first qoff,
                                    virtual row's byte offset, 0, 0, 0 */
    __global ushort *out,        /* per query (dimension 1): raw 16-bit results per lane */
    __global uint2 *carry,       /* MULTI: per group slot, [cstride] (H, E) */
    __global const int2 *pad_of, /* global modes: per pair, virtual columns before each target */
    const int npairs, const int passes, const int o, const int e,
    const int topz,              /* global modes: row -1 is all zeros */
    const int leftz,             /* global modes: column -1 is all zeros */
    const int out_base,          /* this bucket's first lane in a query's results */
    const int out_stride,        /* ushorts per query in out */
    const int cstride,           /* carry rows per group slot (the batch's longest query) */
    __local uint *ltab,          /* [the batch's largest table]: this query's pair table */
    __local int *lq) {           /* [longest m + 2 G]: each query row's table offset */
#if !USE_PTX
    __local uint xh[WG], xe[WG];
#endif
    const int lid = get_local_id(0);
    const int t = lid % G;
    const int q = get_group_id(1);
    __global const int *qi = qinfo + 8 * q;
    const int m = qi[0], ntab = qi[2], virt_off = qi[4];
    __global const uint *qtab = table + qi[1];
    __global const int *qrow = qoff + qi[3];
    for (int k = lid; k < ntab; k += WG) ltab[k] = qtab[k];
    for (int k = lid; k < m + 2 * G; k += WG)
        lq[k] = (k >= G - 1 && k < m + G - 1) ? qrow[k - (G - 1)] : virt_off;
    barrier(CLK_LOCAL_MEM_FENCE);

    const int ngroups = get_global_size(0) / G;
    const int wg_group0 = get_group_id(0) * (WG / G);
    const int pslot = get_global_id(0) / G; /* this group's first pair */
    const cell_t NE = SPLAT(-e), NOE = SPLAT(-(o + e));
#if MULTI
    const size_t gslot = ((size_t)q * get_num_groups(0) + get_group_id(0)) * (WG / G) + lid / G;
    __global uint2 *cbuf = carry + gslot * cstride;
#endif
    __global ushort *qout = out + (size_t)q * out_stride;

    /* Persistent groups: each takes pair after pair (the loop bound is uniform per
       work-group, as the barriers of the portable exchange need). */
    for (int p0 = 0;; p0 += ngroups) {
        if (p0 + wg_group0 >= npairs) break;
        const int p = p0 + pslot;
        const int pp = p < npairs ? p : npairs - 1; /* idle groups repeat the last pair */
#if GLOBAL_MODE
        const int2 pads = pad_of[pp];
        cell_t best = NEG_PAIR, lastc = NEG_PAIR, lastr = NEG_PAIR, corner = NEG_PAIR;
#else
        cell_t best = 0u;
#endif
        for (int pass = 0; pass < passes; pass++) {
            uint po[R];
            cell_t HcA[R], HcB[R], Fc[R];
            __global const ushort *cp = cols + ((size_t)pp * passes + pass) * W + t * R;
            const int j0 = pass * W + t * R;
#pragma unroll
            for (int c = 0; c < R; c++) {
                po[c] = cp[c];
#if GLOBAL_MODE
                const cell_t top = top_pair(j0 + c, pads, topz, o, e);
#else
                const cell_t top = 0u;
#endif
                HcA[c] = top; /* the top border */
                HcB[c] = top;
                Fc[c] = p_add(top, NOE);
            }
#if GLOBAL_MODE
            /* the diagonal of row 0 (the top border left of this work-item's columns, the
               corner for j0 = 0); work-items t > 0 pass it on as their first left input */
            const cell_t top0 = top_pair(j0 - 1, pads, topz, o, e);
            cell_t hd = top0, hl = t ? top0 : LEFT_H(0);
            lastc = NEG_PAIR; /* the last pass's counts */
#else
            cell_t hd = 0u, hl = 0u;
#endif
            cell_t el = p_add(hl, NOE);
#if MULTI
            if (t == 0 && pass) {
                const uint2 c0 = cbuf[0];
                hl = c0.x;
                el = c0.y;
            }
#endif
            /* two steps per iteration, the H row alternating between HcA and HcB, so the
               unrolled column loop needs no register moves to carry the row over */
            for (int k = 0; k < m + G - 1; k += 2) {
#if GLOBAL_MODE
                /* past the fill: the steps where every work-item is on a real row before
                   the last, without branches (one more copy of the step, not two: the fill
                   and the drain share this loop's) */
                if (k == G)
                    for (; k + 1 < m - 1; k += 2) {
                        STEP_MID(k, HcA, HcB);
                        STEP_MID(k + 1, HcB, HcA);
                    }
#endif
                STEP(k, HcA, HcB);
                STEP(k + 1, HcB, HcA);
            }
#if MULTI
            mem_fence(CLK_GLOBAL_MEM_FENCE);
#if !USE_PTX
            barrier(CLK_GLOBAL_MEM_FENCE);
#endif
#endif
        }
        /* the group's best (and last row): max over its G lanes */
#if USE_PTX
#pragma unroll
        for (int off = 1; off < G; off <<= 1) {
            best = p_max(best, shfl_xor(best, off));
#if GLOBAL_MODE
            lastr = p_max(lastr, shfl_xor(lastr, off));
#endif
        }
#else
        xh[lid] = best;
#if GLOBAL_MODE
        xe[lid] = lastr;
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t == 0)
            for (int u = 1; u < G; u++) {
                best = p_max(best, xh[lid + u]);
#if GLOBAL_MODE
                lastr = p_max(lastr, xe[lid + u]);
#endif
            }
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        if (p < npairs) {
#if GLOBAL_MODE
            /* per lane (half): last column (the target's last, where the pass ends), last
               row, corner, best; in the strip kernel's order (search.cl's lanes) */
            __global ushort *o2 = qout + 4 * ((size_t)out_base + 2 * p);
            if (t == G - 1) {
                o2[0] = (ushort)(lastc & 0xFFFFu);
                o2[4] = (ushort)(lastc >> 16);
                o2[2] = (ushort)(corner & 0xFFFFu);
                o2[6] = (ushort)(corner >> 16);
            }
            if (t == 0) {
                o2[1] = (ushort)(lastr & 0xFFFFu);
                o2[5] = (ushort)(lastr >> 16);
                o2[3] = (ushort)(best & 0xFFFFu);
                o2[7] = (ushort)(best >> 16);
            }
#else
            if (t == 0) {
                qout[out_base + 2 * p] = (ushort)(best & 0xFFFFu);
                qout[out_base + 2 * p + 1] = (ushort)(best >> 16);
            }
#endif
        }
    }
}
