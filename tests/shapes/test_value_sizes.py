"""Sizes read from tensors' values (docs/shapes.md, "Sizes read from values"): an `index` value
computed from a tensor (tensor.extract, arith.index_cast, arith on it) that an op takes as a size is a
data size with no bound before the call. The function allocates a result holding one and hands it
out; the binding views it and frees it with the array. One compile serves every value."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from onnx_helpers import helper, onnx, run_ort

import opc

FULL_IOTA = """
func.func @f(%n: tensor<i64>, %x: tensor<3xf32>) -> (tensor<?x3xf32>, tensor<?xi32>) {
  %e = tensor.extract %n[] : tensor<i64>
  %k = arith.index_cast %e : i64 to index
  %one = arith.constant 1 : index
  %k1 = arith.addi %k, %one : index
  %z = opc.full %k {value = 2.5 : f64} : (index) -> tensor<?x3xf32>
  %b = opc.broadcast_to %x, %k : (tensor<3xf32>, index) -> tensor<?x3xf32>
  %s = opc.add %z, %b : (tensor<?x3xf32>, tensor<?x3xf32>) -> tensor<?x3xf32>
  %i = opc.iota %k1 : (index) -> tensor<?xi32>
  func.return %s, %i : tensor<?x3xf32>, tensor<?xi32>
}
"""


@pytest.fixture(scope="module")
def full_iota():
    return opc.compile(FULL_IOTA)


@pytest.mark.parametrize("n", [0, 1, 4, 1000])
def test_full_broadcast_iota_sized_by_a_value(full_iota, n):
    x = np.array([1, 2, 3], np.float32)
    s, i = full_iota.f(np.array(n), x)
    np.testing.assert_array_equal(s, np.broadcast_to(x + 2.5, (n, 3)))
    np.testing.assert_array_equal(i, np.arange(n + 1, dtype=np.int32))
    assert full_iota.f.sig.handed == [0, 1]


def test_a_negative_value_size_is_a_value_error(full_iota):
    with pytest.raises(ValueError, match="gives a size of -2: a size read from a tensor must not be negative"):
        full_iota.f(np.array(-2), np.zeros(3, np.float32))


def test_handed_results_outlive_the_call_and_are_freed(full_iota):
    """A view of a handed result keeps its buffer; the buffers go with the arrays (no growth over
    many calls)."""
    s, _ = full_iota.f(np.array(50_000), np.ones(3, np.float32))
    tail = s[-2:]
    del s
    gc.collect()
    np.testing.assert_array_equal(tail, np.full((2, 3), 3.5, np.float32))
    for _ in range(200):  # 200 x 600 KB: a leak would be 120 MB, not a failure, but ASan's leak check sees it
        full_iota.f(np.array(50_000), np.ones(3, np.float32))


def range_model(elem: int) -> onnx.ModelProto:
    vi = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("Range", ["start", "limit", "delta"], ["r"])], "g",
                              [vi(n, elem, []) for n in ("start", "limit", "delta")], [vi("r", elem, ["n"])])
    opsets = [helper.make_opsetid("", 17)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


@pytest.mark.parametrize("dtype, elem", [(np.float32, onnx.TensorProto.FLOAT), (np.int64, onnx.TensorProto.INT64),
                                         (np.int32, onnx.TensorProto.INT32), (np.float64, onnx.TensorProto.DOUBLE)])
def test_onnx_range_of_run_time_values_compiles_once(dtype, elem):
    """Range(start, limit, delta) with all three graph inputs: one module for every value, against
    np.arange and onnxruntime."""
    model = range_model(elem)
    m = opc.load_onnx(model)
    for start, limit, delta in ((0, 5, 1), (2, 11, 3), (10, 1, -2), (3, 3, 1), (5, 1, 1), (-4, 4, 2)):
        feeds = {"start": np.array(start, dtype), "limit": np.array(limit, dtype), "delta": np.array(delta, dtype)}
        (got,) = m(**feeds)
        want = np.arange(start, limit, delta, dtype=dtype)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, run_ort(model, feeds)[0])
    assert len(m.variants) == 1 and not next(iter(m.variants.values()))[0].bound  # type: ignore[attr-defined]


def test_onnx_range_with_delta_zero_is_a_value_error():
    m = opc.load_onnx(range_model(onnx.TensorProto.INT64))
    with pytest.raises(ValueError, match="must not be negative"):
        m(start=np.array(0), limit=np.array(4), delta=np.array(0))


EQUATED = """
func.func @f(%x: tensor<8xf32>, %k: tensor<i64>) -> tensor<3xf32> {
  %ki = tensor.extract %k[] : tensor<i64>
  %kx = arith.index_cast %ki : i64 to index
  %s = tensor.extract_slice %x[0] [%kx] [1] : tensor<8xf32> to tensor<?xf32>
  %r = opc.reshape %s : (tensor<?xf32>) -> tensor<3xf32>
  func.return %r : tensor<3xf32>
}
func.func @g(%x: tensor<8x2xf32>, %k: tensor<i64>) -> tensor<6xf32> {
  %ki = tensor.extract %k[] : tensor<i64>
  %kx = arith.index_cast %ki : i64 to index
  %s = tensor.extract_slice %x[0, 0] [%kx, 2] [1, 1] : tensor<8x2xf32> to tensor<?x2xf32>
  %r = opc.reshape %s : (tensor<?x2xf32>) -> tensor<6xf32>
  func.return %r : tensor<6xf32>
}
"""


def test_a_value_size_equated_with_a_static_one_is_checked_at_the_call():
    """A size read from a value that a static shape fixes (k, and 2k for 6 elements) takes that size,
    and the call checks the value: right where it agrees, a ValueError where it does not (it used to
    give the static size's elements unchecked)."""
    m = opc.compile(EQUATED)
    x = np.arange(16, dtype=np.float32)
    np.testing.assert_array_equal(m.f(x[:8], np.array(3)), x[:3])
    np.testing.assert_array_equal(m.g(x.reshape(8, 2), np.array(3)), x[:6])
    for fn, k in ((m.f, 2), (m.f, 4), (m.g, 2)):
        with pytest.raises(ValueError, match="count must equal"):
            fn(x[:8] if fn is m.f else x.reshape(8, 2), np.array(k))
