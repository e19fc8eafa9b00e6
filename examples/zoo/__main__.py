"""`python examples/zoo DIR [--opset N] [--dtype float64]`: write every zoo model as DIR/NAME.onnx."""

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
args = parser.parse_args()
os.makedirs(args.directory, exist_ok=True)
for name, module in MODELS.items():
    path = os.path.join(args.directory, f"{name}.onnx")
    onnx.save(module.build(dtype=np.dtype(args.dtype), opset=args.opset), path)
    print(f"wrote {path}")
