"""512-bit LLVM vectors whose lane type follows the array's dtype: one kernel, three widths.

:class:`~dpalign.simd.vectors.VectorOps` builds one family of intrinsics per vector shape.
The pairwise kernels run the same recurrence on int8 (64 lanes), int16 (32 lanes) and int32
(16 lanes) after saturation, so these intrinsics are *polymorphic*: ``vload(arr, i)`` gives a
``<64 x i8>`` for an int8 array and a ``<32 x i16>`` for an int16 array, and every other
operation follows its arguments. A kernel written once with them compiles to one
specialisation per dtype through Numba's ordinary dispatch, and stays cacheable (the
intrinsics are module-level globals, not closure variables).

:func:`vlookup` turns a small table in memory into a vector indexed per lane: one AVX-512
permute (``vpermb`` with VBMI for int8, ``vpermw`` for int16, ``vpermi2d`` for int32) where
the host has it, else a portable gather built from scalar loads. Which lowering is used is
decided when the kernel is compiled (Numba caches per host CPU).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .vectors import _vector_numba_type

VECTOR_BITS = 512
#: Lane dtypes the kernels use and their lane counts in one 512-bit vector.
LANES = {np.dtype(np.int8): 64, np.dtype(np.int16): 32, np.dtype(np.int32): 16}
#: Entries a :func:`vlookup` table may hold for each lane width.
LOOKUP_ENTRIES = {8: 64, 16: 32, 32: 32}

_INT_TYPES = {types.int8: 8, types.int16: 16, types.int32: 32}
_VEC_TYPES = {bits: _vector_numba_type(bits, VECTOR_BITS // bits) for bits in (8, 16, 32)}
_VEC_BITS = {vt: bits for bits, vt in _VEC_TYPES.items()}


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


def _array_vec(arr):
    """The vector type for an array argument (None when its dtype is not a lane type)."""
    if isinstance(arr, types.Array) and arr.dtype in _INT_TYPES:
        return _VEC_TYPES[_INT_TYPES[arr.dtype]]
    return None


def _llvm_vec(vt) -> ir.VectorType:
    bits = _VEC_BITS[vt]
    return ir.VectorType(ir.IntType(bits), VECTOR_BITS // bits)


def _data_pointer(context, builder, arr_type, arr, idx, vec):
    ary = context.make_array(arr_type)(context, builder, arr)
    ptr = builder.gep(ary.data, [idx])
    return builder.bitcast(ptr, vec.as_pointer())


@intrinsic
def vload(typingctx, arr, idx):
    """Load one vector from flat index ``idx`` of a C-contiguous array (unaligned)."""
    vt = _array_vec(arr)
    if vt is None or not isinstance(idx, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        vec = _llvm_vec(vt)
        ptr = _data_pointer(context, builder, sig.args[0], args[0], args[1], vec)
        return builder.load(ptr, align=vec.element.width // 8)

    return vt(arr, idx), codegen


@intrinsic
def vstore(typingctx, arr, idx, v):
    """Store vector ``v`` at flat index ``idx`` of a C-contiguous array of the same lane type."""
    vt = _array_vec(arr)
    if vt is None or v != vt:
        return None

    def codegen(context, builder, sig, args):
        vec = _llvm_vec(vt)
        ptr = _data_pointer(context, builder, sig.args[0], args[0], args[1], vec)
        builder.store(args[2], ptr, align=vec.element.width // 8)
        return context.get_dummy_value()

    return types.none(arr, idx, v), codegen


@intrinsic
def vsplat(typingctx, like, x):
    """All lanes set to integer ``x``; the lane type is that of array ``like``."""
    vt = _array_vec(like)
    if vt is None or not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        vec = _llvm_vec(vt)
        value = args[1]
        if value.type.width > vec.element.width:
            value = builder.trunc(value, vec.element)
        elif value.type.width < vec.element.width:
            value = builder.sext(value, vec.element)
        undef = ir.Constant(vec, ir.Undefined)
        one = builder.insert_element(undef, value, ir.Constant(ir.IntType(32), 0))
        zeros = ir.Constant(ir.VectorType(ir.IntType(32), vec.count), [0] * vec.count)
        return builder.shuffle_vector(one, undef, zeros)

    return vt(like, x), codegen


def _binary(build):
    @intrinsic
    def op(typingctx, a, b):
        if a not in _VEC_BITS or b != a:
            return None

        def codegen(context, builder, sig, args):
            return build(builder, args[0], args[1])

        return a(a, b), codegen

    return op


def _llvm_binary(name):
    def build(builder, a, b):
        vec = a.type
        fnty = ir.FunctionType(vec, [vec, vec])
        fn = cgutils.get_or_insert_function(
            builder.module, fnty, f"llvm.{name}.v{vec.count}i{vec.element.width}"
        )
        return builder.call(fn, [a, b])

    return build


def _mask(pred):
    def build(builder, a, b):
        return builder.sext(builder.icmp_signed(pred, a, b), a.type)

    return build


vadd = _binary(lambda b, x, y: b.add(x, y))
vsub = _binary(lambda b, x, y: b.sub(x, y))
vand = _binary(lambda b, x, y: b.and_(x, y))
vor = _binary(lambda b, x, y: b.or_(x, y))
vmax = _binary(_llvm_binary("smax"))
vmin = _binary(_llvm_binary("smin"))
vadds = _binary(_llvm_binary("sadd.sat"))
vsubs = _binary(_llvm_binary("ssub.sat"))
vgt = _binary(_mask(">"))
vge = _binary(_mask(">="))
veq = _binary(_mask("=="))
vne = _binary(_mask("!="))


@intrinsic
def vselect(typingctx, mask, a, b):
    """``a`` where ``mask`` (a comparison result) is set, else ``b``."""
    if mask not in _VEC_BITS or a != mask or b != mask:
        return None

    def codegen(context, builder, sig, args):
        cond = builder.icmp_signed("!=", args[0], ir.Constant(args[0].type, None))
        return builder.select(cond, args[1], args[2])

    return mask(mask, a, b), codegen


@intrinsic
def vany(typingctx, mask):
    """True when any lane of a mask is set."""
    if mask not in _VEC_BITS:
        return None

    def codegen(context, builder, sig, args):
        vec = args[0].type
        fnty = ir.FunctionType(vec.element, [vec])
        fn = cgutils.get_or_insert_function(
            builder.module, fnty, f"llvm.vector.reduce.or.v{vec.count}i{vec.element.width}"
        )
        return builder.icmp_signed("!=", builder.call(fn, [args[0]]), ir.Constant(vec.element, 0))

    return types.boolean(mask), codegen


@intrinsic
def vhmax(typingctx, v):
    """Horizontal maximum as an int64."""
    if v not in _VEC_BITS:
        return None

    def codegen(context, builder, sig, args):
        vec = args[0].type
        fnty = ir.FunctionType(vec.element, [vec])
        fn = cgutils.get_or_insert_function(
            builder.module, fnty, f"llvm.vector.reduce.smax.v{vec.count}i{vec.element.width}"
        )
        return builder.sext(builder.call(fn, [args[0]]), ir.IntType(64))

    return types.int64(v), codegen


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
        vt = _array_vec(table)
        if vt is None or idx != vt or not isinstance(offset, types.Integer):
            return None
        bits = _VEC_BITS[vt]
        lowering = "portable" if portable else permute_lowering(bits)

        def codegen(context, builder, sig, args):
            vec = _llvm_vec(vt)
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

        return vt(table, offset, idx), codegen

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


@intrinsic
def vshift_up(typingctx, v, fill):
    """Lanes moved up by one: ``result[0] = fill[0]``, ``result[k] = v[k - 1]``."""
    if v not in _VEC_BITS or fill != v:
        return None

    def codegen(context, builder, sig, args):
        count = args[0].type.count
        mask = ir.Constant(ir.VectorType(ir.IntType(32), count), [count] + list(range(count - 1)))
        return builder.shuffle_vector(args[0], args[1], mask)

    return v(v, fill), codegen
