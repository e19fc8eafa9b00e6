"""Reductions: ReduceSum / Mean / Max / Min / Prod / L1 / L2 / LogSum / LogSumExp / SumSquare (axes
as an attribute before opset 18, ReduceSum's before 13, as an input after), ArgMax / ArgMin, TopK,
CumSum and CumProd. Axes, K and sizes must be known at compile time."""

from __future__ import annotations

import numpy as np

from opc.dialects import opc as o
from opc.dialects.kinds import element_of
from opc.onnx_import.common import Values, flip, iota, lt, numpy_of, scalar, shifted_in
from opc.onnx_import.graph import BY_NUMPY, Node, as_newer, converter, numpy_dtype_of


def reduce_axes(node: Node, from_input: bool) -> tuple[int, ...] | None:
    """The axes to reduce (sorted, non-negative), or None for 'no reduction' (noop_with_empty_axes)."""
    rank = len(node.shape(0))
    if from_input:
        axes = node.const(1, "axes").reshape(-1).tolist() if node.has(1) else []
    else:
        axes = list(node.attr("axes", []))
    if not axes:
        return None if node.attr("noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted({node.axis(int(a), rank) for a in axes}))


def reduce(node: Node, from_input: bool) -> Values:
    axes = reduce_axes(node, from_input)
    x = node.input(0)
    if axes is None:
        return [x]
    keep = bool(node.attr("keepdims", 1))
    e = node.e
    kind = node.op_type
    if kind == "ReduceSum":
        return [e.reduce_sum(x, axes, keep)]
    if kind in ("ReduceMax", "ReduceMin") and numpy_of(x).kind == "b":  # any / all: over 0/1 bytes
        u8 = BY_NUMPY[np.dtype(np.uint8)]
        r = e.value(SIMPLE_REDUCTIONS[kind](e.cast(x, u8), axes, keep))  # of nothing: 0 (any), 255 (all)
        return [e.cast(r, element_of(x))]
    if kind in SIMPLE_REDUCTIONS:
        return [e.value(SIMPLE_REDUCTIONS[kind](x, axes, keep))]
    if kind == "ReduceSumSquare":
        return [e.reduce_sum(e.mul(x, x), axes, keep)]
    if kind == "ReduceL1":
        return [e.reduce_sum(e.value(o.AbsOp(x)), axes, keep)]
    if kind == "ReduceL2":
        return [e.value(o.SqrtOp(e.reduce_sum(e.mul(x, x), axes, keep)))]
    if kind == "ReduceLogSumExp":  # m + log(sum(exp(x - m))), m the max: finite for any finite x
        m = e.value(o.ReduceMaxOp(x, axes, True))
        s = e.reduce_sum(e.value(o.ExpOp(e.sub(x, m))), axes, True)
        r = e.add(m, e.value(o.LogOp(s)))
        return [r if keep else e.reshape(r, [d for i, d in enumerate(node.shape(0)) if i not in axes])]
    raise node.fail("no reduction rule")  # pragma: no cover - the registrations below list the kinds


SIMPLE_REDUCTIONS = {"ReduceMean": o.ReduceMeanOp, "ReduceMax": o.ReduceMaxOp, "ReduceMin": o.ReduceMinOp}


REDUCTIONS = (*SIMPLE_REDUCTIONS, "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp")


@converter("ReduceSum")
def reduce_sum(node: Node) -> Values:
    return reduce(node, from_input=True)


@converter(*REDUCTIONS)
def reduce_axes_attribute(node: Node) -> Values:
    return reduce(node, from_input=False)


@converter(*REDUCTIONS, since=18)
def reduce_axes_input(node: Node) -> Values:
    return reduce(node, from_input=True)


@converter("ReduceSum", since=1)
def reduce_sum_attribute(node: Node) -> Values:
    return reduce(node, from_input=False)


converter(*REDUCTIONS, since=1)(reduce_axes_attribute)


@converter("ArgMax", "ArgMin", since=1)
def arg_max_min(node: Node) -> Values:
    """The first (or last, select_last_index) position of the max/min along axis:
    positions where x equals its extreme, the smallest (largest) of them."""
    e, x = node.e, node.input(0)
    shape = node.shape(0)
    axis = node.axis(node.attr("axis", 0), len(shape))
    keep = bool(node.attr("keepdims", 1))
    extreme = (o.ReduceMaxOp if node.op_type == "ArgMax" else o.ReduceMinOp)(x, [axis], True)
    hit = e.value(o.EqualOp(x, e.value(extreme)))
    last = bool(node.attr("select_last_index", 0))
    where = e.constant(iota(shape, axis))
    miss = e.constant(np.array(-1 if last else shape[axis], np.int64))
    picked = e.select(hit, where, miss)
    r = e.value((o.ReduceMaxOp if last else o.ReduceMinOp)(picked, [axis], keep))
    return [r]


@converter("CumSum", since=11)
def cumsum(node: Node) -> Values:
    """opc.cumsum: one pass along the axis (a compile-time input), exact in x's own type."""
    x = node.input(0)
    axis = node.axis(int(node.const(1, "axis").reshape(-1)[0]), len(node.shape(0)))
    exclusive, reverse = bool(node.attr("exclusive", 0)), bool(node.attr("reverse", 0))
    return [node.e.value(o.CumsumOp(x, axis, exclusive, reverse))]


@converter("ReduceLogSum")
def reduce_log_sum_attribute(node: Node) -> Values:
    return log_sum(node, False)


@converter("ReduceLogSum", since=18)
def reduce_log_sum_input(node: Node) -> Values:
    return log_sum(node, True)


def log_sum(node: Node, from_input: bool) -> Values:
    axes = reduce_axes(node, from_input)
    x = node.input(0)
    if axes is None:
        return [node.e.value(o.LogOp(x))]
    return [node.e.value(o.LogOp(node.e.reduce_sum(x, axes, bool(node.attr("keepdims", 1)))))]


converter("ReduceLogSum", since=1)(reduce_log_sum_attribute)


def reduce_prod(node: Node, from_input: bool) -> Values:
    """exp(sum(log|x|)), negated where the count of negative factors is odd (floats; a zero factor gives
    exp(-inf) = 0). Within a few ulps times log|x| of the product, not exact: integers are refused."""
    e, x = node.e, node.input(0)
    if numpy_of(x).kind != "f":
        raise node.fail("ReduceProd of integers is not supported (floats only)")
    axes = reduce_axes(node, from_input)
    if axes is None:
        return [x]
    keep = bool(node.attr("keepdims", 1))
    zero, one = scalar(node, 0.0, x), scalar(node, 1.0, x)
    magnitude = e.value(o.ExpOp(e.reduce_sum(e.value(o.LogOp(e.value(o.AbsOp(x)))), axes, keep)))
    negatives = e.reduce_sum(e.select(lt(node, x, zero), one, zero), axes, keep)
    odd = e.sub(negatives, e.mul(e.value(o.FloorOp(e.mul(negatives, scalar(node, 0.5, x)))), scalar(node, 2.0, x)))
    return [e.mul(magnitude, e.sub(one, e.mul(odd, scalar(node, 2.0, x))))]


@converter("ReduceProd", since=1)
def reduce_prod_attribute(node: Node) -> Values:
    return reduce_prod(node, False)


@converter("ReduceProd", since=18)
def reduce_prod_input(node: Node) -> Values:
    return reduce_prod(node, True)


@converter("CumProd", since=26)
def cumprod(node: Node) -> Values:
    """Prefix products by doubling (Hillis-Steele): y *= y shifted by 1, 2, 4, ... places (1s shifted in),
    log2(n) multiplies of the whole tensor; exclusive shifts x by one first, reverse flips around it.
    Integers wrap as their multiply does."""
    x = node.input(0)
    shape = node.shape(0)
    axis = node.axis(int(node.const(1, "axis").reshape(-1)[0]), len(shape))
    n = shape[axis] if shape else 1
    if not shape or n == 0:
        return [x]
    reverse = bool(node.attr("reverse", 0))
    y = flip(node, x, axis) if reverse else x
    if node.attr("exclusive", 0):
        y = shifted_in(node, y, axis, 1, 1)
    k = 1
    while k < n:
        y = node.e.mul(y, shifted_in(node, y, axis, k, 1))
        k *= 2
    return [flip(node, y, axis) if reverse else y]


@converter("TopK", since=11)
def top_k(node: Node) -> Values:
    """k rounds of (the extreme of what is left, its first position), each position taken then masked
    out: sorted, ties to the lower index, as ONNX specifies. Floats with NaN are not ordered here.
    A K known only at run time: `opc.topk`, whose results' axis dim is a data size (sorted whatever
    `sorted` says, which any order satisfies)."""
    e, x = node.e, node.input(0)
    shape = node.shape(0)
    axis = node.axis(int(node.attr("axis", -1)), len(shape))
    if node.importer.compile_time(node.proto.input[1]) is None:  # k known when it runs: a data size
        top = e.emit(o.TopkOp(x, node.input(1), axis, bool(node.attr("largest", 1))))
        return list(top.results)
    k = int(node.const(1, "K").reshape(-1)[0])
    if not 0 <= k <= shape[axis]:
        raise node.fail(f"K = {k} is out of range for axis {axis} of size {shape[axis]}")
    if k == 0:
        raise node.fail("K = 0 (an empty result) is not supported")
    largest = bool(node.attr("largest", 1))
    dtype = numpy_dtype_of(element_of(x))
    if dtype.kind == "f":
        worst = -np.inf if largest else np.inf
    else:
        worst = np.iinfo(dtype).min if largest else np.iinfo(dtype).max
    reduce = o.ReduceMaxOp if largest else o.ReduceMinOp
    where = e.constant(iota(shape, axis))
    past_end = e.constant(np.array(shape[axis], np.int64))
    no, sentinel = e.constant(np.array(False)), e.constant(np.array(worst, dtype))
    taken = None
    values, indices = [], []
    for _ in range(k):
        left = x if taken is None else e.select(taken, sentinel, x)
        best = e.value(reduce(left, [axis], True))
        hit = e.value(o.EqualOp(left, best))
        if taken is not None:
            hit = e.select(taken, no, hit)
        first = e.value(o.ReduceMinOp(e.select(hit, where, past_end), [axis], True))
        values.append(best)
        indices.append(first)
        chosen = e.value(o.EqualOp(where, first))
        taken = chosen if taken is None else e.select(taken, taken, chosen)
    if k == 1:
        return [values[0], indices[0]]
    return [e.value(o.ConcatOp(values, axis)), e.value(o.ConcatOp(indices, axis))]


@converter("TopK", since=1)
def top_k_attribute(node: Node) -> Values:
    """Opsets 1 to 9: k is an attribute (largest, sorted: the defaults of 11)."""
    return as_newer(node, 11, [node.proto.input[0], np.array([int(node.attr("k"))], np.int64)], drop=("k",))


converter("TopK", since=10)(top_k)  # opset 10: K an input, as from 11 with largest and sorted 1
