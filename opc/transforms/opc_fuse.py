"""`opc-fuse{target=...}`: Paddle's fuse_gemm_epilogue_pass on opc ops.

    %mm = opc.matmul %x, %w              (rank 2; trans flags kept)
    %z  = opc.add %mm, %bias             (bias [N]: broadcast along rows; either operand order)
    %h  = opc.relu %z | opc.gelu %z {approximate = true}     (optional)
  ->
    %h, %z = opc.fused_gemm_epilogue %x, %w, %bias {activation = "relu" | "gelu"}

with reserve_space (%z, the pre-activation) saved when an activation is
fused, so the backward (fused_gemm_epilogue_grad) reads it instead of
recomputing the GEMM. An `opc.transpose {perm = [1, 0]}` feeding the matmul
is folded into its trans flag (the transpose stays only if something else
uses it).

Not fused, as in Paddle: a matmul whose result is used elsewhere too (it
would have to be computed twice); a bias that is not [N] (broadcast along
columns, a full [M, N] addend); a matmul that is not rank 2; an add whose
result is used elsewhere keeps its activation apart (matmul + add still
fuse, activation "none"); erf-form gelu (the fused op's gelu is the tanh
form) likewise. Nothing is fused where the target would not run the fused
op by a kernel: a device without one, or whose own kernel
([external.fused_gemm_epilogue]) does not admit the dtype or activation (the
npu example: activation "none" only, so matmul + add fuse and the relu stays).

The same for convolutions (issue 19), on the CPU only:

    %y = opc.conv %x, %w {...}
    %z = opc.add %y, %b            (b [O, 1, ...] or [1, O, 1, ...]: per channel, as the ONNX
                                    importer reshapes a Conv's B)
    %h = opc.relu %z | opc.gelu %z {approximate = true}     (optional; or ONNX's Clip to
         | opc.minimum (opc.maximum %z, 0), 6                   [0, 6]: relu6)
  ->
    %h, %z = opc.fused_conv_epilogue %x, %w, %b' {..., activation = "relu" | "gelu" | "relu6"}

whose f32 stride-1 kernel (runtime/opc_nn_conv_fast.h) adds the bias and applies the
activation as it stores each output tile; other convs run the conv, then one pass.

In the default pipeline of opc.compile / `opc compile` on targets with the
kernel, before opc-grad (off with fuse=False / --no-fuse).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from opc.dialects import opc as o
from opc.dialects.kinds import element_of, shape_of
from opc.ops.elementwise import splat_value
from opc.targets.routing import route_op
from opc.targets.target import Target, get_target

FUSED = "opc.fused_gemm_epilogue"


def fold_transposes(v: SSAValue, trans: bool) -> tuple[SSAValue, bool]:
    """v = transpose(u, [1, 0]) (repeatedly) -> u with the trans flag flipped."""
    while isinstance(v.owner, o.TransposeOp) and v.owner.perm_list() == (1, 0):
        v, trans = v.owner.x, not trans
    return v, trans


def gemm_and_bias(add: o.AddOp) -> tuple[o.MatmulOp, SSAValue] | None:
    """The rank-2 matmul used only by `add` and the [N] bias added to it, if `add` is that; with one row,
    a [1, N] addend is a bias too (a batch-1 recurrent step adds its input's projection so)."""
    for mm_value, bias in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
        mm = mm_value.owner
        if not isinstance(mm, o.MatmulOp) or not mm_value.has_one_use():
            continue
        out, b = mm.result.type, bias.type
        assert isinstance(out, TensorType) and isinstance(b, TensorType)
        rows, shape = out.get_shape(), tuple(b.get_shape())
        if (len(rows) == 2 and (shape == (rows[1],) or (rows[0] == 1 and shape == (1, rows[1])))
                and b.element_type == out.element_type and add.result.type == out):
            return mm, bias
    return None


# An activation to fuse: its ops, first to last (the first the only user of the add), and its name.
Activation = tuple[tuple[Operation, ...], str]


def fused_activation(add: o.AddOp, relu6: bool = False) -> Activation | None:
    """The relu / tanh-form gelu that is the only user of `add`, or with relu6=True (the conv's) also
    ONNX's Clip to [0, 6]: maximum with 0, then minimum with 6, each the only user of the one before."""
    user = add.result.get_user_of_unique_use()
    if isinstance(user, o.ReluOp):
        return (user,), "relu"
    if isinstance(user, o.GeluOp) and o.flag(user.approximate):
        return (user,), "gelu"
    if relu6 and isinstance(user, o.MaximumOp) and bound_of(user, add.result) == 0.0:
        outer = user.result.get_user_of_unique_use()
        if isinstance(outer, o.MinimumOp) and bound_of(outer, user.result) == 6.0:
            return (user, outer), "relu6"
    return None


def bound_of(op: o.MaximumOp | o.MinimumOp, v: SSAValue) -> float | None:
    """The constant that `op` compares v with, where op's result is v's shape and type (a +0.0 or
    other number; -0.0, which max(-0, -0) would keep, is None)."""
    if op.result.type != v.type or v not in (op.lhs, op.rhs):
        return None
    value = splat_value(op.rhs if v is op.lhs else op.lhs)
    return None if value is None or math.copysign(1.0, value) < 0 else value


class FuseGemmEpiloguePattern(RewritePattern):
    """matmul + bias add [+ relu / tanh gelu] -> fused_gemm_epilogue, where the
    target runs that fused op instance by a kernel (its own or a device's);
    else, with the activation apart, the linear part alone where that runs so."""

    def __init__(self, target: Target):
        self.target = target

    def fused(self, x: SSAValue, y: SSAValue, bias: SSAValue, trans_x: bool, trans_y: bool,
              activations: list[str]) -> o.FusedGemmEpilogueOp | None:
        for activation in activations:
            op = o.FusedGemmEpilogueOp(x, y, bias, trans_x, trans_y, activation)
            if route_op(op, self.target) in ("kernel", "external"):
                return op
            op.erase()
        return None

    @op_type_rewrite_pattern
    def match_and_rewrite(self, add: o.AddOp, rewriter: PatternRewriter) -> None:
        found = gemm_and_bias(add)
        if found is None:
            return
        mm, bias = found
        flat = o.ReshapeOp(bias, o.tensor(shape_of(bias)[1:], element_of(bias))) if len(shape_of(bias)) == 2 else None
        x, trans_x = fold_transposes(mm.x, o.flag(mm.trans_x))
        y, trans_y = fold_transposes(mm.y, o.flag(mm.trans_y))
        act = fused_activation(add)
        fused = self.fused(x, y, flat.result if flat else bias, trans_x, trans_y,
                           [act[1], "none"] if act else ["none"])
        if fused is None:
            if flat is not None:
                flat.erase()
            return
        if flat is not None:
            rewriter.insert_op(flat, InsertPoint.before(add))
        replace_epilogue(rewriter, add, act, fused)
        operands = list(mm.operands)
        rewriter.erase(mm)
        erase_dead_transposes(operands, rewriter)


CONV_FUSED = "opc.fused_conv_epilogue"


def conv_and_bias(add: o.AddOp) -> tuple[o.ConvOp, SSAValue] | None:
    """The conv used only by `add` and the per-channel bias added to it ([O, 1, ...] or [1, O, 1, ...],
    as the ONNX importer reshapes a Conv's B), if `add` is that."""
    for conv_value, bias in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
        conv = conv_value.owner
        if not isinstance(conv, o.ConvOp) or not conv_value.has_one_use():
            continue
        out, b = conv.result.type, bias.type
        assert isinstance(out, TensorType) and isinstance(b, TensorType)
        shape, channels = tuple(b.get_shape()), out.get_shape()[1]
        spatial = (1,) * (len(out.get_shape()) - 2)
        if (shape in ((channels, *spatial), (1, channels, *spatial)) and b.element_type == out.element_type
                and add.result.type == out):
            return conv, bias
    return None


class FuseConvEpiloguePattern(RewritePattern):
    """conv + per-channel bias add [+ relu / tanh gelu] -> fused_conv_epilogue, where the target runs
    it by a kernel (the CPU); else, with the activation apart, conv + bias alone where that runs so."""

    def __init__(self, target: Target):
        self.target = target

    @op_type_rewrite_pattern
    def match_and_rewrite(self, add: o.AddOp, rewriter: PatternRewriter) -> None:
        found = conv_and_bias(add)
        if found is None:
            return
        conv, bias = found
        reshaped = bias.owner if isinstance(bias.owner, o.ReshapeOp) else None
        if reshaped is not None and len(shape_of(reshaped.x)) == 1:
            bias = reshaped.x  # the importer's reshape of B, erased below once nothing reads it
        else:
            reshaped = None
            flat = o.ReshapeOp(bias, o.tensor([shape_of(conv.result)[1]], element_of(bias)))
            rewriter.insert_op(flat, InsertPoint.before(add))
            bias = flat.result
        act = fused_activation(add, relu6=True)
        for activation in [act[1], "none"] if act else ["none"]:
            fused = o.FusedConvEpilogueOp(conv.lhs, conv.rhs, bias, dict(conv.properties), activation)
            if route_op(fused, self.target) == "kernel":
                break
            fused.erase()
        else:
            return
        replace_epilogue(rewriter, add, act, fused)
        rewriter.erase(conv)
        if reshaped is not None and not reshaped.result.uses:
            rewriter.erase(reshaped)


def replace_epilogue(rewriter: PatternRewriter, add: o.AddOp, act: Activation | None,
                     fused: o.FusedGemmEpilogueOp | o.FusedConvEpilogueOp) -> None:
    """The bias add (or, with an activation, the activation) replaced by the fused op, whose reserve
    (the pre-activation) takes the add's name; the add goes with it."""
    if fused.reserve_space is None:
        rewriter.replace(add, fused, [fused.out])
        return
    assert act is not None
    fused.reserve_space.name_hint = add.result.name_hint
    rewriter.replace(act[0][-1], fused, [fused.out])
    for op in reversed(act[0][:-1]):  # relu6's maximum, read by nothing now
        rewriter.erase(op)
    rewriter.erase(add)


def erase_dead_transposes(values: list[SSAValue], rewriter: PatternRewriter) -> None:
    """The transposes folded into trans flags, once nothing else reads them."""
    erased: set[Operation] = set()
    for v in values:
        while isinstance(v.owner, o.TransposeOp) and v.owner not in erased and not v.uses:
            t = v.owner
            v = t.x
            erased.add(t)
            rewriter.erase(t)


@dataclass(frozen=True)
class FusePass(ModulePass):
    name = "opc-fuse"

    target: str = "cpu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = get_target(self.target)
        if CONV_FUSED in target.kernels:
            PatternRewriteWalker(FuseConvEpiloguePattern(target), apply_recursively=True).rewrite_module(op)
        if FUSED not in target.kernels and target.external_of(FUSED) is None:
            return
        PatternRewriteWalker(FuseGemmEpiloguePattern(target), apply_recursively=True).rewrite_module(op)
