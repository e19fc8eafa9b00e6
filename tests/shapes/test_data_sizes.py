"""Sizes that depend on the data (SPEC.md, "Run-time shapes"; docs/shapes.md): `opc.nonzero`'s
count, `opc.topk`'s k and `opc.unique`'s number of distinct values are known only once they run. The functions of data_sizes.mlir are compiled once and called
at sizes 0, 1, 5 and 37 (all zero, none zero, half) against NumPy; the gradient of a compress
(nonzero + gather) against central differences in f64; a count that must equal another size is
checked when it is known."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import opc
from opc.errors import InputError, UnsupportedError

HERE = Path(__file__).parent
SIZES = [0, 1, 5, 37]
FILLS = ["half", "zeros", "ones"]


@pytest.fixture(scope="module")
def m():
    return opc.compile((HERE / "data_sizes.mlir").read_text())


def sample(shape, dtype, fill: str, seed: int = 0) -> np.ndarray:
    """Values of `dtype` where about half (fill="half"), none ("ones") or all ("zeros") are zero."""
    rng = np.random.default_rng(seed + int(np.prod(shape)))
    if fill == "zeros":
        return np.zeros(shape, dtype)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5 if fill == "half" else np.ones(shape, bool)
    x = rng.integers(1, 5, shape) * np.where(rng.random(shape) < 0.5, -1, 1)
    if np.dtype(dtype).kind == "u":
        x = np.abs(x)
    if fill == "half":
        x = x * (rng.random(shape) < 0.5)
    return x.astype(dtype)


NONZERO = [  # (function, dtype, shape with n for the `?` dim)
    ("nz_f32", np.float32, lambda n: (n, 4)),
    ("nz_f64", np.float64, lambda n: (n,)),
    ("nz_f16", np.float16, lambda n: (n, 3)),
    ("nz_bf16", ml_dtypes.bfloat16, lambda n: (n, 3)),
    ("nz_i1", np.bool_, lambda n: (n,)),
    ("nz_i8", np.int8, lambda n: (3, n)),
    ("nz_ui8", np.uint8, lambda n: (n, 2)),
    ("nz_i32", np.int32, lambda n: (n, 2, 3)),
    ("nz_i64", np.int64, lambda n: (n,)),
]


@pytest.mark.parametrize("fill", FILLS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name,dtype,shape", NONZERO, ids=[c[0] for c in NONZERO])
def test_nonzero_matches_numpy(m, name, dtype, shape, n, fill):
    x = sample(shape(n), dtype, fill)
    got = getattr(m, name)(x)
    want = np.array(np.nonzero(x), np.int64).reshape(x.ndim, -1)
    assert got.dtype == np.int64 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fill", FILLS)
def test_nonzero_of_a_static_operand(m, fill):
    x = sample((2, 3, 4), np.float32, fill)
    np.testing.assert_array_equal(m.nz_static(x), np.array(np.nonzero(x)))


def test_nan_and_negative_zero(m):
    x = np.array([np.nan, -0.0, 0.0, np.inf, -1.0])
    np.testing.assert_array_equal(m.nz_f64(x), np.array(np.nonzero(x)))


@pytest.mark.parametrize("fill", FILLS)
@pytest.mark.parametrize("n", SIZES)
def test_compress(m, n, fill):
    x, c = sample((n, 3), np.float64, "half"), sample((n,), np.bool_, fill, seed=1)
    got = m.compress(x, c)
    np.testing.assert_allclose(got, np.tanh(x[c]), rtol=1e-12)


@pytest.mark.parametrize("fill", FILLS)
@pytest.mark.parametrize("n", SIZES)
def test_data_size_through_later_ops(m, n, fill):
    x = sample((n, 5), np.float32, fill)
    total, values, where = m.positive_sum(x)
    want = x[x > 0]
    np.testing.assert_array_equal(where, np.array(np.nonzero(x > 0)))
    np.testing.assert_array_equal(values, want)
    np.testing.assert_allclose(total, want.sum(), rtol=1e-6)


@pytest.mark.parametrize("n", SIZES)
def test_nonzero_of_a_data_sized_value(m, n):
    x = sample((n,), np.float32, "half")
    g = x[np.nonzero(x)]
    np.testing.assert_array_equal(m.nested(x), np.array(np.nonzero(g > 0)))


def test_count_equated_with_an_argument_is_checked(m):
    x = np.array([0, 1, -1, 2, 0], np.float32)
    np.testing.assert_array_equal(m.masked_add(x, np.ones(3, np.float32)), x[x != 0] + 1)
    with pytest.raises(ValueError, match=r"masked_add\(\): opc.nonzero's count must equal argument 'y' dim 0 "
                                         r".*the count minus it is -2"):
        m.masked_add(x, np.ones(5, np.float32))


TOPK = [  # (function, dtype, shape with n for the `?` dim, axis, largest, k's shape)
    ("top_f32", np.float32, lambda n: (n, 6), 1, True, ()),
    ("bottom_i32", np.int32, lambda n: (5, n), 0, False, (1,)),
    ("top_ui8", np.uint8, lambda n: (n,), 0, True, ()),
    ("top_f16_middle", np.float16, lambda n: (2, n, 3), 1, True, ()),
]


def top_k(x: np.ndarray, k: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """NumPy's: a stable sort (ties to the lower index), the first k."""
    key = -x.astype(np.float64) if largest else x
    at = np.take(np.argsort(key, axis=axis, kind="stable"), np.arange(k), axis=axis)
    return np.take_along_axis(x, at, axis), at


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name,dtype,shape,axis,largest,kshape", TOPK, ids=[c[0] for c in TOPK])
def test_topk_with_a_run_time_k(m, name, dtype, shape, axis, largest, kshape, n):
    x = np.random.default_rng(n).integers(0, 6, shape(n)).astype(dtype)  # ties included
    size = x.shape[axis]
    for k in sorted({0, min(1, size), size // 2, size}):
        v, i = getattr(m, name)(x, np.full(kshape, k, np.int64))
        want_v, want_i = top_k(x, k, axis, largest)
        np.testing.assert_array_equal(i, want_i)
        np.testing.assert_array_equal(v, want_v)
        assert v.dtype == x.dtype


@pytest.mark.parametrize("k", [-1, 7])
def test_a_k_out_of_range_is_a_value_error(m, k):
    with pytest.raises(ValueError, match=rf"^top_f32\(\): opc.topk: k = {k} is out of range \[0, 6\] for axis 1$"):
        m.top_f32(np.zeros((2, 6), np.float32), np.array(k))


def numpy_unique(x: np.ndarray, is_sorted: bool) -> list[np.ndarray]:
    y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    if not is_sorted:  # in the order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y, first, counts, inverse = y[order], first[order], counts[order], rank[inverse]
    return [y, first, inverse.reshape(-1), counts]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name,dtype,is_sorted", [("unique_f64", np.float64, True),
                                                   ("unique_i8_unsorted", np.int8, False)])
def test_unique(m, name, dtype, is_sorted, n):
    x = np.random.default_rng(n).integers(-4, 5, n).astype(dtype)
    got = getattr(m, name)(x)
    assert [g.dtype for g in got] == [x.dtype] + [np.dtype(np.int64)] * 3
    for g, want in zip(got, numpy_unique(x, is_sorted)):
        assert g.shape == want.shape
        np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("values", [[3] * 9, list(range(9)), [255, 0, 255, 7, 0, 0, 128, 7, 1]], ids=str)
def test_unique_of_a_static_operand(m, values):
    x = np.array(values, np.uint8)
    for got, want in zip(m.unique_ui8(x), numpy_unique(x, True)):
        np.testing.assert_array_equal(got, want)


GRAD = """
func.func @compress(%x: tensor<?x3xf64>, %c: tensor<?xi1>) -> tensor<?x3xf64> {
  %nz = opc.nonzero %c : (tensor<?xi1>) -> tensor<1x?xi64>
  %i = opc.reshape %nz : (tensor<1x?xi64>) -> tensor<?xi64>
  %g = opc.gather %x, %i {axis = 0} : (tensor<?x3xf64>, tensor<?xi64>) -> tensor<?x3xf64>
  %r = opc.tanh %g : (tensor<?x3xf64>) -> tensor<?x3xf64>
  func.return %r : tensor<?x3xf64>
}
func.func @loss(%x: tensor<?x3xf64>, %c: tensor<?xi1>) -> tensor<f64> {
  %nz = opc.nonzero %c : (tensor<?xi1>) -> tensor<1x?xi64>
  %i = opc.reshape %nz : (tensor<1x?xi64>) -> tensor<?xi64>
  %g = opc.gather %x, %i {axis = 0} : (tensor<?x3xf64>, tensor<?xi64>) -> tensor<?x3xf64>
  %r = opc.tanh %g : (tensor<?x3xf64>) -> tensor<?x3xf64>
  %s = opc.mul %r, %g : (tensor<?x3xf64>, tensor<?x3xf64>) -> tensor<?x3xf64>
  %l = opc.reduce_sum %s {axes = array<i64: 0, 1>, keepdim = false} : (tensor<?x3xf64>) -> tensor<f64>
  func.return %l : tensor<f64>
}
func.func @compress_reshaped(%x: tensor<?x6xf64>, %c: tensor<?xi1>) -> tensor<?x2x3xf64> {
  %nz = opc.nonzero %c : (tensor<?xi1>) -> tensor<1x?xi64>
  %i = opc.reshape %nz : (tensor<1x?xi64>) -> tensor<?xi64>
  %g = opc.gather %x, %i {axis = 0} : (tensor<?x6xf64>, tensor<?xi64>) -> tensor<?x6xf64>
  %r = opc.reshape %g : (tensor<?x6xf64>) -> tensor<?x2x3xf64>
  func.return %r : tensor<?x2x3xf64>
}
func.func @top(%x: tensor<?x6xf64>, %k: tensor<i64>) -> tensor<?x?xf64> {
  %v, %i = opc.topk %x, %k {axis = 1, largest = false} : (tensor<?x6xf64>, tensor<i64>) -> (tensor<?x?xf64>, tensor<?x?xi64>)
  %t = opc.tanh %v : (tensor<?x?xf64>) -> tensor<?x?xf64>
  func.return %t : tensor<?x?xf64>
}
"""


@pytest.fixture(scope="module")
def g():
    return opc.compile(GRAD, grad=True)


@pytest.mark.parametrize("fill", FILLS)
@pytest.mark.parametrize("n", SIZES)
def test_compress_gradient_matches_finite_differences(g, n, fill):
    x, c = sample((n, 3), np.float64, "half") / 3, sample((n,), np.bool_, fill, seed=2)
    dx = g.loss_grad(x, c, np.float64(1.0))
    num, h = np.zeros_like(x), 1e-6
    for k in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[k] += h
        down[k] -= h
        num[k] = (g.loss(up, c) - g.loss(down, c)) / (2 * h)
    np.testing.assert_allclose(dx, num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("n", SIZES)
def test_compress_vjp_scatters_dout(g, n):
    x, c = sample((n, 3), np.float64, "half"), sample((n,), np.bool_, "half", seed=3)
    dout = np.random.default_rng(n).standard_normal((int(c.sum()), 3))
    want = np.zeros_like(x)
    want[c] = dout * (1 - np.tanh(x[c]) ** 2)
    np.testing.assert_allclose(g.compress_grad(x, c, dout), want, rtol=1e-12)
    value, dx = g.compress_value_and_grad(x, c, dout)
    np.testing.assert_allclose(value, np.tanh(x[c]), rtol=1e-12)
    np.testing.assert_allclose(dx, want, rtol=1e-12)


@pytest.mark.parametrize("k", [0, 1, 4, 6])
@pytest.mark.parametrize("n", [0, 1, 5])
def test_topk_gradient_matches_finite_differences(g, n, k):
    x, kk = np.random.default_rng(n + 10 * k).standard_normal((n, 6)), np.array(k)
    dout = np.random.default_rng(k).standard_normal((n, k))
    dx = g.top_grad(x, kk, dout)
    num, h = np.zeros_like(x), 1e-6
    for at in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[at] += h
        down[at] -= h
        num[at] = np.sum((g.top(up, kk) - g.top(down, kk)) * dout) / (2 * h)
    np.testing.assert_allclose(dx, num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("n", SIZES)
def test_a_gradient_reshaped_like_gathered_rows(g, n):
    """The reshape's vjp gives dout [?, 2, 3] (its rows an argument's size) the gathered rows' shape
    [count, 6]: 6 * n = 6 * count, once refused at compile time ("opc cannot check that equality",
    found by fuzz_dynamic.py); now the count takes dout's rows and the nonzero checks them when it runs."""
    x, c = sample((n, 6), np.float64, "half"), sample((n,), np.bool_, "half", seed=4)
    dout = np.random.default_rng(n).standard_normal((int(c.sum()), 2, 3))
    want = np.zeros_like(x)
    want[c] = dout.reshape(-1, 6)
    np.testing.assert_allclose(g.compress_reshaped(x, c), x[c].reshape(-1, 2, 3), rtol=0)
    np.testing.assert_allclose(g.compress_reshaped_grad(x, c, dout), want, rtol=0)
    if n:
        with pytest.raises(ValueError, match=r"compress_reshaped_grad\(\): opc.nonzero's count must equal "):
            g.compress_reshaped_grad(x, c, np.ones((int(c.sum()) + 1, 2, 3)))


def test_compress_vjp_with_a_dout_of_another_size(g):
    x, c = np.ones((4, 3)), np.array([True, False, True, True])
    with pytest.raises(ValueError, match=r"compress_grad\(\): opc.nonzero's count must equal argument '\w+' dim 0"):
        g.compress_grad(x, c, np.ones((2, 3)))


# -- what is refused, in one line ----------------------------------------------------------


def test_a_static_count_is_refused():
    src = """
func.func @f(%x: tensor<4xf32>) -> tensor<1x2xi64> {
  %r = opc.nonzero %x : (tensor<4xf32>) -> tensor<1x2xi64>
  func.return %r : tensor<1x2xi64>
}"""
    with pytest.raises(InputError, match=r"result must be tensor<1x\?xi64> .* got tensor<1x2xi64>") as err:
        opc.compile(src)
    assert "\n" not in str(err.value)


def test_a_scalar_operand_is_refused():
    src = """
func.func @f(%x: tensor<f32>) -> tensor<0x?xi64> {
  %r = opc.nonzero %x : (tensor<f32>) -> tensor<0x?xi64>
  func.return %r : tensor<0x?xi64>
}"""
    with pytest.raises(InputError, match=r"'opc.nonzero' op needs an operand of rank >= 1"):
        opc.compile(src)


def test_results_sizes_are_not_known_before_the_call(m):
    from opc.lowering.dynamic_call import result_shapes

    with pytest.raises(UnsupportedError, match=r"nz_f32\(\): its results. sizes depend on the data"):
        result_shapes(m.nz_f32.sig, [(3, 4)])


BRANCHES = """
func.func @f(%x: tensor<6xf32>, %flag: tensor<i1>) -> tensor<f32> {
  %p = tensor.extract %flag[] : tensor<i1>
  %r = scf.if %p -> (tensor<f32>) {
    %nz = opc.nonzero %x : (tensor<6xf32>) -> tensor<1x?xi64>
    %i = opc.reshape %nz : (tensor<1x?xi64>) -> tensor<?xi64>
    %g = opc.gather %x, %i {axis = 0} : (tensor<6xf32>, tensor<?xi64>) -> tensor<?xf32>
    %s = opc.reduce_sum %g {axes = array<i64: 0>, keepdim = false} : (tensor<?xf32>) -> tensor<f32>
    scf.yield %s : tensor<f32>
  } else {
    %s = opc.reduce_sum %x {axes = array<i64: 0>, keepdim = false} : (tensor<6xf32>) -> tensor<f32>
    scf.yield %s : tensor<f32>
  }
  func.return %r : tensor<f32>
}
"""


def test_a_data_size_inside_a_branch():
    m = opc.compile(BRANCHES)
    x = np.array([0, 1, 2, 0, -3, 0], np.float32)
    assert m.f(x, np.array(True)) == 0 and m.f(np.abs(x), np.array(True)) == 6


def test_a_branch_yielding_a_data_size_is_refused_in_one_line():
    src = BRANCHES.replace("-> tensor<f32> {\n  %p", "-> tensor<1x?xi64> {\n  %p", 1)
    src = src.replace("""    %i = opc.reshape %nz : (tensor<1x?xi64>) -> tensor<?xi64>
    %g = opc.gather %x, %i {axis = 0} : (tensor<6xf32>, tensor<?xi64>) -> tensor<?xf32>
    %s = opc.reduce_sum %g {axes = array<i64: 0>, keepdim = false} : (tensor<?xf32>) -> tensor<f32>
    scf.yield %s : tensor<f32>""", "    scf.yield %nz : tensor<1x?xi64>")
    src = src.replace("""    %s = opc.reduce_sum %x {axes = array<i64: 0>, keepdim = false} : (tensor<6xf32>) -> tensor<f32>
    scf.yield %s : tensor<f32>""", """    %nz = opc.nonzero %x : (tensor<6xf32>) -> tensor<1x?xi64>
    scf.yield %nz : tensor<1x?xi64>""")
    src = src.replace("scf.if %p -> (tensor<f32>)", "scf.if %p -> (tensor<1x?xi64>)")
    src = src.replace("func.return %r : tensor<f32>", "func.return %r : tensor<1x?xi64>")
    with pytest.raises(UnsupportedError, match=r"the body @\w+: a result whose size depends on the data .* cannot "
                                               r"leave a loop or branch body yet") as err:
        opc.compile(src)
    assert "\n" not in str(err.value)
