"""Calls: the GEMM runtime, a device's own kernels (through opc_kernel.h), the nn runtime row kernels, run-time checks.

A part of CEmitter (c_emitter.py), which mixes it in."""

from __future__ import annotations

from xdsl.dialects.builtin import (
    DenseArrayBase,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    StringAttr,
)
from xdsl.ir import Attribute, SSAValue

from opc.dialects.kinds import element_of, shaped_type
from opc.dialects.opc import float_values, int_of, int_values
from opc.dialects.opc_loops import (
    GEMM_ACTIVATIONS,
    GEMM_SIZES,
    RUNTIME_SIZE,
    CallOp,
    CheckBoundOp,
    CheckIndexOp,
    ExternalCallOp,
    GemmOp,
    HandOutOp,
    RaiseStatusOp,
)
from opc.dtypes import mlir_name
from opc.lowering.abi import KERNEL_MESSAGE_FN, KERNEL_STATUS
from opc.lowering.c_expressions import c_float_literal, c_type, dtype_suffix
from opc.lowering.c_text import c_string
from opc.lowering.emitter_state import EmitterState

KERNEL_DTYPES = {"i1": "OPC_DTYPE_BOOL", "i8": "OPC_DTYPE_I8", "ui8": "OPC_DTYPE_U8", "i16": "OPC_DTYPE_I16",
                 "i32": "OPC_DTYPE_I32", "i64": "OPC_DTYPE_I64", "f16": "OPC_DTYPE_F16", "bf16": "OPC_DTYPE_BF16",
                 "f32": "OPC_DTYPE_F32", "f64": "OPC_DTYPE_F64", "f8E4M3FN": "OPC_DTYPE_F8E4M3FN",
                 "f8E4M3FNUZ": "OPC_DTYPE_F8E4M3FNUZ", "f8E5M2": "OPC_DTYPE_F8E5M2",
                 "f8E5M2FNUZ": "OPC_DTYPE_F8E5M2FNUZ", "f8E8M0FNU": "OPC_DTYPE_F8E8M0FNU",
                 "f4E2M1FN": "OPC_DTYPE_F4E2M1FN", "i4": "OPC_DTYPE_I4", "ui4": "OPC_DTYPE_U4", "i2": "OPC_DTYPE_I2",
                 "ui2": "OPC_DTYPE_U2", "f6E2M3FN": "OPC_DTYPE_F6E2M3FN", "f6E3M2FN": "OPC_DTYPE_F6E3M2FN"}  # fmt: skip

# The row length of an epilogue's range (a conv's 2x2 planes) that gets a loop of its own (emit_epilogue).
SHORT_ROW = 4

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


class CallEmission(EmitterState):
    def gemm_args(self, op: GemmOp) -> str:
        def ptr(v: SSAValue | None) -> str:
            return self.name(v) if v is not None else "NULL"

        runtime = iter(op.sizes)
        p = {k: str(int_of(op.properties[k])) if int_of(op.properties[k]) != RUNTIME_SIZE else self.name(next(runtime))
             for k in GEMM_SIZES}
        ta, tb = (int(int_of(op.properties[k]) != 0) for k in ("trans_a", "trans_b"))
        act = GEMM_ACTIVATIONS.index(op.activation.data)
        return (f"{p['batch']}, {p['m']}, {p['n']}, {p['k']}, {ptr(op.a)}, {p['a_batch_stride']}, {ta}, "
                f"{ptr(op.b)}, {p['b_batch_stride']}, {tb}, {ptr(op.bias)}, {act}, {ptr(op.out)}, {ptr(op.reserve)}")

    def epilogue_context(self, captured: list[SSAValue]) -> str:
        """The pointers an epilogue reads, in order; a run-time size travels as an integer in a pointer."""
        return ", ".join(f"(void *){self.name(v)}" if isinstance(v.type, MemRefType)
                         else f"(void *)(intptr_t){self.name(v)}" for v in captured)

    def emit_GemmOp(self, op: GemmOp) -> None:
        suffix = dtype_suffix(element_of(op.out))
        if op.epilogue is None:
            self.line(f"opc_rt_gemm_{suffix}({self.gemm_args(op)});")
            return
        epilogue, captured = self.emit_epilogue(op)
        self.line("{")
        ctx = self.epilogue_context(captured)
        self.line(f"  void *opc_ep_ctx[{len(captured)}] = {{{ctx}}};")
        self.line(f"  opc_rt_gemm_ep_{suffix}({self.gemm_args(op)}, {epilogue}, opc_ep_ctx);")
        self.line("}")

    def emit_epilogue(self, op: GemmOp | CallOp) -> tuple[str, list[SSAValue]]:
        """The GEMM's (or conv's) epilogue region as an outlined kernel `opc_k_F_N(ctx, r0, r1, c0, c1)` (so a
        split build compiles it in a kernel unit, parallel_build.py): its body in a loop over rows
        [r0, r1) and an `omp simd` loop over columns [c0, c1) of the [batch * m, n] output, reading
        its buffers from ctx (the call passes them in that order); rows of SHORT_ROW columns in a loop of
        their own."""
        assert op.epilogue is not None  # emit_GemmOp's caller checked
        block = op.epilogue.block
        captured, local_defs = self.captured_values(list(block.walk()), self.function)
        name, saved_lines, saved_indent = self.begin_outlined(
            self.function, op.attributes.get("opc.epilogue"), "kernel epilogue:",
            "void *opc_ctx, int64_t opc_r0, int64_t opc_r1, int64_t opc_c0, int64_t opc_c1")
        for k, v in enumerate(captured):
            if not isinstance(v.type, MemRefType):  # a run-time size, passed as an integer in the pointer
                self.line(f"{self.param(v)} = (int64_t)(intptr_t)((void **)opc_ctx)[{k}];")
                continue
            const = "const " if v in self.const_ptrs else ""
            ct = c_type(element_of(v))
            self.line(f"{self.param(v)} = ({const}{ct} *)((void **)opc_ctx)[{k}];")
        self.emit_local_defs(local_defs)
        r, c = (self.name(a) for a in block.args)
        # rows of SHORT_ROW columns (a conv's 2x2 planes) get a loop of that constant count: the simd
        # loop's setup per row of 4 cost more than its body (MobileNetV2's 960-channel layers at 2x2:
        # 30 us of batch norm and clip); with the count a constant it is one short vector per row
        for short in (True, False):
            self.line(f"if (opc_c1 - opc_c0 == {SHORT_ROW}) {{" if short else "} else {")
            self.line(f"  for (int64_t {r} = opc_r0; {r} < opc_r1; {r}++) {{")
            self.line("    #pragma omp simd")
            end = f"opc_c0 + {SHORT_ROW}" if short else "opc_c1"
            self.line(f"    for (int64_t {c} = opc_c0; {c} < {end}; {c}++) {{")
            self.indent += 3
            self.emit_block(block)
            self.indent -= 3
            self.line("    }")
            self.line("  }")
        self.line("}")
        self.indent = 0
        self.line("}")
        return self.outline(name, saved_lines, saved_indent), captured

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
        t = shaped_type(v)
        shape = list(t.get_shape()) or [0]
        enum = KERNEL_DTYPES[mlir_name(element_of(v))]
        return f"{{(void *){self.name(v)}, {enum}, {t.get_num_dims()}, {{{', '.join(map(str, shape))}}}}}"

    def call_args(self, op: CallOp) -> str:
        ints = [str(v) for v in int_values(op.ints)]
        for position, size in zip(int_values(op.runtime), op.sizes):  # run-time sizes
            ints[position] = self.name(size)
        floats = [c_float_literal(float(v), Float64Type()) for v in float_values(op.floats)]
        return ", ".join([*(self.name(v) for v in op.args), *ints, *floats])

    def emit_CallOp(self, op: CallOp) -> None:
        if op.epilogue is None:
            self.line(f"opc_nn_{op.callee.data}({self.call_args(op)});")
            return
        epilogue, captured = self.emit_epilogue(op)  # a conv's, over [n * c, spatial]: as a GEMM's
        kernel, dtype = op.callee.data.rsplit("_", 1)  # conv_f32 -> conv_ep_f32, fused_conv_epilogue_ep_f32
        callee = f"{kernel}_ep_{dtype}"
        self.line("{")
        ctx = self.epilogue_context(captured)
        self.line(f"  void *opc_ep_ctx[{len(captured)}] = {{{ctx}}};")
        self.line(f"  opc_nn_{callee}({self.call_args(op)}, {epilogue}, opc_ep_ctx);")
        self.line("}")

    def emit_CheckIndexOp(self, op: CheckIndexOp) -> None:
        size = self.name(op.extent) if op.extent is not None else op.size.value.data
        code = op.code.value.data
        wrap = int(op.wrap.value.data != 0)
        self.line(f"const int64_t {self.name(op.result)} = opc_check_index({self.name(op.raw)}, {size}, {wrap}, "
                  f"{self.name(op.status)}, {code});")

    def emit_CheckBoundOp(self, op: CheckBoundOp) -> None:
        v, bound = self.name(op.value), self.name(op.bound)
        self.line(f"if ({v} < 0 || {v} >= {bound}) {{ opc_error_detail = {v}; status = {op.code.value.data}; "
                  "goto cleanup; }")

    def emit_HandOutOp(self, op: HandOutOp) -> None:
        buf = self.name(op.buffer)
        self.line(f"{self.name(op.handle)}[0] = (int64_t)(uintptr_t){buf}; {buf} = NULL;")

    def emit_RaiseStatusOp(self, op: RaiseStatusOp) -> None:
        s = self.name(op.status)
        self.line(f"if ({s}[0] != 0) {{ opc_error_detail = {s}[1]; status = (int){s}[0]; goto cleanup; }}")
