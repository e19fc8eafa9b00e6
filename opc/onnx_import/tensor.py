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

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import Float32Type, Float64Type
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.onnx_import.graph import BY_NUMPY, ELEMENT_TYPES, Node, converter, dtype_name, find_converter, numpy_dtype_of

Values = list[SSAValue | np.ndarray]

# ---------------------------------------------------------------------------
# Elementwise
# ---------------------------------------------------------------------------

BINARY = {"Add": o.AddOp, "Sub": o.SubOp, "Mul": o.MulOp, "Div": o.DivOp,
          "Equal": o.EqualOp, "Less": o.LessThanOp, "Greater": o.GreaterThanOp}  # fmt: skip
UNARY = {"Neg": o.NegOp, "Abs": o.AbsOp, "Exp": o.ExpOp, "Log": o.LogOp, "Tanh": o.TanhOp, "Erf": o.ErfOp,
         "Sqrt": o.SqrtOp, "Relu": o.ReluOp, "Sigmoid": o.SigmoidOp,
         "Floor": o.FloorOp, "Ceil": o.CeilOp, "Round": o.RoundOp, "Sin": o.SinOp, "Cos": o.CosOp, "Tan": o.TanOp,
         "Asin": o.AsinOp, "Acos": o.AcosOp, "Atan": o.AtanOp, "Sinh": o.SinhOp, "Cosh": o.CoshOp,
         "Asinh": o.AsinhOp, "Acosh": o.AcoshOp, "Atanh": o.AtanhOp}  # fmt: skip
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
    return [node.item(0)]  # type: ignore[list-item]  # a sequence or optional passes as it is


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
        shortcuts = (1.0, 2.0, 0.5) if numpy_of(x).kind == "f" else (1.0, 2.0)
        if y.size == 1 and y.reshape(-1)[0] in shortcuts and broadcasts_to(y.shape, node.shape(0)):
            p = float(y.reshape(-1)[0])
            out = x if p == 1.0 else node.e.mul(x, x) if p == 2.0 else node.e.value(o.SqrtOp(x))
            return [node.e.reshape(out, np.broadcast_shapes(y.shape, node.shape(0)))]
        float_of_int = numpy_of(x).kind == "i" and y.dtype.kind == "f"
        exponent = node.e.constant(y.astype(np.float64 if float_of_int else node_numpy_dtype(node, 0)))
    else:
        exponent = node.input(1)
    if numpy_of(x).kind == "i" and numpy_of(exponent).kind == "f":  # in double, truncated back (as NumPy's astype)
        f64 = BY_NUMPY[np.dtype(np.float64)]
        wide = node.e.value(o.PowOp(node.e.cast(x, f64), node.e.cast(exponent, f64)))
        return [node.e.cast(wide, x.type.element_type)]  # type: ignore[attr-defined]
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
    """Inference (or training with ratio 0): the identity; the mask is all true. Training with a ratio
    above 0 draws random numbers, which opc does not: refused."""
    if node.has(2) and (not node.known(2) or bool(node.const(2, "training_mode"))):
        ratio = node.const(1, "ratio") if node.has(1) else np.array(0.5)
        if float(np.asarray(ratio).reshape(-1)[0]) != 0.0:
            raise node.fail("training_mode with a ratio above 0 draws random numbers: opc imports inference "
                            "graphs (training_mode false, or ratio 0)")
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
    if kind in ("ReduceMax", "ReduceMin") and numpy_of(x).kind == "b":  # any / all: over 0/1 bytes
        u8 = BY_NUMPY[np.dtype(np.uint8)]
        r = e.value(SIMPLE_REDUCTIONS[kind](e.cast(x, u8), axes, keep))  # of nothing: 0 (any), 255 (all)
        return [e.cast(r, x.type.element_type)]  # type: ignore[attr-defined]
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
    backwards: dict[int, list[int]] = {}  # axis -> the positions a negative step picks (a gather)
    for a, b, e, st in zip(axes, starts, ends, steps):
        a = node.axis(int(a), rank)
        if st == 0:
            raise node.fail(f"step 0 on axis {a}")
        if st < 0:  # ONNX's clamping for negative steps: start into [0, dim - 1], end into [-1, dim - 1]
            dim = src[a]
            b, e = int(b) + dim if b < 0 else int(b), int(e) + dim if e < 0 else int(e)
            backwards[a] = list(range(min(max(b, 0), dim - 1), min(max(e, -1), dim - 1), int(st)))
            continue
        start[a], limit[a] = slice_bounds(src[a], int(b), int(e))
        limit[a] = max(limit[a], start[a])
        strides[a] = int(st)
    x = node.input(0)
    if not (start == [0] * rank and limit == list(src) and strides == [1] * rank):
        x = node.e.value(o.SliceOp(x, start, limit, strides))
    for a, picked in backwards.items():
        x = node.e.value(o.GatherOp(x, node.e.constant(np.array(picked, np.int64)), a))
    return [x]


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


# ---------------------------------------------------------------------------
# Activations and elementwise ops built from opc ops (no new op at run time)
# ---------------------------------------------------------------------------


def gt(node: Node, a: SSAValue, b: SSAValue) -> SSAValue:
    return node.e.value(o.GreaterThanOp(a, b))


def lt(node: Node, a: SSAValue, b: SSAValue) -> SSAValue:
    return node.e.value(o.LessThanOp(a, b))


def expm1_scaled(node: Node, x: SSAValue, alpha: float) -> SSAValue:
    """alpha * (exp(x) - 1)"""
    e = node.e
    return e.mul(e.sub(e.value(o.ExpOp(x)), scalar(node, 1.0, x)), scalar(node, alpha, x))


@converter("Elu", since=6)
def elu(node: Node) -> Values:
    x = node.input(0)
    return [node.e.select(gt(node, x, scalar(node, 0.0, x)), x, expm1_scaled(node, x, node.attr("alpha", 1.0)))]


@converter("Selu", since=6)
def selu(node: Node) -> Values:
    x = node.input(0)
    alpha, gamma = node.attr("alpha", 1.67326319217681884765625), node.attr("gamma", 1.05070102214813232421875)
    y = node.e.select(gt(node, x, scalar(node, 0.0, x)), x, expm1_scaled(node, x, alpha))
    return [node.e.mul(y, scalar(node, gamma, x))]


@converter("Celu", since=12)
def celu(node: Node) -> Values:
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))"""
    e, x = node.e, node.input(0)
    alpha = node.attr("alpha", 1.0)
    zero = scalar(node, 0.0, x)
    neg = expm1_scaled(node, e.div(x, scalar(node, alpha, x)), alpha)
    return [e.add(e.value(o.MaximumOp(x, zero)), e.value(o.MinimumOp(neg, zero)))]


def softplus_of(node: Node, x: SSAValue) -> SSAValue:
    """log(1 + exp(x)) as max(x, 0) + log(1 + exp(-|x|)): no overflow for large x."""
    e = node.e
    tail = e.value(o.LogOp(e.add(scalar(node, 1.0, x), e.value(o.ExpOp(e.neg(e.value(o.AbsOp(x))))))))
    return e.add(e.value(o.MaximumOp(x, scalar(node, 0.0, x))), tail)


@converter("Softplus", since=1)
def softplus(node: Node) -> Values:
    return [softplus_of(node, node.input(0))]


@converter("Softsign", since=1)
def softsign(node: Node) -> Values:
    e, x = node.e, node.input(0)
    return [e.div(x, e.add(scalar(node, 1.0, x), e.value(o.AbsOp(x))))]


def hard_sigmoid_of(node: Node, x: SSAValue, alpha: float, beta: float) -> SSAValue:
    e = node.e
    y = e.add(e.mul(x, scalar(node, alpha, x)), scalar(node, beta, x))
    return e.value(o.MinimumOp(e.value(o.MaximumOp(y, scalar(node, 0.0, x))), scalar(node, 1.0, x)))


@converter("HardSigmoid", since=6)
def hard_sigmoid(node: Node) -> Values:
    return [hard_sigmoid_of(node, node.input(0), node.attr("alpha", 0.2), node.attr("beta", 0.5))]


@converter("HardSwish", since=14)
def hard_swish(node: Node) -> Values:
    x = node.input(0)
    return [node.e.mul(x, hard_sigmoid_of(node, x, 1.0 / 6.0, 0.5))]


@converter("Mish", since=18)
def mish(node: Node) -> Values:
    x = node.input(0)
    return [node.e.mul(x, node.e.value(o.TanhOp(softplus_of(node, x))))]


@converter("ThresholdedRelu", since=10)
def thresholded_relu(node: Node) -> Values:
    x = node.input(0)
    alpha = node.attr("alpha", 1.0)
    return [node.e.select(gt(node, x, scalar(node, alpha, x)), x, scalar(node, 0.0, x))]


@converter("PRelu", since=9)
def prelu(node: Node) -> Values:
    """x for x > 0, slope * x otherwise; slope broadcasts to x (unidirectionally)."""
    e, x, slope = node.e, node.input(0), node.input(1)
    y = e.select(gt(node, x, scalar(node, 0.0, x)), x, e.mul(x, slope))
    return [e.broadcast_to(y, node.shape(0))]


@converter("Sign", since=9)
def sign(node: Node) -> Values:
    e, x = node.e, node.input(0)
    zero, one, minus = scalar(node, 0, x), scalar(node, 1, x), scalar(node, -1, x) if is_signed(x) else None
    below = e.select(lt(node, x, zero), minus, zero) if minus is not None else zero
    return [e.broadcast_to(e.select(gt(node, x, zero), one, below), node.shape(0))]


def is_signed(v: SSAValue) -> bool:
    return numpy_of(v).kind in "fi"


@converter("IsNaN", since=9)
def is_nan(node: Node) -> Values:
    x = node.input(0)
    return [node.e.select(node.e.value(o.EqualOp(x, x)), bool_constant(node, False), bool_constant(node, True))]


@converter("IsInf", since=10)
def is_inf(node: Node) -> Values:
    """x - x is NaN exactly for inf and NaN; x itself is NaN only for NaN."""
    e, x = node.e, node.input(0)
    diff = e.sub(x, x)
    not_finite = e.select(e.value(o.EqualOp(diff, diff)), bool_constant(node, False), bool_constant(node, True))
    is_num = e.value(o.EqualOp(x, x))
    inf = e.select(is_num, not_finite, bool_constant(node, False))
    pos, neg = node.attr("detect_positive", 1), node.attr("detect_negative", 1)
    zero = scalar(node, 0.0, x)
    if pos and neg:
        return [inf]
    if not pos and not neg:
        return [e.broadcast_to(bool_constant(node, False), node.shape(0))]
    side = gt(node, x, zero) if pos else lt(node, x, zero)
    return [e.select(inf, side, bool_constant(node, False))]


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


@converter("RMSNormalization", since=23)
def rms_normalization(node: Node) -> Values:
    """x / sqrt(mean(x^2 over axis..) + epsilon) * scale, computed in float32 (stash_type 1) for half inputs."""
    e, x = node.e, node.input(0)
    shape = node.shape(0)
    axis = node.axis(node.attr("axis", -1), len(shape))
    if node.attr("stash_type", 1) != 1:
        raise node.fail(f"stash_type {node.attr('stash_type')} is not supported (only 1, float32)")
    element = x.type.element_type  # type: ignore[attr-defined]
    wide = numpy_of(x) in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
    xs = e.cast(x, Float32Type()) if wide else x
    axes = list(range(axis, len(shape)))
    ms = e.value(o.ReduceMeanOp(e.mul(xs, xs), axes, True))
    y = e.div(xs, e.value(o.SqrtOp(e.add(ms, scalar(node, node.attr("epsilon", 1e-5), ms)))))
    if wide:
        y = e.cast(y, element)
    return [e.mul(y, node.input(1))]


# ---------------------------------------------------------------------------
# Older opsets: where an op's meaning is the same as from 13, the converter above
# serves from the opset where that meaning began; where it differs (axes, split
# and Clip's bounds as attributes), a converter of its own.
# ---------------------------------------------------------------------------

SAME_SINCE = {
    6: ("Floor", "Ceil"),
    7: (*BINARY, "Sin", "Cos", "Tan", "Asin", "Acos", "Atan",
        "Neg", "Abs", "Exp", "Log", "Tanh", "Sqrt", "Relu", "Sigmoid", "Identity", "Reciprocal", "Pow",
        "Not", "And", "Or", "Xor", "LeakyRelu", "Cast", "MatMul", "Gemm", "Shape", "Size", "Reshape", "Flatten",
        "Transpose", "Concat", "Gather", "Dropout"),
    8: ("Max", "Min", "Sum", "Mean", "Expand"),
    9: ("Erf", "Where", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"),
    10: ("Slice",),
    11: ("Clip", "Round"),
    12: ("LessOrEqual", "GreaterOrEqual"),
}
for first, ops in SAME_SINCE.items():
    for op_type in ops:
        converter(op_type, since=first)(find_converter(op_type, 13))


@converter("Clip", since=7)
def clip_attributes(node: Node) -> Values:
    x = node.input(0)
    lo, hi = node.attr("min", -3.4028234663852886e38), node.attr("max", 3.4028234663852886e38)
    x = node.e.value(o.MaximumOp(x, scalar(node, lo, x)))
    return [node.e.value(o.MinimumOp(x, scalar(node, hi, x)))]


@converter("Squeeze", since=7)
def squeeze_attribute(node: Node) -> Values:
    src = node.shape(0)
    if "axes" in node.attrs:
        axes = {node.axis(int(a), len(src)) for a in node.attr("axes")}
    else:
        axes = {i for i, d in enumerate(src) if d == 1}
    if any(src[a] != 1 for a in axes):
        raise node.fail(f"cannot squeeze axes {sorted(axes)} of shape {list(src)}: a size is not 1")
    return [node.e.reshape(node.input(0), [d for i, d in enumerate(src) if i not in axes])]


@converter("Unsqueeze", since=7)
def unsqueeze_attribute(node: Node) -> Values:
    src = list(node.shape(0))
    given = list(node.attr("axes", []))
    rank = len(src) + len(given)
    for a in sorted(node.axis(int(a), rank) for a in given):
        src.insert(a, 1)
    return [node.e.reshape(node.input(0), src)]


@converter("Split", since=7)
def split_attribute(node: Node) -> Values:
    src = node.shape(0)
    axis = node.axis(node.attr("axis", 0), len(src))
    if "split" in node.attrs:
        sizes = [int(s) for s in node.attr("split")]
    elif node.has(1):  # opset 2..10 also took split as an optional input
        sizes = [int(s) for s in node.const(1, "split").reshape(-1)]
    else:
        parts = len(node.proto.output)
        sizes = [src[axis] // parts] * parts
    if sum(sizes) != src[axis]:
        raise node.fail(f"split sizes {sizes} do not add up to the axis size {src[axis]}")
    outs, offset = [], 0
    for size in sizes:
        start = [offset if i == axis else 0 for i in range(len(src))]
        limit = [offset + size if i == axis else d for i, d in enumerate(src)]
        outs.append(node.e.value(o.SliceOp(node.input(0), start, limit)))
        offset += size
    return outs


@converter("ReduceSum", since=7)
def reduce_sum_attribute(node: Node) -> Values:
    return reduce(node, from_input=False)


converter(*REDUCTIONS, since=7)(reduce_axes_attribute)


# ---------------------------------------------------------------------------
# Index ops built from opc ops: compile-time index arithmetic (NumPy) + gather,
# compares and selects at run time
# ---------------------------------------------------------------------------


def iota(shape: Sequence[int], axis: int, dtype=np.int64) -> np.ndarray:
    """Each element's coordinate along axis, broadcastable against shape."""
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return np.arange(shape[axis], dtype=dtype).reshape(view)


@converter("ArgMax", "ArgMin", since=7)
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


@converter("CumSum", since=11)
def cumsum(node: Node) -> Values:
    """A matmul with a 0/1 triangle along the axis (moved last): exclusive and reverse pick the triangle;
    integers are summed in float64 (exact below 2^53) and cast back."""
    e, x = node.e, node.input(0)
    shape = list(node.shape(0))
    rank = len(shape)
    axis = node.axis(int(node.const(1, "axis").reshape(-1)[0]), rank)
    n = shape[axis]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]  # out[j] = sum_i x[i] * tri[i, j]
    exclusive, reverse = node.attr("exclusive", 0), node.attr("reverse", 0)
    tri = (i > j if exclusive else i >= j) if reverse else (i < j if exclusive else i <= j)
    dtype = numpy_of(x)
    work = dtype if dtype.kind == "f" else np.dtype(np.float64)
    xs = x if dtype == work else e.cast(x, BY_NUMPY[work])
    perm = [d for d in range(rank) if d != axis] + [axis]
    moved = e.transpose(xs, perm)
    moved_shape = [shape[d] for d in perm]
    rows = e.reshape(moved, [max(math.prod(moved_shape[:-1]), 1), n])
    summed = e.reshape(e.matmul(rows, e.constant(tri.astype(work))), moved_shape)
    back = e.transpose(summed, list(np.argsort(perm)))
    return [back if dtype == work else e.cast(back, x.type.element_type)]  # type: ignore[attr-defined]


@converter("Tile", since=7)
def tile(node: Node) -> Values:
    """[d0, d1] tiled [r0, r1]: reshape to [1, d0, 1, d1], broadcast to [r0, d0, r1, d1], reshape."""
    e = node.e
    shape = node.shape(0)
    repeats = [int(r) for r in node.const(1, "repeats").reshape(-1)]
    if len(repeats) != len(shape) or any(r < 1 for r in repeats):
        raise node.fail(f"repeats {repeats} must be one positive count per axis of {list(shape)}")
    kept = [(r, d) for r, d in zip(repeats, shape) if r != 1]
    if not kept:
        return [node.input(0)]
    spread = [v for r, d in zip(repeats, shape) for v in ((1, d) if r != 1 else (d,))]
    full = [v for r, d in zip(repeats, shape) for v in ((r, d) if r != 1 else (d,))]
    x = e.broadcast_to(e.reshape(node.input(0), spread), full)
    return [e.reshape(x, [r * d for r, d in zip(repeats, shape)])]


def flat_positions(shape: Sequence[int]) -> list[np.ndarray]:
    """Per axis, the coordinate of every element of `shape` times that axis's row-major stride."""
    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    return [iota(shape, a) * strides[a] for a in range(len(shape))]


def wrap_negative(node: Node, idx: SSAValue, size: int | SSAValue) -> SSAValue:
    """idx + size where idx < 0 (ONNX's negative indices), in idx's dtype."""
    e = node.e
    dtype = numpy_of(idx)
    zero = e.constant(np.array(0, dtype))
    size_v = e.constant(np.array(size, dtype)) if isinstance(size, int) else size
    return e.select(lt(node, idx, zero), e.add(idx, size_v), idx)


def as_i64(node: Node, v: SSAValue) -> SSAValue:
    return v if numpy_of(v) == np.dtype(np.int64) else node.e.cast(v, BY_NUMPY[np.dtype(np.int64)])


def flat_element_index(node: Node) -> SSAValue:
    """GatherElements / ScatterElements: the index input (along `axis`) as indices into the flattened
    data, idx * stride(axis) + the other coordinates' offsets (known at compile time)."""
    e = node.e
    shape, ishape = node.shape(0), node.shape(1)
    rank = len(shape)
    axis = node.axis(node.attr("axis", 0), rank)
    idx = wrap_negative(node, as_i64(node, node.input(1)), shape[axis])
    strides = [math.prod(shape[i + 1:]) for i in range(rank)]
    base = sum(iota(ishape, a) * strides[a] for a in range(rank) if a != axis) + np.zeros(ishape, np.int64)
    return e.add(e.mul(idx, e.constant(np.array(strides[axis], np.int64))), e.constant(base.astype(np.int64)))


@converter("GatherElements", since=11)
def gather_elements(node: Node) -> Values:
    """out[i, j, k] = x[i, idx[i, j, k], k] (axis 1): one gather from the flattened x at
    idx * stride(axis) + the other coordinates' offsets (known at compile time)."""
    e, shape = node.e, node.shape(0)
    return [e.value(o.GatherOp(e.reshape(node.input(0), [math.prod(shape)]), flat_element_index(node), 0))]


@converter("GatherND", since=12)
def gather_nd(node: Node) -> Values:
    """x[batch..., idx[..., 0], ..., idx[..., m-1], rest...]: the first m axes (after the batch ones)
    merged into one, indexed by sum(idx[..., k] * stride_k) (+ the batch offset), gathered on it."""
    e = node.e
    shape, ishape = node.shape(0), node.shape(1)
    b = node.attr("batch_dims", 0)
    m = ishape[-1]
    if m > len(shape) - b:
        raise node.fail(f"indices' last dim {m} exceeds the rank of the data after batch_dims")
    idx = as_i64(node, node.input(1))
    inner = shape[b:b + m]
    strides = np.array([math.prod(inner[k + 1:]) for k in range(m)], np.int64)
    coords = [e.value(o.SliceOp(idx, [0] * (len(ishape) - 1) + [k], [*ishape[:-1], k + 1]))
              for k in range(m)]
    flat = None
    for k, c in enumerate(coords):
        term = e.mul(wrap_negative(node, c, inner[k]), e.constant(np.array(strides[k], np.int64)))
        flat = term if flat is None else e.add(flat, term)
    flat = e.reshape(flat, ishape[:-1])  # type: ignore[arg-type]
    batch = math.prod(shape[:b])
    rest = list(shape[b + m:])
    x = e.reshape(node.input(0), [batch * math.prod(inner), *rest])
    if b:  # batch element n's rows start at n * prod(inner)
        offset = (np.arange(batch, dtype=np.int64) * math.prod(inner)).reshape(
            [*shape[:b], *[1] * (len(ishape) - 1 - b)])
        flat = e.add(flat, e.constant(offset))
    out = e.value(o.GatherOp(x, flat, 0))
    return [e.reshape(out, [*ishape[:-1], *rest])]


def scatter_into(node: Node, data: SSAValue, flat: SSAValue, updates: SSAValue, rows: list[int]) -> SSAValue:
    """data (reshaped to rows) with updates scattered at the flat row indices: by the reduction attribute,
    replaced (none), added (add), through opc.gather_grad (scatter-add) and a mask of hit rows; mul, min
    and max one update row after the other (in order, so repeated indices combine), at most 256 of them."""
    e = node.e
    reduction = node.attr("reduction", "none")
    if reduction not in ("none", "add", "mul", "min", "max"):
        raise node.fail(f"reduction '{reduction}' is not supported (none, add, mul, min, max)")
    shape = list(data.type.get_shape())  # type: ignore[attr-defined]
    d = e.reshape(data, rows)
    if reduction in ("mul", "min", "max"):  # any dtype: select, mul, minimum, maximum
        return e.reshape(scatter_one_by_one(node, d, flat, updates, reduction), shape)
    if numpy_of(data).kind != "f":
        if reduction != "none":
            raise node.fail(f"opc scatters with reduction '{reduction}' float data only")
        return scatter_by_position(node, data, flat, updates, rows)
    added = e.value(o.GatherGradOp(d, flat, updates, 0))
    if reduction == "add":
        return e.reshape(e.add(d, added), shape)
    ones = e.full(1.0, updates)
    hits = e.value(o.GatherGradOp(d, flat, ones, 0))
    hit = gt(node, hits, scalar(node, 0.0, hits))
    return e.reshape(e.select(hit, added, d), shape)


def scatter_one_by_one(node: Node, d: SSAValue, flat: SSAValue, updates: SSAValue, reduction: str) -> SSAValue:
    e = node.e
    rows = list(d.type.get_shape())  # type: ignore[attr-defined]
    count = math.prod(flat.type.get_shape())  # type: ignore[attr-defined]
    if count > 256:
        raise node.fail(f"reduction '{reduction}' of {count} updates is not supported (at most 256)")
    flat = e.reshape(flat, [count])
    ups = e.reshape(updates, [count, *rows[1:]])
    where = e.constant(np.arange(rows[0], dtype=np.int64).reshape([rows[0]] + [1] * (len(rows) - 1)))
    combine = {"mul": e.mul, "min": lambda a, b: e.value(o.MinimumOp(a, b)),
               "max": lambda a, b: e.value(o.MaximumOp(a, b))}[reduction]
    for u in range(count):
        at = e.reshape(e.value(o.SliceOp(flat, [u], [u + 1])), [1] * len(rows))
        up = e.value(o.SliceOp(ups, [u] + [0] * (len(rows) - 1), [u + 1, *rows[1:]]))
        d = e.select(e.value(o.EqualOp(where, at)), combine(d, up), d)
    return d


def scatter_by_position(node: Node, data: SSAValue, flat: SSAValue, updates: SSAValue, rows: list[int]) -> SSAValue:
    """Integer data (BART's shift of the token ids), exactly: each row learns which update hits it (its
    position + 1 scatter-added in f64, exact below 2**53 updates; 0: none), then gathers that update."""
    e = node.e
    shape = list(data.type.get_shape())  # type: ignore[attr-defined]
    fshape = list(flat.type.get_shape())  # type: ignore[attr-defined]
    n = math.prod(fshape)
    positions = e.constant(np.arange(1, n + 1, dtype=np.float64).reshape(fshape))
    pos = e.value(o.GatherGradOp(e.full(0.0, o.tensor([rows[0]], Float64Type())), flat, positions, 0))
    hit = gt(node, pos, scalar(node, 0.0, pos))
    which = e.select(hit, e.sub(pos, scalar(node, 1.0, pos)), scalar(node, 0.0, pos))
    which = e.cast(which, BY_NUMPY[np.dtype(np.int64)])
    picked = e.value(o.GatherOp(e.reshape(updates, [n, *rows[1:]]), which, 0))
    hit = e.broadcast_to(e.reshape(hit, [rows[0]] + [1] * (len(rows) - 1)), rows)
    return e.reshape(e.select(hit, picked, e.reshape(data, rows)), shape)


@converter("ScatterElements", since=11)
def scatter_elements(node: Node) -> Values:
    return [scatter_into(node, node.input(0), flat_element_index(node), node.input(2), [math.prod(node.shape(0))])]


@converter("ScatterND", since=11)
def scatter_nd(node: Node) -> Values:
    e = node.e
    shape, ishape = node.shape(0), node.shape(1)
    m = ishape[-1]
    idx = as_i64(node, node.input(1))
    inner = shape[:m]
    strides = [math.prod(inner[k + 1:]) for k in range(m)]
    flat = None
    for k in range(m):
        c = e.value(o.SliceOp(idx, [0] * (len(ishape) - 1) + [k], [*ishape[:-1], k + 1]))
        term = e.mul(wrap_negative(node, c, inner[k]), e.constant(np.array(strides[k], np.int64)))
        flat = term if flat is None else e.add(flat, term)
    flat = e.reshape(flat, ishape[:-1])  # type: ignore[arg-type]
    return [scatter_into(node, node.input(0), flat, node.input(2), [math.prod(inner), *shape[m:]])]


@converter("OneHot", since=9)
def one_hot(node: Node) -> Values:
    """values[1] where indices (wrapped) equal the position along the new axis, values[0] elsewhere."""
    e = node.e
    ishape = list(node.shape(0))
    depth = int(np.asarray(node.const(1, "depth")).reshape(-1)[0])
    rank = len(ishape) + 1
    axis = node.axis(node.attr("axis", -1), rank)
    out_shape = ishape[:axis] + [depth] + ishape[axis:]
    idx = node.input(0)
    work = numpy_of(idx) if numpy_of(idx).kind in "iu" else np.dtype(np.int64)
    if numpy_of(idx).kind not in "iu":
        idx = e.cast(idx, BY_NUMPY[work])
    idx = wrap_negative(node, idx, depth) if work.kind == "i" else idx
    idx = e.reshape(idx, ishape[:axis] + [1] + ishape[axis:])
    hit = e.value(o.EqualOp(idx, e.constant(iota(out_shape, axis, work))))
    values = node.input(2)
    vshape = node.shape(2)
    off = e.reshape(e.value(o.SliceOp(values, [0], [1])), [])
    on = e.reshape(e.value(o.SliceOp(values, [1], [2])), [])
    del vshape
    return [e.broadcast_to(e.select(hit, on, off), out_shape)]


@converter("Range", since=11)
def range_(node: Node) -> Values:
    """Known at compile time (start, limit and delta must be)."""
    start, limit, delta = (node.const(i, what) for i, what in enumerate(("start", "limit", "delta")))
    if delta == 0:
        raise node.fail("delta must not be 0")
    n = max(int(np.ceil((limit - start) / delta)), 0)
    return [(start + np.arange(n) * delta).astype(start.dtype)]


@converter("ConstantOfShape", since=9)
def constant_of_shape(node: Node) -> Values:
    shape = [int(d) for d in node.const(0, "shape").reshape(-1)]
    value = node.attr("value")
    fill = np.zeros(1, np.float32) if value is None else __import__("onnx").numpy_helper.to_array(value)
    return [np.full(shape, fill.reshape(-1)[0], fill.dtype)]


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


converter("ReduceLogSum", since=7)(reduce_log_sum_attribute)


# ---------------------------------------------------------------------------
# Pad, Swish, DepthToSpace / SpaceToDepth
# ---------------------------------------------------------------------------

PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def pad_value(node: Node, x: SSAValue, given: SSAValue | float | None) -> SSAValue:
    if isinstance(given, SSAValue):
        return node.e.reshape(given, [])
    return scalar(node, 0.0 if given is None else given, x)


def pad(node: Node, pads: Sequence[int], mode: str, value: SSAValue | float | None,
        axes: Sequence[int] | None = None) -> SSAValue:
    """Axis by axis: a negative pad slices; constant concatenates blocks of the value; reflect, edge
    and wrap gather along the axis at positions NumPy's pad computes at compile time."""
    if mode not in PAD_MODES:
        raise node.fail(f"mode '{mode}' is not supported (constant, reflect, edge, wrap)")
    e, x = node.e, node.input(0)
    shape = list(node.shape(0))
    rank = len(shape)
    axes = list(range(rank)) if axes is None else [node.axis(int(a), rank) for a in axes]
    if len(pads) != 2 * len(axes):
        raise node.fail(f"pads {list(pads)} must hold two counts per axis ({len(axes)} axes)")
    for k, axis in enumerate(axes):
        before, after = int(pads[k]), int(pads[k + len(axes)])
        if before < 0 or after < 0:  # crop first
            start = [max(-before, 0) if i == axis else 0 for i in range(rank)]
            limit = [shape[i] - max(-after, 0) if i == axis else shape[i] for i in range(rank)]
            x = e.value(o.SliceOp(x, start, limit))
            shape[axis] = limit[axis] - start[axis]
            before, after = max(before, 0), max(after, 0)
        if not before and not after:
            continue
        if mode == "constant":
            fill = pad_value(node, x, value)
            parts = [e.broadcast_to(fill, [before if i == axis else d for i, d in enumerate(shape)])] if before else []
            parts.append(x)
            if after:
                parts.append(e.broadcast_to(fill, [after if i == axis else d for i, d in enumerate(shape)]))
            x = e.value(o.ConcatOp(parts, axis))
        else:
            if mode == "reflect" and shape[axis] < 2:
                raise node.fail("reflect padding needs at least two elements along a padded axis")
            positions = np.pad(np.arange(shape[axis], dtype=np.int64), (before, after), mode=PAD_MODES[mode])
            x = e.value(o.GatherOp(x, e.constant(positions), axis))
        shape[axis] += before + after
    return x


@converter("Pad", since=2)
def pad_attributes(node: Node) -> Values:
    return [pad(node, list(node.attr("pads", node.attr("paddings", []))), node.attr("mode", "constant"),
                float(node.attr("value", 0.0)))]


@converter("Pad", since=11)
def pad_inputs(node: Node) -> Values:
    pads = node.const(1, "pads").reshape(-1).tolist()
    value = None
    if node.has(2):
        value = float(node.const(2, "constant_value").reshape(-1)[0]) if node.known(2) else node.input(2)
    axes = node.const(3, "axes").reshape(-1).tolist() if node.has(3) else None
    return [pad(node, pads, node.attr("mode", "constant"), value, axes)]


@converter("Swish", since=24)
def swish(node: Node) -> Values:
    x = node.input(0)
    return [node.e.mul(x, node.e.value(o.SigmoidOp(node.e.mul(x, scalar(node, node.attr("alpha", 1.0), x)))))]


@converter("DepthToSpace", since=11)
def depth_to_space(node: Node) -> Values:
    n, c, h, w = node.shape(0)
    b = int(node.attr("blocksize"))
    e = node.e
    if node.attr("mode", "DCR") == "DCR":
        x = e.reshape(node.input(0), [n, b, b, c // (b * b), h, w])
        x = e.transpose(x, [0, 3, 4, 1, 5, 2])
    else:
        x = e.reshape(node.input(0), [n, c // (b * b), b, b, h, w])
        x = e.transpose(x, [0, 1, 4, 2, 5, 3])
    return [e.reshape(x, [n, c // (b * b), h * b, w * b])]


@converter("SpaceToDepth", since=1)
def space_to_depth(node: Node) -> Values:
    n, c, h, w = node.shape(0)
    b = int(node.attr("blocksize"))
    e = node.e
    x = e.reshape(node.input(0), [n, c, h // b, b, w // b, b])
    crd = node.attr("mode", "DCR") == "CRD"  # channel-major blocks (opset 25's mode)
    x = e.transpose(x, [0, 1, 3, 5, 2, 4] if crd else [0, 3, 5, 1, 2, 4])
    return [e.reshape(x, [n, c * b * b, h // b, w // b])]


# ---------------------------------------------------------------------------
# Resize: separable, each axis an affine map y = x @ W + b along it. W and b come from
# onnx's reference Resize itself, run at compile time on the unit vectors of the axis
# (and on zeros, for b: tf_crop_and_resize's extrapolation value), so every mode,
# coordinate transformation, cubic coefficient and antialias filter means what ONNX says.
# Axes are applied innermost first, as the reference's recursion does.
# ---------------------------------------------------------------------------


def resize_axis_map(node: Node, attrs: dict, n: int, scale: float, roi: tuple[float, float] | None,
                    aspect: tuple[int, int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The axis' table W and offset b (y = x @ W + b) from onnx's reference Resize on the unit vectors.
    aspect = (m_out, m_in, size): keep_aspect_ratio_policy's shared scale m_out / m_in with the axis'
    requested size, whose rounded output the scale alone would not give: the probe gets a second axis of
    m_in elements (each the same) resized to m_out, so that the reference picks that scale, and the
    output along the axis is round(scale * n)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    attrs = {k: v for k, v in attrs.items() if k not in ("axes", "keep_aspect_ratio_policy")}
    probe = np.concatenate([np.eye(n), np.zeros((1, n))]).astype(np.float64)
    inputs = {"x": probe, "scales": np.array([1.0, scale], np.float32)}
    names = ["x", "", "scales"]
    if roi is not None:
        inputs["roi"] = np.array([0.0, roi[0], 1.0, roi[1]], np.float32)
        names[1] = "roi"
    if aspect is not None:
        m_out, m_in, size = aspect
        inputs = {"x": np.ascontiguousarray(np.broadcast_to(probe[:, None, :], (n + 1, m_in, n))),
                  "sizes": np.array([m_out, size], np.int64)}
        names = ["x", "", "", "sizes"]
        attrs.update(axes=[1, 2], keep_aspect_ratio_policy=node.attr("keep_aspect_ratio_policy"))
    one = helper.make_node("Resize", names, ["y"], **attrs)
    try:
        (out,) = ReferenceEvaluator(one, opsets={"": max(node.opset, 11)}).run(None, inputs)  # Upsample: 7, 9
    except Exception as err:  # noqa: BLE001 - the reference raises anything for attributes it refuses
        raise node.fail(f"cannot build the resize tables: {type(err).__name__}: {str(err).splitlines()[0]}") from None
    if aspect is not None:
        out = out[:, 0, :]
    b = out[n]
    return out[:n] - b, b


@converter("Resize", since=11)
def resize(node: Node) -> Values:
    shape = list(node.shape(0))
    rank = len(shape)
    axes = [node.axis(int(a), rank) for a in node.attr("axes", list(range(rank)))]
    crop = node.attr("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize"
    roi = node.const(1, "roi").reshape(-1).astype(np.float64) if crop and node.has(1) else None  # used by crop only
    aspects: dict[int, tuple[int, int, int]] = {}  # axis -> resize_axis_map's aspect
    if node.has(3):
        sizes = [int(s) for s in node.const(3, "sizes").reshape(-1)]
        ratios = [sizes[k] / shape[a] for k, a in enumerate(axes)]
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
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
    if len(scales) != len(axes):
        raise node.fail(f"{len(scales)} scales or sizes for {len(axes)} axes")
    return [resize_scaled(node, node.attrs, axes, scales, roi, aspects)]


def resize_scaled(node: Node, attrs: dict, axes: list[int], scales: list[float],
                  roi: np.ndarray | None, aspects: dict[int, tuple[int, int, int]] | None = None) -> SSAValue:
    """Input 0 resized along axes by scales, with Resize's attributes attrs (Resize, Upsample)."""
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
        w, b = resize_axis_map(node, attrs, current[a], s, axis_roi, (aspects or {}).get(a))
        m = w.shape[1]
        perm = [d for d in range(rank) if d != a] + [a]
        moved = e.transpose(y, perm)
        moved_shape = [current[d] for d in perm]
        rows = e.reshape(moved, [max(math.prod(moved_shape[:-1]), 1), current[a]])
        out = e.matmul(rows, e.constant(w.astype(work)))
        if np.any(b):
            out = e.add(out, e.constant(b.astype(work)))
        out = e.reshape(out, [*moved_shape[:-1], m])
        y = e.transpose(out, list(np.argsort(perm)))
        current[a] = m
    if dtype != work:  # nearest on integers: the 0/1 weights pick exact values
        y = e.cast(y, x.type.element_type)  # type: ignore[attr-defined]
    return y


def einsum_explicit(node: Node, equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """The equation's terms and output with '...' spelled out as letters the equation does not use (the
    ellipsis axes aligned from the right, as they broadcast) and the implicit output made explicit."""
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise node.fail(f"equation '{equation}' has {len(terms)} operands, the node {len(ranks)}")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in equation]
    widths = []
    for t, r in zip(terms, ranks):
        named = len(t.replace("...", ""))
        widths.append(r - named if "..." in t else 0)
        if widths[-1] < 0 or ("..." not in t and named != r) or t.count("...") > 1:
            raise node.fail(f"equation '{equation}': term '{t}' does not fit an operand of rank {r}")
    dots = "".join(free[:max(widths, default=0)])
    terms = [t.replace("...", dots[len(dots) - w:]) for t, w in zip(terms, widths)]
    if not arrow:
        joined = "".join(terms)
        out = dots + "".join(sorted(c for c in set(joined) - set(dots) if joined.count(c) == 1))
    return terms, out.replace("...", dots)


def diagonal(node: Node, x: SSAValue, term: str) -> tuple[SSAValue, str]:
    """x with each letter repeated in its term reduced to one axis, the diagonal: the two axes moved last,
    merged, and gathered at 0, n + 1, 2 (n + 1), ..."""
    e = node.e
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        p = term.index(c)
        q = term.index(c, p + 1)
        shape = list(x.type.get_shape())  # type: ignore[attr-defined]
        rest = [k for k in range(len(term)) if k not in (p, q)]
        n = shape[p]
        x = e.reshape(e.transpose(x, rest + [p, q]), [shape[k] for k in rest] + [n * n])
        x = e.value(o.GatherOp(x, e.constant(np.arange(n, dtype=np.int64) * (n + 1)), len(rest)))
        term = "".join(term[k] for k in rest) + c
    return x, term


@converter("Einsum", since=12)
def einsum(node: Node) -> Values:
    """Operands laid out over all the equation's letters (transpose + size-1 axes), multiplied (broadcast),
    summed over the letters the output lacks, transposed to the output's order. '...' becomes letters of
    its own; a letter repeated within an operand takes its diagonal first. A two-operand contraction
    that opc-fuse or the scheduler could run as a GEMM is not yet one."""
    e = node.e
    equation = node.attr("equation").replace(" ", "")
    terms, out = einsum_explicit(node, equation, [len(node.shape(i)) for i in range(len(node.inputs()))])
    operands = []
    for i, term in enumerate(terms):
        x, term = diagonal(node, node.input(i), term)
        operands.append((x, term))
    terms = [t for _, t in operands]
    letters = sorted(set("".join(terms)), key="".join(terms).index)
    if len(set(out)) != len(out) or any(c not in letters for c in out):
        raise node.fail(f"equation '{equation}': output '{out}' repeats a letter or names one no operand has")
    product = None
    for x, term in operands:
        shape = list(x.type.get_shape())  # type: ignore[attr-defined]
        order = sorted(range(len(term)), key=lambda k: letters.index(term[k]))
        x = e.transpose(x, order)
        spread = [shape[term.index(c)] if c in term else 1 for c in letters]
        x = e.reshape(x, spread)
        product = x if product is None else e.mul(product, x)
    summed = [k for k, c in enumerate(letters) if c not in out]
    kept = [c for c in letters if c in out]
    if summed:
        product = e.reduce_sum(product, summed)
    return [e.transpose(product, [kept.index(c) for c in out])]


@converter("Mod", since=10)
def mod(node: Node) -> Values:
    """C's fmod (fmod=1: the sign of x) or Python's % (fmod=0: the sign of y) from floor:
    t = |x| - floor(|x| / |y|) * |y|, corrected once into [0, |y|), signed. Integers: x - (x / y) * y
    with opc's truncating integer division (exact in every width; x mod 0 is x)."""
    e = node.e
    x, y = node.input(0), node.input(1)
    dtype = numpy_of(x)
    fmod = node.attr("fmod", 0)
    if dtype.kind in "iu":
        r = e.sub(x, e.mul(e.div(x, y), y))
        if not fmod and dtype.kind == "i":  # the sign of y: a nonzero remainder of the other sign moves by y
            zero = e.constant(np.array(0, dtype))
            other = e.select(lt(node, r, zero), gt(node, y, zero),
                             e.select(gt(node, r, zero), lt(node, y, zero), bool_constant(node, False)))
            r = e.select(other, e.add(r, y), r)
        return [e.broadcast_to(r, np.broadcast_shapes(node.shape(0), node.shape(1)))]
    if dtype.kind == "f" and not fmod and node.opset < 28:
        raise node.fail(f"fmod must be 1 for floats before opset 28 (opset {node.opset})")
    work = np.dtype(np.float64) if dtype.kind in "iu" else np.dtype(np.float32) if dtype.itemsize < 4 else dtype
    xs = x if dtype == work else e.cast(x, BY_NUMPY[work])
    ys = y if dtype == work else e.cast(y, BY_NUMPY[work])
    zero = e.constant(np.array(0, work))
    ax, ay = e.value(o.AbsOp(xs)), e.value(o.AbsOp(ys))
    t = e.sub(ax, e.mul(e.value(o.FloorOp(e.div(ax, ay))), ay))
    if dtype.kind == "f":  # x mod inf is x (the formula would give inf - inf)
        t = e.select(e.value(o.EqualOp(ay, e.constant(np.array(np.inf, work)))), ax, t)
    t = e.select(lt(node, t, zero), e.add(t, ay), t)
    t = e.select(e.value(o.LessThanOp(t, ay)), t, e.sub(t, ay))
    r = e.select(lt(node, xs, zero), e.neg(t), t)  # fmod: the sign of x
    if not fmod:  # the sign of y: a nonzero remainder of the other sign moves by y
        other = e.select(lt(node, r, zero), gt(node, ys, zero),
                         e.select(gt(node, r, zero), lt(node, ys, zero), bool_constant(node, False)))
        r = e.select(other, e.add(r, ys), r)
    r = e.broadcast_to(r, np.broadcast_shapes(node.shape(0), node.shape(1)))
    return [r if dtype == work else e.cast(r, x.type.element_type)]  # type: ignore[attr-defined]


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


@converter("ReduceProd", since=7)
def reduce_prod_attribute(node: Node) -> Values:
    return reduce_prod(node, False)


@converter("ReduceProd", since=18)
def reduce_prod_input(node: Node) -> Values:
    return reduce_prod(node, True)


converter("Scatter", since=9)(scatter_elements)  # ScatterElements' older name (opset 9, 10)


@converter("EyeLike", since=9)
def eye_like(node: Node) -> Values:
    """Ones on the k-th diagonal, of the input's shape: known at import time."""
    rows, cols = node.shape(0)
    to = node.attr("dtype")
    dtype = ELEMENT_TYPES[to][2] if to in ELEMENT_TYPES else node_numpy_dtype(node, 0)
    if to is not None and to not in ELEMENT_TYPES:
        raise node.fail(f"dtype {dtype_name(to)} is not supported")
    return [np.eye(rows, cols, int(node.attr("k", 0)), dtype=dtype)]


@converter("Shrink", since=9)
def shrink(node: Node) -> Values:
    """x + bias below -lambd, x - bias above lambd, 0 between."""
    e, x = node.e, node.input(0)
    lambd, bias = node.attr("lambd", 0.5), node.attr("bias", 0.0)
    zero = scalar(node, 0, x)
    low = e.select(lt(node, x, scalar(node, -lambd, x)), e.add(x, scalar(node, bias, x)), zero)
    return [e.select(gt(node, x, scalar(node, lambd, x)), e.sub(x, scalar(node, bias, x)), low)]
