/* The int32 forms of the packed 16-bit operations of s16x2.cl (one lane per 32-bit cell), for
   the kernels built without PACKED: papara.cl and search.cl include this file. */
#define NEG_CELL (-(1 << 29))
#define SPLAT(x) (x)
#define p_add(a, b) ((a) + (b))
#define p_max(a, b) max(a, b)
#define p_addmax(a, b, c) max((a) + (b), c)
#define p_max3(a, b, c) max(max(a, b), c)
