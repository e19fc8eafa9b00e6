"""f16 / bf16 over run-time (`?`) dims where the lowering accumulates in an f32 scratch buffer: a
reduction over a leading axis (summed in memory order) and gather's gradient (a scatter-add). The
scratch buffer once had the `?` marker as a static dim, an internal error at compile time (found by
tests/support/fuzz_dynamic.py's f16 / bf16 programs). Against NumPy in f64 from the rounded inputs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import opc

HALVES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
# the f32 sum rounded once: half a unit of the result, plus the inputs' own rounding to the dtype
TOL = {"f16": 2e-3, "bf16": 1e-2}


def source(dt: str) -> str:
    return f"""
func.func @lead(%x: tensor<?x?x3x{dt}>) -> tensor<?x3x{dt}> {{
  %s = opc.reduce_sum %x {{axes = array<i64: 0>}} : (tensor<?x?x3x{dt}>) -> tensor<?x3x{dt}>
  func.return %s : tensor<?x3x{dt}>
}}
func.func @rows(%x: tensor<?x3x{dt}>) -> tensor<3x{dt}> {{
  %s = opc.reduce_sum %x {{axes = array<i64: 0>}} : (tensor<?x3x{dt}>) -> tensor<3x{dt}>
  func.return %s : tensor<3x{dt}>
}}
func.func @pick(%x: tensor<?x3x{dt}>, %i: tensor<?xi64>) -> tensor<?x3x{dt}> {{
  %g = opc.gather %x, %i {{axis = 0}} : (tensor<?x3x{dt}>, tensor<?xi64>) -> tensor<?x3x{dt}>
  func.return %g : tensor<?x3x{dt}>
}}
"""


@pytest.fixture(scope="module", params=sorted(HALVES))
def compiled(request):
    return request.param, opc.compile(source(request.param), grad=True)


@pytest.mark.parametrize("shape", [(0, 4, 3), (1, 1, 3), (3, 5, 3), (17, 2, 3)])
def test_a_half_sum_over_a_leading_run_time_axis(compiled, shape):
    dt, m = compiled
    x = np.random.default_rng(list(shape)).uniform(-1, 1, shape).astype(HALVES[dt])
    want = x.astype(np.float64).sum(0)
    got = m.lead(x)
    assert got.dtype == HALVES[dt] and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=TOL[dt], atol=TOL[dt] * shape[0])
    rows = x.reshape(-1, 3)
    np.testing.assert_allclose(m.rows(rows).astype(np.float64), rows.astype(np.float64).sum(0),
                               rtol=TOL[dt], atol=TOL[dt] * len(rows))


@pytest.mark.parametrize("n,picks", [(0, 0), (1, 3), (5, 7), (17, 40)])
def test_the_gradient_of_a_half_gather_over_run_time_rows(compiled, n, picks):
    dt, m = compiled
    rng = np.random.default_rng([n, picks])
    x = rng.uniform(-1, 1, (n, 3)).astype(HALVES[dt])
    idx = rng.integers(0, max(n, 1), picks).astype(np.int64)
    dout = rng.uniform(-1, 1, (picks, 3)).astype(HALVES[dt])
    np.testing.assert_array_equal(m.pick(x, idx).astype(np.float64), x.astype(np.float64)[idx])
    want = np.zeros((n, 3))
    np.add.at(want, idx, dout.astype(np.float64))
    dx = m.pick_grad(x, idx, dout)
    assert dx.dtype == HALVES[dt] and dx.shape == (n, 3)
    np.testing.assert_allclose(dx.astype(np.float64), want, rtol=TOL[dt], atol=TOL[dt] * max(picks, 1))
