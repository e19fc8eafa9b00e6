"""What the frameworks' wrappers (opc.torch, opc.jax, opc.paddle) share: the key that tells two
compiled libraries apart, a function's gradient function and the arguments it is for (or why there
is none), and a model's function and weights resolved from
what a user passes to a `Module` (a source and its params, or a compiled function). No framework
is imported here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opc.lowering.build import CompiledFunction


def library_key(fn: CompiledFunction) -> str:
    path = fn.module.path if fn.module is not None else None
    if path is None:
        return f"id{id(fn):x}"
    return path.name.split(".")[0].removeprefix("_opc_")[:16]


def float_arguments(fn: CompiledFunction) -> list[int]:
    """A module written by `opc compile -o` records no wrt: its grads are for every float argument."""
    return [i for i, (_, _, dt) in enumerate(fn.sig.inputs) if dt.startswith(("float", "bfloat"))]


@dataclass
class Gradient:
    """A compiled function's gradient function NAME_grad and the arguments its results are for; where
    the module has none, `missing` says why (what a framework's backward raises)."""

    fn: CompiledFunction | None
    wrt: list[int]
    missing: str = ""


def gradient_of(fn: CompiledFunction) -> Gradient:
    module, name = fn.module, fn.sig.name
    grad_fn = module._functions.get(f"{name}_grad") if module is not None else None
    wrt = (module.wrt.get(name) if module is not None else None) or float_arguments(fn)
    if grad_fn is not None:
        return Gradient(grad_fn, wrt)
    why = module.no_grad.get(f"{name}_grad") if module is not None else None
    return Gradient(None, wrt, f"opc built no {name}_grad: {why}" if why else
                    f"compile the module with grad=True (opc.compile(src, grad=True)) for {name}_grad")


def compiled_function(source, function: str | None, options: dict) -> CompiledFunction:  # noqa: ANN001
    """Compile `source` with grad=True; its function named `function`, or its first one."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import ModuleOp

    from opc.api import compile
    from opc.frontend import load_module

    module = source if isinstance(source, ModuleOp) else load_module(source).module
    funcs = [f.sym_name.data for f in module.ops if isinstance(f, func.FuncOp)]
    if function is None:
        if not funcs:
            raise ValueError("model: the source has no function")
        function = funcs[0]
    elif function not in funcs:
        raise ValueError(f"function: the source has no function {function!r} (functions: {', '.join(funcs)})")
    compiled = compile(module, **{"grad": True, **options})
    return compiled[function]


@dataclass
class ModelArguments:
    """A `Module`'s function and how its arguments split: the graph's inputs, and the weights
    (params, held by the Module as the framework's parameters)."""

    fn: CompiledFunction
    params: dict[str, np.ndarray]
    arguments: list[str]  # every argument, in order
    inputs: list[str]  # those the caller passes (not in params)


def model_arguments(model, params: dict[str, np.ndarray] | None, function: str | None,  # noqa: ANN001
                    compile_options: dict) -> ModelArguments:
    """`model` is (source, params) as opc.import_onnx returns them, a source (a path, MLIR text or a
    ModuleOp, compiled with grad=True) or a compiled module's function; params name arguments."""
    if isinstance(model, tuple):
        model, params = model
    fn = model if isinstance(model, CompiledFunction) else compiled_function(model, function, compile_options)
    params = dict(params or {})
    names = [n for n, _, _ in fn.sig.inputs]
    unknown = [k for k in params if k not in names]
    if unknown:
        raise ValueError(f"params: {', '.join(map(repr, unknown))} name no argument of {fn.sig.name}() "
                         f"(arguments: {', '.join(names)})")
    return ModelArguments(fn, params, names, [n for n in names if n not in params])
