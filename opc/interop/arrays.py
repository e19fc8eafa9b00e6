"""The kind of array a compiled function returns: NumPy (its own results), or the same memory
seen as a torch tensor or a JAX array through DLPack, so that `opc.compile(src, arrays="torch")`
hands back the caller's kind without copying."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

ARRAY_KINDS = ("numpy", "torch", "jax")


def result_converter(kind: object) -> Callable[[np.ndarray], object] | None:
    """ndarray -> the caller's array, or None for "numpy" (nothing to do)."""
    if kind not in ARRAY_KINDS:
        raise ValueError(f"arrays must be one of {', '.join(map(repr, ARRAY_KINDS))}, got {kind!r}")
    if kind == "numpy":
        return None
    return {"torch": torch_converter, "jax": jax_converter}[kind]()


def require(package: str):  # noqa: ANN201
    """The module, or an ImportError that says how to install it."""
    import importlib

    try:
        return importlib.import_module(package)
    except ImportError:
        raise ImportError(f"{package} is not installed; install opc's '{package}' extra: "
                          f"python3 -m pip install \".[{package}]\"") from None


def is_bfloat16(a: np.ndarray) -> bool:
    return a.dtype.kind == "V" and a.dtype.name == "bfloat16"  # ml_dtypes', which NumPy's DLPack cannot export


def torch_converter() -> Callable[[np.ndarray], object]:
    torch = require("torch")

    def to_torch(a: np.ndarray):  # noqa: ANN202
        if is_bfloat16(a):
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a)  # shares a's memory, like from_dlpack, at half its cost per call

    return to_torch


def jax_converter() -> Callable[[np.ndarray], object]:
    jax = require("jax")

    def to_jax(a: np.ndarray):  # noqa: ANN202
        if is_bfloat16(a):  # NumPy cannot export bfloat16 by DLPack: the one kind JAX gets as a copy
            return jax.numpy.asarray(a)
        return jax.dlpack.from_dlpack(a)

    return to_jax
