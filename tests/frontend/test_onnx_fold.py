"""opc.load_onnx folds each BatchNormalization after a Conv into it (opc/onnx_import/fold.py), as
onnxruntime does: the outputs against NumPy's conv + batch norm, with and without the conv's bias,
grouped and 1-D; the BatchNorms it must keep (training mode, a conv output read twice, a fed
parameter) kept, and right; a cached compile's folded weights computed again, to the same bits;
opc.import_onnx (training) keeps every BatchNorm's parameters as weights."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the optional onnx package is not installed")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import opc  # noqa: E402
from opc.onnx_import.fold import fold_batch_norms, is_folded  # noqa: E402

RNG = np.random.default_rng(7)
EPS = 1e-3


def conv_bn(c: int = 4, o: int = 6, group: int = 1, bias: bool = True, rank: int = 2, training: bool = False,
            also_read: bool = False, fed: bool = False) -> tuple[Any, dict[str, np.ndarray]]:
    """x -> Conv (3-wide taps, pads 1) -> BatchNormalization -> Relu; `also_read`: the conv's output is a
    graph output too; `fed`: gamma is a graph input (with a default)."""
    size = [5, 7][:rank] if rank == 2 else [9]
    w = RNG.standard_normal((o, c // group, *[3] * rank)).astype(np.float32)
    params = {"w": w, "gamma": RNG.uniform(0.5, 2, o).astype(np.float32), "beta": RNG.standard_normal(o).astype(np.float32),
              "mean": RNG.standard_normal(o).astype(np.float32), "var": RNG.uniform(0.1, 3, o).astype(np.float32)}
    if bias:
        params["b"] = RNG.standard_normal(o).astype(np.float32)
    conv_inputs = ["x", "w", "b"] if bias else ["x", "w"]
    nodes = [helper.make_node("Conv", conv_inputs, ["h"], group=group, pads=[1] * (2 * rank)),
             helper.make_node("BatchNormalization", ["h", "gamma", "beta", "mean", "var"],
                              ["n", "running_mean", "running_var"] if training else ["n"], epsilon=EPS,
                              training_mode=int(training)),
             helper.make_node("Relu", ["n"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, *size])]
    if fed:
        inputs.append(helper.make_tensor_value_info("gamma", TensorProto.FLOAT, [o]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, o, *size])]
    if also_read:
        outputs.append(helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, o, *size]))
    graph = helper.make_graph(nodes, "conv_bn", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in params.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]), params


def reference(x: np.ndarray, p: dict[str, np.ndarray], group: int, training: bool = False) -> tuple[np.ndarray, ...]:
    """NumPy: the conv (float64), then the batch norm (the batch's statistics in training mode), relu."""
    w, rank = p["w"].astype(np.float64), x.ndim - 2
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *[(1, 1)] * rank])
    og, cg = w.shape[0] // group, w.shape[1]
    h = np.zeros((x.shape[0], w.shape[0], *x.shape[2:]))
    for pos in np.ndindex(*[3] * rank):
        window = xp[(slice(None), slice(None), *(slice(k, k + n) for k, n in zip(pos, x.shape[2:])))]
        for g in range(group):
            taps = w[(slice(g * og, (g + 1) * og), slice(None), *pos)]
            h[:, g * og:(g + 1) * og] += np.einsum("oc,nc...->no...", taps, window[:, g * cg:(g + 1) * cg])
    if "b" in p:
        h += p["b"].reshape(-1, *[1] * rank)
    axes = (0, *range(2, 2 + rank))
    mean, var = (h.mean(axis=axes), h.var(axis=axes)) if training else (p["mean"], p["var"])
    shape = (-1, *[1] * rank)
    n = (h - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + EPS) * p["gamma"].reshape(shape) + \
        p["beta"].reshape(shape)
    return np.maximum(n, 0), h


@pytest.mark.parametrize("group,o,bias,rank", [(1, 6, True, 2), (1, 6, False, 2), (2, 6, True, 2), (4, 4, False, 1)],
                         ids=["bias", "no_bias", "groups2", "depthwise_1d"])
def test_folded_conv_matches_numpy(group: int, o: int, bias: bool, rank: int, tmp_path) -> None:
    model, params = conv_bn(o=o, group=group, bias=bias, rank=rank)
    assert not any(n.op_type == "BatchNormalization" for n in fold_batch_norms(model).graph.node)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    x = RNG.standard_normal((2, 4, *([5, 7] if rank == 2 else [9]))).astype(np.float32)
    want, _ = reference(x, params, group)
    got = opc.load_onnx(str(path), cache_dir=str(tmp_path / "cache"))(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # a fresh loader finds the compile in the cache and computes the folded weights again: the same bits
    again = opc.load_onnx(str(path), cache_dir=str(tmp_path / "cache"))
    np.testing.assert_array_equal(again(x)[0], got)
    assert any(is_folded(n) for n in again.inference_model.graph.initializer for n in [n.name])


@pytest.mark.parametrize("case", ["training", "also_read", "fed"])
def test_batch_norms_that_must_stay(case: str) -> None:
    model, params = conv_bn(**{case: True})
    assert fold_batch_norms(model) is model  # nothing folds: the model itself
    x = RNG.standard_normal((2, 4, 5, 7)).astype(np.float32)
    want, h = reference(x, params, 1, training=case == "training")
    got = opc.load_onnx(model)(x)
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4)
    if case == "also_read":
        np.testing.assert_allclose(got[1], h, rtol=1e-5, atol=1e-5)


def test_training_import_keeps_the_batch_norm() -> None:
    """opc.import_onnx's gradients need gamma and beta as weights: nothing is folded there."""
    model, _ = conv_bn()
    _, weights = opc.import_onnx(model)
    assert {"gamma", "beta", "w"} <= set(weights)


def test_a_weight_two_convs_share(tmp_path) -> None:
    """Two Conv + BatchNorm pairs read one weight: each folds its own copy, on the cached path too
    (there a conv weight read by one folded weight alone is scaled where it lies)."""
    model, params = conv_bn(c=4, o=4)
    graph = model.graph
    extra = {"gamma2": params["gamma"][::-1].copy() * 2, "beta2": params["beta"][::-1].copy(),
             "mean2": params["mean"][::-1].copy(), "var2": params["var"][::-1].copy()}
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in extra.items())
    graph.node.extend([helper.make_node("Conv", ["y", "w", "b"], ["h2"], pads=[1, 1, 1, 1]),
                       helper.make_node("BatchNormalization", ["h2", "gamma2", "beta2", "mean2", "var2"], ["y2"],
                                        epsilon=EPS)])
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, [2, 4, 5, 7]))
    path = tmp_path / "shared.onnx"
    onnx.save(model, str(path))
    x = RNG.standard_normal((2, 4, 5, 7)).astype(np.float32)
    y, _ = reference(x, params, 1)
    _, pre = reference(y.astype(np.float32), params, 1)  # the second conv's output, before its BatchNorm
    shape = (-1, 1, 1)
    want = (pre - extra["mean2"].reshape(shape)) / np.sqrt(extra["var2"].reshape(shape) + EPS) * \
        extra["gamma2"].reshape(shape) + extra["beta2"].reshape(shape)
    for _ in range(2):  # compiled, then from the cache
        got = opc.load_onnx(str(path), cache_dir=str(tmp_path / "cache"))(x)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
