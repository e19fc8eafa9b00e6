"""Every op of SPEC.md, every dtype it admits, compiled for the CPU and
checked against NumPy formulas. All functions live in one module per group
so that the suite pays for few C builds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from oracle import (
    ALL_DTYPES,
    FLOATS,
    INTS,
    NUMERIC,
    assert_close,
    compile_funcs,
    compute,
    func,
    np_dtype,
    random_array,
    ttype,
)  # fmt: skip

RNG_SEED = 1234
A_SHAPE, B_SHAPE = (4, 3), (3,)

BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
    "div": np.divide, "pow": np.power,
}  # fmt: skip
FLOAT_ONLY = {"div", "pow", "exp", "log", "tanh", "erf", "sqrt", "rsqrt", "gelu", "gelu_erf"}
COMPARE = {"greater_than": np.greater, "less_than": np.less, "equal": np.equal}
erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def gelu_erf(x):
    return 0.5 * x * (1 + erf(x.astype(np.float64) / np.sqrt(2)).astype(x.dtype))


UNARY = {
    "neg": np.negative, "abs": np.abs, "relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "erf": lambda x: erf(x).astype(x.dtype), "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "gelu": gelu_tanh, "gelu_erf": gelu_erf,
}  # fmt: skip
POSITIVE_ONLY = {"log", "sqrt", "rsqrt", "pow"}


def binary_cases():
    for name in BINARY:
        for dt in FLOATS if name in FLOAT_ONLY else NUMERIC:
            yield name, dt


def unary_cases():
    for name in UNARY:
        for dt in FLOATS if name in FLOAT_ONLY else NUMERIC:
            yield name, dt


def compare_cases():
    for name in COMPARE:
        for dt in NUMERIC:
            yield name, dt


# ---------------------------------------------------------------------------
# Elementwise ops: one module
# ---------------------------------------------------------------------------


def elementwise_sources() -> list[str]:
    out = []
    for name, dt in binary_cases():
        body = f"%r = opc.{name} %a0, %a1 : ({ttype(A_SHAPE, dt)}, {ttype(B_SHAPE, dt)}) -> {ttype(A_SHAPE, dt)}"
        out.append(func(f"{name}_{dt}", [(A_SHAPE, dt), (B_SHAPE, dt)], body, [(A_SHAPE, dt)]))
    for name, dt in compare_cases():
        body = f"%r = opc.{name} %a0, %a1 : ({ttype(A_SHAPE, dt)}, {ttype(B_SHAPE, dt)}) -> {ttype(A_SHAPE, 'bool')}"
        out.append(func(f"{name}_{dt}", [(A_SHAPE, dt), (B_SHAPE, dt)], body, [(A_SHAPE, "bool")]))
    for name, dt in unary_cases():
        op, attrs = ("gelu", " {approximate = false}") if name == "gelu_erf" else (name, "")
        body = f"%r = opc.{op} %a0{attrs} : ({ttype(A_SHAPE, dt)}) -> {ttype(A_SHAPE, dt)}"
        out.append(func(f"{name}_{dt}", [(A_SHAPE, dt)], body, [(A_SHAPE, dt)]))
    for dt in ALL_DTYPES:
        body = (f"%r = opc.select %a0, %a1, %a2 : ({ttype(A_SHAPE, 'bool')}, {ttype(A_SHAPE, dt)}, {ttype(B_SHAPE, dt)})"
                f" -> {ttype(A_SHAPE, dt)}")
        out.append(func(f"select_{dt}", [(A_SHAPE, "bool"), (A_SHAPE, dt), (B_SHAPE, dt)], body, [(A_SHAPE, dt)]))
    return out


@pytest.fixture(scope="module")
def ew():
    return compile_funcs(elementwise_sources())


def inputs(name: str, dt: str, shapes, rng) -> list[np.ndarray]:
    if name in POSITIVE_ONLY:
        return [random_array(s, dt, rng, 0.25, 3.0) for s in shapes]
    if name == "div":
        a, b = (random_array(s, dt, rng) for s in shapes)
        b = np.where(np.abs(b.astype(np.float64)) < 0.25, np.asarray(1.0, dtype=b.dtype), b)
        return [a, b.astype(b.dtype)]
    return [random_array(s, dt, rng) for s in shapes]


def reference(fn, *xs: np.ndarray, dt: str) -> np.ndarray:
    """fn computed as SPEC.md says: in f32 for halves, rounded once to dt."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(fn(*(compute(x) for x in xs))).astype(np_dtype(dt))


@pytest.mark.parametrize("name,dt", list(binary_cases()))
def test_binary(ew, name, dt):
    rng = np.random.default_rng(RNG_SEED)
    a, b = inputs(name, dt, [A_SHAPE, B_SHAPE], rng)
    assert_close(getattr(ew, f"{name}_{dt}")(a, b), reference(BINARY[name], a, b, dt=dt), dt)


@pytest.mark.parametrize("name,dt", list(compare_cases()))
def test_compare(ew, name, dt):
    rng = np.random.default_rng(RNG_SEED)
    a = random_array(A_SHAPE, dt, rng)
    b = a[1].copy()  # equal in row 1, so `equal` sees both outcomes
    b[0] = random_array((1,), dt, rng)[0]
    np.testing.assert_array_equal(getattr(ew, f"{name}_{dt}")(a, b), COMPARE[name](compute(a), compute(b)))


@pytest.mark.parametrize("name,dt", list(unary_cases()))
def test_unary(ew, name, dt):
    rng = np.random.default_rng(RNG_SEED)
    (a,) = inputs(name, dt, [A_SHAPE], rng)
    want = reference(UNARY[name], a, dt=dt)
    assert_close(getattr(ew, f"{name}_{dt}")(a), want, dt, scale=4 if name in ("erf", "gelu_erf", "gelu") else 1)


@pytest.mark.parametrize("dt", ALL_DTYPES)
def test_select(ew, dt):
    rng = np.random.default_rng(RNG_SEED)
    c, a, b = random_array(A_SHAPE, "bool", rng), random_array(A_SHAPE, dt, rng), random_array(B_SHAPE, dt, rng)
    np.testing.assert_array_equal(getattr(ew, f"select_{dt}")(c, a, b), np.where(c, a, b))


def test_integer_arithmetic_wraps_like_numpy(ew):
    big = np.array([[127, -128, 100]] * 4, np.int8)
    np.testing.assert_array_equal(ew.add_int8(big, np.array([1, -1, 100], np.int8)), big + np.array([1, -1, 100], np.int8))
    np.testing.assert_array_equal(ew.mul_int8(big, np.array([2, 2, 3], np.int8)), big * np.array([2, 2, 3], np.int8))
    imin = np.full(A_SHAPE, np.iinfo(np.int32).min, np.int32)
    np.testing.assert_array_equal(ew.neg_int32(imin), -imin)
    np.testing.assert_array_equal(ew.abs_int64(np.full(A_SHAPE, np.iinfo(np.int64).min)),
                                  np.abs(np.full(A_SHAPE, np.iinfo(np.int64).min)))


def test_maximum_minimum_propagate_nan(ew):
    a = np.array([[np.nan, 1, 2]] * 4, np.float32)
    b = np.array([0, np.nan, 1], np.float32)
    np.testing.assert_array_equal(ew.maximum_float32(a, b), np.maximum(a, b))
    np.testing.assert_array_equal(ew.minimum_float32(a, b), np.minimum(a, b))
    np.testing.assert_array_equal(ew.relu_float32(a), np.maximum(a, 0))


# ---------------------------------------------------------------------------
# Casts: every pair of dtypes, special values
# ---------------------------------------------------------------------------

FLOAT_SPECIALS = [np.nan, np.inf, -np.inf, -1e30, 1e30, -40000.0, -129.7, -128.5, -1.5, -0.5, -0.0, 0.0, 0.4, 0.5,
                  1.5, 2.5, 127.5, 200.3, 255.7, 256.0, 32767.9, 65504.0, 70000.0, 3e9, 1e19, 1.00048828125]
CAST_N = len(FLOAT_SPECIALS)


def cast_input(src: str) -> np.ndarray:
    if src == "bool":
        return np.array([i % 2 == 0 for i in range(CAST_N)])
    if src in INTS:
        info = np.iinfo(np_dtype(src))
        vals = [info.min, info.min + 1, -129, -128, -1, 0, 1, 2, 127, 128, 255, 256, 2049, 65504, 70000,
                info.max - 1, info.max]
        vals = (vals * 2)[:CAST_N]
        return np.array(vals, dtype=np.int64).astype(np_dtype(src))  # out-of-range values wrap into src
    with np.errstate(over="ignore"):
        return np.array(FLOAT_SPECIALS, np.float64).astype(np_dtype(src))


def reference_cast(x: np.ndarray, dst: str) -> np.ndarray:
    """SPEC.md's cast: float->int truncates, saturates, NaN -> 0; to bool: nonzero."""
    if dst == "bool":
        return x.astype(np.float64) != 0 if x.dtype.kind == "V" or x.dtype == np_dtype("bfloat16") else x != 0
    d = np_dtype(dst)
    src_float = x.dtype.kind == "f" or x.dtype == np_dtype("bfloat16")
    if src_float and dst in INTS:
        t = np.trunc(x.astype(np.float64))
        info = np.iinfo(d)
        out = np.zeros(x.shape, d)
        ok = ~np.isnan(t) & (t > float(info.min) - 1) & (t < float(info.max) + 1)
        out[ok] = t[ok].astype(np.int64).astype(d) if d != np.uint64 else t[ok]
        out[~np.isnan(t) & (t >= float(info.max) + 1)] = info.max
        out[~np.isnan(t) & (t <= float(info.min) - 1)] = info.min
        return out
    if x.dtype.kind in "iub" and dst in FLOATS:
        with np.errstate(over="ignore"):
            return x.astype(np.float64).astype(d)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(d)


CAST_PAIRS = [(s, d) for s in ALL_DTYPES for d in ALL_DTYPES if s != d]


@pytest.fixture(scope="module")
def casts():
    shape = (CAST_N,)
    return compile_funcs([
        func(f"cast_{s}_{d}", [(shape, s)],
             f"%r = opc.cast %a0 {{dtype = {ttype(shape, d).split('x')[-1][:-1]}}} : ({ttype(shape, s)}) -> {ttype(shape, d)}",
             [(shape, d)])
        for s, d in CAST_PAIRS
    ])


@pytest.mark.parametrize("src,dst", CAST_PAIRS)
def test_cast(casts, src, dst):
    x = cast_input(src)
    got = getattr(casts, f"cast_{src}_{dst}")(x)
    want = reference_cast(x, dst)
    assert got.dtype == np_dtype(dst)
    np.testing.assert_array_equal(got.astype(np.float64) if dst in FLOATS else got,
                                  want.astype(np.float64) if dst in FLOATS else want)


# bitcast: every pair of one width (bool to the 8-bit integers), on cast's range-edge inputs
BITCAST_PAIRS = [(s, d) for s in ALL_DTYPES for d in ALL_DTYPES
                 if s != d and d != "bool" and np_dtype(s).itemsize == np_dtype(d).itemsize]


@pytest.fixture(scope="module")
def bitcasts():
    shape = (CAST_N,)
    return compile_funcs([
        func(f"bitcast_{s}_{d}", [(shape, s)],
             f"%r = opc.bitcast %a0 {{dtype = {ttype(shape, d).split('x')[-1][:-1]}}} : ({ttype(shape, s)}) -> "
             f"{ttype(shape, d)}", [(shape, d)])
        for s, d in BITCAST_PAIRS
    ])


@pytest.mark.parametrize("src,dst", BITCAST_PAIRS)
def test_bitcast(bitcasts, src, dst):
    x = cast_input(src)
    got = getattr(bitcasts, f"bitcast_{src}_{dst}")(x)
    assert got.dtype == np_dtype(dst)
    np.testing.assert_array_equal(got.view(np.uint8), x.view(np.uint8))  # the same bytes, NaN payloads too


# ---------------------------------------------------------------------------
# Shape ops, full, reductions
# ---------------------------------------------------------------------------


SHAPE_FUNCS = {
    "bcast_row": ([((3,), "float32")], "%r = opc.broadcast_to %a0 : (tensor<3xf32>) -> tensor<2x4x3xf32>", ((2, 4, 3), "float32"),
                  lambda a: np.broadcast_to(a, (2, 4, 3))),
    "bcast_col": ([((4, 1), "int16")], "%r = opc.broadcast_to %a0 : (tensor<4x1xi16>) -> tensor<4x3xi16>", ((4, 3), "int16"),
                  lambda a: np.broadcast_to(a, (4, 3))),
    "bcast_add": ([((2, 1, 3), "float64"), ((4, 1), "float64")],
                  "%r = opc.add %a0, %a1 : (tensor<2x1x3xf64>, tensor<4x1xf64>) -> tensor<2x4x3xf64>", ((2, 4, 3), "float64"),
                  lambda a, b: a + b),
    "reshape": ([((4, 3), "bfloat16")], "%r = opc.reshape %a0 : (tensor<4x3xbf16>) -> tensor<2x6xbf16>", ((2, 6), "bfloat16"),
                lambda a: a.reshape(2, 6)),
    "reshape_then_exp": ([((4, 3), "float32")],
                         "%s = opc.reshape %a0 : (tensor<4x3xf32>) -> tensor<12xf32>\n"
                         "  %r = opc.exp %s : (tensor<12xf32>) -> tensor<12xf32>", ((12,), "float32"),
                         lambda a: np.exp(a.reshape(12))),
    "exp_then_reshape": ([((4, 3), "float32")],
                         "%s = opc.exp %a0 : (tensor<4x3xf32>) -> tensor<4x3xf32>\n"
                         "  %r = opc.reshape %s : (tensor<4x3xf32>) -> tensor<3x2x2xf32>", ((3, 2, 2), "float32"),
                         lambda a: np.exp(a).reshape(3, 2, 2)),
    "transpose3": ([((2, 3, 4), "int32")], "%r = opc.transpose %a0 {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xi32>) -> tensor<4x2x3xi32>",
                   ((4, 2, 3), "int32"), lambda a: a.transpose(2, 0, 1)),
    "tanh_transpose": ([((2, 3), "float16")],
                       "%s = opc.tanh %a0 : (tensor<2x3xf16>) -> tensor<2x3xf16>\n"
                       "  %r = opc.transpose %s {perm = array<i64: 1, 0>} : (tensor<2x3xf16>) -> tensor<3x2xf16>",
                       ((3, 2), "float16"), lambda a: np.tanh(a.astype(np.float32)).astype(np.float16).T),
    "transpose_then_add": ([((2, 3), "float32"), ((3, 2), "float32")],
                           "%s = opc.transpose %a0 {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>\n"
                           "  %r = opc.add %s, %a1 : (tensor<3x2xf32>, tensor<3x2xf32>) -> tensor<3x2xf32>",
                           ((3, 2), "float32"), lambda a, b: a.T + b),
    "rank0": ([((), "float32"), ((3,), "float32")], "%r = opc.mul %a0, %a1 : (tensor<f32>, tensor<3xf32>) -> tensor<3xf32>",
              ((3,), "float32"), lambda a, b: a * b),
    "identity": ([((3,), "int64")], "", ((3,), "int64"), lambda a: a),
    "dense_constants": ([((2, 3), "float32")],
                        "%c = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.5, -6.0]]> : tensor<2x3xf32>\n"
                        "  %h = arith.constant dense<0.5> : tensor<3xf32>\n"
                        "  %t = opc.add %a0, %c : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>\n"
                        "  %r = opc.mul %t, %h : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>",
                        ((2, 3), "float32"), lambda a: (a + np.array([[1, 2, 3], [4, 5.5, -6]], np.float32)) * 0.5),
    "returned_constant": ([((3,), "uint8")], "%r = arith.constant dense<[1, 200, 255]> : tensor<3xui8>",
                          ((3,), "uint8"), lambda a: np.array([1, 200, 255], np.uint8)),
    "returned_splat": ([((3,), "bfloat16")], "%r = arith.constant dense<-2.25> : tensor<3xbf16>",
                       ((3,), "bfloat16"), lambda a: np.full(3, -2.25, np_dtype("bfloat16"))),
}


# full's value: in range, NaN, and past every integer type's range but int64's (saturated as cast does)
FULL_VALUES = [("pos", 2.5), ("neg", -1.0), ("nan", math.nan), ("big", 1e10), ("minus_big", -1e10)]


def shape_sources() -> list[str]:
    out = []
    for name, (args, body, result, _) in SHAPE_FUNCS.items():
        ret = ("%a0",) if name == "identity" else ("%r",)
        out.append(func(name, args, body, [result], returns=ret))
    for dt in ALL_DTYPES:
        for tag, value in FULL_VALUES:
            v = "0x7FF8000000000000" if tag == "nan" else repr(value)
            out.append(f"func.func @full_{tag}_{dt}() -> {ttype((2, 3), dt)} {{\n"
                       f"  %r = opc.full {{value = {v} : f64}} : () -> {ttype((2, 3), dt)}\n"
                       f"  func.return %r : {ttype((2, 3), dt)}\n}}\n")
    return out


@pytest.fixture(scope="module")
def shapes():
    return compile_funcs(shape_sources())


@pytest.mark.parametrize("name", list(SHAPE_FUNCS))
def test_shape_ops(shapes, name):
    args, _, (_, dt), ref = SHAPE_FUNCS[name]
    rng = np.random.default_rng(RNG_SEED)
    xs = [random_array(s, d, rng) for s, d in args]
    assert_close(getattr(shapes, name)(*xs), np.asarray(ref(*xs)), dt)


@pytest.mark.parametrize("dt", ALL_DTYPES)
@pytest.mark.parametrize("tag,value", FULL_VALUES)
def test_full(shapes, dt, tag, value):
    got = getattr(shapes, f"full_{tag}_{dt}")()
    want = reference_cast(np.full((2, 3), value), dt)  # full's value takes cast's semantics
    np.testing.assert_array_equal(got.astype(np.float64) if dt in FLOATS else got,
                                  want.astype(np.float64) if dt in FLOATS else want)


REDUCE_SHAPE = (3, 4, 5)
REDUCE_AXES = [(0,), (1,), (2,), (0, 2), (1, 2), (0, 1, 2)]
REDUCE_DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "uint8", "int8", "int64"]


def reduce_cases():
    for kind in ("sum", "max"):
        for axes in REDUCE_AXES:
            for keep in (False, True):
                for dt in REDUCE_DTYPES:
                    yield kind, axes, keep, dt


def reduce_name(kind, axes, keep, dt):
    return f"reduce_{kind}_{'_'.join(map(str, axes))}_{int(keep)}_{dt}"


@pytest.fixture(scope="module")
def reductions():
    out = []
    for kind, axes, keep, dt in reduce_cases():
        shape = tuple(1 if i in axes else d for i, d in enumerate(REDUCE_SHAPE)) if keep else tuple(
            d for i, d in enumerate(REDUCE_SHAPE) if i not in axes)
        attrs = f"{{axes = array<i64: {', '.join(map(str, axes))}>, keepdim = {'true' if keep else 'false'}}}"
        body = f"%r = opc.reduce_{kind} %a0 {attrs} : ({ttype(REDUCE_SHAPE, dt)}) -> {ttype(shape, dt)}"
        out.append(func(reduce_name(kind, axes, keep, dt), [(REDUCE_SHAPE, dt)], body, [(shape, dt)]))
    return compile_funcs(out)


@pytest.mark.parametrize("kind,axes,keep,dt", list(reduce_cases()))
def test_reduce(reductions, kind, axes, keep, dt):
    x = random_array(REDUCE_SHAPE, dt, np.random.default_rng(RNG_SEED))
    if kind == "sum":
        acc = np.float32 if dt in ("float16", "bfloat16") else np_dtype(dt)
        want = np.sum(compute(x), axis=axes, keepdims=keep, dtype=acc).astype(np_dtype(dt))  # ints wrap like NumPy
    else:
        want = np.max(x, axis=axes, keepdims=keep)
    assert_close(getattr(reductions, reduce_name(kind, axes, keep, dt))(x), want, dt, scale=4)


def test_reduce_max_propagates_nan(reductions):
    x = np.zeros(REDUCE_SHAPE, np.float32)
    x[1, 2, 3] = np.nan
    got = getattr(reductions, reduce_name("max", (2,), False, "float32"))(x)
    np.testing.assert_array_equal(got, np.max(x, axis=2))


# ---------------------------------------------------------------------------
# GEMMs: matmul and fused_gemm_epilogue, every flag, odd sizes
# ---------------------------------------------------------------------------

GEMM_SIZES = [(1, 1, 1), (7, 33, 129), (33, 129, 7), (129, 7, 33)]  # (M, N, K): none divides a tile
TRANS = [(False, False), (True, False), (False, True), (True, True)]
ACTIVATIONS = ["none", "relu", "gelu"]


def operand_shapes(m, n, k, tx, ty):
    return ((k, m) if tx else (m, k)), ((n, k) if ty else (k, n))


def bool_attr(v: bool) -> str:
    return "true" if v else "false"


def gemm_name(kind, act, tx, ty, dt, size):
    return f"{kind}_{act}_{int(tx)}{int(ty)}_{dt}_{'x'.join(map(str, size))}"


def gemm_cases():
    for act in ACTIVATIONS:
        for tx, ty in TRANS:
            for dt in FLOATS:
                for size in GEMM_SIZES:
                    yield act, tx, ty, dt, size


def fused_source(act, tx, ty, dt, size) -> str:
    m, n, k = size
    xs, ys = operand_shapes(m, n, k, tx, ty)
    out = ttype((m, n), dt)
    results = f"({out}, {out})" if act != "none" else out
    lhs = "%r, %z" if act != "none" else "%r"
    body = (f'{lhs} = opc.fused_gemm_epilogue %a0, %a1, %a2 {{activation = "{act}", trans_x = {bool_attr(tx)}, '
            f"trans_y = {bool_attr(ty)}}} : ({ttype(xs, dt)}, {ttype(ys, dt)}, {ttype((n,), dt)}) -> {results}")
    res = [((m, n), dt)] * (2 if act != "none" else 1)
    return func(gemm_name("fused", act, tx, ty, dt, size), [(xs, dt), (ys, dt), ((n,), dt)], body, res,
                returns=("%r", "%z") if act != "none" else ("%r",))


def matmul_source(tx, ty, dt, size) -> str:
    m, n, k = size
    xs, ys = operand_shapes(m, n, k, tx, ty)
    body = (f"%r = opc.matmul %a0, %a1 {{trans_x = {bool_attr(tx)}, trans_y = {bool_attr(ty)}}} : "
            f"({ttype(xs, dt)}, {ttype(ys, dt)}) -> {ttype((m, n), dt)}")
    return func(gemm_name("matmul", "none", tx, ty, dt, size), [(xs, dt), (ys, dt)], body, [((m, n), dt)])


@pytest.fixture(scope="module")
def gemms():
    sources = [fused_source(*c) for c in gemm_cases()]
    sources += [matmul_source(tx, ty, dt, size) for tx, ty in TRANS for dt in FLOATS for size in GEMM_SIZES]
    sources.append(func("bmm", [((2, 5, 7), "float32"), ((2, 3, 5), "float32")],
                        "%r = opc.matmul %a0, %a1 {trans_x = true, trans_y = true} : "
                        "(tensor<2x5x7xf32>, tensor<2x3x5xf32>) -> tensor<2x7x3xf32>", [((2, 7, 3), "float32")]))
    return compile_funcs(sources)


def op_t(a, t):
    return a.T if t else a


def gemm_inputs(m, n, k, tx, ty, dt, rng):
    xs, ys = operand_shapes(m, n, k, tx, ty)
    return random_array(xs, dt, rng, -1, 1), random_array(ys, dt, rng, -1, 1), random_array((n,), dt, rng, -1, 1)


ACT_REF = {"none": lambda z: z, "relu": lambda z: np.maximum(z, 0), "gelu": gelu_tanh}


@pytest.mark.parametrize("act,tx,ty,dt,size", list(gemm_cases()))
def test_fused_gemm_epilogue(gemms, act, tx, ty, dt, size):
    m, n, k = size
    x, y, b = gemm_inputs(m, n, k, tx, ty, dt, np.random.default_rng(RNG_SEED))
    got = getattr(gemms, gemm_name("fused", act, tx, ty, dt, size))(x, y, b)
    got = got if isinstance(got, tuple) else (got,)
    z = op_t(x.astype(np.float64), tx) @ op_t(y.astype(np.float64), ty) + b.astype(np.float64)
    scale = max(1.0, math.sqrt(k))
    assert_close(got[0], ACT_REF[act](z).astype(np_dtype(dt)), dt, scale=scale)
    if act != "none":
        assert_close(got[1], z.astype(np_dtype(dt)), dt, scale=scale)  # reserve_space: the pre-activation


@pytest.mark.parametrize("size", GEMM_SIZES)
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("tx,ty", TRANS)
def test_matmul(gemms, tx, ty, dt, size):
    m, n, k = size
    x, y, _ = gemm_inputs(m, n, k, tx, ty, dt, np.random.default_rng(RNG_SEED))
    want = op_t(x.astype(np.float64), tx) @ op_t(y.astype(np.float64), ty)
    assert_close(getattr(gemms, gemm_name("matmul", "none", tx, ty, dt, size))(x, y), want.astype(np_dtype(dt)), dt,
                 scale=max(1.0, math.sqrt(k)))


# Inference: the pre-activation nothing reads, so the GEMM applies the activation in its micro-kernel's
# direct store on whole tiles (MR x NR: 12 x 32 with AVX-512) and in the tile store on the edges; a K
# of 300 takes two depth blocks (bias and activation on the last only).
INFERENCE_SIZES = [(24, 64, 40), (30, 70, 300)]


@pytest.fixture(scope="module")
def inference_gemms():
    sources = []
    for act in ("relu", "gelu"):
        for dt in FLOATS:
            for m, n, k in INFERENCE_SIZES:
                xs, ys, out = (m, k), (k, n), ttype((m, n), dt)
                body = (f'%r, %z = opc.fused_gemm_epilogue %a0, %a1, %a2 {{activation = "{act}"}} : '
                        f"({ttype(xs, dt)}, {ttype(ys, dt)}, {ttype((n,), dt)}) -> ({out}, {out})")
                sources.append(func(gemm_name("infer", act, False, False, dt, (m, n, k)), [(xs, dt), (ys, dt), ((n,), dt)],
                                    body, [((m, n), dt)], returns=("%r",)))
    return compile_funcs(sources)


@pytest.mark.parametrize("size", INFERENCE_SIZES)
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_fused_gemm_epilogue_without_reserve(inference_gemms, act, dt, size):
    m, n, k = size
    x, y, b = gemm_inputs(m, n, k, False, False, dt, np.random.default_rng(RNG_SEED))
    z = x.astype(np.float64) @ y.astype(np.float64) + b.astype(np.float64)
    got = getattr(inference_gemms, gemm_name("infer", act, False, False, dt, size))(x, y, b)
    assert_close(got, ACT_REF[act](z).astype(np_dtype(dt)), dt, scale=max(1.0, math.sqrt(k)))


def test_batched_matmul(gemms):
    rng = np.random.default_rng(RNG_SEED)
    x, y = rng.standard_normal((2, 5, 7), np.float32), rng.standard_normal((2, 3, 5), np.float32)
    np.testing.assert_allclose(gemms.bmm(x, y), x.transpose(0, 2, 1) @ y.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# Grad ops lowered directly (the kernels of the CPU target)
# ---------------------------------------------------------------------------


def gelu_tanh_grad(x):
    c = np.sqrt(2 / np.pi)
    t = np.tanh(c * (x + 0.044715 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t**2) * c * (1 + 3 * 0.044715 * x**2)


def gelu_erf_grad(x):
    return 0.5 * (1 + erf(x / np.sqrt(2))) + x * np.exp(-0.5 * x**2) / np.sqrt(2 * np.pi)


ACT_GRAD_REF = {"none": lambda z: np.ones_like(z), "relu_grad": lambda z: (z > 0).astype(z.dtype),
                "gelu_grad": gelu_tanh_grad}
GRAD_SIZE = (7, 5, 9)  # M, N, K


def grad_cases():
    for act in ACT_GRAD_REF:
        for tx, ty in TRANS:
            for dt in FLOATS:
                yield act, tx, ty, dt


def fused_grad_source(act, tx, ty, dt) -> str:
    m, n, k = GRAD_SIZE
    xs, ys = operand_shapes(m, n, k, tx, ty)
    mn = ttype((m, n), dt)
    reserve = act != "none"
    operands = "%a0, %a1, %a2, %a3" if reserve else "%a0, %a1, %a2"
    in_types = f"{ttype(xs, dt)}, {ttype(ys, dt)}, {mn}" + (f", {mn}" if reserve else "")
    body = (f'%dx, %dy, %db = opc.fused_gemm_epilogue_grad {operands} {{activation_grad = "{act}", '
            f"trans_x = {bool_attr(tx)}, trans_y = {bool_attr(ty)}}} : ({in_types}) -> "
            f"({ttype(xs, dt)}, {ttype(ys, dt)}, {ttype((n,), dt)})")
    args = [(xs, dt), (ys, dt), ((m, n), dt)] + ([((m, n), dt)] if reserve else [])
    return func(f"fgrad_{act}_{int(tx)}{int(ty)}_{dt}", args, body, [(xs, dt), (ys, dt), ((n,), dt)],
                returns=("%dx", "%dy", "%db"))


@pytest.fixture(scope="module")
def grad_ops():
    sources = [fused_grad_source(*c) for c in grad_cases()]
    for dt in FLOATS:
        t = ttype(A_SHAPE, dt)
        sources.append(func(f"relu_grad_{dt}", [(A_SHAPE, dt)] * 2, f"%r = opc.relu_grad %a0, %a1 : ({t}, {t}) -> {t}",
                            [(A_SHAPE, dt)]))
        for approx in (True, False):
            sources.append(func(f"gelu_grad_{int(approx)}_{dt}", [(A_SHAPE, dt)] * 2,
                                f"%r = opc.gelu_grad %a0, %a1 {{approximate = {bool_attr(approx)}}} : ({t}, {t}) -> {t}",
                                [(A_SHAPE, dt)]))
    sources.append(func("cast_grad", [((2, 3, 4), "float64"), ((2, 3, 4), "uint8")],
                        "%r = opc.cast_grad %a0, %a1 : (tensor<2x3x4xf64>, tensor<2x3x4xui8>) -> tensor<2x3x4xf64>",
                        [((2, 3, 4), "float64")]))
    return compile_funcs(sources)


@pytest.mark.parametrize("act,tx,ty,dt", list(grad_cases()))
def test_fused_gemm_epilogue_grad_kernel(grad_ops, act, tx, ty, dt):
    m, n, k = GRAD_SIZE
    rng = np.random.default_rng(RNG_SEED)
    x, y, _ = gemm_inputs(m, n, k, tx, ty, dt, rng)
    dout, z = random_array((m, n), dt, rng, -1, 1), random_array((m, n), dt, rng, -2, 2)
    args = [x, y, z, dout] if act != "none" else [x, y, dout]
    dx, dy, db = getattr(grad_ops, f"fgrad_{act}_{int(tx)}{int(ty)}_{dt}")(*args)
    dz = (dout.astype(np.float64) * ACT_GRAD_REF[act](z.astype(np.float64))).astype(np_dtype(dt)).astype(np.float64)
    X, Y = x.astype(np.float64), y.astype(np.float64)
    dopx, dopy = dz @ op_t(Y, ty).T, op_t(X, tx).T @ dz  # grads of op_x(x), op_y(y)
    assert_close(dx, op_t(dopx, tx).astype(np_dtype(dt)), dt, scale=4)
    assert_close(dy, op_t(dopy, ty).astype(np_dtype(dt)), dt, scale=4)
    assert_close(db, dz.sum(0).astype(np_dtype(dt)), dt, scale=4)


@pytest.mark.parametrize("dt", FLOATS)
def test_relu_gelu_grad_ops(grad_ops, dt):
    rng = np.random.default_rng(RNG_SEED)
    x, g = random_array(A_SHAPE, dt, rng), random_array(A_SHAPE, dt, rng)
    assert_close(grad_ops.__getattribute__(f"relu_grad_{dt}")(x, g), reference(lambda a, b: b * (a > 0), x, g, dt=dt), dt)
    for approx, ref in ((1, gelu_tanh_grad), (0, gelu_erf_grad)):
        want = reference(lambda a, b: b * ref(a.astype(np.float64)), x, g, dt=dt)
        assert_close(getattr(grad_ops, f"gelu_grad_{approx}_{dt}")(x, g), want, dt, scale=4)


def test_cast_grad_from_paddle_report(grad_ops):
    """[2,3,4] float64 -> uint8: the backward of the cast hands back float64 ones."""
    x = np.random.default_rng(0).uniform(0, 200, (2, 3, 4))
    got = grad_ops.cast_grad(x, np.ones((2, 3, 4), np.uint8))
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, np.ones((2, 3, 4)))


def test_f64_to_f32_cast_rounds_before_the_next_op():
    """cast f64 -> f32 then an f32 add: the cast rounds to f32 first (1 + 2**-30 -> 1), so 1 + 2**-24 ties
    to even (1); adding in double and rounding once would give 1 + 2**-23."""
    text = ("func.func @f(%x: tensor<3xf64>, %y: tensor<3xf32>) -> tensor<3xf32> {\n"
            "  %c = opc.cast %x {dtype = f32} : (tensor<3xf64>) -> tensor<3xf32>\n"
            "  %r = opc.add %c, %y : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>\n"
            "  func.return %r : tensor<3xf32>\n}\n")
    x = np.array([1 + 2.0**-30, -(1 + 2.0**-30), 3.0], np.float64)
    y = np.array([2.0**-24, -(2.0**-24), 0.5], np.float32)
    np.testing.assert_array_equal(compile_funcs([text]).f(x, y), x.astype(np.float32) + y)


def test_picks_against_constant_bounds_keep_nan_and_the_bound_on_ties() -> None:
    """Clip's and Relu's bounds are constants, rendered with one unordered compare
    (c_expressions.pick): NaN kept, and on a tie (-0 against 0 included) the bound, bit for bit."""
    onnx_helpers = pytest.importorskip("onnx_helpers", reason="needs onnx (the optional extra)")
    x = np.array([[np.nan, -0.0, 0.0, -1.0, 7.0, 6.0, 3.0, np.inf, -np.inf, 1e-45, -1e-45, 5.9999995]], np.float32)
    nodes = [onnx_helpers.helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
             onnx_helpers.helper.make_node("Relu", ["x"], ["r"])]
    bounds = {"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}
    import opc

    run = opc.load_onnx(onnx_helpers.graph_model(nodes, {"x": x}, ["c", "r"], bounds))
    clip, relu = (np.asarray(v) for v in run(x))

    def pick(a: np.ndarray, b: float, keep: np.ndarray) -> np.ndarray:  # maximumf/minimumf: a if NaN or kept
        return np.where(np.isnan(a) | keep, a, np.float32(b)).astype(np.float32)

    low = pick(x, 0.0, x > 0)
    want_clip = pick(low, 6.0, low < 6)
    np.testing.assert_array_equal(clip.view(np.uint32), want_clip.view(np.uint32))
    np.testing.assert_array_equal(relu.view(np.uint32), pick(x, 0.0, x > 0).view(np.uint32))
