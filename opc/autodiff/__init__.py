"""Reverse-mode autodiff on opc functions (Paddle's calc_gradient /
append_backward, tinygrad's gradient.py).

For `@f(args...) -> (results...)` it appends
  `@f_grad(args..., douts...) -> (grads of wrt...)` and
  `@f_value_and_grad(args..., douts...) -> (results..., grads of wrt...)`,
the second computing the forward once for both (a training step in one call):
  * douts: one per result of f, in order, integer and i1 results included,
    named `d` + the result's name (`%s` -> `%ds`);
  * the forward body is replayed, then the ops are visited in reverse order
    (a valid reverse topological order: a function body is one block in SSA
    order) and each op's vjp rule from the registry turns its results'
    cotangents into its operands' cotangents;
  * a cotangent of an integer or i1 value flows only through ops whose
    registry row says `any_dtype` (cast, as Paddle's cast_grad = cast(dout,
    x.dtype); reshape, transpose), never through compares or integer
    arithmetic; a value used several times gets the sum of its cotangents
    (i1: their logical or);
  * ops not on a path from a wrt arg to a result are pruned: no cotangent
    reaches them, or they depend on no wrt arg; forward ops that the
    backward does not need are removed by dce;
  * an op result without a cotangent (an unused output) counts as zero;
  * args not in wrt, or marked `{opc.stop_gradient}`, get no gradient;
  * a wrt arg that no path reaches gets zeros (opc.full 0);
  * grad ops are differentiated like any op, through the vjp their registry
    row gives (by default their invoke / composite rule): so `@f_grad`
    itself can be differentiated (higher order, `@f_grad_grad`);
  * an op on the path with no rule raises UnsupportedError "no gradient rule for X".
A function without a float argument to differentiate gets no grad functions;
`add_grad_functions` records why in the module attribute `opc.no_grad`
(missing function name -> reason), which compiled modules turn into an
AttributeError that says it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from xdsl.dialects import func, scf
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, ModuleOp, StringAttr, TensorType
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.transforms.dead_code_elimination import region_dce

from opc.autodiff.control_flow import control_vjp, recomputing
from opc.dialects.builder import OpBuilder
from opc.dialects.control import CONTROL_OPS, inputs_of
from opc.dialects.kinds import element_of, shape_of
from opc.dialects.opc import DYNAMIC, ConcatOp, FullOp, OpcOp, SliceGradOp, is_bool, is_float
from opc.dialects.opc_stack import DepthOp, PopIntoOp, PopOp, PushOp
from opc.errors import InputError, InternalError, UnsupportedError
from opc.ops.decompositions import expand
from opc.ops.registration import GRADIENTS, takes_missing
from opc.ops.registry import REGISTRY, THROUGH_RULE

STACK_OPS = (PushOp, PopOp, PopIntoOp, DepthOp)
STOP_GRADIENT = "opc.stop_gradient"
NO_GRAD = "opc.no_grad"
MAX_ORDER = 2
"""The highest `order` add_grad_functions builds (NAME_grad_grad)."""


def grad_order(grad: object) -> int:
    """`grad=` of opc.compile: False / True / 0 / 1 / 2 -> the order of gradients to build;
    anything else is refused, naming it."""
    if isinstance(grad, bool):
        return int(grad)
    if not isinstance(grad, int):
        raise TypeError(f"grad must be True, False or an order 1 to {MAX_ORDER}, got {grad!r}")
    if not 0 <= grad <= MAX_ORDER:
        raise ValueError(f"grad={grad} is not supported: opc builds gradients up to order {MAX_ORDER} (grad=2 adds "
                         f"NAME_grad_grad); for a higher order apply opc-grad{{func=NAME_grad_grad}} to the module")
    return grad


def is_float_value(v: SSAValue) -> bool:
    return isinstance(v.type, TensorType) and is_float(element_of(v))


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
            raise InputError(f"@{fname} has no argument %{n} (arguments: {known})")
        if not is_float_value(args[i]):
            raise InputError(f"@{fname}: argument %{n} is not a float tensor and has no gradient")
        if stop_gradient(f, i):
            raise InputError(f"@{fname}: argument %{n} is marked {{{STOP_GRADIENT}}} and has no gradient")
        if i not in out:
            out.append(i)
    return out


def no_wrt_reason(f: func.FuncOp) -> str:
    """Why `f` has no argument to differentiate with respect to (default_wrt is empty)."""
    name = f.sym_name.data
    if any(is_float_value(a) for a in f.body.block.args):
        return f"every float argument of @{name} is marked {{{STOP_GRADIENT}}}"
    kinds = ", ".join(str(a.type) for a in f.body.block.args) or "none"
    return f"@{name} has no float argument to differentiate with respect to (arguments: {kinds})"


def add_grad_functions(module: ModuleOp, funcs: Sequence[str] | None = None, order: int = 1) -> dict[str, str]:
    """Append @NAME_grad and @NAME_value_and_grad for every func (or those
    named), wrt its default args; with order=2 also @NAME_grad_grad (the
    grad of @NAME_grad wrt all its float args).

    A function with nothing to differentiate gets none of them: the returned
    dict (also merged into the module attribute `opc.no_grad`) maps each
    function not built to the reason.
    """
    if not 1 <= order <= MAX_ORDER:
        raise UnsupportedError(f"gradients of order {order} are not supported (1 to {MAX_ORDER})")
    targets = [op for op in module.ops if isinstance(op, func.FuncOp) and not op.is_declaration]
    if funcs is not None:
        missing = [n for n in funcs if find_func(module, n) is None]
        if missing:
            raise InputError(f"no function @{missing[0]} in the module")
        targets = [f for f in targets if f.sym_name.data in funcs]
    skipped: dict[str, str] = {}
    for f in targets:
        name = f.sym_name.data
        wrt = default_wrt(f)
        if not wrt:
            why = no_wrt_reason(f)
            for suffix in ("_grad", "_value_and_grad", "_grad_grad")[: 2 + (order > 1)]:
                skipped[name + suffix] = why
            continue
        g = add_grad_function(module, f, wrt)
        add_grad_function(module, f, wrt, with_values=True)
        if order > 1 and default_wrt(g):
            why = add_second_order(module, f, g, wrt)
            if why:
                skipped[f"{name}_grad_grad"] = why
    record_no_grad(module, skipped)
    return skipped


def add_second_order(module: ModuleOp, f: func.FuncOp, g: func.FuncOp, wrt: Sequence[int]) -> str | None:
    """@NAME_grad_grad: g (@NAME_grad) differentiated; where f has loops, a copy of g whose loops'
    backward recompute their carried values instead (g's pops read what its pushes saved, a
    dependence the sweep cannot see: control_flow.recomputing). The reason where it cannot be built."""
    if not any(isinstance(o, (scf.ForOp, scf.WhileOp)) for o in f.walk()):
        add_grad_function(module, g, default_wrt(g))
        return None
    name = g.sym_name.data
    try:
        with recomputing():
            pure = add_grad_function(module, f, wrt, name=f"{name}__recomputing")
    except UnsupportedError as err:
        return str(err)
    try:
        add_grad_function(module, pure, default_wrt(pure), name=f"{name}_grad")
    finally:
        pure.detach()
        pure.erase()
    return None


def record_no_grad(module: ModuleOp, skipped: dict[str, str]) -> None:
    if not skipped:
        return
    merged = {**no_grad_reasons(module), **skipped}
    module.attributes[NO_GRAD] = DictionaryAttr({k: StringAttr(v) for k, v in merged.items()})


def no_grad_reasons(module: ModuleOp) -> dict[str, str]:
    """Function name -> why opc built no such gradient function (the `opc.no_grad` attribute)."""
    attr = module.attributes.get(NO_GRAD)
    if not isinstance(attr, DictionaryAttr):
        return {}
    return {k: v.data for k, v in attr.data.items() if isinstance(v, StringAttr)}


def return_op(f: func.FuncOp) -> func.ReturnOp:
    blocks = list(f.body.blocks)
    last = blocks[-1].last_op if blocks else None
    if len(blocks) != 1 or not isinstance(last, func.ReturnOp):
        raise UnsupportedError(f"@{f.sym_name.data}: autodiff needs a single-block function ending in func.return")
    return last


def fresh_names(wanted: Iterable[str], taken: set[str]) -> list[str]:
    """`wanted`, each made unique against `taken` (and each other) by trailing underscores.

    (Not `_1`: xDSL strips such suffixes from name hints.)"""
    out = []
    for name in wanted:
        while name in taken:
            name += "_"
        taken.add(name)
        out.append(name)
    return out


def add_grad_function(module: ModuleOp, f: func.FuncOp, wrt: Sequence[int], with_values: bool = False,
                      name: str | None = None) -> func.FuncOp:
    """Build and append @NAME_grad(args..., douts...) -> (grads of wrt...), or
    with_values: @NAME_value_and_grad(args..., douts...) -> (results..., grads of wrt...);
    `name`: another name for it."""
    name = name or f"{f.sym_name.data}_{'value_and_grad' if with_values else 'grad'}"
    if any(isinstance(o, STACK_OPS) for o in f.walk()):
        raise UnsupportedError(f"@{f.sym_name.data} saves or reads loop values on stacks (opc_stack, a loop's "
                               "backward): opc-grad does not differentiate through them; for a second order "
                               "compile with grad=2, whose @NAME_grad_grad recomputes them instead")
    if find_func(module, name) is not None:
        raise InputError(f"cannot add @{name}: the module already has a function of that name")
    ret = return_op(f)
    old_args = list(f.body.block.args)
    outs = list(ret.arguments)
    block = Block(arg_types=[a.type for a in old_args] + [v.type for v in outs])
    for new, old in zip(block.args, old_args):
        new.name_hint = old.name_hint
    taken = {a.name_hint for a in old_args if a.name_hint}
    wanted = [f"d{v.name_hint}" if v.name_hint else f"dout{i}" for i, v in enumerate(outs)]
    for d, hint in zip(block.args[len(old_args) :], fresh_names(wanted, taken)):
        d.name_hint = hint

    # Replay the forward body into the grad function.
    mapping: dict[SSAValue, SSAValue] = dict(zip(old_args, block.args))
    forward: list[Operation] = []
    for op in f.body.block.ops:
        if op is ret:
            break
        if op.regions and not isinstance(op, CONTROL_OPS):
            raise UnsupportedError(f"@{f.sym_name.data}: autodiff does not handle ops with regions ({op.name})")
        new = op.clone(value_mapper=mapping)
        for o_res, n_res in zip(op.results, new.results):
            mapping[o_res] = n_res
        block.add_op(new)
        forward.append(new)

    wrt_args = [block.args[i] for i in wrt]
    douts = block.args[len(old_args) :]
    seeds = [(mapping[v], d) for v, d in zip(outs, douts)]
    grads = backward(forward, wrt_args, seeds, block)

    results = [mapping[v] for v in outs] if with_values else []
    for a in wrt_args:
        g = grads.get(a)
        if g is None:  # no path from this arg to a result
            e = OpBuilder()
            g = e.full(0.0, a)
            for op in e.ops:
                block.add_op(op)
        if g.name_hint is None and a.name_hint and not isinstance(g, BlockArgument):
            g.name_hint = f"d{a.name_hint}"
        results.append(g)
    block.add_op(func.ReturnOp(*results))
    gf = func.FuncOp(name, (list(block.arg_types), [r.type for r in results]), Region(block))
    if f.arg_attrs is not None:  # keep {opc.stop_gradient} and friends on the inputs
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
    e = OpBuilder()
    grads = sweep(e, forward, wrt, seeds)
    for op in e.ops:
        block.add_op(op)
    return grads


def sweep(
    e: OpBuilder, forward: Sequence[Operation], sources: Iterable[SSAValue], seeds: Iterable[tuple[SSAValue, SSAValue]]
) -> dict[SSAValue, SSAValue]:
    """The reverse sweep over `forward` (ops in SSA order), emitting into `e`:
    value -> summed cotangent, for the values that depend on `sources`."""
    live: set[SSAValue] = set(sources)
    for op in forward:
        if any(v in live for v in inputs_of(op)):
            live.update(op.results)

    parts: dict[SSAValue, list[SSAValue]] = {}  # a value's cotangents, summed when its producer is reached

    def accumulate(v: SSAValue, g: SSAValue) -> None:
        if v not in live:
            return
        if g.type != v.type:
            raise InternalError(f"gradient of type {g.type} for a value of type {v.type}")
        parts.setdefault(v, []).append(g)

    def total(v: SSAValue) -> SSAValue | None:
        if v in parts and len(parts[v]) > 1:
            parts[v] = [sum_cotangents(e, parts[v])]
        return parts[v][0] if v in parts else None

    for v, d in seeds:
        accumulate(v, d)
    for op in reversed(forward):
        douts = [total(r) for r in op.results]
        if all(d is None for d in douts) or not any(v in live for v in inputs_of(op)):
            continue  # off the path from wrt to the outputs: pruned
        if isinstance(op, CONTROL_OPS):  # scf.if / for / while (control_flow.py)
            for v, g in control_vjp(e, op, douts, live, sweep).items():
                accumulate(v, g)
            continue
        vjp, any_dtype = vjp_of(op.name)
        if vjp is None:
            continue  # not differentiable: no gradient flows through
        if not any_dtype:
            # an integer result (a count, topk's positions) has no derivative; a cast from it gives it a
            # cotangent (cast passes them through every dtype), which must not stop the float results'
            douts = [d if is_float_value(r) else None for d, r in zip(douts, op.results)]
            if all(d is None for d in douts):
                continue  # integer arithmetic, compares: no cotangent flows through
        if len(op.results) == 1 or all(d is not None for d in douts) or getattr(vjp, "takes_missing", False):
            filled = douts
        else:  # zero cotangents for the outputs nobody uses
            filled = [d if d is not None else e.full(0.0, r) for d, r in zip(douts, op.results)]
        grads_of_operands = vjp(e, op, filled)
        if grads_of_operands == THROUGH_RULE:  # the rule decided for this instance: through its rule
            grads_of_operands = vjp_through_rule(e, op, filled)
        for v, g in zip(op.operands, grads_of_operands):
            if g is not None:
                accumulate(v, g)
    return {v: g for v in parts if (g := total(v)) is not None}


def sum_cotangents(e: OpBuilder, gs: Sequence[SSAValue]) -> SSAValue:
    """The sum of one value's cotangents, in order. Those that are slice_grads of disjoint slabs
    along one axis (the gates cut from one projection, the time steps cut from a sequence) are
    one concat of their douts (zeros in the gaps) instead of zero-filled tensors added up."""
    slabs = disjoint_slabs(gs)
    if len(slabs) > 1:
        axis = slabs[0][0]
        shape, el = list(shape_of(gs[0])), element_of(gs[0])
        def zeros(width: int) -> SSAValue:  # a `?` dim is never the cut one: its sizes are gs[0]'s
            t = TensorType(el, [width if k == axis else n for k, n in enumerate(shape)])
            return e.value(FullOp(0.0, t, e.dims(gs[0]))) if DYNAMIC in t.get_shape() else e.full(0.0, t)

        pieces, at = [], 0
        for _, start, limit, i in slabs:
            if start > at:
                pieces.append(zeros(start - at))
            owner = gs[i].owner
            assert isinstance(owner, SliceGradOp)  # disjoint_slabs: slice_grads
            pieces.append(owner.dout)
            at = limit
        if at < shape[axis]:
            pieces.append(zeros(shape[axis] - at))
        joined = e.value(ConcatOp(pieces, axis))
        first, merged = min(i for *_, i in slabs), {i for *_, i in slabs}
        gs = [joined if i == first else g for i, g in enumerate(gs) if i == first or i not in merged]
    out = gs[0]
    for g in gs[1:]:
        out = fan_in(e, out, g)
    return out


def disjoint_slabs(gs: Sequence[SSAValue]) -> list[tuple[int, int, int, int]]:
    """(axis, start, limit, index in gs), by start, of the float slice_grads among gs with unit strides that cut
    along one axis only (the most common one), disjoint; fewer than two: nothing to merge."""
    found: list[tuple[int, int, int, int]] = []
    for i, g in enumerate(gs):
        op = g.owner
        if not isinstance(op, SliceGradOp) or not is_float(element_of(g)):
            continue
        start, limit, strides = op.slice_params()
        shape = shape_of(g)
        cut = [k for k, n in enumerate(shape) if (start[k], limit[k]) != (0, n)]
        if len(cut) == 1 and all(s == 1 for s in strides):
            found.append((cut[0], start[cut[0]], limit[cut[0]], i))
    if not found:
        return []
    axis = max({a for a, *_ in found}, key=lambda a: sum(f[0] == a for f in found))
    chosen: list[tuple[int, int, int, int]] = []
    for slab in sorted((f for f in found if f[0] == axis), key=lambda f: f[1]):
        if not chosen or slab[1] >= chosen[-1][2]:
            chosen.append(slab)
    return chosen


def fan_in(e: OpBuilder, a: SSAValue, b: SSAValue) -> SSAValue:
    """The sum of two cotangents of one value; for i1, their logical or."""
    if is_bool(element_of(a)):
        return e.select(a, a, b)
    return e.add(a, b)


FOREIGN_GRADIENTS = {op.name: g for op, g in GRADIENTS.items() if not issubclass(op, OpcOp)}
"""The rules of ops opc runs that are not its own (MLIR's tensor.extract_slice / insert_slice)."""


def vjp_of(name: str) -> tuple[Callable | None, bool]:
    """(vjp rule or None if no gradient flows through the op, any_dtype), from the registry.

    A grad op without a vjp of its own is differentiated through its invoke or
    composite rule; an op unknown to the registry, or a kernel-only grad op
    without a vjp, has no gradient rule: an error, never a silent zero."""
    e = REGISTRY.get(name)
    if e is None and (foreign := FOREIGN_GRADIENTS.get(name)) is not None:  # MLIR's own ops (tensor.*_slice)
        return foreign.rule if callable(foreign.rule) else None, foreign.any_dtype
    if e is not None and e.rewrite and (e.vjp == THROUGH_RULE or e.kind == "grad" and e.vjp is None):
        return vjp_through_rule, e.any_dtype
    if e is None or (e.kind == "grad" and e.vjp is None):
        why = " (a kernel-only grad op needs a vjp of its own: @vjp in opc/ops/vjp_rules.py)" if e else ""
        raise UnsupportedError(f"no gradient rule for {name}{why}")
    assert not isinstance(e.vjp, str)  # THROUGH_RULE: vjp_through_rule, above
    return e.vjp, e.any_dtype


@takes_missing
def vjp_through_rule(e: OpBuilder, op: Operation, douts: Sequence[SSAValue | None]) -> list[SSAValue | None]:
    """Any op with an invoke or composite rule (grad ops, by default): the
    rule that opc-decompose uses is expanded, its ops recomputed here in the
    backward, and differentiated (each by its own vjp, recursively).

    So cast_grad is differentiated through cast(dout, x.dtype), relu_grad
    through its select, fused_gemm_epilogue_grad through its matmuls and
    activation grad; a grad op added with a rule needs no vjp of its own."""
    recompute = OpBuilder()
    results = expand(recompute, op)
    e.ops.extend(recompute.ops)
    seeds = [(r, d) for r, d in zip(results, douts) if d is not None]
    grads = sweep(e, recompute.ops, op.operands, seeds)
    # a value given for several operands (self-attention's q = k = v) has one total cotangent: the
    # caller accumulates per operand, so it goes to the first of them only
    first = {v: i for i, v in reversed(list(enumerate(op.operands)))}
    return [grads.get(v) if first[v] == i else None for i, v in enumerate(op.operands)]

