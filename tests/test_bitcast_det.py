"""opc.bitcast (the bits of each element read as another type of one width, NumPy's `x.view(dtype)`)
and ONNX BitCast onto it; ONNX Det (a batched determinant, composed at import) against
numpy.linalg.det and its gradient against finite differences. One compiled module per family."""

from __future__ import annotations

import shutil

import ml_dtypes
import numpy as np
import pytest
from requires import import_or_skip

import opc
from opc.errors import OpcError
from opc.ir import parse_text

BF16 = np.dtype(ml_dtypes.bfloat16)
MLIR = {"bool": "i1", "int8": "i8", "uint8": "ui8", "int16": "i16", "uint16": "ui16", "int32": "i32", "uint32": "ui32",
        "int64": "i64", "uint64": "ui64", "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}
SHAPE = (3, 5)
# (source, target): every width, both directions, signed / unsigned / float
PAIRS = [("float32", "int32"), ("int32", "float32"), ("float32", "uint32"), ("uint32", "float32"),
         ("uint32", "int32"), ("float64", "int64"), ("int64", "float64"), ("uint64", "float64"), ("float64", "uint64"),
         ("float16", "int16"), ("int16", "float16"), ("bfloat16", "uint16"), ("uint16", "bfloat16"),
         ("float16", "bfloat16"), ("uint16", "int16"), ("int8", "uint8"), ("uint8", "int8"), ("bool", "uint8"),
         ("bool", "int8"), ("int32", "int32")]


def np_dtype(name: str) -> np.dtype:
    return BF16 if name == "bfloat16" else np.dtype(name)


def tt(shape, dt: str) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{MLIR[dt]}>"


def bitcast_source() -> str:
    out = []
    for src, dst in PAIRS:
        out.append(f"func.func @bitcast_{src}_{dst}(%x: {tt(SHAPE, src)}) -> {tt(SHAPE, dst)} {{\n"
                   f"  %r = opc.bitcast %x {{dtype = {MLIR[dst]}}} : ({tt(SHAPE, src)}) -> {tt(SHAPE, dst)}\n"
                   f"  func.return %r : {tt(SHAPE, dst)}\n}}\n")
    # bitcast inside a fused nest: the bits of 2x (an add before, an add of integers after)
    out.append(f"func.func @fused(%x: {tt(SHAPE, 'float32')}, %k: {tt(SHAPE, 'int32')}) -> {tt(SHAPE, 'int32')} {{\n"
               f"  %d = opc.add %x, %x : ({tt(SHAPE, 'float32')}, {tt(SHAPE, 'float32')}) -> {tt(SHAPE, 'float32')}\n"
               f"  %b = opc.bitcast %d {{dtype = i32}} : ({tt(SHAPE, 'float32')}) -> {tt(SHAPE, 'int32')}\n"
               f"  %r = opc.add %b, %k : ({tt(SHAPE, 'int32')}, {tt(SHAPE, 'int32')}) -> {tt(SHAPE, 'int32')}\n"
               f"  func.return %r : {tt(SHAPE, 'int32')}\n}}\n")
    # no gradient flows through a bitcast: d/dx of x + view(view(x, i32), f32) is 1
    out.append(f"func.func @through(%x: {tt(SHAPE, 'float32')}) -> {tt(SHAPE, 'float32')} {{\n"
               f"  %b = opc.bitcast %x {{dtype = i32}} : ({tt(SHAPE, 'float32')}) -> {tt(SHAPE, 'int32')}\n"
               f"  %f = opc.bitcast %b {{dtype = f32}} : ({tt(SHAPE, 'int32')}) -> {tt(SHAPE, 'float32')}\n"
               f"  %r = opc.add %x, %f : ({tt(SHAPE, 'float32')}, {tt(SHAPE, 'float32')}) -> {tt(SHAPE, 'float32')}\n"
               f"  func.return %r : {tt(SHAPE, 'float32')}\n}}\n")
    return "".join(out)


@pytest.fixture(scope="module")
def bitcast_module():
    return opc.compile(bitcast_source(), grad=True)


def random_bits(dt: str, rng: np.random.Generator) -> np.ndarray:
    """Any bit pattern of the width (NaN payloads, infinities, subnormals, negative zero among them)."""
    if dt == "bool":
        return rng.integers(0, 2, size=SHAPE).astype(bool)
    width = np_dtype(dt).itemsize
    bits = rng.integers(0, 256, size=(*SHAPE, width), dtype=np.uint8).view(f"u{width}").reshape(SHAPE)
    special = {"float32": [0x7FC00001, 0xFF800000, 0x00000001, 0x80000000],
               "float64": [0x7FF0000000000001, 0x7FF0000000000000, 0x8000000000000000, 1],
               "float16": [0x7C01, 0xFC00, 0x0001, 0x8000], "bfloat16": [0x7F81, 0xFF80, 0x0001, 0x8000]}
    for i, v in enumerate(special.get(dt, [])):
        bits.flat[i] = v
    return bits.view(np_dtype(dt))


@pytest.mark.parametrize("src,dst", PAIRS)
def test_bitcast_is_numpy_view(bitcast_module, src, dst):
    x = random_bits(src, np.random.default_rng(len(src) * 7 + len(dst)))
    got = getattr(bitcast_module, f"bitcast_{src}_{dst}")(x)
    want = x.view(np.uint8) if src == "bool" else x.view(np_dtype(dst))
    assert got.dtype == np_dtype(dst)
    # compare the bits: NaN payloads must come through unchanged
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def test_bitcast_in_a_fused_nest(bitcast_module):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    k = rng.integers(-1000, 1000, size=SHAPE).astype(np.int32)
    np.testing.assert_array_equal(bitcast_module.fused(x, k), (x + x).view(np.int32) + k)


def test_no_gradient_flows_through_bitcast(bitcast_module):
    x = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    dout = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_array_equal(bitcast_module.through(x), x + x)
    np.testing.assert_array_equal(bitcast_module.through_grad(x, dout), dout)  # the direct path only


@pytest.mark.parametrize("src,dst,message", [
    ("f64", "i32", "f64 has 64 bits, i32 has 32"), ("ui8", "i1", "to i1 only from i1"), ("f16", "f32", "16 bits")])
def test_bitcast_verifier(src, dst, message):
    text = (f"func.func @f(%x: tensor<4x{src}>) -> tensor<4x{dst}> {{\n"
            f"  %r = opc.bitcast %x {{dtype = {dst}}} : (tensor<4x{src}>) -> tensor<4x{dst}>\n"
            f"  func.return %r : tensor<4x{dst}>\n}}\n")
    with pytest.raises(OpcError, match=rf"^bad\.mlir:2:3: error: .*{message}"):
        parse_text(text, "bad.mlir")


# ---------------------------------------------------------------------------
# ONNX BitCast
# ---------------------------------------------------------------------------

ONNX_PAIRS = [("float32", "int32"), ("int64", "float64"), ("uint16", "int16"), ("float16", "uint16"),
              ("bool", "uint8"), ("uint64", "int64"), ("bfloat16", "int16")]


def bitcast_model(src: str, dst: str, shape=(2, 3)):
    onnx = import_or_skip("onnx", "the ONNX importer needs the onnx package")
    from onnx import helper

    x_t = helper.np_dtype_to_tensor_dtype(np_dtype(src))
    y_t = helper.np_dtype_to_tensor_dtype(np_dtype(dst))
    node = helper.make_node("BitCast", ["x"], ["y"], to=y_t)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", x_t, shape)],
                              [helper.make_tensor_value_info("y", y_t, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)]), onnx


@pytest.fixture(scope="module")
def onnx_bitcasts():
    from xdsl.dialects.builtin import ModuleOp, StringAttr

    functions = []
    for src, dst in ONNX_PAIRS:
        module, _ = opc.import_onnx(bitcast_model(src, dst)[0])
        (f,) = list(module.ops)
        f.detach()
        f.sym_name = StringAttr(f"bc_{src}_{dst}")
        functions.append(f)
    return opc.compile(ModuleOp(functions))


@pytest.mark.parametrize("src,dst", ONNX_PAIRS)
def test_onnx_bitcast_matches_the_reference(onnx_bitcasts, src, dst):
    from onnx.reference import ReferenceEvaluator

    model, _ = bitcast_model(src, dst)
    x = random_bits(src, np.random.default_rng(5))[:2, :3]
    got = getattr(onnx_bitcasts, f"bc_{src}_{dst}")(x)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), np.asarray(want).view(f"u{got.itemsize}"))


@pytest.mark.parametrize("src,dst,message", [("float32", "int64", "same bit-width"),
                                             ("uint8", "bool", "to bool only from bool")])
def test_onnx_bitcast_refuses(src, dst, message):
    with pytest.raises(OpcError, match=rf"BitCast.*{message}"):
        opc.import_onnx(bitcast_model(src, dst)[0])


@pytest.mark.parametrize("to", ["FLOAT8E4M3FN", "FLOAT8E5M2"])
def test_onnx_bitcast_to_float8_views_the_bytes(to):
    """uint8 bits read as float8 (the low-precision types): NumPy's view through ml_dtypes."""
    import_or_skip("onnx", "the ONNX importer needs the onnx package")
    import ml_dtypes
    from onnx import TensorProto, helper

    node = helper.make_node("BitCast", ["x"], ["y"], to=getattr(TensorProto, to))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [6])],
                              [helper.make_tensor_value_info("y", getattr(TensorProto, to), [6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    x = np.array([0, 0x38, 0x7E, 0xB8, 0x01, 0x80], np.uint8)
    want = x.view({"FLOAT8E4M3FN": ml_dtypes.float8_e4m3fn, "FLOAT8E5M2": ml_dtypes.float8_e5m2}[to])
    got = opc.load_onnx(model)(x)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint8), x)


# ---------------------------------------------------------------------------
# ONNX Det: Gaussian elimination with partial pivoting unrolled at import
# ---------------------------------------------------------------------------

DET_CASES = [((), 1, "float64"), ((), 2, "float32"), ((4,), 3, "float64"), ((2, 3), 4, "float32"),
             ((3,), 5, "float64"), ((2,), 8, "float64"), ((5,), 3, "float16"), ((2,), 4, "bfloat16"),
             ((2,), 16, "float64")]
DET_TOL = {"float64": 1e-10, "float32": 2e-5, "float16": 5e-3, "bfloat16": 3e-2}


def det_id(batch, n, dt) -> str:
    return f"det_{'x'.join(map(str, batch)) or 's'}_{n}_{dt}"


def det_model(batch, n, dt):
    import_or_skip("onnx", "the ONNX importer needs the onnx package")
    from onnx import helper

    t = helper.np_dtype_to_tensor_dtype(np_dtype(dt))
    graph = helper.make_graph([helper.make_node("Det", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", t, [*batch, n, n])],
                              [helper.make_tensor_value_info("y", t, list(batch))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


@pytest.fixture(scope="module")
def det_module():
    from xdsl.dialects.builtin import ModuleOp, StringAttr

    functions = []
    for case in DET_CASES:
        module, _ = opc.import_onnx(det_model(*case))
        (f,) = list(module.ops)
        f.detach()
        f.sym_name = StringAttr(det_id(*case))
        functions.append(f)
    return opc.compile(ModuleOp(functions), grad=True)


def det_inputs(batch, n, dt, rng) -> np.ndarray:
    """Random matrices, one needing a row swap at every step (a permutation with noise), one singular."""
    a = rng.uniform(-1.0, 1.0, size=(*batch, n, n))
    flat = a.reshape(-1, n, n)
    flat[0] = np.eye(n)[::-1] + 0.01 * flat[0]  # zeros (nearly) on the diagonal: pivoting matters
    if len(flat) > 1 and n > 1:
        flat[-1, 1] = flat[-1, 0] * 2.0  # a row twice another: det 0
    return a.astype(np_dtype(dt))


@pytest.mark.parametrize("case", DET_CASES, ids=[det_id(*c) for c in DET_CASES])
def test_det_matches_numpy(det_module, case):
    batch, n, dt = case
    x = det_inputs(batch, n, dt, np.random.default_rng(n))
    got = getattr(det_module, det_id(*case))(x)
    want = np.linalg.det(x.astype(np.float64))
    assert got.dtype == np_dtype(dt) and got.shape == tuple(batch)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=DET_TOL[dt], atol=DET_TOL[dt])


@pytest.mark.parametrize("case", [c for c in DET_CASES if c[2] in ("float64", "float32")],
                         ids=[det_id(*c) for c in DET_CASES if c[2] in ("float64", "float32")])
def test_det_gradient(det_module, case):
    """g * det(A) * inv(A)^T (Jacobi's formula) and central differences in float64."""
    batch, n, dt = case
    rng = np.random.default_rng(10 + n)
    x = rng.uniform(-1.0, 1.0, size=(*batch, n, n))
    x.reshape(-1, n, n)[0] = np.eye(n)[::-1] + 0.01 * x.reshape(-1, n, n)[0]
    x = x.astype(np_dtype(dt))
    g = rng.uniform(-1.0, 1.0, size=batch).astype(np_dtype(dt))
    got = getattr(det_module, det_id(*case) + "_grad")(x, g).astype(np.float64)
    x64 = x.astype(np.float64)
    jacobi = (np.asarray(g, np.float64) * np.linalg.det(x64))[..., None, None] * np.swapaxes(np.linalg.inv(x64), -1, -2)
    tol = DET_TOL[dt] * 10
    np.testing.assert_allclose(got, jacobi, rtol=tol, atol=tol)
    if dt == "float64" and n <= 5:
        eps, fd = 1e-6, np.zeros_like(x64)
        for idx in np.ndindex(x64.shape):
            plus, minus = x64.copy(), x64.copy()
            plus[idx] += eps
            minus[idx] -= eps
            fd[idx] = np.sum(g * (np.linalg.det(plus) - np.linalg.det(minus))) / (2 * eps)
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape", [(3, 0, 0), (0, 2, 2)])
def test_det_of_empty_matrices_and_batches(shape):
    """det of a 0x0 matrix is 1 (numpy.linalg.det's value); an empty batch gives an empty result."""
    module, _ = opc.import_onnx(det_model(shape[:-2], shape[-1], "float32"), shapes={"x": shape})
    x = np.zeros(shape, np.float32)
    np.testing.assert_array_equal(opc.compile(module).g(x), np.linalg.det(x))


def test_det_refuses_a_non_square_input():
    import_or_skip("onnx", "the ONNX importer needs the onnx package")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Det", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    with pytest.raises(OpcError, match=r"Det"):
        opc.import_onnx(model)


def test_det_refuses_n_above_the_unroll_bound():
    with pytest.raises(OpcError, match=r"\(Det\): n = 17: opc unrolls Det at import for n up to 16"):
        opc.import_onnx(det_model((), 17, "float32"))


# ---------------------------------------------------------------------------
# The emitted CUDA, run on the CPU (tests/support/cuda_sim.h): bitcast's device bit helpers and Det's
# elimination with its gradient, against the CPU module
# ---------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH (it builds the CUDA simulation)")
def test_bitcast_and_det_on_the_cuda_simulator(tmp_path):
    from cuda_simulator import simulated
    from xdsl.dialects.builtin import StringAttr

    from opc.api import lower, prepare
    from opc.frontend import load_module
    from opc.lowering.cuda_emitter import emit_cuda

    case = ((4,), 3, "float32")
    module, _ = opc.import_onnx(det_model(*case))
    (f,) = list(module.ops)
    f.detach()
    f.sym_name = StringAttr("det3")
    src = bitcast_source() + str(f)
    sim = simulated(*emit_cuda(lower(prepare(load_module(src), "cuda", True), "cuda")), str(tmp_path), "bitcast_det")
    for src_dt, dst_dt in PAIRS:
        x = random_bits(src_dt, np.random.default_rng(9))
        got = getattr(sim, f"bitcast_{src_dt}_{dst_dt}")(x)
        want = x.view(np.uint8) if src_dt == "bool" else x.view(np_dtype(dst_dt))
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))
    x = det_inputs(*case, np.random.default_rng(3))
    np.testing.assert_allclose(sim.det3(x), np.linalg.det(x.astype(np.float64)), rtol=2e-5, atol=2e-5)
    g = np.random.default_rng(4).uniform(-1, 1, 4).astype(np.float32)
    x64 = x.astype(np.float64)
    ok = np.abs(np.linalg.det(x64)) > 1e-3  # Jacobi's formula where A is invertible
    jacobi = (g * np.linalg.det(x64))[..., None, None] * np.swapaxes(np.linalg.inv(np.where(ok[:, None, None], x64,
                                                                                             np.eye(3))), -1, -2)
    np.testing.assert_allclose(sim.det3_grad(x, g)[ok], jacobi[ok], rtol=1e-4, atol=1e-4)
