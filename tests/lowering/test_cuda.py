"""CUDA target: the generated .cu of every op (one module holding a function
per op and dtype) and of examples/mlp.mlir (forward and --grad) must compile
with nvcc and print no warnings; these run wherever nvcc is (CI has nvcc and
no GPU). Numeric checks against NumPy and the CPU target run on a GPU only;
the row kernels' checks also run on the CPU target and on tests/support/cuda_sim.h,
which runs the emitted CUDA with g++ and threads.
The nvcc runs happen in parallel, once per module (about 10 s of CPU for the
ops module, most of it nvcc's host compile and ptxas)."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
import pytest
from cuda_simulator import simulated
from programs import row_src

import opc
from opc.api import lower, prepare
from opc.frontend import load_module
from opc.lowering.build import runtime_dir
from opc.lowering.cuda_build import compile_cuda, driver_device_count, has_cuda_device, nvcc_path
from opc.lowering.cuda_emitter import emit_cuda

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MLP = os.path.join(ROOT, "examples", "mlp.mlir")
MLIR = {"bool": "i1", "int8": "i8", "uint8": "ui8", "int16": "i16", "int32": "i32", "int64": "i64",
        "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}  # fmt: skip
FLOATS = ["float32", "float16", "bfloat16", "float64"]
TOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 1e-5, "float64": 1e-12}

needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="nvcc not on PATH")
# The GPU tests skip for "no CUDA device" only where the machine has none (no device node of the
# NVIDIA kernel driver); on a machine with a GPU whose CUDA driver does not load they fail, saying why.
GPU_NODES = sorted(glob.glob("/dev/nvidia[0-9]*"))
needs_gpu_node = pytest.mark.skipif(not GPU_NODES, reason="no CUDA device (no /dev/nvidia[0-9]* device node)")


def require_working_driver() -> None:
    count, why = driver_device_count()
    if count == 0:
        pytest.fail(f"{', '.join(GPU_NODES)} exist(s) but the CUDA driver finds no device: {why}", pytrace=False)


@pytest.fixture
def cuda_driver() -> None:
    require_working_driver()


def needs_gpu(test):
    return needs_gpu_node(pytest.mark.usefixtures("cuda_driver")(test))


def tt(shape, dt: str) -> str:
    dims = "x".join(map(str, shape))
    return f"tensor<{dims + 'x' if dims else ''}{MLIR[dt]}>"


def fn(name: str, args, body: str, results, returns=("%r",)) -> str:
    params = ", ".join(f"%a{i}: {tt(s, d)}" for i, (s, d) in enumerate(args))
    outs = ", ".join(tt(s, d) for s, d in results)
    return f"func.func @{name}({params}) -> ({outs}) {{\n  {body}\n  func.return {', '.join(returns)} : {outs}\n}}\n"


def unary(name: str, op: str, dt: str, shape=(4, 3), attrs: str = "") -> str:
    return fn(name, [(shape, dt)], f"%r = opc.{op} %a0{attrs} : ({tt(shape, dt)}) -> {tt(shape, dt)}", [(shape, dt)])


def binary(name: str, op: str, dt: str, out: str | None = None) -> str:
    a, b = (4, 3), (3,)
    return fn(name, [(a, dt), (b, dt)], f"%r = opc.{op} %a0, %a1 : ({tt(a, dt)}, {tt(b, dt)}) -> {tt(a, out or dt)}",
              [(a, out or dt)])


def fused(name: str, act: str, dt: str, tx: bool, ty: bool, m=5, k=7, n=6) -> str:
    xs, ys = ((k, m) if tx else (m, k)), ((n, k) if ty else (k, n))
    outs = [((m, n), dt)] * (1 if act == "none" else 2)
    res = ", ".join(tt(s, d) for s, d in outs)
    names = "%r" if act == "none" else "%r, %z"
    body = (f"{names} = opc.fused_gemm_epilogue %a0, %a1, %a2 {{activation = \"{act}\", trans_x = {str(tx).lower()}, "
            f"trans_y = {str(ty).lower()}}} : ({tt(xs, dt)}, {tt(ys, dt)}, {tt((n,), dt)}) -> ({res})")
    return fn(name, [(xs, dt), (ys, dt), ((n,), dt)], body, outs, names.split(", "))


def fused_grad(name: str, act: str, dt: str, tx: bool, ty: bool, m=5, k=7, n=6) -> str:
    xs, ys = ((k, m) if tx else (m, k)), ((n, k) if ty else (k, n))
    args = [(xs, dt), (ys, dt)] + ([((m, n), dt)] if act != "none" else []) + [((m, n), dt)]
    operands = ", ".join(f"%a{i}" for i in range(len(args)))
    outs = [(xs, dt), (ys, dt), ((n,), dt)]
    body = (f"%dx, %dy, %db = opc.fused_gemm_epilogue_grad {operands} {{activation_grad = \"{act}\", "
            f"trans_x = {str(tx).lower()}, trans_y = {str(ty).lower()}}} : "
            f"({', '.join(tt(s, d) for s, d in args)}) -> ({', '.join(tt(s, d) for s, d in outs)})")
    return fn(name, args, body, outs, ("%dx", "%dy", "%db"))


def float_functions() -> list[str]:
    """The float-only unary ops with a registered scalar function (exp, sin, ...): a new one is
    covered without a row here."""
    from opc.dialects.opc import UnaryElementwiseOp
    from opc.ops.registry import ELEMENTWISE, entries

    return [e.name.removeprefix("opc.") for e in entries() if issubclass(e.op, UnaryElementwiseOp)
            and e.op.FLOATS_ONLY and e.op in ELEMENTWISE and ELEMENTWISE[e.op].float_op is not None]


def ops_sources() -> list[str]:
    """A function per op of SPEC.md, over the dtypes that exercise different code."""
    out = []
    for op in ("add", "sub", "mul", "maximum", "minimum"):
        for dt in ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64"):
            out.append(binary(f"{op}_{dt}", op, dt))
    for op in ("div", "pow"):
        for dt in FLOATS:
            out.append(binary(f"{op}_{dt}", op, dt))
    for op in ("div", "pow", "bitwise_and", "bitwise_or", "bitwise_xor", "shift_left", "shift_right"):
        for dt in ("int8", "int64") + (() if op == "pow" else ("uint8",)):
            out.append(binary(f"{op}_{dt}", op, dt))
    for dt in ("int16", "uint8"):
        out.append(unary(f"bitwise_not_{dt}", "bitwise_not", dt))
    for op in ("greater_than", "less_than", "equal"):
        for dt in ("float32", "bfloat16", "int16", "uint8"):
            out.append(binary(f"{op}_{dt}", op, dt, out="bool"))
    for op in ("neg", "abs", "relu"):
        for dt in ("float32", "float16", "int8", "int64"):
            out.append(unary(f"{op}_{dt}", op, dt))
    for op in float_functions():
        for dt in FLOATS:
            out.append(unary(f"{op}_{dt}", op, dt))
    for dt in FLOATS:
        out.append(unary(f"gelu_{dt}", "gelu", dt))
        out.append(unary(f"gelu_erf_{dt}", "gelu", dt, attrs=" {approximate = false}"))
    s = (4, 3)
    for dt in ("float32", "float16", "int32", "bool"):
        out.append(fn(f"select_{dt}", [(s, "bool"), (s, dt), ((3,), dt)],
                      f"%r = opc.select %a0, %a1, %a2 : ({tt(s, 'bool')}, {tt(s, dt)}, {tt((3,), dt)}) -> {tt(s, dt)}",
                      [(s, dt)]))
    for src, dst in (("float32", "int8"), ("float64", "uint8"), ("float32", "float16"), ("float64", "bfloat16"),
                     ("int64", "int8"), ("float16", "int32"), ("int32", "bool"), ("bfloat16", "float32")):
        out.append(fn(f"cast_{src}_{dst}", [(s, src)],
                      f"%r = opc.cast %a0 {{dtype = {MLIR[dst]}}} : ({tt(s, src)}) -> {tt(s, dst)}", [(s, dst)]))
    for src, dst in (("float32", "int32"), ("int64", "float64"), ("float16", "int16"), ("bfloat16", "float16"),
                     ("uint8", "int8"), ("bool", "uint8")):
        out.append(fn(f"bitcast_{src}_{dst}", [(s, src)],
                      f"%r = opc.bitcast %a0 {{dtype = {MLIR[dst]}}} : ({tt(s, src)}) -> {tt(s, dst)}", [(s, dst)]))
    out.append(fn("cast_grad_f16", [(s, "float16"), (s, "float32")],
                  f"%r = opc.cast_grad %a0, %a1 : ({tt(s, 'float16')}, {tt(s, 'float32')}) -> {tt(s, 'float16')}",
                  [(s, "float16")]))
    out.append(fn("full_f32", [], f"%r = opc.full {{value = 2.5 : f64}} : () -> {tt(s, 'float32')}", [(s, "float32")]))
    out.append(fn("full_bf16", [], f"%r = opc.full {{value = -1.0 : f64}} : () -> {tt(s, 'bfloat16')}",
                  [(s, "bfloat16")]))
    for dt in ("float32", "int64"):
        out.append(fn(f"iota_{dt}", [], f"%r = opc.iota : () -> {tt((7,), dt)}", [((7,), dt)]))
    out.append(fn("broadcast_to_f32", [((3,), "float32")],
                  f"%r = opc.broadcast_to %a0 : ({tt((3,), 'float32')}) -> {tt((2, 4, 3), 'float32')}",
                  [((2, 4, 3), "float32")]))
    out.append(fn("reshape_f32", [((4, 3), "float32")],
                  f"%r = opc.reshape %a0 : ({tt((4, 3), 'float32')}) -> {tt((2, 6), 'float32')}", [((2, 6), "float32")]))
    out.append(fn("reshape_exp_f32", [((4, 3), "float32")],
                  f"%t = opc.reshape %a0 : ({tt((4, 3), 'float32')}) -> {tt((12,), 'float32')}\n"
                  f"  %r = opc.exp %t : ({tt((12,), 'float32')}) -> {tt((12,), 'float32')}", [((12,), "float32")]))
    out.append(fn("transpose_f16", [((2, 3, 4), "float16")],
                  f"%r = opc.transpose %a0 {{perm = array<i64: 2, 0, 1>}} : ({tt((2, 3, 4), 'float16')}) -> "
                  f"{tt((4, 2, 3), 'float16')}", [((4, 2, 3), "float16")]))
    for op in ("reduce_sum", "reduce_max"):
        for dt in ("float32", "float16", "int32", "uint8", "float64"):
            x = (3, 70, 5)
            out.append(fn(f"{op}_{dt}", [(x, dt)],
                          f"%r = opc.{op} %a0 {{axes = array<i64: 1>, keepdim = false}} : ({tt(x, dt)}) -> "
                          f"{tt((3, 5), dt)}", [((3, 5), dt)]))
        out.append(fn(f"{op}_all_bf16", [((6, 50), "bfloat16")],
                      f"%r = opc.{op} %a0 {{axes = array<i64: 0, 1>, keepdim = false}} : ({tt((6, 50), 'bfloat16')})"
                      f" -> {tt((), 'bfloat16')}", [((), "bfloat16")]))
        out.append(fn(f"{op}_keep_f32", [((6, 50), "float32")],
                      f"%r = opc.{op} %a0 {{axes = array<i64: 0>, keepdim = true}} : ({tt((6, 50), 'float32')})"
                      f" -> {tt((1, 50), 'float32')}", [((1, 50), "float32")]))
    for dt, axis, flags in (("float32", 1, ""), ("bfloat16", 0, ", exclusive = true"), ("int64", -1, ", reverse = true")):
        x = (3, 70)
        out.append(fn(f"cumsum_{dt}", [(x, dt)], f"%r = opc.cumsum %a0 {{axis = {axis}{flags}}} : ({tt(x, dt)}) -> "
                      f"{tt(x, dt)}", [(x, dt)]))
    for dt in FLOATS:
        for tx, ty in ((False, False), (True, False), (False, True), (True, True)):
            xs, ys = ((7, 5) if tx else (5, 7)), ((6, 7) if ty else (7, 6))
            out.append(fn(f"matmul_{dt}_{int(tx)}{int(ty)}", [(xs, dt), (ys, dt)],
                          f"%r = opc.matmul %a0, %a1 {{trans_x = {str(tx).lower()}, trans_y = {str(ty).lower()}}} : "
                          f"({tt(xs, dt)}, {tt(ys, dt)}) -> {tt((5, 6), dt)}", [((5, 6), dt)]))
    out.append(fn("matmul_batch_f32", [((3, 70, 33), "float32"), ((3, 33, 65), "float32")],
                  f"%r = opc.matmul %a0, %a1 : ({tt((3, 70, 33), 'float32')}, {tt((3, 33, 65), 'float32')}) -> "
                  f"{tt((3, 70, 65), 'float32')}", [((3, 70, 65), "float32")]))
    for dt in ("float32", "float16"):
        out.append(fn(f"relu_grad_{dt}", [(s, dt), (s, dt)],
                      f"%r = opc.relu_grad %a0, %a1 : ({tt(s, dt)}, {tt(s, dt)}) -> {tt(s, dt)}", [(s, dt)]))
        out.append(fn(f"gelu_grad_{dt}", [(s, dt), (s, dt)],
                      f"%r = opc.gelu_grad %a0, %a1 : ({tt(s, dt)}, {tt(s, dt)}) -> {tt(s, dt)}", [(s, dt)]))
    for act in ("none", "relu", "gelu"):
        for dt in FLOATS:
            for tx, ty in ((False, False), (True, True)):
                out.append(fused(f"fused_{act}_{dt}_{int(tx)}{int(ty)}", act, dt, tx, ty))
        for tx, ty in ((False, False), (True, False), (False, True), (True, True)):
            out.append(fused_grad(f"fused_grad_{act}_{int(tx)}{int(ty)}", f"{act}_grad" if act != "none" else "none",
                                  "float32", tx, ty))
    out.append(fused_grad("fused_grad_gelu_bf16", "gelu_grad", "bfloat16", False, False))
    out.append(fused("fused_gelu_big_f32", "gelu", "float32", False, False, m=130, k=100, n=70))
    out.append(fn("dense_constants", [(s, "float32")],
                  f"%c = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.5, -6.0], [0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]> : "
                  f"{tt(s, 'float32')}\n  %h = arith.constant dense<0.5> : {tt((3,), 'float32')}\n"
                  f"  %t = opc.add %a0, %c : ({tt(s, 'float32')}, {tt(s, 'float32')}) -> {tt(s, 'float32')}\n"
                  f"  %r = opc.mul %t, %h : ({tt(s, 'float32')}, {tt((3,), 'float32')}) -> {tt(s, 'float32')}",
                  [(s, "float32")]))
    out += nn_sources()
    return out


def nn_sources() -> list[str]:
    """The ops of issue 11: every op, the kernels in a half and a full type, both row layouts."""
    out = []
    s, x3 = (4, 3), (3, 10, 5)
    for op, dt in (("reduce_min", "float32"), ("reduce_min", "uint8"), ("reduce_mean", "bfloat16")):
        out.append(fn(f"{op}_{dt}", [(x3, dt)], f"%r = opc.{op} %a0 {{axes = array<i64: 1>}} : ({tt(x3, dt)}) -> "
                      f"{tt((3, 5), dt)}", [((3, 5), dt)]))
    for dt in ("float32", "float16"):
        out.append(unary(f"sigmoid_{dt}", "sigmoid", dt))
    for name, xs, ys, rs, dt in (("heads", (2, 3, 4, 5), (2, 1, 5, 6), (2, 3, 4, 6), "float32"),
                                 ("linear", (2, 4, 5), (5, 6), (2, 4, 6), "float16"),
                                 ("mixed", (2, 1, 4, 5), (1, 3, 5, 6), (2, 3, 4, 6), "float32")):
        out.append(fn(f"matmul_{name}_{dt}", [(xs, dt), (ys, dt)],
                      f"%r = opc.matmul %a0, %a1 : ({tt(xs, dt)}, {tt(ys, dt)}) -> {tt(rs, dt)}", [(rs, dt)]))
    sl = "{start = array<i64: 1, 0>, limit = array<i64: 4, 3>, strides = array<i64: 2, 2>}"
    for dt in ("float32", "int8"):
        out.append(fn(f"slice_{dt}", [(s, dt)], f"%r = opc.slice %a0 {sl} : ({tt(s, dt)}) -> {tt((2, 2), dt)}",
                      [((2, 2), dt)]))
    out.append(fn("slice_grad_f32", [(s, "float32"), ((2, 2), "float32")],
                  f"%r = opc.slice_grad %a0, %a1 {sl} : ({tt(s, 'float32')}, {tt((2, 2), 'float32')}) -> "
                  f"{tt(s, 'float32')}", [(s, "float32")]))
    for dt in ("float32", "bool"):
        out.append(fn(f"concat_{dt}", [(s, dt), ((4, 2), dt)], f"%r = opc.concat %a0, %a1 {{axis = 1}} : "
                      f"({tt(s, dt)}, {tt((4, 2), dt)}) -> {tt((4, 5), dt)}", [((4, 5), dt)]))
    table = (10, 3)
    for dt, it in (("float32", "int64"), ("bfloat16", "int32")):
        out.append(fn(f"gather_{dt}", [(table, dt), ((2, 4), it)], f"%r = opc.gather %a0, %a1 : "
                      f"({tt(table, dt)}, {tt((2, 4), it)}) -> {tt((2, 4, 3), dt)}", [((2, 4, 3), dt)]))
    for dt in ("float32", "float16"):
        out.append(fn(f"gather_grad_{dt}", [(table, dt), ((2, 4), "int64"), ((2, 4, 3), dt)],
                      f"%r = opc.gather_grad %a0, %a1, %a2 : ({tt(table, dt)}, {tt((2, 4), 'int64')}, "
                      f"{tt((2, 4, 3), dt)}) -> {tt(table, dt)}", [(table, dt)]))
    out.append(fn("gather_bag_f32", [(table, "float32"), ((2, 4), "int32")],
                  f"%g = opc.gather %a0, %a1 : ({tt(table, 'float32')}, {tt((2, 4), 'int32')}) -> "
                  f"{tt((2, 4, 3), 'float32')}\n  %r = opc.reduce_mean %g {{axes = array<i64: 1>}} : "
                  f"({tt((2, 4, 3), 'float32')}) -> {tt((2, 3), 'float32')}", [((2, 3), "float32")]))
    for op, dt, axis in (("softmax", "float32", -1), ("softmax", "float16", 1), ("log_softmax", "float32", 0),
                         ("log_softmax", "bfloat16", -1)):
        out.append(fn(f"{op}_{dt}", [(x3, dt)], f"%r = opc.{op} %a0 {{axis = {axis}}} : ({tt(x3, dt)}) -> "
                      f"{tt(x3, dt)}", [(x3, dt)]))
    for op, dt, axis in (("softmax_grad", "float32", -1), ("softmax_grad", "float64", 1),
                         ("log_softmax_grad", "float16", 1)):
        out.append(fn(f"{op}_{dt}", [(x3, dt), (x3, dt)], f"%r = opc.{op} %a0, %a1 {{axis = {axis}}} : "
                      f"({tt(x3, dt)}, {tt(x3, dt)}) -> {tt(x3, dt)}", [(x3, dt)]))
    for dt, st in (("float32", "float32"), ("bfloat16", "float32"), ("float64", "float64")):
        t, v, m = tt(x3, dt), tt((5,), dt), tt((3, 10), st)
        out.append(fn(f"layer_norm_{dt}", [(x3, dt), ((5,), dt), ((5,), dt)],
                      f"%r, %m, %s = opc.layer_norm %a0, %a1, %a2 : ({t}, {v}, {v}) -> ({t}, {m}, {m})",
                      [(x3, dt), ((3, 10), st), ((3, 10), st)], ("%r", "%m", "%s")))
    for dt, st in (("float32", "float32"), ("float16", "float32")):
        t, v, m = tt(x3, dt), tt((10, 5), dt), tt((3,), st)
        out.append(fn(f"layer_norm_grad_{dt}", [(x3, dt), ((10, 5), dt), ((3,), st), ((3,), st), (x3, dt)],
                      f"%dx, %ds, %db = opc.layer_norm_grad %a0, %a1, %a2, %a3, %a4 {{begin_norm_axis = 1}} : "
                      f"({t}, {v}, {m}, {m}, {t}) -> ({t}, {v}, {v})", [(x3, dt), ((10, 5), dt), ((10, 5), dt)],
                      ("%dx", "%ds", "%db")))
    # labels in [0, 10): the numeric test samples them non-negative ("label" in the name)
    for dt, lt, axis, ls in (("float32", "int64", 1, (3, 1, 5)), ("float16", "int32", -1, (3, 10, 1))):
        shape = (3, 10, 5) if axis == 1 else (3, 10, 10)
        t, lab, loss = tt(shape, dt), tt(ls, lt), tt(ls, dt)
        out.append(fn(f"sce_label_{dt}", [(shape, dt), (ls, lt)],
                      f"%l, %s = opc.softmax_cross_entropy %a0, %a1 {{axis = {axis}}} : ({t}, {lab}) -> ({loss}, {t})",
                      [(ls, dt), (shape, dt)], ("%l", "%s")))
        out.append(fn(f"sce_grad_label_{dt}", [(ls, lt), (shape, dt), (ls, dt)],
                      f"%r = opc.softmax_cross_entropy_grad %a0, %a1, %a2 {{axis = {axis}}} : ({lab}, {t}, {loss}) "
                      f"-> {t}", [(shape, dt)]))
    # convolutions: 2-D grouped with stride, pads and dilation, 1-D depthwise; conv_transpose with output_padding
    attrs2 = "{strides = array<i64: 2, 1>, dilations = array<i64: 1, 2>, pads = array<i64: 1, 0, 1, 2>, group = 2}"
    x2, w2, y2 = (2, 4, 7, 6), (6, 2, 3, 2), (2, 6, 4, 6)
    attrs1 = "{strides = array<i64: 2>, pads = array<i64: 1, 1>, group = 3}"
    x1, w1, y1 = (1, 3, 9), (3, 1, 3), (1, 3, 5)
    for dt, (x, w, y, at) in zip(FLOATS, [(x2, w2, y2, attrs2), (x1, w1, y1, attrs1)] * 2):
        for op, a, b, r in (("conv", x, w, y), ("conv_grad_input", y, w, x), ("conv_grad_filter", x, y, w)):
            out.append(fn(f"{op}_{dt}", [(a, dt), (b, dt)], f"%r = opc.{op} %a0, %a1 {at} : ({tt(a, dt)}, "
                          f"{tt(b, dt)}) -> {tt(r, dt)}", [(r, dt)]))
    at = "{strides = array<i64: 2>, pads = array<i64: 1, 0>, output_padding = array<i64: 1>}"
    out.append(fn("conv_transpose_float32", [((1, 4, 5), "float32"), ((4, 2, 3), "float32")],
                  f"%r = opc.conv_transpose %a0, %a1 {at} : ({tt((1, 4, 5), 'float32')}, {tt((4, 2, 3), 'float32')}) "
                  f"-> {tt((1, 2, 11), 'float32')}", [((1, 2, 11), "float32")]))
    # pooling: 2-D max with dilation and ceil_mode, 1-D avg counting pads
    pa2 = "{kernel = array<i64: 3, 2>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 2>, pads = array<i64: 1, 0, 1, 1>, ceil_mode = true}"
    px2, py2 = (2, 3, 7, 8), (2, 3, 4, 4)
    pa1 = "{kernel = array<i64: 3>, strides = array<i64: 2>, pads = array<i64: 1, 1>, count_include_pad = true}"
    px1, py1 = (1, 4, 9), (1, 4, 5)
    for dt in FLOATS:
        t2, y2, i2, t1, y1 = tt(px2, dt), tt(py2, dt), tt(py2, "int64"), tt(px1, dt), tt(py1, dt)
        out.append(fn(f"max_pool_{dt}", [(px2, dt)], f"%y, %i = opc.max_pool %a0 {pa2} : ({t2}) -> ({y2}, {i2})",
                      [(py2, dt), (py2, "int64")], ("%y", "%i")))
        out.append(fn(f"max_pool_grad_{dt}", [(px2, dt), (py2, dt)],  # its indices from max_pool: in range
                      f"%y, %i = opc.max_pool %a0 {pa2} : ({t2}) -> ({y2}, {i2})\n"
                      f"  %r = opc.max_pool_grad %a0, %i, %a1 {pa2} : ({t2}, {i2}, {y2}) -> {t2}", [(px2, dt)]))
        out.append(fn(f"avg_pool_{dt}", [(px1, dt)], f"%r = opc.avg_pool %a0 {pa1} : ({t1}) -> {y1}", [(py1, dt)]))
        out.append(fn(f"avg_pool_grad_{dt}", [(px1, dt), (py1, dt)],
                      f"%r = opc.avg_pool_grad %a0, %a1 {pa1} : ({t1}, {y1}) -> {t1}", [(px1, dt)]))
    # attention (a mask broadcast over the batch) and its grad (is_causal): runtime/opc_nn_attention.cuh
    aq, ak, av, am, ao, al = (2, 5, 8), (2, 7, 8), (2, 7, 3), (5, 7), (2, 5, 3), (2, 5)
    ta = [tt(s_, "float32") for s_ in (aq, ak, av, am, ao)] + [tt(al, "float32")]
    out.append(fn("attention_float32", [(aq, "float32"), (ak, "float32"), (av, "float32"), (am, "float32")],
                  f"%o, %l = opc.attention %a0, %a1, %a2, %a3 {{scale = 0.25 : f64}} : ({ta[0]}, {ta[1]}, {ta[2]}, "
                  f"{ta[3]}) -> ({ta[4]}, {ta[5]})", [(ao, "float32"), (al, "float32")], ("%o", "%l")))
    th = [tt(s_, "float16") for s_ in (aq, ak, av, ao)]
    out.append(fn("attention_grad_float16", [(aq, "float16"), (ak, "float16"), (av, "float16"), (ao, "float16"),
                                             (al, "float32"), (ao, "float16")],
                  f"%dq, %dk, %dv = opc.attention_grad %a0, %a1, %a2, %a3, %a4, %a5 {{is_causal = true}} : ({th[0]}, "
                  f"{th[1]}, {th[2]}, {th[3]}, {ta[5]}, {th[3]}) -> ({th[0]}, {th[1]}, {th[2]})",
                  [(aq, "float16"), (ak, "float16"), (av, "float16")], ("%dq", "%dk", "%dv")))
    # batch / instance / group norm and batch_norm_grad: composites on cuda too
    nx, nc = (2, 4, 3, 5), (4,)
    for dt, st in (("float32", "float32"), ("float16", "float32")):
        t, c, sc = tt(nx, dt), tt(nc, dt), tt(nc, st)
        out.append(fn(f"batch_norm_norm_{dt}", [(nx, dt)] + [(nc, dt)] * 4,
                      f"%y, %rm, %rv, %sm, %sr = opc.batch_norm %a0, %a1, %a2, %a3, %a4 {{training = true}} : "
                      f"({t}, {c}, {c}, {c}, {c}) -> ({t}, {c}, {c}, {sc}, {sc})", [(nx, dt), (nc, dt), (nc, dt),
                      (nc, st), (nc, st)], ("%y", "%rm", "%rv", "%sm", "%sr")))
        out.append(fn(f"batch_norm_grad_norm_{dt}", [(nx, dt), (nc, dt), (nc, st), (nc, st), (nx, dt)],
                      f"%dx, %ds, %db = opc.batch_norm_grad %a0, %a1, %a2, %a3, %a4 : ({t}, {c}, {sc}, {sc}, {t}) -> "
                      f"({t}, {c}, {c})", [(nx, dt), (nc, dt), (nc, dt)], ("%dx", "%ds", "%db")))
        for op, g, extra in (("instance_norm", 4, ""), ("group_norm", 2, " {num_groups = 2}")):
            m = tt((2, g), st)
            out.append(fn(f"{op}_norm_{dt}", [(nx, dt), (nc, dt), (nc, dt)],
                          f"%y, %m, %r = opc.{op} %a0, %a1, %a2{extra} : ({t}, {c}, {c}) -> ({t}, {m}, {m})",
                          [(nx, dt), ((2, g), st), ((2, g), st)], ("%y", "%m", "%r")))
    return out


OPS_TEXT = "\n".join(ops_sources())


def loops_of(source, grad: bool = False, target: str = "cuda"):
    return lower(prepare(load_module(source), target, grad), target)


# ---------------------------------------------------------------------------
# nvcc -c of the generated code: runs wherever nvcc is
# ---------------------------------------------------------------------------


# Row kernels (softmax, log_softmax, layer norm, softmax's backward composed from
# primitives, plain row reductions) in every float type, with their autodiff grads:
# rows for a warp (37: not a multiple of 32) and for a block (1100: not a multiple
# of 256); in f32 also rows shorter than a warp, rank 3, and exact multiples.
ROW_DTYPES = ["f32", "f64", "f16", "bf16"]
ROW_SHAPES = [(5, 37), (3, 1100)]
ROW_EDGE_SHAPES = [(7, 5), (2, 3, 64), (9, 2048), (1, 2)]
ROW_NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


def row_tag(shape, dt: str) -> str:
    return f"{dt}_{'x'.join(map(str, shape))}"


def tagged_rows(shape, dt: str) -> str:
    """row_src's functions renamed NAME_TAG (softmax_grad: softmax_bwd, autodiff takes the _grad names)."""
    src = row_src(shape, dt).replace("@softmax_grad(", "@softmax_bwd(")
    return re.sub(r"func\.func @(\w+)\(", lambda m: f"func.func @{m.group(1)}_{row_tag(shape, dt)}(", src)


ROWS_TEXT = "\n".join(tagged_rows(s, dt) for dt in ROW_DTYPES for s in ROW_SHAPES)
ROW_EDGES_TEXT = "\n".join(tagged_rows(s, "f32") for s in ROW_EDGE_SHAPES)
NVCC_CASES = {"ops": (OPS_TEXT, False), "mlp_grad": (MLP, True),  # mlp_grad holds the forward mlp too
              "rows_grad": (ROWS_TEXT, True), "row_edges": (ROW_EDGES_TEXT, False)}


@pytest.fixture(scope="module")
def emitted():
    """{case: the generated .cu}."""
    return {name: emit_cuda(loops_of(src, grad=grad))[0] for name, (src, grad) in NVCC_CASES.items()}


@pytest.fixture(scope="module")
def nvcc_results(emitted):
    """{case: (returncode, output)}: every case's .cu compiled by nvcc -c, all at once."""
    tmp = tempfile.mkdtemp(prefix="opc-nvcc-")
    procs = {}
    for name in NVCC_CASES:
        cu = os.path.join(tmp, f"{name}.cu")
        with open(cu, "w", encoding="utf-8") as f:
            f.write(emitted[name])
        cmd = [nvcc_path(), "-c", "-arch=sm_90", "-std=c++17", "-Werror", "all-warnings", "-I", str(runtime_dir()),
               cu, "-o", os.path.join(tmp, f"{name}.o")]
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    results = {name: (p.wait(), p.stdout.read()) for name, p in procs.items()}  # type: ignore[union-attr]
    shutil.rmtree(tmp, ignore_errors=True)
    return results


@needs_nvcc
@pytest.mark.parametrize("case", list(NVCC_CASES))
def test_generated_cuda_compiles_without_warnings(nvcc_results, case):
    rc, output = nvcc_results[case]
    assert rc == 0, output
    assert "warning" not in output.lower(), output


def test_forward_in_grad():
    """The forward module's code is part of the --grad module's, so compiling the latter covers both."""
    forward = emit_cuda(loops_of(MLP))[0]
    with_grad = emit_cuda(loops_of(MLP, grad=True))[0]
    body = forward.split('extern "C" int opc_cuda_device_count', 1)[1]
    assert body.strip() and body.strip() in with_grad


def test_every_op_has_a_function():
    """But the ops whose result sizes depend on the data: tests/shapes/test_data_sizes_cuda.py runs
    them (their inputs need values in range: a k, thresholds)."""
    from opc.lowering.data_size_lowering import DATA_SIZE_LOWERINGS
    from opc.ops.registry import ALL_OPS, kernel_ops

    used = {line.split("= opc.")[1].split()[0] for line in OPS_TEXT.splitlines() if "= opc." in line}
    cpu_only = kernel_ops("cpu") - kernel_ops("cuda")
    data_sized = {op.name for op in DATA_SIZE_LOWERINGS}
    assert {f"opc.{u}" for u in used} >= ALL_OPS - cpu_only - data_sized  # cuda runs those by their rules


def test_emitted_source_shape():
    src, sigs = emit_cuda(loops_of(MLP, grad=True))
    assert [s.name for s in sigs] == ["mlp", "mlp_grad", "mlp_value_and_grad"]
    for needle in ('extern "C" int opc_fn_mlp_grad(', 'extern "C" int opc_fn_mlp_grad_host(', "__shfl_down_sync",
                   "opc_cuda_gemm_f32(", "cudaMalloc", "#include <cuda_fp16.h>", "#include <cuda_bf16.h>"):
        assert needle in src
    assert "restrict" not in src.replace("__restrict__", "")


# -- the shape of the emitted row kernels (no nvcc needed) ----------------------------


def launches(cu: str, fn_name: str) -> list[tuple[str, int, int, str]]:
    """(kernel, blocks, threads, kernel source) of each launch in opc_fn_FN, in order."""
    host = cu.split(f'extern "C" int opc_fn_{fn_name}(', 1)[1].split("\ncleanup:", 1)[0]
    out = []
    for k, blocks, threads in re.findall(r"(opc_k_\w+)<<<(\d+), (\d+)>>>", host):
        body = cu.split(f"void __launch_bounds__(256) {k}(", 1)[1].split("\n}\n", 1)[0]
        out.append((k, int(blocks), int(threads), body))
    return out


ONE_KERNEL = ["softmax", "log_softmax", "layer_norm", "softmax_bwd", "softmax_grad", "log_softmax_grad"]
ROW_CASES = [(s, dt, "rows_grad") for dt in ROW_DTYPES for s in ROW_SHAPES] + [
    (s, "f32", "row_edges") for s in ROW_EDGE_SHAPES]


@pytest.mark.parametrize("shape,dt,case", ROW_CASES, ids=[f"{c}-{row_tag(s, d)}" for s, d, c in ROW_CASES])
def test_row_kernels_are_one_cuda_kernel_each(emitted, shape, dt, case):
    """Each normalization is one __global__ with a team per row: a warp up to
    WARP_ROW_MAX, else a block whose passes meet through __shared__ slots, with
    every __syncthreads at the top of the (block-uniform) row loop, never inside a
    branch or the strided pass; per-row outputs are written by one thread."""
    cu, tag, rows, length = emitted[case], row_tag(shape, dt), int(np.prod(shape[:-1])), shape[-1]
    names = [n for n in ONE_KERNEL if case == "rows_grad" or not n.endswith("_grad")]
    for name in names:
        base, grad = (name[: -len("_grad")], "_grad") if name.endswith("_grad") else (name, "")
        ks = launches(cu, f"{base}_{tag}{grad}")
        assert len(ks) == 1, (name, [k for k, *_ in ks])
        _, blocks, threads, body = ks[0]
        passes = body.count("for (int opc_off = 16;")
        assert passes >= 1 and body.count(f"< {rows}; opc_row +=") == 1
        assert f"((int64_t){length})" in body  # the strided passes run to the row's end
        if length <= 1024:  # a warp per row: shuffles only
            assert "threadIdx.x % 32;" in body and "__syncthreads" not in body and "__shared__" not in body
            assert body.count("+= 32 * ") >= passes and "__shfl_sync(0xffffffffu" in body
            assert (blocks, threads) == (-(-rows * 32 // 256), min(256, rows * 32))
        else:  # a block per row
            assert "threadIdx.x % 256;" in body and body.count("+= 256 * ") >= passes
            assert (blocks, threads) == (min(rows, 8192), 256)
            sync_lines = [ln for ln in body.splitlines() if "__syncthreads" in ln]
            assert len(sync_lines) == 2 * passes  # slots written, then read before the next row writes them
            assert all(re.match(r"^ {4}__syncthreads\(\);", ln) for ln in sync_lines), sync_lines
            assert re.search(r"^ {2}for \(int64_t opc_row = blockIdx\.x; ", body, re.M)
            assert re.search(r"^ {2}__shared__ (float|double) opc_red0_0\[8\];", body, re.M)
        if name == "layer_norm":  # the mean and rstd it returns: one store per row
            assert body.count("if (opc_t == 0) out1_") == 1 and body.count("if (opc_t == 0) out2_") == 1


def test_row_max_propagates_nan_across_the_team(emitted):
    """The partial maxima of a softmax meet through the NaN-propagating maximum."""
    _, _, _, body = launches(emitted["rows_grad"], "softmax_f32_3x1100")[0]
    assert re.search(r"v_\d+ = \(\(v_\d+ != v_\d+ \|\| v_\d+ > opc_o0\) \? v_\d+ : opc_o0\);", body)


def test_cli_emit_and_compile_dir(tmp_path):
    emitted = subprocess.run([sys.executable, "-m", "opc", "compile", MLP, "--target", "cuda", "--emit", "cuda"],
                             capture_output=True, text=True, check=False, cwd=ROOT)
    assert emitted.returncode == 0, emitted.stderr
    assert "__global__" in emitted.stdout
    out = tmp_path / "build"
    done = subprocess.run([sys.executable, "-m", "opc", "compile", MLP, "--target", "cuda", "--grad", "-o", str(out)],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert (out / "mlp.cu").is_file()
    if nvcc_path() is not None:
        assert (out / "libmlp.so").is_file() and (out / "mlp.py").is_file()


# ---------------------------------------------------------------------------
# No device: the errors a user sees
# ---------------------------------------------------------------------------


@needs_gpu
def test_a_gpu_node_means_a_working_driver():
    """Where /dev/nvidia0 exists the CUDA driver must find the device (the cuda_driver fixture
    fails this test, and every GPU test, with the driver's own message otherwise)."""
    assert has_cuda_device()


def test_broken_driver_fails_instead_of_skipping(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "GPU_NODES", ["/dev/nvidia0"])
    monkeypatch.setattr(sys.modules[__name__], "driver_device_count",
                        lambda: (0, "cuInit failed: CUDA_ERROR_NO_DEVICE (CUresult 100)"))
    with pytest.raises(pytest.fail.Exception, match=r"/dev/nvidia0 exist\(s\) but .*cuInit failed"):
        require_working_driver()


@pytest.mark.skipif(has_cuda_device(), reason="a CUDA device is present")
def test_compile_without_device_says_so():
    with pytest.raises(RuntimeError, match="no CUDA device found"):
        opc.compile(MLP, target="cuda")


@needs_nvcc
@pytest.mark.skipif(has_cuda_device(), reason="a CUDA device is present")
def test_call_without_device_raises_cuda_message():
    """The built library's own path: the launch fails and CUDA's message reaches Python."""
    m = compile_cuda(loops_of(MLP, grad=True), require_device=False)  # the library the CLI test built: cached
    x, w, b = np.zeros((8, 16), np.float32), np.zeros((16, 32), np.float32), np.zeros(32, np.float32)
    with pytest.raises(RuntimeError, match=r"mlp\(\): CUDA error \d+: \w+"):
        m.mlp(x, w, b)
    with pytest.raises(ValueError, match="argument 'x'"):
        m.mlp(x[:, :3], w, b)


# ---------------------------------------------------------------------------
# Numbers: on a GPU only
# ---------------------------------------------------------------------------


def np_dtype(dt: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if dt == "bfloat16" else np.dtype(dt)


def sample(shape, dt: str, rng, positive: bool) -> np.ndarray:
    if dt == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(np_dtype(dt)).kind in "iu":
        lo = 0 if dt == "uint8" or positive else -9
        return rng.integers(lo, 10, size=shape).astype(np_dtype(dt))
    x = rng.uniform(0.25, 3.0, size=shape) if positive else rng.uniform(-2.0, 2.0, size=shape)
    return x.astype(np_dtype(dt))


@pytest.fixture(scope="module")
def gpu_and_cpu():
    return opc.compile(OPS_TEXT, target="cuda"), opc.compile(OPS_TEXT, target="cpu")


NAMES = [s.split("@")[1].split("(")[0] for s in ops_sources()]


@needs_gpu
@pytest.mark.parametrize("name", NAMES)
def test_op_on_gpu_matches_cpu(gpu_and_cpu, name):
    gpu, cpu = gpu_and_cpu
    sig = getattr(cpu, name).sig
    rng = np.random.default_rng(7)
    positive = any(k in name for k in ("log", "sqrt", "pow", "label"))
    args = [sample(shape, dt, rng, positive) for _, shape, dt in sig.inputs]
    got, want = getattr(gpu, name)(*args), getattr(cpu, name)(*args)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, w, (_, dt) in zip(got, want, sig.outputs):
        if dt in TOL:
            # sums in another order (GEMM, reductions) and CUDA's libm differ from the CPU's by a few ulps
            tol = TOL[dt] * (4 if any(k in name for k in ("matmul", "fused", "reduce", "erf", "gelu", "pow", "softmax",
                                                          "norm", "sce", "sigmoid", "bag", "attention")) else 1)
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol * 8, err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)


@needs_gpu
def test_mlp_on_gpu_against_numpy():
    rng = np.random.default_rng(3)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (16, 32), (32,)))
    m = opc.compile(MLP, target="cuda", grad=True)
    z = x.astype(np.float64) @ w + b
    h = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))
    want = h.astype(np.float32).astype(np.float16).astype(np.float32).sum(axis=0)
    np.testing.assert_allclose(m.mlp(x, w, b), want, rtol=2e-3, atol=2e-3)
    dx, dw, db = m.mlp_grad(x, w, b, np.ones(32, np.float32))
    assert dx.shape == (8, 16) and dw.shape == (16, 32) and db.shape == (32,)
    cpu = opc.compile(MLP, target="cpu", grad=True)
    for g, c in zip((dx, dw, db), cpu.mlp_grad(x, w, b, np.ones(32, np.float32))):
        np.testing.assert_allclose(g, c, rtol=1e-4, atol=1e-4)


@needs_gpu
def test_large_gemm_against_numpy():
    rng = np.random.default_rng(5)
    a, b, bias = (rng.standard_normal(s).astype(np.float32) for s in ((300, 257), (257, 190), (190,)))
    src = fused("g", "relu", "float32", False, False, m=300, k=257, n=190)
    out, z = opc.compile(src, target="cuda").g(a, b, bias)
    ref = a.astype(np.float64) @ b + bias
    np.testing.assert_allclose(z, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)


# -- row kernels' numbers against NumPy: on a GPU, and the same checks on the CPU target --------


ROW_TOL = {"f32": 1e-5, "f64": 1e-12, "f16": 8e-3, "bf16": 6e-2}  # halves: every op result rounds


def row_tolerance(dt: str, n: int) -> float:
    """A sum of n terms in another order differs by ~ n eps; halves round every op result."""
    eps = np.finfo(np.float32 if dt in ("f16", "bf16") else ROW_NP[dt]).eps
    return ROW_TOL[dt] + 2 * n * eps


def check_row_functions(m, shape, dt: str) -> None:
    """Softmax, log_softmax, layer norm (with mean and rstd), softmax's backward, row
    sum/max/min (NaN and -inf rows) and the autodiff grads against NumPy in f64."""
    tag, n, npt = row_tag(shape, dt), shape[-1], ROW_NP[dt]
    rng = np.random.default_rng(n + len(shape))
    x = (rng.standard_normal(shape) * 3).astype(npt)
    g, b = rng.standard_normal(n).astype(npt), rng.standard_normal(n).astype(npt)
    dy = rng.standard_normal(shape).astype(npt)
    xd, dyd, gd = (a.astype(np.float64) for a in (x, dy, g))
    tol = row_tolerance(dt, n)

    def close(got, want, scale=1.0):
        np.testing.assert_allclose(np.asarray(got).astype(np.float64), want, rtol=tol, atol=tol * scale,
                                   err_msg=f"{tag}")

    e = np.exp(xd - xd.max(-1, keepdims=True))
    sm = e / e.sum(-1, keepdims=True)
    close(getattr(m, f"softmax_{tag}")(x), sm)
    close(getattr(m, f"log_softmax_{tag}")(x), np.log(sm), 10)
    mu = xd.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((xd - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    xhat = (xd - mu) * rstd
    y, got_mu, got_r = getattr(m, f"layer_norm_{tag}")(x, g, b)
    close(got_mu, mu, 10)
    close(got_r, rstd, 10)
    close(y, xhat * gd + b.astype(np.float64), 10)
    smx = sm.astype(npt).astype(np.float64)
    close(getattr(m, f"softmax_bwd_{tag}")(smx.astype(npt), dy), smx * (dyd - (dyd * smx).sum(-1, keepdims=True)), 10)
    nan_x = x.copy()
    flat = nan_x.reshape(-1, n)
    flat[::2, rng.integers(n)] = np.nan  # a NaN anywhere in every other row
    if flat.shape[0] > 1:
        flat[1, :] = -np.inf  # a row of -inf: max is -inf, not the team's starting value
    s, hi, lo = getattr(m, f"rows_{tag}")(nan_x)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(hi.astype(np.float64), nan_x.astype(np.float64).max(-1))
        np.testing.assert_array_equal(lo.astype(np.float64), nan_x.astype(np.float64).min(-1))
        ref = nan_x.astype(np.float64).sum(-1)
    np.testing.assert_array_equal(np.isnan(s.astype(np.float64)), np.isnan(ref))
    finite = np.isfinite(ref)
    close(s.astype(np.float64)[finite], ref[finite], 10 * n)
    if not hasattr(m, f"softmax_{tag}_grad"):
        return
    close(getattr(m, f"softmax_{tag}_grad")(x, dy), sm * (dyd - (dyd * sm).sum(-1, keepdims=True)), 10)
    close(getattr(m, f"log_softmax_{tag}_grad")(x, dy), dyd - sm * dyd.sum(-1, keepdims=True), 10)
    zero = np.zeros(shape[:-1] + (1,), npt)
    dx, dg, db = getattr(m, f"layer_norm_{tag}_grad")(x, g, b, dy, zero, zero)
    dxhat = dyd * gd
    close(dx, rstd * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True)), 10)
    rows = int(np.prod(shape[:-1]))
    close(dg, (dyd * xhat).reshape(rows, n).sum(0), 10 * rows)
    close(db, dyd.reshape(rows, n).sum(0), 10 * rows)


@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda", marks=needs_gpu_node)])
def row_modules(request):
    """The row test modules built for the target: the CPU run checks the oracle and
    tolerances that the GPU run (which needs a device) relies on."""
    if request.param == "cuda":
        require_working_driver()
    return {case: opc.compile(src, target=request.param, grad=grad)
            for case, (src, grad) in NVCC_CASES.items() if case.startswith("row")}


@pytest.mark.parametrize("shape,dt,case", ROW_CASES, ids=[f"{c}-{row_tag(s, d)}" for s, d, c in ROW_CASES])
def test_row_kernels_match_numpy(row_modules, shape, dt, case):
    check_row_functions(row_modules[case], shape, dt)


# -- the generated CUDA run on the CPU (tests/support/cuda_sim.h): a check of the kernels' logic without a GPU --

@pytest.fixture(scope="module")
def simulated_rows(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("cuda-sim"))
    return {case: simulated(*emit_cuda(loops_of(src, grad=grad)), tmp, case)
            for case, (src, grad) in NVCC_CASES.items() if case.startswith("row")}


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH (it builds the CUDA simulation)")
@pytest.mark.parametrize("shape,dt,case", ROW_CASES, ids=[f"{c}-{row_tag(s, d)}" for s, d, c in ROW_CASES])
def test_row_kernels_match_numpy_on_the_cuda_simulator(simulated_rows, shape, dt, case):
    """The CUDA row kernels' indexing, strides, team reductions and barriers, run as
    threads on the CPU: the same NumPy checks as on a GPU."""
    check_row_functions(simulated_rows[case], shape, dt)
