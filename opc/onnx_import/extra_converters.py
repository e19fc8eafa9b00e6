"""ONNX converters for the node-suite ops whose output shape or layout depends on values (issue 18):
Compress (a gather at the indices the condition selects), NonZero, MelWeightMatrix, Unique and
NonMaxSuppression (computed at compile time), MaxUnpool (a scatter into zeros), Upsample (opsets 7
and 9, as a Resize), RoiAlign (bilinear gathers at points computed from the rois at run time).

An input a converter needs at compile time (Compress's condition, NonZero's input, ...) is bound by
value (`Node.const`): the model compiles for that value, which joins the compile key as shape inputs
do; without the value (opc.import_onnx) the import stops with one line naming the input."""

from __future__ import annotations

import math

import numpy as np
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.onnx_import.converters import as_i64, numpy_of, resize_scaled
from opc.onnx_import.graph import BY_NUMPY, Node, converter, folder

Values = list[SSAValue | np.ndarray]
I64 = BY_NUMPY[np.dtype(np.int64)]


def evaluated(node: Node, what: str) -> Values:
    """The node run at compile time (our folder or onnx's reference) on its inputs' values, all bound."""
    feeds = {name: node.const(i, what) for i, name in enumerate(node.proto.input) if name}
    return node.importer.evaluate(node, feeds)


def nonempty(node: Node, outputs: Values) -> Values:
    for name, out in zip(node.proto.output, outputs):
        if isinstance(out, np.ndarray) and out.size == 0:
            raise node.fail(f"output '{name}' is empty for these input values; opc has no empty tensors")
    return outputs


@converter("Compress", since=9)
def compress(node: Node) -> Values:
    """x's slices (or flattened elements, without axis) where the condition is true: one gather at those
    indices, known at compile time. The condition may be shorter than the axis (the rest is dropped)."""
    cond = np.asarray(node.const(1, "condition")).reshape(-1).astype(bool)
    x, shape = node.input(0), list(node.shape(0))
    axis = node.attr("axis")
    if axis is None:
        x, shape, axis = node.e.reshape(x, [math.prod(shape)]), [math.prod(shape)], 0
    axis = node.axis(int(axis), len(shape))
    if len(cond) > shape[axis]:
        raise node.fail(f"condition has {len(cond)} elements, more than the axis' {shape[axis]}")
    picked = np.flatnonzero(cond).astype(np.int64)
    if not picked.size:
        raise node.fail("the condition selects nothing; opc has no empty tensors")
    return [node.e.value(o.GatherOp(x, node.e.constant(picked), axis))]


@converter("NonZero", since=9)
def nonzero(node: Node) -> Values:
    return nonempty(node, evaluated(node, "NonZero's output shape depends on it"))


@converter("MelWeightMatrix", since=17)
def mel_weight_matrix(node: Node) -> Values:
    return evaluated(node, "MelWeightMatrix's sizes")


@converter("MaxUnpool", since=9)
def max_unpool(node: Node) -> Values:
    """Y (of the unpooled shape, (in - 1) s - pads + k per axis) zero but for X's values at the flat
    indices I. A repeated index (overlapping windows) holds the mean of its values: the value itself where
    they came from MaxPool. An output_shape other than the unpooled shape is refused: onnxruntime and
    PyTorch read I as indices into output_shape, ONNX's reference (and its node test) into the unpooled
    shape, padded at the ends."""
    e = node.e
    shape = list(node.shape(0))
    r = len(shape) - 2
    kernel = [int(k) for k in node.attr("kernel_shape")]
    strides = [int(s) for s in node.attr("strides", [1] * r)]
    pads = [int(p) for p in node.attr("pads", [0] * (2 * r))]
    inferred = shape[:2] + [(shape[2 + i] - 1) * strides[i] - pads[i] - pads[r + i] + kernel[i] for i in range(r)]
    if node.has(2):
        out = [int(d) for d in node.const(2, "output_shape").reshape(-1)]
        if out != inferred:
            raise node.fail(f"output_shape {out} differs from the unpooled shape {inferred}: onnxruntime indexes "
                            "the output_shape, ONNX's reference the unpooled shape; opc does neither")
    if numpy_of(node.input(0)).kind != "f":
        raise node.fail(f"MaxUnpool of {numpy_of(node.input(0))} data is not supported (floats only)")
    n = math.prod(shape)
    x = e.reshape(node.input(0), [n])
    flat = e.reshape(as_i64(node, node.input(1)), [n])
    zeros = e.full(0.0, o.tensor([math.prod(inferred)], x.type.element_type))  # type: ignore[attr-defined]
    added = e.value(o.GatherGradOp(zeros, flat, x, 0))
    hits = e.value(o.GatherGradOp(zeros, flat, e.full(1.0, x), 0))
    return [e.reshape(e.div(added, e.value(o.MaximumOp(hits, e.full(1.0, hits)))), inferred)]


@converter("Upsample", since=7)
def upsample(node: Node) -> Values:
    """Resize with asymmetric coordinates (nearest: floor), as onnx's version converter maps it."""
    mode = node.attr("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise node.fail(f"mode '{mode}' is not supported (nearest, linear)")
    if node.opset >= 9:
        scales = [float(s) for s in node.const(1, "scales").reshape(-1)]
    else:
        scales = [float(s) for s in node.attr("scales", [])]
    rank = len(node.shape(0))
    if len(scales) != rank:
        raise node.fail(f"{len(scales)} scales for rank {rank}")
    attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    return [resize_scaled(node, attrs, list(range(rank)), scales, None)]


# ---------------------------------------------------------------------------
# Ops whose output shapes depend on their input values: compiled for those values
# ---------------------------------------------------------------------------


@converter("Unique", since=11)
def unique(node: Node) -> Values:
    """Y, indices, inverse_indices, counts of the bound input, computed at compile time."""
    return nonempty(node, evaluated(node, "Unique's output shape depends on it"))


@folder("Unique")
def fold_unique(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """np.unique, in the order of first occurrence for sorted=0 (onnx's reference takes the unsorted
    Y along axis 0 of the unflattened input, which is wrong without axis or for another axis)."""
    x, axis = inputs[0], node.attr("axis")
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = node.axis(int(axis), x.ndim)
    y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                          axis=axis)
    inverse = inverse.reshape(-1)
    if not int(node.attr("sorted", 1)):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        first, counts, inverse = first[order], counts[order], rank[inverse]
        y = np.take(x, first, axis=axis)
    return [y, *(a.astype(np.int64) for a in (first, inverse, counts))]


@converter("NonMaxSuppression", since=10)
def non_max_suppression(node: Node) -> Values:
    """selected_indices of the bound boxes and scores, computed at compile time."""
    return nonempty(node, evaluated(node, "NonMaxSuppression's output shape depends on it"))
