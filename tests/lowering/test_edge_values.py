"""Inputs the random draws of the other numeric tests never produce, each against
a closed form in NumPy (issue 25's mutation audit: every one of these let a
realistic one-line slip through):

- reduce_max/reduce_min gradients over rows with exact ties: the gradient of a
  row is split evenly between its tied extrema (rules.py's vjp, like torch.amax);
- softmax, log_softmax and softmax_cross_entropy on rows of length 1, lengths
  around the row kernels' vector width (OPC_NN_LANES = 64), the maximum in the
  scalar tail, and logits around +-1000 (exp overflows unless the true row max
  is subtracted), in f32 and f16, through the runtime row kernels
  (runtime/opc_nn_rows.h) for the last axis and the tiled path for another;
- ui8 arithmetic, max/min, compares, reductions and casts with values at and
  above half the range (128..255), where a signed compare or a signed widening
  gives a different answer.

All functions of a group are compiled as one module."""

from __future__ import annotations

import re

import numpy as np
import pytest
from oracle import assert_close, np_dtype, ttype

import opc

RNG = np.random.default_rng(25)

# ---------------------------------------------------------------------------------------------------------
# reduce_max / reduce_min gradients with ties
# ---------------------------------------------------------------------------------------------------------

TIE_ROWS = {
    "one_tie": [[1.0, 3.0, 3.0], [2.0, -1.0, 0.5], [-4.0, -4.0, 7.0]],
    "all_equal": [[2.5, 2.5, 2.5], [0.0, 0.0, 0.0], [-1.0, -1.0, -1.0]],
    "min_ties": [[3.0, 1.0, 1.0], [5.0, 5.0, 5.0], [-2.0, 0.0, -2.0]],
}
TIE_CASES = [(kind, rows, dt, keep) for kind in ("max", "min") for rows in TIE_ROWS for dt in ("float32", "float64")
             for keep in (False, True)]


def tie_name(kind: str, rows: str, dt: str, keep: bool) -> str:
    return f"reduce_{kind}_{rows}_{dt}_{'keep' if keep else 'drop'}"


def tie_src(kind: str, rows: str, dt: str, keep: bool) -> str:
    x, r = ttype((3, 3), dt), ttype((3, 1) if keep else (3,), dt)
    return (f"func.func @{tie_name(kind, rows, dt, keep)}(%a0: {x}) -> {r} {{\n"
            f"  %r = opc.reduce_{kind} %a0 {{axes = array<i64: 1>, keepdim = {str(keep).lower()}}} : ({x}) -> {r}\n"
            f"  func.return %r : {r}\n}}\n")


def tie_grad(x: np.ndarray, dout: np.ndarray, kind: str) -> np.ndarray:
    """Closed form: each row's cotangent split evenly between the elements equal to its extremum."""
    ext = (x.max if kind == "max" else x.min)(axis=1, keepdims=True)
    hit = (x == ext).astype(np.float64)
    return hit * dout.reshape(-1, 1) / hit.sum(axis=1, keepdims=True)


@pytest.fixture(scope="module")
def ties():
    return opc.compile("".join(tie_src(*c) for c in TIE_CASES), grad=True)


@pytest.mark.parametrize("kind,rows,dt,keep", TIE_CASES)
def test_reduce_extremum_grad_splits_ties(ties, kind: str, rows: str, dt: str, keep: bool) -> None:
    x = np.array(TIE_ROWS[rows], np_dtype(dt))
    dout = np.array([0.6, -1.5, 3.0], np_dtype(dt)).reshape((3, 1) if keep else (3,))
    got = getattr(ties, f"{tie_name(kind, rows, dt, keep)}_grad")(x, dout)
    assert_close(got, tie_grad(x.astype(np.float64), dout.astype(np.float64), kind), dt)


# ---------------------------------------------------------------------------------------------------------
# softmax / log_softmax / softmax_cross_entropy: short rows, tails, huge logits
# ---------------------------------------------------------------------------------------------------------

LANES = 64  # runtime/opc_nn.h: OPC_NN_LANES
LENGTHS = [1, 2, 7, LANES - 1, LANES, LANES + 1, 2 * LANES + 3]
SM_DTYPES = ["float32", "float16"]
SM_OPS = ["softmax", "log_softmax", "sce"]


def sm_rows(n: int, dt: str) -> np.ndarray:
    """Four rows of length n, the maximum last (in the scalar tail after the vector lanes):
    moderate values; a +1000 maximum over values near -1000 (exp(x - m) overflows for any m
    but the true max); all near +1000; all near -1000 with the tail 20 above."""
    base = RNG.uniform(-3, 3, (4, n))
    base[1] += -1000.0
    base[2] += 1000.0
    base[3] += -1000.0
    base[:, -1] = base.max(axis=1) + np.array([1.0, 0.0, 2.0, 20.0])
    if n > 1:
        base[1, -1] = 1000.0
    return base.astype(np_dtype(dt))


def sm_name(op: str, n: int, dt: str, axis: int) -> str:
    return f"{op}_{n}_{dt}_axis{axis}"


def sm_src(op: str, n: int, dt: str, axis: int) -> str:
    """axis 1: rows contiguous (the row kernels' inner == 1 path); axis 0: the same rows
    transposed (the tiled path)."""
    shape = (4, n) if axis == 1 else (n, 4)
    x, name = ttype(shape, dt), sm_name(op, n, dt, axis)
    if op == "sce":
        lshape = (4, 1) if axis == 1 else (1, 4)
        lab, l_t = ttype(lshape, "int64"), ttype(lshape, dt)
        return (f"func.func @{name}(%a0: {x}, %a1: {lab}) -> ({l_t}, {x}) {{\n"
                f"  %l, %s = opc.softmax_cross_entropy %a0, %a1 {{axis = {axis}}} : ({x}, {lab}) -> ({l_t}, {x})\n"
                f"  func.return %l, %s : {l_t}, {x}\n}}\n")
    return (f"func.func @{name}(%a0: {x}) -> {x} {{\n  %r = opc.{op} %a0 {{axis = {axis}}} : ({x}) -> {x}\n"
            f"  func.return %r : {x}\n}}\n")


SM_CASES = [(op, n, dt, axis) for op in SM_OPS for n in LENGTHS for dt in SM_DTYPES for axis in (1, 0)]


@pytest.fixture(scope="module")
def rows():
    return opc.compile("".join(sm_src(*c) for c in SM_CASES))


def log_softmax_ref(x: np.ndarray) -> np.ndarray:
    """NumPy's max-subtracted form, row-wise along axis 1, in f64."""
    s = x - x.max(axis=1, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=1, keepdims=True))


@pytest.mark.parametrize("op,n,dt,axis", SM_CASES)
def test_softmax_rows_at_the_edges(rows, op: str, n: int, dt: str, axis: int) -> None:
    x = sm_rows(n, dt)
    ref = log_softmax_ref(x.astype(np.float64))
    fn = getattr(rows, sm_name(op, n, dt, axis))
    arg = x if axis == 1 else np.ascontiguousarray(x.T)
    if op == "sce":
        label = np.array([n - 1, 0, n // 2, n - 1], np.int64)
        loss, sm = fn(arg, label.reshape(4, 1) if axis == 1 else label.reshape(1, 4))
        got = {"loss": loss.reshape(4), "softmax": sm if axis == 1 else sm.T}
        want = {"loss": -ref[np.arange(4), label], "softmax": np.exp(ref)}
    else:
        out = fn(arg)
        got = {op: out if axis == 1 else out.T}
        want = {op: np.exp(ref) if op == "softmax" else ref}
    for what in got:
        assert np.isfinite(got[what].astype(np.float64)).all(), f"{what}: non-finite values (the max was not subtracted?)"
        # |log_softmax| reaches 2000: one rounding of the result, relative; softmax in [0, 1]: absolute
        assert_close(np.ascontiguousarray(got[what]), want[what].astype(np_dtype(dt)), dt, scale=4.0)


def test_softmax_rows_reach_the_runtime_row_kernels(rows) -> None:
    """The cases above test the runtime kernels, not a composite lowering."""
    called = set(re.findall(r"\b(opc_nn_(?:log_)?softmax(?:_cross_entropy)?_\w+?)\(", rows.c_source))
    for dt in ("f32", "f16"):
        for kernel in ("opc_nn_softmax_", "opc_nn_log_softmax_", "opc_nn_softmax_cross_entropy_"):
            assert any(c.startswith(kernel + dt) for c in called), (kernel + dt, sorted(called))


# ---------------------------------------------------------------------------------------------------------
# ui8 at and above half its range
# ---------------------------------------------------------------------------------------------------------

U8 = np.array([0, 1, 127, 128, 129, 200, 254, 255, 128, 255, 0, 7], np.uint8)
V8 = np.array([255, 128, 128, 127, 255, 100, 255, 254, 0, 255, 1, 200], np.uint8)
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum, "minimum": np.minimum}
COMPARE = {"greater_than": np.greater, "less_than": np.less, "equal": np.equal}
REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}
CASTS = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "int16": "i16", "float16": "f16"}


def u8_src() -> str:
    t, b, r = ttype((12,), "uint8"), ttype((12,), "bool"), ttype((3,), "uint8")
    fns = [f"func.func @{n}(%a: {t}, %b: {t}) -> {t} {{\n  %r = opc.{n} %a, %b : ({t}, {t}) -> {t}\n"
           f"  func.return %r : {t}\n}}\n" for n in BINARY]
    fns += [f"func.func @{n}(%a: {t}, %b: {t}) -> {b} {{\n  %r = opc.{n} %a, %b : ({t}, {t}) -> {b}\n"
            f"  func.return %r : {b}\n}}\n" for n in COMPARE]
    m = ttype((3, 4), "uint8")
    fns += [f"func.func @reduce_{n}(%a: {m}) -> {r} {{\n"
            f"  %r = opc.reduce_{n} %a {{axes = array<i64: 1>}} : ({m}) -> {r}\n  func.return %r : {r}\n}}\n"
            for n in REDUCE]
    for dst, mt in CASTS.items():
        d = ttype((12,), dst)
        fns.append(f"func.func @to_{dst}(%a: {t}) -> {d} {{\n  %r = opc.cast %a {{dtype = {mt}}} : ({t}) -> {d}\n"
                   f"  func.return %r : {d}\n}}\n")
        fns.append(f"func.func @from_{dst}(%a: {d}) -> {t} {{\n  %r = opc.cast %a {{dtype = ui8}} : ({d}) -> {t}\n"
                   f"  func.return %r : {t}\n}}\n")
    return "".join(fns)


@pytest.fixture(scope="module")
def u8():
    return opc.compile(u8_src())


@pytest.mark.parametrize("name", list(BINARY) + list(COMPARE))
def test_ui8_elementwise_above_half_range(u8, name: str) -> None:
    with np.errstate(over="ignore"):
        want = {**BINARY, **COMPARE}[name](U8, V8)  # NumPy's uint8 arithmetic wraps modulo 256
    np.testing.assert_array_equal(getattr(u8, name)(U8, V8), want)


@pytest.mark.parametrize("name", list(REDUCE))
def test_ui8_reductions_above_half_range(u8, name: str) -> None:
    x = U8.reshape(3, 4)
    want = REDUCE[name](x, axis=1).astype(np.uint8)  # sum wraps modulo 256, as in ui8
    np.testing.assert_array_equal(getattr(u8, f"reduce_{name}")(x), want)


@pytest.mark.parametrize("dst", list(CASTS))
def test_ui8_casts_above_half_range(u8, dst: str) -> None:
    np.testing.assert_array_equal(getattr(u8, f"to_{dst}")(U8), U8.astype(dst))
    back = U8.astype(dst)  # in range both ways: exact
    np.testing.assert_array_equal(getattr(u8, f"from_{dst}")(back), U8)


# ---------------------------------------------------------------------------------------------------------
# layer_norm's gradient when mean and rstd are used downstream, in the narrow float types
# (their statistics are f32: the rule widens x before it meets them)
# ---------------------------------------------------------------------------------------------------------

LN_DTYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}


def ln_src(dt: str) -> str:
    x, v, st = ttype((3, 8), dt), ttype((8,), dt), ttype((3,), "float32")
    return (f"func.func @ln_{dt}(%x: {x}, %s: {v}, %b: {v}) -> ({x}, {st}, {st}) {{\n"
            f"  %y, %m, %r = opc.layer_norm %x, %s, %b : ({x}, {v}, {v}) -> ({x}, {st}, {st})\n"
            f"  func.return %y, %m, %r : {x}, {st}, {st}\n}}\n")


@pytest.fixture(scope="module")
def layer_norms():
    return opc.compile("".join(ln_src(dt) for dt in LN_DTYPES), grad=True)


@pytest.mark.parametrize("dt", list(LN_DTYPES))
def test_layer_norm_grad_with_stats_cotangents(layer_norms, dt: str) -> None:
    """dx = rstd (g - mean(g) - xhat mean(g xhat)) + dmean / N - drstd rstd^3 (x - mean) / N,
    g = dy * scale; dscale = sum(dy xhat), dbias = sum(dy), in f64 from the rounded inputs."""
    x, s, b, dy = (RNG.uniform(-2, 2, shape).astype(np_dtype(dt)) for shape in ((3, 8), (8,), (8,), (3, 8)))
    dm, dr = RNG.uniform(-1, 1, 3).astype(np.float32), RNG.uniform(-1, 1, 3).astype(np.float32)
    dx, ds, db = getattr(layer_norms, f"ln_{dt}_grad")(x, s, b, dy, dm, dr)
    X, S, DY, DM, DR = (a.astype(np.float64) for a in (x, s, dy, dm, dr))
    mu = X.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((X - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    xhat, g = (X - mu) * rstd, DY * S
    want = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    want += DM[:, None] / 8 - DR[:, None] * rstd**3 * (X - mu) / 8
    assert_close(dx, want.astype(np_dtype(dt)), dt, scale=8)
    assert_close(ds, (DY * xhat).sum(0).astype(np_dtype(dt)), dt, scale=8)
    assert_close(db, DY.sum(0).astype(np_dtype(dt)), dt, scale=8)


# ---------------------------------------------------------------------------------------------------------
# sigmoid over its whole range: exp(-x) overflows for large negative x, underflows for large positive
# ---------------------------------------------------------------------------------------------------------

SIG_DTYPES = ["float16", "bfloat16", "float32", "float64"]


@pytest.fixture(scope="module")
def sigmoids():
    t = {dt: ttype((11,), dt) for dt in SIG_DTYPES}
    return opc.compile("".join(f"func.func @sigmoid_{dt}(%x: {t[dt]}) -> {t[dt]} {{\n"
                               f"  %r = opc.sigmoid %x : ({t[dt]}) -> {t[dt]}\n  func.return %r : {t[dt]}\n}}\n"
                               for dt in SIG_DTYPES))


@pytest.mark.parametrize("dt", SIG_DTYPES)
def test_sigmoid_saturates_without_nan(sigmoids, dt: str) -> None:
    x = np.array([-1000.0, -100.0, -30.0, -5.0, -0.5, 0.0, 0.5, 5.0, 30.0, 100.0, 1000.0]).astype(np_dtype(dt))
    if dt == "float16":
        x = np.clip(x.astype(np.float64), -60000, 60000).astype(np.float16)
    xs = x.astype(np.float64)
    want = np.where(xs >= 0, 1 / (1 + np.exp(-np.abs(xs))), np.exp(-np.abs(xs)) / (1 + np.exp(-np.abs(xs))))
    assert_close(getattr(sigmoids, f"sigmoid_{dt}")(x), want.astype(np_dtype(dt)), dt, scale=2)


@pytest.mark.parametrize("rows", [0, 2])
def test_empty_intermediates_compute_a_sum_of_nothing(rows: int) -> None:
    """x @ w of 0 rows, exp'd and summed over the rows: every intermediate buffer is empty (0 x 4),
    which still gets an arena slot (mutation testing: slots sized 0 made the arena empty, and the
    call failed with 'out of memory'); 2 rows for comparison. NumPy's sum of nothing is 0."""
    t, r = f"tensor<{rows}x3xf32>", f"tensor<{rows}x4xf32>"
    m = opc.compile(f"func.func @f(%x: {t}, %w: tensor<3x4xf32>) -> tensor<4xf32> {{\n"
                    f"  %m = opc.matmul %x, %w : ({t}, tensor<3x4xf32>) -> {r}\n"
                    f"  %e = opc.exp %m : ({r}) -> {r}\n"
                    f"  %s = opc.reduce_sum %e {{axes = array<i64: 0>, keepdim = false}} : ({r}) -> tensor<4xf32>\n"
                    f"  func.return %s : tensor<4xf32>\n}}\n")
    x = np.random.default_rng(rows).standard_normal((rows, 3)).astype(np.float32)
    w = np.random.default_rng(9).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(m.f(x, w), np.exp(x @ w).sum(0), rtol=1e-5)
