"""opc.cumsum (ONNX CumSum: exclusive, reverse) against NumPy's cumsum, in every dtype the reductions
admit: integers exact in their own type (wrapping like NumPy), floats summed in order (f16/bf16 in f32,
rounded on store), so every dtype is compared exactly with np.cumsum's sequential sum. Also its
gradient by finite differences, the ONNX converter (no n x n triangle: the C source stays small at
n = 8,000) and the emitted CUDA run on the CPU simulator."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from oracle import BF16, compile_funcs, func, np_dtype, ttype
from xdsl.utils.exceptions import VerifyException

import opc
from opc.dialects import opc as o

DTYPES = ["int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
FLAGS = [(False, False), (True, False), (False, True), (True, True)]  # (exclusive, reverse)
GRID_SHAPE = (3, 4, 5)
GRID_AXES = (0, 1, -1, -2)
EDGES = [((1,), 0), ((7,), -1), ((4, 1), 1), ((1, 6), 0), ((0, 3), 0), ((3, 0), 1), ((3, 0), 0), ((2, 0, 3), -1)]


def reference(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """np.cumsum along axis in x's own type (halves in f32, rounded at the end), flipped for
    reverse, shifted by one (a leading 0) for exclusive."""
    work = np.float32 if x.dtype in (np.float16, BF16) else x.dtype
    y = np.flip(x, axis) if reverse else x
    y = y.astype(work)
    if exclusive:
        zero = np.zeros_like(np.take(y, [0], axis=axis)) if y.shape[axis] else y
        y = np.concatenate([zero, np.take(y, range(max(0, y.shape[axis] - 1)), axis=axis)], axis=axis)
    with np.errstate(over="ignore"):
        s = np.cumsum(y, axis=axis, dtype=work)
    s = np.flip(s, axis) if reverse else s
    return s.astype(x.dtype)


def name(dt: str, shape, axis: int, exclusive: bool, reverse: bool) -> str:
    dims = "x".join(map(str, shape))
    return f"cs_{dt}_{dims}_a{axis % len(shape)}{'n' if axis < 0 else ''}_{int(exclusive)}{int(reverse)}"


def cumsum_func(dt: str, shape, axis: int, exclusive: bool, reverse: bool) -> str:
    t = ttype(shape, dt)
    attrs = f"{{axis = {axis}, exclusive = {str(exclusive).lower()}, reverse = {str(reverse).lower()}}}"
    return func(name(dt, shape, axis, exclusive, reverse), [(shape, dt)], f"%r = opc.cumsum %a0 {attrs} : ({t}) -> {t}",
                [(shape, dt)])


def cases():
    for dt in DTYPES:
        for axis in GRID_AXES:
            for ex, rev in FLAGS:
                yield dt, GRID_SHAPE, axis, ex, rev
    for dt in ("float32", "int32"):
        for shape, axis in EDGES:
            for ex, rev in FLAGS:
                yield dt, shape, axis, ex, rev


CASES = list(cases())


@pytest.fixture(scope="module")
def compiled():
    return compile_funcs([cumsum_func(*c) for c in CASES])


def sample(shape, dt: str, rng: np.random.Generator) -> np.ndarray:
    d = np_dtype(dt)
    if np.issubdtype(d, np.integer):
        info = np.iinfo(d)  # the whole range: sums wrap
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=d)
    return rng.uniform(-4, 4, size=shape).astype(d)


@pytest.mark.parametrize("case", CASES, ids=[name(*c) for c in CASES])
def test_cumsum_matches_numpy(compiled, case) -> None:
    dt, shape, axis, ex, rev = case
    x = sample(shape, dt, np.random.default_rng(len(name(*case))))
    got = getattr(compiled, name(*case))(x)
    want = reference(x, axis, ex, rev)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))  # bit for bit


def test_reference_is_the_onnx_meaning() -> None:
    """The oracle itself, on ONNX CumSum's documented example: x = [1, 2, 3]."""
    x = np.array([1.0, 2.0, 3.0])
    assert reference(x, 0, False, False).tolist() == [1, 3, 6]
    assert reference(x, 0, True, False).tolist() == [0, 1, 3]
    assert reference(x, 0, False, True).tolist() == [6, 5, 3]
    assert reference(x, 0, True, True).tolist() == [5, 3, 0]


INT64_SRC = func("big", [((5,), "int64")], "%r = opc.cumsum %a0 {axis = 0} : (tensor<5xi64>) -> tensor<5xi64>",
                 [((5,), "int64")])


def test_int64_past_2_53_is_exact() -> None:
    x = np.array([2**60, 1, 1, -2**60, 3], np.int64)
    got = compile_funcs([INT64_SRC]).big(x)
    assert got.tolist() == [2**60, 2**60 + 1, 2**60 + 2, 2, 5]


@pytest.mark.parametrize("text,message", [
    ("%r = opc.cumsum %a0 {axis = 0} : (tensor<3xi1>) -> tensor<3xi1>", "must not be i1"),
    ("%r = opc.cumsum %a0 {axis = 1} : (tensor<3xf32>) -> tensor<3xf32>", "cumsum axis 1 is out of range for rank 1"),
    ("%r = opc.cumsum %a0 {axis = 0} : (tensor<f32>) -> tensor<f32>", "rank >= 1"),
])
def test_verifier_refuses(text: str, message: str) -> None:
    t = text.split(": (")[1].split(")")[0]
    src = f"func.func @f(%a0: {t}) -> {t} {{\n  {text}\n  func.return %r : {t}\n}}\n"
    with pytest.raises(opc.OpcError, match=message) as info:
        opc.compile(src)
    assert "\n" not in str(info.value).strip()


def test_op_builder_and_verify() -> None:
    from xdsl.dialects.builtin import f32
    from xdsl.ir import Block

    b = Block(arg_types=[o.tensor([2, 3], f32)])
    op = o.CumsumOp(b.args[0], axis=-1, exclusive=True)
    op.verify()
    assert op.axis_index() == 1 and o.flag(op.exclusive) and not o.flag(op.reverse)
    assert op.result.type == b.args[0].type
    with pytest.raises(VerifyException, match="out of range"):
        o.CumsumOp(b.args[0], axis=2).verify()


# -- the gradient: a cumsum of dout the other way, checked by central differences in f64 --

GRAD_CASES = [(axis, ex, rev) for axis in (0, -1) for ex, rev in FLAGS]


def grad_name(axis: int, ex: bool, rev: bool) -> str:
    return f"g_a{axis % 2}_{int(ex)}{int(rev)}"


@pytest.fixture(scope="module")
def grads():
    t = ttype((3, 4), "float64")
    srcs = [func(grad_name(*c), [((3, 4), "float64")],
                 f"%c = opc.cumsum %a0 {{axis = {c[0]}, exclusive = {str(c[1]).lower()}, reverse = "
                 f"{str(c[2]).lower()}}} : ({t}) -> {t}\n  %r = opc.mul %c, %a0 : ({t}, {t}) -> {t}",
                 [((3, 4), "float64")]) for c in GRAD_CASES]
    return opc.compile("\n".join(srcs), grad=True)


@pytest.mark.parametrize("case", GRAD_CASES, ids=[grad_name(*c) for c in GRAD_CASES])
def test_gradient_by_finite_differences(grads, case) -> None:
    """f(x) = cumsum(x) * x, so the cotangent reaching cumsum varies with x too."""
    rng = np.random.default_rng(7)
    x, dout = rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, (3, 4))
    f = getattr(grads, grad_name(*case))
    got = getattr(grads, grad_name(*case) + "_grad")(x, dout)
    eps, want = 1e-6, np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[idx] += eps
        minus[idx] -= eps
        want[idx] = (np.sum(f(plus) * dout) - np.sum(f(minus) * dout)) / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-8)


# -- the ONNX converter --

def onnx_cumsum(x: np.ndarray, axis: int, opset: int, **attrs):
    helpers = pytest.importorskip("onnx_helpers")
    return helpers.single("CumSum", {"x": x}, initializers={"axis": np.array(axis, np.int64)}, opset=opset, **attrs)


@pytest.mark.parametrize("opset", [11, 14])
def test_onnx_cumsum_int64_is_exact(opset: int) -> None:
    x = np.array([[2**60, 1, 1, -2**60, 3]], np.int64)
    module, weights = opc.import_onnx(onnx_cumsum(x, -1, opset))
    assert "opc.cumsum" in str(module) and "opc.matmul" not in str(module)
    got = opc.compile(module).main_graph(x, *weights.values())
    assert got.tolist() == [[2**60, 2**60 + 1, 2**60 + 2, 2, 5]]


def onnx_c_source(model) -> str:
    from opc.api import emit
    from opc.frontend import load_module

    module, _ = opc.import_onnx(model)
    return emit(load_module(module), "c")


@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_onnx_cumsum_8000_compiles_small(exclusive: bool, reverse: bool) -> None:
    """A position-id CumSum over 8,000 elements: one loop, no 8,000 x 8,000 triangle in the C source
    (which was 256 MB of it): the source is small and barely longer than at n = 8."""
    x = np.random.default_rng(3).integers(0, 2, size=(2, 8000)).astype(np.int64)
    model = onnx_cumsum(x, 1, 14, exclusive=int(exclusive), reverse=int(reverse))
    c_source = onnx_c_source(model)
    assert len(c_source.encode()) < 150_000, len(c_source)  # about 99 KB of it: the runtime's headers
    small = onnx_c_source(onnx_cumsum(x[:, :8], 1, 14, exclusive=int(exclusive), reverse=int(reverse)))
    assert len(c_source) - len(small) < 200, (len(c_source), len(small))
    if (exclusive, reverse) == (False, False):
        module, weights = opc.import_onnx(model)
        got = opc.compile(module).main_graph(x, *weights.values())
        np.testing.assert_array_equal(got, np.cumsum(x, axis=1))


# -- the emitted CUDA, run on the CPU (tests/support/cuda_sim.h) --

SIM_CASES = [("float32", (5, 37), -1, False, False), ("float16", (5, 37), 0, True, False),
             ("int64", (300,), 0, False, True), ("int8", (2, 3, 4), 1, True, True),
             ("bfloat16", (4, 1), 1, False, True)]


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH (it builds the CUDA simulation)")
def test_cuda_kernels_on_the_simulator(tmp_path) -> None:
    from cuda_simulator import simulated

    from opc.api import lower, prepare
    from opc.frontend import load_module
    from opc.lowering.cuda_emitter import emit_cuda

    src = "\n".join(cumsum_func(*c) for c in SIM_CASES)
    cu, sigs = emit_cuda(lower(prepare(load_module(src), "cuda", False), "cuda"))
    assert "__shfl_down_sync" not in cu  # a scan is no warp reduction: one thread per line, in order
    m = simulated(cu, sigs, str(tmp_path), "cumsum")
    rng = np.random.default_rng(5)
    for case in SIM_CASES:
        dt, shape, axis, ex, rev = case
        x = sample(shape, dt, rng)
        got = getattr(m, name(*case))(x)
        np.testing.assert_array_equal(got.view(np.uint8), reference(x, axis, ex, rev).view(np.uint8), err_msg=name(*case))
