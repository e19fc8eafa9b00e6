"""opc vs NumPy on the CPU, measured side by side in one run.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_cpu.py

(Those two variables, set on some machines for old OpenBLAS builds, slow a
current NumPy down; unset them for a fair comparison.) Each figure is the best
of several repeats; ratio = NumPy time / opc time, so > 1 means opc is faster.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import opc  # noqa: E402


def best(fn, repeat: int = 7, min_time: float = 0.2) -> float:
    """Best time of `repeat` rounds; each round runs fn enough times for min_time."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-6)
    inner = max(1, int(min_time / once / repeat))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return min(times)


def gemm_mlir(n: int, act: str | None) -> str:
    t = f"tensor<{n}x{n}xf32>"
    if act is None:
        return (f"func.func @f(%x: {t}, %y: {t}) -> {t} {{\n  %r = opc.matmul %x, %y : ({t}, {t}) -> {t}\n"
                f"  func.return %r : {t}\n}}\n")
    res, lhs, ret = ((f"({t}, {t})", "%r, %z", f"%r, %z : {t}, {t}") if act != "none" else (t, "%r", f"%r : {t}"))
    return (f"func.func @f(%x: {t}, %y: {t}, %b: tensor<{n}xf32>) -> {res} {{\n"
            f'  {lhs} = opc.fused_gemm_epilogue %x, %y, %b {{activation = "{act}"}} : '
            f"({t}, {t}, tensor<{n}xf32>) -> {res}\n"
            f"  func.return {ret}\n}}\n")


def numpy_gelu(z):
    return 0.5 * z * (1 + np.tanh(np.float32(np.sqrt(2 / np.pi)) * (z + np.float32(0.044715) * z * z * z)))


NUMPY_EPILOGUE = {"none": lambda x, y, b: x @ y + b,
                  "relu": lambda x, y, b: np.maximum(x @ y + b, 0),
                  "gelu": lambda x, y, b: numpy_gelu(x @ y + b)}

CHAIN_N = 1 << 22
CHAIN = f"""func.func @chain(%x: tensor<{CHAIN_N}xf32>, %y: tensor<{CHAIN_N}xf32>) -> tensor<{CHAIN_N}xf32> {{
  %a = opc.mul %x, %y : (tensor<{CHAIN_N}xf32>, tensor<{CHAIN_N}xf32>) -> tensor<{CHAIN_N}xf32>
  %b = opc.add %a, %x : (tensor<{CHAIN_N}xf32>, tensor<{CHAIN_N}xf32>) -> tensor<{CHAIN_N}xf32>
  %c = opc.relu %b : (tensor<{CHAIN_N}xf32>) -> tensor<{CHAIN_N}xf32>
  %d = opc.sub %c, %y : (tensor<{CHAIN_N}xf32>, tensor<{CHAIN_N}xf32>) -> tensor<{CHAIN_N}xf32>
  %e = opc.mul %d, %d : (tensor<{CHAIN_N}xf32>, tensor<{CHAIN_N}xf32>) -> tensor<{CHAIN_N}xf32>
  %f = opc.tanh %e : (tensor<{CHAIN_N}xf32>) -> tensor<{CHAIN_N}xf32>
  func.return %f : tensor<{CHAIN_N}xf32>
}}
"""


def numpy_chain(x, y):
    return np.tanh(np.square(np.maximum(x * y + x, 0) - y))


def row(label: str, t_np: float, t_opc: float, flops: float | None = None) -> None:
    gf = f"{flops / t_np / 1e9:8.1f} {flops / t_opc / 1e9:8.1f}" if flops else f"{'':8} {'':8}"
    print(f"{label:<28} {t_np * 1e3:9.3f} {t_opc * 1e3:9.3f} {t_np / t_opc:7.2f}  {gf}")


def timed_subprocess_compile(path: Path, cache: str) -> float:
    code = ("import time, opc; t = time.perf_counter(); "
            f"opc.compile({str(path)!r}); print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "OPC_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)})
    return float(out.stdout.strip().splitlines()[-1])


def value_and_grad_row(rng: np.random.Generator, n: int = 512) -> None:
    """A training step of the fused gelu layer (fused_gemm_epilogue gelu, n^3, f32): f then f_grad (the grad
    replays the forward: 4 GEMMs) against one f_value_and_grad (forward once, reserve_space reused: 3 GEMMs)."""
    t, b = f"tensor<{n}x{n}xf32>", f"tensor<{n}xf32>"
    m = opc.compile(f"func.func @f(%x: {t}, %w: {t}, %b: {b}) -> {t} {{\n"
                    f'  %h, %z = opc.fused_gemm_epilogue %x, %w, %b {{activation = "gelu"}} : '
                    f"({t}, {t}, {b}) -> ({t}, {t})\n  func.return %h : {t}\n}}\n", grad=True)
    x, w, bias, dh = (rng.standard_normal(s, np.float32) for s in ((n, n), (n, n), (n,), (n, n)))
    both = m.f_value_and_grad(x, w, bias, dh)
    for got, want in zip(both, (m.f(x, w, bias), *m.f_grad(x, w, bias, dh))):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    # Rounds alternate between the two, so that a shared machine's load hits both alike.
    rounds = [(best(lambda: (m.f(x, w, bias), m.f_grad(x, w, bias, dh)), repeat=3),
               best(lambda: m.f_value_and_grad(x, w, bias, dh), repeat=3)) for _ in range(5)]
    two_calls, one_call = min(r[0] for r in rounds), min(r[1] for r in rounds)
    print(f"{'value_and_grad gelu ' + str(n):<28} {two_calls * 1e3:9.3f} {one_call * 1e3:9.3f} "
          f"{two_calls / one_call:7.2f}  (ms: f + f_grad, f_value_and_grad; ratio > 1: one call is faster)")


def main() -> None:
    try:
        from threadpoolctl import threadpool_info

        blas = [f"{i['internal_api']} {i.get('architecture', '')} threads={i['num_threads']}"
                for i in threadpool_info()]
    except ImportError:
        blas = ["(install threadpoolctl to see NumPy's BLAS)"]
    print(f"numpy {np.__version__}; BLAS: {'; '.join(blas)}; cores: {os.cpu_count()}")
    print(f"{'case':<28} {'numpy ms':>9} {'opc ms':>9} {'ratio':>7}  {'np GF/s':>8} {'opc GF/s':>8}")
    rng = np.random.default_rng(0)
    for n in (256, 512, 1024):
        m = opc.compile(gemm_mlir(n, None))
        x, y = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
        np.testing.assert_allclose(m.f(x, y), x @ y, rtol=1e-3, atol=1e-2)
        row(f"matmul f32 {n}", best(lambda: x @ y), best(lambda: m.f(x, y)), 2.0 * n**3)
    n = 512
    x, y, b = (rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32),
               rng.standard_normal(n, np.float32))
    for act in ("none", "relu", "gelu"):
        m = opc.compile(gemm_mlir(n, act))
        got = m.f(x, y, b)
        np.testing.assert_allclose(got[0] if isinstance(got, tuple) else got, NUMPY_EPILOGUE[act](x, y, b),
                                   rtol=1e-3, atol=1e-2)
        ref = NUMPY_EPILOGUE[act]
        row(f"fused_gemm_epilogue {act} {n}", best(lambda: ref(x, y, b)), best(lambda: m.f(x, y, b)), 2.0 * n**3)
    m = opc.compile(CHAIN)
    cx, cy = rng.standard_normal(CHAIN_N, np.float32), rng.standard_normal(CHAIN_N, np.float32)
    np.testing.assert_allclose(m.chain(cx, cy), numpy_chain(cx, cy), rtol=1e-5, atol=1e-6)
    row("elementwise chain 6 ops 4M", best(lambda: numpy_chain(cx, cy)), best(lambda: m.chain(cx, cy)))

    t = "tensor<4096x1024xf32>"
    m = opc.compile(f"func.func @colsum(%x: {t}) -> tensor<1024xf32> {{\n"
                    f"  %r = opc.reduce_sum %x {{axes = array<i64: 0>}} : ({t}) -> tensor<1024xf32>\n"
                    f"  func.return %r : tensor<1024xf32>\n}}\n")
    rx = rng.standard_normal((4096, 1024), np.float32)
    np.testing.assert_allclose(m.colsum(rx), rx.sum(0), rtol=1e-3, atol=1e-3)
    row("reduce_sum axis 0 4096x1024", best(lambda: rx.sum(0)), best(lambda: m.colsum(rx)))

    value_and_grad_row(rng)

    mlp = ROOT / "examples" / "mlp.mlir"
    with tempfile.TemporaryDirectory() as fresh:
        cold = timed_subprocess_compile(mlp, fresh)  # includes the one-time GEMM runtime object
        warm = timed_subprocess_compile(mlp, fresh)
        edited = Path(fresh) / "mlp_edited.mlir"
        edited.write_text(mlp.read_text().replace("@mlp", "@mlp2"))
        model_only = timed_subprocess_compile(edited, fresh)  # runtime object already cached
    print(f"examples/mlp.mlir compile: cold {cold:.2f} s (fresh cache, incl. the one-time GEMM runtime build), "
          f"cold model-only {model_only:.2f} s, warm (cached) load {warm * 1e3:.0f} ms")

    import bench_transformer  # the zoo's transformer block vs onnxruntime / torch / JAX (bench/bench_transformer.py)

    bench_transformer.run(timer=best)


if __name__ == "__main__":
    main()
