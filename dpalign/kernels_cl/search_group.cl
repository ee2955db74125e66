/* Local-mode database search with thread groups per target pair (the CUDASW++ 4.0 decomposition).
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
 * 16-bit overflow: H only grows by the largest substitution score per step, so the first cell
 * that passes 32767 - max(s) - 64 is exact and lands in the best; the host flags such pairs
 * and recomputes them in int32 (the strip kernel).
 *
 * Results per pair (uint4): the two best scores as raw 16-bit values, twice (the layout of the
 * strip kernel's lanes is not shared).
 *
 * Compile-time constants (-D): G, R (even), WG (work-items per work-group, a multiple of G),
 * USE_PTX, MULTI (multi-pass), TAB_WORDS (the pair table and its virtual row, in words), QMAX
 * (m + 2 G: the query row offsets with G - 1 virtual rows at each end).
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
#ifndef TAB_WORDS
#define TAB_WORDS 9000
#endif
#ifndef QMAX
#define QMAX 1024
#endif
#define W (G * R)
#if (R % 2) != 0
#error "R must be even"
#endif

typedef uint cell_t;
#define SPLAT(x) (((uint)(x) & 0xFFFFu) * 0x10001u)

#if USE_PTX
/* ptxas fuses add.s16x2 feeding max.s16x2 into one DPX VIADDMNMX (two cells). */
inline uint p_add(uint a, uint b) {
    uint r;
    asm("add.s16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
inline uint p_max(uint a, uint b) {
    uint r;
    asm("max.s16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
inline uint p_maxrelu(uint a, uint b) {
    uint r;
    asm("max.s16x2.relu %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
inline uint p_addmax(uint a, uint b, uint c) {
    uint r;
    asm("{.reg .b32 t; add.s16x2 t, %1, %2; max.s16x2 %0, t, %3;}"
        : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
inline uint p_max3(uint a, uint b, uint c) {
    uint r;
    asm("{.reg .b32 t; max.s16x2 t, %1, %2; max.s16x2 %0, t, %3;}"
        : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
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
#else
inline uint p_add(uint a, uint b) { return as_uint(as_short2(a) + as_short2(b)); }
inline uint p_max(uint a, uint b) { return as_uint(max(as_short2(a), as_short2(b))); }
inline uint p_maxrelu(uint a, uint b) {
    return as_uint(max(max(as_short2(a), as_short2(b)), (short2)(0, 0)));
}
inline uint p_addmax(uint a, uint b, uint c) { return p_max(p_add(a, b), c); }
inline uint p_max3(uint a, uint b, uint c) { return p_max(p_max(a, b), c); }
#endif

/* The score pair of a cell: the query row's table row at byte offset `base`, the column's
   letter pair at byte offset `off`. */
#define SCORE(base, off) (*(__local const uint *)((__local const uchar *)ltab + (base) + (off)))

/* One wavefront step of one work-item: query row i = k - t at its R columns. HI is the H row
   before the step (row i - 1), HO the row after it; F in place. On return hl / el hold the next
   step's left inputs (from work-item t - 1, or the border / carry for t = 0), hd the old hl. */
inline __attribute__((always_inline)) void step(
    const int k, const int t, const int m, const int pass, __local const uint *ltab,
    __local const int *lq, const uint *po, const cell_t *HI, cell_t *HO, cell_t *Fc,
    cell_t *hd_, cell_t *hl_, cell_t *el_, cell_t *best_, const cell_t NE, const cell_t NOE,
    __global uint2 *cbuf, __local uint *xh, __local uint *xe, const int lid) {
    const int i = k - t;
    cell_t hl = *hl_, el = *el_, best = *best_;
    const int base = lq[i + G - 1];
    cell_t d = *hd_, ee = el, h = 0, hprev = 0;
#pragma unroll
    for (int c = 0; c < R; c++) {
        const cell_t s = SCORE(base, po[c]);
        h = p_maxrelu(p_addmax(d, s, ee), Fc[c]);
        const cell_t tt = p_add(h, NOE);
        ee = p_addmax(ee, NE, tt);
        Fc[c] = p_addmax(Fc[c], NE, tt);
        if (c & 1) best = p_max3(best, hprev, h);
        else hprev = h;
        d = HI[c];
        HO[c] = h;
    }
#if MULTI
    if (t == G - 1 && (uint)i < (uint)m) cbuf[i] = (uint2)(h, ee);
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
    if (t == 0) { /* row k + 1's left border: H = 0, E = -o - e (or the last pass's column) */
        hl = 0u;
        el = NOE;
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
#define STEP(K, HI, HO) \
    step(K, t, m, pass, ltab, lq, po, HI, HO, Fc, &hd, &hl, &el, &best, NE, NOE, CBUF, XCH, lid)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void group_search(
    __global const ushort *cols, /* per pair: passes * W column letter-pair byte offsets */
    __global const uint *table,  /* [query letters + 1 virtual][L * L] */
    __global const int *qoff,    /* [m] byte offset of each query row's table row */
    __global uint4 *out,         /* per pair */
    __global uint2 *carry,       /* MULTI: per group slot, [m] (H, E) */
    const int npairs, const int m, const int passes, const int ntab, const int o, const int e,
    const int virt_off) {        /* byte offset of the virtual table row */
    __local uint ltab[TAB_WORDS];
    __local int lq[QMAX];
#if !USE_PTX
    __local uint xh[WG], xe[WG];
#endif
    const int lid = get_local_id(0);
    const int t = lid % G;
    for (int k = lid; k < ntab; k += WG) ltab[k] = table[k];
    for (int k = lid; k < m + 2 * G; k += WG)
        lq[k] = (k >= G - 1 && k < m + G - 1) ? qoff[k - (G - 1)] : virt_off;
    barrier(CLK_LOCAL_MEM_FENCE);

    const int ngroups = get_global_size(0) / G;
    const int gslot = get_global_id(0) / G;
    const int wg_group0 = get_group_id(0) * (WG / G);
    const cell_t NE = SPLAT(-e), NOE = SPLAT(-(o + e));
#if MULTI
    __global uint2 *cbuf = carry + (size_t)gslot * m;
#endif

    /* Persistent groups: each takes pair after pair (the loop bound is uniform per
       work-group, as the barriers of the portable exchange need). */
    for (int p0 = 0;; p0 += ngroups) {
        if (p0 + wg_group0 >= npairs) break;
        const int p = p0 + gslot;
        const int pp = p < npairs ? p : npairs - 1; /* idle groups repeat the last pair */
        cell_t best = 0u;
        for (int pass = 0; pass < passes; pass++) {
            uint po[R];
            cell_t HcA[R], HcB[R], Fc[R];
            __global const ushort *cp = cols + ((size_t)pp * passes + pass) * W + t * R;
#pragma unroll
            for (int c = 0; c < R; c++) {
                po[c] = cp[c];
                HcA[c] = 0u; /* the top border */
                HcB[c] = 0u;
                Fc[c] = NOE;
            }
            cell_t hd = 0u, hl = 0u, el = NOE; /* the corner and the left border of row 0 */
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
        /* the group's best: max over its G lanes */
#if USE_PTX
#pragma unroll
        for (int off = 1; off < G; off <<= 1) best = p_max(best, shfl_xor(best, off));
#else
        xh[lid] = best;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t == 0)
            for (int u = 1; u < G; u++) best = p_max(best, xh[lid + u]);
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        if (p < npairs && t == 0) out[p] = (uint4)(best & 0xFFFFu, best >> 16, 0u, 0u);
    }
}
