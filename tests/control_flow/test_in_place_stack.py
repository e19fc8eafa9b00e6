"""A loop value updated a slot per step (a scan's or an RNN's stacked outputs: one buffer all along)
starts as its initial value written straight into that buffer: a constant initial value has no
buffer of its own copied in, and a stack the function returns is its output buffer, with no copy
after the loop. Numbers against NumPy, at static and run-time sizes, a trip count short of the
stack (its zero rows stay zero), and where the same constant starts two loops, one returned."""

import re

import numpy as np
import pytest

import opc
from opc.api import emit
from opc.frontend import load_module

# rows 0..n-1 of a zero [6, 4] stack: tanh(x * (i + 1)); the stack returned, and its sum
STACK = """
func.func @f(%n: tensor<i64>, %x: tensor<4xf32>) -> (tensor<6x4xf32>, tensor<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ni = tensor.extract %n[] : tensor<i64>
  %nn = arith.index_cast %ni : i64 to index
  %z = opc.full {value = 0.0 : f32} : () -> tensor<6x4xf32>
  %r = scf.for %i = %c0 to %nn step %c1 iter_args(%acc = %z) -> (tensor<6x4xf32>) {
    %ii = arith.index_cast %i : index to i64
    %k = tensor.from_elements %ii : tensor<i64>
    %kf = opc.cast %k {dtype = f32} : (tensor<i64>) -> tensor<f32>
    %one = opc.full {value = 1.0 : f32} : () -> tensor<f32>
    %k1 = opc.add %kf, %one : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %y = opc.mul %x, %k1 : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    %t = opc.tanh %y : (tensor<4xf32>) -> tensor<4xf32>
    %row = opc.reshape %t : (tensor<4xf32>) -> tensor<1x4xf32>
    %next = tensor.insert_slice %row into %acc[%i, 0] [1, 4] [1, 1] : tensor<1x4xf32> into tensor<6x4xf32>
    scf.yield %next : tensor<6x4xf32>
  }
  %s = opc.reduce_sum %r {axes = array<i64: 0>, keepdim = false} : (tensor<6x4xf32>) -> tensor<4xf32>
  return %r, %s : tensor<6x4xf32>, tensor<4xf32>
}
"""


def stack_ref(n: int, x: np.ndarray) -> np.ndarray:
    out = np.zeros((6, 4), np.float32)
    for i in range(n):
        out[i] = np.tanh(x * np.float32(i + 1))
    return out


@pytest.fixture(scope="module")
def stack():
    return opc.compile(STACK)


@pytest.mark.parametrize("n", [0, 1, 4, 6])
def test_stack_starts_in_the_output(stack, n):
    x = np.random.default_rng(n).standard_normal(4).astype(np.float32)
    want = stack_ref(n, x)
    r, s = stack.f(np.array(n), x)
    np.testing.assert_allclose(r, want, rtol=1e-6, atol=1e-7)  # rows past n: the zeros it started as
    np.testing.assert_allclose(s, want.sum(0), rtol=1e-5, atol=1e-6)


def test_no_buffer_of_the_constant_and_no_copy_after_the_loop():
    c = emit(load_module(STACK), "c")
    host = c[c.index("int opc_fn_f("):]
    assert "carried_a" not in host and "carried_b" not in host  # the stack is the output itself
    assert host.count("opc_fn_f__for0(") == 1
    loop = host.index("opc_fn_f__for0(")
    assert re.search(r"opc_k_f_\d+\(out0_\d+\);", host[:loop])  # the zero fill writes the output
    assert re.search(r"float \*v_\d+; v_\d+ = \(float \*\)out0_\d+;", host[:loop])  # the body writes it too
    assert "(out0_" not in host[loop:]  # and nothing copies into it after the loop


def test_one_constant_starting_two_loops():
    """CSE gives both loops one zero constant: each fills its own buffer (one of them the output)."""
    two = STACK.replace("  %s = opc.reduce_sum %r", """  %r2 = scf.for %i = %c0 to %nn step %c1 iter_args(%acc = %z) -> (tensor<6x4xf32>) {
    %row = opc.reshape %x : (tensor<4xf32>) -> tensor<1x4xf32>
    %next = tensor.insert_slice %row into %acc[%i, 0] [1, 4] [1, 1] : tensor<1x4xf32> into tensor<6x4xf32>
    scf.yield %next : tensor<6x4xf32>
  }
  %s = opc.reduce_sum %r2""")
    m = opc.compile(two)
    x = np.arange(1, 5, dtype=np.float32)
    for n in (0, 3, 6):
        r, s = m.f(np.array(n), x)
        np.testing.assert_allclose(r, stack_ref(n, x), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(s, x * n, rtol=1e-6)
