"""Throwaway benchmark: opc_gemm_f32 (runtime/opc_gemm.h) vs NumPy/OpenBLAS.

Run as:
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_gemm_c.py
(OMP_NUM_THREADS / OPENBLAS_NUM_THREADS default to the core count.)
"""
import hashlib
import importlib
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import cffi

RUNTIME = Path(__file__).resolve().parent.parent / "runtime"
CDEF = """
void opc_gemm_f32(int64_t, int64_t, int64_t, int64_t, const float *, int64_t, int,
                  const float *, int64_t, int, const float *, int, float *, float *);
void opc_gemm_f64(int64_t, int64_t, int64_t, int64_t, const double *, int64_t, int,
                  const double *, int64_t, int, const double *, int, double *, double *);
void opc_gemm_bf16(int64_t, int64_t, int64_t, int64_t, const uint16_t *, int64_t, int,
                   const uint16_t *, int64_t, int, const uint16_t *, int, uint16_t *, uint16_t *);
"""
SRC = '#include "opc_runtime.h"\n#include "opc_gemm.h"\n'


def build():
    hdrs = "".join((RUNTIME / h).read_text() for h in ("opc_runtime.h", "opc_gemm.h"))
    name = "_opc_bench_" + hashlib.sha256((CDEF + hdrs).encode()).hexdigest()[:12]
    d = tempfile.mkdtemp(prefix="opc_bench_")
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source(name, SRC, include_dirs=[str(RUNTIME)],
                   extra_compile_args=["-O3", "-march=native", "-fopenmp"],
                   extra_link_args=["-fopenmp"])
    ffi.compile(tmpdir=d)
    sys.path.insert(0, d)
    mod = importlib.import_module(name)
    return mod.ffi, mod.lib


def best(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def best_pair(f_np, f_c, reps, rounds=3):
    """Best time of each, measured in alternating blocks (shares machine noise;
    blocks, not single calls, so one library's idle spinning threads do not
    steal the cores from the other)."""
    t_np = t_c = float("inf")
    for _ in range(rounds):
        t_np = min(t_np, best(f_np, reps))
        t_c = min(t_c, best(f_c, reps))
    return t_np, t_c


def main():
    ffi, lib = build()
    fp = lambda a: ffi.cast("float *", ffi.from_buffer(a))  # noqa: E731
    rng = np.random.default_rng(0)
    print(f"threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')}")
    print(f"{'size':>6} {'numpy GF/s':>11} {'opc GF/s':>9} {'ratio':>6}")
    for n in (256, 512, 1024):
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        o = np.empty((n, n), np.float32)
        reps = max(5, int(2e9 / (2 * n ** 3)))
        flop = 2.0 * n ** 3
        pa, pb, po = fp(a), fp(b), fp(o)
        t_np, t_c = best_pair(lambda: np.matmul(a, b, out=o),
                              lambda: lib.opc_gemm_f32(1, n, n, n, pa, 0, 0, pb, 0, 0, ffi.NULL,
                                                       0, po, ffi.NULL), reps)
        err = np.abs(o - a @ b).max()
        print(f"{n:>6} {flop / t_np / 1e9:>11.1f} {flop / t_c / 1e9:>9.1f} "
              f"{t_np / t_c:>6.2f}   (max err {err:.1e})")

    n = 512
    x = rng.standard_normal((n, n)).astype(np.float32)
    w = rng.standard_normal((n, n)).astype(np.float32) / np.sqrt(n)
    bias = rng.standard_normal(n).astype(np.float32)
    o = np.empty((n, n), np.float32)
    r = np.empty((n, n), np.float32)
    c = np.sqrt(2 / np.pi).astype(np.float32)

    def np_gelu():
        z = x @ w + bias
        return z, 0.5 * z * (1 + np.tanh(c * (z + np.float32(0.044715) * z * z * z)))

    np_fn = {"none": lambda: x @ w + bias,
             "relu": lambda: (lambda z: (z, np.maximum(z, 0)))(x @ w + bias),
             "gelu": np_gelu}
    print(f"\nfused epilogue at {n}: out = act(x@w + b) (+ reserve for relu/gelu), times in ms")
    print(f"{'act':>6} {'numpy':>8} {'opc':>8} {'speedup':>8}")
    for act, name in ((0, "none"), (1, "relu"), (2, "gelu")):
        res = ffi.NULL if act == 0 else fp(r)
        args = (1, n, n, n, fp(x), 0, 0, fp(w), 0, 0, fp(bias), act, fp(o), res)
        t_np, t_c = best_pair(np_fn[name], lambda: lib.opc_gemm_f32(*args), 10)
        print(f"{name:>6} {t_np * 1e3:>8.3f} {t_c * 1e3:>8.3f} {t_np / t_c:>8.2f}")


if __name__ == "__main__":
    main()
