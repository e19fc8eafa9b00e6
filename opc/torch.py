"""`import opc.torch` / `from opc.torch import op`: opc functions as PyTorch operators.

The code is opc/interop/torch.py; this name is that module itself (not a copy), so
`opc.torch.op is opc.interop.torch.op`. It imports torch: `import opc` alone does not."""

import sys

from opc.interop import torch as _torch

sys.modules[__name__] = _torch
