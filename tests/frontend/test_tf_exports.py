"""Models as tf2onnx exports them (issue 36 item 5), and the two Resize forms that refused them.

tests/models/tf/: small Keras models (a CNN with batch norm, pooling and nearest and bilinear
resizes, Conv1D, Conv3D, depthwise and separable convolutions, LSTM, GRU, a bidirectional LSTM,
multi-head attention) and TF functions (tf.while_loop, tf.cond, tf.map_fn), written by
tests/models/tf/export_tf.py with tf2onnx's default opset (15; the CNN also at 11). No TF here: the
.npz beside each model holds its inputs and TF's output. Each is loaded with opc.load_onnx and
compared with TF's output and with onnxruntime's.

The Resize cases, against onnxruntime, each group in one module:
  * coordinate_transformation_mode tf_half_pixel_for_nn (opset 11, still written by tf2onnx at 15,
    and run there by onnxruntime), which onnx's reference does not know: each nearest_mode, up and
    down, by scales and by sizes;
  * an output size that floor(n * scale) gives in float32 (onnxruntime) but not in float64 (onnx's
    shape inference): float32(7 / 3) * 3 is 7 in float32, 6.9999998 in float64, declared in the
    model or not; sizes whose ratio is such a scale (14 -> 11);
  * tf_crop_and_resize with a roi known at run time only (tf.image.crop_and_resize), linear and
    nearest, inside, across and on the image's border, extrapolated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx_helpers import ROOT, helper, numpy_helper, onnx, run_ort
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr

import opc
from opc.onnx_import import import_graph

TF_MODELS = sorted((ROOT / "tests" / "models" / "tf").glob("*.onnx"))
def recorded(path: Path) -> tuple[list[np.ndarray], np.ndarray]:
    data = np.load(path.with_suffix(".npz"))
    return [data[k] for k in sorted(k for k in data.files if k != "want")], data["want"]


@pytest.mark.parametrize("path", TF_MODELS, ids=[p.stem for p in TF_MODELS])
def test_tf2onnx_exports_match_tf_and_onnxruntime(path: Path) -> None:
    xs, want = recorded(path)
    model = onnx.load(str(path))
    got = opc.load_onnx(model)(*xs)
    got = got[0] if isinstance(got, (list, tuple)) else got
    (ort_out,) = run_ort(model, {f"x{i}": x for i, x in enumerate(xs)})
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, ort_out, rtol=1e-4, atol=1e-5)


def resize_model(hw: tuple[int, int], *, scales: list[float] | None = None, sizes: list[int] | None = None,
                 opset: int = 11, declared: list[int] | None = None, **attrs) -> tuple[onnx.ModelProto, dict]:
    """Resize of a [1, 2, H, W] input by constant scales or sizes, then x * 2 (a consumer of its shape);
    the Resize output declared [1, 2, *declared] where given, else left to inference."""
    x = np.random.default_rng(100 * hw[0] + hw[1]).standard_normal((1, 2, *hw)).astype(np.float32)
    inits = [numpy_helper.from_array(np.zeros(0, np.float32), "roi"),
             numpy_helper.from_array(np.array([1, 1, *(scales or [])], np.float32), "scales")]
    names = ["x", "roi", "scales"]
    if sizes is not None:
        inits[1] = numpy_helper.from_array(np.zeros(0, np.float32), "scales")
        inits.append(numpy_helper.from_array(np.array([1, 2, *sizes], np.int64), "sizes"))
        names.append("sizes")
    inits.append(numpy_helper.from_array(np.array(2.0, np.float32), "two"))
    nodes = [helper.make_node("Resize", names, ["y"], name="the_Resize", **attrs),
             helper.make_node("Mul", ["y", "two"], ["z"])]
    info = [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2, *declared])] if declared else []
    graph = helper.make_graph(nodes, "main_graph", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, ["n", "c", "h", "w"])],
                              inits, value_info=info)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)
    return model, {"x": x}


def tf_nearest(hw: tuple[int, int], rounding: str, opset: int = 11, *, scales: list[float] | None = None,
               sizes: list[int] | None = None, declared: list[int] | None = None) -> tuple[onnx.ModelProto, dict]:
    return resize_model(hw, scales=scales, sizes=sizes, opset=opset, declared=declared, mode="nearest",
                        coordinate_transformation_mode="tf_half_pixel_for_nn", nearest_mode=rounding)


CASES = {
    **{f"tf-nn-{r}-{way}": (lambda r=r, hw=hw, scales=scales, sizes=sizes: tf_nearest(hw, r, scales=scales,
                                                                                     sizes=sizes))
       for r in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
       for way, hw, scales, sizes in (("up-sizes", (3, 5), None, [7, 8]), ("down-sizes", (14, 14), None, [11, 9]),
                                      ("up-scales", (4, 3), [2.0, 3.0], None))},
    "tf-nn-opset15-float32-sizes": lambda: tf_nearest((14, 14), "floor", 15, scales=[11 / 14, 9 / 14]),
    "tf-nn-opset13-declared": lambda: tf_nearest((14, 14), "floor", 13, scales=[11 / 14, 9 / 14], declared=[11, 9]),
    **{f"{mode}-{ctm}-{how}": (lambda mode=mode, ctm=ctm, declared=declared: resize_model(
        (3, 6), scales=[7 / 3, 11 / 6], declared=declared, mode=mode, coordinate_transformation_mode=ctm))
       for mode in ("nearest", "linear", "cubic") for ctm in ("half_pixel", "asymmetric")
       for how, declared in (("declared", [7, 11]), ("float32-size", None))},
    **{f"{mode}-sizes-14-to-11": (lambda mode=mode: resize_model((14, 14), sizes=[11, 9], opset=13, mode=mode))
       for mode in ("nearest", "linear", "cubic")},
}


def function_name(cid: str) -> str:
    return "f_" + "".join(c if c.isalnum() else "_" for c in cid)


def compiled_together(models: dict) -> Any:
    """One module of the models {case id: (model, input shapes or None for their open dims)}, a function each."""
    functions = []
    for cid, (model, shapes) in models.items():
        module, params, _ = import_graph(model, shapes, where=cid)
        assert not params
        (f,) = list(module.ops)
        assert isinstance(f, func.FuncOp)
        f.detach()
        f.sym_name = StringAttr(function_name(cid))
        functions.append(f)
    return opc.compile(ModuleOp(functions))


@pytest.fixture(scope="module")
def compiled():  # noqa: ANN201
    built = {cid: make() for cid, make in CASES.items()}
    shaped = {cid: (model, {n: v.shape for n, v in feeds.items()}) for cid, (model, feeds) in built.items()}
    return compiled_together(shaped), built


@pytest.mark.parametrize("cid", list(CASES))
def test_resize_matches_onnxruntime(compiled, cid: str) -> None:  # noqa: ANN001
    m, built = compiled
    model, feeds = built[cid]
    (want,) = run_ort(model, feeds)
    got = getattr(m, function_name(cid))(*feeds.values())
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def crop_model(mode: str, value: float, rounding: str, sizes: tuple[int, int]) -> onnx.ModelProto:
    """tf_crop_and_resize of a [1, 2, 6, 7] input to sizes, the roi an input (known at run time only)."""
    inits = [numpy_helper.from_array(np.zeros(0, np.float32), "scales"),
             numpy_helper.from_array(np.array([1, 2, *sizes], np.int64), "sizes")]
    node = helper.make_node("Resize", ["x", "roi", "scales", "sizes"], ["y"], mode=mode, extrapolation_value=value,
                            coordinate_transformation_mode="tf_crop_and_resize", nearest_mode=rounding)
    ins = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 6, 7]),
           helper.make_tensor_value_info("roi", onnx.TensorProto.FLOAT, [8])]
    graph = helper.make_graph([node], "main_graph", ins,
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2, *sizes])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


CROPS = {"linear": ("linear", 0.0, "round_prefer_floor", (4, 5)), "linear-extrapolated": ("linear", 1.5, "floor", (4, 5)),
         "nearest": ("nearest", 0.0, "round_prefer_floor", (4, 5)), "nearest-one-row": ("nearest", -2.0, "ceil", (1, 5)),
         "nearest-prefer-ceil": ("nearest", 0.0, "round_prefer_ceil", (3, 3))}
ROIS = {"inside": [0, 0, 0.1, 0.2, 1, 1, 0.8, 0.9], "across": [0, 0, -0.2, 0.3, 1, 1, 1.3, 0.7],
        "point": [0, 0, 0.5, 0.5, 1, 1, 0.5, 0.5], "on-pixels": [0, 0, -0.2, 0.0, 1, 1, 0.6, 1.0]}


@pytest.fixture(scope="module")
def crops():  # noqa: ANN201
    """The CROPS, roi an argument, in one module."""
    return compiled_together({cid: (crop_model(*args), None) for cid, args in CROPS.items()})


@pytest.mark.parametrize("roi", list(ROIS))
@pytest.mark.parametrize("cid", list(CROPS))
def test_crop_with_a_run_time_roi_matches_onnxruntime(crops, cid: str, roi: str) -> None:  # noqa: ANN001
    """tf.image.crop_and_resize as tf2onnx writes it: a Loop over the boxes, each step a Resize whose roi
    is read at run time (tests/models/tf/crop_and_resize.onnx); here one Resize of a roi argument."""
    x = np.random.default_rng(7).standard_normal((1, 2, 6, 7)).astype(np.float32)
    r = np.array(ROIS[roi], np.float32)
    (want,) = run_ort(crop_model(*CROPS[cid]), {"x": x, "roi": r})
    got = getattr(crops, function_name(cid))(x, r)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


REFUSALS = {
    "crop-cubic-run-time-roi": (lambda: (crop_model("cubic", 0.0, "floor", (4, 5)), {}),
                                r"input 1 \('roi', roi\) must be known at compile time"),
    "tf-nn-linear": (lambda: resize_model((3, 5), sizes=[7, 8], mode="linear",
                                          coordinate_transformation_mode="tf_half_pixel_for_nn"),
                     "'tf_half_pixel_for_nn' with mode 'linear'"),
    "declared-two-off": (lambda: resize_model((3, 6), scales=[7 / 3, 11 / 6], declared=[8, 11]),
                         r"shape inference failed: .*\(6\) vs \(8\)"),
}


@pytest.mark.parametrize("cid", list(REFUSALS))
def test_resize_refusals_are_one_line(cid: str) -> None:
    make, message = REFUSALS[cid]
    model, _ = make()
    with pytest.raises(opc.OpcError, match=message) as err:
        opc.import_onnx(model)
    assert "\n" not in str(err.value)


def test_float32_sizes_with_an_open_batch() -> None:
    """onnxruntime's float32 size of a Resize by scales where the batch stays open (`?`): one module for
    every batch, 11 x 9 rows and columns."""
    model, _ = resize_model((14, 14), scales=[11 / 14, 9 / 14], mode="linear")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    module, params, _ = import_graph(model, None, dynamic=True)
    assert not params
    m = opc.compile(module)
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 2, 14, 14)).astype(np.float32)
        (want,) = run_ort(model, {"x": x})
        got = m.main_graph(x)
        assert got.shape == want.shape == (batch, 2, 11, 9)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_open_batch_cnn_compiles_once() -> None:
    """The CNN with its batch open: tf2onnx casts the run-time shape to int32 (UpSampling2D's Tile and
    Reshape), which opc's run-time sizes take in ONNX's integer type. One module for every batch."""
    path = ROOT / "tests" / "models" / "tf" / "cnn_open_batch.onnx"
    (x,), want = recorded(path)
    module, params, _ = import_graph(onnx.load(str(path)), None, dynamic=True)
    (f,) = list(module.ops)
    assert isinstance(f, func.FuncOp)
    run = getattr(opc.compile(module), f.sym_name.data)
    for batch in (2, 1):
        np.testing.assert_allclose(run(x[:batch], *params.values()), want[:batch], rtol=1e-4, atol=1e-5)
