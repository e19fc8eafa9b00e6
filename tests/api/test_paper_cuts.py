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


EXP = "func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %r = opc.exp %a : (tensor<4xf32>) -> tensor<4xf32>\n" \
      "  func.return %r : tensor<4xf32>\n}\n"


@pytest.fixture
def no_compiler(tmp_path, monkeypatch):
    """PATH without gcc (the probes that cache what the compiler says ran before, with it)."""
    from opc.lowering import build

    build.compiler_version(), build.native_flags()
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CC", raising=False)


NO_GCC = "opc needs a C compiler to build a module, and 'gcc' is not on PATH: install gcc (apt install gcc"


def test_no_compiler_is_a_build_error(no_compiler, tmp_path):
    from opc.errors import BuildError

    with pytest.raises(BuildError) as err:
        opc.compile(EXP, cache_dir=str(tmp_path / "cache"))
    assert str(err.value).startswith(NO_GCC)


def test_no_compiler_in_the_cli(no_compiler, tmp_path, capsys, monkeypatch):
    mlir = tmp_path / "f.mlir"
    mlir.write_text(EXP)
    monkeypatch.setenv("OPC_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["compile", str(mlir), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {NO_GCC}") and len(err.splitlines()) == 1, err


@pytest.fixture(scope="module")
def plain():
    return opc.compile(EXP)


@pytest.mark.parametrize("name,advice", [
    ("f_grad", "compile with grad=True to build it (opc compile --grad)"),
    ("f_value_and_grad", "compile with grad=True to build it (opc compile --grad)"),
    ("f_grad_grad", "compile with grad=2 to build it (opc compile --grad 2)"),
])  # fmt: skip
def test_a_gradient_not_compiled_says_how_to_get_it(plain, name, advice):
    with pytest.raises(AttributeError) as err:
        getattr(plain, name)
    assert str(err.value) == f"opc module has no function '{name}': {advice}"
    with pytest.raises(KeyError, match=re.escape(advice)):
        plain[name]
    with pytest.raises(AttributeError, match=re.escape("no function 'g' (functions: f)")):
        plain.g


def test_wrong_number_of_arguments_is_a_type_error(plain):
    import numpy as np

    x = np.ones(4, np.float32)
    with pytest.raises(TypeError, match=re.escape("f() takes 1 arguments (a), got 2")):
        plain.f(x, x)
    with pytest.raises(TypeError, match=re.escape("f() takes 1 arguments (a), got 0")):
        plain.f()
    with pytest.raises(ValueError, match="must have shape"):  # shapes and dtypes stay ValueError
        plain.f(np.ones(3, np.float32))
    np.testing.assert_allclose(plain.f(x), np.exp(x), rtol=1e-6)
