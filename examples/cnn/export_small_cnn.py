"""Export a small CNN with PyTorch's (TorchScript) ONNX exporter, batch norm in training
mode, and record torch's forward and gradients as the test data of tests/frontend/test_cnn_model.py:

    python examples/cnn/export_small_cnn.py     # writes small_cnn.onnx and small_cnn_ref.npz here

The network: conv 3x3 + BatchNorm (training: batch statistics) + relu, max pool 2, depthwise
conv 3x3 + pointwise conv 1x1 + relu, avg pool 2, global average pool, linear 16 -> 10.
The gradients are keyed by the argument names opc gives the initializers (`c1.weight` ->
`c1_weight`), and `x`."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.c3 = torch.nn.Conv2d(8, 16, 1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.b1(self.c1(x)))
        x = torch.nn.functional.max_pool2d(x, 2)
        x = torch.relu(self.c3(self.c2(x)))
        x = torch.nn.functional.avg_pool2d(x, 2)
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


def main() -> None:
    torch.manual_seed(0)
    net = SmallCNN()
    x = torch.randn(2, 3, 16, 16)
    buf = io.BytesIO()
    torch.onnx.export(net, (x,), buf, dynamo=False, opset_version=17, input_names=["x"], output_names=["y"],
                      do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    (HERE / "small_cnn.onnx").write_bytes(buf.getvalue())
    net.train()
    tx = x.clone().requires_grad_()
    y = net(tx)
    dy = torch.from_numpy(np.random.default_rng(0).uniform(-1, 1, tuple(y.shape)).astype(np.float32))
    y.backward(dy)
    ref = {"in_x": x.numpy(), "dy": dy.numpy(), "y": y.detach().numpy(), "grad_x": tx.grad.numpy()}
    for name, p in net.named_parameters():
        ref[f"grad_{name.replace('.', '_')}"] = p.grad.numpy()
    np.savez(HERE / "small_cnn_ref.npz", **ref)


if __name__ == "__main__":
    main()
