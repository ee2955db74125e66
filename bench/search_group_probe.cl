/* Prototype: protein database search with the CUDASW++4.0 decomposition (probe, see
 * bench/search_group_probe.py).
 *
 * Two database targets per thread group (one per 16-bit half of every 32-bit register), G
 * threads per group (a segment of a warp), R consecutive target columns per thread held in
 * registers. DP rows are query residues, streamed one per step; thread t works on query row
 * i = k - t at step k (a wavefront across the group), and hands its last column's H and E to
 * thread t + 1 by one shuffle each (shfl.sync.up inside a G-lane segment). Thread 0 takes the
 * left border, or, for targets longer than W = G * R (multi-pass), the previous pass's last
 * column from global memory ("carry", one (H, E) pair per query row per group).
 *
 * Substitution scores come from a pair table in local memory:
 *     table[q][a * L + b] = (s(q, a) & 0xFFFF) | (s(q, b) << 16)
 * for compact query letter q and compact target letters a, b (L letters incl. the padding
 * letter, whose score is -1000): one LDS per cell pair, no byte shuffling. Each column holds
 * the byte offset (a * L + b) * 4 of its pair; each query row the byte offset of its table row.
 *
 * Recurrence (scikit-bio: a gap of k costs o + k e), local mode:
 *     E[i][j] = max(E[i][j-1] - e, H[i][j-1] - o - e)
 *     F[i][j] = max(F[i-1][j] - e, H[i-1][j] - o - e)
 *     H[i][j] = max(0, H[i-1][j-1] + s, E[i][j], F[i][j])
 * Global mode: no zero floor, borders -(o + e k), the score is H[m-1][n-1].
 *
 * Cell variants (CELL, ops per cell pair; "fused" = one DPX VIADDMNMX on sm_90):
 *   1  G frame (stored G = H - o - e; the table holds s + o + e):
 *        E = max(E - e, G_left) f; F = max(F - e, G_up) f; X = max(G_diag + s', E) f;
 *        H = max(X, F, 0) (max.relu); G = H - o - e (add); best: max3 per two cells
 *   2  H frame (CUDASW++4.0 order: E, F of the cell are ready before H):
 *        H = max3relu(H_diag + s, E, F) (add + max3); T = H - o - e (add);
 *        E_next = max(E - e, T) f; F_next = max(F - e, T) f; best: max3 per two cells
 *   3  as 2 with H = max.relu(max(H_diag + s, E) f, F)
 *   ARITH=1 (f16x2, CUDASW++4.0's half2 kernels; local mode, exact below 2048): the CELL 2
 *        order with H = max(max(relu(H_diag + s) (fma.relu), E), F), T = H - oe,
 *        E = max(E - e, T), F = max(F - e, T), best = max(best, H): 9 ops on the FMA/ALU pipes.
 *
 * Compile-time constants (-D): G, R, WG (work-items per group), USE_PTX, ARITH, CELL,
 * LOCAL_MODE, MULTI (multi-pass support), TAB_WORDS (local table words), QMAX (local query
 * offsets), VIRT, ADDR_IMAD, DIAG_NOLDS.
 */

#ifndef G
#define G 8
#endif
#ifndef R
#define R 16
#endif
#ifndef WG
#define WG 256
#endif
#ifndef USE_PTX
#define USE_PTX 0
#endif
#ifndef ARITH
#define ARITH 0
#endif
#ifndef CELL
#define CELL 2
#endif
#ifndef LOCAL_MODE
#define LOCAL_MODE 1
#endif
#ifndef MULTI
#define MULTI 0
#endif
#ifndef TAB_WORDS
#define TAB_WORDS 9000
#endif
#ifndef QMAX
#define QMAX 1024 /* at least m + 2 G */
#endif
#ifndef VIRT
#define VIRT 0 /* local mode: wavefront fill and drain rows read a virtual table row whose
                  scores are -1000 (harmless) instead of being skipped by a branch */
#endif
#if VIRT && !LOCAL_MODE
#error "virtual rows are for local mode"
#endif
#define W (G * R)

#if (R % 2) != 0
#error "R must be even"
#endif
#if ARITH == 1 && !USE_PTX
#error "f16x2 arithmetic needs inline PTX"
#endif
#if ARITH == 1 && !LOCAL_MODE
#error "f16x2 arithmetic is for local mode"
#endif

typedef uint cell_t;
#define SPLAT(x) (((uint)(x) & 0xFFFFu) * 0x10001u)

#if ARITH == 0
/* ---- signed 16-bit pairs ---- */
#if USE_PTX
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
inline uint p_max3relu(uint a, uint b, uint c) {
    uint r;
    asm("{.reg .b32 t; max.s16x2.relu t, %1, %2; max.s16x2.relu %0, t, %3;}"
        : "=r"(r) : "r"(a), "r"(b), "r"(c));
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
inline uint p_max3relu(uint a, uint b, uint c) { return p_maxrelu(p_max(a, b), c); }
#endif
#define BMAX(a, b) p_max(a, b)

#else
/* ---- f16 pairs (values are exact integers below 2048 in magnitude) ---- */
inline uint h_add(uint a, uint b) {
    uint r;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
inline uint h_max(uint a, uint b) {
    uint r;
    asm("max.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
inline uint h_fmarelu(uint a, uint b, uint c) { /* relu(a * b + c) */
    uint r;
    asm("fma.rn.relu.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
#define BMAX(a, b) h_max(a, b)
#endif

/* ---- shuffles inside a segment of G lanes ---- */
#if USE_PTX
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

/* score pair of the cell: table row at byte offset `base`, pair at byte offset `off`.
   ADDR_IMAD=1: the address as base * one + off (an IMAD, FMA pipe, instead of an IADD3 on the
   ALU pipe that the DPX instructions use). DIAG_NOLDS=1 (diagnostic, wrong scores): no table
   load at all, s = base ^ off, to see what the loads cost. */
#ifndef ADDR_IMAD
#define ADDR_IMAD 0
#endif
#ifndef DIAG_NOLDS
#define DIAG_NOLDS 0
#endif
#if DIAG_NOLDS
#define SCORE(base, off) (((uint)(base) ^ (off)) & 0x00070007u)
#elif ADDR_IMAD
#define SCORE(base, off) \
    (*(__local const uint *)((__local const uchar *)ltab + (uint)(base) * one + (off)))
#else
#define SCORE(base, off) (*(__local const uint *)((__local const uchar *)ltab + (base) + (off)))
#endif

/* ---- one wavefront step of one thread: query row i = k - t at its R columns ----
   HI: the H row before this step (row i - 1), HO: the row after it (row i); Fc in place.
   hd / hl / el: the diagonal, left H and left E inputs; on return hl / el hold the next
   step's inputs (from thread t - 1, or the border / carry for thread 0) and hd the old hl. */
inline __attribute__((always_inline)) void step(
    const int k, const int t, const int m, const int pass, const int o, const int e,
    __local const uint *ltab, __local const int *lq, const uint *po, const cell_t *HI,
    cell_t *HO, cell_t *Fc, cell_t *hd_, cell_t *hl_, cell_t *el_, cell_t *best_,
    const cell_t NE, const cell_t NOE, const cell_t NEG, const uint NEH, const uint NOEH,
    const uint ONEH, const uint one, __global uint2 *cbuf, const int2 nl, cell_t *corner_a,
    cell_t *corner_b, int *has_a, int *has_b, __local uint *xh, __local uint *xe,
    const int lid) {
    const int i = k - t;
    const int oe = o + e;
    cell_t hd = *hd_, hl = *hl_, el = *el_, best = *best_;
    cell_t oh, oee;
#if VIRT
    {
#else
    if ((uint)i < (uint)m) {
#endif
        const int base = lq[i + G - 1];
#if ARITH == 1
        /* ---- f16, H frame ---- */
        cell_t d = hd, ee = el, h = 0;
#pragma unroll
        for (int c = 0; c < R; c++) {
            const cell_t s = SCORE(base, po[c]);
            h = h_max(h_max(h_fmarelu(d, ONEH, s), ee), Fc[c]);
            const cell_t tt = h_add(h, NOEH);
            ee = h_max(h_add(ee, NEH), tt);
            Fc[c] = h_max(h_add(Fc[c], NEH), tt);
            best = h_max(best, h);
            d = HI[c];
            HO[c] = h;
        }
        oh = h;
        oee = ee;
#elif CELL == 1
        /* ---- G frame ---- */
        cell_t g = hl, ee = el, d = hd, hprev = 0;
#pragma unroll
        for (int c = 0; c < R; c++) {
            const cell_t s = SCORE(base, po[c]);
            ee = p_addmax(ee, NE, g);
            Fc[c] = p_addmax(Fc[c], NE, HI[c]);
            const cell_t x = p_addmax(d, s, ee);
#if LOCAL_MODE
            const cell_t h = p_maxrelu(x, Fc[c]);
#else
            const cell_t h = p_max(x, Fc[c]);
#endif
            if (c & 1) best = p_max3(best, hprev, h);
            else hprev = h;
            d = HI[c];
            g = p_add(h, NOE);
            HO[c] = g;
        }
        oh = g;
        oee = ee;
#else
        /* ---- H frame (CUDASW++4.0 order) ---- */
        cell_t d = hd, ee = el, h = 0, hprev = 0;
#pragma unroll
        for (int c = 0; c < R; c++) {
            const cell_t s = SCORE(base, po[c]);
#if CELL == 2 && LOCAL_MODE
            h = p_max3relu(p_add(d, s), ee, Fc[c]);
#elif CELL == 2
            h = p_max3(p_add(d, s), ee, Fc[c]);
#elif LOCAL_MODE
            h = p_maxrelu(p_addmax(d, s, ee), Fc[c]);
#else
            h = p_max(p_addmax(d, s, ee), Fc[c]);
#endif
            const cell_t tt = p_add(h, NOE);
            ee = p_addmax(ee, NE, tt);
            Fc[c] = p_addmax(Fc[c], NE, tt);
            if (c & 1) best = p_max3(best, hprev, h);
            else hprev = h;
            d = HI[c];
            HO[c] = h;
        }
        oh = h;
        oee = ee;
#endif
#if !LOCAL_MODE
        if (i == m - 1) {
            /* the corner: column n - 1 of each target */
            const int j0 = pass * W + t * R;
#pragma unroll
            for (int c = 0; c < R; c++) {
                const int j = j0 + c;
#if CELL == 1
                const cell_t hv = p_add(HO[c], SPLAT(oe));
#else
                const cell_t hv = HO[c];
#endif
                if (j == nl.x - 1) {
                    *corner_a = hv;
                    *has_a = 1;
                }
                if (j == nl.y - 1) {
                    *corner_b = hv;
                    *has_b = 1;
                }
            }
        }
#endif
    }
#if !VIRT
    else {
#pragma unroll
        for (int c = 0; c < R; c++) HO[c] = HI[c];
        oh = HI[R - 1];
        oee = el;
    }
#endif
#if MULTI
    if (t == G - 1 && (uint)i < (uint)m) cbuf[i] = (uint2)(oh, oee);
#endif
    /* hand the last column to the next thread; thread 0 takes row k + 1's left input */
    hd = hl;
#if USE_PTX
    hl = shfl_up1(oh);
    el = shfl_up1(oee);
#else
    xh[lid] = oh;
    xe[lid] = oee;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t) {
        hl = xh[lid - 1];
        el = xe[lid - 1];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    if (t == 0) {
        const int r1 = k + 1;
#if MULTI
        if (pass && r1 < m) {
            const uint2 c1 = cbuf[r1];
            hl = c1.x;
            el = c1.y;
        } else
#endif
        {
#if LOCAL_MODE
            const int left = 0;
#else
            const int left = -(o + e * (r1 + 1));
#endif
#if ARITH == 1
            hl = 0u;
            el = NOEH;
#elif CELL == 1
            hl = SPLAT(left - oe);
            el = NEG;
#else
            hl = SPLAT(left);
            el = SPLAT(left - oe);
#endif
        }
    }
    *hd_ = hd;
    *hl_ = hl;
    *el_ = el;
    *best_ = best;
}

#if USE_PTX
#define XCH_ARGS 0, 0, lid
#else
#define XCH_ARGS xh, xe, lid
#endif
#if LOCAL_MODE
#define GLOBAL_ARGS (int2)(0, 0), 0, 0, 0, 0
#else
#define GLOBAL_ARGS nl, &corner_a, &corner_b, &has_a, &has_b
#endif
#if MULTI
#define CBUF cbuf
#else
#define CBUF 0
#endif
#define STEP_CALL(K, HI, HO)                                                                   \
    step(K, t, m, pass, o, e, ltab, lq, po, HI, HO, Fc, &hd, &hl, &el, &best, NE, NOE, NEG,    \
         NEH, NOEH, ONEH, one, CBUF, GLOBAL_ARGS, XCH_ARGS)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void group_search(
    __global const ushort *cols, /* per pair: passes * W column pair offsets */
    __global const uint *table,  /* [nq][L * L] */
    __global const int *qoff,    /* [m] byte offset of each query row's table row */
    __global const int2 *plen,   /* per pair: the two target lengths (global mode) */
    __global uint *out,          /* per pair: 4 words (score a, score b, max a, max b), raw 16 */
    __global uint2 *carry,       /* MULTI: per group slot, [m] (H, E) */
    const int npairs, const int m, const int passes, const int ntab, const int o, const int e,
    const uint NEH, const uint NOEH, const uint ONEH, /* f16 constants -e, -(o + e), 1 */
    const uint one,       /* 1, unknown to the compiler (ADDR_IMAD) */
    const int virt_off) { /* byte offset of the virtual (all -1000) table row (VIRT) */
    __local uint ltab[TAB_WORDS];
    __local int lq[QMAX];
#if !USE_PTX
    __local uint xh[WG], xe[WG];
#endif
    const int lid = get_local_id(0);
    const int t = lid % G;
    for (int k = lid; k < ntab; k += WG) ltab[k] = table[k];
    /* query row offsets, padded by G - 1 virtual rows at each end (lq[i + G - 1] is row i) */
    for (int k = lid; k < m + 2 * G; k += WG)
        lq[k] = (k >= G - 1 && k < m + G - 1) ? qoff[k - (G - 1)] : virt_off;
    barrier(CLK_LOCAL_MEM_FENCE);

    const int ngroups = get_global_size(0) / G;
    const int gslot = get_global_id(0) / G;
    const int wg_group0 = get_group_id(0) * (WG / G);
    const int oe = o + e;
#if ARITH == 0
    const cell_t NE = SPLAT(-e), NOE = SPLAT(-oe);
#if LOCAL_MODE
    const cell_t NEG = SPLAT(-1000);
#else
    const cell_t NEG = SPLAT(-16000);
#endif
#else
    const cell_t NE = 0, NOE = 0, NEG = 0;
#endif
#if MULTI
    __global uint2 *cbuf = carry + (size_t)gslot * m;
#endif

    for (int p0 = 0;; p0 += ngroups) {
        if (p0 + wg_group0 >= npairs) break; /* uniform per work-group */
        const int p = p0 + gslot;
        const int pp = p < npairs ? p : npairs - 1; /* idle groups repeat the last pair */
#if ARITH == 1 || LOCAL_MODE
        cell_t best = 0u;
#else
        cell_t best = NEG;
#endif
#if !LOCAL_MODE
        cell_t corner_a = 0, corner_b = 0;
        int has_a = 0, has_b = 0;
        const int2 nl = plen[pp];
#endif
        for (int pass = 0; pass < passes; pass++) {
            uint po[R];
            cell_t HcA[R], HcB[R], Fc[R];
            __global const ushort *cp = cols + ((size_t)pp * passes + pass) * W + t * R;
#pragma unroll
            for (int c = 0; c < R; c++) po[c] = cp[c];
            /* the top border (row -1) at this thread's columns, and F */
#pragma unroll
            for (int c = 0; c < R; c++) {
#if LOCAL_MODE
                const int top = 0;
#else
                const int top = -(o + e * (pass * W + t * R + c + 1));
#endif
#if ARITH == 1
                HcA[c] = 0u;  /* +0.0 */
                Fc[c] = NOEH; /* F(0) = H(-1) - oe = -oe (local) */
#elif CELL == 1
                HcA[c] = SPLAT(top - oe);
                Fc[c] = NEG;
#else
                HcA[c] = SPLAT(top);
                Fc[c] = SPLAT(top - oe);
#endif
                HcB[c] = HcA[c];
            }
            /* the diagonal input of row 0: the top border at the column left of this thread's
               first one (j = pW + tR - 1; the corner H[-1][-1] = 0 for j = -1). Threads t > 0
               take it from hl (what thread t - 1 hands over before it starts), thread 0
               then replaces hl by its left input for row 0. */
#if LOCAL_MODE
            const int diag0 = 0;
#else
            const int diag0 = (pass || t) ? -(o + e * (pass * W + t * R)) : 0;
#endif
#if ARITH == 1
            cell_t hd = 0u, hl = 0u, el = NOEH;
#elif CELL == 1
            cell_t hd = SPLAT(diag0 - oe), hl = hd, el = NEG;
#else
            cell_t hd = SPLAT(diag0), hl = hd, el = NEG;
#endif
            if (t == 0) {
#if MULTI
                if (pass) {
                    const uint2 c0 = cbuf[0];
                    hl = c0.x;
                    el = c0.y;
                } else
#endif
                {
#if LOCAL_MODE
                    const int left = 0;
#else
                    const int left = -(o + e);
#endif
#if ARITH == 1
                    hl = 0u;
                    el = NOEH;
#elif CELL == 1
                    hl = SPLAT(left - oe);
                    el = NEG;
#else
                    hl = SPLAT(left);
                    el = SPLAT(left - oe);
#endif
                }
            }
#if MULTI
            mem_fence(CLK_GLOBAL_MEM_FENCE);
#endif
            const int nsteps = m + G - 1;
            /* two steps per iteration, the H row alternating between HcA and HcB: the unrolled
               column loop then needs no register moves to carry the row to the next step */
            for (int k = 0; k < nsteps; k += 2) {
                STEP_CALL(k, HcA, HcB);
                STEP_CALL(k + 1, HcB, HcA);
            } /* steps */
#if MULTI
            mem_fence(CLK_GLOBAL_MEM_FENCE);
#if !USE_PTX
            barrier(CLK_GLOBAL_MEM_FENCE);
#endif
#endif
        } /* passes */

        /* the group's best: max over its G lanes */
#if USE_PTX
#pragma unroll
        for (int off = 1; off < G; off <<= 1) best = BMAX(best, shfl_xor(best, off));
#else
        xh[lid] = best;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t == 0)
            for (int u = 1; u < G; u++) best = BMAX(best, xh[lid + u]);
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        if (p < npairs) {
#if LOCAL_MODE
            if (t == 0) {
                out[4 * p + 0] = best & 0xFFFFu;
                out[4 * p + 1] = best >> 16;
                out[4 * p + 2] = best & 0xFFFFu;
                out[4 * p + 3] = best >> 16;
            }
#else
            /* the corner cells sit in the threads that hold columns n - 1 */
            if (has_a) out[4 * p + 0] = corner_a & 0xFFFFu;
            if (has_b) out[4 * p + 1] = corner_b >> 16;
            if (t == 0) {
                out[4 * p + 2] = best & 0xFFFFu;
                out[4 * p + 3] = best >> 16;
            }
#endif
        }
    } /* pairs */
}
