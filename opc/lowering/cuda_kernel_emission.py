"""One __global__ kernel per top-level loop nest: what it captures, its grid-stride or
warp-per-output decomposition, its reductions (warp shuffles); the launch constants.

A part of CudaEmitter (cuda_emitter.py), which mixes it in."""

from __future__ import annotations

import math as pymath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    FloatAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    Signedness,
)
from xdsl.ir import Operation, SSAValue

from opc.dialects.kinds import element_of
from opc.dialects.opc import int_width
from opc.dialects.opc_loops import CallOp, GemmOp, HandOutOp, RaiseStatusOp
from opc.errors import UnsupportedError
from opc.lowering.c_expressions import c_type
from opc.lowering.c_memory_emission import c_product, dynamic_size_operands, has_dynamic_dims
from opc.lowering.control_flow_lowering import HOST_ATTR
from opc.lowering.emitter_state import CudaEmitterState
from opc.lowering.row_kernel_lowering import ROW_KERNEL_ATTR

BLOCK = 256  # threads per block of the generated kernels
MAX_BLOCKS = 8192  # grid-stride loops cover the rest
WARP = 32
WARP_ROW_MAX = 1024  # a row kernel's rows up to this length get a warp each, longer ones a block

# One loop of a kernel's nest: (lower bound, trip count, step); the count is a C expression where
# it is a run-time size.
Trip = tuple[int, int | str, int]

# Ops that stay on the host; any other top-level op runs in a device kernel.
HOST_OPS = (memref.AllocOp, memref.DeallocOp, memref.ReinterpretCastOp, GemmOp, scf.ParallelOp, func.ReturnOp,
            arith.ConstantOp, memref.GetGlobalOp, CallOp, RaiseStatusOp, HandOutOp)  # fmt: skip

# Combines a warp reduction may reassociate, with a test for their identity.
COMBINES = {
    arith.AddfOp: lambda v: v == 0.0, arith.AddiOp: lambda v: v == 0,
    arith.MulfOp: lambda v: v == 1.0, arith.MuliOp: lambda v: v == 1,
    arith.MaximumfOp: lambda v: v == -pymath.inf, arith.MinimumfOp: lambda v: v == pymath.inf,
}  # fmt: skip
INT_EXTREMA = (arith.MaxSIOp, arith.MaxUIOp, arith.MinSIOp, arith.MinUIOp)

CONST_DECL = re.compile(r"^\s*const [\w ]+?\**\s*(\w+) = .*;$")


def is_host_value(v: SSAValue) -> bool:
    """A scalar the host computed before the kernel (a slice's run-time offset): passed by value."""
    return isinstance(v.owner, Operation) and HOST_ATTR in v.owner.attributes and not isinstance(v.type, MemRefType)


def launch(work: int | str, per: int, team: int = BLOCK) -> tuple[int, int | str]:
    """(threads, blocks) of a grid-stride launch over `work` items, `per` threads each; with a run-time
    `work` the blocks are counted on the host (opc_cuda_blocks, in the module's header)."""
    if isinstance(work, int):
        return min(team, work * per), min(MAX_BLOCKS, -(-work * per // team))
    return team, f"opc_cuda_blocks({work}, {per}, {team}, {MAX_BLOCKS})"


def shfl_type(t) -> str:
    """The __shfl_down_sync overload that carries a value of type t exactly."""
    if isinstance(t, IntegerType):
        unsigned = t.signedness.data == Signedness.UNSIGNED or t.width.data == 1
        if t.width.data == 64:
            return "unsigned long long" if unsigned else "long long"
        return "unsigned int" if unsigned else "int"
    return c_type(t)


def int_identity(op: Operation, t) -> int | None:
    if not isinstance(t, IntegerType):
        return None
    w, unsigned = t.width.data, isinstance(op, (arith.MaxUIOp, arith.MinUIOp))
    lo, hi = (0, (1 << w) - 1) if unsigned else (-(1 << (w - 1)), (1 << (w - 1)) - 1)
    return lo if isinstance(op, (arith.MaxSIOp, arith.MaxUIOp)) else hi


def is_identity(combine: Operation, init: SSAValue) -> bool:
    """Whether the accumulator's init is a constant identity of its combine, so a
    thread that folds no element contributes nothing when the partials meet."""
    if not isinstance(init.owner, arith.ConstantOp):
        return False
    attr = init.owner.value
    if not isinstance(attr, (IntegerAttr, FloatAttr)):
        return False
    value = attr.value.data
    kind = type(combine)
    if kind in COMBINES:
        return COMBINES[kind](value)
    # a signless constant: compare modulo 2^width (ui8's 255 is stored as -1)
    ident, width = int_identity(combine, combine.results[0].type), int_width(combine.results[0].type)
    return ident is not None and (value - ident) % (1 << width) == 0


def prune_unused(lines: list[str]) -> list[str]:
    """Drop `const T x = ...;` lines whose x is never read (nvcc warns #177 on them).

    Every such line the emitter writes is a pure expression, so dropping it is safe."""
    while True:
        text = "\n".join(lines)
        dead = set()
        for i, ln in enumerate(lines):
            m = CONST_DECL.match(ln)
            if m and len(re.findall(rf"\b{m.group(1)}\b", text)) == 1:
                dead.add(i)
        if not dead:
            return lines
        lines = [ln for i, ln in enumerate(lines) if i not in dead]


@dataclass
class Reduction:
    """A kernel body of the form  prefix; acc = scf.for(init) {...combine...}; suffix."""

    loop: scf.ForOp
    combine: Operation
    prefix: list[Operation]
    suffix: list[Operation]


class KernelEmission(CudaEmitterState):
    def emit_ParallelOp(self, op: scf.ParallelOp) -> None:
        if not self.in_host:
            raise NotImplementedError("CUDA emitter: nested scf.parallel")
        trips: list[Trip] = []
        for lb, ub, step in zip(op.lowerBound, op.upperBound, op.step):
            lo, st = self.constants.get(lb), self.constants.get(step)
            if ub in self.constants and lo is not None and st is not None:
                trips.append((lo, max(0, -(-(self.constants[ub] - lo) // st)), st))
            elif (lo, st) == (0, 1):  # a run-time extent: the trip count is the bound itself
                trips.append((0, self.name(ub), 1))
            else:
                raise UnsupportedError(f"@{self.function.sym_name.data}: scf.parallel: the CUDA target takes run-time "
                                       "loop bounds only from 0 by steps of 1")
        length = op.attributes.get(ROW_KERNEL_ATTR)
        row_length = length.value.data if isinstance(length, IntegerAttr) else None
        self.emit_kernel(list(zip(op.body.block.args, trips)), list(op.body.block.ops), row_length,
                         [ub for ub in op.upperBound if ub not in self.constants])

    @staticmethod
    def captures(body: list[Operation], ivs: list[SSAValue]) -> list[SSAValue]:
        """Values the body reads but does not define, in order of first use."""
        inside: set[SSAValue] = set(ivs)
        for top in body:
            for op in top.walk():
                inside.update(op.results)
                for region in op.regions:
                    for block in region.blocks:
                        inside.update(block.args)
        seen: dict[SSAValue, None] = {}
        for top in body:
            for op in top.walk():
                for v in op.operands:
                    if v not in inside:
                        seen[v] = None
        return list(seen)

    def emit_kernel(self, ivs: list[tuple[SSAValue, Trip]], body: list[Operation],
                    row_length: int | None = None, bounds: Sequence[SSAValue] = (),
                    results: Sequence[SSAValue] = ()) -> None:
        """A __global__ kernel for `body` over the nest `ivs`, and its launch. A run-time trip count
        is a C expression over the kernel's scalar parameters (the size parameters, the sizes the
        function computed on the host), read alike by the kernel and by the launch, which sizes its
        grid from it on the host and is skipped where it comes to no work. A one-thread kernel's
        `results` (scalars the host needs: CudaEmitter.kernel_results) go back through opc_results."""
        total = c_product([n for _, (_, n, _) in ivs])
        if total == 0:
            return
        name = f"opc_k_{self.fn_name}_{self.kernel_count}"
        self.kernel_count += 1
        consts, params, args = [], [], []
        for v in self.kernel_operands(body, [iv for iv, _ in ivs], bounds):
            if isinstance(v.owner, arith.ConstantOp):
                consts.append(v.owner)
            elif isinstance(v.type, MemRefType):
                const = "const " if v in self.const_ptrs else ""
                params.append(f"{const}{c_type(element_of(v))} *{self.name(v)}")
                args.append(self.name(v))
            elif v in self.host_scalars or is_host_value(v):
                params.append(f"const {c_type(v.type)} {self.name(v)}")
                args.append(self.name(v))
            else:
                what = v.owner.name if isinstance(v.owner, Operation) else "a block argument"
                raise UnsupportedError(f"@{self.function.sym_name.data}: {what}: the CUDA target cannot pass a "
                                       "value computed on the device to another kernel")
        if results:
            assert not ivs, "only a one-thread kernel hands scalars to the host"
            params.append("int64_t *opc_results")
            args.append("opc_results")
        reduction = self.match_reduction(body) if row_length is None else None
        host_lines, host_indent = self.lines, self.indent
        self.lines, self.indent, self.in_host = [], 0, False
        try:
            self.line(f'extern "C" __global__ void __launch_bounds__({BLOCK}) {name}({", ".join(params) or "void"}) {{')
            self.indent = 1
            for c in consts:
                self.emit_op(c)
            if row_length is not None:
                threads, blocks = self.row_kernel(ivs, total, body, row_length)
            elif reduction is None:
                self.grid_stride(ivs, total, body)
                self.hand_to_host(results)
                threads, blocks = launch(total, 1)
            else:  # (a count alone in its kernel: the lanes of a warp count)
                self.warp_per_output(ivs, total, reduction, results)
                threads, blocks = launch(total, WARP)
            self.indent = 0
            self.line("}")
            self.kernels.extend([*prune_unused(self.lines), ""])
        finally:
            self.lines, self.indent, self.in_host = host_lines, host_indent, True
        if isinstance(total, int):
            self.line(f"{name}<<<{blocks}, {threads}>>>({', '.join(args)});")
            self.line("OPC_CHECK(cudaGetLastError());")
            for v in results:  # waits for the kernel: what follows may size a buffer or a launch with it
                self.line(f"OPC_CHECK(cudaMemcpy(&{self.name(v)}, opc_results + {self.slots[v]}, sizeof "
                          f"{self.name(v)}, cudaMemcpyDeviceToHost));")
            return
        # a grid of no blocks is an invalid launch: no work, no launch
        self.line(f"if ({total} > 0) {{")
        self.line(f"  const unsigned opc_blocks = {blocks};")
        self.line(f"  {name}<<<opc_blocks, {threads}>>>({', '.join(args)});")
        self.line("  OPC_CHECK(cudaGetLastError());")
        self.line("}")

    def hand_to_host(self, results: Sequence[SSAValue]) -> None:
        """The kernel's results into their opc_results slots (memcpy: a slot holds any scalar of up
        to 8 bytes)."""
        for v in results:
            self.line(f"memcpy(opc_results + {self.slots[v]}, &{self.name(v)}, sizeof {self.name(v)});")

    def kernel_operands(self, body: list[Operation], ivs: list[SSAValue], bounds: Sequence[SSAValue]
                        ) -> list[SSAValue]:
        """What the kernel takes: the values its body reads, the run-time bounds of its nest, and the
        run-time sizes of the buffers it indexes (its offsets are computed from them)."""
        out: dict[SSAValue, None] = dict.fromkeys([*self.captures(body, ivs), *bounds])
        for v in list(out):
            if isinstance(v.type, MemRefType) and has_dynamic_dims(v):
                out.update(dict.fromkeys(dynamic_size_operands(v)))
        return list(out)

    def decompose(self, ivs: list[tuple[SSAValue, Trip]], flat: str) -> None:
        """Induction variables from the flat index, the last one fastest (row-major)."""
        inner: int | str = 1
        for k in reversed(range(len(ivs))):
            iv, (lo, n, st) = ivs[k]
            q = flat if inner == 1 else f"({flat} / {inner})"
            outer = c_product([m for _, (_, m, _) in ivs[:k]])
            r = q if outer == 1 else f"{q} % {n}"  # the outermost (or all outside it single): no modulo
            expr = r if (lo, st) == (0, 1) else f"{lo} + ({r}) * {st}"
            self.line(f"const int64_t {self.name(iv)} = {expr};")
            inner = c_product([inner, n])

    def grid_stride(self, ivs, total: int | str, body: list[Operation]) -> None:
        if total == 1 and not ivs:
            self.line("if (blockIdx.x != 0 || threadIdx.x != 0) return;")
            self.emit_ops(body)
            return
        self.line(f"for (int64_t opc_i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; opc_i < {total}; "
                  "opc_i += (int64_t)blockDim.x * gridDim.x) {")
        self.indent += 1
        self.decompose(ivs, "opc_i")
        self.emit_ops(body)
        self.indent -= 1
        self.line("}")

    def emit_ops(self, ops: list[Operation]) -> None:
        for op in ops:
            self.emit_op(op)

    def match_reduction(self, body: list[Operation]) -> Reduction | None:
        ops = [op for op in body if not isinstance(op, scf.ReduceOp)]
        loops = [i for i, op in enumerate(ops) if isinstance(op, scf.ForOp)]
        if len(loops) != 1:
            return None
        loop = ops[loops[0]]
        assert isinstance(loop, scf.ForOp)
        if len(loop.iter_args) != 1 or not isinstance(loop.iter_args[0].owner, arith.ConstantOp):
            return None
        if any(isinstance(o, memref.StoreOp) for o in loop.walk()):
            return None  # a scan (cumsum) stores every partial sum: one thread per line, in order
        combine = self.find_combine(loop)
        if combine is None:
            return None
        if not is_identity(combine, loop.iter_args[0]):
            return None
        return Reduction(loop, combine, ops[: loops[0]], ops[loops[0] + 1:])

    @staticmethod
    def find_combine(loop: scf.ForOp, k: int = 0) -> Operation | None:
        """The op that folds each element into carried value k, through nested loops."""
        acc = loop.body.block.args[1 + k]
        yielded = loop.body.block.last_op
        assert yielded is not None  # scf.for's body ends in its yield
        op = yielded.operands[k].owner
        if isinstance(op, scf.ForOp):  # a multi-axis reduction: the inner loop carries the same accumulator
            if len(op.iter_args) != 1 or op.iter_args[0] is not acc:
                return None
            return KernelEmission.find_combine(op)
        if not isinstance(op, Operation) or not isinstance(op, (*COMBINES, *INT_EXTREMA)) \
                or acc not in op.operands:
            return None
        return op

    def warp_per_output(self, ivs, total: int | str, red: Reduction, results: Sequence[SSAValue] = ()) -> None:
        self.line(f"const int opc_lane = threadIdx.x % {WARP};")
        self.line(f"for (int64_t opc_w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / {WARP}; opc_w < {total}; "
                  f"opc_w += ((int64_t)blockDim.x * gridDim.x) / {WARP}) {{")
        self.indent += 1
        self.decompose(ivs, "opc_w")
        self.emit_ops(red.prefix)
        self.warp_loop = red.loop
        self.emit_op(red.loop)
        self.warp_loop = None
        acc = self.name(red.loop.results[0])
        t = red.loop.results[0].type
        st = shfl_type(t)
        self.line(f"for (int opc_off = {WARP // 2}; opc_off > 0; opc_off /= 2) {{")
        self.indent += 1
        self.line(f"const {c_type(t)} opc_other = ({c_type(t)})__shfl_down_sync(0xffffffffu, ({st}){acc}, opc_off);")
        self.line(f"{acc} = {self.combine_expr(red.combine, acc, 'opc_other')};")
        self.indent -= 1
        self.line("}")
        self.line("if (opc_lane == 0) {")
        self.indent += 1
        self.emit_ops(red.suffix)
        self.hand_to_host(results)
        self.indent -= 1
        self.line("}")
        self.indent -= 1
        self.line("}")

    def combine_expr(self, op: Operation, a: str, b: str) -> str:
        """The combine's own table entry, applied to two partial results."""
        return self.expression_with(op, {op.operands[0]: a, op.operands[1]: b})

    def emit_ForOp(self, op: scf.ForOp) -> None:
        if self.row_team and op.parent_block() is self.row_body:
            self.row_pass(op)
            return
        if op is not self.warp_loop:
            super().emit_ForOp(op)
            return
        # The lanes of a warp take every 32nd iteration of the reduction's outer loop.
        iv, carried = op.body.block.args
        res = op.results[0]
        acc = self.name(res)
        self.line(f"{c_type(res.type)} {acc} = {self.name(op.iter_args[0])};")
        self.names[carried] = acc
        i, lb, ub, st = self.name(iv), self.name(op.lb), self.name(op.ub), self.name(op.step)
        self.line(f"for (int64_t {i} = {lb} + opc_lane * {st}; {i} < {ub}; {i} += {WARP} * {st}) {{")
        self.indent += 1
        self.yield_targets.append([acc])
        self.emit_block(op.body.block)
        self.yield_targets.pop()
        self.indent -= 1
        self.line("}")
