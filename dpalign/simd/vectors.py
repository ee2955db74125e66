"""Explicit SIMD vectors for Numba kernels: LLVM ``<lanes x iN>`` values kept in registers.

Plain Numba loops over ``[n, W]`` arrays keep the per-lane DP state in memory and promote
narrow integers, which measured 1.1-2.3 GCUPS on the PaPaRa recurrence here; the same loop
written with these vector values measured 7.8 GCUPS on one AVX-512 core (``shared/probes``).

``VectorOps(np.int16, 32)`` builds one family of ``@intrinsic`` functions for one vector
type. Bind the ones a kernel uses to module-level names (Numba resolves globals at compile
time) and call them inside ``@njit`` code::

    V = VectorOps(np.int16, 32)
    vload, vstore, vadd, vmax = V.load, V.store, V.add, V.max

Arithmetic wraps like C integers except ``adds``/``subs`` (saturating). Comparisons return a
mask vector of the same type (all ones / zero), ready for ``select`` and ``any``.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils  # noqa: F401  (kept for kernels that extend these)
from numba.extending import intrinsic, models, overload, register_model

_MODELS: dict[tuple[int, int], types.Type] = {}


def _vector_numba_type(bits: int, lanes: int) -> types.Type:
    """The Numba type of an LLVM ``<lanes x i{bits}>`` value (one per shape, cached)."""
    key = (bits, lanes)
    if key in _MODELS:
        return _MODELS[key]

    class VecType(types.Type):
        def __init__(self):
            super().__init__(name=f"v{lanes}i{bits}")

    vec_type = VecType()

    @register_model(VecType)
    class VecModel(models.PrimitiveModel):
        def __init__(self, dmm, fe_type):
            super().__init__(dmm, fe_type, ir.VectorType(ir.IntType(bits), lanes))

    _MODELS[key] = vec_type
    return vec_type


class VectorOps:
    """Intrinsics for one vector shape (element dtype, lanes).

    Attributes (each an ``@intrinsic`` usable in ``@njit`` code)
    ----------
    load(arr, idx), store(arr, idx, v)
        Unaligned load/store of ``lanes`` elements starting at flat index ``idx`` of a
        C-contiguous array whose dtype is this element type.
    splat(x)
        All lanes set to the integer scalar ``x``.
    add, sub, adds, subs, max, min, and_, or_
        Lane-wise; ``adds``/``subs`` saturate.
    gt, ge, eq
        Signed comparisons giving a mask vector.
    select(mask, a, b)
        ``a`` where the mask is set, else ``b``.
    any(mask)
        True when any lane of the mask is set.
    hmax(v), hmin(v)
        Horizontal maximum / minimum as an int64 scalar.
    lane(v, k)
        Lane ``k`` as an int64 scalar.
    """

    def __init__(self, dtype, lanes: int) -> None:
        self.dtype = np.dtype(dtype)
        if self.dtype.kind not in "iu":
            raise TypeError("VectorOps supports integer lanes")
        self.lanes = lanes
        self.bits = self.dtype.itemsize * 8
        self.type = _vector_numba_type(self.bits, lanes)
        self._build()

    def _build(self) -> None:
        vt, lanes, bits = self.type, self.lanes, self.bits
        llvm_vec = ir.VectorType(ir.IntType(bits), lanes)
        elem = ir.IntType(bits)
        align = self.dtype.itemsize

        def _binary(build):
            @intrinsic
            def op(typingctx, a, b):
                def codegen(context, builder, sig, args):
                    return build(builder, args[0], args[1])

                return vt(vt, vt), codegen

            return op

        def _call_llvm(name):
            def build(builder, a, b):
                fnty = ir.FunctionType(llvm_vec, [llvm_vec, llvm_vec])
                fn = cgutils.get_or_insert_function(
                    builder.module, fnty, f"llvm.{name}.v{lanes}i{bits}"
                )
                return builder.call(fn, [a, b])

            return build

        def _mask(pred):
            def build(builder, a, b):
                return builder.sext(builder.icmp_signed(pred, a, b), llvm_vec)

            return build

        @intrinsic
        def load(typingctx, arr, idx):
            def codegen(context, builder, sig, args):
                ary = context.make_array(sig.args[0])(context, builder, args[0])
                ptr = builder.gep(ary.data, [args[1]])
                return builder.load(builder.bitcast(ptr, llvm_vec.as_pointer()), align=align)

            return vt(arr, idx), codegen

        @intrinsic
        def store(typingctx, arr, idx, v):
            def codegen(context, builder, sig, args):
                ary = context.make_array(sig.args[0])(context, builder, args[0])
                ptr = builder.gep(ary.data, [args[1]])
                builder.store(args[2], builder.bitcast(ptr, llvm_vec.as_pointer()), align=align)
                return context.get_dummy_value()

            return types.none(arr, idx, v), codegen

        @intrinsic
        def splat(typingctx, x):
            def codegen(context, builder, sig, args):
                value = args[0]
                width = value.type.width
                if width > bits:
                    value = builder.trunc(value, elem)
                elif width < bits:
                    value = builder.sext(value, elem)
                undef = ir.Constant(llvm_vec, ir.Undefined)
                one = builder.insert_element(undef, value, ir.Constant(ir.IntType(32), 0))
                zeros = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
                return builder.shuffle_vector(one, undef, zeros)

            return vt(x), codegen

        @intrinsic
        def select(typingctx, mask, a, b):
            def codegen(context, builder, sig, args):
                cond = builder.icmp_signed("!=", args[0], ir.Constant(llvm_vec, None))
                return builder.select(cond, args[1], args[2])

            return vt(vt, vt, vt), codegen

        def _reduce(name):
            @intrinsic
            def op(typingctx, v):
                def codegen(context, builder, sig, args):
                    fnty = ir.FunctionType(elem, [llvm_vec])
                    fn = cgutils.get_or_insert_function(
                        builder.module, fnty, f"llvm.vector.reduce.{name}.v{lanes}i{bits}"
                    )
                    return builder.sext(builder.call(fn, [args[0]]), ir.IntType(64))

                return types.int64(vt), codegen

            return op

        @intrinsic
        def lane(typingctx, v, k):
            def codegen(context, builder, sig, args):
                value = builder.extract_element(args[0], args[1])
                return builder.sext(value, ir.IntType(64))

            return types.int64(vt, k), codegen

        @intrinsic
        def any_(typingctx, mask):
            def codegen(context, builder, sig, args):
                fnty = ir.FunctionType(elem, [llvm_vec])
                fn = cgutils.get_or_insert_function(
                    builder.module, fnty, f"llvm.vector.reduce.or.v{lanes}i{bits}"
                )
                reduced = builder.call(fn, [args[0]])
                return builder.icmp_signed("!=", reduced, ir.Constant(elem, 0))

            return types.boolean(vt), codegen

        self.load, self.store, self.splat, self.select, self.lane = load, store, splat, select, lane
        self.any = any_
        self.add = _binary(lambda b, x, y: b.add(x, y))
        self.sub = _binary(lambda b, x, y: b.sub(x, y))
        self.and_ = _binary(lambda b, x, y: b.and_(x, y))
        self.or_ = _binary(lambda b, x, y: b.or_(x, y))
        self.max = _binary(_call_llvm("smax"))
        self.min = _binary(_call_llvm("smin"))
        self.adds = _binary(_call_llvm("sadd.sat"))
        self.subs = _binary(_call_llvm("ssub.sat"))
        self.gt = _binary(_mask(">"))
        self.ge = _binary(_mask(">="))
        self.eq = _binary(_mask("=="))
        self.hmax = _reduce("smax")
        self.hmin = _reduce("smin")


#: The 32-lane int16 and int32 ops behind the width-generic functions below.
_GENERIC_OPS = {16: VectorOps(np.int16, 32), 32: VectorOps(np.int32, 32)}

# --------------------------------------------------------------------------------------------
# Width-generic vector operations (32 lanes): one kernel source serves <32 x i16> and
# <32 x i32>; Numba
# specialises on the arrays' dtype and these overloads pick the matching VectorOps intrinsics
# (LLVM inlines them: the inner loop is plain vpaddw/vpmaxsw on zmm registers).
# --------------------------------------------------------------------------------------------


def _ops_for_array(arr):
    for bits, ops in _GENERIC_OPS.items():
        if arr.dtype == types.int16 and bits == 16 or arr.dtype == types.int32 and bits == 32:
            return ops
    return None


def _ops_for_vector(vec):
    for ops in _GENERIC_OPS.values():
        if vec == ops.type:
            return ops
    return None


def vload(arr, idx):
    """``LANES`` elements of ``arr`` from flat index ``idx`` as one vector."""


def vstore(arr, idx, vec):
    """Store one vector at flat index ``idx`` of ``arr``."""


def vsplat(x, arr):
    """All lanes set to ``x``, as the vector type of ``arr``'s dtype."""


def vadd(a, b):
    """Lane-wise a + b (wrapping)."""


def vsub(a, b):
    """Lane-wise a - b (wrapping)."""


def vmax(a, b):
    """Lane-wise signed maximum."""


def vlane(vec, k):
    """Lane k as an int64."""


def vand(a, b):
    """Lane-wise bitwise and."""


def vor(a, b):
    """Lane-wise bitwise or."""


def vgt(a, b):
    """Mask: a > b (signed)."""


def vge(a, b):
    """Mask: a >= b (signed)."""


def veq(a, b):
    """Mask: a == b."""


def vselect(mask, a, b):
    """``a`` where the mask is set, else ``b``."""


@overload(vload)
def _vload(arr, idx):
    load = _ops_for_array(arr).load
    return lambda arr, idx: load(arr, idx)


@overload(vstore)
def _vstore(arr, idx, vec):
    store = _ops_for_array(arr).store
    return lambda arr, idx, vec: store(arr, idx, vec)


@overload(vsplat)
def _vsplat(x, arr):
    splat = _ops_for_array(arr).splat
    return lambda x, arr: splat(x)


@overload(vadd)
def _vadd(a, b):
    add = _ops_for_vector(a).add
    return lambda a, b: add(a, b)


@overload(vsub)
def _vsub(a, b):
    sub = _ops_for_vector(a).sub
    return lambda a, b: sub(a, b)


@overload(vmax)
def _vmax(a, b):
    vmax_ = _ops_for_vector(a).max
    return lambda a, b: vmax_(a, b)


@overload(vlane)
def _vlane(vec, k):
    lane = _ops_for_vector(vec).lane
    return lambda vec, k: lane(vec, k)


def _binary_overload(stub, name):
    @overload(stub)
    def _impl(a, b):
        op = getattr(_ops_for_vector(a), name)
        return lambda a, b: op(a, b)


for _stub, _name in ((vand, "and_"), (vor, "or_"), (vgt, "gt"), (vge, "ge"), (veq, "eq")):
    _binary_overload(_stub, _name)


@overload(vselect)
def _vselect(mask, a, b):
    select = _ops_for_vector(a).select
    return lambda mask, a, b: select(mask, a, b)


@intrinsic
def vstore_u8(typingctx, arr, idx, vec):
    """Store the low byte of every lane at flat index ``idx`` of a uint8 array."""

    def codegen(context, builder, sig, args):
        narrow = ir.VectorType(ir.IntType(8), 32)
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])
        value = builder.trunc(args[2], narrow)
        builder.store(value, builder.bitcast(ptr, narrow.as_pointer()), align=1)
        return context.get_dummy_value()

    return types.none(arr, idx, vec), codegen
