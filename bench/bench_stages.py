"""A model's stages, opc against onnxruntime: each prefix of the model timed whole, and the increments.

    python3 bench/bench_stages.py MODEL.onnx [--stage REGEX] [--threads 1] [--calls 100]

The model is cut after the last node of each stage (node names matching REGEX, group 1 naming
the stage: by default torchvision's `/features/features.N/`, `/layerK/layerK.N/`, `/conv1`,
`/maxpool`); each prefix (onnx.utils.extract_model), and last the whole model, is loaded by both,
and the best of 7 rounds of CALLS calls is taken (CPU time at 1 thread, wall time otherwise). A
stage's cost is the difference between its prefix and the one before.

Why not the profilers: onnxruntime's per-node profiler adds its own time to every node
(MobileNetV2 at 64x64: its node times sum to 563 us, its calls take 436-450), and a lone layer
pays the reorders to and from its blocked layout that a whole model does not; `opc profile` has
neither problem but nothing to set beside it. The prefixes give both a layer's time inside the
model, in the cache and layout state the layers before it leave.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import OPENBLAS_NO_SPIN, best_ms  # noqa: E402

os.environ.setdefault(*OPENBLAS_NO_SPIN)  # before NumPy loads OpenBLAS
import numpy as np  # noqa: E402

TORCHVISION_STAGES = r"^/(features/features\.\d+|layer\d/layer\d\.\d+|conv1|bn1|relu|maxpool)/"


def stage_ends(model, pattern: str) -> list[tuple[str, str]]:  # noqa: ANN001
    """(stage, the output of its last node) in graph order, then the whole model (its first output)."""
    ends: dict[str, str] = {}
    for node in model.graph.node:
        m = re.match(pattern, node.name)
        if m and node.output:
            ends[m.group(1)] = node.output[0]
    return [*ends.items(), ("(the rest: whole model)", model.graph.output[0].name)]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--stage", default=TORCHVISION_STAGES, help="regex on node names; group 1 names the stage")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--calls", type=int, default=100)
    args = ap.parse_args()
    import onnx
    import onnxruntime as ort
    from onnx.utils import extract_model

    import opc

    opc.set_num_threads(args.threads)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    clock, what = (time.process_time, "CPU time") if args.threads == 1 else (time.perf_counter, "wall time")
    model = onnx.load(args.model)
    x_info = model.graph.input[0]
    x = np.random.default_rng(0).standard_normal(
        [d.dim_value for d in x_info.type.tensor_type.shape.dim]).astype(np.float32)
    ends = stage_ends(model, args.stage)
    if len(ends) == 1:
        sys.exit(f"error: no node name matches --stage {args.stage!r}")
    print(f"{args.model}: {len(ends)} stages, {what} per call at {args.threads} thread(s), best of 7 x {args.calls}")
    print(f"{'stage':28s} {'opc us':>9s} {'ort us':>9s} {'+opc':>8s} {'+ort':>8s}  ort/opc of the stage")
    before = (0.0, 0.0)
    with tempfile.TemporaryDirectory() as tmp:
        for name, output in ends:
            path = str(Path(tmp) / "prefix.onnx")
            extract_model(args.model, path, [x_info.name], [output])
            run = opc.load_onnx(path)
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            t_opc = best_ms(lambda: run(x), args.calls, clock, rounds=7) * 1e3  # noqa: B023
            t_ort = best_ms(lambda: sess.run(None, {x_info.name: x}), args.calls, clock, rounds=7) * 1e3  # noqa: B023
            d_opc, d_ort = t_opc - before[0], t_ort - before[1]
            ratio = f"{d_ort / d_opc:.2f}" if d_opc > 0 else "-"
            print(f"{name[-28:]:28s} {t_opc:9.1f} {t_ort:9.1f} {d_opc:8.1f} {d_ort:8.1f}  {ratio}", flush=True)
            before = (t_opc, t_ort)


if __name__ == "__main__":
    main()
