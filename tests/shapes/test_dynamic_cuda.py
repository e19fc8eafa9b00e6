"""Run-time (`?`) sizes on the CUDA target (SPEC.md, "Run-time shapes"): the emitted .cu takes the
size parameters after the outputs, as the C code does, so the binding is the same.

Without a GPU: nvcc compiles the .cu of dynamic_ops.mlir, of a gradient, of dynamic_nn.mlir's
gradients and of the KV-cache decoder without warnings, and they run through
tests/support/cuda_sim.h (the .cu built with g++, each launch's blocks on threads) against NumPy,
central differences and onnxruntime, dynamic_ops.mlir at sizes 0, 1, 5 and 37. The runtime nn
calls (softmax, layer norm, attention, conv, pooling, cross entropy) run opc_nn.cuh's own kernels
in the simulation; the GEMM calls cuda_sim_library.h's plain loop (the tiled kernel's 3-D grid is
not emulated), so for matmuls the checks cover the arguments the emitted code passes (run-time
sizes included), not the GEMM kernel's numbers. On a GPU the same functions run through
opc.compile(target="cuda")."""

from __future__ import annotations

import glob
import shutil
from pathlib import Path

import numpy as np
import pytest
import test_dynamic_shapes as cpu
from cuda_simulator import simulated
from nvcc_check import assert_nvcc_compiles

import opc
from opc.api import lower, prepare
from opc.frontend import load_module
from opc.lowering.cuda_build import nvcc_path
from opc.lowering.cuda_emitter import emit_cuda

HERE = Path(__file__).parent
SOURCE = (HERE / "dynamic_ops.mlir").read_text()
GPU_NODES = sorted(glob.glob("/dev/nvidia[0-9]*"))


def emitted(source: str = SOURCE, grad: bool = False) -> tuple[str, list]:
    return emit_cuda(lower(prepare(load_module(source), "cuda", grad), "cuda"))


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH (it builds the CUDA simulation)")
    cu, sigs = emitted()
    return simulated(cu, sigs, str(tmp_path_factory.mktemp("dyn-cuda-sim")), "dynamic_ops", library=True)


@pytest.fixture(scope="module")
def gpu():
    if not GPU_NODES:
        pytest.skip("no CUDA device (no /dev/nvidia[0-9]* device node): the simulator tests cover the kernels")
    return opc.compile(SOURCE, target="cuda")


# The CPU tests, each run on the simulator and (where there is one) on the GPU: the same oracles.
CASES = [cpu.test_unary, cpu.test_binary_broadcasts_static_ones_only, cpu.test_compare_select_cast,
         cpu.test_reductions, cpu.test_matmuls]


@pytest.mark.parametrize("n", cpu.SIZES)
@pytest.mark.parametrize("case", CASES, ids=[c.__name__.removeprefix("test_") for c in CASES])
def test_on_the_simulator(sim, case, n):
    case(sim, n)


@pytest.mark.parametrize("n,s", [(0, 3), (1, 1), (2, 7), (5, 0), (3, 40)])
def test_row_calls_with_two_run_time_dims_on_the_simulator(sim, n, s):
    cpu.test_row_kernels_with_two_run_time_dims(sim, n, s)


@pytest.mark.parametrize("n,k", [(0, 2), (1, 0), (4, 3), (9, 9), (37, 5)])
def test_layout_ops_on_the_simulator(sim, n, k):
    cpu.test_layout_ops_and_run_time_size_operands(sim, n, k)


@pytest.mark.parametrize("rows,cols,k", [(10, 0, 3), (10, 4, 0), (10, 3, 12), (10, 37, 5)])
def test_gather_on_the_simulator(sim, rows, cols, k):
    cpu.test_gather_with_run_time_index_count(sim, rows, cols, k)


def test_gather_index_error_on_the_simulator(sim):
    with pytest.raises(IndexError, match="argument 'i' holds index 10"):
        sim.take(cpu.rand(10, 3), np.array([1, 10], np.int64))


@pytest.mark.parametrize("n,k", [(0, 0), (0, 3), (1, 1), (5, 2), (37, 0)])
def test_concat_on_the_simulator(sim, n, k):
    cpu.test_concat_along_a_run_time_dim(sim, n, k)


@pytest.fixture(scope="module")
def sim_grad(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH (it builds the CUDA simulation)")
    cu, sigs = emitted(cpu.GRAD, grad=True)
    return simulated(cu, sigs, str(tmp_path_factory.mktemp("dyn-cuda-grad")), "grad", library=True)


@pytest.mark.parametrize("n", [1, 2, 9])
def test_gradient_on_the_simulator(sim_grad, n):
    """matmul, tanh, softmax, reshape, reduce_max, reduce_mean and their vjps at a run-time batch."""
    cpu.test_gradient_matches_finite_differences(sim_grad, n)


@pytest.fixture(scope="module")
def sim_nn(tmp_path_factory):
    """dynamic_nn.mlir with grad=True: conv, max_pool, layer_norm, causal attention, softmax cross
    entropy and their vjps, with a run-time batch or sequence."""
    import test_dynamic_nn as nn

    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH (it builds the CUDA simulation)")
    cu, sigs = emitted(nn.TEXT, grad=True)
    return simulated(cu, sigs, str(tmp_path_factory.mktemp("dyn-cuda-nn")), "nn", library=True)


def test_conv_pool_gradient_on_the_simulator(sim_nn):
    """Against central differences (each of them a call of the simulated module: a small batch)."""
    import test_dynamic_nn as nn

    nn.test_conv_pool_with_a_run_time_batch(sim_nn, 1)


def test_attention_cross_entropy_gradient_on_the_simulator(sim_nn):
    import test_dynamic_nn as nn

    nn.test_attention_and_cross_entropy_over_a_run_time_sequence(sim_nn, 2)


@pytest.fixture(scope="module")
def sim_decoder(tmp_path_factory):
    """tests/models/kv_decoder.onnx (PyTorch, dynamic batch, prompt and cache lengths) for CUDA on the
    simulator, with runtime/opc_nn_attention.cuh's kernels built in; its weights as arguments."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH (it builds the CUDA simulation)")
    module, weights = opc.import_onnx(str(HERE.parent / "models" / "kv_decoder.onnx"))
    cu, sigs = emitted(str(module))
    m = simulated(cu, sigs, str(tmp_path_factory.mktemp("dyn-cuda-kv")), "kv", library=True)
    return m.main_graph, [weights[name] for name, _, _ in sigs[0].inputs[3:]]


@pytest.mark.parametrize(("batch", "new", "past"), [(1, 1, 0), (2, 1, 1), (3, 5, 7)])
def test_kv_cache_decoder_on_the_simulator(sim_decoder, batch, new, past):
    """One CUDA module for every call, against onnxruntime: an empty cache, a token on a cache, a
    prompt on a cache (four size parameters: batch, new tokens, the two caches' lengths)."""
    from onnx_helpers import ort
    from test_kv_cache import HEAD_DIM, HEADS, LAYERS, MODEL

    run, weights = sim_decoder
    rng = np.random.default_rng(batch * 1000 + new * 10 + past)
    ids = rng.integers(0, 256, (batch, new)).astype(np.int64)
    k, v = (rng.standard_normal((LAYERS, batch, HEADS, past, HEAD_DIM)).astype(np.float32) for _ in range(2))
    got = run(ids, k, v, *weights)
    want = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"]).run(
        None, {"ids": ids, "past_k": k, "past_v": v})
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    assert got[1].shape[3] == past + new


def test_random_programs_on_the_simulator(tmp_path):
    """tests/support/fuzz_dynamic.py's random programs (elementwise, reductions, matmul, softmax,
    layer norm, concat, reshape, transpose over `?` rows) for CUDA, one module, at sizes 0, 1, 3
    and 17, forward and gradient against NumPy and central differences."""
    from fuzz_dynamic import BASIC, check, generate

    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH (it builds the CUDA simulation)")
    # the nn, data-size and loop steps are the CPU's test, and so are the f32/f16/bf16 programs: the
    # simulator's GEMM stand-in (cuda_sim_library.h) is f32/f64 only, and its gradients are checked in f64
    progs = [p for p in (generate(0, i, BASIC) for i in range(40)) if p.dtype == "f64"][:12]
    assert len(progs) == 12
    cu, sigs = emitted("".join(p.text() for p in progs), grad=True)
    m = simulated(cu, sigs, str(tmp_path), "fuzz", library=True)
    defects = [d for p in progs for d in check(m, p, 0, True)]
    assert not defects, "\n".join(defects)


def test_size_rules_are_the_bindings(sim):
    """The CUDA functions bind and check their sizes as the CPU ones (the same DynamicFunction)."""
    cpu.test_two_arguments_of_one_size_must_agree(sim)
    cpu.test_static_dims_are_still_checked(sim)
    cpu.test_a_run_time_one_is_not_broadcast(sim)
    assert sim.unary.sig.sizes == ["n0"]


# ---------------------------------------------------------------------------
# The emitted code
# ---------------------------------------------------------------------------


def test_emit_cuda_shows_the_size_parameters(capsys):
    from opc.cli import main

    assert main(["compile", str(HERE / "dynamic_ops.mlir"), "--target", "cuda", "--emit", "cuda"]) == 0
    cu = capsys.readouterr().out
    for entry in ("opc_fn_unary(", "opc_fn_unary_host("):
        (proto,) = [ln for ln in cu.splitlines() if ln.startswith(f'extern "C" int {entry}')]
        assert proto.endswith(", const int64_t opc_n0) {") and "const float *x_" in proto, proto
    (layout,) = [ln for ln in cu.splitlines() if ln.startswith('extern "C" int opc_fn_layout(')]
    assert layout.endswith("const int64_t opc_n0, const int64_t opc_n1, const int64_t opc_n2) {"), layout
    # a grid sized on the host from the run-time sizes, and no launch of no blocks
    assert "if ((8 * opc_n0) > 0) {" in cu and "opc_cuda_blocks((8 * opc_n0), 1, 256, 8192)" in cu
    # a run-time sized temporary on the device (layer_norm's mean), freed at cleanup
    assert "sizeof(float) * opc_max1((opc_n0 * opc_n1))));" in cu


def test_static_functions_emit_as_before():
    """No size parameter, no host-side grid: a static function's code is what it was."""
    src = """func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a = opc.exp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %a : tensor<4x8xf32>
}"""
    cu, _ = emit_cuda(lower(prepare(load_module(src), "cuda", False), "cuda"))
    assert "opc_k_f_0<<<1, 32>>>(" in cu and "opc_cuda_blocks(" not in cu.split("opc_k_f_0")[1]
    assert 'extern "C" int opc_fn_f(const float *x_0, float *out0_1) {' in cu


def test_what_is_still_refused_is_refused_in_one_line():
    """A run-time loop bound from another start than 0 (no lowering makes one yet): the kernel's
    flat index would need the start on the host too. One line, naming the function and the op."""
    from xdsl.dialects import arith, scf
    from xdsl.dialects.builtin import IndexType, IntegerAttr

    from opc.errors import UnsupportedError

    loops = lower(prepare(load_module(SOURCE), "cuda", False), "cuda")
    par = next(op for op in loops.walk() if isinstance(op, scf.ParallelOp))
    one = arith.ConstantOp(IntegerAttr(1, IndexType()))
    par.parent_block().insert_op_before(one, par)
    par.operands = [one.result, *par.operands[1:]]
    with pytest.raises(UnsupportedError) as e:
        emit_cuda(loops)
    assert str(e.value) == ("@unary: scf.parallel: the CUDA target takes run-time loop bounds only from 0 "
                            "by steps of 1")


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("case", ["dynamic_ops", "gradient", "dynamic_nn", "kv_decoder"])
def test_nvcc_compiles_the_run_time_sized_code(tmp_path, case):
    if case == "kv_decoder":
        cu, _ = emitted(str(opc.import_onnx(str(HERE.parent / "models" / "kv_decoder.onnx"))[0]))
    elif case == "dynamic_nn":
        cu, _ = emitted((HERE / "dynamic_nn.mlir").read_text(), grad=True)
    else:
        cu, _ = emitted(cpu.GRAD, grad=True) if case == "gradient" else emitted()
    assert_nvcc_compiles(tmp_path, "dyn", cu)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not on PATH")
def test_written_module_binds_the_sizes(tmp_path):
    """`opc compile --target cuda -o DIR` builds the library and writes NAME.py with the size
    parameters in its signatures; loaded (no device needed to load), each entry takes them."""
    import ast

    from opc.cli import main
    from opc.lowering.abi import FunctionSignature
    from opc.lowering.cuda_build import load_cuda_library
    from opc.lowering.dynamic_call import DynamicFunction

    src = tmp_path / "tiny.mlir"
    src.write_text("""func.func @f(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %a = opc.exp %x : (tensor<?x8xf32>) -> tensor<?x8xf32>
  func.return %a : tensor<?x8xf32>
}""")
    assert main(["compile", str(src), "--target", "cuda", "-o", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "tiny.py").read_text()
    sigs = ast.literal_eval(text.split("_SIGNATURES = ", 1)[1].split("\n", 1)[0])
    assert sigs == [("f", [("x", ("n0", 8), "float32")], [(("n0", 8), "float32")], [], ["n0"], [], [], [], [])]
    m = load_cuda_library(tmp_path / "out" / "libtiny.so", [FunctionSignature(*s) for s in sigs],
                          require_device=False)
    assert isinstance(m.f, DynamicFunction)
    assert m.ffi.typeof(m.lib.opc_fn_f_host).args[-1].cname == "int64_t"


# ---------------------------------------------------------------------------
# On a GPU
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", cpu.SIZES)
@pytest.mark.parametrize("case", CASES, ids=[c.__name__.removeprefix("test_") for c in CASES])
def test_on_the_gpu(gpu, case, n):
    case(gpu, n)


@pytest.mark.parametrize("n,s", [(0, 3), (1, 1), (2, 7), (5, 0), (3, 40)])
def test_rows_on_the_gpu(gpu, n, s):
    cpu.test_row_kernels_with_two_run_time_dims(gpu, n, s)


@pytest.mark.parametrize("n,k", [(0, 2), (1, 0), (9, 9)])
def test_layout_gather_concat_on_the_gpu(gpu, n, k):
    cpu.test_layout_ops_and_run_time_size_operands(gpu, n, k)
    cpu.test_gather_with_run_time_index_count(gpu, 10, n, k)
    cpu.test_concat_along_a_run_time_dim(gpu, n, k)


@pytest.mark.parametrize("n", [1, 9])
def test_gradient_on_the_gpu(n):
    if not GPU_NODES:
        pytest.skip("no CUDA device (no /dev/nvidia[0-9]* device node): the simulator tests cover the kernels")
    cpu.test_gradient_matches_finite_differences(opc.compile(cpu.GRAD, target="cuda", grad=True), n)


def test_one_gpu_module_serves_every_size(gpu):
    for n in (3, 1000, 2, 0):
        x = cpu.rand(n, 8)
        np.testing.assert_allclose(gpu.unary(x)[0], np.exp(x), rtol=1e-5)

