"""The emitted CUDA run on the CPU: a module's .cu built with g++ against tests/support/cuda_sim.h, so
that the kernels' indexing, team reductions and barriers are checked without a GPU."""

import os
import re
import shutil
import subprocess

from opc.lowering.build import runtime_dir

SIM_DROPS = ("#include <cuda_runtime.h>", "#include <cuda_fp16.h>", "#include <cuda_bf16.h>",
             '#include "opc_cuda_gemm.cuh"', '#include "opc_nn.cuh"')


# kernel<<<blocks, threads>>>(args); blocks a number or, with run-time sizes, the host variable holding it
LAUNCH = re.compile(r"(\w+)<<<(\w+), (\d+)>>>\(([^;]*)\);")


def simulated(cu: str, sigs, tmp: str, name: str, library: bool = False):
    """The emitted .cu built with g++ against cuda_sim.h: every launch runs its blocks on
    std::threads, with real barriers for __syncthreads and the shuffles. With `library`, the
    runtime GEMM and nn calls go to cuda_sim_library.h's plain loops (cuda_sim.h emulates
    neither): their numbers are the stand-ins', their arguments the emitted code's."""
    from opc.lowering.cuda_build import load_cuda_library

    head = ['#include "cuda_sim.h"', *(['#include "cuda_sim_library.h"'] if library else [])]
    text = "\n".join([*head, *(ln for ln in cu.splitlines() if ln.strip() not in SIM_DROPS)])
    text = LAUNCH.sub(r"opc_sim_launch(\2, \3, [&] { \1(\4); });", text)
    src, lib = os.path.join(tmp, f"{name}.cpp"), os.path.join(tmp, f"lib{name}.so")
    with open(src, "w", encoding="utf-8") as f:
        f.write(text)
    cmd = [shutil.which("g++") or "g++", "-std=c++17", "-O1", "-shared", "-fPIC", "-pthread", "-w",
           "-I", str(runtime_dir()), "-I", os.path.dirname(os.path.abspath(__file__)), "-o", lib, src]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return load_cuda_library(lib, sigs, cu, require_device=False)
