"""One small converter per ONNX op type (and per opset where its meaning changed).

A converter gets a `Node` (graph.py): its inputs as SSA values (`node.input(i)`)
or, for what must be known at compile time (shapes, axes, sizes), as NumPy
arrays (`node.const(i, what)`); its attributes (`node.attr`); and the emitter
`node.e` that builds opc ops through their Python classes. It returns one
value per ONNX output it supports (an SSA value, or a NumPy array when the
result is known at compile time). Nodes whose inputs are all known at compile
time never reach a converter: graph.py evaluates them.

    @converter("Relu")
    def relu(node): return [node.e.value(o.ReluOp(node.input(0)))]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.onnx_import.graph import ELEMENT_TYPES, Node, converter, dtype_name, numpy_dtype_of

Values = list[SSAValue | np.ndarray]

# ---------------------------------------------------------------------------
# Elementwise
# ---------------------------------------------------------------------------

BINARY = {"Add": o.AddOp, "Sub": o.SubOp, "Mul": o.MulOp, "Div": o.DivOp,
          "Equal": o.EqualOp, "Less": o.LessThanOp, "Greater": o.GreaterThanOp}  # fmt: skip
UNARY = {"Neg": o.NegOp, "Abs": o.AbsOp, "Exp": o.ExpOp, "Log": o.LogOp, "Tanh": o.TanhOp, "Erf": o.ErfOp,
         "Sqrt": o.SqrtOp, "Relu": o.ReluOp, "Sigmoid": o.SigmoidOp}  # fmt: skip
VARIADIC = {"Max": o.MaximumOp, "Min": o.MinimumOp, "Sum": o.AddOp}


@converter(*BINARY)
def binary(node: Node) -> Values:
    a, b = node.input(0), node.input(1)
    if node.op_type == "Add":
        fused = bias_after_gemm(node, a, b) or bias_after_gemm(node, b, a)
        if fused is not None:
            return [fused]
    return [node.e.value(BINARY[node.op_type](a, b))]


def bias_after_gemm(node: Node, y: SSAValue, bias: SSAValue) -> SSAValue | None:
    """Linear on [.., K] input: MatMul (a 2-D GEMM over the merged rows, reshaped back, see matmul)
    + bias[N]. The bias is added to the 2-D GEMM before the reshape, so that opc-fuse sees
    matmul + bias and makes one fused_gemm_epilogue of it."""
    reshape = y.owner
    if not isinstance(reshape, o.ReshapeOp) or not isinstance(reshape.x.owner, o.MatmulOp):
        return None
    gemm = reshape.x
    rows, n = gemm.type.get_shape() if len(gemm.type.get_shape()) == 2 else (0, -1)  # type: ignore[attr-defined]
    out, b = list(y.type.get_shape()), list(bias.type.get_shape())  # type: ignore[attr-defined]
    if not b or b[-1] != n or math.prod(b) != n or len(b) > len(out) or out[-1] != n:
        return None
    e = node.e
    return e.reshape(e.add(gemm, e.reshape(bias, [n])), out)


@converter(*UNARY)
def unary(node: Node) -> Values:
    return [node.e.value(UNARY[node.op_type](node.input(0)))]


def pairwise(node: Node, op: type[o.BinaryElementwiseOp]) -> SSAValue:
    """op(op(a, b), c)... over the inputs of a variadic node."""
    args = node.inputs()
    acc = args[0]
    for a in args[1:]:
        acc = node.e.value(op(acc, a))
    return acc


@converter(*VARIADIC)
def variadic(node: Node) -> Values:
    return [pairwise(node, VARIADIC[node.op_type])]


@converter("Mean")
def mean(node: Node) -> Values:
    total = pairwise(node, o.AddOp)
    return [node.e.div(total, scalar(node, len(node.inputs()), total))]


def scalar(node: Node, value: float, like: SSAValue) -> SSAValue:
    """A rank-0 constant of like's element type (broadcasts against anything)."""
    return node.e.constant(np.array(value, numpy_dtype_of(like.type.element_type)))  # type: ignore[attr-defined]


@converter("Identity")
def identity(node: Node) -> Values:
    return [node.input(0)]


@converter("Reciprocal")
def reciprocal(node: Node) -> Values:
    x = node.input(0)
    return [node.e.div(scalar(node, 1.0, x), x)]


@converter("Pow")
def power(node: Node) -> Values:
    """x ** y; a known exponent of 1, 2 or 0.5 becomes x, x * x or sqrt(x) (exact, as ONNX runtimes do)."""
    x = node.input(0)
    if node.known(1):
        y = node.const(1, "exponent")
        if y.size == 1 and y.reshape(-1)[0] in (1.0, 2.0, 0.5) and broadcasts_to(y.shape, node.shape(0)):
            p = float(y.reshape(-1)[0])
            out = x if p == 1.0 else node.e.mul(x, x) if p == 2.0 else node.e.value(o.SqrtOp(x))
            return [node.e.reshape(out, np.broadcast_shapes(y.shape, node.shape(0)))]
        exponent = node.e.constant(y.astype(node_numpy_dtype(node, 0)))
    else:
        exponent = node.input(1)
        if exponent.type.element_type != x.type.element_type:  # type: ignore[attr-defined]
            exponent = node.e.cast(exponent, x.type.element_type)  # type: ignore[attr-defined]
    return [node.e.value(o.PowOp(x, exponent))]


def broadcasts_to(small: Sequence[int], shape: Sequence[int]) -> bool:
    return len(small) <= len(shape) and all(s in (1, d) for s, d in zip(small[::-1], shape[::-1]))


def node_numpy_dtype(node: Node, i: int) -> np.dtype:
    return numpy_dtype_of(node.element(i))


@converter("Where")
def where(node: Node) -> Values:
    return [node.e.select(node.input(0), node.input(1), node.input(2))]


# Logic on i1 through select (opc's compares take numbers only).
def bool_constant(node: Node, value: bool) -> SSAValue:
    return node.e.constant(np.array(value))


@converter("Not")
def logical_not(node: Node) -> Values:
    return [node.e.select(node.input(0), bool_constant(node, False), bool_constant(node, True))]


@converter("And")
def logical_and(node: Node) -> Values:
    return [node.e.select(node.input(0), node.input(1), bool_constant(node, False))]


@converter("Or")
def logical_or(node: Node) -> Values:
    return [node.e.select(node.input(0), bool_constant(node, True), node.input(1))]


@converter("Xor")
def logical_xor(node: Node) -> Values:
    b = node.input(1)
    not_b = node.e.select(b, bool_constant(node, False), bool_constant(node, True))
    return [node.e.select(node.input(0), not_b, b)]


@converter("LessOrEqual", "GreaterOrEqual")
def compare_or_equal(node: Node) -> Values:
    a, b = node.input(0), node.input(1)
    strict = o.LessThanOp if node.op_type == "LessOrEqual" else o.GreaterThanOp
    return [node.e.select(node.e.value(strict(a, b)), bool_constant(node, True), node.e.value(o.EqualOp(a, b)))]


@converter("LeakyRelu")
def leaky_relu(node: Node) -> Values:
    x = node.input(0)
    zero = scalar(node, 0.0, x)
    positive = node.e.value(o.GreaterThanOp(x, zero))
    return [node.e.select(positive, x, node.e.mul(x, scalar(node, node.attr("alpha", 0.01), x)))]


@converter("Clip")
def clip(node: Node) -> Values:
    """min(max(x, lo), hi) with optional bounds."""
    x = node.input(0)
    if node.has(1):
        x = node.e.value(o.MaximumOp(x, node.input(1)))
    if node.has(2):
        x = node.e.value(o.MinimumOp(x, node.input(2)))
    return [x]


@converter("Gelu", since=20)
def gelu(node: Node) -> Values:
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise node.fail(f"approximate must be 'none' or 'tanh', got '{approximate}'")
    return [node.e.value(o.GeluOp(node.input(0), approximate=approximate == "tanh"))]


@converter("Cast")
def cast(node: Node) -> Values:
    to = node.attr("to")
    if to not in ELEMENT_TYPES:
        raise node.fail(f"cast to {dtype_name(to)} is not supported")
    x = node.input(0)
    element = ELEMENT_TYPES[to][1]
    return [x if x.type.element_type == element else node.e.cast(x, element)]  # type: ignore[attr-defined]


@converter("CastLike", since=15)
def cast_like(node: Node) -> Values:
    x, element = node.input(0), node.element(1)
    return [x if x.type.element_type == element else node.e.cast(x, element)]  # type: ignore[attr-defined]


@converter("Dropout")
def dropout(node: Node) -> Values:
    """Inference: the identity (a training-mode Dropout is refused); the mask is all true."""
    if node.has(2) and (not node.known(2) or bool(node.const(2, "training_mode"))):
        raise node.fail("training_mode must be false: opc imports inference graphs")
    return [node.input(0), np.ones(node.shape(0), bool)]


# ---------------------------------------------------------------------------
# Linear algebra
# ---------------------------------------------------------------------------


@converter("MatMul")
def matmul(node: Node) -> Values:
    """NumPy matmul: 1-D operands promoted; [.., M, K] @ [K, N] as one 2-D GEMM over the merged rows."""
    x, y = node.input(0), node.input(1)
    xs, ys = node.shape(0), node.shape(1)
    e = node.e
    if len(xs) == 1:
        x, xs = e.reshape(x, (1, *xs)), (1, *xs)
    if len(ys) == 1:
        y, ys = e.reshape(y, (*ys, 1)), (*ys, 1)
    out_shape = list(np.broadcast_shapes(xs[:-2], ys[:-2])) + [xs[-2], ys[-1]]
    if len(ys) == 2 and len(xs) > 2:  # rows of every batch share the weight: one GEMM
        rows = e.reshape(x, (math.prod(xs[:-1]), xs[-1]))
        r = e.reshape(e.matmul(rows, y), out_shape)
    else:
        r = e.matmul(x, y)
    final = out_shape[:]
    if len(node.shape(0)) == 1:
        del final[-2]
    if len(node.shape(1)) == 1:
        del final[-1]
    return [e.reshape(r, final)]


@converter("Gemm")
def gemm(node: Node) -> Values:
    """alpha * op(A) @ op(B) + beta * C."""
    e = node.e
    y = e.matmul(node.input(0), node.input(1), bool(node.attr("transA", 0)), bool(node.attr("transB", 0)))
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    if alpha != 1.0:
        y = e.mul(y, scalar(node, alpha, y))
    if node.has(2) and beta != 0.0:
        c = node.input(2)
        if beta != 1.0:
            c = e.mul(c, scalar(node, beta, c))
        y = e.add(y, c)
    return [y]


# ---------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------


@converter("Shape")
def shape(node: Node) -> Values:
    dims = np.array(node.shape(0), np.int64)
    rank = len(dims)
    start, end = node.attr("start", 0), node.attr("end", rank)
    return [dims[slice(start, end)]]


@converter("Size")
def size(node: Node) -> Values:
    return [np.array(math.prod(node.shape(0)), np.int64)]


@converter("Reshape")
def reshape(node: Node) -> Values:
    src = node.shape(0)
    want = [int(d) for d in node.const(1, "shape").reshape(-1)]
    if not node.attr("allowzero", 0):
        want = [src[i] if d == 0 else d for i, d in enumerate(want)]
    if want.count(-1) > 1:
        raise node.fail(f"shape {want} has more than one -1")
    if -1 in want:
        known = math.prod(d for d in want if d != -1)
        if known == 0 or math.prod(src) % known:
            raise node.fail(f"cannot reshape {list(src)} to {want}")
        want[want.index(-1)] = math.prod(src) // known
    if math.prod(want) != math.prod(src):
        raise node.fail(f"cannot reshape {list(src)} ({math.prod(src)} elements) to {want}")
    return [node.e.reshape(node.input(0), want)]


@converter("Flatten")
def flatten(node: Node) -> Values:
    src = node.shape(0)
    axis = node.attr("axis", 1)
    axis = axis + len(src) if axis < 0 else axis  # in [-rank, rank]
    if not 0 <= axis <= len(src):
        raise node.fail(f"axis {node.attr('axis')} is out of range for rank {len(src)}")
    return [node.e.reshape(node.input(0), (math.prod(src[:axis]), math.prod(src[axis:])))]


@converter("Squeeze")
def squeeze(node: Node) -> Values:
    src = node.shape(0)
    if node.has(1):
        axes = {node.axis(int(a), len(src)) for a in node.const(1, "axes").reshape(-1)}
        bad = [a for a in axes if src[a] != 1]
        if bad:
            raise node.fail(f"cannot squeeze axis {bad[0]} of shape {list(src)}: its size is not 1")
    else:
        axes = {i for i, d in enumerate(src) if d == 1}
    return [node.e.reshape(node.input(0), [d for i, d in enumerate(src) if i not in axes])]


@converter("Unsqueeze")
def unsqueeze(node: Node) -> Values:
    src = list(node.shape(0))
    rank = len(src) + node.const(1, "axes").size
    axes = sorted(node.axis(int(a), rank) for a in node.const(1, "axes").reshape(-1))
    for a in axes:
        src.insert(a, 1)
    return [node.e.reshape(node.input(0), src)]


@converter("Transpose")
def transpose(node: Node) -> Values:
    rank = len(node.shape(0))
    perm = node.attr("perm", list(range(rank))[::-1])
    return [node.e.transpose(node.input(0), [int(p) for p in perm])]


@converter("Expand")
def expand(node: Node) -> Values:
    src = node.shape(0)
    want = tuple(int(d) for d in node.const(1, "shape").reshape(-1))
    try:
        out = np.broadcast_shapes(src, want)
    except ValueError:
        raise node.fail(f"cannot expand {list(src)} to {list(want)}") from None
    x = node.input(0)
    return [node.e.broadcast_to(x, out)]


@converter("Trilu", since=14)
def trilu(node: Node) -> Values:
    """Zero above (upper=0) or below (upper=1) the k-th diagonal: select with a constant mask."""
    x = node.input(0)
    rows, cols = node.shape(0)[-2:]
    k = int(node.const(1, "k", np.array(0)))
    keep = np.triu(np.ones((rows, cols), bool), k) if node.attr("upper", 1) else np.tril(np.ones((rows, cols), bool), k)
    zero = node.e.constant(np.zeros((), node_numpy_dtype(node, 0)))
    return [node.e.select(node.e.constant(keep), x, zero)]


@converter("Concat")
def concat(node: Node) -> Values:
    args = node.inputs()
    rank = len(node.shape(0))
    return [args[0] if len(args) == 1 else node.e.value(o.ConcatOp(args, node.axis(node.attr("axis"), rank)))]


def slice_bounds(dim: int, start: int, end: int) -> tuple[int, int]:
    """ONNX Slice's clamping of one axis, for a positive step."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    return min(max(start, 0), dim), min(max(end, 0), dim)


@converter("Slice")
def slice_(node: Node) -> Values:
    src = node.shape(0)
    rank = len(src)
    starts = node.const(1, "starts").reshape(-1).tolist()
    ends = node.const(2, "ends").reshape(-1).tolist()
    axes = node.const(3, "axes", np.arange(len(starts))).reshape(-1).tolist()
    steps = node.const(4, "steps", np.ones(len(starts), np.int64)).reshape(-1).tolist()
    start, limit, strides = [0] * rank, list(src), [1] * rank
    for a, b, e, st in zip(axes, starts, ends, steps):
        a = node.axis(int(a), rank)
        if st <= 0:
            raise node.fail(f"step {st} on axis {a}: opc slices with positive steps only")
        start[a], limit[a] = slice_bounds(src[a], int(b), int(e))
        limit[a] = max(limit[a], start[a])
        strides[a] = int(st)
    if start == [0] * rank and limit == list(src) and strides == [1] * rank:
        return [node.input(0)]
    return [node.e.value(o.SliceOp(node.input(0), start, limit, strides))]


def split_sizes(node: Node, dim: int) -> list[int]:
    """The `split` input, else equal parts (num_outputs from opset 18: the last part may be smaller)."""
    if node.has(1):
        sizes = node.const(1, "split").reshape(-1).tolist()
    else:
        parts = node.attr("num_outputs", len(node.proto.output))
        chunk = -(-dim // parts)
        sizes = [min(chunk, dim - i * chunk) for i in range(parts)]
    if sum(sizes) != dim or any(s < 0 for s in sizes):
        raise node.fail(f"split sizes {sizes} do not add up to the axis size {dim}")
    return [int(s) for s in sizes]


@converter("Split")
def split(node: Node) -> Values:
    src = node.shape(0)
    axis = node.axis(node.attr("axis", 0), len(src))
    outs, offset = [], 0
    for size in split_sizes(node, src[axis]):
        start = [offset if i == axis else 0 for i in range(len(src))]
        limit = [offset + size if i == axis else d for i, d in enumerate(src)]
        outs.append(node.e.value(o.SliceOp(node.input(0), start, limit)))
        offset += size
    return outs


@converter("Gather")
def gather(node: Node) -> Values:
    rank = len(node.shape(0))
    return [node.e.value(o.GatherOp(node.input(0), node.input(1), node.axis(node.attr("axis", 0), rank)))]


# ---------------------------------------------------------------------------
# Normalizations and losses
# ---------------------------------------------------------------------------


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
    lab_shape = list(labels.type.get_shape())  # type: ignore[attr-defined]
    lab = e.reshape(labels, [lab_shape[0], 1, *lab_shape[1:]])
    loss, _ = e.emit(o.SoftmaxCrossEntropyOp(logits, lab, 1)).results
    return e.reshape(loss, lab_shape)


def nll_loss(node: Node, logp: SSAValue, labels: SSAValue) -> SSAValue:
    """-logp[label] per sample: a one-hot select over the class axis (1) and a sum."""
    e = node.e
    shape = list(logp.type.get_shape())  # type: ignore[attr-defined]
    classes = np.arange(shape[1], dtype=numpy_of(labels)).reshape([1, shape[1]] + [1] * (len(shape) - 2))
    lab_shape = list(labels.type.get_shape())  # type: ignore[attr-defined]
    hit = e.value(o.EqualOp(e.reshape(labels, [lab_shape[0], 1, *lab_shape[1:]]), e.constant(classes)))
    picked = e.select(hit, logp, scalar(node, 0.0, logp))
    return e.neg(e.reduce_sum(picked, [1]))


def numpy_of(v: SSAValue) -> np.dtype:
    return numpy_dtype_of(v.type.element_type)  # type: ignore[attr-defined]


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
    axes = list(range(len(loss.type.get_shape())))  # type: ignore[attr-defined]
    total = e.reduce_sum(loss, axes)
    if reduction == "sum":
        return total
    if reduction != "mean":
        raise node.fail(f"reduction must be none, sum or mean, got '{reduction}'")
    if weight is None:
        return e.div(total, scalar(node, math.prod(loss.type.get_shape()), total))  # type: ignore[attr-defined]
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
