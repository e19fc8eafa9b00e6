"""Sizes that depend on the data, and sizes read from values, on the CUDA target (docs/shapes.md,
"Sizes that depend on the data" and "Sizes read from values"; docs/devices.md).

How they run there: the ops' sequential passes (a nonzero's fill, topk's k read and checked,
unique's compares, NMS's greedy pass) run in one-thread kernels, a nonzero's count in a warp's;
each scalar such a kernel computes
that the host needs (the count) goes back by a cudaMemcpy of 8 bytes before the result is
cudaMalloc'd at it and the next kernels are launched with it (CudaEmitter.kernel_results). The
_host wrapper copies the found sizes back first and copies each result out at its found size; a
handed result (no bound before the call) is copied into a malloc'd host buffer that the binding
frees with the array.

Without a GPU these run on tests/support/cuda_sim.h (the emitted .cu built with g++, each launch's
blocks on threads) against the CPU tests' oracles: NumPy, central differences, onnxruntime. Each
test has a GPU twin (the same test through opc.compile(target="cuda")), skipped where there is no
CUDA device. nvcc compiles every module here without warnings."""

from __future__ import annotations

import gc
import glob
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import test_data_sizes as cpu
import test_unique_axis as axis_case
import test_value_sizes as values
from cuda_simulator import simulated
from onnx_helpers import helper, onnx, run_ort
from test_data_sizes_onnx import F32, nms_feeds, same, sparse
from test_dynamic_onnx import model as onnx_model

import opc
from opc.api import lower, prepare
from opc.frontend import load_module
from opc.lowering.build import runtime_dir
from opc.lowering.cuda_build import nvcc_path
from opc.lowering.cuda_emitter import emit_cuda

HERE = Path(__file__).parent
SOURCE = (HERE / "data_sizes.mlir").read_text()
GPU_NODES = sorted(glob.glob("/dev/nvidia[0-9]*"))
BACKENDS = ["simulator", "gpu"]

HEAD = """
func.func @head(%x: tensor<?xf32>, %k: tensor<i64>) -> tensor<?xf32> {
  %e = tensor.extract %k[] : tensor<i64>
  %n = arith.index_cast %e : i64 to index
  %r = tensor.extract_slice %x[0] [%n] [1] : tensor<?xf32> to tensor<?xf32>
  func.return %r : tensor<?xf32>
}
"""


def emitted(source: str, grad: bool = False) -> tuple[str, list]:
    return emit_cuda(lower(prepare(load_module(source), "cuda", grad), "cuda"))


def module(request, tmp_path_factory, source: str, grad: bool = False):
    """`source` compiled for CUDA on the backend the test is parametrized with: the simulator, or
    the GPU where there is one."""
    if request.param == "gpu":
        if not GPU_NODES:
            pytest.skip("no CUDA device (no /dev/nvidia[0-9]* device node): the simulator runs the same test")
        return opc.compile(source, target="cuda", grad=grad)
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH (it builds the CUDA simulation)")
    cu, sigs = emitted(source, grad)
    return simulated(cu, sigs, str(tmp_path_factory.mktemp("data-sizes-cuda")), "m", library=True)


@pytest.fixture(scope="module", params=BACKENDS)
def m(request, tmp_path_factory):
    return module(request, tmp_path_factory, SOURCE)


@pytest.fixture(scope="module", params=BACKENDS)
def g(request, tmp_path_factory):
    return module(request, tmp_path_factory, cpu.GRAD, grad=True)


@pytest.fixture(scope="module", params=BACKENDS)
def full_iota(request, tmp_path_factory):
    return module(request, tmp_path_factory, values.FULL_IOTA)


@pytest.fixture(scope="module", params=BACKENDS)
def head(request, tmp_path_factory):
    return module(request, tmp_path_factory, HEAD, grad=True)


@pytest.fixture(scope="module", params=BACKENDS)
def unique_axis(request, tmp_path_factory):
    return module(request, tmp_path_factory, "\n".join(axis_case.function(*case)[1] for case in axis_case.GRID))


# -- opc.nonzero, opc.topk, opc.unique: the CPU tests on CUDA --------------------------------------


@pytest.mark.parametrize("fill", cpu.FILLS)
@pytest.mark.parametrize("n", cpu.SIZES)
@pytest.mark.parametrize("name,dtype,shape", cpu.NONZERO, ids=[c[0] for c in cpu.NONZERO])
def test_nonzero(m, name, dtype, shape, n, fill):
    cpu.test_nonzero_matches_numpy(m, name, dtype, shape, n, fill)


@pytest.mark.parametrize("fill", cpu.FILLS)
def test_nonzero_of_a_static_operand(m, fill):
    cpu.test_nonzero_of_a_static_operand(m, fill)
    cpu.test_nan_and_negative_zero(m)


@pytest.mark.parametrize("fill", cpu.FILLS)
@pytest.mark.parametrize("n", cpu.SIZES)
def test_the_count_used_by_later_ops(m, n, fill):
    """A compress (nonzero, gather, tanh), a sum over a data-sized value and two results sharing
    one count, a nonzero of a data-sized value."""
    cpu.test_compress(m, n, fill)
    cpu.test_data_size_through_later_ops(m, n, fill)
    cpu.test_nonzero_of_a_data_sized_value(m, n)


def test_a_count_equated_with_an_argument_is_checked(m):
    cpu.test_count_equated_with_an_argument_is_checked(m)


@pytest.mark.parametrize("n", cpu.SIZES)
@pytest.mark.parametrize("name,dtype,shape,axis,largest,kshape", cpu.TOPK, ids=[c[0] for c in cpu.TOPK])
def test_topk_with_a_run_time_k(m, name, dtype, shape, axis, largest, kshape, n):
    cpu.test_topk_with_a_run_time_k(m, name, dtype, shape, axis, largest, kshape, n)


@pytest.mark.parametrize("k", [-1, 7])
def test_a_k_out_of_range_is_a_value_error(m, k):
    cpu.test_a_k_out_of_range_is_a_value_error(m, k)


@pytest.mark.parametrize("n", cpu.SIZES)
@pytest.mark.parametrize("name,dtype,is_sorted", [("unique_f64", np.float64, True),
                                                   ("unique_i8_unsorted", np.int8, False)])
def test_unique(m, name, dtype, is_sorted, n):
    cpu.test_unique(m, name, dtype, is_sorted, n)


@pytest.mark.parametrize("values", [[3] * 9, list(range(9)), [255, 0, 255, 7, 0, 0, 128, 7, 1]], ids=str)
def test_unique_of_a_static_operand(m, values):
    cpu.test_unique_of_a_static_operand(m, values)


@pytest.mark.parametrize("fill", axis_case.FILLS)
@pytest.mark.parametrize("rank,axis,is_sorted,dtype", axis_case.GRID,
                         ids=lambda v: np.dtype(v).name if isinstance(v, type) else str(v))
def test_unique_along_an_axis(unique_axis, rank, axis, is_sorted, dtype, fill):
    axis_case.test_unique_along_an_axis(unique_axis, rank, axis, is_sorted, dtype, fill)


@pytest.mark.parametrize("rank,axis,is_sorted", [(2, 0, True), (3, -1, False), (3, 1, True)])
def test_unique_with_nan_along_an_axis(unique_axis, rank, axis, is_sorted):
    axis_case.test_unique_of_no_slices(unique_axis)
    axis_case.test_nan_equals_nothing_and_sorts_last(unique_axis, rank, axis, is_sorted)


# -- gradients ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fill", cpu.FILLS)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_compress_gradient(g, n, fill):
    """Against central differences, each a call of the CUDA module; the vjp scatters dout back."""
    cpu.test_compress_gradient_matches_finite_differences(g, n, fill)
    cpu.test_compress_vjp_scatters_dout(g, n)


@pytest.mark.parametrize("k", [0, 1, 4, 6])
@pytest.mark.parametrize("n", [0, 1, 5])
def test_topk_gradient(g, n, k):
    cpu.test_topk_gradient_matches_finite_differences(g, n, k)


def test_a_vjp_with_a_dout_of_another_size(g):
    cpu.test_compress_vjp_with_a_dout_of_another_size(g)


COMPRESS_GEMM = """
func.func @f(%x: tensor<?x4xf32>, %c: tensor<?xi1>, %w: tensor<4x40xf32>) -> tensor<?x40xf32> {
  %nz = opc.nonzero %c : (tensor<?xi1>) -> tensor<1x?xi64>
  %i = opc.reshape %nz : (tensor<1x?xi64>) -> tensor<?xi64>
  %g = opc.gather %x, %i {axis = 0} : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %m = opc.matmul %g, %w : (tensor<?x4xf32>, tensor<4x40xf32>) -> tensor<?x40xf32>
  %s = opc.softmax %m {axis = -1} : (tensor<?x40xf32>) -> tensor<?x40xf32>
  func.return %s : tensor<?x40xf32>
}
"""


@pytest.fixture(scope="module", params=BACKENDS)
def compress_gemm(request, tmp_path_factory):
    return module(request, tmp_path_factory, COMPRESS_GEMM)


@pytest.mark.parametrize("n", [0, 1, 7, 50])
def test_the_count_sizes_a_gemm_and_a_row_kernel(compress_gemm, n):
    """The count (copied to the host) is the GEMM call's M and the softmax's row count. On the
    simulator the GEMM is cuda_sim_library.h's plain loop: the check covers the sizes it is given."""
    rng = np.random.default_rng(n)
    x, c, w = rng.standard_normal((n, 4)).astype(np.float32), rng.random(n) < 0.5, rng.standard_normal((4, 40))
    z = x[c].astype(np.float64) @ w
    e = np.exp(z - z.max(-1, keepdims=True))
    got = compress_gemm.f(x, c, w.astype(np.float32))
    assert got.shape == z.shape
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)


# -- a data size inside a branch ------------------------------------------------------------------


@pytest.fixture(scope="module", params=BACKENDS)
def branches(request, tmp_path_factory):
    return module(request, tmp_path_factory, cpu.BRANCHES)


def test_a_data_size_inside_a_branch(branches):
    """The nonzero in the then-branch's body function, called from the host's if."""
    x = np.array([0, 1, 2, 0, -3, 0], np.float32)
    assert branches.f(x, np.array(True)) == 0 and branches.f(np.abs(x), np.array(True)) == 6
    assert branches.f(x, np.array(False)) == 0 and branches.f(np.abs(x), np.array(False)) == 6


# -- sizes read from values: results the function allocates and hands out --------------------------


@pytest.mark.parametrize("n", [0, 1, 4, 1000])
def test_full_broadcast_iota_sized_by_a_value(full_iota, n):
    values.test_full_broadcast_iota_sized_by_a_value(full_iota, n)


def test_a_negative_value_size_is_a_value_error(full_iota):
    values.test_a_negative_value_size_is_a_value_error(full_iota)


def test_handed_results_outlive_the_call_and_are_freed(full_iota):
    """The host copy of a handed result lives with its array (opc_release frees it)."""
    s, _ = full_iota.f(np.array(5_000), np.ones(3, np.float32))
    tail = s[-2:]
    del s
    gc.collect()
    np.testing.assert_array_equal(tail, np.full((2, 3), 3.5, np.float32))
    for _ in range(20):
        full_iota.f(np.array(5_000), np.ones(3, np.float32))


@pytest.mark.parametrize("k", [0, 2, 6])
def test_a_slice_sized_by_a_value_and_its_gradient(head, k):
    """docs/shapes.md's `head`: x[:k] for a k read from a tensor, and its vjp (dout at the front)."""
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(head.head(x, np.array(k)), x[:k])
    assert head.head.sig.handed == [0]
    dout = np.arange(1, k + 1, dtype=np.float32)
    np.testing.assert_array_equal(head.head_grad(x, np.array(k), dout), np.concatenate([dout, np.zeros(6 - k)]))
    with pytest.raises(ValueError, match="dim 0 has size 9"):
        head.head(x, np.array(9))


# -- ONNX: NonZero, Compress, TopK, Unique, NonMaxSuppression, Range against onnxruntime ----------


@pytest.fixture(params=BACKENDS)
def onnx_run(request, tmp_path_factory):
    """model -> a function of the feeds giving the outputs, on the backend of the test."""
    def load(m):
        if request.param == "gpu":
            if not GPU_NODES:
                pytest.skip("no CUDA device (no /dev/nvidia[0-9]* device node): the simulator runs the same test")
            run = opc.load_onnx(m, target="cuda")
            return lambda feeds: run(**feeds)
        if shutil.which("g++") is None:
            pytest.skip("g++ not on PATH (it builds the CUDA simulation)")
        source, weights = opc.import_onnx(m)
        assert not weights
        cu, sigs = emitted(str(source))
        fn = getattr(simulated(cu, sigs, str(tmp_path_factory.mktemp("onnx-cuda")), "m", library=True), sigs[0].name)
        names = [name for name, _, _ in sigs[0].inputs]

        def call(feeds):
            out = fn(*(feeds[n] for n in names))
            return list(out) if isinstance(out, tuple) else [out]

        return call

    return load


def test_onnx_nonzero_and_compress(onnx_run):
    nz = onnx_model([helper.make_node("NonZero", ["x"], ["y"], name="nz")], [("x", F32, ["a", 4])], ["y"])
    run = onnx_run(nz)
    for n in (0, 1, 7):
        x = sparse((n, 4), np.float32, 0.4, n)
        same(run({"x": x})[0], run_ort(nz, {"x": x})[0])
    compress = onnx_model([helper.make_node("Compress", ["x", "c"], ["y"], name="c", axis=0)],
                          [("x", F32, ["b", 3]), ("c", onnx.TensorProto.BOOL, ["b"])], ["y"])
    run = onnx_run(compress)
    for n in (0, 1, 9):
        feeds = {"x": np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32),
                 "c": np.random.default_rng(n + 1).random(n) < 0.5}
        same(run(feeds)[0], run_ort(compress, feeds)[0])


@pytest.mark.parametrize("largest", [1, 0])
def test_onnx_topk(onnx_run, largest):
    m = onnx_model([helper.make_node("TopK", ["x", "k"], ["v", "i"], name="top", axis=1, largest=largest)],
                   [("x", F32, ["b", 5]), ("k", onnx.TensorProto.INT64, [1])], ["v", "i"])
    run = onnx_run(m)
    for b in (1, 4):
        x = np.random.default_rng(b).integers(0, 4, (b, 5)).astype(np.float32)  # ties: the lower index first
        for k in (0, 1, 2, 5):
            feeds = {"x": x, "k": np.array([k], np.int64)}
            for got, want in zip(run(feeds), run_ort(m, feeds)):
                same(got, want)


@pytest.mark.parametrize("is_sorted", [1, 0])
def test_onnx_unique(onnx_run, is_sorted):
    m = onnx_model([helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], name="u", sorted=is_sorted)],
                   [("x", F32, ["n"])], ["y", "first", "inverse", "counts"])
    run = onnx_run(m)
    for n in (1, 6, 25):
        x = np.random.default_rng(n).integers(-3, 4, n).astype(np.float32)
        for got, want in zip(run({"x": x}), run_ort(m, {"x": x})):
            same(got, want)


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("max_out,iou,score", [(3, 0.3, 0.0), (10, 0.5, 0.45), (0, 0.5, 0.0), (2, 0.0, 0.95)])
def test_onnx_non_max_suppression(onnx_run, center, max_out, iou, score):
    m = onnx_model([helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score"], ["sel"],
                                     name="nms", center_point_box=center)],
                   [("boxes", F32, ["b", "n", 4]), ("scores", F32, ["b", 2, "n"]),
                    ("max_out", onnx.TensorProto.INT64, [1]), ("iou", F32, [1]), ("score", F32, [1])], ["sel"])
    run = onnx_run(m)
    for seed, (b, n) in enumerate([(1, 8), (2, 5), (1, 1), (3, 12)]):
        feeds = {**nms_feeds(b, 2, n, center, seed), "max_out": np.array([max_out], np.int64),
                 "iou": np.array([iou], np.float32), "score": np.array([score], np.float32)}
        same(run(feeds)[0], run_ort(m, feeds)[0])


@pytest.mark.parametrize("dtype, elem", [(np.float32, onnx.TensorProto.FLOAT), (np.int64, onnx.TensorProto.INT64)])
def test_onnx_range_of_run_time_values(onnx_run, dtype, elem):
    """Range's length read from its three inputs: a size read from values, its result handed out."""
    m = values.range_model(elem)
    run = onnx_run(m)
    for start, limit, delta in ((0, 5, 1), (2, 11, 3), (10, 1, -2), (3, 3, 1), (5, 1, 1)):
        feeds = {"start": np.array(start, dtype), "limit": np.array(limit, dtype), "delta": np.array(delta, dtype)}
        (got,) = run(feeds)
        np.testing.assert_array_equal(got, np.arange(start, limit, delta, dtype=dtype))
        np.testing.assert_array_equal(got, run_ort(m, feeds)[0])


@pytest.mark.parametrize("stop_at", [None, 40.0])
def test_onnx_loop_scan_outputs_at_a_run_time_trip_count(onnx_run, stop_at):
    """A Loop's stacked rows, M read from a tensor (and, with stop_at, cut to the iterations its
    condition allowed): the stacked result is handed out."""
    sys.path.insert(0, str(HERE.parent / "control_flow"))  # its Loop model and NumPy loop
    from test_onnx_loop_scans import numpy_loop, scan_loop_model

    m = scan_loop_model(stop_at=stop_at)
    run = onnx_run(m)
    for trips in (0, 1, 5, 300, -2):
        feeds = {"M": np.array(trips, np.int64), "s0": np.arange(3, dtype=np.float32),
                 **({"c": np.array(True)} if stop_at else {})}
        got = run(feeds)
        for g, w, n in zip(got, run_ort(m, feeds), numpy_loop(trips, feeds["s0"], stop_at)):
            assert g.shape == w.shape == n.shape
            np.testing.assert_allclose(g, w, rtol=1e-6)
            np.testing.assert_allclose(g, n, rtol=1e-6)


# -- the emitted code -------------------------------------------------------------------------------


def nms_source() -> str:
    m = onnx_model([helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score"], ["sel"],
                                     name="nms")],
                   [("boxes", F32, ["b", "n", 4]), ("scores", F32, ["b", 2, "n"]),
                    ("max_out", onnx.TensorProto.INT64, [1]), ("iou", F32, [1]), ("score", F32, [1])], ["sel"])
    return str(opc.import_onnx(m)[0])


NVCC_CASES = {"data_sizes": lambda: emitted(SOURCE), "gradients": lambda: emitted(cpu.GRAD, grad=True),
              "value_sizes": lambda: emitted(values.FULL_IOTA + HEAD, grad=True),
              "branches": lambda: emitted(cpu.BRANCHES), "nms": lambda: emitted(nms_source())}


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("case", list(NVCC_CASES))
def test_nvcc_compiles_the_data_sized_code(tmp_path, case):
    cu, _ = NVCC_CASES[case]()
    (tmp_path / "m.cu").write_text(cu)
    nvcc = nvcc_path()
    assert nvcc is not None
    done = subprocess.run([nvcc, "-c", "-arch=sm_90", "-std=c++17", "-Werror", "all-warnings", "-I",
                           str(runtime_dir()), str(tmp_path / "m.cu"), "-o", str(tmp_path / "m.o")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning" not in (done.stdout + done.stderr).lower()


def test_the_count_goes_to_the_host_before_the_result_is_allocated():
    """nz_f32: the counting pass (a warp's reduction), its count copied back (8 bytes) before the
    fill pass is launched with it on one thread; the _host wrapper copies the found size back
    first and the result out at it."""
    cu, _ = emitted(SOURCE)
    fn = cu[cu.index('extern "C" int opc_fn_nz_f32('):]
    fn = fn[:fn.index("\n}\n")]
    count = "OPC_CHECK(cudaMemcpy(&count_6, opc_results + 0, sizeof count_6, cudaMemcpyDeviceToHost));"
    assert fn.index("opc_k_nz_f32_0<<<1, 32>>>(opc_n0, x_4, opc_results);") < fn.index(count) \
        < fn.index("opc_k_nz_f32_1<<<1, 1>>>(opc_n0, x_4, v_5, count_6, found_3);")
    host = cu[cu.index('extern "C" int opc_fn_nz_f32_host('):]
    assert host.index("cudaMemcpy(found_3, d_found_3, sizeof(int64_t) * 1,") \
        < host.index("cudaMemcpy(out0_2, d_out0_2, sizeof(int64_t) * 2 * (found_3[0]),")
    assert "cudaMalloc((void **)&d_out0_2, sizeof(int64_t) * opc_max1(2 * ((4*opc_n0))))" in host
