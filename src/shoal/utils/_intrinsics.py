"""LLVM operations numba does not expose, for the row kernels.

- :func:`prefetch_row`: a software prefetch of one row of a 2-D array, for kernels that read
  rows at random (an in-neighbour's features): issued a few edges ahead, the row's cache lines
  arrive while earlier edges are added, instead of each edge waiting for memory in turn
  (docs/measurements.md#pulling-rows-held-in-memory).
- :func:`popcount`: the set bits of a 64-bit word (the CPU's ``popcnt`` where it has one).
- :func:`half_to_float` / :func:`bfloat_to_float`: a float16 / bfloat16 (its ``uint16`` bits)
  as a float32, exactly (IEEE conversion: subnormals and infinities included; a signalling NaN
  comes out quiet); numba has no float16 type, and these compile to the CPU's vector
  conversions in a loop.
"""

from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["bfloat_to_float", "half_to_float", "popcount", "prefetch_at", "prefetch_row"]

#: the intrinsic's name: LLVM 15 on has opaque pointers (``p0``), LLVM 14 typed ones
_NAME = "llvm.prefetch.p0" if llvm.llvm_version_info[0] >= 15 else "llvm.prefetch.p0i8"
#: lines of a row prefetched at most (16 x 64 B: rows up to 1 KiB; longer rows stream)
_MAX_LINES = 16


@intrinsic
def prefetch_row(typingctx, arr, row):
    """Prefetch (for reading, into every cache level) the first :data:`_MAX_LINES` cache
    lines of row ``row`` of the C-contiguous 2-D array ``arr``; no bounds check (the caller
    passes a valid row)."""
    if not isinstance(arr, types.Array) or arr.ndim != 2 or not isinstance(row, types.Integer):
        return None
    sig = types.void(arr, row)

    def codegen(context, builder, signature, args):
        aryty, rowty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        shape = cgutils.unpack_tuple(builder, ary.shape)
        strides = cgutils.unpack_tuple(builder, ary.strides)
        r = context.cast(builder, args[1], rowty, types.intp)
        zero = context.get_constant(types.intp, 0)
        ptr = cgutils.get_item_pointer2(
            context, builder, ary.data, shape, strides, aryty.layout, [r, zero], wraparound=False
        )
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _NAME)
        base = builder.bitcast(ptr, i8p)
        item = context.get_abi_sizeof(context.get_data_type(aryty.dtype))
        nbytes = builder.mul(shape[1], context.get_constant(types.intp, item))
        for k in range(_MAX_LINES):
            off = context.get_constant(types.intp, 64 * k)
            with builder.if_then(builder.icmp_signed("<", off, nbytes)):
                # read (0), highest locality (3), data cache (1)
                args3 = [ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)]
                builder.call(fn, [builder.gep(base, [off]), *args3])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def prefetch_at(typingctx, arr, i):
    """Prefetch the cache line holding item ``i`` of the 1-D array ``arr`` (no bounds
    check)."""
    if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(i, types.Integer):
        return None
    sig = types.void(arr, i)

    def codegen(context, builder, signature, args):
        aryty, ity = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        shape = cgutils.unpack_tuple(builder, ary.shape)
        strides = cgutils.unpack_tuple(builder, ary.strides)
        k = context.cast(builder, args[1], ity, types.intp)
        ptr = cgutils.get_item_pointer2(
            context, builder, ary.data, shape, strides, aryty.layout, [k], wraparound=False
        )
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), _NAME
        )
        args3 = [ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)]
        builder.call(fn, [builder.bitcast(ptr, i8p), *args3])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def half_to_float(typingctx, bits):
    """The float16 whose bits are ``bits`` (a uint16) as a float32."""
    if not isinstance(bits, types.Integer) or bits.bitwidth != 16:
        return None
    sig = types.float32(bits)

    def codegen(context, builder, signature, args):
        h = builder.bitcast(args[0], ir.HalfType())
        return builder.fpext(h, ir.FloatType())

    return sig, codegen


@intrinsic
def bfloat_to_float(typingctx, bits):
    """The bfloat16 whose bits are ``bits`` (a uint16) as a float32 (its bits shifted up)."""
    if not isinstance(bits, types.Integer) or bits.bitwidth != 16:
        return None
    sig = types.float32(bits)

    def codegen(context, builder, signature, args):
        wide = builder.zext(args[0], ir.IntType(32))
        return builder.bitcast(builder.shl(wide, ir.Constant(ir.IntType(32), 16)), ir.FloatType())

    return sig, codegen


@intrinsic
def popcount(typingctx, word):
    """The number of set bits of the 64-bit integer ``word`` (an int64)."""
    if not isinstance(word, types.Integer) or word.bitwidth != 64:
        return None
    sig = types.int64(word)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(i64, [i64]), "llvm.ctpop.i64"
        )
        return builder.call(fn, [args[0]])

    return sig, codegen
