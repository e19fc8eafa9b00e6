"""`import opc.paddle` / `from opc.paddle import op`: opc functions as Paddle operators.

The code is opc/interop/paddle.py; this name is that module itself (not a copy), so
`opc.paddle.op is opc.interop.paddle.op`. It imports Paddle: `import opc` alone does not."""

import sys

from opc.interop import paddle as _paddle

sys.modules[__name__] = _paddle
