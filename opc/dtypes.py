"""Every spelling of an element type, in one place: MLIR (`f32`, `ui8`: SPEC's names, the
device .toml's and the kernel ABI's), NumPy (`float32`, `uint8`, `bool`) and the dtype object.

    mlir_name(f32) == "f32"      numpy_name(f32) == "float32"      numpy_dtype("bfloat16")

xDSL is imported on first use of an xDSL spelling, not with this module: the binding of a
compiled module needs only `numpy_dtype`, and loading one from the cache must not pay for
importing the compiler (opc/compile_cache.py).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from xdsl.ir import Attribute

FLOAT_NAMES = {"Float16Type": "float16", "BFloat16Type": "bfloat16", "Float32Type": "float32",
               "Float64Type": "float64", "Float8E4M3FNType": "float8_e4m3fn",
               "Float8E4M3FNUZType": "float8_e4m3fnuz", "Float8E5M2Type": "float8_e5m2",
               "Float8E5M2FNUZType": "float8_e5m2fnuz", "Float8E8M0FNUType": "float8_e8m0fnu",
               "Float6E2M3FNType": "float6_e2m3fn", "Float6E3M2FNType": "float6_e3m2fn",
               "Float4E2M1FNType": "float4_e2m1fn"}
# The NumPy names that are ml_dtypes types (one byte an element; int4/int2 in the low bits).
ML_DTYPES_NAMES = frozenset({"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                             "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "int4", "uint4",
                             "int2", "uint2"})


@functools.cache
def mlir_dtypes() -> dict[str, Attribute]:
    """Element types a device kernel takes, by their MLIR names, in the order of opc_dtype
    (runtime/opc_kernel.h)."""
    from xdsl.dialects import builtin as b
    from xdsl.dialects.builtin import IntegerType, Signedness, bf16, f16, f32, f64

    u = Signedness.UNSIGNED
    return {
        "i1": IntegerType(1), "i8": IntegerType(8), "ui8": IntegerType(8, u),
        "i16": IntegerType(16), "i32": IntegerType(32), "i64": IntegerType(64),
        "f16": f16, "bf16": bf16, "f32": f32, "f64": f64,
        "f8E4M3FN": b.Float8E4M3FNType(), "f8E4M3FNUZ": b.Float8E4M3FNUZType(), "f8E5M2": b.Float8E5M2Type(),
        "f8E5M2FNUZ": b.Float8E5M2FNUZType(), "f8E8M0FNU": b.Float8E8M0FNUType(), "f4E2M1FN": b.Float4E2M1FNType(),
        "i4": IntegerType(4), "ui4": IntegerType(4, u), "i2": IntegerType(2), "ui2": IntegerType(2, u),
        "f6E2M3FN": b.Float6E2M3FNType(), "f6E3M2FN": b.Float6E3M2FNType(),
    }  # fmt: skip


def __getattr__(name: str) -> Any:
    if name == "MLIR_DTYPES":  # the table, built on first use (it needs xDSL)
        return mlir_dtypes()
    raise AttributeError(f"module 'opc.dtypes' has no attribute {name!r}")


def mlir_name(t: Attribute) -> str:
    """`f32`, `ui8`, `i1`: the name SPEC, device files and the kernel ABI use."""
    for name, attr in mlir_dtypes().items():
        if attr == t:
            return name
    raise ValueError(f"not an element type opc admits: {t}")


def numpy_name(t: Attribute) -> str:
    """`float32`, `uint8`, `bool`, `bfloat16`: the NumPy (and ml_dtypes) name of an element type."""
    from xdsl.dialects.builtin import IntegerType, Signedness

    if isinstance(t, IntegerType) and t.width.data == 1:
        return "bool"
    if isinstance(t, IntegerType):
        return f"{'u' if t.signedness.data == Signedness.UNSIGNED else ''}int{t.width.data}"
    return FLOAT_NAMES[type(t).__name__]


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a NumPy name (bfloat16, float8/float4 and int4/int2 from ml_dtypes)."""
    if name in ML_DTYPES_NAMES:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)
