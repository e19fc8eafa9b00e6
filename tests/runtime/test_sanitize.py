"""The sanitizer mode (opc/sanitize.py, OPC_SANITIZE=1): a meaningful part of the suite runs
in a child process with every module and runtime object built with ASan + UBSan
(float-cast-overflow included), and must finish with 0 reports: every op x dtype on odd
shapes, casts across every saturation bound, the GEMM runtime (matmul, fused_gemm_epilogue
and its grad), the nn kernels (softmax, log_softmax, layer_norm, cross entropy and their
grads) and the fast f32 conv kernels. Any report aborts the child, so a report cannot pass unseen.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from opc.lowering.build import SANITIZE_FLAGS
from opc.sanitize import runtime_library, sanitized_env

TESTS = Path(__file__).resolve().parents[1]
# about 140 s on the 2-core machine, most of it building: the op modules, the nn kernels (4 dtypes),
# the GEMM runtime and one module of the fast f32 convs (the depthwise and few-output kernels among them)
SELECTION = ["lowering/test_cpu_ops.py", "lowering/test_nn_ops.py::test_fused_kernel",
             "ops/test_conv_fast.py::test_fast_kernels_match_numpy"]

pytestmark = pytest.mark.skipif(runtime_library("libasan.so") is None,
                                reason="the C compiler has no ASan runtime (libasan.so)")


def test_sanitizer_flags_catch_a_float_cast_overflow(tmp_path):
    """The flags and options of the mode do report (int)NaN, the UB opc_expf had, and stop."""
    src = tmp_path / "ub.c"
    src.write_text("#include <math.h>\nvolatile float x = NAN;\nint main(void) { return (int)x == 7; }\n")
    exe = tmp_path / "ub"
    subprocess.run(["gcc", *SANITIZE_FLAGS, str(src), "-o", str(exe)], check=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, env=sanitized_env())
    assert proc.returncode != 0 and "runtime error" in proc.stderr, proc.stderr


def test_suite_part_under_sanitizers():
    code = ("import numpy as np, opc; m = opc.compile('func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {\\n"
            "%r = opc.exp %x : (tensor<3xf32>) -> tensor<3xf32>\\nfunc.return %r : tensor<3xf32>\\n}'); "
            "print(m.f(np.array([np.nan, 1, 2], np.float32))); "
            "print(b'__asan_' in m.path.read_bytes() if m.path else 'no path')")
    canary = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=sanitized_env())
    assert canary.returncode == 0, canary.stderr[-3000:]
    assert canary.stdout.split()[-1] == "True", f"the module was not built with ASan: {canary.stdout}"
    proc = subprocess.run([sys.executable, "-m", "opc.sanitize", "-q", "-p", "no:cacheprovider",
                           *[str(TESTS / s) for s in SELECTION]], capture_output=True, text=True, cwd=TESTS.parent)
    out = proc.stdout + proc.stderr
    assert "AddressSanitizer" not in out and "runtime error" not in out, out[-5000:]
    assert proc.returncode == 0, out[-5000:]
    assert " passed" in out and "failed" not in out, out[-2000:]
