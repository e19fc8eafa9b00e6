"""Ranks 5 to 8 (opc's MAX_RANK) through the ONNX importer, op kind by op kind, against
onnxruntime: one module for all cases, compiled with grad=True (the gradient functions of
every op must build at rank 8 too); a rank-9 result is refused (tests/frontend/test_onnx_cli.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import call, import_all, run_ort, single

import opc

RNG = np.random.default_rng(5)
SIZES = (2, 1, 3, 2, 1, 2, 1, 3)


def cases() -> dict[str, tuple]:
    c = {}
    for rank in (5, 6, 8):
        shape = SIZES[:rank]
        x = RNG.standard_normal(shape).astype(np.float32)
        y = RNG.standard_normal(shape[1:]).astype(np.float32)
        i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
        c[f"Add_{rank}"] = (single("Add", {"x": x, "y": y}), {"x": x, "y": y})
        c[f"Tanh_{rank}"] = (single("Tanh", {"x": x}), {"x": x})
        c[f"Transpose_{rank}"] = (single("Transpose", {"x": x}, perm=list(range(rank))[::-1]), {"x": x})
        c[f"ReduceSum_{rank}"] = (single("ReduceSum", {"x": x}, initializers={"a": i64(1, rank - 1)}), {"x": x})
        c[f"ReduceMax_{rank}"] = (single("ReduceMax", {"x": x}, opset=13, axes=[0, 2], keepdims=0), {"x": x})
        c[f"Softmax_{rank}"] = (single("Softmax", {"x": x}, axis=2), {"x": x})
        c[f"Concat_{rank}"] = (single("Concat", {"x": x, "z": x}, axis=rank - 2), {"x": x, "z": x})
        c[f"Slice_{rank}"] = (single("Slice", {"x": x}, initializers={"s": i64(1), "e": i64(3), "a": i64(2)}), {"x": x})
        c[f"Expand_{rank}"] = (single("Expand", {"x": x}, initializers={"s": i64(*(2, 2, 3, 2, 4, 2, 3, 3)[:rank])}),
                               {"x": x})
        idx = i64(0, 2, 1)
        c[f"Gather_{rank}"] = (single("Gather", {"x": x, "i": idx}, axis=2), {"x": x, "i": idx})
        a = RNG.standard_normal(shape[:rank - 2] + (3, 4)).astype(np.float32)
        b = RNG.standard_normal(shape[:rank - 2] + (4, 2)).astype(np.float32)
        c[f"MatMul_{rank}"] = (single("MatMul", {"a": a, "b": b}), {"a": a, "b": b})
        c[f"Reshape_{rank}"] = (single("Reshape", {"x": x}, initializers={"s": i64(-1, *shape[2:])}), {"x": x})
    return c


CASES = cases()


@pytest.fixture(scope="module")
def compiled():
    module, params = import_all({k: m for k, (m, _) in CASES.items()})
    return opc.compile(module, grad=True), params


@pytest.mark.parametrize("case_id", list(CASES))
def test_high_rank_matches_onnxruntime(compiled, case_id):
    m, params = compiled
    model, feeds = CASES[case_id]
    for got, want in zip(call(m, case_id, feeds, params[case_id]), run_ort(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
