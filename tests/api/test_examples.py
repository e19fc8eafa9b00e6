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
from requires import import_or_skip

import opc

ROOT = Path(__file__).resolve().parents[2]
MLP_TEXT = (ROOT / "examples" / "mlp.mlir").read_text()
# The same model in f64 with the rounding cast made an identity: smooth, for finite differences.
MLP_F64 = MLP_TEXT.replace("f32", "f64").replace("f16", "f64").replace("@mlp", "@mlp64")


def inputs(dtype):
    rng = np.random.default_rng(3)
    return [rng.standard_normal(s).astype(dtype) for s in ((8, 16), (16, 32), (32,))]


@pytest.fixture(scope="module", params=["kernels", "decompose=all"])
def models(request):
    decompose = "all" if request.param == "decompose=all" else None
    return opc.compile(MLP_TEXT + MLP_F64, grad=2, decompose=decompose)


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


def central_differences(f, args: list[np.ndarray], dds: list[np.ndarray], eps: float = 1e-6) -> list[np.ndarray]:
    """d/d(args) of <f(*args), dds> (f returns a tuple), each element by central differences."""
    def inner(a):
        return sum(float(np.sum(o * d)) for o, d in zip(f(*a), dds))

    out = []
    for i, arg in enumerate(args):
        g = np.zeros_like(arg)
        for idx in np.ndindex(arg.shape):
            plus, minus = [a.copy() for a in args], [a.copy() for a in args]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            g[idx] = (inner(plus) - inner(minus)) / (2 * eps)
        out.append(g)
    return out


def torch_grad_grad(args: list[np.ndarray], ds: np.ndarray, dds: list[np.ndarray]) -> list[np.ndarray]:
    """torch's double backward of the f64 model: d/d(x, w, b, ds) of <d/d(x, w, b) <mlp(x, w, b), ds>, dds>."""
    torch = import_or_skip("torch", "torch's double backward is the second oracle of mlp_grad_grad "
                                    "(pip install '.[bench]')")
    x, w, b, d = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (*args, ds))
    s = torch.nn.functional.gelu(x @ w + b, approximate="tanh").sum(0)
    grads = torch.autograd.grad(s, (x, w, b), d, create_graph=True)
    inner = sum((g * torch.tensor(dd)).sum() for g, dd in zip(grads, dds))
    return [g.detach().numpy() for g in torch.autograd.grad(inner, (x, w, b, d))]


def test_mlp_grad_grad_matches_finite_differences_and_torch(models):
    """grad=2's mlp64_grad_grad(x, w, b, ds, ddx, ddw, ddb) = d/d(x, w, b, ds) of
    <mlp64_grad(x, w, b, ds), dd>: against central differences of mlp64_grad (f64) and
    against torch's double backward, not only against itself."""
    args = inputs(np.float64)
    rng = np.random.default_rng(6)
    ds = rng.standard_normal(32)
    dds = [rng.standard_normal(a.shape) for a in args]
    got = models.mlp64_grad_grad(*args, ds, *dds)
    assert len(got) == 4
    fd = central_differences(models.mlp64_grad, [*args, ds], dds)
    for i, (g, w) in enumerate(zip(got, fd)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"second-order grad of argument {i}")
    for i, (g, w) in enumerate(zip(got, torch_grad_grad(args, ds, dds))):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10, err_msg=f"torch: second-order grad of argument {i}")


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
