"""Reverse mode through control flow, as Paddle's PIR autodiff (`ir_backward.py`) does it.

scf.if: a grad `scf.if` on the same condition. Each of its branches recomputes its forward branch
(a copy of the branch's ops) and sweeps it backward from the result cotangents; it yields the
cotangents of the values the forward branch read from outside (zeros where a branch does not
read one), which the caller accumulates like any op's operand gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import scf
from xdsl.ir import Block, Operation, Region, SSAValue

from opc.dialects.builder import OpBuilder
from opc.dialects.control import captured_values
from opc.dialects.kinds import element_of
from opc.dialects.opc import is_float
from opc.errors import UnsupportedError

Sweep = Callable[[OpBuilder, Sequence[Operation], Sequence[SSAValue], Sequence[tuple[SSAValue, SSAValue]]],
                 dict[SSAValue, SSAValue]]


def control_vjp(e: OpBuilder, op: Operation, douts: Sequence[SSAValue | None], live: set[SSAValue],
                sweep: Sweep) -> dict[SSAValue, SSAValue]:
    """Cotangents of what op reads (operands and captured values), emitted into e."""
    if isinstance(op, scf.IfOp):
        return if_vjp(e, op, douts, live, sweep)
    raise UnsupportedError(f"autodiff through {op.name} is not supported yet (scf.if is); "
                           "a loop's gradient needs its per-iteration values saved")


def is_float_value(v: SSAValue) -> bool:
    return is_float(element_of(v))


def replay(be: OpBuilder, block: Block) -> tuple[list[Operation], list[SSAValue]]:
    """A copy of block's ops (not its terminator) into be: the copies, and what the terminator yields."""
    mapping: dict[SSAValue, SSAValue] = {}
    ops = []
    term = block.last_op
    assert term is not None
    for o in block.ops:
        if o is term:
            break
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
