"""ONNX ops in the meaning of the opset a model declares, opsets 1 to 12 (issue 36 item 1): each case
a one-node model at an old opset, imported natively (no onnx.version_converter), all compiled into
one module. The oracle is onnxruntime where it runs that opset (7 and later), else NumPy's formula
of the old meaning; a case whose old meaning differs from the newest one checks that difference
(Softmax over the flattened axes, B broadcast from `axis`, a per-channel PRelu slope, ...)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_helpers import function_name, run_ort
from xdsl.dialects.builtin import ModuleOp, StringAttr

import opc
from opc.errors import OpcError
from opc.onnx_import import import_graph

RNG = np.random.default_rng(36)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def node_model(op: str, inputs: dict[str, np.ndarray], opset: int, n_outputs: int = 1,
               initializers: dict[str, np.ndarray] | None = None, outputs: list[np.ndarray] | None = None,
               **attrs) -> onnx.ModelProto:
    """A one-node model at `opset`. The outputs are typed after `outputs` where given (onnx has no shape
    inference for some ops of opset 1), else by shape inference. IR version 4 at least, so that
    initializers need not be graph inputs (opc reads both forms)."""
    names = list(inputs) + list(initializers or {})
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, name=f"the_{op}", **attrs)

    def typed(name: str, a: np.ndarray) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype),
                                             np.shape(a))

    out_infos = ([typed(n, a) for n, a in zip(outs, outputs)] if outputs is not None
                 else [helper.make_empty_tensor_value_info(n) for n in outs])
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (initializers or {}).items()]
    graph = helper.make_graph([node], "main_graph", [typed(n, a) for n, a in inputs.items()], out_infos, inits)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=max(helper.find_min_ir_version_for(opsets), 4))
    return model if outputs is not None else onnx.shape_inference.infer_shapes(model, strict_mode=True)


def softmax_2d(x: np.ndarray, axis: int, log: bool = False) -> np.ndarray:
    """The pre-13 meaning: x as [prod(shape[:axis]), prod(shape[axis:])], softmax along its rows."""
    flat = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
    z = flat - flat.max(axis=1, keepdims=True)
    y = z - np.log(np.exp(z).sum(axis=1, keepdims=True)) if log else np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    return y.reshape(x.shape).astype(x.dtype)


def hardmax_2d(x: np.ndarray, axis: int) -> np.ndarray:
    flat = x.reshape(int(np.prod(x.shape[:axis])), -1)
    out = np.zeros_like(flat)
    out[np.arange(flat.shape[0]), flat.argmax(axis=1)] = 1
    return out.reshape(x.shape)


# The elementwise ops' NumPy formulas, with inputs inside each one's domain (the oracle below opset 7,
# where onnxruntime does not run).
UNARY_NUMPY = {
    "Neg": np.negative, "Exp": np.exp, "Log": np.log, "Tanh": np.tanh, "Floor": np.floor, "Ceil": np.ceil,
    "Round": np.round, "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos,
    "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh, "Acosh": np.arccosh,
    "Atanh": np.arctanh, "Sqrt": np.sqrt, "Abs": np.abs, "Relu": lambda x: np.maximum(x, 0),
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Erf": np.vectorize(math.erf, otypes=[np.float32]),
}


def onnx_first_opset(op: str) -> int:
    return min(s.since_version for s in onnx.defs.get_all_schemas_with_history() if s.name == op and s.domain == "")


def first_opset_cases() -> dict[str, tuple]:
    """Each elementwise op opc registers under an ONNX name (opc/ops/elementwise.py), at the first opset
    that gives it its present meaning: the op's first ONNX version (onnx.defs), or 7 for the binaries and
    compares (their broadcast/axis attributes dropped for NumPy broadcasting). Below 7 the oracle is the
    NumPy formula, from 7 onnxruntime. A registration whose opset is too late refuses these models."""
    import opc.ops.elementwise  # noqa: F401  (registers the rules read here)
    from opc.ops.registration import ELEMENTWISE

    c: dict[str, tuple] = {}
    x = RNG.uniform(-0.9, 0.9, (3, 4)).astype(np.float32)
    x[0, :2] = [0.5, -2.5]  # Round's ties to even
    for rule in ELEMENTWISE.values():
        if rule.onnx is None:
            continue
        op = rule.onnx
        if op in UNARY_NUMPY:
            v = np.abs(x) + 1.5 if op == "Acosh" else np.abs(x) + 0.1 if op in ("Log", "Sqrt") else x
            opset = onnx_first_opset(op)
            want = [UNARY_NUMPY[op](v).astype(np.float32)] if opset < 7 else None
            c[f"{op}{opset}_first_opset"] = (node_model(op, {"x": v}, opset), {"x": v}, want)
        else:
            a, b = f32(2, 3, 4), f32(3, 1)  # NumPy broadcasting both ways
            if op == "Equal":  # integers and bools only until opset 11
                a, b = np.round(a * 2).astype(np.int64), np.round(b * 2).astype(np.int64)
            opset = max(onnx_first_opset(op), 7)
            c[f"{op}{opset}_first_opset"] = (node_model(op, {"a": a, "b": b}, opset), {"a": a, "b": b}, None)
    return c


def cases() -> dict[str, tuple]:
    """case id -> (model, feeds, expected outputs or None for onnxruntime)."""
    c: dict[str, tuple] = {}
    x4 = f32(2, 3, 4, 5)
    for op, log in (("Softmax", False), ("LogSoftmax", True)):
        for opset in (1, 11):
            for axis in (0, 1, 2, -1):
                oracle = None if opset >= 7 else [softmax_2d(x4, axis % 4, log)]
                c[f"{op}{opset}_axis{axis}"] = (node_model(op, {"x": x4}, opset, axis=axis), {"x": x4}, oracle)
        c[f"{op}9_default_axis"] = (node_model(op, {"x": x4}, 9), {"x": x4}, None)  # axis 1: over [3, 4, 5]
    for axis in (1, 2):
        c[f"Hardmax11_axis{axis}"] = (node_model("Hardmax", {"x": x4}, 11, axis=axis), {"x": x4}, None)
        c[f"Hardmax1_axis{axis}"] = (node_model("Hardmax", {"x": x4}, 1, axis=axis), {"x": x4}, [hardmax_2d(x4, axis)])

    # Add / Mul / Sub / Div / Pow of opsets 1 to 6: B broadcast from `axis`, or A's last dims
    a = f32(2, 3, 4, 5)
    pos = np.abs(a) + 0.5
    for op, fn in (("Add", np.add), ("Mul", np.multiply), ("Sub", np.subtract), ("Div", np.divide)):
        b = f32(3, 4)
        c[f"{op}6_axis1"] = (node_model(op, {"a": a, "b": b}, 6, broadcast=1, axis=1), {"a": a, "b": b},
                             [fn(a, b.reshape(1, 3, 4, 1))])
    b5 = f32(5)
    c["Add6_suffix"] = (node_model("Add", {"a": a, "b": b5}, 6, broadcast=1), {"a": a, "b": b5}, [a + b5])
    b2 = f32(2)
    c["Mul1_axis0_consumed"] = (node_model("Mul", {"a": a, "b": b2}, 1, broadcast=1, axis=0, consumed_inputs=[0, 0]),
                                {"a": a, "b": b2}, [a * b2.reshape(2, 1, 1, 1)])
    same = f32(2, 3, 4, 5)
    c["Sub6_same_shape"] = (node_model("Sub", {"a": a, "b": same}, 6), {"a": a, "b": same}, [a - same])
    e3 = np.array([1.0, 2.0, 0.5], np.float32)
    c["Pow6_axis1"] = (node_model("Pow", {"a": pos}, 6, initializers={"e": e3}, broadcast=1, axis=1), {"a": pos},
                       [np.power(pos, e3.reshape(1, 3, 1, 1))])
    b3 = f32(3)
    c["Greater6_axis1"] = (node_model("Greater", {"a": a, "b": b3}, 6, broadcast=1, axis=1), {"a": a, "b": b3},
                           [a > b3.reshape(1, 3, 1, 1)])

    # PRelu before 7: a slope of C values is per channel (axis 1)
    slope = np.array([0.1, 0.2, 0.3], np.float32)
    c["PRelu6_per_channel"] = (node_model("PRelu", {"x": a}, 6, initializers={"s": slope}), {"x": a},
                               [np.where(a > 0, a, a * slope.reshape(1, 3, 1, 1))])
    c["PRelu1_one_slope"] = (node_model("PRelu", {"x": a}, 1, initializers={"s": slope[:1]}), {"x": a},
                             [np.where(a > 0, a, a * slope[0])])

    # Gemm of opset 6 with broadcast; opset 7 Conv, MaxPool, AveragePool, BatchNormalization
    ga, gb, gc = f32(3, 4), f32(5, 4), f32(5)
    c["Gemm6_broadcast"] = (node_model("Gemm", {"a": ga}, 6, initializers={"b": gb, "c": gc}, broadcast=1, transB=1,
                                       alpha=0.5, beta=2.0), {"a": ga}, [0.5 * ga @ gb.T + 2.0 * gc])
    img, w = f32(1, 2, 6, 6), f32(3, 2, 3, 3)
    c["Conv7"] = (node_model("Conv", {"x": img}, 7, initializers={"w": w}, pads=[1, 1, 1, 1], strides=[2, 2]),
                  {"x": img}, None)
    c["MaxPool7"] = (node_model("MaxPool", {"x": img}, 7, kernel_shape=[2, 2], strides=[2, 2]), {"x": img}, None)
    c["AveragePool7"] = (node_model("AveragePool", {"x": img}, 7, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                         {"x": img}, None)
    stats = {"s": np.array([1.0, 2.0], np.float32), "b": np.array([0.5, -0.5], np.float32),
             "m": np.array([0.1, -0.2], np.float32), "v": np.array([1.5, 0.5], np.float32)}
    c["BatchNormalization7"] = (node_model("BatchNormalization", {"x": img}, 7, initializers=stats, epsilon=1e-3),
                                {"x": img}, None)
    c["BatchNormalization9"] = (node_model("BatchNormalization", {"x": img}, 9, initializers=stats), {"x": img}, None)
    bn = {k: v.reshape(2, 1, 1) for k, v in stats.items()}
    c["BatchNormalization6_is_test"] = (node_model("BatchNormalization", {"x": img}, 6, initializers=stats, is_test=1),
                                        {"x": img},
                                        [(img - bn["m"]) / np.sqrt(bn["v"] + 1e-5) * bn["s"] + bn["b"]])
    per_element = {k: np.abs(f32(2, 6, 6)) + 0.5 for k in ("s", "b", "m", "v")}
    c["BatchNormalization7_spatial0"] = (
        node_model("BatchNormalization", {"x": img}, 7, initializers=per_element, spatial=0), {"x": img},
        [(img - per_element["m"]) / np.sqrt(per_element["v"] + 1e-5) * per_element["s"] + per_element["b"]])
    c["InstanceNormalization6"] = (node_model("InstanceNormalization", {"x": img}, 6,
                                              initializers={"s": stats["s"], "b": stats["b"]}), {"x": img},
                                   [(img - img.mean((2, 3), keepdims=True))
                                    / np.sqrt(img.var((2, 3), keepdims=True) + 1e-5) * bn["s"] + bn["b"]])

    # attributes that later became inputs
    t = f32(3, 4, 5)
    c["Slice1"] = (node_model("Slice", {"x": t}, 1, starts=[1, 0], ends=[3, -1], axes=[0, 2]), {"x": t},
                   [t[1:3, :, 0:-1]])
    c["Reshape1"] = (node_model("Reshape", {"x": t}, 1, shape=[0, -1]), {"x": t}, [t.reshape(3, 20)])
    c["Concat1_default_axis"] = (node_model("Concat", {"x": t, "y": t}, 1), {"x": t, "y": t},
                                 [np.concatenate([t, t], axis=1)])
    c["Tile1"] = (node_model("Tile", {"x": t}, 1, initializers={"tiles": np.array([2], np.float32),
                                                                 "axis": np.array([1], np.float32)}),
                  {"x": t}, [np.tile(t, (1, 2, 1))])
    c["Pad1_paddings"] = (node_model("Pad", {"x": t}, 1, paddings=[0, 1, 0, 0, 2, 1], value=1.5), {"x": t},
                          [np.pad(t, [(0, 0), (1, 2), (0, 1)], constant_values=1.5)])
    c["Pad7_reflect"] = (node_model("Pad", {"x": t}, 7, pads=[0, 1, 0, 0, 2, 1], mode="reflect"), {"x": t}, None)
    c["TopK1"] = (node_model("TopK", {"x": t}, 1, n_outputs=2, k=2, axis=2), {"x": t},
                  [-np.sort(-t, axis=2)[:, :, :2], np.argsort(-t, axis=2, kind="stable")[:, :, :2].astype(np.int64)])
    c["TopK10"] = (node_model("TopK", {"x": t}, 10, n_outputs=2, initializers={"k": np.array([3], np.int64)}),
                   {"x": t}, None)
    c["Clip6"] = (node_model("Clip", {"x": t}, 6, min=-0.5, max=0.25), {"x": t}, None)
    c["Clip1"] = (node_model("Clip", {"x": t}, 1, min=-0.5, max=0.25), {"x": t}, [np.clip(t, -0.5, 0.25)])
    s1 = f32(3, 1, 4)
    c["Squeeze1"] = (node_model("Squeeze", {"x": s1}, 1, axes=[1]), {"x": s1}, [s1.reshape(3, 4)])
    c["Unsqueeze1"] = (node_model("Unsqueeze", {"x": t}, 1, axes=[0, 3]), {"x": t}, [t.reshape(1, 3, 4, 1, 5)])
    c["Split5"] = (node_model("Split", {"x": t}, 5, n_outputs=2, axis=2, split=[2, 3]), {"x": t},
                   [t[:, :, :2], t[:, :, 2:]])
    # opset 1's Shape, Size, Flatten, Transpose and Gather: the meaning of today's converters
    c["Shape1"] = (node_model("Shape", {"x": t}, 1), {"x": t}, [np.array(t.shape, np.int64)])
    c["Size1"] = (node_model("Size", {"x": t}, 1), {"x": t}, [np.array(t.size, np.int64)])
    c["Flatten1"] = (node_model("Flatten", {"x": t}, 1, axis=2), {"x": t}, [t.reshape(12, 5)])
    c["Transpose1"] = (node_model("Transpose", {"x": t}, 1, perm=[2, 0, 1]), {"x": t}, [t.transpose(2, 0, 1)])
    c["Gather1"] = (node_model("Gather", {"x": t}, 1, initializers={"i": np.array([2, 0], np.int64)}, axis=1),
                    {"x": t}, [t[:, [2, 0]]])
    c["Split1_input"] = (node_model("Split", {"x": t}, 1, n_outputs=2, axis=2,  # sizes as Split-1's input (of type T)
                                    initializers={"split": np.array([3, 2], np.float32)}), {"x": t},
                         [t[:, :, :3], t[:, :, 3:]])
    c["ReduceMean1"] = (node_model("ReduceMean", {"x": t}, 1, axes=[1], keepdims=0), {"x": t}, [t.mean(1)])
    c["ReduceSum11"] = (node_model("ReduceSum", {"x": t}, 11, axes=[0, 2]), {"x": t}, None)
    c["ArgMax1"] = (node_model("ArgMax", {"x": t}, 1, axis=2), {"x": t}, [t.argmax(2)[:, :, None].astype(np.int64)])
    c["Dropout6_is_test"] = (node_model("Dropout", {"x": t}, 6, is_test=1, ratio=0.3), {"x": t}, [t])
    # the mask at inference: all ones as onnx's reference gives it (onnxruntime gives zeros), of x's type
    # before opset 10 (as the spec types it), bool from 10
    c["Dropout10"] = (node_model("Dropout", {"x": t}, 10, n_outputs=2, ratio=0.3), {"x": t},
                      [t, np.ones(t.shape, bool)])
    c["Dropout7_mask"] = (node_model("Dropout", {"x": t}, 7, n_outputs=2, ratio=0.3), {"x": t},
                          [t, np.ones_like(t)])
    c["Max6_same_shape"] = (node_model("Max", {"x": t, "y": t[::-1].copy()}, 6), {"x": t, "y": t[::-1].copy()},
                            [np.maximum(t, t[::-1])])
    c["Cast1_by_name"] = (node_model("Cast", {"x": t}, 1, to="DOUBLE"), {"x": t}, [t.astype(np.float64)])
    c["Elu1"] = (node_model("Elu", {"x": t}, 1, alpha=0.5, consumed_inputs=[0]), {"x": t},
                 [np.where(t > 0, t, 0.5 * (np.exp(t) - 1))])
    c["Relu1_consumed"] = (node_model("Relu", {"x": t}, 1, consumed_inputs=[0]), {"x": t}, [np.maximum(t, 0)])
    c["Upsample9"] = (node_model("Upsample", {"x": img}, 9, initializers={"s": np.array([1, 1, 2, 3], np.float32)}),
                      {"x": img}, None)
    c["Resize10_nearest"] = (node_model("Resize", {"x": img}, 10,
                                        initializers={"s": np.array([1, 1, 2, 1.5], np.float32)}), {"x": img}, None)
    c["Resize10_linear"] = (node_model("Resize", {"x": img}, 10, mode="linear",
                                       initializers={"s": np.array([1, 1, 2, 0.5], np.float32)}), {"x": img}, None)

    c["Upsample1_nearest"] = (node_model("Upsample", {"x": img}, 1, height_scale=2.0, width_scale=3.0), {"x": img},
                              [img.repeat(2, axis=2).repeat(3, axis=3)])
    data, idx = f32(2, 3, 4), np.array([[0, 1], [1, 2]], np.int64)
    c["GatherND11"] = (node_model("GatherND", {"x": data}, 11, initializers={"i": idx}), {"x": data}, None)
    scores, labels = f32(3, 5), np.array([0, 4, 2], np.int64)
    c["SoftmaxCrossEntropyLoss12"] = (node_model("SoftmaxCrossEntropyLoss", {"s": scores}, 12,
                                                 initializers={"l": labels}), {"s": scores}, None)
    c["NegativeLogLikelihoodLoss12"] = (node_model("NegativeLogLikelihoodLoss", {"s": scores}, 12,
                                                   initializers={"l": labels}, reduction="sum"), {"s": scores}, None)

    # recurrent layers of opset 7 (no layout attribute)
    seq, hidden = f32(4, 2, 3), 5
    for op, gates in (("LSTM", 4), ("GRU", 3), ("RNN", 1)):
        wts = {"w": f32(1, gates * hidden, 3) * 0.5, "r": f32(1, gates * hidden, hidden) * 0.5,
               "b": f32(1, 2 * gates * hidden) * 0.1}
        c[f"{op}7"] = (node_model(op, {"x": seq}, 7, n_outputs=2, initializers=wts, hidden_size=hidden), {"x": seq},
                       None)
    c.update(first_opset_cases())
    for model, _, expected in c.values():  # outputs typed after the NumPy oracle's arrays
        if expected is not None:
            outs = [o.name for o in model.graph.output]
            del model.graph.output[:]
            model.graph.output.extend(helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(
                np.asarray(a).dtype), np.shape(a)) for n, a in zip(outs, expected))
    return c


CASES = cases()


@pytest.fixture(scope="module")
def compiled():
    functions, args = [], {}
    for case_id, (model, feeds, _) in CASES.items():
        module, params, _ = import_graph(model, {n: v.shape for n, v in feeds.items()})
        (f,) = list(module.ops)
        f.detach()
        f.sym_name = StringAttr(function_name(case_id))
        functions.append(f)
        args[case_id] = [*feeds.values(), *params.values()]
    return opc.compile(ModuleOp(functions)), args


@pytest.mark.parametrize("case_id", list(CASES))
def test_old_meaning_matches_oracle(compiled, case_id):
    m, args = compiled
    model, feeds, expected = CASES[case_id]
    want = run_ort(model, feeds) if expected is None else expected
    got = getattr(m, function_name(case_id))(*args[case_id])
    got = list(got) if isinstance(got, tuple) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(g, w)


def one_line_refusal(model, *needles: str) -> None:
    with pytest.raises(OpcError) as err:
        opc.import_onnx(model)
    text = str(err.value)
    assert "\n" not in text.strip() and all(n in text for n in needles), text


def test_broadcast_axis_that_does_not_line_up_is_refused():
    model = node_model("Add", {"a": f32(2, 3, 4), "b": f32(4)}, 6, broadcast=1, axis=1, outputs=[f32(2, 3, 4)])
    one_line_refusal(model, "the_Add", "does not line up")


def test_training_forms_are_refused_in_one_line():
    x = f32(1, 2, 4, 4)
    stats = {k: np.ones(2, np.float32) for k in "sbmv"}
    one_line_refusal(node_model("BatchNormalization", {"x": x}, 6, initializers=stats), "the_BatchNormalization",
                     "is_test = 0")
    one_line_refusal(node_model("Dropout", {"x": x}, 6, ratio=0.5), "the_Dropout", "is_test = 0")


def test_every_opset_the_installed_onnx_knows_is_read():
    """Opset 1 imports (no version converter in the way); the error below 1 and above the newest stays."""
    import onnx

    x = f32(2, 3)
    model = node_model("Relu", {"x": x}, 1, outputs=[x])
    module, _ = opc.import_onnx(model)
    assert "opc.relu" in str(module)
    model.opset_import[0].version = onnx.defs.onnx_opset_version() + 1
    one_line_refusal(model, "newer than the installed onnx")


@pytest.mark.parametrize("opset", [9, 11])
def test_torchscript_exports_at_old_opsets_match_torch(opset):
    """A CNN (Conv, depthwise Conv, BatchNormalization, Clip, Add, MaxPool, Gemm, Softmax) and an LSTM + GRU (LogSoftmax) as
    torch's TorchScript exporter writes them at opsets 9 and 11 (Paddle's exporter defaults to 9)."""
    import io
    import warnings

    from requires import import_or_skip

    torch = import_or_skip("torch", "torch exports the models of this test")
    torch.manual_seed(0)

    class CNN(torch.nn.Module):  # ResNet's and MobileNetV2's pieces
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
            self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
            self.fc = torch.nn.Linear(8 * 4 * 4, 10)

        def forward(self, x):  # noqa: ANN001, ANN202
            y = torch.relu(self.bn(self.conv(x)))
            y = torch.nn.functional.max_pool2d(y + torch.nn.functional.relu6(self.depthwise(y)), 2)
            return torch.softmax(self.fc(y.flatten(1)), dim=1)

    class Recurrent(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(6, 5, batch_first=True, bidirectional=True)
            self.gru = torch.nn.GRU(10, 4)

        def forward(self, x):  # noqa: ANN001, ANN202
            return torch.log_softmax(self.gru(self.lstm(x)[0])[0], dim=-1)

    for model, x in ((CNN(), torch.randn(2, 3, 8, 8)), (Recurrent(), torch.randn(2, 7, 6))):
        model.eval()
        with torch.no_grad():  # running statistics other than 0 and 1, so that they count
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 1.5)
        buffer = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (x,), buffer, opset_version=opset, dynamo=False)
        exported = onnx.load_from_string(buffer.getvalue())
        assert exported.opset_import[0].version == opset
        got = opc.load_onnx(exported)(x.numpy())
        got = got[0] if isinstance(got, (list, tuple)) else got
        np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("ir_version", [3, 4])
def test_integer_constant_before_opset_9_as_exporters_write_it(ir_version):
    """Opset 7's Constant holds floats only by the spec; paddle2onnx writes an int64 one for Reshape's
    shape (onnxruntime runs it). It imports, typed for shape inference as an initializer would be."""
    x = f32(2, 3, 4)
    shape = helper.make_tensor("shape_value", TensorProto.INT64, [2], [4, -1])
    nodes = [helper.make_node("Constant", [], ["shape"], value=shape),
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="the_Reshape")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)], ir_version=ir_version)
    got = opc.load_onnx(model)(x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_array_equal(got, x.reshape(4, 6))


MODELS = Path(__file__).resolve().parent.parent / "models"
PADDLE = sorted((MODELS / "paddle").glob("*.onnx"))


@pytest.mark.parametrize("path", PADDLE, ids=[p.stem for p in PADDLE])
def test_paddle_exports_match_paddle(path):
    """paddle2onnx's exports at its default opset (9) and its oldest (7) of an MLP, a CNN with batch
    norm, an LSTM, a TransformerEncoderLayer, a transformer classifier (opset 11: paddle2onnx raised
    it), ResNet-18 and MobileNetV2 (weights from tests/models/seeded_weights.py, refilled here) against
    Paddle's outputs (tests/models/paddle/export_paddle.py) and onnxruntime on the same model."""
    sys.path.insert(0, str(MODELS))
    from seeded_weights import fill_initializers

    model = fill_initializers(onnx.load(str(path)))
    data = np.load(path.with_suffix(".npz"))
    inputs = [data[k] for k in sorted(k for k in data.files if k != "want")]
    got = opc.load_onnx(model)(*inputs)
    got = got[0] if isinstance(got, (list, tuple)) else got
    weights = {t.name for t in model.graph.initializer}
    feeds = [i.name for i in model.graph.input if i.name not in weights]
    (ort_out,) = run_ort(model, dict(zip(feeds, inputs)))
    atol = 1e-5 * max(1.0, float(np.abs(data["want"]).max()))
    np.testing.assert_allclose(got, data["want"], rtol=1e-4, atol=atol)
    np.testing.assert_allclose(got, ort_out, rtol=1e-4, atol=atol)
