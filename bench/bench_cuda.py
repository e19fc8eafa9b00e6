"""GEMM and fused GEMM epilogue on the GPU: opc's CUDA target against cuBLAS
(through torch, where installed) or else against opc's CPU target; then softmax
and layer norm composed from primitives (one row kernel each) against torch's
softmax / layer_norm, their bandwidth counting one read and one write of the rows.

    python bench/bench_cuda.py [--sizes 512,1024,2048] [--rows 2048x1024,8192x4096]
                               [--dtype f32|f16|bf16] [--repeat 20]

With torch, opc runs on device buffers (the opc_fn_NAME entry, which ends in a
cudaDeviceSynchronize) and torch's times include a torch.cuda.synchronize().
Without torch, opc's times go through the NumPy wrapper and so include the
host<->device copies. Needs a CUDA device; without one it says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import opc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import best  # noqa: E402 - one timer for every bench

from opc.lowering.abi import ENTRY_PREFIX
from opc.lowering.cuda_build import driver_device_count

MLIR_T = {"f32": "f32", "f16": "f16", "bf16": "bf16"}


def np_dtype(dt: str):
    if dt == "bf16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"f32": np.float32, "f16": np.float16}[dt])


def source(n: int, dt: str) -> str:
    t2, t1 = f"tensor<{n}x{n}x{dt}>", f"tensor<{n}x{dt}>"
    return (f"func.func @mm(%x: {t2}, %w: {t2}) -> {t2} {{\n"
            f"  %r = opc.matmul %x, %w : ({t2}, {t2}) -> {t2}\n  func.return %r : {t2}\n}}\n"
            f"func.func @fused(%x: {t2}, %w: {t2}, %b: {t1}) -> ({t2}, {t2}) {{\n"
            f"  %h, %z = opc.fused_gemm_epilogue %x, %w, %b {{activation = \"gelu\"}} : "
            f"({t2}, {t2}, {t1}) -> ({t2}, {t2})\n"
            f"  func.return %h, %z : {t2}, {t2}\n}}\n")


def rows_source(r: int, n: int, dt: str) -> str:
    """Softmax and layer norm over the last axis, composed as a user writes them."""
    full, row, vec = f"tensor<{r}x{n}x{dt}>", f"tensor<{r}x1x{dt}>", f"tensor<{n}x{dt}>"
    red = "{axes = array<i64: 1>, keepdim = true}"
    return (f"func.func @softmax(%x: {full}) -> {full} {{\n"
            f"  %m = opc.reduce_max %x {red} : ({full}) -> {row}\n"
            f"  %s = opc.sub %x, %m : ({full}, {row}) -> {full}\n  %e = opc.exp %s : ({full}) -> {full}\n"
            f"  %z = opc.reduce_sum %e {red} : ({full}) -> {row}\n"
            f"  %y = opc.div %e, %z : ({full}, {row}) -> {full}\n  func.return %y : {full}\n}}\n"
            f"func.func @layer_norm(%x: {full}, %g: {vec}, %b: {vec}) -> {full} {{\n"
            f"  %mu = opc.reduce_mean %x {red} : ({full}) -> {row}\n"
            f"  %d = opc.sub %x, %mu : ({full}, {row}) -> {full}\n  %sq = opc.mul %d, %d : ({full}, {full}) -> {full}\n"
            f"  %var = opc.reduce_mean %sq {red} : ({full}) -> {row}\n"
            f"  %eps = opc.full {{value = 1.0e-5 : f64}} : () -> {row}\n"
            f"  %ve = opc.add %var, %eps : ({row}, {row}) -> {row}\n  %rs = opc.rsqrt %ve : ({row}) -> {row}\n"
            f"  %nr = opc.mul %d, %rs : ({full}, {row}) -> {full}\n"
            f"  %ng = opc.mul %nr, %g : ({full}, {vec}) -> {full}\n"
            f"  %y = opc.add %ng, %b : ({full}, {vec}) -> {full}\n  func.return %y : {full}\n}}\n")


def on_device(m, dt: str, arrays, outputs: int):  # noqa: ANN001, ANN201
    """The arrays as torch tensors on the GPU, then `outputs` empty ones shaped like the first,
    and a pointer to each that the module's device entry points take."""
    import torch

    tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dt]
    tensors = [torch.from_numpy(a.astype(np.float32)).to("cuda", tdt) for a in arrays]
    tensors += [torch.empty_like(tensors[0]) for _ in range(outputs)]
    ct = "float" if dt == "f32" else "uint16_t"
    return tensors, [m.ffi.cast(f"{ct} *", t.data_ptr()) for t in tensors]


def synced(fn):  # noqa: ANN001, ANN201
    """fn, then wait for the GPU: torch launches asynchronously, opc's entry points return when done."""
    import torch

    def run() -> None:
        fn()
        torch.cuda.synchronize()
    return run


def bench_rows(shapes: list[tuple[int, int]], dt: str, repeat: int, have_torch: bool) -> None:
    print(f"\n{'op':10} {'rows x n':>11} {'opc cuda ms':>12} {'opc GB/s':>9} {'ref ms':>10}  reference")
    rng = np.random.default_rng(1)
    ndt = np_dtype(dt)
    for r, n in shapes:
        m = opc.compile(rows_source(r, n, dt), target="cuda")
        x = (rng.standard_normal((r, n)) * 3).astype(np.float32).astype(ndt)
        g, b = (rng.standard_normal(n).astype(np.float32).astype(ndt) for _ in range(2))
        if have_torch:
            import torch

            (tx, tg, tb, out), (px, pg, pb, po) = on_device(m, dt, (x, g, b), outputs=1)
            sm_dev, ln_dev = getattr(m.lib, f"{ENTRY_PREFIX}softmax"), getattr(m.lib, f"{ENTRY_PREFIX}layer_norm")
            cases = [("softmax", lambda: sm_dev(px, po), synced(lambda: torch.softmax(tx, -1)), "torch"),
                     ("layer_norm", lambda: ln_dev(px, pg, pb, po),
                      synced(lambda: torch.nn.functional.layer_norm(tx, (n,), tg, tb, 1e-5)), "torch")]
        else:
            cpu = opc.compile(rows_source(r, n, dt), target="cpu")
            cases = [("softmax", lambda: m.softmax(x), lambda: cpu.softmax(x), "opc cpu"),
                     ("layer_norm", lambda: m.layer_norm(x, g, b), lambda: cpu.layer_norm(x, g, b), "opc cpu")]
        moved = 2.0 * r * n * ndt.itemsize
        for name, mine, ref, label in cases:
            t_mine, t_ref = best(mine, repeat, min_time=0), best(ref, max(3, repeat // 4), min_time=0)
            print(f"{name:10} {f'{r}x{n}':>11} {t_mine * 1e3:12.3f} {moved / t_mine / 1e9:9.1f} {t_ref * 1e3:10.3f}"
                  f"  {label}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="512,1024,2048")
    ap.add_argument("--rows", default="2048x1024,8192x4096", help="softmax / layer norm shapes, ROWSxN,...")
    ap.add_argument("--dtype", default="f32", choices=sorted(MLIR_T))
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    count, why = driver_device_count()
    if count == 0:
        print(f"bench_cuda: no CUDA device ({why}); nothing to measure")
        return 0
    try:
        import torch

        have_torch = torch.cuda.is_available()
    except ImportError:
        have_torch = False
    print(f"{'op':6} {'n':>5} {'opc cuda ms':>12} {'opc GFLOP/s':>12} {'ref ms':>10}  reference")
    rng = np.random.default_rng(0)
    for n in (int(s) for s in args.sizes.split(",")):
        m = opc.compile(source(n, args.dtype), target="cuda")
        dt = np_dtype(args.dtype)
        x, w = (rng.standard_normal((n, n)).astype(np.float32).astype(dt) for _ in range(2))
        b = rng.standard_normal(n).astype(np.float32).astype(dt)
        flops = 2.0 * n**3
        if have_torch:
            (tx, tw, tb, out, res), p = on_device(m, args.dtype, (x, w, b), outputs=2)
            mm_dev, fused_dev = getattr(m.lib, f"{ENTRY_PREFIX}mm"), getattr(m.lib, f"{ENTRY_PREFIX}fused")
            cases = [
                ("gemm", lambda: mm_dev(p[0], p[1], p[3]), synced(lambda: torch.matmul(tx, tw, out=out)), "cuBLAS"),
                ("fused", lambda: fused_dev(p[0], p[1], p[2], p[3], p[4]),
                 synced(lambda: torch.nn.functional.gelu(torch.addmm(tb, tx, tw), approximate="tanh")), "cuBLAS+gelu"),
            ]
        else:
            cpu = opc.compile(source(n, args.dtype), target="cpu")
            cases = [
                ("gemm", lambda: m.mm(x, w), lambda: cpu.mm(x, w), "opc cpu"),
                ("fused", lambda: m.fused(x, w, b), lambda: cpu.fused(x, w, b), "opc cpu"),
            ]
        for name, mine, ref, label in cases:
            t_mine, t_ref = best(mine, args.repeat, min_time=0), best(ref, max(3, args.repeat // 4), min_time=0)
            print(f"{name:6} {n:5d} {t_mine * 1e3:12.3f} {flops / t_mine / 1e9:12.1f} {t_ref * 1e3:10.3f}  {label}")
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.rows.split(",") if s]
    bench_rows(shapes, args.dtype, args.repeat, have_torch)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
