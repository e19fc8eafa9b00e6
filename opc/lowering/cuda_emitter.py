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

- Run-time (`?`) sizes (opc/lowering/size_lowering.py): the size parameters follow the
  outputs, as in the C code (so the binding is the same). A kernel takes the run-time trip
  counts of its nest and the sizes of the views it indexes as arguments; the host computes
  the sizes once, counts the blocks of each launch from them (opc_cuda_blocks) and skips a
  launch of no work; a buffer with `?` dims is cudaMalloc'd at its run-time size.
- Sizes that depend on the data (data_size_lowering.py) and sizes read from values: the scalars a
  one-thread kernel computes that the host needs (a count, before the result is allocated at it)
  go back through a device slot each (kernel_results), copied after the launch into a host local
  that later launches pass by value. The _host wrapper copies the found sizes back before the
  results, and copies a handed result (allocated by the function) into a malloc'd host buffer.

Entry points per function NAME (all extern "C"):
  int opc_fn_NAME(device pointers: inputs, then outputs; then the sizes)  -> 0 or a cudaError_t
  int opc_fn_NAME_host(host pointers: inputs, then outputs; then the sizes) copies in, calls
      opc_fn_NAME, copies out
plus `const char *opc_cuda_error_string(int)` and `int opc_cuda_device_count(int *)`.
"""

from __future__ import annotations

import math as pymath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    IndexType,
    IntegerType,
    MemRefType,
    ModuleOp,
)
from xdsl.ir import Operation, SSAValue

from opc.dialects.kinds import element_of, shape_of
from opc.dialects.opc import int_of
from opc.dialects.opc_loops import CallOp, CheckBoundOp, CheckIndexOp, GemmOp, HandOutOp, RaiseStatusOp
from opc.lowering.abi import RELEASE_FN, FunctionSignature, c_symbol
from opc.lowering.build import c_type_of
from opc.lowering.c_control_emission import is_host_control
from opc.lowering.c_emitter import CEmitter
from opc.lowering.c_expressions import EXPRESSIONS, c_type, dtype_suffix
from opc.lowering.control_flow_lowering import HOST_ATTR
from opc.lowering.cuda_kernel_emission import (
    HOST_OPS,
    KernelEmission,
)
from opc.lowering.cuda_row_emission import RowKernelEmission
from opc.lowering.size_lowering import function_found, function_handed, function_shapes
from opc.symbolic import evaluate

SYMBOL_TERM = re.compile(r"\b[A-Za-z_]\w*\b")  # a size symbol in a shape's polynomial text


@dataclass
class CudaEmitter(KernelEmission, RowKernelEmission, CEmitter):
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
    plan: list[Operation | list[Operation]] = field(default_factory=list)  # top_level_plan of the function
    slots: dict[SSAValue, int] = field(default_factory=dict)  # kernel_results: value -> its opc_results slot

    header = (
        "#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n#include <math.h>\n"
        "#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n"
        '#include <cuda_bf16.h>\n#include "opc_runtime.h"\n#include "opc_cuda_gemm.cuh"\n#include "opc_status.h"\n'
        '#include "opc_nn.cuh"\n\n'
        "/* Records a failed CUDA call's error and leaves through the cleanup label. */\n"
        "#define OPC_CHECK(call) do { cudaError_t opc_err_ = (call); "
        "if (opc_err_ != cudaSuccess) { status = (int)opc_err_; goto cleanup; } } while (0)\n\n"
        "[[maybe_unused]] static inline cudaError_t opc_cuda_free(void **p) "
        "{ cudaError_t e = cudaFree(*p); *p = NULL; return e; }\n"
        "/* The blocks of a launch over a run-time amount of work (> 0), `per` threads an item: at most `most`. */\n"
        "[[maybe_unused]] static inline unsigned opc_cuda_blocks(int64_t work, int64_t per, int64_t threads, "
        "int64_t most) {\n  const int64_t b = (work * per + threads - 1) / threads;\n"
        "  return (unsigned)(b < most ? b : most);\n}\n\n"
        'extern "C" const char *opc_cuda_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }\n'
        'extern "C" int opc_cuda_device_count(int *count) { *count = 0; return (int)cudaGetDeviceCount(count); }\n'
        "/* The host copy of a result a function handed out (sig.handed), freed with its last array. */\n"
        f'extern "C" void {RELEASE_FN}(void *p) {{ free(p); }}\n'
    )

    # -- functions -------------------------------------------------------------

    def params(self, fn: func.FuncOp, prefix: str = "") -> list[str]:
        """Buffers (inputs const), then the size parameters as the C emitter has them (the same ABI)."""
        n_in = int_of(fn.attributes["opc.num_inputs"])
        out = []
        for i, arg in enumerate(fn.args):
            t = arg.type
            if isinstance(t, IndexType):  # a size parameter (opc/lowering/size_lowering.py)
                out.append(f"const int64_t {self.name(arg)}")
                continue
            assert isinstance(t, MemRefType)
            if i < n_in:
                self.const_ptrs.add(arg)
            out.append(f"{'const ' if i < n_in else ''}{c_type(t.element_type)} *{prefix}{self.name(arg)}")
        return out

    def prototype(self, fn: func.FuncOp) -> str:
        return f'extern "C" int {self.prefix}{c_symbol(fn.sym_name.data)}({", ".join(self.params(fn)) or "void"})'

    pack_buffers = False  # each intermediate a cudaMalloc of its own
    memory_support = ""
    binds_data = False  # constants stay C text: nvcc's build has no data files (c_data.py)
    # saved loop values: device buffers to the host stack and back (cudaMemcpyDefault: unified addressing)
    stack_macros = ("#define OPC_STACK_COPY(dst, src, n) "
                    "do { if (cudaMemcpy(dst, src, n, cudaMemcpyDefault) != cudaSuccess) return 1; } while (0)\n"
                    "#define OPC_STACK_OOM(n) ((void)(n))\n")
    stack_oom_status = 2  # cudaErrorMemoryAllocation

    def emit_function(self, fn: func.FuncOp) -> FunctionSignature:
        """The C emitter's function (host side), with its kernels before it and the _host wrapper after."""
        sig = super().emit_function(fn)
        host = self.lines
        self.lines = []
        self.emit_host_wrapper(fn, int_of(fn.attributes["opc.num_inputs"]))
        self.lines = [*self.kernels, *host, "", *self.lines]
        return sig

    def start_function(self, fn: func.FuncOp) -> None:
        super().start_function(fn)
        self.kernels, self.fn_name, self.kernel_count = [], c_symbol(fn.sym_name.data), 0
        self.host_scalars = {a for a in fn.args if isinstance(a.type, IndexType)}

    def owned_buffers(self, fn: func.FuncOp) -> list[SSAValue]:
        # dense constants live in host arrays and are copied into device buffers of their own
        return [op.memref for op in fn.walk() if isinstance(op, (memref.AllocOp, memref.GetGlobalOp))]

    def declare_locals(self, fn: func.FuncOp, owned: list[SSAValue]) -> None:
        """Views too: C++ forbids a goto past an initialised declaration. The sizes the function
        computes from its size parameters (size_lowering.py puts them at its top) are computed
        here, before any check, on the host: launches, allocations and kernels read them."""
        super().declare_locals(fn, owned)
        for v in (op for op in fn.walk() if isinstance(op, memref.ReinterpretCastOp)):
            const = "const " if self.is_const_view(v) else ""
            # maybe_unused: a loop's result is viewed with its run-time sizes, read or not
            self.line(f"[[maybe_unused]] {const}{c_type(element_of(v.result))} *{self.name(v.result)} = NULL;")
        for op in fn.body.block.ops:
            if self.is_host_scalar(op):
                r = op.results[0]  # maybe_unused: a view's stride is not read by the offsets
                self.line(f"[[maybe_unused]] const {c_type(r.type)} {self.name(r)} = {self.host_expression(op)};")
                self.host_scalars.add(r)
        self.plan = self.top_level_plan(fn)
        self.slots = {v: k for k, v in enumerate(v for step in self.plan if isinstance(step, list)
                                                 for v in self.kernel_results(fn, step))}
        if self.slots:
            self.line("int64_t *opc_results = NULL;")
        for v in self.slots:  # set when its kernel has run: later kernels take it as a host scalar
            self.line(f"{c_type(v.type)} {self.name(v)}{{}};")
            self.host_scalars.add(v)

    def host_expression(self, op: Operation) -> str:
        """op's table entry with its constant operands as numbers (the host declares no constants;
        kernels re-declare theirs under their own names)."""
        return self.expression_with(op, {v: str(int_of(v.owner.value)) for v in op.operands
                                         if isinstance(v.owner, arith.ConstantOp)})

    def is_host_scalar(self, op: Operation) -> bool:
        """An integer computation over the size parameters (and constants, and other such values): a
        run-time size, or a number made of sizes (a mean's count). A static function has none."""
        def integer(v: SSAValue) -> bool:
            return isinstance(v.type, (IndexType, IntegerType))

        def constant(v: SSAValue) -> bool:
            return isinstance(v.owner, arith.ConstantOp) and integer(v)

        return (type(op) in EXPRESSIONS and len(op.results) == 1 and integer(op.results[0])
                and all(v in self.host_scalars or constant(v) for v in op.operands)
                and any(v in self.host_scalars for v in op.operands))

    def emit_body(self, fn: func.FuncOp) -> None:
        if self.slots:  # the scalars kernels hand to the host (kernel_results)
            self.line(f"OPC_CHECK(cudaMalloc((void **)&opc_results, sizeof(int64_t) * {len(self.slots)}));")
        self.emit_top_level(fn)
        self.line("OPC_CHECK(cudaDeviceSynchronize());")  # surfaces errors of the kernels themselves

    def cleanup_lines(self) -> list[str]:
        return ["(void)cudaFree(opc_results);"] if self.slots else []

    def free_statement(self, buf: SSAValue) -> str:
        return f"(void)cudaFree({self.name(buf)});"

    def is_const_view(self, op: memref.ReinterpretCastOp) -> bool:
        src = op.source
        while isinstance(src.owner, memref.ReinterpretCastOp):
            src = src.owner.source
        return src in self.const_ptrs

    def top_level_plan(self, fn: func.FuncOp) -> list[Operation | list[Operation]]:
        """fn's top-level ops in order as the host runs them: host ops one by one, each run of other
        ops (rank-0 results, a data size's sequential passes) as a list, one one-thread kernel.
        The sizes computed with the locals are left out."""
        plan: list[Operation | list[Operation]] = []
        for op in fn.body.block.ops:
            if op.results and op.results[0] in self.host_scalars:
                continue  # computed with the locals
            host = isinstance(op, HOST_OPS) or is_host_control(op) or HOST_ATTR in op.attributes
            if host or (isinstance(op, arith.ConstantOp) and HOST_ATTR not in op.attributes):
                plan.append(op)  # a constant is no boundary: a kernel re-declares the constants it reads
            elif plan and isinstance(plan[-1], list):
                plan[-1].append(op)
            else:
                plan.append([op])
        return plan

    def kernel_results(self, fn: func.FuncOp, segment: list[Operation]) -> list[SSAValue]:
        """The scalars a one-thread kernel computes that the host or a later kernel reads (a data
        size's count, k read from its tensor): the kernel writes each to a slot of opc_results and
        the host copies it back into a local of the same name after the launch."""
        inside = set(segment)

        def top(user: Operation) -> Operation:
            while user.parent_block() is not fn.body.block:
                user = cast(Operation, user.parent_op())
            return user

        return [r for op in segment for r in op.results if not isinstance(r.type, MemRefType)
                and any(top(use.operation) not in inside for use in r.uses)]

    def emit_top_level(self, fn: func.FuncOp) -> None:
        """The plan: host ops in order, each run of other ops one kernel (its results to the host)."""
        for step in self.plan:
            if isinstance(step, list):
                self.emit_kernel([], step, results=[v for v in self.slots if v.owner in step])
            else:
                self.emit_op(step)

    def emit_host_wrapper(self, fn: func.FuncOp, n_in: int) -> None:
        """opc_fn_NAME_host: device buffers for every argument, copies in, the call, copies out.
        With run-time sizes, each buffer's element count is its shape's polynomial over them. A
        result holding a data size (sig.found) is allocated at the size's bound and copied out at
        the size the call found (the found output, copied back first); a handed one (sig.handed: no
        bound) comes back as the device buffer's address, is copied into a malloc'd host buffer
        whose address goes into its handle (the binding frees it: opc_release), and is cudaFree'd."""
        self.indent = 0
        entry = f"{self.prefix}{c_symbol(fn.sym_name.data)}"
        self.line(f'extern "C" int {entry}_host({", ".join(self.params(fn)) or "void"}) {{')
        self.indent = 1
        self.line("int status = 0;")
        args = [a for a in fn.args if isinstance(a.type, MemRefType)]
        shapes = function_shapes(fn) or [shape_of(a) for a in args]
        found = function_found(fn)
        handed = {args[n_in + i]: c_type_of(dtype) for i, dtype in function_handed(fn).items()}
        at_bound = {name: f"({c_symbols(bound)})" for name, bound in found if bound != "?"}
        came_to = {name: f"{self.name(args[-1])}[{k}]" for k, (name, _) in enumerate(found)}
        for a in args:
            self.line(f"{c_type(element_of(a))} *d_{self.name(a)} = NULL;")
        for a in handed:
            self.line(f"void *h_{self.name(a)} = NULL, *dh_{self.name(a)} = NULL;")
        for a, shape in zip(args, shapes):
            n = 1 if a in handed else size_product(shape, at_bound)
            count = max(1, n) if isinstance(n, int) else f"opc_max1({n})"
            self.line(f"OPC_CHECK(cudaMalloc((void **)&d_{self.name(a)}, sizeof({c_type(element_of(a))}) * {count}));")
        for a in handed:  # no address until the call hands one out: nothing to free
            self.line(f"OPC_CHECK(cudaMemset(d_{self.name(a)}, 0, sizeof(int64_t)));")
        for a, shape in zip(args[:n_in], shapes):
            self.line(f"OPC_CHECK(cudaMemcpy(d_{self.name(a)}, {self.name(a)}, {self.bytes(a, shape)}, "
                      "cudaMemcpyHostToDevice));")
        call_args = ", ".join([*(f"d_{self.name(a)}" for a in args),
                               *(self.name(a) for a in fn.args if isinstance(a.type, IndexType))])
        self.line(f"status = {entry}({call_args});")
        for a in handed:  # read even after a failure, so that cleanup frees what the call handed out
            h = self.name(a)
            self.line(f"{{ int64_t opc_at = 0; const cudaError_t opc_e = cudaMemcpy(&opc_at, d_{h}, sizeof opc_at, "
                      f"cudaMemcpyDeviceToHost); dh_{h} = (void *)(uintptr_t)opc_at;")
            self.line("  if (status == 0 && opc_e != cudaSuccess) status = (int)opc_e; }")
        self.line("if (status != 0) goto cleanup;")
        outs = list(zip(args[n_in:], shapes[n_in:]))
        for a, shape in outs[-1:] + outs[:-1] if found else outs:  # the found sizes first: they size the rest
            if a not in handed:
                self.line(f"OPC_CHECK(cudaMemcpy({self.name(a)}, d_{self.name(a)}, {self.bytes(a, shape, came_to)}, "
                          "cudaMemcpyDeviceToHost));")
                continue
            h, n = self.name(a), size_product(shape, came_to)
            self.line(f"h_{h} = malloc(sizeof({handed[a]}) * {max(1, n) if isinstance(n, int) else f'opc_max1({n})'});")
            self.line(f"if (h_{h} == NULL) {{ status = (int)cudaErrorMemoryAllocation; goto cleanup; }}")
            self.line(f"OPC_CHECK(cudaMemcpy(h_{h}, dh_{h}, sizeof({handed[a]}) * {n}, cudaMemcpyDeviceToHost));")
        for a in handed:  # every copy made: the results are the caller's
            self.line(f"{self.name(a)}[0] = (int64_t)(uintptr_t)h_{self.name(a)}; h_{self.name(a)} = NULL;")
        self.indent = 0
        self.lines.append("cleanup:")
        self.indent = 1
        for a in args:
            self.line(f"(void)cudaFree(d_{self.name(a)});")
        for a in handed:
            self.line(f"free(h_{self.name(a)});")
            self.line(f"(void)cudaFree(dh_{self.name(a)});")
        self.line("return status;")
        self.indent = 0
        self.line("}")

    def bytes(self, a: SSAValue, shape: Sequence[int | str], names: dict[str, str] | None = None) -> str:
        """What is copied of argument `a` of `shape`: exactly the array (maybe nothing)."""
        n = size_product(shape, names)
        return f"sizeof({c_type(element_of(a))}) * {max(1, n) if isinstance(n, int) else n}"

    threads_support = ""  # the host side has no OpenMP regions
    frozen_support = ""  # nor packed weights kept between calls
    profiled = False
    status_support = ("static thread_local int64_t opc_error_detail = 0;\n"
                      'extern "C" int64_t opc_error_value(void) { return opc_error_detail; }\n')

    # -- host ops ----------------------------------------------------------------

    def emit_op(self, op: Operation) -> None:
        """Control flow's scalars on the host: a load or store of a device buffer is a copy."""
        if HOST_ATTR in op.attributes and isinstance(op, memref.LoadOp):
            r = op.res
            at = self.offset(op.memref, op.indices)
            self.line(f"{c_type(r.type)} {self.name(r)};")
            self.line(f"OPC_CHECK(cudaMemcpy(&{self.name(r)}, {self.name(op.memref)} + {at}, sizeof {self.name(r)}, "
                      "cudaMemcpyDeviceToHost));")
        elif HOST_ATTR in op.attributes and isinstance(op, memref.StoreOp):
            at = self.offset(op.memref, op.indices)
            v = self.name(op.value)
            self.line(f"{{ const {c_type(op.value.type)} opc_v = {v}; OPC_CHECK(cudaMemcpy({self.name(op.memref)} + "
                      f"{at}, &opc_v, sizeof opc_v, cudaMemcpyHostToDevice)); }}")
        elif HOST_ATTR in op.attributes:  # C++ forbids a goto (to cleanup) past an initialised declaration
            at = len(self.lines)
            super().emit_op(op)
            # a host constant may go unread (a tensor.dim's index once the size is known)
            unread = "[[maybe_unused]] " if isinstance(op, arith.ConstantOp) else ""
            self.lines[at:] = [unread + uninitialised(line) for line in self.lines[at:]]
        else:
            super().emit_op(op)

    def emit_HandOutOp(self, op: HandOutOp) -> None:
        """The device buffer's address into the handle (device memory): the _host wrapper copies
        the result out at that address and frees it."""
        buf = self.name(op.buffer)
        self.line(f"{{ const int64_t opc_at = (int64_t)(uintptr_t){buf}; OPC_CHECK(cudaMemcpy({self.name(op.handle)}, "
                  f"&opc_at, sizeof opc_at, cudaMemcpyHostToDevice)); }} {buf} = NULL;")

    def emit_CheckIndexOp(self, op: CheckIndexOp) -> None:
        """Kept where its result goes unread (a count checked against a size): the check writes the
        status, which prune_unused's pure `const` lines do not."""
        at = len(self.lines)
        super().emit_CheckIndexOp(op)
        self.lines[at:] = [re.sub(r"^(\s*)const ", r"\1[[maybe_unused]] const ", ln) for ln in self.lines[at:]]

    def emit_CheckBoundOp(self, op: CheckBoundOp) -> None:
        """A size read from a tensor, checked on the host: a constant bound is a number there (the
        host declares no constants)."""
        v = self.name(op.value)
        bound = self.constants.get(op.bound, self.name(op.bound))
        self.line(f"if ({v} < 0 || {v} >= {bound}) {{ opc_error_detail = {v}; status = {op.code.value.data}; "
                  "goto cleanup; }")

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
        if self.in_host and HOST_ATTR not in op.attributes:
            # top-level constants: bounds are read at emission time, kernels re-declare what they use
            if isinstance(op.result.type, IndexType):
                self.constants[op.result] = int_of(op.value)
            return
        super().emit_ConstantOp(op)

    def emit_AllocOp(self, op: memref.AllocOp) -> None:
        """A device buffer of its run-time size where it has one; freed at cleanup on every exit."""
        ct = c_type(op.memref.type.element_type)
        n = self.element_count(op.memref)
        self.line(f"OPC_CHECK(cudaMalloc((void **)&{self.name(op.memref)}, sizeof({ct}) * {n}));")

    def emit_GetGlobalOp(self, op: memref.GetGlobalOp) -> None:
        t = op.memref.type
        size = f"sizeof({c_type(t.element_type)}) * {max(1, pymath.prod(t.get_shape()))}"
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
        suffix = dtype_suffix(element_of(op.out))
        self.line(f"OPC_CHECK(opc_cuda_gemm_{suffix}({self.gemm_args(op)}));")


    # -- kernels -------------------------------------------------------------------






    # -- warp reductions ---------------------------------------------------------------







    # -- row kernels ---------------------------------------------------------------------

    def emit_StoreOp(self, op: memref.StoreOp) -> None:
        """A per-row result stored between the passes: one thread of the team writes it."""
        if self.row_team and op.parent_block() is self.row_body:
            self.line(f"if (opc_t == 0) {self.name(op.memref)}[{self.offset(op.memref, op.indices)}] = "
                      f"{self.name(op.value)};")
            return
        super().emit_StoreOp(op)

    def emit_AllocaOp(self, op: memref.AllocaOp) -> None:
        raise NotImplementedError("CUDA emitter: row buffers (the CUDA lowering recomputes instead)")


def size_product(shape: Sequence[int | str], names: dict[str, str] | None = None) -> int | str:
    """The element count of a shape as the binding stores it (ints; a `?` dim's polynomial as text,
    `n0*4 + 1`) in C over the size parameters (opc_n0, ...), a data size as `names` gives it, or its
    number where it is static."""
    if all(isinstance(d, int) for d in shape):
        return pymath.prod(cast("Sequence[int]", shape))
    factors = []
    for d in shape:
        if isinstance(d, int) or not SYMBOL_TERM.search(d):
            factors.append(str(evaluate(d, {})))
        else:
            factors.append(f"({c_symbols(d, names)})")
    return " * ".join(factors)


def c_symbols(poly: str, names: dict[str, str] | None = None) -> str:
    """A size polynomial's text in C: each symbol as `names` gives it, else its size parameter."""
    return SYMBOL_TERM.sub(lambda m: (names or {}).get(m.group(0), f"opc_{m.group(0)}"), poly)


def uninitialised(line: str) -> str:
    """`const T x = e;` as `T x; x = e;` (a host scalar of control flow, declared where it is computed)."""
    m = re.fullmatch(r"(\s*)(?:const )?(\w[\w ]*?) (\w+) = (.*);", line)
    return f"{m[1]}{m[2]} {m[3]}; {m[3]} = {m[4]};" if m else line


def emit_cuda(module: ModuleOp) -> tuple[str, list[FunctionSignature]]:
    """CUDA C++ source of a lowered module and the signatures of its functions."""
    return CudaEmitter().emit_module(module)
