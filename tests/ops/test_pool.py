"""Pooling (issue 19) on the CPU: max_pool (values and ONNX's flattened indices),
avg_pool (count_include_pad, ceil_mode), max_pool_grad and avg_pool_grad, for
f16, bf16, f32 and f64, over 1-D and 2-D windows with strides, dilations and
asymmetric pads, against a NumPy loop over the windows; the gradients of a
pooling layer against finite differences (first and second order); an index
outside its plane raising IndexError; the verifier's messages. One module."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np
import pytest
from oracle import FLOATS, func, np_dtype, random_array, ttype
from routes import run_counting_routes, wide_vectors

import opc
from opc.errors import OpcError
from opc.ir import parse_text

SEED = 23


@dataclass(frozen=True)
class Pool:
    name: str
    x: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...] = ()
    ceil: bool = False
    include_pad: bool = False

    @property
    def r(self) -> int:
        return len(self.x) - 2

    @property
    def dil(self) -> tuple[int, ...]:
        return self.dilations or (1,) * self.r

    @property
    def out(self) -> tuple[int, ...]:
        out = []
        for d, (i, k) in enumerate(zip(self.x[2:], self.kernel)):
            span = i + self.pads[d] + self.pads[self.r + d] - self.dil[d] * (k - 1) - 1
            o = (-(-span // self.strides[d]) if self.ceil else span // self.strides[d]) + 1
            if self.ceil and (o - 1) * self.strides[d] >= i + self.pads[d]:
                o -= 1
            out.append(o)
        return tuple(out)

    @property
    def y(self) -> tuple[int, ...]:
        return (*self.x[:2], *self.out)

    def attrs(self, op: str) -> str:
        def arr(v) -> str:
            return f"array<i64: {', '.join(map(str, v))}>"

        parts = [f"kernel = {arr(self.kernel)}", f"strides = {arr(self.strides)}", f"pads = {arr(self.pads)}",
                 f"ceil_mode = {'true' if self.ceil else 'false'}"]
        if self.dilations:
            parts.append(f"dilations = {arr(self.dilations)}")
        if op.startswith("avg"):
            parts.append(f"count_include_pad = {'true' if self.include_pad else 'false'}")
        return "{" + ", ".join(parts) + "}"

    def windows(self):
        """(output position, [(flat index within the plane, ...)], divisor) for every output."""
        for o in itertools.product(*(range(n) for n in self.out)):
            taps, extent = [], 1
            per_dim = []
            for d in range(self.r):
                start = o[d] * self.strides[d] - self.pads[d]
                pos = [start + t * self.dil[d] for t in range(self.kernel[d])]
                lo, hi = (-self.pads[d], self.x[2 + d] + self.pads[self.r + d]) if self.include_pad else (0, self.x[2 + d])
                extent *= sum(lo <= p < hi for p in pos)
                per_dim.append([p for p in pos if 0 <= p < self.x[2 + d]])
            for i in itertools.product(*per_dim):
                taps.append(int(np.ravel_multi_index(i, self.x[2:])))
            yield o, taps, extent


POOLS = [
    Pool("p1d", (2, 3, 9), (3,), (2,), (1, 1)),
    Pool("p1d_ceil_dil", (1, 2, 10), (2,), (3,), (0, 1), (2,), ceil=True),
    Pool("p2d", (2, 3, 8, 7), (2, 2), (2, 2), (0, 0, 0, 0)),
    Pool("p2d_overlap", (1, 2, 7, 9), (3, 3), (1, 2), (1, 0, 1, 2)),
    Pool("p2d_ceil_pad", (1, 3, 7, 7), (3, 2), (2, 2), (1, 1, 1, 0), ceil=True, include_pad=True),
    Pool("p2d_incl", (2, 2, 6, 5), (3, 3), (2, 1), (1, 1, 1, 1), include_pad=True),
    Pool("p2d_long", (1, 1, 2, 300), (1, 3), (1, 1), (0, 1, 0, 1)),
    # a dilated window whose first taps fall in an odd padding: the first tap inside rounds up
    Pool("p2d_dil_pad", (1, 2, 5, 9), (2, 3), (1, 2), (1, 1, 0, 1), (2, 2)),
]
HALF = ("p1d", "p2d_overlap", "p2d_ceil_pad")
# f32 avg_pool's vector rows (runtime/opc_nn_conv_fast.h, opc_cf_avg_pool_row): the wide max-pool
# rows, with and without the padding counted; a row of more than one 256-output chunk; a window
# whose rows the chunk's buffer cannot hold for a vector (the output-by-output path)
# rows wide enough for f32 max_pool's vector route (OPC_CF_V outputs at a time, the last vector
# shifted back; strides 1 and 2 as vector loads, others element by element), with the edges
# outside it: values with ties, NaNs and -infs (the first maximum or NaN in window order wins)
WIDE = [
    Pool("w_s1", (1, 2, 4, 41), (2, 3), (1, 1), (0, 1, 1, 1)),
    Pool("w_s2", (1, 2, 7, 75), (3, 3), (2, 2), (1, 1, 1, 1)),  # ResNet's 3x3 stride-2 pool
    Pool("w_s3_dil", (1, 1, 3, 90), (1, 3), (1, 3), (0, 2, 0, 1), (1, 2)),
    Pool("w_1d_s2", (2, 1, 70), (4,), (2,), (1, 2)),
    Pool("w_just16", (1, 1, 1, 18), (1, 3), (1, 1), (0, 0, 0, 0)),
    # edges of more than OPC_CF_POOL_EDGE outputs beside the vectors: lane by lane from a column
    # inside the row (6 and 8 outputs padded; stride 2: 3 and 3), the rows wider than the lanes' copy
    Pool("w_edges", (1, 2, 3, 60), (1, 9), (1, 1), (0, 6, 0, 8)),
    Pool("w_edges_s2", (1, 1, 5, 77), (3, 7), (2, 2), (1, 5, 1, 6)),
    # rows the vector route covers lane by lane (shorter than a vector, or the edges): ResNet's
    # pool at a 64x64 input (16 outputs a row, the first one's window padded), dilated, 1-D
    Pool("n_s2_16", (1, 2, 5, 32), (3, 3), (2, 2), (1, 1, 1, 1)),
    Pool("n_s3_dil", (1, 1, 4, 11), (2, 3), (1, 3), (1, 2, 0, 2), (1, 2)),
    Pool("n_1d_pads", (2, 1, 5), (3,), (1,), (2, 2)),
    # 2x2 windows at stride 2, whole planes at a time (opc_cf_pool2_applies): an odd last row left
    # out, 3-D with one depth tap, an end padding no window reaches (counted or not: 4 taps)
    Pool("k2s2_planes", (2, 3, 9, 16), (2, 2), (2, 2), (0, 0, 0, 0)),
    Pool("k2s2_3d", (1, 2, 3, 4, 6), (1, 2, 2), (1, 2, 2), (0, 0, 0, 0, 0, 0)),
    Pool("k2s2_end_pad", (1, 2, 6, 16), (2, 2), (2, 2), (0, 0, 1, 1), include_pad=True),
    Pool("w_3d", (1, 2, 4, 5, 40), (2, 3, 3), (1, 2, 2), (1, 1, 1, 0, 1, 1)),  # depth taps, padded
    # 3x3 at stride 2, separably (opc_cf_max_pool3_plane): vectors read from the row in place (the
    # middle ones of 56 outputs) or from its -inf padded copy (a window over either end); no padding
    # before and one after; an odd row count whose last window hangs over the end
    Pool("s3_rows112", (1, 1, 5, 112), (3, 3), (2, 2), (1, 1, 1, 1)),
    Pool("s3_end_pad", (1, 2, 8, 34), (3, 3), (2, 2), (0, 0, 1, 1)),
    Pool("s3_odd", (2, 1, 9, 41), (3, 3), (2, 2), (1, 1, 1, 1)),
]
AVG_WIDE = [*WIDE, *(replace(p, name=p.name + "_incl", include_pad=True) for p in WIDE[:4]),
            Pool("a_chunks", (1, 2, 3, 610), (2, 3), (1, 2), (0, 1, 1, 1)),
            Pool("a_big_window", (1, 1, 16, 40), (15, 15), (1, 1), (7, 7, 7, 7), include_pad=True)]


def max_ref(p: Pool, x):
    x64 = np.asarray(x, np.float64).reshape(p.x[0] * p.x[1], -1)
    y = np.zeros((x64.shape[0], int(np.prod(p.out))))
    idx = np.zeros(y.shape, np.int64)
    for j, (_, taps, _) in enumerate(p.windows()):
        vals = x64[:, taps]
        arg = np.argmax(vals, axis=1)  # the first maximum in window order
        y[:, j] = vals[np.arange(len(vals)), arg]
        idx[:, j] = np.asarray(taps)[arg] + np.arange(len(vals)) * x64.shape[1]
    return y.reshape(p.y), idx.reshape(p.y)


def avg_ref(p: Pool, x):
    x64 = np.asarray(x, np.float64).reshape(p.x[0] * p.x[1], -1)
    y = np.stack([x64[:, taps].sum(1) / div for _, taps, div in p.windows()], axis=1)
    return y.reshape(p.y)


def max_grad_ref(p: Pool, idx, dout):
    dx = np.zeros(int(np.prod(p.x)))
    np.add.at(dx, np.asarray(idx).ravel(), np.asarray(dout, np.float64).ravel())
    return dx.reshape(p.x)


def avg_grad_ref(p: Pool, dout):
    d = np.asarray(dout, np.float64).reshape(p.x[0] * p.x[1], -1)
    dx = np.zeros((d.shape[0], int(np.prod(p.x[2:]))))
    for j, (_, taps, div) in enumerate(p.windows()):
        for t in taps:
            dx[:, t] += d[:, j] / div
    return dx.reshape(p.x)


def sources(p: Pool, dt: str) -> list[str]:
    tx, ty, ti = ttype(p.x, dt), ttype(p.y, dt), ttype(p.y, "int64")
    n = f"{p.name}_{dt}"
    return [
        func(f"max_{n}", [(p.x, dt)], f"%y, %i = opc.max_pool %a0 {p.attrs('max')} : ({tx}) -> ({ty}, {ti})",
             [(p.y, dt), (p.y, "int64")], ("%y", "%i")),
        func(f"avg_{n}", [(p.x, dt)], f"%r = opc.avg_pool %a0 {p.attrs('avg')} : ({tx}) -> {ty}", [(p.y, dt)]),
        func(f"max_grad_{n}", [(p.x, dt), (p.y, "int64"), (p.y, dt)],
             f"%r = opc.max_pool_grad %a0, %a1, %a2 {p.attrs('max')} : ({tx}, {ti}, {ty}) -> {tx}", [(p.x, dt)]),
        func(f"avg_grad_{n}", [(p.x, dt), (p.y, dt)],
             f"%r = opc.avg_pool_grad %a0, %a1 {p.attrs('avg')} : ({tx}, {ty}) -> {tx}", [(p.x, dt)]),
    ]


CASES = [(p, dt) for p in POOLS for dt in (FLOATS if p.name in HALF else ["float32", "float64"])]
TOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-13}


def layer(p: Pool) -> str:
    """sum of a max pool and an avg pool of tanh(x), in f64."""
    t = "float64"
    tx, ty, ti = ttype(p.x, t), ttype(p.y, t), ttype(p.y, "int64")
    body = (f"%t = opc.tanh %a0 : ({tx}) -> {tx}\n"
            f"  %m, %i = opc.max_pool %t {p.attrs('max')} : ({tx}) -> ({ty}, {ti})\n"
            f"  %a = opc.avg_pool %t {p.attrs('avg')} : ({tx}) -> {ty}\n"
            f"  %r = opc.add %m, %a : ({ty}, {ty}) -> {ty}")
    return func(f"layer_{p.name}", [(p.x, t)], body, [(p.y, t)])


def values_only(p: Pool, dt: str) -> str:
    """max_pool whose indices nothing reads: the CPU's values-only kernel (opc_nn_max_pool_values_*)."""
    tx, ty, ti = ttype(p.x, dt), ttype(p.y, dt), ttype(p.y, "int64")
    return func(f"maxv_{p.name}_{dt}", [(p.x, dt)], f"%y, %i = opc.max_pool %a0 {p.attrs('max')} : ({tx}) -> ({ty}, {ti})",
                [(p.y, dt)], ("%y",))


VALUES = [(p, dt) for p in [*POOLS, *WIDE] for dt in ("float32", "float64")]
# the f32 kernels' routes (runtime/opc_routes.h): whole planes for 2x2 windows at stride 2; values
# alone 3x3 at stride 2 over rows of a vector or more separably (AVX-512), else planes padded with -inf
PLANES_2X2 = ("k2s2_planes", "k2s2_3d", "k2s2_end_pad")
SEPARABLE = ("w_s2", "n_s2_16", "s3_rows112", "s3_end_pad", "s3_odd")


def route(op: str, p: Pool, dt: str, values: bool = False) -> dict[str, int]:
    """The route of `op` (max_pool, avg_pool) on p in dt, as Profile.routes() counts one call."""
    if dt != "float32":
        return {f"{op}: rows": 1}
    if values:
        return {"max_pool: separable 3x3" if p.name in SEPARABLE and wide_vectors() else "max_pool: padded planes": 1}
    return {f"{op}: {'2x2 planes' if p.name in PLANES_2X2 else 'rows'}": 1}


@pytest.fixture(scope="module")
def module():
    wide = [sources(p, dt)[0] for p in WIDE for dt in ("float32", "float64")]
    wide += [values_only(p, dt) for p, dt in VALUES]
    wide += [sources(p, dt)[1] for p in AVG_WIDE for dt in ("float32", "float64")]
    text = "\n".join([s for p, dt in CASES for s in sources(p, dt)] + [layer(p) for p in POOLS] + wide)
    return opc.compile(text, target="cpu", grad=2)


def near(got, want, dt: str, what: str) -> None:
    assert got.dtype == np_dtype(dt) and got.shape == want.shape, what
    err = float(np.max(np.abs(got.astype(np.float64) - want), initial=0.0))
    assert err <= TOL[dt] * (float(np.max(np.abs(want), initial=0.0)) + 1), (what, err)


@pytest.mark.parametrize("p,dt", CASES, ids=[f"{p.name}_{dt}" for p, dt in CASES])
def test_pools_and_grads(module, p: Pool, dt: str) -> None:
    rng = np.random.default_rng(SEED)
    x = random_array(p.x, dt, rng, -2, 2)
    n = f"{p.name}_{dt}"
    y, idx = getattr(module, f"max_{n}")(x)
    want_y, want_idx = max_ref(p, x)
    near(y, want_y, dt, "max_pool")
    # ties (rounded halves) may pick another maximum: the value at the index must be the maximum
    assert idx.dtype == np.int64 and np.array_equal(x.ravel()[idx].astype(np.float64), want_y)
    if dt in ("float32", "float64"):
        np.testing.assert_array_equal(idx, want_idx)
    near(getattr(module, f"avg_{n}")(x), avg_ref(p, x), dt, "avg_pool")
    dout = random_array(p.y, dt, rng, -1, 1)
    near(getattr(module, f"max_grad_{n}")(x, idx, dout), max_grad_ref(p, idx, dout), dt, "max_pool_grad")
    near(getattr(module, f"avg_grad_{n}")(x, dout), avg_grad_ref(p, dout), dt, "avg_pool_grad")


@pytest.mark.parametrize("p,dt", [(p, dt) for p in WIDE for dt in ("float32", "float64")],
                         ids=[f"{p.name}_{dt}" for p in WIDE for dt in ("float32", "float64")])
def test_max_pool_wide_rows_ties_and_nans(module, p: Pool, dt: str) -> None:
    rng = np.random.default_rng(SEED)
    x = rng.integers(-3, 4, p.x).astype(np_dtype(dt))  # many ties
    marks = rng.choice(x.size, 2 * (x.size // 25), replace=False)
    x.ravel()[marks[: x.size // 25]] = np.nan
    x.ravel()[marks[x.size // 25:]] = -np.inf  # never lost to a padded tap
    (y, idx), routes = run_counting_routes(module, f"max_{p.name}_{dt}", x)
    assert routes == route("max_pool", p, dt)
    want_y, want_idx = max_ref(p, x)  # np.argmax: the first NaN, else the first maximum
    np.testing.assert_array_equal(y.astype(np.float64), want_y)  # NaNs in the same places
    np.testing.assert_array_equal(idx, want_idx)


@pytest.mark.parametrize("p,dt", VALUES, ids=[f"{p.name}_{dt}" for p, dt in VALUES])
def test_max_pool_values_alone(module, p: Pool, dt: str) -> None:
    """Indices nothing reads: the values kernel (f32: whole planes padded with -inf; f64: the row
    path without indices) gives max_pool_one's values, NaNs and -infs included."""
    rng = np.random.default_rng(SEED + 1)
    x = rng.integers(-3, 4, p.x).astype(np_dtype(dt))
    marks = rng.choice(x.size, 2 * (x.size // 25), replace=False)
    x.ravel()[marks[: x.size // 25]] = np.nan
    x.ravel()[marks[x.size // 25:]] = -np.inf
    x.ravel()[: min(4, x.size)] = -np.inf  # a first window of -infs (not the padding's)
    got, routes = run_counting_routes(module, f"maxv_{p.name}_{dt}", x)
    np.testing.assert_array_equal(got.astype(np.float64), max_ref(p, x)[0])
    assert routes == route("max_pool", p, dt, values=True)


def test_max_pool_grad_index_outside_its_plane(module) -> None:
    p = POOLS[0]
    x = np.zeros(p.x, np.float32)
    idx = np.zeros(p.y, np.int64)  # plane 0's first element: fine for plane 0 only
    with pytest.raises(IndexError, match=r"argument 'a1' holds index 0, outside its image and channel of x"):
        module.max_grad_p1d_float32(x, idx, np.ones(p.y, np.float32))


@pytest.mark.parametrize("p", POOLS, ids=[p.name for p in POOLS])
def test_layer_grads_finite_differences(module, p: Pool) -> None:
    """First order through max_pool_grad / avg_pool_grad, second order through their own vjps."""
    rng = np.random.default_rng(SEED)
    x, dout, probe = (rng.uniform(-1, 1, s) for s in (p.x, p.y, p.x))
    f, g = getattr(module, f"layer_{p.name}"), getattr(module, f"layer_{p.name}_grad")
    eps = 1e-6
    fd = float(np.sum(dout * (f(x + eps * probe) - f(x - eps * probe)))) / (2 * eps)
    gx = g(x, dout)
    assert abs(fd - float(np.sum(gx * probe))) <= 1e-6 * (1 + abs(fd))
    # second order: d/dx <g(x, dout), v> in direction probe, against differences of g
    gg = getattr(module, f"layer_{p.name}_grad_grad")
    v = rng.uniform(-1, 1, p.x)
    ggx = gg(x, dout, v)[0]
    fd2 = float(np.sum(v * (g(x + eps * probe, dout) - g(x - eps * probe, dout)))) / (2 * eps)
    assert abs(fd2 - float(np.sum(ggx * probe))) <= 1e-5 * (1 + abs(fd2))


BAD = [
    ("opc.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 0, 1>}", "tensor<1x2x6x6xf32>",
     "(tensor<1x2x6x6xf32>, tensor<1x2x6x6xi64>)", "strides must be >= 1, got 0 at index 0"),
    ("opc.max_pool %x {kernel = array<i64: 2, 2>, pads = array<i64: 0, 0, -1, 0>}", "tensor<1x2x6x6xf32>",
     "(tensor<1x2x5x5xf32>, tensor<1x2x5x5xi64>)", "pads must be >= 0, got -1 at index 2"),
    ("opc.avg_pool %x {kernel = array<i64: 7>}", "tensor<1x2x6xf32>", "tensor<1x2x1xf32>",
     "kernel of extent 7 (size 7, dilations 1) is larger than the padded input 6"),
    ("opc.avg_pool %x {kernel = array<i64: 2>, pads = array<i64: 2, 0>}", "tensor<1x2x6xf32>", "tensor<1x2x7xf32>",
     "the pooling window 0 of spatial dim 0 covers only padding"),
    ("opc.max_pool %x {kernel = array<i64: 2, 2>}", "tensor<1x2x6x6xf32>", "(tensor<1x2x5x5xf32>, tensor<1x2x5x5xi32>)",
     "indices must have element type i64"),
]


@pytest.mark.parametrize("op,tx,result,message", BAD)
def test_verifier_names_the_attribute(op: str, tx: str, result: str, message: str) -> None:
    outs = result.strip("()").split(", ")
    names = ", ".join(f"%r{i}" for i in range(len(outs)))
    text = (f"func.func @f(%x: {tx}) {{\n  {names} = {op} : ({tx}) -> {result}\n  func.return\n}}\n")
    with pytest.raises(OpcError) as err:
        parse_text(text, "bad.mlir")
    msg = str(err.value)
    assert msg.startswith("bad.mlir:2:3: error: ") and message in msg, msg


@pytest.mark.parametrize("p,dt", [(p, dt) for p in AVG_WIDE for dt in ("float32", "float64")],
                         ids=[f"{p.name}_{dt}" for p in AVG_WIDE for dt in ("float32", "float64")])
def test_avg_pool_wide_rows(module, p: Pool, dt: str) -> None:
    x = random_array(p.x, dt, np.random.default_rng(SEED), -2, 2)
    got, routes = run_counting_routes(module, f"avg_{p.name}_{dt}", x)
    near(got, avg_ref(p, x), dt, "avg_pool")
    assert routes == route("avg_pool", p, dt)
