"""Resampling: Resize and Upsample (per axis, a matmul by a table known at import), GridSample and
AffineGrid, as opc primitives.

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
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.dialects.kinds import element_of, shape_of
from opc.onnx_import.common import F32, F64, I64, Pointwise, Values, axis_taps, numpy_of
from opc.onnx_import.graph import BY_NUMPY, Node, as_newer, converter, numpy_dtype_of
from opc.symbolic import Sym


# Resize: separable, each axis an affine map y = x @ W + b along it. W and b come from
# onnx's reference Resize itself, run at compile time on the unit vectors of the axis
# (and on zeros, for b: tf_crop_and_resize's extrapolation value), so every mode,
# coordinate transformation, cubic coefficient and antialias filter means what ONNX says.
# Axes are applied innermost first, as the reference's recursion does.
def resize_axis_map(node: Node, attrs: dict, n: int, scale: float, roi: tuple[float, float] | None,
                    aspect: tuple[int, int, int] | None = None,
                    size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The axis' table W and offset b (y = x @ W + b) from onnx's reference Resize on the unit vectors.
    aspect = (m_out, m_in, size): keep_aspect_ratio_policy's shared scale m_out / m_in with the axis'
    requested size, whose rounded output the scale alone would not give: the probe gets a second axis of
    m_in elements (each the same) resized to m_out, so that the reference picks that scale, and the
    output along the axis is round(scale * n). size: the output size where the caller knows it (sizes,
    a declared shape); where the scale does not give it (float32(11 / 14) * 14 is 10.99999...), the
    reference is given the size, and so the scale size / n."""
    if attrs.get("coordinate_transformation_mode") == "tf_half_pixel_for_nn":
        return tf_nearest_map(node, attrs, n, scale, size if size is not None else int(float(np.float32(scale)) * n))
    attrs = {k: v for k, v in attrs.items() if k not in ("axes", "keep_aspect_ratio_policy")}
    probe = np.concatenate([np.eye(n), np.zeros((1, n))]).astype(np.float64)
    inputs = {"x": probe, "scales": np.array([1.0, scale], np.float32)}
    names = ["x", "", "scales"]
    if roi is not None:
        inputs["roi"] = np.array([0.0, roi[0], 1.0, roi[1]], np.float32)
        names[1] = "roi"
    if aspect is not None:
        m_out, m_in, wanted = aspect
        inputs = {"x": np.ascontiguousarray(np.broadcast_to(probe[:, None, :], (n + 1, m_in, n))),
                  "sizes": np.array([m_out, wanted], np.int64)}
        names = ["x", "", "", "sizes"]
        attrs.update(axes=[1, 2], keep_aspect_ratio_policy=node.attr("keep_aspect_ratio_policy"))
    out = run_reference_resize(node, attrs, names, inputs)
    if aspect is None and size is not None and out.shape[1] != size:
        del inputs["scales"]
        inputs["sizes"] = np.array([n + 1, size], np.int64)
        out = run_reference_resize(node, attrs, [names[0], names[1], "", "sizes"], inputs)
    if aspect is not None:
        out = out[:, 0, :]
    b = out[n]
    return out[:n] - b, b


def run_reference_resize(node: Node, attrs: dict, names: list[str], inputs: dict[str, np.ndarray]) -> np.ndarray:
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    one = helper.make_node("Resize", names, ["y"], **attrs)
    try:
        (out,) = ReferenceEvaluator(one, opsets={"": max(node.opset, 11)}).run(None, inputs)  # Upsample: 7, 9
    except Exception as err:  # noqa: BLE001 - the reference raises anything for attributes it refuses
        raise node.fail(f"cannot build the resize tables: {type(err).__name__}: {str(err).splitlines()[0]}") from None
    return out


# nearest_mode as onnxruntime rounds a point x >= 0: round(x + offset) up or down (ties: floor's and
# ceil's preference), as (offset, NumPy's rounding, opc's)
NEAREST = {"round_prefer_floor": (-0.5, np.ceil, o.CeilOp), "round_prefer_ceil": (0.5, np.floor, o.FloorOp),
           "floor": (0.0, np.floor, o.FloorOp), "ceil": (0.0, np.ceil, o.CeilOp)}


def tf_nearest_map(node: Node, attrs: dict, n: int, scale: float, m: int) -> tuple[np.ndarray, np.ndarray]:
    """coordinate_transformation_mode tf_half_pixel_for_nn (opset 11; tf2onnx writes it at later opsets
    too, and onnxruntime runs it there): output i reads input nearest((i + 0.5) / scale), in float32 as
    onnxruntime computes it, clamped to the input (TF's ResizeNearestNeighbor with half_pixel_centers).
    onnx's reference does not know the mode: the table is built here."""
    mode, rounding = attrs.get("mode", "nearest"), attrs.get("nearest_mode", "round_prefer_floor")
    if mode != "nearest" or rounding not in NEAREST:
        raise node.fail(f"coordinate_transformation_mode 'tf_half_pixel_for_nn' with mode '{mode}' and nearest_mode "
                        f"'{rounding}' is not supported (mode nearest)")
    point = (np.arange(m, dtype=np.float32) + np.float32(0.5)) / np.float32(scale)
    offset, rounded, _ = NEAREST[rounding]
    index = np.clip(rounded(point + np.float32(offset)).astype(np.int64), 0, n - 1)
    w = np.zeros((n, m))
    w[index, np.arange(m)] = 1.0
    return w, np.zeros(m)


@converter("Resize", since=11)
def resize(node: Node) -> Values:
    shape = list(node.shape(0))
    rank = len(shape)
    axes = [node.axis(int(a), rank) for a in node.attr("axes", list(range(rank)))]
    crop = node.attr("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize"
    if crop and node.has(1) and not node.known(1) and crops_at_run_time(node):
        return [crop_at_run_time(node, axes)]
    roi = node.const(1, "roi").reshape(-1).astype(np.float64) if crop and node.has(1) else None  # used by crop only
    aspects: dict[int, tuple[int, int, int]] = {}  # axis -> resize_axis_map's aspect
    sizes_out: dict[int, int] = {}  # axis -> its output size, where known before the tables
    if node.has(3):
        sizes = [int(s) for s in node.const(3, "sizes").reshape(-1)]
        ratios = [sizes[k] / shape[a] for k, a in enumerate(axes)]
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            sizes_out = dict(zip(axes, sizes))
        else:
            k = ratios.index(min(ratios) if policy == "not_larger" else max(ratios))
            r = ratios[k]
            ratios = [r] * len(axes)
            # ONNX rounds the size (half up), a scale gives int(scale * n): where they differ, the tables
            # come from the reference given the sizes, the shared ratio as a fraction in lowest terms
            g = math.gcd(sizes[k], shape[axes[k]])
            m_out, m_in = sizes[k] // g, shape[axes[k]] // g
            for j, a in enumerate(axes):
                if int(r * shape[a] + 0.5) == int(float(np.float32(r)) * shape[a]):
                    continue
                if (shape[a] + 1) * shape[a] * m_in > 1 << 24:
                    raise node.fail(f"keep_aspect_ratio_policy '{policy}': the tables of axis {a} (size {shape[a]}, "
                                    f"scale {sizes[k]}/{shape[axes[k]]}) are too large to build")
                aspects[a] = (m_out, m_in, sizes[j])
        scales = ratios
    else:
        scales = [float(s) for s in node.const(2, "scales").reshape(-1)]
        if not crop and len(scales) == len(axes):
            sizes_out = declared_sizes(node, axes, scales, shape)
    if len(scales) != len(axes):
        raise node.fail(f"{len(scales)} scales or sizes for {len(axes)} axes")
    return [resize_scaled(node, node.attrs, axes, scales, roi, aspects, sizes_out)]


def declared_sizes(node: Node, axes: list[int], scales: list[float], shape: list) -> dict[int, int]:
    """The output sizes the model declares (or the importer's shape inference settled, graph.py's
    resize_sizes: floor(n * scale) in float32, as onnxruntime computes it) where they differ from
    floor(n * scale) in float64 by that rounding: onnxruntime and TF give the declared size."""
    dims = node.out_dims(0)
    if dims is None or len(dims) != len(shape):
        return {}
    out = {}
    for a, s in zip(axes, scales):
        d, n = dims[a], shape[a]
        if not isinstance(d, int) or not isinstance(n, int) or d <= 0 or d == int(n * s):
            continue
        if abs(d - n * s) >= 1:
            raise node.fail(f"the declared output size {d} of axis {a} is not floor({n} * {s:g})")
        out[a] = d
    return out


def resize_scaled(node: Node, attrs: dict, axes: list[int], scales: list[float],
                  roi: np.ndarray | None, aspects: dict[int, tuple[int, int, int]] | None = None,
                  sizes: dict[int, int] | None = None) -> SSAValue:
    """Input 0 resized along axes by scales, with Resize's attributes attrs (Resize, Upsample); sizes:
    an axis' output size where it is known (resize_axis_map's size)."""
    e, x = node.e, node.input(0)
    shape = list(node.shape(0))
    rank = len(shape)
    crop = attrs.get("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize"
    dtype = numpy_of(x)
    work = np.dtype(np.float32) if dtype.kind != "f" or dtype.itemsize < 4 else dtype
    if dtype.kind != "f" and attrs.get("mode", "nearest") != "nearest":
        raise node.fail("linear and cubic resize of integer data is not supported")
    y = x if dtype == work else e.cast(x, BY_NUMPY[work])
    current = list(shape)
    for k in sorted(range(len(axes)), key=lambda k: -axes[k]):
        a, s = axes[k], scales[k]
        if s == 1.0 and not crop:
            continue
        axis_roi = (float(roi[k]), float(roi[k + len(axes)])) if roi is not None and len(roi) == 2 * len(axes) \
            else (float(roi[a]), float(roi[a + rank])) if roi is not None else None
        w, b = resize_axis_map(node, attrs, current[a], s, axis_roi, (aspects or {}).get(a), (sizes or {}).get(a))
        offset = e.constant(b.astype(work)) if np.any(b) else None
        y = along_axis(node, y, current, a, e.constant(w.astype(work)), offset)
    if dtype != work:  # nearest on integers: the 0/1 weights pick exact values
        y = e.cast(y, element_of(x))
    return y


def along_axis(node: Node, y: SSAValue, current: list, a: int, w: SSAValue, b: SSAValue | None) -> SSAValue:
    """y @ w (+ b) along axis a, w of [n, m]: current, y's shape, gets m at a."""
    e, rank = node.e, len(current)
    m = shape_of(w)[1]
    perm = [d for d in range(rank) if d != a] + [a]
    moved_shape = [current[d] for d in perm]
    lead = math.prod(moved_shape[:-1])  # a run-time size with an open batch
    rows = e.reshape(e.transpose(y, perm), [lead if isinstance(lead, Sym) else max(lead, 1), current[a]])
    out = e.matmul(rows, w)
    if b is not None:
        out = e.add(out, b)
    current[a] = m
    return e.transpose(e.reshape(out, [*moved_shape[:-1], m]), list(np.argsort(perm)))


def crops_at_run_time(node: Node) -> bool:
    """Whether crop_at_run_time serves the node (else the roi must be known at compile time: a
    tf_crop_and_resize by scales has a size that depends on it)."""
    mode, rounding = node.attr("mode", "nearest"), node.attr("nearest_mode", "round_prefer_floor")
    return (node.has(3) and mode in ("linear", "nearest") and rounding in NEAREST
            and node.attr("keep_aspect_ratio_policy", "stretch") == "stretch"
            and (mode == "nearest" or numpy_of(node.input(0)).kind == "f"))


def crop_at_run_time(node: Node, axes: list[int]) -> SSAValue:
    """tf_crop_and_resize with a roi known at run time only (tf2onnx's tf.image.crop_and_resize: a Loop
    over the boxes, each step's roi read from them): per axis the table is built at run time. Output i
    reads the point start·(n - 1) + i·(end - start)·(n - 1)/(m - 1) (m = 1: the middle of the roi),
    from its linear or nearest taps, as one-hot rows of the [n, m] table; a point outside [0, n - 1]
    gives extrapolation_value."""
    e, x = node.e, node.input(0)
    mode, rounding = node.attr("mode", "nearest"), node.attr("nearest_mode", "round_prefer_floor")
    shape, sizes = list(node.shape(0)), [int(v) for v in node.const(3, "sizes").reshape(-1)]
    dtype = numpy_of(x)
    work = np.dtype(np.float32) if dtype.kind != "f" or dtype.itemsize < 4 else dtype
    f = BY_NUMPY[work]
    roi = node.input(1) if numpy_of(node.input(1)) == work else e.cast(node.input(1), f)
    half = shape_of(roi)[0] // 2
    y = x if dtype == work else e.cast(x, f)
    current, masks = list(shape), []
    for k in sorted(range(len(axes)), key=lambda k: -axes[k]):
        a, m = axes[k], sizes[k]
        n, at = current[a], k if half == len(axes) else a
        start, end = (e.broadcast_to(e.value(o.SliceOp(roi, [j], [j + 1], [1])), [1, m]) for j in (at, at + half))
        i = e.constant(np.arange(m, dtype=work).reshape(1, m))
        s = Pointwise(node, i)
        point = (e.add(e.scale(start, n - 1), e.div(e.scale(e.mul(i, e.sub(end, start)), n - 1), s.c(m - 1))) if m > 1
                 else e.scale(e.add(start, end), 0.5 * (n - 1)))
        # inside [0, n - 1], give or take rounding (the C compiler may fuse the multiply-add: a box edge
        # on a pixel must not fall outside); the taps are clamped there, as onnxruntime's
        slack = 1e-5 * max(n - 1, 1)
        inside = e.mul(e.sub(s.c(1.0), e.cast(s.lt(point, s.c(-slack)), f)),
                       e.sub(s.c(1.0), e.cast(s.gt(point, s.c(n - 1 + slack)), f)))
        if mode == "linear":
            low = s.floor(point)
            t = e.sub(point, low)
            taps = [(low, e.sub(s.c(1.0), t)), (e.add(low, s.c(1.0)), t)]
        else:
            offset, _, rounded = NEAREST[rounding]
            taps = [(e.value(rounded(e.add(point, s.c(offset)))), None)]
        j = e.constant(np.broadcast_to(np.arange(n, dtype=work).reshape(n, 1), (n, m)).copy())
        w = None
        for index, weight in taps:
            hit = e.cast(e.value(o.EqualOp(j, e.broadcast_to(s.clamp(index, 0, n - 1), [n, m]))), f)
            if weight is not None:
                hit = e.mul(hit, e.broadcast_to(weight, [n, m]))
            w = hit if w is None else e.add(w, hit)
        assert w is not None
        y = along_axis(node, y, current, a, e.mul(w, e.broadcast_to(inside, [n, m])), None)
        masks.append((a, inside))
    value = float(node.attr("extrapolation_value", 0.0))
    if value != 0.0:
        rank = len(shape)
        total = None
        for a, inside in masks:
            mask = e.broadcast_to(e.reshape(inside, [current[d] if d == a else 1 for d in range(rank)]), current)
            total = mask if total is None else e.mul(total, mask)
        assert total is not None
        y = e.add(y, e.scale(e.sub(e.full(1.0, total), total), value))
    return y if dtype == work else e.cast(y, element_of(x))


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


MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic", "cubic": "cubic"}




def unnormalize(s: Pointwise, g: SSAValue, length: int, align_corners: bool) -> SSAValue:
    e = s.e
    if align_corners:
        return e.mul(e.div(e.add(g, s.c(1.0)), s.c(2.0)), s.c(length - 1))
    return e.div(e.sub(e.mul(e.add(g, s.c(1.0)), s.c(length)), s.c(1.0)), s.c(2.0))






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
    if element_of(grid) not in (F32, F64):
        grid = e.cast(grid, F32)  # half grids: their points in float32 (float64 ones keep their precision)
    per_axis = []
    for i, length in enumerate(spatial):
        k = r - 1 - i  # the grid lists x (the last axis) first
        g = e.value(o.SliceOp(grid, [0] * (r + 1) + [k], [*gshape[:-1], k + 1], [1] * (r + 2)))
        g = e.reshape(g, [n, 1, *out])
        s = Pointwise(node, g)
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
            value = e.mul(value, e.cast(weight, dtype) if dtype != element_of(weight) else weight)
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


converter("Resize", since=10)(upsample)  # opset 10: (X, scales), as Upsample 9 (asymmetric, nearest: floor)


@converter("Upsample", since=1)
def upsample_height_width(node: Node) -> Values:
    """Opset 1 (experimental): height_scale and width_scale of NCHW, mode nearest or bilinear."""
    scales = [1.0, 1.0, float(node.attr("height_scale", 1.0)), float(node.attr("width_scale", 1.0))]
    mode = "linear" if node.attr("mode", "nearest") == "bilinear" else node.attr("mode", "nearest")
    return as_newer(node, 7, node.proto.input, attrs={"scales": scales, "mode": mode},
                    drop=("height_scale", "width_scale"))
