"""scf.while / scf.if / nested scf.for over run-time (`?`) dims: a body with `?` dims takes its
sizes from the loop (a carried value keeps its sizes), against NumPy, gradients against central
differences in f64 (the backward pops each saved value at its run-time size), at sizes 0 and up."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import opc

sys.path.insert(0, str(Path(__file__).parents[1] / "shapes"))
from test_slices import check_grad  # noqa: E402

PROGRAMS = """
func.func @w(%x: tensor<?x3xf64>, %lim: tensor<f64>) -> tensor<?x3xf64> {
  %l = tensor.extract %lim[] : tensor<f64>
  %r = scf.while (%a = %x) : (tensor<?x3xf64>) -> (tensor<?x3xf64>) {
    %s = opc.reduce_sum %a {axes = array<i64: 0, 1>} : (tensor<?x3xf64>) -> tensor<f64>
    %sv = tensor.extract %s[] : tensor<f64>
    %c = arith.cmpf olt, %sv, %l : f64
    scf.condition(%c) %a : tensor<?x3xf64>
  } do {
  ^bb0(%b: tensor<?x3xf64>):
    %d = opc.add %b, %b : (tensor<?x3xf64>, tensor<?x3xf64>) -> tensor<?x3xf64>
    scf.yield %d : tensor<?x3xf64>
  }
  return %r : tensor<?x3xf64>
}
func.func @i(%p: tensor<i1>, %x: tensor<?x3xf64>) -> tensor<?x3xf64> {
  %c = tensor.extract %p[] : tensor<i1>
  %r = scf.if %c -> (tensor<?x3xf64>) {
    %a = opc.exp %x : (tensor<?x3xf64>) -> tensor<?x3xf64>
    scf.yield %a : tensor<?x3xf64>
  } else {
    %b = opc.sin %x : (tensor<?x3xf64>) -> tensor<?x3xf64>
    scf.yield %b : tensor<?x3xf64>
  }
  return %r : tensor<?x3xf64>
}
func.func @nest(%x: tensor<?x?xf64>) -> tensor<?xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = tensor.dim %x, %c0 : tensor<?x?xf64>
  %m = tensor.dim %x, %c1 : tensor<?x?xf64>
  %z = opc.full %n {value = 0.0 : f64} : (index) -> tensor<?xf64>
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %z) -> (tensor<?xf64>) {
    %row = tensor.extract_slice %x[%i, 0] [1, %m] [1, 1] : tensor<?x?xf64> to tensor<?xf64>
    %s = scf.for %j = %c0 to %m step %c1 iter_args(%t = %acc) -> (tensor<?xf64>) {
      %e = tensor.extract_slice %row[%j] [1] [1] : tensor<?xf64> to tensor<1xf64>
      %old = tensor.extract_slice %t[%i] [1] [1] : tensor<?xf64> to tensor<1xf64>
      %sum = opc.add %old, %e : (tensor<1xf64>, tensor<1xf64>) -> tensor<1xf64>
      %sq = opc.tanh %sum : (tensor<1xf64>) -> tensor<1xf64>
      %t2 = tensor.insert_slice %sq into %t[%i] [1] [1] : tensor<1xf64> into tensor<?xf64>
      scf.yield %t2 : tensor<?xf64>
    }
    scf.yield %s : tensor<?xf64>
  }
  return %r : tensor<?xf64>
}
"""


@pytest.fixture(scope="module")
def m():
    return opc.compile(PROGRAMS, grad=True)


def while_ref(x, lim):
    while x.sum() < lim:
        x = x + x
    return x


@pytest.mark.parametrize("rows", [0, 1, 4])
def test_while_over_run_time_rows(m, rows):
    rng = np.random.default_rng(rows)
    x = np.abs(rng.standard_normal((rows, 3))) + 0.1
    lim = np.array(10.0 if rows else -1.0)  # no rows: a sum of 0 stops at once
    np.testing.assert_allclose(m.w(x, lim), while_ref(x, lim))
    if rows:
        check_grad(lambda x: m.w(x, lim), lambda x, d: m.w_grad(x, lim, d), [x], rng, h=1e-7)


@pytest.mark.parametrize("flag", [True, False])
@pytest.mark.parametrize("rows", [0, 5])
def test_if_with_run_time_results(m, flag, rows):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 3))
    np.testing.assert_allclose(m.i(np.array(flag), x), np.exp(x) if flag else np.sin(x))
    if rows:
        check_grad(lambda x: m.i(np.array(flag), x), lambda x, d: m.i_grad(np.array(flag), x, d), [x], rng)


def nest_ref(x):
    out = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i] = np.tanh(out[i] + x[i, j])
    return out


@pytest.mark.parametrize("shape", [(0, 2), (3, 0), (1, 1), (3, 4)])
def test_nested_loops_over_two_run_time_dims(m, shape):
    """x[i] read with a run-time size (its row), then element j of it, written at out[i]."""
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape)
    np.testing.assert_allclose(m.nest(x), nest_ref(x))
    if 0 not in shape:
        check_grad(m.nest, m.nest_grad, [x], rng)
