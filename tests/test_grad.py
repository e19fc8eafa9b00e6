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


def compile_kept(text: str, keep: Callable[[str], bool], second_order: Callable[[str], bool] = lambda n: False):
    """Grad functions added (and @NAME_grad_grad where second_order(NAME)), then
    only the functions the tests call kept: less C to build than opc.compile(grad=...)."""
    from opc.autodiff import add_grad_function, add_grad_functions, default_wrt, find_func

    module = parse_text(text).module
    forwards = [f.sym_name.data for f in module.ops]  # type: ignore[attr-defined]
    add_grad_functions(module)
    for name in filter(second_order, forwards):
        g = find_func(module, f"{name}_grad")
        add_grad_function(module, g, default_wrt(g))
    for f in list(module.ops):
        if not keep(f.sym_name.data):  # type: ignore[attr-defined]
            f.detach()
            f.erase()
    return opc.compile(module, target="cpu")


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
    # f64: forward, grad and grad of grad (finite differences of each); f32: grad.
    return compile_kept("".join(case_func(n, dt) for n in CASES for dt in ("f64", "f32")),
                        keep=lambda n: n.endswith(("_f64", "_grad")) and not n.endswith("_value_and_grad"),
                        second_order=lambda n: n.endswith("_f64"))


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


def second_order_check(grad, grad_grad, args: list[np.ndarray], dout: np.ndarray, what: str) -> None:
    """@f_grad_grad(args, dout, dds) against finite differences of <f_grad(args, dout), dds>,
    with respect to every argument of f_grad, the dout included."""
    dds = [RNG.uniform(-1, 1, np.shape(g)) for g in as_tuple(grad(*args, dout))]
    got = as_tuple(grad_grad(*args, dout, *dds))
    want = finite_diff(grad, [*args, dout], dds, list(range(len(args) + 1)))
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        assert np.asarray(g).dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{what}: second-order grad of argument {i}")


@pytest.mark.parametrize("name", list(CASES))
def test_op_grad_of_grad_finite_differences_f64(ops_module, name: str) -> None:
    """Higher order: @op_grad differentiated again (its grad ops through their rules)."""
    args, dout = sample(name, "f64")
    f = f"op_{name}_f64"
    second_order_check(getattr(ops_module, f"{f}_grad"), getattr(ops_module, f"{f}_grad_grad"), args, dout, name)


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
    # before compiling, a third less C to build. f64 also gets its grad of grad.
    return compile_kept(FUSED_TEXT, keep=lambda n: n.endswith(("_grad", "_f64")) and not n.endswith("_value_and_grad"),
                        second_order=lambda n: n.endswith("_f64"))


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


@pytest.mark.parametrize("act,tx,ty", [v[:3] for v in FUSED if v[3] == "f64"],
                         ids=[fused_name(*v) for v in FUSED if v[3] == "f64"])
def test_fused_gemm_epilogue_grad_of_grad(fused_module, act: str, tx: bool, ty: bool) -> None:
    """fused_gemm_epilogue_grad differentiated through its composite (matmuls, act grad, reduce_sum)."""
    args, d = fused_inputs(tx, ty, "f64")
    name = fused_name(act, tx, ty, "f64")
    second_order_check(getattr(fused_module, f"{name}_grad"), getattr(fused_module, f"{name}_grad_grad"), args, d, name)


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


# ---------------------------------------------------------------------------
# Grad ops as forward ops (first order through their rules), Paddle's cast
# double and triple grad
# ---------------------------------------------------------------------------

T34 = "tensor<3x4xf64>"
GRAD_OPS = f"""
func.func @relu_grad(%x: {T34}, %d: {T34}) -> {T34} {{
  %r = opc.relu_grad %x, %d : ({T34}, {T34}) -> {T34}
  func.return %r : {T34}
}}
func.func @gelu_grad_tanh(%x: {T34}, %d: {T34}) -> {T34} {{
  %r = opc.gelu_grad %x, %d {{approximate = true}} : ({T34}, {T34}) -> {T34}
  func.return %r : {T34}
}}
func.func @gelu_grad_erf(%x: {T34}, %d: {T34}) -> {T34} {{
  %r = opc.gelu_grad %x, %d {{approximate = false}} : ({T34}, {T34}) -> {T34}
  func.return %r : {T34}
}}
func.func @cast_grad(%x: {T34}, %d: tensor<3x4xf32>) -> {T34} {{
  %r = opc.cast_grad %x, %d : ({T34}, tensor<3x4xf32>) -> {T34}
  %s = opc.mul %r, %x : ({T34}, {T34}) -> {T34}
  func.return %s : {T34}
}}
""" + "".join(f"""
func.func @fge_grad_{act}(%x: tensor<3x4xf64>, %y: tensor<5x4xf64>, %z: tensor<3x5xf64>, %d: tensor<3x5xf64>)
    -> (tensor<3x4xf64>, tensor<5x4xf64>, tensor<5xf64>) {{
  %dx, %dy, %db = opc.fused_gemm_epilogue_grad %x, %y, {"%z, " if act != "none" else ""}%d
    {{activation_grad = "{act_grad}", trans_y = true}} : (tensor<3x4xf64>, tensor<5x4xf64>, {"tensor<3x5xf64>, " if act != "none" else ""}tensor<3x5xf64>)
    -> (tensor<3x4xf64>, tensor<5x4xf64>, tensor<5xf64>)
  func.return %dx, %dy, %db : tensor<3x4xf64>, tensor<5x4xf64>, tensor<5xf64>
}}""" for act, act_grad in (("none", "none"), ("relu", "relu_grad"), ("gelu", "gelu_grad"))) + """
// Paddle's TestCastDoubleGradCheck / TestCastTripleGradCheck: float32 [2, 3, 4] cast to float64.
func.func @paddle_cast(%data: tensor<2x3x4xf32>) -> tensor<2x3x4xf64> {
  %out = opc.cast %data {dtype = f64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf64>
  func.return %out : tensor<2x3x4xf64>
}
"""
GRAD_OP_CASES = {  # name: the samplers of its arguments (away from relu's kink)
    "relu_grad": [signed, uniform], "gelu_grad_tanh": [uniform, uniform], "gelu_grad_erf": [uniform, uniform],
    "cast_grad": [uniform, uniform], "fge_grad_none": [uniform, uniform, uniform, uniform],
    "fge_grad_relu": [uniform, uniform, signed, uniform], "fge_grad_gelu": [uniform, uniform, uniform, uniform],
}  # fmt: skip


@pytest.fixture(scope="module")
def grad_ops_module():
    from opc.autodiff import add_grad_function, add_grad_functions, default_wrt, find_func

    m = parse_text(GRAD_OPS).module
    add_grad_functions(m)
    g = find_func(m, "paddle_cast_grad")
    gg = add_grad_function(m, g, default_wrt(g))  # double: w.r.t. data and dout
    add_grad_function(m, gg, list(range(len(gg.args))))  # triple: w.r.t. data, dout and ddata
    for f in list(m.ops):
        if f.sym_name.data.endswith("_value_and_grad"):  # type: ignore[attr-defined]
            f.detach()
            f.erase()
    return opc.compile(m)


def grad_op_args(name: str) -> list[np.ndarray]:
    samplers = GRAD_OP_CASES[name]
    shapes = [(3, 4), (5, 4), (3, 5), (3, 5)] if name.startswith("fge") else [(3, 4), (3, 4)]
    args = [s(shape) for s, shape in zip(samplers, shapes)]
    if name == "cast_grad":
        args[1] = args[1].astype(np.float32)
    return args


@pytest.mark.parametrize("name", list(GRAD_OP_CASES))
def test_grad_op_first_order_finite_differences(grad_ops_module, name: str) -> None:
    """A function made of a grad op is differentiated through the op's invoke / composite rule."""
    args = grad_op_args(name)
    f = getattr(grad_ops_module, name)
    douts = [RNG.uniform(-1, 1, np.shape(o)) for o in as_tuple(f(*args))]
    got = as_tuple(getattr(grad_ops_module, f"{name}_grad")(*args, *douts))
    wrt = [i for i, a in enumerate(args) if a.dtype == np.float64]  # cast_grad's f32 dout: checked below
    want = finite_diff(f, args, douts, wrt)
    for i, w in zip(wrt, want):
        np.testing.assert_allclose(got[i], w, rtol=1e-5, atol=1e-6, err_msg=f"{name}: grad of argument {i}")
    if name == "cast_grad":  # d/dd of cast(d, f64) * x is x, rounded to the dout's f32
        np.testing.assert_array_equal(got[1], (douts[0] * args[0]).astype(np.float32))


def test_paddle_cast_double_grad(grad_ops_module) -> None:
    """f32 -> f64: the grad of cast_grad is cast(ddx, f64) w.r.t. the dout, 0 w.r.t. the data."""
    m = grad_ops_module
    data = RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
    dout, ddata = RNG.uniform(-1, 1, (2, 3, 4)), RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
    g_data, g_dout = m.paddle_cast_grad_grad(data, dout, ddata)
    assert g_data.dtype == np.float32 and g_dout.dtype == np.float64
    np.testing.assert_array_equal(g_data, np.zeros((2, 3, 4), np.float32))
    np.testing.assert_array_equal(g_dout, ddata.astype(np.float64))
    # Paddle's gradient_checker: finite differences (eps 0.005) of <cast_grad(data, dout), ddata>
    want = finite_diff(m.paddle_cast_grad, [data, dout], [ddata], [0, 1], eps=0.005)
    np.testing.assert_allclose(g_data, want[0], atol=1e-6)
    np.testing.assert_allclose(g_dout, want[1], rtol=1e-4, atol=1e-4)  # f32 rounding of the perturbed output


def test_paddle_cast_triple_grad(grad_ops_module) -> None:
    m = grad_ops_module
    data = RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
    dout, ddata = RNG.uniform(-1, 1, (2, 3, 4)), RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
    d_gdata, d_gdout = RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32), RNG.uniform(-1, 1, (2, 3, 4))
    got = m.paddle_cast_grad_grad_grad(data, dout, ddata, d_gdata, d_gdout)
    assert [g.dtype for g in got] == [np.float32, np.float64, np.float32]
    np.testing.assert_array_equal(got[0], np.zeros((2, 3, 4), np.float32))
    np.testing.assert_array_equal(got[1], np.zeros((2, 3, 4)))
    np.testing.assert_array_equal(got[2], d_gdout.astype(np.float32))
    want = finite_diff(m.paddle_cast_grad_grad, [data, dout, ddata], [d_gdata, d_gdout], [0, 1, 2], eps=0.005)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------
# Integer and i1 results: a dout each, cotangents through cast only
# ---------------------------------------------------------------------------

INTEGER = """
// Paddle: x = to_tensor([2, 3, 4], 'float64'); y = cast(x, 'uint8'); y.backward() -> x.grad = [1, 1, 1]
func.func @to_u8(%x: tensor<3xf64>) -> tensor<3xui8> {
  %y = opc.cast %x {dtype = ui8} : (tensor<3xf64>) -> tensor<3xui8>
  func.return %y : tensor<3xui8>
}
// An i1 value used twice: its two i1 cotangents meet in a logical or (issue 8: opc.add refused i1).
func.func @bool_twice(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = opc.cast %x {dtype = i1} : (tensor<4xf32>) -> tensor<4xi1>
  %a = opc.cast %c {dtype = f32} : (tensor<4xi1>) -> tensor<4xf32>
  %b = opc.cast %c {dtype = f32} : (tensor<4xi1>) -> tensor<4xf32>
  %s = opc.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %s : tensor<4xf32>
}
// An i1 value returned and used by a select: its dout cast back, plus select's gradient.
func.func @bool_and_select(%x: tensor<3xf64>) -> (tensor<3xi1>, tensor<3xf64>) {
  %c = opc.cast %x {dtype = i1} : (tensor<3xf64>) -> tensor<3xi1>
  %e = opc.select %c, %x, %x : (tensor<3xi1>, tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
  func.return %c, %e : tensor<3xi1>, tensor<3xf64>
}
func.func @bool_returned_twice(%x: tensor<4xf32>) -> (tensor<4xi1>, tensor<4xi1>) {
  %c = opc.cast %x {dtype = i1} : (tensor<4xf32>) -> tensor<4xi1>
  func.return %c, %c : tensor<4xi1>, tensor<4xi1>
}
// An i8 value used twice: its cotangents add (wrapping, like int8 arithmetic); a reshape passes them on.
func.func @i8_twice(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = opc.cast %x {dtype = i8} : (tensor<4xf32>) -> tensor<4xi8>
  %r = opc.reshape %c : (tensor<4xi8>) -> tensor<2x2xi8>
  %a = opc.cast %r {dtype = f32} : (tensor<2x2xi8>) -> tensor<2x2xf32>
  %f = opc.reshape %a : (tensor<2x2xf32>) -> tensor<4xf32>
  %b = opc.cast %c {dtype = f32} : (tensor<4xi8>) -> tensor<4xf32>
  %s = opc.add %f, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %s : tensor<4xf32>
}
// Integer arithmetic and compares stop the cotangent: only the direct path counts.
func.func @int_arith(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi32>, tensor<4xi1>) {
  %c = opc.cast %x {dtype = i32} : (tensor<4xf32>) -> tensor<4xi32>
  %n = opc.neg %c : (tensor<4xi32>) -> tensor<4xi32>
  %m = opc.cast %n {dtype = f32} : (tensor<4xi32>) -> tensor<4xf32>
  %z = opc.full {value = 0.0 : f64} : () -> tensor<4xf32>
  %g = opc.greater_than %x, %z : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  func.return %m, %c, %g : tensor<4xf32>, tensor<4xi32>, tensor<4xi1>
}
// No float argument: no grad function, and the module says why.
func.func @count(%n: tensor<4xi32>) -> tensor<4xf32> {
  %f = opc.cast %n {dtype = f32} : (tensor<4xi32>) -> tensor<4xf32>
  func.return %f : tensor<4xf32>
}
"""


@pytest.fixture(scope="module")
def integer_module():
    return compile_grad(INTEGER)


def test_paddle_uint8_cast_gradient(integer_module) -> None:
    dx = integer_module.to_u8_grad(np.array([2.0, 3.0, 4.0]), np.ones(3, np.uint8))
    assert dx.dtype == np.float64
    np.testing.assert_array_equal(dx, [1.0, 1.0, 1.0])
    # the dout is cast to the input's dtype, whatever it holds
    np.testing.assert_array_equal(integer_module.to_u8_grad(np.zeros(3), np.array([0, 7, 255], np.uint8)),
                                  [0.0, 7.0, 255.0])


def test_i1_fan_out_is_a_logical_or(integer_module) -> None:
    x = np.array([0.0, 1.5, -2.0, 0.0], np.float32)
    ds = np.array([0.0, 2.5, -1.0, 3.0], np.float32)
    # each path: cast_grad(c, ds) = ds != 0 (i1); or'ed; cast back to f32
    np.testing.assert_array_equal(integer_module.bool_twice_grad(x, ds), [0.0, 1.0, 1.0, 1.0])
    dc1, dc2 = np.array([1, 0, 0, 1], bool), np.array([0, 0, 1, 1], bool)
    np.testing.assert_array_equal(integer_module.bool_returned_twice_grad(x, dc1, dc2), [1.0, 0.0, 1.0, 1.0])
    # the i1 dout cast back to f64, plus select's gradient (dout into one branch or the other)
    x3, t = np.array([0.0, 1.0, 2.0]), np.array([True, False, True])
    np.testing.assert_array_equal(integer_module.bool_and_select_grad(x3, t, np.full(3, 0.5)), [1.5, 0.5, 1.5])


def test_integer_fan_out_sums_with_wraparound(integer_module) -> None:
    x = np.zeros(4, np.float32)
    ds = np.array([1.7, -3.2, 100.0, 0.0], np.float32)
    # two paths, each cast(ds, i8) = [1, -3, 100, 0]; summed in int8: 200 wraps to -56
    np.testing.assert_array_equal(integer_module.i8_twice_grad(x, ds), [2.0, -6.0, -56.0, 0.0])


def test_integer_arithmetic_and_compares_stop_cotangents(integer_module) -> None:
    x = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    dm, dc, dg = np.ones(4, np.float32), np.array([5, 6, 7, 8], np.int32), np.array([1, 1, 0, 1], bool)
    # through %m only neg (integer arithmetic) leads back: nothing; %c's dout is cast back; %g's is stopped
    np.testing.assert_array_equal(integer_module.int_arith_grad(x, dm, dc, dg), [5.0, 6.0, 7.0, 8.0])


def test_function_without_float_argument_says_why(integer_module) -> None:
    for name in ("count_grad", "count_value_and_grad"):
        with pytest.raises(AttributeError, match="@count has no float argument"):
            getattr(integer_module, name)
    assert "count_grad" in integer_module.no_grad
    with pytest.raises(AttributeError, match="has no function 'nothing'"):
        integer_module.nothing  # noqa: B018


# ---------------------------------------------------------------------------
# opc-fuse: the fused model's gradients are the unfused one's
# ---------------------------------------------------------------------------


def two_layers(dt: str) -> str:
    t = lambda *s: ttype(s, dt)  # noqa: E731
    return f"""
func.func @layers_{dt}(%x: {t(6, 5)}, %w1: {t(7, 5)}, %b1: {t(7)}, %w2: {t(7, 3)}, %b2: {t(3)}) -> {t(6, 3)} {{
  %mm = opc.matmul %x, %w1 {{trans_y = true}} : ({t(6, 5)}, {t(7, 5)}) -> {t(6, 7)}
  %z = opc.add %mm, %b1 : ({t(6, 7)}, {t(7)}) -> {t(6, 7)}
  %h = opc.gelu %z {{approximate = true}} : ({t(6, 7)}) -> {t(6, 7)}
  %mm2 = opc.matmul %h, %w2 : ({t(6, 7)}, {t(7, 3)}) -> {t(6, 3)}
  %z2 = opc.add %b2, %mm2 : ({t(3)}, {t(6, 3)}) -> {t(6, 3)}
  %y = opc.relu %z2 : ({t(6, 3)}) -> {t(6, 3)}
  func.return %y : {t(6, 3)}
}}
"""


@pytest.fixture(scope="module")
def fused_and_plain():
    text = two_layers("f64") + two_layers("f32")
    return opc.compile(text, grad=True), opc.compile(text, grad=True, fuse=False)


def test_fuse_fuses_both_layers() -> None:
    from opc.api import prepare
    from opc.frontend import load_module

    fused_ir = str(prepare(load_module(two_layers("f32")), grad=True).module)
    # both layers fused in the forward and in its replays in _grad and _value_and_grad
    assert fused_ir.count("opc.fused_gemm_epilogue ") == 6 and "opc.matmul" not in fused_ir
    plain_ir = str(prepare(load_module(two_layers("f32")), grad=True, fuse=False).module)
    assert "opc.fused_gemm_epilogue " not in plain_ir and plain_ir.count("opc.matmul") >= 6


@pytest.mark.parametrize("dt", ["f64", "f32"])
def test_fused_model_gradients_equal_unfused(fused_and_plain, dt: str) -> None:
    fused, plain = fused_and_plain
    shapes = [(6, 5), (7, 5), (7,), (7, 3), (3,)]
    args = [RNG.uniform(-1, 1, s).astype(DTYPES[dt]) for s in shapes]
    d = RNG.uniform(-1, 1, (6, 3)).astype(DTYPES[dt])
    f = getattr(fused, f"layers_{dt}")
    close(f(*args), getattr(plain, f"layers_{dt}")(*args), dt, "forward")
    got = getattr(fused, f"layers_{dt}_grad")(*args, d)
    for g, w, what in zip(got, getattr(plain, f"layers_{dt}_grad")(*args, d), ("dx", "dw1", "db1", "dw2", "db2")):
        close(g, w, dt, what)
    if dt == "f64":
        for g, w in zip(got, finite_diff(f, args, [d], list(range(5)))):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# The registry's vjp column for grad ops
# ---------------------------------------------------------------------------


def test_every_grad_op_is_differentiable() -> None:
    """Through its rule by default (the same PATTERNS opc-decompose applies), or by a vjp of its own."""
    from opc.autodiff import vjp_of, vjp_through_rule
    from opc.ops.decompositions import PATTERNS
    from opc.ops.registry import REGISTRY

    for name, e in REGISTRY.items():
        if e.kind == "grad":
            vjp, _ = vjp_of(name)
            assert vjp is not None, name
            assert vjp is not vjp_through_rule or name in PATTERNS, name


def test_kernel_only_grad_op_without_vjp_is_an_error(monkeypatch) -> None:
    """A grad op realised only by a kernel (slice_grad, gather_grad) needs a vjp row of its own."""
    from opc.errors import OpcError
    from opc.ops import registry

    monkeypatch.setitem(registry.REGISTRY, "opc.relu_grad", registry.grad("kernel"))
    with pytest.raises(OpcError, match=r"no gradient rule for opc.relu_grad \(a kernel-only grad op needs a vjp"):
        opc.compile(f"func.func @f(%x: {T34}, %d: {T34}) -> {T34} {{\n"
                    f"  %r = opc.relu_grad %x, %d : ({T34}, {T34}) -> {T34}\n  func.return %r : {T34}\n}}\n", grad=True)


# ---------------------------------------------------------------------------
# Ops added with issue 11 (fused normalizations, losses, index maps): first
# and second order against finite differences, f64. Their grad ops
# (softmax_grad, layer_norm_grad, ...) are differentiated through their
# composite rules, slice_grad / gather_grad by their own vjps.
# ---------------------------------------------------------------------------


def nn_func(name: str, args: list[tuple[int, ...]], results: list[tuple[int, ...]], body: str) -> str:
    params = ", ".join(f"%{'abc'[i]}: {ttype(s, 'f64')}" for i, s in enumerate(args))
    outs = ", ".join(ttype(s, "f64") for s in results)
    rets = ", ".join(f"%r{i}" for i in range(len(results)))
    return f"func.func @nn_{name}({params}) -> ({outs}) {{\n  {body}\n  func.return {rets} : {outs}\n}}\n"


F = "f64"
NN_CASES: dict[str, tuple] = {  # name: arg shapes, result shapes, body (with {t(...)} types), samplers
    "sigmoid": ([A], [A], "%r0 = opc.sigmoid %a : ({A}) -> {A}", [uniform]),
    "reduce_min": ([A], [(3,)], "%r0 = opc.reduce_min %a {{axes = array<i64: 1>}} : ({A}) -> {S}", [uniform]),
    "reduce_mean": ([A], [()], "%r0 = opc.reduce_mean %a {{axes = array<i64: 0, 1>}} : ({A}) -> {E}", [uniform]),
    "matmul_bcast": ([(2, 3, 4), (4, 5)], [(2, 3, 5)],
                     "%r0 = opc.matmul %a, %b : ({T}, {W}) -> {T5}", [uniform, uniform]),
    "slice": ([A], [(2, 2)], "%r0 = opc.slice %a {{start = array<i64: 1, 0>, limit = array<i64: 3, 4>, "
              "strides = array<i64: 1, 2>}} : ({A}) -> {P}", [uniform]),
    "concat": ([A, (3, 2)], [(3, 6)], "%r0 = opc.concat %a, %b {{axis = 1}} : ({A}, {C2}) -> {C6}", [uniform, uniform]),
    "gather": ([(5, 4)], [(2, 2, 4)],
               "%i = arith.constant dense<[[0, 2], [4, 2]]> : tensor<2x2xi64>\n"
               "  %r0 = opc.gather %a, %i {{axis = 0}} : ({G}, tensor<2x2xi64>) -> {GO}", [uniform]),
    "softmax": ([A], [A], "%r0 = opc.softmax %a {{axis = -1}} : ({A}) -> {A}", [uniform]),
    "log_softmax": ([A], [A], "%r0 = opc.log_softmax %a {{axis = 1}} : ({A}) -> {A}", [uniform]),
    "layer_norm": ([A, (4,), (4,)], [A, (3,), (3,)],
                   "%r0, %r1, %r2 = opc.layer_norm %a, %b, %c {{begin_norm_axis = 1}} : ({A}, {B}, {B}) -> "
                   "({A}, {S}, {S})", [uniform, uniform, uniform]),
    "softmax_cross_entropy": ([A], [(3, 1), A],
                              "%l = arith.constant dense<[[3], [0], [2]]> : tensor<3x1xi64>\n"
                              "  %r0, %r1 = opc.softmax_cross_entropy %a, %l {{axis = -1}} : ({A}, tensor<3x1xi64>) -> "
                              "({L}, {A})", [uniform]),
}
NN_TYPES = {"A": ttype(A, F), "B": ttype(B, F), "S": ttype((3,), F), "E": ttype((), F), "T": ttype((2, 3, 4), F),
            "W": ttype((4, 5), F), "T5": ttype((2, 3, 5), F), "P": ttype((2, 2), F), "C2": ttype((3, 2), F),
            "C6": ttype((3, 6), F), "G": ttype((5, 4), F), "GO": ttype((2, 2, 4), F), "L": ttype((3, 1), F)}


@pytest.fixture(scope="module")
def nn_module():
    text = "".join(nn_func(n, args, res, body.format(**NN_TYPES)) for n, (args, res, body, _) in NN_CASES.items())
    return compile_kept(text, keep=lambda n: not n.endswith("_value_and_grad"), second_order=lambda n: True)


@pytest.mark.parametrize("name", list(NN_CASES))
def test_nn_op_first_and_second_order_finite_differences(nn_module, name: str) -> None:
    shapes, results, _, samplers = NN_CASES[name]
    args = [s(shape) for s, shape in zip(samplers, shapes)]
    douts = [RNG.uniform(-1, 1, s) for s in results]
    f, grad = getattr(nn_module, f"nn_{name}"), getattr(nn_module, f"nn_{name}_grad")
    got = as_tuple(grad(*args, *douts))
    for i, (g, w) in enumerate(zip(got, finite_diff(f, args, douts, list(range(len(args)))))):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{name}: grad of argument {i}")
    dds = [RNG.uniform(-1, 1, np.shape(g)) for g in got]
    got2 = as_tuple(getattr(nn_module, f"nn_{name}_grad_grad")(*args, *douts, *dds))
    want2 = finite_diff(grad, [*args, *douts], dds, list(range(len(args) + len(douts))))
    for i, (g, w) in enumerate(zip(got2, want2)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{name}: second-order grad of argument {i}")
