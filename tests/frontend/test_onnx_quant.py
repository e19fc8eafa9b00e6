"""ONNX quantization ops (opc/onnx_import/quantization.py): every case imported into one module
and compared bit for bit with onnxruntime (onnx's reference evaluator where onnxruntime lacks the
op for that dtype), over integer types, per-tensor/per-axis/blocked scales and input dtypes."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from onnx_helpers import call, graph_model, helper, import_all, run_ort

import opc

INTS = {"uint8": np.uint8, "int8": np.int8, "uint16": np.uint16, "int16": np.int16}


def rng_for(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def scales(rng, shape, mode: str, axis: int, block: int, dtype) -> np.ndarray:
    if mode == "tensor":
        return np.asarray(rng.uniform(0.01, 0.1), dtype)
    if mode == "axis":
        return rng.uniform(0.01, 0.1, shape[axis]).astype(dtype)
    blocked = list(shape)
    blocked[axis] = -(-shape[axis] // block)
    return rng.uniform(0.01, 0.1, blocked).astype(dtype)


def zero_points(rng, scale: np.ndarray, itype) -> np.ndarray:
    info = np.iinfo(itype)
    return rng.integers(max(info.min, -20), min(info.max, 20) + 1, scale.shape).astype(itype)


def quantize_case(itype: str, mode: str, xdtype=np.float32):
    rng = rng_for("q", itype, mode, np.dtype(xdtype).name)
    shape, axis, block = (3, 8, 5), 1, 3
    x = rng.uniform(-6, 6, shape).astype(xdtype)
    x.reshape(-1)[:4] = np.array([0.5, 1.5, -2.5, 6e4], xdtype)  # ties round to even; saturation
    s = scales(rng, shape, mode, axis, block, xdtype)
    zp = zero_points(rng, s, INTS[itype])
    attrs = {"axis": axis} | ({"block_size": block} if mode == "block" else {})
    node = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"], **attrs)
    feeds = {"x": x}
    return graph_model([node], feeds, ["y"], {"s": s, "zp": zp}, opset=21), feeds


def dequantize_case(itype: str, mode: str):
    rng = rng_for("dq", itype, mode)
    shape, axis, block = (4, 6, 3), 1, 4
    info = np.iinfo(INTS[itype])
    q = rng.integers(info.min, info.max, shape, endpoint=True).astype(INTS[itype])
    s = scales(rng, shape, mode, axis, block, np.float32)
    zp = zero_points(rng, s, INTS[itype])
    attrs = {"axis": axis} | ({"block_size": block} if mode == "block" else {})
    node = helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], **attrs)
    feeds = {"q": q}
    return graph_model([node], feeds, ["y"], {"s": s, "zp": zp}, opset=21), feeds


def dynamic_case(spread: str):
    rng = rng_for("dyn", spread)
    x = {"both": rng.uniform(-3, 5, (4, 7)), "positive": rng.uniform(1, 5, (4, 7)),
         "negative": rng.uniform(-5, -1, (4, 7))}[spread].astype(np.float32)
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zp"])
    return graph_model([node], {"x": x}, ["y", "scale", "zp"], opset=11), {"x": x}


def qlinear_matmul_case(itype: str, batched: bool, sdtype=np.float32):
    rng = rng_for("qmm", itype, batched, np.dtype(sdtype).name)
    info = np.iinfo(INTS[itype])
    a = rng.integers(info.min, info.max, (2, 3, 9) if batched else (3, 9), endpoint=True).astype(INTS[itype])
    b = rng.integers(info.min, info.max, (9, 4), endpoint=True).astype(INTS[itype])
    inits = {"a_s": np.asarray(0.02, sdtype), "a_zp": np.asarray(3, INTS[itype]),
             "b_s": np.asarray(0.03, sdtype), "b_zp": np.asarray(5, INTS[itype]),
             "y_s": np.asarray(0.5, sdtype), "y_zp": np.asarray(7, INTS[itype])}
    node = helper.make_node("QLinearMatMul", ["a", "a_s", "a_zp", "b", "b_s", "b_zp", "y_s", "y_zp"], ["y"])
    feeds = {"a": a, "b": b}
    return graph_model([node], feeds, ["y"], inits, opset=21), feeds


def matmul_integer_case():
    rng = rng_for("mmi")
    a = rng.integers(0, 255, (5, 7), endpoint=True).astype(np.uint8)
    b = rng.integers(-128, 127, (7, 3), endpoint=True).astype(np.int8)
    node = helper.make_node("MatMulInteger", ["a", "b", "a_zp", "b_zp"], ["y"])
    inits = {"a_zp": np.asarray(12, np.uint8), "b_zp": np.asarray(-3, np.int8)}
    return graph_model([node], {"a": a, "b": b}, ["y"], inits, opset=10), {"a": a, "b": b}


def conv_cases(per_channel: bool):
    rng = rng_for("conv", per_channel)
    x = rng.integers(0, 255, (1, 2, 6, 5), endpoint=True).astype(np.uint8)
    w = rng.integers(-100, 100, (3, 2, 3, 3), endpoint=True).astype(np.int8)
    w_s = rng.uniform(0.001, 0.01, 3).astype(np.float32) if per_channel else np.asarray(0.004, np.float32)
    inits = {"x_s": np.asarray(0.05, np.float32), "x_zp": np.asarray(100, np.uint8), "w": w, "w_s": w_s,
             "w_zp": np.asarray(0, np.int8), "y_s": np.asarray(0.3, np.float32), "y_zp": np.asarray(90, np.uint8),
             "bias": rng.integers(-500, 500, 3).astype(np.int32)}
    qnode = helper.make_node("QLinearConv", ["x", "x_s", "x_zp", "w", "w_s", "w_zp", "y_s", "y_zp", "bias"], ["y"],
                             pads=[1, 1, 1, 1], strides=[1, 2])
    qconv = graph_model([qnode], {"x": x}, ["y"], inits, opset=10)
    inode = helper.make_node("ConvInteger", ["x", "w", "x_zp"], ["y"], pads=[0, 1, 0, 1])
    iconv = graph_model([inode], {"x": x}, ["y"], {"w": w, "x_zp": np.asarray(100, np.uint8)}, opset=10)
    return (qconv, {"x": x}), (iconv, {"x": x})


CASES = {
    **{f"quantize-{t}-{m}": (lambda t=t, m=m: quantize_case(t, m)) for t in INTS for m in ("tensor", "axis", "block")},
    **{f"quantize-{t}-f16": (lambda t=t: quantize_case(t, "axis", np.float16)) for t in ("uint8", "int8")},
    **{f"dequantize-{t}-{m}": (lambda t=t, m=m: dequantize_case(t, m)) for t in INTS
       for m in ("tensor", "axis", "block")},
    **{f"dynamic-{s}": (lambda s=s: dynamic_case(s)) for s in ("both", "positive", "negative")},
    **{f"qlinear_matmul-{t}-{'3d' if b else '2d'}-{d.__name__}": (lambda t=t, b=b, d=d: qlinear_matmul_case(t, b, d))
       for t in ("uint8", "int8") for b in (False, True) for d in (np.float32, np.float16)},
    "matmul_integer": matmul_integer_case,
    "qlinear_conv": lambda: conv_cases(False)[0],
    "qlinear_conv-per_channel": lambda: conv_cases(True)[0],
    "conv_integer": lambda: conv_cases(False)[1],
}


def oracle(model, feeds, cid: str) -> list[np.ndarray]:
    """onnxruntime, or onnx's reference evaluator where onnxruntime has no kernel for the case, and for
    float16 scales: onnxruntime forms QLinearMatMul's scale factor in float32, the reference (and
    the node tests' expected outputs) in float16, and the two differ by one at some elements."""
    try:
        if "float16" in cid:
            raise NotImplementedError
        return run_ort(model, feeds)
    except Exception:  # noqa: BLE001 - onnxruntime's NOT_IMPLEMENTED (blocked/16-bit kernels) and kin
        from onnx.reference import ReferenceEvaluator

        return list(ReferenceEvaluator(model).run(None, feeds))


@pytest.fixture(scope="module")
def compiled():
    built = {cid: make() for cid, make in CASES.items()}
    module, params = import_all({cid: m for cid, (m, _) in built.items()})
    return opc.compile(module), params, built


@pytest.mark.parametrize("cid", list(CASES))
def test_matches_onnxruntime_exactly(compiled, cid: str) -> None:
    m, params, built = compiled
    model, feeds = built[cid]
    want = oracle(model, feeds, cid)
    got = call(m, cid, feeds, params[cid])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_a_float6_target_is_one_line_error() -> None:
    """float8, float4, int4 and int2 targets: tests/frontend/test_onnx_lowp.py; float6 neither opc nor
    opset 25 takes (ONNX's shape inference refuses it, in one line)."""
    x = np.ones((2, 3), np.float32)
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], output_dtype=27)  # float6e2m3
    model = graph_model([node], {"x": x}, [], {"s": np.asarray(0.1, np.float32)}, opset=25)
    model.graph.output.append(helper.make_tensor_value_info("y", 27, [2, 3]))
    with pytest.raises(opc.OpcError, match="(?i)^[^\n]*QuantizeLinear[^\n]*float6e2m3[^\n]*$"):
        opc.import_onnx(model)
