"""Building ONNX graphs the way torch.onnx.export writes them, with onnx.helper only.

`Graph` names nodes `/module/Op` and values `/module/Op_output_0` as the
exporter does, keeps weights as float initializers (2-D Linear as Gemm with
`transB=1`, Linear on 3-D input as MatMul by a pre-transposed initializer
`onnx::MatMul_N` plus Add of the bias) and emits the opset-dependent forms:
LayerNormalization from opset 17 (before: ReduceMean/Sub/Pow/Sqrt/Div), Gelu
from opset 20 (before: the erf formula), ReduceMean's axes as an input from
opset 18 (before: an attribute).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper


class Graph:
    def __init__(self, name: str, dtype: np.dtype | type = np.float32, opset: int = 17, seed: int = 0):
        self.name = name
        self.dtype = np.dtype(dtype)
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.counts: dict[str, int] = {}

    # -- values -----------------------------------------------------------------
    def input(self, name: str, shape: Sequence[int], dtype: np.dtype | type | None = None) -> str:
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype or self.dtype))
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
        return name

    def output(self, name: str, shape: Sequence[int], dtype: np.dtype | type | None = None) -> None:
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype or self.dtype))
        self.outputs.append(helper.make_tensor_value_info(name, elem, list(shape)))

    def initializer(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, name: str, shape: Sequence[int], scale: float | None = None) -> str:
        """A float initializer drawn from N(0, scale^2), scale = 1/sqrt(fan_in) by default."""
        if scale is None:
            scale = 1.0 / np.sqrt(shape[-1] if len(shape) > 1 else 1.0)
        return self.initializer(name, (self.rng.standard_normal(shape) * scale).astype(self.dtype))

    def constant(self, value, scope: str, dtype: np.dtype | type | None = None) -> str:
        """A Constant node (floats in the model's dtype unless dtype says otherwise)."""
        array = np.asarray(value, dtype or (self.dtype if np.asarray(value).dtype.kind == "f" else None))
        return self.node("Constant", [], scope, value=numpy_helper.from_array(array))

    def ints(self, values: Sequence[int], scope: str) -> str:
        return self.constant(np.array(values, np.int64), scope)

    def node(self, op: str, inputs: Sequence[str], scope: str, n_outputs: int = 1, **attrs) -> str:
        """`/scope/Op` (`Op_1`, ... when repeated) with outputs `/scope/Op_output_i`; returns the first."""
        key = f"{scope}/{op}"
        n = self.counts.get(key, 0)
        self.counts[key] = n + 1
        name = f"{key}_{n}" if n else key
        outs = [f"{name}_output_{i}" for i in range(n_outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, **attrs))
        return outs[0]

    def rename_last(self, output: str) -> str:
        """Give the last node's first output a graph-output name."""
        self.nodes[-1].output[0] = output
        return output

    # -- layers as the exporter writes them -----------------------------------------
    def linear(self, x: str, rank: int, n_in: int, n_out: int, scope: str) -> str:
        """torch.nn.Linear: Gemm on 2-D input, else MatMul by the transposed weight + Add."""
        name = scope.strip("/").replace("/", ".")
        bias = self.weight(f"{name}.bias", [n_out], scale=0.1)
        if rank == 2:
            w = self.weight(f"{name}.weight", [n_out, n_in])
            return self.node("Gemm", [x, w, bias], scope, alpha=1.0, beta=1.0, transB=1)
        w = self.weight(f"onnx::MatMul_{100 + len(self.initializers)}", [n_in, n_out], scale=1 / np.sqrt(n_in))
        return self.node("Add", [self.node("MatMul", [x, w], scope), bias], scope)

    def gelu(self, x: str, scope: str) -> str:
        """F.gelu (erf form): the Gelu op from opset 20, the formula before."""
        if self.opset >= 20:
            return self.node("Gelu", [x], scope, approximate="none")
        d = self.node("Div", [x, self.constant(np.sqrt(2.0), scope)], scope)
        a = self.node("Add", [self.node("Erf", [d], scope), self.constant(1.0, scope)], scope)
        return self.node("Mul", [self.node("Mul", [x, a], scope), self.constant(0.5, scope)], scope)

    def reduce_mean(self, x: str, axes: Sequence[int], scope: str, keepdims: int = 1) -> str:
        if self.opset >= 18:
            return self.node("ReduceMean", [x, self.ints(axes, scope)], scope, keepdims=keepdims)
        return self.node("ReduceMean", [x], scope, axes=list(axes), keepdims=keepdims)

    def layer_norm(self, x: str, width: int, scope: str, epsilon: float = 1e-5) -> str:
        """nn.LayerNorm over the last dim: LayerNormalization from opset 17, torch's decomposition before."""
        name = scope.strip("/").replace("/", ".")
        w = self.initializer(f"{name}.weight", (1 + 0.1 * self.rng.standard_normal(width)).astype(self.dtype))
        b = self.weight(f"{name}.bias", [width], scale=0.1)
        if self.opset >= 17:
            return self.node("LayerNormalization", [x, w, b], scope, axis=-1, epsilon=epsilon)
        mean = self.reduce_mean(x, [-1], scope)
        centered = self.node("Sub", [x, mean], scope)
        var = self.reduce_mean(self.node("Pow", [centered, self.constant(2.0, scope)], scope), [-1], scope)
        std = self.node("Sqrt", [self.node("Add", [var, self.constant(epsilon, scope)], scope)], scope)
        normed = self.node("Div", [centered, std], scope)
        return self.node("Add", [self.node("Mul", [normed, w], scope), b], scope)

    # -- the model -------------------------------------------------------------------
    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.initializers)
        opsets = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="opc examples/zoo",
                                  ir_version=helper.find_min_ir_version_for(opsets))
        onnx.checker.check_model(model)
        return model


def weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The float initializers by ONNX name, in file order."""
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
            if t.data_type in FLOAT_TYPES}


FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def erf(x: np.ndarray) -> np.ndarray:
    """erf in float64 (math.erf elementwise: NumPy has none)."""
    import math

    return np.vectorize(math.erf, otypes=[np.float64])(x)


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, epsilon: float = 1e-5) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * w + b


def save_from_command_line(build, doc: str) -> None:
    """`python examples/zoo/NAME.py OUT.onnx [--opset N] [--dtype float64]`: save build(...)'s model."""
    import argparse

    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("output")
    p.add_argument("--opset", type=int, default=17)
    p.add_argument("--dtype", default="float32")
    a = p.parse_args()
    onnx.save(build(dtype=np.dtype(a.dtype), opset=a.opset), a.output)
