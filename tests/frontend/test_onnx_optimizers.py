"""ai.onnx.preview.training's optimizers (Adagrad, Adam, Momentum standard and Nesterov;
opc/onnx_import/training.py) against the update rules of ONNX's operator docs, written out here in
float64 NumPy: one or two optimized tensors of several shapes, float32 and float64, the first step
(T = 0, where Adam skips its bias correction and Momentum's gradient coefficient is 1) and later
ones, and attribute values other than the defaults. onnxruntime's inference build has no training
domain, so NumPy is the oracle."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import helper, onnx

import opc

TRAINING = "ai.onnx.preview.training"
SHAPES = [[(3,)], [(2, 3)], [(1,), (2, 2)]]  # each a list: one shape per optimized tensor


def adagrad(r, t, x, g, h, decay_factor=0.0, epsilon=1e-6, norm_coefficient=0.0):
    rate = r / (1 + t * decay_factor)
    g = g + norm_coefficient * x
    h = h + g * g
    return x - rate * g / (np.sqrt(h) + epsilon), h


def adam(r, t, x, g, v, h, alpha=0.9, beta=0.999, epsilon=1e-6, norm_coefficient=0.0, norm_coefficient_post=0.0):
    g = g + norm_coefficient * x
    v = alpha * v + (1 - alpha) * g
    h = beta * h + (1 - beta) * g * g
    rate = r * np.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else r
    return (1 - norm_coefficient_post) * (x - rate * v / (np.sqrt(h) + epsilon)), v, h


def momentum(r, t, x, g, v, alpha, beta, mode, norm_coefficient):
    g = g + norm_coefficient * x
    v = alpha * v + (beta if t > 0 else 1.0) * g
    return (x - r * v if mode == "standard" else x - r * (g + alpha * v)), v


def run(op: str, attrs: dict, shapes: list[tuple[int, ...]], dtype, state: int, step: int, seed: int = 0):
    """The op on random tensors, through opc; and its rule in float64 on the same values.
    state: how many state tensors (H, or V and H) each optimized tensor carries."""
    rng = np.random.default_rng(seed)
    n = len(shapes)
    groups = [[rng.uniform(-1, 1, s) for _ in range(2)] + [rng.uniform(0, 1, s) for _ in range(state)]
              for s in shapes]  # X, G, then the state (H >= 0: it accumulates squares)
    r, t = np.array(0.1, dtype), np.array(step, np.int64)
    kinds = ["X", "G"] + (["H"] if state == 1 else ["V", "H"])
    names = [f"{k}{i}" for k in kinds for i in range(n)]
    arrays = [groups[i][k].astype(dtype) for k in range(2 + state) for i in range(n)]
    outs = [f"{name}_new" for name in names if name[0] != "G"]
    tt = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    ins = ([helper.make_tensor_value_info("R", tt, []), helper.make_tensor_value_info("T", onnx.TensorProto.INT64, [])]
           + [helper.make_tensor_value_info(nm, tt, a.shape) for nm, a in zip(names, arrays)])
    out_shapes = [shapes[i] for _ in range(1 + state) for i in range(n)]
    node = helper.make_node(op, ["R", "T", *names], outs, domain=TRAINING, **attrs)
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info(o, tt, s)
                                                 for o, s in zip(outs, out_shapes)])
    opsets = [helper.make_opsetid(TRAINING, 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    module, _ = opc.import_onnx(model)
    got = opc.compile(module).g(r, t, *arrays)
    got = list(got) if isinstance(got, tuple) else [got]
    rule = {"Adagrad": adagrad, "Adam": adam, "Momentum": momentum}[op]
    per_tensor = [rule(0.1, step, *[a.astype(np.float64) for a in group], **attrs) for group in
                  [[arrays[k * n + i] for k in range(2 + state)] for i in range(n)]]
    want = [per_tensor[i][k] for k in range(1 + state) for i in range(n)]  # Xs, then each state's
    return got, want


def check(got, want, dtype) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.dtype(dtype)
        np.testing.assert_allclose(g, w, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("step,attrs", [(0, {}), (3, {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01})])
def test_adagrad(dtype, shapes, step, attrs) -> None:
    check(*run("Adagrad", attrs, shapes, dtype, 1, step), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("step,attrs", [(0, {}), (1, {}), (5, {"alpha": 0.8, "beta": 0.9, "epsilon": 1e-3,
                                                            "norm_coefficient": 0.01, "norm_coefficient_post": 0.02})])
def test_adam(dtype, shapes, step, attrs) -> None:
    check(*run("Adam", attrs, shapes, dtype, 2, step), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("mode", ["standard", "nesterov"])
@pytest.mark.parametrize("step", [0, 2])
def test_momentum(dtype, shapes, mode, step) -> None:
    attrs = {"alpha": 0.9, "beta": 0.5, "mode": mode, "norm_coefficient": 0.01}
    check(*run("Momentum", attrs, shapes, dtype, 1, step), dtype)


def test_a_wrong_number_of_inputs_is_one_line() -> None:
    x = helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [2])
    ins = [helper.make_tensor_value_info("R", onnx.TensorProto.FLOAT, []),
           helper.make_tensor_value_info("T", onnx.TensorProto.INT64, []), x]
    node = helper.make_node("Adagrad", ["R", "T", "X", "X"], ["Y"], domain=TRAINING)
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [2])])
    opsets = [helper.make_opsetid(TRAINING, 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    with pytest.raises(opc.InputError, match="Adagrad.*4 inputs: R, T and 3 tensors per optimized tensor"):
        opc.import_onnx(model)
