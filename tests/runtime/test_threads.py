"""opc's own thread count (opc/threads.py, runtime/opc_threads.h): set_num_threads and
OPC_NUM_THREADS reach every module's parallel regions whatever omp_set_num_threads (torch's
set_num_threads) says, and opc's import sets libgomp's wait policy only where nobody chose one."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import opc
from opc import threads
from opc.errors import InputError
from opc.lowering.build import BASE_FLAGS, native_flags, runtime_dir

PROBE = r"""
#include <stdio.h>
#include <omp.h>
#include "opc_threads.h"
int main(void) {
    omp_set_dynamic(0);
    omp_set_num_threads(1);               /* what torch.set_num_threads(1) does to a shared libgomp */
    opc_rt_threads = 3;                   /* what opc.set_num_threads(3) does to a module */
    int seen = 0;
    #pragma omp parallel num_threads(opc_num_threads())
    {
        #pragma omp single
        seen = omp_get_num_threads();
    }
    opc_rt_threads = 0;                   /* never set: OpenMP's own count */
    int fallback = opc_num_threads();
    printf("%d %d\n", seen, fallback);
    return 0;
}
"""


def test_regions_follow_opc_count_not_omp_set_num_threads(tmp_path):
    src, exe = tmp_path / "probe.c", tmp_path / "probe"
    src.write_text(PROBE)
    subprocess.run([os.environ.get("CC", "gcc"), *BASE_FLAGS, *native_flags(), "-I", str(runtime_dir()), str(src),
                    "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["3", "1"]


REGION_MIN = r"""
#include <stdio.h>
#include "opc_threads.h"
int main(void) { printf("%lld\n", opc_par_min(1000)); return 0; }
"""


@pytest.mark.parametrize("policy,spin,want", [
    ("passive", None, 1000 * 16), ("PASSIVE", "1000", 1000 * 16), ("active", None, 1000), ("active", "1000", 1000),
    (None, None, 1000), (None, "1000", 1000 * 4), (None, "0", 1000 * 4), (None, "100000", 1000), (None, "1k", 1000),
])  # fmt: skip
def test_a_region_needs_more_work_where_idle_threads_sleep(tmp_path, policy, spin, want):
    """Under OMP_WAIT_POLICY=passive each region pays the threads' wake-up: opc_par_min scales
    every kernel's least work by OPC_PASSIVE_SCALE; under a short GOMP_SPINCOUNT a region after
    serial kernels pays it: OPC_SHORT_SPIN_SCALE; threads that spin long (opc's default on an idle
    machine, 100,000 rounds; libgomp's default; active) need no scale."""
    src, exe = tmp_path / "probe.c", tmp_path / "probe"
    src.write_text(REGION_MIN)
    subprocess.run([os.environ.get("CC", "gcc"), *BASE_FLAGS, *native_flags(), "-I", str(runtime_dir()), str(src),
                    "-o", str(exe)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    for var, value in (("OMP_WAIT_POLICY", policy), ("GOMP_SPINCOUNT", spin)):
        if value is not None:
            env[var] = value
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True, env=env).stdout.split()
    assert out == [str(want)]


def test_set_num_threads_reaches_loaded_modules(monkeypatch):
    seen: dict[str, int] = {}
    monkeypatch.setattr(threads, "_setters", {})
    monkeypatch.setattr(threads, "_count", None)
    monkeypatch.setenv("OPC_NUM_THREADS", "2")
    threads.register("a", lambda n: seen.__setitem__("a", n))
    assert seen == {"a": 2} and opc.get_num_threads() == 2
    opc.set_num_threads(1)
    threads.register("b", lambda n: seen.__setitem__("b", n))
    assert seen == {"a": 1, "b": 1} and opc.get_num_threads() == 1


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "2"])
def test_set_num_threads_rejects(n):
    with pytest.raises(ValueError, match="set_num_threads: n must be a positive int"):
        opc.set_num_threads(n)


@pytest.mark.parametrize("env,want", [({"OPC_NUM_THREADS": "3", "OMP_NUM_THREADS": "1"}, 3),
                                      ({"OMP_NUM_THREADS": "2,1"}, 2)])
def test_default_count_from_environment(monkeypatch, env, want):
    monkeypatch.delenv("OPC_NUM_THREADS", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert threads.default_num_threads() == want


def test_bad_environment_count(monkeypatch):
    monkeypatch.setenv("OPC_NUM_THREADS", "many")
    with pytest.raises(InputError, match="^OPC_NUM_THREADS must be a positive integer, got 'many'"):
        threads.default_num_threads()


# the load average and the running count as the case wants them (the test machine's own vary): a
# load of 1e6 with one other thread running (busy), 0.0 with none (idle); then opc
LOAD = ("import builtins, io, os; os.getloadavg = lambda: ({load}, 0.0, 0.0); real_open = builtins.open; "
        "builtins.open = lambda p, *a, **k: io.StringIO('0 0 0 ' + ('1' if {load} == 0 else '2') + '/300 1') "
        "if p == '/proc/loadavg' else real_open(p, *a, **k); ")
WAIT = LOAD + "import opc; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))"


@pytest.mark.parametrize("busy,want", [(False, {"GOMP_SPINCOUNT": "100000"}), (True, {"OMP_WAIT_POLICY": "passive"})])
def test_wait_policy_by_load(monkeypatch, busy, want):
    """A short spin on an idle machine, passive threads on a busy one (the choice itself; the
    subprocess cases below pin what `import opc` does with the environment)."""
    for var in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPC_WAIT_POLICY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(threads, "libgomp_loaded", lambda: False)
    monkeypatch.setattr(threads, "busy", lambda: busy)
    threads.apply_wait_policy()
    assert {k: os.environ.get(k) for k in want} == want
    assert [v for v in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if v not in want and v in os.environ] == []


def fake_machine(monkeypatch, load: float, running: str, cores: int) -> None:
    """/proc/loadavg, os.getloadavg and the core count as a case wants them."""
    real_open = open

    def fake_open(path, *a, **k):  # noqa: ANN001, ANN002, ANN003
        if path == "/proc/loadavg":
            import io
            return io.StringIO(f"{load} 0.40 0.30 {running} 12345\n")
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", fake_open)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
    monkeypatch.setattr(os, "cpu_count", lambda: cores)


@pytest.mark.parametrize("running,cores,want", [("1/300", 2, False), ("3/300", 2, True), ("2/300", 2, False),
                                                ("5/300", 4, True), ("x", 2, False)])
def test_busy_reads_the_running_count(monkeypatch, running, cores, want):
    """Under a low load average: busy exactly where every core has another runnable thread now."""
    fake_machine(monkeypatch, 0.5, running, cores)
    assert threads.busy() is want


@pytest.mark.parametrize("load,running,cores,want", [
    (2.0, "1/300", 2, False),  # the last minute's load, nothing else running now: a process of ours that ended
    (2.0, "2/300", 2, True), (0.5, "3/300", 2, True), (0.5, "2/300", 2, False), (3.9, "2/300", 4, False),
    (1e6, "x", 2, False),
])  # fmt: skip
def test_busy_needs_other_threads_running_now(monkeypatch, load, running, cores, want):
    """Busy: every core has another runnable thread now, or the last minute's load average says so and
    another thread runs now. The load average alone lags: after a 2-thread benchmark process on 2 cores
    it read 2.0 and the next process chose passive threads (round 17: ResNet-18 at 2 threads 1.5 -> 2.4 ms)."""
    fake_machine(monkeypatch, load, running, cores)
    assert threads.busy() is want


@pytest.mark.parametrize("env,load,want", [
    ({}, "1e6", "passive None"),
    ({"OMP_WAIT_POLICY": "active"}, "0.0", "active None"), ({"GOMP_SPINCOUNT": "7"}, "1e6", "None 7"),
    ({"OPC_WAIT_POLICY": "libgomp"}, "0.0", "None None"), ({"OPC_WAIT_POLICY": "passive"}, "0.0", "passive None"),
    ({"OPC_WAIT_POLICY": "spin"}, "1e6", "None 100000"),
])  # fmt: skip
def test_wait_policy_only_where_unset(env, load, want):
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPC_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c", WAIT.format(load=load)], env={**base, **env}, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split() == want.split() and out.stderr == ""


def test_unknown_wait_policy_warns_and_is_ignored():
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPC_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-W", "default", "-c", WAIT.format(load="1e6")],
                         env={**base, "OPC_WAIT_POLICY": "fast"}, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["passive", "None"]
    assert out.stderr == "<string>:1: RuntimeWarning: opc: OPC_WAIT_POLICY must be spin, passive or libgomp, " \
        "got 'fast': ignored\n", out.stderr


# the load as LOAD sets it, then torch before opc
TORCH_FIRST = LOAD + "import torch, opc"


@pytest.mark.parametrize("env,load,warns", [
    ({}, "1e6", True), ({}, "0.0", False), ({"OMP_WAIT_POLICY": "passive"}, "1e6", False),
    ({"OPC_WAIT_POLICY": "libgomp"}, "1e6", False), ({"OPC_NUM_THREADS": "1"}, "1e6", False),
])  # fmt: skip
def test_warns_when_torch_loaded_libgomp_first(env, load, warns):
    """torch's libgomp, loaded before opc chose a policy, spins: on an idle machine (the common
    case) that costs nothing and opc is quiet; on a busy one it says what to do, in one line, where
    it runs threads."""
    pytest.importorskip("torch", reason="the case needs torch's libgomp loaded before opc")
    drop = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPC_WAIT_POLICY", "OPC_NUM_THREADS", "OMP_NUM_THREADS")
    base = {k: v for k, v in os.environ.items() if k not in drop}
    out = subprocess.run([sys.executable, "-W", "default", "-c", TORCH_FIRST.format(load=load)],
                         env={**base, "OPC_NUM_THREADS": "2", **env}, capture_output=True, text=True, check=True)
    if warns:
        assert out.stderr == "<string>:1: RuntimeWarning: opc: OpenMP was loaded before opc (torch imported first?) " \
            "and its idle threads spin, slow on this busy machine: set OMP_WAIT_POLICY=passive before importing " \
            "torch\n", out.stderr
    else:
        assert out.stderr == "", out.stderr


def at_counts(fn, counts=(1, 2, 3)):
    """fn's outputs at each of opc's thread counts, twice each (the pieces of a parallel loop go to
    whichever thread claims them first, so two calls at one count split the work differently)."""
    before = opc.get_num_threads()
    try:
        out = []
        for n in counts:
            opc.set_num_threads(n)
            out += [fn(), fn()]
        return out
    finally:
        opc.set_num_threads(before)


def assert_bitwise_same(outs):
    for got in outs[1:]:
        for g, w in zip(got, outs[0]):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("m,k,n", [(300, 500, 300), (37, 64, 700), (900, 96, 40)])
def test_numbers_at_each_count(m, k, n):
    """A flat parallel loop (1-D erf, a remainder past the vector width), a parallel loop nest and
    a GEMM split by rows or columns give NumPy's numbers, and the same bits at 1, 2 and 3 threads."""
    length = m * k
    a_t, b_t = f"tensor<{m}x{k}xf32>", f"tensor<{k}x{n}xf32>"
    m_ = opc.compile(f"func.func @f(%flat: tensor<{length}xf32>, %a: {a_t}, %b: {b_t}) -> "
                     f"(tensor<{length}xf32>, tensor<{m}x{n}xf32>) {{\n"
                     f"  %ef = opc.erf %flat : (tensor<{length}xf32>) -> tensor<{length}xf32>\n"
                     f"  %e = opc.erf %a : ({a_t}) -> {a_t}\n"
                     f"  %c = opc.matmul %e, %b : ({a_t}, {b_t}) -> tensor<{m}x{n}xf32>\n"
                     f"  func.return %ef, %c : tensor<{length}xf32>, tensor<{m}x{n}xf32>\n}}\n")
    from scipy.special import erf

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    outs = at_counts(lambda: m_.f(a.reshape(-1), a, b))
    np.testing.assert_allclose(outs[0][0], erf(a.reshape(-1).astype(np.float64)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[0][1], erf(a.astype(np.float64)) @ b, rtol=1e-4, atol=1e-4)
    assert_bitwise_same(outs)


def test_transformer_block_bits_at_each_count():
    """Every kind of parallel region of a model (GEMMs with bias, the attention kernel, layer
    norms, the GELU loop, transposes, their gradients) gives the same bits at 1, 2 and 3 threads;
    the forward agrees with the float64 NumPy block."""
    from onnx_helpers import EXAMPLES

    assert EXAMPLES.is_dir()
    from zoo import common, transformer_block

    s = transformer_block.Sizes(batch=2, seq=64, width=64, heads=2, mlp=256)
    model = transformer_block.build(s, np.float32, opset=17, seed=0)
    module, params = opc.import_onnx(model)
    m = opc.compile(module, grad=True)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((s.batch, s.seq, s.width)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    w = list(params.values())
    outs = at_counts(lambda: [m.main_graph(x, *w), *m.main_graph_value_and_grad(x, *w, dy)])
    want = transformer_block.reference({"x": x}, common.weights(model), s)
    np.testing.assert_allclose(outs[0][0], want, rtol=1e-4, atol=1e-4)
    assert_bitwise_same(outs)
