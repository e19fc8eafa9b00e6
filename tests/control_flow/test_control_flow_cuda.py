"""Control flow on the CUDA target: the C if / switch / for / while run on the host around the bodies'
kernel launches, a condition or bound copied back from the device. Here: the emitted .cu of each
program (and of their gradients: the saved loop values copied to the host stack) compiles with
nvcc without warnings. Running them needs a GPU (tests/lowering/test_cuda.py's machinery)."""

from __future__ import annotations

import os
import subprocess
import tempfile

import pytest
from cf_programs import FOR, IF, IF_IN_LOOP, LOOP_IN_IF, NESTED, WHILE
from nvcc_check import nvcc_command
from test_control_flow_grad import FOR64, WHILE64
from test_index_switch import SWITCH
from test_loop_stack_memory import with_while_checkpoint

from opc.api import emit
from opc.frontend import load_module
from opc.lowering.cuda_build import nvcc_path

CASES = {"if": (IF, False), "for": (FOR, False), "while": (WHILE, False), "nested": (NESTED, False),
         "loop_in_if": (LOOP_IN_IF, False), "if_in_loop": (IF_IN_LOOP, True), "for_grad": (FOR64, True),
         "while_grad": (WHILE64, True), "switch_grad": (SWITCH, True),
         "checkpointed_while_grad": (with_while_checkpoint(WHILE64, 3), True)}


def cuda_source(src: str, grad: bool) -> str:
    return emit(load_module(src), "cuda", grad=grad)


@pytest.mark.parametrize("case", list(CASES))
def test_loop_runs_on_the_host(case):
    """The host function calls each body from a C loop; no kernel holds the control flow."""
    src, grad = CASES[case]
    cu = cuda_source(src, grad)
    host = cu[cu.index('extern "C" int opc_fn_f('):]
    assert "cudaMemcpy" in host  # a condition, a bound or an index crosses between host and device
    assert any(k in host for k in ("for (int64_t", "for (;;)", "if (", "switch ("))
    assert "__global__" not in host[:host.index("cleanup:")]


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not on PATH")
def test_emitted_cuda_compiles_without_warnings():
    tmp = tempfile.mkdtemp(prefix="opc-cf-nvcc-")
    procs = {}
    for name, (src, grad) in CASES.items():
        cu = os.path.join(tmp, f"{name}.cu")
        with open(cu, "w", encoding="utf-8") as f:
            f.write(cuda_source(src, grad))
        cmd = nvcc_command(cu, os.path.join(tmp, f"{name}.o"))
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for name, p in procs.items():
        out = p.communicate()[0]
        assert p.returncode == 0 and "warning" not in out.lower(), (name, out[-3000:])
