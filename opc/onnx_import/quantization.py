"""Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, ConvInteger,
QLinearMatMul and QLinearConv, to 2-, 4-, 8- and 16-bit integers, float8 and float4, as opc primitives.

    quantize    q = saturate(round_half_even(x / scale) + zero_point)     (x / scale in x's dtype)
                to float8/float4: x / scale + zero_point rounded once, as Cast with `saturate`
    dequantize  x = (float32(q) - zero_point) * scale                     (then scale's dtype)
    integer products  (a - a_zp) @ (b - b_zp) in float64, exact for any product an int32 holds

Scales and zero points are per tensor, per axis, or per block along an axis (a
block's value repeated over block_size elements), as onnx's reference reads them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import IntegerType, Signedness
from xdsl.ir import Attribute, SSAValue

from opc.dialects import opc as o
from opc.dialects.kinds import element_of, shape_of
from opc.onnx_import.common import F32, F64, Values
from opc.onnx_import.elementwise import onnx_cast
from opc.onnx_import.graph import ELEMENT_TYPES, Node, converter
from opc.onnx_import.nn import convolution

# the integer types opc quantizes to (uint8, int8, uint16, int16, uint4, int4, uint2, int2), with their ranges
RANGES = {2: (0, 255), 3: (-128, 127), 4: (0, 65535), 5: (-32768, 32767), 21: (0, 15), 22: (-8, 7), 25: (0, 3),
          26: (-2, 1)}
# the float types it quantizes to: float8 e4m3fn, e4m3fnuz, e5m2, e5m2fnuz (Cast's `saturate` applies) and float4
FLOAT_TARGETS = (17, 18, 19, 20, 23, 27, 28)  # float8, float4e2m1, float6 (e2m3, e3m2)


def integer_of(element: Attribute) -> int | None:
    """The ONNX element type number of an opc integer type in RANGES, else None."""
    for number in RANGES:
        if ELEMENT_TYPES[number][1] == element:
            return number
    return None


def type_number(element: Attribute) -> int | None:
    """The ONNX element type number of a type opc quantizes to (RANGES, FLOAT_TARGETS), else None."""
    return next((n for n in (*RANGES, *FLOAT_TARGETS) if ELEMENT_TYPES[n][1] == element), None)


def per_axis(node: Node, i: int, shape: Sequence[int], axis: int, block: int) -> SSAValue:
    """Input i (a scale or zero point) made broadcastable to shape: a scalar as is, a vector along
    axis, a block-quantized tensor with each element repeated block times along axis."""
    v = node.input(i)
    vshape = list(shape_of(v))
    if len(vshape) == 0 or int(np.prod(vshape)) == 1:
        return node.e.reshape(v, [])
    node.axis(axis, len(shape))
    if not block:
        if len(vshape) != 1 or vshape[0] != shape[axis]:
            raise node.fail(f"input {i} has shape {vshape}; per axis {axis} it must be [{shape[axis]}]")
        return node.e.reshape(v, [shape[axis] if d == axis else 1 for d in range(len(shape))])
    blocks = -(-shape[axis] // block)
    if len(vshape) != len(shape) or vshape[axis] != blocks or any(
            a != b for d, (a, b) in enumerate(zip(vshape, shape)) if d != axis):
        raise node.fail(f"input {i} has shape {vshape}; blocks of {block} along axis {axis} of {list(shape)} "
                        "need the input's shape with that axis divided into blocks")
    wide = vshape[:axis + 1] + [block] + vshape[axis + 1:]
    v = node.e.broadcast_to(node.e.reshape(v, vshape[:axis + 1] + [1] + vshape[axis + 1:]), wide)
    v = node.e.reshape(v, vshape[:axis] + [blocks * block] + vshape[axis + 1:])
    if blocks * block != shape[axis]:  # the last block is short
        limit = list(shape_of(v))
        limit[axis] = shape[axis]
        v = node.e.value(o.SliceOp(v, [0] * len(shape), limit, [1] * len(shape)))
    return v


def saturate(node: Node, x: SSAValue, target: int) -> SSAValue:
    """x (f32, integral values) clamped to the target integer type's range and cast to it."""
    lo, hi = RANGES[target]
    x = node.e.value(o.MaximumOp(x, node.e.full(lo, x)))
    x = node.e.value(o.MinimumOp(x, node.e.full(hi, x)))
    return node.e.cast(x, ELEMENT_TYPES[target][1])


def quantize(node: Node, x: SSAValue, scale: SSAValue, zero_point: SSAValue | None, target: int) -> SSAValue:
    q = node.e.value(o.RoundOp(node.e.div(x, node.e.cast(scale, element_of(x)))))
    q = node.e.cast(q, F32)
    if zero_point is not None:
        q = node.e.add(q, node.e.cast(zero_point, F32))
    return saturate(node, q, target)


def quantize_float(node: Node, x: SSAValue, scale: SSAValue, zero_point: SSAValue | None, target: int) -> SSAValue:
    """To float8/float4: x / scale (+ zero point, usually 0) rounded once to the type, with Cast's rules."""
    q = node.e.cast(node.e.div(x, node.e.cast(scale, element_of(x))), F32)
    if zero_point is not None:
        q = node.e.add(q, node.e.cast(zero_point, F32))
    return onnx_cast(node, q, ELEMENT_TYPES[target][1])


def quant_axis(node: Node, rank: int) -> tuple[int, int]:
    """(axis, block_size); the axis is checked where a scale is per axis (per_axis), unused otherwise."""
    axis = int(node.attr("axis", 1))
    return (axis + rank if axis < 0 else axis), int(node.attr("block_size", 0))


@converter("QuantizeLinear", since=10)
def quantize_linear(node: Node) -> Values:
    x = node.input(0)
    shape = node.shape(0)
    axis, block = quant_axis(node, len(shape))
    zp = per_axis(node, 2, shape, axis, block) if node.has(2) else None
    target = type_number(element_of(zp)) if zp is not None else int(node.attr("output_dtype", 0) or 2)
    if target not in RANGES and target not in FLOAT_TARGETS:
        raise node.fail("opc quantizes to uint8, int8, uint16, int16, uint4, int4, uint2, int2, float8 (e4m3fn, "
                        "e4m3fnuz, e5m2, e5m2fnuz), float6 (e2m3, e3m2) and float4e2m1 only")
    precision = node.attr("precision")
    if precision:
        x = node.e.cast(x, ELEMENT_TYPES[int(precision)][1])
    scale = per_axis(node, 1, shape, axis, block)
    to = quantize if target in RANGES else quantize_float
    return [to(node, x, scale, zp, target)]


@converter("DequantizeLinear", since=10)
def dequantize_linear(node: Node) -> Values:
    shape = node.shape(0)
    axis, block = quant_axis(node, len(shape))
    x = node.e.cast(node.input(0), F32)
    if node.has(2):
        x = node.e.sub(x, node.e.cast(per_axis(node, 2, shape, axis, block), F32))
    scale = per_axis(node, 1, shape, axis, block)
    y = node.e.mul(x, node.e.cast(scale, F32))
    out = node.attr("output_dtype")
    return [node.e.cast(y, ELEMENT_TYPES[int(out)][1] if out else element_of(scale))]


@converter("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(node: Node) -> Values:
    """uint8 with the scale and zero point of x's range widened to hold 0 (onnx's formulas, in float32)."""
    x = node.input(0)
    axes = list(range(len(node.shape(0))))
    top = node.e.value(o.ReduceMaxOp(x, axes))  # rank 0
    zero = node.e.full(0.0, top)
    hi = node.e.value(o.MaximumOp(top, zero))
    lo = node.e.value(o.MinimumOp(node.e.value(o.ReduceMinOp(x, axes)), zero))
    spread = node.e.sub(hi, lo)
    spread = node.e.select(node.e.value(o.EqualOp(spread, zero)), node.e.full(1.0, zero), spread)
    scale = node.e.div(spread, node.e.full(255.0, zero))
    zp_float = node.e.sub(zero, node.e.div(lo, scale))
    zp_float = node.e.value(o.MinimumOp(node.e.value(o.MaximumOp(zp_float, zero)), node.e.full(255.0, zero)))
    zp_float = node.e.value(o.RoundOp(zp_float))
    q = node.e.add(node.e.value(o.RoundOp(node.e.div(x, scale))), zp_float)
    return [saturate(node, q, 2), scale, saturate(node, zp_float, 2)]


def centered(node: Node, i: int, zp: int | None, axis_of_vector: int | None = None) -> SSAValue:
    """Input i in float64 minus its zero point (input zp); a vector zero point lies along axis_of_vector."""
    v = node.e.cast(node.input(i), F64)
    if zp is None or not node.has(zp):
        return v
    z = node.e.cast(node.input(zp), F64)
    zshape = list(shape_of(z))
    if zshape and int(np.prod(zshape)) > 1 and axis_of_vector is not None:
        rank = len(shape_of(v))
        z = node.e.reshape(z, [zshape[0] if d == axis_of_vector % rank else 1 for d in range(rank)])
    elif int(np.prod(zshape)) == 1:
        z = node.e.reshape(z, [])
    return node.e.sub(v, z)


def requantize(node: Node, acc: SSAValue, scales: Sequence[int], y_scale: int, y_zp: int | None,
               out_like: int, vector_axis: int) -> SSAValue:
    """acc * (s_a * s_b / s_y) + y_zp, rounded and saturated. onnx's order: the factor in the scales'
    dtype, the product in float64 (an int32 times a float promotes to float64 in NumPy)."""
    rank = len(shape_of(acc))

    def scale(i: int) -> SSAValue:
        s = node.input(i)
        shape = list(shape_of(s))
        if int(np.prod(shape)) == 1:
            return node.e.reshape(s, [])
        return node.e.reshape(s, [shape[0] if d == vector_axis % rank else 1 for d in range(rank)])

    factor = node.e.div(node.e.mul(scale(scales[0]), scale(scales[1])), scale(y_scale))
    y = node.e.value(o.RoundOp(node.e.mul(acc, node.e.cast(factor, F64))))
    if y_zp is not None and node.has(y_zp):
        y = node.e.add(y, node.e.reshape(node.e.cast(node.input(y_zp), F64), []))
        target = integer_of(node.element(y_zp))
    else:
        target = integer_of(node.element(out_like))
    if target is None:
        raise node.fail("opc quantizes to uint8, int8, uint16 and int16 only")
    return saturate(node, node.e.cast(y, F32), target)


@converter("MatMulInteger", since=10)
def matmul_integer(node: Node) -> Values:
    a = centered(node, 0, 2, axis_of_vector=-2)
    b = centered(node, 1, 3, axis_of_vector=-1)
    return [node.e.cast(node.e.matmul(a, b), IntegerType(32, Signedness.SIGNLESS))]


@converter("QLinearMatMul", since=10)
def qlinear_matmul(node: Node) -> Values:
    a = centered(node, 0, 2, axis_of_vector=-2)
    b = centered(node, 3, 5, axis_of_vector=-1)
    return [requantize(node, node.e.matmul(a, b), (1, 4), 6, 7, out_like=0, vector_axis=-1)]


@converter("ConvInteger", since=10)
def conv_integer(node: Node) -> Values:
    x = centered(node, 0, 2)
    w = centered(node, 1, 3, axis_of_vector=0)
    return [node.e.cast(convolution(node, x, w), IntegerType(32, Signedness.SIGNLESS))]


@converter("QLinearConv", since=10)
def qlinear_conv(node: Node) -> Values:
    x = centered(node, 0, 2)
    w = centered(node, 3, 5, axis_of_vector=0)
    acc = convolution(node, x, w)
    if node.has(8):
        rank = len(shape_of(acc))
        b = node.e.cast(node.input(8), F64)
        acc = node.e.add(acc, node.e.reshape(b, [shape_of(b)[0], *[1] * (rank - 2)]))
    return [requantize(node, acc, (1, 4), 6, 7, out_like=0, vector_axis=1)]
