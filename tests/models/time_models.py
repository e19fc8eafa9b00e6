"""The model table figures (bench/results/2026-12-03-readme-records.md): per model of tests/models, the import, the compile with
grad=True (empty the cache first to time gcc) and one forward and one gradient call:

    OPC_CACHE_DIR=$(mktemp -d) python tests/models/time_models.py [resnet18 mobilenet_v2 ...]"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from seeded_weights import fill_initializers  # noqa: E402

import opc  # noqa: E402

MODELS = ["resnet18", "mobilenet_v2", "small_cnn", "lstm", "gru"]


def main() -> None:
    for name in sys.argv[1:] or MODELS:
        t0 = time.perf_counter()
        module, params = opc.import_onnx(fill_initializers(onnx.load(str(HERE / f"{name}.onnx"))))
        ops = sum(1 for op in module.walk() if op.name.startswith("opc."))
        t1 = time.perf_counter()
        m = opc.compile(module, grad=True)
        t2 = time.perf_counter()
        ref = np.load(HERE / f"{name}_ref.npz")
        m.main_graph(ref["in_x"], *params.values())
        t3 = time.perf_counter()
        m.main_graph_grad(ref["in_x"], *params.values(), ref["dy"])
        t4 = time.perf_counter()
        print(f"{name}: {sum(v.size for v in params.values())} weights, {ops} opc ops, import {t1 - t0:.1f} s, "
              f"compile grad=True {t2 - t1:.1f} s, forward {1e3 * (t3 - t2):.1f} ms, gradient {1e3 * (t4 - t3):.1f} ms",
              flush=True)


if __name__ == "__main__":
    main()
