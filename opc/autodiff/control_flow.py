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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr
from xdsl.ir import Block, Operation, Region, SSAValue

from opc.dialects.builder import OpBuilder
from opc.dialects.control import captured_values
from opc.dialects.kinds import element_of
from opc.dialects.opc import is_float
from opc.dialects.opc_stack import PopOp, PushOp
from opc.errors import UnsupportedError

Sweep = Callable[[OpBuilder, Sequence[Operation], Sequence[SSAValue], Sequence[tuple[SSAValue, SSAValue]]],
                 dict[SSAValue, SSAValue]]


def control_vjp(e: OpBuilder, op: Operation, douts: Sequence[SSAValue | None], live: set[SSAValue],
                sweep: Sweep) -> dict[SSAValue, SSAValue]:
    """Cotangents of what op reads (operands and captured values), emitted into e."""
    if isinstance(op, scf.IfOp):
        return if_vjp(e, op, douts, live, sweep)
    if isinstance(op, scf.ForOp):
        return for_vjp(e, op, douts, live, sweep)
    raise UnsupportedError(f"autodiff through {op.name} is not supported yet (scf.if and scf.for are): "
                           "a while loop's trip count is not recorded for its backward")


def is_float_value(v: SSAValue) -> bool:
    return is_float(element_of(v))


def replay(be: OpBuilder, block: Block, given: dict[SSAValue, SSAValue] | None = None
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
    regions = []
    for region in (op.true_region, op.false_region):
        be = OpBuilder()
        grads: dict[SSAValue, SSAValue] = {}
        if region.blocks:
            ops, yielded = replay(be, region.block)
            seeds = [(y, d) for y, d in zip(yielded, douts) if d is not None and is_float_value(d)]
            grads = sweep(be, ops, caps, seeds)
        outs = [grads[c] if c in grads else be.full(0.0, c) for c in caps]
        be.emit(scf.YieldOp(*outs))
        regions.append(Region(Block(be.ops)))
    grad_if = scf.IfOp(op.cond, [c.type for c in caps], regions[0], regions[1])
    e.emit(grad_if)
    return dict(zip(caps, grad_if.results))


def index_const(e: OpBuilder, n: int) -> SSAValue:
    return e.value(arith.ConstantOp(IntegerAttr(n, IndexType())))


def trip_count(e: OpBuilder, op: scf.ForOp) -> SSAValue:
    """max(0, ceil((ub - lb) / step)) (a step that is not positive is a run-time error of the forward)."""
    span = e.value(arith.SubiOp(op.ub, op.lb))
    up = e.value(arith.AddiOp(span, e.value(arith.SubiOp(op.step, index_const(e, 1)))))
    return e.value(arith.MaxSIOp(e.value(arith.DivSIOp(up, op.step)), index_const(e, 0)))


def save_carried(op: scf.ForOp) -> list[str]:
    """Pushes of each loop-carried value at the start of the forward body; the stacks' names."""
    body = op.body.block
    first = body.first_op
    assert first is not None
    names = []
    for k, a in enumerate(body.args[1:]):
        names.append(f"{a.name_hint or 'carried'}{k}")
        body.insert_op_before(PushOp(a, names[-1]), first)
    return names


def for_vjp(e: OpBuilder, op: scf.ForOp, douts: Sequence[SSAValue | None], live: set[SSAValue],
            sweep: Sweep) -> dict[SSAValue, SSAValue]:
    carried = list(op.body.block.args[1:])
    inits = list(op.iter_args)
    floats = [k for k, v in enumerate(inits) if is_float_value(v)]
    caps = [v for v in captured_values(op) if v in live and is_float_value(v)]
    if not caps and not any(inits[k] in live for k in floats):
        return {}
    names = save_carried(op)
    n = trip_count(e, op)
    seeds: list[SSAValue] = [d if (d := douts[k]) is not None else e.full(0.0, op.results[k]) for k in floats]
    zeros = [e.full(0.0, c) for c in caps]
    body = Block(arg_types=[IndexType(), *(v.type for v in seeds), *(c.type for c in zeros)])
    k_arg, d_carried, d_caps = body.args[0], body.args[1:1 + len(floats)], body.args[1 + len(floats):]
    be = OpBuilder()
    # the forward's iteration index of backward step k: lb + (n - 1 - k) * step
    back = be.value(arith.SubiOp(be.value(arith.SubiOp(n, index_const(be, 1))), k_arg))
    i = be.value(arith.AddiOp(op.lb, be.value(arith.MuliOp(back, op.step))))
    popped = {carried[k]: be.value(PopOp(names[k], carried[k].type)) for k in reversed(range(len(carried)))}
    ops, yielded = replay(be, op.body.block, {op.body.block.args[0]: i, **popped})
    sources = [popped[carried[k]] for k in floats] + caps
    grads = sweep(be, ops, sources, [(yielded[k], d) for k, d in zip(floats, d_carried)])
    step_d = [grads.get(popped[carried[k]]) or be.full(0.0, carried[k]) for k in floats]
    step_caps = [be.add(acc, grads[c]) if c in grads else acc for acc, c in zip(d_caps, caps)]
    be.emit(scf.YieldOp(*step_d, *step_caps))
    body.add_ops(be.ops)
    loop = scf.ForOp(index_const(e, 0), n, index_const(e, 1), [*seeds, *zeros], Region(body))
    e.emit(loop)
    out: dict[SSAValue, SSAValue] = {inits[k]: r for k, r in zip(floats, loop.results[:len(floats)])}
    for c, r in zip(caps, loop.results[len(floats):]):
        out[c] = e.add(out[c], r) if c in out else r
    return out
