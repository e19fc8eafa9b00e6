"""ONNX Compress, NonZero, MaxUnpool, MelWeightMatrix, Upsample, RoiAlign, Unique, NonMaxSuppression,
TfIdfVectorizer (opc/onnx_import/: tensor.py, detection.py, text.py, ...) and the Einsum ellipses and diagonals, Resize's
keep_aspect_ratio_policy where the size rounds up, MaxPool's column-major indices, ConvTranspose's
output_shape larger than the input gives (tensor.py, nn.py).

Every case is imported as the node suite and opc.load_onnx do, for its inputs' shapes and values (an
input a converter needs at compile time is bound by value), all into one module; the forward against
onnxruntime, the gradients w.r.t. X (Compress, MaxUnpool, RoiAlign) against central differences of
opc's own forward in float64."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from onnx_helpers import graph_model, helper, run_ort
from xdsl.dialects.builtin import ModuleOp, StringAttr

import opc
from opc.onnx_import import import_graph

F32, F64 = np.float32, np.float64


def rng_for(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def one(op: str, feeds: dict, n_out: int = 1, opset: int = 22, **attrs):
    outs = [f"y{i}" for i in range(n_out)]
    model = graph_model([helper.make_node(op, list(feeds), outs, **attrs)], feeds, outs, opset=opset)
    if any(not o.type.tensor_type.HasField("shape") for o in model.graph.output):
        # shapes that depend on input values (MaxUnpool's output_shape, MelWeightMatrix's sizes) are left
        # unknown by shape inference, and the checker wants them: onnx's reference evaluator's
        from onnx.reference import ReferenceEvaluator

        for out, value in zip(model.graph.output, ReferenceEvaluator(model).run(None, feeds)):
            for d in value.shape:
                out.type.tensor_type.shape.dim.add().dim_value = d
    return model, feeds


# ---------------------------------------------------------------------------
# Cases: name -> make(dtype) -> (model, feeds)
# ---------------------------------------------------------------------------


def compress(axis, cond, dt=F32):
    x = rng_for("compress", axis).standard_normal((3, 4, 5)).astype(dt)
    attrs = {} if axis is None else {"axis": axis}
    return one("Compress", {"x": x, "condition": np.array(cond, bool)}, **attrs)


def nonzero(dt=F32):
    x = (rng_for("nonzero").standard_normal((3, 4)) > 0.3).astype(dt)
    return one("NonZero", {"x": x})


def max_unpool(kernel, strides, pads, out_shape=None, dt=F32, size=6):
    """Pooled values and indices from onnxruntime's MaxPool (of an input the unpooled shape fits), unpooled."""
    x = rng_for("unpool", kernel, strides).standard_normal((2, 3, size, size)).astype(dt)
    pool = graph_model([helper.make_node("MaxPool", ["x"], ["v", "i"], kernel_shape=kernel, strides=strides,
                                         pads=pads)], {"x": x}, ["v", "i"], opset=12)
    v, i = run_ort(pool, {"x": x})
    feeds = {"v": v.astype(dt), "i": i}
    if out_shape is not None:
        feeds["shape"] = np.array(out_shape, np.int64)
    return one("MaxUnpool", feeds, opset=11, kernel_shape=kernel, strides=strides, pads=pads)  # ort: 9, 11


def einsum(equation, *shapes, dt=F32):
    r = rng_for("einsum", equation)
    return one("Einsum", {f"x{k}": r.standard_normal(s).astype(dt) for k, s in enumerate(shapes)},
               equation=equation)


def max_pool_column_major(kernel, strides, shape, dt=F32):
    x = rng_for("pool", kernel, shape).standard_normal(shape).astype(dt)
    return one("MaxPool", {"x": x}, n_out=2, kernel_shape=kernel, strides=strides, storage_order=1)


def conv_transpose_shape(out_shape, strides, auto_pad=None, dt=F32):
    r = rng_for("ct", out_shape, strides)
    feeds = {"x": r.standard_normal((1, 2, 3, 3)).astype(dt), "w": r.standard_normal((2, 3, 3, 3)).astype(dt),
             "b": r.standard_normal(3).astype(dt)}
    attrs = {"auto_pad": auto_pad} if auto_pad else {}
    return one("ConvTranspose", feeds, output_shape=out_shape, strides=strides, **attrs)


def mel(bins, dft, rate, low, high, dt=F32):
    feeds = {"n": np.array(bins, np.int64), "dft": np.array(dft, np.int64), "rate": np.array(rate, np.int64),
             "low": np.array(low, F32), "high": np.array(high, F32)}
    return one("MelWeightMatrix", feeds, opset=17)


def upsample(mode, scales, opset, dt=F32):
    x = rng_for("up", mode, scales).standard_normal((1, 2, 3, 4)).astype(dt)
    if opset >= 9:
        return one("Upsample", {"x": x, "scales": np.array(scales, F32)}, opset=opset, mode=mode)
    return one("Upsample", {"x": x}, opset=opset, mode=mode, scales=scales)


def unique(shape, axis, is_sorted, dt=F32):
    x = rng_for("unique", shape, axis).integers(0, 4, shape).astype(dt)  # repeats, also of rows
    attrs = {"sorted": is_sorted} if axis is None else {"sorted": is_sorted, "axis": axis}
    return one("Unique", {"x": x}, n_out=4, **attrs)


def nms(batches, classes, center, max_out, iou, score, dt=F32):
    r = rng_for("nms", batches, classes, center)
    corner = r.uniform(0, 10, (batches, 8, 2))
    size = r.uniform(1, 5, (batches, 8, 2))
    boxes = np.concatenate([corner + size / 2, size] if center else [corner, corner + size], axis=-1)
    feeds = {"boxes": boxes.astype(dt), "scores": r.uniform(0, 1, (batches, classes, 8)).astype(dt),
             "max_out": np.array([max_out], np.int64), "iou": np.array([iou], dt), "score": np.array([score], dt)}
    return one("NonMaxSuppression", feeds, opset=11, center_point_box=center)


def roi_align(mode, transform, ratio, dt=F32):
    r = rng_for("roi", mode, transform, ratio)
    x = r.standard_normal((2, 3, 7, 8)).astype(dt)
    corner = r.uniform(-1.5, 6, (5, 2))  # some rois reach past the image: samples there read 0
    rois = np.concatenate([corner, corner + r.uniform(0.5, 5, (5, 2))], axis=1).astype(dt)
    feeds = {"x": x, "rois": rois, "batch": np.array([0, 1, 1, 0, 1], np.int64)}
    return one("RoiAlign", feeds, opset=16, mode=mode, coordinate_transformation_mode=transform,
               output_height=3, output_width=2, sampling_ratio=ratio, spatial_scale=0.9)


def resize_aspect(shape, sizes, policy, mode, dt=F32):
    """keep_aspect_ratio_policy where the rounded size exceeds int(scale * n) along an axis."""
    x = rng_for("resize", shape, policy, mode).standard_normal(shape).astype(dt)
    feeds = {"x": x, "sizes": np.array(sizes, np.int64)}
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y0"], axes=[2, 3], keep_aspect_ratio_policy=policy,
                            mode=mode)
    return graph_model([node], feeds, ["y0"], opset=18), feeds


def tfidf(shape, lo, hi, skips, mode, weighted, dt=F32):
    """Pool: unigrams 2, 3, 5; bigrams (2, 3), (3, 3), (5, 2); trigram (2, 3, 5); outputs permuted."""
    x = rng_for("tfidf", shape, skips).integers(1, 7, shape).astype(np.int32)
    attrs = {"pool_int64s": [2, 3, 5, 2, 3, 3, 3, 5, 2, 2, 3, 5], "ngram_counts": [0, 3, 9],
             "ngram_indexes": [6, 0, 2, 1, 3, 5, 4], "min_gram_length": lo, "max_gram_length": hi,
             "max_skip_count": skips, "mode": mode}
    if weighted:
        attrs["weights"] = [0.5, 1.5, 2.0, 1.0, 3.0, 0.25, 4.0]
    return one("TfIdfVectorizer", {"x": x}, opset=9, **attrs)


CASES = {
    "compress-axis0": lambda dt=F32: compress(0, [1, 0, 1], dt),
    "compress-axis1-short": lambda dt=F32: compress(1, [0, 1, 1], dt),
    "compress-axis-neg": lambda dt=F32: compress(-1, [1, 0, 0, 1, 1], dt),
    "compress-flat": lambda dt=F32: compress(None, [0, 1, 0, 0, 1, 1, 0, 1], dt),
    "nonzero": lambda dt=F32: nonzero(dt),
    "unpool-2-2": lambda dt=F32: max_unpool([2, 2], [2, 2], [0, 0, 0, 0], None, dt),
    "unpool-3-2-overlap": lambda dt=F32: max_unpool([3, 3], [2, 2], [1, 1, 1, 1], None, dt, size=5),
    "unpool-2-2-shape": lambda dt=F32: max_unpool([2, 2], [2, 2], [0, 0, 0, 0], [2, 3, 6, 6], dt),
    "einsum-batch-diag": lambda dt=F32: einsum("...ii->...i", (2, 3, 4, 4), dt=dt),
    "einsum-ellipsis-matmul": lambda dt=F32: einsum("...ij,...jk->...ik", (3, 2, 3, 4), (1, 2, 4, 5), dt=dt),
    "einsum-ellipsis-broadcast": lambda dt=F32: einsum("...ij,jk", (2, 1, 3, 4), (4, 5), dt=dt),
    "einsum-ellipsis-middle": lambda dt=F32: einsum("b...j,bj->...b", (2, 3, 5, 4), (2, 4), dt=dt),
    "einsum-trace": lambda dt=F32: einsum("ii", (4, 4), dt=dt),
    "einsum-diag-product": lambda dt=F32: einsum("iij,jk->ik", (3, 3, 4), (4, 2), dt=dt),
    "pool-col-2d": lambda dt=F32: max_pool_column_major([2, 2], [2, 2], (2, 3, 5, 6), dt),
    "pool-col-2d-overlap": lambda dt=F32: max_pool_column_major([3, 2], [1, 2], (1, 2, 5, 6), dt),
    "pool-col-3d": lambda dt=F32: max_pool_column_major([2, 2, 2], [1, 2, 2], (1, 2, 3, 4, 5), dt),
    "convt-shape-larger": lambda dt=F32: conv_transpose_shape([10, 8], [3, 2], None, dt),
    "convt-shape-larger-2": lambda dt=F32: conv_transpose_shape([11, 8], [3, 2], None, dt),
    "convt-shape-larger-upper": lambda dt=F32: conv_transpose_shape([11, 8], [3, 2], "SAME_UPPER", dt),
    "mel-8-64": lambda dt=F32: mel(8, 64, 8000, 0.0, 4000.0),
    "mel-5-33": lambda dt=F32: mel(5, 33, 16000, 100.0, 5000.0),
    "upsample-9-nearest": lambda dt=F32: upsample("nearest", [1.0, 1.0, 2.0, 3.0], 9, dt),
    "upsample-9-linear": lambda dt=F32: upsample("linear", [1.0, 1.0, 2.0, 1.5], 9, dt),
    "upsample-7-nearest": lambda dt=F32: upsample("nearest", [1.0, 1.0, 3.0, 2.0], 7, dt),
    "unique-flat-sorted": lambda dt=F32: unique((3, 5), None, 1, dt),
    "unique-flat-unsorted": lambda dt=F32: unique((4, 5), None, 0, dt),
    "unique-rows": lambda dt=F32: unique((6, 2), 0, 1, dt),
    "unique-columns-negative": lambda dt=F32: unique((2, 7), -1, 1, dt),
    "nms-corners": lambda dt=F32: nms(1, 1, 0, 3, 0.3, 0.0, dt),
    "nms-centers-classes": lambda dt=F32: nms(2, 2, 1, 4, 0.2, 0.25, dt),
    "roi-avg-half-2": lambda dt=F32: roi_align("avg", "half_pixel", 2, dt),
    "roi-avg-output-1": lambda dt=F32: roi_align("avg", "output_half_pixel", 1, dt),
    "roi-max-half-2": lambda dt=F32: roi_align("max", "half_pixel", 2, dt),
    "roi-avg-half-adaptive": lambda dt=F32: roi_align("avg", "half_pixel", 0, dt),
    "roi-max-output-adaptive": lambda dt=F32: roi_align("max", "output_half_pixel", 0, dt),
    "resize-not-larger-linear": lambda dt=F32: resize_aspect((1, 2, 3, 8), [2, 5], "not_larger", "linear", dt),
    "resize-not-smaller-nearest": lambda dt=F32: resize_aspect((1, 2, 4, 6), [3, 3], "not_smaller", "nearest", dt),
    "resize-not-smaller-cubic": lambda dt=F32: resize_aspect((1, 2, 4, 6), [3, 3], "not_smaller", "cubic", dt),
    "tfidf-tf-1d-uni-bi-tri": lambda dt=F32: tfidf((12,), 1, 3, 2, "TF", False),
    "tfidf-tf-batch-bigrams": lambda dt=F32: tfidf((3, 9), 2, 2, 0, "TF", False),
    "tfidf-idf-weights": lambda dt=F32: tfidf((2, 10), 1, 2, 1, "IDF", True),
    "tfidf-tfidf-weights": lambda dt=F32: tfidf((2, 10), 1, 3, 3, "TFIDF", True),
    "tfidf-idf-plain": lambda dt=F32: tfidf((10,), 2, 3, 1, "IDF", False),
}
GRAD_CASES = ["compress-axis1-short", "compress-flat", "unpool-2-2", "unpool-3-2-overlap", "unpool-2-2-shape",
              "einsum-batch-diag", "einsum-ellipsis-matmul", "roi-avg-half-2", "roi-max-half-2",
              "roi-avg-half-adaptive"]


def function_name(cid: str) -> str:
    return "f_" + "".join(c if c.isalnum() else "_" for c in cid)


def import_bound(built: dict) -> tuple[ModuleOp, dict[str, list[np.ndarray]]]:
    """Each case imported for its feeds' shapes and values (bound inputs compiled in), renamed, in one
    module; with the arguments to call it with."""
    functions, args = [], {}
    for cid, (model, feeds) in built.items():
        module, params, bound = import_graph(model, {n: v.shape for n, v in feeds.items()}, feeds, where=cid)
        (f,) = list(module.ops)
        f.detach()
        f.sym_name = StringAttr(function_name(cid))
        functions.append(f)
        args[cid] = [v for n, v in feeds.items() if n not in bound] + list(params.values())
    return ModuleOp(functions), args


@pytest.fixture(scope="module")
def compiled():
    built = {cid: make() for cid, make in CASES.items()}
    module, args = import_bound(built)
    built64 = {cid: CASES[cid](dt=F64) for cid in GRAD_CASES}
    module64, args64 = import_bound(built64)
    return (opc.compile(module), args, built), (opc.compile(module64, grad=True), args64, built64)


def outputs(m, cid: str, args: list[np.ndarray]) -> list[np.ndarray]:
    out = getattr(m, function_name(cid))(*args)
    return list(out) if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("cid", list(CASES))
def test_forward_matches_onnxruntime(compiled, cid: str) -> None:
    m, args, built = compiled[0]
    model, feeds = built[cid]
    want = run_ort(model, feeds)
    got = outputs(m, cid, args[cid])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cid", GRAD_CASES)
def test_gradients_match_central_differences(compiled, cid: str) -> None:
    """<grad, v> == (L(a + h v) - L(a - h v)) / 2h along a random v for the float arguments,
    L = the output times a fixed cotangent."""
    m, args, _ = compiled[1]
    name = function_name(cid)
    a = args[cid]
    (out,) = outputs(m, cid, a)
    rng = np.random.default_rng(5)
    dout = rng.uniform(-1, 1, out.shape)
    grads = getattr(m, name + "_grad")(*a, dout)
    grads = list(grads) if isinstance(grads, tuple) else [grads]
    wrt = m.wrt[name]
    assert wrt and len(grads) == len(wrt)
    v = {k: rng.uniform(-1, 1, a[k].shape) for k in wrt}
    h = 1e-6

    def loss(sign: float) -> float:
        moved = [x + sign * h * v[k] if k in v else x for k, x in enumerate(a)]
        return float(np.sum(getattr(m, name)(*moved) * dout))

    fd = (loss(1.0) - loss(-1.0)) / (2 * h)
    analytic = float(sum(np.sum(g * v[k]) for g, k in zip(grads, wrt)))
    assert abs(fd - analytic) <= 1e-6 * max(1.0, abs(fd)), (fd, analytic)


REFUSALS = {  # case -> (make, import with the input values?, message)
    "unpool-other-shape": (lambda: max_unpool([2, 2], [2, 2], [0, 0, 0, 0], [2, 3, 7, 7]), True,
                           r"output_shape \[2, 3, 7, 7\] differs from the unpooled shape \[2, 3, 6, 6\]"),
}


@pytest.mark.parametrize("cid", list(REFUSALS))
def test_refusals_are_one_line(cid: str) -> None:
    make, bind, message = REFUSALS[cid]
    model, feeds = make()
    with pytest.raises(opc.OpcError, match=message) as err:
        if bind:
            import_graph(model, {n: v.shape for n, v in feeds.items()}, feeds)
        else:
            opc.import_onnx(model)
    assert "\n" not in str(err.value)


def test_unique_along_an_axis_needs_no_value() -> None:
    """Unique of the columns of an input known only at run time: opc.unique along its axis, the
    number of distinct columns a data size (tests/shapes/test_unique_axis.py runs it)."""
    model, _ = unique((2, 7), -1, 1)
    module, _ = opc.import_onnx(model)
    (op,) = [o for o in module.walk() if o.name == "opc.unique"]
    assert op.axis_index() == 1 and str(op.results[0].type) == "tensor<2x?xf32>"


def test_load_onnx_compiles_once_for_every_condition() -> None:
    """A Compress condition known only at run time is an argument, its count a data size
    (tests/shapes/test_data_sizes_onnx.py): one module serves every condition, none selected
    included; the results are np.compress's."""
    model, feeds = compress(1, [1, 0, 1, 1])
    f = opc.load_onnx(model)
    x = feeds["x"]
    for cond in ([1, 0, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 1]):
        c = np.array(cond, bool)
        (y,) = f(x, c)
        np.testing.assert_array_equal(y, np.compress(c, x, axis=1))
    assert sum(len(v) for v in f.variants.values()) <= 1
