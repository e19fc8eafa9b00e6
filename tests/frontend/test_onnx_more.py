"""The converters of opc/onnx_import/more_converters.py and the integer forms of Div, Pow and Mod,
imported over a grid of dtypes and attributes and checked against onnx's reference evaluator
(NumPy; onnxruntime lacks BitShift of signed types and the newest opsets). One module for all."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import call, import_all, single

import opc

reference = pytest.importorskip("onnx.reference", reason="onnx's reference evaluator is the oracle here")

RNG = np.random.default_rng(11)
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
SIGNED = ("int8", "int16", "int32", "int64")


def ints(dt: str, shape, low: int = -100, high: int = 100) -> np.ndarray:
    info = np.iinfo(dt)
    return RNG.integers(max(info.min, low), min(info.max, high), size=shape, dtype=dt, endpoint=True)


def cases() -> dict[str, tuple]:
    c: dict[str, tuple] = {}
    for dt in UNSIGNED + SIGNED:
        bits = np.iinfo(dt).bits
        a = ints(dt, (3, 5), -10**6, 10**6)
        counts = np.array([0, 1, bits - 1, bits, 3], dt)  # the width itself: out of range
        opset = 11 if dt in UNSIGNED else 28  # signed shifts came with opset 28
        for direction in ("LEFT", "RIGHT"):
            feeds = {"a": a, "b": counts}
            c[f"BitShift_{direction}_{dt}"] = (single("BitShift", feeds, opset=opset, direction=direction), feeds)
        feeds = {"a": a, "b": ints(dt, (5,), -10**6, 10**6)}
        for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
            c[f"{op}_{dt}"] = (single(op, feeds, opset=18), feeds)
        c[f"BitwiseNot_{dt}"] = (single("BitwiseNot", {"a": a}, opset=18), {"a": a})
        den = ints(dt, (5,), -9, 9)
        den[den == 0] = 3  # ONNX leaves x / 0 of integers undefined
        feeds = {"a": a, "b": den}
        c[f"Div_{dt}"] = (single("Div", feeds), feeds)
        for fmod in (0, 1):
            c[f"Mod_{dt}_fmod{fmod}"] = (single("Mod", feeds, fmod=fmod), feeds)
    for dt in ("int32", "int64"):
        base, exps = ints(dt, (3, 4), -9, 9), ints(dt, (4,), 0, 9)
        feeds = {"a": base, "b": exps}
        c[f"Pow_{dt}_{dt}"] = (single("Pow", feeds), feeds)
        fexp = np.array([0.5, 1.5, 2.0, 3.0], np.float32)
        feeds = {"a": np.abs(base), "b": fexp}
        c[f"Pow_{dt}_float32"] = (single("Pow", feeds), feeds)
        feeds = {"a": np.abs(base)}
        c[f"Pow_{dt}_const_2.5"] = (single("Pow", feeds, initializers={"e": np.array(2.5, np.float32)}), feeds)
    return c


CASES = cases()


@pytest.fixture(scope="module")
def compiled():
    module, params = import_all({k: m for k, (m, _) in CASES.items()})
    return opc.compile(module), params


@pytest.mark.parametrize("case_id", list(CASES))
def test_matches_onnx_reference(compiled, case_id):
    m, params = compiled
    model, feeds = CASES[case_id]
    want = reference.ReferenceEvaluator(model).run(None, feeds)
    got = call(m, case_id, feeds, params[case_id])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
