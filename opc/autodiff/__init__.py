"""Reverse-mode autodiff on opc functions (Paddle's calc_gradient /
append_backward, tinygrad's gradient.py).

For `@f(args...) -> (results...)` it appends
`@f_grad(args..., douts...) -> (grads of wrt...)`:
  * douts: one per float result of f, in order (non-float results get none);
  * the forward body is replayed, then the ops are visited in reverse order
    (a valid reverse topological order: a function body is one block in SSA
    order) and each op's vjp rule from the registry turns its results'
    cotangents into its operands' cotangents;
  * a value used several times gets the sum of its cotangents;
  * ops not on a path from a wrt arg to a result are pruned: no cotangent
    reaches them, or they depend on no wrt arg; forward ops that the
    backward does not need are removed by dce;
  * an op result without a cotangent (an unused output) counts as zero;
  * args not in wrt, or marked `{opc.stop_gradient}`, get no gradient;
  * a wrt arg that no path reaches gets zeros (opc.full 0);
  * an op on the path with no rule raises OpcError "no gradient rule for X".
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.transforms.dead_code_elimination import region_dce

from opc.autodiff.rules import Emitter
from opc.dialects.opc import is_float
from opc.ir import OpcError

STOP_GRADIENT = "opc.stop_gradient"


def is_float_value(v: SSAValue) -> bool:
    return isinstance(v.type, TensorType) and is_float(v.type.element_type)


def stop_gradient(f: func.FuncOp, i: int) -> bool:
    return f.arg_attrs is not None and STOP_GRADIENT in f.arg_attrs.data[i].data


def default_wrt(f: func.FuncOp) -> list[int]:
    """Every float arg not marked {opc.stop_gradient}."""
    return [i for i, a in enumerate(f.body.block.args) if is_float_value(a) and not stop_gradient(f, i)]


def find_func(module: ModuleOp, name: str) -> func.FuncOp | None:
    for op in module.ops:
        if isinstance(op, func.FuncOp) and op.sym_name.data == name:
            return op
    return None


def wrt_indices(f: func.FuncOp, names: Sequence[str]) -> list[int]:
    """Arg names as written in the source (`%x` -> 'x') to positions."""
    fname = f.sym_name.data
    args = list(f.body.block.args)
    hints = [a.name_hint for a in args]
    out = []
    for name in names:
        n = name.lstrip("%")
        if n in hints:
            i = hints.index(n)
        elif n.isdigit() and int(n) < len(args):
            i = int(n)
        else:
            known = ", ".join(f"%{h}" for h in hints if h) or "none named"
            raise OpcError(f"error: @{fname} has no argument %{n} (arguments: {known})")
        if not is_float_value(args[i]):
            raise OpcError(f"error: @{fname}: argument %{n} is not a float tensor and has no gradient")
        if stop_gradient(f, i):
            raise OpcError(f"error: @{fname}: argument %{n} is marked {{{STOP_GRADIENT}}} and has no gradient")
        if i not in out:
            out.append(i)
    return out


def add_grad_functions(module: ModuleOp, funcs: Sequence[str] | None = None) -> None:
    """Append @NAME_grad for every func (or those named), wrt its default args.

    A function without float results or without float wrt args is skipped.
    """
    targets = [op for op in module.ops if isinstance(op, func.FuncOp) and not op.is_declaration]
    if funcs is not None:
        missing = [n for n in funcs if find_func(module, n) is None]
        if missing:
            raise OpcError(f"error: no function @{missing[0]} in the module")
        targets = [f for f in targets if f.sym_name.data in funcs]
    for f in targets:
        wrt = default_wrt(f)
        if wrt and any(is_float_value(v) for v in return_op(f).arguments):
            add_grad_function(module, f, wrt)


def return_op(f: func.FuncOp) -> func.ReturnOp:
    blocks = list(f.body.blocks)
    last = blocks[-1].last_op if blocks else None
    if len(blocks) != 1 or not isinstance(last, func.ReturnOp):
        raise OpcError(f"error: @{f.sym_name.data}: autodiff needs a single-block function ending in func.return")
    return last


def add_grad_function(module: ModuleOp, f: func.FuncOp, wrt: Sequence[int]) -> func.FuncOp:
    """Build and append @NAME_grad(args..., douts...) -> (grads of wrt...)."""
    name = f"{f.sym_name.data}_grad"
    if find_func(module, name) is not None:
        raise OpcError(f"error: cannot add @{name}: the module already has a function of that name")
    ret = return_op(f)
    old_args = list(f.body.block.args)
    outs = [v for v in ret.arguments if is_float_value(v)]
    block = Block(arg_types=[a.type for a in old_args] + [v.type for v in outs])
    for new, old in zip(block.args, old_args):
        new.name_hint = old.name_hint
    for i, (d, v) in enumerate(zip(block.args[len(old_args) :], outs)):
        d.name_hint = f"d{v.name_hint}" if v.name_hint else f"dout{i}"

    # Replay the forward body into the grad function.
    mapping: dict[SSAValue, SSAValue] = dict(zip(old_args, block.args))
    forward: list[Operation] = []
    for op in f.body.block.ops:
        if op is ret:
            break
        if op.regions:
            raise OpcError(f"error: @{f.sym_name.data}: autodiff does not handle ops with regions ({op.name})")
        new = op.clone(value_mapper=mapping)  # type: ignore[arg-type]
        for o_res, n_res in zip(op.results, new.results):
            mapping[o_res] = n_res
        block.add_op(new)
        forward.append(new)

    wrt_args = [block.args[i] for i in wrt]
    douts = block.args[len(old_args) :]
    seeds = [(mapping[v], d) for v, d in zip(outs, douts)]
    grads = backward(forward, wrt_args, seeds, block)

    results = []
    for a in wrt_args:
        g = grads.get(a)
        if g is None:  # no path from this arg to a result
            e = Emitter()
            g = e.full(0.0, a)
            for op in e.ops:
                block.add_op(op)
        if g.name_hint is None and a.name_hint and not isinstance(g, BlockArgument):
            g.name_hint = f"d{a.name_hint}"
        results.append(g)
    block.add_op(func.ReturnOp(*results))
    gf = func.FuncOp(name, (list(block.arg_types), [r.type for r in results]), Region(block))
    if f.arg_attrs is not None:  # keep {opc.stop_gradient} and friends on the inputs
        from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr

        gf.arg_attrs = ArrayAttr(list(f.arg_attrs.data) + [DictionaryAttr({}) for _ in douts])
    module.body.block.add_op(gf)
    region_dce(gf.body)
    return gf


def backward(
    forward: Sequence[Operation],
    wrt: Sequence[BlockArgument],
    seeds: Sequence[tuple[SSAValue, SSAValue]],
    block: Block,
) -> dict[SSAValue, SSAValue]:
    """Append the backward ops to `block`; return value -> summed cotangent."""
    from opc.registry import entry

    # Values that depend on a wrt arg: only their cotangents matter.
    live: set[SSAValue] = set(wrt)
    for op in forward:
        if any(v in live for v in op.operands):
            live.update(op.results)

    grads: dict[SSAValue, SSAValue] = {}
    e = Emitter()

    def accumulate(v: SSAValue, g: SSAValue) -> None:
        if v not in live:
            return
        if g.type != v.type:
            raise OpcError(f"internal error: gradient of type {g.type} for a value of type {v.type}")
        grads[v] = e.add(grads[v], g) if v in grads else g

    for v, d in seeds:
        accumulate(v, d)
    for op in reversed(forward):
        douts = [grads.get(r) for r in op.results]
        if all(d is None for d in douts) or not any(v in live for v in op.operands):
            continue  # off the path from wrt to the outputs: pruned
        rule_entry = entry(op.name)
        if rule_entry is None or rule_entry.kind == "grad":
            raise OpcError(f"error: no gradient rule for {op.name}")
        if rule_entry.vjp is None:
            continue  # not differentiable: no gradient flows through
        if len(op.results) == 1 or all(d is not None for d in douts) or op.name == "opc.fused_gemm_epilogue":
            filled = douts
        else:  # zero cotangents for the outputs nobody uses
            filled = [d if d is not None else e.full(0.0, r) for d, r in zip(douts, op.results)]
        operand_grads = rule_entry.vjp(e, op, filled)
        for v, g in zip(op.operands, operand_grads):
            if g is not None:
                accumulate(v, g)
    for op in e.ops:
        block.add_op(op)
    return grads
