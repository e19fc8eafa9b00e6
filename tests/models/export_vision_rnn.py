"""Export the vision and recurrent test models with PyTorch's ONNX exporter and record torch's
forward and gradients as the test data of tests/models/test_vision_rnn.py:

    /work/exportenv/bin/python tests/models/export_vision_rnn.py   # torch, torchvision, onnx, onnxruntime

Models (MODELS below): torchvision's ResNet-18 and MobileNetV2 (weights=None, eval mode, input
1x3x64x64), the small CNN of examples/cnn with batch norm in training mode (batch statistics), an
LSTM classifier (bidirectional) and a GRU classifier (two layers).

The TorchScript exporter (dynamo=False) is used: it maps nn.LSTM / nn.GRU to ONNX LSTM / GRU (the
dynamo exporter decomposes them), and with training=PRESERVE and no constant folding it keeps the
eval-mode BatchNormalization nodes and the parameter names (it would fold batch norm into the conv
otherwise, and the folded weights have no recipe).

Every parameter and buffer is set from tests/models/seeded_weights.py before the export and its
initializer's data is stripped afterwards (name, dims and type stay): ResNet-18's 47 MB of
weights are not committed, the tests refill them with the same recipe. An initializer the exporter
derives from the parameters (the LSTM's reordered W, R, B) keeps its data.

Per model NAME this writes NAME.onnx and NAME_ref.npz: in_x, dy (the cotangent of the output, so
the scalar loss is sum(y * dy)), y, grad_x and grad_<arg> for a few weights, <arg> being the
function argument opc gives the initializer (a gradient of more than BIG elements: its first
ROWS rows, the tests compare those)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torchvision

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "examples" / "cnn"))
from export_small_cnn import SmallCNN  # noqa: E402
from seeded_weights import fill_initializers, strip_initializers, values  # noqa: E402


class LSTMClassifier(torch.nn.Module):
    """Bidirectional LSTM over (batch, time, features); the last step's two directions -> classes."""

    def __init__(self, features: int = 8, hidden: int = 16, classes: int = 5) -> None:
        super().__init__()
        self.rnn = torch.nn.LSTM(features, hidden, batch_first=True, bidirectional=True)
        self.fc = torch.nn.Linear(2 * hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.fc(out[:, -1])


class GRUClassifier(torch.nn.Module):
    """Two-layer GRU over (batch, time, features); the top layer's final state -> classes."""

    def __init__(self, features: int = 8, hidden: int = 16, classes: int = 5) -> None:
        super().__init__()
        self.rnn = torch.nn.GRU(features, hidden, num_layers=2, batch_first=True)
        self.fc = torch.nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h = self.rnn(x)
        return self.fc(h[-1])


# name -> (model factory, input shape, training mode, the parameters whose gradients are recorded;
#          None: all of them)
MODELS = {
    "resnet18": (lambda: torchvision.models.resnet18(weights=None), (1, 3, 64, 64), False,
                 ["conv1.weight", "bn1.weight", "layer4.1.bn2.weight", "fc.weight", "fc.bias"]),
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(weights=None), (1, 3, 64, 64), False,
                     ["features.0.0.weight", "features.0.1.weight", "features.1.conv.0.0.weight",
                      "classifier.1.weight", "classifier.1.bias"]),
    "small_cnn": (SmallCNN, (8, 3, 16, 16), True, None),
    "lstm": (LSTMClassifier, (2, 6, 8), False, None),
    "gru": (GRUClassifier, (2, 6, 8), False, None),
}


BIG, ROWS = 20000, 16  # a recorded gradient of more elements keeps its first ROWS rows (the folder stays small)


def arg_name(name: str) -> str:
    """The function argument opc gives an initializer called `name`."""
    return name.replace(".", "_")


def seed_(net: torch.nn.Module) -> None:
    with torch.no_grad():
        for name, t in net.state_dict().items():
            if t.is_floating_point():
                t.copy_(torch.from_numpy(values(name, tuple(t.shape))))


def export(name: str) -> None:
    make, shape, training, recorded = MODELS[name]
    net = make()
    seed_(net)
    net.train(training)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    buf = io.BytesIO()
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.PRESERVE
    torch.onnx.export(net, (torch.from_numpy(x),), buf, dynamo=False, opset_version=17, input_names=["x"],
                      output_names=["y"], do_constant_folding=False, training=mode)
    model = onnx.load_from_string(buf.getvalue())
    # the forward and backward in torch (after the export: a training-mode export must not see
    # running statistics that a forward already moved)
    net.train(training)
    tx = torch.from_numpy(x.copy()).requires_grad_()
    y = net(tx)
    dy = rng.uniform(-1, 1, tuple(y.shape)).astype(np.float32)
    y.backward(torch.from_numpy(dy))
    ref = {"in_x": x, "dy": dy, "y": y.detach().numpy(), "grad_x": tx.grad.numpy()}
    params = dict(net.named_parameters())
    for p in params if recorded is None else recorded:
        if params[p].grad is not None:
            g = params[p].grad.numpy()  # a big one (a 1000-class fc): its first rows only
            ref[f"grad_{arg_name(p)}"] = g[:ROWS] if g.size > BIG else g
    # onnxruntime on the refilled model agrees with torch (else the recipe or the strip is wrong)
    strip_initializers(model, set(net.state_dict()))
    (HERE / f"{name}.onnx").write_bytes(model.SerializeToString())
    filled = fill_initializers(onnx.load(str(HERE / f"{name}.onnx")))
    session = ort.InferenceSession(filled.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": x})
    err = float(np.abs(got - ref["y"]).max())
    assert err < 1e-4 * max(1.0, float(np.abs(ref["y"]).max())), (name, err)
    np.savez(HERE / f"{name}_ref.npz", **ref)
    size = (HERE / f"{name}.onnx").stat().st_size
    print(f"{name}: {size} bytes, |y| max {np.abs(ref['y']).max():.3g}, |grad_x| max "
          f"{np.abs(ref['grad_x']).max():.3g}, ort vs torch {err:.2g}, grads {sorted(ref)}")


def main() -> None:
    torch.manual_seed(0)
    for name in sys.argv[1:] or MODELS:
        export(name)


if __name__ == "__main__":
    main()
