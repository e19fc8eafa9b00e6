"""The low-precision types (SPEC.md: Types): float8, float6, float4, int4/uint4, int2/uint2.

Casts to and from every other type, ONNX's saturate and e8m0 round_mode included, and ops computed
in f32 (int4/int2: in 8 bits) on them, against ml_dtypes' own conversions: the oracle is
`ndarray.astype(ml_dtypes.T)`, or onnx.numpy_helper's to_float8e8m0 / ONNX's saturate rule where the
cast carries those attributes. Two exceptions, both SPEC.md's cast rule for every integer type:
floats to int4/int2 truncate and saturate (NaN -> 0), where ml_dtypes gives 0 out of range (it
agrees in range, which is checked too); NaN and inf to any integer are SPEC's, not NumPy's.

The grids run every conversion over values that find the edges: every value of the type, the ties
between neighbours and the floats just beside them, max and past it, subnormals, +-0, inf, NaN.
Each runs on the CPU target and on the CUDA target's emitted code (on the CPU through
tests/support/cuda_sim.h; on a GPU where there is one), whose .cu nvcc compiles without a warning.
"""

from __future__ import annotations

import glob
import itertools

import ml_dtypes
import numpy as np
import pytest
from cuda_simulator import simulated
from nvcc_check import assert_nvcc_compiles
from oracle import compile_funcs

from opc.api import lower, prepare
from opc.frontend import load_module
from opc.lowering.cuda_build import nvcc_path
from opc.lowering.cuda_emitter import emit_cuda

# the low-precision types: MLIR name -> NumPy (ml_dtypes) dtype
NARROW_FLOATS = {"f8E4M3FN": ml_dtypes.float8_e4m3fn, "f8E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
                 "f8E5M2": ml_dtypes.float8_e5m2, "f8E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
                 "f8E8M0FNU": ml_dtypes.float8_e8m0fnu, "f6E2M3FN": ml_dtypes.float6_e2m3fn,
                 "f6E3M2FN": ml_dtypes.float6_e3m2fn, "f4E2M1FN": ml_dtypes.float4_e2m1fn}  # fmt: skip
SUB_BYTE_INTS = {"i4": ml_dtypes.int4, "ui4": ml_dtypes.uint4, "i2": ml_dtypes.int2, "ui2": ml_dtypes.uint2}
WIDE_FLOATS = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
INTS = {"i8": np.int8, "ui8": np.uint8, "i16": np.int16, "i32": np.int32, "i64": np.int64}
DTYPES = {**NARROW_FLOATS, **SUB_BYTE_INTS, **WIDE_FLOATS, **INTS, "i1": np.bool_}
SATURATING = ("f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ")  # ONNX's saturate applies to these
N = 64  # every function takes a 1-D tensor of N elements (inputs are padded to it)


def np_type(t: str) -> np.dtype:
    return np.dtype(DTYPES[t])


def tensor(t: str, shape: tuple[int, ...] = (N,)) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{t}>"


def cast_func(name: str, src: str, dst: str, attrs: str = "") -> str:
    return (f"func.func @{name}(%a: {tensor(src)}) -> {tensor(dst)} {{\n"
            f"  %r = opc.cast %a {{dtype = {dst}{attrs}}} : ({tensor(src)}) -> {tensor(dst)}\n"
            f"  func.return %r : {tensor(dst)}\n}}\n")


def fit(values: np.ndarray, t: str) -> np.ndarray:
    """values (any length) as an N-element array of type t: cut or repeated to N."""
    return np.resize(values, N).astype(np_type(t))


def all_values(t: str) -> np.ndarray:
    """Every value of a low-precision type, as the type (bit patterns 0..2^bits-1 decoded)."""
    dt = np_type(t)
    if t in SUB_BYTE_INTS:
        info = ml_dtypes.iinfo(dt)
        return np.arange(int(info.min), int(info.max) + 1).astype(dt)
    bits = {"f4E2M1FN": 4, "f6E2M3FN": 6, "f6E3M2FN": 6}.get(t, 8)
    return np.arange(2**bits, dtype=np.uint8).view(dt)


def edge_floats(t: str) -> np.ndarray:
    """f64 values at the edges of float type t: its finite values, the ties between neighbours and
    the values just beside the ties, max and past it, half the smallest subnormal, specials."""
    v = all_values(t).astype(np.float64)
    finite = np.unique(v[np.isfinite(v)])
    mids = (finite[:-1] + finite[1:]) / 2
    mx = float(ml_dtypes.finfo(np_type(t)).max)
    tiny = float(finite[finite > 0].min())
    extra = [mx * 1.0625, mx * 1.125, mx * 1.25, mx * 2, tiny / 2, tiny / 4, tiny * 0.75, 0.0, -0.0,
             np.inf, -np.inf, np.nan]
    out = np.concatenate([finite, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf), extra])
    return np.concatenate([out, -out])


def pieces(values: np.ndarray) -> list[np.ndarray]:
    """values cut into N-element inputs (the last one repeated to length)."""
    return [np.resize(values[i:i + N], N) for i in range(0, len(values), N)]


def same(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit, except that any NaN matches any NaN (ml_dtypes keeps the source's NaN sign)."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.dtype.kind in "iub" or want.dtype in [np.dtype(d) for d in SUB_BYTE_INTS.values()]:
        np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64))
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(w)), f"NaN where {np.flatnonzero(np.isnan(g) != np.isnan(w))}"
    ok = ~np.isnan(w)
    bad = np.flatnonzero((g[ok] != w[ok]) | (np.signbit(g[ok]) != np.signbit(w[ok])))
    assert bad.size == 0, f"{bad.size} differ, e.g. got {g[ok][bad[:4]]} want {w[ok][bad[:4]]}"


def spec_to_int(x: np.ndarray, t: str) -> np.ndarray:
    """SPEC.md's float -> integer cast: truncate toward zero, saturate at the type's range, NaN -> 0."""
    dt = np_type(t)
    info = ml_dtypes.iinfo(dt) if t in SUB_BYTE_INTS else np.iinfo(dt)
    f = np.trunc(x.astype(np.float64))
    f = np.where(np.isnan(f), 0.0, np.clip(f, float(info.min), float(info.max)))
    if t == "i64":  # 2^63 is past int64: the clip's bound rounds up in f64
        return np.where(f >= 2.0**63, info.max, np.where(f <= -(2.0**63), info.min, f.astype(np.int64)))
    return f.astype(np.int64).astype(dt)


# ---------------------------------------------------------------------------
# Casts: one module holds them all
# ---------------------------------------------------------------------------

def float_to_narrow_cases():
    for src, dst in itertools.product(WIDE_FLOATS, NARROW_FLOATS):
        for sat in (False, True) if dst in SATURATING else (False,):
            yield src, dst, sat


E8M0_MODES = ("up", "down", "nearest")


def cast_cases() -> dict[str, tuple[str, str, str]]:
    """Function name -> (source, destination, the cast's extra attributes)."""
    out: dict[str, tuple[str, str, str]] = {}
    for src, dst, sat in float_to_narrow_cases():
        out[f"{src}_to_{dst}{'_sat' if sat else ''}"] = (src, dst, ", saturate = true" if sat else "")
    for src, sat, mode in itertools.product(("f32", "f16", "bf16"), (False, True), E8M0_MODES):
        out[f"{src}_to_e8m0_{mode}{'_sat' if sat else ''}"] = (
            src, "f8E8M0FNU", f"{', saturate = true' if sat else ''}, round_mode = \"{mode}\"")
    narrow = {**NARROW_FLOATS, **SUB_BYTE_INTS}
    for src, dst in itertools.product(narrow, {**WIDE_FLOATS, **INTS, **SUB_BYTE_INTS, "i1": None}):
        if src != dst:
            out[f"{src}_to_{dst}"] = (src, dst, "")
    for src, dst in itertools.product({**INTS, "i1": None}, narrow):
        out[f"{src}_to_{dst}"] = (src, dst, "")
    for src, dst in itertools.product(WIDE_FLOATS, SUB_BYTE_INTS):
        out[f"{src}_to_{dst}"] = (src, dst, "")
    for src, dst in itertools.product(NARROW_FLOATS, NARROW_FLOATS):
        if src != dst:
            out[f"{src}_to_{dst}"] = (src, dst, "")
    return out


CASTS = cast_cases()


# Where the functions run: opc's CPU build; the CUDA target's emitted .cu on the CPU
# (tests/support/cuda_sim.h: g++ and threads), which checks the CUDA lowering of the types without a
# GPU; and the CUDA build on a GPU where the machine has one. test_cuda_source_compiles_with_nvcc
# compiles the .cu of all of them (GEMMs too) with nvcc wherever nvcc is.
needs_gpu = pytest.mark.skipif(not glob.glob("/dev/nvidia[0-9]*"),
                               reason="no CUDA device (no /dev/nvidia[0-9]* device node)")
BACKENDS = ["cpu", "cuda-sim", pytest.param("cuda", marks=needs_gpu)]


def cuda_source(sources: list[str]) -> tuple[str, list]:
    return emit_cuda(lower(prepare(load_module("\n".join(sources)), "cuda", False), "cuda"))


def build(sources: list[str], backend: str, tmp_path_factory, name: str):
    if backend == "cpu":
        return compile_funcs(sources)
    if backend == "cuda":
        return compile_funcs(sources, target="cuda")
    return simulated(*cuda_source(sources), str(tmp_path_factory.mktemp(name)), name)


def cast_sources() -> list[str]:
    return [cast_func(name, *spec) for name, spec in CASTS.items()]


@pytest.fixture(scope="module", params=BACKENDS)
def casts(request, tmp_path_factory):
    return build(cast_sources(), request.param, tmp_path_factory, "casts")


def source_values(src: str, dst: str) -> np.ndarray:
    """What to cast from src to dst: every value of a low-precision source; for a wide source the edges of
    dst (a float) or the integer range around dst's (an integer); for integer sources their extremes too."""
    if src in NARROW_FLOATS or src in SUB_BYTE_INTS:
        return all_values(src)
    if src == "i1":
        return np.array([False, True])
    if src in INTS:
        info = np.iinfo(np_type(src))
        span = np.arange(max(int(info.min), -300), min(int(info.max), 300) + 1)
        return np.concatenate([span, [info.min, info.max, info.max - 1]]).astype(np_type(src))
    if dst in SUB_BYTE_INTS:
        x = np.concatenate([np.arange(-20, 20, 0.25), [1e9, -1e9, np.inf, -np.inf, np.nan, -0.0, 0.5, -0.5]])
        with np.errstate(over="ignore"):  # 1e9 is inf in f16
            return x.astype(np_type(src))
    with np.errstate(over="ignore"):
        return edge_floats(dst).astype(np_type(src))


def want_cast(x: np.ndarray, src: str, dst: str, attrs: str) -> np.ndarray:
    """The oracle: ml_dtypes' astype; ONNX's rules where the cast carries saturate or round_mode."""
    dt = np_type(dst)
    with np.errstate(all="ignore"):
        if "round_mode" in attrs:
            from onnx.numpy_helper import to_float8e8m0

            mode = attrs.split('"')[1]
            return to_float8e8m0(x.astype(np.float32), "saturate" in attrs, mode).astype(dt)
        if "saturate" in attrs:  # onnx.numpy_helper.saturate_cast: clip to +-max, then round
            mx = float(ml_dtypes.finfo(dt).max)
            return np.clip(x.astype(np.float64), -mx, mx).astype(dt)
        is_float_src = src in NARROW_FLOATS or src in WIDE_FLOATS
        if is_float_src and (dst in INTS or dst in SUB_BYTE_INTS):
            return spec_to_int(x, dst)
        if dst == "i1":
            return x.astype(np.float64) != 0
        return x.astype(dt)


@pytest.mark.parametrize("name", list(CASTS))
def test_cast(casts, name):
    src, dst, attrs = CASTS[name]
    for x in pieces(source_values(src, dst)):
        x = fit(x, src)
        same(getattr(casts, name)(x), want_cast(x, src, dst, attrs))


@pytest.mark.parametrize("src,dst", [(s, d) for s in WIDE_FLOATS for d in SUB_BYTE_INTS])
def test_float_to_sub_byte_matches_ml_dtypes_in_range(casts, src, dst):
    """Where ml_dtypes' own float -> int4/int2 is defined (in range), SPEC's cast is the same."""
    info = ml_dtypes.iinfo(np_type(dst))
    x = fit(np.linspace(float(info.min) - 0.75, float(info.max) + 0.75, N), src)
    ok = (x.astype(np.float64) > float(info.min) - 1) & (x.astype(np.float64) < float(info.max) + 1)
    got = getattr(casts, f"{src}_to_{dst}")(x)
    same(got[ok], x[ok].astype(np_type(dst)))


# ---------------------------------------------------------------------------
# Ops on the types: computed in f32 (integers in 8 bits), rounded once to the type
# ---------------------------------------------------------------------------

SHAPE, ROW, MAT_A, MAT_B = (4, 6), (6,), (5, 7), (7, 3)
FLOAT_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
                "maximum": np.maximum, "minimum": np.minimum}  # fmt: skip


def c_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer div as opc's (C's): truncated toward zero, x / 0 = 0."""
    safe = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, np.trunc(a / safe)).astype(np.int64)


INT_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": c_div, "maximum": np.maximum,
              "minimum": np.minimum}
FLOAT_UNARY = {"neg": np.negative, "abs": np.abs, "exp": np.exp, "tanh": np.tanh, "sqrt": np.sqrt}
INT_UNARY = {"neg": np.negative, "abs": np.abs}


def op_funcs(t: str) -> list[str]:
    a, r = tensor(t, SHAPE), tensor(t, ROW)
    binary, unary = (FLOAT_BINARY, FLOAT_UNARY) if t in NARROW_FLOATS else (INT_BINARY, INT_UNARY)
    out = [f"func.func @{n}_{t}(%a: {a}, %b: {r}) -> {a} {{\n  %r = opc.{n} %a, %b : ({a}, {r}) -> {a}\n"
           f"  func.return %r : {a}\n}}\n" for n in binary]
    out += [f"func.func @{n}_{t}(%a: {a}) -> {a} {{\n  %r = opc.{n} %a : ({a}) -> {a}\n  func.return %r : {a}\n}}\n"
            for n in unary]
    b1, sum_t = tensor("i1", SHAPE), tensor(t, (SHAPE[0],))
    out += [
        f"func.func @greater_than_{t}(%a: {a}, %b: {r}) -> {b1} {{\n"
        f"  %r = opc.greater_than %a, %b : ({a}, {r}) -> {b1}\n  func.return %r : {b1}\n}}\n",
        f"func.func @select_{t}(%c: {b1}, %a: {a}, %b: {r}) -> {a} {{\n"
        f"  %r = opc.select %c, %a, %b : ({b1}, {a}, {r}) -> {a}\n  func.return %r : {a}\n}}\n",
        f"func.func @reduce_sum_{t}(%a: {a}) -> {sum_t} {{\n"
        f"  %r = opc.reduce_sum %a {{axes = array<i64: 1>}} : ({a}) -> {sum_t}\n  func.return %r : {sum_t}\n}}\n",
        f"func.func @reduce_max_{t}(%a: {a}) -> {sum_t} {{\n"
        f"  %r = opc.reduce_max %a {{axes = array<i64: 1>}} : ({a}) -> {sum_t}\n  func.return %r : {sum_t}\n}}\n",
    ]
    return out


def matmul_func(t: str) -> str:
    """opc.matmul is a float op (ONNX's MatMul has no int4/int2 either): float8/float4 only."""
    ma, mb, mc = tensor(t, MAT_A), tensor(t, MAT_B), tensor(t, (MAT_A[0], MAT_B[1]))
    return (f"func.func @matmul_{t}(%a: {ma}, %b: {mb}) -> {mc} {{\n"
            f"  %r = opc.matmul %a, %b : ({ma}, {mb}) -> {mc}\n  func.return %r : {mc}\n}}\n")


LOWP = [*NARROW_FLOATS, *SUB_BYTE_INTS]


def ops_sources() -> list[str]:
    return [f for t in LOWP for f in op_funcs(t)]


@pytest.fixture(scope="module", params=BACKENDS)
def ops(request, tmp_path_factory):
    return build(ops_sources(), request.param, tmp_path_factory, "ops")


def draw(shape: tuple[int, ...], t: str, rng: np.random.Generator) -> np.ndarray:
    """Values of type t: integers over the whole range; floats in [-3, 3] (e8m0: its positive powers
    of two around 1), rounded to t, so that sums and dot products of a few are exact in f32."""
    dt = np_type(t)
    if t in SUB_BYTE_INTS:
        info = ml_dtypes.iinfo(dt)
        return rng.integers(int(info.min), int(info.max) + 1, size=shape).astype(dt)
    if t == "f8E8M0FNU":
        return np.exp2(rng.integers(-4, 5, size=shape)).astype(dt)
    return rng.uniform(-3, 3, size=shape).astype(np.float32).astype(dt)


def in_compute(x: np.ndarray, t: str) -> np.ndarray:
    """The type the op computes in: f32 for float8/float4, int64 for int4/int2 (wrapped back to t's
    bits by astype, as 8-bit arithmetic wraps)."""
    return x.astype(np.int64) if t in SUB_BYTE_INTS else x.astype(np.float32)


def rounded(v: np.ndarray, t: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(v).astype(np_type(t))


def op_cases(floats: dict, ints: dict) -> list[tuple[str, str]]:
    """(op, type): float ops on float8/float4, integer ones on int4/int2 (exp, tanh, sqrt are float ops)."""
    return [(n, t) for t in NARROW_FLOATS for n in floats] + [(n, t) for t in SUB_BYTE_INTS for n in ints]


@pytest.mark.parametrize("name,t", op_cases(FLOAT_BINARY, INT_BINARY))
def test_binary(ops, name, t):
    rng = np.random.default_rng(7)
    a, b = draw(SHAPE, t, rng), draw(ROW, t, rng)
    if name == "div" and t in NARROW_FLOATS:  # integer x / 0 is 0: the grid keeps those
        b = np.where(b.astype(np.float32) == 0, np.ones((), b.dtype), b).astype(b.dtype)
    fn = (INT_BINARY if t in SUB_BYTE_INTS else FLOAT_BINARY)[name]
    with np.errstate(all="ignore"):
        want = rounded(fn(in_compute(a, t), in_compute(b, t)), t)
    same(getattr(ops, f"{name}_{t}")(a, b), want)


@pytest.mark.parametrize("name,t", op_cases(FLOAT_UNARY, INT_UNARY))
def test_unary(ops, name, t):
    a = draw(SHAPE, t, np.random.default_rng(8))
    if name == "sqrt":
        a = np.abs(a.astype(np.float32)).astype(a.dtype)
    with np.errstate(all="ignore"):
        want = rounded(FLOAT_UNARY[name](in_compute(a, t)).astype(np.float32 if t in NARROW_FLOATS else np.int64), t)
    same(getattr(ops, f"{name}_{t}")(a), want)


@pytest.mark.parametrize("t", LOWP)
def test_compare_select(ops, t):
    rng = np.random.default_rng(9)
    a, b, c = draw(SHAPE, t, rng), draw(ROW, t, rng), rng.integers(0, 2, size=SHAPE).astype(bool)
    same(getattr(ops, f"greater_than_{t}")(a, b), in_compute(a, t) > in_compute(b, t))
    same(getattr(ops, f"select_{t}")(c, a, b), np.where(c, a, np.broadcast_to(b, SHAPE)).astype(a.dtype))


@pytest.mark.parametrize("t", LOWP)
@pytest.mark.parametrize("name", ["reduce_sum", "reduce_max"])
def test_reduce(ops, name, t):
    a = draw(SHAPE, t, np.random.default_rng(10))
    fn = np.sum if name == "reduce_sum" else np.max
    same(getattr(ops, f"{name}_{t}")(a), rounded(fn(in_compute(a, t), axis=1), t))


def gemm_sources() -> list[str]:
    return [matmul_func(t) for t in NARROW_FLOATS]


@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda", marks=needs_gpu)])
def gemms(request, tmp_path_factory):
    """Not on the CUDA simulator: it has no GEMM library (opc_cuda_gemm.cuh)."""
    return build(gemm_sources(), request.param, tmp_path_factory, "gemms")


@pytest.mark.parametrize("t", NARROW_FLOATS)
def test_matmul(gemms, t):
    """A GEMM of float8/float4 inputs is an f32 GEMM rounded once to the type."""
    rng = np.random.default_rng(11)
    a, b = draw(MAT_A, t, rng), draw(MAT_B, t, rng)
    same(getattr(gemms, f"matmul_{t}")(a, b), rounded(in_compute(a, t) @ in_compute(b, t), t))


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not on PATH")
def test_cuda_source_compiles_with_nvcc(tmp_path):
    """Every cast, op and GEMM above in one .cu: nvcc compiles it for sm_90 without a warning."""
    assert_nvcc_compiles(tmp_path, "lowp", cuda_source(cast_sources() + ops_sources() + gemm_sources())[0])
