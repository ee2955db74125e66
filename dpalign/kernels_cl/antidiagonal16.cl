/* The anti-diagonal tile kernel of antidiagonal.cl with two cells per instruction: packed
 * signed 16-bit lanes (s16x2.cl; Hopper's DPX add-max on NVIDIA), values relative to a base
 * per tile. Same arguments, boundaries, checkpoints and tile-row maxima as `ad_tiles`, and
 * the same results, bit for bit, wherever a tile's values provably fit 16 bits.
 *
 * Layout: a tile is TR x (2 * TW * CPT) cells, one work-group of TW work-items. Work-item t
 * runs two "virtual" work-items of a skewed wavefront of 2 TW: t (columns t*CPT.., the low
 * halves of its registers) and t + TW (columns (TW + t)*CPT.., the high halves), which is TW
 * rows behind. At step s, virtual v computes row s - v of its CPT columns. The horizontal
 * state passes from virtual v to v + 1 once per step: one rotate by one work-item of the
 * packed (G, I) words carries both halves at once (t - 1 -> t; for t = 0 the low half is the
 * tile's left column and the high half comes from the low half of work-item TW - 1). A tile
 * takes TR + 2 TW - 1 steps. Before virtual t + TW starts (step t + TW) the high halves of
 * its registers held garbage of the steps before; its top row is put back then.
 *
 * Range (never silent): with base = the smallest H on the tile's boundary (top row, corner,
 * left column), every H inside lies in [base - o - e TR, max + smax TR] (a vertical gap from
 * the top row; at most TR matches from the boundary), D and I at most o + e below that
 * after their first step, and "-inf" inputs are clamped to FLOOR16, which can then never
 * win a max. A tile whose bounds do not fit +-LIM computes nothing and sets flags[2]; the
 * host then fills the region again in 32-bit lanes.
 *
 * Compile-time constants: TW, CPT, LOCAL_MODE, USE_SHFL (NVIDIA, TW == 32), USE_PTX (sm_90
 * packed PTX, s16x2.cl), CHAIN (2 or 3, below), UNROLL2 (1: two steps per loop iteration),
 * LDS_EDGES / MAXTR (the tile's edges through local memory), TRACK_STORE (local mode: a
 * lane's new best row keeps its G in local memory by predicated stores and the column is
 * found after the loop, instead of a branch that searches it at once; unmeasured on a GPU).
 */

#include "s16x2.cl"
#include "tiles.cl"

#ifndef TW
#define TW 32
#endif
#ifndef CPT
#define CPT 8
#endif
#ifndef LOCAL_MODE
#define LOCAL_MODE 0
#endif
#ifndef USE_SHFL
#define USE_SHFL 0
#endif
#ifndef ALIGNED
#define ALIGNED 0 /* 1: the region's first column and the profile's stride are multiples of 4 */
#endif
#ifndef CHAIN
#define CHAIN 3
#endif
#ifndef LDS_EDGES
#define LDS_EDGES 1 /* the tile's left and right columns pass through local memory */
#endif
#ifndef MAXTR
#define MAXTR 512 /* LDS_EDGES: the most rows a tile may have */
#endif
#ifndef TRACK_STORE
#define TRACK_STORE 0 /* local mode: keep the best row's G, find its column after the loop */
#endif
#ifndef UNROLL2
#define UNROLL2 1
#endif
#define HALF (TW * CPT)
#define LIM 30000
#define SPREAD 2048
#define FLOOR16 (-32000)

#if CPT > 16
#error "at most 16 columns per work-item"
#endif

inline uint pk(int lo, int hi) { return ((uint)lo & 0xffffu) | ((uint)hi << 16); }
inline int lo16(uint v) { return (int)(short)(v & 0xffffu); }
inline int hi16(uint v) { return ((int)v) >> 16; }
/* an absolute value relative to the tile's base, "-inf" clamped */
inline int rel(int v, int base) { return clamp(add_sat(v, -base), FLOOR16, LIM); }

#if USE_SHFL
inline uint shfl_idx(uint v, int src) {
    uint r;
    asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v), "r"(src));
    return r;
}
#endif

/* one packed cell, column k of both halves (see antidiagonal.cl's CELL for the recurrence;
   max is associative, so max(max(gd + s', D), I) is its max(max(gd + s', I), D)).
   Local mode: the diagonal term is max(gd + s', D, 0), so G = H - o - e as in global mode.
   CHAIN 2: H = max(max(gd + s', D, I_left - e), G_left), one instruction fewer between one
   cell's G and the next's (I_left's own update runs beside it), one more in all. */
#define PCELL(k, PARTIAL)                                                                   \
    if ((k) < CPT) {                                                                        \
        uint hh;                                                                            \
        dup[(k) % CPT] = p_addmax(dup[(k) % CPT], nege, gup[(k) % CPT]);                    \
        uint dg = p_addmax(gd, scb[cur][(k) % CPT], dup[(k) % CPT]);                        \
        if (LOCAL_MODE) dg = p_max(dg, zero);                                               \
        if (CHAIN == 2) {                                                                   \
            uint tt = p_addmax(el, nege, dg);                                               \
            el = p_addmax(el, nege, gl);                                                    \
            hh = p_max(tt, gl);                                                             \
        } else {                                                                            \
            el = p_addmax(el, nege, gl);                                                    \
            hh = p_max(dg, el);                                                             \
        }                                                                                   \
        if (LOCAL_MODE) {                                                                   \
            if (PARTIAL) {                                                                  \
                uint keep = ((k) < kv_lo ? 0xffffu : 0u) | ((k) < kv_hi ? 0xffff0000u : 0u); \
                rmax = p_max(rmax, bitselect(0x80008000u, hh, keep));                       \
            } else                                                                          \
                rmax = p_max(rmax, hh);                                                     \
        }                                                                                   \
        uint g = p_add(hh, negoe);                                                          \
        if ((PARTIAL) && (k) == kown) {                                                     \
            own_g = g;                                                                      \
            own_e = el;                                                                     \
        }                                                                                   \
        gd = gup[(k) % CPT];                                                                \
        gup[(k) % CPT] = g;                                                                 \
        gl = g;                                                                             \
    }

#define PROW(PARTIAL)                                                                       \
    do {                                                                                    \
        uint gl = in_g, el = in_e, gd = diag_g;                                             \
        PCELL(0, PARTIAL) PCELL(1, PARTIAL) PCELL(2, PARTIAL) PCELL(3, PARTIAL)             \
        PCELL(4, PARTIAL) PCELL(5, PARTIAL) PCELL(6, PARTIAL) PCELL(7, PARTIAL)             \
        PCELL(8, PARTIAL) PCELL(9, PARTIAL) PCELL(10, PARTIAL) PCELL(11, PARTIAL)           \
        PCELL(12, PARTIAL) PCELL(13, PARTIAL) PCELL(14, PARTIAL) PCELL(15, PARTIAL)         \
        out_g = gl;                                                                         \
        out_e = el;                                                                         \
    } while (0)

/* the packed profile values of CPT columns from `p` (aligned: 16-byte vector loads; on
   NVIDIA by inline PTX, which the compiler can neither split into 4-byte loads nor merge
   with the unaligned branch) */
#if USE_SHFL
inline uint4 ld4(__global const uint *p) {
    uint x, y, z, w;
    asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "l"((ulong)p));
    return (uint4)(x, y, z, w);
}
#else
inline uint4 ld4(__global const uint *p) { return vload4(0, p); }
#endif
#if CPT % 4 == 0
#define LOAD_SC(dst, p)                                                                     \
    do {                                                                                    \
        if (aligned) {                                                                      \
            for (int k4 = 0; k4 < CPT / 4; k4++) {                                          \
                uint4 v = ld4((p) + 4 * k4);                                                \
                dst[4 * k4] = v.x;                                                          \
                dst[4 * k4 + 1] = v.y;                                                      \
                dst[4 * k4 + 2] = v.z;                                                      \
                dst[4 * k4 + 3] = v.w;                                                      \
            }                                                                               \
        } else {                                                                            \
            for (int k = 0; k < CPT; k++) dst[k] = (p)[k];                                  \
        }                                                                                   \
    } while (0)
#else
#define LOAD_SC(dst, p)                                                                     \
    do {                                                                                    \
        for (int k = 0; k < CPT; k++) dst[k] = (p)[k];                                      \
    } while (0)
#endif

__kernel void ad_tiles16(__global const ushort *pairs, /* [m + 2 TW + 8]: see below */
                         __global const uint *prof, /* [L * L][PSTRIDE]: packed s + o + e */
                         __global const int *top, __global const int *left,
                         __global int2 *hrow, __global int2 *vcol,
                         __global const int *row_slot, __global const int *col_slot,
                         __global int *rstore, __global int *cstore, __global int4 *best,
                         __constant const int *P,
                         __global int *flags, /* [2]: a tile did not fit 16 bits */
                         const int diagonal, const int ti0)
{
    const int t = get_local_id(0);
    TILE_POSITION();
    const int h = P[P_H], w = P[P_W], tr = P[P_TR];
    const int o = P[P_O], e = P[P_E], oe = o + e;
    const int r0 = ti * tr, c0 = tj * (2 * HALF);
    int th = min(tr, h - r0);
    const int wp1 = w + 1;
    const int col1 = c0 + t * CPT + 1; /* the low half's first DP column */
    const int col1h = col1 + HALF;     /* the high half's */
    const int rs = row_slot[ti], cs = col_slot[tj];
    __global const int2 *up = hrow + (size_t)((ti + 2) % 3) * wp1;

    /* the top row (absolute), and the boundary's smallest and largest H */
    int mn = INT_MAX, mx = INT_MIN;
    int hl[CPT], dl[CPT], hu[CPT], du[CPT];
#pragma unroll
    for (int k = 0; k < CPT; k++) {
        int hv = 0, dv = 0, hw = 0, dw = 0;
        int c = col1 + k;
        if (c <= w) {
            if (top_row) {
                hv = topb[c];
                dv = topb[wp1 + c];
            } else {
                int2 v = up[c];
                hv = v.x;
                dv = v.y;
            }
            mn = min(mn, hv);
            mx = max(mx, hv);
        }
        c += HALF;
        if (c <= w) {
            if (top_row) {
                hw = topb[c];
                dw = topb[wp1 + c];
            } else {
                int2 v = up[c];
                hw = v.x;
                dw = v.y;
            }
            mn = min(mn, hw);
            mx = max(mx, hw);
        }
        hl[k] = hv;
        dl[k] = dv;
        hu[k] = hw;
        du[k] = dw;
    }
    int corner = 0, corner_h = 0;
    if (col1 - 1 <= w) {
        if (t == 0 && tj == 0 && !(BANDS && top_row)) corner = left[r0];
        else if (top_row) corner = topb[col1 - 1];
        else corner = up[col1 - 1].x;
        mn = min(mn, corner);
        mx = max(mx, corner);
    }
    if (col1h - 1 <= w) corner_h = top_row ? topb[col1h - 1] : up[col1h - 1].x;
    for (int r = t; r < th; r += TW) {
        int v = tj == 0 ? left[r0 + 1 + r] : vcol[r0 + 1 + r].x;
        mn = min(mn, v);
        mx = max(mx, v);
    }
    __local int2 bounds[TW];
    bounds[t] = (int2)(mn, mx);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < TW; k++) {
        int2 v = bounds[k];
        mn = min(mn, v.x);
        mx = max(mx, v.y);
    }
    const int base = mn;
    {
        const long above = (long)mx - mn + (long)P[P_SMAX] * th + 2L * oe;
        /* SPREAD: the host's bound on |s| + o + e (gd + s' below the lowest H) */
        const long below = (long)o + (long)e * th + 3L * oe + e + SPREAD;
        if (above > LIM || below > LIM) {
            if (t == 0) atomic_or(flags + 2, 1);
            th = 0; /* nothing computed: the host fills the region again, wider */
        }
    }

    /* registers: G (= H - o - e) and D of the top row, relative; the high halves are put
       back when virtual t + TW starts (`hi_top`) */
    uint gup[CPT], dup[CPT], hi_top[CPT];
#pragma unroll
    for (int k = 0; k < CPT; k++) {
        gup[k] = pk(rel(hl[k], base) - oe, 0);
        dup[k] = pk(rel(dl[k], base), 0);
        hi_top[k] = pk(rel(hu[k], base) - oe, rel(du[k], base));
    }
    uint diag_g = pk(rel(corner, base) - oe, 0);
    const int diag_hi = rel(corner_h, base) - oe;
#if LDS_EDGES
    /* the left column's G and I (relative) per row, read by work-item 0 as its rows come;
       row r's entry then takes the right column's packed (G, I) words (its owner writes
       row r at step r + its virtual index, after work-item 0 read it at step r) */
    __local uint2 edge[MAXTR];
    __local uint2 bottom[2 * HALF]; /* the bottom row's packed (G, D), written after the loop */
    for (int r = t; r < th; r += TW) {
        const int2 v = tj == 0 ? (int2)(left[r0 + 1 + r], left[h + 1 + r0 + 1 + r]) : vcol[r0 + 1 + r];
        edge[r] = (uint2)((uint)(rel(v.x, base) - oe) & 0xffffu, (uint)rel(v.y, base) & 0xffffu);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    const uint nege = pk(-e, -e), negoe = pk(-oe, -oe);
    /* local mode: H >= 0, taken into the diagonal term (max(0, diag, D, I) is max(max(0,
       diag, D), I)): off the chain of I from one cell to the next. A zero below FLOOR16
       (base > 32000) is never reached: the range check puts every H of such a tile above 0 */
    const int zr = rel(0, base);
    const uint zero = pk(zr, zr);
    /* partial tiles: the owner of column w, and (local mode) each half's valid columns */
    const int partial = c0 + 2 * HALF > w;
    const int vown = (w - 1 - c0) / CPT, kown = (w - 1 - c0) % CPT;
    const int owner_lane = vown % TW, owner_half = vown / TW;
    const int kv_lo = clamp(w - (col1 - 1), 0, CPT), kv_hi = clamp(w - (col1h - 1), 0, CPT);

#if LOCAL_MODE && TRACK_STORE
    __local uint cand[2][TW][CPT]; /* each half's best row's G (TRACK_STORE) */
#endif
    /* local mode: each half's first maximum (relative value; the DP row and column) */
    int bv_lo = -base, bi_lo = 0, bj_lo = 0, bv_hi = -base, bi_hi = 0, bj_hi = 0;
    uint out_g = 0, out_e = 0, own_g = 0, own_e = 0;

    /* the profile: the row of the residue pair (a[row_lo], a[row_hi]), columns from pcol */
    const size_t pstride = P[P_PSTRIDE];
    const int pcol = P[P_COL0] + col1 - 1;
    const int aligned = ALIGNED; /* the host's promise: P_COL0 and P_PSTRIDE % 4 == 0 */
    /* pairs[R + TW] = x * L + y, x and y the dense codes of a[R] and a[R - TW] (0 outside
       a): the profile row of DP row R + 1 in the low half and R + 1 - TW in the high half
       (halves whose row lies outside the tile compute garbage that nothing reads) */
    __global const ushort *arow = pairs + P[P_ROW0] + arow0 + TW;
    __global const uint *pbase = prof + pcol;
#define PAIR(r) ((int)arow[(r)])
    uint scb[2][CPT]; /* this row's profile values and the next row's */
    {
        /* both: a work-item starts at step t, whose parity picks the buffer (UNROLL2) */
        __global const uint *p = pbase + (size_t)PAIR(0) * pstride;
        LOAD_SC(scb[0], p);
#pragma unroll
        for (int k = 0; k < CPT; k++) scb[1][k] = scb[0][k];
    }
    int pair_next = PAIR(1); /* the profile row of the row after the current one */
    int2 left_cur = (int2)(0, 0), left_next = (int2)(0, 0);
    if (!LDS_EDGES && t == 0 && th > 0) {
        left_cur = tj == 0 ? (int2)(left[r0 + 1], left[h + 1 + r0 + 1]) : vcol[r0 + 1];
        if (th > 1) left_next = tj == 0 ? (int2)(left[r0 + 2], left[h + 1 + r0 + 2]) : vcol[r0 + 2];
    }
#if USE_SHFL
    const int src = (t + TW - 1) % TW;
#else
    __local uint2 xch[2][TW];
#endif
    const int steps = th + 2 * TW - 1;
    /* UNROLL2: two steps per iteration, the profile buffers taking turns (no copies); a
       step past the last (odd counts) finds every row outside the tile and does nothing */
    /* phase 0: the steps before every high half has started (each puts its top row back
       when it starts); phase 1: the rest, the same loop without that code */
#pragma unroll
    for (int phase = 0; phase < 2; phase++) {
    const int s_lo = phase ? 2 * TW : 0, s_hi = phase ? steps : min(steps, 2 * TW);
    for (int s0 = s_lo; s0 < s_hi; s0 += 1 + UNROLL2) {
#pragma unroll
      for (int cur = 0; cur <= UNROLL2; cur++) {
        const int s = s0 + cur, nxt = 1 - cur;
        const int rlo = s - t, rhi = rlo - TW; /* the rows of the two halves */
#if USE_SHFL
        const uint xg = shfl_idx(out_g, src), xe = shfl_idx(out_e, src);
#else
        uint xg = 0, xe = 0;
        if (s > 0) {
            uint2 v = xch[(s - 1) & 1][(t + TW - 1) % TW];
            xg = v.x;
            xe = v.y;
        }
#endif
        if (rlo >= 0 && rhi < th) {
            /* the next row's profile values, the profile row and left input two rows on */
            int2 left_n2 = (int2)(0, 0);
            {
                __global const uint *p = pbase + (size_t)pair_next * pstride;
                LOAD_SC(scb[nxt], p);
            }
            const int pair_n2 = PAIR(rlo + 2);
            if (!LDS_EDGES && t == 0 && rlo + 2 < th)
                left_n2 = tj == 0 ? (int2)(left[r0 + rlo + 3], left[h + 1 + r0 + rlo + 3])
                                  : vcol[r0 + rlo + 3];
            if (phase == 0 && rhi == 0) { /* virtual t + TW starts: top row, corner */
#pragma unroll
                for (int k = 0; k < CPT; k++) {
                    gup[k] = (gup[k] & 0xffffu) | (hi_top[k] << 16);
                    dup[k] = (dup[k] & 0xffffu) | (hi_top[k] & 0xffff0000u);
                }
                diag_g = (diag_g & 0xffffu) | ((uint)diag_hi << 16);
            }
            uint in_g, in_e;
#if LDS_EDGES
            {
                const uint2 lv = edge[t == 0 ? min(rlo, th - 1) : 0];
                in_g = t == 0 ? lv.x | (xg << 16) : xg;
                in_e = t == 0 ? lv.y | (xe << 16) : xe;
            }
#else
            if (t == 0) {
                in_g = ((uint)(rel(left_cur.x, base) - oe) & 0xffffu) | (xg << 16);
                in_e = ((uint)rel(left_cur.y, base) & 0xffffu) | (xe << 16);
            } else {
                in_g = xg;
                in_e = xe;
            }
#endif
            uint rmax = 0x80008000u;
            if (partial) PROW(1);
            else PROW(0);
            diag_g = in_g;
#if LOCAL_MODE && TRACK_STORE
            /* this row's maximum of each half; a new best keeps the row's G in local memory
               (no branch), its first column is found after the loop */
            {
                const int vl = lo16(rmax), vh = hi16(rmax);
                const int ul = rlo < th && vl > bv_lo, uh = rhi >= 0 && vh > bv_hi;
                bv_lo = ul ? vl : bv_lo;
                bi_lo = ul ? r0 + 1 + rlo : bi_lo;
                bv_hi = uh ? vh : bv_hi;
                bi_hi = uh ? r0 + 1 + rhi : bi_hi;
                if (ul) {
#pragma unroll
                    for (int k = 0; k < CPT; k++) cand[0][t][k] = gup[k];
                }
                if (uh) {
#pragma unroll
                    for (int k = 0; k < CPT; k++) cand[1][t][k] = gup[k];
                }
            }
#elif LOCAL_MODE
            /* this row's maximum of each half, and its first column (H = G + o + e there) */
            if (rlo < th && lo16(rmax) > bv_lo) {
                bv_lo = lo16(rmax);
                bi_lo = r0 + 1 + rlo;
                int j = CPT - 1;
#pragma unroll
                for (int k = CPT - 1; k >= 0; k--)
                    if (lo16(gup[k]) + oe == bv_lo) j = k;
                bj_lo = col1 + j;
            }
            if (rhi >= 0 && hi16(rmax) > bv_hi) {
                bv_hi = hi16(rmax);
                bi_hi = r0 + 1 + rhi;
                int j = CPT - 1;
#pragma unroll
                for (int k = CPT - 1; k >= 0; k--)
                    if (hi16(gup[k]) + oe == bv_hi) j = k;
                bj_hi = col1h + j;
            }
#endif
            /* the right column (H, I): its owner, in the half that holds column w */
            {
                const int lane = partial ? owner_lane : TW - 1;
                const int hf = partial ? owner_half : 1;
                const int r = hf ? rhi : rlo;
#if LDS_EDGES
                if (t == lane && r >= 0 && r < th)
                    edge[r] = partial ? (uint2)(own_g, own_e) : (uint2)(out_g, out_e);
#else
                if (t == lane && r >= 0 && r < th) {
                    const uint vg = partial ? own_g : out_g, ve = partial ? own_e : out_e;
                    const int hv = (hf ? hi16(vg) : lo16(vg)) + oe + base;
                    const int iv = (hf ? hi16(ve) : lo16(ve)) + base;
                    const int row = r0 + 1 + r;
                    vcol[row] = (int2)(hv, iv);
                    if (cs >= 0) {
                        cstore[((size_t)cs * 2) * (h + 1) + row] = hv;
                        cstore[((size_t)cs * 2 + 1) * (h + 1) + row] = iv;
                    }
                }
#endif
            }
            /* the tile's bottom row, each half at its last row */
#if LDS_EDGES
            if (rlo == th - 1 || rhi == th - 1) {
                __local uint2 *bp = bottom + (rhi == th - 1 ? HALF : 0) + t * CPT;
#pragma unroll
                for (int k = 0; k < CPT; k++) bp[k] = (uint2)(gup[k], dup[k]);
            }
#else
            if (rlo == th - 1 || rhi == th - 1) {
                __global int2 *down = hrow + (size_t)(ti % 3) * wp1;
                const int hf = rhi == th - 1;
                const int cfirst = hf ? col1h : col1;
#pragma unroll
                for (int k = 0; k < CPT; k++) {
                    const int c = cfirst + k;
                    if (c <= w) {
                        const int hv = (hf ? hi16(gup[k]) : lo16(gup[k])) + oe + base;
                        const int dv = (hf ? hi16(dup[k]) : lo16(dup[k])) + base;
                        down[c] = (int2)(hv, dv);
                        if (rs >= 0) {
                            rstore[((size_t)rs * 2) * wp1 + c] = hv;
                            rstore[((size_t)rs * 2 + 1) * wp1 + c] = dv;
                        }
                    }
                }
            }
#endif
            if (!UNROLL2) {
#pragma unroll
                for (int k = 0; k < CPT; k++) scb[0][k] = scb[1][k];
            }
            pair_next = pair_n2;
            left_cur = left_next;
            left_next = left_n2;
        }
#if !USE_SHFL
        xch[s & 1][t] = (uint2)(out_g, out_e);
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
      }
    }
    }

#if LDS_EDGES
    /* the right column (H, I), from the half that holds column w, and the bottom row */
    barrier(CLK_LOCAL_MEM_FENCE);
    if (th > 0) {
        __global int2 *down = hrow + (size_t)(ti % 3) * wp1;
        for (int c = t; c < 2 * HALF && c0 + 1 + c <= w; c += TW) {
            const uint2 v = bottom[c];
            const int hf = c >= HALF, col = c0 + 1 + c;
            const int hv = (hf ? hi16(v.x) : lo16(v.x)) + oe + base;
            const int dv = (hf ? hi16(v.y) : lo16(v.y)) + base;
            down[col] = (int2)(hv, dv);
            if (rs >= 0) {
                rstore[((size_t)rs * 2) * wp1 + col] = hv;
                rstore[((size_t)rs * 2 + 1) * wp1 + col] = dv;
            }
        }
    }
    {
        const int hf = partial ? owner_half : 1;
        for (int r = t; r < th; r += TW) {
            const uint2 v = edge[r];
            const int hv = (hf ? hi16(v.x) : lo16(v.x)) + oe + base;
            const int iv = (hf ? hi16(v.y) : lo16(v.y)) + base;
            const int row = r0 + 1 + r;
            vcol[row] = (int2)(hv, iv);
            if (cs >= 0) {
                cstore[((size_t)cs * 2) * (h + 1) + row] = hv;
                cstore[((size_t)cs * 2 + 1) * (h + 1) + row] = iv;
            }
        }
    }
#endif
#if LOCAL_MODE
#if TRACK_STORE
    { /* each half's best row's first column with that H (its own entries: no barrier) */
        int jl = CPT - 1, jh = CPT - 1;
        for (int k = CPT - 1; k >= 0; k--) {
            if (lo16(cand[0][t][k]) + oe == bv_lo) jl = k;
            if (hi16(cand[1][t][k]) + oe == bv_hi) jh = k;
        }
        if (bi_lo) bj_lo = col1 + jl;
        if (bi_hi) bj_hi = col1h + jh;
    }
#endif
    /* as ad_tiles: the tile's first maximum in row-major order, folded into its tile row's */
    __local int4 red[2 * TW];
    red[t] = (int4)(bv_lo + base, bi_lo, bj_lo, 0);
    red[TW + t] = (int4)(bv_hi + base, bi_hi, bj_hi, 0);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t == 0) {
        int4 b = best[ti];
        for (int k = 0; k < 2 * TW; k++) {
            int4 c = red[k];
            if (c.x > b.x || (c.x == b.x && (c.y < b.y || (c.y == b.y && c.z < b.z)))) b = c;
        }
        best[ti] = b;
    }
#endif
}
