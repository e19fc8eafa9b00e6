"""C emitter: loop-level IR (memref/scf/arith/math + opc_loops) to C99.

The scalar ops are a table from op class to a C expression template; loops,
loads, stores, allocations, GEMM calls and calls of a device's own kernels
(runtime/opc_kernel.h) have small methods of their own,
which the CUDA emitter (cuda_emitter.py) overrides where a GPU differs. An
op without an entry fails loudly, naming it.

Semantics that C would leave undefined are pinned down here: integer
arithmetic wraps (computed in unsigned), float -> int casts saturate with
NaN -> 0 (runtime/opc_runtime.h), maximumf/minimumf propagate NaN.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects import arith, func, math, memref, scf
from xdsl.dialects.builtin import (
    BFloat16Type,
    DenseArrayBase,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    Signedness,
    StringAttr,
    f32,
    f64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from opc.dialects.opc_loops import (
    GEMM_ACTIVATIONS,
    CallOp,
    CheckIndexOp,
    ExternalCallOp,
    GemmOp,
    RaiseStatusOp,
    function_errors,
)
from opc.dtypes import mlir_name, numpy_name
from opc.lowering.abi import ENTRY_PREFIX, KERNEL_MESSAGE_FN, KERNEL_STATUS, SET_THREADS_FN, FunctionSignature, c_symbol

# ---------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------


def c_type(t: Attribute) -> str:
    if isinstance(t, Float32Type):
        return "float"
    if isinstance(t, Float64Type):
        return "double"
    if isinstance(t, (Float16Type, BFloat16Type)):
        return "uint16_t"  # storage bits; arithmetic happens in float
    if isinstance(t, IndexType):
        return "int64_t"
    if isinstance(t, IntegerType):
        width = t.width.data
        if width == 1:
            return "uint8_t"  # NumPy bool: one byte holding 0 or 1
        unsigned = t.signedness.data == Signedness.UNSIGNED
        return f"{'u' if unsigned else ''}int{width}_t"
    raise NotImplementedError(f"no C type for {t}")


def c_unsigned_wide(t: Attribute) -> str:
    """The unsigned type that integer arithmetic of t wraps in (never promoted to int)."""
    wide = isinstance(t, IndexType) or isinstance(t, IntegerType) and t.width.data == 64
    return "uint64_t" if wide else "uint32_t"


def dtype_suffix(t: Attribute) -> str:
    return {Float32Type: "f32", Float64Type: "f64", Float16Type: "f16", BFloat16Type: "bf16"}[type(t)]


def unsigned_c_type(t: Attribute) -> str:
    assert isinstance(t, IntegerType)
    return "uint8_t" if t.width.data == 1 else f"uint{t.width.data}_t"


def c_float_literal(value: float, t: Attribute) -> str:
    if pymath.isnan(value):
        return "NAN" if isinstance(t, Float32Type) else "(double)NAN"
    if pymath.isinf(value):
        sign = "-" if value < 0 else ""
        return f"{sign}INFINITY" if isinstance(t, Float32Type) else f"{sign}(double)INFINITY"
    if isinstance(t, Float32Type):
        return f"{float(np.float32(value)).hex()}f"
    return float(value).hex()


def c_constant(value: float | int, t: Attribute) -> str:
    if isinstance(t, Float16Type):
        return f"(uint16_t){int(np.array(value, np.float16).view(np.uint16))}u"
    if isinstance(t, BFloat16Type):
        import ml_dtypes

        return f"(uint16_t){int(np.array(value, ml_dtypes.bfloat16).view(np.uint16))}u"
    if isinstance(t, (Float32Type, Float64Type)):
        return c_float_literal(float(value), t)
    if isinstance(t, IntegerType) and t.width.data == 64 and value == -(1 << 63):
        return "INT64_MIN"
    if isinstance(t, IntegerType) and t.width.data == 1:
        return "1" if value else "0"
    return f"(({c_type(t)}){int(value)}{'LL' if abs(int(value)) > 2**31 - 1 else ''})"


# f32 functions with branch-free versions in opc_runtime.h: loops over them vectorize.
VECTOR_F32_MATH = {"exp": "opc_expf", "tanh": "opc_tanhf", "erf": "opc_erff", "log": "opc_logf"}


def float_fn(name: str, t: Attribute) -> str:
    """libm name for f32 (expf) or f64 (exp)."""
    return f"{name}f" if isinstance(t, Float32Type) else name


# ---------------------------------------------------------------------------
# The expression table
# ---------------------------------------------------------------------------


def wrap_int(op: str):
    def render(e: CEmitter, o: Operation) -> str:
        t, u = o.result.type, c_unsigned_wide(o.result.type)  # type: ignore[attr-defined]
        return f"({c_type(t)})(({u}){e.name(o.lhs)} {op} ({u}){e.name(o.rhs)})"  # type: ignore[attr-defined]

    return render


def infix(op: str):
    return lambda e, o: f"({e.name(o.lhs)} {op} {e.name(o.rhs)})"


def libm(name: str, nargs: int = 1):
    def render(e: CEmitter, o: Operation) -> str:
        args = ", ".join(e.name(v) for v in o.operands[:nargs])
        return f"{e.math_fn(name, o.results[0].type)}({args})"

    return render


def pick(cmp: str):
    """NaN-propagating maximum/minimum: (a is NaN or a cmp b) ? a : b."""
    def render(e: CEmitter, o: Operation) -> str:
        a, b = e.name(o.lhs), e.name(o.rhs)  # type: ignore[attr-defined]
        return f"(({a} != {a} || {a} {cmp} {b}) ? {a} : {b})"

    return render


def int_pick(cmp: str, unsigned: bool = False):
    """Integer max/min; the unsigned forms compare the signless bits as unsigned."""
    def render(e: CEmitter, o: Operation) -> str:
        a, b = e.name(o.lhs), e.name(o.rhs)
        ua, ub = (f"({unsigned_c_type(o.lhs.type)}){a}", f"({unsigned_c_type(o.rhs.type)}){b}") if unsigned else (a, b)
        return f"(({ua} {cmp} {ub}) ? {a} : {b})"

    return render


# C's infix operator per predicate; "one" (ordered not-equal) has none: compare() writes it as (a < b || a > b)
CMP_C = {"oeq": "==", "ogt": ">", "oge": ">=", "olt": "<", "ole": "<=", "one": "<>", "une": "!=",
         "eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">=",
         "ult": "<", "ule": "<=", "ugt": ">", "uge": ">="}  # fmt: skip
# The float unordered predicates (NaN -> true) as the negation of C's (ordered) complement; une is C's !=.
CMPF_UNORDERED = {"ult": ">=", "ule": ">", "ugt": "<=", "uge": "<"}


def compare(e: CEmitter, o: Operation) -> str:
    pred_name = comparison_name(o, o.predicate.value.data)  # type: ignore[attr-defined]
    a, b = e.name(o.lhs), e.name(o.rhs)
    if pred_name[0] == "u" and isinstance(o, arith.CmpiOp):  # ult, ugt, ...: signless bits read unsigned
        a, b = f"({unsigned_c_type(o.lhs.type)}){a}", f"({unsigned_c_type(o.rhs.type)}){b}"
    if isinstance(o, arith.CmpfOp):
        if pred_name == "one":  # ordered not-equal is false when either side is NaN; C's != is true then
            return f"(({a} < {b}) || ({a} > {b}))"
        if pred_name in CMPF_UNORDERED:  # true when either side is NaN: the negated ordered complement
            return f"(!({a} {CMPF_UNORDERED[pred_name]} {b}))"
    return f"({a} {CMP_C[pred_name]} {b})"


def comparison_name(o: Operation, pred: int) -> str:
    cmpf = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord",
            "ueq", "ugt", "uge", "ult", "ule", "une", "uno", "true"]
    cmpi = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]
    name = (cmpf if isinstance(o, arith.CmpfOp) else cmpi)[pred]
    if name not in CMP_C:
        raise NotImplementedError(f"comparison predicate {name}")
    return name


def ext_f(e: CEmitter, o: Operation) -> str:
    src, dst, a = o.input.type, o.result.type, e.name(o.input)  # type: ignore[attr-defined]
    if isinstance(src, Float16Type):
        a = f"opc_f16_to_f32({a})"
    elif isinstance(src, BFloat16Type):
        a = f"opc_bf16_to_f32({a})"
    return f"(double){a}" if isinstance(dst, Float64Type) else a


def trunc_f(e: CEmitter, o: Operation) -> str:
    src, dst, a = o.input.type, o.result.type, e.name(o.input)  # type: ignore[attr-defined]
    if isinstance(dst, Float32Type):
        return f"(float){a}"
    return f"opc_{dtype_suffix(src)}_to_{dtype_suffix(dst)}({a})"


def to_int_saturating(e: CEmitter, o: Operation) -> str:
    t = o.result.type  # type: ignore[attr-defined]
    kind = "u" if isinstance(o, arith.FPToUIOp) else "i"
    return f"({c_type(t)})opc_sat_{kind}{t.width.data}((double){e.name(o.input)})"  # type: ignore[attr-defined]


def c_cast(e: CEmitter, o: Operation) -> str:
    return f"({c_type(o.results[0].type)}){e.name(o.operands[0])}"


def c_cast_unsigned(e: CEmitter, o: Operation) -> str:
    """extui / uitofp: read the signless source bits as unsigned first."""
    src = o.operands[0]
    return f"({c_type(o.results[0].type)})({unsigned_c_type(src.type)}){e.name(src)}"


def abs_int(e: CEmitter, o: Operation) -> str:
    t, a = o.result.type, e.name(o.operand)  # type: ignore[attr-defined]
    u = c_unsigned_wide(t)
    return f"({c_type(t)})(({a} < 0) ? ({u})0 - ({u}){a} : ({u}){a})"


def rsqrt(e: CEmitter, o: Operation) -> str:
    t = o.result.type  # type: ignore[attr-defined]
    one = "1.0f" if isinstance(t, Float32Type) else "1.0"
    return f"({one} / {e.math_fn('sqrt', t)}({e.name(o.operand)}))"  # type: ignore[attr-defined]


EXPRESSIONS = {
    arith.AddfOp: infix("+"), arith.SubfOp: infix("-"), arith.MulfOp: infix("*"), arith.DivfOp: infix("/"),
    arith.NegfOp: lambda e, o: f"(-{e.name(o.operand)})",
    arith.MaximumfOp: pick(">"), arith.MinimumfOp: pick("<"),
    arith.OrIOp: infix("|"), arith.AndIOp: infix("&"),
    arith.AddiOp: wrap_int("+"), arith.SubiOp: wrap_int("-"), arith.MuliOp: wrap_int("*"),
    arith.MaxSIOp: int_pick(">"), arith.MaxUIOp: int_pick(">", True),
    arith.MinSIOp: int_pick("<"), arith.MinUIOp: int_pick("<", True),
    arith.CmpfOp: compare, arith.CmpiOp: compare,
    arith.SelectOp: lambda e, o: f"({e.name(o.cond)} ? {e.name(o.lhs)} : {e.name(o.rhs)})",
    arith.ExtFOp: ext_f, arith.TruncFOp: trunc_f,
    arith.FPToSIOp: to_int_saturating, arith.FPToUIOp: to_int_saturating,
    arith.SIToFPOp: c_cast, arith.UIToFPOp: c_cast_unsigned,
    arith.ExtSIOp: c_cast, arith.ExtUIOp: c_cast_unsigned, arith.TruncIOp: c_cast, arith.BitcastOp: c_cast,
    math.ExpOp: libm("exp"), math.LogOp: libm("log"), math.TanhOp: libm("tanh"), math.ErfOp: libm("erf"),
    math.SqrtOp: libm("sqrt"), math.AbsFOp: libm("fabs"), math.PowFOp: libm("pow", 2),
    math.RsqrtOp: rsqrt, math.AbsIOp: abs_int,
    math.FloorOp: libm("floor"), math.CeilOp: libm("ceil"), math.RoundEvenOp: libm("rint"),  # rint: half to even
    math.SinOp: libm("sin"), math.CosOp: libm("cos"), math.TanOp: libm("tan"),
    math.AsinOp: libm("asin"), math.AcosOp: libm("acos"), math.AtanOp: libm("atan"),
    math.SinhOp: libm("sinh"), math.CoshOp: libm("cosh"),
    math.AsinhOp: libm("asinh"), math.AcoshOp: libm("acosh"), math.AtanhOp: libm("atanh"),
}  # fmt: skip


# ---------------------------------------------------------------------------
# Function emission
# ---------------------------------------------------------------------------

ARENA_ALIGN = 64  # a cache line (and an AVX-512 vector) per buffer start


def buffer_bytes(t: MemRefType) -> int:
    n = max(1, pymath.prod(t.get_shape()))
    return n * {"double": 8, "float": 4, "uint16_t": 2, "int64_t": 8, "uint64_t": 8, "int32_t": 4,
                "uint32_t": 4, "int16_t": 2}.get(c_type(t.element_type), 1)


SUM_BLOCK_BYTES = 256  # partial sums of one blocked float sum: four AVX-512 (eight AVX2) registers
SUM_FOLD_BYTES = 64  # the partials are halved down to this, then summed across lanes
PARALLEL_MIN_WORK = 1 << 17  # scalar steps (ops x trips) below which threads cost more than they give
SIMD_MIN_TRIPS = 8  # an innermost loop shorter than this stays in the collapse (its own loop would not pay)
OUTER_MIN_TRIPS = 16  # fewer outer iterations than this: too few to share among threads, collapse all
TRANSPOSE_TILE = 16  # a transpose's squares: 16 floats are a cache line


@dataclass
class CEmitter:
    """Emits one C translation unit for a lowered module."""

    lines: list[str] = field(default_factory=list)
    names: dict[SSAValue, str] = field(default_factory=dict)
    constants: dict[SSAValue, int] = field(default_factory=dict)  # known index constants
    indent: int = 1
    prefix: str = ENTRY_PREFIX
    const_ptrs: set[SSAValue] = field(default_factory=set)
    yield_targets: list[list[str]] = field(default_factory=list)  # scf.for result variables, innermost last
    outlined: list[str] = field(default_factory=list)  # the outlined kernels of the function being emitted
    arena: dict[SSAValue, int] = field(default_factory=dict)  # intermediate buffer -> its offset in the arena
    block_order: dict[Operation, int] = field(default_factory=dict)  # the entry block's ops, in order
    pack_buffers = True  # intermediates in one allocation (the CUDA emitter allocates each on the device)
    profiled = True  # every kernel call timed while profiling is on (opc/profiler.py); not in CUDA modules
    profile_labels: list[str] = field(default_factory=list)  # "function\tkind: ops" of each timed kernel

    header = ('#include <stdint.h>\n#include <stdlib.h>\n#include <math.h>\n'
              '#include "opc_runtime.h"\n#include "opc_gemm_api.h"\n#include "opc_status.h"\n#include "opc_nn_api.h"\n'
              '#include "opc_threads.h"\n')
    # opc's thread count for this module's parallel regions and its runtime objects (opc/threads.py)
    threads_support = f"void {SET_THREADS_FN}(int n) {{ opc_rt_threads = n; }}\n"
    # where a function has run-time checks: the offending value of the calling thread's last failure
    status_support = ("static _Thread_local int64_t opc_error_detail = 0;\n"
                      "int64_t opc_error_value(void) { return opc_error_detail; }\n")

    # -- names ---------------------------------------------------------------

    def name(self, v: SSAValue) -> str:
        if v not in self.names:
            hint = "".join(c if c.isalnum() else "_" for c in (v.name_hint or "v"))
            self.names[v] = f"{hint}_{len(self.names)}"
        return self.names[v]

    def math_fn(self, name: str, t: Attribute) -> str:
        if isinstance(t, Float32Type) and name in VECTOR_F32_MATH:
            return VECTOR_F32_MATH[name]
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
        for fn in module.ops:
            if isinstance(fn, func.FuncOp):
                self.lines, self.outlined = [], []
                sigs.append(self.emit_function(fn))
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
        values = op.initial_value.get_values()  # type: ignore[union-attr]
        n = pymath.prod(t.get_shape())
        if len(values) == 1 and n != 1:
            values = values * n
        items = ", ".join(c_constant(v, t.element_type) for v in values)
        name = self.global_symbol(op.sym_name.data)
        return f"static const {c_type(t.element_type)} {name}[{max(n, 1)}] = {{{items}}};"

    def emit_GetGlobalOp(self, op: memref.GetGlobalOp) -> None:
        self.const_ptrs.add(op.memref)
        ct = c_type(op.memref.type.element_type)  # type: ignore[attr-defined]
        self.line(f"const {ct} *{self.name(op.memref)} = {self.global_symbol(op.name_.root_reference.data)};")

    def prototype(self, fn: func.FuncOp) -> str:
        n_in = fn.attributes["opc.num_inputs"].value.data  # type: ignore[attr-defined]
        params = []
        for i, arg in enumerate(fn.args):
            t = arg.type
            assert isinstance(t, MemRefType)
            const = "const " if i < n_in else ""
            if i < n_in:
                self.const_ptrs.add(arg)
            params.append(f"{const}{c_type(t.element_type)} *restrict {self.name(arg)}")
        return f"int {self.prefix}{c_symbol(fn.sym_name.data)}({', '.join(params) or 'void'})"

    def emit_function(self, fn: func.FuncOp) -> FunctionSignature:
        """Prototype, locals, body, then one cleanup path that frees what the function owns."""
        self.start_function(fn)
        n_in = fn.attributes["opc.num_inputs"].value.data  # type: ignore[attr-defined]
        for i, arg in enumerate(fn.args):
            if not arg.name_hint:
                arg.name_hint = f"in{i}" if i < n_in else f"out{i - n_in}"
        self.indent = 0
        self.line(self.prototype(fn) + " {")
        self.indent = 1
        self.line("int status = 0;")
        owned = self.owned_buffers(fn)
        self.declare_locals(fn, owned)
        self.emit_body(fn)
        self.indent = 0
        self.lines.append("cleanup:")
        self.indent = 1
        if self.arena:
            self.line("free(opc_arena);")
        for buf in owned:
            if buf not in self.arena:
                self.line(self.free_statement(buf))
        self.line("return status;")
        self.indent = 0
        self.line("}")
        return self.signature(fn, n_in)

    # Hooks of emit_function that the CUDA emitter overrides.

    def start_function(self, fn: func.FuncOp) -> None:
        self.names, self.constants, self.const_ptrs = {}, {}, set()

    def owned_buffers(self, fn: func.FuncOp) -> list[SSAValue]:
        return [op.memref for op in fn.walk() if isinstance(op, memref.AllocOp)]

    def declare_locals(self, fn: func.FuncOp, owned: list[SSAValue]) -> None:
        """Every owned pointer is declared NULL up front, so the cleanup path may free it;
        the function's top-level intermediates share one allocation (the arena), so the
        function stays small and linear however many buffers it has."""
        self.arena = {}
        top = [b for b in owned if b.owner.parent_block() is fn.body.block] if self.pack_buffers else []  # type: ignore[union-attr]
        size = 0
        for buf in top:
            self.arena[buf] = size
            size += -(-buffer_bytes(buf.type) // ARENA_ALIGN) * ARENA_ALIGN
        for buf in owned:
            if buf not in self.arena:
                self.line(f"{c_type(buf.type.element_type)} *{self.name(buf)} = NULL;")  # type: ignore[attr-defined]
        if self.arena:
            self.line(f"char *opc_arena = (char *)aligned_alloc({ARENA_ALIGN}, {size});")
            self.line("if (!opc_arena) { status = 1; goto cleanup; }")

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
        inside = {id(o) for o in op.walk()}
        captured: list[SSAValue] = []
        local_defs: list[Operation] = []
        seen: set[SSAValue] = set()
        todo = [v for o in op.walk() for v in o.operands]
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
            elif isinstance(owner, (arith.ConstantOp, memref.ReinterpretCastOp, memref.GetGlobalOp)):
                local_defs.append(owner)
                todo.extend(owner.operands)
            else:
                captured.append(v)
        kernel = f"opc_k_{c_symbol(fn.sym_name.data)}_{len(self.outlined)}"
        saved_lines, saved_indent = self.lines, self.indent
        self.lines, self.indent = [], 0
        label = op.attributes.get("opc.kernel")
        if isinstance(label, StringAttr):
            self.line(f"/* kernel {label.data.replace('*/', '')} */")
        params = ", ".join(self.param(v) for v in captured) or "void"
        self.line(f"static __attribute__((noinline)) void {kernel}({params}) {{")
        self.indent = 1
        for d in sorted(set(local_defs), key=lambda o: self.block_order.get(o, -1)):
            self.emit_op(d)
        self.emit_op(op)
        self.indent = 0
        self.line("}")
        self.outlined.append("\n".join(self.lines))
        self.lines, self.indent = saved_lines, saved_indent
        self.line(f"{kernel}({', '.join(self.name(v) for v in captured)});")

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
        def shape_dtype(a: SSAValue) -> tuple[tuple[int, ...], str]:
            return tuple(a.type.get_shape()), numpy_name(a.type.element_type)  # type: ignore[attr-defined]

        ins = [(a.name_hint or f"in{i}", *shape_dtype(a)) for i, a in enumerate(fn.args[:n_in])]
        outs = [shape_dtype(a) for a in fn.args[n_in:]]
        return FunctionSignature(fn.sym_name.data, ins, outs, function_errors(fn))  # type: ignore[arg-type]

    def emit_block(self, block: Block) -> None:
        for op in block.ops:
            self.emit_op(op)

    def emit_op(self, op: Operation) -> None:
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
            self.constants[op.result] = attr.value.data  # type: ignore[attr-defined]
        value = attr.value.data if isinstance(attr, (IntegerAttr, FloatAttr)) else None  # type: ignore[union-attr]
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

    def const_index(self, v: SSAValue) -> int:
        if v not in self.constants:
            raise NotImplementedError("loop bounds must be constants")
        return self.constants[v]

    def parallel_work(self, op: scf.ParallelOp) -> int:
        """Scalar steps of the whole nest: its trips times the trips of the loops inside."""
        consts = self.constants_in(op)

        def work(block: Block) -> int:
            return sum(consts.get(o.ub, 1) * work(o.body.block) if isinstance(o, scf.ForOp) else 1
                       for o in block.ops)

        return pymath.prod(self.const_index(u) for u in op.upperBound) * work(op.body.block)

    @staticmethod
    def constants_in(op: Operation) -> dict[SSAValue, int]:
        return {c.result: c.value.value.data for c in op.walk()  # type: ignore[attr-defined]
                if isinstance(c, arith.ConstantOp) and isinstance(c.result.type, IndexType)}

    def emit_ParallelOp(self, op: scf.ParallelOp) -> None:
        """A nest of plain loops; the innermost stays a unit-stride loop of its own.

        `collapse` over every loop makes each iteration recover its indices by
        division and modulo, which keeps the nest scalar; so only the outer loops
        collapse into the threads' iterations and the innermost is an `omp simd`
        loop (its iterations are independent: the nest is an scf.parallel). A
        transpose (a load whose fastest index is the second-innermost loop) walks
        the two inner loops in TRANSPOSE_TILE squares, so reads and writes both
        stay in cache."""
        ivs = list(op.body.block.args)
        work = self.parallel_work(op)
        extents = [self.const_index(u) for u in op.upperBound]
        unit = all(self.constants.get(v) == 0 for v in op.lowerBound) and all(
            self.constants.get(v) == 1 for v in op.step)
        flat = unit and not any(o.regions for o in op.body.block.ops)  # no inner loops: a vector body
        tiled = flat and len(ivs) >= 2 and self.transposed_load(op) and min(extents[-2:]) > TRANSPOSE_TILE
        simd = flat and extents[-1] >= SIMD_MIN_TRIPS and (len(ivs) == 1 or tiled or
                                                           pymath.prod(extents[:-1]) >= OUTER_MIN_TRIPS)
        n = len(ivs)
        if work >= PARALLEL_MIN_WORK:
            # tiled: the outer loops and the two tile loops; simd: all but the innermost
            parallel = n if tiled else n - 1 if simd and n > 1 else n
            collapse = f" collapse({parallel})" if parallel > 1 else ""
            self.line(f"#pragma omp parallel for{' simd' if simd and n == 1 else ''}{collapse} schedule(static) "
                      "num_threads(opc_num_threads())")
        if tiled:
            self.open_tiled_loops(op, ivs, extents)
        else:
            self.open_loops(op, ivs[:-1])
            if simd and not (n == 1 and work >= PARALLEL_MIN_WORK):
                self.line("#pragma omp simd")
            self.open_loops(op, ivs[-1:], len(ivs) - 1)
        self.emit_block(op.body.block)
        self.close_loops(len(ivs) + (2 if tiled else 0))

    def transposed_load(self, op: scf.ParallelOp) -> bool:
        """A load in the nest whose innermost loop index strides and whose last index is the
        second-innermost loop (a transpose of the two inner axes)."""
        ivs = op.body.block.args
        for o in op.body.block.ops:
            if isinstance(o, memref.LoadOp) and o.indices:
                idx = list(o.indices)
                if ivs[-1] in idx and idx[-1] is ivs[-2]:
                    return True
        return False

    def open_tiled_loops(self, op: scf.ParallelOp, ivs: list[SSAValue], extents: list[int]) -> None:
        """The outer loops, then the two inner ones as TRANSPOSE_TILE squares (the tile loops
        first, so they collapse with the outer ones)."""
        self.open_loops(op, ivs[:-2])
        a, b = self.name(ivs[-2]), self.name(ivs[-1])
        na, nb, t = extents[-2], extents[-1], TRANSPOSE_TILE
        self.line(f"for (int64_t {a}_t = 0; {a}_t < {na}; {a}_t += {t}) {{")
        self.indent += 1
        self.line(f"for (int64_t {b}_t = 0; {b}_t < {nb}; {b}_t += {t}) {{")
        self.indent += 1
        end_a = f"{a}_t + {t}" if na % t == 0 else f"({a}_t + {t} < {na} ? {a}_t + {t} : {na})"
        end_b = f"{b}_t + {t}" if nb % t == 0 else f"({b}_t + {t} < {nb} ? {b}_t + {t} : {nb})"
        self.line(f"for (int64_t {a} = {a}_t; {a} < {end_a}; {a}++) {{")
        self.indent += 1
        self.line("#pragma omp simd")
        self.line(f"for (int64_t {b} = {b}_t; {b} < {end_b}; {b}++) {{")
        self.indent += 1

    def open_loops(self, op: scf.ParallelOp, ivs: Iterable[SSAValue], first: int = 0) -> None:
        """`for` headers of ivs, the loops of op from its loop number `first` on."""
        bounds = list(zip(op.lowerBound, op.upperBound, op.step))[first:]
        for iv, (lb, ub, step) in zip(ivs, bounds):
            i = self.name(iv)
            self.line(f"for (int64_t {i} = {self.name(lb)}; {i} < {self.name(ub)}; {i} += {self.name(step)}) {{")
            self.indent += 1

    def close_loops(self, n: int) -> None:
        for _ in range(n):
            self.indent -= 1
            self.line("}")

    def declare_accumulators(self, op: scf.ForOp) -> list[str]:
        """The loop's carried values as C locals holding their initial values; its block reads them."""
        accs = []
        for arg, init, res in zip(op.body.block.args[1:], op.iter_args, op.results):
            acc = self.name(res)
            self.line(f"{c_type(res.type)} {acc} = {self.name(init)};")
            self.names[arg] = acc
            accs.append(acc)
        return accs

    def emit_ForOp(self, op: scf.ForOp) -> None:
        targets = self.declare_accumulators(op)
        i = self.name(op.body.block.args[0])
        simd = op.attributes.get("opc.simd_reduction")
        clauses = [c.data for c in simd.data] if simd is not None else []  # type: ignore[attr-defined]
        block = self.sum_block(op, clauses)
        if block:
            self.emit_blocked_sums(op, targets, block)
            return
        if simd is not None:  # partial accumulators per lane: the sum reassociates, max/min do not change
            self.line("#pragma omp simd " + " ".join(f"reduction({c}:{t})" for c, t in zip(clauses, targets)))
        self.line(f"for (int64_t {i} = {self.name(op.lb)}; {i} < {self.name(op.ub)}; {i} += {self.name(op.step)}) {{")
        self.indent += 1
        self.yield_targets.append(targets)
        self.emit_block(op.body.block)
        self.yield_targets.pop()
        self.indent -= 1
        self.line("}")

    # -- sums with several accumulators ----------------------------------------------

    def sum_block(self, op: scf.ForOp, clauses: list[str]) -> int:
        """Partial sums per carried value for a loop of float sums (0: none).

        `omp simd reduction(+)` keeps one vector of partial sums, so a row's adds
        form one chain bound by the add latency; SUM_BLOCK_BYTES of partials (four
        AVX-512 vectors) are independent chains. Max/min keep `omp simd`: their
        NaN flag is narrower than the value, and partials of mixed widths measured
        slower than the one vector. Short loops (under two blocks) keep it too."""
        if not clauses or any(c != "+" for c in clauses) or op.results[0].type not in (f32, f64):
            return 0
        if any(r.type != op.results[0].type for r in op.results):
            return 0
        if any(o.regions for o in op.body.block.ops):
            return 0
        bounds = [self.constants.get(v) for v in (op.lb, op.ub, op.step)]
        if None in bounds or bounds[0] != 0 or bounds[2] != 1:
            return 0
        block = SUM_BLOCK_BYTES // (4 if op.results[0].type == f32 else 8)
        return block if bounds[1] >= 2 * block else 0

    def emit_blocked_sums(self, op: scf.ForOp, targets: list[str], block: int) -> None:
        """The loop as blocks of `block` iterations, iteration k of a block adding into
        partial k of each sum (a vector loop without a reduction, its partials kept in
        registers), then the tail into the first partials, then a pairwise fold of
        the partials added to the initial value: the sum reassociates, nothing else."""
        iv = op.body.block.args[0]
        i, n = self.name(iv), self.constants[op.ub]
        ct = c_type(op.results[0].type)
        parts = [f"{t}_p" for t in targets]
        main = n - n % block
        self.line("{")
        self.indent += 1
        for p in parts:
            self.line(f"{ct} {p}[{block}];")
        self.line(f"for (int64_t {i}_k = 0; {i}_k < {block}; {i}_k++) {{ " +
                  " ".join(f"{p}[{i}_k] = 0;" for p in parts) + " }")
        self.line(f"for (int64_t {i}_b = 0; {i}_b < {main}; {i}_b += {block}) {{")
        self.indent += 1
        self.line("#pragma omp simd")
        self.blocked_body(op, targets, parts, ct, f"for (int64_t {i}_k = 0; {i}_k < {block}; {i}_k++)",
                          f"{i}_b + {i}_k", f"{i}_k")
        self.indent -= 1
        self.line("}")
        if main < n:  # the tail: at most block - 1 elements, into partials 0, 1, ...
            self.blocked_body(op, targets, parts, ct, f"for (int64_t {i}_k = 0; {i}_k < {n - main}; {i}_k++)",
                              f"{main} + {i}_k", f"{i}_k")
        lanes = block * SUM_FOLD_BYTES // SUM_BLOCK_BYTES
        w = block // 2
        while w >= lanes:  # halvings down to one vector of partials, each a vector add
            self.line(f"for (int64_t {i}_k = 0; {i}_k < {w}; {i}_k++) {{ " +
                      " ".join(f"{p}[{i}_k] = {p}[{i}_k] + {p}[{i}_k + {w}];" for p in parts) + " }")
            w //= 2
        # the last vector across its lanes: gcc's own horizontal sum (without SLP, which
        # modules are built without, small unrolled halvings become scalar code, measured slower)
        self.line("#pragma omp simd " + " ".join(f"reduction(+:{t})" for t in targets))
        self.line(f"for (int64_t {i}_k = 0; {i}_k < {lanes}; {i}_k++) {{ " +
                  " ".join(f"{t} = {t} + {p}[{i}_k];" for t, p in zip(targets, parts)) + " }")
        self.indent -= 1
        self.line("}")

    def blocked_body(self, op: scf.ForOp, targets: list[str], parts: list[str], ct: str, header: str,
                     index: str, part: str) -> None:
        """`header { iv = index; each sum reads its partial, runs the body, writes it back }`."""
        self.line(header + " {")
        self.indent += 1
        self.line(f"const int64_t {self.name(op.body.block.args[0])} = {index};")
        for t, p in zip(targets, parts):
            self.line(f"{ct} {t} = {p}[{part}];")
        self.yield_targets.append(targets)
        self.emit_block(op.body.block)
        self.yield_targets.pop()
        for t, p in zip(targets, parts):
            self.line(f"{p}[{part}] = {t};")
        self.indent -= 1
        self.line("}")

    # -- memory ----------------------------------------------------------------------

    def offset(self, ref: SSAValue, indices: Iterable[SSAValue]) -> str:
        shape = ref.type.get_shape()  # type: ignore[attr-defined]
        terms = []
        for d, idx in enumerate(indices):
            if self.constants.get(idx) == 0:
                continue
            stride = pymath.prod(shape[d + 1:])
            terms.append(self.name(idx) if stride == 1 else f"{self.name(idx)} * {stride}")
        return " + ".join(terms) or "0"

    def emit_LoadOp(self, op: memref.LoadOp) -> None:
        r = op.res
        at = self.offset(op.memref, op.indices)
        self.line(f"const {c_type(r.type)} {self.name(r)} = {self.name(op.memref)}[{at}];")

    def emit_StoreOp(self, op: memref.StoreOp) -> None:
        self.line(f"{self.name(op.memref)}[{self.offset(op.memref, op.indices)}] = {self.name(op.value)};")

    def emit_AllocOp(self, op: memref.AllocOp) -> None:
        t = op.memref.type
        if op.memref in self.arena:
            ct = c_type(t.element_type)  # type: ignore[attr-defined]
            self.line(f"{ct} *restrict {self.name(op.memref)} = ({ct} *)(opc_arena + {self.arena[op.memref]});")
            return
        n = max(1, pymath.prod(t.get_shape()))  # type: ignore[attr-defined]
        ptr, ct = self.name(op.memref), c_type(t.element_type)  # type: ignore[attr-defined]
        self.line(f"{ptr} = ({ct} *)malloc(sizeof({ct}) * {n});")
        self.line(f"if (!{ptr}) {{ status = 1; goto cleanup; }}")

    def emit_AllocaOp(self, op: memref.AllocaOp) -> None:
        """A row kernel's row buffer: on the thread's stack (bounded: ROW_BUFFER_BYTES)."""
        t = op.memref.type
        n = max(1, pymath.prod(t.get_shape()))  # type: ignore[attr-defined]
        self.line(f"{c_type(t.element_type)} {self.name(op.memref)}[{n}];")  # type: ignore[attr-defined]

    def emit_DeallocOp(self, op: memref.DeallocOp) -> None:
        if op.memref in self.arena:
            return  # the arena goes at cleanup
        ptr = self.name(op.memref)
        self.line(f"free({ptr}); {ptr} = NULL;")

    def emit_ReinterpretCastOp(self, op: memref.ReinterpretCastOp) -> None:
        src = op.source
        const = "const " if src in self.const_ptrs else ""
        if const:
            self.const_ptrs.add(op.result)
        ct = c_type(op.result.type.element_type)  # type: ignore[attr-defined]
        self.line(f"{const}{ct} *{self.name(op.result)} = {self.name(src)};")

    # -- GEMM ---------------------------------------------------------------------------

    def gemm_args(self, op: GemmOp) -> str:
        def ptr(v: SSAValue | None) -> str:
            return self.name(v) if v is not None else "NULL"

        p = {k: op.properties[k].value.data for k in ("batch", "m", "n", "k", "a_batch_stride", "b_batch_stride")}  # type: ignore[attr-defined]
        ta, tb = (int(op.properties[k].value.data != 0) for k in ("trans_a", "trans_b"))  # type: ignore[attr-defined]
        act = GEMM_ACTIVATIONS.index(op.activation.data)
        return (f"{p['batch']}, {p['m']}, {p['n']}, {p['k']}, {ptr(op.a)}, {p['a_batch_stride']}, {ta}, "
                f"{ptr(op.b)}, {p['b_batch_stride']}, {tb}, {ptr(op.bias)}, {act}, {ptr(op.out)}, {ptr(op.reserve)}")

    def emit_GemmOp(self, op: GemmOp) -> None:
        suffix = dtype_suffix(op.out.type.element_type)  # type: ignore[attr-defined]
        self.line(f"opc_rt_gemm_{suffix}({self.gemm_args(op)});")

    # -- a device's own kernel ----------------------------------------------------------

    def emit_ExternalCallOp(self, op: ExternalCallOp) -> None:
        """One opc_kernel_call on the stack (runtime/opc_kernel.h); a failure leaves by cleanup."""
        symbol = op.symbol.data
        attrs = [kernel_attr_initializer(name, a) for name, a in op.kernel_attrs.data.items()]
        self.line("{")
        self.indent += 1
        for what, values in (("in", op.inputs), ("out", op.outputs)):
            if values:
                tensors = ", ".join(self.tensor_initializer(v) for v in values)
                self.line(f"opc_tensor opc_{what}[{len(values)}] = {{{tensors}}};")
        if attrs:
            self.line(f"const opc_attr opc_attrs[{len(attrs)}] = {{{', '.join(attrs)}}};")
        ins, outs = ("opc_in" if op.inputs else "NULL"), ("opc_out" if op.outputs else "NULL")
        self.line(f"const opc_kernel_call opc_call = {{{c_string(op.op.data.removeprefix('opc.'))}, {len(op.inputs)}, "
                  f"{len(op.outputs)}, {len(attrs)}, {ins}, {outs}, {'opc_attrs' if attrs else 'NULL'}, "
                  "opc_kernel_message_buf};")
        self.line("opc_kernel_message_buf[0] = '\\0';")
        self.line(f"const int opc_rc = {symbol}(&opc_call);")
        self.line(f"if (opc_rc != 0) {{ status = opc_kernel_failed({c_string(symbol)}, opc_rc); goto cleanup; }}")
        self.indent -= 1
        self.line("}")

    def tensor_initializer(self, v: SSAValue) -> str:
        t = v.type
        shape = list(t.get_shape()) or [0]  # type: ignore[attr-defined]
        enum = KERNEL_DTYPES[mlir_name(t.element_type)]  # type: ignore[attr-defined]
        return f"{{(void *){self.name(v)}, {enum}, {t.get_num_dims()}, {{{', '.join(map(str, shape))}}}}}"  # type: ignore[attr-defined]

    # -- runtime kernels and run-time checks (runtime/opc_nn.h, opc_status.h) ---------

    def call_args(self, op: CallOp) -> str:
        ints = [str(v) for v in op.ints.get_values()]
        floats = [c_float_literal(float(v), Float64Type()) for v in op.floats.get_values()]
        return ", ".join([*(self.name(v) for v in op.args), *ints, *floats])

    def emit_CallOp(self, op: CallOp) -> None:
        self.line(f"opc_nn_{op.callee.data}({self.call_args(op)});")

    def emit_CheckIndexOp(self, op: CheckIndexOp) -> None:
        size, code = op.size.value.data, op.code.value.data
        wrap = int(op.wrap.value.data != 0)
        self.line(f"const int64_t {self.name(op.result)} = opc_check_index({self.name(op.raw)}, {size}, {wrap}, "
                  f"{self.name(op.status)}, {code});")

    def emit_RaiseStatusOp(self, op: RaiseStatusOp) -> None:
        s = self.name(op.status)
        self.line(f"if ({s}[0] != 0) {{ opc_error_detail = {s}[1]; status = (int){s}[0]; goto cleanup; }}")


# ---------------------------------------------------------------------------
# A device's own kernels: the few module-level lines their calls need
# ---------------------------------------------------------------------------

KERNEL_DTYPES = {"i1": "OPC_DTYPE_BOOL", "i8": "OPC_DTYPE_I8", "ui8": "OPC_DTYPE_U8", "i16": "OPC_DTYPE_I16",
                 "i32": "OPC_DTYPE_I32", "i64": "OPC_DTYPE_I64", "f16": "OPC_DTYPE_F16", "bf16": "OPC_DTYPE_BF16",
                 "f32": "OPC_DTYPE_F32", "f64": "OPC_DTYPE_F64"}  # fmt: skip

KERNEL_HOST = f"""#include "opc_kernel.h"
static _Thread_local char opc_kernel_message_buf[OPC_KERNEL_MESSAGE_SIZE];
static _Thread_local char opc_kernel_error_buf[OPC_KERNEL_MESSAGE_SIZE + 128];
const char *{KERNEL_MESSAGE_FN}(void) {{ return opc_kernel_error_buf; }}
static int opc_kernel_failed(const char *symbol, int rc) {{
  if (opc_kernel_message_buf[0])
    snprintf(opc_kernel_error_buf, sizeof opc_kernel_error_buf, "%s: %s", symbol, opc_kernel_message_buf);
  else
    snprintf(opc_kernel_error_buf, sizeof opc_kernel_error_buf, "%s: failed with status %d", symbol, rc);
  return {KERNEL_STATUS};
}}
"""


def c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def kernel_attr_initializer(name: str, a: Attribute) -> str:
    """An opc_attr initializer: {name, kind, i, f, s, ints, count}."""
    def attr(kind: str, i: str = "0", f: str = "0.0", s: str = "NULL", ints: str = "NULL", count: int = 0) -> str:
        return f"{{{c_string(name)}, OPC_ATTR_{kind}, {i}, {f}, {s}, {ints}, {count}}}"

    if isinstance(a, IntegerAttr) and isinstance(a.type, IntegerType) and a.type.width.data == 1:
        return attr("BOOL", i=str(int(a.value.data != 0)))
    if isinstance(a, IntegerAttr):
        return attr("INT", i=f"{a.value.data}LL")
    if isinstance(a, FloatAttr):
        return attr("FLOAT", f=c_float_literal(a.value.data, Float64Type()))
    if isinstance(a, StringAttr):
        return attr("STRING", s=c_string(a.data))
    if isinstance(a, DenseArrayBase):
        values = [int(v) for v in a.get_values()]
        ints = f"(const int64_t[]){{{', '.join(f'{v}LL' for v in values) or '0'}}}"
        return attr("INTS", ints=ints, count=len(values))
    return attr("DTYPE", i=KERNEL_DTYPES[mlir_name(a)])


def kernel_preamble(module: ModuleOp) -> str:
    """The kernel header, the error buffers and one prototype per device kernel the module calls."""
    symbols = sorted({op.symbol.data for op in module.walk() if isinstance(op, ExternalCallOp)})
    if not symbols:
        return ""
    return KERNEL_HOST + "".join(f"int {s}(const opc_kernel_call *call);\n" for s in symbols)


def kernel_label(op: Operation) -> str:
    """`kind: ops` of a top-level kernel: the schedule's label on a loop nest (opc.kernel), else
    what the call is (a GEMM with its epilogue, a runtime row kernel, a device's kernel)."""
    label = op.attributes.get("opc.kernel")
    if isinstance(label, StringAttr):
        return label.data
    if isinstance(op, GemmOp):
        parts = ["bias"] * (op.bias is not None) + [op.activation.data] * (op.activation.data != "none")
        return "gemm: " + " + ".join(["matmul", *parts])
    if isinstance(op, CallOp):
        return f"library: {op.callee.data}"
    if isinstance(op, ExternalCallOp):
        return f"device: {op.op.data.removeprefix('opc.')}"
    return f"other: {op.name}"


PROFILE_EVENTS = 1 << 16  # kernel calls a profile keeps one by one (the Chrome trace); totals count all
PROFILE_FN = "opc_profile"  # a CPU module's profiling switch; opc/profile.py reads the rest
PROFILE_CDEF = ("int opc_profile(int on);\nconst char *opc_profile_label(int k);\nint64_t opc_profile_ns(int k);\n"
                "int64_t opc_profile_calls(int k);\nint64_t opc_profile_events(int64_t *out, int64_t cap);\n"
                "void opc_profile_reset(void);")


def profile_support(labels: list[str]) -> str:
    """Per-kernel time and call counters and an event buffer, off until opc_profile(1): then each
    kernel call of the entry points reads the monotonic clock twice (atomics: callers may be
    threads). Off, a call costs one load and a branch."""
    n = max(1, len(labels))
    names = ", ".join(c_string(label) for label in labels) or '""'
    return f"""#include <time.h>
static const char *const opc_prof_labels[{n}] = {{{names}}};
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
int {PROFILE_FN}(int on) {{ opc_prof_on = on; return {len(labels)}; }}
const char *opc_profile_label(int k) {{ return opc_prof_labels[k]; }}
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
}}
"""


def emit_c(module: ModuleOp) -> tuple[str, list[FunctionSignature]]:
    """C source of a lowered module and the signatures of its functions."""
    return CEmitter().emit_module(module)

