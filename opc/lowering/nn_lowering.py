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

from xdsl.dialects import arith, func, memref, scf
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
from xdsl.ir import Block, Operation, Region, SSAValue

from opc.dialects import opc
from opc.dialects.kinds import element_of, numel, shape_of
from opc.dialects.opc import int_width
from opc.dialects.opc_loops import ERRORS_ATTR, CallOp, CheckIndexOp, RaiseStatusOp
from opc.lowering.c_expressions import dtype_suffix
from opc.lowering.scalars import (
    Emitter,
    broadcast_index,
    compute_type,
    is_half,
    is_unsigned,
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
        acc = e.value(memref.AllocOp([], [], MemRefType(f32, list(shape))))
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


def scan(e: Emitter, extents: Sequence[Size], inits: Sequence[SSAValue],
         body: Callable[[list[SSAValue], list[SSAValue]], list[SSAValue]]) -> list[SSAValue]:
    """Sequential loops over `extents` (the last innermost, row-major order) carrying `inits` through
    body(index, carried) -> carried: the carried values at the end."""
    def level(ivs: list[SSAValue], carried: list[SSAValue]) -> list[SSAValue]:
        if len(ivs) == len(extents):
            return body(ivs, carried)
        return e.for_loop(extents[len(ivs)], carried, lambda iv, c: level([*ivs, iv], c))  # type: ignore[arg-type]

    return level([], list(inits))


def lower_nonzero(fl, op: opc.NonzeroOp) -> None:  # noqa: ANN001
    """Two row-major passes over x: count the elements that are not zero (NaN is not zero, as in
    NumPy), which defines the result's data size; then, the result allocated at that count, write
    each such element's coordinates into the next column. Sequential: the columns are in order."""
    e, elem = fl.e, element_of(op.x)
    shape = list(shape_of(op.x))

    def is_set(idx: list[SSAValue]) -> SSAValue:
        return e.convert(fl.value_at(op.x, idx), elem, IntegerType(1))

    def step(hit: SSAValue, n: SSAValue) -> SSAValue:
        return e.value(arith.AddiOp(n, e.value(arith.SelectOp(hit, e.index(1), e.index(0)))))

    (count,) = scan(e, shape, [e.index(0)], lambda idx, n: [step(is_set(idx), n[0])])
    count.name_hint = "count"
    fl.define_data_size(op, count)
    out = fl.buffer_for(op.result)

    def place(idx: list[SSAValue], n: list[SSAValue]) -> list[SSAValue]:
        hit = is_set(idx)
        then = Block()
        with e.at(then):
            for d, i in enumerate(idx):
                e.store(e.value(arith.IndexCastOp(i, i64)), out, [e.index(d), n[0]])
            e.emit(scf.YieldOp())
        e.emit(scf.IfOp(hit, [], Region(then)))
        return [step(hit, n[0])]

    scan(e, shape, [e.index(0)], place)


def lower_topk(fl, op: opc.TopkOp) -> None:  # noqa: ANN001
    """k read and checked (0 <= k <= the axis size) on the host, which defines the results' data size;
    then each line (the other positions, in parallel) picks k times the best element after the one
    picked before in the order (value, then the lower index first): O(k n) per line, no scratch, sorted,
    ties to the lower index as ONNX says."""
    e, elem = fl.e, element_of(op.x)
    shape, axis = list(shape_of(op.x)), op.axis_index()
    n = shape[axis]
    raw = fl.value_at(op.k, [e.index(0)] * len(shape_of(op.k)))
    size = f"{n}" if isinstance(n, int) else "the axis size"
    code = fl.checks.code(op, "ValueError", f"{op.name}: k = {{value}} is out of range [0, {size}] for axis {axis}")
    status = fl.checks.status()
    k = e.value(CheckIndexOp(raw, status, n + 1 if isinstance(n, int) else fl.size_value(n + 1), code, wrap=False))
    e.emit(RaiseStatusOp(status))
    fl.define_data_size(op, k)
    values, indices = fl.buffer_for(op.values), fl.buffer_for(op.indices)
    t = compute_type(scalar_type(elem))
    unsigned = is_unsigned(elem)
    largest = opc.flag(op.largest)
    none = e.const(-1, IndexType())

    def cmp(pred: str, a: SSAValue, b: SSAValue) -> SSAValue:
        if opc.is_float(t):
            return e.value(arith.CmpfOp(a, b, {"gt": "ogt", "lt": "olt", "eq": "oeq"}[pred]))
        return e.value(arith.CmpiOp(a, b, pred if pred == "eq" else ("u" if unsigned else "s") + pred))

    def before(av: SSAValue, ai: SSAValue, bv: SSAValue, bi: SSAValue) -> SSAValue:
        """(av, ai) comes first in the order: a better value, or an equal one at a lower index."""
        tie = e.value(arith.AndIOp(cmp("eq", av, bv), e.value(arith.CmpiOp(ai, bi, "slt"))))
        return e.value(arith.OrIOp(cmp("gt" if largest else "lt", av, bv), tie))

    def line(ix: list[SSAValue]) -> None:
        def pick(r: SSAValue, prev: list[SSAValue]) -> list[SSAValue]:
            def visit(j: SSAValue, best: list[SSAValue]) -> list[SSAValue]:
                v = e.to_compute(fl.value_at(op.x, [*ix[:axis], j, *ix[axis:]]))
                after = e.value(arith.OrIOp(e.value(arith.CmpiOp(prev[1], none, "eq")),
                                            before(prev[0], prev[1], v, j)))
                better = e.value(arith.OrIOp(e.value(arith.CmpiOp(best[1], none, "eq")),
                                             before(v, j, best[0], best[1])))
                take = e.value(arith.AndIOp(after, better))
                return [e.value(arith.SelectOp(take, v, best[0])), e.value(arith.SelectOp(take, j, best[1]))]

            best = e.for_loop(n, [e.const(0, t), none], visit)
            at = [*ix[:axis], r, *ix[axis:]]
            e.store(e.to_storage(best[0], elem), values, at)
            e.store(e.value(arith.IndexCastOp(best[1], i64)), indices, at)
            return best

        e.for_loop(data_size(fl, op), [e.const(0, t), none], pick)  # type: ignore[arg-type]

    others = [d for i, d in enumerate(shape) if i != axis]
    e.parallel(others or [1], lambda ix: line(ix if others else []))


def lower_unique(fl, op: opc.UniqueOp) -> None:  # noqa: ANN001
    """Sequential passes over x, O(n^2) compares, two scratch arrays of n:
    at[i] = the first index holding x[i]'s value (the distinct values are the i with at[i] == i; their
    number is the data size); place[i] = x[i]'s value's place in y (sorted: how many distinct values are
    smaller; else how many first occur before it); then y, first and inverse are written at place[i]
    and counts summed there."""
    e, elem = fl.e, element_of(op.x)
    (n,) = shape_of(op.x)
    t = compute_type(scalar_type(elem))
    unsigned = is_unsigned(elem)
    at, place = fl.alloc([n], i64), fl.alloc([n], i64)
    fl.allocs.extend([at, place])

    def x_at(i: SSAValue) -> SSAValue:
        return e.to_compute(fl.value_at(op.x, [i]))

    def cmp(pred: str, a: SSAValue, b: SSAValue) -> SSAValue:
        if opc.is_float(t):
            return e.value(arith.CmpfOp(a, b, {"lt": "olt", "eq": "oeq"}[pred]))
        return e.value(arith.CmpiOp(a, b, pred if pred == "eq" else ("u" if unsigned else "s") + pred))

    def index_of(v: SSAValue) -> SSAValue:
        return e.value(arith.IndexCastOp(v, IndexType()))

    def count_if(body: Callable[[SSAValue], SSAValue]) -> SSAValue:
        """How many j in [0, n) body(j) holds for."""
        return e.for_loop(n, [e.index(0)], lambda j, c: [e.value(arith.AddiOp(
            c[0], e.value(arith.SelectOp(body(j), e.index(1), e.index(0)))))])[0]

    def first_holding(i: SSAValue) -> list[SSAValue]:
        """The lowest j with x[j] == x[i] (i itself if none before it)."""
        xi = x_at(i)

        def step(j: SSAValue, lo: list[SSAValue]) -> list[SSAValue]:
            hit = e.value(arith.AndIOp(cmp("eq", x_at(j), xi), e.value(arith.CmpiOp(j, lo[0], "slt"))))
            return [e.value(arith.SelectOp(hit, j, lo[0]))]

        e.store(e.value(arith.IndexCastOp(e.for_loop(n, [i], step)[0], i64)), at, [i])
        return []

    e.for_loop(n, [], lambda i, _: first_holding(i))

    def distinct(j: SSAValue) -> SSAValue:
        return e.value(arith.CmpiOp(index_of(e.load(at, [j])), j, "eq"))

    count = count_if(distinct)
    count.name_hint = "count"
    fl.define_data_size(op, count)
    y, first, inverse, counts = (fl.buffer_for(r) for r in op.results)
    sorted_ = opc.flag(op.sorted)

    def rank(i: SSAValue) -> list[SSAValue]:
        xi, fi = x_at(i), index_of(e.load(at, [i]))

        def before(j: SSAValue) -> SSAValue:
            other = cmp("lt", x_at(j), xi) if sorted_ else e.value(arith.CmpiOp(j, fi, "slt"))
            return e.value(arith.AndIOp(distinct(j), other))

        e.store(e.value(arith.IndexCastOp(count_if(before), i64)), place, [i])
        return []

    e.for_loop(n, [], lambda i, _: rank(i))
    zero_fill(e, counts, [data_size(fl, op)], i64)  # type: ignore[list-item]  (a run-time size)

    def write(i: SSAValue) -> list[SSAValue]:
        p = index_of(e.load(place, [i]))
        e.store(e.value(arith.IndexCastOp(p, i64)), inverse, [i])
        e.store(e.value(arith.AddiOp(e.load(counts, [p]), e.const(1, i64))), counts, [p])
        then = Block()
        with e.at(then):
            e.store(fl.value_at(op.x, [i]), y, [p])
            e.store(e.value(arith.IndexCastOp(i, i64)), first, [p])
            e.emit(scf.YieldOp())
        e.emit(scf.IfOp(distinct(i), [], Region(then)))
        return []

    e.for_loop(n, [], lambda i, _: write(i))


def lower_non_max_suppression(fl, op: opc.NonMaxSuppressionOp) -> None:  # noqa: ANN001
    """ONNX's greedy pass, per batch and class in order, on the host: each pick is the best score above
    the threshold after the pick before (score, then the lower index: topk's order, no sorting scratch);
    it is kept unless a box kept before in its class overlaps it by more than the IoU threshold (as
    ONNX's reference computes IoU) or the class has max_out already. Kept rows go to a scratch of
    B*C*N rows; their number defines the result's data size, and the result is copied from there."""
    e, elem = fl.e, element_of(op.boxes)
    t = compute_type(scalar_type(elem))
    nb, nbox, _ = shape_of(op.boxes)
    nc = shape_of(op.scores)[1]
    i1 = IntegerType(1)

    def one(v: SSAValue) -> SSAValue:
        return fl.value_at(v, [e.index(0)] * len(shape_of(v)))

    max_out = e.value(arith.IndexCastOp(one(op.max_out), IndexType()))
    iou, floor = e.to_compute(one(op.iou)), e.to_compute(one(op.score))
    rows, kept = fl.alloc([nb * nc * nbox, 3], i64), fl.alloc([nbox], i64)
    fl.allocs.extend([rows, kept])
    none, zero, false = e.const(-1, IndexType()), e.const(0, t), e.const(0, i1)

    def f(kind: type[Operation], *args: SSAValue) -> SSAValue:
        return e.value(kind(*args))  # type: ignore[call-arg]

    def both(*conds: SSAValue) -> SSAValue:
        out = conds[0]
        for c in conds[1:]:
            out = f(arith.AndIOp, out, c)
        return out

    def positive(v: SSAValue) -> SSAValue:
        return e.value(arith.CmpfOp(v, zero, "ogt"))

    def extent(b: SSAValue, j: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue, SSAValue]:
        """(x min, x max, y min, y max) of box j of batch b."""
        c = [e.to_compute(fl.value_at(op.boxes, [b, j, e.index(k)])) for k in range(4)]
        if op.center_point_box.value.data == 1:  # (x, y, width, height)
            half_w, half_h = f(arith.MulfOp, c[2], e.const(0.5, t)), f(arith.MulfOp, c[3], e.const(0.5, t))
            return (f(arith.SubfOp, c[0], half_w), f(arith.AddfOp, c[0], half_w),
                    f(arith.SubfOp, c[1], half_h), f(arith.AddfOp, c[1], half_h))
        return (f(arith.MinimumfOp, c[1], c[3]), f(arith.MaximumfOp, c[1], c[3]),
                f(arith.MinimumfOp, c[0], c[2]), f(arith.MaximumfOp, c[0], c[2]))

    def area(a: tuple[SSAValue, ...]) -> SSAValue:
        return f(arith.MulfOp, f(arith.SubfOp, a[1], a[0]), f(arith.SubfOp, a[3], a[2]))

    def overlaps(a: tuple[SSAValue, ...], b: tuple[SSAValue, ...]) -> SSAValue:
        """IoU(a, b) > iou, where both boxes and their intersection have an area (else not)."""
        w = f(arith.SubfOp, f(arith.MinimumfOp, a[1], b[1]), f(arith.MaximumfOp, a[0], b[0]))
        h = f(arith.SubfOp, f(arith.MinimumfOp, a[3], b[3]), f(arith.MaximumfOp, a[2], b[2]))
        inter = f(arith.MulfOp, w, h)
        union = f(arith.SubfOp, f(arith.AddfOp, area(a), area(b)), inter)
        ratio = f(arith.DivfOp, inter, union)
        return both(positive(w), positive(h), positive(inter), positive(area(a)), positive(area(b)),
                    positive(union), e.value(arith.CmpfOp(ratio, iou, "ogt")))

    def before(av: SSAValue, ai: SSAValue, bv: SSAValue, bi: SSAValue) -> SSAValue:
        tie = both(e.value(arith.CmpfOp(av, bv, "oeq")), e.value(arith.CmpiOp(ai, bi, "slt")))
        return f(arith.OrIOp, e.value(arith.CmpfOp(av, bv, "ogt")), tie)

    def per_class(b: SSAValue, c: SSAValue, total: SSAValue) -> SSAValue:
        def pick(_: SSAValue, carry: list[SSAValue]) -> list[SSAValue]:
            pv, pi, count, done = carry

            def visit(j: SSAValue, best: list[SSAValue]) -> list[SSAValue]:
                v = e.to_compute(fl.value_at(op.scores, [b, c, j]))
                after = f(arith.OrIOp, e.value(arith.CmpiOp(pi, none, "eq")), before(pv, pi, v, j))
                better = f(arith.OrIOp, e.value(arith.CmpiOp(best[1], none, "eq")), before(v, j, best[0], best[1]))
                take = both(after, e.value(arith.CmpfOp(v, floor, "ogt")), better)
                return [f(arith.SelectOp, take, v, best[0]), f(arith.SelectOp, take, j, best[1])]

            bv, bi = e.for_loop(nbox, [zero, none], visit)
            found = e.value(arith.CmpiOp(bi, none, "ne"))
            at = f(arith.SelectOp, found, bi, e.index(0))
            box = extent(b, at)

            def check(s: SSAValue, hit: list[SSAValue]) -> list[SSAValue]:
                earlier = e.value(arith.CmpiOp(s, count, "slt"))
                held = e.value(arith.IndexCastOp(e.load(kept, [s]), IndexType()))  # (unset past count: not read)
                other = f(arith.SelectOp, earlier, held, e.index(0))
                return [f(arith.OrIOp, hit[0], both(earlier, overlaps(box, extent(b, other))))]

            (suppressed,) = e.for_loop(nbox, [false], check)
            keep = both(found, e.value(arith.CmpiOp(count, max_out, "slt")),
                        f(arith.XOrIOp, suppressed, e.const(1, i1)))
            then = Block()
            with e.at(then):
                e.store(e.value(arith.IndexCastOp(at, i64)), kept, [count])
                for k, v in enumerate((b, c, at)):
                    e.store(e.value(arith.IndexCastOp(v, i64)), rows, [done, e.index(k)])
                e.emit(scf.YieldOp())
            e.emit(scf.IfOp(keep, [], Region(then)))
            step = f(arith.SelectOp, keep, e.index(1), e.index(0))
            return [f(arith.SelectOp, found, bv, pv), f(arith.SelectOp, found, bi, pi),
                    f(arith.AddiOp, count, step), f(arith.AddiOp, done, step)]

        return e.for_loop(nbox, [zero, none, e.index(0), total], pick)[3]

    (total,) = e.for_loop(nb, [e.index(0)], lambda b, tb: e.for_loop(
        nc, tb, lambda c, tc: [per_class(b, c, tc[0])]))
    total.name_hint = "count"
    fl.define_data_size(op, total)
    out = fl.buffer_for(op.result)
    e.parallel([data_size(fl, op), 3], lambda idx: e.store(e.load(rows, idx), out, idx))  # type: ignore[list-item]


def data_size(fl, op: Operation) -> Size:  # noqa: ANN001
    """The data size `op` defined (the size it was equated with, where it was: define_data_size checked it)."""
    return fl.sizes.resolve(Sym.symbol(next(name for name, d in fl.sizes.data.items() if d.op is op)))


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
    if isinstance(op, opc.ConvOp) and fl.epilogue_body is not None:  # a flat nest on its output (opc-schedule)
        body, fl.epilogue_body = fl.epilogue_body(), None
        callee = f"{kernel}_{dtype_suffix(element_of(op.result))}"
        fl.epilogue_gemm = fl.e.emit(CallOp(callee, args, [fl.size_value(v) if isinstance(v, Sym) else v
                                                           for v in ints], epilogue=body))
        return
    call(fl, f"{kernel}_{dtype_suffix(element_of(op.result))}", args, ints)


ACT_CODES = {"none": 0, "relu": 1, "gelu": 2}  # runtime/opc_nn.h's fused_conv_epilogue (opc_gemm.h's codes)


def lower_fused_conv_epilogue(fl, op: opc.FusedConvEpilogueOp) -> None:  # noqa: ANN001
    """fused_conv_epilogue (x, w, bias, out[, reserve]): one runtime call with the conv's geometry and
    the activation's code; f32 stride-1 convs apply bias and activation in the kernel's store."""
    kernel = "fused_conv_epilogue" + ("_reserve" if op.reserve_space is not None else "")
    call(fl, f"{kernel}_{dtype_suffix(element_of(op.out))}", buffers(fl, op),
         [*conv_ints(op.geometry()), ACT_CODES[op.activation.data]])


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
    opc.NonzeroOp: lower_nonzero,
    opc.TopkOp: lower_topk,
    opc.UniqueOp: lower_unique,
    opc.NonMaxSuppressionOp: lower_non_max_suppression,
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
    copy = e.value(memref.AllocOp([], [], MemRefType(element_of(buf), full)))
    copy.name_hint = f"{v.name_hint or 'operand'}_batch"
    fl.allocs.append(copy)
    e.parallel(full, lambda idx: e.store(e.load(buf, broadcast_index(e, idx, full, shape)), copy, idx))
    return copy, matrix

