"""Memory that runs out (issue 38, item 5): a call whose intermediate buffers (the arena) or results
cannot be allocated raises MemoryError naming the size; the process stays usable, the module's other
functions and the same function (once memory is there) give NumPy's numbers; no segfault, no result.

The allocations are made to fail with an address-space limit (RLIMIT_AS, `ulimit -v`) in a child
process, lifted again in the same process; and with a 64 TiB intermediate no machine has."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import opc
from opc.lowering.build import byte_size

ROOT = Path(__file__).resolve().parents[2]
ROWS = 1 << 25  # the intermediate: [ROWS, 4] f32, 512 MiB; the second result [ROWS] f32, 128 MiB
HUGE = 1 << 42  # [HUGE, 4] f32: 64 TiB


def source() -> str:
    return f"""func.func @f(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<{ROWS}xf32>) {{
  %b = opc.broadcast_to %a : (tensor<4xf32>) -> tensor<{ROWS}x4xf32>
  %e = opc.exp %b : (tensor<{ROWS}x4xf32>) -> tensor<{ROWS}x4xf32>
  %r1 = opc.reduce_max %e {{axes = array<i64: 0>}} : (tensor<{ROWS}x4xf32>) -> tensor<4xf32>
  %r2 = opc.reduce_sum %e {{axes = array<i64: 1>}} : (tensor<{ROWS}x4xf32>) -> tensor<{ROWS}xf32>
  func.return %r1, %r2 : tensor<4xf32>, tensor<{ROWS}xf32>
}}
func.func @huge(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {{
  %b = opc.broadcast_to %a : (tensor<4xf32>) -> tensor<{HUGE}x4xf32>
  %e = opc.exp %b : (tensor<{HUGE}x4xf32>) -> tensor<{HUGE}x4xf32>
  %r1 = opc.reduce_max %e {{axes = array<i64: 0>}} : (tensor<{HUGE}x4xf32>) -> tensor<4xf32>
  %r2 = opc.reduce_min %e {{axes = array<i64: 0>}} : (tensor<{HUGE}x4xf32>) -> tensor<4xf32>
  func.return %r1, %r2 : tensor<4xf32>, tensor<4xf32>
}}
func.func @wide(%a: tensor<4xf32>) -> tensor<{ROWS}x4xf32> {{
  %b = opc.broadcast_to %a : (tensor<4xf32>) -> tensor<{ROWS}x4xf32>
  %e = opc.exp %b : (tensor<{ROWS}x4xf32>) -> tensor<{ROWS}x4xf32>
  func.return %e : tensor<{ROWS}x4xf32>
}}
func.func @small(%a: tensor<4xf32>) -> tensor<4xf32> {{
  %e = opc.exp %a : (tensor<4xf32>) -> tensor<4xf32>
  func.return %e : tensor<4xf32>
}}
"""


CHILD = r"""
import os, re, resource, sys
import numpy as np
import opc
m = opc.compile(open(sys.argv[1]).read())
a = np.array([0.0, 0.5, -1.0, 1e-3], np.float32)
e = np.exp(a.astype(np.float64))
ROWS = int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_AS)

def vm() -> int:
    return int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")

def expect(call, pattern):
    try:
        call()
    except MemoryError as err:
        assert re.fullmatch(pattern, str(err)), str(err)
        print("MemoryError:", err, flush=True)
        return
    raise AssertionError("no MemoryError")

m.wide(a)  # threads started (their stacks, malloc's arenas); f's arena not yet allocated (it is kept per thread)
resource.setrlimit(resource.RLIMIT_AS, (vm() + (300 << 20), hard))
arena = r"f\(\): out of memory: 536870912 bytes \(512\.0 MiB\) for intermediate buffers could not be allocated"
expect(lambda: m.f(a), arena)
np.testing.assert_allclose(m.small(a), e, rtol=1e-6)  # the module and the process go on
expect(lambda: m.f(a), arena)  # again: the same error, nothing left half-made
expect(lambda: m.wide(a),
       r"wide\(\): out of memory: result #0 \(float32\[33554432, 4\], 536870912 bytes \(512\.0 MiB\)\) "
       r"could not be allocated")
expect(lambda: m.huge(a), r"huge\(\): out of memory: 70368744177664 bytes \(64\.0 TiB\) for intermediate "
                          r"buffers could not be allocated")
resource.setrlimit(resource.RLIMIT_AS, (soft, hard))  # memory there again: the same calls are right
r1, r2 = m.f(a)
np.testing.assert_allclose(r1, e, rtol=1e-6)
np.testing.assert_allclose(r2[[0, 1, ROWS // 2, ROWS - 1]], np.full(4, e.sum()), rtol=1e-6)
w = m.wide(a)
assert w.shape == (ROWS, 4)
np.testing.assert_allclose(w[[0, ROWS - 1]], [e, e], rtol=1e-6)
del w, r2
if open("/proc/sys/vm/overcommit_memory").read().strip() != "1":  # (1: malloc promises 64 TiB, and the loop runs)
  expect(lambda: m.huge(a), r"huge\(\): out of memory: 70368744177664 bytes \(64\.0 TiB\) for intermediate "
                          r"buffers could not be allocated")
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/statm are Linux's")
def test_allocation_failure_is_memory_error(tmp_path):
    path = tmp_path / "oom.mlir"
    path.write_text(source())
    opc.compile(path.read_text())  # built here (a cache hit in the child)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(ROWS)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr  # a segfault is -11
    assert proc.stdout.count("MemoryError:") >= 4 and proc.stdout.rstrip().endswith("ok"), proc.stdout


@pytest.mark.parametrize("n,text", [(0, "0 bytes"), (1023, "1023 bytes"), (1024, "1024 bytes (1.0 KiB)"),
                                    (3 << 29, "1610612736 bytes (1.5 GiB)"), (1 << 48, "281474976710656 bytes (256.0 TiB)")])
def test_byte_size(n, text):
    assert byte_size(n) == text
