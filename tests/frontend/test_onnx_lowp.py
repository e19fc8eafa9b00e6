"""ONNX's low-precision types through the importer: float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0),
float4 e2m1, int4/uint4, int2/uint2 as graph inputs, initializers and Constant values (ONNX packs the
4- and 2-bit ones two and four to a byte; onnx.numpy_helper unpacks them), Cast/CastLike with
`saturate` and `round_mode`, QuantizeLinear/DequantizeLinear per tensor, per axis and per block, and
a weight-only quantized MatMul. Every case is imported into one module and compared with onnx's
reference evaluator (onnxruntime has kernels for few of these types), bit for bit but for the f32
GEMM, which rounds its sums in another order."""

from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np
import pytest
from onnx_helpers import call, graph_model, helper, import_all, numpy_helper

import opc

# ONNX's element type number -> ml_dtypes
LOWP = {17: ml_dtypes.float8_e4m3fn, 18: ml_dtypes.float8_e4m3fnuz, 19: ml_dtypes.float8_e5m2,
        20: ml_dtypes.float8_e5m2fnuz, 24: ml_dtypes.float8_e8m0fnu, 23: ml_dtypes.float4_e2m1fn,
        22: ml_dtypes.int4, 21: ml_dtypes.uint4, 26: ml_dtypes.int2, 25: ml_dtypes.uint2}  # fmt: skip
FLOAT8 = (17, 18, 19, 20)  # Cast's saturate applies to these
SUB_BYTE = (22, 21, 26, 25)
QUANT_TARGETS = (*SUB_BYTE, *FLOAT8, 23)  # what QuantizeLinear writes (not e8m0)
SHAPE = (3, 8)


def rng_for(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def values_of(t: int, rng: np.random.Generator, shape=SHAPE) -> np.ndarray:
    """Random values of ONNX type t, over its range (e8m0: powers of two around 1)."""
    dt = np.dtype(LOWP[t])
    if t in SUB_BYTE:
        info = ml_dtypes.iinfo(dt)
        return rng.integers(int(info.min), int(info.max) + 1, size=shape).astype(dt)
    if t == 24:
        return np.exp2(rng.integers(-6, 7, size=shape)).astype(dt)
    return rng.uniform(-6, 6, size=shape).astype(dt)


def edges(t: int, dtype) -> np.ndarray:
    """Values in `dtype` around type t's edges: max and past it, ties, tiny values, inf, NaN, +-0."""
    if t in SUB_BYTE:
        info = ml_dtypes.iinfo(LOWP[t])
        x = [*np.arange(float(info.min) - 3, float(info.max) + 3, 0.5), np.nan, np.inf, -np.inf, 1e4, -1e4]
    else:
        mx = float(ml_dtypes.finfo(LOWP[t]).max)
        tiny = float(ml_dtypes.finfo(LOWP[t]).smallest_subnormal)
        x = [mx, -mx, mx * 1.0625, mx * 1.2, -mx * 1.2, mx * 4, tiny, tiny / 2, tiny * 1.5, 0.0, -0.0, 0.3, -2.75,
             1.5, 3.0, 0.75, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 65504.0, 1e6, -1e6]
    with np.errstate(over="ignore"):
        return np.resize(np.array(x, np.float64), SHAPE).astype(dtype)


def io_case(t: int):
    """A graph input, an initializer and a Constant of type t, each cast to f32."""
    rng = rng_for("io", t)
    x, w, c = (values_of(t, rng) for _ in range(3))
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(c, "c")),
             *(helper.make_node("Cast", [n], [f"y_{n}"], to=1) for n in "xwc")]
    return graph_model(nodes, {"x": x}, ["y_x", "y_w", "y_c"], {"w": w}, opset=25), {"x": x}


def cast_case(t: int, src, saturate: int | None, like: bool = False):
    x = edges(t, src)
    attrs = {} if saturate is None else {"saturate": saturate}
    if like:
        node = helper.make_node("CastLike", ["x", "like"], ["y"], **attrs)
        inits = {"like": np.zeros((1,), LOWP[t])}
    else:
        node, inits = helper.make_node("Cast", ["x"], ["y"], to=t, **attrs), None
    return graph_model([node], {"x": x}, ["y"], inits, opset=25), {"x": x}


def cast_from_case(t: int, to: int):
    x = values_of(t, rng_for("from", t, to))
    return graph_model([helper.make_node("Cast", ["x"], ["y"], to=to)], {"x": x}, ["y"], opset=25), {"x": x}


def e8m0_case(mode: str, saturate: int):
    x = np.resize(np.array([0.3, 1.0, 1.5, 1.25, 1.75, 3.0, 6.0, 7.9, 2.0**-126, 2.0**-127, 3e38, 1e-40, -4.0,
                            0.0, np.inf, np.nan, 1e20, 2.0**127 * 1.9], np.float32), SHAPE)
    node = helper.make_node("Cast", ["x"], ["y"], to=24, round_mode=mode, saturate=saturate)
    return graph_model([node], {"x": x}, ["y"], opset=25), {"x": x}


def scale_of(rng, mode: str, shape, axis: int, block: int) -> np.ndarray:
    if mode == "tensor":
        return np.asarray(rng.uniform(0.05, 0.5), np.float32)
    if mode == "axis":
        return rng.uniform(0.05, 0.5, shape[axis]).astype(np.float32)
    blocked = list(shape)
    blocked[axis] = -(-shape[axis] // block)
    return rng.uniform(0.05, 0.5, blocked).astype(np.float32)


def zero_point_of(rng, t: int, scale: np.ndarray) -> np.ndarray:
    """A zero point of type t: small integers for int4/int2, 0 for the floats (as ONNX uses them)."""
    if t in SUB_BYTE:
        info = ml_dtypes.iinfo(LOWP[t])
        return rng.integers(int(info.min), int(info.max) + 1, scale.shape).astype(LOWP[t])
    return np.zeros(scale.shape, LOWP[t])


def quant_attrs(mode: str, axis: int, block: int) -> dict:
    return {"axis": axis} | ({"block_size": block} if mode == "block" else {})


def quantize_case(t: int, mode: str):
    rng = rng_for("q", t, mode)
    shape, axis, block = (3, 8, 5), 1, 3
    x = rng.uniform(-4, 4, shape).astype(np.float32)
    x.reshape(-1)[:6] = [0.5, 1.5, -2.5, 1e4, -1e4, 0.0]  # ties round to even; saturation
    s = scale_of(rng, mode, shape, axis, block)
    node = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"], **quant_attrs(mode, axis, block))
    inits = {"s": s, "zp": zero_point_of(rng, t, s)}
    return graph_model([node], {"x": x}, ["y"], inits, opset=25), {"x": x}


def dequantize_case(t: int, mode: str):
    rng = rng_for("dq", t, mode)
    shape, axis, block = (4, 6, 3), 1, 4
    q = values_of(t, rng, shape)
    s = scale_of(rng, mode, shape, axis, block)
    node = helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], **quant_attrs(mode, axis, block))
    inits = {"s": s, "zp": zero_point_of(rng, t, s)}
    return graph_model([node], {"q": q}, ["y"], inits, opset=25), {"q": q}


def weight_only_matmul_case(t: int, mode: str):
    """x @ DequantizeLinear(w): the weight-only quantized GEMM exporters write (int4 blocks, float8)."""
    rng = rng_for("wmm", t, mode)
    x = rng.uniform(-1, 1, (5, 16)).astype(np.float32)
    w = values_of(t, rng, (16, 6))
    s = scale_of(rng, mode, (16, 6), 0, 8)
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "zp"], ["wf"], **quant_attrs(mode, 0, 8)),
             helper.make_node("MatMul", ["x", "wf"], ["y"])]
    inits = {"w": w, "s": s, "zp": zero_point_of(rng, t, s)}
    return graph_model(nodes, {"x": x}, ["y"], inits, opset=25), {"x": x}


MODES = ("tensor", "axis", "block")
CASES = {
    **{f"io-{t}": (lambda t=t: io_case(t)) for t in LOWP},
    **{f"cast-{np.dtype(s).name}-to-{t}-sat{sat}": (lambda t=t, s=s, sat=sat: cast_case(t, s, sat))
       for t in (*FLOAT8, 23, *SUB_BYTE) for s in (np.float32, np.float16, ml_dtypes.bfloat16)
       for sat in ((None, 0) if t in FLOAT8 else (None,))},
    **{f"castlike-{t}-sat{sat}": (lambda t=t, sat=sat: cast_case(t, np.float32, sat, like=True))
       for t in (*FLOAT8, 23, *SUB_BYTE) for sat in ((None, 0) if t in FLOAT8 else (None,))},
    **{f"cast-{t}-to-{to}": (lambda t=t, to=to: cast_from_case(t, to)) for t in LOWP for to in (1, 10, 16, 7)},
    **{f"cast-e8m0-{m}-sat{s}": (lambda m=m, s=s: e8m0_case(m, s)) for m in ("up", "down", "nearest") for s in (0, 1)},
    **{f"quantize-{t}-{m}": (lambda t=t, m=m: quantize_case(t, m)) for t in QUANT_TARGETS for m in MODES},
    **{f"dequantize-{t}-{m}": (lambda t=t, m=m: dequantize_case(t, m)) for t in QUANT_TARGETS for m in MODES},
    **{f"matmul-dq-{t}-{m}": (lambda t=t, m=m: weight_only_matmul_case(t, m)) for t in (22, 21, 17, 23)
       for m in ("axis", "block")},
}


@pytest.fixture(scope="module")
def compiled():
    built = {cid: make() for cid, make in CASES.items()}
    module, params = import_all({cid: m for cid, (m, _) in built.items()})
    return opc.compile(module), params, built


def reference(model, feeds) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    with np.errstate(all="ignore"):
        return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, feeds)]


def assert_same(got: np.ndarray, want: np.ndarray, gemm: bool) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.kind == "f" and gemm:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)  # every type here is exact in f64
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    np.testing.assert_array_equal(g[~np.isnan(w)], w[~np.isnan(w)])


@pytest.mark.parametrize("cid", list(CASES))
def test_matches_onnx_reference(compiled, cid: str) -> None:
    m, params, built = compiled
    model, feeds = built[cid]
    got, want = call(m, cid, feeds, params[cid]), reference(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same(g, w, gemm=cid.startswith("matmul"))


def test_initializers_are_read_as_onnx_packs_them() -> None:
    """The io cases' premise: ONNX stores int4 two to a byte, low nibble first (numpy_helper packs
    them so) and reads them back as the values they were (as it reads int8 initializers: constants)."""
    w4 = np.array([[1, -2, 3], [-8, 7, 0]], ml_dtypes.int4)
    assert list(numpy_helper.from_array(w4, "w4").raw_data) == [0x1 | 0xE << 4, 0x3 | 0x8 << 4, 0x7]
    w8 = np.array([[1.5, -2, 448], [-0.25, 7, 0]], ml_dtypes.float8_e4m3fn)
    x = np.zeros((2, 3), np.float32)
    nodes = [helper.make_node("Cast", ["w4"], ["a"], to=1), helper.make_node("Cast", ["w8"], ["b"], to=1),
             helper.make_node("Add", ["a", "b"], ["ab"]), helper.make_node("Add", ["x", "ab"], ["y"])]
    model = graph_model(nodes, {"x": x}, ["y"], {"w4": w4, "w8": w8}, opset=25)
    module, weights = opc.import_onnx(model)
    got = opc.compile(module).main_graph(x, *weights.values())
    np.testing.assert_array_equal(got, w4.astype(np.float32) + w8.astype(np.float32))
