"""ONNX converters for the node-suite ops whose output shape or layout depends on values (issue 18):
Compress (a gather at the indices the condition selects), NonZero, MelWeightMatrix, Unique and
NonMaxSuppression (computed at compile time), MaxUnpool (a scatter into zeros), Upsample (opsets 7
and 9, as a Resize), RoiAlign (bilinear gathers at points computed from the rois at run time),
TfIdfVectorizer (n-gram counts from comparisons at run time).

An input a converter needs at compile time (Compress's condition, NonZero's input, ...) is bound by
value (`Node.const`): the model compiles for that value, which joins the compile key as shape inputs
do; without the value (opc.import_onnx) the import stops with one line naming the input."""

from __future__ import annotations

import math

import numpy as np
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.onnx_import.tensor import as_i64, numpy_of, resize_scaled
from opc.onnx_import.graph import BY_NUMPY, Node, converter, folder
from opc.onnx_import.sampling import F32, F64, Scalar

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


# ---------------------------------------------------------------------------
# RoiAlign: per roi a grid of sample points in each output bin, each read bilinearly from X
# ---------------------------------------------------------------------------

MAX_ADAPTIVE_ROIS = 64  # sampling_ratio 0: the graph holds one sampling per distinct grid size


@converter("RoiAlign", since=10)
def roi_align(node: Node) -> Values:
    """Y[r, c, ph, pw]: the mean (avg) or maximum (max: of each sample's four weighted corners, as
    onnxruntime and ONNX's reference do) over a gh x gw grid of points in bin (ph, pw) of roi r, each
    interpolated bilinearly in X[batch_indices[r], c]. The points are computed from the rois at run time
    (as onnxruntime does, in the rois' float type); sampling_ratio 0 sizes the grid from each roi, so the
    rois are then bound at compile time."""
    xshape, rshape = node.shape(0), node.shape(1)
    if len(xshape) != 4 or len(rshape) != 2 or rshape[1] != 4 or node.shape(2) != (rshape[0],):
        raise node.fail(f"X {list(xshape)}, rois {list(rshape)}, batch_indices {list(node.shape(2))} must be "
                        "[N, C, H, W], [R, 4], [R]")
    mode = node.attr("mode", "avg")
    default = "half_pixel" if node.opset >= 16 else "output_half_pixel"
    transform = node.attr("coordinate_transformation_mode", default)
    if mode not in ("avg", "max") or transform not in ("half_pixel", "output_half_pixel"):
        raise node.fail(f"mode '{mode}' / coordinate_transformation_mode '{transform}' is not supported")
    out = (int(node.attr("output_height", 1)), int(node.attr("output_width", 1)))
    ratio = int(node.attr("sampling_ratio", 0))
    e = node.e
    rois = node.input(1)
    if rois.type.element_type not in (F32, F64):  # type: ignore[attr-defined]
        rois = e.cast(rois, F32)
    batch = as_i64(node, node.input(2))
    setting = RoiSetting(node, xshape, out, float(node.attr("spatial_scale", 1.0)), transform == "half_pixel", mode)
    if ratio > 0:
        return [roi_align_grid(setting, rois, batch, (ratio, ratio))]
    values = node.const(1, "rois (sampling_ratio 0 sizes the grid from them)").astype(numpy_of(rois))
    grids = [adaptive_grid(setting, roi) for roi in values]
    groups: dict[tuple[int, int], list[int]] = {}
    for r, grid in enumerate(grids):
        groups.setdefault(grid, []).append(r)
    if len(groups) > MAX_ADAPTIVE_ROIS:
        raise node.fail(f"sampling_ratio 0 with {len(groups)} grid sizes (at most {MAX_ADAPTIVE_ROIS})")
    parts, order = [], []
    for grid, members in groups.items():
        picked = e.constant(np.array(members, np.int64))
        parts.append(roi_align_grid(setting, e.value(o.GatherOp(rois, picked, 0)),
                                    e.value(o.GatherOp(batch, picked, 0)), grid))
        order += members
    y = parts[0] if len(parts) == 1 else e.value(o.ConcatOp(parts, 0))
    if order != sorted(order):
        y = e.value(o.GatherOp(y, e.constant(np.argsort(order).astype(np.int64)), 0))
    return [y]


class RoiSetting:
    def __init__(self, node: Node, xshape: tuple[int, ...], out: tuple[int, int], scale: float,
                 half_pixel: bool, mode: str) -> None:
        self.node, self.xshape, self.out, self.scale, self.half_pixel, self.mode = \
            node, xshape, out, scale, half_pixel, mode


def adaptive_grid(s: RoiSetting, roi: np.ndarray) -> tuple[int, int]:
    """ceil(roi extent / output size) per axis, in the rois' float type as onnxruntime computes it."""
    t = roi.dtype.type
    offset = t(0.5 if s.half_pixel else 0.0)
    x1, y1, x2, y2 = (v * t(s.scale) - offset for v in roi)
    h, w = y2 - y1, x2 - x1
    if not s.half_pixel:
        h, w = max(h, t(1.0)), max(w, t(1.0))
    return int(np.ceil(h / t(s.out[0]))), int(np.ceil(w / t(s.out[1])))


def roi_axis(s: RoiSetting, sc: Scalar, start: SSAValue, extent: SSAValue, length: int, bins: int,
             grid: int) -> tuple[SSAValue, list[tuple[SSAValue, SSAValue]]]:
    """One axis' samples of every roi, [R, bins * grid]: 1 where inside [-1, length] (else 0), and the
    two taps (index as a float, weight) of each."""
    e = sc.e
    size = e.div(extent, sc.c(bins))  # [R, 1]
    dtype = numpy_of(start)
    whole = e.constant(np.repeat(np.arange(bins), grid).astype(dtype))  # ph
    part = e.constant(np.tile(np.arange(grid) + 0.5, bins).astype(dtype))  # iy + 0.5
    p = e.add(e.add(start, e.mul(size, whole)), e.div(e.mul(part, size), sc.c(grid)))  # [R, bins * grid]
    sp = Scalar(s.node, p)
    zero, one = sp.c(0.0), sp.c(1.0)
    inside = sp.where(sp.lt(p, sp.c(-1.0)), zero, sp.where(sp.gt(p, sp.c(length)), zero, one))  # 1 or 0
    p = e.value(o.MaximumOp(p, zero))
    low = sp.floor(p)
    below_edge = sp.lt(low, sp.c(length - 1))  # else both taps on the last row, weight on the first
    low = sp.where(below_edge, low, sp.c(length - 1))
    high = sp.where(below_edge, e.add(low, one), low)
    frac = e.sub(sp.where(below_edge, p, low), low)
    return inside, [(low, e.sub(one, frac)), (high, frac)]


def roi_align_grid(s: RoiSetting, rois: SSAValue, batch: SSAValue, grid: tuple[int, int]) -> SSAValue:
    """RoiAlign of rois [R, 4] (all with this grid size) -> [R, C, oh, ow]."""
    node, e = s.node, s.node.e
    n, c, h, w = s.xshape
    r = rois.type.get_shape()[0]  # type: ignore[attr-defined]
    (oh, ow), (gh, gw) = s.out, grid
    col = Scalar(node, e.value(o.SliceOp(rois, [0, 0], [r, 1])))

    def coordinate(k: int) -> SSAValue:
        v = e.value(o.SliceOp(rois, [0, k], [r, k + 1]))
        return e.sub(e.mul(v, col.c(s.scale)), col.c(0.5 if s.half_pixel else 0.0))

    x1, y1, x2, y2 = (coordinate(k) for k in range(4))
    extents = [e.sub(y2, y1), e.sub(x2, x1)]
    if not s.half_pixel:  # malformed rois forced to 1 x 1
        extents = [e.value(o.MaximumOp(v, col.c(1.0))) for v in extents]
    ys, ytaps = roi_axis(s, col, y1, extents[0], h, oh, gh)
    xs, xtaps = roi_axis(s, col, x1, extents[1], w, ow, gw)
    full = [r, c, oh, gh, ow, gw]
    ycol, xrow = [r, 1, oh, gh, 1, 1], [r, 1, 1, 1, ow, gw]
    inside = e.mul(e.reshape(ys, ycol), e.reshape(xs, xrow))
    base = e.add(e.mul(e.reshape(batch, [r, 1, 1, 1, 1, 1]), e.constant(np.array(c * h * w, np.int64))),
                 e.constant((np.arange(c, dtype=np.int64) * h * w).reshape(1, c, 1, 1, 1, 1)))
    flat_x = e.reshape(node.input(0), [n * c * h * w])
    xdtype = node.element(0)
    result = None
    for (yi, wy), (xi, wx) in ((a, b) for a in ytaps for b in xtaps):
        index = e.add(e.mul(e.cast(e.reshape(yi, ycol), I64), e.constant(np.array(w, np.int64))),
                      e.cast(e.reshape(xi, xrow), I64))
        index = e.add(e.broadcast_to(index, [r, 1, oh, gh, ow, gw]), base)
        weight = e.mul(e.mul(e.reshape(wy, ycol), e.reshape(wx, xrow)), inside)
        if weight.type.element_type != xdtype:  # type: ignore[attr-defined]
            weight = e.cast(weight, xdtype)
        value = e.mul(e.value(o.GatherOp(flat_x, e.broadcast_to(index, full), 0)), weight)
        if result is None:
            result = value
        else:
            result = e.add(result, value) if s.mode == "avg" else e.value(o.MaximumOp(result, value))
    if s.mode == "avg":
        y = e.reduce_sum(result, [3, 5])
        return e.div(y, e.full(float(max(gh * gw, 1)), y))
    return e.value(o.ReduceMaxOp(result, [3, 5], False))



# ---------------------------------------------------------------------------
# TfIdfVectorizer: n-gram counts by comparisons at run time
# ---------------------------------------------------------------------------


@converter("TfIdfVectorizer", since=9)
def tfidf_vectorizer(node: Node) -> Values:
    """Y[b, ngram_indexes[g]] += the number of starts i where the pool n-gram g (of length n between
    min_gram_length and max_gram_length) occurs at x[b, i], x[b, i + d], ..., x[b, i + (n - 1) d], for
    every skip distance d = 1 .. max_skip_count + 1 (1 only for unigrams), as onnxruntime counts: per
    length one product of `equal`s of shifted slices with the pool's columns, summed over the starts,
    mapped to the outputs by a 0/1 matmul. IDF clips each n-gram's count to 1; IDF and TFIDF scale it by
    the n-gram's weight (in pool order, as the spec and onnxruntime have it; ONNX's reference indexes the
    weights by output coordinate)."""
    pool = node.attr("pool_int64s")
    if pool is None:
        raise node.fail("pool_strings: string n-grams are not supported (opc has no strings)")
    pool = np.asarray(pool, np.int64)
    starts = [int(s) for s in node.attr("ngram_counts")]
    indexes = np.asarray(node.attr("ngram_indexes"), np.int64)
    lo, hi = int(node.attr("min_gram_length")), int(node.attr("max_gram_length"))
    skips = int(node.attr("max_skip_count"))
    mode = node.attr("mode")
    if mode not in ("TF", "IDF", "TFIDF") or not 1 <= lo <= hi or skips < 0:
        raise node.fail(f"mode '{mode}', min/max_gram_length {lo}/{hi}, max_skip_count {skips} are not valid")
    shape = node.shape(0)
    if len(shape) not in (1, 2):
        raise node.fail(f"the input must be [C] or [B, C], got shape {list(shape)}")
    e = node.e
    b, c = (1, shape[0]) if len(shape) == 1 else shape
    x = e.reshape(node.input(0), [b, 1, c])
    dtype = numpy_of(x)
    m = int(indexes.max()) + 1
    weights = node.attr("weights")
    if weights is not None and len(weights) != len(indexes):
        raise node.fail(f"{len(weights)} weights for {len(indexes)} n-grams")
    y = None
    ends = starts[1:] + [len(pool)]
    counted = 0  # n-grams of the pool so far (ngram_indexes lists them in pool order)
    for n, (start, end) in enumerate(zip(starts, ends), 1):
        grams = pool[start:end].reshape(-1, n) if end > start else np.zeros((0, n), np.int64)
        first, counted = counted, counted + len(grams)
        if not lo <= n <= hi or not len(grams):
            continue
        counts = None
        for d in range(1, (1 if n == 1 else skips + 1) + 1):
            length = c - (n - 1) * d
            if length < 1:
                break
            match = None
            for k in range(n):
                window = e.value(o.SliceOp(x, [0, 0, k * d], [b, 1, k * d + length]))
                column = e.constant(grams[:, k].astype(dtype).reshape(1, -1, 1))
                hit = e.cast(e.value(o.EqualOp(window, column)), F32)
                match = hit if match is None else e.mul(match, hit)
            found = e.reduce_sum(match, [2])  # [B, n-grams]
            counts = found if counts is None else e.add(counts, found)
        if counts is None:
            continue
        if mode == "IDF":
            counts = e.value(o.MinimumOp(counts, e.full(1.0, counts)))
        if mode != "TF" and weights is not None:
            counts = e.mul(counts, e.constant(np.asarray(weights[first:counted], np.float32)))
        onehot = np.zeros((len(grams), m), np.float32)
        onehot[np.arange(len(grams)), indexes[first:counted]] = 1.0
        part = e.matmul(counts, e.constant(onehot))
        y = part if y is None else e.add(y, part)
    if y is None:
        y = e.constant(np.zeros((b, m), np.float32))
    return [e.reshape(y, [m] if len(shape) == 1 else [b, m])]
