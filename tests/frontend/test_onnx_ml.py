"""The ai.onnx.ml ops opc imports (opc/onnx_import/ml.py) against onnxruntime: Binarizer,
ArrayFeatureExtractor, LabelEncoder with number keys and values, and TreeEnsemble over random
forests (every branch mode, set membership, NaN features that follow the true branch, each
aggregate function and post transform, float32 and float64). All cases compile into one module."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import call, helper, import_all, numpy_helper, onnx, run_ort

import opc

ML = "ai.onnx.ml"


def ml_model(node, inputs: dict[str, np.ndarray], out_dtype, ml_opset: int, out_shape=None) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs.items()]
    out = (helper.make_empty_tensor_value_info("Y") if out_shape is None else
           helper.make_tensor_value_info("Y", helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype)), out_shape))
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(ML, ml_opset)]
    model = helper.make_model(helper.make_graph([node], "g", ins, [out]), opset_imports=opsets,
                              ir_version=helper.find_min_ir_version_for(opsets))
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    assert model.graph.output[0].type.tensor_type.elem_type == helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype))
    return model


def binarizer_case(shape, dtype, threshold):
    rng = np.random.default_rng(len(shape))
    x = rng.integers(-3, 4, shape).astype(dtype) if np.dtype(dtype).kind == "i" else rng.normal(0, 1, shape).astype(dtype)
    x.reshape(-1)[0] = threshold if np.dtype(dtype).kind == "f" else x.reshape(-1)[0]  # a tie: not above
    node = helper.make_node("Binarizer", ["X"], ["Y"], domain=ML, threshold=threshold)
    return ml_model(node, {"X": x}, dtype, 1), {"X": x}


def extractor_case(shape, dtype, indices):
    x = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
    y = np.asarray(indices, np.int64)
    node = helper.make_node("ArrayFeatureExtractor", ["X", "I"], ["Y"], domain=ML)
    out_shape = [1, y.size] if len(shape) == 1 else None  # ONNX's inference leaves a 1-D X's unknown
    return ml_model(node, {"X": x, "I": y}, dtype, 1, out_shape), {"X": x, "I": y}


def label_encoder_case(kind: str, shape):
    rng = np.random.default_rng(7)
    if kind == "int_to_float":
        keys, values = [3, 1, 4, 10, -2], [0.5, 1.5, 2.5, 3.5, 4.5]
        attrs = {"keys_int64s": keys, "values_floats": values, "default_float": 9.0}
        x, out, opset = rng.integers(-3, 11, shape).astype(np.int64), np.float32, 2
    elif kind == "float_to_int":
        keys, values = [0.25, -1.0, 2.0, 1e9], [7, 8, 9, 10]
        attrs = {"keys_floats": keys, "values_int64s": values}  # the default: -1
        x = rng.choice(np.array([0.25, -1.0, 2.0, 1e9, 0.5, 3.0], np.float32), shape)
        out, opset = np.int64, 2
    elif kind == "tensor_int32_to_int16":
        attrs = {"keys_tensor": numpy_helper.from_array(np.array([5, 6, 7, 5], np.int32)),
                 "values_tensor": numpy_helper.from_array(np.array([50, 60, 70, 55], np.int16)),
                 "default_tensor": numpy_helper.from_array(np.array([42], np.int16))}
        x, out, opset = rng.integers(4, 9, shape).astype(np.int32), np.int16, 4
    elif kind == "nan_key_2":  # a NaN key matches nothing before ml opset 4
        attrs = {"keys_floats": [float("nan"), 1.0, 2.0], "values_int64s": [5, 6, 7], "default_int64": 9}
        x = rng.choice(np.array([np.nan, 1.0, 2.0, 3.0, 0.0], np.float32), shape)
        out, opset = np.int64, 2
    elif kind in ("nan_key_4", "repeated_key_4"):  # from 4 a NaN key matches any NaN
        # a repeated key: the last one's value (no NaN there: ONNX's reference, the oracle, matches none)
        keys = [np.nan, 1.0] if kind == "nan_key_4" else [0.5, 1.0, 1.0]
        attrs = {"keys_tensor": numpy_helper.from_array(np.array(keys, np.float32)),
                 "values_tensor": numpy_helper.from_array(np.array([5, 6, 8][:len(keys)], np.int64)),
                 "default_tensor": numpy_helper.from_array(np.array([-1], np.int64))}
        x = rng.choice(np.array([keys[0], 1.0, 3.0, 0.0], np.float32), shape)
        out, opset = np.int64, 4
    else:  # tensor_double_to_double, no default given
        attrs = {"keys_tensor": numpy_helper.from_array(np.array([0.5, 1.5], np.float64)),
                 "values_tensor": numpy_helper.from_array(np.array([-1.0, 1.0], np.float64))}
        x, out, opset = rng.choice(np.array([0.5, 1.5, 2.5]), shape), np.float64, 4
    node = helper.make_node("LabelEncoder", ["X"], ["Y"], domain=ML, **attrs)
    model = ml_model(node, {"X": x}, out, opset)
    model.doc_string = kind  # the oracle's cue: a repeated key, which onnxruntime resolves against the spec
    return model, {"X": x}


def random_forest(seed: int, dtype, modes, n_trees: int, features: int, targets: int, missing: bool):
    """A random ensemble as TreeEnsemble's attributes; splits and sets on the integers 0..5 (X's
    values too), so equal values and set hits occur."""
    rng = np.random.default_rng(seed)
    nodes: list[dict] = []
    leaves: list[tuple[float, int]] = []
    sets: list[list[float]] = []

    def grow(depth: int, root: bool) -> tuple[bool, int]:
        if depth == 0 or (not root and rng.random() < 0.3):
            leaves.append((float(rng.normal(0, 2)), int(rng.integers(0, targets))))
            return True, len(leaves) - 1
        k = len(nodes)
        nodes.append({})
        mode = int(rng.choice(modes))
        split = float(rng.integers(0, 6)) + (0.5 if rng.random() < 0.3 and mode != 4 else 0.0)
        if mode == 6:
            sets.append(sorted(set(float(v) for v in rng.integers(0, 6, rng.integers(1, 4)))))
            split = 0.0
        true, false = grow(depth - 1, False), grow(depth - 1, False)
        nodes[k] = {"feature": int(rng.integers(0, features)), "split": split, "mode": mode, "true": true,
                    "false": false, "missing": int(missing and rng.random() < 0.5)}
        return False, k

    roots = [grow(int(rng.integers(1, 5)), True)[1] for _ in range(n_trees)]
    attrs = {
        "nodes_featureids": [n["feature"] for n in nodes],
        "nodes_splits": numpy_helper.from_array(np.array([n["split"] for n in nodes], dtype)),
        "nodes_modes": numpy_helper.from_array(np.array([n["mode"] for n in nodes], np.uint8)),
        "nodes_truenodeids": [n["true"][1] for n in nodes], "nodes_trueleafs": [int(n["true"][0]) for n in nodes],
        "nodes_falsenodeids": [n["false"][1] for n in nodes], "nodes_falseleafs": [int(n["false"][0]) for n in nodes],
        "leaf_weights": numpy_helper.from_array(np.array([w for w, _ in leaves], dtype)),
        "leaf_targetids": [t for _, t in leaves], "tree_roots": roots, "n_targets": targets,
    }
    if missing:
        attrs["nodes_missing_value_tracks_true"] = [n["missing"] for n in nodes]
    if sets:
        attrs["membership_values"] = numpy_helper.from_array(
            np.array([v for s in sets for v in [*s, np.nan]], dtype))
    return attrs


def forest_case(seed, dtype, modes, aggregate, post, missing):
    attrs = random_forest(seed, dtype, modes, n_trees=4, features=3, targets=3, missing=missing)
    rng = np.random.default_rng(seed + 100)
    x = rng.integers(0, 6, (9, 3)).astype(dtype)
    if missing:
        x[rng.random(x.shape) < 0.2] = np.nan
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain=ML, aggregate_function=aggregate,
                            post_transform=post, **attrs)
    return ml_model(node, {"X": x}, dtype, 5), {"X": x}


def random_regressor(seed: int, modes: list[str], n_trees: int, features: int, targets: int, missing: bool,
                     multi: bool, as_tensor: bool):
    """A random TreeEnsembleRegressor's attributes: per tree, nodes numbered from 0 in the order the
    list holds them (root first); a leaf scores one target, or with `multi` one to all of them."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes",
                                             "nodes_values", "nodes_truenodeids", "nodes_falsenodeids",
                                             "nodes_missing_value_tracks_true", "target_treeids", "target_nodeids",
                                             "target_ids", "target_weights")}

    def grow(tree: int, depth: int, numbering: list[int]) -> int:
        nid = numbering[0]
        numbering[0] += 1
        k = len(cols["nodes_treeids"])
        for name in cols:
            if name.startswith("nodes_"):
                cols[name].append(0)
        cols["nodes_treeids"][k], cols["nodes_nodeids"][k] = tree, nid
        if depth == 0 or (nid > 0 and rng.random() < 0.3):
            cols["nodes_modes"][k] = "LEAF"
            ids = rng.choice(targets, int(rng.integers(1, targets + 1)) if multi else 1, replace=False)
            for t in ids:
                cols["target_treeids"].append(tree)
                cols["target_nodeids"].append(nid)
                cols["target_ids"].append(int(t))
                cols["target_weights"].append(float(rng.normal(0, 2)))
            return nid
        cols["nodes_modes"][k] = str(rng.choice(modes))
        cols["nodes_featureids"][k] = int(rng.integers(0, features))
        cols["nodes_values"][k] = float(rng.integers(0, 6)) + (0.5 if rng.random() < 0.3 else 0.0)
        cols["nodes_missing_value_tracks_true"][k] = int(missing and rng.random() < 0.5)
        cols["nodes_truenodeids"][k] = grow(tree, depth - 1, numbering)
        cols["nodes_falsenodeids"][k] = grow(tree, depth - 1, numbering)
        return nid

    for tree in range(n_trees):
        grow(tree, int(rng.integers(1, 5)), [0])
    attrs = dict(cols, n_targets=targets)
    if not missing:
        del attrs["nodes_missing_value_tracks_true"]
    if as_tensor:
        for name in ("nodes_values", "target_weights"):
            attrs[f"{name}_as_tensor"] = numpy_helper.from_array(np.array(attrs.pop(name), np.float64))
    return attrs


def regressor_case(seed, dtype, modes, aggregate, post, missing, multi, base, as_tensor=False):
    attrs = random_regressor(seed, modes, n_trees=4, features=3, targets=3, missing=missing, multi=multi,
                             as_tensor=as_tensor)
    if base:
        attrs["base_values"] = [0.5, -1.0, 2.0]
    rng = np.random.default_rng(seed + 100)
    x = rng.integers(0, 6, (9, 3)).astype(dtype)
    if missing:
        x[rng.random(x.shape) < 0.2] = np.nan
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, aggregate_function=aggregate,
                            post_transform=post, **attrs)
    return ml_model(node, {"X": x}, np.float32, 3 if as_tensor else 1, [len(x), 3]), {"X": x}  # (inference: none)


CASES = {}
for shape in [(5,), (3, 4), (2, 3, 2)]:
    for dtype in [np.float32, np.float64, np.int64, np.int32]:
        for threshold in [0.0, 1.5]:
            CASES[f"binarizer-{shape}-{np.dtype(dtype).name}-{threshold}"] = binarizer_case(shape, dtype, threshold)
for shape, indices in [((4,), [2, 0]), ((3, 4), [1]), ((3, 4), [3, 3, 0]), ((2, 2, 5), [[4, 1]]),
                       ((2, 5), [[0, 1], [2, 4]])]:
    for dtype in [np.float32, np.int64]:
        CASES[f"extractor-{shape}-{indices}-{np.dtype(dtype).name}"] = extractor_case(shape, dtype, indices)
for kind in ["int_to_float", "float_to_int", "tensor_int32_to_int16", "tensor_double_to_double", "nan_key_2",
             "nan_key_4", "repeated_key_4"]:
    for shape in [(6,), (2, 5)]:
        CASES[f"label-{kind}-{shape}"] = label_encoder_case(kind, shape)
MODE_SETS = {"leq": [0], "lt_gt": [1, 3], "all": [0, 1, 2, 3, 4, 5], "member": [6, 0]}
for k, (modes, aggregate, post, missing, dtype) in enumerate([
        ("leq", 1, 0, False, np.float32), ("lt_gt", 0, 0, False, np.float64), ("all", 1, 0, True, np.float32),
        ("all", 2, 0, False, np.float64), ("all", 3, 0, True, np.float32), ("member", 1, 0, False, np.float32),
        ("member", 1, 0, True, np.float64), ("leq", 1, 1, False, np.float32), ("all", 1, 2, False, np.float64),
        ("all", 0, 3, True, np.float32)]):
    for seed in (k, k + 20):
        CASES[f"forest-{seed}-{modes}-agg{aggregate}-post{post}-missing{missing}-{np.dtype(dtype).name}"] = \
            forest_case(seed, dtype, MODE_SETS[modes], aggregate, post, missing)


LEQ_ONLY, ALL_MODES = ["BRANCH_LEQ"], ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
for k, (modes, aggregate, post, missing, multi, base, dtype, as_tensor) in enumerate([
        (LEQ_ONLY, "SUM", "NONE", False, False, False, np.float32, False),
        (ALL_MODES, "SUM", "NONE", True, True, True, np.float32, False),
        (ALL_MODES, "AVERAGE", "NONE", False, True, True, np.float64, False),
        (ALL_MODES, "MIN", "NONE", True, False, True, np.float32, False),
        (ALL_MODES, "MAX", "NONE", False, False, False, np.float64, False),
        (LEQ_ONLY, "SUM", "LOGISTIC", False, True, True, np.float32, False),
        (ALL_MODES, "SUM", "SOFTMAX", True, True, False, np.float32, False),
        (ALL_MODES, "SUM", "SOFTMAX_ZERO", False, False, False, np.float32, False),
        (ALL_MODES, "SUM", "NONE", True, True, True, np.float64, True),
        (LEQ_ONLY, "SUM", "NONE", False, False, False, np.int64, False)]):
    for seed in (k, k + 20):
        tag = f"regressor-{seed}-{len(modes)}modes-{aggregate}-{post}-missing{missing}-multi{multi}-base{base}"
        CASES[f"{tag}-{np.dtype(dtype).name}-tensor{as_tensor}"] = regressor_case(
            seed, dtype, modes, aggregate, post, missing and np.dtype(dtype).kind == "f", multi, base, as_tensor)


def preprocessing_case(op: str, x: np.ndarray, out_dtype, **attrs):
    """(ONNX's shape inference types none of these outputs: Y's type is given.)"""
    node = helper.make_node(op, ["X"], ["Y"], domain=ML, **attrs)
    if op == "LinearRegressor":
        out_shape = [x.shape[0] if x.ndim == 2 else 1, attrs.get("targets", 1)]
    elif op == "OneHotEncoder":
        out_shape = [*x.shape, len(attrs["cats_int64s"])]
    else:
        out_shape = list(x.shape)
    return ml_model(node, {"X": x}, out_dtype, 1, out_shape), {"X": x}


ROWS = np.array([[1.5, -3.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0], [-1.0, -2.0, -0.5, -4.0], [-1.0, 0.0, -2.0, 0.0],
                 [3.0, 4.0, 0.0, 12.0]], np.float32)
for dtype in [np.float32, np.float64, np.int64, np.int32]:
    x = (ROWS * (1 if np.dtype(dtype).kind == "f" else 2)).astype(dtype)
    name = np.dtype(dtype).name
    CASES[f"scaler-{name}"] = preprocessing_case("Scaler", x, np.float32, offset=[1.0, -2.0, 0.5, 3.0],
                                                 scale=[2.0, 0.5, -1.0, 0.25])
    CASES[f"scaler-one-{name}"] = preprocessing_case("Scaler", x[0], np.float32, offset=[1.5], scale=[-2.0])
    for norm in ["MAX", "L1", "L2"]:  # rows of zeros, a largest value of 0 under MAX
        CASES[f"normalizer-{norm}-{name}"] = preprocessing_case("Normalizer", x, np.float32, norm=norm)
    CASES[f"normalizer-1d-{name}"] = preprocessing_case("Normalizer", x[4], np.float32, norm="L2")
    CASES[f"regressor-linear-{name}"] = preprocessing_case(
        "LinearRegressor", x, np.float32, coefficients=[0.5, -1.0, 2.0, 0.25, 1.0, 1.0, -3.0, 0.0],
        intercepts=[0.5, -1.5], targets=2)
    CASES[f"regressor-linear-1d-{name}"] = preprocessing_case("LinearRegressor", x[0], np.float32,
                                                              coefficients=[1.0, 2.0, 3.0, 4.0])
for dtype, attrs in [(np.float32, {"imputed_value_floats": [9.0, 8.0, 7.0, 6.0], "replaced_value_float": 0.0}),
                     (np.float32, {"imputed_value_floats": [-1.0], "replaced_value_float": float("nan")}),
                     (np.float64, {"imputed_value_floats": [5.0], "replaced_value_float": -2.0}),
                     (np.int64, {"imputed_value_int64s": [7, 6, 5, 4], "replaced_value_int64": 0}),
                     (np.int32, {"imputed_value_int64s": [-9], "replaced_value_int64": -4})]:
    x = (ROWS * (1 if np.dtype(dtype).kind == "f" else 2)).astype(dtype)
    if "replaced_value_float" in attrs and np.isnan(attrs["replaced_value_float"]):
        x = np.where(x == 0, np.nan, x).astype(dtype)
    CASES[f"imputer-{np.dtype(dtype).name}-{attrs}"] = preprocessing_case("Imputer", x, dtype, **attrs)
for dtype in [np.int64, np.int32, np.float32, np.float64]:
    values = np.array([[3, 0, 5, -1], [-1, 3, 3, 7]]) if np.dtype(dtype).kind == "i" else \
        np.array([[-0.5, -1.5, 3.99, np.nan], [0.0, -0.99, 3.0, 7.5]])
    CASES[f"one-hot-{np.dtype(dtype).name}"] = preprocessing_case("OneHotEncoder", values.astype(dtype), np.float32,
                                                                  cats_int64s=[0, 3, -1], zeros=1)
    listed = np.array([7, 3, 3, 7]) if np.dtype(dtype).kind == "i" else np.array([7.5, 3.2, 3.0, 7.0])
    CASES[f"one-hot-1d-{np.dtype(dtype).name}"] = preprocessing_case(
        "OneHotEncoder", listed.astype(dtype), np.float32, cats_int64s=[7, 3], zeros=0)


@pytest.fixture(scope="module")
def compiled():
    module, params = import_all({k: m for k, (m, _) in CASES.items()})
    return opc.compile(module), params


def post_transform(y: np.ndarray, post: int) -> np.ndarray:
    """TreeEnsemble's post_transform as the operator spec numbers it, in NumPy."""
    if post == 1:
        z = np.exp(y - y.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)
    if post == 2:
        return 1 / (1 + np.exp(-y))
    if post == 3:  # onnxruntime's SOFTMAX_ZERO: entries within 1e-7 of 0 stay 0
        z = np.where(np.abs(y) > 1e-7, np.exp(y - y.max(axis=1, keepdims=True)), 0)
        return z / z.sum(axis=1, keepdims=True)
    return y


def oracle(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """onnxruntime; where it has no kernel for the op at these types (Binarizer but for float32,
    LabelEncoder from int32), and for a LabelEncoder's repeated key (the spec: the last one's value;
    onnxruntime takes the first), ONNX's reference evaluator. For the tree ensembles, onnxruntime's scores
    without post_transform and base_values, which are applied here as the spec says: onnxruntime 1.23
    swaps TreeEnsemble's SOFTMAX (1) and LOGISTIC (2), leaves a target no leaf scores at 0 without its
    base value, and gives a regressor of integer features integer outputs (the spec: float; opc
    compares them as floats, so the oracle is onnxruntime on the features as float32)."""
    from onnx.reference import ReferenceEvaluator

    node = model.graph.node[0]
    if node.op_type == "LabelEncoder" and "repeated_key" in model.doc_string:  # onnxruntime keeps the first
        return ReferenceEvaluator(model).run(None, feeds)[0]
    if node.op_type == "LinearRegressor" and feeds["X"].dtype != np.float32:
        # onnxruntime has only float32's kernel, and the reference computes integers in integers: the
        # spec's float computation is onnxruntime's on the features as float32 (as opc converts them)
        as_float = onnx.ModelProto()
        as_float.CopyFrom(model)
        as_float.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
        return run_ort(as_float, {"X": feeds["X"].astype(np.float32)})[0]
    if node.op_type.startswith("TreeEnsemble"):
        plain = onnx.ModelProto()
        plain.CopyFrom(model)
        attrs = {a.name: a for a in plain.graph.node[0].attribute}
        post = attrs.pop("post_transform", None)
        base = attrs.pop("base_values", None)
        del plain.graph.node[0].attribute[:]
        plain.graph.node[0].attribute.extend(attrs.values())
        x = feeds["X"]
        if x.dtype.kind != "f":
            x = x.astype(np.float32)
            plain.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
        y = run_ort(plain, {"X": x})[0] + (np.asarray(base.floats, np.float32) if base is not None else 0)
        names = {"NONE": 0, "SOFTMAX": 1, "LOGISTIC": 2, "SOFTMAX_ZERO": 3}
        return post_transform(y, 0 if post is None else post.i if post.type == post.INT else names[post.s.decode()])
    try:
        return run_ort(model, feeds)[0]
    except Exception as err:  # noqa: BLE001 - onnxruntime's NotImplemented has no importable class
        if "NOT_IMPLEMENTED" not in str(err):
            raise
        # the reference keeps float64 where the spec's output is float (LinearRegressor): Y's declared type
        declared = helper.tensor_dtype_to_np_dtype(model.graph.output[0].type.tensor_type.elem_type)
        return ReferenceEvaluator(model).run(None, feeds)[0].astype(declared)


@pytest.mark.parametrize("case", list(CASES))
def test_matches_onnxruntime(compiled, case: str) -> None:
    fn, params = compiled
    model, feeds = CASES[case]
    want = oracle(model, feeds)
    (got,) = call(fn, case, feeds, params[case])
    assert got.dtype == want.dtype and got.shape == want.shape
    rtol = 1e-6 if got.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6 if got.dtype == np.float32 else 1e-12)


def test_one_hot_encoder_zeros_0_raises_for_a_category_not_listed() -> None:
    """zeros=0: onnxruntime fails the call on an unknown category; opc raises IndexError naming X."""
    model, _ = preprocessing_case("OneHotEncoder", np.array([3, 7], np.int64), np.float32, cats_int64s=[7, 3], zeros=0)
    m = opc.load_onnx(model)
    np.testing.assert_array_equal(m(np.array([7, 3], np.int64))[0], [[1, 0], [0, 1]])
    with pytest.raises(IndexError, match="argument 'X'"):
        m(np.array([7, 4], np.int64))


def test_string_values_are_refused_in_one_line() -> None:
    """(String keys come with a string input, which the importer refuses first.)"""
    node = helper.make_node("LabelEncoder", ["X"], ["Y"], domain=ML, keys_int64s=[1, 2], values_strings=["a", "b"])
    model = ml_model(node, {"X": np.zeros(3, np.int64)}, object, 2)
    with pytest.raises(opc.OpcError, match=r"LabelEncoder\): values are strings: opc has no string tensors"):
        opc.import_onnx(model)


def test_probit_is_refused_in_one_line() -> None:
    model, _ = forest_case(1, np.float32, [0], 1, 0, False)
    (attr,) = [a for a in model.graph.node[0].attribute if a.name == "post_transform"]
    attr.i = 4
    with pytest.raises(opc.InputError, match="post_transform PROBIT is not supported: it needs an inverse erf"):
        opc.import_onnx(model)
