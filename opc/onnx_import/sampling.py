"""GridSample and AffineGrid, as opc primitives.

GridSample reads X at the points a grid gives (normalized to [-1, 1], the last grid axis
listing x first, i.e. the spatial axes in reverse). Per spatial axis, in float32 as onnx's
reference does (float64 for a float64 grid): the point is unnormalized (align_corners: -1 and 1 are the first and last
centers; else the outer edges), for `nearest` rounded half to even, and where it lies
outside the borders, clamped (`border`) or reflected (`reflection`). Its taps are then
1 (nearest), 2 (linear: floor and floor + 1) or 4 (cubic, Keys' kernel with a = -0.75)
indices with their weights; a tap outside the image reads 0 (`zeros`), the edge (`border`)
or its reflection (`reflection`). The output is the sum over every combination of taps
(one per axis) of the weights' product times one `gather` from the flattened X.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from xdsl.dialects.builtin import Float32Type, Float64Type
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.onnx_import.graph import BY_NUMPY, Node, converter, numpy_dtype_of

Values = list[SSAValue | np.ndarray]
F32, F64 = Float32Type(), Float64Type()
I64 = BY_NUMPY[np.dtype(np.int64)]
MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic", "cubic": "cubic"}
CUBIC_A = -0.75


class Scalar:
    """Elementwise float32 arithmetic on one shape, with Python numbers as constants."""

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


def unnormalize(s: Scalar, g: SSAValue, length: int, align_corners: bool) -> SSAValue:
    e = s.e
    if align_corners:
        return e.mul(e.div(e.add(g, s.c(1.0)), s.c(2.0)), s.c(length - 1))
    return e.div(e.sub(e.mul(e.add(g, s.c(1.0)), s.c(length)), s.c(1.0)), s.c(2.0))


def cubic_weights(s: Scalar, t: SSAValue) -> list[SSAValue]:
    """Keys' kernel at distances t + 1, t, 1 - t, 2 - t (t in [0, 1))."""
    e, a = s.e, CUBIC_A

    def far(x: SSAValue) -> SSAValue:  # 1 <= |x| < 2
        return e.sub(e.mul(e.add(e.mul(e.sub(e.scale(x, a), s.c(5 * a)), x), s.c(8 * a)), x), s.c(4 * a))

    def near(x: SSAValue) -> SSAValue:  # |x| < 1
        return e.add(e.mul(e.mul(e.sub(e.scale(x, a + 2), s.c(a + 3)), x), x), s.c(1.0))

    one_minus = e.sub(s.c(1.0), t)
    return [far(e.add(t, s.c(1.0))), near(t), near(one_minus), far(e.add(one_minus, s.c(1.0)))]


def axis_taps(s: Scalar, x: SSAValue, length: int, mode: str, padding: str,
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
            f = index.type.element_type  # type: ignore[attr-defined]
            inside = e.mul(e.cast(s.lt(index, s.c(length)), f), e.cast(s.gt(index, s.c(-1.0)), f))
            weight = inside if weight is None else e.mul(weight, inside)
            index = s.clamp(index, 0, length - 1)
        elif padding == "border":
            index = s.clamp(index, 0, length - 1)
        else:  # the clamp: a reflected -0.5 truncates to index 0, as onnx's int() does
            index = s.clamp(s.reflect(index, *border), 0, length - 1)
        out.append((index, weight))
    return out


@converter("GridSample", since=16)
def grid_sample(node: Node) -> Values:
    xshape, gshape = node.shape(0), node.shape(1)
    r = len(xshape) - 2
    if r < 1 or len(gshape) != r + 2 or gshape[0] != xshape[0] or gshape[-1] != r:
        raise node.fail(f"X {list(xshape)} and grid {list(gshape)} must be [N, C, *spatial] and "
                        f"[N, *out, {r}]")
    mode = MODES.get(node.attr("mode", "linear" if node.opset >= 20 else "bilinear"))
    padding = node.attr("padding_mode", "zeros")
    if mode is None or padding not in ("zeros", "border", "reflection"):
        raise node.fail(f"mode '{node.attr('mode')}' / padding_mode '{padding}' is not supported")
    if mode == "cubic" and r != 2:
        raise node.fail("cubic mode samples 2-D images only (as ONNX defines it)")
    align = bool(node.attr("align_corners", 0))
    e = node.e
    n, c, spatial, out = xshape[0], xshape[1], xshape[2:], gshape[1:-1]
    grid = node.input(1)
    if grid.type.element_type not in (F32, F64):  # type: ignore[attr-defined]
        grid = e.cast(grid, F32)  # half grids: their points in float32 (float64 ones keep their precision)
    per_axis = []
    for i, length in enumerate(spatial):
        k = r - 1 - i  # the grid lists x (the last axis) first
        g = e.value(o.SliceOp(grid, [0] * (r + 1) + [k], [*gshape[:-1], k + 1], [1] * (r + 2)))
        g = e.reshape(g, [n, 1, *out])
        s = Scalar(node, g)
        x = unnormalize(s, g, length, align)
        border = (0.0, length - 1.0) if align else (-0.5, length - 0.5)
        if mode == "nearest":
            x = e.value(o.RoundOp(x))
        if padding == "border" and mode != "cubic":  # cubic clamps each tap only, as onnxruntime and
            x = s.clamp(x, 0, length - 1)          # PyTorch do (onnx's reference clamps the point too)
        elif padding == "reflection":
            x = s.reflect(x, *border)
        per_axis.append(axis_taps(s, x, length, mode, padding, border))
    strides = [math.prod(spatial[i + 1:]) for i in range(r)]
    base = (np.arange(n * c, dtype=np.int64) * math.prod(spatial)).reshape([n, c] + [1] * r)
    flat_x = e.reshape(node.input(0), [n * c * math.prod(spatial)])
    dtype = node.element(0)
    total = None
    for combo in itertools.product(*per_axis):
        index = None
        weight = None
        for (idx, w), stride in zip(combo, strides):
            term = e.mul(e.cast(idx, I64), e.constant(np.array(stride, np.int64)))
            index = term if index is None else e.add(index, term)
            if w is not None:
                weight = w if weight is None else e.mul(weight, w)
        index = e.add(e.broadcast_to(index, [n, c, *out]), e.constant(base))
        value = e.value(o.GatherOp(flat_x, index, 0))
        if weight is not None:
            value = e.mul(value, e.cast(weight, dtype) if dtype != weight.type.element_type else weight)  # type: ignore[attr-defined]
        total = value if total is None else e.add(total, value)
    return [total]


@converter("AffineGrid", since=20)
def affine_grid(node: Node) -> Values:
    """grid[n, ..., :] = theta[n] @ (x, y[, z], 1): the base grid a constant, one batched matmul."""
    size = [int(v) for v in node.const(1, "size").reshape(-1)]
    theta = node.input(0)
    tshape = node.shape(0)
    r = len(size) - 2
    if r not in (2, 3) or list(tshape[1:]) != [r, r + 1] or tshape[0] != size[0]:
        raise node.fail(f"theta {list(tshape)} and size {size} must be [N, 2, 3] with [N, C, H, W] "
                        "or [N, 3, 4] with [N, C, D, H, W]")
    align = bool(node.attr("align_corners", 0))
    axes = []
    for length in size[2:]:
        if align:
            axes.append(np.linspace(-1.0, 1.0, length) if length > 1 else np.zeros(1))
        else:
            axes.append((np.arange(length) * 2.0 + 1.0) / length - 1.0)
    mesh = np.meshgrid(*axes, indexing="ij")  # (z,) y, x
    base = np.stack([*mesh[::-1], np.ones_like(mesh[0])], axis=-1).reshape(-1, r + 1)
    base_v = node.e.constant(base.astype(numpy_dtype_of(node.element(0))))
    grid = node.e.matmul(node.e.broadcast_to(base_v, [size[0], *base.shape]), theta, trans_y=True)
    return [node.e.reshape(grid, [size[0], *size[2:], r])]
