"""Tensor ops: shapes (Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Expand, Tile,
Concat, Slice, Split, Pad, DepthToSpace, SpaceToDepth, CenterCropPad, ReverseSequence), gathers and
scatters (Gather, GatherElements, GatherND, ScatterElements, ScatterND, OneHot), constants
(Range, ConstantOfShape, EyeLike, Trilu) and the ops whose output shape depends on values
(Compress, NonZero, Unique: on run-time values through opc's data sizes, docs/shapes.md).

Index ops are compile-time index arithmetic (NumPy) plus gathers, compares and selects at run
time. An input a converter needs at compile time (Compress's condition, NonZero's input, ...) is
bound by value (`Node.const`): the model compiles for that value, which joins the compile key as
shape inputs do; without the value (opc.import_onnx) the import stops with one line naming the
input."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from xdsl.dialects import arith, tensor
from xdsl.dialects.builtin import Float64Type, IndexType, IntegerAttr, f64, i32, i64
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.dialects import slices
from opc.dialects.kinds import element_of, shape_of
from opc.dialects.sizes import FunctionSizes
from opc.onnx_import.common import (
    Values,
    along,
    as_i64,
    evaluated,
    gt,
    iota,
    lt,
    node_numpy_dtype,
    nonempty,
    numpy_of,
    scalar,
)
from opc.onnx_import.graph import (
    BY_NUMPY,
    ELEMENT_TYPES,
    Node,
    as_newer,
    converter,
    dtype_name,
    folder,
    numpy_dtype_of,
    same_since,
)
from opc.onnx_import.run_time_sizes import (
    WHOLE_END,
    SizeNeeded,
    broadcast_sizes,
    is_symbolic,
    sizes_array,
    slice_limits,
)
from opc.symbolic import Size, Sym, product_quotient


@converter("Shape")
def shape(node: Node) -> Values:
    dims = sizes_array(node.shape(0), [len(node.shape(0))])  # run-time sizes stay symbols (run_time_sizes.py)
    rank = len(dims)
    start, end = node.attr("start", 0), node.attr("end", rank)
    return [dims[slice(start, end)]]


@converter("Size")
def size(node: Node) -> Values:
    return [sizes_array([math.prod(node.shape(0))], [])]


def size_list(array: np.ndarray) -> list[Size]:
    """A shape input's entries: numbers, or sizes known at run time (a Shape node's)."""
    return [v if isinstance(v, Sym) else int(v) for v in np.asarray(array).reshape(-1)]


@converter("Reshape")
def reshape(node: Node) -> Values:
    src = node.shape(0)
    want = size_list(node.const(1, "shape"))
    if not node.attr("allowzero", 0):
        want = [src[i] if d == 0 else d for i, d in enumerate(want)]
    if want.count(-1) > 1:
        raise node.fail(f"shape {want} has more than one -1")
    total = math.prod(src)
    if -1 in want:
        inferred = product_quotient(src, [d for d in want if d != -1])
        if inferred is None:
            symbolic = any(isinstance(d, Sym) for d in (*src, *want))
            raise (SizeNeeded(f"{node.label}: cannot infer the -1 of {want} from {list(src)}") if symbolic
                   else node.fail(f"cannot reshape {list(src)} to {want}"))
        want[want.index(-1)] = inferred
    if math.prod(want) != total and not any(isinstance(d, Sym) for d in (*src, *want)):
        raise node.fail(f"cannot reshape {list(src)} ({total} elements) to {want}")
    # element counts known only at run time (a loop's stacked rows to the shape the model declares)
    # are compared at the call, by opc.reshape's check: a ValueError naming both where they differ
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
    want = size_list(node.const(1, "shape"))
    out = broadcast_sizes(src, want)
    if out is None:
        raise node.fail(f"cannot expand {list(src)} to {list(want)}")
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
    if not (node.known(1) and node.known(2)):
        sliced = slice_by_values(node)
        if sliced is not None:
            return [sliced]
    src = node.shape(0)
    rank = len(src)
    starts = node.const(1, "starts").reshape(-1).tolist()
    ends = node.const(2, "ends").reshape(-1).tolist()
    axes = node.const(3, "axes", np.arange(len(starts))).reshape(-1).tolist()
    steps = node.const(4, "steps", np.ones(len(starts), np.int64)).reshape(-1).tolist()
    start: list[Size] = [0] * rank
    limit: list[Size] = list(src)
    strides = [1] * rank
    backwards: dict[int, list[int]] = {}  # axis -> the positions a negative step picks (a gather)
    run_time: dict[int, tuple[Size, Size, int]] = {}  # axis -> its bounds and step, clamped at run time
    for a, b, e, st in zip(axes, starts, ends, steps):
        a = node.axis(int(a), rank)
        if isinstance(st, Sym) or st == 0:
            raise node.fail(f"step {st} on axis {a}: a step is a nonzero number")
        if isinstance(src[a], Sym) or isinstance(b, Sym) or isinstance(e, Sym):  # sizes known at run time
            run_time[a] = (b, e, int(st))
            continue
        if st < 0:  # ONNX's clamping for negative steps: start into [0, dim - 1], end into [-1, dim - 1]
            dim = src[a]
            b, e = int(b) + dim if b < 0 else int(b), int(e) + dim if e < 0 else int(e)
            backwards[a] = list(range(min(max(b, 0), dim - 1), min(max(e, -1), dim - 1), int(st)))
            continue
        start[a], limit[a] = slice_bounds(int(src[a]), int(b), int(e))
        limit[a] = max(int(limit[a]), int(start[a]))
        strides[a] = int(st)
    x = node.input(0)
    if run_time:
        x = run_time_slice(node, x, src, run_time, start, limit, strides)
    elif not (start == [0] * rank and limit == list(src) and strides == [1] * rank):
        x = node.e.value(o.SliceOp(x, [int(v) for v in start], slice_limits(limit), strides))
    for a, picked in backwards.items():
        x = node.e.value(o.GatherOp(x, node.e.constant(np.array(picked, np.int64)), a))
    return [x]


def slice_by_values(node: Node) -> SSAValue | None:
    """A Slice whose starts or ends are known at run time only, where each axis's end - start is a
    number known at compile time (`x[i:i+1]` by a loop's iteration number): one
    tensor.extract_slice of that static size at an offset read at run time, so a loop body slicing
    by its iteration number is imported once. ONNX clamps a span past either end to fewer
    elements, a size that would be known only at run time: there, the offset is made one the
    slice's own check refuses (a ValueError at the call), never a shorter or wrong slice. None where
    a span is not of that form (the starts and ends are then needed at compile time)."""
    src = node.shape(0)
    rank = len(src)
    n = int(np.prod([int(d) for d in node.shape(1)]))
    axes = node.const(3, "axes", np.arange(n)).reshape(-1).tolist()
    steps = node.const(4, "steps", np.ones(n, np.int64)).reshape(-1).tolist()
    e = node.e
    offsets: list[int | SSAValue] = [0] * rank
    sizes: list[int | SSAValue] = [d if isinstance(d, int) else e.size_operands([d])[0] for d in src]
    shape: list[Size] = list(src)
    forms = [(node.axis(int(a), rank), offset_form(node, 1, k), offset_form(node, 2, k))
             for k, a in enumerate(axes)]
    spans = not any(node.proto.input[i] in node.importer.graph_inputs for i in (1, 2))
    if any(first is None or last is None or step != 1 or not isinstance(src[a], int)
           or first[0] != last[0] and not spans for (a, first, last), step in zip(forms, steps)):
        return None
    for a, first, last in forms:
        assert first is not None and last is not None and isinstance(src[a], int)
        if first[0] != last[0]:  # a size read at run time
            offsets[a], sizes[a] = value_span(node, first, last, src[a])
            shape[a] = e.tracker.sizes.scalars[sizes[a]] if e.tracker is not None else src[a]
            continue
        if first[0] is None:  # both numbers after all (a constant the importer made)
            b, end = slice_bounds(src[a], first[1], last[1])
            offsets[a], shape[a] = b, max(end - b, 0)
        else:
            offsets[a], shape[a] = span_at(node, first[0], first[1], last[1] - first[1], src[a])
        sizes[a] = shape[a]
    return e.value(slices.extract_slice(node.input(0), offsets, sizes, [1] * rank,
                                        o.tensor(shape,
                                                 element_of(node.input(0)))))


Base = tuple[SSAValue, int] | None  # a run-time value's element (value, flat position); None: the number 0


def offset_form(node: Node, i: int, k: int) -> tuple[Base, int] | None:
    """Element k of input i (a Slice's starts or ends) as base + c, c a number known at compile
    time: through reshapes, broadcasts of one element, and adding or subtracting constants. None
    for a run-time size (a Shape's)."""
    if node.known(i):
        v = node.const(i, "bound").reshape(-1)[k]
        return None if isinstance(v, Sym) else (None, int(v))
    return offset_of(node.input(i), k)


def offset_of(v: SSAValue, k: int) -> tuple[Base, int]:
    op = v.owner
    if isinstance(op, o.ReshapeOp) and not op.sizes:  # row-major order kept
        return offset_of(op.x, k)
    if isinstance(op, o.BroadcastToOp) and not op.sizes and count(op.x) == 1:
        return offset_of(op.x, 0)
    if isinstance(op, arith.ConstantOp) and (values := int_constant(v)) is not None:
        return None, int(values.reshape(-1)[k])
    terms = ((op.lhs, op.rhs, 1), (op.rhs, op.lhs, 1)) if isinstance(op, o.AddOp) else \
        ((op.lhs, op.rhs, -1),) if isinstance(op, o.SubOp) else ()
    for x, c, sign in terms:
        values = int_constant(c)
        if values is not None and values.size in (1, count(v)) and count(x) in (1, count(v)):
            base, off = offset_of(x, k if count(x) > 1 else 0)
            return base, off + sign * int(values.reshape(-1)[k if values.size > 1 else 0])
    return (v, k), 0


def count(v: SSAValue) -> int:
    return int(np.prod([int(d) for d in shape_of(v)]))


def int_constant(v: SSAValue) -> np.ndarray | None:
    """The values of an integer arith.constant tensor, else None."""
    op = v.owner
    if not isinstance(op, arith.ConstantOp) or element_of(v) not in (i64, i32):
        return None
    return np.array(op.value.get_values(), np.int64).reshape(shape_of(v))  # type: ignore[union-attr]


def value_span(node: Node, first: tuple[Base, int], last: tuple[Base, int], dim: int) -> tuple[SSAValue, SSAValue]:
    """The offset and length of [start, end) on a static dim, start and end read at run time and
    clamped as ONNX does (negative: from the end; then into [0, dim]): a size read from values, at
    most dim (the bound a loop that stacks such slices pads them to)."""
    e = node.e
    lo, hi = (clamped(e, bound_index(e, *f), dim) for f in (first, last))
    length = e.value(arith.MaxSIOp(e.value(arith.SubiOp(hi, lo)), index_of(e, 0)))
    if e.tracker is not None:
        s = e.tracker.sizes
        s.scalars[length] = s.fresh_data(length.owner, dim, "the length of a slice")  # type: ignore[arg-type]
    return lo, length


def bound_index(e, base: Base, c: int) -> SSAValue:  # noqa: ANN001  (a NodeEmitter)
    """base + c as an index value (a bound past every size: INT64_MAX, as the end)."""
    if base is None:
        return index_of(e, min(max(c, -WHOLE_END), WHOLE_END))
    v, k = base
    flat = e.reshape(v if element_of(v) == i64 else e.cast(v, i64), [count(v)])
    start = e.value(tensor.ExtractOp(flat, [index_of(e, k)], i64))
    return e.value(arith.AddiOp(e.value(arith.IndexCastOp(start, IndexType())), index_of(e, c)))


def clamped(e, v: SSAValue, dim: int) -> SSAValue:  # noqa: ANN001  (a NodeEmitter)
    """ONNX's clamp of a slice bound for a positive step: v + dim where negative, then into [0, dim]."""
    zero = index_of(e, 0)
    wrapped = e.value(arith.SelectOp(e.value(arith.CmpiOp(v, zero, "slt")),
                                     e.value(arith.AddiOp(v, index_of(e, dim))), v))
    return e.value(arith.MinSIOp(e.value(arith.MaxSIOp(wrapped, zero)), index_of(e, dim)))


def span_at(node: Node, base: tuple[SSAValue, int], b: int, c: int, dim: int) -> tuple[SSAValue | int, int]:
    """The offset and size of the span [start, start + c) on a static dim, start = base + b read at
    run time: ONNX's from-the-end count where both ends are negative, and, where ONNX would clamp
    (a span reaching past either end, or from a negative start to a nonnegative end), an offset
    the slice's check refuses (dim + 1, or a negative one)."""
    if c <= 0:
        return 0, 0
    e = node.e
    s = bound_index(e, base, b)
    zero = index_of(e, 0)
    wrapped = e.value(arith.AddiOp(s, index_of(e, dim)))
    below = e.value(arith.CmpiOp(e.value(arith.AddiOp(s, index_of(e, c))), zero, "slt"))  # both ends negative
    negative = e.value(arith.CmpiOp(s, zero, "slt"))
    from_end = e.value(arith.SelectOp(below, wrapped, index_of(e, dim + 1)))
    return e.value(arith.SelectOp(negative, from_end, s)), c


def index_of(e, n: int) -> SSAValue:  # noqa: ANN001  (a NodeEmitter)
    return e.value(arith.ConstantOp(IntegerAttr(n, IndexType())))


def clamp_bound(s: FunctionSizes, v: Size, dim: Size, lo: Size, hi: Size) -> Size:
    """A Slice start or end on a dim known at run time, as onnxruntime clamps it: a negative number
    counts from the end (INT64_MAX and -INT64_MAX are past either end), then min(max(v, lo), hi).
    A bound computed from run-time sizes (`x[:, :s - 1]`) counts from the end where it comes to a
    negative number: v + dim * min(max(-v, 0), 1), the indicator of v < 0 in integers (0, and no
    derived size, where v is a size: >= 0)."""
    if isinstance(v, Sym):
        negative = s.derive("min", s.derive("max", -v, 0), 1)
        return s.derive("min", s.derive("max", v + dim * negative, lo), hi)
    v = int(v)
    if v >= WHOLE_END or v <= -WHOLE_END:
        return s.derive("min", lo if v < 0 else hi, hi)
    if v >= 0:  # >= lo already
        return s.derive("min", v, hi)
    low = s.derive("max", dim + v, lo)  # <= hi already, unless lo > hi (a negative step on an empty dim)
    return low if s.nonnegative(hi - lo) else s.derive("min", low, hi)


def run_time_span(s: FunctionSizes, dim: Size, b: Size, e: Size, step: int) -> tuple[Size, Size, Size]:
    """One axis of a Slice with run-time sizes: the offset and length of the contiguous span it walks
    (within [0, dim] for every size) and how many elements it picks there. A positive step walks
    [start, end) with start and end clamped into [0, dim]; a negative one (end, start] with start
    clamped into [0, dim - 1] and end into [-1, dim - 1], ONNX's (and onnxruntime's) rule.
    A dim computed from the data (a NonZero's count) is known only once its op ran, after the call
    computed the clamps: its slice is taken as given, step 1 (out of range: the slice's ValueError)."""
    if s.data_symbols(dim) or s.data_symbols(b) or s.data_symbols(e):
        if step != 1:
            raise SizeNeeded(f"a slice with step {step} of a size computed from the data ({dim})")
        first, last = data_bound(b, dim), data_bound(e, dim)
        return first, last - first, last - first
    if step > 0:
        first, last = clamp_bound(s, b, dim, 0, dim), clamp_bound(s, e, dim, 0, dim)
        offset, length = first, s.derive("max", last - first, 0)
    else:
        first, last = clamp_bound(s, b, dim, 0, dim - 1), clamp_bound(s, e, dim, -1, dim - 1)
        offset, length = last + 1, s.derive("max", first - last, 0)
    k = abs(step)
    return offset, length, length if k == 1 else s.derive("floordiv", length + (k - 1), k)


def data_bound(v: Size, dim: Size) -> Size:
    """A bound of a slice of a size computed from the data, unclamped: a negative number counts from
    the end, one past every size (INT64_MAX) is the end."""
    if isinstance(v, Sym):
        return v
    return dim if v >= WHOLE_END else dim + v if v < 0 else v


def run_time_slice(node: Node, x: SSAValue, src: Sequence[Size], run_time: dict[int, tuple[Size, Size, int]],
                   start: Sequence[Size], limit: Sequence[Size], strides: Sequence[int]) -> SSAValue:
    """A tensor.extract_slice whose offsets and sizes are `index` values computed from the run-time
    sizes (clamped, so the slice is always in bounds: its own check never fires), then, on an axis
    of step other than 1, a gather of every step-th element of the span (from its end backwards for
    a negative step: gather counts negative indices from the end)."""
    e = node.e
    assert e.tracker is not None, "a run-time size is tracked"
    s = e.tracker.sizes
    offsets = list(start)
    sizes: list[Size] = [lim - st if isinstance(lim, Sym) or isinstance(st, Sym) else extent_count(st, lim, k)
                         for st, lim, k in zip(start, limit, strides)]  # (a `?` axis not sliced: whole)
    picks: dict[int, tuple[int, Size]] = {}
    for a, (b, end, step) in run_time.items():
        offsets[a], sizes[a], count = run_time_span(s, src[a], b, end, step)
        if step != 1:
            picks[a] = (step, count)

    def index(d: Size) -> int | SSAValue:
        return d if isinstance(d, int) else e.size_operands([d])[0]

    result = o.tensor([d if isinstance(d, int) else o.DYNAMIC for d in sizes], element_of(x))
    x = e.value(slices.extract_slice(x, [index(d) for d in offsets], [index(d) for d in sizes],
                                     [1 if a in run_time else st for a, st in enumerate(strides)], result))
    for a, (step, count) in picks.items():
        iota = e.value(o.IotaOp(o.tensor([count if isinstance(count, int) else o.DYNAMIC], i64),
                                e.size_operands([count])))
        first = 0 if step > 0 else -1  # the span's last element, counted from its end
        picked = e.add(e.mul(iota, e.constant(np.array(step, np.int64))), e.constant(np.array(first, np.int64)))
        x = e.value(o.GatherOp(x, picked, a))
    return x


def extent_count(start: int, limit: int, stride: int) -> int:
    return max(0, -(-(limit - start) // stride))


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
        outs.append(node.e.value(o.SliceOp(node.input(0), start, slice_limits(limit))))
        offset += size
    return outs


@converter("Gather")
def gather(node: Node) -> Values:
    rank = len(node.shape(0))
    return [node.e.value(o.GatherOp(node.input(0), node.input(1), node.axis(node.attr("axis", 0), rank)))]


@converter("Squeeze", since=1)
def squeeze_attribute(node: Node) -> Values:
    src = node.shape(0)
    if "axes" in node.attrs:
        axes = {node.axis(int(a), len(src)) for a in node.attr("axes")}
    else:
        axes = {i for i, d in enumerate(src) if d == 1}
    if any(src[a] != 1 for a in axes):
        raise node.fail(f"cannot squeeze axes {sorted(axes)} of shape {list(src)}: a size is not 1")
    return [node.e.reshape(node.input(0), [d for i, d in enumerate(src) if i not in axes])]


@converter("Unsqueeze", since=1)
def unsqueeze_attribute(node: Node) -> Values:
    src = list(node.shape(0))
    given = list(node.attr("axes", []))
    rank = len(src) + len(given)
    for a in sorted(node.axis(int(a), rank) for a in given):
        src.insert(a, 1)
    return [node.e.reshape(node.input(0), src)]


@converter("Split", since=1)
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
        outs.append(node.e.value(o.SliceOp(node.input(0), start, slice_limits(limit))))
        offset += size
    return outs


@converter("Tile", since=6)
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
    coords = [e.value(o.SliceOp(idx, [0] * (len(ishape) - 1) + [k], slice_limits([*ishape[:-1], k + 1])))
              for k in range(m)]
    flat = None
    for k, c in enumerate(coords):
        size = inner[k] if isinstance(inner[k], int) else e.size_tensor(inner[k])
        term = e.mul(wrap_negative(node, c, size), e.size_tensor(math.prod(inner[k + 1:])))
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
    shape = list(shape_of(data))
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
    rows = list(shape_of(d))
    count = math.prod(shape_of(flat))
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
    shape = list(shape_of(data))
    fshape = list(shape_of(flat))
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
    """Known at compile time, or (a limit known at run time, delta 1) start + opc.iota of length
    limit - start."""
    if not all(node.known(i) for i in range(3)):
        return [range_from_values(node)]
    start, limit, delta = (node.const(i, what) for i, what in enumerate(("start", "limit", "delta")))
    if is_symbolic(limit):
        return [run_time_range(node, start, limit.reshape(-1)[0], delta)]
    if delta == 0:
        raise node.fail("delta must not be 0")
    n = max(int(np.ceil((limit - start) / delta)), 0)
    return [(start + np.arange(n) * delta).astype(start.dtype)]


def range_from_values(node: Node) -> SSAValue:
    """start + delta * iota(n), n = max(ceil((limit - start) / delta), 0) read at run time (computed in
    f64, as ONNX's reference does in its element type: exact for the counts a Range makes): a size
    read from a tensor's value, so one compile serves every start, limit and delta. A delta of 0 makes
    the count -1, which the call refuses as a negative size (ValueError)."""
    e = node.e
    start, limit, delta = (node.e.reshape(node.input(i), []) for i in range(3))
    element = element_of(start)
    s, lim, d = (e.cast(v, f64) for v in (start, limit, delta))
    steps = e.value(o.CeilOp(e.div(e.sub(lim, s), d)))
    count = e.value(o.MaximumOp(steps, e.constant(np.array(0.0))))
    zero = e.value(o.EqualOp(d, e.constant(np.array(0.0))))
    count = e.select(zero, e.constant(np.array(-1.0)), count)
    n = e.value(arith.IndexCastOp(e.value(tensor.ExtractOp(e.cast(count, i64), [], i64)), IndexType()))
    iota = e.value(o.IotaOp(o.tensor([o.DYNAMIC], element), [n]))
    return e.add(e.mul(iota, delta), start)


def run_time_range(node: Node, start: np.ndarray, n: Sym, delta: np.ndarray) -> SSAValue:
    if is_symbolic(start) or is_symbolic(delta) or int(delta) != 1:
        raise SizeNeeded(f"{node.label}: a Range whose start or delta is known at run time only, or delta is not 1")
    e, element = node.e, BY_NUMPY[start.dtype]
    count = n - int(start)
    iota = e.value(o.IotaOp(o.tensor([count if isinstance(count, int) else o.DYNAMIC], element),
                            e.size_operands([count])))
    return iota if int(start) == 0 else e.add(iota, e.constant(start))


@converter("ConstantOfShape", since=9)
def constant_of_shape(node: Node) -> Values:
    shape = size_list(node.const(0, "shape"))
    value = node.attr("value")
    fill = np.zeros(1, np.float32) if value is None else __import__("onnx").numpy_helper.to_array(value)
    if any(isinstance(d, Sym) for d in shape):
        t = o.tensor(shape, BY_NUMPY[fill.dtype])
        return [node.e.value(o.FullOp(float(fill.reshape(-1)[0]), t, node.e.size_operands(shape)))]
    return [np.full(shape, fill.reshape(-1)[0], fill.dtype)]


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


@converter("Pad", since=1)
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


@converter("DepthToSpace", since=1)
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


@converter("ReverseSequence", since=10)
def reverse_sequence(node: Node) -> Values:
    """One gather from the flattened data at indices known at compile time (the lengths must be):
    x[b, t] <- x[b, len[b] - 1 - t] for t < len[b]."""
    e = node.e
    shape = node.shape(0)
    if len(shape) < 2:
        raise node.fail(f"the input must have rank 2 or more, got rank {len(shape)}")
    batch_axis, time_axis = int(node.attr("batch_axis", 1)), int(node.attr("time_axis", 0))
    if {batch_axis, time_axis} != {0, 1}:
        raise node.fail(f"batch_axis and time_axis must be 0 and 1, got {batch_axis} and {time_axis}")
    lens = node.const(1, "sequence_lens").reshape(-1).astype(np.int64)
    if len(lens) != shape[batch_axis] or np.any(lens < 0) or np.any(lens > shape[time_axis]):
        raise node.fail(f"sequence_lens {lens.tolist()} must be {shape[batch_axis]} lengths in "
                        f"[0, {shape[time_axis]}]")
    index = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    source = index.copy()
    for b, n in enumerate(lens):
        pick = [slice(None)] * len(shape)
        pick[batch_axis] = b
        dst, src = list(pick), list(pick)
        dst[time_axis], src[time_axis] = slice(0, n), slice(n - 1, None, -1) if n else slice(0, 0)
        source[tuple(dst)] = index[tuple(src)]
    flat = e.reshape(node.input(0), [math.prod(shape)])
    return [e.value(o.GatherOp(flat, e.constant(source), 0))]


@converter("CenterCropPad", since=18)
def center_crop_pad(node: Node) -> Values:
    """Per axis: a centred slice where the target is smaller, zeros around where it is larger
    (the odd one of the difference at the end), as ONNX's reference."""
    e, x = node.e, node.input(0)
    shape = list(node.shape(0))
    target = [int(v) for v in node.const(1, "shape").reshape(-1)]
    axes = [node.axis(int(a), len(shape)) for a in node.attr("axes", list(range(len(shape))))]
    if len(axes) != len(target):
        raise node.fail(f"shape has {len(target)} sizes for {len(axes)} axes")
    dtype = numpy_dtype_of(element_of(x))
    for a, want in zip(axes, target):
        have = list(shape_of(x))[a]
        if want < have:
            start = (have - want) // 2
            x = along(node, x, a, start, start + want)
        elif want > have:
            before = (want - have) // 2
            parts = []
            for size in (before, want - have - before):
                pad_shape = list(shape_of(x))
                pad_shape[a] = size
                parts.append(e.constant(np.zeros(pad_shape, dtype)) if size else None)
            x = e.value(o.ConcatOp([p for p in (parts[0], x, parts[1]) if p is not None], a))
    return [x]






@converter("Compress", since=9)
def compress(node: Node) -> Values:
    """x's slices (or flattened elements, without axis) where the condition is true: one gather at those
    indices, known at compile time where the condition is, else the positions `opc.nonzero` finds at run
    time (their count a size of its own). The condition may be shorter than the axis (the rest is
    dropped); a true entry past the axis is an IndexError at run time."""
    x, shape = node.input(0), list(node.shape(0))
    axis = node.attr("axis")
    if axis is None:
        x, shape, axis = node.e.reshape(x, [math.prod(shape)]), [math.prod(shape)], 0
    axis = node.axis(int(axis), len(shape))
    if node.importer.compile_time(node.proto.input[1]) is None:
        cond = node.input(1)
        if len(shape_of(cond)) != 1:
            raise node.fail(f"condition must be 1-D, got shape {list(shape_of(cond))}")
        found = node.e.value(o.NonzeroOp(cond))  # [1, count]
        picked = node.e.value(o.ReshapeOp(found, o.tensor([o.DYNAMIC], element_of(found))))  # [count]
        return [node.e.value(o.GatherOp(x, picked, axis))]
    cond = np.asarray(node.const(1, "condition")).reshape(-1).astype(bool)
    if len(cond) > shape[axis]:
        raise node.fail(f"condition has {len(cond)} elements, more than the axis' {shape[axis]}")
    picked = np.flatnonzero(cond).astype(np.int64)
    if not picked.size:
        raise node.fail("the condition selects nothing; opc has no empty tensors")
    return [node.e.value(o.GatherOp(x, node.e.constant(picked), axis))]


@converter("NonZero", since=9)
def nonzero(node: Node) -> Values:
    """Known at compile time: computed then; else `opc.nonzero`, whose count is a size of its own
    (known when it runs). A scalar counts as one element, as NumPy's (and onnx's reference) do."""
    if node.importer.compile_time(node.proto.input[0]) is not None:
        return nonempty(node, evaluated(node, "NonZero's output shape depends on it"))
    x = node.input(0)
    if not shape_of(x):
        x = node.e.reshape(x, [1])
    return [node.e.value(o.NonzeroOp(x))]


@converter("Unique", since=11)
def unique(node: Node) -> Values:
    """Y, indices, inverse_indices, counts: computed at compile time where the input is known, else
    `opc.unique` (the number of distinct values or slices a size of its own): of the flattened input
    without an axis, of the slices along the axis with one."""
    if node.importer.compile_time(node.proto.input[0]) is not None:
        return nonempty(node, evaluated(node, "Unique's output shape depends on it"))
    x, shape, axis = node.input(0), node.shape(0), node.attr("axis")
    if axis is not None:
        axis = node.axis(int(axis), len(shape))
    if axis is None or len(shape) < 2:  # the elements: of a 1-D (or scalar) input, its only axis
        x, axis = (node.e.reshape(x, [math.prod(shape)]) if len(shape) != 1 else x), 0
    return list(node.e.emit(o.UniqueOp(x, bool(node.attr("sorted", 1)), axis)).results)


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


@folder("GatherElements")
def fold_gather_elements(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    data, indices = inputs
    if data.ndim != indices.ndim:
        raise node.fail(f"indices have rank {indices.ndim}, data rank {data.ndim}: they must match")
    axis = node.axis(node.attr("axis", 0), data.ndim)
    n = data.shape[axis]
    if indices.size and (indices.min() < -n or indices.max() >= n):
        raise node.fail(f"an index is out of range [{-n}, {n - 1}] along axis {axis}")
    if any(i > d for k, (i, d) in enumerate(zip(indices.shape, data.shape)) if k != axis):
        raise node.fail(f"indices of shape {list(indices.shape)} exceed data of shape {list(data.shape)}")
    # output[..., j, ...] = data[..., indices[..., j, ...], ...]: the other axes as far as the indices reach
    data = data[tuple(slice(None) if k == axis else slice(0, i) for k, i in enumerate(indices.shape))]
    return [np.take_along_axis(data, np.where(indices < 0, indices + n, indices).astype(np.int64), axis)]


@converter("Reshape", since=1)
def reshape_attribute(node: Node) -> Values:
    """Opsets 1 to 4: the shape is an attribute."""
    return as_newer(node, 5, [node.proto.input[0], np.array(node.attr("shape", []), np.int64)],
                    drop=("shape", "consumed_inputs"))


@converter("Concat", since=1)
def concat_axis_1(node: Node) -> Values:
    """Opsets 1 to 3: axis 1 unless given."""
    return as_newer(node, 4, node.proto.input, attrs={"axis": int(node.attr("axis", 1))})


@converter("Slice", since=1)
def slice_attributes(node: Node) -> Values:
    """Opsets 1 to 9: starts, ends and axes are attributes (steps 1)."""
    starts, ends = node.attr("starts"), node.attr("ends")
    if starts is None or ends is None or len(starts) != len(ends):
        raise node.fail("starts and ends must be given, as many of each")
    axes = node.attr("axes", list(range(len(starts))))
    return as_newer(node, 10, [node.proto.input[0], *(np.array(v, np.int64) for v in (starts, ends, axes))],
                    drop=("starts", "ends", "axes"))


@converter("Tile", since=1)
def tile_one_axis(node: Node) -> Values:
    """Opsets 1 to 5: inputs (input, tiles, axis): `tiles` copies along one axis."""
    rank = len(node.shape(0))
    axis = node.axis(int(node.const(2, "axis").reshape(-1)[0]), rank)
    repeats = np.ones(rank, np.int64)
    repeats[axis] = int(node.const(1, "tiles").reshape(-1)[0])
    return as_newer(node, 6, [node.proto.input[0], repeats])


# Older opsets where the meaning is the one above: the same converter.
same_since({
    1: ("Shape", "Size", "Flatten", "Transpose", "Gather"),
    4: ("Concat",),
    5: ("Reshape",),
    8: ("Expand",),
    10: ("Slice",),
    11: ("GatherND",),  # without batch_dims (0) before 12
})
