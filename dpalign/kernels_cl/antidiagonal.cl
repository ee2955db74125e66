/* One long pair in blocked tiles (spec PAIRWISE.md, shape 2; seed 002): a region of the DP
 * matrix of `a` (rows) against `b` (columns) is cut into tiles of TR x TC cells, and every
 * launch computes the tiles of one tile anti-diagonal, one work-group per tile.
 *
 * Inside a tile, work-item t of TW owns CPT consecutive columns (TC = TW * CPT) and keeps
 * their state (H and the vertical gap D of the row above) in registers. The work-items run a
 * skewed wavefront: at step s, work-item t computes row s - t of its columns, so the cells of
 * one anti-diagonal band are computed in parallel; the horizontal state (H, I) of a row's
 * last column passes to the next work-item once per step: by a warp shuffle (inline PTX
 * shfl.sync, NVIDIA, TW = 32: no barrier at all) or through local memory and a barrier
 * (portable). A tile takes TR + TW - 1 steps.
 *
 * Recurrence (dpalign/reference.py), in the "G frame" (H stored as G = H - o - e, so that a
 * gap open needs no add of its own; the profile holds s + o + e):
 *     I  = max(I_left - e, G_left)     D = max(D_up - e, G_up)
 *     H  = max(max(G_diag + s', I), D) local: H >= 0, i.e. G = max(H - o - e, -o - e)
 *
 * Boundaries (all absolute int32, the host's store type):
 *   - the region's top row (H, D) and left column (H, I) come from the host (`top`, `left`);
 *   - a tile's bottom row goes to `hrow`, a ring of three rows indexed by tile row (the
 *     tile below reads it one launch later; the tile below-left reads its corner in the same
 *     launch as the next row of that slot is written, so two slots would race);
 *   - a tile's right column goes to `vcol`, one column for the whole region: the next tile of
 *     the row reads each entry before its own last work-item overwrites it;
 *   - checkpoint rows / columns (`row_slot[ti] >= 0`, `col_slot[tj] >= 0`) are copied to
 *     `rstore` / `cstore` in dpalign.longpair's layout; local mode keeps each tile row's
 *     first maximum in row-major order (H, i, j) in `best[ti]` (the host zeroes it).
 *
 * Compile-time constants (-D): TW (work-items per tile), CPT (columns per work-item),
 * LOCAL_MODE, USE_SHFL (1: PTX shuffles; needs TW == 32 and NVIDIA), PREFETCH (1: global
 * loads a step or two ahead of their use), PRUNE (local mode: block pruning, see below),
 * ALIGNED (the host's promise that the profile can be read in 16-byte loads), VECLOAD
 * (0: never), LDS_EDGES (the tile's left column read into local memory before its rows, its
 * right column kept there and written after them; tiles of at most MAXTR rows).
 */

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
#ifndef PREFETCH
#define PREFETCH 1
#endif
#ifndef PRUNE
#define PRUNE 0 /* local mode: block pruning (the forward pass of a whole matrix) */
#endif
#ifndef ALIGNED
#define ALIGNED 0 /* 1: the region's first column and the profile's stride are multiples of 4 */
#endif
#ifndef LDS_EDGES
#define LDS_EDGES 0 /* 1: left and right columns through local memory (at most MAXTR rows) */
#endif
#ifndef MAXTR
#define MAXTR 512
#endif
#ifndef VECLOAD
#define VECLOAD 1 /* profile values by 16-byte loads where the region's columns allow */
#endif
#define TC (TW * CPT)

/* CPT profile values from `p`: 4 at a time when `aligned` (the region's first column and
   the profile's stride are multiples of 4; a work-item's columns start at a multiple of
   CPT), else one by one */
#if USE_SHFL /* NVIDIA: inline PTX, which the compiler cannot split into 4-byte loads */
inline int4 ld4(__global const int *p) {
    int x, y, z, w;
    asm("ld.global.nc.v4.s32 {%0, %1, %2, %3}, [%4];"
        : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "l"((ulong)p));
    return (int4)(x, y, z, w);
}
#else
inline int4 ld4(__global const int *p) { return vload4(0, p); }
#endif
#if VECLOAD && CPT % 4 == 0
#define LOAD_PROFILE(dst, p)                                                                \
    do {                                                                                    \
        __global const int *q_ = (p);                                                       \
        if (aligned) {                                                                      \
            for (int k4 = 0; k4 < CPT / 4; k4++) {                                          \
                int4 v = ld4(q_ + 4 * k4);                                                  \
                dst[4 * k4] = v.x;                                                          \
                dst[4 * k4 + 1] = v.y;                                                      \
                dst[4 * k4 + 2] = v.z;                                                      \
                dst[4 * k4 + 3] = v.w;                                                      \
            }                                                                               \
        } else {                                                                            \
            for (int k = 0; k < CPT; k++) dst[k] = q_[k];                                   \
        }                                                                                   \
    } while (0)
#else
#define LOAD_PROFILE(dst, p)                                                                \
    do {                                                                                    \
        __global const int *q_ = (p);                                                       \
        for (int k = 0; k < CPT; k++) dst[k] = q_[k];                                       \
    } while (0)
#endif

#if USE_SHFL
inline int shfl_up1(int v) {
    int r;
    asm volatile("shfl.sync.up.b32 %0, %1, 1, 0, 0xffffffff;" : "=r"(r) : "r"(v));
    return r;
}
#endif

/* One cell of a work-item's row, column k (a constant: the row is unrolled by hand, so the
   register arrays gup/dup are only ever indexed by constants). */
#define CELL(k, PARTIAL)                                                                    \
    if ((k) < CPT) {                                                                        \
        el = max(el - e, gl);                                                               \
        dup[(k) % CPT] = max(dup[(k) % CPT] - e, gup[(k) % CPT]);                           \
        int h = max(max(gd + sc[(k) % CPT], el), dup[(k) % CPT]);                           \
        if (LOCAL_MODE && (!(PARTIAL) || (k) < kvalid) && h > bv) {                         \
            bv = h;                                                                         \
            bi = row;                                                                       \
            bj = col1 + (k);                                                                \
        }                                                                                   \
        int g = LOCAL_MODE ? max(h - oe, -oe) : h - oe;                                     \
        if ((PARTIAL) && (k) == kown) {                                                     \
            own_g = g;                                                                      \
            own_e = el;                                                                     \
        }                                                                                   \
        gd = gup[(k) % CPT];                                                                \
        gup[(k) % CPT] = g;                                                                 \
        gl = g;                                                                             \
    }

/* One row of a work-item's CPT (at most 16) columns. PARTIAL: the tile's last columns lie
   beyond the region (mask the local maximum, take the right column from its owner). */
#define ROW_BODY(PARTIAL)                                                                   \
    do {                                                                                    \
        int gl = in_g, el = in_e, gd = diag_g;                                              \
        CELL(0, PARTIAL) CELL(1, PARTIAL) CELL(2, PARTIAL) CELL(3, PARTIAL)                 \
        CELL(4, PARTIAL) CELL(5, PARTIAL) CELL(6, PARTIAL) CELL(7, PARTIAL)                 \
        CELL(8, PARTIAL) CELL(9, PARTIAL) CELL(10, PARTIAL) CELL(11, PARTIAL)               \
        CELL(12, PARTIAL) CELL(13, PARTIAL) CELL(14, PARTIAL) CELL(15, PARTIAL)             \
        out_g = gl;                                                                         \
        out_e = el;                                                                         \
    } while (0)

#if CPT > 16
#error "at most 16 columns per work-item"
#endif

/* H and I entering DP row `row` of a tile from the left: the region's left column (first
   tile column) or the previous tile's right column. */
inline int2 left_input(__global const int *left, __global const int2 *vcol, int tj, int h,
                       int row) {
    if (tj == 0) return (int2)(left[row], left[h + 1 + row]);
    return vcol[row];
}

__kernel void ad_tiles(__global const uchar *a,    /* the whole first sequence */
                       __global const int *prof,   /* [letters][PSTRIDE]: s + o + e */
                       __global const int *top,    /* [2][W + 1]: H, D of the region's row 0 */
                       __global const int *left,   /* [2][H + 1]: H, I of its column 0 */
                       __global int2 *hrow,        /* [3][W + 1]: (H, D) bottom rows */
                       __global int2 *vcol,        /* [H + 1]: (H, I) right column */
                       __global const int *row_slot, __global const int *col_slot,
                       __global int *rstore,       /* [R][2][W + 1] */
                       __global int *cstore,       /* [C][2][H + 1] */
                       __global int4 *best,        /* per tile row (local mode) */
                       __constant const int *P,
                       __global int *prune,        /* [best H so far, pruned tiles] */
                       const int diagonal,         /* this launch's tile anti-diagonal */
                       const int ti0)              /* its first tile row */
{
    const int t = get_local_id(0);
    TILE_POSITION();
    const int h = P[P_H], w = P[P_W], tr = P[P_TR];
    const int o = P[P_O], e = P[P_E], oe = o + e;
    const int r0 = ti * tr, c0 = tj * TC;
    int th = min(tr, h - r0); /* rows; 0 for a pruned tile */
    const int wp1 = w + 1;
    const int col1 = c0 + t * CPT + 1; /* DP column of this work-item's first column */
    const int kvalid = clamp(w - (col1 - 1), 0, CPT);
    const int partial = c0 + TC > w;
    const int kown = (w - 1 - c0) % CPT, town = (w - 1 - c0) / CPT; /* owner of column w */
    const int rs = row_slot[ti], cs = col_slot[tj];

    /* The top row: H (as G) and D of this work-item's columns, and its first diagonal. */
    __global const int2 *up = hrow + (size_t)((ti + 2) % 3) * wp1;
    int gup[CPT], dup[CPT];
#pragma unroll
    for (int k = 0; k < CPT; k++) {
        int c = col1 + k;
        int hv = 0, dv = 0;
        if (c <= w) {
            if (top_row) {
                hv = topb[c];
                dv = topb[wp1 + c];
            } else {
                int2 v = up[c];
                hv = v.x;
                dv = v.y;
            }
        }
        gup[k] = hv - oe;
        dup[k] = dv;
    }
    int corner;
    if (col1 - 1 > w) corner = 0;
    else if (t == 0 && tj == 0 && !(BANDS && top_row)) corner = left[r0];
    else if (top_row) corner = topb[col1 - 1];
    else corner = up[col1 - 1].x;
    int diag_g = corner - oe;

#if LOCAL_MODE && PRUNE
    /* Block pruning (CUDAlign's): a path through this tile enters it with at most the
       largest H of its top row, corner and left column (H >= D, I in every cell), or starts
       inside it at 0, and gains at most SMAX per row and column it still has ahead. If that
       cannot reach the best H found so far, no cell of the tile or beyond it through the tile
       can be the (first) maximum, nor lie on an optimal path to it: the tile is skipped and
       its outputs are H = 0, D = I = -(o + e), never above the true values (H >= 0), so
       every value downstream is at most the true one and exact on every optimal path.
       A pruned tile then runs with no rows (no early return: every work-item of the group
       goes through the same barriers). */
    __local int prune_vote[TW];
    {
        int mx = 0;
        if (col1 - 1 <= w) mx = max(mx, corner);
#pragma unroll
        for (int k = 0; k < CPT; k++)
            if (col1 + k <= w) mx = max(mx, gup[k] + oe);
        for (int r = t; r < th; r += TW)
            mx = max(mx, tj == 0 ? left[r0 + 1 + r] : vcol[r0 + 1 + r].x);
        prune_vote[t] = mx;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t == 0) {
            for (int k = 1; k < TW; k++) mx = max(mx, prune_vote[k]);
            const long bound = (long)mx + (long)P[P_SMAX] * min(h - r0, w - c0);
            prune_vote[0] = bound < (long)prune[0]; /* read once: every work-item agrees */
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (prune_vote[0]) {
            for (int r = t; r < th; r += TW) {
                vcol[r0 + 1 + r] = (int2)(0, -oe);
                if (cs >= 0) {
                    cstore[((size_t)cs * 2) * (h + 1) + r0 + 1 + r] = 0;
                    cstore[((size_t)cs * 2 + 1) * (h + 1) + r0 + 1 + r] = -oe;
                }
            }
            __global int2 *down = hrow + (size_t)(ti % 3) * wp1;
#pragma unroll
            for (int k = 0; k < CPT; k++) {
                int c = col1 + k;
                if (c <= w) {
                    down[c] = (int2)(0, -oe);
                    if (rs >= 0) {
                        rstore[((size_t)rs * 2) * wp1 + c] = 0;
                        rstore[((size_t)rs * 2 + 1) * wp1 + c] = -oe;
                    }
                }
            }
            if (t == 0) atomic_inc(prune + 1);
            th = 0;
        }
    }
#endif
    int bv = 0, bi = 0, bj = 0; /* local mode: this work-item's first maximum */
#if LDS_EDGES
    /* the left column (H, I), read by work-item 0 as its rows come; row r's entry then
       takes the right column's (its owner writes row r at step r + its index, after
       work-item 0 read it at step r), written out after the loop */
    __local int2 edge[MAXTR];
    for (int r = t; r < th; r += TW) edge[r] = left_input(left, vcol, tj, h, r0 + 1 + r);
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
#if !USE_SHFL
    __local int2 xch[2][TW];
#endif
    int in_g = 0, in_e = 0, out_g = 0, out_e = 0, own_g = 0, own_e = 0;
    /* the next row's residue and its profile column, fetched a step ahead */
    const int pcol = P[P_COL0] + col1 - 1;
    const size_t pstride = P[P_PSTRIDE];
    const int aligned = ALIGNED; /* the host's promise: P_COL0 and P_PSTRIDE % 4 == 0 */
    __global const uchar *arow = a + P[P_ROW0] + arow0; /* the tile's residues of `a` */
    /* The row computed at a step: its profile values `sc` and (work-item 0) its left input
       were fetched the step before (PREFETCH), the residue of the row after it two steps
       before, so a step waits on no global load. */
    int sc[CPT], nsc[CPT];
    int code1 = th > 1 ? arow[1] : 0; /* the residue of the row after the current one */
    {
        const int code0 = arow[0];
#pragma unroll
        LOAD_PROFILE(sc, prof + code0 * pstride + pcol);
    }
#if PREFETCH
    int2 left_cur = (int2)(0, 0), left_next = (int2)(0, 0);
    if (!LDS_EDGES && t == 0) {
        left_cur = left_input(left, vcol, tj, h, r0 + 1);
        if (th > 1) left_next = left_input(left, vcol, tj, h, r0 + 2);
    }
#endif
    const int steps = th + TW - 1;
    for (int s = 0; s < steps; s++) {
        const int r = s - t;
        const int row = r0 + 1 + r; /* DP row */
        const int active = r >= 0 && r < th;
        /* this row's left input: from the previous work-item, or the tile's left column */
#if USE_SHFL
        int recv_g = shfl_up1(out_g), recv_e = shfl_up1(out_e);
#else
        int recv_g = 0, recv_e = 0;
        if (t > 0 && s > 0) {
            int2 v = xch[(s - 1) & 1][t - 1];
            recv_g = v.x;
            recv_e = v.y;
        }
#endif
        if (active) {
#if PREFETCH
            /* the next row's profile values and residue, the left input two rows on */
            int code2 = 0;
            int2 left_n2 = (int2)(0, 0);
            if (r + 1 < th) {
#pragma unroll
                LOAD_PROFILE(nsc, prof + code1 * pstride + pcol);
                if (r + 2 < th) {
                    code2 = arow[r + 2];
                    if (!LDS_EDGES && t == 0) left_n2 = left_input(left, vcol, tj, h, row + 2);
                }
            }
#endif
            if (t == 0) {
#if LDS_EDGES
                const int2 v = edge[r];
#elif PREFETCH
                const int2 v = left_cur;
#else
                const int2 v = left_input(left, vcol, tj, h, row);
#endif
                in_g = v.x - oe;
                in_e = v.y;
            } else {
                in_g = recv_g;
                in_e = recv_e;
            }
            if (partial) ROW_BODY(1);
            else ROW_BODY(0);
            diag_g = in_g;
            /* the right column (H, I): the last work-item, or the owner of column w */
            const int owner = partial ? t == town : t == TW - 1;
#if LDS_EDGES
            if (owner) edge[r] = (int2)((partial ? own_g : out_g) + oe, partial ? own_e : out_e);
#else
            if (owner) {
                int hv = (partial ? own_g : out_g) + oe, iv = partial ? own_e : out_e;
                vcol[row] = (int2)(hv, iv);
                if (cs >= 0) {
                    cstore[((size_t)cs * 2) * (h + 1) + row] = hv;
                    cstore[((size_t)cs * 2 + 1) * (h + 1) + row] = iv;
                }
            }
#endif
            if (r == th - 1) { /* the tile's bottom row */
                __global int2 *down = hrow + (size_t)(ti % 3) * wp1;
#pragma unroll
                for (int k = 0; k < CPT; k++) {
                    int c = col1 + k;
                    if (c <= w) {
                        int hv = gup[k] + oe;
                        down[c] = (int2)(hv, dup[k]);
                        if (rs >= 0) {
                            rstore[((size_t)rs * 2) * wp1 + c] = hv;
                            rstore[((size_t)rs * 2 + 1) * wp1 + c] = dup[k];
                        }
                    }
                }
            }
#if PREFETCH
#pragma unroll
            for (int k = 0; k < CPT; k++) sc[k] = nsc[k];
            code1 = code2;
            left_cur = left_next;
            left_next = left_n2;
#else
            if (r + 1 < th) {
#pragma unroll
                LOAD_PROFILE(sc, prof + code1 * pstride + pcol);
                code1 = r + 2 < th ? arow[r + 2] : 0;
            }
#endif
        }
#if !USE_SHFL
        xch[s & 1][t] = (int2)(out_g, out_e);
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
    }

#if LDS_EDGES
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = t; r < th; r += TW) {
        const int2 v = edge[r];
        const int row = r0 + 1 + r;
        vcol[row] = v;
        if (cs >= 0) {
            cstore[((size_t)cs * 2) * (h + 1) + row] = v.x;
            cstore[((size_t)cs * 2 + 1) * (h + 1) + row] = v.y;
        }
    }
#endif
#if LOCAL_MODE
    /* The tile's first maximum in row-major order, folded into its tile row's: the tiles of
       one tile row run in successive launches (one per diagonal), so best[ti] has a single
       writer per launch and no atomics are needed; the host folds the n_tr rows. */
    __local int4 red[TW];
    red[t] = (int4)(bv, bi, bj, 0);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t == 0) {
        int4 b = best[ti];
        for (int k = 0; k < TW; k++) {
            int4 c = red[k];
            if (c.x > b.x || (c.x == b.x && (c.y < b.y || (c.y == b.y && c.z < b.z)))) b = c;
        }
        best[ti] = b;
#if PRUNE
        atomic_max(prune, b.x);
#endif
    }
#endif
}
