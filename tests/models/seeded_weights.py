"""Weights from a fixed recipe instead of committed data: `values(name, shape)` gives the same
float32 array on every machine (NumPy's PCG64 seeded by the CRC-32 of the name), scaled as torch
initialises (weights of fan-in f uniform in +-sqrt(3/f), normalisation scales near 1, biases and
running means near 0, running variances near 1), so activations stay O(1). Torch's names and
Paddle's structured ones (`bn1._mean`, `bn1._variance`) both: tests/models/paddle/export_paddle.py
names its ResNet-18's and MobileNetV2's initializers so. Paddle's Linear weight is [in, out], so
its fan-in here is its out size (the recipe reads only the name and the shape).

tests/models/export_vision_rnn.py sets a torch model's parameters and buffers with it before
exporting, then strips the data of those initializers from the .onnx; `fill_initializers` puts
it back (every float initializer without data), so the tests and the benchmarks need neither
torch nor the 47 MB of ResNet-18's weights:

    model = fill_initializers(onnx.load("tests/models/resnet18.onnx"))

NumPy only (no onnx import here): a model proto goes in and comes out filled."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

FLOAT = 1  # onnx.TensorProto.FLOAT


def values(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """The recipe: the tensor called `name` (a torch or Paddle parameter or buffer name) of `shape`, float32."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    u = rng.uniform(-1.0, 1.0, size=shape)
    leaf = name.rsplit(".", 1)[-1]
    if leaf in ("running_var", "_variance"):
        return (1.0 + 0.25 * u).astype(np.float32)
    if leaf in ("running_mean", "_mean") or "bias" in leaf:
        return (0.1 * u).astype(np.float32)
    if len(shape) >= 2:  # conv, linear and recurrent weights: fan-in = all but the first dim
        return (u * np.sqrt(3.0 / int(np.prod(shape[1:])))).astype(np.float32)
    return (1.0 + 0.25 * u).astype(np.float32)  # batch/instance/group norm scales


def stored(model: Any) -> list:
    """The tensors the graph stores: its initializers and its Constant nodes' values (paddle2onnx
    writes the weights as Constants at opset 7, IR version 3), each named as its parameter."""
    constants = [a.t for n in model.graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"]
    return [*model.graph.initializer, *constants]


def strip_initializers(model: Any, names: set[str]) -> Any:
    """Drop the data of the float stored tensors in `names` (in place): name, dims and type stay."""
    for t in stored(model):
        if t.name in names and t.data_type == FLOAT:
            t.ClearField("raw_data")
            t.ClearField("float_data")
    return model


def empty(t: Any) -> bool:
    n = int(np.prod(tuple(t.dims)))
    return n > 0 and not t.raw_data and not t.float_data and not t.external_data


def fill_initializers(model: Any) -> Any:
    """Every float stored tensor of `model` without data gets `values(name, dims)` (in place); returns it."""
    for t in stored(model):
        if t.data_type == FLOAT and empty(t):
            t.raw_data = values(t.name, tuple(t.dims)).astype("<f4").tobytes()
    return model
