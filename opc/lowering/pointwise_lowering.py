"""Pointwise nests: the value of a (possibly inlined) SSA value at an index, computed once per
element (memoized per nest), and the nests that write an elementwise result, flat where nothing
in the chain broadcasts or transposes.

A part of FunctionLowering (opc_lower_to_loops.py), which mixes it in: `self` is the
function being lowered (its emitter `self.e`, buffers, the kernel plan)."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, tensor
from xdsl.dialects.builtin import i64
from xdsl.ir import Operation, SSAValue

from opc.dialects import opc
from opc.dialects.kinds import REINDEXING_MAPS, element_of, is_splat_constant, numel, shape_of, splat_value
from opc.lowering import nn_lowering as nn
from opc.lowering.lowering_state import LoweringState
from opc.lowering.scalars import (
    broadcast_index,
    full_value,
    scalar_op,
)
from opc.lowering.slice_lowering import extract_value


class PointwiseLowering(LoweringState):
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
        if v in self.columns:  # a GEMM epilogue's [n] operand (a bias): read at the column
            buf, column = self.columns[v]
            return e.load(buf, [column])
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
        if isinstance(op, opc.IotaOp):  # the index itself, in the element type
            return e.convert(e.value(arith.IndexCastOp(idx[0], i64)), i64, element_of(v))
        if is_splat_constant(op):
            return e.const(splat_value(op), element_of(v))
        if isinstance(op, tensor.ExtractSliceOp):
            return extract_value(self, op, idx)
        if isinstance(op, REINDEXING_MAPS):
            return nn.index_map_value(self, op, idx)
        return None

    def operand_indices(self, v: SSAValue, idx: list[SSAValue]) -> list[tuple[SSAValue, list[SSAValue]]]:
        """The operands v's op reads at idx, each with its own index."""
        op = v.owner
        assert isinstance(op, Operation)  # an inlined value: an op's result
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
        return [(a, self.operand_index(idx, shape, shape_of(a))) for a in op.operands]

    def combine_operands(self, v: SSAValue, args: list[SSAValue]) -> SSAValue:
        op = v.owner
        if isinstance(op, (opc.BroadcastToOp, opc.TransposeOp)):
            return args[0]
        if isinstance(op, opc.CastGradOp):
            return self.e.convert(args[0], element_of(op.dout), element_of(v))
        assert isinstance(op, Operation)  # an inlined value: an op's result
        return scalar_op(self.e, op, args)

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
            assert isinstance(op, Operation)  # block arguments are buffers
            if isinstance(op, (opc.TransposeOp, *REINDEXING_MAPS)):
                return None
            if isinstance(op, opc.FullOp) or is_splat_constant(op):
                continue
            operands = [op.dout] if isinstance(op, opc.CastGradOp) else op.operands
            todo.extend((o, False) for o in operands)
        return list(dict.fromkeys(leaves))

    def flat_view(self, buf: SSAValue) -> SSAValue:
        view = self.view(buf, [numel(shape_of(buf))], element_of(buf))
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
        assert isinstance(op, Operation)  # v has a buffer of its own: an op's result
        if is_splat_constant(op):
            return self.e.const(splat_value(op), element_of(v))
        saved = self.buffers.pop(v)
        self.inlined.add(op)
        try:
            return self.value_at(v, idx)
        finally:
            self.inlined.discard(op)
            self.buffers[v] = saved
