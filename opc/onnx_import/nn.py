"""Converters of the ONNX ops of convolutional networks (issue 19): Conv,
ConvTranspose, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool,
BatchNormalization, InstanceNormalization, GroupNormalization. They map onto
opc's conv / pool / norm ops; `auto_pad` becomes explicit pads here (ONNX's
formulas), a bias becomes a per-channel `add`. What opc cannot express (a bad
stride, a group that does not divide the channels) fails in the op's verifier,
whose message the importer prefixes with the node."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from xdsl.dialects.builtin import IntegerType, f32
from xdsl.ir import Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from opc.dialects import opc as o
from opc.onnx_import.graph import Node, converter

Values = list[SSAValue | np.ndarray]


def built(node: Node, name: str, make: Callable[[], Operation]) -> Operation:
    """make(), emitted; a shape its constructor rejects fails naming the node, as the emitter's verifier does."""
    try:
        op = make()
    except VerifyException as err:
        raise node.fail(f"cannot express it in opc: opc.{name}: {str(err).splitlines()[0]}") from None
    node.e.emit(op)
    return op


def ints(node: Node, name: str, count: int, default: int) -> list[int]:
    v = node.attr(name)
    return [default] * count if v is None else [int(a) for a in v]


def same_pads(node: Node, inp: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
              dilations: Sequence[int]) -> list[int]:
    """Explicit pads (begins, then ends) for auto_pad: SAME_UPPER / SAME_LOWER keep ceil(i / s) outputs
    (the odd pad at the end / the beginning), VALID none, NOTSET the `pads` attribute."""
    r = len(inp)
    mode = node.attr("auto_pad", "NOTSET")
    if mode == "NOTSET":
        return ints(node, "pads", 2 * r, 0)
    if mode == "VALID":
        return [0] * (2 * r)
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        raise node.fail(f"auto_pad '{mode}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    begins, ends = [], []
    for i, k, s, d in zip(inp, kernel, strides, dilations):
        out = -(-i // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - i)
        small = total // 2
        begins.append(small if mode == "SAME_UPPER" else total - small)
        ends.append(total - begins[-1])
    return begins + ends


def with_bias(node: Node, y: SSAValue, i: int) -> SSAValue:
    """y + B (input i, [C]) broadcast per channel, if the node has one."""
    if not node.has(i):
        return y
    b = node.input(i)
    rank = len(y.type.get_shape())  # type: ignore[attr-defined]
    return node.e.add(y, node.e.reshape(b, [b.type.get_shape()[0], *[1] * (rank - 2)]))  # type: ignore[attr-defined]


def spatial(node: Node, i: int = 0) -> tuple[int, ...]:
    shape = node.shape(i)
    if len(shape) < 3:
        raise node.fail(f"input {i} must be [N, C, *spatial] with 1 or more spatial dims, got shape {list(shape)}")
    return shape[2:]


@converter("Conv")
def conv(node: Node) -> Values:
    spatial(node)
    return [with_bias(node, convolution(node, node.input(0), node.input(1)), 2)]


def convolution(node: Node, x: SSAValue, w: SSAValue) -> SSAValue:
    """x conv w with the node's strides, dilations, pads (or auto_pad) and group (Conv and its integer kin)."""
    inp, kernel = x.type.get_shape()[2:], w.type.get_shape()[2:]  # type: ignore[attr-defined]
    r = len(inp)
    strides, dilations = ints(node, "strides", r, 1), ints(node, "dilations", r, 1)
    pads = same_pads(node, inp, kernel, strides, dilations)
    group = int(node.attr("group", 1))
    return built(node, "conv", lambda: o.ConvOp.of(x, w, strides, dilations, pads, group)).results[0]


@converter("ConvTranspose")
def conv_transpose(node: Node) -> Values:
    """ONNX's pads, or pads from output_shape / SAME (total = s (i - 1) + output_padding + (k - 1) d + 1 - out)."""
    inp, kernel = spatial(node), node.shape(1)[2:]
    r = len(inp)
    strides, dilations = ints(node, "strides", r, 1), ints(node, "dilations", r, 1)
    extra = ints(node, "output_padding", r, 0)
    shape = node.attr("output_shape")
    mode = node.attr("auto_pad", "NOTSET")
    if shape is None and mode in ("SAME_UPPER", "SAME_LOWER"):
        shape = [i * s for i, s in zip(inp, strides)]
    if shape is not None:
        shape = list(shape)[-r:]
        begins, ends = [], []
        for i, k, s, d, p, want in zip(inp, kernel, strides, dilations, extra, shape):
            total = s * (i - 1) + p + (k - 1) * d + 1 - want
            upper = mode == "SAME_UPPER"  # ONNX: the larger half begins, except for SAME_UPPER
            begins.append(max(total // 2 if upper else total - total // 2, 0))
            ends.append(total - begins[-1])  # a larger output grows at the end, as onnxruntime's does
        pads = begins + ends
    else:
        pads = [0] * (2 * r) if mode == "VALID" else ints(node, "pads", 2 * r, 0)
    grow = [max(-p, 0) for p in pads[r:]]  # an output_shape larger than the input gives: zeros after it
    pads = [max(p, 0) for p in pads]
    x, w, group = node.input(0), node.input(1), int(node.attr("group", 1))
    y = built(node, "conv_transpose", lambda: o.ConvTransposeOp.of(x, w, strides, dilations, pads, group,
                                                                   extra if any(extra) else None)).results[0]
    return [with_bias(node, zeros_after(node, y, grow), 2)]


def zeros_after(node: Node, y: SSAValue, counts: Sequence[int]) -> SSAValue:
    """y with counts[d] zeros after spatial dim d."""
    for d, count in enumerate(counts):
        if count:
            shape = list(y.type.get_shape())  # type: ignore[attr-defined]
            shape[d + 2] = count
            y = node.e.value(o.ConcatOp([y, node.e.full(0.0, o.tensor(shape, y.type.element_type))], d + 2))  # type: ignore[attr-defined]
    return y


def pool_props(node: Node, average: bool) -> dict:
    inp = spatial(node)
    r = len(inp)
    kernel = node.attr("kernel_shape")
    if kernel is None:
        raise node.fail("kernel_shape is required")
    kernel = [int(k) for k in kernel]
    strides, dilations = ints(node, "strides", r, 1), ints(node, "dilations", r, 1)
    props = {"kernel": o.i64_array(kernel), "strides": o.i64_array(strides), "dilations": o.i64_array(dilations),
             "pads": o.i64_array(same_pads(node, inp, kernel, strides, dilations)),
             "ceil_mode": o.BoolAttr.from_bool(bool(node.attr("ceil_mode", 0)))}
    if average:
        props["count_include_pad"] = o.BoolAttr.from_bool(bool(node.attr("count_include_pad", 0)))
    return props


@converter("MaxPool")
def max_pool(node: Node) -> Values:
    x, props = node.input(0), pool_props(node, False)
    elem = x.type.element_type  # type: ignore[attr-defined]
    small_int = isinstance(elem, IntegerType) and 1 < elem.width.data <= 16
    if small_int:  # 8- and 16-bit integers pool in float32, where they are exact
        x = node.e.cast(x, f32)
    op = built(node, "max_pool", lambda: o.MaxPoolOp(x, props))
    values, indices = op.results
    if int(node.attr("storage_order", 0)):
        indices = column_major(node, indices, spatial(node))
    return [node.e.cast(values, elem) if small_int else values, indices]


def column_major(node: Node, indices: SSAValue, inp: Sequence[int]) -> SSAValue:
    """storage_order 1: each row-major flat index (n, c, *spatial) re-flattened with the spatial axes in
    column-major order (the first varies fastest), as ONNX's reference computes it."""
    e = node.e

    def const(v: int) -> SSAValue:
        return e.constant(np.array(v, np.int64))

    step = int(np.prod(inp))
    out = e.mul(e.div(indices, const(step)), const(step))
    rest = e.sub(indices, out)  # the spatial offset, peeled axis by axis from the last
    for k in reversed(range(len(inp))):
        quotient = e.div(rest, const(inp[k]))
        coord = e.sub(rest, e.mul(quotient, const(inp[k])))
        out = e.add(out, e.mul(coord, const(int(np.prod(inp[:k])))))
        rest = quotient
    return out


@converter("AveragePool")
def average_pool(node: Node) -> Values:
    x, props = node.input(0), pool_props(node, True)
    return [built(node, "avg_pool", lambda: o.AvgPoolOp(x, props)).results[0]]


@converter("GlobalAveragePool", "GlobalMaxPool")
def global_pool(node: Node) -> Values:
    axes = list(range(2, 2 + len(spatial(node))))
    op = o.ReduceMeanOp if node.op_type == "GlobalAveragePool" else o.ReduceMaxOp
    return [node.e.value(op(node.input(0), axes, True))]


def like_x(node: Node, i: int) -> SSAValue:
    """Input i in x's element type (ONNX lets the statistics have their own)."""
    v = node.input(i)
    el = node.element(0)
    return v if v.type.element_type == el else node.e.cast(v, el)  # type: ignore[attr-defined]


@converter("BatchNormalization")
def batch_norm(node: Node) -> Values:
    """Inference: Y. training_mode = 1 (opset 14 on): Y, running_mean, running_var."""
    training = bool(node.attr("training_mode", 0))
    if int(node.attr("spatial", 1)) != 1:
        raise node.fail("spatial = 0 (statistics per element) is not supported")
    op = o.BatchNormOp(node.input(0), *(like_x(node, i) for i in range(1, 5)), float(node.attr("epsilon", 1e-5)),
                       float(node.attr("momentum", 0.9)), training)
    node.e.emit(op)
    if not training:
        return [op.y]
    outs = [op.y, op.stats[0], op.stats[1]]
    return [v if i == 0 else narrow_to(node, v, i + 2) for i, v in enumerate(outs)]


def narrow_to(node: Node, v: SSAValue, i: int) -> SSAValue:
    """v cast to the element type of node input i (running statistics keep the statistics' type)."""
    el = node.element(i)
    return v if v.type.element_type == el else node.e.cast(v, el)  # type: ignore[attr-defined]


@converter("InstanceNormalization")
def instance_norm(node: Node) -> Values:
    op = o.InstanceNormOp(node.input(0), node.input(1), node.input(2), float(node.attr("epsilon", 1e-5)))
    node.e.emit(op)
    return [op.y]


@converter("GroupNormalization", since=18)
def group_norm(node: Node) -> Values:
    """Opset 18 gives scale and bias per group (repeated over its channels here); opset 21 per channel."""
    groups = int(node.attr("num_groups"))
    c = node.shape(0)[1]
    e = node.e

    def per_channel(v: SSAValue) -> SSAValue:
        n = v.type.get_shape()[0]  # type: ignore[attr-defined]
        if n == c or groups == 0 or c % groups or n != groups:
            return v
        rows = e.broadcast_to(e.reshape(v, [groups, 1]), [groups, c // groups])
        return e.reshape(rows, [c])

    op = o.GroupNormOp(node.input(0), per_channel(node.input(1)), per_channel(node.input(2)), groups,
                       float(node.attr("epsilon", 1e-5)))
    e.emit(op)
    return [op.y]
