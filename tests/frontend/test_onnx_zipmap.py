"""ai.onnx.ml's ZipMap and LinearClassifier (opc/onnx_import/classifiers.py) against onnxruntime, the
oracle: ZipMap's sequence of maps comes back as onnxruntime's list of dicts {label: float} (int64 and
string labels, one row and several, a [K] input), string class labels as its array of str. The
classifier cases are LinearClassifier -> ZipMap pipelines as skl2onnx writes them (Y the label, Z the
probabilities into a ZipMap): 1 to 5 classes, every post_transform opc imports, int64 and string
labels, float32, float64 and int64 features, batches of 1 and 7. Maps must have the same labels in the
same order and values within rtol 1e-5, labels be equal. The cases compile into one module and go
through the runner's regrouping (lists.regroup); opc.load_onnx and the ONNX backend run two end to end."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import function_name, helper, onnx, run_ort
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr

import opc
from opc.onnx_import import import_graph
from opc.onnx_import.lists import regroup

ML = "ai.onnx.ml"
T = onnx.TensorProto


def map_type(strings: bool) -> onnx.TypeProto:
    key = T.STRING if strings else T.INT64
    return helper.make_sequence_type_proto(helper.make_map_type_proto(key, helper.make_tensor_type_proto(T.FLOAT, [])))


def ml_model(nodes: list, x: np.ndarray, outputs: list) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info("X", helper.np_dtype_to_tensor_dtype(x.dtype), ["N", *x.shape[1:]])]
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)]
    model = helper.make_model(helper.make_graph(nodes, "g", ins, outputs), opset_imports=opsets,
                              ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(model, full_check=True)
    return model


def label_attr(labels: list[int], strings: bool, ints_name: str) -> dict:
    return {"classlabels_strings": [f"class_{v}" for v in labels]} if strings else {ints_name: labels}


def zipmap_case(labels: list[int], strings: bool, shape: tuple[int, ...]):
    x = np.random.default_rng(len(shape) * 10 + shape[0]).uniform(0, 1, shape).astype(np.float32)
    node = helper.make_node("ZipMap", ["X"], ["Z"], domain=ML, **label_attr(labels, strings, "classlabels_int64s"))
    return ml_model([node], x, [helper.make_value_info("Z", map_type(strings))]), x


def pipeline_case(classes: int, labels: list[int] | None, post: str, strings: bool, dtype, rows: int):
    """LinearClassifier -> (label, probability_tensor), ZipMap(probability_tensor) -> output_probability."""
    rng = np.random.default_rng(classes * 100 + rows)
    features = 4
    x = rng.normal(0, 1.5, (rows, features))
    x = np.round(x * 3).astype(dtype) if np.dtype(dtype).kind == "i" else x.astype(dtype)
    attrs = {"coefficients": rng.normal(0, 1, classes * features).astype(np.float32).tolist(),
             "intercepts": rng.normal(0, 0.5, classes).astype(np.float32).tolist(), "post_transform": post}
    if labels is not None:
        attrs.update(label_attr(labels, strings, "classlabels_ints"))
    linear = helper.make_node("LinearClassifier", ["X"], ["label", "probability_tensor"], domain=ML, **attrs)
    width = 2 if classes == 1 and labels is not None else classes
    zip_labels = labels if labels is not None else list(range(width))
    zipmap = helper.make_node("ZipMap", ["probability_tensor"], ["output_probability"], domain=ML,
                              **label_attr(zip_labels, strings and labels is not None, "classlabels_int64s"))
    keyed = strings and labels is not None
    outs = [helper.make_tensor_value_info("label", T.STRING if keyed else T.INT64, ["N"]),
            helper.make_value_info("output_probability", map_type(keyed))]
    return ml_model([linear, zipmap], x, outs), x


ZIPMAPS = {f"zipmap-{'str' if s else 'int'}-{'x'.join(map(str, shape))}": (labels, s, shape)
           for labels, s, shape in [([3, 7, 9], False, (1, 3)), ([3, 7, 9], False, (6, 3)), ([0, 1], True, (1, 2)),
                                    ([4, 2, 8, 1, 0], True, (5, 5)), ([10, 20, 30, 40], False, (4,)),
                                    ([5, 6], True, (2,))]}
POSTS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"]
PIPELINES = {f"linear-c{c}-{'nolabels' if lab is None else 'str' if s else 'int'}-{post}-{np.dtype(dt).name}-n{n}":
             (c, lab, post, s, dt, n) for c, lab, post, s, dt, n in [
                 *[(3, [3, 7, 9], post, False, np.float32, 7) for post in POSTS],
                 *[(5, [0, 1, 2, 3, 4], post, True, np.float32, 7) for post in POSTS],
                 (2, [0, 1], "LOGISTIC", False, np.float32, 7),  # skl2onnx's binary LogisticRegression: [-w, w]
                 (2, [-1, 1], "SOFTMAX", True, np.float64, 1),
                 (1, [5, 6], "NONE", False, np.float32, 7),  # one score: [1 - s, s]
                 (1, [5, 6], "LOGISTIC", True, np.float32, 7),  # [1 - sigmoid(s), sigmoid(s)]
                 (1, [5, 6], "SOFTMAX", False, np.float32, 1),
                 (1, None, "NONE", False, np.float32, 7),  # no labels: 1 and 0, one score
                 (1, None, "LOGISTIC", False, np.float32, 7),
                 (3, [1, 2, 3], "SOFTMAX", False, np.int64, 7),
                 (3, [1, 2, 3], "SOFTMAX", True, np.float64, 1)]}


@pytest.fixture(scope="module")
def compiled():
    """Every case imported with its outputs' layouts, one module, one build."""
    cases = {cid: zipmap_case(*spec) for cid, spec in ZIPMAPS.items()}
    cases.update({cid: pipeline_case(*spec) for cid, spec in PIPELINES.items()})
    functions, params, layouts = [], {}, {}
    for cid, (model, x) in cases.items():
        layouts[cid] = []
        module, params[cid], _ = import_graph(model, {"X": x.shape}, None, cid, layouts=layouts[cid])
        (f,) = list(module.ops)
        assert isinstance(f, func.FuncOp)
        f.detach()
        f.sym_name = StringAttr(function_name(cid))
        functions.append(f)
    return opc.compile(ModuleOp(functions)), params, layouts, cases


def run_case(compiled, cid: str) -> tuple[list, list]:
    m, params, layouts, cases = compiled
    model, x = cases[cid]
    out = getattr(m, function_name(cid))(x, *params[cid].values())
    return regroup(layouts[cid], list(out) if isinstance(out, tuple) else [out]), run_ort(model, {"X": x})


def assert_same_maps(got: list, want: list) -> None:
    assert isinstance(got, list) and len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g) == list(w), (list(g), list(w))  # the labels, their types and their order
        assert all(type(a) is type(b) for a, b in zip(g, w))
        assert all(type(v) is float for v in g.values())
        np.testing.assert_allclose(list(g.values()), list(w.values()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cid", list(ZIPMAPS))
def test_zipmap_gives_onnxruntime_maps(compiled, cid: str) -> None:
    (got,), (want,) = run_case(compiled, cid)
    assert_same_maps(got, want)
    assert got == want  # a ZipMap alone: the float32 values themselves


@pytest.mark.parametrize("cid", list(PIPELINES))
def test_linear_classifier_then_zipmap_matches_onnxruntime(compiled, cid: str) -> None:
    (label, maps), (want_label, want_maps) = run_case(compiled, cid)
    assert label.dtype == want_label.dtype and label.shape == want_label.shape
    np.testing.assert_array_equal(label, want_label)
    assert_same_maps(maps, want_maps)


def test_the_pipelines_see_several_labels(compiled) -> None:
    """Not degenerate: the classifiers of 7 rows give two labels or more."""
    for cid in PIPELINES:
        if cid.endswith("n7"):
            _, (want_label, _) = run_case(compiled, cid)
            assert len(set(want_label.tolist())) >= 2, cid


def test_load_onnx_and_the_backend_return_maps() -> None:
    """opc.load_onnx, the user's entry point, and onnx's backend interface over it, at two batch sizes
    through one compiled variant (the open N stays `?`)."""
    import opc.onnx_backend

    model, x = pipeline_case(3, [3, 7, 9], "SOFTMAX", True, np.float32, 7)
    f = opc.load_onnx(model)
    rep = opc.onnx_backend.prepare(model)
    for rows in (x[:1], x):
        want_label, want_maps = run_ort(model, {"X": rows})
        for label, maps in (f(rows), rep.run([rows])):
            np.testing.assert_array_equal(label, want_label)
            assert_same_maps(maps, want_maps)
    assert f.static_reason is None and len(f.dynamic) == 1


def test_a_node_reading_string_labels_is_refused_in_one_line() -> None:
    """(A node reading ZipMap's maps fails ONNX's own shape inference first: no op takes them.)"""
    model, x = pipeline_case(3, [3, 7, 9], "SOFTMAX", True, np.float32, 2)
    model.graph.node.append(helper.make_node("Concat", ["label", "label"], ["copied"], axis=0))
    model.graph.output[0].name = "copied"
    with pytest.raises(opc.OpcError, match="'label' is string labels, where a tensor is needed: opc has no string "
                                           "tensors") as err:
        opc.load_onnx(model)(x)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("attrs, message", [
    ({"classlabels_int64s": [1, 2], "classlabels_strings": ["a", "b"]}, "both classlabels_int64s and"),
    ({"classlabels_int64s": [1, 2, 3]}, r"X must be \[N, 3\] or \[3\] for 3 labels")])
def test_bad_zipmaps_are_refused_in_one_line(attrs: dict, message: str) -> None:
    node = helper.make_node("ZipMap", ["X"], ["Z"], domain=ML, **attrs)
    x = np.ones((2, 2), np.float32)
    ins = [helper.make_tensor_value_info("X", T.FLOAT, [2, 2])]
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)]
    model = helper.make_model(helper.make_graph([node], "g", ins, [helper.make_value_info("Z", map_type(False))]),
                              opset_imports=opsets, ir_version=8)
    with pytest.raises(opc.OpcError, match=message) as err:
        opc.load_onnx(model)(x)
    assert "\n" not in str(err.value)
