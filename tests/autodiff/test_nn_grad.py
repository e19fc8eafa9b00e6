"""Gradients of the ops real networks need (issue 11), in f64, against central
finite differences: every new differentiable op, each result with a cotangent
(layer_norm's mean and rstd and softmax_cross_entropy's softmax included, as
when they are used downstream), and two small networks (attention with heads
by broadcast matmul; an embedding bag). The same grad functions compiled with
decompose="all" (every fused op and grad op by its composite rule) must give
the same numbers as the kernels."""

from __future__ import annotations

import numpy as np
import pytest

import opc

RNG = np.random.default_rng(5)


def t(shape, dt: str = "f64") -> str:
    return f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}{dt}>"


def fn(name: str, args: dict[str, tuple], body: list[str], results: list[tuple[str, tuple]]) -> str:
    """func.func @name(%arg: type, ...) -> (...): args maps a name to (shape, dtype)."""
    params = ", ".join(f"%{n}: {t(s, d)}" for n, (s, d) in args.items())
    outs = ", ".join(t(s) for _, s in results)
    ret = f"func.return {', '.join(v for v, _ in results)} : {outs}"
    return f"func.func @{name}({params}) -> ({outs}) {{\n  " + "\n  ".join([*body, ret]) + "\n}\n"


F = "f64"
CASES: dict[str, tuple[str, dict[str, tuple]]] = {}


def add(name: str, args: dict[str, tuple], body: list[str], results: list[tuple[str, tuple]]) -> None:
    CASES[name] = (fn(name, args, body, results), args)


add("reduce_min", {"x": ((3, 4), F)},
    [f"%r = opc.reduce_min %x {{axes = array<i64: 1>}} : ({t((3, 4))}) -> {t((3,))}"], [("%r", (3,))])
add("reduce_mean", {"x": ((2, 3, 4), F)},
    [f"%r = opc.reduce_mean %x {{axes = array<i64: 0, 2>, keepdim = true}} : ({t((2, 3, 4))}) -> {t((1, 3, 1))}"],
    [("%r", (1, 3, 1))])
add("reduce_mean_all", {"x": ((2, 3), F)},
    [f"%r = opc.reduce_mean %x {{axes = array<i64: 0, 1>}} : ({t((2, 3))}) -> {t(())}"], [("%r", ())])
add("sigmoid", {"x": ((3, 4), F)}, [f"%r = opc.sigmoid %x : ({t((3, 4))}) -> {t((3, 4))}"], [("%r", (3, 4))])

MATMULS = [("bhsd", (2, 3, 4, 5), (2, 3, 5, 6), False, False), ("linear", (2, 3, 4, 5), (5, 6), False, False),
           ("linear_ty", (2, 4, 5), (6, 5), False, True), ("linear_tx", (2, 5, 4), (5, 6), True, False),
           ("left2", (4, 5), (3, 5, 6), False, False), ("heads", (2, 3, 4, 5), (2, 1, 5, 6), False, False),
           ("mixed", (2, 1, 4, 5), (1, 3, 5, 6), False, False), ("mixed_tt", (2, 1, 5, 4), (3, 6, 5), True, True)]
for _name, _xs, _ys, _tx, _ty in MATMULS:
    _x = np.swapaxes(np.zeros(_xs), -1, -2) if _tx else np.zeros(_xs)
    _y = np.swapaxes(np.zeros(_ys), -1, -2) if _ty else np.zeros(_ys)
    _rs = np.matmul(_x, _y).shape
    add(f"matmul_{_name}", {"x": (_xs, F), "y": (_ys, F)},
        [f"%r = opc.matmul %x, %y {{trans_x = {str(_tx).lower()}, trans_y = {str(_ty).lower()}}} : "
         f"({t(_xs)}, {t(_ys)}) -> {t(_rs)}"], [("%r", _rs)])

add("slice", {"x": ((4, 6), F)},
    [f"%r = opc.slice %x {{start = array<i64: 1, 0>, limit = array<i64: 4, 6>, strides = array<i64: 2, 3>}} : "
     f"({t((4, 6))}) -> {t((2, 2))}"], [("%r", (2, 2))])
add("concat", {"a": ((2, 3), F), "b": ((2, 1), F), "c": ((2, 2), F)},
    [f"%r = opc.concat %a, %b, %c {{axis = -1}} : ({t((2, 3))}, {t((2, 1))}, {t((2, 2))}) -> {t((2, 6))}"],
    [("%r", (2, 6))])
add("gather", {"x": ((5, 3), F), "idx": ((2, 3), "i64")},
    [f"%r = opc.gather %x, %idx : ({t((5, 3))}, {t((2, 3), 'i64')}) -> {t((2, 3, 3))}"], [("%r", (2, 3, 3))])
add("gather_axis1", {"x": ((2, 5, 3), F), "idx": ((4,), "i32")},
    [f"%r = opc.gather %x, %idx {{axis = 1}} : ({t((2, 5, 3))}, {t((4,), 'i32')}) -> {t((2, 4, 3))}"],
    [("%r", (2, 4, 3))])
add("softmax", {"x": ((3, 5), F)}, [f"%r = opc.softmax %x : ({t((3, 5))}) -> {t((3, 5))}"], [("%r", (3, 5))])
add("log_softmax", {"x": ((2, 4, 3), F)},
    [f"%r = opc.log_softmax %x {{axis = 1}} : ({t((2, 4, 3))}) -> {t((2, 4, 3))}"], [("%r", (2, 4, 3))])
add("layer_norm", {"x": ((2, 3, 4), F), "s": ((3, 4), F), "b": ((3, 4), F)},
    [f"%y, %m, %r = opc.layer_norm %x, %s, %b {{begin_norm_axis = 1}} : ({t((2, 3, 4))}, {t((3, 4))}, {t((3, 4))})"
     f" -> ({t((2, 3, 4))}, {t((2,))}, {t((2,))})"], [("%y", (2, 3, 4))])
add("layer_norm_stats", {"x": ((3, 5), F), "s": ((5,), F), "b": ((5,), F)},
    [f"%y, %m, %r = opc.layer_norm %x, %s, %b {{epsilon = 1.0e-01 : f64}} : ({t((3, 5))}, {t((5,))}, {t((5,))})"
     f" -> ({t((3, 5))}, {t((3,))}, {t((3,))})"], [("%y", (3, 5)), ("%m", (3,)), ("%r", (3,))])
add("layer_norm_stats_only", {"x": ((3, 5), F), "s": ((5,), F), "b": ((5,), F)},  # y unused: its cotangent is 0
    [f"%y, %m, %r = opc.layer_norm %x, %s, %b : ({t((3, 5))}, {t((5,))}, {t((5,))}) -> ({t((3, 5))}, {t((3,))}, "
     f"{t((3,))})"], [("%m", (3,)), ("%r", (3,))])
add("sce", {"x": ((4, 6), F), "label": ((4, 1), "i64")},
    [f"%l, %s = opc.softmax_cross_entropy %x, %label : ({t((4, 6))}, {t((4, 1), 'i64')}) -> ({t((4, 1))}, {t((4, 6))})"],
    [("%l", (4, 1))])
add("sce_axis1", {"x": ((2, 5, 3), F), "label": ((2, 1, 3), "i32")},
    [f"%l, %s = opc.softmax_cross_entropy %x, %label {{axis = 1}} : ({t((2, 5, 3))}, {t((2, 1, 3), 'i32')}) -> "
     f"({t((2, 1, 3))}, {t((2, 5, 3))})"], [("%l", (2, 1, 3)), ("%s", (2, 5, 3))])

# Attention with two heads: scores by a rank-4 broadcast matmul, a causal mask, softmax, then @ v.
B, H, S, D = 2, 2, 3, 4
add("attention", {"q": ((B, H, S, D), F), "k": ((B, H, S, D), F), "v": ((B, 1, S, D), F),
                  "mask": ((S, S), F)}, [
    f"%s = opc.matmul %q, %k {{trans_y = true}} : ({t((B, H, S, D))}, {t((B, H, S, D))}) -> {t((B, H, S, S))}",
    f"%c = opc.full {{value = 0.5 : f64}} : () -> {t((B, H, S, S))}",
    f"%sc = opc.mul %s, %c : ({t((B, H, S, S))}, {t((B, H, S, S))}) -> {t((B, H, S, S))}",
    f"%sm = opc.add %sc, %mask : ({t((B, H, S, S))}, {t((S, S))}) -> {t((B, H, S, S))}",
    f"%p = opc.softmax %sm : ({t((B, H, S, S))}) -> {t((B, H, S, S))}",
    f"%o = opc.matmul %p, %v : ({t((B, H, S, S))}, {t((B, 1, S, D))}) -> {t((B, H, S, D))}",
    f"%ot = opc.transpose %o {{perm = array<i64: 0, 2, 1, 3>}} : ({t((B, H, S, D))}) -> {t((B, S, H, D))}",
    f"%r = opc.reshape %ot : ({t((B, S, H, D))}) -> {t((B, S, H * D))}",
], [("%r", (B, S, H * D))])
# An embedding bag classifier: gather, mean over the bag, a linear layer, log_softmax.
add("embedding_bag", {"table": ((7, 4), F), "ids": ((2, 3), "i64"), "w": ((4, 5), F)}, [
    f"%e = opc.gather %table, %ids : ({t((7, 4))}, {t((2, 3), 'i64')}) -> {t((2, 3, 4))}",
    f"%m = opc.reduce_mean %e {{axes = array<i64: 1>}} : ({t((2, 3, 4))}) -> {t((2, 4))}",
    f"%z = opc.matmul %m, %w : ({t((2, 4))}, {t((4, 5))}) -> {t((2, 5))}",
    f"%r = opc.log_softmax %z : ({t((2, 5))}) -> {t((2, 5))}",
], [("%r", (2, 5))])

TEXT = "".join(src for src, _ in CASES.values())


@pytest.fixture(scope="module")
def modules():
    """Kernels where the CPU has them, and every rule forced (decompose="all")."""
    return opc.compile(TEXT, target="cpu", grad=True), opc.compile(TEXT, target="cpu", grad=True, decompose="all")


def sample(name: str) -> list[np.ndarray]:
    out = []
    for arg, (shape, dt) in CASES[name][1].items():
        if dt == F:
            x = RNG.uniform(-1.5, 1.5, shape)
            if arg == "mask":
                x = np.triu(np.full(shape, -1e9), 1)  # causal
            if name == "reduce_min":
                x = RNG.permutation(12).reshape(shape) / 7.0  # no ties: the derivative exists
            out.append(x)
        else:
            size = {"gather": 5, "gather_axis1": 5, "sce": 6, "sce_axis1": 5, "embedding_bag": 7}[name]
            lo = 0 if name.startswith("sce") else -size
            idx = RNG.integers(lo, size, shape).astype(np.int64 if dt == "i64" else np.int32)
            if name.startswith("gather") or name == "embedding_bag":
                idx.flat[1] = idx.flat[0]  # a repeated index: its gradients sum
            out.append(idx)
    return out


def finite_diff(f, args: list[np.ndarray], douts: list[np.ndarray], wrt: list[int], eps: float = 1e-6):
    def loss(a):
        outs = f(*a)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return sum(float(np.sum(o * d)) for o, d in zip(outs, douts))

    grads = []
    for i in wrt:
        g = np.zeros_like(args[i])
        for idx in np.ndindex(args[i].shape):
            plus, minus = [a.copy() for a in args], [a.copy() for a in args]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            g[idx] = (loss(plus) - loss(minus)) / (2 * eps)
        grads.append(g)
    return grads


@pytest.mark.parametrize("name", list(CASES))
def test_grad_against_finite_differences(modules, name: str) -> None:
    kernel, composite = modules
    args = sample(name)
    outs = getattr(kernel, name)(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    douts = [RNG.uniform(-1, 1, o.shape) for o in outs]
    wrt = [i for i, a in enumerate(args) if a.dtype == np.float64 and list(CASES[name][1])[i] != "mask"]
    got = getattr(kernel, f"{name}_grad")(*args, *douts)
    got = got if isinstance(got, tuple) else (got,)
    float_args = [i for i, a in enumerate(args) if a.dtype == np.float64]
    by_arg = dict(zip(float_args, got))
    want = finite_diff(getattr(kernel, name), args, douts, wrt)
    for i, w in zip(wrt, want):
        np.testing.assert_allclose(by_arg[i], w, rtol=1e-5, atol=1e-6, err_msg=f"{name}: grad of argument {i}")
    forced = getattr(composite, f"{name}_grad")(*args, *douts)
    forced = forced if isinstance(forced, tuple) else (forced,)
    for g, c in zip(got, forced):
        np.testing.assert_allclose(c, g, rtol=1e-10, atol=1e-12, err_msg=f"{name}: composite route differs")
