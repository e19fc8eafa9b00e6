"""Shared helpers for numeric tests: MLIR text builders, input generators,
per-dtype tolerances, and comparison with a NumPy reference.

Each test file builds ONE module holding many functions (a C build costs
about half a second), then parametrizes over the functions in it.
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np

import opc

BF16 = np.dtype(ml_dtypes.bfloat16)

MLIR_TYPES = {
    "bool": "i1", "int8": "i8", "uint8": "ui8", "int16": "i16", "int32": "i32", "int64": "i64",
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
}  # fmt: skip
FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["int8", "uint8", "int16", "int32", "int64"]
NUMERIC = INTS + FLOATS
ALL_DTYPES = ["bool", *NUMERIC]

# (rtol, atol) for one rounding step in each dtype
TOLERANCE = {
    "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2), "float32": (2e-6, 1e-6), "float64": (1e-13, 1e-13),
}  # fmt: skip


def np_dtype(name: str) -> np.dtype:
    return BF16 if name == "bfloat16" else np.dtype(name)


def ttype(shape: Sequence[int], dtype: str) -> str:
    dims = "x".join(str(d) for d in shape)
    return f"tensor<{dims + 'x' if dims else ''}{MLIR_TYPES[dtype]}>"


def func(name: str, args: Sequence[tuple[Sequence[int], str]], body: str, results: Sequence[tuple[Sequence[int], str]],
         returns: Sequence[str] = ("%r",)) -> str:
    """A func.func with args %a0, %a1, ... and the given body lines."""
    params = ", ".join(f"%a{i}: {ttype(s, d)}" for i, (s, d) in enumerate(args))
    outs = ", ".join(ttype(s, d) for s, d in results)
    ret = f"func.return {', '.join(returns)} : {outs}"
    return f"func.func @{name}({params}) -> ({outs}) {{\n  {body}\n  {ret}\n}}\n"


def random_array(shape: Sequence[int], dtype: str, rng: np.random.Generator, low: float = -3.0,
                 high: float = 3.0) -> np.ndarray:
    dt = np_dtype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype in INTS:
        info = np.iinfo(dt)
        lo, hi = max(info.min, -100), min(info.max, 100)
        return rng.integers(lo, hi + 1, size=shape).astype(dt)
    return rng.uniform(low, high, size=shape).astype(np.float64).astype(dt)


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str, scale: float = 1.0) -> None:
    """Exact for ints and bools; per-dtype tolerance (times `scale`) for floats."""
    assert got.dtype == np_dtype(dtype), f"dtype {got.dtype}, expected {dtype}"
    assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
    if dtype not in FLOATS:
        np.testing.assert_array_equal(got, want.astype(np_dtype(dtype)))
        return
    rtol, atol = TOLERANCE[dtype]
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want).astype(np.float64),
                               rtol=rtol * scale, atol=atol * scale, equal_nan=True)


def compile_funcs(funcs: Sequence[str], **kwargs) -> opc.api.CompiledModule:  # type: ignore[name-defined]
    return opc.compile("\n".join(funcs), **kwargs)


def compute(x: np.ndarray) -> np.ndarray:
    """The NumPy type a reference computes in: f32 for halves (SPEC.md), else itself."""
    if x.dtype in (np.float16, BF16):
        return x.astype(np.float32)
    return x


def gelu_tanh(z):
    """gelu's tanh form (SPEC.md), in float64."""
    return 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))


def gelu_tanh_grad(z):
    """d gelu_tanh / dz."""
    c = np.sqrt(2 / np.pi)
    t = np.tanh(c * (z + 0.044715 * z**3))
    return 0.5 * (1 + t) + 0.5 * z * (1 - t**2) * c * (1 + 3 * 0.044715 * z**2)


def spec_cast(x: np.ndarray, dst: str) -> np.ndarray:
    """SPEC.md's cast in NumPy: float->int truncates, saturates, NaN -> 0; to bool: nonzero;
    int->int wraps (astype); float->float rounds to nearest even (astype)."""
    d = np_dtype(dst)
    src_float = x.dtype.kind == "f" or x.dtype == BF16
    with np.errstate(over="ignore", invalid="ignore"):
        if dst == "bool":
            return x.astype(np.float64) != 0 if src_float else x != 0
        if src_float and dst in INTS:
            t = np.trunc(x.astype(np.float64))
            info = np.iinfo(d)
            out = np.zeros(x.shape, d)
            ok = ~np.isnan(t) & (t > float(info.min) - 1) & (t < float(info.max) + 1)
            out[ok] = t[ok].astype(np.int64).astype(d)
            out[~np.isnan(t) & (t >= float(info.max) + 1)] = info.max
            out[~np.isnan(t) & (t <= float(info.min) - 1)] = info.min
            return out
        if not src_float and dst in FLOATS:
            return x.astype(np.float64).astype(d)
        return x.astype(d)
