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


def nn_kernels() -> str:
    """runtime/opc_nn.cuh with opc_nn_attention.cuh, as the simulation builds them: the real kernels
    of the runtime nn calls, their launches run by opc_sim_launch (as tests/ops/test_attention.py and
    test_conv.py build their sections)."""
    text = (runtime_dir() / "opc_nn.cuh").read_text()
    text = text.replace('#include "opc_nn_attention.cuh"', (runtime_dir() / "opc_nn_attention.cuh").read_text())
    for inc in (*SIM_DROPS, '#include "opc_runtime.h"'):
        text = text.replace(inc, "")
    text = re.sub(r"([\w:]+<[\w, ]+>)<<<([^;]*?), ([^;]*?)>>>\(([^;]*)\);",
                  r"opc_sim_launch(\2, \3, [&] { \1(\4); });", text)
    return NN_STUBS + text


NN_STUBS = """#define __device__
#define __forceinline__ inline
#include "opc_runtime.h"
struct __half { uint16_t x; };
struct __nv_bfloat16 { uint16_t x; };
static inline __half __ushort_as_half(uint16_t v) { return __half{v}; }
static inline float __half2float(__half h) { return opc_f16_to_f32(h.x); }
static inline __nv_bfloat16 __ushort_as_bfloat16(uint16_t v) { return __nv_bfloat16{v}; }
static inline float __bfloat162float(__nv_bfloat16 h) { return opc_bf16_to_f32(h.x); }
"""


def simulated(cu: str, sigs, tmp: str, name: str, library: bool = False):
    """The emitted .cu built with g++ against cuda_sim.h: every launch runs its blocks on
    std::threads, with real barriers for __syncthreads and the shuffles. With `library`, the
    runtime nn calls run runtime/opc_nn.cuh's own kernels in the simulation, and the GEMM calls
    cuda_sim_library.h's plain loops (its tiled kernel's 2-D grid is not emulated): the GEMM's
    numbers are the stand-in's, its arguments the emitted code's."""
    from opc.lowering.cuda_build import load_cuda_library

    head = ['#include "cuda_sim.h"', *(['#include "cuda_sim_library.h"', nn_kernels()] if library else [])]
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
