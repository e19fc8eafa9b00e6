"""GEMM epilogues (opc-schedule's sweep 3, opc_loops.gemm's epilogue region, runtime/opc_gemm.h's
opc_gemm_ep_*): a flat pointwise chain on a GEMM's result -- the exporter's erf GELU, a residual
add, longer chains -- runs on each finished block of the GEMM's output. Against NumPy over a grid
of shapes (odd sizes, 2-D and 3-D, batched, transposed, several K and row blocks), with and without
bias, in f32, f64, f16 and bf16, at 1 and 2 threads; what must stay unfused stays so and is right too."""

from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest

import opc
from opc.frontend import load_module
from opc.transforms.opc_schedule import plan

DT = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.dtype(ml_dtypes.bfloat16)}
TOL = {"f32": 2e-5, "f64": 1e-12, "f16": 2e-2, "bf16": 4e-2}  # the GEMM's sums (inputs scaled to O(1) results)


def t(shape: tuple[int, ...], dt: str) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{dt}>"


def chain(kind: str, z: str, shape: tuple[int, ...], dt: str) -> tuple[list[str], str]:
    """The ops of a chain on %z (reading %r, full size, where it needs one) and its result's name."""
    s, c = t(shape, dt), t((), dt)
    if kind == "gelu_erf":  # the exporter's x * 0.5 * (1 + erf(x / sqrt 2)), as the block's ONNX has it
        return [f"%s2 = arith.constant dense<1.4142135623730951> : {c}",
                f"%d = opc.div {z}, %s2 : ({s}, {c}) -> {s}",
                f"%e = opc.erf %d : ({s}) -> {s}",
                f"%one = arith.constant dense<1.0> : {c}",
                f"%a = opc.add %e, %one : ({s}, {c}) -> {s}",
                f"%p = opc.mul {z}, %a : ({s}, {s}) -> {s}",
                f"%half = arith.constant dense<0.5> : {c}",
                f"%y = opc.mul %p, %half : ({s}, {c}) -> {s}"], "%y"
    if kind == "residual":
        return [f"%y = opc.add %r, {z} : ({s}, {s}) -> {s}"], "%y"
    assert kind == "several"  # tanh(z / 2) * r + relu(z), z read three times
    return [f"%h = arith.constant dense<0.5> : {c}",
            f"%u = opc.mul {z}, %h : ({s}, {c}) -> {s}",
            f"%v = opc.tanh %u : ({s}) -> {s}",
            f"%w2 = opc.mul %v, %r : ({s}, {s}) -> {s}",
            f"%q = opc.relu {z} : ({s}) -> {s}",
            f"%y = opc.add %w2, %q : ({s}, {s}) -> {s}"], "%y"


def reference(kind: str, z: np.ndarray, r: np.ndarray) -> np.ndarray:
    if kind == "gelu_erf":
        return z * 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    if kind == "residual":
        return r + z
    return np.tanh(z * 0.5) * r + np.maximum(z, 0)


# (name, x shape, w shape, trans_y, batched w)
SHAPES = [
    ("1x1x1", (1, 1), (1, 1), False),
    ("5x3x7", (5, 3), (3, 7), False),
    ("13x37x19", (13, 37), (37, 19), False),
    ("4x40x70", (4, 40), (40, 70), False),  # few rows: B read in place, an epilogue per column tile
    ("3x50x70t", (3, 50), (70, 50), True),  # the same with B transposed
    ("150x300x40", (150, 300), (300, 40), False),  # several K blocks and row blocks
    ("2x9x33x17", (2, 9, 33), (33, 17), False),  # 3-D x, 2-D w: one GEMM of 18 rows
    ("3x4x6x5t", (3, 4, 6), (5, 6), True),  # transposed w
    ("2x5x8x9b", (2, 5, 8), (2, 8, 9), False),  # batched w: a GEMM per batch (rows b * m + i)
    ("2x12x8x9b", (2, 12, 8), (2, 8, 9), False),  # the same past the few-row path: the blocked GEMM's epilogue
    ("37x20x4", (37, 20), (20, 4), False),  # rows of 4 columns: the epilogue's own loop for them
]
KINDS = ["gelu_erf", "residual", "several"]
CASES = [(s, k, dt, bias) for s in SHAPES for k in KINDS for dt in DT for bias in (False, True)
         if dt == "f32" or (k == "gelu_erf" and s[0] in ("13x37x19", "2x9x33x17", "37x20x4"))]


def case_name(shape_name: str, kind: str, dt: str, bias: bool) -> str:
    return f"f_{kind}_{shape_name}_{dt}{'_bias' if bias else ''}"


def out_shape(xs: tuple[int, ...], ws: tuple[int, ...], trans_y: bool) -> tuple[int, ...]:
    n = ws[-2] if trans_y else ws[-1]
    return (*xs[:-1], n)


def function(shape_name: str, xs, ws, trans_y: bool, kind: str, dt: str, bias: bool) -> str:  # noqa: ANN001
    zs = out_shape(xs, ws, trans_y)
    attrs = " {trans_y = true}" if trans_y else ""
    args = [f"%x: {t(xs, dt)}", f"%w: {t(ws, dt)}", f"%r: {t(zs, dt)}"] + ([f"%b: {t(zs[-1:], dt)}"] if bias else [])
    lines = [f"%m = opc.matmul %x, %w{attrs} : ({t(xs, dt)}, {t(ws, dt)}) -> {t(zs, dt)}"]
    z = "%m"
    if bias:
        lines.append(f"%z = opc.add %m, %b : ({t(zs, dt)}, {t(zs[-1:], dt)}) -> {t(zs, dt)}")
        z = "%z"
    ops, y = chain(kind, z, zs, dt)
    body = "\n  ".join(lines + ops)
    return (f"func.func @{case_name(shape_name, kind, dt, bias)}({', '.join(args)}) -> {t(zs, dt)} {{\n"
            f"  {body}\n  func.return {y} : {t(zs, dt)}\n}}\n")


SOURCE = "".join(function(name, xs, ws, ty, kind, dt, bias) for (name, xs, ws, ty), kind, dt, bias in CASES)


@pytest.fixture(scope="module")
def module():  # noqa: ANN201
    return opc.compile(SOURCE)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=lambda c: case_name(c[0][0], *c[1:]))
def test_epilogue_matches_numpy(module, case, threads: int) -> None:  # noqa: ANN001
    (name, xs, ws, trans_y), kind, dt, bias = case
    zs = out_shape(xs, ws, trans_y)
    rng = np.random.default_rng(len(name) + 7 * len(kind))
    k = xs[-1]
    x = (rng.standard_normal(xs) / math.sqrt(k)).astype(DT[dt])
    w = rng.standard_normal(ws).astype(DT[dt])
    r = rng.standard_normal(zs).astype(DT[dt])
    b = rng.standard_normal(zs[-1:]).astype(DT[dt])
    args = (x, w, r, b) if bias else (x, w, r)
    wd = w.astype(np.float64)
    z = x.astype(np.float64) @ (np.swapaxes(wd, -1, -2) if trans_y else wd)
    if bias:
        z = z + b.astype(np.float64)
    want = reference(kind, z, r.astype(np.float64))
    before = opc.get_num_threads()
    try:
        opc.set_num_threads(threads)
        got = getattr(module, case_name(name, kind, dt, bias))(*args)
    finally:
        opc.set_num_threads(before)
    assert got.dtype == DT[dt] and got.shape == zs
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=TOL[dt], atol=TOL[dt])


def test_every_case_is_fused(module) -> None:  # noqa: ANN001
    """Each function's chain runs as its GEMM's epilogue: one GEMM call with an epilogue and no
    loop nest of its own (the C has no other kernel function for these functions)."""
    c = module.c_source
    as_bias = 0
    for (name, xs, *_), kind, dt, bias in CASES:
        fn = case_name(name, kind, dt, bias)
        body = c.split(f"int opc_fn_{fn}(")[1].split("cleanup:")[0]
        # with one row, a residual [1, N] is the GEMM's bias (opc-fuse): no epilogue left to run
        one_row_residual = kind == "residual" and xs[0] == 1 and not bias
        as_bias += one_row_residual
        gemm = "opc_rt_gemm_f32(" if one_row_residual else "opc_rt_gemm_ep_"
        assert gemm in body and not re.search(r"^\s+opc_k_\w+\(", body, re.MULTILINE), fn  # no nest
    assert c.count("opc_rt_gemm_ep_f32(") >= len([c_ for c_ in CASES if c_[2] == "f32"]) - as_bias
    assert "opc_rt_gemm_ep_f64(" in c and "opc_rt_gemm_ep_f16(" in c and "opc_rt_gemm_ep_bf16(" in c


def test_cuda_plans_no_epilogue() -> None:
    """The CUDA backend's GEMMs take no epilogue: its plan keeps the chain a kernel of its own."""
    from opc.explain import explain_kernels

    name = case_name("13x37x19", "residual", "f32", False)
    module = load_module(function("13x37x19", (13, 37), (37, 19), False, "residual", "f32", False)).module
    assert "kernel 0 (gemm): matmul, add" in explain_kernels(module, "cpu")
    cuda = explain_kernels(module, "cuda")
    assert "kernel 0 (gemm): matmul\n" in cuda and "kernel 1 (elementwise): add" in cuda, (name, cuda)


def kernels(src: str, name: str) -> list[tuple[str, list[str]]]:
    fn = next(f for f in load_module(src).module.ops if f.sym_name.data == name)
    return [(k.kind, [o.name.removeprefix("opc.") for o in k.ops]) for k in plan(fn).kernels]


def test_schedule_takes_the_chain_into_the_gemm() -> None:
    name = case_name("2x9x33x17", "gelu_erf", "f32", True)
    src = function("2x9x33x17", (2, 9, 33), (33, 17), False, "gelu_erf", "f32", True)
    assert kernels(src, name) == [("gemm", ["matmul", "add", "div", "erf", "add", "mul", "mul"])]
    fn = next(f for f in load_module(src).module.ops if f.sym_name.data == name)
    assert [k.kind for k in plan(fn, epilogues=False).kernels] == ["gemm", "elementwise"]  # the switch


# What stays apart: a chain that broadcasts along columns or transposes, a GEMM result read before
# the chain runs. (name, function, kernel kinds, reference)
S, W = (6, 5), (5, 4)
UNFUSED = {
    "column_broadcast": (  # a [m, 1] addend: not one value per column
        f"func.func @column_broadcast(%x: {t(S, 'f32')}, %w: {t(W, 'f32')}, %c: {t((6, 1), 'f32')}) -> {t((6, 4), 'f32')} {{\n"
        f"  %m = opc.matmul %x, %w : ({t(S, 'f32')}, {t(W, 'f32')}) -> {t((6, 4), 'f32')}\n"
        f"  %y = opc.add %m, %c : ({t((6, 4), 'f32')}, {t((6, 1), 'f32')}) -> {t((6, 4), 'f32')}\n"
        f"  func.return %y : {t((6, 4), 'f32')}\n}}\n",
        ["gemm", "elementwise"], lambda x, w, c: x @ w + c),
    "transposed": (
        f"func.func @transposed(%x: {t(S, 'f32')}, %w: {t(W, 'f32')}) -> {t((4, 6), 'f32')} {{\n"
        f"  %m = opc.matmul %x, %w : ({t(S, 'f32')}, {t(W, 'f32')}) -> {t((6, 4), 'f32')}\n"
        f"  %e = opc.exp %m : ({t((6, 4), 'f32')}) -> {t((6, 4), 'f32')}\n"
        f"  %y = opc.transpose %e {{perm = array<i64: 1, 0>}} : ({t((6, 4), 'f32')}) -> {t((4, 6), 'f32')}\n"
        f"  func.return %y : {t((4, 6), 'f32')}\n}}\n",
        ["gemm", "elementwise"], lambda x, w: np.exp(x @ w).T),
    "read_before": (  # %m also feeds a reduction that runs before the chain's root
        f"func.func @read_before(%x: {t(S, 'f32')}, %w: {t(W, 'f32')}) -> ({t((6, 4), 'f32')}, {t((4,), 'f32')}) {{\n"
        f"  %m = opc.matmul %x, %w : ({t(S, 'f32')}, {t(W, 'f32')}) -> {t((6, 4), 'f32')}\n"
        f"  %s = opc.reduce_sum %m {{axes = array<i64: 0>}} : ({t((6, 4), 'f32')}) -> {t((4,), 'f32')}\n"
        f"  %e = opc.tanh %m : ({t((6, 4), 'f32')}) -> {t((6, 4), 'f32')}\n"
        f"  %y = opc.add %e, %s : ({t((6, 4), 'f32')}, {t((4,), 'f32')}) -> {t((6, 4), 'f32')}\n"
        f"  func.return %y, %s : {t((6, 4), 'f32')}, {t((4,), 'f32')}\n}}\n",
        ["gemm", "reduction", "elementwise"],
        lambda x, w: (np.tanh(x @ w) + (x @ w).sum(0), (x @ w).sum(0))),
}


@pytest.mark.parametrize("name", list(UNFUSED))
def test_what_does_not_match_stays_apart_and_right(name: str) -> None:
    src, kinds, ref = UNFUSED[name]
    assert [k for k, _ in kernels(src, name)] == kinds
    m = opc.compile(src)
    assert "opc_rt_gemm_ep_" not in m.c_source
    rng = np.random.default_rng(1)
    fn = next(f for f in load_module(src).module.ops if f.sym_name.data == name)
    args = [rng.standard_normal(a.type.get_shape()).astype(np.float32) for a in fn.args]
    got, want = getattr(m, name)(*args), ref(*(a.astype(np.float64) for a in args))
    for g, w_ in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(g, w_, rtol=1e-5, atol=1e-5)


def test_value_and_grad_of_a_two_layer_mlp() -> None:
    """Training: the forward's GELU values are saved for the backward (not in place: the GEMM keeps
    its buffer, the chain writes its own), and the backward's GELU grad chain on fc2's dx runs as
    the epilogue of fused_gemm_epilogue_grad's dx GEMM. Value and every gradient against NumPy."""
    xs, h, n = (5, 6), 9, 7
    f64 = "f64"
    ops, g = chain("gelu_erf", "%z", (5, h), f64)
    body = "\n  ".join([f"%mm = opc.matmul %x, %w1 : ({t(xs, f64)}, {t((6, h), f64)}) -> {t((5, h), f64)}",
                        f"%z = opc.add %mm, %b1 : ({t((5, h), f64)}, {t((h,), f64)}) -> {t((5, h), f64)}", *ops,
                        f"%m2 = opc.matmul {g}, %w2 : ({t((5, h), f64)}, {t((h, n), f64)}) -> {t((5, n), f64)}",
                        f"%o = opc.add %m2, %b2 : ({t((5, n), f64)}, {t((n,), f64)}) -> {t((5, n), f64)}"])
    src = (f"func.func @mlp(%x: {t(xs, f64)}, %w1: {t((6, h), f64)}, %b1: {t((h,), f64)}, %w2: {t((h, n), f64)}, "
           f"%b2: {t((n,), f64)}) -> {t((5, n), f64)} {{\n  {body}\n  func.return %o : {t((5, n), f64)}\n}}\n")
    m = opc.compile(src, grad=True)
    assert "opc_rt_gemm_ep_f64(" in m.c_source.split("opc_fn_mlp_value_and_grad(")[1]  # an epilogue there
    rng = np.random.default_rng(2)
    x, w1, b1, w2, b2 = (rng.standard_normal(s) for s in (xs, (6, h), (h,), (h, n), (n,)))
    erf = np.vectorize(math.erf)
    z = x @ w1 + b1
    a = z * 0.5 * (1 + erf(z / math.sqrt(2)))
    dy = rng.standard_normal((5, n))
    dz = (dy @ w2.T) * (0.5 * (1 + erf(z / math.sqrt(2))) + z * np.exp(-z * z / 2) / math.sqrt(2 * math.pi))
    want = [a @ w2 + b2, dz @ w1.T, x.T @ dz, dz.sum(0), a.T @ dy, dy.sum(0)]
    for got, ref in zip(m.mlp_value_and_grad(x, w1, b1, w2, b2, dy), want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_backward_gelu_grad_chain_is_the_dx_gemm_epilogue() -> None:
    from opc.autodiff import add_grad_functions
    from opc.ir import make_context
    from opc.transforms.opc_fuse import FusePass

    xs, h = (8, 16), 32
    ops, g = chain("gelu_erf", "%z", (8, h), "f32")
    body = "\n  ".join([f"%mm = opc.matmul %x, %w1 : ({t(xs, 'f32')}, {t((16, h), 'f32')}) -> {t((8, h), 'f32')}",
                        f"%z = opc.add %mm, %b1 : ({t((8, h), 'f32')}, {t((h,), 'f32')}) -> {t((8, h), 'f32')}", *ops,
                        f"%o = opc.matmul {g}, %w2 : ({t((8, h), 'f32')}, {t((h, 4), 'f32')}) -> {t((8, 4), 'f32')}"])
    src = (f"func.func @mlp(%x: {t(xs, 'f32')}, %w1: {t((16, h), 'f32')}, %b1: {t((h,), 'f32')}, "
           f"%w2: {t((h, 4), 'f32')}) -> {t((8, 4), 'f32')} {{\n  {body}\n  func.return %o : {t((8, 4), 'f32')}\n}}\n")
    module = load_module(src).module
    FusePass().apply(make_context(), module)
    add_grad_functions(module)
    for name in ("mlp_grad", "mlp_value_and_grad"):
        fn = next(f for f in module.ops if f.sym_name.data == name)
        gemms = [[o.name.removeprefix("opc.") for o in k.ops] for k in plan(fn).kernels if k.kind == "gemm"]
        assert any(ops[0] == "matmul" and "exp" in ops for ops in gemms), gemms  # dx = dy @ w2^T, then the chain
    # value_and_grad keeps the GELU's intermediate values for the backward: three nests (div; erf, add;
    # mul, mul), all three the fc1 GEMM's epilogue
    assert ["fused_gemm_epilogue", "div", "erf", "add", "mul", "mul"] in gemms, gemms


def test_value_and_grad_of_an_mlp_keeps_the_pre_activation() -> None:
    """With the backward reading the GEMM's result too, the epilogue is not in place: the GEMM keeps
    its buffer (read by the gradient) and the chain writes its own; the numbers are NumPy's."""
    xs, ws = (4, 6), (6, 8)
    src = function("mlp", xs, ws, False, "gelu_erf", "f64", True).replace(
        "@" + case_name("mlp", "gelu_erf", "f64", True), "@mlp")
    m = opc.compile(src, grad=True)
    rng = np.random.default_rng(2)
    x, w, r, b = (rng.standard_normal(s) for s in (xs, ws, (4, 8), (8,)))
    z = x @ w + b
    erf = np.vectorize(math.erf)
    y = z * 0.5 * (1 + erf(z / math.sqrt(2)))
    dy = rng.standard_normal(y.shape)
    dz = dy * (0.5 * (1 + erf(z / math.sqrt(2))) + z * np.exp(-z * z / 2) / math.sqrt(2 * math.pi))
    out = m.mlp_value_and_grad(x, w, r, b, dy)
    np.testing.assert_allclose(out[0], y, rtol=1e-12, atol=1e-12)
    grads = dict(zip(("x", "w", "r", "b"), out[1:]))
    np.testing.assert_allclose(grads["x"], dz @ w.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grads["w"], x.T @ dz, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grads["b"], dz.sum(0), rtol=1e-12, atol=1e-12)


def test_grad_of_a_relu_epilogue_whose_pre_activation_is_used() -> None:
    """opc.fused_gemm_epilogue written out, its reserve_space (the pre-activation z) returned beside the
    output: z's cotangent adds to relu's grad of dout (the rule's second branch); against NumPy."""
    xs, ws, zs, f64 = (4, 6), (6, 8), (4, 8), "f64"
    src = (f"func.func @f(%x: {t(xs, f64)}, %w: {t(ws, f64)}, %b: {t((8,), f64)}) -> ({t(zs, f64)}, {t(zs, f64)}) {{\n"
           f"  %o, %z = opc.fused_gemm_epilogue %x, %w, %b {{activation = \"relu\"}} : ({t(xs, f64)}, {t(ws, f64)}, "
           f"{t((8,), f64)}) -> ({t(zs, f64)}, {t(zs, f64)})\n"
           f"  func.return %o, %z : {t(zs, f64)}, {t(zs, f64)}\n}}\n")
    m = opc.compile(src, grad=True)
    rng = np.random.default_rng(3)
    x, w, b, do, dz_in = (rng.standard_normal(s) for s in (xs, ws, (8,), zs, zs))
    z = x @ w + b
    dz = do * (z > 0) + dz_in
    want = [np.maximum(z, 0), z, dz @ w.T, x.T @ dz, dz.sum(0)]
    for got, ref in zip(m.f_value_and_grad(x, w, b, do, dz_in), want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
