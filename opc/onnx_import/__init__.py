"""ONNX import (SPEC.md, ONNX import): an ONNX model -> one opc function + its weights.

    module, params = opc.import_onnx("model.onnx")      # or an onnx.ModelProto
    m = opc.compile(module, grad=True)
    out = m.main_graph(x, *params.values())

`opc import model.onnx -o model.mlir` writes the function as MLIR text and the
weights as `model.npz` beside it. The graph is read by `graph.py` (loading,
checks, shape inference, constant folding); each ONNX op is turned into opc
ops by one small converter in a module of its topic (`elementwise.py`, `tensor.py`, `nn.py`, ...).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from opc.errors import InputError

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

__all__ = ["import_onnx", "write_import"]


def import_onnx(model: str | os.PathLike[str] | Any,
                shapes: Mapping[str, Sequence[int]] | None = None,
                constants: Collection[str] | Callable[[str, np.ndarray], bool] | None = None,
                ) -> tuple[ModuleOp, dict[str, np.ndarray]]:
    """A path or onnx.ModelProto -> (ModuleOp with one func.func, {argument name: weight array}).

    shapes: sizes for graph inputs whose dims are dynamic, by input name.
    constants: float initializers to compile in as constants instead of taking them as arguments:
    their names, or a predicate `f(name, array) -> bool` (a frozen embedding, a mask an exporter wrote).
    """
    from opc.onnx_import.graph import import_model

    register_converters()

    return import_model(model, shapes, constants)


def write_import(path: str, output: str | None, shapes: Mapping[str, Sequence[int]] | None = None,
                 constants: Sequence[str] | None = None) -> list[str]:
    """`opc import`: MLIR text to `output` (stdout when None or '-'), weights to its .npz twin."""
    import sys

    module, params = import_onnx(path, shapes, constants or None)
    text = str(module) + "\n"
    if output in (None, "-"):
        sys.stdout.write(text)
        return []
    npz = os.path.splitext(output)[0] + ".npz"
    with open(output, "w", encoding="utf-8") as f:
        f.write(text)
    np.savez(npz, **params)
    return [output, npz]


def parse_shapes(specs: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """`--shape x=8x16` (repeatable) -> {'x': (8, 16)}; `x=` is a scalar."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, eq, dims = spec.partition("=")
        try:
            if not eq or not name:
                raise ValueError
            out[name] = tuple(int(d) for d in dims.split("x")) if dims else ()
        except ValueError:
            raise InputError(f"bad --shape '{spec}': expected NAME=D0xD1x... (e.g. x=8x16)") from None
    return out


def import_graph(model: Any, shapes: Mapping[str, Any] | None,
                 input_values: Mapping[str, Any] | None = None, where: str | None = None,
                 layouts: list[Any] | None = None, dynamic: bool = False,
                 weight_sources: list[str] | None = None, checked: bool = False):  # noqa: ANN201
    """graph.import_graph with the converters registered: (ModuleOp, params, the inputs bound by value);
    `layouts` receives the outputs' layouts (sequences and optionals: lists.regroup); `dynamic` keeps
    the inputs' open dims `?`; `weight_sources` receives the initializer each param is; a model `checked`
    by onnx.checker before is not checked again."""
    from opc.onnx_import.graph import import_graph as import_with_converters

    register_converters()
    return import_with_converters(model, shapes, input_values, where, layouts=layouts, dynamic=dynamic,
                                  weight_sources=weight_sources, checked=checked)


def register_converters() -> None:
    """Fill graph.CONVERTERS: each converter module registers its converters when imported (graph.py,
    which they import, does not import them back)."""
    from opc.onnx_import import (  # noqa: F401
        attention,
        classifiers,
        control_flow,
        detection,
        elementwise,
        linalg,
        ml,
        nn,
        quantization,
        reduction,
        rnn,
        sampling,
        sequence,
        signal,
        tensor,
        text,
        training,
        trees,
    )
