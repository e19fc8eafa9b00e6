"""The runtime kernel a call took (runtime/opc_routes.h, opc.profile's routes()), for the tests that
assert each case's route: every kernel computes the same numbers, so only its route shows a case
falling back to another kernel."""

from __future__ import annotations

import functools
import os
import subprocess
from typing import Any

import opc
from opc.lowering.build import compile_flags


@functools.cache
def wide_vectors() -> bool:
    """Whether opc's C builds for AVX-512 here (OPC_CF_V 16 in runtime/opc_nn_conv_fast.h): some
    kernels exist only there, and the vector width moves others' thresholds."""
    macros = subprocess.run([os.environ.get("CC", "gcc"), *compile_flags(), "-dM", "-E", "-x", "c", os.devnull],
                            capture_output=True, text=True, check=False).stdout
    return "__AVX512F__" in macros


def run_counting_routes(module: Any, fn: str, *args: Any) -> tuple[Any, dict[str, int]]:
    """module.fn(*args) and the runtime routes it took."""
    p = opc.profile(module)
    p.reset()
    try:
        got = getattr(module, fn)(*args)
    finally:
        p.stop()
    return got, p.routes()
