"""Run-time shapes: what one compile for every size buys, against compiling per shape and against
onnxruntime and torch, which never compile per shape.

    python3 bench/bench_shapes.py [--threads N] [--tokens 64] [--busy]

1. Decoding with a key/value cache (tests/models/kv_decoder.onnx, a PyTorch decoder exported with
   dynamic batch, prompt and cache lengths): a 16-token prompt, then --tokens greedy tokens, each
   a new cache length. opc (one module, compiled before the clock starts), onnxruntime and torch
   eager (the same weights), the best of 5 interleaved rounds; the tokens must agree.
2. A sequence length sweep on tests/models/gpt2_dynamic.onnx: opc.load_onnx once (run-time sizes)
   against specialize=True (a module per length, the old behaviour), first call to last, 8 lengths.
3. The price of `?`: the dynamic module against the module specialized to one shape, per call.
4. A never-seen shape's first call against a repeat call (the goal: a few ms at most, no compile).

--threads N gives every contender N threads (all cores without it); --busy starts one CPU-bound
process per core first (the figures then show a shared machine).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "models"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import apply_threads, best_of, import_torch, threads  # noqa: E402

KV = ROOT / "tests" / "models" / "kv_decoder.onnx"
GPT2 = ROOT / "tests" / "models" / "gpt2_dynamic.onnx"


def decode_seconds(step, prompt, tokens: int, rounds: int = 5):  # noqa: ANN001, ANN201
    """The best total seconds of `tokens` decode steps after the prompt, and the tokens."""
    from kv_cache_decode import decode

    best, out = float("inf"), None
    for _ in range(rounds):
        out, _, times = decode(step, prompt, tokens)
        best = min(best, sum(times))
    return best, out


def torch_step(torch):  # noqa: ANN001, ANN201
    """The exported decoder in torch eager, its weights the export's (same seed)."""
    from export_kv_decoder import Decoder

    torch.manual_seed(0)
    net = Decoder().eval()

    def step(ids, k, v):  # noqa: ANN001, ANN202
        with torch.inference_mode():
            out = net(torch.from_numpy(ids), torch.from_numpy(k), torch.from_numpy(v))
        return [t.numpy() for t in out]
    return step


def kv_cache_rows(tokens: int) -> None:
    import numpy as np
    import onnxruntime as ort
    from kv_cache_decode import onnxruntime_step

    import opc

    prompt = np.random.default_rng(0).integers(0, 256, (1, 16)).astype(np.int64)
    model = opc.load_onnx(str(KV))
    t0 = time.perf_counter()
    decode_seconds(model, prompt, 1, rounds=1)
    compile_s = time.perf_counter() - t0
    steps = {"opc": model, "onnxruntime": onnxruntime_step(threads())}
    torch = import_torch()
    if torch is not None:
        steps["torch"] = torch_step(torch)
    del ort
    results = {name: decode_seconds(step, prompt, tokens) for name, step in steps.items()}
    for name, (_, toks) in results.items():
        if not (toks == results["onnxruntime"][1]).all():
            raise SystemExit(f"bench: {name}'s tokens differ from onnxruntime's")
    assert model.static_reason is None and not model.variants
    print(f"\n1. key/value cache decode: 16-token prompt, {tokens} tokens (opc compiled once: {compile_s:.2f} s)")
    ours = results["opc"][0]
    for name, (sec, _) in results.items():
        ratio = "" if name == "opc" else f"   {name}/opc {sec / ours:5.2f}x"
        print(f"   {name:12s} {sec * 1e3:8.2f} ms  {tokens / sec:8.0f} tokens/s{ratio}")


def sweep_rows() -> None:
    import numpy as np

    import opc

    lengths = [3, 5, 8, 11, 16, 19, 24, 32]
    rng = np.random.default_rng(1)
    feeds = [(rng.integers(0, 256, (2, n)).astype(np.int64), np.ones((2, n), np.int64)) for n in lengths]
    print(f"\n2. gpt2_dynamic at {len(lengths)} sequence lengths, first call to last (compiles included; "
          "no module cached, the runtime library built before)")
    cache = tempfile.mkdtemp()
    opc.load_onnx(str(GPT2), specialize=True, cache_dir=cache)(*feeds[0])  # the runtime objects, once
    feeds = feeds[1:] + [(np.ones((2, 2), np.int64), np.ones((2, 2), np.int64))]  # lengths not yet built
    for name, specialize in (("one module (run-time sizes)", False), ("a module per length", True)):
        t0 = time.perf_counter()
        model = opc.load_onnx(str(GPT2), specialize=specialize, cache_dir=cache)
        for ids, mask in feeds:
            model(ids, mask)
        print(f"   {name:28s} {time.perf_counter() - t0:7.2f} s  ({len(model.variants) or 1} module(s))")


def first_call_rows() -> None:
    """A never-seen shape's first call against a repeat of it: no compile, only the allocations."""
    import numpy as np

    import opc

    model = opc.load_onnx(str(GPT2))
    model(np.ones((1, 2), np.int64), np.ones((1, 2), np.int64))  # the one compile
    extra = []
    for b, n in [(1, 3), (2, 7), (3, 11), (4, 16), (5, 23), (6, 29), (7, 31), (8, 32)]:
        ids, mask = np.ones((b, n), np.int64), np.ones((b, n), np.int64)
        t0 = time.perf_counter()
        model(ids, mask)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        model(ids, mask)
        extra.append((first - (time.perf_counter() - t0)) * 1e3)
    print("\n4. gpt2_dynamic, 8 never-seen shapes: first call minus a repeat of it")
    print(f"   median {float(np.median(extra)):.3f} ms, max {max(extra):.3f} ms")


def price_rows() -> None:
    import numpy as np

    import opc

    ids, mask = np.ones((4, 32), np.int64), np.ones((4, 32), np.int64)
    dynamic, static = opc.load_onnx(str(GPT2)), opc.load_onnx(str(GPT2), specialize=True)
    np.testing.assert_allclose(dynamic(ids, mask)[0], static(ids, mask)[0], rtol=1e-5, atol=1e-5)
    t = best_of({"dynamic": lambda: dynamic(ids, mask), "static": lambda: static(ids, mask)})
    print("\n3. gpt2_dynamic at batch 4, length 32: the run-time-size module against the one for this shape")
    print(f"   run-time sizes {t['dynamic'] * 1e3:.3f} ms, static {t['static'] * 1e3:.3f} ms, "
          f"static/dynamic {t['static'] / t['dynamic']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--busy", action="store_true")
    args = ap.parse_args()
    n = apply_threads(args.threads)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)] \
        if args.busy else []
    try:
        import opc

        opc.set_num_threads(n)
        print(f"bench_shapes: {n} thread(s){', machine busy (one spinning process per core)' if busy else ''}")
        kv_cache_rows(args.tokens)
        sweep_rows()
        price_rows()
        first_call_rows()
    finally:
        for p in busy:
            p.kill()


if __name__ == "__main__":
    main()
