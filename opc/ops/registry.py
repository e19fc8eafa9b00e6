"""The op registry: per opc op, how it is differentiated and how it can run (Paddle's
ops.yaml + backward.yaml), built from the op definitions and the rules that register
themselves for their op class (opc/ops/registration.py), never written twice.

    entries()        every op's OpEntry, in the dialect's order (primitives, fused, grad ops)
    entry(op)        one op's, by class, instance or name ("opc.sin" or "sin"); None if unknown

Columns (OpEntry)
  kind         primitive | fused | grad: the op class's KIND.
  vjp          its `@vjp` rule; None: not differentiable (`not_differentiable`: compares,
               full); THROUGH_RULE: through its invoke or composite rule. A grad op without a
               vjp of its own is differentiated through its rule (the autodiff expands the
               rule and differentiates that); a kernel-only grad op must give its own vjp,
               else differentiating it is an error ("no gradient rule").
  any_dtype    the vjp also carries cotangents of integer and i1 values (cast, as Paddle's
               cast_grad; reshape, transpose: pure data movement). Elsewhere no cotangent flows
               through an integer result: compares and integer arithmetic stop it.
  composite    it has a composite rule (`@decomposition`, not an invoke one).
  realised_by  grad ops only, with backward.yaml's meaning:
                 kernel     a dedicated kernel; `composite` says whether a fallback exists
                 invoke     reuse a forward op (`invoke` says which)
                 composite  a decomposition into primitives
  invoke       for an invoke rule: the forward call it stands for.
  kernels      the built-in targets with a kernel (lowering) for it: the op class's KERNELS.
  onnx         the ONNX op type that maps onto it one to one (`elementwise(..., onnx=)`), if any.

Which way an op runs on a target comes from this table and the target's kernel list
alone (opc/targets/routing.py): its kernel if the target has one, else its invoke, else
its composite rule, else it cannot run there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

from xdsl.ir import Operation

from opc.dialects.opc import Opc, OpcOp

# The rule modules register themselves on import: the registry is built after all of them.
from opc.ops import decompositions, elementwise, vjp_rules  # noqa: F401
from opc.ops.registration import ELEMENTWISE, GRADIENTS, REWRITES, THROUGH_RULE, OpClass

BUILTIN_TARGETS = ("cpu", "cuda")


@dataclass(frozen=True)
class OpEntry:
    op: OpClass
    name: str
    kind: str
    vjp: Callable | str | None = None
    any_dtype: bool = False
    composite: bool = False
    realised_by: str | None = None
    invoke: str | None = None
    kernels: frozenset[str] = frozenset()
    onnx: str | None = None
    rule: type | None = None
    """The invoke or composite rule's RulePattern class (opc/ops/decompositions.py)."""

    @property
    def rewrite(self) -> str | None:
        """'invoke' or 'composite' when the op can be rewritten into other ops."""
        if self.invoke:
            return "invoke"
        return "composite" if self.composite else None


def build(op: OpClass) -> OpEntry:
    assert issubclass(op, OpcOp)  # KIND and KERNELS: the op's own row
    kind = op.KIND
    gradient, rewrite, ew = GRADIENTS.get(op), REWRITES.get(op), ELEMENTWISE.get(op)
    invoke = rewrite.invoke if rewrite else None
    kernels = frozenset(op.KERNELS)
    realised_by = None
    if kind == "grad":
        realised_by = "kernel" if kernels else "invoke" if invoke else "composite" if rewrite else None
    return OpEntry(op, op.name, kind,
                   vjp=gradient.rule if gradient else None, any_dtype=bool(gradient and gradient.any_dtype),
                   composite=rewrite is not None and invoke is None, realised_by=realised_by, invoke=invoke,
                   kernels=kernels, onnx=ew.onnx if ew else None, rule=rewrite.pattern if rewrite else None)


_ENTRIES: tuple[OpEntry, ...] = tuple(build(op) for op in Opc.operations)

REGISTRY: dict[str, OpEntry] = {e.name: e for e in _ENTRIES}
"""By op name (what kernel lists and `opc explain` speak), derived from the entries."""
BY_CLASS = MappingProxyType({e.op: e for e in _ENTRIES})
ALL_OPS: frozenset[str] = frozenset(REGISTRY)


def entries() -> tuple[OpEntry, ...]:
    """Every op's entry, in the dialect's order."""
    return _ENTRIES


def entry(op: OpClass | Operation | str) -> OpEntry | None:
    """One op's entry, by class, instance or name (with or without `opc.`); None if unknown."""
    if isinstance(op, str):
        return REGISTRY.get(op if op.startswith("opc.") else f"opc.{op}")
    return BY_CLASS.get(op if isinstance(op, type) else type(op))


def kernel_ops(target: str) -> frozenset[str]:
    """The ops a built-in target has kernels for."""
    return frozenset(e.name for e in _ENTRIES if target in e.kernels)


def rule_patterns() -> list[type]:
    """Every invoke / composite rule, once each (one may serve several ops)."""
    return list(dict.fromkeys(e.rule for e in _ENTRIES if e.rule is not None))


def has_vjp_rule(e: OpEntry) -> bool:
    """Differentiable, or said not to be: a registered vjp (None included), or a grad op with a rule."""
    return e.op in GRADIENTS or (e.kind == "grad" and e.rewrite is not None)


__all__ = ["ALL_OPS", "ELEMENTWISE", "REGISTRY", "THROUGH_RULE", "OpEntry", "entries", "entry", "kernel_ops",
           "rule_patterns"]
