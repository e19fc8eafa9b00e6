"""Max error in f32 ulps of elementwise ops and of their gradients, as opc compiles them for
the CPU, against float64 formulas (SciPy for erf) rounded to f32.

Each op runs on f32 bit patterns (every STRIDE-th one; stride 1 is every f32 but NaN) through
a compiled module: the forward, and its gradient from `NAME_grad` with dout = 1. softmax and
log_softmax run on rows [x, 0], so that one f32 x sweeps them too: softmax([x, 0])[0] is
sigmoid(x), and the gradient of its first output by x is sigmoid'(x); log_softmax's by x with
dout = [1, 0] is 1 - sigmoid(x) = sigmoid(-x).

    python tests/support/grad_ulp.py [STRIDE [OP...]] [--range LO HI]   # the table (docs/gradients.md); stride 1: every f32

tests/autodiff/test_grad_ulp.py runs it on a sample and checks the bounds.
"""

from __future__ import annotations

import sys

import numpy as np
from scipy import special

import opc

CHUNK = 1 << 20

PROGRAM = "\n".join(
    f"func.func @{name}(%x: {t}) -> {t} {{\n  %y = {body} : ({t}) -> {t}\n  func.return %y : {t}\n}}"
    for name, body, t in [
        ("tanh", "opc.tanh %x", f"tensor<{CHUNK}xf32>"),
        ("sigmoid", "opc.sigmoid %x", f"tensor<{CHUNK}xf32>"),
        ("exp", "opc.exp %x", f"tensor<{CHUNK}xf32>"),
        ("gelu_erf", "opc.gelu %x {approximate = false}", f"tensor<{CHUNK}xf32>"),
        ("gelu_tanh", "opc.gelu %x {approximate = true}", f"tensor<{CHUNK}xf32>"),
        ("softmax", "opc.softmax %x {axis = 1 : i64}", f"tensor<{CHUNK}x2xf32>"),
        ("log_softmax", "opc.log_softmax %x {axis = 1 : i64}", f"tensor<{CHUNK}x2xf32>"),
    ]
)

GELU_C, GELU_K = np.sqrt(2 / np.pi), 0.044715


def sech2(x):
    """1 - tanh(x)^2 without the cancellation: 4 e^-2|x| / (1 + e^-2|x|)^2."""
    u = np.exp(-2 * np.abs(x))
    return 4 * u / (1 + u) ** 2


def dsigmoid(x):
    u = np.exp(-np.abs(x))
    return u / (1 + u) ** 2


def sigmoid(x):
    return special.expit(x)


def gelu_tanh(x):
    inner = GELU_C * (x + GELU_K * x**3)
    return 0.5 * x * (1 + np.tanh(inner)), 0.5 * (1 + np.tanh(inner)) + 0.5 * x * sech2(inner) * GELU_C * (
        1 + 3 * GELU_K * x**2)


def gelu_erf(x):
    return 0.5 * x * (1 + special.erf(x / np.sqrt(2))), 0.5 * (1 + special.erf(x / np.sqrt(2))) + x * np.exp(
        -0.5 * x * x) / np.sqrt(2 * np.pi)


# name -> x (float64) -> (forward, gradient by x) in float64; rows [x, 0] for the row ops
REFERENCE = {
    "tanh": lambda x: (np.tanh(x), sech2(x)),
    "sigmoid": lambda x: (sigmoid(x), dsigmoid(x)),
    "exp": lambda x: (np.exp(x), np.exp(x)),
    "gelu_erf": gelu_erf,
    "gelu_tanh": gelu_tanh,
    "softmax": lambda x: (sigmoid(x), dsigmoid(x)),
    "log_softmax": lambda x: (-np.logaddexp(0, -x), sigmoid(-x)),
}
ROWS = {"softmax", "log_softmax"}


def ordered(f: np.ndarray) -> np.ndarray:
    """f32 values as integers in their order: the difference of two counts the floats between."""
    i = f.astype(np.float32).view(np.int32).astype(np.int64)
    return np.where(i < 0, np.int64(-(2**31)) - i, i)


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in representable floats; 0 where both are NaN, a huge one where only one is."""
    want32 = want.astype(np.float32)
    d = np.abs(ordered(got) - ordered(want32))
    nan_got, nan_want = np.isnan(got), np.isnan(want32)
    return np.where(nan_got | nan_want, np.where(nan_got & nan_want, 0, 2**40), d)


def patterns(stride: int):
    """Every stride-th f32 bit pattern but NaNs, in chunks of CHUNK (the last one padded)."""
    count = ((1 << 32) + stride - 1) // stride
    for start in range(0, count, CHUNK):
        bits = (np.arange(start, min(start + CHUNK, count), dtype=np.uint64) * stride).astype(np.uint32)
        x = bits.view(np.float32)
        x = x[~np.isnan(x)]
        yield np.pad(x, (0, CHUNK - len(x)))


def measure(stride: int, module=None, names=tuple(REFERENCE), lo: float = -np.inf, hi: float = np.inf):
    """name -> (forward max ulp, its x, gradient max ulp, its x), over the x in [lo, hi]."""
    module = module or opc.compile(PROGRAM, grad=True)
    worst = {name: [0, 0.0, 0, 0.0] for name in names}
    for x in patterns(stride):
        x[(x < lo) | (x > hi)] = 0
        x64 = x.astype(np.float64)
        with np.errstate(all="ignore"):
            for name in names:
                reference = REFERENCE[name]
                fn, grad = getattr(module, name), getattr(module, f"{name}_grad")
                want_y, want_g = reference(x64)
                if name in ROWS:
                    rows = np.stack([x, np.zeros_like(x)], axis=1)
                    dout = np.zeros_like(rows)
                    dout[:, 0] = 1
                    y, g = fn(rows)[:, 0], grad(rows, dout)[:, 0]
                else:
                    y, g = fn(x), grad(x, np.ones_like(x))
                for k, (got, want) in enumerate([(y, want_y), (g, want_g)]):
                    err = ulps(got, want)
                    i = int(np.argmax(err))
                    if err[i] > worst[name][2 * k]:
                        worst[name][2 * k: 2 * k + 2] = [int(err[i]), float(x[i])]
    return worst


def table(worst) -> str:
    lines = ["| op | forward max ulp (at x) | gradient max ulp (at x) |", "|---|---|---|"]
    for name, (fy, xy, fg, xg) in worst.items():
        lines.append(f"| {name} | {fy} ({xy:.7g}) | {fg} ({xg:.7g}) |")
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    lo, hi = -np.inf, np.inf
    if "--range" in args:  # --range LO HI: only the x in [LO, HI]
        k = args.index("--range")
        lo, hi = float(args[k + 1]), float(args[k + 2])
        del args[k:k + 3]
    print(table(measure(int(args[0]) if args else 4099, names=tuple(args[1:]) or tuple(REFERENCE), lo=lo, hi=hi)))
