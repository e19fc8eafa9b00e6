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
    with pytest.raises(opc.OpcError, match="error: OPC_NUM_THREADS must be a positive integer, got 'many'"):
        threads.default_num_threads()


WAIT = "import os, opc; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))"


@pytest.mark.parametrize("env,want", [({}, "passive None"), ({"OMP_WAIT_POLICY": "active"}, "active None"),
                                      ({"GOMP_SPINCOUNT": "1000"}, "None 1000"),
                                      ({"OPC_WAIT_POLICY": "libgomp"}, "None None")])
def test_wait_policy_only_where_unset(env, want):
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPC_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c", WAIT], env={**base, **env}, capture_output=True, text=True, check=True)
    assert out.stdout.split() == want.split()


def test_numbers_at_each_count():
    """A parallel kernel and a GEMM give NumPy's numbers at 1 and 2 threads."""
    t = "tensor<300x500xf32>"
    m = opc.compile(f"func.func @f(%a: {t}, %b: tensor<500x300xf32>) -> tensor<300x300xf32> {{\n"
                    f"  %e = opc.erf %a : ({t}) -> {t}\n"
                    f"  %c = opc.matmul %e, %b : ({t}, tensor<500x300xf32>) -> tensor<300x300xf32>\n"
                    f"  func.return %c : tensor<300x300xf32>\n}}\n")
    from scipy.special import erf

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((300, 500), np.float32), rng.standard_normal((500, 300), np.float32)
    want = erf(a.astype(np.float64)) @ b
    before = opc.get_num_threads()
    try:
        for n in (1, 2):
            opc.set_num_threads(n)
            np.testing.assert_allclose(m.f(a, b), want, rtol=1e-4, atol=1e-4)
    finally:
        opc.set_num_threads(before)
