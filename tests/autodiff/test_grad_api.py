"""The gradient API as a user meets it: NAME_value_and_grad, grad=2, arguments
by their MLIR names, bad `grad` / keyword input, and `opc compile --grad` in a
fresh process (Paddle's uint8 cast)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import opc

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "mlp.mlir"
RNG = np.random.default_rng(3)

TO_U8 = """// Paddle: x = to_tensor([2, 3, 4], 'float64'); y = cast(x, 'uint8'); y.backward() -> x.grad = [1, 1, 1]
func.func @to_u8(%x: tensor<3xf64>) -> tensor<3xui8> {
  %y = opc.cast %x {dtype = ui8} : (tensor<3xf64>) -> tensor<3xui8>
  func.return %y : tensor<3xui8>
}
"""
# Two results (one unnamed), an argument named like a dout, a stop_gradient argument.
TWO = """
func.func @two(%x: tensor<3xf64>, %dy: tensor<3xf64>, %s: tensor<3xf64> {opc.stop_gradient}) -> (tensor<3xf64>, tensor<3xf64>) {
  %y = opc.mul %x, %dy : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
  %0 = opc.exp %x : (tensor<3xf64>) -> tensor<3xf64>
  %1 = opc.mul %0, %s : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
  func.return %y, %1 : tensor<3xf64>, tensor<3xf64>
}
"""


def mlp_inputs():
    return (RNG.standard_normal((8, 16), np.float32), RNG.standard_normal((16, 32), np.float32),
            RNG.standard_normal(32, np.float32), RNG.standard_normal(32, np.float32))


@pytest.fixture(scope="module")
def mlp():
    return opc.compile(str(MLP), grad=2)


@pytest.fixture(scope="module")
def two():
    return opc.compile(TWO, grad=True)


def test_value_and_grad_is_f_and_f_grad(mlp) -> None:
    x, w, b, ds = mlp_inputs()
    s, dx, dw, db = mlp.mlp_value_and_grad(x, w, b, ds)
    np.testing.assert_allclose(s, mlp.mlp(x, w, b), rtol=1e-6, atol=1e-6)
    for got, want in zip((dx, dw, db), mlp.mlp_grad(x, w, b, ds)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_value_and_grad_with_two_results(two) -> None:
    x, dy, s, d1, d2 = (RNG.uniform(-1, 1, 3) for _ in range(5))
    y, r, gx, gdy = two.two_value_and_grad(x, dy, s, d1, d2)
    np.testing.assert_allclose(y, x * dy, rtol=1e-15)
    np.testing.assert_allclose(r, np.exp(x) * s, rtol=1e-15)
    np.testing.assert_allclose(gx, d1 * dy + d2 * np.exp(x) * s, rtol=1e-14)
    np.testing.assert_allclose(gdy, d1 * x, rtol=1e-14)


def test_grad_grad_exists_with_grad_2(mlp) -> None:
    x, w, b, ds = mlp_inputs()
    dd = [RNG.standard_normal(a.shape, np.float32) for a in (x, w, b)]
    got = mlp.mlp_grad_grad(x, w, b, ds, *dd)
    assert [g.shape for g in got] == [(8, 16), (16, 32), (32,), (32,)]
    # d/dds <mlp_grad(x, w, b, ds), dd> is linear in dd: check it by scaling
    twice = mlp.mlp_grad_grad(x, w, b, ds, *(2 * d for d in dd))
    np.testing.assert_allclose(twice[3], 2 * got[3], rtol=1e-4, atol=1e-4)


def test_arguments_by_name(mlp) -> None:
    x, w, b, ds = mlp_inputs()
    want = mlp.mlp(x, w, b)
    np.testing.assert_array_equal(mlp.mlp(x=x, w=w, b=b), want)
    np.testing.assert_array_equal(mlp.mlp(b=b, x=x, w=w), want)
    np.testing.assert_array_equal(mlp.mlp(x, w, b=b), want)
    # the dout of result %s is ds
    for got, ref in zip(mlp.mlp_grad(x, w, b=b, ds=ds), mlp.mlp_grad(x, w, b, ds)):
        np.testing.assert_array_equal(got, ref)


def test_dout_names_stay_unique(two) -> None:
    # %dy is an argument, so the dout of result %y is dy_; the unnamed second result's is dout1
    x, dy, s, d1, d2 = (RNG.uniform(-1, 1, 3) for _ in range(5))
    got = two.two_grad(x=x, dy=dy, s=s, dy_=d1, dout1=d2)
    for g, w in zip(got, two.two_grad(x, dy, s, d1, d2)):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("call,error,message", [
    (lambda f, x, w, b: f(x, w, bias=b), TypeError, "mlp() got an unexpected keyword argument 'bias'"),
    (lambda f, x, w, b: f(x, w, b, x=x), TypeError, "mlp() got multiple values for argument 'x'"),
    (lambda f, x, w, b: f(x, b=b), TypeError, "missing argument(s) 'w'"),
    (lambda f, x, w, b: f(x=x, w=w[:15], b=b), ValueError, "argument 'w' must have shape (16, 32), got (15, 32)"),
    (lambda f, x, w, b: f(x=x.astype(np.float64), w=w, b=b), ValueError, "argument 'x' must have dtype float32"),
    (lambda f, x, w, b: f(x, w, b, x, b=b), TypeError, "mlp() takes 3 arguments"),
])  # fmt: skip
def test_bad_keyword_arguments(mlp, call, error, message) -> None:
    x, w, b, _ = mlp_inputs()
    with pytest.raises(error) as err:
        call(mlp.mlp, x, w, b)
    assert message in str(err.value)


@pytest.mark.parametrize("grad,error,message", [
    (3, ValueError, "grad=3 is not supported"),
    (-1, ValueError, "grad=-1 is not supported"),
    ("yes", TypeError, "grad must be True, False or an order 1 to 2, got 'yes'"),
    (1.0, TypeError, "grad must be True, False or an order 1 to 2, got 1.0"),
])  # fmt: skip
def test_bad_grad_argument(grad, error, message) -> None:
    with pytest.raises(error) as err:
        opc.compile(TO_U8, grad=grad)
    assert message in str(err.value)


def test_bad_fuse_argument() -> None:
    with pytest.raises(TypeError, match="fuse must be True or False, got 'no'"):
        opc.compile(TO_U8, fuse="no")


def test_paddle_uint8_through_compile() -> None:
    m = opc.compile(TO_U8, grad=True)
    np.testing.assert_array_equal(m.to_u8_grad(np.array([2.0, 3.0, 4.0]), np.ones(3, np.uint8)), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(m.to_u8_grad(x=np.array([2.0, 3.0, 4.0]), dy=np.ones(3, np.uint8)), [1.0, 1.0, 1.0])


def run_opc(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opc", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_paddle_uint8_through_cli_in_fresh_process(tmp_path) -> None:
    src = tmp_path / "to_u8.mlir"
    src.write_text(TO_U8 + "func.func @count(%n: tensor<3xi32>) -> tensor<3xi32> {\n"
                   "  func.return %n : tensor<3xi32>\n}\n")
    proc = run_opc("compile", "--grad", str(src), "-o", "build", cwd=tmp_path)  # --grad before the file: order 1
    assert proc.returncode == 0, proc.stderr
    script = textwrap.dedent("""
        import sys, numpy as np
        sys.path.insert(0, "build")
        import to_u8
        print(to_u8.to_u8_grad(np.array([2.0, 3.0, 4.0]), np.ones(3, np.uint8)).tolist())
        print(to_u8.to_u8_value_and_grad(x=np.array([2.0, 3.0, 4.0]), dy=np.ones(3, np.uint8))[1].tolist())
        try:
            to_u8.count_grad
        except AttributeError as err:
            print(err)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[:2] == ["[1.0, 1.0, 1.0]", "[1.0, 1.0, 1.0]"]
    assert "count_grad: opc built no such function: @count has no float argument" in lines[2]


def test_cli_grad_order_and_no_fuse(tmp_path) -> None:
    proc = run_opc("compile", str(MLP), "--grad", "2", "--no-fuse", "--emit", "mlir", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "func.func @mlp_grad_grad(" in proc.stdout and "func.func @mlp_value_and_grad(" in proc.stdout
    proc = run_opc("compile", str(MLP), "--grad=3", cwd=tmp_path)
    assert proc.returncode != 0 and "invalid choice: 3" in proc.stderr and "Traceback" not in proc.stderr
