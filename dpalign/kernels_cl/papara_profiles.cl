/* PaPaRa's edge profiles (spec PAPARA.md section 4) on the device: every directed subtree,
 * column by column, one work-item per column.
 *
 * The host turns the tree into a schedule of combines in bottom-up order
 * (dpalign/papara/profiles.py combine_schedule); every work-item runs the whole schedule for
 * its column. This is the CPU kernel dpalign/simd/papara_profiles.py _run_schedule operation
 * for operation, in double precision without contraction (no fused multiply-add), so the
 * likelihoods, and therefore the gap flags, are bit-identical to it and to the NumPy form.
 *
 * Compile-time constants (-D):
 *   STATE_T  the states' type: uchar (DNA, 4-bit states) or uint (protein).
 * Slots (slot-major, a column's values of all slots n apart): 0..n_tips-1 the tips (their
 * states already in `state`), n_tips.. the combined subtrees.
 * ops[4 c..4 c+3] = (dst, a, b, a or b is a tip): dst >= 0 a slot, dst < 0 edge -1 - dst of
 * the outputs; trans[8 c..8 c+7] the four transition probabilities of a's branch, then b's.
 */

#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF

#define TINY 0x1p-256
#define SCALE 0x1p256

__kernel void edge_profiles(
    const int n,          /* columns */
    const int n_tips,
    const int n_ops,
    const STATE_T gap_state,
    const int cgap,       /* 1: PaPaRa 1.0's gap flags (aux == 1), 0: the likelihood's */
    __global const long *ops,
    __global const double *trans,
    __global STATE_T *state,
    __global double *lik0,
    __global double *lik1,
    __global uchar *aux,
    __global STATE_T *out_states,
    __global uchar *out_flags)
{
    const int x = get_global_id(0);
    if (x >= n)
        return;
    for (int t = 0; t < n_tips; t++) {
        const size_t i = (size_t)t * n + x;
        const int gap = state[i] == gap_state;
        lik0[i] = gap ? 0.0 : 1.0;
        lik1[i] = gap ? 1.0 : 0.0;
        aux[i] = gap ? 1 : 0;
    }
    for (int c = 0; c < n_ops; c++) {
        const long dst = ops[4 * c], a = ops[4 * c + 1], b = ops[4 * c + 2];
        const int tip = ops[4 * c + 3] != 0;
        __global const double *p = trans + 8 * (size_t)c;
        const size_t ia = (size_t)a * n + x, ib = (size_t)b * n + x;
        const STATE_T sa = state[ia], sb = state[ib];
        STATE_T s = sa & sb;
        if (s == 0)
            s = sa | sb;
        const double a0 = lik0[ia], a1 = lik1[ia], b0 = lik0[ib], b1 = lik1[ib];
        /* the products and sums one by one, each rounded, as on the CPU */
        const double ta0 = p[0] * a0, ta1 = p[1] * a1, ta2 = p[2] * a0, ta3 = p[3] * a1;
        const double tb0 = p[4] * b0, tb1 = p[5] * b1, tb2 = p[6] * b0, tb3 = p[7] * b1;
        const double ua0 = ta0 + ta1, ub0 = tb0 + tb1, ua1 = ta2 + ta3, ub1 = tb2 + tb3;
        double l0 = ua0 * ub0;
        double l1 = ua1 * ub1;
        if (l0 < TINY && l1 < TINY) {
            l0 = l0 * SCALE;
            l1 = l1 * SCALE;
        }
        int xa, xb;
        if (tip) {
            xa = (aux[ia] & 1) != 0;
            xb = (aux[ib] & 1) != 0;
        } else {
            xa = aux[ia] == 1;
            xb = aux[ib] == 1;
        }
        const uchar v = (xa && xb) ? 1 : (xa != xb ? 3 : 0);
        if (dst >= 0) {
            const size_t id = (size_t)dst * n + x;
            state[id] = s;
            lik0[id] = l0;
            lik1[id] = l1;
            aux[id] = v;
        } else {
            const size_t e = (size_t)(-1 - dst) * n + x;
            out_states[e] = s;
            out_flags[e] = cgap ? (v == 1 ? 1 : 0) : (l0 < l1 ? 1 : 0);
        }
    }
}
