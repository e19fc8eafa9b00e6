"""Tests of the C runtime headers (runtime/opc_runtime.h, runtime/opc_gemm.h).

A small CFFI module with thin array wrappers around the header functions is
built once per test session and checked against NumPy / ml_dtypes.
"""
import hashlib
import importlib
import math
import sys
from pathlib import Path

import cffi  # opc's own dependencies: a missing one is a broken install, not a reason to skip
import ml_dtypes
import numpy as np
import pytest

bf16 = ml_dtypes.bfloat16

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"

CDEF = """
void t_f16_to_f32(const uint16_t *x, float *y, int64_t n);
void t_f32_to_f16(const float *x, uint16_t *y, int64_t n);
void t_f64_to_f16(const double *x, uint16_t *y, int64_t n);
void t_bf16_to_f32(const uint16_t *x, float *y, int64_t n);
void t_f32_to_bf16(const float *x, uint16_t *y, int64_t n);
void t_f64_to_bf16(const double *x, uint16_t *y, int64_t n);
void t_sat_i8(const double *x, int8_t *y, int64_t n);
void t_sat_u8(const double *x, uint8_t *y, int64_t n);
void t_sat_i16(const double *x, int16_t *y, int64_t n);
void t_sat_i32(const double *x, int32_t *y, int64_t n);
void t_sat_i64(const double *x, int64_t *y, int64_t n);
void t_unary_f32(int which, const float *x, float *y, int64_t n);
void t_unary_f64(int which, const double *x, double *y, int64_t n);
void opc_gemm_f32(int64_t, int64_t, int64_t, int64_t, const float *, int64_t, int,
                  const float *, int64_t, int, const float *, int, float *, float *);
void opc_gemm_f64(int64_t, int64_t, int64_t, int64_t, const double *, int64_t, int,
                  const double *, int64_t, int, const double *, int, double *, double *);
void opc_gemm_f16(int64_t, int64_t, int64_t, int64_t, const uint16_t *, int64_t, int,
                  const uint16_t *, int64_t, int, const uint16_t *, int, uint16_t *, uint16_t *);
void opc_gemm_bf16(int64_t, int64_t, int64_t, int64_t, const uint16_t *, int64_t, int,
                   const uint16_t *, int64_t, int, const uint16_t *, int, uint16_t *, uint16_t *);
"""

SRC = r"""
#include "opc_runtime.h"
#include "opc_gemm.h"
#define MAP(name, TI, TO, expr) \
  void name(const TI *x, TO *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = expr(x[i]); }
MAP(t_f16_to_f32, uint16_t, float, opc_f16_to_f32)
MAP(t_f32_to_f16, float, uint16_t, opc_f32_to_f16)
MAP(t_f64_to_f16, double, uint16_t, opc_f64_to_f16)
MAP(t_bf16_to_f32, uint16_t, float, opc_bf16_to_f32)
MAP(t_f32_to_bf16, float, uint16_t, opc_f32_to_bf16)
MAP(t_f64_to_bf16, double, uint16_t, opc_f64_to_bf16)
MAP(t_sat_i8, double, int8_t, opc_sat_i8)
MAP(t_sat_u8, double, uint8_t, opc_sat_u8)
MAP(t_sat_i16, double, int16_t, opc_sat_i16)
MAP(t_sat_i32, double, int32_t, opc_sat_i32)
MAP(t_sat_i64, double, int64_t, opc_sat_i64)
void t_unary_f32(int w, const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    y[i] = w == 0 ? opc_gelu_tanh_f32(v) : w == 1 ? opc_gelu_erf_f32(v)
         : w == 2 ? opc_gelu_tanh_grad_f32(v) : w == 3 ? opc_gelu_erf_grad_f32(v)
         : opc_rsqrt_f32(v);
  }
}
void t_unary_f64(int w, const double *x, double *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double v = x[i];
    y[i] = w == 0 ? opc_gelu_tanh_f64(v) : w == 1 ? opc_gelu_erf_f64(v)
         : w == 2 ? opc_gelu_tanh_grad_f64(v) : w == 3 ? opc_gelu_erf_grad_f64(v)
         : opc_rsqrt_f64(v);
  }
}
"""


NATIVE_FLAGS = (["-O3", "-march=native", "-fopenmp"], ["-fopenmp"])
# portable build: no AVX2/FMA kernels, no OpenMP (the fallback paths)
PORTABLE_FLAGS = (["-O2", "-std=c99", "-Wall", "-Werror", "-Wno-unused-function"], [])


def build_module(tmpdir, flags=NATIVE_FLAGS):
    """Build and import the test extension; returns (ffi, lib)."""
    hdrs = "".join((RUNTIME / h).read_text() for h in ("opc_runtime.h", "opc_gemm.h"))
    tag = hashlib.sha256(repr((CDEF, SRC, hdrs, flags)).encode()).hexdigest()[:12]
    name = f"_opc_rt_test_{tag}"
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source(name, SRC, include_dirs=[str(RUNTIME)],
                   extra_compile_args=list(flags[0]), extra_link_args=list(flags[1]))
    ffi.compile(tmpdir=str(tmpdir), verbose=False)
    sys.path.insert(0, str(tmpdir))
    try:
        mod = importlib.import_module(name)
    finally:
        sys.path.remove(str(tmpdir))
    return mod.ffi, mod.lib


@pytest.fixture(scope="module")
def rt(tmp_path_factory):
    return build_module(tmp_path_factory.mktemp("opc_rt"))


CT = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
      np.dtype(np.uint16): "uint16_t", np.dtype(np.int8): "int8_t",
      np.dtype(np.uint8): "uint8_t", np.dtype(np.int16): "int16_t",
      np.dtype(np.int32): "int32_t", np.dtype(np.int64): "int64_t"}


def ptr(ffi, a):
    if a is None:
        return ffi.NULL
    assert a.flags.c_contiguous
    if a.dtype in (np.dtype(np.float16), np.dtype(bf16)):
        a = a.view(np.uint16)
    return ffi.cast(CT[a.dtype] + " *", ffi.from_buffer(a))


def cmap(rt, fname, x, out_dtype):
    ffi, lib = rt
    x = np.ascontiguousarray(x)
    y = np.empty(x.shape, out_dtype)
    getattr(lib, fname)(ptr(ffi, x), ptr(ffi, y), x.size)
    return y


# --------------------------------------------------------------------------
# f16 / bf16 conversions
# --------------------------------------------------------------------------
ALL16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def special_f32():
    rng = np.random.default_rng(0)
    vals = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 65504.0, 65519.99, 65520.0,
            65536.0, 1e30, -1e30, 2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 2.0 ** -26,
            1.5 * 2.0 ** -25, 3.0 * 2.0 ** -25, 1e-40, 3.4e38, -3.4e38, 1.17549435e-38]
    # every f16 value, and the exact midpoints / neighbours between f16 values
    h = ALL16.view(np.float16).astype(np.float32)
    h = h[np.isfinite(h)]
    hs = np.sort(np.unique(h))
    mids = ((hs[:-1].astype(np.float64) + hs[1:]) / 2).astype(np.float32)
    near = np.concatenate([np.nextafter(mids, np.float32(np.inf)),
                           np.nextafter(mids, np.float32(-np.inf))])
    rand_bits = rng.integers(0, 1 << 32, 200000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    bfmid = (ALL16.astype(np.uint32) << 16 | 0x8000).view(np.float32)  # bf16 ties
    return np.concatenate([np.array(vals, np.float32), h, mids, near, rand_bits, bfmid,
                           np.nextafter(bfmid, np.float32(np.inf))])


def special_f64():
    rng = np.random.default_rng(1)
    f = special_f32().astype(np.float64)
    rand_bits = rng.integers(0, 1 << 63, 100000, dtype=np.uint64).view(np.float64)
    signs = np.where(rng.random(100000) < 0.5, -1.0, 1.0)
    # values straddling f16/bf16 ties by tiny amounts (double rounding traps)
    h = ALL16.view(np.float16).astype(np.float64)
    h = np.sort(np.unique(h[np.isfinite(h)]))
    mids = (h[:-1] + h[1:]) / 2
    b = (ALL16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    b = np.sort(np.unique(b[np.isfinite(b)]))
    bmids = (b[:-1] + b[1:]) / 2
    eps = np.abs(mids) * 2.0 ** -40
    beps = np.abs(bmids) * 2.0 ** -40
    scaled = rng.standard_normal(50000) * 10.0 ** rng.integers(-45, 40, 50000)
    return np.concatenate([f, rand_bits, rand_bits * signs, mids + eps, mids - eps,
                           bmids + beps, bmids - beps, scaled,
                           [1 + 2.0 ** -8 + 2.0 ** -30, 1e300, -1e300, 5e-324]])


def same_bits16(got, want):
    got = got.view(np.uint16)
    want = want.view(np.uint16)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, f"{bad.size} mismatches, first: got {got[bad[:5]]} want {want[bad[:5]]}"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dst", ["f16", "bf16"])
def test_from_f32(rt, dst):
    x = special_f32()
    dt = np.float16 if dst == "f16" else bf16
    same_bits16(cmap(rt, f"t_f32_to_{dst}", x, np.uint16), x.astype(dt))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dst", ["f16", "bf16"])
def test_from_f64(rt, dst):
    x = special_f64()
    dt = np.float16 if dst == "f16" else bf16
    same_bits16(cmap(rt, f"t_f64_to_{dst}", x, np.uint16), x.astype(dt))


def test_bf16_f64_rounds_once(rt):
    x = np.array([1 + 2.0 ** -8 + 2.0 ** -30])
    assert cmap(rt, "t_f64_to_bf16", x, np.uint16)[0] == 0x3F81


@pytest.mark.parametrize("src", ["f16", "bf16"])
def test_to_f32_all_values(rt, src):
    dt = np.float16 if src == "f16" else bf16
    got = cmap(rt, f"t_{src}_to_f32", ALL16, np.float32)
    want = ALL16.view(dt).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
    # round trip of every non-NaN value is the identity
    back = cmap(rt, f"t_f32_to_{src}", got, np.uint16)
    assert np.array_equal(back[~nan], ALL16[~nan])


# --------------------------------------------------------------------------
# saturating casts
# --------------------------------------------------------------------------
SAT_X = np.array([np.nan, -np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, -0.0, -0.5, 0.5, -0.9999,
                  0.9999, 1.5, -1.5, 127.0, 127.9, 128.0, -128.0, -128.9, -129.0, 255.0,
                  255.7, 256.0, 32767.5, -32768.5, 2147483647.0, 2147483647.9, 2147483648.0,
                  -2147483648.0, -2147483648.9, -2147483649.0, 9.2233720368547748e18,
                  9223372036854775808.0, -9223372036854775808.0, -9.3e18, 3e19, 1e300])


def sat_ref(x, dt):
    info = np.iinfo(dt)
    out = []
    for v in x:
        if math.isnan(v):
            out.append(0)
        elif v >= info.max:
            out.append(info.max)
        elif v <= info.min:
            out.append(info.min)
        else:
            out.append(int(math.trunc(v)))
    return np.array(out, dtype=dt)


@pytest.mark.parametrize("name,dt", [("i8", np.int8), ("u8", np.uint8), ("i16", np.int16),
                                     ("i32", np.int32), ("i64", np.int64)])
def test_saturating_casts(rt, name, dt):
    rng = np.random.default_rng(2)
    x = np.concatenate([SAT_X, rng.standard_normal(2000) * 10.0 ** rng.integers(0, 20, 2000)])
    got = cmap(rt, f"t_sat_{name}", x, dt)
    np.testing.assert_array_equal(got, sat_ref(x, dt))


def test_saturating_casts_examples(rt):
    assert cmap(rt, "t_sat_u8", np.array([255.7, -0.5, np.nan]), np.uint8).tolist() == [255, 0, 0]
    assert cmap(rt, "t_sat_i64", np.array([2.0 ** 63, -2.0 ** 63]), np.int64).tolist() == \
        [2 ** 63 - 1, -2 ** 63]


# --------------------------------------------------------------------------
# activations
# --------------------------------------------------------------------------
def _erf(x):
    return np.vectorize(math.erf)(x)


def gelu_tanh_ref(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf_ref(x):
    return 0.5 * x * (1 + _erf(x / np.sqrt(2)))


ACT_X = np.concatenate([np.linspace(-12, 12, 2401), [0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0]])


@pytest.mark.parametrize("suffix,dt,tol", [("f32", np.float32, 3e-6), ("f64", np.float64, 1e-13)])
def test_activations(rt, suffix, dt, tol):
    x = ACT_X.astype(dt)
    x64 = x.astype(np.float64)
    call = lambda w: cmap_unary(rt, suffix, w, x).astype(np.float64)  # noqa: E731
    np.testing.assert_allclose(call(0), gelu_tanh_ref(x64), rtol=tol, atol=tol)
    np.testing.assert_allclose(call(1), gelu_erf_ref(x64), rtol=tol, atol=tol)
    h = 1e-5
    fd_t = (gelu_tanh_ref(x64 + h) - gelu_tanh_ref(x64 - h)) / (2 * h)
    fd_e = (gelu_erf_ref(x64 + h) - gelu_erf_ref(x64 - h)) / (2 * h)
    gtol = max(tol, 1e-8) * 10
    np.testing.assert_allclose(call(2), fd_t, rtol=gtol, atol=gtol)
    np.testing.assert_allclose(call(3), fd_e, rtol=gtol, atol=gtol)
    xp = np.abs(x[np.abs(x) > 1e-3])
    np.testing.assert_allclose(cmap_unary(rt, suffix, 4, xp), 1 / np.sqrt(xp.astype(np.float64)),
                               rtol=tol)


def cmap_unary(rt, suffix, which, x):
    ffi, lib = rt
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    getattr(lib, f"t_unary_{suffix}")(which, ptr(ffi, x), ptr(ffi, y), x.size)
    return y


# --------------------------------------------------------------------------
# GEMM
# --------------------------------------------------------------------------
GEMM_DT = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": bf16}
# tolerance relative to the size of the terms (sqrt(K) * |a| * |b| scale)
GEMM_TOL = {"f32": 2e-5, "f64": 1e-12, "f16": 2e-3, "bf16": 1.6e-2}


def act_ref(z, act):
    if act == 0:
        return z
    if act == 1:
        return np.maximum(z, 0)
    if act == 2:
        return gelu_tanh_ref(z)
    return gelu_erf_ref(z)


def run_gemm(rt, dname, batch, M, N, K, ta, tb, act, bias=True, bcast=None, reserve=True, seed=0):
    ffi, lib = rt
    dt = GEMM_DT[dname]
    rng = np.random.default_rng(seed)
    ab = 1 if bcast == "a" else batch
    bb = 1 if bcast == "b" else batch
    a = rng.standard_normal((ab,) + ((K, M) if ta else (M, K))).astype(dt)
    b = rng.standard_normal((bb,) + ((N, K) if tb else (K, N))).astype(dt)
    bi = rng.standard_normal(N).astype(dt) if bias else None
    out = np.full((batch, M, N), np.nan, dt)
    res = np.full((batch, M, N), np.nan, dt) if reserve else None
    getattr(lib, f"opc_gemm_{dname}")(batch, M, N, K, ptr(ffi, a), 0 if ab == 1 else a[0].size,
                                      int(ta), ptr(ffi, b), 0 if bb == 1 else b[0].size, int(tb),
                                      ptr(ffi, bi), act, ptr(ffi, out), ptr(ffi, res))
    a64 = a.astype(np.float64)
    b64 = b.astype(np.float64)
    if ta:
        a64 = a64.transpose(0, 2, 1)
    if tb:
        b64 = b64.transpose(0, 2, 1)
    z = np.matmul(a64, b64) if K else np.zeros((batch, M, N))
    z = np.broadcast_to(z, (batch, M, N))
    if bias:
        z = z + bi.astype(np.float64)
    tol = GEMM_TOL[dname] * (math.sqrt(K) + 1)
    rtol = GEMM_TOL[dname] * 2
    if reserve:
        np.testing.assert_allclose(res.astype(np.float64), z, rtol=rtol, atol=tol)
    np.testing.assert_allclose(out.astype(np.float64), act_ref(z, act), rtol=rtol, atol=tol)
    return out, res


SIZES = [(1, 1, 1), (7, 33, 129), (33, 7, 1), (129, 129, 33), (5, 9, 0)]


@pytest.mark.parametrize("dname", list(GEMM_DT))
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("act", [0, 1, 2, 3])
def test_gemm_grid(rt, dname, ta, tb, act):
    for i, (M, N, K) in enumerate(SIZES):
        run_gemm(rt, dname, 1, M, N, K, ta, tb, act, bias=(i % 2 == 0) or act == 0, seed=i)


@pytest.mark.parametrize("dname", list(GEMM_DT))
@pytest.mark.parametrize("bcast", ["a", "b", None])
def test_gemm_batch_broadcast(rt, dname, bcast):
    run_gemm(rt, dname, 2, 37, 45, 70, False, True, 2, bcast=bcast)
    run_gemm(rt, dname, 2, 130, 20, 300, True, False, 1, bcast=bcast, reserve=False)


@pytest.mark.parametrize("dname", list(GEMM_DT))
@pytest.mark.parametrize("shape", [(300, 200, 600), (6, 700, 520), (513, 17, 257), (64, 64, 64),
                                   (65, 65, 65), (2, 3000, 4)])
def test_gemm_large_blocks(rt, dname, shape):
    """Several K blocks, several row blocks, threads, short-M column split."""
    M, N, K = shape
    run_gemm(rt, dname, 1, M, N, K, False, False, 2)
    run_gemm(rt, dname, 1, M, N, K, True, True, 0, bias=False, reserve=False)


@pytest.mark.parametrize("M", [1, 2, 3, 4, 5, 8, 9])
@pytest.mark.parametrize("tb", [False, True])
def test_gemm_few_rows(rt, M, tb):
    """f32 with M <= 8 reads B in place (runtime/opc_gemm_fewrows.h; 9 takes the packed path): full
    and edge column tiles (70 = 2 x 32 + 6), a K that no vector width divides, batches with B shared
    or not, every epilogue; and the other dtypes at the same sizes for comparison."""
    for i, (N, K) in enumerate([(70, 37), (1024, 256), (3, 1), (33, 300)]):
        run_gemm(rt, "f32", 2, M, N, K, False, tb, i % 4, bias=i % 2 == 0, bcast="b" if i % 2 else None, seed=i)
    run_gemm(rt, "f64", 1, M, 70, 37, False, tb, 1)


def test_gemm_k0_no_bias(rt):
    out, _ = run_gemm(rt, "f32", 2, 4, 5, 0, False, False, 2, bias=False)
    assert np.all(out == 0)


def test_gemm_bounds(rt):
    """Output buffer with guard cells: nothing written outside [M,N]."""
    ffi, lib = rt
    for M, N, K in [(7, 33, 129), (13, 17, 300), (1, 1, 1), (300, 5, 520), (4, 70, 37), (3, 1024, 17)]:
        a = np.random.default_rng(3).standard_normal((M, K)).astype(np.float32)
        b = np.random.default_rng(4).standard_normal((K, N)).astype(np.float32)
        buf = np.full(M * N + 64, 7.0, np.float32)
        rbuf = np.full(M * N + 64, 7.0, np.float32)
        out = buf[32:32 + M * N]
        res = rbuf[32:32 + M * N]
        lib.opc_gemm_f32(1, M, N, K, ptr(ffi, a), 0, 0, ptr(ffi, b), 0, 0, ffi.NULL, 1,
                         ptr(ffi, out), ptr(ffi, res))
        assert np.all(buf[:32] == 7.0) and np.all(buf[32 + M * N:] == 7.0)
        assert np.all(rbuf[:32] == 7.0) and np.all(rbuf[32 + M * N:] == 7.0)
        np.testing.assert_allclose(out.reshape(M, N), np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def rt_portable(tmp_path_factory):
    return build_module(tmp_path_factory.mktemp("opc_rt_portable"), PORTABLE_FLAGS)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dname", list(GEMM_DT))
def test_gemm_portable_build(rt_portable, dname):
    """-std=c99 without -march=native / -fopenmp: portable kernels, same results."""
    for i, (M, N, K) in enumerate(SIZES + [(70, 40, 300)]):
        run_gemm(rt_portable, dname, 2, M, N, K, i % 2 == 1, i % 3 == 1, i % 4, bcast="b", seed=i)
    x = special_f32()
    same_bits16(cmap(rt_portable, "t_f32_to_f16", x, np.uint16), x.astype(np.float16))


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))


# The micro-kernel is chosen by the build's ISA: -march=native picks AVX-512 where the CPU has it,
# so the AVX2 kernel (6x16 tiles, what an AVX2-only machine runs) is built here on purpose too.
AVX2_FLAGS = (["-O3", "-march=native", "-mno-avx512f", "-fopenmp"], ["-fopenmp"])


@pytest.fixture(scope="module")
def rt_avx2(tmp_path_factory):
    if not {"avx2", "fma"} <= cpu_flags():
        pytest.skip("the CPU has no AVX2+FMA to run the AVX2 micro-kernel")
    return build_module(tmp_path_factory.mktemp("opc_rt_avx2"), AVX2_FLAGS)


@pytest.mark.parametrize("dname", list(GEMM_DT))
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_gemm_avx2_build(rt_avx2, dname, ta, tb):
    """The AVX2 kernels (also on an AVX-512 machine): ragged edges, several K and row blocks."""
    for i, (M, N, K) in enumerate(SIZES + [(70, 40, 300), (300, 200, 600), (13, 47, 257)]):
        run_gemm(rt_avx2, dname, 2 if i % 2 else 1, M, N, K, ta, tb, i % 4, bias=i % 3 != 1, bcast="b", seed=i)


@pytest.mark.parametrize("isa, flags, want, unwanted", [
    ("avx512f", ["-march=native"], r"vfmadd\w+ps\s.*%zmm", None),
    ("avx2", ["-march=native", "-mno-avx512f"], r"vfmadd\w+ps\s.*%ymm", r"%zmm"),
])
def test_gemm_kernel_isa(tmp_path, isa, flags, want, unwanted):
    """The build's ISA picks the micro-kernel: zmm FMAs with AVX-512, ymm (and no zmm) with AVX2 only.
    Except the bf16 kernel on vdpbf16ps (opc_gemm_bf16dp.h), a function of target avx512bf16 in
    every x86-64 build, which runs only where the CPU says it has the instruction."""
    import re
    import subprocess

    if isa not in cpu_flags():
        pytest.skip(f"the CPU has no {isa}: -march=native would not select that kernel")
    asm = tmp_path / "gemm.s"
    subprocess.run(["cc", "-O3", "-fopenmp", *flags, "-S", "-I", str(RUNTIME), "-o", str(asm),
                    str(RUNTIME / "opc_gemm_lib.c")], check=True)
    text = asm.read_text()
    text = re.sub(r"^opc__ukr_bd:.*?\.cfi_endproc", "", text, flags=re.MULTILINE | re.DOTALL)
    assert re.search(want, text)
    assert unwanted is None or not re.search(unwanted, text)


def test_gemm_f16_rounding_is_rne(rt):
    """The f16 store is the RNE rounding of the f32 accumulation."""
    ffi, lib = rt
    rng = np.random.default_rng(5)
    M, N, K = 16, 16, 8
    a = (rng.integers(-8, 8, (M, K)) / 8).astype(np.float16)
    b = (rng.integers(-8, 8, (K, N)) / 16 + 1 / 2048).astype(np.float16)
    out = np.empty((M, N), np.float16)
    lib.opc_gemm_f16(1, M, N, K, ptr(ffi, a), 0, 0, ptr(ffi, b), 0, 0, ffi.NULL, 0,
                     ptr(ffi, out), ffi.NULL)
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    same_bits16(out, want)
