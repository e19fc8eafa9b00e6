"""Building emitted CUDA C with nvcc into a shared library, cached on disk by
content hash, and binding its host entry points to NumPy.

    compile_cuda(loops_module)            -> module of NumPy-callable functions
    write_cuda_module(loops, dir, name)   -> DIR/NAME.cu (+ libNAME.so, NAME.py)

The library is built for sm_90 with a compute_90 PTX fallback (nvcc -shared,
static cudart) and loaded through CFFI's ABI mode. Each function NAME calls
`opc_fn_NAME_host`, which copies the arrays to the GPU, runs the kernels and
copies the results back; a nonzero status is a cudaError_t and becomes a
RuntimeError carrying CUDA's own message. `lib.opc_fn_NAME` takes device pointers.

Without a CUDA device, `compile_cuda` raises RuntimeError("no CUDA device
found: ...") before building anything; the driver is asked through
libcuda.so.1, and the built library's cudaGetDeviceCount confirms it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from opc.errors import BuildError
from opc.lowering.abi import ENTRY_PREFIX, RELEASE_FN, FunctionSignature, c_symbol
from opc.lowering.binding import function_class
from opc.lowering.build import (
    MODULE_TEMPLATE_TAIL,
    CompiledFunction,
    CompiledModule,
    build_failure,
    built_once,
    cache_dir,
    cdef_for,
    content_key,
    keep_failed,
    python_names,
    runtime_dir,
    self_contained,
    status_cdef,
)
from opc.lowering.cuda_emitter import emit_cuda
from opc.lowering.dynamic_call import DynamicFunction

NVCC_FLAGS = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC",
              "-gencode", "arch=compute_90,code=sm_90", "-gencode", "arch=compute_90,code=compute_90"]  # fmt: skip
RUNTIME_HEADERS = ("opc_runtime.h", "opc_cuda_gemm.cuh", "opc_status.h", "opc_nn.cuh",
                   "opc_nn_attention.cuh", "opc_lowp.h")


def nvcc_path() -> str | None:
    return os.environ.get("OPC_NVCC") or shutil.which("nvcc")


@functools.cache
def nvcc_version(nvcc: str) -> str:
    try:
        return subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "unknown"


def cuda_key(source: str, cdef: str, nvcc: str) -> str:
    import cffi

    headers = [(runtime_dir() / header).read_bytes() for header in RUNTIME_HEADERS]
    return content_key(source, cdef, " ".join(NVCC_FLAGS), nvcc_version(nvcc), cffi.__version__, *headers)


def library_cdef(signatures: list[FunctionSignature]) -> str:
    """Device-pointer entry points, their _host wrappers, and the two CUDA helpers."""
    return "\n".join([cdef_for(signatures), cdef_for(signatures, "_host"),
                      "const char *opc_cuda_error_string(int code);",
                      "int opc_cuda_device_count(int *count);",
                      f"void {RELEASE_FN}(void *);"]) + status_cdef(signatures)


def build_cuda_library(source: str, signatures: list[FunctionSignature], cache: Path) -> Path:
    """The path of the built shared library; nvcc runs only on a cache miss."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise BuildError("nvcc is not on PATH: cannot build CUDA code (--emit cuda still prints the source)")
    target = cache / f"_opc_cuda_{cuda_key(source, library_cdef(signatures), nvcc)}.so"

    def build(tmp: Path) -> Path:
        cu, lib = tmp / "module.cu", tmp / "module.so"
        cu.write_text(source, encoding="utf-8")
        proc = subprocess.run([nvcc, *NVCC_FLAGS, "-I", str(runtime_dir()), "-o", str(lib), str(cu)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            log = f"{proc.stdout}{proc.stderr}"
            kept = keep_failed(cache, target.stem, {"module.cu": self_contained(source), "build.log": log})
            raise build_failure("nvcc", log, kept)
        return lib

    return built_once(target, "opc-cuda", build)


# ---------------------------------------------------------------------------
# Devices
# ---------------------------------------------------------------------------


def driver_device_count() -> tuple[int, str]:
    """(number of CUDA devices, why none) as the driver (libcuda.so.1) reports it."""
    try:
        drv = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0, "the CUDA driver (libcuda.so.1) is not installed"

    def why(rc: int, call: str) -> str:
        msg = ctypes.c_char_p()
        drv.cuGetErrorString(rc, ctypes.byref(msg))
        return f"{call} failed: {msg.value.decode() if msg.value else 'error'} (CUresult {rc})"

    rc = drv.cuInit(0)
    if rc != 0:
        return 0, why(rc, "cuInit")
    count = ctypes.c_int(0)
    rc = drv.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0:
        return 0, why(rc, "cuDeviceGetCount")
    return count.value, "" if count.value else "the CUDA driver reports no devices"


def has_cuda_device() -> bool:
    return driver_device_count()[0] > 0


def require_cuda_device() -> None:
    count, why = driver_device_count()
    if count == 0:
        raise RuntimeError(f"no CUDA device found: {why}; target 'cuda' needs an NVIDIA GPU "
                           "(use target='cpu', or `opc compile --target cuda -o DIR` to only write and build the code)")


def runtime_device_check(ffi, lib) -> None:
    count = ffi.new("int *")
    rc = lib.opc_cuda_device_count(count)
    if rc != 0 or count[0] == 0:
        msg = ffi.string(lib.opc_cuda_error_string(rc)).decode() if rc else "cudaGetDeviceCount reports 0 devices"
        raise RuntimeError(f"no CUDA device found: {msg} (cudaError {rc})")


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def checked_host_call(ffi, lib, name: str):
    """opc_fn_NAME_host, with a CUDA error (status > 0) raised as RuntimeError with CUDA's message;
    a failed run-time check (status < 0) is returned for CompiledFunction to raise."""
    cfunc = getattr(lib, f"{ENTRY_PREFIX}{c_symbol(name)}_host")

    def call(*ptrs) -> int:
        status = cfunc(*ptrs)
        if status > 0:
            msg = ffi.string(lib.opc_cuda_error_string(status)).decode()
            raise RuntimeError(f"{name}(): CUDA error {status}: {msg}")
        return status

    return call


class CudaModule(CompiledModule):
    """Like CompiledModule; `lib` holds the device-pointer entry points opc_fn_NAME."""

    def __init__(self, functions: dict[str, CompiledFunction], source: str, path: Path, ffi, lib):
        super().__init__(functions, source, path)
        self.cuda_source, self.ffi, self.lib = source, ffi, lib


def load_cuda_library(path: str | os.PathLike[str], signatures: list[FunctionSignature], source: str = "",
                      require_device: bool = True) -> CudaModule:
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(library_cdef(signatures))
    lib = ffi.dlopen(str(path))
    if require_device:
        runtime_device_check(ffi, lib)
    detail = getattr(lib, "opc_error_value") if any(s.errors for s in signatures) else None
    # a function with run-time sizes binds them from its arguments' shapes (DynamicFunction), as on the CPU
    functions = {s.name: function_class(s)(ffi, checked_host_call(ffi, lib, s.name), s, detail=detail)
                 for s in signatures}
    for f in functions.values():
        if isinstance(f, DynamicFunction):  # frees the host copies of handed results (the _host wrapper's malloc)
            f.release = getattr(lib, RELEASE_FN)
    return CudaModule(functions, source, Path(path), ffi, lib)


def compile_cuda(loops: ModuleOp, cache: str | None = None, require_device: bool = True) -> CudaModule:
    """`opc.compile(src, target="cuda")`: built (cached) and loaded; needs a CUDA device."""
    if require_device:
        require_cuda_device()
    source, sigs = emit_cuda(loops)
    path = build_cuda_library(source, sigs, cache_dir(cache))
    return load_cuda_library(path, sigs, source, require_device)


MODULE_TEMPLATE = '''"""{name}: compiled by opc for CUDA from {origin}. Import it on a machine with an
NVIDIA GPU; call its functions with NumPy arrays (copied to and from the GPU)."""

import os as _os

from opc.lowering.abi import FunctionSignature as _Sig
from opc.lowering.cuda_build import load_cuda_library as _load

_SIGNATURES = {signatures!r}
_MODULE = _load(_os.path.join(_os.path.dirname(__file__), {lib_file!r}), [_Sig(*s) for s in _SIGNATURES])
globals().update(_MODULE._functions)
lib = _MODULE.lib  # opc_fn_NAME(device pointers...)
''' + MODULE_TEMPLATE_TAIL


def write_cuda_module(loops: ModuleOp, out_dir: str, name: str, origin: str) -> list[str]:
    """DIR/NAME.cu and the headers it includes; with nvcc, DIR/libNAME.so and an importable DIR/NAME.py.

    The library is not called NAME.so: Python would try to import that as an extension module."""
    from opc.autodiff import no_grad_reasons

    source, sigs = emit_cuda(loops)
    os.makedirs(out_dir, exist_ok=True)
    cu_path = os.path.join(out_dir, f"{name}.cu")
    with open(cu_path, "w", encoding="utf-8") as f:
        f.write(source)
    written = [cu_path]
    for header in RUNTIME_HEADERS:  # so that `nvcc -c DIR/NAME.cu` works on its own
        dst = os.path.join(out_dir, header)
        shutil.copy2(runtime_dir() / header, dst)
        written.append(dst)
    if nvcc_path() is None:
        print(f"note: nvcc is not on PATH: wrote the CUDA source only; build it with\n"
              f"  nvcc {' '.join(NVCC_FLAGS)} -o {os.path.join(out_dir, f'lib{name}.so')} {cu_path}", file=sys.stderr)
        return written
    built = build_cuda_library(source, sigs, cache_dir(None))
    lib_file = f"lib{name}.so"
    shutil.copy2(built, os.path.join(out_dir, lib_file))
    py_path = os.path.join(out_dir, f"{name}.py")
    signatures = [(s.name, s.inputs, s.outputs, s.errors, s.sizes, s.checks, s.found, s.handed, s.derived)
                  for s in sigs]
    with open(py_path, "w", encoding="utf-8") as f:
        f.write(MODULE_TEMPLATE.format(name=name, origin=os.path.basename(origin), signatures=signatures,
                                       lib_file=lib_file, names=python_names(sigs),
                                       no_grad=no_grad_reasons(loops)))
    return [*written, os.path.join(out_dir, lib_file), py_path]
