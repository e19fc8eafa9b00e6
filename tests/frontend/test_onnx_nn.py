"""ONNX import of convolutional-network ops (issue 19): Conv, ConvTranspose,
MaxPool (with Indices), AveragePool, GlobalAveragePool, GlobalMaxPool,
BatchNormalization (inference and training mode), InstanceNormalization and
GroupNormalization (opset 18's per-group and 21's per-channel scale), each over
its attributes (auto_pad, strides, dilations, groups, output_shape, ceil_mode,
count_include_pad), against onnxruntime; a bad attribute is one error line
naming the node. All cases in one compiled module."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_helpers import call, import_all, run_ort, single

import opc
from opc.errors import OpcError

RNG = np.random.default_rng(19)


def arr(*shape, lo=-1.0, hi=1.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(np.float32)


X4 = arr(2, 4, 9, 8)
X3 = arr(1, 3, 11)
CASES: dict[str, tuple] = {}


def case(name: str, op: str, inputs: dict, inits: dict | None = None, outputs: int = 1, opset: int = 17, **attrs):
    CASES[name] = (single(op, inputs, outputs, inits, opset, **attrs), inputs, outputs)


case("conv_bias_pads", "Conv", {"x": X4}, {"w": arr(6, 4, 3, 3), "b": arr(6)}, pads=[1, 0, 1, 2], strides=[2, 1])
case("conv_group", "Conv", {"x": X4}, {"w": arr(6, 2, 3, 2)}, group=2, dilations=[2, 1])
case("conv_depthwise", "Conv", {"x": X4}, {"w": arr(4, 1, 3, 3), "b": arr(4)}, group=4, pads=[1, 1, 1, 1])
case("conv_same_upper", "Conv", {"x": X4}, {"w": arr(5, 4, 3, 2)}, auto_pad="SAME_UPPER", strides=[2, 2])
case("conv_same_lower", "Conv", {"x": X4}, {"w": arr(5, 4, 4, 3)}, auto_pad="SAME_LOWER")
case("conv_valid_1d", "Conv", {"x": X3}, {"w": arr(2, 3, 4)}, auto_pad="VALID", strides=[3], dilations=[2])
case("conv_transpose", "ConvTranspose", {"x": X4}, {"w": arr(4, 3, 3, 3), "b": arr(3)}, strides=[2, 2],
     pads=[1, 0, 1, 1], output_padding=[1, 0])
case("conv_transpose_group", "ConvTranspose", {"x": X4}, {"w": arr(4, 2, 2, 3)}, group=2, dilations=[1, 2])
case("conv_transpose_shape", "ConvTranspose", {"x": X3}, {"w": arr(3, 2, 3)}, strides=[2], output_shape=[22])
case("conv_transpose_same", "ConvTranspose", {"x": X4}, {"w": arr(4, 2, 3, 3)}, strides=[2, 2],
     auto_pad="SAME_UPPER")
# a kernel shorter than the stride: SAME cannot pad to i * s, onnxruntime pads 0 (found by tests/support/fuzz_onnx.py)
case("conv_transpose_same_short", "ConvTranspose", {"x": X4}, {"w": arr(4, 2, 2, 1)}, strides=[1, 2],
     auto_pad="SAME_LOWER")
case("max_pool_indices", "MaxPool", {"x": X4}, outputs=2, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
case("max_pool_ceil_dil", "MaxPool", {"x": X4}, kernel_shape=[2, 3], strides=[2, 2], dilations=[2, 1], ceil_mode=1)
case("max_pool_same_1d", "MaxPool", {"x": X3}, kernel_shape=[4], strides=[2], auto_pad="SAME_UPPER")
case("avg_pool_incl", "AveragePool", {"x": X4}, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
     count_include_pad=1)
case("avg_pool_excl_ceil", "AveragePool", {"x": X4}, kernel_shape=[3, 2], strides=[2, 3], pads=[1, 0, 0, 0],
     ceil_mode=1)
case("avg_pool_same_lower", "AveragePool", {"x": X3}, kernel_shape=[3], strides=[2], auto_pad="SAME_LOWER")
case("global_avg", "GlobalAveragePool", {"x": X4})
case("global_max", "GlobalMaxPool", {"x": X3})
BN = {"s": arr(4), "b": arr(4), "m": arr(4), "v": arr(4, lo=0.5, hi=2.0)}
case("batch_norm", "BatchNormalization", {"x": X4}, BN, epsilon=1e-3, opset=15)
case("batch_norm_training", "BatchNormalization", {"x": X4}, BN, outputs=3, epsilon=1e-3, momentum=0.7,
     training_mode=1, opset=15)
case("instance_norm", "InstanceNormalization", {"x": X4}, {"s": arr(4), "b": arr(4)}, epsilon=1e-4)
case("group_norm_21", "GroupNormalization", {"x": X4}, {"s": arr(4), "b": arr(4)}, num_groups=2, opset=21)
# a function op: shape inference leaves its output untyped (opset 18's per-group form is deprecated by
# the installed onnx's checker, so only opset 21 runs here)
CASES["group_norm_21"][0].graph.output[0].CopyFrom(
    helper.make_tensor_value_info("y0", TensorProto.FLOAT, X4.shape))


@pytest.fixture(scope="module")
def compiled():
    module, params = import_all({k: v[0] for k, v in CASES.items()})
    return opc.compile(module, target="cpu"), params


@pytest.mark.parametrize("name", list(CASES))
def test_against_onnxruntime(compiled, name: str) -> None:
    model, inputs, _ = CASES[name]
    m, params = compiled
    got = call(m, name, inputs, params[name])
    want = run_ort(model, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, w.dtype, g.shape, w.shape)
        if w.dtype == np.int64:
            np.testing.assert_array_equal(g, w, err_msg=name)
        else:
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5, err_msg=name)


@pytest.mark.parametrize("op,attrs,inits,message", [
    ("Conv", {"group": 3}, {"w": arr(3, 1, 3, 3)}, "group 3 does not divide the 4 channels of x"),
    ("Conv", {"strides": [0, 1]}, {"w": arr(3, 4, 3, 3)}, "strides"),  # ONNX's shape inference says it first
    ("Conv", {"pads": [0, 0, -1, 0]}, {"w": arr(3, 4, 3, 3)}, "pads"),
    ("Conv", {}, {"w": arr(3, 4, 10, 3)}, "kernel of extent 10"),
    ("MaxPool", {"kernel_shape": [2, 2], "pads": [2, 0, 0, 0]}, {}, "covers only padding"),
])
def test_bad_attribute_is_one_error_line(op: str, attrs: dict, inits: dict, message: str) -> None:
    # built without shape inference, which would refuse these attributes itself
    node = helper.make_node(op, ["x", *inits], ["y0"], name=f"the_{op}", **attrs)
    graph = helper.make_graph([node], "main_graph", [helper.make_tensor_value_info("x", TensorProto.FLOAT, X4.shape)],
                              [helper.make_tensor_value_info("y0", TensorProto.FLOAT, [None] * 4)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OpcError) as err:
        opc.import_onnx(model)
    msg = str(err.value)
    assert not msg.startswith("error") and "the_" in msg and "\n" not in msg and message in msg, msg
