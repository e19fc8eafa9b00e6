"""opc-lower-to-loops: functions on tensors become functions on buffers whose
bodies are loop nests of scalar arith/math ops (xDSL's memref/scf/arith/math)
plus `opc_loops.gemm` for the GEMMs.

Each function `@f(inputs) -> results` becomes `@f(inputs..., outputs...)` in
destination-passing style: results are written into caller-owned buffers.

Fusion follows the kernel schedule (opc/transforms/opc_schedule.py): an
elementwise op, broadcast_to, transpose or full is *inlined* into its
consumers' loop nest when they all sit in one nest (a value read twice in a
nest is computed once per element: value_at memoizes); every other value
gets a buffer. So a chain of elementwise ops becomes one `scf.parallel` nest
reading the chain's inputs once and writing its output once, and reductions
read their elementwise producers directly. A row kernel (softmax, layer norm
composed from primitives) becomes one parallel loop over rows with one pass
per reduction level over each row. Float reductions on the CPU carry
`opc.simd_reduction`, which the C emitter turns into `omp simd reduction`.
Evaluation is iterative (an explicit stack), so chains of any length lower.

Scalars travel in their storage type (f16/bf16 included) and ops compute in
f32 for f16/bf16, rounding to nearest even on every op result, which keeps
the numbers of fused and unfused code identical (opc/lowering/scalars.py).
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    ArrayAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    f32,
    f64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from opc.dialects import opc
from opc.dialects.kinds import INLINABLE, REINDEXING_MAPS, element_of, is_splat_constant, numel, shape_of
from opc.dialects.opc_loops import CheckIndexOp, ExternalCallOp, GemmOp
from opc.errors import OpcError
from opc.lowering import nn_lowering as nn
from opc.lowering.scalars import (
    Emitter,
    broadcast_index,
    compute_type,
    full_value,
    gelu_grad_scalar,
    is_half,
    is_unsigned,
    memref_of,
    relu_grad_scalar,
    scalar_op,
    scalar_type,
)
from opc.targets.device_kernels import external_symbol, kernel_attributes
from opc.transforms.opc_schedule import Kernel, RowKernel, plan, unwrap_kernels

# Function lowering
# ---------------------------------------------------------------------------

KERNEL_ATTR = "opc.kernel"
"""On a top-level scf.parallel: the kernel it runs (kind: ops), from opc-schedule."""
SIMD_ATTR = "opc.simd_reduction"
"""On an scf.for: the `omp simd reduction` operator of each carried value (+, max, min, |)."""
ROW_BUFFER_BYTES = 64 * 1024  # row buffers of one row kernel, on each thread's stack
ROW_KERNEL_ATTR = "opc.row_length"
"""On a row kernel's scf.parallel over the rows: the row length. Every scf.for at the
top of its body is one pass over the row (the CUDA emitter spreads it over a block)."""


@dataclass
class Accumulator:
    """One reduction's running state in a loop: its carried values, how an element
    folds in, their `omp simd reduction` operators (None: none), the result."""

    inits: list[SSAValue]
    clauses: list[str] | None
    step: Callable[[list[SSAValue], SSAValue], list[SSAValue]]
    result: Callable[[list[SSAValue]], SSAValue]


def element_bytes(t: Attribute) -> int:
    width = getattr(t, "width", None)
    return max(1, width.data // 8) if width is not None else (8 if t == f64 else 4 if t == f32 else 2)


class FunctionLowering:
    """Lowers one tensor function to a buffer function of loop nests."""

    def __init__(self, fn: func.FuncOp, globals_out: list[memref.GlobalOp] | None = None,
                 memory_order_reductions: bool = True, row_kernels: bool = True,
                 row_buffer_bytes: int = ROW_BUFFER_BYTES):
        self.fn = fn
        self.row_buffer_bytes = row_buffer_bytes
        self.memory_order_reductions = memory_order_reductions
        self.globals = globals_out if globals_out is not None else []
        self.returned = list(fn.body.block.last_op.operands)  # type: ignore[union-attr]
        arg_types = [memref_of(a.type) for a in fn.args]
        out_types = [memref_of(t) for t in fn.function_type.outputs.data]
        self.entry = Block(arg_types=[*arg_types, *out_types])
        self.e = Emitter(self.entry)
        self.buffers: dict[SSAValue, SSAValue] = dict(zip(fn.args, self.entry.args))
        for old, new in zip(fn.args, self.entry.args):
            new.name_hint = old.name_hint
        self.outputs = list(self.entry.args[len(fn.args):])
        for i, out in enumerate(self.outputs):
            out.name_hint = f"out{i}"
        self.allocs: list[SSAValue] = []
        self.flat = False  # True while a flat (1-D) nest is emitted
        self.checks = nn.RuntimeChecks(self)
        self.memo: dict[tuple, SSAValue] = {}  # (value, index, block) -> scalar, within one op's nests
        self.row_scalars: dict[SSAValue, SSAValue] = {}  # inside a row kernel: per-row reduction results
        self.row_staged: dict[SSAValue, SSAValue] = {}  # inside a row kernel: values kept in a row buffer
        self.row_rank = 0
        self.simd = memory_order_reductions  # the CPU: float reductions vectorize (omp simd)
        self.schedule = plan(fn, row_kernels=row_kernels)
        self.inlined = set(self.schedule.inlined)

    # -- planning -------------------------------------------------------------

    # -- buffers ----------------------------------------------------------------

    def buffer_for(self, v: SSAValue) -> SSAValue:
        """The buffer a materialized value is written to: an output or a fresh alloc."""
        if v in self.buffers:
            return self.buffers[v]
        if v in self.returned and self.returned.count(v) == 1:
            buf = self.outputs[self.returned.index(v)]
        else:
            buf = self.e.value(memref.AllocOp([], [], memref_of(v.type)))  # type: ignore[arg-type]
            buf.name_hint = v.name_hint
            self.allocs.append(buf)
        self.buffers[v] = buf
        return buf

    def operand_buffer(self, v: SSAValue) -> SSAValue:
        if v not in self.buffers:
            raise AssertionError(f"{v} used before it was materialized")
        return self.buffers[v]

    # -- scalar evaluation --------------------------------------------------------

    def value_at(self, v: SSAValue, idx: list[SSAValue]) -> SSAValue:
        """Scalar of tensor value v at index idx (storage type).

        Iterative (an explicit stack, not recursion), so chains of any length
        lower; memoized per (value, index, block), so a value that several ops
        of one nest read (fan-out inside a kernel) is computed once per element.
        """
        memo = self.memo
        block = id(self.e.block)
        root_key = (v, tuple(idx), block)
        stack: list[tuple[SSAValue, list[SSAValue], bool]] = [(v, idx, False)]
        while stack:
            u, uidx, expanded = stack.pop()
            key = (u, tuple(uidx), block)
            if key in memo:
                continue
            leaf = self.leaf_value(u, uidx)
            if leaf is not None:
                memo[key] = leaf
                continue
            children = self.operand_indices(u, uidx)
            if not expanded:
                stack.append((u, uidx, True))
                stack.extend((c, cidx, False) for c, cidx in reversed(children)
                             if (c, tuple(cidx), block) not in memo)
                continue
            args = [memo[(c, tuple(cidx), block)] for c, cidx in children]
            memo[key] = self.combine_operands(u, args)
        return memo[root_key]

    def leaf_value(self, v: SSAValue, idx: list[SSAValue]) -> SSAValue | None:
        """A scalar needing no operand evaluated first: a load, a constant, an index map."""
        e = self.e
        if v in self.row_scalars:  # a row reduction's result inside its row kernel
            return self.row_scalars[v]
        if v in self.row_staged:  # a row kernel's value kept in its row buffer
            return e.load(self.row_staged[v], idx[-self.row_rank:])
        if v in self.buffers:
            return e.load(self.buffers[v], idx)
        op = v.owner
        assert isinstance(op, Operation) and op in self.inlined, f"{v} is neither buffered nor inlined"
        if isinstance(op, opc.FullOp):
            return e.const(full_value(op.value.value.data, element_of(v)), element_of(v))
        if is_splat_constant(op):
            return e.const(op.value.get_values()[0], element_of(v))  # type: ignore[attr-defined]
        if isinstance(op, REINDEXING_MAPS):
            return nn.index_map_value(self, op, idx)
        return None

    def operand_indices(self, v: SSAValue, idx: list[SSAValue]) -> list[tuple[SSAValue, list[SSAValue]]]:
        """The operands v's op reads at idx, each with its own index."""
        op = v.owner
        shape = shape_of(v)
        if isinstance(op, opc.BroadcastToOp):
            return [(op.x, self.operand_index(idx, shape, shape_of(op.x)))]
        if isinstance(op, opc.TransposeOp):
            src: list = [None] * len(idx)
            for i, p in enumerate(op.perm_list()):
                src[p] = idx[i]
            return [(op.x, src)]
        if isinstance(op, opc.CastGradOp):  # x lends only its dtype: never loaded
            return [(op.dout, idx)]
        return [(a, self.operand_index(idx, shape, shape_of(a))) for a in op.operands]  # type: ignore[union-attr]

    def combine_operands(self, v: SSAValue, args: list[SSAValue]) -> SSAValue:
        op = v.owner
        if isinstance(op, (opc.BroadcastToOp, opc.TransposeOp)):
            return args[0]
        if isinstance(op, opc.CastGradOp):
            return self.e.convert(args[0], element_of(op.dout), element_of(v))
        return scalar_op(self.e, op, args)  # type: ignore[arg-type]

    # -- materializing ops ----------------------------------------------------------

    def lower_pointwise(self, v: SSAValue) -> None:
        """One loop nest computing v (its inlined producers fused in) into its buffer."""
        out = self.buffer_for(v)
        leaves = self.flat_leaves(v) if len(shape_of(v)) > 1 else None
        if leaves is not None:
            self.lower_pointwise_flat(v, out, leaves)
            return

        def body(idx: list[SSAValue]) -> None:
            self.e.store(self.value_at_root(v, idx), out, idx)

        self.e.parallel(shape_of(v), body)

    def flat_leaves(self, v: SSAValue) -> list[SSAValue] | None:
        """The buffers v's nest reads, if every value in it has v's element count and
        none is transposed or broadcast: then one flat loop does (long, vectorizable)."""
        n = numel(shape_of(v))
        leaves: list[SSAValue] = []
        seen: set[SSAValue] = set()
        todo = [(v, True)]
        while todo:  # iterative: chains may be thousands of ops long
            u, root = todo.pop()
            if numel(shape_of(u)) != n:
                return None
            if not root and u in self.buffers:
                leaves.append(u)
                continue
            if u in seen:
                continue
            seen.add(u)
            op = u.owner
            if isinstance(op, (opc.TransposeOp, *REINDEXING_MAPS)):
                return None
            if isinstance(op, opc.FullOp) or is_splat_constant(op):  # type: ignore[arg-type]
                continue
            operands = [op.dout] if isinstance(op, opc.CastGradOp) else op.operands  # type: ignore[union-attr]
            todo.extend((o, False) for o in operands)
        return list(dict.fromkeys(leaves))

    def flat_view(self, buf: SSAValue) -> SSAValue:
        n = numel(buf.type.get_shape())  # type: ignore[attr-defined]
        t = MemRefType(buf.type.element_type, [n])  # type: ignore[attr-defined]
        view = self.e.value(memref.ReinterpretCastOp(buf, [], [], [], [0], [n], [1], t))
        view.name_hint = f"{buf.name_hint or 'buf'}_flat"
        return view

    def lower_pointwise_flat(self, v: SSAValue, out: SSAValue, leaves: list[SSAValue]) -> None:
        saved = {u: self.buffers[u] for u in leaves}
        for u in leaves:
            self.buffers[u] = self.flat_view(saved[u])
        out_flat = self.flat_view(out)
        self.flat = True
        try:
            self.e.parallel((numel(shape_of(v)),), lambda idx: self.e.store(self.value_at_root(v, idx), out_flat, idx))
        finally:
            self.flat = False
            self.buffers.update(saved)

    def operand_index(self, idx: list[SSAValue], shape: Sequence[int], operand_shape: Sequence[int]) -> list[SSAValue]:
        if self.flat:  # one index serves every value of a flat nest
            return idx
        return broadcast_index(self.e, idx, shape, operand_shape)

    def value_at_root(self, v: SSAValue, idx: list[SSAValue]) -> SSAValue:
        """Like value_at, but evaluates v's own op even though v has a buffer."""
        op = v.owner
        if is_splat_constant(op):  # type: ignore[arg-type]
            return self.e.const(op.value.get_values()[0], element_of(v))  # type: ignore[union-attr]
        saved = self.buffers.pop(v)
        self.inlined.add(op)  # type: ignore[arg-type]
        try:
            return self.value_at(v, idx)
        finally:
            self.inlined.discard(op)  # type: ignore[arg-type]
            self.buffers[v] = saved

    REDUCE_KINDS = {opc.ReduceSumOp: "sum", opc.ReduceMaxOp: "max", opc.ReduceMinOp: "min", opc.ReduceMeanOp: "mean"}

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
        acc_t = compute_type(scalar_type(elem))
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
        if is_half(elem):  # accumulate in f32, round once at the end
            acc = e.value(memref.AllocOp([], [], MemRefType(f32, list(out_shape))))
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

        e.parallel(in_shape[:first], lambda outer: loops(first, list(outer)))
        if acc is not out or finish is not None:  # halves round once; a mean scales once
            done = finish or (lambda v: v)
            e.parallel(out_shape, lambda idx: e.store(e.to_storage(done(e.load(acc, idx)), elem), out, idx))

    # -- reductions: accumulators ---------------------------------------------------

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
        width = acc_t.width.data  # type: ignore[attr-defined]
        if is_unsigned(elem):
            return e.const(0 if kind == "max" else (1 << width) - 1, acc_t)
        return e.const(-(1 << (width - 1)) if kind == "max" else (1 << (width - 1)) - 1, acc_t)

    def finish_mean(self, kind: str, acc: SSAValue, count: int) -> SSAValue:
        if kind != "mean":
            return acc
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
            # a run-time check writes the status record from any iteration: no simd lanes then
            if not any(isinstance(o, CheckIndexOp) for o in loop.walk()):  # type: ignore[union-attr]
                loop.attributes[SIMD_ATTR] = ArrayAttr([StringAttr(c) for c in clauses])  # type: ignore[union-attr]
        return results

    # -- row kernels ------------------------------------------------------------------

    def lower_row_kernel(self, rk: RowKernel) -> None:
        """One parallel loop over the rows; per row, one pass per reduction level.

        Pass L accumulates the reductions whose input is ready at level L (the
        per-row results of passes < L) and stores the full-size values of level L
        that leave the kernel or that a later pass reads (into a row buffer on the
        stack while it fits ROW_BUFFER_BYTES, recomputed otherwise). Per-row values
        (a reduction's result and the ops on it) are scalars of the row's body."""
        e = self.e
        members = set(rk.ops)
        full = (*rk.outer, rk.length)
        level: dict[Operation, int] = {}
        for o in rk.ops:
            level[o] = max([level[p] + isinstance(p, opc.ReduceOp) for a in o.operands
                            if (p := a.owner) in members] or [0])  # type: ignore[operator]
        outputs = {o.results[0] for o in rk.ops if any(u.operation not in members for u in o.results[0].uses)}
        out_bufs = {v: self.buffer_for(v) for v in sorted(outputs, key=lambda v: rk.ops.index(v.owner))}  # type: ignore[arg-type]
        for v in outputs:
            del self.buffers[v]  # inside the kernel a member is computed, not loaded
        staged: list[Operation] = []
        budget = self.row_buffer_bytes
        for o in rk.ops:
            if isinstance(o, opc.ReduceOp) or shape_of(o.results[0]) != full:
                continue
            later = any(level[u.operation] > level[o] for u in o.results[0].uses if u.operation in members)
            size = rk.length * element_bytes(element_of(o.results[0]))
            if later and size <= budget:
                staged.append(o)
                budget -= size
        added = members - self.inlined
        self.inlined |= {o for o in rk.ops if not isinstance(o, opc.ReduceOp)}
        last_level = max(level.values()) + 1

        def row_index(v: SSAValue, outer_idx: list[SSAValue]) -> list[SSAValue]:
            return outer_idx if len(shape_of(v)) == len(rk.outer) else [*outer_idx, e.index(0)]

        def body(outer_idx: list[SSAValue]) -> None:
            row_bufs = {}
            for o in staged:
                t = MemRefType(element_of(o.results[0]), [rk.length])
                row_bufs[o.results[0]] = e.value(memref.AllocaOp.get(t.element_type, shape=[rk.length]))
            for lv in range(last_level + 1):
                for o in rk.ops:  # per-row values ready at this level
                    v = o.results[0]
                    if not isinstance(o, opc.ReduceOp) and level[o] == lv and shape_of(v) != full:
                        if isinstance(o, opc.ReshapeOp):  # [rows] <-> [rows, 1]: the same scalar
                            self.row_scalars[v] = self.value_at(o.x, row_index(o.x, outer_idx))
                        else:
                            self.row_scalars[v] = self.value_at(v, row_index(v, outer_idx))
                        if v in out_bufs:
                            e.store(self.row_scalars[v], out_bufs[v], row_index(v, outer_idx))
                reductions = [o for o in rk.ops if isinstance(o, opc.ReduceOp) and level[o] == lv]
                stores = [o.results[0] for o in rk.ops if not isinstance(o, opc.ReduceOp) and level[o] == lv
                          and shape_of(o.results[0]) == full and (o.results[0] in out_bufs or o in staged)]
                if reductions or stores:
                    self.row_pass(rk, outer_idx, reductions, stores, out_bufs, row_bufs)

        self.row_rank = 1
        try:
            e.parallel(rk.outer, body)
            nest = self.entry.last_op
            assert isinstance(nest, scf.ParallelOp)  # rk.outer is never empty: rows of a rank >= 2 input
            nest.attributes[ROW_KERNEL_ATTR] = IntegerAttr(rk.length, 64)
        finally:
            self.row_scalars.clear()
            self.row_staged.clear()
            self.row_rank = 0
            self.inlined -= added
            self.buffers.update(out_bufs)

    def row_pass(self, rk: RowKernel, outer_idx: list[SSAValue], reductions: list[opc.ReduceOp],
                 stores: list[SSAValue], out_bufs: dict[SSAValue, SSAValue],
                 row_bufs: dict[SSAValue, SSAValue]) -> None:
        """One pass over a row: store `stores`, accumulate `reductions`."""
        e = self.e
        states = [self.accumulator(self.REDUCE_KINDS[type(r)], element_of(r.x)) for r in reductions]
        inits = [v for s in states for v in s.inits]
        clauses = [c for s in states for c in (s.clauses or [None])]

        def step(j: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
            idx = [*outer_idx, j]
            for v in stores:
                x = self.value_at(v, idx)
                if v in row_bufs:
                    e.store(x, row_bufs[v], [j])
                if v in out_bufs:
                    e.store(x, out_bufs[v], idx)
            out, at = [], 0
            for r, s in zip(reductions, states):
                n = len(s.inits)
                out += s.step(accs[at:at + n], self.value_at(r.x, idx))
                at += n
            return out

        results = self.reduction_loop(rk.length, inits, step, None if None in clauses else clauses)  # type: ignore[arg-type]
        at = 0
        for r, s in zip(reductions, states):
            n = len(s.inits)
            value = self.finish_mean(self.REDUCE_KINDS[type(r)], s.result(results[at:at + n]), rk.length)
            at += n
            v = e.to_storage(value, element_of(r.result))
            self.row_scalars[r.result] = v
            if r.result in out_bufs:
                idx = outer_idx if len(shape_of(r.result)) == len(rk.outer) else [*outer_idx, e.index(0)]
                e.store(v, out_bufs[r.result], idx)
        for v in stores:
            if v in row_bufs:
                self.row_staged[v] = row_bufs[v]

    def gemm(self, a, b, bias, out, reserve, *, batch, m, n, k, trans_a, trans_b, act, a_stride=0, b_stride=0):
        self.e.emit(GemmOp(
            a, b, bias, out, reserve, batch=batch, m=m, n=n, k=k, a_batch_stride=a_stride,
            b_batch_stride=b_stride, trans_a=trans_a, trans_b=trans_b, activation=act,
        ))  # fmt: skip

    def lower_matmul(self, op: opc.MatmulOp) -> None:
        """One batched GEMM over the broadcast batch dims (nn.batch_operand); [B.., M, K] @ [K, N]
        is one GEMM of B*M rows."""
        xs = shape_of(op.x)
        tx, ty = opc.flag(op.trans_x), opc.flag(op.trans_y)
        *batch, m, n = shape_of(op.result)
        k = xs[-2] if tx else xs[-1]
        (a, a_stride), (b, b_stride) = (nn.batch_operand(self, v, batch) for v in (op.x, op.y))
        nb = numel(batch)
        if nb > 1 and a_stride and not b_stride and not tx:
            nb, m, a_stride = 1, nb * m, 0
        self.gemm(a, b, None, self.buffer_for(op.result), None, batch=nb, m=m, n=n, k=k, trans_a=tx, trans_b=ty,
                  act="none", a_stride=a_stride if nb > 1 else 0, b_stride=b_stride if nb > 1 else 0)

    def lower_fused_gemm(self, op: opc.FusedGemmEpilogueOp) -> None:
        m, n = shape_of(op.out)
        tx = opc.flag(op.trans_x)
        k = shape_of(op.x)[0 if tx else 1]
        res = op.reserve_space
        reserve = self.buffer_for(res) if res is not None and (res.uses or res in self.returned) else None
        self.gemm(
            self.operand_buffer(op.x), self.operand_buffer(op.y), self.operand_buffer(op.bias),
            self.buffer_for(op.out), reserve, batch=1, m=m, n=n, k=k, trans_a=tx, trans_b=opc.flag(op.trans_y),
            act=op.activation.data,
        )  # fmt: skip

    def lower_fused_gemm_grad(self, op: opc.FusedGemmEpilogueGradOp) -> None:
        """The dedicated kernel: dZ in one pass, dbias from dZ, then two GEMMs."""
        e = self.e
        m, n = shape_of(op.dout)
        tx, ty = opc.flag(op.trans_x), opc.flag(op.trans_y)
        elem = element_of(op.dout)
        act = op.activation_grad.data
        dout = self.operand_buffer(op.dout)
        if act == "none":
            dz = dout
        else:
            dz = e.value(memref.AllocOp([], [], MemRefType(elem, [m, n])))
            dz.name_hint = "dz"
            self.allocs.append(dz)
            z = self.operand_buffer(op.reserve_space)  # type: ignore[arg-type]
            def dz_body(idx: list[SSAValue]) -> None:
                zv, gv = e.to_compute(e.load(z, idx)), e.to_compute(e.load(dout, idx))
                grad = relu_grad_scalar(e, zv, gv) if act == "relu_grad" else gelu_grad_scalar(e, zv, gv, True)
                e.store(e.to_storage(grad, elem), dz, idx)

            e.parallel((m, n), dz_body)
        if op.dbias.uses or op.dbias in self.returned:
            self.reduce_into(self.buffer_for(op.dbias), elem, (m, n), (0,), False, "sum", lambda idx: e.load(dz, idx))
        x, y = self.operand_buffer(op.x), self.operand_buffer(op.y)
        # SPEC.md's table, each product as one GEMM with transpose flags.
        dx_plan = {(False, False): (dz, False, y, True), (True, False): (y, False, dz, True),
                   (False, True): (dz, False, y, False), (True, True): (y, True, dz, True)}[(tx, ty)]
        dy_plan = {(False, False): (x, True, dz, False), (True, False): (x, False, dz, False),
                   (False, True): (dz, True, x, False), (True, True): (dz, True, x, True)}[(tx, ty)]  # fmt: skip
        for result, (a, ta, b, tb) in ((op.dx, dx_plan), (op.dy, dy_plan)):
            if not (result.uses or result in self.returned):
                continue
            rm, rn = shape_of(result)
            ashape = a.type.get_shape()  # type: ignore[attr-defined]
            contracted = ashape[0] if ta else ashape[1]  # op_a(a) is [rm, K]
            self.gemm(a, b, None, self.buffer_for(result), None, batch=1, m=rm, n=rn, k=contracted,
                      trans_a=ta, trans_b=tb, act="none")

    def lower_reshape(self, op: opc.ReshapeOp) -> None:
        """A reshape of a contiguous buffer is a view: no copy, no loop."""
        src = self.operand_buffer(op.x)
        shape = shape_of(op.result)
        strides = [numel(shape[i + 1:]) for i in range(len(shape))]
        cast = memref.ReinterpretCastOp(src, [], [], [], [0], list(shape), strides, memref_of(op.result.type))  # type: ignore[arg-type]
        view = self.e.value(cast)
        view.name_hint = op.result.name_hint
        if op.result in self.returned:
            self.buffers[op.result] = view
            self.copy_into_output(op.result)
        else:
            self.buffers[op.result] = view

    def copy_into_output(self, v: SSAValue) -> None:
        src = self.buffers[v]
        for i, r in enumerate(self.returned):
            if r is v and self.outputs[i] is not src:
                dst = self.outputs[i]
                self.e.parallel(shape_of(v), lambda idx, dst=dst: self.e.emit(
                    memref.StoreOp.get(self.e.value(memref.LoadOp.get(src, idx)), dst, idx)))  # same type: no bitcast

    # -- driver ---------------------------------------------------------------------

    def run(self) -> func.FuncOp:
        kernel_of = {o: k for k in self.schedule.kernels for o in k.ops}
        for op in self.fn.body.block.ops:
            if isinstance(op, func.ReturnOp):
                break
            if op in self.inlined:
                continue
            before = self.entry.last_op
            rk = self.schedule.row_of.get(op)
            if rk is not None:
                if op is not rk.ops[-1]:
                    continue
                self.memo = {}
                self.lower_row_kernel(rk)  # at its last op: every operand is materialized by now
            else:
                self.lower_op(op)
            if op in kernel_of:
                self.label_nests(before, kernel_of[op])
        # Results that are arguments or returned twice are copied into their outputs.
        for v in dict.fromkeys(self.returned):
            if self.returned.count(v) > 1 or v in self.fn.args:
                self.copy_into_output(v)
        self.checks.finish()
        for buf in self.allocs:
            self.e.emit(memref.DeallocOp.get(buf))
        self.e.emit(func.ReturnOp())
        new = func.FuncOp(self.fn.sym_name.data, ([a.type for a in self.entry.args], []), Region(self.entry))
        new.attributes["opc.num_inputs"] = IntegerAttr(len(self.fn.args), 64)
        self.checks.annotate(new)
        return new

    def lower_constant(self, op: arith.ConstantOp) -> None:
        """A dense tensor constant becomes a constant memref.global read in place."""
        v = op.result
        name = f"{self.fn.sym_name.data}_const{len(self.globals)}"
        t = memref_of(v.type)  # type: ignore[arg-type]
        self.globals.append(memref.GlobalOp.get(StringAttr(name), t, op.value, constant=UnitAttr()))
        buf = self.e.value(memref.GetGlobalOp(name, t))
        buf.name_hint = v.name_hint
        self.buffers[v] = buf
        if v in self.returned:
            self.copy_into_output(v)

    def lower_external(self, op: Operation, symbol: str) -> None:
        """A device's own kernel: every operand in a buffer, every result into one (used or not)."""
        inputs = [self.operand_buffer(v) for v in op.operands]
        outputs = [self.buffer_for(r) for r in op.results]
        self.e.emit(ExternalCallOp(symbol, op.name, inputs, outputs, kernel_attributes(op)))

    def label_nests(self, before: Operation | None, kernel: Kernel) -> None:
        """The nests just emitted carry their kernel (`opc.kernel`: kind and ops), for
        `--emit mlir` and the C emitter's comment on each kernel function."""
        label = StringAttr(f"{kernel.kind}: {', '.join(o.name.removeprefix('opc.') for o in kernel.ops)}")
        op = before.next_op if before is not None else self.entry.first_op
        while op is not None:
            if isinstance(op, scf.ParallelOp):
                op.attributes[KERNEL_ATTR] = label
            op = op.next_op

    def lower_op(self, op: Operation) -> None:
        self.memo = {}
        if (symbol := external_symbol(op)) is not None:
            self.lower_external(op, symbol)
        elif isinstance(op, arith.ConstantOp):
            if is_splat_constant(op):  # every use inlined it; a returned splat fills its output
                self.lower_pointwise(op.result)
            else:
                self.lower_constant(op)
        elif isinstance(op, INLINABLE):
            self.lower_pointwise(op.results[0])
        elif isinstance(op, opc.ReduceOp):
            self.lower_reduce(op)
        elif isinstance(op, opc.MatmulOp):
            self.lower_matmul(op)
        elif isinstance(op, opc.FusedGemmEpilogueOp):
            self.lower_fused_gemm(op)
        elif isinstance(op, opc.FusedGemmEpilogueGradOp):
            self.lower_fused_gemm_grad(op)
        elif isinstance(op, opc.ReshapeOp):
            self.lower_reshape(op)
        elif type(op) in nn.LOWERINGS:
            nn.LOWERINGS[type(op)](self, op)
        else:
            raise OpcError(f"error: no lowering to loops for '{op.name}'")


@dataclass(frozen=True)
class LowerToLoopsPass(ModulePass):
    """Every tensor func.func becomes a buffer function of loop nests.
    `target=cuda` keeps one accumulator per output (a warp each on the GPU) and
    recomputes instead of keeping row buffers (the threads of a block share a row)."""

    name = "opc-lower-to-loops"
    target: str = "cpu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        constants: list[memref.GlobalOp] = []
        for fn in list(op.ops):
            if isinstance(fn, func.FuncOp) and not fn.is_declaration:
                unwrap_kernels(fn)  # scheduled input (opc-schedule): the lowering re-plans the same kernels
                cpu = self.target != "cuda"
                new = FunctionLowering(fn, constants, memory_order_reductions=cpu,
                                       row_buffer_bytes=ROW_BUFFER_BYTES if cpu else 0).run()
                op.body.block.insert_op_before(new, fn)
                fn.detach()
                fn.erase(safe_erase=False)
        for g in constants:
            op.body.block.insert_op_before(g, op.body.block.first_op)  # type: ignore[arg-type]
