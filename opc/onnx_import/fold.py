"""BatchNormalization folded into the Conv before it, as onnxruntime does when it loads a model and
torch.onnx.export does in eval mode: w' = w * a, b' = (b - mean) * a + beta per output channel,
a = gamma / sqrt(var + eps) (a and b' in float64, then rounded to the weights' type; w * a in it).

opc.load_onnx (inference) runs models this way: a BatchNorm kept after each conv cost MobileNetV2's
forward at 224x224 a pass of sub, mul and add over every conv output, 0.6 ms of 5.1. opc.import_onnx
(training) keeps them: there gamma and beta are weights to train.

A folded weight is an initializer whose name is its recipe (FOLDED, the kind, epsilon, then the
initializers it comes from): a cached compile's weights (onnx_load.OnnxModel.initializers) are read
from the file by name and the folded ones computed again from theirs, without parsing the model.

Only a BatchNormalization (inference, one output) whose input is a Conv's output read by nothing else,
with every parameter a float initializer that is no graph input (a graph input may be fed), is
folded; the rest stay. NumPy and onnx's numpy_helper only."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

FOLDED = "opc.folded:"  # prefix of a folded initializer's name: FOLDED kind:epsilon:name|name|...
FLOAT_TYPES = (1, 10, 11, 16)  # float, float16, double, bfloat16


def recipe(kind: str, eps: float, names: Sequence[str]) -> str:
    """The name of a folded weight: kind "w" (a conv's weight: w, gamma, var) or "b" (its bias: b or "",
    gamma, beta, mean, var)."""
    return f"{FOLDED}{kind}:{eps!r}:" + "|".join(names)


def is_folded(name: str) -> bool:
    return name.startswith(FOLDED)


def sources(name: str) -> list[str]:
    """The initializers a folded weight is computed from ("" for a conv without bias left out)."""
    return [n for n in name[len(FOLDED):].split(":", 2)[2].split("|") if n]


def compute(name: str, read: Callable[[list[str]], list[np.ndarray]], in_place: bool = False) -> np.ndarray:
    """The folded weight `name` from its sources, read(names) giving their arrays; in_place: a conv's
    weight (f32 or f64) is scaled where it lies, its array nothing else reads (a cached load: a new
    47 MB for ResNet-18's weights, then its copy to a 64-byte boundary, took 20 ms)."""
    kind, eps_text, joined = name[len(FOLDED):].split(":", 2)
    eps = float(eps_text)
    names = joined.split("|")
    given = dict(zip([n for n in names if n], read([n for n in names if n])))
    if kind == "w":  # a per channel in float64; the product in the weight's float (f32 for 16-bit ones):
        w, gamma, var = (given[n] for n in names)  # ResNet-18's 11.7M in float64 took 30 ms of a cached load
        a = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
        ct = np.float64 if w.dtype == np.float64 else np.float32
        a = a.astype(ct).reshape(-1, *[1] * (w.ndim - 1))
        if in_place and w.dtype == ct and w.flags.writeable:
            w *= a
            return w
        return (w.astype(ct, copy=False) * a).astype(w.dtype, copy=False)
    b_name = names[0]
    gamma, beta, mean, var = (given[n].astype(np.float64) for n in names[1:])
    a = gamma / np.sqrt(var + eps)
    b = given[b_name].astype(np.float64) if b_name else np.zeros_like(a)
    return ((b - mean) * a + beta).astype(given[names[1]].dtype)


def fold_batch_norms(model: Any) -> Any:
    """`model` itself where nothing folds, else a copy with each foldable BatchNormalization folded into
    its Conv (the Conv's weight and bias then folded initializers, the BatchNorm gone)."""
    from onnx import numpy_helper

    graph = model.graph
    fed = {vi.name for vi in graph.input}
    floats = {t.name: t for t in graph.initializer  # external data: read where it lies, not here
              if t.data_type in FLOAT_TYPES and t.name not in fed and t.data_location != 1}
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    for out in graph.output:
        readers[out.name] = readers.get(out.name, 0) + 1
    producer = {out: node for node in graph.node for out in node.output}
    pairs = []
    for bn in graph.node:
        conv = producer.get(bn.input[0]) if bn.op_type == "BatchNormalization" and bn.input else None
        if (conv is None or conv.op_type != "Conv" or readers[bn.input[0]] != 1 or len(bn.output) != 1
                or any(a.name == "training_mode" and a.i for a in bn.attribute) or len(bn.input) != 5
                or not all(name in floats for name in [*bn.input[1:5], *conv.input[1:]])):
            continue
        pairs.append((conv, bn))
    if not pairs:
        return model
    folded = type(model)()
    folded.CopyFrom(model)
    graph = folded.graph
    by_output = {node.output[0]: node for node in graph.node if node.output}
    arrays: dict[str, np.ndarray] = {}

    def read(names: list[str]) -> list[np.ndarray]:
        for n in names:
            if n not in arrays:
                arrays[n] = numpy_helper.to_array(floats[n])
        return [arrays[n] for n in names]

    gone = set()
    for conv_src, bn_src in pairs:
        conv, bn = by_output[conv_src.output[0]], by_output[bn_src.output[0]]
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        gamma, beta, mean, var = bn.input[1:5]
        w = recipe("w", eps, [conv.input[1], gamma, var])
        b = recipe("b", eps, [conv.input[2] if len(conv.input) > 2 else "", gamma, beta, mean, var])
        graph.initializer.extend([numpy_helper.from_array(compute(w, read), w),
                                  numpy_helper.from_array(compute(b, read), b)])
        x = conv.input[0]
        del conv.input[:]
        conv.input.extend([x, w, b])
        conv.output[0] = bn.output[0]
        gone.add(bn.output[0])
    kept_nodes = [n for n in graph.node if not (n.op_type == "BatchNormalization" and n.output[0] in gone)]
    del graph.node[:]
    graph.node.extend(kept_nodes)
    read_now = {name for node in graph.node for name in node.input} | fed
    kept = [t for t in graph.initializer if t.name in read_now]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return folded
