"""Regressions for wrong results found by fuzzing (issue 8, item 2), each against NumPy:

- reductions with an empty `axes` are the identity (SPEC.md), forward and gradient, on
  every path (default, decompose="all");
- pow's gradient at a base of 0 is masked as PyTorch masks it, so no NaN appears;
- (an i1 cast used twice gets its cotangents or-ed, not added: tests/autodiff/test_grad_semantics.py, the integer module);
- every cast pair, chained there and back, at every short trip count: gcc 12.2 at -O3
  dropped the `(double)(float)x` rounding when it SLP-vectorized loops of 2, 3, 6, 7
  elements and loop tails (opc/lowering/build.py MODULE_FLAGS).
"""

from __future__ import annotations

import numpy as np
import pytest
from oracle import ALL_DTYPES, FLOATS, MLIR_TYPES, np_dtype, spec_cast, ttype

import opc

# ---------------------------------------------------------------------------
# Empty axes: the identity
# ---------------------------------------------------------------------------

REDUCES = ["reduce_sum", "reduce_max", "reduce_min", "reduce_mean"]
SHAPES = [(), (5,), (2, 3), (2, 1, 3), (2, 3, 1, 2)]


def shape_name(shape) -> str:
    return "x".join(map(str, shape)) or "scalar"


def empty_axes_func(op: str, shape, keepdim: bool) -> str:
    t = ttype(shape, "float64")
    return (f"func.func @{op}_{shape_name(shape)}_{str(keepdim).lower()}(%x: {t}) -> {t} {{\n"
            f"  %r = opc.{op} %x {{axes = array<i64>, keepdim = {str(keepdim).lower()}}} : ({t}) -> {t}\n"
            f"  func.return %r : {t}\n}}\n")


EMPTY_AXES = [(op, s, k) for op in REDUCES for s in SHAPES for k in (False, True)]


@pytest.fixture(scope="module", params=[None, "all"], ids=["default", "decompose_all"])
def empty_axes(request):
    src = "".join(empty_axes_func(*case) for case in EMPTY_AXES)
    return opc.compile(src, grad=True, decompose=request.param)


@pytest.mark.parametrize("op,shape,keepdim", EMPTY_AXES)
def test_empty_axes_is_identity(empty_axes, op, shape, keepdim):
    name = f"{op}_{shape_name(shape)}_{str(keepdim).lower()}"
    rng = np.random.default_rng(len(name))
    x, dout = rng.normal(size=shape), rng.normal(size=shape)
    np.testing.assert_array_equal(getattr(empty_axes, name)(x), getattr(np, op[7:])(x, axis=()))
    np.testing.assert_array_equal(getattr(empty_axes, f"{name}_grad")(x, dout), dout)


# ---------------------------------------------------------------------------
# pow's gradient at a base of 0
# ---------------------------------------------------------------------------

BASES = np.array([0.0, -0.0, 0.5, 2.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0])
EXPONENTS = np.array([0.5, 2.0, 0.0, 0.0, 0.0, 1.0, -1.0, 3.0, 2.5, np.nan])


def pow_grad_reference(a, b, d):
    """PyTorch's pow_backward_self / pow_backward_exponent, in NumPy."""
    with np.errstate(all="ignore"):
        out = a**b
        da = np.where(b == 0, 0.0, d * b * a ** (b - 1))
        db = np.where((a == 0) & (b >= 0), 0.0, d * out * np.log(a))
    return da, db


POW = """
func.func @p(%a: tensor<10xf64>, %b: tensor<10xf64>) -> tensor<10xf64> {
  %r = opc.pow %a, %b : (tensor<10xf64>, tensor<10xf64>) -> tensor<10xf64>
  func.return %r : tensor<10xf64>
}
func.func @upstream(%x: tensor<10xf64>, %b: tensor<10xf64>) -> tensor<10xf64> {
  %s = opc.mul %x, %x : (tensor<10xf64>, tensor<10xf64>) -> tensor<10xf64>
  %r = opc.pow %s, %b : (tensor<10xf64>, tensor<10xf64>) -> tensor<10xf64>
  %t = opc.add %r, %s : (tensor<10xf64>, tensor<10xf64>) -> tensor<10xf64>
  func.return %t : tensor<10xf64>
}
func.func @bcast(%a: tensor<3x1xf64>, %b: tensor<4xf64>) -> tensor<3x4xf64> {
  %r = opc.pow %a, %b : (tensor<3x1xf64>, tensor<4xf64>) -> tensor<3x4xf64>
  func.return %r : tensor<3x4xf64>
}
"""


@pytest.fixture(scope="module", params=[None, "all"], ids=["default", "decompose_all"])
def pow_module(request):
    return opc.compile(POW, grad=True, decompose=request.param)


def test_pow_grad_at_zero_base(pow_module):
    d = np.linspace(0.5, 2.0, 10)
    da, db = pow_module.p_grad(BASES, EXPONENTS, d)
    want_da, want_db = pow_grad_reference(BASES, EXPONENTS, d)
    np.testing.assert_allclose(da, want_da, rtol=1e-14, equal_nan=True)
    np.testing.assert_allclose(db, want_db, rtol=1e-14, equal_nan=True)
    assert np.isnan(db).tolist() == [False] * 9 + [True]  # only where the exponent itself is NaN


def test_pow_grad_no_nan_upstream(pow_module):
    """x = 0 through x*x into pow: the mask keeps the NaN of 0 * inf out of dx."""
    x, d = np.where(np.isnan(EXPONENTS), 1.0, BASES), np.ones(10)
    b = np.array([2.0, 2.0, 0.0, 0.0, 0.0, 1.0, 1.0, 3.0, 2.5, 1.0])  # 0 or >= 1: every gradient finite
    dx, db = pow_module.upstream_grad(x, b, d)
    s = x * x
    da, want_db = pow_grad_reference(s, b, d)
    np.testing.assert_allclose(dx, (da + 1.0) * 2 * x, rtol=1e-14)
    np.testing.assert_allclose(db, want_db, rtol=1e-14)
    assert np.isfinite(dx).all() and np.isfinite(db).all()


def test_pow_grad_broadcast_zero_base(pow_module):
    a, b = np.array([[0.0], [1.5], [0.0]]), np.array([0.0, 1.0, 2.0, 0.5])
    d = np.ones((3, 4))
    da, db = pow_module.bcast_grad(a, b, d)
    want_da, want_db = pow_grad_reference(np.broadcast_to(a, (3, 4)), np.broadcast_to(b, (3, 4)), d)
    np.testing.assert_allclose(da, want_da.sum(axis=1, keepdims=True), rtol=1e-14)
    np.testing.assert_allclose(db, want_db.sum(axis=0), rtol=1e-14)


# ---------------------------------------------------------------------------
# Every cast pair, there and back, at every trip count from 1 to 17
# ---------------------------------------------------------------------------

# 1/3, 0.1 and 1e300 lose digits in f32 (the gcc miscompile returned them unrounded);
# the rest cross every saturation bound and half's range.
ROUNDTRIP_VALUES = [1 / 3, 1e300, 0.1, np.nan, -np.inf, np.inf, -1e30, 70000.0, -129.7, -0.5, -0.0, 2.5, 255.7,
                    3e9, 1e19, 6e-8, 1e-40, -2.718281828459045, 65504.0, 1.00048828125, 127.5, 40000.7]
TRIP_COUNTS_CI = [2, 3, 7, 17]  # where gcc 12.2 failed, and a loop with a tail
CAST_PAIRS = [(s, d) for s in ALL_DTYPES for d in ALL_DTYPES if s != d]


def trip_counts(config) -> list[int]:
    return list(range(1, 18)) if config.getoption("--full-cast-grid") else TRIP_COUNTS_CI


def roundtrip_input(src: str, n: int) -> np.ndarray:
    vals = [ROUNDTRIP_VALUES[(i + n) % len(ROUNDTRIP_VALUES)] for i in range(n)]
    if src == "bool":
        return np.array([v != 0 and i % 3 != 1 for i, v in enumerate(vals)])
    x = spec_cast(np.array(vals, np.float64), src)  # ints: the saturated values, every bound
    return x


def roundtrip_func(s: str, d: str, n: int) -> str:
    ts, td = ttype((n,), s), ttype((n,), d)
    return (f"func.func @rt_{s}_{d}_{n}(%x: {ts}) -> ({td}, {ts}) {{\n"
            f"  %m = opc.cast %x {{dtype = {MLIR_TYPES[d]}}} : ({ts}) -> {td}\n"
            f"  %r = opc.cast %m {{dtype = {MLIR_TYPES[s]}}} : ({td}) -> {ts}\n"
            f"  func.return %m, %r : {td}, {ts}\n}}\n")


@pytest.fixture(scope="module")
def roundtrips(request):
    ns = trip_counts(request.config)
    return opc.compile("".join(roundtrip_func(s, d, n) for s, d in CAST_PAIRS for n in ns))


def exact(got: np.ndarray, want: np.ndarray, dtype: str, what: str) -> None:
    assert got.dtype == np_dtype(dtype), what
    if dtype in FLOATS:
        got, want = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("src,dst", CAST_PAIRS)
def test_cast_roundtrip_every_trip_count(roundtrips, request, src, dst):
    for n in trip_counts(request.config):
        x = roundtrip_input(src, n)
        mid, back = getattr(roundtrips, f"rt_{src}_{dst}_{n}")(x)
        want_mid = spec_cast(x, dst)
        exact(mid, want_mid, dst, f"{src} -> {dst}, n = {n}")
        exact(back, spec_cast(want_mid, src), src, f"{src} -> {dst} -> {src}, n = {n}")
