/* Two signed 16-bit cells in one 32-bit register: the arithmetic the packed kernels share
 * (papara.cl, search.cl, search_group.cl include this file; programs.source expands it).
 *
 * USE_PTX=1: inline PTX add/max/min.s16x2 (NVIDIA sm_90+), which ptxas fuses into Hopper's
 * DPX instructions: an add feeding a max is one VIADDMNMX (the CUDA __viaddmax_s16x2
 * intrinsics are written the same way), two maxes one VIMNMX3. Otherwise portable OpenCL C
 * on short2 / ushort2 (additions on ushort2, whose wrap-around OpenCL defines).
 */

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
inline uint p_maxrelu(uint a, uint b) { /* max(a, b, 0) */
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
inline uint p_addmin(uint a, uint b, uint c) {
    uint r;
    asm("{.reg .b32 t; add.s16x2 t, %1, %2; min.s16x2 %0, t, %3;}"
        : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
inline uint p_max3(uint a, uint b, uint c) {
    uint r;
    asm("{.reg .b32 t; max.s16x2 t, %1, %2; max.s16x2 %0, t, %3;}"
        : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
inline uint p_umax(uint a, uint b) {
    uint r;
    asm("max.u16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
inline uint p_uaddmax(uint a, uint b, uint c) {
    uint r;
    asm("{.reg .b32 t; add.u16x2 t, %1, %2; max.u16x2 %0, t, %3;}"
        : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
#else
inline uint p_add(uint a, uint b) { return as_uint(as_ushort2(a) + as_ushort2(b)); }
inline uint p_max(uint a, uint b) { return as_uint(max(as_short2(a), as_short2(b))); }
inline uint p_maxrelu(uint a, uint b) {
    return as_uint(max(max(as_short2(a), as_short2(b)), (short2)(0, 0)));
}
inline uint p_addmax(uint a, uint b, uint c) { return p_max(p_add(a, b), c); }
inline uint p_addmin(uint a, uint b, uint c) {
    return as_uint(min(as_short2(p_add(a, b)), as_short2(c)));
}
inline uint p_max3(uint a, uint b, uint c) { return p_max(p_max(a, b), c); }
inline uint p_umax(uint a, uint b) { return as_uint(max(as_ushort2(a), as_ushort2(b))); }
inline uint p_uaddmax(uint a, uint b, uint c) { return p_umax(p_add(a, b), c); }
#endif
