"""Shared by the gradient tests (tests/autodiff/test_grad_*.py): compiling with gradients, the
tolerance per dtype, central finite differences, samplers, the second-order check."""

from __future__ import annotations

import math
from collections.abc import Callable

import ml_dtypes
import numpy as np

import opc
from opc.ir import parse_text

DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64}
# |got - want| <= TOL * max(1, max|want|), per dtype
TOL = {"f64": 1e-9, "f32": 1e-5, "f16": 5e-3, "bf16": 2e-2}
RNG = np.random.default_rng(0)


def compile_grad(text: str, decompose: str | None = None):
    return opc.compile(text, target="cpu", grad=True, decompose=decompose)


def compile_kept(text: str, keep: Callable[[str], bool], second_order: Callable[[str], bool] = lambda n: False):
    """Grad functions added (and @NAME_grad_grad where second_order(NAME)), then
    only the functions the tests call kept: less C to build than opc.compile(grad=...)."""
    from opc.autodiff import add_grad_function, add_grad_functions, default_wrt, find_func

    module = parse_text(text).module
    forwards = [f.sym_name.data for f in module.ops]  # type: ignore[attr-defined]
    add_grad_functions(module)
    for name in filter(second_order, forwards):
        g = find_func(module, f"{name}_grad")
        add_grad_function(module, g, default_wrt(g))
    for f in list(module.ops):
        if not keep(f.sym_name.data):  # type: ignore[attr-defined]
            f.detach()
            f.erase()
    return opc.compile(module, target="cpu")


def as_tuple(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def close(got, want, dtype: str, what: str = "") -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    assert err <= TOL[dtype] * scale, f"{what}: max error {err:.3g} > {TOL[dtype] * scale:.3g}\n{got}\n{want}"


def finite_diff(f: Callable, args: list[np.ndarray], douts: list[np.ndarray], wrt: list[int], eps: float = 1e-6):
    """d/d args[i] of sum_k <f(args)_k, douts_k>, by central differences."""

    def loss(a: list[np.ndarray]) -> float:
        return sum(float(np.sum(o * d)) for o, d in zip(as_tuple(f(*a)), douts))

    grads = []
    for i in wrt:
        g = np.zeros_like(args[i])
        for idx in np.ndindex(args[i].shape):
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            g[idx] = (loss(plus) - loss(minus)) / (2 * eps)
        grads.append(g)
    return grads


def ttype(shape, dt: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}{dt}>"


A, B = (3, 4), (4,)  # lhs and a broadcasting rhs


def positive(shape):
    return RNG.uniform(0.5, 2.0, shape)


def signed(shape):
    # away from 0, so that abs / relu are smooth around every sample
    return RNG.choice([-1.0, 1.0], shape) * RNG.uniform(0.2, 1.5, shape)


def uniform(shape):
    return RNG.uniform(-1.5, 1.5, shape)


def second_order_check(grad, grad_grad, args: list[np.ndarray], dout: np.ndarray, what: str) -> None:
    """@f_grad_grad(args, dout, dds) against finite differences of <f_grad(args, dout), dds>,
    with respect to every argument of f_grad, the dout included."""
    dds = [RNG.uniform(-1, 1, np.shape(g)) for g in as_tuple(grad(*args, dout))]
    got = as_tuple(grad_grad(*args, dout, *dds))
    want = finite_diff(grad, [*args, dout], dds, list(range(len(args) + 1)))
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        assert np.asarray(g).dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{what}: second-order grad of argument {i}")


T34 = "tensor<3x4xf64>"


def gelu_t(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def gelu_t_grad(x):
    c = math.sqrt(2 / math.pi)
    t = np.tanh(c * (x + 0.044715 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)


def erf(x):
    return np.vectorize(math.erf)(x)


def gelu_e_grad(x):
    return 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
