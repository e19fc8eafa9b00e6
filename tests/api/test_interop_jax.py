"""opc.jax: compiled functions under jax.jit, jax.grad (custom_vjp from opc's NAME_grad, and
grad of grad through NAME_grad_grad) and jax.vmap, against JAX's own evaluation and gradient of
the same formula written in jax.numpy."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

if importlib.util.find_spec("jax") is None:
    pytest.skip("jax not installed", allow_module_level=True)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import opc  # noqa: E402

jax.config.update("jax_enable_x64", True)  # f is float64; the index of g is int64

from interop_source import RUN_TIME, SOURCE  # noqa: E402

REFERENCES = {"f": lambda x, w: (jnp.tanh(x @ w), jnp.exp(x).sum(1)),
              "g": lambda x, i: (jax.nn.sigmoid(jnp.take(x, i, axis=0)), x.astype(jnp.int32))}
TOL = {"f": 1e-12, "g": 1e-6}
RNG = np.random.default_rng(21)


def inputs(name: str) -> tuple[jax.Array, ...]:
    if name == "f":
        return jnp.asarray(RNG.standard_normal((3, 4))), jnp.asarray(RNG.standard_normal((4, 2)))
    return jnp.asarray(RNG.standard_normal((4, 3), np.float32)), jnp.asarray([3, -1, 0, 3, 1])


@pytest.fixture(scope="module")
def m():
    return opc.compile(SOURCE, grad=2)


def loss(fn):
    """A scalar of both results (the integer one does not take part)."""
    return lambda x, y: (fn(x, y)[0] ** 2).sum() + (fn(x, y)[1].sum() if "f" in fn.__name__ else 0.0)


@pytest.mark.parametrize("name", ["f", "g"])
def test_jit_values_match_jax(m, name):
    args = inputs(name)
    got, want = jax.jit(opc.jax.op(m[name]))(*args), REFERENCES[name](*args)
    for o, r in zip(got, want):
        assert o.dtype == r.dtype and o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=TOL[name], atol=0)


@pytest.mark.parametrize("name", ["f", "g"])
def test_grad_under_jit_matches_jax_grad(m, name):
    op = opc.jax.op(m[name])
    ref = REFERENCES[name]
    ref.__name__ = name
    args = inputs(name)
    got = jax.jit(jax.grad(loss(op)))(*args)
    want = jax.grad(loss(ref))(*args)
    np.testing.assert_allclose(got, want, rtol=TOL[name], atol=1e-12)


def test_grad_of_grad_through_f_grad_grad(m):
    op = opc.jax.op(m.f)
    ref = REFERENCES["f"]
    ref.__name__ = "f"
    x, w = inputs("f")
    got, want = (jax.jit(jax.grad(lambda x, fn=fn: jax.grad(loss(fn))(x, w).sum()))(x) for fn in (op, ref))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_vmap_runs_it_per_batch_element(m):
    op = opc.jax.op(m.f)
    xs = jnp.asarray(RNG.standard_normal((5, 3, 4)))
    _, w = inputs("f")
    got = jax.vmap(lambda x: op(x, w)[0])(xs)
    np.testing.assert_allclose(got, jnp.tanh(xs @ w), rtol=1e-12)


def test_without_a_gradient_function_grad_says_how_to_get_one():
    plain = opc.compile(SOURCE)
    x, w = inputs("f")
    with pytest.raises(ValueError, match=r"f\(\) has no gradient: compile the module with grad=True"):
        jax.grad(lambda x: opc.jax.op(plain.f)(x, w)[0].sum())(x)


def test_64_bit_arguments_need_x64():
    m = opc.compile(SOURCE)
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ValueError, match=r"f\(\): its arguments include 64-bit arrays.*jax_enable_x64"):
            opc.jax.op(m.f)(np.ones((3, 4)), np.ones((4, 2)))
    finally:
        jax.config.update("jax_enable_x64", True)


def test_run_time_batch_under_jit_and_grad():
    """A `?` batch: each jit trace's result shape from its input's; jax.grad through NAME_grad."""
    f = opc.jax.op(opc.compile(RUN_TIME, grad=True).mlp)
    w = jnp.asarray(np.random.default_rng(0).standard_normal((8, 4)), jnp.float32)
    for n in (1, 6):
        x = jnp.asarray(np.random.default_rng(n).standard_normal((n, 8)), jnp.float32)
        np.testing.assert_allclose(f(x, w), jnp.tanh(x @ w), rtol=1e-5, atol=1e-6)
        got = jax.grad(lambda x: f(x, w).sum())(x)
        want = jax.grad(lambda x: jnp.tanh(x @ w).sum())(x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
