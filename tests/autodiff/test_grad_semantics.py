"""The semantics of opc-grad (Paddle's calc_gradient): fan-out sums, pruning, stop_gradient,
several results; Paddle's cast report; integer and i1 cotangents; the registry's vjp column."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import (
    RNG,
    T34,
    compile_grad,
    finite_diff,
    uniform,
)

import opc
from opc.autodiff import add_grad_functions
from opc.ir import parse_text

# ---------------------------------------------------------------------------
# Paddle's cast report, graphs
# ---------------------------------------------------------------------------

GRAPHS = """
// Paddle's report: [2,3,4] float64 -> uint8 -> float64; the backward gives ones.
func.func @cast(%x: tensor<2x3x4xf64>) -> tensor<2x3x4xf64> {
  %u = opc.cast %x {dtype = ui8} : (tensor<2x3x4xf64>) -> tensor<2x3x4xui8>
  %y = opc.cast %u {dtype = f64} : (tensor<2x3x4xui8>) -> tensor<2x3x4xf64>
  func.return %y : tensor<2x3x4xf64>
}
func.func @cast_f32(%x: tensor<3x4xf32>) -> tensor<3x4xf64> {
  %y = opc.cast %x {dtype = f64} : (tensor<3x4xf32>) -> tensor<3x4xf64>
  func.return %y : tensor<3x4xf64>
}
// One value, %t, feeds three ops.
func.func @fanout(%x: tensor<3x4xf64>) -> tensor<3x4xf64> {
  %t = opc.tanh %x : (tensor<3x4xf64>) -> tensor<3x4xf64>
  %p = opc.exp %t : (tensor<3x4xf64>) -> tensor<3x4xf64>
  %q = opc.mul %t, %x : (tensor<3x4xf64>, tensor<3x4xf64>) -> tensor<3x4xf64>
  %r = opc.neg %t : (tensor<3x4xf64>) -> tensor<3x4xf64>
  %s = opc.add %p, %q : (tensor<3x4xf64>, tensor<3x4xf64>) -> tensor<3x4xf64>
  %o = opc.add %s, %r : (tensor<3x4xf64>, tensor<3x4xf64>) -> tensor<3x4xf64>
  func.return %o : tensor<3x4xf64>
}
// %dead never reaches the result, %k depends on no wrt arg, %w has no path at all.
func.func @pruned(%x: tensor<3x4xf64>, %w: tensor<3x4xf64>) -> tensor<3x4xf64> {
  %dead = opc.log %x : (tensor<3x4xf64>) -> tensor<3x4xf64>
  %e = opc.exp %x : (tensor<3x4xf64>) -> tensor<3x4xf64>
  func.return %e : tensor<3x4xf64>
}
// %s is marked stop_gradient: only %x gets a gradient.
func.func @stopped(%x: tensor<3x4xf64>, %s: tensor<3x4xf64> {opc.stop_gradient}) -> tensor<3x4xf64> {
  %m = opc.mul %x, %s : (tensor<3x4xf64>, tensor<3x4xf64>) -> tensor<3x4xf64>
  %r = opc.tanh %m : (tensor<3x4xf64>) -> tensor<3x4xf64>
  func.return %r : tensor<3x4xf64>
}
// Two results, one dout each; %x reaches both.
func.func @two(%x: tensor<3x4xf64>) -> (tensor<3x4xf64>, tensor<4xf64>) {
  %e = opc.exp %x : (tensor<3x4xf64>) -> tensor<3x4xf64>
  %s = opc.reduce_sum %x {axes = array<i64: 0>} : (tensor<3x4xf64>) -> tensor<4xf64>
  func.return %e, %s : tensor<3x4xf64>, tensor<4xf64>
}
// x cut into slabs along axis 1: [0, 2), [2, 4), [5, 7) disjoint (gaps at 4 and 7), [1, 3) overlapping them,
// and x used whole: the slabs' cotangents are one concat, the others added.
func.func @slabs(%x: tensor<3x8xf64>) -> (tensor<3x2xf64>, tensor<3x8xf64>) {
  %a = opc.slice %x {start = array<i64: 0, 0>, limit = array<i64: 3, 2>, strides = array<i64: 1, 1>} : (tensor<3x8xf64>) -> tensor<3x2xf64>
  %b = opc.slice %x {start = array<i64: 0, 2>, limit = array<i64: 3, 4>, strides = array<i64: 1, 1>} : (tensor<3x8xf64>) -> tensor<3x2xf64>
  %c = opc.slice %x {start = array<i64: 0, 5>, limit = array<i64: 3, 7>, strides = array<i64: 1, 1>} : (tensor<3x8xf64>) -> tensor<3x2xf64>
  %d = opc.slice %x {start = array<i64: 0, 1>, limit = array<i64: 3, 3>, strides = array<i64: 1, 1>} : (tensor<3x8xf64>) -> tensor<3x2xf64>
  %ab = opc.mul %a, %b : (tensor<3x2xf64>, tensor<3x2xf64>) -> tensor<3x2xf64>
  %tc = opc.tanh %c : (tensor<3x2xf64>) -> tensor<3x2xf64>
  %dd = opc.mul %d, %d : (tensor<3x2xf64>, tensor<3x2xf64>) -> tensor<3x2xf64>
  %s = opc.add %ab, %tc : (tensor<3x2xf64>, tensor<3x2xf64>) -> tensor<3x2xf64>
  %r = opc.add %s, %dd : (tensor<3x2xf64>, tensor<3x2xf64>) -> tensor<3x2xf64>
  %e = opc.exp %x : (tensor<3x8xf64>) -> tensor<3x8xf64>
  func.return %r, %e : tensor<3x2xf64>, tensor<3x8xf64>
}
// Clips (ONNX Clip, ReLU6): their vjps test x itself against the bounds (same answers, ties included).
func.func @clip(%x: tensor<3x4xf64>) -> tensor<3x4xf64> {
  %lo = arith.constant dense<0.0> : tensor<f64>
  %hi = arith.constant dense<6.0> : tensor<f64>
  %m = opc.maximum %x, %lo : (tensor<3x4xf64>, tensor<f64>) -> tensor<3x4xf64>
  %y = opc.minimum %m, %hi : (tensor<3x4xf64>, tensor<f64>) -> tensor<3x4xf64>
  func.return %y : tensor<3x4xf64>
}
func.func @clip_reversed(%x: tensor<3x4xf64>) -> tensor<3x4xf64> {
  %lo = opc.full {value = 0.0 : f64} : () -> tensor<3x4xf64>
  %hi = opc.full {value = 6.0 : f64} : () -> tensor<3x4xf64>
  %m = opc.minimum %hi, %x : (tensor<3x4xf64>, tensor<3x4xf64>) -> tensor<3x4xf64>
  %y = opc.maximum %m, %lo : (tensor<3x4xf64>, tensor<3x4xf64>) -> tensor<3x4xf64>
  func.return %y : tensor<3x4xf64>
}
// Bounds the wrong way round (lo > hi): the outer op's tests must read the inner result.
func.func @clip_crossed(%x: tensor<3x4xf64>) -> tensor<3x4xf64> {
  %lo = arith.constant dense<6.0> : tensor<f64>
  %hi = arith.constant dense<1.0> : tensor<f64>
  %m = opc.maximum %x, %lo : (tensor<3x4xf64>, tensor<f64>) -> tensor<3x4xf64>
  %y = opc.minimum %m, %hi : (tensor<3x4xf64>, tensor<f64>) -> tensor<3x4xf64>
  func.return %y : tensor<3x4xf64>
}
// pow at the exponents and bases where its vjp masks 0 * inf and log(0) (PyTorch's rule).
func.func @pow_edges(%a: tensor<4x7xf64>, %b: tensor<4x7xf64>) -> tensor<4x7xf64> {
  %y = opc.pow %a, %b : (tensor<4x7xf64>, tensor<4x7xf64>) -> tensor<4x7xf64>
  func.return %y : tensor<4x7xf64>
}
"""


@pytest.fixture(scope="module")
def graphs():
    return compile_grad(GRAPHS)


def test_cast_gradient_paddle_report(graphs) -> None:
    x = RNG.uniform(0, 200, (2, 3, 4))
    dx = graphs.cast_grad(x, np.ones((2, 3, 4)))
    assert dx.dtype == np.float64 and dx.shape == (2, 3, 4)
    np.testing.assert_array_equal(dx, np.ones((2, 3, 4)))


def test_cast_gradient_f32_from_f64_dout(graphs) -> None:
    d = RNG.uniform(-1, 1, (3, 4))
    dx = graphs.cast_f32_grad(RNG.uniform(-1, 1, (3, 4)).astype(np.float32), d)
    assert dx.dtype == np.float32
    np.testing.assert_array_equal(dx, d.astype(np.float32))


def test_value_used_three_times(graphs) -> None:
    x, d = uniform((3, 4)), uniform((3, 4))
    t = np.tanh(x)
    want = d * ((np.exp(t) + x - 1) * (1 - t * t) + t)
    np.testing.assert_allclose(graphs.fanout_grad(x, d), want, rtol=1e-12)
    np.testing.assert_allclose(graphs.fanout_grad(x, d), finite_diff(graphs.fanout, [x], [d], [0])[0], rtol=1e-6)


def test_pruned_branch_and_arg_without_path(graphs) -> None:
    x, w, d = uniform((3, 4)), uniform((3, 4)), uniform((3, 4))
    dx, dw = graphs.pruned_grad(x, w, d)
    np.testing.assert_allclose(dx, d * np.exp(x), rtol=1e-12)
    np.testing.assert_array_equal(dw, np.zeros((3, 4)))


def test_stop_gradient_arg_gets_none(graphs) -> None:
    x, s, d = uniform((3, 4)), uniform((3, 4)), uniform((3, 4))
    dx = graphs.stopped_grad(x, s, d)
    assert not isinstance(dx, tuple)
    np.testing.assert_allclose(dx, d * s * (1 - np.tanh(x * s) ** 2), rtol=1e-12)


def test_two_results_each_with_dout(graphs) -> None:
    x, d1, d2 = uniform((3, 4)), uniform((3, 4)), uniform((4,))
    dx = graphs.two_grad(x, d1, d2)
    np.testing.assert_allclose(dx, d1 * np.exp(x) + d2[None, :], rtol=1e-12)


def test_disjoint_slab_cotangents_are_one_concat(graphs) -> None:
    x, d1, d2 = uniform((3, 8)), uniform((3, 2)), uniform((3, 8))
    want = d2 * np.exp(x)
    want[:, 0:2] += d1 * x[:, 2:4]
    want[:, 2:4] += d1 * x[:, 0:2]
    want[:, 5:7] += d1 * (1 - np.tanh(x[:, 5:7]) ** 2)
    want[:, 1:3] += 2 * d1 * x[:, 1:3]
    np.testing.assert_allclose(graphs.slabs_grad(x, d1, d2), want, rtol=1e-12, atol=1e-15)
    module = parse_text(GRAPHS, "graphs.mlir").module
    add_grad_functions(module, ["slabs"])
    grad_ops = [op.name for f in module.ops if getattr(f, "sym_name", None) and f.sym_name.data == "slabs_grad"
                for op in f.walk()]
    assert grad_ops.count("opc.slice_grad") == 1 and grad_ops.count("opc.concat") == 1, grad_ops  # [1, 3) overlaps


CLIP_X = np.array([[-1.0, 0.0, 0.5, 3.0], [6.0, 7.0, -0.0, 5.999], [np.nan, 1e-300, 6.0, -2.0]])


def clip_grad_ref(x, d, lo, hi):
    """PyTorch's rule through min(max(x, lo), hi): a tie splits the gradient evenly (half at a bound)."""
    m = np.maximum(x, lo)
    dm = d * np.where(m < hi, 1.0, np.where(m == hi, 0.5, 0.0))
    return dm * np.where(x > lo, 1.0, np.where(x == lo, 0.5, 0.0))


@pytest.mark.parametrize("name,lo,hi", [("clip", 0.0, 6.0), ("clip_reversed", 0.0, 6.0), ("clip_crossed", 6.0, 1.0)])
def test_clip_gradient_ties_and_nan(graphs, name: str, lo: float, hi: float) -> None:
    d = uniform((3, 4))
    with np.errstate(invalid="ignore"):
        want = clip_grad_ref(CLIP_X, d, lo, hi)
    np.testing.assert_array_equal(getattr(graphs, f"{name}_grad")(CLIP_X, d), want)


def test_pow_gradient_at_zero_bases_and_exponents_matches_torch(graphs) -> None:
    """Every base (0, -0, positive, negative) against every exponent (0, 1, 2, 0.5, -1, 3, NaN): da = 0
    where b == 0, db = 0 where a == 0 and b >= 0, as torch's autograd of torch.pow gives them."""
    torch = pytest.importorskip("torch", reason="torch autograd is this test's oracle")
    a, b = np.meshgrid([0.0, -0.0, 2.0, -2.0], [0.0, 1.0, 2.0, 0.5, -1.0, 3.0, np.nan], indexing="ij")
    d = uniform(a.shape)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    torch.pow(ta, tb).backward(torch.tensor(d))
    da, db = graphs.pow_edges_grad(a, b, d)
    np.testing.assert_array_equal(da, ta.grad.numpy())
    np.testing.assert_array_equal(db, tb.grad.numpy())


def test_clip_forward_is_one_kernel_next_to_its_backward(graphs) -> None:
    """The backward reads x, not max(x, lo): value_and_grad stores no max(x, lo) of its own."""
    labels = [line for line in graphs.c_source.split('"') if line.startswith("clip_value_and_grad\\011")]  # C strings
    assert labels and not any(label.endswith(": maximum") for label in labels), labels


# ---------------------------------------------------------------------------
# Integer and i1 results: a dout each, cotangents through cast only
# ---------------------------------------------------------------------------

INTEGER = """
// Paddle: x = to_tensor([2, 3, 4], 'float64'); y = cast(x, 'uint8'); y.backward() -> x.grad = [1, 1, 1]
func.func @to_u8(%x: tensor<3xf64>) -> tensor<3xui8> {
  %y = opc.cast %x {dtype = ui8} : (tensor<3xf64>) -> tensor<3xui8>
  func.return %y : tensor<3xui8>
}
// An i1 value used twice: its two i1 cotangents meet in a logical or (issue 8: opc.add refused i1).
func.func @bool_twice(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = opc.cast %x {dtype = i1} : (tensor<4xf32>) -> tensor<4xi1>
  %a = opc.cast %c {dtype = f32} : (tensor<4xi1>) -> tensor<4xf32>
  %b = opc.cast %c {dtype = f32} : (tensor<4xi1>) -> tensor<4xf32>
  %s = opc.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %s : tensor<4xf32>
}
// An i1 value returned and used by a select: its dout cast back, plus select's gradient.
func.func @bool_and_select(%x: tensor<3xf64>) -> (tensor<3xi1>, tensor<3xf64>) {
  %c = opc.cast %x {dtype = i1} : (tensor<3xf64>) -> tensor<3xi1>
  %e = opc.select %c, %x, %x : (tensor<3xi1>, tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
  func.return %c, %e : tensor<3xi1>, tensor<3xf64>
}
func.func @bool_returned_twice(%x: tensor<4xf32>) -> (tensor<4xi1>, tensor<4xi1>) {
  %c = opc.cast %x {dtype = i1} : (tensor<4xf32>) -> tensor<4xi1>
  func.return %c, %c : tensor<4xi1>, tensor<4xi1>
}
// An i8 value used twice: its cotangents add (wrapping, like int8 arithmetic); a reshape passes them on.
func.func @i8_twice(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = opc.cast %x {dtype = i8} : (tensor<4xf32>) -> tensor<4xi8>
  %r = opc.reshape %c : (tensor<4xi8>) -> tensor<2x2xi8>
  %a = opc.cast %r {dtype = f32} : (tensor<2x2xi8>) -> tensor<2x2xf32>
  %f = opc.reshape %a : (tensor<2x2xf32>) -> tensor<4xf32>
  %b = opc.cast %c {dtype = f32} : (tensor<4xi8>) -> tensor<4xf32>
  %s = opc.add %f, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %s : tensor<4xf32>
}
// Integer arithmetic and compares stop the cotangent: only the direct path counts.
func.func @int_arith(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi32>, tensor<4xi1>) {
  %c = opc.cast %x {dtype = i32} : (tensor<4xf32>) -> tensor<4xi32>
  %n = opc.neg %c : (tensor<4xi32>) -> tensor<4xi32>
  %m = opc.cast %n {dtype = f32} : (tensor<4xi32>) -> tensor<4xf32>
  %z = opc.full {value = 0.0 : f64} : () -> tensor<4xf32>
  %g = opc.greater_than %x, %z : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  func.return %m, %c, %g : tensor<4xf32>, tensor<4xi32>, tensor<4xi1>
}
// No float argument: no grad function, and the module says why.
func.func @count(%n: tensor<4xi32>) -> tensor<4xf32> {
  %f = opc.cast %n {dtype = f32} : (tensor<4xi32>) -> tensor<4xf32>
  func.return %f : tensor<4xf32>
}
"""


@pytest.fixture(scope="module")
def integer_module():
    return compile_grad(INTEGER)


def test_paddle_uint8_cast_gradient(integer_module) -> None:
    dx = integer_module.to_u8_grad(np.array([2.0, 3.0, 4.0]), np.ones(3, np.uint8))
    assert dx.dtype == np.float64
    np.testing.assert_array_equal(dx, [1.0, 1.0, 1.0])
    # the dout is cast to the input's dtype, whatever it holds
    np.testing.assert_array_equal(integer_module.to_u8_grad(np.zeros(3), np.array([0, 7, 255], np.uint8)),
                                  [0.0, 7.0, 255.0])


def test_i1_fan_out_is_a_logical_or(integer_module) -> None:
    x = np.array([0.0, 1.5, -2.0, 0.0], np.float32)
    ds = np.array([0.0, 2.5, -1.0, 3.0], np.float32)
    # each path: cast_grad(c, ds) = ds != 0 (i1); or'ed; cast back to f32
    np.testing.assert_array_equal(integer_module.bool_twice_grad(x, ds), [0.0, 1.0, 1.0, 1.0])
    dc1, dc2 = np.array([1, 0, 0, 1], bool), np.array([0, 0, 1, 1], bool)
    np.testing.assert_array_equal(integer_module.bool_returned_twice_grad(x, dc1, dc2), [1.0, 0.0, 1.0, 1.0])
    # the i1 dout cast back to f64, plus select's gradient (dout into one branch or the other)
    x3, t = np.array([0.0, 1.0, 2.0]), np.array([True, False, True])
    np.testing.assert_array_equal(integer_module.bool_and_select_grad(x3, t, np.full(3, 0.5)), [1.5, 0.5, 1.5])


def test_integer_fan_out_sums_with_wraparound(integer_module) -> None:
    x = np.zeros(4, np.float32)
    ds = np.array([1.7, -3.2, 100.0, 0.0], np.float32)
    # two paths, each cast(ds, i8) = [1, -3, 100, 0]; summed in int8: 200 wraps to -56
    np.testing.assert_array_equal(integer_module.i8_twice_grad(x, ds), [2.0, -6.0, -56.0, 0.0])


def test_integer_arithmetic_and_compares_stop_cotangents(integer_module) -> None:
    x = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    dm, dc, dg = np.ones(4, np.float32), np.array([5, 6, 7, 8], np.int32), np.array([1, 1, 0, 1], bool)
    # through %m only neg (integer arithmetic) leads back: nothing; %c's dout is cast back; %g's is stopped
    np.testing.assert_array_equal(integer_module.int_arith_grad(x, dm, dc, dg), [5.0, 6.0, 7.0, 8.0])


POSITIONS_READ = """
func.func @f(%x: tensor<{rows}x6xf64>, %k: tensor<i64>) -> tensor<{rows}x?xf64> {{
  %v, %i = opc.topk %x, %k {{axis = 1, largest = {largest}}} : (tensor<{rows}x6xf64>, tensor<i64>) -> (tensor<{rows}x?xf64>, tensor<{rows}x?xi64>)
  %c = opc.cast %i {{dtype = f64}} : (tensor<{rows}x?xi64>) -> tensor<{rows}x?xf64>
  %s = opc.mul %v, %c : (tensor<{rows}x?xf64>, tensor<{rows}x?xf64>) -> tensor<{rows}x?xf64>
  %y = opc.add %v, %s : (tensor<{rows}x?xf64>, tensor<{rows}x?xf64>) -> tensor<{rows}x?xf64>
  func.return %y : tensor<{rows}x?xf64>
}}
"""


@pytest.mark.parametrize("rows", ["3", "?"])
@pytest.mark.parametrize("largest", ["true", "false"])
def test_an_integer_result_read_through_a_cast_does_not_stop_the_float_ones(rows, largest) -> None:
    """topk's values and its indices cast to f64 both used: the cast gives the i64 indices a
    cotangent (cast passes them through every dtype), which once made the sweep skip topk whole
    (dx = 0; found by fuzz_dynamic.py). y = v * (1 + i): dx at the picks is dy * (1 + i), 0 elsewhere."""
    m = opc.compile(POSITIONS_READ.format(rows=rows, largest=largest), grad=True)
    x = RNG.standard_normal((3, 6))
    for k in (0, 2, 6):
        dy = RNG.standard_normal((3, k))
        order = np.argsort(-x if largest == "true" else x, axis=1, kind="stable")[:, :k]
        want = np.zeros_like(x)
        np.put_along_axis(want, order, dy * (1 + order), axis=1)
        np.testing.assert_allclose(m.f_grad(x, np.array(k), dy), want, rtol=1e-12)


def test_function_without_float_argument_says_why(integer_module) -> None:
    for name in ("count_grad", "count_value_and_grad"):
        with pytest.raises(AttributeError, match="@count has no float argument"):
            getattr(integer_module, name)
    assert "count_grad" in integer_module.no_grad
    with pytest.raises(AttributeError, match="has no function 'nothing'"):
        integer_module.nothing  # noqa: B018


# ---------------------------------------------------------------------------
# The registry's vjp column for grad ops
# ---------------------------------------------------------------------------


def test_every_grad_op_is_differentiable() -> None:
    """Through its rule by default (the same PATTERNS opc-decompose applies), or by a vjp of its own."""
    from opc.autodiff import vjp_of, vjp_through_rule
    from opc.ops.registry import REGISTRY

    for name, e in REGISTRY.items():
        if e.kind == "grad":
            vjp, _ = vjp_of(name)
            assert vjp is not None, name
            assert vjp is not vjp_through_rule or e.rule is not None, name


def test_kernel_only_grad_op_without_vjp_is_an_error(monkeypatch) -> None:
    """A grad op realised only by a kernel (slice_grad, gather_grad) needs a vjp row of its own."""
    from dataclasses import replace

    from opc.errors import OpcError
    from opc.ops import registry

    kernel_only = replace(registry.REGISTRY["opc.relu_grad"], composite=False, rule=None)
    monkeypatch.setitem(registry.REGISTRY, "opc.relu_grad", kernel_only)
    with pytest.raises(OpcError, match=r"no gradient rule for opc.relu_grad \(a kernel-only grad op needs a vjp"):
        opc.compile(f"func.func @f(%x: {T34}, %d: {T34}) -> {T34} {{\n"
                    f"  %r = opc.relu_grad %x, %d : ({T34}, {T34}) -> {T34}\n  func.return %r : {T34}\n}}\n", grad=True)


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16"])
def test_relu_backward_of_floats_is_one_relu_grad(dtype: str) -> None:
    """relu's vjp on floats is the one kernel op opc.relu_grad (x read once, no compare, zeros and select
    written out; opc check counts it exact), whose numbers test_grad_primitives checks."""
    from xdsl.dialects.func import FuncOp

    t = f"tensor<3x4x{dtype}>"
    module = parse_text(f"func.func @r(%x: {t}) -> {t} {{\n  %y = opc.relu %x : ({t}) -> {t}\n"
                        f"  func.return %y : {t}\n}}\n", "relu.mlir").module
    add_grad_functions(module, ["r"])
    (grad,) = [f for f in module.ops if isinstance(f, FuncOp) and f.sym_name.data == "r_grad"]
    names = [op.name for op in grad.walk()]
    assert names.count("opc.relu_grad") == 1 and "opc.select" not in names, names


# a loss read only through floor: its cotangent is floor's zeros, the saved softmax unused (zeros
# too), so softmax_cross_entropy's rule has nothing to add; x read directly as well
FLOORED_LOSS = """
func.func @f(%x: tensor<4x6xf64>, %label: tensor<4x1xi64>) -> tensor<4x6xf64> {
  %l, %s = opc.softmax_cross_entropy %x, %label : (tensor<4x6xf64>, tensor<4x1xi64>) -> (tensor<4x1xf64>, tensor<4x6xf64>)
  %f = opc.floor %l : (tensor<4x1xf64>) -> tensor<4x1xf64>
  %y = opc.mul %x, %f : (tensor<4x6xf64>, tensor<4x1xf64>) -> tensor<4x6xf64>
  func.return %y : tensor<4x6xf64>
}
"""


def test_a_loss_read_through_floor_gives_its_logits_no_gradient() -> None:
    """y = x * floor(loss(x)): dx = dout * floor(loss) (floor's slope is 0 almost everywhere), so
    the rule called with both cotangents zero must add zeros, not anything else."""
    m = opc.compile(FLOORED_LOSS, grad=True)
    rng = np.random.default_rng(5)
    x = rng.uniform(-2, 2, (4, 6))
    label = rng.integers(0, 6, (4, 1))
    dout = rng.standard_normal((4, 6))
    z = x - x.max(1, keepdims=True)
    loss = -(z - np.log(np.exp(z).sum(1, keepdims=True)))[np.arange(4), label[:, 0]][:, None]
    got = m.f_grad(x, label, dout)
    np.testing.assert_allclose(got, dout * np.floor(loss), rtol=0, atol=1e-12)
