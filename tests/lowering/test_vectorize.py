"""Loop nests keep a unit-stride innermost loop and gcc vectorizes it: the erf GELU as the ONNX
exporter writes it, a heads transpose scaling the queries (a bare copy becomes memcpy) and the attention mask's broadcast add are compiled with
the modules' flags and -fopt-info-vec, which must report each kernel's innermost loop
vectorized. The numbers of the changed nests (outer loops collapsed, innermost `omp simd`,
tiled transposes with partial tiles, short innermost loops) against NumPy over a grid of shapes."""

from __future__ import annotations

import os
import re
import subprocess

import numpy as np
import pytest
from oracle import assert_close, np_dtype, random_array, ttype
from scipy.special import erf

import opc
from opc.api import emit
from opc.frontend import load_module
from opc.lowering.build import module_flags

KERNELS = """
func.func @gelu(%x: tensor<8x16x256xf32>) -> tensor<8x16x256xf32> {
  %s = opc.full {value = 1.4142135623730951 : f64} : () -> tensor<f32>
  %a = opc.div %x, %s : (tensor<8x16x256xf32>, tensor<f32>) -> tensor<8x16x256xf32>
  %b = opc.erf %a : (tensor<8x16x256xf32>) -> tensor<8x16x256xf32>
  %one = opc.full {value = 1.0 : f64} : () -> tensor<f32>
  %c = opc.add %b, %one : (tensor<8x16x256xf32>, tensor<f32>) -> tensor<8x16x256xf32>
  %d = opc.mul %x, %c : (tensor<8x16x256xf32>, tensor<8x16x256xf32>) -> tensor<8x16x256xf32>
  %h = opc.full {value = 0.5 : f64} : () -> tensor<f32>
  %e = opc.mul %d, %h : (tensor<8x16x256xf32>, tensor<f32>) -> tensor<8x16x256xf32>
  func.return %e : tensor<8x16x256xf32>
}
func.func @heads(%x: tensor<2x32x4x64xf32>) -> tensor<2x4x32x64xf32> {
  %t = opc.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x32x4x64xf32>) -> tensor<2x4x32x64xf32>
  %s = opc.full {value = 0.125 : f64} : () -> tensor<f32>
  %q = opc.mul %t, %s : (tensor<2x4x32x64xf32>, tensor<f32>) -> tensor<2x4x32x64xf32>
  func.return %q : tensor<2x4x32x64xf32>
}
func.func @mask(%x: tensor<2x4x32x128xf32>, %m: tensor<2x1x1x128xf32>) -> tensor<2x4x32x128xf32> {
  %t = opc.add %x, %m : (tensor<2x4x32x128xf32>, tensor<2x1x1x128xf32>) -> tensor<2x4x32x128xf32>
  func.return %t : tensor<2x4x32x128xf32>
}
"""


def innermost_loops(c_source: str) -> dict[str, range]:
    """kernel function name -> lines (1-based) of the loop after its last `#pragma omp simd`,
    header to closing brace (gcc's report names the header or a statement of the body)."""
    lines, found, kernel = c_source.splitlines(), {}, None
    for n, text in enumerate(lines, 1):
        m = re.match(r"static __attribute__\(\(noinline\)\) void (opc_k_\w+)\(", text)
        if m:
            kernel = m.group(1)
        elif kernel and text.strip() == "#pragma omp simd":
            indent = len(text) - len(text.lstrip())
            end = next(k for k in range(n + 1, len(lines)) if lines[k].strip() == "}"
                       and len(lines[k]) - len(lines[k].lstrip()) == indent)
            found[kernel] = range(n + 1, end + 1)
    return found


def test_gelu_transpose_and_mask_kernels_vectorize(tmp_path):
    c_source = emit(load_module(KERNELS), "c")
    path = tmp_path / "kernels.c"
    path.write_text(c_source)
    cc = os.environ.get("CC", "gcc")
    run = subprocess.run([cc, *module_flags(), "-fopt-info-vec-optimized", "-c", str(path), "-o",
                          str(tmp_path / "kernels.o")], capture_output=True, text=True, check=True)
    vectorized = {int(m.group(1)) for m in re.finditer(rf"{re.escape(str(path))}:(\d+):\d+: optimized: loop vectorized",
                                                        run.stderr)}
    loops = innermost_loops(c_source)
    assert sorted(k.split("_")[2] for k in loops) == ["gelu", "heads", "mask"]
    for kernel, body in loops.items():
        assert vectorized & set(body), f"{kernel}: the innermost loop (lines {body}) is not vectorized\n{run.stderr}"


def transpose_src(shape: tuple[int, ...], perm: tuple[int, ...], dt: str) -> str:
    out = tuple(shape[p] for p in perm)
    return (f"func.func @t(%x: {ttype(shape, dt)}) -> {ttype(out, dt)} {{\n"
            f"  %r = opc.transpose %x {{perm = array<i64: {', '.join(map(str, perm))}>}} : "
            f"({ttype(shape, dt)}) -> {ttype(out, dt)}\n  func.return %r : {ttype(out, dt)}\n}}\n")


# tiled (inner axes swapped, both longer than a tile; partial tiles where not a multiple of 16),
# untiled (a short axis), innermost kept, a full reversal
TRANSPOSES = [((40, 70), (1, 0)), ((3, 33, 50), (0, 2, 1)), ((2, 3, 64, 48), (0, 1, 3, 2)),
              ((5, 300, 7), (0, 2, 1)), ((6, 20, 3, 40), (0, 2, 1, 3)), ((17, 19, 23), (2, 1, 0))]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32"])
@pytest.mark.parametrize("shape,perm", TRANSPOSES)
def test_transpose_numbers(shape, perm, dtype):
    f = opc.compile(transpose_src(shape, perm, dtype)).t
    x = random_array(shape, dtype, np.random.default_rng(len(shape)))
    np.testing.assert_array_equal(f(x), np.transpose(x, perm))


# (x shape, broadcast operand shape): a row of the innermost axis, a per-row scalar, a short
# innermost loop (stays collapsed), few outer rows (collapsed), the mask's shape
BROADCASTS = [((64, 200), (200,)), ((6, 50, 33), (6, 50, 1)), ((300, 400, 5), (5,)), ((3, 4096), (1, 4096)),
              ((4, 4, 32, 40), (4, 1, 1, 40))]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,bshape", BROADCASTS)
def test_broadcast_gelu_numbers(shape, bshape, dtype):
    """x + b, then the erf GELU of the sum: one nest with a broadcast load and opc_erff."""
    t, tb = ttype(shape, dtype), ttype(bshape, dtype)
    src = (f"func.func @f(%x: {t}, %b: {tb}) -> {t} {{\n"
           f"  %s = opc.add %x, %b : ({t}, {tb}) -> {t}\n"
           f"  %r = opc.gelu %s {{approximate = false}} : ({t}) -> {t}\n  func.return %r : {t}\n}}\n")
    f = opc.compile(src).f
    rng = np.random.default_rng(sum(shape))
    x, b = random_array(shape, dtype, rng), random_array(bshape, dtype, rng)
    s = x.astype(np.float64) + b.astype(np.float64)
    assert_close(f(x, b), (0.5 * s * (1 + erf(s / np.sqrt(2)))).astype(np_dtype(dtype)), dtype, scale=4)
