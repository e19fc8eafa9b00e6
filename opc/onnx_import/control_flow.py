"""If, Loop and Scan: as MLIR's `scf` ops where a condition or trip count is known at run time only,
their bodies imported inline where everything is known at compile time.

    If    condition known at compile time: the taken branch only;
          known at run time: an `scf.if`, each branch imported into its region, so a branch not
          taken costs nothing (both branches must give outputs of one type; where sequences or
          optionals are among the outputs, both branches are imported and each output selected);
    Loop  the body imported once into a loop's region, so a new trip count costs no compile:
          an `scf.for` over max(M, 0) iterations where the body gives its condition back true (a
          constant, or passed through), else an `scf.while` carrying the iteration number, the
          condition and the loop-carried values. Scan outputs: each iteration writes its row of a
          buffer of M rows (tensor.insert_slice), cut after an scf.while to the rows it ran (M and
          the rows sizes read from tensors at run time: opc/dialects/sizes.py's value sizes).
          A slice by the iteration number (x[i:i+c], tensor.py's slice_by_values) has a static size.
          A Loop carrying sequences (growing_loop): an scf.for where its body appends to them, the
          appended tensors stacked as scan outputs are (padded where their sizes are read from
          values, x[:i+1]); its counts are needed at compile time;
    Scan  an `scf.for` over the sequence (static or a run-time size), the body imported once: each
          step reads its slices of the scan inputs (tensor.extract_slice at the loop index) and
          writes its scan outputs' elements into the stacked results (tensor.insert_slice, one
          buffer each). Opset 8's batched Scan: an scf.for over the batch around that loop, each
          element's trip count its sequence_lens.

Sequences and optionals (lists.py) pass through branches as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np
from xdsl.dialects import arith, scf, tensor
from xdsl.dialects.builtin import IndexType, IntegerAttr, TensorType, i1, i64
from xdsl.ir import Attribute, Block, Region, SSAValue

from opc.dialects import opc as o
from opc.dialects import slices
from opc.dialects.kinds import element_of, shape_of
from opc.dialects.opc import DYNAMIC
from opc.onnx_import.common import Value, Values
from opc.onnx_import.graph import BY_NUMPY, Node, NodeEmitter, converter
from opc.onnx_import.lists import Appended, Item, Items, Labels, Maps, Opt, Seq, is_list, leaves
from opc.symbolic import Size, Sym


def import_body(node: Node, attr: str, bindings: Sequence[Item]) -> Items:
    """The subgraph `attr` of node imported inline with its inputs bound; its outputs (arrays where
    known at compile time). Names the body defines are forgotten afterwards, so the next iteration
    (or the other branch) defines them anew; names of the enclosing graphs stay visible."""
    return node.importer.inline(node.attr(attr), bindings, node.opset, node.label, keep_constants=True)


def as_value(node: Node, v: Value) -> SSAValue:
    return v if isinstance(v, SSAValue) else node.e.constant(np.asarray(v))


def operand(node: Node, k: int) -> Item:
    """Input k: a sequence or optional, its value where known at compile time, else its SSA value."""
    if node.proto.input[k] in node.importer.lists:
        return node.item(k)
    return node.importer.compile_time(node.proto.input[k]) if node.known(k) else node.input(k)


def type_of(v: Item) -> tuple:
    if isinstance(v, Seq):
        return ("sequence", tuple(type_of(x) for x in v.items))
    if isinstance(v, Opt):
        return ("optional", None if v.item is None else type_of(v.item))
    if isinstance(v, (Maps, Labels)):
        return (type(v).__name__, v.labels, type_of(v.item))
    if isinstance(v, SSAValue):
        return (str(element_of(v)), shape_of(v))
    return (str(BY_NUMPY[np.asarray(v).dtype]), np.shape(v))  # as the constant it becomes


# ---------------------------------------------------------------------------
# If
# ---------------------------------------------------------------------------


@contextmanager
def emitting_into(e: NodeEmitter, block: Block) -> Iterator[None]:
    """The ops the importer emits inside the `with` go at the end of block."""
    outer, e.ops = e.ops, []
    try:
        yield
    finally:
        inner, e.ops = e.ops, outer
        block.add_ops(inner)


def in_region(node: Node, arg_types: Sequence[Attribute],
              build: Callable[[Sequence[SSAValue]], Items], inits: Sequence[SSAValue] = ()) -> tuple[Block, Items]:
    """A block holding the ops the importer emits while `build` runs on the block's arguments, and
    what `build` returned (the block has no terminator yet). `inits`: the values the arguments
    start as (a loop's), whose run-time sizes they keep."""
    block = Block(arg_types=arg_types)
    if node.e.tracker is not None and inits:
        node.e.tracker.sizes.carry(inits, block.args)
    with emitting_into(node.e, block):
        out = build(block.args)
    return block, out


def values_in(node: Node, block: Block, items: Items) -> list[SSAValue]:
    """items as SSA values, a constant made inside the block."""
    with emitting_into(node.e, block):
        return [as_value(node, v) for v in items]  # type: ignore[arg-type]


def yield_values(node: Node, block: Block, items: Items) -> list[SSAValue]:
    """items as SSA values (a constant made inside the block), yielded by the block."""
    values = values_in(node, block, items)
    block.add_op(scf.YieldOp(*values))
    return values


def stacking_args(e: NodeEmitter, block: Block, inits: Sequence[SSAValue]) -> list[SSAValue]:
    """Loop-carried arguments added to block for the buffers a loop stacks its outputs into (inits,
    made once the body told their shapes), keeping the buffers' run-time sizes."""
    args = [block.insert_arg(v.type, len(block.args)) for v in inits]
    if e.tracker is not None:
        e.tracker.sizes.carry(inits, args)
    return args


def scalar_of(node: Node, v: SSAValue, what: str) -> SSAValue:
    """The one element of v as a scalar (a condition, a trip count)."""
    if int(np.prod(shape_of(v))) != 1:
        raise node.fail(f"the {what} must hold one element, it has shape {list(shape_of(v))}")
    return node.e.value(tensor.ExtractOp(node.e.reshape(v, []), [], element_of(v)))


@converter("If", since=1)
def if_(node: Node) -> Items:
    if node.known(0):
        taken = "then_branch" if bool(np.asarray(node.const(0, "condition")).reshape(-1)[0]) else "else_branch"
        return import_body(node, taken, [])
    branches = [in_region(node, [], lambda _, b=b: import_body(node, b, [])) for b in ("then_branch", "else_branch")]
    (_, then_out), (_, else_out) = branches
    if all(type_of(a) == type_of(b) for a, b in zip(then_out, else_out)):
        return if_at_run_time(node, branches)
    if any(is_list(v) for v in [*then_out, *else_out]):
        # sequences of two lengths, an optional empty in one branch only: the outputs' layout depends on the
        # condition, so it is needed at compile time (bound by value where it is a graph input, as a shape is)
        taken = "then_branch" if bool(np.asarray(node.const(0, "condition")).reshape(-1)[0]) else "else_branch"
        return import_body(node, taken, [])
    i, a, b = next((i, a, b) for i, (a, b) in enumerate(zip(then_out, else_out)) if type_of(a) != type_of(b))
    raise node.fail(f"output {i} is {type_of(a)} in then_branch and {type_of(b)} in else_branch: "
                    "with a condition known only at run time, opc needs both of one type")


def if_at_run_time(node: Node, branches: list[tuple[Block, Items]]) -> Items:
    """An scf.if on the condition, each branch its region: only the branch taken runs. Sequences and
    optionals (of one layout in both branches) go through it as their tensors, regrouped after."""
    for block, out in branches:
        yield_values(node, block, [x for v in out for x in leaves(v)])
    cond = scalar_of(node, node.input(0), "condition")
    types = [v.type for v in branches[0][0].last_op.operands]
    op = scf.IfOp(cond, types, Region(branches[0][0]), Region(branches[1][0]))
    node.e.emit(op)
    results = iter(op.results)
    return [rebuilt(v, results) for v in branches[0][1]]


def rebuilt(like: Item, values: Iterator[SSAValue]) -> Item:
    """`like`'s layout over the next of `values` (lists.leaves' inverse)."""
    if isinstance(like, Seq):
        return Seq(tuple(rebuilt(x, values) for x in like.items))
    if isinstance(like, Opt):
        return Opt(None if like.item is None else rebuilt(like.item, values))
    if isinstance(like, (Maps, Labels)):
        return replace(like, item=next(values))
    return next(values)


# ---------------------------------------------------------------------------
# Loop
# ---------------------------------------------------------------------------


@converter("Loop", since=1)
def loop(node: Node) -> Items:
    state: Items = [operand(node, k + 2) for k in range(len(node.proto.input) - 2)]
    n_scan = len(node.attr("body").output) - 1 - len(state)
    if any(is_list(v) for v in state):
        return growing_loop(node, state)
    values = [as_value(node, v) for v in state]  # type: ignore[arg-type]
    looped = counted_loop(node, values) if node.has(0) else None
    return looped if looped is not None else loop_at_run_time(node, values, n_scan)


def growing_loop(node: Node, state: Items) -> Items:
    """A Loop that carries sequences (or optionals holding one), each growing by the tensors its body
    appends: an scf.for (counted_loop) whose appended tensors are stacked as scan outputs are
    (padded where their sizes change per iteration, x[:i+1]), the sequences after it their tensors
    from before the loop, then each iteration's rows. Its trip count and condition are needed at
    compile time (bound by value where graph inputs give them), and its body must keep the
    condition true: opc's sequences have lengths known at compile time."""
    if any(is_list(v) and not isinstance(v.item if isinstance(v, Opt) else v, Seq) for v in state):
        raise node.fail("it carries an optional that holds no sequence, or classifier maps or labels: opc's "
                        "loops carry tensors, and sequences (or optionals holding one) their bodies append to")
    if not node.has(0):
        raise node.fail("it carries a sequence and has no trip count M: opc's sequences have lengths known "
                        "at compile time")
    m = int(np.asarray(node.const(0, "trip count")).reshape(-1)[0])
    go = not node.has(1) or bool(np.asarray(node.const(1, "condition")).reshape(-1)[0])
    looped = counted_loop(node, state, max(m, 0) if go else 0)
    if looped is None:
        raise node.fail("it carries a sequence, and its body may turn the condition false, changes the type "
                        "of a tensor it carries, or gives back a sequence other than the one it carries with "
                        "tensors appended: opc's sequences have lengths known at compile time")
    return looped


def trip_count(node: Node) -> int | SSAValue:
    """How often a loop whose body never turns its condition false runs: max(M, 0) where the condition
    enters true (or is absent), else 0. A number where M and the condition are known at compile time,
    else an `index` value computed at run time."""
    e = node.e
    if node.has(1) and node.known(1) and not bool(np.asarray(node.const(1, "condition")).reshape(-1)[0]):
        return 0
    m = trip_rows(node)
    if not node.has(1) or node.known(1):
        return m
    go = scalar_of(node, node.input(1), "condition")
    return e.value(arith.SelectOp(go, m if isinstance(m, SSAValue) else index(e, m), index(e, 0)))


def counted_loop(node: Node, state: Items, trips: int | SSAValue | None = None) -> Items | None:
    """A Loop whose body never turns its condition false (gives it back true, as a constant or passed
    through) runs max(M, 0) times, or none where the condition enters false: one scf.for, its body
    imported once. Each iteration writes its scan outputs' elements at row i of their stacked results
    (tensor.insert_slice into a buffer of M rows, updated in place), and so the tensors it appends to
    a sequence it carries (the body sees it as Appended: its own tensors only). None where the body
    may stop the loop early, or changes the state's type. `trips`: the count where the caller knows it."""
    e = node.e
    counter = TensorType(i64, [])
    tensors = [v for v in state if isinstance(v, SSAValue)]
    types = [v.type for v in tensors]

    def build(args: Sequence[SSAValue]) -> Items:
        if e.tracker is not None:
            e.tracker.sizes.carry(tensors, args[1:])
        i = e.value(tensor.FromElementsOp.build(operands=[[e.value(arith.IndexCastOp(args[0], i64))]],
                                                result_types=[counter]))
        carried = iter(args[1:])
        return import_body(node, "body", [i, np.array(True), *(as_appended(v) if is_list(v) else next(carried)
                                                               for v in state)])

    trips = trip_count(node) if trips is None else trips
    with sequences_stacked(node):
        block, out = in_region(node, [IndexType(), *types], build)
    if isinstance(out[0], SSAValue) or not bool(np.asarray(out[0]).reshape(-1)[0]):
        return None
    new, scans = out[1:1 + len(state)], out[1 + len(state):]
    if not all(growing(w) is not None if is_list(v) else not is_list(w) for v, w in zip(state, new)) \
            or any(is_list(v) for v in scans):
        return None
    appended = [list(growing(w).items) for w in new if is_list(w)]  # type: ignore[union-attr]
    values = values_in(node, block, [*(w for w in new if not is_list(w)), *(x for a in appended for x in a), *scans])
    new_state, elems = values[:len(tensors)], values[len(tensors):]
    if [v.type for v in new_state] != types:
        return None
    n_appended = sum(len(a) for a in appended)
    ragged = [ragged_dims(node, v) for v in elems[:n_appended]]
    for k, v in enumerate(elems[n_appended:]):
        if ragged_dims(node, v):
            raise node.fail(f"scan output {k} has a size the body computes from values: ONNX stacks scan outputs "
                            "of one shape, which opc must know before the loop")
    with emitting_into(e, block):  # each ragged tensor's sizes, stacked as a scan output of int64 is
        sizes = [dims_of(e, v, r) for v, r in zip(elems, ragged) if r]
    elems += sizes
    inits = [zeros(e, [trips, *padded_shape(node, v)], element_of(v)) for v in elems]
    results = [*tensors, *inits]
    if trips != 0:  # else no iteration: the state as it entered, the stacks empty
        bufs = stacking_args(e, block, inits)
        with emitting_into(e, block):
            stacked = [write_slot(e, v, buf, block.args[0]) for v, buf in zip(elems, bufs)]
        block.add_op(scf.YieldOp(*new_state, *stacked))
        bound = trips if isinstance(trips, SSAValue) else index(e, trips)
        results = list(e.emit(scf.ForOp(index(e, 0), bound, index(e, 1), [*tensors, *inits], Region(block))).results)
    n, n_scans = len(tensors), len(elems) - n_appended - len(sizes)
    stacks, scan_results = results[n:n + n_appended], results[n + n_appended:n + n_appended + n_scans]
    size_stacks = iter(results[n + n_appended + n_scans:])
    rows = [Rows(b, r, next(size_stacks) if r else None) for b, r in zip(stacks, ragged)]
    return regrown(node, state, new, results[:n], rows, [len(a) for a in appended], scan_results, trips)


def as_appended(v: Item) -> Item:
    """A sequence a loop carries as its body sees it (Appended), in the optional that holds it."""
    return Opt(Appended()) if isinstance(v, Opt) else Appended()


def growing(w: Item) -> Appended | None:
    """The Appended a body gives back, alone or in an optional; None for anything else."""
    inner = w.item if isinstance(w, Opt) else w
    return inner if isinstance(inner, Appended) else None


def ragged_dims(node: Node, v: SSAValue) -> list[int]:
    """The dims of a tensor a loop body appends to a sequence whose sizes it computes from values
    (x[:i+1]: each iteration's own), which its stacked buffer holds padded to their bounds."""
    if node.e.tracker is None:
        return []
    s = node.e.tracker.sizes
    return [d for d, n in enumerate(shape_of(v)) if isinstance(n, Sym) and s.data_symbols(n)]


def padded_shape(node: Node, v: SSAValue) -> list[Size]:
    """v's shape, each size computed from values replaced by its bound (known before the loop)."""
    out: list[Size] = []
    for d, n in enumerate(shape_of(v)):
        if isinstance(n, Sym) and node.e.tracker is not None and node.e.tracker.sizes.data_symbols(n):
            bound = node.e.tracker.sizes.upper_bound(n)
            if not isinstance(bound, int):
                raise node.fail(f"dim {d} of a tensor its body appends to a sequence has a size computed from "
                                f"values ({n}) with no bound known before the loop: opc stacks such tensors padded")
            n = bound
        out.append(n)
    return out


def dims_of(e: NodeEmitter, v: SSAValue, dims: Sequence[int]) -> SSAValue:
    """v's sizes along dims as an int64 tensor (read inside the body that computes them)."""
    shape = shape_of(v)
    sizes = [e.value(arith.IndexCastOp(size_index(e, shape[d]), i64)) for d in dims]
    return e.value(tensor.FromElementsOp.build(operands=[sizes], result_types=[TensorType(i64, [len(dims)])]))


@dataclass
class Rows:
    """The stacked buffer of one tensor a loop appends per iteration; for a ragged one (padded), the
    dims whose sizes each iteration computes and the stacked int64 tensor of those sizes."""

    buf: SSAValue
    ragged: list[int]
    sizes: SSAValue | None

    def row(self, e: NodeEmitter, t: int) -> SSAValue:
        if self.sizes is None:
            return slice_at(e, self.buf, 0, index(e, t))
        shape = list(shape_of(self.buf))[1:]
        sizes: list[int | SSAValue] = list(shape)
        for k, d in enumerate(self.ragged):
            n = e.value(tensor.ExtractOp(self.sizes, [index(e, t), index(e, k)], i64))
            sizes[d] = e.value(arith.IndexCastOp(n, IndexType()))
        t_type = o.tensor([DYNAMIC if d in self.ragged else n for d, n in enumerate(shape)], element_of(self.buf))
        return e.value(slices.extract_slice(self.buf, [index(e, t), *[0] * len(shape)], [1, *sizes],
                                            [1] * (1 + len(shape)), t_type))


@contextmanager
def sequences_stacked(node: Node) -> Iterator[None]:
    """While a Loop's body imports, the sequences its SequenceAt nodes read (tensors of one type,
    from outside the body) stacked once before the loop, not per iteration (sequence.at_run_time)."""
    stacked = node.importer.stacked
    added = []
    for n in node.attr("body").node:
        seq = node.importer.lists.get(n.input[0]) if n.op_type == "SequenceAt" else None
        if isinstance(seq, Seq) and not isinstance(seq, Appended) and stackable(seq) and id(seq) not in stacked:
            stacked[id(seq)] = (seq, stacked_rows(node, seq))
            added.append(id(seq))
    try:
        yield
    finally:
        for k in added:
            del stacked[k]


def stackable(seq: Seq) -> bool:
    """The tensors of seq (some) are of one element type and rank, their shapes static."""
    types = {(t[0], len(t[1])) for t in map(type_of, seq.items)}
    return len(types) == 1 and all(isinstance(d, int) for v in seq.items for d in type_of(v)[1])


def padded_shape_of(seq: Seq) -> list[int]:
    """The shape each tensor of a stackable sequence is padded to: per dim the largest."""
    return [max(dims) for dims in zip(*(type_of(v)[1] for v in seq.items))]


def stacked_rows(node: Node, seq: Seq) -> SSAValue:
    """A stackable sequence's tensors stacked along a new axis 0, each padded with zeros to the
    largest size per dim where their shapes differ (sequence.at_run_time reads each one's own)."""
    e = node.e
    values = [as_value(node, x) for x in seq.items]
    if len({shape_of(v) for v in values}) > 1:
        buf = zeros(e, [len(values), *padded_shape_of(seq)], element_of(values[0]))
        for k, v in enumerate(values):
            buf = write_slot(e, v, buf, index(e, k))
        return buf
    rows = [e.reshape(v, [1, *shape_of(v)]) for v in values]
    return rows[0] if len(rows) == 1 else e.value(o.ConcatOp(rows, 0))


def regrown(node: Node, state: Items, new: Items, carried: Sequence[SSAValue], rows: Sequence[Rows],
            counts: Sequence[int], scans: Sequence[SSAValue], trips: int | SSAValue) -> Items:
    """A counted loop's outputs: the tensors it carries, each sequence its tensors from before the loop
    then per iteration the rows it appended (`counts` per iteration, each of its stacked buffer), and
    the scan outputs."""
    tensors, stacks, count = iter(carried), iter(rows), iter(counts)
    out: Items = []
    for v, w in zip(state, new):
        if is_list(v):
            mine = [next(stacks) for _ in range(next(count))]
            assert isinstance(trips, int), "a loop growing a sequence has its trip count at compile time"
            before = v.item if isinstance(v, Opt) else v
            assert isinstance(before, Seq)
            seq = Seq((*before.items, *(r.row(node.e, t) for t in range(trips) for r in mine)))
            out.append(v if trips == 0 else Opt(seq) if isinstance(w, Opt) else seq)  # none ran: as it entered
        else:
            out.append(next(tensors))
    return [*out, *scans]


def loop_at_run_time(node: Node, state: list[SSAValue], n_scan: int = 0) -> Items:
    """An scf.while over (iteration number, condition, loop-carried values...): its before region
    tests `i < M and cond`, its after region is the body, imported once, and counts i up. Each scan
    output is stacked into a buffer of max(M, 0) rows (tensor.insert_slice at row i), carried by the
    loop, and cut afterwards to the rows the loop ran (the final i: a size read at run time)."""
    e = node.e
    counter = TensorType(i64, [])
    flag = TensorType(i1, [])
    start = e.constant(np.array(0, np.int64))
    cond0 = e.reshape(node.input(1), []) if node.has(1) else e.constant(np.array(True))
    trips = node.input(0) if node.has(0) else None
    if n_scan and trips is None:
        raise node.fail("a Loop with scan outputs and no trip count M: opc stacks them into M rows")
    types = [counter, flag, *(v.type for v in state)]
    inits = [start, cond0, *state]

    def step(args: Sequence[SSAValue]) -> Items:
        out = import_body(node, "body", list(args[:len(types)]))
        i = e.value(tensor.ExtractOp(args[0], [], i64))
        one = e.value(arith.ConstantOp(IntegerAttr(1, i64)))
        nxt = e.value(tensor.FromElementsOp.build(operands=[[e.value(arith.AddiOp(i, one))]], result_types=[counter]))
        cond = as_value(node, out[0])  # type: ignore[arg-type]
        return [nxt, e.reshape(cond, []), *out[1:]]

    with sequences_stacked(node):
        after, out = in_region(node, types, step, inits)
    values = values_in(node, after, out)
    for k, (v, t) in enumerate(zip(values[2:len(types)], types[2:])):
        if v.type != t:
            raise node.fail(f"loop-carried value {k} enters as {type_of(state[k])} and leaves the body as "
                            f"{type_of(v)}: with a trip count or condition known at run time, opc needs one type")
    elems = values[len(types):]
    rows = trip_rows(node) if elems else 0
    bufs = [zeros(e, [rows, *shape_of(v)], element_of(v)) for v in elems]
    if elems and rows == 0:  # no iteration: the state as it entered, the stacks empty
        return [*state, *bufs]
    slots = stacking_args(e, after, bufs)
    if elems:
        with emitting_into(e, after):
            row = e.value(arith.IndexCastOp(e.value(tensor.ExtractOp(after.args[0], [], i64)), IndexType()))
            values[len(types):] = [write_slot(e, v, b, row) for v, b in zip(elems, slots)]
    after.add_op(scf.YieldOp(*values))

    def test(args: Sequence[SSAValue]) -> Items:
        go = e.value(tensor.ExtractOp(args[1], [], i1))
        if trips is not None:
            i = e.value(tensor.ExtractOp(args[0], [], i64))
            m = scalar_of(node, trips, "trip count")
            go = e.value(arith.AndIOp(e.value(arith.CmpiOp(i, m, "slt")), go))
        return [go]

    all_types = [*types, *(b.type for b in bufs)]
    before, (go,) = in_region(node, all_types, test, [*inits, *bufs])
    before.add_op(scf.ConditionOp(go, *before.args))  # type: ignore[arg-type]
    op = e.emit(scf.WhileOp([*inits, *bufs], all_types, Region(before), Region(after)))
    results = list(op.results[2:len(types)])
    if elems:
        ran = e.value(arith.IndexCastOp(e.value(tensor.ExtractOp(op.results[0], [], i64)), IndexType()))
        results += [ran_rows(e, r, ran) for r in op.results[len(types):]]
    return results


def trip_rows(node: Node) -> int | SSAValue:
    """max(M, 0): the rows a loop's scan outputs may take (a number where M is known at compile time)."""
    e = node.e
    if node.known(0):
        return max(0, int(np.asarray(node.const(0, "trip count")).reshape(-1)[0]))
    count = e.value(arith.IndexCastOp(scalar_of(node, node.input(0), "trip count"), IndexType()))
    return e.value(arith.MaxSIOp(count, index(e, 0)))


def ran_rows(e: NodeEmitter, buf: SSAValue, n: SSAValue) -> SSAValue:
    """buf's first n rows (n read at run time: the rows a loop wrote)."""
    shape = list(shape_of(buf))
    sizes: list[int | SSAValue] = [n, *(d if isinstance(d, int) else size_index(e, d) for d in shape[1:])]
    t = o.tensor([DYNAMIC, *shape[1:]], element_of(buf))
    return e.value(slices.extract_slice(buf, [0] * len(shape), sizes, [1] * len(shape), t))


# ---------------------------------------------------------------------------
# Scan
# ---------------------------------------------------------------------------


@converter("Scan", since=9)
def scan(node: Node) -> Values:
    n_scan = int(node.attr("num_scan_inputs"))
    inputs: Values = [node.importer.compile_time(n) if node.known(k) else node.input(k)
                      for k, n in enumerate(node.proto.input)]
    n_state = len(inputs) - n_scan
    body = node.attr("body")
    n_scan_out = len(body.output) - n_state
    in_axes = [int(a) for a in node.attr("scan_input_axes", [0] * n_scan)]
    in_dirs = [int(d) for d in node.attr("scan_input_directions", [0] * n_scan)]
    out_axes = [int(a) for a in node.attr("scan_output_axes", [0] * n_scan_out)]
    out_dirs = [int(d) for d in node.attr("scan_output_directions", [0] * n_scan_out)]
    ranks = [len(node.shape(n_state + k)) for k in range(n_scan)]
    in_axes = [node.axis(a, r) for a, r in zip(in_axes, ranks)]
    lengths = {node.shape(n_state + k)[a] for k, a in enumerate(in_axes)}
    if len(lengths) != 1:
        raise node.fail(f"its scan inputs have different sequence lengths {sorted(lengths)}")
    (length,) = lengths
    state = [as_value(node, v) for v in inputs[:n_state]]
    scanned = [as_value(node, x) for x in inputs[n_state:]]
    return scan_loop(node, state, scanned, in_axes, in_dirs, length, out_axes, out_dirs)


def scan_loop(node: Node, state: Sequence[SSAValue], scanned: Sequence[SSAValue], axes: Sequence[int],
              directions: Sequence[int], length: Size, out_axes: Sequence[int], out_directions: Sequence[int],
              trips: SSAValue | None = None) -> Values:
    """Scan as one scf.for over the sequence, its body imported once: each step reads its slices of
    the scanned inputs (tensor.extract_slice at the loop index, from the end where reversed), carries
    the state, and writes each scan output's element into its stacked result (tensor.insert_slice;
    one buffer of `length` slots, zeros where a step does not write). `trips`: the steps to run
    where fewer than `length` (opset 8's sequence_lens; a reversed input then starts at trips - 1)."""
    e = node.e
    steps = trips if trips is not None else size_index(e, length)
    rev = any(directions) or any(out_directions)
    last = e.value(arith.SubiOp(steps, index(e, 1))) if rev else None
    carried_types = [v.type for v in state]

    def build(args: Sequence[SSAValue]) -> Items:
        if e.tracker is not None:  # the state has the sizes it enters with
            e.tracker.sizes.carry(state, args[1:])
        i = args[0]
        back = e.value(arith.SubiOp(last, i)) if last is not None else i
        slices_ = [slice_at(e, x, a, back if d else i) for x, a, d in zip(scanned, axes, directions)]
        return import_body(node, "body", [*args[1:], *slices_])

    block, out = in_region(node, [IndexType(), *carried_types], build)
    if any(is_list(v) for v in out):
        raise node.fail("its body gives a sequence or optional: Scan's outputs are tensors")
    values = values_in(node, block, out)
    new_state, elems = values[:len(state)], values[len(state):]
    for k, (v, t) in enumerate(zip(new_state, carried_types)):
        if v.type != t:
            raise node.fail(f"state {k} enters the body as {type_of(state[k])} and leaves it as {type_of(v)}: "
                            "ONNX keeps a Scan's state of one type and shape")
    inits = [zeros(e, [length, *shape_of(v)], element_of(v)) for v in elems]
    bufs = stacking_args(e, block, inits)
    with emitting_into(e, block):
        i = block.args[0]
        back = e.value(arith.SubiOp(last, i)) if last is not None else i
        stacked = [write_slot(e, v, buf, back if d else i) for v, buf, d in zip(elems, bufs, out_directions)]
    block.add_op(scf.YieldOp(*new_state, *stacked))
    loop = e.emit(scf.ForOp(index(e, 0), steps, index(e, 1), [*state, *inits], Region(block)))
    results: Values = list(loop.results[:len(state)])
    for r, a in zip(loop.results[len(state):], out_axes):
        rank = len(shape_of(r))
        a = node.axis(a, rank)
        results.append(e.transpose(r, [*range(1, a + 1), 0, *range(a + 1, rank)]))
    return results


def zeros(e: NodeEmitter, shape: Sequence[Size | SSAValue], element: Attribute) -> SSAValue:
    """Zeros of shape; a dim given as an `index` value is a size read at run time (a loop's M)."""
    dims = [DYNAMIC if isinstance(d, SSAValue) else d for d in shape]
    sizes = [d if isinstance(d, SSAValue) else e.size_operands([d])[0] for d in shape if isinstance(d, (SSAValue, Sym))]
    return e.value(o.FullOp(0.0, o.tensor(dims, element), sizes))


def write_slot(e: NodeEmitter, v: SSAValue, buf: SSAValue, t: SSAValue) -> SSAValue:
    """buf with buf[t] = v (v has buf's rank less its first dim)."""
    shape = shape_of(v)
    sizes: list[int | SSAValue] = [1, *(n if isinstance(n, int) else size_index(e, n) for n in shape)]
    return e.value(slices.insert_slice(v, buf, [t, *[0] * len(shape)], sizes, [1] * (1 + len(shape))))


def slice_at(e: NodeEmitter, x: SSAValue, axis: int, t: SSAValue) -> SSAValue:
    """x[..., t, ...] along axis (the axis dropped), t an index known at run time: a view."""
    shape = list(shape_of(x))
    sizes: list[int | SSAValue] = [1 if d == axis else n if isinstance(n, int) else size_index(e, n)
                                   for d, n in enumerate(shape)]
    offsets: list[int | SSAValue] = [t if d == axis else 0 for d in range(len(shape))]
    part = shape[:axis] + shape[axis + 1:]
    return e.value(slices.extract_slice(x, offsets, sizes, [1] * len(shape), o.tensor(part, element_of(x))))


def size_index(e: NodeEmitter, n: Size) -> SSAValue:
    """n as an index value, read at run time where it is a run-time size."""
    return e.size_operands([n])[0] if isinstance(n, Sym) else index(e, n)


def index(e: NodeEmitter, n: int) -> SSAValue:
    return e.value(arith.ConstantOp(IntegerAttr(n, IndexType())))


@converter("Scan", since=8)
def scan_batched(node: Node) -> Values:
    """Opset 8's Scan: axis 0 of every state and scan input and output is a batch, axis 1 of the scan
    inputs and outputs the sequence. An scf.for over the batch around the opset-9 loop (scan_loop):
    each batch element's state and scan inputs read as views (tensor.extract_slice), its final state
    and scan outputs written into the batched results (tensor.insert_slice). sequence_lens, where
    given, is each element's trip count, read at run time: a reversed input starts at its last
    step, scan outputs are zeros past it (onnxruntime's padding)."""
    e = node.e
    n_scan = int(node.attr("num_scan_inputs"))
    inputs = [as_value(node, node.importer.compile_time(n) if node.known(k) else node.input(k))
              for k, n in enumerate(node.proto.input) if k > 0]
    n_state = len(inputs) - n_scan
    if n_scan < 1:
        raise node.fail("it has no scan input: num_scan_inputs must be at least 1")
    directions = [int(d) for d in node.attr("directions", [0] * n_scan)]
    batch, length = node.shape(1 + n_state)[:2]
    for k in range(len(inputs)):
        shape, scanned = node.shape(1 + k), k >= n_state
        if shape[:2 if scanned else 1] != ((batch, length) if scanned else (batch,)):
            what = f"scan input {k - n_state}" if scanned else f"state {k}"
            raise node.fail(f"{what} has shape {list(shape)}: its axis 0 must be the batch {batch}"
                            + (f" and axis 1 the sequence of {length}" if scanned else ""))
    lens = sequence_lens(node, length)
    n_batch = size_index(e, batch)
    size_index(e, length)  # a run-time length read here, outside the loop, where the results' sizes use it too

    def build(args: Sequence[SSAValue]) -> Items:
        b = args[0]
        trips = None
        if lens is not None:
            n = e.value(tensor.ExtractOp(lens, [b], element_of(lens)))
            trips = e.value(arith.IndexCastOp(n, IndexType()))
        state = [slice_at(e, s, 0, b) for s in inputs[:n_state]]
        scanned = [slice_at(e, x, 0, b) for x in inputs[n_state:]]
        n_out = len(node.attr("body").output) - n_state
        return scan_loop(node, state, scanned, [0] * n_scan, directions, length, [0] * n_out, [0] * n_out, trips)

    block, out = in_region(node, [IndexType()], build)
    values = [as_value(node, v) for v in out]  # type: ignore[arg-type]
    inits = [zeros(e, [batch, *shape_of(v)], element_of(v)) for v in values]
    bufs = stacking_args(e, block, inits)
    with emitting_into(e, block):
        written = [write_slot(e, v, buf, block.args[0]) for v, buf in zip(values, bufs)]
    block.add_op(scf.YieldOp(*written))
    loop = e.emit(scf.ForOp(index(e, 0), n_batch, index(e, 1), inits, Region(block)))
    return list(loop.results)


def sequence_lens(node: Node, length: Size) -> SSAValue | None:
    """Opset 8's sequence_lens as an i32 or i64 tensor to read per batch element; None where it is
    absent or known at compile time to be the full length everywhere."""
    if not node.has(0):
        return None
    if node.known(0):
        lens = np.asarray(node.const(0, "sequence_lens")).reshape(-1)
        if isinstance(length, int) and np.any((lens < 0) | (lens > length)):
            raise node.fail(f"sequence_lens {lens.tolist()} out of range: each must be in [0, {length}]")
        if isinstance(length, int) and np.all(lens == length):
            return None
    lens_v = node.input(0)
    if len(shape_of(lens_v)) != 1:
        raise node.fail(f"sequence_lens has shape {list(shape_of(lens_v))}: it must be [batch]")
    return lens_v
