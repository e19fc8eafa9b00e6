"""An MLP classifier with its loss, as torch.onnx.export writes

    class MLP(nn.Module):
        def forward(self, x, labels):
            logits = self.fc2(F.gelu(self.fc1(x)))
            return F.cross_entropy(logits, labels), logits

inputs x [batch, features] and labels [batch] (int64); outputs loss (a scalar,
the mean over the batch) and logits [batch, classes]. The exporter writes
cross_entropy as SoftmaxCrossEntropyLoss with ignore_index -100.

    python examples/zoo/mlp_classifier.py mlp.onnx [--opset 17] [--dtype float64]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

try:
    from . import common
except ImportError:  # run as a script
    import common  # type: ignore[no-redef]


@dataclass(frozen=True)
class Sizes:
    batch: int = 16
    features: int = 8
    hidden: int = 32
    classes: int = 4


def build(sizes: Sizes = Sizes(), dtype=np.float32, opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    g = common.Graph("main_graph", dtype, opset, seed)
    x = g.input("x", [sizes.batch, sizes.features])
    labels = g.input("labels", [sizes.batch], np.int64)
    h = g.linear(x, 2, sizes.features, sizes.hidden, "/fc1")
    a = g.gelu(h, "/act")
    g.linear(a, 2, sizes.hidden, sizes.classes, "/fc2")
    logits = g.rename_last("logits")
    g.node("SoftmaxCrossEntropyLoss", [logits, labels], "", reduction="mean", ignore_index=-100)
    g.rename_last("loss")
    g.output("loss", [])
    g.output("logits", [sizes.batch, sizes.classes])
    return g.model()


def inputs(sizes: Sizes = Sizes(), dtype=np.float32, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((sizes.batch, sizes.features)).astype(dtype),
            "labels": rng.integers(0, sizes.classes, sizes.batch).astype(np.int64)}


def reference(feeds: dict[str, np.ndarray], w: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(loss, logits) in float64."""
    f = {k: np.asarray(v, np.float64) for k, v in w.items()}
    x = feeds["x"].astype(np.float64)
    h = common.gelu(x @ f["fc1.weight"].T + f["fc1.bias"])
    logits = h @ f["fc2.weight"].T + f["fc2.bias"]
    logp = common.log_softmax(logits, axis=1)
    loss = -logp[np.arange(len(x)), feeds["labels"]].mean()
    return np.array(loss), logits


if __name__ == "__main__":
    common.save_from_command_line(build, __doc__)
