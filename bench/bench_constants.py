"""Compile time against a constant's size (issue 37 item 4): `x + c` with c an i64 constant of n
elements, written in MLIR's hex form, each size compiled in a fresh process with a fresh cache.
Prints the wall seconds of opc.compile and the length of the C source gcc read.

    python3 bench/bench_constants.py [--sizes 65536,262144,1048576]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import json, sys, time
import numpy as np
import opc
n = int(sys.argv[1])
vals = (np.arange(n, dtype=np.int64) * 7919) % 1000
t_ = f"tensor<{n}xi64>"
text = (f'func.func @f(%x: {t_}) -> {t_} {{\\n  %c = arith.constant dense<"0x{vals.tobytes().hex().upper()}"> : {t_}\\n'
        f'  %r = opc.add %x, %c : ({t_}, {t_}) -> {t_}\\n  func.return %r : {t_}\\n}}\\n')
t = time.perf_counter()
m = opc.compile(text)
wall = time.perf_counter() - t
x = np.arange(n, dtype=np.int64)
assert np.array_equal(m.f(x), x + vals)
print(json.dumps({"wall": wall, "c_chars": len(m.c_source)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="65536,262144,1048576", help="comma-separated element counts")
    args = ap.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "OPC_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
            out = subprocess.run([sys.executable, "-c", CHILD, str(n)], env=env, capture_output=True, text=True,
                                 check=True).stdout
        r = json.loads(out.splitlines()[-1])
        print(f"i64 constant of {n} elements ({8 * n / 2**20:.1f} MiB): compile {r['wall']:.2f} s, "
              f"C source {r['c_chars']} characters")


if __name__ == "__main__":
    main()
