"""The converters once in more_converters.py (now in opc/onnx_import/ by topic) and the integer forms of
Div, Pow and Mod,
imported over a grid of dtypes and attributes and checked against onnx's reference evaluator
(NumPy; onnxruntime lacks BitShift of signed types and the newest opsets), or onnxruntime where the
reference evaluator departs from the spec (LpPool divides padded windows by their valid count).
Inputs a converter needs at compile time (K, a window's size, lengths) are given by value, as the
ONNX backend does. One module for all."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx_helpers import function_name, graph_model, run_ort, single
from xdsl.dialects.builtin import ModuleOp, StringAttr

import opc
from opc.onnx_import import import_graph

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
    c.update(selection_cases())
    for model, feeds in c.values():
        typed_outputs(model, feeds)
    return c


def typed_outputs(model, feeds) -> None:
    """The outputs' exact types (shape inference leaves them open where a size is an input's value)."""
    for out, value in zip(model.graph.output, reference.ReferenceEvaluator(model).run(None, feeds)):
        out.CopyFrom(helper.make_tensor_value_info(out.name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                                   value.shape))


def f32(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def selection_cases() -> dict[str, tuple]:
    c: dict[str, tuple] = {}
    for op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
        for size in (1, 2, 7, 10):
            for periodic in (0, 1):
                for out in (1, 11):  # float, double
                    feeds = {"n": np.array(size, np.int64)}
                    c[f"{op}_{size}_{periodic}_{out}"] = (
                        single(op, feeds, opset=17, periodic=periodic, output_datatype=out), feeds)
    for dt in ("float32", "int32", "int64", "float64"):
        x = f32(3, 7, 2) if dt.startswith("float") else ints(dt, (3, 7, 2), -4, 4)
        x = x.astype(dt)
        for axis in (0, 1, -1):
            for exclusive in (0, 1):
                for reverse in (0, 1):
                    feeds = {"x": x, "axis": np.array(axis, np.int64)}
                    c[f"CumProd_{dt}_{axis}_{exclusive}{reverse}"] = (
                        single("CumProd", feeds, opset=26, exclusive=exclusive, reverse=reverse), feeds)
    tied = np.array([[3, 1, 3, 2, 1, 3], [0, 0, 0, 0, 0, 0], [5, 4, 3, 2, 1, 0]])
    for dt in ("float32", "int32", "uint64", "float16"):
        for axis in (1, 0, -1):
            for k in (1, 3):
                for largest in (0, 1):
                    x = (tied if axis != 0 else tied.T).astype(dt)
                    feeds = {"x": x, "k": np.array([k], np.int64)}
                    c[f"TopK_{dt}_{axis}_{k}_{largest}"] = (
                        single("TopK", feeds, n_outputs=2, axis=axis if axis != 0 else 0, largest=largest), feeds)
    x = f32(4, 6, 3)
    feeds = {"x": x, "k": np.array([4], np.int64)}
    c["TopK_random_k4"] = (single("TopK", feeds, n_outputs=2, axis=1), feeds)
    for batch_axis, time_axis in ((1, 0), (0, 1)):
        x = f32(5, 4, 2) if batch_axis == 1 else f32(4, 5, 2)
        feeds = {"x": x, "lens": np.array([5, 0, 1, 3], np.int64)}
        c[f"ReverseSequence_{batch_axis}{time_axis}"] = (
            single("ReverseSequence", feeds, batch_axis=batch_axis, time_axis=time_axis), feeds)
    x = f32(5, 6, 3)
    for target, axes in (([3, 6, 3], None), ([8, 9, 3], None), ([2, 11, 3], None), ([4, 7], [0, 1]),
                         ([2, 4], [-1, 0])):
        feeds = {"x": x, "shape": np.array(target, np.int64)}
        attrs = {} if axes is None else {"axes": axes}
        c[f"CenterCropPad_{'x'.join(map(str, target))}_{axes}"] = (
            single("CenterCropPad", feeds, opset=18, **attrs), feeds)
    for p in (1, 2, 3):
        for extra in ({}, {"pads": [1, 1, 1, 0], "strides": [2, 1]}, {"auto_pad": "SAME_UPPER"}):
            x = f32(2, 3, 6, 5)
            feeds = {"x": x}
            tag = "_".join(f"{k}{v}" for k, v in extra.items())
            c[f"LpPool_{p}_{tag}"] = (single("LpPool", feeds, opset=18, kernel_shape=[3, 2], p=p, **extra), feeds)
    for opset in (17, 20):
        for last in (1, 2):
            for inverse, onesided in ((0, 0), (1, 0), (0, 1), (1, 1)):
                if onesided and last == 2 and not inverse:
                    continue  # a one-sided transform of a complex signal: ONNX allows real input only
                for length in (None, 7, 12):
                    x = f32(2, 6, 3, last if not (inverse and onesided) else 2)
                    feeds = {"x": x}
                    names = ["x", "len" if length else ""]
                    if length:
                        feeds["len"] = np.array(length, np.int64)
                    attrs = {"inverse": inverse, "onesided": onesided}
                    if opset == 17:
                        attrs["axis"] = 1
                    else:
                        names.append("axis")
                        feeds["axis"] = np.array(-3, np.int64)
                    model = graph_model([helper.make_node("DFT", names, ["y0"], **attrs)],
                                        {n: v for n, v in feeds.items()}, ["y0"], opset=opset)
                    c[f"DFT_{opset}_{last}_{inverse}{onesided}_{length}"] = (model, feeds)
    for image, block, attrs in (((5, 5), (2, 2), {}), ((5, 6), (2, 3), {"strides": [2, 1]}),
                                ((5, 5), (3, 3), {"pads": [1, 0, 2, 1]}), ((6, 6), (2, 2), {"dilations": [2, 3]}),
                                ((3, 4, 5), (1, 2, 2), {})):
        counts = [(i + (attrs.get("pads", [0] * 2 * len(image))[d] + attrs.get("pads", [0] * 2 * len(image))[
            len(image) + d]) - attrs.get("dilations", [1] * len(image))[d] * (b - 1) - 1)
            // attrs.get("strides", [1] * len(image))[d] + 1 for d, (i, b) in enumerate(zip(image, block))]
        x = f32(2, 3 * int(np.prod(block)), int(np.prod(counts)))
        feeds = {"x": x, "image": np.array(image, np.int64), "block": np.array(block, np.int64)}
        c[f"Col2Im_{'x'.join(map(str, image))}_{'_'.join(attrs)}"] = (single("Col2Im", feeds, opset=18, **attrs),
                                                                       feeds)
    for reduction in ("mul", "min", "max"):
        data = f32(4, 5)
        idx = np.array([[1, -1, 0], [3, 3, 2]], np.int64)  # a repeated and a negative index
        feeds = {"data": data, "idx": idx, "upd": f32(2, 3)}
        for axis in (0, 1):
            c[f"ScatterElements_{reduction}_{axis}"] = (
                single("ScatterElements", feeds, opset=18, axis=axis, reduction=reduction), feeds)
        nd = np.array([[[1], [3]], [[1], [-4]]], np.int64)  # rows 1 (twice), 3 and 0
        feeds = {"data": f32(4, 3, 2), "idx": nd, "upd": f32(2, 2, 3, 2)}
        c[f"ScatterND_{reduction}_rows"] = (single("ScatterND", feeds, opset=18, reduction=reduction), feeds)
        nd2 = np.array([[0, 1], [2, 2], [0, 1]], np.int64)
        feeds = {"data": f32(4, 3, 2), "idx": nd2, "upd": f32(3, 2)}
        c[f"ScatterND_{reduction}_elements"] = (single("ScatterND", feeds, opset=18, reduction=reduction), feeds)
    for op in ("ReduceMax", "ReduceMin"):
        for shape, axes in (((3, 4), [1]), ((3, 4), [0, 1]), ((2, 0, 3), [1])):
            b = RNG.integers(0, 2, size=shape).astype(bool)
            b[0] = True  # a row of all true
            feeds = {"b": b, "axes": np.array(axes, np.int64)}
            c[f"{op}_bool_{'x'.join(map(str, shape))}_{axes}"] = (single(op, feeds, opset=20, keepdims=0), feeds)
    for dt in ("uint8", "int8"):  # ONNX's MaxPool takes no wider integers
        x = ints(dt, (1, 2, 5, 6), -128, 255)
        feeds = {"x": x}
        c[f"MaxPool_{dt}"] = (single("MaxPool", feeds, kernel_shape=[2, 3], strides=[1, 2], pads=[1, 0, 0, 1]),
                              feeds)
    for last, onesided in ((1, 1), (1, 0), (2, 0)):
        for with_window in (True, False):
            x = f32(2, 40, last)
            feeds = {"x": x, "step": np.array(6, np.int64)}
            names = ["x", "step"]
            if with_window:
                feeds["win"] = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(10) / 10)).astype(np.float32)
                names.append("win")
            else:
                feeds["flen"] = np.array(9, np.int64)
                names += ["", "flen"]
            model = graph_model([helper.make_node("STFT", names, ["y0"], onesided=onesided)], feeds, ["y0"],
                                opset=17)
            c[f"STFT_{last}_{onesided}_{with_window}"] = (model, feeds)
    x = f32(6, 5, 4)
    for starts, ends, axes, steps in (([-1], [-100], [0], [-1]), ([4, 0], [0, 5], [1, 2], [-2, 2]),
                                      ([100, 2], [-100, -1], [0, 2], [-3, -1]), ([-2], [-200], [1], [-1]),
                                      ([3, 1, 4], [-7, 5, 1], [2, 0, 1], [-1, 1, -1])):
        inits = {"s": np.array(starts, np.int64), "e": np.array(ends, np.int64), "a": np.array(axes, np.int64),
                 "t": np.array(steps, np.int64)}
        c[f"Slice_negative_{starts}_{ends}_{axes}_{steps}"] = (single("Slice", {"x": x}, initializers=inits),
                                                              {"x": x})
    return c


CASES = cases()
COMPILE_TIME = {"n", "k", "lens", "shape", "axis", "len", "image", "block", "axes", "step", "flen"}  # inputs given by value: bound when a converter needs them


@pytest.fixture(scope="module")
def compiled():
    functions, args = [], {}
    for case_id, (model, feeds) in CASES.items():
        given = {n: v for n, v in feeds.items() if n in COMPILE_TIME}
        module, params, bound = import_graph(model, {n: v.shape for n, v in feeds.items()}, given)
        (f,) = list(module.ops)
        f.detach()
        f.sym_name = StringAttr(function_name(case_id))
        functions.append(f)
        args[case_id] = [v for n, v in feeds.items() if n not in bound] + list(params.values())
    return opc.compile(ModuleOp(functions)), args


@pytest.mark.parametrize("case_id", list(CASES))
def test_matches_oracle(compiled, case_id):
    m, args = compiled
    model, feeds = CASES[case_id]
    if case_id.startswith("LpPool"):
        want = run_ort(model, feeds)
    else:
        want = reference.ReferenceEvaluator(model).run(None, feeds)
    got = getattr(m, function_name(case_id))(*args[case_id])
    got = list(got) if isinstance(got, tuple) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=2e-3 if w.dtype == np.float16 else 1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(g, w)
