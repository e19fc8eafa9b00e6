"""ONNX's float6 types (opset 28: FLOAT6E2M3, FLOAT6E3M2) through the importer: a graph input and a
packed initializer cast to f32, Cast from f32/f64/f16 (round to nearest even, overflow to the largest
value: neither type has inf or NaN), and QuantizeLinear/DequantizeLinear with a float6 side, per
tensor and per axis. Opset 28 admits float6 in Cast, QuantizeLinear and DequantizeLinear only (no
Constant), so those are the ops tested. Oracle: ml_dtypes' own conversions (`astype`)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx_helpers import call, graph_model, helper, import_all

import opc

FLOAT6 = {27: ml_dtypes.float6_e2m3fn, 28: ml_dtypes.float6_e3m2fn}
SOURCES = {"f32": np.float32, "f64": np.float64, "f16": np.float16}
SHAPE = (3, 8)


def edges(t: int) -> np.ndarray:
    """f64 values that find a float6 type's edges: every value, the ties between neighbours and just
    beside them, max and past it, tiny values, +-0, inf, NaN."""
    every = np.arange(64, dtype=np.uint8).view(FLOAT6[t]).astype(np.float64)
    finite = np.unique(every)
    mids = (finite[:-1] + finite[1:]) / 2
    mx = float(finite.max())
    more = [mx * 1.01, mx * 4, -mx * 4, 1e-30, -1e-30, -0.0, np.inf, -np.inf, np.nan]
    return np.concatenate([finite, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf), more])


def case_models() -> dict[str, tuple]:
    """case id -> (model, feeds, the scale where the case quantizes)."""
    cases = {}
    rng = np.random.default_rng(6)
    for t, dt in FLOAT6.items():
        x = rng.uniform(-8, 8, SHAPE).astype(dt)
        w = np.arange(64, dtype=np.uint8).view(dt)[::-1].reshape(8, 8).copy()  # every bit pattern, packed by ONNX
        nodes = [helper.make_node("Cast", ["x"], ["xf"], to=1), helper.make_node("Cast", ["w"], ["wf"], to=1)]
        cases[f"io_{t}"] = (graph_model(nodes, {"x": x}, ["xf", "wf"], {"w": w}, opset=28), {"x": x}, None)
        for name, src in SOURCES.items():
            v = edges(t).astype(src)
            nodes = [helper.make_node("Cast", ["v"], ["q"], to=t), helper.make_node("Cast", ["q"], ["y"], to=1)]
            cases[f"cast_{name}_{t}"] = (graph_model(nodes, {"v": v}, ["y"], opset=28), {"v": v}, None)
        f = rng.uniform(-40, 40, SHAPE).astype(np.float32)
        for axis in (None, 1):
            scale = (np.float32(2.5) if axis is None else rng.uniform(0.5, 4, SHAPE[1]).astype(np.float32))
            zero = np.zeros(np.shape(scale), dt)
            attrs = {} if axis is None else {"axis": axis}
            nodes = [helper.make_node("QuantizeLinear", ["f", "s", "z"], ["q"], **attrs),
                     helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], **attrs),
                     helper.make_node("Cast", ["q"], ["qf"], to=1)]
            key = f"quant_{'tensor' if axis is None else 'axis'}_{t}"
            cases[key] = (graph_model(nodes, {"f": f}, ["qf", "d"], {"s": scale, "z": zero}, opset=28), {"f": f}, scale)
    return cases


CASES = case_models()


@pytest.fixture(scope="module")
def compiled():
    module, weights = import_all({k: m for k, (m, _, _) in CASES.items()})
    return opc.compile(module), weights


def as_f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float32)


@pytest.mark.parametrize("t", FLOAT6)
def test_input_and_packed_initializer(compiled, t):
    m, weights = compiled
    feeds = CASES[f"io_{t}"][1]
    xf, wf = call(m, f"io_{t}", feeds, weights[f"io_{t}"])
    np.testing.assert_array_equal(xf, as_f32(feeds["x"]))
    w = np.arange(64, dtype=np.uint8).view(FLOAT6[t])[::-1].reshape(8, 8)
    np.testing.assert_array_equal(wf, as_f32(w))


@pytest.mark.parametrize("src", SOURCES)
@pytest.mark.parametrize("t", FLOAT6)
def test_cast_matches_ml_dtypes(compiled, t, src):
    """Nearest even, overflow and +-inf to +-max; NaN as ml_dtypes gives it (a signed zero)."""
    m, weights = compiled
    case = f"cast_{src}_{t}"
    v = CASES[case][1]["v"]
    (y,) = call(m, case, {"v": v}, weights[case])
    with np.errstate(over="ignore", invalid="ignore"):
        want = v.astype(FLOAT6[t]).astype(np.float32)
    np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32))  # -0.0 and 0.0 told apart


@pytest.mark.parametrize("mode", ["tensor", "axis"])
@pytest.mark.parametrize("t", FLOAT6)
def test_quantize_dequantize(compiled, t, mode):
    m, weights = compiled
    case = f"quant_{mode}_{t}"
    _, feeds, s = CASES[case]
    f = feeds["f"]
    qf, d = call(m, case, {"f": f}, weights[case])
    q = (f / s).astype(FLOAT6[t])
    np.testing.assert_array_equal(qf, as_f32(q))
    np.testing.assert_array_equal(d, as_f32(q) * s)
