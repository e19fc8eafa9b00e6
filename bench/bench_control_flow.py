"""Control flow (issue 34): an ONNX Loop whose trip count is an input (with and without stacked
scan outputs), an If whose heavy branch is not taken, and a 2-layer LSTM over sequences of several
lengths, against onnxruntime.

    python3 bench/bench_control_flow.py [--only loop|scan|if|lstm] [--seq 64 300] [--threads N]

Prints, per trip count, opc's first call (import + compile + run, a fresh cache) and its later
calls, and onnxruntime's; for the If, the call with the heavy branch taken and not taken; for the
LSTM (batch 1, 64 inputs, 128 hidden, two stacked ONNX LSTM nodes as PyTorch exports nn.LSTM),
per sequence length the first call and the CPU time per later call at 1 thread, opc and
onnxruntime (1 intra- and inter-op thread, no spinning), and with the sequence axis a run-time
size (`?`), a first call then calls at each length through the one compiled module.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parents[1] / "tests" / "control_flow"), str(Path(__file__).parents[1] / "tests"
                                                                                   / "support")]

from benchlib import best  # noqa: E402
from onnx_helpers import helper, numpy_helper, onnx  # noqa: E402
from test_onnx_loop_scans import scan_loop_model  # noqa: E402
from test_onnx_scf import counted_loop_model, feeds_for_loop, heavy_if_model  # noqa: E402

import opc  # noqa: E402


def ort_session(model):
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def cpu_ms(f, calls: int = 20, clock=time.process_time) -> float:  # noqa: ANN001
    """CPU time per call (or `clock`'s: wall time where threads share the work), best of 5 rounds:
    what a busy machine disturbs least."""
    f()
    times = []
    for _ in range(5):
        t = clock()
        for _ in range(calls):
            f()
        times.append((clock() - t) / calls)
    return min(times) * 1e3


def lstm_model(seq: int | str, layers: int = 2, batch: int = 1, inputs: int = 64, hidden: int = 128) -> onnx.ModelProto:
    """`layers` ONNX LSTM nodes stacked (Y squeezed to the next one's X), seeded weights as initializers."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for k in range(layers):
        width = inputs if k == 0 else hidden
        for name, shape in ((f"W{k}", [1, 4 * hidden, width]), (f"R{k}", [1, 4 * hidden, hidden]),
                            (f"B{k}", [1, 8 * hidden])):
            inits.append(numpy_helper.from_array(rng.uniform(-0.1, 0.1, shape).astype(np.float32), name))
        nodes += [helper.make_node("LSTM", [x, f"W{k}", f"R{k}", f"B{k}"], [f"Y{k}", f"h{k}", f"c{k}"],
                                   hidden_size=hidden),
                  helper.make_node("Squeeze", [f"Y{k}", "axis1"], [f"s{k}"])]
        x = f"s{k}"
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
    f32 = onnx.TensorProto.FLOAT
    graph = helper.make_graph(nodes, "lstm", [helper.make_tensor_value_info("x", f32, [seq, batch, inputs])],
                              [helper.make_tensor_value_info(x, f32, [seq, batch, hidden])], inits)
    opsets = [helper.make_opsetid("", 17)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def lstm_rows(lengths: list[int], threads: int = 1) -> None:
    import onnxruntime as ort

    opc.set_num_threads(threads)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    clock, what = (time.process_time, "CPU") if threads == 1 else (time.perf_counter, "wall")
    print(f"2-layer LSTM (batch 1, 64 in, 128 hidden), {threads} thread(s) | opc first call (import + compile) | "
          f"opc call ({what}) | onnxruntime call ({what}) | max |diff|")

    def row(label: str, m, model, seq: int, first: float) -> None:  # noqa: ANN001
        x = np.random.default_rng(seq).uniform(-1, 1, (seq, 1, 64)).astype(np.float32)
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        diff = float(np.abs(np.asarray(m(x)) - sess.run(None, {"x": x})[0]).max())
        print(f"  {label:>12} seq {seq:4d} | {first * 1e3:9.1f} ms | {cpu_ms(lambda: m(x), clock=clock):8.3f} ms | "
              f"{cpu_ms(lambda: sess.run(None, {'x': x}), clock=clock):8.3f} ms | {diff:.1e}", flush=True)

    with tempfile.TemporaryDirectory() as cache:
        # opc's runtime library is built once per cache: not the model's compile, so built first
        opc.load_onnx(lstm_model(1, layers=1, hidden=8), cache_dir=cache)(np.zeros((1, 1, 64), np.float32))
        for seq in lengths:  # a model per length: no cache hit
            model = lstm_model(seq)
            t = time.perf_counter()
            m = opc.load_onnx(model, cache_dir=cache)
            m(np.zeros((seq, 1, 64), np.float32))
            row("static", m, model, seq, time.perf_counter() - t)
        model = lstm_model("T")
        try:
            t = time.perf_counter()
            m = opc.load_onnx(model, cache_dir=cache)
            m(np.zeros((lengths[0], 1, 64), np.float32))
            first = time.perf_counter() - t
            for seq in lengths:
                t = time.perf_counter()
                m(np.zeros((seq, 1, 64), np.float32))
                row("run-time seq", m, model, seq, first if seq == lengths[0] else time.perf_counter() - t)
        except opc.OpcError as err:
            print(f"  run-time seq: {err}")


def lstm_train_rows(lengths: list[int]) -> None:
    """The gradient of a 1-layer LSTM (the backward loop through time) per sequence length, 1 thread:
    its time per step should not grow with the length."""
    opc.set_num_threads(1)
    print("1-layer LSTM (batch 1, 64 in, 128 hidden) gradient, 1 thread | opc call (CPU) | per step")
    for seq in lengths:
        module, params = opc.import_onnx(lstm_model(seq, layers=1))
        c = opc.compile(module, grad=True)
        names = [n for n, _, _ in c.lstm.sig.inputs]
        x = np.random.default_rng(seq).uniform(-1, 1, (seq, 1, 64)).astype(np.float32)
        args = [x, *(params[n] for n in names[1:])]
        d = np.ones_like(c.lstm(*args))
        ms = cpu_ms(lambda args=args, d=d, c=c: c.lstm_grad(*args, d), calls=5)
        print(f"  seq {seq:4d} | {ms:8.3f} ms | {ms / seq * 1e3:6.2f} us", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--only", choices=["loop", "scan", "if", "lstm", "lstm-train"])
    ap.add_argument("--seq", type=int, nargs="+", default=[64, 300], help="the LSTM's sequence lengths")
    ap.add_argument("--threads", type=int, default=1, help="the LSTM forward's threads, opc's and onnxruntime's "
                    "(above 1: wall time)")
    args = ap.parse_args()
    if args.only in (None, "loop"):
        loop_rows()
    if args.only in (None, "scan"):
        scan_rows()
    if args.only in (None, "if"):
        if_rows()
    if args.only in (None, "lstm"):
        lstm_rows(args.seq, args.threads)
    if args.only in (None, "lstm-train"):
        lstm_train_rows(args.seq)


def loop_rows() -> None:
    trip_count_rows(counted_loop_model(), feeds_for_loop, "Loop, trip count an input")


def scan_rows() -> None:
    """A Loop stacking a [3] row per iteration (its scan output), the trip count an input: the stacked
    result's rows are read from M at run time, so every count runs on the first call's module."""
    for stop_at, what in ((None, "scf.for"), (40.0, "scf.while, stops when sum(s) >= 40")):
        def feeds(n: int, stop_at: float | None = stop_at) -> dict:
            return {"M": np.array(n, np.int64), "s0": np.zeros(3, np.float32),
                    **({"c": np.array(True)} if stop_at is not None else {})}

        trip_count_rows(scan_loop_model(stop_at), feeds, f"Loop with a scan output ({what})")


def trip_count_rows(model, feeds_for, title: str) -> None:  # noqa: ANN001
    """Per trip count: opc's first call (the compile, on the first count only), its later calls and
    onnxruntime's, from one loaded model."""
    sess = ort_session(model)
    with tempfile.TemporaryDirectory() as cache:
        m = opc.load_onnx(model, cache_dir=cache)
        print(f"{title} | opc first call (compile) | opc call | onnxruntime call")
        for n in (5, 50, 2000):
            feeds = feeds_for(n)
            t = time.perf_counter()
            m(**feeds)
            first = time.perf_counter() - t
            call = best(lambda feeds=feeds: m(**feeds))
            ort_call = best(lambda feeds=feeds: sess.run(None, feeds))
            print(f"  {n:5d} trips | {first * 1e3:9.1f} ms | {call * 1e3:8.3f} ms | {ort_call * 1e3:8.3f} ms")


def if_rows() -> None:
    model = heavy_if_model()
    sess = ort_session(model)
    x = np.random.default_rng(0).uniform(-0.1, 0.1, (256, 256)).astype(np.float32)
    with tempfile.TemporaryDirectory() as cache:
        m = opc.load_onnx(model, cache_dir=cache)
        print("If, heavy branch (8 matmuls 256x256) | opc call | onnxruntime call")
        calls = {}
        for cond in (True, False):
            feeds = {"cond": np.array(cond), "x": x}
            m(**feeds)
            calls[cond] = best(lambda f=feeds: m(**f))
            print(f"  taken={cond!s:5} | {calls[cond] * 1e3:8.3f} ms | "
                  f"{best(lambda f=feeds: sess.run(None, f)) * 1e3:8.3f} ms")
        print(f"  not taken / taken: {100 * calls[False] / calls[True]:.1f}% (goal: under 30%)")


if __name__ == "__main__":
    main()
