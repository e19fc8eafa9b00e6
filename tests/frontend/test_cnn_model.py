"""A small CNN exported by PyTorch's ONNX exporter with batch norm in training mode
(examples/cnn/export_small_cnn.py wrote the model and torch's forward and gradients; no
torch is needed here): imported, compiled with grad=True, its forward against
onnxruntime and torch's, and its gradients w.r.t. the input and every weight against
torch's autograd."""

from __future__ import annotations

import numpy as np
from onnx_helpers import EXAMPLES, run_ort

import opc

MODEL = EXAMPLES / "cnn" / "small_cnn.onnx"
REF = EXAMPLES / "cnn" / "small_cnn_ref.npz"


def test_small_cnn_forward_and_gradients() -> None:
    import onnx

    module, params = opc.import_onnx(str(MODEL))
    ops = {op.name for op in module.walk()}
    assert {"opc.conv", "opc.batch_norm", "opc.max_pool", "opc.avg_pool"} <= ops
    m = opc.compile(module, grad=True)
    ref = np.load(REF)
    x, dy = ref["in_x"], ref["dy"]
    y = m.main_graph(x, *params.values())
    y = y[0] if isinstance(y, tuple) else y
    (want,) = run_ort(onnx.load(str(MODEL)), {"x": x})
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, ref["y"], rtol=1e-5, atol=1e-5)
    grads = dict(zip(["x", *params], m.main_graph_grad(x, *params.values(), dy)))
    compared = 0
    for name, g in grads.items():
        key = f"grad_{name}"
        if key in ref:
            np.testing.assert_allclose(g, ref[key], rtol=1e-4, atol=1e-5, err_msg=name)
            compared += 1
    assert compared == 11, sorted(grads)  # x and the 10 weights and biases torch differentiates
