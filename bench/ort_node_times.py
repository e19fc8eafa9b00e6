"""onnxruntime's per-node times for a model, from its own profiler (SessionOptions.enable_profiling):
the median kernel time of each node over the calls after a warm-up, to set beside `opc profile`'s
table (issue 20: the GELU, transpose and mask kernels against onnxruntime's nodes).

    python3 bench/ort_node_times.py block.onnx [--threads 1] [--calls 20]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = os.path.join(tmp, "ort")
        session = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feeds = {}
        for i in session.get_inputs():
            shape = [d if isinstance(d, int) else 1 for d in i.shape]
            feeds[i.name] = (rng.standard_normal(shape).astype(np.float32) if "float" in i.type
                             else np.zeros(shape, np.int64))
        for _ in range(5 + args.calls):
            session.run(None, feeds)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    times: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            times[(e["args"].get("op_name", "?"), e["name"][:-len("_kernel_time")])].append(e["dur"] / 1e3)
    rows = sorted(((float(np.median(v[5:] if len(v) > 5 else v)), op, name) for (op, name), v in times.items()),
                  reverse=True)
    print(f"{args.model}: onnxruntime {ort.__version__}, {args.threads} thread(s), median of {args.calls} calls")
    print("| node | op | ms |\n|---|---|---|")
    for ms, op, name in rows:
        if ms >= 0.005:
            print(f"| {name} | {op} | {ms:.3f} |")
    print(f"| total | | {sum(r[0] for r in rows):.3f} |")


if __name__ == "__main__":
    main()
