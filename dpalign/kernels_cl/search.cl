/* Inter-sequence database search: one query against many targets (spec PAIRWISE.md, shape 1).
 *
 * One work-item per target (PACKED=1: per two targets, one per 16-bit half of every register),
 * as in CUDASW++'s inter-task kernels and the PaPaRa paper. The kernel's matrix is the
 * transpose of dpalign/reference.py's: kernel rows are target residues (the loop), kernel
 * columns are query positions, taken in strips of S columns whose DP state (H and the
 * vertical gap F of the row above) lives in registers. Scores are symmetric under the
 * transposition; only the borders and end cells swap roles (the host maps free_ends).
 *
 * Recurrence, in the "G frame" (every H is stored as G = H - o - e, so that opening a gap
 * needs no add of its own; the query profile holds s + o + e):
 *     E  = max(E_left - e, G_left)          horizontal gap (along the query)
 *     F  = max(F_up - e, G_up)              vertical gap (along the target)
 *     X  = max(G_diag + s', E)
 *     H  = max(X, F)                        local: best = max(best, H)
 *     G  = H - o - e                        local: G = max(H - o - e, -o - e)  (H >= 0)
 * Five add/max steps per cell (each one DPX instruction for two cells when packed on sm_90),
 * six in local mode, plus the bit operations (one PRMT) that pair the two targets' scores.
 *
 * Data layout (host: kernels_cl/search.py):
 *   - Targets are sorted by length and dealt to chunks of CHUNK work-items (CHUNK * LPW
 *     lanes). A chunk is a rectangle of `rows` residues (a multiple of PER_WORD) x lanes,
 *     stored as words of PER_WORD residues of BITS bits (residue t of a word in bits
 *     BITS*t ..), word-major: [word][lane], so a warp's loads coalesce. Each lane is aligned
 *     to the bottom of its chunk and padded at the top with the virtual residue V (the
 *     profile's last row), so every lane of a chunk ends on the chunk's last row.
 *   - The query is padded on the left with PAD virtual columns to a whole number of strips,
 *     so the query's last column is the last column of the last strip.
 *   Virtual cells reproduce the DP borders exactly: virtual columns carry the left border
 *   down (via F when it is penalised, via zero scores when it is free), virtual rows carry
 *   the top border across (via E / zero scores). So no cell needs a test, every lane of a
 *   chunk runs the same rows, and end cells sit at fixed places.
 *   - The boundary column between strips (G and E per row, per work-item) lives in global
 *     memory ("carry", [row][CHUNK] per chunk, coalesced), loaded one row ahead.
 *   - The segment's query profile (letters x columns of the strips this launch covers)
 *     is copied to local memory once per work-group (PROFILE_GLOBAL=1: read from global
 *     memory instead); long queries run in several segments (launches), the carry passing
 *     between them. The profile is handled as 32-bit words (two int16 values when packed)
 *     from the host buffer to the local copy: no pointer is ever cast to a wider type, since
 *     NVIDIA's OpenCL faults on a misaligned access that PoCL lets pass.
 *
 * Results per lane (int4): last-row maximum, last-column maximum, the corner H[n][m], and
 * the best H (local) or the maximum over every strip's last column (global: every cell's H is
 * at most o + e (S - 1) above it, which the host uses to detect 16-bit overflow). Running
 * maxima are taken of values already back in the H frame, so a pair whose later cells wrap
 * still reports the exact value of the first cell that passed the limit.
 *
 * Global mode can run in the strip's "shifted frame" instead (SHIFTED=1, papara.cl's trick):
 * column k of a strip is stored plus (k + 1)(o + e), the vertical gap plus another o + e, so
 * that both gap opens fold into the frame and a cell takes four add-max steps:
 *     E~ = max(E~_left + o, H~_left)   P~ = max(P~_up - e, H~_up)
 *     H~ = max(P~ - o - e, max(H~_diag + s', E~))
 * (the boundary column between strips stays unshifted). In local mode the zero floor would
 * differ per column, so local mode keeps the G frame; BEST3=1 takes the running best of two
 * cells with one three-input max.
 *
 * Compile-time constants (-D): PACKED, USE_PTX, LOCAL_MODE, SHIFTED, BEST3, PROFILE_GLOBAL,
 * S (a multiple of 8), BITS (2, 3, 4, 5 or 8), CHUNK (work-items per chunk, 32).
 */

#define P_CHUNK0 0     /* first chunk of this launch */
#define P_CHUNK_END 1  /* one past the last chunk */
#define P_CARRY0 2     /* first carry row of this launch's first chunk */
#define P_MPAD 3       /* padded query columns (the global profile's row: MPAD / VPW words) */
#define P_SEG_C0 4     /* first padded column of this segment (a multiple of S) */
#define P_SEG_STRIPS 5 /* strips in this segment */
#define P_LSTRIDE 6    /* row stride of the local profile (32-bit words) */
#define P_LETTERS 7    /* profile rows, the virtual residue included */
#define P_FIRST 8      /* this segment holds the first strip: initialise carry and results */
#define P_LAST 9       /* this segment holds the last strip: write the last column, corner */
#define P_O 10
#define P_E 11
#define P_TOP_ZERO 12  /* kernel row 0 is all zeros (else -(o + e c) at query column c) */
#define P_LEFT_ZERO 13 /* kernel column 0 is all zeros (else -(o + e r) at target row r) */
#define P_PAD 14       /* virtual columns before the query */

#ifndef PACKED
#define PACKED 0
#endif
#ifndef USE_PTX
#define USE_PTX 0
#endif
#ifndef LOCAL_MODE
#define LOCAL_MODE 0
#endif
#ifndef S
#define S 8
#endif
#ifndef BITS
#define BITS 5
#endif
#ifndef CHUNK
#define CHUNK 32
#endif
#ifndef SHIFTED
#define SHIFTED 0
#endif
#ifndef BEST3
#define BEST3 0
#endif
#ifndef PROFILE_GLOBAL
#define PROFILE_GLOBAL 0
#endif
#if SHIFTED && LOCAL_MODE
#error "the shifted frame is for global mode"
#endif
#define PER_WORD (32 / BITS)
#define RMASK ((1u << BITS) - 1u)

#if PACKED
typedef uint cell_t;
typedef uint2 carry_t;  /* (G pair, E pair) */
#define VPW 2           /* profile values per 32-bit word (two int16) */
typedef uint2 word_t;   /* the two lanes' residue words */
#define LPW 2
#define PV 8            /* cells per group of the unrolled strip loop */
#define NEG_CELL 0x88008800u /* -30720 in both halves */
#define SPLAT(x) (((uint)(x) & 0xFFFFu) * 0x10001u)
#define LO16(x) ((int)(short)((x) & 0xFFFFu))
#define HI16(x) ((int)(short)((x) >> 16))

#include "s16x2.cl"
/* The low or high 16-bit halves of a and b, as one pair (one PRMT on NVIDIA). */
inline uint pair_lo(uint a, uint b) { return (a & 0xFFFFu) | (b << 16); }
inline uint pair_hi(uint a, uint b) { return (a >> 16) | (b & 0xFFFF0000u); }

#else /* int32, one lane per work-item */
typedef int cell_t;
typedef int2 carry_t;
#define VPW 1           /* profile values per 32-bit word */
typedef uint word_t;
#define LPW 1
#define PV 4
#include "i32ops.cl"
#endif

/* H on kernel row 0 at padded column p (p = -1: left of the strips): the corner and the
   virtual columns hold 0, query column c = p - PAD + 1 holds the top border. */
inline int top_border(int p, __constant const int *P) {
    int c = p - P[P_PAD] + 1;
    if (c <= 0 || P[P_TOP_ZERO]) return 0;
    return -(P[P_O] + P[P_E] * c);
}

/* H on kernel column 0 at kernel row r of a lane whose first `virt` rows are virtual. */
inline int left_border(int r, int virt, __constant const int *P) {
    int real = r - virt;
    if (real <= 0 || P[P_LEFT_ZERO]) return 0;
    return -(P[P_O] + P[P_E] * real);
}

#if PACKED
#define RESIDUE(w, t, lane) ((((lane) ? (w).y : (w).x) >> (BITS * (t))) & RMASK)
#else
#define RESIDUE(w, t, lane) (((w) >> (BITS * (t))) & RMASK)
#endif

/* Where the query profile is read from: local memory (a copy per work-group) or, with
   PROFILE_GLOBAL=1, straight from global memory (through the caches). */
#if PROFILE_GLOBAL
#define PROF_AS __global
#else
#define PROF_AS __local
#endif

__kernel void search_strip(__global const word_t *db,     /* per chunk: [words][CHUNK] */
                           __global const int *meta,       /* per chunk: word row, rows, carry
                                                              row, 0 */
                           __global const int *lengths,    /* per lane: target length */
                           __global const uint *profile,   /* [letters][MPAD / VPW] */
                           __global carry_t *carry,        /* per chunk: [rows][CHUNK] */
                           __global int4 *out,             /* per lane */
                           __constant const int *P,
                           __local uint *lprof)            /* [letters][LSTRIDE] words */
{
    const int nstrips = P[P_SEG_STRIPS], seg_c0 = P[P_SEG_C0];
    /* The profile in 32-bit words (VPW values each; every row and strip starts on a word). */
#if PROFILE_GLOBAL
    const int lstride = P[P_MPAD] / VPW;
    __global const uint *prof = profile + seg_c0 / VPW;
#else
    const int lid = get_local_id(0), lsize = get_local_size(0);
    const int lstride = P[P_LSTRIDE];
    const int seg_words = nstrips * S / VPW;
    for (int row = 0; row < P[P_LETTERS]; row++) {
        __global const uint *src = profile + (size_t)row * (P[P_MPAD] / VPW) + seg_c0 / VPW;
        for (int col = lid; col < seg_words; col += lsize) lprof[row * lstride + col] = src[col];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    __local const uint *prof = lprof;
#endif

    const int gid = get_global_id(0);
    const int chunk = P[P_CHUNK0] + gid / CHUNK, x = gid % CHUNK;
    if (chunk < P[P_CHUNK_END]) {
        const int word0 = meta[4 * chunk], rows = meta[4 * chunk + 1];
        const int carry0 = meta[4 * chunk + 2];
        const int words = rows / PER_WORD;
        __global const word_t *wp = db + (size_t)word0 * CHUNK + x;
        __global carry_t *cr = carry + (size_t)(carry0 - P[P_CARRY0]) * CHUNK + x;
        const size_t lane0 = (size_t)chunk * (CHUNK * LPW) + x * LPW;
        const int o = P[P_O], e = P[P_E];
        const int virt0 = rows - lengths[lane0];
#if PACKED
        const int virt1 = rows - lengths[lane0 + 1];
#endif
        const cell_t NE = SPLAT(-e), NOE = SPLAT(-(o + e)), OE = SPLAT(o + e);
#if SHIFTED
        const cell_t O = SPLAT(o), NSOE = SPLAT(-S * (o + e));
#endif
        const int first = P[P_FIRST], last = P[P_LAST];

        cell_t lastrow, lastcol, corner, best;
        if (first) {
            lastrow = lastcol = corner = NEG_CELL;
            best = LOCAL_MODE ? 0 : NEG_CELL;
        } else {
#if PACKED
            int4 r0 = out[lane0], r1 = out[lane0 + 1];
            lastrow = (uint)(r0.x & 0xFFFF) | ((uint)r1.x << 16);
            lastcol = (uint)(r0.y & 0xFFFF) | ((uint)r1.y << 16);
            corner = (uint)(r0.z & 0xFFFF) | ((uint)r1.z << 16);
            best = (uint)(r0.w & 0xFFFF) | ((uint)r1.w << 16);
#else
            int4 r0 = out[lane0];
            lastrow = r0.x;
            lastcol = r0.y;
            corner = r0.z;
            best = r0.w;
#endif
        }

        for (int s = 0; s < nstrips; s++) {
            const int pc0 = seg_c0 + s * S;
            PROF_AS const uint *sp = prof + s * (S / VPW);
            const int init = first && s == 0;
            cell_t gup[S], fup[S];
#pragma unroll
            for (int k = 0; k < S; k++) {
                /* row 0 in the strip's frame (SHIFTED: + (k + 1)(o + e); G frame: - (o + e)) */
                gup[k] = SPLAT(top_border(pc0 + k, P) + (SHIFTED ? (k + 1) * (o + e) : -(o + e)));
                fup[k] = NEG_CELL;
            }
            cell_t gdiag = SPLAT(top_border(pc0 - 1, P) - (SHIFTED ? 0 : o + e));
            cell_t colmax = NEG_CELL;
            carry_t cnext = init ? (carry_t)(0, 0) : cr[0];
            int r = 0; /* kernel row - 1 */
            for (int w = 0; w < words; w++) {
                const word_t wd = wp[(size_t)w * CHUNK];
                for (int t = 0; t < PER_WORD; t++, r++) {
                    carry_t c = cnext;
                    if (init) {
                        const int shift = SHIFTED ? 0 : o + e;
#if PACKED
                        c.x = (uint)(left_border(r + 1, virt0, P) - shift) & 0xFFFFu;
                        c.x |= (uint)(left_border(r + 1, virt1, P) - shift) << 16;
#else
                        c.x = left_border(r + 1, virt0, P) - shift;
#endif
                        c.y = NEG_CELL;
                    } else if (r + 1 < rows) {
                        cnext = cr[(size_t)(r + 1) * CHUNK];
                    }
                    cell_t gl = c.x, el = c.y, gd = gdiag;
                    gdiag = gl;
                    PROF_AS const uint *p0 = sp + RESIDUE(wd, t, 0) * lstride;
#if PACKED
                    PROF_AS const uint *p1 = sp + RESIDUE(wd, t, 1) * lstride;
#endif
#pragma unroll
                    for (int q = 0; q < S / PV; q++) {
                        cell_t sc[PV];
#if PACKED
#pragma unroll
                        for (int u = 0; u < PV / 2; u++) {
                            const uint a = p0[q * (PV / 2) + u], b = p1[q * (PV / 2) + u];
                            sc[2 * u] = pair_lo(a, b);
                            sc[2 * u + 1] = pair_hi(a, b);
                        }
#else
#pragma unroll
                        for (int u = 0; u < PV; u++) sc[u] = (int)p0[q * PV + u];
#endif
#if LOCAL_MODE && BEST3
                        cell_t hprev = 0;
#endif
#pragma unroll
                        for (int u = 0; u < PV; u++) {
                            const int k = q * PV + u;
#if SHIFTED
                            el = p_addmax(el, O, gl);              /* E~ = max(E~ + o, H~_left) */
                            fup[k] = p_addmax(fup[k], NE, gup[k]); /* P~ = max(P~ - e, H~_up) */
                            cell_t g = p_addmax(fup[k], NOE, p_addmax(gd, sc[u], el));
#else
                            el = p_addmax(el, NE, gl);
                            fup[k] = p_addmax(fup[k], NE, gup[k]);
                            cell_t h = p_max(p_addmax(gd, sc[u], el), fup[k]);
#if LOCAL_MODE && BEST3
                            if (u & 1) best = p_max3(best, hprev, h);
                            else hprev = h;
#elif LOCAL_MODE
                            best = p_max(best, h);
#endif
#if LOCAL_MODE
                            cell_t g = p_addmax(h, NOE, NOE);
#else
                            cell_t g = p_add(h, NOE);
#endif
#endif
                            gd = gup[k];
                            gup[k] = g;
                            gl = g;
                        }
                    }
#if SHIFTED
                    gl = p_add(gl, NSOE); /* back to the strip's left frame for the carry */
                    el = p_add(el, NSOE);
                    colmax = p_max(colmax, gl);
#elif !LOCAL_MODE
                    colmax = p_max(colmax, p_add(gl, OE));
#endif
                    cr[(size_t)r * CHUNK] = (carry_t)(gl, el);
                }
            }
#if !LOCAL_MODE
            /* the strip's last row (back to H) and last column */
#pragma unroll
            for (int k = 0; k < S; k++) {
                const int back = SHIFTED ? -(k + 1) * (o + e) : o + e;
                lastrow = p_max(lastrow, p_add(gup[k], SPLAT(back)));
            }
            best = p_max(best, colmax);
            if (last && s == nstrips - 1) {
                lastcol = colmax;
                corner = p_add(gup[S - 1], SPLAT(SHIFTED ? -S * (o + e) : o + e));
            }
#endif
        }

#if PACKED
        out[lane0] = (int4)(LO16(lastrow), LO16(lastcol), LO16(corner), LO16(best));
        out[lane0 + 1] = (int4)(HI16(lastrow), HI16(lastcol), HI16(corner), HI16(best));
#else
        out[lane0] = (int4)(lastrow, lastcol, corner, best);
#endif
    } /* chunk < P[P_CHUNK_END] */
}
