"""Train the zoo's MLP classifier (examples/zoo/mlp_classifier.py) end to end with opc.

The model comes in as ONNX (Gemm, GELU, Gemm, SoftmaxCrossEntropyLoss),
is imported and compiled with grad=True; each SGD step is one call of
`main_graph_value_and_grad`, which returns the loss, the logits and the
gradients w.r.t. x and every weight in one pass:

    python examples/train_mlp.py [--steps 300] [--lr 0.1]

The data: four Gaussian blobs in 8 dimensions, mini-batches of 16 drawn in
a fixed (seeded) order, so a run is reproducible step by step.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the zoo package
from zoo import mlp_classifier  # noqa: E402

import opc  # noqa: E402

SIZES = mlp_classifier.Sizes(batch=16, features=8, hidden=32, classes=4)


def make_data(n: int = 512, sizes: mlp_classifier.Sizes = SIZES, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 1.0, (sizes.classes, sizes.features))
    labels = rng.integers(0, sizes.classes, n)
    x = centers[labels] + rng.normal(0.0, 1.0, (n, sizes.features))
    return x.astype(np.float32), labels.astype(np.int64)


def batches(n: int, batch: int, steps: int, seed: int = 1):
    """Indices of each step's mini-batch: epochs of seeded permutations."""
    rng = np.random.default_rng(seed)
    order: list[int] = []
    for _ in range(steps):
        if len(order) < batch:
            order += rng.permutation(n).tolist()
        yield np.array(order[:batch])
        del order[:batch]


def train(steps: int = 300, lr: float = 0.1, log_every: int = 25, quiet: bool = False) -> tuple[list[float], dict]:
    """SGD on the MLP; returns the loss of every step and the final weights."""
    module, params = opc.import_onnx(mlp_classifier.build(SIZES, np.float32, opset=17, seed=0))
    m = opc.compile(module, grad=True)
    x, labels = make_data()
    losses = []
    zero_logits = np.zeros((SIZES.batch, SIZES.classes), np.float32)
    for step, idx in enumerate(batches(len(x), SIZES.batch, steps)):
        loss, _logits, _dx, *grads = m.main_graph_value_and_grad(
            x[idx], labels[idx], *params.values(), np.float32(1.0), zero_logits)
        for (name, w), g in zip(list(params.items()), grads):
            params[name] = w - np.float32(lr) * g
        losses.append(float(loss))
        if not quiet and (step % log_every == 0 or step == steps - 1):
            recent = losses[-log_every:]
            print(f"step {step:4d}  loss {float(loss):.4f}  (mean of the last {len(recent)} steps "
                  f"{np.mean(recent):.4f})")
    return losses, params


def accuracy(params: dict) -> float:
    x, labels = make_data()
    h = x @ params["fc1_weight"].T + params["fc1_bias"]
    from math import erf

    h = 0.5 * h * (1 + np.vectorize(erf)(h / np.sqrt(2)))
    return float(((h @ params["fc2_weight"].T + params["fc2_bias"]).argmax(1) == labels).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    losses, params = train(args.steps, args.lr)
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    print(f"mean loss of the first 10 steps {first:.4f}, of the last 10 {last:.4f}; "
          f"training accuracy {accuracy(params):.1%}")


if __name__ == "__main__":
    main()
