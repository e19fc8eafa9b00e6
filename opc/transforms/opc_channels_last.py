"""`opc-channels-last`: a depthwise conv between two pointwise ones runs on channels-last tensors.

    %h = opc.fused_conv_epilogue %x, %w1, %b1 {...}               (pointwise: 1x1, stride 1, unpadded, one group)
    %d = opc.fused_conv_epilogue %h, %w2, %b2 {group = C, ...}    (depthwise: one channel in and out per group)
    %y = opc.fused_conv_epilogue %d, %w3, %b3 {...}               (pointwise)
  ->
    %h = opc.fused_conv_epilogue %x, %w1, %b1 {..., out_channels_last}
    %d = opc.fused_conv_epilogue %h, %w2, %b2 {..., x_channels_last, out_channels_last}
    %y = opc.fused_conv_epilogue %d, %w3, %b3 {..., x_channels_last}

MobileNet's inverted residual blocks are this chain. In NCHW a 14x14 or 7x7 plane's rows are
narrower than a vector, and the depthwise kernel gathers 16 channels into vectors and scatters them
back around every block; in [N, H, W, C] a position's channels are the vector already, and the
pointwise convs on either side write and read that order through the GEMM's transposed operands,
which its packing handles anyway (runtime/opc_nn_conv_layout.h). The chain's ends stay NCHW, so
nothing else sees a layout: the values in and out are the same.

Rewritten only where it pays and nothing else can see it: f32 (the kernels' dtype), static shapes
but the batch, %h and %d read by the next conv alone (their reserves by nothing), no device kernel
chosen for them, and a depthwise conv whose output rows are narrower than WIDE_ROWS or strided
(wide stride-1 planes run as fast in NCHW by the row kernel).

In opc.compile's pipeline for CPU targets when no grad functions are built (inference), after
opc-fuse made the fused convs.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp, f32
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from opc.dialects import opc as o
from opc.dialects.kinds import element_of, shape_of
from opc.targets.device_kernels import external_symbol

WIDE_ROWS = 16  # output rows of at least this many positions (stride 1) stay NCHW


def static_f32(v: SSAValue) -> bool:
    """f32 with static channels and spatial dims (the batch may be `?`: the kernels take it at run time)."""
    return element_of(v) == f32 and DYNAMIC_INDEX not in shape_of(v)[1:]


def plain_conv(op: object) -> o.FusedConvEpilogueOp | None:
    """op, a fused conv no device kernel was chosen for, whose reserve (if any) nothing reads."""
    if not isinstance(op, o.FusedConvEpilogueOp) or external_symbol(op) is not None:
        return None
    return op if op.reserve_space is None or not op.reserve_space.uses else None


def pointwise(op: o.FusedConvEpilogueOp) -> bool:
    g = op.geometry()
    return (g.group == 1 and all(k == 1 for k in g.kernel) and all(s == 1 for s in g.strides)
            and not any(g.pads))


def depthwise_worth_it(op: o.FusedConvEpilogueOp) -> bool:
    """A depthwise conv whose rows the NCHW kernels cannot fill with vectors, or strided."""
    g = op.geometry()
    return g.group == g.c == g.o and (g.out[-1] < WIDE_ROWS or any(s > 1 for s in g.strides))


def chain_at(dw: o.FusedConvEpilogueOp) -> tuple[o.FusedConvEpilogueOp, o.FusedConvEpilogueOp] | None:
    """(the pointwise conv before dw, the one after) where the three form the chain."""
    if (plain_conv(dw) is None or dw.x_channels_last is not None or dw.out_channels_last is not None
            or not depthwise_worth_it(dw) or not dw.x.has_one_use() or not dw.out.has_one_use()):
        return None
    before, after = plain_conv(dw.x.owner), plain_conv(dw.out.get_user_of_unique_use())
    if before is None or after is None or before.out is not dw.x or after.x is not dw.out:
        return None
    if before.out_channels_last is not None or not (pointwise(before) and pointwise(after)):
        return None
    return (before, after) if static_f32(before.out) and static_f32(dw.out) else None


def relaid(op: o.FusedConvEpilogueOp, x: SSAValue, x_last: bool, out_last: bool) -> o.FusedConvEpilogueOp:
    """op reading x, with the layouts asked (or already) set."""
    new = o.FusedConvEpilogueOp(x, op.w, op.bias, op.conv_props(), op.activation.data,
                                x_channels_last=x_last or op.x_channels_last is not None,
                                out_channels_last=out_last or op.out_channels_last is not None)
    new.attributes.update(op.attributes)
    for old_r, new_r in zip(op.results, new.results):
        new_r.name_hint = old_r.name_hint
    return new


def rewrite_chain(before: o.FusedConvEpilogueOp, dw: o.FusedConvEpilogueOp, after: o.FusedConvEpilogueOp) -> None:
    b = relaid(before, before.x, False, True)
    d = relaid(dw, b.out, True, True)
    a = relaid(after, d.out, True, False)
    Rewriter.insert_op([b, d], InsertPoint.before(after))
    Rewriter.replace_op(after, a)
    Rewriter.erase_op(dw)
    Rewriter.erase_op(before)


@dataclass(frozen=True)
class ChannelsLastPass(ModulePass):
    name = "opc-channels-last"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        del ctx
        # one walk; each chain is found at its depthwise conv when it is rewritten, so a pointwise conv
        # that ended one chain (replaced by then) begins the next as its replacement
        for dw in [d for d in op.walk() if isinstance(d, o.FusedConvEpilogueOp)]:
            if dw.parent is not None and (pair := chain_at(dw)) is not None:
                rewrite_chain(pair[0], dw, pair[1])
