/* PaPaRa scoring kernels: every read against every edge profile (spec PAPARA.md sections 5, 8).
 *
 * SIMT inter-task design of the seed paper: one work-item per (read, profile) pair (or per
 * (read, two profiles) with PACKED=1), one work-group per read against a group of profiles in
 * the inter-reference layout (element i of all lanes contiguous, so a warp's loads coalesce).
 *
 * Two designs share one cell update:
 *   papara_strip    the reference in strips of S columns; the strip's DP row (H, F) and the
 *                   per-column constants live in registers (the strip loop is unrolled); the
 *                   boundary column between strips (H, E per read row) lives in global memory.
 *   papara_blocked  the seed paper's blocks: a square block at each end (width SQ, DP row in
 *                   global memory, run-time loop, uncompressed reference), rectangular blocks of
 *                   BW columns in the middle with the DP row in local memory, the BW-column loop
 *                   unrolled, the middle of the reference 5-bit compressed (DNA).
 *
 * Both compute the recurrence of dpalign/reference.py in maximisation form. bmc2012 (a
 * minimisation) runs negated: H = -S, with the host passing the matching constants (see
 * kernels_cl/papara.py). Each work-item writes, per lane, the maximum of the last row and the
 * maximum of the last column; the host combines them.
 *
 * Compile-time constants (-D):
 *   PACKED     0: one lane per work-item, int32 cells (portable, any width).
 *              1: two lanes per work-item, two signed 16-bit cells in one 32-bit register.
 *   USE_PTX    1: packed arithmetic through inline PTX add/max/min.s16x2 (NVIDIA sm_90+,
 *              which ptxas fuses into the DPX instructions VIADDMNMX / VIMNMX3).
 *   PROTEIN    0: DNA (4-bit states), 1: protein (20-bit states).
 *   MATCH_NEG  1 when the match score is negative (packed bonus trick, see BONUS).
 *   S          strip width (papara_strip), BW block width, a multiple of 6 (papara_blocked).
 *   CARRY_LOCAL 1: papara_strip keeps the boundary column in local memory (m_max rows per
 *              work-item) instead of global memory.
 *   ROW_UNROLL 2: papara_strip unrolls its row loop twice (two skewed dependency chains per
 *              basic block for the scheduler, no register copies between rows).
 *   SPLIT      1: papara_strip computes three of its five add-max steps as an integer add
 *              (IMAD, FMA pipe) and a max (ALU pipe) instead of one fused DPX instruction,
 *              which issues at a quarter of the ALU rate; packed cells are then kept in
 *              offset binary (value + 0x8000 per half) so that a 32-bit add is exact per half.
 * Run-time parameters: __constant int P[], indices P_*.
 */

#define P_N 0        /* reference columns */
#define P_LANES 1    /* lanes per reference row in memory (a multiple of the work-group lanes) */
#define P_MSTRIDE 2  /* read buffer row stride */
#define P_GO 3       /* F (gap in the reference, read character inserted): open */
#define P_GE 4       /* F: extend */
#define P_GOE 5      /* E (reference column against a gap) on unflagged columns: open */
#define P_GEE 6      /* E: extend */
#define P_MA 7       /* match bonus */
#define P_MC 8       /* added on flagged columns */
#define P_MM 9       /* added on every diagonal step (bmc2012's mismatch base) */
#define P_LB 10      /* left boundary H[j][-1] = LB * (j + 1) */
#define P_GOV 11     /* E open on the strip design's virtual (left padding) columns */
#define P_NSTRIPS 12 /* strip design: strips */
#define P_PAD 13     /* strip design: virtual columns before column 0 */
#define P_NH 14      /* blocked design: head square width */
#define P_NB 15      /* blocked design: middle blocks */
#define P_NT 16      /* blocked design: tail square width */
#define P_ONE 17     /* 1, unknown to the compiler (SPLIT: keeps adds on the FMA pipe as IMAD) */

#ifndef PACKED
#define PACKED 0
#endif
#ifndef USE_PTX
#define USE_PTX 0
#endif
#ifndef PROTEIN
#define PROTEIN 0
#endif
#ifndef MATCH_NEG
#define MATCH_NEG 0
#endif
#ifndef CARRY_LOCAL
#define CARRY_LOCAL 0
#endif
#ifndef ROW_UNROLL
#define ROW_UNROLL 1
#endif
#ifndef SPLIT
#define SPLIT 0
#endif
#ifndef S
#define S 16
#endif
#if PROTEIN
typedef uint elem_t;  /* state bits 0-19, flag bit 20, virtual bit 21 */
typedef uint read_t;
#define STATE_MASK 0xFFFFFu
#define FLAG_SHIFT 20
#define VIRT_SHIFT 21
#else
typedef uchar elem_t; /* state bits 0-3, flag bit 4, virtual bit 5 */
typedef uchar read_t;
#define STATE_MASK 0xFu
#define FLAG_SHIFT 4
#define VIRT_SHIFT 5
#endif

#ifndef BW
#define BW 12
#endif

/* ---------------------------------------------------------------------------------------- */
/* Cell arithmetic: int32, or two int16 lanes in a uint                                      */
/* ---------------------------------------------------------------------------------------- */

#if PACKED
typedef uint cell_t;
typedef uint2 carry_t; /* (H pair, E pair) */
#define LPW 2          /* lanes per work-item */
#define NEG_CELL 0x88008800u /* -30720 in both halves: far below any value, no wrap on + GE */
#define SPLAT(x) (((uint)(x) & 0xFFFFu) * 0x10001u)
#define PAIR(lo, hi) (((uint)(lo) & 0xFFFFu) | ((uint)(hi) << 16))
#define LO16(x) ((int)(short)((x) & 0xFFFFu))
#define HI16(x) ((int)(short)((x) >> 16))

#include "s16x2.cl"

#else /* int32 */
typedef int cell_t;
typedef int2 carry_t;
#define LPW 1
#include "i32ops.cl"
#endif

/* Per-column constants of one lane (or lane pair): the match operand A, the two diagonal
   bonuses K1 (no match) / K2 (match) as the BONUS trick wants them, and E's open/extend. */
typedef struct {
    cell_t a;
#if PACKED && PROTEIN
    uint a1; /* the second lane's state: 20 bits do not fit a 16-bit half */
#endif
    cell_t k1, k2, go, ge;
} column_t;

/* One lane's constants as ints. */
inline void lane_constants(uint e, __constant const int *P, int *mc, int *go, int *ge) {
    int f = (e >> FLAG_SHIFT) & 1, v = (e >> VIRT_SHIFT) & 1;
    /* A virtual column's diagonal adds LB, so that it carries the border H[j][-1] = LB (j + 1)
       (PaPaRa's presets have MM == LB; a mismatch score must not leak into the border). */
    *mc = v ? P[P_LB] : P[P_MM] + (f ? P[P_MC] : 0);
    *go = v ? P[P_GOV] : (f ? 0 : P[P_GOE]);
    *ge = (v | f) ? 0 : P[P_GEE];
}

#if PACKED
/* The packed bonus trick. t = A & B puts (a & b) << 11 in each half: 0 (no match) or >= 2048
   (match); min(t + K1, K2) with K1 = mc, K2 = mc + MA then yields mc or mc + MA (for
   0 <= MA < 2048). With MA < 0: t = ~(A & B) is -1 or <= -2049 and max(t + mc + 1, mc + MA)
   does the same. Two instructions (LOP3, VIADDMNMX) for two cells. */
#if PROTEIN
#define MATCH_T(c, B) (select(0u, 0x4000u, ((c).a & (B)) != 0u) | \
                       select(0u, 0x40000000u, ((c).a1 & (B)) != 0u))
#else
#define MATCH_T(c, B) ((c).a & (B))
#endif
#if MATCH_NEG
#define BONUS(c, B) p_addmax(~MATCH_T(c, B), (c).k1, (c).k2)
#else
#define BONUS(c, B) p_addmin(MATCH_T(c, B), (c).k1, (c).k2)
#endif
#define ROW_B(b) (PROTEIN ? (uint)(b) : ((uint)(b) * 0x08000800u))

inline column_t make_column(uint e0, uint e1, __constant const int *P) {
    column_t c;
    int mc0, go0, ge0, mc1, go1, ge1;
    lane_constants(e0, P, &mc0, &go0, &ge0);
    lane_constants(e1, P, &mc1, &go1, &ge1);
    uint s0 = e0 & STATE_MASK, s1 = e1 & STATE_MASK;
#if PROTEIN
    c.a = s0;
    c.a1 = s1;
#else
    c.a = (s0 << 11) | (s1 << 27);
#endif
    int one = MATCH_NEG ? 1 : 0;
    c.k1 = PAIR(mc0 + one, mc1 + one);
    c.k2 = PAIR(mc0 + P[P_MA], mc1 + P[P_MA]);
    c.go = PAIR(go0, go1);
    c.ge = PAIR(ge0, ge1);
    return c;
}
#else
#define BONUS(c, B) ((((c).a & (B)) != 0) ? (c).k2 : (c).k1)
#define ROW_B(b) ((int)(b))

inline column_t make_column(uint e0, uint e1, __constant const int *P) {
    column_t c;
    int mc, go, ge;
    lane_constants(e0, P, &mc, &go, &ge);
    c.a = (int)(e0 & STATE_MASK);
    c.k1 = mc;
    c.k2 = mc + P[P_MA];
    c.go = go;
    c.ge = ge;
    return c;
}
#endif

/* The PaPaRa cell (spec section 5), scores only: the tie rules only decide traceback bits.
     SM = Hd + bonus;  E = max(El + ge, Hl + go);  F = max(Fu + GE, Hu + GO);  H = max(SM, E, F) */
#define CELL(c, B, Hd, Hu, Fu, Hl, El, H, E, F)                         \
    do {                                                                \
        cell_t sm_ = p_add((Hd), BONUS(c, B));                          \
        (E) = p_addmax((El), (c).ge, p_add((Hl), (c).go));              \
        (F) = p_addmax((Fu), GE2, p_add((Hu), GO2));                    \
        (H) = p_max3(sm_, (E), (F));                                    \
    } while (0)

/* Load the element(s) of column `row` for this work-item's lane(s). */
inline column_t load_column(__global const elem_t *ref, size_t row, int lanes, int lane,
                            __constant const int *P) {
    __global const elem_t *p = ref + row * (size_t)lanes + lane;
#if PACKED
    return make_column((uint)p[0], (uint)p[1], P);
#else
    return make_column((uint)p[0], 0u, P);
#endif
}

inline void write_result(__global int *out, size_t slot, cell_t lastrow, cell_t lastcol) {
#if PACKED
    vstore4((int4)(LO16(lastrow), LO16(lastcol), HI16(lastrow), HI16(lastcol)), 0,
            out + 2 * slot);
#else
    vstore2((int2)(lastrow, lastcol), 0, out + 2 * slot);
#endif
}

/* Fill the boundary column left of the reference: H[j][-1] = LB (j + 1), E[j][-1] = -inf. */
inline void init_carry(__global carry_t *cr, size_t cstride, int m, int lb) {
    for (int j = 0; j < m; j++)
        cr[j * cstride] = (carry_t)(SPLAT(lb * (j + 1)), NEG_CELL);
}

/* ---------------------------------------------------------------------------------------- */
/* Register strips                                                                           */
/* ---------------------------------------------------------------------------------------- */

/* The strip's arithmetic runs in a shifted frame. With phi_k the sum of E's open costs go over
   the strip's columns up to k (phi_{-1} = 0), every value of column k is stored minus phi_k,
   and F additionally minus GO (Ps = F - phi_k - GO). The recurrence of section 5 becomes four
   add-then-max operations (VIADDMNMX, one instruction for two cells when packed), because the
   per-column E open disappears into the frame and F's open into H's final max:
       Es = max(Es_{k-1} + (ge_k - go_k), Hs_{k-1})
       Ps = max(Ps_up + GE, Hs_up)
       X  = max(Hs_diag + bonus_k - go_k, Es)
       Hs = max(Ps + GO, X)
   The boundary column between strips is kept unshifted (phi_{-1} = 0 for the next strip);
   the host widens the integer range by the frame's reach (kernels_cl/papara.py). */
/* How the strip stores cells. SPLIT with packed cells: offset binary (ENC/DEC flip the sign
   bits), compared as unsigned; a per-half constant c is then added to both halves at once as
   the integer c_hi * 65536 + c_lo (IADD_C). Otherwise: the plain cell arithmetic. */
#if PACKED && SPLIT
#define ENC(x) ((x) ^ 0x80008000u)
#define s_max(a, b) p_umax(a, b)
#define s_addmax(a, b, c) p_uaddmax(a, b, c)
#define INT_FORM(lo, hi) ((uint)((hi) * 65536 + (lo)))
#else
#define ENC(x) (x)
#define s_max(a, b) p_max(a, b)
#define s_addmax(a, b, c) p_addmax(a, b, c)
#if PACKED
#define INT_FORM(lo, hi) PAIR(lo, hi)
#else
#define INT_FORM(lo, hi) (lo)
#endif
#endif
#if SPLIT
/* An add the compiler cannot fuse with the max (no IMAD-max instruction exists). */
#define s_iaddmax(a, c, b) s_max((a) + (c) * ONE, b)
#else
#define s_iaddmax(a, c, b) s_addmax(a, c, b)
#endif

typedef struct {
    cell_t a;
#if PACKED && PROTEIN
    uint a1;
#endif
    cell_t k1, k2, de; /* bonus constants and ge - go, all minus go */
} strip_column_t;

/* E's open of one lane (or pair) at a column. */
inline cell_t column_go(uint e0, uint e1, __constant const int *P) {
    int mc, go0, ge, go1;
    lane_constants(e0, P, &mc, &go0, &ge);
#if PACKED
    lane_constants(e1, P, &mc, &go1, &ge);
    return PAIR(go0, go1);
#else
    return go0;
#endif
}

inline strip_column_t strip_column(__global const elem_t *ref, size_t row, int lanes, int lane,
                                   __constant const int *P, cell_t *go, cell_t *neg_go) {
    __global const elem_t *p = ref + row * (size_t)lanes + lane;
    int mc0, go0, ge0, mc1 = 0, go1 = 0, ge1 = 0;
    uint e0 = p[0], e1 = 0;
    lane_constants(e0, P, &mc0, &go0, &ge0);
#if PACKED
    e1 = p[1];
    lane_constants(e1, P, &mc1, &go1, &ge1);
#endif
    column_t plain = make_column(e0, e1, P); /* the match operand A */
    strip_column_t c;
    c.a = plain.a;
#if PACKED && PROTEIN
    c.a1 = plain.a1;
#endif
    int one = (PACKED && MATCH_NEG) ? 1 : 0;
#if PACKED
    c.k1 = PAIR(mc0 + one - go0, mc1 + one - go1);
    c.k2 = PAIR(mc0 + P[P_MA] - go0, mc1 + P[P_MA] - go1);
    c.de = INT_FORM(ge0 - go0, ge1 - go1);
    *go = PAIR(go0, go1);
    *neg_go = PAIR(-go0, -go1);
#else
    c.k1 = mc0 - go0;
    c.k2 = mc0 + P[P_MA] - go0;
    c.de = ge0 - go0;
    *go = go0;
    *neg_go = -go0;
#endif
    return c;
}

/* The reference is left-padded with P_PAD virtual columns so that it is a whole number of
   strips and column n-1 is the last column of the last strip. Virtual columns hold no state
   and E open P_GOV: they reproduce the boundary H[j][-1] = LB (j + 1) exactly and keep E at
   -inf for column 0, so the first strip needs no special code. */
__kernel void papara_strip(__global const elem_t *ref,   /* [n + pad][lanes] */
                           __global const read_t *reads, /* [Q][mstride] */
                           __global const int *rlen,     /* [Q] */
                           __global carry_t *carry,      /* [m_max][Q * work-items] */
                           __global int *out,            /* [Q][lanes][2] */
                           __constant const int *P,
                           __local carry_t *lcarry)      /* CARRY_LOCAL: [m_max][group] */
{
    const int wi = get_global_id(0), q = get_global_id(1);
    const int nwi = get_global_size(0);
    const int lanes = P[P_LANES], lane = wi * LPW;
    const int m = rlen[q];
    const cell_t GO2 = INT_FORM(P[P_GO], P[P_GO]), GE2 = INT_FORM(P[P_GE], P[P_GE]);
    const cell_t ONE = P[P_ONE];
    __global const read_t *rd = reads + (size_t)q * P[P_MSTRIDE];
#if CARRY_LOCAL
    __local carry_t *cr = lcarry + get_local_id(0);
    const size_t cstride = get_local_size(0);
#else
    __global carry_t *cr = carry + (size_t)q * nwi + wi;
    const size_t cstride = (size_t)nwi * get_global_size(1);
#endif

    for (int j = 0; j < m; j++) /* H[j][-1] = LB (j + 1), E[j][-1] = -inf */
        cr[j * cstride] = (carry_t)(ENC(SPLAT(P[P_LB] * (j + 1))), ENC(NEG_CELL));
    cell_t lastrow = ENC(NEG_CELL), lastcol = ENC(NEG_CELL);
    const int nstrips = P[P_NSTRIPS];
    for (int s = 0; s < nstrips; s++) {
        strip_column_t col[S];
        cell_t hup[S], pup[S];
        cell_t phi = 0, neg_phi = 0;
#pragma unroll
        for (int k = 0; k < S; k++) {
            cell_t go, neg_go;
            col[k] = strip_column(ref, (size_t)s * S + k, lanes, lane, P, &go, &neg_go);
            phi = p_add(phi, go);
            neg_phi = p_add(neg_phi, neg_go);
            hup[k] = ENC(neg_phi); /* row -1: H = 0, shifted */
            pup[k] = ENC(NEG_CELL);
        }
        cell_t hdiag = ENC(0); /* H[j-1][first column - 1]; row -1 is 0 */
        lastcol = ENC(NEG_CELL);
#if ROW_UNROLL == 2
#pragma unroll 2
#endif
        for (int j = 0; j < m; j++) {
            const cell_t B = ROW_B(rd[j]);
            carry_t c = cr[j * cstride];
            cell_t hl = c.x, el = c.y, hd = hdiag;
            hdiag = hl;
#pragma unroll
            for (int k = 0; k < S; k++) {
                cell_t e = s_iaddmax(el, col[k].de, hl);
                cell_t f = s_iaddmax(pup[k], GE2, hup[k]);
                cell_t x = s_addmax(hd, BONUS(col[k], B), e);
                cell_t h = s_iaddmax(f, GO2, x);
                hd = hup[k];
                hup[k] = h;
                pup[k] = f;
                hl = h;
                el = e;
            }
            hl = p_add(hl, phi); /* back to the unshifted frame */
            el = p_add(el, phi);
            cr[j * cstride] = (carry_t)(hl, el);
            lastcol = s_max(lastcol, hl);
        }
        /* The last row, unshifted; virtual columns are not part of it. */
        const int first = s == 0 ? P[P_PAD] : 0;
        __global const elem_t *e = ref + (size_t)s * S * lanes + lane;
        cell_t ph = 0;
#pragma unroll
        for (int k = 0; k < S; k++) {
            ph = p_add(ph, column_go(e[k * lanes], LPW == 2 ? e[k * lanes + LPW - 1] : 0u, P));
            if (k >= first) lastrow = s_max(lastrow, p_add(hup[k], ph));
        }
    }
    write_result(out, (size_t)q * lanes + lane, ENC(lastrow), ENC(lastcol));
}

/* ---------------------------------------------------------------------------------------- */
/* The seed paper's blocks                                                                   */
/* ---------------------------------------------------------------------------------------- */

/* A square block: `width` columns from `first`, the DP row in global memory (rowbuf, one
   (H, F) pair per column), a run-time column loop and uncompressed elements. */
inline void square_block(__global const elem_t *ref, int first, int width, int lanes, int lane,
                         __global const read_t *rd, int m, __global carry_t *cr,
                         __global carry_t *row, size_t cstride, int has_last,
                         cell_t *lastrow, cell_t *lastcol, __constant const int *P) {
    const cell_t GO2 = SPLAT(P[P_GO]), GE2 = SPLAT(P[P_GE]);
    for (int i = 0; i < width; i++) row[i * cstride] = (carry_t)(0, NEG_CELL);
    cell_t hdiag = 0;
    for (int j = 0; j < m; j++) {
        const cell_t B = ROW_B(rd[j]);
        carry_t c = cr[j * cstride];
        cell_t hl = c.x, el = c.y, hd = hdiag;
        hdiag = hl;
        for (int i = 0; i < width; i++) {
            column_t col = load_column(ref, (size_t)i, lanes, lane, P);
            carry_t up = row[i * cstride];
            cell_t h, e, f;
            CELL(col, B, hd, up.x, up.y, hl, el, h, e, f);
            row[i * cstride] = (carry_t)(h, f);
            hd = up.x;
            hl = h;
            el = e;
        }
        cr[j * cstride] = (carry_t)(hl, el);
        if (has_last) *lastcol = p_max(*lastcol, hl);
    }
    if (m > 0)
        for (int i = 0; i < width; i++) *lastrow = p_max(*lastrow, row[i * cstride].x);
}

#if PROTEIN
#define PER_WORD 1 /* 20-bit states do not fit 5 bits: one element per word */
#else
#define PER_WORD 6 /* alphabet.pack5: 4 state bits + gap flag, 6 per uint32 */
#endif

/* One 5-bit field (DNA) or word (protein) as an element. */
inline uint mid_element(uint word, int t) {
#if PROTEIN
    return word;
#else
    return (word >> (5 * t)) & 31u; /* a pack5 field is an element: flag bit 4 = FLAG_SHIFT */
#endif
}

__kernel void papara_blocked(__global const elem_t *head, /* [NH][lanes] uncompressed */
                             __global const uint *mid,    /* [NB * BW / PER_WORD][lanes] */
                             __global const elem_t *tail, /* [NT][lanes] uncompressed */
                             __global const read_t *reads, __global const int *rlen,
                             __global carry_t *carry,    /* [m_max][Q * work-items] */
                             __global carry_t *rowbuf,   /* [max(NH, NT)][Q * work-items] */
                             __global int *out, __constant const int *P,
                             __local cell_t *lrow)       /* [2 * BW][work-group size] */
{
    const int wi = get_global_id(0), q = get_global_id(1);
    const int nwi = get_global_size(0), lid = get_local_id(0), ls = get_local_size(0);
    const int lanes = P[P_LANES], lane = wi * LPW;
    const size_t cstride = (size_t)nwi * get_global_size(1);
    const int m = rlen[q];
    const int nh = P[P_NH], nb = P[P_NB], nt = P[P_NT];
    const cell_t GO2 = SPLAT(P[P_GO]), GE2 = SPLAT(P[P_GE]);
    __global const read_t *rd = reads + (size_t)q * P[P_MSTRIDE];
    __global carry_t *cr = carry + (size_t)q * nwi + wi;
    __global carry_t *row = rowbuf + (size_t)q * nwi + wi;
    __local cell_t *lh = lrow + lid, *lf = lrow + BW * ls + lid;

    init_carry(cr, cstride, m, P[P_LB]);
    cell_t lastrow = NEG_CELL, lastcol = NEG_CELL;

    /* Block 1: the head square. */
    square_block(head, 0, nh, lanes, lane, rd, m, cr, row, cstride, nt == 0 && nb == 0,
                 &lastrow, &lastcol, P);

    /* Blocks 2 .. NB+1: rectangles of BW columns, DP row in local memory. */
    for (int b = 0; b < nb; b++) {
        column_t col[BW];
#pragma unroll
        for (int w = 0; w < BW / PER_WORD; w++) {
            __global const uint *p = mid + ((size_t)b * (BW / PER_WORD) + w) * lanes + lane;
            uint w0 = p[0];
#if PACKED
            uint w1 = p[1];
#else
            uint w1 = 0;
#endif
#pragma unroll
            for (int t = 0; t < PER_WORD; t++)
                col[w * PER_WORD + t] = make_column(mid_element(w0, t), mid_element(w1, t), P);
        }
#pragma unroll
        for (int k = 0; k < BW; k++) {
            lh[k * ls] = 0;
            lf[k * ls] = NEG_CELL;
        }
        cell_t hdiag = 0;
        for (int j = 0; j < m; j++) {
            const cell_t B = ROW_B(rd[j]);
            carry_t c = cr[j * cstride];
            cell_t hl = c.x, el = c.y, hd = hdiag;
            hdiag = hl;
#pragma unroll
            for (int k = 0; k < BW; k++) {
                cell_t hu = lh[k * ls], fu = lf[k * ls], h, e, f;
                CELL(col[k], B, hd, hu, fu, hl, el, h, e, f);
                lh[k * ls] = h;
                lf[k * ls] = f;
                hd = hu;
                hl = h;
                el = e;
            }
            cr[j * cstride] = (carry_t)(hl, el);
        }
        if (m > 0) {
#pragma unroll
            for (int k = 0; k < BW; k++) lastrow = p_max(lastrow, lh[k * ls]);
        }
    }

    /* Block NB+2: the tail square (holds the last column whenever the middle is not empty). */
    if (nt > 0)
        square_block(tail, 0, nt, lanes, lane, rd, m, cr, row, cstride, 1, &lastrow, &lastcol, P);
    write_result(out, (size_t)q * lanes + lane, lastrow, lastcol);
}
