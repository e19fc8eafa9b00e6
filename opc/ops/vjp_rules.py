"""Vector-Jacobian product rules: one small function per differentiable op.

A rule gets an `OpBuilder` (which builds opc ops with their Python
constructors), the forward op, and one cotangent per result of the op
(`None` where a result has none: a zero cotangent). It returns one gradient
per operand, or `None` for an operand that gets no gradient (the condition of
a select, say). Broadcasting operands get their gradient summed back to their
own shape by `OpBuilder.unbroadcast`.

Which op uses which rule is written in the registry (opc/ops/registry.py), not
here: this file only says how. A grad op with an invoke or composite rule needs
no rule here: the autodiff differentiates it through that rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr
from xdsl.ir import BlockArgument, Operation, SSAValue

from opc.dialects import opc as o
from opc.dialects.builder import OpBuilder, narrow, wide

Grads = Sequence[SSAValue | None]

THROUGH_RULE = "through its rule"
"""In the registry's vjp column, and as a rule's answer for one instance: differentiate the op
through its invoke or composite rule (the autodiff expands the rule and differentiates that).
A grad op without a vjp of its own means the same."""


def _result(op: Operation) -> SSAValue:
    return op.results[0]


# ---------------------------------------------------------------------------
# Elementwise binaries
# ---------------------------------------------------------------------------


def vjp_add(e: OpBuilder, op: o.AddOp, douts: Grads) -> Grads:
    (d,) = douts
    return e.unbroadcast(d, op.lhs), e.unbroadcast(d, op.rhs)


def vjp_sub(e: OpBuilder, op: o.SubOp, douts: Grads) -> Grads:
    (d,) = douts
    return e.unbroadcast(d, op.lhs), e.unbroadcast(e.neg(d), op.rhs)


def vjp_mul(e: OpBuilder, op: o.MulOp, douts: Grads) -> Grads:
    (d,) = douts
    return e.unbroadcast(e.mul(d, op.rhs), op.lhs), e.unbroadcast(e.mul(d, op.lhs), op.rhs)


def vjp_div(e: OpBuilder, op: o.DivOp, douts: Grads) -> Grads:
    # out = a / b: da = d / b, db = -d * out / b
    (d,) = douts
    da = e.div(d, op.rhs)
    db = e.neg(e.div(e.mul(d, _result(op)), op.rhs))
    return e.unbroadcast(da, op.lhs), e.unbroadcast(db, op.rhs)


def _extremum(e: OpBuilder, op: o.MaximumOp | o.MinimumOp, d: SSAValue, wins: type[Operation]) -> Grads:
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


def vjp_maximum(e: OpBuilder, op: o.MaximumOp, douts: Grads) -> Grads:
    return _extremum(e, op, douts[0], o.GreaterThanOp)  # type: ignore[arg-type]


def vjp_minimum(e: OpBuilder, op: o.MinimumOp, douts: Grads) -> Grads:
    return _extremum(e, op, douts[0], o.LessThanOp)  # type: ignore[arg-type]


def vjp_pow(e: OpBuilder, op: o.PowOp, douts: Grads) -> Grads:
    # out = a ** b: da = d * b * a ** (b - 1), db = d * out * log(a). At a base of 0 these
    # are 0 * inf or log(0) = -inf; PyTorch masks exactly those cases (da = 0 where b == 0,
    # db = 0 where a == 0 and b >= 0), so a NaN never enters and spreads upstream.
    (d,) = douts
    a, b = op.lhs, op.rhs
    zero, b_zero = e.full(0.0, d), e.full(0.0, b)
    bm1 = e.sub(b, e.full(1.0, b))
    da = e.mul(d, e.mul(b, e.value(o.PowOp(a, bm1))))
    da = e.select(e.value(o.EqualOp(b, b_zero)), zero, da)
    db = e.mul(d, e.mul(_result(op), e.value(o.LogOp(a))))
    at_b_nonneg = e.select(e.value(o.GreaterThanOp(b, b_zero)), zero,
                           e.select(e.value(o.EqualOp(b, b_zero)), zero, db))  # b NaN: not masked
    db = e.select(e.value(o.EqualOp(a, e.full(0.0, a))), at_b_nonneg, db)
    return e.unbroadcast(da, a), e.unbroadcast(db, b)


# ---------------------------------------------------------------------------
# Elementwise unaries
# ---------------------------------------------------------------------------


def vjp_neg(e: OpBuilder, op: o.NegOp, douts: Grads) -> Grads:
    return (e.neg(douts[0]),)


def vjp_exp(e: OpBuilder, op: o.ExpOp, douts: Grads) -> Grads:
    return (e.mul(douts[0], _result(op)),)


def vjp_log(e: OpBuilder, op: o.LogOp, douts: Grads) -> Grads:
    return (e.div(douts[0], op.x),)


def logistic_slope(e: OpBuilder, v: SSAValue) -> SSAValue:
    """sigmoid'(v) = u / (1 + u)^2, u = e^-|v|, from v: as accurate as exp, where s (1 - s) from
    the output s loses every digit that 1 - s cancels (s near 1: sigmoid(17) rounds to 1)."""
    u = e.value(o.ExpOp(e.neg(e.value(o.AbsOp(v)))))
    one_plus_u = e.add(e.full(1.0, u), u)
    return e.div(u, e.mul(one_plus_u, one_plus_u))


def vjp_tanh(e: OpBuilder, op: o.TanhOp, douts: Grads) -> Grads:
    # 1 - tanh(x)^2 = 4 sigmoid'(2x), from x: 1 - t*t from the output t turns t's last-ulp
    # rounding near +-1 into a large relative error (x = 5: 1e-3; past 9, 0 for ~1e-8)
    return (e.mul(douts[0], e.scale(logistic_slope(e, e.scale(op.x, 2.0)), 4.0)),)


def vjp_erf(e: OpBuilder, op: o.ErfOp, douts: Grads) -> Grads:
    # d erf(x) = 2 / sqrt(pi) * exp(-x^2)
    x = op.x
    g = e.scale(e.value(o.ExpOp(e.neg(e.mul(x, x)))), 2.0 / math.sqrt(math.pi))
    return (e.mul(douts[0], g),)


def vjp_step(e: OpBuilder, op: o.FloorOp | o.CeilOp | o.RoundOp, douts: Grads) -> Grads:
    # piecewise constant: zero almost everywhere (as torch and JAX define it)
    return (e.full(0.0, op.x),)


def _times(e: OpBuilder, douts: Grads, g: SSAValue) -> Grads:
    return (e.mul(douts[0], g),)


def _rsqrt_of(e: OpBuilder, v: SSAValue) -> SSAValue:
    return e.value(o.RsqrtOp(v))


def vjp_sin(e: OpBuilder, op: o.SinOp, douts: Grads) -> Grads:
    return _times(e, douts, e.value(o.CosOp(op.x)))


def vjp_cos(e: OpBuilder, op: o.CosOp, douts: Grads) -> Grads:
    return _times(e, douts, e.neg(e.value(o.SinOp(op.x))))


def vjp_tan(e: OpBuilder, op: o.TanOp, douts: Grads) -> Grads:  # 1 + tan^2
    t = _result(op)
    return _times(e, douts, e.add(e.full(1.0, t), e.mul(t, t)))


def vjp_asin(e: OpBuilder, op: o.AsinOp, douts: Grads) -> Grads:  # 1 / sqrt(1 - x^2)
    x = op.x
    return _times(e, douts, _rsqrt_of(e, e.sub(e.full(1.0, x), e.mul(x, x))))


def vjp_acos(e: OpBuilder, op: o.AcosOp, douts: Grads) -> Grads:  # -1 / sqrt(1 - x^2)
    x = op.x
    return _times(e, douts, e.neg(_rsqrt_of(e, e.sub(e.full(1.0, x), e.mul(x, x)))))


def vjp_atan(e: OpBuilder, op: o.AtanOp, douts: Grads) -> Grads:  # 1 / (1 + x^2)
    x = op.x
    return (e.div(douts[0], e.add(e.full(1.0, x), e.mul(x, x))),)


def vjp_sinh(e: OpBuilder, op: o.SinhOp, douts: Grads) -> Grads:
    return _times(e, douts, e.value(o.CoshOp(op.x)))


def vjp_cosh(e: OpBuilder, op: o.CoshOp, douts: Grads) -> Grads:
    return _times(e, douts, e.value(o.SinhOp(op.x)))


def vjp_asinh(e: OpBuilder, op: o.AsinhOp, douts: Grads) -> Grads:  # 1 / sqrt(x^2 + 1)
    x = op.x
    return _times(e, douts, _rsqrt_of(e, e.add(e.mul(x, x), e.full(1.0, x))))


def vjp_acosh(e: OpBuilder, op: o.AcoshOp, douts: Grads) -> Grads:  # 1 / sqrt(x^2 - 1)
    x = op.x
    return _times(e, douts, _rsqrt_of(e, e.sub(e.mul(x, x), e.full(1.0, x))))


def vjp_atanh(e: OpBuilder, op: o.AtanhOp, douts: Grads) -> Grads:  # 1 / (1 - x^2)
    x = op.x
    return (e.div(douts[0], e.sub(e.full(1.0, x), e.mul(x, x))),)


def vjp_sqrt(e: OpBuilder, op: o.SqrtOp, douts: Grads) -> Grads:
    # d sqrt(x) = 0.5 / sqrt(x)
    return (e.div(e.scale(douts[0], 0.5), _result(op)),)


def vjp_rsqrt(e: OpBuilder, op: o.RsqrtOp, douts: Grads) -> Grads:
    # d x^(-1/2) = -0.5 * x^(-3/2) = -0.5 * out^3
    r = _result(op)
    return (e.mul(e.scale(douts[0], -0.5), e.mul(r, e.mul(r, r))),)


def vjp_abs(e: OpBuilder, op: o.AbsOp, douts: Grads) -> Grads:
    # sign(x) * d, and 0 at x == 0 (PyTorch's choice)
    (d,) = douts
    x = op.x
    zero = e.full(0.0, x)
    pos, negative = e.value(o.GreaterThanOp(x, zero)), e.value(o.LessThanOp(x, zero))
    return (e.select(pos, d, e.select(negative, e.neg(d), e.full(0.0, d))),)


def vjp_relu(e: OpBuilder, op: o.ReluOp, douts: Grads) -> Grads:
    (d,) = douts
    if o.is_float(op.x.type.element_type):  # type: ignore[attr-defined]
        return (e.value(o.ReluGradOp(op.x, d)),)
    positive = e.value(o.GreaterThanOp(op.x, e.full(0.0, op.x)))
    return (e.select(positive, d, e.full(0.0, d)),)


def vjp_gelu(e: OpBuilder, op: o.GeluOp, douts: Grads) -> Grads:
    return (e.value(o.GeluGradOp(op.x, douts[0], approximate=o.flag(op.approximate))),)


# ---------------------------------------------------------------------------
# Types and shapes
# ---------------------------------------------------------------------------


def vjp_cast(e: OpBuilder, op: o.CastOp, douts: Grads) -> Grads:
    # Paddle's backward.yaml: cast_grad, realised by invoking cast(dout, x.dtype).
    return (e.value(o.CastGradOp(op.x, douts[0])),)


def vjp_select(e: OpBuilder, op: o.SelectOp, douts: Grads) -> Grads:
    (d,) = douts
    zero = e.full(0.0, d)
    return None, e.unbroadcast(e.select(op.cond, d, zero), op.lhs), e.unbroadcast(e.select(op.cond, zero, d), op.rhs)


def vjp_broadcast_to(e: OpBuilder, op: o.BroadcastToOp, douts: Grads) -> Grads:
    return (e.unbroadcast(douts[0], op.x),)


def vjp_reshape(e: OpBuilder, op: o.ReshapeOp, douts: Grads) -> Grads:
    return (e.value(o.ReshapeOp(douts[0], op.x.type)),)  # type: ignore[arg-type]


def vjp_transpose(e: OpBuilder, op: o.TransposeOp, douts: Grads) -> Grads:
    perm = op.perm_list()
    inverse = [perm.index(i) for i in range(len(perm))]
    return (e.value(o.TransposeOp(douts[0], inverse)),)


def _keepdim(e: OpBuilder, op: o.ReduceOp, v: SSAValue) -> SSAValue:
    """A reduced value reshaped to the keepdim shape, so that it broadcasts against x."""
    if o.flag(op.keepdim):
        return v
    x = op.x.type
    shape = o.reduced_shape(x.get_shape(), op.axes_list(), True)  # type: ignore[attr-defined]
    return e.value(o.ReshapeOp(v, o.tensor(shape, v.type.element_type)))  # type: ignore[attr-defined]


def vjp_reduce_sum(e: OpBuilder, op: o.ReduceSumOp, douts: Grads) -> Grads:
    return (e.value(o.BroadcastToOp(_keepdim(e, op, douts[0]), op.x.type)),)  # type: ignore[arg-type]


def vjp_reduce_max(e: OpBuilder, op: o.ReduceMaxOp, douts: Grads) -> Grads:
    # The gradient goes to the maxima, split evenly between ties (like torch.amax).
    x = op.x
    hit = e.cast(e.value(o.EqualOp(x, _keepdim(e, op, _result(op)))), x.type.element_type)  # type: ignore[attr-defined]
    count = e.reduce_sum(hit, op.axes_list(), keepdim=True)
    share = e.div(_keepdim(e, op, douts[0]), count)
    return (e.mul(hit, share),)


def vjp_reduce_min(e: OpBuilder, op: o.ReduceMinOp, douts: Grads) -> Grads:
    # The gradient goes to the minima, split evenly between ties, as for reduce_max.
    return vjp_reduce_max(e, op, douts)  # type: ignore[arg-type]


def vjp_reduce_mean(e: OpBuilder, op: o.ReduceMeanOp, douts: Grads) -> Grads:
    shape = op.x.type.get_shape()  # type: ignore[attr-defined]
    count = math.prod(shape[a] for a in op.axes_list())
    spread = e.value(o.BroadcastToOp(_keepdim(e, op, douts[0]), op.x.type))  # type: ignore[arg-type]
    return (e.scale(spread, 1.0 / count if count else 0.0),)


def vjp_sigmoid(e: OpBuilder, op: o.SigmoidOp, douts: Grads) -> Grads:
    return (e.mul(douts[0], logistic_slope(e, op.x)),)


def matmul_grads(
    e: OpBuilder, x: SSAValue, y: SSAValue, dz: SSAValue, trans_x: bool, trans_y: bool
) -> tuple[SSAValue, SSAValue]:
    """dX, dY of Z = op_x(X) @ op_y(Y), through matmul's trans flags only (SPEC.md table)."""
    if not trans_x and not trans_y:
        return e.matmul(dz, y, trans_y=True), e.matmul(x, dz, trans_x=True)
    if trans_x and not trans_y:
        return e.matmul(y, dz, trans_y=True), e.matmul(x, dz)
    if not trans_x and trans_y:
        return e.matmul(dz, y), e.matmul(dz, x, trans_x=True)
    return e.matmul(y, dz, True, True), e.matmul(dz, x, True, True)


def vjp_matmul(e: OpBuilder, op: o.MatmulOp, douts: Grads) -> Grads:
    """matmul_grads, each summed back over the batch dims its operand was broadcast along.

    [B.., M, K] @ [K, N] (a Linear layer) folds the batch into the rows instead,
    so that dY is one GEMM rather than a batch of them and a reduction."""
    x, y, d = op.x, op.y, douts[0]
    tx, ty = o.flag(op.trans_x), o.flag(op.trans_y)
    xs, ys = x.type.get_shape(), y.type.get_shape()  # type: ignore[attr-defined]
    if len(ys) == 2 and len(xs) > 2 and not tx:
        rows = math.prod(xs[:-1])
        x2 = e.value(o.ReshapeOp(x, o.tensor([rows, xs[-1]], x.type.element_type)))  # type: ignore[attr-defined]
        d2 = e.value(o.ReshapeOp(d, o.tensor([rows, d.type.get_shape()[-1]], d.type.element_type)))  # type: ignore[attr-defined]
        dx2, dy = matmul_grads(e, x2, y, d2, False, ty)
        return e.value(o.ReshapeOp(dx2, x.type)), dy  # type: ignore[arg-type]
    dx, dy = matmul_grads(e, x, y, d, tx, ty)
    return e.unbroadcast(dx, x), e.unbroadcast(dy, y)


def vjp_fused_gemm_epilogue(e: OpBuilder, op: o.FusedGemmEpilogueOp, douts: Grads) -> Grads:
    """Emits fused_gemm_epilogue_grad fed by reserve_space (the pre-activation Z).

    When reserve_space itself has a cotangent (Z is used downstream), dZ is
    the sum of both paths and the grad op runs with activation_grad none.
    """
    act = op.activation.data
    tx, ty = o.flag(op.trans_x), o.flag(op.trans_y)
    dout = douts[0]
    dreserve = douts[1] if len(douts) > 1 else None
    reserve = op.reserve_space
    if dreserve is None:
        if act == "none":
            grad = o.FusedGemmEpilogueGradOp(op.x, op.y, None, dout, tx, ty, "none")
        else:
            grad = o.FusedGemmEpilogueGradOp(op.x, op.y, reserve, dout, tx, ty, f"{act}_grad")
    else:
        assert reserve is not None
        dz = dreserve
        if dout is not None:
            act_grad = o.ReluGradOp(reserve, dout) if act == "relu" else o.GeluGradOp(reserve, dout, True)
            dz = e.add(e.value(act_grad), dreserve)
        grad = o.FusedGemmEpilogueGradOp(op.x, op.y, None, dz, tx, ty, "none")
    e.emit(grad)
    return tuple(grad.results)


vjp_fused_gemm_epilogue.takes_missing = True  # type: ignore[attr-defined]  # None douts: see above


# ---------------------------------------------------------------------------
# Index maps
# ---------------------------------------------------------------------------


def type_carrier(e: OpBuilder, v: SSAValue) -> SSAValue:
    """For a grad op operand needed only for its type: v itself if it is an argument, else zeros of its
    type, so that the backward never has to compute the forward op that produced v."""
    return v if isinstance(v, BlockArgument) else e.full(0.0, v)


def vjp_slice(e: OpBuilder, op: o.SliceOp, douts: Grads) -> Grads:
    return (e.value(o.SliceGradOp(type_carrier(e, op.x), douts[0], *op.slice_params())),)


def vjp_concat(e: OpBuilder, op: o.ConcatOp, douts: Grads) -> Grads:
    """Each operand's gradient is its slab of dout along the axis."""
    (d,) = douts
    axis = op.axis_index()
    shape = list(d.type.get_shape())  # type: ignore[attr-defined]
    grads, offset = [], 0
    for v in op.inputs:
        width = v.type.get_shape()[axis]  # type: ignore[attr-defined]
        start = [offset if i == axis else 0 for i in range(len(shape))]
        limit = [offset + width if i == axis else n for i, n in enumerate(shape)]
        grads.append(e.value(o.SliceOp(d, start, limit)))
        offset += width
    return grads


def vjp_gather(e: OpBuilder, op: o.GatherOp, douts: Grads) -> Grads:
    return e.value(o.GatherGradOp(type_carrier(e, op.x), op.indices, douts[0], op.axis.value.data)), None


def vjp_slice_grad(e: OpBuilder, op: o.SliceGradOp, douts: Grads) -> Grads:
    """dx = dout placed into zeros: d(dout) = the slice of ddx; x lends only its shape."""
    return None, e.value(o.SliceOp(douts[0], *op.slice_params()))


def vjp_gather_grad(e: OpBuilder, op: o.GatherGradOp, douts: Grads) -> Grads:
    """dx = scatter-add of dout: d(dout) = the gather of ddx at the same indices."""
    return None, None, e.value(o.GatherOp(douts[0], op.indices, op.axis.value.data))


# ---------------------------------------------------------------------------
# Fused normalizations and losses: their grad ops, fed by what the forward saved
# ---------------------------------------------------------------------------


def is_zero(v: SSAValue | None) -> bool:
    """No cotangent, or the zeros the backward fills in for an unused result."""
    if v is None:
        return True
    owner = v.owner
    return isinstance(owner, o.FullOp) and owner.value.value.data == 0.0


def vjp_softmax(e: OpBuilder, op: o.SoftmaxOp, douts: Grads) -> Grads:
    return (e.value(o.SoftmaxGradOp(_result(op), douts[0], op.axis.value.data)),)


def vjp_log_softmax(e: OpBuilder, op: o.LogSoftmaxOp, douts: Grads) -> Grads:
    return (e.value(o.LogSoftmaxGradOp(_result(op), douts[0], op.axis.value.data)),)


def vjp_layer_norm(e: OpBuilder, op: o.LayerNormOp, douts: Grads) -> Grads:
    """layer_norm_grad from the saved mean and rstd; where mean or rstd are used
    downstream, their cotangents add d mean/dx = 1/N and d rstd/dx = -rstd^3 (x - mean) / N."""
    dy, dmean, drstd = douts
    begin = op.begin()
    dy = dy if dy is not None else e.full(0.0, op.y)
    grad = o.LayerNormGradOp(op.x, op.scale, op.mean, op.rstd, dy, op.begin_norm_axis.value.data)
    e.emit(grad)
    dx, dscale, dbias = grad.results
    if is_zero(dmean) and is_zero(drstd):
        return dx, dscale, dbias
    x = op.x
    shape = x.type.get_shape()  # type: ignore[attr-defined]
    stats_t = op.mean.type.element_type  # type: ignore[attr-defined]
    keep = o.tensor([*shape[:begin], *[1] * (len(shape) - begin)], stats_t)
    count = math.prod(shape[begin:])
    xw = x if x.type.element_type == stats_t else e.cast(x, stats_t)  # type: ignore[attr-defined]
    extra = None
    if not is_zero(dmean):
        extra = e.scale(e.value(o.BroadcastToOp(e.value(o.ReshapeOp(dmean, keep)), xw.type)), 1.0 / count)  # type: ignore[arg-type]
    if not is_zero(drstd):
        r = e.value(o.ReshapeOp(op.rstd, keep))
        centred = e.sub(xw, e.value(o.ReshapeOp(op.mean, keep)))
        slope = e.scale(e.mul(e.mul(r, e.mul(r, r)), e.value(o.ReshapeOp(drstd, keep))), -1.0 / count)  # type: ignore[arg-type]
        term = e.mul(centred, slope)
        extra = term if extra is None else e.add(extra, term)
    assert extra is not None
    return e.add(dx, narrow(e, extra, x)), dscale, dbias


def vjp_softmax_cross_entropy(e: OpBuilder, op: o.SoftmaxCrossEntropyOp, douts: Grads) -> Grads:
    """dlogits = softmax_cross_entropy_grad(label, softmax, dloss), plus softmax_grad
    where the saved softmax is used downstream; the integer label gets none."""
    dloss, dsoftmax = douts
    axis = op.axis.value.data
    parts = []
    if not is_zero(dloss):
        parts.append(e.value(o.SoftmaxCrossEntropyGradOp(op.label, op.softmax, dloss, axis)))  # type: ignore[arg-type]
    if not is_zero(dsoftmax):
        parts.append(e.value(o.SoftmaxGradOp(op.softmax, dsoftmax, axis)))  # type: ignore[arg-type]
    if not parts:
        return e.full(0.0, op.logits), None
    return (parts[0] if len(parts) == 1 else e.add(parts[0], parts[1])), None


# ---------------------------------------------------------------------------
# Convolutions
# ---------------------------------------------------------------------------


def vjp_conv(e: OpBuilder, op: o.ConvOp, douts: Grads) -> Grads:
    """dx = conv_grad_input(dout, w), dw = conv_grad_filter(x, dout), with the conv's attributes."""
    (d,) = douts
    props = o.conv_grad_ops(op)
    return (e.value(o.ConvGradInputOp(d, op.rhs, op.lhs.type, props)),
            e.value(o.ConvGradFilterOp(op.lhs, d, op.rhs.type, props)))


def vjp_conv_transpose(e: OpBuilder, op: o.ConvTransposeOp, douts: Grads) -> Grads:
    """conv_transpose is the input gradient of the conv from y to x: dx = conv(dout, w), and
    dw = conv_grad_filter of that conv, with dout as its input and x as its output gradient."""
    (d,) = douts
    props = o.conv_grad_ops(op)
    return (e.value(o.ConvOp(d, op.rhs, op.lhs.type, props)),
            e.value(o.ConvGradFilterOp(d, op.lhs, op.rhs.type, props)))


def vjp_fused_conv_epilogue(e: OpBuilder, op: o.FusedConvEpilogueOp, douts: Grads) -> Grads:
    """dz = act_grad(reserve_space, dout) (+ reserve_space's own cotangent), then the conv's grads
    of dz and dbias = dz summed over the batch and spatial dims."""
    act = op.activation.data
    dz = douts[0]
    if dz is not None and act != "none":
        reserve = op.reserve_space
        assert reserve is not None
        dz = e.value(o.ReluGradOp(reserve, dz) if act == "relu" else o.GeluGradOp(reserve, dz, approximate=True))
    dreserve = douts[1] if len(douts) > 1 else None
    if dreserve is not None:
        dz = dreserve if dz is None else e.add(dz, dreserve)
    if dz is None:
        dz = e.full(0.0, op.out)
    props = op.conv_props()
    rank = len(op.out.type.get_shape())  # type: ignore[attr-defined]
    return (e.value(o.ConvGradInputOp(dz, op.w, op.x.type, props)),
            e.value(o.ConvGradFilterOp(op.x, dz, op.w.type, props)),
            e.reduce_sum(dz, [0, *range(2, rank)]))


vjp_fused_conv_epilogue.takes_missing = True  # type: ignore[attr-defined]  # None douts: see above


def vjp_max_pool(e: OpBuilder, op: o.MaxPoolOp, douts: Grads) -> Grads:
    """dx = max_pool_grad(x, indices, dy); the indices carry no cotangent."""
    dy = douts[0] if douts[0] is not None else e.full(0.0, op.y)
    return (e.value(o.MaxPoolGradOp(op.x, op.indices, dy, dict(op.properties))),)


def vjp_avg_pool(e: OpBuilder, op: o.AvgPoolOp, douts: Grads) -> Grads:
    return (e.value(o.AvgPoolGradOp(op.x, douts[0], dict(op.properties))),)


def vjp_max_pool_grad(e: OpBuilder, op: o.MaxPoolGradOp, douts: Grads) -> Grads:
    """max_pool_grad is linear in dout: its adjoint gathers ddx at the indices."""
    (d,) = douts
    t = d.type
    flat = e.value(o.ReshapeOp(d, o.tensor([math.prod(t.get_shape())], t.element_type)))  # type: ignore[attr-defined]
    return None, None, e.value(o.GatherOp(flat, op.indices, 0))


def vjp_avg_pool_grad(e: OpBuilder, op: o.AvgPoolGradOp, douts: Grads) -> Grads:
    """avg_pool_grad is avg_pool's adjoint: its own adjoint is avg_pool."""
    (d,) = douts
    return None, e.value(o.AvgPoolOp(d, dict(op.properties)))


def per_channel(e: OpBuilder, v: SSAValue, rank: int) -> SSAValue:
    """[C] -> [C, 1, ...] so that it broadcasts along x [N, C, *spatial]."""
    t = v.type
    return e.value(o.ReshapeOp(v, o.tensor([t.get_shape()[0], *[1] * (rank - 2)], t.element_type)))  # type: ignore[attr-defined]


def channel_axes(x: SSAValue) -> list[int]:
    """N and the spatial dims: every axis of x but the channels."""
    return [0, *range(2, len(x.type.get_shape()))]  # type: ignore[attr-defined]


def vjp_batch_norm(e: OpBuilder, op: o.BatchNormOp, douts: Grads) -> Grads:
    """Training, with a cotangent for y only: batch_norm_grad from the saved mean and rstd.
    Inference: y = (x - mean) * rstd * scale + bias with rstd = (var + eps)^-1/2 is affine in x per
    channel, so its vjp is two reductions over N and the spatial dims and [C]-sized arithmetic
    (differentiating the composite rule instead gives four reductions and a dozen broadcasts).
    Otherwise (the statistics used downstream) through the composite rule (THROUGH_RULE asks the
    autodiff to differentiate that instead)."""
    if o.flag(op.training) and all(is_zero(d) for d in douts[1:]) and douts[0] is not None:
        grad = o.BatchNormGradOp(op.x, op.scale, op.stats[2], op.stats[3], douts[0])
        e.emit(grad)
        return grad.dx, grad.dscale, grad.dbias, None, None
    if not o.flag(op.training):
        return batch_norm_inference_grads(e, op, douts[0])
    return THROUGH_RULE


def batch_norm_inference_grads(e: OpBuilder, op: o.BatchNormOp, dout: SSAValue) -> Grads:
    """dx = dy * scale * rstd; dbias = sum(dy); dscale = sum(dy * (x - mean)) * rstd;
    dmean = -dbias * scale * rstd; dvar = -1/2 * sum(dy * (x - mean)) * scale * rstd^3."""
    x, dy = wide(e, op.x), wide(e, dout)
    rank, axes = len(x.type.get_shape()), channel_axes(x)  # type: ignore[attr-defined]
    scale, mean, var = (wide(e, v) for v in (op.scale, op.mean, op.var))
    # rstd as the forward rule computes it ([C, 1, ...]): CSE then keeps one copy
    var_b = per_channel(e, var, rank)
    rstd_b = e.value(o.RsqrtOp(e.add(var_b, e.full(op.epsilon.value.data, var_b))))
    rstd = e.value(o.ReshapeOp(rstd_b, var.type))
    k = e.mul(scale, rstd)
    dx = e.mul(dy, per_channel(e, k, rank))
    dbias = e.reduce_sum(dy, axes)
    s = e.reduce_sum(e.mul(dy, e.sub(x, per_channel(e, mean, rank))), axes)
    dmean = e.neg(e.mul(dbias, k))
    dvar = e.mul(e.mul(s, k), e.mul(rstd, e.scale(rstd, -0.5)))
    return (narrow(e, dx, op.x), narrow(e, e.mul(s, rstd), op.scale), narrow(e, dbias, op.bias),
            narrow(e, dmean, op.mean), narrow(e, dvar, op.var))


vjp_batch_norm.takes_missing = True  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------
# Attention (the primitives here are shared with its composite rules)
# ---------------------------------------------------------------------------


def causal_addend(e: OpBuilder, s: SSAValue) -> SSAValue:
    """is_causal as an additive [Lq, Lk] constant: 0 where query i sees key j, -inf elsewhere."""
    t = s.type
    lq, lk = t.get_shape()[-2:]  # type: ignore[attr-defined]
    values = [0.0 if o.causal_allowed(i, j) else -math.inf for i in range(lq) for j in range(lk)]
    attr = DenseIntOrFPElementsAttr.from_list(o.tensor([lq, lk], t.element_type), values)  # type: ignore[attr-defined]
    return e.value(arith.ConstantOp(attr))


def attention_scores(e: OpBuilder, op: o.AttentionOp | o.AttentionGradOp) -> SSAValue:
    """s = q k^T * scale + mask, -inf where is_causal hides a key: [B..., Lq, Lk] in the compute type."""
    s = e.scale(e.matmul(wide(e, op.q), wide(e, op.k), trans_y=True), op.scale.value.data)
    if op.mask is not None:
        s = e.add(s, wide(e, op.mask))
    if o.flag(op.is_causal):
        s = e.add(s, causal_addend(e, s))
    return s


def row_keep(v: SSAValue) -> o.TensorType:
    """[B..., Lq] as [B..., Lq, 1], to broadcast along the keys."""
    t = v.type
    return o.tensor([*t.get_shape(), 1], t.element_type)  # type: ignore[attr-defined]


def attention_probs(e: OpBuilder, op: o.AttentionOp | o.AttentionGradOp, lse: SSAValue) -> SSAValue:
    """p = exp(s - lse): the softmax recomputed from the saved logsumexp."""
    return e.value(o.ExpOp(e.sub(attention_scores(e, op), e.value(o.ReshapeOp(lse, row_keep(lse))))))


def attention_score_grad(e: OpBuilder, op: o.AttentionOp, p: SSAValue, dout: SSAValue) -> SSAValue:
    """ds = p * (dout v^T - rowsum(dout * out)): the gradient of the scores (and of an additive mask)."""
    dout_w = wide(e, dout)
    dp = e.matmul(dout_w, wide(e, op.v), trans_y=True)
    rank = len(dout_w.type.get_shape())  # type: ignore[attr-defined]
    delta = e.reduce_sum(e.mul(dout_w, wide(e, op.out)), [rank - 1], keepdim=True)
    return e.mul(p, e.sub(dp, delta))


def vjp_attention(e: OpBuilder, op: o.AttentionOp, douts: Grads) -> Grads:
    """attention_grad fed by out and lse; an additive mask's gradient is ds summed back to its shape
    (built from the primitives, and dropped by dce where nothing needs it). Where lse is used
    downstream: through the composite rule."""
    dout, dlse = douts
    if not is_zero(dlse):
        return THROUGH_RULE
    dout = dout if dout is not None else e.full(0.0, op.out)
    grad = o.AttentionGradOp(op.q, op.k, op.v, op.out, op.lse, dout, op.mask, op.scale.value.data,
                             o.flag(op.is_causal))
    e.emit(grad)
    dmask = None
    if op.mask is not None:
        ds = attention_score_grad(e, op, attention_probs(e, op, op.lse), dout)
        el = op.mask.type.element_type  # type: ignore[attr-defined]
        ds = ds if ds.type.element_type == el else e.cast(ds, el)  # type: ignore[attr-defined]
        dmask = e.unbroadcast(ds, op.mask)
    return grad.dq, grad.dk, grad.dv, dmask


vjp_attention.takes_missing = True  # type: ignore[attr-defined]
