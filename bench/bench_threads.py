"""libgomp's wait policies on a quiet and on a busy machine: a 256x256 f32 matmul at 2 threads.

    python bench/bench_threads.py [--calls 300] [--rounds 3] [--size 256]

Each policy runs in a process of its own (libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT
once, when it loads), the policies interleaved round by round (the last row imports torch
first, so torch's libgomp starts before opc could choose its policy); "busy" starts one CPU-bound
process per core next to it (what another job on the machine does). Each process prints the
best and the median time of `--calls` calls; the table shows the median over rounds of
both. opc's own default (opc/threads.py) is the `opc default` row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r"""
import json, sys, time
import numpy as np
if sys.argv[3] == "torch-first":
    import torch  # loads its libgomp.so.1 before opc could set the wait policy
import opc
n, calls = int(sys.argv[1]), int(sys.argv[2])
t = f"tensor<{n}x{n}xf32>"
f = opc.compile(f"func.func @mm(%a: {t}, %b: {t}) -> {t} {{\n  %c = opc.matmul %a, %b : ({t}, {t}) -> {t}\n"
                f"  func.return %c : {t}\n}}\n").mm
rng = np.random.default_rng(0)
a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
np.testing.assert_allclose(f(a, b), a.astype(np.float64) @ b, rtol=1e-3, atol=1e-3)
ts = []
for _ in range(calls):
    t0 = time.perf_counter(); f(a, b); ts.append(time.perf_counter() - t0)
ts.sort()
print(json.dumps({"best": ts[0] * 1e3, "median": ts[len(ts) // 2] * 1e3, "p90": ts[int(len(ts) * 0.9)] * 1e3}))
"""

# name -> environment changes (None: removed), opc's default left to opc/threads.py
POLICIES = {
    "libgomp default (spin 300k)": {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None, "OPC_WAIT_POLICY": "libgomp"},
    "active": {"OMP_WAIT_POLICY": "active", "GOMP_SPINCOUNT": None, "OPC_WAIT_POLICY": "libgomp"},
    "passive": {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": None, "OPC_WAIT_POLICY": "libgomp"},
    "spin 1k then sleep": {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": "1000", "OPC_WAIT_POLICY": "libgomp"},
    "spin 10k then sleep": {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": "10000", "OPC_WAIT_POLICY": "libgomp"},
    "spin 100k then sleep": {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": "100000", "OPC_WAIT_POLICY": "libgomp"},
    "opc default": {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None, "OPC_WAIT_POLICY": None},
    "opc default, torch imported first": {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None, "OPC_WAIT_POLICY": None,
                                          "torch-first": None},
}

BUSY = "while True: pass"


def run_child(env_changes: dict[str, str | None], size: int, calls: int) -> dict[str, float]:
    env = dict(os.environ)
    for k, v in env_changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    env.update(OPC_NUM_THREADS="2", OMP_NUM_THREADS="2", PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
    first = "torch-first" if "torch-first" in env_changes else "opc-first"
    out = subprocess.run([sys.executable, "-c", CHILD, str(size), str(calls), first], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=256)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}
    for _ in range(args.rounds):
        for mode in ("quiet", "busy"):
            busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(os.cpu_count() or 1)] \
                if mode == "busy" else []
            try:
                for name, env in POLICIES.items():
                    rows.setdefault((mode, name), []).append(run_child(env, args.size, args.calls))
            finally:
                for p in busy:
                    p.kill()
                    p.wait()
    print(f"\n{args.size}x{args.size} f32 matmul, 2 threads, {args.calls} calls per process, "
          f"median over {args.rounds} rounds")
    print("| machine | policy | best ms | median ms | p90 ms |\n|---|---|---|---|---|")
    for (mode, name), rs in rows.items():
        best, med, p90 = (statistics.median(r[k] for r in rs) for k in ("best", "median", "p90"))
        print(f"| {mode} | {name} | {best:.3f} | {med:.3f} | {p90:.3f} |")


if __name__ == "__main__":
    main()
