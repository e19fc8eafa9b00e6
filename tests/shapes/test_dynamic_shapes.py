"""Run-time (`?`) sizes (SPEC.md, "Run-time shapes"): one compiled module, every size.

The functions of dynamic_ops.mlir are compiled once (one module, cached) and called at
sizes 0, 1, 5 and 37 against NumPy; gradients against central differences in f64; the
calls that break a size rule raise ValueError naming the arguments and sizes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import opc

HERE = Path(__file__).parent
SIZES = [0, 1, 5, 37]


@pytest.fixture(scope="module")
def m():
    return opc.compile((HERE / "dynamic_ops.mlir").read_text())


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(dtype)


def close(got, want, tol=1e-5):
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


@pytest.mark.parametrize("n", SIZES)
def test_unary(m, n):
    x = rand(n, 8)
    a, b, c = m.unary(x)
    close(a, np.exp(x))
    close(b, gelu_tanh(x))
    close(c, 1 / (1 + np.exp(-x)))


@pytest.mark.parametrize("n", SIZES)
def test_binary_broadcasts_static_ones_only(m, n):
    x, y, r, c = rand(n, 8), rand(n, 8, seed=1), rand(8), rand(n, 1) + 3
    a, b, d = m.binary(x, y, r, c)
    close(a, x * y)
    close(b, x - r)
    close(d, x / c)


@pytest.mark.parametrize("n", SIZES)
def test_compare_select_cast(m, n):
    x, y = rand(n, 8) * 10, rand(n, 8, seed=3) * 10
    s, i = m.compare(x, y)
    close(s, np.where(x > y, x, y))
    np.testing.assert_array_equal(i, x.astype(np.int32))


@pytest.mark.parametrize("n", SIZES)
def test_reductions(m, n):
    x = rand(n, 8, dtype=np.float64)
    a, b, c, d = m.reduce(x)
    close(a, x.sum(1))
    if n:
        close(b, x.min(0))
        close(d, x.max(1, keepdims=True))
        close(c, np.asarray(x.mean()))
    else:
        assert b.shape == (8,) and d.shape == (0, 1)
        assert np.isnan(c)  # the mean of nothing, as NumPy's


@pytest.mark.parametrize("n", SIZES)
def test_matmuls(m, n):
    x, w, b = rand(n, 16), rand(16, 24), rand(24)
    q, k = rand(n, 3, 16), rand(n, 16, 5)
    r, u, v = m.matmuls(x, w, b, q, k)
    close(r, np.maximum(x @ w + b, 0), 1e-4)
    close(u, q @ w, 1e-4)
    close(v, q @ k, 1e-4)


@pytest.mark.parametrize("n,s", [(0, 3), (1, 1), (2, 7), (5, 0), (3, 40)])
def test_row_kernels_with_two_run_time_dims(m, n, s):
    x, g, h = rand(n, s, 32), rand(32), rand(32)
    a, b, y = m.rows(x, g, h)
    e = np.exp(x - x.max(-1, keepdims=True)) if x.size else x
    close(a, e / e.sum(-1, keepdims=True) if x.size else x)
    close(b, np.log(a) if x.size else x, 1e-4)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    close(y, (x - mu) / np.sqrt(var + 1e-5) * g + h if x.size else x, 1e-4)


@pytest.mark.parametrize("n,k", [(0, 2), (1, 0), (4, 3), (9, 9)])
def test_layout_ops_and_run_time_size_operands(m, n, k):
    x, a, b = rand(n, 4, 6), rand(n, 6, seed=5), rand(k, 6, seed=6)
    if n != k:  # full and broadcast_to read a's size; the concat is along the run-time dim
        b2 = rand(n, 6, seed=7)
    else:
        b2 = b
    t, r, c, f, s = m.layout(x, a, b2)
    np.testing.assert_array_equal(t, x.transpose(2, 1, 0))
    np.testing.assert_array_equal(r, x.reshape(n, 24))
    np.testing.assert_array_equal(c, np.concatenate([a, b2]))
    np.testing.assert_array_equal(f, np.full((n, 6), 3.0, np.float32))
    close(s, np.broadcast_to(b2.sum(0, keepdims=True), (n, 6)))


@pytest.mark.parametrize("rows,cols,k", [(10, 0, 3), (10, 4, 0), (10, 3, 12)])
def test_gather_with_run_time_index_count(m, rows, cols, k):
    x = rand(rows, cols)
    i = np.random.default_rng(k).integers(-rows, rows, size=k)
    np.testing.assert_array_equal(m.take(x, i), np.take(x, i, axis=0))


def test_one_module_serves_every_size(m):
    """The sizes are arguments: the C code is the same module, whatever the call."""
    fn = m.unary
    assert fn.sig.sizes == ["n0"] and fn.sig.inputs[0][1] == ("n0", 8)
    for n in (3, 1000, 2):
        assert m.unary(rand(n, 8))[0].shape == (n, 8)


# ---------------------------------------------------------------------------
# Sizes that break a rule: ValueError before any kernel runs
# ---------------------------------------------------------------------------

def test_two_arguments_of_one_size_must_agree(m):
    with pytest.raises(ValueError, match=r"argument 'y' has size 4 at dim 0, but argument 'x' dim 0 is 3"):
        m.binary(rand(3, 8), rand(4, 8), rand(8), rand(3, 1))


def test_static_dims_are_still_checked(m):
    with pytest.raises(ValueError, match=r"argument 'x' must have shape \(\?, 8\), got \(3, 7\)"):
        m.unary(rand(3, 7))
    with pytest.raises(ValueError, match=r"argument 'x' must have shape \(\?, 8\), got \(3,\)"):
        m.unary(rand(3))


def test_a_run_time_one_is_not_broadcast(m):
    """(?x8) * (?x8) at sizes 3 and 1: the `?` dims pair only with an equal size, as in JAX."""
    with pytest.raises(ValueError, match="argument 'y' has size 1"):
        m.binary(rand(3, 8), rand(1, 8), rand(8), rand(3, 1))


def test_cuda_refuses_run_time_sizes_in_one_line(capsys):
    from opc.cli import main

    assert main(["compile", str(HERE / "dynamic_ops.mlir"), "--emit", "cuda"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: @unary: the CUDA target does not take run-time (?) sizes yet" in err


def test_the_c_code_takes_sizes_as_arguments(capsys):
    from opc.cli import main

    assert main(["compile", str(HERE / "dynamic_ops.mlir"), "--emit", "c"]) == 0
    c = capsys.readouterr().out
    (proto,) = [line for line in c.splitlines() if line.startswith("int opc_fn_unary(")]
    assert proto.endswith(", const int64_t opc_n0) {") and "const float *restrict x_" in proto, proto


def test_verifier_checks_what_is_static():
    from opc.errors import InputError

    bad = """func.func @f(%x: tensor<?x8xf32>, %y: tensor<?x9xf32>) -> tensor<?x8xf32> {
  %a = opc.add %x, %y : (tensor<?x8xf32>, tensor<?x9xf32>) -> tensor<?x8xf32>
  func.return %a : tensor<?x8xf32>
}"""
    with pytest.raises(InputError, match=r"<string>:2:\d+: error: .*do not broadcast"):
        opc.compile(bad)


# ---------------------------------------------------------------------------
# Gradients with run-time sizes
# ---------------------------------------------------------------------------

GRAD = """func.func @loss(%x: tensor<?x6xf64>, %w: tensor<6x4xf64>, %b: tensor<4xf64>) -> tensor<f64> {
  %y = opc.matmul %x, %w : (tensor<?x6xf64>, tensor<6x4xf64>) -> tensor<?x4xf64>
  %z = opc.add %y, %b : (tensor<?x4xf64>, tensor<4xf64>) -> tensor<?x4xf64>
  %t = opc.tanh %z : (tensor<?x4xf64>) -> tensor<?x4xf64>
  %s = opc.softmax %t {axis = -1} : (tensor<?x4xf64>) -> tensor<?x4xf64>
  %r = opc.reshape %s : (tensor<?x4xf64>) -> tensor<?x2x2xf64>
  %m = opc.reduce_max %r {axes = array<i64: 2>} : (tensor<?x2x2xf64>) -> tensor<?x2xf64>
  %l = opc.reduce_mean %m {axes = array<i64: 0, 1>} : (tensor<?x2xf64>) -> tensor<f64>
  func.return %l : tensor<f64>
}"""


def loss_np(x, w, b):
    t = np.tanh(x @ w + b)
    e = np.exp(t - t.max(-1, keepdims=True))
    s = e / e.sum(-1, keepdims=True)
    return s.reshape(len(x), 2, 2).max(2).mean()


@pytest.fixture(scope="module")
def g():
    return opc.compile(GRAD, grad=True)


@pytest.mark.parametrize("n", [1, 2, 9])
def test_gradient_matches_finite_differences(g, n):
    rng = np.random.default_rng(n)
    args = [rng.standard_normal(s) for s in ((n, 6), (6, 4), (4,))]
    np.testing.assert_allclose(g.loss(*args), loss_np(*args), rtol=1e-12)
    grads = g.loss_grad(*args, np.float64(1.0))
    for k, a in enumerate(args):
        num = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            hi = [v.copy() for v in args]
            lo = [v.copy() for v in args]
            hi[k][i] += 1e-6
            lo[k][i] -= 1e-6
            num[i] = (loss_np(*hi) - loss_np(*lo)) / 2e-6
        np.testing.assert_allclose(grads[k], num, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("n,k", [(0, 0), (0, 3), (1, 1), (5, 2), (37, 0)])
def test_concat_along_a_run_time_dim(m, n, k):
    cache, step, other = rand(2, n, 4), rand(2, 1, 4, seed=1), rand(2, k, 4, seed=2)
    a, b = m.grow(cache, step, other)
    np.testing.assert_array_equal(a, np.concatenate([cache, step], 1))
    np.testing.assert_array_equal(b, np.concatenate([cache, other, step], 1))


def test_a_negative_computed_size_is_a_value_error_naming_the_sizes():
    m2 = opc.compile("""func.func @shorter(%x: tensor<?xf32>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = tensor.dim %x, %c0 : tensor<?xf32>
  %m = arith.subi %n, %c1 : index
  %r = opc.full %m {value = 2.0 : f64} : (index) -> tensor<?xf32>
  func.return %r : tensor<?xf32>
}""")
    np.testing.assert_array_equal(m2.shorter(np.ones(3, np.float32)), [2.0, 2.0])
    with pytest.raises(ValueError, match=r"shorter\(\): result #0 would have shape \[-1\].*n0=0"):
        m2.shorter(np.ones(0, np.float32))
