"""The ops real networks need (issue 11) on the CPU, for every dtype each
admits, against NumPy formulas: reduce_min / reduce_mean, sigmoid, matmul
with broadcast batch dims, slice / concat / gather, the fused softmax,
log_softmax, layer_norm and softmax_cross_entropy, and every grad op (their
kernels), over odd shapes, negative axes and every attribute value. The fused
ops and their grads run twice, by their kernels and with decompose="all" (the
composite route), which must agree. Out-of-range indices and labels raise
IndexError naming the argument, on both routes.

Three modules are compiled (index maps and reductions; fused ops by kernels;
the same by composites), each holding every case as a function."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from oracle import ALL_DTYPES, FLOATS, NUMERIC, assert_close, compile_funcs, func, np_dtype, random_array, ttype

import opc

SEED = 20
STATS = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64"}
INDEX_DTYPES = ["int8", "uint8", "int16", "int32", "int64"]


@dataclass
class Case:
    name: str
    args: list[tuple[tuple[int, ...], str]]
    body: str
    results: list[tuple[tuple[int, ...], str]]
    reference: Callable  # (*inputs) -> outputs, computed in f64
    make: Callable | None = None  # rng -> inputs (default: random arrays of the argument types)
    scale: float = 1.0  # tolerance multiplier

    def source(self) -> str:
        names = tuple(f"%r{i}" for i in range(len(self.results)))
        return func(self.name, self.args, self.body, self.results, returns=names)

    def inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        if self.make is not None:
            return self.make(rng)
        return [random_array(s, d, rng) for s, d in self.args]


def f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def check(case: Case, got, inputs) -> None:
    got = got if isinstance(got, tuple) else (got,)
    want = case.reference(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want) == len(case.results)
    for g, w, (shape, dt) in zip(got, want, case.results):
        with np.errstate(over="ignore", invalid="ignore"):
            assert_close(g, np.asarray(w).astype(np_dtype(dt)), dt, scale=case.scale)


def attrs(**kv) -> str:
    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (list, tuple)):
            return f"array<i64: {', '.join(map(str, v))}>" if v else "array<i64>"
        if isinstance(v, float):
            return f"{v:.17e} : f64"
        return str(v)

    return "{" + ", ".join(f"{k} = {value(v)}" for k, v in kv.items()) + "}"


def op_line(op: str, operands: int, attr: str, args, results) -> str:
    lhs = ", ".join(f"%r{i}" for i in range(len(results)))
    ins = ", ".join(f"%a{i}" for i in range(operands))
    ts = ", ".join(ttype(s, d) for s, d in args[:operands])
    outs = ", ".join(ttype(s, d) for s, d in results)
    return f"{lhs} = opc.{op} {ins} {attr} : ({ts}) -> ({outs})"


def case(name: str, op: str, args, results, reference, attr: str = "", **kw) -> Case:
    return Case(name, args, op_line(op, len(args), attr, args, results), results, reference, **kw)


# ---------------------------------------------------------------------------
# Reductions, sigmoid, matmul with broadcast batch dims, index maps
# ---------------------------------------------------------------------------

R_SHAPE = (3, 4, 5)
R_AXES = [(), (1,), (0, 2), (-1,), (0, 1, 2)]


def reduced(shape, axes, keep):
    axes = [a % len(shape) for a in axes]
    return tuple(1 if i in axes else d for i, d in enumerate(shape)) if keep else tuple(
        d for i, d in enumerate(shape) if i not in axes)


def reduce_cases() -> list[Case]:
    out = []
    for kind, dtypes in (("min", NUMERIC), ("mean", FLOATS)):
        for axes in R_AXES:
            for keep in (False, True):
                for dt in dtypes:
                    name = f"reduce_{kind}_{'_'.join(str(a % 3) for a in axes)}_{int(keep)}_{dt}"

                    def ref(x, axes=axes, keep=keep, kind=kind):
                        if kind == "min":
                            return np.min(x, axis=axes, keepdims=keep) if axes else x
                        return np.mean(f64(x), axis=axes, keepdims=keep) if axes else f64(x)

                    out.append(case(name, f"reduce_{kind}", [(R_SHAPE, dt)], [(reduced(R_SHAPE, axes, keep), dt)], ref,
                                    attrs(axes=list(axes), keepdim=keep), scale=4))
    return out


def sigmoid_cases() -> list[Case]:
    def make(dt):
        return lambda rng: [np.concatenate([random_array((12,), dt, rng, -6, 6),
                                            np.array([-100, -30, 0, 30, 100], np_dtype(dt))])]

    return [case(f"sigmoid_{dt}", "sigmoid", [((17,), dt)], [((17,), dt)],
                 lambda x: 1 / (1 + np.exp(-f64(x))), make=make(dt), scale=2) for dt in FLOATS]


MATMULS = [  # name, x shape, y shape, trans_x, trans_y
    ("bhsd", (2, 3, 4, 5), (2, 3, 5, 6), False, False),
    ("linear", (2, 3, 4, 5), (5, 6), False, False),
    ("linear_ty", (2, 4, 5), (6, 5), False, True),
    ("linear_tx", (2, 3, 5, 4), (5, 6), True, False),
    ("left2", (4, 5), (3, 5, 6), False, False),
    ("heads", (2, 3, 4, 5), (2, 1, 5, 6), False, False),
    ("mixed", (2, 1, 4, 5), (1, 3, 5, 6), False, False),
    ("mixed_tt", (2, 1, 5, 4), (3, 6, 5), True, True),
]


def matmul_cases() -> list[Case]:
    out = []
    for name, xs, ys, tx, ty in MATMULS:
        for dt in FLOATS:
            def ref(x, y, tx=tx, ty=ty):
                x, y = f64(x), f64(y)
                return np.matmul(np.swapaxes(x, -1, -2) if tx else x, np.swapaxes(y, -1, -2) if ty else y)

            shape = ref(np.zeros(xs), np.zeros(ys)).shape
            out.append(case(f"matmul_{name}_{dt}", "matmul", [(xs, dt), (ys, dt)], [(shape, dt)], ref,
                            attrs(trans_x=tx, trans_y=ty), scale=3))
    return out


SLICES = [  # shape, start, limit, strides
    ((5,), [1], [4], [1]),
    ((5,), [0], [5], [2]),
    ((4, 6), [1, 0], [4, 6], [2, 3]),
    ((2, 3, 4, 5), [0, 1, 1, 0], [2, 3, 4, 5], [1, 1, 2, 3]),
    ((3, 7), [2, 6], [3, 7], [5, 4]),
]


def slice_cases() -> list[Case]:
    out = []
    for i, (shape, start, limit, strides) in enumerate(SLICES):
        for dt in ALL_DTYPES if i == 2 else ["float32"]:
            def ref(x, start=start, limit=limit, strides=strides):
                return x[tuple(slice(a, b, s) for a, b, s in zip(start, limit, strides))]

            rshape = ref(np.zeros(shape)).shape
            out.append(case(f"slice_{i}_{dt}", "slice", [(shape, dt)], [(rshape, dt)], ref,
                            attrs(start=start, limit=limit, strides=strides)))
    return out


CONCATS = [  # operand shapes, axis
    ([(4, 3), (4, 2)], 1),
    ([(2, 3), (1, 3), (3, 3)], 0),
    ([(2, 3, 4), (2, 3, 1)], -1),
    ([(1, 2, 3, 2), (1, 2, 1, 2)], 2),
]


def concat_cases() -> list[Case]:
    out = []
    for i, (shapes, axis) in enumerate(CONCATS):
        for dt in ALL_DTYPES if i == 0 else ["float32"]:
            def ref(*xs, axis=axis):
                return np.concatenate(xs, axis)

            rshape = ref(*(np.zeros(s) for s in shapes)).shape
            out.append(case(f"concat_{i}_{dt}", "concat", [(s, dt) for s in shapes], [(rshape, dt)], ref,
                            attrs(axis=axis)))
    return out


GATHERS = [  # x shape, indices shape, axis
    ((5, 3), (4,), 0),
    ((5, 3), (2, 2), 0),
    ((5, 3), (), 0),
    ((3, 5), (2, 3), 1),
    ((2, 3, 4), (2,), -1),
    ((2, 3, 4), (3,), 1),
]


def index_array(shape, dt, size, rng):
    lo = 0 if dt == "uint8" else -size
    return rng.integers(lo, size, size=shape).astype(np_dtype(dt))


def gather_cases() -> list[Case]:
    out = []
    for i, (xs, ishape, axis) in enumerate(GATHERS):
        dtypes = [(d, "int64") for d in ALL_DTYPES] if i == 1 else [("float32", d) for d in INDEX_DTYPES] if i == 0 \
            else [("float32", "int32")]
        for dt, it in dtypes:
            def make(rng, xs=xs, ishape=ishape, axis=axis, dt=dt, it=it):
                return [random_array(xs, dt, rng), index_array(ishape, it, xs[axis], rng)]

            rshape = np.take(np.zeros(xs), np.zeros(ishape, int), axis).shape
            out.append(case(f"gather_{i}_{dt}_{it}", "gather", [(xs, dt), (ishape, it)], [(rshape, dt)],
                            lambda x, idx, axis=axis: np.take(x, idx.astype(np.int64), axis), attrs(axis=axis),
                            make=make))
    return out


def slice_grad_cases() -> list[Case]:
    out = []
    for i, (shape, start, limit, strides) in enumerate(SLICES):
        for dt in FLOATS if i == 3 else ["float32"]:
            sl = tuple(slice(a, b, s) for a, b, s in zip(start, limit, strides))
            dshape = np.zeros(shape)[sl].shape

            def ref(x, d, sl=sl):
                dx = np.zeros(x.shape)
                dx[sl] = f64(d)
                return dx

            out.append(case(f"slice_grad_{i}_{dt}", "slice_grad", [(shape, dt), (dshape, dt)], [(shape, dt)], ref,
                            attrs(start=start, limit=limit, strides=strides)))
    return out


def gather_grad_cases() -> list[Case]:
    out = []
    for i, (xs, ishape, axis) in enumerate(GATHERS):
        for dt in FLOATS if i == 1 else ["float32"]:
            dshape = np.take(np.zeros(xs), np.zeros(ishape, int), axis).shape

            def make(rng, xs=xs, ishape=ishape, axis=axis, dt=dt, dshape=dshape):
                idx = index_array(ishape, "int64", xs[axis], rng)
                if idx.size > 1:
                    idx.flat[1] = idx.flat[0] - xs[axis] if idx.flat[0] >= 0 else idx.flat[0] + xs[axis]  # a repeat
                return [random_array(xs, dt, rng), idx, random_array(dshape, dt, rng)]

            def ref(x, idx, d, axis=axis):
                dx = np.zeros(x.shape)
                a = axis % x.ndim
                moved = np.moveaxis(dx, a, 0)  # a view: np.add.at sums repeated indices
                dm = np.moveaxis(f64(d).reshape(x.shape[:a] + (idx.size,) + x.shape[a + 1:]), a, 0)
                np.add.at(moved, idx.reshape(-1) % x.shape[a], dm)
                return dx

            out.append(case(f"gather_grad_{i}_{dt}", "gather_grad", [(xs, dt), (ishape, "int64"), (dshape, dt)],
                            [(xs, dt)], ref, attrs(axis=axis), make=make, scale=4))
    return out


MAPS = reduce_cases() + sigmoid_cases() + matmul_cases() + slice_cases() + concat_cases() + gather_cases() \
    + slice_grad_cases() + gather_grad_cases()
MAPS_BY_NAME = {c.name: c for c in MAPS}

# Out-of-range indices: the argument is named, on any path to the check.
INDEX_ERRORS = {
    "g_direct": ("func.func @g_direct(%table: tensor<5x3xf32>, %ids: tensor<4xi64>) -> tensor<4x3xf32> {\n"
                 "  %r = opc.gather %table, %ids : (tensor<5x3xf32>, tensor<4xi64>) -> tensor<4x3xf32>\n"
                 "  func.return %r : tensor<4x3xf32>\n}\n"),
    "g_computed": ("func.func @g_computed(%table: tensor<5x3xf32>, %pos: tensor<4xf32>) -> tensor<4x3xf32> {\n"
                   "  %ids = opc.cast %pos {dtype = i32} : (tensor<4xf32>) -> tensor<4xi32>\n"
                   "  %r = opc.gather %table, %ids : (tensor<5x3xf32>, tensor<4xi32>) -> tensor<4x3xf32>\n"
                   "  func.return %r : tensor<4x3xf32>\n}\n"),
    "g_grad": ("func.func @g_grad(%table: tensor<5x3xf32>, %ids: tensor<4xi16>, %d: tensor<4x3xf32>) -> tensor<5x3xf32> {\n"
               "  %r = opc.gather_grad %table, %ids, %d : (tensor<5x3xf32>, tensor<4xi16>, tensor<4x3xf32>) -> tensor<5x3xf32>\n"
               "  func.return %r : tensor<5x3xf32>\n}\n"),
    # an embedding bag: the gather inlined into the mean over the bag
    "g_bag": ("func.func @g_bag(%table: tensor<5x3xf32>, %ids: tensor<2x4xi32>) -> tensor<2x3xf32> {\n"
              "  %e = opc.gather %table, %ids : (tensor<5x3xf32>, tensor<2x4xi32>) -> tensor<2x4x3xf32>\n"
              "  %r = opc.reduce_mean %e {axes = array<i64: 1>} : (tensor<2x4x3xf32>) -> tensor<2x3xf32>\n"
              "  func.return %r : tensor<2x3xf32>\n}\n"),
}


@pytest.fixture(scope="module")
def maps():
    return compile_funcs([c.source() for c in MAPS] + list(INDEX_ERRORS.values()))


@pytest.mark.parametrize("name", list(MAPS_BY_NAME))
def test_op(maps, name: str) -> None:
    c = MAPS_BY_NAME[name]
    inputs = c.inputs(np.random.default_rng(SEED))
    check(c, getattr(maps, name)(*inputs), inputs)


def test_reduce_min_propagates_nan(maps) -> None:
    x = np.zeros(R_SHAPE, np.float32)
    x[1, 2, 3] = np.nan
    got = maps.reduce_min_2_0_float32(x)
    np.testing.assert_array_equal(got, np.min(x, axis=-1))


def test_sigmoid_is_stable(maps) -> None:
    x = np.array([-1e4, -100, -88, 0, 88, 1e4] + [0] * 11, np.float32)
    got = maps.sigmoid_float32(x)
    assert np.all(np.isfinite(got)) and got[0] == 0 and got[-12] == 1


def test_gather_index_out_of_range(maps) -> None:
    t = np.zeros((5, 3), np.float32)
    for bad in (5, -6, 2**40):
        with pytest.raises(IndexError, match=rf"^g_direct\(\): argument 'ids' holds index {bad}, out of range for axis 0 "
                                             r"of size 5 \(opc.gather\)$"):
            maps.g_direct(t, np.array([0, bad, 1, 2]))
    with pytest.raises(IndexError, match=r"^g_computed\(\): an index computed from argument 'pos' is out of range for "
                                         r"axis 0 of size 5 \(opc.gather\); it is 7$"):
        maps.g_computed(t, np.array([0, 1, 7.5, 2], np.float32))
    with pytest.raises(IndexError, match=r"^g_grad\(\): argument 'ids' holds index -9, .*\(opc.gather_grad\)$"):
        maps.g_grad(t, np.array([0, 1, -9, 2], np.int16), np.ones((4, 3), np.float32))
    with pytest.raises(IndexError, match=r"^g_bag\(\): argument 'ids' holds index 5"):
        maps.g_bag(t, np.array([[0, 1, 2, 3], [4, 5, 0, 0]], np.int32))


def test_a_failed_check_leaves_later_calls_alone(maps) -> None:
    t = np.arange(15, dtype=np.float32).reshape(5, 3)
    with pytest.raises(IndexError):
        maps.g_direct(t, np.array([0, 9, 1, 2]))
    np.testing.assert_array_equal(maps.g_direct(t, np.array([4, -1, 0, 2])), t[[4, -1, 0, 2]])
    np.testing.assert_allclose(maps.g_bag(t, np.array([[0, 1, 2, 3], [4, -1, 0, 0]], np.int32)),
                               np.stack([t[[0, 1, 2, 3]].mean(0), t[[4, 4, 0, 0]].mean(0)]), rtol=1e-6)


# ---------------------------------------------------------------------------
# Fused ops and grad ops: kernels, and the composite route
# ---------------------------------------------------------------------------


def softmax_ref(x, axis):
    x = f64(x)
    z = x - x.max(axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis, keepdims=True))


SOFTMAX_SHAPES = [((4, 7), -1), ((4, 7), 0), ((3, 70, 5), 1), ((2, 3, 70), -1), ((64, 1030), -1), ((8, 33, 130), 1)]


def softmax_cases() -> list[Case]:
    out = []
    for i, (shape, axis) in enumerate(SOFTMAX_SHAPES):
        for dt in FLOATS if i < 4 else ["float32"]:
            for op in ("softmax", "log_softmax"):
                def ref(x, axis=axis, op=op):
                    ls = softmax_ref(x, axis)
                    return np.exp(ls) if op == "softmax" else ls

                def make(rng, shape=shape, dt=dt):
                    x = random_array(shape, dt, rng, -4, 4)
                    x.flat[0] = 60  # a large logit: stable only when max-subtracted
                    return [x]

                out.append(case(f"{op}_{i}_{dt}", op, [(shape, dt)], [(shape, dt)], ref, attrs(axis=axis), make=make,
                                scale=4))
                grad = f"{op}_grad"

                def gref(y, d, axis=axis, op=op):
                    y, d = f64(y), f64(d)
                    if op == "softmax":
                        return y * (d - (d * y).sum(axis, keepdims=True))
                    return d - np.exp(y) * d.sum(axis, keepdims=True)

                def gmake(rng, shape=shape, dt=dt, axis=axis, op=op):
                    y = softmax_ref(random_array(shape, dt, rng), axis)
                    y = np.exp(y) if op == "softmax" else y
                    return [y.astype(np_dtype(dt)), random_array(shape, dt, rng, -1, 1)]

                out.append(case(f"{grad}_{i}_{dt}", grad, [(shape, dt)] * 2, [(shape, dt)], gref, attrs(axis=axis),
                                make=gmake, scale=8))
    return out


LAYER_NORMS = [((4, 8), -1, 1e-5), ((2, 3, 8), 1, 1e-5), ((2, 3, 8), -1, 1e-2), ((3, 5), 0, 1e-5),
               ((16, 2100), -1, 1e-5)]


def layer_norm_ref(x, scale, bias, begin, eps):
    x = f64(x)
    axes = tuple(range(begin, x.ndim))
    mean = x.mean(axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axes, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    y = (x - mean) * rstd * f64(scale) + f64(bias)
    return y, mean.reshape(x.shape[:begin]), rstd.reshape(x.shape[:begin])


def layer_norm_grad_ref(x, scale, mean, rstd, dy, begin):
    x, scale, dy = f64(x), f64(scale), f64(dy)
    axes, lead = tuple(range(begin, x.ndim)), tuple(range(begin))
    keep = x.shape[:begin] + (1,) * (x.ndim - begin)
    m, r = f64(mean).reshape(keep), f64(rstd).reshape(keep)
    xhat = (x - m) * r
    g = dy * scale
    dx = r * (g - g.mean(axes, keepdims=True) - xhat * (g * xhat).mean(axes, keepdims=True))
    return dx, (dy * xhat).sum(lead), dy.sum(lead)


def layer_norm_cases() -> list[Case]:
    out = []
    for i, (shape, begin, eps) in enumerate(LAYER_NORMS):
        b = begin % len(shape)
        lead, trail = shape[:b], shape[b:]
        for dt in FLOATS if i < 3 else ["float32", "float64"] if i == 3 else ["float32"]:
            st = STATS[dt]
            out.append(case(f"layer_norm_{i}_{dt}", "layer_norm", [(shape, dt), (trail, dt), (trail, dt)],
                            [(shape, dt), (lead, st), (lead, st)],
                            lambda x, s, bb, b=b, eps=eps: layer_norm_ref(x, s, bb, b, eps),
                            attrs(begin_norm_axis=begin, epsilon=eps), scale=8))

            def gmake(rng, shape=shape, trail=trail, lead=lead, dt=dt, st=st):
                return [random_array(shape, dt, rng), random_array(trail, dt, rng), random_array(lead, st, rng, -1, 1),
                        random_array(lead, st, rng, 0.5, 2), random_array(shape, dt, rng, -1, 1)]

            out.append(case(f"layer_norm_grad_{i}_{dt}", "layer_norm_grad",
                            [(shape, dt), (trail, dt), (lead, st), (lead, st), (shape, dt)],
                            [(shape, dt), (trail, dt), (trail, dt)],
                            lambda x, s, m, r, dy, b=b: layer_norm_grad_ref(x, s, m, r, dy, b),
                            attrs(begin_norm_axis=begin), make=gmake, scale=16 * math.sqrt(np.prod(lead) + 1)))
    return out


SCES = [((4, 10), -1, "int64"), ((4, 10), 1, "int32"), ((3, 7, 5), 1, "int64"), ((6, 4), 0, "int32"),
        ((40, 1000), -1, "int64")]


def label_of(shape, axis, lt, rng):
    a = axis % len(shape)
    return rng.integers(0, shape[a], size=tuple(1 if i == a else n for i, n in enumerate(shape))).astype(np_dtype(lt))


def sce_cases() -> list[Case]:
    out = []
    for i, (shape, axis, lt) in enumerate(SCES):
        a = axis % len(shape)
        lshape = tuple(1 if d == a else n for d, n in enumerate(shape))
        for dt in FLOATS if i < 4 else ["float32"]:
            def ref(x, label, axis=a):
                ls = softmax_ref(x, axis)
                return -np.take_along_axis(ls, label.astype(np.int64), axis), np.exp(ls)

            def make(rng, shape=shape, axis=axis, lt=lt, dt=dt):
                return [random_array(shape, dt, rng, -4, 4), label_of(shape, axis, lt, rng)]

            out.append(case(f"sce_{i}_{dt}", "softmax_cross_entropy", [(shape, dt), (lshape, lt)],
                            [(lshape, dt), (shape, dt)], ref, attrs(axis=axis), make=make, scale=4))

            def gref(label, sm, dloss, axis=a):
                onehot = np.arange(sm.shape[axis]).reshape([-1 if d == axis else 1 for d in range(sm.ndim)]) == label
                return (f64(sm) - onehot) * f64(dloss)

            def gmake(rng, shape=shape, axis=a, lt=lt, dt=dt, lshape=lshape):
                sm = np.exp(softmax_ref(random_array(shape, dt, rng), axis)).astype(np_dtype(dt))
                return [label_of(shape, axis, lt, rng), sm, random_array(lshape, dt, rng, -1, 1)]

            out.append(case(f"sce_grad_{i}_{dt}", "softmax_cross_entropy_grad", [(lshape, lt), (shape, dt), (lshape, dt)],
                            [(shape, dt)], gref, attrs(axis=axis), make=gmake, scale=2))
    return out


FUSED = softmax_cases() + layer_norm_cases() + sce_cases()
FUSED_BY_NAME = {c.name: c for c in FUSED}
SCE_ERRORS = (
    "func.func @sce_bad(%logits: tensor<3x4xf32>, %label: tensor<3x1xi32>) -> (tensor<3x1xf32>, tensor<3x4xf32>) {\n"
    "  %l, %s = opc.softmax_cross_entropy %logits, %label : (tensor<3x4xf32>, tensor<3x1xi32>) -> (tensor<3x1xf32>, tensor<3x4xf32>)\n"
    "  func.return %l, %s : tensor<3x1xf32>, tensor<3x4xf32>\n}\n"
    "func.func @sce_grad_bad(%label: tensor<2x1x3xi64>, %sm: tensor<2x4x3xf64>, %d: tensor<2x1x3xf64>) -> tensor<2x4x3xf64> {\n"
    "  %r = opc.softmax_cross_entropy_grad %label, %sm, %d {axis = 1} : (tensor<2x1x3xi64>, tensor<2x4x3xf64>, tensor<2x1x3xf64>) -> tensor<2x4x3xf64>\n"
    "  func.return %r : tensor<2x4x3xf64>\n}\n"
)


# The composite route of every op and grad op: every dtype on the first shape, f32 on the others
# (composites are many loop nests each: this keeps the C build in proportion).
COMPOSITE = [name for name in FUSED_BY_NAME if name.endswith("float32") or "_0_" in name]


@pytest.fixture(scope="module")
def fused():
    """The fused ops and grad ops by their kernels, and by their composite rules."""
    kernels = opc.compile("\n".join([c.source() for c in FUSED] + [SCE_ERRORS]), target="cpu")
    composites = "\n".join([FUSED_BY_NAME[n].source() for n in COMPOSITE] + [SCE_ERRORS])
    return kernels, opc.compile(composites, target="cpu", decompose="all")


@pytest.mark.parametrize("name", list(FUSED_BY_NAME))
def test_fused_kernel(fused, name: str) -> None:
    c = FUSED_BY_NAME[name]
    inputs = c.inputs(np.random.default_rng(SEED))
    check(c, getattr(fused[0], name)(*inputs), inputs)


KERNEL_VS_COMPOSITE = {"float16": 4e-3, "bfloat16": 2e-2, "float32": 2e-5, "float64": 1e-12}


@pytest.mark.parametrize("name", COMPOSITE)
def test_fused_composite_route_agrees(fused, name: str) -> None:
    c = FUSED_BY_NAME[name]
    inputs = c.inputs(np.random.default_rng(SEED))
    kernel, composite = (getattr(m, name)(*inputs) for m in fused)
    check(c, composite, inputs)  # the composite route against NumPy too, not only against the kernel
    kernel, composite = (v if isinstance(v, tuple) else (v,) for v in (kernel, composite))
    for k, g, (_, dt) in zip(kernel, composite, c.results):
        assert k.dtype == g.dtype == np_dtype(dt)
        k, g = f64(k), f64(g)
        err = float(np.max(np.abs(k - g)))
        assert err <= KERNEL_VS_COMPOSITE[dt] * max(1.0, float(np.max(np.abs(k)))) * c.scale, (name, err)


@pytest.mark.parametrize("route", ["kernel", "composite"])
def test_label_out_of_range(fused, route: str) -> None:
    m = fused[route == "composite"]
    logits = np.zeros((3, 4), np.float32)
    for bad in (4, -1):
        label = np.array([[0], [bad], [3]], np.int32)
        with pytest.raises(IndexError, match=r"^sce_bad\(\): .*'label'") as err:
            m.sce_bad(logits, label)
        if route == "kernel":
            assert f"holds label {bad}, out of range [0, 4) for axis 1 (opc.softmax_cross_entropy)" in str(err.value)
    label = np.zeros((2, 1, 3), np.int64)
    label[1, 0, 2] = 4
    with pytest.raises(IndexError, match=r"^sce_grad_bad\(\): .*'label'"):
        m.sce_grad_bad(label, np.zeros((2, 4, 3)), np.ones((2, 1, 3)))
    good = np.array([[0], [1], [3]], np.int32)
    loss, _ = m.sce_bad(logits, good)
    np.testing.assert_allclose(loss, np.full((3, 1), np.log(4)), rtol=1e-6)


@pytest.mark.parametrize("ys", [(2, 4, 5), (4, 5), (1, 4, 5)])
def test_matmul_operand_with_the_result_batch_is_read_in_place(ys):
    """An operand whose batch dims are the result's (or that has none, or only 1s) is read where it
    lies, with a batch stride; only a partial broadcast is copied out to the full batch first."""
    xt, yt, rt = "tensor<2x3x4xf32>", f"tensor<{'x'.join(map(str, ys))}xf32>", "tensor<2x3x5xf32>"
    m = opc.compile(f"func.func @f(%x: {xt}, %y: {yt}) -> {rt} {{\n"
                    f"  %r = opc.matmul %x, %y : ({xt}, {yt}) -> {rt}\n  func.return %r : {rt}\n}}\n")
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal(ys).astype(np.float32)
    np.testing.assert_allclose(m.f(x, y), np.matmul(x, y), rtol=1e-5, atol=1e-6)
    assert "_batch" not in m.c_source
