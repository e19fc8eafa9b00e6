"""Where an op's rules register themselves, keyed by its op class (JAX's `ad.defjvp(sin_p, ...)`,
Paddle's `@register_decomp`): each rule file says, next to the rule, which op it is for.

    @vjp(o.SinOp)                          the op's gradient rule
    not_differentiable(o.EqualOp, ...)     no gradient flows through these (said, never assumed)
    through_rule(o.InstanceNormOp, ...)    differentiated through its invoke / composite rule
    @decomposition(o.CastGradOp, invoke="cast(dout, x.dtype)")   an invoke or composite rule
    elementwise(o.SinOp, math.SinOp, onnx="Sin", since=7)      its scalar op and ONNX type

opc/ops/registry.py builds the op table from what is recorded here (once every rule module is
imported); the lowering (scalars.py, c_expressions.py) and the ONNX importer read ELEMENTWISE
through it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.ir import Operation

OpClass = type[Operation]

THROUGH_RULE = "through its rule"
"""In the registry's vjp column, and as a rule's answer for one instance: differentiate the op
through its invoke or composite rule (the autodiff expands the rule and differentiates that).
A grad op without a vjp of its own means the same."""


@dataclass(frozen=True)
class Gradient:
    rule: Callable | str | None
    """A vjp function, THROUGH_RULE, or None: no gradient flows through the op."""
    any_dtype: bool = False
    """The cotangent also flows through integer and i1 values (cast, reshape: pure data movement)."""


@dataclass(frozen=True)
class Rewrite:
    pattern: type
    """A RulePattern subclass (opc/ops/decompositions.py)."""
    invoke: str | None = None
    """For an invoke rule: the forward call it stands for, as backward.yaml writes it."""


@dataclass(frozen=True)
class Elementwise:
    float_op: OpClass | None = None
    """The arith / math op computing it on float scalars (f16/bf16 in f32)."""
    int_ops: tuple[OpClass, OpClass] | None = None
    """(signed, unsigned) arith / math ops on integer scalars."""
    predicates: tuple[str, str, str] | None = None
    """A compare: its (float, signed, unsigned) predicates."""
    onnx: str | None = None
    """The ONNX op type that maps onto it one to one (same operands, same meaning)."""
    since: int = 13
    """The first ONNX opset from which that mapping holds."""


GRADIENTS: dict[OpClass, Gradient] = {}
REWRITES: dict[OpClass, Rewrite] = {}
ELEMENTWISE: dict[OpClass, Elementwise] = {}


def once(table: dict, op: OpClass, value: object, what: str) -> None:
    if op in table:
        raise AssertionError(f"{op.name}: a second {what} registered")
    table[op] = value


def vjp(*ops: OpClass, any_dtype: bool = False) -> Callable[[Callable], Callable]:
    """`@vjp(o.SinOp)` over a rule `(OpBuilder, op, douts) -> grads`, one per operand (None: none)."""

    def register(rule: Callable) -> Callable:
        for op in ops:
            once(GRADIENTS, op, Gradient(rule, any_dtype), "vjp")
        return rule

    return register


def takes_missing(rule: Callable) -> Callable:
    """Marks a vjp rule that reads None as the cotangent of a result nobody uses (the autodiff
    passes zeros to the others)."""
    setattr(rule, "takes_missing", True)  # noqa: B010  (a plain attribute, for getattr)
    return rule


def not_differentiable(*ops: OpClass) -> None:
    """No gradient flows through these ops (compares, integer ops, full)."""
    for op in ops:
        once(GRADIENTS, op, Gradient(None), "vjp")


def through_rule(*ops: OpClass, any_dtype: bool = False) -> None:
    """Differentiated through their invoke / composite rule (what grad ops get by default)."""
    for op in ops:
        once(GRADIENTS, op, Gradient(THROUGH_RULE, any_dtype), "vjp")


def decomposition(*ops: OpClass, invoke: str | None = None) -> Callable[[type], type]:
    """`@decomposition(o.ReluOp)` over a RulePattern: the op's composite rule, or with `invoke`
    (backward.yaml's invoke) its rewrite into a forward op."""

    def register(pattern: type) -> type:
        for op in ops:
            once(REWRITES, op, Rewrite(pattern, invoke), "decomposition")
        return pattern

    return register


def elementwise(op: OpClass, float_op: OpClass | None = None, int_ops: tuple[OpClass, OpClass] | None = None,
                predicates: tuple[str, str, str] | None = None, onnx: str | None = None, since: int = 13) -> None:
    """An elementwise op's scalar lowering (the loop lowering evaluates it point-wise with these
    scalar ops, whose C text is opc/lowering/c_expressions.py's) and its one-to-one ONNX type."""
    once(ELEMENTWISE, op, Elementwise(float_op, int_ops, predicates, onnx, since), "elementwise rule")
