"""opc.jax on a function whose results' sizes depend on the data (sig.found: opc.nonzero's
count): eager calls and jax.grad on concrete arrays, and one line saying why under jax.jit and
jax.vmap (JAX has no data-dependent shapes). Oracle: the same formula in NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from requires import import_or_skip

jax = import_or_skip("jax", "opc.jax wraps compiled functions as JAX callables")
import jax.numpy as jnp  # noqa: E402
from interop_source import DATA_SIZED, MASKS, numpy_compress  # noqa: E402

import opc  # noqa: E402
from opc.errors import UnsupportedError  # noqa: E402
from opc.interop import jax as opc_jax  # noqa: E402  (opc.jax is this module)

RNG = np.random.default_rng(6)


@pytest.fixture(scope="module")
def m():
    jax.config.update("jax_enable_x64", True)  # compress is float64, its index result int64
    return opc.compile(DATA_SIZED, grad=True)


def cases():
    for mask in MASKS:
        yield RNG.standard_normal((len(mask), 3)), np.array(mask, bool)


def test_eager_call_and_grad_match_numpy(m):
    fn = opc_jax.op(m.compress)

    def loss(x, c):  # noqa: ANN001, ANN202
        t, _ = fn(x, c)
        return (t ** 2).sum()

    for x, c in cases():
        t_want, idx_want, dx_want = numpy_compress(x, c)
        t, idx = fn(jnp.asarray(x), jnp.asarray(c))
        np.testing.assert_allclose(np.asarray(t), t_want, rtol=1e-12)
        np.testing.assert_array_equal(np.asarray(idx), idx_want)
        dx = jax.grad(loss)(jnp.asarray(x), jnp.asarray(c))
        np.testing.assert_allclose(np.asarray(dx), dx_want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("transform", ["jit", "vmap"])
def test_a_tracer_gets_one_line_saying_the_size_depends_on_the_data(m, transform):
    fn = opc_jax.op(m.compress)
    x, c = jnp.zeros((2, 4, 3)), jnp.ones((2, 4), bool)
    call = jax.jit(fn) if transform == "jit" else jax.vmap(fn)
    with pytest.raises(UnsupportedError, match=r"compress\(\): its results' sizes depend on the data") as err:
        call(x[0], c[0]) if transform == "jit" else call(x, c)
    assert "\n" not in str(err.value)
