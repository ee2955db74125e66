/* The long-pair tile kernels' profiles, built on the device from b's residue codes
 * (antidiagonal.py): the host uploads n bytes and a small score table instead of building
 * and uploading letters^2 * n words (1 Mb on the H100 host: ~0.08 s of a 0.86 s score).
 *
 * scores: [rows][k] int, s(x, c) + o + e already added; a row per residue of a's alphabet.
 */

/* antidiagonal.cl's profile: prof[x][j] = scores[x][b[j]] for j < n, else 0. */
__kernel void ad_profile32(__global const uchar *b, __global const int *scores, const int n,
                           const int stride, const int k, __global int *prof) {
    const int j = get_global_id(0);
    const int x = get_global_id(1);
    if (j >= stride)
        return;
    prof[(size_t)x * stride + j] = j < n ? scores[x * k + b[j]] : 0;
}

/* antidiagonal16.cl's packed profile: row x * L + y, column j: scores[x][b[j]] in the low
 * 16 bits, scores[y][b[j + shift]] in the high 16 bits (0 past b's end). */
__kernel void ad_profile16(__global const uchar *b, __global const int *scores, const int n,
                           const int stride, const int k, const int shift, const int letters,
                           __global uint *prof) {
    const int j = get_global_id(0);
    const int row = get_global_id(1);
    if (j >= stride)
        return;
    const int x = row / letters, y = row - x * letters;
    const uint lo = j < n ? (ushort)(short)scores[x * k + b[j]] : 0u;
    const uint hi = j + shift < n ? (ushort)(short)scores[y * k + b[j + shift]] : 0u;
    prof[(size_t)row * stride + j] = lo | (hi << 16);
}
