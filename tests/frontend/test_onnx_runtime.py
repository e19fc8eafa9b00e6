"""opc.load_onnx (compiled per concrete input shapes on first call, reused after), opc.onnx_backend,
and which initializers become arguments (tied weights, single-element constants); onnxruntime and
NumPy formulas are the oracles."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import graph_model, helper, onnx, run_ort

import opc
import opc.onnx_backend

RNG = np.random.default_rng(3)


def dynamic_batch(model, name: str = "x"):
    (vi,) = [i for i in model.graph.input if i.name == name]
    vi.type.tensor_type.shape.dim[0].dim_param = "batch"
    del model.graph.value_info[:]
    for out in model.graph.output:
        out.type.tensor_type.shape.dim[0].dim_param = "batch"
    return model


def mlp():
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    w = RNG.standard_normal((4, 3)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])]
    return dynamic_batch(graph_model(nodes, {"x": x}, ["y"], {"w": w}))


def test_load_onnx_runs_a_dynamic_batch_at_any_size():
    model = mlp()
    f = opc.load_onnx(model)
    for batch in (1, 7, 64):
        x = RNG.standard_normal((batch, 4)).astype(np.float32)
        (got,) = f(x)
        (want,) = run_ort(model, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    f(x=RNG.standard_normal((7, 4)).astype(np.float32))
    assert f.static_reason is None and not f.variants  # one module, the batch a run-time size


def test_load_onnx_specialized_builds_a_module_per_shape():
    model = mlp()
    f = opc.load_onnx(model, specialize=True)
    for batch in (1, 7, 64, 7):
        x = RNG.standard_normal((batch, 4)).astype(np.float32)
        np.testing.assert_allclose(f(x)[0], run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert len(f.variants) == 3  # batch 7 again: the module built for it


def test_load_onnx_static_model_builds_its_shape_only():
    """Every dim static: the one module for that shape, no run-time-size build tried first (it would
    compile a module nobody calls)."""
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    w = RNG.standard_normal((4, 3)).astype(np.float32)
    model = graph_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x}, ["y"], {"w": w})
    f = opc.load_onnx(model)
    np.testing.assert_allclose(f(x)[0], x @ w, rtol=1e-5)
    assert not f.dynamic and len(f.variants) == 1


def test_load_onnx_takes_an_equal_dtype_with_metadata():
    """A float32 array whose dtype carries metadata is float32 (dtypes compare by ==, not identity)."""
    x = RNG.standard_normal((2, 4)).astype(np.dtype(np.float32, metadata={"unit": "m"}))
    w = RNG.standard_normal((4, 3)).astype(np.float32)
    model = graph_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x.astype(np.float32)}, ["y"],
                        {"w": w})
    np.testing.assert_allclose(opc.load_onnx(model)(x)[0], x @ w, rtol=1e-5)


def test_load_onnx_binds_shape_inputs_by_value():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    model = graph_model([helper.make_node("Reshape", ["x", "s"], ["y"])], {"x": x, "s": np.array([6, 4], np.int64)},
                        ["y"])
    f = opc.load_onnx(model)
    for s in ([6, 4], [-1, 2], [4, 6]):
        (got,) = f(x, np.array(s, np.int64))
        np.testing.assert_array_equal(got, x.reshape(s))
    assert len(next(iter(f.variants.values()))) == 3  # one shape key, three bound values


def test_a_range_bound_computed_from_an_input_is_read_at_run_time():
    """n - 1 is a Range bound, computed from input n: its length is a size read from a value at run
    time (docs/shapes.md), so one compile serves every n, and importing needs no value."""
    nodes = [helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", onnx.TensorProto.INT64, [], [1])),
             helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", onnx.TensorProto.INT64, [], [0])),
             helper.make_node("Sub", ["n", "one"], ["last"]),
             helper.make_node("Range", ["zero", "last", "one"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=onnx.TensorProto.FLOAT),
             helper.make_node("Mul", ["rf", "x"], ["y"])]
    x = np.float32(1.5) * np.ones((), np.float32)
    model = graph_model(nodes, {"n": np.array(5, np.int64), "x": x}, ["y"])
    f = opc.load_onnx(model)
    for n in (5, 9, 1, 0):
        (got,) = f(np.array(n, np.int64), x)
        np.testing.assert_allclose(got, np.arange(n - 1, dtype=np.float32) * x)
    (variants,) = f.variants.values()
    assert len(variants) == 1 and not variants[0].bound
    assert "opc.iota" in str(opc.import_onnx(model)[0])


@pytest.mark.parametrize(("bad", "message"), [
    (np.zeros((4,), np.float32), "input 'x' has rank 1"),
    (np.zeros((2, 5), np.float32), "dim 1 must be 4"),
    (np.zeros((2, 4), np.float64), "input 'x' has dtype float64"),
])
def test_load_onnx_names_the_input_that_does_not_fit(bad, message):
    with pytest.raises(ValueError, match=message):
        opc.load_onnx(mlp())(bad)


@pytest.mark.parametrize(("bad", "message"), [
    (np.zeros((4,), np.float32), "input 'x' has rank 1"),
    (np.zeros((2, 5), np.float32), "dim 1 must be 4"),
    (np.zeros((3, 4), np.float64), "input 'x' has dtype float64"),
])
def test_a_repeat_call_takes_the_fast_path_and_a_changed_input_is_still_checked(bad, message):
    """A second call with the same dtypes and shapes skips feeds/check/variant (OnnxModel.repeats);
    an input that differs from every call before it still goes through check()."""
    model = mlp()
    f = opc.load_onnx(model)
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    (first,) = f(x)
    assert len(f.repeats) == 1
    x2 = RNG.standard_normal((3, 4)).astype(np.float32)
    (again,) = f(x2)
    np.testing.assert_allclose(again, run_ort(model, {"x": x2})[0], rtol=1e-5, atol=1e-6)
    assert len(f.repeats) == 1
    with pytest.raises(ValueError, match=message):
        f(bad)
    np.testing.assert_allclose(f(memoryview(x))[0], first, rtol=0)  # not an ndarray: the full path


def test_a_repeat_call_regroups_sequence_outputs():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    model = graph_model([helper.make_node("SplitToSequence", ["x"], ["s"], axis=0)], {"x": x}, ["s"])
    f = opc.load_onnx(model)
    for _ in range(2):
        (got,) = f(x)
        assert isinstance(got, list) and len(got) == 2
        np.testing.assert_array_equal(got[1], x[1:2])


def test_backend_prepare_and_run():
    model = mlp()
    assert opc.onnx_backend.supports_device("CPU")
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    (got,) = opc.onnx_backend.prepare(model).run([x])
    np.testing.assert_allclose(got, run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)
    (got,) = opc.onnx_backend.run_model(model, {"x": x})
    np.testing.assert_allclose(got, run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_newer_opset_than_onnx_knows_is_one_line():
    model = mlp()
    model.opset_import[0].version = onnx.defs.onnx_opset_version() + 1
    with pytest.raises(opc.OpcError, match="newer than the installed onnx"):
        opc.import_onnx(model)


def test_tied_weight_is_one_argument_with_one_gradient_and_scalars_are_constants():
    """lm = wte.T (an exporter's tied lm_head) and a 0.5 initializer: one argument wte, its gradient
    the sum of both uses (NumPy formula)."""
    wte = RNG.standard_normal((5, 3)).astype(np.float32)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    idx = np.array([1, 4, 1], np.int64)
    nodes = [helper.make_node("Gather", ["wte", "i"], ["z"]), helper.make_node("MatMul", ["x", "lm"], ["h"]),
             helper.make_node("Mul", ["h", "half"], ["y"])]
    model = graph_model(nodes, {"x": x}, ["y", "z"],
                        {"wte": wte, "lm": np.ascontiguousarray(wte.T), "half": np.float32(0.5), "i": idx})
    module, params = opc.import_onnx(model)
    assert list(params) == ["wte"]
    m = opc.compile(module, grad=True)
    for got, want in zip(m.main_graph(x, wte), run_ort(model, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    dy, dz = RNG.standard_normal((2, 5)).astype(np.float32), RNG.standard_normal((3, 3)).astype(np.float32)
    _, dwte = m.main_graph_grad(x, wte, dy, dz)
    want = 0.5 * (x.T @ dy).T
    np.add.at(want, idx, dz)
    np.testing.assert_allclose(dwte, want, rtol=1e-5, atol=1e-6)
