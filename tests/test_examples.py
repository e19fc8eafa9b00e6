"""examples/mlp.mlir end to end with gradients: the kernel path and every
composite path (decompose="all"), against central finite differences (on an
f64 twin of the model) and against the closed form (on the model itself)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from oracle import gelu_tanh as gelu
from oracle import gelu_tanh_grad as gelu_grad

import opc

ROOT = Path(__file__).resolve().parent.parent
MLP_TEXT = (ROOT / "examples" / "mlp.mlir").read_text()
# The same model in f64 with the rounding cast made an identity: smooth, for finite differences.
MLP_F64 = MLP_TEXT.replace("f32", "f64").replace("f16", "f64").replace("@mlp", "@mlp64")


def inputs(dtype):
    rng = np.random.default_rng(3)
    return [rng.standard_normal(s).astype(dtype) for s in ((8, 16), (16, 32), (32,))]


@pytest.fixture(scope="module", params=["kernels", "decompose=all"])
def models(request):
    decompose = "all" if request.param == "decompose=all" else None
    return opc.compile(MLP_TEXT + MLP_F64, grad=True, decompose=decompose)


def test_mlp_grad_matches_finite_differences(models):
    args = inputs(np.float64)
    ds = np.random.default_rng(4).standard_normal(32)
    grads = models.mlp64_grad(*args, ds)
    eps = 1e-6
    for i, (arg, g) in enumerate(zip(args, grads)):
        fd = np.zeros_like(arg)
        for idx in np.ndindex(arg.shape):
            plus, minus = [a.copy() for a in args], [a.copy() for a in args]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            fd[idx] = (models.mlp64(*plus) @ ds - models.mlp64(*minus) @ ds) / (2 * eps)
        np.testing.assert_allclose(g, fd, rtol=1e-4, atol=1e-5, err_msg=f"gradient of argument {i}")


def test_mlp_grad_matches_closed_form(models):
    """The f32 model: the gradient flows back through the f16 cast as cast_grad = cast(dout, f16),
    so the incoming ds is rounded to f16 on its way, exactly as Paddle's invoke rule says."""
    x, w, b = inputs(np.float32)
    ds = np.random.default_rng(5).standard_normal(32).astype(np.float32)
    dx, dw, db = models.mlp_grad(x, w, b, ds)
    z = x.astype(np.float64) @ w + b
    ds16 = ds.astype(np.float16).astype(np.float64)
    dz = np.broadcast_to(ds16, z.shape) * gelu_grad(z)
    np.testing.assert_allclose(dx, dz @ w.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw, x.T.astype(np.float64) @ dz, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(db, dz.sum(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(models.mlp(x, w, b), gelu(z).astype(np.float16).astype(np.float32).sum(0),
                               rtol=2e-3, atol=2e-3)


def test_cli_grad_module_imports_and_agrees(tmp_path):
    """`opc compile --grad -o DIR`, imported in a fresh process, gives the in-process numbers."""
    proc = subprocess.run([sys.executable, "-m", "opc", "compile", str(ROOT / "examples" / "mlp.mlir"), "--grad",
                           "--decompose", "all", "-o", str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    x, w, b = inputs(np.float32)
    ds = np.ones(32, np.float32)
    np.savez(tmp_path / "in.npz", x=x, w=w, b=b, ds=ds)
    script = (f"import sys, numpy as np; sys.path.insert(0, {str(tmp_path)!r}); import mlp; "
              f"d = np.load({str(tmp_path / 'in.npz')!r}); "
              f"np.savez({str(tmp_path / 'out.npz')!r}, *mlp.mlp_grad(d['x'], d['w'], d['b'], d['ds']))")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    got = np.load(tmp_path / "out.npz")
    want = opc.compile(MLP_TEXT, grad=True).mlp_grad(x, w, b, ds)
    for i, w_ in enumerate(want):
        np.testing.assert_allclose(got[f"arr_{i}"], w_, rtol=1e-5, atol=1e-5)
