"""MeanVarianceNormalization (opc/onnx_import/nn.py) against onnxruntime (float32) and the operator's
formula in NumPy (float64, which onnxruntime runs through the function body, whose float epsilon
it refuses to add to doubles): ranks 2 to 5, the default axes and others, opsets 9 and 13 (where
ONNX's shape inference fails inside the op's own function body, and the importer goes on without it
for that op)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import call, helper, import_all, run_ort

import opc


def model(x: np.ndarray, opset: int, **attrs):
    """One MeanVarianceNormalization, its output typed like x (ONNX's strict inference fails at 13)."""
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", t, x.shape)],
                              [helper.make_tensor_value_info("y", t, x.shape)])
    opsets = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


CASES = {}
for shape, axes in [((2, 3, 4, 5), None), ((3, 3, 3, 1), None), ((2, 3, 4), [0, 2]), ((4, 6), [1]),
                    ((2, 3, 2, 2, 3), [2, 3, 4]), ((2, 3, 4, 5), [-1, 1])]:
    for dtype in [np.float32, np.float64]:
        for opset in [9, 13]:
            if dtype == np.float64 and opset == 9:
                continue  # onnxruntime registers MeanVarianceNormalization-9 for float only
            rng = np.random.default_rng(len(shape))
            x = (rng.normal(0, 1, shape) * 3 + 1).astype(dtype)
            attrs = {} if axes is None else {"axes": axes}
            CASES[f"{shape}-{axes}-{np.dtype(dtype).name}-op{opset}"] = (
                model(x, opset, **attrs), {"x": x})


@pytest.fixture(scope="module")
def compiled():
    module, params = import_all({k: m for k, (m, _) in CASES.items()})
    return opc.compile(module), params


@pytest.mark.parametrize("case", list(CASES))
def test_matches_onnxruntime(compiled, case: str) -> None:
    fn, params = compiled
    model, feeds = CASES[case]
    (got,) = call(fn, case, feeds, params[case])
    x = feeds["x"]
    if x.dtype == np.float32:
        (want,) = run_ort(model, feeds)
    else:
        axes = tuple(next((list(a.ints) for a in model.graph.node[0].attribute if a.name == "axes"), [0, 2, 3]))
        mean = np.mean(x, axis=axes, keepdims=True)
        want = (x - mean) / (np.sqrt(np.mean(x ** 2, axis=axes, keepdims=True) - mean ** 2) + 1e-9)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5 if got.dtype == np.float32 else 1e-9, atol=1e-5)


def test_an_inference_error_outside_a_function_body_is_still_refused() -> None:
    """An Add of float and int64: ONNX's inference fails at the node itself, not in a function body."""
    t = helper.np_dtype_to_tensor_dtype
    node = helper.make_node("Add", ["x", "i"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", t(np.dtype(np.float32)), [2]),
                                            helper.make_tensor_value_info("i", t(np.dtype(np.int64)), [2])],
                              [helper.make_tensor_value_info("y", t(np.dtype(np.float32)), [2])])
    bad = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(opc.InputError, match="ONNX shape inference failed"):
        opc.import_onnx(bad)
