"""LRN (a channel-window sum as one matmul by a band matrix) against onnxruntime over sizes, channel
counts and ranks, its gradient against central differences; Dropout in training mode with ratio 0
(the identity) and with a seed (ONNX's reference's draws, bit for bit); models of opsets 1 to 6 imported
by converters of their own meanings."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx_helpers import call, function_name, graph_model, helper, import_all, onnx, run_ort, single

import opc

LRN_CASES = {f"size{size}-c{c}-rank{rank}": (size, c, rank) for size, c, rank in
             [(1, 4, 4), (2, 5, 4), (3, 7, 4), (5, 6, 4), (4, 3, 3), (3, 6, 5), (7, 4, 4)]}


def lrn_case(size: int, channels: int, rank: int, dtype: type = np.float32):
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


def test_training_dropout_with_a_ratio_and_no_seed_is_one_line_refusal() -> None:
    with pytest.raises(opc.OpcError, match="training_mode with a ratio above 0 and no seed draws random numbers"):
        opc.import_onnx(dropout_model(0.5))


# seeded training Dropout: (X's dtype, shape, ratio or None for the default 0.5, seed, training_mode an
# initializer or a graph input read at run time)
SEEDED = {f"{np.dtype(dt).name}-{'x'.join(map(str, shape))}-r{None if r is None else r.dtype.name}-s{seed}-{how}":
          (dt, shape, r, seed, how) for dt, shape, r, seed, how in [
              (np.float32, (3, 4, 5), np.array(0.5, np.float32), 0, "init"),
              (np.float32, (3, 4, 5), np.array(0.75, np.float32), 0, "input"),
              (np.float32, (7,), np.array(0.3, np.float32), 42, "init"),
              (np.float32, (2, 3, 4, 5), None, 1234567, "init"),
              (np.float64, (5, 6), np.array(0.2, np.float32), 7, "init"),
              (np.float64, (4, 4), np.array(0.6, np.float64), 2**32 - 1, "input"),
              (np.float16, (3, 8), np.array(0.4, np.float32), 3, "init"),
              (np.float16, (9,), np.array(0.5, np.float16), 0, "input"),
              (np.float32, (2, 50), np.array(0.1, np.float64), 11, "init")]}


def seeded_dropout_model(dt, shape, ratio, seed: int, how: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = np.random.default_rng(seed % 1000).standard_normal(shape).astype(dt)
    x.reshape(-1)[0] = np.inf  # 0 * inf is NaN in the reference's mask * X: dropped or scaled, the same
    inputs, inits = {"x": x}, {} if ratio is None else {"r": ratio}
    (inputs if how == "input" else inits)["t"] = np.array(True)
    node = helper.make_node("Dropout", ["x", "" if ratio is None else "r", "t"], ["y", "mask"], seed=seed)
    return graph_model([node], inputs, ["y", "mask"], inits, opset=13), inputs


def reference_dropout(model: onnx.ModelProto, feeds: dict, ratio) -> list[np.ndarray]:
    """ONNX's reference evaluator, its outputs in X's type (an f16 X with an f32 ratio comes back f32); without
    a ratio input (the evaluator passes None for it) the reference's own function at its default 0.5."""
    x = feeds["x"]
    with np.errstate(invalid="ignore"):  # 0 * inf
        return reference_outputs(model, feeds, ratio, x)


def reference_outputs(model: onnx.ModelProto, feeds: dict, ratio, x: np.ndarray) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.ops.op_dropout import _dropout

    if ratio is None:
        got: Any = _dropout(x, 0.5, seed=model.graph.node[0].attribute[0].i, training_mode=True, return_mask=True)
    else:
        got = ReferenceEvaluator(model).run(None, feeds)
    return [np.asarray(got[0]).astype(x.dtype), np.asarray(got[1])]


@pytest.fixture(scope="module")
def seeded():
    built = {cid: seeded_dropout_model(*spec) for cid, spec in SEEDED.items()}
    module, params = import_all({cid: m for cid, (m, _) in built.items()})
    return opc.compile(module), params, built


@pytest.mark.parametrize("cid", list(SEEDED))
def test_seeded_training_dropout_draws_what_onnx_reference_draws(seeded, cid: str) -> None:
    m, params, built = seeded
    model, feeds = built[cid]
    y, mask = call(m, cid, feeds, params[cid])
    want_y, want_mask = reference_dropout(model, feeds, SEEDED[cid][2])
    assert mask.dtype == np.bool_ and y.dtype == feeds["x"].dtype
    np.testing.assert_array_equal(mask, want_mask)
    np.testing.assert_array_equal(y, want_y)  # bit for bit: the same draws, scale and rounding
    assert 0 < mask.sum() < mask.size


@pytest.mark.parametrize("cid", [c for c in SEEDED if SEEDED[c][4] == "input"])
def test_seeded_dropout_with_training_mode_false_at_run_time_is_the_identity(seeded, cid: str) -> None:
    m, params, built = seeded
    _, feeds = built[cid]
    y, mask = call(m, cid, {**feeds, "t": np.array(False)}, params[cid])
    np.testing.assert_array_equal(y, feeds["x"])
    assert mask.all()


def test_seeded_dropout_needs_its_shape_and_load_onnx_compiles_per_shape() -> None:
    """An open dim: `opc import` says why in one line; opc.load_onnx then compiles for each shape, and each
    shape's draws are the reference's."""
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y"], seed=5)
    x_info = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 3])
    inits = [onnx.numpy_helper.from_array(np.array(0.5, np.float32), "r"),
             onnx.numpy_helper.from_array(np.array(True), "t")]
    graph = helper.make_graph([node], "g", [x_info], [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    with pytest.raises(opc.OpcError, match="seeded training Dropout draws one number per element of X: its shape "
                                           r"must be known at compile time; give the open sizes at import"):
        opc.import_onnx(model)
    f = opc.load_onnx(model)
    from onnx.reference import ReferenceEvaluator

    for n in (1, 4):
        x = np.arange(n * 3, dtype=np.float32).reshape(n, 3) + 1
        (want,) = ReferenceEvaluator(model).run(None, {"x": x})
        np.testing.assert_array_equal(f(x)[0], want)


def test_seed_outside_numpy_range_is_refused() -> None:
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y"], seed=-1)
    model = graph_model([node], {"x": np.ones((2, 2), np.float32)}, ["y"],
                        {"r": np.array(0.5, np.float32), "t": np.array(True)}, opset=13)
    with pytest.raises(opc.OpcError, match=r"seed -1: NumPy's RandomState, ONNX's reference generator, takes"):
        opc.import_onnx(model)


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
