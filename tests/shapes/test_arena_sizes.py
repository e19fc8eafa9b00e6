"""Temporaries with `?` dims in the per-thread arena (docs/shapes.md, "Run-time sizes in C"): a
top-level temporary whose sizes are polynomials of the size parameters gets an offset computed from
them at the function's start, so a call mallocs nothing; one sized by a data size (known only once
its op ran) keeps a malloc of its own. Checked on the emitted C and against NumPy at several sizes,
a larger call before a smaller (the arena is kept and grows only) and calls from several threads."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import opc
from opc.lowering.build import sanitizing

CHAIN = """
func.func @chain(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %b: tensor<4x4xf32>) -> (tensor<?x?xf32>, tensor<4x4xf32>) {
  %s = opc.softmax %x {axis = -1} : (tensor<?x?xf32>) -> tensor<?x?xf32>
  %m = opc.matmul %s, %w : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  %t = opc.tanh %m : (tensor<?x?xf32>) -> tensor<?x?xf32>
  %u = opc.matmul %t, %w : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  %v = opc.softmax %u {axis = 0} : (tensor<?x?xf32>) -> tensor<?x?xf32>
  %e = opc.exp %b : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %f = opc.matmul %e, %b : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %g = opc.tanh %f : (tensor<4x4xf32>) -> tensor<4x4xf32>
  func.return %v, %g : tensor<?x?xf32>, tensor<4x4xf32>
}
func.func @compress(%x: tensor<?x3xf64>, %c: tensor<?xi1>) -> tensor<3x3xf64> {
  %nz = opc.nonzero %c : (tensor<?xi1>) -> tensor<1x?xi64>
  %i = opc.reshape %nz : (tensor<1x?xi64>) -> tensor<?xi64>
  %r = opc.gather %x, %i {axis = 0} : (tensor<?x3xf64>, tensor<?xi64>) -> tensor<?x3xf64>
  %s = opc.softmax %r {axis = 0} : (tensor<?x3xf64>) -> tensor<?x3xf64>
  %st = opc.transpose %s {perm = array<i64: 1, 0>} : (tensor<?x3xf64>) -> tensor<3x?xf64>
  %t = opc.matmul %st, %r : (tensor<3x?xf64>, tensor<?x3xf64>) -> tensor<3x3xf64>
  func.return %t : tensor<3x3xf64>
}
"""


PACKED = pytest.mark.skipif(sanitizing(), reason="OPC_SANITIZE gives every temporary a malloc of its own, "
                            "so that ASan's redzones border each")


@pytest.fixture(scope="module")
def m():
    return opc.compile(CHAIN)


def function_text(source: str, name: str) -> str:
    """The C of exported function `name` (its prototype to the closing brace at column 0)."""
    start = re.search(rf"^int opc_fn_{name}\(", source, re.M)
    assert start, name
    return source[start.start():source.index("\n}\n", start.start())]


def softmax(a: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def chain(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
    x, w, b = (a.astype(np.float64) for a in (x, w, b))
    return [softmax(np.tanh(softmax(x, -1) @ w) @ w, 0), np.tanh(np.exp(b) @ b)]


@PACKED
def test_run_time_temporaries_take_no_malloc(m):
    text = function_text(m.c_source, "chain")
    assert "malloc" not in text and "free(" not in text
    assert text.count("opc_arena_get(") == 1
    # the static temporaries first (offsets known), then those with run-time sizes
    assert re.search(r"const size_t \w+_end = \d+ \+ opc_arena_up\(sizeof\(float\) \* \(size_t\)opc_max1\(", text)


@PACKED
def test_a_data_size_temporary_keeps_its_malloc(m):
    """nonzero's positions, the rows gathered there, their softmax and its transpose have the
    count's size: each a malloc once the count is known (the status words stay in the arena)."""
    text = function_text(m.c_source, "compress")
    assert text.count("malloc(") == 4
    assert text.index("malloc(") > text.index("count_")


@pytest.mark.parametrize("sizes", [[1, 5, 64, 3], [40, 2, 40, 17]], ids=str)
def test_results_at_several_sizes(m, sizes):
    """A call after a larger one finds its buffers in the arena kept from it."""
    for k, (n, d) in enumerate(zip(sizes, sizes[1:] + sizes[:1])):
        rng = np.random.default_rng(k)
        x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((n, d), (d, d), (4, 4)))
        for got, want in zip(m.chain(x, w, b), chain(x, w, b)):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("n", [0, 1, 6, 23])
def test_data_size_temporaries(m, n):
    rng = np.random.default_rng(n)
    x, c = rng.standard_normal((n, 3)), rng.random(n) < 0.5
    if n == 6:
        c[:] = True
    want = softmax(x[c], 0).T @ x[c] if c.any() else np.zeros((3, 3))  # 0/0 rows: nothing to sum
    np.testing.assert_allclose(m.compress(x, c), want, rtol=1e-12, atol=1e-12)


def test_threads_have_arenas_of_their_own(m):
    """Calls at different sizes at once, each thread in its own arena."""
    def call(n: int) -> bool:
        rng = np.random.default_rng(n)
        x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((n, n + 1), (n + 1, n + 1), (4, 4)))
        for _ in range(20):
            for got, want in zip(m.chain(x, w, b), chain(x, w, b)):
                np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
        return True

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(call, [3, 50, 9, 31, 1, 64, 12, 2]))
