"""Export the small Paddle models of tests/frontend/test_onnx_old_opsets.py with paddle2onnx at its
default opset and at its oldest, and record Paddle's own outputs:

    python -m venv --system-site-packages /tmp/paddle-env
    /tmp/paddle-env/bin/pip install paddlepaddle paddle2onnx     # 3.3.1 and 2.1.0 wrote these
    /tmp/paddle-env/bin/python tests/models/paddle/export_paddle.py [NAME ...]   # default: all

paddle.onnx.export's default opset is 9; 7 is the oldest paddle2onnx writes (its int64 Constants are
outside opset 7's Constant types, as onnxruntime tolerates). A model that needs a newer op is raised
to that opset by paddle2onnx (the classifier's Embedding: 11). Per model NAME and opset N this writes
NAME_opsetN.onnx and NAME_opsetN.npz (x0, ... the inputs, want Paddle's output, eval mode).

ResNet-18 and MobileNetV2 (paddle.vision.models, input 1x3x64x64) get their parameters and buffers
from tests/models/seeded_weights.py before the export, as tests/models/export_vision_rnn.py does for
torch's: the initializers are renamed from Paddle's internal names (conv2d_0.w_0) to the layers'
structured ones (conv1.weight, bn1._mean) that the recipe reads, and their data is stripped (45 and
9 MB of weights; the tests refill them with seeded_weights.fill_initializers). onnxruntime on the
refilled model must agree with Paddle before anything is written."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import paddle
import paddle2onnx
from paddle import nn

OUT = Path(__file__).resolve().parent
sys.path.insert(0, str(OUT.parent))
from seeded_weights import fill_initializers, stored, strip_initializers, values  # noqa: E402

SEEDED = {"resnet18", "mobilenet_v2"}  # weights from the recipe, stripped from the .onnx


class MLP(nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 10)

    def forward(self, x):  # noqa: ANN001, ANN201
        return nn.functional.softmax(self.b(nn.functional.relu(self.a(x))))


class CNN(nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn, self.fc = nn.Conv2D(3, 8, 3, padding=1), nn.BatchNorm2D(8), nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.fc(paddle.flatten(nn.functional.max_pool2d(nn.functional.relu(self.bn(self.conv(x))), 2), 1))


class LSTM(nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.lstm, self.fc = nn.LSTM(8, 16, direction="bidirect"), nn.Linear(32, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.fc(self.lstm(x)[0])


class Classifier(nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0), 2)
        self.fc = nn.Linear(32, 3)

    def forward(self, ids):  # noqa: ANN001, ANN201
        return self.fc(self.enc(self.emb(ids)).mean(axis=1))


def models() -> dict:
    rng = np.random.default_rng(0)
    return {"mlp": (MLP(), [rng.standard_normal((4, 16), np.float32)]),
            "cnn_bn": (CNN(), [rng.standard_normal((2, 3, 16, 16), np.float32)]),
            "encoder_layer": (nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0),
                              [rng.standard_normal((2, 6, 32), np.float32)]),
            "lstm": (LSTM(), [rng.standard_normal((2, 5, 8), np.float32)]),
            "classifier": (Classifier(), [rng.integers(0, 100, (2, 7)).astype(np.int64)]),
            "resnet18": (paddle.vision.models.resnet18(), [rng.standard_normal((1, 3, 64, 64), np.float32)]),
            "mobilenet_v2": (paddle.vision.models.mobilenet_v2(), [rng.standard_normal((1, 3, 64, 64), np.float32)])}


def seed_(model: nn.Layer) -> None:
    for name, t in model.state_dict().items():
        if t.dtype == paddle.float32:
            t.set_value(values(name, tuple(t.shape)))


def statistics_(model: nn.Layer) -> None:
    for layer in model.sublayers():  # running statistics other than 0 and 1, so that they count
        if isinstance(layer, nn.BatchNorm2D):
            layer._mean.set_value(np.linspace(-0.5, 0.5, layer._mean.shape[0]).astype(np.float32))
            layer._variance.set_value(np.linspace(0.5, 1.5, layer._variance.shape[0]).astype(np.float32))


def rename_and_strip(model: onnx.ModelProto, layer: nn.Layer) -> None:
    """Paddle's internal parameter names (what paddle2onnx writes: initializers at opset 9, Constant
    nodes at 7) -> the structured ones, their data stripped."""
    structured = {t.name: name for name, t in layer.state_dict().items()}
    for t in stored(model):
        t.name = structured.get(t.name, t.name)
    for v in model.graph.input:
        v.name = structured.get(v.name, v.name)
    for node in model.graph.node:
        node.input[:] = [structured.get(n, n) for n in node.input]
        node.output[:] = [structured.get(n, n) for n in node.output]
    strip_initializers(model, set(structured.values()))


def check_refilled(path: str, xs: list[np.ndarray], want: np.ndarray) -> float:
    """onnxruntime on the refilled model against Paddle (else the recipe, the renaming or the strip is wrong)."""
    model = fill_initializers(onnx.load(path))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {i.name: x for i, x in zip(session.get_inputs(), xs)})
    err = float(np.abs(got - want).max())
    assert err < 1e-4 * max(1.0, float(np.abs(want).max())), (path, err)
    return err


def export(name: str, model: nn.Layer, xs: list[np.ndarray], opset: int) -> None:
    model.eval()
    seed_(model) if name in SEEDED else statistics_(model)
    names = list(model.forward.__code__.co_varnames[1:1 + len(xs)])
    spec = [paddle.static.InputSpec(x.shape, str(x.dtype), n) for n, x in zip(names, xs)]
    want = model(*[paddle.to_tensor(x) for x in xs]).numpy()
    folder = tempfile.mkdtemp()
    paddle.jit.save(paddle.jit.to_static(model, input_spec=spec, full_graph=True), os.path.join(folder, "model"))
    graph = os.path.join(folder, "model.json")
    if not os.path.exists(graph):
        graph = os.path.join(folder, "model.pdmodel")
    path = os.path.join(folder, "model.onnx")
    paddle2onnx.export(graph, os.path.join(folder, "model.pdiparams"), path, opset_version=opset)
    written = next(o.version for o in onnx.load(path).opset_import if o.domain in ("", "ai.onnx"))
    stem = OUT / f"{name}_opset{written}"  # the opset paddle2onnx wrote (raised where an op needs it)
    if name in SEEDED:
        exported = onnx.load(path)
        rename_and_strip(exported, model)
        onnx.save(exported, path)
        err = check_refilled(path, xs, want)
        print(f"{stem.name}: {os.path.getsize(path)} bytes, |want| max {np.abs(want).max():.3g}, ort vs Paddle {err:.2g}")
    os.replace(path, f"{stem}.onnx")
    np.savez(f"{stem}.npz", want=want, **{f"x{i}": x for i, x in enumerate(xs)})


if __name__ == "__main__":
    paddle.seed(0)
    for opset in (9, 7):
        for name, (model, xs) in models().items():
            if name in (sys.argv[1:] or [name]):
                export(name, model, xs, opset)
