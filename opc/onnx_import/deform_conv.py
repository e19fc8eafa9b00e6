"""DeformConv (opset 19+, 2-D as ONNX's reference defines it), composed of opc ops at import.

Each kernel tap k = (ki, kj) of output position p = (i, j) reads X at
    (i * stride_h - pad_top + ki * dilation_h + offset_y[n, g, k, p],
     j * stride_w - pad_left + kj * dilation_w + offset_x[n, g, k, p])
by bilinear interpolation (GridSample with align_corners, zeros padding: each of the four
corners outside the image reads 0), times mask[n, g, k, p] (1 without a mask); g is the
offset group of the input channel. The samples form the im2col matrix [N, group, C/group * K, P],
and one batched matmul with W [group, O/group, C/group * K] gives the output; B is added.

The four corners' flat indices into X and their weights come from floor and the fractional parts
(in f32, f64 for f64 inputs; f16/bf16 inputs are computed in f32), so every input is differentiable
through the ops' own rules: X through the gather, W through the matmul, the offsets through the
bilinear weights (floor's gradient is 0), the mask through the product.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import Float32Type, Float64Type
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.onnx_import.graph import BY_NUMPY, Node, converter, numpy_dtype_of

Values = list[SSAValue | np.ndarray]
I64 = BY_NUMPY[np.dtype(np.int64)]


def ints(node: Node, name: str, default: list[int]) -> list[int]:
    value = node.attr(name)
    return list(value) if value is not None and len(value) else default


@converter("DeformConv", since=19)
def deform_conv(node: Node) -> Values:
    xs, ws, offs = node.shape(0), node.shape(1), node.shape(2)
    if len(xs) != 4 or len(ws) != 4 or len(offs) != 4:
        raise node.fail(f"X {list(xs)}, W {list(ws)}, offset {list(offs)}: opc imports 2-D DeformConv "
                        "(4-D X, W and offset), as ONNX's reference implements it")
    n, c, h, w = xs
    oc, cpg, kh, kw = ws
    group, offset_group = int(node.attr("group", 1)), int(node.attr("offset_group", 1))
    kernel = ints(node, "kernel_shape", [kh, kw])
    strides, dilations = ints(node, "strides", [1, 1]), ints(node, "dilations", [1, 1])
    pads = ints(node, "pads", [0, 0, 0, 0])
    oh, ow = offs[2:]
    k, p = kh * kw, oh * ow
    expect_oh = (h + pads[0] + pads[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    expect_ow = (w + pads[1] + pads[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    problems = [
        (kernel != [kh, kw], f"kernel_shape {kernel} differs from W's {[kh, kw]}"),
        (group < 1 or c != cpg * group or oc % group, f"X has {c} channels, W {list(ws)}: group {group} does not fit"),
        (offset_group < 1 or c % offset_group, f"X's {c} channels do not split into offset_group {offset_group}"),
        (offs[:2] != (n, offset_group * k * 2), f"offset {list(offs)} must be [{n}, {offset_group * k * 2}, oH, oW]"),
        ((oh, ow) != (expect_oh, expect_ow), f"offset's output size {[oh, ow]} differs from the convolution's "
                                             f"{[expect_oh, expect_ow]}"),
    ]
    for bad, message in problems:
        if bad:
            raise node.fail(message)
    if node.has(4) and node.shape(4) != (n, offset_group * k, oh, ow):
        raise node.fail(f"mask {list(node.shape(4))} must be [{n}, {offset_group * k}, {oh}, {ow}]")
    if node.has(3) and node.shape(3) != (oc,):
        raise node.fail(f"B {list(node.shape(3))} must be [{oc}]")

    e = node.e
    dtype = node.element(0)
    compute = dtype if isinstance(dtype, (Float32Type, Float64Type)) else Float32Type()

    def operand(i: int) -> SSAValue:
        v = node.input(i)
        return v if v.type.element_type == compute else e.cast(v, compute)  # type: ignore[attr-defined]

    x, weights, offset = operand(0), operand(1), operand(2)
    g = offset_group
    offset = e.reshape(offset, [n, g, k, 2, p])
    # the taps' positions without offsets, [K, P]: (ki * dilation - pad) + i * stride, likewise for x
    ki, kj = np.divmod(np.arange(k), kw)
    pi, pj = np.divmod(np.arange(p), ow)
    base = [(ki * dilations[0] - pads[0])[:, None] + (pi * strides[0])[None, :],
            (kj * dilations[1] - pads[1])[:, None] + (pj * strides[1])[None, :]]
    np_compute = numpy_dtype_of(compute)
    taps_per_axis = []
    for axis, length in ((0, h), (1, w)):
        off = e.reshape(e.value(o.SliceOp(offset, [0, 0, 0, axis, 0], [n, g, k, axis + 1, p], [1] * 5)), [n, g, k, p])
        pos = e.add(off, e.constant(base[axis].astype(np_compute)))
        taps_per_axis.append(axis_taps(node, pos, length))

    mask = e.reshape(operand(4), [n, g, 1, k, p]) if node.has(4) else None
    flat_x = e.reshape(x, [n * c * h * w])
    cg = c // g
    channel_base = (np.arange(n * c, dtype=np.int64) * (h * w)).reshape(n, g, cg, 1, 1)
    cols = None
    for iy, wy in taps_per_axis[0]:
        for ix, wx in taps_per_axis[1]:
            flat = e.add(e.scale(iy, float(w)), ix)  # exact: small integers in floating point
            index = e.add(e.reshape(e.cast(flat, I64), [n, g, 1, k, p]), e.constant(channel_base))
            value = e.value(o.GatherOp(flat_x, index, 0))  # [N, G, C/G, K, P]
            value = e.mul(value, e.reshape(e.mul(wy, wx), [n, g, 1, k, p]))
            cols = value if cols is None else e.add(cols, value)
    assert cols is not None
    if mask is not None:
        cols = e.mul(cols, mask)
    cols = e.reshape(cols, [n, group, cpg * k, p])
    wmat = e.reshape(weights, [group, oc // group, cpg * k])
    out = e.reshape(e.matmul(wmat, cols), [n, oc, oh, ow])  # [N, group, O/group, P]: batch dims broadcast
    if node.has(3):
        out = e.add(out, e.reshape(operand(3), [1, oc, 1, 1]))
    return [out if compute == dtype else e.cast(out, dtype)]


def axis_taps(node: Node, pos: SSAValue, length: int) -> list[tuple[SSAValue, SSAValue]]:
    """The two corners along one axis: (index clamped into the image, as a float holding an integer;
    its weight, 0 where the corner lies outside)."""
    e = node.e
    lo = e.value(o.FloorOp(pos))
    frac = e.sub(pos, lo)
    out = []
    for index, weight in ((lo, e.sub(e.full(1.0, frac), frac)), (e.add(lo, e.full(1.0, lo)), frac)):
        f = index.type.element_type  # type: ignore[attr-defined]
        inside = e.mul(e.cast(e.value(o.GreaterThanOp(index, e.full(-1.0, index))), f),
                       e.cast(e.value(o.LessThanOp(index, e.full(float(length), index))), f))
        clamped = e.value(o.MinimumOp(e.value(o.MaximumOp(index, e.full(0.0, index))), e.full(length - 1.0, index)))
        out.append((clamped, e.mul(weight, inside)))
    return out

