"""GEMMs: matmul, fused_gemm_epilogue and its grad become `opc_loops.gemm` calls (batched,
transposed, with the bias / activation epilogue).

A part of FunctionLowering (opc_lower_to_loops.py), which mixes it in: `self` is the
function being lowered (its emitter `self.e`, buffers, the kernel plan)."""

from __future__ import annotations

from xdsl.dialects import memref
from xdsl.dialects.builtin import (
    MemRefType,
)
from xdsl.ir import SSAValue

from opc.dialects import opc
from opc.dialects.kinds import element_of, numel, shape_of
from opc.dialects.opc_loops import GemmOp
from opc.lowering import nn_lowering as nn
from opc.lowering.scalars import (
    gelu_grad_scalar,
    relu_grad_scalar,
)


class GemmLowering:
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
