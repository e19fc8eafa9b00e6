"""LRN (a channel-window sum as one matmul by a band matrix) against onnxruntime over sizes, channel
counts and ranks, its gradient against central differences; Dropout in training mode with ratio 0
(the identity); models of opsets 1 to 6 imported by converters of their own meanings."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import call, function_name, import_all, onnx, run_ort, single

import opc

LRN_CASES = {f"size{size}-c{c}-rank{rank}": (size, c, rank) for size, c, rank in
             [(1, 4, 4), (2, 5, 4), (3, 7, 4), (5, 6, 4), (4, 3, 3), (3, 6, 5), (7, 4, 4)]}


def lrn_case(size: int, channels: int, rank: int, dtype=np.float32):
    rng = np.random.default_rng(size * 100 + channels * 10 + rank)
    x = rng.standard_normal((2, channels, *[3] * (rank - 2))).astype(dtype)
    return single("LRN", {"x": x}, opset=13, size=size, alpha=0.02, beta=0.8, bias=1.5), {"x": x}


@pytest.fixture(scope="module")
def compiled():
    built = {cid: lrn_case(*spec) for cid, spec in LRN_CASES.items()}
    built64 = {cid + "-f64": lrn_case(*spec, dtype=np.float64) for cid, spec in list(LRN_CASES.items())[:3]}
    module, params = import_all({c: m for c, (m, _) in {**built, **built64}.items()})
    return opc.compile(module, grad=True), params, built, built64


def numpy_lrn(x: np.ndarray, size: int, alpha: float = 0.02, beta: float = 0.8, bias: float = 1.5) -> np.ndarray:
    """ONNX's formula: channel c sums squares over c - floor((size-1)/2) .. c + ceil((size-1)/2)."""
    x64 = x.astype(np.float64)
    sq = np.zeros_like(x64)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1] - 1, c + size // 2)
        sq[:, c] = np.sum(x64[:, lo:hi + 1] ** 2, axis=1)
    return x64 / (bias + alpha / size * sq) ** beta


@pytest.mark.parametrize("cid", list(LRN_CASES))
def test_lrn_matches_formula_and_onnxruntime(compiled, cid: str) -> None:
    """The NumPy formula for every case; onnxruntime too where it runs (odd sizes of 4-D inputs: its kernel
    refuses the others; onnx's reference evaluator sums over the wrong axis, so it is no oracle here)."""
    m, params, built, _ = compiled
    model, feeds = built[cid]
    (got,) = call(m, cid, feeds, params[cid])
    np.testing.assert_allclose(got, numpy_lrn(feeds["x"], LRN_CASES[cid][0]), rtol=2e-5, atol=1e-6)
    if LRN_CASES[cid][0] % 2 and LRN_CASES[cid][2] == 4:
        (want,) = run_ort(model, feeds)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("cid", [c + "-f64" for c in list(LRN_CASES)[:3]])
def test_lrn_gradient_matches_central_differences(compiled, cid: str) -> None:
    m, params, _, built64 = compiled
    (x,) = built64[cid][1].values()
    rng = np.random.default_rng(1)
    dy, v, h = rng.uniform(-1, 1, x.shape), rng.uniform(-1, 1, x.shape), 1e-6
    (dx,) = [getattr(m, function_name(cid) + "_grad")(x, dy)]
    f = getattr(m, function_name(cid))
    fd = (np.sum(f(x + h * v) * dy) - np.sum(f(x - h * v) * dy)) / (2 * h)
    assert abs(fd - np.sum(dx * v)) <= 1e-7 * max(1.0, abs(fd))


def dropout_model(ratio: float) -> onnx.ModelProto:
    """Dropout in training mode (its ratio and training_mode given as initializers)."""
    x = np.ones((2, 3), np.float32)
    inits = {"r": np.array(ratio, np.float32), "t": np.array(True)}
    return single("Dropout", {"x": x}, n_outputs=2, initializers=inits, opset=13)


def test_training_dropout_with_ratio_zero_is_the_identity() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y, mask = opc.load_onnx(dropout_model(0.0))(x)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()


def test_training_dropout_with_a_ratio_is_one_line_refusal() -> None:
    with pytest.raises(opc.OpcError, match="training_mode with a ratio above 0 draws random numbers"):
        opc.import_onnx(dropout_model(0.5))


@pytest.mark.parametrize("op", ["Bernoulli", "RandomUniformLike", "RandomNormalLike"])
def test_random_ops_are_refused_saying_why(op: str) -> None:
    model = single(op, {"x": np.full((2, 3), 0.5, np.float32)}, opset=22)
    with pytest.raises(opc.OpcError, match=rf"unsupported op {op} \(ai.onnx opset 22\): it draws random numbers, "
                                           "from a generator ONNX does not define"):
        opc.import_onnx(model)


def test_opset_1_model_is_converted_on_import() -> None:
    x = np.array([[True, False], [False, True]])
    model = single("Not", {"x": x}, opset=7)
    model.opset_import[0].version = 1
    model.ir_version = 3
    (got,) = opc.load_onnx(model)(x)
    np.testing.assert_array_equal(got, ~x)
