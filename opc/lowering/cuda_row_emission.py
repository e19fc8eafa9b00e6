"""Row kernels on the GPU: a warp or a block per row, each pass over the row spread over its
threads, team reductions through shuffles and shared memory.

A part of CudaEmitter (cuda_emitter.py), which mixes it in."""

from __future__ import annotations

from xdsl.dialects import scf
from xdsl.ir import Operation

from opc.lowering.c_expressions import c_type
from opc.lowering.cuda_kernel_emission import (
    BLOCK,
    WARP,
    WARP_ROW_MAX,
    is_identity,
    launch,
    shfl_type,
)
from opc.lowering.emitter_state import CudaEmitterState


class RowKernelEmission(CudaEmitterState):
    def row_kernel(self, ivs, total: int | str, body: list[Operation], length: int) -> tuple[int, int | str]:
        """A team of threads per row, grid-stride over the rows; (threads, blocks) of the launch.

        The row loop's condition is uniform over a team (a warp, or the whole block),
        so the shuffles and __syncthreads of the passes are reached by all its threads."""
        team = WARP if length <= WARP_ROW_MAX else BLOCK
        self.line(f"const int opc_t = threadIdx.x % {team};  /* this thread's place in its row's team */")
        if team == WARP:
            self.line(f"for (int64_t opc_row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / {WARP}; "
                      f"opc_row < {total}; opc_row += ((int64_t)blockDim.x * gridDim.x) / {WARP}) {{")
            threads, blocks = launch(total, WARP)
        else:
            self.line(f"for (int64_t opc_row = blockIdx.x; opc_row < {total}; opc_row += gridDim.x) {{")
            threads, blocks = BLOCK, launch(total, 1, 1)[1]
        self.shared_at = len(self.lines) - 1  # the __shared__ slots are declared before the row loop
        self.row_team, self.row_body, self.row_passes = team, body[0].parent_block(), 0
        try:
            self.indent += 1
            self.decompose(ivs, "opc_row")
            self.emit_ops(body)
            self.indent -= 1
            self.line("}")
        finally:
            self.row_team, self.row_body = 0, None
        return threads, blocks

    def row_pass(self, op: scf.ForOp) -> None:
        """One pass over the row: each thread takes every team-th element, then the
        partial accumulators meet so that every thread of the team holds the totals."""
        team, p = self.row_team, self.row_passes
        self.row_passes += 1
        combines = [self.find_combine(op, k) for k in range(len(op.results))]
        for c, init in zip(combines, op.iter_args):
            if c is None or not is_identity(c, init):
                raise NotImplementedError("CUDA emitter: a row pass whose accumulator is not a plain reduction")
        combines = [c for c in combines if c is not None]
        iv = op.body.block.args[0]
        accs = self.declare_accumulators(op)
        i, lb, ub, st = self.name(iv), self.name(op.lb), self.name(op.ub), self.name(op.step)
        self.line(f"for (int64_t {i} = {lb} + opc_t * {st}; {i} < {ub}; {i} += {team} * {st}) {{")
        self.indent += 1
        self.yield_targets.append(accs)
        self.emit_block(op.body.block)
        self.yield_targets.pop()
        self.indent -= 1
        self.line("}")
        if not accs:
            return  # a pass that only stores: each thread wrote its own elements
        types = [(c_type(r.type), shfl_type(r.type)) for r in op.results]
        # within each warp: lane 0 ends with the warp's total
        self.line(f"for (int opc_off = {WARP // 2}; opc_off > 0; opc_off /= 2) {{")
        self.indent += 1
        for k, (acc, c, (ct, st_)) in enumerate(zip(accs, combines, types)):
            self.line(f"const {ct} opc_o{k} = ({ct})__shfl_down_sync(0xffffffffu, ({st_}){acc}, opc_off);")
            self.line(f"{acc} = {self.combine_expr(c, acc, f'opc_o{k}')};")
        self.indent -= 1
        self.line("}")
        if team == WARP:  # every lane takes lane 0's total (not its own partial order's)
            for acc, (ct, st_) in zip(accs, types):
                self.line(f"{acc} = ({ct})__shfl_sync(0xffffffffu, ({st_}){acc}, 0);")
            return
        # across the warps of the block: one __shared__ slot per warp, read by all in one order
        warps = team // WARP
        slots = [f"opc_red{p}_{k}" for k in range(len(accs))]
        decls = [f"  __shared__ {ct} {s}[{warps}];" for s, (ct, _) in zip(slots, types)]
        self.lines[self.shared_at:self.shared_at] = decls
        self.shared_at += len(decls)
        self.line(f"if (opc_t % {WARP} == 0) {{")
        self.indent += 1
        for s, acc in zip(slots, accs):
            self.line(f"{s}[opc_t / {WARP}] = {acc};")
        self.indent -= 1
        self.line("}")
        self.line("__syncthreads();")
        for s, acc in zip(slots, accs):
            self.line(f"{acc} = {s}[0];")
        self.line(f"for (int opc_w = 1; opc_w < {warps}; ++opc_w) {{")
        self.indent += 1
        for k, (s, acc, c, (ct, _)) in enumerate(zip(slots, accs, combines, types)):
            self.line(f"const {ct} opc_o{k} = {s}[opc_w];")
            self.line(f"{acc} = {self.combine_expr(c, acc, f'opc_o{k}')};")
        self.indent -= 1
        self.line("}")
        self.line("__syncthreads();  /* every thread has read the slots before the next row writes them */")
