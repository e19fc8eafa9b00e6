"""Grad ops as forward ops: first order through their invoke or composite rules against finite
differences; Paddle's cast double and triple grad."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import (
    RNG,
    T34,
    as_tuple,
    finite_diff,
    signed,
    uniform,
)

import opc
from opc.ir import parse_text

# ---------------------------------------------------------------------------
# Grad ops as forward ops (first order through their rules), Paddle's cast
# double and triple grad
# ---------------------------------------------------------------------------

GRAD_OPS = f"""
func.func @relu_grad(%x: {T34}, %d: {T34}) -> {T34} {{
  %r = opc.relu_grad %x, %d : ({T34}, {T34}) -> {T34}
  func.return %r : {T34}
}}
func.func @gelu_grad_tanh(%x: {T34}, %d: {T34}) -> {T34} {{
  %r = opc.gelu_grad %x, %d {{approximate = true}} : ({T34}, {T34}) -> {T34}
  func.return %r : {T34}
}}
func.func @gelu_grad_erf(%x: {T34}, %d: {T34}) -> {T34} {{
  %r = opc.gelu_grad %x, %d {{approximate = false}} : ({T34}, {T34}) -> {T34}
  func.return %r : {T34}
}}
func.func @cast_grad(%x: {T34}, %d: tensor<3x4xf32>) -> {T34} {{
  %r = opc.cast_grad %x, %d : ({T34}, tensor<3x4xf32>) -> {T34}
  %s = opc.mul %r, %x : ({T34}, {T34}) -> {T34}
  func.return %s : {T34}
}}
""" + "".join(f"""
func.func @fge_grad_{act}(%x: tensor<3x4xf64>, %y: tensor<5x4xf64>, %z: tensor<3x5xf64>, %d: tensor<3x5xf64>)
    -> (tensor<3x4xf64>, tensor<5x4xf64>, tensor<5xf64>) {{
  %dx, %dy, %db = opc.fused_gemm_epilogue_grad %x, %y, {"%z, " if act != "none" else ""}%d
    {{activation_grad = "{act_grad}", trans_y = true}} : (tensor<3x4xf64>, tensor<5x4xf64>, {"tensor<3x5xf64>, " if act != "none" else ""}tensor<3x5xf64>)
    -> (tensor<3x4xf64>, tensor<5x4xf64>, tensor<5xf64>)
  func.return %dx, %dy, %db : tensor<3x4xf64>, tensor<5x4xf64>, tensor<5xf64>
}}""" for act, act_grad in (("none", "none"), ("relu", "relu_grad"), ("gelu", "gelu_grad"))) + """
// Paddle's TestCastDoubleGradCheck / TestCastTripleGradCheck: float32 [2, 3, 4] cast to float64.
func.func @paddle_cast(%data: tensor<2x3x4xf32>) -> tensor<2x3x4xf64> {
  %out = opc.cast %data {dtype = f64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf64>
  func.return %out : tensor<2x3x4xf64>
}
"""
GRAD_OP_CASES = {  # name: the samplers of its arguments (away from relu's kink)
    "relu_grad": [signed, uniform], "gelu_grad_tanh": [uniform, uniform], "gelu_grad_erf": [uniform, uniform],
    "cast_grad": [uniform, uniform], "fge_grad_none": [uniform, uniform, uniform, uniform],
    "fge_grad_relu": [uniform, uniform, signed, uniform], "fge_grad_gelu": [uniform, uniform, uniform, uniform],
}  # fmt: skip


@pytest.fixture(scope="module")
def grad_ops_module():
    from opc.autodiff import add_grad_function, add_grad_functions, default_wrt, find_func

    m = parse_text(GRAD_OPS).module
    add_grad_functions(m)
    g = find_func(m, "paddle_cast_grad")
    gg = add_grad_function(m, g, default_wrt(g))  # double: w.r.t. data and dout
    add_grad_function(m, gg, list(range(len(gg.args))))  # triple: w.r.t. data, dout and ddata
    for f in list(m.ops):
        if f.sym_name.data.endswith("_value_and_grad"):  # type: ignore[attr-defined]
            f.detach()
            f.erase()
    return opc.compile(m)


def grad_op_args(name: str) -> list[np.ndarray]:
    samplers = GRAD_OP_CASES[name]
    shapes = [(3, 4), (5, 4), (3, 5), (3, 5)] if name.startswith("fge") else [(3, 4), (3, 4)]
    args = [s(shape) for s, shape in zip(samplers, shapes)]
    if name == "cast_grad":
        args[1] = args[1].astype(np.float32)
    return args


@pytest.mark.parametrize("name", list(GRAD_OP_CASES))
def test_grad_op_first_order_finite_differences(grad_ops_module, name: str) -> None:
    """A function made of a grad op is differentiated through the op's invoke / composite rule."""
    args = grad_op_args(name)
    f = getattr(grad_ops_module, name)
    douts = [RNG.uniform(-1, 1, np.shape(o)) for o in as_tuple(f(*args))]
    got = as_tuple(getattr(grad_ops_module, f"{name}_grad")(*args, *douts))
    wrt = [i for i, a in enumerate(args) if a.dtype == np.float64]  # cast_grad's f32 dout: checked below
    want = finite_diff(f, args, douts, wrt)
    for i, w in zip(wrt, want):
        np.testing.assert_allclose(got[i], w, rtol=1e-5, atol=1e-6, err_msg=f"{name}: grad of argument {i}")
    if name == "cast_grad":  # d/dd of cast(d, f64) * x is x, rounded to the dout's f32
        np.testing.assert_array_equal(got[1], (douts[0] * args[0]).astype(np.float32))


def test_paddle_cast_double_grad(grad_ops_module) -> None:
    """f32 -> f64: the grad of cast_grad is cast(ddx, f64) w.r.t. the dout, 0 w.r.t. the data."""
    m = grad_ops_module
    data = RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
    dout, ddata = RNG.uniform(-1, 1, (2, 3, 4)), RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
    g_data, g_dout = m.paddle_cast_grad_grad(data, dout, ddata)
    assert g_data.dtype == np.float32 and g_dout.dtype == np.float64
    np.testing.assert_array_equal(g_data, np.zeros((2, 3, 4), np.float32))
    np.testing.assert_array_equal(g_dout, ddata.astype(np.float64))
    # Paddle's gradient_checker: finite differences (eps 0.005) of <cast_grad(data, dout), ddata>
    want = finite_diff(m.paddle_cast_grad, [data, dout], [ddata], [0, 1], eps=0.005)
    np.testing.assert_allclose(g_data, want[0], atol=1e-6)
    np.testing.assert_allclose(g_dout, want[1], rtol=1e-4, atol=1e-4)  # f32 rounding of the perturbed output


def test_paddle_cast_triple_grad(grad_ops_module) -> None:
    m = grad_ops_module
    data = RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
    dout, ddata = RNG.uniform(-1, 1, (2, 3, 4)), RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
    d_gdata, d_gdout = RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32), RNG.uniform(-1, 1, (2, 3, 4))
    got = m.paddle_cast_grad_grad_grad(data, dout, ddata, d_gdata, d_gdout)
    assert [g.dtype for g in got] == [np.float32, np.float64, np.float32]
    np.testing.assert_array_equal(got[0], np.zeros((2, 3, 4), np.float32))
    np.testing.assert_array_equal(got[1], np.zeros((2, 3, 4)))
    np.testing.assert_array_equal(got[2], d_gdout.astype(np.float32))
    want = finite_diff(m.paddle_cast_grad_grad, [data, dout, ddata], [d_gdata, d_gdout], [0, 1, 2], eps=0.005)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
