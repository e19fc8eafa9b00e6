"""Building a device's own kernels: each `[external.OP]` source compiled once per content
(and toolchain) into an object that the modules calling it link, under the same build lock
as opc's runtime objects."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from opc.errors import BuildError
from opc.lowering.build import (
    built_once,
    compile_flags,
    compiler_version,
    content_key,
    runtime_digest,
    runtime_dir,
)
from opc.targets.device_kernels import ExternalKernel


def kernel_objects(kernels: tuple[ExternalKernel, ...], symbols: set[str], cache: Path) -> list[Path]:
    """Objects of the kernels whose symbols a module calls, each built once per content."""
    return [kernel_object(k, cache) for k in kernels if k.symbol in symbols]


def kernel_object(kernel: ExternalKernel, cache: Path) -> Path:
    """The kernel's source compiled with the ABI's prototype force-included first, so that a
    definition with another signature is a compile error; then its symbol looked up."""
    src = Path(kernel.source)
    prototype = f'#include "opc_kernel.h"\nint {kernel.symbol}(const opc_kernel_call *call);\n'
    headers = [p.read_bytes() for p in sorted(src.parent.glob("*.h"))]
    key = content_key(prototype, src.read_bytes(), *headers, compiler_version(), *compile_flags(), runtime_digest(),
                      length=20)

    def build(tmp: Path) -> Path:
        proto = tmp / f"opc_prototype_{kernel.symbol}.h"
        proto.write_text(prototype)
        out = tmp / "kernel.o"
        cmd = [os.environ.get("CC", "gcc"), *compile_flags(), "-fPIC", "-I", str(runtime_dir()), "-include",
               str(proto), "-c", str(src), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ, "LC_ALL": "C"})
        if proc.returncode != 0:
            lines = [line for line in proc.stderr.splitlines() if line.strip()][:8]
            raise BuildError(f"{kernel.where}.source: {src} does not compile:\n" +
                             "\n".join("  " + line for line in lines))
        if not defines(str(out), kernel.symbol):
            raise BuildError(f"{kernel.where}.symbol: '{kernel.symbol}' is not defined in {src} "
                             f"(expected int {kernel.symbol}(const opc_kernel_call *call))")
        return out

    return built_once(cache / f"external-{kernel.symbol}-{key}.o", "opc-kernel", build)


def defines(obj: str, symbol: str) -> bool:
    """Whether the object defines `symbol` as a global (nm; assumed so where nm is missing)."""
    try:
        proc = subprocess.run(["nm", "-g", "--defined-only", obj], capture_output=True, text=True, check=False)
    except OSError:
        return True
    return any(line.split()[-1:] == [symbol] for line in proc.stdout.splitlines())
