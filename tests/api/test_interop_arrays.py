"""DLPack in, the caller's kind of array out: a compiled function reads torch tensors and JAX
arrays in place (the same data pointer, no copy) and returns, with `arrays=`, torch tensors or
JAX arrays over its own result buffers (again the same pointer); what it cannot read in place
(wrong dtype, non-contiguous, device memory, a tensor that records autograd) is a ValueError
naming the argument, never a silent copy. Oracle: NumPy's sum of the same values."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util

import ml_dtypes
import numpy as np
import pytest

import opc

DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64, "i32": np.int32,
          "i64": np.int64}
SHAPE = (2, 3)
SOURCE = "\n".join(f"""func.func @add_{t}(%a: tensor<2x3x{t}>, %b: tensor<2x3x{t}>) -> tensor<2x3x{t}> {{
  %r = opc.add %a, %b : (tensor<2x3x{t}>, tensor<2x3x{t}>) -> tensor<2x3x{t}>
  func.return %r : tensor<2x3x{t}>
}}""" for t in DTYPES)
RNG = np.random.default_rng(21)


def need(package: str):
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} not installed")
    return importlib.import_module(package)


@pytest.fixture(scope="module")
def modules() -> dict[str, object]:
    """One build; a module per kind of result (the later compiles hit the cache)."""
    kinds = ["numpy"] + [k for k in ("torch", "jax") if importlib.util.find_spec(k) is not None]
    return {kind: opc.compile(SOURCE, arrays=kind) for kind in kinds}


def operands(t: str) -> tuple[np.ndarray, np.ndarray]:
    return tuple(RNG.uniform(-50, 50, SHAPE).astype(DTYPES[t]) for _ in range(2))


def oracle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) + b.astype(np.float64)).astype(a.dtype).astype(np.float64)


def framework_array(kind: str, a: np.ndarray):
    """`a` as the framework's own array (built by the framework, not by opc)."""
    if kind == "torch":
        torch = need("torch")
        if a.dtype == ml_dtypes.bfloat16:
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).clone()
        return torch.from_numpy(a).clone()
    jax = need("jax")
    jax.config.update("jax_enable_x64", True)  # else JAX makes float64 / int64 arrays 32-bit
    return jax.numpy.asarray(a)


@contextlib.contextmanager
def c_pointers(fn):
    """The addresses fn's C entry point receives, in order."""
    seen: list[int] = []
    cfunc = fn.cfunc
    fn.cfunc = lambda *ptrs: seen.extend(int(fn.ffi.cast("intptr_t", p)) for p in ptrs) or cfunc(*ptrs)
    try:
        yield seen
    finally:
        fn.cfunc = cfunc


def data_pointer(x) -> int:
    return x.data_ptr() if hasattr(x, "data_ptr") else x.unsafe_buffer_pointer()


def as_float64(x) -> np.ndarray:
    if hasattr(x, "data_ptr"):  # torch: through float64, which every dtype here converts to exactly
        return x.double().numpy()
    return np.asarray(x).astype(np.float64)


@pytest.mark.parametrize("t", DTYPES)
@pytest.mark.parametrize("kind", ["torch", "jax"])
def test_dlpack_inputs_are_read_in_place(modules, kind, t):
    a, b = operands(t)
    x, y = framework_array(kind, a), framework_array(kind, b)
    fn = modules["numpy"][f"add_{t}"]
    assert fn.check(0, x).ctypes.data == data_pointer(x)  # check(): a view of the tensor's memory
    with c_pointers(fn) as seen:
        out = fn(x, y)
    assert seen[:2] == [data_pointer(x), data_pointer(y)]  # what the C function reads: no copy
    assert isinstance(out, np.ndarray) and out.dtype == DTYPES[t]
    np.testing.assert_allclose(out.astype(np.float64), oracle(a, b), rtol=1e-2 if t in ("f16", "bf16") else 0)


@pytest.mark.parametrize("t", DTYPES)
@pytest.mark.parametrize("kind", ["torch", "jax"])
def test_results_come_back_as_the_callers_kind_without_copy(modules, kind, t):
    need(kind)
    fn = modules[kind][f"add_{t}"]
    allocated = []
    alloc = fn.empty
    fn.empty = lambda shape, dtype: allocated.append(alloc(shape, dtype)) or allocated[-1]
    try:
        a, b = operands(t)
        out = fn(a, b)
    finally:
        fn.empty = alloc
    assert type(out).__module__.split(".")[0] in ({"torch"} if kind == "torch" else {"jax", "jaxlib"})
    if (kind, t) != ("jax", "bf16"):  # NumPy cannot export bfloat16 by DLPack: JAX gets a copy
        assert data_pointer(out) == allocated[0].ctypes.data  # the result buffer opc wrote, not a copy
    np.testing.assert_allclose(as_float64(out), oracle(a, b), rtol=1e-2 if t in ("f16", "bf16") else 0)


class CudaArray:
    """Stands for a CuPy array or CUDA tensor: DLPack says it lives in CUDA memory (kDLCUDA = 2)."""

    def __dlpack__(self, **kwargs):
        raise AssertionError("opc must not export device memory")

    def __dlpack_device__(self):
        return (2, 0)


def torch_case(case: str):
    torch = need("torch")
    x = torch.ones(SHAPE, dtype=torch.float32)
    return {"f64": x.double(), "strided": torch.ones(3, 2).t(), "grad": x.requires_grad_(),
            "shape": torch.ones(3, 2)}[case]


@pytest.mark.parametrize("case, message", [
    ("f64", "argument 'a' must have dtype float32, got float64; opc reads DLPack arrays in place"),
    ("strided", "argument 'a' is not contiguous (strides (4, 8) for shape (2, 3))"),
    ("grad", "argument 'a' requires grad, and a plain opc function records no autograd: compile with grad=True"),
    ("shape", "argument 'a' must have shape (2, 3), got (3, 2)"),
])
def test_what_cannot_be_read_in_place_is_refused_naming_the_argument(modules, case, message):
    with pytest.raises(ValueError, match=r"^add_f32\(\): ") as err:
        modules["numpy"].add_f32(torch_case(case), np.ones(SHAPE, np.float32))
    assert message in str(err.value)


def test_device_memory_is_refused_before_it_is_touched(modules):
    with pytest.raises(ValueError, match=r"add_f32\(\): argument 'b' lives in CUDA device memory \(device 0\), "
                                         r"which this function cannot read: .*copy the array to the CPU first"):
        modules["numpy"].add_f32(np.ones(SHAPE, np.float32), CudaArray())


def test_a_torch_tensor_off_the_cpu_is_refused(modules):
    torch = need("torch")
    with pytest.raises(ValueError, match=r"add_f32\(\): argument 'a' lives in meta memory, which this function "
                                         r"cannot read: .*x\.cpu\(\)"):
        modules["numpy"].add_f32(torch.ones(SHAPE, device="meta"), np.ones(SHAPE, np.float32))


def test_a_jax_array_of_the_wrong_dtype_is_refused(modules):
    jnp = need("jax").numpy
    with pytest.raises(ValueError, match=r"argument 'b' must have dtype float64, got float32"):
        modules["numpy"].add_f64(np.ones(SHAPE), jnp.ones(SHAPE, jnp.float32))


@pytest.mark.parametrize("arrays, error, message", [
    ("cupy", ValueError, "arrays must be one of 'numpy', 'torch', 'jax', got 'cupy'"),
    (None, ValueError, "arrays must be one of"),
])
def test_bad_arrays_option(arrays, error, message):
    with pytest.raises(error, match=message):
        opc.compile(SOURCE, arrays=arrays)
