"""MLIR's tensor.extract_slice / tensor.insert_slice with run-time offsets and sizes
(opc/dialects/slices.py): against NumPy, gradients against central differences in f64, over
static and `?` dims, offsets at the edges, zero-size slices, and inside scf.for loops; offsets
out of bounds are a ValueError naming the op and the bounds, before anything is read."""

from __future__ import annotations

import re

import numpy as np
import pytest

import opc
from opc.errors import InputError


def check_grad(fn, gfn, args, rng, h=1e-6, tol=1e-6):
    """<grad, v> against (L(a + hv) - L(a - hv)) / 2h, L = sum <f(a)_k, dout_k>."""
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    douts = [rng.standard_normal(o.shape) for o in outs]
    grads = gfn(*args, *douts)
    grads = grads if isinstance(grads, tuple) else (grads,)
    vs = [rng.standard_normal(a.shape) for a in args]

    def loss(s):
        o = fn(*[a + s * v for a, v in zip(args, vs)])
        return sum(float((a * d).sum()) for a, d in zip(o if isinstance(o, tuple) else (o,), douts))

    fd = (loss(h) - loss(-h)) / (2 * h)
    an = sum(float((g * v).sum()) for g, v in zip(grads, vs))
    assert abs(fd - an) <= tol * max(1.0, abs(fd)), (fd, an)


def first(grads):
    """The gradient of the first argument (f_grad gives one per float argument: one is no tuple)."""
    return grads[0] if isinstance(grads, tuple) else grads


# -- a row at a run-time offset: x[o:o+2, 1:4] -----------------------------------------------

def window(dim0: str, t: str) -> str:
    return f"""
func.func @f(%x: tensor<{dim0}x4x{t}>, %o: tensor<i64>) -> tensor<2x3x{t}> {{
  %oi = tensor.extract %o[] : tensor<i64>
  %off = arith.index_cast %oi : i64 to index
  %r = tensor.extract_slice %x[%off, 1] [2, 3] [1, 1] : tensor<{dim0}x4x{t}> to tensor<2x3x{t}>
  %e = opc.tanh %r : (tensor<2x3x{t}>) -> tensor<2x3x{t}>
  return %e : tensor<2x3x{t}>
}}
"""


@pytest.fixture(scope="module")
def windows():
    return {d: opc.compile(window(d, "f64"), grad=True) for d in ("6", "?")}


@pytest.mark.parametrize("dim0", ["6", "?"])
@pytest.mark.parametrize("off", [0, 2, 4])
def test_window_forward_and_grad(windows, dim0, off):
    m = windows[dim0]
    x = np.random.default_rng(off).standard_normal((6, 4))
    np.testing.assert_allclose(m.f(x, np.array(off)), np.tanh(x[off:off + 2, 1:4]), rtol=1e-12)
    check_grad(lambda x: m.f(x, np.array(off)), lambda x, d: first(m.f_grad(x, np.array(off), d)), [x],
               np.random.default_rng(1))


@pytest.mark.parametrize("dim0", ["6", "?"])
@pytest.mark.parametrize("off", [5, -1, 1 << 40])
def test_window_out_of_bounds(windows, dim0, off):
    with pytest.raises(ValueError, match=r"tensor.extract_slice: dim 0 has offset -?\d+, outside \[0, "):
        windows[dim0].f(np.zeros((6, 4)), np.array(off))


def test_window_dynamic_source_too_small(windows):
    with pytest.raises(ValueError, match="tensor.extract_slice: dim 0 has offset 0"):
        windows["?"].f(np.zeros((1, 4)), np.array(0))
    out = windows["?"].f(np.ones((2, 4)), np.array(0))
    np.testing.assert_allclose(out, np.tanh(np.ones((2, 3))))


# -- run-time sizes: x[1:n-1, :] and its insert back -----------------------------------------

INNER = """
func.func @f(%x: tensor<?x3xf64>) -> (tensor<?x3xf64>, tensor<?x3xf64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %n = tensor.dim %x, %c0 : tensor<?x3xf64>
  %m = arith.subi %n, %c2 : index
  %s = tensor.extract_slice %x[1, 0] [%m, 3] [1, 1] : tensor<?x3xf64> to tensor<?x3xf64>
  %t = opc.sin %s : (tensor<?x3xf64>) -> tensor<?x3xf64>
  %y = opc.mul %x, %x : (tensor<?x3xf64>, tensor<?x3xf64>) -> tensor<?x3xf64>
  %z = tensor.insert_slice %t into %y[1, 0] [%m, 3] [1, 1] : tensor<?x3xf64> into tensor<?x3xf64>
  return %t, %z : tensor<?x3xf64>, tensor<?x3xf64>
}
"""


@pytest.fixture(scope="module")
def inner():
    return opc.compile(INNER, grad=True)


@pytest.mark.parametrize("n", [2, 3, 7])
def test_run_time_size(inner, n):
    x = np.random.default_rng(n).standard_normal((n, 3))
    t, z = inner.f(x)
    np.testing.assert_allclose(t, np.sin(x[1:n - 1]))
    want = x * x
    want[1:n - 1] = np.sin(x[1:n - 1])
    np.testing.assert_allclose(z, want)
    check_grad(inner.f, inner.f_grad, [x], np.random.default_rng(2))


@pytest.mark.parametrize("n", [0, 1])
def test_run_time_size_negative(inner, n):
    with pytest.raises(ValueError, match=r"is negative|has size -\d, outside"):
        inner.f(np.zeros((n, 3)))


# -- strides, rank-reducing, zero-size -----------------------------------------------------

STRIDED = """
func.func @f(%x: tensor<7x5xf64>, %o: tensor<i64>) -> tensor<3xf64> {
  %oi = tensor.extract %o[] : tensor<i64>
  %off = arith.index_cast %oi : i64 to index
  %r = tensor.extract_slice %x[1, %off] [3, 1] [2, 1] : tensor<7x5xf64> to tensor<3xf64>
  return %r : tensor<3xf64>
}
"""

EMPTY = """
func.func @f(%x: tensor<?x4xf64>, %o: tensor<i64>) -> tensor<0x4xf64> {
  %oi = tensor.extract %o[] : tensor<i64>
  %off = arith.index_cast %oi : i64 to index
  %r = tensor.extract_slice %x[%off, 0] [0, 4] [1, 1] : tensor<?x4xf64> to tensor<0x4xf64>
  return %r : tensor<0x4xf64>
}
"""


@pytest.mark.parametrize("off", [0, 4])
def test_strided_rank_reducing(off):
    m = opc.compile(STRIDED, grad=True)
    x = np.random.default_rng(0).standard_normal((7, 5))
    np.testing.assert_allclose(m.f(x, np.array(off)), x[1:7:2, off])
    check_grad(lambda x: m.f(x, np.array(off)), lambda x, d: first(m.f_grad(x, np.array(off), d)), [x],
               np.random.default_rng(3))


@pytest.mark.parametrize(("n", "off", "ok"), [(0, 0, True), (3, 3, True), (3, 4, False)])
def test_zero_size(n, off, ok):
    m = opc.compile(EMPTY)
    x = np.zeros((n, 4))
    if ok:
        assert m.f(x, np.array(off)).shape == (0, 4)
    else:
        with pytest.raises(ValueError, match="has offset 4"):
            m.f(x, np.array(off))


@pytest.mark.parametrize(("body", "message"), [
    ("%r = tensor.extract_slice %x[3, 0] [2, 4] [1, 1] : tensor<4x4xf32> to tensor<2x4xf32>", "runs past"),
    ("%r = tensor.extract_slice %x[0, 0] [2, 4] [1, 1] : tensor<4x4xf32> to tensor<2x3xf32>", "dim 1 has size 4"),
    ("%r = tensor.extract_slice %x[0, 0] [2, 3] [1, 1] : tensor<4x4xf32> to tensor<3xf32>", "only unit dims"),
])
def test_static_verification(body, message):
    src = f"""
func.func @f(%x: tensor<4x4xf32>) -> tensor<1xf32> {{
  {body}
  %z = opc.full {{value = 0.0 : f64}} : () -> tensor<1xf32>
  return %z : tensor<1xf32>
}}
"""
    with pytest.raises(InputError, match=message):
        opc.compile(src)


# -- in a loop: read x[i], write y[i] into a carried tensor ----------------------------------

def recurrence(t: str, rows: str) -> str:
    full = "opc.full %n {value = 0.0 : f64} : (index)" if rows == "?" else "opc.full {value = 0.0 : f64} : ()"
    return f"""
func.func @f(%x: tensor<{rows}x4x{t}>, %h0: tensor<4x{t}>) -> (tensor<{rows}x4x{t}>, tensor<4x{t}>) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = tensor.dim %x, %c0 : tensor<{rows}x4x{t}>
  %y0 = {full} -> tensor<{rows}x4x{t}>
  %r:2 = scf.for %i = %c0 to %n step %c1 iter_args(%y = %y0, %h = %h0) -> (tensor<{rows}x4x{t}>, tensor<4x{t}>) {{
    %row = tensor.extract_slice %x[%i, 0] [1, 4] [1, 1] : tensor<{rows}x4x{t}> to tensor<4x{t}>
    %a = opc.mul %h, %row : (tensor<4x{t}>, tensor<4x{t}>) -> tensor<4x{t}>
    %b = opc.add %a, %row : (tensor<4x{t}>, tensor<4x{t}>) -> tensor<4x{t}>
    %hn = opc.tanh %b : (tensor<4x{t}>) -> tensor<4x{t}>
    %h2 = opc.reshape %hn : (tensor<4x{t}>) -> tensor<1x4x{t}>
    %yn = tensor.insert_slice %h2 into %y[%i, 0] [1, 4] [1, 1] : tensor<1x4x{t}> into tensor<{rows}x4x{t}>
    scf.yield %yn, %hn : tensor<{rows}x4x{t}>, tensor<4x{t}>
  }}
  return %r#0, %r#1 : tensor<{rows}x4x{t}>, tensor<4x{t}>
}}
"""


def recurrence_ref(x, h):
    y = np.zeros_like(x)
    for i in range(x.shape[0]):
        h = np.tanh(h * x[i] + x[i])
        y[i] = h
    return y, h


@pytest.mark.parametrize("t", ["f32", "f64"])
def test_loop_static(t):
    m = opc.compile(recurrence(t, "5"), grad=t == "f64")
    dtype = np.float32 if t == "f32" else np.float64
    rng = np.random.default_rng(0)
    x, h = rng.standard_normal((5, 4)).astype(dtype), rng.standard_normal(4).astype(dtype)
    for got, want in zip(m.f(x, h), recurrence_ref(x, h)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if t == "f64":
        check_grad(m.f, m.f_grad, [x, h], rng)


@pytest.mark.parametrize("n", [0, 1, 6])
def test_loop_run_time_rows(n):
    """x: tensor<?x4xf64> read a row per iteration, y: a carried tensor<?x4xf64>: one compile."""
    m = opc.compile(recurrence("f64", "?"))
    rng = np.random.default_rng(n)
    x, h = rng.standard_normal((n, 4)), rng.standard_normal(4)
    for got, want in zip(m.f(x, h), recurrence_ref(x, h)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_loop_run_time_rows_grad():
    """The backward loop pops the carried tensor<?x4xf64> at its run-time size."""
    m = opc.compile(recurrence("f64", "?"), grad=True)
    rng = np.random.default_rng(7)
    for n in (1, 5):
        check_grad(m.f, m.f_grad, [rng.standard_normal((n, 4)), rng.standard_normal(4)], rng)


GROW = """
func.func @grow(%cache: tensor<2x?x3xf64>, %step: tensor<2x1x3xf64>, %other: tensor<2x?x3xf64>) -> tensor<2x?x3xf64> {
  %b = opc.concat %cache, %other, %step {axis = 1 : i64} : (tensor<2x?x3xf64>, tensor<2x?x3xf64>, tensor<2x1x3xf64>) -> tensor<2x?x3xf64>
  %t = opc.tanh %b : (tensor<2x?x3xf64>) -> tensor<2x?x3xf64>
  func.return %t : tensor<2x?x3xf64>
}
"""


@pytest.mark.parametrize(("p", "q"), [(0, 0), (3, 0), (2, 5)])
def test_concat_grad_along_run_time_dim(p, q):
    """Each operand's gradient is its slab of dout, at an offset known at run time."""
    m = opc.compile(GROW, grad=True)
    rng = np.random.default_rng(p + q)
    args = [rng.standard_normal((2, p, 3)), rng.standard_normal((2, 1, 3)), rng.standard_normal((2, q, 3))]
    np.testing.assert_allclose(m.grow(*args), np.tanh(np.concatenate([args[0], args[2], args[1]], axis=1)))
    check_grad(m.grow, m.grow_grad, args, rng)


# -- an LSTM through scf.for: what the RNN converters need ---------------------------------

LSTM = """
func.func @lstm(%x: tensor<?x2x3xf64>, %w: tensor<3x8xf64>, %r: tensor<2x8xf64>, %h0: tensor<2x2xf64>, %c0s: tensor<2x2xf64>) -> (tensor<?x2x2xf64>, tensor<2x2xf64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = tensor.dim %x, %c0 : tensor<?x2x3xf64>
  %y0 = opc.full %t {value = 0.0 : f64} : (index) -> tensor<?x2x2xf64>
  %res:3 = scf.for %i = %c0 to %t step %c1 iter_args(%y = %y0, %h = %h0, %c = %c0s) -> (tensor<?x2x2xf64>, tensor<2x2xf64>, tensor<2x2xf64>) {
    %xt = tensor.extract_slice %x[%i, 0, 0] [1, 2, 3] [1, 1, 1] : tensor<?x2x3xf64> to tensor<2x3xf64>
    %gx = opc.matmul %xt, %w : (tensor<2x3xf64>, tensor<3x8xf64>) -> tensor<2x8xf64>
    %gh = opc.matmul %h, %r : (tensor<2x2xf64>, tensor<2x8xf64>) -> tensor<2x8xf64>
    %g = opc.add %gx, %gh : (tensor<2x8xf64>, tensor<2x8xf64>) -> tensor<2x8xf64>
    %gi = tensor.extract_slice %g[0, 0] [2, 2] [1, 1] : tensor<2x8xf64> to tensor<2x2xf64>
    %gf = tensor.extract_slice %g[0, 2] [2, 2] [1, 1] : tensor<2x8xf64> to tensor<2x2xf64>
    %gc = tensor.extract_slice %g[0, 4] [2, 2] [1, 1] : tensor<2x8xf64> to tensor<2x2xf64>
    %go = tensor.extract_slice %g[0, 6] [2, 2] [1, 1] : tensor<2x8xf64> to tensor<2x2xf64>
    %i1 = opc.sigmoid %gi : (tensor<2x2xf64>) -> tensor<2x2xf64>
    %f1 = opc.sigmoid %gf : (tensor<2x2xf64>) -> tensor<2x2xf64>
    %c1t = opc.tanh %gc : (tensor<2x2xf64>) -> tensor<2x2xf64>
    %o1 = opc.sigmoid %go : (tensor<2x2xf64>) -> tensor<2x2xf64>
    %a = opc.mul %f1, %c : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
    %b = opc.mul %i1, %c1t : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
    %cn = opc.add %a, %b : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
    %tc = opc.tanh %cn : (tensor<2x2xf64>) -> tensor<2x2xf64>
    %hn = opc.mul %o1, %tc : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
    %yn = tensor.insert_slice %hn into %y[%i, 0, 0] [1, 2, 2] [1, 1, 1] : tensor<2x2xf64> into tensor<?x2x2xf64>
    scf.yield %yn, %hn, %cn : tensor<?x2x2xf64>, tensor<2x2xf64>, tensor<2x2xf64>
  }
  return %res#0, %res#2 : tensor<?x2x2xf64>, tensor<2x2xf64>
}
"""
def sig(v):
    return 1 / (1 + np.exp(-v))


def lstm_ref(x, w, r, h, c):
    ys = []
    for t in range(x.shape[0]):
        g = x[t] @ w + h @ r
        i, f, cc, o = sig(g[:, 0:2]), sig(g[:, 2:4]), np.tanh(g[:, 4:6]), sig(g[:, 6:8])
        c = f * c + i * cc
        h = o * np.tanh(c)
        ys.append(h)
    return np.array(ys).reshape(x.shape[0], 2, 2), c


@pytest.mark.parametrize("steps", [0, 1, 4])
def test_lstm_through_a_loop(steps):
    """An LSTM over a run-time sequence in an scf.for: x[t] read with extract_slice (fed to a
    matmul), the gates sliced out of one GEMM, h[t] written with insert_slice into a carried
    tensor<?x2x2xf64>; forward against NumPy, gradient of every input against central differences."""
    m = opc.compile(LSTM, grad=True)
    rng = np.random.default_rng(steps)
    args = [rng.standard_normal((steps, 2, 3)), rng.standard_normal((3, 8)), rng.standard_normal((2, 8)),
            rng.standard_normal((2, 2)), rng.standard_normal((2, 2))]
    for got, want in zip(m.lstm(*args), lstm_ref(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    if steps:
        check_grad(m.lstm, m.lstm_grad, args, rng)


def test_explain_lists_the_slices(tmp_path, capsys):
    from opc.cli import main

    path = tmp_path / "loop.mlir"
    path.write_text(recurrence("f32", "?"))
    assert main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    for op in ("tensor.extract_slice", "tensor.insert_slice"):
        assert re.search(rf"^{op}\s+1\s+kernel$", out, re.M), out


ROWS = """
func.func @f(%x: tensor<6x8xf32>, %o: tensor<i64>) -> (tensor<3x8xf32>, tensor<3x5xf32>) {
  %oi = tensor.extract %o[] : tensor<i64>
  %off = arith.index_cast %oi : i64 to index
  %s = tensor.extract_slice %x[%off, 0] [3, 8] [1, 1] : tensor<6x8xf32> to tensor<3x8xf32>
  %m = opc.reduce_max %s {axes = array<i64: 1>, keepdim = true} : (tensor<3x8xf32>) -> tensor<3x1xf32>
  %d = opc.sub %s, %m : (tensor<3x8xf32>, tensor<3x1xf32>) -> tensor<3x8xf32>
  %e = opc.exp %d : (tensor<3x8xf32>) -> tensor<3x8xf32>
  %z = opc.reduce_sum %e {axes = array<i64: 1>, keepdim = true} : (tensor<3x8xf32>) -> tensor<3x1xf32>
  %r = opc.div %e, %z : (tensor<3x8xf32>, tensor<3x1xf32>) -> tensor<3x8xf32>
  %q = tensor.extract_slice %r[0, %off] [3, 5] [1, 1] : tensor<3x8xf32> to tensor<3x5xf32>
  %w = opc.softmax %q {axis = 1 : i64} : (tensor<3x5xf32>) -> tensor<3x5xf32>
  return %r, %w : tensor<3x8xf32>, tensor<3x5xf32>
}
"""


def softmax_ref(a):
    e = np.exp(a - a.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("off", [0, 3])
def test_slices_in_row_kernels(fuse, off):
    """A softmax composed of reductions over a slice at a run-time offset (a row kernel reads it in
    place), and opc.softmax of a slice of its result."""
    m = opc.compile(ROWS, fuse=fuse)
    x = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)
    r, w = m.f(x, np.array(off))
    np.testing.assert_allclose(r, softmax_ref(x[off:off + 3]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w, softmax_ref(softmax_ref(x[off:off + 3])[:, off:off + 5]), rtol=1e-5, atol=1e-6)


PUT = """
func.func @f(%x: tensor<?x4xf64>, %v: tensor<4xf64>, %o: tensor<i64>) -> tensor<?x4xf64> {
  %oi = tensor.extract %o[] : tensor<i64>
  %off = arith.index_cast %oi : i64 to index
  %y = tensor.insert_slice %v into %x[%off, 0] [1, 4] [1, 1] : tensor<4xf64> into tensor<?x4xf64>
  %t = opc.tanh %y : (tensor<?x4xf64>) -> tensor<?x4xf64>
  return %t : tensor<?x4xf64>
}
"""


@pytest.mark.parametrize(("rows", "off"), [(1, 0), (5, 4), (5, 0), (3, 3), (0, 0), (4, -1)])
def test_insert_at_run_time_offset(rows, off):
    m = opc.compile(PUT, grad=True)
    rng = np.random.default_rng(rows)
    x, v = rng.standard_normal((rows, 4)), rng.standard_normal(4)
    if not 0 <= off < rows:
        with pytest.raises(ValueError, match=rf"tensor.insert_slice: dim 0 has offset {off}, outside \[0, "):
            m.f(x, v, np.array(off))
        return
    want = x.copy()
    want[off] = v
    np.testing.assert_allclose(m.f(x, v, np.array(off)), np.tanh(want))
    check_grad(lambda x, v: m.f(x, v, np.array(off)), lambda x, v, d: m.f_grad(x, v, np.array(off), d), [x, v], rng)


READ_SIZE = """
func.func @f(%x: tensor<?xf32>, %o: tensor<i64>) -> tensor<?xf32> {
  %oi = tensor.extract %o[] : tensor<i64>
  %k = arith.index_cast %oi : i64 to index
  %r = tensor.extract_slice %x[0] [%k] [1] : tensor<?xf32> to tensor<?xf32>
  return %r : tensor<?xf32>
}
"""


@pytest.mark.parametrize("n, k", [(5, 0), (5, 3), (5, 5), (1, 1), (0, 0)])
def test_a_size_read_from_a_value(n, k):
    """x[:k] with k read from a tensor: a data size defined where k is read, the result allocated by
    the function (no bound before the call) and handed out; its gradient scatters dout back."""
    m = opc.compile(READ_SIZE, grad=True)
    x = np.arange(n, dtype=np.float32) + 1
    r = m.f(x, np.array(k))
    assert r.shape == (k,) and np.array_equal(r, x[:k])
    assert m.f.sig.handed == [0] and m.f.sig.found[0][1] == "?"
    d = np.arange(k, dtype=np.float32) + 10
    want = np.zeros(n, np.float32)
    want[:k] = d
    np.testing.assert_array_equal(m.f_grad(x, np.array(k), d), want)


@pytest.mark.parametrize("k, message", [(6, "dim 0 has size 6, outside"), (-1, "must not be negative")])
def test_a_size_read_from_a_value_out_of_range(k, message):
    m = opc.compile(READ_SIZE)
    with pytest.raises(ValueError, match=message):
        m.f(np.zeros(5, np.float32), np.array(k))


# -- contiguous slices read in place (opc-schedule's slice views) ------------------------------

def step_gemm(offsets: str, sizes: str, cols: int) -> str:
    """Each step reads one slice of x as a GEMM operand (so no nest inlines it): a contiguous one is
    a pointer into x, another is copied; both must read the same numbers."""
    return f"""
func.func @f(%x: tensor<5x2x3x8xf32>, %w: tensor<{cols}x8xf32>, %h0: tensor<3x8xf32>) -> tensor<3x8xf32> {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c5 = arith.constant 5 : index
  %r = scf.for %i = %c0 to %c5 step %c1 iter_args(%h = %h0) -> (tensor<3x8xf32>) {{
    %row = tensor.extract_slice %x[{offsets}] [{sizes}] [1, 1, 1, 1] : tensor<5x2x3x8xf32> to tensor<3x{cols}xf32>
    %p = opc.matmul %row, %w : (tensor<3x{cols}xf32>, tensor<{cols}x8xf32>) -> tensor<3x8xf32>
    %b = opc.add %p, %h : (tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
    %hn = opc.tanh %b : (tensor<3x8xf32>) -> tensor<3x8xf32>
    scf.yield %hn : tensor<3x8xf32>
  }}
  return %r : tensor<3x8xf32>
}}
"""


SLICES = {  # offsets, sizes, columns, the slice of x[i] read, whether it is a view
    "whole rows": ("%i, 1, 0, 0", "1, 1, 3, 8", 8, lambda xi: xi[1], True),
    "columns": ("%i, 0, 0, 2", "1, 1, 3, 4", 4, lambda xi: xi[0, :, 2:6], False),
}


@pytest.mark.parametrize("name", SLICES)
def test_slice_read_by_a_gemm_in_a_loop(name, tmp_path, capsys):
    from opc.cli import main

    offsets, sizes, cols, part, view = SLICES[name]
    text = step_gemm(offsets, sizes, cols)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 2, 3, 8)).astype(np.float32)
    w, h = rng.standard_normal((cols, 8)).astype(np.float32), rng.standard_normal((3, 8)).astype(np.float32)
    want = h.astype(np.float64)
    for i in range(5):
        want = np.tanh(part(x[i]).astype(np.float64) @ w + want)
    np.testing.assert_allclose(opc.compile(text).f(x, w, h), want, rtol=1e-5, atol=1e-5)
    path = tmp_path / "step.mlir"
    path.write_text(text)
    assert main(["explain", str(path), "--kernels"]) == 0
    kind = "view" if view else "elementwise"
    assert re.search(rf"kernel \d+ \({kind}\): tensor.extract_slice$", capsys.readouterr().out, re.M)


ROWS_GEMM = """
func.func @f(%x: tensor<6x8xf32>, %o: tensor<i64>, %w: tensor<8x4xf32>) -> tensor<3x4xf32> {
  %oi = tensor.extract %o[] : tensor<i64>
  %off = arith.index_cast %oi : i64 to index
  %s = tensor.extract_slice %x[%off, 0] [3, 8] [1, 1] : tensor<6x8xf32> to tensor<3x8xf32>
  %y = opc.matmul %s, %w : (tensor<3x8xf32>, tensor<8x4xf32>) -> tensor<3x4xf32>
  return %y : tensor<3x4xf32>
}
"""


@pytest.mark.parametrize("off", [0, 2, 3, 4, -1])
def test_rows_at_a_run_time_offset_read_in_place(off):
    """A function's argument sliced at a run-time offset: read in place, the offset checked first."""
    m = opc.compile(ROWS_GEMM)
    rng = np.random.default_rng(off + 1)
    x, w = rng.standard_normal((6, 8)).astype(np.float32), rng.standard_normal((8, 4)).astype(np.float32)
    if not 0 <= off <= 3:
        with pytest.raises(ValueError, match="offset"):
            m.f(x, np.array(off), w)
        return
    np.testing.assert_allclose(m.f(x, np.array(off), w), x[off:off + 3].astype(np.float64) @ w, rtol=1e-5, atol=1e-5)
