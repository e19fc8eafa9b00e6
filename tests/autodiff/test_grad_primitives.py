"""Every differentiable op's vjp, numerically: central finite differences in f64 (first and
second order) and closed-form NumPy formulas per dtype; the fused normalizations, losses and
index maps likewise. Each group of cases is one compiled module (a module-scoped fixture)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gradcheck import (
    DTYPES,
    RNG,
    A,
    B,
    as_tuple,
    close,
    compile_kept,
    finite_diff,
    gelu_e_grad,
    gelu_t_grad,
    positive,
    second_order_check,
    signed,
    ttype,
    uniform,
)

# ---------------------------------------------------------------------------
# Every differentiable primitive, in f64 (finite differences) and f32 (formula)
# ---------------------------------------------------------------------------

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
