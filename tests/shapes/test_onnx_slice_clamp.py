"""ONNX Slice on dims known only at run time clamps its bounds as ONNX does, at the call: a
negative start or end counts from the end, then both are clamped into [0, dim] for a positive
step, start into [0, dim - 1] and end into [-1, dim - 1] for a negative one (INT64_MAX and
-INT64_MAX: past either end). So `x[1:]`, `x[-3:]`, `x[:100]`, `x[::-1]` and stepped slices
compile once (the clamped bounds are sizes the call computes, opc/dialects/sizes.py's derived
sizes) and run at every size, 0 and 1 included. The oracle is the ONNX rule written out on
NumPy (`np.take` of the positions `range` gives), and onnxruntime where it is installed; the same
clamp written in the IR (arith.minsi) works in a loop body and under grad. The
explicit IR op `tensor.extract_slice` stays strict (tests/shapes/test_slices.py)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from requires import import_or_skip

import opc

import_or_skip("onnx", "the ONNX importer needs the onnx package (pip install '.[onnx]')")
import onnx  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

INT64_MAX = int(np.iinfo(np.int64).max)
SIZES = (0, 1, 3, 7)

# (starts, ends, axes, steps) of x [n, 5] (n known at run time), out-of-range bounds included
CASES = {
    "tail_from_1": ([1], [INT64_MAX], [0], [1]),
    "last_3": ([-3], [INT64_MAX], [0], [1]),
    "head_100": ([0], [100], [0], [1]),
    "2_to_5": ([2], [5], [0], [1]),
    "empty_5_to_2": ([5], [2], [0], [1]),
    "minus_100_to_minus_1": ([-100], [-1], [0], [1]),
    "past_the_end": ([100], [200], [0], [1]),
    "every_3rd": ([0], [INT64_MAX], [0], [3]),
    "odd_positions": ([1], [INT64_MAX], [0], [2]),
    "reversed": ([-1], [-INT64_MAX], [0], [-1]),
    "5_down_to_1_by_2": ([5], [1], [0], [-2]),
    "100_down_to_minus_100": ([100], [-100], [0], [-1]),
    "minus_100_down": ([-100], [-INT64_MAX], [0], [-1]),
    "minus_2_down_by_3": ([-2], [-INT64_MAX], [-2], [-3]),
    "rows_and_static_cols": ([1, -2], [INT64_MAX, 100], [0, 1], [2, 1]),
    "rows_and_stepped_static_cols": ([1, 0], [INT64_MAX, 5], [0, 1], [1, 2]),  # the static axis keeps its step
    "rows_reversed_cols_reversed": ([INT64_MAX, -1], [-INT64_MAX, -INT64_MAX], [0, 1], [-1, -1]),
    "cols_only": ([-3], [INT64_MAX], [1], [2]),
}


def slice_model(starts, ends, axes, steps, dims=("n", 5)) -> onnx.ModelProto:  # noqa: ANN001
    arrays = {"starts": starts, "ends": ends, "axes": axes, "steps": steps}
    nodes = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(np.array(v, np.int64), k))
             for k, v in arrays.items()]
    nodes.append(helper.make_node("Slice", ["x", *arrays], ["y"], name="cut"))
    ins = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(dims))]
    outs = [helper.make_empty_tensor_value_info("y")]
    opsets = [helper.make_opsetid("", 18)]
    m = helper.make_model(helper.make_graph(nodes, "g", ins, outs), opset_imports=opsets,
                          ir_version=helper.find_min_ir_version_for(opsets))
    return onnx.shape_inference.infer_shapes(m)


def onnx_positions(dim: int, start: int, end: int, step: int) -> list[int]:
    """The positions ONNX Slice picks along one axis (its spec's clamping, written out)."""
    start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
    lo, hi = (0, dim) if step > 0 else (-1, dim - 1)
    start = min(max(start, 0), dim if step > 0 else dim - 1)
    end = min(max(end, lo), hi)
    return list(range(start, end, step))


def numpy_slice(x: np.ndarray, starts, ends, axes, steps) -> np.ndarray:  # noqa: ANN001
    for s, e, a, k in zip(starts, ends, axes, steps):
        a = a % x.ndim
        x = np.take(x, np.array(onnx_positions(x.shape[a], s, e, k), np.int64), axis=a)
    return x


def inputs(n: int, cols: int = 5) -> np.ndarray:
    return np.arange(n * cols, dtype=np.float32).reshape(n, cols) + 1


@pytest.mark.parametrize("case", list(CASES))
def test_slice_clamps_at_every_size_from_one_compile(case: str) -> None:
    starts, ends, axes, steps = CASES[case]
    loaded = opc.load_onnx(slice_model(starts, ends, axes, steps))
    for n in SIZES:
        x = inputs(n)
        got = loaded(x)[0]
        want = numpy_slice(x, starts, ends, axes, steps)
        assert got.shape == want.shape, (n, got.shape, want.shape)
        np.testing.assert_array_equal(got, want)
    assert loaded.static_reason is None, loaded.static_reason
    assert not loaded.variants, "no module per shape"
    assert len(loaded.dynamic) == 1, "one compile for every size"


def computed_bounds_model() -> onnx.ModelProto:
    """Bounds computed from Shape(x) (s = n): x[:s - 1], x[:1 - s] (negative from n = 2: counted
    from the end) and x[s - 2::-1] (a computed start with a negative step)."""
    consts = {"i0": np.array(0), "ax": np.array([0]), "one": np.array([1]), "two": np.array([2]),
              "big": np.array([INT64_MAX]), "neg": np.array([-INT64_MAX]), "m1": np.array([-1])}
    nodes = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(v.astype(np.int64), k))
             for k, v in consts.items()]
    nodes += [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Gather", ["shape", "i0"], ["s0"]),
              helper.make_node("Unsqueeze", ["s0", "ax"], ["s"]),
              helper.make_node("Sub", ["s", "one"], ["s_1"]), helper.make_node("Sub", ["one", "s"], ["one_s"]),
              helper.make_node("Sub", ["s", "two"], ["s_2"]),
              helper.make_node("Slice", ["x", "ax", "s_1", "ax"], ["a"]),
              helper.make_node("Slice", ["x", "ax", "one_s", "ax"], ["b"]),
              helper.make_node("Slice", ["x", "s_2", "neg", "ax", "m1"], ["c"])]
    ins = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 5])]
    outs = [helper.make_empty_tensor_value_info(n) for n in "abc"]
    opsets = [helper.make_opsetid("", 18)]
    return onnx.shape_inference.infer_shapes(helper.make_model(
        helper.make_graph(nodes, "g", ins, outs), opset_imports=opsets,
        ir_version=helper.find_min_ir_version_for(opsets)))


def test_bounds_computed_from_sizes_clamp_and_count_from_the_end() -> None:
    loaded = opc.load_onnx(computed_bounds_model())
    for n in SIZES:
        x = inputs(n)
        want = [numpy_slice(x, [0], [n - 1], [0], [1]), numpy_slice(x, [0], [1 - n], [0], [1]),
                numpy_slice(x, [n - 2], [-INT64_MAX], [0], [-1])]
        for got, w in zip(loaded(x), want):
            assert got.shape == w.shape, (n, got.shape, w.shape)
            np.testing.assert_array_equal(got, w)
    assert loaded.static_reason is None, loaded.static_reason
    assert not loaded.variants and len(loaded.dynamic) == 1


def test_two_run_time_dims_and_a_difference_of_slices() -> None:
    """x[1:, ::-2] - x[:-1, ::-2] on x [n, m]: both dims at run time; the two row counts are
    different formulas of n, checked equal at the call (they always are)."""
    nodes = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(np.array(v, np.int64), k))
             for k, v in {"s1": [1, -1], "e1": [INT64_MAX, -INT64_MAX], "s2": [0, -1], "e2": [-1, -INT64_MAX],
                          "axes": [0, 1], "steps": [1, -2]}.items()]
    nodes += [helper.make_node("Slice", ["x", "s1", "e1", "axes", "steps"], ["a"]),
              helper.make_node("Slice", ["x", "s2", "e2", "axes", "steps"], ["b"]),
              helper.make_node("Sub", ["a", "b"], ["y"])]
    ins = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", "m"])]
    opsets = [helper.make_opsetid("", 18)]
    m = onnx.shape_inference.infer_shapes(helper.make_model(
        helper.make_graph(nodes, "g", ins, [helper.make_empty_tensor_value_info("y")]), opset_imports=opsets,
        ir_version=helper.find_min_ir_version_for(opsets)))
    loaded = opc.load_onnx(m)
    rng = np.random.default_rng(3)
    for n, cols in [(0, 3), (1, 1), (3, 0), (7, 4), (2, 7)]:
        x = rng.standard_normal((n, cols)).astype(np.float32)
        want = x[1:, ::-2] - x[:-1, ::-2]
        got = loaded(x)[0]
        assert got.shape == want.shape, (n, cols, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert loaded.static_reason is None, loaded.static_reason
    assert not loaded.variants and len(loaded.dynamic) == 1


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None,
                    reason="onnxruntime is not installed: the second oracle of these slices (pip install '.[test]')")
@pytest.mark.parametrize("case", [*CASES, "computed_bounds"])
def test_slice_matches_onnxruntime(case: str) -> None:
    import onnxruntime as ort

    m = slice_model(*CASES[case]) if case != "computed_bounds" else computed_bounds_model()
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    loaded = opc.load_onnx(m)
    for n in SIZES:
        x = inputs(n)
        for got, want in zip(loaded(x), session.run(None, {"x": x})):
            want = np.asarray(want)
            assert got.shape == want.shape, (n, got.shape, want.shape)
            np.testing.assert_array_equal(got, want)


CLAMPED_IN_IR = """
func.func @tail_sum(%x: tensor<?x4xf64>, %acc0: tensor<4xf64>) -> tensor<4xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %acc0) -> (tensor<4xf64>) {
    %n = tensor.dim %x, %c0 : tensor<?x4xf64>
    %m = arith.minsi %c1, %n : index
    %len = arith.subi %n, %m : index
    %s = tensor.extract_slice %x[%m, 0] [%len, 4] [1, 1] : tensor<?x4xf64> to tensor<?x4xf64>
    %p = opc.reduce_sum %s {axes = array<i64: 0>, keepdim = false} : (tensor<?x4xf64>) -> tensor<4xf64>
    %a = opc.add %acc, %p : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    scf.yield %a : tensor<4xf64>
  }
  func.return %r : tensor<4xf64>
}
func.func @tail_tanh(%x: tensor<?x4xf64>) -> tensor<?x4xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = tensor.dim %x, %c0 : tensor<?x4xf64>
  %m = arith.minsi %c1, %n : index
  %len = arith.subi %n, %m : index
  %s = tensor.extract_slice %x[%m, 0] [%len, 4] [1, 1] : tensor<?x4xf64> to tensor<?x4xf64>
  %t = opc.tanh %s : (tensor<?x4xf64>) -> tensor<?x4xf64>
  func.return %t : tensor<?x4xf64>
}
"""


def test_a_clamp_written_in_the_ir_in_a_loop_body_and_under_grad() -> None:
    """x[min(1, n):] with arith.minsi: a derived size inside an scf.for body (the caller computes
    it for the body) and through the gradient (its cotangent has the derived size)."""
    m = opc.compile(CLAMPED_IN_IR, grad=True)
    rng = np.random.default_rng(4)
    for n in SIZES:
        x = rng.standard_normal((n, 4))
        np.testing.assert_allclose(m.tail_sum(x, np.zeros(4)), 3 * x[1:].sum(0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(m.tail_tanh(x), np.tanh(x[1:]), rtol=1e-12)
        dout = rng.standard_normal((max(n - 1, 0), 4))
        want = np.zeros_like(x)
        want[1:] = dout * (1 - np.tanh(x[1:]) ** 2)
        np.testing.assert_allclose(m.tail_tanh_grad(x, dout), want, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="sizes that must be equal differ"):
        m.tail_tanh_grad(np.zeros((3, 4)), np.zeros((3, 4)))  # the cotangent must have the slice's size


def test_a_derived_size_on_the_cuda_simulator(tmp_path) -> None:  # noqa: ANN001
    """The same functions for the CUDA target, built with g++ on tests/support/cuda_sim.h: the
    derived size is a size parameter of the host code, computed by the same binding."""
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH (it builds the CUDA simulation)")
    from cuda_simulator import simulated

    from opc.api import lower, prepare
    from opc.frontend import load_module
    from opc.lowering.cuda_emitter import emit_cuda

    cu, sigs = emit_cuda(lower(prepare(load_module(CLAMPED_IN_IR), "cuda", True), "cuda"))
    assert any(s.derived for s in sigs)
    m = simulated(cu, sigs, str(tmp_path), "clamp", library=True)
    rng = np.random.default_rng(8)
    for n in SIZES:
        x = rng.standard_normal((n, 4))
        np.testing.assert_allclose(m.tail_sum(x, np.zeros(4)), 3 * x[1:].sum(0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(m.tail_tanh(x), np.tanh(x[1:]), rtol=1e-12)
        dout = rng.standard_normal((max(n - 1, 0), 4))
        want = np.zeros_like(x)
        want[1:] = dout * (1 - np.tanh(x[1:]) ** 2)
        np.testing.assert_allclose(m.tail_tanh_grad(x, dout), want, rtol=1e-12, atol=1e-15)


def test_a_written_module_computes_its_derived_sizes(tmp_path) -> None:  # noqa: ANN001
    """`opc compile -o DIR` writes the derived sizes into NAME.py's signatures: the module loaded on
    its own computes them at each call."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(opc.__file__).resolve().parents[1])}  # this opc, not another
    src = tmp_path / "clamp.mlir"
    src.write_text(CLAMPED_IN_IR)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "opc", "compile", str(src), "-o", str(out)],
                          capture_output=True, text=True, check=False, env=env)
    assert done.returncode == 0, done.stderr
    script = ("import clamp, numpy as np\n"
              "for n in (0, 1, 3):\n"
              "    x = np.arange(n * 4, dtype=np.float64).reshape(n, 4)\n"
              "    assert np.allclose(clamp.tail_tanh(x), np.tanh(x[1:])), n\n"
              "print('ok')")
    run = subprocess.run([sys.executable, "-c", script], cwd=out, capture_output=True, text=True, check=False, env=env)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


@pytest.mark.parametrize("end", [INT64_MAX, 2**47], ids=["int64_max", "2_47"])
def test_a_slice_of_a_count_from_the_data_is_taken_as_given(end: int) -> None:
    """NonZero(x)[:, 1:]: the count is known only once NonZero ran, after the call computed its
    clamps, so this slice is not clamped: in range it runs from the one compile; out of range (no
    nonzero element) it is the slice's ValueError, not ONNX's empty result (docs/shapes.md).
    An end of 2**47 (opc's WHOLE_END, past any storable size) is the end as INT64_MAX is."""
    nodes = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(np.array(v, np.int64), k))
             for k, v in {"s": [1], "e": [end], "a": [1]}.items()]
    nodes += [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Slice", ["nz", "s", "e", "a"], ["y"])]
    ins = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n"])]
    opsets = [helper.make_opsetid("", 18)]
    m = onnx.shape_inference.infer_shapes(helper.make_model(
        helper.make_graph(nodes, "g", ins, [helper.make_empty_tensor_value_info("y")]), opset_imports=opsets,
        ir_version=helper.find_min_ir_version_for(opsets)))
    loaded = opc.load_onnx(m)
    for x in ([0, 1, 2, 0, 3], [5, 0], [1] * 7):
        x = np.array(x, np.float32)
        np.testing.assert_array_equal(loaded(x)[0], np.stack(np.nonzero(x))[:, 1:])
    assert loaded.static_reason is None and not loaded.variants
    with pytest.raises(ValueError, match=r"tensor.extract_slice: dim 1 has size -1"):
        loaded(np.zeros(3, np.float32))
