"""opc.paddle: compiled functions as paddle.autograd.PyLayers with opc's own gradient, against
Paddle's autograd of the same formula (float64), run-time and data-dependent sizes, and opc.paddle.Module training an imported ONNX model with a
Paddle optimizer, step for step like the same model written in Paddle's dygraph."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

if importlib.util.find_spec("paddle") is None:
    pytest.skip("paddle not installed (opc's 'paddle' extra: pip install '.[paddle]')", allow_module_level=True)
import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402
from interop_source import DATA_SIZED, MASKS, RUN_TIME, SOURCE  # noqa: E402

import opc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(23)


@pytest.fixture(scope="module")
def m():
    return opc.compile(SOURCE, grad=2)


def tensor(a: np.ndarray, grad: bool = True) -> paddle.Tensor:
    return paddle.to_tensor(a, stop_gradient=not grad)


def test_values_and_gradients_match_paddle(m):
    """f (float64, two results) and its gradient against Paddle's tanh(x @ w), exp(x).sum(1)."""
    xa, wa = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2))
    x, w = tensor(xa), tensor(wa)
    xr, wr = tensor(xa), tensor(wa)
    t, s = opc.paddle.op(m.f)(x, w)
    tr, sr = paddle.tanh(xr @ wr), paddle.exp(xr).sum(1)
    np.testing.assert_allclose(t.numpy(), tr.numpy(), rtol=1e-12)
    np.testing.assert_allclose(s.numpy(), sr.numpy(), rtol=1e-12)
    da, db = RNG.standard_normal((3, 2)), RNG.standard_normal(3)
    ((t * tensor(da, False)).sum() + (s * tensor(db, False)).sum()).backward()
    ((tr * tensor(da, False)).sum() + (sr * tensor(db, False)).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), wr.grad.numpy(), rtol=1e-12)


def test_integer_inputs_and_results(m):
    """g: an int64 index input (no gradient) and an int32 result (non-differentiable)."""
    xa = RNG.standard_normal((4, 3)).astype(np.float32)
    idx = np.array([3, -1, 0, 3, 1])
    x = tensor(xa)
    y, c = opc.paddle.op(m.g)(x, tensor(idx, False))
    assert c.dtype == paddle.int32 and c.stop_gradient
    np.testing.assert_allclose(y.numpy(), 1 / (1 + np.exp(-xa[idx])), rtol=1e-6)
    y.sum().backward()
    want = np.zeros_like(xa)
    np.add.at(want, idx, (1 / (1 + np.exp(-xa[idx]))) * (1 - 1 / (1 + np.exp(-xa[idx]))))
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5)


def test_the_gradient_is_first_order(m):
    """The backward's gradients are constants to Paddle (the module docstring says why): under
    create_graph they come right, and a gradient of them is refused by Paddle, never answered wrong."""
    x, w = tensor(RNG.standard_normal((3, 4))), tensor(RNG.standard_normal((4, 2)))
    t = opc.paddle.op(m.f)(x, w)[0]
    gx, gw = paddle.grad([t.sum()], [x, w], create_graph=True)  # (every input that requires grad: below)
    with pytest.raises((RuntimeError, ValueError, OSError)):
        paddle.grad([gx.sum()], [x, w])
    np.testing.assert_allclose(gx.numpy(), (1 - np.tanh(x.numpy() @ w.numpy()) ** 2) @ w.numpy().T, rtol=1e-12)


def test_run_time_batch():
    """A `?` batch: any size, with autograd, one compile."""
    f = opc.paddle.op(opc.compile(RUN_TIME, grad=True).mlp)
    wa = RNG.standard_normal((8, 4)).astype(np.float32)
    for n in (1, 5, 9):
        xa = RNG.standard_normal((n, 8)).astype(np.float32)
        x, w = tensor(xa), tensor(wa)
        y = f(x, w)
        y.sum().backward()
        np.testing.assert_allclose(y.numpy(), np.tanh(xa @ wa), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(x.grad.numpy(), (1 - np.tanh(xa @ wa) ** 2) @ wa.T, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mask", MASKS)
def test_data_dependent_sizes(mask):
    """compress: its result's rows are the mask's count, found by the call; the gradient scatters back."""
    f = opc.paddle.op(opc.compile(DATA_SIZED, grad=True).compress)
    c = np.array(mask, bool)
    xa = RNG.standard_normal((len(mask), 3))
    x = tensor(xa)
    t, i = f(x, tensor(c, False))
    np.testing.assert_allclose(t.numpy(), np.tanh(xa[c]), rtol=1e-12)
    np.testing.assert_array_equal(i.numpy(), np.flatnonzero(c))
    if c.any():
        t.sum().backward()
        want = np.zeros_like(xa)
        want[c] = 1 - np.tanh(xa[c]) ** 2
        np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-12)


def test_a_function_without_grad_says_how_to_get_it():
    f = opc.paddle.op(opc.compile(RUN_TIME).mlp)
    x = tensor(np.ones((2, 8), np.float32))
    y = f(x, tensor(np.ones((8, 4), np.float32)))
    with pytest.raises((RuntimeError, OSError), match="grad=True"):  # Paddle re-raises it as an OSError
        y.sum().backward()


def test_wrong_arguments_are_the_calls_errors(m):
    with pytest.raises(ValueError, match="argument 'x' must have shape"):
        opc.paddle.op(m.f)(tensor(np.ones((2, 4))), tensor(np.ones((4, 2))))
    with pytest.raises(TypeError, match="takes 2 arguments"):
        opc.paddle.op(m.f)(tensor(np.ones((3, 4))))
    with pytest.raises(TypeError, match="opc.paddle.op takes a function"):
        opc.paddle.op(len)  # type: ignore[arg-type]


def paddle_mlp(x, labels, w):
    """The zoo's MLP classifier in Paddle's dygraph (its ONNX weights: Linear [out, in])."""
    h = F.gelu(x @ w["fc1.weight"].T + w["fc1.bias"])
    logits = h @ w["fc2.weight"].T + w["fc2.bias"]
    return F.cross_entropy(logits, labels), logits


def test_module_trains_an_onnx_model_like_paddle():
    """opc.paddle.Module: the ONNX model's weights as Paddle parameters, trained by paddle's Adam
    for 4 steps, against the same MLP written in Paddle (losses, logits and weights)."""
    pytest.importorskip("onnx", reason="the model comes in as ONNX: the importer needs the onnx package")
    sys.path.insert(0, str(ROOT / "examples"))
    from zoo import common, mlp_classifier

    sizes = mlp_classifier.Sizes(batch=16, features=8, hidden=32, classes=4)
    model = mlp_classifier.build(sizes, np.float64, opset=17, seed=0)
    net = opc.paddle.Module(opc.import_onnx(model))
    onnx_weights = common.weights(model)
    params = dict(net.named_parameters())
    assert list(params) == [k.replace(".", "_") for k in onnx_weights] == net.arguments[2:]
    ref = {k: paddle.create_parameter(list(v.shape), "float64", default_initializer=paddle.nn.initializer.Assign(v))
           for k, v in onnx_weights.items()}
    opts = [paddle.optimizer.Adam(0.05, parameters=net.parameters()),
            paddle.optimizer.Adam(0.05, parameters=list(ref.values()))]
    for step in range(4):
        feeds = mlp_classifier.inputs(sizes, np.float64, seed=step)
        x, labels = tensor(feeds["x"], False), tensor(feeds["labels"], False)
        loss, logits = net(x, labels)
        want, want_logits = paddle_mlp(x, labels, ref)
        np.testing.assert_allclose(float(loss), float(want), rtol=1e-10)
        np.testing.assert_allclose(logits.numpy(), want_logits.numpy(), rtol=1e-10, atol=1e-12)
        loss.backward()
        want.backward()
        for opt in opts:
            opt.step()
            opt.clear_grad()
    for p, r in zip(params.values(), ref.values()):
        np.testing.assert_allclose(p.numpy(), r.numpy(), rtol=1e-9, atol=1e-12)
    assert not np.array_equal(params["fc1_weight"].numpy(), onnx_weights["fc1.weight"])  # it moved
