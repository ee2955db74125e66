"""512-bit integer vectors for Numba kernels whose lane type follows the array dtype.

``simd/vectors.py`` builds one family of intrinsics per vector shape, so a kernel written with
it is fixed to one integer width. The long-pair kernels must run in int32 (16 lanes) and, when
the score bounds need it, int64 (8 lanes) from one source; these intrinsics are generic: the
vector type is chosen from the dtype of the array a vector is loaded from (``512 // bits``
lanes), so Numba compiles one specialisation per dtype of the same kernel.

All operations are lane-wise and wrap like C integers; comparisons give a mask vector (all ones
or zero) for :func:`select` and :func:`any_`.

Also here: the two memory-ordering primitives the wavefront workers synchronise with
(:func:`load_acquire`, :func:`store_release` on int64 arrays) and :func:`relax`, a spin-wait
hint that yields the CPU after a while so that a waiting thread does not starve the one it
waits for on a loaded machine.
"""

from __future__ import annotations

import platform

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

VECTOR_BITS = 512
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


class WideType(types.Type):
    """The Numba type of an LLVM ``<lanes x i{bits}>`` value."""

    def __init__(self, bits: int) -> None:
        self.bits = bits
        self.lanes = VECTOR_BITS // bits
        super().__init__(name=f"wide{self.lanes}x{bits}")


@register_model(WideType)
class _WideModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, ir.VectorType(ir.IntType(fe_type.bits), fe_type.lanes))


_TYPES: dict[int, WideType] = {}


def _wide(bits: int) -> WideType:
    if bits not in _TYPES:
        _TYPES[bits] = WideType(bits)
    return _TYPES[bits]


def _array_vector(arr) -> WideType:
    if not isinstance(arr, types.Array) or not isinstance(arr.dtype, types.Integer):
        raise TypeError(f"wide vectors load from integer arrays, not {arr}")
    return _wide(arr.dtype.bitwidth)


def _llvm(vt: WideType) -> ir.VectorType:
    return ir.VectorType(ir.IntType(vt.bits), vt.lanes)


def _resize(builder, value, bits: int):
    width = value.type.width
    if width > bits:
        return builder.trunc(value, ir.IntType(bits))
    if width < bits:
        return builder.sext(value, ir.IntType(bits))
    return value


@intrinsic
def load(typingctx, arr, idx):
    """The ``lanes`` elements of C-contiguous ``arr`` (any dimension) from flat index ``idx``."""
    vt = _array_vector(arr)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])
        return builder.load(builder.bitcast(ptr, _llvm(vt).as_pointer()), align=vt.bits // 8)

    return vt(arr, idx), codegen


@intrinsic
def store(typingctx, arr, idx, v):
    """Store vector ``v`` at flat index ``idx`` of ``arr``."""
    vt = _array_vector(arr)
    if v != vt:
        raise TypeError(f"cannot store {v} into {arr}")

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])
        builder.store(args[2], builder.bitcast(ptr, _llvm(vt).as_pointer()), align=vt.bits // 8)
        return context.get_dummy_value()

    return types.none(arr, idx, v), codegen


@intrinsic
def splat(typingctx, like, x):
    """Every lane set to the integer ``x``; the lane type is that of array ``like``."""
    vt = _array_vector(like)

    def codegen(context, builder, sig, args):
        value = _resize(builder, args[1], vt.bits)
        llvm_vec = _llvm(vt)
        undef = ir.Constant(llvm_vec, ir.Undefined)
        one = builder.insert_element(undef, value, ir.Constant(ir.IntType(32), 0))
        zeros = ir.Constant(ir.VectorType(ir.IntType(32), vt.lanes), [0] * vt.lanes)
        return builder.shuffle_vector(one, undef, zeros)

    return vt(like, x), codegen


def _binary(build):
    @intrinsic
    def op(typingctx, a, b):
        if not isinstance(a, WideType) or a != b:
            return None

        def codegen(context, builder, sig, args):
            return build(builder, sig.args[0], args[0], args[1])

        return a(a, b), codegen

    return op


def _llvm_call(name):
    def build(builder, vt, x, y):
        llvm_vec = _llvm(vt)
        fnty = ir.FunctionType(llvm_vec, [llvm_vec, llvm_vec])
        fn = cgutils.get_or_insert_function(
            builder.module, fnty, f"llvm.{name}.v{vt.lanes}i{vt.bits}"
        )
        return builder.call(fn, [x, y])

    return build


def _mask(pred):
    def build(builder, vt, x, y):
        return builder.sext(builder.icmp_signed(pred, x, y), _llvm(vt))

    return build


add = _binary(lambda b, vt, x, y: b.add(x, y))
sub = _binary(lambda b, vt, x, y: b.sub(x, y))
adds = _binary(_llvm_call("sadd.sat"))
subs = _binary(_llvm_call("ssub.sat"))
max_ = _binary(_llvm_call("smax"))
gt = _binary(_mask(">"))


@intrinsic
def select(typingctx, mask, a, b):
    """``a`` where ``mask`` is set, else ``b``."""
    if not isinstance(a, WideType) or not (mask == a == b):
        return None

    def codegen(context, builder, sig, args):
        cond = builder.icmp_signed("!=", args[0], ir.Constant(args[0].type, None))
        return builder.select(cond, args[1], args[2])

    return a(mask, a, b), codegen


@intrinsic
def any_(typingctx, mask):
    """True when any lane of ``mask`` is set."""
    if not isinstance(mask, WideType):
        return None

    def codegen(context, builder, sig, args):
        vt = sig.args[0]
        cond = builder.icmp_signed("!=", args[0], ir.Constant(_llvm(vt), None))
        bits = builder.bitcast(cond, ir.IntType(vt.lanes))
        return builder.icmp_unsigned("!=", bits, ir.Constant(ir.IntType(vt.lanes), 0))

    return types.boolean(mask), codegen


@intrinsic
def shift_in(typingctx, v, x):
    """Lanes moved up by one (lane k gets lane k-1); lane 0 gets the integer ``x``."""
    if not isinstance(v, WideType):
        return None

    def codegen(context, builder, sig, args):
        vt = sig.args[0]
        llvm_vec = _llvm(vt)
        value = _resize(builder, args[1], vt.bits)
        first = builder.insert_element(
            ir.Constant(llvm_vec, ir.Undefined), value, ir.Constant(ir.IntType(32), 0)
        )
        # shufflevector index lanes.. picks from the second operand: lane 0 <- first[0]
        mask = [vt.lanes] + list(range(vt.lanes - 1))
        return builder.shuffle_vector(
            args[0], first, ir.Constant(ir.VectorType(ir.IntType(32), vt.lanes), mask)
        )

    return v(v, x), codegen


@intrinsic
def shift_lanes(typingctx, v, fill, n):
    """Lanes moved up by the constant ``n`` (lane k gets lane k-n); the low lanes from ``fill``."""
    if not isinstance(v, WideType) or fill != v or not isinstance(n, types.IntegerLiteral):
        return None
    count = n.literal_value

    def codegen(context, builder, sig, args):
        vt = sig.args[0]
        mask = [vt.lanes + k if k < count else k - count for k in range(vt.lanes)]
        return builder.shuffle_vector(
            args[0], args[1], ir.Constant(ir.VectorType(ir.IntType(32), vt.lanes), mask)
        )

    return v(v, fill, n), codegen


@intrinsic
def hmax(typingctx, v):
    """The largest lane of ``v`` as an int64."""
    if not isinstance(v, WideType):
        return None

    def codegen(context, builder, sig, args):
        vt = sig.args[0]
        fnty = ir.FunctionType(ir.IntType(vt.bits), [_llvm(vt)])
        fn = cgutils.get_or_insert_function(
            builder.module, fnty, f"llvm.vector.reduce.smax.v{vt.lanes}i{vt.bits}"
        )
        return _resize(builder, builder.call(fn, [args[0]]), 64)

    return types.int64(v), codegen


@intrinsic
def lane(typingctx, v, k):
    """Lane ``k`` of ``v`` as an int64."""
    if not isinstance(v, WideType):
        return None

    def codegen(context, builder, sig, args):
        value = builder.extract_element(args[0], args[1])
        return _resize(builder, value, 64)

    return types.int64(v, k), codegen


# --------------------------------------------------------------------------------------------
# synchronisation
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
