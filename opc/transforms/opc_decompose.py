"""`opc-decompose{ops=... target=...}`: rewrite ops by their invoke or
composite rule (the rules are opc/ops/decompositions.py, each registered for its
op class; opc/ops/registry.py says which op has which).

    opc-decompose                      every op the target (default cpu) has no
                                       kernel for, repeatedly, until only kernel
                                       ops remain; an op that cannot run is an error
    opc-decompose{ops=all}             everything with a rule, down to primitives
    opc-decompose{ops=cast_grad,fused_gemm_epilogue_grad}   just those (and what
                                       they produce, if named too)

Driving the rules first, then the pass; `legalize` is what the Python API calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriteWalker,
)
from xdsl.transforms.dead_code_elimination import region_dce

from opc.errors import InputError, UnsupportedError
from opc.ops.registry import REGISTRY, rule_patterns
from opc.targets.device_kernels import EXTERNAL_ATTR
from opc.targets.routing import route_op
from opc.targets.target import Target, get_target, op_name

# ---------------------------------------------------------------------------
# Driving the rules
# ---------------------------------------------------------------------------


def rewritable() -> frozenset[str]:
    return frozenset(n for n, e in REGISTRY.items() if e.rewrite)


def resolve_ops(ops: Sequence[str] | str | None) -> frozenset[str]:
    """'all', 'a,b' or ['a', 'opc.b'] -> full op names, each with a rule."""
    if ops is None:
        return frozenset()
    if isinstance(ops, str):
        ops = [s for s in (p.strip() for p in ops.split(",")) if s]
    if list(ops) == ["all"]:
        return rewritable()
    names = [op_name(n) for n in ops]
    for raw, n in zip(ops, names):
        if n not in REGISTRY:
            raise InputError(f"opc-decompose: unknown op '{raw}'")
        if REGISTRY[n].rule is None:
            raise UnsupportedError(f"opc-decompose: {n} has no invoke or composite rule to decompose it with")
    return frozenset(names)


def apply_rules(
    module: ModuleOp, wanted: Callable[[Operation], bool], origin: dict[Operation, str] | None = None
) -> None:
    """Rewrite every wanted op (and the wanted ops the rules produce) to a fixed point."""
    origin = origin if origin is not None else {}
    patterns = [cls(wanted, origin) for cls in rule_patterns()]
    PatternRewriteWalker(GreedyRewritePatternApplier(patterns), apply_recursively=True).rewrite_module(module)


def cannot_run(module: ModuleOp, target: Target) -> list[Operation]:
    """opc ops left without a kernel on the target (neither opc's nor the device's own)."""
    return [op for op in module.walk() if op.name.startswith("opc.") and route_op(op, target) == "cannot run"]


def mark_externals(module: ModuleOp, target: Target, forced: frozenset[str] = frozenset()) -> None:
    """Mark every op instance the device's own kernel takes with its symbol (and unmark the rest:
    a module may have been legalized for another target before)."""
    for op in module.walk():
        if not op.name.startswith("opc."):
            continue
        if route_op(op, target, force=op.name in forced) == "external":
            kernel = target.external_for(op)
            assert kernel is not None  # routed "external": a kernel admits it
            op.attributes[EXTERNAL_ATTR] = StringAttr(kernel.symbol)
        else:
            op.attributes.pop(EXTERNAL_ATTR, None)


def enclosing_func(op: Operation) -> str:
    p = op.parent_op()
    while p is not None and not isinstance(p, func.FuncOp):
        p = p.parent_op()
    return f" (in @{p.sym_name.data})" if isinstance(p, func.FuncOp) else ""


def legalize_ops(
    module: ModuleOp, target: Target, force: Sequence[str] | str | None = None
) -> list[tuple[Operation, str]]:
    """Rewrite until only kernel ops remain where possible; return (op, origin) of those that cannot run."""
    forced = resolve_ops(force)
    origin: dict[Operation, str] = {}
    def rewritten(op: Operation) -> bool:
        return route_op(op, target, force=op.name in forced) in ("invoke", "composite")

    apply_rules(module, rewritten, origin)
    mark_externals(module, target, forced)
    return [(op, origin.get(op, "")) for op in cannot_run(module, target)]


def cannot_run_message(op: Operation, origin: str, target: Target) -> str:
    via = f", produced by the rule of {origin}" if origin else ""
    reason = getattr(type(op), "UNSUPPORTED", {}).get(target.name)
    if reason is not None:  # the op says why (opc.OpcOp.UNSUPPORTED)
        return f"{op.name} cannot run on target '{target.name}' yet: {reason}{via}{enclosing_func(op)}"
    return (
        f"{op.name} cannot run on target '{target.name}': it has no kernel there and no invoke or "
        f"composite rule{via}{enclosing_func(op)}"
    )


def legalize(module: ModuleOp, target: Target, force: Sequence[str] | str | None = None) -> None:
    """Leave only ops in target.kernels (plus func / arith) and instances marked for the
    device's own kernels: external where one admits the instance, else kernel where the
    target has one, else invoke, else composite; `force` ("all" or op names)
    decomposes those even where a kernel exists. Then dce."""
    bad = legalize_ops(module, target, force)
    if bad:
        raise UnsupportedError(cannot_run_message(*bad[0], target))
    region_dce(module.body)


@dataclass(frozen=True)
class DecomposePass(ModulePass):
    name = "opc-decompose"

    ops: tuple[str, ...] = ()
    target: str = "cpu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not self.ops:
            legalize(op, get_target(self.target))
            return
        names = resolve_ops(self.ops)
        apply_rules(op, lambda o_: o_.name in names)
