"""`python examples/zoo DIR [--opset N] [--dtype float64] [--dynamic-batch]`: write every zoo model as
DIR/NAME.onnx; --dynamic-batch: the first dim of the graph's inputs and outputs named `batch` instead of
a size, as exporters write it (then `opc import --shape` gives the size)."""

import argparse
import os
import sys

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from zoo import MODELS  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("directory")
parser.add_argument("--opset", type=int, default=17)
parser.add_argument("--dtype", default="float32")
parser.add_argument("--dynamic-batch", action="store_true", help="dim 0 of inputs and outputs: `batch`")
args = parser.parse_args()
os.makedirs(args.directory, exist_ok=True)
for name, module in MODELS.items():
    path = os.path.join(args.directory, f"{name}.onnx")
    model = module.build(dtype=np.dtype(args.dtype), opset=args.opset)
    if args.dynamic_batch:
        weights = {t.name for t in model.graph.initializer}
        for v in [*model.graph.input, *model.graph.output]:
            dims = v.type.tensor_type.shape.dim
            if v.name not in weights and dims:
                dims[0].Clear()
                dims[0].dim_param = "batch"
    onnx.save(model, path)
    print(f"wrote {path}")
