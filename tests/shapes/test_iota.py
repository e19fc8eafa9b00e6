"""opc.iota: 0, 1, ..., n - 1 with a run-time length (an `index` operand) or a static one, in
each number type, against NumPy's arange; ONNX Range with a run-time limit imports as it. No
vjp: iota has no operand a gradient could reach (not_differentiable)."""

from __future__ import annotations

import numpy as np
import pytest

import opc
from opc.errors import InputError
from opc.ops.registry import entry

DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "ui8": np.uint8, "f16": np.float16}


def program(t: str) -> str:
    return f"""
func.func @f(%x: tensor<?x3xf32>) -> (tensor<?x{t}>, tensor<3x{t}>, tensor<?x3xf32>) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = tensor.dim %x, %c0 : tensor<?x3xf32>
  %m = arith.addi %n, %c1 : index
  %a = opc.iota %m : (index) -> tensor<?x{t}>
  %b = opc.iota : () -> tensor<3x{t}>
  %c = opc.iota : () -> tensor<3xf32>
  %d = opc.mul %x, %c : (tensor<?x3xf32>, tensor<3xf32>) -> tensor<?x3xf32>
  return %a, %b, %d : tensor<?x{t}>, tensor<3x{t}>, tensor<?x3xf32>
}}
"""


@pytest.mark.parametrize("t", DTYPES)
def test_iota(t):
    m = opc.compile(program(t))
    for n in (0, 1, 7):
        x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        a, b, d = m.f(x)
        np.testing.assert_array_equal(a, np.arange(n + 1, dtype=DTYPES[t]))
        assert a.dtype == DTYPES[t]
        np.testing.assert_array_equal(b, np.arange(3, dtype=DTYPES[t]))
        np.testing.assert_allclose(d, x * np.arange(3, dtype=np.float32))


def test_iota_is_not_differentiable():
    e = entry("iota")
    assert e is not None and e.vjp is None


@pytest.mark.parametrize(("result", "message"), [("tensor<2x3xf32>", "1-D"), ("tensor<?xi1>", "not i1")])
def test_iota_verification(result, message):
    src = f"""
func.func @f(%x: tensor<?xf32>) -> {result} {{
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?xf32>
  %a = opc.iota {"%n" if "?" in result else ""} : ({"index" if "?" in result else ""}) -> {result}
  return %a : {result}
}}
"""
    with pytest.raises(InputError, match=message):
        opc.compile(src)


def test_onnx_range_imports_as_iota():
    from onnx_helpers import helper, numpy_helper, onnx

    from opc.onnx_import import import_graph

    def const(name, value):  # noqa: ANN001, ANN202
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))

    nodes = [helper.make_node("Shape", ["x"], ["shape"]), const("i1", np.array(1)),
             helper.make_node("Gather", ["shape", "i1"], ["n"]), const("three", np.array(3, np.int64)),
             const("one", np.array(1, np.int64)), helper.make_node("Range", ["three", "n", "one"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=onnx.TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0)]
    ins = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["b", "seq"])]
    outs = [helper.make_empty_tensor_value_info("rf")]
    opsets = [helper.make_opsetid("", 18)]
    model = onnx.shape_inference.infer_shapes(helper.make_model(
        helper.make_graph(nodes[:-1], "g", ins, outs), opset_imports=opsets,
        ir_version=helper.find_min_ir_version_for(opsets)))
    module, _, _ = import_graph(model, None, None, "<model>", dynamic=True)
    text = str(module)
    assert "opc.iota" in text and "opc.cumsum" not in text
    run = opc.load_onnx(model)
    for s in (3, 4, 9):
        np.testing.assert_array_equal(run(np.zeros((2, s), np.float32))[0], np.arange(3, s, dtype=np.float32))
    assert run.static_reason is None and not run.variants
