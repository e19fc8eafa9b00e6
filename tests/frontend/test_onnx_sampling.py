"""ONNX GridSample and AffineGrid (opc/onnx_import/sampling.py): every case imported into
one module; the forward against onnxruntime over modes x padding modes x align_corners x 2-D/3-D,
the gradients (X, grid, theta) against central differences of opc's own forward (f64)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from onnx_helpers import call, function_name, graph_model, helper, import_all, run_ort

import opc

MODES = ("linear", "nearest", "cubic")
PADDINGS = ("zeros", "border", "reflection")


def grid_sample_case(mode: str, padding: str, align: int, rank: int = 2, dtype=np.float32):
    rng = np.random.default_rng(zlib.crc32(repr((mode, padding, align, rank)).encode()))
    spatial = (4, 5) if rank == 2 else (3, 4, 5)
    out = (3, 6) if rank == 2 else (2, 3, 4)
    x = rng.standard_normal((2, 3, *spatial)).astype(dtype)
    grid = rng.uniform(-1.3, 1.3, (2, *out, rank)).astype(dtype)  # some points outside: padding matters
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding, align_corners=align)
    feeds = {"x": x, "grid": grid}
    return graph_model([node], feeds, ["y"], opset=20), feeds


def affine_grid_case(rank: int, align: int, dtype=np.float32):
    rng = np.random.default_rng(rank * 10 + align)
    theta = (np.eye(rank, rank + 1) + rng.uniform(-0.3, 0.3, (3, rank, rank + 1))).astype(dtype)
    size = np.array([3, 2, 4, 5] if rank == 2 else [3, 2, 3, 4, 5], np.int64)
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align)
    return graph_model([node], {"theta": theta}, ["grid"], {"size": size}, opset=20), {"theta": theta}


CASES = {
    **{f"grid-{m}-{p}-{a}": (lambda m=m, p=p, a=a, dt=np.float32: grid_sample_case(m, p, a, 2, dt))
       for m in MODES for p in PADDINGS for a in (0, 1)},
    **{f"grid3d-{m}-{p}-{a}": (lambda m=m, p=p, a=a, dt=np.float32: grid_sample_case(m, p, a, 3, dt))
       for m in ("linear", "nearest") for p in PADDINGS for a in (0, 1)},
    **{f"affine-{r}d-{a}": (lambda r=r, a=a, dt=np.float32: affine_grid_case(r, a, dt)) for r in (2, 3) for a in (0, 1)},
}
GRAD_CASES = ["grid-linear-zeros-0", "grid-linear-reflection-1", "grid-cubic-border-0", "grid3d-linear-border-1",
              "grid-nearest-zeros-1", "affine-2d-0", "affine-3d-1"]


@pytest.fixture(scope="module")
def compiled():
    """The forward cases in one module, the gradient cases (f64) with their backward in another."""
    built = {cid: make() for cid, make in CASES.items()}
    built64 = {cid + "-f64": CASES[cid](dt=np.float64) for cid in GRAD_CASES}
    module, params = import_all({c: m for c, (m, _) in built.items()})
    module64, params64 = import_all({c: m for c, (m, _) in built64.items()})
    return opc.compile(module), params, built, (opc.compile(module64, grad=True), params64, built64)


@pytest.mark.parametrize("cid", list(CASES))
def test_forward_matches_onnxruntime(compiled, cid: str) -> None:
    m, params, built, _ = compiled
    model, feeds = built[cid]
    (want,) = run_ort(model, feeds)
    (got,) = call(m, cid, feeds, params[cid])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cid", GRAD_CASES)
def test_gradients_match_central_differences(compiled, cid: str) -> None:
    """<grad, v> == (L(a + h v) - L(a - h v)) / 2h along a random v, L = output times a fixed cotangent.
    The sampled points sit away from pixel centers (random), where the interpolation is smooth."""
    m, params, built64 = compiled[3]
    _, feeds = built64[cid + "-f64"]
    name = function_name(cid + "-f64")
    args = [*feeds.values(), *params[cid + "-f64"].values()]
    (out,) = call(m, cid + "-f64", feeds, params[cid + "-f64"])
    rng = np.random.default_rng(5)
    dout = rng.uniform(-1, 1, out.shape)
    grads = getattr(m, name + "_grad")(*args, dout)
    grads = list(grads) if isinstance(grads, tuple) else [grads]
    v = [rng.uniform(-1, 1, a.shape) for a in args]
    h = 1e-7

    def loss(values) -> float:
        return float(np.sum(getattr(m, name)(*values) * dout))

    fd = (loss([a + h * d for a, d in zip(args, v)]) - loss([a - h * d for a, d in zip(args, v)])) / (2 * h)
    analytic = float(sum(np.sum(g * d) for g, d in zip(grads, v)))
    assert abs(fd - analytic) <= 1e-5 * max(1.0, abs(fd)), (fd, analytic)


def test_cubic_3d_is_one_line_error() -> None:
    model, _ = grid_sample_case("linear", "zeros", 0, rank=3)
    (mode,) = [a for a in model.graph.node[0].attribute if a.name == "mode"]
    mode.s = b"cubic"
    with pytest.raises(opc.OpcError, match="cubic mode samples 2-D images only"):
        opc.import_onnx(model)
