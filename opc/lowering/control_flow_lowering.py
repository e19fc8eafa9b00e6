"""The host side of control flow in opc-lower-to-loops: scalars, `scf.if`, `scf.index_switch`,
`scf.for`, `scf.while`.

opc-outline-control-flow (opc/transforms/opc_outline_control_flow.py) has made every region body a
private function; those are lowered like any function (destination-passing style: inputs, then
the buffers they write). Here, in the function that holds the control flow:

- a scalar read (`tensor.extract`) is a load from the tensor's buffer, scalar `arith` is copied as
  it is, `tensor.from_elements` stores into a buffer;
- `scf.if` (`scf.index_switch`) becomes an scf.if (index_switch) on buffers calling the branch's
  (case's) function, which writes the result buffers directly;
- `scf.for` and `scf.while` carry each loop-carried tensor in three pointers, `cur` (read by the
  body), `nxt` (written by it) and `oth`: the initial value is read in place, two buffers take
  turns after that ((cur, nxt, oth) -> (nxt, oth, nxt)), so no iteration copies a value. An
  scf.while's forwarded values that are its own arguments are the `cur` pointers themselves.

The loops are scf ops on memrefs marked `opc.host`; the C emitter writes them as C loops
(opc/lowering/c_control_emission.py), with the trip count or condition read at run time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import arith, func, memref, scf, tensor
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp, UnitAttr, i1, i64
from xdsl.ir import Block, Operation, Region, SSAValue

from opc.dialects.control import MAX_TRIPS_ATTR
from opc.dialects.kinds import element_of, shape_of
from opc.dialects.opc import DYNAMIC
from opc.dialects.opc_loops import function_errors
from opc.dialects.opc_stack import PopIntoOp, PopOp, PushOp
from opc.lowering.scalars import memref_of
from opc.transforms.opc_outline_control_flow import Outlined

HOST_ATTR = "opc.host"
"""On a lowered scf.if / scf.for / scf.while: control flow of the host, around calls of its bodies."""
STATUS_BASE_ATTR = "opc.status_base"
"""On a func.call of a body: the body's check site -k is its caller's site -(base + k)."""
STEP_CODE_ATTR = "opc.step_code"  # scf.for: the status of a step that is not positive
INTERRUPT_CODE_ATTR = "opc.interrupt_code"  # scf.while: the status of Ctrl-C
MAX_TRIPS_CODE_ATTR = "opc.max_trips_code"  # scf.while: the status of running past opc.max_trips


@dataclass
class ControlState:
    """What the lowering of a module's host functions needs: the outlined records and the
    module (whose already-lowered body functions give their check sites)."""

    records: dict[Operation, Outlined]
    module: ModuleOp


def lower_host_op(fl, op: Operation) -> None:  # noqa: ANN001  (a FunctionLowering)
    fl.memo = {}
    if isinstance(op, tensor.ExtractOp):
        buf = fl.operand_buffer(op.tensor)
        v = fl.e.value(on_host(memref.LoadOp.get(buf, [fl.operand_buffer(i) for i in op.indices])))
        v.name_hint = op.result.name_hint
        fl.buffers[op.result] = v
    elif isinstance(op, tensor.FromElementsOp):
        buf = fl.buffer_for(op.result)
        shape = memref_of(op.result.type).get_shape()
        for k, s in enumerate(op.elements):
            idx = [fl.e.index(c) for c in unravel(k, shape)]
            fl.e.emit(on_host(memref.StoreOp.get(fl.operand_buffer(s), buf, idx)))
    elif isinstance(op, PushOp):  # a loop's saved value (opc/dialects/opc_stack.py)
        fl.e.emit(PushOp(fl.operand_buffer(op.value), op.stack.data))
    elif isinstance(op, PopOp):
        buf = fl.buffer_for(op.result)
        fl.e.emit(PopIntoOp(buf, op.stack.data))
    elif isinstance(op, scf.IfOp):
        lower_if(fl, op)
    elif isinstance(op, scf.IndexSwitchOp):
        lower_switch(fl, op)
    elif isinstance(op, scf.ForOp):
        lower_for(fl, op)
    elif isinstance(op, scf.WhileOp):
        lower_while(fl, op)
    else:  # scalar arithmetic: itself, on the lowered scalars
        new = on_host(op.clone(value_mapper={v: fl.operand_buffer(v) for v in op.operands}))
        fl.e.emit(new)
        for old, r in zip(op.results, new.results):
            r.name_hint = old.name_hint
            fl.buffers[old] = r


def on_host(op: Operation) -> Operation:
    """op marked as host code: the CUDA emitter runs it on the host (a load or store of a device
    buffer becomes a copy), never in a kernel."""
    op.attributes[HOST_ATTR] = UnitAttr()
    return op


def unravel(k: int, shape: tuple[int, ...] | list[int]) -> list[int]:
    idx = []
    for d in reversed(shape):
        idx.append(k % d)
        k //= d
    return idx[::-1]


def state(fl) -> ControlState:  # noqa: ANN001
    st = getattr(fl, "control", None)
    assert isinstance(st, ControlState), "control flow lowered without its outlining (LowerToLoopsPass)"
    return st


def call_body(fl, op: Operation, callee: str, args: list[SSAValue]) -> func.CallOp:  # noqa: ANN001
    """A call of a lowered body; its check sites become the caller's (shifted by a base)."""
    st = state(fl)
    lowered = next(f for f in st.module.ops if isinstance(f, func.FuncOp) and f.sym_name.data == callee)
    base = len(fl.checks.sites)
    fl.checks.sites.extend(function_errors(lowered))
    call = func.CallOp(callee, [*args, *body_sizes(fl, op, callee)], [])
    call.attributes[STATUS_BASE_ATTR] = IntegerAttr(base, i64)
    return call


def body_sizes(fl, op: Operation, callee: str) -> list[SSAValue]:  # noqa: ANN001
    """The run-time sizes a body takes after its buffers, as the size analysis read them off the
    call in op's region (opc/dialects/sizes.py)."""
    if fl.sizes is None:
        return []
    call = next((o for o in op.walk() if isinstance(o, func.CallOp) and o.callee.root_reference.data == callee), None)
    return [fl.size_value(fl.sizes.resolve(d)) for d in fl.sizes.calls.get(call, [])]


def alloc(fl, t: MemRefType, hint: str | None, like: SSAValue | None = None) -> SSAValue:  # noqa: ANN001
    """A buffer of type t; of like's run-time sizes where t has `?` dims."""
    if like is not None and DYNAMIC in t.get_shape():
        buf = fl.alloc(shape_of(like), t.get_element_type())
    else:
        buf = fl.e.value(memref.AllocOp([], [], t))
    buf.name_hint = hint
    fl.allocs.append(buf)
    return buf


def set_result(fl, r: SSAValue, buf: SSAValue) -> None:  # noqa: ANN001
    if DYNAMIC in memref_of(r.type).get_shape() and not isinstance(buf.owner, (memref.AllocOp,
                                                                            memref.ReinterpretCastOp)):
        buf = fl.view(buf, shape_of(r), element_of(r))  # a loop's result: its sizes made known to the C code
        buf.name_hint = r.name_hint
    fl.buffers[r] = buf
    if r in fl.returned:
        fl.copy_into_output(r)


def branch_calls(fl, op: Operation) -> list[Region]:  # noqa: ANN001
    """Per branch of an scf.if / scf.index_switch: a region calling its body, which writes op's
    result buffers."""
    rec = state(fl).records[op]
    outs = [fl.buffer_for(r) for r in op.results]
    regions = []
    for callee, caps in zip(rec.callees, rec.captured):
        block = Block()
        block.add_op(call_body(fl, op, callee, [*(fl.operand_buffer(v) for v in caps), *outs]))
        block.add_op(scf.YieldOp())
        regions.append(Region(block))
    return regions


def lower_if(fl, op: scf.IfOp) -> None:  # noqa: ANN001
    regions = branch_calls(fl, op)
    fl.e.emit(on_host(scf.IfOp(fl.operand_buffer(op.cond), [], regions[0], regions[1])))


def lower_switch(fl, op: scf.IndexSwitchOp) -> None:  # noqa: ANN001
    regions = branch_calls(fl, op)
    fl.e.emit(on_host(scf.IndexSwitchOp(fl.operand_buffer(op.arg), op.cases, regions[-1], regions[:-1], [])))


def rotation(fl, values: list[SSAValue], in_place: Sequence[int] = (),  # noqa: ANN001
             outputs: dict[int, SSAValue] | None = None) -> tuple[list[SSAValue], list[MemRefType]]:
    """The initial (cur, nxt, oth) of loop-carried values: cur reads the initial value in place,
    nxt and oth two buffers of the function's. A value updated in place (opc-outline-control-flow's
    in_place_carried) is one buffer in all three places, the initial value written into it once:
    `outputs[k]` where given (the function's output the loop's result is), else a buffer of its own.
    An initial value with no buffer (a constant the schedule left to its reader: fills_in_place) is
    written into the loop's buffer, or into one of its own where the loop turns buffers."""
    outputs = outputs or {}
    types = [memref_of(v.type) for v in values]
    nxt = [outputs.get(k) or alloc(fl, t, f"{v.name_hint or 'carried'}_a", v)
           for k, (v, t) in enumerate(zip(values, types))]
    oth = [alloc(fl, t, f"{v.name_hint or 'carried'}_b", v) if k not in in_place else nxt[k]
           for k, (v, t) in enumerate(zip(values, types))]

    def fill(v: SSAValue, buf: SSAValue) -> SSAValue:
        fl.e.parallel(shape_of(v), lambda idx: fl.e.store(fl.value_at(v, idx), buf, idx))
        return buf

    inits = [fill(v, nxt[k]) if k in in_place else fl.buffers.get(v) or fill(v, alloc(fl, types[k], v.name_hint, v))
             for k, v in enumerate(values)]
    return [*inits, *nxt, *oth], types


def returned_once(fl, r: SSAValue) -> bool:  # noqa: ANN001
    """r is one output of the function, allocated by its caller (not handed back)."""
    return r in fl.returned and fl.returned.count(r) == 1 and fl.returned.index(r) not in fl.handed


def lower_for(fl, op: scf.ForOp) -> None:  # noqa: ANN001
    rec = state(fl).records[op]
    n = len(op.iter_args)
    # a value updated in place that the function returns: its loop writes the output itself
    into_output = {k: fl.buffer_for(op.results[k]) for k in rec.in_place if returned_once(fl, op.results[k])}
    start, types = rotation(fl, list(op.iter_args), rec.in_place, into_output)
    ibuf = alloc(fl, MemRefType(i64, []), "iv") if rec.reads_index else None
    body = Block(arg_types=[op.body.block.args[0].type, *types * 3])
    iv, carried = body.args[0], list(body.args[1:])
    cur, nxt, oth = carried[:n], carried[n:2 * n], carried[2 * n:]
    args = [fl.operand_buffer(v) for v in rec.captured[0]]
    if ibuf is not None:
        cast = on_host(arith.IndexCastOp(iv, i64))
        body.add_ops([cast, on_host(memref.StoreOp.get(cast.results[0], ibuf, []))])
        args.append(ibuf)
    body.add_op(call_body(fl, op, rec.callees[0], [*args, *cur, *nxt]))
    body.add_op(scf.YieldOp(*nxt, *oth, *nxt))
    lb, ub, step = (fl.operand_buffer(v) for v in (op.lb, op.ub, op.step))
    new = scf.ForOp(lb, ub, step, start, Region(body))
    new.attributes[HOST_ATTR] = UnitAttr()
    new.attributes[STEP_CODE_ATTR] = IntegerAttr(
        fl.checks.code(op, "ValueError", f"the step of an scf.for in @{fl.fn.sym_name.data} is {{value}}: "
                       "it must be positive"), i64)
    fl.e.emit(new)
    for k, (r, v) in enumerate(zip(op.results, new.results[:n])):
        if k not in into_output:  # (those are fl.buffers[r] already: buffer_for)
            set_result(fl, r, v)


def lower_while(fl, op: scf.WhileOp) -> None:  # noqa: ANN001
    rec = state(fl).records[op]
    n = len(op.arguments)
    start, types = rotation(fl, list(op.arguments))
    flag = alloc(fl, MemRefType(i1, []), "cond")
    fresh = [alloc(fl, memref_of(r.type), r.name_hint, r) for r, p in zip(op.results, rec.passthrough) if p is None]
    before = Block(arg_types=types * 3)
    cur = list(before.args[:n])
    before.add_op(call_body(fl, op, rec.callees[0], [*(fl.operand_buffer(v) for v in rec.captured[0]), *cur,
                                                      flag, *fresh]))
    c = memref.LoadOp.get(flag, [])
    before.add_ops([on_host(c), scf.ConditionOp(c.res, *before.args)])
    after = Block(arg_types=types * 3)
    a_cur, a_nxt, a_oth = after.args[:n], after.args[n:2 * n], after.args[2 * n:]
    it = iter(fresh)
    forwarded = [a_cur[p] if p is not None else next(it) for p in rec.passthrough]
    after.add_op(call_body(fl, op, rec.callees[1], [*(fl.operand_buffer(v) for v in rec.captured[1]), *forwarded,
                                                     *a_nxt]))
    after.add_op(scf.YieldOp(*a_nxt, *a_oth, *a_nxt))
    new = scf.WhileOp(start, types * 3, Region(before), Region(after))
    new.attributes[HOST_ATTR] = UnitAttr()
    where = f"an scf.while in @{fl.fn.sym_name.data}"
    new.attributes[INTERRUPT_CODE_ATTR] = IntegerAttr(
        fl.checks.code(op, "KeyboardInterrupt", f"{where} was interrupted (Ctrl-C)"), i64)
    limit = op.attributes.get(MAX_TRIPS_ATTR)
    if isinstance(limit, IntegerAttr):
        new.attributes[MAX_TRIPS_ATTR] = limit
        new.attributes[MAX_TRIPS_CODE_ATTR] = IntegerAttr(
            fl.checks.code(op, "RuntimeError", f"{where} ran past its opc.max_trips of {{value}} iterations"), i64)
    fl.e.emit(new)
    it = iter(fresh)
    for r, p in zip(op.results, rec.passthrough):
        set_result(fl, r, new.results[p] if p is not None else next(it))
