"""The model zoo end to end (examples/zoo): each model built as ONNX, imported,
compiled, and checked
  * forward (f32, opsets 13 to 21) against onnxruntime and the NumPy reference;
  * gradients w.r.t. every weight (and float input) of the f64 twin against
    central finite differences, element by element;
  * the f32 model's value_and_grad against the f64 gradients.
Two C builds in all: the forward module, and the module with gradients."""

from __future__ import annotations

import numpy as np
import pytest
from nvcc_check import assert_nvcc_compiles
from onnx_helpers import EXAMPLES, call, import_all, run_ort
from oracle import np_dtype

import opc

assert EXAMPLES.is_dir()  # onnx_helpers put it on sys.path (and skipped the module without onnx)
from zoo import MODELS, common  # noqa: E402

OPSETS = [13, 17, 18, 21]
FORWARD = {f"{name}_o{opset}": (name, opset) for name in MODELS for opset in OPSETS}
HALVES = {f"{name}_{dt}": (name, dt) for name in MODELS for dt in ("float16", "bfloat16")}
GRAD = {f"{name}_f64": (name, np.float64) for name in MODELS} | {f"{name}_f32": (name, np.float32) for name in MODELS}


def build(name: str, opset: int = 17, dtype=np.float32):
    return MODELS[name].build(dtype=dtype, opset=opset)


@pytest.fixture(scope="module")
def forward():
    models = {case: build(name, opset) for case, (name, opset) in FORWARD.items()}
    models |= {case: build(name, 17, np_dtype(dt)) for case, (name, dt) in HALVES.items()}
    module, params = import_all(models)
    return opc.compile(module), models, params


@pytest.fixture(scope="module")
def with_grads():
    models = {case: build(name, 17, dtype) for case, (name, dtype) in GRAD.items()}
    module, params = import_all(models)
    return opc.compile(module, grad=True), models, params


def as_list(x):
    return list(x) if isinstance(x, tuple) else [x]


@pytest.mark.parametrize("case", list(FORWARD))
def test_forward_matches_onnxruntime_and_numpy(forward, case):
    compiled, models, params = forward
    name, _ = FORWARD[case]
    feeds = MODELS[name].inputs()
    got = call(compiled, case, feeds, params[case])
    want_ort = run_ort(models[case], feeds)
    want_np = as_list(MODELS[name].reference(feeds, common.weights(models[case])))
    for g, w_ort, w_np in zip(got, want_ort, want_np, strict=True):
        assert g.dtype == np.float32 and g.shape == w_ort.shape
        np.testing.assert_allclose(g, w_ort, rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(g, w_np, rtol=5e-5, atol=5e-5)


@pytest.mark.parametrize("case", list(HALVES))
def test_half_precision_forward_matches_numpy(forward, case):
    """The same models in f16 and bf16 (computed in f32, rounded after every op), against f64 NumPy."""
    compiled, models, params = forward
    name, dt = HALVES[case]
    feeds = MODELS[name].inputs(dtype=np_dtype(dt))
    got = call(compiled, case, feeds, params[case])
    wide = {k: v.astype(np.float64) if v.dtype == np_dtype(dt) else v for k, v in feeds.items()}
    want = as_list(MODELS[name].reference(wide, {k: v.astype(np.float64) for k, v in common.weights(models[case]).items()}))
    tol = {"float16": 5e-3, "bfloat16": 5e-2}[dt]
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np_dtype(dt)
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=tol, atol=tol)


def objective(fn, args: list[np.ndarray], douts: list[np.ndarray]) -> float:
    return sum(float(np.sum(o * d)) for o, d in zip(as_list(fn(*args)), douts))


@pytest.mark.parametrize("name", list(MODELS))
def test_gradients_match_finite_differences_f64(with_grads, name):
    compiled, _, params = with_grads
    case = f"{name}_f64"
    feeds = MODELS[name].inputs(dtype=np.float64)
    weights = params[case]
    fn = getattr(compiled, f"f_{case}")
    outs = as_list(fn(*feeds.values(), *weights.values()))
    rng = np.random.default_rng(7)
    douts = [rng.standard_normal(o.shape) for o in outs]
    grads = as_list(getattr(compiled, f"f_{case}_grad")(*feeds.values(), *weights.values(), *douts))
    float_inputs = [k for k, v in feeds.items() if v.dtype.kind == "f"]
    args = list(feeds.values()) + list(weights.values())
    positions = [list(feeds).index(k) for k in float_inputs] + list(range(len(feeds), len(args)))
    assert len(grads) == len(positions)  # one gradient per float input and per weight
    eps = 1e-6
    for pos, g in zip(positions, grads):
        assert g.shape == args[pos].shape
        fd = np.zeros_like(args[pos])
        for idx in np.ndindex(args[pos].shape):
            plus, minus = [a.copy() for a in args], [a.copy() for a in args]
            plus[pos][idx] += eps
            minus[pos][idx] -= eps
            fd[idx] = (objective(fn, plus, douts) - objective(fn, minus, douts)) / (2 * eps)
        label = (list(feeds) + list(weights))[pos]
        # (the key bias's true gradient is zero: softmax ignores a shift shared by a row's scores)
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7, err_msg=f"{name}: gradient w.r.t. {label}")


@pytest.mark.parametrize("name", list(MODELS))
def test_f32_value_and_grad_agrees_with_f64(with_grads, name):
    compiled, _, params = with_grads
    feeds32, feeds64 = MODELS[name].inputs(dtype=np.float32), MODELS[name].inputs(dtype=np.float64)
    w32 = params[f"{name}_f32"]
    w64 = {k: v.astype(np.float64) for k, v in w32.items()}  # the same weights in f64
    outs = as_list(getattr(compiled, f"f_{name}_f32")(*feeds32.values(), *w32.values()))
    douts = [np.random.default_rng(3).standard_normal(o.shape) for o in outs]
    both = as_list(getattr(compiled, f"f_{name}_f32_value_and_grad")(
        *feeds32.values(), *w32.values(), *[d.astype(np.float32) for d in douts]))
    want = as_list(getattr(compiled, f"f_{name}_f64_value_and_grad")(*feeds64.values(), *w64.values(), *douts))
    assert len(both) == len(want)
    for got, ref in zip(both, want):
        scale = max(1.0, float(np.abs(ref).max()))
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * scale)


@pytest.mark.parametrize("name, arg", [("embedding_bag", "tokens"), ("mlp_classifier", "labels")])
def test_index_out_of_range_is_an_index_error_naming_the_input(forward, name, arg):
    compiled, _, params = forward
    feeds = MODELS[name].inputs()
    feeds[arg] = feeds[arg].copy()
    feeds[arg].flat[1] = 1000
    with pytest.raises(IndexError, match=f"'{arg}'"):
        call(compiled, f"{name}_o17", feeds, params[f"{name}_o17"])


def test_zoo_cuda_source_compiles_without_warnings(tmp_path):
    """The three models with their gradients, emitted for the CUDA target, pass nvcc -c (no GPU needed)."""
    from opc.api import emit
    from opc.ir import Source
    from opc.lowering.cuda_build import nvcc_path

    if nvcc_path() is None:
        pytest.skip("nvcc not on PATH")
    module, _ = import_all({name: build(name) for name in MODELS})
    assert_nvcc_compiles(tmp_path, "zoo", emit(Source(module, "zoo", {}), "cuda", target="cuda", grad=True))
