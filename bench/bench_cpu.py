"""opc on the CPU against NumPy, torch (eager and torch.compile) and JAX (jit), side by side in one run.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_cpu.py [--threads N] [--only A,B] [--skip C]
                                                                          [--repeat N] [--list]

(Those two variables, set on some machines for old OpenBLAS builds, slow a current
NumPy down; unset them for a fair comparison.) torch and JAX are optional (`pip install
-e .[bench]`); without them only NumPy is compared. Every case computes its numbers
with NumPy first and checks every contender against them before timing anything; a
contender that disagrees stops the run. Each figure is the best of --repeat rounds,
the rounds interleaved over the contenders on the same arrays. The ratio columns are
this row's time / that opc variant's time: > 1 means the opc variant is faster.

The cases are a table (add_case below); a benchmark adds a row by writing a setup
function that returns a Contest.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib  # noqa: E402
import peak  # noqa: E402
from onnx_peers import onnx_jax, onnx_torch  # noqa: E402


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for opc, NumPy, torch and JAX (default: all cores)")
    ap.add_argument("--only", default="", help="comma-separated case names (or name prefixes) to run")
    ap.add_argument("--skip", default="", help="comma-separated case names (or name prefixes) to leave out")
    ap.add_argument("--repeat", type=int, default=15, help="timed rounds per case; the best is kept (default 15)")
    ap.add_argument("--clock", choices=["wall", "thread"], default="wall",
                    help="wall time, or the calling thread's CPU time (with --threads 1 only: what a machine "
                         "shared with other jobs does not inflate; JAX, which computes in threads of its own, "
                         "is left out)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    return ap


if __name__ == "__main__":
    ARGS = parser().parse_args()
    benchlib.apply_threads(ARGS.threads)  # before numpy, torch and JAX start their thread pools

import numpy as np  # noqa: E402

import opc  # noqa: E402

# ---------------------------------------------------------------------------
# The table of cases and its runner
# ---------------------------------------------------------------------------


@dataclass
class Contender:
    """One way of computing a case. fn runs it once and returns its outputs (NumPy, torch or JAX arrays)."""

    label: str
    fn: Callable[[], object]
    want: list | None = None  # its own expected outputs (default: the contest's)
    work: float | None = None  # its own work (default: the contest's), for the rate column


@dataclass
class Contest:
    """What a case's setup returns: NumPy's numbers, opc's variants and the others."""

    want: list  # NumPy's outputs (float64 where it matters): every contender is checked against them
    ours: list[Contender]  # opc's variants; each gets a ratio column
    theirs: list[Contender]
    tol: float = 2e-3  # on max |got - want| / max(1, max |want|)
    rate: str = ""  # "GFLOP/s" or "GB/s": a rate column computed from work
    work: float = 0.0  # flops or bytes per call
    note: Callable[[dict[str, float]], str] | None = None  # one more line, from the times


@dataclass
class Context:
    rng: np.random.Generator
    torch: object | None
    jax: object | None
    repeat: int


@dataclass
class Case:
    name: str  # for --only / --skip
    title: str
    setup: Callable[[Context], Contest] | None = None  # a side-by-side contest ...
    run: Callable[[Context], None] | None = None  # ... or a case that prints its own rows


CASES: list[Case] = []


class Skip(Exception):
    """A case's setup cannot run here; the message says why (printed in its place)."""


def add_case(name: str, title: str, setup: Callable[[Context], Contest] | None = None,
             run: Callable[[Context], None] | None = None) -> None:
    assert (setup is None) != (run is None), "a case has a setup or a run"
    assert all(c.name != name for c in CASES), f"case {name} added twice"
    CASES.append(Case(name, title, setup, run))


def to_numpy(out) -> list[np.ndarray]:
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    # torch's bf16 has no NumPy type: widened to f32 for the check (the timed call returns it as is)
    return [np.asarray(o.detach().float().numpy() if hasattr(o, "detach") and str(o.dtype) == "torch.bfloat16"
                       else o.detach().numpy() if hasattr(o, "detach") else o) for o in outs]


def run_contest(case: Case, contest: Contest, repeat: int) -> None:
    ours = {c.label for c in contest.ours}
    alive: list[Contender] = []
    for c in contest.ours + contest.theirs:
        try:
            got = c.fn()
        except Exception as e:  # a peer that cannot run here is a note; opc failing is a failure
            if c.label in ours:
                raise
            print(f"  ({c.label} did not run: {type(e).__name__}: {str(e).strip().splitlines()[0][:150]})")
            continue
        benchlib.check(f"{case.name}: {c.label}", to_numpy(got), c.want if c.want is not None else contest.want,
                     contest.tol)
        alive.append(c)
    times = benchlib.best_of({c.label: c.fn for c in alive}, repeat)
    width = max(20, *(len(c.label) for c in alive))
    ratio_cols = [max(10, len(o.label) + 2) for o in contest.ours]
    print(case.title)
    limit = machine_limit(contest.rate)
    print(f"  {'':<{width}} {'ms':>9}" + (f" {contest.rate:>9}" if contest.rate else "")
          + (f" {'of peak' if contest.rate == 'GFLOP/s' else 'of copy':>8}" if limit else "")
          + "".join(f" {'/' + o.label:>{w}}" for o, w in zip(contest.ours, ratio_cols)))
    for c in alive:
        t = times[c.label]
        line = f"  {c.label:<{width}} {t * 1e3:9.3f}"
        if contest.rate:
            work = c.work if c.work is not None else contest.work
            line += f" {work / t / 1e9:9.1f}"
            line += f" {work / t / 1e9 / limit:8.0%}" if limit else ""
        line += "".join(f" {t / times[o.label]:{w}.2f}" for o, w in zip(contest.ours, ratio_cols))
        print(line)
    if contest.note:
        print("  " + contest.note(times))


def machine_limit(rate: str) -> float | None:
    """What a rate column is a fraction of: the measured FMA peak of the threads in use (GFLOP/s) or
    the measured copy bandwidth (GB/s), bench/peak.py."""
    if rate == "GFLOP/s":
        return peak.measure().gflops(benchlib.threads())
    return peak.measure().copy_gbps if rate == "GB/s" else None


def run_cases(ctx: Context, only: list[str], skip: list[str]) -> None:
    def chosen(name: str) -> bool:
        return (not only or any(name.startswith(o) for o in only)) and not any(name.startswith(s) for s in skip)

    for case in CASES:
        if not chosen(case.name):
            continue
        print()
        if case.run is not None:
            case.run(ctx)
            continue
        try:
            contest = case.setup(ctx)
        except Skip as why:
            print(f"{case.title}\n  (skipped: {why})")
            continue
        run_contest(case, contest, ctx.repeat)
        sys.stdout.flush()


# ---------------------------------------------------------------------------
# Peers: the same function in torch eager, torch.compile and JAX jit
# ---------------------------------------------------------------------------


def peers(ctx: Context, args: list[np.ndarray], torch_fn=None, jax_fn=None, compiled: bool = True) -> list[Contender]:
    """torch eager (and torch.compile) and JAX jit of the same function, on the same arrays."""
    out = []
    if ctx.torch is not None and torch_fn is not None:
        torch = ctx.torch
        targs = [torch.from_numpy(a) for a in args]  # shares NumPy's memory
        out.append(Contender("torch eager", lambda: torch_fn(*targs)))
        if compiled:
            tc = torch.compile(torch_fn)
            out.append(Contender("torch.compile", lambda: tc(*targs)))
    if ctx.jax is not None and jax_fn is not None:
        jax = ctx.jax
        jargs = [jax.numpy.asarray(a) for a in args]
        jitted = jax.jit(jax_fn)
        out.append(Contender("JAX jit", lambda: jax.block_until_ready(jitted(*jargs))))
    return out


def numpy_row(fn, args) -> Contender:
    return Contender("NumPy", lambda: fn(*args))


# ---------------------------------------------------------------------------
# Softmax and layer norm over rows: composed from primitives, and the single op
# ---------------------------------------------------------------------------

ROWS, COLS = 2048, 1024
T2 = f"tensor<{ROWS}x{COLS}xf32>"
C1 = f"tensor<{ROWS}x1xf32>"
V1 = f"tensor<{COLS}xf32>"


def keep(op: str, x: str) -> str:
    return f"opc.{op} {x} {{axes = array<i64: 1>, keepdim = true}} : ({T2}) -> {C1}"


SOFTMAX = f"""func.func @composed(%x: {T2}) -> {T2} {{
  %m = {keep("reduce_max", "%x")}
  %s = opc.sub %x, %m : ({T2}, {C1}) -> {T2}
  %e = opc.exp %s : ({T2}) -> {T2}
  %z = {keep("reduce_sum", "%e")}
  %r = opc.div %e, %z : ({T2}, {C1}) -> {T2}
  func.return %r : {T2}
}}
func.func @single(%x: {T2}) -> {T2} {{
  %r = opc.softmax %x {{axis = -1}} : ({T2}) -> {T2}
  func.return %r : {T2}
}}
"""

LAYER_NORM = f"""func.func @composed(%x: {T2}, %g: {V1}, %b: {V1}) -> {T2} {{
  %mu = {keep("reduce_mean", "%x")}
  %d = opc.sub %x, %mu : ({T2}, {C1}) -> {T2}
  %sq = opc.mul %d, %d : ({T2}, {T2}) -> {T2}
  %var = {keep("reduce_mean", "%sq")}
  %eps = opc.full {{value = 1.0e-05 : f64}} : () -> tensor<1xf32>
  %ve = opc.add %var, %eps : ({C1}, tensor<1xf32>) -> {C1}
  %r = opc.rsqrt %ve : ({C1}) -> {C1}
  %n = opc.mul %d, %r : ({T2}, {C1}) -> {T2}
  %s = opc.mul %n, %g : ({T2}, {V1}) -> {T2}
  %y = opc.add %s, %b : ({T2}, {V1}) -> {T2}
  func.return %y : {T2}
}}
func.func @single(%x: {T2}, %g: {V1}, %b: {V1}) -> {T2} {{
  %y, %mean, %rstd = opc.layer_norm %x, %g, %b {{begin_norm_axis = 1, epsilon = 1.0e-05 : f64}}
      : ({T2}, {V1}, {V1}) -> ({T2}, tensor<{ROWS}xf32>, tensor<{ROWS}xf32>)
  func.return %y : {T2}
}}
"""


def numpy_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def numpy_layer_norm(x, g, b, eps=1e-5):
    d = x - x.mean(axis=1, keepdims=True)
    return d / np.sqrt((d * d).mean(axis=1, keepdims=True) + eps) * g + b


def softmax_case(ctx: Context) -> Contest:
    m = opc.compile(SOFTMAX)
    x = ctx.rng.standard_normal((ROWS, COLS), np.float32) * np.float32(3)
    torch_fn = (lambda t: ctx.torch.softmax(t, dim=1)) if ctx.torch else None
    jax_fn = (lambda a: ctx.jax.nn.softmax(a, axis=1)) if ctx.jax else None
    return Contest(want=[numpy_softmax(x.astype(np.float64))],
                   ours=[Contender("opc composed", lambda: m.composed(x)),
                         Contender("opc.softmax", lambda: m.single(x))],
                   theirs=[numpy_row(numpy_softmax, [x]), *peers(ctx, [x], torch_fn, jax_fn)],
                   tol=2e-5, rate="GB/s", work=2.0 * x.nbytes)


def layer_norm_case(ctx: Context) -> Contest:
    m = opc.compile(LAYER_NORM)
    x = ctx.rng.standard_normal((ROWS, COLS), np.float32) * np.float32(2) + np.float32(0.5)
    g, b = ctx.rng.standard_normal(COLS, np.float32), ctx.rng.standard_normal(COLS, np.float32)

    def torch_fn(t, tg, tb):
        return ctx.torch.nn.functional.layer_norm(t, (COLS,), tg, tb, 1e-5)

    def jax_fn(a, ag, ab):
        d = a - a.mean(axis=1, keepdims=True)
        return d * ctx.jax.lax.rsqrt((d * d).mean(axis=1, keepdims=True) + 1e-5) * ag + ab

    return Contest(want=[numpy_layer_norm(*(a.astype(np.float64) for a in (x, g, b)))],
                   ours=[Contender("opc composed", lambda: m.composed(x, g, b)),
                         Contender("opc.layer_norm", lambda: m.single(x, g, b))],
                   theirs=[numpy_row(numpy_layer_norm, [x, g, b]),
                           *peers(ctx, [x, g, b], torch_fn if ctx.torch else None, jax_fn if ctx.jax else None)],
                   tol=2e-5, rate="GB/s", work=2.0 * x.nbytes)


# ---------------------------------------------------------------------------
# Row and column sums
# ---------------------------------------------------------------------------


def sum_case(axis: int) -> Callable[[Context], Contest]:
    def setup(ctx: Context) -> Contest:
        r, c = 4096, 1024
        t, out = f"tensor<{r}x{c}xf32>", f"tensor<{(c, r)[axis]}xf32>"
        m = opc.compile(f"func.func @s(%x: {t}) -> {out} {{\n"
                        f"  %r = opc.reduce_sum %x {{axes = array<i64: {axis}>}} : ({t}) -> {out}\n"
                        f"  func.return %r : {out}\n}}\n")
        x = ctx.rng.standard_normal((r, c), np.float32)
        torch_fn = (lambda a: a.sum(axis)) if ctx.torch else None
        jax_fn = (lambda a: a.sum(axis)) if ctx.jax else None
        return Contest(want=[x.astype(np.float64).sum(axis)], ours=[Contender("opc reduce_sum", lambda: m.s(x))],
                       theirs=[numpy_row(lambda a: a.sum(axis), [x]), *peers(ctx, [x], torch_fn, jax_fn)],
                       tol=2e-5, rate="GB/s", work=float(x.nbytes))

    return setup


# ---------------------------------------------------------------------------
# The elementwise chain, and a plain copy of the same bytes as the bandwidth reference
# ---------------------------------------------------------------------------

CHAIN_N = 1 << 22
V = f"tensor<{CHAIN_N}xf32>"
CHAIN = f"""func.func @chain(%x: {V}, %y: {V}) -> {V} {{
  %a = opc.mul %x, %y : ({V}, {V}) -> {V}
  %b = opc.add %a, %x : ({V}, {V}) -> {V}
  %c = opc.relu %b : ({V}) -> {V}
  %d = opc.sub %c, %y : ({V}, {V}) -> {V}
  %e = opc.mul %d, %d : ({V}, {V}) -> {V}
  %f = opc.tanh %e : ({V}) -> {V}
  func.return %f : {V}
}}
"""


def numpy_chain(x, y):
    return np.tanh(np.square(np.maximum(x * y + x, 0) - y))


def chain_case(ctx: Context) -> Contest:
    m = opc.compile(CHAIN)
    x, y = ctx.rng.standard_normal(CHAIN_N, np.float32), ctx.rng.standard_normal(CHAIN_N, np.float32)
    dst = np.empty_like(x)

    def copy():
        np.copyto(dst, x)
        return dst

    def torch_fn(a, b):
        d = ctx.torch.relu(a * b + a) - b
        return ctx.torch.tanh(d * d)

    def jax_fn(a, b):
        d = ctx.jax.nn.relu(a * b + a) - b
        return ctx.jax.numpy.tanh(d * d)

    def note(times: dict[str, float]) -> str:
        copy_bw = 2 * x.nbytes / times["copy"]
        parts = [f"{label} {3 * x.nbytes / t / copy_bw:.2f}" for label, t in times.items() if label != "copy"]
        return "bandwidth as a fraction of copy's (bytes read + written per second): " + ", ".join(parts)

    return Contest(want=[numpy_chain(x.astype(np.float64), y.astype(np.float64))],
                   ours=[Contender("opc", lambda: m.chain(x, y))],
                   theirs=[numpy_row(numpy_chain, [x, y]),
                           *peers(ctx, [x, y], torch_fn if ctx.torch else None, jax_fn if ctx.jax else None),
                           Contender("copy", copy, want=[x], work=2.0 * x.nbytes)],
                   tol=2e-6, rate="GB/s", work=3.0 * x.nbytes, note=note)


# ---------------------------------------------------------------------------
# GEMMs: matmul, the fused epilogue, and forward + backward of the fused gelu layer
# ---------------------------------------------------------------------------


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


GELU_C = np.sqrt(2 / np.pi)


def numpy_gelu(z):
    c = z.dtype.type(GELU_C)
    return 0.5 * z * (1 + np.tanh(c * (z + z.dtype.type(0.044715) * z * z * z)))


def numpy_gelu_grad(z):
    u = np.tanh(GELU_C * (z + 0.044715 * z**3))
    return 0.5 * (1 + u) + 0.5 * z * (1 - u * u) * GELU_C * (1 + 3 * 0.044715 * z * z)


NUMPY_EPILOGUE = {"none": lambda x, y, b: x @ y + b,
                  "relu": lambda x, y, b: np.maximum(x @ y + b, 0),
                  "gelu": lambda x, y, b: numpy_gelu(x @ y + b)}


def matmul_case(n: int) -> Callable[[Context], Contest]:
    def setup(ctx: Context) -> Contest:
        m = opc.compile(gemm_mlir(n, None))
        x, y = ctx.rng.standard_normal((n, n), np.float32), ctx.rng.standard_normal((n, n), np.float32)
        theirs = [numpy_row(np.matmul, [x, y])]
        if n == 1024:
            theirs += peers(ctx, [x, y], (lambda a, b: a @ b) if ctx.torch else None,
                            (lambda a, b: a @ b) if ctx.jax else None, compiled=False)
        return Contest(want=[x.astype(np.float64) @ y], ours=[Contender("opc", lambda: m.f(x, y))], theirs=theirs,
                       tol=1e-4, rate="GFLOP/s", work=2.0 * n**3)

    return setup


def block_gemm_case(m: int, n: int, k: int, tx: bool, ty: bool) -> Callable[[Context], Contest]:
    """One GEMM of the transformer block's forward or backward: [m, k] @ [k, n], either operand
    stored transposed (the backward's dX = dY W^T and dW = X^T dY) as the block passes it."""

    def setup(ctx: Context) -> Contest:
        xs, ys = ((k, m) if tx else (m, k)), ((n, k) if ty else (k, n))
        t = {s: f"tensor<{s[0]}x{s[1]}xf32>" for s in (xs, ys, (m, n))}
        flags = ", ".join(f for f, on in (("trans_x = true", tx), ("trans_y = true", ty)) if on)
        m_ = opc.compile(f"func.func @f(%x: {t[xs]}, %y: {t[ys]}) -> {t[(m, n)]} {{\n"
                         f"  %r = opc.matmul %x, %y {{{flags}}} : ({t[xs]}, {t[ys]}) -> {t[(m, n)]}\n"
                         f"  func.return %r : {t[(m, n)]}\n}}\n")
        x, y = ctx.rng.standard_normal(xs, np.float32), ctx.rng.standard_normal(ys, np.float32)
        mm = lambda a, b: (a.T if tx else a) @ (b.T if ty else b)  # noqa: E731
        return Contest(want=[mm(x.astype(np.float64), y.astype(np.float64))],
                       ours=[Contender("opc", lambda: m_.f(x, y))],
                       theirs=[numpy_row(mm, [x, y]), *peers(ctx, [x, y], mm if ctx.torch else None,
                                                              mm if ctx.jax else None, compiled=False)],
                       tol=1e-4, rate="GFLOP/s", work=2.0 * m * n * k)

    return setup


def batched_matmul_case(xs: tuple[int, ...], ys: tuple[int, ...]) -> Callable[[Context], Contest]:
    """Attention's batched GEMMs ([B, H, S, D] @ [B, H, D, S] and back): one opc.matmul with batch dims."""

    def setup(ctx: Context) -> Contest:
        out = (*xs[:-1], ys[-1])
        t = {s: "tensor<" + "x".join(map(str, s)) + "xf32>" for s in (xs, ys, out)}
        m = opc.compile(f"func.func @f(%x: {t[xs]}, %y: {t[ys]}) -> {t[out]} {{\n"
                        f"  %r = opc.matmul %x, %y : ({t[xs]}, {t[ys]}) -> {t[out]}\n  func.return %r : {t[out]}\n}}\n")
        x, y = ctx.rng.standard_normal(xs, np.float32), ctx.rng.standard_normal(ys, np.float32)
        mm = lambda a, b: a @ b  # noqa: E731
        return Contest(want=[x.astype(np.float64) @ y], ours=[Contender("opc", lambda: m.f(x, y))],
                       theirs=[numpy_row(np.matmul, [x, y]),
                               *peers(ctx, [x, y], mm if ctx.torch else None, mm if ctx.jax else None, compiled=False)],
                       tol=1e-4, rate="GFLOP/s", work=2.0 * np.prod(out) * xs[-1])

    return setup


def bf16_gemm_case(m: int, n: int, k: int, ty: bool) -> Callable[[Context], Contest]:
    """A bf16 GEMM [m, k] @ [k, n] (y stored transposed if ty), f32 accumulation: opc's default path
    (runtime/opc_gemm_bf16dp.h's vdpbf16ps where the CPU has AVX512-BF16), its f32-widening path
    (what $OPC_GEMM_BF16DP=0 forces), opc's f32 GEMM on the same shape, and torch's bf16 matmul."""

    def setup(ctx: Context) -> Contest:
        import ml_dtypes

        ys = (n, k) if ty else (k, n)

        def module(dt: str, fn: str):  # noqa: ANN202
            t = {s: f"tensor<{s[0]}x{s[1]}x{dt}>" for s in ((m, k), ys, (m, n))}
            attrs = " {trans_y = true}" if ty else ""
            return getattr(opc.compile(f"func.func @{fn}(%x: {t[(m, k)]}, %y: {t[ys]}) -> {t[(m, n)]} {{\n"
                                       f"  %r = opc.matmul %x, %y{attrs} : ({t[(m, k)]}, {t[ys]}) -> {t[(m, n)]}\n"
                                       f"  func.return %r : {t[(m, n)]}\n}}\n"), fn)

        bf = np.dtype(ml_dtypes.bfloat16)
        x, y = ctx.rng.standard_normal((m, k), np.float32), ctx.rng.standard_normal(ys, np.float32)
        xb, yb = x.astype(bf), y.astype(bf)
        mm = lambda a, b: a @ (b.T if ty else b)  # noqa: E731
        dp, widen, f32 = module("bf16", "f"), module("bf16", "f_widen"), module("f32", "f")
        # the path is chosen once per module, at its first GEMM: the widening module's under the variable
        before = os.environ.get("OPC_GEMM_BF16DP")
        os.environ["OPC_GEMM_BF16DP"] = "0"
        widen(xb, yb)
        if before is None:
            del os.environ["OPC_GEMM_BF16DP"]
        else:
            os.environ["OPC_GEMM_BF16DP"] = before
        theirs = []
        if ctx.torch is not None:
            torch: Any = ctx.torch
            tx, ty_ = torch.from_numpy(x).to(torch.bfloat16), torch.from_numpy(y).to(torch.bfloat16)
            theirs.append(Contender("torch bf16", lambda: mm(tx, ty_)))
        return Contest(want=[mm(xb.astype(np.float64), yb.astype(np.float64))],
                       ours=[Contender("opc bf16", lambda: dp(xb, yb)),
                             Contender("opc bf16 widened", lambda: widen(xb, yb))],
                       theirs=[Contender("opc f32", lambda: f32(x, y), want=[mm(x.astype(np.float64), y)]), *theirs],
                       tol=1e-2, rate="GFLOP/s", work=2.0 * m * n * k)

    return setup


def bf16_conv_case(c: int = 64, hw: int = 56) -> Callable[[Context], Contest]:
    """A bf16 conv 3x3 (pads 1), f32 accumulation: opc's bf16 route (im2col of the bf16 values and the
    bf16 GEMM, vdpbf16ps where the CPU has AVX512-BF16), opc's f32 conv on the same shape, torch's bf16."""

    def setup(ctx: Context) -> Contest:
        import ml_dtypes

        xs, ws = (1, c, hw, hw), (c, c, 3, 3)

        def module(dt: str):  # noqa: ANN202
            tx, tw = (f"tensor<{'x'.join(map(str, s))}x{dt}>" for s in (xs, ws))
            return opc.compile(f"func.func @f(%x: {tx}, %w: {tw}) -> {tx} {{\n  %y = opc.conv %x, %w {{pads = "
                               f"array<i64: 1, 1, 1, 1>}} : ({tx}, {tw}) -> {tx}\n  func.return %y : {tx}\n}}\n").f

        bf = np.dtype(ml_dtypes.bfloat16)
        x, w = ctx.rng.standard_normal(xs, np.float32), 0.1 * ctx.rng.standard_normal(ws, np.float32)
        xb, wb = x.astype(bf), w.astype(bf)
        ours_bf16, ours_f32 = module("bf16"), module("f32")
        theirs = [Contender("opc f32", lambda: ours_f32(x, w), want=[numpy_conv3x3(x.astype(np.float64), w, 1)])]
        if ctx.torch is not None:
            torch = ctx.torch
            tx, tw = torch.from_numpy(x).to(torch.bfloat16), torch.from_numpy(w).to(torch.bfloat16)
            theirs.append(Contender("torch bf16", lambda: torch.nn.functional.conv2d(tx, tw, padding=1)))
        return Contest(want=[numpy_conv3x3(xb.astype(np.float64), wb.astype(np.float64), 1)],
                       ours=[Contender("opc bf16", lambda: ours_bf16(xb, wb))], theirs=theirs,
                       tol=1e-2, rate="GFLOP/s", work=2.0 * c * c * 9 * hw * hw)

    return setup


def epilogue_case(act: str, n: int = 512) -> Callable[[Context], Contest]:
    def setup(ctx: Context) -> Contest:
        m = opc.compile(gemm_mlir(n, act))
        x, y = ctx.rng.standard_normal((n, n), np.float32), ctx.rng.standard_normal((n, n), np.float32)
        b = ctx.rng.standard_normal(n, np.float32)
        ref = NUMPY_EPILOGUE[act]
        torch_fn = None
        if ctx.torch is not None:
            F = ctx.torch.nn.functional
            act_fn = {"none": lambda z: z, "relu": F.relu, "gelu": lambda z: F.gelu(z, approximate="tanh")}[act]

            def torch_fn(a, w, c):
                return act_fn(ctx.torch.addmm(c, a, w))

        return Contest(want=[ref(*(a.astype(np.float64) for a in (x, y, b)))],
                       ours=[Contender("opc", lambda: m.f(x, y, b) if act == "none" else m.f(x, y, b)[0])],
                       theirs=[numpy_row(ref, [x, y, b]), *peers(ctx, [x, y, b], torch_fn, None, compiled=False)],
                       tol=1e-4, rate="GFLOP/s", work=2.0 * n**3)

    return setup


def gelu_layer_case(ctx: Context, n: int = 512) -> Contest:
    """A training step of the fused gelu layer: h = gelu(x @ w + b) and the gradients w.r.t. x, w, b for dh.

    opc: one f_value_and_grad call (forward once, reserve_space reused: 3 GEMMs) and f then
    f_grad (the grad replays the forward: 4 GEMMs); torch eager autograd; JAX jit of vjp
    (value_and_grad of a non-scalar function: the value and the pullback of dh)."""
    t, bt = f"tensor<{n}x{n}xf32>", f"tensor<{n}xf32>"
    m = opc.compile(f"func.func @f(%x: {t}, %w: {t}, %b: {bt}) -> {t} {{\n"
                    f'  %h, %z = opc.fused_gemm_epilogue %x, %w, %b {{activation = "gelu"}} : '
                    f"({t}, {t}, {bt}) -> ({t}, {t})\n  func.return %h : {t}\n}}\n", grad=True)
    x, w, b, dh = (ctx.rng.standard_normal(s, np.float32) for s in ((n, n), (n, n), (n,), (n, n)))
    x64, w64, b64, dh64 = (a.astype(np.float64) for a in (x, w, b, dh))
    z = x64 @ w64 + b64
    dz = dh64 * numpy_gelu_grad(z)
    want = [numpy_gelu(z), dz @ w64.T, x64.T @ dz, dz.sum(0)]
    theirs = []
    if ctx.torch is not None:
        torch = ctx.torch
        tx, tw, tb = (torch.from_numpy(a).requires_grad_() for a in (x, w, b))
        tdh = torch.from_numpy(dh)

        def torch_step():
            h = torch.nn.functional.gelu(torch.addmm(tb, tx, tw), approximate="tanh")
            return (h, *torch.autograd.grad(h, (tx, tw, tb), tdh))

        theirs.append(Contender("torch eager", torch_step))
    if ctx.jax is not None:
        jax = ctx.jax

        def layer(a, ww, bb):
            return jax.nn.gelu(a @ ww + bb, approximate=True)

        @jax.jit
        def step(a, ww, bb, d):
            h, pullback = jax.vjp(layer, a, ww, bb)
            return (h, *pullback(d))

        jargs = [jax.numpy.asarray(a) for a in (x, w, b, dh)]
        theirs.append(Contender("JAX jit(vjp)", lambda: jax.block_until_ready(step(*jargs))))
    return Contest(want=want,
                   ours=[Contender("opc f_value_and_grad", lambda: m.f_value_and_grad(x, w, b, dh)),
                         Contender("opc f + f_grad", lambda: (m.f(x, w, b), *m.f_grad(x, w, b, dh)))],
                   theirs=theirs, tol=1e-4, rate="GFLOP/s", work=6.0 * n**3)


# ---------------------------------------------------------------------------
# Convolutions (issue 19): a 3x3 conv layer and a depthwise one, 64 channels at 56x56
# ---------------------------------------------------------------------------


def numpy_conv3x3(x, w, group):
    """f64 conv, pads 1, stride 1: windows of the padded input contracted with w (per group)."""
    win = np.lib.stride_tricks.sliding_window_view(np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)]), (3, 3), axis=(2, 3))
    if group == 1:
        return np.einsum("nchwkl,ockl->nohw", win, w, optimize=True)
    return np.einsum("nchwkl,ckl->nchw", win, w[:, 0], optimize=True)  # depthwise


def numpy_conv3x3_grads(x, w, dy, group):
    """dx: the conv of dy with w flipped (channels swapped); dw: dy against the input windows."""
    win = np.lib.stride_tricks.sliding_window_view(np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)]), (3, 3), axis=(2, 3))
    if group == 1:
        dx = numpy_conv3x3(dy, w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1], 1)
        return dx, np.einsum("nohw,nchwkl->ockl", dy, win, optimize=True)
    dx = numpy_conv3x3(dy, w[:, :, ::-1, ::-1], group)
    return dx, np.einsum("nchw,nchwkl->ckl", dy, win, optimize=True)[:, None]


def ort_session(model):
    """An onnxruntime CPU session on the bench's thread count (None without onnxruntime)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = benchlib.threads()
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def conv_onnx(xs, ws, group: int):
    """A one-node ONNX Conv (pads 1) of x [xs] with the filter as a graph input."""
    from onnx import TensorProto, helper

    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], group=group)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs),
                                               helper.make_tensor_value_info("w", TensorProto.FLOAT, ws)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, xs)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def jax_conv(jax, group: int):
    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), [(1, 1), (1, 1)], feature_group_count=group,
                                            dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return conv


def conv_case(group: int, backward: bool, c: int = 64, hw: int = 56) -> Callable[[Context], Contest]:
    def setup(ctx: Context) -> Contest:
        xs, ws = (1, c, hw, hw), (c, c // group, 3, 3)
        tx, tw = (f"tensor<{'x'.join(map(str, s))}xf32>" for s in (xs, ws))
        m = opc.compile(f"func.func @f(%x: {tx}, %w: {tw}) -> {tx} {{\n  %y = opc.conv %x, %w {{pads = array<i64: "
                        f"1, 1, 1, 1>, group = {group}}} : ({tx}, {tw}) -> {tx}\n  func.return %y : {tx}\n}}\n",
                        grad=backward)
        x, w, dy = (ctx.rng.standard_normal(s, np.float32) for s in (xs, ws, xs))
        x64, w64, dy64 = (a.astype(np.float64) for a in (x, w, dy))
        want = [numpy_conv3x3(x64, w64, group)]
        if backward:
            want += list(numpy_conv3x3_grads(x64, w64, dy64, group))
        theirs = []
        if not backward:
            session = ort_session(conv_onnx(xs, ws, group))
            if session is not None:
                theirs.append(Contender("onnxruntime", lambda: session.run(None, {"x": x, "w": w})[0]))
        if ctx.torch is not None:
            torch = ctx.torch
            F = torch.nn.functional
            tx_, tw_ = (torch.from_numpy(a).requires_grad_(backward) for a in (x, w))
            tdy = torch.from_numpy(dy)

            def torch_step():
                y = F.conv2d(tx_, tw_, padding=1, groups=group)
                return (y, *torch.autograd.grad(y, (tx_, tw_), tdy)) if backward else y.detach()

            theirs.append(Contender("torch eager", torch_step))
        if ctx.jax is not None:
            jax = ctx.jax
            conv = jax_conv(jax, group)
            jx, jw, jdy = (jax.numpy.asarray(a) for a in (x, w, dy))
            if backward:
                @jax.jit
                def step(x, w, dy):
                    y, pullback = jax.vjp(conv, x, w)
                    return (y, *pullback(dy))

                theirs.append(Contender("JAX jit(vjp)", lambda: jax.block_until_ready(step(jx, jw, jdy))))
            else:
                jitted = jax.jit(conv)
                theirs.append(Contender("JAX jit", lambda: jax.block_until_ready(jitted(jx, jw))))
        ours = (Contender("opc f_value_and_grad", lambda: m.f_value_and_grad(x, w, dy)) if backward
                else Contender("opc", lambda: m.f(x, w)))
        flops = 2.0 * c * (c // group) * 9 * hw * hw * (3 if backward else 1)
        return Contest(want=want, ours=[ours], theirs=theirs, tol=1e-4, rate="GFLOP/s", work=flops)

    return setup


# An LSTM layer (issue 19): ONNX LSTM imported by opc, against onnxruntime on the same file and
# torch's nn.LSTM with the same weights. Sequence 32, batch 4, input 128, hidden 256.
LSTM_T, LSTM_B, LSTM_I, LSTM_H = 32, 4, 128, 256
TORCH_GATES = [0, 2, 3, 1]  # ONNX's gate blocks i, o, f, c in torch's order i, f, g (= c), o


def lstm_onnx(W, R, B):
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "h", "c"], hidden_size=LSTM_H)
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (LSTM_T, LSTM_B, LSTM_I))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (LSTM_T, 1, LSTM_B, LSTM_H)),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, (1, LSTM_B, LSTM_H)),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, (1, LSTM_B, LSTM_H))],
        [numpy_helper.from_array(a, n) for a, n in ((W, "W"), (R, "R"), (B, "B"))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def numpy_lstm(x, W, R, B):
    """ONNX LSTM (gates i, o, f, c; sigmoid, tanh, tanh), f64: the outputs y, last h, last c."""
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    W, R, B = W[0], R[0], B[0]
    h = c = np.zeros((x.shape[1], LSTM_H))
    ys = []
    for t in range(x.shape[0]):
        g = x[t] @ W.T + h @ R.T + B[:4 * LSTM_H] + B[4 * LSTM_H:]
        i, o, f, cc = (g[:, k * LSTM_H:(k + 1) * LSTM_H] for k in range(4))
        c = sig(f) * c + sig(i) * np.tanh(cc)
        h = sig(o) * np.tanh(c)
        ys.append(h)
    return [np.stack(ys)[:, None], h[None], c[None]]


def lstm_case(ctx: Context) -> Contest:
    scale = 1 / np.sqrt(LSTM_H)
    W = (ctx.rng.uniform(-scale, scale, (1, 4 * LSTM_H, LSTM_I))).astype(np.float32)
    R = (ctx.rng.uniform(-scale, scale, (1, 4 * LSTM_H, LSTM_H))).astype(np.float32)
    B = (ctx.rng.uniform(-scale, scale, (1, 8 * LSTM_H))).astype(np.float32)
    x = ctx.rng.standard_normal((LSTM_T, LSTM_B, LSTM_I), np.float32)
    model = lstm_onnx(W, R, B)
    m = opc.load_onnx(model)
    theirs = []
    session = ort_session(model)
    if session is not None:
        theirs.append(Contender("onnxruntime", lambda: session.run(None, {"x": x})))
    if ctx.torch is not None:
        torch = ctx.torch
        lstm = torch.nn.LSTM(LSTM_I, LSTM_H)

        def gates(a):
            return np.concatenate([a[k * LSTM_H:(k + 1) * LSTM_H] for k in TORCH_GATES])

        with torch.no_grad():
            for name, a in (("weight_ih_l0", W[0]), ("weight_hh_l0", R[0]), ("bias_ih_l0", B[0, :4 * LSTM_H]),
                            ("bias_hh_l0", B[0, 4 * LSTM_H:])):
                getattr(lstm, name).copy_(torch.from_numpy(gates(a)))
        tx = torch.from_numpy(x)

        def torch_lstm():
            with torch.no_grad():
                y, (h, c) = lstm(tx)
            return [y[:, None], h, c]

        theirs.append(Contender("torch eager", torch_lstm))
    want = numpy_lstm(x.astype(np.float64), *(a.astype(np.float64) for a in (W, R, B)))
    flops = 2.0 * LSTM_T * LSTM_B * 4 * LSTM_H * (LSTM_I + LSTM_H)
    return Contest(want=want, ours=[Contender("opc", lambda: m(x))], theirs=theirs, tol=1e-4, rate="GFLOP/s",
                   work=flops)


# ImageNet-sized CNN forwards at 1x3x224x224 (torchvision's ResNet-18 and MobileNetV2, exported by
# tests/models' script without their weights; seeded_weights.fill_initializers gives them). onnxruntime
# on the same file is the reference; torch eager and JAX run the same graph node by node
# (bench/onnx_peers.py).
MODELS = ROOT / "tests" / "models"


def imagenet_case(name: str, macs: float) -> Callable[[Context], Contest]:
    """The forward of tests/models/NAME.onnx at 224x224 (exported at 64x64: every size fits), `macs`
    multiply-adds per image (torchvision's figures) as the rate's work."""
    path = MODELS / f"{name}.onnx"

    def case(ctx: Context) -> Contest:
        if not path.is_file():
            raise Skip(f"{path.relative_to(ROOT)} is absent (tests/models' export script commits it)")
        import onnx

        sys.path.insert(0, str(MODELS))
        from seeded_weights import fill_initializers

        model = onnx.load(str(path))
        fill_initializers(model)
        for dim in model.graph.input[0].type.tensor_type.shape.dim[2:]:
            dim.dim_value = 224
        del model.graph.value_info[:]
        session = ort_session(model)
        if session is None:
            raise Skip("onnxruntime is not installed: it is this row's reference")
        x = ctx.rng.standard_normal((1, 3, 224, 224), np.float32)
        inp = model.graph.input[0].name
        want = session.run(None, {inp: x})
        m = opc.load_onnx(model)
        theirs = [Contender("onnxruntime", lambda: session.run(None, {inp: x}))]
        if ctx.torch is not None:
            run = onnx_torch(ctx.torch, model)
            tx = ctx.torch.from_numpy(x)
            theirs.append(Contender("torch eager", lambda: run(tx)))
        if ctx.jax is not None:
            run_jax, jx = onnx_jax(ctx.jax, model), ctx.jax.numpy.asarray(x)
            theirs.append(Contender("JAX jit", lambda: ctx.jax.block_until_ready(run_jax(jx))))
        return Contest(want=want, ours=[Contender("opc", lambda: m(x))], theirs=theirs, tol=1e-3, rate="GFLOP/s",
                       work=2 * macs)

    return case


# ---------------------------------------------------------------------------
# Compile time
# ---------------------------------------------------------------------------

COMPILE_LIMIT_S = 300


def layered_model(n_ops: int, size: int = 16) -> str:
    """An n_ops-op function: runs of 7 elementwise ops (some with fan-out), then a matmul or a
    row reduction (whose result the next op broadcasts back), as models are built."""
    t, r = f"tensor<{size}x{size}xf32>", f"tensor<{size}x1xf32>"
    binary, unary = ("add", "mul", "sub", "maximum"), ("tanh", "relu", "neg")
    lines, full, prev, reduced = [], "%x", "%w", None
    for i in range(n_ops):
        v = f"%v{i}"
        if i % 8 == 7 and (i // 8) % 2 == 0:
            lines.append(f"{v} = opc.matmul {full}, %w : ({t}, {t}) -> {t}")
        elif i % 8 == 7:
            lines.append(f"{v} = opc.reduce_max {full} {{axes = array<i64: 1>, keepdim = true}} : ({t}) -> {r}")
            reduced = v
            continue
        elif reduced is not None:
            lines.append(f"{v} = opc.sub {full}, {reduced} : ({t}, {r}) -> {t}")
            reduced = None
        elif i % 3 == 2:
            lines.append(f"{v} = opc.{unary[(i // 3) % len(unary)]} {full} : ({t}) -> {t}")
        else:
            lines.append(f"{v} = opc.{binary[i % len(binary)]} {full}, {prev} : ({t}, {t}) -> {t}")
        full, prev = v, full
    ret, rt = (reduced, r) if reduced is not None else (full, t)
    body = "\n".join("  " + line for line in lines)
    return f"func.func @model(%x: {t}, %w: {t}) -> {rt} {{\n{body}\n  func.return {ret} : {rt}\n}}\n"


def timed_compile(path: Path, cache: Path, timeout: float | None = None) -> float:
    """Seconds opc.compile takes in a fresh process (Python start-up and imports not counted).

    The process runs in its own process group, so that a timeout ends the C compiler it started too."""
    code = ("import time, opc; t = time.perf_counter(); "
            f"opc.compile({str(path)!r}); print(time.perf_counter() - t)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OPC_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)},
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    if proc.returncode != 0:
        lines = (stderr.strip() or stdout.strip() or f"exit {proc.returncode}").splitlines()
        raise RuntimeError(lines[-1][:200])
    return float(stdout.strip().splitlines()[-1])


def compile_time_run(ctx: Context, sizes: tuple[int, ...] = (100, 1000, 5000)) -> None:
    """Seconds per 1,000 ops, each model compiled into a fresh cache that holds only opc's runtime objects
    (built once beforehand: they are a one-time cost per machine, not per model)."""
    print(f"compile time (fresh cache per model, limit {COMPILE_LIMIT_S} s; "
          "runs of 7 elementwise ops broken by a matmul or a reduction)")
    with tempfile.TemporaryDirectory() as tmp:
        seed = Path(tmp) / "seed"
        seed_model = Path(tmp) / "seed.mlir"
        seed_model.write_text(layered_model(16))
        timed_compile(seed_model, seed)
        runtime = [p for p in seed.rglob("*.o")]
        for n in sizes:
            cache, model = Path(tmp) / f"cache{n}", Path(tmp) / f"model{n}.mlir"
            cache.mkdir()
            for obj in runtime:
                dst = cache / obj.relative_to(seed)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(obj, dst)
            model.write_text(layered_model(n))
            try:
                s = timed_compile(model, cache, COMPILE_LIMIT_S)
                print(f"  {n:5d} ops  {s:8.1f} s  {s / n * 1000:8.1f} s per 1,000 ops")
            except subprocess.TimeoutExpired:
                print(f"  {n:5d} ops  did not compile: took > {COMPILE_LIMIT_S} s")
            except RuntimeError as e:
                print(f"  {n:5d} ops  did not compile: {e}")
            sys.stdout.flush()


def mlp_compile_run(ctx: Context) -> None:
    mlp = ROOT / "examples" / "mlp.mlir"
    with tempfile.TemporaryDirectory() as fresh:
        cold = timed_compile(mlp, Path(fresh))  # includes the one-time GEMM runtime object
        warm = timed_compile(mlp, Path(fresh))
        edited = Path(fresh) / "mlp_edited.mlir"
        edited.write_text(mlp.read_text().replace("@mlp", "@mlp2"))
        model_only = timed_compile(edited, Path(fresh))  # runtime object already cached
    print(f"examples/mlp.mlir compile: cold {cold:.2f} s (fresh cache, incl. the one-time GEMM runtime build), "
          f"cold model-only {model_only:.2f} s, warm (cached) load {warm * 1e3:.0f} ms")


def transformer_run(ctx: Context) -> None:
    import bench_transformer  # the zoo's transformer block vs onnxruntime / torch / JAX

    bench_transformer.run(timer=lambda fns: benchlib.best_of(fns, repeat=min(ctx.repeat, 7)))


# ---------------------------------------------------------------------------

add_case("softmax", f"softmax over rows {ROWS}x{COLS} f32 (composed: reduce_max sub exp reduce_sum div)", softmax_case)
add_case("layernorm", f"layer norm over rows {ROWS}x{COLS} f32 (composed: 10 primitives)", layer_norm_case)
add_case("rowsum", "row sum 4096x1024 f32 (axis 1)", sum_case(1))
add_case("colsum", "column sum 4096x1024 f32 (axis 0)", sum_case(0))
add_case("chain", "6-op elementwise chain, 4M f32 (mul add relu sub mul tanh)", chain_case)
add_case("gelu-fwd-bwd", "fused gelu layer 512, forward + backward f32", gelu_layer_case)
for _n in (256, 512, 1024):
    add_case(f"matmul-{_n}", f"matmul f32 {_n}", matmul_case(_n))
for _name, (_m, _n, _k, _tx, _ty) in {"qkv": (1024, 256, 256, False, False), "fc1": (1024, 1024, 256, False, False),
                                      "fc2": (1024, 256, 1024, False, False), "dx": (1024, 256, 1024, False, True),
                                      "dw": (256, 1024, 1024, True, False)}.items():
    add_case(f"gemm-{_name}", f"the block's GEMM {_name}: {_m}x{_k} @ {_k}x{_n} f32"
             + "".join(f", {o} stored transposed" for o, on in (("x", _tx), ("y", _ty)) if on),
             block_gemm_case(_m, _n, _k, _tx, _ty))
add_case("bmm-qk", "batched matmul [8,4,128,64] @ [8,4,64,128] f32 (attention scores)",
         batched_matmul_case((8, 4, 128, 64), (8, 4, 64, 128)))
add_case("bmm-pv", "batched matmul [8,4,128,128] @ [8,4,128,64] f32 (attention output)",
         batched_matmul_case((8, 4, 128, 128), (8, 4, 128, 64)))
for _name, (_m, _n, _k, _ty) in {"512": (512, 512, 512, False), "qkv": (1024, 256, 256, False),
                                 "fc1": (1024, 1024, 256, False), "fc2": (1024, 256, 1024, False),
                                 "dx": (1024, 256, 1024, True)}.items():
    add_case(f"bf16-{_name}", f"bf16 GEMM {_name}: {_m}x{_k} @ {_k}x{_n}" + (" (y stored transposed)" if _ty else "")
             + ", f32 accumulation", bf16_gemm_case(_m, _n, _k, _ty))
for _act in ("none", "relu", "gelu"):
    add_case(f"epilogue-{_act}", f"fused_gemm_epilogue {_act} 512 f32", epilogue_case(_act))
add_case("conv3x3", "conv 3x3 64->64 ch 56x56 f32, pads 1 (implicit GEMM)", conv_case(1, False))
add_case("conv3x3-fwd-bwd", "conv 3x3 64->64 ch 56x56 f32, forward + backward", conv_case(1, True))
add_case("bf16-conv3x3", "bf16 conv 3x3 64->64 ch 56x56, pads 1, f32 accumulation", bf16_conv_case())
add_case("conv-dw", "depthwise conv 3x3 64 ch 56x56 f32 (depthwise loop nest)", conv_case(64, False))
add_case("conv-dw-fwd-bwd", "depthwise conv 3x3 64 ch 56x56 f32, forward + backward", conv_case(64, True))
add_case("lstm", f"LSTM layer (ONNX LSTM imported): seq {LSTM_T}, batch {LSTM_B}, input {LSTM_I}, hidden {LSTM_H} "
         "f32, forward", lstm_case)
add_case("resnet18", "ResNet-18 forward 1x3x224x224 f32 (tests/models/resnet18.onnx, seeded weights; "
         "onnxruntime is the reference)", imagenet_case("resnet18", 1.814e9))
add_case("mobilenet_v2", "MobileNetV2 forward 1x3x224x224 f32 (tests/models/mobilenet_v2.onnx, seeded weights; "
         "onnxruntime is the reference)", imagenet_case("mobilenet_v2", 0.301e9))
add_case("compile", "compile time", run=compile_time_run)
add_case("mlp-compile", "examples/mlp.mlir compile", run=mlp_compile_run)
add_case("transformer", "transformer block", run=transformer_run)


def main(args: argparse.Namespace) -> None:
    if args.list:
        for case in CASES:
            print(f"{case.name:<16} {case.title}")
        return
    split = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    unknown = [n for n in split(args.only) + split(args.skip) if not any(c.name.startswith(n) for c in CASES)]
    if unknown:
        raise SystemExit(f"error: no case named {', '.join(unknown)} (see --list)")
    if args.clock == "thread":
        if benchlib.threads() != 1:
            raise SystemExit("error: --clock thread needs --threads 1 (other threads' work would go uncounted)")
        benchlib.CLOCK = time.thread_time
    torch, jax = benchlib.import_torch(), (benchlib.import_jax() if args.clock == "wall" else None)
    versions = [f"numpy {np.__version__}"]
    versions += [f"torch {torch.__version__}"] if torch else []
    versions += [f"jax {jax.__version__}"] if jax else []
    print(f"{'; '.join(versions)}; threads {benchlib.threads()} of {os.cpu_count()} cores; "
          f"OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY', '(default)')}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"BLAS: {benchlib.blas_info()}")
    limits = peak.measure()
    print(f"machine: f32 FMA peak {limits.gflops_per_core:.1f} GFLOP/s per core ({limits.isa}), copy bandwidth "
          f"{limits.copy_gbps:.1f} GB/s (bench/peak.py, measured now)")
    missing = [name for name, mod in (("torch", torch), ("JAX", jax)) if mod is None and
               (name != "JAX" or args.clock == "wall")]
    if missing:
        print(f"({' and '.join(missing)} not installed: `pip install -e .[bench]` adds their columns)")
    clock = "wall" if args.clock == "wall" else "CPU time of the calling thread (no JAX column)"
    print(f"ms ({clock}): best of {args.repeat} interleaved rounds; columns /X: this row's time / opc variant X's "
          "time (> 1: X is faster)")
    ctx = Context(np.random.default_rng(0), torch, jax, args.repeat)
    t0 = time.perf_counter()
    run_cases(ctx, split(args.only), split(args.skip))
    print(f"\n(total {time.perf_counter() - t0:.0f} s; load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())})")


if __name__ == "__main__":
    main(ARGS)
