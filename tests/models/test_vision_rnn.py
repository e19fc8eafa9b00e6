"""The models of tests/models/export_vision_rnn.py (torchvision's ResNet-18 and MobileNetV2, a
small CNN with training-mode batch norm, LSTM and GRU classifiers, all exported by PyTorch):
each is refilled with its seeded weights, imported, compiled with grad=True (one module per model,
compiled once), its forward checked against onnxruntime on the same refilled model and against
torch's recorded output, and its gradients of sum(y * dy) w.r.t. the input and the recorded
weights against torch's autograd. Neither torch nor the network is needed."""

from __future__ import annotations

import collections
import functools
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx_helpers import onnx, run_ort

import opc

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from seeded_weights import fill_initializers  # noqa: E402

# model -> the opc ops its import must contain, the forward's and the gradients' tolerances (float32
# through up to 20 layers; torch and opc sum in different orders)
MODELS = {
    "resnet18": ({"opc.conv", "opc.batch_norm", "opc.max_pool"}, 1e-4, 1e-3),
    "mobilenet_v2": ({"opc.conv", "opc.batch_norm"}, 1e-4, 1e-3),
    "small_cnn": ({"opc.conv", "opc.batch_norm", "opc.max_pool", "opc.avg_pool"}, 1e-5, 1e-4),
    "lstm": ({"opc.matmul", "opc.sigmoid", "opc.tanh"}, 1e-5, 1e-4),
    "gru": ({"opc.matmul", "opc.sigmoid", "opc.tanh"}, 1e-5, 1e-4),
}


@functools.cache
def compiled(name: str):
    """(the refilled ModelProto, the compiled module, its weights by argument name, the torch record)."""
    model = fill_initializers(onnx.load(str(HERE / f"{name}.onnx")))
    module, params = opc.import_onnx(model)
    ops = {op.name for op in module.walk()}
    assert MODELS[name][0] <= ops, sorted(ops)
    return model, opc.compile(module, grad=True), params, dict(np.load(HERE / f"{name}_ref.npz"))


@pytest.mark.parametrize("name", list(MODELS))
def test_forward(name: str) -> None:
    model, m, params, ref = compiled(name)
    y = m.main_graph(ref["in_x"], *params.values())  # one output: the array itself
    (want,) = run_ort(model, {"x": ref["in_x"]})
    tol = MODELS[name][1] * max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(y, want, rtol=MODELS[name][1], atol=tol)
    np.testing.assert_allclose(y, ref["y"], rtol=MODELS[name][1], atol=tol)


@pytest.mark.parametrize("name", list(MODELS))
def test_gradients(name: str) -> None:
    _, m, params, ref = compiled(name)
    grads = dict(zip(["x", *params], m.main_graph_grad(ref["in_x"], *params.values(), ref["dy"])))
    recorded = [k.removeprefix("grad_") for k in ref if k.startswith("grad_")]
    assert len(recorded) >= 4 and set(recorded) <= set(grads), (sorted(recorded), sorted(grads))
    # the absolute tolerance scales with the largest recorded gradient: one that is zero in exact
    # arithmetic (a conv bias before training-mode batch norm) is rounding noise in both
    scale = max(float(np.abs(ref[f"grad_{arg}"]).max()) for arg in recorded)
    for arg in recorded:
        want = ref[f"grad_{arg}"]
        got = grads[arg][: want.shape[0]]  # a big gradient was recorded by its first rows
        tol = MODELS[name][2] * scale
        np.testing.assert_allclose(got, want, rtol=MODELS[name][2], atol=tol, err_msg=arg)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_forward_with_batch_norm_folded(name: str) -> None:
    """The export torch makes in eval mode (tests/models/fold_batch_norm.py: each BatchNorm folded into
    its Conv's weights and bias): the same output, and the Clip / residual Add + Relu after each conv
    running as the fused conv's epilogue (no pass of their own)."""
    from fold_batch_norm import fold_batch_norms

    model, _, _, ref = compiled(name)
    folded = fold_batch_norms(model)
    assert not any(n.op_type == "BatchNormalization" for n in folded.graph.node)
    module, params = opc.import_onnx(folded)
    m = opc.compile(module)
    y = m.main_graph(ref["in_x"], *params.values())
    tol = MODELS[name][1] * max(1.0, float(np.abs(ref["y"]).max()))
    np.testing.assert_allclose(y, ref["y"], rtol=MODELS[name][1], atol=tol)
    # every residual Add (ResNet-18's 8, MobileNetV2's 10) as the epilogue but ResNet's last, which joins
    # the global pooling's reduction instead; every Clip to [0, 6] (MobileNetV2's 35) as the fused conv's
    # own relu6 (activation code 4, the last argument but a layout's)
    calls = re.findall(r"opc_nn_fused_conv_epilogue_(layout_)?(ep_)?f32\((.*)\);", m.c_source)
    tails = sum(bool(ep) for _, ep, _ in calls)
    relu6 = sum(bool(re.search(r", 4(, [123])?$", args)) for _, _, args in calls)
    assert (tails, relu6) == {"resnet18": (8 - 1, 0), "mobilenet_v2": (10, 35)}[name], (tails, relu6)
    # opc-channels-last: MobileNetV2's depthwise convs on narrow or strided rows with the pointwise
    # convs around them, as whole chains (layout 2: out channels-last, 3: both, 1: x): 15 of its 16
    # expand -> depthwise -> project blocks at 64x64, all but the one on rows of 16 at stride 1
    layouts = collections.Counter(re.search(r", (\d+)(, \w+, opc_ep_ctx)?$", args).group(1)
                                  for layout, _, args in calls if layout)
    chains = {"resnet18": 0, "mobilenet_v2": 15}[name]
    assert layouts == ({"2": chains, "3": chains, "1": chains} if chains else {}), layouts
