"""Round-trip and verifier tests for every op of the opc dialect."""

from __future__ import annotations

import io

import pytest
from xdsl.printer import Printer

from opc.errors import OpcError
from opc.ir import parse_text

T43 = "tensor<4x3xf32>"

# (op line, argument types) — each line is wrapped in a function below.
GOOD_OPS = [
    *[f"%r = opc.{n} %a, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>"
      for n in ("add", "sub", "mul", "div", "maximum", "minimum", "pow")],
    *[f"%r = opc.{n} %a, %a : ({T43}, {T43}) -> tensor<4x3xi1>" for n in ("greater_than", "less_than", "equal")],
    "%r = opc.add %i, %i : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>",
    "%r = opc.maximum %u, %u : (tensor<5xui8>, tensor<5xui8>) -> tensor<5xui8>",
    "%c = opc.greater_than %a, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xi1>\n"
    "  %r = opc.select %c, %a, %b : (tensor<4x3xi1>, tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>",
    *[f"%r = opc.{n} %a : ({T43}) -> {T43}" for n in ("neg", "exp", "log", "tanh", "erf", "sqrt", "rsqrt", "abs", "relu")],
    "%r = opc.neg %i : (tensor<2xi32>) -> tensor<2xi32>",
    *[f"%r = opc.{n} %i, %i : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>"
      for n in ("div", "pow", "bitwise_and", "bitwise_or", "bitwise_xor", "shift_left", "shift_right")],
    "%r = opc.bitwise_not %u : (tensor<5xui8>) -> tensor<5xui8>",
    f"%r = opc.gelu %a {{approximate = false}} : ({T43}) -> {T43}",
    f"%r = opc.gelu %a : ({T43}) -> {T43}",
    "%r = opc.cast %d {dtype = ui8} : (tensor<2x3x4xf64>) -> tensor<2x3x4xui8>",
    "%r = opc.cast %a {dtype = bf16} : (tensor<4x3xf32>) -> tensor<4x3xbf16>",
    "%r = opc.cast %a {dtype = i1} : (tensor<4x3xf32>) -> tensor<4x3xi1>",
    "%r = opc.bitcast %a {dtype = i32} : (tensor<4x3xf32>) -> tensor<4x3xi32>",
    "%r = opc.bitcast %u {dtype = i8} : (tensor<5xui8>) -> tensor<5xi8>",
    "%r = opc.full {value = 2.500000e+00 : f64} : () -> tensor<2x3xi16>",
    "%r = opc.broadcast_to %b : (tensor<3xf32>) -> tensor<2x4x3xf32>",
    "%r = opc.reshape %a : (tensor<4x3xf32>) -> tensor<2x6xf32>",
    "%r = opc.reshape %a : (tensor<4x3xf32>) -> tensor<12xf32>",
    "%r = opc.transpose %a {perm = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>",
    "%r = opc.reduce_sum %a {axes = array<i64: 0>} : (tensor<4x3xf32>) -> tensor<3xf32>",
    "%r = opc.reduce_sum %a {axes = array<i64: 0, 1>, keepdim = true} : (tensor<4x3xf32>) -> tensor<1x1xf32>",
    "%r = opc.reduce_max %a {axes = array<i64: -1>} : (tensor<4x3xf32>) -> tensor<4xf32>",
    "%r = opc.matmul %a, %a {trans_y = true} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x4xf32>",
    "%r = opc.matmul %a, %a {trans_x = true} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<3x3xf32>",
    "%r = opc.matmul %m, %n : (tensor<2x4x3xf32>, tensor<2x3x5xf32>) -> tensor<2x4x5xf32>",
    "%r = opc.fused_gemm_epilogue %a, %w, %bias : (tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>) -> tensor<4x5xf32>",
    *[f'%r, %z = opc.fused_gemm_epilogue %a, %w, %bias {{activation = "{act}"}} : '
      "(tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>)" for act in ("relu", "gelu")],
    '%r, %z = opc.fused_gemm_epilogue %at, %wt, %bias {activation = "relu", trans_x = true, trans_y = true} : '
    "(tensor<3x4xf32>, tensor<5x3xf32>, tensor<5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>)",
    "%r = opc.cast_grad %d, %a2 : (tensor<2x3x4xf64>, tensor<2x3x4xf32>) -> tensor<2x3x4xf64>",
    "%dx, %dy, %db = opc.fused_gemm_epilogue_grad %a, %w, %g : (tensor<4x3xf32>, tensor<3x5xf32>, tensor<4x5xf32>)"
    " -> (tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>)",
    *[f'%dx, %dy, %db = opc.fused_gemm_epilogue_grad %a, %w, %g, %g {{activation_grad = "{act}"}} : '
      "(tensor<4x3xf32>, tensor<3x5xf32>, tensor<4x5xf32>, tensor<4x5xf32>) -> (tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>)"
      for act in ("relu_grad", "gelu_grad")],
    f"%r = opc.relu_grad %a, %a : ({T43}, {T43}) -> {T43}",
    f"%r = opc.gelu_grad %a, %a {{approximate = false}} : ({T43}, {T43}) -> {T43}",
]

ARGS = ("%a: tensor<4x3xf32>, %b: tensor<3xf32>, %i: tensor<2xi32>, %u: tensor<5xui8>, %d: tensor<2x3x4xf64>, "
        "%a2: tensor<2x3x4xf32>, %m: tensor<2x4x3xf32>, %n: tensor<2x3x5xf32>, %w: tensor<3x5xf32>, "
        "%wt: tensor<5x3xf32>, %at: tensor<3x4xf32>, %bias: tensor<5xf32>, %g: tensor<4x5xf32>")


def wrap(body: str) -> str:
    return f"func.func @f({ARGS}) {{\n  {body}\n  func.return\n}}\n"


def generic(text: str) -> str:
    buf = io.StringIO()
    Printer(stream=buf, print_generic_format=True).print_op(parse_text(text).module)
    return buf.getvalue()


@pytest.mark.parametrize("body", GOOD_OPS)
def test_round_trip(body: str) -> None:
    first = str(parse_text(wrap(body)).module)
    assert str(parse_text(first).module) == first  # custom form is a fixed point
    op_name = body.split("= ")[-1].split()[0]
    assert op_name in first
    assert str(parse_text(generic(wrap(body))).module) == first  # generic form parses to the same IR


BAD_OPS = [
    ("%r = opc.add %a, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x4xf32>", "result must have shape [4, 3]"),
    ("%r = opc.add %a, %g : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<4x3xf32>", "do not broadcast"),
    ("%r = opc.add %a, %i : (tensor<4x3xf32>, tensor<2xi32>) -> tensor<4x3xf32>", "element types differ"),
    ("%r = opc.add %b, %bias : (tensor<3xf32>, tensor<5xf32>) -> tensor<3xf32>", "do not broadcast"),
    ("%r = opc.pow %u, %u : (tensor<5xui8>, tensor<5xui8>) -> tensor<5xui8>", "floats or signed integers"),
    ("%r = opc.bitwise_and %a, %a : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>", "integer element type"),
    ("%r = opc.shift_left %i, %u : (tensor<2xi32>, tensor<5xui8>) -> tensor<2xi32>", "element types differ"),
    ("%r = opc.bitwise_not %a : (tensor<4x3xf32>) -> tensor<4x3xf32>", "integer element type"),
    ("%r = opc.equal %a, %a : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>", "result element type must be i1"),
    ("%r = opc.select %a, %a, %a : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>", "cond must be i1"),
    ("%r = opc.exp %i : (tensor<2xi32>) -> tensor<2xi32>", "float element type"),
    ("%r = opc.exp %a : (tensor<4x3xf32>) -> tensor<4x3xf64>",
     "'opc.exp' op has tensor<4x3xf64> where tensor<4x3xf32> is expected: these operand and result types must be"),
    ("%r = opc.cast %d {dtype = ui8} : (tensor<2x3x4xf64>) -> tensor<2x3x4xi8>", "must equal dtype"),
    ("%r = opc.cast %d {dtype = i4} : (tensor<2x3x4xf64>) -> tensor<2x3x4xi4>", "unsupported element type i4"),
    ("%r = opc.bitcast %d {dtype = i32} : (tensor<2x3x4xf64>) -> tensor<2x3x4xi32>", "f64 has 64 bits, i32 has 32"),
    ("%r = opc.bitcast %u {dtype = i1} : (tensor<5xui8>) -> tensor<5xi1>", "to i1 only from i1"),
    ("%r = opc.bitcast %a {dtype = ui32} : (tensor<4x3xf32>) -> tensor<4x3xi32>", "must equal dtype"),
    ("%r = opc.broadcast_to %a : (tensor<4x3xf32>) -> tensor<4x5xf32>", "cannot broadcast"),
    ("%r = opc.reshape %a : (tensor<4x3xf32>) -> tensor<5xf32>", "element count"),
    ("%r = opc.transpose %a {perm = array<i64: 0, 0>} : (tensor<4x3xf32>) -> tensor<4x4xf32>", "not a permutation"),
    ("%r = opc.transpose %a {perm = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<4x3xf32>", "shape [3, 4]"),
    ("%r = opc.reduce_sum %a {axes = array<i64: 2>} : (tensor<4x3xf32>) -> tensor<4xf32>", "out of range"),
    ("%r = opc.reduce_sum %a {axes = array<i64: 0, 0>} : (tensor<4x3xf32>) -> tensor<3xf32>", "repeat"),
    ("%r = opc.reduce_max %a {axes = array<i64: 0>, keepdim = true} : (tensor<4x3xf32>) -> tensor<3xf32>", "shape [1, 3]"),
    ("%r = opc.matmul %a, %a : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>", "inner dims differ"),
    ("%r = opc.matmul %b, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<f32>", "must have rank 2 to 8"),
    ("%r = opc.matmul %i, %i : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>", "float element type"),
    ('%r, %z = opc.fused_gemm_epilogue %a, %w, %bias {activation = "none"} : '
     "(tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>)", "exactly one result"),
    ('%r = opc.fused_gemm_epilogue %a, %w, %bias {activation = "gelu"} : '
     "(tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>) -> tensor<4x5xf32>", "reserve_space"),
    ('%r = opc.fused_gemm_epilogue %a, %w, %bias {activation = "tanh"} : '
     "(tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>) -> tensor<4x5xf32>", "activation must be one of"),
    ("%r = opc.fused_gemm_epilogue %a, %w, %b : (tensor<4x3xf32>, tensor<3x5xf32>, tensor<3xf32>) -> tensor<4x5xf32>",
     "bias must have shape [5]"),
    ("%r = opc.fused_gemm_epilogue %a, %a, %bias : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<5xf32>) -> tensor<4x5xf32>",
     "inner dims differ"),
    ('%dx, %dy, %db = opc.fused_gemm_epilogue_grad %a, %w, %g {activation_grad = "relu_grad"} : '
     "(tensor<4x3xf32>, tensor<3x5xf32>, tensor<4x5xf32>) -> (tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>)",
     "activation_grad 'relu_grad' needs the reserve_space operand"),
    ('%dx, %dy, %db = opc.fused_gemm_epilogue_grad %a, %w, %g, %g : '
     "(tensor<4x3xf32>, tensor<3x5xf32>, tensor<4x5xf32>, tensor<4x5xf32>) -> (tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>)",
     "takes no reserve_space"),
    ('%dx, %dy, %db = opc.fused_gemm_epilogue_grad %a, %w, %g, %g {activation_grad = "gelu"} : '
     "(tensor<4x3xf32>, tensor<3x5xf32>, tensor<4x5xf32>, tensor<4x5xf32>) -> (tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>)",
     "activation_grad must be one of"),
    ("%dx, %dy, %db = opc.fused_gemm_epilogue_grad %a, %w, %a : "
     "(tensor<4x3xf32>, tensor<3x5xf32>, tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>)",
     "dout must have shape [4, 5]"),
    ("%r = opc.cast_grad %d, %a : (tensor<2x3x4xf64>, tensor<4x3xf32>) -> tensor<2x3x4xf64>", "dout must have shape"),
    ("%r = opc.cast_grad %d, %a2 : (tensor<2x3x4xf64>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>", "type of x"),
    ("%r = opc.relu_grad %i, %i : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>", "float element type"),
    ("%r = opc.add %a, %a : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<?x4xf32>", "result must have shape [4, 3]"),
    ("%r = opc.add %x9, %x9 : (tensor<1x1x1x1x1x1x1x1x1xf32>, tensor<1x1x1x1x1x1x1x1x1xf32>) -> "
     "tensor<1x1x1x1x1x1x1x1x1xf32>", "rank 9"),
]


@pytest.mark.parametrize("body,message", BAD_OPS)
def test_verifier_rejects(body: str, message: str) -> None:
    text = wrap(body).replace("%g: tensor<4x5xf32>)", "%g: tensor<4x5xf32>, %x9: tensor<1x1x1x1x1x1x1x1x1xf32>)")
    with pytest.raises(OpcError) as err:
        parse_text(text, "bad.mlir")
    msg = str(err.value)
    assert msg.startswith("bad.mlir:2:3: error: "), msg  # located at the offending op
    assert message in msg


def test_syntax_error_is_located() -> None:
    with pytest.raises(OpcError, match=r"^in\.mlir:2:19: error: "):
        parse_text(wrap("%r = opc.add %a %a : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>"), "in.mlir")


def test_unknown_op_is_located() -> None:
    with pytest.raises(OpcError, match=r"^in\.mlir:2:17: error: .*opc\.frob"):
        parse_text(wrap("%r = opc.frob %a : (tensor<4x3xf32>) -> tensor<4x3xf32>"), "in.mlir")
