"""tensor.extract_slice / insert_slice, opc.iota and loops over `?` dims on the CUDA target: the
emitted .cu built with g++ on tests/support/cuda_sim.h (each launch's blocks on threads) against
the same NumPy and central-difference oracles as the CPU tests (test_slices.py, test_iota.py);
the bound checks run on the host, before any kernel reads the slice. On a GPU the same functions
run through opc.compile(target="cuda")."""

from __future__ import annotations

import glob
import shutil

import numpy as np
import pytest
import test_iota as iota
import test_slices as cpu
from cuda_simulator import simulated
from nvcc_check import assert_nvcc_compiles

import opc
from opc.api import lower, prepare
from opc.frontend import load_module
from opc.lowering.cuda_build import nvcc_path
from opc.lowering.cuda_emitter import emit_cuda

GPU_NODES = sorted(glob.glob("/dev/nvidia[0-9]*"))
SOURCE = (cpu.window("?", "f64").replace("@f(", "@window(") + cpu.INNER.replace("@f(", "@inner(")
          + cpu.recurrence("f64", "?").replace("@f(", "@loop(") + cpu.GROW
          + iota.program("f32").replace("@f(", "@iota("))


def built(tmp_path_factory, grad: bool):  # noqa: ANN001, ANN201
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH (it builds the CUDA simulation)")
    cu, sigs = emit_cuda(lower(prepare(load_module(SOURCE), "cuda", grad), "cuda"))
    return simulated(cu, sigs, str(tmp_path_factory.mktemp("slices-cuda")), "slices", library=True)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    return built(tmp_path_factory, grad=True)


@pytest.fixture(scope="module")
def gpu():
    if not GPU_NODES:
        pytest.skip("no CUDA device (no /dev/nvidia[0-9]* device node): the simulator tests cover the kernels")
    return opc.compile(SOURCE, target="cuda", grad=True)


def check_all(m) -> None:  # noqa: ANN001
    rng = np.random.default_rng(0)
    for off in (0, 4):
        x = rng.standard_normal((6, 4))
        np.testing.assert_allclose(m.window(x, np.array(off)), np.tanh(x[off:off + 2, 1:4]), rtol=1e-12)
    with pytest.raises(ValueError, match="tensor.extract_slice: dim 0 has offset 5"):
        m.window(np.zeros((6, 4)), np.array(5))
    for n in (2, 7):
        x = rng.standard_normal((n, 3))
        t, z = m.inner(x)
        np.testing.assert_allclose(t, np.sin(x[1:n - 1]))
        cpu.check_grad(m.inner, m.inner_grad, [x], rng)
    for n in (0, 1, 6):
        x, h = rng.standard_normal((n, 4)), rng.standard_normal(4)
        for got, want in zip(m.loop(x, h), cpu.recurrence_ref(x, h)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    x, h = rng.standard_normal((5, 4)), rng.standard_normal(4)
    cpu.check_grad(m.loop, m.loop_grad, [x, h], rng)
    args = [rng.standard_normal((2, 3, 3)), rng.standard_normal((2, 1, 3)), rng.standard_normal((2, 2, 3))]
    cpu.check_grad(m.grow, m.grow_grad, args, rng)
    a, b, d = m.iota(np.ones((4, 3), np.float32))
    np.testing.assert_array_equal(a, np.arange(5, dtype=np.float32))


def test_on_the_simulator(sim):
    check_all(sim)


def test_on_a_gpu(gpu):
    check_all(gpu)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not on PATH")
def test_nvcc_compiles_it(tmp_path):
    """The .cu of the slices, loops and iota, gradients included, without a warning."""
    cu, _ = emit_cuda(lower(prepare(load_module(SOURCE), "cuda", True), "cuda"))
    assert_nvcc_compiles(tmp_path, "slices", cu)
