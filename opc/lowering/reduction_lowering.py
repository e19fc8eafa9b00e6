"""Reductions: sum, max, min, mean over any axes, read in memory order where the innermost axis is
kept, with blocked partial sums for floats and `omp simd` reduction clauses.

A part of FunctionLowering (opc_lower_to_loops.py), which mixes it in: `self` is the
function being lowered (its emitter `self.e`, buffers, the kernel plan)."""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Sequence
from typing import cast

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import (
    AnyFloat,
    ArrayAttr,
    IntegerType,
    StringAttr,
    f32,
)
from xdsl.ir import Attribute, SSAValue

from opc.dialects import opc
from opc.dialects.kinds import element_of, numel, shape_of
from opc.dialects.opc import int_width
from opc.dialects.opc_loops import CheckIndexOp
from opc.lowering.lowering_state import Accumulator, LoweringState
from opc.lowering.scalars import (
    compute_type,
    is_half,
    is_unsigned,
    scalar_type,
)
from opc.symbolic import Sym

SIMD_ATTR = "opc.simd_reduction"
"""On an scf.for: the `omp simd reduction` operator of each carried value (+, max, min, |)."""


def column_block(columns: int) -> int | None:
    """Columns per thread's piece of a reduction over leading axes: a width that divides the
    last axis into at least two pieces, else None (the reduction stays one loop nest)."""
    return next((b for b in (64, 32, 16) if columns % b == 0 and columns // b >= 2), None)


class ReductionLowering(LoweringState):
    def lower_reduce(self, op: opc.ReduceOp) -> None:
        self.reduce_into(self.buffer_for(op.result), element_of(op.result), shape_of(op.x), op.axes_list(),
                         opc.flag(op.keepdim), self.REDUCE_KINDS[type(op)], lambda idx: self.value_at(op.x, idx))

    def reduce_into(self, out: SSAValue, elem: Attribute, in_shape: Sequence[int], axes: Sequence[int],
                    keepdim: bool, kind: str, load: Callable[[list[SSAValue]], SSAValue]) -> None:
        """out = sum, max, min or mean of load(idx) over `axes`, accumulated in the compute type.

        When the innermost input axis is kept (a column sum, say), the CPU walks
        the input in memory order, accumulating into whole output rows, so the
        inner loop is contiguous and vectorizes; otherwise, and on GPUs (one
        warp per output), each output accumulates its own scalar.
        """
        e = self.e
        count = numel([in_shape[a] for a in axes])
        combine = lambda acc, x: self.combine(kind, elem, acc, x)  # noqa: E731
        identity = lambda: self.identity(kind, elem)  # noqa: E731

        def finish(acc: SSAValue) -> SSAValue:  # mean: the sum times 1/count, in the compute type
            return self.finish_mean(kind, acc, count)

        def out_index(in_idx: Sequence[SSAValue]) -> list[SSAValue]:
            if keepdim:
                return [e.index(0) if d in axes else i for d, i in enumerate(in_idx)]
            return [i for d, i in enumerate(in_idx) if d not in axes]

        out_shape = [1 if d in axes else n for d, n in enumerate(in_shape)] if keepdim else \
            [n for d, n in enumerate(in_shape) if d not in axes]
        if self.memory_order_reductions and axes and len(in_shape) - 1 not in axes:
            self.reduce_in_memory_order(out, elem, in_shape, axes, out_shape, out_index, identity, combine, load,
                                        finish if kind == "mean" else None)
            return

        def body(out_idx: list[SSAValue]) -> None:
            kept = iter(out_idx)
            base: list[SSAValue | None] = []
            for d in range(len(in_shape)):
                if d in axes:
                    base.append(None)
                    if keepdim:
                        next(kept)
                else:
                    base.append(next(kept))
            state = self.accumulator(kind, elem)

            def loops(remaining: list[int], idx: list, accs: list[SSAValue]) -> list[SSAValue]:
                if not remaining:  # no axis reduced: the element itself
                    return state.step(accs, load(idx))
                axis, rest = remaining[0], remaining[1:]

                def step(iv: SSAValue, inner: list[SSAValue]) -> list[SSAValue]:
                    sub = list(idx)
                    sub[axis] = iv
                    return loops(rest, sub, inner) if rest else state.step(inner, load(sub))

                return self.reduction_loop(in_shape[axis], accs, step, state.clauses if not rest else None)

            result = state.result(loops(list(axes), base, state.inits))
            e.store(e.to_storage(finish(result), elem), out, out_idx)

        e.parallel(out_shape, body)

    def reduce_in_memory_order(self, out, elem, in_shape, axes, out_shape, out_index, identity, combine, load,
                               finish: Callable[[SSAValue], SSAValue] | None = None) -> None:
        """acc = identity; for idx in input order: acc[out(idx)] = combine(...); out = round(acc).
        The kept axes before the first reduced one run in parallel."""
        e = self.e
        if is_half(elem):  # accumulate in f32, round once at the end (`?` dims sized at run time)
            acc = self.alloc(out_shape, f32)
            acc.name_hint = "acc"
            self.allocs.append(acc)
        else:
            acc = out
        e.parallel(out_shape, lambda idx: e.store(identity(), acc, idx))
        first = min(axes)

        def loops(d: int, idx: list[SSAValue]) -> None:
            if d == len(in_shape):
                o = out_index(idx)
                e.store(combine(e.load(acc, o), load(idx)), acc, o)
                return
            e.for_loop(in_shape[d], [], lambda iv, _: (loops(d + 1, [*idx, iv]), [])[1])

        block = column_block(in_shape[-1]) if first == 0 else None
        if block is not None:  # a leading axis reduced (a bias gradient): the threads take column blocks
            self.reduce_by_column_blocks(in_shape, axes, block, lambda idx: loops(len(in_shape), idx))
        else:
            e.parallel(in_shape[:first], lambda outer: loops(first, list(outer)))
        if acc is not out or finish is not None:  # halves round once; a mean scales once
            done = finish or (lambda v: v)
            e.parallel(out_shape, lambda idx: e.store(e.to_storage(done(e.load(acc, idx)), elem), out, idx))

    def reduce_by_column_blocks(self, in_shape: Sequence[int], axes: Sequence[int], block: int,
                                update: Callable[[list[SSAValue]], None]) -> None:
        """update(idx) for every input index, the threads taking (kept outer index, block of
        `block` columns of the last axis): inside, the reduced axes in order, then the block's
        columns. Each output sees its terms in the order one thread would add them (the same
        bits at any thread count), the block's columns a unit-stride loop that vectorizes."""
        e = self.e
        last = len(in_shape) - 1
        kept = [d for d in range(last) if d not in axes]

        def body(outer: list[SSAValue]) -> None:
            at = dict(zip(kept, outer))
            base = e.value(arith.MuliOp(outer[-1], e.index(block)))

            def nest(rest: list[int]) -> None:
                if rest:
                    def reduced(iv: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                        at[rest[0]] = iv
                        nest(rest[1:])
                        return []

                    e.for_loop(in_shape[rest[0]], [], reduced)
                    return

                def column(jj: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                    update([*(at[d] for d in range(last)), e.value(arith.AddiOp(base, jj))])
                    return []

                e.for_loop(block, [], column)

            nest(list(axes))

        e.parallel([*(in_shape[d] for d in kept), in_shape[-1] // block], body)

    def combine(self, kind: str, elem: Attribute, acc: SSAValue, x: SSAValue) -> SSAValue:
        """acc (+|max|min) x in the compute type; float max/min propagate NaN."""
        e = self.e
        acc_t = compute_type(scalar_type(elem))
        x = e.to_compute(x)
        is_sum = kind in ("sum", "mean")
        if opc.is_float(acc_t):
            pick = arith.MaximumfOp if kind == "max" else arith.MinimumfOp
            return e.value((arith.AddfOp if is_sum else pick)(acc, x))
        if is_sum:
            return e.value(arith.AddiOp(acc, x))
        signed, unsigned = (arith.MaxSIOp, arith.MaxUIOp) if kind == "max" else (arith.MinSIOp, arith.MinUIOp)
        return e.value((unsigned if is_unsigned(elem) else signed)(acc, x))

    def identity(self, kind: str, elem: Attribute) -> SSAValue:
        e = self.e
        acc_t = compute_type(scalar_type(elem))
        if kind in ("sum", "mean"):
            return e.const(0.0 if opc.is_float(acc_t) else 0, acc_t)
        sign = -1 if kind == "max" else 1
        if opc.is_float(acc_t):
            return e.const(sign * pymath.inf, acc_t)
        width = int_width(acc_t)
        if is_unsigned(elem):
            return e.const(0 if kind == "max" else (1 << width) - 1, acc_t)
        return e.const(-(1 << (width - 1)) if kind == "max" else (1 << (width - 1)) - 1, acc_t)

    def finish_mean(self, kind: str, acc: SSAValue, count: int | Sym) -> SSAValue:
        if kind != "mean":
            return acc
        if isinstance(count, Sym):  # a run-time count: divided by at run time (0: NaN, as NumPy)
            n = self.e.value(arith.IndexCastOp(self.e.index(count), IntegerType(64)))
            return self.e.value(arith.DivfOp(acc, self.e.value(arith.SIToFPOp(n, cast(AnyFloat, acc.type)))))
        return self.e.value(arith.MulfOp(acc, self.e.const(1.0 / count if count else pymath.nan, acc.type)))

    def accumulator(self, kind: str, elem: Attribute) -> Accumulator:
        """How one reduction runs in a loop. On the CPU, float reductions vectorize
        (`omp simd reduction`: partial accumulators, a reassociated sum); max/min
        keep a NaN flag of their own, so the running max is a plain compare that
        vectorizes and a NaN anywhere still makes the result NaN."""
        e = self.e
        acc_t = compute_type(scalar_type(elem))
        if not (self.simd and opc.is_float(acc_t)):
            return Accumulator([self.identity(kind, elem)], None,
                               lambda accs, x: [self.combine(kind, elem, accs[0], x)], lambda accs: accs[0])
        if kind in ("sum", "mean"):
            return Accumulator([self.identity(kind, elem)], ["+"],
                               lambda accs, x: [e.value(arith.AddfOp(accs[0], e.to_compute(x)))], lambda accs: accs[0])
        flag_t = IntegerType(1)

        def step(accs: list[SSAValue], x: SSAValue) -> list[SSAValue]:
            x = e.to_compute(x)
            better = e.value(arith.CmpfOp(x, accs[0], "ogt" if kind == "max" else "olt"))
            is_nan = e.value(arith.CmpfOp(x, x, "une"))
            return [e.value(arith.SelectOp(better, x, accs[0])), e.value(arith.OrIOp(accs[1], is_nan))]

        def result(accs: list[SSAValue]) -> SSAValue:
            return e.value(arith.SelectOp(accs[1], e.const(pymath.nan, acc_t), accs[0]))

        return Accumulator([self.identity(kind, elem), e.const(0, flag_t)], [kind, "|"], step, result)

    def reduction_loop(self, extent: int, inits: list[SSAValue],
                       step: Callable[[SSAValue, list[SSAValue]], list[SSAValue]],
                       clauses: list[str] | None) -> list[SSAValue]:
        """scf.for carrying `inits`; with clauses, marked for the C emitter's `omp simd reduction`."""
        results = self.e.for_loop(extent, inits, step)
        if clauses and results:
            loop = results[0].owner
            assert isinstance(loop, scf.ForOp)
            # a run-time check writes the status record from any iteration: no simd lanes then
            if not any(isinstance(o, CheckIndexOp) for o in loop.walk()):
                loop.attributes[SIMD_ATTR] = ArrayAttr([StringAttr(c) for c in clauses])
        return results
