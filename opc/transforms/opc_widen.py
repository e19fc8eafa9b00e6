"""opc-widen: ops on the low-precision types compute in a wider type (SPEC.md: Types).

float8 and float4 values go up to f32, int4/int2 to i8 and uint4/uint2 to ui8, the op runs there,
and its low-precision results come back by `opc.cast` (round to nearest even, as f16 and bf16
round on store; integers wrap, as NumPy's astype):

    %r = opc.add %a, %b : (tensor<4xf8E4M3FN>, tensor<4xf8E4M3FN>) -> tensor<4xf8E4M3FN>
 => %a32 = opc.cast %a {dtype = f32}     %b32 = opc.cast %b {dtype = f32}
    %r32 = opc.add %a32, %b32 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %r = opc.cast %r32 {dtype = f8E4M3FN}

so a MatMul of float8 inputs is an f32 GEMM, and no kernel, reduction or device file ever sees
a type narrower than a byte's worth of arithmetic. What stays: casts (the one place the types
are converted, by runtime/opc_lowp.h), bitcasts, function arguments and results, and the values
that control flow carries through.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerType, ModuleOp, Signedness, TensorType, f32
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from opc.dialects import opc as o


def wide_element(t: Attribute) -> Attribute:
    """The type a low-precision element type computes in (others: themselves)."""
    if isinstance(t, o.NARROW_FLOAT_TYPES):
        return f32
    if isinstance(t, IntegerType) and t.width.data in o.SUB_BYTE_WIDTHS:
        return IntegerType(8, Signedness.UNSIGNED if t.signedness.data == Signedness.UNSIGNED else Signedness.SIGNLESS)
    return t


def narrow_tensor(t: Attribute) -> bool:
    return isinstance(t, TensorType) and o.is_narrow(t.element_type)


def widened(t: Attribute) -> Attribute:
    if isinstance(t, TensorType) and o.is_narrow(t.element_type):
        return TensorType(wide_element(t.element_type), t.get_shape())
    return t


KEPT = (o.CastOp, o.BitcastOp)  # they convert or reinterpret the types themselves


class WidenPattern(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: o.OpcOp, rewriter: PatternRewriter) -> None:
        if isinstance(op, KEPT) or op.regions:
            return
        if not any(narrow_tensor(v.type) for v in (*op.operands, *op.results)):
            return
        new_ops: list[Operation] = []
        operands: list[SSAValue] = []
        for v in op.operands:
            if narrow_tensor(v.type):
                cast = o.CastOp(v, wide_element(o.element_of(v)))
                new_ops.append(cast)
                v = cast.result
            operands.append(v)
        props = {k: wide_element(a) if o.is_narrow(a) else a for k, a in op.properties.items()}
        wide = type(op).create(operands=operands, result_types=[widened(r.type) for r in op.results],
                               properties=props, attributes=dict(op.attributes))
        new_ops.append(wide)
        results: list[SSAValue] = []
        for old, new in zip(op.results, wide.results, strict=True):
            if narrow_tensor(old.type):
                back = o.CastOp(new, o.element_of(old))
                new_ops.append(back)
                new = back.result
            results.append(new)
        rewriter.replace(op, new_ops, results)


def widen(module: ModuleOp) -> None:
    PatternRewriteWalker(WidenPattern(), apply_recursively=False).rewrite_module(module)


@dataclass(frozen=True)
class WidenPass(ModulePass):
    name = "opc-widen"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        widen(op)
