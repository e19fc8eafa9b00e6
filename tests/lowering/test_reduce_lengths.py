"""Row reductions (sum, mean, max, min over the last axis) at every length from 1
to 70 and around the CPU's blocks of partial sums (64 f32 / 32 f64 partials, used
from two blocks on: the lengths around 64, 128, 192 and 256 hit every tail size
class), in f32, f64, f16 and i32, against NumPy. Max/min rows hold a NaN at the
first, middle or last position (it must propagate from any lane, partial or
tail), and rows of -inf/+inf. Float sums may differ from NumPy's only by
reassociation: the tolerance grows with the length."""

from __future__ import annotations

import numpy as np
import pytest

import opc

LENGTHS = [*range(1, 71), 127, 128, 129, 150, 191, 192, 193, 255, 256, 257]
DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32}
ROWS = 7  # random, NaN first, NaN middle, NaN last, -inf first / +inf last, all -inf, all +inf


def module_src(dt: str) -> str:
    funcs = []
    for n in LENGTHS:
        full, row = f"tensor<{ROWS}x{n}x{dt}>", f"tensor<{ROWS}x{dt}>"
        attrs = "{axes = array<i64: 1>, keepdim = false}"
        kinds = ["sum", "max", "min"] + (["mean"] if dt != "i32" else [])
        body = "".join(f"  %{k} = opc.reduce_{k} %x {attrs} : ({full}) -> {row}\n" for k in kinds)
        results = ", ".join(f"%{k}" for k in kinds)
        types = ", ".join([row] * len(kinds))
        funcs.append(f"func.func @n{n}(%x: {full}) -> ({types}) {{\n{body}"
                     f"  func.return {results} : {types}\n}}\n")
    return "".join(funcs)


@pytest.fixture(scope="module", params=list(DTYPES))
def lengths_module(request):  # noqa: ANN001, ANN201
    return request.param, opc.compile(module_src(request.param))


def rows_of(dt: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    if dt == "i32":  # small values: the sum does not wrap; the extremes for max/min
        x = rng.integers(-1000, 1000, size=(ROWS, n)).astype(np.int32)
        x[1, 0] = np.iinfo(np.int32).max
        x[2, n // 2] = np.iinfo(np.int32).min
        x[3, n - 1] = np.iinfo(np.int32).max
        return x
    x = (rng.standard_normal((ROWS, n)) * 4).astype(DTYPES[dt])
    x[1, 0] = x[2, n // 2] = x[3, n - 1] = np.nan
    x[4, 0], x[4, n - 1] = -np.inf, np.inf
    x[5, :], x[6, :] = -np.inf, np.inf
    return x


@pytest.mark.parametrize("n", LENGTHS)
def test_row_reductions_match_numpy_at_every_length(lengths_module, n: int) -> None:  # noqa: ANN001
    dt, m = lengths_module
    x = rows_of(dt, n)
    got = getattr(m, f"n{n}")(x)
    if dt == "i32":
        s, hi, lo = got
        np.testing.assert_array_equal(s, x.sum(1, dtype=np.int32))  # wraps, as NumPy int32 does
        np.testing.assert_array_equal(hi, x.max(1))
        np.testing.assert_array_equal(lo, x.min(1))
        return
    s, hi, lo, mean = got
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(hi, x.max(1))  # NaN wherever the row holds one
        np.testing.assert_array_equal(lo, x.min(1))
        exact = x.astype(np.float64).sum(1)
    # f16/bf16 accumulate in f32 and round once; f32/f64 in their own type
    eps = np.finfo(np.float32 if dt == "f16" else DTYPES[dt]).eps
    out_eps = np.finfo(DTYPES[dt]).eps
    finite = np.isfinite(exact)
    np.testing.assert_array_equal(np.isnan(s), np.isnan(exact))
    np.testing.assert_array_equal(s[~finite], exact[~finite].astype(DTYPES[dt]))
    scale = np.abs(x[finite].astype(np.float64)).sum(1)
    tol = 2 * n * eps * scale + out_eps * np.abs(exact[finite])
    assert np.all(np.abs(s[finite] - exact[finite]) <= tol), (s[finite], exact[finite], tol)
    np.testing.assert_array_equal(np.isnan(mean), np.isnan(exact))
    assert np.all(np.abs(mean[finite] - exact[finite] / n) <= (tol + 2 * out_eps * np.abs(exact[finite])) / n)
