"""canonicalize: xDSL's canonicalization, plus the folds that make a constant condition or trip count
constant where xDSL's scf patterns look for it.

A condition or bound comes from a tensor (`tensor.extract`, then `arith.index_cast`); xDSL folds
neither when the tensor is a dense constant, so its `scf.if` on a constant condition
(IfPropagateConstantCondition) and its `scf.for` of zero or one trip (SimplifyTrivialLoops) would
never fire on opc's IR. Two patterns fold them into `arith.constant`s first (and SwitchOfConstant
puts an `scf.index_switch` on a constant index's case in its place, which xDSL does not):

    %flag = arith.constant dense<true> : tensor<i1>
    %p = tensor.extract %flag[] : tensor<i1>          ->  %p = arith.constant true
    %n = arith.index_cast %c5 : i64 to index          ->  %n = arith.constant 5 : index
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf, tensor
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, IndexType, IntegerAttr, IntegerType, ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.transforms.canonicalization_patterns.scf import replace_op_with_region
from xdsl.transforms.canonicalization_patterns.utils import const_evaluate_operand
from xdsl.transforms.canonicalize import CanonicalizationRewritePattern
from xdsl.transforms.dead_code_elimination import region_dce


def splat_integer(op: tensor.ExtractOp) -> int | None:
    """The value a one-element integer (or i1) dense constant holds, else None."""
    src = op.tensor.owner
    if not isinstance(src, arith.ConstantOp) or not isinstance(src.value, DenseIntOrFPElementsAttr):
        return None
    if not isinstance(op.result.type, IntegerType):
        return None
    values = src.value.get_values()
    if len(values) != 1 or not isinstance(values[0], int):
        return None
    return values[0]


class ExtractOfConstant(RewritePattern):
    """tensor.extract of a one-element integer constant: the scalar constant."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tensor.ExtractOp, rewriter: PatternRewriter) -> None:
        v = splat_integer(op)
        if v is None:
            return
        t = op.result.type
        assert isinstance(t, IntegerType)
        rewriter.replace_op(op, arith.ConstantOp(IntegerAttr(v, t, truncate_bits=True)))


class IndexCastOfConstant(RewritePattern):
    """arith.index_cast of an integer constant: the constant of the new type."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: arith.IndexCastOp, rewriter: PatternRewriter) -> None:
        src = op.input.owner
        if not isinstance(src, arith.ConstantOp) or not isinstance(src.value, IntegerAttr):
            return
        t = op.result.type
        if not isinstance(t, (IntegerType, IndexType)):
            return
        rewriter.replace_op(op, arith.ConstantOp(IntegerAttr(src.value.value.data, t, truncate_bits=True)))


class SwitchOfConstant(RewritePattern):
    """scf.index_switch on a constant index: the case's region (the default's where no case has it)
    in its place, as xDSL's IfPropagateConstantCondition does for scf.if."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: scf.IndexSwitchOp, rewriter: PatternRewriter) -> None:
        index = const_evaluate_operand(op.arg)
        if index is None:
            return
        cases = list(op.cases.iter_values())
        region = op.case_regions[cases.index(index)] if index in cases else op.default_region
        replace_op_with_region(rewriter, op, region)


@dataclass(frozen=True)
class CanonicalizePass(ModulePass):
    """xDSL's canonicalize (its patterns and folders), with the constant folds above."""

    name = "canonicalize"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pattern = GreedyRewritePatternApplier(
            [ExtractOfConstant(), IndexCastOfConstant(), SwitchOfConstant(), CanonicalizationRewritePattern()], ctx=ctx,
            folding_enabled=True)
        PatternRewriteWalker(pattern, post_walk_func=region_dce).rewrite_module(op)
