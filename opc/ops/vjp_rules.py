"""Vector-Jacobian product rules: one small function per differentiable op.

A rule gets an `OpBuilder` (which builds opc ops with their Python
constructors), the forward op, and one cotangent per result of the op
(`None` where a result has none: a zero cotangent). It returns one gradient
per operand, or `None` for an operand that gets no gradient (the condition of
a select, say). Broadcasting operands get their gradient summed back to their
own shape by `OpBuilder.unbroadcast`.

Each rule registers itself for its op class (`@vjp(o.ConvOp)`); the registry
(opc/ops/registry.py) builds its vjp column from those. A grad op with an invoke or
composite rule needs no rule: the autodiff differentiates it through that rule. The
elementwise ops' rules are in opc/ops/elementwise.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

from xdsl.dialects import arith, tensor
from xdsl.dialects.builtin import AnyFloat, DenseIntOrFPElementsAttr, IndexType, IntegerAttr, TensorType, i64
from xdsl.ir import BlockArgument, Operation, SSAValue

from opc.dialects import opc as o
from opc.dialects import slices
from opc.dialects.builder import OpBuilder, narrow, wide
from opc.dialects.kinds import element_of, shape_of
from opc.errors import UnsupportedError
from opc.ops.registration import THROUGH_RULE, not_differentiable, takes_missing, through_rule, vjp

Douts = Sequence[SSAValue]
"""A rule's cotangents, one per result; an unused result's is zeros (None only in a rule marked
takes_missing: MaybeDouts)."""
MaybeDouts = Sequence[SSAValue | None]
Grads = Sequence[SSAValue | None]
"""A rule's gradients, one per operand; None: none flows to it."""



def result_of(op: Operation) -> SSAValue:
    return op.results[0]


# ---------------------------------------------------------------------------
# Types and shapes
# ---------------------------------------------------------------------------

# bitcast reinterprets bits (a small change of x is no small change of its bits); full is a constant
not_differentiable(o.BitcastOp, o.FullOp, o.IotaOp)  # iota: a constant of its length, no operand to reach
# nonzero's result is positions (integers): a gather at them carries the gradient (gather's vjp)
not_differentiable(o.NonzeroOp)
# unique's values move as a whole with x, but which element lands where changes with its values: opc gives none
not_differentiable(o.UniqueOp)
# non_max_suppression's result is positions (integers)
not_differentiable(o.NonMaxSuppressionOp)
# cast passes gradients through every dtype, ints included, as Paddle does (cast_grad = cast(dout,
# x.dtype)): f64 -> ui8 -> f64 has gradient 1; so does cast_grad, through its invoke rule
through_rule(o.CastGradOp, any_dtype=True)


@vjp(o.CastOp, any_dtype=True)
def vjp_cast(e: OpBuilder, op: o.CastOp, douts: Douts) -> Grads:
    # Paddle's backward.yaml: cast_grad, realised by invoking cast(dout, x.dtype).
    return (e.value(o.CastGradOp(op.x, douts[0])),)


@vjp(o.BroadcastToOp)
def vjp_broadcast_to(e: OpBuilder, op: o.BroadcastToOp, douts: Douts) -> Grads:
    return (e.unbroadcast(douts[0], op.x),)


@vjp(o.ReshapeOp, any_dtype=True)
def vjp_reshape(e: OpBuilder, op: o.ReshapeOp, douts: Douts) -> Grads:
    return (e.reshape_like(douts[0], op.x),)


@vjp(o.TransposeOp, any_dtype=True)
def vjp_transpose(e: OpBuilder, op: o.TransposeOp, douts: Douts) -> Grads:
    perm = op.perm_list()
    inverse = [perm.index(i) for i in range(len(perm))]
    return (e.value(o.TransposeOp(douts[0], inverse)),)


def _keepdim(e: OpBuilder, op: o.ReduceOp, v: SSAValue) -> SSAValue:
    """A reduced value reshaped to the keepdim shape, so that it broadcasts against x."""
    if o.flag(op.keepdim):
        return v
    x = op.x.type
    shape = o.reduced_shape(shape_of(x), op.axes_list(), True)
    return e.value(o.ReshapeOp(v, o.tensor(shape, element_of(v))))


@vjp(o.ReduceSumOp)
def vjp_reduce_sum(e: OpBuilder, op: o.ReduceSumOp, douts: Douts) -> Grads:
    return (e.broadcast_like(_keepdim(e, op, douts[0]), op.x),)


@vjp(o.ReduceMaxOp)
def vjp_reduce_max(e: OpBuilder, op: o.ReduceMaxOp, douts: Douts) -> Grads:
    # The gradient goes to the maxima, split evenly between ties (like torch.amax).
    x = op.x
    hit = e.cast(e.value(o.EqualOp(x, _keepdim(e, op, result_of(op)))), element_of(x))
    count = e.reduce_sum(hit, op.axes_list(), keepdim=True)
    share = e.div(_keepdim(e, op, douts[0]), count)
    return (e.mul(hit, share),)


@vjp(o.ReduceMinOp)
def vjp_reduce_min(e: OpBuilder, op: o.ReduceMinOp, douts: Douts) -> Grads:
    # The gradient goes to the minima, split evenly between ties, as for reduce_max.
    return vjp_reduce_max(e, op, douts)


@vjp(o.ReduceMeanOp)
def vjp_reduce_mean(e: OpBuilder, op: o.ReduceMeanOp, douts: Douts) -> Grads:
    count = e.count(op.x, op.axes_list())
    spread = e.broadcast_like(_keepdim(e, op, douts[0]), op.x)
    if isinstance(count, SSAValue):  # a run-time count: no elements, no gradient to divide
        return (e.div(spread, count),)
    return (e.scale(spread, 1.0 / count if count else 0.0),)


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


@vjp(o.MatmulOp)
def vjp_matmul(e: OpBuilder, op: o.MatmulOp, douts: Douts) -> Grads:
    """matmul_grads, each summed back over the batch dims its operand was broadcast along.

    [B.., M, K] @ [K, N] (a Linear layer) folds the batch into the rows instead,
    so that dY is one GEMM rather than a batch of them and a reduction."""
    x, y, d = op.x, op.y, douts[0]
    tx, ty = o.flag(op.trans_x), o.flag(op.trans_y)
    xs, ys = shape_of(x), shape_of(y)
    if len(ys) == 2 and len(xs) > 2 and not tx:
        rows = math.prod(xs[:-1]) if o.DYNAMIC not in xs[:-1] else o.DYNAMIC
        x2 = e.value(o.ReshapeOp(x, o.tensor([rows, xs[-1]], element_of(x))))
        d2 = e.value(o.ReshapeOp(d, o.tensor([rows, shape_of(d)[-1]], element_of(d))))
        dx2, dy = matmul_grads(e, x2, y, d2, False, ty)
        return e.reshape_like(dx2, x), dy
    dx, dy = matmul_grads(e, x, y, d, tx, ty)
    return e.unbroadcast(dx, x), e.unbroadcast(dy, y)


def epilogue_activation_grad(e: OpBuilder, act: str, z: SSAValue, d: SSAValue) -> SSAValue:
    """d through a fused epilogue's activation at the pre-activation z. relu6 as the vjps of its
    maximum and minimum give it: d inside (0, 6), half of it at 0 and at 6 (a tie splits evenly
    between the operands), 0 outside and at a NaN."""
    if act == "relu":
        return e.value(o.ReluGradOp(z, d))
    if act != "relu6":
        return e.value(o.GeluGradOp(z, d, approximate=True))
    zero, six, half, none = e.full(0.0, z), e.full(6.0, z), e.scale(d, 0.5), e.full(0.0, d)
    below_six = e.select(e.value(o.LessThanOp(z, six)), d, e.select(e.value(o.EqualOp(z, six)), half, none))
    return e.select(e.value(o.GreaterThanOp(z, zero)), below_six, e.select(e.value(o.EqualOp(z, zero)), half, none))


@takes_missing  # None for an unused result's cotangent (see below)
@vjp(o.FusedGemmEpilogueOp)
def vjp_fused_gemm_epilogue(e: OpBuilder, op: o.FusedGemmEpilogueOp, douts: MaybeDouts) -> Grads:
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
        assert dout is not None  # both cotangents missing: the autodiff skips the op
        if act == "none":
            grad = o.FusedGemmEpilogueGradOp(op.x, op.y, None, dout, tx, ty, "none")
        else:
            grad = o.FusedGemmEpilogueGradOp(op.x, op.y, reserve, dout, tx, ty, f"{act}_grad")
    else:
        assert reserve is not None
        dz = dreserve
        if dout is not None:
            dz = e.add(epilogue_activation_grad(e, act, reserve, dout), dreserve)
        grad = o.FusedGemmEpilogueGradOp(op.x, op.y, None, dz, tx, ty, "none")
    e.emit(grad)
    return tuple(grad.results)



# ---------------------------------------------------------------------------
# Index maps
# ---------------------------------------------------------------------------


def type_carrier(e: OpBuilder, v: SSAValue) -> SSAValue:
    """For a grad op operand needed only for its type: v itself if it is an argument, else zeros of its
    type, so that the backward never has to compute the forward op that produced v."""
    return v if isinstance(v, BlockArgument) else e.full(0.0, v)


@vjp(o.SliceOp)
def vjp_slice(e: OpBuilder, op: o.SliceOp, douts: Douts) -> Grads:
    return (e.value(o.SliceGradOp(type_carrier(e, op.x), douts[0], *op.slice_params())),)


@vjp(o.ConcatOp)
def vjp_concat(e: OpBuilder, op: o.ConcatOp, douts: Douts) -> Grads:
    """Each operand's gradient is its slab of dout along the axis."""
    (d,) = douts
    axis = op.axis_index()
    shape = list(shape_of(d))
    if shape[axis] == o.DYNAMIC:  # offsets known at run time
        return concat_slabs(e, op, d, axis)
    grads, offset = [], 0
    for v in op.inputs:
        width = shape_of(v)[axis]
        start = [offset if i == axis else 0 for i in range(len(shape))]
        limit = [offset + width if i == axis else n for i, n in enumerate(shape)]
        grads.append(e.value(o.SliceOp(d, start, limit)))
        offset += width
    return grads


@vjp(tensor.ExtractSliceOp)
def vjp_extract_slice(e: OpBuilder, op: tensor.ExtractSliceOp, douts: Douts) -> Grads:
    """dsource = dout placed into zeros at the same offsets (an insert_slice); none for the offsets."""
    p = slices.params(op)
    placed = e.value(slices.insert_slice(douts[0], e.full(0.0, op.source), p.offsets, p.sizes, p.strides))
    return placed, *([None] * (len(op.operands) - 1))


@vjp(tensor.InsertSliceOp)
def vjp_insert_slice(e: OpBuilder, op: tensor.InsertSliceOp, douts: Douts) -> Grads:
    """dsource = dout's slot (an extract_slice); ddest = dout with that slot zeroed."""
    p = slices.params(op)
    (d,) = douts
    slot = e.value(slices.extract_slice(d, p.offsets, p.sizes, p.strides, slices.sliced_type(op)))
    cleared = e.value(slices.insert_slice(e.full(0.0, op.source), d, p.offsets, p.sizes, p.strides))
    return slot, cleared, *([None] * (len(op.operands) - 2))


def concat_slabs(e: OpBuilder, op: o.ConcatOp, d: SSAValue, axis: int) -> list[SSAValue]:
    """With run-time sizes: each operand's slab of dout as a tensor.extract_slice, its offset along
    the axis the sum of the widths before it (tensor.dim where a width is `?`)."""
    grads: list[SSAValue] = []
    offset: int | SSAValue = 0
    for v in op.inputs:
        shape = shape_of(v)
        sizes: list[int | SSAValue] = [e.dim(v, i) if n == o.DYNAMIC else n for i, n in enumerate(shape)]
        offsets: list[int | SSAValue] = [offset if i == axis else 0 for i in range(len(shape))]
        grads.append(e.value(slices.extract_slice(d, offsets, sizes, [1] * len(shape), cast(TensorType, v.type))))
        width = sizes[axis]
        if isinstance(offset, int) and isinstance(width, int):
            offset += width
        else:
            a, b = (x if isinstance(x, SSAValue) else e.value(arith.ConstantOp(IntegerAttr(x, IndexType())))
                    for x in (offset, width))
            offset = e.value(arith.AddiOp(a, b))
    return grads


@vjp(o.GatherOp)
def vjp_gather(e: OpBuilder, op: o.GatherOp, douts: Douts) -> Grads:
    return e.value(o.GatherGradOp(type_carrier(e, op.x), op.indices, douts[0], op.axis.value.data)), None


@vjp(o.TopkOp)
def vjp_topk(e: OpBuilder, op: o.TopkOp, douts: Douts) -> Grads:
    """dout scattered back at the picked indices along the axis.

    dx[.., j, ..] sums dout[.., r, ..] over the picks r with indices[.., r, ..] == j: the indices compared
    with an iota along a new dim of the axis size, dout selected there, summed over the picks (the
    indices get no cotangent: they are positions)."""
    shape, axis = list(shape_of(op.x)), op.axis_index()
    n = shape[axis]
    if n == o.DYNAMIC:
        raise UnsupportedError(f"the gradient of {op.name} along a run-time dim (axis {axis}) needs an iota of "
                               "run-time length, which opc has not yet")

    def spread(v: SSAValue) -> SSAValue:  # [.., k, ..] -> [.., k, 1, ..]
        dims = list(o.shaped_type(v).get_shape())
        return e.value(o.ReshapeOp(v, o.tensor([*dims[:axis + 1], 1, *dims[axis + 1:]], element_of(v)), e.dims(v)))

    iota_shape = [1] * (len(shape) + 1)
    iota_shape[axis + 1] = n
    iota = e.value(arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(
        TensorType(i64, iota_shape), list(range(n)))))
    hit = e.value(o.EqualOp(spread(op.indices), iota))
    zero_t = cast("TensorType[AnyFloat]", TensorType(element_of(op.x), []))  # the values' float type
    zero = e.value(arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(zero_t, [0.0])))
    return e.reduce_sum(e.select(hit, spread(douts[0]), zero), [axis]), None


@vjp(o.CumsumOp)
def vjp_cumsum(e: OpBuilder, op: o.CumsumOp, douts: Douts) -> Grads:
    """dx is the cumsum of dout the other way (reverse flipped), exclusive as the forward.

    out[j] sums x[i] over i <= j (i < j exclusive; >= / > reversed), so dx[i] sums dout[j] over
    j >= i (j > i exclusive)."""
    return (e.value(o.CumsumOp(douts[0], op.axis.value.data, o.flag(op.exclusive), not o.flag(op.reverse))),)


@vjp(o.SliceGradOp)
def vjp_slice_grad(e: OpBuilder, op: o.SliceGradOp, douts: Douts) -> Grads:
    """dx = dout placed into zeros: d(dout) = the slice of ddx; x lends only its shape."""
    return None, e.value(o.SliceOp(douts[0], *op.slice_params()))


@vjp(o.GatherGradOp)
def vjp_gather_grad(e: OpBuilder, op: o.GatherGradOp, douts: Douts) -> Grads:
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


@vjp(o.SoftmaxOp)
def vjp_softmax(e: OpBuilder, op: o.SoftmaxOp, douts: Douts) -> Grads:
    return (e.value(o.SoftmaxGradOp(result_of(op), douts[0], op.axis.value.data)),)


@vjp(o.LogSoftmaxOp)
def vjp_log_softmax(e: OpBuilder, op: o.LogSoftmaxOp, douts: Douts) -> Grads:
    return (e.value(o.LogSoftmaxGradOp(result_of(op), douts[0], op.axis.value.data)),)


@vjp(o.LayerNormOp)
def vjp_layer_norm(e: OpBuilder, op: o.LayerNormOp, douts: Douts) -> Grads:
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
    shape = shape_of(x)
    stats_t = element_of(op.mean)
    keep = o.tensor([*shape[:begin], *[1] * (len(shape) - begin)], stats_t)
    if o.DYNAMIC in shape[begin:]:  # the one vjp here that needs its normalized size at compile time
        raise UnsupportedError("layer_norm's mean or rstd used downstream, with `?` normalized dims")
    count = math.prod(shape[begin:])
    xw = x if element_of(x) == stats_t else e.cast(x, stats_t)
    extra = None
    if not is_zero(dmean):
        extra = e.scale(e.broadcast_like(e.value(o.ReshapeOp(dmean, keep)), xw), 1.0 / count)
    if not is_zero(drstd):
        r = e.value(o.ReshapeOp(op.rstd, keep))
        centred = e.sub(xw, e.value(o.ReshapeOp(op.mean, keep)))
        slope = e.scale(e.mul(e.mul(r, e.mul(r, r)), e.value(o.ReshapeOp(drstd, keep))), -1.0 / count)
        term = e.mul(centred, slope)
        extra = term if extra is None else e.add(extra, term)
    assert extra is not None
    return e.add(dx, narrow(e, extra, x)), dscale, dbias


@vjp(o.SoftmaxCrossEntropyOp)
def vjp_softmax_cross_entropy(e: OpBuilder, op: o.SoftmaxCrossEntropyOp, douts: Douts) -> Grads:
    """dlogits = softmax_cross_entropy_grad(label, softmax, dloss), plus softmax_grad
    where the saved softmax is used downstream; the integer label gets none."""
    dloss, dsoftmax = douts
    axis = op.axis.value.data
    parts = []
    if not is_zero(dloss):
        parts.append(e.value(o.SoftmaxCrossEntropyGradOp(op.label, op.softmax, dloss, axis)))
    if not is_zero(dsoftmax):
        parts.append(e.value(o.SoftmaxGradOp(op.softmax, dsoftmax, axis)))
    if not parts:
        return e.full(0.0, op.logits), None
    return (parts[0] if len(parts) == 1 else e.add(parts[0], parts[1])), None


# ---------------------------------------------------------------------------
# Convolutions
# ---------------------------------------------------------------------------


@vjp(o.ConvOp)
def vjp_conv(e: OpBuilder, op: o.ConvOp, douts: Douts) -> Grads:
    """dx = conv_grad_input(dout, w), dw = conv_grad_filter(x, dout), with the conv's attributes."""
    (d,) = douts
    props = o.conv_grad_ops(op)
    return (e.value(o.ConvGradInputOp(d, op.rhs, op.lhs.type, props)),
            e.value(o.ConvGradFilterOp(op.lhs, d, op.rhs.type, props)))


@vjp(o.ConvTransposeOp)
def vjp_conv_transpose(e: OpBuilder, op: o.ConvTransposeOp, douts: Douts) -> Grads:
    """conv_transpose is the input gradient of the conv from y to x: dx = conv(dout, w), and
    dw = conv_grad_filter of that conv, with dout as its input and x as its output gradient."""
    (d,) = douts
    props = o.conv_grad_ops(op)
    return (e.value(o.ConvOp(d, op.rhs, op.lhs.type, props)),
            e.value(o.ConvGradFilterOp(d, op.lhs, op.rhs.type, props)))


@takes_missing  # None for an unused result's cotangent (see below)
@vjp(o.FusedConvEpilogueOp)
def vjp_fused_conv_epilogue(e: OpBuilder, op: o.FusedConvEpilogueOp, douts: MaybeDouts) -> Grads:
    """dz = act_grad(reserve_space, dout) (+ reserve_space's own cotangent), then the conv's grads
    of dz and dbias = dz summed over the batch and spatial dims; channels-last operands transposed
    to channels-first for the conv's grads (dx back to x's order)."""
    act = op.activation.data
    dz = douts[0]
    if dz is not None and act != "none":
        reserve = op.reserve_space
        assert reserve is not None
        dz = epilogue_activation_grad(e, act, reserve, dz)
    dreserve = douts[1] if len(douts) > 1 else None
    if dreserve is not None:
        dz = dreserve if dz is None else e.add(dz, dreserve)
    if dz is None:
        dz = e.full(0.0, op.out)
    props = op.conv_props()
    rank = len(shape_of(op.out))
    to_first, to_last = [0, rank - 1, *range(1, rank - 1)], [0, *range(2, rank), 1]
    if op.out_channels_last is not None:
        dz = e.value(o.TransposeOp(dz, to_first))
    x = op.x if op.x_channels_last is None else e.value(o.TransposeOp(op.x, to_first))
    dx = e.value(o.ConvGradInputOp(dz, op.w, x.type, props))
    return (dx if op.x_channels_last is None else e.value(o.TransposeOp(dx, to_last)),
            e.value(o.ConvGradFilterOp(x, dz, op.w.type, props)),
            e.reduce_sum(dz, [0, *range(2, rank)]))



# any_dtype: a cotangent of the i64 indices (a returned result gets one) must not stop y's from
# flowing; the rule ignores it
@vjp(o.MaxPoolOp, any_dtype=True)
def vjp_max_pool(e: OpBuilder, op: o.MaxPoolOp, douts: Douts) -> Grads:
    """dx = max_pool_grad(x, indices, dy); the indices carry no cotangent."""
    dy = douts[0] if douts[0] is not None else e.full(0.0, op.y)
    return (e.value(o.MaxPoolGradOp(op.x, op.indices, dy, dict(op.properties))),)


@vjp(o.AvgPoolOp)
def vjp_avg_pool(e: OpBuilder, op: o.AvgPoolOp, douts: Douts) -> Grads:
    return (e.value(o.AvgPoolGradOp(op.x, douts[0], dict(op.properties))),)


@vjp(o.MaxPoolGradOp)
def vjp_max_pool_grad(e: OpBuilder, op: o.MaxPoolGradOp, douts: Douts) -> Grads:
    """max_pool_grad is linear in dout: its adjoint gathers ddx at the indices."""
    (d,) = douts
    return None, None, e.value(o.GatherOp(e.flatten(d), op.indices, 0))


@vjp(o.AvgPoolGradOp)
def vjp_avg_pool_grad(e: OpBuilder, op: o.AvgPoolGradOp, douts: Douts) -> Grads:
    """avg_pool_grad is avg_pool's adjoint: its own adjoint is avg_pool."""
    (d,) = douts
    return None, e.value(o.AvgPoolOp(d, dict(op.properties)))


# no kernels yet: instance_norm / group_norm run as layer_norm over [N * groups, rest] (its kernel)
through_rule(o.InstanceNormOp, o.GroupNormOp)


def per_channel(e: OpBuilder, v: SSAValue, rank: int) -> SSAValue:
    """[C] -> [C, 1, ...] so that it broadcasts along x [N, C, *spatial]."""
    t = v.type
    return e.value(o.ReshapeOp(v, o.tensor([shape_of(t)[0], *[1] * (rank - 2)], element_of(t))))


def channel_axes(x: SSAValue) -> list[int]:
    """N and the spatial dims: every axis of x but the channels."""
    return [0, *range(2, len(shape_of(x)))]


@takes_missing  # None for an unused result's cotangent (see below)
@vjp(o.BatchNormOp)
def vjp_batch_norm(e: OpBuilder, op: o.BatchNormOp, douts: MaybeDouts) -> Grads | str:
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
        assert douts[0] is not None  # inference: y is the only result
        return batch_norm_inference_grads(e, op, douts[0])
    return THROUGH_RULE


def batch_norm_inference_grads(e: OpBuilder, op: o.BatchNormOp, dout: SSAValue) -> Grads:
    """dx = dy * scale * rstd; dbias = sum(dy); dscale = sum(dy * (x - mean)) * rstd;
    dmean = -dbias * scale * rstd; dvar = -1/2 * sum(dy * (x - mean)) * scale * rstd^3."""
    x, dy = wide(e, op.x), wide(e, dout)
    rank, axes = len(shape_of(x)), channel_axes(x)
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



# ---------------------------------------------------------------------------
# Attention (the primitives here are shared with its composite rules)
# ---------------------------------------------------------------------------


def causal_addend(e: OpBuilder, s: SSAValue) -> SSAValue:
    """is_causal as an additive [Lq, Lk] constant: 0 where query i sees key j, -inf elsewhere."""
    t = s.type
    lq, lk = shape_of(t)[-2:]
    if o.DYNAMIC in (lq, lk):
        return run_time_causal_addend(e, s)
    values = [0.0 if o.causal_allowed(i, j) else -math.inf for i in range(lq) for j in range(lk)]
    mask_t = cast("TensorType[AnyFloat]", o.tensor([lq, lk], element_of(t)))  # the scores' float type
    attr = DenseIntOrFPElementsAttr.from_list(mask_t, values)
    return e.value(arith.ConstantOp(attr))


def run_time_causal_addend(e: OpBuilder, s: SSAValue) -> SSAValue:
    """The causal addend at run-time lengths: positions i [Lq, 1] and j [1, Lk] counted by running
    sums of ones, -inf where j > i (o.causal_allowed)."""
    rank, el = len(shape_of(s)), element_of(s)

    def positions(axis: int) -> SSAValue:  # 0, 1, ... along the query (axis 0) or key (axis 1) dim
        n = shape_of(s)[rank - 2 + axis]
        shape = [n, 1] if axis == 0 else [1, n]
        ones = e.value(o.FullOp(1.0, o.tensor(shape, el), [e.dim(s, rank - 2 + axis)] if n == o.DYNAMIC else []))
        return e.value(o.CumsumOp(ones, axis, exclusive=True))

    hidden = e.value(o.GreaterThanOp(positions(1), positions(0)))
    scalar_t = cast("TensorType[AnyFloat]", o.tensor([], el))  # the scores' float type
    minus_inf = e.value(arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(scalar_t, [-math.inf])))
    zero = e.value(arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(scalar_t, [0.0])))
    return e.select(hidden, minus_inf, zero)


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
    return o.tensor([*shape_of(t), 1], element_of(t))


def attention_probs(e: OpBuilder, op: o.AttentionOp | o.AttentionGradOp, lse: SSAValue) -> SSAValue:
    """p = exp(s - lse): the softmax recomputed from the saved logsumexp."""
    return e.value(o.ExpOp(e.sub(attention_scores(e, op), e.value(o.ReshapeOp(lse, row_keep(lse))))))


def attention_score_grad(e: OpBuilder, op: o.AttentionOp | o.AttentionGradOp, p: SSAValue, dout: SSAValue) -> SSAValue:
    """ds = p * (dout v^T - rowsum(dout * out)): the gradient of the scores (and of an additive mask)."""
    dout_w = wide(e, dout)
    dp = e.matmul(dout_w, wide(e, op.v), trans_y=True)
    rank = len(shape_of(dout_w))
    delta = e.reduce_sum(e.mul(dout_w, wide(e, op.out)), [rank - 1], keepdim=True)
    return e.mul(p, e.sub(dp, delta))


@takes_missing  # None for an unused result's cotangent (see below)
@vjp(o.AttentionOp)
def vjp_attention(e: OpBuilder, op: o.AttentionOp, douts: MaybeDouts) -> Grads | str:
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
        el = element_of(op.mask)
        ds = ds if element_of(ds) == el else e.cast(ds, el)
        dmask = e.unbroadcast(ds, op.mask)
    return grad.dq, grad.dk, grad.dv, dmask

