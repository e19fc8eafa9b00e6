"""The loop lowering of the ops real networks need (issue 11), as small
functions over a `FunctionLowering` (opc_lower_to_loops.py), which calls them
through a few hooks:

- index maps evaluated point-wise, like transpose: `slice` (start + i *
  stride) and `gather` (an index loaded from the indices tensor, checked
  against the axis, then the load from x) -- `index_map_value`;
- placements and scatters, materialized into their result: `concat` (one nest
  per operand), `slice_grad` (zeros, then dout placed), `gather_grad` (zeros,
  then dout scatter-added in index order, so repeated indices sum
  deterministically) -- `LOWERINGS`;
- the fused normalizations, losses and their grads: one `opc_loops.call` of a
  runtime row kernel (runtime/opc_nn.h, opc_nn.cuh) with the [outer, n,
  inner] extents of the normalized axis -- `LOWERINGS`;
- attention's operands and results through strides: a transpose planned as a strided view
  (opc-schedule) is a `memref.reinterpret_cast` with the permuted strides, and the call passes each
  operand's layout -- `lower_strided_view`, `result_view`, `attention_ints`;
- matmul's broadcast batch dims -- `batch_operand`;
- run-time checks (`RuntimeChecks`): an index or label out of range records a
  negative status in the function's status record (runtime/opc_status.h),
  and the function returns it at its end; the site's message, naming the
  argument the index came from, travels in the lowered function's
  `opc.errors` attribute to the Python binding, which raises it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import (
    ArrayAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    StridedLayoutAttr,
    StringAttr,
    f32,
    i64,
)
from xdsl.ir import Operation, SSAValue

from opc.dialects import opc
from opc.dialects.kinds import element_of, numel, shape_of
from opc.dialects.opc import int_width
from opc.dialects.opc_loops import ERRORS_ATTR, CallOp, CheckIndexOp, RaiseStatusOp
from opc.lowering.c_expressions import dtype_suffix
from opc.lowering.data_size_lowering import DATA_SIZE_LOWERINGS
from opc.lowering.scalars import (
    Emitter,
    broadcast_index,
    compute_type,
    is_half,
    scalar_type,
)
from opc.symbolic import Size, Sym

STATUS_LEN = 2  # runtime/opc_status.h: OPC_STATUS_LEN



# ---------------------------------------------------------------------------
# Run-time checks: the status record and the check sites of one function
# ---------------------------------------------------------------------------


class RuntimeChecks:
    """The status record of one function (created at its entry on first use)
    and its check sites: site k fails with status -(k + 1)."""

    def __init__(self, fl) -> None:  # noqa: ANN001  (a FunctionLowering)
        self.fl = fl
        self.record: SSAValue | None = None
        self.sites: list[tuple[str, str]] = []
        self.codes: dict[tuple[Operation, str], int] = {}

    def status(self) -> SSAValue:
        """The memref<2xi64> status record, zeroed at the top of the function."""
        if self.record is None:
            alloc = memref.AllocOp([], [], MemRefType(i64, [STATUS_LEN]))
            alloc.memref.name_hint = "status"
            zero = arith.ConstantOp(IntegerAttr(0, i64))
            slots = [arith.ConstantOp(IntegerAttr(i, IndexType())) for i in range(STATUS_LEN)]
            stores = [memref.StoreOp.get(zero.result, alloc.memref, [s.result]) for s in slots]
            entry = self.fl.entry
            first = entry.first_op
            for op in [alloc, zero, *slots, *stores]:
                if first is None:
                    entry.add_op(op)
                else:
                    entry.insert_op_before(op, first)
            self.record = alloc.memref
        return self.record

    def code(self, op: Operation, kind: str, message: str) -> int:
        """The status a failure of this check returns; `message` may hold {value}, the offending value."""
        key = (op, message)
        if key not in self.codes:
            self.sites.append((kind, message))
            self.codes[key] = -len(self.sites)
        return self.codes[key]

    def finish(self) -> None:
        """At the end of the function body: return the recorded status, if a check failed."""
        if self.record is not None:
            self.fl.e.emit(RaiseStatusOp(self.record))

    def annotate(self, fn: func.FuncOp) -> None:
        if self.sites:
            fn.attributes[ERRORS_ATTR] = ArrayAttr([ArrayAttr([StringAttr(k), StringAttr(m)]) for k, m in self.sites])


def argument_source(fl, v: SSAValue) -> tuple[str | None, bool]:  # noqa: ANN001
    """The function argument `v` is computed from (nearest first): its name, and whether v is that argument."""
    args = list(fl.fn.args)
    frontier, seen, direct = [v], set(), True
    while frontier:
        following = []
        for u in frontier:
            if u in args:
                i = args.index(u)
                return args[i].name_hint or f"in{i}", direct
            owner = u.owner
            if isinstance(owner, Operation) and owner not in seen:
                seen.add(owner)
                following.extend(owner.operands)
        frontier, direct = following, False
    return None, False


def braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def index_message(fl, op: Operation, indices: SSAValue, axis: int, size: Size) -> str:  # noqa: ANN001
    name, direct = argument_source(fl, indices)
    where = f"out of range for axis {axis} of size {size} ({op.name})"
    if name is not None and direct:
        return f"argument '{braces(name)}' holds index {{value}}, {where}"
    source = f" computed from argument '{braces(name)}'" if name is not None else ""
    return f"an index{source} is {where}; it is {{value}}"


def checked_index(fl, op: Operation, indices: SSAValue, raw: SSAValue, axis: int, size: Size) -> SSAValue:  # noqa: ANN001
    """The checked index (index type) of a scalar read from `indices`: np.take's negatives wrap."""
    e: Emitter = fl.e
    wide = e.convert(raw, element_of(indices), IntegerType(64))
    code = fl.checks.code(op, "IndexError", index_message(fl, op, indices, axis, size))
    extent = size if isinstance(size, int) else fl.size_value(size)
    return e.value(CheckIndexOp(wide, fl.checks.status(), extent, code, wrap=True))


def label_code(fl, op: Operation, label: SSAValue, axis: int, classes: int) -> int:  # noqa: ANN001
    name, direct = argument_source(fl, label)
    holder = f"argument '{braces(name)}'" if name is not None and direct else (
        f"a label computed from argument '{braces(name)}'" if name is not None else "a label")
    message = f"{holder} holds label {{value}}, out of range [0, {classes}) for axis {axis} ({op.name})"
    return fl.checks.code(op, "IndexError", message)


# ---------------------------------------------------------------------------
# Index arithmetic and point-wise index maps
# ---------------------------------------------------------------------------


def affine(e: Emitter, i: SSAValue, start: int, stride: int) -> SSAValue:
    """start + i * stride on indices."""
    v = i if stride == 1 else e.value(arith.MuliOp(i, e.index(stride)))
    return v if start == 0 else e.value(arith.AddiOp(v, e.index(start)))


def index_map_value(fl, op: Operation, idx: Sequence[SSAValue]) -> SSAValue:  # noqa: ANN001
    """The scalar of slice / gather's result at idx, from its operands."""
    if isinstance(op, opc.SliceOp):
        start, _, strides = op.slice_params()
        return fl.value_at(op.x, [affine(fl.e, i, a, s) for i, a, s in zip(idx, start, strides)])
    assert isinstance(op, opc.GatherOp)
    axis, rank = op.axis_index(), len(shape_of(op.indices))
    raw = fl.value_at(op.indices, list(idx[axis:axis + rank]))
    k = checked_index(fl, op, op.indices, raw, axis, shape_of(op.x)[axis])
    return fl.value_at(op.x, [*idx[:axis], k, *idx[axis + rank:]])


# ---------------------------------------------------------------------------
# Placements: concat, slice_grad, gather_grad
# ---------------------------------------------------------------------------


def zero_fill(e: Emitter, buf: SSAValue, shape: Sequence[int], elem) -> None:  # noqa: ANN001
    e.parallel(shape, lambda idx: e.store(e.const(0, elem), buf, idx))


def lower_concat(fl, op: opc.ConcatOp) -> None:  # noqa: ANN001
    """One nest per operand, writing it at its offset along the axis (a run-time size past a
    run-time sized operand: a key/value cache grown by a step)."""
    e, out, axis = fl.e, fl.buffer_for(op.result), op.axis_index()
    offset: Size = 0
    for v in op.inputs:
        def place(idx: list[SSAValue], v: SSAValue = v, offset: Size = offset) -> None:
            dst = list(idx)
            if isinstance(offset, int):
                dst[axis] = affine(e, idx[axis], offset, 1)
            else:
                dst[axis] = e.value(arith.AddiOp(idx[axis], fl.size_value(offset)))
            e.store(fl.value_at(v, idx), out, dst)

        e.parallel(shape_of(v), place)
        offset = offset + shape_of(v)[axis]


def lower_slice_grad(fl, op: opc.SliceGradOp) -> None:  # noqa: ANN001
    """Zeros of x's shape, then dout placed at start + i * strides (x itself is never read)."""
    e, out = fl.e, fl.buffer_for(op.result)
    zero_fill(e, out, shape_of(op.result), element_of(op.result))
    start, _, strides = op.slice_params()

    def place(idx: list[SSAValue]) -> None:
        e.store(fl.value_at(op.dout, idx), out, [affine(e, i, a, s) for i, a, s in zip(idx, start, strides)])

    e.parallel(shape_of(op.dout), place)


def lower_gather_grad(fl, op: opc.GatherGradOp) -> None:  # noqa: ANN001
    """dx = zeros; dx[pre, idx[j], post] += dout[pre, j, post] for j in index order.

    The CPU runs the leading dims in parallel and the trailing ones innermost
    (contiguous); a GPU runs every (pre, post) position in parallel. Either
    way one position sums its indices sequentially: no races, and the same
    sum in the same order every run. f16/bf16 accumulate in f32."""
    e = fl.e
    out, elem = fl.buffer_for(op.result), element_of(op.result)
    shape, axis = shape_of(op.x), op.axis_index()
    pre, post, ishape = shape[:axis], shape[axis + 1:], shape_of(op.indices)
    acc = out
    if is_half(elem):
        acc = fl.alloc(shape, f32)  # (`?` dims sized at run time)
        acc.name_hint = "acc"
        fl.allocs.append(acc)
    acc_t = compute_type(scalar_type(elem))
    zero_fill(e, acc, shape, acc_t)

    def add(cur: SSAValue, x: SSAValue) -> SSAValue:
        if opc.is_float(acc_t):
            return e.value(arith.AddfOp(cur, x))
        if opc.is_bool(elem):
            return e.value(arith.MaxUIOp(cur, x))  # i1 cotangents meet by logical or
        return e.value(arith.AddiOp(cur, x))

    def nest(extents: Sequence[int], body: Callable[[list[SSAValue]], None], ivs: list[SSAValue] | None = None) -> None:
        """Sequential loops over `extents`, the last innermost."""
        ivs = ivs or []
        if len(ivs) == len(extents):
            body(ivs)
            return
        e.for_loop(extents[len(ivs)], [], lambda iv, _: (nest(extents, body, [*ivs, iv]), [])[1])

    def accumulate(pi: list[SSAValue], j: list[SSAValue], k: SSAValue, qi: list[SSAValue]) -> None:
        dst = [*pi, k, *qi]
        e.store(add(e.load(acc, dst), e.to_compute(fl.value_at(op.dout, [*pi, *j, *qi]))), acc, dst)

    def over_indices(pi: list[SSAValue], qi: list[SSAValue] | None) -> None:
        """For each index position j in order: k = indices[j], then every trailing position (or just qi)."""
        def at(j: list[SSAValue]) -> None:
            k = checked_index(fl, op, op.indices, fl.value_at(op.indices, j), axis, shape[axis])
            if qi is None:
                nest(post, lambda q: accumulate(pi, j, k, q))
            else:
                accumulate(pi, j, k, qi)

        nest(ishape, at)

    if fl.memory_order_reductions:
        e.parallel(pre, lambda pi: over_indices(list(pi), None))
    else:
        e.parallel([*pre, *post], lambda ix: over_indices(ix[:len(pre)], ix[len(pre):]))
    if acc is not out:
        e.parallel(shape, lambda idx: e.store(e.to_storage(e.load(acc, idx), elem), out, idx))


def lower_cumsum(fl, op: opc.CumsumOp) -> None:  # noqa: ANN001
    """One sequential pass along the axis per line (every other position, in parallel), carrying
    the running sum in the compute type: out[k] = acc + x[k] (exclusive: acc before adding x[k]),
    k running down from the end when reversed. Integers wrap in their own type; f16/bf16 sum in f32,
    rounded on each store. A rank-1 operand is one line (a one-trip parallel loop, so a GPU runs
    it as a kernel too)."""
    e = fl.e
    out, elem = fl.buffer_for(op.result), element_of(op.result)
    shape, axis = shape_of(op.x), op.axis_index()
    n = shape[axis]
    others = [d for i, d in enumerate(shape) if i != axis]
    acc_t = compute_type(scalar_type(elem))
    add = arith.AddfOp if opc.is_float(acc_t) else arith.AddiOp
    exclusive, reverse = opc.flag(op.exclusive), opc.flag(op.reverse)

    def line(ix: list[SSAValue]) -> None:
        def step(k: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
            pos = e.value(arith.SubiOp(e.index(n - 1), k)) if reverse else k
            idx = [*ix[:axis], pos, *ix[axis:]]
            total = e.value(add(accs[0], e.to_compute(fl.value_at(op.x, idx))))
            e.store(e.to_storage(accs[0] if exclusive else total, elem), out, idx)
            return [total]

        e.for_loop(n, [e.const(0, acc_t)], step)

    e.parallel(others or [1], lambda ix: line(ix if others else []))


# ---------------------------------------------------------------------------
# Fused ops and their grads: one runtime row kernel each
# ---------------------------------------------------------------------------


def extents(shape: Sequence[int], axis: int) -> tuple[int, int, int]:
    """(outer, n, inner) of the [outer, n, inner] view normalized along `axis`."""
    return numel(shape[:axis]), shape[axis], numel(shape[axis + 1:])


def call(fl, callee: str, args: Sequence[SSAValue], ints: Sequence[int | Sym] = (),  # noqa: ANN001
         floats: Sequence[float] = ()) -> None:
    fl.e.emit(CallOp(callee, args, [fl.size_value(v) if isinstance(v, Sym) else v for v in ints], floats))


def label_suffix(label: SSAValue) -> str:
    return f"i{int_width(element_of(label))}"


def buffers(fl, op: Operation) -> list[SSAValue]:  # noqa: ANN001
    """The op's operand buffers, then its result buffers: the argument order of the row kernels."""
    return [fl.operand_buffer(v) for v in op.operands] + [fl.buffer_for(r) for r in op.results]


def lower_softmax(fl, op: opc.AxisOp | opc.AxisGradOp) -> None:  # noqa: ANN001
    """softmax, log_softmax and their grads: (x, y) or (out, dout, dx), then the extents."""
    shape = shape_of(op.results[0])
    call(fl, f"{op.name.removeprefix('opc.')}_{dtype_suffix(element_of(op.results[0]))}", buffers(fl, op),
         extents(shape, op.axis_index()))


def lower_layer_norm(fl, op: opc.LayerNormOp | opc.LayerNormGradOp) -> None:  # noqa: ANN001
    """layer_norm (x, scale, bias, y, mean, rstd; rows, cols, eps) and its grad (x, scale, mean, rstd, dy,
    dx, dscale, dbias; rows, cols)."""
    shape, begin = shape_of(op.x), op.begin()
    eps = [op.epsilon.value.data] if isinstance(op, opc.LayerNormOp) else []
    call(fl, f"{op.name.removeprefix('opc.')}_{dtype_suffix(element_of(op.x))}", buffers(fl, op),
         [numel(shape[:begin]), numel(shape[begin:])], eps)


def lower_softmax_cross_entropy(fl, op: opc.SoftmaxCrossEntropyOp | opc.SoftmaxCrossEntropyGradOp) -> None:  # noqa: ANN001
    """softmax_cross_entropy (logits, label, loss, softmax) and its grad (label, softmax, dloss, dlogits),
    then the status record, the extents and the label check's code."""
    shape, axis = shape_of(op.softmax), op.axis_index()
    code = label_code(fl, op, op.label, axis, shape[axis])
    callee = f"{op.name.removeprefix('opc.')}_{dtype_suffix(element_of(op.softmax))}_{label_suffix(op.label)}"
    call(fl, callee, [*buffers(fl, op), fl.checks.status()], [*extents(shape, axis), code])


def conv_ints(g: opc.ConvGeometry) -> list[int]:
    """The 22 integers of runtime/opc_nn_conv.h's geometry; 1-D and 2-D convs lead with unit dims."""
    lead = 3 - g.spatial

    def three(v: Sequence[int], fill: int) -> list[int]:
        return [fill] * lead + list(v)

    return [g.n, g.c, g.o, g.group, *three(g.inp, 1), *three(g.out, 1), *three(g.kernel, 1),
            *three(g.strides, 1), *three(g.dilations, 1), *three(g.pads[:g.spatial], 0)]


def lower_conv(fl, op: opc.ConvBase) -> None:  # noqa: ANN001
    """conv (x, w, y), conv_grad_input (dy, w, dx), conv_grad_filter (x, dy, dw): one runtime call
    with the forward conv's geometry. conv_transpose (x, w, y) is the input gradient of the conv
    from y to x, so it calls conv_grad_input with x as dy."""
    kernel = "conv_grad_input" if isinstance(op, opc.ConvTransposeOp) else op.name.removeprefix("opc.")
    args, ints = buffers(fl, op), conv_ints(op.geometry())
    call_conv(fl, f"{kernel}_{dtype_suffix(element_of(op.result))}", args, ints)


def call_conv(fl, callee: str, args: Sequence[SSAValue], ints: Sequence[int | Sym]) -> None:  # noqa: ANN001
    """The runtime call of a conv, with the flat nest on its output that opc-schedule gave it as its
    epilogue, if any (the runtime's `_ep_` entry runs it on each finished tile)."""
    if fl.epilogue_body is None:
        call(fl, callee, args, ints)
        return
    body, fl.epilogue_body = fl.epilogue_body(), None
    fl.epilogue_gemm = fl.e.emit(CallOp(callee, args, [fl.size_value(v) if isinstance(v, Sym) else v for v in ints],
                                        epilogue=body))


ACT_CODES = {"none": 0, "relu": 1, "gelu": 2, "relu6": 4}  # runtime/opc_nn.h's fused_conv_epilogue (opc_gemm.h's codes)


def lower_fused_conv_epilogue(fl, op: opc.FusedConvEpilogueOp) -> None:  # noqa: ANN001
    """fused_conv_epilogue (x, w, bias, out[, reserve]): one runtime call with the conv's geometry and
    the activation's code; f32 stride-1 convs apply bias and activation in the kernel's store. A reserve
    nothing reads (inference) is neither allocated nor written, as the fused GEMM's. Channels-last
    operands call the `_layout` entries, with the layout's bits after the activation."""
    res = op.reserve_space
    kept = res is not None and (bool(res.uses) or res in fl.returned)
    args = [fl.operand_buffer(v) for v in op.operands] + [fl.buffer_for(op.out)]
    layout = op.layout_code()
    kernel = "fused_conv_epilogue" + ("_layout" if layout else "") + ("_reserve" if kept else "")
    call_conv(fl, f"{kernel}_{dtype_suffix(element_of(op.out))}", args + ([fl.buffer_for(res)] if kept else []),
              [*conv_ints(op.geometry()), ACT_CODES[op.activation.data], *([layout] if layout else [])])


def pool_ints(op: opc.PoolOp) -> list[int]:
    """The 23 integers of runtime/opc_nn_conv.h's pooling geometry."""
    g = op.pool_geometry()
    lead = 3 - g.spatial

    def three(v: Sequence[int], fill: int) -> list[int]:
        return [fill] * lead + list(v)

    include = getattr(op, "count_include_pad", None)
    return [g.n * g.c, *three(g.inp, 1), *three(g.out, 1), *three(g.kernel, 1), *three(g.strides, 1),
            *three(g.dilations, 1), *three(g.pads[:g.spatial], 0), *three(g.pads[g.spatial:], 0),
            int(include is not None and opc.flag(include))]


def lower_pool(fl, op: opc.PoolOp) -> None:  # noqa: ANN001
    """max_pool (x, y, indices), avg_pool (x, y), avg_pool_grad (dout, dx), max_pool_grad (indices, dout,
    dx, status; its indices checked against their plane): one runtime call each. x of the grads lends
    only its type."""
    suffix = dtype_suffix(element_of(op.x))
    callee = f"{op.name.removeprefix('opc.')}_{suffix}"
    if isinstance(op, opc.MaxPoolGradOp):
        name, direct = argument_source(fl, op.indices)
        holder = f"argument '{braces(name)}' holds" if name is not None and direct else (
            f"an index computed from argument '{braces(name)}' is" if name is not None else "an index is")
        code = fl.checks.code(op, "IndexError", f"{holder} index {{value}}, outside its image and channel of x "
                                                f"({op.name})")
        args = [fl.operand_buffer(op.indices), fl.operand_buffer(op.dout), fl.buffer_for(op.dx), fl.checks.status()]
        call(fl, callee, args, [*pool_ints(op), code])
        return
    if isinstance(op, opc.AvgPoolGradOp):
        call(fl, callee, [fl.operand_buffer(op.dout), fl.buffer_for(op.dx)], pool_ints(op))
        return
    if isinstance(op, opc.MaxPoolOp) and not op.indices.uses and fl.cpu:
        # indices nothing reads (inference): the CPU's values-only kernel (runtime/opc_nn_conv_fast.h)
        call(fl, f"max_pool_values_{suffix}", [fl.operand_buffer(op.x), fl.buffer_for(op.y)], pool_ints(op))
        return
    call(fl, callee, buffers(fl, op), pool_ints(op))


AT_MAX_BATCH = 6  # runtime/opc_nn_attention.h: OPC_AT_MAX_BATCH (MAX_RANK - 2)


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    return [numel(shape[i + 1:]) for i in range(len(shape))]


def layout_ints(strides: Sequence[int]) -> list[int]:
    """runtime/opc_nn_attention.h's layout of an operand [batch..., rows, features] (features
    contiguous): the row stride, then the batch dims' strides (0 past the batch rank)."""
    assert strides[-1] == 1, "an attention operand's features are contiguous"
    batch = list(strides[:-2])
    return [strides[-2], *batch, *[0] * (AT_MAX_BATCH - len(batch))]


def attention_ints(op: opc.AttentionOp | opc.AttentionGradOp, strides: Sequence[Sequence[int] | None] | None = None,
                   grad: bool | None = None) -> list[int]:
    """The integers of runtime/opc_nn_attention.h's geometry: bh, lq, lk, d, dv, causal, has_mask,
    the mask's row and column strides, the batch rank, the batch dims and the mask's strides along them
    (0 where it broadcasts); then the layouts of q, k, v, out (and of dout, dq, dk, dv for the grad):
    `strides` per operand, row-major where not given."""
    qs, vs = shape_of(op.q), shape_of(op.v)
    batch, lq, d = list(qs[:-2]), qs[-2], qs[-1]
    lk, dv = vs[-2], vs[-1]
    full = [*batch, lq, lk]
    ms = [1] * len(full)
    if op.mask is not None:
        own = list(shape_of(op.mask))
        ms = [1] * (len(full) - len(own)) + own
    mstrides = [numel(ms[t + 1:]) if ms[t] != 1 else 0 for t in range(len(ms))]
    pad = AT_MAX_BATCH - len(batch)
    geometry = [numel(batch), lq, lk, d, dv, int(opc.flag(op.is_causal)), int(op.mask is not None), mstrides[-2],
                mstrides[-1], len(batch), *batch, *[1] * pad, *mstrides[:-2], *[0] * pad]
    grad = isinstance(op, opc.AttentionGradOp) if grad is None else grad
    rows = [(*batch, lq, d), (*batch, lk, d), (*batch, lk, dv), (*batch, lq, dv)]
    shapes = [*rows, rows[3], *rows[:3]] if grad else rows  # q, k, v, out (dout, dq, dk, dv)
    given = strides or [None] * len(shapes)
    assert len(given) == len(shapes)
    return geometry + [i for st, sh in zip(given, shapes) for i in layout_ints(st or contiguous_strides(sh))]


def view_strides(buf: SSAValue) -> list[int] | None:
    """A strided view's strides; None for a row-major buffer (whose sizes may be known at run time only)."""
    t = buf.type
    assert isinstance(t, MemRefType)
    return [s.data for s in t.layout.strides] if isinstance(t.layout, StridedLayoutAttr) else None  # type: ignore[union-attr]


def strided_view(fl, buf: SSAValue, shape: Sequence[int], strides: Sequence[int], name: str | None) -> SSAValue:  # noqa: ANN001
    """buf seen as `shape` with `strides` (read and written only by the attention kernels)."""
    t = MemRefType(element_of(buf), list(shape), layout=StridedLayoutAttr(list(strides), 0))
    view = fl.e.value(memref.ReinterpretCastOp(buf, [], [], [], [0], list(shape), list(strides), t))
    view.name_hint = name
    return view


def row_major(buf: SSAValue) -> bool:
    t = buf.type
    assert isinstance(t, MemRefType)
    strides = t.get_strides()
    assert strides is not None  # opc's memrefs: identity or strided layouts
    return list(strides) == contiguous_strides(shape_of(t))


def lower_strided_view(fl, op: opc.TransposeOp) -> None:  # noqa: ANN001
    """A transpose planned as a strided view (opc-schedule): of its operand's buffer (only attention
    reads it), or already made where attention wrote its result through it (result_view)."""
    if fl.schedule.views[op] == "result":
        assert op.result in fl.buffers, "the attention op writes its result through the transpose's buffer"
        return
    src = fl.operand_buffer(op.x)
    assert row_major(src), "a strided view of a row-major buffer"
    xs = contiguous_strides(shape_of(op.x))
    fl.buffers[op.result] = strided_view(fl, src, shape_of(op.result), [xs[p] for p in op.perm_list()],
                                         op.result.name_hint)


def result_view(fl, v: SSAValue, t: opc.TransposeOp) -> SSAValue:  # noqa: ANN001
    """The buffer attention writes its result v to: the transpose t's (v's only other reader), seen in
    v's shape through strides."""
    dst = fl.buffer_for(t.result)
    ts, strides = contiguous_strides(shape_of(t.result)), [0] * len(t.perm_list())
    for j, p in enumerate(t.perm_list()):
        strides[p] = ts[j]
    return strided_view(fl, dst, shape_of(v), strides, v.name_hint)


def lower_attention(fl, op: opc.AttentionOp | opc.AttentionGradOp) -> None:  # noqa: ANN001
    """attention (q, k, v, mask, out, lse) and its grad (q, k, v, out, lse, dout, mask, dq, dk, dv), then
    the geometry, the layouts of the operands that may be strided views (q, k, v, out; the grad's
    q, k, v, out, dout, dq, dk, dv) and the scale; without a mask, q stands in its place (never read)."""
    ins = [fl.operand_buffer(v) for v in op.operands]
    mask = ins.pop() if op.mask is not None else ins[0]
    outs = [fl.buffer_for(r) for r in op.results]
    args = [*ins, mask, *outs]
    strided = [*ins[:4], ins[5], *outs] if isinstance(op, opc.AttentionGradOp) else [*ins[:3], outs[0]]
    call(fl, f"{op.name.removeprefix('opc.')}_{dtype_suffix(element_of(op.q))}", args,
         attention_ints(op, [view_strides(b) for b in strided]),
         [op.scale.value.data])


LOWERINGS: dict[type[Operation], Callable] = {
    opc.ConcatOp: lower_concat,
    opc.CumsumOp: lower_cumsum,
    opc.SliceGradOp: lower_slice_grad,
    opc.GatherGradOp: lower_gather_grad,
    **DATA_SIZE_LOWERINGS,
    opc.SoftmaxOp: lower_softmax,
    opc.LogSoftmaxOp: lower_softmax,
    opc.SoftmaxGradOp: lower_softmax,
    opc.LogSoftmaxGradOp: lower_softmax,
    opc.LayerNormOp: lower_layer_norm,
    opc.LayerNormGradOp: lower_layer_norm,
    opc.SoftmaxCrossEntropyOp: lower_softmax_cross_entropy,
    opc.SoftmaxCrossEntropyGradOp: lower_softmax_cross_entropy,
    opc.ConvOp: lower_conv,
    opc.ConvTransposeOp: lower_conv,
    opc.ConvGradInputOp: lower_conv,
    opc.ConvGradFilterOp: lower_conv,
    opc.FusedConvEpilogueOp: lower_fused_conv_epilogue,
    opc.MaxPoolOp: lower_pool,
    opc.AvgPoolOp: lower_pool,
    opc.MaxPoolGradOp: lower_pool,
    opc.AvgPoolGradOp: lower_pool,
    opc.AttentionOp: lower_attention,
    opc.AttentionGradOp: lower_attention,
}
"""Ops materialized by a function of their own (buffers, nests or a runtime call)."""


# ---------------------------------------------------------------------------
# matmul: broadcast batch dims
# ---------------------------------------------------------------------------


def batch_operand(fl, v: SSAValue, batch: Sequence[int]) -> tuple[SSAValue, int]:  # noqa: ANN001
    """A matmul operand as (buffer, batch stride) over the result's batch dims: stride 0 when it
    has no batch (broadcast to all), its matrix size when its batch dims are the result's; any
    other broadcast (some batch dims 1, others not) is materialized to the full batch first."""
    shape = shape_of(v)
    own = (1,) * (len(batch) - len(shape[:-2])) + tuple(shape[:-2])
    buf = fl.operand_buffer(v)
    matrix = numel(shape[-2:])
    if numel(own) == 1:
        return buf, 0
    if own == tuple(batch):
        return buf, matrix
    full = [*batch, *shape[-2:]]
    e = fl.e
    copy = fl.alloc(full, element_of(buf))  # (a run-time batch dim: its size given at run time)
    copy.name_hint = f"{v.name_hint or 'operand'}_batch"
    fl.allocs.append(copy)
    e.parallel(full, lambda idx: e.store(e.load(buf, broadcast_index(e, idx, full, shape)), copy, idx))
    return copy, matrix

