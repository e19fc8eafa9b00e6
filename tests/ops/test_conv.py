"""Convolutions (issue 19) on the CPU: conv, conv_transpose, conv_grad_input and
conv_grad_filter for f16, bf16, f32 and f64 against NumPy references over a
grid of 1-D and 2-D geometries (strides, dilations, asymmetric pads, groups,
depthwise with and without a channel multiplier, 1x1, rows longer than the
direct kernels' tile); the grad ops again by their rules (decompose="all":
conv_grad_input invokes conv_transpose, conv_grad_filter and conv become
slices and a batched matmul), which must agree; the gradients of a conv
layer against finite differences, by kernels and by rules; the verifier's
messages; `opc explain`'s two routes.

Two modules hold every kernel case and every rule case as functions."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest
from oracle import FLOATS, func, np_dtype, random_array, ttype

import opc
from opc.dialects import opc as o
from opc.errors import OpcError
from opc.explain import explain
from opc.ir import parse_text

SEED = 19


@dataclass(frozen=True)
class Geo:
    name: str
    x: tuple[int, ...]
    w: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    group: int = 1

    @property
    def out(self) -> tuple[int, ...]:
        r = len(self.x) - 2
        return tuple((i + self.pads[j] + self.pads[r + j] - self.dilations[j] * (k - 1) - 1) // self.strides[j] + 1
                     for j, (i, k) in enumerate(zip(self.x[2:], self.w[2:])))

    @property
    def y(self) -> tuple[int, ...]:
        return (self.x[0], self.w[0], *self.out)

    @property
    def output_padding(self) -> tuple[int, ...]:
        """What conv_transpose of y needs to give back x's shape."""
        r = len(self.x) - 2
        return tuple(i - ((o - 1) * s - self.pads[j] - self.pads[r + j] + d * (k - 1) + 1)
                     for j, (i, o, s, d, k) in enumerate(zip(self.x[2:], self.out, self.strides, self.dilations,
                                                             self.w[2:])))

    def attrs(self, transpose: bool = False) -> str:
        def arr(v) -> str:
            return f"array<i64: {', '.join(map(str, v))}>"

        parts = [f"strides = {arr(self.strides)}", f"dilations = {arr(self.dilations)}", f"pads = {arr(self.pads)}",
                 f"group = {self.group}"]
        if transpose and any(self.output_padding):
            parts.append(f"output_padding = {arr(self.output_padding)}")
        return "{" + ", ".join(parts) + "}"


GEOS = [
    Geo("c1d", (2, 3, 9), (4, 3, 3), (1,), (1,), (1, 1)),
    Geo("c1d_s2_d2_g2", (1, 4, 11), (6, 2, 3), (2,), (2,), (2, 1), 2),
    Geo("c2d", (2, 3, 7, 6), (5, 3, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    Geo("c2d_s23_asym", (1, 4, 9, 8), (4, 4, 3, 2), (2, 3), (1, 1), (0, 1, 2, 0)),
    Geo("c2d_dil", (2, 2, 8, 9), (3, 2, 2, 3), (1, 2), (2, 1), (1, 0, 0, 2)),
    Geo("c2d_group", (1, 6, 6, 5), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2),
    Geo("depthwise", (2, 4, 7, 7), (4, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 4),
    Geo("depthwise_x2", (1, 3, 6, 8), (6, 1, 3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 3),
    Geo("pointwise", (2, 8, 5, 6), (4, 8, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    Geo("long_rows", (1, 2, 3, 300), (2, 1, 1, 5), (1, 1), (1, 1), (0, 2, 0, 2), 2),
    Geo("long_rows_gemm", (1, 2, 2, 270), (3, 2, 2, 3), (1, 2), (1, 1), (1, 1, 0, 0)),
    Geo("c3d", (2, 3, 5, 4, 6), (4, 3, 3, 2, 3), (1, 1, 1), (1, 1, 1), (1, 0, 1, 1, 1, 1)),
    Geo("c3d_s2_dil_g2", (1, 4, 7, 6, 5), (4, 2, 2, 3, 2), (2, 1, 2), (1, 2, 1), (0, 1, 1, 1, 0, 1), 2),
    # the direct loops' first axis (3-D only): a depthwise grad's input rows whose taps fall past the last output
    Geo("depthwise_3d", (1, 2, 4, 5, 6), (4, 1, 3, 2, 3), (1, 2, 1), (1, 1, 2), (1, 1, 0, 0, 1, 1), 2),
]
BY_NAME = {g.name: g for g in GEOS}
HALF_GEOS = ("c1d_s2_d2_g2", "c2d", "c2d_s23_asym", "depthwise", "pointwise", "c3d_s2_dil_g2")
OPS = ("conv", "conv_grad_input", "conv_grad_filter", "conv_transpose")


# ---------------------------------------------------------------------------
# NumPy references (float64)
# ---------------------------------------------------------------------------


def windows(g: Geo):
    """For each kernel offset: (its index, the slices of the padded input it reads)."""
    for kk in itertools.product(*(range(k) for k in g.w[2:])):
        yield kk, tuple(slice(k * d, k * d + (n - 1) * s + 1, s)
                        for k, d, n, s in zip(kk, g.dilations, g.out, g.strides))


def padded(g: Geo, x: np.ndarray) -> np.ndarray:
    r = len(g.x) - 2
    return np.pad(x, [(0, 0), (0, 0)] + [(g.pads[j], g.pads[r + j]) for j in range(r)])


def groups(g: Geo):
    cg, og = g.x[1] // g.group, g.w[0] // g.group
    for i in range(g.group):
        yield slice(i * cg, (i + 1) * cg), slice(i * og, (i + 1) * og)


def conv_ref(g: Geo, x, w):
    xp, w = padded(g, np.asarray(x, np.float64)), np.asarray(w, np.float64)
    y = np.zeros(g.y)
    for kk, sl in windows(g):
        xs = xp[(slice(None), slice(None), *sl)]
        for cs, os in groups(g):
            y[:, os] += np.einsum("nc...,oc->no...", xs[:, cs], w[(os, slice(None), *kk)])
    return y


def grad_input_ref(g: Geo, dy, w):
    dy, w = np.asarray(dy, np.float64), np.asarray(w, np.float64)
    dxp = np.zeros(padded(g, np.zeros(g.x)).shape)
    for kk, sl in windows(g):
        view = dxp[(slice(None), slice(None), *sl)]
        for cs, os in groups(g):
            view[:, cs] += np.einsum("no...,oc->nc...", dy[:, os], w[(os, slice(None), *kk)])
    r = len(g.x) - 2
    return dxp[(slice(None), slice(None), *(slice(g.pads[j], g.pads[j] + g.x[2 + j]) for j in range(r)))]


def grad_filter_ref(g: Geo, x, dy):
    xp, dy = padded(g, np.asarray(x, np.float64)), np.asarray(dy, np.float64)
    dw = np.zeros(g.w)
    for kk, sl in windows(g):
        xs = xp[(slice(None), slice(None), *sl)]
        for cs, os in groups(g):
            d, v = dy[:, os], xs[:, cs]
            dw[(os, slice(None), *kk)] = np.einsum("nop,ncp->oc", d.reshape(*d.shape[:2], -1),
                                                   v.reshape(*v.shape[:2], -1))
    return dw


def shapes(g: Geo, op: str) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
    """Operand shapes and result shape of `op` on geometry g."""
    return {"conv": ([g.x, g.w], g.y), "conv_grad_input": ([g.y, g.w], g.x),
            "conv_grad_filter": ([g.x, g.y], g.w), "conv_transpose": ([g.y, g.w], g.x)}[op]


def reference(g: Geo, op: str, a, b):
    if op == "conv":
        return conv_ref(g, a, b)
    if op in ("conv_grad_input", "conv_transpose"):
        return grad_input_ref(g, a, b)
    return grad_filter_ref(g, a, b)


def case_name(g: Geo, op: str, dt: str) -> str:
    return f"{op}_{g.name}_{dt}"


def source(g: Geo, op: str, dt: str) -> str:
    (sa, sb), sr = shapes(g, op)
    args = [(sa, dt), (sb, dt)]
    line = (f"%r = opc.{op} %a0, %a1 {g.attrs(op == 'conv_transpose')} : ({ttype(sa, dt)}, {ttype(sb, dt)}) -> "
            f"{ttype(sr, dt)}")
    return func(case_name(g, op, dt), args, line, [(sr, dt)])


KERNEL_CASES = [(g, op, dt) for g in GEOS for op in OPS
                for dt in (FLOATS if g.name in HALF_GEOS else ["float32", "float64"])]
RULE_CASES = [(g, op, dt) for g in GEOS for op in OPS[:3] for dt in ["float32"]] + [
    (BY_NAME[n], op, dt) for n in ("c2d", "depthwise") for op in OPS[:3] for dt in ("float64", "bfloat16")]
# max |error| / (max |reference| + 1): one rounding of the result plus f32 sums of a few hundred terms
TOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-13}


@pytest.fixture(scope="module")
def modules():
    kernels = opc.compile("\n".join(source(*c) for c in KERNEL_CASES), target="cpu")
    rules = opc.compile("\n".join(source(*c) for c in RULE_CASES), target="cpu", decompose="all")
    return kernels, rules


def inputs(g: Geo, op: str, dt: str) -> list[np.ndarray]:
    rng = np.random.default_rng(SEED)
    return [random_array(s, dt, rng, -1, 1) for s in shapes(g, op)[0]]


def assert_near(got: np.ndarray, want: np.ndarray, dt: str, name: str, scale: float = 1.0) -> None:
    assert got.dtype == np_dtype(dt) and got.shape == want.shape, (name, got.dtype, got.shape)
    err = float(np.max(np.abs(got.astype(np.float64) - want), initial=0.0))
    bound = TOL[dt] * scale * (float(np.max(np.abs(want), initial=0.0)) + 1)
    assert err <= bound, (name, err, bound)


@pytest.mark.parametrize("g,op,dt", KERNEL_CASES, ids=[case_name(*c) for c in KERNEL_CASES])
def test_kernel(modules, g: Geo, op: str, dt: str) -> None:
    a, b = inputs(g, op, dt)
    got = getattr(modules[0], case_name(g, op, dt))(a, b)
    assert_near(got, reference(g, op, a, b), dt, case_name(g, op, dt))


@pytest.mark.parametrize("g,op,dt", RULE_CASES, ids=[case_name(*c) for c in RULE_CASES])
def test_rule_agrees_with_reference_and_kernel(modules, g: Geo, op: str, dt: str) -> None:
    """decompose="all": the invoke / composite route gives the reference's numbers, and the kernel's."""
    a, b = inputs(g, op, dt)
    name = case_name(g, op, dt)
    got = getattr(modules[1], name)(a, b)
    assert_near(got, reference(g, op, a, b), dt, name, scale=2)
    kernel = getattr(modules[0], name)(a, b)
    assert_near(got, kernel.astype(np.float64), dt, name, scale=4)


# ---------------------------------------------------------------------------
# Gradients of a conv layer: finite differences, by kernels and by rules
# ---------------------------------------------------------------------------

LAYER_GEOS = ("c1d_s2_d2_g2", "c2d_dil", "c2d_group", "depthwise_x2")


def layer_source(g: Geo, transpose: bool) -> str:
    """tanh(conv(x, w) + b) (b per output channel), or the same with conv_transpose of y-shaped input."""
    (sa, sb), sr = shapes(g, "conv_transpose" if transpose else "conv")
    op = "conv_transpose" if transpose else "conv"
    bshape = (sr[1],) + (1,) * (len(sr) - 2)
    t = "float64"
    body = (f"%c = opc.{op} %a0, %a1 {g.attrs(transpose)} : ({ttype(sa, t)}, {ttype(sb, t)}) -> {ttype(sr, t)}\n"
            f"  %s = opc.add %c, %a2 : ({ttype(sr, t)}, {ttype(bshape, t)}) -> {ttype(sr, t)}\n"
            f"  %r = opc.tanh %s : ({ttype(sr, t)}) -> {ttype(sr, t)}")
    return func(f"layer_{op}_{g.name}", [(sa, t), (sb, t), (bshape, t)], body, [(sr, t)])


LAYERS = [(BY_NAME[n], tr) for n in LAYER_GEOS for tr in (False, True)]


@pytest.fixture(scope="module")
def layers():
    text = "\n".join(layer_source(g, tr) for g, tr in LAYERS)
    return opc.compile(text, target="cpu", grad=True), opc.compile(text, target="cpu", grad=True, decompose="all")


@pytest.mark.parametrize("route", ["kernel", "rule"])
@pytest.mark.parametrize("g,transpose", LAYERS, ids=[f"{'t' if tr else 'c'}_{g.name}" for g, tr in LAYERS])
def test_layer_grad_finite_differences(layers, route: str, g: Geo, transpose: bool) -> None:
    m = layers[route == "rule"]
    name = f"layer_{'conv_transpose' if transpose else 'conv'}_{g.name}"
    (sa, sb), sr = shapes(g, "conv_transpose" if transpose else "conv")
    rng = np.random.default_rng(SEED)
    args = [rng.uniform(-1, 1, s) for s in (sa, sb, (sr[1],) + (1,) * (len(sr) - 2))]
    dout = rng.uniform(-1, 1, sr)
    grads = getattr(m, f"{name}_grad")(*args, dout)
    f = getattr(m, name)
    eps = 1e-6
    for i, (a, ga) in enumerate(zip(args, grads)):
        probe = rng.uniform(-1, 1, a.shape)  # a directional derivative per argument
        plus = [v + eps * probe if j == i else v for j, v in enumerate(args)]
        minus = [v - eps * probe if j == i else v for j, v in enumerate(args)]
        fd = float(np.sum(dout * (f(*plus) - f(*minus)))) / (2 * eps)
        assert abs(fd - float(np.sum(ga * probe))) <= 1e-6 * (1 + abs(fd)), (name, i, fd, float(np.sum(ga * probe)))


# ---------------------------------------------------------------------------
# Verifier messages and routes
# ---------------------------------------------------------------------------

BAD = [
    ("opc.conv %x, %w {strides = array<i64: 0, 1>}", "tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>", "tensor<1x4x4x4xf32>",
     "strides must be >= 1, got 0 at index 0"),
    ("opc.conv %x, %w {dilations = array<i64: 1, 0>}", "tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>",
     "tensor<1x4x4x4xf32>", "dilations must be >= 1, got 0 at index 1"),
    ("opc.conv %x, %w {pads = array<i64: 1, -1, 1, 1>}", "tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>",
     "tensor<1x4x6x4xf32>", "pads must be >= 0, got -1 at index 1"),
    ("opc.conv %x, %w {group = 3}", "tensor<1x4x6x6xf32>, tensor<3x1x3x3xf32>", "tensor<1x3x4x4xf32>",
     "group 3 does not divide the 4 channels of x"),
    ("opc.conv %x, %w {group = 2}", "tensor<1x4x6x6xf32>, tensor<3x2x3x3xf32>", "tensor<1x3x4x4xf32>",
     "group 2 does not divide the 3 output channels"),
    ("opc.conv %x, %w", "tensor<1x4x6x6xf32>, tensor<4x4x7x3xf32>", "tensor<1x4x1x4xf32>",
     "kernel of extent 7 (size 7, dilations 1) is larger than the padded input 6"),
    ("opc.conv %x, %w {dilations = array<i64: 3, 1>, pads = array<i64: 0, 0, 0, 0>}",
     "tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>", "tensor<1x4x1x4xf32>", "kernel of extent 7 (size 3, dilations 3)"),
    ("opc.conv %x, %w {pads = array<i64: 1, 1>}", "tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>", "tensor<1x4x4x4xf32>",
     "pads has 2 entries, expected 4 (begins, then ends)"),
    ("opc.conv %x, %w", "tensor<1x4x6x6xf32>, tensor<4x2x3x3xf32>", "tensor<1x4x4x4xf32>",
     "w dim 1 must be the channels of x / group = 4 / 1 = 4, got 2"),
    ("opc.conv %x, %w", "tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>", "tensor<1x4x4x5xf32>",
     "y must have shape [1, 4, 4, 4]"),
    ("opc.conv %x, %w", "tensor<1x4x6x6xi32>, tensor<4x4x3x3xi32>", "tensor<1x4x4x4xi32>", "float element type"),
    ("opc.conv %x, %w", "tensor<4x6xf32>, tensor<4x6xf32>", "tensor<4x6xf32>", "x must have rank 3 to 5"),
    ("opc.conv_transpose %x, %w {strides = array<i64: 2>, output_padding = array<i64: 2>}",
     "tensor<1x4x5xf32>, tensor<4x2x3xf32>", "tensor<1x2x13xf32>", "output_padding [2] must be < strides [2]"),
    ("opc.conv_grad_input %x, %w", "tensor<1x4x4xf32>, tensor<4x3x3xf32>", "tensor<1x3x7xf32>",
     "dout must have shape [1, 4, 5]"),
    ("opc.conv_grad_filter %x, %w", "tensor<1x3x7xf32>, tensor<1x4x5xf32>", "tensor<4x3x4xf32>",
     "dout must have shape [1, 4, 4]"),
]


@pytest.mark.parametrize("op,operands,result,message", BAD)
def test_verifier_names_the_attribute(op: str, operands: str, result: str, message: str) -> None:
    tx, tw = operands.split(", ")
    text = (f"func.func @f(%x: {tx}, %w: {tw}) -> {result} {{\n  %r = {op} : ({operands}) -> {result}\n"
            f"  func.return %r : {result}\n}}\n")
    with pytest.raises(OpcError) as err:
        parse_text(text, "bad.mlir")
    msg = str(err.value)
    assert msg.startswith("bad.mlir:2:3: error: ") and message in msg, msg


def test_explain_shows_both_routes(tmp_path) -> None:
    text = layer_source(BY_NAME["c2d_group"], False)
    # fuse=False: the layer's bias add would fuse the conv into fused_conv_epilogue (test_conv_fast.py)
    r = {line.split()[0]: line.split()
         for line in explain(parse_text(text).module, "cpu", grad=True, fuse=False).splitlines()[2:]}
    assert r["opc.conv_grad_input"][2] == r["opc.conv_grad_filter"][2] == r["opc.conv"][2] == "kernel"
    from opc.ops.registry import ALL_OPS

    dev = tmp_path / "no_conv_grads.toml"
    kernels = sorted(ALL_OPS - {"opc.conv_grad_input", "opc.conv_grad_filter"})
    dev.write_text("kernels = [" + ", ".join(f'"{k}"' for k in kernels) + "]\n")
    r = {line.split()[0]: line
         for line in explain(parse_text(text).module, str(dev), grad=True, fuse=False).splitlines()[2:]}
    assert "invoke" in r["opc.conv_grad_input"] and "-> opc.conv_transpose" in r["opc.conv_grad_input"]
    assert "composite" in r["opc.conv_grad_filter"] and "opc.slice" in r["opc.conv_grad_filter"]
    assert "opc.matmul" in r["opc.conv_grad_filter"]


# ---------------------------------------------------------------------------
# The CUDA conv kernels (runtime/opc_nn.cuh) on tests/support/cuda_sim.h: no GPU here
# ---------------------------------------------------------------------------

SIM_STUBS = """#include "cuda_sim.h"
#define __device__
#define __forceinline__ inline
#include <stdint.h>
#include "opc_runtime.h"
struct __half { uint16_t x; };
struct __nv_bfloat16 { uint16_t x; };
static inline __half __ushort_as_half(uint16_t v) { return __half{v}; }
static inline float __half2float(__half h) { return opc_f16_to_f32(h.x); }
static inline __nv_bfloat16 __ushort_as_bfloat16(uint16_t v) { return __nv_bfloat16{v}; }
static inline float __bfloat162float(__nv_bfloat16 h) { return opc_bf16_to_f32(h.x); }
"""
SIM_ENTRY = """
extern "C" int conv_f32(int which, const float *a, const float *b, float *r, const int64_t *g) {
    return opc_cuda_nn_conv_t<opc_nn_f32>(which, a, b, r, opc_nn_conv_make(g[0], g[1], g[2], g[3], g[4], g[5], g[6],
        g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15], g[16], g[17], g[18], g[19], g[20], g[21]));
}
"""


@pytest.fixture(scope="module")
def simulated_conv(tmp_path_factory):
    """opc_nn.cuh's preamble and conv section built with g++ against cuda_sim.h (blocks run as threads)."""
    import ctypes
    import re
    import shutil
    import subprocess

    from opc.lowering.build import runtime_dir

    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH (it builds the CUDA simulation)")
    full = (runtime_dir() / "opc_nn.cuh").read_text()
    text = full[:full.index("/* A row's max m")] + full[full.index("/* ---- convolutions"):full.index("/* ---- pooling")]
    for inc in ("#include <cuda_runtime.h>", "#include <cuda_fp16.h>", "#include <cuda_bf16.h>",
                '#include "opc_runtime.h"'):
        text = text.replace(inc, "")
    text = re.sub(r"([\w:]+<\w+>)<<<([^;]*?), ([^;]*?)>>>\(([^;]*)\);", r"opc_sim_launch(\2, \3, [&] { \1(\4); });",
                  text)
    tmp = tmp_path_factory.mktemp("conv-sim")
    (tmp / "conv_sim.cpp").write_text(SIM_STUBS + text + "\n#endif\n" + SIM_ENTRY)
    tests = str(runtime_dir().parent / "tests" / "support")
    done = subprocess.run(["g++", "-std=c++17", "-O1", "-shared", "-fPIC", "-pthread", "-w", "-I", str(runtime_dir()),
                           "-I", tests, "-o", str(tmp / "libconv.so"), str(tmp / "conv_sim.cpp")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return ctypes.CDLL(str(tmp / "libconv.so"))


@pytest.mark.parametrize("g", GEOS, ids=[g.name for g in GEOS])
def test_cuda_conv_kernels_on_the_simulator(simulated_conv, g: Geo) -> None:
    import ctypes

    from opc.lowering.nn_lowering import conv_ints

    geo = o.conv_geometry(g.x, g.w[2:], g.w[0], g.group, g.strides, g.dilations, g.pads)
    ints = np.array(conv_ints(geo), np.int64)
    ptr = ctypes.POINTER(ctypes.c_float)
    for which, op in enumerate(OPS[:3]):
        a, b = (np.ascontiguousarray(v) for v in inputs(g, op, "float32"))
        out = np.full(shapes(g, op)[1], np.nan, np.float32)
        rc = simulated_conv.conv_f32(which, a.ctypes.data_as(ptr), b.ctypes.data_as(ptr), out.ctypes.data_as(ptr),
                                     ints.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)))
        assert rc == 0
        assert_near(out, reference(g, op, a, b), "float32", f"cuda {op} {g.name}")
