"""Gradients of nn ops with a run-time batch or sequence (conv, max_pool, layer_norm, causal
attention, softmax cross entropy) against central differences in f64, at several sizes from one
compiled module; grad=2 through the attention's composite rule (its causal mask built at run-time
lengths) and through the conv's im2col decomposition (its batch read at run time) against
differences of the first-order gradient."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import opc

HERE = Path(__file__).parent


TEXT = (HERE / "dynamic_nn.mlir").read_text()


@pytest.fixture(scope="module")
def m():
    return opc.compile(TEXT, grad=True)


@pytest.fixture(scope="module")
def m2():
    return opc.compile(TEXT.split("// layer norm")[1].split("\n", 1)[1], grad=2)


def numeric_grad(f, args, k, h=1e-6):  # noqa: ANN001, ANN201
    num = np.zeros_like(args[k])
    for i in np.ndindex(args[k].shape):
        hi, lo = [a.copy() for a in args], [a.copy() for a in args]
        hi[k][i] += h
        lo[k][i] -= h
        num[i] = (float(f(*hi)) - float(f(*lo))) / (2 * h)
    return num


def check(fn, grad, args, wrt):  # noqa: ANN001
    grads = grad(*args, np.float64(1.0))
    grads = grads if isinstance(grads, tuple) else (grads,)
    for k, g in zip(wrt, grads):
        np.testing.assert_allclose(g, numeric_grad(fn, args, k), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("batch", [1, 3])
def test_conv_pool_with_a_run_time_batch(m, batch):
    rng = np.random.default_rng(batch)
    args = [rng.standard_normal((batch, 2, 6, 6)), rng.standard_normal((3, 2, 3, 3)) * 0.5]
    check(m.cnn, m.cnn_grad, args, [0, 1])


@pytest.mark.parametrize("seq", [1, 2, 7])
def test_attention_and_cross_entropy_over_a_run_time_sequence(m, seq):
    rng = np.random.default_rng(seq)
    args = [rng.standard_normal((seq, 4)), 1 + 0.1 * rng.standard_normal(4), 0.1 * rng.standard_normal(4),
            rng.integers(0, 4, (seq, 1)).astype(np.int64)]
    check(m.seq, m.seq_grad, args, [0, 1, 2])


@pytest.mark.parametrize("seq", [1, 4])
def test_second_order_through_run_time_causal_attention(m2, seq):
    """<d/dx grad_x L, v> against central differences of the first-order gradient along v."""
    rng = np.random.default_rng(10 + seq)
    x, g, h = rng.standard_normal((seq, 4)), 1 + 0.1 * rng.standard_normal(4), 0.1 * rng.standard_normal(4)
    label = rng.integers(0, 4, (seq, 1)).astype(np.int64)
    first = m2.seq_grad(x, g, h, label, np.float64(1.0))
    v = rng.standard_normal(x.shape)
    second = m2.seq_grad_grad(x, g, h, label, np.float64(1.0), v, np.zeros(4), np.zeros(4))
    second = second if isinstance(second, tuple) else (second,)
    eps = 1e-5
    hi = m2.seq_grad(x + eps * v, g, h, label, np.float64(1.0))[0]
    lo = m2.seq_grad(x - eps * v, g, h, label, np.float64(1.0))[0]
    np.testing.assert_allclose(second[0], (hi - lo) / (2 * eps), rtol=1e-5, atol=1e-6)
    assert first[0].shape == (seq, 4)


@pytest.fixture(scope="module")
def m2_cnn():
    return opc.compile(TEXT.split("// layer norm")[0], grad=2)


@pytest.mark.parametrize("batch", [1, 3])
def test_second_order_through_a_conv_with_a_run_time_batch(m2_cnn, batch):
    """conv + tanh + max_pool with a `?` batch, grad=2 (the conv's second order through its im2col
    decomposition, the batch read at run time): <d/d(x, w) grad L, (v, u)> against central
    differences of the first-order gradient along (v, u), at two batch sizes from one module."""
    rng = np.random.default_rng(20 + batch)
    x, w = rng.standard_normal((batch, 2, 6, 6)), rng.standard_normal((3, 2, 3, 3)) * 0.5
    v, u = rng.standard_normal(x.shape), rng.standard_normal(w.shape)
    second = m2_cnn.cnn_grad_grad(x, w, np.float64(1.0), v, u)
    eps = 1e-5
    hi = m2_cnn.cnn_grad(x + eps * v, w + eps * u, np.float64(1.0))
    lo = m2_cnn.cnn_grad(x - eps * v, w - eps * u, np.float64(1.0))
    for k in range(2):
        np.testing.assert_allclose(second[k], (hi[k] - lo[k]) / (2 * eps), rtol=1e-5, atol=1e-7)


def test_the_conv_decomposition_takes_a_run_time_batch():
    """decompose='all' (im2col in primitives) against the conv kernels, at batch 1 and 4."""
    text = TEXT.split("// layer norm")[0]
    kernels, composed = opc.compile(text), opc.compile(text, decompose="all")
    rng = np.random.default_rng(5)
    for n in (1, 4):
        x, w = rng.standard_normal((n, 2, 6, 6)), rng.standard_normal((3, 2, 3, 3))
        np.testing.assert_allclose(composed.cnn(x, w), kernels.cnn(x, w), rtol=1e-12)


def grouped_norm_src(op: str, groups: int, x_t: str, stats_t: str) -> str:
    attrs = (f"num_groups = {groups}, " if op == "group_norm" else "") + "epsilon = 1.0e-05 : f64"
    return (f"func.func @f(%x: {x_t}, %g: tensor<4xf64>, %b: tensor<4xf64>) -> ({x_t}, {stats_t}, {stats_t}) {{\n"
            f"  %y, %m, %r = opc.{op} %x, %g, %b {{{attrs}}} : ({x_t}, tensor<4xf64>, tensor<4xf64>) -> "
            f"({x_t}, {stats_t}, {stats_t})\n  func.return %y, %m, %r : {x_t}, {stats_t}, {stats_t}\n}}\n")


@pytest.mark.parametrize("decompose", [None, "all"])
@pytest.mark.parametrize(("op", "groups"), [("group_norm", 2), ("group_norm", 1), ("instance_norm", 4)])
def test_grouped_norms_with_a_run_time_batch(op, groups, decompose):
    """group_norm / instance_norm over [?, 4, 3] (they run as a layer norm over [N * groups, rest]:
    that reshape's `?` size was once N's `?` marker times groups, a negative dim after opc-grad, found
    by fuzz_dynamic.py): y, mean and rstd against NumPy at batch 0, 1 and 3 from one module, and
    the gradient of sum(y * dy) + sum(mean) + sum(rstd) against central differences."""
    m = opc.compile(grouped_norm_src(op, groups, "tensor<?x4x3xf64>", f"tensor<?x{groups}xf64>"), grad=True,
                    decompose=decompose)
    rng = np.random.default_rng(groups)
    g, b = 1 + 0.1 * rng.standard_normal(4), rng.standard_normal(4)
    for n in (0, 1, 3):
        x = rng.standard_normal((n, 4, 3))
        xg = x.reshape(n, groups, 12 // groups)
        mean, var = xg.mean(axis=2), xg.var(axis=2)
        y = ((xg - mean[..., None]) / np.sqrt(var[..., None] + 1e-5)).reshape(x.shape) * g[:, None] + b[:, None]
        for got, want in zip(m.f(x, g, b), (y, mean, 1 / np.sqrt(var + 1e-5))):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
        if n:
            dy, dm, dr = rng.standard_normal(x.shape), np.ones((n, groups)), np.ones((n, groups))

            def loss(x, g, b):  # noqa: ANN001, ANN202
                y, mean, rstd = tuple(m.f(x, g, b))
                return np.sum(y * dy) + np.sum(mean) + np.sum(rstd)

            grads = m.f_grad(x, g, b, dy, dm, dr)
            for k, got in enumerate(grads):
                np.testing.assert_allclose(got, numeric_grad(loss, [x, g, b], k), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("decompose", [None, "all"])
def test_group_norm_with_run_time_spatial_dims(decompose):
    """[?, 4, ?]: the layer norm's rows and normalized length both computed from x's dims at run time."""
    m = opc.compile(grouped_norm_src("group_norm", 2, "tensor<?x4x?xf64>", "tensor<?x2xf64>"), decompose=decompose)
    rng = np.random.default_rng(7)
    g, b = rng.standard_normal(4), rng.standard_normal(4)
    for shape in [(2, 4, 5), (1, 4, 1), (3, 4, 2)]:
        x = rng.standard_normal(shape)
        xg = x.reshape(shape[0], 2, -1)
        mean, var = xg.mean(axis=2), xg.var(axis=2)
        y = ((xg - mean[..., None]) / np.sqrt(var[..., None] + 1e-5)).reshape(shape) * g[:, None] + b[:, None]
        for got, want in zip(m.f(x, g, b), (y, mean, 1 / np.sqrt(var + 1e-5))):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


BROADCAST_BATCH = """
func.func @mm(%w: tensor<2x3x4xf64>, %x: tensor<?x2x4x5xf64>) -> tensor<?x2x3x5xf64> {
  %y = opc.matmul %w, %x : (tensor<2x3x4xf64>, tensor<?x2x4x5xf64>) -> tensor<?x2x3x5xf64>
  func.return %y : tensor<?x2x3x5xf64>
}
func.func @gconv(%x: tensor<?x4x5xf64>, %w: tensor<6x2x3xf64>) -> tensor<?x6x3xf64> {
  %y = opc.conv %x, %w {group = 2} : (tensor<?x4x5xf64>, tensor<6x2x3xf64>) -> tensor<?x6x3xf64>
  func.return %y : tensor<?x6x3xf64>
}
"""


@pytest.mark.parametrize("decompose", [None, "all"])
def test_a_batch_operand_broadcast_along_a_run_time_batch(decompose):
    """A matmul operand [G, M, K] against [?, G, K, N] is copied to the full batch [?, G, M, K] first
    (one GEMM stride per operand): that copy was allocated with the `?` batch's symbol as a static
    dim (an internal compiler error), which the grouped conv's decomposition (decompose='all', its
    weights [G, Og, ck] against the patches [N, G, ck, P]) hit with any run-time batch (found by the
    CLI fuzzer on fuzz_dynamic.py's programs)."""
    m = opc.compile(BROADCAST_BATCH, decompose=decompose)
    rng = np.random.default_rng(11)
    w, wc = rng.standard_normal((2, 3, 4)), rng.standard_normal((6, 2, 3))
    for n in (0, 1, 3):
        x, xc = rng.standard_normal((n, 2, 4, 5)), rng.standard_normal((n, 4, 5))
        np.testing.assert_allclose(m.mm(w, x), w @ x, rtol=1e-12)
        want = np.stack([np.einsum("ncl,ocl->no", xc[:, 2 * (o // 3):2 * (o // 3) + 2, t:t + 3], wc[o:o + 1])[:, 0]
                         for o in range(6) for t in range(3)], axis=1).reshape(n, 6, 3)
        np.testing.assert_allclose(m.gconv(xc, wc), want, rtol=1e-12, atol=1e-12)
