"""opc functions as JAX callables (`opc.jax`).

    m = opc.compile(src, grad=True)
    mlp = opc.jax.op(m.mlp)
    y = jax.jit(mlp)(x, w, b)
    dw = jax.grad(lambda w: mlp(x, w, b).sum())(w)

The call is a `jax.pure_callback`: XLA calls back into Python on the host, which runs the compiled
C function on the arrays XLA hands it (NumPy views of XLA's buffers, read in place). jax.ffi (an XLA
custom call into a C symbol, no Python on the way) would be cheaper per call, but it needs a C++
handler built against XLA's FFI headers for each function (XLA_FFI_DEFINE_HANDLER); opc builds plain
C through CFFI, so the callback is what fits today. JAX does not differentiate foreign calls:
`jax.custom_vjp` gives the backward from opc's own NAME_grad, itself an op() (so it is jit-able, and
differentiable again where grad=2 built NAME_grad_grad). Under jax.vmap the callback runs once per
batch element (vmap_method="sequential").
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from opc.errors import UnsupportedError
from opc.interop.models import gradient_of
from opc.lowering.build import CompiledFunction
from opc.lowering.dynamic_call import result_shapes, results_of

_OPS: dict[tuple[int, str], Callable] = {}

__all__ = ["op"]


def op(fn: CompiledFunction) -> Callable:
    """The compiled function `fn` (an attribute of a module from opc.compile) as a JAX function,
    usable under jax.jit, jax.grad (with a NAME_grad), jax.vmap."""
    if not isinstance(fn, CompiledFunction):
        raise TypeError(f"opc.jax.op takes a function of a compiled opc module (m.f), got {type(fn).__name__}")
    key = (id(fn.module), fn.sig.name)
    if key not in _OPS and fn.sig.found:
        _OPS[key] = make_eager_op(fn)
    if key not in _OPS:
        # jit: called eagerly, a custom_vjp over a callback is traced anew on every call (about 3x
        # the cost of the jitted call); under an outer jit or grad this inner jit is inlined.
        _OPS[key] = jax.jit(make_op(fn))
    return _OPS[key]


def make_op(fn: CompiledFunction) -> Callable:
    sig = fn.sig
    single = len(sig.outputs) == 1

    def host(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        outs = fn(*arrays)
        return tuple(np.asarray(o) for o in (outs if isinstance(outs, tuple) else (outs,)))

    def call(*args):  # noqa: ANN202
        check_x64(fn)
        shapes = result_shapes(sig, [jnp.shape(a) for a in args])  # run-time (`?`) sizes: this trace's
        results = [jax.ShapeDtypeStruct(shape, jnp.dtype(dt)) for shape, (_, dt) in zip(shapes, sig.outputs)]
        outs = jax.pure_callback(host, results, *args, vmap_method="sequential")
        return outs[0] if single else tuple(outs)

    call.__name__ = call.__qualname__ = sig.name
    differentiable = jax.custom_vjp(call)
    gradient = gradient_of(fn)
    if gradient.fn is None:  # JAX's own message would be "pure callbacks do not support JVP"

        def no_backward(args, douts):  # noqa: ANN001, ANN202
            raise ValueError(f"{sig.name}() has no gradient: {gradient.missing}")

        differentiable.defvjp(lambda *args: (call(*args), None), no_backward)
        return differentiable
    grad_op = op(gradient.fn)
    wrt = gradient.wrt

    def forward(*args):  # noqa: ANN202
        # differentiable, not call: under an outer jax.grad (grad of grad) this forward is itself
        # differentiated, and must reach the custom_vjp again rather than the bare callback.
        return differentiable(*args), args

    def backward(args, douts):  # noqa: ANN001, ANN202
        douts = douts if isinstance(douts, tuple) else (douts,)
        # Integer results come back with float0 cotangents: opc takes zeros of their dtype.
        shapes = result_shapes(sig, [jnp.shape(a) for a in args])
        douts = [jnp.zeros(shape, jnp.dtype(dt)) if d.dtype == jax.dtypes.float0 else d
                 for d, shape, (_, dt) in zip(douts, shapes, sig.outputs)]
        grads = grad_op(*args, *douts)
        grads = grads if isinstance(grads, tuple) else (grads,)
        out = [zero_cotangent(a) for a in args]
        for i, g in zip(wrt, grads):
            out[i] = g
        return tuple(out)

    differentiable.defvjp(forward, backward)
    return differentiable


def make_eager_op(fn: CompiledFunction) -> Callable:
    """A function whose results' sizes depend on the data (sig.found: a nonzero's count): JAX has no
    such shapes, so it runs on concrete arrays only (its gradient through jax.grad where the primal
    values stay concrete), and a tracer that needs the result shapes before the call (jax.jit,
    jax.vmap) gets one line saying why."""
    sig = fn.sig
    single = len(results_of(sig)) == 1

    def concrete(args: tuple) -> list[np.ndarray]:
        if any(isinstance(a, jax.core.Tracer) for a in args):
            names = ", ".join(n for n, _ in sig.found)
            raise UnsupportedError(f"{sig.name}(): its results' sizes depend on the data ({names}), known only "
                                   "after the call: jax.jit and jax.vmap need result shapes before it (JAX has no "
                                   "data-dependent shapes); call it on concrete arrays, outside jax.jit")
        return [np.asarray(a) for a in args]

    def call(*args):  # noqa: ANN202
        outs = fn(*concrete(args))
        return jnp.asarray(outs) if single else tuple(jnp.asarray(o) for o in outs)

    call.__name__ = call.__qualname__ = sig.name
    gradient = gradient_of(fn)
    grad_fn = gradient.fn
    if grad_fn is None:
        return call
    differentiable = jax.custom_vjp(call)
    wrt = gradient.wrt

    def backward(args, douts):  # noqa: ANN001, ANN202
        douts = douts if isinstance(douts, tuple) else (douts,)
        if any(d.dtype == jax.dtypes.float0 for d in douts):  # an integer result's: zeros at its run-time shape
            outs = call(*args)
            outs = outs if isinstance(outs, tuple) else (outs,)
            douts = tuple(jnp.zeros(o.shape, o.dtype) if d.dtype == jax.dtypes.float0 else d
                          for d, o in zip(douts, outs))
        grads = grad_fn(*concrete(args), *concrete(tuple(douts)))
        grads = grads if isinstance(grads, tuple) else (grads,)
        out = [zero_cotangent(a) for a in args]
        for i, g in zip(wrt, grads):
            out[i] = jnp.asarray(g)
        return tuple(out)

    differentiable.defvjp(lambda *args: (call(*args), args), backward)
    return differentiable


def zero_cotangent(a):  # noqa: ANN001, ANN201
    """The cotangent of an argument opc gives no gradient for: float0 for integers, as JAX wants."""
    if jnp.issubdtype(a.dtype, jnp.inexact):
        return jnp.zeros(a.shape, a.dtype)
    return np.zeros(a.shape, jax.dtypes.float0)


def check_x64(fn: CompiledFunction) -> None:
    """JAX makes 64-bit arrays 32-bit unless jax_enable_x64 is on; say so rather than fail in the callback."""
    if not jax.config.jax_enable_x64 and any(dt.endswith("64") for _, _, dt in fn.sig.inputs):
        raise ValueError(f"{fn.sig.name}(): its arguments include 64-bit arrays, which JAX turns into 32-bit "
                         "ones unless jax.config.update('jax_enable_x64', True) is set")
