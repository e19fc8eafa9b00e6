"""The ONNX converters, op by op, against onnxruntime: every case is a small
ONNX graph; all are imported into one module, compiled once, and each
function's outputs are compared with onnxruntime's on the same inputs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper
from onnx_helpers import call, graph_model, helper, import_all, run_ort, single

import opc

RNG = np.random.default_rng(0)


def f32(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, shape).astype(np.float32)


def positive(*shape):
    return f32(*shape, low=0.1, high=3.0)


def i64(*values):
    return np.array(values, np.int64)


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, **attrs)


def cases() -> dict[str, tuple]:
    """case id -> (model, feeds)."""
    c: dict[str, tuple] = {}

    def add(case_id, model, feeds):
        c[case_id] = (model, feeds)

    a, row, col = f32(2, 3, 4), f32(4), f32(3, 1)
    for op in ("Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
        lhs = a.copy()
        lhs[0, 0, :] = row  # some ties for the comparisons
        add(f"{op}_broadcast_row", single(op, {"a": lhs, "b": row}), {"a": lhs, "b": row})
        add(f"{op}_broadcast_col", single(op, {"a": a, "b": col}), {"a": a, "b": col})
    ints = {"a": RNG.integers(-50, 50, (3, 4)).astype(np.int32), "b": RNG.integers(-50, 50, (4,)).astype(np.int32)}
    for op in ("Add", "Sub", "Mul", "Max", "Min"):
        add(f"{op}_int32", single(op, ints), ints)
    p, q = RNG.integers(0, 2, (3, 4)).astype(bool), RNG.integers(0, 2, (4,)).astype(bool)
    for op in ("And", "Or", "Xor"):
        add(op, single(op, {"p": p, "q": q}), {"p": p, "q": q})
    add("Not", single("Not", {"p": p}), {"p": p})
    big = {"a": np.array([2**31 - 1, -2**31, -2**31 + 1, 7, -7, 2**30 + 3, 0, -5], np.int32),
           "b": np.array([-3, 2**31 - 1, -2, -2**31, 3, -(2**29) - 1, 5, -5], np.int32)}
    add("Mod_int32_extremes", single("Mod", big), big)  # float64 floor needs the one-step correction here
    fm = {"a": f32(4, 6, low=-9, high=9), "b": f32(6, low=0.5, high=3) * np.sign(f32(6))}
    for fmod in (0, 1):
        add(f"Mod_float_fmod{fmod}", single("Mod", fm, fmod=fmod, opset=28 if fmod == 0 else 17), fm)
    add("Where", single("Where", {"c": p, "x": f32(3, 4), "y": f32(4)}), {"c": p, "x": f32(3, 4), "y": f32(4)})
    three = {"a": f32(2, 3), "b": f32(3), "c": f32(2, 1)}
    for op in ("Max", "Min", "Sum", "Mean"):
        add(f"{op}_variadic", single(op, three), three)
    for op in ("Neg", "Abs", "Exp", "Tanh", "Erf", "Relu", "Identity", "Reciprocal"):
        x = f32(3, 5)
        add(op, single(op, {"x": x}), {"x": x})
    for op in ("Log", "Sqrt"):
        x = positive(3, 5)
        add(op, single(op, {"x": x}), {"x": x})
    add("LeakyRelu", single("LeakyRelu", {"x": f32(4, 5)}, alpha=0.2), {"x": f32(4, 5)})
    for exponent in (2.0, 0.5, 1.0, 3.0):
        x = positive(3, 4)
        add(f"Pow_const_{exponent}", single("Pow", {"x": x}, initializers={"e": np.array(exponent, np.float32)}),
            {"x": x})
    x, e = positive(3, 4), f32(4)
    add("Pow_dynamic", single("Pow", {"x": x, "e": e}), {"x": x, "e": e})
    x = f32(3, 4)
    add("Pow_int_exponent", single("Pow", {"x": x}, initializers={"e": np.array(2, np.int64)}), {"x": x})
    x = f32(3, 6)
    add("Clip_both", single("Clip", {"x": x}, initializers={"lo": np.float32(-0.5), "hi": np.float32(0.7)}),
        {"x": x})
    add("Clip_min_only", graph_model([node("Clip", ["x", "lo"], ["y"])], {"x": x}, ["y"],
                                     {"lo": np.float32(0.1)}), {"x": x})
    for approx in ("none", "tanh"):
        x = f32(4, 6, low=-4, high=4)
        add(f"Gelu_{approx}", single("Gelu", {"x": x}, opset=20, approximate=approx), {"x": x})
    for to in (6, 11, 7, 2, 9, 10):  # int32, double, int64, uint8, bool, float16
        x = f32(3, 4, low=0 if to == 2 else -300, high=255)  # in range: ONNX leaves overflow undefined
        x[0, 0] = 0.0
        add(f"Cast_to_{to}", single("Cast", {"x": x}, to=to), {"x": x})
    n = RNG.integers(-5, 5, (3, 4)).astype(np.int64)
    add("Cast_int64_to_float", single("Cast", {"n": n}, to=1), {"n": n})
    add("CastLike", single("CastLike", {"n": n, "like": f32(1)}), {"n": n, "like": f32(1)})
    x = f32(3, 4)
    add("Dropout_inference", graph_model([node("Dropout", ["x"], ["y", "mask"])], {"x": x}, ["y", "mask"]),
        {"x": x})

    for xs, ys in (((4, 5), (5, 3)), ((5,), (5, 3)), ((4, 5), (5,)), ((2, 4, 5), (5, 3)), ((2, 4, 5), (2, 5, 3))):
        x, y = f32(*xs), f32(*ys)
        add(f"MatMul_{xs}_{ys}", single("MatMul", {"x": x, "y": y}), {"x": x, "y": y})
    for ta, tb, alpha, beta, cshape in ((0, 1, 1.0, 1.0, (3,)), (1, 0, 0.5, 2.0, (4, 3)), (0, 0, 1.0, 1.0, (1, 3)),
                                        (1, 1, 1.0, 0.5, ()), (0, 0, 2.0, 1.0, None)):
        a_ = f32(5, 4) if ta else f32(4, 5)
        b_ = f32(3, 5) if tb else f32(5, 3)
        inits = {"w": b_} if cshape is None else {"w": b_, "bias": f32(*cshape)}
        add(f"Gemm_{ta}{tb}_{alpha}_{beta}_{cshape}",
            single("Gemm", {"a": a_}, initializers=inits, transA=ta, transB=tb, alpha=alpha, beta=beta), {"a": a_})

    x = f32(2, 3, 4)
    for axes, keep in (([1], 1), ([0, 2], 0), ([-1], 0), ([], 1)):
        add(f"ReduceSum_{axes}_{keep}", single("ReduceSum", {"x": x}, initializers={"axes": i64(*axes)},
                                               keepdims=keep), {"x": x})
    add("ReduceSum_noop", graph_model([node("ReduceSum", ["x"], ["y"], noop_with_empty_axes=1)], {"x": x}, ["y"]),
        {"x": x})
    for op in ("ReduceMean", "ReduceMax", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp"):
        for axes, keep in (([1], 1), ([0, 2], 0)):
            add(f"{op}_attr_{axes}_{keep}", single(op, {"x": x}, opset=13, axes=axes, keepdims=keep), {"x": x})
            add(f"{op}_input_{axes}_{keep}", single(op, {"x": x}, initializers={"axes": i64(*axes)}, opset=18,
                                                    keepdims=keep), {"x": x})
        add(f"{op}_all", single(op, {"x": x}, opset=13, keepdims=0), {"x": x})

    x = f32(2, 3, 4)
    for shape in ((4, 6), (0, -1), (-1,), (2, 3, 2, 2)):
        add(f"Reshape_{shape}", single("Reshape", {"x": x}, initializers={"s": i64(*shape)}), {"x": x})
    for axis in (0, 1, 2, -1):
        add(f"Flatten_{axis}", single("Flatten", {"x": x}, axis=axis), {"x": x})
    x1 = f32(1, 3, 1, 4)
    add("Squeeze_axes", single("Squeeze", {"x": x1}, initializers={"axes": i64(0, -2)}), {"x": x1})
    add("Squeeze_all", single("Squeeze", {"x": x1}), {"x": x1})
    add("Unsqueeze", single("Unsqueeze", {"x": f32(3, 4)}, initializers={"axes": i64(0, -1)}), {"x": f32(3, 4)})
    add("Transpose_default", single("Transpose", {"x": x}), {"x": x})
    add("Transpose_perm", single("Transpose", {"x": x}, perm=[1, 0, 2]), {"x": x})
    for shape in ((2, 3, 4), (3, 1), (2, 1, 1, 4)):
        xe = f32(3, 4) if shape != (3, 1) else f32(1, 4)
        add(f"Expand_{shape}", single("Expand", {"x": xe}, initializers={"s": i64(*shape)}), {"x": xe})
    for upper, k in ((0, 0), (1, 1), (0, -1)):
        xt = f32(2, 4, 5)
        add(f"Trilu_{upper}_{k}", single("Trilu", {"x": xt}, initializers={"k": np.int64(k)}, upper=upper),
            {"x": xt})

    # Shape-driven patterns, folded at compile time.
    x = f32(2, 3, 4)
    nodes = [node("Shape", ["x"], ["s"]), node("Gather", ["s", "zero"], ["b"], axis=0),
             node("Unsqueeze", ["b", "ax"], ["b1"]), node("Concat", ["b1", "minus1"], ["target"], axis=0),
             node("Reshape", ["x", "target"], ["y"]), node("Size", ["x"], ["n"]),
             node("Cast", ["n"], ["nf"], to=1), node("Mul", ["y", "nf"], ["z"])]
    add("Shape_Gather_Concat_Reshape", graph_model(nodes, {"x": x}, ["z"], {"zero": np.int64(0), "ax": i64(0),
                                                                            "minus1": i64(-1)}), {"x": x})
    nodes = [node("Shape", ["x"], ["s"], start=1), node("ConstantOfShape", ["s"], ["ones"],
                                                          value=helper.make_tensor("v", 1, [1], [1.5])),
             node("Range", ["r0", "r1", "r2"], ["r"]), node("Cast", ["r"], ["rf"], to=1),
             node("Add", ["ones", "rf"], ["c"]), node("Add", ["x", "c"], ["y"])]
    add("ConstantOfShape_Range", graph_model(nodes, {"x": x}, ["y"], {"r0": np.float32(0), "r1": np.float32(4),
                                                                       "r2": np.float32(1)}), {"x": x})
    nodes = [node("Constant", [], ["k"], value_floats=[1.0, 2.0, 3.0, 4.0]), node("Sqrt", ["k"], ["r"]),
             node("Mul", ["x", "r"], ["y"]), node("Shape", ["y"], ["shape_out"])]
    add("Constant_folded_and_shape_output", graph_model(nodes, {"x": x}, ["y", "shape_out"]), {"x": x})
    c.update(new_op_cases())
    c.update(default_attribute_cases())
    c.update(mutation_cases())
    return c


def new_op_cases() -> dict[str, tuple]:
    """Converters onto issue 11's ops: normalizations, losses, slicing, gathering, broadcast matmul."""
    c: dict[str, tuple] = {}

    def add(case_id, model, feeds):
        c[case_id] = (model, feeds)

    x = f32(2, 3, 5, low=-4, high=4)
    for op in ("Softmax", "LogSoftmax"):
        for axis in (-1, 1, 0):
            add(f"{op}_{axis}", single(op, {"x": x}, axis=axis), {"x": x})
    add("Sigmoid", single("Sigmoid", {"x": x}), {"x": x})
    for axes, keep in (([1], 1), ([0, 2], 0)):
        add(f"ReduceMin_attr_{axes}", single("ReduceMin", {"x": x}, opset=13, axes=axes, keepdims=keep), {"x": x})
        add(f"ReduceMin_input_{axes}", single("ReduceMin", {"x": x}, initializers={"axes": i64(*axes)}, opset=18,
                                              keepdims=keep), {"x": x})
    for xs, ys in (((5,), (2, 5, 3)), ((2, 1, 4, 5), (3, 5, 2)), ((2, 3, 4, 5), (2, 3, 5, 4)), ((4, 5), (2, 5, 3))):
        a, b = f32(*xs), f32(*ys)
        add(f"MatMul_broadcast_{xs}_{ys}", single("MatMul", {"x": a, "y": b}), {"x": a, "y": b})

    x = f32(2, 3, 8)
    for axis, outs in ((-1, ["y", "mean", "rstd"]), (1, ["y", "mean", "rstd"]), (-1, ["y"])):
        inits = {"scale": f32(*x.shape[axis:]), "bias": f32(*x.shape[axis:])}
        model = graph_model([node("LayerNormalization", ["x", "scale", "bias"], outs, axis=axis, epsilon=1e-3)],
                            {"x": x}, outs, inits)
        add(f"LayerNormalization_{axis}_{len(outs)}", model, {"x": x})
    model = graph_model([node("LayerNormalization", ["x", "scale"], ["y"])], {"x": x}, ["y"], {"scale": f32(8)})
    add("LayerNormalization_no_bias", model, {"x": x})

    scores, labels = f32(6, 5, low=-3, high=3), RNG.integers(0, 5, 6).astype(np.int64)
    labels[2] = -100
    feeds = {"scores": scores, "labels": labels}
    for reduction in ("mean", "sum", "none"):
        for extra, inits in ((dict(), {}), (dict(ignore_index=-100), {}),
                             (dict(ignore_index=-100), {"w": positive(5)})):
            if not extra and reduction:
                feeds_ok = {"scores": scores, "labels": np.where(labels < 0, 1, labels)}
            else:
                feeds_ok = feeds
            case = f"{reduction}_{'ignore' if extra else 'plain'}_{'weights' if inits else 'unweighted'}"
            for op in ("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"):
                names = ["scores", "labels", *inits]
                outs = ["loss", "log_prob"] if op == "SoftmaxCrossEntropyLoss" else ["loss"]
                model = graph_model([node(op, names, outs, reduction=reduction, **extra)], feeds_ok, outs, inits)
                add(f"{op}_{case}", model, feeds_ok)
    s4, l3 = f32(2, 4, 3), RNG.integers(0, 4, (2, 3)).astype(np.int32)
    add("SoftmaxCrossEntropyLoss_3d_int32", graph_model(
        [node("SoftmaxCrossEntropyLoss", ["s", "l"], ["loss"])], {"s": s4, "l": l3}, ["loss"]), {"s": s4, "l": l3})

    x = f32(4, 6, 5)
    for starts, ends, axes, steps in (([1], [3], [0], [1]), ([0, 1], [-1, 100], [1, 2], [2, 1]),
                                      ([-3], [10**18], [-1], [1]), ([0], [6], [1], [4])):
        inits = {"starts": i64(*starts), "ends": i64(*ends), "axes": i64(*axes), "steps": i64(*steps)}
        add(f"Slice_{starts}_{ends}_{axes}_{steps}", single("Slice", {"x": x}, initializers=inits), {"x": x})
    add("Slice_no_axes", single("Slice", {"x": x}, initializers={"s": i64(1, 2), "e": i64(3, 5)}), {"x": x})
    a, b = f32(2, 3), f32(2, 4)
    add("Concat_1", single("Concat", {"a": a, "b": b, "c": f32(2, 1)}, axis=-1), {"a": a, "b": b, "c": f32(2, 1)})
    add("Concat_0", single("Concat", {"a": f32(1, 3), "b": f32(2, 3)}, axis=0), {"a": f32(1, 3), "b": f32(2, 3)})
    add("Split_sizes", single("Split", {"x": x}, n_outputs=2, initializers={"s": i64(2, 4)}, axis=1), {"x": x})
    add("Split_equal_13", single("Split", {"x": x}, n_outputs=2, opset=13), {"x": x})
    add("Split_num_outputs_18", single("Split", {"x": x}, n_outputs=3, opset=18, axis=1, num_outputs=3), {"x": x})
    table = f32(10, 4)
    for axis, idx in ((0, np.array([[1, 9, -1], [0, 0, 3]], np.int64)), (1, np.array([3, -4], np.int32)),
                      (0, np.array(7, np.int64))):
        add(f"Gather_{axis}_{idx.shape}", single("Gather", {"t": table, "i": idx}, axis=axis), {"t": table, "i": idx})
    add("Gather_constant_indices", single("Gather", {"t": table}, initializers={"i": i64(2, 5)}, axis=0),
        {"t": table})
    return c


def default_attribute_cases() -> dict[str, tuple]:
    """Every converter's optional attributes left out, at the first opset opc imports and at the
    opsets where their spelling changed: the converter's defaults against onnxruntime's."""
    c: dict[str, tuple] = {}

    def add(case_id, model, feeds):
        c[f"default_{case_id}"] = (model, feeds)

    x = f32(2, 3, 5, low=-4, high=4)
    for opset in (13, 21):
        add(f"LeakyRelu_{opset}", single("LeakyRelu", {"x": x}, opset=opset), {"x": x})  # alpha 0.01
        for op in ("Softmax", "LogSoftmax"):  # axis -1 from opset 13
            add(f"{op}_{opset}", single(op, {"x": x}, opset=opset), {"x": x})
        add(f"Flatten_{opset}", single("Flatten", {"x": x}, opset=opset), {"x": x})  # axis 1
        add(f"Transpose_{opset}", single("Transpose", {"x": x}, opset=opset), {"x": x})  # perm reversed
        add(f"Gather_{opset}", single("Gather", {"t": x, "i": np.array([1, -1, 0], np.int64)}, opset=opset),
            {"t": x, "i": np.array([1, -1, 0], np.int64)})  # axis 0
        add(f"Clip_{opset}", single("Clip", {"x": x}, opset=opset), {"x": x})  # no bounds
        add(f"ReduceSum_{opset}", single("ReduceSum", {"x": x}, opset=opset), {"x": x})  # all axes, keepdims 1
        add(f"Split_{opset}", single("Split", {"x": f32(4, 3)}, n_outputs=2, opset=opset,
                                     **({"num_outputs": 2} if opset >= 18 else {})), {"x": f32(4, 3)})  # axis 0
        add(f"Trilu_{opset}", single("Trilu", {"x": f32(2, 4, 5)}, opset=max(opset, 14)), {"x": f32(2, 4, 5)})  # upper, k 0
        a_, w_, b_ = f32(4, 5), f32(5, 3), f32(3)
        add(f"Gemm_{opset}", single("Gemm", {"a": a_}, initializers={"w": w_, "bias": b_}, opset=opset), {"a": a_})
        xs = f32(2, 3, 8)
        add(f"LayerNormalization_{opset}", graph_model(  # axis -1, epsilon 1e-5
            [node("LayerNormalization", ["x", "scale", "bias"], ["y"])], {"x": xs}, ["y"],
            {"scale": f32(8), "bias": f32(8)}, opset=max(opset, 17)), {"x": xs})
        scores, labels = f32(6, 5, low=-3, high=3), RNG.integers(0, 5, 6).astype(np.int64)
        for op in ("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"):  # reduction "mean"
            add(f"{op}_{opset}", graph_model([node(op, ["scores", "labels"], ["loss"])],
                                             {"scores": scores, "labels": labels}, ["loss"], opset=opset),
                {"scores": scores, "labels": labels})
        for op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL1", "ReduceL2",
                   "ReduceLogSumExp"):  # every axis, keepdims 1 (attribute axes to 17, input from 18)
            add(f"{op}_{opset}", single(op, {"x": x}, opset=opset), {"x": x})
    add("Gelu_20", single("Gelu", {"x": x}, opset=20), {"x": x})  # approximate "none"
    xd = f32(3, 4)
    add("Dropout_ratio_only", graph_model([node("Dropout", ["x", "ratio"], ["y"])], {"x": xd}, ["y"],
                                          {"ratio": np.float32(0.3)}), {"x": xd})  # training_mode false
    xr = f32(4, 8, 10)  # more elements than CPython's cached small ints: sizes compared by value
    add("Reshape_320", single("Reshape", {"x": xr}, initializers={"s": i64(32, -1)}), {"x": xr})
    add("Shape_15", graph_model([node("Shape", ["x"], ["s"]), node("Cast", ["s"], ["sf"], to=1),
                                 node("ReduceSum", ["sf"], ["n"]), node("Mul", ["x", "n"], ["y"])],
                                {"x": x}, ["y"], opset=15), {"x": x})  # start 0, end rank
    return c


def mutation_cases() -> dict[str, tuple]:
    """Inputs that tell apart slips mutation testing found unchecked (bench/results/2026-12-06-mutation-2.md)."""
    c: dict[str, tuple] = {}
    x = f32(4, 6, 5)
    c["Split_equal_11"] = (single("Split", {"x": x}, n_outputs=2, opset=11), {"x": x})  # no split: equal parts
    for pads in ((0, 0, 0, -1, 0, 0), (0, -2, 0, 0, -1, 1)):  # a crop at one axis' end leaves the others whole
        c[f"Pad_crop_{pads}"] = (single("Pad", {"x": x}, initializers={"pads": i64(*pads)}), {"x": x})
    keep = node("Constant", [], ["keep"], value=numpy_helper.from_array(np.array([1, 0, 0, 1, 1, 0], bool)))
    c["Compress_constant_condition"] = (graph_model([keep, node("Compress", ["x", "keep"], ["y"], axis=1)],
                                                    {"x": x}, ["y"]), {"x": x})
    ids = RNG.integers(0, 100, (5, 4)).astype(np.int64)  # integer data: each row takes the update that hits it
    rows, new_rows = i64(3, 0, 4).reshape(3, 1), RNG.integers(100, 200, (3, 4)).astype(np.int64)
    c["ScatterND_int64"] = (single("ScatterND", {"d": ids, "i": rows, "u": new_rows}),
                            {"d": ids, "i": rows, "u": new_rows})
    return c


CASES = cases()


@pytest.fixture(scope="module")
def compiled():
    module, params = import_all({k: m for k, (m, _) in CASES.items()})
    return opc.compile(module), params


@pytest.mark.parametrize("case_id", list(CASES))
def test_converter_matches_onnxruntime(compiled, case_id):
    module, params = compiled
    model, feeds = CASES[case_id]
    got = call(module, case_id, feeds, params[case_id])
    want = run_ort(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            tol = 1e-3 if w.dtype == np.float16 else 2e-6 if w.dtype == np.float32 else 1e-12
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_linear_bias_on_3d_input_fuses_into_one_gemm():
    """MatMul of a [B, S, K] input by [K, N] plus a bias[N] (a Linear layer): the bias is added
    to the 2-D GEMM before the reshape back, so that opc-fuse makes one fused_gemm_epilogue of
    it (bias_after_gemm); the numbers against onnxruntime."""
    from opc.api import prepare

    x, w, bias = f32(2, 4, 5), f32(5, 3), f32(3)
    model = graph_model([node("MatMul", ["x", "w"], ["mm"]), node("Add", ["mm", "bias"], ["y"])], {"x": x}, ["y"],
                        {"w": w, "bias": bias})
    module, weights = opc.import_onnx(model)
    text = str(module)
    assert "opc.add" in text and "tensor<8x3xf32>" in text.split("opc.add")[1].split("\n")[0], text
    prepared = str(prepare(opc.frontend.load_module(text)).module)
    assert prepared.count("opc.fused_gemm_epilogue") == 1 and "opc.matmul" not in prepared, prepared
    out = opc.compile(text).main_graph(x, *weights.values())
    np.testing.assert_allclose(out, run_ort(model, {"x": x})[0], rtol=2e-6, atol=2e-6)


def test_gather_elements_of_constants_refuses_an_index_equal_to_the_axis_size():
    """GatherElements of constants, folded at import: an index of n on an axis of n elements is out of range (the check is
    `>= n`, where the valid range is [-n, n - 1]), and so is one past it."""
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    for bad in (3, 4, -4):
        indices = np.array([[0, bad], [1, 2]], np.int64)
        consts = [node("Constant", [], [n], value=numpy_helper.from_array(a)) for n, a in (("d", data), ("i", indices))]
        model = graph_model([*consts, node("GatherElements", ["d", "i"], ["y"], axis=1)], {}, ["y"])
        with pytest.raises(opc.errors.InputError, match=r"out of range \[-3, 2\] along axis 1"):
            opc.import_onnx(model)
