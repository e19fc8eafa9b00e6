"""Round trip and verifier messages of the ops added for real networks (issue 11)."""

from __future__ import annotations

import io

import pytest
from xdsl.dialects.builtin import BoolAttr
from xdsl.printer import Printer

from opc.errors import OpcError
from opc.ir import parse_text

ARGS = ("%x: tensor<4x8xf32>, %h: tensor<4x8xf16>, %d: tensor<4x8xf64>, %s: tensor<8xf32>, %b: tensor<8xf32>, "
        "%m: tensor<4xf32>, %l: tensor<4x1xi64>, %l32: tensor<4x1xi32>, %i: tensor<2x3xi32>, %u: tensor<3xui8>, "
        "%q: tensor<2x3x4x5xf32>, %k: tensor<2x1x5x6xf32>, %w: tensor<5x6xf32>, %y: tensor<4x2xf32>, "
        "%n: tensor<4x8xi32>, %f: tensor<2x3xf32>, %i6: tensor<1x1x1x1x2x3xi32>")

GOOD = [
    "%r = opc.reduce_min %n {axes = array<i64: 1>} : (tensor<4x8xi32>) -> tensor<4xi32>",
    "%r = opc.reduce_min %x {axes = array<i64>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x8xf32>",
    "%r = opc.reduce_mean %h {axes = array<i64: 0, 1>} : (tensor<4x8xf16>) -> tensor<f16>",
    "%r = opc.sigmoid %d : (tensor<4x8xf64>) -> tensor<4x8xf64>",
    "%r = opc.matmul %q, %k : (tensor<2x3x4x5xf32>, tensor<2x1x5x6xf32>) -> tensor<2x3x4x6xf32>",
    "%r = opc.matmul %q, %w : (tensor<2x3x4x5xf32>, tensor<5x6xf32>) -> tensor<2x3x4x6xf32>",
    "%r = opc.matmul %w, %k {trans_x = true} : (tensor<5x6xf32>, tensor<2x1x5x6xf32>) -> tensor<2x1x6x6xf32>",
    "%r = opc.slice %x {start = array<i64: 1, 0>, limit = array<i64: 4, 8>, strides = array<i64: 2, 3>} : "
    "(tensor<4x8xf32>) -> tensor<2x3xf32>",
    "%r = opc.concat %x, %y, %x {axis = -1} : (tensor<4x8xf32>, tensor<4x2xf32>, tensor<4x8xf32>) -> tensor<4x18xf32>",
    "%r = opc.concat %x : (tensor<4x8xf32>) -> tensor<4x8xf32>",
    "%r = opc.gather %x, %i : (tensor<4x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>",
    "%r = opc.gather %x, %u {axis = 1} : (tensor<4x8xf32>, tensor<3xui8>) -> tensor<4x3xf32>",
    "%r = opc.softmax %x : (tensor<4x8xf32>) -> tensor<4x8xf32>",
    "%r = opc.log_softmax %h {axis = 0} : (tensor<4x8xf16>) -> tensor<4x8xf16>",
    "%r, %mean, %rstd = opc.layer_norm %x, %s, %b {epsilon = 1.0e-06 : f64} : "
    "(tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)",
    "%r, %mean, %rstd = opc.layer_norm %x, %x, %x {begin_norm_axis = 0} : "
    "(tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<f32>, tensor<f32>)",
    "%r, %sm = opc.softmax_cross_entropy %x, %l : (tensor<4x8xf32>, tensor<4x1xi64>) -> (tensor<4x1xf32>, tensor<4x8xf32>)",
    "%r = opc.softmax_grad %x, %x {axis = 0} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>",
    "%r = opc.log_softmax_grad %d, %d : (tensor<4x8xf64>, tensor<4x8xf64>) -> tensor<4x8xf64>",
    "%r, %ds, %db = opc.layer_norm_grad %x, %s, %m, %m, %x : (tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>, "
    "tensor<4xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)",
    "%r = opc.softmax_cross_entropy_grad %l32, %x, %m2 : (tensor<4x1xi32>, tensor<4x8xf32>, tensor<4x1xf32>) "
    "-> tensor<4x8xf32>",
    "%r = opc.slice_grad %x, %f {start = array<i64: 1, 2>, limit = array<i64: 3, 5>, strides = array<i64: 1, 1>} : "
    "(tensor<4x8xf32>, tensor<2x3xf32>) -> tensor<4x8xf32>",
    "%r = opc.gather_grad %x, %i, %g3 : (tensor<4x8xf32>, tensor<2x3xi32>, tensor<2x3x8xf32>) -> tensor<4x8xf32>",
]


def wrap(body: str) -> str:
    extra = ", %m2: tensor<4x1xf32>, %g3: tensor<2x3x8xf32>"
    return f"func.func @f({ARGS}{extra}) {{\n  {body}\n  func.return\n}}\n"


@pytest.mark.parametrize("body", GOOD)
def test_round_trip(body: str) -> None:
    first = str(parse_text(wrap(body)).module)
    assert str(parse_text(first).module) == first
    buf = io.StringIO()
    Printer(stream=buf, print_generic_format=True).print_op(parse_text(first).module)
    assert str(parse_text(buf.getvalue()).module) == first


BAD = [
    ("%r = opc.reduce_mean %n {axes = array<i64: 1>} : (tensor<4x8xi32>) -> tensor<4xi32>", "float element type"),
    ("%r = opc.reduce_min %x {axes = array<i64: 2>} : (tensor<4x8xf32>) -> tensor<4xf32>", "out of range"),
    ("%r = opc.sigmoid %n : (tensor<4x8xi32>) -> tensor<4x8xi32>", "float element type"),
    ("%r = opc.matmul %q, %w : (tensor<2x3x4x5xf32>, tensor<5x6xf32>) -> tensor<3x4x6xf32>",
     "result must have shape [2, 3, 4, 6]"),
    ("%r = opc.matmul %q, %f : (tensor<2x3x4x5xf32>, tensor<2x3xf32>) -> tensor<2x3x4x3xf32>", "inner dims differ"),
    ("%r = opc.matmul %k, %q : (tensor<2x1x5x6xf32>, tensor<2x3x4x5xf32>) -> tensor<2x3x5x5xf32>", "inner dims differ"),
    ("%r = opc.matmul %q, %k {trans_y = true} : (tensor<2x3x4x5xf32>, tensor<2x1x5x6xf32>) -> tensor<2x3x4x5xf32>",
     "inner dims differ"),
    ("%r = opc.matmul %q, %qq : (tensor<2x3x4x5xf32>, tensor<3x3x5x4xf32>) -> tensor<2x3x4x4xf32>", "do not broadcast"),
    ("%r = opc.slice %x {start = array<i64: 1>, limit = array<i64: 4>, strides = array<i64: 1>} : "
     "(tensor<4x8xf32>) -> tensor<3xf32>", "slice start has 1 entries, the operand has rank 2"),
    ("%r = opc.slice %x {start = array<i64: 3, 0>, limit = array<i64: 2, 8>, strides = array<i64: 1, 1>} : "
     "(tensor<4x8xf32>) -> tensor<0x8xf32>", "need 0 <= start <= limit <= 4, got start 3, limit 2"),
    ("%r = opc.slice %x {start = array<i64: 0, 0>, limit = array<i64: 4, 8>, strides = array<i64: 0, 1>} : "
     "(tensor<4x8xf32>) -> tensor<4x8xf32>", "strides must be >= 1"),
    ("%r = opc.slice %x {start = array<i64: 0, 0>, limit = array<i64: 4, 8>, strides = array<i64: 3, 1>} : "
     "(tensor<4x8xf32>) -> tensor<1x8xf32>", "result must have shape [2, 8]"),
    ("%r = opc.concat %x, %f {axis = 1} : (tensor<4x8xf32>, tensor<2x3xf32>) -> tensor<4x11xf32>",
     "concat operand 1 has shape [2, 3]: all operands must match [4, 8] except along axis 1"),
    ("%r = opc.concat %x, %h : (tensor<4x8xf32>, tensor<4x8xf16>) -> tensor<8x8xf32>", "element types differ"),
    ("%r = opc.concat %x, %y {axis = 2} : (tensor<4x8xf32>, tensor<4x2xf32>) -> tensor<4x10xf32>",
     "concat axis 2 is out of range for rank 2"),
    ("%r = opc.gather %x, %s : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>", "indices must have an integer"),
    ("%r = opc.gather %x, %i {axis = -3} : (tensor<4x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>",
     "gather axis -3 is out of range"),
    ("%r = opc.gather %x, %i {axis = 1} : (tensor<4x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>",
     "result must have shape [4, 2, 3]"),
    ("%r = opc.gather %q, %i6 : (tensor<2x3x4x5xf32>, tensor<1x1x1x1x2x3xi32>) -> tensor<1x1x1x1x2x3x3x4x5xf32>",
     "rank 9"),
    ("%r = opc.softmax %n : (tensor<4x8xi32>) -> tensor<4x8xi32>", "float element type"),
    ("%r = opc.softmax %x {axis = 2} : (tensor<4x8xf32>) -> tensor<4x8xf32>", "'opc.softmax' op axis 2 is out of range"),
    ("%r, %mean, %rstd = opc.layer_norm %h, %s, %b : (tensor<4x8xf16>, tensor<8xf32>, tensor<8xf32>) -> "
     "(tensor<4x8xf16>, tensor<4xf32>, tensor<4xf32>)", "x and scale: element types differ"),
    ("%r, %mean, %rstd = opc.layer_norm %d, %dd, %dd : (tensor<4x8xf64>, tensor<8xf64>, tensor<8xf64>) -> "
     "(tensor<4x8xf64>, tensor<4xf32>, tensor<4xf32>)", "mean must have element type f64"),
    ("%r, %mean, %rstd = opc.layer_norm %x, %s, %b : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> "
     "(tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>)", "mean must have shape [4]"),
    ("%r, %mean, %rstd = opc.layer_norm %x, %s, %b {begin_norm_axis = 2} : (tensor<4x8xf32>, tensor<8xf32>, "
     "tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)", "begin_norm_axis 2 is out of range"),
    ("%r, %mean, %rstd = opc.layer_norm %x, %s, %b {epsilon = -1.0 : f64} : (tensor<4x8xf32>, tensor<8xf32>, "
     "tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)", "epsilon must be >= 0"),
    ("%r, %sm = opc.softmax_cross_entropy %x, %i8l : (tensor<4x8xf32>, tensor<4x1xi8>) -> "
     "(tensor<4x1xf32>, tensor<4x8xf32>)", "label must have element type i32 or i64, got i8"),
    ("%r, %sm = opc.softmax_cross_entropy %x, %l {axis = 0} : (tensor<4x8xf32>, tensor<4x1xi64>) -> "
     "(tensor<1x8xf32>, tensor<4x8xf32>)", "label must have shape [1, 8]"),
    ("%r = opc.softmax_grad %x, %h : (tensor<4x8xf32>, tensor<4x8xf16>) -> tensor<4x8xf32>",
     "'opc.softmax_grad' op has tensor<4x8xf16> where tensor<4x8xf32> is expected"),
    ("%r, %ds, %db = opc.layer_norm_grad %x, %s, %m, %m, %h : (tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>, "
     "tensor<4xf32>, tensor<4x8xf16>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)", "dy must have the type of x"),
    ("%r = opc.softmax_cross_entropy_grad %l, %x, %x : (tensor<4x1xi64>, tensor<4x8xf32>, tensor<4x8xf32>) "
     "-> tensor<4x8xf32>", "dloss must have shape [4, 1]"),
    ("%r = opc.slice_grad %x, %x {start = array<i64: 1, 2>, limit = array<i64: 3, 5>, strides = array<i64: 1, 1>} : "
     "(tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>", "dout must have shape [2, 3]"),
    ("%r = opc.gather_grad %x, %i, %x : (tensor<4x8xf32>, tensor<2x3xi32>, tensor<4x8xf32>) -> tensor<4x8xf32>",
     "dout must have shape [2, 3, 8]"),
]


@pytest.mark.parametrize("body,message", BAD)
def test_verifier_rejects(body: str, message: str) -> None:
    text = wrap(body).replace("%g3: tensor<2x3x8xf32>)", "%g3: tensor<2x3x8xf32>, %qq: tensor<3x3x5x4xf32>, "
                                                         "%dd: tensor<8xf64>, %i8l: tensor<4x1xi8>)")
    with pytest.raises(OpcError) as err:
        parse_text(text, "bad.mlir")
    msg = str(err.value)
    assert msg.startswith("bad.mlir:2:3: error: "), msg
    assert message in msg, msg


@pytest.mark.parametrize("name", ["opc.softmax", "opc.log_softmax", "opc.softmax_grad", "opc.log_softmax_grad",
                                  "opc.layer_norm", "opc.layer_norm_grad", "opc.sigmoid", "opc.reduce_mean"])
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "f64"])
def test_opc_check_grids_build_ops_the_verifier_admits(name: str, dtype: str) -> None:
    """`opc check` can test a device's own kernel of these ops: every size of its grid verifies."""
    from opc.check import admitted, build_op, grid_for

    props = {"keepdim": BoolAttr.from_bool(False)} if name.startswith("opc.reduce") else {}
    shapes = admitted(grid_for(name), name, props, dtype)
    assert shapes
    for shape in shapes:
        build_op(shape)[1].verify()


def test_a_device_kernel_receives_a_zero_axis() -> None:
    """IntegerAttr(0) is falsy: a device's kernel must still get axis = 0, not the default -1."""
    from opc.targets.device_kernels import kernel_attributes

    op = next(o for o in parse_text(wrap(GOOD[13])).module.walk() if o.name == "opc.log_softmax")
    assert kernel_attributes(op)["axis"].value.data == 0
