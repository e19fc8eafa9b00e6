"""Gradients through scf.if (a grad if on the same condition) against central differences in f64."""

import numpy as np
import pytest

import opc

# y = flag ? exp(x) * w : x * x - w ; a branch reads w from outside, both read x
IF64 = """
func.func @f(%flag: tensor<i1>, %x: tensor<4xf64>, %w: tensor<4xf64>) -> tensor<4xf64> {
  %p = tensor.extract %flag[] : tensor<i1>
  %r = scf.if %p -> (tensor<4xf64>) {
    %a = opc.exp %x : (tensor<4xf64>) -> tensor<4xf64>
    %b = opc.mul %a, %w : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    scf.yield %b : tensor<4xf64>
  } else {
    %c = opc.mul %x, %x : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    %d = opc.sub %c, %w : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    scf.yield %d : tensor<4xf64>
  }
  %s = opc.tanh %r : (tensor<4xf64>) -> tensor<4xf64>
  return %s : tensor<4xf64>
}
"""

# an if inside an if: the inner one only on the outer's then branch
NESTED_IF = """
func.func @f(%p1: tensor<i1>, %p2: tensor<i1>, %x: tensor<3xf64>) -> tensor<3xf64> {
  %a = tensor.extract %p1[] : tensor<i1>
  %r = scf.if %a -> (tensor<3xf64>) {
    %b = tensor.extract %p2[] : tensor<i1>
    %s = scf.if %b -> (tensor<3xf64>) {
      %e = opc.sin %x : (tensor<3xf64>) -> tensor<3xf64>
      scf.yield %e : tensor<3xf64>
    } else {
      scf.yield %x : tensor<3xf64>
    }
    %t = opc.mul %s, %x : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
    scf.yield %t : tensor<3xf64>
  } else {
    %n = opc.neg %x : (tensor<3xf64>) -> tensor<3xf64>
    scf.yield %n : tensor<3xf64>
  }
  return %r : tensor<3xf64>
}
"""


@pytest.fixture(scope="module")
def mods():
    return {"if": opc.compile(IF64, grad=True), "nested": opc.compile(NESTED_IF.replace("opc.sin", "opc.tanh"),
                                                                      grad=True)}


def check_grad(m, flags, floats, rng):
    """<grad, v> against (L(a + hv) - L(a - hv)) / 2h, L = <f(a), dout>."""
    out = m.f(*flags, *floats)
    dout = rng.standard_normal(out.shape)
    grads = m.f_grad(*flags, *floats, dout)
    grads = grads if isinstance(grads, tuple) else (grads,)
    vs = [rng.standard_normal(a.shape) for a in floats]
    h = 1e-6

    def loss(s):
        return float(np.sum(m.f(*flags, *[a + s * h * v for a, v in zip(floats, vs)]) * dout))

    fd = (loss(1) - loss(-1)) / (2 * h)
    analytic = sum(float(np.sum(g * v)) for g, v in zip(grads, vs))
    assert abs(fd - analytic) <= 1e-6 * max(1.0, abs(fd)), (fd, analytic)


@pytest.mark.parametrize("flag", [True, False])
def test_grad_through_if(mods, flag):
    rng = np.random.default_rng(1)
    check_grad(mods["if"], [np.array(flag)], [rng.standard_normal(4), rng.standard_normal(4)], rng)


@pytest.mark.parametrize("p1, p2", [(True, True), (True, False), (False, True)])
def test_grad_through_nested_if(mods, p1, p2):
    rng = np.random.default_rng(2)
    check_grad(mods["nested"], [np.array(p1), np.array(p2)], [rng.standard_normal(3)], rng)


def test_grad_if_on_the_same_condition():
    """The gradient function holds an scf.if on the forward's condition, not a select of both."""
    from opc.api import prepare
    from opc.frontend import load_module

    src = load_module(IF64)
    prepare(src, grad=True)
    text = str(src.module)
    grad_fn = text[text.index("@f_grad("):]
    grad_fn = grad_fn[:grad_fn.find("func.func")] if "func.func" in grad_fn else grad_fn
    assert grad_fn.count("scf.if") == 2 and "opc.select" not in grad_fn  # the forward's, and its grad
