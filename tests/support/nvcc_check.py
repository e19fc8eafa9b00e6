"""nvcc as the CUDA tests run it: compile only, for sm_90, every warning an error (the CUDA path is
checked this way and by the simulator where no GPU is lent)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from opc.lowering.build import runtime_dir
from opc.lowering.cuda_build import nvcc_path


def nvcc_command(cu: str | Path, obj: str | Path) -> list[str]:
    return [str(nvcc_path()), "-c", "-arch=sm_90", "-std=c++17", "-Werror", "all-warnings", "-I",
            str(runtime_dir()), str(cu), "-o", str(obj)]


def assert_nvcc_compiles(tmp_path: Path, name: str, source: str) -> None:
    """source, written to tmp_path/NAME.cu, compiles without an error or a warning."""
    cu = tmp_path / f"{name}.cu"
    cu.write_text(source, encoding="utf-8")
    done = subprocess.run(nvcc_command(cu, tmp_path / f"{name}.o"), capture_output=True, text=True, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "warning" not in out.lower(), out[-3000:]
