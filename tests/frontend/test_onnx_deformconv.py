"""ONNX DeformConv (composed at import: bilinear samples by gather, one batched matmul) against
onnxruntime (float32) and onnx's reference implementation (float64, float16 via float32), over
groups, offset groups, strides, dilations, pads, mask and bias; its gradients w.r.t. X, W,
offset, mask and B against central differences of the float64 forward. One compiled module."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from onnx_helpers import call, function_name, graph_model, helper, import_all, run_ort, single

import opc
from opc.errors import OpcError


@dataclass(frozen=True)
class Case:
    name: str
    x: tuple[int, int, int, int]          # N, C, H, W
    w: tuple[int, int, int, int]          # O, C/group, kH, kW
    group: int = 1
    offset_group: int = 1
    strides: tuple[int, int] = (1, 1)
    dilations: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    mask: bool = False
    bias: bool = False
    dtype: str = "float32"

    def out(self) -> tuple[int, int]:
        (_, _, h, w), (_, _, kh, kw) = self.x, self.w
        oh = (h + self.pads[0] + self.pads[2] - (kh - 1) * self.dilations[0] - 1) // self.strides[0] + 1
        ow = (w + self.pads[1] + self.pads[3] - (kw - 1) * self.dilations[1] - 1) // self.strides[1] + 1
        return oh, ow


CASES = [
    Case("plain", (1, 1, 5, 5), (1, 1, 3, 3)),
    Case("padded_bias", (2, 2, 5, 4), (3, 2, 3, 2), pads=(1, 0, 1, 1), bias=True),
    Case("groups", (1, 4, 5, 5), (4, 2, 2, 2), group=2),
    Case("offset_groups_mask", (2, 4, 4, 5), (2, 4, 2, 2), offset_group=2, mask=True),
    Case("both_groups", (1, 4, 6, 6), (8, 1, 3, 3), group=4, offset_group=2, mask=True, bias=True),
    Case("stride_dilation", (1, 2, 7, 7), (2, 2, 2, 3), strides=(2, 1), dilations=(2, 2), pads=(1, 1, 0, 1)),
    Case("f64_all", (1, 2, 5, 5), (2, 1, 2, 2), group=2, offset_group=2, strides=(2, 2), pads=(1, 1, 1, 1),
         mask=True, bias=True, dtype="float64"),
    Case("f16", (1, 2, 4, 4), (2, 2, 2, 2), mask=True, bias=True, dtype="float16"),
]


def feeds(case: Case, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    (n, _, _, _), (o, _, kh, kw) = case.x, case.w
    oh, ow = case.out()
    k = kh * kw
    dt = np.dtype(case.dtype)
    out = {"X": rng.uniform(-1, 1, case.x).astype(dt), "W": rng.uniform(-1, 1, case.w).astype(dt),
           # offsets up to 2.5 pixels: many samples fall partly or wholly outside the image
           "offset": rng.uniform(-2.5, 2.5, (n, case.offset_group * k * 2, oh, ow)).astype(dt)}
    if case.bias or case.mask:
        out["B"] = rng.uniform(-1, 1, (o,)).astype(dt) if case.bias else np.zeros((o,), dt)
    if case.mask:
        out["mask"] = rng.uniform(0, 1, (n, case.offset_group * k, oh, ow)).astype(dt)
    return out


def model(case: Case, dtype: str | None = None):
    f = {k: v.astype(dtype) for k, v in feeds(case).items()} if dtype else feeds(case)
    return single("DeformConv", f, opset=19, kernel_shape=list(case.w[2:]), group=case.group,
                  offset_group=case.offset_group, strides=list(case.strides), dilations=list(case.dilations),
                  pads=list(case.pads))


@pytest.fixture(scope="module")
def compiled():
    module, params = import_all({c.name: model(c) for c in CASES})
    return opc.compile(module, grad=True), params


def reference(case: Case, f: dict[str, np.ndarray]) -> np.ndarray:
    if case.dtype == "float32":
        return run_ort(model(case), f)[0]
    from onnx.reference import ReferenceEvaluator

    if case.dtype == "float16":  # the reference in float32 on the same float16 values
        f32 = {k: v.astype(np.float32) for k, v in f.items()}
        return ReferenceEvaluator(model(case, "float32")).run(None, f32)[0]
    return ReferenceEvaluator(model(case)).run(None, f)[0]


def numpy_deform_conv(case: Case, f: dict[str, np.ndarray]) -> np.ndarray:
    """An independent float64 oracle: every tap's bilinear sample (corners outside read 0) in loops,
    the im2col matrix, a grouped matmul."""
    x, w, offset = (f[k].astype(np.float64) for k in ("X", "W", "offset"))
    (n, c, h, wd), (o, cpg, kh, kw) = x.shape, w.shape
    oh, ow = case.out()
    g = case.offset_group
    offset = offset.reshape(n, g, kh, kw, 2, oh, ow)
    mask = f["mask"].astype(np.float64).reshape(n, g, kh, kw, oh, ow) if "mask" in f else np.ones((n, g, kh, kw, oh, ow))
    cols = np.zeros((n, c, kh, kw, oh, ow))
    for b, ch, i, j, y, z in np.ndindex(n, c, kh, kw, oh, ow):
        og = ch // (c // g)
        py = y * case.strides[0] - case.pads[0] + i * case.dilations[0] + offset[b, og, i, j, 0, y, z]
        px = z * case.strides[1] - case.pads[1] + j * case.dilations[1] + offset[b, og, i, j, 1, y, z]
        y0, x0 = int(np.floor(py)), int(np.floor(px))
        total = 0.0
        for yy, wy in ((y0, 1 - (py - y0)), (y0 + 1, py - y0)):
            for xx, wx in ((x0, 1 - (px - x0)), (x0 + 1, px - x0)):
                if 0 <= yy < h and 0 <= xx < wd:
                    total += wy * wx * x[b, ch, yy, xx]
        cols[b, ch, i, j, y, z] = total * mask[b, og, i, j, y, z]
    cols = cols.reshape(n, case.group, cpg * kh * kw, oh * ow)
    out = np.matmul(w.reshape(case.group, o // case.group, cpg * kh * kw), cols).reshape(n, o, oh, ow)
    return out + f["B"].astype(np.float64).reshape(1, o, 1, 1) if "B" in f else out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_numpy_oracle_matches_onnx_reference(case):
    """The float64 oracle against onnxruntime (float32) / onnx's reference (which samples in float32)."""
    f = feeds(case, seed=1)
    want = reference(case, f).astype(np.float64)
    np.testing.assert_allclose(numpy_deform_conv(case, f), want, rtol=0, atol=TOL[case.dtype] * max(1.0, np.abs(want).max()))


TOL = {"float32": 2e-5, "float64": 1e-6, "float16": 6e-3}  # the reference's float64 still samples in float32


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_deform_conv_matches_the_reference(compiled, case):
    m, params = compiled
    f = feeds(case, seed=1)
    (got,) = call(m, case.name, f, params[case.name])
    want = reference(case, f)
    assert got.dtype == np.dtype(case.dtype) and got.shape == want.shape
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=0, atol=TOL[case.dtype] * scale)
    if case.dtype == "float64":  # to the last bits against the float64 oracle
        np.testing.assert_allclose(got, numpy_deform_conv(case, f), rtol=1e-12, atol=1e-12)


def finite_differences(fn, args: list[np.ndarray], dout: np.ndarray, eps: float = 1e-6) -> list[np.ndarray]:
    grads = []
    for i, a in enumerate(args):
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            plus, minus = [b.copy() for b in args], [b.copy() for b in args]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            g[idx] = np.sum((fn(*plus) - fn(*minus)) * dout) / (2 * eps)
        grads.append(g)
    return grads


@pytest.mark.parametrize("case", [c for c in CASES if c.dtype == "float64"], ids=lambda c: c.name)
def test_deform_conv_gradients(compiled, case):
    """d/dX, dW, doffset, dB, dmask of sum(out * dout) against central differences."""
    m, params = compiled
    f = feeds(case, seed=2)
    args = list(f.values())
    fn = getattr(m, function_name(case.name))
    dout = np.random.default_rng(3).uniform(-1, 1, fn(*args).shape)
    got = getattr(m, function_name(case.name) + "_grad")(*args, dout)
    want = finite_differences(fn, args, dout)
    for name, g, w in zip(f, got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7, err_msg=name)


def test_deform_conv_float32_gradient_of_x_and_offset(compiled):
    """The float32 module's gradients agree with central differences of the float64 NumPy oracle."""
    case = next(c for c in CASES if c.name == "offset_groups_mask")
    m, params = compiled
    f = feeds(case, seed=4)
    dout = np.random.default_rng(5).uniform(-1, 1, (case.x[0], case.w[0], *case.out())).astype(np.float32)
    got = getattr(m, function_name(case.name) + "_grad")(*f.values(), dout)
    f64 = {k: v.astype(np.float64) for k, v in f.items()}
    for i, name in ((0, "X"), (2, "offset")):
        def forward(v, name=name):
            return numpy_deform_conv(case, {**f64, name: v})

        (want,) = finite_differences(forward, [f64[name]], dout.astype(np.float64))
        np.testing.assert_allclose(got[i], want, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("attrs,message", [
    ({"kernel_shape": [3, 3]}, "kernel_shape \\[3, 3\\] differs from W's \\[2, 2\\]"),
    ({"offset_group": 3}, "X's 2 channels do not split into offset_group 3"),
])
def test_deform_conv_refusals(attrs, message):
    x, w = np.zeros((1, 2, 4, 4), np.float32), np.zeros((2, 2, 2, 2), np.float32)
    offset = np.zeros((1, 8, 3, 3), np.float32)
    node = helper.make_node("DeformConv", ["X", "W", "offset"], ["y0"], name="the_DeformConv", **attrs)
    mdl = graph_model([node], {"X": x, "W": w, "offset": offset}, ["y0"], opset=19)
    with pytest.raises(OpcError, match=rf"^node 'the_DeformConv' \(DeformConv\): {message}"):
        opc.import_onnx(mdl)
