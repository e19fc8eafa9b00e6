"""opc's compile time: fresh compiles of 100 to 5,000-op models, a tiny BERT, CNNs, and cached loads.

Every figure is one fresh Python process (as a user's script), timed from after `import opc`:
wall seconds and CPU seconds (the process's and its compilers'; on a shared machine the CPU
figure is the one other sessions' load does not inflate much). Each compile gets a fresh
cache that already holds opc's runtime objects (built once per machine, not per model).

    python bench/bench_compile.py [--sizes 100,1000,5000] [--bert tiny_bert.onnx] [--repeat 3]
                                  [--onnx resnet18 mobilenet_v2]
    PYTHON_WITH_TRANSFORMERS bench/bench_compile.py --export-bert tiny_bert.onnx

The tiny BERT is transformers' BertModel with 2 layers, width 64, 2 heads, MLP 256, vocab
1000, batch 1 x 32 tokens, exported by torch.onnx.export(dynamo=True) (--export-bert does it,
in an interpreter that has torch and transformers).

The --onnx models (tests/models/NAME.onnx, weights filled by seeded_weights as bench_models_cpu.py
does, saved to a file) run as a user runs them: `import opc`, `opc.load_onnx(path)` and a first
call, timed from after `import numpy` (onnx is imported by the compile, never by a cached load).
Each: a fresh compile with the runtime objects cached, the first-ever compile (an empty cache: opc's
runtime objects built too; one run), and the load in a fresh process of what the fresh compile cached.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "models"
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(MODELS))

# A child: opc.compile(path) in a fresh process; prints JSON {wall, cpu, numpy_wall} (seconds).
CHILD = """
import json, resource, sys, time
def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
t = time.perf_counter()
if sys.argv[2] == "numpy-first":
    import numpy
numpy_wall = time.perf_counter() - t
import opc
t, c = time.perf_counter(), cpu()
opc.compile(sys.argv[1])
print(json.dumps({"wall": time.perf_counter() - t, "cpu": cpu() - c, "numpy_wall": numpy_wall}))
"""


# A child: `import opc`, opc.load_onnx(path) and one call, in a fresh process, as a user's script runs
# them (NumPy imported before, onnx not: a hit never imports it); prints JSON {wall, cpu, load} (seconds).
ONNX_CHILD = """
import json, resource, sys, time
def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
import numpy as np
x = np.random.default_rng(0).standard_normal(json.loads(sys.argv[2])).astype(np.float32)
t, c = time.perf_counter(), cpu()
import opc
f = opc.load_onnx(sys.argv[1])
load = time.perf_counter() - t
f(x)
print(json.dumps({"wall": time.perf_counter() - t, "cpu": cpu() - c, "load": load}))
"""


def child_env(cache: Path) -> dict[str, str]:
    env = {**os.environ, "OPC_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: opc's modules load from their .pyc
    return env


def timed(path: Path, cache: Path, numpy_first: bool = False, timeout: float = 600) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), "numpy-first" if numpy_first else "-"],
                         capture_output=True, text=True, env=child_env(cache), timeout=timeout, check=False)
    if out.returncode != 0:
        raise RuntimeError((out.stderr.strip() or out.stdout.strip()).splitlines()[-1][:200])
    return json.loads(out.stdout.strip().splitlines()[-1])


def timed_onnx(path: Path, shape: list[int], cache: Path, timeout: float = 600) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", ONNX_CHILD, str(path), json.dumps(shape)], capture_output=True,
                         text=True, env=child_env(cache), timeout=timeout, check=False)
    if out.returncode != 0:
        raise RuntimeError((out.stderr.strip() or out.stdout.strip()).splitlines()[-1][:200])
    return json.loads(out.stdout.strip().splitlines()[-1])


def filled_model(name: str, tmp: Path) -> tuple[Path, list[int]]:
    """tests/models/NAME.onnx with its seeded weights, saved under tmp; its input's shape."""
    import onnx
    from seeded_weights import fill_initializers  # pyright: ignore[reportMissingImports]  (tests/models, on sys.path)

    model = fill_initializers(onnx.load(str(MODELS / f"{name}.onnx")))
    path = tmp / f"{name}.onnx"
    onnx.save(model, str(path))
    old = path.stat().st_mtime - 3600  # a file written seconds ago is parsed at each load (onnx_cache.RACY_S)
    os.utime(path, (old, old))
    return path, [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


def onnx_figures(names: list[str], tmp: Path, repeat: int) -> None:
    print("\nONNX models: `import opc`, opc.load_onnx(path) and a first call in a fresh process (NumPy imported "
          "before, onnx only where it compiles)")
    print(f"  {'model':>14}  {'fresh wall s':>12}  {'cpu s':>6}  {'first-ever wall s':>17}  {'cpu s':>6}  "
          f"{'cached ms':>9}  {'of it import+load_onnx ms':>25}")
    for name in names:
        path, shape = filled_model(name, tmp)
        timed_onnx(path, shape, tmp / "seed")  # this model's runtime objects (the nn kernels) in the seed
        fresh = [timed_onnx(path, shape, fresh_cache(tmp, tmp / "seed", f"{name}-{r}")) for r in range(repeat)]
        first = timed_onnx(path, shape, tmp / f"{name}-empty")
        hits = [timed_onnx(path, shape, tmp / f"{name}-0") for _ in range(max(5, repeat))]
        best = min(hits, key=lambda h: h["wall"])
        print(f"  {name:>14}  {min(r['wall'] for r in fresh):12.2f}  {min(r['cpu'] for r in fresh):6.2f}  "
              f"{first['wall']:17.2f}  {first['cpu']:6.2f}  {best['wall'] * 1e3:9.1f}  {best['load'] * 1e3:25.1f}",
              flush=True)


def fresh_cache(tmp: Path, seed: Path, name: str) -> Path:
    """A cache dir holding only the runtime objects the seed cache built (with their digests: an object
    without one is built again)."""
    cache = tmp / name
    cache.mkdir()
    for obj in [*seed.glob("*.o"), *seed.glob("*.o.sha256")]:
        shutil.copy2(obj, cache / obj.name)
    return cache


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def export_bert(path: str) -> None:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=256, max_position_embeddings=128)
    model = BertModel(cfg).eval()
    ids = torch.randint(0, 1000, (1, 32))
    mask, types = torch.ones(1, 32, dtype=torch.int64), torch.zeros(1, 32, dtype=torch.int64)
    torch.onnx.export(model, (ids, mask, types), path, dynamo=True, external_data=False,
                      input_names=["input_ids", "attention_mask", "token_type_ids"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,5000", help="op counts of the layered models")
    ap.add_argument("--bert", help="the tiny BERT as .onnx (see --export-bert)")
    ap.add_argument("--export-bert", metavar="PATH", help="export the tiny BERT to PATH and exit")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (the best is shown)")
    ap.add_argument("--onnx", nargs="*", default=["resnet18", "mobilenet_v2"], metavar="MODEL",
                    help="models of tests/models to load with opc.load_onnx (none: skipped)")
    args = ap.parse_args()
    if args.export_bert:
        export_bert(args.export_bert)
        return
    from bench_cpu import layered_model

    print(f"# python {' '.join(sys.argv)}")
    print(f"load average before: {load()}; {os.cpu_count()} cores; build jobs: all cores")
    print("seconds from after `import opc` to a bound module, fresh process each; best of "
          f"{args.repeat}; cpu = the process's and its compilers' CPU time")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        seed_model = tmp / "seed.mlir"
        seed_model.write_text(layered_model(16))
        timed(seed_model, tmp / "seed")  # the runtime objects, and every .pyc written
        if args.bert:
            timed(Path(args.bert), tmp / "seed")  # (the BERT's runtime objects: the nn kernels too)
        print("\nfresh compile of layered models (runs of 7 elementwise ops broken by a matmul or a row max)")
        print(f"  {'ops':>5}  {'wall s':>7}  {'cpu s':>7}  {'wall s/1k ops':>13}  {'cpu s/1k ops':>12}")
        for n in (int(s) for s in args.sizes.split(",")):
            model = tmp / f"model{n}.mlir"
            model.write_text(layered_model(n))
            runs = [timed(model, fresh_cache(tmp, tmp / "seed", f"c{n}-{r}")) for r in range(args.repeat)]
            wall, cpu = min(r["wall"] for r in runs), min(r["cpu"] for r in runs)
            print(f"  {n:5d}  {wall:7.2f}  {cpu:7.2f}  {wall / n * 1e3:13.2f}  {cpu / n * 1e3:12.2f}", flush=True)
        if not args.bert:
            print("\ntiny BERT: skipped (no --bert given; export one with --export-bert)")
        else:
            bert = Path(args.bert)
            runs = [timed(bert, fresh_cache(tmp, tmp / "seed", f"bert-{r}")) for r in range(args.repeat)]
            print(f"\ntiny BERT ({bert.name}, {bert.stat().st_size / 1e3:.0f} kB) fresh compile: "
                  f"wall {min(r['wall'] for r in runs):.2f} s, cpu {min(r['cpu'] for r in runs):.2f} s")
            cache = tmp / "bert-0"
            hits = [timed(bert, cache, numpy_first=True) for _ in range(max(5, args.repeat))]
            cold = [timed(bert, cache) for _ in range(max(5, args.repeat))]
            print(f"tiny BERT cached load, fresh process: {min(h['wall'] for h in hits) * 1e3:.1f} ms wall "
                  f"({min(h['cpu'] for h in hits) * 1e3:.1f} ms cpu) after `import numpy` "
                  f"(which took {min(h['numpy_wall'] for h in hits) * 1e3:.1f} ms); "
                  f"{min(c['wall'] for c in cold) * 1e3:.1f} ms with NumPy's import inside")
        if args.onnx:
            onnx_figures(args.onnx, tmp, args.repeat)
    print(f"\nload average after: {load()}")


if __name__ == "__main__":
    main()
