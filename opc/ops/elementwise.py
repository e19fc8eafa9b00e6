"""The elementwise ops' rules, op by op: its scalar lowering and ONNX type (`elementwise`), then
its vjp. Adding an elementwise op: its class in opc/dialects/opc.py, its two entries here, a
test entry (tests/lowering/test_math_unary.py for a float function); tests/ops/test_op_checklist.py
names what is missing.

A vjp gets an `OpBuilder`, the forward op and one cotangent per result (`None`: zero) and returns
one gradient per operand (`None`: none). Broadcasting operands get theirs summed back to their own
shape by `OpBuilder.unbroadcast`.
"""

from __future__ import annotations

import math as pymath

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.dialects.builder import OpBuilder
from opc.dialects.kinds import element_of
from opc.ops.registration import elementwise, not_differentiable, vjp
from opc.ops.vjp_rules import Douts, Grads, result_of

# ---------------------------------------------------------------------------
# Elementwise binaries
# ---------------------------------------------------------------------------


elementwise(o.AddOp, arith.AddfOp, (arith.AddiOp, arith.AddiOp), onnx="Add", since=7)
@vjp(o.AddOp)
def vjp_add(e: OpBuilder, op: o.AddOp, douts: Douts) -> Grads:
    (d,) = douts
    return e.unbroadcast(d, op.lhs), e.unbroadcast(d, op.rhs)


elementwise(o.SubOp, arith.SubfOp, (arith.SubiOp, arith.SubiOp), onnx="Sub", since=7)
@vjp(o.SubOp)
def vjp_sub(e: OpBuilder, op: o.SubOp, douts: Douts) -> Grads:
    (d,) = douts
    return e.unbroadcast(d, op.lhs), e.unbroadcast(e.neg(d), op.rhs)


elementwise(o.MulOp, arith.MulfOp, (arith.MuliOp, arith.MuliOp), onnx="Mul", since=7)
@vjp(o.MulOp)
def vjp_mul(e: OpBuilder, op: o.MulOp, douts: Douts) -> Grads:
    (d,) = douts
    return e.unbroadcast(e.mul(d, op.rhs), op.lhs), e.unbroadcast(e.mul(d, op.lhs), op.rhs)


elementwise(o.DivOp, arith.DivfOp, (arith.DivSIOp, arith.DivUIOp), onnx="Div", since=7)
@vjp(o.DivOp)
def vjp_div(e: OpBuilder, op: o.DivOp, douts: Douts) -> Grads:
    # out = a / b: da = d / b, db = -d * out / b
    (d,) = douts
    da = e.div(d, op.rhs)
    db = e.neg(e.div(e.mul(d, result_of(op)), op.rhs))
    return e.unbroadcast(da, op.lhs), e.unbroadcast(db, op.rhs)


def _extremum(e: OpBuilder, op: o.MaximumOp | o.MinimumOp, d: SSAValue, wins: type[o.CompareOp]) -> Grads:
    # Ties split the gradient evenly between the operands, as PyTorch does.
    a, b = op.lhs, op.rhs
    ta, tb = clip_input(op, a, b), clip_input(op, b, a)  # what the tests may read instead
    zero, half = e.full(0.0, d), e.scale(d, 0.5)
    tie = e.value(o.EqualOp(ta, tb))
    da = e.select(e.value(wins(ta, tb)), d, e.select(tie, half, zero))
    db = e.select(e.value(wins(tb, ta)), d, e.select(tie, half, zero))
    return e.unbroadcast(da, a), e.unbroadcast(db, b)


def splat_value(v: SSAValue) -> float | None:
    """The value of a constant whose elements are all one float (opc.full, a splat arith.constant)."""
    owner = v.owner
    if isinstance(owner, o.FullOp):
        return owner.value.value.data
    if (isinstance(owner, arith.ConstantOp) and isinstance(owner.value, DenseIntOrFPElementsAttr)
            and len(owner.value) > 0 and owner.value.is_splat()):
        value = owner.value.get_values()[0]
        return float(value) if isinstance(value, float) else None
    return None


def clip_input(op: o.MaximumOp | o.MinimumOp, v: SSAValue, bound: SSAValue) -> SSAValue:
    """A clip, min(max(x, lo), hi) with constants lo < hi (or max(min(x, hi), lo)): the outer op's
    comparisons of max(x, lo) with hi give the same answers read on x (NaN included), so its vjp
    reads x and the inner op's result, no longer needed by the backward, fuses with the outer op
    instead of being stored. Otherwise v itself."""
    inner = v.owner
    outer_bound = splat_value(bound)
    if outer_bound is None or type(inner) not in (o.MaximumOp, o.MinimumOp) or type(inner) is type(op):
        return v
    assert isinstance(inner, (o.MaximumOp, o.MinimumOp))
    for x, c in ((inner.lhs, inner.rhs), (inner.rhs, inner.lhs)):
        inner_bound = splat_value(c)
        if x.type != v.type or inner_bound is None:
            continue
        if (inner_bound < outer_bound) if isinstance(op, o.MinimumOp) else (inner_bound > outer_bound):
            return x
    return v


elementwise(o.MaximumOp, arith.MaximumfOp, (arith.MaxSIOp, arith.MaxUIOp))
@vjp(o.MaximumOp)
def vjp_maximum(e: OpBuilder, op: o.MaximumOp, douts: Douts) -> Grads:
    return _extremum(e, op, douts[0], o.GreaterThanOp)


elementwise(o.MinimumOp, arith.MinimumfOp, (arith.MinSIOp, arith.MinUIOp))
@vjp(o.MinimumOp)
def vjp_minimum(e: OpBuilder, op: o.MinimumOp, douts: Douts) -> Grads:
    return _extremum(e, op, douts[0], o.LessThanOp)


elementwise(o.PowOp, math.PowFOp, (math.IPowIOp, math.IPowIOp))
@vjp(o.PowOp)
def vjp_pow(e: OpBuilder, op: o.PowOp, douts: Douts) -> Grads:
    # out = a ** b: da = d * b * a ** (b - 1), db = d * out * log(a). At a base of 0 these
    # are 0 * inf or log(0) = -inf; PyTorch masks exactly those cases (da = 0 where b == 0,
    # db = 0 where a == 0 and b >= 0), so a NaN never enters and spreads upstream.
    (d,) = douts
    a, b = op.lhs, op.rhs
    zero, b_zero = e.full(0.0, d), e.full(0.0, b)
    bm1 = e.sub(b, e.full(1.0, b))
    da = e.mul(d, e.mul(b, e.value(o.PowOp(a, bm1))))
    da = e.select(e.value(o.EqualOp(b, b_zero)), zero, da)
    db = e.mul(d, e.mul(result_of(op), e.value(o.LogOp(a))))
    at_b_nonneg = e.select(e.value(o.GreaterThanOp(b, b_zero)), zero,
                           e.select(e.value(o.EqualOp(b, b_zero)), zero, db))  # b NaN: not masked
    db = e.select(e.value(o.EqualOp(a, e.full(0.0, a))), at_b_nonneg, db)
    return e.unbroadcast(da, a), e.unbroadcast(db, b)


# ---------------------------------------------------------------------------
# Elementwise unaries
# ---------------------------------------------------------------------------


elementwise(o.NegOp, arith.NegfOp, onnx="Neg", since=1)
@vjp(o.NegOp)
def vjp_neg(e: OpBuilder, op: o.NegOp, douts: Douts) -> Grads:
    return (e.neg(douts[0]),)


elementwise(o.ExpOp, math.ExpOp, onnx="Exp", since=1)
@vjp(o.ExpOp)
def vjp_exp(e: OpBuilder, op: o.ExpOp, douts: Douts) -> Grads:
    return (e.mul(douts[0], result_of(op)),)


elementwise(o.LogOp, math.LogOp, onnx="Log", since=1)
@vjp(o.LogOp)
def vjp_log(e: OpBuilder, op: o.LogOp, douts: Douts) -> Grads:
    return (e.div(douts[0], op.x),)


def logistic_slope(e: OpBuilder, v: SSAValue) -> SSAValue:
    """sigmoid'(v) = u / (1 + u)^2, u = e^-|v|, from v: as accurate as exp, where s (1 - s) from
    the output s loses every digit that 1 - s cancels (s near 1: sigmoid(17) rounds to 1)."""
    u = e.value(o.ExpOp(e.neg(e.value(o.AbsOp(v)))))
    one_plus_u = e.add(e.full(1.0, u), u)
    return e.div(u, e.mul(one_plus_u, one_plus_u))


elementwise(o.TanhOp, math.TanhOp, onnx="Tanh", since=1)
@vjp(o.TanhOp)
def vjp_tanh(e: OpBuilder, op: o.TanhOp, douts: Douts) -> Grads:
    # 1 - tanh(x)^2 = 4 sigmoid'(2x), from x: 1 - t*t from the output t turns t's last-ulp
    # rounding near +-1 into a large relative error (x = 5: 1e-3; past 9, 0 for ~1e-8)
    return (e.mul(douts[0], e.scale(logistic_slope(e, e.scale(op.x, 2.0)), 4.0)),)


elementwise(o.ErfOp, math.ErfOp, onnx="Erf", since=9)
@vjp(o.ErfOp)
def vjp_erf(e: OpBuilder, op: o.ErfOp, douts: Douts) -> Grads:
    # d erf(x) = 2 / sqrt(pi) * exp(-x^2)
    x = op.x
    g = e.scale(e.value(o.ExpOp(e.neg(e.mul(x, x)))), 2.0 / pymath.sqrt(pymath.pi))
    return (e.mul(douts[0], g),)


elementwise(o.FloorOp, math.FloorOp, onnx="Floor", since=1)
elementwise(o.CeilOp, math.CeilOp, onnx="Ceil", since=1)
elementwise(o.RoundOp, math.RoundEvenOp, onnx="Round", since=11)
@vjp(o.FloorOp, o.CeilOp, o.RoundOp)
def vjp_step(e: OpBuilder, op: o.FloorOp | o.CeilOp | o.RoundOp, douts: Douts) -> Grads:
    # piecewise constant: zero almost everywhere (as torch and JAX define it)
    return (e.full(0.0, op.x),)


def _times(e: OpBuilder, douts: Douts, g: SSAValue) -> Grads:
    return (e.mul(douts[0], g),)


def _rsqrt_of(e: OpBuilder, v: SSAValue) -> SSAValue:
    return e.value(o.RsqrtOp(v))


elementwise(o.SinOp, math.SinOp, onnx="Sin", since=7)
@vjp(o.SinOp)
def vjp_sin(e: OpBuilder, op: o.SinOp, douts: Douts) -> Grads:
    return _times(e, douts, e.value(o.CosOp(op.x)))


elementwise(o.CosOp, math.CosOp, onnx="Cos", since=7)
@vjp(o.CosOp)
def vjp_cos(e: OpBuilder, op: o.CosOp, douts: Douts) -> Grads:
    return _times(e, douts, e.neg(e.value(o.SinOp(op.x))))


elementwise(o.TanOp, math.TanOp, onnx="Tan", since=7)
@vjp(o.TanOp)
def vjp_tan(e: OpBuilder, op: o.TanOp, douts: Douts) -> Grads:  # 1 + tan^2
    t = result_of(op)
    return _times(e, douts, e.add(e.full(1.0, t), e.mul(t, t)))


elementwise(o.AsinOp, math.AsinOp, onnx="Asin", since=7)
@vjp(o.AsinOp)
def vjp_asin(e: OpBuilder, op: o.AsinOp, douts: Douts) -> Grads:  # 1 / sqrt(1 - x^2)
    x = op.x
    return _times(e, douts, _rsqrt_of(e, e.sub(e.full(1.0, x), e.mul(x, x))))


elementwise(o.AcosOp, math.AcosOp, onnx="Acos", since=7)
@vjp(o.AcosOp)
def vjp_acos(e: OpBuilder, op: o.AcosOp, douts: Douts) -> Grads:  # -1 / sqrt(1 - x^2)
    x = op.x
    return _times(e, douts, e.neg(_rsqrt_of(e, e.sub(e.full(1.0, x), e.mul(x, x)))))


elementwise(o.AtanOp, math.AtanOp, onnx="Atan", since=7)
@vjp(o.AtanOp)
def vjp_atan(e: OpBuilder, op: o.AtanOp, douts: Douts) -> Grads:  # 1 / (1 + x^2)
    x = op.x
    return (e.div(douts[0], e.add(e.full(1.0, x), e.mul(x, x))),)


elementwise(o.SinhOp, math.SinhOp, onnx="Sinh", since=9)
@vjp(o.SinhOp)
def vjp_sinh(e: OpBuilder, op: o.SinhOp, douts: Douts) -> Grads:
    return _times(e, douts, e.value(o.CoshOp(op.x)))


elementwise(o.CoshOp, math.CoshOp, onnx="Cosh", since=9)
@vjp(o.CoshOp)
def vjp_cosh(e: OpBuilder, op: o.CoshOp, douts: Douts) -> Grads:
    return _times(e, douts, e.value(o.SinhOp(op.x)))


elementwise(o.AsinhOp, math.AsinhOp, onnx="Asinh", since=9)
@vjp(o.AsinhOp)
def vjp_asinh(e: OpBuilder, op: o.AsinhOp, douts: Douts) -> Grads:  # 1 / sqrt(x^2 + 1)
    x = op.x
    return _times(e, douts, _rsqrt_of(e, e.add(e.mul(x, x), e.full(1.0, x))))


elementwise(o.AcoshOp, math.AcoshOp, onnx="Acosh", since=9)
@vjp(o.AcoshOp)
def vjp_acosh(e: OpBuilder, op: o.AcoshOp, douts: Douts) -> Grads:  # 1 / sqrt(x^2 - 1)
    x = op.x
    return _times(e, douts, _rsqrt_of(e, e.sub(e.mul(x, x), e.full(1.0, x))))


elementwise(o.AtanhOp, math.AtanhOp, onnx="Atanh", since=9)
@vjp(o.AtanhOp)
def vjp_atanh(e: OpBuilder, op: o.AtanhOp, douts: Douts) -> Grads:  # 1 / (1 - x^2)
    x = op.x
    return (e.div(douts[0], e.sub(e.full(1.0, x), e.mul(x, x))),)


elementwise(o.Log1pOp, math.Log1pOp)  # ONNX has no Log1p
@vjp(o.Log1pOp)
def vjp_log1p(e: OpBuilder, op: o.Log1pOp, douts: Douts) -> Grads:  # 1 / (1 + x)
    x = op.x
    return (e.div(douts[0], e.add(e.full(1.0, x), x)),)


elementwise(o.SqrtOp, math.SqrtOp, onnx="Sqrt", since=1)
@vjp(o.SqrtOp)
def vjp_sqrt(e: OpBuilder, op: o.SqrtOp, douts: Douts) -> Grads:
    # d sqrt(x) = 0.5 / sqrt(x)
    return (e.div(e.scale(douts[0], 0.5), result_of(op)),)


elementwise(o.RsqrtOp, math.RsqrtOp)
@vjp(o.RsqrtOp)
def vjp_rsqrt(e: OpBuilder, op: o.RsqrtOp, douts: Douts) -> Grads:
    # d x^(-1/2) = -0.5 * x^(-3/2) = -0.5 * out^3
    r = result_of(op)
    return (e.mul(e.scale(douts[0], -0.5), e.mul(r, e.mul(r, r))),)


elementwise(o.AbsOp, math.AbsFOp, onnx="Abs", since=1)
@vjp(o.AbsOp)
def vjp_abs(e: OpBuilder, op: o.AbsOp, douts: Douts) -> Grads:
    # sign(x) * d, and 0 at x == 0 (PyTorch's choice)
    (d,) = douts
    x = op.x
    zero = e.full(0.0, x)
    pos, negative = e.value(o.GreaterThanOp(x, zero)), e.value(o.LessThanOp(x, zero))
    return (e.select(pos, d, e.select(negative, e.neg(d), e.full(0.0, d))),)


elementwise(o.ReluOp, onnx="Relu", since=1)
@vjp(o.ReluOp)
def vjp_relu(e: OpBuilder, op: o.ReluOp, douts: Douts) -> Grads:
    (d,) = douts
    if o.is_float(element_of(op.x)):
        return (e.value(o.ReluGradOp(op.x, d)),)
    positive = e.value(o.GreaterThanOp(op.x, e.full(0.0, op.x)))
    return (e.select(positive, d, e.full(0.0, d)),)


elementwise(o.GeluOp)
@vjp(o.GeluOp)
def vjp_gelu(e: OpBuilder, op: o.GeluOp, douts: Douts) -> Grads:
    return (e.value(o.GeluGradOp(op.x, douts[0], approximate=o.flag(op.approximate))),)


elementwise(o.SigmoidOp, onnx="Sigmoid", since=1)
@vjp(o.SigmoidOp)
def vjp_sigmoid(e: OpBuilder, op: o.SigmoidOp, douts: Douts) -> Grads:
    return (e.mul(douts[0], logistic_slope(e, op.x)),)


# ---------------------------------------------------------------------------
# Integer-only ops and compares: no gradient flows through them
# ---------------------------------------------------------------------------

elementwise(o.BitwiseAndOp, int_ops=(arith.AndIOp, arith.AndIOp))
elementwise(o.BitwiseOrOp, int_ops=(arith.OrIOp, arith.OrIOp))
elementwise(o.BitwiseXorOp, int_ops=(arith.XOrIOp, arith.XOrIOp))
# out-of-range shifts get C's undefined cases pinned (c_expressions.py): 0, or the sign fill
elementwise(o.ShiftLeftOp, int_ops=(arith.ShLIOp, arith.ShLIOp))
elementwise(o.ShiftRightOp, int_ops=(arith.ShRSIOp, arith.ShRUIOp))
elementwise(o.BitwiseNotOp)  # x ^ -1 (opc/lowering/scalars.py)
elementwise(o.GreaterThanOp, predicates=("ogt", "sgt", "ugt"), onnx="Greater", since=7)
elementwise(o.LessThanOp, predicates=("olt", "slt", "ult"), onnx="Less", since=7)
elementwise(o.EqualOp, predicates=("oeq", "eq", "eq"), onnx="Equal", since=7)
not_differentiable(o.BitwiseAndOp, o.BitwiseOrOp, o.BitwiseXorOp, o.BitwiseNotOp, o.ShiftLeftOp, o.ShiftRightOp,
                   o.GreaterThanOp, o.LessThanOp, o.EqualOp)


# ---------------------------------------------------------------------------
# select
# ---------------------------------------------------------------------------

@vjp(o.SelectOp)
def vjp_select(e: OpBuilder, op: o.SelectOp, douts: Douts) -> Grads:
    (d,) = douts
    zero = e.full(0.0, d)
    return None, e.unbroadcast(e.select(op.cond, d, zero), op.lhs), e.unbroadcast(e.select(op.cond, zero, d), op.rhs)
