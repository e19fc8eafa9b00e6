"""fused_gemm_epilogue's gradient over every activation x trans_x x trans_y x dtype, against
NumPy and finite differences; a fused model's gradients equal the unfused one's."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import (
    DTYPES,
    RNG,
    close,
    compile_grad,
    compile_kept,
    finite_diff,
    gelu_t,
    gelu_t_grad,
    second_order_check,
    ttype,
)

import opc

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


def issue_program(dt: str) -> str:
    """The differential fuzzer's crash (issue 38, item 9): the reserve space Z of a gelu
    fused_gemm_epilogue feeds later ops, so the backward's fused_gemm_epilogue_grad has dx and dy
    read by one add: an epilogue nest on dx must not read dy (not written while it runs)."""
    t, b4 = f"tensor<3x3x{dt}>", f"tensor<1x3x3x3x{dt}>"
    b2 = f"({b4}, {b4}) -> {b4}"
    return (
        f"func.func @f(%a0: {t}) -> {b4} {{\n"
        f"  %v1 = opc.full {{value = 0.5 : f64}} : () -> tensor<3x{dt}>\n"
        f"  %v2, %v3 = opc.fused_gemm_epilogue %a0, %a0, %v1 {{trans_x = false, trans_y = true, activation = \"gelu\"}}"
        f" : ({t}, {t}, tensor<3x{dt}>) -> ({t}, {t})\n"
        f"  %v4 = opc.broadcast_to %v3 : ({t}) -> {b4}\n"
        f"  %v5 = opc.minimum %v4, %v4 : {b2}\n"
        f"  %v6 = opc.add %v5, %v4 : {b2}\n"
        f"  %v7 = opc.gelu %v6 : ({b4}) -> {b4}\n"
        f"  %v8 = opc.div %v7, %v4 : {b2}\n"
        f"  func.return %v8 : {b4}\n}}\n"
    )


@pytest.mark.parametrize("dt", ["f64", "f32"])
def test_reserve_space_feeds_later_ops(dt: str) -> None:
    """Issue 38 item 9: compiled with grad=True (an internal compiler error before); forward
    against NumPy, gradient against finite differences of the closed form."""
    m = compile_grad(issue_program(dt))
    rng = np.random.default_rng(138)  # its own: the module's RNG depends on which tests ran before (xdist)
    a = rng.uniform(0.5, 1.0, (3, 3))  # Z = a a^T + 0.5 > 0.5: the div is far from 0

    def f(a):
        z = np.broadcast_to(a @ a.T + 0.5, (1, 3, 3, 3))
        return gelu_t(2 * z) / z

    d = rng.uniform(-1, 1, (1, 3, 3, 3))
    close(m.f(a.astype(DTYPES[dt])), f(a), dt, "forward")
    want = finite_diff(f, [a], [d], [0])[0]
    # central differences (step 1e-6) are good to about 1e-9 here, at f64's tolerance: f32's bounds both
    fd = "f32" if dt == "f64" else dt
    close(m.f_grad(a.astype(DTYPES[dt]), d.astype(DTYPES[dt])), want, fd, "grad")
    value, grad = m.f_value_and_grad(a.astype(DTYPES[dt]), d.astype(DTYPES[dt]))
    close(value, f(a), dt, "value")
    close(grad, want, fd, "value_and_grad")


def test_epilogue_nest_reads_other_gemm_results() -> None:
    """A nest reading the GEMM's first result and another of its results (dx - dy of the grad op,
    out - Z of the forward) is no epilogue of it: it runs after the GEMM, numbers as NumPy's."""
    t, v = "tensor<4x4xf64>", "tensor<4xf64>"
    m = opc.compile(
        f"func.func @g(%x: {t}, %y: {t}, %d: {t}) -> {t} {{\n"
        f"  %dx, %dy, %db = opc.fused_gemm_epilogue_grad %x, %y, %d {{trans_x = true}} : "
        f"({t}, {t}, {t}) -> ({t}, {t}, {v})\n"
        f"  %s = opc.sub %dx, %dy : ({t}, {t}) -> {t}\n"
        f"  func.return %s : {t}\n}}\n"
        f"func.func @h(%x: {t}, %y: {t}, %b: {v}) -> {t} {{\n"
        f"  %o, %z = opc.fused_gemm_epilogue %x, %y, %b {{activation = \"gelu\"}} : ({t}, {t}, {v}) -> ({t}, {t})\n"
        f"  %s = opc.sub %o, %z : ({t}, {t}) -> {t}\n"
        f"  func.return %s : {t}\n}}\n"
    )
    x, y, d, b = RNG.uniform(-1, 1, (4, 4)), RNG.uniform(-1, 1, (4, 4)), RNG.uniform(-1, 1, (4, 4)), RNG.uniform(-1, 1, 4)
    # Z = x^T y: dx = (d y^T)^T = y d^T, dy = x d
    close(m.g(x, y, d), y @ d.T - x @ d, "f64", "dx - dy")
    z = x @ y + b
    close(m.h(x, y, b), gelu_t(z) - z, "f64", "out - Z")


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


ONE_ROW = """
func.func @step(%h: tensor<1x6xf64>, %r: tensor<5x6xf64>, %xw: tensor<1x5xf64>) -> tensor<1x5xf64> {
  %mm = opc.matmul %h, %r {trans_y = true} : (tensor<1x6xf64>, tensor<5x6xf64>) -> tensor<1x5xf64>
  %a = opc.add %xw, %mm : (tensor<1x5xf64>, tensor<1x5xf64>) -> tensor<1x5xf64>
  %z = opc.relu %a : (tensor<1x5xf64>) -> tensor<1x5xf64>
  func.return %z : tensor<1x5xf64>
}
"""


def test_one_row_addend_fuses_with_its_gradient() -> None:
    """A batch-1 recurrent step's h @ R^T + xw[t] ([1, N] addend) becomes a fused GEMM with xw as its
    bias (opc_fuse.py): forward and every gradient as NumPy's and as finite differences say."""
    from opc.api import prepare
    from opc.frontend import load_module

    assert "opc.fused_gemm_epilogue " in str(prepare(load_module(ONE_ROW), grad=True).module)
    m = opc.compile(ONE_ROW, grad=True)
    args = [RNG.uniform(-1, 1, s) for s in [(1, 6), (5, 6), (1, 5)]]
    d = RNG.uniform(-1, 1, (1, 5))
    np.testing.assert_allclose(m.step(*args), np.maximum(args[0] @ args[1].T + args[2], 0), rtol=1e-12)
    for g, w in zip(m.step_grad(*args, d), finite_diff(m.step, args, [d], [0, 1, 2])):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
