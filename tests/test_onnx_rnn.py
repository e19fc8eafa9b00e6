"""ONNX RNN, GRU and LSTM (issue 19), imported unrolled over the static sequence length:
forward, reverse and bidirectional, GRU with and without linear_before_reset, with and
without bias and initial states, against onnxruntime; the gradient through time of an
LSTM against finite differences. One module (and one with gradients)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx_helpers import call, graph_model, import_all, run_ort

import opc

RNG = np.random.default_rng(5)
S, B, IN, H = 4, 2, 3, 5


def arr(*shape) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def model(op: str, dirs: int, bias: bool = True, init: bool = False, **attrs):
    g = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    inits = {"w": arr(dirs, g * H, IN), "r": arr(dirs, g * H, H)}
    names = ["x", "w", "r", "b" if bias else ""]
    if bias:
        inits["b"] = arr(dirs, 2 * g * H)
    feeds = {"x": arr(S, B, IN)}
    if init:
        names += ["", "h0"] + (["c0"] if op == "LSTM" else [])
        feeds["h0"] = arr(dirs, B, H)
        if op == "LSTM":
            feeds["c0"] = arr(dirs, B, H)
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outs, name=f"the_{op}", hidden_size=H, **attrs)
    return graph_model([node], feeds, outs, inits), feeds


CASES = {
    "rnn": model("RNN", 1),
    "rnn_bi_init": model("RNN", 2, init=True, direction="bidirectional"),
    "gru": model("GRU", 1, init=True),
    "gru_lbr": model("GRU", 1, linear_before_reset=1),
    "gru_bi_nobias": model("GRU", 2, bias=False, direction="bidirectional", linear_before_reset=1),
    "lstm": model("LSTM", 1),
    "lstm_rev_init": model("LSTM", 1, init=True, direction="reverse"),
    "lstm_bi": model("LSTM", 2, init=True, direction="bidirectional"),
}


@pytest.fixture(scope="module")
def compiled():
    module, params = import_all({k: v[0] for k, v in CASES.items()})
    return opc.compile(module, target="cpu"), params


@pytest.mark.parametrize("name", list(CASES))
def test_against_onnxruntime(compiled, name: str) -> None:
    m, params = compiled
    onnx_model, feeds = CASES[name]
    got = call(m, name, feeds, params[name])
    want = run_ort(onnx_model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (name, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)


def test_lstm_gradient_through_time() -> None:
    """d <dY, outputs> / d (x, h0, c0, W, R, B) of a bidirectional LSTM (f32, as exported) against
    central differences with a step of 1e-2 (the model is smooth: tanh and sigmoid)."""
    onnx_model, feeds = CASES["lstm_bi"]
    module, params = opc.import_onnx(onnx_model)
    m = opc.compile(module, grad=True)
    args = [*feeds.values(), *params.values()]
    douts = [RNG.uniform(-1, 1, o.shape).astype(np.float32) for o in m.main_graph(*args)]
    grads = m.main_graph_grad(*args, *douts)
    eps = 1e-2
    for i, (a, g) in enumerate(zip(args, grads)):
        probe = RNG.uniform(-1, 1, a.shape).astype(np.float32)
        plus = m.main_graph(*[v + eps * probe if j == i else v for j, v in enumerate(args)])
        minus = m.main_graph(*[v - eps * probe if j == i else v for j, v in enumerate(args)])
        fd = sum(float(np.sum(d.astype(np.float64) * (p.astype(np.float64) - q))) for d, p, q in
                 zip(douts, plus, minus)) / (2 * eps)
        assert abs(fd - float(np.sum(g.astype(np.float64) * probe))) <= 2e-3 * (1 + abs(fd)), (i, fd)
