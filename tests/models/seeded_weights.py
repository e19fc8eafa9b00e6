"""Weights from a fixed recipe instead of committed data: `values(name, shape)` gives the same
float32 array on every machine (NumPy's PCG64 seeded by the CRC-32 of the name), scaled as torch
initialises (weights of fan-in f uniform in +-sqrt(3/f), normalisation scales near 1, biases and
running means near 0, running variances near 1), so activations stay O(1).

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
    """The recipe: the tensor called `name` (a torch parameter or buffer name) of `shape`, float32."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    u = rng.uniform(-1.0, 1.0, size=shape)
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "running_var":
        return (1.0 + 0.25 * u).astype(np.float32)
    if leaf == "running_mean" or "bias" in leaf:
        return (0.1 * u).astype(np.float32)
    if len(shape) >= 2:  # conv, linear and recurrent weights: fan-in = all but the first dim
        return (u * np.sqrt(3.0 / int(np.prod(shape[1:])))).astype(np.float32)
    return (1.0 + 0.25 * u).astype(np.float32)  # batch/instance/group norm scales


def strip_initializers(model: Any, names: set[str]) -> Any:
    """Drop the data of the float initializers in `names` (in place): name, dims and type stay."""
    for t in model.graph.initializer:
        if t.name in names and t.data_type == FLOAT:
            t.ClearField("raw_data")
            t.ClearField("float_data")
    return model


def empty(t: Any) -> bool:
    n = int(np.prod(tuple(t.dims)))
    return n > 0 and not t.raw_data and not t.float_data and not t.external_data


def fill_initializers(model: Any) -> Any:
    """Every float initializer of `model` without data gets `values(name, dims)` (in place); returns it."""
    for t in model.graph.initializer:
        if t.data_type == FLOAT and empty(t):
            t.raw_data = values(t.name, tuple(t.dims)).astype("<f4").tobytes()
    return model
