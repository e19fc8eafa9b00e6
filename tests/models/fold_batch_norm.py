"""BatchNormalization folded into the Conv before it, as torch.onnx.export does in eval mode (its
default): w' = w * a, b' = (b - mean) * a + beta per output channel, a = gamma / sqrt(var + eps),
in float64 then rounded to float32. What a user's export of ResNet-18 or MobileNetV2 looks like
(Conv with a bias, then Relu, Clip or a residual Add); tests/models' exports keep their
BatchNorms (do_constant_folding=False), so the tests and the benchmark fold them here:

    model = fold_batch_norms(fill_initializers(onnx.load("tests/models/mobilenet_v2.onnx")))

Only a BatchNormalization (inference) whose input is a Conv's output read by nothing else, with
every parameter an initializer, is folded; the rest stay. NumPy and onnx's numpy_helper only."""

from __future__ import annotations

from typing import Any

import numpy as np


def fold_batch_norms(model: Any) -> Any:
    """A copy of `model` with each foldable BatchNormalization folded into its Conv."""
    from onnx import numpy_helper

    folded = type(model)()
    folded.CopyFrom(model)
    graph = folded.graph
    weights = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    producer = {out: node for node in graph.node for out in node.output}
    gone = []
    for bn in graph.node:
        if bn.op_type != "BatchNormalization":
            continue
        conv = producer.get(bn.input[0])
        if (conv is None or conv.op_type != "Conv"
                or readers[bn.input[0]] != 1 or len(bn.output) != 1
                or not all(name in weights for name in [*bn.input[1:5], *conv.input[1:]])):
            continue
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        gamma, beta, mean, var = (weights[name].astype(np.float64) for name in bn.input[1:5])
        scale = gamma / np.sqrt(var + eps)
        w = weights[conv.input[1]].astype(np.float64)
        b = weights[conv.input[2]].astype(np.float64) if len(conv.input) > 2 else np.zeros(w.shape[0])
        names = (f"{conv.input[1]}_folded", f"{bn.output[0]}_bias_folded")
        graph.initializer.extend([
            numpy_helper.from_array((w * scale.reshape(-1, *[1] * (w.ndim - 1))).astype(np.float32), names[0]),
            numpy_helper.from_array(((b - mean) * scale + beta).astype(np.float32), names[1])])
        x = conv.input[0]
        del conv.input[:]
        conv.input.extend([x, *names])
        conv.output[0] = bn.output[0]
        gone.append(bn)
    for bn in gone:
        graph.node.remove(bn)
    read = {name for node in graph.node for name in node.input}
    kept = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return folded
