"""Gradients, numerically: every differentiable op against central finite
differences in f64 and against closed-form NumPy formulas; fused_gemm_epilogue
over every activation x trans_x x trans_y x dtype; Paddle's cast report;
fan-out, pruning and stop_gradient.

Each compiled module costs a C build, so every group of cases is one MLIR
module with many functions, compiled once by a module-scoped fixture.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest

import opc
from opc.ir import parse_text

DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64}
# |got - want| <= TOL * max(1, max|want|), per dtype
TOL = {"f64": 1e-9, "f32": 1e-5, "f16": 5e-3, "bf16": 2e-2}
RNG = np.random.default_rng(0)


def compile_grad(text: str, decompose: str | None = None):
    return opc.compile(text, target="cpu", grad=True, decompose=decompose)


def as_tuple(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def close(got, want, dtype: str, what: str = "") -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    assert err <= TOL[dtype] * scale, f"{what}: max error {err:.3g} > {TOL[dtype] * scale:.3g}\n{got}\n{want}"


def finite_diff(f: Callable, args: list[np.ndarray], douts: list[np.ndarray], wrt: list[int], eps: float = 1e-6):
    """d/d args[i] of sum_k <f(args)_k, douts_k>, by central differences."""

    def loss(a: list[np.ndarray]) -> float:
        return sum(float(np.sum(o * d)) for o, d in zip(as_tuple(f(*a)), douts))

    grads = []
    for i in wrt:
        g = np.zeros_like(args[i])
        for idx in np.ndindex(args[i].shape):
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            g[idx] = (loss(plus) - loss(minus)) / (2 * eps)
        grads.append(g)
    return grads


def ttype(shape, dt: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}{dt}>"


# ---------------------------------------------------------------------------
# Every differentiable primitive, in f64 (finite differences) and f32 (formula)
# ---------------------------------------------------------------------------

A, B = (3, 4), (4,)  # lhs and a broadcasting rhs


def positive(shape):
    return RNG.uniform(0.5, 2.0, shape)


def signed(shape):
    # away from 0, so that abs / relu are smooth around every sample
    return RNG.choice([-1.0, 1.0], shape) * RNG.uniform(0.2, 1.5, shape)


def uniform(shape):
    return RNG.uniform(-1.5, 1.5, shape)


def gelu_t(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def gelu_t_grad(x):
    c = math.sqrt(2 / math.pi)
    t = np.tanh(c * (x + 0.044715 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)


def erf(x):
    return np.vectorize(math.erf)(x)


def gelu_e_grad(x):
    return 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def unbroadcast(g, shape):
    while g.ndim > len(shape):
        g = g.sum(0)
    return g.sum(axis=tuple(i for i, s in enumerate(shape) if s == 1), keepdims=True).reshape(shape)


# name: (mlir body with %a, %b -> %r, arg shapes, result shape, samplers, closed form (args, dout) -> grads)
def binary(op: str):
    return f"%r = opc.{op} %a, %b : ({{A}}, {{B}}) -> {{A}}"


def unary(op: str, attrs: str = ""):
    return f"%r = opc.{op} %a {attrs}: ({{A}}) -> {{A}}"


CASES: dict[str, tuple] = {
    "add": (binary("add"), [A, B], A, [uniform, uniform], lambda a, b, d: (d, unbroadcast(d, b.shape))),
    "sub": (binary("sub"), [A, B], A, [uniform, uniform], lambda a, b, d: (d, unbroadcast(-d, b.shape))),
    "mul": (binary("mul"), [A, B], A, [uniform, uniform], lambda a, b, d: (d * b, unbroadcast(d * a, b.shape))),
    "div": (binary("div"), [A, B], A, [uniform, positive],
            lambda a, b, d: (d / b, unbroadcast(-d * a / b**2, b.shape))),
    "maximum": (binary("maximum"), [A, B], A, [uniform, uniform],
                lambda a, b, d: (d * (a > b), unbroadcast(d * (b > a), b.shape))),
    "minimum": (binary("minimum"), [A, B], A, [uniform, uniform],
                lambda a, b, d: (d * (a < b), unbroadcast(d * (b < a), b.shape))),
    "pow": (binary("pow"), [A, B], A, [positive, uniform],
            lambda a, b, d: (d * b * a ** (b - 1), unbroadcast(d * a**b * np.log(a), b.shape))),
    "neg": (unary("neg"), [A], A, [uniform], lambda a, d: (-d,)),
    "exp": (unary("exp"), [A], A, [uniform], lambda a, d: (d * np.exp(a),)),
    "log": (unary("log"), [A], A, [positive], lambda a, d: (d / a,)),
    "tanh": (unary("tanh"), [A], A, [uniform], lambda a, d: (d * (1 - np.tanh(a) ** 2),)),
    "erf": (unary("erf"), [A], A, [uniform], lambda a, d: (d * 2 / math.sqrt(math.pi) * np.exp(-a * a),)),
    "sqrt": (unary("sqrt"), [A], A, [positive], lambda a, d: (d * 0.5 / np.sqrt(a),)),
    "rsqrt": (unary("rsqrt"), [A], A, [positive], lambda a, d: (d * -0.5 * a**-1.5,)),
    "abs": (unary("abs"), [A], A, [signed], lambda a, d: (d * np.sign(a),)),
    "relu": (unary("relu"), [A], A, [signed], lambda a, d: (d * (a > 0),)),
    "gelu_tanh": (unary("gelu", "{{approximate = true}} "), [A], A, [uniform], lambda a, d: (d * gelu_t_grad(a),)),
    "gelu_erf": (unary("gelu", "{{approximate = false}} "), [A], A, [uniform], lambda a, d: (d * gelu_e_grad(a),)),
    "select": ("%c = opc.greater_than %a, %b : ({A}, {B}) -> {A1}\n"
               "  %r = opc.select %c, %a, %b : ({A1}, {A}, {B}) -> {A}", [A, B], A, [uniform, uniform],
               lambda a, b, d: (d * (a > b), unbroadcast(d * (a <= b), b.shape))),
    "broadcast_to": ("%r = opc.broadcast_to %a : ({B}) -> {A}", [B], A, [uniform],
                     lambda a, d: (d.sum(0),)),
    "broadcast_to_keep": ("%r = opc.broadcast_to %a : ({C1}) -> {A}", [(3, 1)], A, [uniform],
                          lambda a, d: (d.sum(1, keepdims=True),)),
    "reshape": ("%r = opc.reshape %a : ({A}) -> {R}", [A], (2, 6), [uniform], lambda a, d: (d.reshape(a.shape),)),
    "transpose": ("%r = opc.transpose %a {{perm = array<i64: 2, 0, 1>}} : ({T}) -> {TP}", [(2, 3, 4)], (4, 2, 3),
                  [uniform], lambda a, d: (np.transpose(d, (1, 2, 0)),)),
    "reduce_sum": ("%r = opc.reduce_sum %a {{axes = array<i64: 1>}} : ({A}) -> {S}", [A], (3,), [uniform],
                   lambda a, d: (np.broadcast_to(d[:, None], a.shape),)),
    "reduce_sum_keep": ("%r = opc.reduce_sum %a {{axes = array<i64: 0, 2>, keepdim = true}} : ({T}) -> {TK}",
                        [(2, 3, 4)], (1, 3, 1), [uniform], lambda a, d: (np.broadcast_to(d, a.shape),)),
    "reduce_max": ("%r = opc.reduce_max %a {{axes = array<i64: 1>}} : ({A}) -> {S}", [A], (3,), [uniform],
                   lambda a, d: ((a == a.max(1, keepdims=True)) * d[:, None],)),
}


def mm(x, y, tx, ty):
    return np.swapaxes(x, -1, -2) @ y if tx and not ty else (
        x @ np.swapaxes(y, -1, -2) if ty and not tx else (
            np.swapaxes(x, -1, -2) @ np.swapaxes(y, -1, -2) if tx and ty else x @ y))


def matmul_case(rank: int, tx: bool, ty: bool) -> tuple:
    batch = (2,) if rank == 3 else ()
    m, k, n = 3, 4, 5
    xs = (*batch, *((k, m) if tx else (m, k)))
    ys = (*batch, *((n, k) if ty else (k, n)))

    def formula(x, y, d):
        sw = lambda t: np.swapaxes(t, -1, -2)  # noqa: E731
        ox, oy = (sw(x) if tx else x), (sw(y) if ty else y)
        dox, doy = d @ sw(oy), sw(ox) @ d  # grads of op_x(x) and op_y(y)
        return (sw(dox) if tx else dox), (sw(doy) if ty else doy)

    def body(dt: str) -> str:
        flags = f"trans_x = {str(tx).lower()}, trans_y = {str(ty).lower()}"
        return (f"%r = opc.matmul %a, %b {{{flags}}} : ({ttype(xs, dt)}, {ttype(ys, dt)}) -> "
                f"{ttype((*batch, m, n), dt)}")

    return body, [xs, ys], (*batch, m, n), [uniform, uniform], formula


for _rank in (2, 3):
    for _tx in (False, True):
        for _ty in (False, True):
            CASES[f"matmul{_rank}_{'T' if _tx else 'F'}{'T' if _ty else 'F'}"] = matmul_case(_rank, _tx, _ty)


def case_func(name: str, dt: str) -> str:
    body, shapes, rshape, _, _ = CASES[name]
    subs = {
        "A": ttype(A, dt), "B": ttype(B, dt), "A1": ttype(A, "i1"), "C1": ttype((3, 1), dt),
        "R": ttype((2, 6), dt), "T": ttype((2, 3, 4), dt), "TP": ttype((4, 2, 3), dt), "S": ttype((3,), dt),
        "TK": ttype((1, 3, 1), dt), "dt": dt,
    }  # fmt: skip
    body = body(dt) if callable(body) else body.format(**subs)
    names = ["%a", "%b"][: len(shapes)]
    args = ", ".join(f"{n}: {ttype(s, dt)}" for n, s in zip(names, shapes))
    return f"func.func @op_{name}_{dt}({args}) -> {ttype(rshape, dt)} {{\n  {body}\n  func.return %r : {ttype(rshape, dt)}\n}}\n"


@pytest.fixture(scope="module")
def ops_module():
    return compile_grad("".join(case_func(n, dt) for n in CASES for dt in ("f64", "f32")))


def sample(name: str, dt: str) -> tuple[list[np.ndarray], np.ndarray]:
    _, shapes, rshape, samplers, _ = CASES[name]
    rng_args = [s(shape).astype(DTYPES[dt]) for s, shape in zip(samplers, shapes)]
    return rng_args, RNG.uniform(-1, 1, rshape).astype(DTYPES[dt])


@pytest.mark.parametrize("name", list(CASES))
def test_op_grad_finite_differences_f64(ops_module, name: str) -> None:
    args, dout = sample(name, "f64")
    got = as_tuple(getattr(ops_module, f"op_{name}_f64_grad")(*args, dout))
    want = finite_diff(getattr(ops_module, f"op_{name}_f64"), args, [dout], list(range(len(args))))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert np.asarray(g).dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{name}: grad of operand {i}")


@pytest.mark.parametrize("dt", ["f64", "f32"])
@pytest.mark.parametrize("name", list(CASES))
def test_op_grad_closed_form(ops_module, name: str, dt: str) -> None:
    args, dout = sample(name, dt)
    got = as_tuple(getattr(ops_module, f"op_{name}_{dt}_grad")(*args, dout))
    want = CASES[name][4](*[a.astype(np.float64) for a in args], dout.astype(np.float64))
    for i, (g, w) in enumerate(zip(got, want)):
        assert np.asarray(g).dtype == DTYPES[dt]
        close(g, w, dt, f"{name}_{dt}: grad of operand {i}")


# ---------------------------------------------------------------------------
# fused_gemm_epilogue: activation x trans_x x trans_y x dtype
# ---------------------------------------------------------------------------

M_, K_, N_ = 3, 4, 5
FUSED = [(act, tx, ty, dt) for act in ("none", "relu", "gelu") for tx in (False, True) for ty in (False, True)
         for dt in DTYPES]  # fmt: skip


def fused_name(act: str, tx: bool, ty: bool, dt: str) -> str:
    return f"fge_{act}_{'T' if tx else 'F'}{'T' if ty else 'F'}_{dt}"


def fused_func(act: str, tx: bool, ty: bool, dt: str) -> str:
    xs, ys = ((K_, M_) if tx else (M_, K_)), ((N_, K_) if ty else (K_, N_))
    t = lambda s: ttype(s, dt)  # noqa: E731
    out = t((M_, N_))
    results = f"({out}, {out})" if act != "none" else out
    names = "%out, %z" if act != "none" else "%out"
    return (
        f"func.func @{fused_name(act, tx, ty, dt)}(%x: {t(xs)}, %y: {t(ys)}, %bias: {t((N_,))}) -> {out} {{\n"
        f"  {names} = opc.fused_gemm_epilogue %x, %y, %bias {{activation = \"{act}\", trans_x = {str(tx).lower()}, "
        f"trans_y = {str(ty).lower()}}} : ({t(xs)}, {t(ys)}, {t((N_,))}) -> {results}\n"
        f"  func.return %out : {out}\n}}\n"
    )


FUSED_TEXT = "".join(fused_func(*v) for v in FUSED)


@pytest.fixture(scope="module")
def fused_module():
    # Only the f64 forwards are called (finite differences): drop the others
    # before compiling, a third less C to build.
    from opc.autodiff import add_grad_functions

    module = parse_text(FUSED_TEXT).module
    add_grad_functions(module)
    for f in list(module.ops):
        name = f.sym_name.data  # type: ignore[attr-defined]
        if not name.endswith(("_grad", "_f64")):
            f.detach()
            f.erase()
    return opc.compile(module, target="cpu")


def fused_inputs(tx: bool, ty: bool, dt: str):
    xs, ys = ((K_, M_) if tx else (M_, K_)), ((N_, K_) if ty else (K_, N_))
    x, y, b = (RNG.uniform(-1, 1, s).astype(DTYPES[dt]) for s in (xs, ys, (N_,)))
    return [x, y, b], RNG.uniform(-1, 1, (M_, N_)).astype(DTYPES[dt])


def fused_reference(act: str, tx: bool, ty: bool, x, y, b, d):
    """Closed form in f64: Z = op_x(x) op_y(y) + b; dZ = d act'(Z); chain rule through the transposes."""
    x, y, b, d = (np.asarray(v, np.float64) for v in (x, y, b, d))
    ox, oy = (x.T if tx else x), (y.T if ty else y)
    z = ox @ oy + b
    dz = d if act == "none" else (d * (z > 0) if act == "relu" else d * gelu_t_grad(z))
    dox, doy = dz @ oy.T, ox.T @ dz
    return (dox.T if tx else dox), (doy.T if ty else doy), dz.sum(0)


@pytest.mark.parametrize("act,tx,ty,dt", FUSED, ids=[fused_name(*v) for v in FUSED])
def test_fused_gemm_epilogue_grad(fused_module, act: str, tx: bool, ty: bool, dt: str) -> None:
    (x, y, b), d = fused_inputs(tx, ty, dt)
    name = fused_name(act, tx, ty, dt)
    got = getattr(fused_module, f"{name}_grad")(x, y, b, d)
    assert len(got) == 3
    for what, g, w in zip(("dx", "dy", "dbias"), got, fused_reference(act, tx, ty, x, y, b, d)):
        assert np.asarray(g).dtype == DTYPES[dt], what
        close(g, w, dt, f"{name}: {what}")
    if dt == "f64":
        fd = finite_diff(getattr(fused_module, name), [x, y, b], [d], [0, 1, 2])
        for what, g, w in zip(("dx", "dy", "dbias"), got, fd):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{name}: {what} vs finite differences")


def test_fused_reserve_space_used_downstream() -> None:
    """When Z itself feeds the output, dZ sums both paths."""
    t = "tensor<3x5xf64>"
    m = compile_grad(
        "func.func @f(%x: tensor<3x4xf64>, %y: tensor<4x5xf64>, %b: tensor<5xf64>) -> tensor<3x5xf64> {\n"
        f"  %out, %z = opc.fused_gemm_epilogue %x, %y, %b {{activation = \"gelu\"}} : "
        f"(tensor<3x4xf64>, tensor<4x5xf64>, tensor<5xf64>) -> ({t}, {t})\n"
        f"  %s = opc.mul %out, %z : ({t}, {t}) -> {t}\n"
        f"  func.return %s : {t}\n}}\n"
    )
    (x, y, b), d = fused_inputs(False, False, "f64")
    got = m.f_grad(x, y, b, d)
    for g, w in zip(got, finite_diff(m.f, [x, y, b], [d], [0, 1, 2])):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# Paddle's cast report, graphs
# ---------------------------------------------------------------------------

GRAPHS = """
// Paddle's report: [2,3,4] float64 -> uint8 -> float64; the backward gives ones.
func.func @cast(%x: tensor<2x3x4xf64>) -> tensor<2x3x4xf64> {
  %u = opc.cast %x {dtype = ui8} : (tensor<2x3x4xf64>) -> tensor<2x3x4xui8>
  %y = opc.cast %u {dtype = f64} : (tensor<2x3x4xui8>) -> tensor<2x3x4xf64>
  func.return %y : tensor<2x3x4xf64>
}
func.func @cast_f32(%x: tensor<3x4xf32>) -> tensor<3x4xf64> {
  %y = opc.cast %x {dtype = f64} : (tensor<3x4xf32>) -> tensor<3x4xf64>
  func.return %y : tensor<3x4xf64>
}
// One value, %t, feeds three ops.
func.func @fanout(%x: tensor<3x4xf64>) -> tensor<3x4xf64> {
  %t = opc.tanh %x : (tensor<3x4xf64>) -> tensor<3x4xf64>
  %p = opc.exp %t : (tensor<3x4xf64>) -> tensor<3x4xf64>
  %q = opc.mul %t, %x : (tensor<3x4xf64>, tensor<3x4xf64>) -> tensor<3x4xf64>
  %r = opc.neg %t : (tensor<3x4xf64>) -> tensor<3x4xf64>
  %s = opc.add %p, %q : (tensor<3x4xf64>, tensor<3x4xf64>) -> tensor<3x4xf64>
  %o = opc.add %s, %r : (tensor<3x4xf64>, tensor<3x4xf64>) -> tensor<3x4xf64>
  func.return %o : tensor<3x4xf64>
}
// %dead never reaches the result, %k depends on no wrt arg, %w has no path at all.
func.func @pruned(%x: tensor<3x4xf64>, %w: tensor<3x4xf64>) -> tensor<3x4xf64> {
  %dead = opc.log %x : (tensor<3x4xf64>) -> tensor<3x4xf64>
  %e = opc.exp %x : (tensor<3x4xf64>) -> tensor<3x4xf64>
  func.return %e : tensor<3x4xf64>
}
// %s is marked stop_gradient: only %x gets a gradient.
func.func @stopped(%x: tensor<3x4xf64>, %s: tensor<3x4xf64> {opc.stop_gradient}) -> tensor<3x4xf64> {
  %m = opc.mul %x, %s : (tensor<3x4xf64>, tensor<3x4xf64>) -> tensor<3x4xf64>
  %r = opc.tanh %m : (tensor<3x4xf64>) -> tensor<3x4xf64>
  func.return %r : tensor<3x4xf64>
}
// Two results, one dout each; %x reaches both.
func.func @two(%x: tensor<3x4xf64>) -> (tensor<3x4xf64>, tensor<4xf64>) {
  %e = opc.exp %x : (tensor<3x4xf64>) -> tensor<3x4xf64>
  %s = opc.reduce_sum %x {axes = array<i64: 0>} : (tensor<3x4xf64>) -> tensor<4xf64>
  func.return %e, %s : tensor<3x4xf64>, tensor<4xf64>
}
"""


@pytest.fixture(scope="module")
def graphs():
    return compile_grad(GRAPHS)


def test_cast_gradient_paddle_report(graphs) -> None:
    x = RNG.uniform(0, 200, (2, 3, 4))
    dx = graphs.cast_grad(x, np.ones((2, 3, 4)))
    assert dx.dtype == np.float64 and dx.shape == (2, 3, 4)
    np.testing.assert_array_equal(dx, np.ones((2, 3, 4)))


def test_cast_gradient_f32_from_f64_dout(graphs) -> None:
    d = RNG.uniform(-1, 1, (3, 4))
    dx = graphs.cast_f32_grad(RNG.uniform(-1, 1, (3, 4)).astype(np.float32), d)
    assert dx.dtype == np.float32
    np.testing.assert_array_equal(dx, d.astype(np.float32))


def test_value_used_three_times(graphs) -> None:
    x, d = uniform((3, 4)), uniform((3, 4))
    t = np.tanh(x)
    want = d * ((np.exp(t) + x - 1) * (1 - t * t) + t)
    np.testing.assert_allclose(graphs.fanout_grad(x, d), want, rtol=1e-12)
    np.testing.assert_allclose(graphs.fanout_grad(x, d), finite_diff(graphs.fanout, [x], [d], [0])[0], rtol=1e-6)


def test_pruned_branch_and_arg_without_path(graphs) -> None:
    x, w, d = uniform((3, 4)), uniform((3, 4)), uniform((3, 4))
    dx, dw = graphs.pruned_grad(x, w, d)
    np.testing.assert_allclose(dx, d * np.exp(x), rtol=1e-12)
    np.testing.assert_array_equal(dw, np.zeros((3, 4)))


def test_stop_gradient_arg_gets_none(graphs) -> None:
    x, s, d = uniform((3, 4)), uniform((3, 4)), uniform((3, 4))
    dx = graphs.stopped_grad(x, s, d)
    assert not isinstance(dx, tuple)
    np.testing.assert_allclose(dx, d * s * (1 - np.tanh(x * s) ** 2), rtol=1e-12)


def test_two_results_each_with_dout(graphs) -> None:
    x, d1, d2 = uniform((3, 4)), uniform((3, 4)), uniform((4,))
    dx = graphs.two_grad(x, d1, d2)
    np.testing.assert_allclose(dx, d1 * np.exp(x) + d2[None, :], rtol=1e-12)
