"""examples/train_cnn.py: a short run of the same SGD steps, step by step against a NumPy
implementation (float64, forward and hand-written backward of every layer: conv with groups,
training-mode batch norm, relu, max and average pools, global average pool, linear, softmax
cross-entropy; SGD; the running statistics' momentum update) from the same initial weights and
mini-batches; the losses, the final weights and the running statistics must agree, and the loss
must fall."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from onnx_helpers import EXAMPLES

assert EXAMPLES.is_dir()  # onnx_helpers put it on sys.path (and skipped the module without onnx)
import train_cnn  # noqa: E402

STEPS, LR = 30, 0.05
EPS, MOMENTUM = 1e-5, 0.9  # the exported BatchNormalization's attributes


def conv(x, w, b, pad, groups):
    """Stride 1 convolution; returns y and the windows for the backward."""
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = sliding_window_view(xp, (kh, kw), axis=(2, 3))  # n c ho wo kh kw
    win = win.reshape(n, groups, cg, *win.shape[2:])
    y = np.einsum("ngchwij,gocij->ngohw", win, w.reshape(groups, o // groups, cg, kh, kw))
    return y.reshape(n, o, *y.shape[3:]) + b[:, None, None], win


def conv_back(dy, x, w, win, pad, groups):
    n, o, ho, wo = dy.shape
    _, cg, kh, kw = w.shape
    dyg = dy.reshape(n, groups, o // groups, ho, wo)
    dw = np.einsum("ngchwij,ngohw->gocij", win, dyg).reshape(w.shape)
    dwin = np.einsum("ngohw,gocij->ngchwij", dyg, w.reshape(groups, o // groups, cg, kh, kw))
    dwin = dwin.reshape(n, groups * cg, ho, wo, kh, kw)
    dxp = np.zeros((n, x.shape[1], x.shape[2] + 2 * pad, x.shape[3] + 2 * pad))
    for i in range(kh):
        for j in range(kw):
            dxp[:, :, i:i + ho, j:j + wo] += dwin[..., i, j]
    return dxp[:, :, pad:pad + x.shape[2], pad:pad + x.shape[3]], dw, dy.sum((0, 2, 3))


def blocks(x):  # n c h w -> n c h/2 w/2 2 2
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5)


def unblocks(b):
    n, c, h, w = b.shape[:4]
    return b.transpose(0, 1, 2, 4, 3, 5).reshape(n, c, 2 * h, 2 * w)


def step(p, x, labels):
    """One SGD step of the exported network on (x, labels): the loss; p is updated in place."""
    n = len(x)
    # forward
    h1, win1 = conv(x, p["c1.weight"], p["c1.bias"], 1, 1)
    mean, var = h1.mean((0, 2, 3)), h1.var((0, 2, 3))
    rstd = 1 / np.sqrt(var + EPS)
    xhat = (h1 - mean[:, None, None]) * rstd[:, None, None]
    bn = p["b1.weight"][:, None, None] * xhat + p["b1.bias"][:, None, None]
    r1 = np.maximum(bn, 0)
    b1 = blocks(r1)
    m1 = b1.max((4, 5))
    h2, win2 = conv(m1, p["c2.weight"], p["c2.bias"], 1, 8)
    h3, win3 = conv(h2, p["c3.weight"], p["c3.bias"], 0, 1)
    r3 = np.maximum(h3, 0)
    a = blocks(r3).mean((4, 5))
    g = a.mean((2, 3))
    logits = g @ p["fc.weight"].T + p["fc.bias"]
    z = np.exp(logits - logits.max(1, keepdims=True))
    prob = z / z.sum(1, keepdims=True)
    loss = -np.log(prob[np.arange(n), labels]).mean()
    # backward
    grads = {}
    dlogits = (prob - np.eye(prob.shape[1])[labels]) / n
    grads["fc.weight"], grads["fc.bias"] = dlogits.T @ g, dlogits.sum(0)
    dg = dlogits @ p["fc.weight"]
    da = np.broadcast_to(dg[:, :, None, None] / (a.shape[2] * a.shape[3]), a.shape)
    dr3 = unblocks(np.broadcast_to(da[..., None, None] / 4, (*a.shape, 2, 2)))
    dh3 = dr3 * (h3 > 0)
    dh2, grads["c3.weight"], grads["c3.bias"] = conv_back(dh3, h2, p["c3.weight"], win3, 0, 1)
    dm1, grads["c2.weight"], grads["c2.bias"] = conv_back(dh2, m1, p["c2.weight"], win2, 1, 8)
    dr1 = unblocks((b1 == m1[..., None, None]) * dm1[..., None, None])
    dbn = dr1 * (bn > 0)
    grads["b1.weight"], grads["b1.bias"] = (dbn * xhat).sum((0, 2, 3)), dbn.sum((0, 2, 3))
    dxhat = dbn * p["b1.weight"][:, None, None]
    m = h1.size / h1.shape[1]
    dh1 = rstd[:, None, None] / m * (m * dxhat - dxhat.sum((0, 2, 3))[:, None, None]
                                     - xhat * (dxhat * xhat).sum((0, 2, 3))[:, None, None])
    _, grads["c1.weight"], grads["c1.bias"] = conv_back(dh1, x, p["c1.weight"], win1, 1, 1)
    for k, d in grads.items():
        p[k] = p[k] - LR * d
    p["b1.running_mean"] = MOMENTUM * p["b1.running_mean"] + (1 - MOMENTUM) * mean
    p["b1.running_var"] = MOMENTUM * p["b1.running_var"] + (1 - MOMENTUM) * var
    return float(loss)


def test_training_matches_numpy_and_the_loss_falls(capsys) -> None:
    losses, weights = train_cnn.train(steps=STEPS, lr=LR, log_every=10)
    printed = capsys.readouterr().out
    assert "step    0  loss" in printed and f"step {STEPS - 1:4d}  loss" in printed
    p = {k: v.astype(np.float64) for k, v in train_cnn.initial_weights().items()}
    x_all, labels_all = train_cnn.make_data()
    want = [step(p, x_all[idx].astype(np.float64), labels_all[idx])
            for idx in train_cnn.batches(len(x_all), train_cnn.BATCH, STEPS)]
    np.testing.assert_allclose(losses, want, rtol=1e-4, atol=1e-5)
    assert set(weights) == set(p)
    for k in p:
        np.testing.assert_allclose(weights[k], p[k], rtol=1e-3, atol=1e-4 * np.abs(p[k]).max(), err_msg=k)
    assert not np.allclose(weights["b1.running_var"], train_cnn.initial_weights()["b1.running_var"])
    assert np.mean(losses[-5:]) < 0.9 * np.mean(losses[:5])
