"""Train the small CNN of examples/cnn (exported by PyTorch with batch norm in training mode) end
to end with opc, batch norm using batch statistics and its running statistics updated each step.

The exported graph (conv + BatchNormalization + relu, max pool, depthwise and pointwise conv,
avg pool, global average pool, linear 16 -> 10) gets, here with onnx.helper, a labels input, a
SoftmaxCrossEntropyLoss on its logits (the mean over the batch) and the batch norm's updated
running mean and variance as outputs; its batch dimension is set to BATCH (the graph is
batch-generic). It is imported and compiled with grad=True; each SGD step is one call of
`main_graph_value_and_grad`, which returns the loss, the new running statistics and the gradients
w.r.t. x and every weight in one pass. The running statistics follow ONNX's convention
(momentum 0.9 on the old value, the biased batch variance), not torch's unbiased one.

    python examples/train_cnn.py [--steps 300] [--lr 0.05]

The data: synthetic 3x16x16 images of CLASSES classes, each a fixed random colour and texture plus noise,
mini-batches drawn in a fixed (seeded) order, so a run is reproducible step by step.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import opc

MODEL = Path(__file__).resolve().parent / "cnn" / "small_cnn.onnx"
BATCH, CLASSES, IMAGE = 16, 4, (3, 16, 16)


def training_model(batch: int = BATCH) -> onnx.ModelProto:
    """The exported CNN for a batch of `batch`: outputs loss, then each batch norm's running mean and var."""
    model = onnx.load(str(MODEL))
    g = model.graph
    g.input[0].type.tensor_type.shape.dim[0].dim_value = batch
    del g.value_info[:]  # the shapes of the exported batch; onnx shape inference redoes them
    logits = g.output[0].name
    del g.output[:]
    g.input.append(helper.make_tensor_value_info("labels", TensorProto.INT64, [batch]))
    g.node.append(helper.make_node("SoftmaxCrossEntropyLoss", [logits, "labels"], ["loss"], reduction="mean"))
    g.output.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    for node in g.node:
        if node.op_type == "BatchNormalization":
            c = [list(t.dims) for t in g.initializer if t.name == node.input[3]][0]
            g.output.extend(helper.make_tensor_value_info(name, TensorProto.FLOAT, c) for name in node.output[1:3])
    return model


def initial_weights() -> dict[str, np.ndarray]:
    """The exported initializers (torch's initialisation, seed 0) by ONNX name."""
    return {t.name: numpy_helper.to_array(t).copy() for t in onnx.load(str(MODEL)).graph.initializer}


def running_stats() -> list[str]:
    """The initializers that hold batch norm running statistics: set from the outputs, not by SGD."""
    return [name for node in onnx.load(str(MODEL)).graph.node if node.op_type == "BatchNormalization"
            for name in node.input[3:5]]


def make_data(n: int = 512, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    # a colour (one value per channel) and a texture per class: the colour survives the global pool
    patterns = rng.normal(0.0, 1.0, (CLASSES, IMAGE[0], 1, 1)) + rng.normal(0.0, 1.0, (CLASSES, *IMAGE))
    labels = rng.integers(0, CLASSES, n)
    x = patterns[labels] + rng.normal(0.0, 1.0, (n, *IMAGE))
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


def train(steps: int = 300, lr: float = 0.05, log_every: int = 25,
          quiet: bool = False) -> tuple[list[float], dict[str, np.ndarray]]:
    """SGD on the CNN; returns the loss of every step and the final weights and running statistics."""
    module, args = opc.import_onnx(training_model())
    m = opc.compile(module, grad=True)
    weights = initial_weights()
    names = list(args)  # the function's weight arguments, in order (initializer names with . -> _)
    onnx_name = {n.replace(".", "_"): n for n in weights}
    stats = running_stats()
    x_all, labels_all = make_data()
    losses: list[float] = []
    for step, idx in enumerate(batches(len(x_all), BATCH, steps)):
        values = [weights[onnx_name[n]] for n in names]
        zeros = [np.zeros_like(weights[s]) for s in stats]
        loss, *rest = m.main_graph_value_and_grad(x_all[idx], labels_all[idx], *values, np.float32(1.0), *zeros)
        new_stats, grads = rest[:len(stats)], rest[len(stats) + 1:]  # + 1: the gradient w.r.t. x
        for n, g in zip(names, grads):
            if onnx_name[n] not in stats:
                weights[onnx_name[n]] = weights[onnx_name[n]] - np.float32(lr) * g
        weights.update(zip(stats, new_stats))
        losses.append(float(loss))
        if not quiet and (step % log_every == 0 or step == steps - 1):
            recent = losses[-log_every:]
            print(f"step {step:4d}  loss {float(loss):.4f}  (mean of the last {len(recent)} steps "
                  f"{np.mean(recent):.4f})")
    return losses, weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    losses, weights = train(args.steps, args.lr)
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    stats = running_stats()
    print(f"mean loss of the first 10 steps {first:.4f}, of the last 10 {last:.4f}; running mean of "
          f"{stats[0]} now {np.round(weights[stats[0]][:4], 3)}...")


if __name__ == "__main__":
    main()
