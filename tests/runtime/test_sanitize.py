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

import numpy as np
import pytest

from opc.lowering.build import SANITIZE_FLAGS
from opc.sanitize import runtime_library, sanitized_env

TESTS = Path(__file__).resolve().parents[1]
# about 140 s on the 2-core machine, most of it building: the op modules, the nn kernels (4 dtypes),
# the GEMM runtime and one module of the fast f32 convs (the depthwise and few-output kernels among them);
# the bf16 GEMM's grid (its vdpbf16ps packing reads pairs of k as words: about 20 s more)
SELECTION = ["lowering/test_cpu_ops.py", "lowering/test_nn_ops.py::test_fused_kernel",
             "ops/test_conv_fast.py::test_fast_kernels_match_numpy", "runtime/test_gemm_bf16.py"]

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


SCRATCH = r"""#include "opc_gemm.h"
int main(int argc, char **argv) {
    (void)argv;
    char *a = (char *)opc__buf_get(OPC__BUF_A, 100);
    a[99] = 1;
    /* grow-only, the second call would hand back the first's 100 bytes; an aligned block has slack */
    volatile char *b = argc > 1 ? (char *)opc__buf_get(OPC__BUF_A, 40) : (char *)opc__amalloc(40);
    return b[40];
}
"""


@pytest.mark.parametrize("reuse", [True, False], ids=["smaller-reuse", "aligned-slack"])
def test_runtime_scratch_is_exact_under_asan(tmp_path, reuse):
    """The runtime's per-thread GEMM buffers, sanitized: a read one byte past the size asked for is
    reported, whether the buffer was kept from a larger call or has alignment slack after it."""
    from opc.lowering.build import runtime_dir

    src = tmp_path / "scratch.c"
    src.write_text(SCRATCH)
    exe = tmp_path / "scratch"
    subprocess.run(["gcc", "-fopenmp", *SANITIZE_FLAGS, "-I", str(runtime_dir()), str(src), "-o", str(exe), "-lm"],
                   check=True)
    proc = subprocess.run([str(exe), *(["reuse"] if reuse else [])], capture_output=True, text=True,
                          env=sanitized_env())
    assert proc.returncode != 0 and "ERROR: AddressSanitizer" in proc.stderr, proc.stderr[-3000:]


CHAIN = """func.func @f(%x: tensor<3x5xf32>) -> tensor<3x5xf32> {
  %a = opc.exp %x : (tensor<3x5xf32>) -> tensor<3x5xf32>
  %b = opc.mul %a, %a : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
  %c = opc.matmul %b, %a {trans_y = true} : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x3xf32>
  %d = opc.matmul %c, %b : (tensor<3x3xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
  func.return %d : tensor<3x5xf32>
}"""

# the second kernel (b = a * a) made to run one element past its 15: it reads a[15], one float past
# the intermediate `a`, which in the arena is padding before `b` (unseen) and sanitized is a redzone
OVERRUN = """
build = opc.api.build_extension
def overrun(source, *args, **kwargs):
    planted = re.sub(r"(void opc_k_f_1\\([^)]*\\) [{][^}]*?)[(][(]int64_t[)]15[)]", r"\\1((int64_t)16)", source)
    assert planted != source
    return build(planted, *args, **kwargs)
opc.api.build_extension = overrun
"""


def test_intermediates_are_bordered_by_redzones(tmp_path):
    """Sanitized, each intermediate is a malloc of its own (no arena): the numbers stay right, and a
    kernel that reads one element past an intermediate is reported."""
    code = (f"import re, sys, numpy as np, opc, opc.api\nsrc = {CHAIN!r}\n"
            "x = np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5)\n"
            "a = np.exp(x); b = a * a\nwant = (b @ a.T) @ b\n"
            "m = opc.compile(src)\nnp.testing.assert_allclose(m.f(x), want, rtol=1e-5)\n"
            "assert 'opc_arena_get(' not in m.c_source.split('int opc_fn_f')[1], 'the arena is used'\n"
            f"{OVERRUN}\nopc.compile(src, cache_dir=sys.argv[1]).f(x)\nprint('not reported')\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                          env=sanitized_env(), cwd=TESTS.parent)
    assert "AddressSanitizer: heap-buffer-overflow" in proc.stderr, proc.stdout + proc.stderr[-3000:]
    assert "READ of size 4" in proc.stderr and "opc_k_f_1" in proc.stderr, proc.stderr[-3000:]
    assert "not reported" not in proc.stdout and proc.returncode != 0


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


def test_large_constants_are_bordered_by_redzones(tmp_path):
    """Sanitized, a large constant stays a C array (not .incbin data, c_data.py), which ASan borders:
    a kernel made to read one element past the constant is reported."""
    values = (np.arange(1024) % 97 / 8).astype(np.float32)
    src = ("func.func @f(%x: tensor<1024xf32>) -> tensor<1024xf32> {\n"
           f"  %c = arith.constant dense<\"0x{values.tobytes().hex().upper()}\"> : tensor<1024xf32>\n"
           "  %r = opc.add %x, %c : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>\n"
           "  func.return %r : tensor<1024xf32>\n}\n")
    code = (f"import re, sys, numpy as np, opc, opc.api\nsrc = {src!r}\n"
            "x = np.ones(1024, np.float32)\nm = opc.compile(src)\n"
            f"np.testing.assert_array_equal(m.f(x), x + np.array({values.tolist()!r}, np.float32))\n"
            "assert '.incbin' not in m.c_source, 'the constant is data'\n"
            "build = opc.api.build_extension\n"
            "def overrun(source, *args, **kwargs):\n"
            "    planted = re.sub(r'= c_(\\d+)\\[v_(\\d+)\\];', r'= c_\\1[v_\\2 + 1];', source)\n"
            "    assert planted != source\n"
            "    return build(planted, *args, **kwargs)\n"
            "opc.api.build_extension = overrun\n"
            "opc.compile(src, cache_dir=sys.argv[1]).f(x)\nprint('not reported')\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                          env=sanitized_env(), cwd=TESTS.parent)
    # ASan's redzone, or UBSan's object-size check where it sees the array's bound first
    reported = ("AddressSanitizer: global-buffer-overflow" in proc.stderr
                or "insufficient space for an object of type 'const float'" in proc.stderr)
    assert reported and "opc_k_f_0" in proc.stderr, proc.stdout + proc.stderr[-3000:]
    assert "not reported" not in proc.stdout and proc.returncode != 0
