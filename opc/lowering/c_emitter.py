"""C emitter: loop-level IR (memref/scf/arith/math + opc_loops) to C99.

The scalar ops are a table from op class to a C expression template
(c_expressions.py); loops (c_loop_emission.py), loads, stores and allocations
(c_memory_emission.py), GEMM calls, runtime calls and calls of a device's own
kernels (c_call_emission.py) have small methods of their own, mixed into CEmitter
here with the module, function and block structure. The CUDA emitter
(cuda_emitter.py) overrides what a GPU does differently. An op without an entry
fails loudly, naming it.
"""

from __future__ import annotations

import math as pymath
import re
from dataclasses import dataclass, field
from typing import NamedTuple, cast

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from opc.dialects.kinds import element_of, shape_of
from opc.dialects.opc import DYNAMIC, int_of
from opc.dialects.opc_loops import (
    CallOp,
    ExternalCallOp,
    GemmOp,
    HandOutOp,
    RaiseStatusOp,
    function_errors,
)
from opc.dtypes import numpy_name
from opc.lowering.abi import ENTRY_PREFIX, FROZEN_FN, OOM_FN, RELEASE_FN, SET_THREADS_FN, FunctionSignature
from opc.lowering.arena_plan import arena_offsets, live_ranges
from opc.lowering.c_call_emission import KERNEL_HOST, CallEmission
from opc.lowering.c_control_emission import (
    C_STACK_MACROS,
    ControlEmission,
    control_support,
    is_host_control,
    uses_stack,
    watches_sigint,
)
from opc.lowering.c_data import DATA_MIN_BYTES, constant_bytes, data_definition, data_file
from opc.lowering.c_expressions import (
    ARENA_ALIGN,
    EXPRESSIONS,
    VECTOR_F32_MATH,
    VECTOR_F64_MATH,
    buffer_bytes,
    c_constant,
    c_type,
    float_fn,
)
from opc.lowering.c_loop_emission import LoopEmission
from opc.lowering.c_memory_emission import (
    MemoryEmission,
    c_product,
    dynamic_size_operands,
    has_dynamic_dims,
    start_size,
)
from opc.lowering.c_text import c_comment, c_identifier, c_string, c_symbol
from opc.lowering.size_lowering import (
    function_derived,
    function_found,
    function_handed,
    function_shapes,
    function_sizes,
)
from opc.transforms.opc_outline_control_flow import in_place_pairs, is_body

# ---------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------


# The arena of a call, kept per thread between calls (grow only): a block's intermediates
# (66 MB for a transformer block's value_and_grad) are more than glibc's largest mmap threshold
# (32 MB), so an arena malloc'd and freed per call was mmapped afresh each time and every page of
# it faulted in again (16,000 faults, a third of the call). Per thread, so that calls from
# several threads do not share it; a module's entry points run one at a time on a thread.
# A failed allocation (the arena, an intermediate of its own) records its size in opc_oom_bytes
# and returns status 1: the binding raises MemoryError naming the size (abi.OOM_FN). The arena
# is then empty, so the thread's next call allocates afresh.
ARENA_SUPPORT = f"""static __thread char *opc_arena_buf = NULL;
static __thread size_t opc_arena_cap = 0;
static __thread int64_t opc_oom_bytes = 0;
int64_t {OOM_FN}(void) {{ return opc_oom_bytes; }}
void {RELEASE_FN}(void *p) {{ free(p); }}
static inline size_t opc_arena_up(size_t n) {{ return (n + {ARENA_ALIGN - 1}) / {ARENA_ALIGN} * {ARENA_ALIGN}; }}
static char *opc_arena_get(size_t n) {{
  if (opc_arena_cap >= n) return opc_arena_buf;
  free(opc_arena_buf);
  opc_arena_cap = 0;
  opc_arena_buf = (char *)aligned_alloc({ARENA_ALIGN}, n);
  if (opc_arena_buf) opc_arena_cap = n;
  else opc_oom_bytes = (int64_t)n;
  return opc_arena_buf;
}}
"""


@dataclass
class CEmitter(LoopEmission, MemoryEmission, CallEmission, ControlEmission):
    """Emits one C translation unit for a lowered module."""

    lines: list[str] = field(default_factory=list)
    resets_stack: bool = False  # the module saves loop values (opc_stack): each exported call starts it empty
    # the module's while loops watch SIGINT: each exported call starts with no Ctrl-C of its own (one
    # handled before it went to Python's KeyboardInterrupt, and must not end this call's loops)
    clears_sigint: bool = False
    stack_macros = C_STACK_MACROS  # how a saved loop value goes on and off the stack (c_control_emission.py)
    names: dict[SSAValue, str] = field(default_factory=dict)
    constants: dict[SSAValue, int] = field(default_factory=dict)  # known index constants
    indent: int = 1
    prefix: str = ENTRY_PREFIX
    const_ptrs: set[SSAValue] = field(default_factory=set)
    yield_targets: list[list[str]] = field(default_factory=list)  # scf.for result variables, innermost last
    outlined: list[str] = field(default_factory=list)  # the outlined kernels of the function being emitted
    arena: dict[SSAValue, int | str] = field(default_factory=dict)  # intermediate buffer -> its offset (C) in the arena
    block_order: dict[Operation, int] = field(default_factory=dict)  # the entry block's ops, in order
    pack_buffers = True  # intermediates in one allocation (the CUDA emitter allocates each on the device)
    memory_support = ARENA_SUPPORT  # the arena and opc_oom_bytes (the CUDA emitter has neither)
    profiled = True  # every kernel call timed while profiling is on (opc/profiler.py); not in CUDA modules
    profile_labels: list[str] = field(default_factory=list)  # "function\tkind: ops" of each timed kernel
    kernel_shapes: dict[str, str] = field(default_factory=dict)  # a kernel's text up to local names -> its name
    data: dict[str, bytes] = field(default_factory=dict)  # large constants' files (c_data.py) -> their bytes
    binds_data = True  # large constants as .incbin data (c_data.py); the CUDA build keeps them as text

    header = ('#include <stdint.h>\n#include <stdlib.h>\n#include <math.h>\n'
              '#include "opc_runtime.h"\n#include "opc_gemm_api.h"\n#include "opc_status.h"\n#include "opc_nn_api.h"\n'
              '#include "opc_threads.h"\n#include "opc_frozen.h"\n')
    # opc's thread count for this module's parallel regions and its runtime objects (opc/threads.py)
    threads_support = f"void {SET_THREADS_FN}(int n) {{ opc_rt_threads = n; }}\n"
    # arguments the caller promises not to change, whose packed copies kernels keep (opc_frozen.h)
    frozen_support = (f"void {FROZEN_FN}(uintptr_t p, int64_t bytes, int add) "
                      "{ opc_rt_frozen_set((const void *)p, bytes, add); }\n")
    # where a function has run-time checks: the offending value of the calling thread's last failure
    status_support = ("static _Thread_local int64_t opc_error_detail = 0;\n"
                      "int64_t opc_error_value(void) { return opc_error_detail; }\n")

    # -- names ---------------------------------------------------------------

    def name(self, v: SSAValue) -> str:
        if v not in self.names:
            hint = c_identifier(v.name_hint)
            self.names[v] = f"{hint}_{len(self.names)}"
        return self.names[v]

    def expression_with(self, op: Operation, texts: dict[SSAValue, str]) -> str:
        """op's table entry (EXPRESSIONS) with some operands read as the given C text instead of
        their names (a combine applied to partial results, a host size with numbers for constants)."""
        saved = {v: self.names.get(v) for v in texts}
        self.names.update(texts)
        try:
            return EXPRESSIONS[type(op)](self, op)
        finally:
            for v, old in saved.items():
                if old is None:
                    del self.names[v]
                else:
                    self.names[v] = old

    def math_fn(self, name: str, t: Attribute) -> str:
        if isinstance(t, Float32Type) and name in VECTOR_F32_MATH:
            return VECTOR_F32_MATH[name]
        if isinstance(t, Float64Type) and name in VECTOR_F64_MATH:
            return VECTOR_F64_MATH[name]
        return float_fn(name, t)

    def line(self, text: str) -> None:
        self.lines.append("  " * self.indent + text)

    # -- module ----------------------------------------------------------------

    def emit_module(self, module: ModuleOp) -> tuple[str, list[FunctionSignature]]:
        sigs = []
        body: list[str] = [self.global_definition(g) for g in module.ops if isinstance(g, memref.GlobalOp)]
        if any(isinstance(f, func.FuncOp) and function_errors(f) for f in module.ops):
            body.append(self.status_support)
        if self.threads_support:
            body.append(self.threads_support)
        if self.frozen_support:
            body.append(self.frozen_support)
        if self.memory_support:
            body.append(self.memory_support)
        body.append(control_support(module, self.stack_macros))
        self.resets_stack = uses_stack(module)
        self.clears_sigint = watches_sigint(module)
        for fn in module.ops:
            if isinstance(fn, func.FuncOp):
                self.lines, self.outlined = [], []
                sig = self.emit_function(fn)
                if not is_body(fn):  # a control-flow body is called by its host only
                    sigs.append(sig)
                body.extend(self.outlined)
                body.extend(self.lines)
                body.append("")
        if self.profiled:
            body.insert(0, profile_support(self.profile_labels))
        return self.header + kernel_preamble(module) + "\n" + "\n".join(body), sigs

    @staticmethod
    def global_symbol(name: str) -> str:
        return f"opc_global_{c_symbol(name)}"

    def global_definition(self, op: memref.GlobalOp) -> str:
        """A constant memref.global as a static array (dense constants of the input)."""
        t = op.type
        assert isinstance(op.initial_value, DenseIntOrFPElementsAttr)  # opc's globals: real numbers
        n = pymath.prod(t.get_shape())
        name = self.global_symbol(op.sym_name.data)
        data = constant_bytes(op.initial_value, n) if self.binds_data else None
        if data is not None and len(data) >= DATA_MIN_BYTES:
            file = data_file(data)
            self.data[file] = data
            return data_definition(name, c_type(t.element_type), n, file, len(data))
        values = cast("tuple[float | int, ...]", op.initial_value.get_values())
        if len(values) == 1 and n != 1:
            values = values * n
        items = ", ".join(c_constant(v, t.element_type) for v in values)
        return f"static const {c_type(t.element_type)} {name}[{max(n, 1)}] = {{{items}}};"

    def emit_GetGlobalOp(self, op: memref.GetGlobalOp) -> None:
        self.const_ptrs.add(op.memref)
        ct = c_type(element_of(op.memref))
        self.line(f"const {ct} *{self.name(op.memref)} = {self.global_symbol(op.name_.root_reference.data)};")

    def prototype(self, fn: func.FuncOp) -> str:
        n_in = int_of(fn.attributes["opc.num_inputs"])
        params = []
        aliased = in_place_buffers(fn, n_in)
        for i, arg in enumerate(fn.args):
            t = arg.type
            if isinstance(t, IndexType):  # a run-time size (opc/lowering/size_lowering.py)
                params.append(f"const int64_t {self.name(arg)}")
                continue
            assert isinstance(t, MemRefType)
            const = "const " if i < n_in else ""
            if i < n_in:
                self.const_ptrs.add(arg)
            restrict = "" if i in aliased else "restrict "
            params.append(f"{const}{c_type(t.element_type)} *{restrict}{self.name(arg)}")
        return f"int {self.prefix}{c_symbol(fn.sym_name.data)}({', '.join(params) or 'void'})"

    def emit_function(self, fn: func.FuncOp) -> FunctionSignature:
        """Prototype, locals, body, then one cleanup path that frees what the function owns."""
        self.start_function(fn)
        n_in = int_of(fn.attributes["opc.num_inputs"])
        for i, arg in enumerate(fn.args):
            if not arg.name_hint:
                arg.name_hint = f"in{i}" if i < n_in else f"out{i - n_in}"
        self.indent = 0
        self.line(self.prototype(fn) + " {")
        self.indent = 1
        self.line("int status = 0;")
        if self.resets_stack and not is_body(fn):
            self.line("opc_stack_start();")
        if self.clears_sigint and not is_body(fn):
            self.line("opc_cf_interrupted = 0;")
        self.function = fn
        owned = self.owned_buffers(fn)
        self.declare_locals(fn, owned)
        self.emit_body(fn)
        self.indent = 0
        self.lines.append("cleanup:")
        self.indent = 1
        # the arena is kept for the thread's next call (ARENA_SUPPORT): nothing to free
        for buf in owned:
            if buf not in self.arena:
                self.line(self.free_statement(buf))
        for line in self.cleanup_lines():
            self.line(line)
        if self.resets_stack and not is_body(fn):  # emptied, returned or failed; a large buffer freed
            self.line("opc_stack_end();")
        self.line("return status;")
        self.indent = 0
        self.line("}")
        return self.signature(fn, n_in)

    # Hooks of emit_function that the CUDA emitter overrides.

    def start_function(self, fn: func.FuncOp) -> None:
        self.names, self.constants, self.const_ptrs = {}, {}, set()
        for arg in fn.args:
            if isinstance(arg.type, IndexType):  # a size parameter: opc_n0, ... (as the binding names them)
                self.names[arg] = f"opc_{arg.name_hint}"

    def owned_buffers(self, fn: func.FuncOp) -> list[SSAValue]:
        return [op.memref for op in fn.walk() if isinstance(op, memref.AllocOp)]

    def cleanup_lines(self) -> list[str]:
        """What the cleanup path frees besides the owned buffers (the CUDA emitter's result slots)."""
        return []

    def declare_locals(self, fn: func.FuncOp, owned: list[SSAValue]) -> None:
        """Every owned pointer is declared NULL up front, so the cleanup path may free it;
        the function's top-level intermediates share one allocation (the arena), so the
        function stays small and linear however many buffers it has. A buffer with run-time
        sizes joins it where they are known at the function's start (polynomials of its
        size parameters): its offset is a C expression of them. One sized by a data size
        (known only once its op ran) has a malloc of its own."""
        handed = {op.buffer for op in fn.walk() if isinstance(op, HandOutOp)}  # the binding frees them
        top = [b for b in owned if b.owner.parent_block() is fn.body.block and b not in handed
               ] if self.pack_buffers else []
        counts = {b: self.start_count(b, fn) for b in top}
        fixed = {b: -(-buffer_bytes(b.type) // ARENA_ALIGN) * ARENA_ALIGN for b in top if isinstance(counts[b], int)}
        offsets = arena_offsets(live_ranges(fn, list(fixed)), fixed)  # dead buffers' bytes reused
        self.arena = dict(offsets)
        size = max((offsets[b] + fixed[b] for b in fixed), default=0)
        for buf in owned:
            if buf not in self.arena and not isinstance(counts.get(buf), str):
                self.line(f"{c_type(element_of(buf))} *{self.name(buf)} = NULL;")
        end: int | str = size
        for buf in (b for b in top if isinstance(counts[b], str)):
            self.arena[buf] = end
            after = f"{self.name(buf)}_end"
            before = f"{end} + " if end else ""
            self.line(f"const size_t {after} = {before}opc_arena_up(sizeof({c_type(element_of(buf))}) * "
                      f"(size_t)opc_max1({counts[buf]}));")
            end = after
        if self.arena:
            self.line(f"char *opc_arena = {self.arena_getter(fn)}({end});")
            self.line("if (!opc_arena) { status = 1; goto cleanup; }")

    def start_count(self, buf: SSAValue, fn: func.FuncOp) -> int | str | None:
        """A buffer's element count: a number, a C expression of what the function knows at its
        start (its parameters, constants), or None where a size is computed later (a data size)."""
        shape = cast(MemRefType, buf.type).get_shape()
        if not has_dynamic_dims(buf):
            return pymath.prod(shape)
        dynamic = [start_size(v, fn, self.name) for v in dynamic_size_operands(buf)]
        if any(d is None for d in dynamic):
            return None
        given = iter(dynamic)
        n = c_product(d if d != DYNAMIC else cast(str, next(given)) for d in shape)
        return n if isinstance(n, str) else str(n)

    def emit_body(self, fn: func.FuncOp) -> None:
        """Every top-level loop nest (a kernel) becomes a static function of its own,
        called from here: gcc's time then grows with the number of kernels, not
        with the square of one huge function."""
        self.block_order = {o: i for i, o in enumerate(fn.body.block.ops)}  # where constants and views sit
        for op in fn.body.block.ops:
            timed = self.profiled and isinstance(op, (scf.ParallelOp, GemmOp, CallOp, ExternalCallOp))
            if timed:
                k = len(self.profile_labels)
                self.profile_labels.append(f"{fn.sym_name.data}\t{kernel_label(op)}")
                self.line(f"const int64_t opc_t{k} = opc_prof_on ? opc_prof_now() : 0;")
            if isinstance(op, scf.ParallelOp) and self.outlinable(op):
                self.emit_outlined(op, fn)
            else:
                self.emit_op(op)
            if timed:
                self.line(f"if (opc_prof_on) opc_prof_add({k}, opc_t{k});")

    @staticmethod
    def outlinable(op: Operation) -> bool:
        """A nest that cannot leave by `goto cleanup` (no allocation, status or device call inside)."""
        return not any(isinstance(o, (memref.AllocOp, RaiseStatusOp, ExternalCallOp)) for o in op.walk())

    def emit_outlined(self, op: Operation, fn: func.FuncOp) -> None:
        """`static void opc_k_F_N(captured buffers and scalars) { nest }` plus its call.
        Constants are re-emitted inside; views are rebuilt inside from their base
        buffer, so the parameters never alias each other (they are restrict)."""
        captured, local_defs = self.captured_values(list(op.walk()), fn)
        kernel, saved_lines, saved_indent = self.begin_outlined(
            fn, op.attributes.get("opc.kernel"), "kernel", ", ".join(self.param(v) for v in captured) or "void")
        self.emit_local_defs(local_defs)
        self.emit_op(op)
        self.indent = 0
        self.line("}")
        kernel = self.outline(kernel, saved_lines, saved_indent)
        self.line(f"{kernel}({', '.join(self.name(v) for v in captured)});")

    def begin_outlined(self, fn: func.FuncOp, label: Attribute | None, what: str,
                       params: str) -> tuple[str, list[str], int]:
        """Start `static void opc_k_F_N(params) {` (after a `/* WHAT LABEL */` comment) in fresh lines:
        its name, and the lines and indent that outline() restores once its body is emitted."""
        kernel = f"opc_k_{c_symbol(fn.sym_name.data)}_{len(self.outlined)}"
        saved_lines, saved_indent = self.lines, self.indent
        self.lines, self.indent = [], 0
        if isinstance(label, StringAttr):
            self.line(f"/* {what} {c_comment(label.data)} */")
        self.line(f"static __attribute__((noinline)) void {kernel}({params}) {{")
        self.indent = 1
        return kernel, saved_lines, saved_indent

    def outline(self, kernel: str, saved_lines: list[str], saved_indent: int) -> str:
        """The function just emitted into self.lines, kept as an outlined one unless a function of
        the same code was (then that one's name); the lines and indent restored."""
        text = "\n".join(self.lines)
        self.lines, self.indent = saved_lines, saved_indent
        shape = kernel_shape(text.replace(kernel, "opc_k_"))
        if shape in self.kernel_shapes:  # the same code as a kernel emitted before (a model's repeated layers)
            return self.kernel_shapes[shape]
        self.kernel_shapes[shape] = kernel
        self.outlined.append(text)
        return kernel

    def emit_local_defs(self, local_defs: list[Operation]) -> None:
        # Constants first, then views (which may read them): the same order in every layer
        # however the function's CSE interleaved them, so repeated kernels read alike.
        for d in sorted(set(local_defs), key=lambda o: (isinstance(o, memref.ReinterpretCastOp),
                                                        self.block_order.get(o, -1))):
            self.emit_op(d)

    def captured_values(self, ops: list[Operation], fn: func.FuncOp) -> tuple[list[SSAValue], list[Operation]]:
        """What code made of `ops` reads from outside them: (buffers and scalars passed in, the
        constants and views re-emitted inside)."""
        inside = {id(o) for o in ops}
        captured: list[SSAValue] = []
        local_defs: list[Operation] = []
        seen: set[SSAValue] = set()
        todo = [v for o in ops for v in o.operands]
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            owner = v.owner
            if isinstance(owner, Operation) and id(owner) in inside:
                continue
            if isinstance(owner, Block):  # a block argument of an enclosing loop cannot occur at top level
                if owner is not fn.body.block:
                    continue
                captured.append(v)
            elif isinstance(owner, memref.AllocOp):  # its run-time sizes index it
                captured.append(v)
                todo.extend(owner.dynamic_sizes)
            elif isinstance(owner, (arith.ConstantOp, memref.ReinterpretCastOp, memref.GetGlobalOp)):
                local_defs.append(owner)
                todo.extend(owner.operands)
            else:
                captured.append(v)
        return captured, local_defs

    def param(self, v: SSAValue) -> str:
        t = v.type
        if isinstance(t, MemRefType):
            const = "const " if v in self.const_ptrs else ""
            return f"{const}{c_type(t.element_type)} *restrict {self.name(v)}"
        return f"const {c_type(t)} {self.name(v)}"

    def free_statement(self, buf: SSAValue) -> str:
        return f"free({self.name(buf)});"

    @staticmethod
    def signature(fn: func.FuncOp, n_in: int) -> FunctionSignature:
        buffers = [a for a in fn.args if isinstance(a.type, MemRefType)]
        shapes = function_shapes(fn) or [shape_of(a) for a in buffers]

        ins = [(a.name_hint or f"in{i}", shapes[i], numpy_name(element_of(a))) for i, a in enumerate(buffers[:n_in])]
        handed = function_handed(fn)  # (their parameter: an int64 handle, their dtype the result's)
        outs = [(shapes[n_in + i], handed.get(i) or numpy_name(element_of(a))) for i, a in enumerate(buffers[n_in:])]
        sizes, checks = function_sizes(fn)
        return FunctionSignature(fn.sym_name.data, ins, outs, function_errors(fn), sizes, checks, function_found(fn),
                                 sorted(handed), function_derived(fn))

    def emit_block(self, block: Block) -> None:
        for op in block.ops:
            self.emit_op(op)

    def emit_op(self, op: Operation) -> None:
        if is_host_control(op):  # scf.if / for / while around calls of their bodies (c_control_emission.py)
            self.emit_host_control(op)
            return
        kind = type(op)
        if kind in EXPRESSIONS:
            r = op.results[0]
            self.line(f"const {c_type(r.type)} {self.name(r)} = {EXPRESSIONS[kind](self, op)};")
            return
        handler = getattr(self, f"emit_{kind.__name__}", None)
        if handler is None:
            raise NotImplementedError(f"C emitter: no rule for '{op.name}'")
        handler(op)

    # -- structure ---------------------------------------------------------------

    def emit_ConstantOp(self, op: arith.ConstantOp) -> None:
        attr, t = op.value, op.result.type
        if isinstance(t, IndexType):
            self.constants[op.result] = int_of(attr)
        value = attr.value.data if isinstance(attr, (IntegerAttr, FloatAttr)) else None
        if value is None:
            raise NotImplementedError(f"C emitter: constant {attr}")
        self.line(f"const {c_type(t)} {self.name(op.result)} = {c_constant(value, t)};")

    def emit_ReturnOp(self, op: func.ReturnOp) -> None:
        pass  # falls through to cleanup

    def emit_ReduceOp(self, op: scf.ReduceOp) -> None:
        pass  # scf.parallel's terminator; no reductions are emitted through it

    def emit_YieldOp(self, op: scf.YieldOp) -> None:
        for target, v in zip(self.yield_targets[-1], op.operands):
            self.line(f"{target} = {self.name(v)};")











    # -- sums with several accumulators ----------------------------------------------




    # -- memory ----------------------------------------------------------------------








    # -- GEMM ---------------------------------------------------------------------------



    # -- a device's own kernel ----------------------------------------------------------



    # -- runtime kernels and run-time checks (runtime/opc_nn.h, opc_status.h) ---------






# ---------------------------------------------------------------------------
# A device's own kernels: the few module-level lines their calls need
# ---------------------------------------------------------------------------

def kernel_preamble(module: ModuleOp) -> str:
    """The kernel header, the error buffers and one prototype per device kernel the module calls."""
    symbols = sorted({op.symbol.data for op in module.walk() if isinstance(op, ExternalCallOp)})
    if not symbols:
        return ""
    return KERNEL_HOST + "".join(f"int {s}(const opc_kernel_call *call);\n" for s in symbols)


# The names CEmitter.name gives values (`hint_N`); opc_* names (globals, runtime functions) are
# not local and keep theirs.
LOCAL_NAME = re.compile(r"\b(?!opc_)[A-Za-z_]\w*?_\d+(?=\b|_t\b)")  # (NAME_t: a tile loop's counter)


def kernel_shape(text: str) -> str:
    """A kernel's text with its local names (parameters and variables) numbered by first use:
    two kernels of one shape differ only by a renaming of locals, so one of them serves both
    (gcc then compiles a model's repeated layers once; the time grows with distinct kernels)."""
    seen: dict[str, str] = {}
    return LOCAL_NAME.sub(lambda m: seen.setdefault(m.group(0), f"l{len(seen)}"), text)


def kernel_label(op: Operation) -> str:
    """`kind: ops` of a top-level kernel: the schedule's label on a loop nest (opc.kernel), else
    what the call is (a GEMM with its epilogue, a runtime row kernel, a device's kernel)."""
    label = op.attributes.get("opc.kernel")
    if isinstance(label, StringAttr):
        return label.data
    if isinstance(op, GemmOp):
        parts = ["bias"] * (op.bias is not None) + [op.activation.data] * (op.activation.data != "none")
        epilogue = op.attributes.get("opc.epilogue")  # the nest the GEMM runs on its blocks
        parts += [epilogue.data] if isinstance(epilogue, StringAttr) else []
        return "gemm: " + " + ".join(["matmul", *parts])
    if isinstance(op, CallOp):
        epilogue = op.attributes.get("opc.epilogue")  # a conv's nest on its blocks
        return f"library: {op.callee.data}" + (f" + {epilogue.data}" if isinstance(epilogue, StringAttr) else "")
    if isinstance(op, ExternalCallOp):
        return f"device: {op.op.data.removeprefix('opc.')}"
    return f"other: {op.name}"


PROFILE_EVENTS = 1 << 16  # kernel calls a profile keeps one by one (the Chrome trace); totals count all
PROFILE_FN = "opc_profile"  # a CPU module's profiling switch; opc/profile.py reads the rest
PROFILE_CDEF = ("int opc_profile(int on);\nconst char *opc_profile_label(int k);\n"
                "int64_t opc_profile_label_size(int k);\nint64_t opc_profile_ns(int k);\n"
                "int64_t opc_profile_calls(int k);\nint64_t opc_profile_events(int64_t *out, int64_t cap);\n"
                "void opc_profile_reset(void);\nint64_t opc_profile_routes(int64_t *counts, int64_t cap);\n"
                "const char *opc_profile_route_name(int64_t k);")


def profile_support(labels: list[str]) -> str:
    """Per-kernel time and call counters and an event buffer, off until opc_profile(1): then each
    kernel call of the entry points reads the monotonic clock twice (atomics: callers may be
    threads). Off, a call costs one load and a branch."""
    n = max(1, len(labels))
    names = ", ".join(c_string(label) for label in labels) or '""'
    sizes = ", ".join(str(len(label.encode("utf-8", "surrogatepass"))) for label in labels) or "0"
    return f"""#include <time.h>
#include "opc_routes.h"
static const char *const opc_prof_labels[{n}] = {{{names}}};
static const int64_t opc_prof_label_sizes[{n}] = {{{sizes}}};  /* bytes: a name may hold a NUL */
static int64_t opc_prof_ns[{n}], opc_prof_calls[{n}], opc_prof_ev[{PROFILE_EVENTS}][3], opc_prof_nev = 0;
static int opc_prof_on = 0;
static inline int64_t opc_prof_now(void) {{
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}}
static void opc_prof_add(int k, int64_t t0) {{
  const int64_t t1 = opc_prof_now();
  __atomic_fetch_add(&opc_prof_ns[k], t1 - t0, __ATOMIC_RELAXED);
  __atomic_fetch_add(&opc_prof_calls[k], 1, __ATOMIC_RELAXED);
  const int64_t e = __atomic_fetch_add(&opc_prof_nev, 1, __ATOMIC_RELAXED);
  if (e < {PROFILE_EVENTS}) {{ opc_prof_ev[e][0] = k; opc_prof_ev[e][1] = t0; opc_prof_ev[e][2] = t1; }}
}}
int {PROFILE_FN}(int on) {{ opc_prof_on = on; opc_rt_routes_on = on; return {len(labels)}; }}
const char *opc_profile_label(int k) {{ return opc_prof_labels[k]; }}
int64_t opc_profile_label_size(int k) {{ return opc_prof_label_sizes[k]; }}
int64_t opc_profile_ns(int k) {{ return opc_prof_ns[k]; }}
int64_t opc_profile_calls(int k) {{ return opc_prof_calls[k]; }}
int64_t opc_profile_events(int64_t *out, int64_t cap) {{
  int64_t n = opc_prof_nev < {PROFILE_EVENTS} ? opc_prof_nev : {PROFILE_EVENTS};
  n = n < cap ? n : cap;
  memcpy(out, opc_prof_ev, (size_t)n * sizeof opc_prof_ev[0]);
  return n;
}}
void opc_profile_reset(void) {{
  memset(opc_prof_ns, 0, sizeof opc_prof_ns); memset(opc_prof_calls, 0, sizeof opc_prof_calls); opc_prof_nev = 0;
  memset(opc_rt_route_counts, 0, sizeof opc_rt_route_counts);
}}
/* the runtime's routes (opc_routes.h): how many there are, their counts copied to `counts` */
int64_t opc_profile_routes(int64_t *counts, int64_t cap) {{
  for (int64_t k = 0; k < OPC_ROUTE_COUNT && k < cap; k++)
    counts[k] = __atomic_load_n(&opc_rt_route_counts[k], __ATOMIC_RELAXED);
  return OPC_ROUTE_COUNT;
}}
#define OPC_RT_ROUTE_NAME(e, name) name,
static const char *const opc_prof_route_names[] = {{OPC_RT_ROUTES(OPC_RT_ROUTE_NAME)}};
#undef OPC_RT_ROUTE_NAME
const char *opc_profile_route_name(int64_t k) {{ return opc_prof_route_names[k]; }}
"""


class EmittedC(NamedTuple):
    source: str
    signatures: list[FunctionSignature]
    data: dict[str, bytes]  # the files the source's .incbin lines name (c_data.py), by name


def emit_c(module: ModuleOp, sanitized: bool = False) -> EmittedC:
    """C source of a lowered module, the signatures of its functions and its large constants' bytes.
    sanitized (OPC_SANITIZE): every intermediate is a malloc of its own, exactly its size, so that
    ASan's redzones border each one (packed in the arena, a kernel that overruns one buffer writes
    into the next unseen, and the arena kept from a larger call hides an overrun of the last); large
    constants stay C arrays, which ASan borders with redzones (.incbin data has none: a read past
    its end would read the next constant unseen)."""
    emitter = CEmitter()
    emitter.pack_buffers = not sanitized
    emitter.binds_data = not sanitized
    source, sigs = emitter.emit_module(module)
    return EmittedC(source, sigs, emitter.data)


def in_place_buffers(fn: func.FuncOp, n_in: int) -> set[int]:
    """The parameters of a loop body its host passes one buffer for (an input and the output it is
    updated in place into, opc-outline-control-flow's IN_PLACE_ATTR): not `restrict`, as they alias."""
    return {n for a, o in in_place_pairs(fn) for n in (a, n_in + o)}
