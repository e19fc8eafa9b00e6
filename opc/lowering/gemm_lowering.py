"""GEMMs: matmul, fused_gemm_epilogue and its grad become `opc_loops.gemm` calls (batched,
transposed, with the bias / activation epilogue), a GEMM with an epilogue nest (opc-schedule's
GemmEpilogue) one whose epilogue region is that nest's flat body.

A part of FunctionLowering (opc_lower_to_loops.py), which mixes it in: `self` is the
function being lowered (its emitter `self.e`, buffers, the kernel plan)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    IndexType,
    StringAttr,
)
from xdsl.ir import Block, Operation, Region, SSAValue

from opc.dialects import opc
from opc.dialects.kinds import element_of, is_splat_constant, numel, shape_of
from opc.dialects.opc_loops import GemmOp
from opc.lowering import nn_lowering as nn
from opc.lowering.lowering_state import LoweringState
from opc.lowering.scalars import (
    gelu_grad_scalar,
    relu_grad_scalar,
)
from opc.symbolic import Sym
from opc.transforms.opc_schedule import EPILOGUE_CONVS, GemmEpilogue

EPILOGUE_ATTR = "opc.epilogue"
"""On an opc_loops.gemm with an epilogue: the ops of the nest it runs (for the profiler's label)."""


def many(n: int | Sym) -> bool:
    """More than one batch, or a run-time count of them (a batched call is right for any count)."""
    return isinstance(n, Sym) or n > 1


class GemmLowering(LoweringState):
    # while a GEMM with an epilogue is lowered: the epilogue's builder (taken by the op's first
    # GEMM, the one computing its results[0]), then that GEMM
    epilogue_body: Callable[[], Region] | None = None
    epilogue_gemm: GemmOp | None = None

    def gemm(self, a, b, bias, out, reserve, *, batch, m, n, k, trans_a, trans_b, act, a_stride=0, b_stride=0):
        epilogue = self.epilogue_body() if self.epilogue_body is not None else None
        self.epilogue_body = None
        def size(d: int | Sym) -> int | SSAValue:
            return self.size_value(d) if isinstance(d, Sym) else d

        op = GemmOp(
            a, b, bias, out, reserve, batch=size(batch), m=size(m), n=size(n), k=size(k),
            a_batch_stride=size(a_stride), b_batch_stride=size(b_stride), trans_a=trans_a, trans_b=trans_b,
            activation=act, epilogue=epilogue,
        )  # fmt: skip
        self.e.emit(op)
        if epilogue is not None:
            self.epilogue_gemm = op

    def lower_gemm_epilogue(self, ep: GemmEpilogue) -> None:
        """The GEMM, its views, and the flat nests rooted at ep.roots as the GEMM's epilogue region,
        which stores each root's value (a later nest reads an earlier root's value as computed).
        In place (ep.in_place): the GEMM writes into the nest's buffer, which the body then reads
        and overwrites element by element; else the GEMM's result keeps a buffer of its own."""
        roots = [r.results[0] for r in ep.roots]
        outs = [self.buffer_for(r) for r in roots]
        if ep.in_place:
            g = ep.gemm.results[0]  # the GEMM's output (fused_gemm_epilogue_grad's dx)
            view = self.view(outs[0], shape_of(g), element_of(g))
            view.name_hint = g.name_hint
            self.buffers[g] = view

        def body() -> Region:
            for v in ep.views:
                assert isinstance(v, opc.ReshapeOp)
                self.lower_reshape(v)
            n = numel(shape_of(roots[0]))
            leaves = list(dict.fromkeys(u for r in roots for u in self.epilogue_leaves(r) if u not in roots))
            saved = {u: self.buffers[u] for u in leaves}
            block = Block(arg_types=[IndexType(), IndexType()])
            row, column = block.args
            gshape = shape_of(ep.gemm.results[0])
            conv = isinstance(ep.gemm, EPILOGUE_CONVS)  # rows n * c, columns the spatial offset
            cols = numel(gshape[2:]) if conv else gshape[-1]  # the GEMM's n
            vectors = [u for u in leaves if numel(shape_of(u)) != n]
            for u in leaves:
                self.buffers[u] = self.flat_view(saved[u])
            outs_flat = [self.flat_view(o) for o in outs]
            self.flat = True
            try:
                with self.e.at(block):
                    at = column  # a vector operand's index: a GEMM's [.., 1, n] along the rows, a conv's [c, 1, 1]
                    if conv:  # at the row's channel (opc-schedule's channel_vector)
                        c = self.e.index(gshape[1])
                        whole = self.e.value(arith.MuliOp(self.e.value(arith.DivSIOp(row, c)), c))
                        at = row if gshape[0] == 1 else self.e.value(arith.SubiOp(row, whole))
                    for u in vectors:
                        self.columns[u] = (self.buffers[u], at)
                    i = self.e.value(arith.AddiOp(self.e.value(arith.MuliOp(row, self.e.index(cols))), column))
                    for r, out_flat in zip(roots, outs_flat):  # value_at's memo: a later root reuses an earlier
                        self.e.store(self.value_at_root(r, [i]), out_flat, [i])
            finally:
                self.flat = False
                self.columns = {}
                self.buffers.update(saved)
            return Region(block)

        self.epilogue_body, self.epilogue_gemm = body, None
        try:
            self.lower_op(ep.gemm)
        finally:
            self.epilogue_body = None
        gemm = self.epilogue_gemm
        assert gemm is not None and gemm.epilogue is not None
        ops = {o for r in roots for o in self.epilogue_ops(r)}
        names = [o.name.removeprefix("opc.") for o in self.fn.body.block.ops if o in ops]
        gemm.attributes[EPILOGUE_ATTR] = StringAttr(", ".join(names))

    def epilogue_ops(self, v: SSAValue) -> list:
        """The ops of the nest computing v, in block order."""
        ops, todo = set(), [v]
        while todo:
            u = todo.pop()
            op = u.owner
            if op in ops or (u is not v and (u in self.buffers or op not in self.inlined)):
                continue
            assert isinstance(op, Operation)  # block arguments are buffers
            if isinstance(op, opc.FullOp) or is_splat_constant(op):
                continue
            ops.add(op)
            todo.extend(op.operands)
        return [o for o in self.fn.body.block.ops if o in ops]

    def epilogue_leaves(self, v: SSAValue) -> list[SSAValue]:
        """The buffers the flat nest computing v reads (splat constants are inlined)."""
        leaves: list[SSAValue] = []
        seen: set[SSAValue] = set()
        todo = [v]
        while todo:
            u = todo.pop()
            if u in seen:
                continue
            seen.add(u)
            if u is not v and u in self.buffers:
                leaves.append(u)
                continue
            op = u.owner
            assert isinstance(op, Operation)  # block arguments are buffers
            if isinstance(op, opc.FullOp) or is_splat_constant(op):
                continue
            todo.extend([op.dout] if isinstance(op, opc.CastGradOp) else op.operands)
        return leaves

    def lower_matmul(self, op: opc.MatmulOp) -> None:
        """One batched GEMM over the broadcast batch dims (nn.batch_operand); [B.., M, K] @ [K, N]
        is one GEMM of B*M rows."""
        xs = shape_of(op.x)
        tx, ty = opc.flag(op.trans_x), opc.flag(op.trans_y)
        *batch, m, n = shape_of(op.result)
        k = xs[-2] if tx else xs[-1]
        (a, a_stride), (b, b_stride) = (nn.batch_operand(self, v, batch) for v in (op.x, op.y))
        nb = numel(batch)
        if many(nb) and a_stride and not b_stride and not tx:
            nb, m, a_stride = 1, nb * m, 0
        self.gemm(a, b, None, self.buffer_for(op.result), None, batch=nb, m=m, n=n, k=k, trans_a=tx, trans_b=ty,
                  act="none", a_stride=a_stride if many(nb) else 0, b_stride=b_stride if many(nb) else 0)

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
            dz = self.alloc((m, n), elem)
            dz.name_hint = "dz"
            self.allocs.append(dz)
            assert op.reserve_space is not None  # an activation grad reads the pre-activation
            z = self.operand_buffer(op.reserve_space)
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
            ashape = shape_of(a)
            contracted = ashape[0] if ta else ashape[1]  # op_a(a) is [rm, K]
            self.gemm(a, b, None, self.buffer_for(result), None, batch=1, m=rm, n=rn, k=contracted,
                      trans_a=ta, trans_b=tb, act="none")
