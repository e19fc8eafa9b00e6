"""The emitted CUDA run on the CPU: a module's .cu built with g++ against tests/support/cuda_sim.h, so
that the kernels' indexing, team reductions and barriers are checked without a GPU."""

import os
import re
import shutil
import subprocess

from opc.lowering.build import runtime_dir

SIM_DROPS = ("#include <cuda_runtime.h>", "#include <cuda_fp16.h>", "#include <cuda_bf16.h>",
             '#include "opc_cuda_gemm.cuh"', '#include "opc_nn.cuh"')


def simulated(cu: str, sigs, tmp: str, name: str):
    """The emitted .cu built with g++ against cuda_sim.h: every launch runs its blocks on
    std::threads, with real barriers for __syncthreads and the shuffles."""
    from opc.lowering.cuda_build import load_cuda_library

    text = "\n".join(['#include "cuda_sim.h"', *(ln for ln in cu.splitlines() if ln.strip() not in SIM_DROPS)])
    text = re.sub(r"(\w+)<<<(\d+), (\d+)>>>\(([^;]*)\);", r"opc_sim_launch(\2, \3, [&] { \1(\4); });", text)
    src, lib = os.path.join(tmp, f"{name}.cpp"), os.path.join(tmp, f"lib{name}.so")
    with open(src, "w", encoding="utf-8") as f:
        f.write(text)
    cmd = [shutil.which("g++") or "g++", "-std=c++17", "-O1", "-shared", "-fPIC", "-pthread", "-w",
           "-I", str(runtime_dir()), "-I", os.path.dirname(os.path.abspath(__file__)), "-o", lib, src]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return load_cuda_library(lib, sigs, cu, require_device=False)
