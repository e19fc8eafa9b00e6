"""Sanitizer mode: `python -m opc.sanitize [pytest args]` runs pytest with every C object
opc builds (modules, runtime objects, device kernels) compiled with ASan and UBSan,
float-cast-overflow included (OPC_SANITIZE=1; flags in opc/lowering/build.py).

ASan's runtime must be the first library of the process, so the command re-executes
Python with LD_PRELOAD=libasan (found through the C compiler). Leak detection is off:
CPython keeps its interned objects to the end. Every report aborts the process, so a
run that reports anything fails.
"""

from __future__ import annotations

import os
import subprocess
import sys


def runtime_library(name: str) -> str | None:
    """The C compiler's shared runtime `name` (libasan.so), or None."""
    cc = os.environ.get("CC", "gcc")
    try:
        path = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True,
                              check=False).stdout.strip()
    except OSError:
        return None
    return path if os.path.isabs(path) and os.path.exists(path) else None


def sanitized_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a sanitized child process; raises OSError without libasan."""
    env = dict(os.environ if base is None else base)
    asan = runtime_library("libasan.so")
    if asan is None:
        raise OSError(f"the C compiler ({env.get('CC', 'gcc')}) has no libasan.so: install its ASan runtime "
                      "(Debian: libasan8) to use the sanitizer mode")
    # libstdc++ loaded with it: ASan resolves the real __cxa_throw when it starts, and without the
    # library then, a C++ extension that throws later (onnx's shape inference, its errors caught in
    # Python) aborts the process ("CHECK failed: ... real___cxa_throw != 0"), no bug of opc's
    cxx = runtime_library("libstdc++.so.6")
    preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p and "libasan" not in p and p != cxx]
    env["LD_PRELOAD"] = ":".join([asan, *([cxx] if cxx else []), *preload])
    env["OPC_SANITIZE"] = "1"
    env["ASAN_OPTIONS"] = ":".join(filter(None, ["detect_leaks=0", "abort_on_error=1", env.get("ASAN_OPTIONS")]))
    env["UBSAN_OPTIONS"] = ":".join(filter(None, ["print_stacktrace=1", "halt_on_error=1",
                                                   env.get("UBSAN_OPTIONS")]))
    return env


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        env = sanitized_env()
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    os.execve(sys.executable, [sys.executable, "-m", "pytest", *args], env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
