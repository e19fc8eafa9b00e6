"""Control flow (issue 34): an ONNX Loop whose trip count is an input, and an If whose heavy branch
is not taken, against onnxruntime.

    python3 bench/bench_control_flow.py

Prints, per trip count, opc's first call (import + compile + run, a fresh cache) and its later
calls, and onnxruntime's; for the If, the call with the heavy branch taken and not taken.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parents[1] / "tests" / "control_flow"), str(Path(__file__).parents[1] / "tests"
                                                                                   / "support")]

from test_onnx_scf import counted_loop_model, feeds_for_loop, heavy_if_model  # noqa: E402

import opc  # noqa: E402


def best(f, n: int = 5) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def ort_session(model):
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def main() -> None:
    model = counted_loop_model()
    sess = ort_session(model)
    with tempfile.TemporaryDirectory() as cache:
        m = opc.load_onnx(model, cache_dir=cache)
        print("Loop, trip count an input | opc first call (compile) | opc call | onnxruntime call")
        for n in (5, 50, 2000):
            feeds = feeds_for_loop(n)
            t = time.perf_counter()
            m(**feeds)
            first = time.perf_counter() - t
            call = best(lambda feeds=feeds: m(**feeds))
            ort_call = best(lambda feeds=feeds: sess.run(None, feeds))
            print(f"  {n:5d} trips | {first * 1e3:9.1f} ms | {call * 1e3:8.3f} ms | {ort_call * 1e3:8.3f} ms")
    model = heavy_if_model()
    sess = ort_session(model)
    x = np.random.default_rng(0).uniform(-0.1, 0.1, (256, 256)).astype(np.float32)
    with tempfile.TemporaryDirectory() as cache:
        m = opc.load_onnx(model, cache_dir=cache)
        print("If, heavy branch (8 matmuls 256x256) | opc call | onnxruntime call")
        for cond in (True, False):
            feeds = {"cond": np.array(cond), "x": x}
            m(**feeds)
            print(f"  taken={cond!s:5} | {best(lambda f=feeds: m(**f)) * 1e3:8.3f} ms | "
                  f"{best(lambda f=feeds: sess.run(None, f)) * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
