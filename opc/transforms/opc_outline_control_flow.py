"""opc-outline-control-flow: every region body of an `scf.if`, `scf.for`, `scf.while` or
`scf.index_switch` becomes a
private function of its own, which the normal pipeline lowers (scheduled, fused, destination-passing
style) once, whatever the trip count; the region keeps only a `func.call` of it.

    %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %x) -> (tensor<4xf32>) {
      %y = opc.exp %acc ...   scf.yield %y
    }
becomes
    func.func private @f__for0(%acc: tensor<4xf32>) -> tensor<4xf32> attributes {opc.body} {
      %y = opc.exp %acc ...   func.return %y
    }
    ... scf.for ... { %y = func.call @f__for0(%acc) ; scf.yield %y }

A body's function takes the tensors it reads from outside (captured), then the region's own
arguments; an scf.for's induction variable, when the body reads it, comes in as a tensor<i64>
(read back with tensor.extract and arith.index_cast). Scalars computed outside (a bound, a
constant) are recomputed inside from the tensors they are read from; dense constants are copied in.
An scf.while's `before` region returns its condition as a tensor<i1> first, then the values it
forwards that are not simply its own arguments (those the host forwards without a copy).

The host side (opc/lowering/control_flow_lowering.py) finds what it needs in `Outlined`
records, keyed by the control-flow op.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, func, scf, tensor
from xdsl.dialects.builtin import DenseArrayBase, IndexType, ModuleOp, TensorType, UnitAttr, i1, i64
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from opc.dialects.control import CONTROL_OPS, in_place_carried

BODY_ATTR = "opc.body"
"""On a function made from a control-flow region: private, called by its host, not exported."""
IN_PLACE_ATTR = "opc.in_place"
"""On a body: [argument, output, ...] pairs the host passes one buffer for; the argument is read
by nothing but the tensor.insert_slice that gives the output, which then writes only its slot."""


@dataclass
class Outlined:
    """What the host needs to run one control-flow op: per region, its function and the host
    values it reads (captured), and for scf.for whether the body reads the induction variable."""

    callees: list[str]
    captured: list[list[SSAValue]]
    reads_index: bool = False
    # scf.while: per forwarded value, the index of the before-argument it is (no copy), or None
    passthrough: list[int | None] = field(default_factory=list)
    # scf.for: the carried values updated in place (one buffer, see in_place_carried)
    in_place: list[int] = field(default_factory=list)


def is_body(fn: Operation) -> bool:
    return BODY_ATTR in fn.attributes


def in_place_pairs(fn: Operation) -> list[tuple[int, int]]:
    """A body's (argument, output) pairs its host passes one buffer for (IN_PLACE_ATTR)."""
    pairs = fn.attributes.get(IN_PLACE_ATTR)
    if not isinstance(pairs, DenseArrayBase):
        return []
    flat = [int(v) for v in pairs.get_values()]
    return list(zip(flat[::2], flat[1::2]))


class Outliner:
    def __init__(self, module: ModuleOp, target: str = "cpu"):
        self.module = module
        self.target = target
        self.records: dict[Operation, Outlined] = {}
        self.names = {f.sym_name.data for f in module.ops if isinstance(f, func.FuncOp)}

    def fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def run(self) -> dict[Operation, Outlined]:
        for fn in [f for f in self.module.ops if isinstance(f, func.FuncOp) and not f.is_declaration]:
            self.outline_function(fn)
        return self.records

    def outline_function(self, fn: func.FuncOp) -> None:
        counter = 0
        for op in list(fn.body.block.ops):
            if not isinstance(op, CONTROL_OPS):
                continue
            base = f"{fn.sym_name.data}__{op.name.removeprefix('scf.')}{counter}"
            counter += 1
            if isinstance(op, scf.IfOp):
                self.outline_if(fn, op, base)
            elif isinstance(op, scf.IndexSwitchOp):
                self.outline_switch(fn, op, base)
            elif isinstance(op, scf.ForOp):
                self.outline_for(fn, op, base)
            else:
                assert isinstance(op, scf.WhileOp)
                self.outline_while(fn, op, base)

    # -- one region -> one function --------------------------------------------------------

    def make_function(self, host: func.FuncOp, name: str, block: Block, lead_args: Sequence[SSAValue],
                      results: list[SSAValue], index_arg: BlockArgument | None = None) -> tuple[str, list[SSAValue]]:
        """Move block's ops (all but its terminator) into a new function returning `results`; its
        arguments: the captured tensors, then (if given and read) the index as tensor<i64>, then
        lead_args (the region's tensor arguments). Returns (name, captured host values)."""
        name = self.fresh(name)
        ops = [o for o in block.ops if o is not block.last_op]
        inside = {id(o) for op in ops for o in op.walk()}
        own_args = set(block.args)
        captured: list[SSAValue] = []
        scalars: list[SSAValue] = []
        constants: list[arith.ConstantOp] = []
        todo = [v for op in ops for o in op.walk() for v in o.operands] + list(results)
        seen: set[SSAValue] = set()
        while todo:
            v = todo.pop(0)
            if v in seen or v in own_args:
                continue
            seen.add(v)
            owner = v.owner
            if isinstance(owner, Operation) and id(owner) in inside:
                continue
            if isinstance(owner, Block) and id(owner.parent_op()) in inside:
                continue  # an argument of a region nested in the body
            if isinstance(owner, arith.ConstantOp):
                constants.append(owner)
            elif isinstance(v.type, TensorType):
                captured.append(v)
            else:  # a scalar from outside: recomputed inside from what it is computed from
                assert isinstance(owner, Operation), f"scalar block argument {v} read in a body"
                scalars.append(v)
                todo.extend(owner.operands)
        reads_index = index_arg is not None and bool(index_arg.uses)
        arg_types = [v.type for v in captured] + ([TensorType(i64, [])] if reads_index else []) \
            + [v.type for v in lead_args]
        body = Block(arg_types=arg_types)
        new_captured = body.args[:len(captured)]
        new_lead = body.args[len(arg_types) - len(lead_args):]
        mapping: dict[SSAValue, SSAValue] = {}
        prelude: list[Operation] = []
        for v, a in zip(captured, new_captured):
            mapping[v] = a
            a.name_hint = v.name_hint
        for v, a in zip(lead_args, new_lead):
            mapping[v] = a
            a.name_hint = v.name_hint
        if reads_index:
            assert index_arg is not None
            it = body.args[len(captured)]
            it.name_hint = "iv"
            read = tensor.ExtractOp(it, [], i64)
            cast = arith.IndexCastOp(read.result, IndexType())
            cast.result.name_hint = index_arg.name_hint
            prelude += [read, cast]
            mapping[index_arg] = cast.result
        # constants and outside scalars, in their host order (each before its readers)
        owners = [v.owner for v in scalars if isinstance(v.owner, Operation)]
        outside = sorted({*constants, *owners}, key=host_position(host))
        for d in outside:
            c = d.clone(value_mapper=mapping)
            prelude.append(c)
            for old, new in zip(d.results, c.results):
                mapping[old] = new
        for o in prelude:
            body.add_op(o)
        for op in ops:
            op.detach()
            body.add_op(op)
        for old, new in mapping.items():
            old.replace_uses_with_if(new, lambda use: fn_contains(body, use.operation))
        ret = [mapping.get(v, v) for v in results]
        body.add_op(func.ReturnOp(*ret))
        fn = func.FuncOp(name, (arg_types, [v.type for v in results]), Region(body), visibility="private")
        fn.attributes[BODY_ATTR] = UnitAttr()
        self.module.body.block.insert_op_before(fn, host)
        self.outline_function(fn)  # its own control flow, in functions placed before it
        return name, captured

    # -- the four ops -------------------------------------------------------------------

    def outline_if(self, host: func.FuncOp, op: scf.IfOp, base: str) -> None:
        self.outline_branches(host, op, [(op.true_region, "then"), (op.false_region, "else")], base)

    def outline_switch(self, host: func.FuncOp, op: scf.IndexSwitchOp, base: str) -> None:
        """As an if's branches: the cases in order, then the default."""
        parts = [(r, f"case{k}") for k, r in enumerate(op.case_regions)] + [(op.default_region, "default")]
        self.outline_branches(host, op, parts, base)

    def outline_branches(self, host: func.FuncOp, op: Operation, parts: list[tuple[Region, str]], base: str) -> None:
        """Each region a function that takes what it captures and returns op's results."""
        callees, captured = [], []
        for region, part in parts:
            if not region.blocks:
                region.add_block(Block([scf.YieldOp()]))
            block = region.block
            term = block.last_op
            assert isinstance(term, scf.YieldOp)
            name, caps = self.make_function(host, f"{base}_{part}", block, [], list(term.operands))
            term.detach()
            term.erase()
            call = func.CallOp(name, caps, [r.type for r in op.results])
            block.add_ops([call, scf.YieldOp(*call.res)])
            callees.append(name)
            captured.append(caps)
        self.records[op] = Outlined(callees, captured)

    def outline_for(self, host: func.FuncOp, op: scf.ForOp, base: str) -> None:
        block = op.body.block
        term = block.last_op
        assert isinstance(term, scf.YieldOp)
        iv, carried = block.args[0], list(block.args[1:])
        in_place = in_place_carried(block, reads_slot=True)
        name, caps = self.make_function(host, base, block, carried, list(term.operands), iv)
        fn = self.function(name)
        reads_index = len(fn.args) > len(caps) + len(carried)
        if in_place:
            first = len(fn.args) - len(carried)
            fn.attributes[IN_PLACE_ATTR] = DenseArrayBase.from_list(i64, [n for k in in_place for n in (first + k, k)])
        term.detach()
        term.erase()
        glue: list[Operation] = []
        args = list(caps)
        if reads_index:
            cast = arith.IndexCastOp(iv, i64)
            elems = tensor.FromElementsOp.build(operands=[[cast.result]], result_types=[TensorType(i64, [])])
            glue += [cast, elems]
            args.append(elems.results[0])
        call = func.CallOp(name, [*args, *carried], [r.type for r in op.results])
        block.add_ops([*glue, call, scf.YieldOp(*call.res)])
        self.records[op] = Outlined([name], [caps], reads_index, in_place=in_place)

    def outline_while(self, host: func.FuncOp, op: scf.WhileOp, base: str) -> None:
        before, after = op.before_region.block, op.after_region.block
        cond = before.last_op
        assert isinstance(cond, scf.ConditionOp)
        forwarded = list(cond.args)
        passthrough = [before.args.index(v) if isinstance(v, BlockArgument) and v.block is before else None
                       for v in forwarded]
        flag = tensor.FromElementsOp.build(operands=[[cond.condition]], result_types=[TensorType(i1, [])])
        before.insert_op_before(flag, cond)
        fresh = [v for v, p in zip(forwarded, passthrough) if p is None]
        b_name, b_caps = self.make_function(host, f"{base}_before", before, list(before.args),
                                            [flag.results[0], *fresh])
        cond.detach()
        cond.erase()
        call = func.CallOp(b_name, [*b_caps, *before.args], [TensorType(i1, []), *(v.type for v in fresh)])
        flag_read = tensor.ExtractOp(call.res[0], [], i1)
        it = iter(call.res[1:])
        sent = [before.args[p] if p is not None else next(it) for p in passthrough]
        before.add_ops([call, flag_read, scf.ConditionOp(flag_read.result, *sent)])
        term = after.last_op
        assert isinstance(term, scf.YieldOp)
        a_name, a_caps = self.make_function(host, f"{base}_after", after, list(after.args), list(term.operands))
        term.detach()
        term.erase()
        call = func.CallOp(a_name, [*a_caps, *after.args], [v.type for v in op.before_region.block.args])
        after.add_ops([call, scf.YieldOp(*call.res)])
        self.records[op] = Outlined([b_name, a_name], [b_caps, a_caps], passthrough=passthrough)

    def function(self, name: str) -> func.FuncOp:
        for f in self.module.ops:
            if isinstance(f, func.FuncOp) and f.sym_name.data == name:
                return f
        raise KeyError(name)


def host_position(host: func.FuncOp):  # noqa: ANN201
    order = {id(o): i for i, o in enumerate(host.walk())}
    return lambda o: order.get(id(o), -1)


def fn_contains(block: Block, op: Operation) -> bool:
    around: Operation | None = op
    while around is not None:
        if around.parent_block() is block:
            return True
        around = around.parent_op()
    return False


def outline_control_flow(module: ModuleOp, target: str = "cpu") -> dict[Operation, Outlined]:
    return Outliner(module, target).run()


@dataclass(frozen=True)
class OutlineControlFlowPass(ModulePass):
    """The region bodies of control flow as private functions (opc-lower-to-loops runs this first)."""

    name = "opc-outline-control-flow"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        outline_control_flow(op)
