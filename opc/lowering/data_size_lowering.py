"""The loop lowering of the ops whose result size depends on the data (opc/dialects/sizes.py's data
sizes): each computes its size first on the host (a count, or k read from its tensor), hands it to
`define_data_size` (size_lowering.py), which makes it the size's value for the rest of the function,
then writes its results at it.

- `nonzero`: a counting pass, then a fill pass writing each position at the next column;
- `topk`: k read and checked, then per line k picks of the best element after the previous pick;
- `unique`: each slice's first equal slice, each distinct slice's place, then the results written there;
- `non_max_suppression`: ONNX's greedy pass per batch and class into a scratch, copied once counted.

Sequential on purpose: the positions are in order, and a count is a prefix sum. On the CUDA target
the same loops run: the sequential passes in one-thread kernels, each count copied to the host
before the result is allocated at it (CudaEmitter.kernel_results).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerType, i64
from xdsl.ir import Block, Operation, Region, SSAValue

from opc.dialects import opc
from opc.dialects.kinds import element_of, shape_of
from opc.dialects.opc_loops import CheckIndexOp, RaiseStatusOp
from opc.lowering.scalars import Emitter, compute_type, is_unsigned, scalar_type
from opc.symbolic import Size, Sym


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
    """Sequential passes over the n slices of x along the axis, O(n^2) slice compares (each over the
    slice's elements, row-major: a 1-D x's slices are its elements), two scratch arrays of n:
    at[i] = the first slice equal to slice i (the distinct slices are the i with at[i] == i; their
    number is the data size); place[i] = slice i's place in y (sorted: how many distinct slices are
    lexicographically smaller; else how many first occur before it); then y, first and inverse are
    written at place[i] and counts summed there."""
    e, elem = fl.e, element_of(op.x)
    shape, axis = list(shape_of(op.x)), op.axis_index()
    n, rest = shape[axis], shape[:axis] + shape[axis + 1:]
    t = compute_type(scalar_type(elem))
    unsigned = is_unsigned(elem)
    i1 = IntegerType(1)
    at, place = fl.alloc([n], i64), fl.alloc([n], i64)
    fl.allocs.extend([at, place])

    def along(i: SSAValue, r: list[SSAValue]) -> list[SSAValue]:
        return [*r[:axis], i, *r[axis:]]

    def x_at(i: SSAValue, r: list[SSAValue]) -> SSAValue:
        return e.to_compute(fl.value_at(op.x, along(i, r)))

    def ne(va: SSAValue, vb: SSAValue) -> SSAValue:
        if opc.is_float(t):  # NaN equals nothing, itself included
            return e.value(arith.CmpfOp(va, vb, "une"))
        return e.value(arith.CmpiOp(va, vb, "ne"))

    def lt(va: SSAValue, vb: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        """va (of slice a) before vb (of slice b), where they differ. A strict total order on slices
        even with NaN: a NaN comes after every number, and of two NaNs the one of the earlier slice
        first (as if each NaN were the pair (1, its slice), each number (0, itself))."""
        if not opc.is_float(t):
            return e.value(arith.CmpiOp(va, vb, "ult" if unsigned else "slt"))
        nan_a, nan_b = (e.value(arith.CmpfOp(v, v, "une")) for v in (va, vb))
        both = e.value(arith.AndIOp(nan_b, e.value(arith.CmpiOp(a, b, "slt"))))
        number = e.value(arith.OrIOp(nan_b, e.value(arith.CmpfOp(va, vb, "olt"))))
        return e.value(arith.SelectOp(nan_a, both, number))

    def differ(a: SSAValue, b: SSAValue) -> list[SSAValue]:
        """Whether slices a and b differ, and whether a comes first at the first element they differ at."""
        def step(r: list[SSAValue], seen: list[SSAValue]) -> list[SSAValue]:
            va, vb = x_at(a, r), x_at(b, r)
            less = e.value(arith.SelectOp(seen[0], seen[1], lt(va, vb, a, b)))
            return [e.value(arith.OrIOp(seen[0], ne(va, vb))), less]

        return scan(e, rest, [e.const(0, i1), e.const(0, i1)], step)

    def same(a: SSAValue, b: SSAValue) -> SSAValue:
        return e.value(arith.XOrIOp(differ(a, b)[0], e.const(1, i1)))

    def smaller(a: SSAValue, b: SSAValue) -> SSAValue:
        differs, first = differ(a, b)
        return e.value(arith.AndIOp(differs, first))

    def index_of(v: SSAValue) -> SSAValue:
        return e.value(arith.IndexCastOp(v, IndexType()))

    def count_if(body: Callable[[SSAValue], SSAValue]) -> SSAValue:
        """How many j in [0, n) body(j) holds for."""
        return e.for_loop(n, [e.index(0)], lambda j, c: [e.value(arith.AddiOp(
            c[0], e.value(arith.SelectOp(body(j), e.index(1), e.index(0)))))])[0]

    def first_holding(i: SSAValue) -> list[SSAValue]:
        """The lowest j whose slice equals slice i (i itself if none before it)."""
        def step(j: SSAValue, lo: list[SSAValue]) -> list[SSAValue]:
            hit = e.value(arith.AndIOp(e.value(arith.CmpiOp(j, lo[0], "slt")), same(j, i)))
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
        fi = index_of(e.load(at, [i]))

        def before(j: SSAValue) -> SSAValue:
            other = smaller(j, i) if sorted_ else e.value(arith.CmpiOp(j, fi, "slt"))
            return e.value(arith.AndIOp(distinct(j), other))

        e.store(e.value(arith.IndexCastOp(count_if(before), i64)), place, [i])
        return []

    e.for_loop(n, [], lambda i, _: rank(i))
    e.parallel([data_size(fl, op)], lambda idx: e.store(e.const(0, i64), counts, idx))  # type: ignore[list-item]

    def copy(i: SSAValue, p: SSAValue) -> None:
        """Slice i of x to slice p of y."""
        def step(r: list[SSAValue], _: list[SSAValue]) -> list[SSAValue]:
            e.store(fl.value_at(op.x, along(i, r)), y, along(p, r))
            return []

        scan(e, rest, [], step)

    def write(i: SSAValue) -> list[SSAValue]:
        p = index_of(e.load(place, [i]))
        e.store(e.value(arith.IndexCastOp(p, i64)), inverse, [i])
        e.store(e.value(arith.AddiOp(e.load(counts, [p]), e.const(1, i64))), counts, [p])
        then = Block()
        with e.at(then):
            copy(i, p)
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


DATA_SIZE_LOWERINGS: dict[type[Operation], Callable] = {
    opc.NonzeroOp: lower_nonzero,
    opc.TopkOp: lower_topk,
    opc.UniqueOp: lower_unique,
    opc.NonMaxSuppressionOp: lower_non_max_suppression,
}
"""The data-size ops, each materialized by a function of its own (nn_lowering.LOWERINGS includes them)."""
