"""opc functions as PyTorch operators (`opc.torch`).

    m = opc.compile(src, grad=True)
    mlp = opc.torch.op(m.mlp)       # torch.ops.opc.mlp_<key>: autograd, torch.compile, torch.func
    y = mlp(x, w, b)                # tensors in and out, read and returned in place (DLPack)
    f = opc.torch.function(m.mlp)   # the same as an autograd.Function, for torch.func.grad / vjp
    net = opc.torch.Module(opc.import_onnx("model.onnx"))   # weights as nn.Parameters

Each function becomes a `torch.library.custom_op` in namespace `opc`, PyTorch's own way in for a
foreign kernel: `register_fake` gives the result shapes from the signature (so `torch.compile`
and `torch.export` trace it without a graph break), `register_autograd` gives the backward from
opc's own gradient function `NAME_grad(inputs..., douts...)`, itself registered the same way
(with its own backward where `grad=2` built `NAME_grad_grad`), so the backward traces too. The
backward recomputes the forward inside NAME_grad: opc's gradient functions take the inputs, not
saved intermediates. Tensors cross by DLPack: a contiguous CPU tensor is read in place, the
results are opc's own buffers seen as tensors.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable, Sequence

import numpy as np
import torch

from opc.interop.arrays import result_converter
from opc.interop.models import gradient_of, library_key, model_arguments
from opc.lowering.abi import c_symbol
from opc.lowering.build import CompiledFunction
from opc.lowering.dynamic_call import result_shapes, results_of

NAMESPACE = "opc"
TORCH_DTYPES = {"bool": torch.bool, "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16,
                "uint16": torch.uint16, "int32": torch.int32, "uint32": torch.uint32, "int64": torch.int64,
                "uint64": torch.uint64, "float16": torch.float16, "bfloat16": torch.bfloat16,
                "float32": torch.float32, "float64": torch.float64}

_OPS: dict[tuple[str, str], Callable] = {}  # (library, function) -> its custom op, registered once per process
_TO_TORCH = result_converter("torch")

__all__ = ["Module", "function", "op"]


def op(fn: CompiledFunction) -> Callable:
    """The compiled function `fn` (an attribute of a module from opc.compile) as a torch custom op
    `opc::NAME_KEY` (KEY: the compiled library's content hash, so that two modules never clash)."""
    if not isinstance(fn, CompiledFunction):
        raise TypeError(f"opc.torch.op takes a function of a compiled opc module (m.f), got {type(fn).__name__}")
    if not results_of(fn.sig):  # torch registers no autograd for an op without results
        raise TypeError(f"opc.torch.op: {fn.sig.name}() returns nothing; a torch op needs a result")
    key = (library_key(fn), fn.sig.name)
    if key not in _OPS:
        _OPS[key] = register(fn, f"{NAMESPACE}::{c_symbol(fn.sig.name)}_{key[0]}")
    return _OPS[key]


def arg_names(fn: CompiledFunction) -> list[str]:
    """The arguments' MLIR names where the schema can spell them, else argN."""
    names = []
    for i, (name, _, _) in enumerate(fn.sig.inputs):
        ok = name.isidentifier() and not keyword.iskeyword(name) and name not in names and name != "self"
        names.append(name if ok else f"arg{i}")
    return names


def schema(fn: CompiledFunction) -> str:
    results = ["Tensor"] * len(results_of(fn.sig))
    out = results[0] if len(results) == 1 else f"({', '.join(results)})"
    return f"({', '.join(f'Tensor {n}' for n in arg_names(fn))}) -> {out}"


def as_tensor(value) -> torch.Tensor:  # noqa: ANN001
    """A result as a tensor over the same memory (the module may return NumPy, torch or JAX arrays)."""
    if type(value) is np.ndarray:
        return _TO_TORCH(value)
    if isinstance(value, torch.Tensor):
        return value
    return torch.from_dlpack(value)


def register(fn: CompiledFunction, qualname: str) -> Callable:
    sig = fn.sig
    single = len(results_of(sig)) == 1
    out_dtypes = [TORCH_DTYPES[dt] for _, dt in results_of(sig)]

    def impl(*args: torch.Tensor):
        # detach: inside the autograd wrapper the inputs still carry requires_grad; contiguous: a
        # torch op takes any layout, so a strided input is copied here, as torch's own ops would.
        outs = fn(*[a.detach().contiguous() for a in args])
        if single:
            return as_tensor(outs)
        return tuple(as_tensor(o) for o in outs)

    custom = torch.library.custom_op(qualname, impl, mutates_args=(), device_types="cpu", schema=schema(fn))

    @custom.register_fake
    def fake(*args: torch.Tensor):
        check_meta(fn, args)
        # run-time (`?`) sizes: from the inputs' SymInts; a size the call finds in the data: a new one
        shapes = result_shapes(sig, [a.shape for a in args], data_sizes(sig))
        outs = [args[0].new_empty(shape, dtype=dt) if args else torch.empty(shape, dtype=dt)
                for shape, dt in zip(shapes, out_dtypes)]
        return outs[0] if single else tuple(outs)

    backward = make_backward(fn)
    custom.register_autograd(backward, setup_context=save_inputs)
    return custom


def data_sizes(sig) -> dict | None:  # noqa: ANN001  (a FunctionSignature)
    """An unbacked SymInt per size the call computes from the data (sig.found: a nonzero's count), as
    torch's own nonzero has at trace time; None where there is none. Where the tracer has no such
    sizes (torch.compile without capture_dynamic_output_shape_ops, a FakeTensorMode without a
    ShapeEnv), torch's DynamicOutputShapeException goes on, with a note saying why: torch.compile
    breaks the graph there and runs the call eagerly, as for torch.nonzero."""
    if not sig.found:
        return None
    ctx = torch.library.get_ctx()
    try:
        return {name: ctx.new_dynamic_size() for name, _ in sig.found}
    except torch._subclasses.fake_tensor.DynamicOutputShapeException as err:
        names = ", ".join(n for n, _ in sig.found)
        err.add_note(f"{sig.name}(): its results' sizes depend on the data ({names}), known only after the call: "
                     "this tracer needs them before it (call it eagerly, or set "
                     "torch._dynamo.config.capture_dynamic_output_shape_ops = True under torch.compile)")
        raise


def check_meta(fn: CompiledFunction, args: Sequence[torch.Tensor]) -> None:
    """Shapes and dtypes at trace time (torch.compile, export): the same ValueError a call would raise."""
    for (name, shape, dt), a in zip(fn.sig.inputs, args):
        if a.dtype != TORCH_DTYPES[dt]:
            raise ValueError(f"{fn.sig.name}(): argument '{name}' must have dtype {TORCH_DTYPES[dt]}, got {a.dtype}")
        if len(a.shape) != len(shape) or any(isinstance(w, int) and w != got for w, got in zip(shape, a.shape)):
            raise ValueError(f"{fn.sig.name}(): argument '{name}' must have shape {tuple(shape)}, "
                             f"got {tuple(a.shape)}")  # a `?` dim (a size symbol) is checked by the call


def save_inputs(ctx, inputs: tuple, output) -> None:  # noqa: ANN001
    ctx.save_for_backward(*inputs)
    ctx.result_shapes = [o.shape for o in (output if isinstance(output, tuple) else (output,))]


def make_backward(fn: CompiledFunction, wrap: Callable[[CompiledFunction], Callable] = op) -> Callable:
    """backward(ctx, *douts) -> one gradient per input (None where opc gives none), through
    `wrap(NAME_grad)` (its custom op, or its autograd.Function); a module built without NAME_grad
    says how to get it."""
    gradient = gradient_of(fn)
    if gradient.fn is None:

        def no_backward(ctx, *douts):  # noqa: ANN001, ANN202
            raise RuntimeError(f"opc::{fn.sig.name} has no gradient: {gradient.missing}")

        return no_backward
    call_grad = wrap(gradient.fn)
    wrt = gradient.wrt
    n_in = len(fn.sig.inputs)
    dtypes = [TORCH_DTYPES[dt] for _, dt in results_of(fn.sig)]

    def backward(ctx, *douts):  # noqa: ANN001, ANN202
        inputs = ctx.saved_tensors
        # Every result gets a cotangent in opc's grad functions, integer ones included (zeros here:
        # torch sends none through an integer result, and None for a result that was not used), at
        # the shape the forward gave (a `?` or data-dependent size included).
        douts = [d if d is not None and d.dtype == dt else inputs[0].new_zeros(shape, dtype=dt)
                 for d, dt, shape in zip(douts, dtypes, ctx.result_shapes)]
        grads = call_grad(*inputs, *douts)
        grads = grads if isinstance(grads, tuple) else (grads,)
        out: list[torch.Tensor | None] = [None] * n_in
        for i, g in zip(wrt, grads):
            out[i] = g
        return tuple(out)

    return backward


_FUNCTIONS: dict[tuple[str, str], Callable] = {}


def function(fn: CompiledFunction) -> Callable:
    """The compiled function as a `torch.autograd.Function` (forward, setup_context, backward) around
    its custom op: the form torch.func's transforms (grad, vjp, jacrev) accept, which the autograd of
    a custom op is not in torch 2.13 (its generated Function has no setup_context). The backward
    calls function(NAME_grad), so grad of grad works where grad=2 built NAME_grad_grad."""
    if not isinstance(fn, CompiledFunction):
        raise TypeError(f"opc.torch.function takes a function of a compiled opc module (m.f), "
                        f"got {type(fn).__name__}")
    key = (library_key(fn), fn.sig.name)
    if key not in _FUNCTIONS:
        forward_op = op(fn)
        backward_fn = make_backward(fn, function)

        class Function(torch.autograd.Function):
            @staticmethod
            def forward(*args: torch.Tensor):
                return forward_op(*args)

            @staticmethod
            def setup_context(ctx, inputs, output) -> None:  # noqa: ANN001
                outputs = output if isinstance(output, tuple) else (output,)
                ctx.mark_non_differentiable(*[o for o in outputs if not o.is_floating_point()])
                save_inputs(ctx, inputs, output)

            backward = staticmethod(backward_fn)

        Function.__name__ = Function.__qualname__ = f"opc_{c_symbol(fn.sig.name)}"
        _FUNCTIONS[key] = Function.apply
    return _FUNCTIONS[key]


class Module(torch.nn.Module):
    """A model opc compiled, its weights held as `nn.Parameter`s, so a torch optimizer trains it.

        net = opc.torch.Module(opc.import_onnx("mlp.onnx"))   # (ModuleOp, params)
        loss, logits = net(x, labels)                          # the graph's inputs; the weights are net's

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
                if hasattr(self, n):
                    raise ValueError(f"params: weight '{n}' clashes with an attribute of torch.nn.Module")
                self.register_parameter(n, torch.nn.Parameter(torch.from_numpy(np.array(params[n]))))

    def forward(self, *inputs: torch.Tensor):
        """The graph's inputs in order (the weights are the module's parameters); the function's results."""
        if len(inputs) != len(self.inputs):
            raise TypeError(f"forward() takes {len(self.inputs)} input(s) ({', '.join(self.inputs)}), "
                             f"got {len(inputs)}")
        given = dict(zip(self.inputs, inputs))
        return self.function(*[given[n] if n in given else getattr(self, n) for n in self.arguments])


