"""Weights packed once (runtime/opc_frozen.h): opc.load_onnx registers its weights as frozen, and
the channel-vector conv keeps their packed panels between calls. What must hold: models that
share one compiled module but not their weights each get their own weights' results, also after
one is collected and another takes its memory; a function bound without the promise sees weights
changed in place; with it (with_last(frozen=True)) the packed copy is what runs, which is the
promise's point. Convs against a NumPy oracle. One compiled module per geometry."""

from __future__ import annotations

import gc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import opc

# x [1, C, H, W] * w [O, C / g, 3, 3], pads 1: 8x8 rows take the channel-vector kernel's 8-wide tiles
# (2x2: few positions, whose weights are read in place unless frozen, then packed once)
GEOMETRIES = [(16, 32, 8, 1, 1), (16, 32, 8, 2, 1), (32, 48, 8, 1, 2), (24, 64, 4, 1, 1), (24, 64, 2, 1, 1)]


def conv_ref(x: np.ndarray, w: np.ndarray, stride: int, groups: int) -> np.ndarray:
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    outs = [np.einsum("nchwij,ocij->nohw", win[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og].astype(np.float64))
            for g in range(groups)]
    return np.concatenate(outs, axis=1)


def conv_model(c: int, o: int, hw: int, stride: int, groups: int, w: np.ndarray) -> onnx.ModelProto:
    out = (hw + 2 - 3) // stride + 1
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], strides=[stride, stride],
                            pads=[1, 1, 1, 1], group=groups)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, o, out, out])],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def weights(c: int, o: int, groups: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((o, c // groups, 3, 3)).astype(np.float32)


@pytest.mark.parametrize("c,o,hw,stride,groups", GEOMETRIES)
def test_models_sharing_a_module_keep_their_own_weights(c: int, o: int, hw: int, stride: int, groups: int) -> None:
    x = np.random.default_rng(0).standard_normal((1, c, hw, hw)).astype(np.float32)
    ws = [weights(c, o, groups, seed) for seed in (1, 2, 3)]
    first, second = (opc.load_onnx(conv_model(c, o, hw, stride, groups, w)) for w in ws[:2])
    for _ in range(2):  # the second round runs on the packed copies kept by the first
        for run, w in ((first, ws[0]), (second, ws[1])):
            np.testing.assert_allclose(run(x)[0], conv_ref(x, w, stride, groups), rtol=1e-4, atol=1e-4)
    del first
    gc.collect()  # its weights' registration dropped with it: memory that a new model may reuse
    third = opc.load_onnx(conv_model(c, o, hw, stride, groups, ws[2]))
    for run, w in ((third, ws[2]), (second, ws[1]), (third, ws[2])):
        np.testing.assert_allclose(run(x)[0], conv_ref(x, w, stride, groups), rtol=1e-4, atol=1e-4)


CONV_FN = """
func.func @conv(%x: tensor<1x16x8x8xf32>, %w: tensor<32x16x3x3xf32>) -> tensor<1x32x8x8xf32> {
  %y = opc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>,
                        dilations = array<i64: 1, 1>, group = 1 : i64}
       : (tensor<1x16x8x8xf32>, tensor<32x16x3x3xf32>) -> tensor<1x32x8x8xf32>
  return %y : tensor<1x32x8x8xf32>
}
"""


@pytest.mark.parametrize("frozen", [False, True])
def test_weights_changed_in_place_are_seen_unless_frozen(frozen: bool) -> None:
    conv = opc.compile(CONV_FN, target="cpu").conv
    x = np.random.default_rng(0).standard_normal((1, 16, 8, 8)).astype(np.float32)
    w = weights(16, 32, 1, 4)
    before = conv_ref(x, w, 1, 1)
    bound = conv.with_last([w], frozen=frozen)
    np.testing.assert_allclose(bound(x), before, rtol=1e-4, atol=1e-4)
    w *= -2.0  # a change in place: seen by a plain binding; a frozen one promised there would be none
    want = before if frozen else conv_ref(x, w, 1, 1)
    np.testing.assert_allclose(bound(x), want, rtol=1e-4, atol=1e-4)
