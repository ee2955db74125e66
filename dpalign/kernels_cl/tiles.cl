/* What the tile kernels share (antidiagonal.cl and antidiagonal16.cl include this file;
 * programs.source expands it): the layout of their parameters `P` and the tile a work-group
 * computes. */

#define P_H 0        /* region rows */
#define P_W 1        /* region columns */
#define P_TR 2       /* tile rows */
#define P_NTC 3      /* tile columns */
#define P_O 4
#define P_E 5
#define P_ROW0 6     /* the region's first row in `a` */
#define P_COL0 7     /* the region's first column in `b` (profile column) */
#define P_PSTRIDE 8  /* profile row stride */
#define P_SMAX 9     /* the largest substitution score (pruning's bound) */
/* P[10]: the packed profile's letters (the host's; no kernel reads it) */
/* BANDS (dpalign.kernels_cl.skewed: one region on several devices): the device holds bands
   of P_BH tile rows, its band b being band b * P_BK + P_BK0 of the region, stacked (its tile
   rows ti = b * P_BH + r, DP rows, left column, checkpoints and vcol in that stacked order);
   a launch at step `diagonal` holds tile (r, tj) of band b when
   tj = diagonal - r - b * P_BSK - P_BOFF, and `ti0` is its first stacked tile row. A band's
   first tile row reads its top row from `top` row pair b (another device's band above). */
#define P_BH 11
#define P_BSK 12
#define P_BOFF 13
#define P_BK 14
#define P_BK0 15
#define P_NTR 16 /* stacked tile rows */
#ifndef BANDS
#define BANDS 0
#endif

/* TILE_POSITION(): in a tile kernel (arguments `top`, `P`, `diagonal`, `ti0`), declares the
   work-group's tile: ti and tj (its tile row and column), top_row (1: its top row comes from
   `top`, not from `hrow`), topb (that row pair of `top`) and arow0 (the tile's first row in
   `a`, after the region's P_ROW0). BANDS: a group with no tile at this step returns, the
   whole group at once. A macro, so that both kernels compile the very same statements. */
#if BANDS
#define TILE_POSITION()                                                                     \
    const int ti = ti0 + get_group_id(0), band = ti / P[P_BH], br = ti - band * P[P_BH];    \
    const int tj = diagonal - br - band * P[P_BSK] - P[P_BOFF];                             \
    if (tj < 0 || tj >= P[P_NTC] || ti >= P[P_NTR]) return;                                 \
    const int top_row = br == 0;                                                            \
    __global const int *topb = top + (size_t)band * 2 * (P[P_W] + 1);                       \
    const int arow0 = ((band * P[P_BK] + P[P_BK0]) * P[P_BH] + br) * P[P_TR]
#else
#define TILE_POSITION()                                                                     \
    const int ti = ti0 + get_group_id(0), tj = diagonal - ti;                               \
    const int top_row = ti == 0;                                                            \
    __global const int *topb = top;                                                         \
    const int arow0 = ti * P[P_TR]
#endif
