"""Mutation testing of opc's core modules (issue 25), with cosmic-ray for the Python
modules and a short list of hand-written mutants for what cosmic-ray cannot mutate
(the C runtime's casts and row reductions; the C expression tables, which are strings).

    pip install '.[mutation]'
    python3 tools/mutation.py                       # every module, 30 sampled mutants each
    python3 tools/mutation.py --sample 0            # every mutant (hours on two cores)
    python3 tools/mutation.py --module rules --sample 10 --seed 3
    python3 tools/mutation.py --module c-runtime    # the hand-written mutants only

Each Python module is mutated in place by cosmic-ray (run it in a clean checkout and
do not edit while it runs; cosmic-ray restores the file after each mutant) and the
tests written for that module run against each mutant (`pytest -x`: the first
failure kills it). A mutant is killed when the tests fail or time out, survives
when they pass; "incompetent" ones (the module no longer imports) and the known
equivalent mutants in EQUIVALENT are left out of the score. Prints one table row
per module (the latest scores: docs/testing.md's table, each from its bench/results record). Sessions go to --out (default mutation-out/), where
`cr-report --show-output mutation-out/rules.sqlite` lists every mutant and its diff.
"""

# pyright: reportMissingImports=false
# (cosmic_ray is the optional [mutation] extra, imported where a session runs)

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST = "python3 -m pytest -x -q -p no:cacheprovider"


@dataclass(frozen=True)
class Module:
    path: str
    tests: str  # the tests written for this module (no fuzz or FileCheck suites: their kills count apart)
    lines: tuple[int, int] | None = None  # mutate only these lines (1-based, inclusive)


MODULES = {
    # test_dynamic_nn, test_slices, test_data_sizes: the rules at run-time sizes (causal mask, concat, topk);
    # test_norm, test_conv_fast, test_attention, test_pool, test_gemm_epilogue: those ops' rules
    "rules": Module("opc/ops/vjp_rules.py", "tests/autodiff/test_grad_primitives.py tests/autodiff/test_grad_semantics.py "
                    "tests/autodiff/test_grad_higher_order.py tests/autodiff/test_nn_grad.py tests/lowering/test_edge_values.py "
                    "tests/shapes/test_dynamic_nn.py tests/ops/test_norm.py tests/ops/test_conv_fast.py "
                    "tests/ops/test_attention.py tests/ops/test_pool.py tests/shapes/test_slices.py "
                    "tests/shapes/test_data_sizes.py tests/lowering/test_gemm_epilogue.py"),
    # test_grad_semantics: the clip vjps (clip_input) and pow's masks; test_grad_ulp: tanh's and sigmoid's slope
    # from x; test_grad_higher_order: the vjps differentiated again; test_onnx_old_opsets and test_op_checklist:
    # the ONNX names and opsets registered here
    "elementwise": Module("opc/ops/elementwise.py", "tests/autodiff/test_grad_primitives.py tests/autodiff/test_grad_semantics.py "
                          "tests/autodiff/test_grad_ulp.py tests/autodiff/test_grad_higher_order.py "
                          "tests/lowering/test_cpu_ops.py tests/lowering/test_math_unary.py tests/lowering/test_edge_values.py "
                          "tests/ops/test_integer_ops.py tests/ops/test_op_checklist.py tests/frontend/test_onnx_old_opsets.py"),
    # the conv, norm and attention rules run where their tests compile with decompose="all"
    "decompose": Module("opc/ops/decompositions.py", "tests/ops/test_decompose.py tests/lowering/test_nn_ops.py "
                        "tests/ops/test_norm.py tests/ops/test_conv.py tests/ops/test_attention.py "
                        "tests/autodiff/test_nn_grad.py tests/ops/test_conv_fast.py"),
    "scalars": Module("opc/lowering/scalars.py", "tests/lowering/test_cpu_ops.py tests/lowering/test_edge_values.py "
                      "tests/lowering/test_lowp.py tests/ops/test_op_checklist.py"),  # float8/6/4 casts; has_scalar_rule
    # the expression tables and their renderers; test_integer_ops: shifts, division, abs, int4/int2 casts;
    # test_lowp: the float8/f16/bf16 constants and casts; test_math_unary: the libm rows
    "c-tables": Module("opc/lowering/c_expressions.py", "tests/lowering/test_cpu_ops.py tests/lowering/test_compare_nan.py "
                       "tests/lowering/test_edge_values.py tests/ops/test_integer_ops.py tests/lowering/test_lowp.py "
                       "tests/lowering/test_math_unary.py"),
    "converters": Module("opc/onnx_import/tensor.py", "tests/frontend/test_onnx_import.py "
                         "tests/frontend/test_onnx_old_opsets.py tests/shapes/test_dynamic_onnx.py "
                         "tests/shapes/test_onnx_slice_clamp.py tests/frontend/test_onnx_node_suite.py"),
    # test_nn_grad, test_grad_primitives: gather_grad, slice_grad, concat and the losses' grads; test_dynamic_nn,
    # test_slices: the same at run-time sizes; test_conv_fast, test_conv_epilogue: fused_conv_epilogue's call
    "nn-lowering": Module("opc/lowering/nn_lowering.py", "tests/lowering/test_nn_ops.py tests/ops/test_conv.py "
                          "tests/ops/test_pool.py tests/ops/test_norm.py tests/ops/test_attention.py tests/ops/test_cumsum.py "
                          "tests/autodiff/test_nn_grad.py tests/autodiff/test_grad_primitives.py tests/shapes/test_dynamic_nn.py "
                          "tests/shapes/test_slices.py tests/ops/test_conv_fast.py tests/lowering/test_conv_epilogue.py"),
    "load-onnx": Module("opc/onnx_load.py", "tests/frontend/test_onnx_runtime.py tests/api/test_paper_cuts.py "
                        "tests/shapes/test_dynamic_onnx.py tests/frontend/test_onnx_sequences.py"),
    "interop": Module("opc/interop/torch.py", "tests/api/test_interop_torch.py tests/api/test_interop_arrays.py "
                      "tests/api/test_interop_torch_data_sizes.py"),
    "scheduler": Module("opc/transforms/opc_schedule.py", "tests/transforms/test_schedule.py "
                        "tests/lowering/test_gemm_epilogue.py tests/lowering/test_conv_epilogue.py "
                        "tests/ops/test_attention.py tests/ops/test_pool.py tests/shapes/test_slices.py "
                    "tests/shapes/test_data_sizes.py tests/lowering/test_gemm_epilogue.py"),
}

# cosmic-ray operators left out: bit operations, shifts, modulo, floor division and power
# (opc's Python code has almost none of them, so they yield mostly incompetent mutants), and
# the variable/exception/delete/invert operators, whose mutants are mostly not slips a developer makes.
EXCLUDED_OPERATORS = ("BitAnd", "BitOr", "BitXor", "LShift", "RShift", "Mod", "FloorDiv", "Pow", "VariableInserter",
                      "VariableReplacer", "ExceptionReplacer", "ReplaceUnaryOperator_Delete", "_Invert", "_UAdd")

# Known equivalent mutants, (module, the mutated line as cosmic-ray writes it): why no test can kill them.
EQUIVALENT: dict[tuple[str, str], str] = {
    ("opc/lowering/c_expressions.py", 'one = "1.0f" if not isinstance(t, Float32Type) else "1.0"'):
        "rsqrt's 1 as a double for f32 (or a float for f64): 1/sqrtf(x) divided in double and rounded to "
        "float is the correctly rounded float quotient (double rounding is innocuous for division), and 1.0f "
        "promotes exactly to double",
    ("opc/ops/elementwise.py", "return _extremum(e, op, douts[ -1], o.GreaterThanOp)  # type: ignore[arg-type]"):
        "maximum has one result: douts[-1] is douts[0]",
    ("opc/ops/elementwise.py", "return _extremum(e, op, douts[ -1], o.LessThanOp)  # type: ignore[arg-type]"):
        "minimum has one result: douts[-1] is douts[0]",
    ("opc/onnx_import/tensor.py", 'return [args[ -1] if len(args) == 1 else node.e.value(o.ConcatOp(args, '
                                      'node.axis(node.attr("axis"), rank)))]'):
        "Concat of one input: args[-1] is args[0]",
    ("opc/lowering/c_expressions.py", 'return n * {"double": 8, "float": 4, "uint16_t": 2, "int64_t": 9, "uint64_t": 8, '
                                  '"int32_t": 4,'):
        "an int64 buffer over-allocated by 1/8 in the arena: each slot starts 64-byte aligned, so only memory is "
        "wasted (the opposite slip, 7, is an overflow: test_integer_ops' row results of 9 elements see it)",
    ("opc/transforms/opc_decompose.py", "if not dz is not op.dout:"):
        "only the SSA name hint of dout (printed IR shows %dz for it): the ops and numbers are the same",
    ("opc/transforms/opc_schedule.py", "elif len(users) == 1 and pointwise(users[ -1]) and users[0] not in views and "
                                       "evaluated_once(v, users[0]):"):
        "users has one element: users[-1] is users[0]",
    ("opc/transforms/opc_schedule.py", "for o in ops[position[g] + 0:]:"):
        "the walk visits g itself first, which adds nothing: g reads no result of its own",
    ("opc/transforms/opc_schedule.py", "if a == v or p in roots or p in nest or (isinstance(p, Operation) and "
                                       "is_constant(p)):"):
        "xDSL's SSAValue.__eq__ is identity: == is `is`",
    ("opc/transforms/opc_schedule.py", "if (keeps_features(t) and t.results[0] not in returned and t.results[ -1].uses"):
        "t is a transpose: one result, results[-1] is results[0]",
    ("opc/transforms/opc_schedule.py", "return len(shape) == len(out) >= 2 and all(d == (out[1] if i == 1 else 1) "
                                       "for i, d in enumerate(shape))"):
        "out is a conv's output (its only caller), of rank 3 or more: >= 2 and >= 3 agree",
    ("opc/transforms/opc_schedule.py", "if not (isinstance(op, INLINABLE) or is_splat_constant(op)) or "
                                       "len(op.results) > 1:"):
        "an inlinable op or a constant has a result: != 1 and > 1 agree",
    ("opc/interop/torch.py", "out = results[0] if len(results) == 0 else f\"({', '.join(results)})\""):
        "torch's schema parser reads `-> (Tensor)` as `-> Tensor` (one return either way)",
    ("opc/interop/torch.py", 'return path.name.split(".")[0].removeprefix("_opc_")[: 17]'):
        "16 or 17 hex digits of the module's hash: either names each module's ops apart",
    ("opc/interop/torch.py", "douts = [d if d is not None and d.dtype is dt else inputs[0].new_zeros(shape, dtype=dt)"):
        "torch dtypes are singletons: is and == agree",
    ("opc/interop/torch.py", "outs = [args[0].new_empty(shape, dtype=dt) if not args else torch.empty(shape, dtype=dt)"):
        "torch.library.custom_op refuses a function without tensor inputs, so args is never empty here",
    ("opc/interop/torch.py", "if len(inputs) is not len(self.inputs):"):
        "CPython caches the ints -5..256: `is not` and `!=` agree on input counts below 257",
    ("opc/interop/torch.py", "if len(a.shape) is not len(shape) or any(isinstance(w, int) and w != got for w, got in "
                             "zip(shape, a.shape)):"):
        "ranks are 0..8 and CPython caches small ints: `is not` and `!=` agree",
    ("opc/interop/torch.py", "out = results[ -1] if len(results) == 1 else f\"({', '.join(results)})\""):
        "one result: results[-1] is results[0]",
    ("opc/interop/torch.py", "return outs[ -1] if single else tuple(outs)"):
        "single: one result, outs[-1] is outs[0]",
    ("opc/interop/torch.py", "single = len(results_of(sig)) <= 1"):
        "op() refuses a function without results before register() runs: the count is never 0 here",
    ("opc/interop/torch.py", "out = results[0] if len(results) <= 1 else f\"({', '.join(results)})\""):
        "op() refuses a function without results before schema() runs: the count is never 0 here",
    ("opc/lowering/nn_lowering.py", "copy.name_hint = f\"{v.name_hint and 'operand'}_batch\""):
        "only an SSA name hint (a C variable's name): the code and numbers are the same",
    ("opc/lowering/nn_lowering.py", "ms = [ 0] * len(full)"):
        "without a mask (has_mask 0) the runtime never reads the mask strides these give",
    ("opc/lowering/nn_lowering.py", "mstrides[-1], len(batch), *batch, *[1] * pad, *mstrides[:-2], *[ 1] * pad]"):
        "mask strides of the batch slots past the batch rank: the runtime reads only len(batch) of them",
    ("opc/lowering/nn_lowering.py", "STATUS_LEN = 3  # runtime/opc_status.h: OPC_STATUS_LEN"):
        "the status buffer one slot longer than the runtime writes: the extra slot is never read",
    ("opc/onnx_import/tensor.py", "elif want is not have:"):
        "CenterCropPad after `want < have`: `is not` differs from `>` only for equal sizes that are distinct int "
        "objects, and then both pads are 0 and the concat of x alone is x",
    ("opc/ops/decompositions.py", "return [e.dim(x, 0)] if g.n <= o.DYNAMIC else []"):
        "o.DYNAMIC is INT64_MIN, the least value a dim can hold: <= is ==",
    ("opc/lowering/scalars.py", "r = s.sigmoid(xs[ -1])"):
        "sigmoid has one operand: xs[-1] is xs[0]",
    ("opc/lowering/scalars.py", "return xs[0] if unsigned else e.value(arith.MaxSIOp(xs[ -1], e.const(0, in_t)))"):
        "relu has one operand: xs[-1] is xs[0]",
    ("opc/lowering/scalars.py", "if isinstance(dst, Float64Type) or (isinstance(dst, Float32Type) or is_half(src)):"):
        "it differs only for f64 -> f32, an extf there: the C emitters render it as the bare double, which the "
        "assignment to the result's float variable rounds as the truncf's (float) cast does "
        "(test_f64_to_f32_cast_rounds_before_the_next_op checks that no double reaches the next op)",
    ("opc/ops/vjp_rules.py", "assert douts[ -1] is not None  # inference: y is the only result"):
        "inference batch_norm has one result: douts[-1] is douts[0]",
    ("opc/ops/vjp_rules.py", "dy = dy if dy is not None else e.full( -1.0, op.y)"):
        "layer_norm's rule is not @takes_missing: the autodiff passes zeros for an unused y, never None",
    ("opc/lowering/scalars.py", "if kind == opc.AbsOp:"):
        "op classes compare by identity (their metaclass keeps type.__eq__): == is `is`",
    ("opc/onnx_load.py", 'if kind >= "sequence_type":'):
        "list inputs are sequence_type or optional_type, and 'optional_type' < 'sequence_type': >= is ==",
    ("opc/ops/elementwise.py", "if (inner_bound < outer_bound) if isinstance(op, o.MinimumOp) else "
                               "(inner_bound <= outer_bound):"):
        "a max-outer clip whose bounds meet or cross (hi <= lo) read on x: the inner min passes d only where "
        "x <= hi and the outer max only where its operand >= lo, so both forms give 0 but at x == hi == lo, "
        "where both read a tie on each side (a quarter of d); NaN gives 0 either way",
    ("opc/ops/elementwise.py", 'elementwise(o.AsinOp, math.AsinOp, onnx="Asin", since= 6)'):
        "every model passes onnx.checker first (onnx_import/proto.py: load), which refuses Asin below opset 7 "
        "(ONNX has no Asin before it), so no converter is looked up at opset 6",
    ("opc/ops/elementwise.py", 'elementwise(o.CeilOp, math.CeilOp, onnx="Ceil", since= 0)'):
        "a converter valid from opset 0 and one from 1 serve the same models: opset 0 is refused before any "
        "lookup (onnx_import/proto.py: default_opset, MIN_OPSET 1), and the lookup takes the newest key <= the opset",
    ("opc/ops/elementwise.py", 'elementwise(o.AcoshOp, math.AcoshOp, onnx="Acosh", since= 8)'):
        "onnx.checker refuses Acosh below opset 9 (ONNX has none before it) before any converter is looked up",
    ("opc/ops/elementwise.py", "return (e.div(douts[ -1], e.add(e.full(1.0, x), x)),)"):
        "log1p has one result: douts[-1] is douts[0]",
    ("opc/lowering/c_expressions.py", 'return f"{sign}INFINITY" if not isinstance(t, Float32Type) else '
                                      'f"{sign}(double)INFINITY"'):
        "an infinity literal as a float for f64 or a double for f32: inf is exact in both types, and a float "
        "operation with an infinite operand gives the same value computed in double and rounded back (inf, "
        "NaN or a compare)",
    ("opc/lowering/c_expressions.py", "src, dst, a = o.operands[0].type, o.results[ -1].type, e.name(o.operands[0])"):
        "a cast has one result: results[-1] is results[0] (the line opens ext_f, trunc_f, c_cast and bit_cast)",
    ("opc/lowering/c_expressions.py", "return f\"(({c_type(t)}){int(value)}{'LL' if abs(int(value)) < 2**31 - 1 "
                                      "else ''})\""):
        "the LL suffix on small constants and not on large ones: C99 gives an unsuffixed decimal constant the "
        "first of int, long, long long that holds it, and the cast to the result's type follows either way",
    ("opc/lowering/c_expressions.py", "t = o.results[ -1].type"):
        "every renderer's op has one result: results[-1] is results[0]",
    ("opc/lowering/c_expressions.py", 'return n * {"double": 9, "float": 4, "uint16_t": 2, "int64_t": 8, "uint64_t": 8, '
                                  '"int32_t": 4,'):
        "an f64 buffer over-allocated by 1/8 in the arena (buffer_bytes' only use, c_emitter's arena size): each "
        "slot starts 64-byte aligned, so only memory is wasted",
    ("opc/lowering/c_expressions.py", "lhs, rhs = o.operands[0], o.operands[ 0]"):
        "int_pick reads rhs only for its type, and arith's integer max/min have both operands of one type",
    ("opc/lowering/c_expressions.py", "t, a, b = o.results[ -1].type, e.name(o.operands[0]), e.name(o.operands[1])"):
        "the shift and division renderers' ops have one result: results[-1] is results[0]",
    ("opc/lowering/c_expressions.py", "wide = isinstance(t, IndexType) or isinstance(t, IntegerType) and "
                                      "t.width.data >= 64"):
        "opc's integer types are at most 64 bits wide (opc/dtypes.py): >= 64 is == 64",
    ("opc/lowering/c_expressions.py", 'return "NAN" if not isinstance(t, Float32Type) else "(double)NAN"'):
        "a quiet NaN literal as a float for f64 or a double for f32: the conversion keeps a quiet NaN, and any "
        "operation on it gives NaN in either type",
    ("opc/lowering/nn_lowering.py", "e.parallel(others or [ 2], lambda ix: line(ix if others else []))"):
        "a rank-1 cumsum's one line computed twice: the result never shares x's buffer, so the second pass "
        "stores the same values (checked by hand on a cumsum of a temporary, 1 and 2 threads)",
    ("opc/lowering/c_expressions.py", "wide = isinstance(t, IndexType) or isinstance(t, IntegerType) and "
                                      "t.width.data <= 64"):
        "narrow integers wrapping in uint64_t instead of uint32_t: c_unsigned_wide serves +, -, *, negation, "
        "abs and a left shift by less than the width, whose low bits do not depend on the wider bits, and the "
        "result is cast back to its own type",
    ("opc/lowering/c_expressions.py", "return f\"(({unsigned_c_type(o.operands[1].type)}){e.name(o.operands[1])} >= "
                                      "{width_of(o.operands[ 0].type)}u)\""):
        "arith's shifts have both operands of one type: the width of operand 0 is operand 1's",
    ("opc/lowering/c_expressions.py", 'arith.NegfOp: lambda e, o: f"(-{e.name(o.operands[ -1])})",'):
        "negf has one operand: operands[-1] is operands[0]",
    ("opc/lowering/c_expressions.py", "if isinstance(t, IntegerType) and t.width.data == 64 and value <= -(1 << 63):"):
        "a constant holds a value of its own type, and no 64-bit value is below -2^63: <= is == here",
    ("opc/lowering/nn_lowering.py", "*three(g.strides, 1), *three(g.dilations, 2), *three(g.pads[:g.spatial], 0)]"):
        "the leading unit dims of a 1-D or 2-D conv have a kernel of 1: their one tap is k = 0, and the "
        "runtime reads a dilation only as k * d or d * (k - 1), both 0 there",
    ("opc/lowering/c_expressions.py", 'sign = "-" if value < 1 else ""'):
        "the branch is for an infinite value: -inf < 1 and inf >= 1, as with < 0",
    ("opc/lowering/c_expressions.py", 'return n * {"double": 8, "float": 4, "uint16_t": 3, "int64_t": 8, "uint64_t": 8, '
                                  '"int32_t": 4,'):
        "an f16/bf16 buffer over-allocated by half in the arena (buffer_bytes' only use): each slot starts "
        "64-byte aligned, so only memory is wasted",
    ("opc/lowering/nn_lowering.py", "view = fl.e.value(memref.ReinterpretCastOp(buf, [], [], [], [ -1], list(shape), "
                                    "list(strides), t))"):
        "the view's static offset is never read: the C and CUDA emitters write a reinterpret_cast as the source "
        "pointer (emit_ReinterpretCastOp), and the view's type carries the strides",
}


def mutated_line(diff: str | None) -> str:
    """The line a mutant wrote, from cosmic-ray's unified diff."""
    for line in (diff or "").splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            return line[1:].strip()
    return ""


@dataclass(frozen=True)
class HandMutant:
    path: str
    old: str
    new: str
    tests: str
    what: str


HAND_MUTANTS = [
    # the cast runtime (runtime/opc_runtime.h)
    HandMutant("runtime/opc_runtime.h", "x += 0x7fffu + ((x >> 16) & 1u);", "x += 0x7fffu;",
               "tests/runtime/test_runtime_c.py tests/lowering/test_cpu_ops.py::test_cast", "f32->bf16 rounds ties up, not to even"),
    HandMutant("runtime/opc_runtime.h", "if ((x & 0x7fffffffu) > 0x7f800000u)", "if ((x & 0x7fffffffu) >= 0x7f800000u)",
               "tests/runtime/test_runtime_c.py tests/lowering/test_cpu_ops.py::test_cast", "f32->bf16 turns inf into NaN"),
    HandMutant("runtime/opc_runtime.h", "float v = (float)man * 5.9604644775390625e-08f;",
               "float v = (float)man * 1.1920928955078125e-07f;",
               "tests/runtime/test_runtime_c.py tests/lowering/test_cpu_ops.py::test_cast", "f16 subnormals read at twice their value"),
    HandMutant("runtime/opc_runtime.h", "    if (x >= 255.0) return UINT8_MAX;\n    return (uint8_t)x;",
               "    if (x >= 255.0) return UINT8_MAX;\n    return (uint8_t)(x + 0.5);",
               "tests/runtime/test_runtime_c.py tests/lowering/test_cpu_ops.py::test_cast", "float->ui8 rounds instead of truncating"),
    HandMutant("runtime/opc_runtime.h", "OPC_FN int32_t opc_sat_i32(double x) {\n    if (x != x) return 0;",
               "OPC_FN int32_t opc_sat_i32(double x) {", "tests/runtime/test_runtime_c.py tests/lowering/test_cpu_ops.py::test_cast",
               "float->i32: NaN not mapped to 0"),
    HandMutant("runtime/opc_runtime.h", "if (x >= 9223372036854775808.0) return INT64_MAX;",
               "if (x > 9223372036854775808.0) return INT64_MAX;",
               "tests/runtime/test_runtime_c.py tests/lowering/test_cpu_ops.py::test_cast", "float->i64: 2^63 converted (undefined)"),
    # the row reductions (runtime/opc_nn_rows.h)
    HandMutant("runtime/opc_nn_rows.h", "    for (; j < n; j++) {\n        const ACC v = LD(x, base + j, dt);",
               "    for (; j + 1 < n; j++) {\n        const ACC v = LD(x, base + j, dt);",
               "tests/lowering/test_edge_values.py -k softmax", "row max skips the last element (the audit's survivor)"),
    HandMutant("runtime/opc_nn_rows.h", "    for (; j < n; j++) {\n        const ACC e = OPC_NN_EXP(",
               "    for (; j + 1 < n; j++) {\n        const ACC e = OPC_NN_EXP(",
               "tests/lowering/test_edge_values.py tests/lowering/test_nn_ops.py -k softmax", "row exp-sum skips the last element"),
    HandMutant("runtime/opc_nn_rows.h", "    for (int w = OPC_NN_LANES / 2; w > 0; w /= 2)\n        for (int k = 0; k < w; k++) lane[k] += lane[k + w];",
               "    for (int w = OPC_NN_LANES / 2; w > 1; w /= 2)\n        for (int k = 0; k < w; k++) lane[k] += lane[k + w];",
               "tests/lowering/test_edge_values.py tests/lowering/test_nn_ops.py", "the lane fold drops the last partial sum"),
    HandMutant("runtime/opc_nn_rows.h", "for (int64_t k = 0; k < w; k++) { m[k] = (ACC)-INFINITY; s[k] = 0; }",
               "for (int64_t k = 0; k < w; k++) { m[k] = 0; s[k] = 0; }",
               "tests/lowering/test_edge_values.py -k softmax", "the tiled max starts at 0, not -inf"),
    # the C expression tables (strings: cosmic-ray does not mutate them)
    HandMutant("opc/lowering/c_expressions.py", '"slt": "<", "sle": "<="', '"slt": "<=", "sle": "<="',
               "tests/lowering/test_cpu_ops.py -k compare", "signed less-than rendered as <="),
    HandMutant("opc/lowering/c_expressions.py", 'arith.MaxUIOp: int_pick(">", True)', 'arith.MaxUIOp: int_pick(">")',
               "tests/lowering/test_edge_values.py -k ui8", "unsigned max as a signed compare (the audit's survivor)"),
    HandMutant("opc/lowering/c_expressions.py", 'return f"(({a} < {b}) || ({a} > {b}))"', 'return f"({a} != {b})"',
               "tests/lowering/test_compare_nan.py", "ordered not-equal true for NaN (the audit's find)"),
    HandMutant("opc/lowering/c_expressions.py", 'CMPF_UNORDERED = {"ult": ">=", "ule": ">", "ugt": "<=", "uge": "<"}',
               'CMPF_UNORDERED = {"ult": ">", "ule": ">", "ugt": "<=", "uge": "<"}',
               "tests/lowering/test_compare_nan.py", "unordered less-than negates the wrong complement"),
    # the GEMM (runtime/opc_gemm.h, opc_gemm_fewrows.h)
    HandMutant("runtime/opc_gemm.h",
               "        if (bias) { for (int j = 0; j < nr; j++) z[j] += bias[j]; }\n        double *o = out + i * ldo;\n"
               "        if (res) { double *r = res + i * ldo; for (int j = 0; j < nr; j++) r[j] = z[j]; }\n",
               "        double *o = out + i * ldo;\n"
               "        if (res) { double *r = res + i * ldo; for (int j = 0; j < nr; j++) r[j] = z[j]; }\n"
               "        if (bias) { for (int j = 0; j < nr; j++) z[j] += bias[j]; }\n",
               "tests/runtime/test_runtime_c.py -k gemm", "f64 GEMM: the reserve stored before the bias is added"),
    HandMutant("runtime/opc_gemm.h", "const int first = pc == 0, last = pc + kc >= K;\n                const float *bpc",
               "const int first = pc == 0, last = pc + kc > K;\n                const float *bpc", "tests/runtime/test_runtime_c.py -k gemm", "blocked GEMM: the last K block not seen as last"),
    HandMutant("runtime/opc_gemm.h", "if (i < mr) r[i] = opc__row_s(A, (i0 + ip + i) * K + p0, kc, dt, tmp[i]);",
               "if (i < mr) r[i] = opc__row_s(A, (i0 + i) * K + p0, kc, dt, tmp[i]);",
               "tests/runtime/test_runtime_c.py -k gemm", "A packed without its panel's row offset"),
    HandMutant("runtime/opc_gemm.h", "if (ep && last) ep(ep_ctx, b * M + ic, b * M + ic + mc, jc, jc + nc);",
               "if (ep && last) ep(ep_ctx, ic, ic + mc, jc, jc + nc);",
               "tests/lowering/test_gemm_epilogue.py", "blocked GEMM's block epilogue without the batch's row offset"),
    HandMutant("runtime/opc_gemm_fewrows.h", "    for (; k < K; k++) {\n        const float ak = a[k], *bk = B + k * N;",
               "    for (; k + 1 < K; k++) {\n        const float ak = a[k], *bk = B + k * N;",
               "tests/runtime/test_runtime_c.py -k gemm", "one-row GEMM drops the last k of a K not a multiple of 4"),
    HandMutant("runtime/opc_gemm_fewrows.h", "t1 += A[r * K + k] * b1[k]; }", "t1 += A[r * K + k] * b0[k]; }",
               "tests/runtime/test_runtime_c.py -k gemm", "few-row B^T GEMM: the second column's K tail read from the first column"),
    HandMutant("runtime/opc_gemm_fewrows.h", "if (ep) ep(ep_ctx, b * M, (b + 1) * M, j, j + nr);",
               "if (ep) ep(ep_ctx, b * M, (b + 1) * M, j, j + OPC_S_NR);",
               "tests/lowering/test_gemm_epilogue.py", "few-row GEMM's epilogue runs a full tile past the last column"),
    # the direct convolution loops (runtime/opc_nn_conv_body.h)
    HandMutant("runtime/opc_nn_conv_body.h", "const int64_t grp = oc / q->og, out2 = q->out[2];",
               "const int64_t grp = oc % q->og, out2 = q->out[2];", "tests/ops/test_conv.py", "direct conv: the output channel's group as oc % og"),
    HandMutant("runtime/opc_nn_conv_body.h", "if (n0 < 0 || n0 % q->s[0] || n0 / q->s[0] >= q->out[0]) continue;\n                for (int64_t k1",
               "if (n0 < 0 || n0 % q->s[0] || n0 / q->s[0] > q->out[0]) continue;\n                for (int64_t k1",
               "tests/ops/test_conv.py", "direct conv's input grad reads one output row past the end"),
    HandMutant("runtime/opc_nn_conv_body.h", "const int64_t i1 = o1 * q->s[1] + k1 * q->d[1] - q->p[1];\n                    if (i1 < 0 || i1 >= q->in[1]) continue;\n                    const int64_t xrow = xc",
               "const int64_t i1 = o1 * q->s[1] + k1 * q->d[1] - q->p[2];\n                    if (i1 < 0 || i1 >= q->in[1]) continue;\n                    const int64_t xrow = xc",
               "tests/ops/test_conv.py", "direct conv: the height's padding taken from the width's"),
    # the fast convolutions (runtime/opc_nn_conv_fast.h)
    HandMutant("runtime/opc_nn_conv_fast.h", "if (pre) *(opc_cf_uvec *)pre = v;", "if (pre) *(opc_cf_uvec *)pre = a;",
               "tests/ops/test_conv_fast.py tests/lowering/test_conv_epilogue.py", "conv epilogue's reserve space without the bias"),
    HandMutant("runtime/opc_nn_conv_fast.h", "    *(opc_cf_uvec *)y = opc_cf_act_vec(v, act);",
               "    *(opc_cf_uvec *)y = opc_cf_act_vec(a, act);",
               "tests/ops/test_conv_fast.py tests/lowering/test_conv_epilogue.py", "conv epilogue's act applied to the sum before the bias"),
    HandMutant("runtime/opc_gemm.h", "if (rbias) { for (int j = 0; j < nr; j++) z[j] += rbias[i]; }",
               "if (rbias) { for (int j = 0; j < nr; j++) z[j] += rbias[0]; }",
               "tests/ops/test_conv_fast.py", "a pointwise conv's edge tile adds its first row's bias to every row"),
    HandMutant("runtime/opc_nn_conv_fast.h", "const __mmask16 lanes = opc_cf_lanes(n - j);",
               "const __mmask16 lanes = opc_cf_lanes(n - j - 1);", "tests/ops/test_conv_fast.py",
               "the stride-1 conv's store leaves a run's last output out where the run is not whole vectors"),
    HandMutant("runtime/opc_nn_conv_fast.h", "            if (++o1 == P1) {", "            if (++o1 == P1 + 1) {",
               "tests/ops/test_conv_fast.py", "the stride-1 conv's store steps past a 3-D conv's plane without wrapping the row"),
    HandMutant("runtime/opc_nn_conv_fast.h", "const float *row = xp + (o0 * q->s[0] * p->P[1] + o1 * q->s[1]) * p->P[2];",
               "const float *row = xp + (o0 * q->s[0] * p->P[1] + o1 * s2) * p->P[2];",
               "tests/ops/test_conv_fast.py tests/ops/test_conv.py", "strided depthwise conv: the row stride taken from the width's"),
    HandMutant("runtime/opc_nn_conv_fast.h", "if (t1 >= 0 && t1 < K1) a[r] += wt[t1 * K2 + t2] * v;",
               "if (t1 >= 0 && t1 < K1) a[r] += wt[t2 * K2 + t1] * v;",
               "tests/ops/test_conv_fast.py tests/lowering/test_conv_epilogue.py", "depthwise row kernel: the taps transposed"),
    HandMutant("runtime/opc_nn_conv_fast.h", "if (kvol == 9) opc_cf_dwc_taps(xt, wb, yt, base, off, ovol, 9);",
               "if (kvol == 9) opc_cf_dwc_taps(xt, wb, yt, base, off, ovol, 8);",
               "tests/ops/test_conv_fast.py tests/lowering/test_conv_epilogue.py", "channels-last depthwise: the last tap left out"),
    HandMutant("runtime/opc_nn_conv_fast.h", "const int take = acc == acc && (t[k] > acc || t[k] != t[k]);",
               "const int take = acc == acc && (t[k] >= acc || t[k] != t[k]);",
               "tests/ops/test_pool.py", "2x2 max pool planes: of equal values the last kept"),
    HandMutant("runtime/opc_nn_conv_fast.h", "const opc_cf_ivec first_nan = (v != v) & ~seen[r];",
               "const opc_cf_ivec first_nan = (v != v) & seen[r];",
               "tests/ops/test_pool.py", "max pool values: a NaN never kept"),
    HandMutant("runtime/opc_nn_conv_fast.h", "if (ep) ep(ep_ctx, n * C + c0, n * C + c1, 0, q->ovol);",
               "if (ep) ep(ep_ctx, n * C + c0, n * C + c1 - 1, 0, q->ovol);", "tests/lowering/test_conv_epilogue.py",
               "one-vector depthwise planes: the epilogue leaves each chunk's last channel out"),
    HandMutant("runtime/opc_nn_conv_fast.h", "        if (i < 0 || i >= q->in[d]) return -1;\n        at = at * q->in[d] + i;",
               "        if (i < 0 || i > q->in[d]) return -1;\n        at = at * q->in[d] + i;",
               "tests/ops/test_conv_fast.py", "one-vector depthwise planes: a tap past a row's end reads the next row"),
    HandMutant("runtime/opc_nn_conv_fast.h", "for (int64_t i1 = lo1; i1 < hi1; i1++)",
               "for (int64_t i1 = lo1; i1 < hi1 - 1; i1++)", "tests/ops/test_conv_fast.py",
               "depthwise planes after a thread's first: the last input row not copied (the previous plane's stays)"),
    HandMutant("runtime/opc_nn_conv_fast.h", "t->idx[v][k][l] = (int32_t)(i % OPC_CF_V + (iv == s1 ? OPC_CF_V : 0));",
               "t->idx[v][k][l] = (int32_t)(i % OPC_CF_V);", "tests/ops/test_conv_fast.py",
               "small depthwise planes: a tap's lanes from its second input vector read from the first"),
    HandMutant("runtime/opc_nn_conv_fast.h", "const int64_t a = t->src[v][k][0], b = t->src[v][k][1];",
               "const int64_t a = t->src[v][k][1], b = t->src[v][k][1];", "tests/ops/test_conv_fast.py",
               "small depthwise planes: both of a permute's sources the second input vector"),
    # the channel-vector conv's store (runtime/opc_nn_conv_cw.h)
    HandMutant("runtime/opc_nn_conv_cw.h", "for (int64_t rb = 0; rb < mv[t]; rb += 8)",
               "for (int64_t rb = 0; rb + 8 <= mv[t]; rb += 8)", "tests/ops/test_conv_fast.py",
               "the run store skips a tile's last partial block of 8 outputs (tiles of 14 and 7)"),
    HandMutant("runtime/opc_nn_conv_cw.h", "const int64_t i = i0 + 8 <= n ? i0 : n - 8;",
               "const int64_t i = i0 + 8 <= n ? i0 : n - 7;", "tests/ops/test_conv_fast.py",
               "the run store's last 8 outputs shifted back one short"),
    # channels-last operands (runtime/opc_nn_conv_layout.h, opc_nn_conv_body.h)
    HandMutant("runtime/opc_nn_conv_layout.h", "        y[c] = opc_cf_act(acc + bias[c], act);",
               "        y[c] = opc_cf_act(acc, act);", "tests/ops/test_conv_layout.py",
               "channels-last depthwise: the channels past the last whole vector lose their bias"),
    HandMutant("runtime/opc_nn_conv.h", "if (opc_i2 < 0 || opc_i2 >= (q)->in[2]) continue;",
               "if (opc_i2 < 0 || opc_i2 > (q)->in[2]) continue;", "tests/ops/test_conv_layout.py",
               "channels-last convs: a tap one past a row's end reads the next row"),
    HandMutant("runtime/opc_nn_conv_layout.h", "yn[o * P + p] = opc_cf_act(yt[p * O + o], act);",
               "yn[o * P + p] = opc_cf_act(yt[p * O + (o + 1) % O], act);", "tests/ops/test_conv_layout.py",
               "a few positions' transposed GEMM copied back from the next channel"),
    HandMutant("runtime/opc_nn_conv_body.h", "const int64_t ycs = layout & 2 ? 1 : q->ovol, yps = layout & 2 ? q->o : 1;",
               "const int64_t ycs = layout & 2 ? 1 : q->ovol, yps = layout & 2 ? q->c : 1;",
               "tests/ops/test_conv_layout.py", "the layout loops' channels-last output strided by x's channels"),
    # pooling (runtime/opc_nn_pool_body.h)
    HandMutant("runtime/opc_nn_pool_body.h", "            const int64_t i1 = o[1] * q->s[1] - q->pb[1] + t1 * q->d[1];\n            if (i1 < 0 || i1 >= q->in[1]) continue;",
               "            const int64_t i1 = o[1] * q->s[1] - q->pb[1] + t1 * q->d[1];\n            if (i1 < 0 || i1 > q->in[1]) continue;",
               "tests/ops/test_pool.py", "avg_pool's window reads one row past the input"),
    HandMutant("runtime/opc_nn_pool_body.h", "int64_t lo2 = start2 >= 0 ? 0 : (-start2 + d2 - 1) / d2,",
               "int64_t lo2 = start2 >= 0 ? 0 : -start2 / d2,", "tests/ops/test_pool.py", "max_pool's first tap rounded down (dilated, padded)"),
    HandMutant("runtime/opc_nn_pool_body.h", "if (n2 < 0 || n2 % q->s[2] || n2 / q->s[2] >= q->out[2]) continue;",
               "if (n2 < 0 || n2 % q->s[2] || n2 / q->s[2] > q->out[2]) continue;", "tests/ops/test_pool.py",
               "avg_pool's grad gathers one output past the row's end"),
    HandMutant("opc/lowering/c_call_emission.py", 'end = f"opc_c0 + {SHORT_ROW}" if short else "opc_c1"',
               'end = f"opc_c0 + {SHORT_ROW - 1}" if short else "opc_c1"', "tests/lowering/test_gemm_epilogue.py",
               "the epilogue's loop for rows of 4 columns stops one short"),
    HandMutant("runtime/opc_nn_conv_fast.h", "    if (nan) return opc_cf_max_first(opc_cf_max_first(a, b), c);",
               "    if (0 && nan) return opc_cf_max_first(opc_cf_max_first(a, b), c);", "tests/ops/test_pool.py",
               "the separable 3x3 max pool's vmaxps keeps a NaN only where it came first"),
    HandMutant("runtime/opc_nn_conv_fast.h", "m[t][1] = opc_cf_row_lanes(first + t + OPC_CF_V - 1, W);",
               "m[t][1] = opc_cf_row_lanes(first + t + OPC_CF_V, W);", "tests/ops/test_pool.py",
               "the separable max pool's edge loads mask the second half one lane off"),
    HandMutant("opc/lowering/c_loop_emission.py",
               'self.line(f"for (int64_t {k} = 0; {k} < {n}; {k}++) {t} = {t} + {part}[{k}];")',
               'self.line(f"for (int64_t {k} = 1; {k} < {n}; {k}++) {t} = {t} + {part}[{k}];")',
               "tests/ops/test_norm.py tests/lowering/test_cpu_ops.py",
               "a sum over short rows leaves its first column's partial out"),
    HandMutant("runtime/opc_nn_conv_cw.h", "const float *sm = m / W ? s + (m / W) * rstep : s;",
               "const float *sm = s;", "tests/ops/test_conv_fast.py",
               "the channel-vector kernel's two-row tiles read the second row from the first"),
    HandMutant("runtime/opc_nn_conv_cw.h", "(t0 + t) / c.nt2 * c.tr, o2 = (t0 + t) % c.nt2 * c.mr;\n                                const int64_t o1",
               "(t0 + t) / c.nt2, o2 = (t0 + t) % c.nt2 * c.mr;\n                                const int64_t o1",
               "tests/ops/test_conv_fast.py", "a two-row tile starts at its tile index as a row"),
    HandMutant("runtime/opc_nn_conv_fast.h", "int64_t a = (pb2 + s2 - 1) / s2, b = last < 0 ? 0 : last / s2 + 1;",
               "int64_t a = pb2 / s2, b = last < 0 ? 0 : last / s2 + 1;", "tests/ops/test_pool.py",
               "max_pool's vector span starts at a window that crosses the left padding"),
    # the row kernels (runtime/opc_nn_rows.h)
    HandMutant("runtime/opc_nn_rows.h", "const ACC rs = (ACC)1 / OPC_NN_SQRT(var * inv + (ACC)eps);",
               "const ACC rs = (ACC)1 / (OPC_NN_SQRT(var * inv) + (ACC)eps);", "tests/ops/test_norm.py tests/lowering/test_nn_ops.py",
               "layer_norm's eps added outside the square root"),
    HandMutant("runtime/opc_nn_rows.h", "ST(dx, base + c, dt, rs * ((g - a) - xhat * b));", "ST(dx, base + c, dt, rs * (g - xhat * b));",
               "tests/ops/test_norm.py tests/lowering/test_nn_ops.py", "layer_norm's input grad drops the mean(g) term"),
    HandMutant("runtime/opc_nn_rows.h", "const int64_t base = r * cols + c0;", "const int64_t base = r * cols;",
               "tests/ops/test_norm.py tests/lowering/test_nn_ops.py", "layer_norm's dscale/dbias tiles all read the first tile's columns"),
    HandMutant("runtime/opc_nn_rows.h", "const int64_t base = (u / opc_tiles_) * n * inner + opc_i0_",
               "const int64_t base = (u / opc_tiles_) * n + opc_i0_", "tests/lowering/test_nn_ops.py tests/lowering/test_edge_values.py",
               "softmax over an inner axis: the outer stride without the inner extent"),
    HandMutant("runtime/opc_nn_rows.h", "ST(dx, base + j, dt, LD(dout, base + j, dt) - OPC_NN_EXP(LD(out, base + j, dt)) * c);",
               "ST(dx, base + j, dt, LD(dout, base + j, dt) - LD(out, base + j, dt) * c);",
               "tests/lowering/test_nn_ops.py tests/lowering/test_edge_values.py", "log_softmax's grad uses log p for p"),
    HandMutant("runtime/opc_nn_rows.h", "        const int64_t l = opc_nn_label(label, u, label64);\n        if (l < 0 || l >= n) {",
               "        const int64_t l = opc_nn_label(label, u, label64);\n        if (l < 0 || l > n) {",
               "tests/lowering/test_nn_ops.py", "cross-entropy lets a label equal to the class count through"),
    HandMutant("runtime/opc_nn_rows.h", "ST(dx, base + i, dt, (LD(sm, base + i, dt) - hit) * LD(dloss, o * inner + i, dt));",
               "ST(dx, base + i, dt, (LD(sm, base + i, dt) - hit) * LD(dloss, o, dt));",
               "tests/lowering/test_nn_ops.py tests/autodiff/test_nn_grad.py", "cross-entropy grad over an inner axis reads one dloss per outer row"),
    # attention (runtime/opc_nn_attention.h)
    HandMutant("runtime/opc_nn_attention.h", "int64_t visible = g->causal ? (i - j0 + 1 < cols ? i - j0 + 1 : cols) : cols;",
               "int64_t visible = g->causal ? (i - j0 < cols ? i - j0 : cols) : cols;", "tests/ops/test_attention.py",
               "causal attention hides the diagonal"),
    HandMutant("runtime/opc_nn_attention.h", "if (g->has_mask && g->mcol) {", "if (g->has_mask) {", "tests/ops/test_attention.py",
               "a mask broadcast along the keys read as a full row"),
    HandMutant("runtime/opc_nn_attention.h", "return g->causal && last_row + 1 < g->lk ? last_row + 1 : g->lk;",
               "return g->causal && last_row < g->lk ? last_row : g->lk;", "tests/ops/test_attention.py",
               "causal attention: a query block skips the key of its last row"),
    HandMutant("runtime/opc_nn_attention.h", "        t[x] += dr[c + x] * LD(out, o0 + c + x, dt);\n", "",
               "tests/ops/test_attention.py", "attention grad's delta drops the value features past the last whole vector"),
    HandMutant("runtime/opc_nn_attention.h", "        at += (b % g->dims[t]) * g->mstr[t];", "        at += b * g->mstr[t];",
               "tests/ops/test_attention.py", "the mask's batch offset without the modulo of its dim"),
    # the scalar runtime (runtime/opc_runtime.h)
    HandMutant("runtime/opc_runtime.h", "a == -1 ? ((b & 1) ? -1 : 1) : 0;", "a == -1 ? ((b & 1) ? 1 : -1) : 0;",
               "tests/ops/test_integer_ops.py", "integer pow: (-1)^b for b < 0 with the parity swapped"),
    HandMutant("runtime/opc_runtime.h", "float du = (float)OPC_SQRT_2_OVER_PI * (1.0f + 3.0f * (float)OPC_GELU_A * x2);",
               "float du = (float)OPC_SQRT_2_OVER_PI * (1.0f + (float)OPC_GELU_A * x2);",
               "tests/runtime/test_runtime_c.py -k activations", "gelu (tanh form) grad: the cubic's derivative without its 3"),
    HandMutant("runtime/opc_runtime.h", "        if (rem > half || (rem == half && (q & 1u))) q++;\n        return (uint16_t)(sign | q);\n    }\n}\n\nOPC_FN uint16_t opc_f64_to_f16",
               "        if (rem >= half) q++;\n        return (uint16_t)(sign | q);\n    }\n}\n\nOPC_FN uint16_t opc_f64_to_f16",
               "tests/runtime/test_runtime_c.py -k from_f32", "f32->f16 subnormals round ties away from zero"),
]


def env_for(cache: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OPC_CACHE_DIR": cache, "OMP_NUM_THREADS": "1"}


def cosmic_ray(*args: str, env: dict[str, str]) -> None:
    exe = shutil.which("cosmic-ray") or sys.exit("error: cosmic-ray is not installed (pip install '.[mutation]')")
    subprocess.run([exe, *args], cwd=ROOT, env=env, check=True)


def sample_session(db_path: Path, module: Module, k: int, seed: int) -> None:
    """Leave k of the session's mutants pending (the seeded sample); the others, and those on
    excluded operators or outside the module's lines, are marked skipped, as cosmic-ray's filters do."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(db_path), WorkDB.Mode.open) as db:
        keep = []
        for item in db.work_items:
            (m,) = item.mutations
            line = m.start_pos[0]
            if any(x in m.operator_name for x in EXCLUDED_OPERATORS):
                continue
            if module.lines is not None and not module.lines[0] <= line <= module.lines[1]:
                continue
            keep.append(item.job_id)
        chosen = set(random.Random(seed).sample(keep, k)) if 0 < k < len(keep) else set(keep)
        skipped = [item.job_id for item in db.work_items if item.job_id not in chosen]
        db.set_multiple_results(skipped, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))


def score_session(db_path: Path, module: Module) -> dict[str, object]:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    source = (ROOT / module.path).read_text().splitlines()
    counts = {"killed": 0, "survived": 0, "incompetent": 0, "equivalent": 0}
    survivors = []
    with use_db(str(db_path), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            (m,) = item.mutations
            text = source[m.start_pos[0] - 1].strip()
            if (module.path, mutated_line(result.diff)) in EQUIVALENT:
                counts["equivalent"] += 1
            elif result.test_outcome == TestOutcome.INCOMPETENT or result.worker_outcome != WorkerOutcome.NORMAL:
                counts["incompetent"] += 1
            elif result.test_outcome == TestOutcome.SURVIVED:
                counts["survived"] += 1
                survivors.append(f"{module.path}:{m.start_pos[0]}: {m.operator_name}: {text}")
            else:
                counts["killed"] += 1
    return {**counts, "survivors": survivors}


def run_module(name: str, module: Module, k: int, seed: int, out: Path, timeout: float) -> dict[str, object]:
    out.mkdir(parents=True, exist_ok=True)
    config, db = out / f"{name}.toml", out / f"{name}.sqlite"
    config.write_text(
        "[cosmic-ray]\n"
        f'module-path = "{module.path}"\n'
        f"timeout = {timeout}\n"
        "excluded-modules = []\n"
        f'test-command = "{PYTEST} {module.tests}"\n\n'
        '[cosmic-ray.distributor]\nname = "local"\n')
    if db.exists():
        db.unlink()
    env = env_for(tempfile.mkdtemp(prefix=f"opc-mutation-{name}-"))  # one compile cache for the module's run
    cosmic_ray("init", str(config), str(db), env=env)
    sample_session(db, module, k, seed)
    cosmic_ray("exec", str(config), str(db), env=env)
    return score_session(db, module)


def run_hand_mutant(m: HandMutant, timeout: float) -> bool:
    """True when the tests kill the mutant. The file is restored whatever happens."""
    path = ROOT / m.path
    original = path.read_text()
    if original.count(m.old) != 1:
        raise SystemExit(f"error: {m.path}: the text of mutant '{m.what}' is not found once (update HAND_MUTANTS)")
    try:
        path.write_text(original.replace(m.old, m.new))
        cache = tempfile.mkdtemp(prefix="opc-mutation-c-")  # runtime headers are not in the cache key's source
        try:
            done = subprocess.run(f"{PYTEST} {m.tests}".split(), cwd=ROOT, env=env_for(cache), timeout=timeout,
                                  capture_output=True, text=True, check=False)
            killed = done.returncode != 0
        except subprocess.TimeoutExpired:
            killed = True
        shutil.rmtree(cache, ignore_errors=True)
    finally:
        path.write_text(original)
    return killed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--module", action="append", choices=[*MODULES, "c-runtime"],
                        help="a module to mutate (repeatable; default: all, and the hand-written mutants)")
    parser.add_argument("--sample", type=int, default=30, help="mutants per module, drawn with --seed (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant's tests (then: killed)")
    parser.add_argument("--out", type=Path, default=ROOT / "mutation-out")
    args = parser.parse_args(argv)
    names = args.module or [*MODULES, "c-runtime"]
    rows = []
    for name in names:
        if name == "c-runtime":
            survived = [m for m in HAND_MUTANTS if not run_hand_mutant(m, args.timeout)]
            killed = len(HAND_MUTANTS) - len(survived)
            rows.append(("hand-written (C runtime, C tables)", killed, len(survived), 0, 0,
                         [f"{m.path}: {m.what}" for m in survived]))
            continue
        r = run_module(name, MODULES[name], args.sample, args.seed, args.out, args.timeout)
        rows.append((MODULES[name].path, r["killed"], r["survived"], r["incompetent"], r["equivalent"],
                     r["survivors"]))
    print("\n| module | killed | survived | incompetent | equivalent | score |\n|---|---|---|---|---|---|")
    for path, killed, survived, incompetent, equivalent, _ in rows:
        total = killed + survived
        score = f"{100 * killed / total:.0f}%" if total else "-"
        print(f"| {path} | {killed} | {survived} | {incompetent} | {equivalent} | {score} |")
    for *_, survivors in rows:
        for s in survivors:
            print(f"survived: {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
