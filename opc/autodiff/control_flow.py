"""Reverse mode through control flow, as Paddle's PIR autodiff (`ir_backward.py`) does it.

scf.if: a grad `scf.if` on the same condition. Each of its branches recomputes its forward branch
(a copy of the branch's ops) and sweeps it backward from the result cotangents; it yields the
cotangents of the values the forward branch read from outside (zeros where a branch does not
read one), which the caller accumulates like any op's operand gradients.

scf.for: the forward loop pushes its loop-carried values at the start of each iteration
(`opc_stack.push`, Paddle's tuple_push); a backward scf.for runs the same trip count with the
iteration index reversed, pops the values of that iteration (tuple_pop), recomputes the body from
them and sweeps it backward: the carried cotangents flow from iteration to iteration, the
cotangents of the values the body reads from outside are summed over iterations. Memory: one copy
of the loop-carried values per iteration; the body's inner values are recomputed, not saved.

Checkpointing (`opc.checkpoint = k` on an scf.for, or `opc-grad{checkpoint=k}` for every loop): the
forward pushes the carried values of every k-th iteration only; the backward runs over the
segments in reverse, pops a segment's first values, reruns the segment's k iterations forward
(saving each, as above) and runs them backward. Memory: trip count / k + k copies of the carried
values instead of trip count; time: the forward runs twice.
A checkpointed scf.while (checkpointed_while_vjp) keeps a count of its iterations on the stack and
saves every k-th entering state; its backward knows the trip count, so it reruns its segments as
scf.for loops.

Recomputing (second order, `grad=2`): a backward that pops what its forward pushed reads values
through the stacks, a dependence no sweep can see, so `f_grad_grad` differentiates a stack-free
`f_grad` instead: its backward scf.for gets the carried values of iteration i by rerunning the
forward loop from its start for i iterations (a copy of the loop with i as its bound), pure dataflow
that the sweep differentiates like any nested loop. An scf.while alike: its trip count from a copy
of it that counts, then an scf.for over the iterations in reverse, each rerunning `before` and the
body from the start. Time: quadratic in the trip count (each backward step reruns up to n
iterations); memory: none saved.

scf.while: the forward pushes the values entering its `before` region each time it runs (one more
time than the body); the stacks' depth before the loop is recorded (`opc_stack.depth`). The
backward pops the last values and sweeps the final `before` from the results' cotangents, then, while
the stacks are deeper than that recorded depth, pops the values of one more iteration back,
recomputes `before` then the body from them and sweeps both.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from xdsl.dialects import arith, scf, tensor
from xdsl.dialects.builtin import IndexType, IntegerAttr, TensorType, i64
from xdsl.ir import Block, Operation, Region, SSAValue

from opc.dialects import opc as opc_ops
from opc.dialects import slices
from opc.dialects.builder import OpBuilder
from opc.dialects.control import captured_values, in_place_carried
from opc.dialects.kinds import element_of
from opc.dialects.opc import is_float
from opc.dialects.opc_stack import DepthOp, PopOp, PushOp
from opc.errors import UnsupportedError

Sweep = Callable[[OpBuilder, Sequence[Operation], Sequence[SSAValue], Sequence[tuple[SSAValue, SSAValue]]],
                 dict[SSAValue, SSAValue]]


RECOMPUTE: ContextVar[bool] = ContextVar("opc_autodiff_recompute", default=False)
"""While set, loops' backward recompute the carried values instead of saving them on stacks."""


@contextmanager
def recomputing() -> Iterator[None]:
    """Build gradients whose loops recompute their carried values (no opc_stack ops): a function
    that a later sweep differentiates again (second order)."""
    token = RECOMPUTE.set(True)
    try:
        yield
    finally:
        RECOMPUTE.reset(token)


def control_vjp(e: OpBuilder, op: Operation, douts: Sequence[SSAValue | None], live: set[SSAValue],
                sweep: Sweep) -> dict[SSAValue, SSAValue]:
    """Cotangents of what op reads (operands and captured values), emitted into e."""
    if isinstance(op, scf.IfOp):
        return if_vjp(e, op, douts, live, sweep)
    if isinstance(op, scf.IndexSwitchOp):
        return switch_vjp(e, op, douts, live, sweep)
    if isinstance(op, scf.ForOp):
        return for_vjp(e, op, douts, live, sweep)
    if isinstance(op, scf.WhileOp):
        return while_vjp(e, op, douts, live, sweep)
    raise UnsupportedError(f"autodiff through {op.name} is not supported")


def is_float_value(v: SSAValue) -> bool:
    """A float tensor (a scalar a body reads from outside, such as an index, has no cotangent)."""
    return isinstance(v.type, TensorType) and is_float(element_of(v))


def replay(be: OpBuilder, block: Block, given: Mapping[SSAValue, SSAValue] | None = None
           ) -> tuple[list[Operation], list[SSAValue]]:
    """A copy of block's ops (not its terminator, not the pushes of a forward) into be, `given` mapping
    the block's arguments: the copies, and what the terminator yields."""
    mapping: dict[SSAValue, SSAValue] = dict(given or {})
    ops = []
    term = block.last_op
    assert term is not None
    for o in block.ops:
        if o is term:
            break
        if isinstance(o, PushOp):
            continue
        new = o.clone(value_mapper=mapping)
        for old, r in zip(o.results, new.results):
            mapping[old] = r
        be.emit(new)
        ops.append(new)
    return ops, [mapping.get(v, v) for v in term.operands]


def if_vjp(e: OpBuilder, op: scf.IfOp, douts: Sequence[SSAValue | None], live: set[SSAValue],
           sweep: Sweep) -> dict[SSAValue, SSAValue]:
    caps = [v for v in captured_values(op) if v in live and is_float_value(v)]
    if not caps:
        return {}
    regions = branch_grads([op.true_region, op.false_region], douts, caps, sweep)
    grad_if = scf.IfOp(op.cond, [c.type for c in caps], regions[0], regions[1])
    e.emit(grad_if)
    return dict(zip(caps, grad_if.results))


def switch_vjp(e: OpBuilder, op: scf.IndexSwitchOp, douts: Sequence[SSAValue | None], live: set[SSAValue],
               sweep: Sweep) -> dict[SSAValue, SSAValue]:
    """A grad index_switch on the same index, as if_vjp's grad if: each case recomputes its forward
    case and sweeps it."""
    caps = [v for v in captured_values(op) if v in live and is_float_value(v)]
    if not caps:
        return {}
    regions = branch_grads([*op.case_regions, op.default_region], douts, caps, sweep)
    grad = scf.IndexSwitchOp(op.arg, op.cases, regions[-1], regions[:-1], [c.type for c in caps])
    e.emit(grad)
    return dict(zip(caps, grad.results))


def branch_grads(branches: Sequence[Region], douts: Sequence[SSAValue | None], caps: list[SSAValue],
                 sweep: Sweep) -> list[Region]:
    """Per forward branch, a region that recomputes it and yields the cotangents of `caps` (zeros
    for those it does not read)."""
    regions = []
    for region in branches:
        be = OpBuilder()
        grads: dict[SSAValue, SSAValue] = {}
        if region.blocks:
            ops, yielded = replay(be, region.block)
            seeds = [(y, d) for y, d in zip(yielded, douts) if d is not None and is_float_value(d)]
            grads = sweep(be, ops, caps, seeds)
        outs = [grads[c] if c in grads else be.full(0.0, c) for c in caps]
        be.emit(scf.YieldOp(*outs))
        regions.append(Region(Block(be.ops)))
    return regions


def index_const(e: OpBuilder, n: int) -> SSAValue:
    return e.value(arith.ConstantOp(IntegerAttr(n, IndexType())))


def trip_count(e: OpBuilder, op: scf.ForOp) -> SSAValue:
    """max(0, ceil((ub - lb) / step)) (a step that is not positive is a run-time error of the forward)."""
    span = e.value(arith.SubiOp(op.ub, op.lb))
    up = e.value(arith.AddiOp(span, e.value(arith.SubiOp(op.step, index_const(e, 1)))))
    return e.value(arith.MaxSIOp(e.value(arith.DivSIOp(up, op.step)), index_const(e, 0)))


def save_carried(op: scf.ForOp, unsaved: Collection[int] = ()) -> list[str]:
    """Pushes of each loop-carried value (but those `unsaved`) at the start of the forward body; the
    stacks' names."""
    body = op.body.block
    first = body.first_op
    assert first is not None
    names = []
    for k, a in enumerate(body.args[1:]):
        names.append(f"{a.name_hint or 'carried'}{k}")
        if k not in unsaved:
            body.insert_op_before(PushOp(a, names[-1]), first)
    return names


CHECKPOINT_ATTR = "opc.checkpoint"
"""On an scf.for or scf.while: save the carried values of every k-th iteration only, recompute the others."""


def checkpoint_of(op: Operation) -> int:
    a = op.attributes.get(CHECKPOINT_ATTR)
    return a.value.data if isinstance(a, IntegerAttr) and a.value.data > 1 else 0


def for_vjp(e: OpBuilder, op: scf.ForOp, douts: Sequence[SSAValue | None], live: set[SSAValue],
            sweep: Sweep) -> dict[SSAValue, SSAValue]:
    carried = list(op.body.block.args[1:])
    inits = list(op.iter_args)
    floats = [k for k, v in enumerate(inits) if is_float_value(v)]
    caps = [v for v in captured_values(op) if v in live and is_float_value(v)]
    if not caps and not any(inits[k] in live for k in floats):
        return {}
    if RECOMPUTE.get():
        return recomputing_for_vjp(e, op, douts, caps, floats, sweep)
    if checkpoint_of(op):
        return checkpointed_for_vjp(e, op, douts, caps, floats, sweep)
    # a value the body only writes a slot of (an RNN's Y): its vjp needs none of its elements, so it is
    # not saved (that would be a copy of the whole per iteration); the recomputation reads zeros
    unsaved = set(in_place_carried(op.body.block))
    names = save_carried(op, unsaved)

    def popped(be: OpBuilder, i: SSAValue) -> dict[SSAValue, SSAValue]:
        return {carried[k]: be.full(0.0, inits[k]) if k in unsaved else
                be.value(PopOp(names[k], carried[k].type, be.dims(inits[k]))) for k in reversed(range(len(carried)))}

    # its cotangent is the same in every backward step (each step reads its own slot of it, and an
    # earlier step never reads a later one's): not carried (that would copy it whole per step), where
    # its initial value needs no gradient
    invariant = {k for k in floats if k in unsaved
                 and (inits[k] not in live or isinstance(inits[k].owner, opc_ops.FullOp))}  # (a fill: no inputs)
    return reverse_for(e, op, douts, caps, floats, sweep, popped, invariant)


def recomputing_for_vjp(e: OpBuilder, op: scf.ForOp, douts: Sequence[SSAValue | None], caps: list[SSAValue],
                        floats: list[int], sweep: Sweep) -> dict[SSAValue, SSAValue]:
    """The backward loop without stacks: backward step k reruns the forward loop from its start
    for n - 1 - k iterations (a copy of it with that bound), recomputes the body from the carried
    values it gives, and sweeps it, as for_vjp does with popped values."""

    def rerun(be: OpBuilder, i: SSAValue) -> dict[SSAValue, SSAValue]:
        again = op.clone()  # the forward loop as it is (no pushes: nothing is saved here)
        again.operands = [op.lb, i, op.step, *op.iter_args]
        be.emit(again)
        return dict(zip(op.body.block.args[1:], again.results))

    return reverse_for(e, op, douts, caps, floats, sweep, rerun)


def reverse_for(e: OpBuilder, op: scf.ForOp, douts: Sequence[SSAValue | None], caps: list[SSAValue],
                floats: list[int], sweep: Sweep,
                carried_at: Callable[[OpBuilder, SSAValue], dict[SSAValue, SSAValue]],
                invariant: Collection[int] = ()) -> dict[SSAValue, SSAValue]:
    """The backward scf.for of an scf.for: its step k sweeps the body at the forward's iteration
    i = lb + (n - 1 - k) * step, whose carried values carried_at(be, i) gives (popped from the
    stacks, or recomputed), carrying the carried values' cotangents and summing the captured ones'.
    A carried value in `invariant` keeps its outer cotangent in every step (not carried; its initial
    value gets none)."""
    carried = list(op.body.block.args[1:])
    inits = list(op.iter_args)
    n = trip_count(e, op)
    seeds = {k: d if (d := douts[k]) is not None else e.full(0.0, op.results[k]) for k in floats}
    moving = [k for k in floats if k not in invariant]
    zeros = [e.full(0.0, c) for c in caps]
    body = Block(arg_types=[IndexType(), *(seeds[k].type for k in moving), *(c.type for c in zeros)])
    k_arg, d_carried, d_caps = body.args[0], body.args[1:1 + len(moving)], body.args[1 + len(moving):]
    cotangent = {**seeds, **dict(zip(moving, d_carried))}
    be = OpBuilder()
    # the forward's iteration index of backward step k: lb + (n - 1 - k) * step
    back = be.value(arith.SubiOp(be.value(arith.SubiOp(n, index_const(be, 1))), k_arg))
    i = be.value(arith.AddiOp(op.lb, be.value(arith.MuliOp(back, op.step))))
    given = carried_at(be, i)
    ops, yielded = replay(be, op.body.block, {op.body.block.args[0]: i, **given})
    sources = [given[carried[k]] for k in moving] + caps
    grads = sweep(be, ops, sources, [(yielded[k], cotangent[k]) for k in floats])
    step_d = [grads.get(given[carried[k]]) or be.full(0.0, carried[k]) for k in moving]
    step_caps = [accumulate(be, acc, grads[c]) if c in grads else acc for acc, c in zip(d_caps, caps)]
    be.emit(scf.YieldOp(*step_d, *step_caps))
    body.add_ops(be.ops)
    loop = scf.ForOp(index_const(e, 0), n, index_const(e, 1), [*(seeds[k] for k in moving), *zeros], Region(body))
    e.emit(loop)
    return summed(e, [*(inits[k] for k in moving), *caps], loop.results)


def accumulate(be: OpBuilder, acc: SSAValue, g: SSAValue) -> SSAValue:
    """acc + g. Where g is a slot placed into zeros (the vjp of an extract_slice: the body read one
    slot of a captured value, an RNN's input projection at step t), the slot is added into acc's
    slot instead, an insert_slice into acc that the host runs in place (in_place_carried's
    reads_slot): O(slot) a step, where adding the whole of g made the backward loop quadratic."""
    placed = g.owner
    zeros = placed.dest.owner if isinstance(placed, tensor.InsertSliceOp) else None
    if not (isinstance(zeros, opc_ops.FullOp) and zeros.value.value.data == 0.0 and acc.type == g.type):
        return be.add(acc, g)
    assert isinstance(placed, tensor.InsertSliceOp)
    p = slices.params(placed)
    slot = be.value(slices.extract_slice(acc, p.offsets, p.sizes, p.strides, slices.sliced_type(placed)))
    return be.value(slices.insert_slice(be.add(slot, placed.source), acc, p.offsets, p.sizes, p.strides))


def summed(e: OpBuilder, values: Sequence[SSAValue], grads: Sequence[SSAValue]) -> dict[SSAValue, SSAValue]:
    """value -> its cotangent, those of a value given several times (one tensor as two loop-carried
    values' start, or also read from outside) summed."""
    out: dict[SSAValue, SSAValue] = {}
    for v, g in zip(values, grads):
        out[v] = e.add(out[v], g) if v in out else g
    return out


def insert_before(e: OpBuilder, new: Operation, op: Operation) -> None:
    """new placed just before op: in op's block, or in e's ops where op is still being built there."""
    block = op.parent_block()
    if block is not None:
        block.insert_op_before(new, op)
    else:
        e.ops.insert(e.ops.index(op), new)


def save_entering(op: scf.WhileOp) -> list[str]:
    """Pushes of the values entering the before region, at its start; the stacks' names."""
    before = op.before_region.block
    first = before.first_op
    assert first is not None
    names = []
    for k, a in enumerate(before.args):
        names.append(f"{a.name_hint or 'carried'}{k}")
        before.insert_op_before(PushOp(a, names[-1]), first)
    return names


def pop_and_replay(be: OpBuilder, op: scf.WhileOp, names: list[str], with_body: bool
                   ) -> tuple[list[SSAValue], list[Operation], list[SSAValue]]:
    """Pop one iteration's entering values and recompute before (and the body): (popped, the ops,
    what the last region hands on: before's forwarded values, or the body's next entering values)."""
    args: list[SSAValue] = list(op.before_region.block.args)
    popped = {args[k]: be.value(PopOp(names[k], args[k].type, be.dims(op.arguments[k])))
              for k in reversed(range(len(args)))}
    ops, sent = replay(be, op.before_region.block, popped)
    sent = sent[1:]  # scf.condition's operands: the condition, then the values sent on
    if with_body:
        entering: dict[SSAValue, SSAValue] = dict(zip(op.after_region.block.args, sent))
        body_ops, sent = replay(be, op.after_region.block, entering)
        ops += body_ops
    return [popped[a] for a in args], ops, sent


def recorded_depth() -> list[Operation]:
    """The stacks' depth as an i64, then in a tensor<i64> (a body reads a value from outside as a tensor)."""
    depth = DepthOp()
    cast = arith.IndexCastOp(depth.result, i64)
    held = tensor.FromElementsOp.build(operands=[[cast.result]], result_types=[TensorType(i64, [])])
    return [depth, cast, held]


def while_vjp(e: OpBuilder, op: scf.WhileOp, douts: Sequence[SSAValue | None], live: set[SSAValue],
              sweep: Sweep) -> dict[SSAValue, SSAValue]:
    inits = list(op.arguments)
    floats = [k for k, v in enumerate(inits) if is_float_value(v)]
    caps = [v for v in captured_values(op) if v in live and is_float_value(v)]
    if not caps and not any(inits[k] in live for k in floats):
        return {}
    if RECOMPUTE.get():
        return recomputing_while_vjp(e, op, douts, caps, floats, sweep)
    if checkpoint_of(op):
        return checkpointed_while_vjp(e, op, douts, caps, floats, sweep)
    base = recorded_depth()
    for new in base:
        insert_before(e, new, op)
    names = save_entering(op)
    # the final before: from the results' cotangents to those of the last entering values
    popped, ops, sent = pop_and_replay(e, op, names, with_body=False)
    seeds = [(s, d) for s, d in zip(sent, douts) if d is not None and is_float_value(d)]
    grads = sweep(e, ops, [popped[k] for k in floats] + caps, seeds)
    d_last = [grads.get(popped[k]) or e.full(0.0, popped[k]) for k in floats]
    d_caps0 = [grads.get(c) or e.full(0.0, c) for c in caps]
    types = [v.type for v in (*d_last, *d_caps0)]
    test = Block(arg_types=types)
    now = recorded_depth()[:2]
    then = tensor.ExtractOp(base[-1].results[0], [], i64)
    more = arith.CmpiOp(now[-1].results[0], then.result, "sgt")
    test.add_ops([*now, then, more, scf.ConditionOp(more.result, *test.args)])  # type: ignore[arg-type]
    body = Block(arg_types=types)
    d_next, d_caps = body.args[:len(floats)], body.args[len(floats):]
    be = OpBuilder()
    popped, ops, sent = pop_and_replay(be, op, names, with_body=True)
    grads = sweep(be, ops, [popped[k] for k in floats] + caps, [(sent[k], d) for k, d in zip(floats, d_next)])
    step_d = [grads.get(popped[k]) or be.full(0.0, popped[k]) for k in floats]
    step_caps = [be.add(acc, grads[c]) if c in grads else acc for acc, c in zip(d_caps, caps)]
    be.emit(scf.YieldOp(*step_d, *step_caps))
    body.add_ops(be.ops)
    loop = scf.WhileOp([*d_last, *d_caps0], types, Region(test), Region(body))
    e.emit(loop)
    return summed(e, [*(inits[k] for k in floats), *caps], loop.results)


def while_trips(e: OpBuilder, op: scf.WhileOp) -> SSAValue:
    """How many times op's body runs: a copy of op that also carries a counter (an index)."""
    before, after = op.before_region.block, op.after_region.block
    counter = TensorType(i64, [])
    test = Block(arg_types=[*(a.type for a in before.args), counter])
    tb = OpBuilder()
    _, sent = replay(tb, before, dict(zip(before.args, test.args)))
    tb.emit(scf.ConditionOp(sent[0], *sent[1:], test.args[-1]))
    test.add_ops(tb.ops)
    body = Block(arg_types=[*(r.type for r in op.results), counter])
    bb = OpBuilder()
    _, nxt = replay(bb, after, dict(zip(after.args, body.args)))
    count = bb.value(tensor.ExtractOp(body.args[-1], [], i64))
    more = bb.value(arith.AddiOp(count, bb.value(arith.ConstantOp(IntegerAttr(1, i64)))))
    bb.emit(scf.YieldOp(*nxt, bb.value(tensor.FromElementsOp.build(operands=[[more]], result_types=[counter]))))
    body.add_ops(bb.ops)
    loop = scf.WhileOp([*op.arguments, e.full(0.0, counter)], [*(r.type for r in op.results), counter],
                       Region(test), Region(body))
    loop.attributes.update(op.attributes)  # opc.max_trips bounds the count as it bounds the loop
    e.emit(loop)
    trips = e.value(tensor.ExtractOp(loop.results[-1], [], i64))
    return e.value(arith.IndexCastOp(trips, IndexType()))


def rerun_steps(e: OpBuilder, op: scf.WhileOp, count: SSAValue, start: Sequence[SSAValue] | None = None
                ) -> list[SSAValue]:
    """The values entering op's `before` region after `count` runs of its body (count known to be
    at most its trip count) from `start` (default: op's initial values): an scf.for of
    before-then-body, the condition unread."""
    return list(rerun_loop(e, op, count, start).results)


def rerun_loop(e: OpBuilder, op: scf.WhileOp, count: SSAValue, start: Sequence[SSAValue] | None = None
               ) -> scf.ForOp:
    """rerun_steps' scf.for itself (a sweep differentiates it)."""
    before, after = op.before_region.block, op.after_region.block
    block = Block(arg_types=[IndexType(), *(a.type for a in before.args)])
    be = OpBuilder()
    _, sent = replay(be, before, dict(zip(before.args, block.args[1:])))
    _, nxt = replay(be, after, dict(zip(after.args, sent[1:])))
    be.emit(scf.YieldOp(*nxt))
    block.add_ops(be.ops)
    inits = list(op.arguments if start is None else start)
    loop = scf.ForOp(index_const(e, 0), count, index_const(e, 1), inits, Region(block))
    e.emit(loop)
    return loop


def recomputing_while_vjp(e: OpBuilder, op: scf.WhileOp, douts: Sequence[SSAValue | None], caps: list[SSAValue],
                          floats: list[int], sweep: Sweep) -> dict[SSAValue, SSAValue]:
    """The backward of a while without stacks: the trip count n from a counting copy of the loop;
    the final `before` swept at the values entering it after n body runs, then an scf.for over
    j = n - 1 down to 0 that recomputes the values entering iteration j (rerun_steps) and sweeps
    `before` and the body from them."""
    before, after = op.before_region.block, op.after_region.block
    n = while_trips(e, op)
    last = rerun_steps(e, op, n)
    ops, sent = replay(e, before, dict(zip(before.args, last)))
    seeds = [(v, d) for v, d in zip(sent[1:], douts) if d is not None and is_float_value(d)]
    grads = sweep(e, ops, [last[k] for k in floats] + caps, seeds)
    d_last = [grads.get(last[k]) or e.full(0.0, last[k]) for k in floats]
    d_caps0 = [grads.get(c) or e.full(0.0, c) for c in caps]
    body = Block(arg_types=[IndexType(), *(v.type for v in (*d_last, *d_caps0))])
    k_arg, d_next, d_caps = body.args[0], body.args[1:1 + len(floats)], body.args[1 + len(floats):]
    be = OpBuilder()
    j = be.value(arith.SubiOp(be.value(arith.SubiOp(n, index_const(be, 1))), k_arg))
    entering = rerun_steps(be, op, j)
    ops, sent = replay(be, before, dict(zip(before.args, entering)))
    body_ops, nxt = replay(be, after, dict(zip(after.args, sent[1:])))
    grads = sweep(be, ops + body_ops, [entering[k] for k in floats] + caps,
                  [(nxt[k], d) for k, d in zip(floats, d_next)])
    step_d = [grads.get(entering[k]) or be.full(0.0, entering[k]) for k in floats]
    step_caps = [be.add(acc, grads[c]) if c in grads else acc for acc, c in zip(d_caps, caps)]
    be.emit(scf.YieldOp(*step_d, *step_caps))
    body.add_ops(be.ops)
    loop = scf.ForOp(index_const(e, 0), n, index_const(e, 1), [*d_last, *d_caps0], Region(body))
    e.emit(loop)
    return summed(e, [*(op.arguments[k] for k in floats), *caps], loop.results)


def save_every(op: scf.ForOp, k: int) -> list[str]:
    """Pushes of the carried values at the start of every k-th iteration (from the first)."""
    body = op.body.block
    first = body.first_op
    assert first is not None
    be = OpBuilder()
    nth = be.value(arith.DivSIOp(be.value(arith.SubiOp(body.args[0], op.lb)), op.step))
    kk = index_const(be, k)
    rem = be.value(arith.SubiOp(nth, be.value(arith.MuliOp(be.value(arith.DivSIOp(nth, kk)), kk))))
    at = be.value(arith.CmpiOp(rem, index_const(be, 0), "eq"))
    names = [f"{a.name_hint or 'carried'}{j}_ckpt" for j, a in enumerate(body.args[1:])]
    pushes = [PushOp(a, name) for a, name in zip(body.args[1:], names)]
    be.emit(scf.IfOp(at, [], Region(Block([*pushes, scf.YieldOp()])), Region(Block([scf.YieldOp()]))))
    for new in be.ops:
        body.insert_op_before(new, first)
    return names


def checkpointed_for_vjp(e: OpBuilder, op: scf.ForOp, douts: Sequence[SSAValue | None], caps: list[SSAValue],
                         floats: list[int], sweep: Sweep) -> dict[SSAValue, SSAValue]:
    """Backward over segments of k iterations in reverse: pop the segment's first carried values,
    rerun the segment forward as a loop of its own (saving every iteration) and differentiate it."""
    k = checkpoint_of(op)
    segment = op.clone()  # before the pushes: the loop the backward reruns, one segment at a time
    segment.attributes.pop(CHECKPOINT_ATTR)
    names = save_every(op, k)
    carried = list(op.body.block.args[1:])
    inits = list(op.iter_args)
    n = trip_count(e, op)
    kk = index_const(e, k)
    segments = e.value(arith.DivSIOp(e.value(arith.AddiOp(n, e.value(arith.SubiOp(kk, index_const(e, 1))))), kk))
    seeds: list[SSAValue] = [d if (d := douts[j]) is not None else e.full(0.0, op.results[j]) for j in floats]
    zeros = [e.full(0.0, c) for c in caps]
    body = Block(arg_types=[IndexType(), *(v.type for v in seeds), *(c.type for c in zeros)])
    s_arg, d_carried, d_caps = body.args[0], body.args[1:1 + len(floats)], body.args[1 + len(floats):]
    be = OpBuilder()
    s = be.value(arith.SubiOp(be.value(arith.SubiOp(segments, index_const(be, 1))), s_arg))
    j0 = be.value(arith.MuliOp(s, kk))
    j1 = be.value(arith.MinSIOp(be.value(arith.AddiOp(j0, kk)), n))
    lb = be.value(arith.AddiOp(op.lb, be.value(arith.MuliOp(j0, op.step))))
    ub = be.value(arith.AddiOp(op.lb, be.value(arith.MuliOp(j1, op.step))))
    popped = {carried[j]: be.value(PopOp(names[j], carried[j].type, be.dims(op.iter_args[j])))
              for j in reversed(range(len(carried)))}
    rerun = segment
    rerun.operands = [lb, ub, op.step, *(popped[a] for a in carried)]
    be.emit(rerun)
    sources = [popped[carried[j]] for j in floats] + caps
    grads = sweep(be, [rerun], sources, [(rerun.results[j], d) for j, d in zip(floats, d_carried)])
    step_d = [grads.get(popped[carried[j]]) or be.full(0.0, carried[j]) for j in floats]
    step_caps = [be.add(acc, grads[c]) if c in grads else acc for acc, c in zip(d_caps, caps)]
    be.emit(scf.YieldOp(*step_d, *step_caps))
    body.add_ops(be.ops)
    loop = scf.ForOp(index_const(e, 0), segments, index_const(e, 1), [*seeds, *zeros], Region(body))
    e.emit(loop)
    return summed(e, [*(inits[k] for k in floats), *caps], loop.results)


def i64_const(e: OpBuilder, n: int) -> SSAValue:
    return e.value(arith.ConstantOp(IntegerAttr(n, i64)))


def as_tensor(e: OpBuilder, scalar: SSAValue) -> SSAValue:
    """An i64 in a tensor<i64> (what a stack holds)."""
    return e.value(tensor.FromElementsOp.build(operands=[[scalar]], result_types=[TensorType(i64, [])]))


def count_and_save_every(e: OpBuilder, op: scf.WhileOp, k: int) -> tuple[list[str], str]:
    """The forward of a checkpointed while: a count of `before`'s runs kept on top of the stack (pushed
    as 0 before the loop; each run pops it, pushes the entering values where it is a multiple of k,
    then pushes it plus one), so the backward pops the trip count, then the checkpoints in reverse.
    The loop's results and operands stay as they are (other ops and the caller hold them)."""
    count = "trips_ckpt"
    start = OpBuilder()
    start.emit(PushOp(as_tensor(start, i64_const(start, 0)), count))
    for new in start.ops:
        insert_before(e, new, op)
    before = op.before_region.block
    first = before.first_op
    assert first is not None
    be = OpBuilder()
    c = be.value(tensor.ExtractOp(be.value(PopOp(count, TensorType(i64, []))), [], i64))
    kk = i64_const(be, k)
    rem = be.value(arith.SubiOp(c, be.value(arith.MuliOp(be.value(arith.DivSIOp(c, kk)), kk))))
    at = be.value(arith.CmpiOp(rem, i64_const(be, 0), "eq"))
    names = [f"{a.name_hint or 'carried'}{j}_ckpt" for j, a in enumerate(before.args)]
    pushes = [PushOp(a, name) for a, name in zip(before.args, names)]
    be.emit(scf.IfOp(at, [], Region(Block([*pushes, scf.YieldOp()])), Region(Block([scf.YieldOp()]))))
    be.emit(PushOp(as_tensor(be, be.value(arith.AddiOp(c, i64_const(be, 1)))), count))
    for new in be.ops:
        before.insert_op_before(new, first)
    return names, count


def pop_entering(be: OpBuilder, op: scf.WhileOp, names: list[str]) -> list[SSAValue]:
    """One checkpoint's values entering `before` (pushed in order, popped in reverse)."""
    args = list(op.before_region.block.args)
    popped = {j: be.value(PopOp(names[j], args[j].type, be.dims(op.arguments[j]))) for j in reversed(range(len(args)))}
    return [popped[j] for j in range(len(args))]


def checkpointed_while_vjp(e: OpBuilder, op: scf.WhileOp, douts: Sequence[SSAValue | None], caps: list[SSAValue],
                           floats: list[int], sweep: Sweep) -> dict[SSAValue, SSAValue]:
    """A while's iterations replayed as scf.for segments of k (`opc.checkpoint = k`): the forward
    saves the values entering every k-th iteration and counts `before`'s runs (T + 1, T the trip
    count). The backward pops T and the last checkpoint m = (T / k) * k, reruns iterations m..T as an
    scf.for and sweeps it with the final `before` from the results' cotangents; then an scf.for over
    the T / k full segments in reverse pops each one's first values, reruns its k iterations (saving
    each, for_vjp) and sweeps them. Memory: T / k + k copies of the carried values instead of T + 1."""
    k = checkpoint_of(op)
    pristine = op.clone()  # the loop as written: what the backward reruns, without the forward's stack ops
    pristine.attributes.pop(CHECKPOINT_ATTR)
    names, count = count_and_save_every(e, op, k)
    runs = e.value(tensor.ExtractOp(e.value(PopOp(count, TensorType(i64, []))), [], i64))
    trips = e.value(arith.IndexCastOp(e.value(arith.SubiOp(runs, i64_const(e, 1))), IndexType()))
    kk = index_const(e, k)
    full = e.value(arith.DivSIOp(trips, kk))  # the segments of k before the last checkpoint
    tail = e.value(arith.SubiOp(trips, e.value(arith.MuliOp(full, kk))))
    # the last segment (tail < k iterations, maybe none), then the final before
    last = pop_entering(e, pristine, names)
    rerun = rerun_loop(e, pristine, tail, last)
    before = pristine.before_region.block
    ops, sent = replay(e, before, dict(zip(before.args, rerun.results)))
    seeds = [(v, d) for v, d in zip(sent[1:], douts) if d is not None and is_float_value(d)]
    grads = sweep(e, [rerun, *ops], [last[j] for j in floats] + caps, seeds)
    d_last = [grads.get(last[j]) or e.full(0.0, last[j]) for j in floats]
    d_caps0 = [grads.get(c) or e.full(0.0, c) for c in caps]
    body = Block(arg_types=[IndexType(), *(v.type for v in (*d_last, *d_caps0))])
    d_next, d_caps = body.args[1:1 + len(floats)], body.args[1 + len(floats):]
    be = OpBuilder()
    entering = pop_entering(be, pristine, names)
    segment = rerun_loop(be, pristine, kk, entering)
    grads = sweep(be, [segment], [entering[j] for j in floats] + caps,
                  [(segment.results[j], d) for j, d in zip(floats, d_next)])
    step_d = [grads.get(entering[j]) or be.full(0.0, entering[j]) for j in floats]
    step_caps = [be.add(acc, grads[c]) if c in grads else acc for acc, c in zip(d_caps, caps)]
    be.emit(scf.YieldOp(*step_d, *step_caps))
    body.add_ops(be.ops)
    loop = scf.ForOp(index_const(e, 0), full, index_const(e, 1), [*d_last, *d_caps0], Region(body))
    e.emit(loop)
    pristine.erase()
    return summed(e, [*(op.arguments[j] for j in floats), *caps], loop.results)
