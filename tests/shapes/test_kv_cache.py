"""A decoder with a key/value cache, exported by PyTorch with a dynamic batch, prompt length and
cache length (tests/models/export_kv_decoder.py): opc.load_onnx compiles it once and every call,
an empty cache, a prompt, one token on a long cache, agrees with onnxruntime."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx_helpers import EXAMPLES, ort

import opc

MODEL = Path(__file__).resolve().parents[1] / "models" / "kv_decoder.onnx"
sys.path.insert(0, str(EXAMPLES))
from kv_cache_decode import HEAD_DIM, HEADS, LAYERS, decode  # noqa: E402


@functools.cache
def models():  # noqa: ANN201
    return opc.load_onnx(str(MODEL)), ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(("batch", "new", "past"), [(1, 1, 0), (1, 8, 0), (2, 1, 1), (3, 5, 7), (1, 1, 100)])
def test_every_call_one_module(batch, new, past):
    ours, theirs = models()
    rng = np.random.default_rng(batch * 1000 + new * 10 + past)
    ids = rng.integers(0, 256, (batch, new)).astype(np.int64)
    k, v = (rng.standard_normal((LAYERS, batch, HEADS, past, HEAD_DIM)).astype(np.float32) for _ in range(2))
    got = ours(ids, k, v)
    want = theirs.run(None, {"ids": ids, "past_k": k, "past_v": v})
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    assert got[1].shape[3] == past + new
    assert ours.static_reason is None and not ours.variants, ours.static_reason


def test_greedy_decode_gives_onnxruntimes_tokens():
    ours, theirs = models()
    prompt = np.random.default_rng(3).integers(0, 256, (2, 6)).astype(np.int64)
    mine, _, _ = decode(ours, prompt, 12)
    want, _, _ = decode(lambda i, k, v: theirs.run(None, {"ids": i, "past_k": k, "past_v": v}), prompt, 12)
    np.testing.assert_array_equal(mine, want)
