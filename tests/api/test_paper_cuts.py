"""What a new user trips on first (issue 36's paper cuts), each as the user meets it."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import opc
from opc.cli import main

ROOT = Path(__file__).resolve().parents[2]


def python(code: str, **env: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter that imports this checkout's opc."""
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **env}
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_framework_submodules_import_as_modules(framework):
    """`import opc.torch` and `from opc.torch import op` (not only the attribute opc.torch)."""
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    out = python(f"import opc.{framework}; from opc.{framework} import op; import opc.interop.{framework} as impl; "
                 f"import opc; print(op is impl.op, opc.{framework} is impl)")
    assert out.returncode == 0 and out.stdout.split() == ["True", "True"], out.stderr


def test_import_opc_imports_no_framework():
    out = python("import sys, opc; print(sorted(m for m in ('torch', 'jax', 'onnx') if m in sys.modules))")
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_version_is_pyproject_s(capsys):
    declared = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
    assert opc.__version__ == declared
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"opc {declared}\n"
