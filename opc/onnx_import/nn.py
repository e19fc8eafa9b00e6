"""Neural-network layers. Convolutions and pools (Conv, ConvTranspose, MaxPool,
AveragePool, GlobalAveragePool, GlobalMaxPool, LpPool, MaxUnpool, Col2Im, DeformConv), normalizations
(BatchNormalization, InstanceNormalization, GroupNormalization, LayerNormalization, RMSNormalization,
LpNormalization, LRN), Softmax, LogSoftmax, Hardmax, Dropout and the losses (SoftmaxCrossEntropyLoss,
NegativeLogLikelihoodLoss).

Conv, pools and norms map onto opc's conv / pool / norm ops; `auto_pad` becomes explicit pads here
(ONNX's formulas), a bias becomes a per-channel `add`. What opc cannot express (a bad stride, a group
that does not divide the channels) fails in the op's verifier, whose message the importer prefixes
with the node. The rest are composed of opc ops."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import Float32Type, Float64Type, IntegerType, f32
from xdsl.ir import Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from opc.dialects import opc as o
from opc.dialects.kinds import element_of, shape_of
from opc.onnx_import.common import (
    I64,
    Pointwise,
    Values,
    as_i64,
    axis_taps,
    iota,
    node_numpy_dtype,
    numpy_of,
    rows_times,
    scalar,
)
from opc.onnx_import.graph import BY_NUMPY, Node, as_newer, converter, numpy_dtype_of, same_since
from opc.onnx_import.run_time_sizes import SizeNeeded


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
    rank = len(shape_of(y))
    return node.e.add(y, node.e.reshape(b, [shape_of(b)[0], *[1] * (rank - 2)]))


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
    inp, kernel = shape_of(x)[2:], shape_of(w)[2:]
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
    same = shape is None and mode in ("SAME_UPPER", "SAME_LOWER")
    if same:
        shape = [i * s for i, s in zip(inp, strides)]
    if shape is not None:
        shape = list(shape)[-r:]
        begins, ends = [], []
        for i, k, s, d, p, want in zip(inp, kernel, strides, dilations, extra, shape):
            total = s * (i - 1) + p + (k - 1) * d + 1 - want
            if same:  # a kernel shorter than the stride cannot reach i * s: no padding, a shorter output (onnxruntime)
                total = max(total, 0)
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
            shape = list(shape_of(y))
            shape[d + 2] = count
            y = node.e.value(o.ConcatOp([y, node.e.full(0.0, o.tensor(shape, element_of(y)))], d + 2))
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
    elem = element_of(x)
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
    return v if element_of(v) == el else node.e.cast(v, el)


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
    return v if element_of(v) == el else node.e.cast(v, el)


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
        n = shape_of(v)[0]
        if n == c or groups == 0 or c % groups or n != groups:
            return v
        rows = e.broadcast_to(e.reshape(v, [groups, 1]), [groups, c // groups])
        return e.reshape(rows, [c])

    op = o.GroupNormOp(node.input(0), per_channel(node.input(1)), per_channel(node.input(2)), groups,
                       float(node.attr("epsilon", 1e-5)))
    e.emit(op)
    return [op.y]


@converter("Dropout")
def dropout(node: Node) -> Values:
    """Inference (or training with ratio 0): the identity; the mask is all true. Training with a ratio
    above 0 and a `seed`: ONNX's reference's draws (seeded_dropout); without a seed, refused. A
    training_mode known only at run time selects between the two."""
    x = node.input(0)
    ones = node.e.broadcast_like(node.e.constant(np.array(True)), x)  # `?` dims read off x at run time
    if not node.has(2) or (node.known(2) and not bool(node.const(2, "training_mode"))):
        return [x, ones]
    ratio = node.const(1, "ratio") if node.has(1) else None
    if ratio is not None and float(np.asarray(ratio).reshape(-1)[0]) == 0.0:
        return [x, ones]
    if node.attr("seed") is None:
        raise node.fail("training_mode with a ratio above 0 and no seed draws random numbers from a generator "
                        "ONNX does not define: opc imports inference graphs (training_mode false, or ratio 0) "
                        "and seeded training (the seed attribute: NumPy's RandomState(seed), as ONNX's reference)")
    y, mask = seeded_dropout(node, ratio)
    if node.known(2):
        return [y, mask]
    e = node.e
    training = e.broadcast_like(e.reshape(node.input(2), []), y)
    return [e.select(training, y, x), e.select(training, e.constant(mask), ones)]


def seeded_dropout(node: Node, ratio: np.ndarray | None) -> tuple[SSAValue, np.ndarray]:
    """Y = mask * X * scale and the mask as ONNX's reference computes them (op_dropout.py):
    mask = RandomState(seed).uniform(0, 1, X.shape) >= ratio, scale = 1 / (1 - ratio) in the ratio's
    type (the default 0.5 a Python float), the products in NumPy's promotion of X's and the ratio's
    types (f16 X with an f32 ratio: in f32), rounded to X's type. The draws depend on the seed and
    X's shape only, so they are drawn here, at import, by NumPy itself (its legacy MT19937): the very
    stream the reference and the node tests' data come from, on every target. X's shape must be known
    at compile time (opc.load_onnx compiles per shape then)."""
    seed, shape = int(node.attr("seed")), node.shape(0)
    if not 0 <= seed < 2**32:
        raise node.fail(f"seed {seed}: NumPy's RandomState, ONNX's reference generator, takes 0 <= seed < 2**32")
    if not all(isinstance(d, int) for d in shape):
        raise SizeNeeded(f"{node.label}: a seeded training Dropout draws one number per element of X: "
                         "its shape must be known at compile time")
    x, dtype = node.input(0), node_numpy_dtype(node, 0)
    draws = np.random.RandomState(seed).uniform(0, 1.0, shape)
    if ratio is None:  # the reference's default, a Python float: the products stay in X's type
        mask, scale, compute = draws >= 0.5, np.asarray(2.0, dtype), dtype
    else:
        ratio = np.asarray(ratio).reshape(())
        mask, compute = draws >= ratio, np.result_type(dtype, ratio.dtype)
        scale = np.asarray(np.asarray(1.0, ratio.dtype) / (np.asarray(1.0, ratio.dtype) - ratio))
    e = node.e
    xc = x if compute == dtype else e.cast(x, BY_NUMPY[compute])
    y = e.mul(e.mul(e.constant(mask.astype(compute)), xc), e.constant(scale.astype(compute)))
    return (y if compute == dtype else e.cast(y, element_of(x))), mask


@converter("Softmax")
def softmax(node: Node) -> Values:
    return [node.e.value(o.SoftmaxOp(node.input(0), node.axis(node.attr("axis", -1), len(node.shape(0)))))]


@converter("LogSoftmax")
def log_softmax(node: Node) -> Values:
    return [node.e.value(o.LogSoftmaxOp(node.input(0), node.axis(node.attr("axis", -1), len(node.shape(0)))))]


@converter("LayerNormalization", since=17)
def layer_norm(node: Node) -> Values:
    """Y, and Mean / InvStdDev reshaped to ONNX's keepdims shape ([d0, ..., 1, ..., 1])."""
    e = node.e
    x = node.input(0)
    src = node.shape(0)
    begin = node.axis(node.attr("axis", -1), len(src))
    bias = node.input(2) if node.has(2) else e.full(0.0, node.input(1))
    op = o.LayerNormOp(x, node.input(1), bias, begin, float(node.attr("epsilon", 1e-5)))
    y, mean, rstd = e.emit(op).results
    stats_shape = [*src[:begin], *[1] * (len(src) - begin)]
    outs: Values = [y]
    for i, v in ((1, mean), (2, rstd)):  # float32 in ONNX for half inputs (stash_type = 1), as in opc
        if len(node.proto.output) > i and node.proto.output[i]:
            outs.append(e.reshape(v, stats_shape))
    return outs


def label_loss(node: Node, logits: SSAValue, labels: SSAValue) -> SSAValue:
    """-log_softmax(logits)[label] per sample, [N, d1...], through opc.softmax_cross_entropy (axis 1)."""
    e = node.e
    lab_shape = list(shape_of(labels))
    lab = e.reshape(labels, [lab_shape[0], 1, *lab_shape[1:]])
    loss, _ = e.emit(o.SoftmaxCrossEntropyOp(logits, lab, 1)).results
    return e.reshape(loss, lab_shape)


def nll_loss(node: Node, logp: SSAValue, labels: SSAValue) -> SSAValue:
    """-logp[label] per sample: a one-hot select over the class axis (1) and a sum."""
    e = node.e
    shape = list(shape_of(logp))
    classes = np.arange(shape[1], dtype=numpy_of(labels)).reshape([1, shape[1]] + [1] * (len(shape) - 2))
    lab_shape = list(shape_of(labels))
    hit = e.value(o.EqualOp(e.reshape(labels, [lab_shape[0], 1, *lab_shape[1:]]), e.constant(classes)))
    picked = e.select(hit, logp, scalar(node, 0.0, logp))
    return e.neg(e.reduce_sum(picked, [1]))


def reduce_loss(node: Node, loss: SSAValue, labels: SSAValue) -> SSAValue:
    """Class weights, ignore_index and the reduction (none | sum | mean, weighted mean as ONNX defines it)."""
    e = node.e
    weight = None
    if node.has(2):
        weight = e.value(o.GatherOp(node.input(2), safe_labels(node, labels), 0))
    ignore = node.attr("ignore_index")
    if ignore is not None:
        ignored = e.value(o.EqualOp(labels, e.constant(np.array(ignore, numpy_of(labels)))))
        kept = e.select(ignored, scalar(node, 0.0, loss), scalar(node, 1.0, loss))
        weight = kept if weight is None else e.mul(weight, kept)
    if weight is not None:
        loss = e.mul(loss, weight)
    reduction = node.attr("reduction", "mean")
    if reduction == "none":
        return loss
    axes = list(range(len(shape_of(loss))))
    total = e.reduce_sum(loss, axes)
    if reduction == "sum":
        return total
    if reduction != "mean":
        raise node.fail(f"reduction must be none, sum or mean, got '{reduction}'")
    if weight is None:
        return e.div(total, scalar(node, math.prod(shape_of(loss)), total))
    return e.div(total, e.reduce_sum(weight, axes))


def safe_labels(node: Node, labels: SSAValue) -> SSAValue:
    """Labels with ignore_index replaced by 0, so that gathers and the loss op stay in range."""
    ignore = node.attr("ignore_index")
    if ignore is None:
        return labels
    e = node.e
    ignored = e.value(o.EqualOp(labels, e.constant(np.array(ignore, numpy_of(labels)))))
    return e.select(ignored, e.constant(np.zeros((), numpy_of(labels))), labels)


@converter("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(node: Node) -> Values:
    scores, labels = node.input(0), node.input(1)
    if len(node.shape(0)) < 2:
        raise node.fail("scores must have rank >= 2 ([N, C, ...])")
    loss = label_loss(node, scores, safe_labels(node, labels))
    outs: Values = [reduce_loss(node, loss, labels)]
    if len(node.proto.output) > 1 and node.proto.output[1]:
        outs.append(node.e.value(o.LogSoftmaxOp(scores, 1)))
    return outs


@converter("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(node: Node) -> Values:
    logp, labels = node.input(0), node.input(1)
    if len(node.shape(0)) < 2:
        raise node.fail("input must have rank >= 2 ([N, C, ...])")
    return [reduce_loss(node, nll_loss(node, logp, safe_labels(node, labels)), labels)]


@converter("LpNormalization", since=1)
def lp_normalization(node: Node) -> Values:
    e, x = node.e, node.input(0)
    axis = node.axis(node.attr("axis", -1), len(node.shape(0)))
    p = node.attr("p", 2)
    if p == 1:
        norm = e.reduce_sum(e.value(o.AbsOp(x)), [axis], True)
    elif p == 2:
        norm = e.value(o.SqrtOp(e.reduce_sum(e.mul(x, x), [axis], True)))
    else:
        raise node.fail(f"p must be 1 or 2, got {p}")
    zero = scalar(node, 0.0, norm)  # a zero vector stays zero (ONNX's reference), not 0/0
    return [e.div(x, e.select(e.value(o.EqualOp(norm, zero)), scalar(node, 1.0, norm), norm))]


@converter("MeanVarianceNormalization", since=9)
def mean_variance_normalization(node: Node) -> Values:
    """(x - mean) / (sqrt(variance) + 1e-9) over `axes` (default 0, 2, 3). ONNX's function body takes the
    variance as E[x^2] - E[x]^2; opc as E[(x - mean)^2], the same number without its cancellation."""
    e, x = node.e, node.input(0)
    rank = len(node.shape(0))
    axes = sorted({node.axis(a, rank) for a in node.attr("axes", [0, 2, 3])})
    centered = e.sub(x, e.value(o.ReduceMeanOp(x, axes, True)))
    variance = e.value(o.ReduceMeanOp(e.mul(centered, centered), axes, True))
    return [e.div(centered, e.add(e.value(o.SqrtOp(variance)), scalar(node, 1e-9, variance)))]


@converter("RMSNormalization", since=23)
def rms_normalization(node: Node) -> Values:
    """x / sqrt(mean(x^2 over axis..) + epsilon) * scale, computed in float32 (stash_type 1) for half inputs."""
    e, x = node.e, node.input(0)
    shape = node.shape(0)
    axis = node.axis(node.attr("axis", -1), len(shape))
    if node.attr("stash_type", 1) != 1:
        raise node.fail(f"stash_type {node.attr('stash_type')} is not supported (only 1, float32)")
    element = element_of(x)
    wide = numpy_of(x) in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
    xs = e.cast(x, Float32Type()) if wide else x
    axes = list(range(axis, len(shape)))
    ms = e.value(o.ReduceMeanOp(e.mul(xs, xs), axes, True))
    y = e.div(xs, e.value(o.SqrtOp(e.add(ms, scalar(node, node.attr("epsilon", 1e-5), ms)))))
    if wide:
        y = e.cast(y, element)
    return [e.mul(y, node.input(1))]


@converter("Hardmax", since=13)
def hardmax(node: Node) -> Values:
    """1 at the first max along axis, 0 elsewhere."""
    e, x = node.e, node.input(0)
    shape = node.shape(0)
    axis = node.axis(node.attr("axis", -1), len(shape))
    hit = e.value(o.EqualOp(x, e.value(o.ReduceMaxOp(x, [axis], True))))
    where = e.constant(iota(shape, axis))
    first = e.value(o.ReduceMinOp(e.select(hit, where, e.constant(np.array(shape[axis], np.int64))), [axis], True))
    one = e.value(o.EqualOp(where, first))
    return [e.broadcast_to(e.select(one, scalar(node, 1.0, x), scalar(node, 0.0, x)), shape)]


@converter("LpPool", since=1)
def lp_pool(node: Node) -> Values:
    """(sum over the window of |x|^p)^(1/p): an avg_pool of |x|^p that counts the padding, times the kernel
    size (padding adds nothing to the sum)."""

    e, x = node.e, node.input(0)
    p = float(node.attr("p", 2))
    if p <= 0:
        raise node.fail(f"p must be positive, got {p}")
    ax = e.value(o.AbsOp(x))
    powered = e.mul(ax, ax) if p == 2 else e.value(o.PowOp(ax, scalar(node, p, x)))
    props = pool_props(node, True)
    props["count_include_pad"] = o.BoolAttr.from_bool(True)
    avg = built(node, "avg_pool", lambda: o.AvgPoolOp(powered, props)).results[0]
    total = e.mul(avg, scalar(node, float(math.prod(int(k) for k in node.attr("kernel_shape"))), x))
    return [e.value(o.SqrtOp(total)) if p == 2 else e.value(o.PowOp(total, scalar(node, 1 / p, x)))]


@converter("Col2Im", since=18)
def col2im(node: Node) -> Values:
    """The sum of the columns' blocks into the image: [N, C * K, L] times a 0/1 matrix [K * L, H * W]
    (each block element's pixel, from strides, pads and dilations), known at compile time."""
    e = node.e
    n, ckk, blocks = node.shape(0)
    image = [int(v) for v in node.const(1, "image_shape").reshape(-1)]
    block = [int(v) for v in node.const(2, "block_shape").reshape(-1)]
    r = len(image)
    if len(block) != r:
        raise node.fail(f"image_shape {image} and block_shape {block} differ in rank")
    strides = [int(v) for v in node.attr("strides", [1] * r)]
    dilations = [int(v) for v in node.attr("dilations", [1] * r)]
    pads = [int(v) for v in node.attr("pads", [0] * 2 * r)]
    counts = [(image[d] + pads[d] + pads[r + d] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1
              for d in range(r)]
    k = math.prod(block)
    if ckk % k or blocks != math.prod(counts) or min(counts) < 1:
        raise node.fail(f"input shape {list(node.shape(0))} does not fit image {image}, block {block}: "
                        f"expected [N, C * {k}, {math.prod(counts)}]")
    matrix = np.zeros((k * blocks, math.prod(image)))
    for ki, offset in enumerate(np.ndindex(*block)):
        for li, at in enumerate(np.ndindex(*counts)):
            pixel = [at[d] * strides[d] - pads[d] + offset[d] * dilations[d] for d in range(r)]
            if all(0 <= pixel[d] < image[d] for d in range(r)):
                matrix[ki * blocks + li, np.ravel_multi_index(pixel, image)] += 1
    rows = e.reshape(node.input(0), [n * (ckk // k), k * blocks])
    dtype = numpy_dtype_of(element_of(rows))
    return [e.reshape(e.matmul(rows, e.constant(matrix.astype(dtype))), [n, ckk // k, *image])]


@converter("LRN", since=1)
def lrn(node: Node) -> Values:
    """x / (bias + alpha / size * window sum of x^2 over channels)^beta: the window sum one matmul of the
    channel axis by a 0/1 band matrix (channel c sums c - floor((size-1)/2) .. c + ceil((size-1)/2))."""
    e, x = node.e, node.input(0)
    shape = node.shape(0)
    if len(shape) < 3:
        raise node.fail(f"input must be [N, C, *spatial], got shape {list(shape)}")
    size = int(node.attr("size", 0))
    if size < 1:
        raise node.fail(f"size must be at least 1, got {size}")
    alpha, beta, bias = float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75)), float(node.attr("bias", 1.0))
    channels = shape[1]
    c = np.arange(channels)
    band = ((c[:, None] >= c[None, :] - (size - 1) // 2) & (c[:, None] <= c[None, :] + size // 2)).astype(np.float64)
    window = rows_times(node, e.mul(x, x), 1, band)
    base = e.add(scalar(node, bias, x), e.scale(window, alpha / size))
    return [e.div(x, e.value(o.PowOp(base, scalar(node, beta, x))))]


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
            raise node.fail(f"output_shape {out} differs from the unpooled shape {inferred}: onnxruntime and "
                            "PyTorch index the output_shape (MaxPool's indices index its input), ONNX's reference "
                            "and node test the unpooled shape, padded at the end; refused rather than wrong for one")
    if numpy_of(node.input(0)).kind != "f":
        raise node.fail(f"MaxUnpool of {numpy_of(node.input(0))} data is not supported (floats only)")
    n = math.prod(shape)
    x = e.reshape(node.input(0), [n])
    flat = e.reshape(as_i64(node, node.input(1)), [n])
    zeros = e.full(0.0, o.tensor([math.prod(inferred)], element_of(x)))
    added = e.value(o.GatherGradOp(zeros, flat, x, 0))
    hits = e.value(o.GatherGradOp(zeros, flat, e.full(1.0, x), 0))
    return [e.reshape(e.div(added, e.value(o.MaximumOp(hits, e.full(1.0, hits)))), inferred)]


# DeformConv (opset 19+, 2-D as ONNX's reference defines it), composed of opc ops at import.
#
# Each kernel tap k = (ki, kj) of output position p = (i, j) reads X at
#     (i * stride_h - pad_top + ki * dilation_h + offset_y[n, g, k, p],
#      j * stride_w - pad_left + kj * dilation_w + offset_x[n, g, k, p])
# by bilinear interpolation (GridSample with align_corners, zeros padding: each of the four
# corners outside the image reads 0), times mask[n, g, k, p] (1 without a mask); g is the
# offset group of the input channel. The samples form the im2col matrix [N, group, C/group * K, P],
# and one batched matmul with W [group, O/group, C/group * K] gives the output; B is added.
#
# The four corners' flat indices into X and their weights come from floor and the fractional parts
# (in f32, f64 for f64 inputs; f16/bf16 inputs are computed in f32), so every input is differentiable
# through the ops' own rules: X through the gather, W through the matmul, the offsets through the
# bilinear weights (floor's gradient is 0), the mask through the product.
@converter("DeformConv", since=19)
def deform_conv(node: Node) -> Values:
    xs, ws, offs = node.shape(0), node.shape(1), node.shape(2)
    if len(xs) != 4 or len(ws) != 4 or len(offs) != 4:
        raise node.fail(f"X {list(xs)}, W {list(ws)}, offset {list(offs)}: opc imports 2-D DeformConv "
                        "(4-D X, W and offset), as ONNX's reference implements it")
    n, c, h, w = xs
    oc, cpg, kh, kw = ws
    group, offset_group = int(node.attr("group", 1)), int(node.attr("offset_group", 1))
    kernel = list(node.attr("kernel_shape") or [kh, kw])
    strides, dilations = list(node.attr("strides") or [1, 1]), list(node.attr("dilations") or [1, 1])
    pads = list(node.attr("pads") or [0, 0, 0, 0])
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
        return v if element_of(v) == compute else e.cast(v, compute)

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
        taps_per_axis.append(axis_taps(Pointwise(node, pos), pos, length, "linear", "zeros", (0.0, 0.0)))

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


@converter("Softmax", "LogSoftmax", "Hardmax", since=1)
def coerced_to_2d(node: Node) -> Values:
    """Before opset 13 these ops see the input as 2-D, [prod(shape[:axis]), prod(shape[axis:])] (axis 1 by
    default), and work along its second axis: the same as from 13 along the last axis when axis is the
    last one, else over all the axes from axis on."""
    shape = node.shape(0)
    axis = node.axis(int(node.attr("axis", 1)), len(shape)) if shape else 0
    if axis >= len(shape) - 1:
        return as_newer(node, 13, node.proto.input, attrs={"axis": -1})
    flat = node.e.reshape(node.input(0), [math.prod(shape[:axis]), math.prod(shape[axis:])])
    [y] = as_newer(node, 13, [flat], attrs={"axis": 1})
    return [node.e.reshape(y, shape)]  # type: ignore[arg-type]


@converter("BatchNormalization", since=1)
def batch_norm_spatial(node: Node) -> Values:
    """Opsets 1 to 13, inference (is_test = 1 before 7: the training form updates statistics). spatial = 0
    (opsets 1 to 8): scale, B, mean and var hold one value per element of [C, D1, ...], not per channel."""
    if node.opset < 7 and not int(node.attr("is_test", 0)):
        raise node.fail("is_test = 0 computes batch statistics (training): opc imports inference graphs "
                        "(is_test = 1)")
    if int(node.attr("spatial", 1)) == 1:
        return as_newer(node, 13, node.proto.input, drop=("spatial", "is_test", "consumed_inputs"))
    e, x = node.e, node.input(0)
    lined = [1, *node.shape(1)]
    scale, bias, mean, var = (e.reshape(like_x(node, i), lined) for i in range(1, 5))
    eps = scalar(node, float(node.attr("epsilon", 1e-5)), x)
    y = e.div(e.sub(x, mean), e.value(o.SqrtOp(e.add(var, eps))))
    return [e.broadcast_to(e.add(e.mul(y, scale), bias), node.shape(0))]


@converter("Dropout", since=1)
def dropout_attributes(node: Node) -> Values:
    """Opsets 1 to 11: the ratio an attribute, no training_mode input; before 7, is_test = 0 (the default)
    is training, which draws random numbers unless ratio is 0. The mask is of x's type before 10."""
    if node.opset < 7 and not int(node.attr("is_test", 0)) and float(node.attr("ratio", 0.5)) != 0.0:
        raise node.fail("is_test = 0 with a ratio above 0 draws random numbers: opc imports inference graphs "
                        "(is_test = 1, or ratio 0)")
    one = np.array(1, bool if node.opset >= 10 else node_numpy_dtype(node, 0))
    return [node.input(0), node.e.broadcast_like(node.e.constant(one), node.input(0))]


# Older opsets where the meaning is the one above: the same converter.
same_since({
    1: ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
        "InstanceNormalization"),
    12: ("Dropout", "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"),
})
