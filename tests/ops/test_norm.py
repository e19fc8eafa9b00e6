"""batch_norm (inference and training: batch statistics, running statistics by
momentum, saved mean and rstd), batch_norm_grad, instance_norm and group_norm
(issue 19) on the CPU for f16, bf16, f32 and f64 against NumPy formulas, and
their gradients against finite differences. These run by their composite
rules on the built-in targets (instance/group norm through layer_norm's
kernel). One module."""

from __future__ import annotations

import numpy as np
import pytest
from oracle import FLOATS, func, np_dtype, random_array, ttype

import opc
from opc.errors import OpcError
from opc.ir import parse_text

SEED = 31
STATS = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64"}
SHAPES = [(2, 3), (2, 3, 5), (3, 4, 3, 2)]
EPS, MOMENTUM = 1e-3, 0.8
TOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 1e-5, "float64": 1e-12}


def axes(x) -> tuple[int, ...]:
    return (0, *range(2, x.ndim))


def bc(v, rank):
    return np.asarray(v, np.float64).reshape(-1, *[1] * (rank - 2))


def bn_infer_ref(x, s, b, m, v):
    x = np.asarray(x, np.float64)
    return (x - bc(m, x.ndim)) / np.sqrt(bc(v, x.ndim) + EPS) * bc(s, x.ndim) + bc(b, x.ndim)


def bn_train_ref(x, s, b, m, v):
    x = np.asarray(x, np.float64)
    bm, bv = x.mean(axes(x)), x.var(axes(x))
    y = (x - bc(bm, x.ndim)) / np.sqrt(bc(bv, x.ndim) + EPS) * bc(s, x.ndim) + bc(b, x.ndim)
    return (y, MOMENTUM * np.asarray(m, np.float64) + (1 - MOMENTUM) * bm,
            MOMENTUM * np.asarray(v, np.float64) + (1 - MOMENTUM) * bv, bm, 1 / np.sqrt(bv + EPS))


def bn_grad_ref(x, s, sm, sr, dy):
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    xhat = (x - bc(sm, x.ndim)) * bc(sr, x.ndim)
    g = dy * bc(s, x.ndim)
    a = axes(x)
    dx = bc(sr, x.ndim) * (g - g.mean(a, keepdims=True) - xhat * (g * xhat).mean(a, keepdims=True))
    return dx, (dy * xhat).sum(a), dy.sum(a)


def gn_ref(x, s, b, groups):
    x = np.asarray(x, np.float64)
    rows = x.reshape(x.shape[0] * groups, -1)
    m, v = rows.mean(1, keepdims=True), rows.var(1, keepdims=True)
    y = ((rows - m) / np.sqrt(v + EPS)).reshape(x.shape) * bc(s, x.ndim) + bc(b, x.ndim)
    return y, m.reshape(x.shape[0], groups), (1 / np.sqrt(v + EPS)).reshape(x.shape[0], groups)


def eps_attr() -> str:
    return f"epsilon = {EPS:.17e} : f64"


def sources(shape, dt: str) -> list[str]:
    c, st = shape[1], STATS[dt]
    tx, tc, ts = ttype(shape, dt), ttype((c,), dt), ttype((c,), st)
    tag = f"{len(shape)}d_{dt}"
    out = [
        func(f"bn_infer_{tag}", [(shape, dt)] + [((c,), dt)] * 4,
             f"%r = opc.batch_norm %a0, %a1, %a2, %a3, %a4 {{{eps_attr()}}} : ({tx}, {tc}, {tc}, {tc}, {tc}) -> {tx}",
             [(shape, dt)]),
        func(f"bn_train_{tag}", [(shape, dt)] + [((c,), dt)] * 4,
             f"%y, %rm, %rv, %sm, %sr = opc.batch_norm %a0, %a1, %a2, %a3, %a4 {{{eps_attr()}, momentum = "
             f"{MOMENTUM:.17e} : f64, training = true}} : ({tx}, {tc}, {tc}, {tc}, {tc}) -> ({tx}, {tc}, {tc}, {ts}, "
             f"{ts})", [(shape, dt), ((c,), dt), ((c,), dt), ((c,), st), ((c,), st)],
             ("%y", "%rm", "%rv", "%sm", "%sr")),
        func(f"bn_grad_{tag}", [(shape, dt), ((c,), dt), ((c,), st), ((c,), st), (shape, dt)],
             f"%dx, %ds, %db = opc.batch_norm_grad %a0, %a1, %a2, %a3, %a4 : ({tx}, {tc}, {ts}, {ts}, {tx}) -> "
             f"({tx}, {tc}, {tc})", [(shape, dt), ((c,), dt), ((c,), dt)], ("%dx", "%ds", "%db")),
    ]
    for op, groups, extra in (("instance_norm", c, ""), ("group_norm", 1, ", num_groups = 1")):
        if len(shape) == 2 and op == "instance_norm":
            continue
        tm = ttype((shape[0], groups), st)
        out.append(func(f"{op}_{tag}", [(shape, dt), ((c,), dt), ((c,), dt)],
                        f"%y, %m, %r = opc.{op} %a0, %a1, %a2 {{{eps_attr()}{extra}}} : ({tx}, {tc}, {tc}) -> ({tx}, "
                        f"{tm}, {tm})", [(shape, dt), ((shape[0], groups), st), ((shape[0], groups), st)],
                        ("%y", "%m", "%r")))
    if c % 2 == 0:
        tm = ttype((shape[0], 2), st)
        out.append(func(f"group_norm2_{tag}", [(shape, dt), ((c,), dt), ((c,), dt)],
                        f"%y, %m, %r = opc.group_norm %a0, %a1, %a2 {{{eps_attr()}, num_groups = 2}} : ({tx}, {tc}, "
                        f"{tc}) -> ({tx}, {tm}, {tm})", [(shape, dt), ((shape[0], 2), st), ((shape[0], 2), st)],
                        ("%y", "%m", "%r")))
    return out


def layer(shape) -> str:
    """sum of training batch_norm's y and its running mean (broadcast), and group_norm of it, in f64."""
    c, t = shape[1], "float64"
    tx, tc = ttype(shape, t), ttype((c,), t)
    groups = 2 if c % 2 == 0 else 1
    tm = ttype((shape[0], groups), t)
    body = (f"%y, %rm, %rv, %sm, %sr = opc.batch_norm %a0, %a1, %a2, %a3, %a4 {{{eps_attr()}, training = true}} : "
            f"({tx}, {tc}, {tc}, {tc}, {tc}) -> ({tx}, {tc}, {tc}, {tc}, {tc})\n"
            f"  %t = opc.tanh %y : ({tx}) -> {tx}\n"
            f"  %g, %m, %r0 = opc.group_norm %t, %a1, %a2 {{{eps_attr()}, num_groups = {groups}}} : ({tx}, {tc}, {tc}) "
            f"-> ({tx}, {tm}, {tm})\n"
            f"  %r = opc.mul %g, %g : ({tx}, {tx}) -> {tx}")
    return func(f"layer_{len(shape)}d", [(shape, t)] + [((c,), t)] * 4, body + "\n  %q = opc.reduce_sum %rv "
                "{axes = array<i64: 0>} : (" + tc + f") -> {ttype((), t)}", [(shape, t), ((), t)], ("%r", "%q"))


CASES = [(s, dt) for s in SHAPES for dt in FLOATS]


@pytest.fixture(scope="module")
def module():
    text = "\n".join([src for s, dt in CASES for src in sources(s, dt)] + [layer(s) for s in SHAPES])
    return opc.compile(text, target="cpu", grad=True)


def near(got, want, dt: str, what: str) -> None:
    assert got.dtype == np_dtype(dt) and got.shape == np.shape(want), (what, got.dtype, got.shape)
    err = float(np.max(np.abs(got.astype(np.float64) - want), initial=0.0))
    assert err <= TOL[dt] * (float(np.max(np.abs(want), initial=0.0)) + 1), (what, err)


@pytest.mark.parametrize("shape,dt", CASES, ids=[f"{len(s)}d_{dt}" for s, dt in CASES])
def test_norms(module, shape, dt: str) -> None:
    rng = np.random.default_rng(SEED)
    c, st, tag = shape[1], STATS[dt], f"{len(shape)}d_{dt}"
    x = random_array(shape, dt, rng, -2, 2)
    s, b, m = (random_array((c,), dt, rng, -1, 1) for _ in range(3))
    v = random_array((c,), dt, rng, 0.5, 2)
    near(getattr(module, f"bn_infer_{tag}")(x, s, b, m, v), bn_infer_ref(x, s, b, m, v), dt, "bn_infer")
    got = getattr(module, f"bn_train_{tag}")(x, s, b, m, v)
    for g, w, d, what in zip(got, bn_train_ref(x, s, b, m, v), [dt, dt, dt, st, st], ["y", "rm", "rv", "sm", "sr"]):
        near(g, w, d, what)
    sm, sr = random_array((c,), st, rng, -1, 1), random_array((c,), st, rng, 0.5, 2)
    dy = random_array(shape, dt, rng, -1, 1)
    for g, w, what in zip(getattr(module, f"bn_grad_{tag}")(x, s, sm, sr, dy), bn_grad_ref(x, s, sm, sr, dy),
                          ["dx", "dscale", "dbias"]):
        near(g, w, dt, what)
    for name, groups in (("instance_norm", c), ("group_norm", 1), ("group_norm2", 2)):
        fn = getattr(module, f"{name}_{tag}", None)
        if fn is None:
            continue
        for g, w, d in zip(fn(x, s, b), gn_ref(x, s, b, groups), [dt, st, st]):
            near(g, w, d, name)


def bn_infer_grad_ref(x, s, m, v, dy):
    """Inference batch_norm's vjp for x, scale, bias, mean and var, in closed form."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    a, r = axes(x), 1 / np.sqrt(np.asarray(v, np.float64) + EPS)
    k = np.asarray(s, np.float64) * r
    centred = (dy * (x - bc(m, x.ndim))).sum(a)
    return dy * bc(k, x.ndim), centred * r, dy.sum(a), -dy.sum(a) * k, -0.5 * centred * k * r * r


@pytest.mark.parametrize("shape,dt", CASES, ids=[f"{len(s)}d_{dt}" for s, dt in CASES])
def test_bn_inference_grad(module, shape, dt: str) -> None:
    """bn_infer's grad (its own vjp: two reductions) for all five arguments, and in f64 against
    finite differences of the forward."""
    rng = np.random.default_rng(SEED + 1)
    c, tag = shape[1], f"{len(shape)}d_{dt}"
    x = random_array(shape, dt, rng, -2, 2)
    s, b, m = (random_array((c,), dt, rng, -1, 1) for _ in range(3))
    v = random_array((c,), dt, rng, 0.5, 2)
    dy = random_array(shape, dt, rng, -1, 1)
    got = getattr(module, f"bn_infer_{tag}_grad")(x, s, b, m, v, dy)
    for g, w, what in zip(got, bn_infer_grad_ref(x, s, m, v, dy), ["dx", "dscale", "dbias", "dmean", "dvar"]):
        near(g, w, dt, what)
    if dt != "float64":
        return
    f, args, step = getattr(module, f"bn_infer_{tag}"), [x, s, b, m, v], 1e-6
    for i, ga in enumerate(got):
        probe = rng.uniform(-1, 1, np.shape(args[i]))
        plus = f(*[a + step * probe if j == i else a for j, a in enumerate(args)])
        minus = f(*[a - step * probe if j == i else a for j, a in enumerate(args)])
        fd = float(np.sum(dy * (plus - minus))) / (2 * step)
        assert abs(fd - float(np.sum(ga * probe))) <= 1e-6 * (1 + abs(fd)), (i, fd, float(np.sum(ga * probe)))


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{len(s)}d" for s in SHAPES])
def test_layer_grad_finite_differences(module, shape) -> None:
    rng = np.random.default_rng(SEED)
    c = shape[1]
    args = [rng.uniform(-1, 1, shape), rng.uniform(0.5, 1.5, c), rng.uniform(-1, 1, c), rng.uniform(-1, 1, c),
            rng.uniform(0.5, 2, c)]
    douts = [rng.uniform(-1, 1, shape), np.array(0.7)]
    f, g = getattr(module, f"layer_{len(shape)}d"), getattr(module, f"layer_{len(shape)}d_grad")
    grads = g(*args, *douts)
    eps = 1e-6
    for i, (a, ga) in enumerate(zip(args, grads)):
        probe = rng.uniform(-1, 1, np.shape(a))
        plus = f(*[v + eps * probe if j == i else v for j, v in enumerate(args)])
        minus = f(*[v - eps * probe if j == i else v for j, v in enumerate(args)])
        fd = sum(float(np.sum(d * (p - q))) for d, p, q in zip(douts, plus, minus)) / (2 * eps)
        assert abs(fd - float(np.sum(ga * probe))) <= 1e-6 * (1 + abs(fd)), (i, fd, float(np.sum(ga * probe)))


BAD = [
    ("%y = opc.batch_norm %x, %c, %c, %c, %c {training = true} : (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, "
     "tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x4xf32>", "training batch_norm has 5 results"),
    ("%y = opc.batch_norm %x, %d, %c, %c, %c : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<3xf32>, "
     "tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x4xf32>", "scale must have shape [3]"),
    ("%y, %m, %r = opc.group_norm %x, %c, %c {num_groups = 2} : (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>) "
     "-> (tensor<2x3x4xf32>, tensor<2x2xf32>, tensor<2x2xf32>)", "num_groups 2 does not divide the 3 channels"),
]


@pytest.mark.parametrize("body,message", BAD)
def test_verifier(body: str, message: str) -> None:
    text = (f"func.func @f(%x: tensor<2x3x4xf32>, %c: tensor<3xf32>, %d: tensor<4xf32>) {{\n  {body}\n"
            "  func.return\n}\n")
    with pytest.raises(OpcError) as err:
        parse_text(text, "bad.mlir")
    assert str(err.value).startswith("bad.mlir:2:3: error: ") and message in str(err.value), str(err.value)


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{len(s)}d" for s in SHAPES])
def test_training_y_only_grad_is_batch_norm_grad(shape) -> None:
    """Training batch_norm whose y alone is used: its vjp is batch_norm_grad from the saved mean and rstd
    (not the running statistics), in f64 against the closed form."""
    c, t = shape[1], "float64"
    tx, tc = ttype(shape, t), ttype((c,), t)
    body = (f"%y, %rm, %rv, %sm, %sr = opc.batch_norm %a0, %a1, %a2, %a3, %a4 {{{eps_attr()}, training = true}} : "
            f"({tx}, {tc}, {tc}, {tc}, {tc}) -> ({tx}, {tc}, {tc}, {tc}, {tc})")
    m = opc.compile(func("train_y", [(shape, t)] + [((c,), t)] * 4, body, [(shape, t)], ("%y",)), target="cpu",
                    grad=True)
    rng = np.random.default_rng(SEED)
    x, s, b, rm = (rng.uniform(-1, 1, d) for d in (shape, c, c, c))
    rv, dy = rng.uniform(0.5, 2, c), rng.uniform(-1, 1, shape)
    _, _, _, bm, br = bn_train_ref(x, s, b, rm, rv)
    got = m.train_y_grad(x, s, b, rm, rv, dy)
    for what, g, want in zip(("dx", "dscale", "dbias"), got, bn_grad_ref(x, s, bm, br, dy)):
        np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-12, err_msg=what)
