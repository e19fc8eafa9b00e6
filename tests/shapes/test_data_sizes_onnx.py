"""ONNX NonZero and Compress on values known only at run time (issue 33 item 5): imported as
`opc.nonzero` (a gather at its positions for Compress), whose count is a size of its own, so one
compile serves every input value, and with open dims every size. Against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import helper, onnx, run_ort
from test_dynamic_onnx import model

import opc

F32, BOOL = onnx.TensorProto.FLOAT, onnx.TensorProto.BOOL
ONNX_TYPES = {np.float32: onnx.TensorProto.FLOAT, np.float64: onnx.TensorProto.DOUBLE,
              np.int32: onnx.TensorProto.INT32, np.int64: onnx.TensorProto.INT64, np.uint8: onnx.TensorProto.UINT8,
              np.int8: onnx.TensorProto.INT8, np.bool_: onnx.TensorProto.BOOL, np.float16: onnx.TensorProto.FLOAT16}

NO_ORT = (np.float64, np.int8)  # onnxruntime has no NonZero kernel for them: NumPy (ONNX's reference) is the oracle


def sparse(shape, dtype, density: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return ((rng.random(shape) < density) * rng.integers(1, 9, shape)).astype(dtype)


def same(got, want) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", list(ONNX_TYPES), ids=lambda t: np.dtype(t).name)
def test_nonzero_of_an_input_compiles_once(dtype):
    m = model([helper.make_node("NonZero", ["x"], ["y"], name="nz")], [("x", ONNX_TYPES[dtype], [3, 4])], ["y"])
    run = opc.load_onnx(m)
    for seed, density in enumerate((0.0, 0.3, 1.0, 0.6)):
        x = sparse((3, 4), dtype, density, seed)
        want = np.array(np.nonzero(x)) if dtype in NO_ORT else run_ort(m, {"x": x})[0]
        same(run(x=x)[0], want)
    assert len(run.variants) <= 1  # one module for every value


@pytest.mark.parametrize("shape", [["n"], ["b", 4], [2, "s", 3]], ids=str)
def test_nonzero_with_open_dims(shape):
    m = model([helper.make_node("NonZero", ["x"], ["y"], name="nz")], [("x", F32, shape)], ["y"])
    run = opc.load_onnx(m)
    for n in (0, 1, 5, 17):
        dims = [n if isinstance(d, str) else d for d in shape]
        x = sparse(dims, np.float32, 0.4, n)
        same(run(x=x)[0], run_ort(m, {"x": x})[0])
    assert run.static_reason is None and not run.variants


def test_nonzero_feeding_more_ops():
    """Positions of x's positive entries, then x gathered at their flat offsets and summed."""
    nodes = [helper.make_node("Greater", ["x", "zero"], ["pos"]), helper.make_node("NonZero", ["pos"], ["at"]),
             helper.make_node("Transpose", ["at"], ["at_t"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "at_t"], ["picked"]),
             helper.make_node("ReduceSum", ["picked"], ["total"], keepdims=0)]
    m = model(nodes, [("x", F32, ["b", 5])], ["at", "picked", "total"],
              {"zero": np.array(0.0, np.float32)})
    run = opc.load_onnx(m)
    for n in (0, 1, 6):
        x = np.random.default_rng(n).standard_normal((n, 5)).astype(np.float32)
        for g, w in zip(run(x=x), run_ort(m, {"x": x})):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-6)


@pytest.mark.parametrize("axis", [0, 1, -1, None])
def test_compress_with_a_run_time_condition(axis):
    attrs = {} if axis is None else {"axis": axis}
    n = {0: 3, 1: 4, -1: 4, None: 12}[axis]
    m = model([helper.make_node("Compress", ["x", "c"], ["y"], name="cp", **attrs)],
              [("x", F32, [3, 4]), ("c", BOOL, [n])], ["y"])
    run = opc.load_onnx(m)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for seed, density in enumerate((0.0, 0.5, 1.0)):
        c = np.random.default_rng(seed).random(n) < density
        same(run(x=x, c=c)[0], run_ort(m, {"x": x, "c": c})[0])


def test_compress_with_open_dims():
    m = model([helper.make_node("Compress", ["x", "c"], ["y"], name="cp", axis=0)],
              [("x", F32, ["b", 4]), ("c", BOOL, ["b"])], ["y"])
    run = opc.load_onnx(m)
    for b in (0, 1, 7, 20):
        x = np.random.default_rng(b).random((b, 4)).astype(np.float32)
        c = np.random.default_rng(b + 1).random(b) > 0.5
        same(run(x=x, c=c)[0], run_ort(m, {"x": x, "c": c})[0])
    assert run.static_reason is None and not run.variants


def test_a_compress_condition_past_the_axis_is_an_index_error():
    m = model([helper.make_node("Compress", ["x", "c"], ["y"], name="cp", axis=0)],
              [("x", F32, [2, 3]), ("c", BOOL, [4])], ["y"])
    run = opc.load_onnx(m)
    x = np.ones((2, 3), np.float32)
    same(run(x=x, c=np.array([True, False, False, False]))[0], x[:1])
    with pytest.raises(IndexError, match=r"index computed from argument .c. is out of range for axis 0 of size 2 \(opc.gather\); it is 3"):
        run(x=x, c=np.array([True, False, False, True]))


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("axis", [1, 0, -1])
def test_topk_with_a_run_time_k(axis, largest):
    m = model([helper.make_node("TopK", ["x", "k"], ["v", "i"], name="top", axis=axis, largest=largest)],
              [("x", F32, ["b", 5]), ("k", onnx.TensorProto.INT64, [1])], ["v", "i"])
    run = opc.load_onnx(m)
    for b in (1, 4, 9):
        x = np.random.default_rng(b).integers(0, 4, (b, 5)).astype(np.float32)  # ties: the lower index first
        size = x.shape[axis]
        for k in sorted({0, 1, size // 2, size}):
            feeds = {"x": x, "k": np.array([k], np.int64)}
            for g, w in zip(run(**feeds), run_ort(m, feeds)):
                same(g, w)
    assert run.static_reason is None and not run.variants


def numpy_unique(x: np.ndarray, is_sorted: int) -> list[np.ndarray]:
    """ONNX Unique without axis, from np.unique (first-occurrence order for sorted=0)."""
    y, first, inverse, counts = np.unique(x.reshape(-1), return_index=True, return_inverse=True,
                                          return_counts=True)
    if not is_sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y, first, counts, inverse = y[order], first[order], counts[order], rank[inverse]
    return [y, first, inverse.reshape(-1), counts]


@pytest.mark.parametrize("is_sorted", [1, 0])
@pytest.mark.parametrize("dims,dtype", [(["n"], np.float32), (["b", 3], np.int64), ([2, "s"], np.int32)], ids=str)
def test_unique_of_a_run_time_input(dims, dtype, is_sorted):
    m = model([helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], name="u", sorted=is_sorted)],
              [("x", ONNX_TYPES[dtype], dims)], ["y", "first", "inverse", "counts"])
    run = opc.load_onnx(m)
    for n in (0, 1, 6, 25):
        shape = [n if isinstance(d, str) else d for d in dims]
        x = np.random.default_rng(n).integers(-3, 4, shape).astype(dtype)
        got = run(x=x)
        # onnxruntime has Unique for float and int64 only (and refuses an empty input): NumPy otherwise
        want = run_ort(m, {"x": x}) if x.size and dtype in (np.float32, np.int64) else numpy_unique(x, is_sorted)
        for g, w in zip(got, want):
            same(g, w)
    assert run.static_reason is None and not run.variants


def nms_feeds(batches: int, classes: int, boxes: int, center: int, seed: int) -> dict[str, np.ndarray]:
    r = np.random.default_rng(seed)
    corner, size = r.uniform(0, 10, (batches, boxes, 2)), r.uniform(1, 5, (batches, boxes, 2))
    xy = np.concatenate([corner + size / 2, size] if center else [corner, corner + size], axis=-1)
    scores = r.integers(0, 10, (batches, classes, boxes)) / 10  # ties: the lower index first
    return {"boxes": xy.astype(np.float32), "scores": scores.astype(np.float32)}


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("max_out,iou,score", [(3, 0.3, 0.0), (10, 0.5, 0.45), (0, 0.5, 0.0), (2, 0.0, 0.95)])
def test_non_max_suppression_of_run_time_boxes(center, max_out, iou, score):
    m = model([helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score"], ["sel"],
                                name="nms", center_point_box=center)],
              [("boxes", F32, ["b", "n", 4]), ("scores", F32, ["b", 2, "n"]), ("max_out", onnx.TensorProto.INT64, [1]),
               ("iou", F32, [1]), ("score", F32, [1])], ["sel"])
    run = opc.load_onnx(m)
    for seed, (b, n) in enumerate([(1, 8), (2, 5), (1, 1), (3, 12)]):
        feeds = {**nms_feeds(b, 2, n, center, seed), "max_out": np.array([max_out], np.int64),
                 "iou": np.array([iou], np.float32), "score": np.array([score], np.float32)}
        same(run(**feeds)[0], run_ort(m, feeds)[0])
    assert run.static_reason is None and not run.variants
