"""opc-attention's effect: the zoo's transformer block with the pass (opc.attention's tiled kernel) and
without (the written-out matmul, mask add, softmax, matmul), and the attention alone, rounds interleaved.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_attention.py [--threads N] [--small]
        [--clock thread]

Both builds come from one imported model: "fused" is opc.compile's default, "written out" is
decompose="opc.attention" (the pass is skipped where opc.attention is to be decomposed). Their
numbers are checked against each other first. Each round times every case of a row in turn
(benchlib.best_of), so a shared machine's load hits both alike; ratio = written out / fused
(> 1: the kernel is faster). --clock thread times the calling thread's CPU time (at --threads 1 only),
which the other jobs of a shared machine do not inflate.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib  # noqa: E402
from bench_transformer import SIZES, SMALL  # noqa: E402
from benchlib import apply_threads, best_of, check  # noqa: E402
from zoo import transformer_block  # noqa: E402

import opc  # noqa: E402

WRITTEN_OUT = "opc.attention"  # decompose= that keeps the written-out ops


def attention_alone(s: transformer_block.Sizes) -> str:
    """softmax(q k^T / sqrt(d)) v on [batch, heads, seq, d], written out (no mask: a mask argument
    would ask for its gradient too; the block's rows have the causal one)."""
    d = s.width // s.heads
    t = f"{s.batch}x{s.heads}x{s.seq}"
    qt, st = f"tensor<{t}x{d}xf32>", f"tensor<{t}x{s.seq}xf32>"
    return (f"func.func @attention(%q: {qt}, %k: {qt}, %v: {qt}) -> {qt} {{\n"
            f"  %s = opc.matmul %q, %k {{trans_y = true}} : ({qt}, {qt}) -> {st}\n"
            f"  %c = opc.full {{value = {1 / math.sqrt(d):.17e} : f64}} : () -> {st}\n"
            f"  %t = opc.mul %s, %c : ({st}, {st}) -> {st}\n"
            f"  %p = opc.softmax %t {{axis = -1}} : ({st}) -> {st}\n"
            f"  %o = opc.matmul %p, %v : ({st}, {qt}) -> {qt}\n"
            f"  func.return %o : {qt}\n}}\n")


def ratio_row(label: str, fused, written, rounds: int) -> None:
    t = best_of({"fused": fused, "written": written}, repeat=rounds, min_time=0.1)
    print(f"{label:<40} {t['written'] * 1e3:10.2f} {t['fused'] * 1e3:9.2f} {t['written'] / t['fused']:7.2f}")


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--clock", choices=["wall", "thread"], default="wall")
    args = ap.parse_args()
    n = apply_threads(args.threads)
    if args.clock == "thread":
        if n != 1:
            raise SystemExit("error: --clock thread needs --threads 1 (other threads' work would go uncounted)")
        benchlib.CLOCK = time.thread_time
    opc.set_num_threads(n)
    s = SMALL if args.small else SIZES
    model = transformer_block.build(s, np.float32, opset=17, seed=0)
    built = {}
    for name, decompose in (("fused", None), ("written", WRITTEN_OUT)):
        module, params = opc.import_onnx(model)
        t0 = time.perf_counter()
        built[name] = opc.compile(module, grad=True, decompose=decompose)
        print(f"compile ({name}): {time.perf_counter() - t0:.1f} s; opc.attention kernel: "
              f"{'opc_nn_attention_f32(' in built[name].c_source}")
    w = list(params.values())
    rng = np.random.default_rng(1)
    x = rng.standard_normal((s.batch, s.seq, s.width)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    f, u = built["fused"], built["written"]
    check("fused block", [f.main_graph(x, *w)], [u.main_graph(x, *w)], against="written out")
    check("fused block grads", list(f.main_graph_value_and_grad(x, *w, dy)),
          list(u.main_graph_value_and_grad(x, *w, dy)), against="written out")
    d = s.width // s.heads
    qkv = [rng.standard_normal((s.batch, s.heads, s.seq, d)).astype(np.float32) for _ in range(3)]
    alone = {name: opc.compile(attention_alone(s), grad=True, decompose=dec)
             for name, dec in (("fused", None), ("written", WRITTEN_OUT))}
    do = rng.standard_normal(qkv[0].shape).astype(np.float32)
    check("attention alone", [alone["fused"].attention(*qkv)], [alone["written"].attention(*qkv)],
          against="written out")
    print(f"load average {os.getloadavg()[0]:.1f}; threads {n}; batch {s.batch}, seq {s.seq}, width {s.width}, "
          f"heads {s.heads}, mlp {s.mlp}, f32; "
          f"best of {args.rounds} interleaved rounds, "
          f"{'CPU time of the calling thread' if args.clock == 'thread' else 'wall'}")
    print(f"{'case':<40} {'written ms':>10} {'fused ms':>9} {'ratio':>7}")
    ratio_row("block forward", lambda: f.main_graph(x, *w), lambda: u.main_graph(x, *w), args.rounds)
    ratio_row("block forward + backward", lambda: f.main_graph_value_and_grad(x, *w, dy),
              lambda: u.main_graph_value_and_grad(x, *w, dy), args.rounds)
    a, b = alone["fused"], alone["written"]
    ratio_row("attention alone (no mask), forward", lambda: a.attention(*qkv), lambda: b.attention(*qkv),
              args.rounds)
    ratio_row("attention alone (no mask), forward + backward", lambda: a.attention_value_and_grad(*qkv, do),
              lambda: b.attention_value_and_grad(*qkv, do), args.rounds)
    print(f"load average {os.getloadavg()[0]:.1f} (2 cores shared with other sessions: ratios, not times)")


if __name__ == "__main__":
    main()
