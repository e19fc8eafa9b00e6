"""Row kernels (softmax, layer norm composed from primitives): one parallel loop over rows, one
pass per reduction level over each row, row values in a per-thread row buffer.

A part of FunctionLowering (opc_lower_to_loops.py), which mixes it in: `self` is the
function being lowered (its emitter `self.e`, buffers, the kernel plan)."""

from __future__ import annotations

from xdsl.dialects import memref, scf
from xdsl.dialects.builtin import (
    IntegerAttr,
    MemRefType,
    f32,
    f64,
)
from xdsl.ir import Attribute, Operation, SSAValue

from opc.dialects import opc
from opc.dialects.kinds import element_of, shape_of
from opc.lowering.lowering_state import LoweringState
from opc.transforms.opc_schedule import RowKernel

ROW_BUFFER_BYTES = 64 * 1024  # row buffers of one row kernel, on each thread's stack
ROW_KERNEL_ATTR = "opc.row_length"
"""On a row kernel's scf.parallel over the rows: the row length. Every scf.for at the
top of its body is one pass over the row (the CUDA emitter spreads it over a block)."""


def element_bytes(t: Attribute) -> int:
    width = getattr(t, "width", None)
    return max(1, width.data // 8) if width is not None else (8 if t == f64 else 4 if t == f32 else 2)


class RowKernelLowering(LoweringState):
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
                            if isinstance(p := a.owner, Operation) and p in members] or [0])
        outputs: set[SSAValue] = {o.results[0] for o in rk.ops
                                  if any(u.operation not in members for u in o.results[0].uses)}
        out_bufs: dict[SSAValue, SSAValue] = {v: self.buffer_for(v) for v in (o.results[0] for o in rk.ops)
                                              if v in outputs}  # in op order
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
                stores: list[SSAValue] = [
                    o.results[0] for o in rk.ops if not isinstance(o, opc.ReduceOp) and level[o] == lv
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

        known = [c for c in clauses if c is not None]
        results = self.reduction_loop(rk.length, inits, step, known if len(known) == len(clauses) else None)
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
