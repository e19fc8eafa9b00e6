"""examples/train_mlp.py: a short run of the same SGD steps, step by step against
a NumPy implementation (forward and hand-written backward, float64) from the
same initial weights and mini-batches; the loss must fall."""

from __future__ import annotations

import math

import numpy as np
from onnx_helpers import EXAMPLES

assert EXAMPLES.is_dir()  # onnx_helpers put it on sys.path (and skipped the module without onnx)
import train_mlp  # noqa: E402
from zoo import common, mlp_classifier  # noqa: E402

STEPS = 60


def numpy_training(steps: int, lr: float) -> list[float]:
    w = {k: v.astype(np.float64) for k, v in
         common.weights(mlp_classifier.build(train_mlp.SIZES, np.float32, opset=17, seed=0)).items()}
    x_all, labels_all = train_mlp.make_data()
    erf = np.vectorize(math.erf)
    losses = []
    for idx in train_mlp.batches(len(x_all), train_mlp.SIZES.batch, steps):
        x, labels = x_all[idx].astype(np.float64), labels_all[idx]
        n = len(x)
        h = x @ w["fc1.weight"].T + w["fc1.bias"]
        cdf = 0.5 * (1 + erf(h / np.sqrt(2)))
        g = h * cdf
        logits = g @ w["fc2.weight"].T + w["fc2.bias"]
        z = logits - logits.max(1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
        losses.append(float(-np.log(p[np.arange(n), labels]).mean()))
        dlogits = (p - np.eye(p.shape[1])[labels]) / n
        dg = dlogits @ w["fc2.weight"]
        dh = dg * (cdf + h * np.exp(-h * h / 2) / np.sqrt(2 * np.pi))
        grads = {"fc1.weight": dh.T @ x, "fc1.bias": dh.sum(0), "fc2.weight": dlogits.T @ g,
                 "fc2.bias": dlogits.sum(0)}
        for k in w:
            w[k] -= lr * grads[k]
    return losses


def test_training_matches_numpy_and_the_loss_falls(capsys):
    losses, _ = train_mlp.train(steps=STEPS, lr=0.1, log_every=20)
    printed = capsys.readouterr().out
    assert "step    0  loss" in printed and f"step {STEPS - 1:4d}  loss" in printed
    want = numpy_training(STEPS, lr=0.1)
    np.testing.assert_allclose(losses, want, rtol=2e-4, atol=2e-5)
    assert np.mean(losses[-10:]) < 0.7 * np.mean(losses[:10])
