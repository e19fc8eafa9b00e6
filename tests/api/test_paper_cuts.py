"""What a new user trips on first (issue 36's paper cuts), each as the user meets it."""

from __future__ import annotations

import importlib.util
import math
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


@pytest.mark.parametrize("framework", ["torch", "jax", "paddle"])
def test_framework_submodules_import_as_modules(framework):
    """`import opc.torch` and `from opc.torch import op` (not only the attribute opc.torch)."""
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    out = python(f"import opc.{framework}; from opc.{framework} import op; import opc.interop.{framework} as impl; "
                 f"import opc; print(op is impl.op, opc.{framework} is impl)")
    assert out.returncode == 0 and out.stdout.split() == ["True", "True"], out.stderr


def test_import_opc_imports_no_framework():
    out = python("import sys, opc; print(sorted(m for m in ('torch', 'jax', 'paddle', 'onnx') if m in sys.modules))")
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


def test_compile_onnx_writes_its_weights(tmp_path, capsys, monkeypatch):
    """`opc compile model.onnx -o DIR --grad`: the functions take the weights as arguments, so the
    .npz comes with them; forward and gradient checked against NumPy's own algebra."""
    import numpy as np
    from requires import import_or_skip

    import_or_skip("onnx", "the case is an ONNX model")
    from onnx_helpers import graph_model, helper, onnx

    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    model = graph_model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["y"])],
                        {"x": np.zeros((2, 3), np.float32)}, ["y"], {"W": w, "B": b})
    onnx.save(model, tmp_path / "lin_model.onnx")
    out = tmp_path / "out"
    assert main(["compile", str(tmp_path / "lin_model.onnx"), "-o", str(out), "--grad"]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out / 'lin_model.npz'}" in printed
    assert f"use it: sys.path.insert(0, {str(out)!r}); import lin_model; weights = numpy.load(" in printed
    monkeypatch.syspath_prepend(str(out))
    import lin_model

    weights = dict(np.load(out / "lin_model.npz"))
    assert sorted(weights) == ["B", "W"]
    np.testing.assert_array_equal(weights["W"], w)
    x, dy = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(lin_model.main_graph(x, **weights), x @ w + b, rtol=1e-5, atol=1e-6)
    dx, dw, db = lin_model.main_graph_grad(x, **weights, dy=dy)
    np.testing.assert_allclose(dx, dy @ w.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dw, x.T @ dy, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(db, dy.sum(0), rtol=1e-5, atol=1e-6)


def test_compile_without_o_writes_a_folder_of_its_own(tmp_path, capsys, monkeypatch):
    """Not three files into the current directory, nor into setuptools' build/: opc_out/, said."""
    (tmp_path / "f.mlir").write_text(EXP)
    monkeypatch.chdir(tmp_path)
    assert main(["compile", "f.mlir"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.mlir", "opc_out"]
    assert sorted(p.suffix for p in (tmp_path / "opc_out").iterdir()) == [".c", ".py", ".so"]
    assert printed[0] == f"wrote {os.path.join('opc_out', 'f.py')}"
    assert printed[-1] == "use it: sys.path.insert(0, 'opc_out'); import f"


class Terminal:
    """stdin as a person at a terminal types it."""

    def __init__(self, text: str):
        import io

        self.buffer = io.BytesIO(text.encode())

    def isatty(self) -> bool:
        return True


def test_opt_says_it_reads_stdin_at_a_terminal(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", Terminal(EXP))
    assert main(["opt"]) == 0
    out, err = capsys.readouterr()
    assert err == "opc opt: reading MLIR from stdin (end it with Ctrl-D), or give a FILE\n"
    assert "opc.exp" in out
    monkeypatch.setattr(sys, "stdin", Terminal(EXP))
    assert main(["opt", "-"]) == 0  # asked for by name: nothing to say
    assert capsys.readouterr().err == ""


def test_torch_onnx_export_with_its_defaults_imports(tmp_path):
    """torch.onnx.export's default exporter (dynamo=True) needs onnxscript, which the [torch] and
    [test] extras bring; its file imports and runs as torch runs the module."""
    import numpy as np
    from requires import import_or_skip

    torch = import_or_skip("torch", "the case exports a torch module")
    import_or_skip("onnxscript", "torch.onnx.export's default exporter needs it (pip install '.[torch]')")
    import_or_skip("onnx", "the case imports an ONNX model")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    x = torch.randn(4, 3)
    torch.onnx.export(net, (x,), str(tmp_path / "net.onnx"))
    run = opc.load_onnx(str(tmp_path / "net.onnx"))
    np.testing.assert_allclose(run(x.numpy())[0], net(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_extras_bring_onnxscript():
    """The install side of the case above (CI installs '.[test]'; a user '.[torch]')."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11's TOML reader")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("torch", "test"):
        assert any(re.fullmatch(r"onnxscript>=[0-9.]+", req) for req in extras[extra]), extras[extra]


def test_example_lists_and_prints(capsys, tmp_path):
    assert main(["example"]) == 0
    assert capsys.readouterr().out.split() == ["cast.mlir", "device_no_fused.toml", "inverted_residual.mlir",
                                               "mlp.mlir"]
    assert main(["example", "mlp"]) == 0
    assert capsys.readouterr().out == (ROOT / "examples" / "mlp.mlir").read_text()
    assert main(["example", "mlp.mlir", "-o", str(tmp_path / "m.mlir")]) == 0
    assert (tmp_path / "m.mlir").read_text() == (ROOT / "examples" / "mlp.mlir").read_text()
    assert main(["example", "resnet"]) == 1
    assert capsys.readouterr().err.startswith("error: no example 'resnet' (examples: cast.mlir, ")


def test_quick_start_from_an_installed_wheel(tmp_path):
    """The wheel ships the small examples (opc/_examples) and the runtime: outside a checkout,
    `opc example mlp.mlir -o mlp.mlir`, `opc compile mlp.mlir`, then import and call."""
    import shutil
    import zipfile

    import numpy as np

    tree = tmp_path / "tree"  # the files a wheel is built from, copied: the build writes build/ into its tree
    for part in ("opc", "runtime", "examples"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__", "_runtime", "*.so"))
    for file in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / file, tree / file)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(tree), "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "dist")], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("opc-*.whl")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    assert (site / "opc" / "_examples" / "mlp.mlir").read_text() == (ROOT / "examples" / "mlp.mlir").read_text()
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    script = ("import sys, runpy, numpy as np; from opc.cli import main; "
              "assert main(['example', 'mlp.mlir', '-o', 'mlp.mlir']) == 0; assert main(['compile', 'mlp.mlir']) == 0; "
              "sys.path.insert(0, 'opc_out'); import mlp, opc; assert opc.__file__.startswith(sys.argv[1]); "
              "np.save('out.npy', mlp.mlp(np.ones((8, 16), np.float32), np.full((16, 32), 0.1, np.float32), "
              "np.zeros(32, np.float32)))")
    run = subprocess.run([sys.executable, "-c", script, str(site)], cwd=work, env=env, capture_output=True, text=True,
                         check=False)
    assert run.returncode == 0, run.stderr
    z = 16 * 0.1  # every element of x @ w; the example sums gelu(z) rounded through f16 over 8 rows
    gelu = 0.5 * z * (1 + math.erf(z / math.sqrt(2)))
    np.testing.assert_allclose(np.load(work / "out.npy"), np.full(32, 8 * float(np.float16(gelu))), rtol=2e-3)


def test_march_choices_in_the_compile_flags(monkeypatch):
    from opc.errors import InputError
    from opc.lowering import build

    monkeypatch.delenv("OPC_MARCH", raising=False)
    assert build.march() == "native" and build.target_flags() == build.native_flags()
    monkeypatch.setenv("OPC_MARCH", "portable")
    assert not any(f.startswith("-march") for f in build.compile_flags()) and "-mtune=generic" in build.compile_flags()
    monkeypatch.setenv("OPC_MARCH", "x86-64-v2" if os.uname().machine == "x86_64" else "armv8-a")
    assert [f for f in build.compile_flags() if f.startswith("-march")] == [f"-march={os.environ['OPC_MARCH']}"]
    monkeypatch.setenv("OPC_MARCH", "frobnicator")
    with pytest.raises(InputError, match=r"^-march=frobnicator: the C compiler does not take it \(.*frobnicator"):
        build.compile_flags()


def test_compile_portable_builds_without_native_flags(tmp_path, capsys, monkeypatch):
    """--portable reaches the build (the flags the module's C is compiled with, recorded), the
    module runs, and $OPC_MARCH is as it was after; without it, the output says it is this CPU's."""
    import numpy as np

    from opc.lowering import build

    seen: list[list[str]] = []
    real = build.module_flags

    def spy() -> list[str]:
        seen.append(real())
        return seen[-1]

    monkeypatch.setattr(build, "module_flags", spy)
    monkeypatch.delenv("OPC_MARCH", raising=False)
    (tmp_path / "f.mlir").write_text(EXP)
    assert main(["compile", str(tmp_path / "f.mlir"), "-o", str(tmp_path / "out"), "--portable"]) == 0
    assert seen and all(not any(f.startswith("-march") for f in flags) for flags in seen)
    assert "OPC_MARCH" not in os.environ
    assert "note:" not in capsys.readouterr().out
    monkeypatch.syspath_prepend(str(tmp_path / "out"))
    import f

    x = np.linspace(-2, 2, 4, dtype=np.float32)
    np.testing.assert_allclose(f.f(x), np.exp(x), rtol=1e-6)
    with pytest.raises(AttributeError, match=r"^module 'f' has no function 'f_grad': compile with opc compile --grad "):
        f.f_grad
    if any(flag.startswith("-march=") for flag in build.native_flags()):  # where the compiler takes native
        assert main(["compile", str(tmp_path / "f.mlir"), "-o", str(tmp_path / "native")]) == 0
        assert capsys.readouterr().out.splitlines()[-2] == (
            "note: built for this machine's CPU (-march=native), it may not run on another; --portable builds for "
            "any CPU of this architecture")


def test_load_onnx_argument_count_and_names_are_type_errors(tmp_path):
    import numpy as np
    from requires import import_or_skip

    import_or_skip("onnx", "the case is an ONNX model")
    from onnx_helpers import graph_model, helper

    model = graph_model([helper.make_node("Add", ["a", "b"], ["y"])],
                        {"a": np.zeros(3, np.float32), "b": np.zeros(3, np.float32)}, ["y"])
    run = opc.load_onnx(model)
    x = np.ones(3, np.float32)
    for call, message in [(lambda: run(x, x, x), "the model takes 2 inputs (a, b), got 3"),
                          (lambda: run(x), "input 'b' is missing"),
                          (lambda: run(x, c=x), "the model has no input 'c' (inputs: a, b)"),
                          (lambda: run(x, a=x), "input 'a' is given twice")]:
        with pytest.raises(TypeError, match=re.escape(message)):
            call()
