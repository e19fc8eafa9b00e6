"""`import opc.jax` / `from opc.jax import op`: opc functions as JAX callables.

The code is opc/interop/jax.py; this name is that module itself (not a copy), so
`opc.jax.op is opc.interop.jax.op`. It imports JAX: `import opc` alone does not."""

import sys

from opc.interop import jax as _jax

sys.modules[__name__] = _jax
