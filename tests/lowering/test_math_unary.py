"""floor ceil round and the trigonometric / hyperbolic ops (the ONNX ops exporters write), op by dtype,
against NumPy, in one compiled module; their gradients against the derivative formulas."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import opc

RNG = np.random.default_rng(11)
DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
# op -> (NumPy function, derivative (None: zero), input range)
OPS = {
    "floor": (np.floor, None, (-3, 3)), "ceil": (np.ceil, None, (-3, 3)), "round": (np.round, None, (-3, 3)),
    "sin": (np.sin, np.cos, (-3, 3)), "cos": (np.cos, lambda x: -np.sin(x), (-3, 3)),
    "tan": (np.tan, lambda x: 1 / np.cos(x) ** 2, (-1.2, 1.2)),
    "asin": (np.arcsin, lambda x: 1 / np.sqrt(1 - x * x), (-0.9, 0.9)),
    "acos": (np.arccos, lambda x: -1 / np.sqrt(1 - x * x), (-0.9, 0.9)),
    "atan": (np.arctan, lambda x: 1 / (1 + x * x), (-3, 3)),
    "sinh": (np.sinh, np.cosh, (-3, 3)), "cosh": (np.cosh, np.sinh, (-3, 3)),
    "asinh": (np.arcsinh, lambda x: 1 / np.sqrt(x * x + 1), (-3, 3)),
    "acosh": (np.arccosh, lambda x: 1 / np.sqrt(x * x - 1), (1.1, 4)),
    "atanh": (np.arctanh, lambda x: 1 / (1 - x * x), (-0.9, 0.9)),
    "log1p": (np.log1p, lambda x: 1 / (1 + x), (-0.9, 3)),
}  # fmt: skip
SHAPE = (3, 37)


def source() -> str:
    funcs = []
    for op in OPS:
        for name in DTYPES:
            t = f"tensor<3x37x{name}>"
            funcs.append(f"func.func @{op}_{name}(%x: {t}) -> {t} {{\n  %r = opc.{op} %x : ({t}) -> {t}\n"
                         f"  func.return %r : {t}\n}}")
    return "\n".join(funcs)


@pytest.fixture(scope="module")
def compiled():
    return opc.compile(source(), grad=True)


def draw(op: str, dtype) -> np.ndarray:
    low, high = OPS[op][2]
    x = RNG.uniform(low, high, SHAPE)
    if op == "round":
        x[0, :8] = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -0.51]  # ties go to even
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", list(OPS))
def test_forward_matches_numpy(compiled, op, dtype):
    x = draw(op, DTYPES[dtype])
    got = getattr(compiled, f"{op}_{dtype}")(x)
    want = OPS[op][0](x.astype(np.float64))
    tol = {"f32": 2e-6, "f64": 1e-13, "f16": 2e-3, "bf16": 1.6e-2}[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(DTYPES[dtype]).astype(np.float64),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("op", list(OPS))
def test_gradient_matches_derivative(compiled, op):
    x = draw(op, np.float64)
    dout = RNG.standard_normal(SHAPE)
    (dx,) = np.atleast_1d(getattr(compiled, f"{op}_f64_grad")(x, dout)),
    derivative = OPS[op][1]
    want = np.zeros(SHAPE) if derivative is None else dout * derivative(x)
    np.testing.assert_allclose(dx.reshape(SHAPE), want, rtol=1e-10, atol=1e-12)
