"""An embedding-bag text classifier, as torch.onnx.export writes

    def forward(self, tokens):                   # tokens [batch, length] int64
        bag = self.embedding(tokens).mean(dim=1)  # Gather, ReduceMean
        return F.log_softmax(self.fc(bag), dim=1)  # Gemm, LogSoftmax

    python examples/zoo/embedding_bag.py bag.onnx [--opset 17] [--dtype float64]
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
    batch: int = 4
    length: int = 7
    vocab: int = 50
    embed: int = 16
    classes: int = 5


def build(sizes: Sizes = Sizes(), dtype=np.float32, opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    s = sizes
    g = common.Graph("main_graph", dtype, opset, seed)
    tokens = g.input("tokens", [s.batch, s.length], np.int64)
    table = g.weight("embedding.weight", [s.vocab, s.embed], scale=1.0)
    emb = g.node("Gather", [table, tokens], "/embedding", axis=0)
    bag = g.reduce_mean(emb, [1], "", keepdims=0)
    logits = g.linear(bag, 2, s.embed, s.classes, "/fc")
    g.node("LogSoftmax", [logits], "", axis=1)
    g.rename_last("log_probs")
    g.output("log_probs", [s.batch, s.classes])
    return g.model()


def inputs(sizes: Sizes = Sizes(), dtype=np.float32, seed: int = 1) -> dict[str, np.ndarray]:
    """Token ids; some repeat within a row, so the table's gradient must sum them."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, sizes.vocab, (sizes.batch, sizes.length)).astype(np.int64)
    tokens[:, -1] = tokens[:, 0]
    return {"tokens": tokens}


def reference(feeds: dict[str, np.ndarray], w: dict[str, np.ndarray]) -> np.ndarray:
    f = {k: np.asarray(v, np.float64) for k, v in w.items()}
    bag = f["embedding.weight"][feeds["tokens"]].mean(axis=1)
    return common.log_softmax(bag @ f["fc.weight"].T + f["fc.bias"], axis=1)


if __name__ == "__main__":
    common.save_from_command_line(build, __doc__)
