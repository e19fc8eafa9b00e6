"""Tensors with a 0 dimension through the ONNX importer, op kind by op kind, against onnxruntime:
the loops over them run 0 times, a reduction over an empty axis gives its identity (0, -inf, +inf,
1 for a product), a matmul over an empty K gives zeros, and nothing is read out of bounds
(`python -m opc.sanitize tests/frontend/test_onnx_zero_size.py` runs them under ASan).
One module for all cases, compiled with grad=True."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import call, function_name, run_ort, single
from xdsl.dialects.builtin import ModuleOp, StringAttr

import opc

RNG = np.random.default_rng(7)
SHAPES = ((0,), (2, 0, 3), (0, 4), (3, 0))


def cases() -> dict[str, tuple]:
    c = {}
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    for shape in SHAPES:
        tag = "x".join(map(str, shape))
        x = RNG.standard_normal(shape).astype(np.float32)
        c[f"Add_{tag}"] = (single("Add", {"x": x, "y": x}), {"x": x, "y": x})
        c[f"Tanh_{tag}"] = (single("Tanh", {"x": x}), {"x": x})
        c[f"Cast_{tag}"] = (single("Cast", {"x": x}, to=7), {"x": x})
        c[f"Transpose_{tag}"] = (single("Transpose", {"x": x}), {"x": x})
        c[f"Concat_{tag}"] = (single("Concat", {"x": x, "z": x}, axis=0), {"x": x, "z": x})
        # (ReduceMean of nothing is left undefined by ONNX: onnxruntime gives 0, NumPy and opc NaN)
        for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceLogSumExp"):
            c[f"{op}_{tag}_all"] = (single(op, {"x": x}, opset=18), {"x": x})
            c[f"{op}_{tag}_0"] = (single(op, {"x": x}, opset=18, initializers={"a": i64(0)}), {"x": x})
        if shape[-1]:  # the empty axis is not reduced
            c[f"ReduceMean_{tag}"] = (single("ReduceMean", {"x": x}, opset=18, initializers={"a": i64(-1)}), {"x": x})
        c[f"Softmax_{tag}"] = (single("Softmax", {"x": x}, axis=-1), {"x": x})
    # an empty piece next to a full one, an empty batch through a linear layer, an empty K
    a, b = RNG.standard_normal((3, 4)).astype(np.float32), np.zeros((0, 4), np.float32)
    c["Concat_mixed"] = (single("Concat", {"a": a, "b": b}, axis=0), {"a": a, "b": b})
    w = RNG.standard_normal((4, 5)).astype(np.float32)
    c["MatMul_M0"] = (single("MatMul", {"b": b, "w": w}), {"b": b, "w": w})
    k0a, k0b = np.zeros((3, 0), np.float32), np.zeros((0, 2), np.float32)
    c["MatMul_K0"] = (single("MatMul", {"a": k0a, "b": k0b}), {"a": k0a, "b": k0b})
    c["Slice_to_empty"] = (single("Slice", {"a": a}, initializers={"s": i64(2), "e": i64(2), "ax": i64(1)}),
                           {"a": a})
    c["Expand_0"] = (single("Expand", {"a": a[:1]}, initializers={"s": i64(0, 4)}), {"a": a[:1]})
    return c


CASES = cases()


@pytest.fixture(scope="module")
def compiled():
    functions, params = [], {}
    for case_id, (model, feeds) in CASES.items():  # a 0 in a model's shape reads as unknown: sizes given
        module, params[case_id] = opc.import_onnx(model, shapes={n: a.shape for n, a in feeds.items()})
        (f,) = list(module.ops)
        f.detach()
        f.sym_name = StringAttr(function_name(case_id))
        functions.append(f)
    return opc.compile(ModuleOp(functions), grad=True), params


@pytest.mark.parametrize("case_id", list(CASES))
def test_zero_size_matches_onnxruntime(compiled, case_id):
    m, params = compiled
    model, feeds = CASES[case_id]
    got_all, want_all = call(m, case_id, feeds, params[case_id]), run_ort(model, feeds)
    assert len(got_all) == len(want_all)
    for got, want in zip(got_all, want_all):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
