"""Every spelling of an element type, in one place: MLIR (`f32`, `ui8`: SPEC's names, the
device .toml's and the kernel ABI's), NumPy (`float32`, `uint8`, `bool`) and the dtype object.

    mlir_name(f32) == "f32"      numpy_name(f32) == "float32"      numpy_dtype("bfloat16")
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    Signedness,
    bf16,
    f16,
    f32,
    f64,
)
from xdsl.ir import Attribute

MLIR_DTYPES: dict[str, Attribute] = {
    "i1": IntegerType(1), "i8": IntegerType(8), "ui8": IntegerType(8, Signedness.UNSIGNED),
    "i16": IntegerType(16), "i32": IntegerType(32), "i64": IntegerType(64),
    "f16": f16, "bf16": bf16, "f32": f32, "f64": f64,
}  # fmt: skip
"""Element types a device kernel takes, by their MLIR names, in the order of opc_dtype (runtime/opc_kernel.h)."""

FLOAT_NAMES = {Float16Type: "float16", BFloat16Type: "bfloat16", Float32Type: "float32", Float64Type: "float64"}


def mlir_name(t: Attribute) -> str:
    """`f32`, `ui8`, `i1`: the name SPEC, device files and the kernel ABI use."""
    for name, attr in MLIR_DTYPES.items():
        if attr == t:
            return name
    raise ValueError(f"not an element type opc admits: {t}")


def numpy_name(t: Attribute) -> str:
    """`float32`, `uint8`, `bool`, `bfloat16`: the NumPy (and ml_dtypes) name of an element type."""
    if isinstance(t, IntegerType) and t.width.data == 1:
        return "bool"
    if isinstance(t, IntegerType):
        return f"{'u' if t.signedness.data == Signedness.UNSIGNED else ''}int{t.width.data}"
    return FLOAT_NAMES[type(t)]


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a NumPy name (bfloat16 from ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)
