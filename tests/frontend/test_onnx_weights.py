"""Which initializers are arguments: `opc.import_onnx(..., constants=names or a predicate)` compiles
further float initializers in as constants (and `opc import --constant NAME`); and the integer
scatters of exported models (BART shifts its token ids with ScatterND/ScatterElements), and the
GatherElements that BERT leaves over constants, folded in NumPy. Oracles:
onnxruntime for the forward, NumPy formulas for the gradients. One compiled module for all."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from onnx_helpers import call, function_name, graph_model, helper, import_all, onnx, run_ort

import opc
from opc.cli import main

RNG = np.random.default_rng(5)
X = RNG.standard_normal((2, 4)).astype(np.float32)
W = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal((3,)).astype(np.float32)


def linear() -> onnx.ModelProto:
    """y = x @ W^T + b (a Gemm, as torch exports nn.Linear)."""
    nodes = [helper.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["y"], transB=1)]
    return graph_model(nodes, {"x": X}, ["y"], {"fc.weight": W, "fc.bias": B})


# case -> (constants=, the arguments left)
CONSTANTS = {
    "none": (None, ["fc_weight", "fc_bias"]),
    "by_name": (["fc.weight"], ["fc_bias"]),
    "predicate": (lambda name, a: a.ndim == 1, ["fc_weight"]),
    "all": (lambda name, a: True, []),
}


def scatter(op: str, data: np.ndarray, indices: np.ndarray, updates: np.ndarray, **attrs) -> tuple:
    """op(data, indices, updates): data and updates graph inputs, the indices an initializer."""
    node = helper.make_node(op, ["d", "i", "u"], ["y"], **attrs)
    feeds = {"d": data, "u": updates}
    return graph_model([node], feeds, ["y"], {"i": indices}), feeds


def scatter_cases() -> dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray]]]:
    """Integer data scattered at run time: BART's shift_tokens_right, negative indices, whole rows."""
    ids = np.random.default_rng(1).integers(0, 1000, (2, 8)).astype(np.int64)
    upd = np.random.default_rng(2).integers(-5, 5, (2, 7)).astype(np.int64)
    cols = np.array([[1, 2, 3, 4, 5, 6, 7]] * 2, np.int64)
    return {
        "elements_i64": scatter("ScatterElements", ids, cols, upd, axis=1),
        "elements_neg_i32": scatter("ScatterElements", ids.astype(np.int32), -cols, upd.astype(np.int32), axis=1),
        "nd_i64": scatter("ScatterND", ids, np.array([[0, 0], [1, -8]], np.int64), np.array([7, 9], np.int64)),
        "nd_rows_i64": scatter("ScatterND", ids, np.array([[-1]], np.int64), upd[:1, :1].repeat(8, 1)),
    }


def gather_elements(n: int) -> tuple:
    """y = x + GatherElements(table, idx): both known at import (BERT's token_type_ids buffer, 512 long),
    folded by opc's NumPy folder; onnx's reference evaluator fails from 64 elements on."""
    table = np.arange(3 * n, dtype=np.int64).reshape(3, n) * 7 % 11
    idx = np.array([[0, 5, -1, 2], [n - 1, 1, 1, -n]], np.int64)
    x = np.random.default_rng(n).integers(0, 9, (2, 4)).astype(np.int64)
    nodes = [helper.make_node("GatherElements", ["table", "idx"], ["g"], axis=1), helper.make_node("Add", ["x", "g"], ["y"])]
    return graph_model(nodes, {"x": x}, ["y"], {"table": table, "idx": idx}), {"x": x}


FOLDED = {f"gather_elements_{n}": gather_elements(n) for n in (8, 64, 512)}


@pytest.fixture(scope="module")
def compiled():
    models = {f"const_{k}": (linear(), c) for k, (c, _) in CONSTANTS.items()}
    models |= {f"scatter_{k}": (m, None) for k, (m, _) in scatter_cases().items()}
    models |= {case: (m, None) for case, (m, _) in FOLDED.items()}
    module, params = import_all({case: m for case, (m, _) in models.items()},
                                {case: c for case, (_, c) in models.items()})
    return opc.compile(module, grad=True), params


@pytest.mark.parametrize("case", list(CONSTANTS))
def test_constants_are_compiled_in_and_the_rest_are_arguments(compiled, case):
    m, params = compiled
    assert list(params[f"const_{case}"]) == CONSTANTS[case][1]
    (got,) = call(m, f"const_{case}", {"x": X}, params[f"const_{case}"])
    np.testing.assert_allclose(got, run_ort(linear(), {"x": X})[0], rtol=1e-6, atol=1e-6)
    dy = RNG.standard_normal((2, 3)).astype(np.float32)
    grads = getattr(m, function_name(f"const_{case}") + "_grad")(X, *params[f"const_{case}"].values(), dy)
    grads = list(grads) if isinstance(grads, tuple) else [grads]
    want = {"x": dy @ W, "fc_weight": dy.T @ X, "fc_bias": dy.sum(0)}
    assert len(grads) == 1 + len(CONSTANTS[case][1])  # x and the arguments: no gradient for a constant
    for name, g in zip(["x", *CONSTANTS[case][1]], grads):
        np.testing.assert_allclose(g, want[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("case", list(scatter_cases()))
def test_integer_scatter_matches_onnxruntime(compiled, case):
    m, params = compiled
    model, feeds = scatter_cases()[case]
    (got,) = call(m, f"scatter_{case}", feeds, params[f"scatter_{case}"])
    (want,) = run_ort(model, feeds)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", list(FOLDED))
def test_folded_gather_elements_matches_onnxruntime(compiled, case):
    m, params = compiled
    model, feeds = FOLDED[case]
    (got,) = call(m, case, feeds, params[case])
    np.testing.assert_array_equal(got, run_ort(model, feeds)[0])


@pytest.mark.parametrize(("constants", "message"), [
    (["fc.wieght"], "constants: the graph has no initializer 'fc.wieght'"),
    ("fc.weight", "constants: expected initializer names or a predicate"),
])
def test_bad_constants_are_one_line_errors(constants, message):
    with pytest.raises(opc.OpcError, match=message) as err:
        opc.import_onnx(linear(), constants=constants)
    assert "\n" not in str(err.value) and not str(err.value).startswith("error")


def test_cli_constant_leaves_the_initializer_out_of_the_weights(tmp_path):
    path = tmp_path / "linear.onnx"
    onnx.save(linear(), str(path))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["import", str(path), "-o", str(tmp_path / "linear.mlir"), "--constant", "fc.weight"]) == 0
    assert sorted(np.load(tmp_path / "linear.npz")) == ["fc_bias"]
    text = (tmp_path / "linear.mlir").read_text()
    assert "%fc_weight = arith.constant" in text and "%fc_weight: tensor" not in text  # compiled in, no argument


def test_integer_scatter_with_reduction_is_a_one_line_refusal():
    ids = np.arange(16, dtype=np.int64).reshape(2, 8)
    model, _ = scatter("ScatterElements", ids, np.array([[1, 2]] * 2, np.int64), ids[:, :2], axis=1,
                       reduction="add")
    with pytest.raises(opc.OpcError, match=r"\(ScatterElements\): opc scatters with reduction 'add' float data only"):
        opc.import_onnx(model)
