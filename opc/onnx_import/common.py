"""What the converters share: the list a converter returns, constants shaped like a value,
index arithmetic known at compile time, and `Pointwise`, float arithmetic on one shape."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import Float32Type, Float64Type
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.dialects.kinds import element_of, shape_of
from opc.onnx_import.graph import BY_NUMPY, Node, numpy_dtype_of
from opc.onnx_import.lists import Value

Values = list[Value]  # what a converter returns: one per ONNX output

F32, F64 = Float32Type(), Float64Type()

I64 = BY_NUMPY[np.dtype(np.int64)]


def scalar(node: Node, value: float, like: SSAValue) -> SSAValue:
    """A rank-0 constant of like's element type (broadcasts against anything)."""
    return node.e.constant(np.array(value, numpy_dtype_of(element_of(like))))


def numpy_of(v: SSAValue) -> np.dtype:
    return numpy_dtype_of(element_of(v))


def node_numpy_dtype(node: Node, i: int) -> np.dtype:
    return numpy_dtype_of(node.element(i))


def gt(node: Node, a: SSAValue, b: SSAValue) -> SSAValue:
    return node.e.value(o.GreaterThanOp(a, b))


def lt(node: Node, a: SSAValue, b: SSAValue) -> SSAValue:
    return node.e.value(o.LessThanOp(a, b))


def as_i64(node: Node, v: SSAValue) -> SSAValue:
    return v if numpy_of(v) == np.dtype(np.int64) else node.e.cast(v, BY_NUMPY[np.dtype(np.int64)])


def iota(shape: Sequence[int], axis: int, dtype=np.int64) -> np.ndarray:
    """Each element's coordinate along axis, broadcastable against shape."""
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return np.arange(shape[axis], dtype=dtype).reshape(view)


def along(node: Node, x: SSAValue, axis: int, start: int, stop: int) -> SSAValue:
    """x[..., start:stop, ...] on `axis`."""
    shape = list(shape_of(x))
    lo, hi = [0] * len(shape), list(shape)
    lo[axis], hi[axis] = start, stop
    return node.e.value(o.SliceOp(x, lo, hi))


def flip(node: Node, x: SSAValue, axis: int) -> SSAValue:
    n = shape_of(x)[axis]
    return node.e.value(o.GatherOp(x, node.e.constant(np.arange(n - 1, -1, -1, dtype=np.int64)), axis))


def shifted_in(node: Node, x: SSAValue, axis: int, k: int, fill: float) -> SSAValue:
    """x moved k places along axis, the first k filled with `fill`."""
    shape = list(shape_of(x))
    head = list(shape)
    head[axis] = k
    pad = node.e.constant(np.full(head, fill, numpy_dtype_of(element_of(x))))
    if k >= shape[axis]:
        return pad if k == shape[axis] else along(node, pad, axis, 0, shape[axis])
    return node.e.value(o.ConcatOp([pad, along(node, x, axis, 0, shape[axis] - k)], axis))


def rows_times(node: Node, x: SSAValue, axis: int, matrix: np.ndarray) -> SSAValue:
    """x with its `axis` (moved last, flattened with the others into rows) multiplied by matrix,
    the new axis put back in place."""
    e = node.e
    shape = list(shape_of(x))
    perm = [d for d in range(len(shape)) if d != axis] + [axis]
    moved = e.transpose(x, perm)
    lead = [shape[d] for d in perm[:-1]]
    dtype = numpy_dtype_of(element_of(x))
    out = e.matmul(e.reshape(moved, [max(math.prod(lead), 1), shape[axis]]), e.constant(matrix.astype(dtype)))
    out = e.reshape(out, [*lead, matrix.shape[1]])
    return e.transpose(out, list(np.argsort(perm)))


def evaluated(node: Node, what: str) -> Values:
    """The node run at compile time (our folder or onnx's reference) on its inputs' values, all bound."""
    feeds = {name: node.const(i, what) for i, name in enumerate(node.proto.input) if name}
    return node.importer.evaluate(node, feeds)


def nonempty(node: Node, outputs: Values) -> Values:
    for name, out in zip(node.proto.output, outputs):
        if isinstance(out, np.ndarray) and out.size == 0:
            raise node.fail(f"output '{name}' is empty for these input values; opc has no empty tensors")
    return outputs


class Pointwise:
    """Elementwise float arithmetic on one shape, with Python numbers as constants."""

    def __init__(self, node: Node, like: SSAValue) -> None:
        self.node, self.e, self.like = node, node.e, like

    def c(self, v: float) -> SSAValue:
        return self.e.full(float(v), self.like)

    def floor(self, x: SSAValue) -> SSAValue:
        return self.e.value(o.FloorOp(x))

    def where(self, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.e.select(cond, a, b)

    def lt(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.e.value(o.LessThanOp(a, b))

    def gt(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.e.value(o.GreaterThanOp(a, b))

    def clamp(self, x: SSAValue, lo: float, hi: float) -> SSAValue:
        return self.e.value(o.MinimumOp(self.e.value(o.MaximumOp(x, self.c(lo))), self.c(hi)))

    def reflect(self, x: SSAValue, lo: float, hi: float) -> SSAValue:
        """onnx's _gs_reflect: bounced off the nearer border until inside [lo, hi]."""
        e, span = self.e, hi - lo
        below = e.sub(self.c(lo), x)
        above = e.sub(x, self.c(hi))
        out = x
        for dist, outside, even_base, odd_base, sign in ((below, self.lt(x, self.c(lo)), lo, hi, 1.0),
                                                         (above, self.gt(x, self.c(hi)), hi, lo, -1.0)):
            n = self.floor(e.div(dist, self.c(span)))  # dist >= 0 where it is used: floor is int()
            r = e.sub(dist, e.mul(n, self.c(span)))
            even = self.e.value(o.EqualOp(e.mul(self.floor(e.div(n, self.c(2.0))), self.c(2.0)), n))
            step = e.scale(r, sign)
            inside = self.where(even, e.add(self.c(even_base), step), e.sub(self.c(odd_base), step))
            out = self.where(outside, inside, out)
        return out


CUBIC_A = -0.75


def axis_taps(s: Pointwise, x: SSAValue, length: int, mode: str, padding: str,
              border: tuple[float, float]) -> list[tuple[SSAValue, SSAValue | None]]:
    """(index as a float holding an integer, weight or None for 1) per tap along one axis."""
    e = s.e
    if mode == "nearest":
        taps = [(x, None)]
    else:
        x0 = s.floor(x)
        t = e.sub(x, x0)
        if mode == "linear":
            taps = [(x0, e.sub(s.c(1.0), t)), (e.add(x0, s.c(1.0)), t)]
        else:
            taps = [(e.add(x0, s.c(k)), w) for k, w in zip((-1.0, 0.0, 1.0, 2.0), cubic_weights(s, t))]
    out = []
    for index, weight in taps:
        if padding == "zeros":  # a tap outside the image weighs 0 (and reads a clamped, valid index)
            f = element_of(index)
            inside = e.mul(e.cast(s.lt(index, s.c(length)), f), e.cast(s.gt(index, s.c(-1.0)), f))
            weight = inside if weight is None else e.mul(weight, inside)
            index = s.clamp(index, 0, length - 1)
        elif padding == "border":
            index = s.clamp(index, 0, length - 1)
        else:  # the clamp: a reflected -0.5 truncates to index 0, as onnx's int() does
            index = s.clamp(s.reflect(index, *border), 0, length - 1)
        out.append((index, weight))
    return out


def cubic_weights(s: Pointwise, t: SSAValue) -> list[SSAValue]:
    """Keys' kernel at distances t + 1, t, 1 - t, 2 - t (t in [0, 1))."""
    e, a = s.e, CUBIC_A

    def far(x: SSAValue) -> SSAValue:  # 1 <= |x| < 2
        return e.sub(e.mul(e.add(e.mul(e.sub(e.scale(x, a), s.c(5 * a)), x), s.c(8 * a)), x), s.c(4 * a))

    def near(x: SSAValue) -> SSAValue:  # |x| < 1
        return e.add(e.mul(e.mul(e.sub(e.scale(x, a + 2), s.c(a + 3)), x), x), s.c(1.0))

    one_minus = e.sub(s.c(1.0), t)
    return [far(e.add(t, s.c(1.0))), near(t), near(one_minus), far(e.add(one_minus, s.c(1.0)))]
