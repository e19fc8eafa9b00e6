"""Object detection: NonMaxSuppression (computed at compile time from the boxes and scores it is
given by value, else opc.non_max_suppression at run time) and RoiAlign (bilinear gathers at points
computed from the rois at run time)."""

from __future__ import annotations

import numpy as np
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.dialects.kinds import element_of, shape_of
from opc.onnx_import.common import F32, F64, I64, Pointwise, Values, as_i64, evaluated, nonempty, numpy_of
from opc.onnx_import.graph import Node, converter


@converter("NonMaxSuppression", since=10)
def non_max_suppression(node: Node) -> Values:
    """selected_indices: computed at compile time where the boxes and scores are known, else
    `opc.non_max_suppression`, whose number of rows is a size of its own (the thresholds may be run-time
    values too; missing: no box kept, IoU 0, no score threshold)."""
    importer = node.importer
    if all(importer.compile_time(node.proto.input[i]) is not None for i in (0, 1)):
        return nonempty(node, evaluated(node, "NonMaxSuppression's output shape depends on it"))
    e, boxes = node.e, node.input(0)
    dtype = numpy_of(boxes)

    def given(i: int, default: np.ndarray) -> SSAValue:
        return node.input(i) if node.has(i) else e.constant(default)

    max_out = as_i64(node, given(2, np.array([0], np.int64)))
    iou = given(3, np.array([0], dtype))
    score = given(4, np.array([-np.inf], dtype))
    if element_of(iou) != element_of(boxes):
        iou = e.cast(iou, element_of(boxes))
    if element_of(score) != element_of(boxes):
        score = e.cast(score, element_of(boxes))
    return [e.value(o.NonMaxSuppressionOp(boxes, node.input(1), max_out, iou, score,
                                          int(node.attr("center_point_box", 0))))]


# RoiAlign: per roi a grid of sample points in each output bin, each read bilinearly from X.
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
    if element_of(rois) not in (F32, F64):
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


def roi_axis(s: RoiSetting, sc: Pointwise, start: SSAValue, extent: SSAValue, length: int, bins: int,
             grid: int) -> tuple[SSAValue, list[tuple[SSAValue, SSAValue]]]:
    """One axis' samples of every roi, [R, bins * grid]: 1 where inside [-1, length] (else 0), and the
    two taps (index as a float, weight) of each."""
    e = sc.e
    size = e.div(extent, sc.c(bins))  # [R, 1]
    dtype = numpy_of(start)
    whole = e.constant(np.repeat(np.arange(bins), grid).astype(dtype))  # ph
    part = e.constant(np.tile(np.arange(grid) + 0.5, bins).astype(dtype))  # iy + 0.5
    p = e.add(e.add(start, e.mul(size, whole)), e.div(e.mul(part, size), sc.c(grid)))  # [R, bins * grid]
    sp = Pointwise(s.node, p)
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
    r = shape_of(rois)[0]
    (oh, ow), (gh, gw) = s.out, grid
    col = Pointwise(node, e.value(o.SliceOp(rois, [0, 0], [r, 1])))

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
        if element_of(weight) != xdtype:
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
