"""ai.onnx.ml's TreeEnsembleClassifier (opc/onnx_import/trees.py) against onnxruntime, the oracle:
small random forests (2-3 trees of depth 1-3, every branch mode, NaN features that follow the true
branch where a node says so) over 2, 3 and 4 classes, with base values or not, every post_transform
opc imports, float32, float64 and int64 features, ml opsets 1 and 3 (weights as tensors), string labels; and the
two-class cases onnxruntime treats apart (weights for one class only, all >= 0 or some < 0; one or
two base values), each built by hand. Labels must be equal, scores within rtol 1e-5 (atol 1e-6:
onnxruntime's logistic of a negative score is 1 - logistic(-score) in float32). All cases compile into
one module."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import call, helper, import_all, numpy_helper, onnx, run_ort

import opc

ML = "ai.onnx.ml"
ALL_MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def classifier_model(attrs: dict, x: np.ndarray, n_classes: int, ml_opset: int):
    node = helper.make_node("TreeEnsembleClassifier", ["X"], ["Y", "Z"], domain=ML, **attrs)
    ins = [helper.make_tensor_value_info("X", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)]
    outs = [helper.make_tensor_value_info("Y", onnx.TensorProto.INT64, [len(x)]),
            helper.make_tensor_value_info("Z", onnx.TensorProto.FLOAT, [len(x), n_classes])]
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(ML, ml_opset)]
    model = helper.make_model(helper.make_graph([node], "g", ins, outs), opset_imports=opsets,
                              ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(model, full_check=True)
    return model


def random_classifier(seed: int, modes: list[str], n_trees: int, n_classes: int, votes: str, positive: bool,
                      missing: bool) -> dict:
    """A random TreeEnsembleClassifier's nodes_* and class_* attributes: per tree, nodes numbered from 0
    in list order (root first), depth 1 to 3. Every leaf votes (onnxruntime refuses a leaf without a
    weight): for every class (votes "all"), for a random nonempty subset ("some"), or for class 0 or 1
    alone ("one0", "one1", two classes: onnxruntime's binary case). Weights in [0, 1 / n_trees)
    (sums about the 0.5 onnxruntime's binary case splits at) or normal."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes",
                                             "nodes_values", "nodes_truenodeids", "nodes_falsenodeids",
                                             "nodes_missing_value_tracks_true", "class_treeids", "class_nodeids",
                                             "class_ids", "class_weights")}

    def vote(tree: int, nid: int) -> None:
        if votes == "all":
            ids = list(range(n_classes))
        elif votes == "some":
            ids = sorted(rng.choice(n_classes, int(rng.integers(1, n_classes + 1)), replace=False).tolist())
        else:
            ids = [int(votes[-1])]
        for c in ids:
            cols["class_treeids"].append(tree)
            cols["class_nodeids"].append(nid)
            cols["class_ids"].append(c)
            cols["class_weights"].append(float(rng.random() / n_trees if positive else rng.normal(0, 1)))

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
            vote(tree, nid)
            return nid
        cols["nodes_modes"][k] = str(rng.choice(modes))
        cols["nodes_featureids"][k] = int(rng.integers(0, 3))
        cols["nodes_values"][k] = float(rng.integers(0, 6)) + (0.5 if rng.random() < 0.3 else 0.0)
        cols["nodes_missing_value_tracks_true"][k] = int(missing and rng.random() < 0.5)
        cols["nodes_truenodeids"][k] = grow(tree, depth - 1, numbering)
        cols["nodes_falsenodeids"][k] = grow(tree, depth - 1, numbering)
        return nid

    for tree in range(n_trees):
        grow(tree, int(rng.integers(1, 4)), [0])
    if not missing:
        del cols["nodes_missing_value_tracks_true"]
    return cols


def forest_case(seed: int, modes: list[str], n_classes: int, votes: str, positive: bool, base: int, post: str,
                dtype, missing: bool, as_tensor: bool = False):
    attrs = random_classifier(seed, modes, int(2 + seed % 2), n_classes, votes, positive, missing)
    # labels 0, 1 where both of two classes have weights: onnxruntime writes 1 or 0 there, not the labels
    labels = [0, 1] if n_classes == 2 and not votes.startswith("one") else [7, -3, 12, 5][:n_classes]
    attrs.update(classlabels_int64s=labels, post_transform=post)
    if base:
        attrs["base_values"] = [-0.25, 0.5, 1.0, 0.125][:base]
    if as_tensor:
        for name in ("nodes_values", "class_weights", "base_values"):
            if name in attrs:
                attrs[f"{name}_as_tensor"] = numpy_helper.from_array(np.array(attrs.pop(name), np.float64))
    rng = np.random.default_rng(seed + 100)
    x = rng.integers(0, 6, (48, 3)).astype(dtype)
    if missing:
        x[rng.random(x.shape) < 0.2] = np.nan
    return classifier_model(attrs, x, n_classes, 3 if as_tensor else 1), {"X": x}


def stump_case(votes: list[tuple[int, int, float]], labels: list[int], base: list[float] | None, post: str):
    """One tree: x0 <= 0 goes to leaf 1, else leaf 2; `votes` are (leaf, class, weight)."""
    attrs = {"nodes_treeids": [0, 0, 0], "nodes_nodeids": [0, 1, 2], "nodes_featureids": [0, 0, 0],
             "nodes_modes": ["BRANCH_LEQ", "LEAF", "LEAF"], "nodes_values": [0.0, 0.0, 0.0],
             "nodes_truenodeids": [1, 0, 0], "nodes_falsenodeids": [2, 0, 0],
             "class_treeids": [0] * len(votes), "class_nodeids": [v[0] for v in votes],
             "class_ids": [v[1] for v in votes], "class_weights": [v[2] for v in votes],
             "classlabels_int64s": labels, "post_transform": post}
    if base is not None:
        attrs["base_values"] = base
    x = np.array([[-1.0], [1.0], [0.0], [3.0]], np.float32)
    return classifier_model(attrs, x, len(labels), 1), {"X": x}


POSTS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"]
CASES = {}
for k, (n_classes, votes, positive, base, modes, missing, dtype, as_tensor) in enumerate([
        (3, "all", False, 0, ["BRANCH_LEQ"], False, np.float32, False),
        (3, "some", False, 3, ALL_MODES, True, np.float32, False),
        (3, "some", True, 0, ALL_MODES, False, np.float64, False),
        (4, "some", False, 4, ALL_MODES, True, np.float64, True),
        (4, "all", True, 0, ["BRANCH_LT", "BRANCH_GT"], False, np.int64, False),
        (2, "all", True, 0, ALL_MODES, True, np.float32, False),
        (2, "all", False, 2, ALL_MODES, False, np.float32, False),
        (2, "some", False, 0, ALL_MODES, True, np.float32, False),
        (2, "some", True, 2, ALL_MODES, True, np.float64, True),
        (2, "one0", True, 0, ALL_MODES, True, np.float32, False),
        (2, "one0", False, 0, ["BRANCH_GTE", "BRANCH_EQ"], False, np.float32, False),
        (2, "one0", False, 1, ALL_MODES, True, np.float32, False),
        (2, "one0", True, 1, ALL_MODES, False, np.float64, True),
        (2, "one1", True, 0, ALL_MODES, True, np.float32, False),
        (2, "one1", False, 2, ALL_MODES, True, np.float32, False),
        (2, "one0", False, 2, ["BRANCH_NEQ", "BRANCH_LEQ"], True, np.float32, False),
        (2, "all", False, 1, ALL_MODES, False, np.int64, False)]):
    for post in POSTS:
        seed = 4 * k + POSTS.index(post)
        tag = f"forest-{seed}-{n_classes}classes-{votes}-{'pos' if positive else 'mixed'}-base{base}-{post}"
        CASES[f"{tag}-{len(modes)}modes-missing{missing}-{np.dtype(dtype).name}-tensor{as_tensor}"] = forest_case(
            seed, modes, n_classes, votes, positive, base, post, dtype, missing and np.dtype(dtype).kind == "f",
            as_tensor)
for post in POSTS:
    for name, votes, labels, base in [
            ("one0-pos", [(1, 0, 0.3), (2, 0, 0.8)], [3, 7], None),
            ("one0-mixed", [(1, 0, -0.3), (2, 0, 0.8)], [3, 7], None),
            ("one1-pos", [(1, 1, 0.3), (2, 1, 0.8)], [3, 7], None),
            ("one1-mixed", [(1, 1, -0.3), (2, 1, 0.8)], [3, 7], None),
            ("one0-mixed-base1", [(1, 0, -0.3), (2, 0, 0.8)], [3, 7], [0.5]),
            ("one0-pos-base1", [(1, 0, 0.3), (2, 0, 0.8)], [3, 7], [0.1]),
            ("one0-mixed-base2", [(1, 0, -0.3), (2, 0, 0.8)], [3, 7], [0.5, 2.0]),
            ("one1-mixed-base2", [(1, 1, -0.3), (2, 1, 0.8)], [3, 7], [0.5, 2.0]),
            ("both-base2", [(1, 0, 0.7), (1, 1, 0.3), (2, 0, 0.2), (2, 1, 0.8)], [0, 1], [0.5, 2.0]),
            ("both-partial", [(1, 0, 0.7), (2, 0, 0.2), (2, 1, 0.8)], [0, 1], None),
            ("three-unscored", [(1, 0, 0.7), (1, 2, -0.2), (2, 1, -0.8)], [3, 7, 9], None),
            ("three-base", [(1, 0, 0.7), (1, 2, -0.2), (2, 1, -0.8)], [3, 7, 9], [0.1, 0.2, 0.3])]:
        CASES[f"stump-{name}-{post}"] = stump_case(votes, labels, base, post)


@pytest.fixture(scope="module")
def compiled():
    module, params = import_all({k: m for k, (m, _) in CASES.items()})
    return opc.compile(module), params


@pytest.mark.parametrize("case", list(CASES))
def test_matches_onnxruntime(compiled, case: str) -> None:
    fn, params = compiled
    model, feeds = CASES[case]
    want_label, want_scores = run_ort(model, feeds)
    got_label, got_scores = call(fn, case, feeds, params[case])
    assert got_label.dtype == np.int64 and got_scores.dtype == np.float32
    np.testing.assert_array_equal(got_label, want_label)
    np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5, atol=1e-6)


def test_forests_see_several_labels() -> None:
    """The random forests are not degenerate: each configuration (its four post_transforms together)
    gives two labels or more, but where onnxruntime's rule fixes the label: two classes both weighted
    with weights >= 0 (labels[1] wherever class 1's score, its sum or base_values[1] (0.5) + class 0's
    sum, is above 0), and weights for class 1 alone with two base values (class 1's score is then
    base_values[1], class 0's sum being 0)."""
    fixed = ("2classes-all-pos", "2classes-some-pos", "one1-mixed-base2")
    seen: dict[str, set[int]] = {}
    for case, (model, feeds) in CASES.items():
        if case.startswith("forest") and not any(f in case for f in fixed):
            key = "-".join(case.split("-")[2:6])
            seen.setdefault(key, set()).update(run_ort(model, feeds)[0].tolist())
    assert all(len(v) >= 2 for v in seen.values()), seen


@pytest.mark.parametrize("votes, labels, base", [
    ([(1, 1, 0.3), (2, 1, 0.8)], ["no", "yes"], None),
    ([(1, 1, -0.3), (2, 1, 0.8)], ["no", "yes"], None),
    ([(1, 0, 0.7), (1, 1, -0.3), (2, 0, 0.2), (2, 1, 0.8)], ["b", "a"], None),
    ([(1, 0, 0.3), (2, 2, 0.8), (1, 1, 0.5)], ["x", "y", "z"], [0.0, 0.1, 0.2])])
def test_string_labels_match_onnxruntime(votes, labels: list[str], base) -> None:
    """classlabels_strings: the label's index computed, the strings given back by the runner (lists.Labels)."""
    model, feeds = stump_case(votes, list(range(len(labels))), base, "NONE")
    node = model.graph.node[0]
    (attr,) = [a for a in node.attribute if a.name == "classlabels_int64s"]
    node.attribute.remove(attr)
    node.attribute.append(helper.make_attribute("classlabels_strings", labels))
    model.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.STRING
    got, want = opc.load_onnx(model)(*feeds.values()), run_ort(model, feeds)
    assert got[0].dtype == want[0].dtype == object
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    assert len(set(want[0].tolist())) >= 2


def test_probit_is_refused_in_one_line() -> None:
    model, _ = stump_case([(1, 0, 0.3), (2, 1, 0.8)], [0, 1], None, "PROBIT")
    with pytest.raises(opc.InputError, match="post_transform PROBIT is not supported: it needs an inverse erf") as err:
        opc.import_onnx(model)
    assert "\n" not in str(err.value)


def test_load_onnx_runs_a_classifier(tmp_path) -> None:
    """opc.load_onnx, the user's entry point, finds the converter for the ai.onnx.ml domain."""
    model, feeds = CASES["stump-one0-mixed-base1-LOGISTIC"]
    path = tmp_path / "forest.onnx"
    onnx.save(model, path)
    m = opc.load_onnx(path)
    got = m(*feeds.values())
    want = run_ort(model, feeds)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


def test_two_weighted_classes_give_class_labels() -> None:
    """Where both of two classes have weights, onnxruntime writes the label 1 or 0 itself whatever
    classlabels_int64s say; opc writes the class labels, at the same rows."""
    model, feeds = stump_case([(1, 0, 0.7), (1, 1, -0.3), (2, 0, 0.2), (2, 1, 0.8)], [5, 9], None, "NONE")
    want_label, want_scores = run_ort(model, feeds)
    got_label, got_scores = opc.load_onnx(model)(*feeds.values())
    assert set(want_label.tolist()) == {0, 1}
    np.testing.assert_array_equal(got_label, np.where(want_label == 1, 9, 5))
    np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5, atol=1e-6)
