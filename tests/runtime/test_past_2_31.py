"""Tensors of more than 2^31 elements (issue 38, item 4): an i8 / ui8 tensor of 2^31 + 80 elements
through elementwise ops, reductions, a transpose, a gather and a slice gives NumPy's answers, and
the CUDA emitter's index arithmetic for them is 64-bit (read from the emitted source).

The data is random (a block of a prime length repeated), so an offset computed in 32 bits (wrapped at 2^31 or
2^32) reads a different value; the largest element sits at the very end. At most two 2 GiB arrays
live at once (the input, one result, viewed as i8 or ui8 without a copy), results are compared
chunk by chunk and dropped at once. Marked `large_memory` (CI: `-m large_memory`, about 30 s on
two cores); skipped, with the reason, where the machine has not the memory free."""

from __future__ import annotations

import contextlib
import io
import re

import numpy as np
import pytest

import opc
from opc.cli import main

H = (1 << 30) + 40
N = 2 * H  # 2^31 + 80 elements, 2 GiB a copy
S = f"2x{H}"
T = f"{H}x2"
NEED = 5 << 30  # two arrays and slack

pytestmark = pytest.mark.large_memory


def available() -> int:
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return 0


SOURCE = f"""func.func @ew_u8(%x: tensor<{S}xui8>) -> tensor<{S}xui8> {{
  %three = opc.full {{value = 3.0 : f64}} : () -> tensor<{S}xui8>
  %five = opc.full {{value = 5.0 : f64}} : () -> tensor<{S}xui8>
  %m = opc.mul %x, %three : (tensor<{S}xui8>, tensor<{S}xui8>) -> tensor<{S}xui8>
  %y = opc.add %m, %five : (tensor<{S}xui8>, tensor<{S}xui8>) -> tensor<{S}xui8>
  func.return %y : tensor<{S}xui8>
}}
func.func @ew_i8(%x: tensor<{S}xi8>) -> tensor<{S}xi8> {{
  %seven = opc.full {{value = 7.0 : f64}} : () -> tensor<{S}xi8>
  %n = opc.neg %x : (tensor<{S}xi8>) -> tensor<{S}xi8>
  %y = opc.sub %n, %seven : (tensor<{S}xi8>, tensor<{S}xi8>) -> tensor<{S}xi8>
  func.return %y : tensor<{S}xi8>
}}
func.func @reduce_u8(%x: tensor<{S}xui8>) -> (tensor<2xui8>, tensor<ui8>, tensor<{H}xui8>) {{
  %s = opc.reduce_sum %x {{axes = array<i64: 1>}} : (tensor<{S}xui8>) -> tensor<2xui8>
  %m = opc.reduce_max %x {{axes = array<i64: 0, 1>}} : (tensor<{S}xui8>) -> tensor<ui8>
  %c = opc.reduce_max %x {{axes = array<i64: 0>}} : (tensor<{S}xui8>) -> tensor<{H}xui8>
  func.return %s, %m, %c : tensor<2xui8>, tensor<ui8>, tensor<{H}xui8>
}}
func.func @transpose_i8(%x: tensor<{S}xi8>) -> tensor<{T}xi8> {{
  %t = opc.transpose %x {{perm = array<i64: 1, 0>}} : (tensor<{S}xi8>) -> tensor<{T}xi8>
  func.return %t : tensor<{T}xi8>
}}
func.func @gather_u8(%x: tensor<{S}xui8>, %i: tensor<5xi64>) -> tensor<2x5xui8> {{
  %g = opc.gather %x, %i {{axis = 1}} : (tensor<{S}xui8>, tensor<5xi64>) -> tensor<2x5xui8>
  func.return %g : tensor<2x5xui8>
}}
func.func @slice_i8(%x: tensor<{S}xi8>) -> tensor<1x97xi8> {{
  %s = opc.slice %x {{start = array<i64: 1, {H - 100}>, limit = array<i64: 2, {H - 3}>, strides = array<i64: 1, 1>}}
    : (tensor<{S}xi8>) -> tensor<1x97xi8>
  func.return %s : tensor<1x97xi8>
}}
"""

CHUNK = 1 << 25
PERIOD = 16777259  # a prime: element i and i - 2^31 differ (2^31 is no multiple of it)


def chunks(n: int):
    for a in range(0, n, CHUNK):
        yield slice(a, min(a + CHUNK, n))


@pytest.fixture(scope="module")
def data():
    if available() < NEED:
        pytest.skip(f"needs {NEED >> 30} GiB of free memory for two 2^31+80-element arrays, "
                    f"the machine has {available() / (1 << 30):.1f} GiB available")
    x = np.empty((2, H), np.uint8)
    flat = x.reshape(-1)
    block = np.random.default_rng(0).integers(0, 255, size=PERIOD, dtype=np.uint8)  # 0..254
    for a in range(0, N, PERIOD):
        flat[a:a + PERIOD] = block[:N - a]
    flat[-1] = 255  # the only 255: at the very end
    del flat
    yield x
    del x


@pytest.fixture(scope="module")
def module():
    return opc.compile(SOURCE)


def test_elementwise_ui8(module, data):
    y = module.ew_u8(data)
    for r in range(2):
        for s in chunks(H):
            want = data[r, s] * np.uint8(3) + np.uint8(5)  # NumPy wraps as C does
            assert np.array_equal(y[r, s], want), (r, s)
    del y


def test_elementwise_i8(module, data):
    x = data.view(np.int8)
    y = module.ew_i8(x)
    for r in range(2):
        for s in chunks(H):
            want = -x[r, s] - np.int8(7)
            assert np.array_equal(y[r, s], want), (r, s)
    del y


def test_reductions_ui8(module, data):
    sums, top, cols = module.reduce_u8(data)
    want = [sum(int(data[r, s].sum(dtype=np.uint64)) for s in chunks(H)) % 256 for r in range(2)]
    assert sums.tolist() == want
    assert int(top) == 255
    assert int(cols[-1]) == 255 and cols.shape == (H,)
    for s in chunks(H):
        assert np.array_equal(cols[s], np.maximum(data[0, s], data[1, s])), s
    del cols


def test_transpose_i8(module, data):
    x = data.view(np.int8)
    t = module.transpose_i8(x)
    assert t.shape == (H, 2)
    for s in chunks(H):
        assert np.array_equal(t[s], x[:, s].T), s
    del t


def test_gather_and_slice(module, data):
    idx = np.array([H - 1, 0, H - 50, -1, (1 << 30) + 7], np.int64)
    np.testing.assert_array_equal(module.gather_u8(data, idx), np.take(data, idx, axis=1))
    assert int(module.gather_u8(data, idx)[1, 0]) == 255
    x = data.view(np.int8)
    np.testing.assert_array_equal(module.slice_i8(x), x[1:2, H - 100:H - 3])


def test_cuda_index_arithmetic_is_64_bit(tmp_path):
    """The CUDA source of the same functions: every loop index and offset int64_t, no 32-bit index."""
    path = tmp_path / "big.mlir"
    path.write_text(SOURCE)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["compile", "--emit", "cuda", "--target", "cuda", str(path)]) == 0
    cuda = out.getvalue()
    kernels = cuda[cuda.index("opc_cuda_error_string"):]  # the generated code, after the runtime headers
    assert str(N) in kernels and str(H) in kernels
    loops = re.findall(r"for \((\w+) (\w+) =", kernels)
    assert len(loops) >= 8 and all(t == "int64_t" for t, v in loops if v != "opc_off"), loops  # opc_off: 16..1
    ints = set(re.findall(r"\b(?:int|unsigned|int32_t|uint32_t|short) (\w+) =", kernels))
    assert ints <= {"status", "opc_lane", "opc_off"}, ints  # the status; the lane in a warp (< 32)
    assert not re.findall(r"\[[^\]]*\((?:int|unsigned|int32_t|uint32_t)\)", kernels)  # no offset narrowed
