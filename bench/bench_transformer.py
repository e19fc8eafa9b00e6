"""The zoo's transformer block at a realistic size, opc against the others, side by side in one run.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_transformer.py \\
        [--small] [--threads N] [--busy] [--median] [--cpu-time]

Batch 8, sequence 128, width 256, 4 heads, MLP 1024, f32; the block from
examples/zoo/transformer_block.py (layer norm, causal multi-head attention,
residual, layer norm, GELU MLP, residual), imported from ONNX. Rows:
  forward             opc vs onnxruntime (same ONNX file), torch eager, JAX (jit)
  forward + backward  opc value_and_grad (output and the gradients w.r.t. x and
                      every weight) vs torch eager autograd, JAX (jit of vjp)
torch and JAX run only where installed, on the same weights; every contender's
numbers are checked against opc's before it is timed. Each figure is the best
of 9 rounds, every round running every contender in turn (so a shared machine's
load hits all alike); ratio = their time / opc's time (> 1: opc is faster).
bench/bench_cpu.py prints these rows too, through `run()`.

--threads N gives every contender N threads (opc.set_num_threads, onnxruntime's intra-op
pool, torch, and the process pinned to N cores for JAX); --busy starts one CPU-bound process
per core for the timed part and reports each contender's median call instead of its best
(what a job sharing the machine sees; 30 calls each, interleaved); --median reports the same
medians without the busy processes (the quiet figure the busy one is compared with); --cpu-time times the
process's CPU seconds per call instead (at one thread: a call's time on a core of its own,
which a loaded machine's waits do not inflate). The last rows: opc's compile (import + compile with
gradients, in this process) and the load of the same model already compiled, in a fresh
process (`opc.compile("block.onnx", grad=True)` found in the cache before parsing).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import OPENBLAS_NO_SPIN, apply_threads, best_of, check, import_torch, settle, threads  # noqa: E402, I001

os.environ.setdefault(*OPENBLAS_NO_SPIN)  # before NumPy loads OpenBLAS
import numpy as np  # noqa: E402, I001

from zoo import common  # noqa: E402
from zoo import transformer_block  # noqa: E402

import opc  # noqa: E402

SIZES = transformer_block.Sizes(batch=8, seq=128, width=256, heads=4, mlp=1024)
SMALL = transformer_block.Sizes(batch=2, seq=16, width=32, heads=4, mlp=64)


# ---------------------------------------------------------------------------
# The contenders: each returns (forward, forward_backward) callables or None
# ---------------------------------------------------------------------------


def onnxruntime_forward(model, x):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads()
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, {"x": x})[0]


def unpack(weights: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The weights in the order transformer_block.reference unpacks them (file order)."""
    return list(weights.values())


def torch_contender(s: transformer_block.Sizes, x: np.ndarray, weights: dict[str, np.ndarray], dy: np.ndarray):
    torch = import_torch()
    if torch is None:
        return None
    F = torch.nn.functional
    w = [torch.tensor(a, requires_grad=True) for a in unpack(weights)]
    xt = torch.tensor(x, requires_grad=True)
    dyt = torch.tensor(dy)

    def block():
        ln1_w, ln1_b, bq, wq, bk, wk, bv, wv, bo, wo, ln2_w, ln2_b, b1, w1, b2, w2 = w

        def heads(t):
            return t.view(s.batch, s.seq, s.heads, s.head_dim).transpose(1, 2)

        h = F.layer_norm(xt, (s.width,), ln1_w, ln1_b, 1e-5)
        q, k, v = heads(h @ wq + bq), heads(h @ wk + bk), heads(h @ wv + bv)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x1 = xt + a.transpose(1, 2).reshape(xt.shape) @ wo + bo
        return x1 + F.gelu(F.layer_norm(x1, (s.width,), ln2_w, ln2_b, 1e-5) @ w1 + b1) @ w2 + b2

    def forward():
        with torch.no_grad():
            return block().numpy()

    def forward_backward():
        y = block()
        return [y.detach().numpy()] + [g.numpy() for g in torch.autograd.grad(y, [xt, *w], dyt)]

    return forward, forward_backward


def jax_contender(s: transformer_block.Sizes, x: np.ndarray, weights: dict[str, np.ndarray], dy: np.ndarray):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None

    def layer_norm(t, g, b):
        mean = t.mean(-1, keepdims=True)
        var = ((t - mean) ** 2).mean(-1, keepdims=True)
        return (t - mean) / jnp.sqrt(var + 1e-5) * g + b

    def block(xx, *w):
        ln1_w, ln1_b, bq, wq, bk, wk, bv, wv, bo, wo, ln2_w, ln2_b, b1, w1, b2, w2 = w

        def heads(t):
            return t.reshape(s.batch, s.seq, s.heads, s.head_dim).transpose(0, 2, 1, 3)

        h = layer_norm(xx, ln1_w, ln1_b)
        q, k, v = heads(h @ wq + bq), heads(h @ wk + bk), heads(h @ wv + bv)
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(s.head_dim)
        scores = jnp.where(jnp.tril(jnp.ones((s.seq, s.seq), bool)), scores, -jnp.inf)
        a = (jax.nn.softmax(scores, -1) @ v).transpose(0, 2, 1, 3).reshape(xx.shape)
        x1 = xx + a @ wo + bo
        return x1 + jax.nn.gelu(layer_norm(x1, ln2_w, ln2_b) @ w1 + b1, approximate=False) @ w2 + b2

    args = [jnp.asarray(x)] + [jnp.asarray(a) for a in unpack(weights)]
    fwd = jax.jit(block)

    @jax.jit
    def fwd_bwd(*a):
        y, pullback = jax.vjp(block, *a)
        return (y, *pullback(jnp.asarray(dy)))

    def forward():
        return np.asarray(fwd(*args).block_until_ready())

    def forward_backward():
        return [np.asarray(o) for o in jax.block_until_ready(fwd_bwd(*args))]

    return forward, forward_backward


# ---------------------------------------------------------------------------


def row(label: str, theirs: float | None, ours: float) -> None:
    if theirs is None:
        print(f"{label:<44} {'-':>9} {ours * 1e3:9.2f} {'-':>7}")
    else:
        print(f"{label:<44} {theirs * 1e3:9.2f} {ours * 1e3:9.2f} {theirs / ours:7.2f}")


def run(sizes: transformer_block.Sizes = SIZES, timer=None) -> None:
    """Build, import, compile, check and time; print one row per contender. timer: contenders
    (name -> callable) -> seconds per call each; the interleaved best of rounds by default."""
    timer = timer or interleaved_best
    s = sizes
    model = transformer_block.build(s, np.float32, opset=17, seed=0)
    t0 = time.perf_counter()
    module, params = opc.import_onnx(model)
    m = opc.compile(module, grad=True)
    compile_s = time.perf_counter() - t0
    rng = np.random.default_rng(1)
    x = rng.standard_normal((s.batch, s.seq, s.width)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    weights = common.weights(model)
    w = list(params.values())

    def opc_forward():
        return m.main_graph(x, *w)

    def opc_forward_backward():
        return m.main_graph_value_and_grad(x, *w, dy)

    y = opc_forward()
    ref = transformer_block.reference({"x": x}, weights, s)
    print(f"transformer block: batch {s.batch}, seq {s.seq}, width {s.width}, heads {s.heads}, mlp {s.mlp}, f32; "
          f"cores {os.cpu_count()}; import + compile (grad) {compile_s:.1f} s; "
          f"opc vs float64 NumPy: max error {float(np.abs(y - ref).max()):.1e}")
    print(f"{'case':<44} {'them ms':>9} {'opc ms':>9} {'ratio':>7}")
    ours = opc_forward_backward()
    # every contender checked first, then all timed together, the rounds interleaved
    fns = {"opc fwd": opc_forward, "opc fwd+bwd": opc_forward_backward}
    ort_fwd = onnxruntime_forward(model, x)
    if ort_fwd is not None:
        check("onnxruntime", [ort_fwd()], [y], against="opc")
        fns["onnxruntime fwd"] = ort_fwd
    missing = []
    for name, make in (("torch eager", torch_contender), ("JAX jit", jax_contender)):
        contender = make(s, x, weights, dy)
        if contender is None:
            missing.append(name)
            continue
        forward, forward_backward = contender
        check(name, [forward()], [y], against="opc")
        check(name, forward_backward(), list(ours), against="opc")
        fns[f"{name} fwd"], fns[f"{name} fwd+bwd"] = forward, forward_backward
    t = timer(fns)
    t_fwd, t_fb = t["opc fwd"], t["opc fwd+bwd"]
    row("forward  vs onnxruntime", t.get("onnxruntime fwd"), t_fwd)
    for name in ("torch eager", "JAX jit"):
        if name in missing:
            print(f"{'(' + name + ' not installed)':<44}")
            continue
        row(f"forward  vs {name}", t[f"{name} fwd"], t_fwd)
        row(f"forward + backward vs {name}", t[f"{name} fwd+bwd"], t_fb)
    if len(missing) == 2:
        row("forward + backward (no torch or JAX to compare)", None, t_fb)


def interleaved_best(fns: dict, repeat: int = 9) -> dict[str, float]:
    """Best seconds per call of each contender, the rounds interleaved (benchlib.best_of)."""
    return best_of(fns, repeat=repeat, min_time=0.05)


def cpu_best(fns: dict, repeat: int = 9, calls: int = 3) -> dict[str, float]:
    """Best CPU seconds of the process per call, the rounds interleaved (--cpu-time): at one
    thread, the time a call takes when it has the core, whatever the machine's load (the
    time waiting for the core is not counted; a busy neighbour's cache traffic still is)."""
    for fn in fns.values():
        fn()
    ts: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.process_time()
            for _ in range(calls):
                fn()
            ts[name].append((time.process_time() - t0) / calls)
    return {name: min(v) for name, v in ts.items()}


def median(fns: dict, calls: int = 30) -> dict[str, float]:
    """Median seconds per call of each contender, the calls interleaved (the busy machine's
    figure: the best call says little there). Each timed call follows a pause (the previous
    contender's pool asleep, benchlib.SETTLE_S) and one untimed call of its own (after the pause
    alone, every call would be a start from idle: caches and threads cold)."""
    for fn in fns.values():
        fn()
    ts: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(calls):
        for name, fn in fns.items():
            settle()  # the previous contender's pool asleep (benchlib.SETTLE_S)
            fn()
            t0 = time.perf_counter()
            fn()
            ts[name].append(time.perf_counter() - t0)
    return {name: sorted(v)[len(v) // 2] for name, v in ts.items()}


def cached_load_seconds(model, tmp: Path) -> tuple[float, float]:
    """A fresh process loading the block compiled before: compile once, then time the second."""
    import subprocess

    import onnx

    path = tmp / "block.onnx"
    onnx.save(model, str(path))
    code = ("import time, sys\nimport numpy\nt0, c0 = time.perf_counter(), time.process_time()\nimport opc\n"
            "opc.compile(sys.argv[1], grad=True)\nprint(time.perf_counter() - t0, time.process_time() - c0)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env,
                             check=True)
    wall, cpu = out.stdout.split()
    return float(wall), float(cpu)


def main() -> None:
    import argparse
    import subprocess
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--busy", action="store_true")
    ap.add_argument("--median", action="store_true", help="medians of 30 interleaved calls (what --busy reports)")
    ap.add_argument("--cpu-time", action="store_true", help="time CPU seconds (meaningful at --threads 1)")
    ap.add_argument("--save-onnx", metavar="PATH", help="only write the block's ONNX file (for `opc profile` and "
                                                        "bench/ort_node_times.py) and stop")
    args = ap.parse_args()
    if args.save_onnx:
        import onnx

        onnx.save(transformer_block.build(SMALL if args.small else SIZES, np.float32, opset=17, seed=0), args.save_onnx)
        print(f"wrote {args.save_onnx}")
        return
    n = apply_threads(args.threads)
    opc.set_num_threads(n)
    mode = ("busy: one CPU-bound process per core; medians" if args.busy
            else "medians" if args.median else "best of rounds")
    if args.cpu_time:
        mode = "CPU time of the process per call, best of rounds"
    print(f"threads {n}; load average {os.getloadavg()[0]:.1f}; {mode}")
    busy = []
    if args.busy:
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        timer = median if args.busy or args.median else cpu_best if args.cpu_time else None
        run(SMALL if args.small else SIZES, timer=timer)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    print(f"load average after the timed part: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        model = transformer_block.build(SMALL if args.small else SIZES, np.float32, opset=17, seed=0)
        wall, cpu = cached_load_seconds(model, Path(tmp))
        print(f"{'cached load, fresh process: import opc + compile':<44} {'':>9} {wall * 1e3:9.1f} ms "
              f"(CPU {cpu * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
