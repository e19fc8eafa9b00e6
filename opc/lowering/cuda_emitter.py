"""CUDA emitter: loop-level IR to one CUDA C++ translation unit.

It is the C emitter (c_emitter.py) with what differs on a GPU overridden; the
scalar expression table, loads, stores, constants and scf.for are shared.

- Each top-level `scf.parallel` nest becomes its own `__global__` kernel: its
  parameters are the buffers it captures, its body a grid-stride loop over the
  flattened iteration space, decomposed back into the induction variables.
  Ops a rank-0 result leaves at the top level of a function run as a
  one-thread kernel.
- A nest whose body is one reduction (an `scf.for` with an accumulator whose
  combine is associative and whose init is its identity: reduce_sum,
  reduce_max, dbias) becomes a warp-per-output kernel: the lanes stride the
  outermost reduction loop and the partial results meet by __shfl_down_sync.
- A row kernel of the schedule (the nest carries `opc.row_length`: softmax,
  layer norm, log_softmax and their backward composed from primitives) becomes
  one kernel with a team of threads per row: a warp for rows of up to
  WARP_ROW_MAX elements, a block of BLOCK threads otherwise, grid-stride over
  the rows. Each pass over the row (a top-level scf.for of the nest) is strided
  over the team; its accumulators meet by warp shuffles and, in a block, through
  one __shared__ slot per warp, so that every thread of the team holds the same
  per-row results and applies the elementwise consumers to its own elements.
- `opc_loops.gemm` launches the shared-memory tiled GEMM of
  runtime/opc_cuda_gemm.cuh with its epilogue (bias, activation, reserve).
- memref.alloc / dealloc are cudaMalloc / cudaFree; every CUDA call is checked
  with OPC_CHECK, which records the error and jumps to the cleanup label. All
  host locals are declared before the first check, as C++ forbids a goto past
  an initialisation.

Entry points per function NAME (all extern "C"):
  int opc_fn_NAME(device pointers: inputs, then outputs)  -> 0 or a cudaError_t
  int opc_fn_NAME_host(host pointers: inputs, then outputs) copies in, calls
      opc_fn_NAME, copies out
plus `const char *opc_cuda_error_string(int)` and `int opc_cuda_device_count(int *)`.
"""

from __future__ import annotations

import math as pymath
import re
from dataclasses import dataclass, field

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    Signedness,
)
from xdsl.ir import Operation, SSAValue

from opc.dialects.opc_loops import CallOp, GemmOp, RaiseStatusOp
from opc.lowering.abi import FunctionSignature, c_symbol
from opc.lowering.c_emitter import EXPRESSIONS, CEmitter, c_type, dtype_suffix
from opc.lowering.row_kernel_lowering import ROW_KERNEL_ATTR

BLOCK = 256  # threads per block of the generated kernels
MAX_BLOCKS = 8192  # grid-stride loops cover the rest
WARP = 32
WARP_ROW_MAX = 1024  # a row kernel's rows up to this length get a warp each, longer ones a block

# Ops that stay on the host; any other top-level op runs in a device kernel.
HOST_OPS = (memref.AllocOp, memref.DeallocOp, memref.ReinterpretCastOp, GemmOp, scf.ParallelOp, func.ReturnOp,
            arith.ConstantOp, memref.GetGlobalOp, CallOp, RaiseStatusOp)  # fmt: skip

# Combines a warp reduction may reassociate, with a test for their identity.
COMBINES = {
    arith.AddfOp: lambda v: v == 0.0, arith.AddiOp: lambda v: v == 0,
    arith.MulfOp: lambda v: v == 1.0, arith.MuliOp: lambda v: v == 1,
    arith.MaximumfOp: lambda v: v == -pymath.inf, arith.MinimumfOp: lambda v: v == pymath.inf,
}  # fmt: skip
INT_EXTREMA = (arith.MaxSIOp, arith.MaxUIOp, arith.MinSIOp, arith.MinUIOp)

CONST_DECL = re.compile(r"^\s*const [\w ]+?\**\s*(\w+) = .*;$")


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
    ident, width = int_identity(combine, combine.results[0].type), combine.results[0].type.width.data  # type: ignore[attr-defined]
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


@dataclass
class CudaEmitter(CEmitter):
    """Emits one CUDA C++ translation unit for a lowered module."""

    kernels: list[str] = field(default_factory=list)
    kernel_count: int = 0
    fn_name: str = ""
    warp_loop: scf.ForOp | None = None
    in_host: bool = True  # False while a kernel body is being written
    row_team: int = 0  # inside a row kernel: threads per row (WARP or BLOCK); 0 elsewhere
    row_body: object = None  # inside a row kernel: the nest's body block, whose scf.for are row passes
    row_passes: int = 0  # row passes emitted so far in the current kernel (names its __shared__ slots)
    shared_at: int = 0  # where the current row kernel's __shared__ declarations go in self.lines

    header = (
        "#include <stdint.h>\n#include <math.h>\n#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n"
        '#include <cuda_bf16.h>\n#include "opc_runtime.h"\n#include "opc_cuda_gemm.cuh"\n#include "opc_status.h"\n'
        '#include "opc_nn.cuh"\n\n'
        "/* Records a failed CUDA call's error and leaves through the cleanup label. */\n"
        "#define OPC_CHECK(call) do { cudaError_t opc_err_ = (call); "
        "if (opc_err_ != cudaSuccess) { status = (int)opc_err_; goto cleanup; } } while (0)\n\n"
        "[[maybe_unused]] static inline cudaError_t opc_cuda_free(void **p) "
        "{ cudaError_t e = cudaFree(*p); *p = NULL; return e; }\n\n"
        'extern "C" const char *opc_cuda_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }\n'
        'extern "C" int opc_cuda_device_count(int *count) { *count = 0; return (int)cudaGetDeviceCount(count); }\n'
    )

    # -- functions -------------------------------------------------------------

    def params(self, fn: func.FuncOp, prefix: str = "") -> list[str]:
        n_in = fn.attributes["opc.num_inputs"].value.data  # type: ignore[attr-defined]
        out = []
        for i, arg in enumerate(fn.args):
            t = arg.type
            assert isinstance(t, MemRefType)
            if i < n_in:
                self.const_ptrs.add(arg)
            out.append(f"{'const ' if i < n_in else ''}{c_type(t.element_type)} *{prefix}{self.name(arg)}")
        return out

    def prototype(self, fn: func.FuncOp) -> str:
        return f'extern "C" int {self.prefix}{c_symbol(fn.sym_name.data)}({", ".join(self.params(fn)) or "void"})'

    pack_buffers = False  # each intermediate a cudaMalloc of its own

    def emit_function(self, fn: func.FuncOp) -> FunctionSignature:
        """The C emitter's function (host side), with its kernels before it and the _host wrapper after."""
        sig = super().emit_function(fn)
        host = self.lines
        self.lines = []
        self.emit_host_wrapper(fn, fn.attributes["opc.num_inputs"].value.data)  # type: ignore[attr-defined]
        self.lines = [*self.kernels, *host, "", *self.lines]
        return sig

    def start_function(self, fn: func.FuncOp) -> None:
        super().start_function(fn)
        self.kernels, self.fn_name, self.kernel_count = [], c_symbol(fn.sym_name.data), 0

    def owned_buffers(self, fn: func.FuncOp) -> list[SSAValue]:
        # dense constants live in host arrays and are copied into device buffers of their own
        return [op.memref for op in fn.walk() if isinstance(op, (memref.AllocOp, memref.GetGlobalOp))]  # type: ignore[attr-defined]

    def declare_locals(self, fn: func.FuncOp, owned: list[SSAValue]) -> None:
        """Views too: C++ forbids a goto past an initialised declaration."""
        super().declare_locals(fn, owned)
        for v in (op for op in fn.walk() if isinstance(op, memref.ReinterpretCastOp)):
            const = "const " if self.is_const_view(v) else ""
            self.line(f"{const}{c_type(v.result.type.element_type)} *{self.name(v.result)} = NULL;")  # type: ignore[attr-defined]

    def emit_body(self, fn: func.FuncOp) -> None:
        self.emit_top_level(fn)
        self.line("OPC_CHECK(cudaDeviceSynchronize());")  # surfaces errors of the kernels themselves

    def free_statement(self, buf: SSAValue) -> str:
        return f"(void)cudaFree({self.name(buf)});"

    def is_const_view(self, op: memref.ReinterpretCastOp) -> bool:
        src = op.source
        while isinstance(src.owner, memref.ReinterpretCastOp):
            src = src.owner.source
        return src in self.const_ptrs

    def emit_top_level(self, fn: func.FuncOp) -> None:
        """Host ops in order; runs of other ops (rank-0 results) become one-thread kernels."""
        segment: list[Operation] = []
        for op in fn.body.block.ops:
            if isinstance(op, HOST_OPS):
                if segment:
                    self.emit_kernel([], segment)
                    segment = []
                self.emit_op(op)
            else:
                segment.append(op)
        if segment:
            self.emit_kernel([], segment)

    def emit_host_wrapper(self, fn: func.FuncOp, n_in: int) -> None:
        """opc_fn_NAME_host: device buffers for every argument, copies in, the call, copies out."""
        self.indent = 0
        entry = f"{self.prefix}{c_symbol(fn.sym_name.data)}"
        self.line(f'extern "C" int {entry}_host({", ".join(self.params(fn)) or "void"}) {{')
        self.indent = 1
        self.line("int status = 0;")
        args = list(fn.args)
        sizes = {}
        for a in args:
            t = a.type
            ct = c_type(t.element_type)  # type: ignore[attr-defined]
            sizes[a] = f"sizeof({ct}) * {max(1, pymath.prod(t.get_shape()))}"  # type: ignore[attr-defined]
            self.line(f"{ct} *d_{self.name(a)} = NULL;")
        for a in args:
            self.line(f"OPC_CHECK(cudaMalloc((void **)&d_{self.name(a)}, {sizes[a]}));")
        for a in args[:n_in]:
            self.line(f"OPC_CHECK(cudaMemcpy(d_{self.name(a)}, {self.name(a)}, {sizes[a]}, cudaMemcpyHostToDevice));")
        call_args = ", ".join(f"d_{self.name(a)}" for a in args)
        self.line(f"status = {entry}({call_args});")
        self.line("if (status != 0) goto cleanup;")
        for a in args[n_in:]:
            self.line(f"OPC_CHECK(cudaMemcpy({self.name(a)}, d_{self.name(a)}, {sizes[a]}, cudaMemcpyDeviceToHost));")
        self.indent = 0
        self.lines.append("cleanup:")
        self.indent = 1
        for a in args:
            self.line(f"(void)cudaFree(d_{self.name(a)});")
        self.line("return status;")
        self.indent = 0
        self.line("}")

    threads_support = ""  # the host side has no OpenMP regions
    profiled = False
    status_support = ("static thread_local int64_t opc_error_detail = 0;\n"
                      'extern "C" int64_t opc_error_value(void) { return opc_error_detail; }\n')

    # -- host ops ----------------------------------------------------------------

    def emit_CallOp(self, op: CallOp) -> None:
        self.line(f"OPC_CHECK(opc_cuda_nn_{op.callee.data}({self.call_args(op)}));")

    def emit_RaiseStatusOp(self, op: RaiseStatusOp) -> None:
        """The status record lives on the device: copy it back (this also waits for the kernels)."""
        s = self.name(op.status)
        self.line(f"{{ int64_t opc_status_host[2] = {{0, 0}}; OPC_CHECK(cudaMemcpy(opc_status_host, {s}, "
                  "sizeof opc_status_host, cudaMemcpyDeviceToHost));")
        self.line("  if (opc_status_host[0] != 0) { opc_error_detail = opc_status_host[1]; "
                  "status = (int)opc_status_host[0]; goto cleanup; } }")


    def emit_ConstantOp(self, op: arith.ConstantOp) -> None:
        if self.in_host:
            # top-level constants: bounds are read at emission time, kernels re-declare what they use
            if isinstance(op.result.type, IndexType):
                self.constants[op.result] = op.value.value.data  # type: ignore[attr-defined]
            return
        super().emit_ConstantOp(op)

    def emit_AllocOp(self, op: memref.AllocOp) -> None:
        t = op.memref.type
        n = max(1, pymath.prod(t.get_shape()))  # type: ignore[attr-defined]
        ct = c_type(t.element_type)  # type: ignore[attr-defined]
        self.line(f"OPC_CHECK(cudaMalloc((void **)&{self.name(op.memref)}, sizeof({ct}) * {n}));")

    def emit_GetGlobalOp(self, op: memref.GetGlobalOp) -> None:
        t = op.memref.type
        size = f"sizeof({c_type(t.element_type)}) * {max(1, pymath.prod(t.get_shape()))}"  # type: ignore[attr-defined]
        ptr, host = self.name(op.memref), self.global_symbol(op.name_.root_reference.data)
        self.const_ptrs.add(op.memref)
        self.line(f"OPC_CHECK(cudaMalloc((void **)&{ptr}, {size}));")
        self.line(f"OPC_CHECK(cudaMemcpy({ptr}, {host}, {size}, cudaMemcpyHostToDevice));")

    def emit_DeallocOp(self, op: memref.DeallocOp) -> None:
        self.line(f"OPC_CHECK(opc_cuda_free((void **)&{self.name(op.memref)}));")

    def emit_ReinterpretCastOp(self, op: memref.ReinterpretCastOp) -> None:
        if self.is_const_view(op):
            self.const_ptrs.add(op.result)
        self.line(f"{self.name(op.result)} = {self.name(op.source)};")

    def emit_GemmOp(self, op: GemmOp) -> None:
        suffix = dtype_suffix(op.out.type.element_type)  # type: ignore[attr-defined]
        self.line(f"OPC_CHECK(opc_cuda_gemm_{suffix}({self.gemm_args(op)}));")

    def emit_ParallelOp(self, op: scf.ParallelOp) -> None:
        if not self.in_host:
            raise NotImplementedError("CUDA emitter: nested scf.parallel")
        trips = []
        for lb, ub, step in zip(op.lowerBound, op.upperBound, op.step):
            lo, hi, st = self.const_index(lb), self.const_index(ub), self.const_index(step)
            trips.append((lo, max(0, -(-(hi - lo) // st)), st))
        length = op.attributes.get(ROW_KERNEL_ATTR)
        row_length = length.value.data if isinstance(length, IntegerAttr) else None
        self.emit_kernel(list(zip(op.body.block.args, trips)), list(op.body.block.ops), row_length)

    # -- kernels -------------------------------------------------------------------

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

    def emit_kernel(self, ivs: list[tuple[SSAValue, tuple[int, int, int]]], body: list[Operation],
                    row_length: int | None = None) -> None:
        total = pymath.prod(n for _, (_, n, _) in ivs)
        if total == 0:
            return
        name = f"opc_k_{self.fn_name}_{self.kernel_count}"
        self.kernel_count += 1
        consts, params, args = [], [], []
        for v in self.captures(body, [iv for iv, _ in ivs]):
            if isinstance(v.owner, arith.ConstantOp):
                consts.append(v.owner)
            elif isinstance(v.type, MemRefType):
                const = "const " if v in self.const_ptrs else ""
                params.append(f"{const}{c_type(v.type.element_type)} *{self.name(v)}")
                args.append(self.name(v))
            else:
                raise NotImplementedError(f"CUDA emitter: a kernel captures a host scalar {v}")
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
                threads = min(BLOCK, total)
                blocks = min(MAX_BLOCKS, -(-total // BLOCK))
            else:
                self.warp_per_output(ivs, total, reduction)
                threads = min(BLOCK, total * WARP)
                blocks = min(MAX_BLOCKS, -(-total * WARP // BLOCK))
            self.indent = 0
            self.line("}")
            self.kernels.extend([*prune_unused(self.lines), ""])
        finally:
            self.lines, self.indent, self.in_host = host_lines, host_indent, True
        self.line(f"{name}<<<{blocks}, {threads}>>>({', '.join(args)});")
        self.line("OPC_CHECK(cudaGetLastError());")

    def decompose(self, ivs: list[tuple[SSAValue, tuple[int, int, int]]], flat: str) -> None:
        """Induction variables from the flat index, the last one fastest (row-major)."""
        inner = 1
        for iv, (lo, n, st) in reversed(ivs):
            q = flat if inner == 1 else f"({flat} / {inner})"
            r = q if inner * n == pymath.prod(m for _, (_, m, _) in ivs) else f"{q} % {n}"
            expr = r if (lo, st) == (0, 1) else f"{lo} + ({r}) * {st}"
            self.line(f"const int64_t {self.name(iv)} = {expr};")
            inner *= n

    def grid_stride(self, ivs, total: int, body: list[Operation]) -> None:
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

    # -- warp reductions ---------------------------------------------------------------

    def match_reduction(self, body: list[Operation]) -> Reduction | None:
        ops = [op for op in body if not isinstance(op, scf.ReduceOp)]
        loops = [i for i, op in enumerate(ops) if isinstance(op, scf.ForOp)]
        if len(loops) != 1:
            return None
        loop = ops[loops[0]]
        assert isinstance(loop, scf.ForOp)
        if len(loop.iter_args) != 1 or not isinstance(loop.iter_args[0].owner, arith.ConstantOp):
            return None
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
        yielded = loop.body.block.last_op.operands[k]  # type: ignore[union-attr]
        op = yielded.owner
        if isinstance(op, scf.ForOp):  # a multi-axis reduction: the inner loop carries the same accumulator
            if len(op.iter_args) != 1 or op.iter_args[0] is not acc:
                return None
            return CudaEmitter.find_combine(op)
        if not isinstance(op, (*COMBINES, *INT_EXTREMA)) or acc not in op.operands:
            return None
        return op

    def warp_per_output(self, ivs, total: int, red: Reduction) -> None:
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
        self.indent -= 1
        self.line("}")
        self.indent -= 1
        self.line("}")

    def combine_expr(self, op: Operation, a: str, b: str) -> str:
        """The combine's own table entry, applied to two partial results."""
        lhs, rhs = op.operands[0], op.operands[1]
        saved = {v: self.names.get(v) for v in (lhs, rhs)}
        self.names[lhs], self.names[rhs] = a, b
        try:
            return EXPRESSIONS[type(op)](self, op)
        finally:
            for v, old in saved.items():
                if old is None:
                    del self.names[v]
                else:
                    self.names[v] = old

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


    # -- row kernels ---------------------------------------------------------------------

    def row_kernel(self, ivs, total: int, body: list[Operation], length: int) -> tuple[int, int]:
        """A team of threads per row, grid-stride over the rows; (threads, blocks) of the launch.

        The row loop's condition is uniform over a team (a warp, or the whole block),
        so the shuffles and __syncthreads of the passes are reached by all its threads."""
        team = WARP if length <= WARP_ROW_MAX else BLOCK
        self.line(f"const int opc_t = threadIdx.x % {team};  /* this thread's place in its row's team */")
        if team == WARP:
            self.line(f"for (int64_t opc_row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / {WARP}; "
                      f"opc_row < {total}; opc_row += ((int64_t)blockDim.x * gridDim.x) / {WARP}) {{")
            threads, blocks = min(BLOCK, total * WARP), min(MAX_BLOCKS, -(-total * WARP // BLOCK))
        else:
            self.line(f"for (int64_t opc_row = blockIdx.x; opc_row < {total}; opc_row += gridDim.x) {{")
            threads, blocks = BLOCK, min(MAX_BLOCKS, total)
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
            self.line(f"{acc} = {self.combine_expr(c, acc, f'opc_o{k}')};")  # type: ignore[arg-type]
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
            self.line(f"{acc} = {self.combine_expr(c, acc, f'opc_o{k}')};")  # type: ignore[arg-type]
        self.indent -= 1
        self.line("}")
        self.line("__syncthreads();  /* every thread has read the slots before the next row writes them */")

    def emit_StoreOp(self, op: memref.StoreOp) -> None:
        """A per-row result stored between the passes: one thread of the team writes it."""
        if self.row_team and op.parent_block() is self.row_body:
            self.line(f"if (opc_t == 0) {self.name(op.memref)}[{self.offset(op.memref, op.indices)}] = "
                      f"{self.name(op.value)};")
            return
        super().emit_StoreOp(op)

    def emit_AllocaOp(self, op: memref.AllocaOp) -> None:
        raise NotImplementedError("CUDA emitter: row buffers (the CUDA lowering recomputes instead)")


def emit_cuda(module: ModuleOp) -> tuple[str, list[FunctionSignature]]:
    """CUDA C++ source of a lowered module and the signatures of its functions."""
    return CudaEmitter().emit_module(module)
