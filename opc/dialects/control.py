"""Control flow in opc-level IR: MLIR's own `scf.if`, `scf.for`, `scf.while`, `scf.index_switch` over
tensors, and the
scalar ops that make a condition or a bound from a tensor (`tensor.extract`, `arith` on scalars,
`tensor.from_elements` back to a tensor).

These ops run on the host around the kernels: the scheduler leaves them out of kernels (a value
they read is materialized), and the lowering (opc/lowering/control_flow_lowering.py) runs each
region body as a function of its own, called from a C `if` / `for` / `while`.

    %p = tensor.extract %flag[] : tensor<i1>
    %r = scf.if %p -> (tensor<4xf32>) { ... scf.yield %a : tensor<4xf32> } else { ... }
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import scf, tensor
from xdsl.dialects.builtin import IntegerAttr, TensorType
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from opc.dialects import slices
from opc.dialects.opc_stack import STACK_OPS

CONTROL_OPS = (scf.IfOp, scf.ForOp, scf.WhileOp, scf.IndexSwitchOp)
"""Region ops opc runs: their bodies are functions called from a C if / for / while / switch."""

HOST_RUNS = {scf.IfOp: "C if, each branch a function of its own",
             scf.ForOp: "C for, the body a function called per iteration",
             scf.WhileOp: "C while, before and after regions functions of their own",
             scf.IndexSwitchOp: "C switch, each case and the default a function of its own"}
"""What `opc explain` says each control-flow op runs as."""

SCALAR_BRIDGES = (tensor.ExtractOp, tensor.FromElementsOp)
"""Ops between one-element tensors and scalars (conditions, bounds, induction variables)."""

MAX_TRIPS_ATTR = "opc.max_trips"
"""On an scf.while: the most iterations it may run; past them the call raises RuntimeError."""


def is_host_op(op: Operation) -> bool:
    """An op that runs on the host, outside every kernel: control flow, a scalar bridge, or
    scalar arithmetic (no tensor operand or result, e.g. `arith.index_cast`)."""
    if isinstance(op, (*CONTROL_OPS, *SCALAR_BRIDGES, *STACK_OPS)):
        return True
    if op.regions or not op.results:
        return False
    return not any(isinstance(v.type, TensorType) for v in (*op.operands, *op.results))


def has_control_flow(op: Operation) -> bool:
    return any(isinstance(o, CONTROL_OPS) for o in op.walk())


def ancestor_in(op: Operation, block: Block) -> Operation | None:
    """op, or the op around it that sits in `block` (None when op is not inside block)."""
    around: Operation | None = op
    while around is not None and around.parent_block() is not block:
        around = around.parent_op()
    return around


def check_control_flow(op: Operation) -> None:
    """What opc adds to xDSL's verifiers of these ops: a scalar read from a tensor names one
    element (a condition or bound is a one-element tensor), and loop-carried values and
    results of control flow are tensors (a scalar travels as a rank-0 tensor)."""
    if isinstance(op, tensor.ExtractOp):
        t = op.tensor.type
        if isinstance(t, TensorType) and len(op.indices) != t.get_num_dims():
            raise VerifyException(f"reads {t} with {len(op.indices)} indices: it takes one index per dim "
                                  "(a condition or bound is a one-element tensor, e.g. tensor<i1> read with [])")
    if isinstance(op, CONTROL_OPS):
        for i, r in enumerate(op.results):
            if not isinstance(r.type, TensorType):
                raise VerifyException(f"result #{i} has type {r.type}: opc's control flow carries tensors "
                                      "(a scalar goes in a rank-0 tensor, tensor.from_elements)")
    for what, got, want in region_ends(op):
        if [v.type for v in got] != [t for t in want]:
            raise VerifyException(f"{what} gives ({', '.join(str(v.type) for v in got)}) where "
                                  f"({', '.join(str(t) for t in want)}) is expected")
    if isinstance(op, scf.WhileOp):
        for i, v in enumerate(op.before_region.block.args):
            if not isinstance(v.type, TensorType):
                raise VerifyException(f"loop-carried value #{i} has type {v.type}: opc's loops carry tensors")
        limit = op.attributes.get(MAX_TRIPS_ATTR)
        if limit is not None and not (isinstance(limit, IntegerAttr) and limit.value.data >= 0):
            raise VerifyException(f"{MAX_TRIPS_ATTR} must be a non-negative integer, got {limit}")


def region_ends(op: Operation) -> list[tuple[str, Sequence[SSAValue], Sequence[Attribute]]]:
    """(what, the values a region ends with, the types they must have) of a control-flow op."""
    ends: list[tuple[str, Sequence[SSAValue], Sequence[Attribute]]] = []
    results = [r.type for r in op.results]
    if isinstance(op, scf.IfOp):
        for name, region in (("then", op.true_region), ("else", op.false_region)):
            if region.blocks and isinstance(term := region.block.last_op, scf.YieldOp):
                ends.append((f"the {name} branch's scf.yield", list(term.operands), results))
    elif isinstance(op, scf.IndexSwitchOp):
        named = [*(f"case {v}" for v in op.cases.iter_values()), "the default"]
        for name, region in zip(named, [*op.case_regions, op.default_region]):
            if region.blocks and isinstance(term := region.block.last_op, scf.YieldOp):
                ends.append((f"{name}'s scf.yield", list(term.operands), results))
    elif isinstance(op, scf.ForOp) and isinstance(term := op.body.block.last_op, scf.YieldOp):
        ends.append(("the body's scf.yield", list(term.operands), [v.type for v in op.iter_args]))
    elif isinstance(op, scf.WhileOp):
        cond, term = op.before_region.block.last_op, op.after_region.block.last_op
        if isinstance(cond, scf.ConditionOp):
            ends.append(("scf.condition", list(cond.args), results))
        if isinstance(term, scf.YieldOp):
            ends.append(("the body's scf.yield", list(term.operands), [a.type for a in op.before_region.block.args]))
    return ends


def captured_values(op: Operation) -> list[SSAValue]:
    """The values op's regions read from outside op, in first-use order (a body's free variables)."""
    inside = {id(o) for region in op.regions for o in region.walk()}
    own = {a for region in op.regions for block in region.blocks for a in block.args}
    found: dict[SSAValue, None] = {}
    for region in op.regions:
        for o in region.walk():
            for v in o.operands:
                owner = v.owner
                if v in own or (isinstance(owner, Operation) and id(owner) in inside):
                    continue
                if isinstance(owner, Block) and id(owner.parent_op()) in inside:
                    continue  # an argument of a region nested in op
                found[v] = None
    return list(found)


def inputs_of(op: Operation) -> list[SSAValue]:
    """What op reads: its operands, and for control flow the values its bodies capture too."""
    return [*op.operands, *captured_values(op)] if op.regions else list(op.operands)


def in_place_carried(block: Block, reads_slot: bool = False) -> list[int]:
    """The carried values a loop body only writes a slot of (`tensor.insert_slice` into the carried
    value, read by nothing else, yielded as its next value): the host keeps each in one buffer and the
    body writes just the slot, where turn-taking buffers would copy the whole value every iteration
    (an RNN's output, a scan's stacked results). With reads_slot, also those that the body reads only
    at that slot before writing it (a backward loop's cotangent of a value read a slot per step,
    accumulated there): each element is read, then written, in place."""
    term = block.last_op
    assert isinstance(term, scf.YieldOp)
    out = []
    for k, (arg, v) in enumerate(zip(block.args[1:], term.operands)):
        ins = v.owner
        if not (isinstance(ins, tensor.InsertSliceOp) and ins.dest is arg and len(list(v.uses)) == 1
                and ins.parent_block() is block):
            continue
        others = [u.operation for u in arg.uses if u.operation is not ins]
        if not others or reads_slot and all(reads_the_slot(o, ins) for o in others):
            out.append(k)
    return out


def reads_the_slot(op: Operation, ins: tensor.InsertSliceOp) -> bool:
    """op is a tensor.extract_slice of exactly the slot ins writes, read only by the op computing the
    value ins writes there (slot + v): every element is read before it is written. (A slot read by
    anything else may be read after the write in place: a view of the buffer, lowered lazily.)"""
    if not isinstance(op, tensor.ExtractSliceOp) or op.parent_block() is not ins.parent_block():
        return False
    users = [u.operation for u in op.result.uses]
    source = ins.source.owner
    if users != [source] or len(list(ins.source.uses)) != 1:
        return False
    a, b = slices.params(op), slices.params(ins)
    return (a.offsets, a.sizes, a.strides) == (b.offsets, b.sizes, b.strides)
