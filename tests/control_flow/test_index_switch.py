"""scf.index_switch over tensors: forward against NumPy for every case and the default, gradients
(a grad index_switch on the same index) against central differences in f64, the printed form
parsed back, a constant index canonicalized to its case, `opc explain`, and a located error for a
case yielding the wrong type."""

from typing import Any

import numpy as np
import pytest
from test_control_flow_grad import check_grad

import opc
from opc.errors import OpcError

# r = case k of {0: exp(x) * w, 2: x * x, -1: w, default: tanh(x) - w}; returns r * x
SWITCH = """
func.func @f(%k: tensor<i64>, %x: tensor<4xf64>, %w: tensor<4xf64>) -> tensor<4xf64> {
  %ki = tensor.extract %k[] : tensor<i64>
  %kk = arith.index_cast %ki : i64 to index
  %r = scf.index_switch %kk -> tensor<4xf64>
  case 0 {
    %a = opc.exp %x : (tensor<4xf64>) -> tensor<4xf64>
    %b = opc.mul %a, %w : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    scf.yield %b : tensor<4xf64>
  }
  case 2 {
    %c = opc.mul %x, %x : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    scf.yield %c : tensor<4xf64>
  }
  case -1 {
    scf.yield %w : tensor<4xf64>
  }
  default {
    %d = opc.tanh %x : (tensor<4xf64>) -> tensor<4xf64>
    %e = opc.sub %d, %w : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    scf.yield %e : tensor<4xf64>
  }
  %s = opc.mul %r, %x : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
  return %s : tensor<4xf64>
}
"""


def switch_ref(k, x, w):
    cases = {0: lambda: np.exp(x) * w, 2: lambda: x * x, -1: lambda: w}
    return cases.get(k, lambda: np.tanh(x) - w)() * x


@pytest.fixture(scope="module")
def mod():
    return opc.compile(SWITCH, grad=True)


CASES = [0, 2, -1, 1, 7, -5]  # three cases, then indices that take the default


@pytest.mark.parametrize("k", CASES)
def test_forward_every_case_and_default(mod, k):
    rng = np.random.default_rng(20 + k)
    x, w = rng.standard_normal(4), rng.standard_normal(4)
    np.testing.assert_allclose(mod.f(np.array(k), x, w), switch_ref(k, x, w), rtol=1e-14)


@pytest.mark.parametrize("k", CASES)
def test_grad_every_case_and_default(mod, k):
    rng = np.random.default_rng(30 + k)
    check_grad(mod, [np.array(k)], [rng.standard_normal(4), rng.standard_normal(4)], rng)


def test_f32_and_a_multi_result_switch():
    """Two results, f32, a case capturing nothing but a constant."""
    src = """
func.func @g(%k: tensor<i32>, %x: tensor<3xf32>) -> (tensor<3xf32>, tensor<f32>) {
  %ki = tensor.extract %k[] : tensor<i32>
  %kk = arith.index_cast %ki : i32 to index
  %r:2 = scf.index_switch %kk -> tensor<3xf32>, tensor<f32>
  case 1 {
    %n = opc.neg %x : (tensor<3xf32>) -> tensor<3xf32>
    %s = opc.reduce_sum %x {axes = array<i64: 0>, keepdim = false} : (tensor<3xf32>) -> tensor<f32>
    scf.yield %n, %s : tensor<3xf32>, tensor<f32>
  }
  default {
    %z = arith.constant dense<2.0> : tensor<f32>
    scf.yield %x, %z : tensor<3xf32>, tensor<f32>
  }
  return %r#0, %r#1 : tensor<3xf32>, tensor<f32>
}
"""
    m: Any = opc.compile(src)
    x = np.array([1.0, 2.0, 4.0], np.float32)
    a, b = m.g(np.array(1, np.int32), x)
    np.testing.assert_array_equal(a, -x)
    assert float(b) == 7.0
    a, b = m.g(np.array(0, np.int32), x)
    np.testing.assert_array_equal(a, x)
    assert float(b) == 2.0


def test_grad_is_a_switch_on_the_same_index():
    from opc.api import prepare
    from opc.frontend import load_module

    src = load_module(SWITCH)
    prepare(src, grad=True)
    text = str(src.module)
    grad_fn = text[text.index("@f_grad("):]
    grad_fn = grad_fn[:grad_fn.find("func.func")] if "func.func" in grad_fn else grad_fn
    assert grad_fn.count("scf.index_switch") == 2 and "opc.select" not in grad_fn


def test_print_parse_round_trip():
    from opc.frontend import load_module

    once = str(load_module(SWITCH).module)
    twice = str(load_module(once).module)
    assert once == twice
    assert "case -1" in once and "default" in once


@pytest.mark.parametrize("k, want", [(2, "opc.mul %x, %x"), (-1, None), (9, "opc.tanh")])
def test_constant_index_canonicalized_to_its_case(k, want):
    from opc.frontend import load_module
    from opc.ir import make_context
    from opc.transforms.canonicalize import CanonicalizePass

    src = SWITCH.replace("%k: tensor<i64>, ", "").replace(
        "%ki = tensor.extract %k[] : tensor<i64>", f"%kc = arith.constant dense<{k}> : tensor<i64>\n"
        "  %ki = tensor.extract %kc[] : tensor<i64>")
    m = load_module(src)
    CanonicalizePass().apply(make_context(), m.module)
    text = str(m.module)
    assert "scf.index_switch" not in text, text
    if want:
        assert want in text
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(4), rng.standard_normal(4)
    np.testing.assert_allclose(opc.compile(text).f(x, w), switch_ref(k, x, w), rtol=1e-14)


def test_explain_shows_the_switch():
    from opc.explain import explain, explain_kernels
    from opc.frontend import load_module

    text = explain(load_module(SWITCH).module, "cpu")
    row = next(line for line in text.splitlines() if line.split()[:1] == ["scf.index_switch"])
    assert "host" in row and "C switch" in row
    assert explain_kernels(load_module(SWITCH).module, "cpu").count("body of scf.index_switch") == 4


def test_yield_of_the_wrong_type_is_a_located_error():
    bad = SWITCH.replace("""    %c = opc.mul %x, %x : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    scf.yield %c : tensor<4xf64>""", """    %c = opc.reduce_sum %x {axes = array<i64: 0>, keepdim = false} : (tensor<4xf64>) -> tensor<f64>
    scf.yield %c : tensor<f64>""")
    with pytest.raises(OpcError) as err:
        opc.compile(bad)
    text = str(err.value)
    assert "\n" not in text and "<string>:5:3:" in text and "case 2's scf.yield gives (tensor<f64>)" in text, text


# a switch inside a loop on the iteration number mod 3 (and a default never taken)
SWITCH_IN_FOR = """
func.func @h(%n: tensor<i64>, %x: tensor<3xf64>, %w: tensor<3xf64>) -> tensor<3xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %ni = tensor.extract %n[] : tensor<i64>
  %nn = arith.index_cast %ni : i64 to index
  %r = scf.for %i = %c0 to %nn step %c1 iter_args(%a = %x) -> (tensor<3xf64>) {
    %q = arith.divsi %i, %c3 : index
    %q3 = arith.muli %q, %c3 : index
    %m = arith.subi %i, %q3 : index
    %s = scf.index_switch %m -> tensor<3xf64>
    case 0 {
      %t = opc.tanh %a : (tensor<3xf64>) -> tensor<3xf64>
      scf.yield %t : tensor<3xf64>
    }
    case 1 {
      %u = opc.mul %a, %w : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
      scf.yield %u : tensor<3xf64>
    }
    case 2 {
      %v = opc.sin %a : (tensor<3xf64>) -> tensor<3xf64>
      scf.yield %v : tensor<3xf64>
    }
    default {
      scf.yield %w : tensor<3xf64>
    }
    scf.yield %s : tensor<3xf64>
  }
  return %r : tensor<3xf64>
}
"""


def switch_in_for_ref(n, x, w):
    a = x.copy()
    for i in range(n):
        a = [np.tanh, lambda v: v * w, np.sin][i % 3](a)
    return a


@pytest.mark.parametrize("n", [0, 1, 7])
def test_switch_in_a_loop_forward_and_grad(n):
    m = opc.compile(SWITCH_IN_FOR, grad=True)
    rng = np.random.default_rng(40 + n)
    x, w = rng.uniform(-1, 1, 3), rng.uniform(-1, 1, 3)
    np.testing.assert_allclose(m.h(np.array(n), x, w), switch_in_for_ref(n, x, w), rtol=1e-13)
    check_grad(type("M", (), {"f": m.h, "f_grad": m.h_grad}), [np.array(n)], [x, w], rng)
