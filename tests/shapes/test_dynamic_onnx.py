"""ONNX models with open dims (dim_param) compile once through opc.load_onnx and run at every
size: the shape arithmetic exporters write (Shape, Gather, Concat, Squeeze, Slice, Add, Div,
Size) folds on run-time sizes, and Reshape, Expand, ConstantOfShape, Range, Slice, Split and
GatherND take them. Each model against onnxruntime at sizes 1, 5 and 17; a model that needs a
size at compile time falls back to a module per shape, saying which node."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import helper, numpy_helper, onnx, run_ort

import opc

INT64_MAX = np.iinfo(np.int64).max
F32, I64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64


def const(name: str, value) -> onnx.NodeProto:  # noqa: ANN001
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def model(nodes, inputs, outputs, inits=None) -> onnx.ModelProto:  # noqa: ANN001
    """inputs: (name, elem type, dims with names for the open ones)."""
    ins = [helper.make_tensor_value_info(n, t, dims) for n, t, dims in inputs]
    outs = [helper.make_empty_tensor_value_info(n) for n in outputs]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()]
    opsets = [helper.make_opsetid("", 18)]
    m = helper.make_model(helper.make_graph(nodes, "g", ins, outs, inits), opset_imports=opsets,
                          ir_version=helper.find_min_ir_version_for(opsets))
    return onnx.shape_inference.infer_shapes(m)


def shape_dims() -> list[onnx.NodeProto]:
    """b and s as 1-element tensors, from Shape(x) as torch.onnx.export writes them."""
    return [helper.make_node("Shape", ["x"], ["shape"]), const("i0", np.array(0)), const("i1", np.array(1)),
            helper.make_node("Gather", ["shape", "i0"], ["b0"]), helper.make_node("Gather", ["shape", "i1"], ["s0"]),
            const("ax0", np.array([0])),
            helper.make_node("Unsqueeze", ["b0", "ax0"], ["b"]), helper.make_node("Unsqueeze", ["s0", "ax0"], ["s"])]


RNG = np.random.default_rng(7)
W = RNG.standard_normal((8, 5)).astype(np.float32)


def reshape_matmul() -> onnx.ModelProto:
    """x [b, s, 8] -> [-1, 8] @ W -> [b, s, 5] -> [b, s, 5, 1] through Concat(b, s, 5, 1)."""
    nodes = [*shape_dims(), const("flat", np.array([-1, 8])), const("tail", np.array([5, 1])),
             helper.make_node("Reshape", ["x", "flat"], ["rows"]), helper.make_node("MatMul", ["rows", "w"], ["y"]),
             helper.make_node("Concat", ["b", "s", "tail"], ["back"], axis=0),
             helper.make_node("Reshape", ["y", "back"], ["out"])]
    return model(nodes, [("x", F32, ["batch", "seq", 8])], ["out"], {"w": W})


def range_mask() -> onnx.ModelProto:
    """A causal mask from Range(0, s) and positions Range(2, s + 2), applied to x [b, s, s]."""
    nodes = [*shape_dims(), const("zero", np.array(0, np.int64)), const("one", np.array(1, np.int64)),
             const("two", np.array(2, np.int64)), helper.make_node("Squeeze", ["s", "ax0"], ["n"]),
             helper.make_node("Range", ["zero", "n", "one"], ["pos"]),
             helper.make_node("Add", ["n", "two"], ["n2"]), helper.make_node("Range", ["two", "n2", "one"], ["pos2"]),
             const("ax1", np.array([1])), helper.make_node("Unsqueeze", ["pos", "ax1"], ["col"]),
             helper.make_node("LessOrEqual", ["pos", "col"], ["keep"]),
             helper.make_node("Cast", ["pos2"], ["posf"], to=F32), const("zf", np.array(0.0, np.float32)),
             helper.make_node("Where", ["keep", "x", "zf"], ["masked"]),
             helper.make_node("Add", ["masked", "posf"], ["out"])]
    return model(nodes, [("x", F32, ["batch", "seq", "seq"])], ["out"])


def fill_expand() -> onnx.ModelProto:
    """ConstantOfShape(Shape(x)) + x, and a bias Expand-ed to Shape(x)."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("ConstantOfShape", ["shape"], ["threes"],
                              value=numpy_helper.from_array(np.array([3.0], np.float32))),
             helper.make_node("Expand", ["bias", "shape"], ["wide"]),
             helper.make_node("Add", ["threes", "x"], ["t"]), helper.make_node("Mul", ["t", "wide"], ["out"])]
    bias = RNG.standard_normal((1, 4)).astype(np.float32)
    return model(nodes, [("x", F32, ["batch", 4])], ["out"], {"bias": bias})


def slice_split() -> onnx.ModelProto:
    """x [b, 6]: Slice whole along b, [1:5] along the features; Split into 3 along the features."""
    nodes = [const("st", np.array([0, 1])), const("en", np.array([INT64_MAX, 5])), const("axes", np.array([0, 1])),
             helper.make_node("Slice", ["x", "st", "en", "axes"], ["mid"]),
             helper.make_node("Split", ["x"], ["p0", "p1", "p2"], axis=1, num_outputs=3),
             helper.make_node("Mul", ["p0", "p2"], ["q"]), helper.make_node("Concat", ["mid", "q", "p1"], ["out"], axis=1)]
    return model(nodes, [("x", F32, ["batch", 6])], ["out"])


def gather_nd() -> onnx.ModelProto:
    """data [b, s] picked at idx [k, 2] (negative indices too): the strides are run-time sizes."""
    nodes = [helper.make_node("GatherND", ["data", "idx"], ["out"])]
    return model(nodes, [("data", F32, ["batch", "seq"]), ("idx", I64, ["k", 2])], ["out"])


def size_div() -> onnx.ModelProto:
    """Size(x) / s is b: Reshape(x, [b, -1]) through Concat."""
    nodes = [*shape_dims(), helper.make_node("Size", ["x"], ["numel"]), helper.make_node("Squeeze", ["s", "ax0"], ["n"]),
             helper.make_node("Div", ["numel", "n"], ["bq"]), helper.make_node("Unsqueeze", ["bq", "ax0"], ["b1"]),
             const("rest", np.array([-1])), helper.make_node("Concat", ["b1", "rest"], ["to"], axis=0),
             helper.make_node("Reshape", ["x", "to"], ["out"])]
    return model(nodes, [("x", F32, ["batch", "seq", 3])], ["out"])


def feeds_for(m: onnx.ModelProto, b: int, s: int) -> dict[str, np.ndarray]:
    out = {}
    for vi in m.graph.input:
        if vi.name in {t.name for t in m.graph.initializer}:
            continue
        names = {"batch": b, "seq": s, "k": s + 1}
        dims = [names[d.dim_param] if d.dim_param else d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == I64:  # GatherND's indices: in range, some negative
            cols = [RNG.integers(-b, b, dims[0]), RNG.integers(-s, s, dims[0])]
            out[vi.name] = np.stack(cols, axis=1).astype(np.int64)
        else:
            out[vi.name] = RNG.standard_normal(dims).astype(np.float32)
    return out


MODELS = {"reshape_matmul": reshape_matmul, "range_mask": range_mask, "fill_expand": fill_expand,
          "slice_split": slice_split, "gather_nd": gather_nd, "size_div": size_div}


@pytest.mark.parametrize("name", MODELS)
def test_one_compile_serves_every_size(name):
    m = MODELS[name]()
    loaded = opc.load_onnx(m)
    for b, s in [(1, 1), (5, 5), (2, 17), (17, 3)]:
        feeds = feeds_for(m, b, s)
        got = loaded(**feeds)
        want = run_ort(m, feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert loaded.static_reason is None, loaded.static_reason
    assert not loaded.variants, "no module per shape"


def test_a_size_needed_at_compile_time_falls_back_per_shape_naming_the_node():
    """Range(s, 2 * s): a Range whose start is known at run time only; opc compiles per shape and
    says why."""
    nodes = [*shape_dims(), const("one", np.array(1, np.int64)), helper.make_node("Squeeze", ["s", "ax0"], ["n"]),
             helper.make_node("Add", ["n", "n"], ["n2"]),
             helper.make_node("Range", ["n", "n2", "one"], ["out"], name="cut")]
    m = model(nodes, [("x", F32, ["batch", "seq"])], ["out"])
    loaded = opc.load_onnx(m)
    for b, s in [(2, 3), (3, 6)]:
        feeds = feeds_for(m, b, s)
        np.testing.assert_array_equal(loaded(**feeds)[0], run_ort(m, feeds)[0])
    assert loaded.static_reason is not None and "'cut'" in loaded.static_reason
    assert len(loaded.variants) == 2


def test_a_stepped_slice_of_a_run_time_dim_compiles_once():
    """x[:, ::2] along a run-time dim: the count is computed at the call (tests/shapes/test_onnx_slice_clamp.py
    covers the clamping)."""
    nodes = [const("st", np.array([0])), const("end", np.array([INT64_MAX])), const("one", np.array([1])),
             const("two", np.array([2])), helper.make_node("Slice", ["x", "st", "end", "one", "two"], ["out"])]
    m = model(nodes, [("x", F32, ["batch", "seq"])], ["out"])
    loaded = opc.load_onnx(m)
    for b, s in [(2, 3), (3, 6)]:
        feeds = feeds_for(m, b, s)
        np.testing.assert_array_equal(loaded(**feeds)[0], run_ort(m, feeds)[0])
    assert loaded.static_reason is None, loaded.static_reason
    assert not loaded.variants, "no module per shape"


def run_time_slices() -> onnx.ModelProto:
    """x[:, :s - 1] (an end computed from Shape), x[:, 1:] and x[:, -2:] along the run-time seq dim."""
    nodes = [*shape_dims(), const("one", np.array([1])), helper.make_node("Sub", ["s", "one"], ["end"]),
             const("st", np.array([0])), helper.make_node("Slice", ["x", "st", "end", "one"], ["head"]),
             const("big", np.array([INT64_MAX])), helper.make_node("Slice", ["x", "one", "big", "one"], ["tail"]),
             const("m2", np.array([-2])), helper.make_node("Slice", ["x", "m2", "big", "one"], ["last2"]),
             helper.make_node("Mul", ["head", "tail"], ["prod"]),
             helper.make_node("ReduceSum", ["last2", "one"], ["s2"], keepdims=1),
             helper.make_node("Add", ["prod", "s2"], ["out"])]
    return model(nodes, [("x", F32, ["batch", "seq"])], ["out"])


def test_slices_with_run_time_bounds_compile_once():
    m = run_time_slices()
    loaded = opc.load_onnx(m)
    for b, s in [(1, 2), (3, 5), (2, 17)]:
        feeds = feeds_for(m, b, s)
        np.testing.assert_allclose(loaded(**feeds)[0], run_ort(m, feeds)[0], rtol=1e-5, atol=1e-5)
    assert loaded.static_reason is None, loaded.static_reason
    assert not loaded.variants, "no module per shape"


def test_inputs_naming_one_dim_alike_must_agree():
    m = model([helper.make_node("Add", ["x", "y"], ["out"])],
              [("x", F32, ["batch", 3]), ("y", F32, ["batch", 3])], ["out"])
    loaded = opc.load_onnx(m)
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(loaded(x, x)[0], 2 * x)
    with pytest.raises(ValueError, match="'x'.*'y'|'y'.*'x'"):
        loaded(x, np.ones((4, 3), np.float32))
