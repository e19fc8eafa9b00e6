"""Greedy decoding with a key/value cache: every step is a new cache length, one compiled module.

    python3 examples/kv_cache_decode.py [--tokens 64] [--prompt 8] [--batch 1] [--threads N] [--rounds 5]

The model is tests/models/kv_decoder.onnx (made by tests/models/export_kv_decoder.py, a tiny
PyTorch decoder exported with a dynamic batch, prompt length and cache length). opc.load_onnx
compiles it once, on the first call; the prompt (past = 0) and every generated token
(new = 1, past growing by one) then run through that module. onnxruntime decodes the same
prompt beside it: the tokens must agree. Prints the compile, the prompt and the per-token
times of both (the best of --rounds interleaved rounds), and the tokens per second.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import opc

MODEL = Path(__file__).resolve().parents[1] / "tests" / "models" / "kv_decoder.onnx"
LAYERS, HEADS, HEAD_DIM = 2, 4, 16

Step = Callable[[np.ndarray, np.ndarray, np.ndarray], list[np.ndarray]]


def decode(step: Step, prompt: np.ndarray, tokens: int) -> tuple[np.ndarray, float, list[float]]:
    """The generated tokens [batch, tokens], the prompt's time and each token's time (seconds)."""
    empty = np.zeros((LAYERS, prompt.shape[0], HEADS, 0, HEAD_DIM), np.float32)
    t0 = time.perf_counter()
    logits, k, v = step(prompt, empty, empty)
    prompt_s = time.perf_counter() - t0
    out, times = [], []
    for _ in range(tokens):
        nxt = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
        out.append(nxt)
        t0 = time.perf_counter()
        logits, k, v = step(nxt, k, v)
        times.append(time.perf_counter() - t0)
    return np.concatenate(out, axis=1), prompt_s, times


def onnxruntime_step(threads: int) -> Step:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(str(MODEL), so, providers=["CPUExecutionProvider"])
    return lambda ids, k, v: sess.run(None, {"ids": ids, "past_k": k, "past_v": v})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    opc.set_num_threads(args.threads)
    prompt = np.random.default_rng(0).integers(0, 256, (args.batch, args.prompt)).astype(np.int64)

    model = opc.load_onnx(str(MODEL))
    t0 = time.perf_counter()
    model(prompt[:, :1], *[np.zeros((LAYERS, args.batch, HEADS, 0, HEAD_DIM), np.float32)] * 2)
    compile_s = time.perf_counter() - t0
    theirs_step = onnxruntime_step(args.threads)
    best: dict[str, tuple[np.ndarray, float, list[float]]] = {}
    for _ in range(args.rounds):  # interleaved: both see the same machine; the best round of each
        for name, step in (("opc", model), ("onnxruntime", theirs_step)):
            run = decode(step, prompt, args.tokens)
            if name not in best or sum(run[2]) < sum(best[name][2]):
                best[name] = run
    assert model.static_reason is None and not model.variants, "compiled once, for every size"
    (ours, ours_prompt, ours_times), (theirs, ort_prompt, ort_times) = best["opc"], best["onnxruntime"]

    print(f"{args.tokens} tokens after a {args.prompt}-token prompt, batch {args.batch}, {args.threads} thread(s)")
    print(f"opc: first call (compile) {compile_s:.2f} s, then one module for every cache length")
    for name, p, ts in (("opc", ours_prompt, ours_times), ("onnxruntime", ort_prompt, ort_times)):
        print(f"  {name:12s} prompt {p * 1e3:7.2f} ms   per token {np.median(ts) * 1e3:6.3f} ms (median)"
              f"   {args.tokens} tokens {sum(ts) * 1e3:8.2f} ms   {args.tokens * args.batch / sum(ts):8.0f} tokens/s")
    same = bool((ours == theirs).all())
    print(f"tokens agree with onnxruntime: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
