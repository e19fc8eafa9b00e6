"""A model's forward, opc (opc.load_onnx) against onnxruntime, at 1 thread as CPU time per call:
process time is what a busy machine disturbs least (wall time there includes other processes' turns);
with --threads N (all cores: N = os.cpu_count()) both get N threads and the time is wall time.
With --train, a training step instead: the forward and the gradients of sum(y * dy) w.r.t. the
input and every weight, opc (compiled with grad=True, NAME_value_and_grad) against torch eager
autograd running the same graph node by node (bench/onnx_peers.py).

    python3 bench/bench_models_cpu.py [mobilenet_v2 resnet18 ...] [--calls 30] [--threads N] [--train]
                                      [--fold-bn]

--fold-bn: each BatchNorm folded into its Conv first (tests/models/fold_batch_norm.py), the graph
torch.onnx.export makes in eval mode, its default; the rows are named `model+fold`.

Models are tests/models' exports with their seeded weights (tests/models/seeded_weights.py). Each
figure is the best of 5 rounds of --calls calls; onnxruntime runs with 1 intra- and 1 inter-op
thread (N intra-op threads) and no spinning. Prints the largest difference of the outputs too."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

MODELS = Path(__file__).resolve().parents[1] / "tests" / "models"
sys.path.insert(0, str(MODELS))
from fold_batch_norm import fold_batch_norms  # noqa: E402
from seeded_weights import fill_initializers  # noqa: E402

import opc  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import best_ms  # noqa: E402
from onnx_peers import onnx_torch_train  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["mobilenet_v2", "resnet18"])
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--train", action="store_true", help="a training step against torch eager")
    ap.add_argument("--fold-bn", action="store_true", help="BatchNorms folded into their Convs (torch's eval export)")
    args = ap.parse_args()
    if args.train:
        train_rows(args)
        return
    opc.set_num_threads(args.threads)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
    clock, what = (time.process_time, "CPU time") if args.threads == 1 else (time.perf_counter, "wall time")
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    for name in args.models:
        model = fill_initializers(onnx.load(str(MODELS / f"{name}.onnx")))
        if args.fold_bn:
            model, name = fold_batch_norms(model), f"{name}+fold"
        x_info = model.graph.input[0]
        x = np.random.default_rng(0).standard_normal(
            [d.dim_value for d in x_info.type.tensor_type.shape.dim]).astype(np.float32)
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        run = opc.load_onnx(model)
        ours = run(x)
        ours = ours[0] if isinstance(ours, (list, tuple)) else ours
        theirs = sess.run(None, {x_info.name: x})[0]
        t_opc = best_ms(lambda: run(x), args.calls, clock)
        t_ort = best_ms(lambda: sess.run(None, {x_info.name: x}), args.calls, clock)
        print(f"{name}: opc {t_opc:.2f} ms, onnxruntime {t_ort:.2f} ms, onnxruntime/opc {t_ort / t_opc:.2f} "
              f"({what} per call, {args.threads} thread(s); "
              f"max |diff| {float(np.abs(np.asarray(ours) - theirs).max()):.1e})",
              flush=True)


def train_rows(args: argparse.Namespace) -> None:
    import torch

    opc.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    clock, what = (time.process_time, "CPU time") if args.threads == 1 else (time.perf_counter, "wall time")
    for name in args.models:
        model = fill_initializers(onnx.load(str(MODELS / f"{name}.onnx")))
        module, params = opc.import_onnx(model)
        t0 = time.perf_counter()
        step = opc.compile(module, grad=True).main_graph_value_and_grad
        compile_s = time.perf_counter() - t0
        weights = list(params.values())
        rng = np.random.default_rng(0)
        x_info = model.graph.input[0]
        x = rng.standard_normal([d.dim_value for d in x_info.type.tensor_type.shape.dim]).astype(np.float32)
        dy = rng.standard_normal([d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
                                 ).astype(np.float32)
        theirs = onnx_torch_train(torch, model)
        tx, tdy = torch.from_numpy(x), torch.from_numpy(dy)
        ours = step(x, *weights, dy)
        y, dx = ours[0], ours[1]
        ty, tdx, _ = theirs(tx, tdy)
        assert tdx is not None  # x requires grad
        diff = max(float(np.abs(y - ty.detach().numpy()).max()), float(np.abs(dx - tdx.numpy()).max()))
        t_opc = best_ms(lambda: step(x, *weights, dy), args.calls, clock)
        t_torch = best_ms(lambda: theirs(tx, tdy), args.calls, clock)
        print(f"{name} training step: opc {t_opc:.2f} ms, torch eager {t_torch:.2f} ms, torch/opc "
              f"{t_torch / t_opc:.2f} ({what} per step, {args.threads} thread(s); opc compile {compile_s:.1f} s; "
              f"max |diff| of y and dx {diff:.1e})", flush=True)


if __name__ == "__main__":
    main()
