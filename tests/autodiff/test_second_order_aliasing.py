"""A grad op differentiated through its rule (grad=2) where one value is several of its operands:
self-attention's q = k = v. The value's cotangent is the sum over its uses, counted once (it was
counted once per operand: three times). Against central differences of the first-order gradient."""

from __future__ import annotations

import numpy as np
import pytest

import opc

PROGRAM = """func.func @f(%x: tensor<1x3x4xf64>, %k: tensor<1x3x4xf64>, %v: tensor<1x3x4xf64>) -> tensor<f64> {{
  %a, %lse = opc.attention {operands} {{scale = 0.5 : f64, is_causal = {causal}}} : (tensor<1x3x4xf64>, tensor<1x3x4xf64>, tensor<1x3x4xf64>) -> (tensor<1x3x4xf64>, tensor<1x3xf64>)
  %t = opc.tanh %a : (tensor<1x3x4xf64>) -> tensor<1x3x4xf64>
  %l = opc.reduce_sum %t {{axes = array<i64: 0, 1, 2>}} : (tensor<1x3x4xf64>) -> tensor<f64>
  func.return %l : tensor<f64>
}}"""


@pytest.mark.parametrize("causal", ["false", "true"])
@pytest.mark.parametrize("operands", ["%x, %x, %x", "%x, %x, %v", "%x, %k, %x", "%x, %k, %v"])
def test_hessian_vector_product_with_shared_operands(causal, operands):
    m = opc.compile(PROGRAM.format(operands=operands, causal=causal), grad=2)
    rng = np.random.default_rng(1)
    x, k, v, d = (rng.standard_normal((1, 3, 4)) for _ in range(4))
    zeros = [np.zeros_like(x)] * 2
    hvp = m.f_grad_grad(x, k, v, np.float64(1.0), d, *zeros)[0]

    def grad_x(at):  # noqa: ANN001, ANN202
        return m.f_grad(at, k, v, np.float64(1.0))[0]

    np.testing.assert_allclose(hvp, (grad_x(x + 1e-5 * d) - grad_x(x - 1e-5 * d)) / 2e-5, rtol=1e-6, atol=1e-8)
