"""The invoke and composite rules: one pattern per op, rewriting it into other opc
ops (which may be rewritten further), each registered for its op class where it is
written (`@decomposition(o.ReluOp)`; an invoke rule names the forward call it stands
for, as backward.yaml does). The registry derives its `composite` and `invoke` columns
from these, opc-decompose drives the patterns, and autodiff differentiates a grad op
through its rule (`expand`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import cast

from xdsl.dialects import arith
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, IndexType, IntegerAttr, IntegerType, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.rewriter import InsertPoint

from opc.dialects import opc as o
from opc.dialects.builder import OpBuilder, narrow, wide
from opc.dialects.kinds import element_of, shape_of
from opc.errors import UnsupportedError
from opc.ops.registration import REWRITES, decomposition
from opc.ops.vjp_rules import (
    attention_probs,
    attention_score_grad,
    attention_scores,
    channel_axes,
    matmul_grads,
    per_channel,
)

SQRT_2_OVER_PI, GELU_K = o.GELU_SQRT_2_OVER_PI, o.GELU_K


class RulePattern(RewritePattern):
    """Rewrites one op kind, when `wanted(op)` says so, into what `build` emits.

    `origin` remembers, for every op a rule creates, which op it came from, so
    that an op that cannot run can be traced back to what produced it.
    """

    OP: type[Operation]

    def __init__(self, wanted: Callable[[Operation], bool], origin: dict[Operation, str] | None = None):
        self.wanted = wanted
        self.origin = origin if origin is not None else {}

    def build(self, e: OpBuilder, op) -> Sequence[SSAValue]:  # noqa: ANN001
        raise NotImplementedError

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, self.OP) or not self.wanted(op):
            return
        e = OpBuilder()
        results = list(self.build(e, op))
        source = self.origin.get(op, op.name)
        for new in e.ops:
            self.origin[new] = source
        # Like rewriter.replace, but only the values that take over the op's
        # results inherit its names: the intermediates stay numbered.
        rewriter.insert(e.ops, InsertPoint.before(op))
        rewriter.handle_operation_replacement(op, results)
        for old, new in zip(op.results, results):
            rewriter.replace_all_uses_with(old, new)
            if old.name_hint and not new.name_hint:
                new.name_hint = old.name_hint
        rewriter.erase(op)


# ---------------------------------------------------------------------------
# invoke
# ---------------------------------------------------------------------------


@decomposition(o.CastGradOp, invoke="cast(dout, x.dtype)")
class CastGradInvokePattern(RulePattern):
    """cast_grad(x, dout) -> cast(dout, x.dtype) (backward.yaml: invoke)."""

    OP = o.CastGradOp

    def build(self, e: OpBuilder, op: o.CastGradOp) -> Sequence[SSAValue]:
        return [e.cast(op.dout, element_of(op.x))]


# ---------------------------------------------------------------------------
# composites
# ---------------------------------------------------------------------------


@decomposition(o.FusedGemmEpilogueGradOp)
class FusedGemmEpilogueGradPattern(RulePattern):
    """dZ = dout | relu_grad(Z, dout) | gelu_grad(Z, dout); dX, dY by matmul trans
    flags (SPEC.md table, no explicit transposes); dbias = reduce_sum(dZ, [0])."""

    OP = o.FusedGemmEpilogueGradOp

    def build(self, e: OpBuilder, op: o.FusedGemmEpilogueGradOp) -> Sequence[SSAValue]:
        act, z = op.activation_grad.data, op.reserve_space
        if act in ("relu_grad", "gelu_grad"):
            assert z is not None  # an activation grad reads the pre-activation
            grad = o.ReluGradOp(z, op.dout) if act == "relu_grad" else o.GeluGradOp(z, op.dout, approximate=True)
            dz = e.value(grad)
        else:
            dz = op.dout
        if dz is not op.dout:
            dz.name_hint = "dz"
        dx, dy = matmul_grads(e, op.x, op.y, dz, o.flag(op.trans_x), o.flag(op.trans_y))
        return [dx, dy, e.reduce_sum(dz, [0])]


@decomposition(o.FusedGemmEpilogueOp)
class FusedGemmEpilogueForwardPattern(RulePattern):
    """out = act(matmul(x, y) + bias); reserve_space = the pre-activation."""

    OP = o.FusedGemmEpilogueOp

    def build(self, e: OpBuilder, op: o.FusedGemmEpilogueOp) -> Sequence[SSAValue]:
        z = e.add(e.matmul(op.x, op.y, o.flag(op.trans_x), o.flag(op.trans_y)), op.bias)
        act = op.activation.data
        if act == "none":
            return [z]
        return [epilogue_activation(e, z, act), z]


@decomposition(o.ReluOp)
class ReluPattern(RulePattern):
    """relu(x) -> maximum(x, 0)."""

    OP = o.ReluOp

    def build(self, e: OpBuilder, op: o.ReluOp) -> Sequence[SSAValue]:
        return [e.value(o.MaximumOp(op.x, e.full(0.0, op.x)))]


@decomposition(o.ReluGradOp)
class ReluGradPattern(RulePattern):
    """relu_grad(x, dout) -> select(x > 0, dout, 0)."""

    OP = o.ReluGradOp

    def build(self, e: OpBuilder, op: o.ReluGradOp) -> Sequence[SSAValue]:
        positive = e.value(o.GreaterThanOp(op.x, e.full(0.0, op.x)))
        return [e.select(positive, op.dout, e.full(0.0, op.dout))]


def gelu_tanh_arg(e: OpBuilder, x: SSAValue, x2: SSAValue | None = None) -> SSAValue:
    """sqrt(2/pi) * (x + 0.044715 x^3)."""
    x3 = e.mul(x2 if x2 is not None else e.mul(x, x), x)
    return e.scale(e.add(x, e.scale(x3, GELU_K)), SQRT_2_OVER_PI)


def gelu_tanh_inner(e: OpBuilder, x: SSAValue, x2: SSAValue | None = None) -> SSAValue:
    """tanh(sqrt(2/pi) * (x + 0.044715 x^3))."""
    return e.value(o.TanhOp(gelu_tanh_arg(e, x, x2)))


def sech2(e: OpBuilder, u: SSAValue) -> SSAValue:
    """1 - tanh(u)^2 as 4 w / (1 + w)^2, w = e^-2|u|: as accurate as exp, where 1 - t*t cancels."""
    w = e.value(o.ExpOp(e.scale(e.value(o.AbsOp(u)), -2.0)))
    one_plus_w = e.add(e.full(1.0, w), w)
    return e.scale(e.div(w, e.mul(one_plus_w, one_plus_w)), 4.0)


def gelu_erf_inner(e: OpBuilder, x: SSAValue) -> SSAValue:
    """erf(x / sqrt(2))."""
    return e.value(o.ErfOp(e.scale(x, 1.0 / math.sqrt(2.0))))


@decomposition(o.GeluOp)
class GeluPattern(RulePattern):
    """tanh form 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))), erf form
    0.5 x (1 + erf(x / sqrt 2)); f16/bf16 computed in f32, like the kernel."""

    OP = o.GeluOp

    def build(self, e: OpBuilder, op: o.GeluOp) -> Sequence[SSAValue]:
        x = wide(e, op.x)
        inner = gelu_tanh_inner(e, x) if o.flag(op.approximate) else gelu_erf_inner(e, x)
        out = e.mul(e.scale(x, 0.5), e.add(e.full(1.0, x), inner))
        return [narrow(e, out, op.x)]


@decomposition(o.GeluGradOp)
class GeluGradPattern(RulePattern):
    """dx = dout * gelu'(x):
    tanh form 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), 1 - t^2 from
    tanh's argument (sech2),
    erf form  0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi)."""

    OP = o.GeluGradOp

    def build(self, e: OpBuilder, op: o.GeluGradOp) -> Sequence[SSAValue]:
        x, dout = wide(e, op.x), wide(e, op.dout)
        one = e.full(1.0, x)
        x2 = e.mul(x, x)
        if o.flag(op.approximate):
            u = gelu_tanh_arg(e, x, x2)
            left = e.scale(e.add(one, e.value(o.TanhOp(u))), 0.5)
            slope = e.scale(e.add(one, e.scale(x2, 3.0 * GELU_K)), SQRT_2_OVER_PI)
            right = e.mul(e.mul(e.scale(x, 0.5), sech2(e, u)), slope)
        else:
            left = e.scale(e.add(one, gelu_erf_inner(e, x)), 0.5)
            density = e.scale(e.value(o.ExpOp(e.scale(x2, -0.5))), 1.0 / math.sqrt(2.0 * math.pi))
            right = e.mul(x, density)
        return [narrow(e, e.mul(dout, e.add(left, right)), op.x)]


# ---------------------------------------------------------------------------
# Normalizations and losses (Paddle's prim composites): in the compute type,
# max-subtracted, rounded once at the end like the kernels
# ---------------------------------------------------------------------------


def shifted(e: OpBuilder, x: SSAValue, axis: int) -> SSAValue:
    """x - max(x, axis): exp of it never overflows."""
    return e.sub(x, e.value(o.ReduceMaxOp(x, [axis], keepdim=True)))


def keep_shape(v: SSAValue, axes: Sequence[int], element=None) -> o.TensorType:  # noqa: ANN001
    """v's shape with `axes` set to 1 (what reduce keepdim gives), in v's or the given element type."""
    t = v.type
    shape = [1 if i in axes else n for i, n in enumerate(shape_of(t))]
    return o.tensor(shape, element or element_of(t))


def label_onehot(e: OpBuilder, label: SSAValue, classes: int, axis: int) -> SSAValue:
    """i1 tensor label == iota along `axis` (broadcast to the logits' shape).

    A label outside [0, classes) is made an index that gather refuses, so the
    composite raises the IndexError the kernel does (naming the label argument)."""
    lt = label.type
    el = element_of(lt)
    iota_t = cast("TensorType[IntegerType]", o.tensor([classes], el))  # the label's integer type
    iota = e.value(arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(iota_t, list(range(classes)))))
    negative = e.value(o.LessThanOp(label, e.full(0.0, label)))
    guarded = e.select(negative, e.full(float(classes), label), label)
    checked = e.value(o.GatherOp(iota, guarded, 0))
    rank = len(shape_of(lt))
    along = e.value(o.ReshapeOp(iota, o.tensor([classes if i == axis else 1 for i in range(rank)], el)))
    return e.value(o.EqualOp(checked, along))


@decomposition(o.SoftmaxOp)
class SoftmaxPattern(RulePattern):
    """e = exp(x - max(x)); softmax = e / sum(e)."""

    OP = o.SoftmaxOp

    def build(self, e: OpBuilder, op: o.SoftmaxOp) -> Sequence[SSAValue]:
        axis = op.axis_index()
        ex = e.value(o.ExpOp(shifted(e, wide(e, op.x), axis)))
        return [narrow(e, e.div(ex, e.reduce_sum(ex, [axis], keepdim=True)), op.x)]


@decomposition(o.LogSoftmaxOp)
class LogSoftmaxPattern(RulePattern):
    """z = x - max(x); log_softmax = z - log(sum(exp(z)))."""

    OP = o.LogSoftmaxOp

    def build(self, e: OpBuilder, op: o.LogSoftmaxOp) -> Sequence[SSAValue]:
        axis = op.axis_index()
        z = shifted(e, wide(e, op.x), axis)
        lse = e.value(o.LogOp(e.reduce_sum(e.value(o.ExpOp(z)), [axis], keepdim=True)))
        return [narrow(e, e.sub(z, lse), op.x)]


@decomposition(o.LayerNormOp)
class LayerNormPattern(RulePattern):
    """mean = E[x], var = E[(x - mean)^2], rstd = rsqrt(var + eps) over the trailing dims;
    y = (x - mean) * rstd * scale + bias; mean and rstd reshaped to the leading shape."""

    OP = o.LayerNormOp

    def build(self, e: OpBuilder, op: o.LayerNormOp) -> Sequence[SSAValue]:
        x = wide(e, op.x)
        begin = op.begin()
        axes = list(range(begin, len(shape_of(x))))
        mean = e.value(o.ReduceMeanOp(x, axes, keepdim=True))
        centred = e.sub(x, mean)
        var = e.value(o.ReduceMeanOp(e.mul(centred, centred), axes, keepdim=True))
        rstd = e.value(o.RsqrtOp(e.add(var, e.full(op.epsilon.value.data, var))))
        y = e.add(e.mul(e.mul(centred, rstd), wide(e, op.scale)), wide(e, op.bias))
        lead = op.mean.type
        return [narrow(e, y, op.x), e.value(o.ReshapeOp(mean, lead)), e.value(o.ReshapeOp(rstd, lead))]


@decomposition(o.SoftmaxCrossEntropyOp)
class SoftmaxCrossEntropyPattern(RulePattern):
    """z = x - max(x), s = sum(exp(z)): softmax = exp(z) / s, loss = -(z - log s)[label]."""

    OP = o.SoftmaxCrossEntropyOp

    def build(self, e: OpBuilder, op: o.SoftmaxCrossEntropyOp) -> Sequence[SSAValue]:
        axis = op.axis_index()
        z = shifted(e, wide(e, op.logits), axis)
        ez = e.value(o.ExpOp(z))
        total = e.reduce_sum(ez, [axis], keepdim=True)
        log_softmax = e.sub(z, e.value(o.LogOp(total)))
        classes = shape_of(z)[axis]
        onehot = label_onehot(e, op.label, classes, axis)
        picked = e.reduce_sum(e.select(onehot, log_softmax, e.full(0.0, log_softmax)), [axis], keepdim=True)
        return [narrow(e, e.neg(picked), op.loss), narrow(e, e.div(ez, total), op.softmax)]


@decomposition(o.SoftmaxGradOp)
class SoftmaxGradPattern(RulePattern):
    """dx = out * (dout - sum(dout * out))."""

    OP = o.SoftmaxGradOp

    def build(self, e: OpBuilder, op: o.SoftmaxGradOp) -> Sequence[SSAValue]:
        out, dout = wide(e, op.out), wide(e, op.dout)
        dot = e.reduce_sum(e.mul(dout, out), [op.axis_index()], keepdim=True)
        return [narrow(e, e.mul(out, e.sub(dout, dot)), op.out)]


@decomposition(o.LogSoftmaxGradOp)
class LogSoftmaxGradPattern(RulePattern):
    """dx = dout - exp(out) * sum(dout)."""

    OP = o.LogSoftmaxGradOp

    def build(self, e: OpBuilder, op: o.LogSoftmaxGradOp) -> Sequence[SSAValue]:
        out, dout = wide(e, op.out), wide(e, op.dout)
        total = e.reduce_sum(dout, [op.axis_index()], keepdim=True)
        return [narrow(e, e.sub(dout, e.mul(e.value(o.ExpOp(out)), total)), op.out)]


@decomposition(o.LayerNormGradOp)
class LayerNormGradPattern(RulePattern):
    """xhat = (x - mean) * rstd, g = dy * scale: dx = rstd * (g - E[g] - xhat * E[g * xhat]),
    dscale = sum(dy * xhat), dbias = sum(dy) over the leading dims."""

    OP = o.LayerNormGradOp

    def build(self, e: OpBuilder, op: o.LayerNormGradOp) -> Sequence[SSAValue]:
        x, dy, scale = wide(e, op.x), wide(e, op.dy), wide(e, op.scale)
        begin = op.begin()
        rank = len(shape_of(x))
        axes, lead = list(range(begin, rank)), list(range(begin))
        keep = keep_shape(x, axes)
        mean, rstd = e.value(o.ReshapeOp(op.mean, keep)), e.value(o.ReshapeOp(op.rstd, keep))
        xhat = e.mul(e.sub(x, mean), rstd)
        g = e.mul(dy, scale)
        mean_g = e.value(o.ReduceMeanOp(g, axes, keepdim=True))
        mean_gx = e.value(o.ReduceMeanOp(e.mul(g, xhat), axes, keepdim=True))
        dx = e.mul(rstd, e.sub(e.sub(g, mean_g), e.mul(xhat, mean_gx)))
        dscale = e.reduce_sum(e.mul(dy, xhat), lead)
        dbias = e.reduce_sum(dy, lead)
        return [narrow(e, dx, op.x), narrow(e, dscale, op.scale), narrow(e, dbias, op.scale)]


@decomposition(o.SoftmaxCrossEntropyGradOp)
class SoftmaxCrossEntropyGradPattern(RulePattern):
    """dlogits = (softmax - onehot(label)) * dloss."""

    OP = o.SoftmaxCrossEntropyGradOp

    def build(self, e: OpBuilder, op: o.SoftmaxCrossEntropyGradOp) -> Sequence[SSAValue]:
        axis = op.axis_index()
        sm = wide(e, op.softmax)
        classes = shape_of(sm)[axis]
        onehot = e.cast(label_onehot(e, op.label, classes, axis), element_of(sm))
        return [narrow(e, e.mul(e.sub(sm, onehot), wide(e, op.dloss)), op.softmax)]


# ---------------------------------------------------------------------------
# convolutions
# ---------------------------------------------------------------------------


@decomposition(o.ConvGradInputOp, invoke="conv_transpose(dout, w)")
class ConvGradInputInvokePattern(RulePattern):
    """conv_grad_input(dout, w) -> conv_transpose(dout, w) (backward.yaml: invoke), its
    output_padding the rows of dx that the strided conv never read (x's shape restored)."""

    OP = o.ConvGradInputOp

    def build(self, e: OpBuilder, op: o.ConvGradInputOp) -> Sequence[SSAValue]:
        g = op.geometry()
        full = [(y - 1) * s - g.pads[d] - g.pads[g.spatial + d] + dil * (k - 1) + 1
                for d, (y, s, dil, k) in enumerate(zip(g.out, g.strides, g.dilations, g.kernel))]
        extra = [i - f for i, f in zip(g.inp, full)]
        props = dict(op.properties)
        if any(extra):
            props["output_padding"] = o.i64_array(extra)
        return [e.value(o.ConvTransposeOp(op.lhs, op.rhs, op.result.type, props))]


def conv_patches(e: OpBuilder, x: SSAValue, g: o.ConvGeometry) -> SSAValue:
    """im2col in primitives: x zero-padded (concat with full), then one strided slice per kernel
    offset, stacked to [N, C, kvol, P] (P the output positions)."""
    if o.DYNAMIC in shape_of(x)[1:]:
        raise UnsupportedError("the conv decomposition (im2col in primitives: decompose='all', grad=2 of a conv) "
                               "needs static channels and spatial dims; the conv kernels take run-time ones")
    r, element = g.spatial, element_of(x)
    batch = batch_sizes(e, x, g)  # a run-time batch: its size, read once, for every op's `?` batch dim
    for d in range(r):
        before, after = g.pads[d], g.pads[r + d]
        if before or after:
            shape = list(shape_of(x))
            parts = [x]
            if before:
                parts.insert(0, e.value(o.FullOp(0.0, o.tensor([*shape[:2 + d], before, *shape[3 + d:]], element),
                                                 batch)))
            if after:
                parts.append(e.value(o.FullOp(0.0, o.tensor([*shape[:2 + d], after, *shape[3 + d:]], element),
                                              batch)))
            x = e.value(o.ConcatOp(parts, axis=2 + d))
    positions = math.prod(g.out)
    stacked = []
    for offsets in itertools.product(*(range(k) for k in g.kernel)):
        start = [0, 0, *(k * dil for k, dil in zip(offsets, g.dilations))]
        limit = [g.n, g.c, *(a + (n - 1) * s + 1 for a, n, s in zip(start[2:], g.out, g.strides))]
        piece = e.value(o.SliceOp(x, start, limit, [1, 1, *g.strides]))  # (a `?` batch: sliced whole)
        stacked.append(e.value(o.ReshapeOp(piece, o.tensor([g.n, g.c, 1, positions], element), batch)))
    return stacked[0] if len(stacked) == 1 else e.value(o.ConcatOp(stacked, axis=2))


def batch_sizes(e: OpBuilder, x: SSAValue, g: o.ConvGeometry) -> list[SSAValue]:
    """[x's batch size] where it is a run-time one (the size operand of each op whose result has a
    `?` batch dim), else []."""
    return [e.dim(x, 0)] if g.n == o.DYNAMIC else []


@decomposition(o.ConvOp)
class ConvPattern(RulePattern):
    """y = w [G, Og, Cg * kvol] @ patches [N, G, Cg * kvol, P] (a batched matmul), reshaped."""

    OP = o.ConvOp

    def build(self, e: OpBuilder, op: o.ConvOp) -> Sequence[SSAValue]:
        g = op.geometry()
        x, w = wide(e, op.lhs), wide(e, op.rhs)
        el, ck = element_of(x), g.c // g.group * math.prod(g.kernel)
        batch = batch_sizes(e, x, g)
        cols = e.value(o.ReshapeOp(conv_patches(e, x, g), o.tensor([g.n, g.group, ck, math.prod(g.out)], el), batch))
        wg = e.value(o.ReshapeOp(w, o.tensor([g.group, g.o // g.group, ck], el)))
        y = e.value(o.ReshapeOp(e.matmul(wg, cols), o.tensor(g.y_shape, el), batch))
        return [narrow(e, y, op.result)]


@decomposition(o.FusedConvEpilogueOp)
class FusedConvEpiloguePattern(RulePattern):
    """out = act(conv(x, w) + bias reshaped to [O, 1, ...]); reserve_space = the pre-activation;
    channels-last operands transposed to channels-first and back."""

    OP = o.FusedConvEpilogueOp

    def build(self, e: OpBuilder, op: o.FusedConvEpilogueOp) -> Sequence[SSAValue]:
        rank = len(shape_of(op.out))
        x = op.x
        if op.x_channels_last is not None:
            x = e.value(o.TransposeOp(x, [0, rank - 1, *range(1, rank - 1)]))
        g = op.geometry()
        y = e.value(o.ConvOp(x, op.w, o.tensor(g.y_shape, element_of(op.out)), op.conv_props()))
        bias = e.value(o.ReshapeOp(op.bias, o.tensor([g.y_shape[1]] + [1] * (rank - 2), element_of(op.bias))))
        z = e.add(y, bias)
        act = op.activation.data
        results = [z] if act == "none" else [epilogue_activation(e, z, act), z]
        if op.out_channels_last is not None:
            results = [e.value(o.TransposeOp(r, [0, *range(2, rank), 1])) for r in results]
        return results


def epilogue_activation(e: OpBuilder, z: SSAValue, act: str) -> SSAValue:
    """A fused epilogue's activation of z as the ops it stands for (relu, tanh-form gelu; relu6, the
    conv's only: ONNX's Clip to [0, 6])."""
    if act == "relu":
        return e.value(o.ReluOp(z))
    if act == "relu6":
        return e.value(o.MinimumOp(e.value(o.MaximumOp(z, e.full(0.0, z))), e.full(6.0, z)))
    return e.value(o.GeluOp(z, approximate=True))


@decomposition(o.ConvGradFilterOp)
class ConvGradFilterPattern(RulePattern):
    """dw = dout [G, Og, N * P] @ patches [G, Cg * kvol, N * P]^T per group (transposes bring
    each group's images together), reshaped to w's shape."""

    OP = o.ConvGradFilterOp

    def build(self, e: OpBuilder, op: o.ConvGradFilterOp) -> Sequence[SSAValue]:
        g = op.geometry()
        x, dout = wide(e, op.lhs), wide(e, op.rhs)
        el, ck, p = element_of(x), g.c // g.group * math.prod(g.kernel), math.prod(g.out)

        def by_group(v: SSAValue, rows: int) -> SSAValue:
            """[N, G * rows, ...] -> [G, rows, N * P]"""
            v = e.value(o.ReshapeOp(v, o.tensor([g.n, g.group, rows, p], el), batch))
            v = e.value(o.TransposeOp(v, [1, 2, 0, 3]))
            if not batch:
                return e.value(o.ReshapeOp(v, o.tensor([g.group, rows, g.n * p], el)))
            n_p = e.value(arith.MuliOp(batch[0], e.value(arith.ConstantOp(IntegerAttr(p, IndexType())))))
            return e.value(o.ReshapeOp(v, o.tensor([g.group, rows, o.DYNAMIC], el), [n_p]))

        batch = batch_sizes(e, x, g)

        cols = by_group(conv_patches(e, x, g), ck)
        dw = e.matmul(by_group(dout, g.o // g.group), cols, trans_y=True)
        return [narrow(e, e.value(o.ReshapeOp(dw, o.tensor(g.w_shape, el))), op.result)]


# ---------------------------------------------------------------------------
# batch, instance and group normalization
# ---------------------------------------------------------------------------


@decomposition(o.BatchNormOp)
class BatchNormPattern(RulePattern):
    """inference: (x - mean) * (rsqrt(var + eps) * scale) + bias, the factor per channel (one multiply
    per element fewer: a conv's epilogue after it, MobileNetV2's most run code); training: the batch's
    mean and (biased) variance by reduce_mean, the running statistics blended by momentum."""

    OP = o.BatchNormOp

    def build(self, e: OpBuilder, op: o.BatchNormOp) -> Sequence[SSAValue]:
        x = wide(e, op.x)
        rank, axes = len(shape_of(x)), channel_axes(x)
        scale, bias = (per_channel(e, wide(e, v), rank) for v in (op.scale, op.bias))
        eps = op.epsilon.value.data
        if not o.flag(op.training):
            mean, var = (per_channel(e, wide(e, v), rank) for v in (op.mean, op.var))
            rstd = e.value(o.RsqrtOp(e.add(var, e.full(eps, var))))
            return [narrow(e, e.add(e.mul(e.sub(x, mean), e.mul(rstd, scale)), bias), op.x)]
        bmean = e.value(o.ReduceMeanOp(x, axes, keepdim=True))
        centred = e.sub(x, bmean)
        bvar = e.value(o.ReduceMeanOp(e.mul(centred, centred), axes, keepdim=True))
        rstd = e.value(o.RsqrtOp(e.add(bvar, e.full(eps, bvar))))
        y = e.add(e.mul(e.mul(centred, rstd), scale), bias)
        c = o.tensor([shape_of(x)[1]], element_of(x))
        flat = [e.value(o.ReshapeOp(v, c)) for v in (bmean, bvar, rstd)]
        m = op.momentum.value.data

        def blend(given: SSAValue, batch: SSAValue) -> SSAValue:
            return e.add(e.scale(wide(e, given), m), e.scale(batch, 1.0 - m))

        running = [narrow(e, blend(op.mean, flat[0]), op.mean), narrow(e, blend(op.var, flat[1]), op.var)]
        saved = [narrow(e, flat[0], op.stats[2]), narrow(e, flat[2], op.stats[3])]
        return [narrow(e, y, op.x), *running, *saved]


@decomposition(o.BatchNormGradOp)
class BatchNormGradPattern(RulePattern):
    """xhat = (x - mean) * rstd, g = dy * scale: dx = rstd * (g - E[g] - xhat * E[g * xhat]),
    dscale = sum(dy * xhat), dbias = sum(dy), over N and the spatial dims."""

    OP = o.BatchNormGradOp

    def build(self, e: OpBuilder, op: o.BatchNormGradOp) -> Sequence[SSAValue]:
        x, dy = wide(e, op.x), wide(e, op.dy)
        rank, axes = len(shape_of(x)), channel_axes(x)
        scale, mean, rstd = (per_channel(e, wide(e, v), rank) for v in (op.scale, op.saved_mean, op.saved_rstd))
        xhat = e.mul(e.sub(x, mean), rstd)
        g = e.mul(dy, scale)
        mean_g = e.value(o.ReduceMeanOp(g, axes, keepdim=True))
        mean_gx = e.value(o.ReduceMeanOp(e.mul(g, xhat), axes, keepdim=True))
        dx = e.mul(rstd, e.sub(e.sub(g, mean_g), e.mul(xhat, mean_gx)))
        return [narrow(e, dx, op.x), narrow(e, e.reduce_sum(e.mul(dy, xhat), axes), op.scale),
                narrow(e, e.reduce_sum(dy, axes), op.scale)]


@decomposition(o.InstanceNormOp, o.GroupNormOp)
class GroupedNormPattern(RulePattern):
    """instance_norm / group_norm: x as [N * groups, rest] normalized by layer_norm (unit scale,
    zero bias), back to x's shape, then scale and bias per channel; mean and rstd as [N, groups]."""

    OP = o.GroupedNormOp

    def build(self, e: OpBuilder, op: o.GroupedNormOp) -> Sequence[SSAValue]:
        x = op.x
        shape, el, g = shape_of(x), element_of(x), op.groups()
        rows_t, sizes = grouped_rows(e, x, g)
        rows = e.value(o.ReshapeOp(x, o.tensor(rows_t, el), sizes))
        rest = sizes[-1:] if rows_t[1] == o.DYNAMIC else []  # the unit scale's and zero bias's size
        ones, zeros = (e.value(o.FullOp(v, o.tensor(rows_t[1:], el), rest)) for v in (1.0, 0.0))
        ln = o.LayerNormOp(rows, ones, zeros, 1, op.epsilon.value.data)
        e.emit(ln)
        y = wide(e, e.reshape_like(ln.y, x))
        scale, bias = (per_channel(e, wide(e, v), len(shape)) for v in (op.scale, op.bias))
        batch = [e.dim(x, 0)] if shape[0] == o.DYNAMIC else []  # mean and rstd [N, groups]
        return [narrow(e, e.add(e.mul(y, scale), bias), x), e.value(o.ReshapeOp(ln.mean, op.mean.type, batch)),
                e.value(o.ReshapeOp(ln.rstd, op.rstd.type, batch))]


def grouped_rows(e: OpBuilder, x: SSAValue, groups: int) -> tuple[list[int], list[SSAValue]]:
    """x [N, C, *spatial] as [N * groups, C / groups * spatial]: that shape, and the `index` sizes of
    its `?` dims (a run-time N, channel or spatial dim makes them run-time: N * groups and the rest's
    product over groups, computed from x's dims, not the `?` marker's value)."""
    shape = shape_of(x)

    def size(axes: Sequence[int], times: int, over: int) -> SSAValue:
        n = e.value(arith.ConstantOp(IntegerAttr(times, IndexType())))
        for a in axes:
            n = e.value(arith.MuliOp(n, e.dim(x, a)))
        return e.value(arith.DivUIOp(n, e.value(arith.ConstantOp(IntegerAttr(over, IndexType())))))

    rows_t, sizes = [shape[0] * groups, math.prod(shape[1:]) // groups], []
    if shape[0] == o.DYNAMIC:
        rows_t[0] = o.DYNAMIC
        sizes.append(size([0], groups, 1))
    if o.DYNAMIC in shape[1:]:
        rows_t[1] = o.DYNAMIC
        sizes.append(size(range(1, len(shape)), 1, groups))
    return rows_t, sizes


@decomposition(o.AttentionOp)
class AttentionPattern(RulePattern):
    """s = q k^T * scale + mask (causal: -inf above the diagonal); m = max(s), l = sum(exp(s - m));
    out = (exp(s - m) / l) v, lse = m + log(l): the primitives of the written-out attention."""

    OP = o.AttentionOp

    def build(self, e: OpBuilder, op: o.AttentionOp) -> Sequence[SSAValue]:
        s = attention_scores(e, op)
        last = len(shape_of(s)) - 1
        m = e.value(o.ReduceMaxOp(s, [last], keepdim=True))
        ex = e.value(o.ExpOp(e.sub(s, m)))
        total = e.reduce_sum(ex, [last], keepdim=True)
        out = e.matmul(e.div(ex, total), wide(e, op.v))
        lse = e.value(o.ReshapeOp(e.add(m, e.value(o.LogOp(total))), op.lse.type))
        return [narrow(e, out, op.out), lse]


@decomposition(o.AttentionGradOp)
class AttentionGradPattern(RulePattern):
    """p = exp(s - lse); dv = p^T dout, ds = p * (dout v^T - rowsum(dout * out)),
    dq = ds k * scale, dk = ds^T q * scale."""

    OP = o.AttentionGradOp

    def build(self, e: OpBuilder, op: o.AttentionGradOp) -> Sequence[SSAValue]:
        p = attention_probs(e, op, op.lse)
        ds = attention_score_grad(e, op, p, op.dout)
        c = op.scale.value.data
        dv = e.matmul(p, wide(e, op.dout), trans_x=True)
        dq = e.scale(e.matmul(ds, wide(e, op.k)), c)
        dk = e.scale(e.matmul(ds, wide(e, op.q), trans_x=True), c)
        return [narrow(e, dq, op.q), narrow(e, dk, op.k), narrow(e, dv, op.v)]


def expand(e: OpBuilder, op: Operation) -> Sequence[SSAValue]:
    """The values that op's rule computes for its results, the rule's ops
    emitted into `e` (op itself untouched); autodiff differentiates grad ops so."""
    return REWRITES[type(op)].pattern(lambda _: True).build(e, op)
