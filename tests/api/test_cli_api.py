"""The CLI and the Python API as a user meets them: compile, import in a fresh
process, bad input, bad arguments, the cache."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import opc

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "mlp.mlir"
CAST = ROOT / "examples" / "cast.mlir"


def run_opc(*args: str, stdin: str | None = None, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opc", *args], input=stdin, capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)})


def mlp_reference(x, w, b):
    z = x.astype(np.float64) @ w + b
    h = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))
    return h.astype(np.float32).astype(np.float16).astype(np.float32).sum(0)


def mlp_inputs():
    rng = np.random.default_rng(7)
    return (rng.standard_normal((8, 16), np.float32), rng.standard_normal((16, 32), np.float32),
            rng.standard_normal(32, np.float32))


@pytest.fixture(scope="module")
def mlp():
    return opc.compile(str(MLP))


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def test_compile_then_import_in_fresh_process(tmp_path):
    out = tmp_path / "build"
    proc = run_opc("compile", str(MLP), "--target", "cpu", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "mlp.py").is_file()
    script = textwrap.dedent(f"""
        import sys, numpy as np
        sys.path.insert(0, {str(out)!r})
        import mlp
        rng = np.random.default_rng(7)
        x, w, b = rng.standard_normal((8, 16), np.float32), rng.standard_normal((16, 32), np.float32), rng.standard_normal(32, np.float32)
        np.save({str(tmp_path / 'got.npy')!r}, mlp.mlp(x, w, b))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(np.load(tmp_path / "got.npy"), mlp_reference(*mlp_inputs()), rtol=2e-3, atol=2e-3)


def test_compile_grad_writes_grad_function(tmp_path):
    proc = run_opc("compile", str(MLP), "--grad", "-o", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "mlp_grad" in (tmp_path / "mlp.py").read_text()


def test_emit_mlir_shows_loops_and_gemm():
    proc = run_opc("compile", str(MLP), "--emit", "mlir")
    assert proc.returncode == 0, proc.stderr
    assert "opc_loops.gemm" in proc.stdout and "scf.parallel" in proc.stdout and "opc.fused" not in proc.stdout


def test_emit_c_is_the_source():
    proc = run_opc("compile", str(CAST), "--emit", "c")
    assert proc.returncode == 0, proc.stderr
    assert "int opc_fn_cast(const double *restrict x" in proc.stdout
    assert "opc_sat_u8" in proc.stdout  # the float -> uint8 cast saturates


@pytest.mark.parametrize("args,message", [
    (["opt", "missing.mlir"], "error: no such file: missing.mlir"),
    (["compile", "missing.mlir"], "error: no such file: missing.mlir"),
    (["opt", str(MLP), "-p", "no-such-pass"], "error: unknown pass no-such-pass (available: canonicalize, cse"),
    (["compile", str(MLP), "--target", "tpu"], "error: unknown target 'tpu'"),
    (["compile", str(MLP), "--decompose", "frobnicate"], "unknown op 'frobnicate'"),
    (["explain", str(MLP), "--target", "missing.toml"], "missing.toml"),
])  # fmt: skip
def test_cli_errors_are_one_line(args, message):
    proc = run_opc(*args)
    assert proc.returncode == 1
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_cli_unwritable_output_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run_opc("compile", str(CAST), "-o", str(blocker / "sub"))
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


def test_cli_located_error_from_stdin():
    bad = "func.func @f(%a: tensor<4xf32>) {\n  %r = opc.exp %a : (tensor<4xf32>) -> tensor<5xf32>\n  func.return\n}\n"
    proc = run_opc("compile", "-", "--emit", "c", stdin=bad)
    assert proc.returncode == 1
    assert proc.stderr.startswith("<stdin>:2:3: error: ")
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------
# Python API
# ---------------------------------------------------------------------------


def test_api_matches_numpy(mlp):
    np.testing.assert_allclose(mlp.mlp(*mlp_inputs()), mlp_reference(*mlp_inputs()), rtol=2e-3, atol=2e-3)


def test_api_accepts_text_and_module():
    text = CAST.read_text()
    x = np.linspace(-5, 300, 24).reshape(2, 3, 4)
    want = np.clip(np.trunc(x), 0, 255)
    np.testing.assert_array_equal(opc.compile(text).cast(x), want)
    from opc.ir import parse_text

    np.testing.assert_array_equal(opc.compile(parse_text(text).module).cast(x), want)


def test_paddle_cast_report():
    """[2,3,4] float64 -> uint8 -> float64, NaN and out-of-range saturating."""
    m = opc.compile(str(CAST))
    x = np.array([np.nan, -1.5, 0.7, 254.9, 255.5, 1e9] * 4, np.float64).reshape(2, 3, 4)
    np.testing.assert_array_equal(m.cast(x), np.array([0, 0, 0, 254, 255, 255] * 4, np.float64).reshape(2, 3, 4))


@pytest.mark.parametrize("args,message", [
    (lambda x, w, b: (x.astype(np.float64), w, b), "argument 'x' must have dtype float32, got float64"),
    (lambda x, w, b: (x, w[:15], b), "argument 'w' must have shape (16, 32), got (15, 32)"),
    (lambda x, w, b: (x, w, "bias"), "argument 'b' cannot be read as a float32 array"),
])  # fmt: skip
def test_bad_arguments_raise_value_error(mlp, args, message):
    with pytest.raises(ValueError) as err:
        mlp.mlp(*args(*mlp_inputs()))
    assert message in str(err.value)


def test_a_wrong_number_of_arguments_is_a_type_error(mlp):
    with pytest.raises(TypeError, match=re.escape("mlp() takes 3 arguments (x, w, b), got 2")):
        mlp.mlp(*mlp_inputs()[:2])


def test_non_contiguous_readonly_and_list_inputs(mlp):
    x, w, b = mlp_inputs()
    wide = np.zeros((8, 32), np.float32)
    wide[:, ::2] = x
    ro = w.copy()
    ro.flags.writeable = False
    got = mlp.mlp(wide[:, ::2], ro, b.tolist())
    np.testing.assert_allclose(got, mlp_reference(x, w, b), rtol=2e-3, atol=2e-3)


def test_outputs_are_fresh_arrays(mlp):
    args = mlp_inputs()
    first = mlp.mlp(*args)
    first[:] = 0
    second = mlp.mlp(*args)
    assert second.any() and first is not second


def test_function_named_like_a_runtime_helper():
    m = opc.compile("func.func @gelu_tanh_f32(%a: tensor<3xf32>) -> tensor<3xf32> {\n"
                    "  %r = opc.exp %a : (tensor<3xf32>) -> tensor<3xf32>\n  func.return %r : tensor<3xf32>\n}\n")
    np.testing.assert_allclose(m.gelu_tanh_f32(np.zeros(3, np.float32)), np.ones(3))


def test_second_compile_hits_the_cache(tmp_path):
    text = CAST.read_text().replace("@cast", "@cast_cache_probe")
    m1 = opc.compile(text, cache_dir=str(tmp_path))
    built = sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".so")
    m2 = opc.compile(text, cache_dir=str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".so") == built and len(built) == 1
    assert m1.path == m2.path


def test_concurrent_compiles_share_one_cache_entry(tmp_path):
    text = CAST.read_text().replace("@cast", "@cast_race")
    script = (f"import opc, numpy as np; m = opc.compile({text!r}, cache_dir={str(tmp_path)!r}); "
              "print(m.cast_race(np.full((2, 3, 4), 7.9)).sum())")
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}) for _ in range(3)]
    outs = [p.communicate() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert all(o.strip() == "168.0" for o, _ in outs)
    assert len([p for p in tmp_path.iterdir() if p.suffix == ".so"]) == 1
    assert not list((tmp_path / "tmp").iterdir())  # temp build dirs are cleaned up


def test_compile_from_threads():
    """CFFI's build changes the working directory; concurrent compiles must not trip over it."""
    from concurrent.futures import ThreadPoolExecutor

    srcs = [f"func.func @thread{i}(%a: tensor<3xf32>) -> tensor<3xf32> {{\n"
            f"  %r = opc.add %a, %a : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>\n"
            f"  func.return %r : tensor<3xf32>\n}}\n" for i in range(4)]
    with ThreadPoolExecutor(4) as pool:
        mods = list(pool.map(opc.compile, srcs))
    for i, m in enumerate(mods):
        np.testing.assert_array_equal(getattr(m, f"thread{i}")(np.arange(3, dtype=np.float32)), [0, 2, 4])
