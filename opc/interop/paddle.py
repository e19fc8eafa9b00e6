"""opc functions as Paddle operators (`opc.paddle`), for Paddle's dynamic graph (dygraph).

    m = opc.compile(src, grad=True)
    mlp = opc.paddle.op(m.mlp)         # a paddle.autograd.PyLayer: Paddle's autograd runs m.mlp_grad
    y = mlp(x, w, b)                   # paddle Tensors in and out, read and returned in place (DLPack)
    net = opc.paddle.Module(opc.import_onnx("model.onnx"))   # weights as Paddle parameters

`paddle.autograd.PyLayer` is Paddle's way in for a kernel of its own in dygraph, as
torch.autograd.Function is PyTorch's: its forward runs the compiled function, its backward opc's
gradient function `NAME_grad(inputs..., douts...)`, which recomputes the forward inside (opc's
gradient functions take the inputs, not saved intermediates). First order only: Paddle 3.0 hands a
PyLayer's backward its saved inputs cut from the graph, so a gradient of the gradient cannot reach
them; the gradients are constants to Paddle, and a second order is `NAME_grad_grad` (grad=2),
called directly. `paddle.grad(outputs, inputs)` must name every input that requires grad: Paddle 3.0
refuses a PyLayer's gradient for an input left out there (its backward cannot tell which those are). Integer results are
marked non-differentiable. Tensors cross by DLPack: a CPU tensor is read in place, the results are
opc's own buffers seen as Paddle tensors; bfloat16, which NumPy cannot export, is copied.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import paddle
from paddle.autograd import PyLayer

from opc.interop.arrays import is_bfloat16
from opc.interop.models import gradient_of, library_key, model_arguments
from opc.lowering.abi import c_symbol
from opc.lowering.build import CompiledFunction
from opc.lowering.dynamic_call import results_of

__all__ = ["Module", "op"]

_OPS: dict[tuple[str, str], Callable] = {}  # (library, function) -> its PyLayer's apply, made once per process


def op(fn: CompiledFunction) -> Callable:
    """The compiled function `fn` (an attribute of a module from opc.compile) as a Paddle PyLayer:
    call it on paddle Tensors; Paddle's autograd calls NAME_grad for its backward."""
    if not isinstance(fn, CompiledFunction):
        raise TypeError(f"opc.paddle.op takes a function of a compiled opc module (m.f), got {type(fn).__name__}")
    key = (library_key(fn), fn.sig.name)
    if key not in _OPS:
        _OPS[key] = layer(fn)
    return _OPS[key]


def to_numpy(t: paddle.Tensor) -> np.ndarray:
    """A CPU tensor's memory as an array (DLPack; bfloat16 as a copy through its bits)."""
    if t.dtype == paddle.bfloat16:
        import ml_dtypes

        return t.astype(paddle.float32).numpy().astype(ml_dtypes.bfloat16)
    return np.from_dlpack(t.detach())


def to_paddle(a) -> paddle.Tensor:  # noqa: ANN001  (a result: an ndarray, or the module's arrays= kind)
    a = np.asarray(a)
    if is_bfloat16(a):
        return paddle.to_tensor(a.astype(np.float32)).astype(paddle.bfloat16)  # exact: bf16 -> f32 -> bf16
    return paddle.from_dlpack(a)


def layer(fn: CompiledFunction) -> Callable:
    """fn as a PyLayer's apply: forward on the inputs' memory, backward through NAME_grad."""
    single = len(results_of(fn.sig)) == 1
    backward_fn = make_backward(fn)

    class Layer(PyLayer):
        @staticmethod
        def forward(ctx, *args: paddle.Tensor):  # noqa: ANN001, ANN205
            if len(args) != len(fn.sig.inputs):
                names = ", ".join(n for n, _, _ in fn.sig.inputs)
                raise TypeError(f"{fn.sig.name}() takes {len(fn.sig.inputs)} arguments ({names}), got {len(args)}")
            ctx.save_for_backward(*args)
            ctx.needs = [not a.stop_gradient for a in args]  # Paddle wants None for the others
            ctx.set_materialize_grads(False)  # an unused result: None (Paddle 3.0 crashes on its zeros)
            outs = fn(*[to_numpy(a) for a in args])
            outs = [to_paddle(o) for o in ((outs,) if single else outs)]
            ctx.result_shapes = [o.shape for o in outs]
            ctx.mark_non_differentiable(*[o for o in outs if not o.is_floating_point()])
            return outs[0] if single else tuple(outs)

        backward = staticmethod(backward_fn)

    Layer.__name__ = Layer.__qualname__ = f"opc_{c_symbol(fn.sig.name)}"
    return Layer.apply


def make_backward(fn: CompiledFunction) -> Callable:
    """backward(ctx, *douts) -> one gradient per input (None where opc gives none), through op(NAME_grad);
    a module built without NAME_grad says how to get it."""
    gradient = gradient_of(fn)
    grad_fn = gradient.fn
    if grad_fn is None:

        def no_backward(ctx, *douts):  # noqa: ANN001, ANN202
            raise RuntimeError(f"opc {fn.sig.name} has no gradient: {gradient.missing}")

        return no_backward
    wrt = gradient.wrt
    n_in = len(fn.sig.inputs)
    dtypes = [dt for _, dt in results_of(fn.sig)]

    def backward(ctx, *douts):  # noqa: ANN001, ANN202
        inputs = ctx.saved_tensor()
        # every result gets a cotangent in opc's grad functions (zeros where Paddle sends none, or an
        # integer result's), at the shape the forward gave
        douts = [d if d is not None and str(d.dtype).removeprefix("paddle.") == dt
                 else paddle.zeros(shape, dtype=dt) for d, dt, shape in zip(douts, dtypes, ctx.result_shapes)]
        grads = grad_fn(*[to_numpy(t) for t in (*inputs, *douts)])
        grads = grads if isinstance(grads, tuple) else (grads,)
        out: list[paddle.Tensor | None] = [None] * n_in
        for i, g in zip(wrt, grads):
            out[i] = to_paddle(g) if ctx.needs[i] else None
        return tuple(out) if n_in > 1 else out[0]

    return backward


class Module(paddle.nn.Layer):
    """A model opc compiled, its weights held as Paddle parameters, so a Paddle optimizer trains it.

        net = opc.paddle.Module(opc.import_onnx("mlp.onnx"))   # (ModuleOp, params)
        loss = net(x, labels)                                   # the graph's inputs; the weights are net's

    `model` is (source, params) as opc.import_onnx returns them (source: a path, MLIR text or
    ModuleOp; params: argument name -> array), or a compiled module's function with `params=`.
    `function` picks the function when the source has several (default: the first)."""

    def __init__(self, model, params: dict[str, np.ndarray] | None = None, function: str | None = None,
                 **compile_options) -> None:
        super().__init__()
        given = model_arguments(model, params, function, compile_options)
        self.function = op(given.fn)
        self.arguments, self.inputs, params = given.arguments, given.inputs, given.params
        for n in self.arguments:
            if n in params:
                value = np.asarray(params[n])
                weight = self.create_parameter(list(value.shape), dtype=str(value.dtype),
                                               default_initializer=paddle.nn.initializer.Assign(value))
                self.add_parameter(n, weight)

    def forward(self, *inputs: paddle.Tensor):  # noqa: ANN201
        """The graph's inputs in order (the weights are the module's parameters); the function's results."""
        if len(inputs) != len(self.inputs):
            raise TypeError(f"forward() takes {len(self.inputs)} input(s) ({', '.join(self.inputs)}), "
                            f"got {len(inputs)}")
        given = dict(zip(self.inputs, inputs))
        return self.function(*[given[n] if n in given else getattr(self, n) for n in self.arguments])

