"""`opc check`'s inputs and verdicts: the input recipes a grid names (uniform,
IEEE specials, large magnitudes, constant rows, integer extremes, ...), the
seed of a case (a stable hash of its identity, so a case draws the same inputs
whatever `--ops` selects), the error budget of an op, and the comparison that
finds the worst element.

The budget of a float case is relative to max(|reference|, floor), against a
reference computed in f64 (from the same, already rounded, inputs):

    tol = 0.5 eps(dtype)                      the final rounding to the dtype
        + cond * (ulps + n) * eps(compute)    the op's own error: a few ulps of
                                              its math functions, plus one per
                                              term of a reduction of length n

with eps the spacing at 1 (2^-10 for f16, 2^-7 bf16, 2^-23 f32, 2^-52 f64), the
compute type f32 for f16/bf16/f32 (a kernel accumulates in f32 at least) and
f64 for f64, and `cond` > 1 only where a recipe makes the inputs ill-
conditioned on purpose (near-constant rows). The floor is 1 for elementwise
ops in f32 and f64 (relative above 1, absolute below, so the cancellation of
gelu at -5 is no false alarm), 2^-7 in f16 and bf16, and max(1, rms of the
output) for ops that reduce. A kernel
that drops layer_norm's epsilon or softmax's max subtraction is off by orders
of magnitude (or by NaN), not by a hair; a float16 store that truncates
instead of rounding to nearest is off by up to one ulp where 0.5 is allowed.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from opc.dialects import opc as o
from opc.targets.device_kernels import op_classes

EPS = {"f16": 2.0**-10, "bf16": 2.0**-7, "f32": 2.0**-23, "f64": 2.0**-52,
       # float8/float4 (computed in f32): the spacing at 1 of their 3, 2, 0 and 1 mantissa bits
       "f8E4M3FN": 2.0**-3, "f8E4M3FNUZ": 2.0**-3, "f8E5M2": 2.0**-2, "f8E5M2FNUZ": 2.0**-2, "f8E8M0FNU": 1.0,
       "f6E2M3FN": 2.0**-3, "f6E3M2FN": 2.0**-2, "f4E2M1FN": 2.0**-1}  # fmt: skip
SUB_BYTE_INTS = ("int4", "uint4", "int2", "uint2")
"""ml_dtypes' integer types (NumPy kind 'V'): integers all the same, their range from ml_dtypes.iinfo."""


def is_integer(dt: np.dtype) -> bool:
    return dt == np.bool_ or dt.kind in "iu" or dt.name in SUB_BYTE_INTS


def is_float(dt: np.dtype) -> bool:
    """f16/f32/f64, and ml_dtypes' floats (bfloat16, float8, float4: NumPy kind 'V')."""
    return dt.kind == "f" or (dt.kind == "V" and dt.name not in SUB_BYTE_INTS)


def int_info(dt: np.dtype):  # noqa: ANN201 - np.iinfo or ml_dtypes.iinfo
    if dt.name in SUB_BYTE_INTS:
        import ml_dtypes

        return ml_dtypes.iinfo(dt)
    return np.iinfo(dt)
ELEMENTWISE_ULPS = 4
"""A few ulps of the compute type: libm's expf, tanhf, erff are within 1-2."""
OP_ULPS: dict[type, int] = {o.GeluOp: 16, o.GeluGradOp: 32, o.PowOp: 16, o.SigmoidOp: 8, o.ErfOp: 8, o.TanhOp: 8}
"""Ops that compose several math functions (gelu's tanh form, pow = exp(y log x))."""


def tolerance(op: str, dtype: str, n: int, cond: float = 1.0) -> float:
    """The error budget of a float case: see the module's docstring."""
    compute = EPS["f64" if dtype == "f64" else "f32"]
    cls = op_classes().get(op)
    ulps = OP_ULPS.get(cls, ELEMENTWISE_ULPS) if cls is not None else ELEMENTWISE_ULPS
    return 0.5 * EPS[dtype] + cond * (ulps + n) * compute


def case_seed(*identity: str) -> int:
    """A seed from the case's identity (op, attributes, dtype, shape): sha256, not Python's salted hash()."""
    return int.from_bytes(hashlib.sha256("|".join(identity).encode()).digest()[:8], "little")


def case_id(*identity: str) -> str:
    """The short name `--case` takes: 8 hex digits of the same hash."""
    return hashlib.sha256("|".join(identity).encode()).hexdigest()[:8]


# ---------------------------------------------------------------------------
# Input recipes
# ---------------------------------------------------------------------------

SPECIALS = (0.0, -0.0, math.inf, -math.inf, math.nan, 1.0e5, 3.0e38, 1.0e-6, 2.5, -2.5, 0.5 + 2.0**-12,
            1.0e-40, -1.0e-45, 65504.0, 65520.0, 3.3895e38)  # fmt: skip
"""IEEE specials: signed zero, infinities, NaN, denormals (f32's and f16's), max-finite of f16 and bf16 (and
just past f16's, which rounds to inf), a tie of f16's rounding."""
NO_OVERFLOW_SPECIALS = tuple(v for v in SPECIALS if not (math.isfinite(v) and abs(v) > 1e4))
"""For ops whose correct f32 kernels overflow in an intermediate where the f64 reference does not
(squares of layer_norm, products of a GEMM): only values whose square stays finite."""
CAST_VALUES = (127.5, 128.0, -128.5, -129.0, 255.5, 256.0, -1.0, -0.5, 0.5, 32767.5, 32768.0, -32769.0, 65535.5,
               65536.0, 2147483520.0, 2147483648.0, -2147483904.0, 4294967296.0, 9.3e18, -9.3e18, 1e30, -1e30)
"""Float values around the range of each integer type (casts saturate there)."""


@dataclass(frozen=True)
class Operand:
    """What a recipe knows of one operand: its numpy dtype and shape, its index, the case's scale."""

    dtype: np.dtype
    shape: tuple[int, ...]
    index: int
    scale: float
    labels: int  # > 0: an integer operand holds class labels in [0, labels)


def scatter(x: np.ndarray, values: Sequence[float], index: int) -> np.ndarray:
    """Every value at least once where the operand has room (rotated by the operand's index, so two
    operands of a binary op meet different partners); a two-element operand gets a rotating pair."""
    flat = x.reshape(-1)
    if flat.size >= 2:
        k = min(len(values), flat.size)
        start = (index * 3) % len(values)
        chosen = [values[(start + i) % len(values)] for i in range(k)]
        flat[np.linspace(0, flat.size - 1, k).astype(int)] = chosen
    return x


def uniform(rng: np.random.Generator, op: Operand) -> np.ndarray:
    return rng.uniform(-op.scale, op.scale, size=op.shape)


Fill = Callable[[np.random.Generator, Operand], np.ndarray]


def with_values(values: Sequence[float], first_only: bool = False) -> Fill:
    """Uniform inputs with the values scattered into every operand (`first_only`: into the first)."""
    return lambda rng, op: uniform(rng, op) if first_only and op.index else scatter(uniform(rng, op), values, op.index)


def shifted(offset: float) -> Callable[[np.random.Generator, Operand], np.ndarray]:
    """Large magnitudes: exp(x) overflows (offset > 0) or underflows (< 0) in every float type."""
    return lambda rng, op: offset + rng.uniform(-3.0, 3.0, size=op.shape)


def constant(rng: np.random.Generator, op: Operand) -> np.ndarray:
    """One value everywhere: 1.5 sums exactly in every float type, so the variance is exactly 0."""
    return np.full(op.shape, 1.5) if op.index == 0 else uniform(rng, op)


def near_constant(rng: np.random.Generator, op: Operand) -> np.ndarray:
    """1.5 plus noise of 1e-2: a variance of 2e-5, below epsilon; one-pass E[x^2] - E[x]^2 cancels."""
    return 1.5 + 0.015 * rng.uniform(-1.0, 1.0, size=op.shape) if op.index == 0 else uniform(rng, op)


def wide(rng: np.random.Generator, op: Operand) -> np.ndarray:
    """Magnitudes up to 1e4 (a variance of 3e7: f16's squares overflow unless computed in f32)."""
    return rng.uniform(-1.0e4, 1.0e4, size=op.shape) if op.index == 0 else uniform(rng, op)


FILLS: dict[str, Callable[[np.random.Generator, Operand], np.ndarray]] = {
    "uniform": uniform,
    "specials": with_values(SPECIALS),
    "specials-finite-squares": with_values(NO_OVERFLOW_SPECIALS),
    "specials-in-x": with_values(NO_OVERFLOW_SPECIALS, first_only=True),
    "cast-range": with_values(CAST_VALUES + SPECIALS),
    "large": shifted(800.0),
    "large-negative": shifted(-800.0),
    "wide": wide,
    "constant": constant,
    "near-constant": near_constant,
}  # fmt: skip
"""Input recipes by name; a grid's Shape names one (float operands; integer ones take `integers`)."""


def integers(rng: np.random.Generator, op: Operand, extremes: bool) -> np.ndarray:
    if op.labels:
        return rng.integers(0, op.labels, size=op.shape).astype(op.dtype)
    if op.dtype == np.bool_:
        return rng.integers(0, 2, size=op.shape).astype(bool)
    info = int_info(op.dtype)
    lo, hi = max(int(info.min), -100), min(int(info.max), 100)
    x = rng.integers(lo, hi + 1, size=op.shape).astype(op.dtype)
    if extremes:  # the type's extremes and the values next to them, where casts wrap or saturate
        top, bottom = int(info.max), int(info.min)
        edges = sorted({bottom, bottom + 1, top - 1, top, 0, -1 if bottom < 0 else 1, 1})
        scatter(x, edges, op.index)
    return x


def draw(fill: str, operands: Sequence[Operand], seed: int) -> list[np.ndarray]:
    """The inputs of a case: float operands by the recipe, rounded to their dtype; integer ones in range."""
    rng = np.random.default_rng(seed)
    out = []
    for op in operands:
        if is_integer(op.dtype):
            out.append(integers(rng, op, extremes=fill in ("specials", "cast-range")))
        else:
            with np.errstate(over="ignore"):
                out.append(np.asarray(FILLS[fill](rng, op)).astype(op.dtype))
    return out


# ---------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------


@dataclass
class Worst:
    """The worst element of a case: which output, where, the device's and the reference's values."""

    output: int
    index: tuple[int, ...]
    got: float
    want: float
    error: float


def as_f64(a: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # garbage a kernel left in an output may be anything
        return np.asarray(a).astype(np.float64)


def compare_exact(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> Worst | None:
    """Bit-for-bit (NaN equals NaN): the first differing element, its error inf or |got - want|."""
    for k, (g, w) in enumerate(zip(got, want)):
        g64, w64 = as_f64(g), as_f64(w)
        same = (g64 == w64) | (np.isnan(g64) & np.isnan(w64))
        if not same.all():
            i = tuple(int(v) for v in np.argwhere(~same)[0])
            with np.errstate(invalid="ignore"):
                err = abs(g64[i] - w64[i])
            return Worst(k, i, float(g64[i]), float(w64[i]), math.inf if not math.isfinite(err) else float(err))
    return None


ELEMENTWISE_FLOOR = {"float16": 2.0**-7, "bfloat16": 2.0**-7,
                     # float8/float4: their smallest normal, below which a rounding is absolute, not relative
                     "float8_e4m3fn": 2.0**-6, "float8_e4m3fnuz": 2.0**-7, "float8_e5m2": 2.0**-14,
                     "float8_e5m2fnuz": 2.0**-15, "float8_e8m0fnu": 2.0**-127, "float6_e2m3fn": 1.0,
                     "float6_e3m2fn": 2.0**-2, "float4_e2m1fn": 1.0}  # fmt: skip
"""Below 1, an f32 or f64 result of an elementwise op is compared absolutely (a correct gelu(-5) cancels
in f32); f16 and bf16 results are relative down to 2^-7, where their half-ulp rounding still dwarfs f32's
error, so that a store that truncates instead of rounding shows on most elements."""


def compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray], reduces: bool) -> Worst | None:
    """The worst element by |got - want| / max(|want|, floor) against an f64 reference (None: all equal).
    NaN must match NaN, and an infinity (of the reference rounded to the device's dtype) match exactly."""
    worst: Worst | None = None
    for k, (g, w) in enumerate(zip(got, want)):
        g64, w64 = as_f64(g), as_f64(w)
        with np.errstate(over="ignore"):
            w_rounded = as_f64(np.asarray(w).astype(np.asarray(g).dtype)) if is_float(np.asarray(g).dtype) else w64
        finite = np.isfinite(w64)
        floor = ELEMENTWISE_FLOOR.get(np.asarray(g).dtype.name, 1.0)
        if reduces and finite.any():
            floor = max(1.0, float(np.sqrt(np.mean(np.square(w64[finite])))))
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs(g64 - w64) / np.maximum(np.abs(w64), floor)
        special = ~np.isfinite(w_rounded) | ~np.isfinite(g64)
        same_special = (g64 == w_rounded) | (np.isnan(g64) & np.isnan(w_rounded))
        err = np.where(special, np.where(same_special, 0.0, np.inf), err)
        if err.size == 0:
            continue
        i = np.unravel_index(int(np.argmax(err)), err.shape)
        e = float(err[i])
        if worst is None or e > worst.error:
            worst = Worst(k, tuple(int(v) for v in i), float(g64[i]), float(w64[i]), e)
    return worst if worst is not None and worst.error > 0 else None
