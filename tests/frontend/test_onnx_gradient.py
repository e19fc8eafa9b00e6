"""ONNX's Gradient op (ai.onnx.preview.training) through opc's autodiff (opc/onnx_import/training.py):
ONNX's own cases against their expected outputs, and graphs of several ops against central finite
differences of the same graph without the Gradient node, run in float64 by onnx's reference
evaluator (an oracle independent of opc)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import helper, onnx

import opc

TRAINING = "ai.onnx.preview.training"


def model(nodes, inputs: dict[str, np.ndarray], outputs: list[str], out_shapes: dict[str, tuple]) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()]
    dtype = helper.np_dtype_to_tensor_dtype(next(iter(inputs.values())).dtype)
    outs = [helper.make_tensor_value_info(n, dtype, out_shapes[n]) for n in outputs]
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(TRAINING, 1)]
    return helper.make_model(helper.make_graph(nodes, "g", ins, outs), opset_imports=opsets,
                             ir_version=helper.find_min_ir_version_for(opsets))


def forward_nodes():
    """y = sum(tanh(x @ w) * z): a matmul, a tanh, a product with a constant of the differentiation, a sum."""
    return [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["t"]),
            helper.make_node("Mul", ["t", "z"], ["p"]), helper.make_node("ReduceSum", ["p"], ["y"], keepdims=0)]


def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {"x": rng.uniform(-1, 1, (3, 4)), "w": rng.uniform(-1, 1, (4, 5)), "z": rng.uniform(-1, 1, (3, 5))}


def finite_difference(nodes, feeds: dict[str, np.ndarray], wrt: str, y: str, eps: float = 1e-6) -> np.ndarray:
    """d sum(y) / d wrt by central differences of the forward graph, in float64."""
    from onnx.reference import ReferenceEvaluator

    m = model(nodes, feeds, [y], {y: None})  # type: ignore[dict-item]
    run = ReferenceEvaluator(m)
    g = np.zeros_like(feeds[wrt])
    for i in np.ndindex(g.shape):
        plus, minus = dict(feeds), dict(feeds)
        plus[wrt], minus[wrt] = feeds[wrt].copy(), feeds[wrt].copy()
        plus[wrt][i] += eps
        minus[wrt][i] -= eps
        g[i] = (np.sum(run.run(None, plus)[0]) - np.sum(run.run(None, minus)[0])) / (2 * eps)
    return g


def run_opc(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    module, weights = opc.import_onnx(m)
    out = opc.compile(module).g(*feeds.values(), *weights.values())
    return list(out) if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("case", ["test_gradient_of_add", "test_gradient_of_add_and_mul"])
def test_onnx_cases(case: str) -> None:
    from onnx.backend.test.case.model import collect_testcases

    (c,) = [c for c in collect_testcases() if c.name == case]
    module, _ = opc.import_onnx(c.model)
    compiled = opc.compile(module)
    for feeds, expected in c.data_sets:
        got = getattr(compiled, c.model.graph.name)(*feeds)
        for g, w in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-6)


def test_gradients_match_finite_differences() -> None:
    """Gradient(x, w, z) {xs = [x, w], zs = [z], y = y}: dy/dx and dy/dw; z gets none."""
    feeds = inputs()
    grad = helper.make_node("Gradient", ["x", "w", "z"], ["dx", "dw"], domain=TRAINING, xs=["x", "w"], zs=["z"],
                            y="y")
    m = model([*forward_nodes(), grad], feeds, ["y", "dx", "dw"], {"y": (), "dx": (3, 4), "dw": (4, 5)})
    y, dx, dw = run_opc(m, feeds)
    np.testing.assert_allclose(dx, finite_difference(forward_nodes(), feeds, "x", "y"), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dw, finite_difference(forward_nodes(), feeds, "w", "y"), rtol=1e-6, atol=1e-8)


def test_gradient_of_a_tensor_is_of_its_sum_and_of_an_intermediate_value() -> None:
    """y = p (3x5, not a scalar): the gradient of sum(p); xs may name a value the graph computes (h)."""
    feeds = inputs()
    nodes = forward_nodes()[:3]
    grad = helper.make_node("Gradient", ["x", "w", "z"], ["dx"], domain=TRAINING, xs=["x"], zs=["w", "z"], y="p")
    m = model([*nodes, grad], feeds, ["dx"], {"dx": (3, 4)})
    (dx,) = run_opc(m, feeds)
    np.testing.assert_allclose(dx, finite_difference(nodes, feeds, "x", "p"), rtol=1e-6, atol=1e-8)
    # w.r.t. h = x @ w: d sum(tanh(h) z) / dh = (1 - tanh(h)^2) z
    grad_h = helper.make_node("Gradient", ["h", "z"], ["dh"], domain=TRAINING, xs=["h"], zs=["z"], y="p")
    m = model([*nodes, grad_h], feeds, ["dh"], {"dh": (3, 5)})
    (dh,) = run_opc(m, feeds)
    h = feeds["x"] @ feeds["w"]
    np.testing.assert_allclose(dh, (1 - np.tanh(h) ** 2) * feeds["z"], rtol=1e-12)


def test_an_integer_y_is_a_one_line_error() -> None:
    feeds = {"a": np.arange(6, dtype=np.int64).reshape(2, 3)}
    nodes = [helper.make_node("Abs", ["a"], ["b"]),
             helper.make_node("Gradient", ["a"], ["da"], domain=TRAINING, xs=["a"], y="b")]
    m = model(nodes, feeds, ["da"], {"da": (2, 3)})
    with pytest.raises(opc.OpcError, match=r"^node '[^']*' \(Gradient\): 'b' is not a float tensor: it has no gradient$"):
        opc.import_onnx(m)


def test_gradient_at_other_values_and_of_a_gradient() -> None:
    """The node's inputs are the point of differentiation: Gradient(h1, z) {xs = [h], zs = [z]} is dp/dh at
    h = h1 (the ops after h computed again there); and a y that is a Gradient's output gives a second
    derivative: d/dh sum(d sum(p)/dh) = d/dh sum((1 - tanh(h)^2) z) = -2 tanh(h) (1 - tanh(h)^2) z."""
    feeds = {**inputs(), "h1": np.random.default_rng(5).uniform(-1, 1, (3, 5))}
    nodes = [*forward_nodes()[:3],
             helper.make_node("Gradient", ["h1", "z"], ["dh1"], domain=TRAINING, xs=["h"], zs=["z"], y="p"),
             helper.make_node("Gradient", ["h", "z"], ["dh"], domain=TRAINING, xs=["h"], zs=["z"], y="p"),
             helper.make_node("Gradient", ["h", "z"], ["ddh"], domain=TRAINING, xs=["h"], zs=["z"], y="dh")]
    m = model(nodes, feeds, ["p", "dh1", "ddh"], {"p": (3, 5), "dh1": (3, 5), "ddh": (3, 5)})
    p, dh1, ddh = run_opc(m, feeds)
    h, z, h1 = feeds["x"] @ feeds["w"], feeds["z"], feeds["h1"]
    np.testing.assert_allclose(p, np.tanh(h) * z, rtol=1e-12)  # the forward is the graph's own, at h
    np.testing.assert_allclose(dh1, (1 - np.tanh(h1) ** 2) * z, rtol=1e-12)
    np.testing.assert_allclose(ddh, -2 * np.tanh(h) * (1 - np.tanh(h) ** 2) * z, rtol=1e-10, atol=1e-14)
