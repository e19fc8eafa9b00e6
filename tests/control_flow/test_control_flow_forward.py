"""scf.if / scf.for / scf.while over tensors, compiled to C: each against NumPy, with trip
counts 0, 1 and large, conditions both ways, nested loops, a loop in an if and an if in a loop."""

import numpy as np
import pytest
from cf_programs import (
    FOR,
    FOR_SIZES,
    IF,
    IF_IN_LOOP,
    LOOP_IN_IF,
    NESTED,
    WHILE,
    WHILE_SIZES,
    for_ref,
    for_sizes_ref,
    if_in_loop_ref,
    if_ref,
    loop_in_if_ref,
    nested_ref,
    while_ref,
    while_sizes_ref,
)

import opc

RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def mods():
    srcs = {"if": IF, "for": FOR, "while": WHILE, "nested": NESTED, "loop_in_if": LOOP_IN_IF,
            "if_in_loop": IF_IN_LOOP, "for_sizes": FOR_SIZES, "while_sizes": WHILE_SIZES}
    return {k: opc.compile(v) for k, v in srcs.items()}


@pytest.mark.parametrize("flag", [True, False])
def test_if_both_ways(mods, flag):
    x = RNG.standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(mods["if"].f(np.array(flag), x), if_ref(flag, x), rtol=1e-6)


@pytest.mark.parametrize("n", [0, 1, 2, 1000, -3])
def test_for_trip_counts(mods, n):
    x = RNG.standard_normal(4).astype(np.float32)
    w = np.full(4, 0.5, np.float32)
    np.testing.assert_allclose(mods["for"].f(np.array(n), x, w), for_ref(max(n, 0), x, w), rtol=1e-5)


@pytest.mark.parametrize("lim, trips", [(-1.0, 0), (4.5, 1), (6.0 * 2.0 ** 999, 1000)])
def test_while_trip_counts(mods, lim, trips):
    x = np.ones(4)
    a, k = mods["while"].f(x, np.array(lim))
    ra, rk = while_ref(x, lim)
    assert rk == trips and k == trips
    np.testing.assert_array_equal(a, ra)


@pytest.mark.parametrize("rows, n", [(0, 3), (1, 0), (1, 1), (7, 5), (300, 2)])
def test_for_carries_run_time_sizes(mods, rows, n):
    """A carried tensor<?x4xf32> and a captured one: one module for every row count."""
    x, p = (RNG.standard_normal((rows, 4)).astype(np.float32) for _ in range(2))
    w = np.full(4, 0.5, np.float32)
    got = mods["for_sizes"].f(np.array(n), x, w, p)
    assert got.shape == (rows, 4)
    np.testing.assert_allclose(got, for_sizes_ref(n, x, w, p), rtol=1e-5)


@pytest.mark.parametrize("size, lim", [(1, 0.0), (3, 10.0), (50, 1e6)])
def test_while_carries_run_time_sizes(mods, size, lim):
    x = RNG.uniform(0.5, 1.0, size)
    np.testing.assert_array_equal(mods["while_sizes"].f(x, np.array(lim)), while_sizes_ref(x, lim))


@pytest.mark.parametrize("n, m", [(0, 5), (3, 0), (1, 1), (4, 7), (30, 40)])
def test_nested_for(mods, n, m):
    x = RNG.standard_normal(3)
    np.testing.assert_allclose(mods["nested"].f(np.array(n), np.array(m), x), nested_ref(n, m, x), rtol=1e-12)


@pytest.mark.parametrize("flag, n", [(True, 0), (True, 1), (True, 100), (False, 5)])
def test_loop_in_if(mods, flag, n):
    x = RNG.standard_normal(5).astype(np.float32)
    out = mods["loop_in_if"].f(np.array(flag), np.array(n), x)
    np.testing.assert_allclose(out, loop_in_if_ref(flag, n, x), rtol=1e-6)


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_if_in_loop(mods, n):
    x = RNG.standard_normal(4)
    out = mods["if_in_loop"].f(np.array(n), np.array(3.0), x)
    np.testing.assert_allclose(out, if_in_loop_ref(n, 3.0, x), rtol=1e-12)


def test_inputs_not_written(mods):
    """The initial value of a loop-carried tensor is read in place, never written."""
    x = RNG.standard_normal(4).astype(np.float32)
    keep = x.copy()
    mods["for"].f(np.array(5), x, np.full(4, 2.0, np.float32))
    np.testing.assert_array_equal(x, keep)


def emitted_c(src: str) -> str:
    from opc.api import emit
    from opc.frontend import load_module

    return emit(load_module(src), "c")


def test_trip_count_costs_no_compile(mods):
    """One compiled module serves 2 and 2000 trips: the trip count is a run-time value."""
    m = mods["for"]
    x = np.ones(4, np.float32)
    w = np.full(4, 0.5, np.float32)
    np.testing.assert_allclose(m.f(np.array(2), x, w), for_ref(2, x, w), rtol=1e-6)
    np.testing.assert_allclose(m.f(np.array(2000), x, w), for_ref(2000, x, w), rtol=1e-5)


def test_constant_trip_count_does_not_grow_the_code():
    """A loop of 2000 constant steps generates the same C as one of 2 but for the bound: the body
    is compiled once (no unrolling), so it compiles no slower."""
    fixed = FOR.replace("%nn = arith.index_cast %ni : i64 to index", "%nn = arith.constant TRIPS : index")
    two, many = emitted_c(fixed.replace("TRIPS", "2")), emitted_c(fixed.replace("TRIPS", "2000"))
    assert len(many) - len(two) == len("2000") - len("2")
    assert two.count("opc_fn_f__for0(") == 2  # the body's definition and its one call


def test_body_error_reaches_caller():
    """A run-time check inside a body (gather index out of range) raises from the caller."""
    src = """
func.func @f(%n: tensor<i64>, %x: tensor<4xf32>, %idx: tensor<2xi64>) -> tensor<2xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ni = tensor.extract %n[] : tensor<i64>
  %nn = arith.index_cast %ni : i64 to index
  %z = arith.constant dense<0.0> : tensor<2xf32>
  %r = scf.for %i = %c0 to %nn step %c1 iter_args(%acc = %z) -> (tensor<2xf32>) {
    %g = opc.gather %x, %idx {axis = 0 : i64} : (tensor<4xf32>, tensor<2xi64>) -> tensor<2xf32>
    %s = opc.add %acc, %g : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    scf.yield %s : tensor<2xf32>
  }
  return %r : tensor<2xf32>
}
"""
    m = opc.compile(src)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(m.f(np.array(3), x, np.array([1, -1])), [3.0, 9.0])
    with pytest.raises(IndexError):
        m.f(np.array(3), x, np.array([1, 7]))
    np.testing.assert_allclose(m.f(np.array(0), x, np.array([1, 7])), [0.0, 0.0])  # the body never ran


def test_step_not_positive_is_value_error():
    src = FOR.replace("%c1 = arith.constant 1 : index", "%c1 = arith.constant 1 : index\n"
                      "  %st = tensor.extract %n[] : tensor<i64>\n  %sti = arith.index_cast %st : i64 to index"
                      ).replace("step %c1", "step %sti")
    m = opc.compile(src)
    x = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="step"):
        m.f(np.array(0), x, x)
    np.testing.assert_allclose(m.f(np.array(1), x, x), for_ref(1, x, x))
