"""BatchNormalization folded into the Conv before it, as torch.onnx.export does in eval mode (its
default): what a user's export of ResNet-18 or MobileNetV2 looks like (Conv with a bias, then Relu,
Clip or a residual Add). tests/models' exports keep their BatchNorms (do_constant_folding=False), so
the tests and the benchmark (the peers' graph, opc.import_onnx's) fold them here, with opc's own fold
(opc/onnx_import/fold.py: what opc.load_onnx does to every model it loads):

    model = fold_batch_norms(fill_initializers(onnx.load("tests/models/mobilenet_v2.onnx")))
"""

from __future__ import annotations

from opc.onnx_import.fold import fold_batch_norms

__all__ = ["fold_batch_norms"]
