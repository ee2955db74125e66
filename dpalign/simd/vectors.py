"""Explicit SIMD vectors for Numba kernels: LLVM ``<lanes x iN>`` values kept in registers.

Plain Numba loops over ``[n, W]`` arrays keep the per-lane DP state in memory and promote
narrow integers, which measured 1.1-2.3 GCUPS on the PaPaRa recurrence here; the same loop
written with these vector values measured 7.8 GCUPS on one AVX-512 core (``shared/probes``).

Every kernel of :mod:`dpalign.simd` builds its vectors from this one module. The intrinsics are
module-level globals (so kernels stay cacheable) and *polymorphic*: a vector's shape comes from
the array it is loaded from, and every other operation follows its arguments, so one kernel
source compiles to one specialisation per lane dtype through Numba's ordinary dispatch.

Two shapes of the same element type are in use:

* :func:`vload`, :func:`vstore`, :func:`vsplat`: one 512-bit register of the array's dtype
  (64 x int8, 32 x int16, 16 x int32, 8 x int64): the pairwise, striped and long-pair kernels.
* :func:`vload32`, :func:`vstore32`, :func:`vsplat32`: 32 lanes whatever the dtype (one zmm
  register of int16, two of int32): PaPaRa keeps profile w in lane w of a 32-profile block.

Arithmetic wraps like C integers except :func:`vadds`/:func:`vsubs` (saturating). Comparisons
return a mask vector of the same type (all ones / zero), ready for :func:`vselect` and
:func:`vany`. :func:`vlookup` turns a small table in memory into a vector indexed per lane: one
AVX-512 permute (``vpermb`` with VBMI for int8, ``vpermw`` for int16, ``vpermi2d`` for int32)
where the host has it, else a portable gather built from scalar loads; which lowering is used
is decided when the kernel is compiled (Numba caches per host CPU).

Also here: the memory-ordering primitives the long-pair wavefront workers synchronise with
(:func:`load_acquire`, :func:`store_release`, :func:`compare_swap` on int64 arrays) and
:func:`relax`, a spin-wait hint that yields the CPU after a while so that a waiting thread does
not starve the one it waits for on a loaded machine.
"""

from __future__ import annotations

import platform

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

from . import load_numba_target

# Numba loads its CPU target (which probes SciPy for BLAS) at the first kernel, not at import:
# load it here, without SciPy, before any kernel module of this package compiles or loads.
load_numba_target()

VECTOR_BITS = 512
#: Lane dtypes of the pairwise kernels and their lane counts in one 512-bit vector.
LANES = {np.dtype(np.int8): 64, np.dtype(np.int16): 32, np.dtype(np.int32): 16}
#: Entries a :func:`vlookup` table may hold for each lane width.
LOOKUP_ENTRIES = {8: 64, 16: 32, 32: 32}

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


class Vector(types.Type):
    """The Numba type of an LLVM ``<lanes x i{bits}>`` value."""

    def __init__(self, bits: int, lanes: int) -> None:
        self.bits = bits
        self.lanes = lanes
        super().__init__(name=f"v{lanes}i{bits}")


@register_model(Vector)
class _VectorModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, ir.VectorType(ir.IntType(fe_type.bits), fe_type.lanes))


_TYPES: dict[tuple[int, int], Vector] = {}


def vector_type(bits: int, lanes: int) -> Vector:
    """The (one, cached) Numba type of ``<lanes x i{bits}>``."""
    if (bits, lanes) not in _TYPES:
        _TYPES[bits, lanes] = Vector(bits, lanes)
    return _TYPES[bits, lanes]


def _llvm(vt: Vector) -> ir.VectorType:
    return ir.VectorType(ir.IntType(vt.bits), vt.lanes)


def _resize(builder, value, bits: int):
    """An integer scalar truncated or sign-extended to ``bits``."""
    width = value.type.width
    if width > bits:
        return builder.trunc(value, ir.IntType(bits))
    if width < bits:
        return builder.sext(value, ir.IntType(bits))
    return value


def _pointer(context, builder, arr_type, arr, idx, vec: ir.VectorType):
    """Address of flat element ``idx`` of a C-contiguous array, as a pointer to ``vec``."""
    ary = context.make_array(arr_type)(context, builder, arr)
    return builder.bitcast(builder.gep(ary.data, [idx]), vec.as_pointer())


def _splat(builder, value, vec: ir.VectorType):
    undef = ir.Constant(vec, ir.Undefined)
    one = builder.insert_element(undef, value, ir.Constant(ir.IntType(32), 0))
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), vec.count), [0] * vec.count)
    return builder.shuffle_vector(one, undef, zeros)


# --------------------------------------------------------------------------------------------
# Memory: the vector shape comes from the array (512-bit registers, or 32 lanes)
# --------------------------------------------------------------------------------------------


def _memory_ops(lanes_of):
    """load, store and splat whose vector has ``lanes_of(bits)`` lanes of the array's dtype."""

    def array_vector(arr):
        if isinstance(arr, types.Array) and isinstance(arr.dtype, types.Integer):
            return vector_type(arr.dtype.bitwidth, lanes_of(arr.dtype.bitwidth))
        return None

    @intrinsic
    def load(typingctx, arr, idx):
        vt = array_vector(arr)
        if vt is None or not isinstance(idx, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            ptr = _pointer(context, builder, sig.args[0], args[0], args[1], _llvm(vt))
            return builder.load(ptr, align=vt.bits // 8)

        return vt(arr, idx), codegen

    @intrinsic
    def store(typingctx, arr, idx, v):
        vt = array_vector(arr)
        if vt is None or v != vt:
            return None

        def codegen(context, builder, sig, args):
            ptr = _pointer(context, builder, sig.args[0], args[0], args[1], _llvm(vt))
            builder.store(args[2], ptr, align=vt.bits // 8)
            return context.get_dummy_value()

        return types.none(arr, idx, v), codegen

    @intrinsic
    def splat(typingctx, like, x):
        vt = array_vector(like)
        if vt is None or not isinstance(x, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            return _splat(builder, _resize(builder, args[1], vt.bits), _llvm(vt))

        return vt(like, x), codegen

    return load, store, splat


vload, vstore, vsplat = _memory_ops(lambda bits: VECTOR_BITS // bits)
vload.__doc__ = "One 512-bit vector of ``arr``'s dtype from flat index ``idx`` (unaligned)."
vstore.__doc__ = "Store vector ``v`` at flat index ``idx`` of an array of its lane dtype."
vsplat.__doc__ = "A 512-bit vector of ``like``'s dtype with every lane set to integer ``x``."

vload32, vstore32, vsplat32 = _memory_ops(lambda bits: 32)
vload32.__doc__ = "32 lanes of ``arr``'s dtype from flat index ``idx`` (unaligned)."
vstore32.__doc__ = "Store a 32-lane vector at flat index ``idx`` of an array of its dtype."
vsplat32.__doc__ = "A 32-lane vector of ``like``'s dtype with every lane set to integer ``x``."


@intrinsic
def vlanes(typingctx, arr):
    """Lanes of one 512-bit vector of ``arr``'s dtype, as a compile-time constant (a kernel
    indexing with it gets constant offsets, not one register per offset)."""
    if not isinstance(arr, types.Array) or not isinstance(arr.dtype, types.Integer):
        return None
    lanes = VECTOR_BITS // arr.dtype.bitwidth

    def codegen(context, builder, sig, args):
        return context.get_constant(types.intp, lanes)

    return types.intp(arr), codegen


@intrinsic
def vstore_u8(typingctx, arr, idx, v):
    """Store the low byte of every lane of ``v`` at flat index ``idx`` of a uint8 array."""
    if not isinstance(v, Vector) or not isinstance(arr, types.Array) or arr.dtype != types.uint8:
        return None

    def codegen(context, builder, sig, args):
        narrow = ir.VectorType(ir.IntType(8), v.lanes)
        ptr = _pointer(context, builder, sig.args[0], args[0], args[1], narrow)
        builder.store(builder.trunc(args[2], narrow), ptr, align=1)
        return context.get_dummy_value()

    return types.none(arr, idx, v), codegen


# --------------------------------------------------------------------------------------------
# Lane-wise operations: any vector type, both arguments the same
# --------------------------------------------------------------------------------------------


def _binary(build, doc: str):
    @intrinsic
    def op(typingctx, a, b):
        if not isinstance(a, Vector) or b != a:
            return None

        def codegen(context, builder, sig, args):
            return build(builder, args[0], args[1])

        return a(a, b), codegen

    op.__doc__ = doc
    return op


def _llvm_binary(name: str):
    def build(builder, a, b):
        vec = a.type
        fnty = ir.FunctionType(vec, [vec, vec])
        fn = cgutils.get_or_insert_function(
            builder.module, fnty, f"llvm.{name}.v{vec.count}i{vec.element.width}"
        )
        return builder.call(fn, [a, b])

    return build


def _mask(pred: str):
    def build(builder, a, b):
        return builder.sext(builder.icmp_signed(pred, a, b), a.type)

    return build


vadd = _binary(lambda b, x, y: b.add(x, y), "Lane-wise a + b (wrapping).")
vsub = _binary(lambda b, x, y: b.sub(x, y), "Lane-wise a - b (wrapping).")
vand = _binary(lambda b, x, y: b.and_(x, y), "Lane-wise bitwise and.")
vor = _binary(lambda b, x, y: b.or_(x, y), "Lane-wise bitwise or.")
vmax = _binary(_llvm_binary("smax"), "Lane-wise signed maximum.")
vmin = _binary(_llvm_binary("smin"), "Lane-wise signed minimum.")
vadds = _binary(_llvm_binary("sadd.sat"), "Lane-wise a + b, saturating.")
vsubs = _binary(_llvm_binary("ssub.sat"), "Lane-wise a - b, saturating.")
vgt = _binary(_mask(">"), "Mask: a > b (signed).")
vge = _binary(_mask(">="), "Mask: a >= b (signed).")
veq = _binary(_mask("=="), "Mask: a == b.")
vne = _binary(_mask("!="), "Mask: a != b.")


@intrinsic
def vselect(typingctx, mask, a, b):
    """``a`` where ``mask`` (a comparison result) is set, else ``b``."""
    if not isinstance(a, Vector) or not (mask == a == b):
        return None

    def codegen(context, builder, sig, args):
        cond = builder.icmp_signed("!=", args[0], ir.Constant(args[0].type, None))
        return builder.select(cond, args[1], args[2])

    return a(mask, a, b), codegen


def _unary(build, result, doc: str):
    @intrinsic
    def op(typingctx, v):
        if not isinstance(v, Vector):
            return None

        def codegen(context, builder, sig, args):
            return build(builder, args[0])

        return result(v), codegen

    op.__doc__ = doc
    return op


def _any_lane(builder, mask):
    vec = mask.type
    cond = builder.icmp_signed("!=", mask, ir.Constant(vec, None))
    bits = builder.bitcast(cond, ir.IntType(vec.count))
    return builder.icmp_unsigned("!=", bits, ir.Constant(ir.IntType(vec.count), 0))


def _reduction(name: str):
    def build(builder, v):
        vec = v.type
        fnty = ir.FunctionType(vec.element, [vec])
        fn = cgutils.get_or_insert_function(
            builder.module, fnty, f"llvm.vector.reduce.{name}.v{vec.count}i{vec.element.width}"
        )
        return _resize(builder, builder.call(fn, [v]), 64)

    return build


def _lane_bits(builder, mask):
    vec = mask.type
    cond = builder.icmp_signed("!=", mask, ir.Constant(vec, None))
    bits = builder.bitcast(cond, ir.IntType(vec.count))
    return builder.zext(bits, ir.IntType(64)) if vec.count < 64 else bits


vany = _unary(_any_lane, types.boolean, "True when any lane of a mask is set.")
vbits = _unary(_lane_bits, types.int64, "Lane k of a mask (up to 64 lanes) as bit k of an int64.")
vhmax = _unary(_reduction("smax"), types.int64, "The largest lane as an int64.")
vhmin = _unary(_reduction("smin"), types.int64, "The smallest lane as an int64.")


@intrinsic
def vlane(typingctx, v, k):
    """Lane ``k`` of ``v`` as an int64."""
    if not isinstance(v, Vector):
        return None

    def codegen(context, builder, sig, args):
        return _resize(builder, builder.extract_element(args[0], args[1]), 64)

    return types.int64(v, k), codegen


def _shift_up(builder, v, fill, count: int):
    """Lanes of ``v`` moved up by ``count``; the low lanes from the low lanes of ``fill``."""
    lanes = v.type.count
    mask = [lanes + k if k < count else k - count for k in range(lanes)]
    return builder.shuffle_vector(v, fill, ir.Constant(ir.VectorType(ir.IntType(32), lanes), mask))


@intrinsic
def vshift(typingctx, v, fill, n):
    """Lanes moved up by the constant ``n`` (lane k gets lane k-n); the low lanes from ``fill``."""
    if not isinstance(v, Vector) or fill != v or not isinstance(n, types.IntegerLiteral):
        return None
    count = n.literal_value

    def codegen(context, builder, sig, args):
        return _shift_up(builder, args[0], args[1], count)

    return v(v, fill, n), codegen


@intrinsic
def vshift_in(typingctx, v, x):
    """Lanes moved up by one (lane k gets lane k-1); lane 0 gets the integer ``x``."""
    if not isinstance(v, Vector) or not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        value = _resize(builder, args[1], v.bits)
        first = builder.insert_element(
            ir.Constant(_llvm(v), ir.Undefined), value, ir.Constant(ir.IntType(32), 0)
        )
        return _shift_up(builder, args[0], first, 1)

    return v(v, x), codegen


# --------------------------------------------------------------------------------------------
# Per-lane table lookup
# --------------------------------------------------------------------------------------------


def host_features() -> dict:
    """The host CPU's features as LLVM reports them (what Numba compiles for)."""
    import llvmlite.binding as llvm

    return dict(llvm.get_host_cpu_features())


def _has(feature: str) -> bool:
    return bool(host_features().get(feature))


def permute_lowering(bits: int) -> str:
    """Which instruction :func:`vlookup` uses for this lane width on this host."""
    if bits == 8 and _has("avx512vbmi"):
        return "vpermb"
    if bits == 16 and _has("avx512bw"):
        return "vpermw"
    if bits == 32 and _has("avx512f"):
        return "vpermi2d"
    return "portable"


def _portable_lookup(builder, table_ptr, idx):
    """result[l] = table[idx[l]] with one scalar load per lane (any target)."""
    vec = idx.type
    result = ir.Constant(vec, ir.Undefined)
    for lane in range(vec.count):
        k = ir.Constant(ir.IntType(32), lane)
        index = builder.zext(builder.extract_element(idx, k), ir.IntType(64))
        value = builder.load(builder.gep(table_ptr, [index]))
        result = builder.insert_element(result, value, k)
    return result


def _make_lookup(portable: bool):
    @intrinsic
    def lookup(typingctx, table, offset, idx):
        if not isinstance(table, types.Array) or not isinstance(offset, types.Integer):
            return None
        bits = getattr(table.dtype, "bitwidth", None)
        if bits not in LOOKUP_ENTRIES or idx != vector_type(bits, VECTOR_BITS // bits):
            return None
        lowering = "portable" if portable else permute_lowering(bits)

        def codegen(context, builder, sig, args):
            vec = _llvm(idx)
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            base = builder.gep(ary.data, [args[1]])
            if lowering == "portable":
                return _portable_lookup(builder, base, args[2])
            align = bits // 8
            low = builder.load(builder.bitcast(base, vec.as_pointer()), align=align)
            if lowering == "vpermi2d":
                high_ptr = builder.gep(base, [ir.Constant(ir.IntType(64), vec.count)])
                high = builder.load(builder.bitcast(high_ptr, vec.as_pointer()), align=align)
                fnty = ir.FunctionType(vec, [vec, vec, vec])
                fn = cgutils.get_or_insert_function(
                    builder.module, fnty, "llvm.x86.avx512.vpermi2var.d.512"
                )
                return builder.call(fn, [low, args[2], high])
            name = {"vpermb": "qi", "vpermw": "hi"}[lowering]
            fnty = ir.FunctionType(vec, [vec, vec])
            fn = cgutils.get_or_insert_function(
                builder.module, fnty, f"llvm.x86.avx512.permvar.{name}.512"
            )
            return builder.call(fn, [low, args[2]])

        return idx(table, offset, idx), codegen

    lookup.__doc__ = """``result[l] = table[offset + idx[l]]``: a per-lane table lookup.

    ``table`` has the lane dtype; the entries ``table[offset : offset + E]`` are the table,
    with ``E`` = :data:`LOOKUP_ENTRIES` for the lane width (64 for int8, 32 for int16 and
    int32); every index must be in ``0 .. E-1`` (the permute instructions use the low bits
    only, the portable lowering would read outside the table).
    """
    return lookup


#: The lookup kernels use: a permute where the host has one (see :func:`permute_lowering`).
vlookup = _make_lookup(portable=False)
#: The same lookup lowered portably (scalar loads), whatever the host; tests compare the two.
vlookup_portable = _make_lookup(portable=True)


# --------------------------------------------------------------------------------------------
# Synchronisation (int64 scalars in arrays)
# --------------------------------------------------------------------------------------------


def _int64_array(arr) -> bool:
    return isinstance(arr, types.Array) and arr.dtype == types.int64


@intrinsic
def load_acquire(typingctx, arr, idx):
    """``arr[idx]`` read with acquire ordering (sees every write made before the release)."""
    if not _int64_array(arr):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])
        return builder.load_atomic(ptr, "acquire", 8)

    return types.int64(arr, idx), codegen


@intrinsic
def store_release(typingctx, arr, idx, value):
    """``arr[idx] = value`` with release ordering (publishes every earlier write)."""
    if not _int64_array(arr):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])
        builder.store_atomic(_resize(builder, args[2], 64), ptr, "release", 8)
        return context.get_dummy_value()

    return types.none(arr, idx, value), codegen


@intrinsic
def compare_swap(typingctx, arr, idx, expected, value):
    """Atomically set ``arr[idx] = value`` if it equals ``expected``; True when it did."""
    if not _int64_array(arr):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])
        old = _resize(builder, args[2], 64)
        new = _resize(builder, args[3], 64)
        pair = builder.cmpxchg(ptr, old, new, "acq_rel", "acquire")
        return builder.extract_value(pair, 1)

    return types.boolean(arr, idx, expected, value), codegen


@intrinsic
def relax(typingctx, spins):
    """Spin-wait step: a ``pause`` hint, and ``sched_yield()`` every 1024th spin."""
    if not isinstance(spins, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        if _X86:
            pause = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause"
            )
            builder.call(pause, [])
        count = _resize(builder, args[0], 64)
        low = builder.and_(count, ir.Constant(ir.IntType(64), 1023))
        due = builder.icmp_unsigned("==", low, ir.Constant(ir.IntType(64), 1023))
        with builder.if_then(due, likely=False):
            sched_yield = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.IntType(32), []), "sched_yield"
            )
            builder.call(sched_yield, [])
        return context.get_dummy_value()

    return types.none(spins), codegen
